//! `quant_matvec` against its f64 CPU reference (`quant_matvec_reference`: the codec's weights,
//! f64 sums): every ggml format it reads (q8_0, q4_0, q4_K, q5_K, q6_K), f32/f16/bf16
//! activations and outputs, raw random blocks (every code; f16 scales of every size, sign, zero
//! and subnormal) and blocks from the CPU quantisers, awkward shapes (rows = 1, 7, 9, 257, 4099;
//! k of one block, a few, 17 and a 14336-element row, which puts several units on a thread;
//! batches 1, 3, 8, 17, 32: one pass of each width and several passes), outputs poisoned before
//! each launch, special scales, empty shapes and the shapes the launcher must refuse. Grouped
//! launches (`quant_matvec_group`: two or three products over one x) equal to each product
//! launched alone, bit for bit, with blocks striding across products.
//!
//! Tolerance: `QuantMatvecReference::allowed_error`, derived there from the kernel's f32
//! accumulation (at most `k` roundings on any term's way, so `(k + 1) 2^-23` of the sum of the
//! terms' magnitudes, which for q4_K / q5_K counts `|step q|` and `|min|` separately since the
//! kernel adds them separately) and the output type's rounding (half an ulp).

use rocm_kernels::quant::{
    BlockFormat, GgmlFormat, QuantProduct, SplitScratch, quant_matvec, quant_matvec_glu,
    quant_matvec_glu_fuses, quant_matvec_group, quant_matvec_group_in, quant_matvec_on_matrix_cores,
    quant_matvec_reference,
};
use rocm_kernels::swiglu::swiglu;
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, Error, MatrixCores, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

use crate::mxfp::{activations, floats, poisoned};

/// The byte offsets of a block's f16 scales (d, and dmin for q4_K / q5_K).
fn f16_scale_fields(format: GgmlFormat) -> &'static [usize] {
    match format {
        GgmlFormat::Q8_0 | GgmlFormat::Q4_0 => &[0],
        GgmlFormat::Q4K | GgmlFormat::Q5K => &[0, 2],
        GgmlFormat::Q6K => &[208],
    }
}

/// `rows` rows of `k / E` blocks of random bytes (every code, every q6_K i8 scale, every 6-bit
/// q4_K / q5_K scale and min), each f16 scale replaced by a finite value: magnitude in
/// 2^-12 .. 2^-5 with a random sign, one in 32 zero and one in 32 an f16 subnormal. Small
/// enough that no sum reaches f16's range at these sizes.
pub(crate) fn random_weights(rng: &mut Rng, format: GgmlFormat, rows: usize, k: usize) -> Vec<u8> {
    let bb = format.block_bytes();
    let mut w: Vec<u8> = (0..rows * (k / format.block_elems()) * bb).map(|_| rng.next_u64() as u8).collect();
    for block in w.chunks_exact_mut(bb) {
        for &at in f16_scale_fields(format) {
            let magnitude = match rng.below(32) {
                0 => 0.0,
                1 => 2f32.powi(-24) * (1 + rng.below(1023)) as f32,
                _ => 2f32.powi(-12 + rng.below(7) as i32) * (1.0 + rng.next_f64() as f32),
            };
            let value = if rng.below(2) == 0 { magnitude } else { -magnitude };
            block[at..at + 2].copy_from_slice(&f16::from_f32(value).to_bits().to_le_bytes());
        }
    }
    w
}

/// Normal values, each row at its own scale (2^-4 .. 2^3), quantised by the CPU codec.
fn quantised_weights(rng: &mut Rng, format: GgmlFormat, rows: usize, k: usize) -> Vec<u8> {
    let values: Vec<f32> =
        (0..rows * k).map(|i| (rng.normal() * 2f64.powi((i / k.max(1)) as i32 % 8 - 4)) as f32).collect();
    let bf: BlockFormat = format.into();
    let mut w = vec![0u8; bf.bytes_for(values.len()).unwrap()];
    bf.quantize(&values, &mut w).unwrap();
    w
}

