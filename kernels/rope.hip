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
// Speed: two paths, both forming the f64 angles once per token and pair rather than per head.
//   rf_rope_warp_* / rf_rope_warp_il_* (version 3, taken when a head's work items fit one warp:
//   every common head size): one warp per token; each lane always rotates the same pairs (of
//   successive heads), so it keeps their cos/sin in registers: no shared memory, no barrier.
//   Loads stay packed; a batch of items is in flight before the angles are formed.
//   rf_rope_* (version 1, any shape): one block per token; the block computes the token's
//   cos/sin table (one entry per pair of a head) into shared memory, then rotates every head of
//   Q and K from it. The loads of a thread's first group are issued before the table is built.
// Both use 16-byte loads and stores when `vectorized` (the launcher checks alignment of pointers,
// strides, head_dim and segments), one element at a time otherwise.
//
// Fused with the KV-cache write (version 6, rf_rope_warp_kv_* / rf_rope_warp_il_kv_*: the warp
// path, one segment covering the whole head): K is read from `kv.k` and its rotated heads are
// stored straight into the token's cache slot `kv.slots[t]` instead of back into K, and the
// token's V row is copied into the same slot of the V cache (kernels/kv_cache.hip's rules: a
// negative slot or one past the cache skips the token's K and V, and Q is rotated all the same).
// K itself is not written. In a decode step this replaces the rope launch and the cache write's
// launch with one.

#include "rocmforge.h"
#include "rocmforge_dependent_launch.h"
#include "rocmforge_kv_cache.h"
#include "rocmforge_rope_angle.h"

