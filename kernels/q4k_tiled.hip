// q4_K matrix-vector product over the tiled layout: y[r] = sum_c W[r, c] x[c] (decode).
//
// The weight is the [n, k] q4_K matrix of GGUF's block_q4_K rows (super-blocks of 256 elements:
// d, dmin, 12 bytes of 6-bit sub-block scales and mins, 128 bytes of 4-bit codes; element i of
// sub-block j is d * sc_j * q_i - dmin * m_j), re-laid out once on the host
// (crates/rocm-kernels/src/quant/q4k_tiled.rs documents the layout in full) into the tiled
// shape kernels/include/rocmforge_tiled.h streams: 16-row tiles, a group a super-block, a
// group's 2 KB of codes in lane order and its 16 rows' 16-byte headers (d, dmin, the 12 scale
// bytes, as GGUF stores them) as its scales. A lane's word holds the codes of one row's 8
// elements, the ones its mma fragments need:
//
//   mma pair P < 8 of a group (h = P / 4, e = P % 4), lane l = 4g + u: words W(g, P, u) and
//   W(g + 8, P, u) at payload byte ((t * nsb + s) * 4 + P / 2) * 512 + 16 l + 4 (2 (P % 2) +
//   0 or 1), t the tile, s the super-block, nsb = k / 256;
//   W(r, P, u): row r's elements 8e + m (m < 8) of sub-block u + 4h, element m at nibble
//   NIBBLE(m) = 0, 4, 2, 6, 1, 5, 3, 7 (bits 4 NIBBLE(m) .. + 4).
//
// Entries (payload, scales, x, rf_t4_outputs y, rf_t4_norm norm, u32 nb, u32 batch), nb = k / 32:
//   rf_q4k_tiled_matvec_mma_<dt>   f16 / bf16, one vector, NVIDIA sm_80+ (mma.sync; elsewhere
//                                  they trap and the launcher never picks them)
//   rf_q4k_tiled_normed_mma_<dt>   the same with the RMSNorm `norm` applied to x (x then a row of
//                                  the residual stream; rocmforge_mxfp4_tiled_abi.h)
//   rf_q4k_tiled_batch8_mma_<dt>,  f16 / bf16, 1..8 and 1..32 vectors on the matrix cores (the
//   rf_q4k_tiled_batch32_mma_<dt>  scales in A, vectors as B's columns: rf_t4k_vectors)
//   rf_q4k_tiled_matvec_<dt>,      portable: f32, f16, bf16, any device, any batch (normed: one
//   rf_q4k_tiled_normed_<dt>       vector)
// putting their totals as y.mode says (stored, added to the residual stream, or a gate-and-up
// product's SwiGLU), as the MXFP4 entries do; and rf_q4k_tiled_dequant_<dt> (payload, scales,
// T* out, u32 rows, u32 nb): the weight's first `rows` rows as T, row-major, for a prefill's GEMM.
//
// Matrix-core kernel: rf_t4_stream's resident blocks and per-warp cp.async rings, a stage a
// group (2304 bytes); x staged once a block as f16 (bf16 block-scaled, rocmforge_x16.h), with each
// 32-element block's sum of the staged values times its factor (xt: the mins' activations).
// The sub-blocks are B's columns (quant_matvec_mma.hip's q4_K columns loop has the same idea):
// in mma pair P, lane (g, u) gives A rows g and g + 8's codes of sub-block u + 4h, elements
// 8e .. 8e + 7, and B's column c holds x only in the k slots of lane c / 2 (lanes g = 2u, 2u + 1
// give x of their sub-block, the others read a row of zeros). So D's columns 2u and 2u + 1 are
// sub-block u + 4h's row sums, in lane u alone, and they accumulate over the four pairs of a half
// without rescaling (one x factor a sub-block). Each lane then scales its own two sub-blocks:
//   total += d (sc_u f_u S_u + sc_{u+4} f_{u+4} S_{u+4}) - dmin (m_u xt_u + m_{u+4} xt_{u+4}),
// S the sub-block's sums of codes times staged x, and a quad's four lanes are added at the
// tile's end (in a fixed order). Decoding into A pairs: elements 0..3 of a word's 8 at nibbles 0,
// 4 | 2, 6 (w & 0x000f000f and (w >> 8) & 0x000f000f) are f16 subnormals q 2^-24, exact;
// elements 4..7 at nibbles 1, 5 | 3, 7 (the masks 0x00f000f0) are 16 q 2^-24, the second mma of
// a pair into accumulators of their own, taken back by 1/16 (exact) when the lane scales them: 5
// operations for 8 codes. d takes the 2^24 back. Every product is exact; the sums are f32.

