// rocmforge_swiglu_abi.h: the unroll of the SwiGLU kernel's scalar path (kernels/swiglu.hip) that
// its launcher (crates/rocm-kernels/src/swiglu.rs, through abi/swiglu.rs) sizes its grid with. See
// rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_SWIGLU_ABI_H
#define ROCMFORGE_SWIGLU_ABI_H

#include "rocmforge_abi.h"

// Scalar path: elements each thread loads from each input before it stores any.
#define RF_SWIGLU_UNROLL 4

#endif // ROCMFORGE_SWIGLU_ABI_H
