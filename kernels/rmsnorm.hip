// RMSNorm over the last dimension, one block per row:
//
//   rf_rmsnorm_<dt>:           out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight
//   rf_rmsnorm_residual_<dt>:  s = round_T(x[r, :] + residual[r, :]); residual[r, :] = s;
//                              out[r, :] = s / sqrt(mean(s^2) + eps) * weight
//
// Storage f32, f16 or bf16 (<dt>), arithmetic in f32, one rounding on each store. Rows start
// `*_stride` elements apart; `out` may be `x` (in place) since every element is read before the
// same thread writes it. `weight` holds `cols` elements.
//
// Speed: each thread keeps its part of the row in registers (up to RF_RMS_CACHE floats), so x
// (and the residual) are read from memory once; rows longer than the block can cache take a
// streaming path that reads them twice. Loads and stores are 16 bytes wide when the pointers and
// strides allow it (a scalar tail covers cols % N), one element wide otherwise. The sum of
// squares is reduced with warp shuffles, then across warps through shared memory.

#include "rocmforge.h"

// Elements of a row each thread keeps in registers: rows of up to RF_RMS_CACHE * blockDim.x
// elements (RF_RMS_CACHE_SCALAR on the scalar path, where each element needs its own address)
// are read from memory once.
#define RF_RMS_CACHE 32
#define RF_RMS_CACHE_SCALAR 8

// Most warps a block can have: 1024 threads of at least 32 lanes.
#define RF_RMS_MAX_WARPS 32

// Sum of `v` over the block; every thread gets it. `scratch` holds one float per warp and must
// not be written again until every thread has read it (callers alternate two).
RF_DEVICE float rf_rms_block_sum(float v, float* scratch) {
    v = rf_warp_sum(v);
    const unsigned int warp = (unsigned int)rf_warp_size();
    if (threadIdx.x % warp == 0) {
        scratch[threadIdx.x / warp] = v;
    }
    __syncthreads();
    const unsigned int warps = blockDim.x / warp;
    float total = 0.0f;
    for (unsigned int w = 0; w < warps; ++w) {
        total += scratch[w];
    }
    return total;
}

// The value a T store followed by a load gives back.
template <typename T> RF_DEVICE float rf_rms_round(float v) { return rf_to_float(rf_from_float<T>(v)); }

