//! Benchmark of `kernels/causal_mask.hip` (not written yet).

use super::{Bench, Row};
use crate::Result;

pub fn run(_b: &mut Bench) -> Result<Vec<Row>> {
    Ok(Vec::new())
}
