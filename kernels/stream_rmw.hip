// rf_stream_rmw: in place, reads `run` bytes of every `pitch` bytes of a buffer and writes them
// back with every 32-bit word XOR-ed with `mask`. The benchmarks' read-modify-write ceiling for
// a layout: what a kernel that updates part of each row in place (RoPE's GLM styles rotate the
// first half of every head) can reach on those bytes, with nothing else to do.

#include "rocmforge.h"

#define RF_STREAM_RMW_THREADS 256

// runs x run_vecs 16-byte vectors, run k at vector k * pitch_vecs of buf (run_vecs <= pitch_vecs);
// one vector a thread per grid-stride step (the loop the ceiling stands for: load, change, store).
RF_KERNEL void __launch_bounds__(RF_STREAM_RMW_THREADS)
    rf_stream_rmw(uint4* buf, unsigned long long runs, unsigned long long run_vecs,
                  unsigned long long pitch_vecs, unsigned mask) {
    const rf_u64 n = runs * run_vecs;
    const rf_u64 stride = (rf_u64)gridDim.x * blockDim.x;
    for (rf_u64 v = (rf_u64)blockIdx.x * blockDim.x + threadIdx.x; v < n; v += stride) {
        rf_u64 run;
        rf_u64 at;
        rf_divmod_u64(v, run_vecs, &run, &at);
        uint4* p = buf + run * pitch_vecs + at;
        uint4 x = *p;
        x.x ^= mask;
        x.y ^= mask;
        x.z ^= mask;
        x.w ^= mask;
        *p = x;
    }
}
