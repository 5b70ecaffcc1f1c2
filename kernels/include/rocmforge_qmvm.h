// rocmforge_qmvm.h: the matrix-core loop of the fused quantised matrix-vector products
// (rf_qmvm), shared by kernels/quant_matvec_mma.hip (its rf_qmvm_<fmt>_b<BC>_<dt> entries, where
// the contract, the work split and the formats are described) and kernels/persistent_mlp.hip
// (which runs it for its products inside one cooperative launch). NVIDIA sm_80 and later
// (RF_MMA_SYNC) only.
//
// `place` says which threads run the loop and where (rf_qmvm_block: a launch's block, as the
// quant_matvec_mma.hip entries run it), and what they wait for once a warp's first weight copies
// are issued and before it stages any x or writes anything: in a launch of its own the kernel
// ahead, in a persistent kernel whatever must come first (its own norm, a grid barrier), so the
// first weights are already in flight meanwhile.

#ifndef ROCMFORGE_QMVM_H
#define ROCMFORGE_QMVM_H

#include "rocmforge_dependent_launch.h"
#include "rocmforge_products.h"
#include "rocmforge_qmvm_formats.h"

#if RF_MMA_SYNC

// Where a run of the loop sits (this default: a whole launch block). thread, threads: the
// run's threads, numbered from 0; first_warp, warps: its warps within the block; index, count:
// its place among the runs that share the products' tiles (tiles index, index + count, ...);
// shared_offset: where its part of the block's dynamic shared memory starts; sync: a barrier
// of its threads alone; wait: what comes once each warp's first weight copies are issued (by
// default the kernel ahead: rocmforge_dependent_launch.h). CLAIMS: the run's tiles after its
// first (index) are claim(1), claim(2), ... (each warp asks for every position; counted across
// the products as index is) instead of index + count, index + 2 count, ... X_IN_PLACE (one
// vector): x is in shared memory already and the loop reads its chunks there instead of
// staging them. A persistent kernel runs several groups of warps of one block this way
// (persistent_mlp.hip). Written so that the default gives quant_matvec_mma.hip's entries the
// machine code they had before it existed.
struct rf_qmvm_block {
    static constexpr bool CLAIMS = false;
    static constexpr bool X_IN_PLACE = false;
    RF_DEVICE int thread() const { return (int)threadIdx.x; }
    RF_DEVICE int threads() const { return (int)blockDim.x; }
    RF_DEVICE int first_warp() const { return 0; }
    RF_DEVICE int warps() const { return (int)blockDim.x >> 5; }
    RF_DEVICE unsigned index() const { return blockIdx.x; }
    RF_DEVICE unsigned count() const { return gridDim.x; }
    RF_DEVICE unsigned shared_offset() const { return 0; }
    RF_DEVICE void sync() const { __syncthreads(); }
    RF_DEVICE void wait() const { rf_follow_prior_grid(); }
};

// A warp's place in its block's work: product, tile of the product, pass, chunk. prod ==
// RF_QMV_MAX_PRODUCTS: no work left.
struct rf_qmvm_cursor {
    int prod;
    unsigned tile;
    unsigned pass;
    unsigned c;
    unsigned n; // tiles the cursor has moved on (a claiming place's position)
};

// The dynamic shared memory rf_qmvm<F, T, BC, STAGES> takes for WARPS warps: each warp's stages
// (a tile's rows of a chunk and the chunk of x), then the tile's totals.
template <typename F, int BC, int STAGES, int WARPS> struct rf_qmvm_shared {
    static constexpr unsigned BYTES =
        (unsigned)(WARPS * STAGES * (RF_QMVM_ROWS * F::SPAN + rf_qmvm_x<F::CHUNK, BC>::BYTES) +
                   WARPS * RF_QMVM_ROWS * BC * 4);
};

template <typename F, typename T, int BC, int STAGES, typename Place = rf_qmvm_block>
RF_DEVICE void rf_qmvm(const rf_qmv_products& p, const T* x, rf_u64 k, unsigned batch, Place place = Place()) {
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
    static_assert(!Place::X_IN_PLACE || BC == 1, "x is read in place for one vector only");
    extern __shared__ __align__(16) unsigned char rf_qmvm_smem[];
    unsigned char* smem = rf_qmvm_smem + place.shared_offset();
    const int lane = (int)threadIdx.x & 31;
    const int warp = ((int)threadIdx.x >> 5) - place.first_warp();
    const int warps = place.warps();
    const int g = lane >> 2;
    const int t = lane & 3;
    unsigned char* stages = smem + warp * STAGES * STAGE;
    float* totals = reinterpret_cast<float*>(smem + warps * STAGES * STAGE);
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
    // The block's work, the same sequence for every warp: its tiles (place.index(), then every
    // place.count()-th, counted across the products one after another), each in passes of BC
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
        if constexpr (Place::CLAIMS) {
            cur.tile = place.claim(++cur.n);
            cur.prod = 0;
        } else {
            cur.tile += place.count();
        }
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
    const rf_l2_policy stream = rf_l2_evict_first(); // the weights: rocmforge_mma.h
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
                rf_cp_async16_policy(dst + 16 * i, ok ? src + src_off[j] : src, ok ? 16 : 0, stream);
            }
        }
    };
    auto stage_x = [&](const rf_qmvm_cursor& cur, int s) {
        if constexpr (Place::X_IN_PLACE) {
            return; // read where it is
        }
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

    rf_qmvm_cursor cur = {0, place.index(), 0, (unsigned)warp, 0};
    settle(cur);
    // STAGES - 1 chunks in flight while one is computed on, across tiles, passes and products:
    // the pipeline does not drain at a tile's end. The first chunks' weights need nothing of the
    // kernel ahead (a dependent launch: rocmforge_dependent_launch.h), so their copies start
    // before the wait for it (`wait`: by default the wait for the kernel ahead); x's copies,
    // and every write, come after. The weights join the
    // first stage's group of copies, which the first wait below needs anyway.
    rf_qmvm_cursor load = cur;
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        if (load.prod < RF_QMV_MAX_PRODUCTS) {
            stage_w(load, i);
            advance(load);
        }
    }
    place.wait();
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
        const T* xv = Place::X_IN_PLACE ? x + (rf_u64)cur.pass * k + (rf_u64)cur.c * F::CHUNK
                                        : reinterpret_cast<const T*>(st + WBYTES + (BC == 1 ? 0 : g * X::STRIDE));
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
            place.sync();
            const int rows = rows_of(cur);
            const int nvec = vectors_of(cur);
            const rf_u64 nrows = rf_products_pick(p.rows, cur.prod);
            T* y = reinterpret_cast<T*>(rf_products_pick(p.y, cur.prod)) + (rf_u64)cur.pass * nrows + (rf_u64)cur.tile * R;
            for (int i = place.thread(); i < R * BC; i += place.threads()) {
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
            place.sync(); // the totals are read before the next tile or pass writes them
        }
        advance(cur);
    }
    rf_cp_async_wait<0>();
}

#endif // RF_MMA_SYNC

#endif // ROCMFORGE_QMVM_H
