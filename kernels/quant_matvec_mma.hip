// Fused matrix-vector products with ggml block weights on NVIDIA matrix cores (sm_80 and later:
// mma.sync.m16n8k16, cp.async): the matrix-core implementation of quant_matvec.hip's contract
// for every ggml format (q8_0, q4_0, q4_K, q5_K, q6_K) with f16 or bf16 activations, built for
// those targets only; and MXFP4 (ggml's block_mxfp4) in passes of 8 vectors, for
// mxfp.rs's mx_matvec_group past one vector (one vector runs mxfp.hip's product lists). Same arguments, same results up to the order of f32 sums (the launcher,
// quant/matvec.rs, picks this module where it applies and quant_matvec.hip everywhere else):
//
//   rf_qmvm_<fmt>_b<BC>_<dt>(products, x, k, batch):  y[b][r] = sum_c W[r][c] x[b][c]
//
// Why: the portable kernel spends 5 to 6.5 instructions an element and row (a code cut out,
// turned into a float, an FMA each), which holds the 4-bit formats near 0.6 of copy bandwidth
// at batch 1 and makes batch 8 cost 3 to 4 times batch 1. Here the multiply-adds go to the
// tensor cores, 16 rows x 16 elements x up to 8 vectors an instruction, and what is left an
// element is its decode into an exact f16/bf16 value: about 0.75 (q4_K, f16) to 2.5 (q8_0,
// bf16) instructions an element and row, independent of the batch.
//
// Work. A thread block owns a tile of RF_QMVM_ROWS = 16 rows (the row tiles of all products
// numbered one product after another); its warps (up to RF_QMVM_WARPS) split k into chunks of
// F::CHUNK elements, warp w taking chunks w, w + warps, ... Each warp copies its tile's rows of
// a chunk and the chunk of x (BC vectors) into its own shared stage with cp.async, STAGES - 1
// chunks in flight while it computes on one; the pipeline runs on across tiles, passes and
// products (every warp walks the same sequence of them), so it does not drain at a tile's end.
// Rows past a product's end are zero-filled, so they contribute nothing and are not stored;
// vectors past the batch likewise.
//
// One vector of q4_K takes its own loop (rf_qmvm_q4k_b1, "sub-blocks as B's columns", below):
// no staging, each D column a unit sum.
//
// The formats (fragments, the codes' exact 16-bit values, the scales): rocmforge_qmvm_formats.h.
//
// Entry: each product's rows >= 1 (0: unused), their row tiles together below 2^31, k % F::CHUNK
// == 0 with rows of whole 16-byte vectors, k > 0, 1 <= batch (BC = 1 entries: batch == 1);
// blockDim.x = 32 * warps, warps <= RF_QMVM_WARPS and warps <= k / F::CHUNK (every warp has a
// chunk of every tile: the tile's reduction has barriers); dynamic shared memory warps * STAGES
// * stage + warps * 16 * BC * 4 (STAGES: F::STAGES_B1 for BC = 1, RF_QMVM_STAGES_MANY otherwise;
// stage: 16 * F::SPAN + x, x = BC == 1 ? 2 CHUNK : BC * (2 CHUNK + 64) bytes); every w, y and x
// 16-byte aligned; 16 * row bytes < 2^32. The launcher (quant/matvec.rs) checks all of it.

#include "rocmforge_dependent_launch.h"
#include "rocmforge_products.h"
#include "rocmforge_qmvm.h"
#include "rocmforge_qmvm_formats.h"
#include "rocmforge_silu.h"

#if !RF_MMA_SYNC && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "quant_matvec_mma.hip is built for NVIDIA sm_80 and later only (xtask kernels' target list)"
#endif

// Vectors of x a thread of the one-vector q4_K loop loads at once while staging it.
#define RF_QMVM_X_LOADS 8

#if RF_MMA_SYNC

// The kernel's loop, rf_qmvm, is in rocmforge_qmvm.h (persistent_mlp.hip runs it too).