/// Case `n`'s weights: raw random blocks for even cases, the CPU quantisers' blocks for odd ones.
pub(crate) fn case_weights(rng: &mut Rng, n: usize, format: GgmlFormat, rows: usize, k: usize) -> Vec<u8> {
    if n.is_multiple_of(2) {
        random_weights(rng, format, rows, k)
    } else {
        quantised_weights(rng, format, rows, k)
    }
}

/// Makes the f16 scale at byte `at` of block `block` of row `row` (rows of `k` elements) NaN.
fn nan_scale(w: &mut [u8], format: GgmlFormat, k: usize, row: usize, block: usize, at: usize) {
    let start = (row * (k / format.block_elems()) + block) * format.block_bytes() + at;
    w[start..start + 2].copy_from_slice(&f16::NAN.to_bits().to_le_bytes());
}

/// Runs the product on the device with poisoned outputs and checks every output against the
/// reference: within `allowed_error`, NaN exactly where the reference is NaN.
fn check<T: Dtype>(
    gpu: &GpuTest,
    rng: &mut Rng,
    format: GgmlFormat,
    w: &[u8],
    rows: usize,
    k: usize,
    batch: usize,
) {
    let x = activations::<T>(rng, batch * k);
    let dw = gpu.stream().upload(w).unwrap();
    let dx = gpu.stream().upload(&x).unwrap();
    let mut y = poisoned::<T>(gpu, batch * rows);
    quant_matvec(format, &dw, &dx, &mut y, rows, k, batch).unwrap();
    let got = floats(&y.to_vec().unwrap());
    let what = format!("{} {} rows {rows} k {k} batch {batch}", format.name(), T::NAME);
    assert_matches_reference::<T>(format, w, &floats(&x), &got, rows, k, batch, &what);
}

/// Every output of a product (`got`, `[batch, rows]`) within `allowed_error` of the reference,
/// NaN exactly where the reference is NaN.
#[allow(clippy::too_many_arguments)]
fn assert_matches_reference<T: Dtype>(
    format: GgmlFormat,
    w: &[u8],
    x: &[f32],
    got: &[f32],
    rows: usize,
    k: usize,
    batch: usize,
    what: &str,
) {
    let reference = quant_matvec_reference(format, w, x, rows, k, batch).unwrap();
    let mut failures = 0;
    let mut first = None;
    for (i, (&g, &e)) in got.iter().zip(&reference.y).enumerate() {
        let ok = if e.is_nan() {
            g.is_nan()
        } else {
            // NaN (the poison of an unwritten output) fails here.
            (f64::from(g) - e).abs() <= reference.allowed_error(i, T::NAME)
        };
        if !ok {
            failures += 1;
            first.get_or_insert((i / rows, i % rows, g, e, reference.allowed_error(i, T::NAME)));
        }
    }
    assert_eq!(got.len(), batch * rows);
    assert!(
        failures == 0,
        "{what}: {failures} of {} outputs out of bounds; first (vector, row, got, expected, allowed) {first:?}",
        got.len()
    );
}

/// (rows, k in blocks, batch); `LONG` stands for a 14336-element row (448 units: several a
/// thread). Blocks of 32 (q8_0, q4_0) and odd block counts leave rows unaligned, which the
/// 2-byte aligned formats load through their unaligned path.
const LONG: usize = usize::MAX;
const CASES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 1, 32),
    (7, 3, 3),
    (7, 1, 17),
    (9, 17, 8),
    (257, 3, 8),
    (257, 1, 32),
    (4099, 1, 1),
    (4099, 3, 3),
    (5, LONG, 1),
    (3, LONG, 17),
];

fn matches_the_reference<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for format in GgmlFormat::ALL {
        for (n, &(rows, blocks, batch)) in CASES.iter().enumerate() {
            let k = if blocks == LONG { 14_336 } else { blocks * format.block_elems() };
            let w = case_weights(&mut rng, n, format, rows, k);
            eprintln!("quant_matvec {} {} rows {rows} k {k} batch {batch}", format.name(), T::NAME);
            check::<T>(gpu, &mut rng, format, &w, rows, k, batch);
        }
    }
}

#[test]
fn matches_the_reference_f32() {
    let gpu = gpu_test!();
    matches_the_reference::<f32>(&gpu, 0x9a01);
}

