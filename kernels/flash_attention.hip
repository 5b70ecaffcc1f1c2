// Flash attention forward: O = softmax(scale * Q K^T + causal mask) V, fused and tiled with an
// online softmax, so the [seq_q, seq_k] scores never leave the chip.
//
// Shapes and layout (every tensor addressed by element strides; head_dim contiguous):
//   Q, O [batch, seq_q, q_heads, head_dim]   K, V [batch, seq_k, kv_heads, head_dim]
//   (or [batch, heads, seq, head_dim], or any strides), LSE [batch, q_heads, seq_q] in f32.
// Query i sees key j when j <= i + causal_offset (causal) or always (non-causal); a row that sees
// no key is written as zeros with LSE = -inf.
//
// GQA/MQA packing: a block serves one KV head of one batch, and its rows are the (query, head)
// pairs of the `group = q_heads / kv_heads` query heads that share it: packed row m is query
// m / group of head kv_head * group + m % group. Each K/V tile is then read once for the whole
// group, and decoding (seq_q = 1) still fills the rows of a tile with the group's heads.
//
// Split-KV: with few blocks for the device (decode), the keys are cut into `num_splits` ranges
// (blockIdx.y = split * kv_heads + kv_head). Each split writes its normalised partial output and
// its LSE in f32 and `rf_flash_combine` merges them: O = sum_s exp(lse_s - lse) O_s.
//
// Three implementations of the same contract:
//   - rf_flash_<dt>_d<DMAX>: portable (every platform, every dtype, head_dim <= DMAX): f32
//     arithmetic on tiles staged in shared memory as f32.
//   - rf_flash_mma_<dt>_d<D>: NVIDIA sm_80+ matrix cores (mma.sync.m16n8k16, f16/bf16 inputs,
//     f32 accumulation), chosen by the launcher where the device reports them
//     (`DeviceInfo::matrix_cores`). On other targets the entry exists but traps: the launcher
//     never selects it there.
//   - rf_flash_mfma_<dt>_d<D>: AMD CDNA matrix cores (MFMA 16x16x16, gfx908/90a/94x/950), the same
//     way: built with a body for those targets only, chosen where the device reports MFMA.
// The softmax runs in the log2 domain: scale_log2 = scale * log2(e), p = exp2(s * scale_log2 - m).

#include "rocmforge.h"
#include "rocmforge_mma.h"
#include "rocmforge_wgmma.h"

// Mirrors `FlashParams` in crates/rocm-kernels/src/attention/flash.rs (field order and types).
struct rf_flash_params {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;         // [batch, q_heads, seq_q] or null
    float* partial_o;   // [splits, batch, q_heads, seq_q, head_dim] or null: then O is written
    float* partial_lse; // [splits, batch, q_heads, seq_q]
    rf_u64 q_batch, q_seq, q_head;
    rf_u64 k_batch, k_seq, k_head;
    rf_u64 v_batch, v_seq, v_head;
    rf_u64 o_batch, o_seq, o_head;
    long long causal_offset;
    int batch, q_heads, kv_heads, seq_q, seq_k, head_dim;
    int group;          // q_heads / kv_heads
    int keys_per_split; // a multiple of every kernel's key tile
    int num_splits;
    int causal;
    float scale_log2;
    int pad;
    // Paged K/V (null block_table: contiguous). Key j of batch b is slot
    // block_table[b * max_blocks + j / block_size] * block_size + j % block_size of the caches
    // K, V ([num_blocks * block_size] slots, a slot k_seq / v_seq elements apart, heads k_head /
    // v_head apart); batch b has seq_lens[b] keys, and its queries are the last seq_q of them.
    const int* block_table;
    const int* seq_lens;
    int block_size, max_blocks, num_blocks;
    int block_shift; // log2(block_size) when it is a power of two, else -1
};

// The parameters as batch b sees them: with a paged cache, its own number of keys (clamped to
// what its block table can hold) and, when causal, its queries at the end of them.
RF_DEVICE rf_flash_params rf_flash_for_batch(const rf_flash_params& args, int b) {
    rf_flash_params p = args;
    if (p.seq_lens) {
        long long len = p.seq_lens[b];
        const long long cap = (long long)p.max_blocks * p.block_size;
        len = len < 0 ? 0 : (len > cap ? cap : len);
        p.seq_k = (int)len;
        if (p.causal) p.causal_offset = len - p.seq_q;
    }
    return p;
}

// Cache slot of key `key` (< max_blocks * block_size < 2^31, checked by the launcher) of batch
// b, or -1 when its block id is outside the cache: a corrupt table never reads outside the
// cache. A power-of-two block size takes a shift and a mask; another a division, a long
// software sequence on GPUs that ran for every row of every tile (paged decode measured 0.57 of
// copy with it).
RF_DEVICE long long rf_flash_slot(const rf_flash_params& p, int b, int key) {
    int index, offset;
    if (p.block_shift >= 0) {
        index = key >> p.block_shift;
        offset = key & (p.block_size - 1);
    } else {
        index = key / p.block_size;
        offset = key - index * p.block_size;
    }
    const int blk = p.block_table[(rf_u64)b * p.max_blocks + index];
    if (blk < 0 || blk >= p.num_blocks) return -1;
    return (long long)blk * p.block_size + offset;
}

// Row `key` of K or V for batch b: `base` is the tensor with the batch and KV head applied.
// Paged, through the block table; null (the row reads as zeros) outside the cache.
template <typename T>
RF_DEVICE const T* rf_flash_kv_row(const rf_flash_params& p, const T* base, rf_u64 seq_stride, int b, long long key) {
    if (!p.block_table) return base + (rf_u64)key * seq_stride;
    const long long slot = rf_flash_slot(p, b, (int)key);
    return slot < 0 ? nullptr : base + (rf_u64)slot * seq_stride;
}

// Where packed row m of a block lives, and the last key it may see (-1: none).
struct rf_flash_row {
    bool valid;
    int query;
    int head;
    long long last_key;
};

RF_DEVICE rf_flash_row rf_flash_locate(const rf_flash_params& p, int m, int kv_head) {
    // 32-bit: the launcher keeps group * seq_q (plus a tile) below 2^31, and 64-bit division is
    // a long software routine on GPUs, inlined at every call.
    rf_flash_row r;
    r.valid = m < p.group * p.seq_q;
    const int query = m / p.group;
    r.query = r.valid ? query : 0;
    r.head = kv_head * p.group + (r.valid ? m - query * p.group : 0);
    long long last = p.causal ? (long long)r.query + p.causal_offset : (long long)p.seq_k - 1;
    last = last < (long long)p.seq_k - 1 ? last : (long long)p.seq_k - 1;
    r.last_key = r.valid ? (last < -1 ? -1 : last) : -1;
    return r;
}

// Keys [begin, end) this block visits: its split's range, cut at the last key any of its rows
// `first_m .. last_m` may see (the last row sees the most under a causal mask).
RF_DEVICE void rf_flash_key_range(const rf_flash_params& p, int last_m, int kv_head, int split,
                                  long long* begin, long long* end) {
    *begin = (long long)split * p.keys_per_split;
    long long e = *begin + p.keys_per_split;
    e = e < p.seq_k ? e : p.seq_k;
    const int rows = p.group * p.seq_q;
    const rf_flash_row last = rf_flash_locate(p, last_m < rows ? last_m : rows - 1, kv_head);
    e = e < last.last_key + 1 ? e : last.last_key + 1;
    *end = e > *begin ? e : *begin;
}

// Writes one row's result: the normalised output (T) and LSE, or the split's partials (f32).
// `o_row` holds `count` consecutive output elements starting at column `col0`, `step` apart.
template <typename T>
RF_DEVICE void rf_flash_store(const rf_flash_params& p, int b, const rf_flash_row& r, int split, int col,
                              float value) {
    if (p.partial_o) {
        const rf_u64 row = (((rf_u64)split * p.batch + b) * p.q_heads + r.head) * p.seq_q + r.query;
        p.partial_o[row * p.head_dim + col] = value;
    } else {
        T* o = (T*)p.o + (rf_u64)b * p.o_batch + (rf_u64)r.query * p.o_seq + (rf_u64)r.head * p.o_head;
        o[col] = rf_from_float<T>(value);
    }
}

// LSE (natural log) of a row from the log2-domain running max m and sum l.
RF_DEVICE void rf_flash_store_lse(const rf_flash_params& p, int b, const rf_flash_row& r, int split, float m,
                                  float l) {
    const float lse = l > 0.0f ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;
    if (p.partial_o) {
        const rf_u64 row = (((rf_u64)split * p.batch + b) * p.q_heads + r.head) * p.seq_q + r.query;
        p.partial_lse[row] = lse;
    } else if (p.lse) {
        p.lse[((rf_u64)b * p.q_heads + r.head) * p.seq_q + r.query] = lse;
    }
}

// ---------------------------------------------------------------------------------------------
// Portable kernel. 128 threads, 16 packed rows, 32 keys a tile. Thread t owns row t / 8 and, of
// each key tile, keys t % 8 + 8 j; of the output, columns t % 8 + 8 c. Shared memory (f32): Q
// [16][D + 1], one K or V tile [32][D + 1] (K, then V, in the same space), P [16][32]. Rows are
// padded by one float so the 8 rows a warp reads at one column fall in different banks.
// ---------------------------------------------------------------------------------------------

#define RF_FLASH_P_ROWS 16
#define RF_FLASH_P_KEYS 32
#define RF_FLASH_P_THREADS 128

// RF_FLASH_P_KEYS rows of K or V (from `base`, rows `stride` apart, or through the block table
// when PAGED) into shared memory as f32, row stride ld; rows from k_end on are zeros.
template <typename T, bool PAGED>
RF_DEVICE void rf_flash_load_tile(float* dst, int ld, const rf_flash_params& p, const T* base, rf_u64 stride, int b,
                                  long long k0, long long k_end) {
    const int D = p.head_dim;
    for (int e = threadIdx.x; e < RF_FLASH_P_KEYS * D; e += RF_FLASH_P_THREADS) {
        const int j = e / D, c = e % D;
        const long long key = k0 + j;
        float v = 0.0f;
        if (key < k_end) {
            if constexpr (PAGED) {
                const T* row = rf_flash_kv_row(p, base, stride, b, key);
                v = row ? rf_to_float(row[c]) : 0.0f;
            } else {
                v = rf_to_float(base[(rf_u64)key * stride + c]);
            }
        }
        dst[j * ld + c] = v;
    }
}

