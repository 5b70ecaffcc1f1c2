//! `mxfp` products against their f64 CPU reference: MXFP4 (GGUF layout) and MXFP6 (E2M3, E3M2)
//! weights of random bytes (every code point), f32/f16/bf16 activations and outputs, awkward
//! shapes (n = 1, 7, 127, 4097 rows; k = 32, 96, 512, 2880, 4096, 4128, 14336; m = 1, 3, 17,
//! 70), product groups (bit for bit the products alone; over 2 to 11 vectors, against the
//! reference), both weight staging paths of each
//! matrix-vector kernel (portable: 16-byte loads when k % 512 == 0, byte loads otherwise;
//! matrix cores: 16-byte or word copies likewise), and the shapes the launchers must refuse.

use rocm_kernels::quant::{
    MxFormat, QK, QuantProduct, mx_matmul, mx_matmul_reference, mx_matvec, mx_matvec_group,
};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, Error, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

pub(crate) fn poisoned<T: Dtype>(gpu: &GpuTest, len: usize) -> DeviceBuffer<T> {
    let mut buf = gpu.stream().alloc::<T>(len).unwrap();
    buf.poison().unwrap();
    buf
}

/// `rows` rows of `k / 32` blocks: random payload bytes (every code, both signs, -0) and scale
/// bytes 118..=130 (2^-9..2^3), which keep every product and sum far from f16's overflow.
pub(crate) fn random_weights(rng: &mut Rng, format: MxFormat, rows: usize, k: usize) -> Vec<u8> {
    let bb = format.block_bytes();
    let mut w: Vec<u8> = (0..rows * (k / QK) * bb).map(|_| rng.next_u64() as u8).collect();
    for block in w.chunks_exact_mut(bb) {
        block[0] = 118 + rng.below(13) as u8;
    }
    w
}

pub(crate) fn activations<T: Dtype>(rng: &mut Rng, len: usize) -> Vec<T> {
    rng.f32_vec(len, -1.0, 1.0).into_iter().map(T::from_f32).collect()
}

