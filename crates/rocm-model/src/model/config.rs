//! [`ModelConfig`]: what the forward pass needs from a GGUF file's metadata.
//!
//! Keys follow llama.cpp (`<arch>` is `general.architecture`):
//!
//! | key | required | meaning |
//! |---|---|---|
//! | `<arch>.embedding_length` | yes | hidden size |
//! | `<arch>.block_count` | yes | layers |
//! | `<arch>.feed_forward_length` | yes | MLP inner size |
//! | `<arch>.attention.head_count` | yes | query heads |
//! | `<arch>.attention.head_count_kv` | no (= head_count) | KV heads (GQA/MQA) |
//! | `<arch>.attention.key_length` | no (= hidden / heads) | head size (`value_length` must match) |
//! | `<arch>.attention.layer_norm_rms_epsilon` | yes | RMSNorm epsilon, in (0, [`MAX_RMS_EPS`]] |
//! | `<arch>.rope.freq_base` | no (10000) | RoPE base |
//! | `<arch>.rope.dimension_count` | no (= head size); glm4: yes | rotated elements of a head |
//! | `<arch>.rope.scaling.type` | no | `none`, `linear` or `llama3` ([`RopeScaling`]); others refused |
//! | `<arch>.rope.scaling.factor` | no | linear scaling (also the older `<arch>.rope.scale_linear`) |
//!
//! and one tensor, read by [`ModelConfig::from_file`]: `rope_freqs.weight` ([`ROPE_FREQS`]),
//! per-pair frequency factors (Llama 3.1+), required when the scaling type is `llama3`.
//!
//! The RoPE pairs elements as the architecture says ([`Architecture::rope_pairing`]) over the
//! first `rope.dimension_count` elements, base `freq_base`. There is no GLM `rope_ratio` key:
//! GLM-4-0414's HF config states its base as `rope_theta`, which the converter writes as
//! `freq_base` (for the older ChatGLM files it multiplies the ratio into `freq_base`).

use rocm_kernels::rope::{FreqFactors, Rope, RopeStyle};

use super::arch::{Architecture, RopePairing};
use super::error::{ModelError, Result};
use super::rope_scaling::{
    ROPE_FREQS, RopeScaling, check_freq_factors, missing_llama3_factors, read_freq_factors, read_scaling,
};
use crate::gguf::{GgufFile, Metadata, Value};

/// The largest `<arch>.attention.layer_norm_rms_epsilon` accepted. The epsilon is added to the
/// mean square of activations of order 1 to keep the division away from zero, so it must be
/// small next to 1: real models use 1e-5 (Llama 1 and 2, Mistral), 1e-6 (Llama 3, Qwen 2,
/// Gemma) or less (GLM-4: 1.5625e-7). A value above 0.1 is not an epsilon but a broken or
/// hostile file, and would change the output silently.
pub const MAX_RMS_EPS: f32 = 0.1;

/// Sizes and constants of a model, checked for consistency.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub hidden: usize,
    pub layers: usize,
    pub ffn: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    /// Rotated elements of a head (`rope.dimension_count`).
    pub rotary_dim: usize,
    /// `<arch>.rope.scaling.type` and its linear factor.
    pub rope_scaling: RopeScaling,
    /// Per-pair frequency factors ([`ModelConfig::rotary_pairs`] of them) from [`ROPE_FREQS`]:
    /// filled by [`ModelConfig::from_file`] when the file has the tensor;
    /// [`ModelConfig::from_metadata`] leaves it `None`.
    pub rope_freqs: Option<Vec<f32>>,
}

impl ModelConfig {
    /// [`ModelConfig::from_metadata`] of `file`'s metadata, plus the RoPE frequency factors of
    /// its [`ROPE_FREQS`] tensor if it has one (checked: dims `[rotary_pairs]`, any type the
    /// reader decodes, values positive and finite). A scaling type of `llama3` without that
    /// tensor is refused. What the model loaders use.
    pub fn from_file(file: &GgufFile) -> Result<Self> {
        let mut config = Self::from_metadata(file.metadata())?;
        config.rope_freqs = read_freq_factors(file, config.rotary_pairs())?;
        // The whole RoPE, factors included (and a llama3 scaling without them refused).
        config.rope()?;
        Ok(config)
    }

