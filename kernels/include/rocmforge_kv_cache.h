// rocmforge_kv_cache.h: the KV cache's slot rule, for every kernel that writes new K/V rows
// into the cache (kernels/kv_cache.hip, and rope.hip's launch that rotates K straight into it).

#ifndef ROCMFORGE_KV_CACHE_H
#define ROCMFORGE_KV_CACHE_H

#include "rocmforge.h"
#include "rocmforge_kv_cache_abi.h"

// Where token `token`'s row starts in either cache (elements), or -1 where the cache skips the
// token: a negative slot is padding, and a slot past the cache is refused here so that a bad
// block table never writes outside the cache.
RF_DEVICE long long rf_kv_row_offset(const rf_kv_write_params& p, rf_u64 token) {
    const int slot = p.slots[token];
    if (slot < 0 || (rf_u64)slot >= p.num_slots) {
        return -1;
    }
    return (long long)((rf_u64)slot * p.row);
}

#endif // ROCMFORGE_KV_CACHE_H
