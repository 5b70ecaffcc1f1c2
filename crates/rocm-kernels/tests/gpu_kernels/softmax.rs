//! `softmax` against its f64 CPU reference: awkward shapes, all three dtypes, both kernel paths
//! (rows in registers and streamed; 16-byte vectors and element-wise tails or unaligned rows),
//! causal masks with query offsets (fully masked rows included), additive masks, strides, in
//! place, logits of magnitude 1e4, and shapes the launchers must refuse.

use rocm_kernels::softmax::{Mask, Softmax, softmax, softmax_reference};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, Error, bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, gpu_test};

/// Normal logits of standard deviation `sd`, rounded to the storage type.
fn logits<T: Dtype>(rng: &mut Rng, len: usize, sd: f32) -> Vec<T> {
    rng.normal_f32_vec(len, sd).into_iter().map(T::from_f32).collect()
}

fn floats<T: Dtype>(v: &[T]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

/// The reference is exact (f64, from the stored inputs); the kernel adds f32 arithmetic (a few
/// ulps of exp and the sum: 2e-5 relative is ample) and one rounding to the storage type (2^-11
/// relative for f16, 2^-8 for bf16). The absolute part covers f16 subnormal outputs (spacing
/// 6e-8) and f32 outputs below the normal range.
fn tolerance<T: Dtype>() -> Tolerance {
    let rel = match T::NAME {
        "f32" => 2e-5,
        "f16" => 1.5e-3,
        _ => 8e-3,
    };
    Tolerance::new(1e-7, rel)
}

fn poisoned<T: Dtype>(gpu: &GpuTest, len: usize) -> DeviceBuffer<T> {
    let mut buf = gpu.stream().alloc::<T>(len).unwrap();
    buf.poison().unwrap();
    buf
}

/// The rows of `y` (at `stride`) as f64, and a check that the gaps between rows still hold the
/// poison (NaN) the buffer was filled with: the kernel must not write there.
fn rows_of<T: Dtype>(y: &[T], rows: usize, cols: usize, stride: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row = &y[r * stride..];
        out.extend(row[..cols].iter().map(|v| v.to_f32() as f64));
        if r + 1 < rows {
            assert!(row[cols..stride].iter().all(|v| v.to_f32().is_nan()), "row {r}: the gap was written");
        }
    }
    assert!(
        y[(rows.max(1) - 1) * stride + cols..].iter().all(|v| v.to_f32().is_nan()),
        "the tail was written"
    );
    out
}

/// Shapes that cover: one element; rows shorter than a vector; vector rows with a scalar tail;
/// 4097 (a block's worth plus one); 16 384 (the last length held in registers by 1024 threads);
/// 16 385 and 40 000 (streamed); 10 000 rows.
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (10_000, 1),
    (1, 7),
    (10_000, 7),
    (10, 127),
    (10_000, 127),
    (3, 4097),
    (2, 16_384),
    (2, 16_385),
    (2, 40_000),
];

fn plain<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(rows, cols) in SHAPES {
        let x = logits::<T>(&mut rng, rows * cols, 3.0);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, rows * cols);
        softmax(&dx, &mut y, rows, cols, 0.37, Mask::None).unwrap();
        let shape = Softmax::new(rows, cols).with_scale(0.37);
        let expected = softmax_reference(&shape, &floats(&x), Mask::None);
        eprintln!("softmax {} {rows} x {cols}", T::NAME);
        assert_close(&rows_of(&y.to_vec().unwrap(), rows, cols, cols), &expected, tolerance::<T>());
        assert_eq!(dx.to_vec().unwrap(), x, "x is read only");
    }
}

#[test]
fn softmax_matches_the_reference_f32() {
    let gpu = gpu_test!();
    plain::<f32>(&gpu, 0x50f1);
}

#[test]
fn softmax_matches_the_reference_f16() {
    let gpu = gpu_test!();
    plain::<f16>(&gpu, 0x50f2);
}

#[test]
fn softmax_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    plain::<bf16>(&gpu, 0x50f3);
}

/// (heads, seq_q, cols, offset): square; a KV cache (default offset cols - seq_q); more
/// queries than keys (negative default offset: the first rows fully masked); decode (one
/// query); explicit negative and positive offsets; 10 000 rows; streamed rows, with few
/// visible columns and fully masked; square heads of even and odd seq_q over whole 16-byte
/// vectors (the 16-bit fast path pairs query q with seq_q - 1 - q in consecutive blocks).
const CAUSAL: &[(usize, usize, usize, Option<i64>)] = &[
    (2, 7, 7, None),
    (3, 5, 12, None),
    (2, 9, 4, None),
    (5, 1, 4097, None),
    (4, 33, 127, Some(-40)),
    (2, 64, 300, Some(100)),
    (1, 10_000, 129, Some(-9_950)),
    (1, 3, 40_000, None),
    (2, 2, 40_000, Some(9)),
    (3, 2, 40_000, Some(-1)),
    (2, 256, 256, Some(0)),
    (3, 255, 1000, None),
];

