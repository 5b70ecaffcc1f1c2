//! The one seam between rocmforge and a vendor stack.
//!
//! [`DeviceDriver`] is a device-bound view of one vendor API, with raw handles in and out. Its
//! two implementations ([`cuda`], [`hip`]) are the only code in the workspace that knows which
//! platform is underneath; everything above them is written once. Every method binds the
//! device (CUDA context / HIP device) to the calling thread first, so callers never do.
//!
//! The seam holds no policy: each method is one vendor call (plus binding the device). What to
//! do with the answers (whether a free may be queued or must wait, what "not ready" means, how a
//! failed library load is remembered) is decided once, above it.
//!
//! Methods that end a handle's life are `unsafe fn`: a handle is a plain `Copy` token, so only
//! the caller can promise that it is live, owned, and never used again. The safe owners
//! (`Stream`, `Event`, `Module`, `DeviceBuffer`) make that promise in their `Drop`.
//!
//! Nothing here synchronises the device: only streams and events.

pub(crate) mod cuda;
pub(crate) mod hip;

use std::ffi::c_void;
use std::sync::OnceLock;

use crate::device::DeviceInfo;
use crate::error::{DriverError, Error, Result};
use crate::platform::Platform;

/// Declares a `Copy` handle around a raw driver pointer that may cross threads.
macro_rules! raw_handle {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) struct $name(pub(crate) *mut c_void);
        // SAFETY: driver handles are opaque tokens that both APIs accept from any thread;
        // the runtime orders their use through streams and owns their lifetime.
        unsafe impl Send for $name {}
        // SAFETY: as above; the driver serialises concurrent calls on one handle itself.
        unsafe impl Sync for $name {}
    )*};
}
raw_handle!(
    /// `CUstream` / `hipStream_t`.
    RawStream,
    /// `CUevent` / `hipEvent_t`.
    RawEvent,
    /// `CUmodule` / `hipModule_t`.
    RawModule,
    /// `CUfunction` / `hipFunction_t`.
    RawFunction,
    /// `CUgraph` / `hipGraph_t`: a captured graph.
    RawGraph,
    /// `CUgraphExec` / `hipGraphExec_t`: a graph instantiated for launching.
    RawGraphExec,
);

/// A device address. Both platforms use a flat 64-bit device address space.
pub(crate) type DevicePtr = u64;

/// Device and driver facts the runtime reads once.
#[derive(Debug, Clone)]
pub(crate) struct DriverVersions {
    pub driver: i32,
    pub runtime: Option<i32>,
    /// The host library in words: `HIP 6.4.43484`, `CUDA driver 13.0`.
    pub description: String,
    /// The file the loader mapped, where it can tell.
    pub library: Option<std::path::PathBuf>,
    /// What the runtime does without on this device, and why (one line each).
    pub fallbacks: Vec<String>,
}

/// One device of one vendor stack. Implementations bind their device to the calling thread
/// in every method, so any thread may call any method.
pub(crate) trait DeviceDriver: Send + Sync + std::fmt::Debug {
    fn info(&self) -> Result<DeviceInfo>;
    /// Makes this device current on the calling thread (every other call does this itself);
    /// for vendor libraries that act on the thread's current device.
    fn bind_thread(&self) -> Result<()>;
    fn versions(&self) -> DriverVersions;
    /// (free, total) bytes of device memory, as the driver sees them now.
    fn mem_info(&self) -> Result<(u64, u64)>;

    fn stream_create(&self) -> Result<RawStream>;
    /// # Safety
    /// `stream` came from [`Self::stream_create`] on this device and is not used after this call
    /// (the driver lets its queued work finish first).
    unsafe fn stream_destroy(&self, stream: RawStream) -> Result<()>;
    fn stream_synchronize(&self, stream: RawStream) -> Result<()>;
    /// `Ok` when all work queued on the stream has completed; the driver's "not ready" error
    /// otherwise ([`DriverError::is_not_ready`]).
    fn stream_query(&self, stream: RawStream) -> Result<()>;
    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()>;

