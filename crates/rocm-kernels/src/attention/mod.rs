//! Attention: `O = softmax(scale * Q K^T [+ causal mask]) V` per batch and query head.
//!
//! Two ways to compute it, with one description of the problem, [`Attention`]:
//! - [`flash_attention`] (`kernels/flash_*.hip`): fused and tiled with an online
//!   softmax; the scores never reach memory. A matrix-core kernel where the device has one
//!   ([`rocm_runtime::MatrixCores`]) for f16/bf16, a portable kernel everywhere else, and a
//!   split over the keys (with a combine pass) when the grid would not fill the device, as in
//!   decoding. Optionally writes the log-sum-exp of each row.
//! - [`attention_unfused`] (`kernels/attention.hip` + `kernels/softmax.hip`): the scores
//!   [`attention_scores`], the softmax, then [`attention_weighted`], each a kernel of its
//!   own. Slow and memory-hungry; for debugging and for checking the fused kernel.
//!
//! - [`paged_attention`]: the same kernels reading K and V through the block tables of a paged
//!   KV cache (decode and chunked prefill over rocm-model's cache).
//!
//! [`attention_reference`] is the f64 CPU reference of all of them.
//!
//! ## Shapes and layouts
//! `Q` and `O` hold `batch x seq_q x q_heads` rows of `head_dim` elements, `K` and `V`
//! `batch x seq_k x kv_heads` rows. Where those rows are is given by [`Strides`] (in elements;
//! `head_dim` is always contiguous): [`Layout::Bshd`] (`[batch, seq, heads, head_dim]`, the
//! default), [`Layout::Bhsd`] (`[batch, heads, seq, head_dim]`) or any strides, per tensor.
//!
//! - **MQA/GQA**: `kv_heads` divides `q_heads`; query head `h` uses KV head
//!   `h / (q_heads / kv_heads)`. K and V are never replicated.
//! - **Causal**: query `i` sees keys `j <= i + offset`. The default offset `seq_k - seq_q` puts
//!   the queries at the end of the keys (a KV cache holding earlier tokens: decode and chunked
//!   prefill). A query that sees no key (a negative offset) gets zeros and LSE `-inf`.
//! - **LSE**: `lse[b, h, i] = ln sum_j exp(scale * q_i . k_j)` over the keys query `i` sees,
//!   contiguous `[batch, q_heads, seq_q]` f32.
//! - `head_dim` from 1 to 256 (the matrix-core kernel takes multiples of 8; others run portably).
//! - Storage f32, f16 or bf16; products and the softmax in f32, one rounding of the output.

pub(crate) mod flash;
mod paged;
mod reference;
pub(crate) mod unfused;

pub use flash::{AttentionScratch, FlashKernel, FlashOptions, flash_attention, flash_attention_with};
pub use paged::{PagedAttention, PagedKv, paged_attention, paged_attention_in};
pub use reference::{AttentionReference, attention_reference};
pub use unfused::{attention_scores, attention_unfused, attention_weighted};

use crate::error::{KernelError, Result, ensure};

const KERNEL: &str = "attention";

/// Largest head dimension the kernels take.
pub const MAX_HEAD_DIM: usize = 256;

/// Largest |causal offset| (the kernels add it to a query index in i64).
const MAX_OFFSET: i64 = 1 << 62;

/// How a tensor's rows are laid out, for [`Strides::contiguous`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[batch, seq, heads, head_dim]`: the rows of one token's heads are adjacent.
    Bshd,
    /// `[batch, heads, seq, head_dim]`: each head's sequence is contiguous.
    Bhsd,
}

/// Element strides between consecutive batches, sequence positions and heads of a
/// `[.., head_dim]` tensor whose `head_dim` elements are contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strides {
    pub batch: usize,
    pub seq: usize,
    pub head: usize,
}

impl Strides {
    /// The strides of a contiguous tensor of `seq` positions and `heads` heads.
    pub fn contiguous(layout: Layout, seq: usize, heads: usize, head_dim: usize) -> Strides {
        match layout {
            Layout::Bshd => Strides { batch: seq * heads * head_dim, seq: heads * head_dim, head: head_dim },
            Layout::Bhsd => Strides { batch: heads * seq * head_dim, seq: head_dim, head: seq * head_dim },
        }
    }

