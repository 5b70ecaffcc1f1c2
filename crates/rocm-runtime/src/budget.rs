//! One GPU memory budget per device, shared by every process of a test run.
//!
//! nextest runs each test in its own process, so a budget per process ("70% of what was free when
//! I started") lets two dozen processes together ask for far more than the device has. Here the
//! processes of a run share one budget through a directory per device, and hold their shares
//! with `flock` locks: the kernel drops a lock when its process dies, however it dies (SIGKILL,
//! a timeout), so a killed test never leaks budget, as a counter in shared memory would.
//!
//! What is in `<root>/<device key>/`:
//! - `run.lock`: every live participant holds a shared lock on it, so whoever finds it unlocked
//!   is the first of a new run and recomputes the budget (a figure left by an earlier run is
//!   stale: other programs may use more or less of the device now).
//! - `budget`: the figure of the current run (`bytes`, `slots`, `how`).
//! - `slot-<i>`: the budget cut into [`SLOT_BYTES`] slots; an exclusive lock on the file holds
//!   the slot.
//! - `holder-<pid>[-<n>]`: who holds a reservation, locked for as long as it does, so that a
//!   process that waited in vain can say whom it waited for.
//! - `faulted`: written by a participant whose work faulted the device (an illegal address, a
//!   sticky context error); later participants of the run read it and stay off the device.
//!   A new run starts without it.

use std::collections::hash_map::RandomState;
use std::env::VarError;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::Bytes;

/// The unit of the shared budget: a reservation holds a whole number of slots of this size.
pub const SLOT_BYTES: u64 = 256 << 20;

/// Where the budget directories live; `std::env::temp_dir()/rocmforge-budget` when unset.
pub const BUDGET_DIR_ENV: &str = "ROCMFORGE_BUDGET_DIR";

/// A fixed budget (`40G`, `512MiB`, a byte count) that replaces the computed figure.
pub const GPU_BUDGET_ENV: &str = "ROCMFORGE_GPU_BUDGET";

/// The fraction of the device (0 < f <= 1) the computed figure starts from.
pub const GPU_BUDGET_FRACTION_ENV: &str = "ROCMFORGE_GPU_BUDGET_FRACTION";

/// The share of a device [`SharedBudget::join_device`] starts from: the rest is for the test
/// processes' contexts and other programs' growth.
pub const DEVICE_FRACTION: f64 = 0.85;

/// The share on a device that drives a display: the desktop keeps the rest.
pub const DESKTOP_FRACTION: f64 = 0.5;

/// The run's fault record (see the module docs).
const FAULT_FILE: &str = "faulted";

const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(200);

/// Numbers the holder files of one process, so that its reservations never share one.
static NEXT_HOLDER: AtomicU64 = AtomicU64::new(0);

/// A run's budget in bytes and how it was arrived at (shown to whoever wonders why it is so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetFigure {
    pub bytes: u64,
    pub how: String,
}

/// Why a budget could not be joined or a reservation not made.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// The budget stayed too full for the whole wait; `holders` says who held it then.
    #[error(
        "shared GPU budget: waited {:.1} s for {} of the {} budget; held: {}",
        .waited.as_secs_f64(), Bytes(*.requested), Bytes(*.budget), list_holders(.holders)
    )]
    Timeout { requested: u64, budget: u64, waited: Duration, holders: Vec<String> },
    /// The request could never be met, however long it waited.
    #[error("shared GPU budget: {} requested, more than the whole {} budget", Bytes(*.requested), Bytes(*.budget))]
    LargerThanBudget { requested: u64, budget: u64 },
    /// The figure (most likely set by hand) promises more than the device has.
    #[error("shared GPU budget of {} is larger than the device's {}", Bytes(*.budget), Bytes(*.total))]
    BudgetLargerThanDevice { budget: u64, total: u64 },
    /// A setting from the environment that does not parse.
    #[error("{name}={value:?}: expected {expected}")]
    BadSetting { name: &'static str, value: String, expected: &'static str },
    /// The device could not say how much memory it has.
    #[error("shared GPU budget: reading the device's memory: {0}")]
    Device(String),
    #[error("shared GPU budget: {}: {error}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        error: io::Error,
    },
}