// ---------------------------------------------------------------------------------------------
// One vector of q4_K: the super-block's sub-blocks as B's columns (rf_qmvm_q4_k_b1_<dt>)
// ---------------------------------------------------------------------------------------------
//
// Why another loop: at one vector rf_qmvm above puts the same x in all 8 columns of B, so each
// mma's D holds its 16 sums 8 times over, every lane of a quad scales the same sums, and
// ~350 of the 1254 instructions of its q4_K bf16 chunk are staging bookkeeping
// (docs/kernels/quant_matvec.md, "The one-vector loop's issue bound").
//
// Columns. Lane (g, t) puts its rows' sub-block 2t (the low nibbles of the super-block's 32-byte
// group t) at all four of its A positions (2t, 2t + 1, 2t + 8, 2t + 9) in 8 mma steps, then
// sub-block 2t + 1 (the high nibbles) in 8 more, each into its own accumulator. B's column n holds
// x only at the positions of lane t = n / 2: lanes g = 2t and 2t + 1 give x of the sub-block
// (their b0, b1 are x's pairs as they lie in memory), every other lane zeros. So D[r][n] is the
// sum of q x over sub-block 2 (n / 2) (or 2 (n / 2) + 1) of row r: a super-block's 8 unit sums in
// its 16 mma steps, and lane (g, t) holds exactly its own sub-blocks' sums (twice: columns 2t and
// 2t + 1 are equal), so no lane scales another's. The mins' activation sums X_n come from two
// more mma steps, A all ones and B x of sub-block n in column n (elements 2t, 2t + 1, 2t + 8,
// 2t + 9 and 16 further from lane (n, t)), which leave X_2t and X_2t+1 in lane (g, t).
// Each unit's step d sc times its sum and min dmin m times its X go into the lane's f32 totals:
// the portable kernel's factored form and bound (quant/matvec.rs, allowed_error).
//
// Work. A block's warps split a 16-row tile's super-blocks, warp w taking w, w + warps, ...;
// blocks stride over the tiles of all products (the launcher starts at most
// RF_QMVM_ONE_BLOCKS_AN_SM blocks an SM, what fits at once), and each warp walks one stream of
// (tile, super-block) items across its block's tiles. A lane loads its rows' headers and group t
// (16-byte vectors: q4_K rows and super-blocks are 16-byte aligned) straight into registers, one
// item ahead of the one it computes on, across tile ends too; the first items before the wait for
// the kernel ahead. The weights are loaded L2 evict-first (rocmforge_mma.h: read once a step,
// they would otherwise push the step's other data and code out of the L2). x is staged in shared memory once a block. Rows past a product's end read its
// last row and are not stored. Totals: a quad's lanes add in a fixed order, then the warps in
// warp order, so every output has the same bits alone or in a group.
//
// Gate and up with SwiGLU (GLU, the _glu entries): w[0] the gate, w[1] the up projection, both
// rows[0] rows; y[0] gets silu(gate x) * (up x), each product's sum rounded to T first, so the
// bits are those of the two products' outputs put through kernels/swiglu.hip. A tile is 8 output
// rows: the mma's rows g hold the gate's row g of the tile, rows g + 8 the up's row g (every
// row's sum is the same arithmetic at either place). The MLP's activation then costs no launch
// of its own.
//
// Entry: each product's rows >= 1 (0: unused; GLU: rows[0] for both), their tiles together below 2^31, k % 256 == 0,
// k > 0, batch == 1; warps <= RF_QMVM_ONE_WARPS_MAX and warps <= k / 256; dynamic shared memory
// 2 k + 2 * RF_QMVM_ONE_WARPS_MAX * 16 * 4 bytes; w, x 16-byte aligned. The launcher
// (quant/matvec.rs) checks all of it.

// One super-block's weight registers of a lane: rows g and g + 8's headers (d, dmin, 12 bytes of
// 6-bit scales and mins) and group t (32 bytes of nibbles).
struct rf_qmvm_q4k_regs {
    uint4 hg, hh;
    uint4 qg[2], qh[2];
};

template <typename T> struct rf_qmvm_one;
template <> struct rf_qmvm_one<__half> {
    static constexpr unsigned ONES = 0x3c003c00u;
};
template <> struct rf_qmvm_one<rf_bf16> {
    static constexpr unsigned ONES = 0x3f803f80u;
};

// A warp's place in its stream of work: a super-block of a tile (tiles numbered across the
// products one after another), the product and its tile, and the rows g, g + 8 of the lane.
struct rf_qmvm_q4k_item {
    unsigned tile; // across the products; past the last: no work left
    unsigned sb;
    int prod;
    unsigned local; // the tile within its product
    const unsigned char* wg;
    const unsigned char* wh;
};

