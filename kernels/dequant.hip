// Dequantisation of block-quantised weights to f32, f16 or bf16: ggml q8_0, q4_0 and mxfp4
// (GGUF type 39), packed MXFP6 (E2M3, E3M2), and ggml's k-quants q4_K, q5_K, q6_K. Formats and
// layouts: rocmforge_quant.h.
//
//   rf_dequant_<fmt>_<dt>(const unsigned char* blocks, T* out, u64 nblocks)
//   out[E b + j] = element j of block b, for b < nblocks (E = 32, or 256 for the k-quants).
//
// Speed: bound by the output writes (a 4-bit weight becomes 2 or 4 bytes). Version 2 (version 1,
// one thread per 8 outputs reading its 9-34 bytes with byte loads from global memory, was
// load-instruction bound at 0.65 of copy): a thread block works on tiles of
// RF_DEQUANT_TILE_ELEMS elements (256 blocks of 32, or 32 k-quant super-blocks), grid-stride
// over tiles. Per tile it
//   1. stages the tile's packed bytes in shared memory: coalesced 16-byte loads when `blocks`
//      is 16-byte aligned (a tile is TILE * BLOCK_BYTES bytes, a multiple of 16, so every tile
//      starts aligned), byte loads otherwise; the last tile stages only the bytes that exist;
//   2. decodes group g (8 outputs, a quarter block) of the tile in thread g % blockDim.x from
//      shared memory and stores it with one 16-byte store, consecutive threads writing
//      consecutive 16 bytes (f16/bf16; f32 since version 4: below). A k-quant super-block is
//      32 such groups.
// Any blockDim.x works (the index math uses it, never a constant); the launcher uses 256, so
// a thread decodes 4 groups a tile. The launcher checks that `out` is 16-byte aligned and holds
// E * nblocks elements.
//
// Version 3 (MXFP4 only; the other formats decode as in version 2 with F::group): instead of
// rf_mx_element per element (~128 instructions a group), a thread reads its 8 payload bytes as
// three aligned 32-bit words and two funnel shifts, and turns the 8 codes into the bf16 bit
// patterns of their values with four __byte_perm table lookups, the signs or-ed in
// (rf_mxfp4_decode8); widened to f32 (exact) and multiplied by the E8M0 scale in f32 these are
// the same products, so the same bits, as before. With blockDim.x a multiple of 16 a thread's
// offsets into the stage advance by constants (rf_dequant_tile<rf_mxfp4>).
//
// Version 4 (f32 output, all formats): a thread stored its group's 32 bytes as two 16-byte
// stores, so each warp store instruction wrote 16 bytes at a 32-byte stride. Now the unit is a
// chunk of 4 outputs (16 bytes): thread t decodes chunks t, t + n, t + 2n, ... (n = blockDim.x)
// in pairs (c, c + n), and each store instruction of a warp writes its lanes' consecutive chunks,
// one contiguous run (rf_dequant_tile_f32; MXFP4 decodes both chunks of a pair in one
// rf_mxfp4_decode8 with two scales). f16/bf16 are unchanged.
//
// The k-quants (q4_K, q5_K, q6_K) take the general paths of version 2 (f16/bf16) and version 4
// (f32): each group or chunk decodes its elements with the codec's arithmetic
// (rocmforge_quant.h), reading its super-block's scales from the stage with byte loads.
// Version 6 (k-quants, f16/bf16): a group's scale once, codes as words (q6_K's through funnel
// shifts: its super-blocks are only 2-byte aligned), integers to floats without the conversion
// unit (rf_dequant_group); the same bits.
//
// Version 7 (all formats): with 256 threads and an aligned source, a thread loads its share of
// the next full tile into registers before decoding the current one (rf_dequant).
//
// Version 5 (MXFP6 only): instead of rf_mx_element per element (~133 instructions a group), a
// thread reads its 6 payload bytes as three aligned words and two funnel shifts (f32: 3 bytes of
// each chunk of a pair, two words and one funnel shift), places each code's bits in an f16
// (rf_mxfp6_bits: the value times 2^(bias - 15), exactly), widens the f16 to f32, multiplies by
// 2^(15 - bias) and by the E8M0 scale: the same f32 products as before, so the same bits. Offsets
// advance by constants as for MXFP4 (blockDim.x a multiple of 16 for f16/bf16, 32 for f32).

#include "rocmforge_quant.h"
#include "rocmforge_dequant_abi.h"

// ---------------------------------------------------------------------------------------------
// MXFP4 by table lookups in RF_E2M1_{LO,HI} (rocmforge_quant.h), read by __byte_perm with a
// selector of four 3-bit codes, one a nibble (the nibble's msb must be clear: on NVIDIA it asks
// for sign replication).
// ---------------------------------------------------------------------------------------------

