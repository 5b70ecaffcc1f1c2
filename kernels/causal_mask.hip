// Causal mask: for every matrix b < batch, row i < seq_q and column j < seq_k,
//
//   scores[b * batch_stride + i * row_stride + j] = fill   where j > i + offset,
//
// every other element left untouched (neither read nor written). offset = seq_k - seq_q is the
// KV-cache case (query i is token seq_k - seq_q + i of the sequence); any offset works, negative
// ones mask whole rows. Storage f32, f16 or bf16 (<dt>); `fill` (usually -inf) is rounded to it.
//
// Speed: write-only and memory-bound. In row i the masked columns are one contiguous range
// [i + offset + 1, seq_k), so each block owns one (row, column chunk) pair (blockIdx.x walks the
// rows, blockIdx.y the chunks, both grid-stride) and writes its share of that range with 16-byte
// stores: a scalar head up to the first 16-byte boundary, whole vectors, a scalar tail. Blocks
// whose chunk lies left of the range have nothing to do and leave at once.

#include "rocmforge.h"

// 16-byte stores per thread per chunk: a chunk is blockDim.x * RF_MASK_UNROLL * N elements.
#define RF_MASK_UNROLL 4

template <typename T>
RF_DEVICE void rf_causal_mask(T* scores, rf_u64 batch, rf_u64 seq_q, rf_u64 seq_k, rf_u64 batch_stride,
                              rf_u64 row_stride, long long offset, float fill) {
    constexpr int N = rf_pack16<T>::N;
    const T fill_one = rf_from_float<T>(fill);
    float fill_vec[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
        fill_vec[e] = fill;
    }
    const uint4 fill_packed = rf_pack16<T>::pack(fill_vec);
    const unsigned int t = threadIdx.x;
    const unsigned int block = blockDim.x;
    const rf_u64 chunk = (rf_u64)block * RF_MASK_UNROLL * N;
    const rf_u64 rows = batch * seq_q;
    for (rf_u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const rf_u64 b = r / seq_q;
        const rf_u64 i = r - b * seq_q;
        // First masked column: i + offset + 1, clamped to [0, seq_k]. The host clamps offset to
        // [-seq_q, seq_k], so this cannot overflow.
        const long long first = (long long)i + offset + 1;
        const rf_u64 start = first <= 0 ? 0 : ((rf_u64)first >= seq_k ? seq_k : (rf_u64)first);
        if (start >= seq_k) {
            continue;
        }
        T* row = scores + b * batch_stride + i * row_stride;
        for (rf_u64 c = blockIdx.y; c * chunk < seq_k; c += gridDim.y) {
            const rf_u64 chunk_end = c * chunk + chunk;
            const rf_u64 lo = c * chunk > start ? c * chunk : start;
            const rf_u64 hi = chunk_end < seq_k ? chunk_end : seq_k;
            if (lo >= hi) {
                continue;
            }
            T* p = row + lo;
            const rf_u64 n = hi - lo;
            // Elements before the first 16-byte boundary (all of them if p is not even
            // element-aligned, which a valid T* always is).
            const rf_u64 addr = (rf_u64)p;
            rf_u64 head = addr % sizeof(T) == 0 ? ((16 - (addr & 15)) & 15) / sizeof(T) : n;
            head = head < n ? head : n;
            const rf_u64 nvec = (n - head) / N;
            const rf_u64 tail = n - head - nvec * N;
            if (t < head) {
                p[t] = fill_one;
            }
            T* vp = p + head;
            for (rf_u64 v = t; v < nvec; v += block) {
                rf_store16(vp + v * N, fill_packed);
            }
            if (t < tail) {
                vp[nvec * N + t] = fill_one;
            }
        }
    }
}

// Entry point. batch, seq_q, seq_k >= 1; the host launcher checks that every row lies inside the
// buffer and that rows do not overlap, and clamps offset to [-seq_q, seq_k] (which changes no
// result).
#define RF_CAUSAL_MASK_ENTRY(suffix, T)                                                                   \
    RF_KERNEL void rf_causal_mask_##suffix(T* scores, rf_u64 batch, rf_u64 seq_q, rf_u64 seq_k,            \
                                           rf_u64 batch_stride, rf_u64 row_stride, long long offset,      \
                                           float fill) {                                                   \
        rf_causal_mask<T>(scores, batch, seq_q, seq_k, batch_stride, row_stride, offset, fill);           \
    }

RF_FOR_EACH_DTYPE(RF_CAUSAL_MASK_ENTRY)
