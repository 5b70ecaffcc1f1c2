//! `spin`: a kernel that keeps its stream busy for a number of clock cycles
//! (`kernels/spin.hip`). Test support: long work on a stream that is not the test's.

use rocm_runtime::{DeviceBuffer, LaunchConfig};

use crate::KernelModule;
use crate::error::{Result, ensure};
use crate::launchable::{Launchable, Needs};
use crate::loader;

/// Queues a one-thread kernel on `waited`'s stream that spins for at least `cycles` clock
/// cycles, then stores the cycles it spun in `waited[0]`.
pub fn spin_cycles(cycles: u64, waited: &mut DeviceBuffer<u64>) -> Result<()> {
    ensure(!waited.is_empty(), "spin", || "`waited` needs one element".into())?;
    let stream = waited.stream().clone();
    let kernel = loader::kernel(&stream, KernelModule::Spin, "rf_spin_cycles")?;
    let config = LaunchConfig { grid: [1, 1, 1], block: [1, 1, 1], shared_mem_bytes: 0 };
    // SAFETY: rf_spin_cycles(u64 cycles, u64* waited) writes waited[0] only; it has one element.
    unsafe { stream.launch(&kernel).arg(cycles).buffer_mut(waited).launch(config)? };
    Ok(())
}

/// A dependent launch (`Launch::dependent`) of a one-thread kernel on `out`'s stream that lets
/// the kernel behind it start at once, spins for at least `cycles` clock cycles, then stores the
/// cycles it spun in every little-endian 64-bit word of `out` (a whole number of them). Test
/// support for the kernels that read a buffer before they wait for the kernel ahead
/// (`Launch::reads_before_wait`; they take bytes): one that read `out` so would see its old
/// contents, unless its launch is made an ordinary one.
pub fn spin_cycles_then_store(cycles: u64, out: &mut DeviceBuffer<u8>) -> Result<()> {
    ensure(out.len().is_multiple_of(8), "spin", || {
        format!("{} bytes are not whole 64-bit words", out.len())
    })?;
    let stream = out.stream().clone();
    let kernel = loader::kernel(&stream, KernelModule::Spin, "rf_spin_cycles_then_store")?;
    let config = LaunchConfig { grid: [1, 1, 1], block: [1, 1, 1], shared_mem_bytes: 0 };
    let n = (out.len() / 8) as u64;
    // SAFETY: rf_spin_cycles_then_store(u64 cycles, u64* out, u64 n) writes the n = len / 8
    // 64-bit words of out (device allocations are 256-byte aligned), after its wait for the
    // kernel ahead (the dependent launch's contract).
    unsafe { stream.launch(&kernel).dependent().arg(cycles).buffer_mut(out).arg(n).launch(config)? };
    Ok(())
}

/// CPU reference of [`spin_cycles`]'s result: the lower bound on what it reports.
pub fn spin_reference(cycles: u64, waited: u64) -> bool {
    waited >= cycles
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    vec![
        Launchable::new(KernelModule::Spin, "rf_spin_cycles", Needs::Nothing),
        Launchable::new(KernelModule::Spin, "rf_spin_cycles_then_store", Needs::Nothing),
    ]
}
