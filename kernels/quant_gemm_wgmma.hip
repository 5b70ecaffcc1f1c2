// Mixed-input GEMM for prefill with block-quantised weights, the Hopper warpgroup kernel
// (sm_90a only: wgmma.mma_async, rocmforge_wgmma.h). Contract and launcher:
// crates/rocm-kernels/src/quant/quant_gemm.rs; measurements: docs/kernels/quant_gemm.md.
//
//   y[t, r] = sum_k x[t, k] W[r, k]       x: [tokens, k] (T), W: rows of blocks, y: [tokens, rows]
//
// Dequantising W to T first writes and reads back the whole weight in T (117 MB at 14336 x
// 4096): at 512 tokens that costs 40% on top of the GEMM. Here the blocks travel to shared memory
// as stored and are decoded from there into the wgmma's A fragments, so W is read once at its own
// size and never exists in T in global memory.
//
// Roles: W rows are the wgmma's M, tokens its N. A block owns RF_QGEMM_ROWS = 128 rows of W and
// RF_QGEMM_TOKENS = 256 tokens, so each decoded element serves 256 tokens (the decode's
// instructions, and until v8 the weight's copies, bound this kernel: docs/kernels/quant_gemm.md,
// v3, v7, v8). x is first re-laid out by rf_qgemm_pack_x into the 128-byte-swizzled K-major tiles
// the wgmma reads, so that one thread of warpgroup 0, the copying one, brings a stage's x with one
// bulk copy (the TMA engine) and its 128 rows of W with one or two tensor copies (the launcher's
// tensor map over W's bytes; cp.async of 16 bytes a thread cost as much as the decode), into a
// ring of STAGES buffers whose `full` mbarrier completes when their bytes have landed. Math
// warpgroup m owns rows 64 m .. 64 m + 63 (64 x 256 f32 accumulators). Per 64 k each thread
// decodes its own A fragments (the wgmma's register operand: two rows, 32 elements; x's columns
// are permuted so that they are 16 columns of each row its format decodes together: v11, v12)
// straight from the staged blocks into one of two register sets and issues four m64n256k16
// wgmma on them; while they run it decodes the next 64 k into the other set (v10: decoding into
// shared memory instead cost a store, a barrier and the tensor cores' reads of every element).
// A stage goes back to the copying warps (`empty`) once its last products are done.
//
// Numerics: each weight is decoded in f32 exactly as kernels/dequant.hip does (rocmforge_quant.h)
// and rounded once to T; products accumulate in f32 on the tensor cores; one rounding of each y
// to T. So y equals the GEMM of x with the dequantised weight up to the order of the sums.

#include <type_traits>

#include "rocmforge_quant.h"
#include "rocmforge_quant_gemm_abi.h"
#include "rocmforge_wgmma.h"

#if !RF_WGMMA && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "quant_gemm_wgmma.hip is built for sm_90a only (xtask kernels' target list)"
#endif

#if RF_WGMMA

// ---------------------------------------------------------------------------------------------
// Formats as staged. A stage of W is BOXES boxes of the tensor map over W's bytes, each 128 rows x
// BOX bytes (a multiple of 16) from byte `box(k0, b)` of every row (a multiple of 16: rows start
// on 16-byte boundaries too), stored box after box in shared memory (rows BOX bytes apart); the
// stage's bytes start `skip(k0)` into its first box. Each format names KS (k a stage: a multiple
// of 64 and of its block), BOX, BOXES, X_ORDER (the order of x's columns it needs,
// rocmforge_quant_gemm_abi.h), W_EVERY (1, or 2: stages come in pairs on the same boxes, which
// only the first copies), `Held` and `hold` (what a thread keeps of a row from the pair's first
// stage for its second) and `words16<T>`: a math thread's 16 columns of the stage's 64-column
// chunk at e0 / 64 (e0 % 64 = 16 q, q = lane % 4) as eight pairs in T, from the row's staged
// bytes `s` (box b's bytes at s - skip + b * RF_QGEMM_ROWS * BOX), the chunk's quarter of a
// 256-element super-block and what `hold` kept. Pair p is columns
// e0 + 2 p + {0, 1} for RF_QGEMM_X_RUNS_OF_16; for RF_QGEMM_X_NIBBLE_PAIRS, (e0 & ~31) +
// 8 (e0 / 16 % 2) + 2 (p % 4) + 16 (p / 4) + {0, 1}. Either way one scale covers the 16.
// ---------------------------------------------------------------------------------------------

