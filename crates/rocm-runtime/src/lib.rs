//! rocmforge's safe GPU runtime.
//!
//! One API over two vendor stacks: AMD GPUs through the HIP runtime and NVIDIA GPUs through
//! the CUDA driver API, chosen at run time (`ROCMFORGE_PLATFORM=auto|amd|nvidia`). This crate
//! is the only place that knows which one is underneath.
//!
//! ```no_run
//! use rocm_runtime::Backend;
//! # fn main() -> rocm_runtime::Result<()> {
//! let backend = Backend::open(0)?; // the process's backend for device 0
//! let stream = backend.create_stream()?; // yours alone
//! let x = stream.upload(&[1.0f32, 2.0, 3.0])?; // stream-ordered, charged to the ledger
//! assert_eq!(x.to_vec()?, [1.0, 2.0, 3.0]);
//! # Ok(()) }
//! ```
//!
//! The rules it keeps (see `docs/architecture.md`):
//! - Nothing waits for the whole device: only streams we own are synchronised.
//! - Every allocation goes through the [`Ledger`]; the memory guard refuses requests past the
//!   budget with an error that states requested, budget, in use, free and total bytes.
//! - One [`Backend`] per device per process, `Send + Sync`; each user works on its own
//!   [`Stream`], and a buffer is used on the stream it belongs to.

mod backend;
mod blas;
mod budget;
mod buffer;
pub mod code_object;
mod device;
mod display;
mod driver;
mod error;
mod event;
pub mod fork;
mod graph;
mod launch;
mod ledger;
mod module;
mod platform;
mod stream;
mod tensor_map;

pub use backend::{Backend, DEFAULT_MEM_FRACTION, MEM_FRACTION_ENV, Platforms, detect};
pub use blas::{Blas, BlasElement, ColMajorGemm, ElementType, GemmDesc, Transpose};
pub use budget::{
    BUDGET_DIR_ENV, BudgetError, BudgetFigure, DESKTOP_FRACTION, DEVICE_FRACTION, GPU_BUDGET_ENV,
    GPU_BUDGET_FRACTION_ENV, Reservation, SLOT_BYTES, SharedBudget, budget_figure, default_budget,
};
pub use buffer::{DeviceBuffer, DeviceCopy};
pub use device::{CodeObjectKind, DeviceInfo, MatrixCores, MemoryInfo};
pub use error::{Bytes, DriverError, Error, OverBudget, Result};
pub use event::Event;
pub use graph::Graph;
pub use launch::{DEPENDENT_LAUNCH_ENV, Launch, LaunchConfig};
pub use ledger::{Account, Ledger, LiveAllocation};
pub use module::{Function, Module};
pub use platform::{PLATFORM_ENV, Platform, PlatformChoice};
pub use stream::Stream;
pub use tensor_map::TensorMap;

/// Set (to the tool's name) by `cargo xtask gpu-test --sanitize` while tests run under a
/// memory or race checker, where every launch costs orders of magnitude more. Defined here, below
/// both the task runner that sets it and the test kit that reads it (`rocm_testkit::sanitizer`),
/// so the name has one home and xtask need not depend on the test kit.
pub const SANITIZER_ENV: &str = "ROCMFORGE_SANITIZER";

/// Set to `off`, [`Blas::open`] refuses with [`Error::VendorBlasOff`], so every product takes the
/// portable kernels. `gpu-test --sanitize` sets it for racecheck and initcheck, which can check
/// only our kernels: initcheck does not see what cuBLAS's Hopper kernels write (it reported
/// reads of GEMM outputs as uninitialised), and racecheck faulted in a cuBLAS test even with no
/// kernel instrumented.
pub const VENDOR_BLAS_ENV: &str = "ROCMFORGE_VENDOR_BLAS";

/// Half-precision element types, re-exported so users and kernels agree on them.
pub use half::{bf16, f16};

#[cfg(test)]
mod tests {
    #[test]
    fn backend_and_buffers_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<super::Backend>();
        send_sync::<super::Stream>();
        send_sync::<super::DeviceBuffer<f32>>();
        send_sync::<super::Module>();
        send_sync::<super::Function>();
        send_sync::<super::Event>();
        // A graph may move between threads, but not be shared by them (see `graph`).
        fn send<T: Send>() {}
        send::<super::Graph<'static>>();
        send::<super::Graph<'static, Vec<super::DeviceBuffer<f32>>>>();
    }
}
