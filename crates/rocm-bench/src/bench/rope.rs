//! Benchmark of `kernels/rope.hip`: 16384 tokens of Q with 32 heads and K with 8 heads of 128,
//! in place, each dtype, NeoX (full rotary, Llama) and GLM (interleaved pairs on half the head).
//!
//! Minimal traffic: the rotated elements of Q and K read and written once, plus the positions
//! (4 bytes a token). Pass-through elements (GLM's second half) are not counted: the kernel
//! never touches them.
//!
//! Next to the GLM rows, the ceiling of their layout: `stream_rmw` reading and writing back the
//! same bytes (the first half of every head of 40 heads a token) and nothing else.

use rocm_kernels::Dtype;
use rocm_kernels::rope::{Rope, RopeStyle, RopeTensor};
use rocm_kernels::stream_rmw::stream_rmw;
use rocm_runtime::{bf16, f16};

use super::{Bench, Row};
use crate::Result;

const TOKENS: usize = 16_384;
const Q_HEADS: usize = 32;
const K_HEADS: usize = 8;
const HEAD_DIM: usize = 128;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    super::rows_of_each(b, &[dtype::<f32>, dtype::<f16>, dtype::<bf16>])
}

fn dtype<T: Dtype>(b: &mut Bench) -> Result<Vec<Row>> {
    let upload = |b: &mut Bench, len: usize| -> Result<_> {
        let host: Vec<T> = b.random(len, -2.0, 2.0);
        Ok(b.stream.upload(&host)?)
    };
    let mut q = upload(b, TOKENS * Q_HEADS * HEAD_DIM)?;
    let mut k = upload(b, TOKENS * K_HEADS * HEAD_DIM)?;
    // Positions of a batch of sequences of 4096 tokens (long-context values, not all small).
    let positions: Vec<i32> = (0..TOKENS).map(|t| (t % 4096) as i32 * 16).collect();
    let positions = b.stream.upload(&positions)?;
    let shape = format!("{TOKENS} x ({Q_HEADS}+{K_HEADS}) x {HEAD_DIM}");
    let variants = [
        ("rope neox", Rope::neox(HEAD_DIM).with_theta_base(500_000.0), HEAD_DIM),
        ("rope glm", Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, HEAD_DIM), HEAD_DIM / 2),
    ];
    let mut rows = Vec::new();
    for (name, rope, rotated) in variants {
        let ms = b.time(|| {
            let qt = RopeTensor::new(&mut q, Q_HEADS);
            let kt = RopeTensor::new(&mut k, K_HEADS);
            Ok(rope.run(qt, Some(kt), &positions, None)?)
        })?;
        let elements = (TOKENS * (Q_HEADS + K_HEADS) * rotated) as u64;
        rows.push(Row {
            kernel: name.into(),
            dtype: T::NAME,
            shape: shape.clone(),
            ms,
            bytes: 2 * elements * size_of::<T>() as u64 + 4 * TOKENS as u64,
            flops: None,
        });
    }
    drop((q, k));
    // The GLM layout's ceiling: half of every head read and written back in place. Random bytes,
    // as the rope rows have (never a constant: some memory systems compress uniform data).
    let head = HEAD_DIM * size_of::<T>();
    let host = b.random_bytes(TOKENS * (Q_HEADS + K_HEADS) * head);
    let mut heads = b.stream.upload(&host)?;
    let ms = b.time(|| Ok(stream_rmw(&mut heads, head / 2, head, 0x8000_8000)?))?;
    rows.push(Row {
        kernel: "rmw, rope glm layout".into(),
        dtype: T::NAME,
        shape: format!("{} of every {head} B", head / 2),
        ms,
        bytes: 2 * (TOKENS * (Q_HEADS + K_HEADS) * head / 2) as u64,
        flops: None,
    });
    Ok(rows)
}