// PAGED: K and V through block tables (a separate instantiation, as for the matrix-core kernel:
// the contiguous one carries none of it).
template <typename T, int DMAX, bool PAGED>
RF_DEVICE void rf_flash_portable(const rf_flash_params& args) {
    const rf_flash_params p = PAGED ? rf_flash_for_batch(args, blockIdx.z) : args;
    extern __shared__ float rf_flash_smem[];
    const int D = p.head_dim;
    const int ld = D + 1;
    float* qs = rf_flash_smem;
    float* kv = qs + RF_FLASH_P_ROWS * ld;
    float* ps = kv + RF_FLASH_P_KEYS * ld;

    const int tid = threadIdx.x;
    const int lr = tid / 8;
    const int l8 = tid % 8;
    const int b = blockIdx.z;
    const int kv_head = blockIdx.y % p.kv_heads;
    const int split = blockIdx.y / p.kv_heads;
    const int m0 = blockIdx.x * RF_FLASH_P_ROWS;
    const rf_flash_row row = rf_flash_locate(p, m0 + lr, kv_head);
    long long k_begin, k_end;
    rf_flash_key_range(p, m0 + RF_FLASH_P_ROWS - 1, kv_head, split, &k_begin, &k_end);

    for (int e = tid; e < RF_FLASH_P_ROWS * D; e += RF_FLASH_P_THREADS) {
        const int r = e / D, c = e % D;
        const rf_flash_row qr = rf_flash_locate(p, m0 + r, kv_head);
        const T* q = (const T*)p.q + (rf_u64)b * p.q_batch + (rf_u64)qr.query * p.q_seq + (rf_u64)qr.head * p.q_head;
        qs[r * ld + c] = qr.valid ? rf_to_float(q[c]) : 0.0f;
    }
    const T* kbase = (const T*)p.k + (rf_u64)b * p.k_batch + (rf_u64)kv_head * p.k_head;
    const T* vbase = (const T*)p.v + (rf_u64)b * p.v_batch + (rf_u64)kv_head * p.v_head;

    float acc[DMAX / 8];
#pragma unroll
    for (int c = 0; c < DMAX / 8; ++c) acc[c] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f;

    for (long long k0 = k_begin; k0 < k_end; k0 += RF_FLASH_P_KEYS) {
        __syncthreads(); // the previous tile's V (and, the first time, nothing) is done with
        rf_flash_load_tile<T, PAGED>(kv, ld, p, kbase, p.k_seq, b, k0, k_end);
        __syncthreads();
        float s[RF_FLASH_P_KEYS / 8];
        float tile_max = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < RF_FLASH_P_KEYS / 8; ++jj) {
            const int j = l8 + 8 * jj;
            const float* qrow = qs + lr * ld;
            const float* krow = kv + j * ld;
            float dot = 0.0f;
            for (int c = 0; c < D; ++c) dot = fmaf(qrow[c], krow[c], dot);
            const bool seen = k0 + j <= row.last_key && k0 + j < k_end;
            s[jj] = seen ? dot * p.scale_log2 : -INFINITY;
            tile_max = fmaxf(tile_max, s[jj]);
        }
        // The row's 8 threads are 8 consecutive lanes of one warp (8 divides 32 and 64).
        tile_max = fmaxf(tile_max, rf_shfl_xor(tile_max, 1));
        tile_max = fmaxf(tile_max, rf_shfl_xor(tile_max, 2));
        tile_max = fmaxf(tile_max, rf_shfl_xor(tile_max, 4));
        const float m_new = fmaxf(m_run, tile_max);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; // a row that has seen nothing yet
        const float alpha = exp2f(m_run - m_use);
        float sum = 0.0f;
#pragma unroll
        for (int jj = 0; jj < RF_FLASH_P_KEYS / 8; ++jj) {
            const float e = exp2f(s[jj] - m_use);
            ps[lr * RF_FLASH_P_KEYS + l8 + 8 * jj] = e;
            sum += e;
        }
        sum += rf_shfl_xor(sum, 1);
        sum += rf_shfl_xor(sum, 2);
        sum += rf_shfl_xor(sum, 4);
        l_run = l_run * alpha + sum;
        m_run = m_new;
#pragma unroll
        for (int c = 0; c < DMAX / 8; ++c) acc[c] *= alpha;
        __syncthreads(); // every row's scores are read from K: V may replace it
        rf_flash_load_tile<T, PAGED>(kv, ld, p, vbase, p.v_seq, b, k0, k_end);
        __syncthreads();
        const int keys = k_end - k0 < RF_FLASH_P_KEYS ? (int)(k_end - k0) : RF_FLASH_P_KEYS;
        for (int j = 0; j < keys; ++j) {
            const float pj = ps[lr * RF_FLASH_P_KEYS + j];
            const float* vrow = kv + j * ld;
#pragma unroll
            for (int c = 0; c < DMAX / 8; ++c) {
                const int col = l8 + 8 * c;
                if (col < D) acc[c] = fmaf(pj, vrow[col], acc[c]);
            }
        }
    }
    if (!row.valid) return;
    const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
#pragma unroll
    for (int c = 0; c < DMAX / 8; ++c) {
        const int col = l8 + 8 * c;
        if (col < D) rf_flash_store<T>(p, b, row, split, col, acc[c] * inv);
    }
    if (l8 == 0) rf_flash_store_lse(p, b, row, split, m_run, l_run);
}

#define RF_FLASH_PORTABLE_ENTRY(suffix, T, DMAX)                                                          \
    RF_KERNEL void __launch_bounds__(RF_FLASH_P_THREADS) rf_flash_##suffix##_d##DMAX(rf_flash_params p) {     \
        rf_flash_portable<T, DMAX, false>(p);                                                          \
    }                                                                                                  \
    RF_KERNEL void __launch_bounds__(RF_FLASH_P_THREADS) rf_flash_##suffix##_d##DMAX##_paged(rf_flash_params p) { \
        rf_flash_portable<T, DMAX, true>(p);                                                           \
    }
#define RF_FLASH_PORTABLE_ENTRIES(suffix, T)                                                          \
    RF_FLASH_PORTABLE_ENTRY(suffix, T, 64) RF_FLASH_PORTABLE_ENTRY(suffix, T, 128)                   \
        RF_FLASH_PORTABLE_ENTRY(suffix, T, 256)

RF_FOR_EACH_DTYPE(RF_FLASH_PORTABLE_ENTRIES)

// ---------------------------------------------------------------------------------------------
// Split-KV combine: one thread per output element (row, column). Splits that saw no key have
// lse = -inf and weigh nothing; a row no split saw stays zeros with lse = -inf.
// ---------------------------------------------------------------------------------------------

template <typename T>
RF_DEVICE void rf_flash_combine(const rf_flash_params& p) {
    const rf_u64 rows = (rf_u64)p.batch * p.q_heads * p.seq_q;
    const rf_u64 plane = rows; // elements between two splits' rows
    RF_GRID_STRIDE_LOOP(e, rows * (rf_u64)p.head_dim) {
        const rf_u64 row = e / (rf_u64)p.head_dim;
        const int col = (int)(e % (rf_u64)p.head_dim);
        float lse_max = -INFINITY;
        for (int s = 0; s < p.num_splits; ++s) lse_max = fmaxf(lse_max, p.partial_lse[s * plane + row]);
        float weight_sum = 0.0f, value = 0.0f;
        if (lse_max != -INFINITY) {
            for (int s = 0; s < p.num_splits; ++s) {
                const float w = expf(p.partial_lse[s * plane + row] - lse_max);
                weight_sum += w;
                value = fmaf(w, p.partial_o[(s * plane + row) * (rf_u64)p.head_dim + col], value);
            }
            value /= weight_sum;
        }
        const int query = (int)(row % (rf_u64)p.seq_q);
        const int head = (int)(row / (rf_u64)p.seq_q % (rf_u64)p.q_heads);
        const int b = (int)(row / ((rf_u64)p.seq_q * p.q_heads));
        T* o = (T*)p.o + (rf_u64)b * p.o_batch + (rf_u64)query * p.o_seq + (rf_u64)head * p.o_head;
        o[col] = rf_from_float<T>(value);
        if (col == 0 && p.lse) {
            p.lse[row] = lse_max == -INFINITY ? -INFINITY : lse_max + logf(weight_sum);
        }
    }
}

#define RF_FLASH_COMBINE_ENTRY(suffix, T) \
    RF_KERNEL void rf_flash_combine_##suffix(rf_flash_params p) { rf_flash_combine<T>(p); }

RF_FOR_EACH_DTYPE(RF_FLASH_COMBINE_ENTRY)

// ---------------------------------------------------------------------------------------------
// Matrix-core kernel (NVIDIA sm_80+). WARPS warps of MW 16-row fragments (prefill: 4 warps of 2,
// 128 rows a block), or warps splitting the keys of one 16-row group (decode); BC keys a tile
// (see the entries at the end of this section). Q, and K and V (STAGES buffers), are
// staged in shared memory as T by cp.async (zero-filled past the ends, so padding never holds
// NaN), rows padded by 16 bytes: the row stride is then an odd number of 16-byte chunks and the
// 8 rows one ldmatrix reads fall in different banks.
//
// Per warp, fragment and key tile: S (16 x BC) = Q K^T by mma.m16n8k16, Q fragments by ldmatrix
// (held in registers when MW = 1), K fragments by ldmatrix; the online softmax on S's
// accumulator fragments (each row is held by the 4 lanes of a quad); P, converted to T in
// registers, is directly the A operand of O (16 x D) += P V, with V fragments by
// ldmatrix.trans.
// ---------------------------------------------------------------------------------------------


#define RF_FLASH_MMA RF_MMA_SYNC

#if RF_FLASH_MMA

RF_DEVICE float rf_fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Stages ROWS rows of D elements (zero-padded to DT) into shared memory, row stride LD
// elements. `row_ptr(r)` gives a row's global address, or null for a row past the end (zero-
// filled). `any` is a valid global address for the zero-fill copies, which read nothing.
template <typename T, int DT, int LD, int ROWS, int THREADS, typename RowPtr>
RF_DEVICE void rf_flash_stage(T* smem, int D, const void* any, RowPtr row_ptr) {
    constexpr int CHUNKS = DT / 8; // 16-byte chunks a row
    for (int e = threadIdx.x; e < ROWS * CHUNKS; e += THREADS) {
        const int r = e / CHUNKS, c = e % CHUNKS;
        const T* src = row_ptr(r);
        const bool ok = src != nullptr && c * 8 < D;
        rf_cp_async16(smem + r * LD + c * 8, ok ? (const void*)(src + c * 8) : any, ok ? 16 : 0);
    }
}

