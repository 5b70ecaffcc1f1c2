// MXFP4 matrix-vector product over the tiled layout: y[r] = sum_c W[r, c] x[c] (decode).
//
// The weight is the [n, k] MXFP4 matrix of GGUF's block_mxfp4 rows, re-laid out once on the
// host (crates/rocm-kernels/src/quant/mxfp4_tiled.rs documents the layout in full) so that a
// warp's share of the weight is one contiguous run of bytes and each lane's 16 bytes are exactly
// the codes its matrix-core fragments need:
//
//   tiles of 16 rows; nbp = k / 32 rounded up to 8 blocks a row (padding: code 0, scale 0);
//   payload: tile t, block pair p, lane l = 4g + u: 16 bytes = words W(g, 2p, u), W(g + 8, 2p, u),
//            W(g, 2p + 1, u), W(g + 8, 2p + 1, u) at byte ((t * nbp / 2 + p) * 32 + l) * 16;
//   W(r, b, u): the 8 E2M1 codes of row r, elements 32b + 8u + 2i (i < 4) and 32b + 8u + 2i + 1:
//            pair i's magnitudes at bits MAG(i)..MAG(i)+2 and MAG(i)+16.., its signs at SIGN(i)
//            and SIGN(i) + 16, MAG = 9, 6, 3, 0 and SIGN = 15, 12, 13, 14 (the fields order);
//   scales:  E8M0 byte of (tile t, row r < 16, block b) at ((t * nbp / 8 + b / 8) * 16 + r) * 8
//            + b % 8: a group of 8 blocks of a tile is 128 contiguous bytes.
//
// Entries, (payload, scales, x, rf_t4_outputs y, rf_t4_norm norm, u32 nb, u32 batch): nb = k / 32,
// x [batch, k], the weight's n rows written to up to three outputs by row range, each [batch, its
// rows] (rocmforge_mxfp4_tiled_abi.h: weights stacked along their rows, one launch for a layer's
// Q, K and V); launched as dependent launches (rocmforge_dependent_launch.h: the matrix-core
// entries that hold no x in their stages issue their first weight copies before the wait, the
// others wait first):
//   rf_mxfp4_tiled_matvec_mma_<dt>       f16 / bf16 on NVIDIA sm_80+, one vector, scale bytes all
//                                        <= 240 (the launcher knows the maximum)
//   rf_mxfp4_tiled_normed_mma_<dt>       the same with the RMSNorm `norm` applied to x (x then a
//                                        row of the residual stream): x staged once a block
//                                        whatever its type, normalised as it is staged
//   rf_mxfp4_tiled_batch8_mma_<dt>,      the same as the first for 1..8 and 1..32 vectors (B's
//   rf_mxfp4_tiled_batch32_mma_<dt>      columns)
//   ..._mma_wide_<dt>                    each of those for any scale byte (0xFF: NaN)
//   rf_mxfp4_tiled_matvec_<dt>           portable: f32, f16, bf16, any device, any batch
//   rf_mxfp4_tiled_normed_<dt>           the same with the RMSNorm `norm` applied to x
// The entries without `normed` in their name take norm.weight null (they trap otherwise). Every
// matrix-vector entry also puts its totals as y.mode says (rocmforge_mxfp4_tiled_abi.h): stored;
// added to the residual stream there (a block's output joining it in its own launch); or as a
// gate-and-up product with its SwiGLU: a block then takes a gate tile and right after it that
// tile's up tile (rf_t4_walk), keeps the gates, and writes silu(gate) * up (rf_t4_put), so that
// the activation costs no launch of its own.
// And rf_mxfp4_tiled_dequant_<dt> (payload, scales, T* out, u32 rows, u32 nb): the weight's first
// `rows` rows as T, row-major [rows, k], for the GEMM of a prefill (any device; the launcher
// points payload and scales at the first tile of a stacked weight's part).
//
// Matrix-core kernel. Block b of W warps walks tiles b, b + grid, ... (the grid is sized to the
// device, so each block is resident for the whole launch); its warps split each tile's
// groups of 8 blocks round-robin (warp w: groups w, w + W, ...). Each warp streams its groups
// through its own ring of RF_T4_STAGES shared-memory stages with cp.async: the group's payload
// (2 KB), its scales (128 bytes) and, for f16, its x (512 bytes), so that RF_T4_STAGES - 1
// groups are in flight while one is multiplied, across tile boundaries too. Copies past the
// row's last block are zero-filled, never read. bf16 x is staged once a block instead, as
// block-scaled f16 (rocmforge_x16.h), while the first groups are in flight, so that both
// activation types take the f16 decode and f16 mma (staging f16 x so too measured 6-12% slower
// than its per-group copies: docs/kernels/mxfp.md). At the end of a tile the warps' row totals
// are added in shared memory in warp order (deterministic) and written to y.
//
// Several vectors (rf_t4_vectors below) run the same loop over the same stages, B's 8 columns
// being 8 vectors instead of 8 copies of one.
//
// Per block of 32 elements, one m16n8k16 step for elements 8u..8u+3 of each lane's share and
// one for 8u+4..8u+7 (k inside a step is ordered as the layout orders the codes, and x is read
// to match: lane u's 16 bytes of x are x[32b + 8u .. 32b + 8u + 8]):
//   A: rows g and g + 8 of the tile, decoded from W(g, b, u) and W(g + 8, b, u);
//   B: x, the same in all 8 columns, so every column of D is the block's row sums;
//   the block's sums (from zero, f32) times the E8M0 scale (a power of two: exact) are added
//   to the row's f32 total. Every product is exact; the sums are f32, as in the other kernels.
// Decoding into A pairs (f16, whatever the activations' type): bit placement: a code's
//   magnitude bits under the f16 exponent and mantissa are its value times 2^-14 exactly (codes
//   0 and 1 become f16 subnormals, which the tensor cores take as they are), its sign at bit
//   15. The fields order stores each pair's fields where one mask (pair 0), a shift and a mask
//   (pair 1) or a mask, a multiply (two shifts at once, no carries) and a mask (pairs 2, 3) put
//   them: 9 operations for 8 codes. The scale absorbs the 2^14: 2^(e - 127 + 14) is the float
//   with exponent field e + 14, normal for every e <= 240. For bf16 x the block's sum is also
//   multiplied by its staging factor 2^-s (exact, as the scale is). The _wide entries convert
//   each scale exactly (0: 2^-127, 0xFF: NaN) and multiply the block sum by 2^14 first.

