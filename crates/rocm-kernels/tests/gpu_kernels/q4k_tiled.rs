//! `q4k_tiled`: the one-vector product over tiled q4_K weights against the f64 CPU reference of
//! the GGUF rows they were made from (`quant_matvec_reference`, as for `quant_matvec`'s q4_K):
//! raw random super-blocks (every code, every 6-bit scale and min; f16 `d` and `dmin` of every
//! size and sign, zero and subnormal) and the CPU quantiser's, f16 and bf16 activations,
//! awkward shapes (rows that leave a partial tile; one super-block; 11; 56: seven a warp; more
//! tiles than the kernel's resident blocks), outputs poisoned before each launch. Stacked weights
//! into several outputs against each part alone; gate and up with their SwiGLU against the two
//! products and the `swiglu` kernel; the RMSNorm folded in against the `rmsnorm` kernel then the
//! product; the residual add against the product added on the host; the product behind the
//! kernel that writes its x (a dependent launch); and what the launcher refuses.
//!
//! Tolerance: `QuantMatvecReference::allowed_error` (the f32 sums: every term passes fewer than
//! `k` roundings in this kernel too, its parts `step q` and `min` added separately), plus, for
//! bf16, what staging x as block-scaled f16 may move it (`x16_rounding_unit` of each 32-element
//! block, times the block's `|step q| + |min|`).

use rocm_kernels::quant::{
    DeviceTiledQ4k, GgmlFormat, QK, TiledNorm, TiledOutput, TiledQ4k, dequantize_q4_k, dequantize_tiled_q4k,
    q4k_matvec_tiled, q4k_matvec_tiled_fused, q4k_matvec_tiled_split, q4k_tiled_on_matrix_cores,
    quant_matvec_reference, x16_rounding_unit,
};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

use crate::bits;
use crate::mxfp::{activations, floats, poisoned};
use crate::quant_matvec::case_weights;
use crate::tiled_columns::{self, Columns};

const FORMAT: GgmlFormat = GgmlFormat::Q4K;

/// (n, k): n = 1, 7, 17, 33 leave partial tiles; k = 256 is one super-block, 2816 eleven.
const SHAPES: &[(usize, usize)] = &[
    (1, 256),
    (7, 512),
    (17, 768),
    (16, 256),
    (127, 4096),
    (33, 2816),
    (129, 14_336),
    (4097, 4096),
    // More tiles than the kernel has resident blocks: each block walks several tiles.
    (8500, 2048),
    (14_336, 4096),
];

/// Asserts `got` (rows of `w` times `x`) within the reference's bound plus, where the kernel
/// staged bf16 x as block-scaled f16 (`staged`: the matrix-core kernel), staging's rounding.
fn assert_within<T: Dtype>(got: &[T], w: &[u8], x: &[T], n: usize, k: usize, staged: bool, what: &str) {
    // What staging bf16 x moves each element by, at most: a unit for each 32-element block.
    let units: Option<Vec<f32>> = (staged && T::NAME == "bf16")
        .then(|| floats(x).chunks_exact(QK).flat_map(|b| [x16_rounding_unit(b) as f32; QK]).collect());
    assert_within_units(got, w, x, n, k, units.as_deref(), what);
}

/// As [`assert_within`], with the staging's unit of each element of x given (`None`: x exact).
fn assert_within_units<T: Dtype>(
    got: &[T],
    w: &[u8],
    x: &[T],
    n: usize,
    k: usize,
    units: Option<&[f32]>,
    what: &str,
) {
    let xf = floats(x);
    let reference = quant_matvec_reference(FORMAT, w, &xf, n, k, 1).unwrap();
    // The reference's magnitude of the units is sum_c (|step q_c| + |min|) unit_c.
    let staging = match units {
        Some(units) => quant_matvec_reference(FORMAT, w, units, n, k, 1).unwrap().magnitude,
        None => vec![0.0; n],
    };
    let (out_rel, _) = rocm_kernels::quant::QuantMatvecReference::store_rounding(T::NAME);
    for (r, g) in got.iter().enumerate() {
        let tol = reference.allowed_error(r, T::NAME) + staging[r] * (1.0 + out_rel);
        let (g, want) = (g.to_f32() as f64, reference.y[r]);
        assert!((g - want).abs() <= tol, "{what}: row {r} got {g}, want {want} (tolerance {tol:e})");
    }
}