template <typename T, bool GLU> RF_DEVICE void rf_qmvm_q4k_b1(const rf_qmv_products& p, const T* x, rf_u64 k) {
    constexpr int R = RF_QMVM_ROWS;
    constexpr unsigned SB = 144; // bytes of a q4_K super-block
    typedef rf_qmvm_q4_nibbles<T> N;
    extern __shared__ __align__(16) unsigned char rf_qmvm_smem[];
    T* xsm = reinterpret_cast<T*>(rf_qmvm_smem);
    float* totals = reinterpret_cast<float*>(rf_qmvm_smem + 2 * k); // [2][warps][16]
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const unsigned warps = blockDim.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const unsigned nsb = (unsigned)(k / 256);
    const rf_u64 row_bytes = (rf_u64)nsb * SB;
    const bool x_owner = g >> 1 == t;
    constexpr int GLU_ROWS = R / 2; // output rows of a GLU tile
    const unsigned tiles0 =
        GLU ? (unsigned)((p.rows[0] + GLU_ROWS - 1) / GLU_ROWS) : (unsigned)((p.rows[0] + R - 1) / R);
    const unsigned tiles01 = GLU ? tiles0 : tiles0 + (unsigned)((p.rows[1] + R - 1) / R);
    const unsigned tiles = GLU ? tiles0 : tiles01 + (unsigned)((p.rows[2] + R - 1) / R);

    // The item's product, tile and row pointers for its tile (rows past a product's end read
    // its last row). GLU: the gate's and the up's row g of the tile.
    auto place = [&](rf_qmvm_q4k_item& it) {
        if (it.tile >= tiles) {
            return;
        }
        if constexpr (GLU) {
            it.prod = 0;
            it.local = it.tile;
            const rf_u64 r = (rf_u64)it.tile * GLU_ROWS + g;
            const rf_u64 row = r < p.rows[0] ? r : p.rows[0] - 1;
            it.wg = p.w[0] + row * row_bytes;
            it.wh = p.w[1] + row * row_bytes;
            return;
        }
        it.prod = it.tile < tiles0 ? 0 : it.tile < tiles01 ? 1 : 2;
        it.local = it.tile - (it.prod == 0 ? 0u : it.prod == 1 ? tiles0 : tiles01);
        const rf_u64 rows = rf_products_pick(p.rows, it.prod);
        const unsigned char* w = rf_products_pick(p.w, it.prod);
        const rf_u64 rg = (rf_u64)it.local * R + g;
        const rf_u64 rh = rg + 8;
        it.wg = w + (rg < rows ? rg : rows - 1) * row_bytes;
        it.wh = w + (rh < rows ? rh : rows - 1) * row_bytes;
    };
    // Super-blocks warp, warp + warps, ... of the block's tiles blockIdx.x, + gridDim.x, ...
    auto advance = [&](rf_qmvm_q4k_item& it) {
        it.sb += warps;
        if (it.sb >= nsb) {
            it.sb = (unsigned)warp;
            it.tile += gridDim.x;
            place(it);
        }
    };
    const rf_l2_policy stream = rf_l2_evict_first(); // the weights: rocmforge_mma.h
    auto load_w = [&](const rf_qmvm_q4k_item& it, rf_qmvm_q4k_regs& r) {
        const unsigned char* bg = it.wg + (rf_u64)it.sb * SB;
        const unsigned char* bh = it.wh + (rf_u64)it.sb * SB;
        r.hg = rf_ldg16_policy(bg, stream);
        r.qg[0] = rf_ldg16_policy(bg + 16 + 32 * t, stream);
        r.qg[1] = rf_ldg16_policy(bg + 32 + 32 * t, stream);
        r.hh = rf_ldg16_policy(bh, stream);
        r.qh[0] = rf_ldg16_policy(bh + 16 + 32 * t, stream);
        r.qh[1] = rf_ldg16_policy(bh + 32 + 32 * t, stream);
    };
    // Step d sc and min dmin m of sub-blocks 2t and 2t + 1 of a row's header, formed as the
    // codec forms them (exact; NaN and infinite scales behave as the codec's), into the row's
    // total: sums s0, s1 (in N's low and high units) and activation sums x0, x1.
    auto scale_into = [&](const uint4& hd, float s0, float s1, float x0, float x1, float& acc) {
        float dd[2]; // d, dmin
        rf_unpack2_bits16<__half>(hd.x, dd);
        unsigned scs[2], ms[2]; // sub-blocks 0..3 and 4..7, a byte each
        rf_qmvm_q4k_scales(&hd.y, scs, ms);
        // Sub-blocks 2t, 2t + 1: bytes 2 (t % 2), 2 (t % 2) + 1 of the word for t / 2.
        const unsigned sc = (t < 2 ? scs[0] : scs[1]) >> (16 * (t & 1));
        const unsigned m = (t < 2 ? ms[0] : ms[1]) >> (16 * (t & 1));
        const float step0 = dd[0] * rf_qmvm_byte_float<0>(sc);
        const float step1 = dd[0] * rf_qmvm_byte_float<1>(sc);
        const float min0 = dd[1] * rf_qmvm_byte_float<0>(m);
        const float min1 = dd[1] * rf_qmvm_byte_float<1>(m);
        acc = fmaf(step0 * N::LO_UNIT, s0, acc);
        acc = fmaf(step1 * N::HI_UNIT, s1, acc);
        acc = fmaf(-min0, x0, acc);
        acc = fmaf(-min1, x1, acc);
    };
    float acc_g = 0.0f, acc_h = 0.0f;
    // One super-block: x from shared memory (B: lanes g / 2 == t give sub-blocks 2t (xl) and
    // 2t + 1 (xh), the others zeros; xs: this lane's pairs for the activation sums).
    auto compute = [&](const rf_qmvm_q4k_regs& r, unsigned sb) {
        const T* xb = xsm + sb * 256;
        uint4 xl[4], xh[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            xl[i] = xh[i] = make_uint4(0u, 0u, 0u, 0u);
            if (x_owner) {
                xl[i] = *reinterpret_cast<const uint4*>(xb + 64 * t + 8 * i);
                xh[i] = *reinterpret_cast<const uint4*>(xb + 64 * t + 32 + 8 * i);
            }
        }
        unsigned xs[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            xs[j] = *reinterpret_cast<const unsigned*>(xb + 32 * g + 2 * t + 8 * j);
        }
        float lo[4] = {0.0f, 0.0f, 0.0f, 0.0f};   // sub-block 2t: rows g (lo[0] = lo[1]), g + 8 (lo[2])
        float hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};   // sub-block 2t + 1
        float xsum[4] = {0.0f, 0.0f, 0.0f, 0.0f}; // X_2t (xsum[0]), X_2t+1 (xsum[1])
        const unsigned ones[4] = {rf_qmvm_one<T>::ONES, rf_qmvm_one<T>::ONES, rf_qmvm_one<T>::ONES,
                                  rf_qmvm_one<T>::ONES};
        rf_mma<T>::run(xsum, ones, xs[0], xs[1]);
        rf_mma<T>::run(xsum, ones, xs[2], xs[3]);
        const unsigned* qg = &r.qg[0].x;
        const unsigned* qh = &r.qh[0].x;
        const unsigned* xlw = &xl[0].x;
        const unsigned* xhw = &xh[0].x;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            // Elements 4j .. 4j + 3 of both sub-blocks: pairs (4j, 4j + 1) at positions 2t, 2t + 1
            // and (4j + 2, 4j + 3) at 2t + 8, 2t + 9, as x's words 2j and 2j + 1 hold them.
            unsigned lg[2], hg[2], lh[2], hh[2];
            N::raw(qg[j], lg[0], lg[1], hg[0], hg[1]);
            N::raw(qh[j], lh[0], lh[1], hh[0], hh[1]);
            const unsigned al[4] = {N::done(lg[0]), N::done(lh[0]), N::done(lg[1]), N::done(lh[1])};
            rf_mma<T>::run(lo, al, xlw[2 * j], xlw[2 * j + 1]);
            const unsigned ah[4] = {N::done(hg[0]), N::done(hh[0]), N::done(hg[1]), N::done(hh[1])};
            rf_mma<T>::run(hi, ah, xhw[2 * j], xhw[2 * j + 1]);
        }
        scale_into(r.hg, lo[0], hi[0], xsum[0], xsum[1], acc_g);
        scale_into(r.hh, lo[2], hi[2], xsum[0], xsum[1], acc_h);
    };
    // After the warp's last super-block of a tile: the quad's lanes (sub-blocks 2t, 2t + 1),
    // then, after the block's barrier, the warps in warp order. The totals alternate between
    // two halves by tile, so the next tile's writes never meet this one's reads.
    unsigned parity = 0;
    auto finish_tile = [&](const rf_qmvm_q4k_item& it) {
        acc_g += __shfl_xor_sync(0xffffffffu, acc_g, 1);
        acc_h += __shfl_xor_sync(0xffffffffu, acc_h, 1);
        acc_g += __shfl_xor_sync(0xffffffffu, acc_g, 2);
        acc_h += __shfl_xor_sync(0xffffffffu, acc_h, 2);
        float* half = totals + parity * warps * R;
        if (t == 0) {
            half[warp * R + g] = acc_g;
            half[warp * R + g + 8] = acc_h;
        }
        acc_g = acc_h = 0.0f;
        __syncthreads();
        if constexpr (GLU) {
            if (threadIdx.x < (unsigned)GLU_ROWS && (rf_u64)it.local * GLU_ROWS + threadIdx.x < p.rows[0]) {
                float gate = 0.0f, up = 0.0f;
                for (unsigned w = 0; w < warps; ++w) {
                    gate += half[w * R + threadIdx.x];
                    up += half[w * R + GLU_ROWS + threadIdx.x];
                }
                // Each product's output as T first, as the two products store them.
                gate = rf_to_float(rf_from_float<T>(gate));
                up = rf_to_float(rf_from_float<T>(up));
                T* y = reinterpret_cast<T*>(p.y[0]);
                y[(rf_u64)it.local * GLU_ROWS + threadIdx.x] = rf_from_float<T>(rf_silu_mul(gate, up));
            }
            parity ^= 1u;
            return;
        }
        const rf_u64 rows = rf_products_pick(p.rows, it.prod);
        if (threadIdx.x < (unsigned)R && (rf_u64)it.local * R + threadIdx.x < rows) {
            float sum = 0.0f;
            for (unsigned w = 0; w < warps; ++w) {
                sum += half[w * R + threadIdx.x];
            }
            T* y = reinterpret_cast<T*>(rf_products_pick(p.y, it.prod));
            y[(rf_u64)it.local * R + threadIdx.x] = rf_from_float<T>(sum);
        }
        parity ^= 1u;
    };

    rf_qmvm_q4k_item cur;
    cur.tile = blockIdx.x;
    cur.sb = (unsigned)warp;
    place(cur);
    rf_qmvm_q4k_item ld = cur;
    // Two register sets taken in turn: one item computed on while the next is in flight. The
    // first items' weights need nothing of the kernel ahead, so they are loaded before the wait;
    // x (the kernel ahead's output) after it.
    rf_qmvm_q4k_regs set[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (ld.tile < tiles) {
            load_w(ld, set[i]);
            advance(ld);
        }
    }
    rf_follow_prior_grid();
    if (cur.tile >= tiles) {
        return;
    }
    // x into shared memory, RF_QMVM_X_LOADS vectors a thread in flight at once: a loop of
    // one load and one store a turn waits a whole round trip a turn, behind the weights'
    // copies already queued (k / 1024 turns at 4 warps; ncu: a quarter of the loop's stall
    // samples at k = 4096).
    const unsigned xv = (unsigned)(k / 8);
    for (unsigned base = 0; base < xv; base += RF_QMVM_X_LOADS * blockDim.x) {
        uint4 v[RF_QMVM_X_LOADS];
#pragma unroll
        for (int u = 0; u < RF_QMVM_X_LOADS; ++u) {
            const unsigned i = base + u * blockDim.x + threadIdx.x;
            if (i < xv) {
                v[u] = reinterpret_cast<const uint4*>(x)[i];
            }
        }
#pragma unroll
        for (int u = 0; u < RF_QMVM_X_LOADS; ++u) {
            const unsigned i = base + u * blockDim.x + threadIdx.x;
            if (i < xv) {
                reinterpret_cast<uint4*>(xsm)[i] = v[u];
            }
        }
    }
    __syncthreads();
    // One item on its register set: compute it, refill the set with the next item to load, and
    // finish the tile after the warp's last super-block of it. False once the stream is done.
    auto step = [&](rf_qmvm_q4k_regs& r) -> bool {
        if (cur.tile >= tiles) {
            return false;
        }
        compute(r, cur.sb);
        if (ld.tile < tiles) {
            load_w(ld, r);
            advance(ld);
        }
        if (cur.sb + warps >= nsb) {
            finish_tile(cur);
        }
        advance(cur);
        return true;
    };
    while (true) {
        if (!step(set[0])) {
            break;
        }
        if (!step(set[1])) {
            break;
        }
    }
}

