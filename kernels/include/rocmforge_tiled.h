// rocmforge_tiled.h: what the matrix-vector kernels over a tiled weight layout share
// (kernels/mxfp4_tiled.hip: MXFP4; kernels/q4k_tiled.hip: q4_K; kernels/q8_0_tiled.hip: q8_0).
// A tiled weight is 16-row tiles of groups of 8 blocks of 32 elements; a group's payload
// (PAYLOAD: 2 KB for MXFP4 and q4_K, 4 KB for q8_0) is in a warp's lane order (lane l's 16 bytes
// of each 512-byte chunk) and its scales a format's own bytes (SCALES: 128 for MXFP4, 256 for
// q4_K and q8_0) in a run of their own. What is here does not look inside any of them: the
// launch's outputs and their modes (rocmforge_mxfp4_tiled_abi.h), the order blocks walk tiles
// in, the tiles' totals, the normed entries' RMSNorm, the matrix-core loop that streams each
// warp's groups through its ring of shared-memory stages and hands each to an op
// (rf_t4_stream), with x staged once a block where an op wants it (rf_t4_stage_x), and the
// one-vector op of the layouts whose blocks are B's columns (rf_t4_block_columns).

#ifndef ROCMFORGE_TILED_H
#define ROCMFORGE_TILED_H

#include "rocmforge_quant.h"
#include "rocmforge_mma.h"
#include "rocmforge_dependent_launch.h"
#include "rocmforge_mxfp4_tiled_abi.h"
#include "rocmforge_reduce.h"
#include "rocmforge_rms.h"
#include "rocmforge_silu.h"
#include "rocmforge_x16.h"

// A launcher's broken promise (never in a correct launch): the kernel ends with an error.
#if RF_PLATFORM_AMD
#define RF_T4_TRAP() __builtin_trap()
#else
#define RF_T4_TRAP() __trap()
#endif

RF_DEVICE unsigned rf_t4_padded_blocks(unsigned nb) { return (nb + RF_T4_GROUP - 1) & ~(unsigned)(RF_T4_GROUP - 1); }

// Where row `row` of the weight goes for vector v in the launch's outputs (rf_t4_outputs: output
// i holds [batch, rows of part i]): by selects, not an index into the parameter
// (rocmforge_products.h says why).
template <typename T> RF_DEVICE T* rf_t4_out(const rf_t4_outputs& out, unsigned row, unsigned v) {
    static_assert(RF_T4_OUTPUTS == 3, "a select for each output past the first");
    return row < out.end[0]   ? static_cast<T*>(out.y[0]) + (rf_u64)v * out.end[0] + row
           : row < out.end[1] ? static_cast<T*>(out.y[1]) + (rf_u64)v * (out.end[1] - out.end[0]) + (row - out.end[0])
                              : static_cast<T*>(out.y[2]) + (rf_u64)v * (out.end[2] - out.end[1]) + (row - out.end[1]);
}

// Where the total of (row, vector v) goes, by out.mode (rocmforge_mxfp4_tiled_abi.h): rounded to
// T, into its output, or added to the element there (RF_T4_ADD); or, in a gate-and-up launch
// (RF_T4_SWIGLU), a gate row's rounded to T into `*keep`, and an up row's with the gate kept
// there through silu(gate) * up into y[0]. The kernels walk a gate tile and then its up tile
// (rf_t4_walk) with the same thread on the same (row % 16, v) and the same `keep` in both, so
// each thread reads back what it wrote itself: no barrier.
RF_DEVICE bool rf_t4_swiglu(const rf_t4_outputs& out) { return out.mode == RF_T4_SWIGLU; }
template <typename T>
RF_DEVICE void rf_t4_put(const rf_t4_outputs& out, unsigned row, unsigned v, float sum, float* keep) {
    if (!rf_t4_swiglu(out)) {
        T* y = rf_t4_out<T>(out, row, v);
        // RF_T4_ADD: as rmsnorm.hip's residual form, round(stream + round(total)).
        const float add = out.mode == RF_T4_ADD ? rf_rms_round<T>(sum) + rf_to_float(*y) : sum;
        *y = rf_from_float<T>(add);
        return;
    }
    const unsigned gates = out.end[0];
    const float rounded = rf_to_float(rf_from_float<T>(sum)); // as a product's output stores it
    if (row < gates) {
        *keep = rounded;
    } else {
        static_cast<T*>(out.y[0])[(rf_u64)v * gates + (row - gates)] = rf_from_float<T>(rf_silu_mul(*keep, rounded));
    }
}

// A row of an empty product (k = 0): a total of 0, put as any other; in a gate-and-up launch
// silu(0) * 0 = 0, written for the gate row (the up rows write nothing).
template <typename T> RF_DEVICE void rf_t4_put_zero(const rf_t4_outputs& out, unsigned row, unsigned v) {
    if (!rf_t4_swiglu(out)) {
        rf_t4_put<T>(out, row, v, 0.0f, nullptr);
    } else if (row < out.end[0]) {
        static_cast<T*>(out.y[0])[(rf_u64)v * out.end[0] + row] = rf_from_float<T>(0.0f);
    }
}

