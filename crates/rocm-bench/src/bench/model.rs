//! `bench model`: rocm-model's forward pass at Llama-3-8B layer shapes (hidden 4096, FFN 14336,
//! 32 query and 8 KV heads of 128), two layers, activations in bf16, for each weight type.
//!
//! - decode: one token for each of 1, 8 or 32 sequences that already hold [`CONTEXT`] tokens;
//!   the time of a whole step (host work included: `decode_step` then a synchronise, wall
//!   clock), median of [`STEPS`], divided by the layers. The row's bytes are the weight bytes
//!   one layer's pass reads (`Model::read_weight_bytes`: as they sit on the device, less a
//!   tiled q4_K copy, which is read instead of the rows), so "of copy" is the layer's
//!   weight-read rate against the copy bandwidth of the same run: the memory-limit target is at
//!   least 0.8 (a step no slower than 1.25 x its weight bytes over the bandwidth). The shape column gives the tokens/s of a
//!   32-layer model at that per-layer time (no embedding, head or sampling).
//! - decode graph: the same step through a decode graph (`Model::decode_workspace`,
//!   `DecodeWorkspace::graph`): the host plans the step, writes the inputs (the rows from the
//!   host, positions, slots, tables, lengths) and launches the recorded step once. Rows
//!   `model decode graph b<N>` next to the eager ones; the difference is the host work and
//!   launches the graph removes. The vendor BLAS cannot be recorded, so a step that runs a GEMM
//!   over whole weights (BF16; block formats past 8 tokens, 32 on NVIDIA's matrix cores) is not
//!   recorded but run eagerly on the workspace (`DecodeWorkspace::graph` says why), as where the
//!   platform has no graphs: the row then says `eager workspace`.
//! - decode graph, per added layer: the graph step again on a model of [`DEEPER`] layers; the
//!   difference over the [`LAYERS`]-layer step, divided by the layers added, is what one more
//!   layer costs a step (rows `model decode graph b<N> +layer`, or `eager workspace` where the
//!   step is not recorded). A difference of two medians, divided by six added layers: on an
//!   H200 it moves by ~1 us a layer between calls at b1 (by up to ~5 us with two added layers,
//!   too little to tell most changes apart) and by ~10 us at b32. The plain rows divide the whole
//!   step by [`LAYERS`], so they also carry a share of what every step pays once (the host's
//!   uploads of the inputs, the graph's launch, the final synchronise); the `+layer` rows
//!   leave that out and say how much it is (`fixed`), and their tokens/s is a 32-layer step:
//!   fixed + 32 x the added layer's time. Both are measured; the target (issue 21) is the
//!   layer's time against its weight bytes.
//! - prefill: [`PREFILL`] tokens of one sequence, per layer, TFLOP/s of the projections
//!   (`2 x tokens x parameters`).
//! - read-only ceilings (`read layer, 4 launches`, `4 dependent launches` and `1 launch`,
//!   [`layer_read`]): the layer's weight bytes read by `stream_read` in the decode step's four
//!   product launches (plain and dependent), and in one, recorded in a graph: the least a layer
//!   can cost with a launch a product, and with one.
//! - Q8_0 only, the MLP block as the chain's four launches and as one persistent launch
//!   ([`persistent_mlp`]), recorded in a graph, a layer's time.
//!
//! - torch (after the table): `scripts/bench_model_torch.py --iters N`, run with `python3` from
//!   the current directory (the repository root on the GPU host), its lines passed through:
//!   Hugging Face transformers' `LlamaModel` at the same layer shapes (one layer, bf16 weights,
//!   random init, SDPA attention, the rows given as `inputs_embeds`: no embedding or head), eager
//!   (`torch eager ...` rows) and through `torch.compile` in its default mode (`torch compile
//!   ...`; compilation in the untimed warm-up, a recompile while timing fails the row). Decode
//!   b1/b8/b32 on a `StaticCache` already holding 512 tokens a sequence (the Rust rows hold
//!   [`CONTEXT`]), each step timed whole from an idle GPU to an idle GPU (host work included),
//!   median; prefill of 512 tokens with TFLOP/s as `2 x tokens x parameters`. "of copy" is
//!   against the script's own `torch copy` row (1 GiB device-to-device `copy_`), not the Rust
//!   copy row. Without `python3`, torch or the script, one line says why the rows are absent;
//!   the bench never fails because of them.
//!
//! The weight types are BF16, Q8_0, Q4_K and MXFP4 as the files store them, and MXFP4 loaded in
//! the tiled layout (`MXFP4-tiled`: `Mxfp4Layout::Tiled`, one-token products on the tiled kernel,
//! more tokens dequantised from the tiles), and Q4_K with a tiled copy beside its rows
//! (`Q4_K-tiled`: `Q4kLayout::TiledCopy`, one-token passes folded into the tiled q4_K kernel,
//! twice the projections' bytes on the device: a measurement), and Q8_0 in its tiled layout
//! (`Q8_0-tiled`: `Q8Layout::Tiled`, the file's bytes) and with a tiled copy beside its rows
//! (`Q8_0-tiled-copy`: `Q8Layout::TiledCopy`). `ROCMFORGE_BENCH_MODEL_TYPES` (a comma-separated
//! list of their names, `Q4_K,MXFP4-tiled`) limits the rows to those: a profiler attached to one
//! type's steps need not wade through the others'.
//!
//! Weights are random valid blocks (scales chosen so values stay within about +-0.06, like a
//! trained 8B model's), written raw: quantising 400 M values on the host would take longer than
//! the benchmark.