// __byte_perm (selector nibbles with the msb clear), and a bit select. On NVIDIA as PTX: nvcc
// otherwise splits `x & 0x77777777` into two masks (the first lookup reads only the low 16 bits
// of its selector) and writes the select as three instructions instead of one LOP3. On AMD not
// HIP's __byte_perm: up to ROCm 5.x it indexes a byte array, which goes through scratch memory
// for a selector only known at run time; byte shifts of the 64-bit pair instead.
RF_DEVICE unsigned int rf_prmt(unsigned int lo, unsigned int hi, unsigned int selector) {
#if RF_PLATFORM_NVIDIA
    unsigned int r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(selector));
    return r;
#else
    const rf_u64 pair = ((rf_u64)hi << 32) | lo;
    unsigned int r = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        r |= ((unsigned int)(pair >> (8 * ((selector >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
    }
    return r;
#endif
}

// (a & mask) | (b & ~mask)
RF_DEVICE unsigned int rf_bitselect(unsigned int mask, unsigned int a, unsigned int b) {
#if RF_PLATFORM_NVIDIA
    unsigned int r;
    asm("lop3.b32 %0, %1, %2, %3, 0xca;" : "=r"(r) : "r"(mask), "r"(a), "r"(b));
    return r;
#else
    return (a & mask) | (b & ~mask);
#endif
}

// The values E2M1(c_i) * s0 (i < 4) and E2M1(c_i) * s1 (4 <= i < 8) of the codes c0..c3 in the
// low nibbles of bytes 0..3 of v0 and c4..c7 in those of v1 (the high nibbles are ignored), into
// out[i]. out[0..4) depends only on v0 and s0, out[4..8) only on v1 and s1 (the f32 path decodes
// two quarter blocks of different blocks at once). The same f32 products as
// rf_mx_element<2, 1>(c_i) * s, so the same bits: -0 (code 8), NaN and subnormal scales included.
RF_DEVICE void rf_mxfp4_decode8(unsigned int v0, unsigned int v1, float s0, float s1, float* out) {
    // Nibble 2i of x is c_i, nibble 2i + 1 is c_{i+4}.
    const unsigned int x = rf_bitselect(0x0F0F0F0Fu, v0, v1 << 4);
    const unsigned int m = x & 0x77777777u; // the magnitudes
    // Selector a: nibbles 0..3 of m, c0 c4 c1 c5; selector b: nibbles 4..7, c2 c6 c3 c7.
    const unsigned int sel_b = m >> 16;
    const unsigned int la = rf_prmt(RF_E2M1_LO0, RF_E2M1_LO1, m);
    const unsigned int lb = rf_prmt(RF_E2M1_LO0, RF_E2M1_LO1, sel_b);
    // The signs (bit 3 of each code) to bit 7 of the bytes of the high-byte lookups: the sign of
    // c_i (i < 4) is bit 8i + 3 of x, so bit 8i + 7 of x << 4; that of c_{i+4} is bit 8i + 7 of x.
    const unsigned int y = x << 4;
    const unsigned int sa = rf_prmt(y, x, 0x5140); // bytes y0 x0 y1 x1: c0 c4 c1 c5
    const unsigned int sb = rf_prmt(y, x, 0x7362); // bytes y2 x2 y3 x3: c2 c6 c3 c7
    const unsigned int ha = rf_prmt(RF_E2M1_HI0, RF_E2M1_HI1, m) | (sa & 0x80808080u);
    const unsigned int hb = rf_prmt(RF_E2M1_HI0, RF_E2M1_HI1, sel_b) | (sb & 0x80808080u);
    // bf16 pairs: bytes 0 and 2 of a lookup (c0 c1, c2 c3), bytes 1 and 3 (c4 c5, c6 c7).
    const unsigned int p01 = rf_prmt(la, ha, 0x6240);
    const unsigned int p45 = rf_prmt(la, ha, 0x7351);
    const unsigned int p23 = rf_prmt(lb, hb, 0x6240);
    const unsigned int p67 = rf_prmt(lb, hb, 0x7351);
    out[0] = __uint_as_float(p01 << 16) * s0;
    out[1] = __uint_as_float(p01 & 0xFFFF0000u) * s0;
    out[2] = __uint_as_float(p23 << 16) * s0;
    out[3] = __uint_as_float(p23 & 0xFFFF0000u) * s0;
    out[4] = __uint_as_float(p45 << 16) * s1;
    out[5] = __uint_as_float(p45 & 0xFFFF0000u) * s1;
    out[6] = __uint_as_float(p67 << 16) * s1;
    out[7] = __uint_as_float(p67 & 0xFFFF0000u) * s1;
}

// ---------------------------------------------------------------------------------------------
// MXFP6 by bit placement (version 5). A code's five magnitude bits placed under the f16 exponent
// and mantissa (shifted left by 10 - MBITS), its sign at bit 15, are the f16 of its value times
// 2^(bias - 15) exactly: E2M3 (bias 1) times 2^-14, E3M2 (bias 3) times 2^-12; codes with exponent
// field 0 land as f16 subnormals with the right value, since both formats have subnormals with
// the same "0.m * 2^(1 - bias)" rule as f16's "0.m * 2^-14". The f16 widens to f32 exactly
// (rf_f16x2_to_float2, subnormals included), times 2^(15 - bias) (exact: the result is the code's
// value, 2^-4 <= |v| <= 28), times the E8M0 scale: the product rf_mx_element(c) * s of F::group,
// so the same f32 bits (-0, NaN scale and 2^-127 included). The two multiplies are not folded:
// 2^(15 - bias) * s overflows f32 for scale bytes above 254 - (15 - bias).
// ---------------------------------------------------------------------------------------------

// The two f16 halves of w (bits 0-15, 16-31) as f32, exactly. NVIDIA: cvt.f32.f16 of each half
// (HADD2.F32 with a half selector on sm_80+); a widening conversion, exact for every f16, its
// subnormals included (.ftz would only concern f32 subnormals, and is not used). AMD:
// v_cvt_f32_f16, which keeps f16 subnormals as the kernels run (f16/f64 denormals on, the HIP
// default: .amdhsa_float_denorm_mode_16_64 3).
RF_DEVICE void rf_f16x2_to_float2(unsigned int w, float* lo, float* hi) {
#if RF_PLATFORM_NVIDIA
    asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
        : "=f"(*lo), "=f"(*hi)
        : "r"(w));
#else
    *lo = __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
    *hi = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
#endif
}

template <int EBITS, int MBITS> struct rf_mxfp6_bits {
    static constexpr int SHIFT = 10 - MBITS;
    static constexpr int BIAS = (1 << (EBITS - 1)) - 1;
    static constexpr float UNIT = (float)(1 << (15 - BIAS)); // 2^(15 - bias)
    static constexpr unsigned int MAG = (0x1fu << SHIFT) * 0x10001u; // both halves
    static constexpr unsigned int SIGN = 0x80008000u;

    // The f16 pair of the codes at bits P (low half) and P + 16 (high half) of z.
    template <int P> static RF_DEVICE unsigned int pair(unsigned int z) {
        return ((z << (SHIFT - P)) & MAG) | ((z << (10 - P)) & SIGN);
    }

    // Codes a0..a3 and b0..b3 laid out as z1 = a0 at bit 0, a1 at 6, b0 at 16, b1 at 22 and z2 =
    // a2, a3, b2, b3 likewise (other bits ignored): out[i] = value(a_i) * s0,
    // out[4 + i] = value(b_i) * s1.
    static RF_DEVICE void decode8(unsigned int z1, unsigned int z2, float s0, float s1, float* out) {
        const unsigned int p[4] = {pair<0>(z1), pair<6>(z1), pair<0>(z2), pair<6>(z2)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float lo, hi;
            rf_f16x2_to_float2(p[i], &lo, &hi);
            out[i] = (lo * UNIT) * s0;
            out[4 + i] = (hi * UNIT) * s1;
        }
    }

    // Codes a0..a3 at bits 0, 6, 12, 18 of x0 and b0..b3 likewise in x1 (bits 24-31 ignored).
    static RF_DEVICE void decode_chunks(unsigned int x0, unsigned int x1, float s0, float s1, float* out) {
        decode8(rf_bitselect(0xffffu, x0, x1 << 16), rf_bitselect(0xffffu, x0 >> 12, x1 << 4), s0, s1, out);
    }

    // Codes 0..7 at bits 0, 6, .., 42 of (hi : lo), times s, into out[0..8).
    static RF_DEVICE void decode_group(unsigned int lo, unsigned int hi, float s, float* out) {
        // z1: bits 0-15 and 24-39 (codes 0, 1 and 4, 5); z2: bits 12-27 and 36-51 (2, 3 and 6, 7).
        decode8(rf_bitselect(0xffffu, lo, __funnelshift_r(lo, hi, 8u)), rf_bitselect(0xffffu, lo >> 12, hi << 12), s,
                s, out);
    }
};

// The 32 bits from stage byte `at` on, shifted right by `extra` more bits (< 8): two aligned words
// and a funnel shift, whose amount (8 at + extra) is taken mod 32 on both platforms.
RF_DEVICE unsigned int rf_stage_word(const unsigned char* stage, int at, unsigned int extra) {
    const unsigned int* const w = reinterpret_cast<const unsigned int*>(stage + (at & ~3));
    return __funnelshift_r(w[0], w[1], 8u * (unsigned int)at + extra);
}

// The word-aligned paths of MXFP4 (version 3) and MXFP6 (version 5), which differ only in where a
// thread's codes lie in a block and how a word of them decodes. WORDS: whether F has them.
//   group_byte(p), group_shift(p): group p (elements 8p .. + 8) starts at that byte of its block,
//     that many bits further (MXFP4: payload bytes 8 (p & 1) .., high nibbles for p >= 2);
//   chunk_byte(r), chunk_shift(r): likewise for f32 chunk r (elements 4r .. + 4);
//   group(x0, x1, s, out): the group's 8 values, its bits funnel-shifted into x0 (bits 0-31) and
//     x1 (32-63);
//   chunks(x0, x1, s0, s1, out): two chunks at once, each at bit 0 of its word, out[0..4) and
//     out[4..8).
template <typename F> struct rf_dequant_words {
    static constexpr bool WORDS = false;
};

template <> struct rf_dequant_words<rf_mxfp4> {
    static constexpr bool WORDS = true;
    static RF_DEVICE int group_byte(int p) { return 1 + 8 * (p & 1); }
    static RF_DEVICE unsigned int group_shift(int p) { return 4u * (unsigned int)(p >> 1); }
    static RF_DEVICE int chunk_byte(int r) { return 1 + 4 * (r & 3); }
    static RF_DEVICE unsigned int chunk_shift(int r) { return 4u * (unsigned int)((r >> 2) & 1); }
    static RF_DEVICE void group(unsigned int x0, unsigned int x1, float s, float* out) {
        rf_mxfp4_decode8(x0, x1, s, s, out);
    }
    static RF_DEVICE void chunks(unsigned int x0, unsigned int x1, float s0, float s1, float* out) {
        rf_mxfp4_decode8(x0, x1, s0, s1, out);
    }
};

// MXFP6: group p is payload bytes 6p .. + 6 (codes 8p .. + 8), chunk r bytes 3r .. + 3.
template <int EBITS, int MBITS> struct rf_dequant_words<rf_mxfp6<EBITS, MBITS>> {
    typedef rf_mxfp6_bits<EBITS, MBITS> D;
    static constexpr bool WORDS = true;
    static RF_DEVICE int group_byte(int p) { return 1 + 6 * p; }
    static RF_DEVICE unsigned int group_shift(int) { return 0u; }
    static RF_DEVICE int chunk_byte(int r) { return 1 + 3 * r; }
    static RF_DEVICE unsigned int chunk_shift(int) { return 0u; }
    static RF_DEVICE void group(unsigned int x0, unsigned int x1, float s, float* out) { D::decode_group(x0, x1, s, out); }
    static RF_DEVICE void chunks(unsigned int x0, unsigned int x1, float s0, float s1, float* out) {
        D::decode_chunks(x0, x1, s0, s1, out);
    }
};

template <typename T> RF_DEVICE void rf_dequant_store8(T* dst, const float* v) {
    constexpr int N = rf_pack16<T>::N;
#pragma unroll
    for (int i = 0; i < 8; i += N) {
        rf_store16(dst + i, rf_pack16<T>::pack(v + i));
    }
}

// ---------------------------------------------------------------------------------------------
// f32 output (version 4). Eight f32 are 32 bytes: a thread storing its group as two 16-byte
// stores made each warp store instruction write one half of every 32-byte sector it touched
// (16 bytes at a 32-byte stride), the other halves coming from the next instruction. The f32 path
// works on chunks instead: chunk c of a tile is the 4 outputs 4 (c % 8) .. + 4 of block c / 8,
// one 16-byte store. Thread t decodes chunks t, t + n, t + 2n, ... (n = blockDim.x) two at a time
// (c and c + n: one loop step, one MXFP4 lookup for both), so each store instruction of a warp
// writes the warp's consecutive chunks, one contiguous run of 16 x warp-width bytes. No lane
// exchanges: any warp width and block size.
// ---------------------------------------------------------------------------------------------

// MXFP4 and MXFP6 chunk c (r = c % 8 of block c / 8): its codes funnel-shifted to bit 0 of one
// word (rf_dequant_words), and the block's scale.
template <typename F> RF_DEVICE unsigned int rf_dequant_chunk_word(const unsigned char* stage, int c, float* s) {
    typedef rf_dequant_words<F> W;
    const int scale_at = F::BLOCK_BYTES * (c >> 3);
    *s = rf_e8m0_to_float(stage[scale_at]);
    return rf_stage_word(stage, scale_at + W::chunk_byte(c & 7), W::chunk_shift(c & 7));
}

// rf_dequant_quarter<F>::decode(stage, c, out): chunk c of a staged tile into out[0..4), with the
// per-element f32 arithmetic of F::group, so the same bits. MXFP4 and MXFP6 (rf_dequant_words)
// take this word path; q8_0 and q4_0 are specialised below.
template <typename F> struct rf_dequant_quarter {
    static RF_DEVICE void decode(const unsigned char* stage, int c, float* out) {
        float s;
        const unsigned int x = rf_dequant_chunk_word<F>(stage, c, &s);
        float v8[8];
        rf_dequant_words<F>::chunks(x, x, s, s, v8);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[i] = v8[i];
        }
    }
};

template <> struct rf_dequant_quarter<rf_q8_0> {
    static RF_DEVICE void decode(const unsigned char* stage, int c, float* out) {
        const unsigned char* const b = stage + (c >> 3) * rf_q8_0::BLOCK_BYTES;
        const float d = rf_f16_bits_to_float(b[0], b[1]);
        const unsigned char* const q = b + 2 + 4 * (c & 7);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[i] = d * (float)(signed char)q[i];
        }
    }
};

