// The emulator every suite here shares: GPU lanes as fibers, blocks, barriers and wavefront
// operations (shuffles, MFMA), exact-size buffers, storage-type conversions, and what each
// suite's main does around its cases. Each suite (flash.cpp, decode.cpp, quant.cpp, ...) is one translation unit
// that includes this first, then the kernels it checks; run.sh builds each suite once per AMD
// target with the stand-in headers in hip/.
//
// Races. Lanes between two barriers or wavefront operations run one after another, so a data race
// between them (a missing barrier) gives the right answer here. Built with ThreadSanitizer
// (run.sh race ...), each lane is a TSan fiber whose switches order nothing: only the barriers,
// the wavefront operations (each lane releases on arrival and acquires on leaving) and a block's
// end (the host acquires every lane's release) do. So two lanes of a block that touch the same
// memory, one of them writing, with no barrier or wavefront operation between them, are reported
// as a data race, in shared and in global memory alike. Blocks run one after another, so races
// between blocks are not seen; the emulator's own bookkeeping is atomic.
//
// Each GPU lane is a fiber (ucontext); blocks run one at a time; __syncthreads is a block
// barrier; shuffles and MFMA are wavefront operations (every lane deposits its operands, the
// last to arrive computes all the lanes' results, and each lane takes its own). A wavefront
// operation that not all lanes of a wavefront reach together (divergence) aborts, and so does a
// barrier no lane can pass (deadlock). `__shared__` variables are function statics (one copy:
// one block at a time), unless the suite defines EMU_EXTERN_SHARED (below). The MFMA builtins are
// written from AMD's documented operand layouts, independently of how the kernels use them:
//   16x16x16 (f16, bf16_1k): lane l holds A[l % 16][4 (l / 16) + i], B[4 (l / 16) + i][l % 16],
//                            D[4 (l / 16) + i][l % 16], i = 0..3;
//   16x16x8 bf16 (gfx908):   lane l holds A[l % 16][2 (l / 16) + i], B[2 (l / 16) + i][l % 16],
//                            i = 0..1, D as above.
// EMU_TRANSPOSE_D=1 makes the MFMA emulation use a wrong D layout, to see that a suite's
// comparison catches it. NVIDIA's mma.sync and cp.async, for the matrix-core kernels of the
// `sm80` target, are emu_mma_sync.h's (it uses Slot::w and block_start below).
#pragma once

#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "hip/hip_runtime.h"
#include "rocmforge.h"

#ifndef EMU_TARGET_NAME
#error "define EMU_TARGET_NAME (run.sh does: the gfx target, as a string)"
#endif

emu_dim3 blockIdx, blockDim, gridDim;
int warpSize = 64;

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#include <sanitizer/tsan_interface.h>
#define EMU_TSAN 1
#endif
#endif
#ifndef EMU_TSAN
#define EMU_TSAN 0
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define EMU_ASAN 1
#endif
#endif

// ------------------------------------------------------------------------------------------
// Fibers
// ------------------------------------------------------------------------------------------

namespace emu {

struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr; // kept from block to block
    std::atomic<bool> done{false};
    void* tsan = nullptr; // its ThreadSanitizer fiber
};
constexpr size_t STACK_BYTES = 256 * 1024;

struct Barrier {
    int expected = 0;
    std::atomic<int> arrived{0};
    std::atomic<unsigned long> gen{0};
    // ThreadSanitizer's sync objects, by the parity of the generation: one object for all would
    // let a lane that leaves late acquire what early lanes released at the next barrier, and
    // hide their races with it (a lane cannot reach the generation after next before every lane
    // has left this one).
    char sync[2] = {0, 0};
    explicit Barrier(int n = 0) : expected(n) {}
    Barrier(const Barrier& o) : expected(o.expected), arrived(o.arrived.load()), gen(o.gen.load()) {}
    Barrier& operator=(const Barrier& o) {
        expected = o.expected;
        arrived = o.arrived.load();
        gen = o.gen.load();
        return *this;
    }
};

// Happens-before edges for ThreadSanitizer (nothing otherwise): a lane's writes before
// release(x) are seen by whoever acquires x after it.
static void release(const void* x) {
#if EMU_TSAN
    __tsan_release(const_cast<void*>(x));
#else
    (void)x;
#endif
}
static void acquire(const void* x) {
#if EMU_TSAN
    __tsan_acquire(const_cast<void*>(x));
#else
    (void)x;
#endif
}

