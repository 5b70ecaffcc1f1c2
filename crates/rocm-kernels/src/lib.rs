//! rocm-kernels
