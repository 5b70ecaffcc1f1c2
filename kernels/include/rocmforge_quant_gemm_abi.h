// rocmforge_quant_gemm_abi.h: the mixed-input matrix-core GEMM (kernels/quant_gemm_wgmma.hip),
// which decodes block-quantised weights in its own tile loop, and its launcher
// (crates/rocm-kernels/src/quant/quant_gemm.rs, through abi/quant_gemm.rs). See rocmforge_abi.h
// for the rules of an ABI header.

#ifndef ROCMFORGE_QUANT_GEMM_ABI_H
#define ROCMFORGE_QUANT_GEMM_ABI_H

#include "rocmforge_abi.h"

// A block computes RF_QGEMM_ROWS rows of W (output features) for RF_QGEMM_TOKENS rows of x:
// one copying warpgroup and RF_QGEMM_MATH_WGS math warpgroups of 128 threads, each math
// warpgroup RF_QGEMM_ROWS / RF_QGEMM_MATH_WGS rows.
#define RF_QGEMM_ROWS 128
#define RF_QGEMM_TOKENS 256
#define RF_QGEMM_MATH_WGS 2
#define RF_QGEMM_THREADS (128 * (RF_QGEMM_MATH_WGS + 1))

// Per format (entry rf_qgemm_wgmma_<format>_<T>(rf_qgemm_params, rf_tensor_map)): k a stage
// (KS), the width in bytes of the boxes in which the kernel copies W (BOX: the tensor map passed
// with the parameters covers W's bytes as `rows` rows of k / block elements blocks, boxes of
// RF_QGEMM_ROWS rows x BOX bytes), the boxes a stage (BOXES), the order of x's columns its decode
// needs (X_ORDER, below) and the stages of the ring (STAGES). A block's dynamic shared memory is
// 1024 (alignment) + STAGES * (RF_QGEMM_TOKENS * KS * 2 + RF_QGEMM_ROWS * BOXES * BOX); k must be a
// multiple of KS and a row of W's bytes of 16 (the tensor map's row stride).
//
// X_ORDER: how rf_qgemm_pack_x permutes x's columns within each 64, so that the 16 wgmma k a
// math thread holds of a 64-wide chunk are the weight columns its format decodes best together:
// RF_QGEMM_X_RUNS_OF_16, 16 contiguous columns (16 q .. 16 q + 15 for the thread's q = lane % 4);
// RF_QGEMM_X_NIBBLE_PAIRS, the columns with bits 3 and 4 of their index swapped: 8 contiguous
// columns and the 8 that are 16 further, which are both nibbles of 8 bytes of a 32-element block
// whose element i is the low nibble of byte i and element 16 + i the high one (q4_0, mxfp4).
#define RF_QGEMM_X_RUNS_OF_16 0
#define RF_QGEMM_X_NIBBLE_PAIRS 1
#define RF_QGEMM_Q8_0_KS 64
#define RF_QGEMM_Q8_0_BOX 96
#define RF_QGEMM_Q8_0_BOXES 1
#define RF_QGEMM_Q8_0_X_ORDER RF_QGEMM_X_RUNS_OF_16
#define RF_QGEMM_Q8_0_STAGES 4
#define RF_QGEMM_Q4_0_KS 64
#define RF_QGEMM_Q4_0_BOX 64
#define RF_QGEMM_Q4_0_BOXES 1
#define RF_QGEMM_Q4_0_X_ORDER RF_QGEMM_X_NIBBLE_PAIRS
#define RF_QGEMM_Q4_0_STAGES 4
#define RF_QGEMM_MXFP4_KS 128
#define RF_QGEMM_MXFP4_BOX 96
#define RF_QGEMM_MXFP4_BOXES 1
#define RF_QGEMM_MXFP4_X_ORDER RF_QGEMM_X_NIBBLE_PAIRS
#define RF_QGEMM_MXFP4_STAGES 2
#define RF_QGEMM_Q4_K_KS 64
#define RF_QGEMM_Q4_K_BOX 32
#define RF_QGEMM_Q4_K_BOXES 2
#define RF_QGEMM_Q4_K_X_ORDER RF_QGEMM_X_RUNS_OF_16
#define RF_QGEMM_Q4_K_STAGES 4
#define RF_QGEMM_Q5_K_KS 64
#define RF_QGEMM_Q5_K_BOX 48
#define RF_QGEMM_Q5_K_BOXES 2
#define RF_QGEMM_Q5_K_X_ORDER RF_QGEMM_X_RUNS_OF_16
#define RF_QGEMM_Q5_K_STAGES 4
#define RF_QGEMM_Q6_K_KS 64
#define RF_QGEMM_Q6_K_BOX 96
#define RF_QGEMM_Q6_K_BOXES 2
#define RF_QGEMM_Q6_K_X_ORDER RF_QGEMM_X_RUNS_OF_16
#define RF_QGEMM_Q6_K_STAGES 4

// y[t, r] = sum_k x[t, k] W[r, k]: W reaches the GEMM only through its tensor map, x is [tokens,
// k] with leading dimension x_ld, y is [tokens, rows] with y_ld (both in elements of the compute
// type).
// x_tiles: x re-laid out by rf_qgemm_pack_x_<T> (written by it, read by the GEMM):
// ceil(tokens / RF_QGEMM_TOKENS) * (k / 64) tiles of RF_QGEMM_TILE_BYTES.
#define RF_QGEMM_TILE_BYTES (RF_QGEMM_TOKENS * 64 * 2)
// x_order: the params' field, as each format's X_ORDER above says.
struct rf_qgemm_params {
    RF_ABI_PTR(const void) x;
    RF_ABI_PTR(void) x_tiles;
    RF_ABI_PTR(void) y;
    unsigned long long x_ld, y_ld;
    int rows, k, tokens;
    int x_order;
};

#endif // ROCMFORGE_QUANT_GEMM_ABI_H
