//! Lazy upload of GGUF tensors: uploaded once on first use through the memory guard, cached,
//! evictable, and refused cleanly (with the tensor and the sizes named) past the budget.

use std::sync::Arc;

use rocm_kernels::quant::dequant::{BlockFormat, dequantize};
use rocm_model::{DeviceTensors, GgmlType, GgufError, GgufFile, GgufWriter};
use rocm_testkit::{Rng, Tolerance, assert_close, gpu_test};

/// A small model of awkward sizes and several types.
fn model(seed: u64) -> Arc<GgufFile> {
    let mut rng = Rng::new(seed);
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "test").unwrap();
    w.add_f32("a.f32", &[4097], &rng.f32_vec(4097, -1.0, 1.0)).unwrap();
    w.add_quantized("b.q8_0", GgmlType::Q8_0, &[64, 3], &rng.f32_vec(192, -2.0, 2.0)).unwrap();
    w.add_quantized("c.mxfp4", GgmlType::MXFP4, &[32, 7], &rng.f32_vec(224, -4.0, 4.0)).unwrap();
    w.add_quantized("d.f16", GgmlType::F16, &[127, 3], &rng.f32_vec(381, -1.0, 1.0)).unwrap();
    w.add_quantized("e.q4_0", GgmlType::Q4_0, &[96, 5], &rng.f32_vec(480, -1.0, 1.0)).unwrap();
    Arc::new(GgufFile::from_bytes(w.to_bytes()).unwrap())
}

#[test]
#[serial_test::parallel]
fn tensors_upload_once_on_first_use_and_match_the_file() {
    let gpu = gpu_test!();
    let file = model(1);
    let tensors = DeviceTensors::new(file.clone(), gpu.stream().clone());
    assert_eq!((tensors.resident_count(), gpu.account().live_bytes()), (0, 0), "nothing before first use");

    let first = tensors.get_or_upload("a.f32").unwrap();
    let again = tensors.get_or_upload("a.f32").unwrap();
    assert!(Arc::ptr_eq(&first, &again), "the second use must hit the cache");
    assert_eq!(gpu.account().live_bytes(), file.tensor("a.f32").unwrap().n_bytes(), "uploaded exactly once");
    assert!(first.stream().same_as(gpu.stream()));

    for t in file.tensors() {
        let buffer = tensors.get_or_upload(t.name()).unwrap();
        assert_eq!(buffer.to_vec().unwrap(), file.tensor_bytes(t), "{}", t.name());
    }
    assert_eq!(tensors.resident_count(), file.tensors().len());
    assert_eq!(tensors.resident_bytes(), file.tensor_bytes_total());
    assert_eq!(gpu.account().live_bytes(), file.tensor_bytes_total());
    let e = tensors.get_or_upload("missing").unwrap_err();
    assert!(matches!(e, GgufError::NoSuchTensor { .. }), "{e}");
}

#[test]
#[serial_test::parallel]
fn evicted_tensors_free_their_memory_and_upload_again() {
    let gpu = gpu_test!();
    let file = model(2);
    let tensors = DeviceTensors::new(file.clone(), gpu.stream().clone());
    let bytes = file.tensor("b.q8_0").unwrap().n_bytes();
    let held = tensors.get_or_upload("b.q8_0").unwrap();
    assert!(tensors.evict("b.q8_0"));
    assert!(!tensors.is_resident("b.q8_0") && !tensors.evict("b.q8_0"));
    assert_eq!(gpu.account().live_bytes(), bytes, "a caller still holds the buffer: it stays");
    drop(held);
    assert_eq!(gpu.account().live_bytes(), 0, "evicted and released: freed");

    let back = tensors.get_or_upload("b.q8_0").unwrap();
    assert_eq!(back.to_vec().unwrap(), file.bytes("b.q8_0").unwrap());
    drop(back);
    tensors.upload_all().unwrap();
    assert_eq!(tensors.evict_all(), file.tensors().len());
    assert_eq!(gpu.account().live_bytes(), 0);
}

#[test]
#[serial_test::parallel]
fn threads_sharing_the_cache_upload_each_tensor_once() {
    let gpu = gpu_test!();
    let file = model(3);
    let tensors = DeviceTensors::new(file.clone(), gpu.stream().clone());
    let got: Vec<Vec<_>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| file.tensors().iter().map(|t| tensors.get_or_upload(t.name()).unwrap()).collect())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for per_thread in &got[1..] {
        for (a, b) in per_thread.iter().zip(&got[0]) {
            assert!(Arc::ptr_eq(a, b));
        }
    }
    assert_eq!(gpu.account().live_bytes(), file.tensor_bytes_total(), "each tensor uploaded once");
}

