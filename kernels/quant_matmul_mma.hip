// Fused products of ggml block weights (and MXFP4) with up to 32 activation vectors at a time, on
// NVIDIA matrix cores (sm_80 and later: mma.sync.m16n8k16, cp.async): quant_matvec.hip's
// contract for the batches of a decode step past 8 sequences and short prefill chunks, where
// quant_matvec_mma.hip's passes of 8 vectors would read the weight once a pass. Same arguments,
// same results up to the order of f32 sums; the launcher (quant/matvec.rs) takes this module for
// batches above 8 wherever it takes quant_matvec_mma.hip:
//
//   rf_qmmm_<fmt>_b32_<dt>(products, x, k, batch):  y[b][r] = sum_c W[r][c] x[b][c]
//   rf_qmmm_<fmt>_b32_split_<dt>(products, x, k, batch, split):  the same, k split (below)
//
// Why another kernel. quant_matvec_mma.hip gives a 16-row tile to a block whose warps split k;
// each warp stages its own chunk of x. At 32 vectors that x would be 32 KiB a warp's stage
// (q4_K), and every 16-row tile would read all of x from the L2: 256 KiB a tile at k = 4096, 470
// MB for a layer's gate and up projections against their 66 MB of q4_K weights. Here a block
// owns RF_QMMM_ROWS = 64 rows, one 16-row tile a warp, and its warps walk the chunks of k
// together over one staged x that they share: x crosses the L2 once per 64 rows, and each
// decoded weight fragment feeds four mma (the 32 vectors as four n-tiles of 8) instead of one.
//
// Work. Row blocks of all products are numbered one product after another; block b takes row
// blocks b, b + gridDim.x, ..., each in passes of 32 vectors (vectors past the batch are
// zero-filled and not stored), each pass chunk by chunk (F::CHUNK elements of k). A stage holds
// the chunk of the block's 64 rows (warp w copies its own 16 rows with cp.async) and of the
// pass's x (every thread copies its share); RF_QMMM_STAGES - 1 chunks are in flight while the
// block computes on one, across row blocks, passes and products, with one barrier a chunk.
// Rows past a product's end are zero-filled and not stored. Every warp keeps its 16 rows x 32
// vectors of f32 totals in registers and stores them at the pass's last chunk: no reduction
// across warps.
//
// The k split (rf_qmmm_split, rocmforge_quant_matvec_abi.h). A layer's O and down products have
// 64 row blocks, against 132 SMs on an H100 (two blocks an SM): half the device would idle. The
// launcher may cut each row block of such a product along k into parts, each a unit of work
// numbered where the row block was (row block r's parts are units r splits .. r splits +
// splits - 1). A part stores its totals in f32 to its place in `partial`, and the last of a row
// block's parts to arrive adds the parts in order 0, 1, ... (so the bits do not depend on which
// arrives last) and stores y. The launcher picks one split for all products of a launch, from
// their rows together (quant/k_split.rs).
//
// The formats (fragments, the codes' exact values, the scales): rocmforge_qmvm_formats.h, whose
// chunk<32, XT> decodes each weight once for all four n-tiles.
//
// Entry: each product's rows >= 1 (0: unused), their units together below 2^31, k %
// F::CHUNK == 0 with rows of whole 16-byte vectors, k > 0, batch >= 1; blockDim.x = 32 *
// RF_QMMM_WARPS; dynamic shared memory RF_QMMM_STAGES * (RF_QMMM_ROWS * F::SPAN + 32 * (2 CHUNK
// + 64)) bytes; every w, y and x 16-byte aligned; 16 * row bytes < 2^32; each splits[i] from
// 1 to min(k / F::CHUNK, RF_QMMM_MAX_SPLITS) (the _split entries), and where any is above 1,
// batch <= 32, `partial` room for every unit's
// 32 x 64 f32 totals and `arrivals` a zeroed counter for every row block of a split product.
// The launcher checks all of it.

#include "rocmforge_dependent_launch.h"
#include "rocmforge_products.h"
#include "rocmforge_qmvm_formats.h"

