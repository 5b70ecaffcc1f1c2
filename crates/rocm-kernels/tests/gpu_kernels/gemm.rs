//! GEMM through both paths of `rocm_kernels::gemm`: the portable kernel (`kernels/gemm.hip`)
//! and the vendor BLAS (cuBLAS / rocBLAS), each against the f64 reference, and against each
//! other.
//!
//! Shapes are awkward on purpose (M = 1, 7, 127, 4097; N = 1, 33, 4095; K = 1, 15, 4099), with
//! both layouts of each operand, alpha/beta, leading dimensions wider than the rows and strided
//! batches. Every element a product does not cover (gaps between rows, between batch matrices,
//! a tail after `C`) holds NaN: NaN in `A` or `B` that a kernel reads poisons its results, and
//! NaN in `C` must still be there afterwards. With `beta == 0` the covered part of `C` is NaN
//! too: it must be overwritten without being read.
//!
//! Tolerances: the error of a K-term dot product accumulated in f32 is at most
//! `gamma_K * sum_k |a_k b_k|` with `gamma_K = K u / (1 - K u)` (Higham, Accuracy and Stability
//! of Numerical Algorithms, 3.1), where `u = 2^-23` also covers matrix units that accumulate
//! by truncation; then one rounding to the storage type (`2^-24`, `2^-11`, `2^-8` relative). Each
//! checked element is held to that bound computed with its own `sum |a_k b_k|`, which is
//! rigorous (never flaky) but loose for long K; the relative L2 error over all checked
//! elements, a few times what rounding alone gives, is the tight, statistical check.
//!
//! The vendor half needs the library. Without it a test prints `SKIP ...` and passes, except
//! under `ROCMFORGE_REQUIRE_GPU=1` (GPU runs): there a missing vendor BLAS fails, so a GPU run
//! cannot pass without testing the path `gemm()` takes on real machines. A machine without it
//! on purpose says so with `ROCMFORGE_VENDOR_BLAS_OPTIONAL=1`.

use Transpose::{No, Yes};
use rocm_kernels::Dtype;
use rocm_kernels::gemm::{
    GemmDesc, GemmElement, GemmPath, Transpose, gemm, gemm_reference_at, gemm_with, vendor_blas,
};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test, relative_l2, require_gpu};

/// Set to 1 on a GPU machine that has no vendor BLAS on purpose (see the module docs).
const VENDOR_OPTIONAL_ENV: &str = "ROCMFORGE_VENDOR_BLAS_OPTIONAL";

/// Whether the vendor half can run: prints a SKIP line when not, and fails instead when GPU
/// runs demand it.
fn vendor_or_skip(gpu: &GpuTest) -> bool {
    match vendor_blas(gpu.stream()) {
        Ok(_) => true,
        Err(e) => {
            let optional = matches!(std::env::var(VENDOR_OPTIONAL_ENV).as_deref(), Ok("1"));
            assert!(
                !require_gpu() || optional,
                "no vendor BLAS under ROCMFORGE_REQUIRE_GPU=1: {e} (set {VENDOR_OPTIONAL_ENV}=1 if this machine has none on purpose)"
            );
            eprintln!("SKIP {}: no vendor BLAS: {e}", gpu.name());
            false
        }
    }
}

/// NaN elements after `C`: a write past the product's end shows up there.
const TAIL: usize = 3;

fn storage_unit<T: Dtype>() -> f64 {
    match T::NAME {
        "f32" => 2f64.powi(-24),
        "f16" => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    }
}

/// The smallest spacing of the storage type near zero (f16 subnormals).
fn storage_floor<T: Dtype>() -> f64 {
    if T::NAME == "f16" { 2f64.powi(-24) } else { 1e-38 }
}

/// Relative L2 error allowed over the checked elements: output rounding alone gives about a
/// third of the relative unit (uniform error over half an ulp), accumulation much less.
fn l2_limit<T: Dtype>() -> f64 {
    match T::NAME {
        "f32" => 2e-5,
        "f16" => 2e-3,
        _ => 1e-2,
    }
}

/// Where a product's matrices lie in one buffer: the first starts at `offset`, the `batch`
/// matrices of `rows x cols` (leading dimension `ld`) `stride` apart.
struct Extent {
    offset: usize,
    batch: usize,
    stride: usize,
    rows: usize,
    ld: usize,
    cols: usize,
}

