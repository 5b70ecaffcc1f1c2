//! `causal_mask` against its CPU reference: KV-cache and square offsets, negative and extreme
//! offsets, awkward sizes (unaligned row starts and mask starts, so the scalar heads and tails
//! of each row run), strided and head-interleaved layouts, all three dtypes, elements outside
//! the mask unchanged to the bit, and shapes the launcher must refuse.

use rocm_kernels::causal_mask::{CausalMask, causal_mask, causal_mask_reference};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, gpu_test};

fn data<T: Dtype>(rng: &mut Rng, len: usize) -> Vec<T> {
    rng.f32_vec(len, -10.0, 10.0).into_iter().map(T::from_f32).collect()
}

/// Uploads random scores, applies `mask` on the GPU and compares bit for bit with the
/// reference (which changes only masked elements; the rest must come back as uploaded).
fn check<T: Dtype + Into<f64>>(gpu: &GpuTest, rng: &mut Rng, mask: &CausalMask, len: usize) {
    let scores = data::<T>(rng, len);
    let mut d = gpu.stream().upload(&scores).unwrap();
    mask.apply(&mut d).unwrap();
    let mut expected = scores.clone();
    causal_mask_reference(mask, &mut expected);
    eprintln!("causal mask {} {mask:?}", T::NAME);
    assert_close(&d.to_vec().unwrap(), &expected, Tolerance::EXACT);
}

/// (batch, seq_q, seq_k): one element; decode (one query); prefill; KV-cache chunks; rows of
/// 4097; 10 000 rows of 7; seq_q > seq_k.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (3, 1, 4097),
    (2, 127, 127),
    (2, 7, 127),
    (4, 33, 70),
    (1, 5, 4097),
    (1, 300, 4097),
    (1, 10_000, 7),
    (2, 9, 4),
];

fn shapes_and_offsets<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(batch, seq_q, seq_k) in SHAPES {
        let len = batch * seq_q * seq_k;
        let default = CausalMask::new(batch, seq_q, seq_k);
        check::<T>(gpu, &mut rng, &default, len);
        for offset in [0, -3, 5, -(seq_q as i64), seq_k as i64 - 1, i64::MIN, i64::MAX] {
            check::<T>(gpu, &mut rng, &default.with_offset(offset), len);
        }
    }
}

#[test]
fn masks_match_the_reference_f32() {
    let gpu = gpu_test!();
    shapes_and_offsets::<f32>(&gpu, 0x7101);
}

#[test]
fn masks_match_the_reference_f16() {
    let gpu = gpu_test!();
    shapes_and_offsets::<f16>(&gpu, 0x7102);
}

#[test]
fn masks_match_the_reference_bf16() {
    let gpu = gpu_test!();
    shapes_and_offsets::<bf16>(&gpu, 0x7103);
}

/// Work items of v2: a warp per (row, column chunk). Few rows are split into chunks of whole
/// warps of vectors (every shape above), many rows are whole-row items: 40 960 rows is more than
/// the launcher's grid has warps on any current GPU. Long rows split into many chunks, with
/// mask starts inside, at and across chunk boundaries, and an unaligned row stride.
#[test]
fn whole_row_and_split_row_items() {
    let gpu = gpu_test!();
    fn run<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
        let mut rng = Rng::new(seed);
        for (batch, seq_q, seq_k) in [(10usize, 4096usize, 260usize), (2, 3, 70_001), (1, 2, 200_000)] {
            let base = CausalMask::new(batch, seq_q, seq_k);
            for mask in [base, base.with_offset(0), base.with_offset(-1), base.with_offset(2047)] {
                check::<T>(gpu, &mut rng, &mask, batch * seq_q * seq_k);
            }
            let odd = base.with_row_stride(seq_k + 3).with_offset(1);
            check::<T>(gpu, &mut rng, &odd, odd.required_len().unwrap());
        }
    }
    run::<f32>(&gpu, 0x7501);
    run::<f16>(&gpu, 0x7502);
    run::<bf16>(&gpu, 0x7503);
}

