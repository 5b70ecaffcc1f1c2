// RMSNorm over the last dimension, one block per row:
//
//   rf_rmsnorm[_group]_<dt>:           out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight
//   rf_rmsnorm_residual[_group]_<dt>:  s = round_T(x[r, :] + residual[r, :]); residual[r, :] = s;
//                                      out[r, :] = s / sqrt(mean(s^2) + eps) * weight
//
// Storage f32, f16 or bf16 (<dt>), arithmetic in f32, one rounding on each store. Rows start
// `*_stride` elements apart; `out` may be `x` (in place) since every element is read before the
// same thread writes it. `weight` holds `cols` elements.
//
// Speed: each thread keeps its part of the row in registers, so x (and the residual) are read
// from memory once; rows longer than the block can cache take a streaming path that reads them
// twice. Loads and stores are 16 bytes wide when the pointers and strides allow it (a scalar
// tail covers cols % N), one element wide otherwise. The sum of squares is reduced with warp
// shuffles, then across warps through shared memory (rf_block_sum, rocmforge_reduce.h). Two
// kernels: the group path (v3) for 16-byte rows of up to 2 vectors a thread (raw vectors, few
// registers, many rows in flight), the block path (v1) for every other row.

#include "rocmforge.h"
#include "rocmforge_dependent_launch.h"
#include "rocmforge_reduce.h"
#include "rocmforge_rms.h"
#include "rocmforge_rmsnorm_abi.h"