#[test]
fn matches_the_reference_f16() {
    let gpu = gpu_test!();
    matches_the_reference::<f16>(&gpu, 0x9a02);
}

#[test]
fn matches_the_reference_bf16() {
    let gpu = gpu_test!();
    matches_the_reference::<bf16>(&gpu, 0x9a03);
}

/// (rows, k in k steps of the matrix-core kernel, batch): one step (one chunk, one warp; q6_K:
/// 4 chunks), several (warps splitting k, more chunks than warps), a 14336-element row for q4_K
/// and q5_K (28 steps) and q8_0 and q4_0 (56);
/// partial and whole 16-row tiles, more tiles than an SM holds, one vector and passes of 8 with
/// vectors left unused; past 8 vectors quant_matmul_mma.hip's passes of 32 (9, 17: one pass with
/// vectors left unused; 32: a whole one; 33: two, the second of one vector) over 64-row blocks,
/// whole (64) and partial (97: two warps of the second block with a row or none); and products
/// of few row blocks at 9 to 32 vectors that split k across blocks (quant/k_split.rs: 200 rows
/// of 9 steps, q8_0's 9 chunks in 4 parts of 2 or 3, q6_K's 36 in 8; 70 rows of 11 steps in 5
/// parts of 2 or 3); one vector of q4_K (the columns loop: warps splitting the super-blocks) with
/// warps of unequal shares (3 steps: 6 super-blocks, 2 + 2 + 1 + 1; 5 steps: 3 + 3 + 2 + 2), and
/// the 8-warp blocks of long rows (28 steps: 56 super-blocks, 7 a warp; 19 steps: 38, six warps
/// of 5 and two of 4).
const MMA_CASES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (7, 1, 3),
    (16, 2, 1),
    (17, 3, 8),
    (33, 5, 9),
    (4099, 1, 1),
    (130, 8, 2),
    (5, 28, 1),
    (3, 56, 17),
    (97, 2, 32),
    (64, 3, 33),
    (200, 9, 32),
    (70, 11, 12),
    (45, 3, 1),
    (19, 5, 1),
    (45, 19, 1),
];

/// The matrix-core kernel (`kernels/quant_matvec_mma.hip`: every ggml format with f16 or bf16
/// activations, rows of whole k steps) against the reference, within the same bound as the
/// portable kernel. On a device with `mma.sync` the launcher must take it for every case (a
/// device that should run it cannot silently test the portable kernel instead); elsewhere the
/// same cases run the portable kernel.
fn matrix_cores_match_the_reference<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let mut rng = Rng::new(seed);
    let mma = gpu.backend().info().matrix_cores == MatrixCores::MmaSync;
    for format in GgmlFormat::ALL {
        let step = format.matrix_core_k_step();
        for (n, &(rows, steps, batch)) in MMA_CASES.iter().enumerate() {
            let k = steps * step;
            assert_eq!(
                quant_matvec_on_matrix_cores::<T>(gpu.stream(), format, k),
                mma,
                "{} k {k}",
                format.name()
            );
            let w = case_weights(&mut rng, n, format, rows, k);
            eprintln!(
                "quant_matvec (matrix cores: {mma}) {} {} rows {rows} k {k} batch {batch}",
                format.name(),
                T::NAME
            );
            check::<T>(&gpu, &mut rng, format, &w, rows, k, batch);
        }
        // A NaN scale (d; q4_K's dmin too) spoils its row only, for every vector, at one
        // vector and in a pass of 8.
        let (rows, k) = (18, 2 * step);
        let mut w = random_weights(&mut rng, format, rows, k);
        let fields = f16_scale_fields(format);
        for (row, at) in [(2, fields[0]), (11, fields[fields.len() - 1])] {
            nan_scale(&mut w, format, k, row, 1, at);
        }
        for batch in [1, 3] {
            check::<T>(&gpu, &mut rng, format, &w, rows, k, batch);
        }
        // Grouped products on the matrix cores: each equal to its product alone, bit for bit at
        // 1 and 40 vectors; at 9 and 20 (9 steps: the launch splits k) within the bound.
        for batch in [1, 9, 40] {
            check_group::<T>(&gpu, &mut rng, format, &[37, 5, 130], 2 * step, batch);
        }
        check_group::<T>(&gpu, &mut rng, format, &[37, 5, 130], 9 * step, 20);
    }
}

