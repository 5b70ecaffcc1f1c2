// rocmforge_dequant_abi.h: the tile of the block-format dequantisation kernel
// (kernels/dequant.hip) that its launcher (crates/rocm-kernels/src/quant/dequant.rs, through
// abi/dequant.rs) sizes its grid with. See rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_DEQUANT_ABI_H
#define ROCMFORGE_DEQUANT_ABI_H

#include "rocmforge_abi.h"

// Quant blocks a tile: 256 x 34 bytes (q8_0, the largest) = 8.5 KB of shared memory.
#define RF_DEQUANT_TILE 256

#endif // ROCMFORGE_DEQUANT_ABI_H