#include "rocmforge_quant.h"
#include "rocmforge_tiled.h"

// Scale byte j (< 8) of a lane's 8 scales of a row.
RF_DEVICE unsigned rf_t4_scale_byte(uint2 s, int j) { return __byte_perm(j < 4 ? s.x : s.y, 0u, 0x4440 | (j & 3)); }

// Code (sign in bit 3) of element 8u + 2i + h of a word (the portable kernel's decode; the
// matrix-core ones decode whole pairs).
RF_DEVICE unsigned rf_t4_code(unsigned w, int i, int h) {
    const int mag = 9 - 3 * i;
    const int sign = i == 0 ? 15 : 11 + i;
    return ((w >> (mag + 16 * h)) & 7u) | (((w >> (sign + 16 * h)) & 1u) << 3);
}

#if RF_MMA_SYNC

// f16: word -> A pairs o[i] (elements 8u + 2i, 8u + 2i + 1), values times 2^-14.
// Pairs 2 and 3: the masked fields times 2^6 + 2^2 (2^9 + 2^1) land the magnitudes at 9..11
// and the signs at 15; the other copies fall on bits the final mask clears, and the two copies'
// bits never overlap, so nothing carries.
RF_DEVICE void rf_t4_decode_f16(unsigned w, unsigned (&o)[4]) {
    o[0] = w & 0x8e008e00u;
    o[1] = (w << 3) & 0x8e008e00u;
    o[2] = ((w & 0x20382038u) * 68u) & 0x8e008e00u;
    o[3] = ((w & 0x40074007u) * 514u) & 0x8e008e00u;
}

// The decoded values are the codes' times 2^-14: the scale's exponent field takes the 14 back.
#define RF_T4_SCALE_BIAS 14u
#define RF_T4_UNIT 16384.0f

// An E8M0 scale byte as the factor of a block's decoded sums: the value itself (WIDE: any byte,
// 0xFF NaN), or for bytes up to RF_T4_FAST_SCALE_MAX the value times 2^14 (one shift).
template <bool WIDE> RF_DEVICE float rf_t4_scale(unsigned e) {
    return WIDE ? rf_e8m0_to_float(e) : __uint_as_float((e + RF_T4_SCALE_BIAS) << 23);
}

