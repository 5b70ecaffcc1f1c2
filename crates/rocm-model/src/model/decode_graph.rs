//! The decode step of a fixed batch, its buffers allocated once ([`DecodeWorkspace`]) and its
//! launches recorded once and replayed ([`DecodeGraph`]).
//!
//! A decode step of [`Model::decode_step`] allocates its activations, uploads positions, slots,
//! block tables and context lengths, and queues about a dozen kernels a layer, each a host call.
//! The workspace holds every buffer a step of `batch` sequences needs (block tables `max_blocks`
//! wide), so a step allocates nothing; the graph records the step's launches once
//! (`rocm_runtime::Stream::capture_with`) and replays them with one launch. Per step, the host
//! still plans the step on the [`PagedCache`] (appends, copy-on-write), writes the inputs' new
//! contents (the input rows, positions, slots, padded block tables, context lengths) and runs
//! the rare copy-on-write block copies before the replay.
//!
//! ```no_run
//! # use rocm_model::kv_cache::PagedCache;
//! # fn f(model: &rocm_model::model::Model<rocm_runtime::bf16>, cache: &mut PagedCache,
//! #      kv: &mut rocm_model::kv_cache::KvCacheTensors<rocm_runtime::bf16>,
//! #      seqs: &[rocm_model::kv_cache::SeqId], tokens: &[u32]) -> rocm_model::model::Result<()> {
//! let mut workspace = model.decode_workspace(kv, seqs.len(), 64)?; // borrows the model and the KV cache
//! let mut graph = workspace.graph()?; // records one step (or runs eagerly where graphs are missing)
//! let hidden = graph.step_tokens(cache, seqs, tokens)?; // [batch, hidden]
//! let logits = graph.logits(); // [batch, vocab], with an output head
//! # Ok(()) }
//! ```
//!
//! The workspace borrows the model (its weights) and the KV-cache tensors, and the graph borrows
//! the workspace for its whole life: nothing a recorded launch uses can be dropped, moved or
//! replaced while it can be replayed. Between replays the graph's state is shared, so inputs are
//! written with `DeviceBuffer::write_from_host` and block copies run through
//! `kv_cache_copy_blocks_shared`: contents change, allocations never.

use rocm_kernels::attention::{AttentionScratch, FlashOptions, PagedAttention};
use rocm_kernels::gemm::{GemmElement, GemmPath};
use rocm_kernels::kv_cache::kv_cache_copy_blocks_shared;
use rocm_kernels::quant::SplitScratch;
use rocm_runtime::{DeviceBuffer, Graph, Stream};

use super::error::{ModelError, Result};
use super::forward::{Model, Step, StepInputs, Workspace, plan};
use crate::kv_cache::{KvCacheShape, KvCacheTensors, PAD_BLOCK, PagedCache, SeqId};

/// The buffers of a decode step of `batch` sequences, allocated once, over the model and the
/// KV-cache tensors it borrows ([`Model::decode_workspace`]). [`DecodeWorkspace::graph`] records
/// a step and replays it; [`DecodeWorkspace::eager`] runs the same launches eagerly.
pub struct DecodeWorkspace<'a, T: GemmElement> {
    model: &'a Model<T>,
    kv: &'a mut KvCacheTensors<T>,
    batch: usize,
    max_blocks: usize,
    ws: Workspace<T>,
    /// `[batch, vocab]`, for a model with an output head.
    logits: Option<DeviceBuffer<T>>,
}

impl<T: GemmElement> std::fmt::Debug for DecodeWorkspace<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeWorkspace")
            .field("batch", &self.batch)
            .field("max_blocks", &self.max_blocks)
            .field("kv", &self.kv)
            .finish_non_exhaustive()
    }
}