#include "rocmforge_quant.h"
#include "rocmforge_tiled.h"

// The nibble of a word that holds element m (< 8) of its eight: 0, 4, 2, 6, 1, 5, 3, 7 (the
// portable kernel's and the dequantisation's decode; the matrix-core one masks whole pairs).
RF_DEVICE int rf_t4k_nibble(int m) { return ((m & 1) << 2) | (m & 2) | ((m >> 2) & 1); }

#if RF_MMA_SYNC

// Byte j (< 4) of a word plus 2^23, as a float: one byte permute (j a lane's own index).
RF_DEVICE float rf_t4k_byte_biased(unsigned word, unsigned j) {
    return __uint_as_float(__byte_perm(word, 0x4b000000u, 0x7640u | j));
}

// A row's super-block scale d and min scale dmin from its header (its first word: two f16).
RF_DEVICE float rf_t4k_d(uint4 hd) { return __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffffu))); }
RF_DEVICE float rf_t4k_dmin(uint4 hd) { return __half2float(__ushort_as_half((unsigned short)(hd.x >> 16))); }

// A row's 6-bit sub-block scales and mins from its header (16 bytes: d, dmin as f16, then GGUF's
// 12 scale bytes): GGUF's get_scale_min_k4, four bytes at a time. Byte j of sc[0] / m[0] is
// sub-block j's scale / min, of sc[1] / m[1] sub-block j + 4's: sub-blocks 0..3 in the low 6 bits
// of bytes 0..3 (scales) and 4..7 (mins); 4..7 in bytes 8..11's nibbles with bytes 0..7's top
// two bits above them.
struct rf_t4k_fields {
    unsigned sc[2];
    unsigned m[2];
    RF_DEVICE explicit rf_t4k_fields(uint4 hd) {
        sc[0] = hd.y & 0x3f3f3f3fu;
        m[0] = hd.z & 0x3f3f3f3fu;
        sc[1] = (hd.w & 0x0f0f0f0fu) | ((hd.y >> 2) & 0x30303030u);
        m[1] = ((hd.w >> 4) & 0x0f0f0f0fu) | ((hd.z >> 2) & 0x30303030u);
    }
};

// A row's header (16 bytes: d, dmin as f16, then GGUF's 12 scale bytes) as what lane u scales
// its sub-blocks u and u + 4 by: the scales times the x factors f_u, f_{u+4} (exact: powers of
// two), the mins, d times 2^24 (the codes' unit) and dmin.
struct rf_t4k_row {
    float s0, s1; // sc_u f_u, sc_{u+4} f_{u+4}
    float m0, m1; // m_u, m_{u+4}
    float d, dmin;
    RF_DEVICE rf_t4k_row(uint4 hd, unsigned u, float f0, float f1) {
        const rf_t4k_fields six(hd);
        s0 = fmaf(rf_t4k_byte_biased(six.sc[0], u), f0, -8388608.0f * f0);
        s1 = fmaf(rf_t4k_byte_biased(six.sc[1], u), f1, -8388608.0f * f1);
        m0 = rf_t4k_byte_biased(six.m[0], u) - 8388608.0f;
        m1 = rf_t4k_byte_biased(six.m[1], u) - 8388608.0f;
        d = rf_t4k_d(hd) * 16777216.0f;
        dmin = rf_t4k_dmin(hd);
    }
    // The row's part of the group from its two sub-blocks' sums: lo (elements 0..3 of each word's
    // 8) and hi (4..7, 16 times their value) of sub-blocks u and u + 4, and their x sums.
    RF_DEVICE float part(float lo0, float hi0, float lo1, float hi1, float x0, float x1) const {
        const float c = fmaf(s0, fmaf(hi0, 0.0625f, lo0), s1 * fmaf(hi1, 0.0625f, lo1));
        const float m = fmaf(m0, x0, m1 * x1);
        return fmaf(d, c, -dmin * m);
    }
};

