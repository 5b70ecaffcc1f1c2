// emu_mma_sync.h: rocmforge_mma.h's NVIDIA primitives (sm_80+) for the CPU emulator (simt.h), so
// that the matrix-core kernels' own source runs here as it does on a GPU. run.sh's `sm80` target
// builds a suite with RF_EMU_MMA_SYNC defined, and rocmforge_mma.h then includes this file
// instead of its inline PTX. Written from the PTX ISA's descriptions of the instructions,
// independently of how the kernels use them:
//
//   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: lane l = 4 g + t of the warp holds
//     A[g][2t, 2t + 1] (a0), A[g + 8][2t, 2t + 1] (a1), A[g][2t + 8, 2t + 9] (a2),
//     A[g + 8][2t + 8, 2t + 9] (a3), B[2t, 2t + 1][g] (b0), B[2t + 8, 2t + 9][g] (b1), the lower
//     index in the low 16 bits, and D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1].
//     D = A B + C: the products exact, summed in f64 and rounded to f32 once (the hardware's
//     order and rounding differ, within the bounds the kernels' tests use). EMU_TRANSPOSE_D=1
//     exchanges D's elements 1 and 2 (rows g and g + 8), to see that a suite catches a wrong
//     layout (as simt.h's MFMA).
//   cp.async.cg.shared.global (16 bytes, a source size of 0 to 16, the rest zero-filled): each
//     lane's copies wait in its own queue, grouped by commit_group, and land only when a
//     wait_group retires their group. A kernel that reads a stage before waiting for it reads
//     what was there before, and the suite's comparison fails. Misaligned copies abort.
//   The L2 cache policies (createpolicy, .L2::cache_hint) are hints: plain loads and copies.
//   __syncwarp and the _sync shuffles: warp operations of all 32 lanes (a full mask only).
//   ldmatrix is not emulated: a kernel that uses it does not build here.
//   CUDA's packed f16 type and its few intrinsics the decoders use (__half2, __halves2half2,
//   __hsub2: f16 arithmetic rounded to nearest even), __uint2float_rn, and emu_fma_bf16x2 for
//   the decoders' one `fma.rn.bf16x2` (rocmforge_qmvm_formats.h calls it under RF_EMU_MMA_SYNC).
#pragma once

#include <cstring>
#include <vector>

namespace emu {

struct AsyncCopy {
    void* dst;
    const void* src;
    int bytes; // read from src; the rest of the 16 zero-filled
};
struct CopyQueue {
    std::vector<std::vector<AsyncCopy>> groups; // committed, oldest first
    std::vector<AsyncCopy> open;                // issued since the last commit
};
// By lane of the block: made empty by the host before each block (a block's unwaited copies
// are dropped with its lanes), so that a lane touches only its own queue.
static std::vector<CopyQueue> copy_queues;
static void empty_copy_queues() { copy_queues.assign(blockDim.x, CopyQueue{}); }
static const bool copy_queues_emptied_each_block = [] {
    block_start = empty_copy_queues;
    return true;
}();

static CopyQueue& my_copies() { return copy_queues[current.load(std::memory_order_relaxed)]; }

static void land(const AsyncCopy& c) {
    unsigned char v[16] = {0};
    if (c.bytes > 0) std::memcpy(v, c.src, (size_t)c.bytes);
    std::memcpy(c.dst, v, 16);
}

// One mma.sync step of the warp (layouts above); `cvt` widens a 16-bit element.
static void mma_sync(int tag, float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, float (*cvt)(uint16_t)) {
    if (wave_width != 32) {
        std::fprintf(stderr, "mma.sync on a %d-lane warp (it needs 32)\n", wave_width);
        std::abort();
    }
    Slot s{};
    for (int i = 0; i < 4; ++i) {
        s.w[i] = a[i];
        s.c[i] = d[i];
    }
    s.w[4] = b0;
    s.w[5] = b1;
    const Slot r = wave_op(tag, s, [&](const std::vector<Slot>& in, std::vector<Slot>& out) {
        double A[16][16], B[16][8];
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 2; ++i) {
                auto half = [&](int word) { return (double)cvt((uint16_t)(in[l].w[word] >> (16 * i))); };
                A[g][2 * t + i] = half(0);
                A[g + 8][2 * t + i] = half(1);
                A[g][2 * t + 8 + i] = half(2);
                A[g + 8][2 * t + 8 + i] = half(3);
                B[2 * t + i][g] = half(4);
                B[2 * t + 8 + i][g] = half(5);
            }
        }
        static const bool wrong = std::getenv("EMU_TRANSPOSE_D") != nullptr;
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            int row[4] = {g, g, g + 8, g + 8}, col[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
            if (wrong) std::swap(row[1], row[2]); // D's elements 1 and 2 exchanged
            for (int i = 0; i < 4; ++i) {
                double acc = (double)in[l].c[i];
                for (int k = 0; k < 16; ++k) acc += A[row[i]][k] * B[k][col[i]];
                out[l].c[i] = (float)acc;
            }
        }
    });
    for (int i = 0; i < 4; ++i) d[i] = r.c[i];
}

static void full_mask(unsigned mask, const char* what) {
    if (mask != 0xffffffffu) {
        std::fprintf(stderr, "%s with mask %#x: only whole warps are emulated\n", what, mask);
        std::abort();
    }
}

} // namespace emu

