// Stand-in for HIP's hip_runtime.h: compiles kernels/*.hip for the host, one fiber per GPU lane
// (../simt.h runs them). Only what kernels/include/rocmforge.h and the kernels the suites check
// use on AMD. The target is the __gfx*__ macro run.sh defines.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
// Block-shared variables: function statics, one copy for the block (blocks run one at a time).
// A suite whose kernels declare `extern __shared__` arrays (dynamic shared memory: `extern
// static` does not compile) defines EMU_EXTERN_SHARED and the arrays themselves.
#ifdef EMU_EXTERN_SHARED
#define __shared__
#else
#define __shared__ static
#endif
// (max threads) or (max threads, min blocks a CU): the kernels use both forms.
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct emu_dim3 {
    unsigned x, y, z;
};
extern emu_dim3 blockIdx, blockDim, gridDim;
// The lane running now (../simt.h): a value, not a variable the scheduler rewrites under the
// lanes, so that ThreadSanitizer sees no race in it.
emu_dim3 emu_thread_idx();
#define threadIdx (emu_thread_idx())
// The wavefront width of the launch being emulated (64 for MFMA; 32 or 64 for the portable
// kernels). A variable, as on current HIP, where warpSize is not a compile-time constant.
extern int warpSize;

void emu_syncthreads();
#define __syncthreads() emu_syncthreads()
// HIP's shuffles at their default width (warpSize): a source lane outside the wavefront gives
// the lane its own value.
float __shfl_xor(float v, int mask);
int __shfl_xor(int v, int mask);
float __shfl_down(float v, unsigned delta);
int __shfl_down(int v, unsigned delta);

inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    return u;
}

// HIP's integer intrinsics (as CUDA documents them, which HIP follows):
//   __byte_perm(x, y, s): byte n of the result is byte (s >> 4n) & 7 of the 8 bytes y:x (x the
//                         low four);
//   __funnelshift_l(lo, hi, n): the high word of hi:lo shifted left by n & 31;
//   __funnelshift_r(lo, hi, n): the low word of hi:lo shifted right by n & 31.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long xy = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int n = 0; n < 4; ++n) r |= (unsigned)((xy >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned n) {
    return (unsigned)((((unsigned long long)hi << 32 | lo) << (n & 31u)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned n) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (n & 31u));
}

// HIP's fast division and reciprocal square root (approximate on the GPU): correctly rounded
// here.
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return (float)(1.0 / std::sqrt((double)x)); }

struct uint2 {
    unsigned x, y;
};
struct uint4 {
    unsigned x, y, z, w;
};
struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

// IEEE binary16; conversions through _Float16 (round to nearest even, as the hardware).
struct __half {
    unsigned short bits;
};
inline float __half2float(__half h) {
    _Float16 f;
    std::memcpy(&f, &h.bits, 2);
    return (float)f;
}
inline __half __float2half(float x) {
    _Float16 f = (_Float16)x;
    __half h;
    std::memcpy(&h.bits, &f, 2);
    return h;
}
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }

// MFMA, implemented in ../emu.cpp from AMD's documented operand layouts. Each builtin is
// defined only for the targets that have the instruction, so a kernel that uses one elsewhere
// fails to compile here as it would with hipcc:
//   v_mfma_f32_16x16x16f16:      gfx908, gfx90a, gfx940-942, gfx950;
//   v_mfma_f32_16x16x16bf16_1k:  gfx90a, gfx940-942, gfx950 (CDNA3/4 name it v_mfma_f32_16x16x16_bf16);
//   v_mfma_f32_16x16x8bf16:      gfx908 and gfx90a only (CDNA3 kept only the _1k bf16 forms).
typedef float emu_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 emu_f16x4 __attribute__((ext_vector_type(4)));
typedef short emu_i16x4 __attribute__((ext_vector_type(4)));
typedef short emu_i16x2 __attribute__((ext_vector_type(2)));
emu_f32x4 emu_mfma_f32_16x16x16f16(emu_f16x4 a, emu_f16x4 b, emu_f32x4 c, int cbsz, int abid, int blgp);
emu_f32x4 emu_mfma_f32_16x16x16bf16_1k(emu_i16x4 a, emu_i16x4 b, emu_f32x4 c, int cbsz, int abid, int blgp);
emu_f32x4 emu_mfma_f32_16x16x8bf16(emu_i16x2 a, emu_i16x2 b, emu_f32x4 c, int cbsz, int abid, int blgp);

#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__) || defined(__gfx950__)
#define EMU_HAS_MFMA 1
#define __builtin_amdgcn_mfma_f32_16x16x16f16 emu_mfma_f32_16x16x16f16
#else
#define EMU_HAS_MFMA 0
#endif
#if EMU_HAS_MFMA && !defined(__gfx908__)
#define __builtin_amdgcn_mfma_f32_16x16x16bf16_1k emu_mfma_f32_16x16x16bf16_1k
#endif
#if defined(__gfx908__) || defined(__gfx90a__)
#define __builtin_amdgcn_mfma_f32_16x16x8bf16 emu_mfma_f32_16x16x8bf16
#endif
