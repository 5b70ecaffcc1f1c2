//! CPU tests: configuration, refusals, and the reference forward pass.

use rocm_kernels::rope::rope_reference;

use super::reference::{rope_params, rotate};
use super::synthetic::{SplitMix, SyntheticSpec, parity_tolerance};
use super::*;
use crate::gguf::{GgmlType, GgufFile, GgufWriter};

fn file_of(w: &GgufWriter) -> GgufFile {
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

fn small_file(arch: Architecture) -> GgufFile {
    GgufFile::from_bytes(SyntheticSpec::small(arch).to_bytes().unwrap()).unwrap()
}

#[test]
fn reads_a_llama_config() {
    let file = small_file(Architecture::Llama);
    let c = ModelConfig::from_metadata(file.metadata()).unwrap();
    assert_eq!(c.architecture, Architecture::Llama);
    assert_eq!((c.hidden, c.layers, c.ffn, c.q_heads, c.kv_heads, c.head_dim), (192, 2, 352, 4, 2, 64));
    assert_eq!((c.q_dim(), c.kv_dim(), c.rotary_dim), (256, 128, 64));
    assert_eq!((c.rms_eps, c.rope_theta), (1e-5, 10_000.0));
    let rope = c.rope().unwrap();
    assert_eq!(rope.style, rocm_kernels::rope::RopeStyle::GptJ { rotary_dim: 64 });
}

/// llama metadata with the defaults left out: head_dim from hidden / heads, kv_heads = heads.
#[test]
fn defaults_and_head_dim_from_the_hidden_size() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    for (k, v) in [
        ("embedding_length", 256u32),
        ("block_count", 1),
        ("feed_forward_length", 64),
        ("attention.head_count", 4),
    ] {
        w.add_metadata(format!("llama.{k}"), v).unwrap();
    }
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-6f32).unwrap();
    let c = ModelConfig::from_metadata(file_of(&w).metadata()).unwrap();
    assert_eq!((c.head_dim, c.kv_heads, c.rope_theta, c.rotary_dim), (64, 4, 10_000.0, 64));
}

/// The small model's metadata with `key` removed or replaced.
fn metadata_with(key: &str, value: Option<crate::Value>) -> Result<ModelConfig> {
    let spec = SyntheticSpec::small(Architecture::Llama);
    let full = spec.writer().unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in full.metadata().iter() {
        if k == key {
            if let Some(v) = &value {
                w.add_metadata(k, v.clone()).unwrap();
            }
        } else {
            w.add_metadata(k, v.clone()).unwrap();
        }
    }
    ModelConfig::from_metadata(file_of(&w).metadata())
}

#[test]
fn missing_keys_are_named() {
    for key in ["general.architecture", "llama.block_count", "llama.attention.layer_norm_rms_epsilon"] {
        let err = metadata_with(key, None).unwrap_err();
        assert!(matches!(&err, ModelError::MissingKey { key: k } if k == key), "{key}: {err}");
        assert!(err.to_string().contains(key));
    }
}

#[test]
fn bad_metadata_is_refused_naming_the_key() {
    use crate::Value;
    let cases: [(&str, Value, &str); 6] = [
        ("general.architecture", Value::String("gpt2".into()), "gpt2"),
        ("llama.embedding_length", Value::String("big".into()), "llama.embedding_length"),
        ("llama.attention.head_count_kv", Value::U32(3), "llama.attention.head_count_kv"),
        ("llama.block_count", Value::U32(0), "llama.block_count"),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(-1.0), "layer_norm_rms_epsilon"),
        ("llama.attention.value_length", Value::U32(32), "llama.attention.value_length"),
    ];
    for (key, value, named) in cases {
        let err = metadata_with(key, Some(value)).unwrap_err();
        assert!(err.to_string().contains(named), "{key}: {err}");
    }
}

/// Minimal llama metadata (no `key_length`: the head size comes from hidden / heads) with
/// `head_count` and, if given, `head_count_kv`.
fn heads(q: u32, kv: Option<u32>) -> Result<ModelConfig> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    for (k, v) in [("embedding_length", 256u32), ("block_count", 1), ("feed_forward_length", 64)] {
        w.add_metadata(format!("llama.{k}"), v).unwrap();
    }
    w.add_metadata("llama.attention.head_count", q).unwrap();
    if let Some(kv) = kv {
        w.add_metadata("llama.attention.head_count_kv", kv).unwrap();
    }
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-6f32).unwrap();
    ModelConfig::from_metadata(file_of(&w).metadata())
}

