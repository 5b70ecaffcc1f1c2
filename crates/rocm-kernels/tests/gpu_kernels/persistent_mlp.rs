//! `persistent_mlp` against the chain it replaces, checked link by link:
//!
//! - the residual add: `h` gets the bits of `rmsnorm_residual`'s `s`;
//! - the norm: the residual rows are multiples of 2^-4 (their sums of squares exact in f32 in any
//!   order), so the kernel's `xn` is bit for bit the `rmsnorm` kernel's, which the reference of
//!   the products then takes as its input;
//! - `act`: within the bound that the gate and up sums' own bounds
//!   (`QuantMatvecReference::allowed_error`) carry through `silu(g) * u` and its rounding;
//! - `y`: the down product of the `act` the kernel stored, within its `allowed_error`.
//!
//! Shapes: Llama-3-8B's (4096, 14336), smaller ones whose 16-row tiles are fewer than the
//! launch's groups of warps (groups with no rows of a product) or not a multiple of them, and a
//! hidden wider than the vectors of h a thread requests up front (12544: 1568 vectors, of which
//! an H100's 2 groups, 256 threads, request 1024; the rest are read in the loop's wait);
//! outputs poisoned before each launch; a second launch and graph replays give the same bits
//! (the barriers' counters put back).

use rocm_kernels::persistent_mlp::{MlpWeights, PersistentMlp};
use rocm_kernels::quant::{GgmlFormat, QuantMatvecReference, quant_matvec_reference};
use rocm_kernels::rmsnorm::RmsNorm;
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

use crate::bits;
use crate::mxfp::{floats, poisoned};

/// q8_0 rows of random codes, steps of magnitude 2^-10 .. 2^-7 with a random sign, one in 32
/// zero: weights below 1, so no f16 activation or output overflows at these widths.
fn q8_0_weights(rng: &mut Rng, rows: usize, k: usize) -> Vec<u8> {
    let mut w: Vec<u8> = (0..rows * k / 32 * 34).map(|_| rng.next_u64() as u8).collect();
    for block in w.chunks_exact_mut(34) {
        let magnitude = match rng.below(32) {
            0 => 0.0,
            _ => 2f32.powi(-10 + rng.below(3) as i32) * (1.0 + rng.next_f64() as f32),
        };
        let step = if rng.below(2) == 0 { magnitude } else { -magnitude };
        block[..2].copy_from_slice(&f16::from_f32(step).to_bits().to_le_bytes());
    }
    w
}

/// Multiples of 2^-4 in [-1, 1): any sum of their squares (and of those of two of them added)
/// is exact in f32 at these widths.
fn exact_row<T: Dtype>(rng: &mut Rng, len: usize) -> Vec<T> {
    (0..len).map(|_| T::from_f32((rng.below(32) as f32 - 16.0) / 16.0)).collect()
}

/// Checks `act` against `silu(g) * u` of the exact sums: each sum off by at most its
/// `allowed_error` (which includes its rounding to `T`), carried through silu (slope within
/// [-0.1, 1.1]) and the product, plus `rocmforge_silu.h`'s fast exp2 and division (2^-16
/// relative) and the store's rounding.
fn check_act<T: Dtype>(act: &[f32], g: &QuantMatvecReference, u: &QuantMatvecReference, what: &str) {
    let (rel, abs) = QuantMatvecReference::store_rounding(T::NAME);
    for (i, &got) in act.iter().enumerate() {
        let (gv, uv) = (g.y[i], u.y[i]);
        let (ag, au) = (g.allowed_error(i, T::NAME), u.allowed_error(i, T::NAME));
        let silu = gv / (1.0 + (-gv).exp());
        let carried = 1.1 * ag * (uv.abs() + au) + silu.abs() * au;
        let want = silu * uv;
        let allowed = carried + (rel + 2f64.powi(-16)) * (want.abs() + carried) + abs;
        let err = (f64::from(got) - want).abs();
        assert!(
            err <= allowed,
            "{what}: act[{i}] = {got}, want {want} (g {gv}, u {uv}): error {err} > {allowed}"
        );
    }
}

struct Case {
    hidden: usize,
    ffn: usize,
    residual: bool,
}

