//! `flash_attention` (both kernels, split and not) and the unfused pipeline against the f64 CPU
//! reference and against each other: awkward sequence lengths (1, 17, 255, 1000, 4097), batch 1
//! and 3, odd head counts, GQA ratios 1, 4 and 8, head_dim 13 to 256, causal with default,
//! negative and positive offsets (fully masked rows included), both layouts and padded strides,
//! inputs of magnitude 30, poisoned outputs; and the problems the launchers must refuse.

use rocm_kernels::attention::{
    Attention, AttentionReference, FlashKernel, FlashOptions, Layout, Strides, attention_reference,
    attention_unfused, flash_attention, flash_attention_with,
};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, MatrixCores, bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, compare, gpu_test};

/// One problem: (batch, seq_q, seq_k, q_heads, kv_heads, head_dim, causal offset or None).
#[derive(Debug, Clone, Copy)]
struct Case {
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    causal: Option<Option<i64>>,
    layout: Layout,
    /// Standard deviation of Q and K (30: scores in the hundreds, a near one-hot softmax).
    magnitude: f32,
}

const fn case(b: usize, sq: usize, sk: usize, hq: usize, hkv: usize, d: usize) -> Case {
    Case {
        batch: b,
        seq_q: sq,
        seq_k: sk,
        q_heads: hq,
        kv_heads: hkv,
        head_dim: d,
        causal: None,
        layout: Layout::Bshd,
        magnitude: 1.0,
    }
}

impl Case {
    const fn causal(self) -> Self {
        Case { causal: Some(None), ..self }
    }
    const fn offset(self, offset: i64) -> Self {
        Case { causal: Some(Some(offset)), ..self }
    }
    const fn bhsd(self) -> Self {
        Case { layout: Layout::Bhsd, ..self }
    }
    const fn scaled(self) -> Self {
        Case { magnitude: 30.0, ..self }
    }

    /// Multiply-adds of Q K^T (P V is as many): what a checker's cost follows.
    fn work(&self) -> u64 {
        let full = [self.batch, self.seq_q, self.seq_k, self.q_heads, self.head_dim]
            .iter()
            .map(|&x| x as u64)
            .product::<u64>();
        if self.causal.is_some() { full / 2 } else { full }
    }

    fn attention(&self) -> Attention {
        let a =
            Attention::new(self.batch, self.seq_q, self.seq_k, self.q_heads, self.kv_heads, self.head_dim)
                .with_layout(self.layout);
        match self.causal {
            None => a,
            Some(None) => a.causal(),
            Some(Some(offset)) => a.causal_with_offset(offset),
        }
    }
}

/// Every shape the issue names, spread over the variants: one token; odd heads; GQA 4 and 8 and
/// MQA; decode against 1000 and 4096 keys (the launcher splits those); chunked prefill (17
/// queries after 4080 cached keys); more queries than keys (the first rows see nothing); an
/// explicit positive offset; head_dim 13 (portable only), 40 and 80 (zero-padded tiles), 96,
/// 256; magnitude-30 inputs; the other layout. Between them they reach every matrix-core
/// variant (key-split decode blocks up to 16 rows, 4-warp blocks up to 64, 8-warp beyond) at
/// every head_dim it is built for.
const CASES: &[Case] = &[
    case(1, 1, 1, 1, 1, 64),
    case(3, 17, 17, 3, 3, 64).causal(),
    case(1, 255, 255, 8, 2, 128).causal().scaled(),
    case(3, 1, 1000, 8, 1, 128),
    case(1, 1000, 1000, 5, 5, 80).causal().bhsd(),
    case(1, 17, 4097, 8, 1, 96).causal(),
    case(2, 255, 1000, 4, 1, 256).scaled(),
    case(1, 4097, 4097, 1, 1, 128).causal(),
    case(1, 33, 20, 2, 2, 64).causal(),
    case(1, 7, 9, 2, 1, 40).offset(3).bhsd(),
    case(1, 5, 13, 3, 3, 13),
    case(2, 1, 4096, 32, 4, 128).causal().scaled(),
    case(3, 1000, 255, 4, 4, 64).offset(-500),
    case(2, 2, 300, 6, 1, 80).causal(),
    case(1, 3, 500, 4, 1, 96).scaled(),
    // Prefill past 64 packed rows (Hopper's warpgroup kernels): non-causal GQA 3 with a partial
    // last key tile, head_dim 40 zero-padded to 64, and causal GQA 4 at head_dim 64 (1020
    // packed rows: the diagonal crosses the 256-row blocks and 64-key tiles at odd places).
    case(1, 300, 1000, 6, 2, 128),
    case(2, 100, 77, 3, 1, 40).scaled(),
    case(3, 255, 255, 8, 2, 64).causal().scaled(),
    // Small enough for a sanitized run (SANITIZED_WORK), the variants the cases above reach
    // only at sizes a checker cannot afford: decode split over 4097 keys (GQA 8), and prefill
    // past 64 packed rows, causal across key tiles, at head_dim 64, 96, 128 and 256.
    case(1, 1, 4097, 8, 1, 128),
    case(1, 40, 77, 4, 1, 256).causal(),
    case(1, 70, 90, 2, 1, 128).causal().scaled(),
    case(1, 35, 130, 4, 2, 96).causal(),
    case(2, 33, 70, 4, 1, 64).offset(20),
];

