// Fused matrix-vector products with weights kept in ggml's block formats: q8_0, q4_0 and the
// k-quants q4_K, q5_K, q6_K (layouts in rocmforge_quant.h and crates/rocm-kernels/src/quant/).
// W is [rows, k] as GGUF stores it, row r being k / E consecutive blocks (E = 32, or 256 for the
// k-quants); x is [batch, k] and y [batch, rows], row-major, f32, f16 or bf16 (<dt>):
//
//   rf_qmv_<fmt>_b<BC>_<dt>(products, x, k, batch):  y[b][r] = sum_c W[r][c] x[b][c]
//
// for each of up to RF_QMV_MAX_PRODUCTS products (W, y, rows) over the same x and k in one
// launch (rf_qmv_products): a layer's Q, K and V, or its gate and up projections. A launch this
// wide reads its weight closer to the copy rate than three short ones (the 1024-row K and V
// projections alone cannot fill the memory pipeline), and each output is computed exactly as a
// launch of its product alone would compute it.
//
// Decoding (one token, batch 1) is memory-bound: the packed weight is nearly all the traffic, and
// at 4.5 bits an element the instruction budget is a handful of operations an element. The
// design follows from both:
//
// Work. A thread block (RF_QMV_THREADS = 128 threads: 4 warps of 32, or 2 wavefronts of 64) owns
// a row group of RF_QMV_ROWS = 4 rows at a time (grid-stride over row groups). Its threads split
// the rows' k: a row is k / 32 units of 32 elements (a q8_0 / q4_0 block, or an eighth of a
// k-quant super-block), and thread t takes units t, t + 128, ... of all 4 rows at once. So each
// activation a thread loads (and converts from f16/bf16) serves 4 rows, and at k = 4096 a
// 128-thread block holds a whole 4-row group with one unit a thread a row, all its loads in
// flight together. The block count (rows / 4) is what fills the GPU; no split of k across blocks,
// so no atomics and the same bits every run.
//
// Batch. BC accumulators a row (BC = 1, 2, 4, 8: the entry's _b<BC>): one pass over the row group
// serves BC activation vectors, so each weight byte is read once per launch for batch <= 8. A
// larger batch makes several passes over the same rows, whose bytes the first pass has just
// brought into the caches. Vectors past the batch in a pass are neither read nor stored.
//
// Loads. Every thread reads its unit of each row straight into registers, no shared memory
// staging and no synchronisation in the loop. q4_K (144-byte) and q5_K (176-byte) blocks keep
// the weight's 16-byte alignment, so a unit is two (three) 16-byte loads: the super-block's
// 16-byte header and the unit's 16 bytes of nibbles (and fifth bits). q8_0 (34 bytes), q4_0
// (18) and q6_K (210) blocks are only 2-byte aligned: a unit's payload is read as the aligned
// 16-byte vectors that cover it, and the 16 bytes at the payload's offset (an even 0..14) are cut
// out with a two-level select on the word offset and a funnel shift (rf_qmv_words_at). Its scales
// are 16-bit and byte loads. (A one-time re-layout into aligned rows would save that select,
// about 15 integer operations per 16 bytes; it was not taken: GGUF's own bytes load as they are,
// and these formats have the largest instruction budgets per byte, q4_0 aside.) Neighbouring
// threads read neighbouring units, so each warp load covers a few consecutive 128-byte lines. No
// load reads past the weight's last byte (rf_qmv_load16_upto).
//
// Arithmetic. Each unit is two runs of 16 elements under one scale each. A code c (a byte after
// cutting it out: nibble, nibble plus fifth bit, six bits, or an i8 offset by 128) becomes the
// float c - ZERO exactly (NVIDIA: the byte placed under the exponent of 2^23 with one byte
// permute, minus 2^23 + ZERO; AMD: v_cvt_f32_ubyte, minus ZERO). Passes of 1 and 2 vectors,
// where operations an element decide the speed, factor the scales out of each run: S =
// sum (c - ZERO) x is an f32 FMA chain (element order), then
//   q8_0, q4_0, q6_K:  acc += d_run * S               (d_run = d, or d * sc for q6_K: exact)
//   q4_K, q5_K:        acc += step * S - min * sum x  (step = d * sc, min = dmin * m: exact)
// Passes of 4 and 8 form each weight once (the codec's value exactly, below) and multiply it
// into every vector's sum, which saves the partial sums' registers and the activation sums.
// For the symmetric formats d_run * (c - ZERO) is exactly the codec's weight, so either form is a
// plain f32 dot product of the exact weights; for q4_K / q5_K the codec's weight
// step * c - min rounds once, and the factored form sums the two parts separately instead (one
// FMA an element instead of two): its rounding error is bounded by sum (|step c| + |min|) |x|
// rather than sum |w x|. The tests derive their tolerances from exactly that (quant/matvec.rs).
//
// Reduction. Each thread ends a pass with 4 * BC partial sums. A warp reduces them with a
// reduce-scatter butterfly (each exchange halves the values a lane holds: 2 (4 BC - 1) shuffles
// instead of 4 BC log2(warp)), so lane groups hold one total each; one lane of each group
// stores it in shared memory, and after one barrier thread v < 4 * BC adds the warps' totals in
// warp order and stores y. Rows past `rows` and vectors past `batch` are never stored.
//
// Entry: each product's rows >= 1 (0: unused), their row groups together below 2^31, k % E == 0 (k = 0 stores zeros), 1 <= batch;
// blockDim.x a whole number of warps up to RF_QMV_THREADS; every w and y, and x, 16-byte aligned; row bytes and k * RF_QMV_MAX_BATCH below
// 2^31 (32-bit offsets inside a row and a pass). The launcher (quant/matvec.rs) checks all of it.

