// rocmforge_qmvm_formats.h: the ggml block formats (q8_0, q4_0, q4_K, q5_K, q6_K) and MXFP4 as
// the NVIDIA matrix-core product kernels read them from shared memory: each code decoded into
// an exact f16/bf16 value in an mma.sync.m16n8k16 A fragment, each unit's sum times its scale
// added to f32 totals. Shared by quant_matvec_mma.hip (1 or 8 vectors a pass: a block's warps
// split the k of one 16-row tile) and quant_matmul_mma.hip (32 vectors a pass: each warp owns a
// 16-row tile of a 64-row block, and the block shares one staged x).
//
// A format F names CHUNK (elements of a row it decodes at a time), ROW (their bytes), SPAN (the
// bytes staged for them: ROW, or q6_K's 16-byte span around them), STAGES_B1 (the matrix-vector
// kernel's stages at one vector), and
//   chunk<BC, XT>(rg, rh, xv, t, acc): rows g (rg) and g + 8 (rh) of a staged chunk against x
//   (xv: the lane's vector g of n-tile 0; n-tile j's XT elements further), t = lane % 4, adding
//   into acc, one accumulator (rows g, g + 8 x vectors 2t, 2t + 1) an n-tile of 8 vectors.
//
// Fragments (lane = 4 g + t): per unit of 32 elements (a q8_0 block, a q4_K sub-block) thread
// t takes elements 8t .. 8t + 7 of rows g and g + 8 and of vector g (BC = 8; BC = 1: vector 0
// in every column, so every column holds the same sums). A's register pairs are consecutive
// elements (e0, e1), (e2, e3) | (e4, e5), (e6, e7), so B's pairs are x as it lies in memory:
// one 16-byte shared load gives both k16 steps' b0, b1. Each unit starts from a zero
// accumulator; D's f32 unit sums times the unit's scale go into f32 totals per row and vector,
// so every product is exact and every sum f32, as in the portable kernel (its allowed_error
// holds: at most 16 + 2 + k / 16 + 3 roundings on any term's way, fewer than k; units of 32
// elements, or q6_K's of 16).
//
// Codes to exact 16-bit values:
//   q4_K f16: a nibble under the f16 mantissa is its value times 2^-24 (a subnormal, which the
//     tensor cores take as it is), the high nibble of a byte masked in place its value times
//     2^-20: no shift, no subtraction. The unit sums are multiplied back by 2^24 or 2^20
//     (exact), folded into the scale.
//   q4_K bf16: a nibble under bf16 128's mantissa is 128 + c exactly; one packed FMA subtracts
//     128 (a bf16 subnormal times an activation would underflow f32, so no bit placement).
//   q5_K: as q4_K, each code's fifth bit (from qh, one bit a sub-block) or-ed in above its
//     nibble: codes up to 31 are still f16 subnormals, or 128 + c in bf16. q5_K takes q4_K's
//     chunk (two super-blocks) and stages.
//   q8_0 f16: a code's byte with its sign bit flipped under f16 1024's mantissa is
//     1024 + 128 + c; one packed subtraction of 1152.
//   q8_0 bf16: 128 + c needs 8 mantissa bits, bf16 has 7: the code goes through f32 (byte under
//     2^23, minus 2^23 + 128) and pairs are packed to bf16 (exact: |c| <= 128).
//   q4_0: a nibble under f16 1024's (bf16 128's) mantissa, minus 1032 (136): c - 8, exact. It
//     takes q8_0's chunk (8 blocks) and stages.
//   q6_K: the 6-bit code under the same mantissas, minus 1056 (160): q - 32, exact. Its scale
//     changes every 16 elements, so its units are 16 elements (one mma each), and its 420-byte
//     chunks are staged as 16-byte spans (rf_qmvm_q6_k).
// q4_K is affine (w = d sc q - dmin m): a unit adds step * S, S = sum q x from the mma and
// step = d sc formed as the codec forms it (exact: an f16 times a 6-bit integer, so infinite
// and NaN scales behave as the codec's); the mins go through the tensor cores too, A holding
// each unit's 6-bit min m (exact in f16 and bf16) against the unit's x, so that one accumulator
// sums m_s * sum x over a super-block's 8 units, times dmin once. Either way every term is
// exact before its first rounding and the sum of |step q x| + |min x| bounds the error, as in
// the portable kernel's factored form.

#ifndef ROCMFORGE_QMVM_FORMATS_H
#define ROCMFORGE_QMVM_FORMATS_H

#include "rocmforge_mma.h"
#include "rocmforge_quant.h"
#include "rocmforge_quant_matvec_abi.h"

#if RF_MMA_SYNC

// One unit: D (rows g, g + 8 x vectors 2t, 2t + 1) = A B over 32 elements, from zero. pg, ph:
// rows g and g + 8's pairs (e0 e1, e2 e3, e4 e5, e6 e7); xb: the matching x words.
template <typename T>
RF_DEVICE void rf_qmvm_unit(float (&d)[4], const unsigned (&pg)[4], const unsigned (&ph)[4], uint4 xb) {
    d[0] = d[1] = d[2] = d[3] = 0.0f;
    const unsigned a0[4] = {pg[0], ph[0], pg[1], ph[1]};
    const unsigned a1[4] = {pg[2], ph[2], pg[3], ph[3]};
    rf_mma<T>::run(d, a0, xb.x, xb.y);
    rf_mma<T>::run(d, a1, xb.z, xb.w);
}