    /// Whether allocations can be ordered on a stream (memory pools): then [`Self::alloc_async`]
    /// and [`Self::free_async`] apply, else [`Self::alloc_sync`] and [`Self::free_sync`].
    fn stream_ordered_memory(&self) -> bool;
    /// Allocates `bytes` (> 0) ordered on `stream`; only where [`Self::stream_ordered_memory`].
    fn alloc_async(&self, bytes: u64, stream: RawStream) -> Result<DevicePtr>;
    /// Lets the device's default memory pool keep up to `bytes` of freed memory mapped for
    /// the next stream-ordered allocation. The drivers' default (0) gives it back at every
    /// synchronisation, after which each allocation maps memory again: ~50 us of host time per
    /// allocation on an H100 (docs/architecture.md, "The ledger and the guard"). `Ok` and nothing done where
    /// allocations are not stream-ordered or the library lacks the pool calls.
    fn retain_freed_memory(&self, bytes: u64) -> Result<()>;
    /// Gives the pool's freed memory (whose frees have run) back to the driver.
    fn release_freed_memory(&self) -> Result<()>;
    /// Allocates `bytes` (> 0) now.
    fn alloc_sync(&self, bytes: u64) -> Result<DevicePtr>;
    /// Frees `ptr` once the work queued on `stream` before this call has completed.
    ///
    /// # Safety
    /// `ptr` came from [`Self::alloc_async`] on this device, is freed once, and nothing queued
    /// after this call on any stream uses it.
    unsafe fn free_async(&self, ptr: DevicePtr, stream: RawStream) -> Result<()>;
    /// Frees `ptr` now.
    ///
    /// # Safety
    /// `ptr` came from [`Self::alloc_sync`] on this device, is freed once, and no queued or
    /// running work uses it any more (the caller waited for its streams).
    unsafe fn free_sync(&self, ptr: DevicePtr) -> Result<()>;