fn list_holders(holders: &[String]) -> String {
    if holders.is_empty() {
        // Slots are taken before the holder file is written and freed after it is removed, so
        // a holder of a moment may go unlisted.
        "nobody listed (the holders came and went meanwhile)".into()
    } else {
        holders.join(", ")
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BudgetError + '_ {
    move |error| BudgetError::Io { path: path.to_owned(), error }
}

/// This process's place in a device's shared budget; it counts as a participant of the run
/// (see the module docs) for as long as it or any of its [`Reservation`]s lives.
#[derive(Debug)]
pub struct SharedBudget {
    dir: PathBuf,
    run_lock: Arc<File>,
    figure: BudgetFigure,
    slots: u64,
    /// Where this process starts looking for free slots: processes that start at different
    /// places mostly find a free slot at their first try.
    offset: u64,
}

impl SharedBudget {
    /// Joins the budget of `device_key` (any text naming the device, e.g.
    /// `nvidia-pci0a-NVIDIA_H200`) under `$ROCMFORGE_BUDGET_DIR` or the temporary directory.
    /// `figure` is called only by the first process of a run; see [`default_budget`].
    pub fn join(
        device_key: &str,
        figure: impl FnOnce() -> Result<BudgetFigure, BudgetError>,
    ) -> Result<SharedBudget, BudgetError> {
        let root = match std::env::var_os(BUDGET_DIR_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => std::env::temp_dir().join("rocmforge-budget"),
        };
        SharedBudget::join_in(&root, device_key, figure)
    }

    /// [`SharedBudget::join`] with the root directory given.
    pub fn join_in(
        root: &Path,
        device_key: &str,
        figure: impl FnOnce() -> Result<BudgetFigure, BudgetError>,
    ) -> Result<SharedBudget, BudgetError> {
        let dir = root.join(sanitize_key(device_key));
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let run_path = dir.join("run.lock");
        let run_lock = open_rw(&run_path)?;
        match run_lock.try_lock() {
            Ok(()) => {
                // A new run: an earlier run's fault is not this one's.
                let faulted = dir.join(FAULT_FILE);
                match fs::remove_file(&faulted) {
                    Err(error) if error.kind() != io::ErrorKind::NotFound => {
                        return Err(BudgetError::Io { path: faulted, error });
                    }
                    _ => {}
                }
                write_budget(&dir, &figure()?)?;
                // Not atomic: another process may find run.lock free in between and compute the
                // figure again. Harmless: it computes the same kind of figure at the same time,
                // and everybody reads the budget file only once holding the shared lock, when no
                // writer can be at work any more, so all participants of a run agree on it.
                run_lock.unlock().map_err(io_at(&run_path))?;
                run_lock.lock_shared().map_err(io_at(&run_path))?;
            }
            // The run is on (or its first process is still computing the figure, which the
            // blocking lock waits for).
            Err(TryLockError::WouldBlock) => run_lock.lock_shared().map_err(io_at(&run_path))?,
            Err(TryLockError::Error(error)) => return Err(BudgetError::Io { path: run_path, error }),
        }
        let (figure, slots) = read_budget(&dir)?;
        let offset = RandomState::new().build_hasher().finish() % slots.max(1);
        Ok(SharedBudget { dir, run_lock: Arc::new(run_lock), figure, slots, offset })
    }

    /// The budget in bytes, rounded down to whole slots.
    pub fn budget_bytes(&self) -> u64 {
        self.slots * SLOT_BYTES
    }

    /// The budget in slots of [`SLOT_BYTES`].
    pub fn slot_count(&self) -> u64 {
        self.slots
    }

    /// The figure this run's first process wrote (before rounding to slots).
    pub fn figure(&self) -> &BudgetFigure {
        &self.figure
    }

    /// The device's budget directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The budget of `backend`'s device, under a key naming the physical device (PCI bus and
    /// name, whichever host API opened it), from [`default_budget`] with [`DEVICE_FRACTION`]
    /// ([`DESKTOP_FRACTION`] on a device that drives a display). A run's coordinator
    /// (`cargo xtask gpu-test`) joins first and holds it for the run, so the figure is taken
    /// once, before any test, and a fault record lasts the whole run; test processes join the
    /// same way.
    pub fn join_device(backend: &crate::Backend) -> Result<SharedBudget, BudgetError> {
        let info = backend.info();
        let key = format!("pci{:02x}-{}", info.pci_bus_id, info.name);
        let fraction = if info.drives_display { DESKTOP_FRACTION } else { DEVICE_FRACTION };
        SharedBudget::join(&key, || {
            let memory = backend.memory_info().map_err(|e| BudgetError::Device(e.to_string()))?;
            default_budget(memory.total, memory.free, fraction)
        })
    }

    /// Records that `what` (a test, and the error it got) faulted the device, for the rest of
    /// the run; the first record stands.
    pub fn mark_faulted(&self, what: &str) -> Result<(), BudgetError> {
        let path = self.dir.join(FAULT_FILE);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => file.write_all(what.as_bytes()).map_err(io_at(&path)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(error) => Err(BudgetError::Io { path, error }),
        }
    }

    /// What faulted the device earlier in this run, if anything did.
    pub fn fault(&self) -> Option<String> {
        fs::read_to_string(self.dir.join(FAULT_FILE)).ok()
    }

    /// Reserves `bytes` (rounded up to whole slots, at least one) for `who` (shown to processes
    /// that wait for it), waiting up to `wait` for other processes to free enough.
    pub fn reserve(&self, bytes: u64, who: &str, wait: Duration) -> Result<Reservation, BudgetError> {
        let needed = slots_for(bytes);
        if needed > self.slots {
            return Err(BudgetError::LargerThanBudget { requested: bytes, budget: self.budget_bytes() });
        }
        let start = Instant::now();
        let mut pause = FIRST_PAUSE;
        loop {
            if let Some(slots) = self.try_take(needed)? {
                let (holder, holder_path) = write_holder(&self.dir, who, bytes, needed)?;
                let run_lock = Arc::clone(&self.run_lock);
                return Ok(Reservation { bytes, slots, holder, holder_path, _run_lock: run_lock });
            }
            let waited = start.elapsed();
            if waited >= wait {
                let budget = self.budget_bytes();
                return Err(BudgetError::Timeout {
                    requested: bytes,
                    budget,
                    waited,
                    holders: self.holders(),
                });
            }
            std::thread::sleep(pause.min(wait - waited));
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }

    /// All of `needed` slots or none: a process that sat on part of its slots while waiting for
    /// the rest could deadlock with another doing the same.
    fn try_take(&self, needed: u64) -> Result<Option<Vec<File>>, BudgetError> {
        let mut held = Vec::new();
        for k in 0..self.slots {
            let path = self.dir.join(format!("slot-{}", (self.offset + k) % self.slots));
            // A fresh descriptor each time: flock locks belong to the open file, so two
            // reservations of this process must not share one.
            let file = open_rw(&path)?;
            match file.try_lock() {
                Ok(()) => {
                    held.push(file);
                    if held.len() as u64 == needed {
                        return Ok(Some(held));
                    }
                }
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(error)) => return Err(BudgetError::Io { path, error }),
            }
        }
        Ok(None)
    }

    /// The live holders, largest first. Best effort: it only decorates a timeout. Holder files
    /// nobody has locked belong to processes that died; they are removed on the way.
    fn holders(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(&self.dir) else { return Vec::new() };
        let mut held = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|name| name.starts_with("holder-")) else { continue };
            let Ok(mut file) = File::open(entry.path()) else { continue };
            match file.try_lock_shared() {
                Ok(()) => {
                    // Removing it under our lock is safe even if a live process has just opened
                    // it and not yet locked it: `write_holder` checks for that.
                    let _ = fs::remove_file(entry.path());
                }
                Err(TryLockError::WouldBlock) => {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    held.push(describe_holder(name, &text));
                }
                Err(TryLockError::Error(_)) => {}
            }
        }
        held.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
        held.into_iter().map(|(_, text)| text).collect()
    }
}