// Every row this block owns (rows blockIdx.y * gridDim.x + blockIdx.x, then every
// gridDim.x * gridDim.y rows). V elements per access: 16-byte vectors or scalars (VECTOR).
// STREAM_ONLY drops the register cache (the group path's fallback, which must stay small).
template <typename T, bool RESIDUAL, bool VECTOR, bool STREAM_ONLY = false>
RF_DEVICE void rf_rms_rows(const T* x, T* residual, const T* weight, T* out, rf_u64 x_stride,
                           rf_u64 residual_stride, rf_u64 out_stride, rf_u64 rows, unsigned int cols,
                           float eps, float (*scratch)[RF_BLOCK_MAX_WARPS]) {
    typedef rf_access<T, VECTOR> A;
    constexpr int V = A::V;
    constexpr int K = VECTOR ? RF_RMS_CACHE / V : RF_RMS_CACHE_SCALAR; // accesses cached per thread
    const unsigned int t = threadIdx.x;
    const unsigned int block = blockDim.x;
    const unsigned int nv = cols / (unsigned int)V;         // whole vectors in a row
    const unsigned int tail = cols - nv * (unsigned int)V;  // elements after them (< V)
    const bool cached = !STREAM_ONLY && (rf_u64)nv <= (rf_u64)K * block;
    const float inv_cols = 1.0f / (float)cols;
    const rf_u64 step = (rf_u64)gridDim.x * gridDim.y;
    int parity = 0;
    for (rf_u64 row = (rf_u64)blockIdx.y * gridDim.x + blockIdx.x; row < rows; row += step) {
        const T* xr = x + row * x_stride;
        T* rr = RESIDUAL ? residual + row * residual_stride : nullptr;
        T* orow = out + row * out_stride;
        float* red = scratch[parity];
        parity ^= 1;
        float sumsq = 0.0f;
        if (cached) {
            float c[K][V];
            float ct = 0.0f;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = t + (unsigned int)k * block;
                if (i < nv) {
                    A::load(xr + (rf_u64)i * V, c[k]);
                    if (RESIDUAL) {
                        float r[V];
                        A::load(rr + (rf_u64)i * V, r);
#pragma unroll
                        for (int e = 0; e < V; ++e) {
                            c[k][e] = rf_rms_round<T>(c[k][e] + r[e]);
                        }
                        A::store(rr + (rf_u64)i * V, c[k]);
                    }
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        sumsq = fmaf(c[k][e], c[k][e], sumsq);
                    }
                }
            }
            if (t < tail) {
                const rf_u64 j = (rf_u64)nv * V + t;
                ct = rf_to_float(xr[j]);
                if (RESIDUAL) {
                    ct = rf_rms_round<T>(ct + rf_to_float(rr[j]));
                    rr[j] = rf_from_float<T>(ct);
                }
                sumsq = fmaf(ct, ct, sumsq);
            }
            const float scale = rf_rms_scale(rf_block_sum(sumsq, red), inv_cols, eps);
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = t + (unsigned int)k * block;
                if (i < nv) {
                    float w[V];
                    A::load(weight + (rf_u64)i * V, w);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        c[k][e] = c[k][e] * scale * w[e];
                    }
                    A::store(orow + (rf_u64)i * V, c[k]);
                }
            }
            if (t < tail) {
                const rf_u64 j = (rf_u64)nv * V + t;
                orow[j] = rf_from_float<T>(ct * scale * rf_to_float(weight[j]));
            }
        } else {
            // Streaming: the sum of squares first (writing the residual sum back), then the row
            // again, from the residual when there is one (this thread wrote those elements).
            for (unsigned int i = t; i < nv; i += block) {
                float v[V];
                A::load(xr + (rf_u64)i * V, v);
                if (RESIDUAL) {
                    float r[V];
                    A::load(rr + (rf_u64)i * V, r);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        v[e] = rf_rms_round<T>(v[e] + r[e]);
                    }
                    A::store(rr + (rf_u64)i * V, v);
                }
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    sumsq = fmaf(v[e], v[e], sumsq);
                }
            }
            if (t < tail) {
                const rf_u64 j = (rf_u64)nv * V + t;
                float v = rf_to_float(xr[j]);
                if (RESIDUAL) {
                    v = rf_rms_round<T>(v + rf_to_float(rr[j]));
                    rr[j] = rf_from_float<T>(v);
                }
                sumsq = fmaf(v, v, sumsq);
            }
            const float scale = rf_rms_scale(rf_block_sum(sumsq, red), inv_cols, eps);
            const T* src = RESIDUAL ? rr : xr;
            for (unsigned int i = t; i < nv; i += block) {
                float v[V];
                float w[V];
                A::load(src + (rf_u64)i * V, v);
                A::load(weight + (rf_u64)i * V, w);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    v[e] = v[e] * scale * w[e];
                }
                A::store(orow + (rf_u64)i * V, v);
            }
            if (t < tail) {
                const rf_u64 j = (rf_u64)nv * V + t;
                orow[j] = rf_from_float<T>(rf_to_float(src[j]) * scale * rf_to_float(weight[j]));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Group path (v3): one row per block of G warps, each thread holding RF_RMS_GROUP_CACHE 16-byte
// vectors of the row (the host sizes the block so: 256 threads for 4096 f16/bf16 columns, 512
// for 4096 f32). Each thread keeps its vectors as raw uint4s, issues all its loads of x (and of
// the residual) before using any, then the weight's (L1/L2 hits, in flight behind x's),
// accumulates the squares straight from the packed values, reduces over the block with one
// barrier, and widens, scales and rounds each vector again on the way out (two elements a cvt
// on sm_80+). Few registers (32 plain, 48 with the residual on sm_90) keep 8 (plain) or 5
// (residual) blocks, 64 KB or 80 KB of loads, in flight per SM, and each row's serial work after
// its loads land is short. The host sends scalar rows and rows longer than the cache to the
// block path; launched for one anyway, the kernel streams it (rf_rms_rows), correct but slow.
// ---------------------------------------------------------------------------------------------

// A zero the compiler cannot see through: added to the weight pointer inside the row loop, it
// keeps the compiler from hoisting the weight's addresses out of the loop and holding them in
// registers for the whole kernel, while the pointer keeps its global address space.
RF_DEVICE unsigned int rf_rms_opaque_zero() {
    unsigned int z = 0;
#if RF_PLATFORM_NVIDIA
    asm volatile("" : "+r"(z));
#endif
    return z;
}

template <typename T, bool RESIDUAL, int K>
RF_DEVICE void rf_rms_group_rows(const T* x, T* residual, const T* weight, T* out, rf_u64 x_stride,
                                 rf_u64 residual_stride, rf_u64 out_stride, rf_u64 rows, unsigned int cols,
                                 float eps, float (*scratch)[RF_BLOCK_MAX_WARPS]) {
    typedef rf_pack16<T> P;
    constexpr int V = P::N;
    const unsigned int t = threadIdx.x;
    const unsigned int block = blockDim.x;
    const unsigned int nv = cols / (unsigned int)V;         // whole vectors in a row
    const unsigned int tail = cols - nv * (unsigned int)V;  // elements after them (< V <= 8)
    const unsigned int jt = nv * (unsigned int)V + t;       // this thread's tail element, if t < tail
    const float inv_cols = 1.0f / (float)cols;
    const rf_u64 step = (rf_u64)gridDim.x * gridDim.y;
    int parity = 0;
    for (rf_u64 row = (rf_u64)blockIdx.y * gridDim.x + blockIdx.x; row < rows; row += step) {
        const T* xr = x + row * x_stride;
        T* rr = RESIDUAL ? residual + row * residual_stride : nullptr;
        T* orow = out + row * out_stride;
        const T* wr = weight + rf_rms_opaque_zero();
        uint4 c[K];  // x, then (residual form) the rounded sum
        uint4 w[K];
        float ct = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned int i = t + (unsigned int)k * block;
            if (i < nv) {
                c[k] = rf_load16(xr + (rf_u64)i * V);
            }
        }
        if (RESIDUAL) {
            uint4 q[K];
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = t + (unsigned int)k * block;
                if (i < nv) {
                    q[k] = rf_load16(rr + (rf_u64)i * V);
                }
            }
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = t + (unsigned int)k * block;
                if (i < nv) {
                    w[k] = rf_load16(wr + (rf_u64)i * V);
                }
            }
            if (t < tail) {
                ct = rf_rms_round<T>(rf_to_float(xr[jt]) + rf_to_float(rr[jt]));
                rr[jt] = rf_from_float<T>(ct);
            }
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = t + (unsigned int)k * block;
                if (i < nv) {
                    float a[V];
                    float b[V];
                    P::unpack(c[k], a);
                    P::unpack(q[k], b);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        a[e] += b[e];
                    }
                    c[k] = P::pack(a);
                    rf_store16(rr + (rf_u64)i * V, c[k]);
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = t + (unsigned int)k * block;
                if (i < nv) {
                    w[k] = rf_load16(wr + (rf_u64)i * V);
                }
            }
            if (t < tail) {
                ct = rf_to_float(xr[jt]);
            }
        }
        float part[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned int i = t + (unsigned int)k * block;
            part[k] = 0.0f;
            if (i < nv) {
                float v[V];
                P::unpack(c[k], v);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    part[k] = fmaf(v[e], v[e], part[k]);
                }
            }
        }
        float sumsq = ct * ct;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            sumsq += part[k];
        }
        const float scale = rf_rms_scale(rf_block_sum(sumsq, scratch[parity]), inv_cols, eps);
        parity ^= 1;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned int i = t + (unsigned int)k * block;
            if (i < nv) {
                float v[V];
                float wf[V];
                P::unpack(c[k], v);
                P::unpack(w[k], wf);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    v[e] = v[e] * scale * wf[e];
                }
                rf_store16(orow + (rf_u64)i * V, P::pack(v));
            }
        }
        if (t < tail) {
            orow[jt] = rf_from_float<T>(ct * scale * rf_to_float(wr[jt]));
        }
    }
}