/// Normal values of standard deviation `sd`, rounded to the storage type.
fn normal<T: Dtype>(rng: &mut Rng, len: usize, sd: f32) -> Vec<T> {
    rng.normal_f32_vec(len, sd).into_iter().map(T::from_f32).collect()
}

fn poisoned<T: Dtype>(gpu: &GpuTest, len: usize) -> DeviceBuffer<T> {
    let mut buf = gpu.stream().alloc::<T>(len).unwrap();
    buf.poison().unwrap();
    buf
}

/// Where the kernels' error comes from, bounded against `vmax = max |v|`:
/// - the output's rounding to T, and (matrix-core kernel) P rounded to T before P V: a few
///   units of T's precision (2^-11 f16, 2^-8 bf16, ~0 f32) of vmax;
/// - the scores' f32 accumulation and exp2's approximation: a relative error of the weights
///   near 2^-24 * |score| * sqrt(head_dim); for magnitude-30 inputs (scores up to ~1e3) about
///   1e-3 at worst, else 1e-5.
fn tolerance<T: Dtype>(case: &Case, vmax: f64) -> Tolerance {
    let eps = match T::NAME {
        "f32" => 0.0,
        "f16" => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    };
    let scores = if case.magnitude > 1.0 { 2e-3 } else { 2e-5 };
    Tolerance::new(vmax * (4.0 * eps + scores), 0.0)
}

/// The output rows of `o` (at `attn.o`'s strides) in the reference's contiguous order.
fn gather<T: Dtype>(attn: &Attention, o: &[T]) -> Vec<f64> {
    let mut out = Vec::with_capacity(attn.batch * attn.seq_q * attn.q_heads * attn.head_dim);
    for b in 0..attn.batch {
        for i in 0..attn.seq_q {
            for h in 0..attn.q_heads {
                let start = b * attn.o.batch + i * attn.o.seq + h * attn.o.head;
                out.extend(o[start..start + attn.head_dim].iter().map(|v| v.to_f32() as f64));
            }
        }
    }
    out
}

struct Inputs<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    reference: AttentionReference,
    vmax: f64,
}

fn inputs<T: Dtype>(attn: &Attention, case: &Case, rng: &mut Rng) -> Inputs<T> {
    let len = |s: Strides, seq, heads| s.required_len(attn.batch, seq, heads, attn.head_dim).unwrap();
    let q = normal::<T>(rng, len(attn.q, attn.seq_q, attn.q_heads), case.magnitude);
    let k = normal::<T>(rng, len(attn.k, attn.seq_k, attn.kv_heads), case.magnitude);
    let v = normal::<T>(rng, len(attn.v, attn.seq_k, attn.kv_heads), 1.0);
    let reference = attention_reference(attn, &q, &k, &v);
    let vmax = v.iter().map(|x| x.to_f32().abs() as f64).fold(0.0, f64::max);
    Inputs { q, k, v, reference, vmax }
}

