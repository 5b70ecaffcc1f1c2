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
    GgmlFormat, Q8_0_BLOCK_BYTES, QK, QuantMatvecReference, TiledNorm, TiledOutput, TiledQ8,
    q8_0_matvec_tiled, q8_0_matvec_tiled_fused, q8_0_matvec_tiled_split, q8_0_tiled_on_matrix_cores,
    quant_matvec_reference, x16_rounding_unit,
};
use rocm_kernels::rmsnorm::RmsNorm;
use rocm_kernels::swiglu::swiglu;
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

use crate::bits;
use crate::mxfp::{activations, floats, poisoned};
use crate::quant_matvec::{case_weights, random_weights};

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

/// `parts` stacked (random raw blocks each).
fn random_stack(rng: &mut Rng, parts: &[usize], k: usize) -> (Vec<Vec<u8>>, TiledQ8) {
    let ws: Vec<Vec<u8>> = parts.iter().map(|&n| random_weights(rng, FORMAT, n, k)).collect();
    let tiled: Vec<TiledQ8> =
        ws.iter().zip(parts).map(|(w, &n)| TiledQ8::from_gguf(w, n, k).unwrap()).collect();
    let stacked = TiledQ8::stack(&tiled.iter().collect::<Vec<_>>()).unwrap();
    (ws, stacked)
}

/// A stacked weight into one output a part gives each part the bits of that part alone, and
/// each is within the bound: Llama-3-8B's Q, K and V, and small parts with a partial last tile.
fn split_matches_each_part_alone<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(parts, k) in &[(&[4096usize, 1024, 1024][..], 4096usize), (&[32, 16, 23][..], 768)] {
        let (ws, stacked) = random_stack(&mut rng, parts, k);
        let device = stacked.upload(gpu.stream()).unwrap();
        let x = activations::<T>(&mut rng, k);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut ys: Vec<DeviceBuffer<T>> = parts.iter().map(|&n| poisoned::<T>(gpu, n)).collect();
        let mut refs: Vec<&mut DeviceBuffer<T>> = ys.iter_mut().collect();
        q8_0_matvec_tiled_fused(&device, &dx, None, TiledOutput::Split(&mut refs)).unwrap();
        for (i, (y, (w, &n))) in ys.iter().zip(ws.iter().zip(parts)).enumerate() {
            let alone = TiledQ8::from_gguf(w, n, k).unwrap().upload(gpu.stream()).unwrap();
            let mut a = poisoned::<T>(gpu, n);
            q8_0_matvec_tiled(&alone, &dx, &mut a).unwrap();
            let what = format!("{} parts {parts:?} k {k} part {i}", T::NAME);
            let got = y.to_vec().unwrap();
            assert_eq!(bits(&got), bits(&a.to_vec().unwrap()), "{what}");
            assert_within(&got, w, &x, n, k, mma::<T>(gpu), &what);
        }
    }
}

#[test]
fn q8_0_tiled_split_matches_each_part_alone_bf16() {
    let gpu = gpu_test!();
    split_matches_each_part_alone::<bf16>(&gpu, 0x7811);
}

#[test]
fn q8_0_tiled_split_matches_each_part_alone_f16() {
    let gpu = gpu_test!();
    split_matches_each_part_alone::<f16>(&gpu, 0x7812);
}

