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
// Nibble order (q4_0, mxfp4): element j < 16 is the low nibble of payload byte j, element j + 16
// its high nibble. Every decode here is exact in f32 (products of a power of two or an f16 and a
// value of at most 8 significant bits), except that a result below 2^-126 depends on the
// device's f32 denormal mode.

#ifndef ROCMFORGE_QUANT_H
#define ROCMFORGE_QUANT_H

#include "rocmforge.h"

#define RF_QK 32

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
// Formats. Each has BLOCK_BYTES and group(block, p, out): the 8 values of elements 8p..8p+8
// (p < 4) of the block at `block`, scaled, read with byte loads (blocks have no alignment). The
// MX formats add what the products need: the element decoder, the number of 32-bit payload
// words, and code(q, j): code j from the payload words.
// ---------------------------------------------------------------------------------------------

struct rf_q8_0 {
    static constexpr int BLOCK_BYTES = 34;
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

// Packed MXFP6, element type E2M3 (EBITS = 2, MBITS = 3) or E3M2 (3, 2).
template <int EBITS, int MBITS> struct rf_mxfp6 {
    static constexpr int BLOCK_BYTES = 25;
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

#endif // ROCMFORGE_QUANT_H