// A staged group as the mma's A operand: the lane's 16 bytes of each payload pair and the scale
// bytes of its rows g and g + 8 (both loops multiply a group so).
struct rf_t4_staged {
    uint4 pair[RF_T4_GROUP / 2];
    uint2 sg;
    uint2 sh;
    RF_DEVICE rf_t4_staged(const unsigned char* stage, int lane) {
        const int g = lane >> 2;
#pragma unroll
        for (int i = 0; i < RF_T4_GROUP / 2; ++i) {
            pair[i] = *reinterpret_cast<const uint4*>(stage + 512 * i + 16 * lane);
        }
        sg = *reinterpret_cast<const uint2*>(stage + RF_T4_PAYLOAD_BYTES + 8 * g);
        sh = *reinterpret_cast<const uint2*>(stage + RF_T4_PAYLOAD_BYTES + 8 * (g + 8));
    }
    // Block j's A fragments: elements 8u .. 8u + 3 (a0) and 8u + 4 .. 8u + 7 (a1) of rows g and
    // g + 8, as f16 values times 2^-14.
    RF_DEVICE void fragments(int j, unsigned (&a0)[4], unsigned (&a1)[4]) const {
        unsigned ag[4];
        unsigned ah[4];
        rf_t4_decode_f16(j & 1 ? pair[j >> 1].z : pair[j >> 1].x, ag);
        rf_t4_decode_f16(j & 1 ? pair[j >> 1].w : pair[j >> 1].y, ah);
        a0[0] = ag[0];
        a0[1] = ah[0];
        a0[2] = ag[1];
        a0[3] = ah[1];
        a1[0] = ag[2];
        a1[1] = ah[2];
        a1[2] = ag[3];
        a1[3] = ah[3];
    }
    // Block j's scale factors of rows g and g + 8 (rf_t4_scale).
    template <bool WIDE> RF_DEVICE float scale_g(int j) const { return rf_t4_scale<WIDE>(rf_t4_scale_byte(sg, j)); }
    template <bool WIDE> RF_DEVICE float scale_h(int j) const { return rf_t4_scale<WIDE>(rf_t4_scale_byte(sh, j)); }
};

// Adds a block's sum `d` (from the decoded codes) times x's staging factor `f` (SCALED; a power of
// two) and the weight's scale `s` (exact: a power of two) to a total. The _wide entries take
// the codes' 2^-14 back here (their scales are the E8M0 values themselves), the same order of
// operations in every loop so that they give the same bits.
template <bool SCALED, bool WIDE> RF_DEVICE float rf_t4_add(float total, float d, float f, float s) {
    return WIDE ? fmaf(d * (f * RF_T4_UNIT), s, total) : fmaf(SCALED ? d * f : d, s, total);
}

// Multiplies a staged group into the lane's row totals: `xs`, the group's 256 elements of x as
// f16 (in the stage, or in x staged once a block), and (SCALED) `xf`, their 8 blocks' factors.
template <bool SCALED, bool WIDE>
RF_DEVICE void rf_t4_group_mma(const unsigned char* stage, const __half* xs, const float* xf, int lane, float& total_g,
                               float& total_h) {
    const int u = lane & 3;
    const rf_t4_staged a(stage, lane);
    // Lane u's 16 bytes of x of block j: elements 32j + 8u .. + 8.
    const unsigned char* xl = reinterpret_cast<const unsigned char*>(xs) + 16 * u;
    float f[RF_T4_GROUP];
#pragma unroll
    for (int j = 0; j < RF_T4_GROUP; ++j) {
        f[j] = SCALED ? xf[j] : 1.0f;
    }
#pragma unroll
    for (int j = 0; j < RF_T4_GROUP; ++j) {
        unsigned a0[4];
        unsigned a1[4];
        a.fragments(j, a0, a1);
        const uint4 xb = *reinterpret_cast<const uint4*>(xl + 64 * j);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        rf_mma<__half>::run(d, a0, xb.x, xb.y);
        rf_mma<__half>::run(d, a1, xb.z, xb.w);
        total_g = rf_t4_add<SCALED, WIDE>(total_g, d[0], f[j], a.scale_g<WIDE>(j));
        total_h = rf_t4_add<SCALED, WIDE>(total_h, d[2], f[j], a.scale_h<WIDE>(j));
    }
}

