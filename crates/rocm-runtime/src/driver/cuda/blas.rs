//! cuBLAS (`libcublas`): the vendor GEMM on NVIDIA.
//!
//! `cublasGemmEx` / `cublasGemmStridedBatchedEx` with `CUBLAS_COMPUTE_32F`: f32 accumulation
//! for every storage type, tensor cores for f16/bf16 inputs, and full f32 (no TF32) for f32
//! inputs. Scalars are host f32 (the handle's default pointer mode). cuBLAS's default
//! workspace is shared by every stream the handle is used on, so each call sets its own
//! (`cublasSetWorkspace_v2` after `cublasSetStream_v2`, which resets it).

use std::ffi::c_void;
use std::sync::OnceLock;

use rocm_sys::cublas as sys;
use rocm_sys::cublas::{CublasLibrary, cublasStatus_t};

use crate::blas::{ElementType, GemmCall, Transpose, VendorBlas};
use crate::driver::{InitFailure, RawStream, c_string, load_once};
use crate::error::{DriverError, Error, Result};
use crate::platform::Platform;

fn library() -> Result<&'static CublasLibrary> {
    static CUBLAS: OnceLock<Result<CublasLibrary, InitFailure>> = OnceLock::new();
    // SAFETY: loads NVIDIA's cuBLAS; the bindings were generated from its headers.
    load_once(&CUBLAS, || unsafe { rocm_sys::load_cublas() }, |_| Ok(()))
}

fn check(lib: &CublasLibrary, call: &'static str, status: cublasStatus_t) -> Result<()> {
    if status == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: both return pointers to static strings ("unknown" texts for odd codes).
    let (name, description) =
        unsafe { (c_string(lib.cublasGetStatusName(status)), c_string(lib.cublasGetStatusString(status))) };
    Err(Error::Driver(DriverError { platform: Platform::Nvidia, call, code: status.0, name, description }))
}

/// NVIDIA's recommended workspace for `cublasSetWorkspace`: 32 MiB on Hopper and later (the
/// arch is `sm_<major><minor>`), 4 MiB on earlier GPUs.
pub(crate) fn recommended_workspace(arch: &str) -> usize {
    let major = arch.strip_prefix("sm_").and_then(|v| v.parse::<u32>().ok()).map_or(0, |v| v / 10);
    if major >= 9 { 32 << 20 } else { 4 << 20 }
}

/// A cuBLAS handle, created on the device current on the creating thread.
struct CublasHandle {
    lib: &'static CublasLibrary,
    handle: sys::cublasHandle_t,
    workspace: usize,
}

impl std::fmt::Debug for CublasHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CublasHandle")
    }
}

// SAFETY: a cuBLAS handle may be used from any thread (the library is thread safe); `Blas`
// lets one thread at a time use it, under its lock, with the device's context made current.
unsafe impl Send for CublasHandle {}

impl Drop for CublasHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from cublasCreate_v2 and is destroyed once, here, by its only
        // owner; `Blas::drop` made its device's context current. Work queued with it is ordered
        // on its streams, which cuBLAS synchronises before freeing the handle's memory.
        let status = unsafe { self.lib.cublasDestroy_v2(self.handle) };
        if let Err(e) = check(self.lib, "cublasDestroy_v2", status) {
            tracing::warn!("destroying the cuBLAS handle: {e}");
        }
    }
}

/// A handle for the device bound to the calling thread, whose arch is `arch`.
pub(crate) fn create(arch: &str) -> Result<Box<dyn VendorBlas>> {
    let lib = library()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: the out-pointer is valid; the caller made the device's context current.
    check(lib, "cublasCreate_v2", unsafe { lib.cublasCreate_v2(&mut handle) })?;
    Ok(Box::new(CublasHandle { lib, handle, workspace: recommended_workspace(arch) }))
}

fn data_type(ty: ElementType) -> sys::cudaDataType {
    match ty {
        ElementType::F32 => sys::cudaDataType::CUDA_R_32F,
        ElementType::F16 => sys::cudaDataType::CUDA_R_16F,
        ElementType::Bf16 => sys::cudaDataType::CUDA_R_16BF,
    }
}

fn operation(t: Transpose) -> sys::cublasOperation_t {
    match t {
        Transpose::No => sys::cublasOperation_t::CUBLAS_OP_N,
        Transpose::Yes => sys::cublasOperation_t::CUBLAS_OP_T,
    }
}

impl VendorBlas for CublasHandle {
    fn recommended_workspace(&self) -> usize {
        self.workspace
    }

    fn workspace_bytes(&mut self, _call: &GemmCall) -> Result<usize> {
        // cuBLAS picks algorithms that fit the workspace it is given: give it what NVIDIA
        // recommends for the device.
        Ok(self.workspace)
    }

    unsafe fn gemm(
        &mut self,
        stream: RawStream,
        call: &GemmCall,
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<()> {
        let (lib, h) = (self.lib, self.handle);
        let p = &call.problem;
        let ty = data_type(call.ty);
        let (alpha, beta) = (p.alpha, p.beta);
        let alpha_ptr = (&alpha as *const f32).cast::<c_void>();
        let beta_ptr = (&beta as *const f32).cast::<c_void>();
        let compute = sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
        let algo = sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        // SAFETY: the handle is live and used by this thread alone (Blas's lock); the stream is
        // a live stream of the handle's device; the workspace and operands are allocations the
        // caller vouches for (this function's contract). Scalars are read before returning.
        unsafe {
            check(lib, "cublasSetStream_v2", lib.cublasSetStream_v2(h, stream.0.cast()))?;
            check(
                lib,
                "cublasSetWorkspace_v2",
                lib.cublasSetWorkspace_v2(h, workspace as *mut c_void, workspace_bytes),
            )?;
            if p.batch == 1 {
                let status = lib.cublasGemmEx(
                    h,
                    operation(p.trans_first),
                    operation(p.trans_second),
                    p.m,
                    p.n,
                    p.k,
                    alpha_ptr,
                    call.first as *const c_void,
                    ty,
                    p.ld_first,
                    call.second as *const c_void,
                    ty,
                    p.ld_second,
                    beta_ptr,
                    call.c as *mut c_void,
                    ty,
                    p.ldc,
                    compute,
                    algo,
                );
                check(lib, "cublasGemmEx", status)
            } else {
                let status = lib.cublasGemmStridedBatchedEx(
                    h,
                    operation(p.trans_first),
                    operation(p.trans_second),
                    p.m,
                    p.n,
                    p.k,
                    alpha_ptr,
                    call.first as *const c_void,
                    ty,
                    p.ld_first,
                    p.stride_first,
                    call.second as *const c_void,
                    ty,
                    p.ld_second,
                    p.stride_second,
                    beta_ptr,
                    call.c as *mut c_void,
                    ty,
                    p.ldc,
                    p.stride_c,
                    p.batch,
                    compute,
                    algo,
                );
                check(lib, "cublasGemmStridedBatchedEx", status)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_follows_nvidia_recommendation() {
        assert_eq!(recommended_workspace("sm_90"), 32 << 20);
        assert_eq!(recommended_workspace("sm_100"), 32 << 20);
        assert_eq!(recommended_workspace("sm_80"), 4 << 20);
        assert_eq!(recommended_workspace("gfx90a"), 4 << 20);
    }
}
