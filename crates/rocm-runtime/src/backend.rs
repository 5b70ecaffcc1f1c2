//! The backend: one per device per process, shared through `Arc`, safe from any thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::device::{DeviceInfo, MemoryInfo};
use crate::driver::{self, DeviceDriver, DriverVersions};
use crate::error::{Error, Result};
use crate::ledger::{Account, Ledger};
use crate::module::Module;
use crate::platform::{Platform, PlatformChoice};
use crate::stream::Stream;

/// Env var: the fraction of free device memory (at backend creation) the guard allows.
pub const MEM_FRACTION_ENV: &str = "ROCMFORGE_MEM_FRACTION";
/// The guard's default budget: this fraction of the memory free when the backend started.
pub const DEFAULT_MEM_FRACTION: f64 = 0.7;

/// The platform this process runs on and how many devices it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platforms {
    pub platform: Platform,
    pub device_count: usize,
    /// The platforms tried before it and why each was passed over (`auto` only).
    pub skipped: Vec<String>,
}

/// Finds the platform (per `ROCMFORGE_PLATFORM`) whose first device opens. Checked once per
/// process; never panics: no library, no driver, no device, or a device that cannot be opened
/// is a reason to try the next platform, and when none is left an [`Error::NoDevice`] that says
/// what each platform answered.
pub fn detect() -> Result<Platforms> {
    static DETECTED: OnceLock<Result<Platforms, String>> = OnceLock::new();
    let detected = DETECTED.get_or_init(|| {
        let choice = PlatformChoice::from_env().map_err(|e| e.to_string())?;
        pick_platform(choice.candidates(), probe)
    });
    detected.clone().map_err(Error::NoDevice)
}

/// Whether `platform` has a device that opens and answers its queries: the device count, or why not.
fn probe(platform: Platform) -> std::result::Result<usize, String> {
    match driver::device_count(platform) {
        Ok(0) => Err("driver loaded but no device found".to_string()),
        Ok(count) => match driver::open(platform, 0).and_then(|d| d.info()) {
            Ok(_) => Ok(count),
            Err(e) => Err(format!("device 0 cannot be opened: {e}")),
        },
        Err(e) => Err(e.to_string()),
    }
}

/// The first of `candidates` that `probe` accepts, with the reasons the earlier ones were not.
fn pick_platform(
    candidates: &[Platform],
    probe: impl Fn(Platform) -> std::result::Result<usize, String>,
) -> std::result::Result<Platforms, String> {
    let mut reasons = Vec::new();
    for &platform in candidates {
        match probe(platform) {
            Ok(device_count) => {
                for skipped in &reasons {
                    tracing::info!("platform skipped: {skipped}");
                }
                return Ok(Platforms { platform, device_count, skipped: reasons });
            }
            Err(why) => reasons.push(format!("{platform}: {why}")),
        }
    }
    Err(reasons.join("; "))
}

/// Owns one device: its driver binding, its ledger and memory guard. It holds no module: a
/// `Module` holds its backend, so a cache of them here would be a reference cycle; kernel
/// libraries keep their own (rocm-kernels' loader).
///
/// There is one per device per process ([`Backend::open`] hands out the same one), so the
/// guard's budget is the process's budget for that device. Work is done on [`Stream`]s, each
/// owned by one user (a test, a thread); the backend itself holds no stream, so nothing in it
/// can be shared wrongly between threads.
pub struct Backend {
    driver: Box<dyn DeviceDriver>,
    info: DeviceInfo,
    versions: DriverVersions,
    ledger: Ledger,
    free_at_start: u64,
    next_stream_id: AtomicU64,
    library_states: AtomicU64,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("device", &self.info.name)
            .field("ordinal", &self.info.ordinal)
            .field("platform", &self.info.platform)
            .field("budget", &self.ledger.budget())
            .finish()
    }
}

