//! `stream_read` against its CPU reference: buffers of awkward vector counts, grids of several
//! sizes (so that blocks see zero, one or many vectors), poisoned partials.

use rocm_kernels::stream_read::{stream_read, stream_read_dependent, stream_read_reference};
use rocm_runtime::LaunchConfig;
use rocm_testkit::{Rng, gpu_test};

#[test]
fn stream_read_sums_every_word_once() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x5ead);
    for vectors in [1usize, 7, 255, 257, 4097, 1_000_003] {
        let host: Vec<u8> = (0..vectors * 2).flat_map(|_| rng.next_u64().to_le_bytes()).collect();
        let src = gpu.stream().upload(&host).unwrap();
        for blocks in [1usize, 3, 132, 1000] {
            for dependent in [false, true] {
                let mut partial = gpu.stream().alloc::<u32>(blocks).unwrap();
                partial.poison().unwrap();
                // A dependent launch right behind the poisoning: its write must wait for it.
                match dependent {
                    false => stream_read(&src, &mut partial).unwrap(),
                    true => stream_read_dependent(&src, &mut partial).unwrap(),
                }
                let got = partial.to_vec().unwrap().into_iter().fold(0u32, u32::wrapping_add);
                let what = format!("{vectors} vectors, {blocks} blocks, dependent {dependent}");
                assert_eq!(got, stream_read_reference(&host), "{what}");
            }
        }
    }
}

#[test]
fn stream_read_refuses_partial_vectors() {
    let gpu = gpu_test!();
    let src = gpu.stream().alloc::<u8>(24).unwrap();
    let mut partial = gpu.stream().alloc::<u32>(1).unwrap();
    let err = stream_read(&src, &mut partial).unwrap_err().to_string();
    assert!(err.contains("24 bytes are not a whole number of 16-byte vectors"), "{err}");
}

/// The sanitizer's canary: `cargo xtask gpu-test --sanitize` runs it apart and fails unless
/// memcheck reports it. Under memcheck it deliberately reads one 16-byte vector past the end of
/// its input (so the check is known to bite); in every other run it reads exactly its input and
/// checks the sum.
#[test]
fn sanitizer_canary_reads_one_vector_past_its_input() {
    let gpu = gpu_test!();
    let backend = gpu.backend();
    let image =
        rocm_kernels::embedded::image(backend.info().code_objects, rocm_kernels::KernelModule::StreamRead)
            .expect("the stream_read kernel is built (cargo xtask kernels)");
    let kernel = backend.load_module(image).unwrap().function("rf_stream_read").unwrap();
    let vectors = 5usize;
    let host: Vec<u8> = (0..vectors * 16).map(|i| i as u8).collect();
    let src = gpu.stream().upload(&host).unwrap();
    let mut partial = gpu.stream().alloc::<u32>(1).unwrap();
    partial.poison().unwrap();
    let past_the_end = rocm_testkit::sanitizer().as_deref() == Some("memcheck");
    let read = vectors as u64 + u64::from(past_the_end);
    let config = LaunchConfig { grid: [1, 1, 1], block: [256, 1, 1], shared_mem_bytes: 0 };
    // SAFETY: rf_stream_read(const uint4* src, u64 n, u32* partial) with 256 threads and one
    // block reads src[0, n) and writes partial[0]. n is src's vector count, except under
    // memcheck, where the one extra vector is the planted out-of-bounds read it must report (a
    // read of pool memory past a small allocation, which faults nowhere).
    unsafe {
        gpu.stream().launch(&kernel).buffer(&src).arg(read).buffer_mut(&mut partial).launch(config).unwrap()
    };
    let got = partial.to_vec().unwrap()[0];
    if !past_the_end {
        assert_eq!(got, stream_read_reference(&host));
    }
}
