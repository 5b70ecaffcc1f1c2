//! Kernel launches recorded into a graph (`rocm_runtime::Stream::capture_with`): four launches
//! of three kernels, each reading the one before, replayed with new inputs and compared bit for
//! bit with the same launches run eagerly, and with the CPU references.

use rocm_kernels::KernelError;
use rocm_kernels::axpy::{axpy_f32, axpy_reference};
use rocm_kernels::fill::{fill_f32, fill_reference};
use rocm_kernels::swiglu::{swiglu, swiglu_reference};
use rocm_runtime::{DeviceBuffer, Error, Stream};
use rocm_testkit::{Rng, Tolerance, assert_close, gpu_test};

use crate::f32_bits;

const A: f32 = 0.75;

/// Inputs `x`, `u`; intermediate `y`; output `out`.
struct Layer {
    x: DeviceBuffer<f32>,
    u: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
}

impl Layer {
    fn new(stream: &Stream, n: usize) -> Layer {
        let mut layer = Layer {
            x: stream.alloc(n).unwrap(),
            u: stream.alloc(n).unwrap(),
            y: stream.alloc(n).unwrap(),
            out: stream.alloc(n).unwrap(),
        };
        for buffer in [&mut layer.x, &mut layer.u, &mut layer.y, &mut layer.out] {
            buffer.poison().unwrap();
        }
        layer
    }
}

/// `out = silu(A x + 0.5) u - x`, as four launches.
fn launches(layer: &mut Layer) -> Result<(), KernelError> {
    fill_f32(&mut layer.y, 0.5)?;
    axpy_f32(A, &layer.x, &mut layer.y)?;
    swiglu(&layer.y, &layer.u, &mut layer.out)?;
    axpy_f32(-1.0, &layer.x, &mut layer.out)
}

fn reference(x: &[f32], u: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0; x.len()];
    fill_reference(&mut y, 0.5);
    axpy_reference(A, x, &mut y);
    let mut out = vec![0.0; x.len()];
    swiglu_reference(&y, u, &mut out);
    axpy_reference(-1.0, x, &mut out);
    out
}

#[test]
fn graph_of_kernel_launches_replays_like_the_eager_launches() {
    let gpu = gpu_test!();
    let stream = gpu.stream();
    let mut rng = Rng::new(0x6a0f_1001);
    for n in [1usize, 4097, 1_000_003] {
        // Eager first, so the modules are loaded before anything is recorded.
        let mut eager = Layer::new(stream, n);
        eager.x.fill(0.25).unwrap();
        eager.u.fill(-0.5).unwrap();
        launches(&mut eager).unwrap();
        let mut recorded = Layer::new(stream, n);
        let graph = match stream.capture_with(&mut recorded, |_, layer| launches(layer)) {
            Ok(graph) => graph,
            Err(KernelError::Runtime(Error::GraphsUnsupported(why))) => {
                eprintln!("graphs are unsupported by this HIP library, which is allowed: {why}");
                return;
            }
            Err(e) => panic!("n {n}: capturing the launches failed: {e}"),
        };
        let out = graph.state().out.to_vec().unwrap();
        assert!(
            out.iter().all(|v| v.is_nan()),
            "n {n}: the capture ran the kernels instead of recording them"
        );
        for replay in 0..4 {
            let (x, u) = (rng.f32_vec(n, -1.0, 1.0), rng.f32_vec(n, -2.0, 2.0));
            eager.x.copy_from_host(&x).unwrap();
            eager.u.copy_from_host(&u).unwrap();
            eager.y.poison().unwrap();
            eager.out.poison().unwrap();
            launches(&mut eager).unwrap();
            let want = eager.out.to_vec().unwrap();
            // expf differs from the host's by an ulp or two; the rest is exact.
            assert_close(&want, &reference(&x, &u), Tolerance::new(1e-5, 1e-5));

            let state = graph.state();
            state.x.write_from_host(&x).unwrap();
            state.u.write_from_host(&u).unwrap();
            state.y.write_from_host(&vec![f32::NAN; n]).unwrap();
            state.out.write_from_host(&vec![f32::NAN; n]).unwrap();
            graph.launch().unwrap();
            let got = state.out.to_vec().unwrap();
            assert_eq!(
                f32_bits(&got),
                f32_bits(&want),
                "n {n}: replay {replay} differs from the eager launches"
            );
        }
    }
}
