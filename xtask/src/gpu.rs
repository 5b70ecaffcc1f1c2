//! `cargo xtask gpu-test` and `gpu-archive` (stub).

use crate::Result;

pub fn test(_args: &[String]) -> Result<()> {
    Err("not written yet".into())
}

pub fn archive(_args: &[String]) -> Result<()> {
    Err("not written yet".into())
}
