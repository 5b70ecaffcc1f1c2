// rocmforge.h: the one portability header every kernels/*.hip source includes.
//
// The same source is compiled by hipcc for AMD GPUs and by `nvcc -x cu` for NVIDIA GPUs.
// HIP's own NVIDIA headers wrap the CUDA runtime and do not build against current CUDA, so on
// NVIDIA this header maps the handful of HIP-isms the kernels use straight onto CUDA instead.
// Kernels use only what is defined here (plus builtins common to both: threadIdx, blockIdx,
// blockDim, gridDim, __syncthreads, __shared__), which keeps the platform split in one file.
//
// Platform-specific fast paths (MFMA/WMMA on AMD, mma.sync/wgmma on NVIDIA) go behind
// `#if RF_PLATFORM_AMD` / `#if RF_PLATFORM_NVIDIA` with a portable fallback that always compiles.

#ifndef ROCMFORGE_H
#define ROCMFORGE_H

// clang in HIP mode defines __HIP__; check it first because clang's CUDA mode also defines
// __CUDACC__.
#if defined(__HIP__)
#define RF_PLATFORM_AMD 1
#define RF_PLATFORM_NVIDIA 0
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#elif defined(__CUDACC__)
#define RF_PLATFORM_AMD 0
#define RF_PLATFORM_NVIDIA 1
#include <cuda_runtime.h>
// cuda_fp16.h includes CCCL's <nv/target>, a separate package in NVIDIA's pip wheels: say so
// instead of failing deep inside the CUDA headers.
#if defined(__has_include)
#if !__has_include(<nv/target>)
#error "rocmforge.h: cuda_fp16.h needs CCCL's <nv/target>: install the toolkit's CCCL (pip: nvidia-cuda-cccl)"
#endif
#endif
#include <cuda_fp16.h>
#else
#error "rocmforge.h: compile with hipcc (AMD) or nvcc -x cu (NVIDIA)"
#endif

// Kernels are looked up by name (hipModuleGetFunction / cuModuleGetFunction): no C++ mangling.
#define RF_KERNEL extern "C" __global__

// Small device helpers are always inlined; both compilers spell it __forceinline__.
#define RF_DEVICE __device__ __forceinline__

// ---------------------------------------------------------------------------------------------
// Warps / wavefronts
// ---------------------------------------------------------------------------------------------

// Threads per warp (NVIDIA: 32) or wavefront (AMD: 64 on CDNA, 32 or 64 on RDNA). Always ask,
// never assume: the same source runs on both widths.
RF_DEVICE int rf_warp_size() { return warpSize; }

// Lane index of this thread inside its warp/wavefront (assumes 1-D blocks, as all our kernels use).
RF_DEVICE int rf_lane_id() { return (int)(threadIdx.x % (unsigned int)warpSize); }

// Butterfly exchange with lane (lane ^ lane_mask). CUDA requires the _sync form with a member mask;
// all lanes participate in our reductions. HIP has no masks: its wavefront executes as a whole.
RF_DEVICE float rf_shfl_xor(float v, int lane_mask) {
#if RF_PLATFORM_NVIDIA
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#else
    return __shfl_xor(v, lane_mask);
#endif
}

RF_DEVICE int rf_shfl_xor(int v, int lane_mask) {
#if RF_PLATFORM_NVIDIA
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#else
    return __shfl_xor(v, lane_mask);
#endif
}

// Value from lane (lane + delta); lanes past the end of the warp get their own value back.
RF_DEVICE float rf_shfl_down(float v, unsigned int delta) {
#if RF_PLATFORM_NVIDIA
    return __shfl_down_sync(0xffffffffu, v, delta);
#else
    return __shfl_down(v, delta);
#endif
}

RF_DEVICE int rf_shfl_down(int v, unsigned int delta) {
#if RF_PLATFORM_NVIDIA
    return __shfl_down_sync(0xffffffffu, v, delta);
#else
    return __shfl_down(v, delta);
#endif
}