// One vector: the group's x from the stage (f16) or from x staged once a block as block-scaled
// f16 (bf16); D's columns are all the same, so lane 4g + u's totals are rows g and g + 8's.
// NORM (the normed entries): x is a row of the residual stream, normalised as it is staged
// (rf_t4_norm), so x is staged once a block for f16 too, as f16.
template <typename T, bool WIDE, bool NORM> struct rf_t4_one_vector {
    typedef T Elem;
    typedef rf_x16<T> X;
    static constexpr unsigned PAYLOAD = RF_T4_PAYLOAD_BYTES;
    static constexpr unsigned SCALES = RF_T4_SCALE_BYTES;
    // bf16 or NORM: x staged once a block; plain f16: x in every stage.
    static constexpr bool ONCE = X::SCALED || NORM;
    static constexpr bool X_IN_STAGE = !ONCE;
    static constexpr unsigned STAGE = ONCE ? RF_T4_STAGE_BF16 : RF_T4_STAGE_F16;
    const T* x;
    const rf_t4_outputs& y;
    rf_t4_norm norm;
    unsigned nb;
    // Past the warps' rings: the tiles' row totals, two buffers of warps * 16 floats by tile
    // parity (in the dynamic shared memory, as mxfp.hip's, rather than a static array beside
    // it: one allocation the launcher sizes, and one the CPU emulator can give the kernel); then,
    // where x is staged once (ONCE), x as f16 (nbp blocks) and its blocks' factors (bf16; f16
    // leaves them unused); then, in a gate-and-up launch, the tile's 16 gates (rf_t4_put).
    float* totals;
    __half* xs;
    float* xf;
    float* keep;
    unsigned warps;
    unsigned nbp;
    float total_g; // row g of the current tile
    float total_h; // row g + 8

    RF_DEVICE rf_t4_one_vector(const T* x_, const rf_t4_outputs& y_, rf_t4_norm norm_, unsigned nb_)
        : x(x_), y(y_), norm(norm_), nb(nb_), total_g(0.0f), total_h(0.0f) {}
    RF_DEVICE void place(unsigned char* rest, unsigned warps_, unsigned nbp_) {
        warps = warps_;
        nbp = nbp_;
        totals = reinterpret_cast<float*>(rest);
        xs = reinterpret_cast<__half*>(totals + 2 * warps * RF_T4_ROWS);
        xf = reinterpret_cast<float*>(xs + nbp * RF_QK);
        keep = ONCE ? xf + nbp : reinterpret_cast<float*>(xs);
    }
    RF_DEVICE const rf_t4_outputs& outputs() const { return y; }
    RF_DEVICE unsigned rows() const { return y.end[RF_T4_OUTPUTS - 1]; }
    RF_DEVICE void zero(unsigned tile) const {
        const unsigned row = tile * RF_T4_ROWS + threadIdx.x;
        if (threadIdx.x < RF_T4_ROWS && row < rows()) {
            rf_t4_put_zero<T>(y, row, 0);
        }
    }
    // NORM: the norm's weight (a weight: nothing of the kernel ahead) into xs, where x will be
    // staged (k 16-bit elements: xs's first k * 2 bytes), copied before the block waits, as its
    // own commit group, the oldest (after_wait waits for it). Each thread later stages x over
    // the same bytes it reads the weight from.
    RF_DEVICE void before_prologue() {
        if constexpr (NORM) {
            rf_t4_norm_weight_in(norm, nb, xs);
        }
    }
    RF_DEVICE void after_wait() {
        if constexpr (ONCE) {
            rf_t4_stage_x<T, NORM>(x, norm, nb, nbp, xs, xf, totals);
        }
    }
    RF_DEVICE void group(const unsigned char* stage, unsigned q, int lane) {
        const __half* xg = ONCE ? xs + q * (RF_T4_GROUP * RF_QK)
                                : reinterpret_cast<const __half*>(stage + RF_T4_PAYLOAD_BYTES + RF_T4_SCALE_BYTES);
        rf_t4_group_mma<X::SCALED, WIDE>(stage, xg, xf + q * RF_T4_GROUP, lane, total_g, total_h);
    }
    // Lanes 4g..4g+3 hold the same sums (D's columns are equal).
    RF_DEVICE void tile_done(unsigned done, unsigned tile, int warp, int lane) {
        rf_t4_put_rows<T>(totals, warps, done, tile, warp, lane, y, keep, total_g, total_h);
    }
};