// The same for ROWS rows `row_stride` elements apart starting at `first`, of which the first
// `valid_rows` exist: a K or V tile. Where the threads divide the rows' chunks evenly, each
// thread keeps one column chunk and steps down the rows, so the per-copy work is an add and a
// compare (this runs for every tile, in the kernel's main loop).
template <typename T, int DT, int LD, int ROWS, int THREADS>
RF_DEVICE void rf_flash_stage_tile(T* smem, const T* first, rf_u64 row_stride, int valid_rows, int D,
                                   const void* any) {
    constexpr int CHUNKS = DT / 8;
    if constexpr (THREADS % CHUNKS == 0 && ROWS % (THREADS / CHUNKS) == 0) {
        constexpr int RSTEP = THREADS / CHUNKS;
        const int c = threadIdx.x % CHUNKS;
        const int r0 = threadIdx.x / CHUNKS;
        const bool col_ok = c * 8 < D;
        const T* src = first + (rf_u64)r0 * row_stride + c * 8;
        T* dst = smem + r0 * LD + c * 8;
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; ++i) {
            const bool ok = col_ok && r0 + i * RSTEP < valid_rows;
            rf_cp_async16(dst + i * RSTEP * LD, ok ? (const void*)src : any, ok ? 16 : 0);
            src += (rf_u64)RSTEP * row_stride;
        }
    } else {
        rf_flash_stage<T, DT, LD, ROWS, THREADS>(smem, D, any, [&](int r) -> const T* {
            return r < valid_rows ? first + (rf_u64)r * row_stride : nullptr;
        });
    }
}

// The paged fast path (power-of-two blocks, 32-bit slot strides: every real cache), for the
// kernels whose threads divide a tile's 16-byte chunks evenly (each thread keeps one column
// chunk and copies rows r0, r0 + RSTEP, ...). It is split in two so the block ids of the next
// tile can be loaded a tile ahead: rf_flash_paged_ids reads the thread's ids of the tile at k0,
// rf_flash_stage_kv_ids issues its copies. Per row that is a table load (off the critical
// path), a shift and a mask, one unsigned compare and one 32 x 32 -> 64-bit multiply-add a
// tensor, against ~30 instructions of 64-bit arithmetic and a dependent table load in the
// general form below. (ncu on the 8-warp decode kernel, H200: the general form made the paged
// kernel issue twice the contiguous kernel's instructions, 100 us against 73 us.) Slots fit 32
// bits: the launcher keeps num_blocks * block_size < 2^31.
template <int DT, int ROWS, int THREADS>
RF_DEVICE void rf_flash_paged_ids(const rf_flash_params& p, const int* table, long long k0, long long k_end, int D,
                                  unsigned* ids) {
    constexpr int CHUNKS = DT / 8;
    constexpr int RSTEP = THREADS / CHUNKS;
    const int c = threadIdx.x % CHUNKS;
    const int r0 = threadIdx.x / CHUNKS;
    const bool col_ok = c * 8 < D;
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i) {
        const long long key = k0 + r0 + i * RSTEP;
        // Rows past the keys read no table entry (their index may be past the table); they and
        // columns past head_dim get num_blocks, an id that reads as zeros.
        ids[i] = col_ok && key < k_end ? (unsigned)table[(int)key >> p.block_shift] : (unsigned)p.num_blocks;
    }
}

template <typename T, int DT, int LD, int ROWS, int THREADS>
RF_DEVICE void rf_flash_stage_kv_ids(T* ksm, T* vsm, const rf_flash_params& p, const T* kbase, const T* vbase,
                                     long long k0, const unsigned* ids) {
    constexpr int CHUNKS = DT / 8;
    constexpr int RSTEP = THREADS / CHUNKS;
    const int c = threadIdx.x % CHUNKS;
    const int r0 = threadIdx.x / CHUNKS;
    const int shift = p.block_shift;
    const unsigned mask = (unsigned)p.block_size - 1u;
    const unsigned blocks = (unsigned)p.num_blocks;
    const unsigned kseq = (unsigned)p.k_seq, vseq = (unsigned)p.v_seq;
    const T* kc = kbase + c * 8;
    const T* vc = vbase + c * 8;
    const unsigned key0 = (unsigned)k0 + (unsigned)r0;
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i) {
        const int r = r0 + i * RSTEP;
        const unsigned blk = ids[i];
        const bool ok = blk < blocks; // also refuses a corrupt (negative) id
        const unsigned slot = (blk << shift) | ((key0 + (unsigned)(i * RSTEP)) & mask);
        rf_cp_async16(ksm + r * LD + c * 8, ok ? (const void*)(kc + (rf_u64)slot * kseq) : p.k, ok ? 16 : 0);
        rf_cp_async16(vsm + r * LD + c * 8, ok ? (const void*)(vc + (rf_u64)slot * vseq) : p.v, ok ? 16 : 0);
    }
}

// Both K and V rows of a tile from a paged cache (one block-table lookup a row serves both).
// Where the threads divide the rows' chunks evenly each thread keeps one column chunk and
// looks up only the rows it copies; otherwise one lookup a chunk.
template <typename T, int DT, int LD, int ROWS, int THREADS>
RF_DEVICE void rf_flash_stage_kv_paged(T* ksm, T* vsm, const rf_flash_params& p, const T* kbase, const T* vbase,
                                       int b, long long k0, int valid_rows, int D) {
    constexpr int CHUNKS = DT / 8;
    // Slot of key k0 + r, or -1 when the row is absent or outside the cache.
    auto slot_of = [&](int r) -> long long { return r < valid_rows ? rf_flash_slot(p, b, (int)k0 + r) : -1; };
    if constexpr (THREADS % CHUNKS == 0 && ROWS % (THREADS / CHUNKS) == 0) {
        constexpr int RSTEP = THREADS / CHUNKS;
        const int c = threadIdx.x % CHUNKS;
        const int r0 = threadIdx.x / CHUNKS;
        const bool col_ok = c * 8 < D;
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; ++i) {
            const int r = r0 + i * RSTEP;
            const long long slot = col_ok ? slot_of(r) : -1;
            const bool ok = slot >= 0;
            rf_cp_async16(ksm + r * LD + c * 8, ok ? (const void*)(kbase + (rf_u64)slot * p.k_seq + c * 8) : p.k, ok ? 16 : 0);
            rf_cp_async16(vsm + r * LD + c * 8, ok ? (const void*)(vbase + (rf_u64)slot * p.v_seq + c * 8) : p.v, ok ? 16 : 0);
        }
    } else {
        for (int e = threadIdx.x; e < ROWS * CHUNKS; e += THREADS) {
            const int r = e / CHUNKS, c = e % CHUNKS;
            const long long slot = c * 8 < D ? slot_of(r) : -1;
            const bool ok = slot >= 0;
            rf_cp_async16(ksm + r * LD + c * 8, ok ? (const void*)(kbase + (rf_u64)slot * p.k_seq + c * 8) : p.k, ok ? 16 : 0);
            rf_cp_async16(vsm + r * LD + c * 8, ok ? (const void*)(vbase + (rf_u64)slot * p.v_seq + c * 8) : p.v, ok ? 16 : 0);
        }
    }
}

// op over the 2 * NT scores of one row (h = 0: row g, 1: row g + 8) of an S fragment, as a
// tree (depth log2(2 NT), not a chain of 2 NT dependent operations).
template <int NT, typename Op>
RF_DEVICE float rf_flash_row_reduce(const float (&s)[NT][4], int h, Op op) {
    float v[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) v[n] = op(s[n][2 * h], s[n][2 * h + 1]);
#pragma unroll
    for (int w = 1; w < NT; w *= 2) {
#pragma unroll
        for (int n = 0; n + w < NT; n += 2 * w) v[n] = op(v[n], v[n + w]);
    }
    return v[0];
}

// O *= alpha row by row (alpha = exp2(m_old - m_new) from rf_flash_softmax_tile).
template <int MW, int DTILES>
RF_DEVICE void rf_flash_rescale_o(float (&o)[MW][DTILES][4], const float (&alpha)[MW][2]) {
    bool moved = false;
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) moved |= alpha[mi][0] != 1.0f || alpha[mi][1] != 1.0f;
    // exp2(0) is exactly 1: once the running maxima settle (most tiles of a long row) no row of
    // the warp moves and the O rescale (DT / 2 multiplies a fragment and thread) is skipped; the
    // vote keeps the branch uniform.
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
            for (int i = 0; i < DTILES; ++i) {
                o[mi][i][0] *= alpha[mi][0];
                o[mi][i][1] *= alpha[mi][0];
                o[mi][i][2] *= alpha[mi][1];
                o[mi][i][3] *= alpha[mi][1];
            }
        }
    }
}

// One key tile's online softmax for the thread's 2 * MW rows, shared by the mma.sync and wgmma
// kernels (their S and O fragments are laid out alike: rows g and g + 8 of each 16-row fragment,
// columns 2t, 2t + 1 of each 8-wide n-tile). When `edge` (tiles on the causal diagonal or at the
// end of the keys) the scores of keys a row may not see are masked first. Then the running max
// and sum move on, O is rescaled, and S becomes the tile's unnormalised probabilities. `row0`:
// the packed row of fragment 0's row 0; `key0`: the key of column 0. The scale (> 0, checked by
// the launcher) is applied inside the exponent: max(scale * s) = scale * max(s).
//
// O is rescaled by alpha = exp2(m_old - m_new) in the middle (the mma.sync kernels), or, with
// DEFER, left to the caller (rf_flash_rescale_o with the `alpha` returned): the warpgroup kernel
// runs this while the previous tile's P V is still accumulating into O.
template <int MW, int NT, int DTILES, bool DEFER = false>
RF_DEVICE void rf_flash_softmax_tile(const rf_flash_params& p, float (&s)[MW][NT][4], float (&o)[MW][DTILES][4],
                                     float (&m_run)[MW][2], float (&l_run)[MW][2], float (&alpha)[MW][2], bool edge,
                                     int row0, int key0, int key_end, int kv_head) {
    const int lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    if (edge) {
        // The last key each of the thread's rows sees, looked up here rather than held through
        // the loop (registers: only diagonal and last tiles get here). Keys fit 32 bits (seq_k
        // is an int).
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int last = (int)rf_flash_locate(p, row0 + 16 * mi + g + 8 * h, kv_head).last_key;
#pragma unroll
                for (int n = 0; n < NT; ++n) {
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int key = key0 + n * 8 + 2 * t + c;
                        float& v = s[mi][n][2 * h + c];
                        v = key <= last && key < key_end ? v : -INFINITY;
                    }
                }
            }
        }
    }
    // The online softmax of the thread's 2 * MW rows, phase by phase over all of them, with
    // no branch inside a phase: the rows' max and sum chains interleave (ncu: "wait" on
    // fixed-latency dependencies was the top stall when each row ran its chain alone).
    const float sl2 = p.scale_log2;
    float m_use[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = rf_flash_row_reduce<NT>(s[mi], h, [](float x, float y) { return fmaxf(x, y); });
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_run[mi][h], mx * sl2);
            m_use[mi][h] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[mi][h] = rf_fast_exp2(m_run[mi][h] - m_use[mi][h]);
            m_run[mi][h] = m_new;
        }
    }
    if constexpr (!DEFER) rf_flash_rescale_o(o, alpha);
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][n][e] = rf_fast_exp2(fmaf(s[mi][n][e], sl2, -m_use[mi][e / 2]));
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // Per-thread partial sums: the quad's are added once, at the end.
            const float sum = rf_flash_row_reduce<NT>(s[mi], h, [](float x, float y) { return x + y; });
            l_run[mi][h] = fmaf(l_run[mi][h], alpha[mi][h], sum);
        }
    }
}

