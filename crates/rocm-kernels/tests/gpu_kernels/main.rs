//! rocm-kernels' GPU tests: one module per kernel family, named like its source
//! (`kernels/softmax.hip` -> `softmax.rs` here), each comparing the kernel with its CPU
//! reference through the test kit.
//!
//! One test binary rather than one per family: every binary that links rocm-kernels embeds
//! every kernel for both platforms, and a binary per family multiplied that by ten in the GPU
//! archive (which has to travel to a GPU host within a size limit). Nextest still runs each
//! test in its own process.

mod attention;
mod axpy;
mod causal_mask;
mod dependent_launch;
mod dequant;
mod dequant_gemm;
mod fill;
mod flash_attention;
mod gemm;
mod graph;
mod kv_cache;
mod mxfp;
mod mxfp4_tiled;
mod paged_attention;
mod persistent_mlp;
mod q4k_tiled;
mod q8_0_tiled;
mod quant_gemm;
mod quant_matvec;
mod rmsnorm;
mod rope;
mod rope_into_cache;
mod softmax;
mod stream_read;
mod stream_rmw;
mod swiglu;
mod tiled_columns;

/// The bit patterns of `values`, for comparisons that must be exact (NaNs included).
pub(crate) fn f32_bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// [`f32_bits`] of any storage type's values, widened to f32 (exact).
pub(crate) fn bits<T: rocm_kernels::Dtype>(values: &[T]) -> Vec<u32> {
    values.iter().map(|v| v.to_f32().to_bits()).collect()
}

/// The message of a `KernelError::Shape` that `kernel`'s launcher returned; panics on anything
/// else (success, another error, another kernel's).
pub(crate) fn shape_message<T: std::fmt::Debug>(
    result: Result<T, rocm_kernels::KernelError>,
    kernel: &str,
) -> String {
    match result {
        Err(rocm_kernels::KernelError::Shape { kernel: k, message }) if k == kernel => message,
        other => panic!("expected a shape error from {kernel}, got {other:?}"),
    }
}
