//! The k split of `kernels/quant_matmul_mma.hip` (the matrix-core products of 9 to 32 vectors):
//! when a product has too few 64-row blocks to fill the device (a Llama-3-8B layer's O and
//! down products have 64, an H100 holds 264), each row block is cut along `k` into parts, each
//! part a block's unit of work; the last part of a row block to finish adds the parts' f32
//! totals in order and stores the outputs (the kernel's header and `rf_qmmm_split` in
//! `rocmforge_quant_matvec_abi.h` say how).
//!
//! One split for the whole launch (`splits_for`), from the rows of all its products, `k`, the
//! batch and the device: the parts that make the most loaded SM's share of the rows smallest,
//! within one wave of resident blocks, and none where no split makes it smaller. Measured on an
//! H200 (docs/kernels/quant_matvec.md, v8): the down product (64 row blocks) went from 71 to 44
//! us at 32 vectors in 4 parts (q4_K) and from 78 to 53 in 2 (q6_K, one block an SM), while a
//! layer's Q, K and V together (96 row blocks: 2 parts leave some SMs with a whole row block's
//! work) lost 3-5 us in 2 parts. So a product's bits in a split launch may differ from its bits
//! alone, in the order of its f32 sums only.
//!
//! The parts' totals and the row blocks' arrival counters live in a [`SplitScratch`]. A decode
//! workspace allocates one and lends it to every product of a step, so a recorded step
//! allocates nothing; a product given none allocates a temporary. The split never depends on
//! which.

use std::sync::OnceLock;

use rocm_runtime::{DeviceBuffer, DeviceInfo, MatrixCores, Stream};

use crate::abi::quant_matvec as abi;
use crate::error::Result;

/// Rows of a `quant_matmul_mma` block, vectors of its pass.
const ROWS: usize = abi::RF_QMMM_ROWS as usize;
const PASS: usize = abi::RF_QMMM_BATCH as usize;
/// Blocks of the kernel an SM holds at most: its launch bounds leave registers for two.
const BLOCKS_AN_SM: usize = 2;
/// Parts a row block is cut into at most, and the fewest chunks of `k` a part takes by default
/// (a part of one chunk would leave its two-stage pipeline nothing to overlap).
const MAX_SPLITS: usize = abi::RF_QMMM_MAX_SPLITS as usize;
const MIN_CHUNKS: usize = 2;

/// Set to `0` to turn the split off, or to a number of chunks to make that the fewest a part
/// takes (default 2): the A/B switch of the benchmarks (docs/kernels/quant_matvec.md, v8).
pub const K_SPLIT_ENV: &str = "ROCMFORGE_K_SPLIT";

/// The fewest chunks a part takes, `None` with the split off ([`K_SPLIT_ENV`], read once a
/// process; a value that is not a number leaves the default).
fn min_chunks() -> Option<usize> {
    static MIN: OnceLock<Option<usize>> = OnceLock::new();
    *MIN.get_or_init(|| match std::env::var(K_SPLIT_ENV).map(|v| v.trim().parse::<usize>()) {
        Ok(Ok(0)) => None,
        Ok(Ok(n)) => Some(n),
        _ => Some(MIN_CHUNKS),
    })
}
/// f32 totals a part stores: its 32 vectors x 64 rows.
const PART: usize = PASS * ROWS;

/// Where the parts of split products keep their totals, and their row blocks' arrival counters
/// (zero between launches: the last part of each row block sets its counter back). Enough for
/// any launch on the device it was allocated for: 2 MiB on an H200 (132 SMs).
#[derive(Debug)]
pub struct SplitScratch {
    pub(super) partial: DeviceBuffer<f32>,
    pub(super) arrivals: DeviceBuffer<u32>,
}

impl SplitScratch {
    /// A scratch for products on `stream`'s device, queued on `stream`. Empty on a device whose
    /// products never split (no `mma.sync` matrix cores).
    pub fn new(stream: &Stream) -> Result<SplitScratch> {
        let units = most_units(stream.backend().info());
        Ok(SplitScratch { partial: stream.alloc(units * PART)?, arrivals: stream.alloc_zeroed(units)? })
    }

    /// Device bytes it holds.
    pub fn bytes(&self) -> usize {
        self.partial.len() * size_of::<f32>() + self.arrivals.len() * size_of::<u32>()
    }

    /// Whether a product of `batch` vectors can split (`quant_matmul_mma`'s batches: one pass of
    /// 9 to 32 vectors), so whether a workspace for such steps wants a scratch.
    pub fn wanted(batch: usize) -> bool {
        (abi::RF_QMV_MAX_BATCH as usize + 1..=PASS).contains(&batch)
    }

    /// Whether it has room for a launch of `units` split units over `row_blocks` split row blocks.
    pub(super) fn holds(&self, units: usize, row_blocks: usize) -> bool {
        self.partial.len() >= units * PART && self.arrivals.len() >= row_blocks
    }
}

