// A Llama MLP of one token in one launch, its weights in a ggml block format, on NVIDIA matrix
// cores (sm_80 and later: mma.sync.m16n8k16, cp.async):
//
//   rf_qmlp_<fmt>_<dt>(p):  act = round(silu(round(G x)) * round(U x))    G, U: [ffn, hidden]
//                           y   = round(D act)                             D: [hidden, ffn]
//
// (round: to the storage type T; rocmforge_quant_mlp_abi.h has the parameters). The separate
// launches it replaces (quant_matvec_mma's gate-and-up group, swiglu, quant_matvec_mma's down
// product) give act the same bits; y differs from theirs in the order of its f32 sums only (the
// down product's k is split, below).
//
// Why one launch. At one token the products read every weight byte once and do little with it,
// so a decode step is a race between the weight stream and everything that stops it: each
// launch's ramp and drain (a 30 MB read in one launch reaches 0.72 of the copy rate,
// docs/kernels/mxfp.md), the swiglu launch between the products, and the down product's 256
// tiles against 528 block places. Here the blocks stay resident and take work items in order:
// first the gate-and-up tiles, then the down product's tile parts. A block that takes a down part
// before every gate-and-up tile is done starts copying that part's weights (they need nothing of
// act) and only then waits, so the weight stream runs on across the two products.
//
// Work items, handed out by a ticket counter (RF_QMLP_TICKETS) in increasing order:
//   [0, ffn / 16): tile i of gate and of up (a pair item): 16 rows of each, then act's 16
//     elements, counted in RF_QMLP_PAIRS_DONE;
//   then the down product's 16-row tiles, each cut along k into `splits` parts (tile j's parts
//     together): a part waits until every pair item is counted, stores its f32 totals to
//     `partial`, and the last part of a tile to arrive adds the parts in order 0, 1, ... and
//     stores y (so y's bits do not depend on the order of arrival).
// Items are taken only by running blocks, and a block waits only inside a down part, whose
// ticket is later than every pair item's: every pair item is held by a block that is running it
// or will run it next without waiting. So the launch finishes whatever the grid and however
// many of its blocks the device holds at once; the launcher sizes the grid to what it holds.
//
// Inside an item, as quant_matvec_mma.hip's tile: the block's 4 warps split the item's chunks
// (F::CHUNK elements of k; a pair item's chunks are gate's then up's), warp w taking chunks w,
// w + 4, ...; each copies its chunk of the 16 rows and of x (or act) into its own shared stage
// with cp.async, STAGES - 1 chunks in flight while it computes on one; the warps' totals are
// added in warp order. The pipeline drains at an item's end.
//
// Entry: hidden and ffn positive multiples of the format's k step (whole chunks, rows of whole
// 16-byte vectors; q6_K: 2048), 1 <= splits <= min(RF_QMLP_MAX_SPLITS, ffn / F::CHUNK);
// blockDim.x = 32 * RF_QMLP_WARPS; dynamic shared memory RF_QMLP_WARPS * (STAGES * (16 * F::SPAN
// + 2 F::CHUNK) + 2 * 16 * 4) bytes; every pointer 16-byte aligned; 16 * row bytes < 2^32;
// items below 2^31; the counters zero. The launcher (quant/mlp.rs) checks all of it.

#include "rocmforge_dependent_launch.h"
#include "rocmforge_qmvm_formats.h"
#include "rocmforge_quant_mlp_abi.h"
#include "rocmforge_silu.h"

#if !RF_MMA_SYNC && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "quant_mlp_mma.hip is built for NVIDIA sm_80 and later only (xtask kernels' target list)"
#endif

#if RF_MMA_SYNC

// A counter read with acquire semantics at device scope: what the blocks that counted wrote
// before counting is visible after it.
RF_DEVICE unsigned rf_qmlp_acquire(const unsigned* counter) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    return v;
}

// One work item: the weights of its products (1 or 2) from their first row, their row bytes,
// its chunks [c0, c0 + n) of each product, its valid rows and the activations it reads.
template <typename T> struct rf_qmlp_item {
    const unsigned char* w[2];
    int products;
    unsigned row_bytes;
    unsigned c0;
    unsigned n;
    int rows;
    const T* x;
};

