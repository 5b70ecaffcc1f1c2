//! Helpers shared by rocm-model's integration tests: scratch directories, the Python `gguf`
//! package, and a canonical text form of a GGUF file that `tests/gguf_interop.py` prints too.

#![allow(dead_code)] // each test binary uses its own part of this

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use rocm_model::{Array, GgmlType, GgufFile, Value};

/// This crate's directory at run time. Tests run from a nextest archive on another host, where
/// the build's path (`env!("CARGO_MANIFEST_DIR")`) does not exist; nextest then sets
/// `CARGO_MANIFEST_DIR` to the remapped checkout.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rocm-model-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The interop script.
pub fn script() -> PathBuf {
    manifest_dir().join("tests/gguf_interop.py")
}

/// Whether `python3` can import `gguf` (and numpy, which it needs). When it cannot, prints a
/// SKIP line and returns false, except under CI (`CI` set), where the package is installed by
/// `.ci/run` and its absence fails the test: CI must not pass by skipping.
pub fn python_gguf(test: &str) -> bool {
    python_has(test, "gguf, numpy", "gguf")
}

/// Whether `python3` can `import {modules}`; otherwise as [`python_gguf`] (`pip` names the
/// package in the messages).
pub fn python_has(test: &str, modules: &str, pip: &str) -> bool {
    let probe = Command::new("python3").args(["-c", &format!("import {modules}")]).output();
    let why = match probe {
        Ok(out) if out.status.success() => return true,
        Ok(out) => String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").to_string(),
        Err(e) => format!("python3: {e}"),
    };
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{test}: the Python `{pip}` package is required under CI (pip install {pip}): {why}");
    }
    eprintln!("SKIP {test}: python3 cannot import `{modules}` ({why}); pip install {pip} to run it");
    false
}

/// Runs the interop script; returns its stdout, failing the test with its stderr otherwise.
pub fn run_script(mode: &str, path: &Path) -> String {
    run_script_with(mode, &[path])
}

/// [`run_script`] with several path arguments.
pub fn run_script_with(mode: &str, paths: &[&Path]) -> String {
    let out = Command::new("python3").arg(script()).arg(mode).args(paths).output().unwrap();
    let shown: Vec<_> = paths.iter().map(|p| p.display().to_string()).collect();
    assert!(
        out.status.success(),
        "gguf_interop.py {mode} {} failed:\n{}",
        shown.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The canonical text of a value (see the script's docstring).
pub fn canon(v: &Value) -> String {
    match v {
        Value::U8(x) => format!("u8:{x}"),
        Value::I8(x) => format!("i8:{x}"),
        Value::U16(x) => format!("u16:{x}"),
        Value::I16(x) => format!("i16:{x}"),
        Value::U32(x) => format!("u32:{x}"),
        Value::I32(x) => format!("i32:{x}"),
        Value::F32(x) => format!("f32:{}", hex(&x.to_le_bytes())),
        Value::Bool(x) => format!("bool:{}", u8::from(*x)),
        Value::String(s) => format!("str:{}", hex(s.as_bytes())),
        Value::Array(a) => canon_array(a),
        Value::U64(x) => format!("u64:{x}"),
        Value::I64(x) => format!("i64:{x}"),
        Value::F64(x) => format!("f64:{}", hex(&x.to_le_bytes())),
    }
}

fn canon_array(a: &Array) -> String {
    const NAMES: [&str; 13] =
        ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"];
    let items: Vec<String> = (0..a.len()).map(|i| canon(&a.get(i).unwrap())).collect();
    format!("arr:{}[{}]", NAMES[a.element_type().id() as usize], items.join(","))
}

/// The canonical text of a whole file as our reader sees it: metadata in file order, then
/// each tensor with its bytes and, for decodable types, its f32 decoding.
pub fn canon_file(file: &GgufFile) -> Vec<String> {
    let mut lines: Vec<String> =
        file.metadata().iter().map(|(k, v)| format!("kv {k} {}", canon(v))).collect();
    for t in file.tensors() {
        let dims: Vec<String> = t.dims().iter().map(u64::to_string).collect();
        lines.push(format!(
            "tensor {} {} {} {} {}",
            t.name(),
            t.ggml_type().id(),
            dims.join(","),
            t.data_offset(),
            hex(file.tensor_bytes(t))
        ));
        if t.ggml_type().is_decodable() {
            let values = file.to_f32(t.name()).unwrap();
            // -0 as +0: ggml decodes MXFP4's E2M1 code 0b1000 as +0, the OCP spec as -0.
            let bytes: Vec<u8> =
                values.iter().flat_map(|&v| if v == 0.0 { 0f32 } else { v }.to_le_bytes()).collect();
            lines.push(format!("f32 {} {}", t.name(), hex(&bytes)));
        }
    }
    lines
}

/// Compares two canonical listings line by line, reporting the first difference readably.
pub fn assert_same_listing(ours: &[String], theirs: &[String], what: &str) {
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        if a != b {
            let cut = |s: &str| s.chars().take(300).collect::<String>();
            panic!("{what}: line {i} differs\n  ours:   {}\n  theirs: {}", cut(a), cut(b));
        }
    }
    assert_eq!(ours.len(), theirs.len(), "{what}: line counts differ");
}

/// A GGUF file with one `ty` tensor `name` of `dims` whose data is a hole: the file is extended
/// with `File::set_len` to hold it (sparse: it takes no disk space), so the reader accepts it.
pub fn sparse_gguf(path: &Path, name: &str, dims: &[u64], ty: GgmlType) {
    let string = |s: &str| [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat();
    let mut bytes = [&b"GGUF"[..], &3u32.to_le_bytes(), &1u64.to_le_bytes(), &0u64.to_le_bytes()].concat();
    bytes.extend(string(name));
    bytes.extend((dims.len() as u32).to_le_bytes());
    dims.iter().for_each(|d| bytes.extend(d.to_le_bytes()));
    bytes.extend(ty.id().to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.resize(bytes.len().next_multiple_of(32), 0);
    let n: u64 = dims.iter().product();
    let data = n / ty.block_size() * ty.type_size();
    let file = std::fs::File::create(path).unwrap();
    std::io::Write::write_all(&mut &file, &bytes).unwrap();
    file.set_len(bytes.len() as u64 + data).unwrap();
}