#include "rocmforge_quant.h"
#include "rocmforge_quant_matvec_abi.h"

// ---------------------------------------------------------------------------------------------
// Loading pieces of blocks
// ---------------------------------------------------------------------------------------------

// The 16-byte vector at p (16-byte aligned), which starts inside the weight. GUARD (the row
// group that holds the weight's last row): only the bytes below `end` are read, the others are
// zero; formats' sizes are even, so the vector holding the weight's last bytes is read as whole
// 16-bit halves. Every other row group reads plain vectors: its pieces are followed by more of
// the weight.
// A 16-byte vector of a weight (which nothing writes while the kernel runs). On NVIDIA through
// the read-only data path (ld.global.nc): the weights' pointers come from the product list, a
// struct the kernel indexes, so the compiler can no longer tell by itself that they point to
// global memory that the launch does not write.
RF_DEVICE uint4 rf_qmv_load16_weight(const unsigned char* p) {
#if RF_PLATFORM_NVIDIA
    return __ldg(reinterpret_cast<const uint4*>(p));
#else
    return rf_load16(p);
#endif
}

// The weight's 16-bit field (an f16 scale, 2-byte aligned) and byte at p, the same way.
RF_DEVICE unsigned short rf_qmv_load_u16(const unsigned char* p) {
#if RF_PLATFORM_NVIDIA
    return __ldg(reinterpret_cast<const unsigned short*>(p));
#else
    return *reinterpret_cast<const unsigned short*>(p);
#endif
}

RF_DEVICE unsigned char rf_qmv_load_u8(const unsigned char* p) {
#if RF_PLATFORM_NVIDIA
    return __ldg(p);
#else
    return *p;
#endif
}

template <bool GUARD> RF_DEVICE uint4 rf_qmv_load16_upto(const unsigned char* p, const unsigned char* end) {
    if (!GUARD || p + 16 <= end) {
        return rf_qmv_load16_weight(p);
    }
    unsigned int v[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (p + 2 * i < end) {
            v[i >> 1] |= (unsigned int)rf_qmv_load_u16(p + 2 * i) << (16 * (i & 1));
        }
    }
    return make_uint4(v[0], v[1], v[2], v[3]);
}

RF_DEVICE void rf_qmv_words_of(uint4 v, unsigned int* w) {
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
}

// out[i] = the 32-bit word at bytes at + 4i .. of the window v (NW little-endian words), for an
// even `at` below 16: a select on bit 3 of `at` (two words), one on bit 2 (one word), then a
// funnel shift by the rest (0 or 16 bits). About 2.5 integer operations an output word.
template <int N, int NW>
RF_DEVICE void rf_qmv_words_at(const unsigned int (&v)[NW], unsigned int at, unsigned int (&out)[N]) {
    static_assert(NW >= N + 4, "the window must reach 15 bytes past the piece's first word");
    const bool two = (at & 8u) != 0u;
    const bool one = (at & 4u) != 0u;
    unsigned int u[N + 2];
#pragma unroll
    for (int i = 0; i < N + 2; ++i) {
        u[i] = two ? v[i + 2] : v[i];
    }
    unsigned int t[N + 1];
#pragma unroll
    for (int i = 0; i < N + 1; ++i) {
        t[i] = one ? u[i + 1] : u[i];
    }
    const unsigned int shift = 8u * (at & 3u);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        out[i] = __funnelshift_r(t[i], t[i + 1], shift);
    }
}

// The 4 words (16 bytes) at p (2-byte aligned), which lie inside the weight; the second of the
// two vectors that cover them is read up to `end` only where GUARD (rf_qmv_load16_upto).
template <bool GUARD>
RF_DEVICE void rf_qmv_piece16(const unsigned char* p, const unsigned char* end, unsigned int (&out)[4]) {
    const unsigned int at = (unsigned int)((rf_u64)p & 15u);
    const unsigned char* const v = p - at;
    unsigned int w[8];
    rf_qmv_words_of(rf_qmv_load16_weight(v), w);
    // The second vector holds part of the piece only when it is not aligned.
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    rf_qmv_words_of(at == 0u ? zero : rf_qmv_load16_upto<GUARD>(v + 16, end), w + 4);
    rf_qmv_words_at<4>(w, at, out);
}

