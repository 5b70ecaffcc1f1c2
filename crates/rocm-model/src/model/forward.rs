//! [`Model`]: the transformer blocks on the GPU over the paged KV cache.
//!
//! One forward pass takes `seq_q` new tokens of each of `batch` sequences (`[batch * seq_q,
//! hidden]`, sequence-major) and, for every layer:
//!
//! ```text
//! xn = rmsnorm(h, attn_norm)
//! q, k, v = xn Wq^T + bq, xn Wk^T + bk, xn Wv^T + bv   (GEMM, y = x W^T; biases if the file has them)
//! rope(q, k) at the tokens' positions            (seq_len before the step + 0..seq_q)
//! kv_cache_write(k, v) at the slots PagedCache::append handed out
//!                                                (one launch with the rope where it turns whole heads)
//! a = paged_attention(q, cache)                  (causal: the queries are the last seq_q tokens)
//! d = a Wo^T                                     (glm4: d = rmsnorm(d, post_attention_norm))
//! h = h + d; xn = rmsnorm(h, ffn_norm)           (one fused add-and-norm kernel)
//! d = swiglu(xn Wgate^T, xn Wup^T) Wdown^T       (glm4: gate and up are one product's halves,
//!                                                 then d = rmsnorm(d, post_ffw_norm))
//! ```
//!
//! with `d` added to `h` by the next layer's norm, or the final one. Then `rmsnorm(h, output_norm)` if the model has one. Activations are `T` in device memory;
//! projection weights stay as the file stores them (`linear.rs` picks each product's path);
//! each kernel computes in f32 and rounds once when it stores.

use std::collections::HashSet;
use std::sync::Arc;

use rocm_kernels::attention::{
    AttentionScratch, FlashOptions, PagedAttention, PagedKv, paged_attention, paged_attention_in,
};
use rocm_kernels::gemm::{GemmElement, GemmPath};
use rocm_kernels::kv_cache::kv_cache_copy_blocks;
use rocm_kernels::quant::SplitScratch;
use rocm_kernels::rmsnorm::RmsNorm;
use rocm_kernels::rope::{Rope, RopeTensor};
use rocm_runtime::{DeviceBuffer, Stream};

use super::config::ModelConfig;
use super::embedding::{OUTPUT_HEAD, TOKEN_EMBEDDING, TokenEmbedding, load_head};
use super::error::{ModelError, Result};
use super::layer::{LayerWeights, Mlp};
use super::linear::{Linear, Products};
use super::options::LoadOptions;
use super::weights::{Block, LayerTensor, OUTPUT_NORM, check_model, load_device};
use crate::gguf::GgufFile;
use crate::kv_cache::{KvCacheError, KvCacheShape, KvCacheTensors, PagedCache, SeqId};
use crate::lazy::DeviceTensors;
use crate::position::plain_positions;

/// A model on one stream: its weights, activations in `T` (f32, f16, bf16), and its forward
/// pass; with a token embedding, the ids-to-logits ends too ([`Model::embed`], [`Model::logits`]).
pub struct Model<T: GemmElement> {
    config: ModelConfig,
    rope: Rope,
    layers: Vec<LayerWeights<T>>,
    final_norm: FinalNorm<T>,
    embedding: Option<TokenEmbedding>,
    head: Option<Linear<T>>,
    stream: Stream,
    /// The path of every product ([`Model::set_gemm_path`]).
    gemm: GemmPath,
}

impl<T: GemmElement> std::fmt::Debug for Model<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("config", &self.config).field("dtype", &T::NAME).finish_non_exhaustive()
    }
}

/// The norm that adds the last block's output to the residual stream.
enum FinalNorm<T: GemmElement> {
    /// `output_norm.weight`: the pass returns the normalised rows.
    Output(DeviceBuffer<T>),
    /// Ones, for a model without an output norm: the pass returns the stream itself, and the
    /// norm's rows are only a by-product of the add.
    Unit(DeviceBuffer<T>),
}