/// Runs `attn` through the flash kernel with `options` and checks O and the LSE (rows that see
/// no key: LSE -inf, O zeros); returns O in the reference's order.
fn check_flash<T: Dtype>(
    gpu: &GpuTest,
    attn: &Attention,
    case: &Case,
    x: &Inputs<T>,
    options: FlashOptions,
) -> Vec<f64> {
    let s = gpu.stream();
    let (q, k, v) = (s.upload(&x.q).unwrap(), s.upload(&x.k).unwrap(), s.upload(&x.v).unwrap());
    let o_len = attn.o.required_len(attn.batch, attn.seq_q, attn.q_heads, attn.head_dim).unwrap();
    let mut o = poisoned::<T>(gpu, o_len);
    let mut lse = poisoned::<f32>(gpu, attn.lse_len());
    let started = std::time::Instant::now();
    flash_attention_with(attn, &options, &q, &k, &v, &mut o, Some(&mut lse)).unwrap();
    let got = gather(attn, &o.to_vec().unwrap());
    // The time says which cases a sanitizer run pays for (SANITIZED_WORK).
    eprintln!("flash {} {case:?} {options:?}: {:.2?}", T::NAME, started.elapsed());
    assert_close(&got, &x.reference.out, tolerance::<T>(case, x.vmax));
    let lse = lse.to_vec().unwrap();
    for (i, (&got, &want)) in lse.iter().zip(&x.reference.lse).enumerate() {
        if want == f64::NEG_INFINITY {
            assert_eq!(got, f32::NEG_INFINITY, "lse row {i}: a row that sees no key");
        } else {
            // ln of a sum of weights that are each right to ~1e-3 relative at worst.
            let allowed = 1e-5 * want.abs().max(1.0) + if case.magnitude > 1.0 { 2e-3 } else { 2e-5 };
            assert!((got as f64 - want).abs() <= allowed, "lse row {i}: got {got}, expected {want}");
        }
    }
    got
}

fn check_unfused<T: Dtype>(gpu: &GpuTest, attn: &Attention, case: &Case, x: &Inputs<T>) -> Vec<f64> {
    let s = gpu.stream();
    let (q, k, v) = (s.upload(&x.q).unwrap(), s.upload(&x.k).unwrap(), s.upload(&x.v).unwrap());
    let o_len = attn.o.required_len(attn.batch, attn.seq_q, attn.q_heads, attn.head_dim).unwrap();
    let mut o = poisoned::<T>(gpu, o_len);
    attention_unfused(attn, &q, &k, &v, &mut o).unwrap();
    let got = gather(attn, &o.to_vec().unwrap());
    eprintln!("unfused {} {case:?}", T::NAME);
    assert_close(&got, &x.reference.out, tolerance::<T>(case, x.vmax));
    got
}

/// Under a compute-sanitizer, the cases of at most this much work (`Case::work`): racecheck
/// checks each shared-memory access on the host and ran past its five-minute limit by the
/// sixth case of each dtype (a few seconds per million multiply-adds). What a checker checks
/// is each launch's accesses, and the cases below this size reach the same code: every kernel
/// variant (key-split decode, 4- and 8-warp and warpgroup prefill), every head_dim, partial
/// tiles, masked rows, GQA and MQA (the last cases of `CASES` exist for that). The larger
/// cases run in every plain run.
const SANITIZED_WORK: u64 = 1 << 23;

/// Which of `CASES` a test takes: each dtype's cases are two tests, so that a checker's time
/// per test (racecheck instruments each kernel variant on its first launch) is spread over two
/// processes. Decode (at most 16 query rows a sequence: the key-split kernels) and prefill (the
/// 4- and 8-warp and warpgroup kernels) reach different variants.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Share {
    Decode,
    Prefill,
}

impl Share {
    fn of(case: &Case) -> Share {
        if case.seq_q <= 16 { Share::Decode } else { Share::Prefill }
    }
}

fn all_cases<T: Dtype>(gpu: &GpuTest, share: Share, seed: u64) {
    let mut rng = Rng::new(seed);
    let mma = gpu.backend().info().matrix_cores != MatrixCores::None && T::NAME != "f32";
    let sanitized = rocm_testkit::sanitizer().is_some();
    let cases: Vec<&Case> = CASES.iter().filter(|c| Share::of(c) == share).collect();
    assert!(cases.len() >= 5, "{share:?}: {} cases", cases.len());
    for case in cases {
        if sanitized && case.work() > SANITIZED_WORK {
            eprintln!("under a sanitizer: leaving out {case:?} ({} multiply-adds)", case.work());
            continue;
        }
        let attn = case.attention();
        let x = inputs::<T>(&attn, case, &mut rng);
        let auto = check_flash(gpu, &attn, case, &x, FlashOptions::default());
        let portable =
            check_flash(gpu, &attn, case, &x, FlashOptions { kernel: FlashKernel::Portable, splits: None });
        // Three key ranges where there are keys enough (two when fewer), through the combine.
        check_flash(gpu, &attn, case, &x, FlashOptions { kernel: FlashKernel::Auto, splits: Some(3) });
        if mma && attn.head_dim.is_multiple_of(8) {
            check_flash(
                gpu,
                &attn,
                case,
                &x,
                FlashOptions { kernel: FlashKernel::MatrixCores, splits: None },
            );
            // Hopper: the warpgroup kernel above (where it applies), the mma.sync kernel here.
            if gpu.backend().info().warpgroup_mma {
                let mma_sync = FlashOptions { kernel: FlashKernel::MmaSync, splits: None };
                check_flash(gpu, &attn, case, &x, mma_sync);
            }
        }
        let unfused = check_unfused(gpu, &attn, case, &x);
        // The fused and unfused paths agree with each other as closely as each with the
        // reference.
        let tol = tolerance::<T>(case, x.vmax);
        let both = Tolerance::new(2.0 * tol.abs, 0.0);
        for (name, fused) in [("auto", &auto), ("portable", &portable)] {
            let c = compare(fused, &unfused, &both);
            assert!(c.passed(&both), "{name} flash vs unfused {case:?}: {c}");
        }
    }
}