/// A head count of 0 used to be reported as "0 heads do not divide embedding_length 256": it is
/// refused as 0 before anything is derived from it, and KV heads must be 1 to `head_count`,
/// dividing it.
#[test]
fn head_counts_must_be_at_least_one_and_kv_heads_divide_them() {
    let msg = |r: Result<ModelConfig>| r.unwrap_err().to_string();
    let q0 = "GGUF metadata key `llama.attention.head_count`: is 0, must be at least 1";
    assert_eq!(msg(heads(0, None)), q0);
    assert_eq!(msg(heads(0, Some(0))), q0);
    assert_eq!(msg(metadata_with("llama.attention.head_count", Some(crate::Value::U32(0)))), q0);
    assert_eq!(
        msg(heads(4, Some(0))),
        "GGUF metadata key `llama.attention.head_count_kv`: is 0, must be at least 1"
    );
    assert_eq!(
        msg(heads(4, Some(8))),
        "GGUF metadata key `llama.attention.head_count_kv`: 8 KV heads are more than the 4 query heads \
         of llama.attention.head_count"
    );
    assert_eq!(
        msg(heads(4, Some(3))),
        "GGUF metadata key `llama.attention.head_count_kv`: 3 KV heads do not divide 4 query heads"
    );
    // 256 is not a multiple of 3 heads, and there is no key_length to say otherwise.
    assert!(msg(heads(3, None)).contains("3 heads do not divide embedding_length 256"));
    for (q, kv) in [(4, None), (4, Some(4)), (4, Some(2)), (4, Some(1))] {
        let c = heads(q, kv).unwrap();
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, kv.unwrap_or(4) as usize, 64));
    }
    for key in ["embedding_length", "block_count", "feed_forward_length", "attention.key_length"] {
        let key = format!("llama.{key}");
        let err = msg(metadata_with(&key, Some(crate::Value::U32(0))));
        assert_eq!(err, format!("GGUF metadata key `{key}`: is 0, must be at least 1"));
    }
}

/// Float metadata in errors is short (`{:?}`: 1e300, not 301 digits), and an RMS epsilon must be
/// finite, positive and at most `MAX_RMS_EPS` (0.1; real models use 1e-5 or 1e-6).
#[test]
fn float_metadata_is_checked_and_printed_short() {
    use crate::Value;
    let eps = "llama.attention.layer_norm_rms_epsilon";
    let theta = "llama.rope.freq_base";
    let cases: &[(&str, Value, &str)] = &[
        (eps, Value::F64(1e300), "1e300 is beyond the range of f32 (largest 3.4028235e38)"),
        (
            eps,
            Value::F32(f32::MAX),
            "3.4028235e38 is too large for a norm epsilon (at most 0.1; models use 1e-5 or 1e-6)",
        ),
        (eps, Value::F32(0.5), "0.5 is too large for a norm epsilon"),
        (eps, Value::F32(-f32::MAX), "-3.4028235e38 is not positive"),
        (eps, Value::F32(0.0), "0.0 is not positive"),
        (eps, Value::F64(1e-300), "1e-300 is too small for f32 (it rounds to 0)"),
        (eps, Value::F64(f64::NAN), "NaN is not a finite number"),
        (eps, Value::F32(f32::INFINITY), "inf is not a finite number"),
        (eps, Value::String("x".repeat(1 << 20)), "expected a number, found string \"xxxx"),
        (theta, Value::F32(-f32::MAX), "-3.4028235e38 is not positive"),
        (theta, Value::F64(-1e300), "-1e300 is beyond the range of f32"),
        ("llama.block_count", Value::U64(1 << 40), "1099511627776 is too large (at most 2147483647)"),
        (
            "llama.block_count",
            Value::Array(vec![1u32; 1 << 20].into()),
            "expected a non-negative integer, found array [uint32; 1048576] [1, 1, 1, 1, ...]",
        ),
    ];
    for (key, value, says) in cases {
        let err = metadata_with(key, Some(value.clone())).unwrap_err().to_string();
        let want = format!("GGUF metadata key `{key}`: {says}");
        assert!(err.starts_with(&want), "{key} = {:?}: {err}", value.value_type());
        assert!(err.len() < 200, "{key}: a {}-byte message", err.len());
    }
    // What real models use is accepted, up to the bound.
    for ok in [1e-5f32, 1e-6, 1.5625e-7, 1e-12, 0.1] {
        assert_eq!(metadata_with(eps, Some(Value::F32(ok))).unwrap().rms_eps, ok);
    }
}