pub(crate) fn floats<T: Dtype>(v: &[T]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

/// `sum |W[r, c] X[i, c]|` for each output: what bounds the rounding error of a sum.
pub(crate) fn magnitudes(format: MxFormat, w: &[u8], x: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut decoded = vec![0.0f32; n * k];
    format.block_format().dequantize(w, &mut decoded).unwrap();
    let mut out = vec![0.0f64; m * n];
    if k == 0 {
        return out;
    }
    for (xi, oi) in x.chunks_exact(k).zip(out.chunks_exact_mut(n)) {
        for (wr, o) in decoded.chunks_exact(k).zip(oi.iter_mut()) {
            *o = wr.iter().zip(xi).map(|(&a, &b)| f64::from(a.abs()) * f64::from(b.abs())).sum();
        }
    }
    out
}

/// The kernels sum `k` products in f32 in some order (per lane, then across the warp; or per
/// thread of a tile): whatever the order, the error is at most `(k - 1) u sum |w x|` with
/// `u = 2^-24` (first order); `k 2^-23` doubles that for margin. Each product is exact in f32
/// (an element of at most 4 significant bits, a power-of-two scale, an activation of at most 24),
/// so nothing else enters before the one rounding to `T`: half an ulp, 2^-24 relative for f32,
/// 2^-11 for f16, 2^-8 for bf16, plus f16's subnormal spacing near zero.
pub(crate) fn assert_within<T: Dtype>(got: &[T], expected: &[f64], magnitude: &[f64], k: usize, what: &str) {
    assert_within_rounded(got, expected, magnitude, &vec![0.0; got.len()], k, what);
}

/// [`assert_within`] where x itself may have been rounded by up to `x_rounding[i]` (summed over
/// the output's terms: mxfp4_tiled.rs's `staging_rounding`): that error joins the sum's terms.
pub(crate) fn assert_within_rounded<T: Dtype>(
    got: &[T],
    expected: &[f64],
    magnitude: &[f64],
    x_rounding: &[f64],
    k: usize,
    what: &str,
) {
    let (out_rel, abs) = match T::NAME {
        "f32" => (2f64.powi(-24), 1e-30),
        "f16" => (2f64.powi(-11), 2f64.powi(-24)),
        _ => (2f64.powi(-8), 1e-30),
    };
    let sum_rel = k as f64 * 2f64.powi(-23);
    let mut worst: Option<(usize, f64, f64, f64)> = None;
    let mut failures = 0;
    for (i, (((g, &e), &mag), &xr)) in got.iter().zip(expected).zip(magnitude).zip(x_rounding).enumerate() {
        let g = f64::from(g.to_f32());
        let allowed = (sum_rel * (mag + xr) + xr) * (1.0 + out_rel) + out_rel * e.abs() + abs;
        let err = (g - e).abs();
        // NaN (the poison of an unwritten element) fails.
        if err.is_nan() || err > allowed {
            failures += 1;
            if worst.is_none_or(|(_, _, _, r)| err / allowed > r || err.is_nan()) {
                worst = Some((i, g, e, err / allowed));
            }
        }
    }
    assert_eq!(got.len(), expected.len());
    assert!(
        failures == 0,
        "{what}: {failures} of {} outputs out of bounds; worst {worst:?} (index, got, expected, err/allowed)",
        got.len()
    );
}

/// `y` (`[m, n]` on the device) within [`assert_within`]'s bounds of the reference product of
/// `w` (`[n, k]` in `format`) and `x` (`[m, k]`).
#[allow(clippy::too_many_arguments)]
fn assert_matches_reference<T: Dtype>(
    format: MxFormat,
    y: &DeviceBuffer<T>,
    w: &[u8],
    x: &[T],
    m: usize,
    n: usize,
    k: usize,
    what: &str,
) {
    let xf = floats(x);
    let expected = mx_matmul_reference(format, w, &xf, m, n, k).unwrap();
    let magnitude = magnitudes(format, w, &xf, m, n, k);
    assert_within(&y.to_vec().unwrap(), &expected, &magnitude, k, what);
}

/// (n, k): every row count with every k, plus one large aligned matrix.
const MATVEC: &[(usize, usize)] = &[
    (1, 32),
    (1, 4128),
    (7, 32),
    (7, 96),
    (7, 512),
    (7, 4128),
    (127, 32),
    (127, 96),
    (127, 512),
    (127, 4128),
    (4097, 32),
    (4097, 96),
    (4097, 512),
    (4097, 4128),
    (4097, 4096),
    // 28 chunks of 512: on the matrix-core kernel each of its 4 warps takes 7, through both
    // stages of its copy pipeline, and n = 129 leaves a tile of one row.
    (129, 14_336),
    // gpt-oss's hidden size: 90 blocks a row, rows not 4-byte aligned (the matrix-core kernel's
    // word copies, a last chunk of 10 blocks); k = 32, 96 and 4128 above take that path too.
    (33, 2880),
    (4097, 2880),
];

fn matvec<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for format in MxFormat::ALL {
        for &(n, k) in MATVEC {
            let w = random_weights(&mut rng, format, n, k);
            let x = activations::<T>(&mut rng, k);
            let dw = gpu.stream().upload(&w).unwrap();
            let dx = gpu.stream().upload(&x).unwrap();
            let mut y = poisoned::<T>(gpu, n);
            mx_matvec(format, &dw, &dx, &mut y, n, k).unwrap();
            let what = format!("matvec {format:?} {} n {n} k {k}", T::NAME);
            eprintln!("{what}");
            assert_matches_reference(format, &y, &w, &x, 1, n, k, &what);
        }
    }
}

#[test]
fn matvec_matches_the_reference_f32() {
    let gpu = gpu_test!();
    matvec::<f32>(&gpu, 0x3a01);
}

#[test]
fn matvec_matches_the_reference_f16() {
    let gpu = gpu_test!();
    matvec::<f16>(&gpu, 0x3a02);
}

#[test]
fn matvec_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    matvec::<bf16>(&gpu, 0x3a03);
}

/// Rows of the products of a group: a layer's Q, K, V at a small scale with ragged last tiles
/// (37 rows: a tile of 5), one-row products, and a group of one.
const GROUPS: &[&[usize]] = &[&[37, 1, 100], &[300, 64, 64], &[1, 1], &[129], &[16, 17, 15]];