// Elements 4r .. + 4 (r = c % 8): the low nibbles of payload bytes 4r .. for r < 4, the high
// nibbles of bytes 4 (r - 4) .. otherwise.
template <> struct rf_dequant_quarter<rf_q4_0> {
    static RF_DEVICE void decode(const unsigned char* stage, int c, float* out) {
        const unsigned char* const b = stage + (c >> 3) * rf_q4_0::BLOCK_BYTES;
        const float d = rf_f16_bits_to_float(b[0], b[1]);
        const unsigned char* const q = b + 2 + 4 * (c & 3);
        const int shift = 4 * ((c >> 2) & 1);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[i] = d * (float)((int)((q[i] >> shift) & 15u) - 8);
        }
    }
};

// The k-quants: chunk c is elements 4 (c % 64) .. + 4 of super-block c / 64.
template <typename D, int BYTES> struct rf_dequant_quarter<rf_kquant<D, BYTES>> {
    static RF_DEVICE void decode(const unsigned char* stage, int c, float* out) {
        D::elems4(stage + (c >> 6) * BYTES, 4 * (c & 63), out);
    }
};

// Chunks c0 and c1 into out[0..4) and out[4..8): one decode for both where F has word paths.
template <typename F> RF_DEVICE void rf_dequant_pair(const unsigned char* stage, int c0, int c1, float* out) {
    if constexpr (rf_dequant_words<F>::WORDS) {
        float s0, s1;
        const unsigned int x0 = rf_dequant_chunk_word<F>(stage, c0, &s0);
        const unsigned int x1 = rf_dequant_chunk_word<F>(stage, c1, &s1);
        rf_dequant_words<F>::chunks(x0, x1, s0, s1, out);
    } else {
        rf_dequant_quarter<F>::decode(stage, c0, out);
        rf_dequant_quarter<F>::decode(stage, c1, out + 4);
    }
}