    /// Reads and checks the configuration (see the module docs for the keys); no tensor is
    /// read, so `rope_freqs` is `None` (see [`ModelConfig::from_file`]).
    pub fn from_metadata(meta: &Metadata) -> Result<Self> {
        let arch_key = "general.architecture";
        let arch_name = match meta.get(arch_key) {
            None => return Err(ModelError::MissingKey { key: arch_key.into() }),
            Some(v) => v.as_str().ok_or_else(|| bad(arch_key, "is not a string"))?,
        };
        let architecture = Architecture::from_name(arch_name)?;
        let key = |suffix: &str| format!("{arch_name}.{suffix}");

        let hidden = required_size(meta, &key("embedding_length"))?;
        let layers = required_size(meta, &key("block_count"))?;
        let ffn = required_size(meta, &key("feed_forward_length"))?;
        // The head counts are checked here, before the head size is derived from them.
        let q_key = key("attention.head_count");
        let q_heads = required_size(meta, &q_key)?;
        let kv_key = key("attention.head_count_kv");
        let kv_heads = optional_usize(meta, &kv_key)?.unwrap_or(q_heads);
        if kv_heads == 0 {
            return Err(bad(&kv_key, "is 0, must be at least 1"));
        }
        if kv_heads > q_heads {
            return Err(bad(
                &kv_key,
                &format!("{kv_heads} KV heads are more than the {q_heads} query heads of {q_key}"),
            ));
        }
        if !q_heads.is_multiple_of(kv_heads) {
            return Err(bad(&kv_key, &format!("{kv_heads} KV heads do not divide {q_heads} query heads")));
        }
        let rms_eps = required_f32(meta, &key("attention.layer_norm_rms_epsilon"))?;
        let rope_theta = optional_f32(meta, &key("rope.freq_base"))?.unwrap_or(10_000.0);
        let rope_scaling = read_scaling(meta, arch_name)?;

        let head_key = key("attention.key_length");
        let head_dim = match optional_usize(meta, &head_key)? {
            Some(0) => return Err(bad(&head_key, "is 0, must be at least 1")),
            Some(d) => d,
            None if hidden.is_multiple_of(q_heads) => hidden / q_heads,
            None => {
                return Err(bad(
                    &q_key,
                    &format!(
                        "{q_heads} heads do not divide embedding_length {hidden} (and {head_key} is absent)"
                    ),
                ));
            }
        };
        let value_key = key("attention.value_length");
        if let Some(v) = optional_usize(meta, &value_key)?
            && v != head_dim
        {
            return Err(bad(&value_key, &format!("{v} differs from the key length {head_dim}")));
        }

        let rotary_key = key("rope.dimension_count");
        let rotary_dim = match optional_usize(meta, &rotary_key)? {
            Some(r) => r,
            None if architecture.requires_rotary_dim() => {
                return Err(ModelError::MissingKey { key: rotary_key });
            }
            None => head_dim,
        };

        let config = ModelConfig {
            architecture,
            hidden,
            layers,
            ffn,
            q_heads,
            kv_heads,
            head_dim,
            rms_eps,
            rope_theta,
            rotary_dim,
            rope_scaling,
            rope_freqs: None,
        };
        config.check(arch_name)?;
        Ok(config)
    }

