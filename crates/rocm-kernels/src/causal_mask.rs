//! `causal_mask` (`kernels/causal_mask.hip`): fills the future of attention scores.
//!
//! Scores form `batch` matrices of `seq_q` rows (queries) by `seq_k` columns (keys). Element
//! `(b, i, j)` sits at `b * batch_stride + i * row_stride + j` and is set to `fill` (default
//! `-inf`) where `j > i + offset`; every other element keeps its bits. Of those, only the few
//! that share a 32-byte sector with their row's first masked element (at most 7 f32 or 15
//! f16/bf16 a row) are read and written back, unchanged, so that the sector is stored whole
//! (a partial sector costs the memory a read-modify-write: see `kernels/causal_mask.hip`);
//! nothing else is read, and nothing outside the rows is touched.
//!
//! The default offset, `seq_k - seq_q`, is the KV-cache case: the `seq_q` queries are the last
//! `seq_q` tokens of a `seq_k`-token sequence, so query `i` sees keys `0..=i + seq_k - seq_q`.
//! Offset 0 is the plain lower-triangular mask; negative offsets mask whole rows.

use rocm_runtime::{DeviceBuffer, LaunchConfig};

use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader;

const KERNEL: &str = "causal_mask";
const MODULE: KernelModule = KernelModule::CausalMask;

/// Threads per block (whole warps), and blocks per compute unit of the grid: the kernel's warps
/// walk their (row, column chunk) items grid-stride, a few items each.
const BLOCK: usize = 256;
const BLOCKS_PER_CU: usize = 32;

/// 16-byte stores a lane makes in one work item at most.
const ITEM_VECTORS_PER_LANE: usize = 4;

/// Columns of one work item (one warp's job), `warp_vector` being the elements one warp covers
/// with one 16-byte store a lane. Items are short, fixed-length column chunks so that the
/// triangle's rows, whose masked parts run from nothing to the whole row, become many items of
/// equal work: whole-row items (v2) left a few long rows to single warps at the end of the grid.
/// With fewer items than warps in the grid (decode: a few long rows) the chunks shrink to one
/// store a lane, so the rows still spread over the whole device. Rows shorter than a chunk are
/// one item.
fn item_columns(rows: usize, seq_k: usize, warp_vector: usize, grid_warps: usize) -> usize {
    let warp_vector = warp_vector.max(1);
    let long = warp_vector * ITEM_VECTORS_PER_LANE;
    let chunk = if rows.saturating_mul(seq_k.div_ceil(long)) >= grid_warps { long } else { warp_vector };
    chunk.min(seq_k).max(1)
}

/// Items between a warp's successive items: the grid's warps, less the fewest that make it
/// coprime with the chunks a row, so that each warp's items move through every chunk column
/// (a multiple of it would pin each warp to one column: the warps on the last columns, masked
/// in almost every row, would do several times the others' work). At most `chunks_per_row - 1`
/// warps idle, out of thousands.
fn item_step(grid_warps: usize, chunks_per_row: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut step = grid_warps.max(1);
    while step > 1 && gcd(step, chunks_per_row.max(1)) != 1 {
        step -= 1;
    }
    step
}

/// Shape, layout, offset and fill value of a causal mask.
///
/// Strides are in elements. `row_stride` defaults to `seq_k` and `batch_stride` to
/// `seq_q * row_stride` (contiguous `[batch, seq_q, seq_k]`); `[seq_q, heads, seq_k]` layouts
/// are `row_stride = heads * seq_k`, `batch_stride = seq_k`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CausalMask {
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    offset: i64,
    row_stride: Option<usize>,
    batch_stride: Option<usize>,
    fill: f32,
}

impl CausalMask {
    /// Contiguous `[batch, seq_q, seq_k]`, offset `seq_k - seq_q`, fill `-inf`.
    pub fn new(batch: usize, seq_q: usize, seq_k: usize) -> Self {
        let offset = to_i64(seq_k).saturating_sub(to_i64(seq_q));
        CausalMask {
            batch,
            seq_q,
            seq_k,
            offset,
            row_stride: None,
            batch_stride: None,
            fill: f32::NEG_INFINITY,
        }
    }

    /// Masks `(i, j)` where `j > i + offset`.
    pub fn with_offset(self, offset: i64) -> Self {
        CausalMask { offset, ..self }
    }

    pub fn with_row_stride(self, stride: usize) -> Self {
        CausalMask { row_stride: Some(stride), ..self }
    }