// Several vectors (up to 8 * PASSES, x row-major [batch, k]): B's 8 columns are 8 vectors, so
// lane 4g + u loads vector 8p + g's x[32b + 8u .. + 8] in pass p and D gives rows g and g + 8 of
// vectors 8p + 2u and 8p + 2u + 1. A is decoded once a block for all the passes. x is read
// from global memory (the L1 and L2 hold it: every tile reads all of it), never staged; bf16 x
// is rounded to f16 in registers by the rule rocmforge_x16.h stages it with (the block's
// maximum shared by the four lanes of its row of B through two shuffles), so that each vector's
// outputs have the bits the one-vector kernel gives it.
template <typename T, bool WIDE, int PASSES> struct rf_t4_vectors : rf_t4_columns<T, PASSES> {
    typedef rf_t4_columns<T, PASSES> Columns;
    typedef T Elem;
    static constexpr bool SCALED = rf_x16<T>::SCALED;
    static constexpr unsigned PAYLOAD = RF_T4_PAYLOAD_BYTES;
    static constexpr unsigned SCALES = RF_T4_SCALE_BYTES;
    static constexpr bool X_IN_STAGE = false;
    static constexpr unsigned STAGE = RF_T4_STAGE_BF16; // the weights' bytes alone
    using Columns::acc;
    using Columns::batch;
    using Columns::nb;
    using Columns::x;

    RF_DEVICE rf_t4_vectors(const T* x_, const rf_t4_outputs& y_, unsigned nb_, unsigned batch_)
        : Columns(x_, y_, nb_, batch_) {}
    RF_DEVICE void group(const unsigned char* stage, unsigned q, int lane) {
        const int g = lane >> 2;
        const int u = lane & 3;
        const rf_t4_staged a(stage, lane);
        const rf_u64 k = (rf_u64)nb * RF_QK;
        // The group's blocks that exist: x past the row's last block is zero, not read (the
        // codes there are zeros, and 0 x 0 keeps the sums 0).
        const unsigned valid = nb - q * RF_T4_GROUP;
        // Vector 8p + g's x[256q + 32j + 8u .. + 8] for pass p: xp[p] + 32j (vectors past the
        // batch read nothing and give columns nobody writes).
        const T* xp[PASSES];
        bool has[PASSES];
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const unsigned v = 8u * (unsigned)p + (unsigned)g;
            has[p] = v < batch;
            xp[p] = x + (has[p] ? v : 0u) * k + (rf_u64)q * (RF_T4_GROUP * RF_QK) + 8u * (unsigned)u;
        }
#pragma unroll
        for (int j = 0; j < RF_T4_GROUP; ++j) {
            unsigned a0[4];
            unsigned a1[4];
            a.fragments(j, a0, a1);
#pragma unroll
            for (int p = 0; p < PASSES; ++p) {
                if (8u * (unsigned)p >= batch) {
                    break; // uniform: the batch is the launch's
                }
                uint4 xb = make_uint4(0u, 0u, 0u, 0u);
                if (has[p] && (unsigned)j < valid) {
                    xb = *reinterpret_cast<const uint4*>(xp[p] + 32 * j);
                }
                float f0 = 1.0f; // the staging factors of columns 2u and 2u + 1 (SCALED)
                float f1 = 1.0f;
                if constexpr (SCALED) {
                    rf_t4_x16_columns(xb, (unsigned)u, f0, f1);
                }
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                rf_mma<__half>::run(d, a0, xb.x, xb.y);
                rf_mma<__half>::run(d, a1, xb.z, xb.w);
                // As rf_t4_group_mma, so that a column has the one-vector kernel's bits.
                const float sg = a.scale_g<WIDE>(j);
                const float sh = a.scale_h<WIDE>(j);
                acc[p][0] = rf_t4_add<SCALED, WIDE>(acc[p][0], d[0], f0, sg);
                acc[p][1] = rf_t4_add<SCALED, WIDE>(acc[p][1], d[1], f1, sg);
                acc[p][2] = rf_t4_add<SCALED, WIDE>(acc[p][2], d[2], f0, sh);
                acc[p][3] = rf_t4_add<SCALED, WIDE>(acc[p][3], d[3], f1, sh);
            }
        }
    }
};

template <typename T, bool WIDE, bool NORM>
RF_DEVICE void rf_t4_matvec_mma(const uint4* payload, const unsigned char* scales, const T* x, const rf_t4_outputs& y,
                                rf_t4_norm norm, unsigned nb) {
    if (!NORM && norm.weight != nullptr) {
        RF_T4_TRAP(); // a norm only the normed entries apply
    }
    rf_t4_one_vector<T, WIDE, NORM> op(x, y, norm, nb);
    rf_t4_stream(payload, scales, x, nb, op);
}

