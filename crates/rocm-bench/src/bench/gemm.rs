//! Benchmark of `rocm_kernels::gemm`: the portable kernel (`kernels/gemm.hip`) next to the
//! vendor BLAS (cuBLAS / rocBLAS) on the same device, the ceiling it is judged against.
//!
//! - 4096 x 4096 x 4096 in f32, f16 and bf16: TFLOP/s (`2 M N K`).
//! - A transformer's MLP weights, Llama-3-8B sized: `y = x W^T` with `W` `[14336, 4096]`
//!   (gate/up) and `[4096, 14336]` (down), stored like nn.Linear weights, for decode (M = 1:
//!   bound by reading `W`, judged in GB/s of the minimal traffic against the copy row) and
//!   prefill (M = 512: TFLOP/s). The weights (117 MB and up) exceed the L2, so each launch
//!   reads them from DRAM.
//!
//! The vendor rows use a workspace allocated once ([`Blas::gemm_with_workspace`]), so they time
//! the library, not an allocation per call. Without a vendor library only portable rows print.

use rocm_kernels::Dtype;
use rocm_kernels::gemm::{GemmDesc, GemmElement, gemm_portable};
use rocm_runtime::{Blas, DeviceBuffer, bf16, f16};

use super::{Bench, Row};
use crate::Result;

/// (n, k) of the MLP weights: gate/up, then down.
const WEIGHTS: &[(usize, usize)] = &[(14_336, 4096), (4096, 14_336)];
/// Tokens of the prefill rows.
const PREFILL: usize = 512;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    let vendor = match Blas::open(&b.backend) {
        Ok(blas) => Some(blas),
        Err(e) => {
            println!("gemm: no vendor BLAS, portable rows only: {e}");
            None
        }
    };
    let vendor = vendor.as_deref();
    let mut rows = Vec::new();
    let cube = GemmDesc::new(4096, 4096, 4096);
    rows.extend(both::<f32>(b, vendor, &cube)?);
    rows.extend(both::<f16>(b, vendor, &cube)?);
    rows.extend(both::<bf16>(b, vendor, &cube)?);
    for m in [1, PREFILL] {
        for &(n, k) in WEIGHTS {
            let linear = GemmDesc::linear(m, n, k);
            rows.extend(both::<bf16>(b, vendor, &linear)?);
            if (n, k) == WEIGHTS[0] {
                rows.extend(both::<f16>(b, vendor, &linear)?);
            }
        }
    }
    Ok(rows)
}

fn shape(d: &GemmDesc) -> String {
    let t = |x: rocm_kernels::gemm::Transpose| if x.is_transposed() { 't' } else { 'n' };
    format!("{}x{}x{} {}{}", d.m, d.n, d.k, t(d.trans_a), t(d.trans_b))
}

/// The portable kernel and, when there is one, the vendor library on the same random inputs.
fn both<T: GemmElement>(b: &mut Bench, vendor: Option<&Blas>, d: &GemmDesc) -> Result<Vec<Row>> {
    let (a_len, b_len, c_len) =
        (d.a_len().ok_or("A size")?, d.b_len().ok_or("B size")?, d.c_len().ok_or("C size")?);
    let x = upload::<T>(b, a_len)?;
    let w = upload::<T>(b, b_len)?;
    let mut y = b.stream.alloc::<T>(c_len)?;
    let bytes = ((a_len + b_len + c_len) * size_of::<T>()) as u64;
    let row = |kernel: String, ms: f64| Row {
        kernel,
        dtype: T::NAME,
        shape: shape(d),
        ms,
        bytes,
        flops: Some(d.flops()),
    };
    let mut rows = Vec::new();
    let ms = b.time(|| Ok(gemm_portable(d, &x, &w, &mut y)?))?;
    rows.push(row("gemm portable".into(), ms));
    if let Some(blas) = vendor {
        let mut workspace = b.stream.alloc::<u8>(blas.recommended_workspace_bytes())?;
        let ms = b.time(|| Ok(blas.gemm_with_workspace(d, &x, &w, &mut y, &mut workspace)?))?;
        rows.push(row(format!("gemm {}", blas.library()), ms));
    }
    Ok(rows)
}

fn upload<T: Dtype>(b: &mut Bench, len: usize) -> Result<DeviceBuffer<T>> {
    let host = b.random::<T>(len, -1.0, 1.0);
    Ok(b.stream.upload(&host)?)
}
