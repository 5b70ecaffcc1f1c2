//! `cargo xtask kernels` (stub).

use crate::Result;

pub fn run(_args: &[String]) -> Result<()> {
    Err("not written yet".into())
}
