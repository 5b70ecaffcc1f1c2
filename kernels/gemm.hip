// Portable GEMM: the fallback when no vendor BLAS can be loaded, and the reference speed the
// vendor library is compared with (docs/kernels/gemm.md).
//
//   C[M, N] = alpha * op(A)[M, K] op(B)[K, N] + beta * C          (row-major, per batch)
//
// A is stored [M, K] (op = as stored) or [K, M] (op = transpose); B is [K, N] or [N, K] (the
// nn.Linear weight layout: y = x W^T). Leading dimensions count elements; elements between a
// row's end and the next row's start are never touched. f32/f16/bf16 storage, f32 arithmetic,
// one rounding per stored element. beta == 0 does not read C (it may hold NaN); alpha == 0 or
// K == 0 reads neither A nor B.
//
// Two kernels, picked by the launcher (crates/rocm-kernels/src/gemm.rs):
//
// - rf_gemm_tiled_<ta><tb>_<dt>: 128 x 128 output tiles, 256 threads each computing 8 x 8 in
//   two 4 x 4 quadrants 64 apart (so a warp's shared-memory reads are broadcasts or one
//   contiguous run). K advances 16 at a time through two shared-memory buffers of f32: the
//   next slice is loaded into registers while the current one is multiplied, then stored into
//   the other buffer, one barrier per slice. Each thread loads 8 consecutive elements along the
//   operand's contiguous axis, as 16-byte vectors when the base is aligned and the leading
//   dimension is a whole number of vectors, else element by element with bounds checks (tails).
// - rf_gemm_skinny_<tb>_<dt>: M <= 8 (decoding a token or a few; for B stored [N, K] only with
//   A stored [M, K]). A tile of 128 rows would be
//   at most 1/16 useful, and the product is bound by reading B once, so B streams through with
//   every output row accumulated together: for B stored [N, K] a warp per output column reads
//   the column's K contiguous elements (16-byte vectors) and reduces across lanes; for B stored
//   [K, N] 32 consecutive columns per block, K split over 8 thread groups reduced in shared
//   memory.
//
// The portable SIMT path is what every GPU runs; matrix-core paths (mma.sync, MFMA) are not
// written yet: with a vendor BLAS present, the front door does not call this kernel at all.

#include "rocmforge.h"
#include "rocmforge_gemm_abi.h"

// Padding keeps rows 16-byte aligned for the float4 reads (and moves rows across banks).
#define RF_GEMM_LDS (RF_GEMM_BM + 4)

#define RF_SKINNY_GROUPS (RF_GEMM_THREADS / RF_SKINNY_COLS)

// Whether 8 consecutive elements from a multiple-of-8 offset of every row are whole 16-byte
// vectors: an aligned base and a leading dimension of whole vectors.
template <typename T> RF_DEVICE bool rf_gemm_vector_ok(const T* base, rf_u64 ld) {
    return rf_is_aligned16(base) && ld % (rf_u64)rf_pack16<T>::N == 0;
}