// Totals of one lane: rows g, g + 8 x vectors 2t, 2t + 1 (acc[0], acc[1] | acc[2], acc[3]).
// BC = 1 keeps vector 0 only (columns all equal): acc[0] and acc[2].
template <int BC> RF_DEVICE void rf_qmvm_add(float (&acc)[4], const float (&d)[4], float sg, float sh) {
    acc[0] = fmaf(sg, d[0], acc[0]);
    acc[2] = fmaf(sh, d[2], acc[2]);
    if (BC > 1) {
        acc[1] = fmaf(sg, d[1], acc[1]);
        acc[3] = fmaf(sh, d[3], acc[3]);
    }
}

// A pass of BC vectors is N n-tiles of 8: one for BC = 1 (vector 0 in every column) and for
// BC = 8; BC / 8 for the wider passes of quant_matmul_mma.hip. A format's chunk<BC, XT>
// decodes each weight once and multiplies it into every n-tile, n-tile j's x lying XT elements
// after n-tile 0's; its totals are rf_qmvm_acc<BC>, one rf_qmvm_add accumulator an n-tile.
template <int BC> struct rf_qmvm_tiles {
    static constexpr int N = BC > 8 ? BC / 8 : 1;
};
template <int BC> using rf_qmvm_acc = float[rf_qmvm_tiles<BC>::N][4];

// (a & MASK) | bits in one LOP3. Written as C, with both constants known, ptxas emits two: a
// LOP3 holds one immediate, and it does not keep the other in a register on its own. Here `bits`
// is a register operand, so a decode's mask-and-place is one instruction.
template <unsigned MASK> RF_DEVICE unsigned rf_qmvm_and_or(unsigned a, unsigned bits) {
#ifdef RF_EMU_MMA_SYNC
    return (a & MASK) | bits; // the CPU emulator (crates/rocm-kernels/tests/amd_emu): the same function
#else
    unsigned r;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "n"(MASK), "r"(bits));
    return r;
#endif
}

// Exact 16-bit values of small codes. A code c placed in a half's mantissa under the exponent
// bits of f16 1024 (PLACED, 0x6400 | c, c below 2^10) or of bf16 128 (0x4300 | c, c below 2^7)
// is 1024 + c or 128 + c; less<O> subtracts 1024 + O or 128 + O from both halves, leaving c - O
// exactly (every value on the way is an integer the type holds). f16: one HSUB2; bf16: one
// packed FMA by 1. BYTES: the exponent byte four times, the second operand of a PRMT that
// spreads a word's code bytes 16 bits apart and places them at once.
template <typename T> struct rf_qmvm_placed;
template <> struct rf_qmvm_placed<__half> {
    static constexpr unsigned PLACED = 0x64006400u;
    static constexpr unsigned BYTES = 0x64646464u;
    template <unsigned O> static RF_DEVICE unsigned less(unsigned v) {
        const __half2 bias = __halves2half2(__ushort_as_half(0x6400u + O), __ushort_as_half(0x6400u + O));
        const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&v), bias);
        return *reinterpret_cast<const unsigned*>(&h);
    }
};
template <> struct rf_qmvm_placed<rf_bf16> {
    static constexpr unsigned PLACED = 0x43004300u;
    static constexpr unsigned BYTES = 0x43434343u;
    template <unsigned O> static RF_DEVICE unsigned less(unsigned v) {
        static_assert(O < 128, "128 + O is exact in bf16 below 256");
#ifdef RF_EMU_MMA_SYNC
        return emu_fma_bf16x2(v, 0x3f803f80u, (0xc300u + O) * 0x10001u); // the CPU emulator's
#else
        unsigned r;
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x3f803f80u), "r"((0xc300u + O) * 0x10001u));
        return r;
#endif
    }
};

// The 4 bytes at byte OFF + add of a word-aligned row (add a multiple of 4): one load, or two and a funnel shift.
template <int OFF> RF_DEVICE unsigned rf_qmvm_word(const unsigned char* row, int add) {
    const unsigned* p = reinterpret_cast<const unsigned*>(row + (OFF & ~3) + add);
    if (OFF % 4 == 0) {
        return p[0];
    }
    return __funnelshift_r(p[0], p[1], 8 * (OFF % 4));
}

// Bytes b0, b1 of w (and b2, b3) 16 bits apart: [b0, 0, b1, 0], [b2, 0, b3, 0].
RF_DEVICE unsigned rf_qmvm_spread01(unsigned w) { return __byte_perm(w, 0u, 0x4140); }
RF_DEVICE unsigned rf_qmvm_spread23(unsigned w) { return __byte_perm(w, 0u, 0x4342); }

// ---------------------------------------------------------------------------------------------
// q4_K and q5_K: chunks of two super-blocks (512 elements, 288 or 352 bytes a row)
// ---------------------------------------------------------------------------------------------