/// A step's input rows: hidden vectors, or token ids looked up in the embedding.
#[derive(Clone, Copy)]
enum Rows<'r, T> {
    Hidden(&'r [T]),
    Tokens(&'r [u32]),
}

impl<T: GemmElement> Model<T> {
    /// The buffers of decode steps of `batch` sequences whose block tables are `max_blocks`
    /// wide (so each sequence holds at most `max_blocks * block_size` tokens), over `kv`, which
    /// the workspace borrows with the model until it is dropped. Allocates the activations,
    /// the inputs, a dequantisation scratch as large as the largest weight whose product has no
    /// fused kernel at `batch` tokens (none when all have one), the fused products' split
    /// scratch at batches that can split `k` (9 to 32), the attention's split scratch,
    /// and the logits when the model has an output head.
    pub fn decode_workspace<'a>(
        &'a self,
        kv: &'a mut KvCacheTensors<T>,
        batch: usize,
        max_blocks: usize,
    ) -> Result<DecodeWorkspace<'a, T>> {
        let c = self.config();
        let s = self.stream();
        let shape = kv.shape();
        if batch == 0 || max_blocks == 0 {
            return Err(ModelError::BadInput(format!(
                "a decode workspace of {batch} sequences and {max_blocks} blocks each: nothing to run"
            )));
        }
        let expected =
            KvCacheShape::new(c.layers, shape.num_blocks(), shape.block_size(), c.kv_heads, c.head_dim)?;
        if *shape != expected {
            return Err(ModelError::BadInput(format!(
                "the KV-cache tensors are {shape}, this model needs {expected}"
            )));
        }
        if max_blocks > shape.num_blocks() {
            return Err(ModelError::BadInput(format!(
                "block tables {max_blocks} wide over a cache of {} blocks",
                shape.num_blocks()
            )));
        }
        if !kv.stream().same_as(s) {
            return Err(ModelError::BadInput("the KV cache must be on the model's stream".into()));
        }
        let attention = PagedAttention::new(
            batch,
            1,
            c.q_heads,
            c.kv_heads,
            c.head_dim,
            shape.block_size(),
            shape.num_blocks(),
            max_blocks,
        );
        let inputs = StepInputs {
            positions: s.alloc_zeroed(batch)?,
            slots: s.upload(&vec![-1; batch])?,
            block_table: s.upload(&vec![PAD_BLOCK; batch * max_blocks])?,
            seq_lens: s.alloc_zeroed(batch)?,
            attention,
        };
        let mut ws = self.workspace(batch, inputs, s.alloc_zeroed(batch * c.hidden)?)?;
        let dequant = self.dequant_len(batch);
        ws.dequant = if dequant > 0 { Some(s.alloc(dequant)?) } else { None };
        ws.split = if SplitScratch::wanted(batch) { Some(SplitScratch::new(s)?) } else { None };
        ws.attention_scratch =
            Some(AttentionScratch::for_paged::<T>(s, &attention, &FlashOptions::default())?);
        let logits = match self.head_rows() {
            Some(vocab) => Some(s.alloc(batch * vocab)?),
            None => None,
        };
        Ok(DecodeWorkspace { model: self, kv, batch, max_blocks, ws, logits })
    }
}

impl<'a, T: GemmElement> DecodeWorkspace<'a, T> {
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Columns of the block tables: the most blocks a sequence may hold.
    pub fn max_blocks(&self) -> usize {
        self.max_blocks
    }

    /// The same steps as [`DecodeWorkspace::graph`]'s, run eagerly on the workspace's buffers
    /// (what a platform without graphs runs): no allocation per step, a host call per launch.
    pub fn eager(&mut self) -> DecodeGraph<'_, 'a, T> {
        DecodeGraph { inner: Inner::Eager(self) }
    }

    /// An eager step ([`DecodeGraph::step`] without a graph).
    fn step_rows(
        &mut self,
        cache: &mut PagedCache,
        seqs: &[SeqId],
        rows: Rows<'_, T>,
    ) -> Result<&DeviceBuffer<T>> {
        let backup = self.prepare(cache, seqs, rows)?;
        let gemm = self.model.gemm_path();
        restore_on_error(cache, backup, self.run(gemm))?;
        Ok(self.model.output(&self.ws))
    }

    /// Records a step into a graph, or returns a [`DecodeGraph`] that runs the same launches
    /// eagerly where the platform has no graphs (`rocm_runtime::Error::GraphsUnsupported`: a
    /// HIP library without them) or a graph would be slower. The recording takes the GEMM path
    /// of the model ([`Model::set_gemm_path`]); the vendor BLAS cannot be recorded (`Vendor`
    /// fails here), so under `Auto` a step that runs a GEMM over a whole weight (dense weights,
    /// or a block format without a fused product at this batch) stays eager: the portable GEMM
    /// costs more than the launches a graph saves (H100, 8B layer shapes: bf16 decode 307 us a
    /// layer eager, 341 recorded at batch 1, 4811 at batch 32). Small products (biases, rank 1)
    /// take the portable GEMM in a recording.
    ///
    /// First runs one step eagerly with inputs that touch nothing (no cache slot written, no key
    /// read) on that path, so every kernel's module is loaded before the recording.
    pub fn graph(&mut self) -> Result<DecodeGraph<'_, 'a, T>> {
        let stream = self.model.stream().clone();
        if !graphs_supported(&stream)? {
            return Ok(self.eager());
        }
        let path = match self.model.gemm_path() {
            GemmPath::Auto if self.model.uses_weight_gemm(self.batch) => return Ok(self.eager()),
            GemmPath::Auto => GemmPath::Portable,
            path => path,
        };
        self.idle_inputs()?;
        self.run(path)?;
        let graph = stream.capture_with(self, move |_, ws| ws.run(path))?;
        Ok(DecodeGraph { inner: Inner::Captured(graph) })
    }