/// Slots of a shared budget, held until dropped.
#[derive(Debug)]
pub struct Reservation {
    bytes: u64,
    slots: Vec<File>,
    holder: File,
    holder_path: PathBuf,
    /// Keeps this process a participant of the run while it holds part of its budget.
    _run_lock: Arc<File>,
}

impl Reservation {
    /// The bytes asked for (the slots held may cover a little more).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The slots held.
    pub fn slot_count(&self) -> u64 {
        self.slots.len() as u64
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.holder_path);
        // Unlock rather than just close: a child process being spawned holds copies of our
        // descriptors between its fork and exec, and the lock lives until the last copy closes.
        let _ = self.holder.unlock();
        for slot in &self.slots {
            let _ = slot.unlock();
        }
    }
}

/// The usual figure: `fraction` of the device less what other programs use already, or what
/// `ROCMFORGE_GPU_BUDGET` / `ROCMFORGE_GPU_BUDGET_FRACTION` say (see [`budget_figure`]).
pub fn default_budget(total: u64, free: u64, fraction: f64) -> Result<BudgetFigure, BudgetError> {
    let budget = env_setting(GPU_BUDGET_ENV)?;
    let fraction_setting = env_setting(GPU_BUDGET_FRACTION_ENV)?;
    budget_figure(total, free, fraction, budget.as_deref(), fraction_setting.as_deref())
}

