//! Interop with the reference Python implementation (`pip install gguf`, llama.cpp's gguf-py):
//! a file it writes reads back identically here, and a file written here reads back
//! identically there, metadata values, tensor shapes, types, offsets and bytes alike. Both
//! directions also compare the f32 decoding of every decodable tensor with gguf-py's own
//! dequantisation, an implementation independent of ours: random blocks (finite scales) and
//! blocks our k-quant encoder made from awkward values travel both ways. Our Q8_0, Q4_0 and
//! MXFP4 encoders are compared byte for byte with gguf-py's `quantize` on the same inputs.
//!
//! Skipped (with a printed reason) where `python3 -c "import gguf"` fails, except under CI.

use crate::common::{TempDir, assert_same_listing, canon_file, python_gguf, run_script, run_script_with};
use rocm_model::model::synthetic::SplitMix;
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
    // Blocks our encoders made, for gguf-py to write into its file as raw bytes.
    let blocks = dir.join("blocks.gguf");
    our_k_quant_blocks().write_file(&blocks).unwrap();
    let expected = lines(&run_script_with("write", &[&path, &blocks]));
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
    for name in ["ours.q4_k", "ours.q5_k", "ours.q6_k"] {
        assert!(file.tensor(name).is_ok(), "{name} missing from the script's file");
    }
}

