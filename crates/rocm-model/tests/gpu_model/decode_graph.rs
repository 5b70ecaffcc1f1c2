//! The decode graph (`Model::decode_workspace`, `DecodeWorkspace::graph`) against eager
//! `Model::decode_step`: the same kernels in the same order, so the same bits. Synthetic models
//! of every architecture and of k-quants; three sequences of different lengths (37, 23 and 5
//! tokens prefilled) decoded together, one of them forked midway so that its next append copies
//! a shared block (the copy-on-write before the replay); the graph's outputs poisoned before
//! each step; the logits through the head and token ids through the embedding; then the same
//! workspace stepped eagerly (what a platform without graphs runs). Both sides take the
//! portable GEMM (`Model::set_gemm_path`): a graph cannot record the vendor BLAS. Refused steps
//! (cache full, a wrong batch, an unknown or repeated sequence, a sequence past the tables'
//! width, bad rows or ids) leave the cache as it was. Greedy decoding of prompts of different
//! lengths (5, 17, 33 ids) batched through the graph picks the tokens each prompt picks decoded
//! alone (what `examples/generate.rs` relies on), logits within the f32 parity tolerance. The
//! fixture's scope checks for leaks.

use std::sync::Arc;

use rocm_kernels::Dtype;
use rocm_kernels::gemm::{GemmElement, GemmPath};
use rocm_model::kv_cache::{KvCacheError, KvCacheTensors, PagedCache, SeqId};
use rocm_model::model::synthetic::{SplitMix, SyntheticSpec, SyntheticVocab, parity_tolerance};
use rocm_model::model::{
    Architecture, DecodeGraph, LoadOptions, Model, ModelError, Mxfp4Layout, Sampler, Sampling,
};
use rocm_model::{GgmlType, GgufFile};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Tolerance, compare, gpu_test};

const PROMPTS: [usize; 3] = [37, 23, 5];
const GRAPH_STEPS: usize = 6;
const EAGER_STEPS: usize = 3;
/// Table width of the workspace: 128 keys, so both sides take one key split (`auto_splits`
/// splits only past 512 keys), and the same launches.
const MAX_BLOCKS: usize = 8;

fn bits<T: Dtype>(b: &DeviceBuffer<T>) -> Vec<u32> {
    b.to_vec().unwrap().iter().map(|v| v.to_f32().to_bits()).collect()
}

fn rows<T: Dtype>(rng: &mut SplitMix, n: usize) -> Vec<T> {
    rng.hidden(n).into_iter().map(T::from_f32).collect()
}

fn with_vocab(spec: SyntheticSpec) -> Arc<GgufFile> {
    let spec =
        SyntheticSpec { vocab: Some(SyntheticVocab { size: 300, ty: GgmlType::Q8_0, tied: false }), ..spec };
    Arc::new(GgufFile::from_bytes(spec.to_bytes().unwrap()).unwrap())
}

/// Both caches prefilled alike: a sequence of each of `prompts`' lengths.
fn prefill<T: GemmElement>(
    gpu: &GpuTest,
    model: &Model<T>,
    prompts: &[usize],
    caches: [(&mut PagedCache, &mut KvCacheTensors<T>); 2],
) -> Vec<SeqId> {
    let hidden = model.config().hidden;
    let mut seqs = Vec::new();
    for (cache, kv) in caches {
        kv.fill_bytes(0xFF).unwrap();
        let mut rng = SplitMix(31);
        seqs = prompts.iter().map(|_| cache.add_sequence()).collect();
        for (&s, &len) in seqs.iter().zip(prompts) {
            let x = gpu.stream().upload(&rows::<T>(&mut rng, len * hidden)).unwrap();
            model.prefill(cache, kv, s, &x).unwrap();
        }
    }
    seqs
}

