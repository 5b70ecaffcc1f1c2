//! Interop with the reference Python implementation (`pip install gguf`, llama.cpp's gguf-py):
//! a file it writes reads back identically here, and a file written here reads back
//! identically there, metadata values, tensor shapes, types, offsets and bytes alike. Both
//! directions also compare the f32 decoding of every decodable tensor with gguf-py's own
//! dequantisation, an implementation independent of ours.
//!
//! Skipped (with a printed reason) where `python3 -c "import gguf"` fails, except under CI.

use crate::common::{TempDir, assert_same_listing, canon_file, python_gguf, run_script};
use rocm_model::{Array, GgmlType, GgufFile, GgufWriter, Value, ValueType};

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

#[test]
fn a_file_written_by_gguf_py_reads_back_identically() {
    if !python_gguf("a_file_written_by_gguf_py_reads_back_identically") {
        return;
    }
    let dir = TempDir::new("py-write");
    let path = dir.join("python.gguf");
    let expected = lines(&run_script("write", &path));
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.version(), 3);
    assert_same_listing(&canon_file(&file), &expected, "gguf-py's file as we read it vs what gguf-py wrote");
    // The types the script covers, so a change there cannot silently narrow the test.
    let types: Vec<_> = file.tensors().iter().map(|t| t.ggml_type()).collect();
    let expected = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::MXFP4,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];
    for t in expected {
        assert!(types.contains(&t), "{t} missing from the script's file");
    }
}

fn our_file() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set_alignment(64).unwrap();
    let values: Vec<(&str, Value)> = vec![
        ("general.architecture", "rocmforge-test".into()),
        ("u8", Value::U8(255)),
        ("i8", Value::I8(-128)),
        ("u16", Value::U16(12345)),
        ("i16", Value::I16(-12345)),
        ("u32", Value::U32(u32::MAX)),
        ("i32", Value::I32(i32::MIN)),
        ("f32", Value::F32(6.5e-3)),
        ("bool", Value::Bool(true)),
        ("string", "tëst ✓".into()),
        ("string.empty", "".into()),
        ("u64", Value::U64(1 << 60)),
        ("i64", Value::I64(-(1 << 60))),
        ("f64", Value::F64(-1.0e-200)),
        ("arr.u8", vec![1u8, 2, 3].into()),
        ("arr.i8", vec![-1i8, 1].into()),
        ("arr.u16", vec![0u16, 65535].into()),
        ("arr.i16", vec![i16::MIN, i16::MAX].into()),
        ("arr.u32", vec![9u32; 4].into()),
        ("arr.i32", vec![-3i32, 3].into()),
        ("arr.f32", vec![1.5f32, -2.25].into()),
        ("arr.bool", vec![false, true, false].into()),
        ("arr.string", vec!["<unk>", "", "ä"].into()),
        ("arr.u64", vec![u64::MAX].into()),
        ("arr.i64", vec![i64::MIN, 0].into()),
        ("arr.f64", vec![0.1f64, 0.2].into()),
        ("arr.empty", Value::Array(Array::empty(ValueType::String))),
        (
            "arr.nested",
            Value::Array(Array::Array(vec![
                Array::U8(vec![7]),
                Array::Array(vec![Array::String(vec!["deep".into()]), Array::empty(ValueType::F64)]),
                Array::empty(ValueType::I16),
            ])),
        ),
    ];
    for (k, v) in values {
        w.add_metadata(k, v).unwrap();
    }
    let wave = |n: usize, f: f32| (0..n).map(|i| (i as f32 * f).sin() * 3.0).collect::<Vec<f32>>();
    w.add_f32("t.f32", &[5, 3], &wave(15, 0.7)).unwrap();
    w.add_quantized("t.f16", GgmlType::F16, &[6, 2], &wave(12, 0.3)).unwrap();
    w.add_quantized("t.bf16", GgmlType::BF16, &[8], &wave(8, 1.3)).unwrap();
    w.add_quantized("t.q8_0", GgmlType::Q8_0, &[64, 2], &wave(128, 0.11)).unwrap();
    w.add_quantized("t.q4_0", GgmlType::Q4_0, &[32, 3], &wave(96, 0.23)).unwrap();
    w.add_quantized("t.mxfp4", GgmlType::MXFP4, &[32, 2, 2], &wave(128, 0.05)).unwrap();
    w.add_tensor("t.q6_k", GgmlType::Q6_K, &[256], (0..210u32).map(|i| (i * 7) as u8).collect::<Vec<_>>())
        .unwrap();
    let ints: Vec<u8> = [-1i32, 2, -3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor("t.i32", GgmlType::I32, &[2, 2], ints).unwrap();
    w
}

#[test]
fn a_file_written_here_reads_back_identically_in_gguf_py() {
    if !python_gguf("a_file_written_here_reads_back_identically_in_gguf_py") {
        return;
    }
    let dir = TempDir::new("py-read");
    let path = dir.join("ours.gguf");
    our_file().write_file(&path).unwrap();
    let ours = canon_file(&GgufFile::open(&path).unwrap());
    let theirs = lines(&run_script("read", &path));
    assert_same_listing(&ours, &theirs, "our file as we read it vs as gguf-py reads it");
}