    /// Elements a buffer must hold: the offset of the last element plus one, or `None` on
    /// overflow. Zero for an empty tensor.
    pub fn required_len(&self, batch: usize, seq: usize, heads: usize, head_dim: usize) -> Option<usize> {
        if batch == 0 || seq == 0 || heads == 0 || head_dim == 0 {
            return Some(0);
        }
        let last = (batch - 1)
            .checked_mul(self.batch)?
            .checked_add((seq - 1).checked_mul(self.seq)?)?
            .checked_add((heads - 1).checked_mul(self.head)?)?;
        last.checked_add(head_dim)
    }

    /// Whether distinct (batch, seq, head) rows never share an element: each stride, taken in
    /// increasing order over the dimensions longer than 1, must step past everything the
    /// smaller ones span. Needed for outputs (two rows written to one place would race).
    pub fn rows_disjoint(&self, batch: usize, seq: usize, heads: usize, head_dim: usize) -> bool {
        let mut dims = [(self.batch, batch), (self.seq, seq), (self.head, heads)];
        dims.sort_unstable();
        let mut span = head_dim as u128;
        for (stride, count) in dims {
            if count <= 1 {
                continue;
            }
            if (stride as u128) < span {
                return false;
            }
            span += stride as u128 * (count as u128 - 1);
        }
        true
    }

    pub(crate) fn all(&self) -> [usize; 3] {
        [self.batch, self.seq, self.head]
    }
}

/// One attention problem: sizes, scale, mask and the layout of each tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    pub batch: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies `Q K^T` before the softmax (positive); `1 / sqrt(head_dim)` by default.
    pub scale: f32,
    /// `Some(offset)`: causal, query `i` sees keys `j <= i + offset`. `None`: every key.
    pub causal_offset: Option<i64>,
    pub q: Strides,
    pub k: Strides,
    pub v: Strides,
    pub o: Strides,
}

impl Attention {
    /// Non-causal attention over contiguous `[batch, seq, heads, head_dim]` tensors with scale
    /// `1 / sqrt(head_dim)`.
    pub fn new(
        batch: usize,
        seq_q: usize,
        seq_k: usize,
        q_heads: usize,
        kv_heads: usize,
        head_dim: usize,
    ) -> Self {
        let a = Attention {
            batch,
            seq_q,
            seq_k,
            q_heads,
            kv_heads,
            head_dim,
            scale: 1.0 / (head_dim.max(1) as f32).sqrt(),
            causal_offset: None,
            q: Strides { batch: 0, seq: 0, head: 0 },
            k: Strides { batch: 0, seq: 0, head: 0 },
            v: Strides { batch: 0, seq: 0, head: 0 },
            o: Strides { batch: 0, seq: 0, head: 0 },
        };
        a.with_layout(Layout::Bshd)
    }

    /// All four tensors contiguous in `layout`.
    pub fn with_layout(self, layout: Layout) -> Self {
        let (d, sq, sk) = (self.head_dim, self.seq_q, self.seq_k);
        let q = Strides::contiguous(layout, sq, self.q_heads, d);
        let kv = Strides::contiguous(layout, sk, self.kv_heads, d);
        Attention { q, k: kv, v: kv, o: q, ..self }
    }

    pub fn with_q_strides(self, q: Strides) -> Self {
        Attention { q, ..self }
    }

    pub fn with_k_strides(self, k: Strides) -> Self {
        Attention { k, ..self }
    }

    pub fn with_v_strides(self, v: Strides) -> Self {
        Attention { v, ..self }
    }

    pub fn with_o_strides(self, o: Strides) -> Self {
        Attention { o, ..self }
    }

    pub fn with_scale(self, scale: f32) -> Self {
        Attention { scale, ..self }
    }

    /// Causal, with the queries at the end of the keys (offset `seq_k - seq_q`).
    pub fn causal(self) -> Self {
        let offset = self.seq_k as i64 - self.seq_q as i64;
        Attention { causal_offset: Some(offset), ..self }
    }