// A lane's operands of a wavefront operation, or its result.
struct Slot {
    int tag;
    uint64_t a, b;
    float c[4];
    uint32_t w[6]; // NVIDIA mma.sync's A and B words (emu_mma_sync.h)
};

struct Wave {
    Barrier barrier;
    std::vector<Slot> in, out;
};

static int wave_width = 64; // lanes a wavefront in the current launch
static ucontext_t sched_ctx;
static void* sched_tsan = nullptr;
static std::vector<Fiber> fibers;
static std::atomic<int> current{-1};
static std::atomic<unsigned long> progress{0};
static Barrier block_barrier;
static std::vector<Wave> waves;
static std::function<void()> body;
static const char block_end = 0; // the lanes release it as they finish, the host acquires it
// Run before each block's lanes start (emu_mma_sync.h's copy queues start empty), if set.
static void (*block_start)() = nullptr;

// From lane `from` back to the scheduler, and from the scheduler into lane `to`: switches that
// order nothing for ThreadSanitizer.
static void to_scheduler(ucontext_t* from) {
#if EMU_TSAN
    __tsan_switch_to_fiber(sched_tsan, __tsan_switch_to_fiber_no_sync);
#endif
    swapcontext(from, &sched_ctx);
}
static void to_lane(int to) {
#if EMU_TSAN
    __tsan_switch_to_fiber(fibers[to].tsan, __tsan_switch_to_fiber_no_sync);
#endif
    swapcontext(&sched_ctx, &fibers[to].ctx);
}

static void yield() { to_scheduler(&fibers[current.load(std::memory_order_relaxed)].ctx); }

// Arrives at `b` and waits for the others; the last to arrive runs `last` first (having acquired
// every lane's arrival), and every lane leaves having acquired what `last` wrote.
template <typename F> static void wait(Barrier& b, F&& last) {
    const unsigned long gen = b.gen.load(std::memory_order_relaxed);
    const char* sync = &b.sync[gen & 1];
    release(sync);
    if (b.arrived.fetch_add(1, std::memory_order_relaxed) + 1 == b.expected) {
        acquire(sync);
        last();
        release(sync);
        b.arrived.store(0, std::memory_order_relaxed);
        b.gen.fetch_add(1, std::memory_order_relaxed);
        progress.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    while (b.gen.load(std::memory_order_relaxed) == gen) yield();
    acquire(sync);
}

static void entry() {
    body();
    // Everything of the emulator's that is not atomic is read before the release: the host may
    // rewrite it once it has acquired every lane's.
    Fiber& me = fibers[current.load(std::memory_order_relaxed)];
    me.done.store(true, std::memory_order_relaxed);
    progress.fetch_add(1, std::memory_order_relaxed);
    release(&block_end);
    to_scheduler(&me.ctx);
}

// Runs one block of `threads` lanes through `kernel`, in wavefronts of wave_width lanes. A block
// that is not a whole number of wavefronts (AMD runs a 96-thread block as two wavefronts of 64,
// the second half empty) has a partial last one, in which wave operations are not emulated
// (wave_op aborts): kernels that launch such blocks must not use them.
static void run_block(int threads, std::function<void()> kernel) {
    assert(threads > 0);
    body = std::move(kernel);
    if ((int)fibers.size() < threads) fibers = std::vector<Fiber>(threads);
    block_barrier = Barrier(threads);
    if (block_start) block_start();
    waves.clear();
    for (int first = 0; first < threads; first += wave_width)
        waves.push_back(Wave{Barrier(std::min(wave_width, threads - first)), std::vector<Slot>(wave_width),
                             std::vector<Slot>(wave_width)});
#if EMU_TSAN
    if (!sched_tsan) sched_tsan = __tsan_get_current_fiber(); // the host's, set once
#endif
    for (int t = 0; t < threads; ++t) {
        Fiber& f = fibers[t];
        if (!f.stack) f.stack = new char[STACK_BYTES];
        f.done.store(false, std::memory_order_relaxed);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK_BYTES;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, entry, 0);
#if EMU_TSAN
        f.tsan = __tsan_create_fiber(0); // sees what the host wrote so far
#endif
    }
    for (;;) {
        bool all_done = true;
        const unsigned long before = progress.load(std::memory_order_relaxed);
        for (int t = 0; t < threads; ++t) {
            if (fibers[t].done.load(std::memory_order_relaxed)) continue;
            all_done = false;
            current.store(t, std::memory_order_relaxed);
            to_lane(t);
        }
        if (all_done) break;
        if (progress.load(std::memory_order_relaxed) == before) {
            std::fprintf(stderr, "deadlock: lanes wait at barriers no one else reaches\n");
            std::abort();
        }
    }
    acquire(&block_end);
#if EMU_TSAN
    for (int t = 0; t < threads; ++t) __tsan_destroy_fiber(fibers[t].tsan);
#endif
    current.store(-1, std::memory_order_relaxed);
}

