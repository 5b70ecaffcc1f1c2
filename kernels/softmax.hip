// rf_softmax_{f32,f16,bf16} and rf_softmax_fast_{f32,f16,bf16}: y = softmax(scale * x [+ mask])
// over the last dimension.
//
// One block per row (the block is blockIdx.y * gridDim.x + blockIdx.x; blocks past the last
// row return at once). The block is the row, except in causal 16-bit rows of the fast entry,
// where blocks 2q and 2q + 1 of a head take queries q and seq_q - 1 - q. Storage is f32, f16 or
// bf16; all arithmetic is f32.
//
//   t[j] = scale * x[j] (+ mask[row % mask_rows][j] when a mask is given)
//   t[j] = -inf for j > (row % seq_q) + offset when `causal` is set (those x are never read)
//   y[j] = exp(t[j] - max t) / sum exp(t - max t)
//
// A row whose t are all -inf (fully masked) is written as zeros, not NaN. The maximum is
// subtracted in f32 before the exponential, so logits of magnitude 1e4 give finite results.
//
// Two entry points share one template:
// - rf_softmax_fast_<T> (no additive mask, 2^-126 <= scale <= 1e30, rows of at most
//   FAST_VECTORS * (16 bytes) * 256 threads: 4096 f32, 8192 f16/bf16; the launcher checks):
//   the logit is x itself and the scale is folded into the exponent's factor,
//   e = (x - m) * (scale * log2 e), one subtraction and one multiply before ex2.
// - rf_softmax_<T> (everything: additive mask, any scale, long rows): t = scale * x (+ mask) in
//   f32 as before, e = (t - m) * log2 e; rows longer than ITEMS * blockDim.x take the streaming
//   path.
//
// Each thread keeps its elements in registers and computes, against its OWN maximum m_t,
// p = exp2((t - m_t) * c) and s_t = sum p. One block-wide combine of the (m_t, s_t) pairs
// (rf_block_max_sum: warp shuffles, one shared-memory step, one barrier) gives the row's (M, S);
// the thread then writes p * (exp2((m_t - M) * c) / S): one multiply an element. The fast
// entry's 16-bit rows keep x as the loaded 16-bit words instead of p (half the registers: 32 a
// thread, 16 blocks an SM) and compute p again, bit for bit the same, in the store pass
// (packed_row).
//
// In place (x == y) is fine: every element is loaded and stored by the same thread, and loaded
// before it is stored. The mask must not alias y.

#include "rocmforge.h"
#include "rocmforge_reduce.h"