/// The small model without tensor `drop`, or with `replace` in its place.
fn model_without(drop: &str, replace: Option<(&[u64], GgmlType)>) -> GgufFile {
    let spec = SyntheticSpec::small(Architecture::Llama);
    let full = file_of(&spec.writer().unwrap());
    let mut w = GgufWriter::new();
    for (k, v) in full.metadata().iter() {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in full.tensors() {
        if t.name() == drop {
            if let Some((dims, ty)) = replace {
                let n = dims.iter().product::<u64>() as usize;
                w.add_quantized(t.name(), ty, dims, &vec![0.5; n]).unwrap();
            }
            continue;
        }
        w.add_tensor(t.name(), t.ggml_type(), t.dims(), full.bytes(t.name()).unwrap().to_vec()).unwrap();
    }
    file_of(&w)
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let err = ReferenceModel::load(&model_without("blk.1.ffn_up.weight", None), Rounding::Exact).unwrap_err();
    assert!(matches!(&err, ModelError::MissingTensor { name } if name == "blk.1.ffn_up.weight"), "{err}");

    let wrong = model_without("blk.0.attn_k.weight", Some((&[192, 256], GgmlType::F32)));
    let err = ReferenceModel::load(&wrong, Rounding::Exact).unwrap_err();
    assert!(matches!(&err, ModelError::BadTensor { name, .. } if name == "blk.0.attn_k.weight"), "{err}");
    assert!(err.to_string().contains("[192, 128]"), "{err}");

    let q4k = model_without("blk.0.attn_norm.weight", None);
    let mut w = GgufWriter::new();
    for (k, v) in q4k.metadata().iter() {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in q4k.tensors() {
        w.add_tensor(t.name(), t.ggml_type(), t.dims(), q4k.bytes(t.name()).unwrap().to_vec()).unwrap();
    }
    w.add_tensor("blk.0.attn_norm.weight", GgmlType::I32, &[192], vec![0; 192 * 4]).unwrap();
    let err = ReferenceModel::load(&file_of(&w), Rounding::Exact).unwrap_err();
    assert!(
        err.to_string().contains("blk.0.attn_norm.weight") && err.to_string().contains("not supported"),
        "{err}"
    );
}

/// The CPU loaders decode in bounded pieces into one fallibly reserved vector: the values are
/// exactly the f32 decoding widened to f64 (the reference) or rounded to `T` (the GPU's plain
/// types), for tensors of one piece and of several (the FFN matrices, 192 x 352, are more).
#[test]
fn host_weights_are_the_f32_decoding_converted() {
    use half::{bf16, f16};
    let file = small_file(Architecture::Llama);
    for t in file.tensors() {
        let name = t.name();
        let f32s = file.to_f32(name).unwrap();
        let want: Vec<f64> = f32s.iter().copied().map(f64::from).collect();
        assert!(super::weights::load_host(&file, name).unwrap() == want, "{name}");
        let want: Vec<f16> = f32s.iter().copied().map(f16::from_f32).collect();
        assert!(super::weights::decode_host(&file, name, "f16", f16::from_f32).unwrap() == want, "{name}");
        let want: Vec<bf16> = f32s.iter().copied().map(bf16::from_f32).collect();
        assert!(super::weights::decode_host(&file, name, "bf16", bf16::from_f32).unwrap() == want, "{name}");
    }
}

/// A model whose matrix is in a quantization the loaders cannot decode (Q2_K: what a Q2_K
/// file holds) is refused before anything is loaded, naming the tensor and the type.
#[test]
fn an_unsupported_quantization_is_named_with_the_tensor() {
    let name = "blk.1.attn_output.weight";
    let base = model_without(name, None);
    let mut w = GgufWriter::new();
    for (k, v) in base.metadata().iter() {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in base.tensors() {
        w.add_tensor(t.name(), t.ggml_type(), t.dims(), base.bytes(t.name()).unwrap().to_vec()).unwrap();
    }
    // [q_dim = 256, hidden = 192]: 192 rows of one 84-byte Q2_K super-block.
    w.add_tensor(name, GgmlType::Q2_K, &[256, 192], vec![0; 192 * 84]).unwrap();
    let file = file_of(&w);
    let want = "tensor `blk.1.attn_output.weight`: type Q2_K is not supported (F32, F16, BF16, Q8_0, Q4_0, \
                Q4_K, Q5_K, Q6_K, MXFP4 are)";
    let err = ReferenceModel::load(&file, Rounding::Exact).unwrap_err();
    assert!(matches!(&err, ModelError::BadTensor { name: n, .. } if n == name), "{err}");
    assert_eq!(err.to_string(), want);
    // Model::load (the GPU's) runs the same check before uploading anything.
    let config = ModelConfig::from_metadata(file.metadata()).unwrap();
    assert_eq!(super::weights::check_model(&file, &config).unwrap_err().to_string(), want);
}

/// The reference's RoPE is the kernels' (same pairs, base and angle) for every architecture,
/// with Llama 3.1's frequency factors, and with linear scaling.
#[test]
fn reference_rope_matches_the_kernel_reference() {
    let mut rng = SplitMix(3);
    let linear = SyntheticSpec::small(Architecture::Llama);
    let linear = SyntheticSpec {
        config: ModelConfig { rope_scaling: RopeScaling::Linear(4.0), ..linear.config },
        ..linear
    };
    let specs = [
        SyntheticSpec::small(Architecture::Llama),
        SyntheticSpec::small(Architecture::Qwen2),
        SyntheticSpec::small(Architecture::Glm4),
        SyntheticSpec::small_llama3(),
        linear,
    ];
    for spec in specs {
        let config = ModelConfig::from_file(&spec_file(&spec)).unwrap();
        let rope = config.rope().unwrap();
        let x: Vec<f32> = rng.hidden(config.head_dim);
        for pos in [0, 1, 17, 1000, 100_000] {
            let want = rope_reference(&rope, &x, 1, None, &[pos], None);
            let mut got: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            rotate(&mut got, pos as f64, &rope_params(&rope).unwrap(), Rounding::Exact);
            // 1e-9, not 1e-12: at position 1e5 the two associate the f64 angle's products and
            // divisions differently, ~1e-11 rad apart.
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() < 1e-9, "{rope:?} pos {pos} element {i}: {g} vs {w}");
            }
        }
    }
}

/// A one-layer model with hidden 4 whose result can be worked out by hand: Wq = Wk = 0 (all
/// scores equal: attention averages V), Wv = Wo = I, Wgate = 0 (silu(0) = 0: the MLP adds
/// nothing), norm weights 1, no output norm. So token t gives
/// `h_t = x_t + mean_{j <= t}(rmsnorm(x_j))`.
#[test]
fn reference_by_hand() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    for (k, v) in [
        ("embedding_length", 4u32),
        ("block_count", 1),
        ("feed_forward_length", 2),
        ("attention.head_count", 1),
    ] {
        w.add_metadata(format!("llama.{k}"), v).unwrap();
    }
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-6f32).unwrap();
    let eye: Vec<f32> = (0..16).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect();
    for (name, dims, values) in [
        ("attn_norm", vec![4u64], vec![1.0f32; 4]),
        ("attn_q", vec![4, 4], vec![0.0; 16]),
        ("attn_k", vec![4, 4], vec![0.0; 16]),
        ("attn_v", vec![4, 4], eye.clone()),
        ("attn_output", vec![4, 4], eye),
        ("ffn_norm", vec![4], vec![1.0; 4]),
        ("ffn_gate", vec![4, 2], vec![0.0; 8]),
        ("ffn_up", vec![4, 2], vec![1.0; 8]),
        ("ffn_down", vec![2, 4], vec![1.0; 8]),
    ] {
        w.add_f32(format!("blk.0.{name}.weight"), &dims, &values).unwrap();
    }
    let model = ReferenceModel::load(&file_of(&w), Rounding::Exact).unwrap();
    let mut seq = model.new_sequence();
    // rms([1, 2, 3, 4]) = sqrt(7.5); rms([2, 0, 0, 0]) = 1.
    let r = (7.5f64 + 1e-6).sqrt();
    let n1 = [1.0 / r, 2.0 / r, 3.0 / r, 4.0 / r];
    let h1 = model.forward(&mut seq, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let want1: Vec<f64> = (0..4).map(|i| (i + 1) as f64 + n1[i]).collect();
    let s = (1.0f64 + 1e-6).sqrt();
    let n2 = [2.0 / s, 0.0, 0.0, 0.0];
    let h2 = model.forward(&mut seq, &[2.0, 0.0, 0.0, 0.0]).unwrap();
    let x2 = [2.0, 0.0, 0.0, 0.0];
    let want2: Vec<f64> = (0..4).map(|i| x2[i] + (n1[i] + n2[i]) / 2.0).collect();
    for (got, want) in [(h1, want1), (h2, want2)] {
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "got {got:?}, want {want:?}");
        }
    }
    assert_eq!(seq.len(), 2);
}