fn causal<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(heads, seq_q, cols, offset) in CAUSAL {
        let rows = heads * seq_q;
        let x = logits::<T>(&mut rng, rows * cols, 2.0);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, rows * cols);
        let shape = Softmax::new(rows, cols).with_scale(1.25);
        shape.run(&dx, &mut y, Mask::Causal { seq_q, offset }).unwrap();
        let expected = softmax_reference(&shape, &floats(&x), Mask::Causal { seq_q, offset });
        eprintln!("causal softmax {} {heads} x {seq_q} x {cols}, offset {offset:?}", T::NAME);
        let got = rows_of(&y.to_vec().unwrap(), rows, cols, cols);
        assert_close(&got, &expected, tolerance::<T>());
        // Fully masked rows are exact zeros, and some shapes above have them.
        let zero_rows = expected.chunks(cols).filter(|r| r.iter().all(|&v| v == 0.0)).count();
        let got_zero_rows = got.chunks(cols).filter(|r| r.iter().all(|&v| v == 0.0)).count();
        assert_eq!(zero_rows, got_zero_rows);
    }
}

#[test]
fn causal_softmax_matches_the_reference_f32() {
    let gpu = gpu_test!();
    causal::<f32>(&gpu, 0xca51);
}

#[test]
fn causal_softmax_matches_the_reference_f16() {
    let gpu = gpu_test!();
    causal::<f16>(&gpu, 0xca52);
}

#[test]
fn causal_softmax_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    causal::<bf16>(&gpu, 0xca53);
}

/// A `[mask_rows, cols]` mask: values in [-2, 2], every fifth entry -inf, and mask row 1 all
/// -inf (its rows come out as zeros).
fn mask_values<T: Dtype>(rng: &mut Rng, mask_rows: usize, cols: usize) -> Vec<T> {
    let mut m: Vec<f32> = rng.f32_vec(mask_rows * cols, -2.0, 2.0);
    for (i, v) in m.iter_mut().enumerate() {
        if i % 5 == 3 || (mask_rows > 1 && i / cols == 1) {
            *v = f32::NEG_INFINITY;
        }
    }
    m.into_iter().map(T::from_f32).collect()
}

fn additive<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    // (rows, mask_rows, cols): a [seq_q, seq_k] mask broadcast over heads, a mask per row, one
    // mask row for all, and streamed rows.
    for &(rows, mask_rows, cols) in &[(12, 4, 7), (10, 5, 4097), (6, 6, 130), (9, 1, 33), (4, 2, 40_000)] {
        let x = logits::<T>(&mut rng, rows * cols, 2.0);
        let m = mask_values::<T>(&mut rng, mask_rows, cols);
        let dx = gpu.stream().upload(&x).unwrap();
        let dm = gpu.stream().upload(&m).unwrap();
        let mut y = poisoned::<T>(gpu, rows * cols);
        let shape = Softmax::new(rows, cols).with_scale(0.5);
        shape.run(&dx, &mut y, Mask::additive(&dm, mask_rows)).unwrap();
        let mf = floats(&m);
        let expected = softmax_reference(&shape, &floats(&x), Mask::additive(&mf[..], mask_rows));
        eprintln!("masked softmax {} {rows} x {cols}, {mask_rows} mask rows", T::NAME);
        assert_close(&rows_of(&y.to_vec().unwrap(), rows, cols, cols), &expected, tolerance::<T>());
        assert_eq!(dm.to_vec().unwrap(), m, "the mask is read only");
    }
}

#[test]
fn additive_mask_softmax_matches_the_reference_f32() {
    let gpu = gpu_test!();
    additive::<f32>(&gpu, 0xadd1);
}

#[test]
fn additive_mask_softmax_matches_the_reference_f16() {
    let gpu = gpu_test!();
    additive::<f16>(&gpu, 0xadd2);
}

#[test]
fn additive_mask_softmax_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    additive::<bf16>(&gpu, 0xadd3);
}

