//! [`Architecture`]: the model families the block runs, each as llama.cpp's
//! `convert_hf_to_gguf.py` writes it and llama.cpp's `llama-model.cpp` reads it. They share one
//! pre-norm decoder layer and differ in the RoPE pairing, the QKV biases, GLM-4's extra norms and
//! its stacked gate/up projection:
//!
//! | arch | HF class | RoPE (llama.cpp type) | QKV biases | post-norms | gate / up |
//! |---|---|---|---|---|---|
//! | `llama` | `LlamaForCausalLM` | interleaved `(2i, 2i+1)` (NORM; the converter permutes q/k rows) | optional | none | `ffn_gate`, `ffn_up` |
//! | `qwen2` | `Qwen2ForCausalLM` | half-split `(i, i + d/2)` (NEOX; no permutation) | required | none | `ffn_gate`, `ffn_up` |
//! | `glm4` | `Glm4ForCausalLM` (GLM-4-0414) | interleaved over `rope.dimension_count` = half the head (NORM; no permutation) | optional | `post_attention_norm`, `post_ffw_norm` | `ffn_up` = `[gate; up]`, `2 * ffn` rows |
//!
//! "Optional" is llama.cpp's `TENSOR_NOT_REQUIRED`: read when present. Every real Qwen2
//! checkpoint has the biases (HF's `Qwen2Attention` builds q/k/v with `bias=True`), so a qwen2
//! file without them is refused rather than run as something else. Tensors of these families
//! that the block does not implement are refused naming them ([`Architecture::refused`]).

use super::error::{ModelError, Result};
use super::weights::{LayerTensor, QKV_BIASES};

/// The model families the block supports (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Qwen2,
    /// GLM-4-0414 (`Glm4ForCausalLM`), not the older ChatGLM layouts.
    Glm4,
}

/// Which elements of a head a RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePairing {
    /// `(2i, 2i + 1)`: llama.cpp's `LLAMA_ROPE_TYPE_NORM`, the kernels' `RopeStyle::GptJ`.
    Interleaved,
    /// `(i, i + d/2)`: `LLAMA_ROPE_TYPE_NEOX`, HF's `rotate_half`, the kernels' `RopeStyle::NeoX`.
    HalfSplit,
}

const LLAMA_TENSORS: [LayerTensor; 9] = [
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

const QWEN2_TENSORS: [LayerTensor; 12] = [
    LayerTensor::AttnNorm,
    LayerTensor::AttnQ,
    LayerTensor::AttnK,
    LayerTensor::AttnV,
    LayerTensor::AttnQBias,
    LayerTensor::AttnKBias,
    LayerTensor::AttnVBias,
    LayerTensor::AttnOutput,
    LayerTensor::FfnNorm,
    LayerTensor::FfnGate,
    LayerTensor::FfnUp,
    LayerTensor::FfnDown,
];

const GLM4_TENSORS: [LayerTensor; 10] = [
    LayerTensor::AttnNorm,
    LayerTensor::AttnQ,
    LayerTensor::AttnK,
    LayerTensor::AttnV,
    LayerTensor::AttnOutput,
    LayerTensor::AttnPostNorm,
    LayerTensor::FfnNorm,
    LayerTensor::FfnUp,
    LayerTensor::FfnDown,
    LayerTensor::FfnPostNorm,
];

impl Architecture {
    /// `general.architecture`'s value.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Glm4 => "glm4",
        }
    }

    pub(super) fn from_name(name: &str) -> Result<Self> {
        match name {
            "llama" => Ok(Architecture::Llama),
            "qwen2" => Ok(Architecture::Qwen2),
            "glm4" => Ok(Architecture::Glm4),
            other => Err(ModelError::UnsupportedArchitecture(other.to_string())),
        }
    }

    /// The tensors every layer must have, in the order a layer uses them.
    pub fn layer_tensors(self) -> &'static [LayerTensor] {
        match self {
            Architecture::Llama => &LLAMA_TENSORS,
            Architecture::Qwen2 => &QWEN2_TENSORS,
            Architecture::Glm4 => &GLM4_TENSORS,
        }
    }

    /// The tensors a layer may have (read when present).
    pub fn optional_layer_tensors(self) -> &'static [LayerTensor] {
        match self {
            Architecture::Llama | Architecture::Glm4 => &QKV_BIASES,
            Architecture::Qwen2 => &[],
        }
    }

    /// Layer tensors (suffixes of `blk.N.`) that real files of this family may carry and the
    /// block does not implement, with why: running without them would be silently wrong.
    pub(super) fn refused(self) -> &'static [(&'static str, &'static str)] {
        const COMMON: [(&str, &str); 2] = [
            ("attn_output.bias", "an attention output bias is not implemented"),
            ("attn_qkv.weight", "a fused QKV projection (ChatGLM's layout) is not implemented"),
        ];
        const NO_POST_NORMS: [(&str, &str); 4] = [
            COMMON[0],
            COMMON[1],
            ("post_attention_norm.weight", "post-norms are glm4's, not implemented for this architecture"),
            ("post_ffw_norm.weight", "post-norms are glm4's, not implemented for this architecture"),
        ];
        const GLM4: [(&str, &str); 3] = [
            COMMON[0],
            COMMON[1],
            (
                "ffn_gate.weight",
                "glm4 stores gate and up stacked in ffn_up; a separate ffn_gate is not its layout",
            ),
        ];
        match self {
            Architecture::Llama | Architecture::Qwen2 => &NO_POST_NORMS,
            Architecture::Glm4 => &GLM4,
        }
    }

    /// The RoPE pairing llama.cpp's `llama_model_rope_type` gives the architecture.
    pub fn rope_pairing(self) -> RopePairing {
        match self {
            Architecture::Llama | Architecture::Glm4 => RopePairing::Interleaved,
            Architecture::Qwen2 => RopePairing::HalfSplit,
        }
    }

    /// `ffn_up` holds the gate rows, then the up rows (`2 * ffn` rows; llama.cpp's
    /// `LLM_FFN_SWIGLU` on one tensor: silu of the first half times the second).
    pub fn fused_gate_up(self) -> bool {
        self == Architecture::Glm4
    }

    /// The attention and MLP outputs are RMS-normalised (`post_attention_norm`,
    /// `post_ffw_norm`) before they join the residual stream.
    pub fn post_norms(self) -> bool {
        self == Architecture::Glm4
    }

    /// Whether `rope.dimension_count` must be in the file: glm4 rotates part of the head (the
    /// converter writes `head_dim * partial_rotary_factor`, HF's default 0.5), while llama.cpp
    /// would rotate the whole head without the key; a file without it is ambiguous.
    pub(super) fn requires_rotary_dim(self) -> bool {
        self == Architecture::Glm4
    }
}
