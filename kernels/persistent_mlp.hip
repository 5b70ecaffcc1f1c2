// rf_persistent_mlp_q8_0_<dt>: a decode step's MLP block for one token in one cooperative launch
// (q8_0 weights, f16 or bf16 activations; NVIDIA sm_80 and later):
//
//   s   = round_T(h + delta); h = s                 (the residual add; delta may be absent)
//   xn  = round_T(s * scale * norm)                 (RMSNorm, scale = 1 / sqrt(mean(s^2) + eps))
//   act = round_T(silu(round_T(gate xn)) * round_T(up xn))
//   y   = round_T(down act)
//
// the work of four launches in a chain (rmsnorm_residual, the gate-and-up products, swiglu, the
// down product). The residual add, each element of the norm and of the activation are formed as
// rmsnorm.hip (rocmforge_rms.h) and swiglu.hip (rocmforge_silu.h) form them, and the products
// are the chain's own loop (rocmforge_qmvm.h), so every output has the chain's bits wherever
// the norm's sum of squares (added here in this kernel's order) does.
//
// Why one launch: in a chain the small kernels between the products cost a Q8_0 layer ~8 us of
// an MLP's ~78 (docs/model.md: the norm after O 5.7, SwiGLU 2.0, and the launches' ramps), and
// the next product cannot start its weight stream until they are done. Here the blocks that
// run the products also do the small work, with the products' first weight copies in flight.
// (As of version 4 it is still 2-4% slower than the chain: docs/kernels/persistent_mlp.md.)
//
// Work. One block an SM (launched cooperatively: all resident or refused) of `groups` groups of
// RF_QMVM_WARPS warps, as many as its shared memory holds (the launcher), each group a run of
// the products' loop (rf_pmlp_group below) standing in for one of the blocks a launch of the
// loop keeps resident. Each block
//   1. requests h, delta and the norm's weight (its first RF_PMLP_VECTORS vectors a thread)
//      before anything else: once the loop's first weight copies are issued, a load queues
//      behind every copy the SM has in flight (~4 us of them);
//   2. runs gate and up (rf_qmvm), whose wait, once each warp's first weight copies are issued,
//      forms s and its norm into the block's shared memory (every block forms all of xn
//      itself; nothing is exchanged), where the loop reads it in place; each sum is stored
//      rounded to T;
//   3. arrives at a grid barrier (every gate and up stored) and runs down (rf_qmvm again), whose
//      wait is: the barrier, the block's share of act = silu(gate) * up, a second grid barrier
//      (all of act stored), after which the loop stages act as its x. Block 0 writes s back to
//      h between the two (every block has read h by the first).
// The products' tiles: a group's first is fixed, the rest are claimed from a launch-wide counter
// as the group gets to them (the tiles do not divide evenly among the groups, and a group left
// with one tile more than the others would run it with the rest of its SM idle).
// The last block out zeroes the counters for the next launch.
//
// Entry: hidden and ffn multiples of 256 and at least 1024 (whole q8_0 chunks, one for each of
// a group's 4 warps), blockDim.x = 32 * RF_QMVM_WARPS * groups, groups <= RF_PMLP_GROUPS,
// dynamic shared memory groups times the loop's for one vector plus 6 * hidden (s in f32 and
// xn in T); every pointer 16-byte aligned. The launcher (persistent_mlp.rs) checks all of it.

#include "rocmforge.h"
#include "rocmforge_grid_barrier.h"
#include "rocmforge_persistent_mlp_abi.h"
#include "rocmforge_qmvm.h"
#include "rocmforge_reduce.h"
#include "rocmforge_rms.h"
#include "rocmforge_silu.h"

#if !RF_MMA_SYNC && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "persistent_mlp.hip is built for NVIDIA sm_80 and later only (xtask kernels' target list)"
#endif