template <typename T, bool WIDE, int PASSES>
RF_DEVICE void rf_t4_matvecs_mma(const uint4* payload, const unsigned char* scales, const T* x, const rf_t4_outputs& y,
                                 rf_t4_norm norm, unsigned nb, unsigned batch) {
    if (norm.weight != nullptr) {
        RF_T4_TRAP(); // a norm only the normed entries apply
    }
    rf_t4_vectors<T, WIDE, PASSES> op(x, y, nb, batch);
    rf_t4_stream(payload, scales, x, nb, op);
}

#define RF_T4_MMA_BODY(T, WIDE, NORM) rf_t4_matvec_mma<T, WIDE, NORM>(payload, scales, x, y, norm, nb);
#define RF_T4_BATCH_BODY(T, WIDE, PASSES) rf_t4_matvecs_mma<T, WIDE, PASSES>(payload, scales, x, y, norm, nb, batch);
#else
#define RF_T4_MMA_BODY(T, WIDE, NORM) RF_MMA_UNAVAILABLE();
#define RF_T4_BATCH_BODY(T, WIDE, PASSES) RF_MMA_UNAVAILABLE();
#endif // RF_MMA_SYNC

// Portable: the same layout, one tile a block (grid-stride), the warps splitting its groups
// round-robin; each lane reads its 16-byte words straight from global memory, decodes its codes
// to f32 (exact) and multiplies by x in f32; its 8 products of a block are summed, times the
// scale, into its rows' totals, and the four lanes of a row are added in shared memory with the
// warps'. Several vectors one after another over the tile (its bytes come from the caches the
// second time). Any warp width: "warp" here is 32 consecutive threads, and nothing is exchanged
// between threads but through shared memory. NORM (the normed entry): each vector's s first
// (rf_t4_norm_scale_portable), then each element of x normalised as it is read.
template <typename T, bool NORM>
RF_DEVICE void rf_t4_matvec(const uint4* payload, const unsigned char* scales, const T* x, const rf_t4_outputs& y,
                            rf_t4_norm norm, unsigned nb, unsigned batch) {
    __shared__ float totals[2][RF_T4_WARPS * 4 * RF_T4_ROWS]; // by parity (rf_t4_finish)
    __shared__ float keep[RF_T4_ROWS]; // a gate-and-up launch's gates of a tile (rf_t4_put)
    __shared__ float part[NORM ? RF_T4_WARPS * 32 : 1]; // the norm's sums of squares (rf_t4_norm_scale_portable)
    if (!NORM && norm.weight != nullptr) {
        RF_T4_TRAP(); // a norm only the normed entry applies
    }
    const T* wn = static_cast<const T*>(norm.weight); // NORM: the norm's weight
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int warps = (int)blockDim.x >> 5;
    const int u = lane & 3;
    const int g = lane >> 2;
    const unsigned nbp = rf_t4_padded_blocks(nb);
    const unsigned tiles = (y.end[RF_T4_OUTPUTS - 1] + RF_T4_ROWS - 1) / RF_T4_ROWS;
    // A block's unit: a tile, or in a gate-and-up launch a gate tile and then its up tile for
    // each vector, so that the gates kept are the up's (rf_t4_put).
    const unsigned gate_tiles = y.end[0] / RF_T4_ROWS;
    const unsigned units = rf_t4_swiglu(y) ? gate_tiles : tiles;
    const unsigned per_unit = rf_t4_swiglu(y) ? 2u : 1u;
    unsigned done = 0; // (tile, vector) totals this block has finished: their parity picks the buffer
    rf_follow_prior_grid(); // nothing to do before it
    for (unsigned unit = blockIdx.x; unit < units; unit += gridDim.x) {
        for (unsigned tv = 0; tv < batch * per_unit; ++tv) {
            const unsigned v = tv / per_unit;
            const unsigned tile = unit + (tv % per_unit) * gate_tiles;
            const uint4* pt = payload + (rf_u64)tile * nbp * 16u + lane; // nbp / 2 pairs of 32 lanes
            const unsigned char* st = scales + (rf_u64)tile * nbp * RF_T4_ROWS;
            const T* xv = x + (rf_u64)v * nb * RF_QK;
            // The norm's s for this vector (its reads of `part` come before rf_t4_finish's barrier
            // below, which every thread passes before the next vector's writes).
            const float s = NORM ? rf_t4_norm_scale_portable(xv, (rf_u64)nb * RF_QK, norm.eps, part) : 1.0f;
            float total_g = 0.0f;
            float total_h = 0.0f;
            for (unsigned b = (unsigned)warp * RF_T4_GROUP; b < nb; b += (unsigned)warps * RF_T4_GROUP) {
                const unsigned q = b / RF_T4_GROUP;
                const uint2 sg = *reinterpret_cast<const uint2*>(st + q * RF_T4_SCALE_BYTES + 8 * g);
                const uint2 sh = *reinterpret_cast<const uint2*>(st + q * RF_T4_SCALE_BYTES + 8 * (g + 8));
                for (int j = 0; j < RF_T4_GROUP && b + (unsigned)j < nb; ++j) {
                    const uint4 pair = pt[(b / 2 + (unsigned)(j >> 1)) * 32u];
                    const unsigned wg = j & 1 ? pair.z : pair.x;
                    const unsigned wh = j & 1 ? pair.w : pair.y;
                    const rf_u64 c = 32ull * (b + (unsigned)j) + 8u * (unsigned)u; // x[c .. c + 8]
                    const T* xb = xv + c;
                    float pg = 0.0f;
                    float ph = 0.0f;
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            float xval = rf_to_float(xb[2 * i + h]);
                            if constexpr (NORM) {
                                const float w = rf_to_float(wn[c + 2 * i + h]);
                                xval = rf_to_float(rf_from_float<T>(rf_t4_normed(xval, s, w)));
                            }
                            pg = fmaf(rf_mxfp4::element(rf_t4_code(wg, i, h)), xval, pg);
                            ph = fmaf(rf_mxfp4::element(rf_t4_code(wh, i, h)), xval, ph);
                        }
                    }
                    total_g = fmaf(pg, rf_e8m0_to_float(rf_t4_scale_byte(sg, j)), total_g);
                    total_h = fmaf(ph, rf_e8m0_to_float(rf_t4_scale_byte(sh, j)), total_h);
                }
            }
            // sums[(warp * 16 + row) * 4 + u], added up per row by rf_t4_finish.
            float* sums = totals[done & 1];
            sums[(warp * RF_T4_ROWS + g) * 4 + u] = total_g;
            sums[(warp * RF_T4_ROWS + g + 8) * 4 + u] = total_h;
            rf_t4_finish<4, T>(sums, (unsigned)warps, tile, y, v, keep);
            ++done;
        }
    }
}