// The order a block takes its tiles in: first, first + grid, ...; in a gate-and-up launch the
// pairs (gate tile j, up tile j + gate tiles) for j = first, first + grid, ..., a pair's two tiles
// one after the other, so that the block holds a row's gate when its up is finished. The steps
// between a block's tiles alternate: a, b, a, ... (both the grid for the plain walk).
struct rf_t4_walk {
    int a;
    int b;
    unsigned count; // the block's tiles
    RF_DEVICE rf_t4_walk(const rf_t4_outputs& out, unsigned tiles) {
        const unsigned grid = gridDim.x;
        const unsigned gate_tiles = out.end[0] / RF_T4_ROWS;
        const bool pairs = rf_t4_swiglu(out);
        const unsigned units = pairs ? gate_tiles : tiles; // pairs, or tiles
        const unsigned first = blockIdx.x;
        count = first < units ? (units - first + grid - 1) / grid * (pairs ? 2u : 1u) : 0u;
        a = pairs ? (int)gate_tiles : (int)grid;
        b = pairs ? (int)grid - (int)gate_tiles : (int)grid;
    }
    // The step after a block's tile `i` (counted from 0): a after even ones, b after odd ones.
    RF_DEVICE int step(unsigned i) const { return i & 1u ? b : a; }
};

// Adds the warps' row totals of a tile (shared `sums[(warp * 16 + row) * PER_ROW + i]`) in warp
// order and puts the tile's rows (rf_t4_put; thread r keeps row r's gate at keep[r]); every
// thread of the block calls it, once the totals are written. One barrier: callers alternate two
// buffers by tile parity, so the next tile's writes go to the other one, and the writes of tile
// t + 2 come after the barrier of tile t + 1, which the readers of tile t pass too.
template <int PER_ROW, typename T>
RF_DEVICE void rf_t4_finish(const float* sums, unsigned warps, unsigned tile, const rf_t4_outputs& out, unsigned v,
                            float* keep) {
    __syncthreads();
    const unsigned r = threadIdx.x;
    const unsigned row = tile * RF_T4_ROWS + r;
    if (r < RF_T4_ROWS && row < out.end[RF_T4_OUTPUTS - 1]) {
        float sum = 0.0f;
        for (unsigned w = 0; w < warps; ++w) {
#pragma unroll
            for (int i = 0; i < PER_ROW; ++i) {
                sum += sums[(w * RF_T4_ROWS + r) * PER_ROW + i];
            }
        }
        rf_t4_put<T>(out, row, v, sum, keep + r);
    }
}

// A one-vector op's tile end: lane 4g's parts of rows g and g + 8 (the quad's lanes hold the
// same by then) into the totals buffer of the block's tile parity (by its own tile count `done`:
// `tile & 1` is the same for every tile of a block when the grid is even, tiles being gridDim.x
// apart, and the next tile's writes would race the readers of this one; compute-sanitizer
// racecheck found it), the tile's rows put (rf_t4_finish), and the parts reset. Every thread.
template <typename T>
RF_DEVICE void rf_t4_put_rows(float* totals, unsigned warps, unsigned done, unsigned tile, int warp, int lane,
                              const rf_t4_outputs& y, float* keep, float& total_g, float& total_h) {
    float* sums = totals + (done & 1) * (warps * RF_T4_ROWS);
    if ((lane & 3) == 0) {
        sums[warp * RF_T4_ROWS + (lane >> 2)] = total_g;
        sums[warp * RF_T4_ROWS + (lane >> 2) + 8] = total_h;
    }
    rf_t4_finish<1, T>(sums, warps, tile, y, 0, keep);
    total_g = 0.0f;
    total_h = 0.0f;
}

// The normed entries' RMSNorm (rf_t4_norm): rmsnorm.hip's row (rocmforge_rms.h) over a row h of
// k elements, the sum of squares in the block's own order (below); each element h * s * weight
// in f32, rounded to T.
RF_DEVICE float rf_t4_norm_from(float sumsq, rf_u64 k, float eps) { return rf_rms_scale(sumsq, 1.0f / (float)k, eps); }
RF_DEVICE float rf_t4_normed(float h, float s, float w) { return h * s * w; }

// Adds the squares of a 32-element block of h (16-bit T: four 16-byte vectors) to `sumsq`.
template <typename T> RF_DEVICE float rf_t4_add_squares(const uint4 (&v)[4], float sumsq) {
    static_assert(sizeof(T) == 2, "32 16-bit elements");
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        float f[8];
        rf_pack16<T>::unpack(v[u], f);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            sumsq = fmaf(f[e], f[e], sumsq);
        }
    }
    return sumsq;
}

