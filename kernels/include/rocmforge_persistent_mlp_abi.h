// rocmforge_persistent_mlp_abi.h: the persistent MLP kernel's parameter block (kernels/
// persistent_mlp.hip), shared with its launcher (crates/rocm-kernels/src/persistent_mlp.rs,
// through the generated abi/persistent_mlp.rs). See rocmforge_abi.h for the rules of an ABI
// header.

#ifndef ROCMFORGE_PERSISTENT_MLP_ABI_H
#define ROCMFORGE_PERSISTENT_MLP_ABI_H

#include "rocmforge_abi.h"

// Groups of RF_QMVM_WARPS warps a block at most, each running the products' loop on its own
// (one block an SM: the groups stand in for the blocks a launch of the loop would keep resident).
#define RF_PMLP_GROUPS 4
// The grid barriers' counters, the count of blocks done, and each product call's claimed tiles.
#define RF_PMLP_COUNTERS 5

struct rf_pmlp_args {
    RF_ABI_PTR(void) h;                     // [hidden] T: the residual stream; h + delta is written back
    RF_ABI_PTR(const void) delta;           // [hidden] T, or null (nothing added)
    RF_ABI_PTR(const void) norm;            // [hidden] T: the RMSNorm's weight
    RF_ABI_PTR(const unsigned char) gate;   // [ffn rows of hidden] q8_0
    RF_ABI_PTR(const unsigned char) up;     // [ffn rows of hidden] q8_0
    RF_ABI_PTR(const unsigned char) down;   // [hidden rows of ffn] q8_0
    RF_ABI_PTR(void) gate_out;              // [ffn] T
    RF_ABI_PTR(void) up_out;                // [ffn] T
    RF_ABI_PTR(void) act;                   // [ffn] T: silu(gate xn) * (up xn)
    RF_ABI_PTR(void) y;                     // [hidden] T: down act
    RF_ABI_PTR(unsigned) counters;          // [RF_PMLP_COUNTERS]
    RF_ABI_PTR(unsigned) timeout;           // [1]
    unsigned hidden;                        // a multiple of 256, at least 1024
    unsigned ffn;                           // a multiple of 256, at least 1024
    float eps;
    unsigned groups;                        // 1 to RF_PMLP_GROUPS
};

#endif // ROCMFORGE_PERSISTENT_MLP_ABI_H
