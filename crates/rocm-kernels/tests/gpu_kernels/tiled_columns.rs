//! What the GPU tests of the tiled layouts whose blocks are B's columns share (`q4k_tiled.rs`,
//! `q8_0_tiled.rs`: `kernels/include/rocmforge_tiled.h`'s `rf_t4_block_columns`): a layout's
//! packer and launchers behind [`Columns`], and the checks of the launch forms the two kernels
//! have alike. A stacked weight into several outputs against each part alone; gate and up with
//! their SwiGLU against the two products and the `swiglu` kernel; the RMSNorm folded in against
//! the `rmsnorm` kernel then the product; the residual add against the product added on the host;
//! the product behind the kernel that writes its x (a dependent launch); k = 0 and the launcher's
//! refusals. Each layout's own file has its reference checks and what only it has.

use rocm_kernels::quant::{GgmlFormat, TiledNorm, TiledOutput};
use rocm_kernels::rmsnorm::RmsNorm;
use rocm_kernels::swiglu::swiglu;
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, bf16};
use rocm_testkit::{GpuTest, Rng};

use crate::bits;
use crate::mxfp::{activations, poisoned};
use crate::quant_matvec::random_weights;

/// A tiled layout under test: its packer and its one-vector launchers.
pub(crate) trait Columns {
    type Host;
    type Device;
    /// The GGUF format its weights come from.
    const FORMAT: GgmlFormat;
    /// The launcher's name in its errors.
    const KERNEL: &'static str;
    /// `n` GGUF rows of `k` tiled.
    fn tile(w: &[u8], n: usize, k: usize) -> Self::Host;
    fn stack(parts: &[&Self::Host]) -> Self::Host;
    fn upload(w: &Self::Host, gpu: &GpuTest) -> Self::Device;
    fn matvec<T: Dtype>(
        w: &Self::Device,
        x: &DeviceBuffer<T>,
        y: &mut DeviceBuffer<T>,
    ) -> Result<(), KernelError>;
    fn fused<T: Dtype>(
        w: &Self::Device,
        x: &DeviceBuffer<T>,
        norm: Option<TiledNorm<'_, T>>,
        out: TiledOutput<'_, '_, T>,
    ) -> Result<(), KernelError>;
    /// Asserts `got`, one vector's rows of the GGUF weight `w` (`n` rows of `k`) times `x`,
    /// within the bound of the kernel that ran on `gpu`.
    fn assert_within<T: Dtype>(gpu: &GpuTest, got: &[T], w: &[u8], x: &[T], n: usize, k: usize, what: &str);
}

/// `parts` stacked (random raw blocks each), with each part's GGUF rows.
pub(crate) fn random_stack<L: Columns>(rng: &mut Rng, parts: &[usize], k: usize) -> (Vec<Vec<u8>>, L::Host) {
    let ws: Vec<Vec<u8>> = parts.iter().map(|&n| random_weights(rng, L::FORMAT, n, k)).collect();
    let tiled: Vec<L::Host> = ws.iter().zip(parts).map(|(w, &n)| L::tile(w, n, k)).collect();
    let stacked = L::stack(&tiled.iter().collect::<Vec<_>>());
    (ws, stacked)
}

/// A stacked weight into one output a part gives each part the bits of that part alone, and
/// each is within the kernel's bound: Llama-3-8B's Q, K and V, and small parts with a partial
/// last tile.
pub(crate) fn split_matches_each_part_alone<L: Columns, T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(parts, k) in &[(&[4096usize, 1024, 1024][..], 4096usize), (&[32, 16, 23][..], 768)] {
        let (ws, stacked) = random_stack::<L>(&mut rng, parts, k);
        let device = L::upload(&stacked, gpu);
        let x = activations::<T>(&mut rng, k);
        let dx = gpu.stream().upload(&x).unwrap();
        let mut ys: Vec<DeviceBuffer<T>> = parts.iter().map(|&n| poisoned::<T>(gpu, n)).collect();
        let mut refs: Vec<&mut DeviceBuffer<T>> = ys.iter_mut().collect();
        L::fused(&device, &dx, None, TiledOutput::Split(&mut refs)).unwrap();
        for (i, (y, (w, &n))) in ys.iter().zip(ws.iter().zip(parts)).enumerate() {
            let alone = L::upload(&L::tile(w, n, k), gpu);
            let mut a = poisoned::<T>(gpu, n);
            L::matvec(&alone, &dx, &mut a).unwrap();
            let what = format!("{} parts {parts:?} k {k} part {i}", T::NAME);
            let got = y.to_vec().unwrap();
            assert_eq!(bits(&got), bits(&a.to_vec().unwrap()), "{what}");
            L::assert_within(gpu, &got, w, &x, n, k, &what);
        }
    }
}

