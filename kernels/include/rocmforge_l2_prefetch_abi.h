// rocmforge_l2_prefetch_abi.h: the ranges one launch of the L2 prefetch kernel
// (kernels/l2_prefetch.hip) asks the device to bring into its last-level cache, as its launcher
// (crates/rocm-kernels/src/l2_prefetch.rs, through abi/l2_prefetch.rs) fills them. See
// rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_L2_PREFETCH_ABI_H
#define ROCMFORGE_L2_PREFETCH_ABI_H

#include "rocmforge_abi.h"

// Ranges one launch takes: a decode step asks for a projection's weight and the start of the
// next one's (docs/kernels/l2_prefetch.md). Unused ranges have 0 bytes (pointers never read).
#define RF_L2_PREFETCH_MAX_RANGES 4
// Bytes one thread asks for at a time: one bulk prefetch on NVIDIA sm_90+, a line at a time
// elsewhere. Small enough that a range of a few MB spreads over every SM of the grid.
#define RF_L2_PREFETCH_PIECE 16384
// Threads a block.
#define RF_L2_PREFETCH_THREADS 64

struct rf_l2_prefetch_ranges {
    RF_ABI_PTR(const unsigned char) base[RF_L2_PREFETCH_MAX_RANGES];
    unsigned long long bytes[RF_L2_PREFETCH_MAX_RANGES];
};

#endif // ROCMFORGE_L2_PREFETCH_ABI_H
