// q8_0 matrix-vector product over the tiled layout: y[r] = sum_c W[r, c] x[c] (decode).
//
// The weight is the [n, k] q8_0 matrix of GGUF's block_q8_0 rows (34-byte blocks of 32 elements:
// a scale d as f16, then 32 int8 codes q; element i is d * q_i), re-laid out once on the host
// (crates/rocm-kernels/src/quant/q8_0_tiled.rs documents the layout in full) into the tiled
// shape kernels/include/rocmforge_tiled.h streams: 16-row tiles, a group 8 blocks (256 elements)
// of a row, k a multiple of 256. A group's 4 KB of codes are in lane order, each stored as
// q + 128 (an unsigned byte), and its 16 rows' 8 scales (16 bytes a row) are its scales:
//
//   mma pair P < 8 of a group (h = P / 4, e = P % 4), lane l = 4g + u: 16 bytes at payload byte
//   ((t * ng + s) * 8 + P) * 512 + 16 l, t the tile, s the group, ng = k / 256, holding the
//   words R(g, 0), R(g + 8, 0), R(g, 4), R(g + 8, 4), where R(r, m) is row r's elements
//   8e + m .. 8e + m + 3 of block u + 4h, element 8e + m + i in byte i.
//
// Entries (payload, scales, x, rf_t4_outputs y, rf_t4_norm norm, u32 nb, u32 batch), nb = k / 32:
//   rf_q8_0_tiled_matvec_mma_<dt>   f16 / bf16, one vector, NVIDIA sm_80+ (mma.sync; elsewhere
//                                   they trap and the launcher never picks them)
//   rf_q8_0_tiled_normed_mma_<dt>   the same with the RMSNorm `norm` applied to x (x then a row
//                                   of the residual stream; rocmforge_mxfp4_tiled_abi.h)
//   rf_q8_0_tiled_matvec_<dt>,      portable: f32, f16, bf16, any device, any batch (normed: one
//   rf_q8_0_tiled_normed_<dt>       vector)
// putting their totals as y.mode says (stored, added to the residual stream, or a gate-and-up
// product's SwiGLU), as the MXFP4 and q4_K entries do.
//
// Matrix-core kernel: rf_t4_stream's resident blocks and per-warp cp.async rings, a stage a group
// (4352 bytes), and rf_t4_block_columns' one-vector op (q4_K's): x staged once a block as f16
// (bf16 block-scaled, rocmforge_x16.h) with each block's sum of staged values times its factor
// (xt), the blocks as B's columns, so that lane u holds blocks u and u + 4's row sums. A code
// byte b = q + 128 between 0 and 255 is the f16 subnormal b 2^-24 after one byte permute that
// puts a zero byte above it (two codes a permute), exact, and b x is exact in the f32 products,
// so lane u's sum S_j of block j's codes times staged x gives
//   sum q x = 2^24 f_j S_j - 128 xt_j,
// which the lane scales by its row's d_j: two blocks a lane, and a quad's four lanes are added
// at the tile's end in a fixed order. The sums are f32.

#include "rocmforge_quant.h"
#include "rocmforge_tiled.h"

#if RF_MMA_SYNC

// Two codes of a word (bytes j and j + 1, j = 0 or 2) as an f16 pair of subnormals b 2^-24.
RF_DEVICE unsigned rf_t8_pair(unsigned word, unsigned j) { return __byte_perm(word, 0u, j == 0 ? 0x4140u : 0x4342u); }

// A lane's 16 bytes of a pair as A's registers of its two mmas: rows g and g + 8 at k slots 2u,
// 2u + 1 (elements m, m + 1) and 2u + 8, 2u + 9 (m + 2, m + 3), m = 0 for the first (`lo`) and
// 4 for the second (`hi`).
RF_DEVICE void rf_t8_decode(uint4 w, unsigned (&lo)[4], unsigned (&hi)[4]) {
    lo[0] = rf_t8_pair(w.x, 0);
    lo[1] = rf_t8_pair(w.y, 0);
    lo[2] = rf_t8_pair(w.x, 2);
    lo[3] = rf_t8_pair(w.y, 2);
    hi[0] = rf_t8_pair(w.z, 0);
    hi[1] = rf_t8_pair(w.w, 0);
    hi[2] = rf_t8_pair(w.z, 2);
    hi[3] = rf_t8_pair(w.w, 2);
}

