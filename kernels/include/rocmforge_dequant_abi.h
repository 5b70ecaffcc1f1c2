// rocmforge_dequant_abi.h: the tile of the block-format dequantisation kernel
// (kernels/dequant.hip) that its launcher (crates/rocm-kernels/src/quant/dequant.rs, through
// abi/dequant.rs) sizes its grid with. See rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_DEQUANT_ABI_H
#define ROCMFORGE_DEQUANT_ABI_H

#include "rocmforge_abi.h"

// Elements a tile: 256 blocks of 32 (q8_0, the largest, stages 256 x 34 bytes = 8.5 KB of shared
// memory) or 32 k-quant super-blocks of 256 (q6_K: 32 x 210 bytes = 6.6 KB).
#define RF_DEQUANT_TILE_ELEMS 8192

#endif // ROCMFORGE_DEQUANT_ABI_H