// A wavefront operation: deposit `mine`, meet; the last lane to arrive checks that every lane
// is at the same operation and runs `compute(in, out)` for all of them; return this lane's out.
template <typename F> static Slot wave_op(int tag, Slot mine, F&& compute) {
    const int me = current.load(std::memory_order_relaxed);
    const int l = me % wave_width;
    Wave& w = waves[me / wave_width];
    if (w.barrier.expected != wave_width) {
        std::fprintf(stderr, "wave operation (tag %d) in a wavefront of %d lanes of %d: not emulated\n", tag,
                     w.barrier.expected, wave_width);
        std::abort();
    }
    mine.tag = tag;
    w.in[l] = mine;
    wait(w.barrier, [&] {
        for (int j = 0; j < wave_width; ++j) {
            if (w.in[j].tag != tag) {
                std::fprintf(stderr, "divergent wave operation: lane %d tag %d, lane %d tag %d\n", l, tag, j,
                             w.in[j].tag);
                std::abort();
            }
        }
        compute(w.in, w.out);
    });
    return w.out[l];
}

static float bf16f(uint16_t b) { return __uint_as_float((unsigned)b << 16); }
// binary16 -> f32 by table: the host converts _Float16 in software (libgcc), slowly.
static const std::vector<float> f16_table = [] {
    std::vector<float> t(65536);
    for (unsigned u = 0; u < 65536; ++u) t[u] = __half2float(__ushort_as_half((unsigned short)u));
    return t;
}();
static float f16f(uint16_t b) { return f16_table[b]; }

// D = A B + C for a 16 x 16 x K step (K = 4 E); element e of a lane's operand is bits
// 16 e.. of a / b, and lane + 16 (k / E) holds k (E = values a lane).
template <int E> static emu_f32x4 mfma(int tag, uint64_t a, uint64_t b, emu_f32x4 c, float (*cvt)(uint16_t)) {
    if (wave_width != 64) {
        std::fprintf(stderr, "MFMA on a %d-lane wavefront (it needs 64)\n", wave_width);
        std::abort();
    }
    Slot s{};
    s.a = a;
    s.b = b;
    for (int i = 0; i < 4; ++i) s.c[i] = c[i];
    const Slot r = wave_op(tag, s, [&](const std::vector<Slot>& all, std::vector<Slot>& out) {
        static const bool wrong = std::getenv("EMU_TRANSPOSE_D") != nullptr;
        // A and B from the lanes' operands: lane l holds A[l % 16][E (l / 16) + e] and
        // B[E (l / 16) + e][l % 16] in bits 16 e.. (e < E).
        double A[16][4 * E], Bt[16][4 * E]; // Bt[col][k] = B[k][col]
        for (int l = 0; l < 64; ++l)
            for (int e = 0; e < E; ++e) {
                const int k = E * (l / 16) + e;
                A[l % 16][k] = cvt((uint16_t)(all[l].a >> (16 * e)));
                Bt[l % 16][k] = cvt((uint16_t)(all[l].b >> (16 * e)));
            }
        for (int l = 0; l < 64; ++l) {
            for (int i = 0; i < 4; ++i) {
                const int row = wrong ? l % 16 : 4 * (l / 16) + i; // D layout
                const int col = wrong ? 4 * (l / 16) + i : l % 16;
                double acc = 0.0;
                for (int k = 0; k < 4 * E; ++k) acc += A[row][k] * Bt[col][k];
                out[l].c[i] = (float)(acc + (double)all[l].c[i]);
            }
        }
    });
    emu_f32x4 d;
    for (int i = 0; i < 4; ++i) d[i] = r.c[i];
    return d;
}

} // namespace emu

emu_dim3 emu_thread_idx() { return emu_dim3{(unsigned)emu::current.load(std::memory_order_relaxed), 0, 0}; }

