// rocmforge_quant.h: decoding of block-quantised weights, shared by kernels/dequant.hip and
// kernels/mxfp.hip. The byte layouts and the numbers are those of crates/rocm-kernels/src/quant
// (the CPU codec the GPU tests compare with):
//
//   ggml q8_0   34 bytes: f16 d (LE), 32 x i8 q              x = d * q
//   ggml q4_0   18 bytes: f16 d, 16 bytes                    x = d * (nibble - 8)
//   ggml mxfp4  17 bytes: E8M0 scale, 16 bytes of E2M1 codes x = E2M1(code) * 2^(e - 127)
//   MXFP6       25 bytes: E8M0 scale, 24 bytes: 32 six-bit codes, code i in bits 6i..6i+6 of the
//               little-endian 192-bit payload (E2M3 or E3M2 elements)
//
// and ggml's k-quants, super-blocks of 256 elements (layouts in crates/rocm-kernels/src/quant/
// kquant.rs):
//
//   ggml q4_K  144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
//   ggml q5_K  176 bytes: as q4_K with 32 bytes of fifth bits (qh) before the nibbles
//   ggml q6_K  210 bytes: 128 bytes of low nibbles (ql), 64 of high bit pairs (qh), 16 i8 scales,
//              f16 d
//
// Nibble order (q4_0, mxfp4): element j < 16 is the low nibble of payload byte j, element j + 16
// its high nibble. Every decode here is exact in f32 (products of a power of two or an f16 and a
// value of at most 8 significant bits), except that a result below 2^-126 depends on the
// device's f32 denormal mode, and that q4_K / q5_K round once (below).

#ifndef ROCMFORGE_QUANT_H
#define ROCMFORGE_QUANT_H

#include "rocmforge.h"

// Elements a block of q8_0, q4_0 and the MX formats; a k-quant super-block.
#define RF_QK 32
#define RF_QK_K 256

// ---------------------------------------------------------------------------------------------
// Scalars
// ---------------------------------------------------------------------------------------------

// E8M0: 2^(e - 127), NaN for 0xFF. Built from bits: 2^-127 (e = 0) is an f32 subnormal, written
// directly so that no denormal arithmetic is involved.
RF_DEVICE float rf_e8m0_to_float(unsigned int e) {
    e &= 0xffu;
    const unsigned int bits = e == 0xffu ? 0x7fc00000u : (e == 0u ? 0x00400000u : e << 23);
    return __uint_as_float(bits);
}

// The value of an MX element code (sign, EBITS exponent bits with bias 2^(EBITS-1) - 1, MBITS
// mantissa bits, subnormals, no Inf/NaN). The magnitude bits are placed under the f32 exponent
// field and the bias difference added; a subnormal (exponent field 0) is built as
// 1.m * 2^(1 - bias) - 2^(1 - bias), which is exact (Sterbenz), so no denormal arithmetic occurs.
template <int EBITS, int MBITS> RF_DEVICE float rf_mx_element(unsigned int code) {
    constexpr int BITS = 1 + EBITS + MBITS;
    constexpr unsigned int BIAS = (1u << (EBITS - 1)) - 1u;
    const unsigned int t = (code & ((1u << (BITS - 1)) - 1u)) << (23 - MBITS);
    const bool subnormal = t < (1u << 23);
    const unsigned int exponent_offset = (127u - BIAS + (subnormal ? 1u : 0u)) << 23;
    const float lowest_normal = __uint_as_float((128u - BIAS) << 23); // 2^(1 - bias)
    const float v = __uint_as_float(t + exponent_offset) - (subnormal ? lowest_normal : 0.0f);
    const unsigned int sign = (code >> (BITS - 1)) & 1u;
    return __uint_as_float(__float_as_uint(v) | (sign << 31));
}

RF_DEVICE float rf_f16_bits_to_float(unsigned int lo, unsigned int hi) {
    return __half2float(__ushort_as_half((unsigned short)(lo | (hi << 8))));
}

// ---------------------------------------------------------------------------------------------
// Formats. Each has BLOCK_BYTES, BLOCK_ELEMS and group(block, p, out): the 8 values of elements
// 8p..8p+8 (p < BLOCK_ELEMS / 8) of the block at `block`, scaled, read with byte loads (blocks
// have no alignment). The MX formats add what the products need: the element decoder, the
// number of 32-bit payload words, and code(q, j): code j from the payload words.
// ---------------------------------------------------------------------------------------------

