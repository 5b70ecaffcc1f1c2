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

/// The tensors of a layer (which ones an architecture has:
/// [`Architecture::layer_tensors`](super::arch::Architecture::layer_tensors)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerTensor {
    AttnNorm,
    AttnQ,
    AttnK,
    AttnV,
    /// `attn_q.bias`: added to the Q projection (qwen2, glm4).
    AttnQBias,
    AttnKBias,
    AttnVBias,
    AttnOutput,
    /// `post_attention_norm`: glm4's RMSNorm of the attention output, before the residual add.
    AttnPostNorm,
    FfnNorm,
    FfnGate,
    /// `ffn_up`; glm4's holds the gate rows then the up rows (`2 * ffn` rows).
    FfnUp,
    FfnDown,
    /// `post_ffw_norm`: glm4's RMSNorm of the MLP output, before the residual add.
    FfnPostNorm,
}

/// The QKV biases, in the order of their projections.
pub const QKV_BIASES: [LayerTensor; 3] =
    [LayerTensor::AttnQBias, LayerTensor::AttnKBias, LayerTensor::AttnVBias];

impl LayerTensor {
    /// A projection's `(out, in)`: its rows and row length (GGUF dims reversed).
    pub fn out_in(self, c: &ModelConfig) -> (usize, usize) {
        let dims = self.dims(c);
        match dims[..] {
            [inp, out] => (out as usize, inp as usize),
            _ => (dims[0] as usize, 1),
        }
    }

    /// A matrix (`y = x W^T`), not a vector (a norm weight or a bias).
    pub fn is_matrix(self) -> bool {
        matches!(
            self,
            LayerTensor::AttnQ
                | LayerTensor::AttnK
                | LayerTensor::AttnV
                | LayerTensor::AttnOutput
                | LayerTensor::FfnGate
                | LayerTensor::FfnUp
                | LayerTensor::FfnDown
        )
    }

    /// llama.cpp's name after `blk.N.` (`attn_q.weight`, `attn_q.bias`).
    pub fn suffix(self) -> &'static str {
        match self {
            LayerTensor::AttnNorm => "attn_norm.weight",
            LayerTensor::AttnQ => "attn_q.weight",
            LayerTensor::AttnK => "attn_k.weight",
            LayerTensor::AttnV => "attn_v.weight",
            LayerTensor::AttnQBias => "attn_q.bias",
            LayerTensor::AttnKBias => "attn_k.bias",
            LayerTensor::AttnVBias => "attn_v.bias",
            LayerTensor::AttnOutput => "attn_output.weight",
            LayerTensor::AttnPostNorm => "post_attention_norm.weight",
            LayerTensor::FfnNorm => "ffn_norm.weight",
            LayerTensor::FfnGate => "ffn_gate.weight",
            LayerTensor::FfnUp => "ffn_up.weight",
            LayerTensor::FfnDown => "ffn_down.weight",
            LayerTensor::FfnPostNorm => "post_ffw_norm.weight",
        }
    }

    /// GGUF dims (`[in, out]` for a matrix, `[n]` for a norm weight or a bias).
    pub fn dims(self, c: &ModelConfig) -> Vec<u64> {
        let d = |v: usize| v as u64;
        match self {
            LayerTensor::AttnNorm
            | LayerTensor::FfnNorm
            | LayerTensor::AttnPostNorm
            | LayerTensor::FfnPostNorm => {
                vec![d(c.hidden)]
            }
            LayerTensor::AttnQ => vec![d(c.hidden), d(c.q_dim())],
            LayerTensor::AttnK | LayerTensor::AttnV => vec![d(c.hidden), d(c.kv_dim())],
            LayerTensor::AttnQBias => vec![d(c.q_dim())],
            LayerTensor::AttnKBias | LayerTensor::AttnVBias => vec![d(c.kv_dim())],
            LayerTensor::AttnOutput => vec![d(c.q_dim()), d(c.hidden)],
            LayerTensor::FfnGate => vec![d(c.hidden), d(c.ffn)],
            LayerTensor::FfnUp if c.architecture.fused_gate_up() => vec![d(c.hidden), d(2 * c.ffn)],
            LayerTensor::FfnUp => vec![d(c.hidden), d(c.ffn)],
            LayerTensor::FfnDown => vec![d(c.ffn), d(c.hidden)],
        }
    }
}

/// A block whose output joins the residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Block {
    Attention,
    Mlp,
}

impl Block {
    /// The output projection and the post-norm (glm4's) of the block.
    pub fn output_and_post_norm(self) -> (LayerTensor, LayerTensor) {
        match self {
            Block::Attention => (LayerTensor::AttnOutput, LayerTensor::AttnPostNorm),
            Block::Mlp => (LayerTensor::FfnDown, LayerTensor::FfnPostNorm),
        }
    }
}

/// `blk.{layer}.{suffix}` (`blk.0.attn_q.weight`).
pub fn tensor_name(layer: usize, tensor: LayerTensor) -> String {
    format!("blk.{layer}.{}", tensor.suffix())
}

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

/// The tensors of layer `layer` that the architecture reads from this file: the required ones
/// and the optional ones present, each checked (name, dims, type). A layer with some of the QKV
/// biases but not all is refused naming the first missing one, and tensors of these families
/// that the block does not implement are refused naming them.
pub(crate) fn layer_tensors(file: &GgufFile, config: &ModelConfig, layer: usize) -> Result<Vec<LayerTensor>> {
    let arch = config.architecture;
    let mut present = Vec::new();
    for &t in arch.layer_tensors() {
        checked_info(file, &tensor_name(layer, t), &t.dims(config))?;
        present.push(t);
    }
    for &t in arch.optional_layer_tensors() {
        let name = tensor_name(layer, t);
        if file.tensor(&name).is_ok() {
            checked_info(file, &name, &t.dims(config))?;
            present.push(t);
        }
    }
    let biases = QKV_BIASES.iter().filter(|t| present.contains(t)).count();
    if let Some(&missing) = QKV_BIASES.iter().find(|t| biases > 0 && !present.contains(t)) {
        return Err(ModelError::MissingTensor { name: tensor_name(layer, missing) });
    }
    for (suffix, why) in arch.refused() {
        let name = format!("blk.{layer}.{suffix}");
        if file.tensor(&name).is_ok() {
            return Err(ModelError::BadTensor { name, reason: format!("{} model: {why}", arch.name()) });
        }
    }
    Ok(present)
}

/// Checks every tensor the model needs (all before anything is loaded, so a bad file costs no
/// upload). Returns each layer's tensors ([`layer_tensors`]) and whether there is an output norm.
pub(crate) fn check_model(file: &GgufFile, config: &ModelConfig) -> Result<(Vec<Vec<LayerTensor>>, bool)> {
    let layers = (0..config.layers).map(|l| layer_tensors(file, config, l)).collect::<Result<_>>()?;
    let has_output_norm = file.tensor(OUTPUT_NORM).is_ok();
    if has_output_norm {
        checked_info(file, OUTPUT_NORM, &[config.hidden as u64])?;
    }
    Ok((layers, has_output_norm))
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