/// Gate and up stacked with their SwiGLU in one launch give the bits of the two products
/// followed by the `swiglu` kernel; through the folded RMSNorm too, against the `rmsnorm` kernel,
/// the two products and `swiglu`. Llama-3-8B's FFN, and gates of 3 tiles at k = 768.
fn swiglu_and_norm_match_their_kernels<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(ffn, k) in &[(14_336usize, 4096usize), (48, 768)] {
        let (_, stacked) = random_stack(&mut rng, &[ffn, ffn], k);
        let device = stacked.upload(gpu.stream()).unwrap();
        // A residual row of multiples of 2^-4 in [-1, 1): its sum of squares is exact in f32 in
        // any order, so the folded norm's s is the rmsnorm kernel's.
        let h: Vec<T> = (0..k).map(|_| T::from_f32((rng.below(32) as f32 - 16.0) / 16.0)).collect();
        let h = gpu.stream().upload(&h).unwrap();
        let weight: Vec<T> = (0..k).map(|_| T::from_f32(rng.uniform(0.5, 1.5) as f32)).collect();
        let weight = gpu.stream().upload(&weight).unwrap();
        let eps = 1e-5;
        let mut xn = poisoned::<T>(gpu, k);
        RmsNorm::new(1, k, eps).run(&h, &weight, &mut xn).unwrap();
        for (x, norm) in [(&xn, None), (&h, Some(TiledNorm { weight: &weight, eps }))] {
            let what = format!("{} ffn {ffn} k {k} normed {}", T::NAME, norm.is_some());
            let (mut gate, mut up) = (poisoned::<T>(gpu, ffn), poisoned::<T>(gpu, ffn));
            q8_0_matvec_tiled_fused(&device, &xn, None, TiledOutput::Split(&mut [&mut gate, &mut up]))
                .unwrap();
            let mut want = poisoned::<T>(gpu, ffn);
            swiglu(&gate, &up, &mut want).unwrap();
            let mut act = poisoned::<T>(gpu, ffn);
            q8_0_matvec_tiled_fused(&device, x, norm, TiledOutput::Swiglu(&mut act)).unwrap();
            assert_eq!(bits(&act.to_vec().unwrap()), bits(&want.to_vec().unwrap()), "{what}, swiglu");
            if norm.is_some() {
                let (mut g2, mut u2) = (poisoned::<T>(gpu, ffn), poisoned::<T>(gpu, ffn));
                q8_0_matvec_tiled_fused(&device, &h, norm, TiledOutput::Split(&mut [&mut g2, &mut u2]))
                    .unwrap();
                assert_eq!(bits(&g2.to_vec().unwrap()), bits(&gate.to_vec().unwrap()), "{what}, gate");
                assert_eq!(bits(&u2.to_vec().unwrap()), bits(&up.to_vec().unwrap()), "{what}, up");
            }
        }
    }
}

#[test]
fn q8_0_tiled_swiglu_and_norm_match_their_kernels_bf16() {
    let gpu = gpu_test!();
    swiglu_and_norm_match_their_kernels::<bf16>(&gpu, 0x7821);
}

#[test]
fn q8_0_tiled_swiglu_and_norm_match_their_kernels_f16() {
    let gpu = gpu_test!();
    swiglu_and_norm_match_their_kernels::<f16>(&gpu, 0x7822);
}

/// A residual launch leaves round(h + round(y)) in the stream, y the plain launch's output, bit
/// for bit: Llama-3-8B's O and down shapes and a small one with a partial tile.
fn add_matches_the_product_added_to_the_stream<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(n, k) in &[(4096usize, 4096usize), (4096, 14_336), (37, 768)] {
        let w = random_weights(&mut rng, FORMAT, n, k);
        let device = TiledQ8::from_gguf(&w, n, k).unwrap().upload(gpu.stream()).unwrap();
        let x = gpu.stream().upload(&activations::<T>(&mut rng, k)).unwrap();
        let stream: Vec<T> = activations::<T>(&mut rng, n);
        let mut y = poisoned::<T>(gpu, n);
        q8_0_matvec_tiled(&device, &x, &mut y).unwrap();
        let want: Vec<T> = stream
            .iter()
            .zip(y.to_vec().unwrap())
            .map(|(&h, y)| T::from_f32(y.to_f32() + h.to_f32()))
            .collect();
        let mut h = gpu.stream().upload(&stream).unwrap();
        q8_0_matvec_tiled_fused(&device, &x, None, TiledOutput::Add(&mut h)).unwrap();
        assert_eq!(bits(&h.to_vec().unwrap()), bits(&want), "{} n {n} k {k}", T::NAME);
    }
}

#[test]
fn q8_0_tiled_add_matches_the_product_added_to_the_stream_bf16() {
    let gpu = gpu_test!();
    add_matches_the_product_added_to_the_stream::<bf16>(&gpu, 0x7831);
}

#[test]
fn q8_0_tiled_add_matches_the_product_added_to_the_stream_f16() {
    let gpu = gpu_test!();
    add_matches_the_product_added_to_the_stream::<f16>(&gpu, 0x7832);
}

