// rocmforge_kv_cache_abi.h: the parameter blocks of the KV-cache kernels (kernels/kv_cache.hip),
// shared with their launcher (crates/rocm-kernels/src/kv_cache.rs, through the generated
// abi/kv_cache.rs). See rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_KV_CACHE_ABI_H
#define ROCMFORGE_KV_CACHE_ABI_H

#include "rocmforge_abi.h"

// New rows of K and V written to the cache slots `slots[t]`.
struct rf_kv_write_params {
    RF_ABI_PTR(const void) k;
    RF_ABI_PTR(const void) v;
    RF_ABI_PTR(void) k_cache;
    RF_ABI_PTR(void) v_cache;
    RF_ABI_PTR(const int) slots;
    unsigned long long k_stride, v_stride;
    unsigned long long row;
    unsigned long long tokens;
    unsigned long long num_slots;
};

// Whole blocks copied between cache slots, `pairs[i] = (src, dst)`.
struct rf_kv_copy_params {
    RF_ABI_PTR(void) k_cache;
    RF_ABI_PTR(void) v_cache;
    RF_ABI_PTR(const int) pairs; // [n][2]: src, dst
    unsigned long long n;
    unsigned long long block_elems; // block_size * row
    unsigned long long num_blocks;
};

#endif // ROCMFORGE_KV_CACHE_ABI_H
