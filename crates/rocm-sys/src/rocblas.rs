//! rocBLAS (`librocblas`): the few declarations of rocmforge's vendor GEMM on AMD.
//!
//! HAND-WRITTEN, NOT GENERATED. Unlike `hip.rs`, `cuda.rs` and `cublas.rs`, this file is not
//! produced by `cargo xtask bindgen` and `--check` does not cover it: rocBLAS's headers are not
//! packaged for Debian bookworm (where CI runs) nor on PyPI, so there is nothing to generate
//! from. It is written in the shape bindgen gives (integer newtypes for enums, a libloading
//! struct that resolves every symbol up front) so the runtime uses both kinds alike.
//!
//! Source of every declaration and value: rocBLAS's public headers (`rocblas-types.h`,
//! `rocblas-auxiliary.h`, `rocblas-functions.h`, ROCm 5.x to 7.x, where these have not changed)
//! and the rocBLAS API reference. rocBLAS is built LP64 by default: `rocblas_int` is `int32_t`
//! (the `_64` entry points take `int64_t`; they are not used here), `rocblas_stride` is
//! `int64_t`. C enums are passed as 32-bit integers on every supported ABI.
//!
//! If rocBLAS ever changes one of these, update this file by hand and say which release did.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, clippy::type_complexity)]

use std::os::raw::{c_char, c_void};

/// `rocblas_int` (LP64 build).
pub type rocblas_int = i32;
/// `rocblas_stride`: element distance between consecutive matrices of a strided batch.
pub type rocblas_stride = i64;

/// `struct _rocblas_handle`, opaque.
#[repr(C)]
#[derive(Debug)]
pub struct _rocblas_handle {
    _unused: [u8; 0],
}
/// `rocblas_handle`: the library context, created by `rocblas_create_handle`.
pub type rocblas_handle = *mut _rocblas_handle;

/// `struct ihipStream_t`, opaque (rocBLAS forward-declares HIP's stream type).
#[repr(C)]
#[derive(Debug)]
pub struct ihipStream_t {
    _unused: [u8; 0],
}
/// `hipStream_t`, the same handle the HIP runtime hands out.
pub type hipStream_t = *mut ihipStream_t;

/// `rocblas_status` (`rocblas-types.h`).
#[repr(transparent)]
#[derive(Debug, Copy, Clone, Hash, PartialEq, Eq)]
pub struct rocblas_status(pub u32);
impl rocblas_status {
    pub const rocblas_status_success: rocblas_status = rocblas_status(0);
    pub const rocblas_status_invalid_handle: rocblas_status = rocblas_status(1);
    pub const rocblas_status_not_implemented: rocblas_status = rocblas_status(2);
    pub const rocblas_status_invalid_pointer: rocblas_status = rocblas_status(3);
    pub const rocblas_status_invalid_size: rocblas_status = rocblas_status(4);
    pub const rocblas_status_memory_error: rocblas_status = rocblas_status(5);
    pub const rocblas_status_internal_error: rocblas_status = rocblas_status(6);
    pub const rocblas_status_perf_degraded: rocblas_status = rocblas_status(7);
    pub const rocblas_status_size_query_mismatch: rocblas_status = rocblas_status(8);
    pub const rocblas_status_size_increased: rocblas_status = rocblas_status(9);
    pub const rocblas_status_size_unchanged: rocblas_status = rocblas_status(10);
    pub const rocblas_status_invalid_value: rocblas_status = rocblas_status(11);
    pub const rocblas_status_continue: rocblas_status = rocblas_status(12);
    pub const rocblas_status_check_numerics_fail: rocblas_status = rocblas_status(13);
}

/// `rocblas_operation` (numbered as in CBLAS).
#[repr(transparent)]
#[derive(Debug, Copy, Clone, Hash, PartialEq, Eq)]
pub struct rocblas_operation(pub u32);
impl rocblas_operation {
    pub const rocblas_operation_none: rocblas_operation = rocblas_operation(111);
    pub const rocblas_operation_transpose: rocblas_operation = rocblas_operation(112);
    pub const rocblas_operation_conjugate_transpose: rocblas_operation = rocblas_operation(113);
}