// The f32 tile: chunks c = tid + k nthreads < (E / 4) nb (E elements a block), in pairs
// (c, c + nthreads); a thread's last chunk is alone when its partner lies past the tile (a
// partial tile, or a block size that does not divide the tile's chunks).
template <typename F>
RF_DEVICE void rf_dequant_tile_f32(const unsigned char* stage, float* o, int nb, int tid, int nthreads) {
    const int chunks = F::BLOCK_ELEMS / 4 * nb;
    int c = tid;
    for (; c + nthreads < chunks; c += 2 * nthreads) {
        float v[8];
        rf_dequant_pair<F>(stage, c, c + nthreads, v);
        rf_store16(o + 4 * (rf_u64)c, rf_pack16<float>::pack(v));
        rf_store16(o + 4 * (rf_u64)(c + nthreads), rf_pack16<float>::pack(v + 4));
    }
    if (c < chunks) {
        float v[4];
        rf_dequant_quarter<F>::decode(stage, c, v);
        rf_store16(o + 4 * (rf_u64)c, rf_pack16<float>::pack(v));
    }
}

// A group of 8 outputs (f16/bf16 path), block b, part p: F::group, except for the k-quants,
// whose 8 elements share a sub-block: its scale (and min) once rather than once per 4 elements,
// the codes of q4_K / q5_K as two aligned words (a super-block of 144 or 176 bytes starts
// 16-byte aligned in the stage), and the integer codes made floats by placing them under the
// exponent of 2^23 (exact, and not the quarter-rate conversion unit). The arithmetic on them is
// the codec's (rocmforge_quant.h), so the same bits.
template <typename F> struct rf_dequant_group {
    static RF_DEVICE void decode(const unsigned char* b, int p, float* out) { F::group(b, p, out); }
};

