//! A Llama-style transformer block on the GPU, and its f64 CPU reference (issue 7).
//!
//! - [`Architecture`]: `llama`, `qwen2` and `glm4` as llama.cpp writes them (RoPE pairing, QKV
//!   biases, GLM-4's post-norms and stacked gate/up).
//! - [`ModelConfig`]: sizes, norm epsilon and RoPE read from GGUF metadata,
//!   with RoPE scaling and Llama 3.1's per-pair frequency factors ([`ROPE_FREQS`]).
//! - [`Model`]: the weights of every layer uploaded once (projections as the file stores them,
//!   norms in the compute type `T`: f32, f16, bf16), and a forward pass over new tokens of one or
//!   more sequences through the paged KV cache ([`Model::prefill`], [`Model::decode_step`]).
//! - [`ReferenceModel`]: the same forward pass in f64 on the CPU from the same stored bytes, with
//!   a contiguous KV cache of its own; it can also round to `T` where the GPU stores, to estimate
//!   the error of a `T` pipeline without a GPU.
//! - [`Detokenizer`] and [`Tokenizer`]: token ids to text and text to token ids through the
//!   file's own vocabulary (`tokenizer.ggml.*`, SentencePiece and byte-level BPE).
//! - [`synthetic`]: random models written with [`crate::GgufWriter`] for tests and examples.
//!
//! `docs/model.md` describes the dataflow, the conventions (weight layout, RoPE pairing) and how
//! the GPU/CPU tolerances were chosen.

mod arch;
mod config;
mod decode_graph;
mod embedding;
mod error;
mod forward;
mod layer;
mod linear;
mod options;
mod reference;
mod rope_scaling;
mod sampling;
pub mod synthetic;
mod vocabulary;
mod weights;

#[cfg(test)]
mod arch_tests;
#[cfg(test)]
mod tests;

pub use arch::{Architecture, RopePairing};
pub use config::{MAX_RMS_EPS, ModelConfig};
pub use decode_graph::{DecodeGraph, DecodeWorkspace};
pub use embedding::{OUTPUT_HEAD, TOKEN_EMBEDDING};
pub use error::{ModelError, Result};
pub use forward::Model;
pub use options::{LoadOptions, Mxfp4Layout, Q4kLayout, Q8Layout};
pub use reference::{ReferenceModel, ReferenceSequence, Rounding};
pub use rope_scaling::{ROPE_FREQS, RopeScaling, llama3_freq_factors};
pub use sampling::{Sampler, Sampling};
pub use vocabulary::{
    Detokenizer, Encode, MERGES_KEY, MODEL_KEY, PRE_KEY, SCORES_KEY, TOKEN_TYPE_KEY, TOKENS_KEY, TextStream,
    Tokenizer, byte_of_char, char_of_byte,
};
pub use weights::{LayerTensor, OUTPUT_NORM, QKV_BIASES, tensor_name};
