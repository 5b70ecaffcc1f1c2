//! A GPU test's scope: its own stream and its own allocation account, checked at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rocm_runtime::{Account, Backend, Bytes, LiveAllocation, Stream};

use crate::fixture::{GpuUnavailable, gpu_backend, require_gpu};
use crate::memory::{self, DEFAULT_TEST_MEMORY, TestMemory};

/// How far the driver's free-memory reading may fall over one test before the second-line
/// check complains: module loads and driver bookkeeping take a few MiB the first time.
const DRIVER_FREE_TOLERANCE: u64 = 64 << 20;

/// Readings of the driver-memory check, 10 ms apart, before a shortfall counts.
const SETTLE_TRIES: usize = 20;

/// Scopes alive in this process; the driver-memory check only means something when one is.
static ACTIVE_SCOPES: AtomicUsize = AtomicUsize::new(0);

/// What the end-of-test check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeakReport {
    /// The test's account still holds allocations: exact, whatever else runs in the process.
    Live { test: String, bytes: u64, allocations: Vec<LiveAllocation> },
    /// The driver reports noticeably less free memory than at the start (second line of
    /// defence; only checked when this test was the process's only GPU test and tests run one
    /// at a time, as under the nextest `gpu` profile).
    DriverMemory { test: String, free_at_start: u64, free_at_end: u64 },
    /// Synchronising the test's stream failed (a kernel faulted, say).
    Stream { test: String, error: String },
}

impl std::fmt::Display for LeakReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeakReport::Live { test, bytes, allocations } => {
                writeln!(
                    f,
                    "GPU leak in `{test}`: {} still allocated in {} buffer(s):",
                    Bytes(*bytes),
                    allocations.len()
                )?;
                for a in allocations {
                    writeln!(f, "  {a}")?;
                }
                Ok(())
            }
            LeakReport::DriverMemory { test, free_at_start, free_at_end } => write!(
                f,
                "`{test}`: the driver reports {} less free device memory than at the start ({} -> {}), past the {} tolerance",
                Bytes(free_at_start.saturating_sub(*free_at_end)),
                Bytes(*free_at_start),
                Bytes(*free_at_end),
                Bytes(DRIVER_FREE_TOLERANCE)
            ),
            LeakReport::Stream { test, error } => write!(f, "`{test}`: its stream failed: {error}"),
        }
    }
}

/// One GPU test's scope. Made by [`crate::gpu_test!`]; dereferences to nothing, ask for the
/// [`stream`](GpuTest::stream). On drop (the end of the test) it synchronises its own stream,
/// then fails the test if any byte allocated on its account is still live, naming where each
/// such allocation was made.
#[derive(Debug)]
pub struct GpuTest {
    name: String,
    backend: Arc<Backend>,
    stream: Stream,
    account: Account,
    free_at_start: Option<u64>,
    library_states_at_start: u64,
    /// The test's share of the device's budget; dropped after the end-of-test checks.
    memory: Option<TestMemory>,
    done: bool,
}

impl GpuTest {
    /// Opens a scope named after the current test (libtest and nextest name the test's thread
    /// after it). Without a GPU: prints one line and returns `None`, or panics when
    /// `ROCMFORGE_REQUIRE_GPU=1`.
    pub fn begin() -> Option<GpuTest> {
        Self::begin_with_memory(DEFAULT_TEST_MEMORY)
    }

    /// As [`GpuTest::begin`], declaring the device memory the test needs (its reservation from
    /// the device's shared budget, and its guard budget): `gpu_test!(memory = BYTES)`.
    pub fn begin_with_memory(bytes: u64) -> Option<GpuTest> {
        let name = std::thread::current().name().unwrap_or("unnamed test").to_string();
        Self::begin_named_with_memory(name, bytes)
    }

    /// As [`GpuTest::begin`], with an explicit name.
    pub fn begin_named(name: impl Into<String>) -> Option<GpuTest> {
        Self::begin_named_with_memory(name, DEFAULT_TEST_MEMORY)
    }

    /// As [`GpuTest::begin_named`], declaring the test's device memory.
    pub fn begin_named_with_memory(name: impl Into<String>, bytes: u64) -> Option<GpuTest> {
        let name = name.into();
        match Self::try_begin_with_memory(&name, bytes) {
            Ok(scope) => Some(scope),
            Err(why) if require_gpu() => {
                panic!("GPU required (ROCMFORGE_REQUIRE_GPU=1) but unavailable for `{name}`: {why}")
            }
            Err(why) => {
                // `why` says it: "no GPU: ..." from detection, "device N: ..." from opening one.
                eprintln!("SKIP {name}: {why}");
                None
            }
        }
    }

    /// Opens a scope with the default memory, or says why it cannot.
    pub fn try_begin(name: &str) -> Result<GpuTest, GpuUnavailable> {
        Self::try_begin_with_memory(name, DEFAULT_TEST_MEMORY)
    }

