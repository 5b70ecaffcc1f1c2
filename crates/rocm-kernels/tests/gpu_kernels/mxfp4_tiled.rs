//! `mxfp4_tiled`: the matrix-vector product over tiled MXFP4 weights against the f64 CPU
//! reference of the GGUF rows they were made from. Random payload bytes (every code, both signs,
//! -0), f32/f16/bf16 activations and outputs, awkward shapes (rows that leave a partial tile,
//! rows of 1..3 blocks, 90 blocks: a partial last group; 448 blocks: seven groups a warp; more
//! tiles than the matrix-core kernel's resident blocks), both
//! kernels (matrix cores where the device has them, and the portable one), the scale bytes that
//! take the general conversion (0xFF: NaN; above 240), and the shapes the launcher refuses.
//! Stacked weights written to several outputs in one launch, against each part alone; the
//! product as a dependent launch behind the kernel that writes its x; gate and up with their
//! SwiGLU in one launch against the two products and the `swiglu` kernel; the RMSNorm folded
//! into the product against the `rmsnorm` kernel then the product, and the residual add against
//! the product added on the host; and the dequantisation of a tiled weight (whole, and a stacked
//! weight's parts) against that of its GGUF rows.

use rocm_kernels::quant::{
    BlockFormat, MAX_TILED_OUTPUTS, MxFormat, QK, TiledMxfp4, TiledNorm, TiledOutput, dequantize,
    dequantize_tiled, mx_matmul_reference, mx_matvec_tiled, mx_matvec_tiled_fused, mx_matvec_tiled_portable,
    mx_matvec_tiled_rows, mx_matvec_tiled_split, mx_matvec_tiled_swiglu, x16_rounding_unit,
};
use rocm_kernels::rmsnorm::RmsNorm;
use rocm_kernels::swiglu::swiglu;
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, MatrixCores, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

use crate::bits;

use super::mxfp::{activations, assert_within_rounded, floats, magnitudes, poisoned, random_weights};

const FORMAT: MxFormat = MxFormat::Mxfp4Gguf;

/// (n, k): n = 1, 7 and 17 leave partial tiles; k = 32, 96 and 2880 partial groups.
const SHAPES: &[(usize, usize)] = &[
    (1, 32),
    (7, 96),
    (17, 288),
    (16, 256),
    (127, 4128),
    (33, 2880),
    (129, 14_336),
    (4097, 4096),
    (4097, 2880),
    // More tiles than the matrix-core kernel has blocks (two an SM of 132, or more): each block
    // walks several tiles, its warps' streams running on across tile boundaries.
    (8500, 2080),
    (14_336, 4096),
];

/// y = W x on the tiled copy of `w`, by the launcher's choice of kernel or the portable one.
fn tiled_product<T: Dtype>(gpu: &GpuTest, w: &[u8], x: &[T], n: usize, k: usize, portable: bool) -> Vec<T> {
    let tiled = TiledMxfp4::from_gguf(w, n, k).unwrap().upload(gpu.stream()).unwrap();
    let dx = gpu.stream().upload(x).unwrap();
    let mut y = poisoned::<T>(gpu, n);
    if portable {
        mx_matvec_tiled_portable(&tiled, &dx, 1, &mut [&mut y]).unwrap();
    } else {
        mx_matvec_tiled(&tiled, &dx, &mut y).unwrap();
    }
    y.to_vec().unwrap()
}

fn matches_the_reference<T: Dtype>(gpu: &GpuTest, seed: u64, portable: bool) {
    let mut rng = Rng::new(seed);
    for &(n, k) in SHAPES {
        let w = random_weights(&mut rng, FORMAT, n, k);
        let x = activations::<T>(&mut rng, k);
        let got = tiled_product(gpu, &w, &x, n, k, portable);
        let what = format!("tiled matvec {} n {n} k {k} portable {portable}", T::NAME);
        eprintln!("{what}");
        assert_tiled_within(gpu, &got, &w, &x, n, k, portable, &what);
    }
}

/// `got` (the product of `w` and `x`) against the f64 reference, within the f32 sums' bound
/// and, where the matrix-core kernel staged bf16 x as block-scaled f16, what that rounding adds.
#[allow(clippy::too_many_arguments)]
fn assert_tiled_within<T: Dtype>(
    gpu: &GpuTest,
    got: &[T],
    w: &[u8],
    x: &[T],
    n: usize,
    k: usize,
    portable: bool,
    what: &str,
) {
    let xf = floats(x);
    let expected = mx_matmul_reference(FORMAT, w, &xf, 1, n, k).unwrap();
    let magnitude = magnitudes(FORMAT, w, &xf, 1, n, k);
    let rounding = staging_rounding::<T>(gpu, portable, w, &xf, n, k);
    assert_within_rounded(got, &expected, &magnitude, &rounding, k, what);
}

/// What staging bf16 x as block-scaled f16 (`kernels/include/rocmforge_x16.h`) may add to each
/// of the `n` outputs where the kernel [`tiled_product`] runs does so (the matrix-core one, for
/// bf16): `sum_c |W[r, c]|` times [`x16_rounding_unit`] of x's block `c / 32`; zeros elsewhere.
fn staging_rounding<T: Dtype>(
    gpu: &GpuTest,
    portable: bool,
    w: &[u8],
    x: &[f32],
    n: usize,
    k: usize,
) -> Vec<f64> {
    let staged =
        T::NAME == "bf16" && !portable && gpu.stream().backend().info().matrix_cores != MatrixCores::None;
    if !staged || k == 0 {
        return vec![0.0; n];
    }
    let mut decoded = vec![0.0f32; n * k];
    FORMAT.block_format().dequantize(w, &mut decoded).unwrap();
    let unit: Vec<f64> = x.chunks_exact(QK).map(x16_rounding_unit).collect();
    decoded
        .chunks_exact(k)
        .map(|row| {
            row.chunks_exact(QK)
                .zip(&unit)
                .map(|(b, u)| b.iter().map(|v| f64::from(v.abs())).sum::<f64>() * u)
                .sum()
        })
        .collect()
}

