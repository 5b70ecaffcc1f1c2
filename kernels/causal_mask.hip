// Causal mask: for every matrix b < batch, row i < seq_q and column j < seq_k,
//
//   scores[b * batch_stride + i * row_stride + j] = fill   where j > i + offset,
//
// every other element keeping its value. offset = seq_k - seq_q is the KV-cache case (query i is
// token seq_k - seq_q + i of the sequence); any offset works, negative ones mask whole rows.
// Storage f32, f16 or bf16 (<dt>); `fill` (usually -inf) is rounded to it.
//
// Speed: write-only and memory-bound. In row i the masked columns are one contiguous range
// [i + offset + 1, seq_k). The work is cut into items, a (row, column chunk) pair each (`chunk`
// columns from the host: a few 16-byte stores a lane, so items are of equal size wherever they
// are fully masked), and each *warp* takes one item at a time, walking the items `step` apart:
// it writes its share of the masked range with
// 16-byte stores (a scalar head up to the first 16-byte boundary, whole vectors, a scalar tail),
// then moves on. v1 gave every row a block of its own, most of whose threads stored one vector
// or none before the block exited: the per-block cost, not the stores, set its speed. Items
// left of the masked range cost a warp a few integer instructions.
//
// The row's first 32-byte sector: a store that covers part of a sector makes the memory read
// the sector and merge before it can write it (DRAM writes whole sectors). One such read a row,
// scattered through a stream of writes, cost this kernel a large share of its time
// (docs/kernels/causal_mask.md, version 5). So, before any item, the grid's threads take one row
// each and write the sector holding the row's first masked element whole: its elements left of
// the mask (at most 7 f32 or 15 f16/bf16, all in the same row) are read and written back with
// the bits they had, the rest get the fill. The items then start after that sector. Rows whose
// first masked element is sector-aligned, or whose sector would reach outside the row, skip
// this. So these few unmasked elements are rewritten, unchanged, during the kernel: nothing else
// may write them concurrently (nothing should: the mask and whatever produced the scores are
// ordered on a stream).

#include "rocmforge.h"

// Row i's first masked column: i + offset + 1, clamped to [0, seq_k]. The host clamps offset to
// [-seq_q, seq_k], so this cannot overflow.
RF_DEVICE rf_u64 rf_mask_start(rf_u64 i, long long offset, rf_u64 seq_k) {
    const long long first = (long long)i + offset + 1;
    return first <= 0 ? 0 : ((rf_u64)first >= seq_k ? seq_k : (rf_u64)first);
}

// The 32-byte sector holding the row's first masked element (`row + start`), when that element
// is not sector-aligned and the whole sector lies inside the row; otherwise nullptr (the items
// then store the row's head element by element).
template <typename T> RF_DEVICE char* rf_mask_head_sector(T* row, rf_u64 start, rf_u64 seq_k) {
    const rf_u64 first = (rf_u64)(row + start);
    const rf_u64 sector = first & ~(rf_u64)31;
    if (first == sector || sector < (rf_u64)row || sector + 32 > (rf_u64)(row + seq_k)) {
        return nullptr;
    }
    return reinterpret_cast<char*>(sector);
}

// Row r (of batch * seq_q): where it starts, its first masked column, and its head sector (or
// nullptr), as both the sector loop and the items need them.
template <typename T> struct rf_mask_row {
    T* row;
    rf_u64 start;
    char* sector;
};

template <typename T>
RF_DEVICE rf_mask_row<T> rf_mask_row_at(T* scores, rf_u64 r, rf_u64 seq_q, rf_u64 seq_k, rf_u64 batch_stride,
                                        rf_u64 row_stride, long long offset) {
    rf_u64 b;
    rf_u64 i;
    rf_divmod_u64(r, seq_q, &b, &i);
    rf_mask_row<T> m;
    m.row = scores + b * batch_stride + i * row_stride;
    m.start = rf_mask_start(i, offset, seq_k);
    m.sector = rf_mask_head_sector(m.row, m.start, seq_k);
    return m;
}

// Writes the sector whole: its first `kept` bytes (the unmasked elements, a whole number of
// them) with the bits read, the rest with the fill. Little-endian: the lower address is the low
// half of a 32-bit word.
RF_DEVICE void rf_mask_merge_sector(char* sector, unsigned kept, uint4 fill) {
    const uint4 lo = rf_load16(sector);
    const uint4 hi = rf_load16(sector + 16);
    unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const unsigned f[4] = {fill.x, fill.y, fill.z, fill.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const int bytes = (int)kept - 4 * k;  // of word k's 4 bytes, how many are kept
        const unsigned keep = bytes >= 4 ? 0xffffffffu : (bytes <= 0 ? 0u : (1u << (8 * bytes)) - 1u);
        w[k] = (w[k] & keep) | (f[k & 3] & ~keep);
    }
    rf_store16(sector, make_uint4(w[0], w[1], w[2], w[3]));
    rf_store16(sector + 16, make_uint4(w[4], w[5], w[6], w[7]));
}

