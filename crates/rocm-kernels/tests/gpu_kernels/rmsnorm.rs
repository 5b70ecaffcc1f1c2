//! `rmsnorm` against its CPU reference: awkward shapes, all three dtypes, both kernel paths
//! (16-byte vectors and scalars; rows cached in registers and streamed), residual, strides, in
//! place, large magnitudes, and shapes the launchers must refuse.

use rocm_kernels::rmsnorm::{
    RmsNorm, rmsnorm, rmsnorm_reference, rmsnorm_residual, rmsnorm_residual_reference,
};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, gpu_test};

const EPS: f32 = 1e-5;

fn data<T: Dtype>(rng: &mut Rng, len: usize, lo: f32, hi: f32) -> Vec<T> {
    rng.f32_vec(len, lo, hi).into_iter().map(T::from_f32).collect()
}

/// Storage-type rounding of the reference plus the f32 arithmetic: 1e-5 relative for f32, two
/// ulps for f16 (2^-10 each) and bf16 (2^-7 each). The absolute part, scaled by the largest
/// output, only matters for outputs near zero (f16 subnormals).
fn tolerance<T: Dtype>(expected: &[T]) -> Tolerance {
    let scale = expected.iter().map(|v| v.to_f32().abs()).filter(|v| v.is_finite()).fold(0.0f32, f32::max);
    let rel = match T::NAME {
        "f32" => 1e-5,
        "f16" => 2.0 * 2f64.powi(-10),
        _ => 2.0 * 2f64.powi(-7),
    };
    Tolerance::new(1e-6 * scale as f64, rel)
}

fn poisoned<T: Dtype>(gpu: &GpuTest, len: usize) -> DeviceBuffer<T> {
    let mut buf = gpu.stream().alloc::<T>(len).unwrap();
    buf.poison().unwrap();
    buf
}

/// `len` NaNs: what a poisoned buffer reads back as where the kernel must not write.
fn nans<T: Dtype>(len: usize) -> Vec<T> {
    vec![T::from_f32(f32::NAN); len]
}

/// Shapes that cover: one element; rows shorter than a vector; vector rows with a scalar tail;
/// rows of 4097 (a block's worth plus one); rows long enough for a 1024-thread block; rows too
/// long for the register cache (streamed); 10 000 rows.
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (10_000, 1),
    (1, 7),
    (10_000, 7),
    (10, 127),
    (10_000, 127),
    (3, 4097),
    (2, 16_384),
    (2, 40_000),
];

fn plain<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(rows, cols) in SHAPES {
        let x = data::<T>(&mut rng, rows * cols, -3.0, 3.0);
        let w = data::<T>(&mut rng, cols, -2.0, 2.0);
        let dx = gpu.stream().upload(&x).unwrap();
        let dw = gpu.stream().upload(&w).unwrap();
        let mut out = poisoned::<T>(gpu, rows * cols);
        rmsnorm(&dx, &dw, &mut out, rows, cols, EPS).unwrap();
        let mut expected = nans::<T>(rows * cols);
        rmsnorm_reference(&RmsNorm::new(rows, cols, EPS), &x, &w, &mut expected);
        let got = out.to_vec().unwrap();
        eprintln!("rmsnorm {} {rows} x {cols}", T::NAME);
        assert_close(&got, &expected, tolerance(&expected));
        assert_eq!(dx.to_vec().unwrap(), x, "x is read only");
    }
}

#[test]
fn rmsnorm_matches_the_reference_f32() {
    let gpu = gpu_test!();
    plain::<f32>(&gpu, 0x5101);
}

#[test]
fn rmsnorm_matches_the_reference_f16() {
    let gpu = gpu_test!();
    plain::<f16>(&gpu, 0x5102);
}

#[test]
fn rmsnorm_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    plain::<bf16>(&gpu, 0x5103);
}

fn residual<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64, magnitude: f32) {
    let mut rng = Rng::new(seed);
    for &(rows, cols) in SHAPES {
        let x = data::<T>(&mut rng, rows * cols, -magnitude, magnitude);
        let r = data::<T>(&mut rng, rows * cols, -magnitude, magnitude);
        let w = data::<T>(&mut rng, cols, -2.0, 2.0);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut dr = gpu.stream().upload(&r).unwrap();
        let dw = gpu.stream().upload(&w).unwrap();
        let mut out = poisoned::<T>(gpu, rows * cols);
        rmsnorm_residual(&dx, &mut dr, &dw, &mut out, rows, cols, EPS).unwrap();
        let mut expected_r = r.clone();
        let mut expected = nans::<T>(rows * cols);
        rmsnorm_residual_reference(&RmsNorm::new(rows, cols, EPS), &x, &mut expected_r, &w, &mut expected);
        eprintln!("rmsnorm residual {} {rows} x {cols} magnitude {magnitude}", T::NAME);
        // The sum is one f32 add rounded to T on both sides: bit-exact.
        assert_close(&dr.to_vec().unwrap(), &expected_r, Tolerance::EXACT);
        assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
    }
}