/// `rocblas_datatype`: the real types used here (the enum has complex and integer ones too).
#[repr(transparent)]
#[derive(Debug, Copy, Clone, Hash, PartialEq, Eq)]
pub struct rocblas_datatype(pub u32);
impl rocblas_datatype {
    pub const rocblas_datatype_f16_r: rocblas_datatype = rocblas_datatype(150);
    pub const rocblas_datatype_f32_r: rocblas_datatype = rocblas_datatype(151);
    pub const rocblas_datatype_f64_r: rocblas_datatype = rocblas_datatype(152);
    pub const rocblas_datatype_bf16_r: rocblas_datatype = rocblas_datatype(168);
}

/// `rocblas_gemm_algo`.
#[repr(transparent)]
#[derive(Debug, Copy, Clone, Hash, PartialEq, Eq)]
pub struct rocblas_gemm_algo(pub u32);
impl rocblas_gemm_algo {
    pub const rocblas_gemm_algo_standard: rocblas_gemm_algo = rocblas_gemm_algo(0);
}

/// `rocblas_gemm_flags` (passed as `uint32_t`).
pub const rocblas_gemm_flags_none: u32 = 0;

/// The rocBLAS entry points rocmforge calls, resolved when the library is opened.
pub struct RocblasLibrary {
    __library: ::libloading::Library,
    /// `rocblas_status rocblas_create_handle(rocblas_handle* handle)`: binds the handle to the
    /// calling thread's current HIP device.
    pub rocblas_create_handle: unsafe extern "C" fn(handle: *mut rocblas_handle) -> rocblas_status,
    /// `rocblas_status rocblas_destroy_handle(rocblas_handle handle)`
    pub rocblas_destroy_handle: unsafe extern "C" fn(handle: rocblas_handle) -> rocblas_status,
    /// `rocblas_status rocblas_set_stream(rocblas_handle handle, hipStream_t stream)`
    pub rocblas_set_stream:
        unsafe extern "C" fn(handle: rocblas_handle, stream: hipStream_t) -> rocblas_status,
    /// `rocblas_status rocblas_set_workspace(rocblas_handle handle, void* addr, size_t size)`:
    /// a user-owned workspace, used instead of memory the handle manages.
    pub rocblas_set_workspace:
        unsafe extern "C" fn(handle: rocblas_handle, addr: *mut c_void, size: usize) -> rocblas_status,
    /// `rocblas_status rocblas_start_device_memory_size_query(rocblas_handle handle)`: until the
    /// matching stop, calls only record the workspace they need and queue no work.
    pub rocblas_start_device_memory_size_query:
        unsafe extern "C" fn(handle: rocblas_handle) -> rocblas_status,
    /// `rocblas_status rocblas_stop_device_memory_size_query(rocblas_handle handle, size_t* size)`
    pub rocblas_stop_device_memory_size_query:
        unsafe extern "C" fn(handle: rocblas_handle, size: *mut usize) -> rocblas_status,
    /// `const char* rocblas_status_to_string(rocblas_status status)`: the status's enum name.
    pub rocblas_status_to_string: unsafe extern "C" fn(status: rocblas_status) -> *const c_char,
    /// `rocblas_gemm_ex(handle, trans_a, trans_b, m, n, k, alpha, a, a_type, lda, b, b_type,
    /// ldb, beta, c, c_type, ldc, d, d_type, ldd, compute_type, algo, solution_index, flags)`:
    /// `D = alpha * op(A) op(B) + beta * C`, column-major.
    pub rocblas_gemm_ex: unsafe extern "C" fn(
        handle: rocblas_handle,
        trans_a: rocblas_operation,
        trans_b: rocblas_operation,
        m: rocblas_int,
        n: rocblas_int,
        k: rocblas_int,
        alpha: *const c_void,
        a: *const c_void,
        a_type: rocblas_datatype,
        lda: rocblas_int,
        b: *const c_void,
        b_type: rocblas_datatype,
        ldb: rocblas_int,
        beta: *const c_void,
        c: *const c_void,
        c_type: rocblas_datatype,
        ldc: rocblas_int,
        d: *mut c_void,
        d_type: rocblas_datatype,
        ldd: rocblas_int,
        compute_type: rocblas_datatype,
        algo: rocblas_gemm_algo,
        solution_index: i32,
        flags: u32,
    ) -> rocblas_status,
    /// `rocblas_gemm_strided_batched_ex`: as [`Self::rocblas_gemm_ex`] with a stride after
    /// each matrix's leading dimension and `batch_count` before `compute_type`.
    pub rocblas_gemm_strided_batched_ex: unsafe extern "C" fn(
        handle: rocblas_handle,
        trans_a: rocblas_operation,
        trans_b: rocblas_operation,
        m: rocblas_int,
        n: rocblas_int,
        k: rocblas_int,
        alpha: *const c_void,
        a: *const c_void,
        a_type: rocblas_datatype,
        lda: rocblas_int,
        stride_a: rocblas_stride,
        b: *const c_void,
        b_type: rocblas_datatype,
        ldb: rocblas_int,
        stride_b: rocblas_stride,
        beta: *const c_void,
        c: *const c_void,
        c_type: rocblas_datatype,
        ldc: rocblas_int,
        stride_c: rocblas_stride,
        d: *mut c_void,
        d_type: rocblas_datatype,
        ldd: rocblas_int,
        stride_d: rocblas_stride,
        batch_count: rocblas_int,
        compute_type: rocblas_datatype,
        algo: rocblas_gemm_algo,
        solution_index: i32,
        flags: u32,
    ) -> rocblas_status,
}

