//! rocm-runtime
