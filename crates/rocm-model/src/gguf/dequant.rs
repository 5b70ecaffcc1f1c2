//! Tensor data to f32 on the CPU.
//!
//! Plain types are converted here; the block formats are decoded by
//! `rocm_kernels::quant`, the one CPU codec of the project (checked there against the
//! specifications), so the loader and the GPU kernels' references agree by construction.
//!
//! The element count comes from the file, so no buffer is sized by it infallibly: a whole
//! decoded tensor is reserved with `try_reserve` ([`host_vec`]), and [`decode_chunked`] works in
//! a buffer whose size its caller chooses.

use half::{bf16, f16};
use rocm_kernels::quant::{
    QuantError, dequantize_mxfp4_gguf, dequantize_q4_0, dequantize_q4_k, dequantize_q5_k, dequantize_q6_k,
    dequantize_q8_0,
};

use super::error::{GgufError, Result};
use super::tensor::TensorInfo;
use super::types::GgmlType;

/// An empty vector with room for `n` elements of `T` (`element` names `T` in the error) for
/// tensor `tensor`, or [`GgufError::HostAllocation`] with the sizes where this machine cannot
/// provide it. Never aborts, whatever `n` the file claims.
pub(crate) fn host_vec<T>(tensor: &str, n: u64, element: &'static str) -> Result<Vec<T>> {
    let refused = |source| GgufError::HostAllocation {
        tensor: tensor.to_string(),
        elements: n,
        element,
        bytes: n.saturating_mul(size_of::<T>() as u64),
        source,
    };
    // A count past usize (on a 32-bit host) is more than any allocation could hold.
    let n = usize::try_from(n).map_err(|_| GgufError::TooLargeForHost {
        tensor: tensor.to_string(),
        bytes: n.saturating_mul(size_of::<T>() as u64),
    })?;
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(refused)?;
    Ok(out)
}

/// [`GgufError::UnsupportedType`] unless `info` is of a type [`decode_blocks`] decodes.
pub(crate) fn check_decodable(info: &TensorInfo) -> Result<()> {
    if info.ggml_type.is_decodable() { Ok(()) } else { Err(unsupported(info)) }
}

fn unsupported(info: &TensorInfo) -> GgufError {
    let ty = info.ggml_type;
    GgufError::UnsupportedType {
        tensor: info.name.clone(),
        type_id: ty.id(),
        type_name: ty.name(),
        operation: "decoding to f32",
    }
}

/// Decodes `bytes` (the data of `info`) to `info.n_elements()` f32 values, refusing a tensor
/// whose values do not fit in memory with [`GgufError::HostAllocation`].
pub(crate) fn decode(info: &TensorInfo, bytes: &[u8]) -> Result<Vec<f32>> {
    // Refused before the output is allocated.
    check_decodable(info)?;
    let mut out = host_vec::<f32>(&info.name, info.n_elements, "f32")?;
    // Reserved above (so the count fits usize, and this does not allocate again).
    out.resize(info.n_elements as usize, 0.0);
    decode_blocks(info, bytes, &mut out)?;
    Ok(out)
}

/// Decodes `bytes` (the data of `info`) a piece at a time, in order: each piece is at most
/// `chunk_elements` values (whole blocks, at least one block), decoded into one buffer of that
/// size that `sink` sees before the next piece overwrites it. Memory use is bounded by
/// `chunk_elements`, whatever the size of the tensor.
pub(crate) fn decode_chunked<E: From<GgufError>>(
    info: &TensorInfo,
    bytes: &[u8],
    chunk_elements: usize,
    mut sink: impl FnMut(&[f32]) -> Result<(), E>,
) -> Result<(), E> {
    check_decodable(info)?;
    let ty = info.ggml_type;
    // At most 256 elements and a few hundred bytes a block (`types.rs`).
    let (block, block_bytes) = (ty.block_size() as usize, ty.type_size() as usize);
    let blocks_per_piece = (chunk_elements / block).max(1);
    let blocks = bytes.len() / block_bytes;
    let buffer_len = blocks_per_piece.min(blocks) * block; // at most chunk_elements, or one block
    let mut buffer = host_vec::<f32>(&info.name, buffer_len as u64, "f32")?;
    buffer.resize(buffer_len, 0.0);
    for piece in bytes.chunks(blocks_per_piece.saturating_mul(block_bytes)) {
        let out = &mut buffer[..piece.len() / block_bytes * block];
        decode_blocks(info, piece, out)?;
        sink(out)?;
    }
    Ok(())
}

/// Decodes whole blocks of `info`'s type from `bytes` into `out` (`out.len()` values).
pub(crate) fn decode_blocks(info: &TensorInfo, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let ty = info.ggml_type;
    let block = |f: fn(&[u8], &mut [f32]) -> Result<(), QuantError>, out: &mut [f32]| {
        f(bytes, out).map_err(|source| GgufError::Decode { tensor: info.name.clone(), ty, source })
    };
    match ty {
        GgmlType::F32 => convert(bytes, out, f32::from_le_bytes),
        GgmlType::F16 => convert(bytes, out, |b| f16::from_le_bytes(b).to_f32()),
        GgmlType::BF16 => convert(bytes, out, |b| bf16::from_le_bytes(b).to_f32()),
        GgmlType::Q8_0 => block(dequantize_q8_0, out)?,
        GgmlType::Q4_0 => block(dequantize_q4_0, out)?,
        GgmlType::MXFP4 => block(dequantize_mxfp4_gguf, out)?,
        GgmlType::Q4_K => block(dequantize_q4_k, out)?,
        GgmlType::Q5_K => block(dequantize_q5_k, out)?,
        GgmlType::Q6_K => block(dequantize_q6_k, out)?,
        // `is_decodable` lists exactly the types above.
        _ => return Err(unsupported(info)),
    }
    Ok(())
}

/// Converts little-endian `N`-byte elements. The reader sized `bytes` as `out.len() * N`.
fn convert<const N: usize>(bytes: &[u8], out: &mut [f32], from: impl Fn([u8; N]) -> f32) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(N)) {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        *o = from(a);
    }
}
