//! rocBLAS (`librocblas`): the vendor GEMM on AMD.
//!
//! `rocblas_gemm_ex` / `rocblas_gemm_strided_batched_ex` with an f32 compute type for every
//! storage type, `D = C` in place. A handle's own device memory is shared by every stream it is
//! used on (and older releases ask for a stream synchronisation before switching streams for
//! that reason), so each call gets a user-owned workspace of its own: sized by rocBLAS's device
//! memory size query, allocated by the runtime on the call's stream.
//!
//! Not yet run on an AMD GPU: rocmforge's GPU hosts so far are NVIDIA. The declarations are
//! hand-written (`rocm_sys::rocblas` says from what).

use std::ffi::c_void;
use std::path::Path;
use std::sync::OnceLock;

use rocm_sys::rocblas as sys;
use rocm_sys::rocblas::{RocblasLibrary, rocblas_status};

use crate::blas::{ElementType, GemmCall, Transpose, VendorBlas};
use crate::driver::{InitFailure, RawStream, c_string, load_once};
use crate::error::{DriverError, Error, Result};
use crate::platform::Platform;

/// rocBLAS publishes no recommendation: 32 MiB, as cuBLAS on current GPUs, is what the
/// benchmarks preallocate. Each call still asks rocBLAS what it needs.
const RECOMMENDED_WORKSPACE: usize = 32 << 20;

/// The smallest workspace handed over, even when a call needs none: an empty one would send
/// the handle back to allocating memory itself, behind the ledger.
const MIN_WORKSPACE: usize = 256;

/// rocBLAS from the installation of the HIP runtime at `hip_library` (one per process, as HIP is).
fn library(hip_library: &Path) -> Result<&'static RocblasLibrary> {
    static ROCBLAS: OnceLock<Result<RocblasLibrary, InitFailure>> = OnceLock::new();
    // SAFETY: loads AMD's rocBLAS; the declarations follow its headers (see rocm_sys::rocblas).
    load_once(&ROCBLAS, || unsafe { rocm_sys::load_rocblas(hip_library) }, |_| Ok(()))
}

fn error(lib: &RocblasLibrary, call: &'static str, status: rocblas_status) -> Error {
    // SAFETY: returns a pointer to a static string for every code.
    let name = unsafe { c_string((lib.rocblas_status_to_string)(status)) };
    let description = sys::rocblas_status_description(status).to_string();
    Error::Driver(DriverError { platform: Platform::Amd, call, code: status.0, name, description })
}

fn check(lib: &RocblasLibrary, call: &'static str, status: rocblas_status) -> Result<()> {
    if status == rocblas_status::rocblas_status_success { Ok(()) } else { Err(error(lib, call, status)) }
}

struct RocblasHandle {
    lib: &'static RocblasLibrary,
    handle: sys::rocblas_handle,
}

impl std::fmt::Debug for RocblasHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RocblasHandle")
    }
}

// SAFETY: a rocBLAS handle may move between threads; `Blas` lets one thread at a time use it,
// under its lock, with the handle's device made current.
unsafe impl Send for RocblasHandle {}

impl Drop for RocblasHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from rocblas_create_handle and is destroyed once, here, by its
        // only owner; `Blas::drop` made its device current.
        let status = unsafe { (self.lib.rocblas_destroy_handle)(self.handle) };
        if let Err(e) = check(self.lib, "rocblas_destroy_handle", status) {
            tracing::warn!("destroying the rocBLAS handle: {e}");
        }
    }
}

/// A handle for the device current on the calling thread, from the rocBLAS beside the HIP
/// runtime at `hip_library`.
pub(crate) fn create(hip_library: &Path) -> Result<Box<dyn VendorBlas>> {
    let lib = library(hip_library)?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: the out-pointer is valid; the caller made the device current.
    check(lib, "rocblas_create_handle", unsafe { (lib.rocblas_create_handle)(&mut handle) })?;
    Ok(Box::new(RocblasHandle { lib, handle }))
}

fn data_type(ty: ElementType) -> sys::rocblas_datatype {
    match ty {
        ElementType::F32 => sys::rocblas_datatype::rocblas_datatype_f32_r,
        ElementType::F16 => sys::rocblas_datatype::rocblas_datatype_f16_r,
        ElementType::Bf16 => sys::rocblas_datatype::rocblas_datatype_bf16_r,
    }
}

fn operation(t: Transpose) -> sys::rocblas_operation {
    match t {
        Transpose::No => sys::rocblas_operation::rocblas_operation_none,
        Transpose::Yes => sys::rocblas_operation::rocblas_operation_transpose,
    }
}

