//! The runtime on a real device: discovery, copies, memsets, events, the memory guard.

use rocm_runtime::{CodeObjectKind, DeviceBuffer, Error, Platform, TensorMap, f16};
use rocm_testkit::{Rng, gpu_test};

/// Sizes that are not multiples of any block or vector width.
const AWKWARD: [usize; 5] = [1, 7, 127, 4097, 1_000_003];

#[test]
fn devices_are_found_and_described() {
    let gpu = gpu_test!();
    let info = gpu.backend().info();
    eprintln!("{info:?}");
    assert!(!info.name.trim().is_empty());
    match info.code_objects {
        CodeObjectKind::Nvidia => assert!(info.arch.starts_with("sm_") && info.warp_size == 32, "{info:?}"),
        CodeObjectKind::Amd => {
            assert!(info.arch.starts_with("gfx") && matches!(info.warp_size, 32 | 64), "{info:?}")
        }
    }
    // The host API follows the platform asked for; CUDA's driver loads nothing but NVIDIA's.
    if info.platform == Platform::Nvidia {
        assert_eq!(info.code_objects, CodeObjectKind::Nvidia);
    }
    assert!(info.compute_units > 0 && info.max_threads_per_block >= 256);
    assert!(
        info.shared_mem_per_block >= 16 << 10 && info.shared_mem_per_block_optin >= info.shared_mem_per_block
    );
    let memory = gpu.backend().memory_info().unwrap();
    assert!(memory.free <= memory.total && memory.total == info.total_memory, "{memory:?} {info:?}");
    assert!(gpu.backend().driver_version() > 0);
    let detected = rocm_runtime::detect().unwrap();
    assert!(detected.device_count >= 1 && detected.platform == info.platform);
    let budget = gpu.backend().ledger().budget();
    assert!(budget > 0 && budget <= gpu.backend().free_at_start(), "budget {budget}");
}

#[test]
fn copies_round_trip_at_awkward_sizes() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x5eed_0001);
    for n in AWKWARD {
        let host = rng.f32_vec(n, -100.0, 100.0);
        let mut device = gpu.stream().alloc::<f32>(n).unwrap();
        device.poison().unwrap();
        device.copy_from_host(&host).unwrap();
        assert_eq!(device.to_vec().unwrap(), host, "f32 round trip of {n}");

        let bytes: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
        assert_eq!(gpu.stream().upload(&bytes).unwrap().to_vec().unwrap(), bytes, "u8 round trip of {n}");

        let halves = rng.f16_vec(n, -4.0, 4.0);
        let back = gpu.stream().upload(&halves).unwrap().to_vec().unwrap();
        assert!(back.iter().zip(&halves).all(|(a, b)| a.to_bits() == b.to_bits()), "f16 round trip of {n}");
    }
}

#[test]
fn device_to_device_copies_order_two_streams() {
    let gpu = gpu_test!();
    let other = gpu.new_stream();
    let mut rng = Rng::new(0x5eed_0002);
    for n in AWKWARD {
        let host = rng.f32_vec(n, -1.0, 1.0);
        let src = other.upload(&host).unwrap();
        let mut dst = gpu.stream().alloc::<f32>(n).unwrap();
        dst.poison().unwrap();
        dst.copy_from_device(&src).unwrap();
        drop(src); // freed on `other`, ordered after the copy
        assert_eq!(dst.to_vec().unwrap(), host, "d2d copy of {n}");
    }
}

/// A range of one buffer into a range of another (across streams): only that range changes,
/// and ranges past either end are refused before anything is queued.
#[test]
fn ranged_device_copies_touch_only_their_range() {
    let gpu = gpu_test!();
    let other = gpu.new_stream();
    let mut rng = Rng::new(0x5eed_0003);
    for n in AWKWARD {
        let host = rng.f16_vec(n, -2.0, 2.0);
        let src = other.upload(&host).unwrap();
        let (src_start, len) = (n / 3, n - n / 3 - n / 5);
        let dst_start = n / 5;
        let mut dst = gpu.stream().alloc::<f16>(n).unwrap();
        dst.poison().unwrap();
        dst.copy_range_from_device(dst_start, &src, src_start, len).unwrap();
        drop(src);
        let got = dst.to_vec().unwrap();
        for (i, v) in got.iter().enumerate() {
            let want = (dst_start..dst_start + len).contains(&i).then(|| host[i - dst_start + src_start]);
            match want {
                Some(w) => assert_eq!(v.to_bits(), w.to_bits(), "n {n}: element {i} copied"),
                None => assert_eq!(v.to_bits(), 0xFFFF, "n {n}: element {i} outside the range changed"),
            }
        }
    }
    let src = gpu.stream().upload(&[1.0f32; 10]).unwrap();
    let mut dst = gpu.stream().alloc_zeroed::<f32>(10).unwrap();
    for (d, s, len) in [(0, 5, 6), (5, 0, 6), (usize::MAX, 0, 1), (0, 0, 11)] {
        let e = dst.copy_range_from_device(d, &src, s, len).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{d} {s} {len}: {e}");
    }
    assert_eq!(dst.to_vec().unwrap(), [0.0; 10], "refused copies queue nothing");
}