// The portable kernel's s: thread t takes elements t, t + blockDim.x, ..., and every thread adds
// the threads' sums in thread order through shared memory (`part`: a float a thread, not written
// again until every thread has s), with no shuffles: any warp width, any block size.
template <typename T> RF_DEVICE float rf_t4_norm_scale_portable(const T* h, rf_u64 k, float eps, float* part) {
    float sumsq = 0.0f;
    for (rf_u64 i = threadIdx.x; i < k; i += blockDim.x) {
        const float f = rf_to_float(h[i]);
        sumsq = fmaf(f, f, sumsq);
    }
    part[threadIdx.x] = sumsq;
    __syncthreads();
    float total = 0.0f;
    for (unsigned t = 0; t < blockDim.x; ++t) {
        total += part[t];
    }
    return rf_t4_norm_from(total, k, eps);
}

#if RF_MMA_SYNC

// A warp's place in its block's stream of (tile, group) pairs, the groups w, w + W, ... < G of
// each tile in turn, with the lane's source addresses of the group: its 16 bytes of payload
// (chunk 0 of PAYLOAD / 512; chunk i is 512 i bytes on), the tile's SCALES scale bytes of the
// group, and (f16) its x's. A tile's payloads are its groups' one after another, and so are its
// scales.
template <typename T, unsigned PAYLOAD, unsigned SCALES> struct rf_t4_cursor {
    unsigned q;
    unsigned passed; // the block's tiles this cursor has left behind (rf_t4_walk's step parity)
    const unsigned char* payload; // this lane's bytes of chunk 0 of group q
    const unsigned char* scales;  // the group's SCALES scale bytes
    const T* x;                   // x[256 q + 8 lane] (f16; bf16 x is staged once a block)
    // Moves to the warp's next group, in the block's next tile (rf_t4_walk) past the last.
    RF_DEVICE void advance(unsigned first_q, unsigned step, unsigned groups, unsigned nbp, const rf_t4_walk& walk) {
        q += step;
        payload += step * PAYLOAD;
        scales += step * SCALES;
        x += step * (RF_T4_GROUP * RF_QK);
        if (q < groups) {
            return;
        }
        // The next tile's group first_q: its payload and scales follow this tile's. `back`
        // groups past first_q (a tile's worth plus the overshoot; more than the tile holds when
        // the overshoot is large, hence signed steps).
        const long long back = (long long)(q - first_q);
        const long long tile_step = walk.step(passed++);
        payload += tile_step * nbp * (PAYLOAD / RF_T4_GROUP) - back * PAYLOAD;
        scales += tile_step * nbp * (SCALES / RF_T4_GROUP) - back * SCALES;
        x -= back * (RF_T4_GROUP * RF_QK);
        q = first_q;
    }
};

// Copies the cursor's group (and with X its x: f16 stages hold it after the scales) into a
// stage: payload chunks (512 bytes, a lane's 16 each) and x past the row's last block are
// zero-filled, not read. MXFP4's layout pads k to whole groups and puts block b in chunk
// b / (8 / CHUNKS); q4_K's and q8_0's hold whole groups only (k a multiple of 256), so none of
// their chunks is ever past the last block. The weight's bytes with `stream`
// (rocmforge_mma.h): they are read once.
template <bool X, unsigned PAYLOAD, unsigned SCALES, typename T>
RF_DEVICE void rf_t4_stage_in(unsigned char* stage, const rf_t4_cursor<T, PAYLOAD, SCALES>& c, unsigned nb, int lane,
                              rf_l2_policy stream) {
    constexpr unsigned CHUNKS = PAYLOAD / 512;
    static_assert(PAYLOAD % 512 == 0 && RF_T4_GROUP % CHUNKS == 0, "whole blocks a chunk");
    const unsigned valid = nb - c.q * RF_T4_GROUP; // blocks of the group that exist (>= 1)
#pragma unroll
    for (int i = 0; i < (int)CHUNKS; ++i) {
        const unsigned first_block = (RF_T4_GROUP / CHUNKS) * (unsigned)i;
        rf_cp_async16_policy(stage + 512 * i + 16 * lane, c.payload + 512 * i, first_block < valid ? 16 : 0, stream);
    }
    static_assert(SCALES % 16 == 0 && SCALES <= 512, "a lane's 16 bytes each");
    if (lane < SCALES / 16) {
        rf_cp_async16_policy(stage + PAYLOAD + 16 * lane, c.scales + 16 * lane, 16, stream);
    }
    if constexpr (X) {
        // Lane l copies x[256q + 8l .. + 8]: block 8q + l / 4.
        rf_cp_async16(stage + PAYLOAD + SCALES + 16 * lane, c.x, (unsigned)(lane >> 2) < valid ? 16 : 0);
    }
}