namespace rf_softmax {

// Elements of a row each thread of rf_softmax_<T> keeps in registers: rows up to
// ITEMS * blockDim.x elements (16384 with 1024 threads) are read once.
constexpr int ITEMS = 16;
// 16-byte vectors a thread of rf_softmax_fast_<T> keeps: 16 f32 or 32 f16/bf16 elements.
constexpr int FAST_VECTORS = 4;
constexpr float LOG2E = 1.4426950408889634f;
// Resident 256-thread blocks an SM that rf_softmax_fast_<T> asks the compiler to allow (it caps
// the registers at 65536 / (256 * blocks)): 6 (40 registers) for f32's 16 elements a thread;
// 8 (32 registers, no spills) for 16-bit rows, which keep their 32 elements a thread packed in
// 16 registers: 16 blocks of the 128 threads a 4096-column row takes, 2048 threads an SM.
template <typename T> struct FastBlocks {
    static constexpr int value = 8;
};
template <> struct FastBlocks<float> {
    static constexpr int value = 6;
};

// r % d (rf_divmod_u64: 32-bit division when both fit).
RF_DEVICE rf_u64 rem(rf_u64 r, rf_u64 d) {
    rf_u64 q;
    rf_u64 m;
    rf_divmod_u64(r, d, &q, &m);
    return m;
}

// Two packed 16-bit values of T with the bit pattern of -inf in each half.
template <typename T> struct NegInf2;
template <> struct NegInf2<__half> {
    static constexpr unsigned int value = 0xfc00fc00u;
};
template <> struct NegInf2<rf_bf16> {
    static constexpr unsigned int value = 0xff80ff80u;
};

// The larger of each half of two packed pairs of T, NaN ignored as fmaxf does (one instruction
// on NVIDIA sm_80+). The maximum of 16-bit values is one of them, so it is exact.
#if RF_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define RF_SOFTMAX_MAX2 1
template <typename T> RF_DEVICE unsigned int max2(unsigned int a, unsigned int b);
template <> RF_DEVICE unsigned int max2<__half>(unsigned int a, unsigned int b) {
    unsigned int d;
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
template <> RF_DEVICE unsigned int max2<rf_bf16>(unsigned int a, unsigned int b) {
    unsigned int d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
#else
#define RF_SOFTMAX_MAX2 0
#endif

// Hides a register's value from the compiler's common-subexpression elimination, so that values
// computed from it before and after are not merged (and kept live in between). No instruction.
RF_DEVICE void opaque(unsigned int& w) {
#if RF_PLATFORM_NVIDIA
    asm volatile("" : "+r"(w));
#else
    asm volatile("" : "+v"(w));
#endif
}

// The register path of rf_softmax_fast_<T> for 16-bit T (N = 8 elements a 16-byte vector),
// VPT vectors a thread; the launcher guarantees cols <= VPT * 8 * blockDim.x. Same arithmetic
// as the float path of softmax_row (p = exp2((x - m_t) * c), y = p * factor, bit for bit), but
// the row stays in registers as the loaded 16-bit words: 4 * VPT registers instead of 8 * VPT.
// The maximum is taken on the packed words, the sum of p before the combine, and p again, from
// the words, in the store pass (one more ex2 an element, for about half the registers).
template <typename T, int VPT>
RF_DEVICE void packed_row(const T* xr, T* yr, unsigned int ncols, unsigned int visible, bool x_aligned,
                          bool y_aligned, float c, float2* scratch) {
    constexpr int N = 8;
    const unsigned int tid = threadIdx.x;
    const unsigned short* xb = reinterpret_cast<const unsigned short*>(xr);
    // Whole aligned visible vectors: predicated 16-byte loads, all in flight together. The
    // boundary vector of a causal row and unaligned rows: element by element, hidden elements
    // as -inf bits. Vectors wholly past the boundary are not read.
    uint4 raw[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const unsigned int c0 = (k * blockDim.x + tid) * N;
        raw[k] = make_uint4(NegInf2<T>::value, NegInf2<T>::value, NegInf2<T>::value, NegInf2<T>::value);
        if (x_aligned && c0 + N <= visible) {
            raw[k] = rf_load16(xr + c0);
        }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const unsigned int c0 = (k * blockDim.x + tid) * N;
        if (!(x_aligned && c0 + N <= visible) && c0 < visible) {
            unsigned int w[N / 2];
#pragma unroll
            for (int e = 0; e < N; e += 2) {
                const unsigned int lo = c0 + e < visible ? (unsigned int)xb[c0 + e] : (NegInf2<T>::value & 0xffffu);
                const unsigned int hi = c0 + e + 1 < visible ? (unsigned int)xb[c0 + e + 1] : (NegInf2<T>::value & 0xffffu);
                w[e / 2] = lo | (hi << 16);
            }
            raw[k] = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
    // This thread's maximum over its visible elements (-inf for none).
    float top = rf_neg_inf();
#if RF_SOFTMAX_MAX2
    unsigned int top2 = NegInf2<T>::value;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const unsigned int c0 = (k * blockDim.x + tid) * N;
        if (c0 < visible) {
            top2 = max2<T>(top2, max2<T>(max2<T>(raw[k].x, raw[k].y), max2<T>(raw[k].z, raw[k].w)));
        }
    }
    float pair[2];
    rf_unpack2_bits16<T>(top2, pair);
    top = fmaxf(pair[0], pair[1]);
#else
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const unsigned int c0 = (k * blockDim.x + tid) * N;
        if (c0 < visible) {
            float f[N];
            rf_pack16<T>::unpack(raw[k], f);
#pragma unroll
            for (int e = 0; e < N; ++e) {
                top = fmaxf(top, f[e]);
            }
        }
    }
#endif
    const float sub = top == rf_neg_inf() ? 0.0f : top;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const unsigned int c0 = (k * blockDim.x + tid) * N;
        if (c0 < visible) {
            float f[N];
            rf_pack16<T>::unpack(raw[k], f);
#pragma unroll
            for (int e = 0; e < N; ++e) {
                sum += rf_fast_exp2((f[e] - sub) * c);
            }
        }
    }
    const rf_max_sum row_ms = rf_block_max_sum(top, sum, c, scratch);
    // y = p * factor, rounded and packed a pair at a time (one cvt a pair on NVIDIA sm_80+, the
    // same bits as the scalar rounding); a fully masked row (block-uniform) writes zeros. A
    // thread whose maximum is -inf gets factor 0 (its p are 0, or NaN, which stays NaN); vectors
    // past the causal boundary write 0 * factor (0, or NaN in a NaN row, as the float path does).
    const bool empty = row_ms.m == rf_neg_inf();
    const float factor = empty ? 0.0f : rf_exp2_rescale(top, row_ms.m, c) / row_ms.s;
    const unsigned int zero2 = rf_pack2_bits16<T>(0.0f * factor, 0.0f * factor);
    unsigned short* yb = reinterpret_cast<unsigned short*>(yr);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const unsigned int c0 = (k * blockDim.x + tid) * N;
        if (c0 < ncols) {
            unsigned int w[N / 2] = {zero2, zero2, zero2, zero2};
            if (!empty && c0 < visible) {
                uint4 r = raw[k];
                opaque(r.x);
                opaque(r.y);
                opaque(r.z);
                opaque(r.w);
                const unsigned int in[N / 2] = {r.x, r.y, r.z, r.w};
#pragma unroll
                for (int i = 0; i < N / 2; ++i) {
                    float f[2];
                    rf_unpack2_bits16<T>(in[i], f);
                    w[i] = rf_pack2_bits16<T>(rf_fast_exp2((f[0] - sub) * c) * factor,
                                              rf_fast_exp2((f[1] - sub) * c) * factor);
                }
            }
            if (y_aligned && c0 + N <= ncols) {
                rf_store16(yr + c0, make_uint4(w[0], w[1], w[2], w[3]));
            } else {
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    if (c0 + e < ncols) {
                        yb[c0 + e] = (unsigned short)(w[e / 2] >> (16 * (e % 2)));
                    }
                }
            }
        }
    }
}

