// rf_softmax_{f32,f16,bf16}: y = softmax(scale * x [+ mask]) over the last dimension.
//
// One block per row (the row is blockIdx.y * gridDim.x + blockIdx.x; blocks past the last row
// return at once). Storage is f32, f16 or bf16; all arithmetic is f32.
//
//   t[j] = scale * x[j] (+ mask[row % mask_rows][j] when a mask is given)
//   t[j] = -inf for j > (row % seq_q) + offset when `causal` is set (those x are never read)
//   y[j] = exp(t[j] - max t) / sum exp(t - max t)
//
// A row whose t are all -inf (fully masked) is written as zeros, not NaN. The maximum is
// subtracted in f32 before exp, so logits of magnitude 1e4 give finite results.
//
// Speed: rows of up to ITEMS * blockDim.x elements are kept in registers (x is read once, y
// written once: the minimal traffic); longer rows take a streaming path that reads x twice
// (online max/sum, then normalise). Rows are moved with 16-byte vector loads and stores where
// the row's address allows, element by element elsewhere (unaligned rows, tails). Reductions are
// warp shuffles over the runtime warp width, then one shared-memory step across warps.
//
// In place (x == y) is fine: every element is loaded and stored by the same thread, and loaded
// before it is stored. The mask must not alias y.

#include "rocmforge.h"

namespace rf_softmax {

// Elements of a row each thread keeps in registers: rows up to ITEMS * blockDim.x elements
// (16384 with 1024 threads) are read once. 32 would cover 32768 but spills under the 64
// registers a 1024-thread block allows on NVIDIA.
constexpr int ITEMS = 16;

RF_DEVICE float neg_inf() { return __int_as_float((int)0xff800000u); }

RF_DEVICE bool aligned16(const void* p) { return ((rf_u64)p & 15ull) == 0; }

// N elements of T in one 16-byte vector, widened to / rounded from f32.
template <typename T> struct Vec16;

template <> struct Vec16<float> {
    static constexpr int N = 4;
    static RF_DEVICE void load(const float* p, float* f) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        f[0] = __uint_as_float(v.x);
        f[1] = __uint_as_float(v.y);
        f[2] = __uint_as_float(v.z);
        f[3] = __uint_as_float(v.w);
    }
    static RF_DEVICE void store(float* p, const float* f) {
        uint4 v;
        v.x = __float_as_uint(f[0]);
        v.y = __float_as_uint(f[1]);
        v.z = __float_as_uint(f[2]);
        v.w = __float_as_uint(f[3]);
        *reinterpret_cast<uint4*>(p) = v;
    }
};

// 16-bit types: element 2k is the low half of 32-bit word k (little-endian).
RF_DEVICE float bits_to_float(unsigned int b, __half) { return rf_half_to_float(__ushort_as_half((unsigned short)b)); }
RF_DEVICE float bits_to_float(unsigned int b, rf_bf16) { return rf_bf16_to_float((rf_bf16)b); }
RF_DEVICE unsigned int float_to_bits(float f, __half) { return (unsigned int)__half_as_ushort(rf_float_to_half(f)); }
RF_DEVICE unsigned int float_to_bits(float f, rf_bf16) { return (unsigned int)rf_float_to_bf16(f); }

template <typename T> struct Vec16Narrow {
    static constexpr int N = 8;
    static RF_DEVICE void unpack(unsigned int w, float* f) {
        f[0] = bits_to_float(w & 0xffffu, T());
        f[1] = bits_to_float(w >> 16, T());
    }
    static RF_DEVICE unsigned int pack(const float* f) {
        return float_to_bits(f[0], T()) | (float_to_bits(f[1], T()) << 16);
    }
    static RF_DEVICE void load(const T* p, float* f) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        unpack(v.x, f);
        unpack(v.y, f + 2);
        unpack(v.z, f + 4);
        unpack(v.w, f + 6);
    }
    static RF_DEVICE void store(T* p, const float* f) {
        uint4 v;
        v.x = pack(f);
        v.y = pack(f + 2);
        v.z = pack(f + 4);
        v.w = pack(f + 6);
        *reinterpret_cast<uint4*>(p) = v;
    }
};
template <> struct Vec16<__half> : Vec16Narrow<__half> {};
template <> struct Vec16<rf_bf16> : Vec16Narrow<rf_bf16> {};

