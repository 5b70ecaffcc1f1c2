//! The decode graph (`Model::decode_workspace`, `DecodeWorkspace::graph`) against eager
//! `Model::decode_step`: the same kernels in the same order, so the same bits. Synthetic models
//! of every architecture and of k-quants; three sequences of different lengths (37, 23 and 5
//! tokens prefilled) decoded together, one of them forked midway so that its next append copies
//! a shared block (the copy-on-write before the replay); the graph's outputs poisoned before
//! each step; the logits through the head and token ids through the embedding; then the same
//! workspace stepped eagerly (what a platform without graphs runs). Both sides take the
//! portable GEMM (`Model::set_gemm_path`): a graph cannot record the vendor BLAS. Refused steps
//! (cache full, a wrong batch, an unknown or repeated sequence, a sequence past the tables'
//! width, bad rows or ids) leave the cache as it was. The fixture's scope checks for leaks.

use std::sync::Arc;

use rocm_kernels::Dtype;
use rocm_kernels::gemm::{GemmElement, GemmPath};
use rocm_model::kv_cache::{KvCacheError, KvCacheTensors, PagedCache, SeqId};
use rocm_model::model::synthetic::{SplitMix, SyntheticSpec, SyntheticVocab};
use rocm_model::model::{Architecture, DecodeGraph, Model, ModelError};
use rocm_model::{GgmlType, GgufFile};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, gpu_test};

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

/// Both caches prefilled alike: three sequences of `PROMPTS` tokens.
fn prefill<T: GemmElement>(
    gpu: &GpuTest,
    model: &Model<T>,
    caches: [(&mut PagedCache, &mut KvCacheTensors<T>); 2],
) -> Vec<SeqId> {
    let hidden = model.config().hidden;
    let mut seqs = Vec::new();
    for (cache, kv) in caches {
        kv.fill_bytes(0xFF).unwrap();
        let mut rng = SplitMix(31);
        seqs = PROMPTS.iter().map(|_| cache.add_sequence()).collect();
        for (&s, &len) in seqs.iter().zip(&PROMPTS) {
            let x = gpu.stream().upload(&rows::<T>(&mut rng, len * hidden)).unwrap();
            model.prefill(cache, kv, s, &x).unwrap();
        }
    }
    seqs
}

/// Graph steps, then eager workspace steps, each equal bit for bit to `decode_step` on a twin
/// cache; with a vocabulary, the logits too and the ids path.
fn graph_equals_eager<T: GemmElement>(gpu: &GpuTest, file: Arc<GgufFile>, what: &str) {
    let mut model = Model::<T>::load(file, gpu.stream()).unwrap();
    model.set_gemm_path(GemmPath::Portable);
    let model = model;
    let hidden = model.config().hidden;
    let (mut eager_cache, mut graph_cache) =
        (PagedCache::new(16, 16).unwrap(), PagedCache::new(16, 16).unwrap());
    let mut eager_kv = model.new_kv_cache(&eager_cache).unwrap();
    let mut graph_kv = model.new_kv_cache(&graph_cache).unwrap();
    let seqs = prefill(gpu, &model, [(&mut eager_cache, &mut eager_kv), (&mut graph_cache, &mut graph_kv)]);
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
    assert_eq!(graph_cache.seq_len(seqs[2]).unwrap(), PROMPTS[2] + GRAPH_STEPS + EAGER_STEPS);
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
