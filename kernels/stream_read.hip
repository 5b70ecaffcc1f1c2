// rf_stream_read: reads every 16-byte vector of a buffer once and writes, per block, the wrapping
// sum of the 32-bit words it read. The benchmarks' read-only ceiling: what a kernel that only
// streams a weight in (a matrix-vector product) can reach, which the copy (read plus write) row
// does not show. rf_stream_read_dependent: the same for a dependent launch (the floor of a chain
// of products launched one after another, `bench model`'s layer reads).

#include "rocmforge.h"
#include "rocmforge_dependent_launch.h"
#include "rocmforge_grid_barrier.h"
#include "rocmforge_mma.h"
#include "rocmforge_stream_read_abi.h"

#define RF_STREAM_READ_THREADS 256
#define RF_STREAM_READ_UNROLL 4

// n vectors at src; partial[blockIdx.x] = sum of the block's words (mod 2^32). Grid-stride with
// RF_STREAM_READ_UNROLL independent loads a thread in flight; blockDim.x = RF_STREAM_READ_THREADS.
// DEPENDENT (rf_stream_read_dependent, for a dependent launch): the thread's first loads are
// issued before it waits for the kernel ahead, as the matrix-vector products issue their first
// weight copies (rocmforge_dependent_launch.h), and nothing is written before the wait.
template <bool DEPENDENT>
RF_DEVICE void rf_stream_read_body(const uint4* src, unsigned long long n, unsigned* partial) {
    __shared__ unsigned sums[RF_STREAM_READ_THREADS];
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    bool waited = !DEPENDENT;
    for (; i + (RF_STREAM_READ_UNROLL - 1) * stride < n; i += RF_STREAM_READ_UNROLL * stride) {
        uint4 v[RF_STREAM_READ_UNROLL];
#pragma unroll
        for (int u = 0; u < RF_STREAM_READ_UNROLL; ++u) {
            v[u] = src[i + u * stride];
        }
        if (!waited) {
            rf_follow_prior_grid();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < RF_STREAM_READ_UNROLL; ++u) {
            acc += v[u].x + v[u].y + v[u].z + v[u].w;
        }
    }
    if (!waited) {
        rf_follow_prior_grid();
    }
    for (; i < n; i += stride) {
        const uint4 v = src[i];
        acc += v.x + v.y + v.z + v.w;
    }
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            sums[threadIdx.x] += sums[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = sums[0];
    }
}

RF_KERNEL void __launch_bounds__(RF_STREAM_READ_THREADS)
    rf_stream_read(const uint4* src, unsigned long long n, unsigned* partial) {
    rf_stream_read_body<false>(src, n, partial);
}
RF_KERNEL void __launch_bounds__(RF_STREAM_READ_THREADS)
    rf_stream_read_dependent(const uint4* src, unsigned long long n, unsigned* partial) {
    rf_stream_read_body<true>(src, n, partial);
}

// ---------------------------------------------------------------------------------------------
// rf_stream_read_staged: the read floor of a persistent decode-layer kernel (`bench model`). One
// block an SM, launched cooperatively (all resident), reads `stages` stages from one buffer, stage
// s covering vectors [end[s - 1], end[s]) (end[-1] = 0): a layer's products (Q, K, V; O; gate,
// up; down), layer after layer. A block takes chunks b, b + grid, ... of each stage through a
// ring of RF_STAGED_SLOTS chunks of RF_STAGED_CHUNK vectors in shared memory (cp.async, 4 vectors
// a thread, each thread adding up its own vectors: no barrier between copy and use). A stage is
// consumed only once every block has consumed the stage before (a grid barrier: where a layer
// kernel would wait for the product before it), and where hops[s % RF_STAGED_KINDS] > 0 only
// after blocks 0 .. small_blocks - 1 have then chased that many dependent loads through `chase`
// (standing in for the latency-bound work between products: attention, the norms). With
// `small_idle`, those blocks copy no weights (blocks small_blocks .. grid - 1 take every chunk),
// so their SMs issue nothing but the chase (does a round trip wait behind its own SM's copies?).
// With `ahead`, a block's copies run on into the next stages while it waits at a gate (the next
// product's weights need nothing of this one); without, a stage's copies start after its gate.
// counters: done[stages], ready[stages], exits, zero at entry; the last block out zeroes them
// again, after every block has passed its last barrier. A barrier that waits more than a second
// (a block that never started: the cooperative launch rules it out) sets *timeout and lets the
// block through instead of hanging the device; the sums are then void. Sums: partial[b] is the
// wrapping sum of the 32-bit words block b read.
#define RF_STAGED_CHUNK (RF_STAGED_THREADS * RF_STAGED_PER_THREAD)

#if RF_MMA_SYNC && !defined(RF_EMU_MMA_SYNC)
// Copies of the chase dispatched one after another: each index is the last load's value.
RF_DEVICE unsigned rf_staged_chase(const unsigned* chase, unsigned long long len, unsigned hops) {
    unsigned i = (unsigned)(blockIdx.x * 2654435761ull % len);
    for (unsigned h = 0; h < hops; ++h) {
        i = min(__ldcg(chase + i), (unsigned)(len - 1)); // any table stays in bounds
    }
    return i;
}
#endif