/// Prefill in chunks, or token by token, gives what one prefill gives (causality and the cache).
#[test]
fn reference_chunks_match_one_prefill() {
    let file = small_file(Architecture::Glm4);
    let model = ReferenceModel::load(&file, Rounding::Exact).unwrap();
    let hidden = model.config().hidden;
    let x: Vec<f64> = SplitMix(11).hidden(40 * hidden).into_iter().map(f64::from).collect();
    let whole = model.forward(&mut model.new_sequence(), &x).unwrap();
    for chunks in [&[16usize, 16, 8][..], &[39, 1]] {
        let mut seq = model.new_sequence();
        let mut got = Vec::new();
        let mut start = 0;
        for &c in chunks {
            got.extend(model.forward(&mut seq, &x[start * hidden..(start + c) * hidden]).unwrap());
            start += c;
        }
        let max = got.iter().zip(&whole).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(max < 1e-10, "chunks {chunks:?}: max difference {max}");
    }
}

/// Max-abs and relative-L2 distance.
fn distance(got: &[f64], want: &[f64]) -> (f64, f64) {
    let max = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let num: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (max, (num / den).sqrt())
}

/// The GPU test's tolerances leave room: the reference rounded to f32/f16/bf16 wherever the GPU
/// stores (a model of a correct T pipeline) stays within a quarter of them over the parity
/// test's 37-token prefill and 20 decode steps, for every architecture. The other three
/// quarters are for what the model does not capture (summation order, P rounded to T inside
/// the matrix-core attention, f32 transcendentals).
#[test]
fn emulated_rounding_fits_the_parity_tolerance() {
    let specs = [
        ("Llama", SyntheticSpec::small(Architecture::Llama)),
        ("Qwen2", SyntheticSpec::small(Architecture::Qwen2)),
        ("Glm4", SyntheticSpec::small(Architecture::Glm4)),
        ("Llama 3.1 RoPE", SyntheticSpec::small_llama3()),
    ];
    for (arch, spec) in specs {
        let file = spec_file(&spec);
        let exact = ReferenceModel::load(&file, Rounding::Exact).unwrap();
        let hidden = exact.config().hidden;
        for dtype in ["f32", "f16", "bf16"] {
            let rounded = ReferenceModel::load(&file, Rounding::for_dtype(dtype).unwrap()).unwrap();
            let tol = parity_tolerance(dtype);
            let mut rng = SplitMix(5);
            let (mut se, mut sr) = (exact.new_sequence(), rounded.new_sequence());
            let mut worst = (0.0f64, 0.0f64);
            for tokens in std::iter::once(37).chain(std::iter::repeat_n(1, 20)) {
                let x: Vec<f64> = rng.hidden(tokens * hidden).into_iter().map(f64::from).collect();
                let want = exact.forward(&mut se, &x).unwrap();
                let got = rounded.forward(&mut sr, &x).unwrap();
                let (m, l2) = distance(&got, &want);
                worst = (worst.0.max(m), worst.1.max(l2));
            }
            eprintln!(
                "{arch} {dtype}: emulated max abs {:.3e}, rel L2 {:.3e}; tolerance {tol:?}",
                worst.0, worst.1
            );
            assert!(
                worst.0 <= tol.abs / 4.0 && worst.1 <= tol.l2 / 4.0,
                "{arch} {dtype}: {worst:?} vs {tol:?}"
            );
        }
    }
}

