// rocmforge_grid_barrier.h: barriers across the blocks of one cooperative launch (every block
// resident: rocm-runtime's `Launch::cooperative`), shared by the persistent kernels
// (stream_read.hip's staged read, persistent_mlp.hip). NVIDIA sm_80 and later only (RF_MMA_SYNC
// outside the CPU emulator): the global timer and acquire loads are PTX.
//
// A barrier is a counter in global memory that every block adds one to when it arrives
// (rf_grid_arrive) and that waiting blocks poll until it reaches the number of blocks
// (rf_grid_wait). Counters are zero at a launch's start; the launch puts them back itself
// (rf_grid_exit).
// A wait that lasts more than a second (a block that never started, which the cooperative
// launch rules out) sets *timeout and lets the block through rather than hang the device:
// whatever the launch computed is then void, and its launcher says so.

#ifndef ROCMFORGE_GRID_BARRIER_H
#define ROCMFORGE_GRID_BARRIER_H

#include "rocmforge.h"
#include "rocmforge_mma.h"

#if RF_MMA_SYNC && !defined(RF_EMU_MMA_SYNC)
RF_DEVICE unsigned long long rf_grid_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
RF_DEVICE unsigned rf_grid_load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Thread 0 waits until *c >= target, then the block goes on (what other blocks wrote before
// their arrival is then visible to all its threads).
RF_DEVICE void rf_grid_wait(const unsigned* c, unsigned target, unsigned* timeout) {
    if (threadIdx.x == 0) {
        const unsigned long long t0 = rf_grid_now();
        while (rf_grid_load_acquire(c) < target) {
            if (rf_grid_now() - t0 > 1000000000ull) {
                atomicExch(timeout, 1u);
                break;
            }
        }
    }
    __syncthreads();
}
// The block's arrival, after all its threads' writes so far.
RF_DEVICE void rf_grid_arrive(unsigned* c) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(c, 1u);
    }
}
// Thread 0's exit of the block, after its writes: the launch's last block out runs reset()
// (every counter but `exits` back to zero) and zeroes `exits`, so the next launch (or graph
// replay) starts from zero.
template <typename R> RF_DEVICE void rf_grid_exit(unsigned* exits, R reset) {
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(exits, 1u) == gridDim.x - 1) {
            reset();
            *exits = 0;
            __threadfence();
        }
    }
}
#endif

#endif // ROCMFORGE_GRID_BARRIER_H
