//! NVIDIA: HIP's calls mapped onto the CUDA driver API (`libcuda.so.1`).
//!
//! Each backend retains the device's primary context (the one the CUDA runtime and PyTorch
//! share) and makes it current on whichever thread calls in. Streams are created non-blocking,
//! so they never wait on the legacy default stream; memory is stream-ordered
//! (`cuMemAllocAsync`/`cuMemFreeAsync`) where the device supports memory pools.

use std::ffi::{CString, c_void};
use std::sync::OnceLock;

use rocm_sys::cuda as sys;
use rocm_sys::cuda::{CUdevice_attribute as Attr, CUresult};

use super::{
    DeviceDriver, DevicePtr, DriverVersions, InitFailure, LaunchMode, RawEvent, RawFunction, RawGraph,
    RawGraphExec, RawModule, RawStream, aligned_image, c_string, function_not_found, load_once,
};
use crate::device::{CodeObjectKind, DeviceInfo, MatrixCores};
use crate::error::{DriverError, Error, Result};
use crate::platform::Platform;

/// The driver library, loaded and initialised once per process.
struct Cuda {
    lib: sys::CudaLibrary,
    extras: rocm_sys::CudaExtras,
}

fn cuda() -> Result<&'static Cuda> {
    static CUDA: OnceLock<Result<Cuda, InitFailure>> = OnceLock::new();
    load_once(
        &CUDA,
        // SAFETY: loads the vendor's driver library; bindings match its cuda.h.
        || unsafe { rocm_sys::load_cuda() }.map(|(lib, extras)| Cuda { lib, extras }),
        |cuda: &Cuda| {
            // SAFETY: cuInit takes flags (must be 0) and may be called from any thread.
            let r = unsafe { cuda.lib.cuInit(0) };
            cuda.check("cuInit", r)
        },
    )
}

impl Cuda {
    fn check(&self, call: &'static str, result: CUresult) -> Result<()> {
        if result == CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        let mut name = std::ptr::null();
        let mut description = std::ptr::null();
        // SAFETY: both calls write a pointer to a static string (or leave it null for an
        // unknown code); the result codes of these two calls are irrelevant here.
        let (name, description) = unsafe {
            self.lib.cuGetErrorName(result, &mut name);
            self.lib.cuGetErrorString(result, &mut description);
            (c_string(name), c_string(description))
        };
        Err(Error::Driver(DriverError {
            platform: Platform::Nvidia,
            call,
            code: result.0,
            name,
            description,
        }))
    }
}

/// Calls a driver function through the loaded library and checks its result.
macro_rules! call {
    ($cuda:expr, $f:ident($($arg:expr),* $(,)?)) => {{
        let cuda: &Cuda = $cuda;
        #[allow(unused_unsafe, clippy::macro_metavars_in_unsafe)]
        // SAFETY: out-parameters point at locals and handles are live (their owners' contract);
        // where more is needed (memory ranges, lifetimes, images) the call site says why.
        let r = unsafe { cuda.lib.$f($($arg),*) };
        cuda.check(stringify!($f), r)
    }};
}

pub(crate) fn device_count() -> Result<usize> {
    let cuda = cuda()?;
    let mut count = 0;
    call!(cuda, cuDeviceGetCount(&mut count))?;
    Ok(count.max(0) as usize)
}

/// What AMD's HIP for NVIDIA cannot do through HIP, done through the CUDA driver on the same
/// objects (there a `hipFunction_t` is a `CUfunction` and a HIP device ordinal a CUDA one).
/// HIP's module API has no call to let a kernel use more than 48 KiB of shared memory, and its
/// `hipDeviceGetAttribute` does not answer the opt-in limit; every other call stays HIP's.
pub(crate) mod blas;

pub(crate) mod for_hip {
    use super::*;