/// `len` activations whose 32-element blocks take five kinds in turn, for the staging of bf16 x
/// as block-scaled f16 (`kernels/include/rocmforge_x16.h`): one element of 2^20 and 31 near
/// 2^-20 (a caller zeroes the large one's weight, so the rows are made of rounded elements);
/// magnitudes spread over 2^-60..2^60; zeros; bf16 subnormals; values near 2^100.
fn wide_range_x(rng: &mut Rng, len: usize) -> Vec<f32> {
    let mut x = vec![0.0f32; len];
    for (b, block) in x.chunks_exact_mut(QK).enumerate() {
        for (e, v) in block.iter_mut().enumerate() {
            let u = rng.f32_vec(1, -1.0, 1.0)[0];
            *v = match b % 5 {
                0 if e == 0 => 2f32.powi(20),
                0 => u * 2f32.powi(-20),
                1 => u * 2f32.powi(rng.below(121) as i32 - 60),
                2 => 0.0,
                3 => u * 2f32.powi(-127 - rng.below(6) as i32),
                _ => u * 2f32.powi(100),
            };
        }
    }
    x
}

/// bf16 x of a wide range within each block of 32 ([`wide_range_x`]; the large elements'
/// weights zero in every row, so the rows are sums of the elements that staging rounds): the
/// matrix-core kernel stages x as block-scaled f16 (`kernels/include/rocmforge_x16.h`) for
/// every k, within the bound that adds; the portable kernel takes x as it is.
#[test]
fn tiled_matvec_bf16_x_of_wide_range_is_within_the_staging_bound() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x7131);
    for (n, k) in [(33, 4096), (7, 96), (17, 2880)] {
        let mut w = random_weights(&mut rng, FORMAT, n, k);
        // Element 0 of each block of the pattern's first kind: the low nibble of its first payload byte.
        for (i, block) in w.chunks_exact_mut(17).enumerate() {
            if (i % (k / 32)).is_multiple_of(5) {
                block[1] &= 0xf0;
            }
        }
        let x: Vec<bf16> = wide_range_x(&mut rng, k).into_iter().map(bf16::from_f32).collect();
        for portable in [false, true] {
            let got = tiled_product(&gpu, &w, &x, n, k, portable);
            let what = format!("wide-range bf16 x, n {n} k {k} portable {portable}");
            assert_tiled_within(&gpu, &got, &w, &x, n, k, portable, &what);
        }
    }
}

#[test]
fn tiled_matvec_matches_the_reference_f32() {
    let gpu = gpu_test!();
    matches_the_reference::<f32>(&gpu, 0x7101, false);
}

#[test]
fn tiled_matvec_matches_the_reference_f16() {
    let gpu = gpu_test!();
    matches_the_reference::<f16>(&gpu, 0x7102, false);
}

#[test]
fn tiled_matvec_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    matches_the_reference::<bf16>(&gpu, 0x7103, false);
}

#[test]
fn portable_tiled_matvec_matches_the_reference_f16() {
    let gpu = gpu_test!();
    matches_the_reference::<f16>(&gpu, 0x7104, true);
}

#[test]
fn portable_tiled_matvec_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    matches_the_reference::<bf16>(&gpu, 0x7105, true);
}

/// Scale bytes at and off the fast conversion's range (0..=240), one matrix each: 0xFF (NaN:
/// its row is NaN); 241..=244 in one row (results near 2^122, compared where the output type
/// holds them); and bytes 0..=130 only (the fast conversion). Every case has a row of scale 0
/// (2^-127).
fn special_scales<T: Dtype>(gpu: &GpuTest, seed: u64, portable: bool) {
    let mut rng = Rng::new(seed);
    let (n, k) = (37, 1024);
    let nb = k / 32;
    let block = |r: usize, b: usize| (r * nb + b) * 17;
    for case in ["nan", "zero scales, fast", "large"] {
        let mut w = random_weights(&mut rng, FORMAT, n, k);
        let mut nan_rows = Vec::new();
        // Row 30: every block at the smallest scale, 2^-127 (its sum is near 1e-36).
        for b in 0..nb {
            w[block(30, b)] = 0;
        }
        match case {
            "nan" => {
                w[block(3, 5)] = 0xff;
                w[block(20, 31)] = 0xff;
                nan_rows = vec![3, 20];
            }
            "large" => {
                // Row 9: scales 2^114..2^117 (codes of at most 6, |x| <= 1: near 2^122, finite in
                // f32 and bf16, not in f16).
                for b in 0..nb {
                    w[block(9, b)] = 241 + (b % 4) as u8;
                }
            }
            _ => {}
        }
        let x = activations::<T>(&mut rng, k);
        let got = tiled_product(gpu, &w, &x, n, k, portable);
        let xf = floats(&x);
        let expected = mx_matmul_reference(FORMAT, &w, &xf, 1, n, k).unwrap();
        let magnitude = magnitudes(FORMAT, &w, &xf, 1, n, k);
        let rounding = staging_rounding::<T>(gpu, portable, &w, &xf, n, k);
        for &r in &nan_rows {
            assert!(
                got[r].to_f32().is_nan(),
                "{case} {}: row {r} has a NaN scale, got {:?}",
                T::NAME,
                got[r]
            );
        }
        // Rows whose exact result T cannot hold (row 9 of "large" in f16) are not compared.
        let representable = |r: usize| T::from_f32(expected[r] as f32).to_f32().is_finite();
        let keep: Vec<usize> = (0..n).filter(|r| !nan_rows.contains(r) && representable(*r)).collect();
        let pick = |v: &[f64]| keep.iter().map(|&r| v[r]).collect::<Vec<_>>();
        let got_rest: Vec<T> = keep.iter().map(|&r| got[r]).collect();
        let what = format!("special scales ({case}) {} portable {portable}", T::NAME);
        assert_within_rounded(&got_rest, &pick(&expected), &pick(&magnitude), &pick(&rounding), k, &what);
        if case == "large" && T::NAME != "f16" {
            assert!(keep.contains(&9) && got[9].to_f32().abs() > 1e30, "{what}: row 9 is {:?}", got[9]);
        }
    }
}

#[test]
fn tiled_special_scales_f32() {
    let gpu = gpu_test!();
    special_scales::<f32>(&gpu, 0x7201, false);
}

#[test]
fn tiled_special_scales_f16() {
    let gpu = gpu_test!();
    special_scales::<f16>(&gpu, 0x7202, false);
}

#[test]
fn tiled_special_scales_bf16() {
    let gpu = gpu_test!();
    special_scales::<bf16>(&gpu, 0x7203, false);
}

#[test]
fn portable_tiled_special_scales_bf16() {
    let gpu = gpu_test!();
    special_scales::<bf16>(&gpu, 0x7204, true);
}