/// `mask[i]` is true when element `i` of a `len`-element buffer lies in `e`'s matrices.
fn mask(len: usize, e: Extent) -> Vec<bool> {
    let mut m = vec![false; len];
    if e.cols == 0 {
        return m;
    }
    let cols = e.cols;
    for b in 0..e.batch {
        for r in 0..e.rows {
            let start = e.offset + b * e.stride + r * e.ld;
            m[start..start + cols].iter_mut().for_each(|x| *x = true);
        }
    }
    m
}

struct Data<T> {
    a: Vec<T>,
    b: Vec<T>,
    c: Vec<T>,
    c_mask: Vec<bool>,
}

fn a_shape(d: &GemmDesc) -> (usize, usize) {
    if d.trans_a == Yes { (d.k, d.m) } else { (d.m, d.k) }
}

fn b_shape(d: &GemmDesc) -> (usize, usize) {
    if d.trans_b == Yes { (d.n, d.k) } else { (d.k, d.n) }
}

/// Random operands in [-1, 1] where the product reads them, NaN everywhere else; `C` random
/// where covered only when beta != 0.
fn data<T: Dtype>(rng: &mut Rng, d: &GemmDesc) -> Data<T> {
    let nan = T::from_f32(f32::NAN);
    let mut fill = |mask: &[bool], random: bool| -> Vec<T> {
        mask.iter()
            .map(|&m| if m && random { T::from_f32(rng.uniform(-1.0, 1.0) as f32) } else { nan })
            .collect()
    };
    // At least one element each, so no operand is a null pointer (K = 0 reads none).
    let batch = d.batch;
    let (rows, cols) = a_shape(d);
    let a_extent = Extent { offset: d.offset_a, batch, stride: d.stride_a, rows, ld: d.lda, cols };
    let a_mask = mask(d.a_len().unwrap().max(1), a_extent);
    let (rows, cols) = b_shape(d);
    let b_extent = Extent { offset: d.offset_b, batch, stride: d.stride_b, rows, ld: d.ldb, cols };
    let b_mask = mask(d.b_len().unwrap().max(1), b_extent);
    let c_extent = Extent { offset: d.offset_c, batch, stride: d.stride_c, rows: d.m, ld: d.ldc, cols: d.n };
    let c_mask = mask(d.c_len().unwrap() + TAIL, c_extent);
    let a = fill(&a_mask, true);
    let b = fill(&b_mask, true);
    let c = fill(&c_mask, d.beta != 0.0);
    Data { a, b, c, c_mask }
}

/// Runs the product on `path` and returns `C`.
fn run<T: GemmElement>(gpu: &GpuTest, path: GemmPath, d: &GemmDesc, data: &Data<T>) -> Vec<T> {
    let s = gpu.stream();
    let (a, b) = (s.upload(&data.a).unwrap(), s.upload(&data.b).unwrap());
    let mut c: DeviceBuffer<T> = s.upload(&data.c).unwrap();
    let taken = gemm_with(path, d, &a, &b, &mut c).unwrap_or_else(|e| panic!("{path:?} {d:?}: {e}"));
    assert_eq!(taken, path);
    c.to_vec().unwrap()
}

/// Which output elements are compared with the reference.
#[derive(Clone, Copy)]
enum Check {
    /// Every element.
    All,
    /// Whole rows and whole columns at the tile edges, the middle and the ends (for products
    /// whose full reference would take minutes on the CPU); every other element is still
    /// checked to be finite.
    Sampled,
}