#[test]
fn matrix_cores_match_the_reference_f16() {
    matrix_cores_match_the_reference::<f16>(0x9a20);
}

#[test]
fn matrix_cores_match_the_reference_bf16() {
    matrix_cores_match_the_reference::<bf16>(0x9a21);
}

/// Every batch size from 1 to 9 (the 1, 2, 4 and 8 passes, each with vectors left unused) on
/// one small weight of each format: a vector past the batch must neither be read nor stored.
#[test]
fn every_batch_up_to_nine() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x9a04);
    for format in GgmlFormat::ALL {
        let (rows, k) = (6, 2 * format.block_elems());
        let w = random_weights(&mut rng, format, rows, k);
        for batch in 1..=9 {
            check::<f16>(&gpu, &mut rng, format, &w, rows, k, batch);
        }
    }
}

/// More row groups (4 rows) than the launch has blocks (32 a compute unit): blocks stride over
/// row groups, the last one partial.
#[test]
fn more_row_groups_than_blocks() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x9a05);
    let units = gpu.backend().info().compute_units as usize;
    let rows = 4 * 32 * units * 2 + 6;
    for format in [GgmlFormat::Q4_0, GgmlFormat::Q6K] {
        let k = format.block_elems();
        let w = random_weights(&mut rng, format, rows, k);
        check::<f32>(&gpu, &mut rng, format, &w, rows, k, 2);
    }
}

/// A NaN f16 scale (d, or q4_K / q5_K's dmin) makes its row's outputs NaN for every vector and
/// leaves the other rows as they are.
#[test]
fn a_nan_scale_spoils_its_row_only() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x9a06);
    for format in GgmlFormat::ALL {
        let (rows, k, batch) = (9, 3 * format.block_elems(), 3);
        let mut w = random_weights(&mut rng, format, rows, k);
        let fields = f16_scale_fields(format);
        // Row 2, block 1: d; row 6, block 2: the last scale field (dmin for q4_K / q5_K).
        for (row, block, at) in [(2, 1, fields[0]), (6, 2, fields[fields.len() - 1])] {
            nan_scale(&mut w, format, k, row, block, at);
        }
        // check() wants NaN exactly where the reference has it: in rows 2 and 6.
        let reference = quant_matvec_reference(format, &w, &vec![1.0; batch * k], rows, k, batch).unwrap();
        for (i, y) in reference.y.iter().enumerate() {
            assert_eq!(y.is_nan(), [2, 6].contains(&(i % rows)), "{} output {i}", format.name());
        }
        check::<f32>(&gpu, &mut rng, format, &w, rows, k, batch);
        check::<bf16>(&gpu, &mut rng, format, &w, rows, k, batch);
    }
}