/// Uniform in [-1, 1), from 24 bits of `rng`.
fn unit(rng: &mut SplitMix) -> f32 {
    (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// Random `ty` blocks (a k-quant) whose f16 scale fields are finite, of either sign (any
/// exponent but the all-ones one), so every decoded value is a number.
fn random_k_blocks(ty: GgmlType, blocks: usize, seed: u64) -> Vec<u8> {
    let size = ty.type_size() as usize;
    let mut rng = SplitMix(seed);
    let mut bytes: Vec<u8> = (0..blocks * size).map(|_| rng.next_u64() as u8).collect();
    let f16_fields: &[usize] = if ty == GgmlType::Q6_K { &[208] } else { &[0, 2] };
    for block in bytes.chunks_exact_mut(size) {
        for &at in f16_fields {
            // The exponent is bits 2..7 of the high byte; all ones is inf or NaN.
            if block[at + 1] & 0x7C == 0x7C {
                block[at + 1] &= !0x40;
            }
        }
    }
    bytes
}

/// Super-blocks of awkward values for the k-quant encoders: mixed signs, zeros and -0,
/// constant and grid-tied sub-blocks, wide ranges, one sign only, subnormals, and inf.
fn awkward_super_blocks() -> Vec<f32> {
    let mut rng = SplitMix(99);
    let mut v: Vec<f32> = (0..256).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    v.extend((0..256).map(|i| match i / 32 {
        0 => 0.0,
        1 => -0.0,
        2 => 1.5,
        3 => -2.25,
        4 => (i % 31) as f32 * 0.5 - 7.5,
        _ => unit(&mut rng) * 0.01,
    }));
    v.extend((0..256).map(|i| if i % 7 == 0 { 1.0e4 * unit(&mut rng) } else { 3.0e-4 * unit(&mut rng) }));
    v.extend((0..256).map(|_| unit(&mut rng).abs() * 50.0 + 10.0));
    v.extend((0..256).map(|_| -unit(&mut rng).abs() * 0.2));
    v.extend((0..256).map(|i| f32::from_bits(1 + 977 * i as u32) * if i % 3 == 0 { -1.0 } else { 1.0 }));
    // Our encoders write a super-block holding inf (or NaN) with NaN scales: NaN throughout.
    v.extend((0..256).map(|i| if i == 9 { f32::INFINITY } else { 1.0 }));
    v
}

/// A file of k-quant tensors encoded by our writer from [`awkward_super_blocks`].
fn our_k_quant_blocks() -> GgufWriter {
    let v = awkward_super_blocks();
    let mut w = GgufWriter::new();
    for (name, ty) in [("q4_k", GgmlType::Q4_K), ("q5_k", GgmlType::Q5_K), ("q6_k", GgmlType::Q6_K)] {
        w.add_quantized(name, ty, &[v.len() as u64], &v).unwrap();
    }
    w
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
    let awkward = awkward_super_blocks();
    let n = awkward.len() as u64;
    w.add_quantized("t.q4_k", GgmlType::Q4_K, &[256, n / 256], &awkward).unwrap();
    w.add_quantized("t.q5_k", GgmlType::Q5_K, &[n], &awkward).unwrap();
    w.add_quantized("t.q6_k", GgmlType::Q6_K, &[256, 1, n / 256], &awkward).unwrap();
    for (seed, name, ty) in [
        (1, "t.q4_k.raw", GgmlType::Q4_K),
        (2, "t.q5_k.raw", GgmlType::Q5_K),
        (3, "t.q6_k.raw", GgmlType::Q6_K),
    ] {
        w.add_tensor(name, ty, &[256, 3], random_k_blocks(ty, 3, seed)).unwrap();
    }
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

/// Named 32-element blocks of awkward inputs for the Q8_0, Q4_0 and MXFP4 encoders: ties of each
/// format's rounding, zeros of both signs, wide and extreme ranges, and block maxima just
/// below a power of two (where ggml's f32 `log2f` rounds up to the power). Inputs where ggml's
/// reference is undefined behaviour (NaN, inf, scales whose reciprocal overflows, MXFP4 maxima
/// below 2^-125: casts of out-of-range floats to integers) are left out.
fn awkward_blocks(ty: GgmlType) -> Vec<(&'static str, Vec<f32>)> {
    let block = |head: &[f32], fill: f32| {
        let mut b = vec![fill; 32];
        b[..head.len()].copy_from_slice(head);
        b
    };
    let mixed: Vec<f32> = (0..32).map(|i| (i as f32 * 0.9).sin() * 3.0).collect();
    let mut cases = vec![
        ("mixed", mixed),
        ("zeros", block(&[], 0.0)),
        ("neg_zeros", block(&[], -0.0)),
        ("signed_zeros", block(&[-0.0, 1.0, 0.0, -0.0, -1.0], -0.0)),
        ("wide", block(&[1.0e30, -1.0e-30, 1.0e-20, 3.0, -7.0e29], 1.0e-3)),
        ("huge", block(&[f32::MAX, -f32::MAX / 3.0, 1.0], -1.0)),
        ("tiny", block(&[1.0e-35, -3.0e-36, 7.0e-37], 1.0e-36)),
    ];
    let ties = match ty {
        // d = 1: x * id is the value itself; roundf takes halves away from zero.
        GgmlType::Q8_0 => block(&[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -126.5, 63.5, 126.5], 0.0),
        // d = 1 (largest magnitude -8): x + 8.5 lands on integers, truncated.
        GgmlType::Q4_0 => block(&[-8.0, 0.5, -0.5, 6.5, 7.0, 7.5, -7.5, 1.5, -1.5], 0.0),
        // Scale 2^0 (amax 4): halfway between E2M1 values, both signs.
        _ => block(&[4.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, -0.25, -0.75, -1.75, -3.5, -0.1, 0.1], 0.0),
    };
    cases.push(("ties", ties));
    let below = |p: f32| f32::from_bits(p.to_bits() - 1);
    cases.push(("below_pow2", block(&[below(1024.0), 1.0, -3.0, below(2.0)], 0.5)));
    cases.push(("below_pow2_small", block(&[below(2.0), 0.3, -1.0], 0.25)));
    cases.push((
        "below_pow2_far",
        block(&[f32::from_bits(below(2f32.powi(100)).to_bits() - 20), 1.0e29], 0.0),
    ));
    cases
}

#[test]
fn our_q8_0_q4_0_and_mxfp4_encoders_match_gguf_py_byte_for_byte() {
    if !python_gguf("our_q8_0_q4_0_and_mxfp4_encoders_match_gguf_py_byte_for_byte") {
        return;
    }
    let dir = TempDir::new("py-quantize");
    let inputs = dir.join("inputs.gguf");
    let (mut plain, mut encoded) = (GgufWriter::new(), GgufWriter::new());
    let mut names = Vec::new();
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::MXFP4] {
        for (case, values) in awkward_blocks(ty) {
            let name = format!("{}.{case}", ty.name());
            plain.add_f32(name.clone(), &[32], &values).unwrap();
            encoded.add_quantized(name.clone(), ty, &[32], &values).unwrap();
            names.push(name);
        }
    }
    plain.write_file(&inputs).unwrap();
    let ours = GgufFile::from_bytes(encoded.to_bytes()).unwrap();
    let theirs = lines(&run_script("quantize", &inputs));
    assert_eq!(theirs.len(), names.len(), "one line per input");
    for (name, line) in names.iter().zip(&theirs) {
        let ours = format!("quant {name} {}", crate::common::hex(ours.bytes(name).unwrap()));
        if name == "Q4_0.neg_zeros" {
            // ggml's quantize_row_q4_0_ref starts its signed maximum at +0.0f and replaces it
            // only by a strictly larger magnitude, so a block of -0 keeps +0 and d = +0 / -8 =
            // -0 (f16 0x8000), as ours. gguf-py takes the first element of largest magnitude,
            // -0, and writes d = +0. Codes agree (8: x * 0 + 8.5 truncated).
            let codes = "88".repeat(16);
            assert_eq!(ours, format!("quant {name} 0080{codes}"), "ours, as ggml's C");
            assert_eq!(line, &format!("quant {name} 0000{codes}"), "gguf-py's known difference");
            continue;
        }
        assert_eq!(&ours, line, "ours vs gguf-py");
    }
}