/// Row strides: unaligned ones (every row start off the 16-byte grid: the element-wise path)
/// and aligned ones with gaps; the gaps must stay untouched.
fn strided<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(rows, cols, xs, ys) in
        &[(5, 7, 9, 8), (7, 130, 131, 133), (3, 4097, 4104, 4112), (2, 40_000, 40_003, 40_001)]
    {
        let shape = Softmax::new(rows, cols).with_scale(0.8).with_x_stride(xs).with_y_stride(ys);
        let x = logits::<T>(&mut rng, shape.required_len(xs).unwrap(), 2.0);
        let dx = gpu.stream().upload(&x).unwrap();
        let y_len = shape.required_len(ys).unwrap() + 3;
        let mut y = poisoned::<T>(gpu, y_len);
        shape.run(&dx, &mut y, Mask::causal(rows)).unwrap();
        let expected = softmax_reference(&shape, &floats(&x), Mask::causal(rows));
        eprintln!("strided softmax {} {rows} x {cols}, strides {xs} / {ys}", T::NAME);
        assert_close(&rows_of(&y.to_vec().unwrap(), rows, cols, ys), &expected, tolerance::<T>());
    }
}

#[test]
fn strided_softmax_matches_the_reference_f32() {
    let gpu = gpu_test!();
    strided::<f32>(&gpu, 0x5751);
}

#[test]
fn strided_softmax_matches_the_reference_f16() {
    let gpu = gpu_test!();
    strided::<f16>(&gpu, 0x5752);
}

#[test]
fn strided_softmax_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    strided::<bf16>(&gpu, 0x5753);
}

fn in_place<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(rows, cols, stride) in &[(10_000, 7, 7), (6, 4097, 4099), (3, 40_000, 40_008)] {
        let shape = Softmax::new(rows, cols).with_scale(0.6).with_x_stride(stride);
        let x = logits::<T>(&mut rng, shape.required_len(stride).unwrap(), 2.0);
        let mut dx = gpu.stream().upload(&x).unwrap();
        shape.run_in_place(&mut dx, Mask::causal_with_offset(rows, cols as i64 / 2)).unwrap();
        let expected =
            softmax_reference(&shape, &floats(&x), Mask::causal_with_offset(rows, cols as i64 / 2));
        let got = dx.to_vec().unwrap();
        eprintln!("in-place softmax {} {rows} x {cols}, stride {stride}", T::NAME);
        let got_rows: Vec<f64> =
            (0..rows).flat_map(|r| got[r * stride..][..cols].iter().map(|v| v.to_f32() as f64)).collect();
        assert_close(&got_rows, &expected, tolerance::<T>());
        for r in 0..rows.saturating_sub(1) {
            let gap = r * stride + cols..(r + 1) * stride;
            assert_eq!(got[gap.clone()], x[gap], "row {r}: the gap changed");
        }
    }
}

#[test]
fn in_place_softmax_matches_the_reference_f32() {
    let gpu = gpu_test!();
    in_place::<f32>(&gpu, 0x1e01);
}

#[test]
fn in_place_softmax_matches_the_reference_f16() {
    let gpu = gpu_test!();
    in_place::<f16>(&gpu, 0x1e02);
}

#[test]
fn in_place_softmax_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    in_place::<bf16>(&gpu, 0x1e03);
}

/// Logits around +1e4 and -1e4 (scale 1, so the f32 logits are the stored values and the
/// subtraction of the maximum is exact): finite, and equal to the reference.
fn large<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(rows, cols) in &[(4, 7), (6, 4097), (2, 40_000)] {
        let x: Vec<T> = (0..rows * cols)
            .map(|i| {
                let centre = if (i / cols) % 2 == 0 { 1e4 } else { -1e4 };
                T::from_f32(centre + rng.uniform(-20.0, 0.0) as f32)
            })
            .collect();
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, rows * cols);
        softmax(&dx, &mut y, rows, cols, 1.0, Mask::None).unwrap();
        let got = rows_of(&y.to_vec().unwrap(), rows, cols, cols);
        assert!(got.iter().all(|v| v.is_finite()), "softmax of 1e4 logits must stay finite");
        let expected = softmax_reference(&Softmax::new(rows, cols), &floats(&x), Mask::None);
        assert_close(&got, &expected, tolerance::<T>());
        // Each row sums to one (to the dtype's rounding times the row length).
        for row in got.chunks(cols) {
            let sum: f64 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-2, "row sum {sum}");
        }
    }
    // Mixed signs in one row: exp(-2e4) is zero, not NaN.
    let x: Vec<T> = [1e4f32, -1e4, 1e4, -1e4, 0.0].iter().map(|&v| T::from_f32(v)).collect();
    let dx = gpu.stream().upload(&x).unwrap();
    let mut y = poisoned::<T>(gpu, 5);
    softmax(&dx, &mut y, 1, 5, 1.0, Mask::None).unwrap();
    let got: Vec<f32> = floats(&y.to_vec().unwrap());
    assert_eq!(got, [0.5, 0.0, 0.5, 0.0, 0.0]);
}