#[test]
fn the_contiguous_launcher_is_the_kv_cache_mask() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x7201);
    let (batch, seq_q, seq_k) = (3, 17, 50);
    let scores = data::<f32>(&mut rng, batch * seq_q * seq_k);
    let mut d = gpu.stream().upload(&scores).unwrap();
    causal_mask(&mut d, batch, seq_q, seq_k).unwrap();
    let got = d.to_vec().unwrap();
    for b in 0..batch {
        for i in 0..seq_q {
            for j in 0..seq_k {
                let k = (b * seq_q + i) * seq_k + j;
                // Query i is token seq_k - seq_q + i: it sees keys up to and including itself.
                if j > i + (seq_k - seq_q) {
                    assert_eq!(got[k], f32::NEG_INFINITY, "({b}, {i}, {j})");
                } else {
                    assert_eq!(got[k], scores[k], "({b}, {i}, {j})");
                }
            }
        }
    }
}

#[test]
fn unmasked_elements_stay_poisoned() {
    let gpu = gpu_test!();
    // Poisoned scores and a fill of 0: masked elements become 0, everything else stays NaN.
    fn poisoned<T: Dtype + Into<f64>>(gpu: &GpuTest) {
        for (batch, seq_q, seq_k, offset) in [(2, 7, 127, 0), (1, 64, 4097, 4000), (3, 5, 9, -2)] {
            let mask = CausalMask::new(batch, seq_q, seq_k).with_offset(offset).with_fill(0.0);
            let len = batch * seq_q * seq_k + 3;
            let mut d = gpu.stream().alloc::<T>(len).unwrap();
            d.poison().unwrap();
            mask.apply(&mut d).unwrap();
            let mut expected = vec![T::from_f32(f32::NAN); len];
            causal_mask_reference(&mask, &mut expected);
            assert_close(&d.to_vec().unwrap(), &expected, Tolerance::EXACT);
        }
    }
    poisoned::<f32>(&gpu);
    poisoned::<f16>(&gpu);
    poisoned::<bf16>(&gpu);
}

/// Each row's first masked element shares a 32-byte sector with up to 7 (f32) or 15 (16-bit)
/// unmasked ones, which the kernel reads and writes back so that the sector is stored whole.
/// Every bit pattern must survive that, NaN payloads included: scores of random bits, masks
/// starting at every position of a sector, rows whose sectors cross the row's start or end
/// (odd row strides and lengths), interleaved heads, whole rows masked.
#[test]
fn unmasked_elements_keep_their_bits() {
    let gpu = gpu_test!();
    fn run<T: Dtype>(gpu: &GpuTest, seed: u64, from_bits: fn(u32) -> T, to_bits: fn(T) -> u32) {
        let mut rng = Rng::new(seed);
        let masks = [
            CausalMask::new(2, 40, 40),
            CausalMask::new(3, 33, 70).with_row_stride(75),
            CausalMask::new(2, 17, 129).with_row_stride(131).with_offset(-1),
            CausalMask::new(2, 24, 64).with_row_stride(128).with_batch_stride(64).with_offset(3),
            CausalMask::new(1, 50, 200).with_offset(-60),
        ];
        for mask in masks {
            let len = mask.required_len().unwrap() + 5;
            let scores: Vec<T> = (0..len).map(|_| from_bits(rng.next_u64() as u32)).collect();
            let mut d = gpu.stream().upload(&scores).unwrap();
            mask.apply(&mut d).unwrap();
            let got = d.to_vec().unwrap();
            let mut expected = scores.clone();
            causal_mask_reference(&mask, &mut expected);
            for (k, (&g, &e)) in got.iter().zip(&expected).enumerate() {
                assert_eq!(to_bits(g), to_bits(e), "{} {mask:?}: element {k}", T::NAME);
            }
        }
    }
    run::<f32>(&gpu, 0x7601, f32::from_bits, f32::to_bits);
    run::<f16>(&gpu, 0x7602, |b| f16::from_bits(b as u16), |v| v.to_bits() as u32);
    run::<bf16>(&gpu, 0x7603, |b| bf16::from_bits(b as u16), |v| v.to_bits() as u32);
}