// Every row this block owns (rows blockIdx.y * gridDim.x + blockIdx.x, then every
// gridDim.x * gridDim.y rows). V elements per access: 16-byte vectors or scalars (VECTOR).
template <typename T, bool RESIDUAL, bool VECTOR>
RF_DEVICE void rf_rms_rows(const T* x, T* residual, const T* weight, T* out, rf_u64 x_stride,
                           rf_u64 residual_stride, rf_u64 out_stride, rf_u64 rows, unsigned int cols,
                           float eps, float (*scratch)[RF_RMS_MAX_WARPS]) {
    typedef rf_access<T, VECTOR> A;
    constexpr int V = A::V;
    constexpr int K = VECTOR ? RF_RMS_CACHE / V : RF_RMS_CACHE_SCALAR; // accesses cached per thread
    const unsigned int t = threadIdx.x;
    const unsigned int block = blockDim.x;
    const unsigned int nv = cols / (unsigned int)V;         // whole vectors in a row
    const unsigned int tail = cols - nv * (unsigned int)V;  // elements after them (< V)
    const bool cached = (rf_u64)nv <= (rf_u64)K * block;
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
            const float scale = rsqrtf(rf_rms_block_sum(sumsq, red) * inv_cols + eps);
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
            const float scale = rsqrtf(rf_rms_block_sum(sumsq, red) * inv_cols + eps);
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
// Warp path (v2): one warp per row, for rows of up to RF_RMS_WARP_CACHE accesses per lane (16
// vectors: 128 f16/bf16 or 64 f32 elements a lane, so 4096 f16 columns on a 32-wide warp and
// 8192 on a 64-wide wavefront; RF_RMS_WARP_CACHE scalars a lane on the scalar path). The row
// stays in registers as raw 16-byte vectors (64 registers), the sum of squares is a shuffle
// reduction over the warp, there is no barrier and no shared memory, and each lane has all 16
// of its loads (32 with the residual) in flight at once. Warps walk rows grid-stride. A row
// longer than the cache (only if a caller launched this kernel for one) is streamed by the warp
// in two passes, correct but slow.
// ---------------------------------------------------------------------------------------------

#define RF_RMS_WARP_CACHE 16

// The plain form only: the residual form measured faster on the block path (rmsnorm.md).
template <typename T, bool VECTOR>
RF_DEVICE void rf_rms_warp_rows(const T* x, const T* weight, T* out, rf_u64 x_stride, rf_u64 out_stride,
                                rf_u64 rows, unsigned int cols, float eps) {
    typedef rf_access<T, VECTOR> A;
    constexpr int V = A::V;
    constexpr int K = RF_RMS_WARP_CACHE;
    const unsigned int warp = (unsigned int)rf_warp_size();
    const unsigned int lane = threadIdx.x % warp;
    const unsigned int nv = cols / (unsigned int)V;         // whole vectors in a row
    const unsigned int tail = cols - nv * (unsigned int)V;  // elements after them (< V <= 8 < warp)
    const bool cached = (rf_u64)nv <= (rf_u64)K * warp;
    const float inv_cols = 1.0f / (float)cols;
    const rf_u64 warps_per_block = blockDim.x / warp;
    const rf_u64 step = (rf_u64)gridDim.x * warps_per_block;
    for (rf_u64 row = (rf_u64)blockIdx.x * warps_per_block + threadIdx.x / warp; row < rows; row += step) {
        const T* xr = x + row * x_stride;
        T* orow = out + row * out_stride;
        float sumsq = 0.0f;
        float ct = 0.0f;
        const rf_u64 jt = (rf_u64)nv * V + lane;  // this lane's tail element, if lane < tail
        if (cached) {
            typename A::Raw c[K];
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = lane + (unsigned int)k * warp;
                if (i < nv) {
                    c[k] = A::load_raw(xr + (rf_u64)i * V);
                }
            }
            if (lane < tail) {
                ct = rf_to_float(xr[jt]);
            }
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = lane + (unsigned int)k * warp;
                if (i < nv) {
                    float v[V];
                    A::unpack(c[k], v);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        sumsq = fmaf(v[e], v[e], sumsq);
                    }
                }
            }
            if (lane < tail) {
                sumsq = fmaf(ct, ct, sumsq);
            }
            const float scale = rsqrtf(rf_warp_sum(sumsq) * inv_cols + eps);
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned int i = lane + (unsigned int)k * warp;
                if (i < nv) {
                    float v[V];
                    float w[V];
                    A::unpack(c[k], v);
                    A::load(weight + (rf_u64)i * V, w);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        v[e] = v[e] * scale * w[e];
                    }
                    A::store(orow + (rf_u64)i * V, v);
                }
            }
            if (lane < tail) {
                orow[jt] = rf_from_float<T>(ct * scale * rf_to_float(weight[jt]));
            }
        } else {
            // Streaming: as the block path's, with the warp in place of the block.
            for (unsigned int i = lane; i < nv; i += warp) {
                float v[V];
                A::load(xr + (rf_u64)i * V, v);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    sumsq = fmaf(v[e], v[e], sumsq);
                }
            }
            if (lane < tail) {
                const float v = rf_to_float(xr[jt]);
                sumsq = fmaf(v, v, sumsq);
            }
            const float scale = rsqrtf(rf_warp_sum(sumsq) * inv_cols + eps);
            for (unsigned int i = lane; i < nv; i += warp) {
                float v[V];
                float w[V];
                A::load(xr + (rf_u64)i * V, v);
                A::load(weight + (rf_u64)i * V, w);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    v[e] = v[e] * scale * w[e];
                }
                A::store(orow + (rf_u64)i * V, v);
            }
            if (lane < tail) {
                orow[jt] = rf_from_float<T>(rf_to_float(xr[jt]) * scale * rf_to_float(weight[jt]));
            }
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
    __shared__ float scratch[2][RF_RMS_MAX_WARPS];
    if (rf_rms_vector<T, RESIDUAL>(x, residual, weight, out, x_stride, residual_stride, out_stride, cols)) {
        rf_rms_rows<T, RESIDUAL, true>(x, residual, weight, out, x_stride, residual_stride, out_stride,
                                       rows, cols, eps, scratch);
    } else {
        rf_rms_rows<T, RESIDUAL, false>(x, residual, weight, out, x_stride, residual_stride, out_stride,
                                        rows, cols, eps, scratch);
    }
}