#if !RF_MMA_SYNC && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "quant_matmul_mma.hip is built for NVIDIA sm_80 and later only (xtask kernels' target list)"
#endif

#if RF_MMA_SYNC

// A block's place in its work (every thread holds the same): product, unit of the product and
// its row block (block / splits: kept, so that no chunk divides), pass, chunk, and the end of
// the unit's chunks. prod == RF_QMV_MAX_PRODUCTS: no work left.
struct rf_qmmm_cursor {
    int prod;
    unsigned block;
    unsigned row_block;
    unsigned pass;
    unsigned c;
    unsigned end;
};

// The end of a unit's pass with split k: its totals to `partial`; the last part of the row
// block to arrive adds all of its parts and stores them (every thread of the block calls it).
// mine: the unit's place in `partial`; first: its part 0's; arrival: the row block's counter;
// out(v, r, total): stores row r (of the block's 64) of vector v.
template <typename Out>
RF_DEVICE void rf_qmmm_join(rf_qmvm_acc<RF_QMMM_BATCH>& acc, float* mine, const float* first, unsigned* arrival,
                            unsigned splits, Out out) {
    constexpr int BR = RF_QMMM_ROWS;
    constexpr int PART = RF_QMMM_BATCH * BR;
    __shared__ int rf_qmmm_last;
    const int lane = (int)threadIdx.x & 31;
    const int row0 = ((int)threadIdx.x >> 5) * RF_QMVM_ROWS + (lane >> 2);
    const int vec0 = 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < rf_qmvm_tiles<RF_QMMM_BATCH>::N; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            mine[(8 * n + vec0 + (e & 1)) * BR + row0 + 8 * (e >> 1)] = acc[n][e];
            acc[n][e] = 0.0f;
        }
    }
    // Release: the totals reach the device before the arrival is counted.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        rf_qmmm_last = atomicAdd(arrival, 1u) == splits - 1;
    }
    __syncthreads();
    if (!rf_qmmm_last) {
        return;
    }
    // Acquire: every part's totals are visible; read them past the (incoherent) L1, all of a
    // total's parts loaded before its sum (in order 0, 1, ...) needs them.
    __threadfence();
#pragma unroll
    for (int n = 0; n < rf_qmvm_tiles<RF_QMMM_BATCH>::N; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int v = 8 * n + vec0 + (e & 1);
            const int r = row0 + 8 * (e >> 1);
            float part[RF_QMMM_MAX_SPLITS];
#pragma unroll
            for (int s = 0; s < RF_QMMM_MAX_SPLITS; ++s) {
                part[s] = s < (int)splits ? __ldcg(first + s * PART + v * BR + r) : 0.0f;
            }
            float total = part[0];
#pragma unroll
            for (int s = 1; s < RF_QMMM_MAX_SPLITS; ++s) {
                if (s < (int)splits) {
                    total += part[s];
                }
            }
            out(v, r, total);
        }
    }
    if (threadIdx.x == 0) {
        *arrival = 0u;
    }
}