use std::sync::Arc;
use std::time::Instant;

use rocm_model::kv_cache::{KvCacheTensors, PagedCache, SeqId};
use rocm_model::model::synthetic::SyntheticSpec;
use rocm_model::model::{
    Architecture, LoadOptions, Model, ModelConfig, Mxfp4Layout, Q4kLayout, Q8Layout, tensor_name,
};
use rocm_model::{GgmlType, GgufFile};
use rocm_runtime::{bf16, f16};
use rocm_testkit::Rng;

use super::{Bench, Row, layer_read, persistent_mlp};
use crate::Result;

const LAYERS: usize = 2;
/// Layers of the second model the graph rows run, for what one more layer costs a step: six
/// more than [`LAYERS`] divide the two medians' jitter by six (four layers left it at ~5 us).
const DEEPER: usize = 8;
/// Tokens each sequence holds before the timed decode steps.
const CONTEXT: usize = 128;
const BATCHES: [usize; 3] = [1, 8, 32];
/// Timed decode steps (the median is reported), after two untimed ones: 31, not 9, for the
/// `+layer` rows (a difference of two medians); a b1 step takes ~0.3 ms. The medians still move
/// by a few microseconds a layer between calls (the module doc).
const STEPS: usize = 31;
const PREFILL: usize = 512;
/// The weight types benchmarked: bf16 as stored, and the block formats kept as stored.
const TYPES: [GgmlType; 4] = [GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::MXFP4];

/// A model's weights as the bench loads them: the file's type, and how they are kept
/// (`MXFP4-tiled`: [`Mxfp4Layout::Tiled`]; `Q4_K-tiled`: [`Q4kLayout::TiledCopy`]; `Q8_0-tiled`:
/// [`Q8Layout::Tiled`]; `Q8_0-tiled-copy`: [`Q8Layout::TiledCopy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Weights {
    ty: GgmlType,
    options: LoadOptions,
}

impl Weights {
    /// [`TYPES`] as the files store them, then MXFP4 tiled, q4_K with its tiled copy, q8_0 tiled
    /// and with its tiled copy.
    fn all() -> Vec<Weights> {
        let rows = TYPES.map(|ty| Weights { ty, options: LoadOptions::default() });
        let tiled = LoadOptions { mxfp4: Mxfp4Layout::Tiled, ..LoadOptions::default() };
        let q4k_copy = LoadOptions { q4k: Q4kLayout::TiledCopy, ..LoadOptions::default() };
        let q8_tiled = LoadOptions { q8_0: Q8Layout::Tiled, ..LoadOptions::default() };
        let q8_copy = LoadOptions { q8_0: Q8Layout::TiledCopy, ..LoadOptions::default() };
        rows.into_iter()
            .chain([
                Weights { ty: GgmlType::MXFP4, options: tiled },
                Weights { ty: GgmlType::Q4_K, options: q4k_copy },
                Weights { ty: GgmlType::Q8_0, options: q8_tiled },
                Weights { ty: GgmlType::Q8_0, options: q8_copy },
            ])
            .collect()
    }

    /// The rows' type column.
    fn name(self) -> &'static str {
        match self.ty {
            GgmlType::MXFP4 if self.options.mxfp4 == Mxfp4Layout::Tiled => "MXFP4-tiled",
            GgmlType::Q4_K if self.options.q4k == Q4kLayout::TiledCopy => "Q4_K-tiled",
            GgmlType::Q8_0 if self.options.q8_0 == Q8Layout::Tiled => "Q8_0-tiled",
            GgmlType::Q8_0 if self.options.q8_0 == Q8Layout::TiledCopy => "Q8_0-tiled-copy",
            _ => self.ty.name(),
        }
    }
}