// Scale d_j (f16) of block j (< 8) from a row's 16 bytes of scales: half j % 2 of word j / 2.
RF_DEVICE float rf_t8_scale(uint4 sc, unsigned j) {
    const unsigned w = j & 4u ? (j & 2u ? sc.w : sc.z) : (j & 2u ? sc.y : sc.x);
    return __half2float(__ushort_as_half((unsigned short)(j & 1u ? w >> 16 : w & 0xffffu)));
}

// Multiplies a staged group into the lane's partial row totals (its blocks u and u + 4): `xl`,
// the group's x as f16 at the lane's block, or (a lane that gives no x) a row of zeros; `xf` and
// `xt`, the group's 8 blocks' factors and sums (rf_t4_block_columns).
struct rf_t8_format {
    static constexpr unsigned PAYLOAD = RF_T8_PAYLOAD_BYTES;
    static constexpr unsigned SCALES = RF_T8_SCALE_BYTES;
    static constexpr unsigned STAGE = RF_T8_STAGE;
    RF_DEVICE static void group(const unsigned char* stage, const unsigned char* xl, const float* xf, const float* xt,
                                int lane, float& total_g, float& total_h) {
        const unsigned g = (unsigned)lane >> 2;
        const unsigned u = (unsigned)lane & 3u;
        float acc[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[h][i] = 0.0f;
            }
        }
#pragma unroll
        for (int p = 0; p < 8; ++p) {
            const int h = p >> 2;
            const int e = p & 3;
            const uint4 xb = *reinterpret_cast<const uint4*>(xl + 256 * h + 16 * e);
            unsigned lo[4];
            unsigned hi[4];
            rf_t8_decode(*reinterpret_cast<const uint4*>(stage + 512 * p + 16 * lane), lo, hi);
            rf_mma<__half>::run(acc[h], lo, xb.x, xb.y);
            rf_mma<__half>::run(acc[h], hi, xb.z, xb.w);
        }
        const uint4 sg = *reinterpret_cast<const uint4*>(stage + RF_T8_PAYLOAD_BYTES + 16 * g);
        const uint4 sh = *reinterpret_cast<const uint4*>(stage + RF_T8_PAYLOAD_BYTES + 16 * (g + 8));
        // Blocks u and u + 4: sum q x = 2^24 f S - 128 xt (the header says why), times d.
        const float c0 = xf[u] * 16777216.0f;
        const float c1 = xf[u + 4] * 16777216.0f;
        const float o0 = -128.0f * xt[u];
        const float o1 = -128.0f * xt[u + 4];
        total_g = fmaf(rf_t8_scale(sg, u), fmaf(c0, acc[0][0], o0), total_g);
        total_g = fmaf(rf_t8_scale(sg, u + 4), fmaf(c1, acc[1][0], o1), total_g);
        total_h = fmaf(rf_t8_scale(sh, u), fmaf(c0, acc[0][2], o0), total_h);
        total_h = fmaf(rf_t8_scale(sh, u + 4), fmaf(c1, acc[1][2], o1), total_h);
    }
};

