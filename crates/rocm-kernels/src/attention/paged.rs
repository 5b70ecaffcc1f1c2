//! Paged attention: flash attention whose K and V live in a paged KV cache.
//!
//! The cache holds `num_blocks` blocks of `block_size` token slots; each slot is one token's
//! `[kv_heads, head_dim]` row, so the K (and V) cache is a contiguous `[num_blocks, block_size,
//! kv_heads, head_dim]` tensor (what `kv_cache::kv_cache_write` fills). Sequence `b` of the batch
//! has `seq_lens[b]` tokens, token `j` in slot `block_table[b][j / block_size] * block_size + j %
//! block_size`; `block_table` is a `[batch, max_blocks]` i32 tensor, `seq_lens` `[batch]` i32.
//!
//! Its `seq_q` queries (1 when decoding, more for a chunk of prefill) are the last `seq_q`
//! tokens of each sequence: with `causal`, query `i` sees keys `j <= i + seq_lens[b] - seq_q`.
//! Q and O are `[batch, seq_q, q_heads, head_dim]` (or strided, as for [`Attention`]).
//!
//! The kernels are [`flash_attention`]'s, reading each K/V row through the block table; the
//! choice of kernel, the key split and the LSE work the same. Device-side values cannot be
//! checked by the launcher without a copy, so the kernels make them memory-safe instead: a
//! `seq_lens` entry is clamped to `[0, max_blocks * block_size]`, and a block id outside
//! `[0, num_blocks)` reads as zeros, never outside the cache. Build the tables from a checked
//! host-side allocator (rocm-model's paged cache) to get correct results.
//!
//! [`flash_attention`]: super::flash_attention

use rocm_runtime::{DeviceBuffer, Stream};

use super::flash::{self, AttentionScratch, PagedSource};
use super::{Attention, FlashOptions, KERNEL, Strides, Tensor};
use crate::dtype::Dtype;
use crate::error::{KernelError, Result, ensure};

/// One paged-attention problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PagedAttention {
    pub batch: usize,
    /// New tokens (queries) per sequence.
    pub seq_q: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    /// The queries see only keys up to their own position (the last `seq_q` of the sequence).
    pub causal: bool,
    /// Token slots per cache block.
    pub block_size: usize,
    /// Blocks in the cache.
    pub num_blocks: usize,
    /// Columns of the block table (the most blocks a sequence may hold).
    pub max_blocks: usize,
    pub q: Strides,
    pub o: Strides,
}

/// The device tensors of a paged K/V cache, as [`paged_attention`] reads them.
#[derive(Debug, Clone, Copy)]
pub struct PagedKv<'a, T: Dtype> {
    /// `[num_blocks, block_size, kv_heads, head_dim]`.
    pub k: &'a DeviceBuffer<T>,
    pub v: &'a DeviceBuffer<T>,
    /// `[batch, max_blocks]` physical block ids.
    pub block_table: &'a DeviceBuffer<i32>,
    /// `[batch]` tokens in each sequence.
    pub seq_lens: &'a DeviceBuffer<i32>,
}

impl PagedAttention {
    /// Decoding (`seq_q = 1`), causal, contiguous `[batch, seq_q, q_heads, head_dim]` Q and O,
    /// scale `1 / sqrt(head_dim)`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        batch: usize,
        seq_q: usize,
        q_heads: usize,
        kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        num_blocks: usize,
        max_blocks: usize,
    ) -> Self {
        let q = super::Strides::contiguous(super::Layout::Bshd, seq_q, q_heads, head_dim);
        PagedAttention {
            batch,
            seq_q,
            q_heads,
            kv_heads,
            head_dim,
            scale: 1.0 / (head_dim.max(1) as f32).sqrt(),
            causal: true,
            block_size,
            num_blocks,
            max_blocks,
            q,
            o: q,
        }
    }

    pub fn with_scale(self, scale: f32) -> Self {
        PagedAttention { scale, ..self }
    }

    pub fn non_causal(self) -> Self {
        PagedAttention { causal: false, ..self }
    }

    /// Elements of one cache tensor: `num_blocks * block_size * kv_heads * head_dim`.
    pub fn cache_len(&self) -> Option<usize> {
        self.num_blocks.checked_mul(self.block_size)?.checked_mul(self.kv_heads)?.checked_mul(self.head_dim)
    }

    /// The contiguous problem the kernels run: as many keys as a block table can reach, K and V
    /// addressed by slot (the kernels take each batch's own length from `seq_lens`).
    fn as_attention(&self) -> Result<Attention> {
        let seq_k = self.max_blocks.checked_mul(self.block_size).ok_or_else(|| KernelError::Shape {
            kernel: KERNEL,
            message: format!("max_blocks {} x block_size {} overflows", self.max_blocks, self.block_size),
        })?;
        let slot = Strides { batch: 0, seq: self.kv_heads * self.head_dim, head: self.head_dim };
        let mut a = Attention::new(self.batch, self.seq_q, seq_k, self.q_heads, self.kv_heads, self.head_dim)
            .with_scale(self.scale)
            .with_q_strides(self.q)
            .with_o_strides(self.o)
            .with_k_strides(slot)
            .with_v_strides(slot);
        if self.causal {
            // Placeholder: the kernels use seq_lens[b] - seq_q per batch.
            a = a.causal_with_offset(0);
        }
        Ok(a)
    }
}