fn sampled(len: usize) -> Vec<usize> {
    let mut v: Vec<usize> =
        [0, 1, 127, 128, len / 2, len.saturating_sub(1)].into_iter().filter(|&i| i < len).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn check<T: Dtype>(what: &str, d: &GemmDesc, data: &Data<T>, got: &[T], how: Check) {
    let label = format!("{what} {} {d:?}", T::NAME);
    assert_eq!(got.len(), data.c.len(), "{label}");
    // Every element outside the product is untouched NaN; every one inside is finite.
    for (i, (&covered, v)) in data.c_mask.iter().zip(got).enumerate() {
        let v = v.to_f32();
        assert!(
            if covered { v.is_finite() } else { v.is_nan() },
            "{label}: element {i} ({}) is {v}",
            if covered { "in the product" } else { "outside the product, must stay NaN" }
        );
    }
    // sum_k |a_k b_k| per element: the same product on absolute values.
    let abs = |x: &[T]| -> Vec<T> { x.iter().map(|v| T::from_f32(v.to_f32().abs())).collect() };
    let (abs_a, abs_b) = (abs(&data.a), abs(&data.b));
    let abs_desc = d.with_alpha_beta(1.0, 0.0);
    let mut points = Vec::new();
    match how {
        Check::All => {
            for batch in 0..d.batch {
                for row in 0..d.m {
                    points.extend((0..d.n).map(|col| (batch, row, col)));
                }
            }
        }
        Check::Sampled => {
            for batch in 0..d.batch {
                for row in sampled(d.m) {
                    points.extend((0..d.n).map(|col| (batch, row, col)));
                }
                for col in sampled(d.n) {
                    points.extend((0..d.m).map(|row| (batch, row, col)));
                }
            }
        }
    }
    let u = 2f64.powi(-23);
    let gamma = d.k as f64 * u / (1.0 - d.k as f64 * u);
    let (ut, floor) = (storage_unit::<T>(), storage_floor::<T>());
    let (mut failures, mut worst) = (0usize, None::<(f64, usize, f64, f64, f64)>);
    let (mut got_v, mut want_v) = (Vec::with_capacity(points.len()), Vec::with_capacity(points.len()));
    for (batch, row, col) in points {
        let i = d.offset_c + batch * d.stride_c + row * d.ldc + col;
        let want = gemm_reference_at(d, &data.a, &data.b, &data.c, batch, row, col).unwrap();
        let magnitude = gemm_reference_at(&abs_desc, &abs_a, &abs_b, &data.c, batch, row, col).unwrap();
        let old = if d.beta != 0.0 { data.c[i].to_f32().abs() as f64 } else { 0.0 };
        let acc_err =
            (gamma + 2.0 * u) * d.alpha.abs() as f64 * magnitude + 2.0 * u * d.beta.abs() as f64 * old;
        let allowed = acc_err * (1.0 + ut) + ut * want.abs() + floor;
        let g = got[i].to_f32() as f64;
        let err = (g - want).abs();
        // NaN in `err` (a NaN result) fails too.
        let within = err <= allowed;
        if !within {
            failures += 1;
        }
        let ratio = err / allowed;
        if worst.is_none_or(|w| ratio > w.0) {
            worst = Some((ratio, i, g, want, allowed));
        }
        got_v.push(g);
        want_v.push(want);
    }
    let (ratio, i, g, want, allowed) = worst.unwrap_or_default();
    assert_eq!(
        failures, 0,
        "{label}: {failures} elements outside the error bound; worst at {i}: got {g:e}, want {want:e}, allowed {allowed:e} ({ratio:.2} of it)"
    );
    let l2 = relative_l2(&got_v, &want_v);
    assert!(l2 <= l2_limit::<T>(), "{label}: relative L2 error {l2:e} above {:e}", l2_limit::<T>());
}

fn case<T: GemmElement>(gpu: &GpuTest, path: GemmPath, rng: &mut Rng, d: GemmDesc, how: Check) {
    d.check().unwrap_or_else(|e| panic!("test case {d:?}: {e}"));
    let data = data::<T>(rng, &d);
    let got = run(gpu, path, &d, &data);
    check(&format!("{path:?}"), &d, &data, &got, how);
}

/// Small and medium shapes, every element checked; beta = 0 over a NaN-poisoned `C`.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 33, 15),
    (7, 1, 15),
    (7, 33, 1),
    (8, 33, 15),
    (9, 33, 15),
    (127, 1, 1),
    (127, 33, 15),
    (7, 4095, 15),
    (1, 4095, 4099),
    (1, 1, 4099),
    (7, 33, 4099),
    (127, 33, 4099),
    (4097, 33, 15),
    (4097, 1, 4099),
];

fn matches_reference<T: GemmElement>(gpu: &GpuTest, path: GemmPath, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(m, n, k) in SHAPES {
        for tb in [No, Yes] {
            case::<T>(gpu, path, &mut rng, GemmDesc::new(m, n, k).with_transposes(No, tb), Check::All);
        }
    }
}