fn layouts<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    // Padded rows (row stride seq_k + 5 or a whole number of vectors more), a padded batch
    // stride, and the head-interleaved [seq_q, heads, seq_k] layout.
    for (batch, seq_q, seq_k) in [(2usize, 7usize, 127usize), (3, 20, 20), (2, 9, 4097)] {
        let base = CausalMask::new(batch, seq_q, seq_k);
        let padded = base.with_row_stride(seq_k + 5);
        let aligned = base.with_row_stride(seq_k.next_multiple_of(8) + 8);
        let gapped = padded.with_batch_stride(seq_q * (seq_k + 5) + 11);
        let interleaved = base.with_row_stride(batch * seq_k).with_batch_stride(seq_k);
        for mask in [padded, aligned, gapped, interleaved] {
            for offset in [mask.offset(), 0, -2] {
                let mask = mask.with_offset(offset);
                let len = mask.required_len().unwrap() + 7;
                check::<T>(gpu, &mut rng, &mask, len);
            }
        }
    }
}

#[test]
fn strided_and_interleaved_layouts() {
    let gpu = gpu_test!();
    layouts::<f32>(&gpu, 0x7301);
    layouts::<f16>(&gpu, 0x7302);
    layouts::<bf16>(&gpu, 0x7303);
}

#[test]
fn fill_values_are_rounded_to_the_storage_type() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x7401);
    for fill in [-1e4f32, 0.0, -1e5, f32::MIN, 3.5] {
        let mask = CausalMask::new(2, 30, 40).with_fill(fill);
        check::<f32>(&gpu, &mut rng, &mask, 2 * 30 * 40);
        // -1e5 and f32::MIN overflow f16 to -inf; bf16 holds -1e5 and rounds f32::MIN to -inf.
        check::<f16>(&gpu, &mut rng, &mask, 2 * 30 * 40);
        check::<bf16>(&gpu, &mut rng, &mask, 2 * 30 * 40);
    }
}

#[test]
fn an_empty_batch_is_a_no_op() {
    let gpu = gpu_test!();
    let mut d = gpu.stream().alloc::<f32>(0).unwrap();
    causal_mask(&mut d, 0, 4, 4).unwrap();
}

#[test]
fn bad_shapes_are_errors() {
    let gpu = gpu_test!();
    let shape = |e: KernelError| matches!(e, KernelError::Shape { kernel: "causal_mask", .. });
    let mut d = gpu.stream().upload(&[1.0f32; 24]).unwrap();
    assert!(shape(causal_mask(&mut d, 2, 3, 5).unwrap_err()));
    assert!(shape(causal_mask(&mut d, 1, 3, 4).unwrap_err()));
    assert!(shape(CausalMask::new(2, 3, 5).apply(&mut d).unwrap_err()));
    assert!(shape(CausalMask::new(2, 0, 4).apply(&mut d).unwrap_err()));
    assert!(shape(CausalMask::new(2, 3, 0).apply(&mut d).unwrap_err()));
    assert!(shape(CausalMask::new(2, 3, 4).with_row_stride(3).apply(&mut d).unwrap_err()));
    assert!(shape(CausalMask::new(2, 3, 4).with_row_stride(5).apply(&mut d).unwrap_err()));
    assert!(shape(CausalMask::new(2, 3, 4).with_batch_stride(4).apply(&mut d).unwrap_err()));
    assert!(shape(CausalMask::new(usize::MAX, 3, 4).apply(&mut d).unwrap_err()));
    assert_eq!(d.to_vec().unwrap(), vec![1.0; 24], "refused launches write nothing");
    causal_mask(&mut d, 2, 3, 4).unwrap();
}