struct rf_q8_0 {
    static constexpr int BLOCK_BYTES = 34;
    static constexpr int BLOCK_ELEMS = RF_QK;
    static RF_DEVICE void group(const unsigned char* b, int p, float* out) {
        const float d = rf_f16_bits_to_float(b[0], b[1]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            out[i] = d * (float)(signed char)b[2 + 8 * p + i];
        }
    }
};

struct rf_q4_0 {
    static constexpr int BLOCK_BYTES = 18;
    static constexpr int BLOCK_ELEMS = RF_QK;
    static RF_DEVICE void group(const unsigned char* b, int p, float* out) {
        const float d = rf_f16_bits_to_float(b[0], b[1]);
        const unsigned char* q = b + 2 + 8 * (p & 1);
        const int shift = 4 * (p >> 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            out[i] = d * (float)((int)((q[i] >> shift) & 15u) - 8);
        }
    }
};

// MXFP4 in ggml's block_mxfp4 layout (GGUF type 39).
struct rf_mxfp4 {
    static constexpr int BLOCK_BYTES = 17;
    static constexpr int BLOCK_ELEMS = RF_QK;
    static constexpr int PAYLOAD_WORDS = 4;
    static constexpr int CODES = 16;
    static RF_DEVICE float element(unsigned int code) { return rf_mx_element<2, 1>(code); }
    static RF_DEVICE void group(const unsigned char* b, int p, float* out) {
        const float s = rf_e8m0_to_float(b[0]);
        const unsigned char* q = b + 1 + 8 * (p & 1);
        const int shift = 4 * (p >> 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            out[i] = element((unsigned int)q[i] >> shift) * s;
        }
    }
    // j is a compile-time constant after unrolling: a shift and a mask.
    static RF_DEVICE unsigned int code(const unsigned int* q, int j) {
        const int byte = j & 15;
        return (q[byte >> 2] >> (8 * (byte & 3) + 4 * (j >> 4))) & 15u;
    }
};

// The E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0..7) as the bf16 patterns 0x0000 0x3F00
// 0x3F80 0x3FC0 0x4000 0x4040 0x4080 0x40C0: their low bytes (LO) and high bytes (HI) as two
// 8-byte byte-permute tables, byte k of (word 1 : word 0) the entry of code k. A bf16 pattern
// shifted left by 16 is the f32 of the same value.
#define RF_E2M1_LO0 0xC0800000u // codes 3..0: 0xC0 0x80 0x00 0x00
#define RF_E2M1_LO1 0xC0804000u // codes 7..4: 0xC0 0x80 0x40 0x00
#define RF_E2M1_HI0 0x3F3F3F00u // codes 3..0: 0x3F 0x3F 0x3F 0x00
#define RF_E2M1_HI1 0x40404040u // codes 7..4: 0x40 0x40 0x40 0x40

// Payload word t of an MXFP4 block (bytes b0..b3: elements 4t..4t+3 in the low nibbles,
// 16+4t..16+4t+3 in the high ones) as the A fragments of two m16n8k16 steps: a[0] = step 0 (the
// low nibbles, pairs of elements 4t, 4t+1 | 4t+2, 4t+3), a[1] = step 1 (the high ones). The
// matrix-core products of mxfp.hip and quant_matvec_mma.hip both decode MXFP4 this way.
//
// f16: each value times 2^-14, exactly.
RF_DEVICE void rf_e2m1_word_f16(unsigned w, unsigned (&a)[2][2]) {
    // Bytes b0, b1 (b2, b3) 16 bits apart, so that one left shift and one mask place a nibble's
    // magnitude (or its sign) in both halves at once; the left shifts run as multiplies, off
    // the integer pipe that the masks and permutes need.
    const unsigned p01 = __byte_perm(w, 0u, 0x4140); // [b0, 0, b1, 0]
    const unsigned p23 = __byte_perm(w, 0u, 0x4342); // [b2, 0, b3, 0]
    a[0][0] = ((p01 << 9) & 0x0e000e00u) | ((p01 << 12) & 0x80008000u); // low nibbles of b0, b1
    a[0][1] = ((p23 << 9) & 0x0e000e00u) | ((p23 << 12) & 0x80008000u);
    a[1][0] = ((p01 << 5) & 0x0e000e00u) | ((p01 << 8) & 0x80008000u); // high nibbles
    a[1][1] = ((p23 << 5) & 0x0e000e00u) | ((p23 << 8) & 0x80008000u);
}

