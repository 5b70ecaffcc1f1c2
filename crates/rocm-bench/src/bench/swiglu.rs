//! Benchmark of `kernels/swiglu.hip`: 16384 tokens through an ffn of 11008 (Llama-7B's MLP),
//! from separate gate and up tensors and from the fused `[rows, 2 * ffn]` gate-up tensor, in
//! each dtype.
//!
//! Minimal traffic, both forms: gate and up read once, out written once.

use rocm_kernels::Dtype;
use rocm_kernels::swiglu::{swiglu, swiglu_fused};
use rocm_runtime::{bf16, f16};

use super::{Bench, Row};
use crate::Result;

const ROWS: usize = 16_384;
const FFN: usize = 11_008;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    super::rows_of_each(b, &[dtype::<f32>, dtype::<f16>, dtype::<bf16>])
}

fn dtype<T: Dtype>(b: &mut Bench) -> Result<Vec<Row>> {
    let n = ROWS * FFN;
    let bytes = 3 * n as u64 * size_of::<T>() as u64;
    let shape = format!("{ROWS}x{FFN}");
    let gate_up: Vec<T> = b.random(2 * n, -6.0, 6.0);
    let mut out = b.stream.alloc::<T>(n)?;

    // Separate tensors (the halves of the host data, so both forms see the same values).
    let separate = {
        let gate = b.stream.upload(&gate_up[..n])?;
        let up = b.stream.upload(&gate_up[n..])?;
        b.time(|| Ok(swiglu(&gate, &up, &mut out)?))?
    };
    let fused = {
        let gate_up = b.stream.upload(&gate_up)?;
        b.time(|| Ok(swiglu_fused(&gate_up, &mut out, ROWS, FFN)?))?
    };
    Ok(vec![
        Row {
            kernel: "swiglu".into(),
            dtype: T::NAME,
            shape: shape.clone(),
            ms: separate,
            bytes,
            flops: None,
        },
        Row { kernel: "swiglu fused gate-up".into(), dtype: T::NAME, shape, ms: fused, bytes, flops: None },
    ])
}
