//! rocmforge's task runner (`cargo xtask <task>`), in the xtask pattern: plain Rust instead of
//! shell scripts, so every task runs the same way on every machine.

mod abi_bindgen;
mod amd_resources;
mod amd_toolchain;
mod bindgen;
mod doctor;
mod flags;
mod gpu;
mod hip_drift;
mod hip_nvidia;
mod kernel_files;
#[path = "../../crates/rocm-kernels/kernel_includes.rs"]
mod kernel_includes;
mod kernel_symbols;
mod kernels;
mod lint;
mod rocm_bench;
mod toolchain;

use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: cargo xtask <task> [args]

tasks:
  doctor                        platform, devices, memory, guard budget, toolchains found
  kernels [--platform P]        compile kernels/*.hip (P: amd, nvidia, all, auto; default auto)
  amd-toolchain [--rebuild]     make (or reuse) the Debian forky chroot with hipcc 7 that AMD kernels
                                are built with (root, debootstrap)
  gpu-test [--archive DIR] [--gpus N] [--jobs-per-gpu N | --serial] [--repeat N] [--junit PATH]
           [--partition K/N] [--hip-nvidia] [--sanitize[=TOOLS]] [-- nextest args]
                                run the GPU suite under the nextest `gpu` profile, several tests per
                                GPU (one on a GPU that drives a display; docs/gpu-runs.md)
                                (--sanitize: under compute-sanitizer memcheck, racecheck, synccheck)
  gpu-archive [--out DIR] [--platform P]
                                pack the GPU suite to run on another host (default .gpu/;
                                P: the host's platform only, a smaller archive)
  bench [FILTER...]             time kernels on the GPU: GB/s or TFLOP/s against measured copy bandwidth
  attention-dump DIR            write attention inputs/outputs for scripts/check_attention_torch.py
                                (bench, attention-dump: run by rocm-bench, the packed one beside this
                                binary or `cargo run --release -p rocm-bench`)
  bindgen [--check]             regenerate rocm-sys bindings (or check they are current)
  hip-nvidia [--out DIR]        build a libamdhip64 for NVIDIA GPUs from AMD's HIP-for-NVIDIA headers,
                                to run the suite through the HIP driver on an NVIDIA machine
  lint                          project rules: no device-wide synchronisation outside rocm-sys
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        std::process::exit(2);
    };
    let result = match task.as_str() {
        "doctor" => doctor::run(rest),
        "kernels" => kernels::run(rest),
        "amd-toolchain" => amd_toolchain::run(rest),
        "gpu-test" => gpu::test(rest),
        "gpu-archive" => gpu::archive(rest),
        "bench" | "attention-dump" => rocm_bench::forward(task, rest),
        "bindgen" => bindgen::run(rest),
        "hip-nvidia" => hip_nvidia::run(rest),
        "lint" => lint::run(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown task `{other}`\n{USAGE}").into()),
    };
    if let Err(e) = result {
        eprintln!("xtask {task}: error: {e}");
        std::process::exit(1);
    }
}

/// The workspace root: xtask's manifest lives one level below it. Read at run time where
/// cargo (or nextest, remapping an archive) says where that is; an archived xtask binary run on
/// another host falls back to the checkout it is started from.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|d| d.join("Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    match manifest_dir.parent() {
        Some(root) if root.join("Cargo.toml").is_file() => root.to_path_buf(),
        _ => std::env::current_dir().expect("the current directory is readable"),
    }
}

/// The cargo that started this process (`CARGO`), else the one on PATH.
pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}
