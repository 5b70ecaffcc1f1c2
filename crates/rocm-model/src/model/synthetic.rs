//! Random models written with [`GgufWriter`], for tests and the `decode` example, and the
//! tolerances the GPU/CPU parity test holds them to.

use super::arch::Architecture;
use super::config::ModelConfig;
use super::embedding::{OUTPUT_HEAD, TOKEN_EMBEDDING};
use super::error::Result;
use super::rope_scaling::{ROPE_FREQS, RopeScaling, llama3_freq_factors};
use super::weights::{LayerTensor, OUTPUT_NORM, QKV_BIASES, tensor_name};
use crate::gguf::{GgmlType, GgufWriter};

/// The shape and storage types of a synthetic model: the configuration its GGUF metadata
/// describes, and how its tensors are generated.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    /// Written as the architecture's metadata keys; `rotary_dim` as `<arch>.rope.dimension_count`
    /// when it is not the whole head or the architecture requires the key (glm4).
    /// `rope_scaling` is written as `<arch>.rope.scaling.type` (and `.factor` for linear; nothing
    /// for `None`), and `rope_freqs`, when set, as the F32 tensor `rope_freqs.weight` of its
    /// length, as given (unchecked, so tests can write bad ones).
    pub config: ModelConfig,
    pub output_norm: bool,
    /// The type of tensor `t` of layer `l` is `types(l, t)`.
    pub types: fn(usize, LayerTensor) -> GgmlType,
    /// A token embedding and output head, when set.
    pub vocab: Option<SyntheticVocab>,
    pub seed: u64,
}

/// The vocabulary ends of a synthetic model.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticVocab {
    /// Rows of `token_embd.weight` (and `output.weight`).
    pub size: usize,
    /// The type both are stored in.
    pub ty: GgmlType,
    /// No `output.weight`: the head is the embedding (tied, as Llama 3.2 1B/3B and Qwen2
    /// 0.5B-1.5B are).
    pub tied: bool,
}

/// A mix of every supported type: each layer stores its matrices differently.
pub fn mixed_types(layer: usize, t: LayerTensor) -> GgmlType {
    use GgmlType::*;
    use LayerTensor::*;
    match (layer % 2, t) {
        (_, AttnNorm | FfnNorm | AttnPostNorm | FfnPostNorm | AttnQBias | AttnKBias | AttnVBias) => F32,
        (0, AttnQ) => F16,
        (0, AttnK) => BF16,
        (0, AttnV) => Q8_0,
        (0, AttnOutput) => MXFP4,
        (0, FfnGate) => Q8_0,
        (0, FfnUp) => F32,
        (0, FfnDown) => MXFP4,
        (_, AttnQ) => Q8_0,
        (_, AttnK) => MXFP4,
        (_, AttnV) => F32,
        (_, AttnOutput) => Q8_0,
        (_, FfnGate) => MXFP4,
        (_, FfnUp) => Q4_0,
        (_, FfnDown) => BF16,
    }
}

/// ggml's k-quants and the 32-element formats, each layer storing its matrices differently
/// (rows must be whole 256-element super-blocks: [`SyntheticSpec::small_kquants`]).
pub fn kquant_types(layer: usize, t: LayerTensor) -> GgmlType {
    use GgmlType::*;
    use LayerTensor::*;
    match (layer % 2, t) {
        (_, AttnNorm | FfnNorm | AttnPostNorm | FfnPostNorm | AttnQBias | AttnKBias | AttnVBias) => F32,
        (0, AttnQ | FfnGate) => Q4_K,
        (0, AttnK | FfnUp) => Q5_K,
        (0, AttnV | FfnDown) => Q6_K,
        (0, AttnOutput) => Q8_0,
        (_, AttnQ | FfnDown) => Q6_K,
        (_, AttnK | AttnOutput) => Q4_K,
        (_, AttnV | FfnGate) => Q5_K,
        (_, FfnUp) => Q4_0,
    }
}