/// Units a split launch can have on `info`'s device: at most as many as the device holds
/// blocks at once ([`splits_for`], [`resident_blocks`]).
fn most_units(info: &DeviceInfo) -> usize {
    match info.matrix_cores {
        MatrixCores::MmaSync => info.compute_units as usize * BLOCKS_AN_SM,
        _ => 0,
    }
}

/// Blocks of `shared` bytes of dynamic shared memory the device holds at once: two an SM (the
/// launch bounds), fewer where shared memory runs out. An SM's shared memory is taken as the
/// per-block opt-in limit plus the 1 KiB the driver keeps for each block (so on sm_80 and
/// sm_90: 164 and 228 KiB).
pub(super) fn resident_blocks(info: &DeviceInfo, shared: usize) -> usize {
    let per_sm = (info.shared_mem_per_block_optin as usize + 1024) / (shared + 1024);
    info.compute_units as usize * per_sm.clamp(1, BLOCKS_AN_SM)
}

/// Parts each row block of a launch's products is cut into, for `row_blocks` row blocks (all
/// its products'), rows of `chunks` chunks and `batch` vectors, on a device of `sms` SMs
/// holding `resident` blocks at once. Counting an SM's work as its parts (`ceil(row_blocks
/// splits / sms)` of them, each `1 / splits` of a row block: blocks sharing an SM share its
/// issue slots, v7's profile), the split that makes it smallest (the most parts where several
/// do), within one wave (`row_blocks splits <= resident`), at most [`MAX_SPLITS`] parts of at
/// least [`MIN_CHUNKS`] chunks ([`K_SPLIT_ENV`] may change that); 1 (no split) where none
/// makes it smaller, and for more than one pass of vectors.
pub(super) fn splits_for(
    sms: usize,
    resident: usize,
    row_blocks: usize,
    chunks: usize,
    batch: usize,
) -> usize {
    match min_chunks() {
        Some(min) => splits_with(sms, resident, row_blocks, chunks, batch, min),
        None => 1,
    }
}

/// [`splits_for`] with parts of at least `min_chunks` chunks.
fn splits_with(
    sms: usize,
    resident: usize,
    row_blocks: usize,
    chunks: usize,
    batch: usize,
    min_chunks: usize,
) -> usize {
    if batch > PASS || row_blocks == 0 || sms == 0 {
        return 1;
    }
    let most = (resident / row_blocks).min(chunks / min_chunks.max(1)).min(MAX_SPLITS);
    // An SM's work in split s is parts(s) / s row blocks: s beats t when parts(s) t < parts(t) s,
    // and ties with another split (never with none: a split has a cost of its own) when equal.
    let parts = |s: usize| (row_blocks * s).div_ceil(sms);
    (2..=most).fold(1, |best, s| {
        let (new, old) = (parts(s) * best, parts(best) * s);
        if new < old || (best > 1 && new == old) { s } else { best }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_rows_split_until_the_device_is_full() {
        // An H100's 132 SMs, two blocks each; k = 4096 in chunks of 512 (8) and 14336 (28).
        let (sms, resident) = (132, 264);
        let blocks = |rows: &[usize]| rows.iter().map(|r| r.div_ceil(ROWS)).sum::<usize>();
        let splits = |rows: &[usize], chunks, batch| {
            splits_with(sms, resident, blocks(rows), chunks, batch, MIN_CHUNKS)
        };
        assert_eq!(blocks(&[4096, 1024, 1024]), 96);
        assert_eq!(blocks(&[97, 1]), 3);
        assert_eq!(splits(&[4096], 8, 32), 4, "O: 64 row blocks, two parts of a quarter an SM");
        assert_eq!(splits(&[4096], 28, 32), 4, "down");
        assert_eq!(splits(&[4096, 1024, 1024], 8, 32), 1, "Q, K, V: 2 parts leave SMs a whole row block");
        assert_eq!(splits(&[1024], 8, 32), 4, "K alone: parts of two chunks");
        assert_eq!(splits(&[1024], 56, 17), 8, "at most 8 parts");
        assert_eq!(splits(&[14336, 14336], 8, 32), 1, "gate and up fill the device");
        assert_eq!(splits(&[97], 3, 32), 1, "three chunks make one part of two or more");
        assert_eq!(splits(&[4096], 8, 33), 1, "two passes never split");
        assert_eq!(splits_with(sms, resident, 0, 8, 32, MIN_CHUNKS), 1);
        assert_eq!(splits_with(sms, resident, blocks(&[4096]), 8, 32, 4), 2, "parts of 4 chunks or more");
        // One block an SM (q6_K's shared memory): two parts of the down product's 64 row blocks.
        assert_eq!(splits_with(sms, sms, blocks(&[4096]), 28, 32, MIN_CHUNKS), 2);
        assert_eq!(splits_with(sms, sms, blocks(&[4096, 1024, 1024]), 8, 32, MIN_CHUNKS), 1);
    }
}