/// `mx_matvec_group` of the products `ws[i]` (`rows[i]` rows each) over `batch` vectors `x`, into
/// outputs poisoned first.
fn run_group<T: Dtype>(
    gpu: &GpuTest,
    format: MxFormat,
    ws: &[DeviceBuffer<u8>],
    rows: &[usize],
    x: &DeviceBuffer<T>,
    k: usize,
    batch: usize,
) -> Vec<DeviceBuffer<T>> {
    let mut ys: Vec<DeviceBuffer<T>> = rows.iter().map(|&n| poisoned::<T>(gpu, batch * n)).collect();
    let mut group: Vec<QuantProduct<'_, T>> =
        ws.iter().zip(ys.iter_mut()).zip(rows).map(|((w, y), &rows)| QuantProduct { w, y, rows }).collect();
    mx_matvec_group(format, &mut group, x, k, batch).unwrap();
    drop(group);
    ys
}

/// `mx_matvec_group` gives each output exactly the bits of `mx_matvec` of its product alone:
/// on the grouped matrix-core entry (k % 512 == 0, f16 / bf16 MXFP4 and f16 MXFP6 on NVIDIA)
/// and on the per-product path (other k, f32, other devices). Outputs are poisoned first, so a
/// tile no block computed fails.
fn matvec_group<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for format in MxFormat::ALL {
        for k in [512, 4096, 96, 2880] {
            for rows in GROUPS {
                let x = activations::<T>(&mut rng, k);
                let dx = gpu.stream().upload(&x).unwrap();
                let ws: Vec<DeviceBuffer<u8>> = rows
                    .iter()
                    .map(|&n| gpu.stream().upload(&random_weights(&mut rng, format, n, k)).unwrap())
                    .collect();
                let mut alone = Vec::new();
                for (w, &n) in ws.iter().zip(rows.iter()) {
                    let mut y = poisoned::<T>(gpu, n);
                    mx_matvec(format, w, &dx, &mut y, n, k).unwrap();
                    alone.push(y.to_vec().unwrap());
                }
                let ys = run_group(gpu, format, &ws, rows, &dx, k, 1);
                for (i, (y, want)) in ys.iter().zip(&alone).enumerate() {
                    let bits = |v: &[T]| v.iter().map(|e| e.to_f32().to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&y.to_vec().unwrap()),
                        bits(want),
                        "{format:?} {} k {k} rows {rows:?}: product {i} differs from its launch alone",
                        T::NAME
                    );
                }
            }
        }
    }
}

#[test]
fn matvec_group_equals_each_product_alone_f32() {
    let gpu = gpu_test!();
    matvec_group::<f32>(&gpu, 0x3a11);
}

#[test]
fn matvec_group_equals_each_product_alone_f16() {
    let gpu = gpu_test!();
    matvec_group::<f16>(&gpu, 0x3a12);
}

#[test]
fn matvec_group_equals_each_product_alone_bf16() {
    let gpu = gpu_test!();
    matvec_group::<bf16>(&gpu, 0x3a13);
}

/// `mx_matvec_group` over several vectors (`[batch, k]` in, `[batch, rows]` out for each
/// product) against the reference: MXFP4 with f16 / bf16 on NVIDIA matrix cores where k % 512 ==
/// 0 (quant_matvec_mma.hip's passes of 8: batches of 2 and 8; quant_matmul_mma.hip's of 32:
/// 11, and 33, a full pass and one of 1);
/// every other format, type and k through `mx_matmul`. Ragged last tiles and one-row products,
/// k of one and 28 chunks (each of 4 warps through both stages), outputs poisoned first.
fn matvec_batch<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let sanitized = rocm_testkit::sanitizer().is_some();
    for format in MxFormat::ALL {
        for (k, rows) in
            [(512, &[37usize, 1, 100][..]), (14_336, &[129, 16][..]), (96, &[17][..]), (4096, &[300][..])]
        {
            for batch in [2, 8, 11, 33] {
                // Under a sanitizer, mx_matmul's large shapes are left out (its own test covers
                // it within SANITIZED_MACS); the matrix-core passes run at every shape.
                let passes = format == MxFormat::Mxfp4Gguf && T::NAME != "f32" && k % 512 == 0;
                let macs = batch * rows.iter().sum::<usize>() * k;
                if sanitized && !passes && macs > SANITIZED_MACS {
                    eprintln!("under a sanitizer: leaving out {format:?} k {k} batch {batch}");
                    continue;
                }
                let x = activations::<T>(&mut rng, batch * k);
                let dx = gpu.stream().upload(&x).unwrap();
                let hw: Vec<Vec<u8>> = rows.iter().map(|&n| random_weights(&mut rng, format, n, k)).collect();
                let ws: Vec<DeviceBuffer<u8>> = hw.iter().map(|w| gpu.stream().upload(w).unwrap()).collect();
                let ys = run_group(gpu, format, &ws, rows, &dx, k, batch);
                for (i, ((y, w), &n)) in ys.iter().zip(&hw).zip(rows.iter()).enumerate() {
                    let what = format!("{format:?} {} k {k} batch {batch} product {i} of {rows:?}", T::NAME);
                    assert_matches_reference(format, y, w, &x, batch, n, k, &what);
                }
            }
        }
    }
}

