//! `q8_0_tiled`: the one-vector product over tiled q8_0 weights against the f64 CPU reference of
//! the GGUF rows they were made from (`quant_matvec_reference`, as for `quant_matvec`'s q8_0):
//! raw random blocks (every code; f16 `d` of every size and sign, zero and subnormal) and the CPU
//! quantiser's, f16 and bf16 activations, awkward shapes (rows that leave a partial tile; one
//! group; 11; 56: seven a warp; more tiles than the kernel's resident blocks), outputs poisoned
//! before each launch. The portable kernel (f32, bf16, several vectors); stacked weights into
//! several outputs against each part alone; gate and up with their SwiGLU against the two
//! products and the `swiglu` kernel; the RMSNorm folded in against the `rmsnorm` kernel then the
//! product; the residual add against the product added on the host; the product behind the
//! kernel that writes its x (a dependent launch); and what the launcher refuses.
//!
//! Tolerance: `QuantMatvecReference::allowed_error`'s derivation over the terms this kernel adds.
//! The portable kernel adds `d q x`, the reference's terms. The matrix-core kernel sums each
//! block's `(q + 128) x` and takes `128 sum x` off (`kernels/q8_0_tiled.hip`), so its sum of
//! magnitudes is `sum |d| (|q + 128| + 128) |x|` ([`offset_magnitude`]), in place of
//! `sum |d q x|`; plus, for bf16, what staging x as block-scaled f16 may move it
//! (`x16_rounding_unit` of each 32-element block, times `|d| (|q + 128| + 128)`).

use rocm_kernels::quant::{
    DeviceTiledQ8, GgmlFormat, Q8_0_BLOCK_BYTES, QK, QuantMatvecReference, TiledNorm, TiledOutput, TiledQ8,
    q8_0_matvec_tiled, q8_0_matvec_tiled_fused, q8_0_matvec_tiled_split, q8_0_tiled_on_matrix_cores,
    quant_matvec_reference, x16_rounding_unit,
};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

use crate::mxfp::{activations, floats, poisoned};
use crate::quant_matvec::case_weights;
use crate::tiled_columns::{self, Columns};

const FORMAT: GgmlFormat = GgmlFormat::Q8_0;

/// (n, k): n = 1, 7, 17, 33 leave partial tiles; k = 256 is one group, 2816 eleven.
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

/// For each row of `w` (`n` GGUF q8_0 rows of `k`), `sum_c |d| (|q_c + 128| + 128) v_c` over
/// `v` (`k` non-negative values): the matrix-core kernel's sum of magnitudes for `v = |x|`.
fn offset_magnitude(w: &[u8], v: &[f64], n: usize, k: usize) -> Vec<f64> {
    let row_bytes = k / QK * Q8_0_BLOCK_BYTES;
    (0..n)
        .map(|r| {
            w[r * row_bytes..][..row_bytes]
                .chunks_exact(Q8_0_BLOCK_BYTES)
                .zip(v.chunks_exact(QK))
                .map(|(block, vs)| {
                    let d = f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32().abs() as f64;
                    let terms: f64 = block[2..]
                        .iter()
                        .zip(vs)
                        .map(|(&q, &v)| ((q as i8 as f64 + 128.0).abs() + 128.0) * v)
                        .sum();
                    d * terms
                })
                .sum()
        })
        .collect()
}

/// Asserts `got` (rows of `w` times `x`) within the bound of the kernel that ran: the matrix-core
/// one (`mma`: its own terms, and staging's rounding of bf16 x) or the portable one.
fn assert_within<T: Dtype>(got: &[T], w: &[u8], x: &[T], n: usize, k: usize, mma: bool, what: &str) {
    let xf = floats(x);
    let reference = quant_matvec_reference(FORMAT, w, &xf, n, k, 1).unwrap();
    let (out_rel, abs) = QuantMatvecReference::store_rounding(T::NAME);
    let (magnitude, staging) = if mma {
        let ax: Vec<f64> = xf.iter().map(|v| v.abs() as f64).collect();
        let units: Vec<f64> = if T::NAME == "bf16" {
            xf.chunks_exact(QK).flat_map(|b| [x16_rounding_unit(b); QK]).collect()
        } else {
            vec![0.0; k]
        };
        (offset_magnitude(w, &ax, n, k), offset_magnitude(w, &units, n, k))
    } else {
        (reference.magnitude.clone(), vec![0.0; n])
    };
    for (r, g) in got.iter().enumerate() {
        let sum = (k as f64 + 1.0) * 2f64.powi(-23) * magnitude[r] + staging[r];
        let tol = sum * (1.0 + out_rel) + out_rel * reference.y[r].abs() + abs;
        let (g, want) = (g.to_f32() as f64, reference.y[r]);
        assert!((g - want).abs() <= tol, "{what}: row {r} got {g}, want {want} (tolerance {tol:e})");
    }
}

/// Whether one vector of `T` takes the matrix-core kernel here.
fn mma<T: Dtype>(gpu: &GpuTest) -> bool {
    q8_0_tiled_on_matrix_cores::<T>(gpu.stream())
}