/// Gate and up stacked with their SwiGLU in one launch give the bits of the two products
/// followed by the `swiglu` kernel; through the folded RMSNorm too, against the `rmsnorm` kernel,
/// the two products and `swiglu`. Llama-3-8B's FFN, and gates of 3 tiles at k = 768.
pub(crate) fn swiglu_and_norm_match_their_kernels<L: Columns, T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(ffn, k) in &[(14_336usize, 4096usize), (48, 768)] {
        let (_, stacked) = random_stack::<L>(&mut rng, &[ffn, ffn], k);
        let device = L::upload(&stacked, gpu);
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
            L::fused(&device, &xn, None, TiledOutput::Split(&mut [&mut gate, &mut up])).unwrap();
            let mut want = poisoned::<T>(gpu, ffn);
            swiglu(&gate, &up, &mut want).unwrap();
            let mut act = poisoned::<T>(gpu, ffn);
            L::fused(&device, x, norm, TiledOutput::Swiglu(&mut act)).unwrap();
            assert_eq!(bits(&act.to_vec().unwrap()), bits(&want.to_vec().unwrap()), "{what}, swiglu");
            if norm.is_some() {
                let (mut g2, mut u2) = (poisoned::<T>(gpu, ffn), poisoned::<T>(gpu, ffn));
                L::fused(&device, &h, norm, TiledOutput::Split(&mut [&mut g2, &mut u2])).unwrap();
                assert_eq!(bits(&g2.to_vec().unwrap()), bits(&gate.to_vec().unwrap()), "{what}, gate");
                assert_eq!(bits(&u2.to_vec().unwrap()), bits(&up.to_vec().unwrap()), "{what}, up");
            }
        }
    }
}

/// A residual launch leaves round(h + round(y)) in the stream, y the plain launch's output, bit
/// for bit: Llama-3-8B's O and down shapes and a small one with a partial tile.
pub(crate) fn add_matches_the_product_added_to_the_stream<L: Columns, T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for &(n, k) in &[(4096usize, 4096usize), (4096, 14_336), (37, 768)] {
        let w = random_weights(&mut rng, L::FORMAT, n, k);
        let device = L::upload(&L::tile(&w, n, k), gpu);
        let x = gpu.stream().upload(&activations::<T>(&mut rng, k)).unwrap();
        let stream: Vec<T> = activations::<T>(&mut rng, n);
        let mut y = poisoned::<T>(gpu, n);
        L::matvec(&device, &x, &mut y).unwrap();
        let want: Vec<T> = stream
            .iter()
            .zip(y.to_vec().unwrap())
            .map(|(&h, y)| T::from_f32(y.to_f32() + h.to_f32()))
            .collect();
        let mut h = gpu.stream().upload(&stream).unwrap();
        L::fused(&device, &x, None, TiledOutput::Add(&mut h)).unwrap();
        assert_eq!(bits(&h.to_vec().unwrap()), bits(&want), "{} n {n} k {k}", T::NAME);
    }
}