#[test]
fn matvec_batch_matches_the_reference_f32() {
    let gpu = gpu_test!();
    matvec_batch::<f32>(&gpu, 0x3a21);
}

#[test]
fn matvec_batch_matches_the_reference_f16() {
    let gpu = gpu_test!();
    matvec_batch::<f16>(&gpu, 0x3a22);
}

#[test]
fn matvec_batch_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    matvec_batch::<bf16>(&gpu, 0x3a23);
}

#[test]
fn matvec_group_refuses_bad_groups() {
    let gpu = gpu_test!();
    let shape_error = |r: Result<(), KernelError>| crate::shape_message(r, "mxfp");
    let f = MxFormat::Mxfp4Gguf;
    let w = gpu.stream().upload(&vec![0x21u8; 7 * 16 * 17]).unwrap();
    let x = gpu.stream().upload(&[1.0f32; 512].map(f16::from_f32)).unwrap();
    let mut ys: Vec<DeviceBuffer<f16>> = (0..4).map(|_| poisoned::<f16>(&gpu, 7)).collect();
    let mut four: Vec<QuantProduct<'_, f16>> =
        ys.iter_mut().map(|y| QuantProduct { w: &w, y, rows: 7 }).collect();
    assert!(
        shape_error(mx_matvec_group(f, &mut four, &x, 512, 1)).contains("4 products; a group takes 1 to 3")
    );
    assert!(shape_error(mx_matvec_group(f, &mut four[..0], &x, 512, 1)).contains("0 products"));
    four[1].rows = 6;
    assert!(shape_error(mx_matvec_group(f, &mut four[..2], &x, 512, 1)).contains("w holds 1904 bytes"));
    drop(four);
    assert!(
        ys.iter().all(|y| y.to_vec().unwrap().iter().all(|v| v.to_f32().is_nan())),
        "nothing ran after a refused group"
    );
}

/// (m, n, k): one token; tiles cut at every edge (n = 7, 127, 4097; m = 3, 17, 70 crosses a
/// 64-row tile); k of one, three, 16 and 129 blocks.
const MATMUL: &[(usize, usize, usize)] = &[
    (1, 1, 32),
    (1, 7, 4128),
    (3, 7, 96),
    (3, 127, 512),
    (17, 127, 4128),
    (17, 4097, 96),
    (3, 4097, 32),
    (70, 130, 96),
];

/// Under a compute-sanitizer, the shapes of at most this many multiply-adds: racecheck ran
/// past its five-minute limit on the whole list. The two left out (m 17 against k of 129
/// blocks, and n 4097) cross no edge the others do not (`(1, 7, 4128)`, `(3, 4097, 32)`).
const SANITIZED_MACS: usize = 1 << 20;

fn matmul<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let sanitized = rocm_testkit::sanitizer().is_some();
    for format in MxFormat::ALL {
        for &(m, n, k) in MATMUL {
            if sanitized && m * n * k > SANITIZED_MACS {
                eprintln!("under a sanitizer: leaving out m {m} n {n} k {k}");
                continue;
            }
            let w = random_weights(&mut rng, format, n, k);
            let x = activations::<T>(&mut rng, m * k);
            let dw = gpu.stream().upload(&w).unwrap();
            let dx = gpu.stream().upload(&x).unwrap();
            let mut y = poisoned::<T>(gpu, m * n);
            let started = std::time::Instant::now();
            mx_matmul(format, &dw, &dx, &mut y, m, n, k).unwrap();
            let got = y.to_vec().unwrap();
            let xf = floats(&x);
            let expected = mx_matmul_reference(format, &w, &xf, m, n, k).unwrap();
            let magnitude = magnitudes(format, &w, &xf, m, n, k);
            let what = format!("matmul {format:?} {} m {m} n {n} k {k}", T::NAME);
            eprintln!("{what}: {:.2?}", started.elapsed());
            assert_within(&got, &expected, &magnitude, k, &what);
        }
    }
}

