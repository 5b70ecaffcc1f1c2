// rf_rope_{f32,f16,bf16}: rotary position embedding applied in place to Q and K.
//
// Q is [tokens, q_heads, head_dim] with `q_stride` elements from one token to the next (at least
// q_heads * head_dim); K likewise with its own head count and stride (k may be null when
// k_heads is 0). Each head holds `segments` (1 or 2) rotated segments of `seg_dim` elements, the
// first at element 0 and the second (ChatGLM-6B 2D) at element seg_dim; segment s turns by the
// position in `pos` (s = 0) or `block_pos` (s = 1). Pair i of a segment (i < seg_dim / 2) is
//   interleaved == 0 (NeoX / Llama, "rotate_half"): elements (i, i + seg_dim / 2)
//   interleaved != 0 (GPT-J, GLM):                  elements (2i, 2i + 1)
// and turns by the angle p * inv_freq[i], where p is the position and inv_freq[i] =
// base^(-2i / seg_dim) / scaling_factor comes from the host in f64:
//   (a, b) -> (a cos - b sin, b cos + a sin).
// Elements past the rotated segments pass through: they are neither read nor written.
//
// Positions are i32. A position outside [0, max_pos) writes NaN into the rotated elements of
// that token's heads (the launcher cannot see device data; NaN makes the error visible instead of
// silently rotating by a wrong angle).
//
// Accuracy: the angle is formed and reduced modulo 2*pi in f64 (error below 1e-10 rad for
// positions up to 1e5, below 1e-6 rad up to 2^31), rounded to f32 in [-pi, pi] (1.2e-7 rad), and
// sincosf (full precision, not __sinf) gives cos and sin to a few 1e-8. The rotation itself is
// f32 arithmetic.
//
// Speed: one block per token. The block first computes the token's cos/sin table (one entry
// per pair of a head, shared by all heads of Q and K) into shared memory, then rotates every
// head of Q and K from it, so the f64 and sincosf work is amortised over all heads. Each thread
// rotates a group of pairs with 16-byte loads and stores when `vectorized` (the launcher checks
// alignment of pointers, strides, head_dim and segments: N pairs a group, N = 16 bytes of
// elements), one pair at a time otherwise. The
// loads of a thread's first group are issued before the table is computed, to overlap them.

#include "rocmforge.h"