// The widest warp a platform has (RF_WARP_LIMIT), and the width at run time: a constant 32 on
// NVIDIA, so loops bounded by it unroll fully; asked on AMD (64 on CDNA, 32 or 64 on RDNA).
#if RF_PLATFORM_NVIDIA
#define RF_WARP_LIMIT 32
RF_DEVICE unsigned int rf_warp_width() { return 32u; }
#else
#define RF_WARP_LIMIT 64
RF_DEVICE unsigned int rf_warp_width() { return (unsigned int)rf_warp_size(); }
#endif

// Sum over the whole warp/wavefront (xor butterflies: every lane gets the same bits). One source
// serves 32- and 64-wide hardware; on NVIDIA the loop is unrolled with no run-time test.
RF_DEVICE float rf_warp_sum(float v) {
#pragma unroll
    for (int mask = RF_WARP_LIMIT / 2; mask > 0; mask /= 2) {
        if ((unsigned int)mask < rf_warp_width()) {
            v += rf_shfl_xor(v, mask);
        }
    }
    return v;
}

// Maximum over the whole warp/wavefront; every lane gets the result.
RF_DEVICE float rf_warp_max(float v) {
#pragma unroll
    for (int mask = RF_WARP_LIMIT / 2; mask > 0; mask /= 2) {
        if ((unsigned int)mask < rf_warp_width()) {
            v = fmaxf(v, rf_shfl_xor(v, mask));
        }
    }
    return v;
}

// ---------------------------------------------------------------------------------------------
// Indexing. 64-bit throughout: blockIdx.x * blockDim.x overflows 32 bits for tensors with more
// than 2^32 elements, and a grid-stride loop needs 64-bit arithmetic to terminate for any n.
// ---------------------------------------------------------------------------------------------

typedef unsigned long long rf_u64;

// (q, r) = (a / b, a % b), in 32 bits when both fit (a 64-bit division is a long subroutine).
RF_DEVICE void rf_divmod_u64(rf_u64 a, rf_u64 b, rf_u64* q, rf_u64* r) {
    if (((a | b) >> 32) == 0) {
        const unsigned int q32 = (unsigned int)a / (unsigned int)b;
        *q = q32;
        *r = a - (rf_u64)q32 * b;
    } else {
        *q = a / b;
        *r = a - *q * b;
    }
}

// Global index of this thread in a 1-D grid.
RF_DEVICE rf_u64 rf_global_thread_id() {
    return (rf_u64)blockIdx.x * (rf_u64)blockDim.x + (rf_u64)threadIdx.x;
}

// Total threads in a 1-D grid: the step of a grid-stride loop.
RF_DEVICE rf_u64 rf_grid_stride() { return (rf_u64)gridDim.x * (rf_u64)blockDim.x; }

