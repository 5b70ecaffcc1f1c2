// rocmforge_quant_mlp_abi.h: the fused MLP of one token (kernels/quant_mlp_mma.hip) as its launcher
// (crates/rocm-kernels/src/quant/mlp.rs, through abi/quant_mlp.rs) sees it. See rocmforge_abi.h
// for the rules of an ABI header.

#ifndef ROCMFORGE_QUANT_MLP_ABI_H
#define ROCMFORGE_QUANT_MLP_ABI_H

#include "rocmforge_abi.h"

// Rows of a work item's tile (one m16 tile) and warps of a block (they split the tile's k).
#define RF_QMLP_ROWS 16
#define RF_QMLP_WARPS 4

// Parts the down product's k is cut into at most (its tiles are few: 256 at Llama-3-8B's 4096
// rows, against 4 blocks an SM).
#define RF_QMLP_MAX_SPLITS 8

// The launch's counters, zero between launches (the last block to finish sets the first three
// back; the last part of a down tile its arrival counter): tickets taken (work items handed
// out), gate-and-up tiles finished, blocks finished; from RF_QMLP_ARRIVALS, one arrival counter
// a down tile (its parts finished). Indices into the counters, 128 bytes apart: the blocks that
// wait poll the second while others take tickets from the first.
#define RF_QMLP_TICKETS 0
#define RF_QMLP_PAIRS_DONE 32
#define RF_QMLP_FINISHED 64
#define RF_QMLP_ARRIVALS 96

// act = silu(gate x) * up x ([ffn]); y = down act ([hidden]). gate and up: [ffn, hidden]
// blocks, down: [hidden, ffn] blocks, all of one format. partial: [splits][hidden] f32, the down
// parts' totals; counters: RF_QMLP_ARRIVALS + hidden / RF_QMLP_ROWS of them.
struct rf_qmlp_params {
    RF_ABI_PTR(const unsigned char) gate;
    RF_ABI_PTR(const unsigned char) up;
    RF_ABI_PTR(const unsigned char) down;
    RF_ABI_PTR(const void) x;
    RF_ABI_PTR(void) act;
    RF_ABI_PTR(void) y;
    RF_ABI_PTR(float) partial;
    RF_ABI_PTR(unsigned) counters;
    unsigned long long hidden;
    unsigned long long ffn;
    unsigned splits;
    unsigned pad;
};

#endif // ROCMFORGE_QUANT_MLP_ABI_H