typedef unsigned long long rf_l2_policy;
RF_DEVICE rf_l2_policy rf_l2_evict_first() { return 0; }
RF_DEVICE uint4 rf_ldg16_policy(const void* gmem, rf_l2_policy) {
    if ((uintptr_t)gmem % 16 != 0) {
        std::fprintf(stderr, "16-byte load from %p: misaligned\n", gmem);
        std::abort();
    }
    uint4 v;
    std::memcpy(&v, gmem, 16);
    return v;
}

RF_DEVICE void rf_cp_async16(void* smem, const void* gmem, int bytes) {
    if ((uintptr_t)smem % 16 != 0 || (uintptr_t)gmem % 16 != 0 || bytes < 0 || bytes > 16) {
        std::fprintf(stderr, "cp.async of %d bytes from %p to %p: misaligned or too long\n", bytes, gmem, smem);
        std::abort();
    }
    emu::my_copies().open.push_back(emu::AsyncCopy{smem, gmem, bytes});
}
RF_DEVICE void rf_cp_async16_policy(void* smem, const void* gmem, int bytes, rf_l2_policy) {
    rf_cp_async16(smem, gmem, bytes);
}
RF_DEVICE void rf_cp_async_commit() {
    emu::CopyQueue& q = emu::my_copies();
    q.groups.push_back(std::move(q.open));
    q.open.clear();
}
// Every committed group but the newest N has landed.
template <int N> RF_DEVICE void rf_cp_async_wait() {
    emu::CopyQueue& q = emu::my_copies();
    while ((int)q.groups.size() > N) {
        for (const emu::AsyncCopy& c : q.groups.front()) emu::land(c);
        q.groups.erase(q.groups.begin());
    }
}

template <typename T> struct rf_mma;
template <> struct rf_mma<__half> {
    static RF_DEVICE void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
        emu::mma_sync(4000, d, a, b0, b1, emu::f16f);
    }
};
template <> struct rf_mma<rf_bf16> {
    static RF_DEVICE void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
        emu::mma_sync(4001, d, a, b0, b1, emu::bf16f);
    }
};

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    emu::full_mask(mask, "__shfl_xor_sync");
    return __shfl_xor(v, lane_mask);
}
inline int __shfl_xor_sync(unsigned mask, int v, int lane_mask) {
    emu::full_mask(mask, "__shfl_xor_sync");
    return __shfl_xor(v, lane_mask);
}
inline unsigned __shfl_xor_sync(unsigned mask, unsigned v, int lane_mask) {
    return (unsigned)__shfl_xor_sync(mask, (int)v, lane_mask);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    emu::full_mask(mask, "__syncwarp");
    emu::wave_op(3000, emu::Slot{}, [](const std::vector<emu::Slot>&, std::vector<emu::Slot>&) {});
}

inline float __shfl_sync(unsigned mask, float v, int src) {
    emu::full_mask(mask, "__shfl_sync");
    return shfl(v, INDEX, src & 31);
}

inline float __uint2float_rn(unsigned u) { return (float)u; }

// Whether any lane's predicate holds (every lane gets the answer).
inline int __any_sync(unsigned mask, int pred) {
    emu::full_mask(mask, "__any_sync");
    emu::Slot s{};
    s.a = pred != 0;
    const emu::Slot r = emu::wave_op(3002, s, [](const std::vector<emu::Slot>& in, std::vector<emu::Slot>& out) {
        uint64_t any = 0;
        for (const emu::Slot& x : in) any |= x.a;
        for (emu::Slot& o : out) o.a = any;
    });
    return (int)r.a;
}

// Each 16-bit half the larger, unsigned.
inline unsigned __vmaxu2(unsigned a, unsigned b) {
    const unsigned lo = (a & 0xffffu) > (b & 0xffffu) ? a & 0xffffu : b & 0xffffu;
    const unsigned hi = (a >> 16) > (b >> 16) ? a >> 16 : b >> 16;
    return hi << 16 | lo;
}

// A kernel's trap (its launch contract broken): the suite stops there.
[[noreturn]] inline void __trap() {
    std::fprintf(stderr, "__trap() in a kernel\n");
    std::abort();
}

struct __half2 {
    __half x, y;
};
inline __half2 __halves2half2(__half lo, __half hi) { return __half2{lo, hi}; }
inline __half2 __hmul2(__half2 a, __half2 b) {
    // The product of two f16 values is exact in f32, so one rounding to f16 is f16's own.
    return __half2{__float2half(emu::f16f(a.x.bits) * emu::f16f(b.x.bits)),
                   __float2half(emu::f16f(a.y.bits) * emu::f16f(b.y.bits))};
}
inline __half2 __hsub2(__half2 a, __half2 b) {
    // The difference of two f16 values is exact in f32, so one rounding to f16 is f16's own.
    return __half2{__float2half(emu::f16f(a.x.bits) - emu::f16f(b.x.bits)),
                   __float2half(emu::f16f(a.y.bits) - emu::f16f(b.y.bits))};
}

// Each half: a * b + c in bf16, rounded once to nearest even (f64 holds the exact product and
// sum of bf16 values, and the rounding to f32 then bf16 below is exact for the decoders' small
// integers).
inline unsigned emu_fma_bf16x2(unsigned a, unsigned b, unsigned c) {
    unsigned r = 0;
    for (int h = 0; h < 2; ++h) {
        const double v = (double)emu::bf16f((uint16_t)(a >> (16 * h))) * emu::bf16f((uint16_t)(b >> (16 * h))) +
                         emu::bf16f((uint16_t)(c >> (16 * h)));
        r |= (unsigned)Io<unsigned short>::store((float)v) << (16 * h);
    }
    return r;
}
