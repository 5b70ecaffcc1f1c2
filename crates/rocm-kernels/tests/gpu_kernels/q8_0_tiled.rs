//! `q8_0_tiled`: the one-vector product over tiled q8_0 weights against the f64 CPU reference of
//! the GGUF rows they were made from (`quant_matvec_reference`, as for `quant_matvec`'s q8_0):
//! raw random blocks (every code; f16 `d` of every size and sign, zero and subnormal) and the CPU
//! quantiser's, f16 and bf16 activations, awkward shapes (rows that leave a partial tile; one
//! group; 11; 56: seven a warp; more tiles than the kernel's resident blocks), outputs poisoned
//! before each launch. The portable kernel (f32, bf16, several vectors); stacked weights into
//! several outputs against each part alone; gate and up with their SwiGLU against the two
//! products and the `swiglu` kernel; the RMSNorm folded in against the `rmsnorm` kernel then the
//! product; the residual add against the product added on the host; the product behind the
//! kernel that writes its x (a dependent launch); several vectors (the matrix cores' batch8 and
//! batch32 loops, and 40 in two launches) and a stacked weight's rows alone; the dequantisation,
//! bit for bit; and what the launcher refuses.
//!
//! Tolerance: `QuantMatvecReference::allowed_error`'s derivation over the terms this kernel adds.
//! The portable kernel adds `d q x`, the reference's terms. The matrix-core kernel sums each
//! block's `(q + 128) x` and takes `128 sum x` off (`kernels/q8_0_tiled.hip`), so its sum of
//! magnitudes is `sum |d| (|q + 128| + 128) |x|` ([`offset_magnitude`]), in place of
//! `sum |d q x|`; plus, for bf16, what staging x as block-scaled f16 may move it
//! (`x16_rounding_unit` of each 32-element block, times `|d| (|q + 128| + 128)`).

use rocm_kernels::quant::{
    DeviceTiledQ8, GgmlFormat, Q8_0_BLOCK_BYTES, QK, QuantMatvecReference, TiledNorm, TiledOutput, TiledQ8,
    dequantize_q8_0, dequantize_tiled_q8, q8_0_matvec_tiled, q8_0_matvec_tiled_fused, q8_0_matvec_tiled_rows,
    q8_0_matvec_tiled_split, q8_0_matvec_tiled_swiglu, q8_0_tiled_on_matrix_cores, quant_matvec_reference,
    x16_rounding_unit,
};
use rocm_kernels::swiglu::swiglu;
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

use crate::bits;
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

/// Several vectors through the matrix cores' several-vector loops (batch8, batch32, and a batch
/// of 40 in two launches) where the device has them, else the portable kernel: each vector
/// against the reference within the kernel's bound, outputs poisoned; Llama-3-8B's Q, K and V
/// stacked into three outputs among them.
fn batches_match<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let cases = [
        (37usize, 4096usize, 2usize),
        (129, 768, 8),
        (33, 2816, 9),
        (16, 256, 13),
        (64, 14_336, 32),
        (48, 512, 40),
    ];
    for (case, &(n, k, batch)) in cases.iter().enumerate() {
        let w = case_weights(&mut rng, case, FORMAT, n, k);
        let tiled = TiledQ8::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let x = activations::<T>(&mut rng, batch * k);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y = poisoned::<T>(gpu, batch * n);
        q8_0_matvec_tiled_split(&tiled, &dx, batch, &mut [&mut y], false).unwrap();
        let got = y.to_vec().unwrap();
        for v in 0..batch {
            let what = format!("{} n {n} k {k} vector {v} of {batch}", T::NAME);
            assert_within(&got[v * n..][..n], &w, &x[v * k..][..k], n, k, mma::<T>(gpu), &what);
        }
    }
    // A stacked weight's parts into their outputs, and each part's rows alone, for 5 vectors.
    let (parts, k, batch) = ([4096usize, 1024, 1024], 4096usize, 5usize);
    let (ws, stacked) = tiled_columns::random_stack::<Q8>(&mut rng, &parts, k);
    let device = stacked.upload(gpu.stream()).unwrap();
    let x = activations::<T>(&mut rng, batch * k);
    let dx = gpu.stream().upload(&x).unwrap();
    let mut ys: Vec<DeviceBuffer<T>> = parts.iter().map(|&n| poisoned::<T>(gpu, batch * n)).collect();
    q8_0_matvec_tiled_split(&device, &dx, batch, &mut ys.iter_mut().collect::<Vec<_>>(), false).unwrap();
    let mut first = 0;
    for (i, (&n, w)) in parts.iter().zip(&ws).enumerate() {
        let mut alone = poisoned::<T>(gpu, batch * n);
        q8_0_matvec_tiled_rows(&device, first..first + n, &dx, batch, &mut alone).unwrap();
        let got = ys[i].to_vec().unwrap();
        assert_eq!(bits(&got), bits(&alone.to_vec().unwrap()), "{} part {i}: rows alone", T::NAME);
        for v in 0..batch {
            let what = format!("{} part {i} vector {v} of {batch}", T::NAME);
            assert_within(&got[v * n..][..n], w, &x[v * k..][..k], n, k, mma::<T>(gpu), &what);
        }
        first += n;
    }
    // Gate and up with their SwiGLU for 5 and 20 vectors: the bits of the two products (one
    // launch into two outputs) and the swiglu kernel.
    for &(ffn, k, batch) in &[(48usize, 768usize, 5usize), (64, 4096, 20)] {
        let (_, stacked) = tiled_columns::random_stack::<Q8>(&mut rng, &[ffn, ffn], k);
        let device = stacked.upload(gpu.stream()).unwrap();
        let x = gpu.stream().upload(&activations::<T>(&mut rng, batch * k)).unwrap();
        let (mut gate, mut up) = (poisoned::<T>(gpu, batch * ffn), poisoned::<T>(gpu, batch * ffn));
        q8_0_matvec_tiled_split(&device, &x, batch, &mut [&mut gate, &mut up], false).unwrap();
        let mut want = poisoned::<T>(gpu, batch * ffn);
        swiglu(&gate, &up, &mut want).unwrap();
        let mut act = poisoned::<T>(gpu, batch * ffn);
        q8_0_matvec_tiled_swiglu(&device, &x, batch, &mut act).unwrap();
        assert_eq!(
            bits(&act.to_vec().unwrap()),
            bits(&want.to_vec().unwrap()),
            "{} swiglu, {batch} vectors",
            T::NAME
        );
    }
}