/// Graph steps, then eager workspace steps, each equal bit for bit to `decode_step` on a twin
/// cache; with a vocabulary, the logits too and the ids path. Three sequences of `PROMPTS`.
fn graph_equals_eager<T: GemmElement>(gpu: &GpuTest, file: Arc<GgufFile>, what: &str) {
    graph_equals_eager_of::<T>(gpu, file, what, &PROMPTS, 16, LoadOptions::default());
}

/// [`graph_equals_eager`] for a sequence of each of `prompts`' lengths, in caches of `blocks`
/// blocks of 16.
fn graph_equals_eager_of<T: GemmElement>(
    gpu: &GpuTest,
    file: Arc<GgufFile>,
    what: &str,
    prompts: &[usize],
    blocks: usize,
    options: LoadOptions,
) {
    let mut model = Model::<T>::load_with(file, gpu.stream(), options).unwrap();
    model.set_gemm_path(GemmPath::Portable);
    let model = model;
    let hidden = model.config().hidden;
    let (mut eager_cache, mut graph_cache) =
        (PagedCache::new(blocks, 16).unwrap(), PagedCache::new(blocks, 16).unwrap());
    let mut eager_kv = model.new_kv_cache(&eager_cache).unwrap();
    let mut graph_kv = model.new_kv_cache(&graph_cache).unwrap();
    let seqs =
        prefill(gpu, &model, prompts, [(&mut eager_cache, &mut eager_kv), (&mut graph_cache, &mut graph_kv)]);
    let vocab = model.vocab_size();
    let mut rng = SplitMix(32);
    {
        let mut workspace = model.decode_workspace(&mut graph_kv, seqs.len(), MAX_BLOCKS).unwrap();
        let mut graph: DecodeGraph<'_, '_, T> = workspace.graph().unwrap();
        eprintln!("{what} ({}): graph captured: {}", T::NAME, graph.is_captured());
        for step in 0..GRAPH_STEPS {
            if step == 2 {
                // Sequence 0's last block becomes shared: its next append copies it first.
                eager_cache.fork(seqs[0]).unwrap();
                graph_cache.fork(seqs[0]).unwrap();
            }
            let by_ids = vocab.is_some() && step % 2 == 1;
            let (x, ids): (Vec<T>, Vec<u32>) = if by_ids {
                let ids: Vec<u32> = (0..seqs.len()).map(|_| (rng.next_u64() % 300) as u32).collect();
                (model.embed(&ids).unwrap().to_vec().unwrap(), ids)
            } else {
                (rows::<T>(&mut rng, seqs.len() * hidden), Vec::new())
            };
            let want = model
                .decode_step(&mut eager_cache, &mut eager_kv, &seqs, &gpu.stream().upload(&x).unwrap())
                .unwrap();
            graph.poison_outputs().unwrap();
            let got = if by_ids {
                graph.step_tokens(&mut graph_cache, &seqs, &ids).unwrap()
            } else {
                graph.step(&mut graph_cache, &seqs, &x).unwrap()
            };
            assert_eq!(bits(got), bits(&want), "{what} ({}): graph step {step}", T::NAME);
            if vocab.is_some() {
                let want_logits = model.logits(&want).unwrap();
                assert_eq!(
                    bits(graph.logits().unwrap()),
                    bits(&want_logits),
                    "{what}: logits of step {step}"
                );
            } else {
                assert!(graph.logits().is_none());
            }
            assert_eq!(graph_cache, eager_cache, "{what}: the caches' bookkeeping after step {step}");
        }
        drop(graph);
        // The same workspace stepped eagerly: what runs where graphs are missing.
        let mut eager = workspace.eager();
        assert!(!eager.is_captured());
        for step in 0..EAGER_STEPS {
            let x = rows::<T>(&mut rng, seqs.len() * hidden);
            let want = model
                .decode_step(&mut eager_cache, &mut eager_kv, &seqs, &gpu.stream().upload(&x).unwrap())
                .unwrap();
            eager.poison_outputs().unwrap();
            let got = eager.step(&mut graph_cache, &seqs, &x).unwrap();
            assert_eq!(bits(got), bits(&want), "{what} ({}): eager workspace step {step}", T::NAME);
        }
    }
    for l in 0..model.config().layers {
        assert_eq!(
            bits(graph_kv.k(l).unwrap()),
            bits(eager_kv.k(l).unwrap()),
            "{what}: K cache of layer {l}"
        );
        assert_eq!(
            bits(graph_kv.v(l).unwrap()),
            bits(eager_kv.v(l).unwrap()),
            "{what}: V cache of layer {l}"
        );
    }
    let last = prompts.len() - 1;
    assert_eq!(graph_cache.seq_len(seqs[last]).unwrap(), prompts[last] + GRAPH_STEPS + EAGER_STEPS);
    graph_cache.validate().unwrap();
}

