// rocmforge_reduce.h: reductions over a whole block, shared by the kernels that reduce a row in
// one block (rmsnorm, softmax).
//
// Every one has the same shape: each warp reduces its lanes with xor butterflies (rf_warp_sum,
// rf_warp_max: every lane gets the same bits), lane 0 of each warp stores the warp's result in
// scratch[warp] (rf_block_publish, one barrier), and every thread then reduces the warps' results
// in the same order, so every thread of the block gets the same bits. What differs is the value
// (a sum; a softmax's (max, sum) pair) and the order of that last step, which each function
// states: the order is part of the result's bits, so a kernel picks the function whose order it
// was written (and tested) with. blockDim.x must be a whole number of warps, so that every lane
// of every warp takes part in the shuffles; at most 1024 threads (scratch: 32 entries).

#ifndef ROCMFORGE_REDUCE_H
#define ROCMFORGE_REDUCE_H

#include "rocmforge.h"

// Most warps a block can have: 1024 threads of at least 32 lanes (the size of every scratch).
#define RF_BLOCK_MAX_WARPS 32

// f32 -inf, from its bits.
RF_DEVICE float rf_neg_inf() { return __int_as_float((int)0xff800000u); }

// 2^x: the hardware exponential (relative error about 2^-22; subnormal results flush to 0,
// exp2(0) = 1 and exp2(-inf) = 0 exactly).
RF_DEVICE float rf_fast_exp2(float x) {
#if RF_PLATFORM_NVIDIA
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

// Warps in the block.
RF_DEVICE unsigned int rf_block_warps() { return blockDim.x / rf_warp_width(); }

// Lane 0 of each warp stores `v` (its warp's result) in scratch[warp]; then one barrier, after
// which every thread may read scratch[0 .. rf_block_warps()).
template <typename P> RF_DEVICE void rf_block_publish(P v, P* scratch) {
    if (threadIdx.x % rf_warp_width() == 0) {
        scratch[threadIdx.x / rf_warp_width()] = v;
    }
    __syncthreads();
}

// Sum of `v` over the block; every thread gets it. Order: the warps' sums added one by one in
// warp order, starting from 0. `scratch` holds one float per warp and must not be written again
// until every thread has read it (a caller reducing again alternates two).
RF_DEVICE float rf_block_sum(float v, float* scratch) {
    rf_block_publish(rf_warp_sum(v), scratch);
    const unsigned int warps = rf_block_warps();
    float total = 0.0f;
    for (unsigned int w = 0; w < warps; ++w) {
        total += scratch[w];
    }
    return total;
}

// Softmax partials: m, the maximum of some logits t, and s, the sum of exp2((t - m) * c) over
// them.
struct rf_max_sum {
    float m;
    float s;
};

// The factor exp2((m - to) * c) that moves a sum taken against maximum m to maximum to >= m;
// 1 when m == to (also when both are -inf: an empty part stays 0, a NaN part stays NaN).
RF_DEVICE float rf_exp2_rescale(float m, float to, float c) {
    return m == to ? 1.0f : rf_fast_exp2((m - to) * c);
}

// Combines every thread's (m, s) into the block's (M, S); every thread gets the same bits. Each
// warp takes its maximum, rescales its sums to it and adds them (rf_warp_sum's order); a block
// of one warp stops there, with no barrier. Otherwise the warps' pairs meet through `scratch`
// (one pair per warp, used once per block: one barrier) and every aligned group of G lanes (G:
// the power of two >= warps; warps <= 1024 / warp width <= warp width, so G <= the warp width)
// reduces all of them with xor butterflies that stay inside the group, masks 1, 2, ..., G / 2 in
// that order: the maximum, then the sum of each pair's s rescaled to it.
RF_DEVICE rf_max_sum rf_block_max_sum(float m, float s, float c, float2* scratch) {
    const float w = rf_warp_max(m);
    s = rf_warp_sum(s * rf_exp2_rescale(m, w, c));
    const unsigned int warps = rf_block_warps();
    if (warps == 1) {
        return rf_max_sum{w, s};
    }
    rf_block_publish(make_float2(w, s), scratch);
    unsigned int groups = 2;
    while (groups < warps) {
        groups *= 2;
    }
    const unsigned int i = (threadIdx.x % rf_warp_width()) & (groups - 1);
    const float2 q = i < warps ? scratch[i] : make_float2(rf_neg_inf(), 0.0f);
    float top = q.x;
#pragma unroll
    for (int o = 1; o < RF_WARP_LIMIT; o *= 2) {
        if ((unsigned int)o < groups) {
            top = fmaxf(top, rf_shfl_xor(top, o));
        }
    }
    float sum = q.y * rf_exp2_rescale(q.x, top, c);
#pragma unroll
    for (int o = 1; o < RF_WARP_LIMIT; o *= 2) {
        if ((unsigned int)o < groups) {
            sum += rf_shfl_xor(sum, o);
        }
    }
    return rf_max_sum{top, sum};
}

#endif // ROCMFORGE_REDUCE_H
