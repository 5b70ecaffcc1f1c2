//! `swiglu` against its CPU reference: two tensors and the fused gate-up layout, awkward sizes,
//! all three dtypes, both kernel paths (16-byte vectors with a scalar tail, and scalars),
//! saturating gates, and shapes the launchers must refuse.

use rocm_kernels::swiglu::{swiglu, swiglu_fused, swiglu_fused_reference, swiglu_reference};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, gpu_test};

fn data<T: Dtype>(rng: &mut Rng, len: usize, lo: f32, hi: f32) -> Vec<T> {
    rng.f32_vec(len, lo, hi).into_iter().map(T::from_f32).collect()
}

/// 1e-5 relative for f32 (expf, a division and a product), two ulps of the storage type for
/// f16 and bf16. The absolute part covers outputs near zero, where silu(g) underflows: a
/// fraction of the largest output, and never less than f32's smallest normal number (2^-126).
/// Below that every format (f32 and bf16 share its exponent range) stores subnormals, whose
/// relative precision shrinks to nothing, and the device's expf may flush them to zero; no
/// relative bound means anything there, so an absolute one of f32::MIN_POSITIVE is the honest
/// floor. It matters only where every expected output is tiny (the one-element cases with
/// very negative gates); nothing looser is allowed anywhere else.
fn tolerance<T: Dtype>(expected: &[T]) -> Tolerance {
    let scale = expected.iter().map(|v| v.to_f32().abs()).filter(|v| v.is_finite()).fold(0.0f32, f32::max);
    let (abs, rel) = match T::NAME {
        "f32" => (1e-7, 1e-5),
        "f16" => (1e-6, 2.0 * 2f64.powi(-10)),
        _ => (1e-6, 2.0 * 2f64.powi(-7)),
    };
    Tolerance::new((abs * scale as f64).max(f32::MIN_POSITIVE as f64), rel)
}

fn poisoned<T: Dtype>(gpu: &GpuTest, len: usize) -> DeviceBuffer<T> {
    let mut buf = gpu.stream().alloc::<T>(len).unwrap();
    buf.poison().unwrap();
    buf
}

fn two_tensors<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64, gate_range: f32) {
    let mut rng = Rng::new(seed);
    for n in [1, 7, 8, 127, 4097, 1_000_003, 2048, 2059, 524_293] {
        let g = data::<T>(&mut rng, n, -gate_range, gate_range);
        let u = data::<T>(&mut rng, n, -2.0, 2.0);
        let dg = gpu.stream().upload(&g).unwrap();
        let du = gpu.stream().upload(&u).unwrap();
        let mut out = poisoned::<T>(gpu, n);
        swiglu(&dg, &du, &mut out).unwrap();
        let mut expected = vec![T::from_f32(0.0); n];
        swiglu_reference(&g, &u, &mut expected);
        eprintln!("swiglu {} n = {n}, gates within {gate_range}", T::NAME);
        assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
    }
}

#[test]
fn two_tensors_match_the_reference() {
    let gpu = gpu_test!();
    two_tensors::<f32>(&gpu, 0x6101, 8.0);
    two_tensors::<f16>(&gpu, 0x6102, 8.0);
    two_tensors::<bf16>(&gpu, 0x6103, 8.0);
}

#[test]
fn saturating_gates_give_zero_and_identity_not_nan() {
    let gpu = gpu_test!();
    // exp(-g) overflows f32 for g < -88.7: silu must stay finite (tiny, then -0), never NaN or
    // a -0 where the true value is a normal number; for large g it is g.
    two_tensors::<f32>(&gpu, 0x6201, 200.0);
    two_tensors::<f16>(&gpu, 0x6202, 200.0);
    two_tensors::<bf16>(&gpu, 0x6203, 200.0);
}

/// (rows, ffn): one element; rows shorter than a vector; a scalar tail; rows on the vector
/// path; odd ffn (up misaligned: the scalar path); Llama's 11008 (1376 vectors a row in f16:
/// chunks of 1024 vectors straddle rows); 10 000 rows; 70 000 rows of 2; rows of exactly one
/// chunk (1024 f16 vectors) and one vector more or less than a chunk, with and without a tail
/// (the flat (row, vector) walk of v2 wraps rows inside a thread's unroll); block edges of v4.
const FUSED: &[(usize, usize)] = &[
    (1, 1),
    (1, 7),
    (10, 127),
    (3, 4097),
    (10_000, 7),
    (10_000, 16),
    (2, 11_008),
    (37, 11_008),
    (4, 1_000),
    (70_000, 2),
    (5, 8192),
    (5, 8184),
    (5, 8200),
    (7, 8195),
    (300, 24),
    (9, 4096 + 3),
    // v4 (a thread per vector, 256-thread blocks): rows of one block of f16 vectors, one vector
    // more (a second block with one live thread), with a tail; 70 000 rows on the vector path
    // (grid.y wraps).
    (6, 2048),
    (6, 2056),
    (6, 2056 + 5),
    (70_000, 16),
];

