//! AMD: the HIP runtime (`libamdhip64`).
//!
//! HIP binds a device per thread (`hipSetDevice`), which every method re-establishes when the
//! calling thread has another device current. Streams are created non-blocking; memory is
//! stream-ordered (`hipMallocAsync`/`hipFreeAsync`) where the device supports memory pools.

use std::ffi::{CString, c_void};
use std::sync::OnceLock;

use rocm_sys::hip as sys;
use rocm_sys::hip::{hipDeviceAttribute_t as Attr, hipError_t};

use super::{
    DeviceDriver, DevicePtr, DriverVersions, InitFailure, RawEvent, RawFunction, RawModule, RawStream,
    aligned_image, c_string, function_not_found, load_once,
};
use crate::device::{DeviceInfo, MatrixCores};
use crate::error::{DriverError, Error, Result};
use crate::platform::Platform;

struct Hip {
    lib: sys::HipLibrary,
}

impl std::fmt::Debug for Hip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("libamdhip64")
    }
}

fn hip() -> Result<&'static Hip> {
    static HIP: OnceLock<Result<Hip, InitFailure>> = OnceLock::new();
    load_once(
        &HIP,
        // SAFETY: loads the vendor's runtime library; bindings match its headers.
        || unsafe { rocm_sys::load_hip() }.map(|lib| Hip { lib }),
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
}