#[test]
fn tiled_empty_shapes() {
    let gpu = gpu_test!();
    // k = 0: every row is an empty sum.
    let w = TiledMxfp4::from_gguf(&[], 5, 0).unwrap().upload(gpu.stream()).unwrap();
    let x = gpu.stream().alloc::<f16>(0).unwrap();
    let mut y = poisoned::<f16>(&gpu, 5);
    mx_matvec_tiled(&w, &x, &mut y).unwrap();
    assert_eq!(y.to_vec().unwrap(), [f16::from_f32(0.0); 5]);
    // n = 0: nothing to write, and no launch.
    let w = TiledMxfp4::from_gguf(&[], 0, 64).unwrap().upload(gpu.stream()).unwrap();
    let x = gpu.stream().alloc::<f16>(64).unwrap();
    let mut y = gpu.stream().alloc::<f16>(0).unwrap();
    mx_matvec_tiled(&w, &x, &mut y).unwrap();
}

#[test]
fn tiled_shapes_are_refused() {
    let gpu = gpu_test!();
    let blocks = vec![0u8; 7 * 3 * 17];
    let w = TiledMxfp4::from_gguf(&blocks, 7, 96).unwrap().upload(gpu.stream()).unwrap();
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "mxfp4_tiled");
    let x = gpu.stream().alloc::<f32>(95).unwrap();
    let mut y = gpu.stream().alloc::<f32>(7).unwrap();
    assert!(message(mx_matvec_tiled(&w, &x, &mut y)).contains("x has 95 elements"));
    // Initialised: the accepted launch below reads it (initcheck reported the read of an
    // uninitialised buffer, which could hold NaN and make the zero expectation flaky).
    let x = gpu.stream().upload(&[1.0f32; 96]).unwrap();
    let mut y8 = gpu.stream().alloc::<f32>(8).unwrap();
    assert!(message(mx_matvec_tiled(&w, &x, &mut y8)).contains("the outputs hold [8] elements"));
    mx_matvec_tiled(&w, &x, &mut y).unwrap();
    assert_eq!(y.to_vec().unwrap(), [0.0; 7], "all-zero codes");
}

/// Random GGUF weights of `parts` rows of `k` (in that order from `rng`), each tiled, and their
/// stack ([`TiledMxfp4::stack`]).
/// The row range of each part of a weight stacked from parts of `parts` rows, in order.
fn part_rows(parts: &[usize]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    parts.iter().scan(0, |start, &n| {
        *start += n;
        Some(*start - n..*start)
    })
}

fn random_stack(rng: &mut Rng, parts: &[usize], k: usize) -> (Vec<Vec<u8>>, Vec<TiledMxfp4>, TiledMxfp4) {
    let weights: Vec<Vec<u8>> = parts.iter().map(|&n| random_weights(rng, FORMAT, n, k)).collect();
    let tiled: Vec<TiledMxfp4> =
        weights.iter().zip(parts).map(|(w, &n)| TiledMxfp4::from_gguf(w, n, k).unwrap()).collect();
    let stacked = TiledMxfp4::stack(&tiled.iter().collect::<Vec<_>>()).unwrap();
    (weights, tiled, stacked)
}

/// Weights stacked along their rows ([`TiledMxfp4::stack`]) and multiplied in one launch into
/// one output a part give each part's bits alone, on either kernel: a layer's Q, K and V at
/// Llama-3-8B's shapes, its gate and up, and small parts whose last leaves a partial tile.
fn split_matches_each_part_alone<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let cases: &[(&[usize], usize)] =
        &[(&[4096, 1024, 1024], 4096), (&[14_336, 14_336], 4096), (&[32, 16, 23], 2880), (&[16], 96)];
    for &(parts, k) in cases {
        let (_, tiled, stacked) = random_stack(&mut rng, parts, k);
        let device = stacked.upload(gpu.stream()).unwrap();
        let x = gpu.stream().upload(&activations::<T>(&mut rng, k)).unwrap();
        for portable in [false, true] {
            let mut ys: Vec<_> = parts.iter().map(|&n| poisoned::<T>(gpu, n)).collect();
            let mut outs: Vec<&mut _> = ys.iter_mut().collect();
            if portable {
                mx_matvec_tiled_portable(&device, &x, 1, &mut outs).unwrap();
            } else {
                mx_matvec_tiled_split(&device, &x, 1, &mut outs).unwrap();
            }
            for (i, part) in tiled.iter().enumerate() {
                let alone = part.upload(gpu.stream()).unwrap();
                let mut y = poisoned::<T>(gpu, parts[i]);
                if portable {
                    mx_matvec_tiled_portable(&alone, &x, 1, &mut [&mut y]).unwrap();
                } else {
                    mx_matvec_tiled(&alone, &x, &mut y).unwrap();
                }
                let (got, want) = (ys[i].to_vec().unwrap(), y.to_vec().unwrap());
                assert!(
                    want.iter().all(|e| e.to_f32().is_finite()),
                    "{} part {i} of {parts:?} alone",
                    T::NAME
                );
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{} part {i} of {parts:?}, k {k}, portable {portable}",
                    T::NAME
                );
                if !portable {
                    // The part by its rows of the stacked weight.
                    let start: usize = parts[..i].iter().sum();
                    let mut by_rows = poisoned::<T>(gpu, parts[i]);
                    mx_matvec_tiled_rows(&device, start..start + parts[i], &x, 1, &mut by_rows).unwrap();
                    assert_eq!(bits(&by_rows.to_vec().unwrap()), bits(&want), "{} part {i} by rows", T::NAME);
                }
            }
        }
    }
}

#[test]
fn tiled_split_matches_each_part_alone_f16() {
    let gpu = gpu_test!();
    split_matches_each_part_alone::<f16>(&gpu, 0x7301);
}

#[test]
fn tiled_split_matches_each_part_alone_bf16() {
    let gpu = gpu_test!();
    split_matches_each_part_alone::<bf16>(&gpu, 0x7302);
}

#[test]
fn tiled_split_matches_each_part_alone_f32() {
    let gpu = gpu_test!();
    split_matches_each_part_alone::<f32>(&gpu, 0x7303);
}