#if RF_MMA_SYNC && !defined(RF_EMU_MMA_SYNC)
// Vectors of 16 bytes of h, delta and the norm's weight a thread requests before the loop's
// first copies (8B shapes: hidden 4096 at 384 threads takes 2); the rest come in the wait.
#define RF_PMLP_VECTORS 4
// Tile claims a group keeps (rf_pmlp_group::claim): the kernel's own, in its static shared
// memory, so not a parameter of the launcher's.
#define RF_PMLP_CLAIMS 8

// Group `group` of the block's `groups` groups of RF_QMVM_WARPS warps as a run of the products'
// loop (rocmforge_qmvm.h): its own barrier (named barrier 1 + group), its own shared memory, its
// place among all groups of the launch, group-major (block b's groups start at tiles b,
// b + grid, ...: one block an SM, so the SMs' first tiles are spread alike whatever order the
// blocks were placed in), and its further tiles claimed (claim). Wait: the block's. IN_PLACE:
// x is in shared memory.
template <typename W, bool IN_PLACE> struct rf_pmlp_group {
    static constexpr bool CLAIMS = true;
    static constexpr bool X_IN_PLACE = IN_PLACE;
    int group;
    unsigned groups;
    unsigned shared;
    unsigned* next;           // the launch's count of claimed tiles of this rf_qmvm call
    unsigned long long* ring; // the group's claims: (position << 32) | tile
    W wait_for;
    RF_DEVICE int thread() const { return (int)threadIdx.x - group * 32 * RF_QMVM_WARPS; }
    RF_DEVICE int threads() const { return 32 * RF_QMVM_WARPS; }
    RF_DEVICE int first_warp() const { return group * RF_QMVM_WARPS; }
    RF_DEVICE int warps() const { return RF_QMVM_WARPS; }
    RF_DEVICE unsigned index() const { return blockIdx.x + (unsigned)group * gridDim.x; }
    RF_DEVICE unsigned count() const { return groups * gridDim.x; }
    RF_DEVICE unsigned shared_offset() const { return (unsigned)group * shared; }
    RF_DEVICE void sync() const { asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(32 * RF_QMVM_WARPS) : "memory"); }
    RF_DEVICE void wait() const { wait_for(); }
    // The group's tile at position n (1, 2, ...; 0 is index()). Every warp asks for every
    // position, each of its two cursors in turn, and the first to ask claims it: it marks the
    // position's slot of the ring as being claimed (a compare-and-swap, so one warp wins),
    // takes the launch's next tile (count() and on, in claim order: the ones before are the
    // groups' first) and writes it there; the others read it from the slot, waiting while it is
    // marked. The claim waits for no other warp, whatever chunks of a tile each warp has (one
    // more for some where a row's chunks do not divide among the warps), so no warp can stall
    // another at the loop's barriers. A warp's cursors are never more than three tiles ahead of
    // the group's slowest (the loop's barrier at each tile's end, and the copies running up to
    // two chunks ahead), so RF_PMLP_CLAIMS slots never overrun a position still to be read.
    RF_DEVICE unsigned claim(unsigned n) const {
        unsigned tile = 0;
        if (threadIdx.x % 32 == 0) {
            constexpr unsigned CLAIMING = 0xffffffffu;
            unsigned long long* slot = ring + n % RF_PMLP_CLAIMS;
            for (;;) {
                const unsigned long long v = *reinterpret_cast<volatile unsigned long long*>(slot);
                if ((unsigned)(v >> 32) == n) {
                    if ((unsigned)v == CLAIMING) {
                        continue;
                    }
                    tile = (unsigned)v;
                    break;
                }
                if (atomicCAS(slot, v, ((unsigned long long)n << 32) | CLAIMING) == v) {
                    tile = count() + atomicAdd(next, 1u);
                    atomicExch(slot, ((unsigned long long)n << 32) | tile);
                    break;
                }
            }
        }
        return __shfl_sync(0xffffffffu, tile, 0);
    }
};
template <bool IN_PLACE, typename W>
RF_DEVICE rf_pmlp_group<W, IN_PLACE> rf_pmlp_place(unsigned groups, unsigned shared, unsigned* next,
                                                   unsigned long long (*rings)[RF_PMLP_CLAIMS], W wait_for) {
    const int group = (int)(threadIdx.x / (32 * RF_QMVM_WARPS));
    return rf_pmlp_group<W, IN_PLACE>{group, groups, shared, next, rings[group], wait_for};
}
#endif

