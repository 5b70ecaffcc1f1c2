//! `dequant_gemm`: `y = x W^T` with `W` in a block format, for products of more tokens than the
//! fused matrix-vector kernels serve (prefill): the weight is dequantised to `T` and the GEMM
//! (the vendor BLAS where there is one) runs on it.
//!
//! In sequence (what rocm-model runs where [`quant_gemm`](fn@super::quant_gemm) does not pay), the
//! dequantisation is a fixed cost in front of the GEMM:
//! at 512 tokens x 14336 x 4096 on an H100 it is 61 of q8_0's 154 us (docs/kernels/quant_gemm.md).
//!
//! With a `side` stream the two overlap instead: the weight is split into row blocks, each
//! dequantised on the side stream into a temporary of its own, and the GEMM of row block `i`
//! (the output's columns of those rows) waits only for that block's event. The two streams are
//! joined by [`Stream::fork`], which is what lets the side stream read the weight and the main
//! stream read the side's temporaries, and which frees the temporaries only after both are
//! done. Measured on an H100 it is *slower* (q8_0: 166 us in 4 blocks against 154 in
//! sequence): a dequantisation kernel fills every SM it can and the GEMM's blocks need a whole
//! SM each, so the blocks of the two kernels take turns rather than share the device. It stays
//! as an option for devices and schedulers where that differs, and `bench quant_gemm` times
//! both.
//!
//! Either way every element is the dequantised weight rounded once to `T` and one GEMM's sum
//! over the full `K` (split in output columns, never in `K`): the split changes which GEMM
//! kernel the library picks for a block, so the order of the sums, not what is summed.

use rocm_runtime::{DeviceBuffer, Stream};

use super::dequant::{BlockFormat, check_dequantize, dequantize, dequantize_range};
use crate::error::{Result, ensure};
use crate::gemm::{GemmDesc, GemmElement, GemmPath, gemm_with};

const KERNEL: &str = "dequant_gemm";

/// Row blocks of the weight in [`Overlap::new`]; only the first one's dequantisation would
/// not be hidden behind a GEMM.
pub const OVERLAP_BLOCKS: usize = 4;

/// Rows of a row block are a multiple of this: the vendor GEMMs' output tiles.
const ROW_ALIGN: usize = 128;

/// How [`dequant_gemm`] overlaps the dequantisation with the GEMM: on `side` (another stream
/// of the device), the weight cut into `row_blocks` row blocks.
#[derive(Debug, Clone, Copy)]
pub struct Overlap<'s> {
    pub side: &'s Stream,
    pub row_blocks: usize,
}

impl<'s> Overlap<'s> {
    /// On `side`, in [`OVERLAP_BLOCKS`] row blocks.
    pub fn new(side: &'s Stream) -> Self {
        Overlap { side, row_blocks: OVERLAP_BLOCKS }
    }
}

/// `y = x W^T`: `x` is `[tokens, inp]`, `y` `[tokens, rows]`, `w` the weight's `rows x inp`
/// elements as whole blocks of `format` (row-major, a row `inp / block_elems` blocks), on `y`'s
/// stream and GEMM `path`. Without `overlap`, one temporary holds the whole weight in `T` and
/// one GEMM follows; with it, row blocks dequantised on its side stream overlap their GEMMs
/// (module docs). Either way temporaries of the weight's size in `T` are allocated (on the side
/// stream's account when overlapping) and freed in stream order.
///
/// Shape errors name what is wrong; an overlap while either stream records a graph is refused
/// ([`Stream::fork`]).
#[allow(clippy::too_many_arguments)]
pub fn dequant_gemm<T: GemmElement>(
    format: BlockFormat,
    w: &DeviceBuffer<u8>,
    rows: usize,
    inp: usize,
    x: &DeviceBuffer<T>,
    tokens: usize,
    y: &mut DeviceBuffer<T>,
    path: GemmPath,
    overlap: Option<Overlap<'_>>,
) -> Result<()> {
    let elems = format.block_elems();
    ensure(inp.is_multiple_of(elems), KERNEL, || {
        format!("in = {inp} is not a whole number of {elems}-element {} blocks", format.name())
    })?;
    let weight = rows.checked_mul(inp).ok_or_else(|| shape(format!("{rows} x {inp} overflows usize")))?;
    check_dequantize(format, w.len(), weight)?;
    let row_blocks = overlap.map_or(1, |o| o.row_blocks);
    ensure(row_blocks >= 1, KERNEL, || "row_blocks must be at least 1".into())?;
    let desc = GemmDesc::linear(tokens, rows, inp);
    desc.check_buffers(x.len(), weight, y.len()).map_err(shape)?;
    if desc.is_empty() {
        return Ok(());
    }
    // (K = 0 takes the sequential path: nothing to decode, and the GEMM writes C = 0.)
    let Some(side) = overlap.map(|o| o.side).filter(|s| !s.same_as(y.stream()) && weight > 0) else {
        let mut full = y.stream().alloc::<T>(weight)?;
        dequantize(format, w, &mut full)?;
        gemm_with(path, &desc, x, &full, y)?;
        return Ok(());
    };
    let main = y.stream().clone();
    let per_block = rows.div_ceil(row_blocks).div_ceil(ROW_ALIGN) * ROW_ALIGN;
    let blocks_a_row = inp / elems;
    main.fork(side, || -> Result<()> {
        // Every row block's dequantisation first, on the side stream, each with its event...
        let mut decoded = Vec::with_capacity(row_blocks);
        for first in (0..rows).step_by(per_block) {
            let count = per_block.min(rows - first);
            let mut block = side.alloc::<T>(count * inp)?;
            dequantize_range(format, w, first * blocks_a_row, &mut block)?;
            decoded.push((first, count, block, side.record_event()?));
        }
        // ...then each block's GEMM on the main stream, after its own event only: columns
        // `first .. first + count` of `y`.
        for (first, count, block, ready) in &decoded {
            main.wait_event(ready)?;
            let part = GemmDesc::linear(tokens, *count, inp)
                .with_leading_dims(inp, inp, rows)
                .with_offsets(0, 0, *first);
            gemm_with(path, &part, x, block, y)?;
        }
        Ok(())
        // `decoded` is dropped here: freed on the side stream after the fork's closing join.
    })?
}

fn shape(message: String) -> crate::error::KernelError {
    crate::error::KernelError::Shape { kernel: KERNEL, message }
}
