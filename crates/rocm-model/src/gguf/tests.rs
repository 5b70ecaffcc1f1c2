//! Reader, writer and round-trip tests, and a regression test for each crash class known in
//! GGUF readers: wrapping shape products, unbounded `n_dims`, huge strings and arrays, bad
//! alignments, truncation at every length, offsets outside the file, overlapping or misaligned
//! data, duplicate names, nesting too deep.

use super::limits::{MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_NAME_BYTES, MAX_STRING_BYTES};
use super::*;

// ---------------------------------------------------------------------------------------------
// A byte-level builder for files the writer would refuse to make.

/// GGUF string encoding.
fn s(text: &str) -> Vec<u8> {
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out
}

fn u32le(v: u32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn u64le(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[derive(Clone)]
struct Raw {
    version: u32,
    counts: Option<(u64, u64)>,
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    align: u64,
    data: Vec<u8>,
}

impl Raw {
    fn new() -> Self {
        Raw {
            version: 3,
            counts: None,
            kv: vec![],
            n_kv: 0,
            infos: vec![],
            n_tensors: 0,
            align: 32,
            data: vec![],
        }
    }

    /// A metadata entry: key, type id, encoded value.
    fn kv(mut self, key: &str, ty: u32, value: &[u8]) -> Self {
        self.kv.extend(cat(&[&s(key), &u32le(ty), value]));
        self.n_kv += 1;
        self
    }

    /// A tensor info.
    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Self {
        self.infos.extend(s(name));
        self.infos.extend(u32le(dims.len() as u32));
        dims.iter().for_each(|d| self.infos.extend(u64le(*d)));
        self.infos.extend(u32le(ty));
        self.infos.extend(u64le(offset));
        self.n_tensors += 1;
        self
    }

    fn data(mut self, bytes: &[u8]) -> Self {
        self.data = bytes.to_vec();
        self
    }

    /// Header counts that differ from what follows.
    fn counts(mut self, tensors: u64, kv: u64) -> Self {
        self.counts = Some((tensors, kv));
        self
    }

    fn build(&self) -> Vec<u8> {
        let (nt, nkv) = self.counts.unwrap_or((self.n_tensors, self.n_kv));
        let mut out = cat(&[b"GGUF", &u32le(self.version), &u64le(nt), &u64le(nkv), &self.kv, &self.infos]);
        out.resize((out.len() as u64).next_multiple_of(self.align) as usize, 0);
        out.extend_from_slice(&self.data);
        out
    }

    fn parse(&self) -> Result<GgufFile> {
        GgufFile::from_bytes(self.build())
    }
}

fn err(raw: &Raw) -> GgufError {
    match raw.parse() {
        Ok(f) => panic!("parsed a bad file: {f:?}"),
        Err(e) => e,
    }
}

/// Asserts the error's message names everything in `needles`.
fn says(e: &GgufError, needles: &[&str]) {
    let text = e.to_string();
    for n in needles {
        assert!(text.contains(n), "`{n}` missing from: {text}");
    }
}

// ---------------------------------------------------------------------------------------------
// A file with every value type and every supported tensor type.

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::from("llama")),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(-1.25e-7)),
        ("t.bool.true", Value::Bool(true)),
        ("t.bool.false", Value::Bool(false)),
        ("t.string", Value::from("héllo, wörld ✓")),
        ("t.string.empty", Value::from("")),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.arr.u8", Value::from(vec![0u8, 1, 255])),
        ("t.arr.i8", Value::from(vec![-128i8, 127])),
        ("t.arr.u16", Value::from(vec![1u16, 65535])),
        ("t.arr.i16", Value::from(vec![-1i16, 2])),
        ("t.arr.u32", Value::from(vec![7u32; 5])),
        ("t.arr.i32", Value::from(vec![-7i32, 0, 7])),
        ("t.arr.f32", Value::from(vec![0.5f32, -0.0, f32::INFINITY])),
        ("t.arr.bool", Value::from(vec![true, false, true])),
        ("t.arr.string", Value::from(vec!["a", "", "ünï"])),
        ("t.arr.u64", Value::from(vec![u64::MAX, 0])),
        ("t.arr.i64", Value::from(vec![i64::MIN, i64::MAX])),
        ("t.arr.f64", Value::from(vec![1e300f64, -1e-300])),
        ("t.arr.empty", Value::Array(Array::empty(ValueType::F32))),
        (
            "t.arr.nested",
            Value::Array(Array::Array(vec![
                Array::U32(vec![1, 2]),
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::Bool(vec![true]), Array::empty(ValueType::I64)]),
                Array::empty(ValueType::Array),
            ])),
        ),
    ]
}

