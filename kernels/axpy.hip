// rf_axpy_f32: y[i] = a * x[i] + y[i] for every i in [0, n) (BLAS saxpy, unit strides).

#include "rocmforge.h"

// Grid-stride, so any launch size covers any n (including n = 0 and n >= 2^32). x and y may not
// alias partially; full aliasing (x == y) is fine since each element is read before it is written.
RF_KERNEL void rf_axpy_f32(float a, const float* x, float* y, unsigned long long n) {
    RF_GRID_STRIDE_LOOP(i, n) { y[i] = fmaf(a, x[i], y[i]); }
}
