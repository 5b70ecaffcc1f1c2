// rocmforge_silu.h: silu(g) * u as kernels/swiglu.hip computes it, shared with the kernels that
// apply SwiGLU in their epilogue (quant_matvec_mma.hip's gate-and-up loop), so both give the
// same bits.

#ifndef ROCMFORGE_SILU_H
#define ROCMFORGE_SILU_H

#include "rocmforge.h"

// Stable form: e = exp(-|g|) is never infinite, so very negative gates give their tiny true
// value instead of g / inf = -0 (expf(-g) overflows f32 for g < -88.7).
//
// exp2 of a rounded product and a fast division (2 ulp: the divisor 1 + e lies in [1, 2])
// instead of the precise expf and IEEE division: about 8 instructions an element instead of
// about 25. Error: rounding |g| * log2(e) moves the exponent by at most |g| * 2^-23.6, a
// relative error of 1.2e-6 in e at |g| = 20 (negative g: silu(g) = 2e-9 g), 1e-7 near |g| = 1, plus
// exp2's and the division's 2 ulps: well inside the tests' 1e-5 (f32) and two storage ulps.
RF_DEVICE float rf_silu_mul(float g, float u) {
    const float e = exp2f(-fabsf(g) * 1.44269504088896341f);
    const float num = g >= 0.0f ? g : g * e;
    return __fdividef(num, 1.0f + e) * u;
}

#endif // ROCMFORGE_SILU_H