/// What [`TiledMxfp4::stack`] and [`mx_matvec_tiled_split`] refuse, each with its reason.
#[test]
fn tiled_stacks_and_splits_are_refused() {
    let gpu = gpu_test!();
    let tiled = |n: usize, k: usize| TiledMxfp4::from_gguf(&vec![0u8; n * k / 32 * 17], n, k).unwrap();
    let message = |r: Result<TiledMxfp4, KernelError>| crate::shape_message(r.map(|_| ()), "mxfp4_tiled");
    assert!(message(TiledMxfp4::stack(&[])).contains("no weights to stack"));
    assert!(message(TiledMxfp4::stack(&[&tiled(16, 64), &tiled(16, 96)])).contains("weight 1 has k = 96"));
    assert!(message(TiledMxfp4::stack(&[&tiled(17, 64), &tiled(16, 64)])).contains("weight 0 has 17 rows"));
    let stacked = TiledMxfp4::stack(&[&tiled(16, 64), &tiled(17, 64)]).unwrap();
    assert_eq!((stacked.n(), stacked.k()), (33, 64));

    let w = stacked.upload(gpu.stream()).unwrap();
    let x = gpu.stream().upload(&[1.0f32; 64]).unwrap();
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "mxfp4_tiled");
    let mut bufs: Vec<_> = [16, 17, 8, 9, 33, 0].iter().map(|&n| poisoned::<f32>(&gpu, n)).collect();
    let [a16, b17, c8, d9, e33, f0] = &mut bufs[..] else { unreachable!() };
    assert!(message(mx_matvec_tiled_split(&w, &x, 1, &mut [])).contains("0 outputs"));
    assert!(
        message(mx_matvec_tiled_split(&w, &x, 1, &mut [a16, c8]))
            .contains("the outputs hold [16, 8] elements")
    );
    assert!(message(mx_matvec_tiled_split(&w, &x, 1, &mut [c8, d9, a16])).contains("output 0 has 8 rows"));
    assert!(
        message(mx_matvec_tiled_split(&w, &x, 1, &mut [&mut *a16, &mut *f0, &mut *b17, &mut *e33]))
            .contains(&format!("4 outputs; a launch writes 1 to {MAX_TILED_OUTPUTS}"))
    );
    // A part by its rows: from a tile's first row, inside the weight.
    assert!(
        message(mx_matvec_tiled_rows(&w, 8..24, &x, 1, &mut *a16)).contains("rows start at 8, not at a tile")
    );
    assert!(
        message(mx_matvec_tiled_rows(&w, 16..34, &x, 1, &mut *b17)).contains("rows 16..34 are not inside")
    );
    mx_matvec_tiled_rows(&w, 16..33, &x, 1, &mut *b17).unwrap();
    // Accepted: an empty output in the middle, and the whole weight in one.
    mx_matvec_tiled_split(&w, &x, 1, &mut [a16, f0, b17]).unwrap();
    mx_matvec_tiled_split(&w, &x, 1, &mut [e33]).unwrap();
    assert_eq!(a16.to_vec().unwrap(), [0.0; 16], "all-zero codes");
    assert_eq!(b17.to_vec().unwrap(), [0.0; 17], "all-zero codes");
    assert_eq!(e33.to_vec().unwrap(), [0.0; 33], "all-zero codes");
}

/// The product behind the kernel that writes its x, as in a decode step: an RMSNorm of `batch`
/// rows (a dependent launch, which lets the product be scheduled while it runs), then the
/// product of Q, K and V stacked (dependent: its first weight copies go out before it waits),
/// then another norm that overwrites x. Each round's outputs must be the product of that round's
/// normalised x, made alone; a product that read x before the norm wrote it would see the poison
/// or the last round's x.
fn follows_the_writer_of_x<T: Dtype>(gpu: &GpuTest, seed: u64, batch: usize) {
    let mut rng = Rng::new(seed);
    let (parts, k) = ([4096usize, 1024, 1024], 4096);
    let w = random_stack(&mut rng, &parts, k).2.upload(gpu.stream()).unwrap();
    let norm = RmsNorm::new(batch, k, 1e-5);
    let weight = gpu.stream().upload(&activations::<T>(&mut rng, k)).unwrap();
    let mut x = poisoned::<T>(gpu, batch * k);
    let mut ys: Vec<_> = parts.iter().map(|&n| poisoned::<T>(gpu, batch * n)).collect();
    for round in 0..4 {
        let h = gpu.stream().upload(&activations::<T>(&mut rng, batch * k)).unwrap();
        let next = gpu.stream().upload(&activations::<T>(&mut rng, batch * k)).unwrap();
        for y in ys.iter_mut() {
            y.poison().unwrap();
        }
        norm.run(&h, &weight, &mut x).unwrap();
        mx_matvec_tiled_split(&w, &x, batch, &mut ys.iter_mut().collect::<Vec<_>>()).unwrap();
        norm.run(&next, &weight, &mut x).unwrap();
        // Alone: the same norm of h, synchronised, then the stacked product.
        let mut xa = poisoned::<T>(gpu, batch * k);
        norm.run(&h, &weight, &mut xa).unwrap();
        let xa = gpu.stream().upload(&xa.to_vec().unwrap()).unwrap();
        let mut alone: Vec<_> = parts.iter().map(|&n| poisoned::<T>(gpu, batch * n)).collect();
        mx_matvec_tiled_split(&w, &xa, batch, &mut alone.iter_mut().collect::<Vec<_>>()).unwrap();
        for (i, (y, a)) in ys.iter().zip(&alone).enumerate() {
            assert_eq!(
                bits(&y.to_vec().unwrap()),
                bits(&a.to_vec().unwrap()),
                "{} batch {batch} round {round} output {i}",
                T::NAME
            );
        }
    }
}

#[test]
fn tiled_product_follows_the_writer_of_x_bf16() {
    let gpu = gpu_test!();
    follows_the_writer_of_x::<bf16>(&gpu, 0x7311, 1);
    follows_the_writer_of_x::<bf16>(&gpu, 0x7313, 8);
}

#[test]
fn tiled_product_follows_the_writer_of_x_f16() {
    let gpu = gpu_test!();
    follows_the_writer_of_x::<f16>(&gpu, 0x7312, 1);
    follows_the_writer_of_x::<f16>(&gpu, 0x7314, 32);
}