// Multiplies a staged group into the lane's partial row totals (its two sub-blocks): `xs`, the
// group's 256 elements of x as f16, or (a lane that gives no x) a row of zeros; `xf` and `xt`,
// the group's 8 blocks' factors and sums.
RF_DEVICE void rf_t4k_group_mma(const unsigned char* stage, const unsigned char* xl, const float* xf, const float* xt,
                                int lane, float& total_g, float& total_h) {
    const unsigned g = (unsigned)lane >> 2;
    const unsigned u = (unsigned)lane & 3u;
    uint4 pair[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        pair[i] = *reinterpret_cast<const uint4*>(stage + 512 * i + 16 * lane);
    }
    float lo[2][4];
    float hi[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            lo[h][i] = 0.0f;
            hi[h][i] = 0.0f;
        }
    }
#pragma unroll
    for (int p = 0; p < 8; ++p) {
        const int h = p >> 2;
        const int e = p & 3;
        const unsigned wg = p & 1 ? pair[p >> 1].z : pair[p >> 1].x;
        const unsigned wh = p & 1 ? pair[p >> 1].w : pair[p >> 1].y;
        const unsigned tg = wg >> 8;
        const unsigned th = wh >> 8;
        const unsigned a0[4] = {wg & 0x000f000fu, wh & 0x000f000fu, tg & 0x000f000fu, th & 0x000f000fu};
        const unsigned a1[4] = {wg & 0x00f000f0u, wh & 0x00f000f0u, tg & 0x00f000f0u, th & 0x00f000f0u};
        const uint4 xb = *reinterpret_cast<const uint4*>(xl + 256 * h + 16 * e);
        rf_mma<__half>::run(lo[h], a0, xb.x, xb.y);
        rf_mma<__half>::run(hi[h], a1, xb.z, xb.w);
    }
    const float f0 = xf[u];
    const float f1 = xf[u + 4];
    const float x0 = xt[u];
    const float x1 = xt[u + 4];
    const rf_t4k_row rg(*reinterpret_cast<const uint4*>(stage + RF_T4_PAYLOAD_BYTES + 16 * g), u, f0, f1);
    const rf_t4k_row rh(*reinterpret_cast<const uint4*>(stage + RF_T4_PAYLOAD_BYTES + 16 * (g + 8)), u, f0, f1);
    total_g += rg.part(lo[0][0], hi[0][0], lo[1][0], hi[1][0], x0, x1);
    total_h += rh.part(lo[0][2], hi[0][2], lo[1][2], hi[1][2], x0, x1);
}

// q4_K's group for rf_t4_block_columns (rocmforge_tiled.h): a super-block of codes and its 16
// rows' headers.
struct rf_t4k_format {
    static constexpr unsigned PAYLOAD = RF_T4_PAYLOAD_BYTES;
    static constexpr unsigned SCALES = RF_T4K_SCALE_BYTES;
    static constexpr unsigned STAGE = RF_T4K_STAGE;
    RF_DEVICE static void group(const unsigned char* stage, const unsigned char* xl, const float* xf, const float* xt,
                                int lane, float& total_g, float& total_h) {
        rf_t4k_group_mma(stage, xl, xf, xt, lane, total_g, total_h);
    }
};

// Two f16 values (a word's halves) times two others, each product rounded to f16 once.
RF_DEVICE unsigned rf_t4k_hmul2(unsigned a, unsigned b) {
    const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const unsigned*>(&r);
}