// Streams a block's tiles through its warps' rings (the loop the header describes) and hands
// each staged group to `op`, which says what is multiplied and where it goes:
//   Op::Elem, the activations' type; Op::PAYLOAD and Op::SCALES, a group's payload and scale
//   bytes (the layout's);
//   Op::STAGE, a stage's bytes; Op::X_IN_STAGE, whether a
//   stage holds its group's x too (the cursor copies it; the block then waits for the kernel
//   ahead before its first copies, else after them, then op.after_wait());
//   op.before_prologue(), copies of the op's own issued before the prologue's (as one commit
//   group of their own, or none);
//   op.place(shared memory past the rings, warps, nbp); op.outputs(), the launch's outputs
//   (its rows, and the walk: rf_t4_walk); op.zero(tile), an empty tile's outputs (k = 0);
//   op.group(stage, q, lane), group q of the current tile into the lane's totals;
//   op.tile_done(done, tile, warp, lane), every thread once the tile's groups are all multiplied
//   (`done`: the tiles the block finished before).
template <class Op>
RF_DEVICE void rf_t4_stream(const uint4* payload, const unsigned char* scales, const typename Op::Elem* x, unsigned nb,
                            Op& op) {
    extern __shared__ __align__(16) unsigned char rf_t4_smem[];
    typedef typename Op::Elem T;
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const unsigned warps = blockDim.x >> 5;
    constexpr unsigned STAGE = Op::STAGE;
    const unsigned nbp = rf_t4_padded_blocks(nb);
    op.place(rf_t4_smem + warps * (RF_T4_STAGES * STAGE), warps, nbp);
    const unsigned n = op.outputs().end[RF_T4_OUTPUTS - 1];
    const unsigned groups = nbp / RF_T4_GROUP;
    const unsigned tiles = (n + RF_T4_ROWS - 1) / RF_T4_ROWS;
    // This block's tiles: first, first + grid, ... (all blocks sweep the weight together), or
    // gate-and-up pairs (rf_t4_walk).
    const unsigned first = blockIdx.x;
    const rf_t4_walk walk(op.outputs(), tiles);
    const unsigned count = walk.count;
    if (count == 0 || groups == 0) {
        // k = 0 (every row an empty sum) or no tiles; uniform across the block. (A gate-and-up
        // launch's up tiles write nothing: their gate tiles write the zeros.)
        rf_follow_prior_grid();
        for (unsigned tile = first; tile < tiles; tile += gridDim.x) {
            op.zero(tile);
        }
        return;
    }
    if (groups < warps) {
        RF_T4_TRAP(); // the launcher never asks for more warps than groups (a warp with none would
                  // miss the tiles' barriers)
    }
    const unsigned per_tile = (groups - (unsigned)warp + warps - 1) / warps; // this warp's groups a tile
    const unsigned items = count * per_tile;
    unsigned char* ring = rf_t4_smem + warp * (RF_T4_STAGES * STAGE);
    rf_t4_cursor<T, Op::PAYLOAD, Op::SCALES> fetch;
    fetch.q = (unsigned)warp;
    fetch.passed = 0;
    fetch.payload = reinterpret_cast<const unsigned char*>(payload) + (rf_u64)first * nbp * (Op::PAYLOAD / RF_T4_GROUP) +
                    (unsigned)warp * Op::PAYLOAD + 16 * lane;
    fetch.scales = scales + (rf_u64)first * nbp * (Op::SCALES / RF_T4_GROUP) + (unsigned)warp * Op::SCALES;
    fetch.x = x + (unsigned)warp * (RF_T4_GROUP * RF_QK) + 8 * lane;
    unsigned fetched = 0;
    const rf_l2_policy stream = rf_l2_evict_first(); // the weights: rocmforge_mma.h
    // Prologue: the first RF_T4_STAGES - 1 groups; one commit group per stage, empty ones
    // included, so that wait_group counts stages. The weights need nothing of the kernel ahead (a
    // dependent launch: rocmforge_dependent_launch.h): where the stages hold no x the prologue's
    // copies are issued before the block waits for it; x's and every write come after. f16
    // stages take their x with their weights, so their prologue follows the wait (issuing the
    // weights first and x after made the compiler spill in the loop).
    if constexpr (Op::X_IN_STAGE) {
        rf_follow_prior_grid(); // uniform across the block
    }
    op.before_prologue();
#pragma unroll
    for (int s = 0; s < RF_T4_STAGES - 1; ++s) {
        if (fetched < items) {
            rf_t4_stage_in<Op::X_IN_STAGE, Op::PAYLOAD, Op::SCALES>(ring + s * STAGE, fetch, nb, lane, stream);
            fetch.advance((unsigned)warp, warps, groups, nbp, walk);
            ++fetched;
        }
        rf_cp_async_commit();
    }
    if constexpr (!Op::X_IN_STAGE) {
        rf_follow_prior_grid();
        op.after_wait();
    }
    unsigned tile = first;
    unsigned done = 0; // tiles this block has finished: their parity picks the totals buffer
    unsigned at_q = (unsigned)warp;
    int slot = 0;
    for (unsigned i = 0; i < items; ++i) {
        rf_cp_async_wait<RF_T4_STAGES - 2>(); // this lane's copies of item i have landed ...
        __syncwarp();                   // ... and every lane's
        if (fetched < items) {
            // The slot item i - 1 used, freed by the __syncwarp after it.
            const int free_slot = slot == 0 ? RF_T4_STAGES - 1 : slot - 1;
            rf_t4_stage_in<Op::X_IN_STAGE, Op::PAYLOAD, Op::SCALES>(ring + free_slot * STAGE, fetch, nb, lane, stream);
            fetch.advance((unsigned)warp, warps, groups, nbp, walk);
            ++fetched;
        }
        rf_cp_async_commit();
        op.group(ring + slot * STAGE, at_q, lane);
        __syncwarp(); // every lane is done with the slot before it is refilled
        slot = slot == RF_T4_STAGES - 1 ? 0 : slot + 1;
        at_q += warps;
        if (at_q >= groups) {
            op.tile_done(done, tile, warp, lane);
            tile += walk.step(done);
            ++done;
            at_q = (unsigned)warp;
        }
    }
    rf_cp_async_wait<0>(); // nothing is left in flight at exit (the last commits are empty)
}