namespace rf_rope {

// Pairs per segment (rotary_dim <= 512) and table entries per token (two segments).
constexpr int MAX_PAIRS = 256;
constexpr int MAX_ENTRIES = 2 * MAX_PAIRS;

// inv_freq[i] = base^(-2i / seg_dim) / scaling_factor, computed on the host in f64. Passed by
// value: the kernel-argument space holds it, no allocation per launch.
struct Freqs {
    double inv_freq[MAX_PAIRS];
};

// One work item: PP consecutive pairs of one segment of one head, 32 bytes in flight a thread
// on the vector paths.
//   NeoX, vector:        PP = N  (two 16-byte accesses: a at i, b at i + half)
//   interleaved, vector: PP = N  (two consecutive 16-byte accesses holding the PP pairs)
//   scalar:              PP = 1
template <typename T, bool INTERLEAVED, bool VECTOR> struct Group {
    static constexpr int N = rf_pack16<T>::N;
    static constexpr int PP = VECTOR ? N : 1;
    float a[PP];
    float b[PP];

    // seg: the segment's first element; half: seg_dim / 2; i0: the first pair.
    RF_DEVICE void load(const T* seg, unsigned int half, unsigned int i0) {
        if constexpr (INTERLEAVED) {
            float v[2 * PP];
            rf_load_n<T, 2 * PP, VECTOR>(seg + 2 * i0, v);
#pragma unroll
            for (int m = 0; m < PP; ++m) {
                a[m] = v[2 * m];
                b[m] = v[2 * m + 1];
            }
        } else {
            rf_load_n<T, PP, VECTOR>(seg + i0, a);
            rf_load_n<T, PP, VECTOR>(seg + half + i0, b);
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
            rf_store_n<T, 2 * PP, VECTOR>(seg + 2 * i0, v);
        } else {
            rf_store_n<T, PP, VECTOR>(seg + i0, a);
            rf_store_n<T, PP, VECTOR>(seg + half + i0, b);
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
            c = rf_rope_nan();
            sn = rf_rope_nan();
        } else {
            rf_rope_cos_sin(p, freqs.inv_freq[i], &c, &sn);
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
    constexpr unsigned int N = rf_pack16<T>::N;
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


// ---------------------------------------------------------------------------------------------
// Warp path (version 3): one warp per token, no shared memory, no barrier. Version 4: with few
// tokens (decode), a token's heads are split over gridDim.z warps ("slices"), each rotating
// every gridDim.z-th round of heads, so one token's 40 heads are not one warp's serial work.
//
// A token's work items (heads x segments x chunks, `iph` items a head) are dealt to the lanes of
// one warp: lane L takes items L, L + used, L + 2 used, ... where used = (W / iph) * iph <= W
// lanes (the launcher takes this path only when iph <= W; lanes from `used` on idle). Every item
// of a lane is then the same segment and chunk of heads h0, h0 + W / iph, ..., so the lane forms
// the cos/sin of its PP pairs once per token, in registers (the recipe of rf_rope_cos_sin, the
// same as the table path), and reuses them for every head it touches. Loads stay raw (16-bit
// elements packed) until the rotation; B items' loads are issued together, the first batch
// before the position is known and the angles are formed, so the trig overlaps memory latency.
// ---------------------------------------------------------------------------------------------

// Work items a lane loads at once (the first batch before its angles are formed). Items of two
// 16-byte accesses (half-split pairs): 5, 32 bytes each; items of one access (interleaved pairs,
// half the registers): 8. These keep sm_90 under ~90 registers; docs/kernels/rope.md (version 3)
// has the measurements of other batch sizes.
constexpr int WARP_BATCH = 5;
constexpr int WARP_BATCH_ONE = 8;

// One work item of the warp path: PP pairs of one segment of one head, from pair i0 on.
//   NeoX:                 lo = PP elements at i0 (the `a`s), hi = PP elements at i0 + half
//                         (the `b`s); PP = 16 bytes of elements (vector) or 1
//   interleaved, vector:  lo = one 16-byte vector at 2 i0 holding PP = N / 2 pairs (a, b)
//   interleaved, single:  lo, hi = elements 2 i0 and 2 i0 + 1 (PP = 1)
// Raw (still packed) until rotate().
template <typename T, bool INTERLEAVED, bool VECTOR> struct RawItem {
    using Access = rf_access<T, VECTOR>;
    using Raw = typename Access::Raw;
    static constexpr bool ONE = INTERLEAVED && VECTOR; // the item is a single access
    static constexpr int PP = ONE ? Access::V / 2 : Access::V;
    Raw lo;
    Raw hi;

    RF_DEVICE void load(const T* head, unsigned int off_lo, unsigned int off_hi) {
        lo = Access::load_raw(head + off_lo);
        if constexpr (!ONE) {
            hi = Access::load_raw(head + off_hi);
        }
    }

    RF_DEVICE void store(T* head, unsigned int off_lo, unsigned int off_hi) const {
        Access::store_raw(head + off_lo, lo);
        if constexpr (!ONE) {
            Access::store_raw(head + off_hi, hi);
        }
    }

    // e[0 .. 2 PP): the item's elements in memory order (lo, then hi); pair m is
    // (e[2m], e[2m + 1]) when interleaved, (e[m], e[m + PP]) otherwise.
    RF_DEVICE void rotate(const float* c, const float* s) {
        float e[2 * PP];
        Access::unpack(lo, e);
        if constexpr (!ONE) {
            Access::unpack(hi, e + PP);
        }
        float o[2 * PP];
#pragma unroll
        for (int m = 0; m < PP; ++m) {
            const int ia = INTERLEAVED ? 2 * m : m;
            const int ib = INTERLEAVED ? 2 * m + 1 : m + PP;
            const float x = e[ia];
            const float y = e[ib];
            o[ia] = x * c[m] - y * s[m];
            o[ib] = y * c[m] + x * s[m];
        }
        lo = Access::pack(o);
        if constexpr (!ONE) {
            hi = Access::pack(o + PP);
        }
    }
};

// Where a token's rotated K heads go: back into K, or (KV) its slot of the K cache, none when
// the cache skips the token (kv_cache.hip's rules).
template <typename T, bool KV>
RF_DEVICE T* k_destination(T* k_tok, rf_u64 token, const rf_kv_write_params& kv) {
    if constexpr (KV) {
        const long long row = rf_kv_row_offset(kv, token);
        return row < 0 ? nullptr : (T*)kv.k_cache + row;
    } else {
        return k_tok;
    }
}

template <typename T, bool INTERLEAVED, bool VECTOR, bool KV>
RF_DEVICE void rope_warp_token(T* q, T* k, const int* pos, const int* block_pos, rf_u64 token,
                               unsigned int q_heads, unsigned int heads, rf_u64 q_stride, rf_u64 k_stride,
                               unsigned int head_dim, unsigned int seg_dim, unsigned int segments,
                               long long max_pos, const Freqs& freqs, unsigned int slice,
                               unsigned int slices, const rf_kv_write_params& kv) {
    using Item = RawItem<T, INTERLEAVED, VECTOR>;
    constexpr int PP = Item::PP;
    constexpr int B = Item::ONE ? WARP_BATCH_ONE : WARP_BATCH;
    const unsigned int width = (unsigned int)rf_warp_size();
    const unsigned int lane = threadIdx.x % width;
    const unsigned int half = seg_dim / 2;
    const unsigned int chunks = half / PP;          // items a segment
    const unsigned int iph = segments * chunks;     // items a head (<= width: the launcher)
    const unsigned int step = width / iph;          // heads the warp covers at a time
    const unsigned int h0 = lane / iph;             // this lane's first head
    if (h0 >= step || h0 >= heads) {
        return; // a lane past `used`, or no head for it (fewer heads than the warp covers)
    }
    const unsigned int slot = lane - h0 * iph;
    const unsigned int seg = slot / chunks;
    const unsigned int i0 = (slot - seg * chunks) * PP; // the item's first pair in its segment
    const unsigned int off_lo = seg * seg_dim + (INTERLEAVED ? 2 * i0 : i0);
    const unsigned int off_hi = INTERLEAVED ? off_lo + 1 : off_lo + half; // unused if Item::ONE
    // The token's heads are dealt to `slices` warps in rounds of `step` heads: this warp takes
    // rounds slice, slice + slices, ... (one slice, the whole token, when tokens are many).
    const unsigned int first = h0 + slice * step; // this lane's first head
    const unsigned int stride = step * slices;    // from one of its heads to the next
    if (first >= heads) {
        return; // more slices than rounds of heads: nothing left for this one
    }
    const unsigned int n = (heads - first + stride - 1) / stride; // this lane's items
    T* const q_tok = q + token * q_stride;
    T* const k_tok = k + token * k_stride; // k_stride is 0 when there is no K
    // Head h of the token: Q's heads first, then K's (h * head_dim < 2^31: the launcher).
    auto head_ptr = [&](unsigned int h) -> T* {
        return h < q_heads ? q_tok + h * head_dim : k_tok + (h - q_heads) * head_dim;
    };
    // The slot (an input of the step, like the positions) before the wait too.
    T* const k_out = k_destination<T, KV>(k_tok, token, kv);
    // Where head h's rotated pairs are stored (null: nowhere).
    auto out_ptr = [&](unsigned int h) -> T* {
        if (h < q_heads) {
            return q_tok + h * head_dim;
        }
        if constexpr (KV) {
            if (k_out == nullptr) {
                return nullptr;
            }
        }
        return k_out + (h - q_heads) * head_dim;
    };

    // The position and its angles before the wait for the kernel ahead (a dependent launch,
    // rocmforge_dependent_launch.h): the positions are the step's inputs, which the launcher
    // names as read before the wait (the launch is an ordinary one where the kernel ahead writes
    // them), so their round trip and the f64 angles overlap that kernel's tail. q and k, which
    // it writes, after.
    const int p = seg == 0 ? pos[token] : block_pos[token];
    float c[PP];
    float s[PP];
    if (p < 0 || (long long)p >= max_pos) {
#pragma unroll
        for (int m = 0; m < PP; ++m) {
            c[m] = rf_rope_nan();
            s[m] = rf_rope_nan();
        }
    } else {
#pragma unroll
        for (int m = 0; m < PP; ++m) {
            rf_rope_cos_sin(p, freqs.inv_freq[i0 + m], &c[m], &s[m]);
        }
    }
    rf_follow_prior_grid();
    Item items[B];
#pragma unroll
    for (int r = 0; r < B; ++r) {
        if ((unsigned int)r < n) {
            items[r].load(head_ptr(first + r * stride), off_lo, off_hi);
        }
    }

    for (unsigned int base = 0;;) {
#pragma unroll
        for (int r = 0; r < B; ++r) {
            if (base + r < n) {
                items[r].rotate(c, s);
                T* const out = out_ptr(first + (base + r) * stride);
                if (!KV || out != nullptr) {
                    items[r].store(out, off_lo, off_hi);
                }
            }
        }
        base += B;
        if (base >= n) {
            break;
        }
#pragma unroll
        for (int r = 0; r < B; ++r) {
            if (base + r < n) {
                items[r].load(head_ptr(first + (base + r) * stride), off_lo, off_hi);
            }
        }
    }
}

// The token's V row into its slot of the V cache (a token the cache skips: nothing), by the
// lanes of the `slices` warps that share the token: 16-byte vectors where V, the cache, the
// token stride and the row allow them, elements otherwise.
template <typename T>
RF_DEVICE void copy_v_row(const rf_kv_write_params& kv, rf_u64 token, unsigned int first, unsigned int stride) {
    const long long row = rf_kv_row_offset(kv, token);
    if (row < 0) {
        return;
    }
    const T* src = (const T*)kv.v + token * kv.v_stride;
    T* dst = (T*)kv.v_cache + row;
    constexpr unsigned int N = rf_pack16<T>::N;
    const bool vector = (((unsigned long long)kv.v | (unsigned long long)kv.v_cache) % 16 == 0) &&
                        kv.v_stride % N == 0 && kv.row % N == 0;
    if (vector) {
        for (rf_u64 j = first; j < kv.row / N; j += stride) {
            rf_store16(dst + j * N, rf_load16(src + j * N));
        }
    } else {
        for (rf_u64 j = first; j < kv.row; j += stride) {
            dst[j] = src[j];
        }
    }
}

template <typename T, bool INTERLEAVED, bool KV>
RF_DEVICE void rope_warp(T* q, T* k, const int* pos, const int* block_pos, rf_u64 tokens, rf_u64 q_heads,
                         rf_u64 k_heads, rf_u64 q_stride, rf_u64 k_stride, unsigned int head_dim,
                         unsigned int seg_dim, unsigned int segments, int vectorized, long long max_pos,
                         const Freqs& freqs, const rf_kv_write_params& kv) {
    const unsigned int width = (unsigned int)rf_warp_size();
    const rf_u64 block = (rf_u64)blockIdx.y * (rf_u64)gridDim.x + (rf_u64)blockIdx.x;
    const rf_u64 token = block * (blockDim.x / width) + threadIdx.x / width;
    if (token >= tokens) {
        return; // no barrier or warp collective follows
    }
    // The launcher keeps (q_heads + k_heads) * head_dim below 2^31.
    const unsigned int qh = (unsigned int)q_heads;
    const unsigned int heads = (unsigned int)(q_heads + k_heads);
    if (vectorized) {
        rope_warp_token<T, INTERLEAVED, true, KV>(q, k, pos, block_pos, token, qh, heads, q_stride, k_stride,
                                                  head_dim, seg_dim, segments, max_pos, freqs, blockIdx.z, gridDim.z,
                                                  kv);
    } else {
        rope_warp_token<T, INTERLEAVED, false, KV>(q, k, pos, block_pos, token, qh, heads, q_stride, k_stride,
                                                   head_dim, seg_dim, segments, max_pos, freqs, blockIdx.z, gridDim.z,
                                                   kv);
    }
    if constexpr (KV) {
        // Every lane of the token's warps, including those rope_warp_token left idle; V is the
        // kernel ahead's output (a second wait returns at once).
        rf_follow_prior_grid();
        copy_v_row<T>(kv, token, blockIdx.z * width + threadIdx.x % width, gridDim.z * width);
    }
}

} // namespace rf_rope

#define RF_ROPE_ENTRY(suffix, T)                                                                          \
    RF_KERNEL void __launch_bounds__(1024)                                                                \
        rf_rope_##suffix(T* q, T* k, const int* pos, const int* block_pos, rf_u64 tokens, rf_u64 q_heads,  \
                         rf_u64 k_heads, rf_u64 q_stride, rf_u64 k_stride, unsigned int head_dim,          \
                         unsigned int seg_dim, unsigned int segments, int interleaved, int vectorized,     \
                         long long max_pos, rf_rope::Freqs freqs) {                                        \
        rf_follow_prior_grid();                                                                           \
        rf_rope::rope<T>(q, k, pos, block_pos, tokens, q_heads, k_heads, q_stride, k_stride, head_dim,     \
                         seg_dim, segments, interleaved, vectorized, max_pos, freqs);                      \
    }
RF_FOR_EACH_DTYPE(RF_ROPE_ENTRY)

// The warp path, one entry for half-split pairs (NeoX, ChatGLM 2D) and one for interleaved pairs
// (GPT-J, GLM), so each gets its own register count; the launcher uses at most 128 threads.
#define RF_ROPE_WARP_ENTRY(suffix, T)                                                                     \
    RF_KERNEL void __launch_bounds__(128)                                                                 \
        rf_rope_warp_##suffix(T* q, T* k, const int* pos, const int* block_pos, rf_u64 tokens,             \
                              rf_u64 q_heads, rf_u64 k_heads, rf_u64 q_stride, rf_u64 k_stride,           \
                              unsigned int head_dim, unsigned int seg_dim, unsigned int segments,         \
                              int interleaved, int vectorized, long long max_pos, rf_rope::Freqs freqs) { \
        (void)interleaved; /* always 0 here; waits inside, after the angles */                            \
        rf_rope::rope_warp<T, false, false>(q, k, pos, block_pos, tokens, q_heads, k_heads, q_stride,      \
                                            k_stride, head_dim, seg_dim, segments, vectorized, max_pos,   \
                                            freqs, rf_kv_write_params{});                                 \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(128)                                                                 \
        rf_rope_warp_il_##suffix(T* q, T* k, const int* pos, const int* block_pos, rf_u64 tokens,          \
                                 rf_u64 q_heads, rf_u64 k_heads, rf_u64 q_stride, rf_u64 k_stride,        \
                                 unsigned int head_dim, unsigned int seg_dim, unsigned int segments,      \
                                 int interleaved, int vectorized, long long max_pos,                      \
                                 rf_rope::Freqs freqs) {                                                  \
        (void)interleaved; /* always 1 here; waits inside, after the angles */                            \
        rf_rope::rope_warp<T, true, false>(q, k, pos, block_pos, tokens, q_heads, k_heads, q_stride,       \
                                           k_stride, head_dim, seg_dim, segments, vectorized, max_pos,    \
                                           freqs, rf_kv_write_params{});                                  \
    }
RF_FOR_EACH_DTYPE(RF_ROPE_WARP_ENTRY)

// The warp path fused with the KV-cache write (version 6): K read from kv.k (kv.k_stride), its
// rotated heads stored into kv.k_cache, V copied into kv.v_cache, at the slots kv.slots; one
// segment of seg_dim == head_dim (no pass-through elements, which would miss the cache).
#define RF_ROPE_WARP_KV_ENTRY(suffix, T)                                                                  \
    RF_KERNEL void __launch_bounds__(128)                                                                 \
        rf_rope_warp_kv_##suffix(T* q, const int* pos, rf_u64 tokens, rf_u64 q_heads, rf_u64 k_heads,      \
                                 rf_u64 q_stride, unsigned int head_dim, int vectorized, long long max_pos, \
                                 rf_rope::Freqs freqs, rf_kv_write_params kv) {                           \
        rf_rope::rope_warp<T, false, true>(q, (T*)kv.k, pos, nullptr, tokens, q_heads, k_heads, q_stride,  \
                                           kv.k_stride, head_dim, head_dim, 1, vectorized, max_pos, freqs, \
                                           kv);                                                           \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(128)                                                                 \
        rf_rope_warp_il_kv_##suffix(T* q, const int* pos, rf_u64 tokens, rf_u64 q_heads, rf_u64 k_heads,   \
                                    rf_u64 q_stride, unsigned int head_dim, int vectorized,               \
                                    long long max_pos, rf_rope::Freqs freqs, rf_kv_write_params kv) {     \
        rf_rope::rope_warp<T, true, true>(q, (T*)kv.k, pos, nullptr, tokens, q_heads, k_heads, q_stride,   \
                                          kv.k_stride, head_dim, head_dim, 1, vectorized, max_pos, freqs,  \
                                          kv);                                                            \
    }
RF_FOR_EACH_DTYPE(RF_ROPE_WARP_KV_ENTRY)