fn small(arch: Architecture) -> Arc<GgufFile> {
    Arc::new(GgufFile::from_bytes(SyntheticSpec::small(arch).to_bytes().unwrap()).unwrap())
}

#[test]
fn decode_graph_equals_eager_llama_f32_with_logits() {
    let gpu = gpu_test!();
    graph_equals_eager::<f32>(&gpu, with_vocab(SyntheticSpec::small(Architecture::Llama)), "llama");
}

#[test]
fn decode_graph_equals_eager_llama_bf16() {
    let gpu = gpu_test!();
    graph_equals_eager::<bf16>(&gpu, small(Architecture::Llama), "llama");
}

#[test]
fn decode_graph_equals_eager_qwen2() {
    let gpu = gpu_test!();
    graph_equals_eager::<f32>(&gpu, small(Architecture::Qwen2), "qwen2");
    graph_equals_eager::<f16>(&gpu, small(Architecture::Qwen2), "qwen2");
}

#[test]
fn decode_graph_equals_eager_glm4() {
    let gpu = gpu_test!();
    graph_equals_eager::<f32>(&gpu, small(Architecture::Glm4), "glm4");
    graph_equals_eager::<bf16>(&gpu, small(Architecture::Glm4), "glm4");
}

#[test]
fn decode_graph_equals_eager_kquants() {
    let gpu = gpu_test!();
    let file = Arc::new(GgufFile::from_bytes(SyntheticSpec::small_kquants().to_bytes().unwrap()).unwrap());
    graph_equals_eager::<bf16>(&gpu, file, "k-quants");
}

/// Twelve sequences a step on the k-quant model at widths of whole 512-element chunks (hidden
/// 512, FFN 4096): on NVIDIA with bf16 activations the products the matrix cores take run
/// `quant_matmul_mma`'s passes of 32 (fused past 8 tokens), so the step is recorded; the down
/// product (512 rows, 8 chunks of k) splits k across blocks, in the workspace's scratch when
/// recorded and in a temporary eagerly. The rest, and other devices, dequantise and run the
/// GEMM eagerly. Either way bit for bit the eager step.
#[test]
fn decode_graph_of_twelve_sequences_equals_eager_kquants() {
    let gpu = gpu_test!();
    let base = SyntheticSpec::small_kquants();
    let spec = SyntheticSpec {
        config: rocm_model::model::ModelConfig { hidden: 512, ffn: 4096, ..base.config },
        ..base
    };
    let file = Arc::new(GgufFile::from_bytes(spec.to_bytes().unwrap()).unwrap());
    let prompts = [37, 23, 5, 1, 16, 17, 40, 60, 9, 31, 2, 64];
    graph_equals_eager_of::<bf16>(&gpu, file, "k-quants, 12 sequences", &prompts, 96, LoadOptions::default());
}