fn with_vocab(size: usize, ty: GgmlType, tied: bool) -> SyntheticSpec {
    SyntheticSpec {
        vocab: Some(synthetic::SyntheticVocab { size, ty, tied }),
        ..SyntheticSpec::small(Architecture::Llama)
    }
}

/// The embedding's rows are the vocabulary: a size stated in the metadata that differs is
/// refused, naming the key and both sizes; ids past the rows are refused naming the id.
#[test]
fn the_vocabulary_must_match_the_embedding() {
    let spec = with_vocab(300, GgmlType::Q8_0, false);
    let config = spec.config.clone();
    let load = |w: GgufWriter| embedding::TokenEmbedding::load(&std::sync::Arc::new(file_of(&w)), &config);
    let e = load(spec.writer().unwrap()).unwrap().expect("an embedding");
    assert_eq!(e.vocab(), 300);
    e.check_ids(&[0, 299]).unwrap();
    let msg = e.check_ids(&[5, 300, 7]).unwrap_err().to_string();
    assert!(msg.contains("token id 300 (at 1) is out of range: the vocabulary has 300 tokens"), "{msg}");

    let mut w = spec.writer().unwrap();
    w.add_metadata("llama.vocab_size", 301u32).unwrap();
    let msg = load(w).unwrap_err().to_string();
    assert!(msg.contains("llama.vocab_size") && msg.contains("301") && msg.contains("300 rows"), "{msg}");

    let mut w = spec.writer().unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["a"; 299]).unwrap();
    let msg = load(w).unwrap_err().to_string();
    assert!(
        msg.contains("tokenizer.ggml.tokens") && msg.contains("299 tokens") && msg.contains("300 rows"),
        "{msg}"
    );

    let mut w = spec.writer().unwrap();
    w.add_metadata("llama.vocab_size", 300u32).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["t"; 300]).unwrap();
    assert_eq!(load(w).unwrap().unwrap().vocab(), 300, "stated sizes that match are fine");

    // A model without an embedding has none, and says so when asked for one.
    let none = SyntheticSpec::small(Architecture::Llama);
    assert!(load(none.writer().unwrap()).unwrap().is_none());
    let reference = ReferenceModel::load(&file_of(&none.writer().unwrap()), Rounding::Exact).unwrap();
    assert!(reference.embed(&[0]).unwrap_err().to_string().contains("token_embd.weight"));
}