    /// # Safety
    /// `dst..dst+bytes` is device memory this process owns; `src..src+bytes` is readable host
    /// memory that stays valid and unchanged until the stream has executed the copy.
    unsafe fn copy_htod(&self, dst: DevicePtr, src: *const u8, bytes: usize, stream: RawStream)
    -> Result<()>;
    /// # Safety
    /// As [`Self::copy_htod`], with `dst` writable host memory valid until the copy completes.
    unsafe fn copy_dtoh(&self, dst: *mut u8, src: DevicePtr, bytes: usize, stream: RawStream) -> Result<()>;
    /// # Safety
    /// Both ranges are device memory this process owns.
    unsafe fn copy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: RawStream)
    -> Result<()>;
    /// # Safety
    /// `dst..dst+count` is device memory this process owns.
    unsafe fn memset_d8(&self, dst: DevicePtr, value: u8, count: usize, stream: RawStream) -> Result<()>;
    /// # Safety
    /// `dst..dst+2*count` is device memory this process owns, 2-byte aligned.
    unsafe fn memset_d16(&self, dst: DevicePtr, value: u16, count: usize, stream: RawStream) -> Result<()>;
    /// # Safety
    /// `dst..dst+4*count` is device memory this process owns, 4-byte aligned.
    unsafe fn memset_d32(&self, dst: DevicePtr, value: u32, count: usize, stream: RawStream) -> Result<()>;

    fn event_create(&self, timing: bool) -> Result<RawEvent>;
    /// # Safety
    /// `event` came from [`Self::event_create`] on this device and is not used after this call.
    unsafe fn event_destroy(&self, event: RawEvent) -> Result<()>;
    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()>;
    fn event_synchronize(&self, event: RawEvent) -> Result<()>;
    /// `Ok` when the work before the event has completed; "not ready" otherwise, as
    /// [`Self::stream_query`].
    fn event_query(&self, event: RawEvent) -> Result<()>;
    fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32>;

    /// Whether this driver can record and replay graphs: `Err(Error::GraphsUnsupported)`
    /// naming what it lacks when not (a HIP library built without the graph entry points).
    fn graph_support(&self) -> Result<()>;

    /// Starts capturing `stream`: work queued on it from now on is recorded into a graph
    /// instead of running. Both implementations capture in *relaxed* mode. Global mode (the
    /// vendors' default) makes "potentially unsafe" calls (a plain allocation or free, a
    /// synchronous copy) fail on every thread of the process while any capture is open, and
    /// many streams (parallel tests, other users of the backend) work in one process. Thread-
    /// local mode confines that to the recording thread, but there it still refuses harmless
    /// calls on *other* streams: a buffer of another stream dropped inside the recording
    /// closure would fail its `cuMemFree` on a device without memory pools and leak. The
    /// runtime refuses what must not happen on the capturing stream itself, exactly and with
    /// its own error (`Error::CaptureRefused`), so the driver's coarser check adds nothing.
    fn stream_begin_capture(&self, stream: RawStream) -> Result<()>;
    /// Ends the capture of `stream` and returns the graph it recorded; the driver's error when
    /// the capture was invalidated (no graph then). Either way the stream is no longer capturing.
    fn stream_end_capture(&self, stream: RawStream) -> Result<RawGraph>;
    /// Whether the driver has `stream` in a capture (active or invalidated). The runtime keeps
    /// its own flag per stream and asks this only to check that a capture really ended.
    fn stream_is_capturing(&self, stream: RawStream) -> Result<bool>;
    /// An executable instance of `graph` (which stays owned by the caller).
    fn graph_instantiate(&self, graph: RawGraph) -> Result<RawGraphExec>;
    /// Queues one replay of `exec` on `stream`.
    ///
    /// # Safety
    /// Every allocation the captured work touches is still allocated, and stays so until the
    /// stream has executed the replay.
    unsafe fn graph_launch(&self, exec: RawGraphExec, stream: RawStream) -> Result<()>;
    /// # Safety
    /// `exec` came from [`Self::graph_instantiate`] on this device, no replay of it is pending
    /// (its stream was synchronised), and it is not used after this call.
    unsafe fn graph_exec_destroy(&self, exec: RawGraphExec) -> Result<()>;
    /// # Safety
    /// `graph` came from [`Self::stream_end_capture`] on this device and is not used after this
    /// call (instances made from it stay valid).
    unsafe fn graph_destroy(&self, graph: RawGraph) -> Result<()>;

    /// Loads a code object (AMD) or fatbin/cubin/PTX (NVIDIA) image.
    fn module_load(&self, image: &[u8]) -> Result<RawModule>;
    /// # Safety
    /// `module` came from [`Self::module_load`] on this device, and neither it nor any function
    /// looked up in it is used after this call.
    unsafe fn module_unload(&self, module: RawModule) -> Result<()>;
    fn module_function(&self, module: RawModule, name: &str) -> Result<RawFunction>;
    /// Byte sizes of the kernel's parameters, where the driver can tell (CUDA 12.4+).
    fn function_param_sizes(&self, function: RawFunction) -> Option<Vec<usize>>;
    /// The kernel's own limit on threads per block (register pressure can lower it).
    fn function_max_threads(&self, function: RawFunction) -> Result<u32>;
    /// Bytes of statically declared shared memory the kernel uses.
    fn function_static_shared(&self, function: RawFunction) -> Result<u32>;
    /// Lets the kernel use `bytes` of dynamic shared memory (needed above 48 KiB on NVIDIA).
    fn function_set_max_dynamic_shared(&self, function: RawFunction, bytes: u32) -> Result<()>;

    /// The 128 bytes of a tensor map (CUDA's `CUtensorMap`) over `rows` rows of `row_bytes` bytes
    /// from `base`, read as unsigned bytes in boxes of `box_rows` rows x `box_bytes` bytes, zeros
    /// outside the rows (`crate::TensorMap`). Only the CUDA driver makes them.
    fn tensor_map_bytes_2d(
        &self,
        base: DevicePtr,
        rows: u64,
        row_bytes: u64,
        box_bytes: u32,
        box_rows: u32,
    ) -> Result<[u64; 16]>;

    /// A handle of the vendor BLAS for this device (`arch`: its `DeviceInfo::arch`), and the
    /// library's name. Which library follows the silicon, not the host API: cuBLAS takes the
    /// streams of AMD's HIP for NVIDIA too, as hipBLAS would hand them over.
    fn vendor_blas(&self, arch: &str) -> Result<(&'static str, Box<dyn crate::blas::VendorBlas>)>;

    /// `mode.dependent`: the launch may begin before the kernel ahead of it on `stream` ends
    /// (programmatic dependent launch; only where [`DeviceInfo::dependent_launch`] says so).
    /// `mode.cooperative`: every block is resident at once, or the launch is refused.
    ///
    /// # Safety
    /// `params` points at one readable value per kernel parameter, of the parameter's type,
    /// and the kernel's memory accesses stay inside allocations that outlive its execution. A
    /// `dependent` kernel waits for the grid ahead of it (`rf_wait_prior_grid`) before any
    /// access that kernel, or one before it, could conflict with.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        function: RawFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: RawStream,
        params: &mut [*mut c_void],
        mode: LaunchMode,
    ) -> Result<()>;
}

