//! Typed launchers for the HIP kernels in `kernels/`, with a CPU reference for each.
//!
//! Each kernel family has one module here named like its source: `kernels/axpy.hip` ->
//! [`axpy`] (launcher `axpy_f32`, reference `axpy_reference`) -> `tests/gpu_kernels/axpy.rs`. A
//! launcher checks shapes, computes the grid from the device's attributes and returns a
//! `Result`; it never branches on the platform (the runtime hides it). The compiled code
//! objects are embedded ([`embedded`]), so test binaries and archives carry their kernels.

mod abi;
pub mod attention;
pub mod axpy;
pub mod causal_mask;
mod dtype;
pub mod embedded;
mod error;
pub mod fill;
pub mod gemm;
pub mod kv_cache;
pub mod launchable;
mod loader;
mod modules;
pub mod persistent_mlp;
pub mod quant;
pub mod rmsnorm;
pub mod rope;
pub mod softmax;
pub mod spin;
pub mod stream_read;
pub mod stream_rmw;
pub mod swiglu;

pub use dtype::{Dtype, kernel_name};
pub use error::{KernelError, Result};
pub use modules::KernelModule;
