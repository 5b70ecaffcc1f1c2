// rocmforge_gemm_abi.h: the parameter block of the portable GEMM kernels (kernels/gemm.hip),
// shared with their launcher (crates/rocm-kernels/src/gemm.rs, through the generated
// abi/gemm.rs). See rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_GEMM_ABI_H
#define ROCMFORGE_GEMM_ABI_H

#include "rocmforge_abi.h"

// The tiled kernels: RF_GEMM_BM x RF_GEMM_BN outputs a block, RF_GEMM_BK values of k a step,
// RF_GEMM_THREADS threads (the tile loaders are written for it). The skinny kernels take up to
// RF_SKINNY_M output rows, RF_SKINNY_COLS columns a block when B is stored [K, N].
#define RF_GEMM_BM 128
#define RF_GEMM_BN 128
#define RF_GEMM_BK 16
#define RF_GEMM_THREADS 256
#define RF_SKINNY_M 8
#define RF_SKINNY_COLS 32

// C = alpha op(A) op(B) + beta C, row-major with leading dimensions, batched by strides.
struct rf_gemm_params {
    RF_ABI_PTR(const void) a;
    RF_ABI_PTR(const void) b;
    RF_ABI_PTR(void) c;
    unsigned long long lda, ldb, ldc;
    unsigned long long stride_a, stride_b, stride_c;
    int m, n, k, batch;
    float alpha, beta;
    int trans_a; // read by rf_gemm_skinny_n (the tiled kernels are instantiated per layout)
    int pad;
};

#endif // ROCMFORGE_GEMM_ABI_H
