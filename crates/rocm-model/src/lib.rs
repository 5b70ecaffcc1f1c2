//! rocm-model