impl<T: GemmElement> FinalNorm<T> {
    /// Of a pass's normalised rows `xn` and its residual stream `h`, the one the pass returns.
    fn output<B>(&self, xn: B, h: B) -> B {
        match self {
            FinalNorm::Output(_) => xn,
            FinalNorm::Unit(_) => h,
        }
    }
}

/// What one forward pass is about to do to the cache, planned before any device work.
pub(super) struct Step {
    pub seqs: Vec<SeqId>,
    pub seq_q: usize,
    pub positions: Vec<i32>,
    pub slots: Vec<i32>,
    pub copies: Vec<(usize, usize)>,
}

impl<T: GemmElement> Model<T> {
    /// Reads the configuration (with the RoPE frequency factors of `rope_freqs.weight` when the
    /// file has them: [`ModelConfig::from_file`]), checks every tensor (names, dims, types)
    /// before uploading any, then uploads and dequantises them on `stream`.
    pub fn load(file: Arc<GgufFile>, stream: &Stream) -> Result<Self> {
        Self::load_with(file, stream, LoadOptions::default())
    }

    /// [`Model::load`] with the weights kept as `options` says (the layout of MXFP4
    /// projections: [`LoadOptions::mxfp4`]).
    pub fn load_with(file: Arc<GgufFile>, stream: &Stream, options: LoadOptions) -> Result<Self> {
        let config = ModelConfig::from_file(&file)?;
        let (present, has_output_norm) = check_model(&file, &config)?;
        let rope = config.rope()?;
        let embedding = TokenEmbedding::load(&file, &config)?;
        let tensors = DeviceTensors::new(file, stream.clone());
        let head = load_head(&tensors, &config, embedding.as_ref())?;
        let layers = present
            .iter()
            .enumerate()
            .map(|(l, p)| LayerWeights::load(&tensors, &config, l, p, options))
            .collect::<Result<_>>()?;
        let final_norm = if has_output_norm {
            FinalNorm::Output(load_device(&tensors, OUTPUT_NORM)?)
        } else {
            FinalNorm::Unit(stream.upload(&vec![T::from_f32(1.0); config.hidden])?)
        };
        Ok(Model {
            config,
            rope,
            layers,
            final_norm,
            embedding,
            head,
            stream: stream.clone(),
            gemm: GemmPath::Auto,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The path the products take (dense projections, the biases, dequantised weights):
    /// [`GemmPath::Auto`] (the vendor BLAS when loadable) unless set. A graph records the
    /// portable kernel for `Auto` (the runtime refuses vendor BLAS calls while capturing), so
    /// eager passes give a decode graph's results bit for bit only with
    /// [`GemmPath::Portable`] set.
    pub fn set_gemm_path(&mut self, path: GemmPath) {
        self.gemm = path;
    }

    pub fn gemm_path(&self) -> GemmPath {
        self.gemm
    }

    /// Device bytes of the weights: projections as the file stores them (a block format's
    /// bytes are the file's), norms in `T`, and a tiled q4_K or q8_0 copy where one was loaded
    /// ([`Q4kLayout::TiledCopy`](super::Q4kLayout::TiledCopy),
    /// [`Q8Layout::TiledCopy`](super::Q8Layout::TiledCopy)).
    pub fn weight_bytes(&self) -> u64 {
        self.outside_layers_bytes() + self.layers.iter().map(LayerWeights::device_bytes).sum::<u64>()
    }

    /// The weight bytes a pass over the whole model reads: [`Model::weight_bytes`] less a tiled
    /// copy, which a pass reads instead of the rows, not beside them. A decode step's
    /// weight-read rate is these bytes over its time.
    pub fn read_weight_bytes(&self) -> u64 {
        self.outside_layers_bytes() + self.layers.iter().map(LayerWeights::read_bytes).sum::<u64>()
    }

    /// The final norm's and output head's bytes.
    fn outside_layers_bytes(&self) -> u64 {
        let output_norm = match &self.final_norm {
            FinalNorm::Output(w) => (w.len() * size_of::<T>()) as u64,
            FinalNorm::Unit(_) => 0,
        };
        output_norm + self.head.as_ref().map_or(0, Linear::device_bytes)
    }

    /// The vocabulary size, for a model with a token embedding.
    pub fn vocab_size(&self) -> Option<usize> {
        self.embedding.as_ref().map(TokenEmbedding::vocab)
    }

    /// The hidden vectors of `tokens` (`[tokens.len(), hidden]`): their rows of the token
    /// embedding, in `T`. An id past the vocabulary is refused.
    pub fn embed(&self, tokens: &[u32]) -> Result<DeviceBuffer<T>> {
        let embedding = self
            .embedding
            .as_ref()
            .ok_or_else(|| ModelError::MissingTensor { name: TOKEN_EMBEDDING.into() })?;
        embedding.lookup(tokens, &self.stream)
    }

    /// [`Model::embed`]'s rows on the host.
    pub(super) fn embedding_rows(&self, tokens: &[u32]) -> Result<Vec<T>> {
        let embedding = self
            .embedding
            .as_ref()
            .ok_or_else(|| ModelError::MissingTensor { name: TOKEN_EMBEDDING.into() })?;
        embedding.rows(tokens)
    }

    /// The output head's rows (the vocabulary), for a model with a head.
    pub(super) fn head_rows(&self) -> Option<usize> {
        self.head.as_ref().map(Linear::rows)
    }

    /// The logits (`[rows, vocab]`, in `T`) of `rows` output vectors (`[rows, hidden]`, what
    /// the forward pass returns, final norm applied): the output head's product.
    pub fn logits(&self, hidden: &DeviceBuffer<T>) -> Result<DeviceBuffer<T>> {
        let head =
            self.head.as_ref().ok_or_else(|| ModelError::MissingTensor { name: OUTPUT_HEAD.into() })?;
        let c = &self.config;
        if hidden.is_empty() || !hidden.len().is_multiple_of(c.hidden) {
            return Err(ModelError::BadInput(format!(
                "logits of {} elements: not whole rows of {}",
                hidden.len(),
                c.hidden
            )));
        }
        let rows = hidden.len() / c.hidden;
        let mut logits = self.stream.alloc::<T>(rows * head.rows())?;
        head.apply_with(hidden, rows, &mut logits, &mut Products::temporaries(self.gemm))?;
        Ok(logits)
    }

    /// The last row of `hidden` (`[tokens, hidden]`): the output whose logits pick the token
    /// after a prefill.
    pub fn last_token(&self, hidden: &DeviceBuffer<T>) -> Result<DeviceBuffer<T>> {
        let width = self.config.hidden;
        if hidden.is_empty() || !hidden.len().is_multiple_of(width) {
            return Err(ModelError::BadInput(format!(
                "{} elements are not whole rows of {width}",
                hidden.len()
            )));
        }
        let mut out = self.stream.alloc::<T>(width)?;
        out.copy_range_from_device(0, hidden, hidden.len() - width, width)?;
        Ok(out)
    }

    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The KV-cache tensors' shape for this model over `cache`'s blocks.
    pub fn kv_cache_shape(&self, cache: &PagedCache) -> Result<KvCacheShape> {
        Ok(KvCacheShape::for_cache(cache, self.config.layers, self.config.kv_heads, self.config.head_dim)?)
    }

    /// Allocates the KV-cache tensors for `cache` on the model's stream.
    pub fn new_kv_cache(&self, cache: &PagedCache) -> Result<KvCacheTensors<T>> {
        Ok(KvCacheTensors::new(&self.stream, self.kv_cache_shape(cache)?)?)
    }

    /// All tokens of `hidden` (`[tokens, hidden]`) as the next tokens of `seq`: a prompt, or a
    /// chunk of one. Returns `[tokens, hidden]`.
    pub fn prefill(
        &self,
        cache: &mut PagedCache,
        kv: &mut KvCacheTensors<T>,
        seq: SeqId,
        hidden: &DeviceBuffer<T>,
    ) -> Result<DeviceBuffer<T>> {
        let tokens = hidden.len() / self.config.hidden.max(1);
        self.forward(cache, kv, &[seq], tokens, hidden)
    }

    /// One new token for each of `seqs` (`hidden` is `[seqs.len(), hidden]`).
    pub fn decode_step(
        &self,
        cache: &mut PagedCache,
        kv: &mut KvCacheTensors<T>,
        seqs: &[SeqId],
        hidden: &DeviceBuffer<T>,
    ) -> Result<DeviceBuffer<T>> {
        self.forward(cache, kv, seqs, 1, hidden)
    }

    /// `seq_q` new tokens of each of `seqs`, `hidden` being `[seqs.len() * seq_q, hidden]`
    /// (sequence-major). Appends the tokens to `cache`; if anything fails after that, the cache's
    /// bookkeeping is restored, so a refused step leaves it as it was.
    pub fn forward(
        &self,
        cache: &mut PagedCache,
        kv: &mut KvCacheTensors<T>,
        seqs: &[SeqId],
        seq_q: usize,
        hidden: &DeviceBuffer<T>,
    ) -> Result<DeviceBuffer<T>> {
        self.check_inputs(cache, kv, seqs, seq_q, hidden.len())?;
        if !hidden.stream().same_as(&self.stream) {
            return Err(ModelError::BadInput("hidden and the KV cache must be on the model's stream".into()));
        }
        // The bookkeeping is small (a table per sequence): a copy is the simplest undo.
        let backup = cache.clone();
        let result = plan(cache, seqs, seq_q).and_then(|step| self.run(cache, kv, &step, hidden));
        if result.is_err() {
            *cache = backup;
        }
        result
    }

    /// Checks a pass's inputs against the model, the cache and each other: `hidden_len`
    /// elements of input rows for `seq_q` tokens of each of `seqs`.
    pub(super) fn check_inputs(
        &self,
        cache: &PagedCache,
        kv: &KvCacheTensors<T>,
        seqs: &[SeqId],
        seq_q: usize,
        hidden_len: usize,
    ) -> Result<()> {
        let c = &self.config;
        if seqs.is_empty() || seq_q == 0 {
            return Err(ModelError::BadInput(format!(
                "{} sequences of {seq_q} tokens: nothing to run",
                seqs.len()
            )));
        }
        let mut seen = HashSet::new();
        for &s in seqs {
            if !seen.insert(s) {
                return Err(ModelError::BadInput(format!("sequence {s} appears twice in one step")));
            }
            if !cache.contains(s) {
                return Err(KvCacheError::SequenceNotFound(s).into());
            }
        }
        let want = seqs.len().checked_mul(seq_q).and_then(|t| t.checked_mul(c.hidden));
        if want != Some(hidden_len) {
            return Err(ModelError::BadInput(format!(
                "hidden has {} elements; {} sequences x {seq_q} tokens x {} need {want:?}",
                hidden_len,
                seqs.len(),
                c.hidden
            )));
        }
        let expected = self.kv_cache_shape(cache)?;
        if *kv.shape() != expected {
            return Err(ModelError::BadInput(format!(
                "the KV-cache tensors are {}, this model over this cache needs {expected}",
                kv.shape()
            )));
        }
        if !kv.stream().same_as(&self.stream) {
            return Err(ModelError::BadInput("hidden and the KV cache must be on the model's stream".into()));
        }
        Ok(())
    }

    fn run(
        &self,
        cache: &PagedCache,
        kv: &mut KvCacheTensors<T>,
        step: &Step,
        hidden: &DeviceBuffer<T>,
    ) -> Result<DeviceBuffer<T>> {
        let c = &self.config;
        let s = &self.stream;
        let n = step.seqs.len() * step.seq_q;
        let tables = cache.pack_block_tables(&step.seqs)?;
        let inputs = StepInputs {
            block_table: s.upload(&tables.block_tables)?,
            seq_lens: s.upload(&tables.context_lens)?,
            positions: s.upload(&step.positions)?,
            slots: s.upload(&step.slots)?,
            attention: PagedAttention::new(
                step.seqs.len(),
                step.seq_q,
                c.q_heads,
                c.kv_heads,
                c.head_dim,
                cache.block_size(),
                cache.num_blocks(),
                tables.max_blocks,
            ),
        };
        // The residual stream, a copy so the caller's input stays as it was.
        let mut h = s.alloc::<T>(n * c.hidden)?;
        h.copy_from_device(hidden)?;
        let mut ws = self.workspace(n, inputs, h)?;
        self.run_layers(&mut ws, kv, &step.copies, self.gemm)?;
        Ok(self.final_norm.output(ws.xn, ws.h))
    }

    /// The activations of a pass over `tokens` tokens around `inputs` and the residual stream
    /// `h` (`[tokens, hidden]`, the input rows), without scratch: products dequantise into
    /// temporaries and a key split allocates its partial results ([`Workspace::dequant`] and
    /// [`Workspace::attention_scratch`] can be set after).
    pub(super) fn workspace(
        &self,
        tokens: usize,
        inputs: StepInputs,
        h: DeviceBuffer<T>,
    ) -> Result<Workspace<T>> {
        let c = &self.config;
        let s = &self.stream;
        let n = tokens;
        Ok(Workspace {
            tokens,
            inputs,
            h,
            xn: s.alloc::<T>(n * c.hidden)?,
            q: s.alloc::<T>(n * c.q_dim())?,
            k: s.alloc::<T>(n * c.kv_dim())?,
            v: s.alloc::<T>(n * c.kv_dim())?,
            attn: s.alloc::<T>(n * c.q_dim())?,
            mlp: Mlp::new(s, c, n)?,
            delta: s.alloc::<T>(n * c.hidden)?,
            spare: if c.architecture.post_norms() { Some(s.alloc::<T>(n * c.hidden)?) } else { None },
            ones: match self.layers.iter().any(LayerWeights::has_biases) {
                true => Some(s.upload(&vec![T::from_f32(1.0); n])?),
                false => None,
            },
            dequant: None,
            split: None,
            attention_scratch: None,
        })
    }

    /// Elements the products of a pass over `tokens` tokens dequantise into at most (the
    /// blocks' projections and the head without a fused kernel at that count).
    pub(super) fn dequant_len(&self, tokens: usize) -> usize {
        self.linears().map(|w| w.dequant_len(tokens)).max().unwrap_or(0)
    }

    /// Every weight matrix a pass multiplies by: the layers' projections, then the head.
    fn linears(&self) -> impl Iterator<Item = &Linear<T>> {
        self.layers.iter().flat_map(LayerWeights::linears).chain(self.head.as_ref())
    }

    /// The output of a pass over `ws`: the final norm's rows, or the residual stream for a
    /// model without an output norm.
    pub(super) fn output<'w>(&self, ws: &'w Workspace<T>) -> &'w DeviceBuffer<T> {
        self.final_norm.output(&ws.xn, &ws.h)
    }

    /// Whether a step of `tokens` rows runs a GEMM over a whole weight matrix (a layer's or the
    /// head's): dense weights, or a block format without a fused product at that count.
    pub(super) fn uses_weight_gemm(&self, tokens: usize) -> bool {
        self.linears().any(|w| w.uses_gemm(tokens))
    }

    /// The output head's product of `ws`'s output into `logits` (`[tokens, vocab]`), with
    /// `ws`'s dequantisation scratch; `None` without a head.
    pub(super) fn head_into(
        &self,
        ws: &mut Workspace<T>,
        logits: &mut DeviceBuffer<T>,
        gemm: GemmPath,
    ) -> Result<()> {
        let head =
            self.head.as_ref().ok_or_else(|| ModelError::MissingTensor { name: OUTPUT_HEAD.into() })?;
        let out = self.final_norm.output(&ws.xn, &ws.h);
        let mut products = Products { gemm, scratch: ws.dequant.as_mut(), split: ws.split.as_mut() };
        head.apply_with(out, ws.tokens, logits, &mut products)
    }

    /// Every layer and the final norm over the workspace (`ws.h` holding the input rows, its
    /// inputs the step's positions, slots and tables), the copy-on-write `copies` first in each
    /// layer's cache. The same launches, in the same order, whether run eagerly or recorded.
    pub(super) fn run_layers(
        &self,
        ws: &mut Workspace<T>,
        kv: &mut KvCacheTensors<T>,
        copies: &[(usize, usize)],
        gemm: GemmPath,
    ) -> Result<()> {
        let c = &self.config;
        let shape = kv.shape().kernel_shape();
        let Workspace {
            tokens: n,
            inputs,
            h,
            xn,
            q,
            k,
            v,
            attn,
            mlp,
            delta,
            spare,
            ones,
            dequant,
            split,
            attention_scratch,
        } = ws;
        let n = *n;
        let mut products = Products { gemm, scratch: dequant.as_mut(), split: split.as_mut() };
        let norm = RmsNorm::new(n, c.hidden, c.rms_eps);
        let ones = ones.as_ref();
        // Every layer's norms and residual adds in its products, where every layer allows it
        // (one token, tiled MXFP4: LayerWeights::folded), or none's: each block's output then
        // waits in `delta` for the norm after it.
        let folded: Option<Vec<_>> = self.layers.iter().map(|w| w.folded(n)).collect();

        for (l, w) in self.layers.iter().enumerate() {
            let fold = folded.as_ref().map(|f| &f[l]);
            if let Some(f) = fold {
                w.project_qkv_folded(f, h, c.rms_eps, ones, q, k, v, &mut products)?;
            } else {
                // The previous block's output joins the residual stream in this norm's kernel.
                let attn_norm = w.norm(LayerTensor::AttnNorm);
                if l == 0 {
                    norm.run(h, attn_norm, xn)?;
                } else {
                    norm.run_residual(delta, h, attn_norm, xn)?;
                }
                w.project_qkv(xn, n, ones, q, k, v, &mut products)?;
            }
            let (k_cache, v_cache) = kv.layer_mut(l)?;
            // Copy-on-write of shared blocks first, one call per pair (docs/kv_cache.md).
            for &pair in copies {
                kv_cache_copy_blocks(&shape, &[pair], k_cache, v_cache)?;
            }
            // RoPE, with the rotated K and V written into the cache (one launch where the
            // style rotates whole heads).
            self.rope.run_into_cache(
                RopeTensor::new(q, c.q_heads),
                k,
                v,
                &inputs.positions,
                &shape,
                &inputs.slots,
                k_cache,
                v_cache,
            )?;
            let paged = PagedKv {
                k: k_cache,
                v: v_cache,
                block_table: &inputs.block_table,
                seq_lens: &inputs.seq_lens,
            };
            let options = FlashOptions::default();
            match attention_scratch.as_mut() {
                Some(scratch) => {
                    paged_attention_in(&inputs.attention, &options, q, &paged, attn, None, scratch)?
                }
                None => paged_attention(&inputs.attention, &options, q, &paged, attn, None)?,
            }
            if let Some(f) = fold {
                w.block_output_folded(f, Block::Attention, attn, h)?;
                w.mlp_activation_folded(f, h, c.rms_eps, &mut mlp.act)?;
                w.block_output_folded(f, Block::Mlp, &mlp.act, h)?;
                continue;
            }
            w.block_output(Block::Attention, &norm, attn, n, delta, spare, &mut products)?;

            norm.run_residual(delta, h, w.norm(LayerTensor::FfnNorm), xn)?;
            w.mlp_activation(xn, n, c.ffn, mlp, &mut products)?;
            w.block_output(Block::Mlp, &norm, &mlp.act, n, delta, spare, &mut products)?;
        }
        // The last block's output joins the stream in the final norm (folded: it already has).
        let weight = match &self.final_norm {
            FinalNorm::Output(weight) | FinalNorm::Unit(weight) => weight,
        };
        match folded {
            Some(_) => norm.run(h, weight, xn)?,
            None => norm.run_residual(delta, h, weight, xn)?,
        }
        Ok(())
    }
}

/// The device inputs of one pass: positions and cache slots of its tokens, the block tables
/// and context lengths its attention reads, and that attention's problem.
pub(super) struct StepInputs {
    pub positions: DeviceBuffer<i32>,
    pub slots: DeviceBuffer<i32>,
    pub block_table: DeviceBuffer<i32>,
    pub seq_lens: DeviceBuffer<i32>,
    pub attention: PagedAttention,
}

/// Every device buffer one pass over `tokens` tokens uses besides the weights and the KV cache:
/// allocated per call by [`Model::forward`], once by a decode workspace.
pub(super) struct Workspace<T: GemmElement> {
    pub tokens: usize,
    pub inputs: StepInputs,
    /// The residual stream: the input rows before the pass.
    pub h: DeviceBuffer<T>,
    /// Each norm's output; the pass's output when the model has an output norm.
    pub xn: DeviceBuffer<T>,
    q: DeviceBuffer<T>,
    k: DeviceBuffer<T>,
    v: DeviceBuffer<T>,
    attn: DeviceBuffer<T>,
    mlp: Mlp<T>,
    /// Each block's output (attention, then MLP), added to `h` by the norm after it
    /// (rmsnorm_residual: h += delta; xn = rmsnorm(h)), one kernel for both.
    delta: DeviceBuffer<T>,
    /// The post-norms' outputs (glm4), swapped with `delta`.
    spare: Option<DeviceBuffer<T>>,
    /// The biases are added by a rank-1 GEMM (`linear::add_bias`), which needs a ones column.
    ones: Option<DeviceBuffer<T>>,
    /// Where products without a fused kernel dequantise their weight (`None`: temporaries).
    pub dequant: Option<DeviceBuffer<T>>,
    /// Where fused products that split `k` keep their parts (`None`: temporaries).
    pub split: Option<SplitScratch>,
    /// The key split's partial results (`None`: temporaries).
    pub attention_scratch: Option<AttentionScratch>,
}

/// Appends `seq_q` tokens to each sequence and gathers positions, slots and block copies. The
/// capacity of the whole step is checked first (a sum that can only overestimate: two sequences
/// sharing a partly filled block may need one copy between them, counted twice); a refusal
/// after that is undone by the caller's backup.
pub(super) fn plan(cache: &mut PagedCache, seqs: &[SeqId], seq_q: usize) -> Result<Step> {
    let mut needed = 0usize;
    for &s in seqs {
        needed = needed.saturating_add(cache.blocks_needed(s, seq_q)?);
    }
    if needed > cache.num_free_blocks() {
        return Err(KvCacheError::CacheFull {
            needed,
            free: cache.num_free_blocks(),
            total: cache.num_blocks(),
        }
        .into());
    }
    let mut step =
        Step { seqs: seqs.to_vec(), seq_q, positions: Vec::new(), slots: Vec::new(), copies: Vec::new() };
    for &s in seqs {
        let start = cache.seq_len(s)?;
        step.positions.extend(plain_positions(start, seq_q)?);
        let append = cache.append(s, seq_q)?;
        step.copies.extend(append.copy.map(|c| c.pair()));
        step.slots.extend(append.slot_ids());
    }
    Ok(step)
}