RF_KERNEL void __launch_bounds__(RF_STAGED_THREADS) rf_stream_read_staged(rf_staged_args a) {
    if (a.stages == 0) {
        return;
    }
#if RF_MMA_SYNC && !defined(RF_EMU_MMA_SYNC)
    extern __shared__ __align__(16) uint4 rf_staged_ring[];
    const uint4* w = static_cast<const uint4*>(a.w);
    // The blocks that copy weights, and this block's place among them (an idle small block has
    // none); barriers, small work and sums go by blockIdx.x.
    const bool idle = a.small_idle && blockIdx.x < a.small_blocks;
    const unsigned copiers = a.small_idle ? gridDim.x - a.small_blocks : gridDim.x;
    const unsigned copier = a.small_idle ? blockIdx.x - (idle ? 0 : a.small_blocks) : blockIdx.x;
    unsigned* done = a.counters;
    unsigned* ready = a.counters + a.stages;
    unsigned* exits = a.counters + 2 * a.stages;
    auto start = [&](unsigned s) -> unsigned long long { return s == 0 ? 0ull : a.end[s - 1]; };
    // An item: chunk c (copier, copier + copiers, ...) of stage s. Next item of the block's list.
    auto next = [&](unsigned& s, unsigned long long& c) {
        c += copiers;
        while (s < a.stages && start(s) + c * RF_STAGED_CHUNK >= a.end[s]) {
            ++s;
            c = copier;
        }
    };
    auto first = [&](unsigned& s, unsigned long long& c) {
        s = idle ? a.stages : 0;
        c = copier;
        while (s < a.stages && start(s) + c * RF_STAGED_CHUNK >= a.end[s]) {
            ++s;
        }
    };
    unsigned ls;
    unsigned long long lc;
    first(ls, lc);
    unsigned cs;
    unsigned long long cc;
    first(cs, cc);
    unsigned issued = 0;   // items whose copies are committed
    unsigned consumed = 0; // items added up
    unsigned open = 0;     // stages the block may consume: [0, open]
    auto fill = [&]() {
        while (ls < a.stages && issued < consumed + RF_STAGED_SLOTS && (a.ahead || ls <= open)) {
            uint4* slot = rf_staged_ring + (issued % RF_STAGED_SLOTS) * RF_STAGED_CHUNK;
            const unsigned long long base = start(ls) + lc * RF_STAGED_CHUNK;
#pragma unroll
            for (int u = 0; u < RF_STAGED_PER_THREAD; ++u) {
                const unsigned long long v = base + u * RF_STAGED_THREADS + threadIdx.x;
                const bool in = v < a.end[ls];
                rf_cp_async16(slot + u * RF_STAGED_THREADS + threadIdx.x, in ? w + v : w, in ? 16 : 0);
            }
            rf_cp_async_commit();
            ++issued;
            next(ls, lc);
        }
    };
    unsigned acc = 0;
    // A small block's part of gate g with `hops` round trips: every block's arrival, the chase,
    // its own arrival at ready[g], which the other blocks wait for.
    auto small_work = [&](unsigned g, unsigned hops) {
        rf_grid_wait(done + g, gridDim.x, a.timeout);
        if (threadIdx.x == 0) {
            // Kept live without touching the sum (indices are below chase_len < 2^32).
            acc += rf_staged_chase(a.chase, a.chase_len, hops) == 0xffffffffu;
        }
        rf_grid_arrive(ready + g);
    };
    unsigned stage_now = 0; // the stage whose gate the block has passed last
    fill();
    while (cs < a.stages) {
        // Gates from the stage consumed last up to this item's.
        while (stage_now < cs) {
            const unsigned g = stage_now;
            rf_grid_arrive(done + g);
            const unsigned hops = a.hops[g % RF_STAGED_KINDS];
            if (hops > 0) {
                if (blockIdx.x < a.small_blocks) {
                    small_work(g, hops);
                }
                rf_grid_wait(ready + g, a.small_blocks, a.timeout);
            } else {
                rf_grid_wait(done + g, gridDim.x, a.timeout);
            }
            ++stage_now;
            open = stage_now;
            fill();
        }
        fill();
        // This item's copies are the oldest of issued - consumed groups.
        switch (issued - consumed - 1) {
        case 0: rf_cp_async_wait<0>(); break;
        case 1: rf_cp_async_wait<1>(); break;
        case 2: rf_cp_async_wait<2>(); break;
        case 3: rf_cp_async_wait<3>(); break;
        case 4: rf_cp_async_wait<4>(); break;
        default: rf_cp_async_wait<RF_STAGED_SLOTS - 1>(); break;
        }
        const uint4* slot = rf_staged_ring + (consumed % RF_STAGED_SLOTS) * RF_STAGED_CHUNK;
#pragma unroll
        for (int u = 0; u < RF_STAGED_PER_THREAD; ++u) {
            const uint4 v = slot[u * RF_STAGED_THREADS + threadIdx.x];
            acc += v.x + v.y + v.z + v.w;
        }
        ++consumed;
        next(cs, cc);
    }
    // Stages past the block's last item (none at the layer's sizes, every stage for an idle
    // small block) still get its arrivals, and a small block's chase where others wait for it.
    while (stage_now + 1 < a.stages) {
        rf_grid_arrive(done + stage_now);
        const unsigned hops = a.hops[stage_now % RF_STAGED_KINDS];
        if (hops > 0 && blockIdx.x < a.small_blocks) {
            small_work(stage_now, hops);
        }
        ++stage_now;
    }
    __shared__ unsigned sums[RF_STAGED_THREADS];
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            sums[threadIdx.x] += sums[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        a.partial[blockIdx.x] = sums[0];
    }
    rf_grid_exit(exits, [&]() {
        for (unsigned i = 0; i < 2 * a.stages; ++i) {
            a.counters[i] = 0;
        }
    });
#else
    RF_MMA_UNAVAILABLE();
#endif
}
