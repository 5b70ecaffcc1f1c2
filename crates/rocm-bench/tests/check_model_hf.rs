//! `scripts/check_model_hf.py --self-test` with this build's `rocm-bench`: the half of the
//! Hugging Face parity check that needs neither torch nor a GPU. It checks the GGUF files the
//! script writes (llama.cpp's names, dims, types and metadata, the Q/K row permutation and its
//! direction), and runs `model-run --reference` (rocm-model's f64 CPU forward pass) on each of
//! them against the script's numpy model of HF's Llama.
//!
//! Skipped (with a printed reason) where `python3 -c "import gguf, numpy"` fails, except under
//! CI, where `.ci/run` installs `gguf` and its absence fails the test.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root at run time: nextest points `CARGO_MANIFEST_DIR` at the checkout when it
/// runs an archive on another host.
fn workspace_root() -> PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    crate_dir.join("../..")
}

/// This build's `rocm-bench`; from an archive, nextest names the extracted binary.
fn rocm_bench() -> PathBuf {
    ["NEXTEST_BIN_EXE_rocm-bench", "NEXTEST_BIN_EXE_rocm_bench"]
        .iter()
        .find_map(std::env::var_os)
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rocm-bench")), PathBuf::from)
}

fn python_gguf() -> Result<(), String> {
    match Command::new("python3").args(["-c", "import gguf, numpy"]).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").to_string()),
        Err(e) => Err(format!("python3: {e}")),
    }
}

#[test]
fn hf_parity_script_self_test_passes() {
    if let Err(why) = python_gguf() {
        if std::env::var_os("CI").is_some() {
            panic!("the Python `gguf` package is required under CI (pip install gguf): {why}");
        }
        eprintln!("SKIP hf_parity_script_self_test_passes: python3 cannot import gguf ({why})");
        return;
    }
    let script = workspace_root().join("scripts/check_model_hf.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--self-test")
        .arg("--bench")
        .arg(rocm_bench())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} --self-test failed:\n{report}", script.display());
    // The end-to-end half ran (it is skipped when the binary is missing).
    for file in ["F32", "F16", "BF16", "Q8_0", "F32-tied"] {
        let line = format!("ok   model-run --reference llama-{file}.gguf");
        assert!(stdout.contains(&line), "no `{line}` in:\n{report}");
    }
}