/// How a kernel is launched, besides its configuration ([`DeviceDriver::launch`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LaunchMode {
    /// Programmatic dependent launch ([`crate::Launch::dependent`]).
    pub dependent: bool,
    /// All blocks co-resident, or an error ([`crate::Launch::cooperative`]).
    pub cooperative: bool,
}

/// Opens device `ordinal` of `platform`.
pub(crate) fn open(platform: Platform, ordinal: usize) -> Result<Box<dyn DeviceDriver>> {
    match platform {
        Platform::Nvidia => Ok(Box::new(cuda::CudaDevice::open(ordinal)?)),
        Platform::Amd => Ok(Box::new(hip::HipDevice::open(ordinal)?)),
    }
}

/// Number of devices `platform` reports (loading its library on first use).
pub(crate) fn device_count(platform: Platform) -> Result<usize> {
    match platform {
        Platform::Nvidia => cuda::device_count(),
        Platform::Amd => hip::device_count(),
    }
}

/// Converts a NUL-terminated C string owned by the driver into a `String`.
///
/// # Safety
/// `ptr` is null or points at a NUL-terminated string.
pub(crate) unsafe fn c_string(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::from("(none)");
    }
    // SAFETY: per the contract.
    unsafe { std::ffi::CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

/// Whether a query answered "done" (`Ok(true)`) or "not yet" (`Ok(false)`): the one place a
/// driver's not-ready error becomes a boolean.
pub(crate) fn ready(query: Result<()>) -> Result<bool> {
    match query {
        Ok(()) => Ok(true),
        Err(Error::Driver(e)) if e.is_not_ready() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Why a vendor library is unusable in this process; kept so every later call reports it.
#[derive(Clone)]
pub(crate) enum InitFailure {
    Load(rocm_sys::LoadError),
    Init(DriverError),
}

impl InitFailure {
    /// The failure to remember for `error`, if it is one a later call would meet again (the
    /// library is missing or refused to start); other errors say nothing about the machine.
    pub(crate) fn remembered(error: &Error) -> Option<InitFailure> {
        match error {
            Error::Load(e) => Some(InitFailure::Load(e.clone())),
            Error::Driver(e) => Some(InitFailure::Init(e.clone())),
            _ => None,
        }
    }

    /// The error a call reports for this failure.
    pub(crate) fn error(&self) -> Error {
        match self {
            InitFailure::Load(e) => Error::Load(e.clone()),
            InitFailure::Init(e) => Error::Driver(e.clone()),
        }
    }
}

/// Loads a vendor library and initialises it, once per process: later calls get the same
/// library, or the same failure as a fresh [`Error`].
pub(crate) fn load_once<T>(
    cell: &'static OnceLock<Result<T, InitFailure>>,
    load: impl FnOnce() -> Result<T, rocm_sys::LoadError>,
    init: impl FnOnce(&T) -> Result<()>,
) -> Result<&'static T> {
    let state = cell.get_or_init(|| {
        let lib = load().map_err(InitFailure::Load)?;
        match init(&lib) {
            Ok(()) => Ok(lib),
            Err(e) => Err(InitFailure::remembered(&e)
                .unwrap_or_else(|| unreachable!("initialisation fails only with driver errors: {e}"))),
        }
    });
    state.as_ref().map_err(InitFailure::error)
}

/// A copy of a code-object image in 8-byte-aligned memory: both drivers parse fatbin and
/// offload-bundle headers in place, and `include_bytes!` data has no alignment.
pub(crate) fn aligned_image(image: &[u8]) -> Vec<u64> {
    let mut aligned = vec![0u64; image.len().div_ceil(8) + 1];
    bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..image.len()].copy_from_slice(image);
    aligned
}

/// A failed function lookup, named.
pub(crate) fn function_not_found(name: &str, error: Error) -> Error {
    match error {
        Error::Driver(source) => Error::FunctionNotFound { name: name.to_string(), source },
        other => other,
    }
}