/// Products over one `x` in one launch (`quant_matvec_group`) at `k` and `batch`, weights of
/// `rows[i]` rows: each output equal bit for bit to its product launched alone (but where the
/// launches may split `k`, 9 to 32 vectors on the matrix cores: a group may split less than
/// its products alone), and within the reference's bound. Outputs poisoned before both launches.
fn check_group<T: Dtype>(
    gpu: &GpuTest,
    rng: &mut Rng,
    format: GgmlFormat,
    rows: &[usize],
    k: usize,
    batch: usize,
) {
    let s = gpu.stream();
    let w: Vec<Vec<u8>> = rows.iter().map(|&r| random_weights(rng, format, r, k)).collect();
    let x = activations::<T>(rng, batch * k);
    let dx = s.upload(&x).unwrap();
    let dw: Vec<_> = w.iter().map(|w| s.upload(w).unwrap()).collect();
    let mut grouped: Vec<_> = rows.iter().map(|&r| poisoned::<T>(gpu, batch * r)).collect();
    let mut products: Vec<QuantProduct<'_, T>> = dw
        .iter()
        .zip(grouped.iter_mut())
        .zip(rows)
        .map(|((w, y), &rows)| QuantProduct { w, y, rows })
        .collect();
    quant_matvec_group(format, &mut products, &dx, k, batch).unwrap();
    for (i, &r) in rows.iter().enumerate() {
        let what =
            format!("{} {} products {rows:?}: product {i}, k {k} batch {batch}", format.name(), T::NAME);
        let mut alone = poisoned::<T>(gpu, batch * r);
        quant_matvec(format, &dw[i], &dx, &mut alone, r, k, batch).unwrap();
        let got = grouped[i].to_vec().unwrap();
        let want = alone.to_vec().unwrap();
        if !(SplitScratch::wanted(batch) && quant_matvec_on_matrix_cores::<T>(s, format, k)) {
            let differ =
                got.iter().zip(&want).filter(|(g, a)| g.to_f32().to_bits() != a.to_f32().to_bits()).count();
            assert_eq!(differ, 0, "{what}: outputs differing from the product launched alone");
        }
        assert_matches_reference::<T>(format, &w[i], &floats(&x), &floats(&want), r, k, batch, &what);
        assert_matches_reference::<T>(format, &w[i], &floats(&x), &floats(&got), r, k, batch, &what);
    }
}

/// Products over one x that split k, through one [`SplitScratch`].
struct SplitStep {
    x: DeviceBuffer<bf16>,
    y: [DeviceBuffer<bf16>; 2],
    scratch: SplitScratch,
}

/// Two q4_K products (300 and 70 rows: 5 and 2 row blocks, 9 chunks of k in 4 parts on an
/// H100) at 20 vectors through one [`SplitScratch`], launch after launch (each split launch
/// leaves its arrival counters at zero for the next) and recorded into a graph (which needs the
/// scratch: a stream that records refuses the temporary one): the same bits as with a temporary
/// scratch, and within the reference's bound. Without matrix cores nothing splits and the same
/// calls run the portable kernel.
#[test]
fn split_products_reuse_one_scratch_and_replay_in_graphs() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let mut rng = Rng::new(0x9a30);
    let format = GgmlFormat::Q4K;
    let (rows, k, batch) = ([300, 70], 9 * format.matrix_core_k_step(), 20);
    let w: Vec<Vec<u8>> = rows.iter().map(|&r| random_weights(&mut rng, format, r, k)).collect();
    let dw: Vec<_> = w.iter().map(|w| s.upload(w).unwrap()).collect();
    let run = |step: &mut SplitStep, scratch: bool| -> Result<(), KernelError> {
        let [y0, y1] = &mut step.y;
        let mut products = [
            QuantProduct { w: &dw[0], y: y0, rows: rows[0] },
            QuantProduct { w: &dw[1], y: y1, rows: rows[1] },
        ];
        let split = if scratch { Some(&mut step.scratch) } else { None };
        quant_matvec_group_in(format, &mut products, &step.x, k, batch, split)
    };
    let new_step = || SplitStep {
        x: s.alloc(batch * k).unwrap(),
        y: rows.map(|r| poisoned::<bf16>(&gpu, batch * r)),
        scratch: SplitScratch::new(s).unwrap(),
    };
    let outputs = |step: &SplitStep| {
        step.y
            .each_ref()
            .map(|y| y.to_vec().unwrap().iter().map(|v| v.to_f32().to_bits()).collect::<Vec<_>>())
    };
    // The eager results, with a temporary scratch, then checked against the reference.
    let eager = |step: &mut SplitStep, x: &[bf16]| {
        step.x.copy_from_host(x).unwrap();
        for y in &mut step.y {
            y.poison().unwrap();
        }
        run(step, false).unwrap();
        for (i, y) in step.y.iter().enumerate() {
            let what = format!("split product {i} of {rows:?}, k {k} batch {batch}");
            let got = floats(&y.to_vec().unwrap());
            assert_matches_reference::<bf16>(format, &w[i], &floats(x), &got, rows[i], k, batch, &what);
        }
        outputs(step)
    };
    let mut step = new_step();
    for launch in 0..3 {
        let x = activations::<bf16>(&mut rng, batch * k);
        let want = eager(&mut step, &x);
        for y in &mut step.y {
            y.poison().unwrap();
        }
        run(&mut step, true).unwrap();
        assert_eq!(outputs(&step), want, "launch {launch} through the scratch: not the temporary's bits");
    }

    let mut recorded = new_step();
    let graph = match s.capture_with(&mut recorded, |_, step| run(step, true)) {
        Ok(graph) => graph,
        Err(KernelError::Runtime(Error::GraphsUnsupported(why))) => {
            eprintln!("graphs are unsupported by this HIP library, which is allowed: {why}");
            return;
        }
        Err(e) => panic!("recording the split products failed: {e}"),
    };
    for replay in 0..3 {
        let x = activations::<bf16>(&mut rng, batch * k);
        let want = eager(&mut step, &x);
        let state = graph.state();
        state.x.write_from_host(&x).unwrap();
        for (y, &r) in state.y.iter().zip(&rows) {
            y.write_from_host(&vec![bf16::from_f32(f32::NAN); batch * r]).unwrap();
        }
        graph.launch().unwrap();
        assert_eq!(outputs(state), want, "replay {replay}: not the eager launch's bits");
    }
    drop(graph);

    // Recording a split launch without a scratch is refused (it would allocate one).
    if quant_matvec_on_matrix_cores::<bf16>(s, format, k) {
        let mut unscratched = new_step();
        match s.capture_with(&mut unscratched, |_, step| run(step, false)) {
            Err(KernelError::Runtime(Error::CaptureRefused { operation, .. })) => {
                assert_eq!(operation, "allocating");
            }
            Err(e) => panic!("recording without a scratch: {e}"),
            Ok(_) => panic!("recording a split launch without a scratch was not refused"),
        }
    }
}

