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
#include "rocmforge_qmvm_formats.h"

#if !RF_MMA_SYNC && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "quant_matvec_mma.hip is built for NVIDIA sm_80 and later only (xtask kernels' target list)"
#endif

#if RF_MMA_SYNC

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------

// A warp's place in its block's work: product, tile of the product, pass, chunk. prod ==
// RF_QMV_MAX_PRODUCTS: no work left.
struct rf_qmvm_cursor {
    int prod;
    unsigned tile;
    unsigned pass;
    unsigned c;
};

template <typename F, typename T, int BC, int STAGES>
RF_DEVICE void rf_qmvm(const rf_qmv_products& p, const T* x, rf_u64 k, unsigned batch) {
    constexpr int R = RF_QMVM_ROWS;
    constexpr int ROW = F::ROW;    // bytes of a row's chunk
    constexpr int SPAN = F::SPAN;  // bytes staged for them: ROW, or (q6_K) the 16-byte span around them
    constexpr int VECS = SPAN / 16; // 16-byte copies a row's chunk
    constexpr int WBYTES = R * SPAN;
    constexpr bool SPANNED = SPAN != ROW;
    typedef rf_qmvm_x<F::CHUNK, BC> X;
    constexpr int STAGE = WBYTES + X::BYTES;
    constexpr int COPIES = (R * VECS + 31) / 32;
    static_assert(SPAN % 16 == 0 && (SPANNED || ROW % 16 == 0), "a row's chunk is staged as whole 16-byte vectors");
    extern __shared__ __align__(16) unsigned char rf_qmvm_smem[];
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int warps = (int)blockDim.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    unsigned char* stages = rf_qmvm_smem + warp * STAGES * STAGE;
    float* totals = reinterpret_cast<float*>(rf_qmvm_smem + warps * STAGES * STAGE);
    const unsigned chunks = (unsigned)(k / F::CHUNK);
    const unsigned row_bytes = chunks * ROW;
    // Lane's weight copies: copy j is vector i = lane + 32 j of the stage, row i / VECS.
    unsigned src_off[COPIES];
#pragma unroll
    for (int j = 0; j < COPIES; ++j) {
        const int i = lane + 32 * j;
        src_off[j] = (unsigned)(i / VECS) * row_bytes + 16u * (unsigned)(i % VECS);
    }
    auto tiles_of = [&](int prod) -> unsigned { return (unsigned)((rf_products_pick(p.rows, prod) + R - 1) / R); };
    // The block's work, the same sequence for every warp: its tiles (blockIdx.x, then every
    // gridDim.x-th, counted across the products one after another), each in passes of BC
    // vectors; warp w takes chunks w, w + warps, ... of each (the launcher gives every warp at
    // least one). The launcher keeps the tiles of all products and the grid below 2^31, so
    // `tile` cannot wrap.
    auto settle = [&](rf_qmvm_cursor& cur) {
        while (cur.prod < RF_QMV_MAX_PRODUCTS && cur.tile >= tiles_of(cur.prod)) {
            cur.tile -= tiles_of(cur.prod);
            ++cur.prod;
        }
    };
    auto advance = [&](rf_qmvm_cursor& cur) {
        cur.c += (unsigned)warps;
        if (cur.c < chunks) {
            return;
        }
        cur.c = (unsigned)warp;
        cur.pass += BC;
        if (cur.pass < batch) {
            return;
        }
        cur.pass = 0;
        cur.tile += gridDim.x;
        settle(cur);
    };
    auto rows_of = [&](const rf_qmvm_cursor& cur) -> int {
        const rf_u64 left = rf_products_pick(p.rows, cur.prod) - (rf_u64)cur.tile * R;
        return left < (rf_u64)R ? (int)left : R;
    };
    auto vectors_of = [&](const rf_qmvm_cursor& cur) -> int {
        return batch - cur.pass < (unsigned)BC ? (int)(batch - cur.pass) : BC;
    };
    // The cursor's chunk of its tile's rows -> stage s, and of x (stage_x); rows and vectors
    // past the ends are zero-filled (nothing read).
    // A spanned chunk is copied from the 16-byte boundary below it (rows are 16-byte aligned),
    // its span's vectors past the row's end zero-filled (nothing read).
    auto stage_w = [&](const rf_qmvm_cursor& cur, int s) {
        unsigned char* dst = stages + s * STAGE;
        const int rows = rows_of(cur);
        const unsigned start = SPANNED ? cur.c * (unsigned)ROW & ~15u : cur.c * (unsigned)ROW;
        const unsigned char* src = rf_products_pick(p.w, cur.prod) + ((rf_u64)cur.tile * R) * row_bytes + start;
#pragma unroll
        for (int j = 0; j < COPIES; ++j) {
            const int i = lane + 32 * j;
            if (R * VECS % 32 == 0 || i < R * VECS) {
                const bool ok = i < rows * VECS && (!SPANNED || start + 16u * (unsigned)(i % VECS) < row_bytes);
                rf_cp_async16(dst + 16 * i, ok ? src + src_off[j] : src, ok ? 16 : 0);
            }
        }
    };
    auto stage_x = [&](const rf_qmvm_cursor& cur, int s) {
        unsigned char* dst = stages + s * STAGE;
        const int nvec = vectors_of(cur);
        constexpr int XV = 2 * F::CHUNK / 16; // 16-byte vectors of one vector's chunk
        const T* xp = x + (rf_u64)cur.pass * k + (rf_u64)cur.c * F::CHUNK;
#pragma unroll
        for (int i0 = 0; i0 < BC * XV; i0 += 32) {
            const int i = i0 + lane;
            const int v = i / XV;
            const int e = i - v * XV;
            if (BC * XV % 32 == 0 || i < BC * XV) {
                const unsigned char* xs = reinterpret_cast<const unsigned char*>(xp + (rf_u64)(v < nvec ? v : 0) * k);
                rf_cp_async16(dst + WBYTES + v * X::STRIDE + 16 * e, xs + 16 * e, v < nvec ? 16 : 0);
            }
        }
    };
    auto stage_in = [&](const rf_qmvm_cursor& cur, int s) {
        stage_w(cur, s);
        stage_x(cur, s);
    };

    rf_qmvm_cursor cur = {0, blockIdx.x, 0, (unsigned)warp};
    settle(cur);
    // STAGES - 1 chunks in flight while one is computed on, across tiles, passes and products:
    // the pipeline does not drain at a tile's end. The first chunks' weights need nothing of the
    // kernel ahead (a dependent launch: rocmforge_dependent_launch.h), so their copies start
    // before the wait for it; x's copies, and every write, come after. The weights join the
    // first stage's group of copies, which the first wait below needs anyway.
    rf_qmvm_cursor load = cur;
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        if (load.prod < RF_QMV_MAX_PRODUCTS) {
            stage_w(load, i);
            advance(load);
        }
    }
    rf_follow_prior_grid();
    load = cur;
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        if (load.prod < RF_QMV_MAX_PRODUCTS) {
            stage_x(load, i);
            advance(load);
        }
        rf_cp_async_commit();
    }
    int s = 0;
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    while (cur.prod < RF_QMV_MAX_PRODUCTS) {
        if (load.prod < RF_QMV_MAX_PRODUCTS) {
            stage_in(load, s == 0 ? STAGES - 1 : s - 1); // the stage computed on last
            advance(load);
        }
        rf_cp_async_commit();
        rf_cp_async_wait<STAGES - 1>(); // cur's chunk has landed (this lane's copies) ...
        __syncwarp();                   // ... and every lane's
        const unsigned char* st = stages + s * STAGE;
        const T* xv = reinterpret_cast<const T*>(st + WBYTES + (BC == 1 ? 0 : g * X::STRIDE));
        const int at = SPANNED ? (int)(cur.c * (unsigned)ROW & 15u) : 0; // the chunk's offset in its span
        F::template chunk<BC, 0>(st + g * SPAN + at, st + (g + 8) * SPAN + at, xv, t, acc);
        __syncwarp(); // every lane is done with stage s before it is refilled
        s = s + 1 == STAGES ? 0 : s + 1;
        if (cur.c + (unsigned)warps >= chunks) {
            // The warp's last chunk of this tile and pass: totals [warp][row][vector], added in
            // warp order.
            float* mine = totals + warp * R * BC;
            if (BC == 1) {
                if (t == 0) {
                    mine[g] = acc[0][0];
                    mine[g + 8] = acc[0][2];
                }
            } else {
                mine[g * BC + 2 * t] = acc[0][0];
                mine[g * BC + 2 * t + 1] = acc[0][1];
                mine[(g + 8) * BC + 2 * t] = acc[0][2];
                mine[(g + 8) * BC + 2 * t + 1] = acc[0][3];
            }
            acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = 0.0f;
            __syncthreads();
            const int rows = rows_of(cur);
            const int nvec = vectors_of(cur);
            const rf_u64 nrows = rf_products_pick(p.rows, cur.prod);
            T* y = reinterpret_cast<T*>(rf_products_pick(p.y, cur.prod)) + (rf_u64)cur.pass * nrows + (rf_u64)cur.tile * R;
            for (int i = (int)threadIdx.x; i < R * BC; i += (int)blockDim.x) {
                const int r = i / BC;
                const int v = i - r * BC;
                if (r < rows && v < nvec) {
                    float sum = 0.0f;
                    for (int w = 0; w < warps; ++w) {
                        sum += totals[w * R * BC + i];
                    }
                    y[(rf_u64)v * nrows + r] = rf_from_float<T>(sum);
                }
            }
            __syncthreads(); // the totals are read before the next tile or pass writes them
        }
        advance(cur);
    }
    rf_cp_async_wait<0>();
}

#define RF_QMVM_BODY(F, T, BC, STAGES) rf_qmvm<F, T, BC, STAGES>(p, x, k, batch);
#else
// A host pass (no device code): the entries are declarations only.
#define RF_QMVM_BODY(F, T, BC, STAGES)
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
RF_QMVM_ENTRIES(q4_k, rf_qmvm_q4_k)
RF_QMVM_ENTRIES(q5_k, rf_qmvm_q5_k)
RF_QMVM_ENTRIES(q8_0, rf_qmvm_q8_0)
RF_QMVM_ENTRIES(q4_0, rf_qmvm_q4_0)
RF_QMVM_ENTRIES(q6_k, rf_qmvm_q6_k)
// MXFP4 at one vector runs mxfp.hip's product lists, which measured faster (docs/kernels/mxfp.md,
// "Several vectors"): passes of 8 only.
RF_QMVM_ENTRY(mxfp4, rf_qmvm_mxfp4, 8, f16, __half)
RF_QMVM_ENTRY(mxfp4, rf_qmvm_mxfp4, 8, bf16, rf_bf16)