fn ramp(n: usize, seed: u32) -> Vec<f32> {
    // Deterministic, non-zero, mixed signs and magnitudes.
    (0..n)
        .map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            ((x >> 8) as f32 / (1 << 24) as f32 - 0.5) * 8.0
        })
        .collect()
}

fn every_type_writer(alignment: Option<u32>) -> GgufWriter {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.set_alignment(a).unwrap();
    }
    for (k, v) in every_value() {
        w.add_metadata(k, v).unwrap();
    }
    w.add_f32("f32", &[3, 5], &ramp(15, 1)).unwrap();
    w.add_quantized("f16", GgmlType::F16, &[7], &ramp(7, 2)).unwrap();
    w.add_quantized("bf16", GgmlType::BF16, &[2, 2, 2], &ramp(8, 3)).unwrap();
    w.add_quantized("q8_0", GgmlType::Q8_0, &[64, 3], &ramp(192, 4)).unwrap();
    w.add_quantized("q4_0", GgmlType::Q4_0, &[32, 2, 1, 2], &ramp(128, 5)).unwrap();
    w.add_quantized("mxfp4", GgmlType::MXFP4, &[96], &ramp(96, 6)).unwrap();
    w.add_quantized("q4_k", GgmlType::Q4_K, &[256, 2], &ramp(512, 7)).unwrap();
    w.add_quantized("q5_k", GgmlType::Q5_K, &[256], &ramp(256, 8)).unwrap();
    w.add_quantized("q6_k", GgmlType::Q6_K, &[512], &ramp(512, 9)).unwrap();
    w.add_tensor("q2_k.raw", GgmlType::Q2_K, &[256, 2], vec![0x5a; 168]).unwrap();
    w.add_tensor(
        "i32.raw",
        GgmlType::I32,
        &[3],
        [1i32, -2, 3].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>(),
    )
    .unwrap();
    w.add_f32("scalar", &[], &[42.0]).unwrap();
    w.add_f32("empty", &[4, 0], &[]).unwrap();
    w
}

#[test]
fn every_value_and_tensor_type_round_trips() {
    for alignment in [None, Some(1), Some(8), Some(64), Some(4096)] {
        let w = every_type_writer(alignment);
        let bytes = w.to_bytes();
        let file = GgufFile::from_bytes(bytes.clone()).unwrap();
        assert_eq!(file.version(), 3);
        assert_eq!(file.alignment(), alignment.unwrap_or(32));
        assert_eq!(file.metadata(), w.metadata(), "metadata, alignment {alignment:?}");
        for (key, value) in every_value() {
            assert_eq!(file.metadata().get(key), Some(&value), "{key}");
        }
        assert_eq!(file.data_offset() % u64::from(file.alignment()), 0);
        let names: Vec<_> = file.tensors().iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            [
                "f32", "f16", "bf16", "q8_0", "q4_0", "mxfp4", "q4_k", "q5_k", "q6_k", "q2_k.raw", "i32.raw",
                "scalar", "empty"
            ]
        );
        for t in file.tensors() {
            assert_eq!(t.data_offset() % u64::from(file.alignment()), 0, "{}", t.name());
            assert_eq!(file.bytes(t.name()).unwrap().len() as u64, t.n_bytes());
        }
        assert_eq!(file.tensor("q4_0").unwrap().dims(), [32, 2, 1, 2]);
        assert_eq!(file.tensor("q4_0").unwrap().row_major_shape(), [2, 1, 2, 32]);
        assert_eq!(file.tensor("q4_0").unwrap().n_bytes(), 4 * 18);
        assert_eq!(file.tensor("mxfp4").unwrap().n_bytes(), 3 * 17);
        assert_eq!(file.tensor("q4_k").unwrap().n_bytes(), 2 * 144);
        assert_eq!(file.bytes("q2_k.raw").unwrap(), vec![0x5a; 168]);
        assert_eq!(file.to_f32("f32").unwrap(), ramp(15, 1));
        assert_eq!(file.to_f32("scalar").unwrap(), [42.0]);
        assert_eq!(file.to_f32("empty").unwrap(), Vec::<f32>::new());
        // Writing what was read gives the same bytes: nothing is lost or reordered.
        assert_eq!(GgufWriter::from_file(&file).unwrap().to_bytes(), bytes, "alignment {alignment:?}");
    }
}