// Code pairs of one 32-bit word of nibbles (bytes e0..e3): the low nibbles (sub-block 2j) and
// the high ones (2j + 1), as A pairs (e0 e1), (e2 e3). raw() places the nibbles; q5_K then ors
// in each code's fifth bit, 16 times the nibble's unit, at bit FIFTH_LO or FIFTH_HI of each half;
// done() makes the exact values.
template <typename T> struct rf_qmvm_q4_nibbles;
template <> struct rf_qmvm_q4_nibbles<__half> {
    // Units' scale: low nibbles are their value times 2^-24, high ones times 2^-20 (codes up to
    // 31: f16 subnormals either way); a 6-bit min placed likewise (min_pair) times 2^-24.
    static constexpr float LO_UNIT = 16777216.0f;
    static constexpr float HI_UNIT = 1048576.0f;
    static constexpr float MIN_UNIT = 16777216.0f;
    static constexpr int FIFTH_LO = 4;
    static constexpr int FIFTH_HI = 8;
    static RF_DEVICE void raw(unsigned w, unsigned& lo01, unsigned& lo23, unsigned& hi01, unsigned& hi23) {
        const unsigned p01 = rf_qmvm_spread01(w);
        const unsigned p23 = rf_qmvm_spread23(w);
        lo01 = p01 & 0x000f000fu;
        lo23 = p23 & 0x000f000fu;
        hi01 = p01 & 0x00f000f0u;
        hi23 = p23 & 0x00f000f0u;
    }
    static RF_DEVICE unsigned done(unsigned v) { return v; }
    // [m, 0, m, 0] (two small integers in the low bytes of the halves) -> the pair (m, m) in
    // MIN_UNIT: as it is.
    static RF_DEVICE unsigned pair(unsigned spread) { return spread; }
};
template <> struct rf_qmvm_q4_nibbles<rf_bf16> {
    // A code c (5 bits at most) under bf16 128's mantissa is 128 + c; done() subtracts 128.
    static constexpr float LO_UNIT = 1.0f;
    static constexpr float HI_UNIT = 1.0f;
    static constexpr float MIN_UNIT = 1.0f;
    static constexpr int FIFTH_LO = 4;
    static constexpr int FIFTH_HI = 4;
    typedef rf_qmvm_placed<rf_bf16> P;
    static RF_DEVICE void raw(unsigned w, unsigned& lo01, unsigned& lo23, unsigned& hi01, unsigned& hi23) {
        const unsigned p01 = rf_qmvm_spread01(w);
        const unsigned p23 = rf_qmvm_spread23(w);
        lo01 = rf_qmvm_and_or<0x000f000fu>(p01, P::PLACED);
        lo23 = rf_qmvm_and_or<0x000f000fu>(p23, P::PLACED);
        hi01 = rf_qmvm_and_or<0x000f000fu>(p01 >> 4, P::PLACED);
        hi23 = rf_qmvm_and_or<0x000f000fu>(p23 >> 4, P::PLACED);
    }
    static RF_DEVICE unsigned done(unsigned v) { return P::less<0>(v); }
    static RF_DEVICE unsigned pair(unsigned spread) { return P::less<0>(spread | P::PLACED); }
};

// Byte B of w, zero-extended, as a float (exact).
template <int B> RF_DEVICE float rf_qmvm_byte_float(unsigned w) {
    return __uint2float_rn(__byte_perm(w, 0u, 0x4440u | B));
}

