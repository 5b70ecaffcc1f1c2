//! The GPUs of this machine, for `gpu-test`: which platform to test and how many tests to run
//! at once on each.

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

/// How many GPUs the tests share (the `gpu` test group runs this many times the tests per GPU
/// at once): `--gpus N`, else `ROCMFORGE_GPUS`, else the devices the driver reports (which
/// honours CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES, the same numbering the tests see), else
/// `nvidia-smi -L` or the AMD GPUs under /sys, else 1.
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

/// The most tests `gpu-test` runs at once on one GPU by default: past this the GPU is busy
/// anyway, and more processes only add contexts (each costs device memory) and contention.
const MAX_DEFAULT_JOBS_PER_GPU: usize = 16;

/// Tells the test kit how many tests share each GPU (`rocm_testkit::memory::JOBS_PER_GPU_ENV`;
/// xtask does not depend on the test kit): only with one test per GPU does the driver's
/// free-memory reading tell a test's own leaks from its neighbours' work.
pub(super) const JOBS_PER_GPU_ENV: &str = "ROCMFORGE_JOBS_PER_GPU";

/// `--jobs-per-gpu N`: a positive count.
pub(super) fn parse_jobs_per_gpu(text: &str) -> std::result::Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("zero tests per GPU runs nothing".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a number of tests per GPU")),
    }
}

/// How many tests run at once on each GPU: `explicit` (`--jobs-per-gpu`, `--serial`), else
/// [`default_jobs_per_gpu`] over the devices the tests will use. Prints the choice.
pub(super) fn jobs_per_gpu(explicit: Option<usize>, gpus: usize, gpu: Option<&LocalGpu>) -> usize {
    let jobs = explicit.unwrap_or_else(|| {
        // Every device the driver shows, not only the first `gpus`: the test kit wraps test
        // group slots round-robin over all of them, so with several tests per GPU any may run one.
        let displays = match gpu {
            Some(gpu) => probe_displays(gpu.devices),
            None => {
                println!("gpu-test: no GPU found to ask whether it drives a display; assuming none does");
                Vec::new()
            }
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (jobs, why) = default_jobs_per_gpu(&displays, cpus, gpus);
        if let Some(why) = why {
            println!("gpu-test: {why}");
        }
        jobs
    });
    println!("gpu-test: {gpus} GPU(s) x {jobs} test(s) per GPU");
    jobs
}

/// The default tests per GPU. A desktop's GPU (one that drives a display) runs one test at a
/// time, so the compositor keeps its share of the device and a long kernel does not freeze the
/// screen. Otherwise the host's CPUs shared among the GPUs (each test process needs a CPU to
/// feed its GPU), at least 1 and at most [`MAX_DEFAULT_JOBS_PER_GPU`]. The text says why, where
/// the answer is not the usual one.
pub(super) fn default_jobs_per_gpu(displays: &[bool], cpus: usize, gpus: usize) -> (usize, Option<String>) {
    let shown: Vec<String> = (0..displays.len()).filter(|&i| displays[i]).map(|i| i.to_string()).collect();
    let why = match shown.as_slice() {
        [] => return ((cpus / gpus.max(1)).clamp(1, MAX_DEFAULT_JOBS_PER_GPU), None),
        [one] => format!("device {one} drives a display"),
        many => format!("devices {} drive a display", many.join(", ")),
    };
    (1, Some(format!("{why}: one test at a time (--jobs-per-gpu N overrides)")))
}

/// Whether each of the first `devices` devices drives a display, as the runtime reads it
/// (`DeviceInfo::drives_display`). A device that does not open counts as not driving one (its
/// tests will fail and say why); the line printed says so.
fn probe_displays(devices: usize) -> Vec<bool> {
    (0..devices)
        .map(|ordinal| match rocm_runtime::Backend::open(ordinal) {
            Ok(backend) => backend.info().drives_display,
            Err(e) => {
                println!(
                    "gpu-test: device {ordinal}: cannot tell whether it drives a display ({e}); \
                     assuming it does not"
                );
                false
            }
        })
        .collect()
}

/// Joins every device's shared budget and holds it while one nextest run lasts: the figure is
/// taken once, before any test (what other programs use then), and a test's fault record stays
/// for the rest of the run instead of being cleared by the next test process that finds itself
/// alone. A device that does not open is left to the tests, which report it.
pub(super) fn hold_budgets() -> Vec<rocm_runtime::SharedBudget> {
    let devices = rocm_runtime::detect().map_or(0, |d| d.device_count);
    let mut held = Vec::new();
    for ordinal in 0..devices {
        let joined = rocm_runtime::Backend::open(ordinal)
            .map_err(|e| e.to_string())
            .and_then(|b| rocm_runtime::SharedBudget::join_device(&b).map_err(|e| e.to_string()));
        match joined {
            Ok(budget) => {
                println!(
                    "gpu-test: device {ordinal}: shared budget {} ({})",
                    rocm_runtime::Bytes(budget.budget_bytes()),
                    budget.figure().how
                );
                held.push(budget);
            }
            Err(e) => println!("gpu-test: device {ordinal}: no shared budget held for the run: {e}"),
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_display_means_one_test_per_gpu() {
        let (jobs, why) = default_jobs_per_gpu(&[false, true], 64, 2);
        assert_eq!(jobs, 1);
        assert_eq!(
            why.as_deref(),
            Some("device 1 drives a display: one test at a time (--jobs-per-gpu N overrides)")
        );
        let (jobs, why) = default_jobs_per_gpu(&[true, false, true], 64, 3);
        assert_eq!(jobs, 1);
        assert!(why.unwrap().starts_with("devices 0, 2 drive a display:"));
    }

    #[test]
    fn otherwise_the_cpus_are_shared_among_the_gpus() {
        assert_eq!(default_jobs_per_gpu(&[false; 2], 16, 2), (8, None));
        // At least one test per GPU, however few the CPUs.
        assert_eq!(default_jobs_per_gpu(&[false; 8], 4, 8), (1, None));
        assert_eq!(default_jobs_per_gpu(&[], 1, 1), (1, None));
        // At most 16, however many.
        assert_eq!(default_jobs_per_gpu(&[false], 128, 1), (16, None));
        // Devices that could not be asked (none listed) count as headless.
        assert_eq!(default_jobs_per_gpu(&[], 32, 4), (8, None));
        assert_eq!(default_jobs_per_gpu(&[], 32, 0), (16, None));
    }

    #[test]
    fn jobs_per_gpu_must_be_a_positive_number() {
        assert_eq!(parse_jobs_per_gpu("3"), Ok(3));
        assert_eq!(parse_jobs_per_gpu("0"), Err("zero tests per GPU runs nothing".into()));
        assert_eq!(parse_jobs_per_gpu("x"), Err("`x` is not a number of tests per GPU".into()));
        assert!(parse_jobs_per_gpu("-1").is_err());
    }
}