/// The reference's ends: rows of the decoded embedding, and logits through the head (the
/// embedding itself when tied).
#[test]
fn reference_embedding_and_head() {
    for tied in [false, true] {
        let file = file_of(&with_vocab(40, GgmlType::F32, tied).writer().unwrap());
        let r = ReferenceModel::load(&file, Rounding::Exact).unwrap();
        let h = r.config().hidden;
        let table = file.to_f32(TOKEN_EMBEDDING).unwrap();
        let x = r.embed(&[3, 39]).unwrap();
        assert_eq!(x[..h], table[3 * h..4 * h].iter().map(|&v| v as f64).collect::<Vec<_>>()[..]);
        assert_eq!(x[h..], table[39 * h..40 * h].iter().map(|&v| v as f64).collect::<Vec<_>>()[..]);
        let head = if tied { table.clone() } else { file.to_f32(OUTPUT_HEAD).unwrap() };
        let logits = r.logits(&x[..h]).unwrap();
        assert_eq!(logits.len(), 40);
        for (t, &l) in logits.iter().enumerate() {
            let want: f64 = (0..h).map(|i| x[i] * head[t * h + i] as f64).sum();
            assert!((l - want).abs() <= 1e-9 * want.abs().max(1.0), "tied {tied}, token {t}: {l} vs {want}");
        }
        assert!(r.embed(&[40]).is_err());
    }
}

/// `spec` as a file.
fn spec_file(spec: &SyntheticSpec) -> GgufFile {
    file_of(&spec.writer().unwrap())
}

/// The small Llama's metadata plus `extra` keys.
fn llama_with(extra: &[(&str, crate::Value)]) -> Result<ModelConfig> {
    let mut w = SyntheticSpec::small(Architecture::Llama).writer().unwrap();
    for (k, v) in extra {
        w.add_metadata(*k, v.clone()).unwrap();
    }
    ModelConfig::from_metadata(file_of(&w).metadata())
}

/// `<arch>.rope.scaling.*` as llama.cpp reads them: `linear` (or no type) with a factor divides
/// positions by it (the older `rope.scale_linear` too), `none` ignores a factor, `llama3` needs
/// the factors tensor, anything else is refused naming the type.
#[test]
fn rope_scaling_metadata() {
    use crate::Value;
    let ty = "llama.rope.scaling.type";
    let factor = "llama.rope.scaling.factor";
    let scaling = |extra: &[(&str, Value)]| llama_with(extra).unwrap().rope_scaling;
    assert_eq!(scaling(&[]), RopeScaling::None);
    assert_eq!(scaling(&[(ty, "linear".into()), (factor, Value::F32(4.0))]), RopeScaling::Linear(4.0));
    assert_eq!(scaling(&[(factor, Value::F32(2.0))]), RopeScaling::Linear(2.0), "no type means linear");
    assert_eq!(scaling(&[("llama.rope.scale_linear", Value::F32(3.0))]), RopeScaling::Linear(3.0));
    assert_eq!(scaling(&[(ty, "linear".into())]), RopeScaling::None, "linear without a factor");
    assert_eq!(scaling(&[(ty, "none".into()), (factor, Value::F32(4.0))]), RopeScaling::None);
    assert_eq!(scaling(&[(ty, "llama3".into()), (factor, Value::F32(8.0))]), RopeScaling::Llama3);
    // The linear factor reaches the RoPE; llama3's factor is inside its factors, not applied.
    let c = llama_with(&[(ty, "linear".into()), (factor, Value::F32(4.0))]).unwrap();
    assert_eq!(c.rope().unwrap().scaling_factor, 4.0);
    let msg = |extra: &[(&str, Value)]| llama_with(extra).unwrap_err().to_string();
    assert_eq!(
        msg(&[(ty, "yarn".into())]),
        "GGUF metadata key `llama.rope.scaling.type`: RoPE scaling type \"yarn\" is not supported \
         (supported: none, linear, llama3)"
    );
    assert!(msg(&[(ty, "longrope".into())]).contains("\"longrope\" is not supported"));
    assert!(msg(&[(ty, "x".repeat(1 << 20).into())]).len() < 200, "a long type is previewed");
    assert_eq!(
        msg(&[(ty, Value::U32(1))]),
        "GGUF metadata key `llama.rope.scaling.type`: expected a string, found uint32 1"
    );
    assert_eq!(
        msg(&[(ty, "linear".into()), (factor, Value::F32(-4.0))]),
        "GGUF metadata key `llama.rope.scaling.factor`: -4.0 is not positive"
    );
    assert!(msg(&[(factor, Value::F32(0.0))]).contains("0.0 is not positive"));
    assert!(msg(&[(factor, Value::F64(f64::INFINITY))]).contains("inf is not a finite number"));
    assert!(msg(&[("llama.rope.scale_linear", Value::F32(-1.0))]).contains("`llama.rope.scale_linear`"));
}