// 6-bit scales and mins of a super-block from its 12 bytes (words s0, s1, s2), four to a word
// as bytes: sc[0] sub-blocks 0..3, sc[1] 4..7; m likewise (rocmforge_quant.h's
// rf_kquant_scale_min, four at a time).
RF_DEVICE void rf_qmvm_q4k_scales(const unsigned* s, unsigned (&sc)[2], unsigned (&m)[2]) {
    sc[0] = s[0] & 0x3f3f3f3fu;
    m[0] = s[1] & 0x3f3f3f3fu;
    sc[1] = (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u);
    m[1] = ((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u);
}

// The fifth bits of sub-block S for a pair of spread qh bytes ([h0, 0, h1, 0]: bit S of each),
// at bit AT of each half.
template <int S, int AT> RF_DEVICE unsigned rf_qmvm_fifth(unsigned spread) {
    return ((spread >> S) & 0x00010001u) << AT;
}

// FIFTH = false: q4_K (144-byte super-blocks, nibbles from byte 16); true: q5_K (176 bytes: the
// fifth bits qh[32] at byte 16, bit s of qh[e] for element e of sub-block s; nibbles from 48).
template <typename T, bool FIFTH> struct rf_qmvm_kquant {
    static constexpr int BYTES = FIFTH ? 176 : 144;
    static constexpr int QS = FIFTH ? 48 : 16;
    static constexpr int CHUNK = 512;
    static constexpr int ROW = 2 * BYTES;
    static constexpr int SPAN = ROW;
    static constexpr int STAGES_B1 = RF_QMVM_STAGES_ONE_Q4_K;
    typedef rf_qmvm_q4_nibbles<T> N;

    // Sub-block S's scale as a float (exact: a 6-bit integer).
    template <int S> static RF_DEVICE float sc(const unsigned (&w)[2]) {
        return rf_qmvm_byte_float<S % 4>(w[S / 4]);
    }
    // Sub-block S's min for both halves of an A pair, in N::MIN_UNIT.
    template <int S> static RF_DEVICE unsigned min_pair(const unsigned (&w)[2]) {
        return N::pair(__byte_perm(w[S / 4], 0u, 0x4040u | ((S % 4) << 8) | (S % 4)));
    }
    // A row's 8 codes of sub-blocks 2J (lo) and 2J + 1 (hi) from its two words of nibbles q
    // (and, q5_K, the spread fifth-bit bytes h: h[0], h[1] of the first qh word, h[2], h[3]
    // of the second) as the exact A pairs.
    template <int J>
    static RF_DEVICE void codes(uint2 q, const unsigned (&h)[4], unsigned (&lo)[4], unsigned (&hi)[4]) {
        N::raw(q.x, lo[0], lo[1], hi[0], hi[1]);
        N::raw(q.y, lo[2], lo[3], hi[2], hi[3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if (FIFTH) {
                lo[i] |= rf_qmvm_fifth<2 * J, N::FIFTH_LO>(h[i]);
                hi[i] |= rf_qmvm_fifth<2 * J + 1, N::FIFTH_HI>(h[i]);
            }
            lo[i] = N::done(lo[i]);
            hi[i] = N::done(hi[i]);
        }
    }

    // What one row's super-block gives each of its units: the packed scales and mins, d in the
    // low and high units' scales (exact: powers of two, so (d UNIT) sc is d sc UNIT), dmin, and
    // (q5_K) the fifth-bit bytes of the lane's elements 8t .. 8t + 7 (the same for every
    // sub-block, a bit each), spread as the nibbles are.
    struct Row {
        unsigned sc[2], m[2], fifth[4];
        float dlo, dhi, dmin;
    };
    static RF_DEVICE Row row(const unsigned char* b, int t) {
        Row r;
        float d[2]; // d, dmin
        rf_unpack2_bits16<__half>(*reinterpret_cast<const unsigned*>(b), d);
        r.dlo = d[0] * N::LO_UNIT;
        r.dhi = d[0] * N::HI_UNIT;
        r.dmin = d[1];
        rf_qmvm_q4k_scales(reinterpret_cast<const unsigned*>(b + 4), r.sc, r.m);
        if (FIFTH) {
            const uint2 w = *reinterpret_cast<const uint2*>(b + 16 + 8 * t);
            r.fifth[0] = rf_qmvm_spread01(w.x);
            r.fifth[1] = rf_qmvm_spread23(w.x);
            r.fifth[2] = rf_qmvm_spread01(w.y);
            r.fifth[3] = rf_qmvm_spread23(w.y);
        }
        return r;
    }

    // Sub-block S of rows g and h, its unit sums d against x words xb: the step d sc (exact,
    // in the unit's scale) times d into acc; the min against xb into D_min (dmin).
    template <int S, int BC>
    static RF_DEVICE void sub(const Row& g, const Row& h, const float (&d)[4], uint4 xb, float (&acc)[4],
                              float (&dmin)[4]) {
        const float dg = S % 2 == 0 ? g.dlo : g.dhi;
        const float dh = S % 2 == 0 ? h.dlo : h.dhi;
        rf_qmvm_add<BC>(acc, d, dg * sc<S>(g.sc), dh * sc<S>(h.sc));
        const unsigned a_m[4] = {min_pair<S>(g.m), min_pair<S>(h.m), min_pair<S>(g.m), min_pair<S>(h.m)};
        rf_mma<T>::run(dmin, a_m, xb.x, xb.y);
        rf_mma<T>::run(dmin, a_m, xb.z, xb.w);
    }

    // Group J of a super-block (bg, bh: rows g and g + 8; xs: its x): sub-blocks 2J (the low
    // nibbles) and 2J + 1 (the high ones).
    template <int J, int BC, int XT>
    static RF_DEVICE void group(const unsigned char* bg, const unsigned char* bh, const Row& g, const Row& h,
                                const T* xs, int t, rf_qmvm_acc<BC>& acc, rf_qmvm_acc<BC>& dmin) {
        const uint2 qg = *reinterpret_cast<const uint2*>(bg + QS + 32 * J + 8 * t);
        const uint2 qh = *reinterpret_cast<const uint2*>(bh + QS + 32 * J + 8 * t);
        constexpr int NT = rf_qmvm_tiles<BC>::N;
        uint4 xlo[NT], xhi[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            xlo[n] = *reinterpret_cast<const uint4*>(xs + n * XT + 64 * J + 8 * t);
            xhi[n] = *reinterpret_cast<const uint4*>(xs + n * XT + 64 * J + 32 + 8 * t);
        }
        unsigned lg[4], hg[4], lh[4], hh[4];
        codes<J>(qg, g.fifth, lg, hg);
        codes<J>(qh, h.fifth, lh, hh);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            float dl[4], dhi[4];
            rf_qmvm_unit<T>(dl, lg, lh, xlo[n]);
            rf_qmvm_unit<T>(dhi, hg, hh, xhi[n]);
            sub<2 * J, BC>(g, h, dl, xlo[n], acc[n], dmin[n]);
            sub<2 * J + 1, BC>(g, h, dhi, xhi[n], acc[n], dmin[n]);
        }
    }

    // Rows g (rg) and g + 8 (rh) of a staged chunk, x of the lane's vector (xv), t the lane's
    // quarter: adds the chunk's products to acc. Per super-block, each unit's sum of q x times
    // its step d sc (exact) goes into acc; the mins go through the tensor cores, A holding
    // each unit's 6-bit min (exact in T) against the unit's x, so D_min = sum_s m_s X_s for the
    // whole super-block, times dmin once.
    template <int BC, int XT>
    static RF_DEVICE void chunk(const unsigned char* rg, const unsigned char* rh, const T* xv, int t,
                                rf_qmvm_acc<BC>& acc) {
#pragma unroll
        for (int sb = 0; sb < 2; ++sb) {
            const unsigned char* bg = rg + BYTES * sb;
            const unsigned char* bh = rh + BYTES * sb;
            const Row g = row(bg, t);
            const Row h = row(bh, t);
            const T* xs = xv + 256 * sb;
            rf_qmvm_acc<BC> dmin;
#pragma unroll
            for (int n = 0; n < rf_qmvm_tiles<BC>::N; ++n) {
                dmin[n][0] = dmin[n][1] = dmin[n][2] = dmin[n][3] = 0.0f;
            }
            group<0, BC, XT>(bg, bh, g, h, xs, t, acc, dmin);
            group<1, BC, XT>(bg, bh, g, h, xs, t, acc, dmin);
            group<2, BC, XT>(bg, bh, g, h, xs, t, acc, dmin);
            group<3, BC, XT>(bg, bh, g, h, xs, t, acc, dmin);
#pragma unroll
            for (int n = 0; n < rf_qmvm_tiles<BC>::N; ++n) {
                rf_qmvm_add<BC>(acc[n], dmin[n], -g.dmin * N::MIN_UNIT, -h.dmin * N::MIN_UNIT);
            }
        }
    }
};
template <typename T> using rf_qmvm_q4_k = rf_qmvm_kquant<T, false>;
template <typename T> using rf_qmvm_q5_k = rf_qmvm_kquant<T, true>;

// ---------------------------------------------------------------------------------------------
// q8_0: chunks of 8 blocks (256 elements, 272 bytes a row)
// ---------------------------------------------------------------------------------------------

// q8_0's layout: 34-byte blocks, d (f16) then qs[32] (i8); thread t's codes are bytes 8t .. 8t + 7.
struct rf_qmvm_q8_layout {
    static constexpr int BYTES = 34;
    // Codes 8t .. 8t + 7 of block B of a staged row (4-byte aligned), as two words.
    template <int B> static RF_DEVICE uint2 codes(const unsigned char* row, int t) {
        constexpr int OFF = 34 * B + 2;
        return make_uint2(rf_qmvm_word<OFF>(row, 8 * t), rf_qmvm_word<OFF + 4>(row, 8 * t));
    }
};

template <typename T> struct rf_qmvm_q8_codes;
template <> struct rf_qmvm_q8_codes<__half> : rf_qmvm_q8_layout {
    // Four codes (bytes of w, i8) -> pairs (c0 c1), (c2 c3): 1024 + (c ^ 0x80) - 1152.
    // (rf_qmvm_placed<__half>::less<128> gives these values too, but in this one decoder it cost
    // ptxas 24 more instructions on sm_90a, so the subtraction stays spelled out here.)
    static RF_DEVICE void run(unsigned w, unsigned& p01, unsigned& p23) {
        const unsigned u = w ^ 0x80808080u;
        const __half2 bias = __halves2half2(__ushort_as_half(0x6480u), __ushort_as_half(0x6480u));
        const unsigned a = __byte_perm(u, 0x64646464u, 0x4140);
        const unsigned b = __byte_perm(u, 0x64646464u, 0x4342);
        const __half2 ha = __hsub2(*reinterpret_cast<const __half2*>(&a), bias);
        const __half2 hb = __hsub2(*reinterpret_cast<const __half2*>(&b), bias);
        p01 = *reinterpret_cast<const unsigned*>(&ha);
        p23 = *reinterpret_cast<const unsigned*>(&hb);
    }
};
template <> struct rf_qmvm_q8_codes<rf_bf16> : rf_qmvm_q8_layout {
    static RF_DEVICE float code(unsigned u, int byte) {
        return __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7440u | (unsigned)byte)) - 8388736.0f;
    }
    static RF_DEVICE void run(unsigned w, unsigned& p01, unsigned& p23) {
        const unsigned u = w ^ 0x80808080u;
        p01 = rf_pack2_bits16<rf_bf16>(code(u, 0), code(u, 1));
        p23 = rf_pack2_bits16<rf_bf16>(code(u, 2), code(u, 3));
    }
};