// f[e] = row[c0 + e] for the N elements from c0 (a multiple of N): one vector load when the row
// is 16-byte aligned and all N lie below `end`, else one load per element below `end`; elements
// at or past `end` are not read and get 0.
template <typename T>
RF_DEVICE void load_vec(const T* row, unsigned int c0, unsigned int end, bool aligned, float* f) {
    constexpr int N = Vec16<T>::N;
    if (aligned && c0 + N <= end) {
        Vec16<T>::load(row + c0, f);
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) {
            f[e] = (c0 + e < end) ? rf_to_float(row[c0 + e]) : 0.0f;
        }
    }
}

// row[c0 + e] = f[e] for the N elements from c0 that lie below `end`.
template <typename T>
RF_DEVICE void store_vec(T* row, unsigned int c0, unsigned int end, bool aligned, const float* f) {
    constexpr int N = Vec16<T>::N;
    if (aligned && c0 + N <= end) {
        Vec16<T>::store(row + c0, f);
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) {
            if (c0 + e < end) {
                row[c0 + e] = rf_from_float<T>(f[e]);
            }
        }
    }
}

// Block-wide reductions; every thread gets the result. blockDim.x must be a whole number of
// warps (the launcher rounds it), so every lane of every warp takes part in the shuffles.
// `scratch` holds one float per warp (at most 1024 / 32); the trailing barrier lets the next
// reduction reuse it.
RF_DEVICE float block_max(float v, float* scratch) {
    v = rf_warp_max(v);
    const int warps = (int)(blockDim.x / (unsigned int)rf_warp_size());
    if (warps == 1) {
        return v;
    }
    const int lane = rf_lane_id();
    const int warp = (int)(threadIdx.x / (unsigned int)rf_warp_size());
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    v = lane < warps ? scratch[lane] : neg_inf();
    v = rf_warp_max(v);
    __syncthreads();
    return v;
}

RF_DEVICE float block_sum(float v, float* scratch) {
    v = rf_warp_sum(v);
    const int warps = (int)(blockDim.x / (unsigned int)rf_warp_size());
    if (warps == 1) {
        return v;
    }
    const int lane = rf_lane_id();
    const int warp = (int)(threadIdx.x / (unsigned int)rf_warp_size());
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0f;
    v = rf_warp_sum(v);
    __syncthreads();
    return v;
}

// The logits of the N elements from c0: scale * x (+ mask), -inf from `visible` on. `x` holds
// the loaded values and becomes the logits; returns their maximum.
template <typename T>
RF_DEVICE float logits(float* x, const T* mask_row, unsigned int c0, unsigned int visible, bool mask_aligned, float scale) {
    constexpr int N = Vec16<T>::N;
    float m[N];
    if (mask_row != nullptr) {
        load_vec(mask_row, c0, visible, mask_aligned, m);
    }
    float top = neg_inf();
#pragma unroll
    for (int e = 0; e < N; ++e) {
        float t = x[e] * scale;
        if (mask_row != nullptr) {
            t += m[e];
        }
        t = (c0 + e < visible) ? t : neg_inf();
        x[e] = t;
        top = fmaxf(top, t);
    }
    return top;
}

