//! Benchmark of flash attention (`kernels/flash_*.hip`; and, small, the unfused pipeline of
//! `kernels/attention.hip`).
//!
//! - Prefill: batch 4, 32 heads, 4096 queries over 4096 keys, head_dim 128 and 64, f16 and
//!   bf16, causal and not, reported in TFLOP/s as `4 * B * H * Sq * Sk * D` (halved when
//!   causal), the count attention benchmarks (and PyTorch's) use.
//! - Decode: batch 32, one query over 4096 keys, 32 query heads on 4 KV heads (GQA 8), head_dim
//!   128: memory-bound, reported in GB/s of the minimal traffic (K and V read once, Q read and O
//!   written once) against the copy bandwidth.
//! - Paged decode of one sequence at Llama-3-8B's heads (32 on 8 KV heads, head_dim 128): 128
//!   and 1000 keys in a table exactly as long, and in a table of 4096 keys (a decode graph's,
//!   sized for the longest sequence it will serve), where the key split planned for the width
//!   is recut for each sequence's length on the device.
//! - The portable kernel and the unfused pipeline at a smaller prefill, for scale.

use rocm_kernels::Dtype;
use rocm_kernels::attention::{
    Attention, FlashKernel, FlashOptions, PagedAttention, PagedKv, attention_unfused, flash_attention_with,
    paged_attention,
};
use rocm_runtime::{DeviceBuffer, bf16, f16};

use super::{Bench, Row};
use crate::Result;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for d in [128, 64] {
        for causal in [false, true] {
            rows.push(flash::<f16>(b, prefill(4, 32, d, causal), AUTO)?);
            rows.push(flash::<bf16>(b, prefill(4, 32, d, causal), AUTO)?);
        }
    }
    // Hopper's rows above take the warpgroup kernel; these the mma.sync kernel (the same as
    // above on other devices).
    for d in [128, 64] {
        for causal in [false, true] {
            rows.push(flash::<f16>(b, prefill(4, 32, d, causal), MMA_SYNC)?);
        }
    }
    let decode = Attention::new(32, 1, 4096, 32, 4, 128).causal();
    rows.push(flash::<f16>(b, decode, AUTO)?);
    rows.push(flash::<bf16>(b, decode, AUTO)?);
    // The 4-warp key-split kernel in two splits plus the combine pass, which the launcher takes
    // when the decode grid does not about fill the device once.
    rows.push(flash::<f16>(b, decode, FlashOptions { splits: Some(2), ..AUTO })?);
    let batch32 = PagedDecode { batch: 32, len: 4096, table: 4096, hq: 32, hkv: 4 };
    rows.push(paged::<f16>(b, batch32, 16, None)?);
    rows.push(paged::<bf16>(b, batch32, 16, None)?);
    rows.push(paged::<f16>(b, batch32, 16, Some(2))?);
    // Larger blocks: the same kernel with K/V scattered in bigger contiguous pieces.
    rows.push(paged::<f16>(b, batch32, 256, None)?);
    for len in [128, 1000] {
        for table in [len, 4096] {
            let one = PagedDecode { batch: 1, len, table, hq: 32, hkv: 8 };
            rows.push(paged::<bf16>(b, one, 16, None)?);
        }
    }
    let small = prefill(1, 8, 128, false);
    rows.push(flash::<f16>(b, small, PORTABLE)?);
    rows.push(flash::<f32>(b, small, PORTABLE)?);
    rows.push(unfused::<f16>(b, small)?);
    Ok(rows)
}

fn prefill(batch: usize, heads: usize, head_dim: usize, causal: bool) -> Attention {
    let a = Attention::new(batch, 4096, 4096, heads, heads, head_dim);
    if causal { a.causal() } else { a }
}

struct Tensors<T: Dtype> {
    q: DeviceBuffer<T>,
    k: DeviceBuffer<T>,
    v: DeviceBuffer<T>,
    o: DeviceBuffer<T>,
}

fn tensors<T: Dtype>(b: &mut Bench, a: &Attention) -> Result<Tensors<T>> {
    let q_len = a.batch * a.seq_q * a.q_heads * a.head_dim;
    let kv_len = a.batch * a.seq_k * a.kv_heads * a.head_dim;
    let q = b.upload_random::<T>(q_len, -1.0, 1.0)?;
    let k = b.upload_random::<T>(kv_len, -1.0, 1.0)?;
    let v = b.upload_random::<T>(kv_len, -1.0, 1.0)?;
    let o = b.stream.alloc::<T>(q_len)?;
    Ok(Tensors { q, k, v, o })
}

fn shape(a: &Attention) -> String {
    let gqa = if a.kv_heads != a.q_heads { format!(" g{}", a.group()) } else { String::new() };
    let causal = if a.causal_offset.is_some() { " c" } else { "" };
    format!("B{} H{} {}x{} D{}{gqa}{causal}", a.batch, a.q_heads, a.seq_q, a.seq_k, a.head_dim)
}