// The 16-byte path when every pointer is 16-byte aligned and every row stride a whole number of
// vectors (so every row starts aligned), the scalar path otherwise. The host mirrors this test
// (`vectorised` in rmsnorm.rs) to size the launch.
template <typename T, bool RESIDUAL>
RF_DEVICE bool rf_rms_vector(const T* x, const T* residual, const T* weight, const T* out, rf_u64 x_stride,
                             rf_u64 residual_stride, rf_u64 out_stride, unsigned int cols) {
    constexpr rf_u64 N = (rf_u64)rf_pack16<T>::N;
    bool vector = cols >= N && rf_is_aligned16(x) && rf_is_aligned16(weight) && rf_is_aligned16(out) &&
                  x_stride % N == 0 && out_stride % N == 0;
    if (RESIDUAL) {
        vector = vector && rf_is_aligned16(residual) && residual_stride % N == 0;
    }
    return vector;
}

// Block path: one block per row.
template <typename T, bool RESIDUAL>
RF_DEVICE void rf_rmsnorm(const T* x, T* residual, const T* weight, T* out, rf_u64 x_stride,
                          rf_u64 residual_stride, rf_u64 out_stride, rf_u64 rows, unsigned int cols,
                          float eps) {
    __shared__ float scratch[2][RF_BLOCK_MAX_WARPS];
    if (rf_rms_vector<T, RESIDUAL>(x, residual, weight, out, x_stride, residual_stride, out_stride, cols)) {
        rf_rms_rows<T, RESIDUAL, true>(x, residual, weight, out, x_stride, residual_stride, out_stride,
                                       rows, cols, eps, scratch);
    } else {
        rf_rms_rows<T, RESIDUAL, false>(x, residual, weight, out, x_stride, residual_stride, out_stride,
                                        rows, cols, eps, scratch);
    }
}