    /// The consistency checks, each error naming the key that breaks it. Floats are printed with
    /// `{:?}`, the shortest text that reads back the same, which switches to an exponent for
    /// large and small values: `1e300`, not three hundred digits.
    fn check(&self, arch: &str) -> Result<()> {
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let eps = self.rms_eps;
        let eps_key = key("attention.layer_norm_rms_epsilon");
        if !(eps.is_finite() && eps > 0.0) {
            return Err(bad(&eps_key, &format!("{eps:?} is not positive")));
        }
        if eps > MAX_RMS_EPS {
            return Err(bad(
                &eps_key,
                &format!(
                    "{eps:?} is too large for a norm epsilon (at most {MAX_RMS_EPS:?}; models use 1e-5 or 1e-6)"
                ),
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(bad(&key("rope.freq_base"), &format!("{:?} is not positive", self.rope_theta)));
        }
        // The RoPE configuration itself (even sizes, the kernel's pair limit).
        self.base_rope().map_err(|e| bad(&key("rope.dimension_count"), &e.to_string()))?;
        Ok(())
    }

    /// Elements of all query heads of a token.
    pub fn q_dim(&self) -> usize {
        self.q_heads * self.head_dim
    }

    /// The pairs the RoPE rotates in a head: one frequency factor each.
    pub fn rotary_pairs(&self) -> usize {
        self.rotary_dim / 2
    }

    /// Elements of all KV heads of a token.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// The RoPE the kernels and the reference apply to Q and K (see [`Architecture`]), with the
    /// linear scaling and the frequency factors (`rope_freqs`, one per rotated pair). Refused:
    /// factors of the wrong count or not positive and finite (naming [`ROPE_FREQS`]), and a
    /// `llama3` scaling without factors.
    pub fn rope(&self) -> Result<Rope> {
        let rope = self.base_rope()?;
        match &self.rope_freqs {
            Some(factors) => {
                check_freq_factors(factors, self.rotary_pairs())?;
                let factors = FreqFactors::from_f32(factors)
                    .map_err(|e| ModelError::BadTensor { name: ROPE_FREQS.into(), reason: e.to_string() })?;
                Ok(rope.with_freq_factors(factors))
            }
            None if self.rope_scaling == RopeScaling::Llama3 => {
                Err(missing_llama3_factors(self.architecture.name()))
            }
            None => Ok(rope),
        }
    }

    /// The RoPE without the frequency factors: style, base and linear scaling.
    fn base_rope(&self) -> Result<Rope> {
        let factor = self.rope_scaling.linear_factor();
        if !(factor.is_finite() && factor > 0.0) {
            return Err(ModelError::BadInput(format!(
                "linear RoPE scaling factor {factor:?} is not positive"
            )));
        }
        let d = self.rotary_dim;
        if d == 0 || !d.is_multiple_of(2) || d > self.head_dim || d / 2 > rocm_kernels::rope::MAX_PAIRS {
            return Err(ModelError::BadInput(format!(
                "rotary dimension {d} must be even, positive, at most head_dim {} and at most {} pairs",
                self.head_dim,
                rocm_kernels::rope::MAX_PAIRS
            )));
        }
        let style = match self.architecture.rope_pairing() {
            RopePairing::Interleaved => RopeStyle::GptJ { rotary_dim: d },
            RopePairing::HalfSplit => RopeStyle::NeoX { rotary_dim: d },
        };
        let rope = Rope::new(style, self.head_dim).with_theta_base(self.rope_theta);
        Ok(rope.with_scaling_factor(factor))
    }
}

fn bad(key: &str, reason: &str) -> ModelError {
    ModelError::BadMetadata { key: key.to_string(), reason: reason.to_string() }
}

/// A value for a message: its type and a preview (a string or array from the file may be
/// megabytes long).
fn found(v: &Value) -> String {
    format!("{} {}", v.value_type(), v.preview(4, 40))
}

fn optional_usize(meta: &Metadata, key: &str) -> Result<Option<usize>> {
    match meta.get(key) {
        None => Ok(None),
        Some(v) => {
            let n = v
                .as_u64()
                .ok_or_else(|| bad(key, &format!("expected a non-negative integer, found {}", found(v))))?;
            // Sizes beyond 2^31 are not a model this crate can run (the kernels index with i32).
            if n > i32::MAX as u64 {
                return Err(bad(key, &format!("{n} is too large (at most {})", i32::MAX)));
            }
            Ok(Some(n as usize))
        }
    }
}

/// A required size: present, and at least 1.
fn required_size(meta: &Metadata, key: &str) -> Result<usize> {
    match optional_usize(meta, key)? {
        None => Err(ModelError::MissingKey { key: key.to_string() }),
        Some(0) => Err(bad(key, "is 0, must be at least 1")),
        Some(n) => Ok(n),
    }
}

/// A float key: absent, or finite and within f32 (not rounding to 0).
pub(super) fn optional_f32(meta: &Metadata, key: &str) -> Result<Option<f32>> {
    match meta.get(key) {
        None => Ok(None),
        Some(v) => {
            let x = v.as_f64().ok_or_else(|| bad(key, &format!("expected a number, found {}", found(v))))?;
            let f = x as f32;
            if !x.is_finite() {
                return Err(bad(key, &format!("{x:?} is not a finite number")));
            }
            if !f.is_finite() {
                return Err(bad(key, &format!("{x:?} is beyond the range of f32 (largest {:?})", f32::MAX)));
            }
            if f == 0.0 && x != 0.0 {
                return Err(bad(key, &format!("{x:?} is too small for f32 (it rounds to 0)")));
            }
            Ok(Some(f))
        }
    }
}

fn required_f32(meta: &Metadata, key: &str) -> Result<f32> {
    optional_f32(meta, key)?.ok_or_else(|| ModelError::MissingKey { key: key.to_string() })
}
