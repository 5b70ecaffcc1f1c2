//! Benchmark of prefill products with quantised weights, the two ways rocm-model runs them past
//! the fused kernels' token counts (`model/linear.rs` picks by format, tokens and grid):
//! dequantise the weight to bf16 (`kernels/dequant.hip`) and run the vendor GEMM on it, or the
//! mixed-input GEMM (`quant_gemm`), against the vendor GEMM on a bf16 weight of the same shape,
//! the ceiling (issue: at least 0.7 of it at 512 and 4096 tokens).
//!
//! Shape: Llama-3-8B's gate/up weight, `[14336, 4096]`, times 256, 512, 1024 and 4096 tokens
//! (256 and 1024 say where the mixed-input GEMM stops paying; `y = x W^T`,
//! TFLOP/s of `2 m n k`). The quantised rows time both launches together; `dequant` alone is in
//! `bench mxfp`, whose random weights these are (speed does not depend on the values; with
//! ggml's formats some scales are NaN): copies covering four times the L2, taken in turn, so
//! the dequantisation reads them from DRAM. Without a vendor BLAS the family prints nothing.
//!
//! Each format is timed three ways: in sequence into a weight-sized buffer allocated once
//! (dequantise the whole weight, then one GEMM); the same into a temporary allocated and freed
//! per product (`dequant_gemm` without a side stream: what rocm-model's prefill runs); and
//! overlapped (`dequant_gemm` with a side stream: the weight in [`OVERLAP_BLOCKS`] row blocks,
//! each block's GEMM after its own dequantisation, the next blocks dequantising meanwhile;
//! docs/kernels/quant_gemm.md, v2, has why it measured slower). For q8_0 the overlapped
//! product is also timed at 2 and 8 row blocks. Where the device runs it, the mixed-input
//! matrix-core GEMM (`quant_gemm`: the blocks decoded in the GEMM's tile loop, no bf16 weight
//! at all) is timed too.

use rocm_kernels::gemm::{GemmDesc, GemmPath};
use rocm_kernels::quant::{
    BlockFormat, OVERLAP_BLOCKS, Overlap, dequant_gemm, dequantize, quant_gemm, quant_gemm_runs,
};
use rocm_runtime::{Blas, bf16};

use super::{Bench, Row};
use crate::Result;

/// (n, k) of the weight: gate/up.
const WEIGHT: (usize, usize) = (14_336, 4096);
/// Tokens of the products.
const TOKENS: &[usize] = &[256, 512, 1024, 4096];

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    let blas = match Blas::open(&b.backend) {
        Ok(blas) => blas,
        Err(e) => {
            println!("quant_gemm: no vendor BLAS, no rows: {e}");
            return Ok(Vec::new());
        }
    };
    let (n, k) = WEIGHT;
    let mut workspace = b.stream.alloc::<u8>(blas.recommended_workspace_bytes())?;
    let mut w = b.upload_random::<bf16>(n * k, -0.05, 0.05)?;
    let side = b.stream.sibling()?;
    let mut rows = Vec::new();
    for &m in TOKENS {
        let d = GemmDesc::linear(m, n, k);
        let x = b.upload_random::<bf16>(m * k, -1.0, 1.0)?;
        let mut y = b.stream.alloc::<bf16>(m * n)?;
        let row = |kernel: String, ms: f64, weight_bytes: usize| Row {
            kernel,
            dtype: "bf16",
            shape: format!("{m}x{n}x{k}"),
            ms,
            bytes: (weight_bytes + (m * k + m * n) * size_of::<bf16>()) as u64,
            flops: Some(d.flops()),
        };
        let vendor_ms = b.time(|| Ok(blas.gemm_with_workspace(&d, &x, &w, &mut y, &mut workspace)?))?;
        let library = blas.library();
        rows.push(row(format!("gemm {library} (bf16 weight)"), vendor_ms, n * k * size_of::<bf16>()));
        for format in BlockFormat::GGUF {
            let copies = super::mxfp::weights(b, format, n, k)?;
            let bytes = copies[0].len();
            let mut i = 0;
            let ms = b.time(|| {
                i += 1;
                dequantize(format, &copies[i % copies.len()], &mut w)?;
                Ok(blas.gemm_with_workspace(&d, &x, &w, &mut y, &mut workspace)?)
            })?;
            println!(
                "quant_gemm: {} at {m} tokens: {:.2} of {library} on the bf16 weight",
                format.name(),
                vendor_ms / ms
            );
            rows.push(row(format!("dequant {} + gemm {library}", format.name()), ms, bytes));
            // dequant_gemm in sequence (a temporary per product), then overlapped in row blocks.
            let sweep: &[usize] =
                if format == BlockFormat::Q8_0 { &[2, OVERLAP_BLOCKS, 8] } else { &[OVERLAP_BLOCKS] };
            for blocks in std::iter::once(None).chain(sweep.iter().copied().map(Some)) {
                let overlap = blocks.map(|row_blocks| Overlap { side: &side, row_blocks });
                let mut i = 0;
                let ms = b.time(|| {
                    i += 1;
                    let w = &copies[i % copies.len()];
                    Ok(dequant_gemm(format, w, n, k, &x, m, &mut y, GemmPath::Vendor, overlap)?)
                })?;
                let (how, kernel) = match blocks {
                    None => (
                        "in sequence, a temporary".to_string(),
                        format!("dequant {} + gemm {library}, temporary", format.name()),
                    ),
                    Some(blocks) => (
                        format!("overlapped in {blocks} row blocks"),
                        format!("dequant {} | gemm {library}, {blocks} blocks", format.name()),
                    ),
                };
                println!(
                    "quant_gemm: {} at {m} tokens, {how}: {:.2} of {library} on the bf16 weight",
                    format.name(),
                    vendor_ms / ms
                );
                rows.push(row(kernel, ms, bytes));
            }
            match quant_gemm_runs::<bf16>(&b.stream, format, k) {
                None => {
                    let mut i = 0;
                    let ms = b.time(|| {
                        i += 1;
                        Ok(quant_gemm(format, &copies[i % copies.len()], n, k, &x, m, &mut y)?)
                    })?;
                    println!(
                        "quant_gemm: {} at {m} tokens, mixed-input GEMM: {:.2} of {library} on the bf16 weight",
                        format.name(),
                        vendor_ms / ms
                    );
                    rows.push(row(format!("quant_gemm {} (mixed-input wgmma)", format.name()), ms, bytes));
                }
                Some(why) => {
                    println!("quant_gemm: {} at {m} tokens: no mixed-input GEMM: {why}", format.name())
                }
            }
        }
    }
    Ok(rows)
}