impl SyntheticSpec {
    /// [`SyntheticSpec::small`] Llama widened so every matrix row is whole k-quant super-blocks
    /// (hidden 256, 4 query and 2 KV heads of 64, FFN 512), its matrices in [`kquant_types`].
    pub fn small_kquants() -> Self {
        let base = SyntheticSpec::small(Architecture::Llama);
        SyntheticSpec {
            config: ModelConfig { hidden: 256, ffn: 512, ..base.config },
            types: kquant_types,
            ..base
        }
    }

    /// The parity test's model: 2 layers, hidden 192, 4 query and 2 KV heads of 64 (so the
    /// attention width, 256, differs from the hidden size), FFN 352, mixed weight types. Each
    /// architecture as its real checkpoints are: qwen2 with QKV biases and base 1e6, glm4 with
    /// QKV biases, post-norms, the stacked gate/up and half of each head rotated.
    pub fn small(architecture: Architecture) -> Self {
        SyntheticSpec {
            config: ModelConfig {
                architecture,
                hidden: 192,
                layers: 2,
                ffn: 352,
                q_heads: 4,
                kv_heads: 2,
                head_dim: 64,
                rms_eps: 1e-5,
                rope_theta: if architecture == Architecture::Qwen2 { 1e6 } else { 10_000.0 },
                rotary_dim: if architecture == Architecture::Glm4 { 32 } else { 64 },
                rope_scaling: RopeScaling::None,
                rope_freqs: None,
            },
            output_norm: true,
            types: mixed_types,
            vocab: None,
            seed: 7,
        }
    }

    /// [`SyntheticSpec::small`] Llama with Llama 3.1's RoPE: base 500000 and the `llama3`
    /// scaling (factor 8, low_freq_factor 1, high_freq_factor 4, original context 8192), whose
    /// per-pair factors ([`llama3_freq_factors`]: 1 for pairs 0-14 of the 32, 8 for 18-31,
    /// between for 15-17) are written as `rope_freqs.weight`, and the scaling type as `llama3`.
    pub fn small_llama3() -> Self {
        let base = SyntheticSpec::small(Architecture::Llama);
        let rope_theta = 500_000.0;
        let factors = llama3_freq_factors(base.config.rotary_dim, rope_theta as f64, 8.0, 1.0, 4.0, 8192.0)
            .expect("valid llama3 parameters");
        SyntheticSpec {
            config: ModelConfig {
                rope_theta,
                rope_scaling: RopeScaling::Llama3,
                rope_freqs: Some(factors),
                ..base.config
            },
            ..base
        }
    }

    /// A writer holding the model's metadata only (its configuration's keys, and its
    /// `rope_freqs.weight` when it has one), for a caller that adds tensors of its own.
    pub fn metadata_writer(&self) -> Result<GgufWriter> {
        let config = &self.config;
        let arch = config.architecture.name();
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", arch)?;
        w.add_metadata(format!("{arch}.embedding_length"), config.hidden as u32)?;
        w.add_metadata(format!("{arch}.block_count"), config.layers as u32)?;
        w.add_metadata(format!("{arch}.feed_forward_length"), config.ffn as u32)?;
        w.add_metadata(format!("{arch}.attention.head_count"), config.q_heads as u32)?;
        w.add_metadata(format!("{arch}.attention.head_count_kv"), config.kv_heads as u32)?;
        w.add_metadata(format!("{arch}.attention.key_length"), config.head_dim as u32)?;
        w.add_metadata(format!("{arch}.attention.value_length"), config.head_dim as u32)?;
        w.add_metadata(format!("{arch}.attention.layer_norm_rms_epsilon"), config.rms_eps)?;
        w.add_metadata(format!("{arch}.rope.freq_base"), config.rope_theta)?;
        if config.rotary_dim != config.head_dim || config.architecture.requires_rotary_dim() {
            w.add_metadata(format!("{arch}.rope.dimension_count"), config.rotary_dim as u32)?;
        }
        match config.rope_scaling {
            RopeScaling::None => {}
            RopeScaling::Linear(factor) => {
                w.add_metadata(format!("{arch}.rope.scaling.type"), "linear")?;
                w.add_metadata(format!("{arch}.rope.scaling.factor"), factor)?;
            }
            RopeScaling::Llama3 => {
                w.add_metadata(format!("{arch}.rope.scaling.type"), "llama3")?;
            }
        }
        if let Some(factors) = &config.rope_freqs {
            w.add_f32(ROPE_FREQS, &[factors.len() as u64], factors)?;
        }
        Ok(w)
    }

