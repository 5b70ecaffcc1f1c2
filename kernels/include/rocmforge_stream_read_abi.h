// rocmforge_stream_read_abi.h: the staged read's parameter block and shape (kernels/stream_read.hip,
// rf_stream_read_staged), shared with its launcher (crates/rocm-kernels/src/stream_read.rs,
// through the generated abi/stream_read.rs). See rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_STREAM_READ_ABI_H
#define ROCMFORGE_STREAM_READ_ABI_H

#include "rocmforge_abi.h"

// Threads a block, 16-byte vectors a thread copies a chunk, and the chunks of a block's ring
// (shared memory: RF_STAGED_SLOTS * RF_STAGED_THREADS * RF_STAGED_PER_THREAD * 16 bytes).
#define RF_STAGED_THREADS 512
#define RF_STAGED_PER_THREAD 4
#define RF_STAGED_SLOTS 6
// Stages a launch reads at most; the kinds of gate between them (hops[stage % RF_STAGED_KINDS]).
#define RF_STAGED_MAX_STAGES 32
#define RF_STAGED_KINDS 4

struct rf_staged_args {
    RF_ABI_PTR(const void) w;
    unsigned long long end[RF_STAGED_MAX_STAGES]; // stage s: vectors [end[s - 1], end[s])
    RF_ABI_PTR(const unsigned) chase;
    unsigned long long chase_len;
    unsigned hops[RF_STAGED_KINDS];
    unsigned stages;
    unsigned small_blocks;
    unsigned ahead;
    unsigned small_idle; // 1: blocks [0, small_blocks) copy no weights, only chase
    RF_ABI_PTR(unsigned) counters; // [2 * stages + 1]
    RF_ABI_PTR(unsigned) partial;  // [gridDim.x]
    RF_ABI_PTR(unsigned) timeout;  // [1]
};

#endif // ROCMFORGE_STREAM_READ_ABI_H