// Exact small integers from bytes without a conversion instruction (a quarter-rate unit on
// sm_90): the byte under the exponent of 2^23 is 2^23 + byte as an f32.
RF_DEVICE float rf_qg_u8_plus_2p23(unsigned word, unsigned selector) {
    return __int_as_float((int)__byte_perm(word, 0x4B000000u, selector));
}

// WORDS words of shared memory from any byte address: WORDS + 1 aligned words and a byte permute
// each (the blocks of q8_0, q4_0, mxfp4 and q6_K are 2- or 1-byte aligned; every read stays in
// the row's box, which ends at least 3 bytes past the last byte a format asks for).
template <int WORDS> RF_DEVICE void rf_qg_lds(const unsigned char* p, unsigned (&w)[WORDS]) {
    const unsigned shift = (unsigned)(size_t)p & 3u;
    const unsigned* base = (const unsigned*)(p - shift);
    unsigned x[WORDS + 1];
#pragma unroll
    for (int i = 0; i <= WORDS; ++i) x[i] = base[i];
    const unsigned selector = 0x3210u + shift * 0x1111u;
#pragma unroll
    for (int i = 0; i < WORDS; ++i) w[i] = __byte_perm(x[i], x[i + 1], selector);
}

// Four codes a byte each (`codes`) as two pairs in T: value(2^23 + code - bias) each.
template <typename T, typename V>
RF_DEVICE void rf_qg_pack4(unsigned codes, float bias, V value, unsigned* v) {
    const float f0 = rf_qg_u8_plus_2p23(codes, 0x7650) - bias, f1 = rf_qg_u8_plus_2p23(codes, 0x7651) - bias;
    const float f2 = rf_qg_u8_plus_2p23(codes, 0x7652) - bias, f3 = rf_qg_u8_plus_2p23(codes, 0x7653) - bias;
    v[0] = rf_pack2_bits16<T>(value(f0), value(f1));
    v[1] = rf_pack2_bits16<T>(value(f2), value(f3));
}

// What a math thread keeps of a row from the stage that brings W's boxes for the one that does
// not (W_EVERY = 2): formats whose every stage brings its own keep nothing.
struct rf_qg_holds_nothing {
    static constexpr int W_EVERY = 1; // every stage brings its own boxes
    struct Held {};
    static RF_DEVICE void hold(const unsigned char*, int, int, Held&) {}
};

// Four codes below 128 a byte each as two pairs in T: step * code + addend, each with one fused
// multiply-add. A code c under the exponent of 2^7 is the f32 128 + c (one byte permute), and
// with addend = -(128 + bias) * step the fma's exact sum is step * (c - bias), which f32 holds
// exactly where step has at most 24 - (bits of c - bias) significant bits (q4_0: an f16 d and
// codes -8 .. 7; q6_K: d * sc, 11 + 7 bits, and -32 .. 31), so it is the value the dequantiser
// computes, one instruction an element fewer than rf_qg_pack4.
template <typename T> RF_DEVICE void rf_qg_pack4_fma(unsigned codes, float step, float addend, unsigned* v) {
    float f[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = fmaf(step, __int_as_float((int)__byte_perm(codes, 0x4300u, 0x5044u + 0x100u * i)), addend);
    v[0] = rf_pack2_bits16<T>(f[0], f[1]);
    v[1] = rf_pack2_bits16<T>(f[2], f[3]);
}

// The 32-element formats: a stage is the WINDOW bytes of a row from byte (k0 / 32) * BLOCK_BYTES,
// 2-aligned at best, so one box from the 16-byte boundary below it, WINDOW + 15 rounded up to 16.
template <int BLOCK_BYTES_, int KS_> struct rf_qg_blocks32 : rf_qg_holds_nothing {
    static constexpr int KS = KS_, BLOCK_BYTES = BLOCK_BYTES_;
    static constexpr int WINDOW = KS / 32 * BLOCK_BYTES;
    static constexpr int BOX = (WINDOW + 15 + 15) / 16 * 16, BOXES = 1;
    static RF_DEVICE int box(int k0, int) { return k0 / 32 * BLOCK_BYTES & ~15; }
    static RF_DEVICE int skip(int k0) { return k0 / 32 * BLOCK_BYTES & 15; }
};

struct rf_qg_q8_0 : rf_qg_blocks32<34, 64> {
    static constexpr int X_ORDER = RF_QGEMM_X_RUNS_OF_16;
    template <typename T> static RF_DEVICE void words16(const unsigned char* s, int e0, int, const Held&, unsigned (&v)[8]) {
        const unsigned char* b = s + (e0 >> 5) * 34;
        const float d = __half2float(*(const __half*)b);
        unsigned w[4];
        rf_qg_lds<4>(b + 2 + (e0 & 31), w);
        // The i8 as biased bytes: 2^23 + 128 + q.
#pragma unroll
        for (int i = 0; i < 4; ++i) rf_qg_pack4<T>(w[i] ^ 0x80808080u, 8388736.0f, [d](float q) { return d * q; }, v + 2 * i);
    }
};

// q4_0 and mxfp4 take both nibbles of 8 payload bytes (RF_QGEMM_X_NIBBLE_PAIRS): bytes
// 8 (e0 / 16 % 2) .. + 7 of the block, low nibbles (pairs 0-3) then high nibbles (pairs 4-7).
RF_DEVICE int rf_qg_nibble_pair_bytes(int e0) { return (e0 & 16) >> 1; }

struct rf_qg_q4_0 : rf_qg_blocks32<18, 64> {
    static constexpr int X_ORDER = RF_QGEMM_X_NIBBLE_PAIRS;
    template <typename T> static RF_DEVICE void words16(const unsigned char* s, int e0, int, const Held&, unsigned (&v)[8]) {
        const unsigned char* b = s + (e0 >> 5) * 18;
        const float d = __half2float(*(const __half*)b);
        unsigned w[2];
        rf_qg_lds<2>(b + 2 + rf_qg_nibble_pair_bytes(e0), w);
        const float addend = -136.0f * d; // d * (128 + code) - 136 d = d * (code - 8)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            rf_qg_pack4_fma<T>(w[i] & 0x0F0F0F0Fu, d, addend, v + 2 * i);
            rf_qg_pack4_fma<T>((w[i] >> 4) & 0x0F0F0F0Fu, d, addend, v + 4 + 2 * i);
        }
    }
};

