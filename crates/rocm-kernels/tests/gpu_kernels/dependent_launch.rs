//! Dependent launches (`Launch::dependent`, kernels/include/rocmforge_dependent_launch.h): a
//! chain of large launches in which each kernel reads what the one before wrote and overwrites
//! what it read, so a kernel that started work before the one ahead of it finished would read
//! NaN-poisoned or half-written rows, or spoil its predecessor's input. Run eagerly and
//! replayed from a graph, with new inputs each time, against the CPU references; the replay
//! must give the eager launches' bits.
//!
//! On an sm_90+ NVIDIA device the rmsnorm and swiglu launches are programmatic dependent
//! launches, and the axpy launch between them an ordinary one (a dependent launch after an
//! ordinary one, and the reverse). Elsewhere every launch is ordinary, and the test checks the
//! same results.

use rocm_kernels::KernelError;
use rocm_kernels::axpy::{axpy_f32, axpy_reference};
use rocm_kernels::rmsnorm::{RmsNorm, rmsnorm_reference};
use rocm_kernels::swiglu::{swiglu, swiglu_reference};
use rocm_runtime::{DeviceBuffer, Error, Stream};
use rocm_testkit::{Rng, Tolerance, assert_close, gpu_test};

use crate::f32_bits;

/// 2048 rows of 4096 f32: 32 MiB a buffer, so each launch runs for tens of microseconds.
const ROWS: usize = 2048;
const COLS: usize = 4096;
const EPS: f32 = 1e-5;

struct Chain {
    x: DeviceBuffer<f32>,
    weight: DeviceBuffer<f32>,
    a: DeviceBuffer<f32>,
    b: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
}

impl Chain {
    fn new(stream: &Stream) -> Chain {
        let n = ROWS * COLS;
        let mut chain = Chain {
            x: stream.alloc(n).unwrap(),
            weight: stream.alloc(COLS).unwrap(),
            a: stream.alloc(n).unwrap(),
            b: stream.alloc(n).unwrap(),
            out: stream.alloc(n).unwrap(),
        };
        for buffer in [&mut chain.x, &mut chain.weight, &mut chain.a, &mut chain.b, &mut chain.out] {
            buffer.poison().unwrap();
        }
        chain
    }
}

/// a = rmsnorm(x); b = silu(a) x; a = rmsnorm(b) (overwriting what the swiglu read);
/// b += 0.5 a (ordinary); out = rmsnorm(b).
fn launches(c: &mut Chain) -> Result<(), KernelError> {
    let norm = RmsNorm::new(ROWS, COLS, EPS);
    norm.run(&c.x, &c.weight, &mut c.a)?;
    swiglu(&c.a, &c.x, &mut c.b)?;
    norm.run(&c.b, &c.weight, &mut c.a)?;
    axpy_f32(0.5, &c.a, &mut c.b)?;
    norm.run(&c.b, &c.weight, &mut c.out)
}

fn reference(x: &[f32], weight: &[f32]) -> Vec<f32> {
    let norm = RmsNorm::new(ROWS, COLS, EPS);
    let mut a = vec![0.0; x.len()];
    let mut b = vec![0.0; x.len()];
    let mut out = vec![0.0; x.len()];
    rmsnorm_reference(&norm, x, weight, &mut a);
    swiglu_reference(&a, x, &mut b);
    rmsnorm_reference(&norm, &b, weight, &mut a);
    axpy_reference(0.5, &a, &mut b);
    rmsnorm_reference(&norm, &b, weight, &mut out);
    out
}

