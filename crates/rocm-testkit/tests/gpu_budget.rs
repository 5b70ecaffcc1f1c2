//! The shared budget's demonstration on a GPU (`scripts/gpu_budget_demo.sh`, with
//! `ROCMFORGE_GPU_BUDGET=16G`): one test holds most of the budget for a while, another asks for
//! more than is left and fails once its wait runs out, naming the holder, while the rest of the
//! suite still runs in what is left; a killed holder gives its share back at once. Ignored in
//! normal runs: they only mean something under the script's settings.

use std::time::Duration;

use rocm_testkit::gpu_test;

const GIB: u64 = 1 << 30;

#[test]
#[ignore = "budget demonstration: scripts/gpu_budget_demo.sh"]
fn budget_demo_holds_12_gib_for_40_s() {
    let gpu = gpu_test!(memory = 12 * GIB);
    // The declaration is this process's guard budget, and it can be used.
    assert_eq!(gpu.backend().ledger().budget(), 12 * GIB);
    let held = gpu.stream().alloc::<u8>(11 * GIB as usize).unwrap();
    std::thread::sleep(Duration::from_secs(40));
    drop(held);
}

#[test]
#[ignore = "budget demonstration: scripts/gpu_budget_demo.sh"]
fn budget_demo_asks_for_8_gib_while_12_are_held() {
    // Let the holder take its share first (both start together).
    std::thread::sleep(Duration::from_secs(3));
    let _gpu = gpu_test!(memory = 8 * GIB);
}

#[test]
#[ignore = "budget demonstration: scripts/gpu_budget_demo.sh"]
fn budget_demo_takes_the_whole_16_gib_budget() {
    let gpu = gpu_test!(memory = 16 * GIB);
    assert_eq!(gpu.backend().ledger().budget(), 16 * GIB);
}
