// rocmforge_rms.h: an RMSNorm row's arithmetic, shared by kernels/rmsnorm.hip and the product
// kernels that apply the norm, or its residual add, themselves (mxfp4_tiled.hip's normed and
// residual launches), so that each gives the bits the norm's kernel gives:
//
//   the residual add:  s = round_T(x + residual)                     (rf_rms_round)
//   the row's factor:  scale = 1 / sqrt(sum(s^2) * (1 / cols) + eps)  (rf_rms_scale; the sum of
//                                                                      squares in the caller's order)
//   each element:      s * scale * weight, in f32, in that order, rounded to T once (each kernel
//                      writes this product itself: as a function here it changed rmsnorm.hip's
//                      instruction schedule)

#ifndef ROCMFORGE_RMS_H
#define ROCMFORGE_RMS_H

#include "rocmforge.h"

// The value a T store followed by a load gives back.
template <typename T> RF_DEVICE float rf_rms_round(float v) { return rf_to_float(rf_from_float<T>(v)); }

RF_DEVICE float rf_rms_scale(float sumsq, float inv_cols, float eps) { return rsqrtf(sumsq * inv_cols + eps); }

#endif // ROCMFORGE_RMS_H