// Several vectors (rf_t4_columns: up to 8 * PASSES, B's 8 columns 8 vectors a pass). The
// one-vector loop spends B's columns on sub-blocks; here they are vectors, so the sub-blocks'
// scales go into A: a code's f16 subnormal q 2^-24 (elements 4..7 of a word at 16 q 2^-24) times
// the lane's sub-block scale as the f16 sc 2^10 (sc 2^6) is q sc 2^-14, exact for every q < 16
// and sc < 64 (at most 945 x 2^-14), one HMUL2 a register. Lane (g, u)'s k slots in pair P are
// sub-block u + 4h's (h = P / 4), so the mma adds four sub-blocks at their own scales, and D
// accumulates over the whole super-block, whose d scales it once: d 2^14 D. The mins are the
// same product with A each element's sub-block min (6-bit, exact; a row's m broadcast over the
// lane's registers, the same for a half's four pairs) against the same B: dmin M. Lane (g, u)
// loads vector 8p + g's x at its k slots, x[256q + 32 (u + 4h) + 8e .. + 8], 16 bytes a pair;
// bf16 x is rounded to f16 in registers by rocmforge_x16.h's rule over the 32 elements one mma
// takes from a vector (four lanes' 8; their maximum through two shuffles), each pair's products
// scaled by the factor before they are added. f16 x goes in as it is.
template <typename T, int PASSES> struct rf_t4k_vectors : rf_t4_columns<T, PASSES> {
    typedef rf_t4_columns<T, PASSES> Columns;
    typedef T Elem;
    static constexpr bool SCALED = rf_x16<T>::SCALED;
    static constexpr unsigned PAYLOAD = RF_T4_PAYLOAD_BYTES;
    static constexpr unsigned SCALES = RF_T4K_SCALE_BYTES;
    static constexpr bool X_IN_STAGE = false;
    static constexpr unsigned STAGE = RF_T4K_STAGE; // the weights' bytes alone
    using Columns::acc;
    using Columns::batch;
    using Columns::nb;
    using Columns::x;

    RF_DEVICE rf_t4k_vectors(const T* x_, const rf_t4_outputs& y_, unsigned nb_, unsigned batch_)
        : Columns(x_, y_, nb_, batch_) {}
    RF_DEVICE void group(const unsigned char* stage, unsigned q, int lane) {
        const unsigned g = (unsigned)lane >> 2;
        const unsigned u = (unsigned)lane & 3u;
        const rf_u64 k = (rf_u64)nb * RF_QK;
        const uint4 hg = *reinterpret_cast<const uint4*>(stage + RF_T4_PAYLOAD_BYTES + 16 * g);
        const uint4 hh = *reinterpret_cast<const uint4*>(stage + RF_T4_PAYLOAD_BYTES + 16 * (g + 8));
        const rf_t4k_fields fg(hg);
        const rf_t4k_fields fh(hh);
        // Vector 8p + g's x of this group and lane: xp[p] + 128 h + 8 e (vectors past the batch
        // read nothing and give columns nobody writes).
        const T* xp[PASSES];
        bool has[PASSES];
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const unsigned v = 8u * (unsigned)p + g;
            has[p] = v < batch;
            xp[p] = x + (has[p] ? v : 0u) * k + (rf_u64)q * (RF_T4_GROUP * RF_QK) + 32u * u;
        }
        float sums[PASSES][4]; // the codes times the scales times x (2^-14 units)
        float mins[PASSES][4]; // the mins times x
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                sums[p][i] = 0.0f;
                mins[p][i] = 0.0f;
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // Row g's and g + 8's scale and min of sub-block u + 4h, as f16 pairs.
            const float scg = (float)((fg.sc[h] >> (8u * u)) & 0xffu);
            const float sch = (float)((fh.sc[h] >> (8u * u)) & 0xffu);
            const unsigned lo_g = rf_pack2_bits16<__half>(scg * 1024.0f, scg * 1024.0f);
            const unsigned lo_h = rf_pack2_bits16<__half>(sch * 1024.0f, sch * 1024.0f);
            const unsigned hi_g = rf_pack2_bits16<__half>(scg * 64.0f, scg * 64.0f);
            const unsigned hi_h = rf_pack2_bits16<__half>(sch * 64.0f, sch * 64.0f);
            const float mg = (float)((fg.m[h] >> (8u * u)) & 0xffu);
            const float mh = (float)((fh.m[h] >> (8u * u)) & 0xffu);
            const unsigned am[4] = {rf_pack2_bits16<__half>(mg, mg), rf_pack2_bits16<__half>(mh, mh),
                                    rf_pack2_bits16<__half>(mg, mg), rf_pack2_bits16<__half>(mh, mh)};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int pr = 4 * h + e; // the mma pair
                const uint4 words = *reinterpret_cast<const uint4*>(stage + 512 * (pr >> 1) + 16 * lane);
                const unsigned wg = pr & 1 ? words.z : words.x;
                const unsigned wh = pr & 1 ? words.w : words.y;
                const unsigned tg = wg >> 8;
                const unsigned th = wh >> 8;
                const unsigned a0[4] = {rf_t4k_hmul2(wg & 0x000f000fu, lo_g), rf_t4k_hmul2(wh & 0x000f000fu, lo_h),
                                        rf_t4k_hmul2(tg & 0x000f000fu, lo_g), rf_t4k_hmul2(th & 0x000f000fu, lo_h)};
                const unsigned a1[4] = {rf_t4k_hmul2(wg & 0x00f000f0u, hi_g), rf_t4k_hmul2(wh & 0x00f000f0u, hi_h),
                                        rf_t4k_hmul2(tg & 0x00f000f0u, hi_g), rf_t4k_hmul2(th & 0x00f000f0u, hi_h)};
#pragma unroll
                for (int p = 0; p < PASSES; ++p) {
                    if (8u * (unsigned)p >= batch) {
                        break; // uniform: the batch is the launch's
                    }
                    uint4 xb = make_uint4(0u, 0u, 0u, 0u);
                    if (has[p]) {
                        xb = *reinterpret_cast<const uint4*>(xp[p] + 128 * h + 8 * e);
                    }
                    if constexpr (SCALED) {
                        float f0;
                        float f1;
                        rf_t4_x16_columns(xb, u, f0, f1);
                        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        float dm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        rf_mma<__half>::run(d, a0, xb.x, xb.y);
                        rf_mma<__half>::run(d, a1, xb.z, xb.w);
                        rf_mma<__half>::run(dm, am, xb.x, xb.y);
                        rf_mma<__half>::run(dm, am, xb.z, xb.w);
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            const float fi = i & 1 ? f1 : f0;
                            sums[p][i] = fmaf(d[i], fi, sums[p][i]);
                            mins[p][i] = fmaf(dm[i], fi, mins[p][i]);
                        }
                    } else {
                        rf_mma<__half>::run(sums[p], a0, xb.x, xb.y);
                        rf_mma<__half>::run(sums[p], a1, xb.z, xb.w);
                        rf_mma<__half>::run(mins[p], am, xb.x, xb.y);
                        rf_mma<__half>::run(mins[p], am, xb.z, xb.w);
                    }
                }
            }
        }
        // The super-block's d (times 2^14: the codes' unit above) and dmin, rows g (D's 0, 1)
        // and g + 8 (2, 3).
        const float dg = rf_t4k_d(hg) * 16384.0f;
        const float dh = rf_t4k_d(hh) * 16384.0f;
        const float ming = rf_t4k_dmin(hg);
        const float minh = rf_t4k_dmin(hh);
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            if (8u * (unsigned)p >= batch) {
                break;
            }
            acc[p][0] += fmaf(dg, sums[p][0], -ming * mins[p][0]);
            acc[p][1] += fmaf(dg, sums[p][1], -ming * mins[p][1]);
            acc[p][2] += fmaf(dh, sums[p][2], -minh * mins[p][2]);
            acc[p][3] += fmaf(dh, sums[p][3], -minh * mins[p][3]);
        }
    }
};