// (float)code for 0 <= code < 2^23, exactly.
RF_DEVICE float rf_dequant_small_int(unsigned int code) { return __int_as_float(0x4B000000 | (int)code) - 8388608.0f; }

template <bool FIFTH_BIT, int BYTES> struct rf_dequant_group<rf_kquant<rf_kquant_affine<FIFTH_BIT>, BYTES>> {
    static RF_DEVICE void decode(const unsigned char* b, int p, float* out) {
        const int i0 = 8 * p;
        const int s = i0 >> 5;
        unsigned int sc, m;
        rf_kquant_scale_min(b + 4, s, &sc, &m);
        const float step = rf_f16_bits_to_float(b[0], b[1]) * (float)sc;
        const float offset = rf_f16_bits_to_float(b[2], b[3]) * (float)m;
        const unsigned int* q =
            reinterpret_cast<const unsigned int*>(b + rf_kquant_affine<FIFTH_BIT>::QS + 32 * (i0 >> 6) + (i0 & 31));
        const int shift = 4 * (s & 1);
        unsigned int codes[2] = {(q[0] >> shift) & 0x0F0F0F0Fu, (q[1] >> shift) & 0x0F0F0F0Fu};
        if (FIFTH_BIT) {
            const unsigned int* h = reinterpret_cast<const unsigned int*>(b + 16 + (i0 & 31));
            codes[0] |= ((h[0] >> s) & 0x01010101u) << 4;
            codes[1] |= ((h[1] >> s) & 0x01010101u) << 4;
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            out[i] = step * rf_dequant_small_int((codes[i >> 2] >> (8 * (i & 3))) & 0xFFu) - offset;
        }
    }
};