/// Decode with one block per compute unit (one sequence of 777 keys per unit, GQA 4 on one KV
/// head): the launcher takes the 8-warp key-split kernel with no split there (`ks8`), which the
/// fixed cases, sized for any device, do not reach. Every head_dim it is built for, causal,
/// magnitude 30.
fn wide_decode<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let mut rng = Rng::new(seed);
    let units = gpu.backend().info().compute_units as usize;
    for d in [64, 80, 96, 128] {
        let case = case(units, 1, 777, 4, 1, d).causal().scaled();
        let attn = case.attention();
        let x = inputs::<T>(&attn, &case, &mut rng);
        check_flash(&gpu, &attn, &case, &x, FlashOptions::default());
    }
}

#[test]
fn wide_decode_matches_the_reference_f16() {
    wide_decode::<f16>(0xfa16);
}

#[test]
fn wide_decode_matches_the_reference_bf16() {
    wide_decode::<bf16>(0xfab6);
}

#[test]
fn flash_decode_matches_the_reference_f32() {
    let gpu = gpu_test!();
    all_cases::<f32>(&gpu, Share::Decode, 0xa771);
}

#[test]
fn flash_prefill_matches_the_reference_f32() {
    let gpu = gpu_test!();
    all_cases::<f32>(&gpu, Share::Prefill, 0xa771 ^ 0x10000);
}

#[test]
fn flash_decode_matches_the_reference_f16() {
    let gpu = gpu_test!();
    all_cases::<f16>(&gpu, Share::Decode, 0xa772);
}

#[test]
fn flash_prefill_matches_the_reference_f16() {
    let gpu = gpu_test!();
    all_cases::<f16>(&gpu, Share::Prefill, 0xa772 ^ 0x10000);
}

#[test]
fn flash_decode_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    all_cases::<bf16>(&gpu, Share::Decode, 0xa773);
}

#[test]
fn flash_prefill_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    all_cases::<bf16>(&gpu, Share::Prefill, 0xa773 ^ 0x10000);
}

/// Q in [b, h, s, d] with 8 elements of padding after each row, K and V interleaved in one
/// buffer (a fused KV projection: [b, s, kv_heads, 2, d]), O in [b, s, h, d] with a gap after
/// each token: the gaps must still hold the poison afterwards.
#[test]
fn padded_and_interleaved_strides() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xa774);
    let (b, sq, sk, hq, hkv, d) = (2, 19, 37, 4, 2, 64);
    let q_strides = Strides { batch: hq * sq * (d + 8), seq: d + 8, head: sq * (d + 8) };
    let kv_strides = Strides { batch: sk * hkv * 2 * d, seq: hkv * 2 * d, head: 2 * d };
    let o_strides = Strides { batch: sq * (hq * d + 16), seq: hq * d + 16, head: d };
    let attn = Attention::new(b, sq, sk, hq, hkv, d)
        .causal()
        .with_q_strides(q_strides)
        .with_k_strides(kv_strides)
        .with_v_strides(kv_strides)
        .with_o_strides(o_strides);
    let q = normal::<f16>(&mut rng, q_strides.required_len(b, sq, hq, d).unwrap(), 1.0);
    let kv = normal::<f16>(&mut rng, kv_strides.required_len(b, sk, hkv, d).unwrap() + d, 1.0);
    // V is K shifted by one head_dim: the same buffer, the second half of each pair.
    let (k_host, v_host) = (kv.clone(), kv[d..].to_vec());
    let reference = attention_reference(&attn, &q, &k_host, &v_host);
    let s = gpu.stream();
    let dq = s.upload(&q).unwrap();
    let dk = s.upload(&k_host).unwrap();
    let dv = s.upload(&v_host).unwrap();
    let o_len = o_strides.required_len(b, sq, hq, d).unwrap() + 16;
    for kernel in [FlashKernel::Auto, FlashKernel::Portable] {
        let mut o = poisoned::<f16>(&gpu, o_len);
        let options = FlashOptions { kernel, splits: None };
        flash_attention_with(&attn, &options, &dq, &dk, &dv, &mut o, None).unwrap();
        let host = o.to_vec().unwrap();
        let case = case(b, sq, sk, hq, hkv, d);
        let vmax = v_host.iter().map(|x| x.to_f32().abs() as f64).fold(0.0, f64::max);
        assert_close(&gather(&attn, &host), &reference.out, tolerance::<f16>(&case, vmax));
        for bi in 0..b {
            for i in 0..sq {
                let gap = bi * o_strides.batch + i * o_strides.seq + hq * d;
                assert!(
                    host[gap..gap + 16].iter().all(|x| x.is_nan()),
                    "{kernel:?}: gap after token {i} written"
                );
            }
        }
    }
}

