//! `dequant_gemm`: prefill products with block-format weights, in sequence and overlapped on a
//! second stream (`Stream::fork`), for every ggml format and MXFP4, f32 and bf16, at shapes
//! whose last row block is partial, into NaN-poisoned outputs.
//!
//! - Portable GEMM: the overlapped result is bit for bit the sequential one for 1, 2, 3, 4
//!   and 7 row blocks (each output element is the same kernel's sum over the same K), and the
//!   sequential one is within the GEMM's rounding of the f64 reference on the dequantised
//!   weight.
//! - Vendor GEMM: the overlapped result against the same reference (the library may pick
//!   another kernel for a row block, so another order of the sums).
//! - Refusals: widths that are not whole blocks, a weight of the wrong size, a short output,
//!   zero row blocks, a block range past the weight.

use rocm_kernels::Dtype;
use rocm_kernels::gemm::{GemmDesc, GemmElement, GemmPath, gemm_reference};
use rocm_kernels::quant::{
    BlockFormat, OVERLAP_BLOCKS, Overlap, dequant_gemm, dequantize_range, dequantize_reference,
};
use rocm_runtime::{DeviceBuffer, bf16};
use rocm_testkit::{GpuTest, Rng, gpu_test, relative_l2};

use crate::bits;
use crate::shape_message;

/// (tokens, rows, in): a last row block of 44 rows (300 = 2 x 128 + 44), and a product whose
/// row blocks split 1000 rows 7 ways.
const SHAPES: [(usize, usize, usize); 2] = [(37, 300, 512), (9, 1000, 256)];

/// Relative L2 of a GEMM in `T` against the f64 product of the same stored values: f32
/// accumulation and one rounding to `T` on store.
fn l2_bound<T: Dtype>() -> f64 {
    if T::NAME == "f32" { 1e-5 } else { 1e-2 }
}

/// A product on random weights quantised to `format` (shared with the mixed-input GEMM's tests).
pub(crate) struct Case<T: Dtype> {
    pub format: BlockFormat,
    pub tokens: usize,
    pub rows: usize,
    pub inp: usize,
    pub blocks: DeviceBuffer<u8>,
    pub x: DeviceBuffer<T>,
    /// The f64 product on the dequantised weight (as `T`).
    pub want: Vec<f64>,
}

pub(crate) fn case<T: GemmElement>(
    gpu: &GpuTest,
    rng: &mut Rng,
    format: BlockFormat,
    (tokens, rows, inp): (usize, usize, usize),
) -> Case<T> {
    let values = rng.f32_vec(rows * inp, -1.0, 1.0);
    let mut bytes = vec![0u8; format.bytes_for(rows * inp).unwrap()];
    format.quantize(&values, &mut bytes).unwrap();
    let weight: Vec<T> = dequantize_reference(format, &bytes).unwrap();
    let x: Vec<T> = rng.f32_vec(tokens * inp, -1.0, 1.0).into_iter().map(T::from_f32).collect();
    let desc = GemmDesc::linear(tokens, rows, inp);
    let want = gemm_reference(&desc, &x, &weight, &vec![T::from_f32(0.0); tokens * rows]).unwrap();
    let s = gpu.stream();
    Case { format, tokens, rows, inp, blocks: s.upload(&bytes).unwrap(), x: s.upload(&x).unwrap(), want }
}

/// `y` of the case on `path`, overlapped on `side` in `row_blocks` blocks, or in sequence.
fn run<T: GemmElement>(
    gpu: &GpuTest,
    c: &Case<T>,
    path: GemmPath,
    side: Option<&rocm_runtime::Stream>,
    row_blocks: usize,
) -> Vec<T> {
    let mut y = gpu.stream().alloc::<T>(c.tokens * c.rows).unwrap();
    y.poison().unwrap();
    let overlap = side.map(|side| Overlap { side, row_blocks });
    dequant_gemm(c.format, &c.blocks, c.rows, c.inp, &c.x, c.tokens, &mut y, path, overlap)
        .unwrap_or_else(|e| panic!("{} {path:?} {row_blocks} blocks: {e}", c.format.name()));
    y.to_vec().unwrap()
}

fn check<T: Dtype>(what: &str, c: &Case<T>, got: &[T]) {
    let got: Vec<f64> = got.iter().map(|v| v.to_f32() as f64).collect();
    let label = format!("{what} {} {} {}x{}x{}", c.format.name(), T::NAME, c.tokens, c.rows, c.inp);
    assert!(got.iter().all(|v| v.is_finite()), "{label}: an output element is not finite (unwritten?)");
    let l2 = relative_l2(&got, &c.want);
    assert!(l2 <= l2_bound::<T>(), "{label}: relative L2 {l2:e} above {:e}", l2_bound::<T>());
}

