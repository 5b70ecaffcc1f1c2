// rocmforge_mxfp4_tiled_abi.h: what the tiled matrix-vector kernels (kernels/mxfp4_tiled.hip,
// kernels/q4k_tiled.hip, kernels/q8_0_tiled.hip) and their launchers
// (crates/rocm-kernels/src/quant/mxfp4_tiled.rs, q4k_tiled.rs and q8_0_tiled.rs, through the
// generated abi/mxfp4_tiled.rs) share: the re-layouts' tile shape, the fast-scale limit, the
// matrix-core kernels' shared-memory rings and the outputs of one launch. See rocmforge_abi.h
// for the rules of an ABI header.

#ifndef ROCMFORGE_MXFP4_TILED_ABI_H
#define ROCMFORGE_MXFP4_TILED_ABI_H

#include "rocmforge_abi.h"

// Rows of a tile; blocks of a group (the unit a warp loads: rows are padded to a multiple); the
// most warps a block has.
#define RF_T4_ROWS 16
#define RF_T4_GROUP 8
#define RF_T4_WARPS 8
// Scale bytes up to this value take the fast conversion (exponent field e + 14 <= 254).
#define RF_T4_FAST_SCALE_MAX 240
// A group's bytes in a stage: payload, then scales, then (f16 activations) x; bf16 x is staged
// once a block instead, as block-scaled f16.
#define RF_T4_PAYLOAD_BYTES 2048
#define RF_T4_SCALE_BYTES 128
#define RF_T4_X_BYTES 512
#define RF_T4_STAGE_F16 (RF_T4_PAYLOAD_BYTES + RF_T4_SCALE_BYTES + RF_T4_X_BYTES)
#define RF_T4_STAGE_BF16 (RF_T4_PAYLOAD_BYTES + RF_T4_SCALE_BYTES)
#define RF_T4_STAGES 3
// The tiled q4_K layout (kernels/q4k_tiled.hip) shares this ABI: its groups are q4_K super-blocks
// (8 sub-blocks of 32), a group's scales its 16 rows' 16-byte headers (d, dmin and the 12 bytes
// of 6-bit scales and mins, as GGUF's block_q4_K begins), and x is always staged once a block.
#define RF_T4K_SCALE_BYTES 256
#define RF_T4K_STAGE (RF_T4_PAYLOAD_BYTES + RF_T4K_SCALE_BYTES)
// The tiled q8_0 layout (kernels/q8_0_tiled.hip) too: a group is 8 blocks of 32 int8 codes (4 KB
// of payload for 16 rows, each code stored as q + 128), its scales the 16 rows' 8 block scales d
// (f16), and x is always staged once a block.
#define RF_T8_PAYLOAD_BYTES 4096
#define RF_T8_SCALE_BYTES 256
#define RF_T8_STAGE (RF_T8_PAYLOAD_BYTES + RF_T8_SCALE_BYTES)
// Its one-vector blocks of 8 warps an SM at most: two rings of 3 stages of a 4 KB group fill it.
#define RF_T8_RESIDENT_BLOCKS 2
// Blocks of the matrix-core kernel kept resident on a multiprocessor where shared memory allows
// (24 warps; 2 and 3 stages or blocks an SM measured alike: docs/kernels/mxfp.md), which its
// launch bounds promise the compiler (without them ptxas chose 64 registers and spilled).
#define RF_T4_RESIDENT_BLOCKS 3
// Vectors of one launch of the several-vector matrix-core kernels (passes of 8 over a decoded
// block), and the blocks of the 32-vector one kept resident (its totals take 32 KB a block and
// its registers twice the others').
#define RF_T4_BATCH_PASS 8
#define RF_T4_MAX_BATCH 32
#define RF_T4_BATCH32_RESIDENT_BLOCKS 2

// Where a launch writes y: rows [end[i - 1], end[i]) of the weight (end[-1] = 0) go to y[i],
// row end[i - 1] at y[i][0], so that weights stacked along their rows (a layer's Q, K and V, or
// its gate and up: one weight, one launch) write their separate outputs. Every end but the last
// is a multiple of RF_T4_ROWS (a tile writes one output); the last is the weight's rows, n.
// Unused outputs are empty ranges (their pointers are never used).
//
// `mode` says what a launch does with a (row, vector) total once it is rounded to T:
//   RF_T4_STORE: stores it, as above.
//   RF_T4_SWIGLU: a gate-and-up product with its activation instead: rows [0, end[0]) of the
//     weight are the gates, rows [end[0], end[1]) their ups (end[1] = 2 end[0], end[0] a multiple
//     of RF_T4_ROWS, end[2] = end[1]), and y[0] ([batch, end[0]]) receives silu(gate) * up of each
//     gate row and its up row, each product rounded to the activations' type first, as two
//     products and kernels/swiglu.hip give it (rocmforge_silu.h); y[1] and y[2] are not used. The
//     matrix-core entries then need RF_T4_ROWS floats a column of shared memory more.
//   RF_T4_ADD: adds it to the element already there, rounded to T once more: y = round(y +
//     round(total)), the residual stream's update as kernels/rmsnorm.hip's residual form makes it
//     (a block's output joining the stream in the launch that computes it).
#define RF_T4_OUTPUTS 3
#define RF_T4_STORE 0
#define RF_T4_SWIGLU 1
#define RF_T4_ADD 2

struct rf_t4_outputs {
    RF_ABI_PTR(void) y[RF_T4_OUTPUTS];
    unsigned int end[RF_T4_OUTPUTS];
    unsigned int mode; // RF_T4_STORE, RF_T4_SWIGLU or RF_T4_ADD (above)
};

// The RMSNorm the normed entries apply to x before the product: x is then a row of the residual
// stream h, and the product's input is each element h * s * weight (f32, in that order) rounded
// to T, s = 1 / sqrt(sum(h^2) / k + eps): kernels/rmsnorm.hip's row, with the sum of squares in
// the block's own order. `weight` holds k elements of T.
struct rf_t4_norm {
    RF_ABI_PTR(const void) weight;
    float eps;
    unsigned int unused; // 0: the struct's padding, named (ABI structs have none hidden)
};

#endif // ROCMFORGE_MXFP4_TILED_ABI_H