#[test]
fn matmul_matches_the_reference_f32() {
    let gpu = gpu_test!();
    matmul::<f32>(&gpu, 0x3b01);
}

#[test]
fn matmul_matches_the_reference_f16() {
    let gpu = gpu_test!();
    matmul::<f16>(&gpu, 0x3b02);
}

#[test]
fn matmul_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    matmul::<bf16>(&gpu, 0x3b03);
}

/// The matrix-vector and matrix-matrix kernels agree on one token (both are checked against the
/// reference above; this catches a launcher passing the same wrong shape to both).
#[test]
fn one_token_matmul_equals_matvec_within_rounding() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x3c01);
    let (n, k) = (300, 1024);
    for format in MxFormat::ALL {
        let w = random_weights(&mut rng, format, n, k);
        let x = activations::<f32>(&mut rng, k);
        let dw = gpu.stream().upload(&w).unwrap();
        let dx = gpu.stream().upload(&x).unwrap();
        let mut y1 = poisoned::<f32>(&gpu, n);
        let mut y2 = poisoned::<f32>(&gpu, n);
        mx_matvec(format, &dw, &dx, &mut y1, n, k).unwrap();
        mx_matmul(format, &dw, &dx, &mut y2, 1, n, k).unwrap();
        let magnitude = magnitudes(format, &w, &x, 1, n, k);
        let (a, b) = (y1.to_vec().unwrap(), y2.to_vec().unwrap());
        // Each is within k 2^-23 |w||x| of the exact value, so of each other within twice that.
        let b64: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
        assert_within(
            &a,
            &b64,
            &magnitude.iter().map(|m| 2.0 * m).collect::<Vec<_>>(),
            k,
            "matvec vs matmul",
        );
    }
}

/// The E8M0 scale's two special bytes on every matrix-vector path, one vector and three (f16/bf16
/// take the matrix-core kernels where there are some, since k % 512 == 0): 0xFF is NaN and makes
/// its row NaN; 0 is 2^-127, whose products stay exact (f32 subnormals) and are checked like any
/// other.
fn special_scales<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let (n, k) = (37, 1024);
    let format = MxFormat::Mxfp4Gguf;
    let mut w = random_weights(&mut rng, format, n, k);
    let bb = format.block_bytes();
    let row = |r: usize, b: usize| (r * (k / QK) + b) * bb;
    w[row(3, 5)] = 0xff;
    w[row(20, 31)] = 0xff;
    // Row 30: every block at the smallest scale, 2^-127 (its sum is near 1e-36).
    for b in 0..k / QK {
        w[row(30, b)] = 0;
    }
    let x = activations::<T>(&mut rng, k);
    let dw = gpu.stream().upload(&w).unwrap();
    let dx = gpu.stream().upload(&x).unwrap();
    let mut y = poisoned::<T>(gpu, n);
    mx_matvec(format, &dw, &dx, &mut y, n, k).unwrap();
    check_special_scales(&y.to_vec().unwrap(), &w, &floats(&x), 1, n, k, "one vector");
    // Three vectors (the first the same x): mx_matvec_group's batched path.
    let batch = 3;
    let mut xs = x.clone();
    xs.extend(activations::<T>(&mut rng, (batch - 1) * k));
    let dxs = gpu.stream().upload(&xs).unwrap();
    let mut ys = poisoned::<T>(gpu, batch * n);
    mx_matvec_group(format, &mut [QuantProduct { w: &dw, y: &mut ys, rows: n }], &dxs, k, batch).unwrap();
    check_special_scales(&ys.to_vec().unwrap(), &w, &floats(&xs), batch, n, k, "three vectors");
}

/// Rows 3 and 20 of every vector's output NaN (a NaN scale), the others within the reference's
/// bounds.
fn check_special_scales<T: Dtype>(got: &[T], w: &[u8], x: &[f32], m: usize, n: usize, k: usize, what: &str) {
    let format = MxFormat::Mxfp4Gguf;
    let expected = mx_matmul_reference(format, w, x, m, n, k).unwrap();
    let magnitude = magnitudes(format, w, x, m, n, k);
    let nan_row = |i: usize| [3, 20].contains(&(i % n));
    for (i, g) in got.iter().enumerate().filter(|&(i, _)| nan_row(i)) {
        assert!(g.to_f32().is_nan(), "{} {what}: output {i} has a NaN scale, got {g:?}", T::NAME);
    }
    let keep: Vec<usize> = (0..m * n).filter(|&i| !nan_row(i)).collect();
    let pick = |v: &[f64]| keep.iter().map(|&i| v[i]).collect::<Vec<_>>();
    let got_rest: Vec<T> = keep.iter().map(|&i| got[i]).collect();
    assert_within(
        &got_rest,
        &pick(&expected),
        &pick(&magnitude),
        k,
        &format!("special scales {} {what}", T::NAME),
    );
}