namespace rf_rope {

// Pairs per segment (rotary_dim <= 512) and table entries per token (two segments).
constexpr int MAX_PAIRS = 256;
constexpr int MAX_ENTRIES = 2 * MAX_PAIRS;

// inv_freq[i] = base^(-2i / seg_dim) / scaling_factor, computed on the host in f64. Passed by
// value: the kernel-argument space holds it, no allocation per launch.
struct Freqs {
    double inv_freq[MAX_PAIRS];
};

RF_DEVICE float quiet_nan() { return __int_as_float(0x7fc00000); }

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

// K consecutive elements: K / N 16-byte accesses when VECTOR (then K is a multiple of
// N = Vec16<T>::N and p is 16-byte aligned), K scalar accesses otherwise.
template <typename T, int K, bool VECTOR> RF_DEVICE void load_n(const T* p, float* f) {
    if constexpr (VECTOR) {
        constexpr int N = Vec16<T>::N;
        static_assert(K % N == 0, "vector accesses move 16 bytes each");
#pragma unroll
        for (int v = 0; v < K / N; ++v) {
            Vec16<T>::load(p + v * N, f + v * N);
        }
    } else {
#pragma unroll
        for (int e = 0; e < K; ++e) {
            f[e] = rf_to_float(p[e]);
        }
    }
}

template <typename T, int K, bool VECTOR> RF_DEVICE void store_n(T* p, const float* f) {
    if constexpr (VECTOR) {
        constexpr int N = Vec16<T>::N;
        static_assert(K % N == 0, "vector accesses move 16 bytes each");
#pragma unroll
        for (int v = 0; v < K / N; ++v) {
            Vec16<T>::store(p + v * N, f + v * N);
        }
    } else {
#pragma unroll
        for (int e = 0; e < K; ++e) {
            p[e] = rf_from_float<T>(f[e]);
        }
    }
}

// cos and sin of p * inv_freq: product and reduction to [-pi, pi] in f64, then f32 sincosf.
RF_DEVICE void angle_cos_sin(int p, double inv_freq, float* c, float* s) {
    const double angle = (double)p * inv_freq;
    const double turns = rint(angle * 0.15915494309189535); // 1 / (2 pi)
    // 2 pi = TWO_PI_HI + TWO_PI_LO to about 1e-32: the reduction is exact to f64 rounding.
    double r = fma(-turns, 6.283185307179586, angle);
    r = fma(-turns, 2.4492935982947064e-16, r);
    sincosf((float)r, s, c);
}

// One work item: PP consecutive pairs of one segment of one head, 32 bytes in flight a thread
// on the vector paths.
//   NeoX, vector:        PP = N  (two 16-byte accesses: a at i, b at i + half)
//   interleaved, vector: PP = N  (two consecutive 16-byte accesses holding the PP pairs)
//   scalar:              PP = 1
template <typename T, bool INTERLEAVED, bool VECTOR> struct Group {
    static constexpr int N = Vec16<T>::N;
    static constexpr int PP = VECTOR ? N : 1;
    float a[PP];
    float b[PP];

    // seg: the segment's first element; half: seg_dim / 2; i0: the first pair.
    RF_DEVICE void load(const T* seg, unsigned int half, unsigned int i0) {
        if constexpr (INTERLEAVED) {
            float v[2 * PP];
            load_n<T, 2 * PP, VECTOR>(seg + 2 * i0, v);
#pragma unroll
            for (int m = 0; m < PP; ++m) {
                a[m] = v[2 * m];
                b[m] = v[2 * m + 1];
            }
        } else {
            load_n<T, PP, VECTOR>(seg + i0, a);
            load_n<T, PP, VECTOR>(seg + half + i0, b);
        }
    }

    RF_DEVICE void store(T* seg, unsigned int half, unsigned int i0) const {
        if constexpr (INTERLEAVED) {
            float v[2 * PP];
#pragma unroll
            for (int m = 0; m < PP; ++m) {
                v[2 * m] = a[m];
                v[2 * m + 1] = b[m];
            }
            store_n<T, 2 * PP, VECTOR>(seg + 2 * i0, v);
        } else {
            store_n<T, PP, VECTOR>(seg + i0, a);
            store_n<T, PP, VECTOR>(seg + half + i0, b);
        }
    }

    RF_DEVICE void rotate(const float* cos_table, const float* sin_table) {
#pragma unroll
        for (int m = 0; m < PP; ++m) {
            const float c = cos_table[m];
            const float s = sin_table[m];
            const float x = a[m];
            const float y = b[m];
            a[m] = x * c - y * s;
            b[m] = y * c + x * s;
        }
    }
};

struct Args {
    rf_u64 token;
    rf_u64 q_heads;
    rf_u64 q_stride;
    rf_u64 k_stride;
    unsigned int head_dim;
    unsigned int seg_dim;
    unsigned int half;           // pairs per segment: seg_dim / 2
    unsigned int chunks;         // work items per segment: half / PP
    unsigned int items_per_head; // segments * chunks
};

// Where work item `item` of the token lives: its segment's first element and its first pair.
template <typename T>
RF_DEVICE T* locate(T* q, T* k, const Args& g, unsigned int item, unsigned int pp, unsigned int* i0,
                    unsigned int* entry) {
    const unsigned int head = item / g.items_per_head;
    const unsigned int rest = item - head * g.items_per_head;
    const unsigned int seg = rest / g.chunks;
    const unsigned int chunk = rest - seg * g.chunks;
    *i0 = chunk * pp;
    *entry = seg * g.half + *i0;
    T* head_ptr = (rf_u64)head < g.q_heads
                      ? q + g.token * g.q_stride + (rf_u64)head * g.head_dim
                      : k + g.token * g.k_stride + ((rf_u64)head - g.q_heads) * g.head_dim;
    return head_ptr + (rf_u64)seg * g.seg_dim;
}

template <typename T, bool INTERLEAVED, bool VECTOR>
RF_DEVICE void rope_token(T* q, T* k, const Args& g, unsigned int items, const int* pos, const int* block_pos,
                          unsigned int segments, long long max_pos, const Freqs& freqs, float* cos_table,
                          float* sin_table) {
    using G = Group<T, INTERLEAVED, VECTOR>;
    const unsigned int tid = threadIdx.x;

    // The first group's loads go out before the table is built, so they overlap it.
    G group;
    unsigned int i0 = 0, entry = 0;
    T* seg = nullptr;
    if (tid < items) {
        seg = locate(q, k, g, tid, G::PP, &i0, &entry);
        group.load(seg, g.half, i0);
    }

    const int p0 = pos[g.token];
    const int p1 = segments > 1 ? block_pos[g.token] : 0;
    const unsigned int entries = segments * g.half;
    for (unsigned int j = tid; j < entries; j += blockDim.x) {
        const unsigned int s = j / g.half;
        const unsigned int i = j - s * g.half;
        const int p = s == 0 ? p0 : p1;
        float c, sn;
        if (p < 0 || (long long)p >= max_pos) {
            c = quiet_nan();
            sn = quiet_nan();
        } else {
            angle_cos_sin(p, freqs.inv_freq[i], &c, &sn);
        }
        cos_table[j] = c;
        sin_table[j] = sn;
    }
    __syncthreads();

    for (unsigned int item = tid; item < items; item += blockDim.x) {
        if (item != tid) {
            seg = locate(q, k, g, item, G::PP, &i0, &entry);
            group.load(seg, g.half, i0);
        }
        group.rotate(cos_table + entry, sin_table + entry);
        group.store(seg, g.half, i0);
    }
}

template <typename T>
RF_DEVICE void rope(T* q, T* k, const int* pos, const int* block_pos, rf_u64 tokens, rf_u64 q_heads,
                    rf_u64 k_heads, rf_u64 q_stride, rf_u64 k_stride, unsigned int head_dim,
                    unsigned int seg_dim, unsigned int segments, int interleaved, int vectorized,
                    long long max_pos, const Freqs& freqs) {
    __shared__ float cos_table[MAX_ENTRIES];
    __shared__ float sin_table[MAX_ENTRIES];
    const rf_u64 token = (rf_u64)blockIdx.y * (rf_u64)gridDim.x + (rf_u64)blockIdx.x;
    if (token >= tokens) {
        return; // the whole block: no barrier is skipped by part of it
    }
    constexpr unsigned int N = Vec16<T>::N;
    const unsigned int pp = vectorized ? N : 1; // Group<...>::PP
    Args g;
    g.token = token;
    g.q_heads = q_heads;
    g.q_stride = q_stride;
    g.k_stride = k_stride;
    g.head_dim = head_dim;
    g.seg_dim = seg_dim;
    g.half = seg_dim / 2;
    g.chunks = g.half / pp;
    g.items_per_head = segments * g.chunks;
    // The launcher keeps (q_heads + k_heads) * head_dim / 2 below 2^31.
    const unsigned int items = (unsigned int)(q_heads + k_heads) * g.items_per_head;
    if (vectorized) {
        if (interleaved) {
            rope_token<T, true, true>(q, k, g, items, pos, block_pos, segments, max_pos, freqs, cos_table, sin_table);
        } else {
            rope_token<T, false, true>(q, k, g, items, pos, block_pos, segments, max_pos, freqs, cos_table, sin_table);
        }
    } else {
        if (interleaved) {
            rope_token<T, true, false>(q, k, g, items, pos, block_pos, segments, max_pos, freqs, cos_table, sin_table);
        } else {
            rope_token<T, false, false>(q, k, g, items, pos, block_pos, segments, max_pos, freqs, cos_table, sin_table);
        }
    }
}

} // namespace rf_rope

#define RF_ROPE_ENTRY(suffix, T)                                                                          \
    RF_KERNEL void __launch_bounds__(1024)                                                                \
        rf_rope_##suffix(T* q, T* k, const int* pos, const int* block_pos, rf_u64 tokens, rf_u64 q_heads,  \
                         rf_u64 k_heads, rf_u64 q_stride, rf_u64 k_stride, unsigned int head_dim,          \
                         unsigned int seg_dim, unsigned int segments, int interleaved, int vectorized,     \
                         long long max_pos, rf_rope::Freqs freqs) {                                        \
        rf_rope::rope<T>(q, k, pos, block_pos, tokens, q_heads, k_heads, q_stride, k_stride, head_dim,     \
                         seg_dim, segments, interleaved, vectorized, max_pos, freqs);                      \
    }
RF_FOR_EACH_DTYPE(RF_ROPE_ENTRY)