    /// The layer tensors the model has: its architecture's, and the QKV biases for glm4 (GLM-4
    /// checkpoints have them; llama.cpp reads them when present).
    pub fn layer_tensors(&self) -> Vec<LayerTensor> {
        let arch = self.config.architecture;
        let mut tensors = arch.layer_tensors().to_vec();
        if arch == Architecture::Glm4 {
            tensors.extend(QKV_BIASES);
        }
        tensors
    }

    /// The GGUF writer holding the model's metadata and tensors. Weights are normal with
    /// standard deviation `1 / sqrt(in)` (activations stay of order 1 through the layers), norm
    /// weights uniform in [0.8, 1.2], biases normal with standard deviation 0.5 (of the order of
    /// the projections' outputs, so that a bias left out or misplaced shows).
    pub fn writer(&self) -> Result<GgufWriter> {
        let config = &self.config;
        let mut w = self.metadata_writer()?;
        let mut rng = SplitMix(self.seed);
        for l in 0..config.layers {
            for t in self.layer_tensors() {
                let dims = t.dims(config);
                let values = match dims[..] {
                    [n] if QKV_BIASES.contains(&t) => (0..n).map(|_| (0.5 * rng.normal()) as f32).collect(),
                    [n] => rng.norm_weight(n as usize),
                    _ => rng.matrix(dims[0] as usize, dims[1] as usize),
                };
                w.add_quantized(tensor_name(l, t), (self.types)(l, t), &dims, &values)?;
            }
        }
        if self.output_norm {
            w.add_f32(OUTPUT_NORM, &[config.hidden as u64], &rng.norm_weight(config.hidden))?;
        }
        if let Some(v) = self.vocab {
            // Embedding rows of order 1, like the activations the blocks expect.
            let dims = [config.hidden as u64, v.size as u64];
            let rows: Vec<f32> = rng.hidden(v.size * config.hidden);
            w.add_quantized(TOKEN_EMBEDDING, v.ty, &dims, &rows)?;
            if !v.tied {
                w.add_quantized(OUTPUT_HEAD, v.ty, &dims, &rng.matrix(config.hidden, v.size))?;
            }
        }
        Ok(w)
    }

    /// The model as GGUF bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.writer()?.to_bytes())
    }
}

/// Seeded random numbers (splitmix64): enough for weights and inputs, no dependency.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }

    /// `n` standard normal values: hidden states for a model's input.
    pub fn hidden(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal() as f32).collect()
    }

    fn matrix(&mut self, inp: usize, out: usize) -> Vec<f32> {
        let std = 1.0 / (inp as f64).sqrt();
        (0..inp * out).map(|_| (self.normal() * std) as f32).collect()
    }

    fn norm_weight(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| (0.8 + 0.4 * self.uniform()) as f32).collect()
    }
}

/// How close the GPU's output must be to the exact f64 reference, for a compute type: every
/// element within `abs` (outputs are RMS-normalised, of order 1), and the relative L2 error of
/// the whole output within `l2`. See `docs/model.md` for how these were chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParityTolerance {
    pub abs: f64,
    pub l2: f64,
}

/// The parity tolerance for `Dtype::NAME` (`f32`, `f16`, `bf16`).
pub fn parity_tolerance(dtype: &str) -> ParityTolerance {
    match dtype {
        "f32" => ParityTolerance { abs: 5e-5, l2: 1e-5 },
        "f16" => ParityTolerance { abs: 3e-2, l2: 6e-3 },
        _ => ParityTolerance { abs: 2.5e-1, l2: 4e-2 },
    }
}