    /// Opens a scope holding `bytes` of the device's shared budget, or says why there is no
    /// GPU. A GPU that is there but cannot give the test its memory (the budget stayed full for
    /// the whole wait, the request exceeds the budget, the device faulted earlier in the run)
    /// fails the test: that is not a missing GPU.
    pub fn try_begin_with_memory(name: &str, bytes: u64) -> Result<GpuTest, GpuUnavailable> {
        let backend = gpu_backend()?;
        let memory = TestMemory::reserve(&backend, name, bytes).unwrap_or_else(|why| panic!("{why}"));
        let account = backend.ledger().open_account(name);
        let stream = backend.create_stream_for(&account).map_err(|e| GpuUnavailable(e.to_string()))?;
        let alone = ACTIVE_SCOPES.fetch_add(1, Ordering::SeqCst) == 0;
        let free_at_start = alone.then(|| backend.memory_info().ok().map(|m| m.free)).flatten();
        let library_states_at_start = backend.library_states();
        Ok(GpuTest {
            name: name.to_string(),
            backend,
            stream,
            account,
            free_at_start,
            library_states_at_start,
            memory: Some(memory),
            done: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// The test's own stream; its allocations are charged to the test's account.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Another stream charged to this test's account (for tests of several streams).
    pub fn new_stream(&self) -> Stream {
        self.backend.create_stream_for(&self.account).expect("creating a stream for a test scope")
    }

    pub fn account(&self) -> &Account {
        &self.account
    }

    /// Synchronises the test's stream and checks that nothing it allocated is live.
    pub fn check_leaks(&self) -> Result<(), LeakReport> {
        if let Err(e) = self.stream.synchronize() {
            if e.is_device_fault() {
                // Later tests of the run stay off this device, saying why (`memory`).
                memory::mark_faulted(&self.backend, &self.name, &e);
            }
            return Err(LeakReport::Stream { test: self.name.clone(), error: e.to_string() });
        }
        let bytes = self.account.live_bytes();
        if bytes > 0 {
            let allocations = self.account.live_allocations();
            return Err(LeakReport::Live { test: self.name.clone(), bytes, allocations });
        }
        Ok(())
    }

    /// The second-line check: only sound when no other test of this process is running and
    /// tests run one at a time (the nextest `gpu` profile's test group).
    fn check_driver_memory(&self) -> Result<(), LeakReport> {
        // Other processes' work moves the reading too: only sound with one test per GPU.
        let serialised =
            std::env::var("NEXTEST_TEST_GROUP").is_ok_and(|g| g == "gpu") && memory::one_job_per_gpu();
        let alone = ACTIVE_SCOPES.load(Ordering::SeqCst) == 1;
        let (Some(free_at_start), true, true) = (self.free_at_start, serialised, alone) else {
            return Ok(());
        };
        // A vendor library's handle (cuBLAS: ~70 MiB) created during the test lives as long as
        // the process, in memory the ledger does not see: the driver's reading cannot tell it
        // from a leak. The ledger's exact check above still holds.
        if self.backend.library_states() != self.library_states_at_start {
            eprintln!("{}: driver memory check skipped: a vendor library handle was created", self.name);
            return Ok(());
        }
        // Freed buffers stay mapped in the device's memory pool (`Backend::release_freed_memory`):
        // give them back first. A free still queued on another of the test's streams is released
        // once it ran, so the reading is retried for a moment before it counts as a leak.
        let mut free_at_end = free_at_start;
        for _ in 0..SETTLE_TRIES {
            if let Err(e) = self.backend.release_freed_memory() {
                eprintln!("{}: releasing the memory pool's freed memory failed: {e}", self.name);
            }
            free_at_end = self.backend.memory_info().map(|m| m.free).unwrap_or(free_at_start);
            if free_at_end + DRIVER_FREE_TOLERANCE >= free_at_start {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Err(LeakReport::DriverMemory { test: self.name.clone(), free_at_start, free_at_end })
    }

    /// Ends the scope, returning what the check found instead of failing the test.
    pub fn finish(mut self) -> Result<(), LeakReport> {
        self.done = true;
        self.check_leaks().and_then(|()| self.check_driver_memory())
    }
}

impl Drop for GpuTest {
    fn drop(&mut self) {
        let result =
            if self.done { Ok(()) } else { self.check_leaks().and_then(|()| self.check_driver_memory()) };
        // The last scope of the process lets the vendor BLAS handles go, so nothing a test
        // created is alive at exit (compute-sanitizer's leak check reads the process at exit).
        if ACTIVE_SCOPES.fetch_sub(1, Ordering::SeqCst) == 1 {
            rocm_runtime::Blas::release_all();
        }
        // Its share of the budget goes back last, once its memory is freed.
        drop(self.memory.take());
        if let Err(report) = result {
            if std::thread::panicking() {
                eprintln!("{report}");
            } else {
                panic!("{report}");
            }
        }
    }
}