// q8_0 and q4_0: blocks of 32 elements, an f16 scale d first, each code decoded to its exact
// signed value (C<T>: the layout's BYTES and codes<B>(row, t), thread t's eight codes as two
// words; run(), four of them to two A pairs), so a block adds d * sum c x. Chunks of 8 blocks.
template <typename T, template <typename> class C> struct rf_qmvm_block32 {
    static constexpr int CHUNK = 256;
    static constexpr int ROW = 8 * C<T>::BYTES;
    static constexpr int SPAN = ROW;
    static constexpr int STAGES_B1 = RF_QMVM_STAGES_ONE_Q8_0;

    template <int B> static RF_DEVICE float scale(const unsigned char* row) {
        return rf_bits16_to_float<__half>(*reinterpret_cast<const unsigned short*>(row + C<T>::BYTES * B));
    }
    template <int B, int BC, int XT>
    static RF_DEVICE void block(const unsigned char* rg, const unsigned char* rh, const T* xv, int t,
                                rf_qmvm_acc<BC>& acc) {
        const uint2 cg = C<T>::template codes<B>(rg, t);
        const uint2 ch = C<T>::template codes<B>(rh, t);
        unsigned pg[4], ph[4];
        C<T>::run(cg.x, pg[0], pg[1]);
        C<T>::run(cg.y, pg[2], pg[3]);
        C<T>::run(ch.x, ph[0], ph[1]);
        C<T>::run(ch.y, ph[2], ph[3]);
#pragma unroll
        for (int n = 0; n < rf_qmvm_tiles<BC>::N; ++n) {
            const uint4 xb = *reinterpret_cast<const uint4*>(xv + n * XT + 32 * B + 8 * t);
            float d[4];
            rf_qmvm_unit<T>(d, pg, ph, xb);
            rf_qmvm_add<BC>(acc[n], d, scale<B>(rg), scale<B>(rh));
        }
    }
    template <int BC, int XT>
    static RF_DEVICE void chunk(const unsigned char* rg, const unsigned char* rh, const T* xv, int t,
                                rf_qmvm_acc<BC>& acc) {
        block<0, BC, XT>(rg, rh, xv, t, acc);
        block<1, BC, XT>(rg, rh, xv, t, acc);
        block<2, BC, XT>(rg, rh, xv, t, acc);
        block<3, BC, XT>(rg, rh, xv, t, acc);
        block<4, BC, XT>(rg, rh, xv, t, acc);
        block<5, BC, XT>(rg, rh, xv, t, acc);
        block<6, BC, XT>(rg, rh, xv, t, acc);
        block<7, BC, XT>(rg, rh, xv, t, acc);
    }
};
template <typename T> using rf_qmvm_q8_0 = rf_qmvm_block32<T, rf_qmvm_q8_codes>;

