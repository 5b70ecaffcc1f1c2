//! `quant_gemm`: the mixed-input matrix-core GEMM (`kernels/quant_gemm_wgmma.hip`), for every
//! format it has, f16 and bf16, against the f64 product on the dequantised weight (as `T`), at
//! shapes with partial tiles of weight rows (128 a block) and tokens (256), into NaN-poisoned
//! outputs (the cases of `dequant_gemm`'s tests). On a device without warpgroup MMA, or driven
//! through a host API that makes no tensor maps (AMD's HIP for NVIDIA), the same calls must be
//! refused, naming why.

use rocm_kernels::Dtype;
use rocm_kernels::gemm::GemmElement;
use rocm_kernels::quant::{
    BlockFormat, Fp6, QUANT_GEMM_FORMATS, dequantize_reference, quant_gemm, quant_gemm_runs,
};
use rocm_runtime::{bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test, relative_l2};

use crate::dequant_gemm::case;
use crate::shape_message;

/// (tokens, rows, in): one partial tile each way (37 of 256 tokens, 300 = 2 x 128 + 44 rows),
/// and two token tiles and eight row tiles, both last ones partial, over twenty-four 64-wide stages
/// (twelve of mxfp4's 128). Widths whose weight rows are whole 16-byte units for every format (the
/// kernel's tensor copies need it; mxfp4's 17-byte blocks make that a multiple of 512).
const SHAPES: [(usize, usize, usize); 2] = [(37, 300, 512), (260, 1000, 1536)];

/// q6_K's 210-byte super-blocks make a whole number of 16-byte units every 8: the same tiles over
/// 2048 (every quarter of eight super-blocks, both halves of each).
const Q6_K_SHAPES: [(usize, usize, usize); 2] = [(37, 300, 2048), (260, 1000, 2048)];

/// Relative L2 against the f64 product of the same stored values: each output rounded once to
/// `T` (half an ulp: 2^-9 relative in bf16, 2^-12 in f16) on top of f32 sums.
fn l2_bound<T: Dtype>() -> f64 {
    if T::NAME == "bf16" { 4e-3 } else { 5e-4 }
}

fn check_format<T: GemmElement>(gpu: &GpuTest, rng: &mut Rng, format: BlockFormat) {
    let shapes = if format == BlockFormat::Q6K { Q6_K_SHAPES } else { SHAPES };
    for shape in shapes {
        let c = case::<T>(gpu, rng, format, shape);
        let mut y = gpu.stream().alloc::<T>(c.tokens * c.rows).unwrap();
        y.poison().unwrap();
        let label = format!("{} {} {}x{}x{}", format.name(), T::NAME, c.tokens, c.rows, c.inp);
        quant_gemm(format, &c.blocks, c.rows, c.inp, &c.x, c.tokens, &mut y)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let got: Vec<f64> = y.to_vec().unwrap().iter().map(|v| v.to_f32() as f64).collect();
        assert!(got.iter().all(|v| v.is_finite()), "{label}: an output element is not finite (unwritten?)");
        let l2 = relative_l2(&got, &c.want);
        assert!(l2 <= l2_bound::<T>(), "{label}: relative L2 {l2:e} above {:e}", l2_bound::<T>());
    }
}

fn matches_the_reference<T: GemmElement>(seed: u64) {
    let gpu = gpu_test!();
    let mut rng = Rng::new(seed);
    let info = gpu.backend().info();
    if !info.warpgroup_mma || !info.tensor_maps {
        // Refused, with the device and the reason named: the launchers take dequantise + GEMM
        // there (a device without wgmma; a Hopper GPU through AMD's HIP for NVIDIA, which makes
        // no tensor maps).
        let why = quant_gemm_runs::<T>(gpu.stream(), BlockFormat::Q8_0, 512).expect("refused");
        let reason = if info.warpgroup_mma { "makes no tensor maps" } else { "no warpgroup MMA" };
        assert!(why.contains(reason), "{why}");
        return;
    }
    for format in QUANT_GEMM_FORMATS {
        check_format::<T>(&gpu, &mut rng, format);
    }
}