#[test]
fn bad_problems_are_refused() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let attn = Attention::new(1, 4, 8, 4, 2, 64);
    let q = s.alloc_zeroed::<f16>(4 * 4 * 64).unwrap();
    let kv = s.alloc_zeroed::<f16>(8 * 2 * 64).unwrap();
    let mut o = s.alloc_zeroed::<f16>(4 * 4 * 64).unwrap();
    let shape_error = |r: rocm_kernels::Result<()>| match r {
        Err(KernelError::Shape { message, .. }) => message,
        other => panic!("expected a shape error, got {other:?}"),
    };
    let bad_heads = Attention { kv_heads: 3, ..attn };
    assert!(shape_error(flash_attention(&bad_heads, &q, &kv, &kv, &mut o, None)).contains("kv_heads 3"));
    let short = s.alloc_zeroed::<f16>(10).unwrap();
    assert!(
        shape_error(flash_attention(&attn, &short, &kv, &kv, &mut o, None)).contains("q has 10 elements")
    );
    let mut lse = s.alloc_zeroed::<f32>(3).unwrap();
    assert!(shape_error(flash_attention(&attn, &q, &kv, &kv, &mut o, Some(&mut lse))).contains("lse has 3"));
    let too_many = FlashOptions { kernel: FlashKernel::Auto, splits: Some(65) };
    assert!(
        shape_error(flash_attention_with(&attn, &too_many, &q, &kv, &kv, &mut o, None)).contains("splits 65")
    );
    let big = Attention { head_dim: 264, ..attn };
    assert!(shape_error(flash_attention(&big, &q, &kv, &kv, &mut o, None)).contains("head_dim 264"));
    // The matrix-core kernel, asked for by name, says why it cannot run f32.
    let q32 = s.alloc_zeroed::<f32>(4 * 4 * 64).unwrap();
    let kv32 = s.alloc_zeroed::<f32>(8 * 2 * 64).unwrap();
    let mut o32 = s.alloc_zeroed::<f32>(4 * 4 * 64).unwrap();
    let mma = FlashOptions { kernel: FlashKernel::MatrixCores, splits: None };
    assert!(!shape_error(flash_attention_with(&attn, &mma, &q32, &kv32, &kv32, &mut o32, None)).is_empty());
    // Odd head_dim: the portable kernel runs it, the matrix-core kernel refuses.
    let odd = Attention::new(1, 2, 2, 1, 1, 13);
    let small = s.alloc_zeroed::<f16>(2 * 13).unwrap();
    let mut small_o = s.alloc_zeroed::<f16>(2 * 13).unwrap();
    flash_attention(&odd, &small, &small, &small, &mut small_o, None).unwrap();
    if gpu.backend().info().matrix_cores != MatrixCores::None {
        let m = shape_error(flash_attention_with(&odd, &mma, &small, &small, &small, &mut small_o, None));
        assert!(m.contains("multiples of 8"), "{m}");
    }
    // Buffers of another stream.
    let other = gpu.new_stream();
    let foreign = other.alloc_zeroed::<f16>(4 * 4 * 64).unwrap();
    assert!(matches!(flash_attention(&attn, &foreign, &kv, &kv, &mut o, None), Err(KernelError::Runtime(_))));
    drop(foreign);
    other.synchronize().unwrap();
}