/// 4097 x 4095 x 4099: every tile edge at once; rows and columns sampled. Under a
/// compute-sanitizer 1025 x 1023 x 1027, the same edges at 1/64 of the work: racecheck took
/// over five minutes on the full size, and what it checks (each block's shared-memory
/// accesses) does not change with the number of blocks.
fn large<T: GemmElement>(gpu: &GpuTest, path: GemmPath, seed: u64) {
    let mut rng = Rng::new(seed);
    let (m, n, k) = if rocm_testkit::sanitizer().is_some() { (1025, 1023, 1027) } else { (4097, 4095, 4099) };
    let layouts: &[Transpose] = if T::NAME == "f32" {
        &[No, Yes]
    } else if T::NAME == "f16" {
        &[No]
    } else {
        &[Yes]
    };
    for &tb in layouts {
        let d = GemmDesc::new(m, n, k).with_transposes(No, tb);
        case::<T>(gpu, path, &mut rng, d, Check::Sampled);
    }
}

fn transposed_a<T: GemmElement>(gpu: &GpuTest, path: GemmPath, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(m, n, k) in &[(1, 33, 15), (7, 33, 15), (9, 33, 15), (130, 129, 17), (127, 33, 4099), (1, 4095, 15)]
    {
        for tb in [No, Yes] {
            case::<T>(gpu, path, &mut rng, GemmDesc::new(m, n, k).with_transposes(Yes, tb), Check::All);
        }
    }
}

/// alpha/beta with leading dimensions wider than the rows (NaN gaps), every layout; then
/// alpha = 0 (C = beta C), beta = 1 (accumulate) and K = 0.
fn alpha_beta_leading_dims<T: GemmElement>(gpu: &GpuTest, path: GemmPath, seed: u64) {
    let mut rng = Rng::new(seed);
    for (ta, tb) in [(No, No), (No, Yes), (Yes, No), (Yes, Yes)] {
        for &(m, n, k) in &[(1, 33, 4099), (7, 4095, 15), (127, 1, 15), (129, 130, 31)] {
            let packed = GemmDesc::new(m, n, k).with_transposes(ta, tb);
            let d = packed
                .with_leading_dims(packed.lda + 3, packed.ldb + 5, packed.ldc + 7)
                .with_alpha_beta(0.75, -0.5);
            case::<T>(gpu, path, &mut rng, d, Check::All);
        }
    }
    for d in [
        GemmDesc::new(127, 33, 15).with_alpha_beta(0.0, 2.0),
        GemmDesc::new(7, 33, 15).with_alpha_beta(0.0, 2.0),
        GemmDesc::linear(127, 33, 15).with_alpha_beta(1.0, 1.0),
        GemmDesc::new(7, 33, 0).with_alpha_beta(1.0, 0.5),
        GemmDesc::new(130, 33, 0).with_alpha_beta(1.0, 0.5),
    ] {
        case::<T>(gpu, path, &mut rng, d, Check::All);
    }
}

/// Strided batches with gaps between the matrices, and a `B` shared by every batch (stride 0);
/// then matrices that start inside their buffers (offsets, NaN before them): a block of the
/// columns of a wider `C` from a block of the rows of `B`, as one chunk of a product split in
/// column blocks computes it, batched and not.
fn batched<T: GemmElement>(gpu: &GpuTest, path: GemmPath, seed: u64) {
    let mut rng = Rng::new(seed);
    for (m, n, k, ta, tb) in
        [(7, 33, 15, No, No), (130, 65, 17, No, Yes), (1, 300, 31, Yes, Yes), (129, 3, 8, Yes, No)]
    {
        let packed = GemmDesc::new(m, n, k).with_transposes(ta, tb);
        let (sa, sb, sc) = (packed.a_len().unwrap(), packed.b_len().unwrap(), packed.c_len().unwrap());
        let gaps = packed.with_batch(3, sa + 5, sb + 3, sc + 11).with_alpha_beta(1.5, 0.25);
        case::<T>(gpu, path, &mut rng, gaps, Check::All);
        let shared_b = packed.with_batch(2, sa, 0, sc);
        case::<T>(gpu, path, &mut rng, shared_b, Check::All);
        let offsets = gaps.with_offsets(3, 7, 13);
        case::<T>(gpu, path, &mut rng, offsets, Check::All);
    }
    // Columns 40..73 of a [9, 100] output from rows 40..73 of a [100, 31] weight: y = x W^T.
    let (m, n, k, wide) = (9, 33, 31, 100);
    let block = GemmDesc::linear(m, n, k).with_leading_dims(k, k, wide).with_offsets(0, 40 * k, 40);
    case::<T>(gpu, path, &mut rng, block, Check::All);
}