/// A step that cannot run is refused before any device work, and the cache is as it was; the
/// graph still steps afterwards.
#[test]
fn refused_decode_graph_steps_leave_the_cache_as_it_was() {
    let gpu = gpu_test!();
    let model =
        Model::<f32>::load(with_vocab(SyntheticSpec::small(Architecture::Llama)), gpu.stream()).unwrap();
    let hidden = model.config().hidden;
    // Five blocks, all used: a (16 tokens, one full block), b (16), c (40, three blocks).
    let mut cache = PagedCache::new(5, 16).unwrap();
    let mut kv = model.new_kv_cache(&cache).unwrap();
    let mut rng = SplitMix(33);
    let seqs: Vec<SeqId> = (0..3).map(|_| cache.add_sequence()).collect();
    for (&s, len) in seqs.iter().zip([16, 16, 40]) {
        let x = gpu.stream().upload(&rows::<f32>(&mut rng, len * hidden)).unwrap();
        model.prefill(&mut cache, &mut kv, s, &x).unwrap();
    }
    let x = rows::<f32>(&mut rng, 3 * hidden);
    let freed = cache.add_sequence();
    cache.free_sequence(freed).unwrap();
    {
        let mut workspace = model.decode_workspace(&mut kv, 3, 3).unwrap();
        let mut graph = workspace.graph().unwrap();
        let before = cache.clone();
        let mut refused = |seqs: &[SeqId], x: &[f32], cache: &mut PagedCache| {
            let err = graph.step(cache, seqs, x).unwrap_err();
            assert_eq!(*cache, before, "refused with {err}, the cache changed");
            err
        };
        // a and b each need a block, none is free.
        let err = refused(&seqs, &x, &mut cache);
        assert!(
            matches!(err, ModelError::KvCache(KvCacheError::CacheFull { needed: 2, free: 0, .. })),
            "{err}"
        );
        let err = refused(&seqs[..2], &x[..2 * hidden], &mut cache);
        assert!(err.to_string().contains("2 sequences in a step of a decode workspace for 3"), "{err}");
        let err = refused(&[seqs[0], seqs[1], freed], &x, &mut cache);
        assert!(matches!(err, ModelError::KvCache(KvCacheError::SequenceNotFound(s)) if s == freed), "{err}");
        let err = refused(&[seqs[0], seqs[0], seqs[2]], &x, &mut cache);
        assert!(err.to_string().contains("appears twice"), "{err}");
        let err = refused(&seqs, &x[..3 * hidden - 1], &mut cache);
        assert!(matches!(err, ModelError::BadInput(_)), "{err}");
        let err = graph.step_tokens(&mut cache, &seqs, &[1, 2, 300]).unwrap_err();
        assert!(err.to_string().contains("token id 300"), "{err}");
        assert_eq!(cache, before);

        // With c's three blocks back, a new sequence d, a and b step (three blocks taken).
        cache.free_sequence(seqs[2]).unwrap();
        let d = cache.add_sequence();
        graph.poison_outputs().unwrap();
        let out = graph.step(&mut cache, &[seqs[0], seqs[1], d], &x).unwrap();
        assert!(out.to_vec().unwrap().iter().all(|v| v.is_finite()));
        assert!(graph.logits().unwrap().to_vec().unwrap().iter().all(|v| v.is_finite()));
        assert_eq!(cache.num_free_blocks(), 0);
        assert_eq!(cache.seq_len(d).unwrap(), 1);
    }
    // Tables one block wide: a (17 tokens) would need a second column.
    let mut workspace = model.decode_workspace(&mut kv, 1, 1).unwrap();
    let before = cache.clone();
    let err = workspace.eager().step(&mut cache, &[seqs[0]], &x[..hidden]).unwrap_err();
    assert!(err.to_string().contains("would hold 18 tokens in 2 blocks"), "{err}");
    assert_eq!(cache, before);
    // Workspaces that cannot be built.
    drop(workspace);
    assert!(model.decode_workspace(&mut kv, 0, 4).is_err());
    assert!(
        model.decode_workspace(&mut kv, 2, 6).unwrap_err().to_string().contains("6 wide over a cache of 5")
    );
    let other = PagedCache::new(5, 8).unwrap();
    let mut other_kv = model.new_kv_cache(&other).unwrap();
    let _fits = model.decode_workspace(&mut other_kv, 2, 5).unwrap();
}