void emu_syncthreads() {
    emu::wait(emu::block_barrier, [] {});
}

// Shuffles at width warpSize: HIP's __shfl_xor (XOR: lane ^ arg) and __shfl_down (DOWN: lane +
// arg), the same `arg` in every lane; and CUDA's __shfl_sync (INDEX: lane `arg`, which may differ
// from lane to lane; emu_mma_sync.h). A source outside the wavefront gives the lane its own value.
enum ShflMode { XOR, DOWN, INDEX };
template <typename V> static V shfl(V v, ShflMode mode, int arg) {
    static_assert(sizeof(V) == 4, "32-bit shuffles only");
    emu::Slot s{};
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    s.a = bits;
    s.b = (uint64_t)(int64_t)arg;
    const int tag = mode == XOR ? 1000 + arg : mode == DOWN ? 2000 + arg : 3001;
    const emu::Slot r = emu::wave_op(tag, s, [&](const std::vector<emu::Slot>& in, std::vector<emu::Slot>& out) {
        const int width = emu::wave_width;
        for (int l = 0; l < width; ++l) {
            const int src = mode == XOR ? (l ^ arg) : mode == DOWN ? l + arg : (int)(int64_t)in[l].b;
            out[l].a = in[src >= 0 && src < width ? src : l].a;
        }
    });
    bits = (uint32_t)r.a;
    V res;
    std::memcpy(&res, &bits, 4);
    return res;
}
float __shfl_xor(float v, int mask) { return shfl(v, XOR, mask); }
int __shfl_xor(int v, int mask) { return shfl(v, XOR, mask); }
float __shfl_down(float v, unsigned d) { return shfl(v, DOWN, (int)d); }
int __shfl_down(int v, unsigned d) { return shfl(v, DOWN, (int)d); }

static uint64_t bits64(const void* p) {
    uint64_t u;
    std::memcpy(&u, p, 8);
    return u;
}
static uint64_t bits32(const void* p) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return u;
}
emu_f32x4 emu_mfma_f32_16x16x16f16(emu_f16x4 a, emu_f16x4 b, emu_f32x4 c, int, int, int) {
    return emu::mfma<4>(1, bits64(&a), bits64(&b), c, emu::f16f);
}
emu_f32x4 emu_mfma_f32_16x16x16bf16_1k(emu_i16x4 a, emu_i16x4 b, emu_f32x4 c, int, int, int) {
    return emu::mfma<4>(2, bits64(&a), bits64(&b), c, emu::bf16f);
}
emu_f32x4 emu_mfma_f32_16x16x8bf16(emu_i16x2 a, emu_i16x2 b, emu_f32x4 c, int, int, int) {
    return emu::mfma<2>(3, bits32(&a), bits32(&b), c, emu::bf16f);
}

// Runs a grid of `threads`-lane blocks (x only) in wavefronts of `width` lanes, each lane
// running `kernel()`.
template <typename F> static void emu_launch(emu_dim3 grid, int threads, int width, F&& kernel) {
    emu::wave_width = width;
    warpSize = width;
    gridDim = grid;
    blockDim = emu_dim3{(unsigned)threads, 1, 1};
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = emu_dim3{x, y, z};
                emu::run_block(threads, [&] { kernel(); });
            }
}

// emu_launch for a kernel whose dynamic shared memory is the suite's `smem` array (`capacity`
// bytes): the launch asks for `shared` of them, which start as garbage (0xa5 bytes); the rest is
// poisoned for AddressSanitizer while it runs, so a read past what the launch asked for fails.
template <typename F>
static void emu_launch_shared(unsigned char* smem, size_t capacity, size_t shared, emu_dim3 grid, int threads, int width,
                              F&& kernel) {
    if (shared > capacity) {
        std::fprintf(stderr, "the suite's shared memory (%zu bytes) is smaller than a launch's %zu\n", capacity, shared);
        std::abort();
    }
    std::memset(smem, 0xa5, capacity);
#ifdef EMU_ASAN
    ASAN_POISON_MEMORY_REGION(smem + shared, capacity - shared);
#endif
    emu_launch(grid, threads, width, kernel);
#ifdef EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(smem, capacity);
#endif
}

// ------------------------------------------------------------------------------------------
// What every suite's main does around its cases
// ------------------------------------------------------------------------------------------