    pub fn with_batch_stride(self, stride: usize) -> Self {
        CausalMask { batch_stride: Some(stride), ..self }
    }

    /// The value written to masked elements, rounded to the storage type (f16 overflows to
    /// `-inf` below -65504).
    pub fn with_fill(self, fill: f32) -> Self {
        CausalMask { fill, ..self }
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    pub fn seq_q(&self) -> usize {
        self.seq_q
    }

    pub fn seq_k(&self) -> usize {
        self.seq_k
    }

    pub fn offset(&self) -> i64 {
        self.offset
    }

    pub fn fill(&self) -> f32 {
        self.fill
    }

    pub fn row_stride(&self) -> usize {
        self.row_stride.unwrap_or(self.seq_k)
    }

    pub fn batch_stride(&self) -> usize {
        self.batch_stride.unwrap_or_else(|| self.seq_q.saturating_mul(self.row_stride()))
    }

    /// First masked column of row `i` (`seq_k` when none is).
    pub fn first_masked(&self, i: usize) -> usize {
        let first = to_i64(i).saturating_add(self.offset).saturating_add(1);
        if first <= 0 { 0 } else { (first as u64).min(self.seq_k as u64) as usize }
    }

    /// Elements the mask writes: the minimal traffic of the kernel.
    pub fn masked_elements(&self) -> u64 {
        let per_matrix: u64 = (0..self.seq_q).map(|i| (self.seq_k - self.first_masked(i)) as u64).sum();
        per_matrix * self.batch as u64
    }

    /// Elements a buffer must hold: one past the last element of the last row.
    pub fn required_len(&self) -> Option<usize> {
        if self.batch == 0 {
            return Some(0);
        }
        let last_batch = (self.batch - 1).checked_mul(self.batch_stride())?;
        let last_row = self.seq_q.checked_sub(1)?.checked_mul(self.row_stride())?;
        last_batch.checked_add(last_row)?.checked_add(self.seq_k)
    }

    /// The offset the kernel gets: clamped to `[-seq_q, seq_k]`, which masks the same elements
    /// (`-seq_q` or less masks everything, `seq_k - 1` or more nothing) and keeps `i + offset + 1`
    /// far from overflow.
    fn kernel_offset(&self) -> i64 {
        self.offset.clamp(-to_i64(self.seq_q), to_i64(self.seq_k))
    }

    fn check(&self, len: usize) -> Result<()> {
        ensure(self.seq_q > 0 && self.seq_k > 0, KERNEL, || {
            format!("seq_q and seq_k must be at least 1, got {} and {}", self.seq_q, self.seq_k)
        })?;
        let (rs, bs) = (self.row_stride(), self.batch_stride());
        ensure(rs >= self.seq_k, KERNEL, || format!("row stride {rs} is less than seq_k = {}", self.seq_k))?;
        if self.batch > 1 {
            // Matrices must not overlap: one after another, or interleaved row by row.
            let matrix = (self.seq_q - 1).checked_mul(rs).and_then(|m| m.checked_add(self.seq_k));
            let sequential = matrix.is_some_and(|m| bs >= m);
            let interleaved = bs >= self.seq_k
                && (self.batch - 1)
                    .checked_mul(bs)
                    .and_then(|b| b.checked_add(self.seq_k))
                    .is_some_and(|span| self.seq_q == 1 || rs >= span);
            ensure(sequential || interleaved, KERNEL, || {
                format!(
                    "batch stride {bs} and row stride {rs} make the {} matrices of {} x {} overlap",
                    self.batch, self.seq_q, self.seq_k
                )
            })?;
        }
        let need = self.required_len();
        ensure(need.is_some_and(|need| len >= need), KERNEL, || match need {
            Some(need) => format!("scores hold {len} elements; the mask needs {need}"),
            None => "the mask's extent overflows usize".into(),
        })
    }

    /// Writes the mask into `scores`, queued on its stream.
    pub fn apply<T: Dtype>(&self, scores: &mut DeviceBuffer<T>) -> Result<()> {
        self.check(scores.len())?;
        if self.batch == 0 {
            return Ok(());
        }
        let rows = self.batch.checked_mul(self.seq_q).ok_or_else(|| KernelError::Shape {
            kernel: KERNEL,
            message: format!("{} x {} rows overflow usize", self.batch, self.seq_q),
        })?;
        let stream = scores.stream().clone();
        let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>("rf_causal_mask"))?;
        let info = stream.backend().info();
        let warp = info.warp_size.max(1) as usize;
        let block = (BLOCK.min(kernel.max_threads_per_block() as usize).max(warp) / warp * warp).max(1);
        let warps_per_block = block / warp;
        let cus = info.compute_units.max(1) as usize;
        let chunk = item_columns(
            rows,
            self.seq_k,
            warp * (16 / size_of::<T>()),
            cus * BLOCKS_PER_CU * warps_per_block,
        );
        let chunks_per_row = self.seq_k.div_ceil(chunk);
        let items = rows.saturating_mul(chunks_per_row);
        let grid = items
            .div_ceil(warps_per_block)
            .clamp(1, cus * BLOCKS_PER_CU)
            .min(info.max_grid[0].max(1) as usize);
        let step = item_step(grid * warps_per_block, chunks_per_row);
        let config =
            LaunchConfig { grid: [grid as u32, 1, 1], block: [block as u32, 1, 1], shared_mem_bytes: 0 };
        // SAFETY: rf_causal_mask_<T>(T* scores, u64 batch, u64 seq_q, u64 seq_k, u64 batch_stride,
        // u64 row_stride, u64 chunk, u64 step, i64 offset, float fill) writes only elements b *
        // batch_stride + i * row_stride + j with b < batch, i < seq_q, j < seq_k: below
        // required_len() <= scores.len() (checked above). The offset is clamped as the kernel
        // requires; chunk >= 1; 1 <= step <= the grid's warps; the block is whole warps.
        unsafe {
            stream
                .launch(&kernel)
                .buffer_mut(scores)
                .arg(self.batch as u64)
                .arg(self.seq_q as u64)
                .arg(self.seq_k as u64)
                .arg(self.batch_stride() as u64)
                .arg(self.row_stride() as u64)
                .arg(chunk as u64)
                .arg(step as u64)
                .arg(self.kernel_offset())
                .arg(self.fill)
                .launch(config)?
        };
        Ok(())
    }
}