template <typename T, int PASSES>
RF_DEVICE void rf_t4k_matvecs_mma(const uint4* payload, const unsigned char* scales, const T* x, const rf_t4_outputs& y,
                                  rf_t4_norm norm, unsigned nb, unsigned batch) {
    if (norm.weight != nullptr || nb % RF_T4_GROUP != 0) {
        RF_T4_TRAP(); // a norm only the normed entries apply; whole super-blocks
    }
    rf_t4k_vectors<T, PASSES> op(x, y, nb, batch);
    rf_t4_stream(payload, scales, x, nb, op);
}

template <typename T, bool NORM>
RF_DEVICE void rf_t4k_matvec_mma(const uint4* payload, const unsigned char* scales, const T* x, const rf_t4_outputs& y,
                                 rf_t4_norm norm, unsigned nb, unsigned batch) {
    if ((!NORM && norm.weight != nullptr) || batch != 1 || nb % RF_T4_GROUP != 0) {
        RF_T4_TRAP(); // a norm only the normed entries apply; one vector; whole super-blocks
    }
    rf_t4_block_columns<T, NORM, rf_t4k_format> op(x, y, norm, nb);
    rf_t4_stream(payload, scales, x, nb, op);
}
#define RF_T4K_BODY(T, NORM) rf_t4k_matvec_mma<T, NORM>(payload, scales, x, y, norm, nb, batch);
#define RF_T4K_BATCH_BODY(T, PASSES) rf_t4k_matvecs_mma<T, PASSES>(payload, scales, x, y, norm, nb, batch);
#else
#define RF_T4K_BODY(T, NORM) RF_MMA_UNAVAILABLE();
#define RF_T4K_BATCH_BODY(T, PASSES) RF_MMA_UNAVAILABLE();
#endif // RF_MMA_SYNC