    /// The shared memory a block of device `ordinal` may opt in to.
    pub(crate) fn shared_mem_per_block_optin(ordinal: usize) -> Result<u32> {
        let cuda = cuda()?;
        let mut device = 0;
        call!(cuda, cuDeviceGet(&mut device, ordinal as i32))?;
        let mut value = 0;
        let attr = Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
        call!(cuda, cuDeviceGetAttribute(&mut value, attr, device))?;
        Ok(value.max(0) as u32)
    }

    /// Lets `function` (a `CUfunction` behind HIP's handle) use `bytes` of dynamic shared memory.
    pub(crate) fn set_max_dynamic_shared(function: RawFunction, bytes: u32) -> Result<()> {
        let cuda = cuda()?;
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        call!(cuda, cuFuncSetAttribute(function.0.cast(), attr, bytes as i32))
    }
}

#[derive(Debug)]
pub(crate) struct CudaDevice {
    cuda: &'static Cuda,
    ordinal: usize,
    device: sys::CUdevice,
    /// The device's primary context, retained on first use rather than at open: creating and
    /// destroying a context costs ~130 + ~70 ms that the driver serialises across every process
    /// of the host (measured on an H200 host with scripts/gpu_startup_probe.py), and opening a
    /// device only to read its facts (platform detection) needs none.
    context: OnceLock<ContextHandle>,
    /// Held while the context is being retained, so two threads retain it once.
    retaining: parking_lot::Mutex<()>,
    memory_pools: bool,
}

impl std::fmt::Debug for Cuda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("libcuda")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ContextHandle(sys::CUcontext);
// SAFETY: a CUcontext may be made current on any thread; the driver synchronises its state.
unsafe impl Send for ContextHandle {}
// SAFETY: as above.
unsafe impl Sync for ContextHandle {}

impl CudaDevice {
    pub(crate) fn open(ordinal: usize) -> Result<Self> {
        let cuda = cuda()?;
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::DeviceOutOfRange { ordinal, count });
        }
        let mut device = 0;
        call!(cuda, cuDeviceGet(&mut device, ordinal as i32))?;
        let mut this = CudaDevice {
            cuda,
            ordinal,
            device,
            context: OnceLock::new(),
            retaining: parking_lot::Mutex::new(()),
            memory_pools: false,
        };
        this.memory_pools = this.attribute(Attr::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0;
        Ok(this)
    }

    fn lib(&self) -> &'static Cuda {
        self.cuda
    }

    /// The device's default memory pool (the one `cuMemAllocAsync` draws from), where there
    /// are pools.
    fn default_pool(&self) -> Result<Option<sys::CUmemoryPool>> {
        if !self.memory_pools {
            return Ok(None);
        }
        self.bind()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        call!(self.lib(), cuDeviceGetDefaultMemPool(&mut pool, self.device))?;
        Ok(Some(pool))
    }

    /// The device's primary context, retained the first time it is asked for.
    fn context(&self) -> Result<sys::CUcontext> {
        if let Some(context) = self.context.get() {
            return Ok(context.0);
        }
        let _retaining = self.retaining.lock();
        if let Some(context) = self.context.get() {
            return Ok(context.0);
        }
        let mut context = std::ptr::null_mut();
        call!(self.lib(), cuDevicePrimaryCtxRetain(&mut context, self.device))?;
        let _ = self.context.set(ContextHandle(context));
        Ok(context)
    }

    /// Makes this device's primary context current on the calling thread, if it is not.
    fn bind(&self) -> Result<()> {
        let context = self.context()?;
        let mut current = std::ptr::null_mut();
        call!(self.lib(), cuCtxGetCurrent(&mut current))?;
        if current != context {
            call!(self.lib(), cuCtxSetCurrent(context))?;
        }
        Ok(())
    }

    fn attribute(&self, attr: Attr) -> Result<i32> {
        let mut value = 0;
        call!(self.lib(), cuDeviceGetAttribute(&mut value, attr, self.device))?;
        Ok(value)
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Releasing the primary context only drops our reference; other users keep theirs.
        if self.context.get().is_some() {
            let _ = call!(self.lib(), cuDevicePrimaryCtxRelease_v2(self.device));
        }
    }
}