// SPLIT: the _split entries (one pass, each product's units its row blocks' parts); else the
// plain entries (units are row blocks, passes of 32), whose code the split leaves as it was.
template <typename F, typename T, bool SPLIT>
RF_DEVICE void rf_qmmm(const rf_qmv_products& p, const T* x, rf_u64 k, unsigned batch, const rf_qmmm_split& split) {
    constexpr int BC = RF_QMMM_BATCH;
    constexpr int R = RF_QMVM_ROWS;            // rows a warp
    constexpr int BR = RF_QMMM_ROWS;           // rows a block
    constexpr int STAGES = RF_QMMM_STAGES;
    constexpr int ROW = F::ROW;                // bytes of a row's chunk
    constexpr int SPAN = F::SPAN;              // bytes staged for them (q6_K: the 16-byte span around them)
    constexpr int VECS = SPAN / 16;            // 16-byte copies a row's chunk
    constexpr bool SPANNED = SPAN != ROW;
    constexpr int WBYTES = BR * SPAN;          // the block's rows of a stage
    typedef rf_qmvm_x<F::CHUNK, BC> X;         // x's layout in a stage (quant_matvec_mma.hip's)
    constexpr int XV = 2 * F::CHUNK / 16;      // 16-byte copies of one vector's chunk
    constexpr int STAGE = WBYTES + X::BYTES;
    constexpr int COPIES = (R * VECS + 31) / 32;
    constexpr int THREADS = 32 * RF_QMMM_WARPS;
    static_assert(SPAN % 16 == 0 && (SPANNED || ROW % 16 == 0), "a row's chunk is staged as whole 16-byte vectors");
    static_assert(BR == R * RF_QMMM_WARPS && BC == 8 * rf_qmvm_tiles<BC>::N, "block shape");
    static_assert(BC * XV % THREADS == 0, "x's copies split evenly over the threads");
    extern __shared__ __align__(16) unsigned char rf_qmmm_smem[];
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const unsigned chunks = (unsigned)(k / F::CHUNK);
    const unsigned row_bytes = chunks * ROW;
    // Lane's weight copies: copy j is vector i = lane + 32 j of the warp's rows, row i / VECS.
    unsigned src_off[COPIES];
#pragma unroll
    for (int j = 0; j < COPIES; ++j) {
        const int i = lane + 32 * j;
        src_off[j] = (unsigned)(i / VECS) * row_bytes + 16u * (unsigned)(i % VECS);
    }
    auto splits_of = [&](int prod) -> unsigned { return SPLIT ? rf_products_pick(split.splits, prod) : 1u; };
    auto blocks_of = [&](int prod) -> unsigned { return (unsigned)((rf_products_pick(p.rows, prod) + BR - 1) / BR); };
    // The first chunk of part `part` of a row cut into `splits` (part * chunks < 2^32: the
    // launcher's bounds).
    auto part_start = [&](unsigned part, unsigned splits) -> unsigned { return part * chunks / splits; };
    // The cursor's unit moved past the products it has left (split: its row block, its chunks).
    auto settle = [&](rf_qmmm_cursor& cur) {
        while (cur.prod < RF_QMV_MAX_PRODUCTS && cur.block >= blocks_of(cur.prod) * splits_of(cur.prod)) {
            cur.block -= blocks_of(cur.prod) * splits_of(cur.prod);
            ++cur.prod;
        }
        if (SPLIT && cur.prod < RF_QMV_MAX_PRODUCTS) {
            const unsigned splits = splits_of(cur.prod);
            cur.row_block = cur.block / splits;
            const unsigned part = cur.block - cur.row_block * splits;
            cur.c = part_start(part, splits);
            cur.end = part_start(part + 1, splits);
        }
    };
    auto advance = [&](rf_qmmm_cursor& cur) {
        if constexpr (SPLIT) {
            // One pass: the unit's last chunk leads to the block's next unit.
            if (++cur.c < cur.end) {
                return;
            }
        } else {
            if (++cur.c < chunks) {
                return;
            }
            cur.c = 0;
            cur.pass += BC;
            if (cur.pass < batch) {
                return;
            }
            cur.pass = 0;
        }
        cur.block += gridDim.x;
        settle(cur);
    };
    // The warp's rows of the cursor's row block: its first row and how many (<= 0: none).
    auto first_row = [&](const rf_qmmm_cursor& cur) -> rf_u64 {
        return (rf_u64)(SPLIT ? cur.row_block : cur.block) * BR + (rf_u64)warp * R;
    };
    auto rows_of = [&](const rf_qmmm_cursor& cur) -> int {
        const rf_u64 n = rf_products_pick(p.rows, cur.prod), r0 = first_row(cur);
        return r0 >= n ? 0 : (n - r0 < (rf_u64)R ? (int)(n - r0) : R);
    };
    auto vectors_of = [&](const rf_qmmm_cursor& cur) -> int {
        return batch - cur.pass < (unsigned)BC ? (int)(batch - cur.pass) : BC;
    };
    // The warp's rows of the cursor's chunk -> stage s (rows past the end zero-filled, nothing
    // read; a spanned chunk from the 16-byte boundary below it, its vectors past the row's end
    // zero-filled).
    const rf_l2_policy stream = rf_l2_evict_first(); // the weights: rocmforge_mma.h
    auto stage_w = [&](const rf_qmmm_cursor& cur, int s) {
        unsigned char* dst = rf_qmmm_smem + s * STAGE + warp * R * SPAN;
        const int rows = rows_of(cur);
        const unsigned start = SPANNED ? cur.c * (unsigned)ROW & ~15u : cur.c * (unsigned)ROW;
        const unsigned char* w = rf_products_pick(p.w, cur.prod);
        const unsigned char* src = w + (rows > 0 ? first_row(cur) * row_bytes + start : 0);
#pragma unroll
        for (int j = 0; j < COPIES; ++j) {
            const int i = lane + 32 * j;
            if (R * VECS % 32 == 0 || i < R * VECS) {
                const bool ok = i < rows * VECS && (!SPANNED || start + 16u * (unsigned)(i % VECS) < row_bytes);
                rf_cp_async16_policy(dst + 16 * i, ok ? src + src_off[j] : w, ok ? 16 : 0, stream);
            }
        }
    };
    // The pass's vectors of the cursor's chunk -> stage s, X::STRIDE bytes apart, by every thread.
    auto stage_x = [&](const rf_qmmm_cursor& cur, int s) {
        unsigned char* dst = rf_qmmm_smem + s * STAGE + WBYTES;
        const int nvec = vectors_of(cur);
        const T* xp = x + (rf_u64)cur.pass * k + (rf_u64)cur.c * F::CHUNK;
#pragma unroll
        for (int i0 = 0; i0 < BC * XV; i0 += THREADS) {
            const int i = i0 + (int)threadIdx.x;
            const int v = i / XV;
            const int e = i - v * XV;
            const unsigned char* xs = reinterpret_cast<const unsigned char*>(xp + (rf_u64)(v < nvec ? v : 0) * k);
            rf_cp_async16(dst + v * X::STRIDE + 16 * e, xs + 16 * e, v < nvec ? 16 : 0);
        }
    };

    rf_qmmm_cursor cur = {0, blockIdx.x, 0, 0, 0, 0};
    settle(cur);
    // The first chunks' weights need nothing of the kernel ahead (a dependent launch), so their
    // copies start before the wait for it; x's copies, and every write, come after. The weights
    // join the first stage's group of copies.
    rf_qmmm_cursor load = cur;
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
    rf_qmvm_acc<BC> acc;
#pragma unroll
    for (int n = 0; n < rf_qmvm_tiles<BC>::N; ++n) {
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    }
    while (cur.prod < RF_QMV_MAX_PRODUCTS) {
        // cur's chunk has landed (this thread's copies, then everyone's); every warp is done
        // with the stage computed on last, which the next copies refill.
        rf_cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (load.prod < RF_QMV_MAX_PRODUCTS) {
            const int refill = s == 0 ? STAGES - 1 : s - 1;
            stage_w(load, refill);
            stage_x(load, refill);
            advance(load);
        }
        rf_cp_async_commit();
        const unsigned char* st = rf_qmmm_smem + s * STAGE;
        const unsigned char* rw = st + warp * R * SPAN;
        const T* xv = reinterpret_cast<const T*>(st + WBYTES + g * X::STRIDE);
        const int at = SPANNED ? (int)(cur.c * (unsigned)ROW & 15u) : 0; // the chunk's offset in its span
        F::template chunk<BC, X::TILE>(rw + g * SPAN + at, rw + (g + 8) * SPAN + at, xv, t, acc);
        s = s + 1 == STAGES ? 0 : s + 1;
        if (cur.c + 1 == (SPLIT ? cur.end : chunks)) {
            // The unit's pass's last chunk: the warp's rows g, g + 8 x vectors 8 n + 2 t, + 1.
            const int nvec = vectors_of(cur);
            const rf_u64 nrows = rf_products_pick(p.rows, cur.prod);
            const unsigned splits = splits_of(cur.prod);
            if (!SPLIT || splits == 1) {
                const int rows = rows_of(cur);
                T* y = reinterpret_cast<T*>(rf_products_pick(p.y, cur.prod)) + (rf_u64)cur.pass * nrows +
                       first_row(cur);
#pragma unroll
                for (int n = 0; n < rf_qmvm_tiles<BC>::N; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = g + 8 * (e >> 1);
                        const int v = 8 * n + 2 * t + (e & 1);
                        if (r < rows && v < nvec) {
                            y[(rf_u64)v * nrows + r] = rf_from_float<T>(acc[n][e]);
                        }
                        acc[n][e] = 0.0f;
                    }
                }
            } else {
                // Units and row blocks of the split products before this one (one pass: cur.pass 0).
                unsigned units = 0, counters = 0;
                for (int i = 0; i < cur.prod; ++i) {
                    if (splits_of(i) > 1) {
                        units += blocks_of(i) * splits_of(i);
                        counters += blocks_of(i);
                    }
                }
                const unsigned row_block = cur.row_block;
                const rf_u64 r0 = (rf_u64)row_block * BR;
                T* y = reinterpret_cast<T*>(rf_products_pick(p.y, cur.prod)) + r0;
                const int rows = nrows - r0 < (rf_u64)BR ? (int)(nrows - r0) : BR;
                constexpr int PART = BC * BR;
                rf_qmmm_join(acc, split.partial + (rf_u64)(units + cur.block) * PART,
                             split.partial + (rf_u64)(units + row_block * splits) * PART,
                             split.arrivals + counters + row_block, splits, [&](int v, int r, float total) {
                                 if (r < rows && v < nvec) {
                                     y[(rf_u64)v * nrows + r] = rf_from_float<T>(total);
                                 }
                             });
            }
        }
        advance(cur);
    }
    rf_cp_async_wait<0>();
}

