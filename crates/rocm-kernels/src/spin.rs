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

/// CPU reference of [`spin_cycles`]'s result: the lower bound on what it reports.
pub fn spin_reference(cycles: u64, waited: u64) -> bool {
    waited >= cycles
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    vec![Launchable::new(KernelModule::Spin, "rf_spin_cycles", Needs::Nothing)]
}