// ---------------------------------------------------------------------------------------------
// q4_0: chunks of 8 blocks (256 elements, 144 bytes a row), q8_0's stages
// ---------------------------------------------------------------------------------------------

// q4_0's layout: 18-byte blocks, d (f16) then qs[16], element j in the low nibble of qs[j] and
// element j + 16 in the high one. Thread t's elements 8t .. 8t + 7 are the low (t < 2) or high
// (t >= 2) nibbles of qs[8 (t & 1)] .. qs[8 (t & 1) + 7]; w = (c - 8) d.
struct rf_qmvm_q4_0_layout {
    static constexpr int BYTES = 18;
    // Thread t's eight nibbles of block B of a staged row (16-byte aligned), moved to the low
    // half of each byte, as two words.
    template <int B> static RF_DEVICE uint2 codes(const unsigned char* row, int t) {
        constexpr int OFF = 18 * B + 2;
        const int shift = 4 * (t >> 1);
        return make_uint2(rf_qmvm_word<OFF>(row, 8 * (t & 1)) >> shift, rf_qmvm_word<OFF + 4>(row, 8 * (t & 1)) >> shift);
    }
};

// Four codes (the low nibbles of w's bytes) -> pairs (c0 - 8, c1 - 8), (c2 - 8, c3 - 8), exact.
// The nibble placed (rf_qmvm_placed) less 8.
template <typename T> struct rf_qmvm_q4_0_codes : rf_qmvm_q4_0_layout {
    typedef rf_qmvm_placed<T> P;
    static RF_DEVICE void run(unsigned w, unsigned& p01, unsigned& p23) {
        p01 = P::template less<8>(rf_qmvm_and_or<0x000f000fu>(rf_qmvm_spread01(w), P::PLACED));
        p23 = P::template less<8>(rf_qmvm_and_or<0x000f000fu>(rf_qmvm_spread23(w), P::PLACED));
    }
};

template <typename T> using rf_qmvm_q4_0 = rf_qmvm_block32<T, rf_qmvm_q4_0_codes>;

// ---------------------------------------------------------------------------------------------
// q6_K: chunks of two super-blocks (512 elements, 420 bytes a row), staged as 16-byte spans
// ---------------------------------------------------------------------------------------------

