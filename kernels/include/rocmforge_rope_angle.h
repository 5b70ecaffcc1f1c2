// rocmforge_rope_angle.h: a rotary pair's angle, cos and sin, as kernels/rope.hip forms them, for
// any kernel that rotates q and k inside a larger step (Rope::whole_head_table gives it the
// table), so that its rotations have rope.hip's bits.

#ifndef ROCMFORGE_ROPE_ANGLE_H
#define ROCMFORGE_ROPE_ANGLE_H

#include "rocmforge.h"

// What a rotation by an invalid position turns to: NaN makes the error visible.
RF_DEVICE float rf_rope_nan() { return __int_as_float(0x7fc00000); }

// cos and sin of p * inv_freq: product and reduction to [-pi, pi] in f64, then f32 sincosf.
RF_DEVICE void rf_rope_cos_sin(int p, double inv_freq, float* c, float* s) {
    const double angle = (double)p * inv_freq;
    const double turns = rint(angle * 0.15915494309189535); // 1 / (2 pi)
    // 2 pi = TWO_PI_HI + TWO_PI_LO to about 1e-32: the reduction is exact to f64 rounding.
    double r = fma(-turns, 6.283185307179586, angle);
    r = fma(-turns, 2.4492935982947064e-16, r);
    sincosf((float)r, s, c);
}

#endif // ROCMFORGE_ROPE_ANGLE_H
