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
// (As of version 3 it is still 9% slower than the chain: docs/kernels/persistent_mlp.md.)
//
// Work. One block an SM (launched cooperatively: all resident or refused) of `groups` groups of
// RF_QMVM_WARPS warps, as many as its shared memory holds (the launcher), each group a run of
// the products' loop (rf_pmlp_group below) standing in for one of the blocks a launch of the
// loop keeps resident. Each block
//   1. runs gate and up (rf_qmvm), whose wait, once each warp's first weight copies are issued,
//      forms s and its norm (every block reads h and delta from the L2, nothing is exchanged)
//      into the block's own copy of xn in global memory (xn[block]: the loop stages x from
//      global memory); each sum is stored rounded to T;
//   2. runs down (rf_qmvm again), whose wait is: a grid barrier (every gate and up stored), the
//      block's share of act = silu(gate) * up (block 0 also writes s back to h: every block
//      has read h by then), a second grid barrier (all of act stored); the loop then stages
//      act as its x.
// The last block out zeroes the barriers' counters for the next launch.
//
// Entry: hidden and ffn multiples of 256 and at least 1024 (whole q8_0 chunks, one for each of
// a group's 4 warps), blockDim.x = 32 * RF_QMVM_WARPS * groups, groups <= RF_PMLP_GROUPS,
// dynamic shared memory groups times the loop's for one vector plus 4 * hidden (s, kept while
// the norm is formed); every pointer 16-byte aligned. The launcher (persistent_mlp.rs) checks
// all of it.

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
// Group `group` of the block's `groups` groups of RF_QMVM_WARPS warps as a run of the products'
// loop (rocmforge_qmvm.h): its own barrier (named barrier 1 + group), its own shared memory, and
// its place among all groups of the launch, group-major (block b's groups take runs b,
// b + grid, ...: one block an SM, so each SM's groups share one residue of the tiles and the SMs
// get all but one tile alike, whatever order the blocks were placed in). Wait: the block's.
template <typename W> struct rf_pmlp_group {
    int group;
    unsigned groups;
    unsigned shared;
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
};
template <typename W>
RF_DEVICE rf_pmlp_group<W> rf_pmlp_place(unsigned groups, unsigned shared, W wait_for) {
    return rf_pmlp_group<W>{(int)(threadIdx.x / (32 * RF_QMVM_WARPS)), groups, shared, wait_for};
}
#endif

template <typename T> RF_DEVICE void rf_persistent_mlp_q8_0(const rf_pmlp_args& a) {
#if RF_MMA_SYNC && !defined(RF_EMU_MMA_SYNC)
    typedef rf_pack16<T> P;
    typedef rf_qmvm_q8_0<T> F;
    extern __shared__ __align__(16) unsigned char rf_pmlp_smem[];
    __shared__ float red[RF_PMLP_GROUPS * RF_QMVM_WARPS];
    // Each group's loop memory, then s while the norm is formed (its own: the loops' first
    // copies are already landing in theirs).
    constexpr unsigned loop_shared = rf_qmvm_shared<F, 1, F::STAGES_B1, RF_QMVM_WARPS>::BYTES;
    float* s_row = reinterpret_cast<float*>(rf_pmlp_smem + a.groups * loop_shared);
    const unsigned grid = gridDim.x;
    const unsigned b = blockIdx.x;
    const T* h = static_cast<const T*>(a.h);
    const T* delta = static_cast<const T*>(a.delta);
    const T* norm = static_cast<const T*>(a.norm);
    T* xn = static_cast<T*>(a.xn) + (rf_u64)b * a.hidden;

    // 1 and 2. Gate and up over the block's xn, which the block forms (s = round_T(h + delta)
    // and its norm, as rmsnorm.hip forms them) while the loops' first weight copies land.
    auto normalise = [&]() {
        float sumsq = 0.0f;
        for (unsigned v = threadIdx.x; v < a.hidden / P::N; v += blockDim.x) {
            float s[P::N];
            P::unpack(__ldcg(reinterpret_cast<const uint4*>(h) + v), s);
            if (delta != nullptr) {
                float d[P::N];
                P::unpack(__ldcg(reinterpret_cast<const uint4*>(delta) + v), d);
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
        }
        const float scale = rf_rms_scale(rf_block_sum(sumsq, red), 1.0f / (float)a.hidden, a.eps);
        for (unsigned v = threadIdx.x; v < a.hidden / P::N; v += blockDim.x) {
            float w[P::N];
            float o[P::N];
            P::unpack(rf_load16(norm + v * P::N), w);
#pragma unroll
            for (int e = 0; e < P::N; ++e) {
                o[e] = s_row[v * P::N + e] * scale * w[e];
            }
            rf_store16(xn + v * P::N, P::pack(o));
        }
        // The loops' copies of xn read the L2.
        __threadfence();
        __syncthreads();
    };
    rf_qmv_products up_products = {};
    up_products.w[0] = a.gate;
    up_products.w[1] = a.up;
    up_products.y[0] = a.gate_out;
    up_products.y[1] = a.up_out;
    up_products.rows[0] = a.ffn;
    up_products.rows[1] = a.ffn;
    rf_qmvm<F, T, 1, F::STAGES_B1>(up_products, xn, a.hidden, 1, rf_pmlp_place(a.groups, loop_shared, normalise));

    // 3. Down, its first weight copies in flight through the barriers and the activation.
    unsigned* stored = a.counters;
    unsigned* activated = a.counters + 1;
    unsigned* exits = a.counters + 2;
    auto activation = [&]() {
        rf_grid_arrive(stored);
        rf_grid_wait(stored, grid, a.timeout);
        const T* g = static_cast<const T*>(a.gate_out);
        const T* u = static_cast<const T*>(a.up_out);
        T* act = static_cast<T*>(a.act);
        for (unsigned i = b * blockDim.x + threadIdx.x; i < a.ffn; i += grid * blockDim.x) {
            act[i] = rf_from_float<T>(rf_silu_mul(rf_to_float(__ldcg(g + i)), rf_to_float(__ldcg(u + i))));
        }
        if (b == 0 && delta != nullptr) {
            T* hw = static_cast<T*>(a.h);
            for (unsigned v = threadIdx.x; v < a.hidden / P::N; v += blockDim.x) {
                float s[P::N];
                float d[P::N];
                P::unpack(rf_load16(hw + v * P::N), s);
                P::unpack(rf_load16(delta + v * P::N), d);
#pragma unroll
                for (int e = 0; e < P::N; ++e) {
                    s[e] = s[e] + d[e];
                }
                rf_store16(hw + v * P::N, P::pack(s));
            }
        }
        rf_grid_arrive(activated);
        rf_grid_wait(activated, grid, a.timeout);
    };
    rf_qmv_products down_products = {};
    down_products.w[0] = a.down;
    down_products.y[0] = a.y;
    down_products.rows[0] = a.hidden;
    rf_qmvm<F, T, 1, F::STAGES_B1>(down_products, static_cast<const T*>(a.act), a.ffn, 1,
                                   rf_pmlp_place(a.groups, loop_shared, activation));

    // The last block out puts the counters back for the next launch.
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(exits, 1u) == grid - 1) {
            *stored = 0;
            *activated = 0;
            *exits = 0;
            __threadfence();
        }
    }
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