fn matches_the_chain<T: Dtype>(gpu: &GpuTest, seed: u64, cases: &[Case]) {
    let stream = gpu.stream();
    if !PersistentMlp::runs_on(stream) {
        let err = PersistentMlp::new(stream, 1024, 1024, 1e-5).unwrap_err().to_string();
        assert!(err.contains("needs NVIDIA sm_80 or later"), "{err}");
        return;
    }
    let mut rng = Rng::new(seed);
    let eps = 1e-5;
    for &Case { hidden, ffn, residual } in cases {
        let what = format!("{} hidden {hidden} ffn {ffn} residual {residual}", T::NAME);
        let host_h = exact_row::<T>(&mut rng, hidden);
        let delta = residual.then(|| stream.upload(&exact_row::<T>(&mut rng, hidden)).unwrap());
        let norm: Vec<T> = (0..hidden).map(|_| T::from_f32(rng.uniform(0.5, 1.5) as f32)).collect();
        let norm = stream.upload(&norm).unwrap();
        let host_w = [(ffn, hidden), (ffn, hidden), (hidden, ffn)].map(|(r, k)| q8_0_weights(&mut rng, r, k));
        let [gate, up, down] = host_w.each_ref().map(|w| stream.upload(w).unwrap());
        let weights = MlpWeights { norm: &norm, gate: &gate, up: &up, down: &down };

        // The chain's norm: s into want_h, xn.
        let mut want_h = stream.upload(&host_h).unwrap();
        let mut xn = poisoned::<T>(gpu, hidden);
        let rms = RmsNorm::new(1, hidden, eps);
        match &delta {
            Some(d) => rms.run_residual(d, &mut want_h, &norm, &mut xn).unwrap(),
            None => rms.run(&want_h, &norm, &mut xn).unwrap(),
        }
        let xn = floats(&xn.to_vec().unwrap());

        let mut mlp = PersistentMlp::new(stream, hidden, ffn, eps).unwrap();
        let mut outputs: Vec<[Vec<u32>; 3]> = Vec::new();
        for round in 0..2 {
            let mut h = stream.upload(&host_h).unwrap();
            let (mut act, mut y) = (poisoned::<T>(gpu, ffn), poisoned::<T>(gpu, hidden));
            mlp.run(&weights, &mut h, delta.as_ref(), &mut act, &mut y).unwrap();
            let (h, act, y) = (h.to_vec().unwrap(), act.to_vec().unwrap(), y.to_vec().unwrap());
            assert!(!mlp.timed_out().unwrap(), "{what}: the barrier timed out");
            assert_eq!(bits(&h), bits(&want_h.to_vec().unwrap()), "{what}, round {round}: h");
            outputs.push([bits(&h), bits(&act), bits(&y)]);
            if round > 0 {
                continue;
            }
            let reference = |w: &[u8], x: &[f32], rows: usize, k: usize| {
                quant_matvec_reference(GgmlFormat::Q8_0, w, x, rows, k, 1).unwrap()
            };
            let act = floats(&act);
            let g = reference(&host_w[0], &xn, ffn, hidden);
            let u = reference(&host_w[1], &xn, ffn, hidden);
            check_act::<T>(&act, &g, &u, &what);
            let d = reference(&host_w[2], &act, hidden, ffn);
            for (i, got) in floats(&y).into_iter().enumerate() {
                let err = (f64::from(got) - d.y[i]).abs();
                let allowed = d.allowed_error(i, T::NAME);
                assert!(err <= allowed, "{what}: y[{i}] = {got}, want {}: error {err} > {allowed}", d.y[i]);
            }
        }
        assert_eq!(outputs[0], outputs[1], "{what}: a second launch gave other bits");
    }
}

#[test]
fn persistent_mlp_matches_the_chain_f16() {
    let gpu = gpu_test!();
    let cases = [
        Case { hidden: 1280, ffn: 1024, residual: true },
        Case { hidden: 1024, ffn: 2816, residual: false },
        Case { hidden: 12_544, ffn: 1024, residual: true },
    ];
    matches_the_chain::<f16>(&gpu, 0x6d6c71, &cases);
}

#[test]
fn persistent_mlp_matches_the_chain_bf16() {
    let gpu = gpu_test!();
    let cases = [
        Case { hidden: 4096, ffn: 14_336, residual: true },
        Case { hidden: 1536, ffn: 3328, residual: false },
    ];
    matches_the_chain::<bf16>(&gpu, 0x6d6c72, &cases);
}

