//! CPU tests of the architectures' differences: configuration, the tensors each requires, reads
//! and refuses, and GLM-4's layer (biases, post-norms, stacked gate/up) worked by hand.

use rocm_kernels::rope::RopeStyle;

use super::synthetic::SyntheticSpec;
use super::*;
use crate::gguf::{GgufFile, GgufWriter};

fn small_file(arch: Architecture) -> GgufFile {
    GgufFile::from_bytes(SyntheticSpec::small(arch).to_bytes().unwrap()).unwrap()
}

/// The small model of `arch` without the tensors `drop` and with F32 tensors `add` (name, dims).
fn rewritten(arch: Architecture, drop: &[&str], add: &[(&str, &[u64])]) -> GgufFile {
    let base = small_file(arch);
    let mut w = GgufWriter::new();
    for (k, v) in base.metadata().iter() {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in base.tensors().iter().filter(|t| !drop.contains(&t.name())) {
        w.add_tensor(t.name(), t.ggml_type(), t.dims(), base.bytes(t.name()).unwrap().to_vec()).unwrap();
    }
    for &(name, dims) in add {
        let n = dims.iter().product::<u64>() as usize;
        w.add_f32(name, dims, &vec![0.5; n]).unwrap();
    }
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

fn load_error(file: &GgufFile) -> ModelError {
    ReferenceModel::load(file, Rounding::Exact).unwrap_err()
}

#[test]
fn reads_qwen2_and_glm4_configs() {
    let c = ModelConfig::from_file(&small_file(Architecture::Qwen2)).unwrap();
    assert_eq!((c.architecture, c.rotary_dim, c.rope_theta), (Architecture::Qwen2, 64, 1e6));
    assert_eq!(c.rope().unwrap().style, RopeStyle::NeoX { rotary_dim: 64 });
    let c = ModelConfig::from_file(&small_file(Architecture::Glm4)).unwrap();
    assert_eq!((c.architecture, c.rotary_dim, c.rope_theta), (Architecture::Glm4, 32, 10_000.0));
    assert_eq!(c.rope().unwrap().style, RopeStyle::GptJ { rotary_dim: 32 });
    assert_eq!(c.rotary_pairs(), 16);
}

/// glm4 rotates `rope.dimension_count` elements (half a head in real files); without the key
/// llama.cpp would rotate the whole head, so a glm4 file without it is refused, naming it.
#[test]
fn glm4_requires_its_rotary_dimension() {
    let base = small_file(Architecture::Glm4);
    let mut w = GgufWriter::new();
    for (k, v) in base.metadata().iter().filter(|(k, _)| *k != "glm4.rope.dimension_count") {
        w.add_metadata(k, v.clone()).unwrap();
    }
    let err = ModelConfig::from_metadata(GgufFile::from_bytes(w.to_bytes()).unwrap().metadata()).unwrap_err();
    assert!(matches!(&err, ModelError::MissingKey { key } if key == "glm4.rope.dimension_count"), "{err}");
}

#[test]
fn another_architecture_is_refused_naming_the_supported_ones() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "qwen3").unwrap();
    let err = ModelConfig::from_metadata(GgufFile::from_bytes(w.to_bytes()).unwrap().metadata()).unwrap_err();
    assert_eq!(err.to_string(), "architecture `qwen3` is not supported (supported: llama, qwen2, glm4)");
}

/// Missing tensors the architecture requires (qwen2's biases, glm4's post-norms, one of three
/// biases) are named; so are misshapen ones and tensors of these families the block does not
/// implement. glm4's biases are optional, as in llama.cpp.
#[test]
fn each_architecture_requires_and_refuses_its_tensors() {
    let missing = |arch, drop: &[&str], want: &str| {
        let err = load_error(&rewritten(arch, drop, &[]));
        assert!(matches!(&err, ModelError::MissingTensor { name } if name == want), "{drop:?}: {err}");
    };
    missing(Architecture::Qwen2, &["blk.1.attn_v.bias"], "blk.1.attn_v.bias");
    missing(Architecture::Glm4, &["blk.0.post_ffw_norm.weight"], "blk.0.post_ffw_norm.weight");
    missing(Architecture::Glm4, &["blk.1.attn_k.bias"], "blk.1.attn_k.bias");
    // Without any biases a glm4 file loads (llama.cpp: TENSOR_NOT_REQUIRED).
    let biases = ["attn_q.bias", "attn_k.bias", "attn_v.bias"];
    let names: Vec<String> = (0..2).flat_map(|l| biases.map(|b| format!("blk.{l}.{b}"))).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    ReferenceModel::load(&rewritten(Architecture::Glm4, &names, &[]), Rounding::Exact).unwrap();

    let refused = |arch, add: (&str, &[u64]), says: &str| {
        let err = load_error(&rewritten(arch, &[], &[add]));
        let text = err.to_string();
        assert!(matches!(&err, ModelError::BadTensor { name, .. } if name == add.0), "{text}");
        assert!(text.contains(says), "{text}");
    };
    refused(Architecture::Llama, ("blk.0.post_attention_norm.weight", &[192]), "post-norms are glm4's");
    refused(Architecture::Qwen2, ("blk.1.post_ffw_norm.weight", &[192]), "post-norms are glm4's");
    refused(Architecture::Glm4, ("blk.0.ffn_gate.weight", &[192, 352]), "stacked in ffn_up");
    refused(Architecture::Qwen2, ("blk.1.attn_output.bias", &[192]), "output bias is not implemented");
    refused(Architecture::Glm4, ("blk.0.attn_qkv.weight", &[192, 512]), "fused QKV");

    let misshapen = |arch, name: &str, dims: &[u64], says: &str| {
        let err = load_error(&rewritten(arch, &[name], &[(name, dims)]));
        assert!(matches!(&err, ModelError::BadTensor { name: n, .. } if n == name), "{err}");
        assert!(err.to_string().contains(says), "{err}");
    };
    // glm4's ffn_up holds gate and up: 2 * 352 rows.
    misshapen(Architecture::Glm4, "blk.0.ffn_up.weight", &[192, 352], "[192, 704]");
    misshapen(Architecture::Qwen2, "blk.0.attn_k.bias", &[256], "[128]");
}