    /// Inputs for which a step writes no cache slot (slots -1) and reads no key (empty
    /// sequences, tables of padding), over zero rows.
    fn idle_inputs(&self) -> Result<()> {
        let i = &self.ws.inputs;
        i.positions.write_from_host(&vec![0; self.batch])?;
        i.slots.write_from_host(&vec![-1; self.batch])?;
        i.block_table.write_from_host(&vec![PAD_BLOCK; self.batch * self.max_blocks])?;
        i.seq_lens.write_from_host(&vec![0; self.batch])?;
        self.ws.h.write_from_host(&vec![T::from_f32(0.0); self.ws.h.len()])?;
        Ok(())
    }

    /// The step's launches on the workspace: every layer, the final norm, the head.
    fn run(&mut self, gemm: GemmPath) -> Result<()> {
        self.model.run_layers(&mut self.ws, self.kv, &[], gemm)?;
        if let Some(logits) = self.logits.as_mut() {
            self.model.head_into(&mut self.ws, logits, gemm)?;
        }
        Ok(())
    }

    /// Checks a step, plans it on `cache` and writes its inputs (and runs its copy-on-write
    /// block copies) through shared borrows, as a graph's state allows. Returns the cache as it
    /// was, to put back if the step then fails; on an error here the cache is already put back.
    fn prepare(&self, cache: &mut PagedCache, seqs: &[SeqId], rows: Rows<'_, T>) -> Result<PagedCache> {
        let model = self.model;
        let hidden = model.config().hidden;
        if seqs.len() != self.batch {
            return Err(ModelError::BadInput(format!(
                "{} sequences in a step of a decode workspace for {}",
                seqs.len(),
                self.batch
            )));
        }
        let rows: Vec<T> = match rows {
            Rows::Hidden(x) => {
                model.check_inputs(cache, self.kv, seqs, 1, x.len())?;
                x.to_vec()
            }
            Rows::Tokens(ids) => {
                if ids.len() != self.batch {
                    return Err(ModelError::BadInput(format!(
                        "{} tokens for a step of {} sequences",
                        ids.len(),
                        self.batch
                    )));
                }
                let x = model.embedding_rows(ids)?;
                model.check_inputs(cache, self.kv, seqs, 1, x.len())?;
                x
            }
        };
        debug_assert_eq!(rows.len(), self.batch * hidden);
        let block_size = cache.block_size();
        for &s in seqs {
            let tokens = cache.seq_len(s)? + 1;
            let blocks = tokens.div_ceil(block_size);
            if blocks > self.max_blocks {
                return Err(ModelError::BadInput(format!(
                    "sequence {s} would hold {tokens} tokens in {blocks} blocks; this decode workspace's \
                     tables hold {} blocks",
                    self.max_blocks
                )));
            }
        }
        let backup = cache.clone();
        let loaded = plan(cache, seqs, 1).and_then(|step| self.load(cache, &step, &rows));
        match loaded {
            Ok(()) => Ok(backup),
            Err(e) => {
                *cache = backup;
                Err(e)
            }
        }
    }

    /// Writes a planned step's inputs and runs its block copies.
    fn load(&self, cache: &PagedCache, step: &Step, rows: &[T]) -> Result<()> {
        let tables = cache.pack_block_tables_with_width(&step.seqs, self.max_blocks)?;
        let i = &self.ws.inputs;
        self.ws.h.write_from_host(rows)?;
        // One wait for the four index inputs, not one each (they are all i32).
        DeviceBuffer::write_all_from_host(&[
            (&i.positions, &step.positions[..]),
            (&i.slots, &step.slots[..]),
            (&i.block_table, &tables.block_tables[..]),
            (&i.seq_lens, &tables.context_lens[..]),
        ])?;
        if !step.copies.is_empty() {
            let shape = self.kv.shape().kernel_shape();
            for l in 0..self.kv.num_layers() {
                for &pair in &step.copies {
                    kv_cache_copy_blocks_shared(&shape, &[pair], self.kv.k(l)?, self.kv.v(l)?)?;
                }
            }
        }
        Ok(())
    }
}