#define RF_QMVM_BODY(F, T, BC, STAGES) rf_qmvm<F, T, BC, STAGES>(p, x, k, batch);
#define RF_QMVM_ONE_BODY(T, GLU) \
    (void)batch;                 \
    rf_qmvm_q4k_b1<T, GLU>(p, x, k);
#else
// A host pass (no device code): the entries are declarations only.
#define RF_QMVM_BODY(F, T, BC, STAGES)
#define RF_QMVM_ONE_BODY(T, GLU) (void)batch;
#endif // RF_MMA_SYNC

// 4 warps, registers for 4 blocks an SM. One vector: F::STAGES_B1 stages (q8_0: 3, three
// blocks an SM by shared memory; q4_K: 2, four); passes of 8: RF_QMVM_STAGES_MANY stages of 8
// vectors of x each (two blocks an SM). Measured on an H200 (docs/kernels/quant_matvec.md,
// v3): q8_0 at 5 blocks of 2 stages (80 registers) and q4_K at 3 of 3 were slower.
#define RF_QMVM_ENTRY(fmt, F, BC, dt, T)                                                       \
    RF_KERNEL void __launch_bounds__(32 * RF_QMVM_WARPS, 4)                                     \
        rf_qmvm_##fmt##_b##BC##_##dt(rf_qmv_products p, const T* x, rf_u64 k, unsigned batch) { \
        RF_QMVM_BODY(F<T>, T, BC, BC == 1 ? F<T>::STAGES_B1 : RF_QMVM_STAGES_MANY)              \
    }