template <typename F, typename T> RF_DEVICE void rf_qmlp(const rf_qmlp_params& p) {
    constexpr int R = RF_QMLP_ROWS;
    constexpr int WARPS = RF_QMLP_WARPS;
    constexpr int STAGES = F::STAGES_B1;
    constexpr int ROW = F::ROW;     // bytes of a row's chunk
    constexpr int SPAN = F::SPAN;   // bytes staged for them (ROW, or q6_K's 16-byte span)
    constexpr int VECS = SPAN / 16; // 16-byte copies a row's chunk
    constexpr bool SPANNED = SPAN != ROW;
    constexpr int WBYTES = R * SPAN;
    typedef rf_qmvm_x<F::CHUNK, 1> X;
    constexpr int STAGE = WBYTES + X::BYTES;
    constexpr int COPIES = (R * VECS + 31) / 32;
    constexpr int XV = 2 * F::CHUNK / 16; // 16-byte copies of x's chunk
    static_assert(SPAN % 16 == 0 && (SPANNED || ROW % 16 == 0), "a row's chunk is staged as whole 16-byte vectors");
    extern __shared__ __align__(16) unsigned char rf_qmlp_smem[];
    __shared__ unsigned rf_qmlp_next; // the block's next ticket
    __shared__ int rf_qmlp_last;      // whether this part is its tile's last
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    unsigned char* stages = rf_qmlp_smem + warp * STAGES * STAGE;
    float* totals = reinterpret_cast<float*>(rf_qmlp_smem + WARPS * STAGES * STAGE); // [2][WARPS][R]
    unsigned* counters = p.counters;
    const unsigned hidden_chunks = (unsigned)(p.hidden / F::CHUNK);
    const unsigned ffn_chunks = (unsigned)(p.ffn / F::CHUNK);
    const unsigned pairs = (unsigned)((p.ffn + R - 1) / R);
    const unsigned down_tiles = (unsigned)((p.hidden + R - 1) / R);
    const unsigned items = pairs + down_tiles * p.splits;
    const T* act_in = reinterpret_cast<const T*>(p.act);

    auto item_of = [&](unsigned i) {
        rf_qmlp_item<T> it;
        if (i < pairs) {
            it.row_bytes = hidden_chunks * (unsigned)ROW;
            const rf_u64 first = (rf_u64)i * R * it.row_bytes;
            it.w[0] = p.gate + first;
            it.w[1] = p.up + first;
            it.products = 2;
            it.c0 = 0;
            it.n = hidden_chunks;
            const rf_u64 left = p.ffn - (rf_u64)i * R;
            it.rows = left < (rf_u64)R ? (int)left : R;
            it.x = reinterpret_cast<const T*>(p.x);
        } else {
            const unsigned tile = (i - pairs) / p.splits;
            const unsigned part = (i - pairs) - tile * p.splits;
            it.row_bytes = ffn_chunks * (unsigned)ROW;
            it.w[0] = it.w[1] = p.down + (rf_u64)tile * R * it.row_bytes;
            it.products = 1;
            // part * chunks < 2^32: chunks below 2^28 (16 row bytes < 2^32), splits <= 8.
            it.c0 = part * ffn_chunks / p.splits;
            it.n = (part + 1) * ffn_chunks / p.splits - it.c0;
            const rf_u64 left = p.hidden - (rf_u64)tile * R;
            it.rows = left < (rf_u64)R ? (int)left : R;
            it.x = act_in;
        }
        return it;
    };

    // Chunk e of an item's sequence (product e / n, chunk c0 + e % n): its rows -> stage s, and
    // its x; rows past the item's, and a spanned chunk's vectors past its row's end, are
    // zero-filled (nothing read).
    auto stage_w = [&](const rf_qmlp_item<T>& it, const unsigned (&src_off)[COPIES], unsigned e, int s) {
        const int prod = e >= it.n ? 1 : 0;
        const unsigned c = it.c0 + (prod ? e - it.n : e);
        unsigned char* dst = stages + s * STAGE;
        const unsigned start = SPANNED ? c * (unsigned)ROW & ~15u : c * (unsigned)ROW;
        const unsigned char* src = (prod ? it.w[1] : it.w[0]) + start;
#pragma unroll
        for (int j = 0; j < COPIES; ++j) {
            const int i = lane + 32 * j;
            if (R * VECS % 32 == 0 || i < R * VECS) {
                const bool ok =
                    i < it.rows * VECS && (!SPANNED || start + 16u * (unsigned)(i % VECS) < it.row_bytes);
                rf_cp_async16(dst + 16 * i, ok ? src + src_off[j] : src, ok ? 16 : 0);
            }
        }
    };
    auto stage_x = [&](const rf_qmlp_item<T>& it, unsigned e, int s) {
        const unsigned c = it.c0 + (e >= it.n ? e - it.n : e);
        unsigned char* dst = stages + s * STAGE + WBYTES;
        const unsigned char* xs = reinterpret_cast<const unsigned char*>(it.x + (rf_u64)c * F::CHUNK);
#pragma unroll
        for (int i0 = 0; i0 < XV; i0 += 32) {
            const int i = i0 + lane;
            if (XV % 32 == 0 || i < XV) {
                rf_cp_async16(dst + 16 * i, xs + 16 * i, 16);
            }
        }
    };

    // Every thread waits for the kernel ahead (it wrote x, and the previous launch of this
    // kernel set the counters back) before anything else; no weight copy comes first, since the
    // first ticket is a counter too.
    rf_follow_prior_grid();
    if (threadIdx.x == 0) {
        rf_qmlp_next = atomicAdd(counters + RF_QMLP_TICKETS, 1u);
    }
    __syncthreads();
    unsigned item = rf_qmlp_next;
    while (item < items) {
        __syncthreads(); // every thread has read rf_qmlp_next
        if (threadIdx.x == 0) {
            // The ticket after this one, taken now so that its latency hides behind this item.
            rf_qmlp_next = atomicAdd(counters + RF_QMLP_TICKETS, 1u);
        }
        const rf_qmlp_item<T> it = item_of(item);
        const unsigned len = (unsigned)it.products * it.n;
        unsigned src_off[COPIES];
#pragma unroll
        for (int j = 0; j < COPIES; ++j) {
            const int i = lane + 32 * j;
            src_off[j] = (unsigned)(i / VECS) * it.row_bytes + 16u * (unsigned)(i % VECS);
        }
        // The first STAGES - 1 chunks' weights, then (a down part) the wait for act, then their x.
        unsigned load = (unsigned)warp;
#pragma unroll
        for (int i = 0; i < STAGES - 1; ++i) {
            if (load < len) {
                stage_w(it, src_off, load, i);
            }
            load += WARPS;
        }
        if (item >= pairs) {
            if (threadIdx.x == 0) {
                // Polls back off (up to ~1 us) so that the waiting blocks do not crowd the counter.
                unsigned pause = 32;
                while (rf_qmlp_acquire(counters + RF_QMLP_PAIRS_DONE) < pairs) {
                    __nanosleep(pause);
                    pause = pause < 1024 ? 2 * pause : pause;
                }
            }
            __syncthreads();
        }
        load = (unsigned)warp;
#pragma unroll
        for (int i = 0; i < STAGES - 1; ++i) {
            if (load < len) {
                stage_x(it, load, i);
            }
            load += WARPS;
            rf_cp_async_commit();
        }
        int s = 0;
        float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
        float first[2] = {0.0f, 0.0f}; // gate's totals (rows g, g + 8) once the warp reaches up
        bool second = false;
        for (unsigned e = (unsigned)warp; e < len; e += WARPS) {
            if (load < len) {
                const int refill = s == 0 ? STAGES - 1 : s - 1; // the stage computed on last
                stage_w(it, src_off, load, refill);
                stage_x(it, load, refill);
            }
            load += WARPS;
            rf_cp_async_commit();
            rf_cp_async_wait<STAGES - 1>(); // chunk e has landed (this lane's copies) ...
            __syncwarp();                   // ... and every lane's
            if (!second && e >= it.n) {
                first[0] = acc[0][0];
                first[1] = acc[0][2];
                acc[0][0] = acc[0][2] = 0.0f;
                second = true;
            }
            const unsigned char* st = stages + s * STAGE;
            const unsigned c = it.c0 + (e >= it.n ? e - it.n : e);
            const int at = SPANNED ? (int)(c * (unsigned)ROW & 15u) : 0; // the chunk's offset in its span
            F::template chunk<1, 0>(st + g * SPAN + at, st + (g + 8) * SPAN + at,
                                    reinterpret_cast<const T*>(st + WBYTES), t, acc);
            __syncwarp(); // every lane is done with stage s before it is refilled
            s = s + 1 == STAGES ? 0 : s + 1;
        }
        rf_cp_async_wait<0>();
        // Totals [product][warp][row]: product 0 is gate (or down), 1 up; a warp that never
        // reached up has none of it.
        if (t == 0) {
            totals[warp * R + g] = second ? first[0] : acc[0][0];
            totals[warp * R + g + 8] = second ? first[1] : acc[0][2];
            totals[(WARPS + warp) * R + g] = second ? acc[0][0] : 0.0f;
            totals[(WARPS + warp) * R + g + 8] = second ? acc[0][2] : 0.0f;
        }
        __syncthreads();
        if (item < pairs) {
            // act's rows: gate and up rounded as their own outputs would be, then swiglu's formula.
            const int r = (int)threadIdx.x;
            if (r < it.rows) {
                float gs = 0.0f;
                float us = 0.0f;
#pragma unroll
                for (int w = 0; w < WARPS; ++w) {
                    gs += totals[w * R + r];
                    us += totals[(WARPS + w) * R + r];
                }
                const float gv = rf_to_float(rf_from_float<T>(gs));
                const float uv = rf_to_float(rf_from_float<T>(us));
                T* act = reinterpret_cast<T*>(p.act);
                act[(rf_u64)item * R + r] = rf_from_float<T>(rf_silu_mul(gv, uv));
            }
            // Release, as a grid barrier does: the block's act rows (ordered before thread 0's
            // fence by the barrier) reach the device before the tile is counted.
            __syncthreads();
            if (threadIdx.x == 0) {
                __threadfence();
                atomicAdd(counters + RF_QMLP_PAIRS_DONE, 1u);
            }
        } else {
            const unsigned tile = (item - pairs) / p.splits;
            const unsigned part = (item - pairs) - tile * p.splits;
            const int r = (int)threadIdx.x;
            const rf_u64 row = (rf_u64)tile * R + (rf_u64)r;
            T* y = reinterpret_cast<T*>(p.y);
            float sum = 0.0f;
            if (r < it.rows) {
#pragma unroll
                for (int w = 0; w < WARPS; ++w) {
                    sum += totals[w * R + r];
                }
            }
            if (p.splits == 1) {
                if (r < it.rows) {
                    y[row] = rf_from_float<T>(sum);
                }
            } else {
                if (r < it.rows) {
                    p.partial[(rf_u64)part * p.hidden + row] = sum;
                }
                // Release (as above): the part's totals reach the device before it is counted.
                __syncthreads();
                if (threadIdx.x == 0) {
                    __threadfence();
                    rf_qmlp_last = atomicAdd(counters + RF_QMLP_ARRIVALS + tile, 1u) == p.splits - 1;
                }
                __syncthreads();
                if (rf_qmlp_last) {
                    // Acquire: every part is visible; read past the (incoherent) L1, in order.
                    __threadfence();
                    if (r < it.rows) {
                        float total = __ldcg(p.partial + row);
                        for (unsigned q = 1; q < p.splits; ++q) {
                            total += __ldcg(p.partial + (rf_u64)q * p.hidden + row);
                        }
                        y[row] = rf_from_float<T>(total);
                    }
                    if (threadIdx.x == 0) {
                        counters[RF_QMLP_ARRIVALS + tile] = 0u;
                    }
                }
            }
        }
        __syncthreads(); // the totals are read, and rf_qmlp_next written, before the next item
        item = rf_qmlp_next;
    }
    // The block's last ticket is taken: the last block to finish sets the counters back for the
    // next launch (every other block has taken its last ticket and passed its last wait).
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(counters + RF_QMLP_FINISHED, 1u) == gridDim.x - 1) {
            counters[RF_QMLP_TICKETS] = 0u;
            counters[RF_QMLP_PAIRS_DONE] = 0u;
            counters[RF_QMLP_FINISHED] = 0u;
        }
    }
}

