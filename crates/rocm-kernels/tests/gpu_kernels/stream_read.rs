//! `stream_read` against its CPU reference: buffers of awkward vector counts, grids of several
//! sizes (so that blocks see zero, one or many vectors), poisoned partials.

use rocm_kernels::stream_read::{
    STAGED_MAX_STAGES, StagedScratch, staged_chase_table, stream_read, stream_read_dependent,
    stream_read_reference, stream_read_staged,
};
use rocm_runtime::{LaunchConfig, MatrixCores};
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

/// `stream_read_staged` (the persistent layer's read floor, `bench model`): every vector of every
/// stage summed once, whatever the stages' sizes (some smaller than a block's chunk, so blocks
/// pass gates with nothing of the stage), with and without the latency-bound work between
/// stages and the copies running past the gates; twice in a row and in a graph's replays (each
/// launch starts from the counters the one before put back to zero), no barrier timed out.
#[test]
fn stream_read_staged_sums_every_stage_once_behind_grid_barriers() {
    let gpu = gpu_test!();
    let stream = gpu.stream();
    let info = gpu.backend().info();
    let mut rng = Rng::new(0x57a9);
    let vectors = 300_007usize;
    let host: Vec<u8> = (0..vectors * 2).flat_map(|_| rng.next_u64().to_le_bytes()).collect();
    let w = stream.upload(&host).unwrap();
    let chase = stream.upload(&staged_chase_table(4099, 1, || rng.next_u64())).unwrap();
    let mut scratch = StagedScratch::new(stream).unwrap();
    let grid = info.compute_units as usize;
    let mut partial = stream.alloc::<u32>(grid).unwrap();
    if info.matrix_cores != MatrixCores::MmaSync || !info.cooperative_launch {
        let err = stream_read_staged(
            &w,
            &[vectors as u64],
            &chase,
            [0; 4],
            1,
            false,
            true,
            &mut scratch,
            &mut partial,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("needs NVIDIA sm_80 or later"), "{err}");
        return;
    }
    let want = stream_read_reference(&host);
    let layouts: [Vec<u64>; 3] = [
        vec![vectors as u64],
        vec![70_001, 100_000, 250_000, vectors as u64],
        // 13 stages, three of them shorter than one 2048-vector chunk.
        vec![
            10,
            2000,
            2100,
            50_000,
            50_001,
            90_000,
            150_000,
            151_000,
            200_000,
            220_000,
            260_000,
            299_999,
            vectors as u64,
        ],
    ];
    for ends in &layouts {
        // Idle small blocks copy nothing (their partials are 0): the others cover every chunk.
        for (hops, small, idle) in [
            ([0u32; 4], 1u32, false),
            ([5, 0, 2, 0], 8, false),
            ([3, 1, 1, 1], grid as u32, false),
            ([0u32; 4], 1u32, true),
            ([5, 0, 2, 0], 8, true),
            ([3, 1, 1, 1], grid as u32 - 1, true),
        ] {
            for ahead in [true, false] {
                let what = format!(
                    "{} stages, hops {hops:?} on {small} blocks (idle {idle}), ahead {ahead}",
                    ends.len()
                );
                for _ in 0..2 {
                    partial.poison().unwrap();
                    stream_read_staged(
                        &w,
                        ends,
                        &chase,
                        hops,
                        small,
                        idle,
                        ahead,
                        &mut scratch,
                        &mut partial,
                    )
                    .unwrap();
                    let got = partial.to_vec().unwrap().into_iter().fold(0u32, u32::wrapping_add);
                    assert_eq!(got, want, "{what}");
                    assert!(!scratch.timed_out().unwrap(), "{what}: a barrier timed out");
                }
            }
        }
    }
    // Recorded in a graph and replayed: the counters the last block zeroes are the next
    // replay's start.
    let ends = &layouts[1];
    let graph = stream
        .capture(|_| {
            stream_read_staged(&w, ends, &chase, [4, 0, 0, 1], 8, true, true, &mut scratch, &mut partial)
        })
        .unwrap();
    for _ in 0..3 {
        graph.launch().unwrap();
    }
    drop(graph);
    let got = partial.to_vec().unwrap().into_iter().fold(0u32, u32::wrapping_add);
    assert_eq!(got, want, "graph replays");
    assert!(!scratch.timed_out().unwrap(), "graph replays: a barrier timed out");
}

