// KV-cache writes for paged attention.
//
// The cache (one for K, one for V) is [num_slots, row] with row = kv_heads * head_dim elements
// a token slot (num_slots = num_blocks * block_size; see crates/rocm-kernels/src/attention/
// paged.rs for how block tables map tokens to slots).
//
//   rf_kv_cache_write_<dt>: token t of the new K/V rows (token stride k_stride / v_stride) goes
//     to slot slots[t]. A negative slot skips the token (padding); a slot past the cache is
//     skipped too, so a bad mapping never writes outside the cache.
//   rf_kv_cache_copy_blocks_<dt>: for each (src, dst) pair of block ids, block dst's slots become
//     a copy of block src's (copy-on-write after a fork); pairs with an id outside the cache are
//     skipped. Pairs must not chain (no dst is another pair's src).
//
// Elementwise and memory-bound; decode writes a few rows a step, so simplicity wins here.

#include "rocmforge.h"
#include "rocmforge_dependent_launch.h"
#include "rocmforge_kv_cache.h"

template <typename T>
RF_DEVICE void rf_kv_cache_write(const rf_kv_write_params& p) {
    RF_GRID_STRIDE_LOOP(e, p.tokens * p.row) {
        const rf_u64 t = e / p.row, i = e % p.row;
        const long long row = rf_kv_row_offset(p, t);
        if (row < 0) continue;
        ((T*)p.k_cache)[row + i] = ((const T*)p.k)[t * p.k_stride + i];
        ((T*)p.v_cache)[row + i] = ((const T*)p.v)[t * p.v_stride + i];
    }
}

template <typename T>
RF_DEVICE void rf_kv_cache_copy_blocks(const rf_kv_copy_params& p) {
    RF_GRID_STRIDE_LOOP(e, p.n * p.block_elems) {
        const rf_u64 pair = e / p.block_elems, i = e % p.block_elems;
        const int src = p.pairs[2 * pair], dst = p.pairs[2 * pair + 1];
        if (src < 0 || dst < 0 || (rf_u64)src >= p.num_blocks || (rf_u64)dst >= p.num_blocks) continue;
        T* k = (T*)p.k_cache;
        T* v = (T*)p.v_cache;
        k[(rf_u64)dst * p.block_elems + i] = k[(rf_u64)src * p.block_elems + i];
        v[(rf_u64)dst * p.block_elems + i] = v[(rf_u64)src * p.block_elems + i];
    }
}

#define RF_KV_ENTRIES(suffix, T)                                                                      \
    RF_KERNEL void rf_kv_cache_write_##suffix(rf_kv_write_params p) {                                 \
        rf_follow_prior_grid();                                                                       \
        rf_kv_cache_write<T>(p);                                                                      \
    }                                                                                                 \
    RF_KERNEL void rf_kv_cache_copy_blocks_##suffix(rf_kv_copy_params p) {                            \
        rf_follow_prior_grid();                                                                       \
        rf_kv_cache_copy_blocks<T>(p);                                                                \
    }

RF_FOR_EACH_DTYPE(RF_KV_ENTRIES)