// Warp path: one warp per row (plain form).
template <typename T>
RF_DEVICE void rf_rmsnorm_warp(const T* x, const T* weight, T* out, rf_u64 x_stride, rf_u64 out_stride,
                               rf_u64 rows, unsigned int cols, float eps) {
    if (rf_rms_vector<T, false>(x, nullptr, weight, out, x_stride, 0, out_stride, cols)) {
        rf_rms_warp_rows<T, true>(x, weight, out, x_stride, out_stride, rows, cols, eps);
    } else {
        rf_rms_warp_rows<T, false>(x, weight, out, x_stride, out_stride, rows, cols, eps);
    }
}

// Entry points. Strides and `rows` are in elements / rows (64-bit); 1 <= cols < 2^31; the host
// launcher checks that every row lies inside its buffer and that blockDim.x is a multiple of the
// warp width (at most 1024 on the block path, 256 on the warp path). Block path: rows walked by
// blocks (blockIdx.y * gridDim.x + blockIdx.x). Warp path (`_warp_`): a 1-D grid, rows walked by
// warps, for rows the warp's register cache holds. The residual form has no warp entry: with x
// and the residual both cached it needed ~248 registers and measured slower than its block
// path (H200: f16 0.86 vs 0.90 of copy, bf16 0.72 vs 0.84), see docs/kernels/rmsnorm.md.
#define RF_RMSNORM_ENTRIES(suffix, T)                                                                  \
    RF_KERNEL __launch_bounds__(1024) void rf_rmsnorm_##suffix(const T* x, const T* weight, T* out,     \
                                                               rf_u64 x_stride, rf_u64 out_stride,     \
                                                               rf_u64 rows, unsigned int cols, float eps) { \
        rf_rmsnorm<T, false>(x, nullptr, weight, out, x_stride, 0, out_stride, rows, cols, eps);        \
    }                                                                                                  \
    RF_KERNEL __launch_bounds__(1024) void rf_rmsnorm_residual_##suffix(                               \
        const T* x, T* residual, const T* weight, T* out, rf_u64 x_stride, rf_u64 residual_stride,     \
        rf_u64 out_stride, rf_u64 rows, unsigned int cols, float eps) {                                \
        rf_rmsnorm<T, true>(x, residual, weight, out, x_stride, residual_stride, out_stride, rows, cols, \
                            eps);                                                                      \
    }                                                                                                  \
    RF_KERNEL __launch_bounds__(256, 2) void rf_rmsnorm_warp_##suffix(const T* x, const T* weight, T* out, \
                                                                   rf_u64 x_stride, rf_u64 out_stride, \
                                                                   rf_u64 rows, unsigned int cols,     \
                                                                   float eps) {                        \
        rf_rmsnorm_warp<T>(x, weight, out, x_stride, out_stride, rows, cols, eps);   \
    }

RF_FOR_EACH_DTYPE(RF_RMSNORM_ENTRIES)
