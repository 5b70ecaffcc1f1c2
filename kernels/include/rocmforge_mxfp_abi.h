// rocmforge_mxfp_abi.h: the shapes of the MXFP matrix-vector and matrix-matrix kernels
// (kernels/mxfp.hip) that their launcher (crates/rocm-kernels/src/quant/mxfp.rs, through
// abi/mxfp.rs) sizes grids and shared memory with. See rocmforge_abi.h for the rules of an ABI
// header.

#ifndef ROCMFORGE_MXFP_ABI_H
#define ROCMFORGE_MXFP_ABI_H

#include "rocmforge_abi.h"

// The portable matrix-vector kernel.
// Rows of W each warp of the matrix-vector kernel owns (the launcher sizes shared memory for it).
#define RF_MX_ROWS 2
// Floats a staged group of 32 activations occupies (4 of padding against bank conflicts).
#define RF_MX_XGROUP 36
// Bytes of the element table at the start of shared memory (64 floats: the 6-bit codes).
#define RF_MX_LUT_BYTES 256

// The matrix-core matrix-vector kernel: rows a block owns, its warps, weight blocks a warp stages
// per row and step, stages in flight.
#define RF_MXM_ROWS 16
#define RF_MXM_WARPS 4
#define RF_MXM_CHUNK 16
#define RF_MXM_STAGES 2

// The matrix-matrix kernel: output tile and threads.
#define RF_MX_TILE 64
#define RF_MX_MM_THREADS 256

#endif // ROCMFORGE_MXFP_ABI_H