#[test]
fn dependent_launches_wait_for_the_kernel_ahead() {
    let gpu = gpu_test!();
    let stream = gpu.stream();
    eprintln!("dependent launches on this device: {}", stream.backend().info().dependent_launch);
    let mut rng = Rng::new(0xde9e_1a0c);
    // Eager first, so the modules are loaded before anything is recorded.
    let mut eager = Chain::new(stream);
    let mut recorded = Chain::new(stream);
    launches(&mut eager).unwrap();
    let graph = match stream.capture_with(&mut recorded, |_, chain| launches(chain)) {
        Ok(graph) => Some(graph),
        Err(KernelError::Runtime(Error::GraphsUnsupported(why))) => {
            eprintln!("graphs are unsupported by this HIP library, which is allowed: {why}");
            None
        }
        Err(e) => panic!("capturing the launches failed: {e}"),
    };
    // The rounding of f32 sums against the f64 references, through three norms.
    let tolerance = Tolerance::new(1e-4, 1e-4);
    for round in 0..3 {
        let x = rng.f32_vec(ROWS * COLS, -2.0, 2.0);
        let weight = rng.f32_vec(COLS, 0.5, 1.5);
        let want = reference(&x, &weight);
        eager.x.copy_from_host(&x).unwrap();
        eager.weight.copy_from_host(&weight).unwrap();
        for buffer in [&mut eager.a, &mut eager.b, &mut eager.out] {
            buffer.poison().unwrap();
        }
        launches(&mut eager).unwrap();
        let got = eager.out.to_vec().unwrap();
        assert_close(&got, &want, tolerance);
        let Some(graph) = &graph else { continue };
        let state = graph.state();
        state.x.write_from_host(&x).unwrap();
        state.weight.write_from_host(&weight).unwrap();
        let nan = vec![f32::NAN; ROWS * COLS];
        for buffer in [&state.a, &state.b, &state.out] {
            buffer.write_from_host(&nan).unwrap();
        }
        graph.launch().unwrap();
        let replayed = state.out.to_vec().unwrap();
        assert_eq!(
            f32_bits(&replayed),
            f32_bits(&got),
            "round {round}: the replay differs from the eager launches"
        );
    }
}

/// A kernel that reads a buffer before it waits for the kernel ahead (`stream_read_dependent`
/// issues its first loads so, as the quantised products do with their weights) behind one that
/// lets it start at once and writes that buffer only after spinning for about a millisecond:
/// its launch names the buffer as read before the wait (`Launch::reads_before_wait`), so it
/// must be launched as an ordinary one and see every word the spinning kernel wrote. A launch
/// that started early would read the poison instead. Then the same reader behind a writer of
/// another buffer, which may start early: it reads what was there already.
#[test]
fn a_read_before_the_wait_of_what_the_kernel_ahead_writes_waits_for_it() {
    use rocm_kernels::spin::spin_cycles_then_store;
    use rocm_kernels::stream_read::{stream_read_dependent, stream_read_reference};

    let gpu = gpu_test!();
    let stream = gpu.stream();
    // stream_read_dependent loads before its wait only where a thread has a whole unrolled
    // turn (4 vectors of 16 bytes each of the block's 256 threads): 1024 vectors for one block.
    const BYTES: usize = 1024 * 16;
    const CYCLES: u64 = 2_000_000;
    let mut shared = stream.alloc::<u8>(BYTES).unwrap();
    let mut other = stream.alloc::<u8>(BYTES).unwrap();
    let mut partial = stream.alloc::<u32>(1).unwrap();
    for round in 0..3 {
        shared.poison().unwrap();
        spin_cycles_then_store(CYCLES, &mut shared).unwrap();
        stream_read_dependent(&shared, &mut partial).unwrap();
        let bytes = shared.to_vec().unwrap();
        let spun = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert!(spun >= CYCLES, "round {round}: spun {spun} cycles");
        assert!(bytes.chunks_exact(8).all(|w| u64::from_le_bytes(w.try_into().unwrap()) == spun));
        assert_eq!(
            partial.to_vec().unwrap()[0],
            stream_read_reference(&bytes),
            "round {round}: the reader saw `shared` before the spinning kernel wrote it"
        );

        let before = shared.to_vec().unwrap();
        spin_cycles_then_store(CYCLES, &mut other).unwrap();
        stream_read_dependent(&shared, &mut partial).unwrap();
        assert_eq!(
            partial.to_vec().unwrap()[0],
            stream_read_reference(&before),
            "round {round}: untouched input"
        );
    }
}