impl RocblasHandle {
    /// The GEMM call itself, queued on the handle's current stream (or, inside a size query,
    /// only measured).
    ///
    /// # Safety
    /// As [`VendorBlas::gemm`], for the handle's current stream and workspace.
    unsafe fn call_gemm(&self, call: &GemmCall) -> (&'static str, rocblas_status) {
        let (lib, h) = (self.lib, self.handle);
        let p = &call.problem;
        let ty = data_type(call.ty);
        let compute = sys::rocblas_datatype::rocblas_datatype_f32_r;
        let algo = sys::rocblas_gemm_algo::rocblas_gemm_algo_standard;
        let (alpha, beta) = (p.alpha, p.beta);
        let alpha_ptr = (&alpha as *const f32).cast::<c_void>();
        let beta_ptr = (&beta as *const f32).cast::<c_void>();
        let (first, second) = (call.first as *const c_void, call.second as *const c_void);
        let c = call.c as *mut c_void;
        // SAFETY: per this function's contract; the scalars are read before it returns.
        unsafe {
            if p.batch == 1 {
                let status = (lib.rocblas_gemm_ex)(
                    h,
                    operation(p.trans_first),
                    operation(p.trans_second),
                    p.m,
                    p.n,
                    p.k,
                    alpha_ptr,
                    first,
                    ty,
                    p.ld_first,
                    second,
                    ty,
                    p.ld_second,
                    beta_ptr,
                    c,
                    ty,
                    p.ldc,
                    c,
                    ty,
                    p.ldc,
                    compute,
                    algo,
                    0,
                    sys::rocblas_gemm_flags_none,
                );
                ("rocblas_gemm_ex", status)
            } else {
                let status = (lib.rocblas_gemm_strided_batched_ex)(
                    h,
                    operation(p.trans_first),
                    operation(p.trans_second),
                    p.m,
                    p.n,
                    p.k,
                    alpha_ptr,
                    first,
                    ty,
                    p.ld_first,
                    p.stride_first,
                    second,
                    ty,
                    p.ld_second,
                    p.stride_second,
                    beta_ptr,
                    c,
                    ty,
                    p.ldc,
                    p.stride_c,
                    c,
                    ty,
                    p.ldc,
                    p.stride_c,
                    p.batch,
                    compute,
                    algo,
                    0,
                    sys::rocblas_gemm_flags_none,
                );
                ("rocblas_gemm_strided_batched_ex", status)
            }
        }
    }
}

impl VendorBlas for RocblasHandle {
    fn recommended_workspace(&self) -> usize {
        RECOMMENDED_WORKSPACE
    }

    fn workspace_bytes(&mut self, call: &GemmCall) -> Result<usize> {
        let (lib, h) = (self.lib, self.handle);
        // SAFETY: the handle is live and ours alone (Blas's lock). Between start and stop the
        // library only validates the call and records the memory it would need: nothing is
        // queued and no operand is touched.
        unsafe {
            check(
                lib,
                "rocblas_start_device_memory_size_query",
                (lib.rocblas_start_device_memory_size_query)(h),
            )?;
            let (name, status) = self.call_gemm(call);
            let mut size = 0usize;
            // Always stop the query, even when the call was refused, so the handle is usable.
            let stopped = (lib.rocblas_stop_device_memory_size_query)(h, &mut size);
            let measured = [
                rocblas_status::rocblas_status_success,
                rocblas_status::rocblas_status_size_increased,
                rocblas_status::rocblas_status_size_unchanged,
            ];
            if !measured.contains(&status) {
                return Err(error(lib, name, status));
            }
            check(lib, "rocblas_stop_device_memory_size_query", stopped)?;
            Ok(size.max(MIN_WORKSPACE))
        }
    }

    unsafe fn gemm(
        &mut self,
        stream: RawStream,
        call: &GemmCall,
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<()> {
        let (lib, h) = (self.lib, self.handle);
        // SAFETY: the handle is ours alone (Blas's lock); stream, workspace and operands are
        // live allocations of this device, per this function's contract.
        unsafe {
            check(lib, "rocblas_set_stream", (lib.rocblas_set_stream)(h, stream.0.cast()))?;
            check(
                lib,
                "rocblas_set_workspace",
                (lib.rocblas_set_workspace)(h, workspace as *mut c_void, workspace_bytes),
            )?;
            let (name, status) = self.call_gemm(call);
            check(lib, name, status)
        }
    }
}