// Four 6-bit codes (bytes of w, each below 64) -> pairs (c0 - 32, c1 - 32), (c2 - 32, c3 - 32),
// exact: each byte placed (rf_qmvm_placed) by the PRMT that spreads it, one a pair, less 32.
template <typename T> struct rf_qmvm_q6_codes {
    typedef rf_qmvm_placed<T> P;
    static RF_DEVICE void run(unsigned w, unsigned& p01, unsigned& p23) {
        p01 = P::template less<32>(__byte_perm(w, P::BYTES, 0x4140));
        p23 = P::template less<32>(__byte_perm(w, P::BYTES, 0x4342));
    }
};

// A 210-byte super-block: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (i8, one a 16
// elements), d (f16). Its half N (128 elements) is four groups J of 32: element l of group J
// takes ql[64 N + 32 (J & 1) + l]'s low (J < 2) or high nibble, bits 2 J, 2 J + 1 of
// qh[32 N + l] above it, and scale scales[8 N + 2 J + l / 16]; w = d sc (q - 32).
//
// The scale changes every 16 elements, so a group is two units of 16 with one m16n8k16 each
// (not rf_qmvm_unit's 32): in unit U thread t takes elements 16 U + 4 t .. + 3, A pairs (e0 e1)
// and (e2 e3) against x's words as they lie. Rows are 16-byte aligned (the launcher requires k
// to be a multiple of 2048), a chunk starts c * 420 bytes in, so its span (SPAN bytes from the
// 16-byte boundary below it) holds it at offset (c * 420) % 16: 0, 4, 8 or 12, word-aligned.
// Super-block 1 of a chunk then lies 2 bytes off a word (rf_qmvm_word's funnel shift).
template <typename T> struct rf_qmvm_q6_k {
    static constexpr int CHUNK = 512;
    static constexpr int ROW = 2 * 210;
    static constexpr int SPAN = 432; // 12 + ROW, whole 16-byte vectors
    static constexpr int STAGES_B1 = RF_QMVM_STAGES_ONE_Q4_K;

    template <int S, int N, int J, int U>
    static RF_DEVICE void codes(const unsigned char* row, int t, unsigned& p01, unsigned& p23) {
        constexpr int SB = 210 * S;
        const unsigned ql = rf_qmvm_word<SB + 64 * N + 32 * (J & 1) + 16 * U>(row, 4 * t);
        const unsigned qh = rf_qmvm_word<SB + 128 + 32 * N + 16 * U>(row, 4 * t);
        // The low nibble from ql, bits 2J and 2J + 1 of qh's byte above it (bits 4 and 5).
        constexpr int H = 4 - 2 * J;
        const unsigned hi = (H >= 0 ? qh << (H & 31) : qh >> (-H & 31)) & 0x30303030u;
        const unsigned q = rf_qmvm_and_or<0x0f0f0f0fu>(J >> 1 ? ql >> 4 : ql, hi);
        rf_qmvm_q6_codes<T>::run(q, p01, p23);
    }
    template <int S, int N, int J, int U> static RF_DEVICE float step(const unsigned char* row, float d) {
        return d * (float)(signed char)row[210 * S + 192 + 8 * N + 2 * J + U];
    }
    template <int S, int N, int J, int U, int BC, int XT>
    static RF_DEVICE void unit(const unsigned char* rg, const unsigned char* rh, const T* xv, int t, float dg,
                               float dh, rf_qmvm_acc<BC>& acc) {
        unsigned a[4];
        codes<S, N, J, U>(rg, t, a[0], a[2]);
        codes<S, N, J, U>(rh, t, a[1], a[3]);
#pragma unroll
        for (int n = 0; n < rf_qmvm_tiles<BC>::N; ++n) {
            const uint2 xb = *reinterpret_cast<const uint2*>(xv + n * XT + 256 * S + 128 * N + 32 * J + 16 * U + 4 * t);
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            rf_mma<T>::run(d, a, xb.x, xb.y);
            rf_qmvm_add<BC>(acc[n], d, step<S, N, J, U>(rg, dg), step<S, N, J, U>(rh, dh));
        }
    }
    template <int S, int BC, int XT>
    static RF_DEVICE void super_block(const unsigned char* rg, const unsigned char* rh, const T* xv, int t,
                                      rf_qmvm_acc<BC>& acc) {
        const float dg = rf_bits16_to_float<__half>(*reinterpret_cast<const unsigned short*>(rg + 210 * S + 208));
        const float dh = rf_bits16_to_float<__half>(*reinterpret_cast<const unsigned short*>(rh + 210 * S + 208));
#define RF_QMVM_Q6_GROUP(N, J)                                   \
    unit<S, N, J, 0, BC, XT>(rg, rh, xv, t, dg, dh, acc);        \
    unit<S, N, J, 1, BC, XT>(rg, rh, xv, t, dg, dh, acc);
        RF_QMVM_Q6_GROUP(0, 0)
        RF_QMVM_Q6_GROUP(0, 1)
        RF_QMVM_Q6_GROUP(0, 2)
        RF_QMVM_Q6_GROUP(0, 3)
        RF_QMVM_Q6_GROUP(1, 0)
        RF_QMVM_Q6_GROUP(1, 1)
        RF_QMVM_Q6_GROUP(1, 2)
        RF_QMVM_Q6_GROUP(1, 3)
#undef RF_QMVM_Q6_GROUP
    }
    template <int BC, int XT>
    static RF_DEVICE void chunk(const unsigned char* rg, const unsigned char* rh, const T* xv, int t,
                                rf_qmvm_acc<BC>& acc) {
        super_block<0, BC, XT>(rg, rh, xv, t, acc);
        super_block<1, BC, XT>(rg, rh, xv, t, acc);
    }
};