// GENERIC: rf_softmax_<T> (mask, any scale, streaming path for long rows), VPT = ITEMS / N
// vectors a thread. Otherwise rf_softmax_fast_<T>: no mask, scale > 0 folded into c, and the
// launcher guarantees cols <= VPT * N * blockDim.x.
template <typename T, int VPT, bool GENERIC>
RF_DEVICE void softmax_row(const T* x_all, T* y_all, const T* __restrict__ mask,
                           rf_u64 rows, rf_u64 cols, rf_u64 x_stride, rf_u64 y_stride, rf_u64 mask_rows,
                           rf_u64 seq_q, long long offset, int causal, float scale) {
    constexpr int N = rf_pack16<T>::N;
    __shared__ float2 scratch[RF_BLOCK_MAX_WARPS];

    const rf_u64 block = (rf_u64)blockIdx.y * (rf_u64)gridDim.x + (rf_u64)blockIdx.x;
    if (block >= rows) {
        return; // the whole block: no barrier is skipped by part of it
    }
    rf_u64 row = block;
    rf_u64 query = 0; // row % seq_q (causal)
    if (causal) {
        query = rem(block, seq_q);
        if constexpr (!GENERIC && N == 8) {
            // 16-bit fast rows: block 2q of a head takes query q, block 2q + 1 query
            // seq_q - 1 - q (a permutation of the head's rows), so that the blocks resident
            // together mix short and long causal rows instead of running a head's short rows
            // (mostly stores) together and its long rows (mostly loads) together.
            const rf_u64 q = (query & 1u) ? seq_q - 1u - query / 2u : query / 2u;
            row = block - query + q;
            query = q;
        }
    }
    const T* xr = x_all + row * x_stride;
    T* yr = y_all + row * y_stride;
    const T* mr = (GENERIC && mask != nullptr) ? mask + rem(row, mask_rows) * cols : nullptr;

    // Column indices are 32-bit (the host keeps cols < 2^31); row offsets are 64-bit.
    const unsigned int ncols = (unsigned int)cols;
    // Columns [0, visible) take part; the causal mask hides the rest, which are not even read.
    unsigned int visible = ncols;
    if (causal) {
        const long long last = (long long)query + offset; // the host keeps |offset| <= 2^62
        visible = last < 0 ? 0u : (last < (long long)ncols ? (unsigned int)last + 1u : ncols);
    }
    const bool x_aligned = rf_is_aligned16(xr);
    const bool y_aligned = rf_is_aligned16(yr);
    const bool m_aligned = mr != nullptr && rf_is_aligned16(mr);
    // The exponent is (t - m) * c: the fast entry's t is x itself, the generic one's is scaled.
    const float c = GENERIC ? LOG2E : scale * LOG2E;
    const unsigned int tid = threadIdx.x;
    const unsigned int step = blockDim.x * N; // elements one pass of the block covers (<= 8192)
    const float zeros[N] = {};

    if constexpr (!GENERIC && N == 8) {
        // 16-bit rows of the fast entry: x stays packed in registers (16 a thread instead of 32
        // floats) and the exponentials are recomputed in the store pass; see packed_row.
        packed_row<T, VPT>(xr, yr, ncols, visible, x_aligned, y_aligned, c, scratch);
        return;
    }
    if (!GENERIC || ncols <= VPT * step) {
        // Register path: vector k of this thread covers [(k * blockDim + tid) * N, ... + N).
        // Every whole, aligned, visible vector is loaded first (predicated 16-byte loads, all in
        // flight together); vectors that are partly visible or unaligned go element by element.
        uint4 raw[VPT];
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const unsigned int c0 = (k * blockDim.x + tid) * N;
            raw[k] = make_uint4(0u, 0u, 0u, 0u);
            if (x_aligned && c0 + N <= visible) {
                raw[k] = rf_load16(xr + c0);
            }
        }
        float v[VPT][N];
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const unsigned int c0 = (k * blockDim.x + tid) * N;
            if (x_aligned && c0 + N <= visible) {
                rf_pack16<T>::unpack(raw[k], v[k]);
            } else if (c0 < visible) { // the boundary vector, or an unaligned row
                rf_load_bounded<T, N>(xr, c0, visible, false, rf_neg_inf(), v[k]);
            }
        }
        if (GENERIC) {
            // t = scale * x + mask; the mask is read after every x load is in flight.
#pragma unroll
            for (int k = 0; k < VPT; ++k) {
                const unsigned int c0 = (k * blockDim.x + tid) * N;
                if (c0 < visible) {
                    float a[N];
                    if (mr != nullptr) {
                        rf_load_bounded<T, N>(mr, c0, visible, m_aligned, 0.0f, a);
                    }
#pragma unroll
                    for (int e = 0; e < N; ++e) {
                        const float t = mr != nullptr ? fmaf(v[k][e], scale, a[e]) : v[k][e] * scale;
                        v[k][e] = (c0 + e < visible) ? t : rf_neg_inf();
                    }
                }
            }
        }
        // This thread's maximum over its visible elements (-inf for none).
        float top = rf_neg_inf();
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const unsigned int c0 = (k * blockDim.x + tid) * N;
            if (c0 < visible) {
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    top = fmaxf(top, v[k][e]);
                }
            }
        }
        // p = exp2((t - top) * c) against the thread's own maximum: 0 for -inf logits and for
        // hidden vectors; a thread with nothing visible subtracts 0 (its p are 0, or NaN for NaN).
        const float sub = top == rf_neg_inf() ? 0.0f : top;
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const unsigned int c0 = (k * blockDim.x + tid) * N;
            if (c0 < visible) {
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    const float p = rf_fast_exp2((v[k][e] - sub) * c);
                    v[k][e] = p;
                    sum += p;
                }
            } else {
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    v[k][e] = 0.0f;
                }
            }
        }
        const rf_max_sum row_ms = rf_block_max_sum(top, sum, c, scratch);
        if (row_ms.m == rf_neg_inf()) { // fully masked row: zeros (block-uniform branch)
#pragma unroll
            for (int k = 0; k < VPT; ++k) {
                const unsigned int c0 = (k * blockDim.x + tid) * N;
                if (c0 < ncols) {
                    rf_store_bounded<T, N>(yr, c0, ncols, y_aligned, zeros);
                }
            }
            return;
        }
        // S >= 1 (the maximum's own term is exp2(0) = 1). A thread whose maximum is -inf gets
        // factor 0 (its p are 0, or NaN, which stays NaN).
        const float factor = rf_exp2_rescale(top, row_ms.m, c) / row_ms.s;
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const unsigned int c0 = (k * blockDim.x + tid) * N;
            if (c0 < ncols) {
#pragma unroll
                for (int e = 0; e < N; ++e) {
                    v[k][e] *= factor;
                }
                rf_store_bounded<T, N>(yr, c0, ncols, y_aligned, v[k]);
            }
        }
        return;
    }

    // Streaming path for long rows (GENERIC only): a running (max, sum) per thread, rescaled
    // when the maximum grows, combined across the block; then a second read of x to write y.
    float top = rf_neg_inf();
    float sum = 0.0f;
    for (unsigned int c0 = tid * N; c0 < visible; c0 += step) {
        float t[N];
        float a[N];
        rf_load_bounded<T, N>(xr, c0, visible, x_aligned, 0.0f, t);
        if (mr != nullptr) {
            rf_load_bounded<T, N>(mr, c0, visible, m_aligned, 0.0f, a);
        }
        float local = rf_neg_inf();
#pragma unroll
        for (int e = 0; e < N; ++e) {
            const float l = mr != nullptr ? fmaf(t[e], scale, a[e]) : t[e] * scale;
            t[e] = (c0 + e < visible) ? l : rf_neg_inf();
            local = fmaxf(local, t[e]);
        }
        const float next = fmaxf(top, local);
        if (next == rf_neg_inf()) {
            continue; // nothing visible yet in this thread's elements
        }
        float part = 0.0f;
#pragma unroll
        for (int e = 0; e < N; ++e) {
            part += rf_fast_exp2((t[e] - next) * c);
        }
        sum = sum * rf_exp2_rescale(top, next, c) + part; // rf_exp2_rescale(-inf, finite) = 0
        top = next;
    }
    const rf_max_sum row_ms = rf_block_max_sum(top, sum, c, scratch);
    if (row_ms.m == rf_neg_inf()) {
        for (unsigned int c0 = tid * N; c0 < ncols; c0 += step) {
            rf_store_bounded<T, N>(yr, c0, ncols, y_aligned, zeros);
        }
        return;
    }
    const float inv = 1.0f / row_ms.s;
    for (unsigned int c0 = tid * N; c0 < ncols; c0 += step) {
        float t[N];
        if (c0 < visible) {
            float a[N];
            rf_load_bounded<T, N>(xr, c0, visible, x_aligned, 0.0f, t);
            if (mr != nullptr) {
                rf_load_bounded<T, N>(mr, c0, visible, m_aligned, 0.0f, a);
            }
#pragma unroll
            for (int e = 0; e < N; ++e) {
                const float l = mr != nullptr ? fmaf(t[e], scale, a[e]) : t[e] * scale;
                t[e] = (c0 + e < visible) ? rf_fast_exp2((l - row_ms.m) * c) * inv : 0.0f;
            }
        } else {
#pragma unroll
            for (int e = 0; e < N; ++e) {
                t[e] = 0.0f;
            }
        }
        rf_store_bounded<T, N>(yr, c0, ncols, y_aligned, t);
    }
}

} // namespace rf_softmax