template <typename T>
RF_DEVICE void rf_causal_mask(T* scores, rf_u64 batch, rf_u64 seq_q, rf_u64 seq_k, rf_u64 batch_stride,
                              rf_u64 row_stride, rf_u64 chunk, rf_u64 step, long long offset, float fill) {
    constexpr int N = rf_pack16<T>::N;
    const T fill_one = rf_from_float<T>(fill);
    float fill_vec[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
        fill_vec[e] = fill;
    }
    const uint4 fill_packed = rf_pack16<T>::pack(fill_vec);
    // A constant on NVIDIA: with the run-time width the f32 store loop took longer
    // (docs/kernels/causal_mask.md).
    const unsigned int warp = rf_warp_width();
    const unsigned int lane = threadIdx.x % warp;
    const rf_u64 warps_per_block = blockDim.x / warp;
    const rf_u64 chunks_per_row = (seq_k + chunk - 1) / chunk;
    const rf_u64 rows = batch * seq_q;
    const rf_u64 items = rows * chunks_per_row;
    // The rows' head sectors (see the top of the file), one row a thread: these loads are the
    // kernel's only reads, issued together at its start.
    const rf_u64 threads = (rf_u64)gridDim.x * blockDim.x;
    for (rf_u64 r = (rf_u64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += threads) {
        const rf_mask_row<T> m = rf_mask_row_at(scores, r, seq_q, seq_k, batch_stride, row_stride, offset);
        if (m.sector != nullptr) {
            const unsigned kept = (unsigned)(reinterpret_cast<char*>(m.row + m.start) - m.sector);
            rf_mask_merge_sector(m.sector, kept, fill_packed);
        }
    }
    const rf_u64 first = (rf_u64)blockIdx.x * warps_per_block + threadIdx.x / warp;
    if (first >= step) {
        return; // the few warps past `step` (see below) have no items
    }
    for (rf_u64 item = first; item < items; item += step) {
        // Row-major items: at any moment the grid works on a window of consecutive rows, which
        // the memory writes back densely. The host picks `step` coprime with the chunks a row,
        // so a warp's successive items move through every chunk column: with a step that is a
        // multiple of it, a warp would keep one column, and the warps holding the last columns
        // (masked in almost every row) would do several times the work of the others.
        rf_u64 r;
        rf_u64 c;
        rf_divmod_u64(item, chunks_per_row, &r, &c);
        const rf_mask_row<T> m = rf_mask_row_at(scores, r, seq_q, seq_k, batch_stride, row_stride, offset);
        T* const row = m.row;
        // The first column this item may store: the row's first masked one, or the first after
        // its head sector when the loop above wrote that.
        const rf_u64 start =
            m.sector != nullptr ? (rf_u64)(m.sector + 32 - reinterpret_cast<char*>(row)) / sizeof(T) : m.start;
        const rf_u64 chunk_lo = c * chunk;
        const rf_u64 chunk_hi = chunk_lo + chunk < seq_k ? chunk_lo + chunk : seq_k;
        const rf_u64 lo = chunk_lo > start ? chunk_lo : start;
        if (lo >= chunk_hi) {
            continue;  // uniform across the warp: the item is left of the masked range
        }
        T* p = row + lo;
        const rf_u64 n = chunk_hi - lo;
        // Elements before the first 16-byte boundary (all of them if p is not even
        // element-aligned, which a valid T* always is).
        const rf_u64 addr = (rf_u64)p;
        rf_u64 head = addr % sizeof(T) == 0 ? ((16 - (addr & 15)) & 15) / sizeof(T) : n;
        head = head < n ? head : n;
        const rf_u64 nvec = (n - head) / N;
        const rf_u64 tail = n - head - nvec * N;
        // head and tail are below N <= 8 elements, and a warp has at least 32 lanes.
        if (lane < head) {
            p[lane] = fill_one;
        }
        T* vp = p + head;
#pragma unroll 4
        for (rf_u64 v = lane; v < nvec; v += warp) {
            rf_store16(vp + v * N, fill_packed);
        }
        if (lane < tail) {
            vp[nvec * N + lane] = fill_one;
        }
    }
}

// Entry point. batch, seq_q, seq_k, chunk >= 1, batch * seq_q * ceil(seq_k / chunk) < 2^64; a
// 1-D grid of any size whose blocks are whole warps; 1 <= step <= the grid's warps (warps
// numbered `step` and up return at once). The host launcher checks that every row lies
// inside the buffer and that rows do not overlap, and clamps offset to [-seq_q, seq_k] (which
// changes no result).
#define RF_CAUSAL_MASK_ENTRY(suffix, T)                                                                   \
    RF_KERNEL void rf_causal_mask_##suffix(T* scores, rf_u64 batch, rf_u64 seq_q, rf_u64 seq_k,            \
                                           rf_u64 batch_stride, rf_u64 row_stride, rf_u64 chunk,          \
                                           rf_u64 step, long long offset, float fill) {                    \
        rf_causal_mask<T>(scores, batch, seq_q, seq_k, batch_stride, row_stride, chunk, step, offset, fill); \
    }

RF_FOR_EACH_DTYPE(RF_CAUSAL_MASK_ENTRY)
