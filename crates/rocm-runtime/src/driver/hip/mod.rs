//! AMD: the HIP runtime (`libamdhip64`).
//!
//! HIP binds a device per thread (`hipSetDevice`), which every method re-establishes when the
//! calling thread has another device current. Streams are created non-blocking; memory is
//! stream-ordered (`hipMallocAsync`/`hipFreeAsync`) where the device supports memory pools.

use std::ffi::{CString, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

use rocm_sys::hip_facts::{self, HipRuntime, HipVersion};

use rocm_sys::hip as sys;
use rocm_sys::hip::{hipDeviceAttribute_t as Attr, hipError_t};

use super::{
    DeviceDriver, DevicePtr, DriverVersions, InitFailure, LaunchMode, RawEvent, RawFunction, RawGraph,
    RawGraphExec, RawModule, RawStream, aligned_image, c_string, function_not_found, load_once,
};
use crate::device::{CodeObjectKind, DeviceInfo, MatrixCores};
use crate::error::{DriverError, Error, Result};
use crate::platform::Platform;

struct Hip {
    lib: sys::HipLibrary,
    extras: rocm_sys::HipExtras,
    path: PathBuf,
    /// What `hipRuntimeGetVersion` reported, decoded: which release's symbols, attributes and
    /// properties layout apply, and whether the library drives AMD or NVIDIA GPUs.
    runtime: HipRuntime,
}

impl std::fmt::Debug for Hip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "libamdhip64 ({}, {})", self.runtime, self.path.display())
    }
}

fn hip() -> Result<&'static Hip> {
    static HIP: OnceLock<Result<Hip, InitFailure>> = OnceLock::new();
    load_once(
        &HIP,
        || {
            // SAFETY: loads the vendor's runtime library; bindings match its headers.
            let loaded = unsafe { rocm_sys::load_hip() }?;
            let mut version = 0;
            // SAFETY: hipRuntimeGetVersion only writes the int; it needs no hipInit first.
            let r = unsafe { loaded.lib.hipRuntimeGetVersion(&mut version) };
            let runtime = (r == hipError_t::hipSuccess).then(|| HipRuntime::decode(version)).flatten();
            let runtime = runtime.ok_or_else(|| rocm_sys::LoadError {
                library: "HIP runtime (libamdhip64)",
                tried: vec![(
                    loaded.path.display().to_string(),
                    format!("hipRuntimeGetVersion answered {} with {version}", r.0),
                )],
            })?;
            Ok(Hip { lib: loaded.lib, extras: loaded.extras, path: loaded.path, runtime })
        },
        |hip: &Hip| {
            // SAFETY: hipInit takes flags (must be 0).
            let r = unsafe { hip.lib.hipInit(0) };
            hip.check("hipInit", r)
        },
    )
}

impl Hip {
    fn check(&self, call: &'static str, result: hipError_t) -> Result<()> {
        if result == hipError_t::hipSuccess {
            return Ok(());
        }
        // SAFETY: both return pointers to static strings (an "unknown" text for odd codes).
        let (name, description) = unsafe {
            (c_string(self.lib.hipGetErrorName(result)), c_string(self.lib.hipGetErrorString(result)))
        };
        Err(Error::Driver(DriverError { platform: Platform::Amd, call, code: result.0, name, description }))
    }

    /// The stream-ordered allocator's entry points, when this release has them.
    fn pool_entries(&self) -> Option<(MallocAsync, FreeAsync)> {
        Some((self.extras.malloc_async?, self.extras.free_async?))
    }
}

/// The stream-capture and graph entry points, when the library exports every one of them.
#[derive(Clone, Copy)]
struct GraphEntries {
    begin_capture: unsafe extern "C" fn(sys::hipStream_t, sys::hipStreamCaptureMode) -> hipError_t,
    end_capture: unsafe extern "C" fn(sys::hipStream_t, *mut sys::hipGraph_t) -> hipError_t,
    is_capturing: unsafe extern "C" fn(sys::hipStream_t, *mut sys::hipStreamCaptureStatus) -> hipError_t,
    instantiate: unsafe extern "C" fn(
        *mut sys::hipGraphExec_t,
        sys::hipGraph_t,
        *mut sys::hipGraphNode_t,
        *mut std::os::raw::c_char,
        usize,
    ) -> hipError_t,
    launch: unsafe extern "C" fn(sys::hipGraphExec_t, sys::hipStream_t) -> hipError_t,
    exec_destroy: unsafe extern "C" fn(sys::hipGraphExec_t) -> hipError_t,
    destroy: unsafe extern "C" fn(sys::hipGraph_t) -> hipError_t,
}