// a * b for two bf16 pairs, rounded once (sm_90's bf16 multiply; subnormals are kept).
RF_DEVICE unsigned rf_qg_mul_bf16x2(unsigned a, unsigned b) {
    unsigned r;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

struct rf_qg_mxfp4 : rf_qg_blocks32<17, 128> {
    static constexpr int X_ORDER = RF_QGEMM_X_NIBBLE_PAIRS;
    template <typename T> static RF_DEVICE void words16(const unsigned char* s, int e0, int, const Held&, unsigned (&v)[8]) {
        const unsigned char* b = s + (e0 >> 5) * 17;
        unsigned w[2];
        rf_qg_lds<2>(b + 1 + rf_qg_nibble_pair_bytes(e0), w);
        if constexpr (std::is_same<T, rf_bf16>::value) {
            // The magnitudes as exact bf16 from the byte-permute tables (rocmforge_quant.h), each
            // pair times the scale in bf16: a magnitude has two significant bits and the scale is
            // a power of two, so the product is exact, the f32 product rounded to bf16 bit for bit.
            // (The scale's f32 pattern has no bits below 16: its top half is the same bf16.)
            const unsigned scale = (__float_as_uint(rf_e8m0_to_float(b[0])) >> 16) * 0x10001u;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                unsigned a[2][2]; // [low, high nibbles][bytes 0-1, 2-3 of the word]
                rf_e2m1_word_bf16(w[i], a);
                v[2 * i] = rf_qg_mul_bf16x2(a[0][0], scale);
                v[2 * i + 1] = rf_qg_mul_bf16x2(a[0][1], scale);
                v[4 + 2 * i] = rf_qg_mul_bf16x2(a[1][0], scale);
                v[5 + 2 * i] = rf_qg_mul_bf16x2(a[1][1], scale);
            }
        } else {
            // f16's range is narrower than a scale's: the value in f32, rounded once to T.
            const float scale = rf_e8m0_to_float(b[0]);
#pragma unroll
            for (int p = 0; p < 8; ++p) {
                const unsigned codes = w[(p % 4) / 2] >> (16 * (p % 2) + 4 * (p / 4));
                v[p] = rf_pack2_bits16<T>(rf_mxfp4::element(codes & 15u) * scale,
                                          rf_mxfp4::element((codes >> 8) & 15u) * scale);
            }
        }
    }
};