#define RF_QMVM_ENTRIES(fmt, F)                                                                \
    RF_QMVM_ENTRY(fmt, F, 1, f16, __half)                                                       \
    RF_QMVM_ENTRY(fmt, F, 8, f16, __half)                                                       \
    RF_QMVM_ENTRY(fmt, F, 1, bf16, rf_bf16)                                                     \
    RF_QMVM_ENTRY(fmt, F, 8, bf16, rf_bf16)
// q4_K at one vector: the columns loop above, RF_QMVM_ONE_BLOCKS_AN_SM blocks an SM of 4 warps
// (128 registers; docs/kernels/quant_matvec.md v10 measured 3, 5 and 6), or half as many of
// RF_QMVM_ONE_WARPS_MAX warps: the same register bound.
#define RF_QMVM_ONE_ENTRY(dt, T)                                                                  \
    RF_KERNEL void __launch_bounds__(32 * RF_QMVM_ONE_WARPS_MAX,                                   \
                                     RF_QMVM_ONE_BLOCKS_AN_SM * RF_QMVM_WARPS / RF_QMVM_ONE_WARPS_MAX) \
        rf_qmvm_q4_k_b1_##dt(rf_qmv_products p, const T* x, rf_u64 k, unsigned batch) {            \
        RF_QMVM_ONE_BODY(T, false)                                                                 \
    }                                                                                              \
    RF_KERNEL void __launch_bounds__(32 * RF_QMVM_ONE_WARPS_MAX,                                   \
                                     RF_QMVM_ONE_BLOCKS_AN_SM * RF_QMVM_WARPS / RF_QMVM_ONE_WARPS_MAX) \
        rf_qmvm_q4_k_b1_glu_##dt(rf_qmv_products p, const T* x, rf_u64 k, unsigned batch) {        \
        RF_QMVM_ONE_BODY(T, true)                                                                  \
    }
RF_QMVM_ONE_ENTRY(f16, __half)
RF_QMVM_ONE_ENTRY(bf16, rf_bf16)
RF_QMVM_ENTRY(q4_k, rf_qmvm_q4_k, 8, f16, __half)
RF_QMVM_ENTRY(q4_k, rf_qmvm_q4_k, 8, bf16, rf_bf16)
RF_QMVM_ENTRIES(q5_k, rf_qmvm_q5_k)
RF_QMVM_ENTRIES(q8_0, rf_qmvm_q8_0)
RF_QMVM_ENTRIES(q4_0, rf_qmvm_q4_0)
RF_QMVM_ENTRIES(q6_k, rf_qmvm_q6_k)
// MXFP4 at one vector runs mxfp.hip's product lists, which measured faster (docs/kernels/mxfp.md,
// "Several vectors"): passes of 8 only.
RF_QMVM_ENTRY(mxfp4, rf_qmvm_mxfp4, 8, f16, __half)
RF_QMVM_ENTRY(mxfp4, rf_qmvm_mxfp4, 8, bf16, rf_bf16)