/// Three products (Q, K and V-like, each with a partial last row group) and two, every format,
/// one pass of each width and several passes.
fn group_matches_single_launches<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let mut rng = Rng::new(seed);
    for format in GgmlFormat::ALL {
        for (rows, blocks, batch) in
            [(&[37, 5, 130][..], 3, 1), (&[37, 5, 130][..], 1, 17), (&[9, 6][..], 2, 3)]
        {
            check_group::<T>(&gpu, &mut rng, format, rows, blocks * format.block_elems(), batch);
        }
    }
}

#[test]
fn group_matches_single_launches_f32() {
    group_matches_single_launches::<f32>(0x9a10);
}

#[test]
fn group_matches_single_launches_bf16() {
    group_matches_single_launches::<bf16>(0x9a11);
}

/// More row groups than the launch has blocks, so that blocks stride from one product into the
/// next; a product of one row between two long ones; a product of no rows is skipped.
#[test]
fn group_strides_across_products() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x9a12);
    let long = 4 * 32 * gpu.backend().info().compute_units as usize + 2;
    for format in [GgmlFormat::Q4_0, GgmlFormat::Q6K] {
        check_group::<f16>(&gpu, &mut rng, format, &[long, 1, long + 1], format.block_elems(), 2);
        check_group::<f16>(&gpu, &mut rng, format, &[7, 0, 3], format.block_elems(), 1);
    }
}

/// A group's shapes are checked product by product, the error naming the product; more than
/// three products, or none, are refused; nothing runs after a refusal.
#[test]
fn bad_groups_are_refused() {
    let gpu = gpu_test!();
    let f = GgmlFormat::Q8_0;
    let (k, batch) = (64, 2);
    let s = gpu.stream();
    let w = s.upload(&vec![0u8; 3 * 2 * 34]).unwrap();
    let x = s.upload(&vec![1.0f32; batch * k]).unwrap();
    let (mut y0, mut y1) = (poisoned::<f32>(&gpu, batch * 3), poisoned::<f32>(&gpu, batch * 2));
    let message = |r: Result<(), KernelError>| crate::shape_message(r, "quant_matvec");
    // Product 1 claims 2 rows of a 3-row weight.
    let mut products =
        [QuantProduct { w: &w, y: &mut y0, rows: 3 }, QuantProduct { w: &w, y: &mut y1, rows: 2 }];
    let m = message(quant_matvec_group(f, &mut products, &x, k, batch));
    assert!(m.starts_with("product 1: w holds 204 bytes"), "{m}");
    assert!(message(quant_matvec_group::<f32>(f, &mut [], &x, k, batch)).contains("0 products"));
    let mut ys: Vec<_> = (0..4).map(|_| poisoned::<f32>(&gpu, batch * 3)).collect();
    let mut four: Vec<_> = ys.iter_mut().map(|y| QuantProduct { w: &w, y, rows: 3 }).collect();
    assert!(message(quant_matvec_group(f, &mut four, &x, k, batch)).contains("4 products in one launch"));
    assert!(y0.to_vec().unwrap().iter().chain(&y1.to_vec().unwrap()).all(|v| v.is_nan()));
}

