//! The unfused attention kernels on their own: `attention_scores` (scaled Q K^T, every key,
//! GQA head sharing, both layouts) and `attention_weighted` (P V) against f64 CPU products, at
//! sizes that are not multiples of the 64 x 64 tiles, with poisoned outputs. The whole pipeline
//! is checked against the reference in `flash_attention.rs`.

use rocm_kernels::Dtype;
use rocm_kernels::attention::{Attention, Layout, attention_scores, attention_weighted};
use rocm_runtime::{bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, gpu_test};

/// (batch, seq_q, seq_k, q_heads, kv_heads, head_dim, layout)
const SHAPES: &[(usize, usize, usize, usize, usize, usize, Layout)] = &[
    (1, 1, 1, 1, 1, 8, Layout::Bshd),
    (3, 17, 65, 6, 2, 72, Layout::Bshd),
    (2, 130, 67, 8, 1, 13, Layout::Bhsd),
    (1, 255, 1000, 3, 3, 128, Layout::Bshd),
];

fn row<T: Dtype>(x: &[T], start: usize, d: usize) -> impl Iterator<Item = f64> + '_ {
    x[start..start + d].iter().map(|v| v.to_f32() as f64)
}

fn scores_and_weighted<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let s = gpu.stream();
    for &(b, sq, sk, hq, hkv, d, layout) in SHAPES {
        let attn = Attention::new(b, sq, sk, hq, hkv, d).with_layout(layout).with_scale(0.3);
        let q: Vec<T> = rng.normal_f32_vec(b * sq * hq * d, 1.0).into_iter().map(T::from_f32).collect();
        let k: Vec<T> = rng.normal_f32_vec(b * sk * hkv * d, 1.0).into_iter().map(T::from_f32).collect();
        let v: Vec<T> = rng.normal_f32_vec(b * sk * hkv * d, 1.0).into_iter().map(T::from_f32).collect();
        let p = rng.f32_vec(b * hq * sq * sk, 0.0, 1.0);
        let group = hq / hkv;

        let mut scores_want = Vec::with_capacity(p.len());
        let mut out_want = vec![0.0f64; b * sq * hq * d];
        for bi in 0..b {
            for h in 0..hq {
                for i in 0..sq {
                    let qs = bi * attn.q.batch + i * attn.q.seq + h * attn.q.head;
                    for j in 0..sk {
                        let ks = bi * attn.k.batch + j * attn.k.seq + (h / group) * attn.k.head;
                        let dot: f64 = row(&q, qs, d).zip(row(&k, ks, d)).map(|(a, c)| a * c).sum();
                        scores_want.push(0.3f32 as f64 * dot);
                        let pij = p[((bi * hq + h) * sq + i) * sk + j] as f64;
                        let vs = bi * attn.v.batch + j * attn.v.seq + (h / group) * attn.v.head;
                        let os = bi * attn.o.batch + i * attn.o.seq + h * attn.o.head;
                        for (o, vv) in out_want[os..os + d].iter_mut().zip(row(&v, vs, d)) {
                            *o += pij * vv;
                        }
                    }
                }
            }
        }

        let (dq, dk, dv, dp) =
            (s.upload(&q).unwrap(), s.upload(&k).unwrap(), s.upload(&v).unwrap(), s.upload(&p).unwrap());
        let mut scores = s.alloc::<f32>(p.len()).unwrap();
        scores.poison().unwrap();
        attention_scores(&attn, &dq, &dk, &mut scores).unwrap();
        eprintln!("scores {} {:?}", T::NAME, (b, sq, sk, hq, hkv, d, layout));
        // f32 products of stored inputs: 2^-24 relative per term, over head_dim terms of |q||k|.
        assert_close(&scores.to_vec().unwrap(), &scores_want, Tolerance::new(1e-5 * d as f64, 1e-5));

        let mut o = s.alloc::<T>(out_want.len()).unwrap();
        o.poison().unwrap();
        attention_weighted(&attn, &dp, &dv, &mut o).unwrap();
        // Sums of seq_k terms of size ~1 in f32, then one rounding to T.
        let eps = match T::NAME {
            "f32" => 0.0,
            "f16" => 2f64.powi(-11),
            _ => 2f64.powi(-8),
        };
        let tol = Tolerance::new(1e-6 * sk as f64, eps);
        let got: Vec<f64> = o.to_vec().unwrap().iter().map(|x| x.to_f32() as f64).collect();
        assert_close(&got, &out_want, tol);
    }
}

#[test]
fn scores_and_weighted_match_f32() {
    let gpu = gpu_test!();
    scores_and_weighted::<f32>(&gpu, 0xa7e1);
}

#[test]
fn scores_and_weighted_match_f16() {
    let gpu = gpu_test!();
    scores_and_weighted::<f16>(&gpu, 0xa7e2);
}

#[test]
fn scores_and_weighted_match_bf16() {
    let gpu = gpu_test!();
    scores_and_weighted::<bf16>(&gpu, 0xa7e3);
}
