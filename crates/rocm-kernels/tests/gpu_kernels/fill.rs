//! `fill` against its CPU reference.

use rocm_kernels::fill::{fill_f32, fill_reference};
use rocm_testkit::{Rng, Tolerance, assert_close, gpu_test};

#[test]
fn fill_writes_every_element_at_awkward_sizes() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xf111);
    for n in [1, 7, 127, 255, 257, 4097, 1_000_003] {
        let value = rng.uniform(-1e3, 1e3) as f32;
        let mut out = gpu.stream().alloc::<f32>(n).unwrap();
        out.poison().unwrap();
        fill_f32(&mut out, value).unwrap();
        let mut expected = vec![f32::NAN; n];
        fill_reference(&mut expected, value);
        assert_close(&out.to_vec().unwrap(), &expected, Tolerance::EXACT);
    }
}

#[test]
fn fill_of_an_empty_buffer_is_a_no_op() {
    let gpu = gpu_test!();
    let mut out = gpu.stream().alloc::<f32>(0).unwrap();
    fill_f32(&mut out, 1.0).unwrap();
}

/// The health gate's planted fault: a kernel writing to an address no allocation covers, which
/// faults the device's context. Ignored in every normal run; `docs/gpu-runs.md` shows the run
/// that includes it, where every later test of the run on that device fails at once naming this
/// one instead of failing with its own unrelated error.
#[test]
#[ignore = "planted device fault: faults its device on purpose (docs/gpu-runs.md, the health gate)"]
fn planted_device_fault_writes_to_an_unmapped_address() {
    let gpu = gpu_test!();
    let backend = gpu.backend();
    let image = rocm_kernels::embedded::image(backend.info().code_objects, rocm_kernels::KernelModule::Fill)
        .expect("the fill kernel is built (cargo xtask kernels)");
    let kernel = backend.load_module(image).unwrap().function("rf_fill_f32").unwrap();
    let config = rocm_runtime::LaunchConfig::linear(1024, 256, 4);
    // SAFETY: not safe, on purpose: rf_fill_f32(float* out, float value, u64 n) writes 1024
    // floats at address 0x1000, which no allocation covers. The fault stays in this process's
    // context on NVIDIA; the test kit records it so the rest of the run stays off the device.
    unsafe { gpu.stream().launch(&kernel).arg(0x1000u64).arg(1.0f32).arg(1024u64).launch(config).unwrap() };
    let fault = gpu.stream().synchronize().unwrap_err();
    assert!(fault.is_device_fault(), "expected a device fault, got {fault}");
}