/// Prompt lengths of the batched greedy decode: one, two and three blocks of 16.
const BATCHED_PROMPTS: [usize; 3] = [5, 17, 33];
const BATCHED_STEPS: usize = 8;

/// One prompt's greedy tokens (the prefill's pick, then one a decode step) and the logits each
/// was picked from.
struct Greedy {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

impl Greedy {
    fn push(&mut self, row: &[f32]) {
        self.tokens.push(Sampler::new(Sampling::GREEDY).unwrap().sample(row).unwrap());
        self.logits.push(row.to_vec());
    }
}

/// `prompts` (token ids) each prefilled as its own sequence, then decoded greedily together
/// through a decode graph of `prompts.len()` sequences for [`BATCHED_STEPS`] steps.
fn greedy_batch(model: &Model<f32>, prompts: &[Vec<u32>]) -> Vec<Greedy> {
    let vocab = model.vocab_size().unwrap();
    let mut cache = PagedCache::new(16, 16).unwrap();
    let mut kv = model.new_kv_cache(&cache).unwrap();
    kv.fill_bytes(0xFF).unwrap(); // NaN everywhere a write did not reach
    let mut seqs = Vec::new();
    let mut out = Vec::new();
    for prompt in prompts {
        let seq = cache.add_sequence();
        let hidden = model.prefill(&mut cache, &mut kv, seq, &model.embed(prompt).unwrap()).unwrap();
        let logits = model.logits(&model.last_token(&hidden).unwrap()).unwrap().to_vec().unwrap();
        let mut greedy = Greedy { tokens: Vec::new(), logits: Vec::new() };
        greedy.push(&logits);
        seqs.push(seq);
        out.push(greedy);
    }
    let mut workspace = model.decode_workspace(&mut kv, seqs.len(), MAX_BLOCKS).unwrap();
    let mut graph = workspace.graph().unwrap();
    eprintln!("batch of {}: graph captured: {}", seqs.len(), graph.is_captured());
    for _ in 0..BATCHED_STEPS {
        let ids: Vec<u32> = out.iter().map(|g| *g.tokens.last().unwrap()).collect();
        graph.poison_outputs().unwrap();
        graph.step_tokens(&mut cache, &seqs, &ids).unwrap();
        let logits = graph.logits().unwrap().to_vec().unwrap();
        assert_eq!(logits.len(), seqs.len() * vocab);
        for (greedy, row) in out.iter_mut().zip(logits.chunks_exact(vocab)) {
            greedy.push(row);
        }
    }
    for (&seq, prompt) in seqs.iter().zip(prompts) {
        assert_eq!(cache.seq_len(seq).unwrap(), prompt.len() + BATCHED_STEPS);
    }
    out
}

/// Prompts of 5, 17 and 33 ids decoded greedily together through the graph pick the same
/// tokens as each decoded alone (batch 1), step by step, their logits within the f32 parity
/// tolerance: a batch may take other kernels than batch 1 (a fused product's sums in another
/// order), so not bit for bit. Both sides take the portable GEMM.
#[test]
fn batched_greedy_decode_equals_each_prompt_alone() {
    let gpu = gpu_test!();
    let mut model =
        Model::<f32>::load(with_vocab(SyntheticSpec::small(Architecture::Llama)), gpu.stream()).unwrap();
    model.set_gemm_path(GemmPath::Portable);
    let model = model;
    let vocab = model.vocab_size().unwrap() as u64;
    let mut rng = SplitMix(35);
    let prompts: Vec<Vec<u32>> = BATCHED_PROMPTS
        .iter()
        .map(|&len| (0..len).map(|_| (rng.next_u64() % vocab) as u32).collect())
        .collect();
    let t = parity_tolerance(f32::NAME);
    let tol = Tolerance::abs(t.abs).with_l2(t.l2);
    let together = greedy_batch(&model, &prompts);
    for (i, (prompt, batched)) in prompts.iter().zip(&together).enumerate() {
        let alone = greedy_batch(&model, std::slice::from_ref(prompt)).pop().unwrap();
        assert_eq!(batched.tokens.len(), BATCHED_STEPS + 1);
        for step in 0..=BATCHED_STEPS {
            let what = format!("prompt {i} ({} ids), token {step} (0: the prefill's)", prompt.len());
            let c = compare(&batched.logits[step], &alone.logits[step], &tol);
            eprintln!("batched against alone, {what}: {c}");
            assert!(c.passed(&tol), "{what}: logits batched against alone: {c}");
            assert_eq!(
                batched.tokens[step], alone.tokens[step],
                "{what}: batched picked another token than alone, the logits within tolerance (a near tie?)"
            );
        }
    }
}

/// One sequence of the MXFP4 model in the tiled layout: every decode product has one token, so
/// the graph records the tiled kernel's launches (Q, K and V stacked in one, gate and up in
/// another; dependent launches); its steps equal the eager ones bit for bit.
#[test]
fn decode_graph_equals_eager_tiled_mxfp4() {
    let gpu = gpu_test!();
    let tiled = LoadOptions { mxfp4: Mxfp4Layout::Tiled, ..LoadOptions::default() };
    graph_equals_eager_of::<bf16>(
        &gpu,
        crate::model::mxfp4_file(),
        "MXFP4 tiled, one sequence",
        &[29],
        8,
        tiled,
    );
}

/// Several sequences of the tiled MXFP4 model: the graph records the tiled kernel's
/// several-vector launches (every product fused up to 32 tokens: three sequences take the loop of
/// 8, twelve the loop of 32); its steps equal the eager ones bit for bit.
#[test]
fn decode_graph_equals_eager_tiled_mxfp4_batches() {
    let gpu = gpu_test!();
    let tiled = LoadOptions { mxfp4: Mxfp4Layout::Tiled, ..LoadOptions::default() };
    let file = crate::model::mxfp4_file();
    graph_equals_eager_of::<bf16>(&gpu, file.clone(), "MXFP4 tiled, three sequences", &PROMPTS, 16, tiled);
    let prompts = [37, 23, 5, 1, 16, 17, 40, 60, 9, 31, 2, 64];
    graph_equals_eager_of::<bf16>(&gpu, file, "MXFP4 tiled, 12 sequences", &prompts, 96, tiled);
}

/// One sequence of the q4_K model with its tiled copy: the graph records the folded tiled q4_K
/// launches (where the device runs them); its steps equal the eager ones bit for bit.
#[test]
fn decode_graph_equals_eager_tiled_q4k_copy() {
    let gpu = gpu_test!();
    graph_equals_eager_of::<bf16>(
        &gpu,
        crate::model::q4k_file(),
        "q4_K tiled copy, one sequence",
        &[29],
        8,
        crate::model::Q4K_COPY,
    );
}

/// One sequence of the q8_0 model with its tiled copy, as the q4_K copy above.
#[test]
fn decode_graph_equals_eager_tiled_q8_copy() {
    let gpu = gpu_test!();
    graph_equals_eager_of::<bf16>(
        &gpu,
        crate::model::q8_file(),
        "q8_0 tiled copy, one sequence",
        &[29],
        8,
        crate::model::Q8_COPY,
    );
}

/// The q8_0 model in the tiled layout: one sequence (the folded launches) and three (the
/// several-vector loops); the graph's steps equal the eager ones bit for bit.
#[test]
fn decode_graph_equals_eager_tiled_q8() {
    let gpu = gpu_test!();
    let file = crate::model::q8_file();
    let tiled = crate::model::Q8_TILED;
    graph_equals_eager_of::<bf16>(&gpu, file.clone(), "q8_0 tiled, one sequence", &[29], 8, tiled);
    graph_equals_eager_of::<bf16>(&gpu, file, "q8_0 tiled, three sequences", &PROMPTS, 16, tiled);
}