// Visits every i in [0, n) exactly once across the grid, whatever the launch size:
//     RF_GRID_STRIDE_LOOP(i, n) { out[i] = ...; }
#define RF_GRID_STRIDE_LOOP(i, n) \
    for (rf_u64 i = rf_global_thread_id(), rf_stride_##i = rf_grid_stride(); i < (rf_u64)(n); i += rf_stride_##i)

// ---------------------------------------------------------------------------------------------
// f16: IEEE binary16 as __half (hip_fp16.h / cuda_fp16.h); both convert round-to-nearest-even.
// ---------------------------------------------------------------------------------------------

RF_DEVICE float rf_half_to_float(__half h) { return __half2float(h); }
RF_DEVICE __half rf_float_to_half(float f) { return __float2half(f); }

// ---------------------------------------------------------------------------------------------
// bf16: stored as raw bits in an unsigned short. The vendor bf16 types differ between HIP versions
// and CUDA (and HIP's older one truncates), so the conversions are written here once and give the
// same bits on both platforms and in the Rust CPU references (`half::bf16`).
// ---------------------------------------------------------------------------------------------

typedef unsigned short rf_bf16;

// Exact: a bf16 is the top half of an f32.
RF_DEVICE float rf_bf16_to_float(rf_bf16 b) { return __uint_as_float((unsigned int)b << 16); }

// Round to nearest, ties to even. NaN stays NaN (quieted, sign kept): rounding could otherwise
// carry a NaN whose payload sits in the low bits into infinity. Overflow rounds to infinity.
RF_DEVICE rf_bf16 rf_float_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (rf_bf16)((u >> 16) | 0x0040u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (rf_bf16)(u >> 16);
}

// ---------------------------------------------------------------------------------------------
// Storage types: kernels are written once as templates over the element type T (float, __half
// or rf_bf16), load to float, compute in float, and store back. RF_FOR_EACH_DTYPE(X) expands
// X(suffix, type) for each, to instantiate `extern "C"` entry points named `..._f32`, `..._f16`,
// `..._bf16` (the Rust side's `Dtype::NAME`).
// ---------------------------------------------------------------------------------------------

RF_DEVICE float rf_to_float(float v) { return v; }
RF_DEVICE float rf_to_float(__half v) { return rf_half_to_float(v); }
RF_DEVICE float rf_to_float(rf_bf16 v) { return rf_bf16_to_float(v); }

template <typename T> RF_DEVICE T rf_from_float(float v);
template <> RF_DEVICE float rf_from_float<float>(float v) { return v; }
template <> RF_DEVICE __half rf_from_float<__half>(float v) { return rf_float_to_half(v); }
template <> RF_DEVICE rf_bf16 rf_from_float<rf_bf16>(float v) { return rf_float_to_bf16(v); }

#define RF_FOR_EACH_DTYPE(X) X(f32, float) X(f16, __half) X(bf16, rf_bf16)

// ---------------------------------------------------------------------------------------------
// 16-byte vectors. Memory-bound kernels move data as uint4: 16 bytes, 4 f32 or 8 f16/bf16, one
// 128-bit load or store per thread on both platforms. Only on 16-byte-aligned addresses: check
// the base pointers and row strides first (rf_is_aligned16) and keep a scalar path for
// everything else. The helpers below, from the rawest up: one 16-byte access and its packing
// (rf_load16, rf_store16, rf_pack16), one access of V elements as floats (rf_access), K
// consecutive elements (rf_load_n, rf_store_n), and K elements that may run past the end of a
// row (rf_load_bounded, rf_store_bounded). Kernels use these rather than their own copies.
// ---------------------------------------------------------------------------------------------

RF_DEVICE bool rf_is_aligned16(const void* p) { return ((rf_u64)p & 15ull) == 0; }

RF_DEVICE uint4 rf_load16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
RF_DEVICE void rf_store16(void* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }

// The 16-bit storage types as raw bit patterns (little-endian: element 2k is the low half of
// 32-bit word k of a vector).
template <typename T> RF_DEVICE float rf_bits16_to_float(unsigned int bits);
template <> RF_DEVICE float rf_bits16_to_float<__half>(unsigned int bits) {
    return __half2float(__ushort_as_half((unsigned short)bits));
}
template <> RF_DEVICE float rf_bits16_to_float<rf_bf16>(unsigned int bits) {
    return rf_bf16_to_float((rf_bf16)bits);
}
// Both 16-bit elements of a 32-bit word widened to f32, f[0] from the low half. Exact. For bf16
// each is one instruction: a shift for the low half, a mask for the high one (a bf16 is the top
// half of an f32, so the high half needs no shift at all).
template <typename T> RF_DEVICE void rf_unpack2_bits16(unsigned int w, float* f);
template <> RF_DEVICE void rf_unpack2_bits16<__half>(unsigned int w, float* f) {
    f[0] = rf_bits16_to_float<__half>(w & 0xffffu);
    f[1] = rf_bits16_to_float<__half>(w >> 16);
}
template <> RF_DEVICE void rf_unpack2_bits16<rf_bf16>(unsigned int w, float* f) {
    f[0] = __uint_as_float(w << 16);
    f[1] = __uint_as_float(w & 0xffff0000u);
}
template <typename T> RF_DEVICE unsigned int rf_float_to_bits16(float f);
template <> RF_DEVICE unsigned int rf_float_to_bits16<__half>(float f) {
    return (unsigned int)__half_as_ushort(__float2half(f));
}
template <> RF_DEVICE unsigned int rf_float_to_bits16<rf_bf16>(float f) {
    return (unsigned int)rf_float_to_bf16(f);
}

// Two floats rounded (nearest, ties to even) to T and packed into one 32-bit word, `lo` in the low
// half. On NVIDIA sm_80+ this is one `cvt.rn.{f16,bf16}x2.f32` instead of two conversions and a
// merge (bf16 has no scalar hardware conversion before sm_90 at all: the software rounding above
// costs ~6 instructions an element, which 16-bit memory-bound kernels feel). Finite values and
// infinities give the same bits as rf_float_to_bits16 on every platform; a NaN stays a NaN, but
// the hardware bf16 conversion returns the canonical NaN 0x7fff, so its sign and payload are not
// kept there.
template <typename T> RF_DEVICE unsigned int rf_pack2_bits16(float lo, float hi);
template <> RF_DEVICE unsigned int rf_pack2_bits16<__half>(float lo, float hi) {
#if RF_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned int w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
#else
    return rf_float_to_bits16<__half>(lo) | (rf_float_to_bits16<__half>(hi) << 16);
#endif
}
template <> RF_DEVICE unsigned int rf_pack2_bits16<rf_bf16>(float lo, float hi) {
#if RF_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned int w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
#else
    return rf_float_to_bits16<rf_bf16>(lo) | (rf_float_to_bits16<rf_bf16>(hi) << 16);
#endif
}

// rf_pack16<T>: N elements of T in 16 bytes. unpack(v, f) widens them to f[0..N) in memory
// order, one instruction an element; pack(f) rounds f[0..N) to T exactly as rf_from_float<T>
// does and packs them. The 16-bit types also take one 32-bit word at a time (unpack_word,
// pack_word: two elements).
template <typename T> struct rf_pack16;

template <> struct rf_pack16<float> {
    static constexpr int N = 4;
    static RF_DEVICE void unpack(uint4 v, float* f) {
        f[0] = __uint_as_float(v.x);
        f[1] = __uint_as_float(v.y);
        f[2] = __uint_as_float(v.z);
        f[3] = __uint_as_float(v.w);
    }
    static RF_DEVICE uint4 pack(const float* f) {
        uint4 v;
        v.x = __float_as_uint(f[0]);
        v.y = __float_as_uint(f[1]);
        v.z = __float_as_uint(f[2]);
        v.w = __float_as_uint(f[3]);
        return v;
    }
};

template <typename T> struct rf_pack16_half_width {
    static constexpr int N = 8;
    static RF_DEVICE void unpack_word(unsigned int w, float* f) { rf_unpack2_bits16<T>(w, f); }
    static RF_DEVICE unsigned int pack_word(const float* f) { return rf_pack2_bits16<T>(f[0], f[1]); }
    static RF_DEVICE void unpack(uint4 v, float* f) {
        unpack_word(v.x, f);
        unpack_word(v.y, f + 2);
        unpack_word(v.z, f + 4);
        unpack_word(v.w, f + 6);
    }
    static RF_DEVICE uint4 pack(const float* f) {
        uint4 v;
        v.x = pack_word(f);
        v.y = pack_word(f + 2);
        v.z = pack_word(f + 4);
        v.w = pack_word(f + 6);
        return v;
    }
};
template <> struct rf_pack16<__half> : rf_pack16_half_width<__half> {};
template <> struct rf_pack16<rf_bf16> : rf_pack16_half_width<rf_bf16> {};

// Load/store of V consecutive elements as floats: V = rf_pack16<T>::N through one 16-byte access
// (the address must be 16-byte aligned), V = 1 through a plain scalar access. Kernels pick one
// at run time from the alignment of their pointers and strides. load_raw + unpack split a load,
// so that many loads can be in flight in few registers before any is widened; pack +
// store_raw split a store the same way (pack rounds as store does).
template <typename T, bool VECTOR> struct rf_access;

template <typename T> struct rf_access<T, true> {
    static constexpr int V = rf_pack16<T>::N;
    typedef uint4 Raw;
    static RF_DEVICE Raw load_raw(const T* p) { return rf_load16(p); }
    static RF_DEVICE void unpack(Raw r, float* f) { rf_pack16<T>::unpack(r, f); }
    static RF_DEVICE void load(const T* p, float* f) { rf_pack16<T>::unpack(rf_load16(p), f); }
    static RF_DEVICE void store(T* p, const float* f) { rf_store16(p, rf_pack16<T>::pack(f)); }
    static RF_DEVICE Raw pack(const float* f) { return rf_pack16<T>::pack(f); }
    static RF_DEVICE void store_raw(T* p, Raw r) { rf_store16(p, r); }
};

template <typename T> struct rf_access<T, false> {
    static constexpr int V = 1;
    typedef T Raw;
    static RF_DEVICE Raw load_raw(const T* p) { return *p; }
    static RF_DEVICE void unpack(Raw r, float* f) { f[0] = rf_to_float(r); }
    static RF_DEVICE void load(const T* p, float* f) { f[0] = rf_to_float(*p); }
    static RF_DEVICE void store(T* p, const float* f) { *p = rf_from_float<T>(f[0]); }
    static RF_DEVICE Raw pack(const float* f) { return rf_from_float<T>(f[0]); }
    static RF_DEVICE void store_raw(T* p, Raw r) { *p = r; }
};

// K consecutive elements p[0..K) as floats, and back: K / V accesses of rf_access<T, VECTOR> (K
// a multiple of V; when VECTOR, p 16-byte aligned).
template <typename T, int K, bool VECTOR> RF_DEVICE void rf_load_n(const T* p, float* f) {
    typedef rf_access<T, VECTOR> A;
    static_assert(K % A::V == 0, "vector accesses move 16 bytes each");
#pragma unroll
    for (int v = 0; v < K / A::V; ++v) {
        A::load(p + v * A::V, f + v * A::V);
    }
}

template <typename T, int K, bool VECTOR> RF_DEVICE void rf_store_n(T* p, const float* f) {
    typedef rf_access<T, VECTOR> A;
    static_assert(K % A::V == 0, "vector accesses move 16 bytes each");
#pragma unroll
    for (int v = 0; v < K / A::V; ++v) {
        A::store(p + v * A::V, f + v * A::V);
    }
}

// The K elements base[i .. i + K) of a row that ends at `end`, for a thread that may straddle the
// end: f[e] = base[i + e] as a float below `end`; elements at or past it are not read and get
// `fill`. 16-byte accesses (rf_load_n) when `vector` (base + i 16-byte aligned, K a multiple of
// rf_pack16<T>::N) and all K lie below `end`; a scalar load per element otherwise. I is the
// index type (int or unsigned int): the bounds are compared in it.
template <typename T, int K, typename I>
RF_DEVICE void rf_load_bounded(const T* base, I i, I end, bool vector, float fill, float* f) {
    if (vector && i + K <= end) {
        rf_load_n<T, K, true>(base + i, f);
    } else {
#pragma unroll
        for (int e = 0; e < K; ++e) {
            f[e] = (i + e < end) ? rf_to_float(base[i + e]) : fill;
        }
    }
}

// base[i + e] = f[e] for the elements of base[i .. i + K) below `end`, as rf_load_bounded reads
// them.
template <typename T, int K, typename I>
RF_DEVICE void rf_store_bounded(T* base, I i, I end, bool vector, const float* f) {
    if (vector && i + K <= end) {
        rf_store_n<T, K, true>(base + i, f);
    } else {
#pragma unroll
        for (int e = 0; e < K; ++e) {
            if (i + e < end) {
                base[i + e] = rf_from_float<T>(f[e]);
            }
        }
    }
}

#endif // ROCMFORGE_H
