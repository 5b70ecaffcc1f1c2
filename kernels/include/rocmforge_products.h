// rocmforge_products.h: reading a product list (rf_qmv_products, rocmforge_quant_matvec_abi.h),
// the weights, outputs and row counts of up to RF_QMV_MAX_PRODUCTS products over the same
// activations that one launch computes (a layer's Q, K and V, or its gate and up). Shared by the
// matrix-core matrix-vector kernels of ggml's formats (quant_matvec_mma.hip) and of MXFP
// (mxfp.hip).

#ifndef ROCMFORGE_PRODUCTS_H
#define ROCMFORGE_PRODUCTS_H

#include "rocmforge.h"
#include "rocmforge_quant_matvec_abi.h"

// Entry i of one of a product list's arrays by selects: indexing the kernel parameter with a
// run-time value made the compiler copy all of it to local memory (a 72-byte stack frame, and a
// local load on the way to each chunk's copies).
template <typename A> RF_DEVICE A rf_products_pick(const A (&a)[RF_QMV_MAX_PRODUCTS], int i) {
    static_assert(RF_QMV_MAX_PRODUCTS == 3, "a select for each product past the first");
    return i == 0 ? a[0] : i == 1 ? a[1] : a[2];
}

#endif // ROCMFORGE_PRODUCTS_H