fn config(layers: usize) -> ModelConfig {
    ModelConfig {
        hidden: 4096,
        layers,
        ffn: 14_336,
        q_heads: 32,
        kv_heads: 8,
        head_dim: 128,
        rotary_dim: 128,
        rope_theta: 500_000.0,
        ..SyntheticSpec::small(Architecture::Llama).config
    }
}

/// The weights [`run`] measures: [`Weights::all`], or those named in
/// `ROCMFORGE_BENCH_MODEL_TYPES`.
fn selected_weights() -> Result<Vec<Weights>> {
    super::env_selection("ROCMFORGE_BENCH_MODEL_TYPES", &Weights::all(), Weights::name)
}

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for weights in selected_weights()? {
        let ty = weights.ty;
        let model = load(b, weights, LAYERS)?;
        // What a pass reads (a tiled q4_K copy is read instead of the rows, not beside them).
        let layer_bytes = model.read_weight_bytes() / LAYERS as u64;
        let mut graph_steps = Vec::new();
        for batch in BATCHES {
            rows.push(decode(b, &model, weights, batch, layer_bytes)?);
            let (row, step_ms) = decode_graph(b, &model, weights, batch, layer_bytes)?;
            graph_steps.push((batch, step_ms, format!("{} +layer", row.kernel)));
            rows.push(row);
        }
        rows.push(prefill(b, &model, weights, layer_bytes)?);
        drop(model);
        rows.extend(layer_read::rows(b, ty, &config(LAYERS))?);
        if weights.name() == "Q8_0" {
            rows.extend(persistent_mlp::rows(b, &config(LAYERS))?);
        }
        let deeper = load(b, weights, DEEPER)?;
        for (batch, short_ms, kernel) in graph_steps {
            let (_, deep_ms) = decode_graph(b, &deeper, weights, batch, layer_bytes)?;
            rows.push(added_layer_row(kernel, weights, batch, short_ms, deep_ms, layer_bytes));
        }
    }
    Ok(rows)
}

/// A model of `layers` random 8B-shaped layers of `weights`, loaded.
fn load(b: &mut Bench, weights: Weights, layers: usize) -> Result<Model<bf16>> {
    let file = Arc::new(GgufFile::from_bytes(layers_of(&mut b.rng, weights.ty, layers)?)?);
    let model = Model::<bf16>::load_with(file, &b.stream, weights.options)?;
    b.stream.synchronize()?;
    Ok(model)
}

/// What one more layer costs a graph step of `batch` sequences, from the steps of the
/// [`LAYERS`]- and [`DEEPER`]-layer models (ms); the rest of the short step is what every step
/// pays once.
fn added_layer_row(
    kernel: String,
    weights: Weights,
    batch: usize,
    short_ms: f64,
    deep_ms: f64,
    layer_bytes: u64,
) -> Row {
    let layer_ms = (deep_ms - short_ms) / (DEEPER - LAYERS) as f64;
    let fixed_ms = short_ms - LAYERS as f64 * layer_ms;
    let tokens_per_s = batch as f64 / ((fixed_ms + 32.0 * layer_ms) / 1e3);
    Row {
        kernel,
        dtype: weights.name(),
        shape: format!("8B: {tokens_per_s:.0} tok/s@32L, fixed {:.1} us", fixed_ms * 1e3),
        ms: layer_ms,
        bytes: layer_bytes,
        flops: None,
    }
}

/// Where `bench model` finds the PyTorch script, relative to the current directory.
const TORCH_SCRIPT: &str = "scripts/bench_model_torch.py";

