// rocmforge_mma.h: NVIDIA matrix-core and asynchronous-copy primitives (sm_80+), shared by the
// kernels that have a matrix-core path (flash_mma.hip, flash_wgmma.hip, mxfp.hip,
// mxfp4_tiled.hip, quant_gemm_wgmma.hip). Everything here exists only where RF_MMA_SYNC is 1. A file of NVIDIA
// matrix-core kernels alone (flash_mma.hip) is built for those targets only; one that mixes them
// with portable kernels compiles each matrix-core body under `#if RF_MMA_SYNC` and
// RF_MMA_UNAVAILABLE() (a trap: the launchers never pick such an entry there) everywhere else,
// so its portable kernels are built and tested on every target.

#ifndef ROCMFORGE_MMA_H
#define ROCMFORGE_MMA_H

#include "rocmforge.h"

// RF_EMU_MMA_SYNC: the CPU emulator's build of these kernels (crates/rocm-kernels/tests/amd_emu,
// target `sm80`), which supplies its own primitives below; never defined for a GPU.
#if (RF_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || defined(RF_EMU_MMA_SYNC)
#define RF_MMA_SYNC 1
#else
#define RF_MMA_SYNC 0
#endif

#if RF_PLATFORM_AMD
#define RF_MMA_UNAVAILABLE() __builtin_trap()
#else
#define RF_MMA_UNAVAILABLE() __trap()
#endif

#if RF_MMA_SYNC && defined(RF_EMU_MMA_SYNC)
#include "emu_mma_sync.h"
#elif RF_MMA_SYNC

RF_DEVICE unsigned rf_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, asynchronously; `bytes` = 0 zero-fills without reading.
RF_DEVICE void rf_cp_async16(void* smem, const void* gmem, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(rf_smem_addr(smem)), "l"(gmem), "r"(bytes));
}

// Weight streams: L2 evict-first. A decode step reads every weight once, and at 8B shapes a
// layer's weights (116-232 MB) are 2-5 times the L2, so plain loads let them push out what the
// step's small kernels read next: their code, the KV cache, the activations, which then come
// from DRAM every layer (docs/model.md, "Where a batch-1 layer's time goes": q4_K's one-vector
// loop with this policy made a Q4_K layer ~7 us faster at batch 1). An evict-first
// line is still cached, so a weight that fits with room to spare keeps its reuse.
typedef unsigned long long rf_l2_policy;
RF_DEVICE rf_l2_policy rf_l2_evict_first() {
    rf_l2_policy policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
// 16 bytes of read-only global memory (ld.global.nc, as __ldg) with an L2 policy.
RF_DEVICE uint4 rf_ldg16_policy(const void* gmem, rf_l2_policy policy) {
    uint4 v;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(gmem), "l"(policy));
    return v;
}

// rf_cp_async16 with an L2 policy, where the compiler gets it right. ptxas before 13.4 folds
// a cp.async's policy into the copy's descriptor registers and then drops their definition:
// the LDGSTS names uniform registers nothing writes, and the kernel faults with an illegal
// instruction (mxfp.hip's and mxfp4_tiled.hip's matrix-core kernels did, built by nvcc 13.0 for
// sm_90a; the SASS of every cp.async kernel here shows it). Reported against 13.1-13.3 as
// well and fixed in 13.4.59; ptxas 13.4.92 writes the registers. Older compilers get the plain
// copy: the same bytes, without the policy.
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ * 100 + __CUDACC_VER_MINOR__ >= 1304
#define RF_CP_ASYNC_POLICY 1
#else
#define RF_CP_ASYNC_POLICY 0
#endif
RF_DEVICE void rf_cp_async16_policy(void* smem, const void* gmem, int bytes, rf_l2_policy policy) {
#if RF_CP_ASYNC_POLICY
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(rf_smem_addr(smem)),
                 "l"(gmem), "r"(bytes), "l"(policy));
#else
    (void)policy;
    rf_cp_async16(smem, gmem, bytes);
#endif
}

RF_DEVICE void rf_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> RF_DEVICE void rf_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

RF_DEVICE void rf_ldmatrix_x4(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(rf_smem_addr(smem)));
}
RF_DEVICE void rf_ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(rf_smem_addr(smem)));
}

// D (16 x 8, f32) += A (16 x 16) * B (16 x 8), inputs f16 or bf16 (PTX type `ty`). Packing
// results back into pairs is rf_pack2_bits16<T> (rocmforge.h).
template <typename T> struct rf_mma;
#define RF_MMA_SPECIALISATION(T, ty)                                                                    \
    template <> struct rf_mma<T> {                                                                      \
        static RF_DEVICE void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {    \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ty "." ty ".f32 {%0, %1, %2, %3}, "   \
                         "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                             \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                               \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                \
        }                                                                                               \
    };
RF_MMA_SPECIALISATION(__half, "f16")
RF_MMA_SPECIALISATION(rf_bf16, "bf16")
#undef RF_MMA_SPECIALISATION

#endif // RF_MMA_SYNC

#endif // ROCMFORGE_MMA_H
