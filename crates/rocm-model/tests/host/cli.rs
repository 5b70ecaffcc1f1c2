//! The `gguf` tool: `inspect` lists a file, `dump` writes a tensor as `.npy`, `tokenize` prints
//! the ids of a text; failures exit non-zero with a message naming what went wrong.

use std::process::{Command, Output};

use crate::common::{TempDir, hex, python_gguf, run_script, sparse_gguf};
use rocm_model::{GgmlType, GgufFile, GgufWriter};

/// The tool's binary. From a nextest archive run on another host the build path does not exist;
/// nextest then points `NEXTEST_BIN_EXE_gguf` at the extracted binary.
fn gguf(args: &[&str]) -> Output {
    let exe = std::env::var_os("NEXTEST_BIN_EXE_gguf").unwrap_or_else(|| env!("CARGO_BIN_EXE_gguf").into());
    Command::new(exe).args(args).output().unwrap()
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn model(dir: &TempDir) -> std::path::PathBuf {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("llama.block_count", 2u32).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", (0..1000).map(|i| format!("tok{i}")).collect::<Vec<_>>())
        .unwrap();
    let values: Vec<f32> = (0..96).map(|i| i as f32 * 0.25 - 12.0).collect();
    w.add_f32("norm.weight", &[32, 3], &values).unwrap();
    w.add_quantized("ffn.weight", GgmlType::Q8_0, &[32, 3], &values).unwrap();
    w.add_quantized("ffn.mx", GgmlType::MXFP4, &[32, 3], &values).unwrap();
    w.add_tensor("k.weight", GgmlType::Q2_K, &[256], vec![0u8; 84]).unwrap();
    let path = dir.join("model.gguf");
    w.write_file(&path).unwrap();
    path
}

#[test]
fn inspect_lists_metadata_and_tensors() {
    let dir = TempDir::new("cli-inspect");
    let path = model(&dir);
    let out = gguf(&["inspect", path.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for needle in [
        "GGUF version 3",
        "alignment 32",
        "general.architecture",
        "\"llama\"",
        "llama.block_count",
        "[string; 1000] [\"tok0\"",
        "norm.weight",
        "[32, 3]",
        "ffn.weight",
        "Q8_0",
        "MXFP4",
        "Q2_K",
        "102", // 3 Q8_0 blocks of 34 bytes
    ] {
        assert!(stdout.contains(needle), "`{needle}` missing from:\n{stdout}");
    }
}

/// Parses our own `.npy` output: (shape, values).
fn read_npy(bytes: &[u8]) -> (String, Vec<f32>) {
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap().to_string();
    let values =
        bytes[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    (header, values)
}

#[test]
fn dump_writes_the_decoded_tensor_as_npy() {
    let dir = TempDir::new("cli-dump");
    let path = model(&dir);
    let file = GgufFile::open(&path).unwrap();
    for tensor in ["norm.weight", "ffn.weight", "ffn.mx"] {
        let npy = dir.join(&format!("{tensor}.npy"));
        let out = gguf(&["dump", path.to_str().unwrap(), tensor, "-o", npy.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out).1);
        let (header, values) = read_npy(&std::fs::read(&npy).unwrap());
        assert!(header.contains("'descr': '<f4'") && header.contains("'shape': (3, 32)"), "{header}");
        assert_eq!(values, file.to_f32(tensor).unwrap(), "{tensor}");
        if python_gguf("dump_writes_the_decoded_tensor_as_npy") {
            // numpy reads it as the same array.
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_eq!(run_script("npy", &npy).trim(), format!("npy 3,32 <f4 {}", hex(&bytes)));
        }
    }
}

#[test]
fn failures_exit_non_zero_and_say_why() {
    let dir = TempDir::new("cli-fail");
    let path = model(&dir);
    let p = path.to_str().unwrap();
    let npy = dir.join("x.npy");
    let o = npy.to_str().unwrap();
    let missing = dir.join("missing.gguf");
    let not_gguf = dir.join("not.gguf");
    std::fs::write(&not_gguf, b"this is not a model file at all").unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (&[], 2, "no command"),
        (&["inspect"], 2, "one FILE"),
        (&["dump", p, "norm.weight"], 2, "needs -o"),
        (&["frob", p], 2, "unknown command"),
        (&["inspect", missing.to_str().unwrap()], 1, "missing.gguf"),
        (&["inspect", not_gguf.to_str().unwrap()], 1, "not a GGUF file"),
        (&["inspect", dir.path().to_str().unwrap()], 1, "is a directory, not a GGUF file"),
        (&["dump", dir.path().to_str().unwrap(), "t", "-o", o], 1, "is a directory, not a GGUF file"),
        (&["dump", p, "no.such", "-o", o], 1, "no tensor named `no.such`"),
        (&["dump", p, "k.weight", "-o", o], 1, "unsupported type 10 (Q2_K)"),
        (&["dump", p, "norm.weight", "-o", "/nonexistent-dir/x.npy"], 1, "/nonexistent-dir/x.npy"),
    ];
    for &(args, code, needle) in cases {
        let out = gguf(args);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: `{needle}` missing from: {stderr}");
    }
    assert!(!npy.exists(), "a failed dump must not leave a file");
}

/// A valid file whose tensor decodes to more f32 than memory or disk hold: `dump` used to
/// decode it whole (`memory allocation of 68719476736 bytes failed`, SIGABRT). Now it streams,
/// and refuses up front what the output's file system cannot take, with the sizes.
#[test]
fn dump_of_a_tensor_too_large_to_write_is_refused_with_its_sizes() {
    let dir = TempDir::new("cli-huge");
    let path = dir.join("huge.gguf");
    // 2^41 MXFP4 elements: 1.06 TiB of data (a hole), 8 TiB as f32, more than the free space
    // of any machine's temporary directory.
    sparse_gguf(&path, "huge", &[1 << 20, 1 << 21], GgmlType::MXFP4);
    let npy = dir.join("huge.npy");
    let out = gguf(&["dump", path.to_str().unwrap(), "huge", "-o", npy.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for needle in [
        "tensor `huge` (MXFP4, 2199023255552 elements)",
        "takes 8796093022336 B (8.00 TiB) as f32, more than the",
        "free there",
    ] {
        assert!(stderr.contains(needle), "`{needle}` missing from: {stderr}");
    }
    assert!(!npy.exists(), "a refused dump must not create its output");
}

/// Past the free-space check (a device has none to check), a write failure stops the dump with
/// what was written and what the tensor needs; no abort, and the device is not removed.
#[cfg(target_os = "linux")]
#[test]
fn dump_that_fails_writing_says_how_far_it_got() {
    let dir = TempDir::new("cli-full");
    let path = dir.join("big.gguf");
    // 2^34 Q4_0 elements: 9 GiB of data (a hole), the 64 GiB of f32 that used to abort.
    sparse_gguf(&path, "big", &[1 << 17, 1 << 17], GgmlType::Q4_0);
    let out = gguf(&["dump", path.to_str().unwrap(), "big", "-o", "/dev/full"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for needle in [
        "/dev/full: No space left on device",
        "after writing",
        "of the 68719476864 B (64.00 GiB) that tensor `big` (Q4_0, 17179869184 elements) takes as f32",
    ] {
        assert!(stderr.contains(needle), "`{needle}` missing from: {stderr}");
    }
    assert!(!stderr.contains("removed") && std::path::Path::new("/dev/full").exists(), "{stderr}");
}

/// A tensor of several of `dump`'s pieces (and a part of one) is written whole and in order.
#[test]
fn dump_streams_a_tensor_larger_than_one_piece() {
    let dir = TempDir::new("cli-stream");
    let mut w = GgufWriter::new();
    let values: Vec<f32> = (0..96 * 27_307).map(|i| (i % 1000) as f32 * 0.5 - 250.0).collect();
    w.add_quantized("wide", GgmlType::Q8_0, &[96, (values.len() / 96) as u64], &values).unwrap();
    w.add_quantized("halves", GgmlType::F16, &[values.len() as u64], &values).unwrap();
    let path = dir.join("wide.gguf");
    w.write_file(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    for tensor in ["wide", "halves"] {
        let npy = dir.join(&format!("{tensor}.npy"));
        let out = gguf(&["dump", path.to_str().unwrap(), tensor, "-o", npy.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out).1);
        let (_, got) = read_npy(&std::fs::read(&npy).unwrap());
        assert!(got == file.to_f32(tensor).unwrap(), "{tensor}: the dump differs from to_f32");
    }
}

/// `tokenize` prints the ids of a text in the file's vocabulary, with `--special` the BOS and
/// the control tokens written in the text; a file without a vocabulary, or with one it cannot
/// tokenize with, is refused naming why.
#[test]
fn tokenize_prints_the_ids_or_says_why_not() {
    let dir = TempDir::new("cli-tokenize");
    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.model", "gpt2").unwrap();
    w.add_metadata("tokenizer.ggml.pre", "llama-bpe").unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["<|bos|>", "H", "i", "Hi", "Ġ", "!", "Ġ!"]).unwrap();
    w.add_metadata("tokenizer.ggml.token_type", vec![3i32, 1, 1, 1, 1, 1, 1]).unwrap();
    w.add_metadata("tokenizer.ggml.merges", vec!["H i", "Ġ !"]).unwrap();
    w.add_metadata("tokenizer.ggml.bos_token_id", 0u32).unwrap();
    w.add_metadata("tokenizer.ggml.add_bos_token", true).unwrap();
    let vocab = dir.join("vocab.gguf");
    w.write_file(&vocab).unwrap();
    let path = vocab.to_str().unwrap();

    let out = gguf(&["tokenize", path, "Hi !"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "3 6\n");
    let out = gguf(&["tokenize", path, "<|bos|>Hi", "--special"]);
    assert_eq!(text(&out).0, "0 0 3\n", "{}", text(&out).1);

    let plain = model(&dir);
    let out = gguf(&["tokenize", plain.to_str().unwrap(), "Hi"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("tokenizer.ggml.model") && stderr.contains("missing"), "{stderr}");

    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.model", "gpt2").unwrap();
    w.add_metadata("tokenizer.ggml.pre", "bloom").unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["a"]).unwrap();
    let bloom = dir.join("bloom.gguf");
    w.write_file(&bloom).unwrap();
    let out = gguf(&["tokenize", bloom.to_str().unwrap(), "a"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("bloom.gguf") && stderr.contains("pre-tokenizer `bloom` is not supported"),
        "{stderr}"
    );

    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    let none = dir.join("none.gguf");
    w.write_file(&none).unwrap();
    let out = gguf(&["tokenize", none.to_str().unwrap(), "a"]);
    assert!(text(&out).1.contains("no vocabulary"), "{}", text(&out).1);
}
