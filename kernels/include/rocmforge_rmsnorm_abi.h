// rocmforge_rmsnorm_abi.h: the register caches of the RMSNorm kernels (kernels/rmsnorm.hip) that
// their launcher (crates/rocm-kernels/src/rmsnorm.rs, through abi/rmsnorm.rs) sizes blocks by. See
// rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_RMSNORM_ABI_H
#define ROCMFORGE_RMSNORM_ABI_H

#include "rocmforge_abi.h"

// Elements of a row each thread keeps in registers: rows of up to RF_RMS_CACHE * blockDim.x
// elements (RF_RMS_CACHE_SCALAR on the scalar path, where each element needs its own address)
// are read from memory once.
#define RF_RMS_CACHE 32
#define RF_RMS_CACHE_SCALAR 8

// The group path: 16-byte vectors each thread keeps in registers.
#define RF_RMS_GROUP_CACHE 2

#endif // ROCMFORGE_RMSNORM_ABI_H