/// Recorded in a graph and replayed three times: each replay's counters are the last one's
/// put back, and every replay gives the bits of a plain launch.
#[test]
fn persistent_mlp_replays_in_a_graph() {
    let gpu = gpu_test!();
    let stream = gpu.stream();
    if !PersistentMlp::runs_on(stream) {
        return;
    }
    let (hidden, ffn) = (1024, 2560);
    let mut rng = Rng::new(0x6d6c73);
    let norm = stream.upload(&exact_row::<bf16>(&mut rng, hidden)).unwrap();
    let host_w = [(ffn, hidden), (ffn, hidden), (hidden, ffn)].map(|(r, k)| q8_0_weights(&mut rng, r, k));
    let [gate, up, down] = host_w.each_ref().map(|w| stream.upload(w).unwrap());
    let weights = MlpWeights { norm: &norm, gate: &gate, up: &up, down: &down };
    let mut h = stream.upload(&exact_row::<bf16>(&mut rng, hidden)).unwrap();
    let mut mlp = PersistentMlp::new(stream, hidden, ffn, 1e-5).unwrap();
    let (mut act, mut y) = (poisoned::<bf16>(&gpu, ffn), poisoned::<bf16>(&gpu, hidden));
    mlp.run(&weights, &mut h, None, &mut act, &mut y).unwrap();
    let want = [bits(&act.to_vec().unwrap()), bits(&y.to_vec().unwrap())];
    let (mut act, mut y): (DeviceBuffer<bf16>, DeviceBuffer<bf16>) =
        (poisoned(&gpu, ffn), poisoned(&gpu, hidden));
    let graph = stream.capture(|_| mlp.run(&weights, &mut h, None, &mut act, &mut y)).unwrap();
    for _ in 0..3 {
        graph.launch().unwrap();
    }
    drop(graph);
    assert_eq!([bits(&act.to_vec().unwrap()), bits(&y.to_vec().unwrap())], want);
    assert!(!mlp.timed_out().unwrap());
}

#[test]
fn persistent_mlp_refuses_bad_shapes() {
    let gpu = gpu_test!();
    let stream = gpu.stream();
    let message = |r: Result<PersistentMlp, KernelError>| r.unwrap_err().to_string();
    if !PersistentMlp::runs_on(stream) {
        assert!(
            message(PersistentMlp::new(stream, 1024, 1024, 1e-5)).contains("needs NVIDIA sm_80 or later")
        );
        return;
    }
    for (hidden, ffn) in [(0, 1024), (4096, 14_300), (768, 2048), (1024, 512)] {
        let err = message(PersistentMlp::new(stream, hidden, ffn, 1e-5));
        let want = format!("hidden {hidden} and ffn {ffn} must be multiples of 256 of at least 1024");
        assert!(err.contains(&want), "{hidden} x {ffn}: {err}");
    }
    assert!(
        message(PersistentMlp::new(stream, 1024, 1024, f32::NAN)).contains("eps NaN is not a finite value")
    );
    let err = message(PersistentMlp::new(stream, 65_536, 1024, 1e-5));
    assert!(err.contains("hidden 65536 needs 451840 bytes of shared memory a block"), "{err}");

    let (hidden, ffn) = (1024, 1280);
    let mut mlp = PersistentMlp::new(stream, hidden, ffn, 1e-5).unwrap();
    let w = stream.alloc_zeroed::<u8>(hidden * ffn / 32 * 34).unwrap();
    let short = stream.alloc_zeroed::<u8>(hidden * ffn / 32 * 34 - 16).unwrap();
    let norm = stream.alloc_zeroed::<f16>(hidden).unwrap();
    let mut h = stream.alloc_zeroed::<f16>(hidden).unwrap();
    let mut act = stream.alloc_zeroed::<f16>(ffn).unwrap();
    let mut y = stream.alloc_zeroed::<f16>(hidden).unwrap();
    let delta = stream.alloc_zeroed::<f16>(hidden + 1).unwrap();
    let bad = MlpWeights { norm: &norm, gate: &w, up: &short, down: &w };
    let err = mlp.run(&bad, &mut h, None, &mut act, &mut y).unwrap_err().to_string();
    assert!(err.contains("gate, up and down hold 1392640, 1392624 and 1392640 bytes"), "{err}");
    let good = MlpWeights { norm: &norm, gate: &w, up: &w, down: &w };
    let err = mlp.run(&good, &mut h, Some(&delta), &mut act, &mut y).unwrap_err().to_string();
    assert!(err.contains("delta holds 1025 elements; hidden is 1024"), "{err}");
    let mut short_act = stream.alloc_zeroed::<f16>(ffn - 1).unwrap();
    let err = mlp.run(&good, &mut h, None, &mut short_act, &mut y).unwrap_err().to_string();
    assert!(err.contains("act holds 1279 elements; ffn is 1280"), "{err}");
    // f32 activations: the products' loop takes 16-bit ones.
    let norm32 = stream.alloc_zeroed::<f32>(hidden).unwrap();
    let f32_weights = MlpWeights { norm: &norm32, gate: &w, up: &w, down: &w };
    let (mut h32, mut act32, mut y32) = (
        stream.alloc_zeroed::<f32>(hidden).unwrap(),
        stream.alloc_zeroed::<f32>(ffn).unwrap(),
        stream.alloc_zeroed::<f32>(hidden).unwrap(),
    );
    let err = mlp.run(&f32_weights, &mut h32, None, &mut act32, &mut y32).unwrap_err().to_string();
    assert!(err.contains("takes f16 or bf16 activations"), "{err}");
}
