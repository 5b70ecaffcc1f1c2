//! `quant_mlp` (one token's MLP in one launch, `kernels/quant_mlp_mma.hip`) against the launches
//! it replaces and the f64 reference: every ggml format, f16 and bf16, two shapes each (more
//! gate-and-up tiles than down tiles and the other way round), the down product's `k` in one
//! part, two, the most and the launcher's choice, outputs poisoned before every launch.
//!
//! - `act` must equal, bit for bit, what `quant_matvec_group` of gate and up then `swiglu` give
//!   (the same sums in the same order, the same rounding, the same formula);
//! - `y` must be within `QuantMatvecReference::allowed_error` of the f64 down product of that
//!   `act` (its parts change the order of the f32 sums only), and equal bit for bit from one
//!   launch to the next with the same parts (the counters are set back, the sums in order);
//! - recorded into a graph with its scratch, each replay gives the eager launch's bits.
//!
//! Where the device has no `mma.sync` matrix cores the launcher must refuse, and the tests check
//! that it does.

use std::num::NonZeroUsize;

use rocm_kernels::quant::{
    GgmlFormat, MLP_MAX_SPLITS, MlpScratch, QuantMlp, QuantProduct, quant_matvec_group,
    quant_matvec_reference, quant_mlp, quant_mlp_applies,
};
use rocm_kernels::swiglu::swiglu;
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, Error, bf16, f16};
use rocm_testkit::{GpuTest, Rng, gpu_test};

use crate::mxfp::{activations, floats, poisoned};
use crate::quant_matvec::f16_scale_fields;
use crate::shape_message;

/// `rows` rows of `k / E` blocks of random bytes (every code, scale and min), each f16 scale
/// set to +-2^e (1 + f) with e in [top - 2, top] for the format's `top`, one in 32 zero: weights
/// of about 2^-4 at most, so that at these sizes gate and up stay near 1 and y near 10, far
/// from f16's range however the random codes fall.
fn mlp_weights(rng: &mut Rng, format: GgmlFormat, rows: usize, k: usize) -> Vec<u8> {
    let top = match format {
        GgmlFormat::Q8_0 | GgmlFormat::Q4_0 => -11,
        GgmlFormat::Q4K | GgmlFormat::Q5K => -15,
        GgmlFormat::Q6K => -16,
    };
    let bb = format.block_bytes();
    let mut w: Vec<u8> = (0..rows * (k / format.block_elems()) * bb).map(|_| rng.next_u64() as u8).collect();
    for block in w.chunks_exact_mut(bb) {
        for &at in f16_scale_fields(format) {
            let magnitude = match rng.below(32) {
                0 => 0.0,
                _ => 2f32.powi(top - rng.below(3) as i32) * (1.0 + rng.next_f64() as f32),
            };
            let value = if rng.below(2) == 0 { magnitude } else { -magnitude };
            block[at..at + 2].copy_from_slice(&f16::from_f32(value).to_bits().to_le_bytes());
        }
    }
    w
}

/// One MLP on the device: its weights (and their bytes, for the reference) and x.
struct Mlp {
    format: GgmlFormat,
    hidden: usize,
    ffn: usize,
    down: Vec<u8>,
    dw: [DeviceBuffer<u8>; 3],
}

impl Mlp {
    fn new(gpu: &GpuTest, rng: &mut Rng, format: GgmlFormat, hidden: usize, ffn: usize) -> Mlp {
        let s = gpu.stream();
        let gate = mlp_weights(rng, format, ffn, hidden);
        let up = mlp_weights(rng, format, ffn, hidden);
        let down = mlp_weights(rng, format, hidden, ffn);
        let dw = [s.upload(&gate).unwrap(), s.upload(&up).unwrap(), s.upload(&down).unwrap()];
        Mlp { format, hidden, ffn, down, dw }
    }

    fn weights(&self) -> QuantMlp<'_> {
        let [gate, up, down] = &self.dw;
        QuantMlp { format: self.format, gate, up, down, hidden: self.hidden, ffn: self.ffn }
    }

    /// act through the launches the fused kernel replaces: gate and up in one group, then swiglu.
    fn act_unfused<T: Dtype>(&self, gpu: &GpuTest, x: &DeviceBuffer<T>) -> Vec<T> {
        let [gate, up, _] = &self.dw;
        let mut g = poisoned::<T>(gpu, self.ffn);
        let mut u = poisoned::<T>(gpu, self.ffn);
        let mut products = [
            QuantProduct { w: gate, y: &mut g, rows: self.ffn },
            QuantProduct { w: up, y: &mut u, rows: self.ffn },
        ];
        quant_matvec_group(self.format, &mut products, x, self.hidden, 1).unwrap();
        let mut act = poisoned::<T>(gpu, self.ffn);
        swiglu(&g, &u, &mut act).unwrap();
        act.to_vec().unwrap()
    }
}

