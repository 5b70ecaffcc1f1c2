//! `l2_prefetch`: a hint, so what it must show is that it changes nothing. Between a kernel
//! that writes a buffer and one that reads it (both dependent launches on sm_90+, the prefetch
//! asking for that very buffer while it is being written), the reader gets the same bits as
//! without the prefetch, eagerly and replayed from a graph; the prefetched buffers keep their
//! bytes; ranges at odd offsets, empty ones and more than one launch's worth are taken; ranges
//! outside their buffer, or buffers of two streams, are refused.

use std::ops::Range;

use rocm_kernels::KernelError;
use rocm_kernels::l2_prefetch::{L2Range, l2_prefetch};
use rocm_kernels::rmsnorm::RmsNorm;
use rocm_kernels::swiglu::swiglu;
use rocm_runtime::{DeviceBuffer, Error};
use rocm_testkit::{Rng, gpu_test};

use crate::{f32_bits, shape_message};

/// 1024 rows of 4097 f32 (16 MiB a buffer, an awkward width): long enough launches that the
/// prefetch runs beside the norm that writes what it asks for.
const ROWS: usize = 1024;
const COLS: usize = 4097;

struct Chain {
    x: DeviceBuffer<f32>,
    weight: DeviceBuffer<f32>,
    a: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
}

/// a = rmsnorm(x); [prefetch a, most of x, the weight]; out = silu(a) x.
fn launches(c: &mut Chain, prefetch: bool) -> Result<(), KernelError> {
    RmsNorm::new(ROWS, COLS, 1e-5).run(&c.x, &c.weight, &mut c.a)?;
    if prefetch {
        let inner: Range<usize> = 3..c.x.len() - 5;
        l2_prefetch(&[
            L2Range::whole(&c.a),
            L2Range { buffer: &c.x, elems: inner },
            L2Range::prefix(&c.weight, 1000),
        ])?;
    }
    swiglu(&c.a, &c.x, &mut c.out)
}

#[test]
fn l2_prefetch_between_a_writer_and_a_reader_changes_no_bits() {
    let gpu = gpu_test!();
    let stream = gpu.stream();
    let mut rng = Rng::new(0x12_f37c);
    let new_chain = || Chain {
        x: stream.alloc(ROWS * COLS).unwrap(),
        weight: stream.alloc(COLS).unwrap(),
        a: stream.alloc(ROWS * COLS).unwrap(),
        out: stream.alloc(ROWS * COLS).unwrap(),
    };
    let (mut plain, mut fetched, mut recorded) = (new_chain(), new_chain(), new_chain());
    let x = rng.f32_vec(ROWS * COLS, -2.0, 2.0);
    let weight = rng.f32_vec(COLS, 0.5, 1.5);
    for c in [&mut plain, &mut fetched, &mut recorded] {
        c.x.copy_from_host(&x).unwrap();
        c.weight.copy_from_host(&weight).unwrap();
        c.a.poison().unwrap();
        c.out.poison().unwrap();
    }
    launches(&mut plain, false).unwrap();
    let want = f32_bits(&plain.out.to_vec().unwrap());
    for round in 0..3 {
        fetched.a.poison().unwrap();
        fetched.out.poison().unwrap();
        launches(&mut fetched, true).unwrap();
        assert_eq!(f32_bits(&fetched.out.to_vec().unwrap()), want, "round {round}: eager, prefetched");
    }
    assert_eq!(f32_bits(&fetched.x.to_vec().unwrap()), f32_bits(&x), "the prefetched x changed");
    assert_eq!(f32_bits(&fetched.weight.to_vec().unwrap()), f32_bits(&weight), "the weight changed");

    let graph = match stream.capture_with(&mut recorded, |_, c| launches(c, true)) {
        Ok(graph) => graph,
        Err(KernelError::Runtime(Error::GraphsUnsupported(why))) => {
            eprintln!("graphs are unsupported by this HIP library, which is allowed: {why}");
            return;
        }
        Err(e) => panic!("capturing the launches failed: {e}"),
    };
    let state = graph.state();
    for round in 0..3 {
        let nan = vec![f32::NAN; ROWS * COLS];
        state.a.write_from_host(&nan).unwrap();
        state.out.write_from_host(&nan).unwrap();
        graph.launch().unwrap();
        assert_eq!(f32_bits(&state.out.to_vec().unwrap()), want, "round {round}: replayed");
    }
}

#[test]
fn l2_prefetch_takes_odd_empty_and_many_ranges_and_keeps_the_bytes() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x12_0dd);
    let hosts: Vec<Vec<u8>> = [1usize, 15, 17, 4099, 65_537, 3_000_001]
        .iter()
        .map(|&n| (0..n).map(|_| rng.next_u64() as u8).collect())
        .collect();
    let buffers: Vec<DeviceBuffer<u8>> = hosts.iter().map(|h| gpu.stream().upload(h).unwrap()).collect();
    // Six non-empty ranges (two launches), an empty one, odd starts and ends.
    let mut ranges: Vec<L2Range<'_, u8>> = buffers.iter().map(L2Range::whole).collect();
    ranges.push(L2Range { buffer: &buffers[5], elems: 7..7 });
    ranges.push(L2Range { buffer: &buffers[5], elems: 13..2_999_993 });
    ranges.push(L2Range { buffer: &buffers[3], elems: 1..2 });
    l2_prefetch(&ranges).unwrap();
    l2_prefetch::<u8>(&[]).unwrap();
    for (i, (b, h)) in buffers.iter().zip(&hosts).enumerate() {
        assert_eq!(&b.to_vec().unwrap(), h, "buffer {i} changed");
    }
}

#[test]
fn l2_prefetch_refuses_ranges_outside_their_buffer_and_mixed_streams() {
    let gpu = gpu_test!();
    let buffer = gpu.stream().alloc::<u16>(100).unwrap();
    let past = shape_message(l2_prefetch(&[L2Range { buffer: &buffer, elems: 90..101 }]), "l2_prefetch");
    assert!(past.contains("range 90..101 does not lie in a buffer of 100 elements"), "{past}");
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = shape_message(l2_prefetch(&[L2Range { buffer: &buffer, elems: 50..40 }]), "l2_prefetch");
    assert!(backwards.contains("range 50..40"), "{backwards}");
    let other_stream = gpu.new_stream();
    let other = other_stream.alloc::<u16>(100).unwrap();
    let mixed = l2_prefetch(&[L2Range::whole(&buffer), L2Range::whole(&other)]);
    assert!(matches!(mixed, Err(KernelError::Runtime(_))), "{mixed:?}");
}
