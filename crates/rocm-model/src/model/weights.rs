//! Which tensors a model needs, their expected shapes and types, and loading them: to f64 on
//! the CPU (the reference), or to the GPU (projections as stored, norms in the compute type).
//!
//! Names are llama.cpp's (`blk.N.attn_q.weight`). A GGUF matrix's dims are `[in, out]` (`ne[0]`
//! is the row length), i.e. a row-major `[out, in]` matrix like an `nn.Linear` weight: the
//! projection is `y = x W^T` (`GemmDesc::linear`).

use std::sync::Arc;

use rocm_kernels::Dtype;
use rocm_kernels::gemm::GemmElement;
use rocm_kernels::quant::{BlockFormat, dequantize};
use rocm_runtime::{DeviceBuffer, Stream};

use super::config::ModelConfig;
use super::error::{ModelError, Result};
use super::linear::Linear;
use crate::gguf::{GgmlType, GgufFile, TensorInfo, host_vec};
use crate::lazy::DeviceTensors;

/// The final RMSNorm's weight: optional (a model without one returns the residual stream).
pub const OUTPUT_NORM: &str = "output_norm.weight";

/// The tensors of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerTensor {
    AttnNorm,
    AttnQ,
    AttnK,
    AttnV,
    AttnOutput,
    FfnNorm,
    FfnGate,
    FfnUp,
    FfnDown,
}

impl LayerTensor {
    pub const ALL: [LayerTensor; 9] = [
        LayerTensor::AttnNorm,
        LayerTensor::AttnQ,
        LayerTensor::AttnK,
        LayerTensor::AttnV,
        LayerTensor::AttnOutput,
        LayerTensor::FfnNorm,
        LayerTensor::FfnGate,
        LayerTensor::FfnUp,
        LayerTensor::FfnDown,
    ];

    /// The matrices, in the order a layer runs them.
    pub const PROJECTIONS: [LayerTensor; 7] = [
        LayerTensor::AttnQ,
        LayerTensor::AttnK,
        LayerTensor::AttnV,
        LayerTensor::AttnOutput,
        LayerTensor::FfnGate,
        LayerTensor::FfnUp,
        LayerTensor::FfnDown,
    ];

    /// A projection's `(out, in)`: its rows and row length (GGUF dims reversed).
    pub fn out_in(self, c: &ModelConfig) -> (usize, usize) {
        let dims = self.dims(c);
        match dims[..] {
            [inp, out] => (out as usize, inp as usize),
            _ => (dims[0] as usize, 1),
        }
    }

    /// llama.cpp's short name (`attn_q`).
    pub fn short_name(self) -> &'static str {
        match self {
            LayerTensor::AttnNorm => "attn_norm",
            LayerTensor::AttnQ => "attn_q",
            LayerTensor::AttnK => "attn_k",
            LayerTensor::AttnV => "attn_v",
            LayerTensor::AttnOutput => "attn_output",
            LayerTensor::FfnNorm => "ffn_norm",
            LayerTensor::FfnGate => "ffn_gate",
            LayerTensor::FfnUp => "ffn_up",
            LayerTensor::FfnDown => "ffn_down",
        }
    }

    /// GGUF dims (`[in, out]` for a matrix, `[n]` for a norm weight).
    pub fn dims(self, c: &ModelConfig) -> Vec<u64> {
        let d = |v: usize| v as u64;
        match self {
            LayerTensor::AttnNorm | LayerTensor::FfnNorm => vec![d(c.hidden)],
            LayerTensor::AttnQ => vec![d(c.hidden), d(c.q_dim())],
            LayerTensor::AttnK | LayerTensor::AttnV => vec![d(c.hidden), d(c.kv_dim())],
            LayerTensor::AttnOutput => vec![d(c.q_dim()), d(c.hidden)],
            LayerTensor::FfnGate | LayerTensor::FfnUp => vec![d(c.hidden), d(c.ffn)],
            LayerTensor::FfnDown => vec![d(c.ffn), d(c.hidden)],
        }
    }
}

/// `blk.{layer}.{short_name}.weight`.
pub fn tensor_name(layer: usize, tensor: LayerTensor) -> String {
    format!("blk.{layer}.{}.weight", tensor.short_name())
}

/// Tensors of real checkpoints of these families that this block does not implement: loading
/// such a file would silently compute something else, so it is refused.
const UNSUPPORTED: [&str; 5] =
    ["attn_q.bias", "attn_k.bias", "attn_v.bias", "post_attention_norm.weight", "post_ffw_norm.weight"];

/// The element types the loaders decode: the plain float types and the block formats the GPU
/// decodes ([`block_format`]).
fn supported(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || block_format(ty).is_some()
}

fn block_format(ty: GgmlType) -> Option<BlockFormat> {
    match ty {
        GgmlType::Q8_0 => Some(BlockFormat::Q8_0),
        GgmlType::Q4_0 => Some(BlockFormat::Q4_0),
        GgmlType::Q4_K => Some(BlockFormat::Q4K),
        GgmlType::Q5_K => Some(BlockFormat::Q5K),
        GgmlType::Q6_K => Some(BlockFormat::Q6K),
        GgmlType::MXFP4 => Some(BlockFormat::Mxfp4Gguf),
        _ => None,
    }
}