fn env_setting(name: &'static str) -> Result<Option<String>, BudgetError> {
    match std::env::var(name) {
        Ok(value) if value.trim().is_empty() => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(VarError::NotPresent) => Ok(None),
        Err(VarError::NotUnicode(value)) => Err(BudgetError::BadSetting {
            name,
            value: value.to_string_lossy().into_owned(),
            expected: "UTF-8 text",
        }),
    }
}

/// [`default_budget`] with the settings passed in: `budget` (the value of
/// `ROCMFORGE_GPU_BUDGET`) replaces the computed figure, `fraction_setting` (that of
/// `ROCMFORGE_GPU_BUDGET_FRACTION`) replaces `fraction`.
///
/// # Panics
/// If `fraction` is not in (0, 1]: that is the caller's mistake, not the user's.
pub fn budget_figure(
    total: u64,
    free: u64,
    fraction: f64,
    budget: Option<&str>,
    fraction_setting: Option<&str>,
) -> Result<BudgetFigure, BudgetError> {
    assert!(fraction > 0.0 && fraction <= 1.0, "budget fraction {fraction} is not in (0, 1]");
    let figure = if let Some(text) = budget {
        let bytes = parse_size(text).ok_or_else(|| BudgetError::BadSetting {
            name: GPU_BUDGET_ENV,
            value: text.to_owned(),
            expected: "a size: bytes, or a number with a suffix M, MiB, G or GiB (e.g. 40G)",
        })?;
        BudgetFigure { bytes, how: format!("set by {GPU_BUDGET_ENV}={text}") }
    } else {
        let (fraction, whose) = match fraction_setting {
            None => (fraction, "the default fraction"),
            Some(text) => (
                text.trim().parse().ok().filter(|f: &f64| *f > 0.0 && *f <= 1.0).ok_or_else(|| {
                    BudgetError::BadSetting {
                        name: GPU_BUDGET_FRACTION_ENV,
                        value: text.to_owned(),
                        expected: "a number in (0, 1]",
                    }
                })?,
                GPU_BUDGET_FRACTION_ENV,
            ),
        };
        let used = total.saturating_sub(free);
        let bytes = ((fraction * total as f64) as u64).saturating_sub(used);
        let how = format!(
            "{fraction} ({whose}) of the device's {}, less {} that other programs used when the run began",
            Bytes(total),
            Bytes(used)
        );
        BudgetFigure { bytes, how }
    };
    if figure.bytes > total {
        return Err(BudgetError::BudgetLargerThanDevice { budget: figure.bytes, total });
    }
    Ok(figure)
}