impl Hip {
    /// The graph entry points, or [`Error::GraphsUnsupported`] naming what the library lacks.
    fn graph_entries(&self) -> Result<GraphEntries> {
        let e = &self.extras;
        let entries = || {
            Some(GraphEntries {
                begin_capture: e.stream_begin_capture?,
                end_capture: e.stream_end_capture?,
                is_capturing: e.stream_is_capturing?,
                instantiate: e.graph_instantiate?,
                launch: e.graph_launch?,
                exec_destroy: e.graph_exec_destroy?,
                destroy: e.graph_destroy?,
            })
        };
        entries().ok_or_else(|| {
            let since = hip_facts::symbol(hip_facts::GRAPH_SYMBOLS[0]).map(|s| s.since);
            let since = since
                .map_or(String::new(), |v| format!(" (AMD's runtime has them from {}.{})", v.major, v.minor));
            Error::GraphsUnsupported(format!(
                "{self:?} does not export all of {}{since}; AMD's HIP for NVIDIA defines them only for nvcc, \
                 and `cargo xtask hip-nvidia` builds one that exports them",
                hip_facts::GRAPH_SYMBOLS.join(", ")
            ))
        })
    }
}

mod blas;

/// `hipMemPoolAttrReleaseThreshold` (AMD's `hip_runtime_api.h`; CUDA's value too).
const HIP_MEM_POOL_ATTR_RELEASE_THRESHOLD: std::os::raw::c_int = 4;

type MallocAsync = unsafe extern "C" fn(*mut *mut c_void, usize, sys::hipStream_t) -> hipError_t;
type FreeAsync = unsafe extern "C" fn(*mut c_void, sys::hipStream_t) -> hipError_t;

macro_rules! call {
    ($hip:expr, $f:ident($($arg:expr),* $(,)?)) => {{
        let hip: &Hip = $hip;
        #[allow(unused_unsafe, clippy::macro_metavars_in_unsafe)]
        // SAFETY: out-parameters point at locals and handles are live (their owners' contract);
        // where more is needed (memory ranges, lifetimes, images) the call site says why.
        let r = unsafe { hip.lib.$f($($arg),*) };
        hip.check(stringify!($f), r)
    }};
}

pub(crate) fn device_count() -> Result<usize> {
    let hip = hip()?;
    let mut count = 0;
    call!(hip, hipGetDeviceCount(&mut count))?;
    Ok(count.max(0) as usize)
}

/// Why allocations cannot be stream-ordered, or `None` when they can: the release must export
/// the allocator (`exported`) and the device must report memory pools (`pools`; off by default
/// before ROCm 6.2, so 5.x-6.1 users get the synchronise-then-free fallback).
fn pool_fallback(runtime: HipRuntime, exported: bool, pools: bool) -> Option<String> {
    if !exported {
        let since = hip_facts::symbol("hipMallocAsync").map(|s| s.since).unwrap_or(runtime.api_version());
        return Some(format!(
            "{runtime} does not export hipMallocAsync/hipFreeAsync (added in HIP {}.{}): frees wait \
             for their stream",
            since.major, since.minor
        ));
    }
    if pools {
        return None;
    }
    let default_since = hip_facts::MEMORY_POOLS_DEFAULT_SINCE;
    let hint = match runtime {
        HipRuntime::Amd(v) if !v.at_least(default_since) => {
            format!(" (pools are on by default from ROCm {}.{})", default_since.major, default_since.minor)
        }
        _ => String::new(),
    };
    Some(format!("the device reports no memory pools{hint}: frees wait for their stream"))
}