#[test]
fn special_scales_f32() {
    let gpu = gpu_test!();
    special_scales::<f32>(&gpu, 0x3d01);
}

#[test]
fn special_scales_f16() {
    let gpu = gpu_test!();
    special_scales::<f16>(&gpu, 0x3d02);
}

#[test]
fn special_scales_bf16() {
    let gpu = gpu_test!();
    special_scales::<bf16>(&gpu, 0x3d03);
}

#[test]
fn empty_k_gives_zeros() {
    let gpu = gpu_test!();
    let w = gpu.stream().alloc::<u8>(0).unwrap();
    let x = gpu.stream().alloc::<f32>(0).unwrap();
    let mut y = poisoned::<f32>(&gpu, 5);
    mx_matvec(MxFormat::Mxfp4Gguf, &w, &x, &mut y, 5, 0).unwrap();
    assert_eq!(y.to_vec().unwrap(), [0.0; 5]);
    let mut y = poisoned::<f32>(&gpu, 5);
    mx_matmul(MxFormat::Mxfp4Gguf, &w, &x, &mut y, 1, 5, 0).unwrap();
    assert_eq!(y.to_vec().unwrap(), [0.0; 5], "an empty sum is zero");
    // No rows at all: nothing to write, and no launch.
    let mut none = gpu.stream().alloc::<f32>(0).unwrap();
    mx_matmul(MxFormat::Mxfp4Gguf, &w, &x, &mut none, 0, 5, 0).unwrap();
}

#[test]
fn bad_shapes_are_refused() {
    let gpu = gpu_test!();
    let shape_error = |r: Result<(), KernelError>| crate::shape_message(r, "mxfp");
    let f = MxFormat::Mxfp4Gguf;
    let w = gpu.stream().upload(&vec![0x21u8; 7 * 3 * 17]).unwrap();
    let x = gpu.stream().upload(&[1.0f32; 96]).unwrap();
    let mut y = poisoned::<f32>(&gpu, 7);
    assert!(shape_error(mx_matvec(f, &w, &x, &mut y, 7, 100)).contains("not a multiple of 32"));
    assert!(shape_error(mx_matvec(f, &w, &x, &mut y, 6, 96)).contains("w holds 357 bytes"));
    assert!(
        shape_error(mx_matvec(MxFormat::Mxfp6(rocm_kernels::quant::Fp6::E2M3), &w, &x, &mut y, 7, 96))
            .contains("w holds")
    );
    let mut y8 = poisoned::<f32>(&gpu, 8);
    assert!(shape_error(mx_matvec(f, &w, &x, &mut y8, 7, 96)).contains("y has 8"));
    assert!(shape_error(mx_matmul(f, &w, &x, &mut y, 2, 7, 96)).contains("x has 96"));
    let x2 = gpu.stream().upload(&[1.0f32; 64]).unwrap();
    assert!(shape_error(mx_matmul(f, &w, &x2, &mut y, 1, 7, 64)).contains("w holds"));
    let other = gpu.new_stream();
    let foreign = other.upload(&[1.0f32; 96]).unwrap();
    let err = mx_matvec(f, &w, &foreign, &mut y, 7, 96).unwrap_err();
    assert!(matches!(err, KernelError::Runtime(Error::StreamMismatch { .. })), "{err}");
    assert!(y.to_vec().unwrap().iter().all(|v| v.is_nan()), "nothing ran after a refused launch");
    // A valid launch on the same buffers still works: 0x21 = codes 1 and 2 (0.5, 1.0) at scale
    // 2^(0x21 - 127); each block contributes 16 * 0.5 + 16 * 1.0 = 24 units.
    mx_matvec(f, &w, &x, &mut y, 7, 96).unwrap();
    let expected = 3.0 * 24.0 * 2f32.powi(0x21 - 127);
    assert_eq!(y.to_vec().unwrap(), [expected; 7]);
}