#[test]
fn rmsnorm_residual_writes_the_sum_back_and_normalises_it_f32() {
    let gpu = gpu_test!();
    residual::<f32>(&gpu, 0x5201, 1.0);
}

#[test]
fn rmsnorm_residual_writes_the_sum_back_and_normalises_it_f16() {
    let gpu = gpu_test!();
    residual::<f16>(&gpu, 0x5202, 1.0);
}

#[test]
fn rmsnorm_residual_writes_the_sum_back_and_normalises_it_bf16() {
    let gpu = gpu_test!();
    residual::<bf16>(&gpu, 0x5203, 1.0);
}

#[test]
fn large_magnitudes_neither_overflow_nor_lose_precision() {
    let gpu = gpu_test!();
    // Inputs of 1e4 (squares of 1e8, sums of 1e12 over 10 000 columns) in every dtype.
    fn large<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
        let mut rng = Rng::new(seed);
        for (rows, cols) in [(4, 10_000), (64, 4097), (1000, 7)] {
            let x = data::<T>(&mut rng, rows * cols, -1e4, 1e4);
            let w = data::<T>(&mut rng, cols, -2.0, 2.0);
            let dx = gpu.stream().upload(&x).unwrap();
            let dw = gpu.stream().upload(&w).unwrap();
            let mut out = poisoned::<T>(gpu, rows * cols);
            rmsnorm(&dx, &dw, &mut out, rows, cols, EPS).unwrap();
            let mut expected = nans::<T>(rows * cols);
            rmsnorm_reference(&RmsNorm::new(rows, cols, EPS), &x, &w, &mut expected);
            assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
        }
    }
    large::<f32>(&gpu, 0x5301);
    large::<f16>(&gpu, 0x5302);
    large::<bf16>(&gpu, 0x5303);
    residual::<f32>(&gpu, 0x5304, 1e4);
    residual::<f16>(&gpu, 0x5305, 1e4);
    residual::<bf16>(&gpu, 0x5306, 1e4);
}

/// Strided rows: x and out at strides other than cols, on the vector path (strides a whole
/// number of vectors) and the scalar path (odd strides); out's padding must stay unwritten.
fn strided<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let n = 16 / size_of::<T>();
    for (rows, cols) in [(5usize, 7usize), (33, 127), (3, 4097), (2, 9000)] {
        for (xs, os) in [
            (cols + 3, cols),
            (cols.next_multiple_of(n) + n, cols.next_multiple_of(n) + 2 * n),
            (cols, cols + 1),
        ] {
            let shape = RmsNorm::new(rows, cols, EPS).with_x_stride(xs).with_out_stride(os);
            let x = data::<T>(&mut rng, shape.required_len(xs).unwrap(), -2.0, 2.0);
            let w = data::<T>(&mut rng, cols, -2.0, 2.0);
            let dx = gpu.stream().upload(&x).unwrap();
            let dw = gpu.stream().upload(&w).unwrap();
            let out_len = shape.required_len(os).unwrap() + 5;
            let mut out = poisoned::<T>(gpu, out_len);
            shape.run(&dx, &dw, &mut out).unwrap();
            let mut expected = nans::<T>(out_len);
            rmsnorm_reference(&shape, &x, &w, &mut expected);
            eprintln!("rmsnorm strided {} {rows} x {cols}, x stride {xs}, out stride {os}", T::NAME);
            assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));

            // The residual at a stride of its own.
            let shape = shape.with_residual_stride(cols + 2);
            let r = data::<T>(&mut rng, shape.required_len(cols + 2).unwrap(), -2.0, 2.0);
            let mut dr = gpu.stream().upload(&r).unwrap();
            let mut out = poisoned::<T>(gpu, out_len);
            shape.run_residual(&dx, &mut dr, &dw, &mut out).unwrap();
            let mut expected_r = r.clone();
            let mut expected = nans::<T>(out_len);
            rmsnorm_residual_reference(&shape, &x, &mut expected_r, &w, &mut expected);
            assert_close(&dr.to_vec().unwrap(), &expected_r, Tolerance::EXACT);
            assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
        }
    }
}