#[test]
fn stream_read_staged_refuses_bad_stages() {
    let gpu = gpu_test!();
    let stream = gpu.stream();
    let w = stream.alloc_zeroed::<u8>(16 * 100).unwrap();
    let chase = stream.alloc_zeroed::<u32>(1).unwrap();
    let mut scratch = StagedScratch::new(stream).unwrap();
    let mut partial = stream.alloc::<u32>(gpu.backend().info().compute_units as usize).unwrap();
    let mut run = |ends: &[u64]| {
        stream_read_staged(&w, ends, &chase, [0; 4], 1, false, true, &mut scratch, &mut partial)
            .unwrap_err()
            .to_string()
    };
    let info = gpu.backend().info();
    let nvidia = info.matrix_cores == MatrixCores::MmaSync && info.cooperative_launch;
    let cases = [
        (vec![], format!("0 stages; it reads 1 to {STAGED_MAX_STAGES}")),
        (vec![50, 40, 100], "stage ends [50, 40, 100] do not rise from above 0".into()),
        (vec![0, 100], "stage ends [0, 100] do not rise from above 0".into()),
        (vec![50, 99], "the last stage ends at vector 99, the buffer holds 1600 bytes".into()),
        (
            (1..=STAGED_MAX_STAGES as u64 + 1).collect(),
            format!("{} stages; it reads 1 to {STAGED_MAX_STAGES}", STAGED_MAX_STAGES + 1),
        ),
    ];
    for (ends, want) in cases {
        let err = run(&ends);
        let want = if nvidia { want.as_str() } else { "needs NVIDIA sm_80 or later" };
        assert!(err.contains(want), "{ends:?}: {err}");
    }
    let grid = info.compute_units;
    let err = stream_read_staged(&w, &[100], &chase, [1; 4], grid, true, true, &mut scratch, &mut partial)
        .unwrap_err()
        .to_string();
    let want = if nvidia {
        format!("{grid} idle small-work blocks of {grid} leave none to copy")
    } else {
        "needs NVIDIA sm_80 or later".into()
    };
    assert!(err.contains(&want), "{err}");
}

/// A cooperative launch whose blocks cannot all be resident is refused, not queued: 64 blocks
/// of 512 threads a compute unit (where 2048 threads fit), on every platform (a HIP library
/// without the cooperative call refuses it by name). And a launch both cooperative and
/// dependent is refused before the driver sees it.
#[test]
fn cooperative_launch_refuses_a_grid_that_cannot_be_resident() {
    let gpu = gpu_test!();
    let backend = gpu.backend();
    let info = backend.info();
    let image = rocm_kernels::embedded::image(info.code_objects, rocm_kernels::KernelModule::StreamRead)
        .expect("the stream_read kernels are built (cargo xtask kernels)");
    let kernel = backend.load_module(image).unwrap().function("rf_stream_read_staged").unwrap();
    /// `rf_staged_args`' 336 bytes, all zero: no stages.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct NoStages([u64; 42]);
    // SAFETY: integers only, no padding.
    unsafe impl bytemuck::Zeroable for NoStages {}
    // SAFETY: as above.
    unsafe impl bytemuck::Pod for NoStages {}
    let args = NoStages([0; 42]);
    let config =
        LaunchConfig { grid: [64 * info.compute_units, 1, 1], block: [512, 1, 1], shared_mem_bytes: 0 };
    // SAFETY: rf_stream_read_staged(rf_staged_args): refused before it runs (the point of the
    // test); were it to run, no stages make every block return at entry, touching no memory.
    let err = unsafe { gpu.stream().launch(&kernel).arg(args).cooperative().launch(config) }
        .unwrap_err()
        .to_string();
    assert!(err.to_lowercase().contains("cooperative"), "{err}");
    // SAFETY: as above.
    let err = unsafe { gpu.stream().launch(&kernel).arg(args).cooperative().dependent().launch(config) }
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot also be dependent"), "{err}");
}