impl std::fmt::Debug for RocblasLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RocblasLibrary")
    }
}

impl RocblasLibrary {
    /// Resolves every entry point; the first one missing is the error.
    ///
    /// # Safety
    /// `library` is rocBLAS: each symbol is trusted to have the signature declared above.
    pub unsafe fn from_library(
        library: impl Into<::libloading::Library>,
    ) -> Result<Self, ::libloading::Error> {
        let __library = library.into();
        // SAFETY: the caller vouches for the signatures (see above); the symbols are copied out
        // as plain function pointers that stay valid while `__library` is held by the struct.
        unsafe {
            Ok(RocblasLibrary {
                rocblas_create_handle: *__library.get(b"rocblas_create_handle\0")?,
                rocblas_destroy_handle: *__library.get(b"rocblas_destroy_handle\0")?,
                rocblas_set_stream: *__library.get(b"rocblas_set_stream\0")?,
                rocblas_set_workspace: *__library.get(b"rocblas_set_workspace\0")?,
                rocblas_start_device_memory_size_query: *__library
                    .get(b"rocblas_start_device_memory_size_query\0")?,
                rocblas_stop_device_memory_size_query: *__library
                    .get(b"rocblas_stop_device_memory_size_query\0")?,
                rocblas_status_to_string: *__library.get(b"rocblas_status_to_string\0")?,
                rocblas_gemm_ex: *__library.get(b"rocblas_gemm_ex\0")?,
                rocblas_gemm_strided_batched_ex: *__library.get(b"rocblas_gemm_strided_batched_ex\0")?,
                __library,
            })
        }
    }
}

/// What each status means, in the words of `rocblas-types.h` (for error messages: the library
/// itself only names the status).
pub fn rocblas_status_description(status: rocblas_status) -> &'static str {
    match status.0 {
        0 => "success",
        1 => "handle not initialized, invalid or null",
        2 => "function is not implemented",
        3 => "invalid pointer argument",
        4 => "invalid size argument",
        5 => "failed internal memory allocation, copy or dealloc",
        6 => "other internal library failure",
        7 => "performance degraded due to low device memory",
        8 => "unmatched start/stop size query",
        9 => "queried device memory size increased",
        10 => "queried device memory size unchanged",
        11 => "passed argument not valid",
        12 => "nothing preventing function to proceed",
        13 => "a NaN, infinity or denormal value was found by the numerics check",
        _ => "unknown rocBLAS status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_the_documented_ones() {
        // rocblas-types.h: operations continue CBLAS's numbering, data types start at 150.
        assert_eq!(rocblas_operation::rocblas_operation_none.0, 111);
        assert_eq!(rocblas_operation::rocblas_operation_transpose.0, 112);
        assert_eq!(rocblas_datatype::rocblas_datatype_f16_r.0, 150);
        assert_eq!(rocblas_datatype::rocblas_datatype_f32_r.0, 151);
        assert_eq!(rocblas_datatype::rocblas_datatype_bf16_r.0, 168);
        assert_eq!(
            rocblas_status_description(rocblas_status::rocblas_status_invalid_size),
            "invalid size argument"
        );
    }

    #[test]
    fn a_library_without_the_symbols_is_refused() {
        // SAFETY: libc is on every Linux machine and exports none of rocBLAS's symbols, so
        // from_library fails on the first lookup and nothing is called.
        let lib = unsafe { ::libloading::Library::new("libc.so.6") }.expect("libc loads");
        // SAFETY: as above.
        let err = unsafe { RocblasLibrary::from_library(lib) }.expect_err("libc is not rocBLAS");
        assert!(err.to_string().contains("rocblas_create_handle"), "{err}");
    }
}
