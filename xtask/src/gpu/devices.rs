//! The GPUs of this machine, for `gpu-test`: which platform to test and how many tests to run
//! at once.

use std::fs;
use std::process::Command;

use rocm_runtime::Platform;

/// The platform this machine's GPUs are on, as the runtime finds them.
#[derive(Debug)]
pub(super) struct LocalGpu {
    pub(super) platform: Platform,
    pub(super) devices: usize,
}

impl LocalGpu {
    /// The name `ROCMFORGE_PLATFORM` uses.
    pub(super) fn platform_name(&self) -> &'static str {
        self.platform.name()
    }
}

/// The platform to test, found the way the tests will find it (`rocm_runtime::detect`:
/// `ROCMFORGE_PLATFORM`, else AMD, then NVIDIA); the tests are then pinned to it.
pub(super) fn detect_gpu() -> std::result::Result<LocalGpu, String> {
    rocm_runtime::detect()
        .map(|found| LocalGpu { platform: found.platform, devices: found.device_count })
        .map_err(|e| format!("no usable GPU on this machine: {e}"))
}

/// How many GPU tests run at once: `--gpus N`, else `ROCMFORGE_GPUS`, else the devices the driver
/// reports (which honours CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES, the same numbering the
/// tests see), else `nvidia-smi -L` or the AMD GPUs under /sys, else 1.
pub(super) fn gpu_count(explicit: Option<usize>, gpu: Option<&LocalGpu>) -> usize {
    if let Some(n) = explicit {
        return n;
    }
    if let Ok(text) = std::env::var("ROCMFORGE_GPUS") {
        match parse_gpus(&text) {
            Ok(n) => return n,
            Err(e) => eprintln!("gpu-test: ignoring ROCMFORGE_GPUS: {e}"),
        }
    }
    if let Some(gpu) = gpu {
        return gpu.devices;
    }
    count_nvidia_smi().or_else(count_amd_sysfs).unwrap_or(1)
}

pub(super) fn parse_gpus(text: &str) -> std::result::Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{text}` is not a positive number of GPUs")),
    }
}

fn count_nvidia_smi() -> Option<usize> {
    let out = Command::new("nvidia-smi").arg("-L").output().ok().filter(|o| o.status.success())?;
    let n = String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("GPU ")).count();
    (n > 0).then_some(n)
}

/// AMD GPUs as the kernel driver lists them: KFD topology nodes with SIMDs (CPU nodes have none).
fn count_amd_sysfs() -> Option<usize> {
    let nodes = fs::read_dir("/sys/class/kfd/kfd/topology/nodes").ok()?;
    let n = nodes
        .filter_map(|node| fs::read_to_string(node.ok()?.path().join("properties")).ok())
        .filter(|props| {
            props.lines().any(|l| {
                l.strip_prefix("simd_count").and_then(|v| v.trim().parse::<u64>().ok()).is_some_and(|v| v > 0)
            })
        })
        .count();
    (n > 0).then_some(n)
}