// Dequantisation: a thread a 16-byte payload vector (tile t, pair p, lane l = 4g + u; grid-stride).
// Its words W(g, 2p, u), W(g + 8, 2p, u), W(g, 2p + 1, u), W(g + 8, 2p + 1, u) are four runs of 8
// elements, elements 32b + 8u .. + 8 of a row, each stored with one 16-byte store (two for f32):
// the four lanes of a row's block write its 32 elements side by side. Each element is
// E2M1(code) * 2^(e - 127) in f32 (exact: a power-of-two scale), rounded to T once, as
// kernels/dequant.hip does for the GGUF rows; rows and blocks of the padding are not written.
template <typename T>
RF_DEVICE void rf_t4_dequant(const uint4* payload, const unsigned char* scales, T* out, unsigned rows, unsigned nb) {
    const unsigned nbp = rf_t4_padded_blocks(nb);
    const unsigned pairs = nbp / 2;
    const rf_u64 vectors = (rf_u64)((rows + RF_T4_ROWS - 1) / RF_T4_ROWS) * pairs * 32u;
    const rf_u64 k = (rf_u64)nb * RF_QK;
    for (rf_u64 i = (rf_u64)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += (rf_u64)gridDim.x * blockDim.x) {
        const unsigned lane = (unsigned)(i % 32u);
        const unsigned p = (unsigned)((i / 32u) % pairs);
        const unsigned t = (unsigned)(i / 32u / pairs);
        const unsigned g = lane >> 2;
        const unsigned u = lane & 3u;
        const uint4 v = payload[i];
        const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned r = g + 8u * (unsigned)(j & 1); // row in the tile
            const unsigned b = 2u * p + (unsigned)(j >> 1);
            const unsigned row = t * RF_T4_ROWS + r;
            if (row >= rows || b >= nb) {
                continue;
            }
            const float s = rf_e8m0_to_float(scales[((rf_u64)t * pairs / 4u + b / 8u) * (RF_T4_ROWS * 8u) + r * 8u + b % 8u]);
            float f[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                f[e] = rf_mxfp4::element(rf_t4_code(words[j], e / 2, e % 2)) * s;
            }
            rf_store_n<T, 8, true>(out + row * k + 32u * b + 8u * u, f);
        }
    }
}