#[derive(Debug)]
pub(crate) struct HipDevice {
    hip: &'static Hip,
    ordinal: i32,
    /// `None` when allocations are stream-ordered; otherwise why they are not.
    pool_fallback: Option<String>,
}

impl HipDevice {
    pub(crate) fn open(ordinal: usize) -> Result<Self> {
        let hip = hip()?;
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::DeviceOutOfRange { ordinal, count });
        }
        let mut this = HipDevice { hip, ordinal: ordinal as i32, pool_fallback: None };
        this.pool_fallback = this.memory_pool_fallback()?;
        Ok(this)
    }

    /// Why allocations cannot be stream-ordered on this device, or `None` when they can.
    fn memory_pool_fallback(&self) -> Result<Option<String>> {
        let exported = self.hip.pool_entries().is_some();
        let pools = exported && self.attribute(Attr::hipDeviceAttributeMemoryPoolsSupported)? != 0;
        Ok(pool_fallback(self.hip.runtime, exported, pools))
    }

    /// The stream-ordered allocator, where this device uses it.
    fn pool_entries(&self) -> Result<(MallocAsync, FreeAsync)> {
        match (&self.pool_fallback, self.hip.pool_entries()) {
            (None, Some(entries)) => Ok(entries),
            (why, _) => Err(Error::InvalidArgument(format!(
                "stream-ordered allocation is off on this device: {}",
                why.as_deref().unwrap_or("the allocator is not exported")
            ))),
        }
    }

    /// The device's default memory pool, where allocations are stream-ordered and the library
    /// exports the pool calls.
    fn default_pool(&self) -> Result<Option<*mut c_void>> {
        let Some(get_pool) =
            self.hip.extras.device_get_default_mem_pool.filter(|_| self.pool_fallback.is_none())
        else {
            return Ok(None);
        };
        let mut pool: *mut c_void = std::ptr::null_mut();
        // SAFETY: `pool` is a writable local; the ordinal is this device's.
        let r = unsafe { get_pool(&mut pool, self.ordinal) };
        self.hip.check("hipDeviceGetDefaultMemPool", r)?;
        Ok(Some(pool))
    }

    /// Makes this device current on the calling thread, if it is not.
    fn bind(&self) -> Result<()> {
        let mut current = -1;
        call!(self.hip, hipGetDevice(&mut current))?;
        if current != self.ordinal {
            call!(self.hip, hipSetDevice(self.ordinal))?;
        }
        Ok(())
    }

    fn attribute(&self, attr: Attr) -> Result<i32> {
        let mut value = 0;
        call!(self.hip, hipDeviceGetAttribute(&mut value, attr, self.ordinal))?;
        Ok(value)
    }

    /// The device's full target ID (`gfx90a:sramecc+:xnack-`), from the device-properties
    /// layout of the running release ([`hip_facts::props_layout`]).
    fn amd_target_id(&self, release: HipVersion) -> Result<String> {
        let layout = hip_facts::props_layout(release).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "HIP {release} is older than the oldest release rocmforge reads (5.0)"
            ))
        })?;
        let entry = match layout.symbol {
            "hipGetDevicePropertiesR0600" => self.hip.extras.get_device_properties_r0600,
            _ => self.hip.extras.get_device_properties,
        };
        let entry = entry.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} at {} does not export {}, which HIP {}.{} and later provide",
                self.hip.runtime,
                self.hip.path.display(),
                layout.symbol,
                layout.since.major,
                layout.since.minor
            ))
        })?;
        // Room for the layout and then some: a release that appended fields still writes only
        // what its own layout holds, and every layout keeps the name where the table says.
        let mut props = vec![0u64; (layout.size + 4096).div_ceil(8)];
        // SAFETY: `props` is larger than the layout this entry point fills.
        let r = unsafe { entry(props.as_mut_ptr().cast(), self.ordinal) };
        self.hip.check(layout.symbol, r)?;
        let bytes: &[u8] = bytemuck::cast_slice(&props);
        let name = &bytes[layout.gcn_arch_name..layout.gcn_arch_name + hip_facts::GCN_ARCH_NAME_LEN];
        let name = name.split(|b| *b == 0).next().unwrap_or_default();
        let name = String::from_utf8_lossy(name).into_owned();
        if !name.starts_with("gfx") {
            return Err(Error::InvalidArgument(format!(
                "{} reported the target name {name:?} for device {}, not a gfx target",
                self.hip.runtime, self.ordinal
            )));
        }
        Ok(name)
    }
}