// Rotation left by n (mod 32): moves a bit field of every byte to another place in each byte.
RF_DEVICE unsigned int rf_qmv_rotl(unsigned int x, unsigned int n) { return __funnelshift_l(x, x, n); }

RF_DEVICE float rf_qmv_half(unsigned int bits) { return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu))); }

// ---------------------------------------------------------------------------------------------
// Codes to floats
// ---------------------------------------------------------------------------------------------

// Byte e (0..3; a constant once unrolled) of w, as the float byte - zero, exactly (bytes and the
// zero points 0, 8, 32, 128 are small integers). NVIDIA: the byte under the exponent field of
// 2^23 with one byte permute is the float 2^23 + byte; subtracting 2^23 + zero (one FADD; the
// sum is exact) leaves the value. Cheaper than an integer-to-float conversion, which runs at a
// quarter of the FMA rate or less. AMD: v_cvt_f32_ubyte<e> converts a byte of a register in one
// instruction.
RF_DEVICE float rf_qmv_byte(unsigned int w, int e, float zero) {
#if RF_PLATFORM_NVIDIA
    // Selector bytes (high to low): byte 3 of the constant, two of its zero bytes, byte e of w
    // (bytes 4..7 of the pair). The constant goes first: SASS takes the selector as an immediate
    // only with the constant in a register; the other way round ptxas made the selector a
    // register and re-materialised it before most byte permutes (1 MOV in 2 elements).
    return __uint_as_float(__byte_perm(0x4B000000u, w, 0x3004u + (unsigned int)e)) - (8388608.0f + zero);
#else
    return (float)((w >> (8 * e)) & 0xffu) - zero;
#endif
}

// ---------------------------------------------------------------------------------------------
// Formats. A unit is part `p` (0 .. UNITS) of a block: 32 elements in two runs of 16 consecutive
// elements, each run under one scale. Each format has
//   BLOCK_ELEMS, BLOCK_BYTES, UNITS;
//   ZERO     the zero point: a run's code byte c stands for c - ZERO (times the run's scale);
//   AFFINE   whether a run also subtracts an offset (q4_K, q5_K: step * q - min);
//   Part     what a thread's fixed part p determines (computed once: p is the thread index mod
//            UNITS, since a block's threads advance by a multiple of 8 units);
//   Raw      a unit's bytes, as a thread holds them;
//   load<GUARD>(block, part, end, raw)   the unit of the block at `block` (the weight ends at
//                                 `end`, which GUARD loads must not read past);
//   run_elem(part, r)             the first element of run r (0, 1) inside the block;
//   codes(raw, part, r, c)        run r's 16 code bytes, element 4i + e in byte e of c[i];
//   scales(raw, part, step, min)  each run's scale (and offset; 0 where not AFFINE).
// ---------------------------------------------------------------------------------------------

// q8_0: d (f16), then 32 i8 codes; one unit a block.
struct rf_qmv_q8_0 {
    static constexpr int BLOCK_ELEMS = RF_QK;
    static constexpr int BLOCK_BYTES = 34;
    static constexpr int UNITS = 1;
    static constexpr bool AFFINE = false;
    // The codes are read with their sign bit flipped (c ^ 0x80 = q + 128).
    static constexpr float ZERO = 128.0f;
    struct Part {};
    struct Raw {
        unsigned int q[8];
        unsigned int d;
    };
    static RF_DEVICE Part part(int) { return Part{}; }
    template <bool GUARD>
    static RF_DEVICE void load(const unsigned char* block, Part, const unsigned char* end, Raw& raw) {
        raw.d = rf_qmv_load_u16(block);
        const unsigned char* const payload = block + 2;
        const unsigned int at = (unsigned int)((rf_u64)payload & 15u);
        const unsigned char* const v = payload - at;
        // The first two vectors end at or before the payload's end, inside the weight; the third
        // holds part of it only when the payload is not aligned, and may hold the weight's end.
        unsigned int w[12];
        rf_qmv_words_of(rf_qmv_load16_weight(v), w);
        rf_qmv_words_of(rf_qmv_load16_weight(v + 16), w + 4);
        const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
        rf_qmv_words_of(at == 0u ? zero : rf_qmv_load16_upto<GUARD>(v + 32, end), w + 8);
        rf_qmv_words_at<8>(w, at, raw.q);
    }
    static RF_DEVICE int run_elem(Part, int r) { return 16 * r; }
    static RF_DEVICE void codes(const Raw& raw, Part, int r, unsigned int (&c)[4]) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c[i] = raw.q[4 * r + i] ^ 0x80808080u;
        }
    }
    static RF_DEVICE void scales(const Raw& raw, Part, float (&step)[2], float (&min)[2]) {
        step[0] = step[1] = rf_qmv_half(raw.d);
        min[0] = min[1] = 0.0f;
    }
};