/// Both paths on the same inputs, compared in full (relative L2: each is within rounding of
/// the exact product, so of each other), at a prefill and a decode shape of a 4096-wide model.
fn paths_agree<T: GemmElement>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for d in
        [GemmDesc::linear(512, 1024, 4096), GemmDesc::linear(1, 14336, 4096), GemmDesc::new(300, 257, 1000)]
    {
        let data = data::<T>(&mut rng, &d);
        let vendor = run(gpu, GemmPath::Vendor, &d, &data);
        let portable = run(gpu, GemmPath::Portable, &d, &data);
        let as_f64 =
            |x: &[T]| -> Vec<f64> { x[..d.c_len().unwrap()].iter().map(|v| v.to_f32() as f64).collect() };
        let (v, p) = (as_f64(&vendor), as_f64(&portable));
        assert!(v.iter().chain(&p).all(|x| x.is_finite()), "{} {d:?}: non-finite output", T::NAME);
        let l2 = relative_l2(&v, &p);
        assert!(
            l2 <= 2.0 * l2_limit::<T>(),
            "{} {d:?}: vendor and portable differ by relative L2 {l2:e}",
            T::NAME
        );
    }
}

/// One test per path and storage type for each family of cases above.
macro_rules! per_path {
    ($family:ident, $seed:expr) => {
        mod $family {
            use super::*;

            #[test]
            fn portable_f32() {
                let gpu = gpu_test!();
                super::$family::<f32>(&gpu, GemmPath::Portable, $seed);
            }
            #[test]
            fn portable_f16() {
                let gpu = gpu_test!();
                super::$family::<f16>(&gpu, GemmPath::Portable, $seed + 1);
            }
            #[test]
            fn portable_bf16() {
                let gpu = gpu_test!();
                super::$family::<bf16>(&gpu, GemmPath::Portable, $seed + 2);
            }
            #[test]
            fn vendor_f32() {
                let gpu = gpu_test!();
                if vendor_or_skip(&gpu) {
                    super::$family::<f32>(&gpu, GemmPath::Vendor, $seed);
                }
            }
            #[test]
            fn vendor_f16() {
                let gpu = gpu_test!();
                if vendor_or_skip(&gpu) {
                    super::$family::<f16>(&gpu, GemmPath::Vendor, $seed + 1);
                }
            }
            #[test]
            fn vendor_bf16() {
                let gpu = gpu_test!();
                if vendor_or_skip(&gpu) {
                    super::$family::<bf16>(&gpu, GemmPath::Vendor, $seed + 2);
                }
            }
        }
    };
}

per_path!(matches_reference, 0x6e11);
per_path!(large, 0x6e21);
per_path!(transposed_a, 0x6e31);
per_path!(alpha_beta_leading_dims, 0x6e41);
per_path!(batched, 0x6e51);

#[test]
fn vendor_and_portable_agree_f32() {
    let gpu = gpu_test!();
    if vendor_or_skip(&gpu) {
        paths_agree::<f32>(&gpu, 0x6e61);
    }
}

#[test]
fn vendor_and_portable_agree_f16() {
    let gpu = gpu_test!();
    if vendor_or_skip(&gpu) {
        paths_agree::<f16>(&gpu, 0x6e62);
    }
}

#[test]
fn vendor_and_portable_agree_bf16() {
    let gpu = gpu_test!();
    if vendor_or_skip(&gpu) {
        paths_agree::<bf16>(&gpu, 0x6e63);
    }
}

/// `gemm()` takes the vendor library exactly when it can be loaded, and its answer is the
/// reference's either way.
#[test]
fn the_front_door_prefers_the_vendor_library() {
    let gpu = gpu_test!();
    let have_vendor = vendor_blas(gpu.stream()).is_ok();
    let d = GemmDesc::linear(3, 40, 50);
    let data = data::<f32>(&mut Rng::new(0x6e71), &d);
    let s = gpu.stream();
    let (a, b) = (s.upload(&data.a).unwrap(), s.upload(&data.b).unwrap());
    let mut c = s.upload(&data.c).unwrap();
    let taken = gemm(&d, &a, &b, &mut c).unwrap();
    assert_eq!(taken, if have_vendor { GemmPath::Vendor } else { GemmPath::Portable });
    check("auto", &d, &data, &c.to_vec().unwrap(), Check::All);
}