// q4_K / q5_K, 64 elements (two sub-blocks) a stage, in two boxes: the super-block's first BOX
// bytes (the 16-byte header: d, dmin, the packed scales; q5_K's 32 bytes of fifth bits), and BOX
// bytes from the stage's 32 bytes of nibbles (q5_K's box carries 16 bytes it does not use). The
// stage is quarter k0 % 256 / 64 of its super-block; the header tells its sub-blocks' scales.
// Both boxes' rows are 16-byte aligned, so a thread's 16 codes are one 16-byte load (two for q5_K).
template <bool FIFTH_BIT> struct rf_qg_kquant_affine : rf_qg_holds_nothing {
    static constexpr int KS = 64, X_ORDER = RF_QGEMM_X_RUNS_OF_16;
    static constexpr int BOX = FIFTH_BIT ? 48 : 32, BOXES = 2;
    static constexpr int BLOCK_BYTES = FIFTH_BIT ? 176 : 144;
    static constexpr int QS = FIFTH_BIT ? 48 : 16; // the nibbles, in the super-block
    static constexpr int QS_STAGED = RF_QGEMM_ROWS * BOX; // the stage's nibbles, from a row's header
    static RF_DEVICE int box(int k0, int b) {
        return k0 / 256 * BLOCK_BYTES + (b == 0 ? 0 : QS + 32 * ((k0 / 64) % 4));
    }
    static RF_DEVICE int skip(int) { return 0; }
    template <typename T>
    static RF_DEVICE void words16(const unsigned char* s, int e0, int quarter, const Held&, unsigned (&v)[8]) {
        const int sub = 2 * quarter + e0 / 32; // sub-block of the super-block
        unsigned sc, m;
        rf_kquant_scale_min(s + 4, sub, &sc, &m);
        const float step = __half2float(*(const __half*)s) * (float)sc;
        const float offset = __half2float(*(const __half*)(s + 2)) * (float)m;
        const uint4 lo = *(const uint4*)(s + QS_STAGED + (e0 & 31));
        const unsigned nib[4] = {lo.x, lo.y, lo.z, lo.w};
        unsigned fifth[4] = {0, 0, 0, 0};
        if (FIFTH_BIT) {
            const uint4 hi = *(const uint4*)(s + 16 + (e0 & 31));
            fifth[0] = hi.x, fifth[1] = hi.y, fifth[2] = hi.z, fifth[3] = hi.w;
        }
        const int shift = (e0 & 32) >> 3;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            unsigned codes = (nib[i] >> shift) & 0x0F0F0F0Fu;
            if (FIFTH_BIT) codes |= ((fifth[i] >> sub) & 0x01010101u) << 4;
            rf_qg_pack4<T>(codes, 8388608.0f, [step, offset](float q) { return step * q - offset; }, v + 2 * i);
        }
    }
};

// q6_K, 64 elements (quarter Q = k0 % 256 / 64 of a 210-byte super-block) a stage, in two boxes
// from the 16-byte boundaries below its half's (Q / 2) 64 bytes of low nibbles (ql) and below
// that half's 32 bytes of high bit pairs (qh), which the super-block's 16 i8 scales and f16 d
// follow. Super-blocks start 2-aligned, so both boxes are `skip` bytes early; the second box of
// half 0 is the one that reaches d, at most 14 + 82 bytes. Element e of the stage is nibble Q % 2
// of ql byte e and bits 4 (Q % 2) + 2 (e / 32) of qh byte e % 32; scales are per 16 elements;
// (d * sc) * (code - 32), as dequant.hip. Both quarters of a half read the same 16 ql and 16 qh
// bytes a thread, so the boxes come with the even quarter's stage only (W_EVERY = 2), whose
// decode loads them and both quarters' scales (`hold`); the odd quarter's decodes its nibbles
// from the same registers (until v12 every stage copied and read the half's boxes).
struct rf_qg_q6_k {
    static constexpr int KS = 64, X_ORDER = RF_QGEMM_X_RUNS_OF_16, W_EVERY = 2;
    static constexpr int BOX = 96, BOXES = 2;
    static constexpr int BLOCK_BYTES = 210;
    static constexpr int QH_STAGED = RF_QGEMM_ROWS * BOX; // the stage's qh, from its ql
    static RF_DEVICE int box(int k0, int b) {
        const int half = (k0 / 128) % 2;
        return (k0 / 256 * BLOCK_BYTES + (b == 0 ? 64 * half : 128 + 32 * half)) & ~15;
    }
    static RF_DEVICE int skip(int k0) { return k0 / 256 * BLOCK_BYTES & 15; }
    struct Held {
        unsigned ql[4], qh[4];
        float step[2]; // d * sc of the thread's 16 elements in the even, the odd quarter
    };
    // col16: the thread's first column of a chunk (16 q).
    static RF_DEVICE void hold(const unsigned char* s, int col16, int k0, Held& h) {
        const int half = (k0 / 128) % 2;
        const unsigned char* tail = s + QH_STAGED + 64 - 32 * half; // the scales, then d
        const float d = __half2float(*(const __half*)(tail + 16));
#pragma unroll
        for (int c = 0; c < 2; ++c) h.step[c] = d * (float)(signed char)tail[8 * half + 4 * c + col16 / 16];
        rf_qg_lds<4>(s + col16, h.ql);
        rf_qg_lds<4>(s + QH_STAGED + (col16 & 31), h.qh);
    }
    template <typename T>
    static RF_DEVICE void words16(const unsigned char*, int e0, int quarter, const Held& h, unsigned (&v)[8]) {
        const int c = quarter % 2;
        const float step = h.step[c];
        const float addend = -160.0f * step; // step * (128 + code) - 160 step = step * (code - 32)
        const int qh_shift = 4 * c + ((e0 & 32) >> 4);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const unsigned codes = ((h.ql[i] >> (4 * c)) & 0x0F0F0F0Fu) | (((h.qh[i] >> qh_shift) & 0x03030303u) << 4);
            rf_qg_pack4_fma<T>(codes, step, addend, v + 2 * i);
        }
    }
};

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------