#[test]
fn strided_rows_f32() {
    let gpu = gpu_test!();
    strided::<f32>(&gpu, 0x5401);
}

#[test]
fn strided_rows_f16_and_bf16() {
    let gpu = gpu_test!();
    strided::<f16>(&gpu, 0x5402);
    strided::<bf16>(&gpu, 0x5403);
}

fn in_place<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for (rows, cols, stride) in [(10, 127, 127), (4, 4097, 4104), (3, 40_000, 40_001), (100, 7, 9)] {
        let shape = RmsNorm::new(rows, cols, EPS).with_x_stride(stride);
        let len = shape.required_len(stride).unwrap();
        let x = data::<T>(&mut rng, len, -2.0, 2.0);
        let w = data::<T>(&mut rng, cols, -2.0, 2.0);
        let dw = gpu.stream().upload(&w).unwrap();

        let mut dx = gpu.stream().upload(&x).unwrap();
        shape.run_in_place(&mut dx, &dw).unwrap();
        let mut expected = x.clone();
        rmsnorm_reference(&shape.with_out_stride(stride), &x, &w, &mut expected);
        eprintln!("rmsnorm in place {} {rows} x {cols} stride {stride}", T::NAME);
        assert_close(&dx.to_vec().unwrap(), &expected, tolerance(&expected));

        let r = data::<T>(&mut rng, rows * cols, -2.0, 2.0);
        let mut dx = gpu.stream().upload(&x).unwrap();
        let mut dr = gpu.stream().upload(&r).unwrap();
        shape.run_residual_in_place(&mut dx, &mut dr, &dw).unwrap();
        let mut expected_r = r.clone();
        let mut expected = x.clone();
        rmsnorm_residual_reference(&shape.with_out_stride(stride), &x, &mut expected_r, &w, &mut expected);
        assert_close(&dr.to_vec().unwrap(), &expected_r, Tolerance::EXACT);
        assert_close(&dx.to_vec().unwrap(), &expected, tolerance(&expected));
    }
}

#[test]
fn in_place_normalisation_and_fused_add() {
    let gpu = gpu_test!();
    in_place::<f32>(&gpu, 0x5501);
    in_place::<f16>(&gpu, 0x5502);
    in_place::<bf16>(&gpu, 0x5503);
}

/// The boundary between the warp path (v2: a row of at most 16 accesses a lane, one warp per
/// row) and the block path, on both sides, for the vector path (16-byte accesses; 4096 f16 is
/// exactly 16 vectors a lane of a 32-wide warp, 2048 f32 likewise) with and without a scalar
/// tail, and for the scalar path (odd strides: 16 elements a lane), plain and with the residual,
/// with enough rows that every warp of the grid walks several.
#[test]
fn warp_path_and_block_path_boundaries() {
    let gpu = gpu_test!();
    fn run<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
        let mut rng = Rng::new(seed);
        let n = 16 / size_of::<T>();
        let edge = 16 * 32 * n; // 16 vectors a lane of a 32-wide warp
        for cols in [edge - n, edge, edge + n - 1, edge + n, 2 * edge + 3] {
            let shape = RmsNorm::new(300, cols, EPS);
            let x = data::<T>(&mut rng, 300 * cols, -2.0, 2.0);
            let w = data::<T>(&mut rng, cols, -2.0, 2.0);
            let r = data::<T>(&mut rng, 300 * cols, -2.0, 2.0);
            let dx = gpu.stream().upload(&x).unwrap();
            let dw = gpu.stream().upload(&w).unwrap();
            let mut out = poisoned::<T>(gpu, 300 * cols);
            shape.run(&dx, &dw, &mut out).unwrap();
            let mut expected = nans::<T>(300 * cols);
            rmsnorm_reference(&shape, &x, &w, &mut expected);
            eprintln!("rmsnorm boundary {} 300 x {cols}", T::NAME);
            assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
            let mut dr = gpu.stream().upload(&r).unwrap();
            let mut out = poisoned::<T>(gpu, 300 * cols);
            shape.run_residual(&dx, &mut dr, &dw, &mut out).unwrap();
            let mut expected_r = r.clone();
            let mut expected = nans::<T>(300 * cols);
            rmsnorm_residual_reference(&shape, &x, &mut expected_r, &w, &mut expected);
            assert_close(&dr.to_vec().unwrap(), &expected_r, Tolerance::EXACT);
            assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
        }
        // Scalar path (odd x stride): 16 elements a lane of a 32-wide warp is 512 columns.
        for cols in [511, 512, 513, 1025] {
            let shape = RmsNorm::new(200, cols, EPS).with_x_stride(cols + 1);
            let x = data::<T>(&mut rng, shape.required_len(cols + 1).unwrap(), -2.0, 2.0);
            let w = data::<T>(&mut rng, cols, -2.0, 2.0);
            let dx = gpu.stream().upload(&x).unwrap();
            let dw = gpu.stream().upload(&w).unwrap();
            let mut out = poisoned::<T>(gpu, 200 * cols);
            shape.run(&dx, &dw, &mut out).unwrap();
            let mut expected = nans::<T>(200 * cols);
            rmsnorm_reference(&shape, &x, &w, &mut expected);
            eprintln!("rmsnorm scalar boundary {} 200 x {cols}", T::NAME);
            assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
        }
    }
    run::<f32>(&gpu, 0x5701);
    run::<f16>(&gpu, 0x5702);
    run::<bf16>(&gpu, 0x5703);
}