/// Buffers of another stream and buffers shorter than the product are refused by both paths,
/// before anything is queued.
#[test]
fn bad_arguments_are_refused_on_both_paths() {
    let gpu = gpu_test!();
    let paths: &[GemmPath] = if vendor_blas(gpu.stream()).is_ok() {
        &[GemmPath::Portable, GemmPath::Vendor]
    } else {
        &[GemmPath::Portable]
    };
    let d = GemmDesc::new(4, 5, 6);
    let s = gpu.stream();
    let other = gpu.new_stream();
    let a = s.upload(&[1.0f32; 24]).unwrap();
    let foreign_a = other.upload(&[1.0f32; 24]).unwrap();
    let b = s.upload(&[1.0f32; 30]).unwrap();
    let short_b = s.upload(&[1.0f32; 29]).unwrap();
    let mut c = s.alloc_zeroed::<f32>(20).unwrap();
    for &path in paths {
        let err = gemm_with(path, &d, &foreign_a, &b, &mut c).unwrap_err().to_string();
        assert!(err.contains("stream"), "{path:?}: {err}");
        let err = gemm_with(path, &d, &a, &short_b, &mut c).unwrap_err().to_string();
        assert!(err.contains("B has 29 elements, the product reaches 30"), "{path:?}: {err}");
    }
    assert_eq!(c.to_vec().unwrap(), vec![0.0; 20], "nothing was written");
    other.synchronize().unwrap();
}

/// The product as the kernels compute it, on the CPU: f32 fused multiply-adds in K order,
/// alpha and beta in f32, one rounding to the storage type. `skip_k` leaves one term out.
fn emulate<T: Dtype>(d: &GemmDesc, data: &Data<T>, skip_k: Option<usize>) -> Vec<T> {
    let mut out = data.c.clone();
    for batch in 0..d.batch {
        for row in 0..d.m {
            for col in 0..d.n {
                let mut acc = 0.0f32;
                for k in (0..d.k).filter(|&k| Some(k) != skip_k) {
                    let a = match d.trans_a {
                        No => data.a[batch * d.stride_a + row * d.lda + k],
                        Yes => data.a[batch * d.stride_a + k * d.lda + row],
                    };
                    let b = match d.trans_b {
                        No => data.b[batch * d.stride_b + k * d.ldb + col],
                        Yes => data.b[batch * d.stride_b + col * d.ldb + k],
                    };
                    acc = a.to_f32().mul_add(b.to_f32(), acc);
                }
                let i = batch * d.stride_c + row * d.ldc + col;
                let mut v = d.alpha * acc;
                if d.beta != 0.0 {
                    v = d.beta.mul_add(data.c[i].to_f32(), v);
                }
                out[i] = T::from_f32(v);
            }
        }
    }
    out
}

fn checker_sees<T: Dtype>(seed: u64) {
    let mut rng = Rng::new(seed);
    let packed = GemmDesc::linear(9, 33, 4099);
    let cases = [
        packed,
        packed.with_leading_dims(4101, 4102, 40).with_alpha_beta(0.75, -0.5),
        GemmDesc::new(7, 33, 15).with_transposes(Yes, No).with_packed_batch(2).with_alpha_beta(1.0, 1.0),
    ];
    for d in cases {
        let data = data::<T>(&mut rng, &d);
        check("emulated", &d, &data, &emulate(&d, &data, None), Check::All);
        check("emulated", &d, &data, &emulate(&d, &data, None), Check::Sampled);
        // One term of K left out is an error the check must see.
        let dropped = emulate(&d, &data, Some(d.k / 2));
        let run_check = || check("dropped", &d, &data, &dropped, Check::All);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run_check));
        assert!(caught.is_err(), "{} {d:?}: a dropped term passed the check", T::NAME);
    }
}

/// The check itself (no GPU): it passes what an f32-accumulating kernel computes, and fails
/// a product missing one term of K.
#[test]
fn the_check_passes_f32_accumulation_and_catches_a_dropped_term() {
    checker_sees::<f32>(0x6e81);
    checker_sees::<f16>(0x6e82);
    checker_sees::<bf16>(0x6e83);
}
