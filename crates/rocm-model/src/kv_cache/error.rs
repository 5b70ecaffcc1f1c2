//! What the KV-cache bookkeeping refuses, and what `validate` finds wrong.

use std::fmt;

use super::allocator::BlockId;
use super::table::SeqId;

/// A refusal of the block allocator or the block tables. Every refusal leaves the cache as it
/// was: operations check everything they need before changing anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvCacheError {
    /// Not enough free blocks for the request.
    #[error("the KV cache is full: {needed} block(s) needed, {free} free of {total}")]
    CacheFull { needed: usize, free: usize, total: usize },

    #[error("sequence {0} is not in the KV cache")]
    SequenceNotFound(SeqId),

    /// Appending nothing is refused rather than ignored: a scheduler that asks for it has lost
    /// track of a sequence, and saying so here is cheaper than finding out in the output.
    #[error("appending zero tokens to sequence {0}")]
    EmptyAppend(SeqId),

    #[error("block {block} does not exist: the cache has {total} blocks")]
    BlockOutOfRange { block: BlockId, total: usize },

    /// Retaining or releasing a block nobody holds (a double free, typically).
    #[error("block {0} is free: only an allocated block can be retained or released")]
    BlockNotAllocated(BlockId),

    #[error("block {0} is shared by 2^32 - 1 tables already")]
    RefcountOverflow(BlockId),

    #[error("invalid KV cache configuration: {0}")]
    InvalidConfig(String),

    /// A packed block table narrower than one of its sequences' tables.
    #[error("sequence {seq} has {blocks} blocks, more than the packed table's {width} columns")]
    TableTooNarrow { seq: SeqId, blocks: usize, width: usize },

    /// The state breaks an invariant (found by `validate`, or when restoring a snapshot).
    #[error("block table corrupt: {0}")]
    BlockTableCorrupt(Corruption),
}

/// Which invariant of the cache's state does not hold (see `docs/kv_cache.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// A table (`seq`) or the free list (`seq: None`) names a block past the end of the cache.
    BlockOutOfRange { seq: Option<SeqId>, block: BlockId, total: usize },
    /// A sequence's table lists the same block twice.
    DuplicateInTable { seq: SeqId, block: BlockId },
    /// The free list lists a block twice.
    DuplicateInFreeList { block: BlockId },
    /// A block on the free list is held (its reference count is not zero).
    FreeBlockInUse { block: BlockId, refcount: u32 },
    /// A block with no references is missing from the free list: it could never be handed out
    /// again.
    LostBlock { block: BlockId },
    /// A block's reference count differs from the number of tables holding it.
    RefcountMismatch { block: BlockId, refcount: u32, tables: usize },
    /// A table does not have exactly `ceil(tokens / block_size)` blocks.
    LengthMismatch { seq: SeqId, tokens: usize, blocks: usize, block_size: usize },
    /// Two sequences share an id.
    DuplicateSequence { seq: SeqId },
    /// The next id to hand out is not past every sequence's id (it would be reused).
    IdCounterBehind { next_id: u64, seq: SeqId },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Corruption::BlockOutOfRange { seq: Some(seq), block, total } => {
                write!(f, "sequence {seq} holds block {block}, but the cache has {total} blocks")
            }
            Corruption::BlockOutOfRange { seq: None, block, total } => {
                write!(f, "the free list holds block {block}, but the cache has {total} blocks")
            }
            Corruption::DuplicateInTable { seq, block } => {
                write!(f, "sequence {seq} lists block {block} twice")
            }
            Corruption::DuplicateInFreeList { block } => write!(f, "the free list holds block {block} twice"),
            Corruption::FreeBlockInUse { block, refcount } => {
                write!(f, "block {block} is on the free list with reference count {refcount}")
            }
            Corruption::LostBlock { block } => {
                write!(f, "block {block} has no references but is not on the free list")
            }
            Corruption::RefcountMismatch { block, refcount, tables } => {
                write!(f, "block {block} has reference count {refcount} but {tables} table(s) hold it")
            }
            Corruption::LengthMismatch { seq, tokens, blocks, block_size } => write!(
                f,
                "sequence {seq} has {tokens} tokens in {blocks} block(s); blocks of {block_size} need {}",
                tokens.div_ceil(block_size)
            ),
            Corruption::DuplicateSequence { seq } => write!(f, "sequence {seq} appears twice"),
            Corruption::IdCounterBehind { next_id, seq } => {
                write!(f, "the next sequence id {next_id} is not past sequence {seq}")
            }
        }
    }
}

pub type Result<T, E = KvCacheError> = std::result::Result<T, E>;

/// Shorthand for a corruption error.
pub(crate) fn corrupt<T>(problem: Corruption) -> Result<T> {
    Err(KvCacheError::BlockTableCorrupt(problem))
}