// q6_K super-blocks are 210 bytes, so 2-byte aligned in the stage: a group's 8 low-nibble bytes
// and 8 high-bit-pair bytes each come as three aligned words and two funnel shifts.
RF_DEVICE void rf_dequant_load8_even(const unsigned char* p, unsigned int* w) {
    const unsigned int* a = reinterpret_cast<const unsigned int*>(p - ((size_t)p & 3));
    const unsigned int shift = 8u * (unsigned int)((size_t)p & 3);
    const unsigned int a0 = a[0], a1 = a[1], a2 = a[2];
    w[0] = __funnelshift_r(a0, a1, shift);
    w[1] = __funnelshift_r(a1, a2, shift);
}

template <int BYTES> struct rf_dequant_group<rf_kquant<rf_kquant_q6, BYTES>> {
    static RF_DEVICE void decode(const unsigned char* b, int p, float* out) {
        const int i0 = 8 * p;
        const int h = i0 >> 7;
        const int k = (i0 >> 5) & 3;
        const int l = i0 & 31;
        const float step = rf_f16_bits_to_float(b[208], b[209]) * (float)(signed char)b[192 + (i0 >> 4)];
        unsigned int ql[2], qh[2];
        rf_dequant_load8_even(b + 64 * h + 32 * (k & 1) + l, ql);
        rf_dequant_load8_even(b + 128 + 32 * h + l, qh);
        const int shift = 4 * (k >> 1);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const unsigned int codes = ((ql[j] >> shift) & 0x0F0F0F0Fu) | (((qh[j] >> (2 * k)) & 0x03030303u) << 4);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                // (float)(code - 32), exactly: 2^23 + code less 2^23 + 32.
                out[4 * j + e] = step * (__int_as_float(0x4B000000 | (int)((codes >> (8 * e)) & 0xFFu)) - 8388640.0f);
            }
        }
    }
};

// Decodes a staged tile (nb blocks at `stage`) into o[0 .. E nb). f16/bf16: group g (8 outputs,
// an eighth of E) in thread g % nthreads, one 16-byte store; f32: rf_dequant_tile_f32.
// `stage` is 16-byte aligned and readable for 16 bytes past the tile's blocks.
template <typename F> struct rf_dequant_tile {
    template <typename T>
    static RF_DEVICE void run(const unsigned char* stage, T* o, int nb, int tid, int nthreads) {
        if constexpr (rf_pack16<T>::N == 4) {
            rf_dequant_tile_f32<F>(stage, o, nb, tid, nthreads);
        } else {
            constexpr int GROUPS = F::BLOCK_ELEMS / 8; // a power of two: shifts and masks
            const int groups = GROUPS * nb;
            for (int g = tid; g < groups; g += nthreads) {
                float v[8];
                rf_dequant_group<F>::decode(stage + (g / GROUPS) * F::BLOCK_BYTES, g % GROUPS, v);
                // A 64-bit offset: with `o + 8 * g + i` in int arithmetic nvcc 13 split each
                // 16-byte store into four 32-bit ones.
                rf_dequant_store8(o + 8 * (rf_u64)g, v);
            }
        }
    }
};