/// A one-layer glm4 model with hidden 4 (one head of 4, 2 of them rotated) worked by hand, one
/// token at position 0 (where RoPE is the identity): Wq = Wk = 0, Wv = Wo = I with a V bias,
/// norm weights 1 but for the post-norms (2 and 3). FFN 2: ffn_up's first two rows are the gate
/// (xn3, xn2) and the last two the up (xn0, xn1), so act = [silu(xn3) xn0, silu(xn2) xn1];
/// Wdown puts act in elements 0 and 1.
#[test]
fn glm4_layer_by_hand() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "glm4").unwrap();
    for (k, v) in [
        ("embedding_length", 4u32),
        ("block_count", 1),
        ("feed_forward_length", 2),
        ("attention.head_count", 1),
        ("rope.dimension_count", 2),
    ] {
        w.add_metadata(format!("glm4.{k}"), v).unwrap();
    }
    let eps = 1e-6f32;
    w.add_metadata("glm4.attention.layer_norm_rms_epsilon", eps).unwrap();
    let eye: Vec<f32> = (0..16).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect();
    let bv = [0.5f32, -1.0, 0.0, 2.0];
    for (name, dims, values) in [
        ("attn_norm.weight", vec![4u64], vec![1.0f32; 4]),
        ("attn_q.weight", vec![4, 4], vec![0.0; 16]),
        ("attn_k.weight", vec![4, 4], vec![0.0; 16]),
        ("attn_v.weight", vec![4, 4], eye.clone()),
        ("attn_q.bias", vec![4], vec![0.0; 4]),
        ("attn_k.bias", vec![4], vec![0.0; 4]),
        ("attn_v.bias", vec![4], bv.to_vec()),
        ("attn_output.weight", vec![4, 4], eye),
        ("post_attention_norm.weight", vec![4], vec![2.0; 4]),
        ("ffn_norm.weight", vec![4], vec![1.0; 4]),
        ("ffn_up.weight", vec![4, 4], vec![0., 0., 0., 1., 0., 0., 1., 0., 1., 0., 0., 0., 0., 1., 0., 0.]),
        ("ffn_down.weight", vec![2, 4], vec![1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
        ("post_ffw_norm.weight", vec![4], vec![3.0; 4]),
    ] {
        w.add_f32(format!("blk.0.{name}"), &dims, &values).unwrap();
    }
    let model = ReferenceModel::load(&GgufFile::from_bytes(w.to_bytes()).unwrap(), Rounding::Exact).unwrap();
    let x = [1.0f64, 2.0, 3.0, 4.0];
    let got = model.forward(&mut model.new_sequence(), &x).unwrap();

    let eps = eps as f64;
    let rmsnorm = |v: &[f64], g: f64| -> Vec<f64> {
        let inv = 1.0 / (v.iter().map(|a| a * a).sum::<f64>() / v.len() as f64 + eps).sqrt();
        v.iter().map(|a| a * inv * g).collect()
    };
    // One token: attention returns its own V = rmsnorm(x) + bv.
    let v: Vec<f64> = rmsnorm(&x, 1.0).iter().zip(bv).map(|(a, b)| a + b as f64).collect();
    let h: Vec<f64> = x.iter().zip(rmsnorm(&v, 2.0)).map(|(a, b)| a + b).collect();
    let xn = rmsnorm(&h, 1.0);
    let silu = |a: f64| a / (1.0 + (-a).exp());
    let out = |act: [f64; 2]| -> Vec<f64> {
        let d = rmsnorm(&[act[0], act[1], 0.0, 0.0], 3.0);
        h.iter().zip(&d).map(|(a, b)| a + b).collect()
    };
    let want = out([silu(xn[3]) * xn[0], silu(xn[2]) * xn[1]]);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "got {got:?}, want {want:?}");
    }
    // The gate is the first half: the halves the other way round give another result.
    let swapped = out([silu(xn[0]) * xn[3], silu(xn[1]) * xn[2]]);
    assert!((swapped[0] - want[0]).abs() > 0.1, "the check can tell the halves apart: {swapped:?}");
}