// Two payload bytes -> the bf16 pairs (low nibble of b0, of b1) and (high of b0, of b1), the
// magnitudes from the byte-permute tables RF_E2M1_{HI,LO} above. `mags`:
// the bytes' magnitudes, one per selector nibble (b & 0x77 each); `signs`: b0 in bits 8-15 and
// b1 in bits 24-31, so the high nibbles' signs sit on the pairs' sign bits (15, 31) and the low
// nibbles' four places lower.
RF_DEVICE void rf_e2m1_pairs_bf16(unsigned mags, unsigned signs, unsigned& lo, unsigned& hi) {
    const unsigned h = __byte_perm(RF_E2M1_HI0, RF_E2M1_HI1, mags); // of lo0, hi0, lo1, hi1
    const unsigned l = __byte_perm(RF_E2M1_LO0, RF_E2M1_LO1, mags);
    lo = __byte_perm(l, h, 0x6240) | ((signs << 4) & 0x80008000u);
    hi = __byte_perm(l, h, 0x7351) | (signs & 0x80008000u);
}

// bf16: payload word w -> A fragments, laid out as rf_e2m1_word_f16's (exact values).
RF_DEVICE void rf_e2m1_word_bf16(unsigned w, unsigned (&a)[2][2]) {
    rf_e2m1_pairs_bf16(w & 0x7777u, __byte_perm(w, 0u, 0x1404), a[0][0], a[1][0]);
    rf_e2m1_pairs_bf16((w >> 16) & 0x7777u, __byte_perm(w, 0u, 0x3424), a[0][1], a[1][1]);
}

// The MXFP4 word decoder for activations of type T (run: rf_e2m1_word_<dt>) and UNIT, what its
// values are scaled by (f16: the codes' times 2^-14; bf16: exact), which a block's sum is
// multiplied back by. The one pick of both, for mxfp.hip's and rocmforge_qmvm_formats.h's
// matrix-core products.
template <typename T> struct rf_e2m1_mma;
template <> struct rf_e2m1_mma<__half> {
    static constexpr float UNIT = 16384.0f;
    static RF_DEVICE void run(unsigned w, unsigned (&a)[2][2]) { rf_e2m1_word_f16(w, a); }
};
template <> struct rf_e2m1_mma<rf_bf16> {
    static constexpr float UNIT = 1.0f;
    static RF_DEVICE void run(unsigned w, unsigned (&a)[2][2]) { rf_e2m1_word_bf16(w, a); }
};

// Packed MXFP6, element type E2M3 (EBITS = 2, MBITS = 3) or E3M2 (3, 2).
template <int EBITS, int MBITS> struct rf_mxfp6 {
    static constexpr int BLOCK_BYTES = 25;
    static constexpr int BLOCK_ELEMS = RF_QK;
    static constexpr int PAYLOAD_WORDS = 6;
    static constexpr int CODES = 64;
    static RF_DEVICE float element(unsigned int code) { return rf_mx_element<EBITS, MBITS>(code); }
    static RF_DEVICE void group(const unsigned char* b, int p, float* out) {
        const float s = rf_e8m0_to_float(b[0]);
        // Codes 8p..8p+8 are bits 48p..48p+48 of the payload: bytes 6p..6p+6.
        const unsigned char* q = b + 1 + 6 * p;
        rf_u64 bits = 0;
#pragma unroll
        for (int i = 0; i < 6; ++i) {
            bits |= (rf_u64)q[i] << (8 * i);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            out[i] = element((unsigned int)(bits >> (6 * i)) & 63u) * s;
        }
    }
    static RF_DEVICE unsigned int code(const unsigned int* q, int j) {
        const int bit = 6 * j;
        const int w = bit >> 5;
        const int off = bit & 31;
        // A code that straddles two words (off > 26) takes its top bits from the next one.
        const unsigned int lo = q[w] >> off;
        const unsigned int hi = off > 26 ? q[w + 1] << (32 - off) : 0u;
        return (lo | hi) & 63u;
    }
};

typedef rf_mxfp6<2, 3> rf_mxfp6_e2m3;
typedef rf_mxfp6<3, 2> rf_mxfp6_e3m2;

// ---------------------------------------------------------------------------------------------
// ggml k-quants. Each decodes with ggml's f32 arithmetic in ggml's order (the CPU codec in
// quant/kquant.rs does the same), so the values are the codec's bit for bit:
//   q4_K, q5_K: (d * sc) * q - dmin * m. d * sc and dmin * m are exact (an f16 times a 6-bit
//     integer: at most 17 significant bits), and so is (d * sc) * q (q < 32: at most 22 bits);
//     only the subtraction rounds, once. So a compiler that contracts the multiply and the
//     subtraction into one FMA gives the same bits.
//   q6_K: (d * sc) * (q - 32), sc an i8: at most 11 + 7 + 5 significant bits, exact.
// No result is an f32 subnormal (every nonzero magnitude is at least 2^-24), so the f32
// denormal mode does not matter either. NaN and infinite f16 scales propagate as IEEE says,
// as in the codec.
// ---------------------------------------------------------------------------------------------