#[test]
fn empty_shapes() {
    let gpu = gpu_test!();
    let f = GgmlFormat::Q4K;
    let none = gpu.stream().alloc::<u8>(0).unwrap();
    // k = 0: every output is an empty sum, 0.
    let x = gpu.stream().alloc::<f32>(0).unwrap();
    let mut y = poisoned::<f32>(&gpu, 2 * 5);
    quant_matvec(f, &none, &x, &mut y, 5, 0, 2).unwrap();
    assert_eq!(y.to_vec().unwrap(), [0.0; 10]);
    // No rows, or no vectors: nothing to store, and no launch.
    let x = gpu.stream().upload(&[1.0f32; 3 * 256]).unwrap();
    let mut y = gpu.stream().alloc::<f32>(0).unwrap();
    quant_matvec(f, &none, &x, &mut y, 0, 256, 3).unwrap();
    let w = gpu.stream().upload(&[0u8; 7 * 144]).unwrap();
    let x = gpu.stream().alloc::<f32>(0).unwrap();
    quant_matvec(f, &w, &x, &mut y, 7, 256, 0).unwrap();
}

#[test]
fn bad_shapes_are_refused() {
    let gpu = gpu_test!();
    let shape_error = |r: Result<(), KernelError>| crate::shape_message(r, "quant_matvec");
    let f = GgmlFormat::Q4K;
    let (rows, k, batch) = (3, 512, 2);
    let w = gpu.stream().upload(&vec![0x11u8; rows * 2 * 144]).unwrap();
    let x = gpu.stream().upload(&vec![1.0f32; batch * k]).unwrap();
    let mut y = poisoned::<f32>(&gpu, batch * rows);
    // k must be whole super-blocks: 288 is a multiple of 32 but not of 256.
    assert!(
        shape_error(quant_matvec(f, &w, &x, &mut y, rows, 288, batch))
            .contains("k = 288 is not a multiple of 256")
    );
    assert!(shape_error(quant_matvec(f, &w, &x, &mut y, 2, k, batch)).contains("w holds 864 bytes"));
    assert!(shape_error(quant_matvec(GgmlFormat::Q6K, &w, &x, &mut y, rows, k, batch)).contains("w holds"));
    assert!(shape_error(quant_matvec(f, &w, &x, &mut y, rows, k, 3)).contains("x has 1024 elements"));
    let mut y7 = poisoned::<f32>(&gpu, 7);
    assert!(shape_error(quant_matvec(f, &w, &x, &mut y7, rows, k, batch)).contains("y has 7 elements"));
    let other = gpu.new_stream();
    let foreign = other.upload(&vec![1.0f32; batch * k]).unwrap();
    let err = quant_matvec(f, &w, &foreign, &mut y, rows, k, batch).unwrap_err();
    assert!(matches!(err, KernelError::Runtime(Error::StreamMismatch { .. })), "{err}");
    assert!(y.to_vec().unwrap().iter().all(|v| v.is_nan()), "nothing ran after a refused launch");
    // A valid launch on the same buffers still works: 0x11 everywhere is d = dmin = 0x1111
    // (f16), scales 0x11 & 63 = 17 and mins 17 in sub-blocks 0..3, codes 1; with x = 1 every
    // output is the sum of the codec's weights.
    quant_matvec(f, &w, &x, &mut y, rows, k, batch).unwrap();
    let host_w = vec![0x11u8; rows * 2 * 144];
    let reference = quant_matvec_reference(f, &host_w, &vec![1.0; batch * k], rows, k, batch).unwrap();
    for (i, (g, e)) in y.to_vec().unwrap().iter().zip(&reference.y).enumerate() {
        assert!((f64::from(*g) - e).abs() <= reference.allowed_error(i, "f32"), "output {i}: {g} vs {e}");
    }
}