/// Bytes, or a number (fractions allowed) with a binary suffix: `1073741824`, `512M`, `1.5GiB`.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = (&text[..split], text[split..].trim());
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" => return number.parse().ok(),
        "m" | "mib" => (1u64 << 20) as f64,
        "g" | "gib" => (1u64 << 30) as f64,
        _ => return None,
    };
    let bytes = number.parse::<f64>().ok()? * scale;
    (bytes <= u64::MAX as f64).then_some(bytes as u64)
}

fn slots_for(bytes: u64) -> u64 {
    bytes.div_ceil(SLOT_BYTES).max(1)
}

/// The key as a single, visible directory name: `.` or `..` would name the root or its parent.
fn sanitize_key(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
        .collect();
    if name.is_empty() || name.starts_with('.') {
        name.insert(0, '_');
    }
    name
}

fn open_rw(path: &Path) -> Result<File, BudgetError> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io_at(path))
}

/// Written to a temporary name and renamed, so that nobody ever reads half a figure, not even
/// after its writer died in mid-write.
fn write_budget(dir: &Path, figure: &BudgetFigure) -> Result<(), BudgetError> {
    let path = dir.join("budget");
    let temporary = dir.join(format!("budget.tmp-{}", std::process::id()));
    let text = format!(
        "bytes {}\nslots {}\nhow {}\n",
        figure.bytes,
        figure.bytes / SLOT_BYTES,
        figure.how.replace('\n', " ")
    );
    fs::write(&temporary, text).map_err(io_at(&temporary))?;
    fs::rename(&temporary, &path).map_err(io_at(&path))
}

fn read_budget(dir: &Path) -> Result<(BudgetFigure, u64), BudgetError> {
    let path = dir.join("budget");
    let text = fs::read_to_string(&path).map_err(io_at(&path))?;
    let field = |key: &str| text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(' '));
    let number = |key: &str| field(key).and_then(|value| value.trim().parse::<u64>().ok());
    match (number("bytes"), number("slots")) {
        (Some(bytes), Some(slots)) => {
            Ok((BudgetFigure { bytes, how: field("how").unwrap_or_default().to_owned() }, slots))
        }
        _ => Err(BudgetError::Io {
            path,
            error: io::Error::new(io::ErrorKind::InvalidData, format!("not a budget file: {text:?}")),
        }),
    }
}

/// Creates and locks this reservation's holder file and says in it who holds what.
fn write_holder(dir: &Path, who: &str, bytes: u64, slots: u64) -> Result<(File, PathBuf), BudgetError> {
    let pid = std::process::id();
    let path = match NEXT_HOLDER.fetch_add(1, Ordering::Relaxed) {
        0 => dir.join(format!("holder-{pid}")),
        n => dir.join(format!("holder-{pid}-{n}")),
    };
    loop {
        let mut file = open_rw(&path)?;
        // Blocks only briefly: no live process but this one uses the name, so the lock can only
        // be held by a process clearing stale holder files, which may have removed the file
        // between our open and our lock. Then we hold a lock on a nameless file: start again.
        file.lock().map_err(io_at(&path))?;
        if !still_at(&file, &path).map_err(io_at(&path))? {
            continue;
        }
        let who = who.replace('\n', " ");
        file.set_len(0)
            .and_then(|()| write!(file, "pid {pid}\nwho {who}\nbytes {bytes}\nslots {slots}\n"))
            .map_err(io_at(&path))?;
        return Ok((file, path));
    }
}

