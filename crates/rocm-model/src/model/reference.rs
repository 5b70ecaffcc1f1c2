//! The f64 CPU reference of the forward pass: the same weights (decoded from the stored bytes),
//! the same positions and RoPE, a contiguous KV cache per sequence.
//!
//! With a [`Rounding`] other than `Exact` it also rounds to the GPU's storage type wherever the
//! GPU stores a tensor (weights, every activation, the residual stream, the KV cache), keeping
//! sums in f64. That is a model of the GPU's `T` pipeline, used to measure how far a correct
//! f16/bf16 implementation drifts from the exact forward pass (`docs/model.md`, tolerances).

use rocm_kernels::rope::{Rope, RopeStyle};

use super::arch::RopePairing;
use super::config::ModelConfig;
use super::embedding::{OUTPUT_HEAD, TOKEN_EMBEDDING};
use super::error::{ModelError, Result};
use super::weights::{Block, LayerTensor, OUTPUT_NORM, check_model, load_host, tensor_name};
use crate::gguf::GgufFile;

/// Where the reference rounds: nowhere, or to the GPU's storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rounding {
    #[default]
    Exact,
    F32,
    F16,
    Bf16,
}

impl Rounding {
    /// The rounding of the GPU's compute type `name` (`Dtype::NAME`: f32, f16, bf16).
    pub fn for_dtype(name: &str) -> Option<Rounding> {
        match name {
            "f32" => Some(Rounding::F32),
            "f16" => Some(Rounding::F16),
            "bf16" => Some(Rounding::Bf16),
            _ => None,
        }
    }

    pub fn apply(self, x: f64) -> f64 {
        match self {
            Rounding::Exact => x,
            Rounding::F32 => x as f32 as f64,
            Rounding::F16 => half::f16::from_f64(x).to_f64(),
            Rounding::Bf16 => half::bf16::from_f64(x).to_f64(),
        }
    }

    fn all(self, v: &mut [f64]) {
        if self != Rounding::Exact {
            v.iter_mut().for_each(|x| *x = self.apply(*x));
        }
    }
}

/// One layer's weights (those the file has for its architecture), row-major `[out, in]` for
/// the matrices.
#[derive(Debug, Clone)]
struct HostLayer {
    w: Vec<(LayerTensor, Vec<f64>)>,
}

impl HostLayer {
    fn get(&self, t: LayerTensor) -> Option<&[f64]> {
        self.w.iter().find(|(x, _)| *x == t).map(|(_, w)| w.as_slice())
    }

    /// A tensor every layer of the architecture has (checked at load).
    fn must(&self, t: LayerTensor) -> &[f64] {
        self.get(t).expect("a tensor checked at load")
    }
}

/// The reference model.
#[derive(Debug, Clone)]
pub struct ReferenceModel {
    config: ModelConfig,
    /// Rotated elements, base, linear scaling and frequency factors, from the same [`Rope`]
    /// the GPU runs.
    rope: RopeParams,
    layers: Vec<HostLayer>,
    output_norm: Option<Vec<f64>>,
    /// `[vocab, hidden]`, when the file has a token embedding.
    embedding: Option<Vec<f64>>,
    /// `output.weight`; `None` when the model ties the head to the embedding ([`Self::head`]).
    output_head: Option<Vec<f64>>,
    rounding: Rounding,
}

/// A sequence's tokens in the reference's KV cache: per layer, `[len, kv_heads * head_dim]`.
#[derive(Debug, Clone, Default)]
pub struct ReferenceSequence {
    len: usize,
    k: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
}

