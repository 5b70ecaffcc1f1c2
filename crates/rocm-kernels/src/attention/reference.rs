//! The f64 CPU reference of attention, from the stored (rounded) inputs.

use super::Attention;
use crate::dtype::Dtype;

/// Output and log-sum-exp of [`attention_reference`], in f64.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionReference {
    /// `[batch, seq_q, q_heads, head_dim]`, contiguous, whatever `attn.o`'s strides are.
    pub out: Vec<f64>,
    /// `[batch, q_heads, seq_q]`; `-inf` for a query that sees no key.
    pub lse: Vec<f64>,
}

/// Attention in f64 for the problem `attn`, reading `q`, `k` and `v` at their strides. Rows that
/// see no key are zeros. Panics if a buffer is shorter than `attn` says (checked first by
/// [`Attention::check`] in the launchers; this is test code).
pub fn attention_reference<T: Dtype>(attn: &Attention, q: &[T], k: &[T], v: &[T]) -> AttentionReference {
    let (d, group) = (attn.head_dim, attn.group());
    let row = |x: &[T], s: super::Strides, b: usize, pos: usize, h: usize| -> Vec<f64> {
        let start = b * s.batch + pos * s.seq + h * s.head;
        x[start..start + d].iter().map(|e| e.to_f32() as f64).collect()
    };
    let mut out = vec![0.0; attn.batch * attn.seq_q * attn.q_heads * d];
    let mut lse = vec![f64::NEG_INFINITY; attn.lse_len()];
    let scale = attn.scale as f64;
    let mut scores = Vec::with_capacity(attn.seq_k);
    for b in 0..attn.batch {
        for h in 0..attn.q_heads {
            let kv = h / group;
            let keys: Vec<Vec<f64>> = (0..attn.seq_k).map(|j| row(k, attn.k, b, j, kv)).collect();
            let values: Vec<Vec<f64>> = (0..attn.seq_k).map(|j| row(v, attn.v, b, j, kv)).collect();
            for i in 0..attn.seq_q {
                let qi = row(q, attn.q, b, i, h);
                let visible = match attn.causal_offset {
                    None => attn.seq_k,
                    Some(offset) => (i as i128 + offset as i128 + 1).clamp(0, attn.seq_k as i128) as usize,
                };
                if visible == 0 {
                    continue;
                }
                scores.clear();
                scores.extend(
                    keys[..visible]
                        .iter()
                        .map(|kj| scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>()),
                );
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                lse[(b * attn.q_heads + h) * attn.seq_q + i] = max + sum.ln();
                let o = &mut out[((b * attn.seq_q + i) * attn.q_heads + h) * d..][..d];
                for (s, vj) in scores.iter().zip(&values) {
                    let p = (s - max).exp() / sum;
                    for (o, v) in o.iter_mut().zip(vj) {
                        *o += p * v;
                    }
                }
            }
        }
    }
    AttentionReference { out, lse }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_single_head() {
        // One query [1, 0], keys [1, 0] and [0, 1], values [1, 2] and [3, 4], scale 1:
        // scores [1, 0], p = [e / (e + 1), 1 / (e + 1)], lse = ln(e + 1).
        let a = Attention::new(1, 1, 2, 1, 1, 2).with_scale(1.0);
        let r = attention_reference(&a, &[1.0f32, 0.0], &[1.0, 0.0, 0.0, 1.0], &[1.0, 2.0, 3.0, 4.0]);
        let e = std::f64::consts::E;
        let (p0, p1) = (e / (e + 1.0), 1.0 / (e + 1.0));
        assert!((r.out[0] - (p0 + 3.0 * p1)).abs() < 1e-12);
        assert!((r.out[1] - (2.0 * p0 + 4.0 * p1)).abs() < 1e-12);
        assert!((r.lse[0] - (e + 1.0).ln()).abs() < 1e-12);
    }

    #[test]
    fn causal_rows_and_fully_masked_rows() {
        // Two queries, two keys, offset -1: query 0 sees nothing, query 1 sees key 0 only.
        let a = Attention::new(1, 2, 2, 1, 1, 1).with_scale(1.0).causal_with_offset(-1);
        let r = attention_reference(&a, &[1.0f32, 1.0], &[1.0, 5.0], &[7.0, 9.0]);
        assert_eq!(r.out, [0.0, 7.0]);
        assert_eq!(r.lse[0], f64::NEG_INFINITY);
        assert!((r.lse[1] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn gqa_shares_kv_heads_and_layouts_agree() {
        // Four query heads over two KV heads: heads 0, 1 use KV head 0; 2, 3 use KV head 1.
        let a = Attention::new(1, 1, 1, 4, 2, 1).with_scale(1.0);
        let r = attention_reference(&a, &[1.0f32, 2.0, 3.0, 4.0], &[0.5, 0.5], &[10.0, 20.0]);
        assert_eq!(r.out, [10.0, 10.0, 20.0, 20.0]);
        // The same problem in [b, h, s, d] gives the same numbers in the reference's order.
        let a = Attention::new(1, 2, 3, 2, 1, 2).with_scale(0.5);
        let q = [1.0f32, 2.0, -1.0, 0.5, 0.0, 1.0, 2.0, -2.0]; // bshd: [s][h][d]
        let k = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        let v = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bshd = attention_reference(&a, &q, &k, &v);
        let mut q_bhsd = [0.0f32; 8];
        for s in 0..2 {
            for h in 0..2 {
                for d in 0..2 {
                    q_bhsd[(h * 2 + s) * 2 + d] = q[(s * 2 + h) * 2 + d];
                }
            }
        }
        let b = a.with_layout(super::super::Layout::Bhsd);
        assert_eq!(attention_reference(&b, &q_bhsd, &k, &v), bshd);
    }
}
