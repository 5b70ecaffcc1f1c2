//! The CPU emulation of AMD kernels (`tests/amd_emu/`, the emulator in `simt.h` there):
//! `run.sh quick <suite> <target>`, one test per suite and target. Without AMD hardware this is
//! the only run of the MFMA flash kernel, and of every emulated kernel's AMD code path at
//! 32-lane wavefronts (`flash.cpp`: flash attention; `decode.cpp`: RoPE, the KV-cache writes,
//! RMSNorm and SwiGLU; `quant.cpp` and `mxfp.cpp`: the portable matrix-vector kernels of ggml's
//! formats and of MXFP4 / MXFP6, which AMD GPUs run for decode; `dequant.cpp`: the
//! dequantisation kernel, which prefill runs before the GEMM; `gemm.cpp`: the portable GEMM,
//! which runs where rocBLAS cannot be loaded; `tiled.cpp`: the MXFP4 matrix-vector kernel over
//! the tiled layout). The `mma` and `qmvm` suites run NVIDIA's matrix-core matrix-vector kernels
//! (`mxfp.hip`'s `rf_*_matvec_mma_*`, `quant_matvec_mma.hip`'s `rf_qmvm_*`), and `tiled` its
//! matrix-core entries, on the emulator's `sm80` target, whose `mma.sync`, `cp.async` and warp
//! primitives `emu_mma_sync.h` emulates: a check of those kernels on a machine without a GPU,
//! not a replacement for the GPU suite.
//!
//! It needs a clang C++ compiler on the machine (run.sh takes `$CXX`, `clang++` or the newest
//! `clang++-NN` on PATH; CI gets clang with the `hipcc` package). Without one these tests fail,
//! saying so: they never pass by skipping.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// `crates/rocm-kernels`: at run time when the runner says (nextest, also for an archive run
/// elsewhere with `--workspace-remap`), else where it was built.
fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.join("tests/amd_emu/run.sh").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// Where the emulator binaries go: cargo's scratch folder for integration tests, or the system
/// temporary folder when that is not on this machine (an archived suite).
fn out_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let base = if tmp.is_dir() { tmp } else { std::env::temp_dir() };
    base.join("amd_emu")
}

fn emulate(suite: &str, target: &str) {
    run(false, &[suite], target);
}

/// Every suite on `target` built with ThreadSanitizer (`run.sh race`): a data race between two
/// lanes of a block fails the run.
fn emulate_races(target: &str) {
    run(true, &SUITES, target);
}

/// Every suite of `run.sh` that runs on the AMD targets.
const SUITES: [&str; 7] = ["flash", "decode", "quant", "dequant", "mxfp", "gemm", "tiled"];

/// The suites of NVIDIA's matrix-core kernels, on `run.sh`'s `sm80` target only.
const SM80_SUITES: [&str; 3] = ["mma", "qmvm", "tiled"];

/// Runs `run.sh quick [race] <suites> <target>`, then checks that it succeeded and printed each
/// suite's summary with checks run and none failed.
fn run(race: bool, suites: &[&str], target: &str) {
    let mut args = vec!["quick"];
    if race {
        args.push("race");
    }
    args.extend(suites);
    args.push(target);
    let script = package_dir().join("tests/amd_emu/run.sh");
    let started = Instant::now();
    let output = Command::new("sh")
        .arg(&script)
        .args(&args)
        .env("AMD_EMU_OUT", out_dir())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `sh {}`: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Captured: shown for a failure (and with --no-capture).
    println!("{stdout}");
    eprintln!("{stderr}");
    let command = args.join(" ");
    println!("{command}: {:.1} s", started.elapsed().as_secs_f64());
    assert!(
        output.status.success(),
        "`sh {} {command}` failed ({}); its output is above. Last lines of stderr:\n{}",
        script.display(),
        output.status,
        stderr.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    // The emulator's summaries: each suite ran checks and none failed (not merely a zero exit
    // status).
    for suite in suites {
        let summary = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{target} {suite} (")))
            .unwrap_or_else(|| panic!("no `{target} {suite} (...)` summary line in the output above"));
        assert!(summary.contains(" 0 failures") && !summary.contains(": 0 checks"), "{summary}");
    }
}

#[test]
fn emulated_flash_mfma_gfx908() {
    emulate("flash", "gfx908");
}

#[test]
fn emulated_flash_mfma_gfx90a() {
    emulate("flash", "gfx90a");
}

#[test]
fn emulated_flash_mfma_gfx942() {
    emulate("flash", "gfx942");
}

#[test]
fn emulated_flash_mfma_gfx950() {
    emulate("flash", "gfx950");
}

#[test]
fn emulated_flash_portable_wave32_and_wave64_gfx1100() {
    emulate("flash", "gfx1100");
}

#[test]
fn emulated_decode_kernels_gfx942() {
    emulate("decode", "gfx942");
}

#[test]
fn emulated_decode_kernels_gfx1100() {
    emulate("decode", "gfx1100");
}

#[test]
fn emulated_quant_matvec_gfx942() {
    emulate("quant", "gfx942");
}

#[test]
fn emulated_quant_matvec_gfx1100() {
    emulate("quant", "gfx1100");
}

#[test]
fn emulated_dequant_gfx942() {
    emulate("dequant", "gfx942");
}

#[test]
fn emulated_dequant_gfx1100() {
    emulate("dequant", "gfx1100");
}

#[test]
fn emulated_mxfp_matvec_gfx942() {
    emulate("mxfp", "gfx942");
}

#[test]
fn emulated_mxfp_matvec_gfx1100() {
    emulate("mxfp", "gfx1100");
}

#[test]
fn emulated_gemm_gfx942() {
    emulate("gemm", "gfx942");
}

#[test]
fn emulated_gemm_gfx1100() {
    emulate("gemm", "gfx1100");
}

#[test]
fn emulated_tiled_matvec_gfx942() {
    emulate("tiled", "gfx942");
}

#[test]
fn emulated_tiled_matvec_gfx1100() {
    emulate("tiled", "gfx1100");
}

#[test]
fn emulated_tiled_matvec_sm80() {
    emulate("tiled", "sm80");
}

#[test]
fn emulated_mma_matvec_sm80() {
    emulate("mma", "sm80");
}

#[test]
fn emulated_races_sm80() {
    run(true, &SM80_SUITES, "sm80");
}

#[test]
fn emulated_qmvm_matvec_sm80() {
    emulate("qmvm", "sm80");
}

#[test]
fn emulated_races_gfx942() {
    emulate_races("gfx942");
}

#[test]
fn emulated_races_gfx1100() {
    emulate_races("gfx1100");
}