#[test]
fn matches_the_reference_bf16() {
    matches_the_reference::<bf16>(0x9a01);
}

#[test]
fn matches_the_reference_f16() {
    matches_the_reference::<f16>(0x9a02);
}

/// x the identity (token t's one 1 is at column t), so y[t, r] = W[r, t] exactly: one product by
/// 1 and zeros, summed in f32 and rounded once to T, which already holds the value. Every decoded
/// weight is compared with the CPU dequantiser's, rounded to T, as a value (a -0 weight may come
/// out +0): a wrong code, scale, nibble or column order anywhere shows, not only on average.
/// Rows' magnitudes run from 2^-20 to 2^12 so that scales of many sizes are decoded, and mxfp4's
/// scales are then set to random exponents 0 ..= 140 (2^-127, a subnormal, up to 2^13: within
/// f16's range, so no weight is infinite and no sum 0 x inf).
fn decodes_every_weight_exactly<T: GemmElement>(seed: u64) {
    let gpu = gpu_test!();
    let s = gpu.stream();
    if quant_gemm_runs::<T>(s, BlockFormat::Q8_0, 512).is_some() {
        return; // refused (no wgmma, or no tensor maps): matches_the_reference_* check the reason
    }
    let mut rng = Rng::new(seed);
    let rows = 300;
    for format in QUANT_GEMM_FORMATS {
        let inp = if format == BlockFormat::Q6K { 2048 } else { 512 };
        let mut values = rng.f32_vec(rows * inp, -1.0, 1.0);
        for (r, row) in values.chunks_exact_mut(inp).enumerate() {
            let magnitude = 2f32.powi(r as i32 % 33 - 20);
            row.iter_mut().for_each(|v| *v *= magnitude);
        }
        let mut bytes = vec![0u8; format.bytes_for(rows * inp).unwrap()];
        format.quantize(&values, &mut bytes).unwrap();
        if format == BlockFormat::Mxfp4Gguf {
            for block in bytes.chunks_exact_mut(format.block_bytes()) {
                block[0] = rng.below(141) as u8;
            }
        }
        let weight: Vec<T> = dequantize_reference(format, &bytes).unwrap();
        let mut x = vec![T::from_f32(0.0); inp * inp];
        for t in 0..inp {
            x[t * inp + t] = T::from_f32(1.0);
        }
        let (w, x) = (s.upload(&bytes).unwrap(), s.upload(&x).unwrap());
        let mut y = s.alloc::<T>(inp * rows).unwrap();
        y.poison().unwrap();
        let label = format!("{} {} identity x {rows} x {inp}", format.name(), T::NAME);
        quant_gemm(format, &w, rows, inp, &x, inp, &mut y).unwrap_or_else(|e| panic!("{label}: {e}"));
        let got = y.to_vec().unwrap();
        let mut wrong = 0usize;
        let mut first = None;
        for t in 0..inp {
            for r in 0..rows {
                let (g, want) = (got[t * rows + r].to_f32(), weight[r * inp + t].to_f32());
                if g != want {
                    wrong += 1;
                    first.get_or_insert((r, t, g, want));
                }
            }
        }
        assert_eq!(
            wrong, 0,
            "{label}: {wrong} weights decoded differently; first (row, column, got, want): {first:?}"
        );
    }
}

#[test]
fn decodes_every_weight_exactly_bf16() {
    decodes_every_weight_exactly::<bf16>(0x9a03);
}

#[test]
fn decodes_every_weight_exactly_f16() {
    decodes_every_weight_exactly::<f16>(0x9a04);
}

