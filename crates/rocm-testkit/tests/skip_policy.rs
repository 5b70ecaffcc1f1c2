//! The skip/require policy, checked in child processes that see no GPU driver (the library
//! paths point nowhere), so it holds on GPU and non-GPU machines alike.

use std::process::{Command, Output};

use rocm_testkit::gpu_test;

/// The probe the children run (ignored in a normal run: it exists for them).
#[test]
#[ignore = "run by the skip-policy tests in a child process"]
fn probe_gpu_scope() {
    let gpu = gpu_test!();
    let one = gpu.stream().upload(&[1u8]).unwrap();
    assert_eq!(one.to_vec().unwrap(), [1]);
}

fn run_probe_without_a_driver(require: bool) -> Output {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", "probe_gpu_scope", "--ignored", "--nocapture", "--test-threads=1"])
        .env("ROCMFORGE_HIP_LIBRARY", "/nonexistent/libamdhip64.so")
        .env("ROCMFORGE_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
        .env_remove("ROCMFORGE_PLATFORM");
    if require {
        child.env("ROCMFORGE_REQUIRE_GPU", "1");
    } else {
        child.env_remove("ROCMFORGE_REQUIRE_GPU");
    }
    child.output().unwrap()
}

#[test]
fn without_a_gpu_a_test_skips_with_a_one_line_reason() {
    let out = run_probe_without_a_driver(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the probe should skip, not fail: {stderr}");
    let skip_lines: Vec<_> = stderr.lines().filter(|l| l.starts_with("SKIP ")).collect();
    assert_eq!(skip_lines.len(), 1, "{stderr}");
    assert!(skip_lines[0].starts_with("SKIP probe_gpu_scope: no GPU: "), "{}", skip_lines[0]);
    assert_eq!(skip_lines[0].matches("no GPU").count(), 1, "said once: {}", skip_lines[0]);
    assert!(
        skip_lines[0].contains("/nonexistent/libcuda.so.1"),
        "the reason names what was tried: {}",
        skip_lines[0]
    );
}

#[test]
fn require_gpu_turns_a_missing_gpu_into_a_failure() {
    let out = run_probe_without_a_driver(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the probe must fail under ROCMFORGE_REQUIRE_GPU=1: {stderr}");
    assert!(stderr.contains("GPU required (ROCMFORGE_REQUIRE_GPU=1) but unavailable"), "{stderr}");
}