impl Backend {
    /// The process's backend for device `ordinal` of the detected platform, created on first use.
    pub fn open(ordinal: usize) -> Result<Arc<Backend>> {
        static BACKENDS: Mutex<Vec<(usize, Arc<Backend>)>> = Mutex::new(Vec::new());
        let detected = detect()?;
        if ordinal >= detected.device_count {
            return Err(Error::DeviceOutOfRange { ordinal, count: detected.device_count });
        }
        let mut backends = BACKENDS.lock();
        if let Some((_, backend)) = backends.iter().find(|(o, _)| *o == ordinal) {
            return Ok(backend.clone());
        }
        let backend = Arc::new(Backend::create(detected.platform, ordinal)?);
        backends.push((ordinal, backend.clone()));
        Ok(backend)
    }

    fn create(platform: Platform, ordinal: usize) -> Result<Self> {
        let _span = tracing::debug_span!("backend", %platform, ordinal).entered();
        let fraction = mem_fraction_from_env()?;
        let driver = driver::open(platform, ordinal)?;
        let info = driver.info()?;
        let versions = driver.versions();
        for fallback in &versions.fallbacks {
            tracing::warn!(device = %info.name, "{fallback}");
        }
        let (free, _total) = driver.mem_info()?;
        let budget = (free as f64 * fraction) as u64;
        // Freed memory stays mapped for the next allocation, up to the budget (the most this
        // process may hold anyway): mapping it again after every synchronisation cost ~50 us of
        // host time per allocation. `release_freed_memory` gives it back.
        if let Err(e) = driver.retain_freed_memory(budget) {
            tracing::warn!(device = %info.name, error = %e, "the memory pool gives freed memory back at once");
        }
        tracing::debug!(device = %info.name, arch = %info.arch, free, budget, "backend ready");
        Ok(Backend {
            driver,
            info,
            versions,
            ledger: Ledger::new(budget),
            free_at_start: free,
            next_stream_id: AtomicU64::new(1),
            library_states: AtomicU64::new(0),
        })
    }

    pub fn platform(&self) -> Platform {
        self.info.platform
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The driver's version number (CUDA: 1000*major + 10*minor; HIP: its own encoding).
    pub fn driver_version(&self) -> i32 {
        self.versions.driver
    }

    /// The HIP runtime's version (AMD only).
    pub fn runtime_version(&self) -> Option<i32> {
        self.versions.runtime
    }

    /// The host library in words: `HIP 6.4.43484`, `HIP for NVIDIA over the CUDA 11.8 runtime`,
    /// `CUDA driver 13.0`.
    pub fn driver_description(&self) -> &str {
        &self.versions.description
    }

    /// The host library's file, as the loader found it.
    pub fn driver_library(&self) -> Option<&std::path::Path> {
        self.versions.library.as_deref()
    }

    /// What the runtime does without on this device and why (for example the
    /// synchronise-then-free fallback where memory pools are off); empty when nothing.
    pub fn fallbacks(&self) -> &[String] {
        &self.versions.fallbacks
    }

    /// Whether streams of this device can record graphs ([`crate::Stream::capture`]): `Ok`, or
    /// [`Error::GraphsUnsupported`] naming what the host library lacks (AMD's HIP for NVIDIA
    /// built by a plain C++ compiler exports no graph calls). Asks the loaded library only:
    /// no capture, no allocation.
    pub fn graph_support(&self) -> Result<()> {
        self.driver.graph_support()
    }

    /// Free and total device memory now, as the driver sees it (other processes included).
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        let (free, total) = self.driver.mem_info()?;
        Ok(MemoryInfo { free, total })
    }

    /// Device memory that was free when this backend was created (the budget's base).
    pub fn free_at_start(&self) -> u64 {
        self.free_at_start
    }

    /// The ledger: budget, bytes in use, live allocations, accounts.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Gives the device memory of freed buffers back to the driver. Stream-ordered frees keep it
    /// mapped in the device's memory pool for the next allocation (up to the budget at start),
    /// so this process's footprint stays at its peak until this is called: call it after a
    /// burst (a long prefill) when other programs need the memory. Memory whose free has not
    /// run yet (queued on a busy stream) stays; nothing is waited for.
    pub fn release_freed_memory(&self) -> Result<()> {
        self.driver.release_freed_memory()
    }