// A several-vector op's 16 bytes of bf16 x (lane 4g + u: 8 elements of vector g's 32 that one
// mma takes, the other 24 in lanes 4g + u' of the same g) rounded to f16 in place by
// rocmforge_x16.h's rule over those 32 (their maximum through two shuffles), and the factors of
// D's columns 2u and 2u + 1 (vectors 2u and 2u + 1: lanes 8u and 8u + 4 hold them) into f0, f1.
// Every lane of the warp calls it.
RF_DEVICE void rf_t4_x16_columns(uint4& xb, unsigned u, float& f0, float& f1) {
    // The largest magnitude's bits, two at a time; where the warp holds an infinity or a NaN
    // (bits 0x7f80 and up), the largest finite one element by element, as rocmforge_x16.h's rule
    // says (rare: the vote keeps the common path to 9 instructions for 8 elements).
    const unsigned both =
        __vmaxu2(__vmaxu2(xb.x & 0x7fff7fffu, xb.y & 0x7fff7fffu), __vmaxu2(xb.z & 0x7fff7fffu, xb.w & 0x7fff7fffu));
    unsigned m = (both & 0xffffu) > (both >> 16) ? both & 0xffffu : both >> 16;
    if (__any_sync(0xffffffffu, m >= 0x7f80u)) {
        m = rf_x16_max_finite(xb.x, 0u);
        m = rf_x16_max_finite(xb.y, m);
        m = rf_x16_max_finite(xb.z, m);
        m = rf_x16_max_finite(xb.w, m);
    }
#pragma unroll
    for (int lanes = 1; lanes < 4; lanes *= 2) { // the 32 elements' four lanes
        const unsigned other = __shfl_xor_sync(0xffffffffu, m, lanes);
        m = other > m ? other : m;
    }
    const int sc = rf_x16_shift(m);
    const rf_x16_scaler scaler(sc);
    xb = make_uint4(scaler.pack(xb.x), scaler.pack(xb.y), scaler.pack(xb.z), scaler.pack(xb.w));
    const float f = rf_x16_factor(sc);
    f0 = __shfl_sync(0xffffffffu, f, 8 * u); // column 2u is lanes 8u .. 8u + 3's vector
    f1 = __shfl_sync(0xffffffffu, f, 8 * u + 4);
}