#[test]
fn fills_set_every_element() {
    let gpu = gpu_test!();
    for n in AWKWARD {
        let mut a = gpu.stream().alloc::<f32>(n).unwrap();
        a.poison().unwrap();
        a.fill(-3.25).unwrap();
        assert!(a.to_vec().unwrap().iter().all(|&v| v == -3.25), "f32 fill of {n}");
        let mut h = gpu.stream().alloc::<f16>(n).unwrap();
        h.poison().unwrap();
        h.fill(f16::from_f32(1.5)).unwrap();
        assert!(h.to_vec().unwrap().iter().all(|&v| v == f16::from_f32(1.5)), "f16 fill of {n}");
        let poisoned = gpu.stream().alloc::<f32>(n).and_then(|mut p| p.poison().map(|()| p)).unwrap();
        assert!(poisoned.to_vec().unwrap().iter().all(|v| v.is_nan()), "poison of {n}");
        let zeroed = gpu.stream().alloc_zeroed::<u32>(n).unwrap();
        assert!(zeroed.to_vec().unwrap().iter().all(|&v| v == 0));
    }
    let mut wide = gpu.stream().alloc::<f64>(3).unwrap();
    assert!(matches!(wide.fill(1.0), Err(Error::InvalidArgument(_))));
}

/// `write_all_from_host`: every buffer gets its slice (awkward and empty lengths, poisoned
/// first); a wrong length or a buffer of another stream refuses the whole call before any copy,
/// so nothing changes.
#[test]
fn writes_of_several_buffers_wait_once_and_check_everything_first() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x5eed_00a1);
    let lens = [1usize, 0, 17, 4099, 65_537];
    let hosts: Vec<Vec<i32>> =
        lens.iter().map(|&n| (0..n).map(|_| rng.next_u64() as i32).collect()).collect();
    let mut buffers: Vec<DeviceBuffer<i32>> = lens.iter().map(|&n| gpu.stream().alloc(n).unwrap()).collect();
    for b in &mut buffers {
        b.poison().unwrap();
    }
    let writes: Vec<(&DeviceBuffer<i32>, &[i32])> =
        buffers.iter().zip(&hosts).map(|(b, h)| (b, &h[..])).collect();
    DeviceBuffer::write_all_from_host(&writes).unwrap();
    for (i, (b, h)) in buffers.iter().zip(&hosts).enumerate() {
        assert_eq!(&b.to_vec().unwrap(), h, "buffer {i}");
    }
    DeviceBuffer::<i32>::write_all_from_host(&[]).unwrap();

    let zeros: Vec<Vec<i32>> = lens.iter().map(|&n| vec![0; n]).collect();
    let short = vec![0i32; 16];
    let mut bad: Vec<(&DeviceBuffer<i32>, &[i32])> =
        buffers.iter().zip(&zeros).map(|(b, z)| (b, &z[..])).collect();
    bad[2].1 = &short;
    let err = DeviceBuffer::write_all_from_host(&bad).unwrap_err();
    assert!(err.to_string().contains("16 elements given for a buffer of 17"), "{err}");
    let other = gpu.new_stream();
    let theirs = other.upload(&[7i32; 3]).unwrap();
    let mut mixed: Vec<(&DeviceBuffer<i32>, &[i32])> =
        buffers.iter().zip(&zeros).map(|(b, z)| (b, &z[..])).collect();
    mixed.push((&theirs, &[0, 0, 0]));
    let err = DeviceBuffer::write_all_from_host(&mixed).unwrap_err();
    assert!(matches!(err, Error::StreamMismatch { .. }), "{err}");
    for (i, (b, h)) in buffers.iter().zip(&hosts).enumerate() {
        assert_eq!(&b.to_vec().unwrap(), h, "buffer {i} changed by a refused call");
    }
    assert_eq!(theirs.to_vec().unwrap(), [7; 3]);
}