fn fused<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(rows, ffn) in FUSED {
        let gu = data::<T>(&mut rng, rows * 2 * ffn, -8.0, 8.0);
        let dgu = gpu.stream().upload(&gu).unwrap();
        let mut out = poisoned::<T>(gpu, rows * ffn);
        swiglu_fused(&dgu, &mut out, rows, ffn).unwrap();
        let mut expected = vec![T::from_f32(0.0); rows * ffn];
        swiglu_fused_reference(&gu, rows, ffn, &mut expected);
        eprintln!("swiglu fused {} {rows} x {ffn}", T::NAME);
        assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
        assert_eq!(dgu.to_vec().unwrap(), gu, "gate_up is read only");
    }
}

#[test]
fn fused_gate_up_matches_the_reference_f32() {
    let gpu = gpu_test!();
    fused::<f32>(&gpu, 0x6301);
}

#[test]
fn fused_gate_up_matches_the_reference_f16() {
    let gpu = gpu_test!();
    fused::<f16>(&gpu, 0x6302);
}

#[test]
fn fused_gate_up_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    fused::<bf16>(&gpu, 0x6303);
}

#[test]
fn fused_and_separate_tensors_agree_bit_for_bit() {
    let gpu = gpu_test!();
    let (rows, ffn) = (5, 4096);
    let mut rng = Rng::new(0x6401);
    let gate = data::<f16>(&mut rng, rows * ffn, -6.0, 6.0);
    let up = data::<f16>(&mut rng, rows * ffn, -2.0, 2.0);
    let mut gu = Vec::with_capacity(rows * 2 * ffn);
    for r in 0..rows {
        gu.extend_from_slice(&gate[r * ffn..][..ffn]);
        gu.extend_from_slice(&up[r * ffn..][..ffn]);
    }
    let s = gpu.stream();
    let (dg, du, dgu) = (s.upload(&gate).unwrap(), s.upload(&up).unwrap(), s.upload(&gu).unwrap());
    let mut a = poisoned::<f16>(&gpu, rows * ffn);
    let mut b = poisoned::<f16>(&gpu, rows * ffn);
    swiglu(&dg, &du, &mut a).unwrap();
    swiglu_fused(&dgu, &mut b, rows, ffn).unwrap();
    assert_close(&a.to_vec().unwrap(), &b.to_vec().unwrap(), Tolerance::EXACT);
}

#[test]
fn empty_inputs_are_a_no_op() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let (g, u) = (s.alloc::<f32>(0).unwrap(), s.alloc::<f32>(0).unwrap());
    let mut out = s.alloc::<f32>(0).unwrap();
    swiglu(&g, &u, &mut out).unwrap();
    swiglu_fused(&g, &mut out, 0, 16).unwrap();
}

#[test]
fn bad_shapes_are_errors() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let shape = |e: KernelError| matches!(e, KernelError::Shape { kernel: "swiglu", .. });
    let g = s.upload(&[1.0f32; 12]).unwrap();
    let u11 = s.upload(&[1.0f32; 11]).unwrap();
    let u12 = s.upload(&[1.0f32; 12]).unwrap();
    let mut out = s.upload(&[5.0f32; 12]).unwrap();
    let mut out6 = s.upload(&[5.0f32; 6]).unwrap();
    assert!(shape(swiglu(&g, &u11, &mut out).unwrap_err()));
    assert!(shape(swiglu(&u11, &g, &mut out).unwrap_err()));
    assert!(shape(swiglu(&g, &u12, &mut out6).unwrap_err()));
    // gate_up of 12 is 2 rows of ffn 3 or 3 rows of ffn 2: out must match.
    assert!(shape(swiglu_fused(&g, &mut out, 2, 3).unwrap_err()));
    assert!(shape(swiglu_fused(&g, &mut out6, 2, 4).unwrap_err()));
    assert!(shape(swiglu_fused(&g, &mut out6, 4, 3).unwrap_err()));
    assert!(shape(swiglu_fused(&g, &mut out6, 2, 0).unwrap_err()));
    assert!(shape(swiglu_fused(&g, &mut out6, usize::MAX, 2).unwrap_err()));
    assert_eq!(out.to_vec().unwrap(), vec![5.0; 12], "refused launches write nothing");
    assert_eq!(out6.to_vec().unwrap(), vec![5.0; 6]);
    swiglu_fused(&g, &mut out6, 2, 3).unwrap();
}
