//! Block tables of a batch, packed the way paged-attention kernels read them.

use super::error::{KvCacheError, Result};
use super::table::{PagedCache, SeqId};

/// The entry that pads a row of a packed block table past its sequence's blocks. Negative, so a
/// kernel that checks `0 <= id < num_blocks` before reading (as rocmforge's do) can never turn a
/// padding entry into a read of someone else's block.
pub const PAD_BLOCK: i32 = -1;

/// The block tables of a batch as a paged-attention kernel takes them:
///
/// - `block_tables`: `[batch, max_blocks]` `i32`, row-major. Row `b` holds the physical block ids
///   of sequence `b` of the batch in token order, then [`PAD_BLOCK`] up to `max_blocks`. Key `j`
///   of sequence `b` is slot `block_tables[b * max_blocks + j / block_size] * block_size +
///   j % block_size` of the cache tensors.
/// - `context_lens`: `[batch]` `i32`: the tokens of sequence `b` (its keys).
///
/// `max_blocks` is at least 1 even when every sequence is empty: a zero-length device buffer
/// has a null address, which a kernel may take for "no block table" (contiguous K/V).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedBlockTables {
    pub batch: usize,
    /// Columns of `block_tables`.
    pub max_blocks: usize,
    pub block_size: usize,
    pub block_tables: Vec<i32>,
    pub context_lens: Vec<i32>,
}

impl PackedBlockTables {
    /// Row `b` (sequence `b`'s blocks, then padding).
    pub fn row(&self, b: usize) -> Option<&[i32]> {
        (b < self.batch).then(|| &self.block_tables[b * self.max_blocks..(b + 1) * self.max_blocks])
    }
}

impl PagedCache {
    /// Packs the block tables of `seqs` (in that order; a sequence may appear more than once)
    /// as wide as the longest of them (at least one column). See [`PackedBlockTables`].
    pub fn pack_block_tables(&self, seqs: &[SeqId]) -> Result<PackedBlockTables> {
        let mut width = 1;
        for &seq in seqs {
            width = width.max(self.block_table(seq)?.len());
        }
        self.pack_block_tables_with_width(seqs, width)
    }

    /// The same with a fixed number of columns, for kernels (or captured launches) that take a
    /// fixed `max_blocks`. A sequence with more blocks is [`KvCacheError::TableTooNarrow`].
    pub fn pack_block_tables_with_width(
        &self,
        seqs: &[SeqId],
        max_blocks: usize,
    ) -> Result<PackedBlockTables> {
        if max_blocks == 0 {
            return Err(KvCacheError::InvalidConfig(
                "a packed block table needs at least one column (an empty device buffer is a null pointer)"
                    .into(),
            ));
        }
        let cells = seqs.len().checked_mul(max_blocks).ok_or_else(|| {
            KvCacheError::InvalidConfig(format!("{} rows of {max_blocks} columns overflow usize", seqs.len()))
        })?;
        // Check every sequence before allocating the table.
        for &seq in seqs {
            let blocks = self.block_table(seq)?.len();
            if blocks > max_blocks {
                return Err(KvCacheError::TableTooNarrow { seq, blocks, width: max_blocks });
            }
        }
        let mut block_tables = vec![PAD_BLOCK; cells];
        let mut context_lens = Vec::with_capacity(seqs.len());
        for (row, &seq) in block_tables.chunks_exact_mut(max_blocks).zip(seqs) {
            let table = self.block_table(seq)?;
            for (cell, block) in row.iter_mut().zip(table) {
                *cell = block.as_i32();
            }
            // Lengths are at most the cache's slots, below i32::MAX.
            context_lens.push(self.seq_len(seq)? as i32);
        }
        Ok(PackedBlockTables {
            batch: seqs.len(),
            max_blocks,
            block_size: self.block_size(),
            block_tables,
            context_lens,
        })
    }
}