fn bits<T: Dtype>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.to_f32().to_bits()).collect()
}

/// y (`[hidden]`) within the bound of the f64 down product of `act`.
fn assert_down<T: Dtype>(mlp: &Mlp, act: &[T], y: &[T], what: &str) {
    let reference =
        quant_matvec_reference(mlp.format, &mlp.down, &floats(act), mlp.hidden, mlp.ffn, 1).unwrap();
    let bad: Vec<_> = y
        .iter()
        .zip(&reference.y)
        .enumerate()
        .filter(|&(i, (g, e))| {
            // NaN (the poison of an unwritten output) fails: the weights' scales are finite.
            let within = (f64::from(g.to_f32()) - e).abs() <= reference.allowed_error(i, T::NAME);
            !within
        })
        .map(|(i, (g, e))| (i, g.to_f32(), *e, reference.allowed_error(i, T::NAME)))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} outputs out of bounds; first (row, got, expected, allowed) {:?}",
        bad.len(),
        y.len(),
        bad.first()
    );
}

/// The fused launch at every split of the list against the unfused act and the reference.
fn check<T: Dtype>(gpu: &GpuTest, rng: &mut Rng, format: GgmlFormat, hidden: usize, ffn: usize) {
    let s = gpu.stream();
    let mlp = Mlp::new(gpu, rng, format, hidden, ffn);
    let x = s.upload(&activations::<T>(rng, hidden)).unwrap();
    let mut scratch = MlpScratch::new(s, hidden).unwrap();
    let mut act = poisoned::<T>(gpu, ffn);
    let mut y = poisoned::<T>(gpu, hidden);
    let what = format!("{} {} hidden {hidden} ffn {ffn}", format.name(), T::NAME);
    if !quant_mlp_applies::<T>(s, format, hidden, ffn) {
        let message =
            shape_message(quant_mlp(&mlp.weights(), &x, &mut act, &mut y, &mut scratch, None), "quant_mlp");
        assert!(message.contains("needs NVIDIA mma.sync matrix cores"), "{what}: {message}");
        return;
    }
    let want_act = bits(&mlp.act_unfused(gpu, &x));
    let chunks = ffn / format.matrix_core_chunk();
    let most = MLP_MAX_SPLITS.min(chunks);
    let mut first_y: Option<Vec<u32>> = None;
    for splits in
        [None, None, Some(1), Some(2), Some(most)].into_iter().filter(|s| s.is_none_or(|s| s <= most))
    {
        act.poison().unwrap();
        y.poison().unwrap();
        quant_mlp(&mlp.weights(), &x, &mut act, &mut y, &mut scratch, splits.and_then(NonZeroUsize::new))
            .unwrap();
        let got_act = act.to_vec().unwrap();
        let got_y = y.to_vec().unwrap();
        let what = format!("{what}, down in {splits:?} parts");
        let differ = bits(&got_act).iter().zip(&want_act).filter(|(a, b)| a != b).count();
        assert_eq!(
            differ, 0,
            "{what}: act differs from gate, up and swiglu launched apart in {differ} of {ffn}"
        );
        assert_down(&mlp, &got_act, &got_y, &what);
        if splits.is_none() {
            // The launcher's choice, twice: the counters were set back, the parts added in order.
            match &first_y {
                None => first_y = Some(bits(&got_y)),
                Some(first) => assert_eq!(&bits(&got_y), first, "{what}: a second launch gave other bits"),
            }
        }
    }
}

fn every_format<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let mut rng = Rng::new(seed);
    for format in GgmlFormat::ALL {
        let step = format.matrix_core_k_step();
        // Down tiles fewer than gate-and-up tiles, and more.
        for (hidden, ffn) in [(2 * step, 3 * step), (3 * step, step)] {
            check::<T>(&gpu, &mut rng, format, hidden, ffn);
        }
    }
}

#[test]
fn fused_mlp_matches_its_launches_f16() {
    every_format::<f16>(0x3170);
}

#[test]
fn fused_mlp_matches_its_launches_bf16() {
    every_format::<bf16>(0x3171);
}

/// One step's state for a recorded MLP.
struct Step {
    x: DeviceBuffer<bf16>,
    act: DeviceBuffer<bf16>,
    y: DeviceBuffer<bf16>,
    scratch: MlpScratch,
}