impl DeviceDriver for HipDevice {
    fn bind_thread(&self) -> Result<()> {
        self.bind()
    }

    fn info(&self) -> Result<DeviceInfo> {
        let mut name = [0 as std::os::raw::c_char; 256];
        call!(self.hip, hipDeviceGetName(name.as_mut_ptr(), name.len() as i32, self.ordinal))?;
        // SAFETY: the runtime wrote a NUL-terminated name into the buffer.
        let name = unsafe { c_string(name.as_ptr()) };
        let mut total = 0usize;
        call!(self.hip, hipDeviceTotalMem(&mut total, self.ordinal))?;
        let a = |attr| self.attribute(attr).map(|v| v.max(0) as u32);
        let (arch, code_objects, matrix_cores, warpgroup_mma) = match self.hip.runtime {
            HipRuntime::Amd(release) => {
                let arch = self.amd_target_id(release)?;
                // CDNA's MFMA. Launchers decide what they run on it: flash attention's `Auto`
                // keeps the portable kernel until the MFMA kernel has passed the GPU tests on
                // AMD hardware (`FlashKernel::MatrixCores` runs it, and the GPU tests do).
                let cores = MatrixCores::for_amd_arch(&arch);
                (arch, CodeObjectKind::Amd, cores, false)
            }
            // AMD's HIP for NVIDIA: an NVIDIA GPU, named by its compute capability, that
            // loads NVIDIA code objects through hipModuleLoadData.
            HipRuntime::NvidiaCuda { .. } => {
                let major = a(Attr::hipDeviceAttributeComputeCapabilityMajor)?;
                let minor = a(Attr::hipDeviceAttributeComputeCapabilityMinor)?;
                let cores = MatrixCores::for_nvidia_major(major);
                (format!("sm_{major}{minor}"), CodeObjectKind::Nvidia, cores, (major, minor) == (9, 0))
            }
        };
        let pci_bus_id = a(Attr::hipDeviceAttributePciBusId)?;
        let drives_display = match self.hip.runtime {
            // AMD's runtime has no display watchdog to report; its sysfs says.
            HipRuntime::Amd(_) => {
                crate::display::amd_drives_display(std::path::Path::new("/sys/class/drm"), pci_bus_id)
            }
            HipRuntime::NvidiaCuda { .. } => a(Attr::hipDeviceAttributeKernelExecTimeout)? != 0,
        };
        let shared_mem_per_block = a(Attr::hipDeviceAttributeMaxSharedMemoryPerBlock)?;
        let optin = hip_facts::attribute_fact("hipDeviceAttributeSharedMemPerBlockOptin");
        let shared_mem_per_block_optin = match self.hip.runtime {
            _ if optin.is_some_and(|f| f.answered_by(self.hip.runtime)) => {
                a(Attr::hipDeviceAttributeSharedMemPerBlockOptin)?
            }
            // HIP for NVIDIA answers neither this nor the opt-in call: the CUDA driver does,
            // on the same device and kernels (`function_set_max_dynamic_shared`).
            HipRuntime::NvidiaCuda { .. } => {
                super::cuda::for_hip::shared_mem_per_block_optin(self.ordinal as usize)?
            }
            // AMD before 6.0: a block may use all of the LDS, which is what it reports.
            HipRuntime::Amd(_) => shared_mem_per_block,
        };
        Ok(DeviceInfo {
            ordinal: self.ordinal as usize,
            platform: Platform::Amd,
            code_objects,
            name,
            arch,
            compute_units: a(Attr::hipDeviceAttributeMultiprocessorCount)?,
            warp_size: a(Attr::hipDeviceAttributeWarpSize)?,
            max_threads_per_block: a(Attr::hipDeviceAttributeMaxThreadsPerBlock)?,
            max_grid: [
                a(Attr::hipDeviceAttributeMaxGridDimX)?,
                a(Attr::hipDeviceAttributeMaxGridDimY)?,
                a(Attr::hipDeviceAttributeMaxGridDimZ)?,
            ],
            shared_mem_per_block,
            shared_mem_per_block_optin,
            l2_cache_bytes: a(Attr::hipDeviceAttributeL2CacheSize)?,
            total_memory: total as u64,
            pci_bus_id,
            stream_ordered_memory: self.pool_fallback.is_none(),
            matrix_cores,
            warpgroup_mma,
            // HIP's launches have no programmatic dependencies (AMD's HIP for NVIDIA has none
            // either): a dependent launch is an ordinary one.
            dependent_launch: false,
            cooperative_launch: self.hip.extras.module_launch_cooperative_kernel.is_some()
                && a(Attr::hipDeviceAttributeCooperativeLaunch)? != 0,
            // HIP has no call that makes one (`tensor_map_bytes_2d` below refuses).
            tensor_maps: false,
            drives_display,
        })
    }