// The A fragment of P for 16-key step kk (n-tiles 2 kk and 2 kk + 1 of S, in the mma.sync m16n8k16
// A layout, which is also wgmma's register A layout), rounded to T.
template <typename T, int NT> RF_DEVICE void rf_flash_pack_p(const float (&s)[NT][4], int kk, unsigned (&a)[4]) {
    a[0] = rf_pack2_bits16<T>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = rf_pack2_bits16<T>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = rf_pack2_bits16<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = rf_pack2_bits16<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// The rows' sums: each thread holds partial sums of its rows (rf_flash_softmax_tile), the quad's
// four lanes together the whole.
template <int MW> RF_DEVICE void rf_flash_quad_sums(const float (&l_run)[MW][2], float (&l_sum)[MW][2]) {
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            l_sum[mi][h] = l_run[mi][h];
            l_sum[mi][h] += __shfl_xor_sync(0xffffffffu, l_sum[mi][h], 1);
            l_sum[mi][h] += __shfl_xor_sync(0xffffffffu, l_sum[mi][h], 2);
        }
    }
}

// Normalises the thread's rows of O (fragment mi's rows g and g + 8; `row0` the packed row of
// fragment 0's row 0) by their sums and writes them and their LSE.
template <typename T, int MW, int DTILES>
RF_DEVICE void rf_flash_store_rows(const rf_flash_params& p, const float (&o)[MW][DTILES][4], const float (&m_run)[MW][2],
                                   const float (&l_sum)[MW][2], int row0, int b, int kv_head, int split) {
    const int lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const rf_flash_row r = rf_flash_locate(p, row0 + 16 * mi + g + 8 * h, kv_head);
            if (!r.valid) continue;
            const float l = l_sum[mi][h];
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
            for (int i = 0; i < DTILES; ++i) {
                const int col = i * 8 + 2 * t;
                if (col < p.head_dim) {
                    rf_flash_store<T>(p, b, r, split, col, o[mi][i][2 * h] * inv);
                    rf_flash_store<T>(p, b, r, split, col + 1, o[mi][i][2 * h + 1] * inv);
                }
            }
            if (t == 0) rf_flash_store_lse(p, b, r, split, m_run[mi][h], l);
        }
    }
}

// WARPS warps; STAGES K/V buffers (cp.async runs STAGES - 1 tiles ahead); KSPLIT: the warps
// share one 16-row group and split each key tile between them instead (decode, where a block
// has no more rows than the group's heads of one query), merging their results at the end.
// PAGED: K and V come through block tables (a separate instantiation, so the contiguous
// kernels carry none of it). MW: 16-row m-fragments a warp. With MW = 2 every K and V fragment
// read from shared memory feeds two mma instead of one (160 bytes of ldmatrix an mma instead of
// 256 at 64-key tiles), and the Q fragments are re-read from shared memory each k-step instead
// of being held (the registers go to the second fragment's O and S).
template <typename T, int DT, int BC, int WARPS, int STAGES, bool KSPLIT, bool PAGED, int MW>
RF_DEVICE void rf_flash_mma(const rf_flash_params& args) {
    const rf_flash_params p = PAGED ? rf_flash_for_batch(args, blockIdx.z) : args;
    constexpr int ROWS = KSPLIT ? 16 : 16 * MW * WARPS; // packed rows of the block
    constexpr int THREADS = 32 * WARPS;
    constexpr int LD = DT + 8;                      // padded row stride (elements)
    constexpr int KSTEPS = DT / 16;                 // k-steps of Q K^T
    constexpr int WKEYS = KSPLIT ? BC / WARPS : BC; // keys of each tile one warp takes
    constexpr int NT = WKEYS / 8;                   // n-tiles of the warp's S
    constexpr int DTILES = DT / 8;                  // n-tiles of O
    constexpr bool QREG = MW == 1;                  // Q fragments held in registers
    static_assert(WKEYS % 16 == 0 && STAGES >= 2, "tile shape");
    static_assert(MW == 1 || (MW == 2 && !KSPLIT), "two m-fragments a warp only for row-split blocks");
    extern __shared__ __align__(16) unsigned char rf_flash_mma_smem[];
    T* qs = (T*)rf_flash_mma_smem;
    T* ks = qs + ROWS * LD;         // [STAGES][BC][LD]
    T* vs = ks + STAGES * BC * LD;  // [STAGES][BC][LD]

    const int D = p.head_dim;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int g = lane / 4; // mma "group": rows g and g + 8 of each 16-row fragment
    const int t = lane % 4; // thread in group: columns 2t, 2t + 1 of each 8-wide tile
    const int wrow = KSPLIT ? 0 : warp * 16 * MW; // the warp's first row in the block
    const int wkey = KSPLIT ? warp * WKEYS : 0;   // the warp's first key in a tile
    const int b = blockIdx.z;
    const int kv_head = blockIdx.y % p.kv_heads;
    const int split = blockIdx.y / p.kv_heads;
    // Causal blocks with more rows do more work: start those first.
    const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = tile * ROWS;

    long long k_begin, k_end;
    rf_flash_key_range(p, m0 + ROWS - 1, kv_head, split, &k_begin, &k_end);
    // Keys every row of the block sees: tiles ending at or before this need no mask.
    const long long all_see = rf_flash_locate(p, m0, kv_head).last_key + 1;
    const bool warp_idle = !rf_flash_locate(p, m0 + wrow, kv_head).valid;

    const T* kbase = (const T*)p.k + (rf_u64)b * p.k_batch + (rf_u64)kv_head * p.k_head;
    const T* vbase = (const T*)p.v + (rf_u64)b * p.v_batch + (rf_u64)kv_head * p.v_head;

    rf_flash_stage<T, DT, LD, ROWS, THREADS>(qs, D, p.q, [&](int r) -> const T* {
        const rf_flash_row qr = rf_flash_locate(p, m0 + r, kv_head);
        if (!qr.valid) return nullptr;
        return (const T*)p.q + (rf_u64)b * p.q_batch + (rf_u64)qr.query * p.q_seq + (rf_u64)qr.head * p.q_head;
    });
    // Paged fast path: `ids` holds the block ids of the next tile to stage, loaded one tile
    // ahead (see rf_flash_paged_ids).
    constexpr bool EVEN_CHUNKS = THREADS % (DT / 8) == 0 && BC % (THREADS / (DT / 8)) == 0;
    unsigned ids[EVEN_CHUNKS ? BC / (THREADS / (DT / 8)) : 1];
    const int* table = PAGED ? p.block_table + (rf_u64)b * (rf_u64)p.max_blocks : nullptr;
    const bool paged_fast = PAGED && EVEN_CHUNKS && p.block_shift >= 0 && ((p.k_seq | p.v_seq) >> 32) == 0;
    if constexpr (PAGED && EVEN_CHUNKS) {
        if (paged_fast) rf_flash_paged_ids<DT, BC, THREADS>(p, table, k_begin, k_end, D, ids);
    }
    // Contiguous K and V tiles may be staged separately (SPLIT_KV below).
    auto stage_k = [&](long long k0, int buf) {
        const int valid = k_end - k0 < BC ? (int)(k_end - k0) : BC;
        rf_flash_stage_tile<T, DT, LD, BC, THREADS>(ks + buf * BC * LD, kbase + (rf_u64)k0 * p.k_seq, p.k_seq, valid,
                                                    D, p.k);
    };
    auto stage_v = [&](long long k0, int buf) {
        const int valid = k_end - k0 < BC ? (int)(k_end - k0) : BC;
        rf_flash_stage_tile<T, DT, LD, BC, THREADS>(vs + buf * BC * LD, vbase + (rf_u64)k0 * p.v_seq, p.v_seq, valid,
                                                    D, p.v);
    };
    auto stage_kv = [&](long long k0, int buf) {
        if constexpr (PAGED) {
            if constexpr (EVEN_CHUNKS) {
                if (paged_fast) {
                    // Tiles are staged in order, so the ids loaded last are this tile's.
                    rf_flash_stage_kv_ids<T, DT, LD, BC, THREADS>(ks + buf * BC * LD, vs + buf * BC * LD, p, kbase,
                                                                  vbase, k0, ids);
                    rf_flash_paged_ids<DT, BC, THREADS>(p, table, k0 + BC, k_end, D, ids);
                    return;
                }
            }
            const int valid = k_end - k0 < BC ? (int)(k_end - k0) : BC;
            rf_flash_stage_kv_paged<T, DT, LD, BC, THREADS>(ks + buf * BC * LD, vs + buf * BC * LD, p, kbase, vbase, b,
                                                            k0, valid, D);
        } else {
            stage_k(k0, buf);
            stage_v(k0, buf);
        }
    };
    // Prologue: Q with the first tile, then the next STAGES - 2 tiles, a commit group each.
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (k_begin + st * BC < k_end) stage_kv(k_begin + st * BC, st);
        rf_cp_async_commit();
    }

    float o[MW][DTILES][4];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int i = 0; i < DTILES; ++i) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.0f;
    }
    float m_run[MW][2], l_run[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
        m_run[mi][0] = m_run[mi][1] = -INFINITY;
        l_run[mi][0] = l_run[mi][1] = 0.0f;
    }
    unsigned qf[QREG ? KSTEPS : 1][4];

    // ldmatrix lane addressing (see the header comment): A (Q) and B (K) non-transposed,
    // B (V) transposed.
    const int a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_col = 8 * (lane / 16);
    const int k_row = (lane % 8) + 8 * (lane / 16), k_col = 8 * ((lane / 8) % 2);
    const int v_row = (lane % 8) + 8 * ((lane / 8) % 2), v_col = 8 * (lane / 16);
    const T* qa = qs + (wrow + a_row) * LD + a_col;

    int it = 0;
    for (long long k0 = k_begin; k0 < k_end; k0 += BC, ++it) {
        // Tile `it` has landed once at most STAGES - 2 newer groups are pending; after the
        // barrier every warp is done with tile it - 1, whose buffer the prefetch refills. One
        // barrier a tile.
        rf_cp_async_wait<STAGES - 2>();
        __syncthreads();
        // The prefetch of tile it + STAGES - 1. Two-fragment blocks issue its K copies here and
        // its V copies after Q K^T: sixteen copies a thread in a row filled the memory queue,
        // and the instructions after them that reuse their address registers waited for it
        // (ncu: 7% of the stall samples, long scoreboard). Split, head_dim 64 and 128 ran 5%
        // faster (H100); spread one or two copies a k-step, 15-25% slower.
        constexpr bool SPLIT_KV = !PAGED && MW > 1;
        const long long kp = k0 + (long long)(STAGES - 1) * BC;
        const int kp_buf = (it + STAGES - 1) % STAGES;
        const bool prefetch = kp < k_end;
        if (prefetch) {
            if constexpr (SPLIT_KV) {
                stage_k(kp, kp_buf);
            } else {
                stage_kv(kp, kp_buf);
            }
        }
        // The rest of the prefetch (V, when split) and its commit group.
        auto finish_prefetch = [&] {
            if constexpr (SPLIT_KV) {
                if (prefetch) stage_v(kp, kp_buf);
            }
            rf_cp_async_commit();
        };
        if constexpr (QREG) {
            if (it == 0) {
#pragma unroll
                for (int kk = 0; kk < KSTEPS; ++kk) rf_ldmatrix_x4(qf[kk], qa + kk * 16);
            }
        }
        if (warp_idle) {
            finish_prefetch();
            continue;
        }
        const T* kt = ks + (it % STAGES) * BC * LD + wkey * LD;
        const T* vt = vs + (it % STAGES) * BC * LD + wkey * LD;
        float s[MW][NT][4];
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
            for (int n = 0; n < NT; ++n) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            unsigned qk[MW][4];
#pragma unroll
            for (int mi = 0; mi < MW; ++mi) {
                if constexpr (QREG) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) qk[mi][e] = qf[kk][e];
                } else {
                    rf_ldmatrix_x4(qk[mi], qa + 16 * mi * LD + kk * 16);
                }
            }
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned kf[4];
                rf_ldmatrix_x4(kf, kt + (np * 16 + k_row) * LD + kk * 16 + k_col);
