//! The process's GPU: found once, lazily, without crashing when there is none.

use std::sync::{Arc, OnceLock};

use rocm_runtime::Backend;

/// `ROCMFORGE_REQUIRE_GPU=1`: a missing GPU fails GPU tests instead of skipping them, so a GPU
/// run can never pass by skipping everything.
pub const REQUIRE_GPU_ENV: &str = "ROCMFORGE_REQUIRE_GPU";

/// Re-exported from the runtime, where the name is defined once for xtask (which sets it) and
/// this kit (which reads it).
pub use rocm_runtime::SANITIZER_ENV;

/// The checker this process runs under, if any: stress tests use it to scale their repetitions
/// down (the checker is there for what each launch does, not for how many there are).
pub fn sanitizer() -> Option<String> {
    std::env::var(SANITIZER_ENV).ok().filter(|t| !t.is_empty())
}

/// Env var choosing the device for this process (overrides the nextest slot).
pub const DEVICE_ENV: &str = "ROCMFORGE_DEVICE";

/// Why there is no GPU for this test process, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuUnavailable(pub String);

impl std::fmt::Display for GpuUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether this run demands a GPU (`ROCMFORGE_REQUIRE_GPU=1`).
pub fn require_gpu() -> bool {
    matches!(std::env::var(REQUIRE_GPU_ENV).as_deref().map(str::trim), Ok("1" | "true" | "yes"))
}

/// The device this process tests on: `ROCMFORGE_DEVICE`, else the nextest test-group slot
/// (so with one slot per GPU each concurrent test process gets its own device), else 0;
/// wrapped around the device count.
fn device_ordinal(count: usize) -> Result<usize, GpuUnavailable> {
    // nextest sets the slot to `none` for tests outside any test group.
    let pick = |var: &str| std::env::var(var).ok().filter(|v| v != "none").map(|v| (var.to_string(), v));
    let Some((var, text)) = pick(DEVICE_ENV).or_else(|| pick("NEXTEST_TEST_GROUP_SLOT")) else {
        return Ok(0);
    };
    let value: usize =
        text.trim().parse().map_err(|_| GpuUnavailable(format!("{var}={text} is not a device number")))?;
    Ok(value % count.max(1))
}

/// The process-wide backend for GPU tests, created on first use. Every test in the process
/// shares it (one backend per process) and works on its own stream.
pub fn gpu_backend() -> Result<Arc<Backend>, GpuUnavailable> {
    static BACKEND: OnceLock<Result<Arc<Backend>, GpuUnavailable>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let detected = rocm_runtime::detect().map_err(|e| GpuUnavailable(e.to_string()))?;
            let ordinal = device_ordinal(detected.device_count)?;
            Backend::open(ordinal).map_err(|e| GpuUnavailable(format!("device {ordinal}: {e}")))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_selection_the_first_device_is_used() {
        // Neither variable is set by `cargo test`; under nextest the slot may be, so only
        // check that a selection always lands inside the device count.
        for count in 1..5 {
            assert!(device_ordinal(count).unwrap() < count);
        }
    }
}