/// The product behind the kernel that writes its x, as in a decode step: an RMSNorm (a
/// dependent launch), the product of Q, K and V stacked (dependent: its first weight copies go
/// out before it waits), then another norm that overwrites x. Each round's outputs must be the
/// product of that round's normalised x made alone.
#[test]
fn q8_0_tiled_product_follows_the_writer_of_x() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x7841);
    let (parts, k) = ([4096usize, 1024, 1024], 4096);
    let w = random_stack(&mut rng, &parts, k).1.upload(gpu.stream()).unwrap();
    let norm = RmsNorm::new(1, k, 1e-5);
    let weight = gpu.stream().upload(&activations::<bf16>(&mut rng, k)).unwrap();
    let mut x = poisoned::<bf16>(&gpu, k);
    let mut ys: Vec<_> = parts.iter().map(|&n| poisoned::<bf16>(&gpu, n)).collect();
    for round in 0..4 {
        let h = gpu.stream().upload(&activations::<bf16>(&mut rng, k)).unwrap();
        let next = gpu.stream().upload(&activations::<bf16>(&mut rng, k)).unwrap();
        for y in ys.iter_mut() {
            y.poison().unwrap();
        }
        norm.run(&h, &weight, &mut x).unwrap();
        q8_0_matvec_tiled_fused(&w, &x, None, TiledOutput::Split(&mut ys.iter_mut().collect::<Vec<_>>()))
            .unwrap();
        norm.run(&next, &weight, &mut x).unwrap();
        let mut xa = poisoned::<bf16>(&gpu, k);
        norm.run(&h, &weight, &mut xa).unwrap();
        let xa = gpu.stream().upload(&xa.to_vec().unwrap()).unwrap();
        let mut alone: Vec<_> = parts.iter().map(|&n| poisoned::<bf16>(&gpu, n)).collect();
        q8_0_matvec_tiled_fused(&w, &xa, None, TiledOutput::Split(&mut alone.iter_mut().collect::<Vec<_>>()))
            .unwrap();
        for (i, (y, a)) in ys.iter().zip(&alone).enumerate() {
            assert_eq!(bits(&y.to_vec().unwrap()), bits(&a.to_vec().unwrap()), "round {round} output {i}");
        }
    }
}

/// k = 0 gives zeros (and a gate-and-up launch silu(0) * 0); x, outputs and norms of the wrong
/// size are refused, saying so; all-zero blocks give zeros.
#[test]
fn q8_0_tiled_edges_and_refusals() {
    let gpu = gpu_test!();
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "q8_0_tiled");
    let empty = TiledQ8::from_gguf(&[], 64, 0).unwrap().upload(gpu.stream()).unwrap();
    let x0 = gpu.stream().alloc::<bf16>(0).unwrap();
    let mut y = poisoned::<bf16>(&gpu, 64);
    q8_0_matvec_tiled(&empty, &x0, &mut y).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![bf16::from_f32(0.0); 64], "k = 0");
    let mut act = poisoned::<bf16>(&gpu, 32);
    q8_0_matvec_tiled_fused(&empty, &x0, None, TiledOutput::Swiglu(&mut act)).unwrap();
    assert_eq!(act.to_vec().unwrap(), vec![bf16::from_f32(0.0); 32], "k = 0, swiglu");

    let w = TiledQ8::from_gguf(&vec![0u8; 48 * 8 * 34], 48, 256).unwrap().upload(gpu.stream()).unwrap();
    let x = gpu.stream().upload(&[bf16::from_f32(1.0); 256]).unwrap();
    let short_x = gpu.stream().upload(&[bf16::from_f32(1.0); 255]).unwrap();
    let mut y48 = poisoned::<bf16>(&gpu, 48);
    assert!(
        message(q8_0_matvec_tiled(&w, &short_x, &mut y48))
            .contains("x has 255 elements, 1 vectors of the weight's k = 256 need 256")
    );
    let mut y47 = poisoned::<bf16>(&gpu, 47);
    assert!(message(q8_0_matvec_tiled(&w, &x, &mut y47)).contains("the outputs hold [47] elements"));
    let mut act24 = poisoned::<bf16>(&gpu, 24);
    assert!(
        message(q8_0_matvec_tiled_fused(&w, &x, None, TiledOutput::Swiglu(&mut act24)))
            .contains("gate and up of 48 rows: two halves of whole tiles (16 rows) needed")
    );
    let short_w = gpu.stream().upload(&[bf16::from_f32(1.0); 255]).unwrap();
    let norm = Some(TiledNorm { weight: &short_w, eps: 1e-5 });
    assert!(
        message(q8_0_matvec_tiled_fused(&w, &x, norm, TiledOutput::Split(&mut [&mut y48])))
            .contains("the norm's weight has 255 elements, the weight's k = 256")
    );
    q8_0_matvec_tiled(&w, &x, &mut y48).unwrap();
    assert_eq!(y48.to_vec().unwrap(), vec![bf16::from_f32(0.0); 48], "all-zero blocks");
}