impl ReferenceSequence {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl ReferenceModel {
    /// Reads the configuration (with the RoPE frequency factors of `rope_freqs.weight` when the
    /// file has them) and every weight of `file` (checked as [`super::Model::load`] does).
    pub fn load(file: &GgufFile, rounding: Rounding) -> Result<Self> {
        let config = ModelConfig::from_file(file)?;
        let (present, has_output_norm) = check_model(file, &config)?;
        let rope = rope_params(&config.rope()?)?;
        let load = |name: &str| -> Result<Vec<f64>> {
            let mut w = load_host(file, name)?;
            rounding.all(&mut w);
            Ok(w)
        };
        let layers = present
            .iter()
            .enumerate()
            .map(|(l, tensors)| {
                let w = tensors.iter().map(|&t| Ok((t, load(&tensor_name(l, t))?))).collect::<Result<_>>()?;
                Ok(HostLayer { w })
            })
            .collect::<Result<_>>()?;
        let output_norm = if has_output_norm { Some(load(OUTPUT_NORM)?) } else { None };
        let present = |name: &str| file.tensor(name).is_ok();
        let embedding = if present(TOKEN_EMBEDDING) { Some(load(TOKEN_EMBEDDING)?) } else { None };
        let output_head = if present(OUTPUT_HEAD) { Some(load(OUTPUT_HEAD)?) } else { None };
        Ok(ReferenceModel { config, rope, layers, output_norm, embedding, output_head, rounding })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The output head: `output.weight`, or the embedding when the model ties them.
    fn head(&self) -> Option<&[f64]> {
        self.output_head.as_deref().or(self.embedding.as_deref())
    }

    /// The embedding rows of `tokens` (`[tokens.len(), hidden]`).
    pub fn embed(&self, tokens: &[u32]) -> Result<Vec<f64>> {
        let e = self
            .embedding
            .as_ref()
            .ok_or_else(|| ModelError::MissingTensor { name: TOKEN_EMBEDDING.into() })?;
        let h = self.config.hidden;
        let vocab = e.len() / h;
        let mut out = Vec::with_capacity(tokens.len() * h);
        for &t in tokens {
            let t = t as usize;
            if t >= vocab {
                return Err(ModelError::BadInput(format!("token id {t} is out of range ({vocab} tokens)")));
            }
            out.extend_from_slice(&e[t * h..(t + 1) * h]);
        }
        Ok(out)
    }

    /// The logits (`[rows, vocab]`) of output vectors `hidden` (`[rows, hidden]`), rounded as
    /// the GPU stores them.
    pub fn logits(&self, hidden: &[f64]) -> Result<Vec<f64>> {
        let w = self.head().ok_or_else(|| ModelError::MissingTensor { name: OUTPUT_HEAD.into() })?;
        Ok(self.linear(hidden, w, w.len() / self.config.hidden))
    }

    pub fn new_sequence(&self) -> ReferenceSequence {
        let layers = self.config.layers;
        ReferenceSequence { len: 0, k: vec![Vec::new(); layers], v: vec![Vec::new(); layers] }
    }

    /// Runs `hidden` (`[tokens, hidden]`, the next tokens of `seq`) through every layer (and the
    /// output norm), appending their K/V to `seq`. Returns `[tokens, hidden]`.
    pub fn forward(&self, seq: &mut ReferenceSequence, hidden: &[f64]) -> Result<Vec<f64>> {
        let c = &self.config;
        if hidden.is_empty() || !hidden.len().is_multiple_of(c.hidden) {
            return Err(ModelError::BadInput(format!(
                "{} hidden values are not a positive number of tokens of {}",
                hidden.len(),
                c.hidden
            )));
        }
        if seq.k.len() != c.layers {
            return Err(ModelError::BadInput("the sequence was made by another model".into()));
        }
        let n = hidden.len() / c.hidden;
        let r = self.rounding;
        let mut h = hidden.to_vec();
        r.all(&mut h);
        let start = seq.len;
        for (l, layer) in self.layers.iter().enumerate() {
            let xn = self.rmsnorm(&h, layer.must(LayerTensor::AttnNorm));
            let mut q = self.project(&xn, layer, LayerTensor::AttnQ, LayerTensor::AttnQBias);
            let mut k = self.project(&xn, layer, LayerTensor::AttnK, LayerTensor::AttnKBias);
            let v = self.project(&xn, layer, LayerTensor::AttnV, LayerTensor::AttnVBias);
            for t in 0..n {
                let pos = (start + t) as f64;
                for head in q[t * c.q_dim()..(t + 1) * c.q_dim()].chunks_mut(c.head_dim) {
                    self.rotate(head, pos);
                }
                for head in k[t * c.kv_dim()..(t + 1) * c.kv_dim()].chunks_mut(c.head_dim) {
                    self.rotate(head, pos);
                }
            }
            seq.k[l].extend_from_slice(&k);
            seq.v[l].extend_from_slice(&v);
            let attn = self.attention(&q, &seq.k[l], &seq.v[l], start, n);
            self.residual(&mut h, &attn, layer, Block::Attention);
            let xn = self.rmsnorm(&h, layer.must(LayerTensor::FfnNorm));
            let act = self.mlp_activation(&xn, layer);
            self.residual(&mut h, &act, layer, Block::Mlp);
        }
        seq.len += n;
        Ok(match &self.output_norm {
            Some(w) => self.rmsnorm(&h, w),
            None => h,
        })
    }

    /// `x / sqrt(mean(x^2) + eps) * w` per row.
    fn rmsnorm(&self, x: &[f64], w: &[f64]) -> Vec<f64> {
        let eps = self.config.rms_eps as f64;
        let mut out = Vec::with_capacity(x.len());
        for row in x.chunks(w.len()) {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
            let inv = 1.0 / (ms + eps).sqrt();
            out.extend(row.iter().zip(w).map(|(&v, &g)| self.rounding.apply(v * inv * g)));
        }
        out
    }

    /// `x W^T` with `W` row-major `[out, in]`.
    fn linear(&self, x: &[f64], w: &[f64], out: usize) -> Vec<f64> {
        let k = w.len() / out;
        let mut y = Vec::with_capacity(x.len() / k * out);
        for row in x.chunks(k) {
            y.extend(w.chunks(k).map(|wr| self.rounding.apply(dot(row, wr))));
        }
        y
    }

    /// `x W^T + bias` for projection `t` and its bias, if the layer has one: the product
    /// rounded to `T`, then the sum (the GPU's projection, then its bias add).
    fn project(&self, x: &[f64], layer: &HostLayer, t: LayerTensor, bias: LayerTensor) -> Vec<f64> {
        let w = layer.must(t);
        let mut y = self.linear(x, w, w.len() / self.config.hidden);
        if let Some(b) = layer.get(bias) {
            for row in y.chunks_mut(b.len()) {
                row.iter_mut().zip(b).for_each(|(y, b)| *y = self.rounding.apply(*y + b));
            }
        }
        y
    }

    /// `silu(gate) * up` of `xn`: separate `ffn_gate` and `ffn_up`, or glm4's stacked `ffn_up`
    /// (each output row `[gate | up]`).
    fn mlp_activation(&self, xn: &[f64], layer: &HostLayer) -> Vec<f64> {
        let ffn = self.config.ffn;
        let silu_mul = |g: f64, u: f64| self.rounding.apply(g / (1.0 + (-g).exp()) * u);
        match layer.get(LayerTensor::FfnGate) {
            Some(gate) => {
                let gate = self.linear(xn, gate, ffn);
                let up = self.linear(xn, layer.must(LayerTensor::FfnUp), ffn);
                gate.iter().zip(&up).map(|(&g, &u)| silu_mul(g, u)).collect()
            }
            None => {
                let gate_up = self.linear(xn, layer.must(LayerTensor::FfnUp), 2 * ffn);
                gate_up
                    .chunks(2 * ffn)
                    .flat_map(|row| row[..ffn].iter().zip(&row[ffn..]).map(|(&g, &u)| silu_mul(g, u)))
                    .collect()
            }
        }
    }

    /// `h += d` with `d = x W^T` for the block's output projection, normalised by its post-norm
    /// when the layer has one (glm4). `d` is rounded to `T` (and again after the
    /// post-norm), then the sum: the GPU's projection, post-norm and fused add-and-norm kernel.
    fn residual(&self, h: &mut [f64], x: &[f64], layer: &HostLayer, block: Block) {
        let (t, post) = block.output_and_post_norm();
        let hidden = self.config.hidden;
        let mut d = self.linear(x, layer.must(t), hidden);
        if let Some(w) = layer.get(post) {
            d = self.rmsnorm(&d, w);
        }
        for (hv, dv) in h.iter_mut().zip(&d) {
            *hv = self.rounding.apply(*hv + dv);
        }
    }

    /// The RoPE's pairs over the first `d` elements (see [`rotate`]).
    fn rotate(&self, head: &mut [f64], pos: f64) {
        rotate(head, pos, &self.rope, self.rounding);
    }

    /// Causal GQA attention of `n` new queries (positions `start..start + n`) over the keys
    /// `0..start + n` of the cache; query head `h` reads KV head `h / (q_heads / kv_heads)`.
    fn attention(&self, q: &[f64], k: &[f64], v: &[f64], start: usize, n: usize) -> Vec<f64> {
        let c = &self.config;
        let (hd, group) = (c.head_dim, c.q_heads / c.kv_heads);
        let scale = 1.0 / (hd as f64).sqrt();
        let mut out = vec![0.0; n * c.q_dim()];
        for t in 0..n {
            let keys = start + t + 1;
            for h in 0..c.q_heads {
                let qh = &q[t * c.q_dim() + h * hd..][..hd];
                let kv_off = (h / group) * hd;
                let scores: Vec<f64> =
                    (0..keys).map(|j| dot(qh, &k[j * c.kv_dim() + kv_off..][..hd]) * scale).collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = p.iter().sum();
                let o = &mut out[t * c.q_dim() + h * hd..][..hd];
                for (j, pj) in p.iter().enumerate() {
                    for (oe, ve) in o.iter_mut().zip(&v[j * c.kv_dim() + kv_off..][..hd]) {
                        *oe += pj / sum * ve;
                    }
                }
                self.rounding.all(o);
            }
        }
        out
    }
}

/// The reference's RoPE: pairs over the first `dim` elements of a head, pair `i` turning by
/// `pos / scale * base^(-2i/dim) / factors[i]`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RopeParams {
    pub pairing: RopePairing,
    pub dim: usize,
    pub base: f64,
    /// Linear scaling: positions are divided by it.
    pub scale: f64,
    /// One per pair (`dim / 2`); all 1 without frequency factors.
    pub factors: Vec<f64>,
}

/// Rotates pair `i < d / 2` of one head, `(2i, 2i + 1)` (interleaved) or `(i, i + d/2)`
/// (half-split), by `pos / scale * base^(-2i/d) / factor[i]` (dividing by a scale or factor of 1
/// is exact).
pub(super) fn rotate(head: &mut [f64], pos: f64, rope: &RopeParams, rounding: Rounding) {
    let d = rope.dim;
    for (i, factor) in rope.factors.iter().enumerate().take(d / 2) {
        let (s, c) = (pos / rope.scale * rope.base.powf(-((2 * i) as f64) / d as f64) / factor).sin_cos();
        let (x, y) = match rope.pairing {
            RopePairing::Interleaved => (2 * i, 2 * i + 1),
            RopePairing::HalfSplit => (i, i + d / 2),
        };
        let (a, b) = (head[x], head[y]);
        head[x] = rounding.apply(a * c - b * s);
        head[y] = rounding.apply(b * c + a * s);
    }
}

/// The rotated width, frequency base, linear scaling and per-pair factors of the RoPE styles
/// the models use.
pub(super) fn rope_params(rope: &Rope) -> Result<RopeParams> {
    let (pairing, dim, base) = match rope.style {
        RopeStyle::GptJ { rotary_dim } => (RopePairing::Interleaved, rotary_dim, rope.theta_base as f64),
        RopeStyle::NeoX { rotary_dim } => (RopePairing::HalfSplit, rotary_dim, rope.theta_base as f64),
        other => return Err(ModelError::BadInput(format!("the reference does not implement {other:?}"))),
    };
    let factors = match &rope.freq_factors {
        Some(f) if f.len() == dim / 2 => f.as_slice().to_vec(),
        Some(f) => {
            return Err(ModelError::BadInput(format!(
                "{} frequency factors for the {} pairs the RoPE rotates",
                f.len(),
                dim / 2
            )));
        }
        None => vec![1.0; dim / 2],
    };
    Ok(RopeParams { pairing, dim, base, scale: rope.scaling_factor as f64, factors })
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