fn bytes<T: Dtype>(a: &Attention) -> u64 {
    let q = a.batch * a.seq_q * a.q_heads * a.head_dim;
    let kv = a.batch * a.seq_k * a.kv_heads * a.head_dim;
    ((2 * q + 2 * kv) * size_of::<T>()) as u64
}

/// One flash-attention row. The kernel name carries what `options` fix: "portable" or "mma.sync"
/// for those kernels, "split N" for a fixed key split.
fn flash<T: Dtype>(b: &mut Bench, a: Attention, options: FlashOptions) -> Result<Row> {
    let mut t = tensors::<T>(b, &a)?;
    let ms = b.time(|| Ok(flash_attention_with(&a, &options, &t.q, &t.k, &t.v, &mut t.o, None)?))?;
    let mut name = String::from("flash_attention");
    match options.kernel {
        FlashKernel::Portable => name.push_str(" portable"),
        FlashKernel::MmaSync => name.push_str(" mma.sync"),
        FlashKernel::Auto | FlashKernel::MatrixCores => {}
    }
    if let Some(s) = options.splits {
        name.push_str(&format!(" split {s}"));
    }
    Ok(Row {
        kernel: name,
        dtype: T::NAME,
        shape: shape(&a),
        ms,
        bytes: bytes::<T>(&a),
        flops: Some(a.flops()),
    })
}

/// The launcher's own choice of kernel and split.
const AUTO: FlashOptions = FlashOptions { kernel: FlashKernel::Auto, splits: None };
/// The mma.sync matrix-core kernel, never the warpgroup one.
const MMA_SYNC: FlashOptions = FlashOptions { kernel: FlashKernel::MmaSync, splits: None };
/// The portable kernel.
const PORTABLE: FlashOptions = FlashOptions { kernel: FlashKernel::Portable, splits: None };

/// A paged decode problem: `batch` sequences of `len` cached tokens in tables of `table`
/// tokens, `hq` query heads on `hkv` KV heads of 128.
#[derive(Clone, Copy)]
struct PagedDecode {
    batch: usize,
    len: usize,
    table: usize,
    hq: usize,
    hkv: usize,
}

/// Paged decode of `p` (batch 32 at 4096 tokens is the contiguous decode row's problem) in
/// blocks of `block_size`, handed out in a shuffled order; `splits` fixes the key split (named
/// in the row) or leaves it to the launcher.
fn paged<T: Dtype>(b: &mut Bench, p: PagedDecode, block_size: usize, splits: Option<usize>) -> Result<Row> {
    let PagedDecode { batch, len, table: table_len, hq, hkv } = p;
    let d = 128;
    let per_seq = table_len.div_ceil(block_size);
    let num_blocks = batch * per_seq;
    let mut ids: Vec<i32> = (0..num_blocks as i32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, b.rng.below(i as u64 + 1) as usize);
    }
    let attn = PagedAttention::new(batch, 1, hq, hkv, d, block_size, num_blocks, per_seq);
    let cache_len = attn.cache_len().ok_or("cache size")?;
    let k = b.upload_random::<T>(cache_len, -1.0, 1.0)?;
    let v = b.upload_random::<T>(cache_len, -1.0, 1.0)?;
    let table = b.stream.upload(&ids)?;
    let lens = b.stream.upload(&vec![len as i32; batch])?;
    // The K (or V) elements the launch reads: the blocks of each sequence's keys.
    let read_len = cache_len / per_seq * len.div_ceil(block_size);
    let q = b.upload_random::<T>(batch * hq * d, -1.0, 1.0)?;
    let mut o = b.stream.alloc::<T>(batch * hq * d)?;
    let kv = PagedKv { k: &k, v: &v, block_table: &table, seq_lens: &lens };
    let options = FlashOptions { splits, ..AUTO };
    let ms = b.time(|| Ok(paged_attention(&attn, &options, &q, &kv, &mut o, None)?))?;
    let bytes = ((2 * read_len + 2 * batch * hq * d) * size_of::<T>()) as u64;
    let mut shape = format!("B{batch} H{hq} 1x{len} D{d} g{} bs{block_size}", hq / hkv);
    if table_len != len {
        shape.push_str(&format!(" of {table_len}"));
    }
    let kernel = match splits {
        Some(s) => format!("paged_attention split {s}"),
        None => "paged_attention".into(),
    };
    Ok(Row { kernel, dtype: T::NAME, shape, ms, bytes, flops: None })
}

fn unfused<T: Dtype>(b: &mut Bench, a: Attention) -> Result<Row> {
    let mut t = tensors::<T>(b, &a)?;
    let ms = b.time(|| Ok(attention_unfused(&a, &t.q, &t.k, &t.v, &mut t.o)?))?;
    Ok(Row {
        kernel: "attention unfused".into(),
        dtype: T::NAME,
        shape: shape(&a),
        ms,
        bytes: bytes::<T>(&a),
        flops: Some(a.flops()),
    })
}