// What the several-vector ops share (mxfp4_tiled.hip's rf_t4_vectors, q4k_tiled.hip's
// rf_t4k_vectors): up to 8 * PASSES vectors, x row-major [batch, k], B's 8 columns 8 vectors a
// pass, so that D gives lane 4g + u rows g and g + 8 of vectors 8p + 2u and 8p + 2u + 1; their
// tiles' totals (acc), and the tiles' outputs. A derived op adds Elem, SCALES, X_IN_STAGE, STAGE
// and group() (rf_t4_stream).
template <typename T, int PASSES> struct rf_t4_columns {
    static constexpr unsigned COLUMNS = 8 * PASSES;
    const T* x;
    const rf_t4_outputs& y;
    unsigned nb;
    unsigned batch;
    float* totals; // two buffers of warps * 16 * COLUMNS floats, by tile parity
    float* keep;   // then, in a gate-and-up launch, the tile's gates: 16 * COLUMNS floats (rf_t4_put)
    unsigned warps;
    float acc[PASSES][4]; // pass p: rows g, g, g + 8, g + 8 of vectors 8p + 2u, 8p + 2u + 1

    RF_DEVICE rf_t4_columns(const T* x_, const rf_t4_outputs& y_, unsigned nb_, unsigned batch_)
        : x(x_), y(y_), nb(nb_), batch(batch_) {
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[p][i] = 0.0f;
            }
        }
    }
    RF_DEVICE void place(unsigned char* rest, unsigned warps_, unsigned) {
        warps = warps_;
        totals = reinterpret_cast<float*>(rest);
        keep = totals + 2 * warps * RF_T4_ROWS * COLUMNS;
    }
    RF_DEVICE const rf_t4_outputs& outputs() const { return y; }
    RF_DEVICE unsigned rows() const { return y.end[RF_T4_OUTPUTS - 1]; }
    RF_DEVICE void zero(unsigned tile) const {
        for (unsigned i = threadIdx.x; i < RF_T4_ROWS * batch; i += blockDim.x) {
            const unsigned row = tile * RF_T4_ROWS + i % RF_T4_ROWS;
            if (row < rows()) {
                rf_t4_put_zero<T>(y, row, i / RF_T4_ROWS);
            }
        }
    }
    RF_DEVICE void before_prologue() {}
    RF_DEVICE void after_wait() {}
    // Each lane's totals to sums[(warp * 16 + row) * COLUMNS + column], then the warps' added in
    // warp order a (row, vector) (the one-vector kernel's order) and written. One barrier, two
    // buffers by the block's tile parity (rf_t4_finish says why that suffices).
    RF_DEVICE void tile_done(unsigned done, unsigned tile, int warp, int lane) {
        float* sums = totals + (done & 1) * (warps * RF_T4_ROWS * COLUMNS);
        const int g = lane >> 2;
        const int u = lane & 3;
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            float* at = sums + (warp * RF_T4_ROWS + g) * COLUMNS + 8 * p + 2 * u;
            at[0] = acc[p][0];
            at[1] = acc[p][1];
            at[8 * COLUMNS] = acc[p][2];
            at[8 * COLUMNS + 1] = acc[p][3];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[p][i] = 0.0f;
            }
        }
        put_columns(sums, tile);
    }
    // Once every warp has written its totals of the tile to sums[(warp * 16 + row) * COLUMNS +
    // column]: the warps' added in warp order a (row, vector) and put (rf_t4_put). Every thread.
    RF_DEVICE void put_columns(const float* sums, unsigned tile) const {
        __syncthreads();
        for (unsigned i = threadIdx.x; i < RF_T4_ROWS * COLUMNS; i += blockDim.x) {
            const unsigned r = i / COLUMNS;
            const unsigned v = i % COLUMNS;
            const unsigned row = tile * RF_T4_ROWS + r;
            if (v < batch && row < rows()) {
                float sum = 0.0f;
                for (unsigned w = 0; w < warps; ++w) {
                    sum += sums[(w * RF_T4_ROWS + r) * COLUMNS + v];
                }
                rf_t4_put<T>(y, row, v, sum, keep + i);
            }
        }
    }
};

// Eight elements of the normalised row, from eight of h (`hv`, T's bits) and the norm's weight
// there (`wv`), as T's bits (16-bit types).
template <typename T> RF_DEVICE uint4 rf_t4_normed8(uint4 hv, uint4 wv, float s) {
    static_assert(sizeof(T) == 2, "eight 16-bit elements");
    float f[8];
    float g[8];
    rf_pack16<T>::unpack(hv, f);
    rf_pack16<T>::unpack(wv, g);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        f[e] = rf_t4_normed(f[e], s, g[e]);
    }
    return rf_pack16<T>::pack(f);
}


// The normed entries' norm weight (a weight: nothing of the kernel ahead) copied into xs, where x
// will be staged (k 16-bit elements: xs's first k * 2 bytes), before the block waits, as its own
// commit group, the oldest (rf_t4_stage_x waits for it). Each thread later stages x over the
// same bytes it reads the weight from.
RF_DEVICE void rf_t4_norm_weight_in(const rf_t4_norm& norm, unsigned nb, __half* xs) {
    const unsigned char* w = static_cast<const unsigned char*>(norm.weight);
    for (unsigned i = threadIdx.x; i < nb * (RF_QK / 8); i += blockDim.x) {
        rf_cp_async16(reinterpret_cast<unsigned char*>(xs) + 16 * i, w + 16 * i, 16);
    }
    rf_cp_async_commit();
}

// Block b's 32 elements of x (four 16-byte vectors, issued together).
template <typename T> RF_DEVICE void rf_t4_load_block(const T* x, unsigned b, uint4 (&v)[4]) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        v[u] = reinterpret_cast<const uint4*>(x)[4 * b + u];
    }
}