/// `quant_matvec_glu` (an MLP's gate and up products with SwiGLU in one launch: q4_K, one vector,
/// NVIDIA matrix cores) gives exactly the bits of the two products (`quant_matvec_group`)
/// followed by `swiglu`: a partial tile, many tiles, long rows (8 warps a block), the 8B model's
/// 14336 x 4096; raw random blocks and the quantiser's. Where the kernel does not run (no
/// `mma.sync`), the call is refused, naming why.
fn glu_equals_the_products_then_swiglu<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let mut rng = Rng::new(seed);
    let format = GgmlFormat::Q4K;
    let shape_error = |r: Result<(), KernelError>| crate::shape_message(r, "quant_matvec");
    for (n, (rows, k)) in
        [(13usize, 256usize), (1000, 4096), (37, 9216), (14336, 4096)].into_iter().enumerate()
    {
        let gate = s.upload(&case_weights(&mut rng, n, format, rows, k)).unwrap();
        let up = s.upload(&case_weights(&mut rng, n + 1, format, rows, k)).unwrap();
        let x = s.upload(&activations::<T>(&mut rng, k)).unwrap();
        let mut act = poisoned::<T>(&gpu, rows);
        if !quant_matvec_glu_fuses::<T>(s, format, k, 1) {
            let message = shape_error(quant_matvec_glu(format, &gate, &up, rows, &x, k, &mut act));
            assert!(message.contains("no gate-and-up kernel"), "{message}");
            eprintln!("glu {} {rows} x {k}: refused here ({message})", T::NAME);
            continue;
        }
        quant_matvec_glu(format, &gate, &up, rows, &x, k, &mut act).unwrap();
        let (mut g, mut u) = (poisoned::<T>(&gpu, rows), poisoned::<T>(&gpu, rows));
        let mut products =
            [QuantProduct { w: &gate, y: &mut g, rows }, QuantProduct { w: &up, y: &mut u, rows }];
        quant_matvec_group(format, &mut products, &x, k, 1).unwrap();
        let mut want = poisoned::<T>(&gpu, rows);
        swiglu(&g, &u, &mut want).unwrap();
        let (got, want) = (act.to_vec().unwrap(), want.to_vec().unwrap());
        let bits = |v: &[T]| floats(v).iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let differ =
            got.iter().zip(&want).filter(|(a, b)| a.to_f32().to_bits() != b.to_f32().to_bits()).count();
        eprintln!("glu {} {rows} x {k}: {differ} of {rows} outputs differ", T::NAME);
        assert_eq!(bits(&got), bits(&want), "glu {} {rows} x {k}", T::NAME);
    }
    // Refused: weights of another length, and a batch the kernel does not take.
    let gate = s.upload(&case_weights(&mut rng, 0, format, 16, 256)).unwrap();
    let x = s.upload(&activations::<T>(&mut rng, 256)).unwrap();
    let mut act = poisoned::<T>(&gpu, 16);
    let short = s.upload(&vec![0u8; 15 * 144]).unwrap();
    assert!(shape_error(quant_matvec_glu(format, &gate, &short, 16, &x, 256, &mut act)).contains("w holds"));
    assert!(!quant_matvec_glu_fuses::<T>(s, format, 256, 2));
    assert!(!quant_matvec_glu_fuses::<T>(s, GgmlFormat::Q8_0, 256, 1));
}

#[test]
fn glu_equals_the_products_then_swiglu_f16() {
    glu_equals_the_products_then_swiglu::<f16>(0x91u64);
}

#[test]
fn glu_equals_the_products_then_swiglu_bf16() {
    glu_equals_the_products_then_swiglu::<bf16>(0x92u64);
}