#[test]
fn q8_0_tiled_batches_match_the_reference_f16() {
    let gpu = gpu_test!();
    batches_match::<f16>(&gpu, 0x7805);
}

#[test]
fn q8_0_tiled_batches_match_the_reference_bf16() {
    let gpu = gpu_test!();
    batches_match::<bf16>(&gpu, 0x7806);
}

/// The dequantisation gives each element of the GGUF rows decoded and rounded to `T` once, bit
/// for bit: whole weights, and one part of a stacked weight.
fn dequant_matches<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for (case, &(n, k)) in [(37usize, 768usize), (16, 256), (129, 4096)].iter().enumerate() {
        let w = case_weights(&mut rng, case, FORMAT, n, k);
        let tiled = TiledQ8::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let mut out = poisoned::<T>(gpu, n * k + 7);
        dequantize_tiled_q8(&tiled, 0..n, &mut out).unwrap();
        let mut want = vec![0f32; n * k];
        dequantize_q8_0(&w, &mut want).unwrap();
        let want: Vec<T> = want.into_iter().map(T::from_f32).collect();
        assert_eq!(bits(&out.to_vec().unwrap()[..n * k]), bits(&want), "dequant {} n {n} k {k}", T::NAME);
    }
    let (parts, k) = ([32usize, 16, 23], 512usize);
    let (ws, stacked) = tiled_columns::random_stack::<Q8>(&mut rng, &parts, k);
    let device = stacked.upload(gpu.stream()).unwrap();
    let mut out = poisoned::<T>(gpu, 23 * k);
    dequantize_tiled_q8(&device, 48..71, &mut out).unwrap();
    let mut want = vec![0f32; 23 * k];
    dequantize_q8_0(&ws[2], &mut want).unwrap();
    let want: Vec<T> = want.into_iter().map(T::from_f32).collect();
    assert_eq!(bits(&out.to_vec().unwrap()), bits(&want), "dequant {} of the last part", T::NAME);
}

#[test]
fn q8_0_tiled_dequant_matches_f32() {
    let gpu = gpu_test!();
    dequant_matches::<f32>(&gpu, 0x7807);
}

#[test]
fn q8_0_tiled_dequant_matches_bf16() {
    let gpu = gpu_test!();
    dequant_matches::<bf16>(&gpu, 0x7808);
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

/// The shared edges and refusals, and the rows of a part and the dequantisation refused where
/// they do not fit.
#[test]
fn q8_0_tiled_edges_and_refusals() {
    let gpu = gpu_test!();
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "q8_0_tiled");
    let (w, x) = tiled_columns::edges_and_refusals::<Q8>(&gpu, &vec![0u8; 48 * 8 * 34]);
    let mut y8 = poisoned::<bf16>(&gpu, 8);
    assert!(
        message(q8_0_matvec_tiled_rows(&w, 8..16, &x, 1, &mut y8))
            .contains("rows start at 8, not at a tile (16 rows)")
    );
    assert!(
        message(q8_0_matvec_tiled_rows(&w, 32..64, &x, 1, &mut y8))
            .contains("rows 32..64 are not inside the weight's 48")
    );
    let mut short = poisoned::<bf16>(&gpu, 100);
    assert!(
        message(dequantize_tiled_q8(&w, 0..1, &mut short))
            .contains("out has 100 elements; 1 rows of 256 need 256")
    );
}