// x (nb blocks of 32 T) staged once a block as f16 into xs (nbp blocks), while the prologue's
// copies are in flight: bf16 as block-scaled f16 with each block's factor in xf
// (rocmforge_x16.h), f16 as it is (xf unused, or 1 with SUMS); the padding blocks' x zero (their
// codes are zeros too, and 0 x 0 keeps their sums 0 where garbage x could make them NaN) and
// their factors 1.
// NORM: x is a row h of the residual stream and the input is its RMSNorm (rf_t4_norm): thread t
// takes blocks t, t + blockDim.x, ... of h, each block's four vectors loaded together (one
// round trip to h after the wait, where k <= 32 blockDim.x); the sum of squares first (its
// scratch, `scratch`, a float a warp, free until the caller's next barrier; rf_block_sum's
// barrier publishes every thread's copies of the weight, rf_t4_norm_weight_in), then each block
// again (the L1 holds it) normalised and staged over the weight's bytes (a block's x where its
// weight was).
// SUMS: also each block's sum over its staged values times its factor into xt[b] (rf_x16_sum,
// 0 for the padding), formed in registers by the thread that stages the block: a thread a block
// then in every form (a pass over xs afterwards reads it with 8-way bank conflicts).
// Ends with a barrier: xs, xf (and xt) are the block's.
template <typename T, bool NORM, bool SUMS = false>
RF_DEVICE void rf_t4_stage_x(const T* x, const rf_t4_norm& norm, unsigned nb, unsigned nbp, __half* xs, float* xf,
                             float* scratch, float* xt = nullptr) {
    typedef rf_x16<T> X;
    // Block b staged from its 32 values v (T's bits), and with SUMS its sum kept.
    auto stage_block = [&](uint4 (&v)[4], unsigned b) {
        if constexpr (X::SCALED) {
            const float sum = X::stage_block(v, xs, xf, b);
            if constexpr (SUMS) {
                xt[b] = sum;
            }
        } else {
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                reinterpret_cast<uint4*>(xs)[4 * b + u] = v[u];
            }
            if constexpr (SUMS) {
                xf[b] = 1.0f;
                xt[b] = rf_x16_sum(v);
            }
        }
    };
    if constexpr (NORM) {
        float sumsq = 0.0f;
        for (unsigned b = threadIdx.x; b < nb; b += blockDim.x) {
            uint4 v[4];
            rf_t4_load_block(x, b, v);
            sumsq = rf_t4_add_squares<T>(v, sumsq);
        }
        rf_cp_async_wait<RF_T4_STAGES - 1>(); // the weight's group (the prologue's are younger)
        const float s = rf_t4_norm_from(rf_block_sum(sumsq, scratch), (rf_u64)nb * RF_QK, norm.eps);
        const uint4* xv = reinterpret_cast<const uint4*>(xs);
        for (unsigned b = threadIdx.x; b < nb; b += blockDim.x) {
            uint4 v[4];
            rf_t4_load_block(x, b, v);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                v[u] = rf_t4_normed8<T>(v[u], xv[4 * b + u], s); // the weight, then x, there
            }
            stage_block(v, b);
        }
    } else if constexpr (SUMS) {
        for (unsigned b = threadIdx.x; b < nb; b += blockDim.x) {
            uint4 v[4];
            rf_t4_load_block(x, b, v);
            stage_block(v, b);
        }
    } else if constexpr (X::SCALED) {
        X::stage(x, xs, xf, (rf_u64)nb * RF_QK);
    } else {
        for (unsigned i = threadIdx.x; i < nb * (RF_QK / 8); i += blockDim.x) {
            reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(x)[i];
        }
    }
    for (unsigned i = nb * (RF_QK / 8) + threadIdx.x; i < nbp * (RF_QK / 8); i += blockDim.x) {
        reinterpret_cast<uint4*>(xs)[i] = make_uint4(0u, 0u, 0u, 0u);
    }
    for (unsigned b = nb + threadIdx.x; b < nbp; b += blockDim.x) {
        xf[b] = 1.0f;
        if constexpr (SUMS) {
            xt[b] = 0.0f;
        }
    }
    __syncthreads();
}