template <typename F, int STAGES> struct rf_qgemm_layout {
    static constexpr int X_BYTES = RF_QGEMM_TOKENS * F::KS * 2; // KS / 64 swizzled column blocks
    static constexpr int W_BYTES = RF_QGEMM_ROWS * F::BOXES * F::BOX; // box after box
};

template <typename T, typename F, int STAGES, int COPY_REGS, int MATH_REGS>
RF_DEVICE void rf_qgemm_wgmma(const rf_qgemm_params& p, const rf_tensor_map& w_map) {
    typedef rf_qgemm_layout<F, STAGES> L;
    constexpr int MATH_ROWS = RF_QGEMM_ROWS / RF_QGEMM_MATH_WGS; // one 64-row wgmma tile
    constexpr int CHUNKS = F::KS / 64;                             // 64 k each
    static_assert(CHUNKS == 1 || CHUNKS == 2, "chunk pairs are a stage's two chunks");
    static_assert(F::W_EVERY == 1 || (F::W_EVERY == 2 && CHUNKS == 1), "stage pairs are chunk pairs");
    static_assert(MATH_ROWS == 64 && RF_QGEMM_TOKENS == 256, "a math warpgroup: 64 rows x 256 tokens");
    static_assert(STAGES >= 2, "a ring");
    static_assert(F::BOX % 16 == 0, "boxes of whole 16-byte units");
    static_assert(128 * (COPY_REGS + RF_QGEMM_MATH_WGS * MATH_REGS) <= 65536, "setmaxnreg within the SM's registers");
    extern __shared__ __align__(1024) unsigned char rf_qgemm_smem[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    unsigned char* xs = rf_qgemm_smem + ((1024u - (rf_smem_addr(rf_qgemm_smem) & 1023u)) & 1023u);
    unsigned char* ws = xs + STAGES * L::X_BYTES;

    const int wg = threadIdx.x / 128;
    const int r0 = blockIdx.y * RF_QGEMM_ROWS;
    const int stages = p.k / F::KS;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int st = 0; st < STAGES; ++st) {
            // Thread 0 of the copying warpgroup arrives once, expecting the stage's bytes.
            rf_mbar_init(&full[st], 1);
            rf_mbar_init(&empty[st], 128 * RF_QGEMM_MATH_WGS);
        }
    }
    __syncthreads();

    if (wg == 0) {
        rf_setmaxnreg_dec<COPY_REGS>();
        // One thread issues every copy (the TMA engine's), the rest of the warpgroup idles: its
        // warps exist for setmaxnreg, which gives registers away a warpgroup at a time.
        if (threadIdx.x != 0) return;
        // This block's x tiles, already in the swizzled layout (rf_qgemm_pack_x): one stage is
        // X_BYTES contiguous bytes.
        const unsigned char* x_tiles = (const unsigned char*)p.x_tiles + (rf_u64)blockIdx.x * stages * L::X_BYTES;
        for (int s = 0; s < stages; ++s) {
            const int st = s % STAGES;
            rf_mbar_wait(&empty[st], ((s / STAGES) & 1) ^ 1);
            const int k0 = s * F::KS;
            // The stage is the x tile (one bulk copy) and W's boxes (a tensor copy each, 128 rows
            // at once; rows past the last arrive as zeros): `full` completes once all their
            // bytes have landed. (cp.async of 16 bytes a thread cost as much time as the decode.)
            // A format whose stages come in pairs on the same boxes (W_EVERY = 2) gets them
            // with the first stage of the pair only; its math threads hold what they need.
            const bool with_w = s % F::W_EVERY == 0;
            rf_mbar_arrive_expect_tx(&full[st], L::X_BYTES + (with_w ? L::W_BYTES : 0));
            rf_bulk_copy(xs + st * L::X_BYTES, x_tiles + (rf_u64)s * L::X_BYTES, L::X_BYTES, &full[st]);
            unsigned char* wst = ws + st * L::W_BYTES;
            if (with_w) {
#pragma unroll
                for (int b = 0; b < F::BOXES; ++b)
                    rf_tensor_copy_2d(wst + b * RF_QGEMM_ROWS * F::BOX, &w_map, F::box(k0, b), r0, &full[st]);
            }
        }
        return;
    }

    rf_setmaxnreg_inc<MATH_REGS>();
    const int me = wg - 1; // which math warpgroup
    float d[32][4];        // set by the first chunk's wgmma (accumulate = 0)
    // A from registers, in two sets: chunk n's fragments are set n % 2, decoded while chunk
    // n - 1's wgmma (the other set) run. Thread (warp w, lane 4 g + q) holds rows 16 w + g and
    // + 8 of the warpgroup's 64 at the wgmma's k 16 kk + 2 q + {0, 1} and + 8 of each chunk of 64
    // (kk < 4), which x's permutation makes the 16 columns of W the format's X_ORDER names.
    unsigned a[2][4][4];
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int row0 = me * MATH_ROWS + 16 * warp + lane / 4;
    const int col16 = 16 * (lane % 4); // this thread's 16 columns of each chunk of W
    const int chunks = stages * CHUNKS;
    typename F::Held held[2]; // what the format keeps from a pair's first stage, a row each
    auto chunk = [&](auto buf, int n) {
        constexpr int B = decltype(buf)::value;
        // Chunk n's parity is its set's (pairs start at even n; an odd last chunk is even), so
        // with two chunks a stage which one it is, and with W_EVERY = 2 whether its stage
        // carries W's boxes, is known at compile time.
        const int s = n / CHUNKS, c = CHUNKS == 2 ? B : 0;
        const bool with_w = F::W_EVERY == 1 || B == 0; // as the copying thread's s % W_EVERY == 0
        const int st = s % STAGES;
        if (c == 0) {
            rf_mbar_wait(&full[st], (s / STAGES) & 1);
            rf_fence_proxy_async(); // orders this thread's view of the copies before its wgmma reads x
        }
        const unsigned char* wst = ws + st * L::W_BYTES;
        const int k0 = s * F::KS;
        const int quarter = (k0 / 64 + c) % 4; // of a 256-element super-block
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            // x's columns are permuted (rf_qgemm_pack_x, the format's X_ORDER) so that this
            // thread's 16 elements of the row are those words16 decodes, pair 2 kk + h of them
            // at wgmma k 16 kk + 8 h + 2 q.
            unsigned v[8];
            const unsigned char* row = wst + (row0 + 8 * i) * F::BOX + F::skip(k0);
            if (c == 0 && with_w) F::hold(row, col16, k0, held[i]);
            F::template words16<T>(row, 64 * c + col16, quarter, held[i], v);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                a[B][kk][i] = v[2 * kk];
                a[B][kk][i + 2] = v[2 * kk + 1];
            }
        }
        const unsigned x_addr = rf_smem_addr(xs + st * L::X_BYTES);
        rf_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            // x's chunk c is its column block c; step kk is bytes 32 kk of each row (the
            // hardware applies the swizzle to the full address).
            const rf_u64 b = rf_wgmma_desc(x_addr + c * RF_QGEMM_TOKENS * 128 + kk * 32, 16, 1024);
            rf_wgmma<T, RF_QGEMM_TOKENS>::rs(d, a[B][kk], b, n + kk > 0);
        }
        rf_wgmma_commit();
        // Chunk n - 1's products are done (this one's run on while the next is decoded): its
        // registers may be written again, and when it was its stage's last, the stage's buffers
        // go back to the copying warps.
        rf_wgmma_wait<1>();
        if (c == 0 && s > 0) rf_mbar_arrive(&empty[(s - 1) % STAGES]);
    };
    // Pairs of chunks, then an odd one: no path of the loop reaches set 0's decode with set 0's
    // own wgmma still in flight (ptxas would serialise every wgmma otherwise, C7513).
    int n = 0;
    for (; n + 1 < chunks; n += 2) {
        chunk(std::integral_constant<int, 0>(), n);
        chunk(std::integral_constant<int, 1>(), n + 1);
    }
    if (n < chunks) chunk(std::integral_constant<int, 0>(), n);
    rf_wgmma_wait<0>();
    rf_wgmma_reg_fence(d);
    if (stages == 0) {
        // k = 0: no wgmma ran (the first of each tile zeroes its accumulators rather than
        // adding to them, so that nothing defines them before the pipeline, C7515).
#pragma unroll
        for (int j = 0; j < 32; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
    }

    // The tile goes out through shared memory (the ring's buffers, free once both math
    // warpgroups' last wgmma are done): each thread stores its values to ys[token][row] (rows
    // YS_PITCH bytes apart, 16 more than a row's 256, so the four token rows a warp's store
    // touches fall on different banks), then 16-byte runs of 8 weight rows go to y, where a
    // thread's own values are single elements 8 rows and 1 token apart (v12 stored them so:
    // 128 two-byte stores a thread, each with its own address and bounds test).
    // d[j]: row 16 warp + g (+ 8 for [2], [3]) of the warpgroup's, tokens 8 j + 2 q (+ 1 for
    // [1], [3]) of the tile.
    constexpr int YS_PITCH = RF_QGEMM_ROWS * 2 + 16;
    static_assert(RF_QGEMM_TOKENS * YS_PITCH <= STAGES * (L::X_BYTES + L::W_BYTES), "the tile fits the ring");
    unsigned char* ys = xs;
    const int g = lane / 4, q = lane % 4;
    const int wrow = me * MATH_ROWS + 16 * warp + g;
    rf_named_barrier(1, 128 * RF_QGEMM_MATH_WGS); // the other warpgroup's wgmma read x from here
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = 0; j < RF_QGEMM_TOKENS / 8; ++j) {
#pragma unroll
            for (int c = 0; c < 2; ++c)
                *(T*)(ys + (8 * j + 2 * q + c) * YS_PITCH + (wrow + 8 * h) * 2) = rf_from_float<T>(d[j][2 * h + c]);
        }
    }
    rf_named_barrier(1, 128 * RF_QGEMM_MATH_WGS);
    // Thread i of the 256 stores runs i + 256 u: token run / 16 of the tile, rows 8 (run % 16) ..
    // + 7 of the block's, whole where they lie inside y and y allows 16-byte stores.
    T* y = (T*)p.y;
    const int t0 = blockIdx.x * RF_QGEMM_TOKENS;
    const int math_thread = threadIdx.x - 128;
    const bool vectors = (size_t)p.y % 16 == 0 && p.y_ld % 8 == 0;
    constexpr int RUNS = RF_QGEMM_TOKENS * RF_QGEMM_ROWS / 8;
