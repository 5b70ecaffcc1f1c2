// rocmforge_flash.h: what every flash-attention kernel shares (the contract below, the parameter
// block, and the row, key-range, paging and store helpers). One file per implementation includes
// it, each built only for the targets that run it (`cargo xtask kernels`' per-file target lists):
//   - flash_portable.hip  rf_flash_<dt>_d<DMAX>[_paged]: every platform, every dtype, head_dim <=
//                         DMAX; f32 arithmetic on tiles staged in shared memory as f32;
//   - flash_combine.hip   rf_flash_combine_<dt>: merges the key splits' partial results (every
//                         platform);
//   - flash_mma.hip       rf_flash_mma_<dt>_d<D>_<variant>: NVIDIA sm_80+ matrix cores
//                         (mma.sync.m16n8k16, f16/bf16 inputs, f32 accumulation);
//   - flash_wgmma.hip     rf_flash_wgmma_<dt>_d<D>: Hopper warpgroup MMA (sm_90a only), prefill;
//   - flash_mfma.hip      rf_flash_mfma_<dt>_d<D>_w<W>[_paged]: AMD CDNA matrix cores (MFMA).
// The launcher (crates/rocm-kernels/src/attention/flash.rs) picks one by the device's
// capabilities (`DeviceInfo::matrix_cores`, `warpgroup_mma`), the dtype and the layout.
//
// The contract: flash attention forward, O = softmax(scale * Q K^T + causal mask) V, fused and
// tiled with an online softmax, so the [seq_q, seq_k] scores never leave the chip.
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
// The softmax runs in the log2 domain: scale_log2 = scale * log2(e), p = exp2(s * scale_log2 - m).

#ifndef ROCMFORGE_FLASH_H
#define ROCMFORGE_FLASH_H

#include "rocmforge.h"
#include "rocmforge_flash_abi.h"

// The parameters as batch b sees them: with a paged cache, its own number of keys (clamped to
// what its block table can hold) and, when causal, its queries at the end of them. A key split
// is planned on the host from the table's width (the lengths live on the device, and a decode
// graph replays one launch for every length), so each batch cuts its own keys into the
// planned splits here: a short sequence in a wide table still spreads over every split
// (RF_FLASH_SPLIT_ALIGN keys at least, so splits past its keys are empty and write zeros with
// LSE = -inf, which the combine weighs as nothing).
RF_DEVICE rf_flash_params rf_flash_for_batch(const rf_flash_params& args, int b) {
    rf_flash_params p = args;
    if (p.seq_lens) {
        long long len = p.seq_lens[b];
        const long long cap = (long long)p.max_blocks * p.block_size;
        len = len < 0 ? 0 : (len > cap ? cap : len);
        p.seq_k = (int)len;
        if (p.causal) p.causal_offset = len - p.seq_q;
        if (p.num_splits > 1) {
            // 32-bit: len < 2^31 (the launcher checks the table's capacity).
            const int per = ((int)len + p.num_splits - 1) / p.num_splits;
            const int aligned = (per + RF_FLASH_SPLIT_ALIGN - 1) / RF_FLASH_SPLIT_ALIGN * RF_FLASH_SPLIT_ALIGN;
            p.keys_per_split = aligned > RF_FLASH_SPLIT_ALIGN ? aligned : RF_FLASH_SPLIT_ALIGN;
        }
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

#endif // ROCMFORGE_FLASH_H
