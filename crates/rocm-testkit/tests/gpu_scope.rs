//! The test kit's guarantees, tested: leaks are caught exactly and named, and many threads
//! with their own scopes and streams get exact results while sharing one backend.

use rocm_kernels::axpy::{axpy_f32, axpy_reference};
use rocm_kernels::fill::fill_f32;
use rocm_testkit::{GpuTest, LeakReport, Rng, gpu_test};

#[test]
fn a_planted_leak_fails_the_check_and_names_its_site() {
    let gpu = gpu_test!();
    let inner = GpuTest::begin_named_with_memory("planted leak", 256 << 20)
        .expect("the GPU is there: the outer scope opened");
    let leaked = inner.stream().alloc::<f32>(1234).unwrap();
    let line = line!() - 1;
    let report = inner.check_leaks().unwrap_err();
    let LeakReport::Live { bytes, allocations, .. } = &report else {
        panic!("expected a live leak: {report}")
    };
    assert_eq!(*bytes, 1234 * 4);
    assert_eq!(allocations.len(), 1);
    assert_eq!((allocations[0].site.file(), allocations[0].site.line()), (file!(), line), "{report}");
    let text = report.to_string();
    assert!(text.contains("planted leak") && text.contains(&format!("gpu_scope.rs:{line}")), "{text}");
    // Once the buffer is gone the same scope is clean, and the outer scope never saw it.
    drop(leaked);
    inner.finish().unwrap();
    assert_eq!(gpu.account().live_bytes(), 0);
}

#[test]
fn a_scope_dropped_with_live_memory_panics() {
    let _outer = gpu_test!();
    let gpu = GpuTest::begin_named_with_memory("leaky scope", 256 << 20)
        .expect("the GPU is there: the outer scope opened");
    let buffer = gpu.stream().alloc::<u8>(100).unwrap();
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(gpu)))
        .expect_err("dropping a scope with live memory must panic");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("GPU leak in `leaky scope`: 100 B still allocated in 1 buffer(s)"), "{message}");
    drop(buffer);
}

#[test]
fn sixteen_threads_with_their_own_streams_get_exact_results() {
    let _outer = gpu_test!();
    // Under a race checker each launch costs milliseconds: fewer rounds, same threads.
    let rounds = if rocm_testkit::sanitizer().is_some() { 10 } else { 200 };
    std::thread::scope(|s| {
        for t in 0..16u64 {
            s.spawn(move || {
                // A few MiB each: 16 default reservations would hold 64 GiB of the device.
                let gpu = GpuTest::begin_named_with_memory(format!("worker {t}"), 256 << 20).unwrap();
                let mut rng = Rng::new(1000 + t);
                for i in 0..rounds {
                    let n = 1 + rng.below(5000) as usize;
                    let a = rng.uniform(-2.0, 2.0) as f32;
                    let x = rng.f32_vec(n, -1.0, 1.0);
                    let y = rng.f32_vec(n, -1.0, 1.0);
                    let dx = gpu.stream().upload(&x).unwrap();
                    let mut dy = gpu.stream().upload(&y).unwrap();
                    axpy_f32(a, &dx, &mut dy).unwrap();
                    let mut expected = y.clone();
                    axpy_reference(a, &x, &mut expected);
                    let got = dy.to_vec().unwrap();
                    assert!(
                        got.iter().zip(&expected).all(|(g, e)| g.to_bits() == e.to_bits()),
                        "thread {t} iteration {i}: axpy of {n} differs"
                    );
                    let value = t as f32 + i as f32 * 0.5;
                    fill_f32(&mut dy, value).unwrap();
                    assert!(
                        dy.to_vec().unwrap().iter().all(|&v| v == value),
                        "thread {t} iteration {i}: fill"
                    );
                }
                gpu.finish().unwrap();
            });
        }
    });
}