// Several vectors (rf_t4_columns' totals and outputs, up to 8 * PASSES vectors): the one-vector
// op's columns, 2u and 2u + 1 block u + 4h of one vector twice, are here block u + 4h of two
// vectors, 2p and 2p + 1 in pass p: lane (g, u) with u == g / 2 gives vector 2p + g % 2's x of
// its block, so D gives lane u rows g and g + 8 of block u + 4h for both vectors, and A (the
// group's codes, decoded once a half) serves every pass. The giving lane reads its block's 32
// elements of x from global memory (bf16: rounded to block-scaled f16 in registers by
// rocmforge_x16.h's rule over the block, the one-vector staging's) and forms the block's factor
// and sum; the lanes that scale D take them from it by shuffles. Each lane's totals: pass p, rows
// g, g + 8 of vectors 2p, 2p + 1, over its blocks u and u + 4, added over the quad at the tile's
// end.
template <typename T, int PASSES> struct rf_t8_vectors : rf_t4_columns<T, PASSES> {
    typedef rf_t4_columns<T, PASSES> Columns;
    typedef T Elem;
    static constexpr int PAIRS = 4 * PASSES; // passes of two vectors
    static constexpr int CHUNK = 4;          // passes whose x is loaded together
    static constexpr unsigned PAYLOAD = RF_T8_PAYLOAD_BYTES;
    static constexpr unsigned SCALES = RF_T8_SCALE_BYTES;
    static constexpr bool X_IN_STAGE = false;
    static constexpr unsigned STAGE = RF_T8_STAGE;
    using Columns::batch;
    using Columns::nb;
    using Columns::totals;
    using Columns::warps;
    using Columns::x;
    float tot[PAIRS][4]; // pass p: rows g, g (vectors 2p, 2p + 1), g + 8, g + 8

    RF_DEVICE rf_t8_vectors(const T* x_, const rf_t4_outputs& y_, unsigned nb_, unsigned batch_)
        : Columns(x_, y_, nb_, batch_) {
#pragma unroll
        for (int p = 0; p < PAIRS; ++p) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                tot[p][i] = 0.0f;
            }
        }
    }
    RF_DEVICE void group(const unsigned char* stage, unsigned q, int lane) {
        const unsigned g = (unsigned)lane >> 2;
        const unsigned u = (unsigned)lane & 3u;
        const bool gives = (g >> 1) == u;
        const rf_u64 k = (rf_u64)nb * RF_QK;
        const uint4 sg = *reinterpret_cast<const uint4*>(stage + RF_T8_PAYLOAD_BYTES + 16 * g);
        const uint4 sh = *reinterpret_cast<const uint4*>(stage + RF_T8_PAYLOAD_BYTES + 16 * (g + 8));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned j = u + 4u * (unsigned)h;
            const float dg = rf_t8_scale(sg, j);
            const float dh = rf_t8_scale(sh, j);
            unsigned lo[4][4]; // pair 4h + e: the first mma's registers, then the second's
            unsigned hi[4][4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                rf_t8_decode(*reinterpret_cast<const uint4*>(stage + 512 * (4 * h + e) + 16 * lane), lo[e], hi[e]);
            }
            const T* xj = x + (rf_u64)q * (RF_T4_GROUP * RF_QK) + 32u * j; // block j of vector 0
            // Passes CHUNK at a time, every load of a chunk issued before the first is used (a
            // pass's loads waited for alone made each pass a round trip to the L2).
#pragma unroll
            for (int c = 0; c < PAIRS; c += CHUNK) {
                if (2u * (unsigned)c >= batch) {
                    break; // uniform: the batch is the launch's
                }
                uint4 xv[CHUNK][4];
                bool has[CHUNK];
#pragma unroll
                for (int i = 0; i < CHUNK; ++i) {
                    const unsigned vec = 2u * (unsigned)(c + i) + (g & 1u);
                    has[i] = gives && vec < batch;
#pragma unroll
                    for (int w = 0; w < 4; ++w) {
                        xv[i][w] = make_uint4(0u, 0u, 0u, 0u);
                    }
                    if (has[i]) {
                        rf_t4_load_block(xj + vec * k, 0, xv[i]);
                    }
                }
#pragma unroll
                for (int i = 0; i < CHUNK; ++i) {
                    const int p = c + i;
                    if (2u * (unsigned)p >= batch) {
                        break; // uniform
                    }
                    float f = 1.0f;
                    float t = 0.0f;
                    if (has[i]) {
                        if constexpr (rf_x16<T>::SCALED) {
                            uint4 o[4];
                            f = rf_x16<T>::convert_block(xv[i], o);
#pragma unroll
                            for (int w = 0; w < 4; ++w) {
                                xv[i][w] = o[w];
                            }
                        }
                        t = rf_x16_sum(xv[i]) * f;
                    }
                    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        rf_mma<__half>::run(acc, lo[e], xv[i][e].x, xv[i][e].y);
                        rf_mma<__half>::run(acc, hi[e], xv[i][e].z, xv[i][e].w);
                    }
                    // Vectors 2p and 2p + 1 of block j: given by lanes 4 (2u) + u and 4 (2u + 1) + u.
                    const float f0 = __shfl_sync(0xffffffffu, f, 9 * u) * 16777216.0f;
                    const float f1 = __shfl_sync(0xffffffffu, f, 9 * u + 4) * 16777216.0f;
                    const float o0 = -128.0f * __shfl_sync(0xffffffffu, t, 9 * u);
                    const float o1 = -128.0f * __shfl_sync(0xffffffffu, t, 9 * u + 4);
                    tot[p][0] = fmaf(dg, fmaf(f0, acc[0], o0), tot[p][0]);
                    tot[p][1] = fmaf(dg, fmaf(f1, acc[1], o1), tot[p][1]);
                    tot[p][2] = fmaf(dh, fmaf(f0, acc[2], o0), tot[p][2]);
                    tot[p][3] = fmaf(dh, fmaf(f1, acc[3], o1), tot[p][3]);
                }
            }
        }
    }
    // A quad's lanes hold the parts of its two rows from its four lanes' blocks: added
    // ((u0 + u1) + (u2 + u3), the same in every lane); lane u writes the passes p = u mod 4
    // (sums[(warp * 16 + row) * COLUMNS + vector]), then the warps' are added and put.
    RF_DEVICE void tile_done(unsigned done, unsigned tile, int warp, int lane) {
        constexpr unsigned COLUMNS = Columns::COLUMNS;
        float* sums = totals + (done & 1) * (warps * RF_T4_ROWS * COLUMNS);
        const int g = lane >> 2;
        const int u = lane & 3;
#pragma unroll
        for (int p = 0; p < PAIRS; ++p) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                tot[p][i] += rf_shfl_xor(tot[p][i], 1);
                tot[p][i] += rf_shfl_xor(tot[p][i], 2);
            }
            if ((p & 3) == u) {
                float* at = sums + (warp * RF_T4_ROWS + g) * COLUMNS + 2 * p;
                at[0] = tot[p][0];
                at[1] = tot[p][1];
                at[8 * COLUMNS] = tot[p][2];
                at[8 * COLUMNS + 1] = tot[p][3];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                tot[p][i] = 0.0f;
            }
        }
        Columns::put_columns(sums, tile);
    }
};