impl AttentionScratch {
    /// The scratch [`paged_attention_in`] needs for `attn` with `options` in `T` on `stream`:
    /// the key split that launch takes depends on the device, the kernel and the keys a block
    /// table can reach (`max_blocks * block_size`), not on the sequences' lengths, so one
    /// scratch serves every step of a fixed batch and table width. Empty when it does not split.
    pub fn for_paged<T: Dtype>(
        stream: &Stream,
        attn: &PagedAttention,
        options: &FlashOptions,
    ) -> Result<Self> {
        let a = attn.as_attention()?;
        a.check_problem()?;
        let splits = flash::planned_splits::<T>(stream, &a, options, true)?;
        AttentionScratch::new(stream, splits, a.lse_len(), a.head_dim)
    }
}

/// Attention of `q` over the paged cache `kv`, into `o` (and the LSE when given), queued on
/// `o`'s stream; every buffer must belong to it. When the keys are split, the partial results
/// go to temporaries allocated on the stream; [`paged_attention_in`] takes them from the caller.
pub fn paged_attention<T: Dtype>(
    attn: &PagedAttention,
    options: &FlashOptions,
    q: &DeviceBuffer<T>,
    kv: &PagedKv<'_, T>,
    o: &mut DeviceBuffer<T>,
    lse: Option<&mut DeviceBuffer<f32>>,
) -> Result<()> {
    run(attn, options, q, kv, o, lse, None)
}

/// [`paged_attention`] with the key split's partial results in `scratch` (sized by
/// [`AttentionScratch::for_paged`] for this problem and options): allocates nothing, so it can
/// be recorded into a graph. Refused with a shape error if the split needs more than `scratch`
/// holds. The same kernels and split as [`paged_attention`], so the same result bit for bit.
pub fn paged_attention_in<T: Dtype>(
    attn: &PagedAttention,
    options: &FlashOptions,
    q: &DeviceBuffer<T>,
    kv: &PagedKv<'_, T>,
    o: &mut DeviceBuffer<T>,
    lse: Option<&mut DeviceBuffer<f32>>,
    scratch: &mut AttentionScratch,
) -> Result<()> {
    run(attn, options, q, kv, o, lse, Some(scratch))
}

fn run<T: Dtype>(
    attn: &PagedAttention,
    options: &FlashOptions,
    q: &DeviceBuffer<T>,
    kv: &PagedKv<'_, T>,
    o: &mut DeviceBuffer<T>,
    lse: Option<&mut DeviceBuffer<f32>>,
    scratch: Option<&mut AttentionScratch>,
) -> Result<()> {
    let a = attn.as_attention()?;
    a.check_problem()?;
    a.check_tensor(Tensor::Q, q.len())?;
    a.check_tensor(Tensor::O, o.len())?;
    ensure(attn.block_size > 0 && attn.num_blocks > 0 && attn.max_blocks > 0, KERNEL, || {
        format!(
            "block_size ({}), num_blocks ({}) and max_blocks ({}) must be at least 1",
            attn.block_size, attn.num_blocks, attn.max_blocks
        )
    })?;
    ensure(attn.num_blocks.saturating_mul(attn.block_size) <= i32::MAX as usize, KERNEL, || {
        format!("num_blocks {} x block_size {} exceed 2^31 slots", attn.num_blocks, attn.block_size)
    })?;
    let cache_len = attn.cache_len().ok_or_else(|| KernelError::Shape {
        kernel: KERNEL,
        message: "the cache's size overflows usize".into(),
    })?;
    for (name, len) in [("k cache", kv.k.len()), ("v cache", kv.v.len())] {
        ensure(len >= cache_len, KERNEL, || {
            format!(
                "{name} has {len} elements; [num_blocks {}, block_size {}, kv_heads {}, head_dim {}] needs {cache_len}",
                attn.num_blocks, attn.block_size, attn.kv_heads, attn.head_dim
            )
        })?;
    }
    let table_len = attn.batch * attn.max_blocks;
    ensure(kv.block_table.len() >= table_len, KERNEL, || {
        format!(
            "block_table has {} entries, [batch {}, max_blocks {}] needs {table_len}",
            kv.block_table.len(),
            attn.batch,
            attn.max_blocks
        )
    })?;
    ensure(kv.seq_lens.len() >= attn.batch, KERNEL, || {
        format!("seq_lens has {} entries for a batch of {}", kv.seq_lens.len(), attn.batch)
    })?;
    let paged = PagedSource {
        block_table: kv.block_table,
        seq_lens: kv.seq_lens,
        block_size: attn.block_size,
        max_blocks: attn.max_blocks,
        num_blocks: attn.num_blocks,
    };
    flash::run(&a, options, q, kv.k, kv.v, Some(paged), o, lse, scratch)
}