// Group path: one row per block, rows of at most RF_RMS_GROUP_CACHE 16-byte vectors a thread;
// anything else (the host sends it to the block path) through the block path's scalar streaming
// code: correct for any row, and the lightest fallback in registers.
template <typename T, bool RESIDUAL>
RF_DEVICE void rf_rmsnorm_group(const T* x, T* residual, const T* weight, T* out, rf_u64 x_stride,
                                rf_u64 residual_stride, rf_u64 out_stride, rf_u64 rows, unsigned int cols,
                                float eps) {
    __shared__ float scratch[2][RF_BLOCK_MAX_WARPS];
    const bool vector =
        rf_rms_vector<T, RESIDUAL>(x, residual, weight, out, x_stride, residual_stride, out_stride, cols);
    const bool fits = cols / (unsigned int)rf_pack16<T>::N <= RF_RMS_GROUP_CACHE * blockDim.x;
    if (vector && fits) {
        rf_rms_group_rows<T, RESIDUAL, RF_RMS_GROUP_CACHE>(x, residual, weight, out, x_stride, residual_stride,
                                                           out_stride, rows, cols, eps, scratch);
    } else {
        rf_rms_rows<T, RESIDUAL, false, true>(x, residual, weight, out, x_stride, residual_stride, out_stride,
                                              rows, cols, eps, scratch);
    }
}

// Entry points. Strides and `rows` are in elements / rows (64-bit); 1 <= cols < 2^31; the host
// launcher checks that every row lies inside its buffer and that blockDim.x is a multiple of the
// warp width, at most 1024. Rows are walked by blocks (blockIdx.y * gridDim.x + blockIdx.x, then
// every gridDim.x * gridDim.y rows), so any grid covers any row count. Block path (v1,
// `rf_rmsnorm_<dt>`): any row, a register cache of up to RF_RMS_CACHE elements a thread, longer
// rows streamed. Group path (v3, `_group_`): 16-byte rows of up to RF_RMS_GROUP_CACHE vectors a
// thread; other rows fall back to streaming there, correct but slow, so the host sends those to
// the block path. On NVIDIA the group entries are held to 32 registers (plain: 8 blocks of 256
// threads, a full SM) and 48 (residual: 5 blocks of 256); left free, ptxas takes 40 and 52 and
// one block fewer fits (measured slower, rmsnorm.md).
#if RF_PLATFORM_NVIDIA
#define RF_RMS_GROUP_BOUNDS __maxnreg__(32)
#define RF_RMS_RESIDUAL_GROUP_BOUNDS __maxnreg__(48)
#else
#define RF_RMS_GROUP_BOUNDS __launch_bounds__(1024)
#define RF_RMS_RESIDUAL_GROUP_BOUNDS __launch_bounds__(1024)
#endif
#define RF_RMSNORM_ENTRIES(suffix, T)                                                                  \
    RF_KERNEL __launch_bounds__(1024) void rf_rmsnorm_##suffix(const T* x, const T* weight, T* out,     \
                                                               rf_u64 x_stride, rf_u64 out_stride,     \
                                                               rf_u64 rows, unsigned int cols, float eps) { \
        rf_follow_prior_grid();                                                                        \
        rf_rmsnorm<T, false>(x, nullptr, weight, out, x_stride, 0, out_stride, rows, cols, eps);        \
    }                                                                                                  \
    RF_KERNEL __launch_bounds__(1024) void rf_rmsnorm_residual_##suffix(                               \
        const T* x, T* residual, const T* weight, T* out, rf_u64 x_stride, rf_u64 residual_stride,     \
        rf_u64 out_stride, rf_u64 rows, unsigned int cols, float eps) {                                \
        rf_follow_prior_grid();                                                                        \
        rf_rmsnorm<T, true>(x, residual, weight, out, x_stride, residual_stride, out_stride, rows, cols, \
                            eps);                                                                      \
    }                                                                                                  \
    RF_KERNEL RF_RMS_GROUP_BOUNDS void rf_rmsnorm_group_##suffix(                                      \
        const T* x, const T* weight, T* out, rf_u64 x_stride, rf_u64 out_stride, rf_u64 rows,          \
        unsigned int cols, float eps) {                                                                \
        rf_follow_prior_grid();                                                                        \
        rf_rmsnorm_group<T, false>(x, nullptr, weight, out, x_stride, 0, out_stride, rows, cols, eps);  \
    }                                                                                                  \
    RF_KERNEL RF_RMS_RESIDUAL_GROUP_BOUNDS void rf_rmsnorm_residual_group_##suffix(                    \
        const T* x, T* residual, const T* weight, T* out, rf_u64 x_stride, rf_u64 residual_stride,     \
        rf_u64 out_stride, rf_u64 rows, unsigned int cols, float eps) {                                \
        rf_follow_prior_grid();                                                                        \
        rf_rmsnorm_group<T, true>(x, residual, weight, out, x_stride, residual_stride, out_stride, rows, \
                                  cols, eps);                                                          \
    }

RF_FOR_EACH_DTYPE(RF_RMSNORM_ENTRIES)