/// `launched`, after putting the cache's bookkeeping back as `prepare` found it (`backup`) if
/// the step's launches failed: a failed step leaves the cache as it was.
fn restore_on_error(cache: &mut PagedCache, backup: PagedCache, launched: Result<()>) -> Result<()> {
    if launched.is_err() {
        *cache = backup;
    }
    launched
}

/// Whether `stream`'s platform can record graphs (`Backend::graph_support`): `false` only for
/// `rocm_runtime::Error::GraphsUnsupported`.
fn graphs_supported(stream: &Stream) -> Result<bool> {
    match stream.backend().graph_support() {
        Ok(()) => Ok(true),
        Err(rocm_runtime::Error::GraphsUnsupported(why)) => {
            tracing::info!(%why, "graphs are unsupported here: decode steps run eagerly on their workspace");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// A decode step recorded once and replayed each step ([`DecodeWorkspace::graph`]); where the
/// platform has no graphs, the same launches run eagerly on the same buffers.
pub struct DecodeGraph<'w, 'a, T: GemmElement> {
    inner: Inner<'w, 'a, T>,
}

enum Inner<'w, 'a, T: GemmElement> {
    Captured(Graph<'w, DecodeWorkspace<'a, T>>),
    Eager(&'w mut DecodeWorkspace<'a, T>),
}

impl<T: GemmElement> std::fmt::Debug for DecodeGraph<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeGraph").field("captured", &self.is_captured()).finish_non_exhaustive()
    }
}

impl<'a, T: GemmElement> DecodeGraph<'_, 'a, T> {
    /// Whether the step was recorded (`false`: the platform has no graphs, steps run eagerly).
    pub fn is_captured(&self) -> bool {
        matches!(self.inner, Inner::Captured(_))
    }

    fn workspace(&self) -> &DecodeWorkspace<'a, T> {
        match &self.inner {
            Inner::Captured(graph) => graph.state(),
            Inner::Eager(ws) => ws,
        }
    }

    pub fn batch(&self) -> usize {
        self.workspace().batch
    }

    /// One token of each of `seqs` (exactly `batch` of them), `hidden` being their input rows
    /// (`[batch, hidden]`): the step planned on `cache`, its inputs written, then the recorded
    /// launches replayed (or run eagerly). Returns the output rows (`[batch, hidden]`, as
    /// [`Model::decode_step`]'s); [`DecodeGraph::logits`] holds their logits. A refused or
    /// failed step leaves `cache` as it was.
    pub fn step(&mut self, cache: &mut PagedCache, seqs: &[SeqId], hidden: &[T]) -> Result<&DeviceBuffer<T>> {
        self.step_rows(cache, seqs, Rows::Hidden(hidden))
    }

    /// [`DecodeGraph::step`] with token ids, their rows looked up in the token embedding.
    pub fn step_tokens(
        &mut self,
        cache: &mut PagedCache,
        seqs: &[SeqId],
        tokens: &[u32],
    ) -> Result<&DeviceBuffer<T>> {
        self.step_rows(cache, seqs, Rows::Tokens(tokens))
    }

    /// The logits of the last step's outputs (`[batch, vocab]`), for a model with an output head.
    pub fn logits(&self) -> Option<&DeviceBuffer<T>> {
        self.workspace().logits.as_ref()
    }

    /// Writes NaN into the output rows and the logits, so that a test sees a step that did not
    /// write them.
    pub fn poison_outputs(&self) -> Result<()> {
        let ws = self.workspace();
        let nan = |b: &DeviceBuffer<T>| b.write_from_host(&vec![T::from_f32(f32::NAN); b.len()]);
        nan(ws.model.output(&ws.ws))?;
        if let Some(logits) = &ws.logits {
            nan(logits)?;
        }
        Ok(())
    }

    fn step_rows(
        &mut self,
        cache: &mut PagedCache,
        seqs: &[SeqId],
        rows: Rows<'_, T>,
    ) -> Result<&DeviceBuffer<T>> {
        match &mut self.inner {
            Inner::Captured(graph) => {
                let ws = graph.state();
                let backup = ws.prepare(cache, seqs, rows)?;
                restore_on_error(cache, backup, graph.launch().map_err(ModelError::from))?;
                Ok(ws.model.output(&ws.ws))
            }
            Inner::Eager(ws) => ws.step_rows(cache, seqs, rows),
        }
    }
}