#define RF_QMMM_BODY(F, T) rf_qmmm<F, T, false>(p, x, k, batch, rf_qmmm_split{});
#define RF_QMMM_SPLIT_BODY(F, T) rf_qmmm<F, T, true>(p, x, k, batch, split);
#else
// A host pass (no device code): the entries are declarations only.
#define RF_QMMM_BODY(F, T)
#define RF_QMMM_SPLIT_BODY(F, T)
#endif // RF_MMA_SYNC

// RF_QMMM_WARPS warps, registers for two blocks an SM (shared memory allows one to three).
// rf_qmmm_<fmt>_b32_split_<dt>: the same with the k split (one pass).
#define RF_QMMM_ENTRY(fmt, F, dt, T)                                                            \
    RF_KERNEL void __launch_bounds__(32 * RF_QMMM_WARPS, 2)                                     \
        rf_qmmm_##fmt##_b32_##dt(rf_qmv_products p, const T* x, rf_u64 k, unsigned batch) {     \
        RF_QMMM_BODY(F<T>, T)                                                                  \
    }                                                                                          \
    RF_KERNEL void __launch_bounds__(32 * RF_QMMM_WARPS, 2) rf_qmmm_##fmt##_b32_split_##dt(    \
        rf_qmv_products p, const T* x, rf_u64 k, unsigned batch, rf_qmmm_split split) {         \
        RF_QMMM_SPLIT_BODY(F<T>, T)                                                            \
    }
#define RF_QMMM_ENTRIES(fmt, F)                                                                \
    RF_QMMM_ENTRY(fmt, F, f16, __half)                                                          \
    RF_QMMM_ENTRY(fmt, F, bf16, rf_bf16)
RF_QMMM_ENTRIES(q4_k, rf_qmvm_q4_k)
RF_QMMM_ENTRIES(q5_k, rf_qmvm_q5_k)
RF_QMMM_ENTRIES(q8_0, rf_qmvm_q8_0)
RF_QMMM_ENTRIES(q4_0, rf_qmvm_q4_0)
RF_QMMM_ENTRIES(q6_k, rf_qmvm_q6_k)
RF_QMMM_ENTRIES(mxfp4, rf_qmvm_mxfp4)