/// A Llama 3.1 style file: `rope_freqs.weight` read (in any type the reader decodes) into the
/// configuration and its RoPE; `from_metadata` alone does not read tensors.
#[test]
fn rope_freqs_are_read_from_the_file() {
    let spec = SyntheticSpec::small_llama3();
    let file = spec_file(&spec);
    let c = ModelConfig::from_file(&file).unwrap();
    assert_eq!(c, spec.config, "the written configuration reads back");
    let factors = file.to_f32(ROPE_FREQS).unwrap();
    assert_eq!(c.rope_freqs.as_deref(), Some(&factors[..]));
    assert_eq!(factors.len(), 32);
    assert!(factors[..15].iter().all(|&f| f == 1.0) && factors[18..].iter().all(|&f| f == 8.0));
    let rope = c.rope().unwrap();
    let wide: Vec<f64> = factors.iter().map(|&f| f as f64).collect();
    assert_eq!(rope.freq_factors.unwrap().as_slice(), &wide[..]);
    assert_eq!((rope.theta_base, rope.scaling_factor), (500_000.0, 1.0));
    assert_eq!(ModelConfig::from_metadata(file.metadata()).unwrap().rope_freqs, None);

    // Stored as F16 or BF16: the factors as that type holds them.
    let f16s: Vec<f32> = factors.iter().map(|&f| half::f16::from_f32(f).to_f32()).collect();
    let bf16s: Vec<f32> = factors.iter().map(|&f| half::bf16::from_f32(f).to_f32()).collect();
    for (ty, want) in [(GgmlType::F16, f16s), (GgmlType::BF16, bf16s)] {
        let file = with_rope_freqs(&spec, Some((&[32], ty, &factors)));
        assert_eq!(ModelConfig::from_file(&file).unwrap().rope_freqs, Some(want), "{ty}");
    }
    // A file without scaling metadata but with the tensor (what llama.cpp's converter writes for
    // Llama 3.1) applies it too; GLM takes one factor per pair of its rotated half.
    let plain = SyntheticSpec {
        config: ModelConfig { rope_scaling: RopeScaling::None, ..spec.config.clone() },
        ..spec.clone()
    };
    assert!(ModelConfig::from_file(&spec_file(&plain)).unwrap().rope().unwrap().freq_factors.is_some());
    let glm = SyntheticSpec::small(Architecture::Glm4);
    let glm = SyntheticSpec { config: ModelConfig { rope_freqs: Some(vec![2.0; 16]), ..glm.config }, ..glm };
    let rope = ModelConfig::from_file(&spec_file(&glm)).unwrap().rope().unwrap();
    assert_eq!(rope.freq_factors.unwrap().as_slice(), &[2.0; 16]);
}