template <typename T> RF_DEVICE void rf_persistent_mlp_q8_0(const rf_pmlp_args& a) {
#if RF_MMA_SYNC && !defined(RF_EMU_MMA_SYNC)
    typedef rf_pack16<T> P;
    typedef rf_qmvm_q8_0<T> F;
    extern __shared__ __align__(16) unsigned char rf_pmlp_smem[];
    __shared__ float red[RF_PMLP_GROUPS * RF_QMVM_WARPS];
    // Each rf_qmvm call's claims, a ring a group; ~0: no position claimed yet. The barrier:
    // where a tile is a warp's chunk or two (short rows) the loop claims before its wait.
    __shared__ unsigned long long claims[2][RF_PMLP_GROUPS][RF_PMLP_CLAIMS];
    for (unsigned i = threadIdx.x; i < 2 * RF_PMLP_GROUPS * RF_PMLP_CLAIMS; i += blockDim.x) {
        (&claims[0][0][0])[i] = ~0ull;
    }
    __syncthreads();
    // Each group's loop memory, then s (f32) and xn (T).
    constexpr unsigned loop_shared = rf_qmvm_shared<F, 1, F::STAGES_B1, RF_QMVM_WARPS>::BYTES;
    float* s_row = reinterpret_cast<float*>(rf_pmlp_smem + a.groups * loop_shared);
    T* xn = reinterpret_cast<T*>(rf_pmlp_smem + a.groups * loop_shared + 4 * a.hidden);
    const unsigned grid = gridDim.x;
    const unsigned b = blockIdx.x;
    const unsigned vectors = a.hidden / P::N;
    const uint4* h = static_cast<const uint4*>(a.h);
    const uint4* delta = static_cast<const uint4*>(a.delta);
    const T* norm = static_cast<const T*>(a.norm);
    unsigned* stored = a.counters;
    unsigned* activated = a.counters + 1;
    unsigned* exits = a.counters + 2;
    unsigned* up_claims = a.counters + 3;
    unsigned* down_claims = a.counters + 4;

    // 1. The norm's inputs, requested first.
    uint4 hv[RF_PMLP_VECTORS], dv[RF_PMLP_VECTORS], wv[RF_PMLP_VECTORS];
#pragma unroll
    for (int j = 0; j < RF_PMLP_VECTORS; ++j) {
        const unsigned v = threadIdx.x + j * blockDim.x;
        if (v < vectors) {
            hv[j] = __ldcg(h + v);
            dv[j] = delta != nullptr ? __ldcg(delta + v) : make_uint4(0, 0, 0, 0);
            wv[j] = rf_load16(norm + v * P::N);
        }
    }

    // 2. Gate and up over xn, which the block forms (s = round_T(h + delta) and its norm, as
    // rmsnorm.hip forms them) in the loop's wait.
    auto normalise = [&]() {
        float sumsq = 0.0f;
        auto add = [&](unsigned v, uint4 hr, uint4 dr) {
            float s[P::N];
            P::unpack(hr, s);
            if (delta != nullptr) {
                float d[P::N];
                P::unpack(dr, d);
#pragma unroll
                for (int e = 0; e < P::N; ++e) {
                    s[e] = rf_rms_round<T>(s[e] + d[e]);
                }
            }
#pragma unroll
            for (int e = 0; e < P::N; ++e) {
                sumsq = fmaf(s[e], s[e], sumsq);
                s_row[v * P::N + e] = s[e];
            }
        };
        const unsigned rest = threadIdx.x + RF_PMLP_VECTORS * blockDim.x;
#pragma unroll
        for (int j = 0; j < RF_PMLP_VECTORS; ++j) {
            const unsigned v = threadIdx.x + j * blockDim.x;
            if (v < vectors) {
                add(v, hv[j], dv[j]);
            }
        }
        for (unsigned v = rest; v < vectors; v += blockDim.x) {
            add(v, __ldcg(h + v), delta != nullptr ? __ldcg(delta + v) : make_uint4(0, 0, 0, 0));
        }
        const float scale = rf_rms_scale(rf_block_sum(sumsq, red), 1.0f / (float)a.hidden, a.eps);
        auto out = [&](unsigned v, uint4 raw) {
            float w[P::N];
            float o[P::N];
            P::unpack(raw, w);
#pragma unroll
            for (int e = 0; e < P::N; ++e) {
                o[e] = s_row[v * P::N + e] * scale * w[e];
            }
            *reinterpret_cast<uint4*>(xn + v * P::N) = P::pack(o);
        };
#pragma unroll
        for (int j = 0; j < RF_PMLP_VECTORS; ++j) {
            const unsigned v = threadIdx.x + j * blockDim.x;
            if (v < vectors) {
                out(v, wv[j]);
            }
        }
        for (unsigned v = rest; v < vectors; v += blockDim.x) {
            out(v, rf_load16(norm + v * P::N));
        }
        __syncthreads(); // xn is whole
    };
    rf_qmv_products up_products = {};
    up_products.w[0] = a.gate;
    up_products.w[1] = a.up;
    up_products.y[0] = a.gate_out;
    up_products.y[1] = a.up_out;
    up_products.rows[0] = a.ffn;
    up_products.rows[1] = a.ffn;
    rf_qmvm<F, T, 1, F::STAGES_B1>(up_products, xn, a.hidden, 1,
                                   rf_pmlp_place<true>(a.groups, loop_shared, up_claims, claims[0], normalise));

    // 3. Down, its first weight copies in flight through the barriers and the activation. The
    // block arrives before issuing them (its arrival then queues behind none of them).
    rf_grid_arrive(stored);
    auto activation = [&]() {
        rf_grid_wait(stored, grid, a.timeout);
        const T* g = static_cast<const T*>(a.gate_out);
        const T* u = static_cast<const T*>(a.up_out);
        T* act = static_cast<T*>(a.act);
        for (unsigned i = b * blockDim.x + threadIdx.x; i < a.ffn; i += grid * blockDim.x) {
            act[i] = rf_from_float<T>(rf_silu_mul(rf_to_float(__ldcg(g + i)), rf_to_float(__ldcg(u + i))));
        }
        rf_grid_arrive(activated);
        if (b == 0 && delta != nullptr) {
            uint4* hw = static_cast<uint4*>(a.h);
            for (unsigned v = threadIdx.x; v < vectors; v += blockDim.x) {
                hw[v] = P::pack(s_row + v * P::N); // s is T's already: exact
            }
        }
        rf_grid_wait(activated, grid, a.timeout);
    };
    rf_qmv_products down_products = {};
    down_products.w[0] = a.down;
    down_products.y[0] = a.y;
    down_products.rows[0] = a.hidden;
    rf_qmvm<F, T, 1, F::STAGES_B1>(down_products, static_cast<const T*>(a.act), a.ffn, 1,
                                   rf_pmlp_place<false>(a.groups, loop_shared, down_claims, claims[1], activation));

    // The last block out puts the counters back for the next launch.
    __syncthreads();
    rf_grid_exit(exits, [&]() {
        *stored = 0;
        *activated = 0;
        *up_claims = 0;
        *down_claims = 0;
    });
#else
    (void)a;
    RF_MMA_UNAVAILABLE();
#endif
}

#define RF_PMLP_ENTRY(suffix, T)                                                                        \
    RF_KERNEL void __launch_bounds__(32 * RF_QMVM_WARPS * RF_PMLP_GROUPS, 1)                           \
        rf_persistent_mlp_q8_0_##suffix(rf_pmlp_args a) {                                               \
        rf_persistent_mlp_q8_0<T>(a);                                                                   \
    }
RF_PMLP_ENTRY(f16, __half)
RF_PMLP_ENTRY(bf16, rf_bf16)
