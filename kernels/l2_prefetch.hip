// rf_l2_prefetch: asks the device to bring byte ranges into its last-level cache (L2 on NVIDIA,
// L2 and the Infinity Cache on AMD), and returns without waiting for them. A decode step runs
// kernels that barely touch DRAM (RoPE, the KV write, attention at a short context) between
// products that stream a weight each; asking for the next product's weight while they run puts
// the DRAM to work during them (docs/kernels/l2_prefetch.md). It reads nothing into results
// and writes nothing but, on AMD, the never-taken `never` store below; so an earlier kernel may
// still be writing what it asks for (the cache stays coherent: a hint, not a copy).
//
// Grid: any number of blocks of RF_L2_PREFETCH_THREADS threads; thread g of the grid takes the
// RF_L2_PREFETCH_PIECE-byte pieces g, g + threads, ... of each range in turn. A launch may be
// dependent (rocmforge_dependent_launch.h): its requests go out before its wait, and it lets
// the next kernel be scheduled before its own wait, since it has nothing that kernel needs.

#include "rocmforge.h"
#include "rocmforge_dependent_launch.h"
#include "rocmforge_l2_prefetch_abi.h"

// A cache line on every device this builds for (NVIDIA L2: 128 bytes, in 32-byte sectors;
// AMD CDNA and RDNA L2: 128 bytes).
#define RF_L2_PREFETCH_LINE 128

#if RF_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RF_L2_PREFETCH_BULK 1
#else
#define RF_L2_PREFETCH_BULK 0
#endif

// Asks for [p, p + n): one bulk request on sm_90+ (the TMA unit walks it; it needs 16-byte
// alignment and a multiple of 16 bytes, so the range is rounded inwards, never past its ends),
// one prefetch a line on older NVIDIA devices. Returns the xor of one word a line on AMD, which
// has no prefetch instruction before gfx12: the loads are the request, and the caller keeps
// their values alive so that the compiler cannot drop them.
RF_DEVICE unsigned rf_l2_prefetch_piece(const unsigned char* p, unsigned long long n) {
#if RF_L2_PREFETCH_BULK
    const unsigned long long start = ((unsigned long long)p + 15) & ~15ull;
    const unsigned long long end = ((unsigned long long)p + n) & ~15ull;
    if (end > start) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(start), "r"((unsigned)(end - start))
                     : "memory");
    }
    return 0;
#elif RF_PLATFORM_NVIDIA
    for (unsigned long long at = 0; at < n; at += RF_L2_PREFETCH_LINE) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + at));
    }
    return 0;
#else
    unsigned acc = 0;
    for (unsigned long long at = 0; at < n; at += RF_L2_PREFETCH_LINE) {
        acc ^= *(const unsigned char*)(p + at);
    }
    return acc;
#endif
}

// never: null in every launch; the kernel stores to it only if it is not (AMD's sink, above).
RF_KERNEL void __launch_bounds__(RF_L2_PREFETCH_THREADS)
    rf_l2_prefetch(const rf_l2_prefetch_ranges r, unsigned* never) {
    rf_launch_dependents();
    const unsigned long long threads = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long g = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
#pragma unroll
    for (int i = 0; i < RF_L2_PREFETCH_MAX_RANGES; ++i) {
        const unsigned char* base = r.base[i];
        const unsigned long long bytes = r.bytes[i];
        for (unsigned long long at = g * RF_L2_PREFETCH_PIECE; at < bytes; at += threads * RF_L2_PREFETCH_PIECE) {
            const unsigned long long left = bytes - at;
            acc ^= rf_l2_prefetch_piece(base + at, left < RF_L2_PREFETCH_PIECE ? left : RF_L2_PREFETCH_PIECE);
        }
    }
    if (never != nullptr) {
        *never = acc;
    }
    // Completing only after the kernel ahead keeps waiting transitive for the kernel behind.
    rf_wait_prior_grid();
}