// q4_0: d (f16), then 16 bytes: element j < 16 the low nibble of byte j, j + 16 its high nibble;
// one unit a block, the runs being the low and the high nibbles.
struct rf_qmv_q4_0 {
    static constexpr int BLOCK_ELEMS = RF_QK;
    static constexpr int BLOCK_BYTES = 18;
    static constexpr int UNITS = 1;
    static constexpr bool AFFINE = false;
    static constexpr float ZERO = 8.0f;
    struct Part {};
    struct Raw {
        unsigned int q[4];
        unsigned int d;
    };
    static RF_DEVICE Part part(int) { return Part{}; }
    template <bool GUARD>
    static RF_DEVICE void load(const unsigned char* block, Part, const unsigned char* end, Raw& raw) {
        raw.d = rf_qmv_load_u16(block);
        rf_qmv_piece16<GUARD>(block + 2, end, raw.q);
    }
    static RF_DEVICE int run_elem(Part, int r) { return 16 * r; }
    static RF_DEVICE void codes(const Raw& raw, Part, int r, unsigned int (&c)[4]) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c[i] = (raw.q[i] >> (4 * r)) & 0x0F0F0F0Fu;
        }
    }
    static RF_DEVICE void scales(const Raw& raw, Part, float (&step)[2], float (&min)[2]) {
        step[0] = step[1] = rf_qmv_half(raw.d);
        min[0] = min[1] = 0.0f;
    }
};

// q4_K and q5_K: a 16-byte header (f16 d, f16 dmin, 12 bytes of 6-bit scales and mins), then
// (q5_K) 32 bytes of fifth bits, then 128 bytes of nibbles. Unit p holds nibble bytes
// 16p .. 16p + 16: chunk c = p / 2 of 64 elements, half p % 2; its low nibbles (run 0) are
// elements 64c + 16 (p % 2) + l of sub-block 2c, its high nibbles (run 1) elements 32 further,
// of sub-block 2c + 1. The fifth bits of those elements are bits 2c and 2c + 1 of qh[16 (p % 2)
// + l], 16 bytes every unit of the same half shares.
template <bool FIFTH_BIT> struct rf_qmv_kquant_affine {
    static constexpr int BLOCK_ELEMS = RF_QK_K;
    static constexpr int BLOCK_BYTES = FIFTH_BIT ? 176 : 144;
    static constexpr int UNITS = 8;
    static constexpr bool AFFINE = true;
    static constexpr float ZERO = 0.0f;
    static constexpr int QS = FIFTH_BIT ? 48 : 16;
    struct Part {
        int p;
        // The unit's sub-blocks 2c, 2c + 1 are the scale bytes 2 (c % 2), 2 (c % 2) + 1 of the
        // low (c < 2) or high (c >= 2) unpacked scale words: which, and the shift that brings them
        // to bytes 0 and 1.
        bool high;
        unsigned int shift;
        // The rotations that bring fifth bits 2c and 2c + 1 of each qh byte to bit 4.
        unsigned int rot0, rot1;
    };
    struct Raw {
        uint4 head;
        uint4 qs;
        uint4 qh; // q5_K only
    };
    static RF_DEVICE Part part(int p) {
        const int c = p >> 1;
        return Part{p, c >= 2, 16u * (unsigned int)(c & 1), (unsigned int)(4 - 2 * c) & 31u,
                    (unsigned int)(3 - 2 * c) & 31u};
    }
    template <bool GUARD>
    static RF_DEVICE void load(const unsigned char* block, const Part& part, const unsigned char*, Raw& raw) {
        // 144 and 176 are multiples of 16: every block of a 16-byte aligned weight is aligned,
        // and every load lies inside its block (no guard).
        raw.head = rf_qmv_load16_weight(block);
        raw.qs = rf_qmv_load16_weight(block + QS + 16 * part.p);
        if (FIFTH_BIT) {
            raw.qh = rf_qmv_load16_weight(block + 16 + 16 * (part.p & 1));
        } else {
            raw.qh = make_uint4(0u, 0u, 0u, 0u);
        }
    }
    static RF_DEVICE int run_elem(const Part& part, int r) { return 64 * (part.p >> 1) + 32 * r + 16 * (part.p & 1); }
    static RF_DEVICE void codes(const Raw& raw, const Part& part, int r, unsigned int (&c)[4]) {
        unsigned int q[4], h[4];
        rf_qmv_words_of(raw.qs, q);
        rf_qmv_words_of(raw.qh, h);
        const unsigned int rot = r == 0 ? part.rot0 : part.rot1;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c[i] = (q[i] >> (4 * r)) & 0x0F0F0F0Fu;
            if (FIFTH_BIT) {
                c[i] |= rf_qmv_rotl(h[i], rot) & 0x10101010u;
            }
        }
    }
    // rf_kquant_scale_min (rocmforge_quant.h) for four sub-blocks at a time: bytes 0..3 of the
    // low words are sub-blocks 0..3, of the high words 4..7.
    static RF_DEVICE void scales(const Raw& raw, const Part& part, float (&step)[2], float (&min)[2]) {
        const unsigned int b0 = raw.head.y; // packed bytes 0..3
        const unsigned int b1 = raw.head.z; // 4..7
        const unsigned int b2 = raw.head.w; // 8..11
        const unsigned int sc = part.high ? (b2 & 0x0F0F0F0Fu) | ((b0 >> 2) & 0x30303030u) : b0 & 0x3F3F3F3Fu;
        const unsigned int m =
            part.high ? ((b2 >> 4) & 0x0F0F0F0Fu) | ((b1 >> 2) & 0x30303030u) : b1 & 0x3F3F3F3Fu;
        const float d = rf_qmv_half(raw.head.x);
        const float dmin = rf_qmv_half(raw.head.x >> 16);
        // d * sc and dmin * m: an f16 times a 6-bit integer, exact, as the codec forms them.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            step[r] = d * rf_qmv_byte(sc >> part.shift, r, 0.0f);
            min[r] = dmin * rf_qmv_byte(m >> part.shift, r, 0.0f);
        }
    }
};