template <typename T>
RF_DEVICE void softmax_row(const T* x_all, T* y_all, const T* __restrict__ mask,
                           rf_u64 rows, rf_u64 cols, rf_u64 x_stride, rf_u64 y_stride, rf_u64 mask_rows,
                           rf_u64 seq_q, long long offset, int causal, float scale) {
    constexpr int N = Vec16<T>::N;
    constexpr int NV = ITEMS / N; // vectors per thread in the register path
    __shared__ float scratch[32];

    const rf_u64 row = (rf_u64)blockIdx.y * (rf_u64)gridDim.x + (rf_u64)blockIdx.x;
    if (row >= rows) {
        return; // the whole block: no barrier is skipped by part of it
    }
    const T* xr = x_all + row * x_stride;
    T* yr = y_all + row * y_stride;
    const T* mr = mask != nullptr ? mask + (row % mask_rows) * cols : nullptr;

    // Column indices are 32-bit (the host keeps cols < 2^31); row offsets are 64-bit.
    const unsigned int ncols = (unsigned int)cols;
    // Columns [0, visible) take part; the causal mask hides the rest, which are not even read.
    unsigned int visible = ncols;
    if (causal) {
        const long long last = (long long)(row % seq_q) + offset; // the host keeps |offset| < 2^62
        visible = last < 0 ? 0u : (last < (long long)ncols ? (unsigned int)last + 1u : ncols);
    }
    const bool x_aligned = aligned16(xr);
    const bool y_aligned = aligned16(yr);
    const bool m_aligned = mr != nullptr && aligned16(mr);
    const unsigned int tid = threadIdx.x;
    const unsigned int step = blockDim.x * N; // elements one pass of the block covers (<= 8192)
    const float zeros[N] = {};

    if (ncols <= NV * step) {
        // Register path: vector k of this thread covers [(k * blockDim + tid) * N, ... + N).
        // All loads of x are issued before any value is used, so they are in flight together.
        float v[NV][N];
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            load_vec(xr, (k * blockDim.x + tid) * N, visible, x_aligned, v[k]);
        }
        float top = neg_inf();
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const unsigned int c0 = (k * blockDim.x + tid) * N;
            top = fmaxf(top, logits(v[k], mr, c0, visible, m_aligned, scale));
        }
        top = block_max(top, scratch);
        if (top == neg_inf()) { // fully masked row: zeros (block-uniform branch)
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                const unsigned int c0 = (k * blockDim.x + tid) * N;
                if (c0 < ncols) {
                    store_vec(yr, c0, ncols, y_aligned, zeros);
                }
            }
            return;
        }
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
#pragma unroll
            for (int e = 0; e < N; ++e) {
                const float p = expf(v[k][e] - top); // exp(-inf) = 0 for masked and padding slots
                v[k][e] = p;
                sum += p;
            }
        }
        // sum >= 1: the maximum's own term is exp(0).
        const float inv = 1.0f / block_sum(sum, scratch);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const unsigned int c0 = (k * blockDim.x + tid) * N;
            if (c0 < ncols) {
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    v[k][e] *= inv;
                }
                store_vec(yr, c0, ncols, y_aligned, v[k]);
            }
        }
        return;
    }

    // Streaming path for long rows: a running (max, sum) per thread, rescaled when the max grows,
    // combined across the block; then a second read of x to write y.
    float top = neg_inf();
    float sum = 0.0f;
    for (unsigned int c0 = tid * N; c0 < visible; c0 += step) {
        float t[N];
        load_vec(xr, c0, visible, x_aligned, t);
        const float local = logits(t, mr, c0, visible, m_aligned, scale);
        const float next = fmaxf(top, local);
        if (next == neg_inf()) {
            continue; // nothing visible yet in this thread's elements
        }
        float part = 0.0f;
#pragma unroll
        for (int e = 0; e < N; ++e) {
            part += expf(t[e] - next);
        }
        sum = sum * expf(top - next) + part; // exp(-inf) = 0 while top is still -inf
        top = next;
    }
    const float row_max = block_max(top, scratch);
    if (row_max == neg_inf()) {
        for (unsigned int c0 = tid * N; c0 < ncols; c0 += step) {
            store_vec(yr, c0, ncols, y_aligned, zeros);
        }
        return;
    }
    const float mine = top == neg_inf() ? 0.0f : sum * expf(top - row_max);
    const float inv = 1.0f / block_sum(mine, scratch);
    for (unsigned int c0 = tid * N; c0 < ncols; c0 += step) {
        float t[N];
        load_vec(xr, c0, visible, x_aligned, t);
        logits(t, mr, c0, visible, m_aligned, scale);
#pragma unroll
        for (int e = 0; e < N; ++e) {
            t[e] = expf(t[e] - row_max) * inv;
        }
        store_vec(yr, c0, ncols, y_aligned, t);
    }
}

} // namespace rf_softmax

// x, y: rows of `cols` elements, `x_stride` / `y_stride` elements apart (x == y allowed).
// mask: null, or [mask_rows, cols] contiguous, row r using mask row r % mask_rows.
// causal != 0: row r sees columns j <= (r % seq_q) + offset.
#define RF_SOFTMAX_ENTRY(suffix, T)                                                                    \
    RF_KERNEL void __launch_bounds__(1024)                                                             \
        rf_softmax_##suffix(const T* x, T* y, const T* mask, rf_u64 rows, rf_u64 cols, rf_u64 x_stride, \
                            rf_u64 y_stride, rf_u64 mask_rows, rf_u64 seq_q, long long offset, int causal,  \
                            float scale) {                                                             \
        rf_softmax::softmax_row<T>(x, y, mask, rows, cols, x_stride, y_stride, mask_rows, seq_q, offset,  \
                                   causal, scale);                                                     \
    }
RF_FOR_EACH_DTYPE(RF_SOFTMAX_ENTRY)
