//! Benchmark of `kernels/causal_mask.hip`: 32 matrices (batch x heads) of 4096 x 4096 scores, the
//! square prefill mask, in each dtype.
//!
//! Minimal traffic: the masked elements written once (4096 * 4095 / 2 a matrix); nothing is read.

use rocm_kernels::Dtype;
use rocm_kernels::causal_mask::CausalMask;
use rocm_runtime::{bf16, f16};

use super::{Bench, Row};
use crate::Result;

const BATCH: usize = 32;
const SEQ: usize = 4096;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    super::rows_of_each(b, &[dtype::<f32>, dtype::<f16>, dtype::<bf16>])
}

fn dtype<T: Dtype>(b: &mut Bench) -> Result<Vec<Row>> {
    let mask = CausalMask::new(BATCH, SEQ, SEQ);
    // The kernel never reads the scores, so their values do not matter.
    let mut scores = b.stream.alloc_zeroed::<T>(BATCH * SEQ * SEQ)?;
    let ms = b.time(|| Ok(mask.apply(&mut scores)?))?;
    Ok(vec![Row {
        kernel: "causal_mask".into(),
        dtype: T::NAME,
        shape: format!("{BATCH}x{SEQ}x{SEQ}"),
        ms,
        bytes: mask.masked_elements() * size_of::<T>() as u64,
        flops: None,
    }])
}