template <typename T, int PASSES>
RF_DEVICE void rf_t8_matvecs_mma(const uint4* payload, const unsigned char* scales, const T* x, const rf_t4_outputs& y,
                                 rf_t4_norm norm, unsigned nb, unsigned batch) {
    if (norm.weight != nullptr || nb % RF_T4_GROUP != 0) {
        RF_T4_TRAP(); // a norm only the normed entries apply; whole groups
    }
    rf_t8_vectors<T, PASSES> op(x, y, nb, batch);
    rf_t4_stream(payload, scales, x, nb, op);
}

template <typename T, bool NORM>
RF_DEVICE void rf_t8_matvec_mma(const uint4* payload, const unsigned char* scales, const T* x, const rf_t4_outputs& y,
                                rf_t4_norm norm, unsigned nb, unsigned batch) {
    if ((!NORM && norm.weight != nullptr) || batch != 1 || nb % RF_T4_GROUP != 0) {
        RF_T4_TRAP(); // a norm only the normed entries apply; one vector; whole groups
    }
    rf_t4_block_columns<T, NORM, rf_t8_format> op(x, y, norm, nb);
    rf_t4_stream(payload, scales, x, nb, op);
}
#define RF_T8_BODY(T, NORM) rf_t8_matvec_mma<T, NORM>(payload, scales, x, y, norm, nb, batch);
#define RF_T8_BATCH_BODY(T, PASSES) rf_t8_matvecs_mma<T, PASSES>(payload, scales, x, y, norm, nb, batch);
#else
#define RF_T8_BODY(T, NORM) RF_MMA_UNAVAILABLE();
#define RF_T8_BATCH_BODY(T, PASSES) RF_MMA_UNAVAILABLE();
#endif // RF_MMA_SYNC