typedef rf_qmv_kquant_affine<false> rf_qmv_q4_k;
typedef rf_qmv_kquant_affine<true> rf_qmv_q5_k;

// q6_K: 128 bytes of low nibbles (ql), 64 of high bit pairs (qh), 16 i8 scales, f16 d. Element
// 128h + 32k + l (k < 4, l < 32): nibble k / 2 of ql[64h + 32 (k % 2) + l], bits 2k, 2k + 1 of
// qh[32h + l]. Unit p = 4h + 2m + g holds ql bytes 64h + 32m + 16g .. + 16 and qh bytes
// 32h + 16g .. + 16: run 0 (k = m, low nibbles) is elements 128h + 32m + 16g + l of sub-block
// 8h + 2m + g, run 1 (k = m + 2, high nibbles) the elements 64 further, of sub-block 8h + 2m + 4
// + g.
struct rf_qmv_q6_k {
    static constexpr int BLOCK_ELEMS = RF_QK_K;
    static constexpr int BLOCK_BYTES = 210;
    static constexpr int UNITS = 8;
    static constexpr bool AFFINE = false;
    static constexpr float ZERO = 32.0f;
    struct Part {
        int ql;    // the unit's ql bytes, from the block's start
        int qh;    // its qh bytes
        int scale; // run 0's scale byte (run 1's is 4 further)
        int elem;  // run 0's first element (run 1's is 64 further)
        unsigned int rot0, rot1; // bring bits 2k, 2k + 1 of each qh byte to bits 4, 5
    };
    struct Raw {
        unsigned int ql[4];
        unsigned int qh[4];
        int sc0, sc1;
        unsigned int d;
    };
    static RF_DEVICE Part part(int p) {
        const int h = p >> 2, m = (p >> 1) & 1, g = p & 1;
        return Part{64 * h + 32 * m + 16 * g, 128 + 32 * h + 16 * g, 192 + 8 * h + 2 * m + g,
                    128 * h + 32 * m + 16 * g, (unsigned int)(4 - 2 * m) & 31u, (unsigned int)(-2 * m) & 31u};
    }
    template <bool GUARD>
    static RF_DEVICE void load(const unsigned char* block, const Part& part, const unsigned char* end, Raw& raw) {
        // Both pieces sit at least 32 bytes before the block's end (ql ends by byte 128, qh by
        // 192, the block at 210), so their covering vectors lie inside the block (no guard).
        rf_qmv_piece16<false>(block + part.ql, end, raw.ql);
        rf_qmv_piece16<false>(block + part.qh, end, raw.qh);
        raw.sc0 = (signed char)rf_qmv_load_u8(block + part.scale);
        raw.sc1 = (signed char)rf_qmv_load_u8(block + part.scale + 4);
        raw.d = rf_qmv_load_u16(block + 208);
    }
    static RF_DEVICE int run_elem(const Part& part, int r) { return part.elem + 64 * r; }
    static RF_DEVICE void codes(const Raw& raw, const Part& part, int r, unsigned int (&c)[4]) {
        const unsigned int rot = r == 0 ? part.rot0 : part.rot1;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c[i] = ((raw.ql[i] >> (4 * r)) & 0x0F0F0F0Fu) | (rf_qmv_rotl(raw.qh[i], rot) & 0x30303030u);
        }
    }
    static RF_DEVICE void scales(const Raw& raw, const Part&, float (&step)[2], float (&min)[2]) {
        // d * sc: an f16 times an i8, exact, as the codec forms it.
        const float d = rf_qmv_half(raw.d);
        step[0] = d * (float)raw.sc0;
        step[1] = d * (float)raw.sc1;
        min[0] = min[1] = 0.0f;
    }
};

// ---------------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------------