/// Looks up `name` and checks its dims and type.
pub(crate) fn checked_info<'f>(file: &'f GgufFile, name: &str, dims: &[u64]) -> Result<&'f TensorInfo> {
    // The file's index, not a scan: a file may hold 2^20 tensors, and this runs for each of
    // them.
    let info = file.tensor(name).map_err(|_| ModelError::MissingTensor { name: name.to_string() })?;
    if info.dims() != dims {
        return Err(ModelError::BadTensor {
            name: name.into(),
            reason: format!("GGUF dims {:?}, the config needs {dims:?} ([in, out])", info.dims()),
        });
    }
    if !supported(info.ggml_type()) {
        return Err(ModelError::BadTensor {
            name: name.into(),
            reason: format!(
                "type {} is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4 are)",
                info.ggml_type()
            ),
        });
    }
    Ok(info)
}

/// Checks every tensor the model needs (all before anything is loaded, so a bad file costs no
/// upload) and returns whether there is an output norm.
pub(crate) fn check_model(file: &GgufFile, config: &ModelConfig) -> Result<bool> {
    for layer in 0..config.layers {
        for t in LayerTensor::ALL {
            checked_info(file, &tensor_name(layer, t), &t.dims(config))?;
        }
        for suffix in UNSUPPORTED {
            let name = format!("blk.{layer}.{suffix}");
            if file.tensor(&name).is_ok() {
                return Err(ModelError::BadTensor {
                    name,
                    reason: "this block has no such tensor (QKV biases and post-norms are not implemented)"
                        .into(),
                });
            }
        }
    }
    let has_output_norm = file.tensor(OUTPUT_NORM).is_ok();
    if has_output_norm {
        checked_info(file, OUTPUT_NORM, &[config.hidden as u64])?;
    }
    Ok(has_output_norm)
}

/// Values decoded at a time when a weight is converted on the CPU: the f32 staging buffer stays
/// at 256 KiB whatever the tensor's size.
const DECODE_CHUNK: usize = 1 << 16;

/// The values of tensor `name` decoded on the CPU, each converted by `convert`, into a vector
/// reserved fallibly (`element` names `T` if the reservation is refused: the element count
/// comes from the file). The f32 values pass through a bounded buffer, not a second whole copy.
pub(crate) fn decode_host<T>(
    file: &GgufFile,
    name: &str,
    element: &'static str,
    convert: fn(f32) -> T,
) -> Result<Vec<T>> {
    let info = file.tensor(name)?;
    let mut out = host_vec::<T>(name, info.n_elements(), element)?;
    file.to_f32_chunked(name, DECODE_CHUNK, |piece| {
        // Within the reserved capacity: the pieces add up to the element count.
        out.extend(piece.iter().map(|&v| convert(v)));
        Ok::<_, ModelError>(())
    })?;
    Ok(out)
}

/// The tensor's values in f64, decoded on the CPU from the stored bytes (exact: every supported
/// type decodes exactly to f32).
pub(crate) fn load_host(file: &GgufFile, name: &str) -> Result<Vec<f64>> {
    decode_host(file, name, "f64", f64::from)
}

/// A norm weight (or any vector) in `T` on the GPU. Block formats are uploaded as blocks
/// (through `tensors`, the memory guard and the stream's account) and dequantised there straight
/// to `T`, then the blocks are evicted; F32/F16/BF16 are converted on the CPU (one rounding to
/// `T`, as a GPU conversion would do: there is no cast kernel) and uploaded.
pub(crate) fn load_device<T: Dtype>(tensors: &DeviceTensors, name: &str) -> Result<DeviceBuffer<T>> {
    let file: &Arc<GgufFile> = tensors.file();
    let stream: &Stream = tensors.stream();
    let info = file.tensor(name)?;
    let n = usize::try_from(info.n_elements())
        .map_err(|_| ModelError::BadTensor { name: name.into(), reason: "too many elements".into() })?;
    match block_format(info.ggml_type()) {
        Some(format) => {
            let blocks = tensors.get_or_upload(name)?;
            let mut out = stream.alloc::<T>(n)?;
            dequantize(format, &blocks, &mut out)?;
            // Frees are stream-ordered: the blocks live until the kernel above has read them.
            drop(blocks);
            tensors.evict(name);
            Ok(out)
        }
        None => {
            let values = decode_host(file, name, T::NAME, T::from_f32)?;
            Ok(stream.upload(&values)?)
        }
    }
}

/// A projection weight (`[out, in]`, GGUF dims `[in, out]`) on the GPU: a block format stays as
/// its blocks (uploaded through `tensors`), a plain type is converted to `T` (`load_device`).
pub(crate) fn load_linear<T: GemmElement>(
    tensors: &DeviceTensors,
    name: &str,
    out: usize,
    inp: usize,
) -> Result<Linear<T>> {
    let info = tensors.file().tensor(name)?;
    Ok(match block_format(info.ggml_type()) {
        Some(format) => Linear::Blocks { format, blocks: tensors.get_or_upload(name)?, out, inp },
        None => Linear::Dense { w: load_device(tensors, name)?, out, inp },
    })
}