#pragma unroll 4
    for (int run = math_thread; run < RUNS; run += 128 * RF_QGEMM_MATH_WGS) {
        const int tt = run / (RF_QGEMM_ROWS / 8), rr = 8 * (run % (RF_QGEMM_ROWS / 8));
        const int t = t0 + tt, r = r0 + rr;
        if (t >= p.tokens || r >= p.rows) continue;
        const uint4 v = *(const uint4*)(ys + tt * YS_PITCH + rr * 2);
        T* out = y + (rf_u64)t * p.y_ld + r;
        if (vectors && r + 8 <= p.rows) {
            *(uint4*)out = v;
        } else {
            const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if (r + i < p.rows) *(unsigned short*)(out + i) = (unsigned short)(w[i / 2] >> (16 * (i % 2)));
            }
        }
    }
}

// x [tokens, k] (leading dimension x_ld) into tiles: for each RF_QGEMM_TOKENS-token block b and
// 64-k column block c, RF_QGEMM_TILE_BYTES at ((b * k / 64) + c) * RF_QGEMM_TILE_BYTES, token row
// r's 16-byte chunk j at r * 128 + ((j ^ r % 8) << 4): the 128-byte-swizzled layout the wgmma
// reads, so the GEMM copies a stage with one bulk copy. The columns are permuted within each
// block of 64: word i (columns 2 i, 2 i + 1) of chunk j is the row's word m = j + 8 i, so that the
// wgmma's k 16 kk + 8 h + 2 q + {0, 1} are columns 16 q + 4 kk + 2 h + {0, 1}: the math thread
// holding those A elements decodes 16 contiguous columns of W (a sum over k is the same in any
// order of k). With x_order RF_QGEMM_X_NIBBLE_PAIRS it is word m with bits 2 and 3 swapped
// (columns' bits 3 and 4), so the thread's 16 are two runs of 8, 16 apart. Rows past the last
// token are zero. A thread a chunk.
RF_DEVICE int rf_qgemm_x_word(int m, int x_order) {
    return x_order == RF_QGEMM_X_NIBBLE_PAIRS ? (m & ~12) | ((m & 4) << 1) | ((m & 8) >> 1) : m;
}