// out[0..8) = x[r * ld + c + j] as floats, zero outside rows [0, rows) and columns [0, cols):
// 16-byte vectors (rf_load_n) when `vector` (rf_gemm_vector_ok) and all 8 lie inside the row.
template <typename T>
RF_DEVICE void rf_gemm_load8(const T* x, rf_u64 ld, int rows, int cols, int r, int c, bool vector, float* out) {
    if (r < rows) {
        const T* p = x + (rf_u64)r * ld + (rf_u64)c;
        if (vector && c + 8 <= cols) {
            rf_load_n<T, 8, true>(p, out);
            return;
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) out[j] = c + j < cols ? rf_to_float(p[j]) : 0.0f;
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = 0.0f;
}

// One operand's slice of a tile: `outer` (M for A, N for B) by RF_GEMM_BK along K, staged as
// s[k][outer]. K_CONTIG: element (o, kk) at x[o * ld + kk] (A as stored, B transposed), else at
// x[kk * ld + o] (A transposed, B as stored). Either way each thread moves 8 elements that are
// consecutive in memory.
template <typename T, bool K_CONTIG> struct rf_gemm_slice {
    static RF_DEVICE void load(const T* x, rf_u64 ld, int outer, int k, int o0, int k0, bool vector, float* r) {
        const int tid = threadIdx.x;
        if (K_CONTIG) {
            rf_gemm_load8(x, ld, outer, k, o0 + tid / 2, k0 + (tid % 2) * 8, vector, r);
        } else {
            rf_gemm_load8(x, ld, k, outer, k0 + tid / 16, o0 + (tid % 16) * 8, vector, r);
        }
    }
    static RF_DEVICE void store(float (*s)[RF_GEMM_LDS], const float* r) {
        const int tid = threadIdx.x;
        if (K_CONTIG) {
            const int o = tid / 2, kb = (tid % 2) * 8;
#pragma unroll
            for (int j = 0; j < 8; ++j) s[kb + j][o] = r[j];
        } else {
            float* row = &s[tid / 16][(tid % 16) * 8];
            *reinterpret_cast<float4*>(row) = make_float4(r[0], r[1], r[2], r[3]);
            *reinterpret_cast<float4*>(row + 4) = make_float4(r[4], r[5], r[6], r[7]);
        }
    }
};

// c = alpha * acc + beta * c, rounded once; c is not read when beta == 0.
template <typename T> RF_DEVICE void rf_gemm_store(T* c, float acc, float alpha, float beta) {
    float v = alpha * acc;
    if (beta != 0.0f) v = fmaf(beta, rf_to_float(*c), v);
    *c = rf_from_float<T>(v);
}

template <typename T, bool TRANS_A, bool TRANS_B> RF_DEVICE void rf_gemm_tiled(const rf_gemm_params& p) {
    // 16-byte aligned for the float4 accesses.
    __shared__ float as[2][RF_GEMM_BK][RF_GEMM_LDS] __attribute__((aligned(16)));
    __shared__ float bs[2][RF_GEMM_BK][RF_GEMM_LDS] __attribute__((aligned(16)));
    typedef rf_gemm_slice<T, !TRANS_A> SliceA;
    typedef rf_gemm_slice<T, TRANS_B> SliceB;
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const int n0 = blockIdx.x * RF_GEMM_BN;
    const int k_tiles = p.alpha == 0.0f ? 0 : (p.k + RF_GEMM_BK - 1) / RF_GEMM_BK;
    for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
        const T* a = (const T*)p.a + (rf_u64)batch * p.stride_a;
        const T* b = (const T*)p.b + (rf_u64)batch * p.stride_b;
        T* c = (T*)p.c + (rf_u64)batch * p.stride_c;
        const bool vec_a = rf_gemm_vector_ok(a, p.lda), vec_b = rf_gemm_vector_ok(b, p.ldb);
        for (int m0 = blockIdx.y * RF_GEMM_BM; m0 < p.m; m0 += gridDim.y * RF_GEMM_BM) {
            float acc[8][8];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
            float ra[8], rb[8];
            if (k_tiles > 0) {
                SliceA::load(a, p.lda, p.m, p.k, m0, 0, vec_a, ra);
                SliceB::load(b, p.ldb, p.n, p.k, n0, 0, vec_b, rb);
                SliceA::store(as[0], ra);
                SliceB::store(bs[0], rb);
                __syncthreads();
            }
            for (int t = 0; t < k_tiles; ++t) {
                const int cur = t & 1;
                const bool more = t + 1 < k_tiles;
                if (more) {
                    const int k0 = (t + 1) * RF_GEMM_BK;
                    SliceA::load(a, p.lda, p.m, p.k, m0, k0, vec_a, ra);
                    SliceB::load(b, p.ldb, p.n, p.k, n0, k0, vec_b, rb);
                }
#pragma unroll
                for (int kk = 0; kk < RF_GEMM_BK; ++kk) {
                    const float4 a0 = *reinterpret_cast<const float4*>(&as[cur][kk][ty * 4]);
                    const float4 a1 = *reinterpret_cast<const float4*>(&as[cur][kk][64 + ty * 4]);
                    const float4 b0 = *reinterpret_cast<const float4*>(&bs[cur][kk][tx * 4]);
                    const float4 b1 = *reinterpret_cast<const float4*>(&bs[cur][kk][64 + tx * 4]);
                    const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                    const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
                    for (int i = 0; i < 8; ++i)
#pragma unroll
                        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
                }
                if (more) {
                    SliceA::store(as[cur ^ 1], ra);
                    SliceB::store(bs[cur ^ 1], rb);
                }
                // Orders this slice's reads before the next overwrite of its buffer, and the
                // stores above before the next slice's reads.
                __syncthreads();
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
                if (row >= p.m) continue;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int col = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
                    if (col < p.n) rf_gemm_store(c + (rf_u64)row * p.ldc + col, acc[i][j], p.alpha, p.beta);
                }
            }
        }
    }
}