/// Runs [`TORCH_SCRIPT`] with `--iters iters`, its output passed through, or prints one line
/// saying why there are no PyTorch rows. Never fails: the Rust rows are already printed.
pub fn torch_rows(iters: usize) {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let _ = std::io::stdout().flush();
    if !std::path::Path::new(TORCH_SCRIPT).is_file() {
        let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
        println!("torch rows: absent, no {TORCH_SCRIPT} under {cwd} (run from the repository root)");
        return;
    }
    let probe = Command::new("python3")
        .args(["-c", "import torch"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match probe {
        Err(e) => {
            println!("torch rows: absent, no python3 ({e})");
            return;
        }
        Ok(s) if !s.success() => {
            println!("torch rows: absent, python3 cannot import torch");
            return;
        }
        Ok(_) => {}
    }
    match Command::new("python3")
        .arg(TORCH_SCRIPT)
        .args(["--iters", &iters.to_string()])
        // The Rust rows' shapes: a step over LAYERS layers of CONTEXT-token sequences.
        .args(["--layers", &LAYERS.to_string(), "--context", &CONTEXT.to_string()])
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => println!("torch rows: {TORCH_SCRIPT} stopped ({s}); rows above it stand"),
        Err(e) => println!("torch rows: absent, {TORCH_SCRIPT} did not start ({e})"),
    }
}

/// Token slots a cache block of the decode rows holds.
const BLOCK: usize = 16;
/// Blocks each sequence of the decode rows may take: its context and every step.
const PER_SEQ: usize = (CONTEXT + STEPS + 2).div_ceil(BLOCK);

/// A cache of `batch` sequences of [`CONTEXT`] tokens each, prefilled.
fn decode_cache(
    b: &mut Bench,
    model: &Model<bf16>,
    batch: usize,
) -> Result<(PagedCache, KvCacheTensors<bf16>, Vec<SeqId>)> {
    let mut cache = PagedCache::new(batch * PER_SEQ, BLOCK)?;
    let mut kv = model.new_kv_cache(&cache)?;
    let seqs: Vec<SeqId> = (0..batch).map(|_| cache.add_sequence()).collect();
    let context = b.upload_random::<bf16>(CONTEXT * model.config().hidden, -1.0, 1.0)?;
    for &s in &seqs {
        model.prefill(&mut cache, &mut kv, s, &context)?;
    }
    Ok((cache, kv, seqs))
}

/// The median of `STEPS` timed calls of `step` (after two untimed ones), each from an idle
/// stream to an idle stream, in ms.
fn median_step(b: &Bench, mut step: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut times = Vec::with_capacity(STEPS);
    for i in 0..STEPS + 2 {
        b.stream.synchronize()?;
        let t = Instant::now();
        step()?;
        b.stream.synchronize()?;
        if i >= 2 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn decode_row(kernel: String, weights: Weights, batch: usize, step_ms: f64, layer_bytes: u64) -> Row {
    let layer_ms = step_ms / LAYERS as f64;
    let tokens_per_s = batch as f64 / (layer_ms * 32.0 / 1e3);
    Row {
        kernel,
        dtype: weights.name(),
        shape: format!("8B layer: {tokens_per_s:.0} tok/s@32L"),
        ms: layer_ms,
        bytes: layer_bytes,
        flops: None,
    }
}

/// A decode step of `batch` sequences of [`CONTEXT`] tokens each.
fn decode(
    b: &mut Bench,
    model: &Model<bf16>,
    weights: Weights,
    batch: usize,
    layer_bytes: u64,
) -> Result<Row> {
    let (mut cache, mut kv, seqs) = decode_cache(b, model, batch)?;
    let x = b.upload_random::<bf16>(batch * model.config().hidden, -1.0, 1.0)?;
    let step_ms = median_step(b, || {
        model.decode_step(&mut cache, &mut kv, &seqs, &x)?;
        Ok(())
    })?;
    Ok(decode_row(format!("model decode b{batch}"), weights, batch, step_ms, layer_bytes))
}

/// [`decode`] through a decode graph recorded once (the recording is not timed); the row and the
/// whole step's median time (ms).
fn decode_graph(
    b: &mut Bench,
    model: &Model<bf16>,
    weights: Weights,
    batch: usize,
    layer_bytes: u64,
) -> Result<(Row, f64)> {
    let (mut cache, mut kv, seqs) = decode_cache(b, model, batch)?;
    let x: Vec<bf16> = b.random(batch * model.config().hidden, -1.0, 1.0);
    let mut workspace = model.decode_workspace(&mut kv, batch, PER_SEQ)?;
    let mut graph = workspace.graph()?;
    let mode = if graph.is_captured() { "graph" } else { "eager workspace" };
    let step_ms = median_step(b, || {
        graph.step(&mut cache, &seqs, &x)?;
        Ok(())
    })?;
    Ok((decode_row(format!("model decode {mode} b{batch}"), weights, batch, step_ms, layer_bytes), step_ms))
}

/// A prefill of [`PREFILL`] tokens of one sequence.
fn prefill(b: &mut Bench, model: &Model<bf16>, weights: Weights, layer_bytes: u64) -> Result<Row> {
    let c = model.config();
    let x = b.upload_random::<bf16>(PREFILL * c.hidden, -1.0, 1.0)?;
    let mut times = Vec::new();
    for round in 0..4 {
        let mut cache = PagedCache::new(PREFILL.div_ceil(16), 16)?;
        let mut kv = model.new_kv_cache(&cache)?;
        let s = cache.add_sequence();
        b.stream.synchronize()?;
        let t = Instant::now();
        model.prefill(&mut cache, &mut kv, s, &x)?;
        b.stream.synchronize()?;
        if round > 0 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    let layer_ms = times[times.len() / 2] / LAYERS as f64;
    let params =
        (c.hidden * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * c.hidden + 3 * c.hidden * c.ffn) as f64;
    Ok(Row {
        kernel: format!("model prefill {PREFILL}"),
        dtype: weights.name(),
        shape: format!("8B layer: {:.0} tok/s@32L", PREFILL as f64 / (layer_ms * 32.0 / 1e3)),
        ms: layer_ms,
        bytes: layer_bytes,
        flops: Some(2.0 * PREFILL as f64 * params),
    })
}

/// The GGUF bytes of `layers` 8B-shaped layers whose projections are random blocks of `ty`
/// (norms f32 near 1).
fn layers_of(rng: &mut Rng, ty: GgmlType, layers: usize) -> Result<Vec<u8>> {
    let config = config(layers);
    let spec = SyntheticSpec {
        config: config.clone(),
        output_norm: false,
        ..SyntheticSpec::small(Architecture::Llama)
    };
    let mut w = spec.metadata_writer()?;
    for l in 0..config.layers {
        for &t in Architecture::Llama.layer_tensors() {
            let dims = t.dims(&config);
            let name = tensor_name(l, t);
            if dims.len() == 1 {
                let norm: Vec<f32> = (0..dims[0]).map(|_| rng.uniform(0.9, 1.1) as f32).collect();
                w.add_f32(name, &dims, &norm)?;
            } else {
                let elements = (dims[0] * dims[1]) as usize;
                w.add_tensor(name, ty, &dims, random_blocks(rng, ty, elements))?;
            }
        }
    }
    Ok(w.to_bytes())
}

/// `elements` values of `ty` as random valid bytes, values within about +-0.06.
pub(super) fn random_blocks(rng: &mut Rng, ty: GgmlType, elements: usize) -> Vec<u8> {
    let block_elems = ty.block_size() as usize;
    let block_bytes = ty.type_size() as usize;
    let blocks = elements / block_elems;
    let mut out = vec![0u8; blocks * block_bytes];
    for chunk in out.chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    let scale = |rng: &mut Rng, lo: f32| f16::from_f32(lo * rng.uniform(1.0, 2.0) as f32).to_le_bytes();
    for block in out.chunks_mut(block_bytes) {
        match ty {
            // d: |q| <= 127.
            GgmlType::Q8_0 => block[..2].copy_from_slice(&scale(rng, 2f32.powi(-12))),
            GgmlType::Q4_0 => block[..2].copy_from_slice(&scale(rng, 2f32.powi(-8))),
            // d and dmin: six-bit scales and mins times four- or five-bit codes.
            GgmlType::Q4_K | GgmlType::Q5_K => {
                let lo = if ty == GgmlType::Q4_K { 2f32.powi(-15) } else { 2f32.powi(-16) };
                block[..2].copy_from_slice(&scale(rng, lo));
                block[2..4].copy_from_slice(&scale(rng, lo));
            }
            // d last: i8 scales times six-bit codes less 32.
            GgmlType::Q6_K => {
                let n = block.len();
                block[n - 2..].copy_from_slice(&scale(rng, 2f32.powi(-17)));
            }
            // E8M0 scale 2^(s - 127), s in 118..=121; E2M1 codes up to 6.
            GgmlType::MXFP4 => block[0] = 118 + (rng.next_u64() % 4) as u8,
            GgmlType::BF16 => {
                for pair in block.chunks_mut(2) {
                    let v = bf16::from_f32(rng.uniform(-0.06, 0.06) as f32);
                    pair.copy_from_slice(&v.to_le_bytes());
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The random blocks decode (with the project's codecs) to finite values within +-0.1, for
    /// every type benchmarked and the k-quants.
    #[test]
    fn random_blocks_decode_to_small_finite_values() {
        let mut rng = Rng::new(3);
        let types = [GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];
        for ty in TYPES.into_iter().chain(types) {
            let mut w = rocm_model::GgufWriter::new();
            w.add_tensor("w", ty, &[512, 8], random_blocks(&mut rng, ty, 4096)).unwrap();
            let values = GgufFile::from_bytes(w.to_bytes()).unwrap().to_f32("w").unwrap();
            let worst = values.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(values.iter().all(|v| v.is_finite()) && worst <= 0.1, "{ty}: largest |value| {worst}");
            assert!(worst > 0.01, "{ty}: values too small to mean anything ({worst})");
        }
    }
}