/// `spec`'s file with its `rope_freqs.weight` replaced by `(dims, type, values)`, or removed.
fn with_rope_freqs(spec: &SyntheticSpec, freqs: Option<(&[u64], GgmlType, &[f32])>) -> GgufFile {
    let base = spec_file(spec);
    let mut w = GgufWriter::new();
    for (k, v) in base.metadata().iter() {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in base.tensors().iter().filter(|t| t.name() != ROPE_FREQS) {
        w.add_tensor(t.name(), t.ggml_type(), t.dims(), base.bytes(t.name()).unwrap().to_vec()).unwrap();
    }
    if let Some((dims, ty, values)) = freqs {
        w.add_quantized(ROPE_FREQS, ty, dims, values).unwrap();
    }
    file_of(&w)
}

/// Factors of the wrong shape, non-positive or non-finite ones, an undecodable type, and a
/// `llama3` file without factors are refused by both loaders' configuration, naming the tensor.
#[test]
fn bad_rope_freqs_are_refused_naming_the_tensor() {
    let spec = SyntheticSpec::small_llama3();
    let good = spec.config.rope_freqs.clone().unwrap();
    let refused = |file: &GgufFile| {
        let err = ModelConfig::from_file(file).unwrap_err();
        assert!(matches!(&err, ModelError::BadTensor { name, .. } if name == ROPE_FREQS), "{err}");
        let reference = ReferenceModel::load(file, Rounding::Exact).unwrap_err().to_string();
        assert_eq!(reference, err.to_string(), "the reference refuses the same way");
        err.to_string()
    };
    let mut negative = good.clone();
    negative[3] = -1.0;
    let mut nan = good.clone();
    nan[20] = f32::NAN;
    let mut zero = good.clone();
    zero[31] = 0.0;
    let cases: [(&[u64], &[f32], &str); 6] = [
        (&[31], &good[..31], "GGUF dims [31], the RoPE needs one factor per rotated pair: [32]"),
        (&[64], &[good.clone(), good.clone()].concat(), "GGUF dims [64]"),
        (&[32, 1], &good, "GGUF dims [32, 1]"),
        (&[32], &negative, "factor 3 is -1.0; frequency factors must be positive and finite"),
        (&[32], &nan, "factor 20 is NaN"),
        (&[32], &zero, "factor 31 is 0.0"),
    ];
    for (dims, values, says) in cases {
        let err = refused(&with_rope_freqs(&spec, Some((dims, GgmlType::F32, values))));
        assert!(err.starts_with(&format!("tensor `rope_freqs.weight`: {says}")), "{err}");
    }
    let missing = refused(&with_rope_freqs(&spec, None));
    assert_eq!(
        missing,
        "tensor `rope_freqs.weight`: the llama3 frequency factors tensor is missing \
         (`llama.rope.scaling.type` is \"llama3\", whose scaling is those factors)"
    );
    // A type the reader cannot decode: its error names the tensor.
    let mut w = GgufWriter::new();
    let base = with_rope_freqs(&spec, None);
    for (k, v) in base.metadata().iter() {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in base.tensors() {
        w.add_tensor(t.name(), t.ggml_type(), t.dims(), base.bytes(t.name()).unwrap().to_vec()).unwrap();
    }
    w.add_tensor(ROPE_FREQS, GgmlType::I32, &[32], vec![1; 32 * 4]).unwrap();
    let err = ModelConfig::from_file(&file_of(&w)).unwrap_err().to_string();
    assert!(err.contains("rope_freqs.weight") && err.contains("I32"), "{err}");
    // A configuration made by hand is checked when its RoPE is asked for.
    let wrong = ModelConfig { rope_freqs: Some(vec![1.0; 31]), ..spec.config.clone() };
    assert!(
        wrong.rope().unwrap_err().to_string().contains("31 frequency factors, the RoPE rotates 32 pairs")
    );
    let none = ModelConfig { rope_freqs: None, ..spec.config.clone() };
    assert!(none.rope().unwrap_err().to_string().contains("llama3 frequency factors tensor is missing"));
}

/// Max-abs difference of the reference's outputs for two files over the parity test's schedule
/// (a 37-token prefill and 20 decode steps, the same inputs).
fn reference_difference(a: &GgufFile, b: &GgufFile) -> f64 {
    let (ra, rb) = (
        ReferenceModel::load(a, Rounding::Exact).unwrap(),
        ReferenceModel::load(b, Rounding::Exact).unwrap(),
    );
    let hidden = ra.config().hidden;
    let mut rng = SplitMix(5);
    let (mut sa, mut sb) = (ra.new_sequence(), rb.new_sequence());
    let mut worst = 0.0f64;
    for tokens in std::iter::once(37).chain(std::iter::repeat_n(1, 20)) {
        let x: Vec<f64> = rng.hidden(tokens * hidden).into_iter().map(f64::from).collect();
        let (ya, yb) = (ra.forward(&mut sa, &x).unwrap(), rb.forward(&mut sb, &x).unwrap());
        worst = worst.max(distance(&ya, &yb).0);
    }
    worst
}

/// Factors of 1 are no factors (the reference's output bit for bit); Llama 3.1's factors, or
/// linear scaling, change it, by far more than the f32 parity tolerance (so the GPU parity test
/// with factors would fail if the GPU ignored them).
#[test]
fn reference_with_unit_factors_equals_none_and_other_factors_differ() {
    let llama3 = SyntheticSpec::small_llama3();
    let none = SyntheticSpec {
        config: ModelConfig { rope_scaling: RopeScaling::None, rope_freqs: None, ..llama3.config.clone() },
        ..llama3.clone()
    };
    let ones = SyntheticSpec {
        config: ModelConfig { rope_freqs: Some(vec![1.0; 32]), ..none.config.clone() },
        ..none.clone()
    };
    let linear = SyntheticSpec {
        config: ModelConfig { rope_scaling: RopeScaling::Linear(8.0), ..none.config.clone() },
        ..none.clone()
    };
    let (none, ones, llama3, linear) =
        (spec_file(&none), spec_file(&ones), spec_file(&llama3), spec_file(&linear));
    assert_eq!(reference_difference(&none, &ones), 0.0);
    let f32_tolerance = parity_tolerance("f32").abs;
    for (what, file) in [("llama3 factors", &llama3), ("linear scaling 8", &linear)] {
        let d = reference_difference(&none, file);
        eprintln!("{what}: max difference {d:.3e} from no scaling");
        assert!(d > 100.0 * f32_tolerance, "{what}: {d}");
    }
}

/// The k-quant synthetic model loads on the CPU (every row whole super-blocks) and its forward
/// pass is finite.
#[test]
fn a_kquant_model_loads_and_runs_on_the_reference() {
    let file = GgufFile::from_bytes(SyntheticSpec::small_kquants().to_bytes().unwrap()).unwrap();
    let r = ReferenceModel::load(&file, Rounding::Exact).unwrap();
    let mut seq = r.new_sequence();
    let out = r
        .forward(&mut seq, &SplitMix(5).hidden(3 * 256).iter().map(|&v| v as f64).collect::<Vec<_>>())
        .unwrap();
    assert!(out.len() == 3 * 256 && out.iter().all(|v| v.is_finite()));
}