// op(A)(i, k) for rf_gemm_skinny_n, which takes A's layout at run time (A is small: M <= 8).
template <typename T> RF_DEVICE float rf_gemm_a_at(const T* a, const rf_gemm_params& p, int i, int k) {
    return rf_to_float(p.trans_a ? a[(rf_u64)k * p.lda + i] : a[(rf_u64)i * p.lda + k]);
}

// B stored [N, K], A stored [M, K] (the launcher sends a transposed A to the tiled kernel: a
// per-element path for it here cost spills in the hot loop): one warp per output column;
// lanes take 8 consecutive k at a time.
template <typename T> RF_DEVICE void rf_gemm_skinny_t(const rf_gemm_params& p) {
    const int warp = rf_warp_size(), lane = rf_lane_id();
    const int warps = blockDim.x / warp;
    const int first = blockIdx.x * warps + threadIdx.x / warp;
    const int step = gridDim.x * warps;
    const bool read = p.alpha != 0.0f;
    for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
        const T* a = (const T*)p.a + (rf_u64)batch * p.stride_a;
        const T* b = (const T*)p.b + (rf_u64)batch * p.stride_b;
        T* c = (T*)p.c + (rf_u64)batch * p.stride_c;
        const bool vec_a = rf_gemm_vector_ok(a, p.lda);
        const bool vec_b = rf_gemm_vector_ok(b, p.ldb);
        for (int n = first; n < p.n; n += step) {
            float acc[RF_SKINNY_M];
#pragma unroll
            for (int i = 0; i < RF_SKINNY_M; ++i) acc[i] = 0.0f;
            const T* column = b + (rf_u64)n * p.ldb;
            // Two 16-byte loads of B in flight per lane before their products (the second
            // reads zeros past K).
            for (int k = lane * 8; read && k < p.k; k += 2 * warp * 8) {
                const int k1 = k + warp * 8;
                float w0[8], w1[8];
                rf_gemm_load8(column, 0, 1, p.k, 0, k, vec_b, w0);
                rf_gemm_load8(column, 0, 1, p.k, 0, k1, vec_b, w1);
#pragma unroll
                for (int i = 0; i < RF_SKINNY_M; ++i) {
                    if (i < p.m) {
                        float x0[8], x1[8];
                        rf_gemm_load8(a, p.lda, p.m, p.k, i, k, vec_a, x0);
                        rf_gemm_load8(a, p.lda, p.m, p.k, i, k1, vec_a, x1);
#pragma unroll
                        for (int j = 0; j < 8; ++j) acc[i] = fmaf(x0[j], w0[j], acc[i]);
#pragma unroll
                        for (int j = 0; j < 8; ++j) acc[i] = fmaf(x1[j], w1[j], acc[i]);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < RF_SKINNY_M; ++i) {
                if (i < p.m) { // the same for the whole warp: every lane joins the shuffles
                    const float sum = rf_warp_sum(acc[i]);
                    if (lane == 0) rf_gemm_store(c + (rf_u64)i * p.ldc + n, sum, p.alpha, p.beta);
                }
            }
        }
    }
}

// B stored [K, N]: 32 consecutive columns per block, a thread per column and K group; the
// groups' partial sums are added in shared memory.
template <typename T> RF_DEVICE void rf_gemm_skinny_n(const rf_gemm_params& p) {
    __shared__ float part[RF_SKINNY_GROUPS][RF_SKINNY_COLS];
    const int col = threadIdx.x % RF_SKINNY_COLS, group = threadIdx.x / RF_SKINNY_COLS;
    const int G = RF_SKINNY_GROUPS;
    const bool read = p.alpha != 0.0f;
    for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
        const T* a = (const T*)p.a + (rf_u64)batch * p.stride_a;
        const T* b = (const T*)p.b + (rf_u64)batch * p.stride_b;
        T* c = (T*)p.c + (rf_u64)batch * p.stride_c;
        for (int n0 = blockIdx.x * RF_SKINNY_COLS; n0 < p.n; n0 += gridDim.x * RF_SKINNY_COLS) {
            const int n = n0 + col;
            float acc[RF_SKINNY_M];
#pragma unroll
            for (int i = 0; i < RF_SKINNY_M; ++i) acc[i] = 0.0f;
            if (read && n < p.n) {
                int k = group;
                // Four loads of B in flight before their products.
                for (; k + 3 * G < p.k; k += 4 * G) {
                    float w[4];
#pragma unroll
                    for (int u = 0; u < 4; ++u) w[u] = rf_to_float(b[(rf_u64)(k + u * G) * p.ldb + n]);
#pragma unroll
                    for (int i = 0; i < RF_SKINNY_M; ++i) {
                        if (i < p.m) {
#pragma unroll
                            for (int u = 0; u < 4; ++u) acc[i] = fmaf(rf_gemm_a_at(a, p, i, k + u * G), w[u], acc[i]);
                        }
                    }
                }
                for (; k < p.k; k += G) {
                    const float w = rf_to_float(b[(rf_u64)k * p.ldb + n]);
#pragma unroll
                    for (int i = 0; i < RF_SKINNY_M; ++i) {
                        if (i < p.m) acc[i] = fmaf(rf_gemm_a_at(a, p, i, k), w, acc[i]);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < RF_SKINNY_M; ++i) {
                if (i < p.m) { // the same for the whole block: every thread reaches the barriers
                    part[group][col] = acc[i];
                    __syncthreads();
                    if (group == 0 && n < p.n) {
                        float sum = 0.0f;
#pragma unroll
                        for (int g = 0; g < RF_SKINNY_GROUPS; ++g) sum += part[g][col];
                        rf_gemm_store(c + (rf_u64)i * p.ldc + n, sum, p.alpha, p.beta);
                    }
                    __syncthreads();
                }
            }
        }
    }
}

#define RF_GEMM_ENTRIES(suffix, T)                                                                      \
    RF_KERNEL void __launch_bounds__(RF_GEMM_THREADS) rf_gemm_tiled_nn_##suffix(rf_gemm_params p) {  \
        rf_gemm_tiled<T, false, false>(p);                                                              \
    }                                                                                                   \
    RF_KERNEL void __launch_bounds__(RF_GEMM_THREADS) rf_gemm_tiled_nt_##suffix(rf_gemm_params p) {  \
        rf_gemm_tiled<T, false, true>(p);                                                               \
    }                                                                                                   \
    RF_KERNEL void __launch_bounds__(RF_GEMM_THREADS) rf_gemm_tiled_tn_##suffix(rf_gemm_params p) {  \
        rf_gemm_tiled<T, true, false>(p);                                                               \
    }                                                                                                   \
    RF_KERNEL void __launch_bounds__(RF_GEMM_THREADS) rf_gemm_tiled_tt_##suffix(rf_gemm_params p) {  \
        rf_gemm_tiled<T, true, true>(p);                                                                \
    }                                                                                                   \
    RF_KERNEL void __launch_bounds__(RF_GEMM_THREADS) rf_gemm_skinny_n_##suffix(rf_gemm_params p) {  \
        rf_gemm_skinny_n<T>(p);                                                                         \
    }                                                                                                   \
    RF_KERNEL void __launch_bounds__(RF_GEMM_THREADS) rf_gemm_skinny_t_##suffix(rf_gemm_params p) {  \
        rf_gemm_skinny_t<T>(p);                                                                         \
    }

RF_FOR_EACH_DTYPE(RF_GEMM_ENTRIES)
