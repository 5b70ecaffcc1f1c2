//! Each GPU test's device memory, and the run's view of the device's health.
//!
//! Many test processes share a device (nextest runs each test in its own process, several at
//! once), so a test draws its memory from the device's budget shared by all of them
//! ([`rocm_runtime::SharedBudget`]) before it runs: its declaration
//! (`gpu_test!(memory = BYTES)`) or [`DEFAULT_TEST_MEMORY`]. A test that does not fit yet waits,
//! bounded ([`BUDGET_WAIT_ENV`]), then fails naming who holds what. What it reserved becomes
//! the process's memory-guard budget, so a test that goes past its declaration fails at the
//! allocation that does, naming its largest live allocations. The kernel releases a killed
//! process's reservation (the budget holds it with file locks).
//!
//! The budget defaults to `rocm_runtime::DEVICE_FRACTION` of the device less what other programs
//! use when the run starts (`DESKTOP_FRACTION` on a device that drives a display);
//! `ROCMFORGE_GPU_BUDGET` and `ROCMFORGE_GPU_BUDGET_FRACTION` set it. `cargo xtask gpu-test`
//! joins first and holds the budget for its run; without it, each test process that finds no
//! other running takes the figure anew.
//!
//! A test whose kernel faults the device (an illegal address, a sticky context error; on AMD a
//! reset) records it in the run's budget folder; every later test of the run on that device
//! fails at once saying which test faulted it, instead of failing with an unrelated error.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use rocm_runtime::{Backend, Reservation, SharedBudget};

/// What a test that declares nothing reserves.
pub const DEFAULT_TEST_MEMORY: u64 = 4 << 30;

/// Seconds a test waits for its memory before it fails (default [`DEFAULT_WAIT`]).
pub const BUDGET_WAIT_ENV: &str = "ROCMFORGE_BUDGET_WAIT";

/// Below nextest's per-test limit (5 minutes in the `gpu` profile), so the wait fails with its
/// own message rather than being killed.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(240);

/// Tests run at once on each GPU (`cargo xtask gpu-test` sets it). The driver's free-memory
/// reading only tells this test's leaks from other processes' work when it is 1.
pub const JOBS_PER_GPU_ENV: &str = "ROCMFORGE_JOBS_PER_GPU";

/// Whether tests run one at a time on each GPU (unset: as cargo test or nextest decide).
pub(crate) fn one_job_per_gpu() -> bool {
    std::env::var(JOBS_PER_GPU_ENV).is_ok_and(|v| v.trim() == "1")
}

/// The device's shared budget, joined once per process.
fn shared_budget(backend: &Arc<Backend>) -> Result<&'static SharedBudget, String> {
    static BUDGET: OnceLock<Result<SharedBudget, String>> = OnceLock::new();
    BUDGET
        .get_or_init(|| SharedBudget::join_device(backend).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

fn wait() -> Result<Duration, String> {
    match std::env::var(BUDGET_WAIT_ENV) {
        Ok(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{BUDGET_WAIT_ENV}={text:?}: expected seconds (e.g. 240)")),
        Err(_) => Ok(DEFAULT_WAIT),
    }
}

/// One test's reservation; while it lives, the process's guard budget includes it.
#[derive(Debug)]
pub(crate) struct TestMemory {
    reservation: Reservation,
    backend: Arc<Backend>,
}

/// This process's reservations together: the guard's budget.
static RESERVED: Mutex<u64> = Mutex::new(0);

impl TestMemory {
    /// Reserves `bytes` for the test `name`, or says why not (the device faulted earlier in the
    /// run; the budget stayed full; the request is larger than the whole budget).
    pub(crate) fn reserve(backend: &Arc<Backend>, name: &str, bytes: u64) -> Result<TestMemory, String> {
        let budget = shared_budget(backend)?;
        if let Some(fault) = budget.fault() {
            return Err(format!(
                "not run: device {} ({}) faulted earlier in this run: {fault}",
                backend.info().ordinal,
                backend.info().name
            ));
        }
        let reservation = budget.reserve(bytes, name, wait()?).map_err(|e| format!("`{name}`: {e}"))?;
        let mut reserved = RESERVED.lock().unwrap_or_else(PoisonError::into_inner);
        *reserved += reservation.bytes();
        backend.ledger().set_budget(*reserved);
        Ok(TestMemory { reservation, backend: backend.clone() })
    }
}

impl Drop for TestMemory {
    fn drop(&mut self) {
        let mut reserved = RESERVED.lock().unwrap_or_else(PoisonError::into_inner);
        *reserved -= self.reservation.bytes();
        self.backend.ledger().set_budget(*reserved);
    }
}

/// Records that `test` faulted the device with `error`, for the rest of the run.
pub(crate) fn mark_faulted(backend: &Arc<Backend>, test: &str, error: &dyn std::fmt::Display) {
    match shared_budget(backend) {
        Ok(budget) => {
            if let Err(e) = budget.mark_faulted(&format!("`{test}`: {error}")) {
                eprintln!("{test}: could not record the device fault: {e}");
            }
        }
        Err(e) => eprintln!("{test}: could not record the device fault: {e}"),
    }
}
