// rf_fill_f32: out[i] = value for every i in [0, n).

#include "rocmforge.h"

// Grid-stride, so any launch size covers any n (including n = 0 and n >= 2^32).
RF_KERNEL void rf_fill_f32(float* out, float value, unsigned long long n) {
    RF_GRID_STRIDE_LOOP(i, n) { out[i] = value; }
}