    fn versions(&self) -> DriverVersions {
        let (mut driver, mut runtime) = (0, 0);
        let _ = call!(self.hip, hipDriverGetVersion(&mut driver));
        let runtime = call!(self.hip, hipRuntimeGetVersion(&mut runtime)).ok().map(|()| runtime);
        DriverVersions {
            driver,
            runtime,
            description: self.hip.runtime.to_string(),
            library: Some(self.hip.path.clone()),
            fallbacks: self.pool_fallback.iter().cloned().collect(),
        }
    }

    fn mem_info(&self) -> Result<(u64, u64)> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        call!(self.hip, hipMemGetInfo(&mut free, &mut total))?;
        Ok((free as u64, total as u64))
    }

    fn stream_create(&self) -> Result<RawStream> {
        self.bind()?;
        let mut stream = std::ptr::null_mut();
        call!(self.hip, hipStreamCreateWithFlags(&mut stream, sys::hipStreamNonBlocking))?;
        Ok(RawStream(stream.cast()))
    }

    unsafe fn stream_destroy(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: the stream is live and never used again (stream_destroy's contract); queued work
        // finishes first.
        call!(self.hip, hipStreamDestroy(stream.0.cast()))
    }

    fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipStreamSynchronize(stream.0.cast()))
    }

    fn stream_query(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipStreamQuery(stream.0.cast()))
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: both handles are live: their owners (`Stream`, `Event`) outlive this call.
        call!(self.hip, hipStreamWaitEvent(stream.0.cast(), event.0.cast(), 0))
    }

    fn stream_ordered_memory(&self) -> bool {
        self.pool_fallback.is_none()
    }

    fn alloc_async(&self, bytes: u64, stream: RawStream) -> Result<DevicePtr> {
        let (malloc_async, _) = self.pool_entries()?;
        self.bind()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is writable and the stream is live (owned by the caller).
        let r = unsafe { malloc_async(&mut ptr, bytes as usize, stream.0.cast()) };
        self.hip.check("hipMallocAsync", r)?;
        Ok(ptr as DevicePtr)
    }

    fn retain_freed_memory(&self, bytes: u64) -> Result<()> {
        let (Some(pool), Some(set_attribute)) =
            (self.default_pool()?, self.hip.extras.mem_pool_set_attribute)
        else {
            return Ok(());
        };
        let mut value: u64 = bytes;
        // SAFETY: `pool` is this device's default pool; the release threshold is a uint64_t,
        // read from `value` during the call.
        let r = unsafe {
            set_attribute(pool, HIP_MEM_POOL_ATTR_RELEASE_THRESHOLD, (&mut value as *mut u64).cast())
        };
        self.hip.check("hipMemPoolSetAttribute", r)
    }

    fn release_freed_memory(&self) -> Result<()> {
        let (Some(pool), Some(trim_to)) = (self.default_pool()?, self.hip.extras.mem_pool_trim_to) else {
            return Ok(());
        };
        // SAFETY: `pool` is this device's default pool.
        let r = unsafe { trim_to(pool, 0) };
        self.hip.check("hipMemPoolTrimTo", r)
    }

    fn alloc_sync(&self, bytes: u64) -> Result<DevicePtr> {
        self.bind()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        call!(self.hip, hipMalloc(&mut ptr, bytes as usize))?;
        Ok(ptr as DevicePtr)
    }

    unsafe fn free_async(&self, ptr: DevicePtr, stream: RawStream) -> Result<()> {
        let (_, free_async) = self.pool_entries()?;
        self.bind()?;
        // SAFETY: per this method's contract, `ptr` came from hipMallocAsync on this device.
        let r = unsafe { free_async(ptr as *mut c_void, stream.0.cast()) };
        self.hip.check("hipFreeAsync", r)
    }

    unsafe fn free_sync(&self, ptr: DevicePtr) -> Result<()> {
        self.bind()?;
        // SAFETY: `ptr` came from the plain allocator on this device, is freed once, and no work
        // uses it (free_sync's contract).
        call!(self.hip, hipFree(ptr as *mut c_void))
    }

    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        self.bind()?;
        // HIP declares the source mutable; it is only read.
        // SAFETY: `dst..dst+bytes` is ours and `src` stays readable until the copy ran (copy_htod's
        // contract).
        call!(self.hip, hipMemcpyHtoDAsync(dst as *mut c_void, src as *mut c_void, bytes, stream.0.cast()))
    }

    unsafe fn copy_dtoh(&self, dst: *mut u8, src: DevicePtr, bytes: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `src..src+bytes` is ours and `dst` stays writable until the copy ran (copy_dtoh's
        // contract).
        call!(self.hip, hipMemcpyDtoHAsync(dst.cast(), src as *mut c_void, bytes, stream.0.cast()))
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
        call!(self.hip, hipMemcpyDtoDAsync(dst as *mut c_void, src as *mut c_void, bytes, stream.0.cast()))
    }

    unsafe fn memset_d8(&self, dst: DevicePtr, value: u8, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst..dst+count` is ours (memset_d8's contract).
        call!(self.hip, hipMemsetD8Async(dst as *mut c_void, value, count, stream.0.cast()))
    }

    unsafe fn memset_d16(&self, dst: DevicePtr, value: u16, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst..dst+2*count` is ours, 2-byte aligned (memset_d16's contract).
        call!(self.hip, hipMemsetD16Async(dst as *mut c_void, value, count, stream.0.cast()))
    }

    unsafe fn memset_d32(&self, dst: DevicePtr, value: u32, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst..dst+4*count` is ours, 4-byte aligned (memset_d32's contract).
        call!(self.hip, hipMemsetD32Async(dst as *mut c_void, value as i32, count, stream.0.cast()))
    }

    fn event_create(&self, timing: bool) -> Result<RawEvent> {
        self.bind()?;
        let mut event = std::ptr::null_mut();
        let flags = if timing { sys::hipEventDefault } else { sys::hipEventDisableTiming };
        call!(self.hip, hipEventCreateWithFlags(&mut event, flags))?;
        Ok(RawEvent(event.cast()))
    }

    unsafe fn event_destroy(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: the event is live and never used again (event_destroy's contract).
        call!(self.hip, hipEventDestroy(event.0.cast()))
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        self.bind()?;
        // SAFETY: both handles are live: their owners outlive this call.
        call!(self.hip, hipEventRecord(event.0.cast(), stream.0.cast()))
    }

    fn event_synchronize(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipEventSynchronize(event.0.cast()))
    }

    fn event_query(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipEventQuery(event.0.cast()))
    }

    fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32> {
        self.bind()?;
        let mut ms = 0.0f32;
        call!(self.hip, hipEventElapsedTime(&mut ms, start.0.cast(), end.0.cast()))?;
        Ok(ms)
    }

    fn graph_support(&self) -> Result<()> {
        self.hip.graph_entries().map(|_| ())
    }

    fn stream_begin_capture(&self, stream: RawStream) -> Result<()> {
        let graphs = self.hip.graph_entries()?;
        self.bind()?;
        // Relaxed: see `DeviceDriver::stream_begin_capture` for why not global or thread-local.
        let mode = sys::hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
        // SAFETY: the stream is live (its owner outlives this call).
        let r = unsafe { (graphs.begin_capture)(stream.0.cast(), mode) };
        self.hip.check("hipStreamBeginCapture", r)
    }

    fn stream_end_capture(&self, stream: RawStream) -> Result<RawGraph> {
        let graphs = self.hip.graph_entries()?;
        self.bind()?;
        let mut graph = std::ptr::null_mut();
        // SAFETY: the stream is live; `graph` is a writable local.
        let r = unsafe { (graphs.end_capture)(stream.0.cast(), &mut graph) };
        self.hip.check("hipStreamEndCapture", r)?;
        Ok(RawGraph(graph.cast()))
    }

    fn stream_is_capturing(&self, stream: RawStream) -> Result<bool> {
        let graphs = self.hip.graph_entries()?;
        self.bind()?;
        let mut status = sys::hipStreamCaptureStatus::hipStreamCaptureStatusNone;
        // SAFETY: the stream is live; `status` is a writable local.
        let r = unsafe { (graphs.is_capturing)(stream.0.cast(), &mut status) };
        self.hip.check("hipStreamIsCapturing", r)?;
        Ok(status != sys::hipStreamCaptureStatus::hipStreamCaptureStatusNone)
    }

    fn graph_instantiate(&self, graph: RawGraph) -> Result<RawGraphExec> {
        let graphs = self.hip.graph_entries()?;
        self.bind()?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: the graph is live (its owner outlives this call); no error node or log wanted.
        let r = unsafe {
            (graphs.instantiate)(&mut exec, graph.0.cast(), std::ptr::null_mut(), std::ptr::null_mut(), 0)
        };
        self.hip.check("hipGraphInstantiate", r)?;
        Ok(RawGraphExec(exec.cast()))
    }

    unsafe fn graph_launch(&self, exec: RawGraphExec, stream: RawStream) -> Result<()> {
        let graphs = self.hip.graph_entries()?;
        self.bind()?;
        // SAFETY: what the replay touches is still allocated (graph_launch's contract).
        let r = unsafe { (graphs.launch)(exec.0.cast(), stream.0.cast()) };
        self.hip.check("hipGraphLaunch", r)
    }

    unsafe fn graph_exec_destroy(&self, exec: RawGraphExec) -> Result<()> {
        let graphs = self.hip.graph_entries()?;
        self.bind()?;
        // SAFETY: the instance is live, idle and never used again (graph_exec_destroy's contract).
        let r = unsafe { (graphs.exec_destroy)(exec.0.cast()) };
        self.hip.check("hipGraphExecDestroy", r)
    }

    unsafe fn graph_destroy(&self, graph: RawGraph) -> Result<()> {
        let graphs = self.hip.graph_entries()?;
        self.bind()?;
        // SAFETY: the graph is live and never used again (graph_destroy's contract).
        let r = unsafe { (graphs.destroy)(graph.0.cast()) };
        self.hip.check("hipGraphDestroy", r)
    }

    fn module_load(&self, image: &[u8]) -> Result<RawModule> {
        self.bind()?;
        let aligned = aligned_image(image);
        let mut module = std::ptr::null_mut();
        // SAFETY: `aligned` is an 8-byte-aligned copy of the whole image, alive for the call; the
        // driver copies what it keeps.
        call!(self.hip, hipModuleLoadData(&mut module, aligned.as_ptr().cast()))?;
        Ok(RawModule(module.cast()))
    }

    unsafe fn module_unload(&self, module: RawModule) -> Result<()> {
        self.bind()?;
        // SAFETY: the module is live and neither it nor its functions are used again
        // (module_unload's contract).
        call!(self.hip, hipModuleUnload(module.0.cast()))
    }

    fn module_function(&self, module: RawModule, name: &str) -> Result<RawFunction> {
        self.bind()?;
        let cname =
            CString::new(name).map_err(|_| Error::InvalidArgument(format!("kernel name {name:?}")))?;
        let mut function = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated and outlives the call; the module is live (its `Module`
        // owns it).
        call!(self.hip, hipModuleGetFunction(&mut function, module.0.cast(), cname.as_ptr()))
            .map_err(|e| function_not_found(name, e))?;
        Ok(RawFunction(function.cast()))
    }

    fn function_param_sizes(&self, _function: RawFunction) -> Option<Vec<usize>> {
        // HIP exposes no parameter layout for module functions.
        None
    }

    fn function_max_threads(&self, function: RawFunction) -> Result<u32> {
        let mut value = 0;
        let attr = sys::hipFunction_attribute::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
        call!(self.hip, hipFuncGetAttribute(&mut value, attr, function.0.cast()))?;
        Ok(value.max(0) as u32)
    }

    fn function_static_shared(&self, function: RawFunction) -> Result<u32> {
        let mut value = 0;
        let attr = sys::hipFunction_attribute::HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES;
        call!(self.hip, hipFuncGetAttribute(&mut value, attr, function.0.cast()))?;
        Ok(value.max(0) as u32)
    }

    fn tensor_map_bytes_2d(&self, _: DevicePtr, _: u64, _: u64, _: u32, _: u32) -> Result<[u64; 16]> {
        Err(Error::InvalidArgument(
            "tensor map: the TMA engine's descriptors exist on NVIDIA's driver only, not through HIP".into(),
        ))
    }

    fn function_set_max_dynamic_shared(&self, function: RawFunction, bytes: u32) -> Result<()> {
        match self.hip.runtime {
            // AMD GPUs give a block all of the LDS it asks for up to the device limit; no opt-in.
            HipRuntime::Amd(_) => Ok(()),
            HipRuntime::NvidiaCuda { .. } => {
                self.bind()?;
                super::cuda::for_hip::set_max_dynamic_shared(function, bytes)
            }
        }
    }

    fn vendor_blas(&self, arch: &str) -> Result<(&'static str, Box<dyn crate::blas::VendorBlas>)> {
        self.bind()?;
        match self.hip.runtime {
            // rocBLAS from the folder of the HIP runtime that was loaded, never another install.
            HipRuntime::Amd(_) => Ok(("rocBLAS", blas::create(&self.hip.path)?)),
            HipRuntime::NvidiaCuda { .. } => Ok(("cuBLAS", super::cuda::blas::create(arch)?)),
        }
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
        if mode.cooperative {
            // Launch::launch refuses a cooperative launch first where the symbol is missing
            // (DeviceInfo::cooperative_launch); this only keeps the call total.
            let Some(cooperative) = self.hip.extras.module_launch_cooperative_kernel else {
                return Err(Error::InvalidArgument(format!(
                    "{} does not export hipModuleLaunchCooperativeKernel",
                    self.hip.runtime
                )));
            };
            // SAFETY: as hipModuleLaunchKernel below (this method's contract); HIP refuses a
            // grid whose blocks cannot all be resident at once.
            let r = unsafe {
                cooperative(
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
                )
            };
            return self.hip.check("hipModuleLaunchCooperativeKernel", r);
        }
        call!(
            self.hip,
            hipModuleLaunchKernel(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ordered_allocation_needs_the_symbols_and_the_pools() {
        let amd = |major, minor| HipRuntime::Amd(HipVersion { major, minor, patch: 0 });
        assert_eq!(pool_fallback(amd(6, 4), true, true), None);
        let old = pool_fallback(amd(5, 0), false, false).unwrap();
        assert!(
            old.starts_with("HIP 5.0.0 does not export hipMallocAsync/hipFreeAsync (added in HIP 5.1)"),
            "{old}"
        );
        let off = pool_fallback(amd(6, 1), true, false).unwrap();
        assert_eq!(
            off,
            "the device reports no memory pools (pools are on by default from ROCm 6.2): frees wait for their stream"
        );
        let off_new = pool_fallback(amd(6, 4), true, false).unwrap();
        assert_eq!(off_new, "the device reports no memory pools: frees wait for their stream");
        let nvidia = HipRuntime::NvidiaCuda { cuda_major: 11, cuda_minor: 8 };
        assert_eq!(pool_fallback(nvidia, true, true), None);
    }
}