fn matches_the_reference<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for (case, &(n, k)) in SHAPES.iter().enumerate() {
        let w = case_weights(&mut rng, case, FORMAT, n, k);
        let x = activations::<T>(&mut rng, k);
        let tiled = TiledQ4k::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, n);
        q4k_matvec_tiled(&tiled, &dx, &mut y).unwrap();
        let what = format!("tiled q4_K {} n {n} k {k}", T::NAME);
        eprintln!("{what}");
        assert_within(&y.to_vec().unwrap(), &w, &x, n, k, staged::<T>(gpu), &what);
    }
}

/// Whether one vector of `T` takes the matrix-core kernel here (which stages bf16 x).
fn staged<T: Dtype>(gpu: &GpuTest) -> bool {
    q4k_tiled_on_matrix_cores::<T>(gpu.stream())
}

#[test]
fn q4k_tiled_matches_the_reference_f16() {
    let gpu = gpu_test!();
    matches_the_reference::<f16>(&gpu, 0x7401);
}

#[test]
fn q4k_tiled_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    matches_the_reference::<bf16>(&gpu, 0x7402);
}

/// The unit staging moves each element of a vector x by in the several-vector loop, which rounds
/// bf16 to f16 over the 32 elements one mma takes: in each super-block, pair (h, e)'s elements
/// 32 (u + 4h) + 8e + i of the four sub-blocks u (i < 8).
fn pair_units(x: &[f32]) -> Vec<f32> {
    let mut units = vec![0f32; x.len()];
    for (sb, xs) in x.chunks_exact(256).enumerate() {
        for (h, e) in (0..2).flat_map(|h| (0..4).map(move |e| (h, e))) {
            let at = |u: usize, i: usize| 32 * (u + 4 * h) + 8 * e + i;
            let values: Vec<f32> =
                (0..4).flat_map(|u| (0..8).map(move |i| (u, i))).map(|(u, i)| xs[at(u, i)]).collect();
            let unit = x16_rounding_unit(&values) as f32;
            for (u, i) in (0..4).flat_map(|u| (0..8).map(move |i| (u, i))) {
                units[256 * sb + at(u, i)] = unit;
            }
        }
    }
    units
}

/// Several vectors through the matrix cores' several-vector loops (batch8, batch32, and a batch
/// of 40 in two launches) where the device has them, else the portable kernel: each vector
/// against the reference, outputs poisoned.
fn batches_match<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let cases = [
        (37usize, 4096usize, 2usize),
        (129, 2816, 8),
        (33, 768, 13),
        (17, 14_336, 32),
        (16, 256, 40),
        (4097, 4096, 9),
    ];
    let mma = q4k_tiled_on_matrix_cores::<T>(gpu.stream());
    for (case, &(n, k, batch)) in cases.iter().enumerate() {
        let w = case_weights(&mut rng, case, FORMAT, n, k);
        let tiled = TiledQ4k::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let x = activations::<T>(&mut rng, batch * k);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, batch * n);
        q4k_matvec_tiled_split(&tiled, &dx, batch, &mut [&mut y], false).unwrap();
        let got = y.to_vec().unwrap();
        for v in 0..batch {
            let xv = &x[v * k..(v + 1) * k];
            let units = (mma && T::NAME == "bf16").then(|| pair_units(&floats(xv)));
            let what = format!("tiled q4_K {} n {n} k {k} vector {v} of {batch}", T::NAME);
            assert_within_units(&got[v * n..(v + 1) * n], &w, xv, n, k, units.as_deref(), &what);
        }
    }
}

#[test]
fn q4k_tiled_batches_match_the_reference_f16() {
    let gpu = gpu_test!();
    batches_match::<f16>(&gpu, 0x7411);
}

#[test]
fn q4k_tiled_batches_match_the_reference_bf16() {
    let gpu = gpu_test!();
    batches_match::<bf16>(&gpu, 0x7412);
}

/// The portable kernel (every device; f32, f16, bf16; any number of vectors) against the
/// reference, each vector of a batch on its own, and the dequantisation of the tiles bit for bit
/// against the GGUF rows' (the CPU codec, rounded to `T` once).
fn portable_and_dequant_match<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for (case, &(n, k, batch)) in
        [(17usize, 768usize, 1usize), (129, 4096, 3), (33, 2816, 2), (16, 256, 5)].iter().enumerate()
    {
        let w = case_weights(&mut rng, case, FORMAT, n, k);
        let tiled = TiledQ4k::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let x = activations::<T>(&mut rng, batch * k);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, batch * n);
        q4k_matvec_tiled_split(&tiled, &dx, batch, &mut [&mut y], true).unwrap();
        let got = y.to_vec().unwrap();
        for v in 0..batch {
            let what = format!("portable tiled q4_K {} n {n} k {k} vector {v} of {batch}", T::NAME);
            assert_within(&got[v * n..(v + 1) * n], &w, &x[v * k..(v + 1) * k], n, k, false, &what);
        }
        let mut out = poisoned::<T>(gpu, n * k + 7);
        dequantize_tiled_q4k(&tiled, n, &mut out).unwrap();
        let mut want = vec![0f32; n * k];
        dequantize_q4_k(&w, &mut want).unwrap();
        let want: Vec<T> = want.into_iter().map(T::from_f32).collect();
        assert_eq!(bits(&out.to_vec().unwrap()[..n * k]), bits(&want), "dequant {} n {n} k {k}", T::NAME);
    }
}