#[test]
fn logits_of_magnitude_1e4_stay_finite_f32() {
    let gpu = gpu_test!();
    large::<f32>(&gpu, 0x1e41);
}

#[test]
fn logits_of_magnitude_1e4_stay_finite_f16() {
    let gpu = gpu_test!();
    large::<f16>(&gpu, 0x1e42);
}

#[test]
fn logits_of_magnitude_1e4_stay_finite_bf16() {
    let gpu = gpu_test!();
    large::<bf16>(&gpu, 0x1e43);
}

#[test]
fn an_all_minus_infinity_row_gives_zeros_not_nan() {
    let gpu = gpu_test!();
    // Inputs of -inf themselves (not only through masks), in both kernel paths.
    for cols in [5, 40_000] {
        let mut x = vec![f32::NEG_INFINITY; 2 * cols];
        x[cols + 1] = 3.0;
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<f32>(&gpu, 2 * cols);
        softmax(&dx, &mut y, 2, cols, 1.0, Mask::None).unwrap();
        let got = y.to_vec().unwrap();
        assert!(got[..cols].iter().all(|&v| v == 0.0), "the all -inf row is zeros");
        assert_eq!(got[cols + 1], 1.0);
        assert_eq!(got[cols..].iter().filter(|&&v| v == 0.0).count(), cols - 1);
    }
}

#[test]
fn bad_shapes_are_refused() {
    let gpu = gpu_test!();
    let shape_error = |r: Result<(), KernelError>| crate::shape_message(r, "softmax");
    let x = gpu.stream().upload(&[1.0f32; 24]).unwrap();
    let mut y = poisoned::<f32>(&gpu, 24);
    let mut short = poisoned::<f32>(&gpu, 23);
    assert!(shape_error(softmax(&x, &mut short, 4, 6, 1.0, Mask::None)).contains("y has 23"));
    assert!(shape_error(softmax(&x, &mut y, 4, 5, 1.0, Mask::None)).contains("x has 24"));
    assert!(shape_error(softmax(&x, &mut y, 4, 6, 1.0, Mask::causal(3))).contains("multiple of seq_q"));
    assert!(shape_error(softmax(&x, &mut y, 4, 6, f32::INFINITY, Mask::None)).contains("scale"));
    let mask = gpu.stream().upload(&[0.0f32; 11]).unwrap();
    assert!(shape_error(softmax(&x, &mut y, 4, 6, 1.0, Mask::additive(&mask, 2))).contains("11 elements"));
    let shape = Softmax::new(4, 6).with_x_stride(7);
    assert!(shape_error(shape.run(&x, &mut y, Mask::None)).contains("x holds 24"));
    let mut x2 = gpu.stream().upload(&[1.0f32; 24]).unwrap();
    let in_place = Softmax::new(4, 6).with_y_stride(8);
    assert!(shape_error(in_place.run_in_place(&mut x2, Mask::None)).contains("in place"));
    // A buffer of another stream is refused before anything runs.
    let other = gpu.new_stream();
    let foreign = other.upload(&[1.0f32; 24]).unwrap();
    let err = softmax(&foreign, &mut y, 4, 6, 1.0, Mask::None).unwrap_err();
    assert!(matches!(err, KernelError::Runtime(Error::StreamMismatch { .. })), "{err}");
    let foreign_mask = other.upload(&[0.0f32; 12]).unwrap();
    let err = softmax(&x, &mut y, 4, 6, 1.0, Mask::additive(&foreign_mask, 2)).unwrap_err();
    assert!(matches!(err, KernelError::Runtime(Error::StreamMismatch { .. })), "{err}");
    assert!(y.to_vec().unwrap().iter().all(|v| v.is_nan()), "nothing ran after a refused launch");
    // Empty shapes are no-ops.
    let empty = gpu.stream().alloc::<f32>(0).unwrap();
    let mut empty_y = gpu.stream().alloc::<f32>(0).unwrap();
    softmax(&empty, &mut empty_y, 0, 6, 1.0, Mask::None).unwrap();
    softmax(&empty, &mut empty_y, 6, 0, 1.0, Mask::None).unwrap();
}