// MXFP4 and MXFP6 (rf_dequant_words): with the launcher's block sizes a thread keeps its place
// in a block from one step to the next, so its word offsets advance by constants and its shift
// amount stays the same; other block sizes take the general loops.
template <typename F> struct rf_dequant_tile_words {
    typedef rf_dequant_words<F> W;
    static constexpr int BB = F::BLOCK_BYTES;

    template <typename T>
    static RF_DEVICE void run(const unsigned char* stage, T* o, int nb, int tid, int nthreads) {
        if constexpr (rf_pack16<T>::N == 4) {
            if (nthreads % 32 == 0) {
                run_f32(stage, o, nb, tid, nthreads);
            } else {
                rf_dequant_tile_f32<F>(stage, o, nb, tid, nthreads);
            }
        } else {
            run16(stage, o, nb, tid, nthreads);
        }
    }

    // f16 / bf16: group g (8 outputs) in thread g % nthreads, its bits in the three aligned words
    // from its first byte, funnel-shifted into two.
    template <typename T>
    static RF_DEVICE void run16(const unsigned char* stage, T* o, int nb, int tid, int nthreads) {
        if (nthreads % 16 == 0) {
            // g advances by a multiple of 16: a thread keeps its part p = tid % 4 and steps over
            // BB * nthreads / 4 stage bytes, a multiple of 4.
            const int p = tid & 3;
            const int stride = BB * (nthreads >> 2);
            const int end = BB * nb;
            int scale_at = BB * (tid >> 2);
            const int at = scale_at + W::group_byte(p);
            const unsigned int amount = 8u * (unsigned int)at + W::group_shift(p);
            const unsigned char* w = stage + (at & ~3);
            const unsigned char* sc = stage + scale_at;
            T* dst = o + 8 * (rf_u64)tid;
            for (; scale_at < end; scale_at += stride) {
                const unsigned int* const wp = reinterpret_cast<const unsigned int*>(w);
                const unsigned int w0 = wp[0];
                const unsigned int w1 = wp[1];
                const unsigned int w2 = wp[2];
                float v[8];
                W::group(__funnelshift_r(w0, w1, amount), __funnelshift_r(w1, w2, amount), rf_e8m0_to_float(*sc), v);
                rf_dequant_store8(dst, v);
                w += stride;
                sc += stride;
                dst += 8 * nthreads;
            }
        } else {
            const int groups = 4 * nb;
            for (int g = tid; g < groups; g += nthreads) {
                const int scale_at = BB * (g >> 2);
                const int at = scale_at + W::group_byte(g & 3);
                const unsigned int amount = 8u * (unsigned int)at + W::group_shift(g & 3);
                const unsigned int* const w = reinterpret_cast<const unsigned int*>(stage + (at & ~3));
                float v[8];
                W::group(__funnelshift_r(w[0], w[1], amount), __funnelshift_r(w[1], w[2], amount),
                         rf_e8m0_to_float(stage[scale_at]), v);
                rf_dequant_store8(o + 8 * (rf_u64)g, v);
            }
        }
    }

    // rf_dequant_tile_f32 with blockDim.x a multiple of 32 (the launcher's case). Chunk c and its
    // partner c + n (n = nthreads) lie n / 8 blocks apart, BB n / 8 stage bytes, a multiple of 4;
    // a step is 2 n chunks. So a thread keeps c % 8, both chunks' words sit at a constant
    // distance and share one shift amount, and all offsets advance by constants.
    static RF_DEVICE void run_f32(const unsigned char* stage, float* o, int nb, int tid, int nthreads) {
        const int r = tid & 7;
        const int half = BB * (nthreads >> 3);
        const int stride = 2 * half;
        const int end = BB * nb;
        int scale_at = BB * (tid >> 3);
        const int at = scale_at + W::chunk_byte(r);
        const unsigned int amount = 8u * (unsigned int)at + W::chunk_shift(r);
        const unsigned char* w = stage + (at & ~3);
        const unsigned char* sc = stage + scale_at;
        float* dst = o + 4 * (rf_u64)tid;
        const rf_u64 partner = 4 * (rf_u64)nthreads;
        for (; scale_at + half < end; scale_at += stride) {
            const unsigned int* const w0 = reinterpret_cast<const unsigned int*>(w);
            const unsigned int* const w1 = reinterpret_cast<const unsigned int*>(w + half);
            float v[8];
            W::chunks(__funnelshift_r(w0[0], w0[1], amount), __funnelshift_r(w1[0], w1[1], amount),
                      rf_e8m0_to_float(sc[0]), rf_e8m0_to_float(sc[half]), v);
            rf_store16(dst, rf_pack16<float>::pack(v));
            rf_store16(dst + partner, rf_pack16<float>::pack(v + 4));
            w += stride;
            sc += stride;
            dst += 2 * partner;
        }
        // The last chunk alone when its partner lies past the tile.
        if (scale_at < end) {
            const unsigned int* const w0 = reinterpret_cast<const unsigned int*>(w);
            const unsigned int x = __funnelshift_r(w0[0], w0[1], amount);
            const float s = rf_e8m0_to_float(sc[0]);
            float v[8];
            W::chunks(x, x, s, s, v);
            rf_store16(dst, rf_pack16<float>::pack(v));
        }
    }
};

template <> struct rf_dequant_tile<rf_mxfp4> : rf_dequant_tile_words<rf_mxfp4> {};
template <int EBITS, int MBITS>
struct rf_dequant_tile<rf_mxfp6<EBITS, MBITS>> : rf_dequant_tile_words<rf_mxfp6<EBITS, MBITS>> {};

