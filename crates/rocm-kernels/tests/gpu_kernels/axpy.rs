//! `axpy` against its CPU reference, and the launch checks it exercises.

use rocm_kernels::KernelError;
use rocm_kernels::axpy::{axpy_f32, axpy_reference};
use rocm_runtime::{Error, LaunchConfig};
use rocm_testkit::{Rng, Tolerance, assert_close, gpu_test};

#[test]
fn axpy_matches_the_reference_at_awkward_sizes() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xa8e1);
    for n in [1, 7, 127, 255, 257, 4097, 1_000_003] {
        let a = rng.uniform(-3.0, 3.0) as f32;
        let x = rng.f32_vec(n, -10.0, 10.0);
        let y = rng.f32_vec(n, -10.0, 10.0);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut dy = gpu.stream().upload(&y).unwrap();
        axpy_f32(a, &dx, &mut dy).unwrap();
        let mut expected = y.clone();
        axpy_reference(a, &x, &mut expected);
        // Both sides compute one fused multiply-add per element: bit-exact.
        assert_close(&dy.to_vec().unwrap(), &expected, Tolerance::EXACT);
    }
}

#[test]
fn axpy_refuses_mismatched_lengths() {
    let gpu = gpu_test!();
    let x = gpu.stream().alloc::<f32>(10).unwrap();
    let mut y = gpu.stream().alloc::<f32>(11).unwrap();
    let err = axpy_f32(1.0, &x, &mut y).unwrap_err();
    assert!(matches!(err, KernelError::Shape { kernel: "axpy", .. }), "{err}");
}

#[test]
fn a_buffer_of_another_stream_is_refused() {
    let gpu = gpu_test!();
    let other = gpu.new_stream();
    let x = other.upload(&[1.0f32; 33]).unwrap();
    let mut y = gpu.stream().upload(&[2.0f32; 33]).unwrap();
    let err = axpy_f32(1.0, &x, &mut y).unwrap_err();
    assert!(matches!(err, KernelError::Runtime(Error::StreamMismatch { .. })), "{err}");
    assert_eq!(y.to_vec().unwrap(), vec![2.0; 33], "nothing may run after a refused launch");
}

#[test]
fn wrong_argument_sizes_are_refused_where_the_driver_reports_them() {
    let gpu = gpu_test!();
    let backend = gpu.backend();
    let image = rocm_kernels::embedded::image(backend.info().code_objects, rocm_kernels::KernelModule::Axpy);
    let image = image.expect("the axpy kernel is built (cargo xtask kernels)");
    let kernel = backend.load_module(image).unwrap().function("rf_axpy_f32").unwrap();
    let Some(sizes) = kernel.param_sizes() else {
        eprintln!("this driver does not report parameter sizes; nothing to check");
        return;
    };
    assert_eq!(sizes, [4, 8, 8, 8], "rf_axpy_f32(float, const float*, float*, u64)");
    let mut y = gpu.stream().alloc::<f32>(8).unwrap();
    let config = LaunchConfig::linear(8, 64, 1);
    // SAFETY: refused before launch: the u32 count does not match the kernel's u64.
    let err = unsafe { gpu.stream().launch(&kernel).arg(1.0f32).buffer_mut(&mut y).arg(8u32).launch(config) }
        .unwrap_err();
    assert!(matches!(err, Error::LaunchArguments { .. }), "{err}");
    assert!(err.to_string().contains("rf_axpy_f32"), "{err}");
    let missing = rocm_kernels::embedded::nvidia("no_such_kernel");
    assert!(missing.is_none());
    let err = backend.load_module(image).unwrap().function("no_such_kernel").unwrap_err();
    assert!(matches!(err, Error::FunctionNotFound { .. }), "{err}");
}