// The 6-bit scale and min of sub-block s (0..7) of a q4_K / q5_K super-block, from its 12
// packed bytes q: for s < 4 the low six bits of q[s] and q[s + 4]; for s >= 4 the nibbles of
// q[s + 4] below the top two bits of q[s - 4] (scale) and q[s] (min).
RF_DEVICE void rf_kquant_scale_min(const unsigned char* q, int s, unsigned int* sc, unsigned int* m) {
    if (s < 4) {
        *sc = q[s] & 63u;
        *m = q[s + 4] & 63u;
    } else {
        *sc = (q[s + 4] & 15u) | ((unsigned int)(q[s - 4] >> 6) << 4);
        *m = ((unsigned int)q[s + 4] >> 4) | ((unsigned int)(q[s] >> 6) << 4);
    }
}

// q4_K / q5_K: the four values of elements i0 .. i0 + 4 (i0 % 4 == 0) of the super-block at b.
// Element i is in sub-block i / 32; its low four bits are nibble (i % 64 >= 32) of byte
// 32 (i / 64) + i % 32 of the nibbles; q5_K's fifth bit is bit i / 32 of qh[i % 32].
template <bool FIFTH_BIT> struct rf_kquant_affine {
    static constexpr int QS = FIFTH_BIT ? 48 : 16; // where the nibbles start
    static RF_DEVICE void elems4(const unsigned char* b, int i0, float* out) {
        const int s = i0 >> 5;
        unsigned int sc, m;
        rf_kquant_scale_min(b + 4, s, &sc, &m);
        const float step = rf_f16_bits_to_float(b[0], b[1]) * (float)sc;
        const float offset = rf_f16_bits_to_float(b[2], b[3]) * (float)m;
        const unsigned char* q = b + QS + 32 * (i0 >> 6) + (i0 & 31);
        const int shift = 4 * (s & 1);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            unsigned int code = (q[e] >> shift) & 15u;
            if (FIFTH_BIT) {
                code |= ((b[16 + (i0 & 31) + e] >> s) & 1u) << 4;
            }
            out[e] = step * (float)code - offset;
        }
    }
};

// q6_K: element i = 128 h + 32 k + l (k < 4, l < 32) has the low nibble (k < 2) or high nibble
// (k >= 2) of ql[64 h + 32 (k % 2) + l] and bits 2k, 2k + 1 of qh[32 h + l] above it, minus 32;
// sub-block i / 16 has scale scales[i / 16].
struct rf_kquant_q6 {
    static RF_DEVICE void elems4(const unsigned char* b, int i0, float* out) {
        const int h = i0 >> 7;
        const int k = (i0 >> 5) & 3;
        const int l = i0 & 31;
        const float step = rf_f16_bits_to_float(b[208], b[209]) * (float)(signed char)b[192 + (i0 >> 4)];
        const unsigned char* ql = b + 64 * h + 32 * (k & 1) + l;
        const unsigned char* qh = b + 128 + 32 * h + l;
        const int shift = 4 * (k >> 1);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const unsigned int code = ((ql[e] >> shift) & 15u) | (((qh[e] >> (2 * k)) & 3u) << 4);
            out[e] = step * (float)((int)code - 32);
        }
    }
};

// The k-quant formats: group(b, p, out) as the others (p < 32), and elems4 for the f32
// dequantisation's 4-element chunks.
template <typename D, int BYTES> struct rf_kquant {
    static constexpr int BLOCK_BYTES = BYTES;
    static constexpr int BLOCK_ELEMS = RF_QK_K;
    static RF_DEVICE void elems4(const unsigned char* b, int i0, float* out) { D::elems4(b, i0, out); }
    static RF_DEVICE void group(const unsigned char* b, int p, float* out) {
        D::elems4(b, 8 * p, out);
        D::elems4(b, 8 * p + 4, out + 4);
    }
};

typedef rf_kquant<rf_kquant_affine<false>, 144> rf_q4_k;
typedef rf_kquant<rf_kquant_affine<true>, 176> rf_q5_k;
typedef rf_kquant<rf_kquant_q6, 210> rf_q6_k;

#endif // ROCMFORGE_QUANT_H