/// Several vectors in one call (`batch` rows of x; outputs `[batch, part rows]`) give each vector
/// the bits of the one-vector product of that vector alone, on either kernel: the matrix cores'
/// several-vector loops (passes of 8, up to 32 a launch, more in launches of 32; bf16 x rounded
/// as the one-vector loop stages it), and the portable kernel's loop over the vectors. Stacked
/// parts at Llama-3-8B's Q, K, V shapes, small parts with a partial last tile and group, a long
/// row, and each part by its rows. x holds values of a wide range within each block (bf16: the
/// block-scaled rounding is where the two loops could differ), with an infinity and a NaN.
fn batch_matches_each_vector_alone<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let cases: &[(&[usize], usize, &[usize])] = &[
        (&[4096, 1024, 1024], 4096, &[2, 8, 32]),
        (&[32, 16, 23], 2880, &[3, 9, 33, 40]),
        (&[16], 96, &[5, 32]),
        (&[129], 14_336, &[8, 17]),
    ];
    for &(parts, k, batches) in cases {
        let (_, _, stacked) = random_stack(&mut rng, parts, k);
        let device = stacked.upload(gpu.stream()).unwrap();
        for &batch in batches {
            let x: Vec<T> = if batch % 2 == 0 {
                activations::<T>(&mut rng, batch * k)
            } else {
                // Wide ranges, and an infinity and a NaN (the several-vector loop's rare path:
                // the block's largest finite magnitude element by element).
                let mut x = wide_range_x(&mut rng, batch * k);
                x[k / 2 + 5] = f32::INFINITY;
                x[batch * k - 7] = f32::NAN;
                x.into_iter().map(T::from_f32).collect()
            };
            let dx = gpu.stream().upload(&x).unwrap();
            let vectors: Vec<DeviceBuffer<T>> =
                x.chunks_exact(k).map(|v| gpu.stream().upload(v).unwrap()).collect();
            for portable in [false, true] {
                let mut ys: Vec<_> = parts.iter().map(|&n| poisoned::<T>(gpu, batch * n)).collect();
                let mut outs: Vec<&mut _> = ys.iter_mut().collect();
                if portable {
                    mx_matvec_tiled_portable(&device, &dx, batch, &mut outs).unwrap();
                } else {
                    mx_matvec_tiled_split(&device, &dx, batch, &mut outs).unwrap();
                }
                let got: Vec<Vec<T>> = ys.iter().map(|y| y.to_vec().unwrap()).collect();
                for (v, xv) in vectors.iter().enumerate() {
                    let mut alone: Vec<_> = parts.iter().map(|&n| poisoned::<T>(gpu, n)).collect();
                    let mut outs: Vec<&mut _> = alone.iter_mut().collect();
                    if portable {
                        mx_matvec_tiled_portable(&device, xv, 1, &mut outs).unwrap();
                    } else {
                        mx_matvec_tiled_split(&device, xv, 1, &mut outs).unwrap();
                    }
                    for (i, (y, a)) in got.iter().zip(&alone).enumerate() {
                        let n = parts[i];
                        let want = a.to_vec().unwrap();
                        let what = format!(
                            "{} parts {parts:?} k {k} batch {batch} vector {v} part {i} portable {portable}",
                            T::NAME
                        );
                        assert_eq!(bits(&y[v * n..(v + 1) * n]), bits(&want), "{what}");
                    }
                }
                if !portable {
                    for (i, rows) in part_rows(parts).enumerate() {
                        let mut by_rows = poisoned::<T>(gpu, batch * rows.len());
                        mx_matvec_tiled_rows(&device, rows, &dx, batch, &mut by_rows).unwrap();
                        let what = format!("{} parts {parts:?} batch {batch} part {i} by rows", T::NAME);
                        assert_eq!(bits(&by_rows.to_vec().unwrap()), bits(&got[i]), "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn tiled_batch_matches_each_vector_alone_f16() {
    let gpu = gpu_test!();
    batch_matches_each_vector_alone::<f16>(&gpu, 0x7331);
}

#[test]
fn tiled_batch_matches_each_vector_alone_bf16() {
    let gpu = gpu_test!();
    batch_matches_each_vector_alone::<bf16>(&gpu, 0x7332);
}

#[test]
fn tiled_batch_matches_each_vector_alone_f32() {
    let gpu = gpu_test!();
    batch_matches_each_vector_alone::<f32>(&gpu, 0x7333);
}

/// Several vectors against the f64 reference of the GGUF rows (the bits above tie them to the
/// one-vector products; this ties a batch to the numbers): every vector of 8 and of 32 at an
/// awkward shape, within the one-vector bound (sums in f32, bf16 x's staging).
fn batch_matches_the_reference<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for (n, k, batch) in [(33, 2880, 8), (17, 4128, 32)] {
        let w = random_weights(&mut rng, FORMAT, n, k);
        let x = activations::<T>(&mut rng, batch * k);
        let tiled = TiledMxfp4::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let mut y = poisoned::<T>(gpu, batch * n);
        mx_matvec_tiled_split(&tiled, &gpu.stream().upload(&x).unwrap(), batch, &mut [&mut y]).unwrap();
        let y = y.to_vec().unwrap();
        for v in 0..batch {
            let what = format!("tiled batch {batch} vector {v} {} n {n} k {k}", T::NAME);
            assert_tiled_within(gpu, &y[v * n..(v + 1) * n], &w, &x[v * k..(v + 1) * k], n, k, false, &what);
        }
    }
}

#[test]
fn tiled_batch_matches_the_reference_f16() {
    let gpu = gpu_test!();
    batch_matches_the_reference::<f16>(&gpu, 0x7341);
}

#[test]
fn tiled_batch_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    batch_matches_the_reference::<bf16>(&gpu, 0x7342);
}

/// No vectors, no columns: batches of k = 0 write zeros for every vector; a batch of 0 launches
/// nothing; x and outputs of the wrong sizes for the batch are refused, saying so.
#[test]
fn tiled_batch_edges() {
    let gpu = gpu_test!();
    let w = TiledMxfp4::from_gguf(&[], 5, 0).unwrap().upload(gpu.stream()).unwrap();
    for batch in [3, 20, 40] {
        let x = gpu.stream().alloc::<bf16>(0).unwrap();
        let mut y = poisoned::<bf16>(&gpu, batch * 5);
        mx_matvec_tiled_split(&w, &x, batch, &mut [&mut y]).unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![bf16::from_f32(0.0); batch * 5], "k = 0, batch {batch}");
    }
    let w = TiledMxfp4::from_gguf(&vec![0u8; 7 * 3 * 17], 7, 96).unwrap().upload(gpu.stream()).unwrap();
    let x = gpu.stream().alloc::<f16>(0).unwrap();
    mx_matvec_tiled_split(&w, &x, 0, &mut [&mut gpu.stream().alloc::<f16>(0).unwrap()]).unwrap();
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "mxfp4_tiled");
    let x = gpu.stream().upload(&[f16::from_f32(1.0); 3 * 96]).unwrap();
    let mut y = poisoned::<f16>(&gpu, 2 * 7);
    assert!(
        message(mx_matvec_tiled_split(&w, &x, 2, &mut [&mut y]))
            .contains("x has 288 elements, 2 vectors of the weight's k = 96 need 192")
    );
    assert!(
        message(mx_matvec_tiled_split(&w, &x, 3, &mut [&mut y]))
            .contains("the outputs hold [14] elements; 3 vectors")
    );
    let mut y = poisoned::<f16>(&gpu, 3 * 7);
    mx_matvec_tiled_split(&w, &x, 3, &mut [&mut y]).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![f16::from_f32(0.0); 3 * 7], "all-zero codes");
}