// x[0..4) as floats (p 4-element aligned: 16 bytes for f32, 8 for f16 / bf16).
template <typename T> RF_DEVICE void rf_qmv_x4(const T* p, float (&f)[4]);
template <> RF_DEVICE void rf_qmv_x4<float>(const float* p, float (&f)[4]) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    f[0] = v.x;
    f[1] = v.y;
    f[2] = v.z;
    f[3] = v.w;
}
template <typename T> RF_DEVICE void rf_qmv_x4_16bit(const T* p, float (&f)[4]) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    rf_unpack2_bits16<T>(v.x, f);
    rf_unpack2_bits16<T>(v.y, f + 2);
}
template <> RF_DEVICE void rf_qmv_x4<__half>(const __half* p, float (&f)[4]) { rf_qmv_x4_16bit(p, f); }
template <> RF_DEVICE void rf_qmv_x4<rf_bf16>(const rf_bf16* p, float (&f)[4]) { rf_qmv_x4_16bit(p, f); }

// ---------------------------------------------------------------------------------------------
// The product
// ---------------------------------------------------------------------------------------------

// Run r of the R rows' units into acc[row][b] for the nb (<= BC) vectors. xr: the run's first
// activation of vector 0; vector b is b * k further. Two forms, by the pass width:
//   factored (BC <= 2): S = sum (c - ZERO) x over the run's 16 elements (one FMA chain a row and
//     vector, element order), then acc += step * S, and for AFFINE formats acc -= min * sum x.
//     Per element and row: a byte permute, an add and BC FMAs.
//   direct (BC >= 4): each element's weight, the codec's value exactly (step * (c - ZERO), or
//     fma(step, c, -min): the product is exact, so one rounding as the codec's), then an FMA a
//     vector. One more operation an element and row, but no partial sums to keep (4 x BC
//     registers fewer) and no activation sums (BC / 4 adds an element and row).
template <typename F, typename T, int R, int BC>
RF_DEVICE void rf_qmv_run(const typename F::Raw (&raw)[R], const typename F::Part& part, int r, const T* xr,
                          unsigned int k, int nb, const float (&step)[R][2], const float (&min)[R][2],
                          float (&acc)[R][BC]) {
    constexpr bool FACTORED = BC <= 2;
    unsigned int codes[R][4];
#pragma unroll
    for (int row = 0; row < R; ++row) {
        F::codes(raw[row], part, r, codes[row]);
    }
    float s[R][BC];
    float sx[BC];
#pragma unroll
    for (int b = 0; b < BC; ++b) {
        sx[b] = 0.0f;
#pragma unroll
        for (int row = 0; row < R; ++row) {
            s[row][b] = 0.0f;
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float q[R][4];
#pragma unroll
        for (int row = 0; row < R; ++row) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float c = rf_qmv_byte(codes[row][i], e, F::ZERO);
                if (FACTORED) {
                    q[row][e] = c;
                } else if (F::AFFINE) {
                    q[row][e] = fmaf(step[row][r], c, -min[row][r]);
                } else {
                    q[row][e] = step[row][r] * c;
                }
            }
        }
#pragma unroll
        for (int b = 0; b < BC; ++b) {
            if (b < nb) {
                float xv[4];
                rf_qmv_x4<T>(xr + b * k + 4 * i, xv);
                if (FACTORED && F::AFFINE) {
                    sx[b] += (xv[0] + xv[1]) + (xv[2] + xv[3]);
                }
#pragma unroll
                for (int row = 0; row < R; ++row) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        if (FACTORED) {
                            s[row][b] = fmaf(q[row][e], xv[e], s[row][b]);
                        } else {
                            acc[row][b] = fmaf(q[row][e], xv[e], acc[row][b]);
                        }
                    }
                }
            }
        }
    }
    if (FACTORED) {
#pragma unroll
        for (int row = 0; row < R; ++row) {
#pragma unroll
            for (int b = 0; b < BC; ++b) {
                acc[row][b] = fmaf(step[row][r], s[row][b], acc[row][b]);
                if (F::AFFINE) {
                    acc[row][b] = fmaf(-min[row][r], sx[b], acc[row][b]);
                }
            }
        }
    }
}

// One exchange of the reduce-scatter below: with `mask` the partner's lane bit, a lane keeps
// the half of v[0 .. 2 HALF) its bit selects, added to its partner's copy of that half, in
// v[0 .. HALF); then the next exchange, on the next lower bit. Recursion on a template
// parameter, so that every index is a constant and v stays in registers. Both halves are
// exchanged and the sum is selected, rather than the value to send: hipcc (clang 21, gfx11)
// turned `upper ? v[i] : v[HALF + i]` into a load from a selected address and put v in scratch
// memory.
template <int HALF, int V>
RF_DEVICE void rf_qmv_halve(float (&v)[V], unsigned int lane, unsigned int& mask, unsigned int& index) {
    if constexpr (HALF >= 1) {
        const bool upper = (lane & mask) != 0u;
#pragma unroll
        for (int i = 0; i < HALF; ++i) {
            const float lo = v[i];
            const float hi = v[HALF + i];
            const float lo_sum = lo + rf_shfl_xor(lo, (int)mask);
            const float hi_sum = hi + rf_shfl_xor(hi, (int)mask);
            v[i] = upper ? hi_sum : lo_sum;
        }
        index += upper ? (unsigned int)HALF : 0u;
        mask /= 2u;
        rf_qmv_halve<HALF / 2>(v, lane, mask, index);
    }
}