#[test]
fn more_rows_than_one_grid_dimension_holds() {
    let gpu = gpu_test!();
    // 70 000 rows: past the 65 535 blocks of grid.x, so rows continue along grid.y.
    let (rows, cols) = (70_000, 3);
    let mut rng = Rng::new(0x5601);
    let x = data::<f32>(&mut rng, rows * cols, -2.0, 2.0);
    let w = data::<f32>(&mut rng, cols, -2.0, 2.0);
    let dx = gpu.stream().upload(&x).unwrap();
    let dw = gpu.stream().upload(&w).unwrap();
    let mut out = poisoned::<f32>(&gpu, rows * cols);
    rmsnorm(&dx, &dw, &mut out, rows, cols, EPS).unwrap();
    let mut expected = nans::<f32>(rows * cols);
    rmsnorm_reference(&RmsNorm::new(rows, cols, EPS), &x, &w, &mut expected);
    assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));
}

#[test]
fn zero_rows_is_a_no_op() {
    let gpu = gpu_test!();
    let x = gpu.stream().alloc::<f32>(0).unwrap();
    let w = gpu.stream().upload(&[1.0f32; 8]).unwrap();
    let mut out = gpu.stream().alloc::<f32>(0).unwrap();
    rmsnorm(&x, &w, &mut out, 0, 8, EPS).unwrap();
}

#[test]
fn bad_shapes_are_errors() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let x = s.upload(&[1.0f32; 32]).unwrap();
    let w = s.upload(&[1.0f32; 8]).unwrap();
    let mut out = s.alloc::<f32>(32).unwrap();
    let mut r = s.upload(&[1.0f32; 32]).unwrap();
    let shape = |e: KernelError| matches!(e, KernelError::Shape { kernel: "rmsnorm", .. });

    // Wrong lengths for the shape.
    assert!(shape(rmsnorm(&x, &w, &mut out, 4, 9, EPS).unwrap_err()));
    assert!(shape(rmsnorm(&x, &w, &mut out, 3, 8, EPS).unwrap_err()));
    let w7 = s.upload(&[1.0f32; 7]).unwrap();
    assert!(shape(rmsnorm(&x, &w7, &mut out, 4, 8, EPS).unwrap_err()));
    let mut short = s.alloc::<f32>(31).unwrap();
    assert!(shape(rmsnorm(&x, &w, &mut short, 4, 8, EPS).unwrap_err()));
    assert!(shape(rmsnorm_residual(&x, &mut short, &w, &mut out, 4, 8, EPS).unwrap_err()));
    // cols = 0, bad eps.
    let empty = s.alloc::<f32>(0).unwrap();
    assert!(shape(RmsNorm::new(4, 0, EPS).run(&x, &empty, &mut out).unwrap_err()));
    for eps in [0.0, -1e-5, f32::NAN, f32::INFINITY] {
        assert!(shape(rmsnorm(&x, &w, &mut out, 4, 8, eps).unwrap_err()), "eps {eps}");
        assert!(shape(rmsnorm_residual(&x, &mut r, &w, &mut out, 4, 8, eps).unwrap_err()), "eps {eps}");
    }
    // Strides below cols, and rows running past the buffers.
    let base = RmsNorm::new(4, 8, EPS);
    assert!(shape(base.with_x_stride(7).run(&x, &w, &mut out).unwrap_err()));
    assert!(shape(base.with_out_stride(7).run(&x, &w, &mut out).unwrap_err()));
    assert!(shape(base.with_residual_stride(7).run_residual(&x, &mut r, &w, &mut out).unwrap_err()));
    assert!(shape(base.with_x_stride(9).run(&x, &w, &mut out).unwrap_err()));
    assert!(shape(base.with_out_stride(9).run(&x, &w, &mut out).unwrap_err()));
    let mut x_mut = s.upload(&[1.0f32; 32]).unwrap();
    assert!(shape(base.with_out_stride(9).run_in_place(&mut x_mut, &w).unwrap_err()));
    assert!(shape(base.with_x_stride(9).run_in_place(&mut x_mut, &w).unwrap_err()));
    // Nothing was written by the refused launches.
    assert_eq!(x_mut.to_vec().unwrap(), vec![1.0; 32]);
    assert_eq!(r.to_vec().unwrap(), vec![1.0; 32]);
}

