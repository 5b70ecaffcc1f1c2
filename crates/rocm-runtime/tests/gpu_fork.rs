//! `Stream::fork` on a real device: work on one stream over the other's buffers, frees held
//! back until the closing join (also after a panic), and the rules that keep it sound: lent
//! buffers are refused outside the fork and on other threads, and forks and captures exclude
//! each other. The launches across streams here are vendor BLAS GEMMs (the runtime's own
//! launch path, with no kernels of ours); kernels across a fork are tested in rocm-kernels
//! (`gpu_kernels::dequant_gemm`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use rocm_runtime::{Blas, DeviceBuffer, Error, GemmDesc, Stream};
use rocm_testkit::{GpuTest, gpu_test};

/// Square products long enough (2 x 2048^3 flops) to still run when the host races ahead.
const N: usize = 2048;

/// The process's vendor BLAS, or `None` with a line saying why (a HIP build without one).
fn blas_or_none(gpu: &GpuTest) -> Option<std::sync::Arc<Blas>> {
    match Blas::open(gpu.backend()) {
        Ok(blas) => Some(blas),
        Err(e) => {
            eprintln!("no vendor BLAS ({e}): the launches across streams are not exercised here");
            None
        }
    }
}

/// `n x n` of `value`, filled on `stream` (queued, not waited for).
fn filled(stream: &Stream, value: f32) -> DeviceBuffer<f32> {
    let mut b = stream.alloc::<f32>(N * N).unwrap();
    b.fill(value).unwrap();
    b
}

/// Every element of `c` is `want`, exactly (sums of 0.5s in f32).
fn assert_all(c: &DeviceBuffer<f32>, want: f32, what: &str) {
    let got = c.to_vec().unwrap();
    let bad = got.iter().position(|&v| v != want);
    assert!(bad.is_none(), "{what}: element {} is {}, want {want}", bad.unwrap(), got[bad.unwrap()]);
}

#[test]
fn a_fork_holds_back_frees_until_its_join() {
    let gpu = gpu_test!();
    let (main, side) = (gpu.stream().clone(), gpu.new_stream());
    let live = || gpu.account().live_bytes();
    let (main_buffer, side_buffer) = (main.alloc::<f32>(1000).unwrap(), side.alloc::<f32>(3000).unwrap());
    let before = live();
    main.fork(&side, || {
        drop(main_buffer);
        drop(side_buffer);
        assert_eq!(live(), before, "buffers dropped in a fork stay allocated until it ends");
    })
    .unwrap();
    assert_eq!(live(), before - 16_000, "both freed at the join");
    main.synchronize().unwrap();
    side.synchronize().unwrap();
}

/// The GEMM on `side` reads two buffers of `main`, filled on `main` just before the fork
/// (the opening join orders them), and one of them is dropped inside while the GEMM runs: its
/// memory must not be handed to the next allocation on `main`, poisoned at once. Every output
/// element is then exactly K x 1 x 0.5.
#[test]
fn work_across_a_fork_sees_the_filled_inputs_and_keeps_them_alive() {
    let gpu = gpu_test!();
    let Some(blas) = blas_or_none(&gpu) else { return };
    let (main, side) = (gpu.stream().clone(), gpu.new_stream());
    let desc = GemmDesc::new(N, N, N);
    for round in 0..3 {
        let a = filled(&main, 1.0);
        let b = filled(&main, 0.5);
        let mut c = side.alloc::<f32>(N * N).unwrap();
        c.poison().unwrap();
        main.fork(&side, || {
            blas.gemm(&desc, &a, &b, &mut c).unwrap();
            drop(a);
            let mut reuse = main.alloc::<f32>(N * N).unwrap();
            reuse.poison().unwrap();
        })
        .unwrap();
        drop(b);
        assert_all(&c, N as f32 * 0.5, &format!("round {round}"));
    }
}

/// Lent buffers only inside the fork and only on its thread: a launch before it, after it,
/// or from another thread during it is the usual stream mismatch.
#[test]
fn lent_buffers_are_refused_outside_the_fork_and_on_other_threads() {
    let gpu = gpu_test!();
    let Some(blas) = blas_or_none(&gpu) else { return };
    let (main, side) = (gpu.stream().clone(), gpu.new_stream());
    let desc = GemmDesc::new(64, 64, 64);
    let (a, b) = (main.upload(&[0.5f32; 64 * 64]).unwrap(), main.upload(&[2.0f32; 64 * 64]).unwrap());
    let mut c = side.alloc::<f32>(64 * 64).unwrap();
    let mismatch = |r: rocm_runtime::Result<()>| {
        assert!(matches!(r, Err(Error::StreamMismatch { .. })), "{r:?}");
    };
    mismatch(blas.gemm(&desc, &a, &b, &mut c));
    main.fork(&side, || {
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut other = side.alloc::<f32>(64 * 64).unwrap();
                mismatch(blas.gemm(&desc, &a, &b, &mut other));
            });
        });
        blas.gemm(&desc, &a, &b, &mut c).unwrap();
    })
    .unwrap();
    mismatch(blas.gemm(&desc, &a, &b, &mut c));
    assert_all(&c, 64.0, "the product queued inside the fork");
}

#[test]
fn forks_and_captures_exclude_each_other() {
    let gpu = gpu_test!();
    let (main, side) = (gpu.stream().clone(), gpu.new_stream());
    let mut probe = main.alloc::<u8>(1).unwrap();
    // A capture of a stream that is forked, on either side.
    for capturing in [&main, &side] {
        let refused = main.fork(&side, || capturing.capture(|_| probe.fill_bytes(1)).map(drop)).unwrap();
        let Err(Error::CaptureRefused { operation, reason, .. }) = refused else {
            panic!("a capture inside a fork: {refused:?}")
        };
        assert_eq!(operation, "starting a capture");
        assert!(reason.contains("Stream::fork"), "{reason}");
    }
    // A fork of a stream that records (where graphs exist at all).
    let inside = main.capture(|s| match s.fork(&side, || ()) {
        Err(Error::CaptureRefused { operation, .. }) => {
            assert_eq!(operation, "forking it with another stream");
            Ok(())
        }
        other => panic!("a fork inside a capture: {other:?}"),
    });
    match inside {
        Ok(_) | Err(Error::GraphsUnsupported(_)) => {}
        Err(e) => panic!("{e}"),
    }
    // Both streams work normally afterwards.
    let graph_free = main.capture(|_| probe.fill_bytes(2)).map(drop);
    assert!(matches!(graph_free, Ok(()) | Err(Error::GraphsUnsupported(_))), "{graph_free:?}");
}

/// A panic inside the fork still joins the streams and frees what was dropped, and the
/// streams go on working.
#[test]
fn a_panic_inside_a_fork_joins_and_frees() {
    let gpu = gpu_test!();
    let (main, side) = (gpu.stream().clone(), gpu.new_stream());
    let before = gpu.account().live_bytes();
    let doomed = side.alloc::<f32>(4096).unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        main.fork(&side, || {
            drop(doomed);
            panic!("inside the fork");
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(gpu.account().live_bytes(), before, "the buffer dropped before the panic is freed");
    let mut after = side.alloc::<f32>(16).unwrap();
    after.fill(3.0).unwrap();
    assert_eq!(after.to_vec().unwrap(), [3.0; 16]);
    // A fork of a stream with itself is just the closure.
    assert_eq!(main.fork(&main, || 7).unwrap(), 7);
}