#pragma unroll
                for (int mi = 0; mi < MW; ++mi) {
                    rf_mma<T>::run(s[mi][2 * np], qk[mi], kf[0], kf[1]);
                    rf_mma<T>::run(s[mi][2 * np + 1], qk[mi], kf[2], kf[3]);
                }
            }
        }
        finish_prefetch();
        // Mask where the tile reaches past what a row sees (only tiles on the causal diagonal
        // or at the end of the keys), then the online softmax.
        float alpha[MW][2];
        rf_flash_softmax_tile<MW, NT, DTILES>(p, s, o, m_run, l_run, alpha,
                                              k0 + BC > (all_see < k_end ? all_see : k_end), m0 + wrow,
                                              (int)k0 + wkey, (int)k_end, kv_head);
#pragma unroll
        for (int kk = 0; kk < WKEYS / 16; ++kk) {
            unsigned pf[MW][4];
#pragma unroll
            for (int mi = 0; mi < MW; ++mi) rf_flash_pack_p<T>(s[mi], kk, pf[mi]);
#pragma unroll
            for (int dp = 0; dp < DT / 16; ++dp) {
                unsigned vf[4];
                rf_ldmatrix_x4_trans(vf, vt + (kk * 16 + v_row) * LD + dp * 16 + v_col);
#pragma unroll
                for (int mi = 0; mi < MW; ++mi) {
                    rf_mma<T>::run(o[mi][2 * dp], pf[mi], vf[0], vf[1]);
                    rf_mma<T>::run(o[mi][2 * dp + 1], pf[mi], vf[2], vf[3]);
                }
            }
        }
    }
    rf_cp_async_wait<0>();

    float l_sum[MW][2];
    rf_flash_quad_sums(l_run, l_sum);
    if constexpr (KSPLIT) {
        // Merge the warps' (m, l, O) for the shared rows through shared memory (the K buffers,
        // free now): O = sum_w 2^(m_w - M) O_w, l = sum_w 2^(m_w - M) l_w, M = max_w m_w.
        // (MW is 1 here.)
        float* red_m = (float*)ks;             // [WARPS][16]
        float* red_l = red_m + WARPS * 16;     // [WARPS][16]
        float* red_o = red_l + WARPS * 16;     // [WARPS][16][DT]
        __syncthreads();
        if (t == 0) {
            red_m[warp * 16 + g] = m_run[0][0];
            red_m[warp * 16 + g + 8] = m_run[0][1];
            red_l[warp * 16 + g] = l_sum[0][0];
            red_l[warp * 16 + g + 8] = l_sum[0][1];
        }
#pragma unroll
        for (int i = 0; i < DTILES; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                red_o[(warp * 16 + g + 8 * (e / 2)) * DT + i * 8 + 2 * t + (e % 2)] = o[0][i][e];
            }
        }
        __syncthreads();
        if (warp != 0) return;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = g + 8 * h;
            float mx = -INFINITY;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, red_m[w * 16 + r]);
            const float m_use = mx == -INFINITY ? 0.0f : mx;
            float weight[WARPS];
            float l = 0.0f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) {
                weight[w] = rf_fast_exp2(red_m[w * 16 + r] - m_use);
                l = fmaf(weight[w], red_l[w * 16 + r], l);
            }
#pragma unroll
            for (int i = 0; i < DTILES; ++i) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    float v = 0.0f;
#pragma unroll
                    for (int w = 0; w < WARPS; ++w) v = fmaf(weight[w], red_o[(w * 16 + r) * DT + i * 8 + 2 * t + c], v);
                    o[0][i][2 * h + c] = v;
                }
            }
            m_run[0][h] = mx;
            l_sum[0][h] = l;
        }
    }

    rf_flash_store_rows<T>(p, o, m_run, l_sum, m0 + wrow, b, kv_head, split);
}

#endif // RF_FLASH_MMA

// ---------------------------------------------------------------------------------------------
// Warpgroup kernel, NVIDIA Hopper (wgmma.mma_async, sm_90a; rocmforge_wgmma.h): prefill at
// head_dim 64 and 128. Warpgroup 0 copies Q, then K and V tiles (cp.async); the MATH_WGS
// warpgroups after it compute, 64 packed rows each (64 MATH_WGS rows a block). Q and STAGES K/V
// buffers sit in shared memory in the 128-byte swizzled layout, as DT / 64 column blocks of
// 128-byte rows. Per key tile, each math warpgroup runs
//   S (64 x BC) = Q K^T: DT / 16 wgmma with both operands in shared memory (K-major: Q and K rows
//     are along head_dim);
//   the online softmax on S's accumulators (rf_flash_softmax_tile: the mma.sync fragment layout);
//   O (64 x DT) += P V: BC / 16 wgmma with P from registers (converted to T, the A layout) and V
//     N-major in shared memory (its rows are along head_dim, which is O's N).
// A tile's Q K^T is issued together with the previous tile's P V, so the softmax of one runs
// while the other is on the tensor cores. Where the mma.sync kernel issues one m16n8k16 per
// 16 x 8 x 16 product and feeds it with ldmatrix, a wgmma reads its operands from shared memory
// itself and covers 64 x N x 16; and no math warp spends issue slots on copies.
// ---------------------------------------------------------------------------------------------

#if RF_WGMMA

// Byte offset of 16-byte chunk c (of a row's DT / 8) of row r in a swizzled tile of ROWS rows.
template <int ROWS> RF_DEVICE unsigned rf_sw128_offset(int r, int c) {
    return (unsigned)((c / 8) * ROWS * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4));
}

// Stages ROWS rows of D elements (zero past D, up to DT, and in rows `row_ptr` gives null for)
// into a swizzled tile. `any` is a valid global address for the zero-fill copies.
template <typename T, int DT, int ROWS, int THREADS, typename RowPtr>
RF_DEVICE void rf_flash_stage_sw128(unsigned char* smem, int D, const void* any, RowPtr row_ptr) {
    constexpr int CHUNKS = DT / 8;
    static_assert(THREADS % CHUNKS == 0 && ROWS % (THREADS / CHUNKS) == 0, "even chunks");
    // Each thread keeps one column chunk and steps down the rows.
    constexpr int RSTEP = THREADS / CHUNKS;
    const int tid = threadIdx.x % THREADS;
    const int c = tid % CHUNKS;
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i) {
        const int r = tid / CHUNKS + i * RSTEP;
        const T* src = c * 8 < D ? row_ptr(r) : nullptr;
        rf_cp_async16(smem + rf_sw128_offset<ROWS>(r, c), src ? (const void*)(src + c * 8) : any, src ? 16 : 0);
    }
}

