// rocmforge_wgmma.h: Hopper warpgroup matrix multiply (wgmma.mma_async, sm_90a) and the
// mbarriers that hand shared-memory buffers between copying and computing warps, for the kernels
// that have a warpgroup path (flash_wgmma.hip, quant_gemm_wgmma.hip). Everything here exists only where RF_WGMMA is
// 1: SASS built for the arch-specific target sm_90a (`ROCMFORGE_NVIDIA_ARCHS` with `90a`, the
// default). Kernels built on it define their entry points only there; launchers look the entry
// up and take their mma.sync kernel where it is absent.
//
// A warpgroup is four consecutive warps (128 threads) that issue each wgmma together. D (64 x N,
// f32) is spread like four stacked mma.sync m16n8 accumulators: warp w of the group holds rows
// 16 w + g and 16 w + g + 8 (g = lane / 4), and d[j][0..1] / d[j][2..3] are those rows' columns
// 8 j + 2 (lane % 4) + {0, 1}. A from registers has the mma.sync m16n8k16 A layout for the warp's
// 16 rows. Operands in shared memory are read through 64-bit descriptors (rf_wgmma_desc) in the
// 128-byte swizzled layout: rows of 64 16-bit elements (128 bytes), the 16-byte chunk c of row r
// stored at chunk c ^ (r % 8), 8-row atoms 1024 bytes apart, 1024-byte aligned.
//
// The asynchronous contract: rf_wgmma_fence() before the first wgmma that reads registers written
// by ordinary instructions (A fragments, accumulators), rf_wgmma_commit() after a batch, and
// rf_wgmma_wait<0>() before the accumulators are read; rf_wgmma_reg_fence() then ties the
// registers to that point, so the compiler cannot move their reads above the wait. Shared memory
// written by ordinary stores or cp.async is made visible to wgmma by rf_fence_proxy_async() before
// the barrier that publishes it.

#ifndef ROCMFORGE_WGMMA_H
#define ROCMFORGE_WGMMA_H

#include "rocmforge_mma.h"

#if RF_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RF_WGMMA 1
#else
#define RF_WGMMA 0
#endif

#if RF_WGMMA

RF_DEVICE void rf_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
RF_DEVICE void rf_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> RF_DEVICE void rf_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
RF_DEVICE void rf_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int NT> RF_DEVICE void rf_wgmma_reg_fence(float (&d)[NT][4]) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
    }
}

// mbarrier (shared-memory arrival counter with a phase bit), for producer/consumer warps.
RF_DEVICE void rf_mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(rf_smem_addr(bar)), "r"(count) : "memory");
}
RF_DEVICE void rf_mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(rf_smem_addr(bar)) : "memory");
}
// One arrival on `bar` that also expects `bytes` more of asynchronous copies (rf_bulk_copy) in the
// current phase, which completes once every arrival and every expected byte are in.
RF_DEVICE void rf_mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(rf_smem_addr(bar)), "r"(bytes) : "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared by the TMA engine,
// counted on `bar` as they land (complete_tx).
RF_DEVICE void rf_bulk_copy(void* smem, const void* gmem, unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     rf_smem_addr(smem)),
                 "l"(gmem), "r"(bytes), "r"(rf_smem_addr(bar))
                 : "memory");
}
// A tensor map (CUDA's CUtensorMap; rocm_runtime::TensorMap), which a kernel takes by value as a
// `const __grid_constant__` parameter so that its address is the parameter's own.
struct __align__(64) rf_tensor_map {
    unsigned long long opaque[16];
};
// The box of the 2D tensor map `map` at (x, y) (x along rows: bytes for a map over bytes; y the
// row), global -> shared (128-byte aligned) by the TMA engine, counted on `bar` as it lands;
// whatever lies outside the tensor arrives as zeros.
RF_DEVICE void rf_tensor_copy_2d(void* smem, const rf_tensor_map* map, int x, int y, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                     rf_smem_addr(smem)),
                 "l"(map), "r"(x), "r"(y), "r"(rf_smem_addr(bar))
                 : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier counts the phase