/// Recorded into a graph with its scratch: each replay, with new x, gives the eager launch's bits.
#[test]
fn fused_mlp_replays_in_a_graph() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let mut rng = Rng::new(0x3172);
    let format = GgmlFormat::Q4K;
    let (hidden, ffn) = (2 * format.matrix_core_k_step(), 5 * format.matrix_core_k_step());
    let mlp = Mlp::new(&gpu, &mut rng, format, hidden, ffn);
    let new_step = || Step {
        x: s.alloc(hidden).unwrap(),
        act: poisoned::<bf16>(&gpu, ffn),
        y: poisoned::<bf16>(&gpu, hidden),
        scratch: MlpScratch::new(s, hidden).unwrap(),
    };
    let run = |step: &mut Step| {
        quant_mlp(&mlp.weights(), &step.x, &mut step.act, &mut step.y, &mut step.scratch, None)
    };
    let mut eager = new_step();
    if !quant_mlp_applies::<bf16>(s, format, hidden, ffn) {
        let message = shape_message(run(&mut eager), "quant_mlp");
        assert!(message.contains("needs NVIDIA mma.sync matrix cores"), "{message}");
        return;
    }
    let mut recorded = new_step();
    let graph = match s.capture_with(&mut recorded, |_, step| run(step)) {
        Ok(graph) => graph,
        Err(KernelError::Runtime(Error::GraphsUnsupported(why))) => {
            eprintln!("graphs are unsupported by this HIP library, which is allowed: {why}");
            return;
        }
        Err(e) => panic!("recording the fused MLP failed: {e}"),
    };
    for replay in 0..3 {
        let x = activations::<bf16>(&mut rng, hidden);
        eager.x.copy_from_host(&x).unwrap();
        eager.act.poison().unwrap();
        eager.y.poison().unwrap();
        run(&mut eager).unwrap();
        let want = (bits(&eager.act.to_vec().unwrap()), bits(&eager.y.to_vec().unwrap()));
        assert_down(&mlp, &eager.act.to_vec().unwrap(), &eager.y.to_vec().unwrap(), "eager");
        let state = graph.state();
        state.x.write_from_host(&x).unwrap();
        state.act.write_from_host(&vec![bf16::from_f32(f32::NAN); ffn]).unwrap();
        state.y.write_from_host(&vec![bf16::from_f32(f32::NAN); hidden]).unwrap();
        graph.launch().unwrap();
        let got = (bits(&state.act.to_vec().unwrap()), bits(&state.y.to_vec().unwrap()));
        assert_eq!(got, want, "replay {replay}: not the eager launch's bits");
    }
}

/// Shapes, parts and scratches that do not fit are refused with what is wrong.
#[test]
fn fused_mlp_refuses_what_does_not_fit() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let mut rng = Rng::new(0x3173);
    let format = GgmlFormat::Q8_0;
    let step = format.matrix_core_k_step();
    let (hidden, ffn) = (step, 2 * step);
    let mlp = Mlp::new(&gpu, &mut rng, format, hidden, ffn);
    let x = s.upload(&activations::<bf16>(&mut rng, hidden)).unwrap();
    let mut act = poisoned::<bf16>(&gpu, ffn);
    let mut y = poisoned::<bf16>(&gpu, hidden);
    let mut scratch = MlpScratch::new(s, hidden).unwrap();
    let mut run = |w: &QuantMlp<'_>,
                   act: &mut DeviceBuffer<bf16>,
                   scratch: &mut MlpScratch,
                   splits: Option<usize>| {
        shape_message(quant_mlp(w, &x, act, &mut y, scratch, splits.and_then(NonZeroUsize::new)), "quant_mlp")
    };
    let mut short_act = poisoned::<bf16>(&gpu, ffn - 1);
    let m = run(&mlp.weights(), &mut short_act, &mut scratch, None);
    assert!(m.starts_with("gate: ") && m.contains(&format!("{}", ffn - 1)), "{m}");
    let short = s.upload(&vec![0u8; format.block_bytes()]).unwrap();
    let wrong_down = QuantMlp { down: &short, ..mlp.weights() };
    let m = run(&wrong_down, &mut act, &mut scratch, None);
    assert!(m.starts_with("down: w holds"), "{m}");
    if quant_mlp_applies::<bf16>(s, format, hidden, ffn) {
        let m = run(&mlp.weights(), &mut act, &mut scratch, Some(MLP_MAX_SPLITS + 1));
        assert!(m.contains("parts of the down product"), "{m}");
        let mut small = MlpScratch::new(s, hidden - 16).unwrap();
        let m = run(&mlp.weights(), &mut act, &mut small, None);
        assert!(m.contains("scratch was made for"), "{m}");
    }
    // A width the matrix-core chunks do not divide has no fused MLP.
    assert!(!quant_mlp_applies::<bf16>(s, format, hidden + 32, ffn));
}