// The buffers hand over through mbarriers, two a buffer: `full` (the 128 copying threads arrive
// once their copies of the tile have landed and been fenced for the async proxy) and `empty`
// (the math threads, 128 a warpgroup, arrive once the tile's P V is done). There is no block
// barrier in the loop, so the math warpgroups drift apart and one's softmax runs under another's
// products.
// The copying warps keep two tiles in flight; the math warps hold tile t's K and tile t - 1's V,
// so STAGES >= 3 (and 4 lets the copies run a tile further ahead).
template <typename T, int DT, int BC, int STAGES, int MATH_WGS, int COPY_REGS, int MATH_REGS>
RF_DEVICE void rf_flash_wgmma(const rf_flash_params& p) {
    constexpr int ROWS = 64 * MATH_WGS;
    constexpr int NT = BC / 8;
    constexpr int DTILES = DT / 8;
    constexpr unsigned Q_BYTES = ROWS * DT * 2, KV_BYTES = BC * DT * 2;
    static_assert(DT % 64 == 0 && BC % 64 == 0 && STAGES >= 3, "swizzle atoms; the producer keeps two tiles in flight");
    static_assert(128 * (COPY_REGS + MATH_WGS * MATH_REGS) <= 65536, "setmaxnreg within the SM's registers");
    extern __shared__ __align__(1024) unsigned char rf_flash_wgmma_smem[];
    __shared__ unsigned long long full[STAGES], empty[STAGES], q_full;
    unsigned char* qs = rf_flash_wgmma_smem + ((1024u - (rf_smem_addr(rf_flash_wgmma_smem) & 1023u)) & 1023u);
    unsigned char* ks = qs + Q_BYTES;               // [STAGES][KV_BYTES]
    unsigned char* vs = ks + STAGES * KV_BYTES;     // [STAGES][KV_BYTES]

    const int D = p.head_dim;
    const int wg = threadIdx.x / 128;
    const int b = blockIdx.z;
    const int kv_head = blockIdx.y % p.kv_heads;
    const int split = blockIdx.y / p.kv_heads;
    const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = tile * ROWS;
    long long k_begin, k_end;
    rf_flash_key_range(p, m0 + ROWS - 1, kv_head, split, &k_begin, &k_end);
    const int tiles = k_end > k_begin ? (int)((k_end - k_begin + BC - 1) / BC) : 0;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int st = 0; st < STAGES; ++st) {
            rf_mbar_init(&full[st], 128);
            rf_mbar_init(&empty[st], 128 * MATH_WGS);
        }
        rf_mbar_init(&q_full, 128);
    }
    __syncthreads(); // the barriers' initialisation, for everyone

    if (wg == 0) {
        // The copying warps need few registers: hand the rest to the math warpgroups. The
        // warpgroup-wide setmaxnreg is also what lets ptxas see the math warps' wgmma as
        // convergent after this divergent branch: without it they are serialised (C7520, which
        // `cargo xtask kernels` refuses), 335 instead of 384-390 TFLOP/s on an H100.
        rf_setmaxnreg_dec<COPY_REGS>();
        const T* kbase = (const T*)p.k + (rf_u64)b * p.k_batch + (rf_u64)kv_head * p.k_head;
        const T* vbase = (const T*)p.v + (rf_u64)b * p.v_batch + (rf_u64)kv_head * p.v_head;
        // Copy groups in order: Q, tile 0, tile 1, ...; each is handed over once the next is
        // issued, so two are in flight (Q's latency overlaps tile 0's).
        rf_flash_stage_sw128<T, DT, ROWS, 128>(qs, D, p.q, [&](int r) -> const T* {
            const rf_flash_row qr = rf_flash_locate(p, m0 + r, kv_head);
            if (!qr.valid) return nullptr;
            return (const T*)p.q + (rf_u64)b * p.q_batch + (rf_u64)qr.query * p.q_seq + (rf_u64)qr.head * p.q_head;
        });
        rf_cp_async_commit();
        for (int t = 0; t < tiles; ++t) {
            const int st = t % STAGES;
            rf_mbar_wait(&empty[st], ((t / STAGES) & 1) ^ 1);
            const long long k0 = k_begin + (long long)t * BC;
            const int valid = k_end - k0 < BC ? (int)(k_end - k0) : BC;
            const T* kt = kbase + (rf_u64)k0 * p.k_seq;
            const T* vt = vbase + (rf_u64)k0 * p.v_seq;
            rf_flash_stage_sw128<T, DT, BC, 128>(ks + st * KV_BYTES, D, p.k, [&](int r) -> const T* {
                return r < valid ? kt + (rf_u64)r * p.k_seq : nullptr;
            });
            rf_flash_stage_sw128<T, DT, BC, 128>(vs + st * KV_BYTES, D, p.v, [&](int r) -> const T* {
                return r < valid ? vt + (rf_u64)r * p.v_seq : nullptr;
            });
            rf_cp_async_commit();
            // The group before this tile's (Q, or tile t - 1) has landed: hand it over.
            rf_cp_async_wait<1>();
            rf_fence_proxy_async();
            rf_mbar_arrive(t == 0 ? &q_full : &full[(t - 1) % STAGES]);
        }
        rf_cp_async_wait<0>();
        rf_fence_proxy_async();
        rf_mbar_arrive(tiles > 0 ? &full[(tiles - 1) % STAGES] : &q_full);
        return;
    }

    rf_setmaxnreg_inc<MATH_REGS>();
    const int warp = threadIdx.x / 32 - 4;
    const int wrow = 64 * (warp / 4) + 16 * (warp % 4); // the warp's first row in the block
    const long long all_see = rf_flash_locate(p, m0, kv_head).last_key + 1;
    float o[1][DTILES][4];
#pragma unroll
    for (int i = 0; i < DTILES; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.0f;
    float m_run[1][2] = {{-INFINITY, -INFINITY}}, l_run[1][2] = {{0.0f, 0.0f}};
    unsigned pf[BC / 16][4]; // P of the previous tile, T pairs in the A layout
    // This warpgroup's 64 Q rows.
    const unsigned q_addr = rf_smem_addr(qs) + (warp / 4) * 64 * 128;
    // O += P V for the tile in buffer `st`: step kk takes keys 16 kk .. 16 kk + 15, V's rows
    // 16 kk.. (2048 bytes a step); V's column blocks (two at head_dim 128, one at 64) are
    // BC * 128 bytes apart.
    auto issue_pv = [&](int st) {
        const unsigned v_addr = rf_smem_addr(vs + st * KV_BYTES);
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            rf_wgmma<T, DT>::rs(o[0], pf[kk], rf_wgmma_desc(v_addr + kk * 2048, BC * 128, 1024), 1);
        }
    };
    rf_mbar_wait(&q_full, 0);
    // Every math warp runs the same number of tiles (a block-wide count): with a count that
    // differs between warpgroups (say, the first group stopping a causal tile early) ptxas
    // can no longer prove the wgmma convergent and serialises them (C7520), 15% slower.
    for (int t = 0; t < tiles; ++t) {
        const int st = t % STAGES;
        const long long k0 = k_begin + (long long)t * BC;
        rf_mbar_wait(&full[st], (t / STAGES) & 1);
        const unsigned k_addr = rf_smem_addr(ks + st * KV_BYTES);
        // S = Q K^T. Step kk takes head_dim 16 kk .. 16 kk + 15: column block kk / 4, bytes
        // 32 (kk % 4) of each row (the hardware applies the swizzle to the full address).
        // Tile t - 1's P V goes with it.
        float s[1][NT][4];
        rf_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DT / 16; ++kk) {
            const unsigned col = (kk % 4) * 32;
            const rf_u64 da = rf_wgmma_desc(q_addr + (kk / 4) * ROWS * 128 + col, 16, 1024);
            const rf_u64 db = rf_wgmma_desc(k_addr + (kk / 4) * BC * 128 + col, 16, 1024);
            rf_wgmma<T, BC>::ss(s[0], da, db, kk > 0);
        }
        rf_wgmma_commit();
        if (t > 0) {
            issue_pv((t - 1) % STAGES);
            rf_wgmma_commit();
            rf_wgmma_wait<1>(); // S is in (groups complete in order); P V may still run
        } else {
            rf_wgmma_wait<0>();
        }
        rf_wgmma_reg_fence(s[0]);
        float alpha[1][2];
        rf_flash_softmax_tile<1, NT, DTILES, true>(p, s, o, m_run, l_run, alpha,
                                                   k0 + BC > (all_see < k_end ? all_see : k_end), m0 + wrow,
                                                   (int)k0, (int)k_end, kv_head);
        // Tile t - 1's P V is in: its buffer goes back to the copying warps, its A registers
        // (pf) are free for this tile's P (packed before the next fence: wgmma reads registers
        // written before the fence, and reads them while it runs), and O can be rescaled.
        rf_wgmma_wait<0>();
        rf_wgmma_reg_fence(o[0]);
        if (t > 0) rf_mbar_arrive(&empty[(t - 1) % STAGES]);
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) rf_flash_pack_p<T>(s[0], kk, pf[kk]);
        rf_flash_rescale_o(o, alpha);
    }
    if (tiles > 0) {
        rf_wgmma_fence();
        issue_pv((tiles - 1) % STAGES);
        rf_wgmma_commit();
        rf_wgmma_wait<0>();
        rf_wgmma_reg_fence(o[0]);
    }
    float l_sum[1][2];
    rf_flash_quad_sums(l_run, l_sum);
    rf_flash_store_rows<T>(p, o, m_run, l_sum, m0 + wrow, b, kv_head, split);
}

// Entry points (only in sm_90a code; the launcher looks them up and takes the mma.sync kernel
// where they are absent), one block an SM, 64-key tiles and four K/V buffers each. More math
// warpgroups keep the tensor cores busy while others run the softmax, as far as the registers
// allow (two blocks an SM instead would leave too few: at 104 a math thread ptxas serialised
// every wgmma, C7512):
// - head_dim 128: three math warpgroups (192 rows, 178 KiB of shared memory), 24 registers a
//   copying thread and 160 a math thread (O takes 64, S 32, P 16);
// - head_dim 64: four math warpgroups (256 rows, 98 KiB), 24 and 112 (O 32, S 32, P 16).
// Measured on an H100 (docs/kernels/attention.md, version 11), TFLOP/s, non-causal / causal:
// head_dim 128 420-430 / 351-354 against two math warpgroups' 394-408 / 347; head_dim 64
// 403-409 / 318-326 against two's 283 / 240, two blocks of two 343 / 295, and the mma.sync
// kernel's 324-332 / 285-291.
#define RF_FLASH_WGMMA_ENTRY(T, NAME, DT, MATH_WGS, COPY_REGS, MATH_REGS)           \
    RF_KERNEL void __launch_bounds__(128 * (MATH_WGS + 1), 1) NAME(rf_flash_params p) { \
        rf_flash_wgmma<T, DT, 64, 4, MATH_WGS, COPY_REGS, MATH_REGS>(p);             \
    }
RF_FLASH_WGMMA_ENTRY(__half, rf_flash_wgmma_f16_d128, 128, 3, 24, 160)
RF_FLASH_WGMMA_ENTRY(rf_bf16, rf_flash_wgmma_bf16_d128, 128, 3, 24, 160)
RF_FLASH_WGMMA_ENTRY(__half, rf_flash_wgmma_f16_d64, 64, 4, 24, 112)
RF_FLASH_WGMMA_ENTRY(rf_bf16, rf_flash_wgmma_bf16_d64, 64, 4, 24, 112)