// ---------------------------------------------------------------------------------------------
// MXFP4 (ggml's block_mxfp4): chunks of 16 blocks (512 elements, 272 bytes a row)
// ---------------------------------------------------------------------------------------------

// A 17-byte block: an E8M0 scale byte, then qs[16], element j in the low nibble of qs[j] and
// j + 16 in the high one (E2M1 codes). Thread t takes payload word t of a block (mxfp.hip's
// arrangement): elements 4t .. 4t + 3 (low nibbles, the block's first mma) and 16 + 4t .. 16 +
// 4t + 3 (high nibbles, its second), against x's pairs as they lie at 4t and 16 + 4t, decoded
// by rocmforge_quant.h's rf_e2m1_word_<dt> into exact values times 1 / UNIT. A block adds its
// sum times UNIT (exact) times its scale (a power of two, or NaN for 0xFF: exact) to the totals,
// the sum scaled first so that a large scale cannot overflow where the product does not.
template <typename T> struct rf_qmvm_mxfp4 {
    static constexpr int CHUNK = 512;
    static constexpr int ROW = 16 * 17;
    static constexpr int SPAN = ROW;
    static constexpr int STAGES_B1 = RF_QMVM_STAGES_ONE_Q4_K;
    typedef rf_e2m1_mma<T> E;

    template <int B, int BC, int XT>
    static RF_DEVICE void block(const unsigned char* rg, const unsigned char* rh, const T* xv, int t,
                                const float (&sg)[4], const float (&sh)[4], rf_qmvm_acc<BC>& acc) {
        unsigned ag[2][2];
        unsigned ah[2][2];
        E::run(rf_qmvm_word<17 * B + 1>(rg, 4 * t), ag);
        E::run(rf_qmvm_word<17 * B + 1>(rh, 4 * t), ah);
        const unsigned a0[4] = {ag[0][0], ah[0][0], ag[0][1], ah[0][1]};
        const unsigned a1[4] = {ag[1][0], ah[1][0], ag[1][1], ah[1][1]};
#pragma unroll
        for (int n = 0; n < rf_qmvm_tiles<BC>::N; ++n) {
            const uint2 lo = *reinterpret_cast<const uint2*>(xv + n * XT + 32 * B + 4 * t);
            const uint2 hi = *reinterpret_cast<const uint2*>(xv + n * XT + 32 * B + 16 + 4 * t);
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            rf_mma<T>::run(d, a0, lo.x, lo.y);
            rf_mma<T>::run(d, a1, hi.x, hi.y);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                d[i] *= E::UNIT;
            }
            // Block B's scales, decoded by lane B % 4 of the row's quad (chunk()).
            const int from = (int)(threadIdx.x & 28u) | (B & 3);
            rf_qmvm_add<BC>(acc[n], d, __shfl_sync(0xffffffffu, sg[B >> 2], from),
                            __shfl_sync(0xffffffffu, sh[B >> 2], from));
        }
    }
    template <int BC, int XT>
    static RF_DEVICE void chunk(const unsigned char* rg, const unsigned char* rh, const T* xv, int t,
                                rf_qmvm_acc<BC>& acc) {
        // The 32 scales (16 blocks of rows g and g + 8) are decoded once per quad of lanes:
        // lane t takes blocks t, t + 4, t + 8, t + 12 and the others fetch them by shuffle (an
        // E8M0 decode is ~6 instructions: a byte load, 0 and 0xFF picked out, a shift).
        float sg[4];
        float sh[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            sg[j] = rf_e8m0_to_float(rg[17 * (4 * j + t)]);
            sh[j] = rf_e8m0_to_float(rh[17 * (4 * j + t)]);
        }
        block<0, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<1, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<2, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<3, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<4, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<5, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<6, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<7, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<8, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<9, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<10, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<11, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<12, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<13, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<14, BC, XT>(rg, rh, xv, t, sg, sh, acc);
        block<15, BC, XT>(rg, rh, xv, t, sg, sh, acc);
    }
};

// Bytes of a stage's x, as both kernels lay it out: one vector of the chunk (BC = 1), or BC
// vectors 64 bytes apart beyond the chunk, so that the two vectors a quarter-warp's 16-byte
// loads read fall in distinct banks. TILE: 16-bit elements from one n-tile's x to the next (the
// XT of chunk<BC, XT>).
template <int CHUNK, int BC> struct rf_qmvm_x {
    static constexpr int STRIDE = BC == 1 ? 2 * CHUNK : 2 * CHUNK + 64; // bytes between vectors
    static constexpr int BYTES = BC * STRIDE;
    static constexpr int TILE = 8 * STRIDE / 2;
};

#endif // RF_MMA_SYNC

#endif // ROCMFORGE_QMVM_FORMATS_H