    /// Causal with an explicit offset: query `i` sees keys `j <= i + offset`.
    pub fn causal_with_offset(self, offset: i64) -> Self {
        Attention { causal_offset: Some(offset), ..self }
    }

    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.q_heads / self.kv_heads.max(1)
    }

    /// Rows of the LSE output: `batch * q_heads * seq_q`.
    pub fn lse_len(&self) -> usize {
        self.batch * self.q_heads * self.seq_q
    }

    /// Elements of the `[batch, q_heads, seq_q, seq_k]` scores of the unfused path.
    pub fn scores_len(&self) -> Option<usize> {
        self.batch.checked_mul(self.q_heads)?.checked_mul(self.seq_q)?.checked_mul(self.seq_k)
    }

    /// The conventional FLOP count of a forward pass, `4 * batch * q_heads * seq_q * seq_k *
    /// head_dim`, halved when causal (as benchmarks of attention report it).
    pub fn flops(&self) -> f64 {
        let full = 4.0
            * self.batch as f64
            * self.q_heads as f64
            * self.seq_q as f64
            * self.seq_k as f64
            * self.head_dim as f64;
        if self.causal_offset.is_some() { full / 2.0 } else { full }
    }

    /// Checks everything that does not need a device: sizes, head counts, the scale, the causal
    /// offset, strides and the lengths of the Q, K, V and O buffers.
    pub fn check(&self, q_len: usize, k_len: usize, v_len: usize, o_len: usize) -> Result<()> {
        self.check_problem()?;
        self.check_tensor(Tensor::Q, q_len)?;
        self.check_tensor(Tensor::K, k_len)?;
        self.check_tensor(Tensor::V, v_len)?;
        self.check_tensor(Tensor::O, o_len)
    }

    /// Sizes, head counts, scale and causal offset.
    fn check_problem(&self) -> Result<()> {
        ensure(self.batch > 0 && self.q_heads > 0 && self.kv_heads > 0, KERNEL, || {
            format!(
                "batch ({}), q_heads ({}) and kv_heads ({}) must be at least 1",
                self.batch, self.q_heads, self.kv_heads
            )
        })?;
        ensure((1..=MAX_HEAD_DIM).contains(&self.head_dim), KERNEL, || {
            format!("head_dim {} is out of range (1 to {MAX_HEAD_DIM})", self.head_dim)
        })?;
        ensure(self.q_heads.is_multiple_of(self.kv_heads), KERNEL, || {
            format!(
                "q_heads {} is not a multiple of kv_heads {}: every KV head must serve the same number of query heads",
                self.q_heads, self.kv_heads
            )
        })?;
        // Positive: the kernels take the row maximum of the unscaled scores.
        ensure(self.scale.is_finite() && self.scale > 0.0, KERNEL, || {
            format!("scale {} must be positive and finite", self.scale)
        })?;
        if let Some(offset) = self.causal_offset {
            ensure((-MAX_OFFSET..=MAX_OFFSET).contains(&offset), KERNEL, || {
                format!("causal offset {offset} is out of range (|offset| <= 2^62)")
            })?;
        }
        // The kernels index packed rows (group * seq_q) and keys in 32 bits, and a grid axis
        // walks the batch.
        let limit = (i32::MAX as usize) - 256;
        ensure(self.group().saturating_mul(self.seq_q) <= limit && self.seq_k <= limit, KERNEL, || {
            format!(
                "seq_q x (q_heads / kv_heads) = {} x {} and seq_k = {} must stay below 2^31 - 256",
                self.seq_q,
                self.group(),
                self.seq_k
            )
        })?;
        ensure(self.batch <= 65_535 && self.q_heads <= 65_535, KERNEL, || {
            format!("batch {} and q_heads {} must be at most 65535", self.batch, self.q_heads)
        })
    }

    /// The buffer of `tensor` holds every element its strides reach (and, for the output,
    /// distinct rows are distinct memory).
    fn check_tensor(&self, tensor: Tensor, len: usize) -> Result<()> {
        let (name, strides, seq, heads) = match tensor {
            Tensor::Q => ("q", self.q, self.seq_q, self.q_heads),
            Tensor::K => ("k", self.k, self.seq_k, self.kv_heads),
            Tensor::V => ("v", self.v, self.seq_k, self.kv_heads),
            Tensor::O => ("o", self.o, self.seq_q, self.q_heads),
        };
        let need = strides.required_len(self.batch, seq, heads, self.head_dim).ok_or_else(|| {
            KernelError::Shape { kernel: KERNEL, message: format!("{name}: the strides overflow usize") }
        })?;
        ensure(len >= need, KERNEL, || {
            format!(
                "{name} has {len} elements; its shape [batch {}, seq {seq}, heads {heads}, head_dim {}] with strides {strides:?} needs {need}",
                self.batch, self.head_dim
            )
        })?;
        if tensor == Tensor::O {
            ensure(strides.rows_disjoint(self.batch, seq, heads, self.head_dim), KERNEL, || {
                format!("o: strides {strides:?} make distinct rows overlap")
            })?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tensor {
    Q,
    K,
    V,
    O,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides() {
        let s = Strides::contiguous(Layout::Bshd, 5, 3, 8);
        assert_eq!(s, Strides { batch: 120, seq: 24, head: 8 });
        assert_eq!(s.required_len(2, 5, 3, 8), Some(240));
        let s = Strides::contiguous(Layout::Bhsd, 5, 3, 8);
        assert_eq!(s, Strides { batch: 120, seq: 8, head: 40 });
        assert_eq!(s.required_len(2, 5, 3, 8), Some(240));
        assert!(s.rows_disjoint(2, 5, 3, 8));
        assert_eq!(Strides { batch: usize::MAX, seq: 1, head: 1 }.required_len(3, 1, 1, 1), None);
    }

    #[test]
    fn overlapping_output_rows_are_found() {
        // Heads 4 elements apart with head_dim 8 overlap; one head never does.
        assert!(!Strides { batch: 100, seq: 32, head: 4 }.rows_disjoint(1, 2, 2, 8));
        assert!(Strides { batch: 100, seq: 32, head: 4 }.rows_disjoint(1, 2, 1, 8));
        assert!(!Strides { batch: 0, seq: 8, head: 16 }.rows_disjoint(2, 2, 1, 8));
    }

    #[test]
    fn bad_problems_are_refused_with_reasons() {
        let ok = Attention::new(2, 3, 5, 4, 2, 16);
        let lens = |a: &Attention| {
            (
                a.q.required_len(a.batch, a.seq_q, a.q_heads, a.head_dim).unwrap(),
                a.k.required_len(a.batch, a.seq_k, a.kv_heads, a.head_dim).unwrap(),
            )
        };
        let (q, k) = lens(&ok);
        ok.check(q, k, k, q).unwrap();
        let message = |a: Attention, q: usize, k: usize| a.check(q, k, k, q).unwrap_err().to_string();
        assert!(message(Attention { kv_heads: 3, ..ok }, q, k).contains("not a multiple of kv_heads 3"));
        assert!(message(Attention { head_dim: 257, ..ok }, q, k).contains("head_dim 257 is out of range"));
        assert!(message(Attention { head_dim: 0, ..ok }, q, k).contains("head_dim 0"));
        assert!(message(ok, q - 1, k).contains("q has"));
        assert!(message(ok, q, k - 1).contains("k has"));
        assert!(message(ok.with_scale(f32::NAN), q, k).contains("scale"));
        assert!(message(ok.causal_with_offset(i64::MIN), q, k).contains("offset"));
        assert!(message(Attention { kv_heads: 0, ..ok }, q, k).contains("at least 1"));
        let overlapping = ok.with_o_strides(Strides { batch: 48, seq: 16, head: 4 });
        assert!(message(overlapping, q, k).contains("overlap"));
    }

    #[test]
    fn flops_and_offsets() {
        let a = Attention::new(4, 4096, 4096, 32, 32, 128);
        assert_eq!(a.flops(), 4.0 * 4.0 * 32.0 * 4096.0 * 4096.0 * 128.0);
        assert_eq!(a.causal().flops(), a.flops() / 2.0);
        assert_eq!(Attention::new(1, 3, 10, 1, 1, 8).causal().causal_offset, Some(7));
        assert_eq!(Attention::new(1, 1, 1, 8, 2, 64).group(), 4);
    }
}