/// Gate and up stacked, with their SwiGLU in one launch (`mx_matvec_tiled_swiglu`), give the bits
/// of the two products ([`mx_matvec_tiled_split`]) followed by the `swiglu` kernel, on either
/// kernel and for every loop (1, up to 8, up to 32 vectors, and more in launches of 32): Llama-3-8B's
/// FFN at one vector, smaller gates of 1 to 64 tiles at several, k with a partial group, x of a
/// wide range with an infinity and a NaN.
fn swiglu_matches_the_products_then_swiglu<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let cases: &[(usize, usize, &[usize])] =
        &[(14_336, 4096, &[1]), (1024, 4096, &[1, 2, 8, 32]), (48, 2880, &[3, 9, 40]), (16, 96, &[1, 5])];
    for &(ffn, k, batches) in cases {
        let (_, _, stacked) = random_stack(&mut rng, &[ffn, ffn], k);
        let device = stacked.upload(gpu.stream()).unwrap();
        for &batch in batches {
            let x: Vec<T> = if batch % 2 == 0 {
                activations::<T>(&mut rng, batch * k)
            } else {
                let mut x = wide_range_x(&mut rng, batch * k);
                x[k / 3] = f32::INFINITY;
                x[batch * k - 5] = f32::NAN;
                x.into_iter().map(T::from_f32).collect()
            };
            let dx = gpu.stream().upload(&x).unwrap();
            for portable in [false, true] {
                let (mut gate, mut up) = (poisoned::<T>(gpu, batch * ffn), poisoned::<T>(gpu, batch * ffn));
                let mut act = poisoned::<T>(gpu, batch * ffn);
                if portable {
                    mx_matvec_tiled_portable(&device, &dx, batch, &mut [&mut gate, &mut up]).unwrap();
                    mx_matvec_tiled_fused(&device, &dx, batch, None, TiledOutput::Swiglu(&mut act), true)
                        .unwrap();
                } else {
                    mx_matvec_tiled_split(&device, &dx, batch, &mut [&mut gate, &mut up]).unwrap();
                    mx_matvec_tiled_swiglu(&device, &dx, batch, &mut act).unwrap();
                }
                let mut want = poisoned::<T>(gpu, batch * ffn);
                swiglu(&gate, &up, &mut want).unwrap();
                let what = format!("{} ffn {ffn} k {k} batch {batch} portable {portable}", T::NAME);
                assert_eq!(bits(&act.to_vec().unwrap()), bits(&want.to_vec().unwrap()), "{what}");
            }
        }
    }
}

#[test]
fn tiled_swiglu_matches_the_products_then_swiglu_f16() {
    let gpu = gpu_test!();
    swiglu_matches_the_products_then_swiglu::<f16>(&gpu, 0x7351);
}

#[test]
fn tiled_swiglu_matches_the_products_then_swiglu_bf16() {
    let gpu = gpu_test!();
    swiglu_matches_the_products_then_swiglu::<bf16>(&gpu, 0x7352);
}

#[test]
fn tiled_swiglu_matches_the_products_then_swiglu_f32() {
    let gpu = gpu_test!();
    swiglu_matches_the_products_then_swiglu::<f32>(&gpu, 0x7353);
}

/// A gate-and-up launch of k = 0 writes silu(0) * 0 = 0 for every vector; weights that do not
/// halve into whole tiles and activations of the wrong size are refused, saying so.
#[test]
fn tiled_swiglu_edges() {
    let gpu = gpu_test!();
    let w = TiledMxfp4::from_gguf(&[], 64, 0).unwrap().upload(gpu.stream()).unwrap();
    for batch in [1, 3, 40] {
        let x = gpu.stream().alloc::<bf16>(0).unwrap();
        let mut act = poisoned::<bf16>(&gpu, batch * 32);
        mx_matvec_tiled_swiglu(&w, &x, batch, &mut act).unwrap();
        assert_eq!(act.to_vec().unwrap(), vec![bf16::from_f32(0.0); batch * 32], "k = 0, batch {batch}");
    }
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "mxfp4_tiled");
    let x = gpu.stream().upload(&[f16::from_f32(1.0); 2 * 96]).unwrap();
    let odd = TiledMxfp4::from_gguf(&vec![0u8; 48 * 3 * 17], 48, 96).unwrap().upload(gpu.stream()).unwrap();
    let mut act = poisoned::<f16>(&gpu, 2 * 24);
    assert!(
        message(mx_matvec_tiled_swiglu(&odd, &x, 2, &mut act))
            .contains("gate and up of 48 rows: two halves of whole tiles (16 rows) needed")
    );
    let w = TiledMxfp4::from_gguf(&vec![0u8; 64 * 3 * 17], 64, 96).unwrap().upload(gpu.stream()).unwrap();
    let mut short = poisoned::<f16>(&gpu, 2 * 32 - 1);
    assert!(
        message(mx_matvec_tiled_swiglu(&w, &x, 2, &mut short))
            .contains("the activation holds 63 elements; 2 vectors of 32 gates need 64")
    );
}

/// A residual row of multiples of 2^-4 in [-1, 1): its sum of squares is exact in f32 in any
/// order (under 2^14, 8 fraction bits), so every kernel's RMSNorm gives it the same `s`.
fn exact_norm_row<T: Dtype>(rng: &mut Rng, k: usize) -> Vec<T> {
    (0..k).map(|_| T::from_f32((rng.below(32) as f32 - 16.0) / 16.0)).collect()
}