// One vector with a group's 8 blocks of 32 as B's columns (rf_t4_stream's op; q4k_tiled.hip's
// q4_K, q8_0_tiled.hip's q8_0): in mma pair P (h = P / 4, e = P % 4) lane (g, u) gives A rows g
// and g + 8's elements 8e .. 8e + 7 of block u + 4h, and B's column c holds x only in the k
// slots of lane c / 2 (lanes g = 2u, 2u + 1 give x of their block, the others read a row of
// zeros), so D's columns 2u and 2u + 1 are block u + 4h's row sums, in lane u alone, and each
// lane scales its own two blocks. x is staged once a block (rf_t4_stage_x; NORM: through the
// RMSNorm) with each block's sum of its staged values times its factor (a format whose codes
// carry an offset takes it off with them). FORMAT gives the group's bytes (PAYLOAD, SCALES,
// STAGE) and multiplies a staged group into a lane's two row totals: FORMAT::group(stage, the
// lane's x or the zeros, the group's 8 factors, its 8 sums, lane, total_g, total_h).
template <typename T, bool NORM, class FORMAT> struct rf_t4_block_columns {
    typedef T Elem;
    static constexpr unsigned PAYLOAD = FORMAT::PAYLOAD;
    static constexpr unsigned SCALES = FORMAT::SCALES;
    static constexpr bool X_IN_STAGE = false;
    static constexpr unsigned STAGE = FORMAT::STAGE;
    // Bytes of the row of zeros the lanes that give no x read B from (pair offsets < 512).
    static constexpr unsigned ZEROS = 512;
    const T* x;
    const rf_t4_outputs& y;
    rf_t4_norm norm;
    unsigned nb;
    // Past the warps' rings: the tiles' row totals (two buffers of warps * 16 floats by tile
    // parity), x as f16 (nbp blocks), its blocks' factors and sums (nbp floats each), the row of
    // zeros, then in a gate-and-up launch the tile's 16 gates (rf_t4_put).
    float* totals;
    __half* xs;
    float* xf;
    float* xt;
    unsigned char* zeros;
    float* keep;
    unsigned warps;
    unsigned nbp;
    float total_g; // the lane's part of row g of the current tile
    float total_h; // row g + 8

    RF_DEVICE rf_t4_block_columns(const T* x_, const rf_t4_outputs& y_, rf_t4_norm norm_, unsigned nb_)
        : x(x_), y(y_), norm(norm_), nb(nb_), total_g(0.0f), total_h(0.0f) {}
    RF_DEVICE void place(unsigned char* rest, unsigned warps_, unsigned nbp_) {
        warps = warps_;
        nbp = nbp_;
        totals = reinterpret_cast<float*>(rest);
        xs = reinterpret_cast<__half*>(totals + 2 * warps * RF_T4_ROWS);
        xf = reinterpret_cast<float*>(xs + nbp * RF_QK);
        xt = xf + nbp;
        zeros = reinterpret_cast<unsigned char*>(xt + nbp);
        keep = reinterpret_cast<float*>(zeros + ZEROS);
    }
    RF_DEVICE const rf_t4_outputs& outputs() const { return y; }
    RF_DEVICE unsigned rows() const { return y.end[RF_T4_OUTPUTS - 1]; }
    RF_DEVICE void zero(unsigned tile) const {
        const unsigned row = tile * RF_T4_ROWS + threadIdx.x;
        if (threadIdx.x < RF_T4_ROWS && row < rows()) {
            rf_t4_put_zero<T>(y, row, 0);
        }
    }
    RF_DEVICE void before_prologue() {
        if constexpr (NORM) {
            rf_t4_norm_weight_in(norm, nb, xs);
        }
    }
    // The row of zeros, then x staged with each block's sum of its staged values times its
    // factor (xt[b], rf_t4_stage_x's SUMS: in f32 in element order, each value exact; f16 x is
    // staged as it is with factors 1), whose barrier publishes all three.
    RF_DEVICE void after_wait() {
        for (unsigned i = threadIdx.x; i < ZEROS / 16; i += blockDim.x) {
            reinterpret_cast<uint4*>(zeros)[i] = make_uint4(0u, 0u, 0u, 0u);
        }
        rf_t4_stage_x<T, NORM, true>(x, norm, nb, nbp, xs, xf, totals, xt);
    }
    // Lanes (g, u) with u == g / 2 give x (their block u + 4h's 16 bytes at pair offsets
    // 64 u + 256 h + 16 e of the group's x); the others read the zeros.
    RF_DEVICE void group(const unsigned char* stage, unsigned q, int lane) {
        const bool gives = (lane & 3) == (lane >> 3);
        const unsigned char* xl =
            gives ? reinterpret_cast<const unsigned char*>(xs + q * (RF_T4_GROUP * RF_QK)) + 64 * (lane & 3) : zeros;
        FORMAT::group(stage, xl, xf + q * RF_T4_GROUP, xt + q * RF_T4_GROUP, lane, total_g, total_h);
    }
    // A quad's lanes hold the parts of its two rows from its four lanes' blocks: added
    // ((u0 + u1) + (u2 + u3), the same in every lane), and lane u = 0 writes them.
    RF_DEVICE void tile_done(unsigned done, unsigned tile, int warp, int lane) {
        total_g += rf_shfl_xor(total_g, 1);
        total_h += rf_shfl_xor(total_h, 1);
        total_g += rf_shfl_xor(total_g, 2);
        total_h += rf_shfl_xor(total_h, 2);
        rf_t4_put_rows<T>(totals, warps, done, tile, warp, lane, y, keep, total_g, total_h);
    }
};

#endif // RF_MMA_SYNC

#endif // ROCMFORGE_TILED_H