macro_rules! call {
    ($hip:expr, $f:ident($($arg:expr),* $(,)?)) => {{
        let hip: &Hip = $hip;
        #[allow(unused_unsafe, clippy::macro_metavars_in_unsafe)]
        // SAFETY: every use passes arguments valid for this entry point, as its caller states.
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

/// `gfx` target name from HIP's numeric `gcnArch` attribute (the name itself is only in the
/// device-properties struct, whose layout changed between ROCm 5 and 6).
fn gfx_name(gcn_arch: i32) -> String {
    match gcn_arch {
        910 => "gfx90a".to_string(),
        n => format!("gfx{n}"),
    }
}

#[derive(Debug)]
pub(crate) struct HipDevice {
    hip: &'static Hip,
    ordinal: i32,
    memory_pools: bool,
}

impl HipDevice {
    pub(crate) fn open(ordinal: usize) -> Result<Self> {
        let hip = hip()?;
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::DeviceOutOfRange { ordinal, count });
        }
        let mut this = HipDevice { hip, ordinal: ordinal as i32, memory_pools: false };
        this.memory_pools = this.attribute(Attr::hipDeviceAttributeMemoryPoolsSupported)? != 0;
        Ok(this)
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
        let arch = gfx_name(self.attribute(Attr::hipDeviceAttributeGcnArch)?);
        Ok(DeviceInfo {
            ordinal: self.ordinal as usize,
            platform: Platform::Amd,
            name,
            arch: arch.clone(),
            compute_units: a(Attr::hipDeviceAttributeMultiprocessorCount)?,
            warp_size: a(Attr::hipDeviceAttributeWarpSize)?,
            max_threads_per_block: a(Attr::hipDeviceAttributeMaxThreadsPerBlock)?,
            max_grid: [
                a(Attr::hipDeviceAttributeMaxGridDimX)?,
                a(Attr::hipDeviceAttributeMaxGridDimY)?,
                a(Attr::hipDeviceAttributeMaxGridDimZ)?,
            ],
            shared_mem_per_block: a(Attr::hipDeviceAttributeMaxSharedMemoryPerBlock)?,
            shared_mem_per_block_optin: a(Attr::hipDeviceAttributeSharedMemPerBlockOptin)
                .or_else(|_| a(Attr::hipDeviceAttributeMaxSharedMemoryPerBlock))?,
            l2_cache_bytes: a(Attr::hipDeviceAttributeL2CacheSize)?,
            total_memory: total as u64,
            pci_bus_id: a(Attr::hipDeviceAttributePciBusId)?,
            stream_ordered_memory: self.memory_pools,
            // CDNA's MFMA. Launchers decide what they run on it: flash attention's `Auto`
            // keeps the portable kernel until the MFMA kernel has passed the GPU tests on AMD
            // hardware (`FlashKernel::MatrixCores` runs it, and the GPU tests do).
            matrix_cores: MatrixCores::for_amd_arch(&arch),
        })
    }

    fn versions(&self) -> DriverVersions {
        let (mut driver, mut runtime) = (0, 0);
        let _ = call!(self.hip, hipDriverGetVersion(&mut driver));
        let runtime = call!(self.hip, hipRuntimeGetVersion(&mut runtime)).ok().map(|()| runtime);
        DriverVersions { driver, runtime }
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

    fn stream_destroy(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipStreamDestroy(stream.0.cast()))
    }

    fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipStreamSynchronize(stream.0.cast()))
    }

    fn stream_is_idle(&self, stream: RawStream) -> Result<bool> {
        self.bind()?;
        // SAFETY: the stream handle is live (owned by the caller).
        let r = unsafe { self.hip.lib.hipStreamQuery(stream.0.cast()) };
        if r == hipError_t::hipErrorNotReady {
            return Ok(false);
        }
        self.hip.check("hipStreamQuery", r).map(|()| true)
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipStreamWaitEvent(stream.0.cast(), event.0.cast(), 0))
    }

    fn alloc(&self, bytes: u64, stream: RawStream) -> Result<DevicePtr> {
        self.bind()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        if self.memory_pools {
            call!(self.hip, hipMallocAsync(&mut ptr, bytes as usize, stream.0.cast()))?;
        } else {
            call!(self.hip, hipMalloc(&mut ptr, bytes as usize))?;
        }
        Ok(ptr as DevicePtr)
    }

    fn free(&self, ptr: DevicePtr, stream: RawStream) -> Result<()> {
        self.bind()?;
        if self.memory_pools {
            call!(self.hip, hipFreeAsync(ptr as *mut c_void, stream.0.cast()))
        } else {
            // Without pools a free is immediate: wait for the owning stream's work first.
            self.stream_synchronize(stream)?;
            call!(self.hip, hipFree(ptr as *mut c_void))
        }
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
        call!(self.hip, hipMemcpyHtoDAsync(dst as *mut c_void, src as *mut c_void, bytes, stream.0.cast()))
    }

    unsafe fn copy_dtoh(&self, dst: *mut u8, src: DevicePtr, bytes: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
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
        call!(self.hip, hipMemcpyDtoDAsync(dst as *mut c_void, src as *mut c_void, bytes, stream.0.cast()))
    }

    unsafe fn memset_d8(&self, dst: DevicePtr, value: u8, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipMemsetD8Async(dst as *mut c_void, value, count, stream.0.cast()))
    }

    unsafe fn memset_d16(&self, dst: DevicePtr, value: u16, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipMemsetD16Async(dst as *mut c_void, value, count, stream.0.cast()))
    }

    unsafe fn memset_d32(&self, dst: DevicePtr, value: u32, count: usize, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipMemsetD32Async(dst as *mut c_void, value as i32, count, stream.0.cast()))
    }

    fn event_create(&self, timing: bool) -> Result<RawEvent> {
        self.bind()?;
        let mut event = std::ptr::null_mut();
        let flags = if timing { sys::hipEventDefault } else { sys::hipEventDisableTiming };
        call!(self.hip, hipEventCreateWithFlags(&mut event, flags))?;
        Ok(RawEvent(event.cast()))
    }

    fn event_destroy(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipEventDestroy(event.0.cast()))
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipEventRecord(event.0.cast(), stream.0.cast()))
    }

    fn event_synchronize(&self, event: RawEvent) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipEventSynchronize(event.0.cast()))
    }

    fn event_is_complete(&self, event: RawEvent) -> Result<bool> {
        self.bind()?;
        // SAFETY: the event handle is live (owned by the caller).
        let r = unsafe { self.hip.lib.hipEventQuery(event.0.cast()) };
        if r == hipError_t::hipErrorNotReady {
            return Ok(false);
        }
        self.hip.check("hipEventQuery", r).map(|()| true)
    }

    fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32> {
        self.bind()?;
        let mut ms = 0.0f32;
        call!(self.hip, hipEventElapsedTime(&mut ms, start.0.cast(), end.0.cast()))?;
        Ok(ms)
    }

    fn module_load(&self, image: &[u8]) -> Result<RawModule> {
        self.bind()?;
        let aligned = aligned_image(image);
        let mut module = std::ptr::null_mut();
        call!(self.hip, hipModuleLoadData(&mut module, aligned.as_ptr().cast()))?;
        Ok(RawModule(module.cast()))
    }

    fn module_unload(&self, module: RawModule) -> Result<()> {
        self.bind()?;
        call!(self.hip, hipModuleUnload(module.0.cast()))
    }

    fn module_function(&self, module: RawModule, name: &str) -> Result<RawFunction> {
        self.bind()?;
        let cname =
            CString::new(name).map_err(|_| Error::InvalidArgument(format!("kernel name {name:?}")))?;
        let mut function = std::ptr::null_mut();
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

    fn function_set_max_dynamic_shared(&self, _function: RawFunction, _bytes: u32) -> Result<()> {
        // AMD GPUs give a block all of the LDS it asks for up to the device limit; no opt-in.
        Ok(())
    }

    unsafe fn launch(
        &self,
        function: RawFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: RawStream,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.bind()?;
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
    #[test]
    fn gfx_names() {
        assert_eq!(super::gfx_name(908), "gfx908");
        assert_eq!(super::gfx_name(910), "gfx90a");
        assert_eq!(super::gfx_name(1030), "gfx1030");
    }
}