#[test]
fn plain_types_decode_exactly_and_block_types_closely() {
    let file = GgufFile::from_bytes(every_type_writer(None).to_bytes()).unwrap();
    let half: Vec<f32> = ramp(7, 2).iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
    assert_eq!(file.to_f32("f16").unwrap(), half);
    let bf: Vec<f32> = ramp(8, 3).iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect();
    assert_eq!(file.to_f32("bf16").unwrap(), bf);
    // Values in [-4, 4): q8_0 keeps ~1/127 of the block's max, q4_0 ~1/8, mxfp4 ~1/4 (E2M1).
    // The k-quants err by at most half a sub-block step (a range of 8 over 15, 31 or 2 x 31
    // steps) plus half a unit of the super-block scale: 0.27, 0.13, 0.065, rounded up.
    let k_quants = [("q4_k", 7, 512, 0.3), ("q5_k", 8, 256, 0.15), ("q6_k", 9, 512, 0.07)];
    let blocks = [("q8_0", 4, 192, 0.04), ("q4_0", 5, 128, 0.6), ("mxfp4", 6, 96, 1.1)];
    for (name, seed, n, tol) in blocks.into_iter().chain(k_quants) {
        let got = file.to_f32(name).unwrap();
        let want = ramp(n, seed);
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst <= tol, "{name}: max error {worst} > {tol}");
        assert!(got.iter().any(|&v| v != 0.0), "{name} decoded to zeros");
    }
}

#[test]
fn chunked_decoding_gives_the_whole_decoding_in_bounded_pieces() {
    let file = GgufFile::from_bytes(every_type_writer(None).to_bytes()).unwrap();
    for name in ["f32", "f16", "bf16", "q8_0", "q4_0", "mxfp4", "q4_k", "q5_k", "q6_k", "scalar", "empty"] {
        let whole = file.to_f32(name).unwrap();
        let block = file.tensor(name).unwrap().ggml_type().block_size() as usize;
        for chunk in [0, 1, 5, 31, 32, 33, 64, 100, usize::MAX] {
            let mut got = Vec::new();
            file.to_f32_chunked(name, chunk, |piece| {
                assert!(!piece.is_empty() && piece.len() <= chunk.max(block), "{name}: {}", piece.len());
                assert_eq!(piece.len() % block, 0, "{name}: a piece of part of a block");
                got.extend_from_slice(piece);
                Ok::<_, GgufError>(())
            })
            .unwrap();
            assert_eq!(got, whole, "{name}, pieces of {chunk}");
        }
    }
    // The sink's error stops the walk and comes back; so does a type that cannot be decoded.
    let mut calls = 0;
    let e = file
        .to_f32_chunked("q8_0", 32, |_| {
            calls += 1;
            Err(GgufError::NoSuchTensor { name: "stop".into() })
        })
        .unwrap_err();
    assert_eq!((calls, e.to_string()), (1, "no tensor named `stop`".to_string()));
    let e = file.to_f32_chunked("q2_k.raw", 32, |_| -> Result<()> { unreachable!() }).unwrap_err();
    says(&e, &["unsupported type 10 (Q2_K)", "q2_k.raw"]);
}

/// Each row decodes to its slice of the whole decoding; a row past the end or a buffer of
/// another width is refused, naming the tensor.
#[test]
fn rows_decode_to_their_slice_of_the_tensor() {
    let file = GgufFile::from_bytes(every_type_writer(None).to_bytes()).unwrap();
    for name in ["f32", "f16", "bf16", "q8_0", "q4_0", "mxfp4", "q4_k", "q5_k", "q6_k"] {
        let whole = file.to_f32(name).unwrap();
        let width = file.tensor(name).unwrap().dims()[0] as usize;
        let mut row = vec![f32::NAN; width];
        for r in 0..whole.len() / width {
            file.row_to_f32(name, r as u64, &mut row).unwrap();
            assert_eq!(row, whole[r * width..(r + 1) * width], "{name} row {r}");
        }
        let rows = (whole.len() / width) as u64;
        says(&file.row_to_f32(name, rows, &mut row).unwrap_err(), &[name, &format!("row {rows} asked for")]);
        says(&file.row_to_f32(name, 0, &mut row[1..]).unwrap_err(), &[name, "the buffer given holds"]);
    }
    says(&file.row_to_f32("q2_k.raw", 0, &mut [0.0; 256]).unwrap_err(), &["unsupported type 10 (Q2_K)"]);
}