// The warp's sum of each of v[0..V) (V a power of two, at most the warp width) by recursive
// halving: after log2(V) exchanges every lane holds one value index, `*index`, summed over the
// lanes that differ from it in the top log2(V) lane bits; a butterfly over the remaining lane
// bits completes the sum. Every lane of a group gets the same bits (a + b == b + a).
// 2 (V - 1) + log2(width / V) shuffles instead of V log2(width).
template <int V> RF_DEVICE float rf_qmv_warp_reduce_scatter(float (&v)[V], unsigned int* index) {
    const unsigned int lane = (unsigned int)rf_lane_id();
    unsigned int mask = rf_warp_width() / 2u;
    unsigned int at = 0u;
    rf_qmv_halve<V / 2>(v, lane, mask, at);
    float total = v[0];
    for (; mask > 0u; mask /= 2u) {
        total += rf_shfl_xor(total, (int)mask);
    }
    *index = at;
    return total;
}

// One pass over a row group: every unit this thread takes of the R rows at `row` (their first
// blocks), for vectors xp[0 .. nb) (vector b at b * k), into acc. Rows and activations advance
// by the blocks a step of the block's threads covers.
template <typename F, typename T, int R, int BC, bool GUARD>
RF_DEVICE void rf_qmv_units(const unsigned char* const (&row)[R], const T* xp, const unsigned char* end,
                            const typename F::Part& part, unsigned int units, unsigned int k, int nb,
                            float (&acc)[R][BC]) {
    const unsigned int tid = threadIdx.x;
    const unsigned int threads = blockDim.x;
    // Units advance by blockDim.x, a multiple of UNITS (1 or 8): blocks advance by a constant.
    const unsigned int step_blocks = threads / (unsigned int)F::UNITS;
    const unsigned int first_block = tid / (unsigned int)F::UNITS;
    const unsigned char* p[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        p[r] = row[r] + (rf_u64)first_block * F::BLOCK_BYTES;
    }
    const T* xb = xp + (rf_u64)first_block * F::BLOCK_ELEMS;
    for (unsigned int u = tid; u < units; u += threads) {
        // Every row's loads first, so that they are in flight together.
        typename F::Raw raw[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            F::template load<GUARD>(p[r], part, end, raw[r]);
        }
        float step[R][2], min[R][2];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            F::scales(raw[r], part, step[r], min[r]);
        }
#pragma unroll
        for (int run = 0; run < 2; ++run) {
            rf_qmv_run<F, T, R, BC>(raw, part, run, xb + F::run_elem(part, run), k, nb, step, min, acc);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            p[r] += (rf_u64)step_blocks * F::BLOCK_BYTES;
        }
        xb += (rf_u64)step_blocks * F::BLOCK_ELEMS;
    }
}

// Row groups of RF_QMV_ROWS rows a product has.
RF_DEVICE rf_u64 rf_qmv_groups(rf_u64 rows) { return (rows + RF_QMV_ROWS - 1) / RF_QMV_ROWS; }

// The rows [row0, row0 + R) of one product (w, y, rows; `end` its weight's end) for every
// vector: passes of BC vectors, each reduced across the block into `totals` and stored.
template <typename F, typename T, int BC>
RF_DEVICE void rf_qmv_row_group(const unsigned char* w, const unsigned char* end, T* y, rf_u64 rows, rf_u64 row0,
                                const T* __restrict__ x, rf_u64 k, unsigned int batch,
                                float (&totals)[RF_QMV_THREADS / 32][RF_QMV_ROWS * BC]) {
    constexpr int R = RF_QMV_ROWS;
    constexpr int V = R * BC;
    const unsigned int tid = threadIdx.x;
    const unsigned int width = rf_warp_width();
    const unsigned int warp = tid / width;
    const unsigned int warps = blockDim.x / width;
    const unsigned int k32 = (unsigned int)k;
    const unsigned int units = k32 / F::BLOCK_ELEMS * F::UNITS;
    const rf_u64 row_bytes = k / F::BLOCK_ELEMS * F::BLOCK_BYTES;
    // A thread's part of every block it visits: units advance by blockDim.x, a multiple of 8.
    const typename F::Part part = F::part((int)(tid % (unsigned int)F::UNITS));
    const int nr = rows - row0 < (rf_u64)R ? (int)(rows - row0) : R;
    const unsigned char* row_at[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        // Rows past the end read the group's first row again (never stored): no branch
        // around the loads.
        row_at[r] = w + (r < nr ? row0 + r : row0) * row_bytes;
    }
    // Only the group holding the last row can reach the weight's end.
    const bool last_group = row0 + R >= rows;
    for (unsigned int b0 = 0; b0 < batch; b0 += BC) {
        const int nb = batch - b0 < (unsigned int)BC ? (int)(batch - b0) : BC;
        const T* const xp = x + (rf_u64)b0 * k;
        float acc[R][BC];
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int b = 0; b < BC; ++b) {
                acc[r][b] = 0.0f;
            }
        }
        if (last_group) {
            rf_qmv_units<F, T, R, BC, true>(row_at, xp, end, part, units, k32, nb, acc);
        } else {
            rf_qmv_units<F, T, R, BC, false>(row_at, xp, end, part, units, k32, nb, acc);
        }

        float v[V];
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int b = 0; b < BC; ++b) {
                v[r * BC + b] = acc[r][b];
            }
        }
        unsigned int index;
        const float total = rf_qmv_warp_reduce_scatter<V>(v, &index);
        // The first lane of each group that holds a value index (width / V lanes each).
        if ((tid % width) % (width / (unsigned int)V) == 0u) {
            totals[warp][index] = total;
        }
        __syncthreads();
        if (tid < (unsigned int)V) {
            float sum = 0.0f;
            for (unsigned int wi = 0; wi < warps; ++wi) {
                sum += totals[wi][tid];
            }
            const int r = (int)tid / BC;
            const int b = (int)tid % BC;
            if (r < nr && b < nb) {
                y[(rf_u64)(b0 + b) * rows + row0 + r] = rf_from_float<T>(sum);
            }
        }
        // The next pass (or row group) rewrites the totals.
        __syncthreads();
    }
}