template <typename T> RF_DEVICE void rf_qgemm_pack_x(const rf_qgemm_params& p) {
    const rf_u64 blocks64 = (rf_u64)p.k / 64;
    const rf_u64 chunks = (rf_u64)((p.tokens + RF_QGEMM_TOKENS - 1) / RF_QGEMM_TOKENS) * blocks64 * RF_QGEMM_TOKENS * 8;
    for (rf_u64 i = blockIdx.x * (rf_u64)blockDim.x + threadIdx.x; i < chunks; i += (rf_u64)gridDim.x * blockDim.x) {
        const int j = (int)(i % 8), r = (int)(i / 8 % RF_QGEMM_TOKENS);
        const rf_u64 tile = i / (8 * RF_QGEMM_TOKENS);
        const rf_u64 b = tile / blocks64, c = tile % blocks64;
        const rf_u64 t = b * RF_QGEMM_TOKENS + r;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (t < (rf_u64)p.tokens) {
            const unsigned* row = (const unsigned*)((const T*)p.x + t * p.x_ld + c * 64);
            v = make_uint4(row[rf_qgemm_x_word(j, p.x_order)], row[rf_qgemm_x_word(j + 8, p.x_order)],
                           row[rf_qgemm_x_word(j + 16, p.x_order)], row[rf_qgemm_x_word(j + 24, p.x_order)]);
        }
        *(uint4*)((unsigned char*)p.x_tiles + tile * RF_QGEMM_TILE_BYTES + r * 128 + ((j ^ (r % 8)) << 4)) = v;
    }
}