/// A tensor whose f32 values cannot be allocated is an error with its sizes, not an abort
/// (`vec![0.0; n]` aborts the process when the allocation fails). Built as an info directly:
/// a file backing 2^61 elements could not be mapped.
#[test]
fn a_tensor_too_large_for_host_memory_is_an_error_not_an_abort() {
    let info = TensorInfo {
        name: "huge".into(),
        ggml_type: GgmlType::F32,
        dims: vec![1 << 31, 1 << 30],
        n_elements: 1 << 61,
        n_bytes: 1 << 63,
        data_offset: 0,
        file_offset: 0,
        info_offset: 0,
    };
    let e = super::dequant::decode(&info, &[]).unwrap_err();
    assert!(matches!(e, GgufError::HostAllocation { elements: 0x2000_0000_0000_0000, .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "tensor `huge`: its 2305843009213693952 elements as f32 take 9223372036854775808 B \
         (8388608.00 TiB), more host memory than could be allocated"
    );
    // The same for the wider buffers the model's loaders reserve.
    says(
        &super::dequant::host_vec::<f64>("w", 1 << 60, "f64").unwrap_err(),
        &["`w`", "1152921504606846976 elements as f64"],
    );
}

#[test]
fn unsupported_types_are_named_when_decoding() {
    let file = GgufFile::from_bytes(every_type_writer(None).to_bytes()).unwrap();
    let e = file.to_f32("q2_k.raw").unwrap_err();
    assert!(matches!(e, GgufError::UnsupportedType { type_id: 10, .. }), "{e}");
    says(&e, &["unsupported type 10 (Q2_K)", "q2_k.raw"]);
    says(&file.to_f32("i32.raw").unwrap_err(), &["unsupported type 26 (I32)"]);
    says(&file.to_f32("nope").unwrap_err(), &["no tensor named `nope`"]);
    for &t in GgmlType::ALL {
        let decodable =
            matches!(t.name(), "F32" | "F16" | "BF16" | "Q8_0" | "Q4_0" | "MXFP4" | "Q4_K" | "Q5_K" | "Q6_K");
        assert_eq!(t.is_decodable(), decodable, "{t}");
    }
}

#[test]
fn version_2_files_are_read() {
    let mut w = every_type_writer(None);
    w.set_version(2).unwrap();
    let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(file.version(), 2);
    assert_eq!(file.tensors().len(), 13);
    assert!(GgufWriter::new().set_version(1).is_err());
}

#[test]
fn an_empty_file_has_no_data_section_to_check() {
    let bytes = GgufWriter::new().to_bytes();
    assert_eq!(bytes.len() as u64, HEADER_BYTES.next_multiple_of(32));
    let file = GgufFile::from_bytes(bytes).unwrap();
    assert!(file.tensors().is_empty() && file.metadata().is_empty());
    // Without the padding before the (empty) data section, too.
    GgufFile::from_bytes(Raw::new().build()[..24].to_vec()).unwrap();
}

#[test]
fn open_maps_a_file_and_reports_io_errors_with_the_path() {
    let dir = std::env::temp_dir().join(format!("rocm-model-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    every_type_writer(Some(64)).write_file(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.path(), Some(path.as_path()));
    assert_eq!(file.to_f32("f32").unwrap(), ramp(15, 1));
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(GgufFile::open(&empty).unwrap_err(), GgufError::Truncated { .. }));
    let e = GgufFile::open(dir.join("missing.gguf")).unwrap_err();
    says(&e, &["missing.gguf"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_directory_or_device_is_refused_as_not_a_file() {
    let dir = std::env::temp_dir().join(format!("rocm-model-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = GgufFile::open(&dir).unwrap_err();
    assert!(matches!(e, GgufError::NotAFile { kind: "directory", .. }), "{e}");
    assert_eq!(e.to_string(), format!("{}: is a directory, not a GGUF file", dir.display()));
    std::fs::remove_dir_all(&dir).unwrap();
    #[cfg(unix)]
    says(&GgufFile::open("/dev/null").unwrap_err(), &["/dev/null: is a character device, not a GGUF file"]);
}

// ---------------------------------------------------------------------------------------------
// Writer refusals.

#[test]
fn the_writer_refuses_what_the_reader_would() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", 1u8).unwrap();
    assert!(matches!(w.add_metadata("k", 2u8), Err(WriteError::DuplicateKey { .. })));
    assert!(w.add_metadata(ALIGNMENT_KEY, 64u64).is_err(), "alignment must be uint32");
    assert!(w.add_metadata(ALIGNMENT_KEY, 48u32).is_err(), "alignment must be a power of two");
    assert!(w.set_alignment(0).is_err());
    assert!(w.set_alignment(1 << 21).is_err());
    assert!(w.add_metadata("x".repeat(MAX_NAME_BYTES as usize + 1), 1u8).is_err());
    let mut deep = Array::U8(vec![1]);
    for _ in 0..MAX_ARRAY_DEPTH {
        deep = Array::Array(vec![deep]);
    }
    assert!(w.add_metadata("deep", Value::Array(deep)).is_err());
    w.add_f32("t", &[2], &[1.0, 2.0]).unwrap();
    assert!(matches!(w.add_f32("t", &[2], &[1.0, 2.0]), Err(WriteError::DuplicateTensor { .. })));
    assert!(w.add_f32("u", &[3], &[1.0, 2.0]).is_err(), "value count must match the shape");
    assert!(w.add_tensor("v", GgmlType::F32, &[2], vec![0u8; 7]).is_err(), "byte count must match");
    assert!(w.add_quantized("q", GgmlType::Q8_0, &[31], &[0.0; 31]).is_err(), "whole blocks only");
    assert!(w.add_quantized("k", GgmlType::Q4_K, &[255], &[0.0; 255]).is_err(), "whole super-blocks only");
    let e = w.add_quantized("k", GgmlType::Q2_K, &[256], &[0.0; 256]).unwrap_err();
    assert!(e.to_string().contains("cannot encode type 10 (Q2_K)"), "{e}");
    assert!(w.add_f32("big", &[1, 1, 1, 1, 1], &[0.0]).is_err(), "five dimensions");
    // What was accepted still makes a valid file.
    GgufFile::from_bytes(w.to_bytes()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Header.

#[test]
fn magic_version_and_endianness_are_checked() {
    let e = GgufFile::from_bytes(b"GGML\x03\0\0\0".to_vec()).unwrap_err();
    assert!(matches!(e, GgufError::BadMagic { .. }), "{e}");
    let mut be = b"GGUF".to_vec();
    be.extend_from_slice(&3u32.to_be_bytes());
    be.extend_from_slice(&0u64.to_be_bytes());
    be.extend_from_slice(&0u64.to_be_bytes());
    let e = GgufFile::from_bytes(be).unwrap_err();
    assert!(matches!(e, GgufError::BigEndian { swapped: 3, .. }), "{e}");
    says(&e, &["big-endian", "only little-endian"]);
    for version in [0, 1, 4, 0x0102_0304] {
        let mut raw = Raw::new();
        raw.version = version;
        let e = err(&raw);
        assert!(matches!(e, GgufError::UnsupportedVersion { .. }), "{version}: {e}");
    }
}

#[test]
fn counts_are_checked_against_the_file_size_before_allocating() {
    for (tensors, kv) in
        [(u64::MAX, 0), (0, u64::MAX), (1 << 40, 1 << 40), (1000, 0), (0, 100), (u64::MAX / 24 + 1, 1)]
    {
        let e = err(&Raw::new().counts(tensors, kv));
        assert!(matches!(e, GgufError::CountTooLarge { .. }), "{tensors}/{kv}: {e}");
    }
    // Claims one more entry than present: the file ends where the third would start.
    let e = err(&Raw::new().kv("a", 4, &u32le(1)).kv("b", 4, &u32le(1)).counts(0, 3));
    assert!(matches!(e, GgufError::CountTooLarge { .. } | GgufError::Truncated { .. }), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Strings and arrays.

#[test]
fn huge_string_lengths_are_refused_without_allocating() {
    // Key lengths past the name limit.
    let e =
        GgufFile::from_bytes(cat(&[b"GGUF", &u32le(3), &u64le(0), &u64le(1), &u64le(u64::MAX), &[0; 32]]))
            .unwrap_err();
    assert!(matches!(e, GgufError::StringTooLong { offset: 24, .. }), "{e}");
    says(&e, &["metadata key #0", "byte 24"]);
    // A key within the limit that the file does not hold.
    let e = GgufFile::from_bytes(cat(&[b"GGUF", &u32le(3), &u64le(0), &u64le(1), &u64le(1000), &[b'k'; 20]]))
        .unwrap_err();
    assert!(matches!(e, GgufError::Truncated { needed: 1000, .. }), "{e}");
    // String values.
    for len in [u64::MAX, MAX_STRING_BYTES + 1, 1 << 40] {
        let e = err(&Raw::new().kv("big", 8, &u64le(len)));
        assert!(matches!(e, GgufError::StringTooLong { .. }), "{len}: {e}");
        says(&e, &["metadata key `big`"]);
    }
    let e = err(&Raw::new().kv("big", 8, &cat(&[&u64le(MAX_STRING_BYTES), b"abc"])));
    assert!(matches!(e, GgufError::Truncated { .. }), "{e}");
    // Tensor names.
    let e = err(&Raw::new().tensor(&"n".repeat(MAX_NAME_BYTES as usize + 1), &[1], 0, 0));
    assert!(matches!(e, GgufError::StringTooLong { .. }), "{e}");
    says(&e, &["tensor #0"]);
}

#[test]
fn huge_array_lengths_are_refused_without_allocating() {
    for (elem, len) in [(0u32, u64::MAX), (10, MAX_ARRAY_LEN + 1), (8, 1 << 62)] {
        let e = err(&Raw::new().kv("arr", 9, &cat(&[&u32le(elem), &u64le(len)])));
        assert!(matches!(e, GgufError::ArrayTooLong { .. }), "{elem}/{len}: {e}");
        says(&e, &["metadata key `arr`"]);
    }
    // Within the limit, but the file cannot hold them: refused before reserving room.
    for elem in [0u32, 6, 7, 8, 9, 10, 12] {
        let e = err(&Raw::new().kv("arr", 9, &cat(&[&u32le(elem), &u64le(MAX_ARRAY_LEN), &[0; 64]])));
        assert!(matches!(e, GgufError::Truncated { .. }), "type {elem}: {e}");
    }
}

#[test]
fn nesting_is_bounded_without_recursing_past_the_limit() {
    /// An array of arrays `levels` deep around one u8.
    fn nested(levels: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for _ in 1..levels {
            v.extend(cat(&[&u32le(9), &u64le(1)]));
        }
        v.extend(cat(&[&u32le(0), &u64le(1), &[7]]));
        v
    }
    let file = Raw::new().kv("deep", 9, &nested(MAX_ARRAY_DEPTH)).parse().unwrap();
    let Some(Value::Array(a)) = file.metadata().get("deep") else { panic!() };
    assert_eq!(a.depth(), MAX_ARRAY_DEPTH);
    let e = err(&Raw::new().kv("deep", 9, &nested(MAX_ARRAY_DEPTH + 1)));
    assert!(matches!(e, GgufError::NestingTooDeep { .. }), "{e}");
    says(&e, &["metadata key `deep`"]);
    // A hundred thousand levels: refused at the limit, no stack overflow.
    let e = err(&Raw::new().kv("deep", 9, &nested(100_000)));
    assert!(matches!(e, GgufError::NestingTooDeep { .. }), "{e}");
}

#[test]
fn bad_value_types_bools_and_utf8_are_refused() {
    let e = err(&Raw::new().kv("k", 13, &[0; 16]));
    assert!(matches!(e, GgufError::UnknownValueType { type_id: 13, .. }), "{e}");
    let e = err(&Raw::new().kv("k", 9, &cat(&[&u32le(99), &u64le(1), &[0; 16]])));
    assert!(matches!(e, GgufError::UnknownValueType { type_id: 99, .. }), "{e}");
    let e = err(&Raw::new().kv("flag", 7, &[2]));
    assert!(matches!(e, GgufError::InvalidBool { value: 2, .. }), "{e}");
    let e = err(&Raw::new().kv("flags", 9, &cat(&[&u32le(7), &u64le(3), &[1, 0, 9]])));
    assert!(matches!(e, GgufError::InvalidBool { value: 9, .. }), "{e}");
    let bad_key = cat(&[&u64le(2), &[0xff, 0xfe], &u32le(0), &[1]]);
    let e = GgufFile::from_bytes(cat(&[b"GGUF", &u32le(3), &u64le(0), &u64le(1), &bad_key])).unwrap_err();
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e}");
    let e = err(&Raw::new().kv("s", 8, &cat(&[&u64le(1), &[0x80]])));
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e}");
}

#[test]
fn duplicate_keys_and_tensor_names_are_refused() {
    let raw = Raw::new().kv("a", 4, &u32le(1)).kv("b", 4, &u32le(1)).kv("a", 4, &u32le(2));
    let e = err(&raw);
    // Header (24) + two 17-byte entries ("a"/"b": 8 + 1 + 4 + 4).
    assert!(matches!(&e, GgufError::DuplicateKey { key, offset: 58 } if key == "a"), "{e}");
    let raw = Raw::new().tensor("w", &[8], 0, 0).tensor("w", &[8], 0, 32).data(&[0; 64]);
    let e = err(&raw);
    assert!(matches!(&e, GgufError::DuplicateTensor { name, .. } if name == "w"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Alignment.

#[test]
fn bad_alignments_are_refused() {
    for a in [0u32, 3, 48, 1 << 21, u32::MAX, 1 << 31] {
        let e = err(&Raw::new().kv(ALIGNMENT_KEY, 4, &u32le(a)));
        assert!(matches!(e, GgufError::InvalidAlignment { .. }), "{a}: {e}");
        says(&e, &["general.alignment", &a.to_string()]);
    }
    let e = err(&Raw::new().kv(ALIGNMENT_KEY, 10, &u64le(32)));
    assert!(matches!(e, GgufError::AlignmentType { found: ValueType::U64 }), "{e}");
    let e = err(&Raw::new().kv(ALIGNMENT_KEY, 8, &s("32")));
    assert!(matches!(e, GgufError::AlignmentType { found: ValueType::String }), "{e}");
    // The largest accepted alignment works end to end.
    let mut w = GgufWriter::new();
    w.set_alignment(1 << 20).unwrap();
    w.add_f32("a", &[1], &[1.0]).unwrap();
    w.add_f32("b", &[1], &[2.0]).unwrap();
    let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(file.tensor("b").unwrap().data_offset(), 1 << 20);
}

// ---------------------------------------------------------------------------------------------
// Tensor infos.

#[test]
fn dimension_counts_past_four_are_refused() {
    for n_dims in [5u32, 64, u32::MAX] {
        let mut info = cat(&[&s("t"), &u32le(n_dims)]);
        info.extend(vec![1u8; 64]);
        let mut raw = Raw::new();
        raw.infos = info;
        raw.n_tensors = 1;
        let e = err(&raw);
        assert!(matches!(e, GgufError::TooManyDims { .. }), "{n_dims}: {e}");
        says(&e, &["tensor `t`", "byte 24"]);
    }
    // Zero dimensions is a one-element tensor.
    let file = Raw::new().tensor("s", &[], 0, 0).data(&1.5f32.to_le_bytes()).parse().unwrap();
    assert_eq!(file.to_f32("s").unwrap(), [1.5]);
}

#[test]
fn shape_products_that_would_wrap_are_refused() {
    let cases: &[(&[u64], u32)] = &[
        (&[1 << 32, 1 << 32], 0),                   // 2^64: wraps to 0
        (&[1 << 16, 1 << 16, 1 << 16, 1 << 16], 0), // the same over four dims
        (&[3, 12_297_829_382_473_034_411], 0),      // wraps to exactly 1 element
        (&[u64::MAX], 1),                           // past i64
        (&[1 << 62], 0),                            // 2^62 elements, 2^64 bytes
        (&[32 << 58, 2], 8),                        // Q8_0: element count past i64
        (&[33], 2),                                 // Q4_0: a partial block
    ];
    for &(dims, ty) in cases {
        let e = err(&Raw::new().tensor("w", dims, ty, 0).data(&[0; 64]));
        assert!(matches!(e, GgufError::BadShape { .. }), "{dims:?}: {e}");
        says(&e, &["tensor `w`"]);
    }
}

#[test]
fn unknown_and_removed_tensor_types_are_named() {
    for ty in [42u32, 1000, u32::MAX] {
        let e = err(&Raw::new().tensor("w", &[32], ty, 0).data(&[0; 64]));
        assert!(matches!(e, GgufError::UnknownTensorType { .. }), "{ty}: {e}");
        says(&e, &["tensor `w`", &format!("unknown ggml type {ty}")]);
    }
    let e = err(&Raw::new().tensor("w", &[32], 31, 0).data(&[0; 64]));
    says(&e, &["type 31 (Q4_0_4_4)", "removed"]);
    // Types known but not decodable still load (inspect and upload work on their bytes).
    let file = Raw::new().tensor("k", &[256], 10, 0).data(&[0; 84]).parse().unwrap();
    assert_eq!(file.tensor("k").unwrap().ggml_type(), GgmlType::Q2_K);
}

#[test]
fn offsets_outside_the_file_are_refused() {
    for offset in [32u64, 1 << 40, 1 << 63, u64::MAX - 31] {
        let e = err(&Raw::new().tensor("w", &[8], 0, offset).data(&[0; 32]));
        assert!(matches!(e, GgufError::TensorOutOfBounds { .. }), "{offset}: {e}");
        says(&e, &["tensor `w`"]);
    }
    // One byte short.
    let e = err(&Raw::new().tensor("w", &[8], 0, 0).data(&[0; 31]));
    assert!(matches!(e, GgufError::TensorOutOfBounds { size: 32, .. }), "{e}");
}

#[test]
fn misaligned_and_overlapping_tensors_are_refused() {
    let e = err(&Raw::new().tensor("w", &[2], 0, 8).data(&[0; 64]));
    assert!(matches!(e, GgufError::MisalignedTensor { data_offset: 8, alignment: 32, .. }), "{e}");
    let raw = Raw::new().tensor("a", &[16], 0, 0).tensor("b", &[8], 0, 32).data(&[0; 96]);
    let e = err(&raw);
    assert!(
        matches!(&e, GgufError::OverlappingTensors { first, second, .. } if first == "a" && second == "b")
    );
    let raw = Raw::new().tensor("a", &[8], 0, 32).tensor("b", &[8], 0, 32).data(&[0; 96]);
    assert!(matches!(err(&raw), GgufError::OverlappingTensors { .. }));
    // Out of order but apart is fine, and each name finds its own bytes.
    let mut data = vec![1u8; 32];
    data.extend(vec![2u8; 32]);
    let file =
        Raw::new().tensor("second", &[8], 0, 32).tensor("first", &[8], 0, 0).data(&data).parse().unwrap();
    assert_eq!(file.bytes("first").unwrap(), [1u8; 32]);
    assert_eq!(file.bytes("second").unwrap(), [2u8; 32]);
    // Empty tensors share no bytes with anyone.
    Raw::new().tensor("a", &[8], 0, 0).tensor("e", &[0], 0, 0).data(&[0; 32]).parse().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Truncation.

#[test]
fn every_truncation_of_a_valid_file_is_refused() {
    let bytes = every_type_writer(None).to_bytes();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    // The writer pads after the last tensor; the file is whole once the data ends.
    let data_end = file.tensors().iter().map(|t| t.file_offset() + t.n_bytes()).max().unwrap() as usize;
    for len in 0..bytes.len() {
        let result = GgufFile::from_bytes(bytes[..len].to_vec());
        if len < data_end {
            assert!(result.is_err(), "a file cut to {len} of {} bytes parsed", bytes.len());
        } else {
            result.unwrap();
        }
    }
}

#[test]
fn errors_name_the_key_or_tensor_and_the_byte() {
    let bytes = every_type_writer(None).to_bytes();
    let find = |needle: &[u8]| bytes.windows(needle.len()).position(|w| w == needle).unwrap();
    // The bool of `t.bool.true` set to 5: its byte follows the key and the u32 type.
    let at = find(b"t.bool.true") + b"t.bool.true".len() + 4;
    let mut bad = bytes.clone();
    bad[at] = 5;
    let e = GgufFile::from_bytes(bad).unwrap_err();
    assert!(matches!(e, GgufError::InvalidBool { offset, value: 5, .. } if offset == at as u64), "{e}");
    says(&e, &["metadata key `t.bool.true`", &format!("byte {at}")]);
    // The type of tensor `q8_0` set to 99: the u32 after its name, n_dims and two dims.
    let info = find(b"\x04\0\0\0\0\0\0\0q8_0");
    let mut bad = bytes.clone();
    bad[info + 12 + 4 + 16] = 99;
    let e = GgufFile::from_bytes(bad).unwrap_err();
    says(&e, &["tensor `q8_0`", &format!("byte {info}"), "unknown ggml type 99"]);
}