/// The group path (v3: one row per block, two 16-byte vectors a thread, blocks of up to 1024
/// threads) on both sides of its edge (2048 vectors: 16 384 f16/bf16 columns, 8192 f32), at the
/// benchmark's 4096 columns, at vector counts whose blocks hold an odd number of warps (4096 + n
/// columns: 513 vectors, 257 threads rounded up to 288 on 32-wide warps), with and without a
/// scalar tail, on a single vector; plain, residual and both in-place forms, with more rows than
/// a wave of blocks for the widest and fewer for the rest.
#[test]
fn group_path_edges() {
    let gpu = gpu_test!();
    fn run<T: Dtype + Into<f64>>(gpu: &GpuTest, seed: u64) {
        let mut rng = Rng::new(seed);
        let n = 16 / size_of::<T>();
        let edge = 2 * 1024 * n;
        // One vector a thread (16-bit residual form) up to 1024 vectors, two past that.
        let one = 1024 * n;
        for (rows, cols) in [
            (70, n),
            (40, one - n),
            (40, one),
            (40, one + 3),
            (40, one + n),
            (40, one + n + 1),
            (300, n + 5),
            (3000, 4096),
            (300, 4096 + n),
            (300, 4096 + n + 3),
            (40, edge - n),
            (40, edge),
            (40, edge + 3),
            (40, edge + n),
        ] {
            let shape = RmsNorm::new(rows, cols, EPS);
            let x = data::<T>(&mut rng, rows * cols, -2.0, 2.0);
            let w = data::<T>(&mut rng, cols, -2.0, 2.0);
            let r = data::<T>(&mut rng, rows * cols, -2.0, 2.0);
            let dx = gpu.stream().upload(&x).unwrap();
            let dw = gpu.stream().upload(&w).unwrap();
            eprintln!("rmsnorm group path {} {rows} x {cols}", T::NAME);

            let mut out = poisoned::<T>(gpu, rows * cols);
            shape.run(&dx, &dw, &mut out).unwrap();
            let mut expected = nans::<T>(rows * cols);
            rmsnorm_reference(&shape, &x, &w, &mut expected);
            assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));

            let mut dr = gpu.stream().upload(&r).unwrap();
            let mut out = poisoned::<T>(gpu, rows * cols);
            shape.run_residual(&dx, &mut dr, &dw, &mut out).unwrap();
            let mut expected_r = r.clone();
            let mut expected = nans::<T>(rows * cols);
            rmsnorm_residual_reference(&shape, &x, &mut expected_r, &w, &mut expected);
            assert_close(&dr.to_vec().unwrap(), &expected_r, Tolerance::EXACT);
            assert_close(&out.to_vec().unwrap(), &expected, tolerance(&expected));

            let mut dxi = gpu.stream().upload(&x).unwrap();
            shape.run_in_place(&mut dxi, &dw).unwrap();
            let mut expected = x.clone();
            rmsnorm_reference(&shape, &x, &w, &mut expected);
            assert_close(&dxi.to_vec().unwrap(), &expected, tolerance(&expected));

            let mut dxi = gpu.stream().upload(&x).unwrap();
            let mut dr = gpu.stream().upload(&r).unwrap();
            shape.run_residual_in_place(&mut dxi, &mut dr, &dw).unwrap();
            let mut expected_r = r.clone();
            let mut expected = x.clone();
            rmsnorm_residual_reference(&shape, &x, &mut expected_r, &w, &mut expected);
            assert_close(&dr.to_vec().unwrap(), &expected_r, Tolerance::EXACT);
            assert_close(&dxi.to_vec().unwrap(), &expected, tolerance(&expected));
        }
    }
    run::<f32>(&gpu, 0x5801);
    run::<f16>(&gpu, 0x5802);
    run::<bf16>(&gpu, 0x5803);
}