fn matches_the_reference<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for (case, &(n, k)) in SHAPES.iter().enumerate() {
        let w = case_weights(&mut rng, case, FORMAT, n, k);
        let x = activations::<T>(&mut rng, k);
        let tiled = TiledQ8::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, n);
        q8_0_matvec_tiled(&tiled, &dx, &mut y).unwrap();
        let what = format!("tiled q8_0 {} n {n} k {k}", T::NAME);
        eprintln!("{what}");
        assert_within(&y.to_vec().unwrap(), &w, &x, n, k, mma::<T>(gpu), &what);
    }
}

#[test]
fn q8_0_tiled_matches_the_reference_f16() {
    let gpu = gpu_test!();
    matches_the_reference::<f16>(&gpu, 0x7801);
}

#[test]
fn q8_0_tiled_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    matches_the_reference::<bf16>(&gpu, 0x7802);
}

/// The portable kernel (what an AMD GPU runs), one vector and several in one launch, each vector
/// against the reference.
fn portable_matches<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for (case, &(n, k, batch)) in
        [(37usize, 768usize, 1usize), (129, 4096, 3), (16, 256, 5)].iter().enumerate()
    {
        let w = case_weights(&mut rng, case, FORMAT, n, k);
        let tiled = TiledQ8::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let x = activations::<T>(&mut rng, batch * k);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, batch * n);
        q8_0_matvec_tiled_split(&tiled, &dx, batch, &mut [&mut y], true).unwrap();
        let got = y.to_vec().unwrap();
        for v in 0..batch {
            let what = format!("portable {} n {n} k {k} vector {v} of {batch}", T::NAME);
            assert_within(&got[v * n..][..n], &w, &x[v * k..][..k], n, k, false, &what);
        }
    }
}

#[test]
fn q8_0_tiled_portable_matches_f32() {
    let gpu = gpu_test!();
    portable_matches::<f32>(&gpu, 0x7803);
}

#[test]
fn q8_0_tiled_portable_matches_bf16() {
    let gpu = gpu_test!();
    portable_matches::<bf16>(&gpu, 0x7804);
}

/// The q8_0 layout for the shared checks ([`Columns`]).
struct Q8;

impl Columns for Q8 {
    type Host = TiledQ8;
    type Device = DeviceTiledQ8;
    const FORMAT: GgmlFormat = FORMAT;
    const KERNEL: &'static str = "q8_0_tiled";
    fn tile(w: &[u8], n: usize, k: usize) -> TiledQ8 {
        TiledQ8::from_gguf(w, n, k).unwrap()
    }
    fn stack(parts: &[&TiledQ8]) -> TiledQ8 {
        TiledQ8::stack(parts).unwrap()
    }
    fn upload(w: &TiledQ8, gpu: &GpuTest) -> DeviceTiledQ8 {
        w.upload(gpu.stream()).unwrap()
    }
    fn matvec<T: Dtype>(
        w: &DeviceTiledQ8,
        x: &DeviceBuffer<T>,
        y: &mut DeviceBuffer<T>,
    ) -> Result<(), KernelError> {
        q8_0_matvec_tiled(w, x, y)
    }
    fn fused<T: Dtype>(
        w: &DeviceTiledQ8,
        x: &DeviceBuffer<T>,
        norm: Option<TiledNorm<'_, T>>,
        out: TiledOutput<'_, '_, T>,
    ) -> Result<(), KernelError> {
        q8_0_matvec_tiled_fused(w, x, norm, out)
    }
    fn assert_within<T: Dtype>(gpu: &GpuTest, got: &[T], w: &[u8], x: &[T], n: usize, k: usize, what: &str) {
        assert_within(got, w, x, n, k, mma::<T>(gpu), what);
    }
}

#[test]
fn q8_0_tiled_split_matches_each_part_alone_bf16() {
    let gpu = gpu_test!();
    tiled_columns::split_matches_each_part_alone::<Q8, bf16>(&gpu, 0x7811);
}

#[test]
fn q8_0_tiled_split_matches_each_part_alone_f16() {
    let gpu = gpu_test!();
    tiled_columns::split_matches_each_part_alone::<Q8, f16>(&gpu, 0x7812);
}

#[test]
fn q8_0_tiled_swiglu_and_norm_match_their_kernels_bf16() {
    let gpu = gpu_test!();
    tiled_columns::swiglu_and_norm_match_their_kernels::<Q8, bf16>(&gpu, 0x7821);
}

#[test]
fn q8_0_tiled_swiglu_and_norm_match_their_kernels_f16() {
    let gpu = gpu_test!();
    tiled_columns::swiglu_and_norm_match_their_kernels::<Q8, f16>(&gpu, 0x7822);
}

#[test]
fn q8_0_tiled_add_matches_the_product_added_to_the_stream_bf16() {
    let gpu = gpu_test!();
    tiled_columns::add_matches_the_product_added_to_the_stream::<Q8, bf16>(&gpu, 0x7831);
}

#[test]
fn q8_0_tiled_add_matches_the_product_added_to_the_stream_f16() {
    let gpu = gpu_test!();
    tiled_columns::add_matches_the_product_added_to_the_stream::<Q8, f16>(&gpu, 0x7832);
}

#[test]
fn q8_0_tiled_product_follows_the_writer_of_x() {
    let gpu = gpu_test!();
    tiled_columns::product_follows_the_writer_of_x::<Q8>(&gpu, 0x7841);
}

#[test]
fn q8_0_tiled_edges_and_refusals() {
    let gpu = gpu_test!();
    tiled_columns::edges_and_refusals::<Q8>(&gpu, &vec![0u8; 48 * 8 * 34]);
}
