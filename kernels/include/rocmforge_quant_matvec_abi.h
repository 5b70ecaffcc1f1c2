// rocmforge_quant_matvec_abi.h: the shape of the fused quantised matrix-vector kernels
// (kernels/quant_matvec.hip) that their launcher (crates/rocm-kernels/src/quant/matvec.rs,
// through abi/quant_matvec.rs) sizes grids with and picks entries by. See rocmforge_abi.h for
// the rules of an ABI header.

#ifndef ROCMFORGE_QUANT_MATVEC_ABI_H
#define ROCMFORGE_QUANT_MATVEC_ABI_H

#include "rocmforge_abi.h"

// Rows of W a thread block owns at a time (a row group): its threads split the rows' k, and
// every activation a thread loads serves all of them.
#define RF_QMV_ROWS 4
// Activation vectors one pass over a row group handles (the widest entry, _b8); a larger batch
// takes several passes over the same rows. Entries exist for 1, 2, 4 and 8.
#define RF_QMV_MAX_BATCH 8
// Threads a block at most (4 warps of 32 lanes, 2 wavefronts of 64); the kernel takes any whole
// number of warps up to it.
#define RF_QMV_THREADS 128
// Elements a unit: the part of a block one thread decodes at a time (a q8_0 / q4_0 block, or an
// eighth of a k-quant super-block), two runs of 16 consecutive elements.
#define RF_QMV_UNIT 32

// Products one launch computes over the same activations x (a layer's Q, K and V projections,
// or its gate and up projections): product i is w[i] ([rows[i], k] blocks) times x into y[i]
// ([batch, rows[i]]). The row groups of all products are numbered one product after another, so
// a launch is as wide as their rows together. Unused products have rows 0 (their pointers are
// never read).
#define RF_QMV_MAX_PRODUCTS 3

struct rf_qmv_products {
    RF_ABI_PTR(const unsigned char) w[RF_QMV_MAX_PRODUCTS];
    RF_ABI_PTR(void) y[RF_QMV_MAX_PRODUCTS];
    unsigned long long rows[RF_QMV_MAX_PRODUCTS];
};

// The matrix-core kernels (kernels/quant_matvec_mma.hip, NVIDIA sm_80+): rows a block owns (one
// m16 tile), its warps at most (they split k into chunks), and each warp's stages (chunks in
// flight plus the one computed on) for one vector, by format, and for passes of 8.
#define RF_QMVM_ROWS 16
#define RF_QMVM_WARPS 4
#define RF_QMVM_STAGES_ONE_Q8_0 3
#define RF_QMVM_STAGES_ONE_Q4_K 2
#define RF_QMVM_STAGES_MANY 2
// Blocks an SM of its one-vector q4_K loop (the columns loop) at RF_QMVM_WARPS warps: the
// launch's grid at most (its blocks stride over the tiles), and with the entries' register bound
// (RF_QMVM_ONE_WARPS_MAX warps at RF_QMVM_ONE_BLOCKS_AN_SM * RF_QMVM_WARPS / that blocks an SM:
// the same 128 registers a thread). Launches of long rows (more than 32 super-blocks) take up
// to RF_QMVM_ONE_WARPS_MAX warps a block (quant/matvec.rs, columns_warps).
#define RF_QMVM_ONE_BLOCKS_AN_SM 4
#define RF_QMVM_ONE_WARPS_MAX 8

// The matrix-core kernel for passes of 32 vectors (kernels/quant_matmul_mma.hip): rows a block
// owns (one 16-row tile a warp), its warps, the vectors of a pass, and its stages.
#define RF_QMMM_ROWS 64
#define RF_QMMM_WARPS 4
#define RF_QMMM_BATCH 32
#define RF_QMMM_STAGES 2

// Its k split (the rf_qmmm_<fmt>_b32_split_<dt> entries), for launches of few rows (a layer's
// O and down products at a decode step of 9 to 32 sequences leave most SMs idle otherwise).
// Product i's row blocks are each cut along k into splits[i] parts (1: not split; at most
// RF_QMMM_MAX_SPLITS), each part a unit of work of its own: part s of a row of
// `chunks` chunks takes chunks [s chunks / splits, (s + 1) chunks / splits). A part stores its
// f32 totals ([RF_QMMM_BATCH vectors][RF_QMMM_ROWS rows]) in `partial` at its unit's place (the
// units of the split products numbered one product after another, a row block's parts
// together); the last part of a row block to arrive (counted in `arrivals`, one counter a row
// block of a split product, numbered likewise) adds all parts in order and stores y, then sets
// its counter back to 0: counters are 0 between launches. A split launch takes one pass (batch <=
// RF_QMMM_BATCH).
#define RF_QMMM_MAX_SPLITS 8

struct rf_qmmm_split {
    RF_ABI_PTR(float) partial;
    RF_ABI_PTR(unsigned) arrivals;
    unsigned splits[RF_QMV_MAX_PRODUCTS];
    unsigned pad;
};

#endif // ROCMFORGE_QUANT_MATVEC_ABI_H