// x, y: rows of `cols` elements, `x_stride` / `y_stride` elements apart (x == y allowed).
// mask: null, or [mask_rows, cols] contiguous, row r using mask row r % mask_rows.
// causal != 0: row r sees columns j <= (r % seq_q) + offset.
// rf_softmax_fast_<T> takes the same arguments; it ignores the mask (the launcher never passes
// one) and needs 2^-126 <= scale <= 1e30 and cols <= 4 * 16 bytes * blockDim.x <= 256 threads.
#define RF_SOFTMAX_ENTRY(suffix, T)                                                                    \
    RF_KERNEL void __launch_bounds__(1024)                                                             \
        rf_softmax_##suffix(const T* x, T* y, const T* mask, rf_u64 rows, rf_u64 cols, rf_u64 x_stride, \
                            rf_u64 y_stride, rf_u64 mask_rows, rf_u64 seq_q, long long offset, int causal,  \
                            float scale) {                                                             \
        rf_softmax::softmax_row<T, rf_softmax::ITEMS / rf_pack16<T>::N, true>(                          \
            x, y, mask, rows, cols, x_stride, y_stride, mask_rows, seq_q, offset, causal, scale);       \
    }                                                                                                  \
    RF_KERNEL void __launch_bounds__(256, rf_softmax::FastBlocks<T>::value)                             \
        rf_softmax_fast_##suffix(const T* x, T* y, const T* mask, rf_u64 rows, rf_u64 cols,             \
                                 rf_u64 x_stride, rf_u64 y_stride, rf_u64 mask_rows, rf_u64 seq_q,       \
                                 long long offset, int causal, float scale) {                          \
        rf_softmax::softmax_row<T, rf_softmax::FAST_VECTORS, false>(                                   \
            x, y, mask, rows, cols, x_stride, y_stride, mask_rows, seq_q, offset, causal, scale);       \
    }
RF_FOR_EACH_DTYPE(RF_SOFTMAX_ENTRY)