#define RF_QMLP_BODY(F, T) rf_qmlp<F, T>(p);
#else
// A host pass (no device code): the entries are declarations only.
#define RF_QMLP_BODY(F, T)
#endif // RF_MMA_SYNC

// 4 warps, registers for 4 blocks an SM (quant_matvec_mma.hip's one-vector entries).
#define RF_QMLP_ENTRY(fmt, F, dt, T)                                                                \
    RF_KERNEL void __launch_bounds__(32 * RF_QMLP_WARPS, 4) rf_qmlp_##fmt##_##dt(rf_qmlp_params p) { \
        RF_QMLP_BODY(F<T>, T)                                                                      \
    }
#define RF_QMLP_ENTRIES(fmt, F)            \
    RF_QMLP_ENTRY(fmt, F, f16, __half)     \
    RF_QMLP_ENTRY(fmt, F, bf16, rf_bf16)
RF_QMLP_ENTRIES(q4_k, rf_qmvm_q4_k)
RF_QMLP_ENTRIES(q5_k, rf_qmvm_q5_k)
RF_QMLP_ENTRIES(q8_0, rf_qmvm_q8_0)
RF_QMLP_ENTRIES(q4_0, rf_qmvm_q4_0)
RF_QMLP_ENTRIES(q6_k, rf_qmvm_q6_k)
