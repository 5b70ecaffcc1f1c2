//! Isolation from other work on the device: long kernels on a stream that is not ours do not
//! hold up our stream's synchronisation, and a device mostly taken leaves the guard refusing
//! cleanly, never crashing.

use rocm_kernels::spin::{spin_cycles, spin_reference};
use rocm_runtime::Error;
use rocm_testkit::{Rng, gpu_test};

/// About half a second at the 1.5-2 GHz clocks of current GPUs: thousands of times longer than
/// the work we queue on our own stream meanwhile.
const SPIN_CYCLES: u64 = 1_000_000_000;

#[test]
#[serial_test::parallel]
fn a_long_kernel_on_another_stream_does_not_delay_our_synchronisation() {
    let gpu = gpu_test!();
    // The stand-in for another program: a stream this test does not synchronise.
    let foreign = gpu.backend().create_stream().unwrap();
    let mut waited = foreign.alloc::<u64>(1).unwrap();
    spin_cycles(SPIN_CYCLES, &mut waited).unwrap();

    // Our own work, and a wait for it.
    let data = Rng::new(77).f32_vec(1 << 20, -1.0, 1.0);
    let mine = gpu.stream().upload(&data).unwrap();
    assert_eq!(mine.to_vec().unwrap(), data);
    gpu.stream().synchronize().unwrap();

    // The evidence is an ordering, not a time: our synchronisation returned while the foreign
    // kernel was still running. A device-wide wait could only return after it.
    assert!(
        !foreign.is_idle().unwrap(),
        "the foreign stream finished first: the spin was too short to show anything"
    );
    foreign.synchronize().unwrap();
    let spun = waited.to_vec().unwrap()[0];
    assert!(spin_reference(SPIN_CYCLES, spun), "spun {spun} cycles, asked for {SPIN_CYCLES}");
}

/// Needs the whole budget to itself: `serial` keeps the other tests of this process (marked
/// `parallel`) from running while it holds most of it.
#[test]
#[serial_test::serial]
fn with_most_of_the_budget_taken_the_guard_refuses_cleanly() {
    let gpu = gpu_test!();
    let ledger = gpu.backend().ledger();
    // Take most of what the guard still allows (other tests of this process may hold some).
    let available = ledger.budget().saturating_sub(ledger.in_use());
    let hog_bytes = (available as f64 * 0.9) as usize;
    let hog = gpu.stream().alloc::<u8>(hog_bytes).unwrap();
    let in_use = ledger.in_use();

    let err = gpu.stream().alloc::<u8>(available as usize / 5).unwrap_err();
    let Error::OverBudget(refusal) = &err else { panic!("expected OverBudget, got {err}") };
    assert!(refusal.in_use >= hog_bytes as u64 && refusal.requested == available / 5, "{err}");
    assert_eq!(ledger.in_use(), in_use, "a refusal must not change the ledger");

    // Small work still goes through while the hog is held, and after it is gone.
    let small = Rng::new(5).f32_vec(4097, -1.0, 1.0);
    assert_eq!(gpu.stream().upload(&small).unwrap().to_vec().unwrap(), small);
    drop(hog);
    let again = gpu.stream().alloc::<u8>(available as usize / 5).unwrap();
    drop(again);
}