// The suite's tally: checks run, checks failed, the worst error as a fraction of its tolerance.
static int emu_checks = 0;
static int emu_failures = 0;
static double emu_worst = 0.0;

// One check done: `bad` comparisons failed, the passing ones at most `worst` of their tolerance.
static void emu_record(int bad, double worst) {
    ++emu_checks;
    if (bad) ++emu_failures;
    emu_worst = std::max(emu_worst, worst);
}

// `quick` (the cases marked for the cargo tests) from the command line; anything else is a
// usage error (exit status 2).
static bool emu_quick_arg(int argc, char** argv) {
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) != "quick") {
            std::fprintf(stderr, "usage: %s [quick]\n", argv[0]);
            std::exit(2);
        }
        quick = true;
    }
    return quick;
}

// The summary line tests/amd_emu.rs looks for, "<target> <suite> (<what>): N checks, F
// failures, ...", and the exit status: 0 only if checks ran and none failed.
static int emu_finish(const char* suite, const std::string& what) {
    std::printf("%s %s (%s): %d checks, %d failures, worst error %.3f of the tolerance\n", EMU_TARGET_NAME, suite,
                what.c_str(), emu_checks, emu_failures, emu_worst);
    if (emu_checks == 0) {
        std::printf("no checks ran\n");
        return 1;
    }
    return emu_failures ? 1 : 0;
}

// ------------------------------------------------------------------------------------------
// Buffers and storage types of the suites' cases
// ------------------------------------------------------------------------------------------

// A case's buffers: heap allocations of exactly the asked size, 16-byte aligned or `offset`
// bytes past that, all freed when the case ends. run.sh builds the suites with AddressSanitizer
// and the rest of each allocation is poisoned, so any access outside a buffer is an error.
class EmuBuffers {
  public:
    EmuBuffers() = default;
    EmuBuffers(const EmuBuffers&) = delete;
    EmuBuffers& operator=(const EmuBuffers&) = delete;
    ~EmuBuffers() {
        for (void* p : bases_) std::free(p);
    }

    template <typename X> X* exact(size_t n, size_t offset = 0) {
        const size_t used = n * sizeof(X), total = (offset + used + 15) / 16 * 16 + 16;
        char* p = (char*)std::aligned_alloc(16, total);
        bases_.push_back(p);
#ifdef EMU_ASAN
        ASAN_POISON_MEMORY_REGION(p, offset);
        ASAN_POISON_MEMORY_REGION(p + offset + used, total - offset - used);
#endif
        return (X*)(p + offset);
    }

  private:
    std::vector<void*> bases_;
};

// The storage types: conversions to and from f32 written here (round to nearest even), not the
// kernels' own; and what one rounding to the type may cost: `rel` of the value (half an ulp) and
// `abs` (half of f16's subnormal spacing, taken as 2^-24).
template <typename T> struct Io;
template <> struct Io<float> {
    static constexpr const char* name = "f32";
    static constexpr double rel = 0x1p-24, abs = 0.0;
    static float load(float v) { return v; }
    static float store(float v) { return v; }
};
template <> struct Io<__half> {
    static constexpr const char* name = "f16";
    static constexpr double rel = 0x1p-11, abs = 0x1p-24;
    static float load(__half h) { return emu::f16f(__half_as_ushort(h)); }
    static __half store(float v) { return __float2half(v); }
};
template <> struct Io<unsigned short> { // rf_bf16: the raw 16 bits
    static constexpr const char* name = "bf16";
    static constexpr double rel = 0x1p-8, abs = 0.0;
    static float load(unsigned short b) { return emu::bf16f(b); }
    static unsigned short store(float x) {
        const unsigned u = __float_as_uint(x);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
        return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
};

// A value's bits, for comparisons that must be exact (NaN payloads included).
template <typename T> static uint32_t emu_bits(T v) {
    uint32_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}

// The 16-bit storage types as their bits (the flash suite keeps its tensors so), through Io;
// `eps`: one rounding's relative error (2^-11 for f16, 2^-8 for bf16), which the flash suite's
// tolerance is built from.
template <typename T> struct Dt {
    static constexpr const char* name = Io<T>::name;
    static constexpr double eps = Io<T>::rel;
    static uint16_t from(float x) { return (uint16_t)emu_bits(Io<T>::store(x)); }
    static float to(uint16_t b) {
        T v;
        std::memcpy(&v, &b, 2);
        return Io<T>::load(v);
    }
};
