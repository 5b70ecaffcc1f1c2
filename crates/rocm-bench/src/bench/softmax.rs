//! Benchmark of `kernels/softmax.hip`: 16384 rows of 4096 (scale 1/sqrt(128)), each dtype,
//! without a mask and causal (4 heads of 4096 queries over 4096 keys).
//!
//! Minimal traffic: every input element the result depends on read once, every output written
//! once. Without a mask that is `2 * rows * cols` elements; causal, the hidden upper triangle
//! is not needed (the kernel does not read it), so it counts the visible part of x read plus
//! all of y written.

use rocm_kernels::Dtype;
use rocm_kernels::softmax::{Mask, Softmax};
use rocm_runtime::{bf16, f16};

use super::{Bench, Row};
use crate::Result;

const ROWS: usize = 16_384;
const COLS: usize = 4_096;
const SEQ_Q: usize = 4_096;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    super::rows_of_each(b, &[dtype::<f32>, dtype::<f16>, dtype::<bf16>])
}

fn dtype<T: Dtype>(b: &mut Bench) -> Result<Vec<Row>> {
    let n = ROWS * COLS;
    let host: Vec<T> = b.rng.normal_f32_vec(n, 3.0).into_iter().map(T::from_f32).collect();
    let x = b.stream.upload(&host)?;
    drop(host);
    let mut y = b.stream.alloc::<T>(n)?;
    let shape = Softmax::new(ROWS, COLS).with_scale(1.0 / (128f32).sqrt());
    let size = size_of::<T>() as u64;
    let shape_text = format!("{ROWS} x {COLS}");

    let ms = b.time(|| Ok(shape.run(&x, &mut y, Mask::None)?))?;
    let plain = Row {
        kernel: "softmax".into(),
        dtype: T::NAME,
        shape: shape_text.clone(),
        ms,
        bytes: 2 * n as u64 * size,
        flops: None,
    };

    let ms = b.time(|| Ok(shape.run(&x, &mut y, Mask::causal(SEQ_Q))?))?;
    // Query i of each head reads columns 0..=i (offset cols - seq_q = 0).
    let visible: u64 = (ROWS / SEQ_Q) as u64 * (1..=SEQ_Q as u64).sum::<u64>();
    let causal = Row {
        kernel: "softmax causal".into(),
        dtype: T::NAME,
        shape: shape_text,
        ms,
        bytes: (visible + n as u64) * size,
        flops: None,
    };
    Ok(vec![plain, causal])
}