#[test]
fn q4k_tiled_portable_and_dequant_match_f32() {
    let gpu = gpu_test!();
    portable_and_dequant_match::<f32>(&gpu, 0x7403);
}

#[test]
fn q4k_tiled_portable_and_dequant_match_bf16() {
    let gpu = gpu_test!();
    portable_and_dequant_match::<bf16>(&gpu, 0x7404);
}

/// The q4_K layout for the shared checks ([`Columns`]).
struct Q4k;

impl Columns for Q4k {
    type Host = TiledQ4k;
    type Device = DeviceTiledQ4k;
    const FORMAT: GgmlFormat = FORMAT;
    const KERNEL: &'static str = "q4k_tiled";
    fn tile(w: &[u8], n: usize, k: usize) -> TiledQ4k {
        TiledQ4k::from_gguf(w, n, k).unwrap()
    }
    fn stack(parts: &[&TiledQ4k]) -> TiledQ4k {
        TiledQ4k::stack(parts).unwrap()
    }
    fn upload(w: &TiledQ4k, gpu: &GpuTest) -> DeviceTiledQ4k {
        w.upload(gpu.stream()).unwrap()
    }
    fn matvec<T: Dtype>(
        w: &DeviceTiledQ4k,
        x: &DeviceBuffer<T>,
        y: &mut DeviceBuffer<T>,
    ) -> Result<(), KernelError> {
        q4k_matvec_tiled(w, x, y)
    }
    fn fused<T: Dtype>(
        w: &DeviceTiledQ4k,
        x: &DeviceBuffer<T>,
        norm: Option<TiledNorm<'_, T>>,
        out: TiledOutput<'_, '_, T>,
    ) -> Result<(), KernelError> {
        q4k_matvec_tiled_fused(w, x, norm, out)
    }
    fn assert_within<T: Dtype>(gpu: &GpuTest, got: &[T], w: &[u8], x: &[T], n: usize, k: usize, what: &str) {
        assert_within(got, w, x, n, k, staged::<T>(gpu), what);
    }
}

#[test]
fn q4k_tiled_split_matches_each_part_alone_bf16() {
    let gpu = gpu_test!();
    tiled_columns::split_matches_each_part_alone::<Q4k, bf16>(&gpu, 0x7411);
}

#[test]
fn q4k_tiled_split_matches_each_part_alone_f16() {
    let gpu = gpu_test!();
    tiled_columns::split_matches_each_part_alone::<Q4k, f16>(&gpu, 0x7412);
}

#[test]
fn q4k_tiled_swiglu_and_norm_match_their_kernels_bf16() {
    let gpu = gpu_test!();
    tiled_columns::swiglu_and_norm_match_their_kernels::<Q4k, bf16>(&gpu, 0x7421);
}

#[test]
fn q4k_tiled_swiglu_and_norm_match_their_kernels_f16() {
    let gpu = gpu_test!();
    tiled_columns::swiglu_and_norm_match_their_kernels::<Q4k, f16>(&gpu, 0x7422);
}

#[test]
fn q4k_tiled_add_matches_the_product_added_to_the_stream_bf16() {
    let gpu = gpu_test!();
    tiled_columns::add_matches_the_product_added_to_the_stream::<Q4k, bf16>(&gpu, 0x7431);
}

#[test]
fn q4k_tiled_add_matches_the_product_added_to_the_stream_f16() {
    let gpu = gpu_test!();
    tiled_columns::add_matches_the_product_added_to_the_stream::<Q4k, f16>(&gpu, 0x7432);
}

#[test]
fn q4k_tiled_product_follows_the_writer_of_x() {
    let gpu = gpu_test!();
    tiled_columns::product_follows_the_writer_of_x::<Q4k>(&gpu, 0x7441);
}

#[test]
fn q4k_tiled_edges_and_refusals() {
    let gpu = gpu_test!();
    tiled_columns::edges_and_refusals::<Q4k>(&gpu, &vec![0u8; 48 * 144]);
}
