// Unfused attention: the two matrix products around the softmax, as separate kernels.
//
//   scores:   S[b, h, i, j] = scale * sum_d Q[b, i, h, d] * K[b, j, h / group, d]     (S in f32)
//   weighted: O[b, i, h, d] = sum_j P[b, h, i, j] * V[b, j, h / group, d]            (P in f32)
//
// with softmax (kernels/softmax.hip, causal mask and all) in between. This is the debugging and
// reference pipeline next to flash attention (kernels/flash_*.hip): it materialises the
// [batch, heads, seq_q, seq_k] scores, so it is for checking, not for speed.
//
// Both are one batched GEMM, C[m, n] = alpha * sum_k A[m, k] * B[k, n], per (batch, head), with
// every operand addressed by element strides (the tensors' layouts differ: Q/K/V/O are
// [b, s, h, d] or [b, h, s, d] or strided, S/P contiguous [b, h, sq, sk]). B's head is
// h / group_b, so K and V are shared by `group` query heads (MQA/GQA) without copies.
//
// Tiles: a block of 256 threads computes 64 x 64 outputs (4 x 4 per thread) from 64 x 16 slices
// of A and 16 x 64 slices of B staged in shared memory as f32. Loads follow whichever of the
// operand's strides is 1, so they are coalesced for every layout above.

#include "rocmforge.h"
#include "rocmforge_attention_abi.h"

template <typename TA, typename TB, typename TC>
RF_DEVICE void rf_attn_gemm(const rf_attn_gemm_params& p) {
    __shared__ float as[RF_GEMM_K][RF_GEMM_TILE + 1];
    __shared__ float bs[RF_GEMM_K][RF_GEMM_TILE + 1];
    const int tid = threadIdx.x;
    const int tx = tid % 16; // output columns tx + 16 * c
    const int ty = tid / 16; // output rows ty + 16 * r
    const int m0 = blockIdx.y * RF_GEMM_TILE;
    const int n0 = blockIdx.x * RF_GEMM_TILE;
    const rf_u64 planes = (rf_u64)p.batch * (rf_u64)p.heads;
    for (rf_u64 plane = blockIdx.z; plane < planes; plane += gridDim.z) {
        const rf_u64 b = plane / (rf_u64)p.heads;
        const rf_u64 h = plane % (rf_u64)p.heads;
        const TA* a = (const TA*)p.a + b * p.a_batch + h * p.a_head;
        const TB* bm = (const TB*)p.b + b * p.b_batch + (h / (rf_u64)p.group_b) * p.b_head;
        TC* c = (TC*)p.c + b * p.c_batch + h * p.c_head;
        float acc[4][4] = {};
        for (int k0 = 0; k0 < p.k; k0 += RF_GEMM_K) {
            __syncthreads();
            for (int e = tid; e < RF_GEMM_TILE * RF_GEMM_K; e += RF_GEMM_THREADS) {
                // A: along k when k is the unit stride, else along m.
                const int am = p.a_k == 1 ? e / RF_GEMM_K : e % RF_GEMM_TILE;
                const int ak = p.a_k == 1 ? e % RF_GEMM_K : e / RF_GEMM_TILE;
                const int gm = m0 + am, gk = k0 + ak;
                as[ak][am] = (gm < p.m && gk < p.k) ? rf_to_float(a[(rf_u64)gm * p.a_m + (rf_u64)gk * p.a_k]) : 0.0f;
                const int bn = p.b_k == 1 ? e / RF_GEMM_K : e % RF_GEMM_TILE;
                const int bk = p.b_k == 1 ? e % RF_GEMM_K : e / RF_GEMM_TILE;
                const int gn = n0 + bn, gk2 = k0 + bk;
                bs[bk][bn] =
                    (gn < p.n && gk2 < p.k) ? rf_to_float(bm[(rf_u64)gk2 * p.b_k + (rf_u64)gn * p.b_n]) : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < RF_GEMM_K; ++kk) {
                float av[4], bv[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) av[r] = as[kk][ty + 16 * r];
#pragma unroll
                for (int q = 0; q < 4; ++q) bv[q] = bs[kk][tx + 16 * q];
#pragma unroll
                for (int r = 0; r < 4; ++r)
#pragma unroll
                    for (int q = 0; q < 4; ++q) acc[r][q] = fmaf(av[r], bv[q], acc[r][q]);
            }
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int gm = m0 + ty + 16 * r;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int gn = n0 + tx + 16 * q;
                if (gm < p.m && gn < p.n) {
                    c[(rf_u64)gm * p.c_m + (rf_u64)gn * p.c_n] = rf_from_float<TC>(p.alpha * acc[r][q]);
                }
            }
        }
    }
}

#define RF_ATTN_ENTRIES(suffix, T)                                                                 \
    RF_KERNEL void __launch_bounds__(RF_GEMM_THREADS) rf_attention_scores_##suffix(rf_attn_gemm_params p) { \
        rf_attn_gemm<T, T, float>(p);                                                              \
    }                                                                                              \
    RF_KERNEL void __launch_bounds__(RF_GEMM_THREADS) rf_attention_weighted_##suffix(rf_attn_gemm_params p) { \
        rf_attn_gemm<float, T, T>(p);                                                              \
    }

RF_FOR_EACH_DTYPE(RF_ATTN_ENTRIES)