// before its first, parity 1, as completed).
RF_DEVICE void rf_mbar_wait(unsigned long long* bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(rf_smem_addr(bar)), "r"(parity)
                     : "memory");
    }
}
// Barrier `id` (1-15; 0 is __syncthreads') of `count` threads, whole warps: a warpgroup's
// own barrier while other warps of the block go on.
RF_DEVICE void rf_named_barrier(unsigned id, unsigned count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Register budget of the executing warpgroup (all its warps must run it): copying warps give
// registers back, math warps take them. The sum over the block must fit the SM's 64 K.
template <int N> RF_DEVICE void rf_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> RF_DEVICE void rf_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// Descriptor of a 128-byte-swizzled operand at shared address `addr` (PTX ISA, "Matrix
// Descriptor Format"): start address, leading byte offset `lbo` (K-major: unused; MN-major: from
// one 64-element column block to the next) and stride byte offset `sbo` (from one 8-row atom to
// the next), each in 16-byte units, and mode 1 (128-byte swizzle) in bits 62-63.
RF_DEVICE rf_u64 rf_wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (rf_u64)((addr & 0x3FFFF) >> 4) | ((rf_u64)((lbo & 0x3FFFF) >> 4) << 16) |
           ((rf_u64)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// Byte offset of 16-byte chunk c (of a row's) of row r in a 128-byte-swizzled tile of ROWS rows
// stored as column blocks of 64 16-bit elements (ROWS * 128 bytes each).
template <int ROWS> RF_DEVICE unsigned rf_sw128_offset(int r, int c) {
    return (unsigned)((c / 8) * ROWS * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4));
}

// D (64 x N) = A B + (accumulate ? D : 0), K = 16, inputs f16 or bf16 (PTX type `ty`).
//   ss: A (64 x 16) and B (16 x N) both K-major in shared memory (descriptors a, b);
//   rs: A from registers, B in shared memory: N-major (a row of 16-bit values along N) at N = 64
//       and 128, K-major at N = 256.
// The operand lists are spelled out because inline assembly names each register, so only the
// shapes the kernels use exist: ss and rs at N = 64 (flash: S = Q K^T over a 64-key tile; O +=
// P V at head_dim 64), rs at N = 128 (flash: O += P V at head_dim 128) and rs at N = 256 with B
// K-major (quant_gemm_wgmma: decoded weight fragments times 256 activation rows).
template <typename T, int N> struct rf_wgmma;
#define RF_WGMMA_N64(T, ty) \
    template <> struct rf_wgmma<T, 64> {\
    static RF_DEVICE void ss(float (&d)[8][4], rf_u64 a, rf_u64 b, int accumulate) {\
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"\
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty " "\
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "\
                     "%32, %33, p, 1, 1, 0, 0;\n}\n"\
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])\
                     : "l"(a), "l"(b), "r"(accumulate));\
    }\
    static RF_DEVICE void rs(float (&d)[8][4], const unsigned (&a)[4], rf_u64 b, int accumulate) {\
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"\
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty " "\
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "\
                     "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"\
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])\
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));\
    }\
    };

#define RF_WGMMA_N128_RS(NAME, TRANS_B, ty) \
    static RF_DEVICE void NAME(float (&d)[16][4], const unsigned (&a)[4], rf_u64 b, int accumulate) {\
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"\
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." ty "." ty " "\
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "\
                     "{%64, %65, %66, %67}, %68, p, 1, 1, " TRANS_B ";\n}\n"\
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])\
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));\
    }

#define RF_WGMMA_N128(T, ty) \
    template <> struct rf_wgmma<T, 128> {\
    RF_WGMMA_N128_RS(rs, "1", ty)\
    };

#define RF_WGMMA_N256(T, ty) \
    template <> struct rf_wgmma<T, 256> {\
    static RF_DEVICE void rs(float (&d)[32][4], const unsigned (&a)[4], rf_u64 b, int accumulate) {\
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"\
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32." ty "." ty " "\
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "\
                     "{%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"\
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])\
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));\
    }\
    };

RF_WGMMA_N64(__half, "f16")
RF_WGMMA_N64(rf_bf16, "bf16")
RF_WGMMA_N128(__half, "f16")
RF_WGMMA_N128(rf_bf16, "bf16")
RF_WGMMA_N256(__half, "f16")
RF_WGMMA_N256(rf_bf16, "bf16")
#undef RF_WGMMA_N64
#undef RF_WGMMA_N128
#undef RF_WGMMA_N128_RS
#undef RF_WGMMA_N256

#endif // RF_WGMMA

#endif // ROCMFORGE_WGMMA_H