// Every matrix-vector entry is (payload, scales, x, rf_t4_outputs y, rf_t4_norm norm, u32 nb, u32
// batch): x is [batch, nb * 32], output i [batch, its rows]; norm.weight (k elements, 16-byte
// aligned) for the normed entries, null for the others. blockDim.x: 32..RF_T4_WARPS * 32, whole
// warps. The matrix-core entries need at least as many groups as warps, x 16-byte aligned, and
// dynamic shared memory of warps * RF_T4_STAGES * (the stage) bytes for the rings, then the
// tiles' totals, two buffers of warps * 16 * (columns) floats:
//   rf_mxfp4_tiled_matvec_mma[_wide]_<dt>: batch 1; stages RF_T4_STAGE_<dt>, 1 column, for bf16
//     then 2 * 32 * nbp bytes of x and 4 * nbp of its factors (nbp = nb rounded up to 8);
//   rf_mxfp4_tiled_normed_mma[_wide]_<dt>: batch 1; stages RF_T4_STAGE_BF16, 1 column, then x
//     and its factors as the bf16 one-vector entry's, whatever <dt>;
//   rf_mxfp4_tiled_batch8_mma[_wide]_<dt>, ..._batch32_...: batch 1..8 and 1..32; stages
//     RF_T4_STAGE_BF16, 8 and 32 columns.
// The portable rf_mxfp4_tiled_matvec_<dt> and rf_mxfp4_tiled_normed_<dt> take any batch.
#define RF_T4_ARGS(T)                                                                                     \
    const uint4 *payload, const unsigned char *scales, const T *x, rf_t4_outputs y, rf_t4_norm norm, unsigned nb, \
        unsigned batch
#define RF_T4_MMA_ENTRIES(suffix, T)                                                                      \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_mxfp4_tiled_matvec_mma_##suffix(RF_T4_ARGS(T)) {                                               \
        RF_T4_MMA_BODY(T, false, false)                                                                   \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_mxfp4_tiled_matvec_mma_wide_##suffix(RF_T4_ARGS(T)) {                                          \
        RF_T4_MMA_BODY(T, true, false)                                                                    \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_mxfp4_tiled_normed_mma_##suffix(RF_T4_ARGS(T)) {                                               \
        RF_T4_MMA_BODY(T, false, true)                                                                    \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_mxfp4_tiled_normed_mma_wide_##suffix(RF_T4_ARGS(T)) {                                          \
        RF_T4_MMA_BODY(T, true, true)                                                                     \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_mxfp4_tiled_batch8_mma_##suffix(RF_T4_ARGS(T)) {                                               \
        RF_T4_BATCH_BODY(T, false, 1)                                                                     \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_RESIDENT_BLOCKS)                             \
        rf_mxfp4_tiled_batch8_mma_wide_##suffix(RF_T4_ARGS(T)) {                                          \
        RF_T4_BATCH_BODY(T, true, 1)                                                                      \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_BATCH32_RESIDENT_BLOCKS)                     \
        rf_mxfp4_tiled_batch32_mma_##suffix(RF_T4_ARGS(T)) {                                              \
        RF_T4_BATCH_BODY(T, false, 4)                                                                     \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T4_BATCH32_RESIDENT_BLOCKS)                     \
        rf_mxfp4_tiled_batch32_mma_wide_##suffix(RF_T4_ARGS(T)) {                                         \
        RF_T4_BATCH_BODY(T, true, 4)                                                                      \
    }
#define RF_T4_ENTRY(suffix, T)                                                                            \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS) rf_mxfp4_tiled_matvec_##suffix(RF_T4_ARGS(T)) {    \
        rf_t4_matvec<T, false>(payload, scales, x, y, norm, nb, batch);                                   \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS) rf_mxfp4_tiled_normed_##suffix(RF_T4_ARGS(T)) {    \
        rf_t4_matvec<T, true>(payload, scales, x, y, norm, nb, batch);                                    \
    }

#define RF_T4_DEQUANT_ENTRY(suffix, T)                                                                    \
    RF_KERNEL void rf_mxfp4_tiled_dequant_##suffix(const uint4* payload, const unsigned char* scales, T* out,   \
                                                   unsigned rows, unsigned nb) {                              \
        rf_t4_dequant<T>(payload, scales, out, rows, nb);                                                 \
    }

RF_T4_MMA_ENTRIES(f16, __half)
RF_T4_MMA_ENTRIES(bf16, rf_bf16)
RF_FOR_EACH_DTYPE(RF_T4_ENTRY)
RF_FOR_EACH_DTYPE(RF_T4_DEQUANT_ENTRY)