template <typename F, typename T, int BC>
RF_DEVICE void rf_qmv(const rf_qmv_products& products, const T* __restrict__ x, rf_u64 k, unsigned int batch) {
    constexpr int V = RF_QMV_ROWS * BC;
    static_assert((V & (V - 1)) == 0 && V <= 32, "the warp reduction takes a power of two up to 32 values");
    // One slot per warp of 32 or more lanes and per (row, vector).
    __shared__ float totals[RF_QMV_THREADS / 32][V];
    const rf_u64 row_bytes = k / F::BLOCK_ELEMS * F::BLOCK_BYTES;

    // The block's row groups: blockIdx.x, then every gridDim.x-th, counted across the products
    // one after another. The products are taken in turn (a loop, not unrolled: one product's
    // pointers and sizes live at a time), the group index carried from one into the next. 32-bit
    // (fewer registers than 64: on sm_90a, 80 instead of 96 for q4_K, a sixth block an SM): the
    // launcher keeps the groups of all products and the grid below 2^31, so `group` cannot wrap.
    unsigned int group = blockIdx.x;
#pragma unroll 1
    for (int i = 0; i < RF_QMV_MAX_PRODUCTS; ++i) {
        const unsigned char* const w = products.w[i];
        T* const y = (T*)products.y[i];
        const rf_u64 rows = products.rows[i];
        const unsigned int groups = (unsigned int)rf_qmv_groups(rows);
        const unsigned char* const end = w + rows * row_bytes;
        for (; group < groups; group += gridDim.x) {
            rf_qmv_row_group<F, T, BC>(w, end, y, rows, (rf_u64)group * RF_QMV_ROWS, x, k, batch, totals);
        }
        group -= groups;
    }
}

#define RF_QMV_ENTRY(fmt, F, BC, suffix, T)                                                                     \
    RF_KERNEL void __launch_bounds__(RF_QMV_THREADS)                                                            \
        rf_qmv_##fmt##_b##BC##_##suffix(const rf_qmv_products products, const T* __restrict__ x, rf_u64 k,     \
                                        unsigned int batch) {                                                   \
        rf_qmv<F, T, BC>(products, x, k, batch);                                                                \
    }

#define RF_QMV_BATCHES(fmt, F, suffix, T) \
    RF_QMV_ENTRY(fmt, F, 1, suffix, T)    \
    RF_QMV_ENTRY(fmt, F, 2, suffix, T)    \
    RF_QMV_ENTRY(fmt, F, 4, suffix, T)    \
    RF_QMV_ENTRY(fmt, F, 8, suffix, T)

#define RF_QMV_Q8_0(suffix, T) RF_QMV_BATCHES(q8_0, rf_qmv_q8_0, suffix, T)
#define RF_QMV_Q4_0(suffix, T) RF_QMV_BATCHES(q4_0, rf_qmv_q4_0, suffix, T)
#define RF_QMV_Q4_K(suffix, T) RF_QMV_BATCHES(q4_k, rf_qmv_q4_k, suffix, T)
#define RF_QMV_Q5_K(suffix, T) RF_QMV_BATCHES(q5_k, rf_qmv_q5_k, suffix, T)
#define RF_QMV_Q6_K(suffix, T) RF_QMV_BATCHES(q6_k, rf_qmv_q6_k, suffix, T)

RF_FOR_EACH_DTYPE(RF_QMV_Q8_0)
RF_FOR_EACH_DTYPE(RF_QMV_Q4_0)
RF_FOR_EACH_DTYPE(RF_QMV_Q4_K)
RF_FOR_EACH_DTYPE(RF_QMV_Q5_K)
RF_FOR_EACH_DTYPE(RF_QMV_Q6_K)