/// The GPU kernels decode uploaded GGUF blocks to the same values as the CPU path
/// (`GgufFile::to_f32`): every element is exact in f32 on both sides.
#[test]
#[serial_test::parallel]
fn gpu_dequantisation_of_uploaded_tensors_matches_the_cpu() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(5);
    let mut w = GgufWriter::new();
    w.add_quantized("q8_0", GgmlType::Q8_0, &[96, 7], &rng.f32_vec(672, -3.0, 3.0)).unwrap();
    w.add_quantized("q4_0", GgmlType::Q4_0, &[64, 9], &rng.f32_vec(576, -3.0, 3.0)).unwrap();
    w.add_quantized("mxfp4", GgmlType::MXFP4, &[128, 5], &rng.f32_vec(640, -6.0, 6.0)).unwrap();
    // Random MXFP4 blocks: every E2M1 code, scales far from f32's subnormals (a device may
    // flush those).
    let mut raw = Vec::new();
    for _ in 0..33 {
        raw.push(100 + rng.below(50) as u8);
        raw.extend((0..16).map(|_| rng.below(256) as u8));
    }
    w.add_tensor("mxfp4.raw", GgmlType::MXFP4, &[32, 33], raw).unwrap();
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes()).unwrap());
    let tensors = DeviceTensors::new(file.clone(), gpu.stream().clone());
    for (name, format) in [
        ("q8_0", BlockFormat::Q8_0),
        ("q4_0", BlockFormat::Q4_0),
        ("mxfp4", BlockFormat::Mxfp4Gguf),
        ("mxfp4.raw", BlockFormat::Mxfp4Gguf),
    ] {
        let blocks = tensors.get_or_upload(name).unwrap();
        let mut out = gpu.stream().alloc::<f32>(file.tensor(name).unwrap().n_elements() as usize).unwrap();
        out.poison().unwrap();
        dequantize(format, &blocks, &mut out).unwrap();
        assert_close(&out.to_vec().unwrap(), &file.to_f32(name).unwrap(), Tolerance::EXACT);
    }
}

/// Takes most of the budget: `serial` keeps this binary's other tests off it meanwhile.
#[test]
#[serial_test::serial]
fn a_model_past_the_budget_is_refused_cleanly_with_the_sizes() {
    let gpu = gpu_test!();
    const MIB: usize = 1 << 20;
    let mut w = GgufWriter::new();
    for i in 0..4 {
        w.add_f32(format!("layer{i}"), &[(MIB / 8) as u64], &vec![i as f32; MIB / 8]).unwrap(); // 512 KiB
    }
    w.add_f32("big", &[(MIB / 2) as u64], &vec![1.0; MIB / 2]).unwrap(); // 2 MiB
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes()).unwrap());

    // Leave 1.5 MiB of the budget: the whole model (4 MiB) and `big` (2 MiB) do not fit.
    let ledger = gpu.backend().ledger();
    let available = ledger.budget().saturating_sub(ledger.in_use()) as usize;
    assert!(available > 8 * MIB, "the budget is too small for this test: {available} bytes");
    let hog = gpu.stream().alloc::<u8>(available - 3 * MIB / 2).unwrap();
    let in_use = ledger.in_use();

    let tensors = DeviceTensors::new(file.clone(), gpu.stream().clone());
    let e = tensors.upload_all().unwrap_err();
    assert!(
        matches!(e, GgufError::ModelOverBudget { tensors: 5, needed, .. } if needed == 4 * MIB as u64),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("4194304 B (4.00 MiB)") && text.contains("budget"), "{text}");
    assert_eq!((tensors.resident_count(), ledger.in_use()), (0, in_use), "nothing uploaded");

    let e = tensors.get_or_upload("big").unwrap_err();
    let refusal = e.over_budget().unwrap_or_else(|| panic!("expected the guard's refusal, got {e}"));
    assert_eq!(refusal.requested, 2 * MIB as u64);
    let text = e.to_string();
    for needle in ["tensor `big`", "2097152 bytes", "refused by the memory guard", "budget", "in use"] {
        assert!(text.contains(needle), "`{needle}` missing from: {text}");
    }
    assert_eq!(ledger.in_use(), in_use, "a refusal must not change the ledger");

    // What fits still uploads, next to the hog.
    let layer = tensors.get_or_upload("layer3").unwrap();
    assert_eq!(layer.to_vec().unwrap(), file.bytes("layer3").unwrap());
    drop(layer);
    drop(tensors);
    drop(hog);
}
