//! `stream_read` against its CPU reference: buffers of awkward vector counts, grids of several
//! sizes (so that blocks see zero, one or many vectors), poisoned partials.

use rocm_kernels::stream_read::{stream_read, stream_read_reference};
use rocm_testkit::{Rng, gpu_test};

#[test]
fn stream_read_sums_every_word_once() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x5ead);
    for vectors in [1usize, 7, 255, 257, 4097, 1_000_003] {
        let host: Vec<u8> = (0..vectors * 2).flat_map(|_| rng.next_u64().to_le_bytes()).collect();
        let src = gpu.stream().upload(&host).unwrap();
        for blocks in [1usize, 3, 132, 1000] {
            let mut partial = gpu.stream().alloc::<u32>(blocks).unwrap();
            partial.poison().unwrap();
            stream_read(&src, &mut partial).unwrap();
            let got = partial.to_vec().unwrap().into_iter().fold(0u32, u32::wrapping_add);
            assert_eq!(got, stream_read_reference(&host), "{vectors} vectors, {blocks} blocks");
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
