// rocmforge_x16.h: x staged once a block in shared memory as f16, for the matrix-core
// matrix-vector kernels whose weights decode to f16 more cheaply than to bf16
// (mxfp4_tiled.hip's, whose bf16 launches then run the f16 decode and f16 mma).
//
// rf_x16<rf_bf16>::stage(x, xs, xf, k): the block's threads copy x (k elements, k % 32 == 0,
// 16-byte aligned) into xs as f16, each 32-element block scaled by the power of two 2^s that
// puts its largest finite magnitude in [2^14, 2^15), s at most 126 (so that the factor below is
// a normal f32; a block of zeros takes s = 0), with xf[b] = 2^-s (SCALED): a
// block's sum over the scaled x times xf[b] is the sum over x itself, exactly. Exact for every
// element of at least 2^(e - 31), e the exponent of the block's largest finite magnitude (8
// significant bits fit above f16's subnormal spacing; for blocks below 2^-112, where s stops at
// 126, a narrower window); a smaller element is rounded to a multiple of 2^(-24 - s), an error of
// at most 2^(-25 - s) times its weight (docs/kernels/mxfp.md, "bf16 x as scaled f16").
// Infinities and NaNs keep their class.
// The caller's barrier publishes xs and xf.

#ifndef ROCMFORGE_X16_H
#define ROCMFORGE_X16_H

#include "rocmforge.h"

template <typename T> struct rf_x16;
template <> struct rf_x16<__half> {
    static constexpr bool SCALED = false; // f16 x is used as it is: nothing to stage
};
// The pieces of the rule, shared with the kernels that convert x a block at a time in
// registers (mxfp4_tiled.hip's several-vector kernel: four lanes a block, their maxima combined
// by shuffles). bf16 bits are ordered as the magnitudes: the largest finite one is the largest
// of the masked bits below the infinities'.
RF_DEVICE unsigned rf_x16_max_finite(unsigned w, unsigned m) {
    const unsigned lo = w & 0x7fffu, hi = (w >> 16) & 0x7fffu;
    m = lo < 0x7f80u && lo > m ? lo : m;
    return hi < 0x7f80u && hi > m ? hi : m;
}
// The scale s for a block whose largest finite magnitude has the bits m.
RF_DEVICE int rf_x16_shift(unsigned m) {
    const int e = (int)(m >> 7); // the biased exponent (0: a subnormal maximum)
    return m == 0 ? 0 : 141 - e < 126 ? 141 - e : 126;
}
// Two bf16 (a word) times 2^s as two f16. 2^s is a normal f32 for every s the rule gives
// (-113 ..= 126), and a product under f32's normal range is far under f16's, which rounds it to
// zero either way: one exact multiplication.
struct rf_x16_scaler {
    float s;
    RF_DEVICE explicit rf_x16_scaler(int shift) : s(__uint_as_float((unsigned)(127 + shift) << 23)) {}
    RF_DEVICE unsigned pack(unsigned w) const {
        return rf_pack2_bits16<__half>(__uint_as_float(w << 16) * s, __uint_as_float(w & 0xffff0000u) * s);
    }
};
// The factor 2^-s that takes a block's scaled sum back.
RF_DEVICE float rf_x16_factor(int s) { return __uint_as_float((unsigned)(127 - s) << 23); }
// The sum of a block's 32 staged f16 values (four 16-byte vectors, as stored) in element order,
// in f32: each value exact, the additions rounded in that order.
RF_DEVICE float rf_x16_sum(const uint4 (&o)[4]) {
    const unsigned* w = &o[0].x;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        sum += __half2float(__ushort_as_half((unsigned short)(w[i] & 0xffffu)));
        sum += __half2float(__ushort_as_half((unsigned short)(w[i] >> 16)));
    }
    return sum;
}

template <> struct rf_x16<rf_bf16> {
    static constexpr bool SCALED = true;
    // A thread a 32-element block: its largest finite magnitude, the scale, the f16 values and
    // the factor.
    static RF_DEVICE void stage(const rf_bf16* x, __half* xs, float* xf, rf_u64 k) {
        const unsigned blocks = (unsigned)(k / RF_QK);
        for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) {
            uint4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                v[u] = reinterpret_cast<const uint4*>(x)[4 * b + u];
            }
            stage_block(v, xs, xf, b);
        }
    }
    // Block b's 32 elements, v (as bf16 bits), into xs and xf; returns the block's sum over x
    // as staged (rf_x16_sum of its f16 values times the factor; a caller that drops it pays
    // nothing: the compiler removes it).
    static RF_DEVICE float stage_block(const uint4 (&v)[4], __half* xs, float* xf, unsigned b) {
        uint4 o[4];
        const float factor = convert_block(v, o);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            reinterpret_cast<uint4*>(xs)[4 * b + u] = o[u];
        }
        xf[b] = factor;
        return rf_x16_sum(o) * factor;
    }
    // A 32-element block, v (as bf16 bits), as the scaled f16 values o in registers (a thread
    // that holds a whole block: q8_0_tiled.hip's several-vector kernel); returns its factor.
    static RF_DEVICE float convert_block(const uint4 (&v)[4], uint4 (&o)[4]) {
        const unsigned* w = &v[0].x;
        unsigned m = 0;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            m = rf_x16_max_finite(w[i], m);
        }
        const int sc = rf_x16_shift(m);
        const rf_x16_scaler scaler(sc);
        unsigned* ow = &o[0].x;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            ow[i] = scaler.pack(w[i]);
        }
        return rf_x16_factor(sc);
    }
};

#endif // ROCMFORGE_X16_H