fn to_i64(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Masks contiguous `[batch, seq_q, seq_k]` scores (exactly that many elements) with `-inf`
/// where `j > i + seq_k - seq_q`: the causal mask of a prefill (`seq_q == seq_k`) or of new
/// tokens after a KV cache.
pub fn causal_mask<T: Dtype>(
    scores: &mut DeviceBuffer<T>,
    batch: usize,
    seq_q: usize,
    seq_k: usize,
) -> Result<()> {
    let n = batch.checked_mul(seq_q).and_then(|r| r.checked_mul(seq_k));
    ensure(n == Some(scores.len()), KERNEL, || {
        format!("scores have {} elements, expected {batch} x {seq_q} x {seq_k}", scores.len())
    })?;
    CausalMask::new(batch, seq_q, seq_k).apply(scores)
}

/// CPU reference of [`CausalMask::apply`]: the same elements set to `fill` rounded to `T`.
pub fn causal_mask_reference<T: Dtype>(mask: &CausalMask, scores: &mut [T]) {
    mask.check(scores.len()).expect("causal mask reference: invalid shape");
    let fill = T::from_f32(mask.fill);
    for b in 0..mask.batch {
        for i in 0..mask.seq_q {
            let row = b * mask.batch_stride() + i * mask.row_stride();
            for j in 0..mask.seq_k {
                // Written as the definition, not through first_masked(), as an independent check.
                if j as i128 > i as i128 + mask.offset as i128 {
                    scores[row + j] = fill;
                }
            }
        }
    }
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    every_dtype(MODULE, "rf_causal_mask")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(mask: &CausalMask, len: usize) -> Vec<f32> {
        let mut scores: Vec<f32> = (0..len).map(|v| v as f32).collect();
        causal_mask_reference(mask, &mut scores);
        scores
    }

    #[test]
    fn reference_masks_above_the_shifted_diagonal() {
        let inf = f32::NEG_INFINITY;
        // 2 queries after 1 cached token: offset 1.
        let m = CausalMask::new(1, 2, 3);
        assert_eq!(m.offset(), 1);
        assert_eq!(masked(&m, 6), [0.0, 1.0, inf, 3.0, 4.0, 5.0]);
        // Square, offset 0, two matrices, fill 0.
        let m = CausalMask::new(2, 2, 2).with_fill(-7.0);
        assert_eq!(masked(&m, 8), [0.0, -7.0, 2.0, 3.0, 4.0, -7.0, 6.0, 7.0]);
        // Negative offset masks whole rows; huge offsets mask nothing, tiny ones everything.
        let m = CausalMask::new(1, 2, 2).with_offset(-1);
        assert_eq!(masked(&m, 4), [inf, inf, 2.0, inf]);
        assert_eq!(masked(&m.with_offset(i64::MAX), 4), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(masked(&m.with_offset(i64::MIN), 4), [inf; 4]);
    }

    #[test]
    fn reference_leaves_padding_and_other_heads_alone() {
        let inf = f32::NEG_INFINITY;
        // [seq_q = 2, heads = 2, seq_k = 2] with a padding column: row stride 5, batch stride 2.
        let m = CausalMask::new(2, 2, 2).with_row_stride(5).with_batch_stride(2).with_offset(0);
        assert_eq!(m.required_len(), Some(9));
        assert_eq!(masked(&m, 10), [0.0, inf, 2.0, inf, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    }

    #[test]
    fn masked_elements_and_first_masked_agree_with_the_reference() {
        for (sq, sk, off) in
            [(7, 127, None), (5, 5, Some(0)), (4, 9, Some(-2)), (3, 2, Some(-9)), (2, 3, Some(50))]
        {
            let mut m = CausalMask::new(3, sq, sk);
            if let Some(off) = off {
                m = m.with_offset(off);
            }
            let scores = masked(&m, 3 * sq * sk);
            let infs = scores.iter().filter(|v| v.is_infinite()).count() as u64;
            assert_eq!(m.masked_elements(), infs, "{m:?}");
            assert_eq!(m.with_offset(m.kernel_offset()).masked_elements(), infs, "clamping changes nothing");
        }
    }

    #[test]
    fn items_are_short_fixed_chunks() {
        // The benchmark shape: 131 072 rows of 4096 in f16 (256 elements a warp-wide store):
        // chunks of four stores a lane, 4 items a row.
        assert_eq!(item_columns(32 * 4096, 4096, 256, 132 * 32 * 8), 1024);
        // Decode with a long cache: 32 rows of 131 072 in 1024-column chunks would be 4096 items
        // for 33 792 warps, so one store a lane.
        assert_eq!(item_columns(32, 131_072, 256, 132 * 32 * 8), 256);
        assert_eq!(item_columns(4, 1 << 20, 256, 132 * 32 * 8), 256);
        // Many rows: the long chunk whatever the row length.
        assert_eq!(item_columns(1000, 65_536, 256, 33_792), 1024);
        // Rows shorter than a chunk are one item; chunks never exceed the row.
        assert_eq!(item_columns(1, 100, 256, 1000), 100);
        assert_eq!(item_columns(1, 300, 256, 1000), 256);
        assert_eq!(item_columns(100_000, 300, 256, 1000), 300);
        assert_eq!(item_columns(0, 7, 256, 1000), 7);
    }

    #[test]
    fn the_item_step_is_coprime_with_the_chunks_a_row() {
        // The benchmark: 132 x 32 blocks of 8 warps, 4 (f16) or 8 (f32) chunks a row.
        assert_eq!(item_step(33_792, 4), 33_791);
        assert_eq!(item_step(33_792, 8), 33_791);
        assert_eq!(item_step(33_792, 1), 33_792);
        assert_eq!(item_step(30, 6), 29);
        assert_eq!(item_step(35, 7), 34);
        assert_eq!(item_step(1, 8), 1);
        for warps in 1..200 {
            for chunks in 1..40 {
                let s = item_step(warps, chunks);
                assert!(s >= 1 && s <= warps && warps - s < chunks.max(1));
            }
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        let m = CausalMask::new(2, 3, 4);
        assert!(m.check(24).is_ok());
        assert!(m.check(23).unwrap_err().to_string().contains("needs 24"));
        assert!(CausalMask::new(2, 0, 4).check(24).is_err());
        assert!(CausalMask::new(2, 3, 0).check(24).is_err());
        assert!(m.with_row_stride(3).check(100).is_err());
        assert!(m.with_batch_stride(4).check(100).unwrap_err().to_string().contains("overlap"));
        // Interleaved heads: row stride 8 holds both heads' rows of 4.
        assert!(m.with_row_stride(8).with_batch_stride(4).check(24).is_ok());
        assert!(m.with_row_stride(7).with_batch_stride(4).check(100).is_err());
        assert!(CausalMask::new(0, 3, 4).check(0).is_ok());
        assert!(CausalMask::new(usize::MAX, 3, 4).check(usize::MAX).is_err());
    }
}
