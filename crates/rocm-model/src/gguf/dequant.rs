//! Tensor data to f32 on the CPU.
//!
//! Plain types are converted here; the block formats are decoded by
//! `rocm_kernels::quant`, the one CPU codec of the project (checked there against the
//! specifications), so the loader and the GPU kernels' references agree by construction.

use half::{bf16, f16};
use rocm_kernels::quant::{
    dequantize_mxfp4_gguf, dequantize_q4_0, dequantize_q4_k, dequantize_q5_k, dequantize_q6_k,
    dequantize_q8_0,
};

use super::error::{GgufError, Result};
use super::tensor::TensorInfo;
use super::types::GgmlType;

/// Decodes `bytes` (the data of `info`) to `info.n_elements()` f32 values.
pub(crate) fn decode(info: &TensorInfo, bytes: &[u8]) -> Result<Vec<f32>> {
    let ty = info.ggml_type;
    let unsupported = || GgufError::UnsupportedType {
        tensor: info.name.clone(),
        type_id: ty.id(),
        type_name: ty.name(),
        operation: "decoding to f32",
    };
    // Refused before the output is allocated.
    if !ty.is_decodable() {
        return Err(unsupported());
    }
    let n = usize::try_from(info.n_elements)
        .ok()
        .filter(|n| n.checked_mul(size_of::<f32>()).is_some())
        .ok_or_else(|| GgufError::TooLargeForHost { tensor: info.name.clone(), bytes: info.n_bytes })?;
    let mut out = vec![0f32; n];
    let block = |f: fn(&[u8], &mut [f32]) -> Result<(), rocm_kernels::quant::QuantError>, out: &mut [f32]| {
        f(bytes, out).map_err(|source| GgufError::Decode { tensor: info.name.clone(), ty, source })
    };
    match ty {
        GgmlType::F32 => convert(bytes, &mut out, f32::from_le_bytes),
        GgmlType::F16 => convert(bytes, &mut out, |b| f16::from_le_bytes(b).to_f32()),
        GgmlType::BF16 => convert(bytes, &mut out, |b| bf16::from_le_bytes(b).to_f32()),
        GgmlType::Q8_0 => block(dequantize_q8_0, &mut out)?,
        GgmlType::Q4_0 => block(dequantize_q4_0, &mut out)?,
        GgmlType::MXFP4 => block(dequantize_mxfp4_gguf, &mut out)?,
        GgmlType::Q4_K => block(dequantize_q4_k, &mut out)?,
        GgmlType::Q5_K => block(dequantize_q5_k, &mut out)?,
        GgmlType::Q6_K => block(dequantize_q6_k, &mut out)?,
        // `is_decodable` lists exactly the types above.
        _ => return Err(unsupported()),
    }
    Ok(out)
}

/// Converts little-endian `N`-byte elements. The reader sized `bytes` as `out.len() * N`.
fn convert<const N: usize>(bytes: &[u8], out: &mut [f32], from: impl Fn([u8; N]) -> f32) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(N)) {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        *o = from(a);
    }
}