#[test]
fn empty_buffers_and_mismatched_lengths() {
    let gpu = gpu_test!();
    let empty = gpu.stream().alloc::<f32>(0).unwrap();
    assert!(empty.is_empty() && empty.to_vec().unwrap().is_empty());
    let mut four = gpu.stream().alloc::<f32>(4).unwrap();
    let err = four.copy_from_host(&[1.0, 2.0, 3.0]).unwrap_err();
    assert!(err.to_string().contains("3 elements given for a buffer of 4"), "{err}");
    let err = four.copy_from_device(&gpu.stream().alloc::<f32>(5).unwrap()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = gpu.stream().alloc::<f64>(usize::MAX / 4).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// Tensor maps: what breaks the TMA engine's rules is refused here, naming it, before the driver
/// is asked; where the device says it has tensor maps (`DeviceInfo::tensor_maps`: NVIDIA's driver,
/// sm_90 and later) a map that keeps them is made (kernels use one: quant_gemm's tests), through
/// HIP none is.
#[test]
fn tensor_maps_keep_the_hardware_rules() {
    let gpu = gpu_test!();
    let bytes = gpu.stream().alloc_zeroed::<u8>(300 * 4352).unwrap();
    let refused = |r: rocm_runtime::Result<TensorMap>, want: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.starts_with("invalid argument: tensor map: ") && e.contains(want), "{e}");
    };
    refused(
        TensorMap::bytes_2d(&bytes, 301, 4352, 96, 128),
        "301 rows of 4352 bytes exceed the buffer's 1305600",
    );
    refused(TensorMap::bytes_2d(&bytes, usize::MAX, 4352, 96, 128), "exceed the buffer");
    refused(TensorMap::bytes_2d(&bytes, 0, 4352, 96, 128), "an empty tensor");
    refused(TensorMap::bytes_2d(&bytes, 300, 4350, 96, 128), "the row length 4350 must be multiples of 16");
    refused(TensorMap::bytes_2d(&bytes, 300, 4352, 90, 128), "a box of 128 rows x 90 bytes");
    refused(TensorMap::bytes_2d(&bytes, 300, 4352, 96, 257), "a box of 257 rows x 96 bytes");
    refused(TensorMap::bytes_2d(&bytes, 300, 4352, 272, 128), "each side 1 to 256");
    let made = TensorMap::bytes_2d(&bytes, 300, 4352, 96, 128);
    let info = gpu.backend().info();
    match (info.platform, info.tensor_maps) {
        (_, true) => {
            made.unwrap();
        }
        // HIP (AMD's HIP for NVIDIA on a Hopper GPU too) says it has none, and makes none.
        (Platform::Amd, false) => refused(made, "exist on NVIDIA's driver only, not through HIP"),
        // The CUDA driver before sm_90: no TMA engine to use a map, whether or not one encodes.
        (Platform::Nvidia, false) => {
            assert!(!info.arch.starts_with("sm_9") && !info.arch.starts_with("sm_1"))
        }
    }
}

#[test]
fn events_time_device_work() {
    let gpu = gpu_test!();
    let n = 64 << 20; // 256 MiB of f32
    let mut a = gpu.stream().alloc::<f32>(n).unwrap();
    a.fill(1.0).unwrap();
    let mut b = gpu.stream().alloc::<f32>(n).unwrap();
    let start = gpu.stream().record_event().unwrap();
    for _ in 0..4 {
        b.copy_from_device(&a).unwrap();
    }
    let end = gpu.stream().record_event().unwrap();
    let ms = end.elapsed_ms_since(&start).unwrap();
    assert!(end.is_complete().unwrap());
    assert!(ms.is_finite() && ms > 0.0, "elapsed {ms} ms");
    let gbps = 4.0 * 2.0 * (n * 4) as f64 / (ms as f64 * 1e6);
    eprintln!("4 copies of 256 MiB: {ms:.3} ms ({gbps:.0} GB/s read+write)");
    // Waiting on an event from our stream works across streams too.
    let other = gpu.new_stream();
    other.wait_event(&end).unwrap();
    other.synchronize().unwrap();
    assert!(other.is_idle().unwrap());
}

#[test]
fn the_guard_refuses_over_budget_and_the_backend_keeps_working() {
    let gpu = gpu_test!();
    let ledger = gpu.backend().ledger();
    let budget = ledger.budget();
    let err = gpu.stream().alloc::<u8>(budget as usize + 1).unwrap_err();
    let Error::OverBudget(refusal) = &err else { panic!("expected OverBudget, got {err}") };
    assert_eq!(refusal.requested, budget + 1);
    assert_eq!(refusal.budget, budget);
    assert!(refusal.total > 0 && refusal.free <= refusal.total);
    let text = err.to_string();
    for word in ["refused", "budget", "in use", "free", "total"] {
        assert!(text.contains(word), "`{word}` missing: {text}");
    }
    assert_eq!(gpu.account().live_bytes(), 0, "a refused allocation must not be charged");
    // The backend still works after the refusal.
    let data = Rng::new(9).f32_vec(4097, -1.0, 1.0);
    assert_eq!(gpu.stream().upload(&data).unwrap().to_vec().unwrap(), data);
}

#[test]
fn the_ledger_charges_the_test_account_exactly() {
    let gpu = gpu_test!();
    let a = gpu.stream().alloc::<f32>(1000).unwrap();
    let b = gpu.new_stream().alloc::<u8>(17).unwrap();
    assert_eq!(gpu.account().live_bytes(), 4017);
    let live = gpu.account().live_allocations();
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|l| l.site.file().ends_with("gpu_runtime.rs")), "{live:?}");
    drop(a);
    drop(b);
    assert_eq!(gpu.account().live_bytes(), 0);
}