/// The RMSNorm folded into the product (a [`TiledNorm`]) gives the bits of the `rmsnorm` kernel
/// followed by the plain launch, on either kernel: Q, K and V at Llama-3-8B's shapes into three
/// outputs, its gate and up with their SwiGLU, and small parts with partial tiles and groups.
/// The residual rows' sums of squares are exact (above), so any order of adding them gives the
/// same `s`, and the folded norm then makes each element exactly as the `rmsnorm` kernel does.
fn normed_matches_rmsnorm_then_the_product<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let cases: &[(&[usize], usize, bool)] = &[
        (&[4096, 1024, 1024], 4096, false),
        (&[14_336, 14_336], 4096, true),
        (&[32, 16, 23], 2880, false),
        (&[48, 48], 2880, true),
        (&[16], 96, false),
    ];
    for &(parts, k, glu) in cases {
        let (_, _, stacked) = random_stack(&mut rng, parts, k);
        let device = stacked.upload(gpu.stream()).unwrap();
        let h = gpu.stream().upload(&exact_norm_row::<T>(&mut rng, k)).unwrap();
        let weight: Vec<T> = (0..k).map(|_| T::from_f32(rng.uniform(0.5, 1.5) as f32)).collect();
        let weight = gpu.stream().upload(&weight).unwrap();
        let eps = 1e-5;
        let mut xn = poisoned::<T>(gpu, k);
        RmsNorm::new(1, k, eps).run(&h, &weight, &mut xn).unwrap();
        let norm = Some(TiledNorm { weight: &weight, eps });
        for portable in [false, true] {
            let what = format!("{} parts {parts:?} k {k} portable {portable}", T::NAME);
            let mut want: Vec<DeviceBuffer<T>> = parts.iter().map(|&n| poisoned::<T>(gpu, n)).collect();
            let mut got: Vec<DeviceBuffer<T>> = parts.iter().map(|&n| poisoned::<T>(gpu, n)).collect();
            let mut want_refs: Vec<&mut DeviceBuffer<T>> = want.iter_mut().collect();
            let mut got_refs: Vec<&mut DeviceBuffer<T>> = got.iter_mut().collect();
            mx_matvec_tiled_fused(&device, &xn, 1, None, TiledOutput::Split(&mut want_refs), portable)
                .unwrap();
            mx_matvec_tiled_fused(&device, &h, 1, norm, TiledOutput::Split(&mut got_refs), portable).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(bits(&g.to_vec().unwrap()), bits(&w.to_vec().unwrap()), "{what}, part {i}");
            }
            if glu {
                let (mut act, mut want_act) = (poisoned::<T>(gpu, parts[0]), poisoned::<T>(gpu, parts[0]));
                mx_matvec_tiled_fused(&device, &h, 1, norm, TiledOutput::Swiglu(&mut act), portable).unwrap();
                swiglu(&want[0], &want[1], &mut want_act).unwrap();
                assert_eq!(bits(&act.to_vec().unwrap()), bits(&want_act.to_vec().unwrap()), "{what}, swiglu");
            }
        }
    }
}

#[test]
fn tiled_normed_matches_rmsnorm_then_the_product_f16() {
    let gpu = gpu_test!();
    normed_matches_rmsnorm_then_the_product::<f16>(&gpu, 0x7361);
}

#[test]
fn tiled_normed_matches_rmsnorm_then_the_product_bf16() {
    let gpu = gpu_test!();
    normed_matches_rmsnorm_then_the_product::<bf16>(&gpu, 0x7362);
}

#[test]
fn tiled_normed_matches_rmsnorm_then_the_product_f32() {
    let gpu = gpu_test!();
    normed_matches_rmsnorm_then_the_product::<f32>(&gpu, 0x7363);
}

/// A residual launch ([`TiledOutput::Add`]) leaves round(h + round(y)) in the stream, y the
/// plain launch's output, bit for bit: every loop (1, up to 8, up to 32 vectors, and more in
/// launches of 32), either kernel, Llama-3-8B's O and down shapes and a small one with a partial
/// tile and group.
fn add_matches_the_product_added_to_the_stream<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let cases: &[(usize, usize, &[usize])] =
        &[(4096, 4096, &[1]), (4096, 14_336, &[1, 8]), (37, 2880, &[1, 3, 32, 40])];
    for &(n, k, batches) in cases {
        let w = random_weights(&mut rng, FORMAT, n, k);
        let device = TiledMxfp4::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        for &batch in batches {
            let x = gpu.stream().upload(&activations::<T>(&mut rng, batch * k)).unwrap();
            let stream: Vec<T> = activations::<T>(&mut rng, batch * n);
            for portable in [false, true] {
                let mut y = poisoned::<T>(gpu, batch * n);
                mx_matvec_tiled_fused(&device, &x, batch, None, TiledOutput::Split(&mut [&mut y]), portable)
                    .unwrap();
                let want: Vec<T> = stream
                    .iter()
                    .zip(y.to_vec().unwrap())
                    .map(|(&h, y)| T::from_f32(y.to_f32() + h.to_f32()))
                    .collect();
                let mut h = gpu.stream().upload(&stream).unwrap();
                mx_matvec_tiled_fused(&device, &x, batch, None, TiledOutput::Add(&mut h), portable).unwrap();
                let what = format!("{} n {n} k {k} batch {batch} portable {portable}", T::NAME);
                assert_eq!(bits(&h.to_vec().unwrap()), bits(&want), "{what}");
            }
        }
    }
}

#[test]
fn tiled_add_matches_the_product_added_to_the_stream_f16() {
    let gpu = gpu_test!();
    add_matches_the_product_added_to_the_stream::<f16>(&gpu, 0x7371);
}

#[test]
fn tiled_add_matches_the_product_added_to_the_stream_bf16() {
    let gpu = gpu_test!();
    add_matches_the_product_added_to_the_stream::<bf16>(&gpu, 0x7372);
}

#[test]
fn tiled_add_matches_the_product_added_to_the_stream_f32() {
    let gpu = gpu_test!();
    add_matches_the_product_added_to_the_stream::<f32>(&gpu, 0x7373);
}