// Portable: the same layout, one tile a block (grid-stride), the warps splitting its
// super-blocks round-robin; lane (g, u) reads its words straight from global memory and covers
// rows g and g + 8 of sub-blocks u and u + 4 whole (its four words of each), so it forms their
// sums of codes times x and of x itself in f32 and scales them as the matrix-core kernel does
// (d (sc S) - dmin (m X)); the four lanes of a row are added in shared memory with the warps'.
// Several vectors one after another over the tile. Any warp width: "warp" here is 32
// consecutive threads, and nothing is exchanged between threads but through shared memory.
// NORM: each vector's s first (rf_t4_norm_scale_portable), then each element of x normalised
// and rounded to T as it is read.
template <typename T, bool NORM>
RF_DEVICE void rf_t4k_matvec(const uint4* payload, const unsigned char* headers, const T* x, const rf_t4_outputs& y,
                             rf_t4_norm norm, unsigned nb, unsigned batch) {
    __shared__ float totals[2][RF_T4_WARPS * 4 * RF_T4_ROWS]; // by parity (rf_t4_finish)
    __shared__ float keep[RF_T4_ROWS]; // a gate-and-up launch's gates of a tile (rf_t4_put)
    __shared__ float part[NORM ? RF_T4_WARPS * 32 : 1]; // the norm's sums of squares
    if ((!NORM && norm.weight != nullptr) || nb % RF_T4_GROUP != 0) {
        RF_T4_TRAP(); // a norm only the normed entry applies; whole super-blocks
    }
    const T* wn = static_cast<const T*>(norm.weight);
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int warps = (int)blockDim.x >> 5;
    const int u = lane & 3;
    const int g = lane >> 2;
    const unsigned nsb = nb / RF_T4_GROUP;
    const unsigned tiles = (y.end[RF_T4_OUTPUTS - 1] + RF_T4_ROWS - 1) / RF_T4_ROWS;
    const unsigned gate_tiles = y.end[0] / RF_T4_ROWS;
    const unsigned units = rf_t4_swiglu(y) ? gate_tiles : tiles;
    const unsigned per_unit = rf_t4_swiglu(y) ? 2u : 1u;
    unsigned done = 0;
    rf_follow_prior_grid(); // nothing to do before it
    for (unsigned unit = blockIdx.x; unit < units; unit += gridDim.x) {
        for (unsigned tv = 0; tv < batch * per_unit; ++tv) {
            const unsigned v = tv / per_unit;
            const unsigned tile = unit + (tv % per_unit) * gate_tiles;
            const uint4* pt = payload + (rf_u64)tile * nsb * 128u + lane; // 4 pairs of 32 lanes a super-block
            const unsigned char* ht = headers + (rf_u64)tile * nsb * RF_T4K_SCALE_BYTES;
            const T* xv = x + (rf_u64)v * nb * RF_QK;
            const float s = NORM ? rf_t4_norm_scale_portable(xv, (rf_u64)nb * RF_QK, norm.eps, part) : 1.0f;
            float total_g = 0.0f;
            float total_h = 0.0f;
            for (unsigned sb = (unsigned)warp; sb < nsb; sb += (unsigned)warps) {
                // [half][row]: sums of codes times x, and of x, over sub-block u + 4 half.
                float cx[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
                float xs[2] = {0.0f, 0.0f};
                // Not unrolled: the normed f16 entry's unrolled pairs spilled on RDNA 3 and 4.
#pragma unroll 1
                for (int p = 0; p < 8; ++p) {
                    const int h = p >> 2;
                    const uint4 pair = pt[(sb * 4u + (unsigned)(p >> 1)) * 32u];
                    const unsigned wg = p & 1 ? pair.z : pair.x;
                    const unsigned wh = p & 1 ? pair.w : pair.y;
                    const rf_u64 c = (rf_u64)sb * RF_QK_K + 32u * (unsigned)(u + 4 * h) + 8u * (unsigned)(p & 3);
#pragma unroll
                    for (int m = 0; m < 8; ++m) {
                        const int nibble = rf_t4k_nibble(m);
                        float xval = rf_to_float(xv[c + m]);
                        if constexpr (NORM) {
                            xval = rf_to_float(rf_from_float<T>(rf_t4_normed(xval, s, rf_to_float(wn[c + m]))));
                        }
                        cx[h][0] = fmaf((float)((wg >> (4 * nibble)) & 15u), xval, cx[h][0]);
                        cx[h][1] = fmaf((float)((wh >> (4 * nibble)) & 15u), xval, cx[h][1]);
                        xs[h] += xval;
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const unsigned char* hd = ht + (rf_u64)sb * RF_T4K_SCALE_BYTES + 16u * (unsigned)(g + 8 * r);
                    const float d = rf_f16_bits_to_float(hd[0], hd[1]);
                    const float dmin = rf_f16_bits_to_float(hd[2], hd[3]);
                    float part_r = 0.0f;
                    for (int h = 0; h < 2; ++h) {
                        unsigned int sc, m;
                        rf_kquant_scale_min(hd + 4, u + 4 * h, &sc, &m);
                        part_r += (d * (float)sc) * cx[h][r] - (dmin * (float)m) * xs[h];
                    }
                    if (r == 0) {
                        total_g += part_r;
                    } else {
                        total_h += part_r;
                    }
                }
            }
            float* sums = totals[done & 1];
            sums[(warp * RF_T4_ROWS + g) * 4 + u] = total_g;
            sums[(warp * RF_T4_ROWS + g + 8) * 4 + u] = total_h;
            rf_t4_finish<4, T>(sums, (unsigned)warps, tile, y, v, keep);
            ++done;
        }
    }
}

// Dequantisation: a thread a 16-byte payload vector (tile t, super-block s, pair p, lane l = 4g +
// u; grid-stride). Its words W(g, 2p, u), W(g + 8, 2p, u), W(g, 2p + 1, u), W(g + 8, 2p + 1, u)
// are four runs of 8 elements of a row, each stored with one 16-byte store (two for f32); each
// element is (d * sc) * q - dmin * m in f32, rounded to T once, as kernels/dequant.hip gives the
// GGUF rows (rocmforge_quant.h's k-quant order); the padding rows are not written.
template <typename T>
RF_DEVICE void rf_t4k_dequant(const uint4* payload, const unsigned char* headers, T* out, unsigned rows, unsigned nb) {
    const unsigned nsb = nb / RF_T4_GROUP;
    const rf_u64 vectors = (rf_u64)((rows + RF_T4_ROWS - 1) / RF_T4_ROWS) * nsb * 128u;
    const rf_u64 k = (rf_u64)nb * RF_QK;
    for (rf_u64 i = (rf_u64)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += (rf_u64)gridDim.x * blockDim.x) {
        const unsigned lane = (unsigned)(i % 32u);
        const unsigned pp = (unsigned)((i / 32u) % 4u);
        const rf_u64 ts = i / 128u; // tile * nsb + super-block
        const unsigned sb = (unsigned)(ts % nsb);
        const unsigned t = (unsigned)(ts / nsb);
        const unsigned g = lane >> 2;
        const unsigned u = lane & 3u;
        const uint4 v = payload[i];
        const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned r = g + 8u * (unsigned)(j & 1);
            const unsigned p = 2u * pp + (unsigned)(j >> 1); // the mma pair
            const unsigned row = t * RF_T4_ROWS + r;
            if (row >= rows) {
                continue;
            }
            const unsigned char* hd = headers + (ts * RF_T4_ROWS + r) * 16u;
            const int sub = (int)(u + 4u * (p >> 2));
            unsigned int sc, m;
            rf_kquant_scale_min(hd + 4, sub, &sc, &m);
            const float step = rf_f16_bits_to_float(hd[0], hd[1]) * (float)sc;
            const float offset = rf_f16_bits_to_float(hd[2], hd[3]) * (float)m;
            float f[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int nibble = rf_t4k_nibble(e);
                f[e] = step * (float)((words[j] >> (4 * nibble)) & 15u) - offset;
            }
            rf_store_n<T, 8, true>(out + row * k + (rf_u64)sb * RF_QK_K + 32u * (unsigned)sub + 8u * (p & 3u), f);
        }
    }
}

// Every entry is (payload, scales, x, rf_t4_outputs y, rf_t4_norm norm, u32 nb, u32 batch): x
// [batch, nb * 32], nb a multiple of 8 (whole super-blocks), output i [batch, its rows];
// norm.weight (k elements, 16-byte aligned) for the normed entries, null for the others.
// blockDim.x: 32..RF_T4_WARPS * 32, whole warps, at most one a group; x 16-byte aligned. The
// matrix-core entries' dynamic shared memory: warps * RF_T4_STAGES * RF_T4K_STAGE bytes for the
// rings, then 2 * warps * 16 floats of totals a column (1, 8 or 32 columns), and for the
// one-vector entries (batch 1) 64 nb bytes of x, 4 nb of factors, 4 nb of sums and 512 of zeros;
// then in a gate-and-up launch 16 floats of gates a column. batch8 and batch32 take up to 8 and
// 32 vectors.
#define RF_T4K_ARGS(T)                                                                                    \
    const uint4 *payload, const unsigned char *scales, const T *x, rf_t4_outputs y, rf_t4_norm norm, unsigned nb, \
        unsigned batch
#define RF_T4K_ENTRIES(suffix, T)                                                                         \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_q4k_tiled_matvec_mma_##suffix(RF_T4K_ARGS(T)) {                                                \
        RF_T4K_BODY(T, false)                                                                             \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_q4k_tiled_normed_mma_##suffix(RF_T4K_ARGS(T)) {                                                \
        RF_T4K_BODY(T, true)                                                                              \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_q4k_tiled_batch8_mma_##suffix(RF_T4K_ARGS(T)) {                                                \
        RF_T4K_BATCH_BODY(T, 1)                                                                           \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_BATCH32_RESIDENT_BLOCKS)                     \
        rf_q4k_tiled_batch32_mma_##suffix(RF_T4K_ARGS(T)) {                                               \
        RF_T4K_BATCH_BODY(T, 4)                                                                           \
    }

RF_T4K_ENTRIES(f16, __half)
RF_T4K_ENTRIES(bf16, rf_bf16)

// Portable (any device, f32 / f16 / bf16, any batch), and the dequantisation
// (payload, headers, T* out, u32 rows, u32 nb): the weight's first `rows` rows, row-major.
#define RF_T4K_PORTABLE(suffix, T)                                                                        \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS) rf_q4k_tiled_matvec_##suffix(RF_T4K_ARGS(T)) {     \
        rf_t4k_matvec<T, false>(payload, scales, x, y, norm, nb, batch);                                  \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS) rf_q4k_tiled_normed_##suffix(RF_T4K_ARGS(T)) {     \
        rf_t4k_matvec<T, true>(payload, scales, x, y, norm, nb, batch);                                   \
    }                                                                                                     \
    RF_KERNEL void rf_q4k_tiled_dequant_##suffix(const uint4* payload, const unsigned char* scales, T* out, \
                                                 unsigned rows, unsigned nb) {                            \
        rf_t4k_dequant<T>(payload, scales, out, rows, nb);                                                \
    }
RF_FOR_EACH_DTYPE(RF_T4K_PORTABLE)