// Entry points rf_qgemm_wgmma_<format>_<T>, one block an SM, with the shape the ABI header
// gives the launcher (rocmforge_quant_gemm_abi.h: STAGES buffers as fit in the 227 KiB of an sm_90
// block; the launcher's Shape::shared_bytes is the dynamic shared memory they take).
// Registers: 56 a copying thread (fewer spill), 224 a math thread (accumulators 128, two chunks'
// fragments 32).
#define RF_QGEMM_ENTRY(T, TNAME, F, FNAME, STAGES)                                                              \
    RF_KERNEL void __launch_bounds__(RF_QGEMM_THREADS, 1)                                                       \
        rf_qgemm_wgmma_##FNAME##_##TNAME(rf_qgemm_params p, const __grid_constant__ rf_tensor_map w_map) {      \
        rf_qgemm_wgmma<T, F, STAGES, 56, 224>(p, w_map);                                                        \
    }
#define RF_QGEMM_ENTRIES(F, FNAME, NAME)                                                                      \
    static_assert(F::KS == RF_QGEMM_##NAME##_KS && F::BOX == RF_QGEMM_##NAME##_BOX &&                          \
                      F::BOXES == RF_QGEMM_##NAME##_BOXES && F::X_ORDER == RF_QGEMM_##NAME##_X_ORDER,                                                    \
                  "ABI shape");                                                                               \
    RF_QGEMM_ENTRY(__half, f16, F, FNAME, RF_QGEMM_##NAME##_STAGES)                                          \
    RF_QGEMM_ENTRY(rf_bf16, bf16, F, FNAME, RF_QGEMM_##NAME##_STAGES)
RF_QGEMM_ENTRIES(rf_qg_q8_0, q8_0, Q8_0)
RF_QGEMM_ENTRIES(rf_qg_q4_0, q4_0, Q4_0)
RF_QGEMM_ENTRIES(rf_qg_mxfp4, mxfp4, MXFP4)
RF_QGEMM_ENTRIES(rf_qg_kquant_affine<false>, q4_k, Q4_K)
RF_QGEMM_ENTRIES(rf_qg_kquant_affine<true>, q5_k, Q5_K)
RF_QGEMM_ENTRIES(rf_qg_q6_k, q6_k, Q6_K)

RF_KERNEL void rf_qgemm_pack_x_f16(rf_qgemm_params p) { rf_qgemm_pack_x<__half>(p); }
RF_KERNEL void rf_qgemm_pack_x_bf16(rf_qgemm_params p) { rf_qgemm_pack_x<rf_bf16>(p); }

#endif // RF_WGMMA
