//! `stream_rmw` against its CPU reference: runs of one vector to whole rows, pitches of one run
//! to many, buffers that end inside a run or between runs, awkward run counts; every byte
//! compared, the ones between and after the runs included.

use rocm_kernels::stream_rmw::{stream_rmw, stream_rmw_reference};
use rocm_testkit::{Rng, gpu_test};

#[test]
fn stream_rmw_changes_the_runs_and_nothing_else() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x5e3a);
    for (run, pitch) in [(16usize, 16usize), (16, 48), (128, 256), (256, 512), (48, 4096), (4096, 4096)] {
        for runs in [1usize, 7, 1001, 70_001] {
            // Buffers ending right after the last run, and 16 + 8 bytes past it.
            for extra in [0usize, 24] {
                let len = (runs - 1) * pitch + run + extra;
                if len > 64 << 20 {
                    continue;
                }
                let host: Vec<u8> =
                    (0..len.div_ceil(8)).flat_map(|_| rng.next_u64().to_le_bytes()).take(len).collect();
                let mut buf = gpu.stream().upload(&host).unwrap();
                stream_rmw(&mut buf, run, pitch, 0x8000_8001).unwrap();
                let mut expected = host.clone();
                stream_rmw_reference(&mut expected, run, pitch, 0x8000_8001);
                let got = buf.to_vec().unwrap();
                let first_bad = got.iter().zip(&expected).position(|(g, e)| g != e);
                assert_eq!(first_bad, None, "run {run}, pitch {pitch}, {runs} runs, {extra} extra bytes");
            }
        }
    }
}

#[test]
fn stream_rmw_refuses_bad_layouts() {
    let gpu = gpu_test!();
    let mut buf = gpu.stream().alloc::<u8>(256).unwrap();
    for (run, pitch, says) in [
        (0usize, 16usize, "a run of 0 bytes"),
        (32, 16, "a run of 32 bytes every 16"),
        (24, 48, "whole numbers of 16-byte vectors"),
        (16, 40, "whole numbers of 16-byte vectors"),
    ] {
        let err = stream_rmw(&mut buf, run, pitch, 1).unwrap_err().to_string();
        assert!(err.contains(says), "{run}/{pitch}: {err}");
    }
    // A buffer shorter than one run is a no-op.
    let mut short = gpu.stream().alloc::<u8>(8).unwrap();
    stream_rmw(&mut short, 16, 16, 1).unwrap();
}