impl DeviceDriver for CudaDevice {
    fn bind_thread(&self) -> Result<()> {
        self.bind()
    }

    fn info(&self) -> Result<DeviceInfo> {
        let mut name = [0 as std::os::raw::c_char; 256];
        call!(self.lib(), cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, self.device))?;
        // SAFETY: the driver wrote a NUL-terminated name into the buffer.
        let name = unsafe { c_string(name.as_ptr()) };
        let mut total = 0usize;
        call!(self.lib(), cuDeviceTotalMem_v2(&mut total, self.device))?;
        let a = |attr| self.attribute(attr).map(|v| v.max(0) as u32);
        let major = a(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = a(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        Ok(DeviceInfo {
            ordinal: self.ordinal,
            platform: Platform::Nvidia,
            code_objects: CodeObjectKind::Nvidia,
            name,
            arch: format!("sm_{major}{minor}"),
            compute_units: a(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            warp_size: a(Attr::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
            max_threads_per_block: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_grid: [
                a(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                a(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                a(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            shared_mem_per_block: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            shared_mem_per_block_optin: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            l2_cache_bytes: a(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
            total_memory: total as u64,
            pci_bus_id: a(Attr::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            stream_ordered_memory: self.memory_pools,
            matrix_cores: MatrixCores::for_nvidia_major(major),
            warpgroup_mma: (major, minor) == (9, 0),
            dependent_launch: major >= 9,
            cooperative_launch: a(Attr::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0,
            tensor_maps: major >= 9,
            drives_display: a(Attr::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT)? != 0,
        })
    }

    fn versions(&self) -> DriverVersions {
        let mut driver = 0;
        let _ = call!(self.lib(), cuDriverGetVersion(&mut driver));
        let fallbacks = if self.memory_pools {
            Vec::new()
        } else {
            vec!["the device reports no memory pools: frees wait for their stream".to_string()]
        };
        DriverVersions {
            driver,
            runtime: None,
            description: format!("CUDA driver {}.{}", driver / 1000, driver % 1000 / 10),
            library: rocm_sys::loaded_path(self.lib().lib.cuInit as *const c_void),
            fallbacks,
        }
    }

    fn mem_info(&self) -> Result<(u64, u64)> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        call!(self.lib(), cuMemGetInfo_v2(&mut free, &mut total))?;
        Ok((free as u64, total as u64))
    }

    fn stream_create(&self) -> Result<RawStream> {
        self.bind()?;
        let mut stream = std::ptr::null_mut();
        let flags = sys::CUstream_flags_enum::CU_STREAM_NON_BLOCKING.0;
        call!(self.lib(), cuStreamCreate(&mut stream, flags))?;
        Ok(RawStream(stream.cast()))
    }

    unsafe fn stream_destroy(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: the stream is live and never used again (stream_destroy's contract); queued work
        // finishes first.
        call!(self.lib(), cuStreamDestroy_v2(stream.0.cast()))
    }

    fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.lib(), cuStreamSynchronize(stream.0.cast()))
    }

    fn stream_query(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.lib(), cuStreamQuery(stream.0.cast()))
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: both handles are live: their owners (`Stream`, `Event`) outlive this call.
        call!(self.lib(), cuStreamWaitEvent(stream.0.cast(), event.0.cast(), 0))
    }

    fn stream_ordered_memory(&self) -> bool {
        self.memory_pools
    }

    fn alloc_async(&self, bytes: u64, stream: RawStream) -> Result<DevicePtr> {
        self.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        call!(self.lib(), cuMemAllocAsync(&mut ptr, bytes as usize, stream.0.cast()))?;
        Ok(ptr)
    }

    fn retain_freed_memory(&self, bytes: u64) -> Result<()> {
        let Some(pool) = self.default_pool()? else { return Ok(()) };
        let mut value: u64 = bytes;
        let attr = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        // SAFETY: the release threshold is a cuuint64_t, read from `value` during the call.
        call!(self.lib(), cuMemPoolSetAttribute(pool, attr, (&mut value as *mut u64).cast()))
    }

    fn release_freed_memory(&self) -> Result<()> {
        let Some(pool) = self.default_pool()? else { return Ok(()) };
        call!(self.lib(), cuMemPoolTrimTo(pool, 0))
    }

    fn alloc_sync(&self, bytes: u64) -> Result<DevicePtr> {
        self.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        call!(self.lib(), cuMemAlloc_v2(&mut ptr, bytes as usize))?;
        Ok(ptr)
    }

    unsafe fn free_async(&self, ptr: DevicePtr, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `ptr` came from the stream-ordered allocator on this device and is freed once
        // (free_async's contract).
        call!(self.lib(), cuMemFreeAsync(ptr, stream.0.cast()))
    }

    unsafe fn free_sync(&self, ptr: DevicePtr) -> Result<()> {
        self.bind()?;
        // SAFETY: `ptr` came from the plain allocator on this device, is freed once, and no work
        // uses it (free_sync's contract).
        call!(self.lib(), cuMemFree_v2(ptr))
    }

    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst..dst+bytes` is ours and `src` stays readable until the copy ran (copy_htod's
        // contract).
        call!(self.lib(), cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, stream.0.cast()))
    }

    unsafe fn copy_dtoh(&self, dst: *mut u8, src: DevicePtr, bytes: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `src..src+bytes` is ours and `dst` stays writable until the copy ran (copy_dtoh's
        // contract).
        call!(self.lib(), cuMemcpyDtoHAsync_v2(dst.cast(), src, bytes, stream.0.cast()))
    }

    unsafe fn copy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        self.bind()?;
        // SAFETY: both ranges are device memory this process owns (copy_dtod's contract).
        call!(self.lib(), cuMemcpyDtoDAsync_v2(dst, src, bytes, stream.0.cast()))
    }

    unsafe fn memset_d8(&self, dst: DevicePtr, value: u8, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst..dst+count` is ours (memset_d8's contract).
        call!(self.lib(), cuMemsetD8Async(dst, value, count, stream.0.cast()))
    }

    unsafe fn memset_d16(&self, dst: DevicePtr, value: u16, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst..dst+2*count` is ours, 2-byte aligned (memset_d16's contract).
        call!(self.lib(), cuMemsetD16Async(dst, value, count, stream.0.cast()))
    }

    unsafe fn memset_d32(&self, dst: DevicePtr, value: u32, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst..dst+4*count` is ours, 4-byte aligned (memset_d32's contract).
        call!(self.lib(), cuMemsetD32Async(dst, value, count, stream.0.cast()))
    }

    fn event_create(&self, timing: bool) -> Result<RawEvent> {
        self.bind()?;
        let mut event = std::ptr::null_mut();
        let flags = if timing {
            sys::CUevent_flags_enum::CU_EVENT_DEFAULT.0
        } else {
            sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING.0
        };
        call!(self.lib(), cuEventCreate(&mut event, flags))?;
        Ok(RawEvent(event.cast()))
    }

    unsafe fn event_destroy(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: the event is live and never used again (event_destroy's contract).
        call!(self.lib(), cuEventDestroy_v2(event.0.cast()))
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: both handles are live: their owners outlive this call.
        call!(self.lib(), cuEventRecord(event.0.cast(), stream.0.cast()))
    }

    fn event_synchronize(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        call!(self.lib(), cuEventSynchronize(event.0.cast()))
    }

    fn event_query(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        call!(self.lib(), cuEventQuery(event.0.cast()))
    }

    fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32> {
        self.bind()?;
        let mut ms = 0.0f32;
        // SAFETY: both handles are live timing events (owned by the caller).
        let r = unsafe { (self.lib().extras.event_elapsed_time)(&mut ms, start.0.cast(), end.0.cast()) };
        self.lib().check("cuEventElapsedTime", r)?;
        Ok(ms)
    }

    fn graph_support(&self) -> Result<()> {
        // The graph entry points are part of the driver API this runtime loads (CUDA 10 on).
        Ok(())
    }

    fn stream_begin_capture(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        // Relaxed: see `DeviceDriver::stream_begin_capture` for why not global or thread-local.
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        call!(self.lib(), cuStreamBeginCapture_v2(stream.0.cast(), mode))
    }

    fn stream_end_capture(&self, stream: RawStream) -> Result<RawGraph> {
        self.bind()?;
        let mut graph = std::ptr::null_mut();
        call!(self.lib(), cuStreamEndCapture(stream.0.cast(), &mut graph))?;
        Ok(RawGraph(graph.cast()))
    }

    fn stream_is_capturing(&self, stream: RawStream) -> Result<bool> {
        self.bind()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        call!(self.lib(), cuStreamIsCapturing(stream.0.cast(), &mut status))?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    fn graph_instantiate(&self, graph: RawGraph) -> Result<RawGraphExec> {
        self.bind()?;
        let mut exec = std::ptr::null_mut();
        call!(self.lib(), cuGraphInstantiateWithFlags(&mut exec, graph.0.cast(), 0))?;
        Ok(RawGraphExec(exec.cast()))
    }

    unsafe fn graph_launch(&self, exec: RawGraphExec, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: what the replay touches is still allocated (graph_launch's contract).
        call!(self.lib(), cuGraphLaunch(exec.0.cast(), stream.0.cast()))
    }

    unsafe fn graph_exec_destroy(&self, exec: RawGraphExec) -> Result<()> {
        self.bind()?;
        // SAFETY: the instance is live, idle and never used again (graph_exec_destroy's contract).
        call!(self.lib(), cuGraphExecDestroy(exec.0.cast()))
    }

    unsafe fn graph_destroy(&self, graph: RawGraph) -> Result<()> {
        self.bind()?;
        // SAFETY: the graph is live and never used again (graph_destroy's contract).
        call!(self.lib(), cuGraphDestroy(graph.0.cast()))
    }

    fn module_load(&self, image: &[u8]) -> Result<RawModule> {
        self.bind()?;
        let aligned = aligned_image(image);
        let mut module = std::ptr::null_mut();
        // SAFETY: `aligned` is an 8-byte-aligned copy of the whole image, alive for the call; the
        // driver copies what it keeps.
        call!(self.lib(), cuModuleLoadData(&mut module, aligned.as_ptr().cast()))?;
        Ok(RawModule(module.cast()))
    }

    unsafe fn module_unload(&self, module: RawModule) -> Result<()> {
        self.bind()?;
        // SAFETY: the module is live and neither it nor its functions are used again
        // (module_unload's contract).
        call!(self.lib(), cuModuleUnload(module.0.cast()))
    }

    fn module_function(&self, module: RawModule, name: &str) -> Result<RawFunction> {
        self.bind()?;
        let cname =
            CString::new(name).map_err(|_| Error::InvalidArgument(format!("kernel name {name:?}")))?;
        let mut function = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated and outlives the call; the module is live (its `Module`
        // owns it).
        call!(self.lib(), cuModuleGetFunction(&mut function, module.0.cast(), cname.as_ptr()))
            .map_err(|e| function_not_found(name, e))?;
        Ok(RawFunction(function.cast()))
    }

    fn function_param_sizes(&self, function: RawFunction) -> Option<Vec<usize>> {
        let get = self.lib().extras.func_get_param_info?;
        let mut sizes = Vec::new();
        // Parameters are numbered from 0; the first index past the end is an error.
        for index in 0..4096 {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: the function handle is live; out-pointers are valid.
            let r = unsafe { get(function.0.cast(), index, &mut offset, &mut size) };
            if r != CUresult::CUDA_SUCCESS {
                break;
            }
            sizes.push(size);
        }
        Some(sizes)
    }

    fn function_max_threads(&self, function: RawFunction) -> Result<u32> {
        let mut value = 0;
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
        call!(self.lib(), cuFuncGetAttribute(&mut value, attr, function.0.cast()))?;
        Ok(value.max(0) as u32)
    }

    fn function_static_shared(&self, function: RawFunction) -> Result<u32> {
        let mut value = 0;
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES;
        call!(self.lib(), cuFuncGetAttribute(&mut value, attr, function.0.cast()))?;
        Ok(value.max(0) as u32)
    }

    fn tensor_map_bytes_2d(
        &self,
        base: DevicePtr,
        rows: u64,
        row_bytes: u64,
        box_bytes: u32,
        box_rows: u32,
    ) -> Result<[u64; 16]> {
        let mut map = sys::CUtensorMap::default();
        let dims = [row_bytes, rows];
        let strides = [row_bytes]; // the innermost dimension's is the element size, implied
        let boxes = [box_bytes, box_rows];
        let element_strides = [1u32, 1];
        // The driver checks the address, sizes, strides and boxes against the hardware's rules
        // and refuses what breaks them (CUDA_ERROR_INVALID_VALUE).
        call!(
            self.lib(),
            cuTensorMapEncodeTiled(
                &mut map,
                sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
                2,
                base as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        )?;
        Ok(map.opaque)
    }

    fn function_set_max_dynamic_shared(&self, function: RawFunction, bytes: u32) -> Result<()> {
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        call!(self.lib(), cuFuncSetAttribute(function.0.cast(), attr, bytes as i32))
    }

    fn vendor_blas(&self, arch: &str) -> Result<(&'static str, Box<dyn crate::blas::VendorBlas>)> {
        self.bind()?;
        Ok(("cuBLAS", blas::create(arch)?))
    }

    unsafe fn launch(
        &self,
        function: RawFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: RawStream,
        params: &mut [*mut c_void],
        mode: LaunchMode,
    ) -> Result<()> {
        self.bind()?;
        // At most the two below, on the stack (this is every launch's path).
        let mut attributes = [sys::CUlaunchAttribute::default(), sys::CUlaunchAttribute::default()];
        let mut count = 0;
        if mode.dependent {
            // Programmatic stream serialisation: the kernel may be scheduled once every block
            // of the one ahead has called `griddepcontrol.launch_dependents` or exited, and
            // waits for that grid's completion and memory in `griddepcontrol.wait`. Captured
            // into a graph, the edge between the two nodes is a programmatic one.
            let mut attribute = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                ..Default::default()
            };
            attribute.value.programmaticStreamSerializationAllowed = 1;
            attributes[count] = attribute;
            count += 1;
        }
        if mode.cooperative {
            // The driver refuses a grid that cannot be resident at once
            // (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) instead of letting a grid-wide barrier
            // wait for blocks that never start.
            let mut attribute = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                ..Default::default()
            };
            attribute.value.cooperative = 1;
            attributes[count] = attribute;
            count += 1;
        }
        if count > 0 {
            let config = sys::CUlaunchConfig {
                gridDimX: grid[0],
                gridDimY: grid[1],
                gridDimZ: grid[2],
                blockDimX: block[0],
                blockDimY: block[1],
                blockDimZ: block[2],
                sharedMemBytes: shared_mem_bytes,
                hStream: stream.0.cast(),
                attrs: attributes.as_mut_ptr(),
                numAttrs: count as u32,
            };
            return call!(
                self.lib(),
                cuLaunchKernelEx(&config, function.0.cast(), params.as_mut_ptr(), std::ptr::null_mut())
            );
        }
        call!(
            self.lib(),
            cuLaunchKernel(
                function.0.cast(),
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem_bytes,
                stream.0.cast(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        )
    }
}
