//! Benchmark of `kernels/rmsnorm.hip`: 16384 rows of 4096 (a Llama-7B hidden state for 16k
//! tokens), plain and with the fused residual add, in each dtype.
//!
//! Minimal traffic: plain reads x and weight and writes out; with the residual it reads x and
//! the residual and writes the residual and out (weight is 4096 elements, counted but
//! negligible).

use rocm_kernels::Dtype;
use rocm_kernels::rmsnorm::{rmsnorm, rmsnorm_residual};
use rocm_runtime::{bf16, f16};

use super::{Bench, Row};
use crate::Result;

const ROWS: usize = 16_384;
const COLS: usize = 4096;
const EPS: f32 = 1e-5;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    super::rows_of_each(b, &[dtype::<f32>, dtype::<f16>, dtype::<bf16>])
}

fn dtype<T: Dtype>(b: &mut Bench) -> Result<Vec<Row>> {
    let n = ROWS * COLS;
    let size = size_of::<T>() as u64;
    let (x, residual, weight) =
        (b.random::<T>(n, -1.0, 1.0), b.random::<T>(n, -1.0, 1.0), b.random::<T>(COLS, -1.0, 1.0));
    let x = b.stream.upload(&x)?;
    let mut residual = b.stream.upload(&residual)?;
    let weight = b.stream.upload(&weight)?;
    let mut out = b.stream.alloc::<T>(n)?;
    let shape = format!("{ROWS}x{COLS}");

    let plain = b.time(|| Ok(rmsnorm(&x, &weight, &mut out, ROWS, COLS, EPS)?))?;
    // Each launch adds x into the residual again: values drift by at most 50 or so over a run,
    // which changes nothing in the timing.
    let fused = b.time(|| Ok(rmsnorm_residual(&x, &mut residual, &weight, &mut out, ROWS, COLS, EPS)?))?;
    Ok(vec![
        Row {
            kernel: "rmsnorm".into(),
            dtype: T::NAME,
            shape: shape.clone(),
            ms: plain,
            bytes: (2 * n + COLS) as u64 * size,
            flops: None,
        },
        Row {
            kernel: "rmsnorm+residual".into(),
            dtype: T::NAME,
            shape,
            ms: fused,
            bytes: (4 * n + COLS) as u64 * size,
            flops: None,
        },
    ])
}