/// A normed launch of several vectors, a norm weight of the wrong length, a non-positive or NaN
/// eps and a residual stream of the wrong length are refused, saying so.
#[test]
fn tiled_normed_and_add_edges() {
    let gpu = gpu_test!();
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "mxfp4_tiled");
    let w = TiledMxfp4::from_gguf(&vec![0u8; 32 * 3 * 17], 32, 96).unwrap().upload(gpu.stream()).unwrap();
    let x = gpu.stream().upload(&[bf16::from_f32(1.0); 2 * 96]).unwrap();
    let weight = gpu.stream().upload(&[bf16::from_f32(1.0); 96]).unwrap();
    let short = gpu.stream().upload(&[bf16::from_f32(1.0); 95]).unwrap();
    let mut y = poisoned::<bf16>(&gpu, 2 * 32);
    let norm = |weight, eps| Some(TiledNorm { weight, eps });
    let fused = |x, batch, norm, y: &mut DeviceBuffer<bf16>| {
        message(mx_matvec_tiled_fused(&w, x, batch, norm, TiledOutput::Split(&mut [y]), false))
    };
    assert!(fused(&x, 2, norm(&weight, 1e-5), &mut y).contains("a normed launch takes one vector, got 2"));
    let x1 = gpu.stream().upload(&[bf16::from_f32(1.0); 96]).unwrap();
    let mut y1 = poisoned::<bf16>(&gpu, 32);
    assert!(
        fused(&x1, 1, norm(&short, 1e-5), &mut y1)
            .contains("the norm's weight has 95 elements, the weight's k = 96")
    );
    assert!(
        fused(&x1, 1, norm(&weight, 0.0), &mut y1)
            .contains("the norm's eps must be positive and finite, got 0")
    );
    assert!(
        fused(&x1, 1, norm(&weight, f32::NAN), &mut y1).contains("eps must be positive and finite, got NaN")
    );
    let mut stream = poisoned::<bf16>(&gpu, 31);
    let r = mx_matvec_tiled_fused(&w, &x1, 1, None, TiledOutput::Add(&mut stream), false);
    assert!(
        message(r).contains("the outputs hold [31] elements; 1 vectors of the weight's n = 32 rows need")
    );
}

/// A tiled weight dequantised is what `dequantize` gives from the GGUF rows it was made from,
/// bit for bit: whole weights of awkward shapes (partial tiles, partial groups, long rows), and
/// each part of a stacked one by its row range; every scale byte occurs (0: 2^-127, 0xFF: NaN,
/// large ones: infinities in f16).
fn dequantizes_as_the_gguf_rows<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let bits = |v: &DeviceBuffer<T>| bits(&v.to_vec().unwrap());
    let gguf_dequant = |w: &[u8], len: usize| {
        let mut out = poisoned::<T>(gpu, len);
        dequantize(BlockFormat::Mxfp4Gguf, &gpu.stream().upload(w).unwrap(), &mut out).unwrap();
        out
    };
    for (n, k) in [(1, 32), (7, 96), (17, 288), (33, 2880), (129, 14_336), (4097, 4096)] {
        let mut w = random_weights(&mut rng, FORMAT, n, k);
        for (i, block) in w.chunks_exact_mut(17).enumerate() {
            block[0] = (i * 37 % 256) as u8;
        }
        let tiled = TiledMxfp4::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let mut out = poisoned::<T>(gpu, n * k);
        dequantize_tiled(&tiled, 0..n, &mut out).unwrap();
        assert_eq!(bits(&out), bits(&gguf_dequant(&w, n * k)), "{} n {n} k {k}", T::NAME);
    }
    let (parts, k) = ([32usize, 16, 23], 2880);
    let (weights, _, stacked) = random_stack(&mut rng, &parts, k);
    let stacked = stacked.upload(gpu.stream()).unwrap();
    for (i, (w, rows)) in weights.iter().zip(part_rows(&parts)).enumerate() {
        let n = rows.len();
        let mut out = poisoned::<T>(gpu, n * k);
        dequantize_tiled(&stacked, rows, &mut out).unwrap();
        assert_eq!(bits(&out), bits(&gguf_dequant(w, n * k)), "{} part {i} of {parts:?}", T::NAME);
    }
}

#[test]
fn tiled_dequantize_matches_the_gguf_rows_f32() {
    let gpu = gpu_test!();
    dequantizes_as_the_gguf_rows::<f32>(&gpu, 0x7321);
}

#[test]
fn tiled_dequantize_matches_the_gguf_rows_f16() {
    let gpu = gpu_test!();
    dequantizes_as_the_gguf_rows::<f16>(&gpu, 0x7322);
}

#[test]
fn tiled_dequantize_matches_the_gguf_rows_bf16() {
    let gpu = gpu_test!();
    dequantizes_as_the_gguf_rows::<bf16>(&gpu, 0x7323);
}

/// The row ranges and outputs [`dequantize_tiled`] refuses, each with its reason; an empty range.
#[test]
fn tiled_dequantize_ranges_are_refused() {
    let gpu = gpu_test!();
    let w = TiledMxfp4::from_gguf(&vec![0u8; 33 * 2 * 17], 33, 64).unwrap().upload(gpu.stream()).unwrap();
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "mxfp4_tiled");
    let mut out = poisoned::<f32>(&gpu, 17 * 64);
    assert!(
        message(dequantize_tiled(&w, 16..34, &mut out))
            .contains("rows 16..34 are not inside the weight's 33")
    );
    assert!(message(dequantize_tiled(&w, 8..25, &mut out)).contains("rows start at 8, not at a tile"));
    let mut short = poisoned::<f32>(&gpu, 17 * 64 - 1);
    assert!(
        message(dequantize_tiled(&w, 16..33, &mut short))
            .contains("out has 1087 elements; 17 rows of 64 need 1088")
    );
    dequantize_tiled(&w, 16..33, &mut out).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0.0; 17 * 64], "all-zero codes");
    // A longer output: the first rows * k elements are written, the rest left as they were.
    let mut long = poisoned::<f32>(&gpu, 17 * 64 + 5);
    dequantize_tiled(&w, 16..33, &mut long).unwrap();
    let long = long.to_vec().unwrap();
    assert!(long[..17 * 64].iter().all(|&v| v == 0.0) && long[17 * 64..].iter().all(|v| v.is_nan()));
    dequantize_tiled(&w, 32..32, &mut gpu.stream().alloc::<f32>(0).unwrap()).unwrap();
}