    /// Sets the guard's budget to `fraction` of the memory free when the backend started.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        let fraction = check_fraction(fraction, "memory fraction")?;
        self.ledger.set_budget((self.free_at_start as f64 * fraction) as u64);
        Ok(())
    }

    /// A new stream of this device, owned by the caller; its allocations are charged to no account.
    pub fn create_stream(self: &Arc<Self>) -> Result<Stream> {
        Stream::new(self.clone(), None)
    }

    /// A new stream whose allocations are charged to `account` (see [`Ledger::open_account`]).
    pub fn create_stream_for(self: &Arc<Self>, account: &Account) -> Result<Stream> {
        if !account.ledger().same_as(&self.ledger) {
            return Err(Error::InvalidArgument("the account belongs to another device's ledger".into()));
        }
        Stream::new(self.clone(), Some(account.clone()))
    }

    /// Loads a module (code object or fatbin) from an image.
    pub fn load_module(self: &Arc<Self>, image: &[u8]) -> Result<Module> {
        Module::load(self.clone(), image)
    }

    pub(crate) fn driver(&self) -> &dyn DeviceDriver {
        &*self.driver
    }

    /// How many process-lifetime library states (vendor library handles such as cuBLAS's) have
    /// been created on this device. Their device memory is the library's, outside the ledger,
    /// and lives until the process exits: a test that sees this change knows a drop in the
    /// driver's free memory is that, not a leak.
    pub fn library_states(&self) -> u64 {
        self.library_states.load(Ordering::SeqCst)
    }

    pub(crate) fn note_library_state(&self) {
        self.library_states.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn next_stream_id(&self) -> u64 {
        self.next_stream_id.fetch_add(1, Ordering::Relaxed)
    }
}

fn check_fraction(fraction: f64, what: &str) -> Result<f64> {
    if fraction.is_finite() && fraction > 0.0 && fraction <= 1.0 {
        Ok(fraction)
    } else {
        Err(Error::InvalidArgument(format!("{what} {fraction}: must be in (0, 1]")))
    }
}

fn mem_fraction_from_env() -> Result<f64> {
    match std::env::var(MEM_FRACTION_ENV) {
        Err(_) => Ok(DEFAULT_MEM_FRACTION),
        Ok(text) => {
            let value: f64 = text.trim().parse().map_err(|_| {
                Error::InvalidArgument(format!("{MEM_FRACTION_ENV}={text}: expected a number in (0, 1]"))
            })?;
            check_fraction(value, MEM_FRACTION_ENV)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_the_first_platform_whose_device_opens_and_says_why_it_skipped() {
        let probe = |p: Platform| match p {
            Platform::Amd => Err("device 0 cannot be opened: hipDeviceGetAttribute failed".to_string()),
            Platform::Nvidia => Ok(2),
        };
        let picked = pick_platform(&[Platform::Amd, Platform::Nvidia], probe).unwrap();
        assert_eq!(picked.platform, Platform::Nvidia);
        assert_eq!(picked.device_count, 2);
        assert_eq!(picked.skipped, ["amd: device 0 cannot be opened: hipDeviceGetAttribute failed"]);

        let first = pick_platform(&[Platform::Amd, Platform::Nvidia], |_| Ok(1)).unwrap();
        assert_eq!((first.platform, first.skipped.len()), (Platform::Amd, 0));

        // Only AMD asked for: its failure is the answer, naming the platform.
        let err = pick_platform(&[Platform::Amd], probe).unwrap_err();
        assert_eq!(err, "amd: device 0 cannot be opened: hipDeviceGetAttribute failed");
        let none = pick_platform(&[Platform::Amd, Platform::Nvidia], |p| Err(format!("no {p}"))).unwrap_err();
        assert_eq!(none, "amd: no amd; nvidia: no nvidia");
    }

    #[test]
    fn fractions_outside_zero_one_are_refused() {
        assert!(check_fraction(0.7, "x").is_ok());
        assert!(check_fraction(1.0, "x").is_ok());
        for bad in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert!(check_fraction(bad, "x").is_err(), "{bad}");
        }
    }
}