// Portable: the same layout, one tile a block (grid-stride), the warps splitting its groups
// round-robin; lane (g, u) reads its 16-byte vectors straight from global memory and covers rows
// g and g + 8 of blocks u and u + 4 whole (its four vectors of each), forming each block's sum of
// codes times x in f32 and scaling it by the row's d. The four lanes of a row are added in shared
// memory with the warps'. Several vectors one after another over the tile. Any warp width:
// "warp" here is 32 consecutive threads, and nothing is exchanged between threads but through
// shared memory. NORM: each vector's s first (rf_t4_norm_scale_portable), then each element of x
// normalised and rounded to T as it is read.
template <typename T, bool NORM>
RF_DEVICE void rf_t8_matvec(const uint4* payload, const unsigned char* scales, const T* x, const rf_t4_outputs& y,
                            rf_t4_norm norm, unsigned nb, unsigned batch) {
    __shared__ float totals[2][RF_T4_WARPS * 4 * RF_T4_ROWS]; // by parity (rf_t4_finish)
    __shared__ float keep[RF_T4_ROWS]; // a gate-and-up launch's gates of a tile (rf_t4_put)
    __shared__ float part[NORM ? RF_T4_WARPS * 32 : 1]; // the norm's sums of squares
    if ((!NORM && norm.weight != nullptr) || nb % RF_T4_GROUP != 0) {
        RF_T4_TRAP(); // a norm only the normed entry applies; whole groups
    }
    const T* wn = static_cast<const T*>(norm.weight);
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int warps = (int)blockDim.x >> 5;
    const int u = lane & 3;
    const int g = lane >> 2;
    const unsigned ng = nb / RF_T4_GROUP;
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
            const uint4* pt = payload + (rf_u64)tile * ng * 256u + lane; // 8 pairs of 32 lanes a group
            const unsigned char* st = scales + (rf_u64)tile * ng * RF_T8_SCALE_BYTES;
            const T* xv = x + (rf_u64)v * nb * RF_QK;
            const float s = NORM ? rf_t4_norm_scale_portable(xv, (rf_u64)nb * RF_QK, norm.eps, part) : 1.0f;
            float total_g = 0.0f;
            float total_h = 0.0f;
            for (unsigned q = (unsigned)warp; q < ng; q += (unsigned)warps) {
                float cx[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}; // [half][row]: codes times x
#pragma unroll 1
                for (int p = 0; p < 8; ++p) {
                    const int h = p >> 2;
                    const uint4 vec = pt[(q * 8u + (unsigned)p) * 32u];
                    const unsigned words[4] = {vec.x, vec.y, vec.z, vec.w}; // R(g, 0), R(g + 8, 0), R(g, 4), R(g + 8, 4)
                    const rf_u64 c = (rf_u64)q * (RF_T4_GROUP * RF_QK) + 32u * (unsigned)(u + 4 * h) + 8u * (unsigned)(p & 3);
#pragma unroll
                    for (int m = 0; m < 8; ++m) {
                        float xval = rf_to_float(xv[c + m]);
                        if constexpr (NORM) {
                            xval = rf_to_float(rf_from_float<T>(rf_t4_normed(xval, s, rf_to_float(wn[c + m]))));
                        }
                        const int at = (m >> 2) * 2; // R(., 0) or R(., 4)
                        const int shift = 8 * (m & 3);
                        cx[h][0] = fmaf((float)(int)((words[at] >> shift) & 0xffu) - 128.0f, xval, cx[h][0]);
                        cx[h][1] = fmaf((float)(int)((words[at + 1] >> shift) & 0xffu) - 128.0f, xval, cx[h][1]);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const unsigned char* sr = st + (rf_u64)q * RF_T8_SCALE_BYTES + 16u * (unsigned)(g + 8 * r);
                    float part_r = 0.0f;
                    for (int h = 0; h < 2; ++h) {
                        const int j = u + 4 * h;
                        part_r += rf_f16_bits_to_float(sr[2 * j], sr[2 * j + 1]) * cx[h][r];
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

// Dequantisation: a thread a run of 8 elements of a row (grid-stride), in the order of the
// output, so that consecutive threads store consecutive 16 bytes (bf16, f16; 32 for f32): run i
// is row i / (ng 32)'s elements 8 (i % (ng 32)) .., block j of group s, elements 8e .. 8e + 7,
// the codes of lane 4 (r % 8) + j % 4's vector of pair 4 (j / 4) + e (its words R(r, 0) and
// R(r, 4)); each element d q in f32 rounded to T once, as kernels/dequant.hip gives the GGUF rows.
template <typename T>
RF_DEVICE void rf_t8_dequant(const uint4* payload, const unsigned char* scales, T* out, unsigned rows, unsigned nb) {
    const unsigned ng = nb / RF_T4_GROUP;
    const rf_u64 runs = (rf_u64)rows * ng * 32u;
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(payload);
    for (rf_u64 i = (rf_u64)blockIdx.x * blockDim.x + threadIdx.x; i < runs; i += (rf_u64)gridDim.x * blockDim.x) {
        const unsigned row = (unsigned)(i / (ng * 32u));
        const unsigned in_row = (unsigned)(i % (ng * 32u));
        const unsigned s = in_row >> 5;
        const unsigned j = (in_row >> 2) & 7u;
        const unsigned e = in_row & 3u;
        const unsigned rt = row % RF_T4_ROWS;
        const rf_u64 ts = (rf_u64)(row / RF_T4_ROWS) * ng + s; // tile * ng + group
        const unsigned lane = 4u * (rt & 7u) + (j & 3u);
        const unsigned char* v = bytes + ((ts * 8u + 4u * (j >> 2) + e) * 32u + lane) * 16u + 4u * (rt >> 3);
        const unsigned words[2] = {*reinterpret_cast<const unsigned*>(v), *reinterpret_cast<const unsigned*>(v + 8)};
        const unsigned char* sr = scales + (ts * RF_T4_ROWS + rt) * 16u + 2u * j;
        const float d = rf_f16_bits_to_float(sr[0], sr[1]);
        float f[8];
#pragma unroll
        for (int m = 0; m < 8; ++m) {
            f[m] = d * ((float)(int)((words[m >> 2] >> (8 * (m & 3))) & 0xffu) - 128.0f);
        }
        rf_store_n<T, 8, true>(out + 8u * i, f);
    }
}

// Every entry is (payload, scales, x, rf_t4_outputs y, rf_t4_norm norm, u32 nb, u32 batch): x
// [batch, nb * 32], nb a multiple of 8 (whole groups), output i [batch, its rows]; norm.weight (k
// elements, 16-byte aligned) for the normed entries, null for the others. blockDim.x:
// 32..RF_T4_WARPS * 32, whole warps, at most one a group; x 16-byte aligned. The matrix-core
// entries (batch 1) take dynamic shared memory: warps * RF_T4_STAGES * RF_T8_STAGE bytes for the
// rings, then 2 * warps * 16 floats of totals, 64 nb bytes of x, 4 nb of factors, 4 nb of sums
// and 512 of zeros; then in a gate-and-up launch 16 floats of gates.
#define RF_T8_ARGS(T)                                                                                     \
    const uint4 *payload, const unsigned char *scales, const T *x, rf_t4_outputs y, rf_t4_norm norm, unsigned nb, \
        unsigned batch
#define RF_T8_ENTRIES(suffix, T)                                                                          \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T8_RESIDENT_BLOCKS)                             \
        rf_q8_0_tiled_matvec_mma_##suffix(RF_T8_ARGS(T)) {                                               \
        RF_T8_BODY(T, false)                                                                              \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, RF_T8_RESIDENT_BLOCKS)                             \
        rf_q8_0_tiled_normed_mma_##suffix(RF_T8_ARGS(T)) {                                               \
        RF_T8_BODY(T, true)                                                                               \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, 1) rf_q8_0_tiled_batch8_mma_##suffix(RF_T8_ARGS(T)) { \
        RF_T8_BATCH_BODY(T, 1)                                                                            \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS, 1) rf_q8_0_tiled_batch32_mma_##suffix(RF_T8_ARGS(T)) { \
        RF_T8_BATCH_BODY(T, 4)                                                                            \
    }

RF_T8_ENTRIES(f16, __half)
RF_T8_ENTRIES(bf16, rf_bf16)

// Portable (any device, f32 / f16 / bf16, any batch).
#define RF_T8_PORTABLE(suffix, T)                                                                         \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS) rf_q8_0_tiled_matvec_##suffix(RF_T8_ARGS(T)) {     \
        rf_t8_matvec<T, false>(payload, scales, x, y, norm, nb, batch);                                   \
    }                                                                                                     \
    RF_KERNEL void __launch_bounds__(32 * RF_T4_WARPS) rf_q8_0_tiled_normed_##suffix(RF_T8_ARGS(T)) {     \
        rf_t8_matvec<T, true>(payload, scales, x, y, norm, nb, batch);                                    \
    }                                                                                                     \
    RF_KERNEL void rf_q8_0_tiled_dequant_##suffix(const uint4* payload, const unsigned char* scales, T* out, \
                                                  unsigned rows, unsigned nb) {                           \
        rf_t8_dequant<T>(payload, scales, out, rows, nb);                                                 \
    }
RF_FOR_EACH_DTYPE(RF_T8_PORTABLE)