template <typename F, typename T>
RF_DEVICE void rf_dequant(const unsigned char* blocks, T* out, rf_u64 nblocks) {
    constexpr int BB = F::BLOCK_BYTES;
    constexpr int TILE = RF_DEQUANT_TILE_ELEMS / F::BLOCK_ELEMS; // blocks a tile
    constexpr int TILE_VECS = TILE * BB / 16;
    static_assert(TILE * BB % 16 == 0, "a tile must be whole 16-byte vectors");
    // One vector more than the tile: MXFP4 reads whole aligned words, up to 3 bytes past the last
    // block (ignored).
    __shared__ uint4 stage_vecs[TILE_VECS + 1];
    unsigned char* const stage = reinterpret_cast<unsigned char*>(stage_vecs);

    const int tid = (int)threadIdx.x;
    const int nthreads = (int)blockDim.x;
    // Uniform over the grid: every tile starts TILE * BB (a multiple of 16) bytes after `blocks`.
    const bool aligned = rf_is_aligned16(blocks);
    const rf_u64 ntiles = (nblocks + (TILE - 1)) / TILE;
    // Full tiles (all but maybe the last) with the launcher's 256 threads and an aligned source
    // take the prefetching path (version 7): a thread loads its share of the next tile into
    // registers before it decodes the current one, so the loads' latency hides under the
    // decoding and the stores.
    constexpr int PREFETCH_THREADS = 256;
    constexpr int PV = (TILE_VECS + PREFETCH_THREADS - 1) / PREFETCH_THREADS;
    const bool prefetch = aligned && nthreads == PREFETCH_THREADS;
    const rf_u64 full_tiles = nblocks / TILE;
    uint4 pre[PV];
    auto fetch = [&](rf_u64 t) {
        const uint4* src = reinterpret_cast<const uint4*>(blocks + t * TILE * (rf_u64)BB);
#pragma unroll
        for (int j = 0; j < PV; ++j) {
            const int i = tid + PREFETCH_THREADS * j;
            if (i < TILE_VECS) pre[j] = rf_load16(src + i);
        }
    };
    if (prefetch && blockIdx.x < full_tiles) fetch(blockIdx.x);
    for (rf_u64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const rf_u64 first = t * TILE;
        const rf_u64 left = nblocks - first;
        const int nb = left < (rf_u64)TILE ? (int)left : TILE;
        const int bytes = nb * BB;
        const unsigned char* const src = blocks + first * (rf_u64)BB;
        if (prefetch && t < full_tiles) {
#pragma unroll
            for (int j = 0; j < PV; ++j) {
                const int i = tid + PREFETCH_THREADS * j;
                if (i < TILE_VECS) stage_vecs[i] = pre[j];
            }
        } else if (aligned) {
            const int vecs = bytes >> 4;
            for (int i = tid; i < vecs; i += nthreads) {
                stage_vecs[i] = rf_load16(src + 16 * i);
            }
            // Only a partial last tile has a tail (< 16 bytes).
            for (int i = 16 * vecs + tid; i < bytes; i += nthreads) {
                stage[i] = src[i];
            }
        } else {
            for (int i = tid; i < bytes; i += nthreads) {
                stage[i] = src[i];
            }
        }
        __syncthreads();
        if (prefetch && t + gridDim.x < full_tiles) fetch(t + gridDim.x);
        rf_dequant_tile<F>::run(stage, out + first * F::BLOCK_ELEMS, nb, tid, nthreads);
        // The next tile's staging overwrites what this one's decoding reads.
        __syncthreads();
    }
}

#define RF_DEQUANT_ENTRY(fmt, F, suffix, T)                                                               \
    RF_KERNEL void rf_dequant_##fmt##_##suffix(const unsigned char* blocks, T* out, rf_u64 nblocks) { \
        rf_dequant<F, T>(blocks, out, nblocks);                                                        \
    }

#define RF_DEQUANT_Q8_0(suffix, T) RF_DEQUANT_ENTRY(q8_0, rf_q8_0, suffix, T)
#define RF_DEQUANT_Q4_0(suffix, T) RF_DEQUANT_ENTRY(q4_0, rf_q4_0, suffix, T)
#define RF_DEQUANT_MXFP4(suffix, T) RF_DEQUANT_ENTRY(mxfp4, rf_mxfp4, suffix, T)
#define RF_DEQUANT_MXFP6_E2M3(suffix, T) RF_DEQUANT_ENTRY(mxfp6_e2m3, rf_mxfp6_e2m3, suffix, T)
#define RF_DEQUANT_MXFP6_E3M2(suffix, T) RF_DEQUANT_ENTRY(mxfp6_e3m2, rf_mxfp6_e3m2, suffix, T)
#define RF_DEQUANT_Q4_K(suffix, T) RF_DEQUANT_ENTRY(q4_k, rf_q4_k, suffix, T)
#define RF_DEQUANT_Q5_K(suffix, T) RF_DEQUANT_ENTRY(q5_k, rf_q5_k, suffix, T)
#define RF_DEQUANT_Q6_K(suffix, T) RF_DEQUANT_ENTRY(q6_k, rf_q6_k, suffix, T)

RF_FOR_EACH_DTYPE(RF_DEQUANT_Q8_0)
RF_FOR_EACH_DTYPE(RF_DEQUANT_Q4_0)
RF_FOR_EACH_DTYPE(RF_DEQUANT_MXFP4)
RF_FOR_EACH_DTYPE(RF_DEQUANT_MXFP6_E2M3)
RF_FOR_EACH_DTYPE(RF_DEQUANT_MXFP6_E3M2)
RF_FOR_EACH_DTYPE(RF_DEQUANT_Q4_K)
RF_FOR_EACH_DTYPE(RF_DEQUANT_Q5_K)
RF_FOR_EACH_DTYPE(RF_DEQUANT_Q6_K)