/// The product behind the kernel that writes its x, as in a decode step: an RMSNorm (a
/// dependent launch), the product of Q, K and V stacked (dependent: its first weight copies go
/// out before it waits), then another norm that overwrites x. Each round's outputs must be the
/// product of that round's normalised x made alone.
pub(crate) fn product_follows_the_writer_of_x<L: Columns>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let (parts, k) = ([4096usize, 1024, 1024], 4096);
    let w = L::upload(&random_stack::<L>(&mut rng, &parts, k).1, gpu);
    let norm = RmsNorm::new(1, k, 1e-5);
    let weight = gpu.stream().upload(&activations::<bf16>(&mut rng, k)).unwrap();
    let mut x = poisoned::<bf16>(gpu, k);
    let mut ys: Vec<_> = parts.iter().map(|&n| poisoned::<bf16>(gpu, n)).collect();
    for round in 0..4 {
        let h = gpu.stream().upload(&activations::<bf16>(&mut rng, k)).unwrap();
        let next = gpu.stream().upload(&activations::<bf16>(&mut rng, k)).unwrap();
        for y in ys.iter_mut() {
            y.poison().unwrap();
        }
        norm.run(&h, &weight, &mut x).unwrap();
        L::fused(&w, &x, None, TiledOutput::Split(&mut ys.iter_mut().collect::<Vec<_>>())).unwrap();
        norm.run(&next, &weight, &mut x).unwrap();
        let mut xa = poisoned::<bf16>(gpu, k);
        norm.run(&h, &weight, &mut xa).unwrap();
        let xa = gpu.stream().upload(&xa.to_vec().unwrap()).unwrap();
        let mut alone: Vec<_> = parts.iter().map(|&n| poisoned::<bf16>(gpu, n)).collect();
        L::fused(&w, &xa, None, TiledOutput::Split(&mut alone.iter_mut().collect::<Vec<_>>())).unwrap();
        for (i, (y, a)) in ys.iter().zip(&alone).enumerate() {
            assert_eq!(bits(&y.to_vec().unwrap()), bits(&a.to_vec().unwrap()), "round {round} output {i}");
        }
    }
}

/// k = 0 gives zeros (and a gate-and-up launch silu(0) * 0); x, outputs and norms of the wrong
/// size are refused, saying so; a weight of zero blocks (`zero_rows`: 48 GGUF rows of 256, every
/// byte 0) gives zeros. Returns the zero weight, and x of 256 ones, for a layout's own refusals.
pub(crate) fn edges_and_refusals<L: Columns>(
    gpu: &GpuTest,
    zero_rows: &[u8],
) -> (L::Device, DeviceBuffer<bf16>) {
    let message = |r: Result<(), KernelError>| crate::shape_message(r, L::KERNEL);
    let empty = L::upload(&L::tile(&[], 64, 0), gpu);
    let x0 = gpu.stream().alloc::<bf16>(0).unwrap();
    let mut y = poisoned::<bf16>(gpu, 64);
    L::matvec(&empty, &x0, &mut y).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![bf16::from_f32(0.0); 64], "k = 0");
    let mut act = poisoned::<bf16>(gpu, 32);
    L::fused(&empty, &x0, None, TiledOutput::Swiglu(&mut act)).unwrap();
    assert_eq!(act.to_vec().unwrap(), vec![bf16::from_f32(0.0); 32], "k = 0, swiglu");

    let w = L::upload(&L::tile(zero_rows, 48, 256), gpu);
    let x = gpu.stream().upload(&[bf16::from_f32(1.0); 256]).unwrap();
    let short_x = gpu.stream().upload(&[bf16::from_f32(1.0); 255]).unwrap();
    let mut y48 = poisoned::<bf16>(gpu, 48);
    assert!(
        message(L::matvec(&w, &short_x, &mut y48))
            .contains("x has 255 elements, 1 vectors of the weight's k = 256 need 256")
    );
    let mut y47 = poisoned::<bf16>(gpu, 47);
    assert!(message(L::matvec(&w, &x, &mut y47)).contains("the outputs hold [47] elements"));
    let mut act24 = poisoned::<bf16>(gpu, 24);
    assert!(
        message(L::fused(&w, &x, None, TiledOutput::Swiglu(&mut act24)))
            .contains("gate and up of 48 rows: two halves of whole tiles (16 rows) needed")
    );
    let short_w = gpu.stream().upload(&[bf16::from_f32(1.0); 255]).unwrap();
    let norm = Some(TiledNorm { weight: &short_w, eps: 1e-5 });
    assert!(
        message(L::fused(&w, &x, norm, TiledOutput::Split(&mut [&mut y48])))
            .contains("the norm's weight has 255 elements, the weight's k = 256")
    );
    L::matvec(&w, &x, &mut y48).unwrap();
    assert_eq!(y48.to_vec().unwrap(), vec![bf16::from_f32(0.0); 48], "all-zero blocks");
    (w, x)
}