#endif // RF_WGMMA

// Entry points exist on every target so the module's symbol table is the same everywhere; the
// body is the matrix-core kernel only where RF_FLASH_MMA holds.
#if RF_FLASH_MMA
#define RF_FLASH_MMA_BODY(T, DT, BC, W, S, KS, PG, MW) rf_flash_mma<T, DT, BC, W, S, KS, PG, MW>(p);
#else
#define RF_FLASH_MMA_BODY(T, DT, BC, W, S, KS, PG, MW) RF_MMA_UNAVAILABLE();
#endif

#define RF_FLASH_MMA_ENTRY(T, DT, BC, W, S, KS, PG, NAME) \
    RF_KERNEL void __launch_bounds__(32 * W) NAME(rf_flash_params p) { RF_FLASH_MMA_BODY(T, DT, BC, W, S, KS, PG, 1) }
// Two 16-row fragments a warp, two blocks a compute unit (at most 255 registers a thread).
#define RF_FLASH_MMA_ENTRY_M2(T, DT, BC, W, S, NAME) \
    RF_KERNEL void __launch_bounds__(32 * W, 2) NAME(rf_flash_params p) { RF_FLASH_MMA_BODY(T, DT, BC, W, S, false, false, 2) }

// Variants (the launcher's `plan` picks one by rows and head_dim; docs/kernels/attention.md has
// the measurements behind them):
//   _m2: four warps of two 16-row fragments, 128 rows a block, 64-key tiles (128 at head_dim
//        64), two blocks a compute unit: prefill;
//   _w4: four warps, 64 rows, 64-key tiles: up to 64 rows, and head_dim 256 (32-key tiles);
//   _ks: four warps splitting each 64-key tile over one 16-row group, three stages: decode;
//   _ks8: eight warps splitting 128-key tiles, one block per compute unit: decode whose
//         blocks about fill the device once (no key split, no combine pass);
//   _paged: K/V from a paged cache (key-split for decode, four warps otherwise).
#define RF_FLASH_MMA_ENTRIES(suffix, T)                                                        \
    RF_FLASH_MMA_ENTRY_M2(T, 64, 128, 4, 2, rf_flash_mma_##suffix##_d64_m2)                    \
    RF_FLASH_MMA_ENTRY_M2(T, 80, 64, 4, 2, rf_flash_mma_##suffix##_d80_m2)                     \
    RF_FLASH_MMA_ENTRY_M2(T, 96, 64, 4, 2, rf_flash_mma_##suffix##_d96_m2)                     \
    RF_FLASH_MMA_ENTRY_M2(T, 128, 64, 4, 2, rf_flash_mma_##suffix##_d128_m2)                   \
    RF_FLASH_MMA_ENTRY(T, 64, 64, 4, 2, false, false, rf_flash_mma_##suffix##_d64_w4)          \
    RF_FLASH_MMA_ENTRY(T, 80, 64, 4, 2, false, false, rf_flash_mma_##suffix##_d80_w4)          \
    RF_FLASH_MMA_ENTRY(T, 96, 64, 4, 2, false, false, rf_flash_mma_##suffix##_d96_w4)          \
    RF_FLASH_MMA_ENTRY(T, 128, 64, 4, 2, false, false, rf_flash_mma_##suffix##_d128_w4)        \
    RF_FLASH_MMA_ENTRY(T, 256, 32, 4, 2, false, false, rf_flash_mma_##suffix##_d256_w4)        \
    RF_FLASH_MMA_ENTRY(T, 64, 64, 4, 3, true, false, rf_flash_mma_##suffix##_d64_ks)           \
    RF_FLASH_MMA_ENTRY(T, 80, 64, 4, 3, true, false, rf_flash_mma_##suffix##_d80_ks)           \
    RF_FLASH_MMA_ENTRY(T, 96, 64, 4, 3, true, false, rf_flash_mma_##suffix##_d96_ks)           \
    RF_FLASH_MMA_ENTRY(T, 128, 64, 4, 3, true, false, rf_flash_mma_##suffix##_d128_ks)         \
    RF_FLASH_MMA_ENTRY(T, 64, 128, 8, 3, true, false, rf_flash_mma_##suffix##_d64_ks8)         \
    RF_FLASH_MMA_ENTRY(T, 80, 128, 8, 3, true, false, rf_flash_mma_##suffix##_d80_ks8)         \
    RF_FLASH_MMA_ENTRY(T, 96, 128, 8, 3, true, false, rf_flash_mma_##suffix##_d96_ks8)         \
    RF_FLASH_MMA_ENTRY(T, 128, 128, 8, 3, true, false, rf_flash_mma_##suffix##_d128_ks8)       \
    RF_FLASH_MMA_ENTRY(T, 64, 64, 4, 2, false, true, rf_flash_mma_##suffix##_d64_w4_paged)     \
    RF_FLASH_MMA_ENTRY(T, 80, 64, 4, 2, false, true, rf_flash_mma_##suffix##_d80_w4_paged)     \
    RF_FLASH_MMA_ENTRY(T, 96, 64, 4, 2, false, true, rf_flash_mma_##suffix##_d96_w4_paged)     \
    RF_FLASH_MMA_ENTRY(T, 128, 64, 4, 2, false, true, rf_flash_mma_##suffix##_d128_w4_paged)   \
    RF_FLASH_MMA_ENTRY(T, 256, 32, 4, 2, false, true, rf_flash_mma_##suffix##_d256_w4_paged)   \
    RF_FLASH_MMA_ENTRY(T, 64, 64, 4, 3, true, true, rf_flash_mma_##suffix##_d64_ks_paged)      \
    RF_FLASH_MMA_ENTRY(T, 80, 64, 4, 3, true, true, rf_flash_mma_##suffix##_d80_ks_paged)      \
    RF_FLASH_MMA_ENTRY(T, 96, 64, 4, 3, true, true, rf_flash_mma_##suffix##_d96_ks_paged)      \
    RF_FLASH_MMA_ENTRY(T, 128, 64, 4, 3, true, true, rf_flash_mma_##suffix##_d128_ks_paged)    \
    RF_FLASH_MMA_ENTRY(T, 64, 128, 8, 3, true, true, rf_flash_mma_##suffix##_d64_ks8_paged)    \
    RF_FLASH_MMA_ENTRY(T, 80, 128, 8, 3, true, true, rf_flash_mma_##suffix##_d80_ks8_paged)    \
    RF_FLASH_MMA_ENTRY(T, 96, 128, 8, 3, true, true, rf_flash_mma_##suffix##_d96_ks8_paged)    \
    RF_FLASH_MMA_ENTRY(T, 128, 128, 8, 3, true, true, rf_flash_mma_##suffix##_d128_ks8_paged)

RF_FLASH_MMA_ENTRIES(f16, __half)
RF_FLASH_MMA_ENTRIES(bf16, rf_bf16)

// ---------------------------------------------------------------------------------------------
// Matrix-core kernel, AMD CDNA (MFMA; gfx908, gfx90a, gfx940-942, gfx950). W wavefronts of 64
// lanes, 16 packed rows each (16 * W a block), 32-key tiles. K and V tiles are staged in LDS as T
// (rows padded by 16 bytes, zero past the keys and past head_dim); Q stays in registers.
//
// v_mfma_f32_16x16x16{f16,bf16_1k} computes D (16 x 16, f32) += A (16 x 16) B (16 x 16). Operand
// layout (AMD's CDNA3 ISA guide, the ROCm blog "Matrix Core Programming on AMD CDNA3 and CDNA4",
// the AMD matrix instruction calculator): lane l holds A[l % 16][4 (l / 16) + i] and
// B[4 (l / 16) + i][l % 16] for i = 0..3 (four 16-bit values, element i in bits 16i..16i+15 of
// the 64-bit operand), and D[4 (l / 16) + i][l % 16] in its four f32 accumulators.
//
// The kernel computes the transposes, S^T = K Q^T and O^T = V^T P^T, so that every lane owns one
// row (l % 16) of its wavefront's 16, for all of S^T, P^T and O^T:
//   - S^T (16 keys x 16 rows) a step: A = K rows from LDS (8 contiguous bytes a lane), B = Q^T,
//     whose lane fragment is 4 contiguous elements of the lane's own Q row (registers);
//   - S^T's accumulator (keys 4 (l / 16) + i of row l % 16) is, rounded to T, exactly the B
//     operand of O^T = V^T P^T for that 16-key step: P never leaves the registers;
//   - A of O^T = V^T: four V rows at one column (four 2-byte LDS reads a lane);
//   - O^T's accumulator holds columns 16 dt + 4 (l / 16) + i of row l % 16.
// The row's max and sum are over the 4 lanes l % 16 + 16 j (shuffles by 16 and 32), and the
// online softmax rescales a lane's accumulators by one factor.
// ---------------------------------------------------------------------------------------------

#if RF_PLATFORM_AMD && (defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || \
                        defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__))
#define RF_FLASH_MFMA 1
#else
#define RF_FLASH_MFMA 0
#endif

#define RF_FLASH_MFMA_KEYS 32

#if RF_FLASH_MFMA

typedef float rf_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 rf_f16x4 __attribute__((ext_vector_type(4)));
typedef short rf_i16x4 __attribute__((ext_vector_type(4)));
typedef short rf_i16x2 __attribute__((ext_vector_type(2)));

// D += A B for one 16x16x16 step; a and b are a lane's four 16-bit values (element i in bits
// 16i.. of the pair).
template <typename T> struct rf_mfma;
template <> struct rf_mfma<__half> {
    static RF_DEVICE rf_f32x4 run(rf_f32x4 c, uint2 a, uint2 b) {
        rf_f16x4 av, bv;
        __builtin_memcpy(&av, &a, sizeof(av));
        __builtin_memcpy(&bv, &b, sizeof(bv));
        return __builtin_amdgcn_mfma_f32_16x16x16f16(av, bv, c, 0, 0, 0);
    }
};
template <> struct rf_mfma<rf_bf16> {
    static RF_DEVICE rf_f32x4 run(rf_f32x4 c, uint2 a, uint2 b) {
#if defined(__gfx908__)
        // gfx908 has no bf16_1k: two 16x16x8 steps (lane l: k = 2 (l / 16) + 0, 1), each taking
        // two of the lane's four values. The sum over k does not depend on which k a value is
        // labelled with as long as A and B agree, so this is the same product.
        rf_i16x2 a0, a1, b0, b1;
        __builtin_memcpy(&a0, &a.x, sizeof(a0));
        __builtin_memcpy(&a1, &a.y, sizeof(a1));
        __builtin_memcpy(&b0, &b.x, sizeof(b0));
        __builtin_memcpy(&b1, &b.y, sizeof(b1));
        c = __builtin_amdgcn_mfma_f32_16x16x8bf16(a0, b0, c, 0, 0, 0);
        return __builtin_amdgcn_mfma_f32_16x16x8bf16(a1, b1, c, 0, 0, 0);
#else
        rf_i16x4 av, bv;
        __builtin_memcpy(&av, &a, sizeof(av));
        __builtin_memcpy(&bv, &b, sizeof(bv));
        return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, c, 0, 0, 0);
#endif
    }
};

// W wavefronts; DT the padded head_dim (a multiple of 16); PAGED: K and V through block tables.
template <typename T, int DT, int W, bool PAGED>
RF_DEVICE void rf_flash_mfma(const rf_flash_params& args) {
    const rf_flash_params p = PAGED ? rf_flash_for_batch(args, blockIdx.z) : args;
    constexpr int BC = RF_FLASH_MFMA_KEYS;
    constexpr int ROWS = 16 * W;       // packed rows of the block
    constexpr int THREADS = 64 * W;
    constexpr int LD = DT + 8;         // padded LDS row (elements): 16-byte aligned rows
    constexpr int KSTEPS = DT / 16;    // k-steps of S^T = K Q^T
    constexpr int NT = BC / 16;        // 16-key steps of a tile
    constexpr int DTILES = DT / 16;    // 16-column tiles of O
    constexpr int CHUNKS = DT / 8;     // 16-byte chunks of a staged row
    static_assert(DT % 16 == 0 && BC % 16 == 0, "tile shape");
    extern __shared__ __align__(16) unsigned char rf_flash_mfma_smem[];
    T* ks = (T*)rf_flash_mfma_smem; // [BC][LD]
    T* vs = ks + BC * LD;           // [BC][LD]

    const int D = p.head_dim;
    const int wave = threadIdx.x / 64;
    const int lane = threadIdx.x % 64;
    const int r16 = lane % 16; // the lane's row among its wavefront's 16
    const int quad = lane / 16; // its k group: elements 4 quad .. 4 quad + 3 of each 16
    const int b = blockIdx.z;
    const int kv_head = blockIdx.y % p.kv_heads;
    const int split = blockIdx.y / p.kv_heads;
    // Causal blocks with more rows do more work: start those first.
    const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = tile * ROWS;

    long long k_begin, k_end;
    rf_flash_key_range(p, m0 + ROWS - 1, kv_head, split, &k_begin, &k_end);
    const rf_flash_row row = rf_flash_locate(p, m0 + wave * 16 + r16, kv_head);
    // Wavefront-uniform: a wavefront whose first row is past the end has no valid row.
    const bool wave_idle = !rf_flash_locate(p, m0 + wave * 16, kv_head).valid;

    // The lane's Q fragments: columns 16 kk + 4 quad .. + 3 of its row (8-byte loads: the
    // launcher checked 16-byte pointers and strides and head_dim in multiples of 8 elements).
    uint2 qf[KSTEPS];
    {
        const T* q = (const T*)p.q + (rf_u64)b * p.q_batch + (rf_u64)row.query * p.q_seq + (rf_u64)row.head * p.q_head;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            const int col = kk * 16 + 4 * quad;
            qf[kk] = row.valid && col < D ? *(const uint2*)(q + col) : make_uint2(0u, 0u);
        }
    }
    const T* kbase = (const T*)p.k + (rf_u64)b * p.k_batch + (rf_u64)kv_head * p.k_head;
    const T* vbase = (const T*)p.v + (rf_u64)b * p.v_batch + (rf_u64)kv_head * p.v_head;

    rf_f32x4 o[DTILES];
#pragma unroll
    for (int i = 0; i < DTILES; ++i) o[i] = rf_f32x4{0.0f, 0.0f, 0.0f, 0.0f};
    float m_run = -INFINITY, l_run = 0.0f;
    const float sl2 = p.scale_log2;

    for (long long k0 = k_begin; k0 < k_end; k0 += BC) {
        __syncthreads(); // every wavefront is done with the previous tile
        // Stage keys k0 .. k0 + BC of K and V, 16 bytes a copy, zeros past the keys, past
        // head_dim and (paged) for a block id outside the cache.
        for (int e = threadIdx.x; e < BC * CHUNKS; e += THREADS) {
            const int r = e / CHUNKS, c = e % CHUNKS;
            const long long key = k0 + r;
            uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = make_uint4(0u, 0u, 0u, 0u);
            if (key < k_end && c * 8 < D) {
                long long slot = key;
                if constexpr (PAGED) slot = rf_flash_slot(p, b, (int)key);
                if (slot >= 0) {
                    kv = rf_load16(kbase + (rf_u64)slot * p.k_seq + c * 8);
                    vv = rf_load16(vbase + (rf_u64)slot * p.v_seq + c * 8);
                }
            }
            rf_store16(ks + r * LD + c * 8, kv);
            rf_store16(vs + r * LD + c * 8, vv);
        }
        __syncthreads();
        if (wave_idle) continue;

        // S^T = K Q^T: s[n][i] = score of key k0 + 16 n + 4 quad + i for the lane's row.
        rf_f32x4 s[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            s[n] = rf_f32x4{0.0f, 0.0f, 0.0f, 0.0f};
            const T* krow = ks + (n * 16 + r16) * LD + 4 * quad;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) s[n] = rf_mfma<T>::run(s[n], *(const uint2*)(krow + kk * 16), qf[kk]);
        }
        // Mask keys the row may not see and keys past the range; the scale (> 0, checked by
        // the launcher) is applied inside the exponent: max(scale * s) = scale * max(s).
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const long long key = k0 + n * 16 + 4 * quad + i;
                const float v = key <= row.last_key && key < k_end ? s[n][i] : -INFINITY;
                s[n][i] = v;
                mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, rf_shfl_xor(mx, 16));
        mx = fmaxf(mx, rf_shfl_xor(mx, 32));
        const float m_new = fmaxf(m_run, mx * sl2);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; // a row that has seen nothing yet
        const float alpha = exp2f(m_run - m_use);
        float sum = 0.0f;
        uint2 pf[NT]; // P^T rounded to T: the B operand of O^T += V^T P^T
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            float e[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                e[i] = exp2f(fmaf(s[n][i], sl2, -m_use));
                sum += e[i];
            }
            pf[n] = make_uint2(rf_pack2_bits16<T>(e[0], e[1]), rf_pack2_bits16<T>(e[2], e[3]));
        }
        // Per-lane partial sums: the row's four lanes are added once, at the end.
        l_run = l_run * alpha + sum;
        m_run = m_new;
#pragma unroll
        for (int dt = 0; dt < DTILES; ++dt) o[dt] *= alpha;
        // O^T += V^T P^T: A = V^T, lane l: column 16 dt + r16 of keys 16 n + 4 quad + j.
        const unsigned short* vt = (const unsigned short*)vs;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const unsigned short* vcol = vt + (n * 16 + 4 * quad) * LD + r16;
#pragma unroll
            for (int dt = 0; dt < DTILES; ++dt) {
                const unsigned short* v = vcol + dt * 16;
                const uint2 a = make_uint2((unsigned)v[0] | ((unsigned)v[LD] << 16),
                                           (unsigned)v[2 * LD] | ((unsigned)v[3 * LD] << 16));
                o[dt] = rf_mfma<T>::run(o[dt], a, pf[n]);
            }
        }
    }

    l_run += rf_shfl_xor(l_run, 16);
    l_run += rf_shfl_xor(l_run, 32);
    if (!row.valid) return;
    const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
#pragma unroll
    for (int dt = 0; dt < DTILES; ++dt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int col = dt * 16 + 4 * quad + i;
            if (col < D) rf_flash_store<T>(p, b, row, split, col, o[dt][i] * inv);
        }
    }
    if (quad == 0) rf_flash_store_lse(p, b, row, split, m_run, l_run);
}

#endif // RF_FLASH_MFMA

// Entry points on every target (the module's symbol table is the same everywhere); the body is
// the MFMA kernel only where RF_FLASH_MFMA holds, a trap elsewhere (the launcher never selects it
// there).
#if RF_FLASH_MFMA
#define RF_FLASH_MFMA_BODY(T, DT, W, PG) rf_flash_mfma<T, DT, W, PG>(p);
#elif RF_PLATFORM_AMD
#define RF_FLASH_MFMA_BODY(T, DT, W, PG) __builtin_trap();
#else
#define RF_FLASH_MFMA_BODY(T, DT, W, PG) __trap();
#endif

#define RF_FLASH_MFMA_ENTRY(T, DT, W, PG, NAME) \
    RF_KERNEL void __launch_bounds__(64 * W) NAME(rf_flash_params p) { RF_FLASH_MFMA_BODY(T, DT, W, PG) }

// Variants (the launcher's `mfma_plan`): _w4, four wavefronts and 64 rows a block; _w1, one
// wavefront and 16 rows (decode: up to 16 packed rows); _paged: K/V from a paged cache.
#define RF_FLASH_MFMA_DIM(suffix, T, DT)                                                        \
    RF_FLASH_MFMA_ENTRY(T, DT, 4, false, rf_flash_mfma_##suffix##_d##DT##_w4)                   \
    RF_FLASH_MFMA_ENTRY(T, DT, 1, false, rf_flash_mfma_##suffix##_d##DT##_w1)                   \
    RF_FLASH_MFMA_ENTRY(T, DT, 4, true, rf_flash_mfma_##suffix##_d##DT##_w4_paged)              \
    RF_FLASH_MFMA_ENTRY(T, DT, 1, true, rf_flash_mfma_##suffix##_d##DT##_w1_paged)
#define RF_FLASH_MFMA_ENTRIES(suffix, T)                                                        \
    RF_FLASH_MFMA_DIM(suffix, T, 64)                                                            \
    RF_FLASH_MFMA_DIM(suffix, T, 80)                                                            \
    RF_FLASH_MFMA_DIM(suffix, T, 96)                                                            \
    RF_FLASH_MFMA_DIM(suffix, T, 128)                                                           \
    RF_FLASH_MFMA_DIM(suffix, T, 256)

RF_FLASH_MFMA_ENTRIES(f16, __half)
RF_FLASH_MFMA_ENTRIES(bf16, rf_bf16)