fn portable<T: GemmElement>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let side = gpu.new_stream();
    for format in BlockFormat::GGUF {
        for shape in SHAPES {
            let c = case::<T>(gpu, &mut rng, format, shape);
            let sequential = run(gpu, &c, GemmPath::Portable, None, 1);
            check("sequential", &c, &sequential);
            for row_blocks in [1, 2, 3, 4, 7] {
                let overlapped = run(gpu, &c, GemmPath::Portable, Some(&side), row_blocks);
                assert!(
                    bits(&overlapped) == bits(&sequential),
                    "{} {} {shape:?}: {row_blocks} row blocks overlapped differ from the sequential product",
                    format.name(),
                    T::NAME
                );
            }
        }
    }
}

fn vendor<T: GemmElement>(gpu: &GpuTest, seed: u64) {
    if let Err(e) = rocm_kernels::gemm::vendor_blas(gpu.stream()) {
        eprintln!("no vendor BLAS here ({e}); the portable tests cover the overlap");
        return;
    }
    let mut rng = Rng::new(seed);
    let side = gpu.new_stream();
    for format in BlockFormat::GGUF {
        for shape in SHAPES {
            let c = case::<T>(gpu, &mut rng, format, shape);
            check("sequential", &c, &run(gpu, &c, GemmPath::Vendor, None, 1));
            check("overlapped", &c, &run(gpu, &c, GemmPath::Vendor, Some(&side), OVERLAP_BLOCKS));
        }
    }
}

#[test]
fn overlapped_matches_sequential_portable_f32() {
    let gpu = gpu_test!();
    portable::<f32>(&gpu, 0xd9e1);
}

#[test]
fn overlapped_matches_sequential_portable_bf16() {
    let gpu = gpu_test!();
    portable::<bf16>(&gpu, 0xd9e2);
}

#[test]
fn overlapped_matches_the_reference_vendor_f32() {
    let gpu = gpu_test!();
    vendor::<f32>(&gpu, 0xd9e3);
}

#[test]
fn overlapped_matches_the_reference_vendor_bf16() {
    let gpu = gpu_test!();
    vendor::<bf16>(&gpu, 0xd9e4);
}

#[test]
fn bad_shapes_are_refused() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let side = gpu.new_stream();
    let format = BlockFormat::Q8_0;
    let (tokens, rows, inp) = (3, 5, 64);
    let w = s.alloc_zeroed::<u8>(format.bytes_for(rows * inp).unwrap()).unwrap();
    let x = s.alloc_zeroed::<f32>(tokens * inp).unwrap();
    let mut y = s.alloc::<f32>(tokens * rows).unwrap();
    let mut short = s.alloc::<f32>(tokens * rows - 1).unwrap();
    // The message of the shape error `kernel` gives for a product of `rows x inp` into `y`.
    let refused = |kernel, rows, inp, y: &mut DeviceBuffer<f32>, overlap| {
        shape_message(
            dequant_gemm(format, &w, rows, inp, &x, tokens, y, GemmPath::Auto, Some(overlap)),
            kernel,
        )
    };
    let m = refused("dequant_gemm", rows, 48, &mut y, Overlap::new(&side));
    assert!(m.contains("in = 48 is not a whole number of 32-element q8_0 blocks"), "{m}");
    let m = refused("dequant", rows + 1, inp, &mut y, Overlap::new(&side));
    assert!(m.contains("decode to"), "{m}");
    let m = refused("dequant_gemm", rows, inp, &mut short, Overlap::new(&side));
    assert!(m.contains("C has 14 elements, the product reaches 15"), "{m}");
    let m = refused("dequant_gemm", rows, inp, &mut y, Overlap { side: &side, row_blocks: 0 });
    assert!(m.contains("row_blocks must be at least 1"), "{m}");
    // The range decoder: blocks past the weight's end, and outputs of partial blocks.
    let mut two_blocks = s.alloc::<f32>(64).unwrap();
    let m = shape_message(dequantize_range(format, &w, 9, &mut two_blocks), "dequant");
    assert!(m.contains("blocks 9..+2 are past the 10 q8_0 blocks given"), "{m}");
    let mut partial = s.alloc::<f32>(40).unwrap();
    let m = shape_message(dequantize_range(format, &w, 0, &mut partial), "dequant");
    assert!(m.contains("not whole 32-element q8_0 blocks"), "{m}");
}
