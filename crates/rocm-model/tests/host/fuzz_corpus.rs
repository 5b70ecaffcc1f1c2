//! The fuzzer's seed corpus (`fuzz/corpus/parse/`): small files made by the writer, one per
//! feature the parser has (every value type, nested arrays, every supported tensor type,
//! unusual alignments, version 2, scalars and empty tensors). This test keeps the checked-in
//! files equal to what [`seeds`] makes and checks that each parses and survives a rewrite.
//!
//! After changing [`seeds`]: `GGUF_WRITE_CORPUS=1 cargo test -p rocm-model --test host fuzz_corpus`.

use std::path::PathBuf;

use crate::common::manifest_dir;
use rocm_model::{Array, GgmlType, GgufFile, GgufWriter, Value, ValueType};

fn corpus_dir() -> PathBuf {
    manifest_dir().join("fuzz/corpus/parse")
}

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 16.0).collect()
}

/// `n` blocks of `ty` with fixed bytes (a valid scale, every code): the seeds do not depend on
/// how the quantisers round.
fn blocks(ty: GgmlType, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for b in 0..n {
        match ty {
            GgmlType::MXFP4 => out.push(120 + b as u8), // E8M0 scale
            _ => out.extend_from_slice(&half::f16::from_f32(0.0625 * (b + 1) as f32).to_le_bytes()),
        }
        let payload = ty.type_size() as usize - if ty == GgmlType::MXFP4 { 1 } else { 2 };
        out.extend((0..payload).map(|i| (i * 17 + b * 5) as u8));
    }
    out
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    out.push(("empty.gguf", GgufWriter::new().to_bytes()));

    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("u8", 1u8).unwrap();
    w.add_metadata("i8", -1i8).unwrap();
    w.add_metadata("u16", 2u16).unwrap();
    w.add_metadata("i16", -2i16).unwrap();
    w.add_metadata("u32", 3u32).unwrap();
    w.add_metadata("i32", -3i32).unwrap();
    w.add_metadata("f32", 0.5f32).unwrap();
    w.add_metadata("bool", true).unwrap();
    w.add_metadata("u64", 4u64).unwrap();
    w.add_metadata("i64", -4i64).unwrap();
    w.add_metadata("f64", 0.25f64).unwrap();
    w.add_metadata("tokens", vec!["<s>", "</s>", "a"]).unwrap();
    w.add_metadata("scores", vec![0.0f32, -1.0, -2.0]).unwrap();
    w.add_metadata("types", vec![1i32, 3, 1]).unwrap();
    w.add_metadata("flags", vec![true, false]).unwrap();
    w.add_metadata("bytes", vec![0u8, 255]).unwrap();
    w.add_metadata("wide", vec![u64::MAX, 0]).unwrap();
    w.add_metadata("empty", Value::Array(Array::empty(ValueType::U32))).unwrap();
    let nested =
        Array::Array(vec![Array::U16(vec![1, 2]), Array::Array(vec![Array::String(vec!["x".into()])])]);
    w.add_metadata("nested", Value::Array(nested)).unwrap();
    out.push(("metadata.gguf", w.to_bytes()));

    let mut w = GgufWriter::new();
    w.add_f32("f32", &[4, 2], &values(8)).unwrap();
    w.add_quantized("f16", GgmlType::F16, &[8], &values(8)).unwrap();
    w.add_quantized("bf16", GgmlType::BF16, &[8], &values(8)).unwrap();
    w.add_tensor("q8_0", GgmlType::Q8_0, &[32], blocks(GgmlType::Q8_0, 1)).unwrap();
    w.add_tensor("q4_0", GgmlType::Q4_0, &[64], blocks(GgmlType::Q4_0, 2)).unwrap();
    w.add_tensor("mxfp4", GgmlType::MXFP4, &[32], blocks(GgmlType::MXFP4, 1)).unwrap();
    w.add_tensor("q4_k", GgmlType::Q4_K, &[256], vec![1u8; 144]).unwrap();
    w.add_tensor("i8", GgmlType::I8, &[3], vec![1u8, 2, 3]).unwrap();
    out.push(("tensors.gguf", w.to_bytes()));

    for alignment in [1u32, 64] {
        let mut w = GgufWriter::new();
        w.set_alignment(alignment).unwrap();
        w.add_f32("a", &[3], &[1.0, 2.0, 3.0]).unwrap();
        w.add_tensor("b", GgmlType::Q8_0, &[32, 2], blocks(GgmlType::Q8_0, 2)).unwrap();
        out.push((if alignment == 1 { "align1.gguf" } else { "align64.gguf" }, w.to_bytes()));
    }

    let mut w = GgufWriter::new();
    w.set_version(2).unwrap();
    w.add_metadata("general.name", "v2").unwrap();
    w.add_tensor("w", GgmlType::MXFP4, &[32, 1, 1, 2], blocks(GgmlType::MXFP4, 2)).unwrap();
    out.push(("version2.gguf", w.to_bytes()));

    let mut w = GgufWriter::new();
    w.add_f32("scalar", &[], &[7.0]).unwrap();
    w.add_f32("empty", &[0, 3], &[]).unwrap();
    for i in 0..8 {
        w.add_quantized(format!("blk.{i}.norm"), GgmlType::F16, &[2], &[i as f32, 1.0]).unwrap();
    }
    out.push(("shapes.gguf", w.to_bytes()));
    out
}

/// What the fuzz target checks, for one input that parses.
fn check_round_trip(name: &str, bytes: &[u8]) {
    let file = GgufFile::from_bytes(bytes.to_vec()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let w = GgufWriter::from_file(&file).unwrap();
    for t in file.tensors() {
        if t.ggml_type().is_decodable() {
            assert_eq!(file.to_f32(t.name()).unwrap().len() as u64, t.n_elements());
        }
    }
    assert_eq!(w.to_bytes(), bytes, "{name}: a writer-made file rewrites to the same bytes");
}

#[test]
fn the_checked_in_seed_corpus_is_current() {
    let dir = corpus_dir();
    let write = std::env::var_os("GGUF_WRITE_CORPUS").is_some();
    for (name, bytes) in seeds() {
        check_round_trip(name, &bytes);
        assert!(bytes.len() <= 2048, "{name}: seeds stay small ({} bytes)", bytes.len());
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        } else {
            let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; run GGUF_WRITE_CORPUS=1 cargo test -p rocm-model --test host fuzz_corpus",
                    path.display()
                )
            });
            assert!(
                on_disk == bytes,
                "{} is stale; run GGUF_WRITE_CORPUS=1 cargo test -p rocm-model --test host fuzz_corpus",
                path.display()
            );
        }
    }
}
