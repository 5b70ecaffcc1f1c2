// rocmforge_attention_abi.h: the parameter block of the unfused attention kernels
// (kernels/attention.hip), shared with their launcher (crates/rocm-kernels/src/attention/
// unfused.rs, through the generated abi/attention.rs). See rocmforge_abi.h for the rules of an
// ABI header.

#ifndef ROCMFORGE_ATTENTION_ABI_H
#define ROCMFORGE_ATTENTION_ABI_H

#include "rocmforge_abi.h"

// A block computes an RF_GEMM_TILE x RF_GEMM_TILE tile of C with RF_GEMM_THREADS threads,
// RF_GEMM_K values of k a step.
#define RF_GEMM_TILE 64
#define RF_GEMM_K 16
#define RF_GEMM_THREADS 256

// One batched product C = alpha A B (QK^T or P V) over [batch, heads] planes, element strides.
struct rf_attn_gemm_params {
    RF_ABI_PTR(const void) a;
    RF_ABI_PTR(const void) b;
    RF_ABI_PTR(void) c;
    unsigned long long a_batch, a_head, a_m, a_k;
    unsigned long long b_batch, b_head, b_k, b_n;
    unsigned long long c_batch, c_head, c_m, c_n;
    int m, n, k;
    int heads;   // heads of A and C; the grid's z walks batch * heads
    int batch;
    int group_b; // B's head = h / group_b
    float alpha;
    int pad;
};

#endif // ROCMFORGE_ATTENTION_ABI_H