/// `in = 0`: no stage, no wgmma (the kernel's first wgmma of a tile is what zeroes its
/// accumulators), so the kernel stores zeros itself.
#[test]
fn an_empty_sum_stores_zeros() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    if quant_gemm_runs::<bf16>(s, BlockFormat::Q8_0, 0).is_some() {
        return; // refused (no wgmma, or no tensor maps): matches_the_reference_* check the reason
    }
    let (tokens, rows) = (130, 300);
    let w = s.alloc::<u8>(0).unwrap();
    let x = s.alloc::<bf16>(0).unwrap();
    let mut y = s.alloc::<bf16>(tokens * rows).unwrap();
    y.poison().unwrap();
    quant_gemm(BlockFormat::Q8_0, &w, rows, 0, &x, tokens, &mut y).unwrap();
    assert!(y.to_vec().unwrap().iter().all(|v| v.to_f32() == 0.0), "an output of an empty sum is not 0");
}

#[test]
fn what_it_cannot_run_is_refused() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let (tokens, rows, inp) = (3, 5, 256);
    let mx6 = BlockFormat::Mxfp6(Fp6::E2M3);
    let w = s.alloc_zeroed::<u8>(mx6.bytes_for(rows * inp).unwrap()).unwrap();
    let x = s.alloc_zeroed::<bf16>(tokens * inp).unwrap();
    let mut y = s.alloc::<bf16>(tokens * rows).unwrap();
    let m = shape_message(quant_gemm(mx6, &w, rows, inp, &x, tokens, &mut y), "quant_gemm");
    assert!(m.contains("has no mixed-input GEMM"), "{m}");
    // q6_K's rows are 210 bytes a super-block: whole 16-byte units only every 2048 elements.
    let w6 = s.alloc_zeroed::<u8>(BlockFormat::Q6K.bytes_for(rows * inp).unwrap()).unwrap();
    let m = shape_message(quant_gemm(BlockFormat::Q6K, &w6, rows, inp, &x, tokens, &mut y), "quant_gemm");
    assert!(m.contains("a q6_k weight row of 210 bytes is not a whole number of 16 bytes"), "{m}");
    let xf = s.alloc_zeroed::<f32>(tokens * 64).unwrap();
    let mut yf = s.alloc::<f32>(tokens * rows).unwrap();
    let w8 = s.alloc_zeroed::<u8>(BlockFormat::Q8_0.bytes_for(rows * 64).unwrap()).unwrap();
    let m = shape_message(quant_gemm(BlockFormat::Q8_0, &w8, rows, 64, &xf, tokens, &mut yf), "quant_gemm");
    assert!(m.contains("computes in f16 or bf16"), "{m}");
    // A width of whole blocks but not whole stages (mxfp4 stages 128 elements).
    let w4 = s.alloc_zeroed::<u8>(BlockFormat::Mxfp4Gguf.bytes_for(rows * 96).unwrap()).unwrap();
    let x96 = s.alloc_zeroed::<bf16>(tokens * 96).unwrap();
    let m =
        shape_message(quant_gemm(BlockFormat::Mxfp4Gguf, &w4, rows, 96, &x96, tokens, &mut y), "quant_gemm");
    assert!(m.contains("in = 96 is not a multiple of the mxfp4 kernel's 128-element stage"), "{m}");
    // Whole stages, but a weight row of 68 bytes: not a stride the tensor copies can take.
    let x64 = s.alloc_zeroed::<bf16>(tokens * 64).unwrap();
    let m = shape_message(quant_gemm(BlockFormat::Q8_0, &w8, rows, 64, &x64, tokens, &mut y), "quant_gemm");
    assert!(m.contains("a q8_0 weight row of 68 bytes is not a whole number of 16 bytes"), "{m}");
    // Lengths are checked before the device is asked.
    let mut short = s.alloc::<bf16>(tokens * rows - 1).unwrap();
    let m = shape_message(quant_gemm(BlockFormat::Q8_0, &w8, rows, 64, &x, tokens, &mut short), "quant_gemm");
    assert!(m.contains("C has 14 elements, the product reaches 15"), "{m}");
    let m = shape_message(quant_gemm(BlockFormat::Q8_0, &w8, rows + 1, 64, &x, tokens, &mut y), "dequant");
    assert!(m.contains("decode to"), "{m}");
}