#[cfg(unix)]
fn still_at(file: &File, path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let open = file.metadata()?;
    match fs::metadata(path) {
        Ok(named) => Ok(open.dev() == named.dev() && open.ino() == named.ino()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// Elsewhere an open file cannot be removed, so the file at the path is still ours.
#[cfg(not(unix))]
fn still_at(_: &File, _: &Path) -> io::Result<bool> {
    Ok(true)
}

/// `pid 123 `who` 8.00 GiB` and the bytes to sort by, from a holder file's text.
fn describe_holder(name: &str, text: &str) -> (u64, String) {
    let field = |key: &str| text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(' '));
    let bytes = field("bytes").and_then(|b| b.parse().ok()).unwrap_or(0);
    match (field("pid"), field("who")) {
        (Some(pid), Some(who)) => (bytes, format!("pid {pid} `{who}` {}", Bytes(bytes))),
        // Caught between creating the file and writing it.
        _ => (bytes, format!("{name} (not yet written)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget root of its own for each test, removed at the end.
    struct TempRoot(PathBuf);

    impl TempRoot {
        fn new(test: &str) -> TempRoot {
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
            let dir =
                std::env::temp_dir().join(format!("rocmforge-budget-{test}-{}-{nanos}", std::process::id()));
            fs::create_dir_all(&dir).unwrap();
            TempRoot(dir)
        }

        fn join(&self, slots: u64) -> SharedBudget {
            let figure = BudgetFigure { bytes: slots * SLOT_BYTES, how: format!("{slots} slots for a test") };
            SharedBudget::join_in(&self.0, "test-device", || Ok(figure)).unwrap()
        }
    }

    impl Drop for TempRoot {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn holder_files(budget: &SharedBudget) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(budget.dir())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.starts_with("holder-"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn requests_round_up_to_whole_slots() {
        assert_eq!(slots_for(0), 1);
        assert_eq!(slots_for(1), 1);
        assert_eq!(slots_for(SLOT_BYTES), 1);
        assert_eq!(slots_for(SLOT_BYTES + 1), 2);
        assert_eq!(slots_for(10 * SLOT_BYTES), 10);
    }

    #[test]
    fn the_budget_rounds_down_to_whole_slots() {
        let root = TempRoot::new("round-down");
        let figure = BudgetFigure { bytes: 3 * SLOT_BYTES - 1, how: "almost three".into() };
        let budget = SharedBudget::join_in(&root.0, "dev", || Ok(figure.clone())).unwrap();
        assert_eq!(budget.slot_count(), 2);
        assert_eq!(budget.budget_bytes(), 2 * SLOT_BYTES);
        assert_eq!(budget.figure(), &figure);
    }

    #[test]
    fn device_keys_become_one_plain_directory_name() {
        assert_eq!(sanitize_key("nvidia-pci0a-NVIDIA_H200"), "nvidia-pci0a-NVIDIA_H200");
        assert_eq!(sanitize_key("AMD Radeon/RX 7900"), "AMD_Radeon_RX_7900");
        assert_eq!(sanitize_key(".."), "_..");
        assert_eq!(sanitize_key(""), "_");
    }

    #[test]
    fn later_joiners_read_the_first_ones_figure_and_a_new_run_recomputes_it() {
        let root = TempRoot::new("joiners");
        let first = root.join(8);
        let second =
            SharedBudget::join_in(&root.0, "test-device", || -> Result<BudgetFigure, BudgetError> {
                panic!("only the first process of a run computes the figure")
            })
            .unwrap();
        assert_eq!(second.slot_count(), 8);
        assert_eq!(second.figure().how, "8 slots for a test");
        drop((first, second));
        assert_eq!(root.join(3).slot_count(), 3, "a figure left by an earlier run must be recomputed");
    }

    #[test]
    fn a_fault_is_kept_for_the_run_and_forgotten_by_the_next() {
        let root = TempRoot::new("fault");
        let first = root.join(2);
        assert_eq!(first.fault(), None);
        first.mark_faulted("test a: CUDA_ERROR_ILLEGAL_ADDRESS").unwrap();
        first.mark_faulted("test b: later").unwrap();
        let second = root.join(2);
        assert_eq!(
            second.fault().as_deref(),
            Some("test a: CUDA_ERROR_ILLEGAL_ADDRESS"),
            "the first record stands"
        );
        drop((first, second));
        assert_eq!(root.join(2).fault(), None, "a new run starts without the old fault");
    }

    #[test]
    fn a_reservation_keeps_the_run_going_after_its_budget_is_dropped() {
        let root = TempRoot::new("keeps-run");
        let budget = root.join(4);
        let reservation = budget.reserve(1, "test", Duration::ZERO).unwrap();
        drop(budget);
        assert_eq!(root.join(2).slot_count(), 4, "the run is still on: its figure stands");
        drop(reservation);
    }

    #[test]
    fn two_reservations_that_fit_together_both_succeed() {
        let root = TempRoot::new("fit");
        let budget = root.join(4);
        let a = budget.reserve(2 * SLOT_BYTES, "a", Duration::ZERO).unwrap();
        let b = budget.reserve(SLOT_BYTES + 1, "b", Duration::ZERO).unwrap();
        assert_eq!((a.bytes(), a.slot_count()), (2 * SLOT_BYTES, 2));
        assert_eq!((b.bytes(), b.slot_count()), (SLOT_BYTES + 1, 2));
        assert_eq!(holder_files(&budget).len(), 2, "each reservation has a holder file of its own");
    }

    #[test]
    fn a_reservation_that_does_not_fit_times_out_naming_the_holder() {
        let root = TempRoot::new("timeout");
        let budget = root.join(4);
        let _held = budget.reserve(3 * SLOT_BYTES, "gpu_kernels::big", Duration::ZERO).unwrap();
        let start = Instant::now();
        let error =
            budget.reserve(2 * SLOT_BYTES, "gpu_kernels::small", Duration::from_millis(100)).unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(100));
        let BudgetError::Timeout { requested, budget: whole, waited, ref holders } = error else {
            panic!("expected a timeout, got {error}")
        };
        assert_eq!((requested, whole), (2 * SLOT_BYTES, 4 * SLOT_BYTES));
        assert!(waited >= Duration::from_millis(100));
        assert_eq!(holders.len(), 1, "{holders:?}");
        let text = error.to_string();
        let needle = format!("pid {} `gpu_kernels::big` {}", std::process::id(), Bytes(3 * SLOT_BYTES));
        assert!(text.contains(&needle), "`{needle}` missing from: {text}");
        assert!(text.starts_with("shared GPU budget: waited 0."), "{text}");
        assert!(
            text.contains(" s for 536870912 B (512.00 MiB) of the 1073741824 B (1.00 GiB) budget"),
            "{text}"
        );
    }

    #[test]
    fn a_waiting_reservation_gets_the_slots_once_they_are_freed() {
        let root = TempRoot::new("freed");
        let budget = root.join(2);
        let all = budget.reserve(2 * SLOT_BYTES, "first", Duration::ZERO).unwrap();
        assert!(matches!(budget.reserve(1, "second", Duration::ZERO), Err(BudgetError::Timeout { .. })));
        drop(all);
        assert!(holder_files(&budget).is_empty(), "a dropped reservation removes its holder file");
        let again = budget.reserve(2 * SLOT_BYTES, "second", Duration::ZERO).unwrap();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| budget.reserve(SLOT_BYTES, "third", Duration::from_secs(10)));
            std::thread::sleep(Duration::from_millis(50));
            drop(again);
            assert_eq!(waiter.join().unwrap().unwrap().slot_count(), 1);
        });
    }

    #[test]
    fn a_request_larger_than_the_budget_fails_at_once() {
        let root = TempRoot::new("too-large");
        let budget = root.join(4);
        let start = Instant::now();
        let error = budget.reserve(4 * SLOT_BYTES + 1, "huge", Duration::from_secs(30)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(
            matches!(error, BudgetError::LargerThanBudget { requested, budget }
                if requested == 4 * SLOT_BYTES + 1 && budget == 4 * SLOT_BYTES),
            "{error}"
        );
    }

    #[test]
    fn a_stale_holder_file_is_removed_and_not_listed() {
        let root = TempRoot::new("stale");
        let budget = root.join(1);
        let stale = budget.dir().join("holder-4000000");
        fs::write(&stale, "pid 4000000\nwho died_long_ago\nbytes 268435456\nslots 1\n").unwrap();
        let _held = budget.reserve(1, "alive", Duration::ZERO).unwrap();
        let text = budget.reserve(1, "waiter", Duration::ZERO).unwrap_err().to_string();
        assert!(!text.contains("died_long_ago"), "{text}");
        assert!(text.contains("`alive`"), "{text}");
        assert!(!stale.exists(), "the stale holder file should be gone");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1073741824"), Some(1 << 30));
        assert_eq!(parse_size("40G"), Some(40 << 30));
        assert_eq!(parse_size("40 GiB"), Some(40 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("512mib"), Some(512 << 20));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        for bad in ["", "G", "40GB", "40T", "-1G", "1e9", "1.5", "forty", "4.0.0G"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_figure_is_a_fraction_of_the_device_less_what_others_use() {
        let (total, free) = (100 << 30, 90 << 30);
        let figure = budget_figure(total, free, 0.7, None, None).unwrap();
        assert_eq!(figure.bytes, 60 << 30);
        assert!(figure.how.contains("0.7 (the default fraction)"), "{}", figure.how);
        let figure = budget_figure(total, free, 0.7, None, Some("0.5")).unwrap();
        assert_eq!(figure.bytes, 40 << 30);
        assert!(figure.how.contains(GPU_BUDGET_FRACTION_ENV), "{}", figure.how);
        assert_eq!(budget_figure(total, 10 << 30, 0.7, None, None).unwrap().bytes, 0, "floored at 0");
    }

    #[test]
    fn a_set_budget_replaces_the_figure() {
        let figure = budget_figure(100 << 30, 1 << 30, 0.7, Some("40G"), Some("0.1")).unwrap();
        assert_eq!(figure.bytes, 40 << 30);
        assert_eq!(figure.how, format!("set by {GPU_BUDGET_ENV}=40G"));
    }

    #[test]
    fn a_budget_larger_than_the_device_is_refused() {
        let error = budget_figure(80 << 30, 80 << 30, 0.7, Some("81G"), None).unwrap_err();
        assert!(
            matches!(error, BudgetError::BudgetLargerThanDevice { budget, total }
                if budget == 81 << 30 && total == 80 << 30),
            "{error}"
        );
    }

    #[test]
    fn malformed_settings_name_the_variable_and_the_value() {
        let cases = [
            (Some("40GB"), None, GPU_BUDGET_ENV, "40GB"),
            (Some("lots"), None, GPU_BUDGET_ENV, "lots"),
            (None, Some("0"), GPU_BUDGET_FRACTION_ENV, "0"),
            (None, Some("1.5"), GPU_BUDGET_FRACTION_ENV, "1.5"),
            (None, Some("NaN"), GPU_BUDGET_FRACTION_ENV, "NaN"),
            (None, Some("half"), GPU_BUDGET_FRACTION_ENV, "half"),
        ];
        for (budget, fraction, name, value) in cases {
            let text = budget_figure(80 << 30, 80 << 30, 0.7, budget, fraction).unwrap_err().to_string();
            assert!(text.starts_with(&format!("{name}=\"{value}\": expected")), "{text}");
        }
    }
}
