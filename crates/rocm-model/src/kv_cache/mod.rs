//! The paged KV cache: host-side bookkeeping and the device tensors it indexes.
//!
//! The cache's memory is a pool of fixed-size blocks of `block_size` token slots. Each sequence
//! has a block table (its blocks in token order), so its keys and values need not be contiguous
//! and no sequence reserves memory for tokens it has not produced.
//!
//! - [`BlockAllocator`]: the pool, a free list and a reference count a block.
//! - [`PagedCache`]: sequences and their tables. [`PagedCache::append`] takes blocks as needed
//!   and returns each new token's slot ([`SlotMapping`]) for the cache-write kernel;
//!   [`PagedCache::fork`] shares every block of a sequence (copy-on-write: the first write into
//!   a shared, partly filled block reports a [`BlockCopy`] to perform first);
//!   [`PagedCache::validate`] checks every invariant.
//! - [`PackedBlockTables`]: a batch's tables as the `[batch, max_blocks]` `i32` array (padded
//!   with [`PAD_BLOCK`]) and the lengths that paged-attention kernels take.
//! - [`KvCacheTensors`]: per layer, K and V buffers of `[num_blocks, block_size, kv_heads,
//!   head_dim]`, allocated through the memory guard.
//!
//! ```
//! use rocm_model::kv_cache::{BlockCopy, BlockId, PagedCache};
//!
//! let mut cache = PagedCache::new(8, 4)?; // 8 blocks of 4 tokens
//! let a = cache.add_sequence();
//! let prompt = cache.append(a, 6)?; // blocks 0 and 1; slots 0..=5
//! assert_eq!(prompt.slot_ids(), [0, 1, 2, 3, 4, 5]);
//! let b = cache.fork(a)?; // shares blocks 0 and 1
//! let next = cache.append(b, 1)?; // block 1 is shared and partly filled: copy it first
//! assert_eq!(next.copy, Some(BlockCopy { src: BlockId::new(1), dst: BlockId::new(2), tokens: 2 }));
//! assert_eq!(next.slot_ids(), [2 * 4 + 2]);
//! let packed = cache.pack_block_tables(&[a, b])?;
//! assert_eq!(packed.block_tables, [0, 1, 0, 2]);
//! assert_eq!(packed.context_lens, [6, 7]);
//! cache.validate()?;
//! # Ok::<(), rocm_model::kv_cache::KvCacheError>(())
//! ```
//!
//! `docs/kv_cache.md` describes the design, the invariants and the layouts kernels rely on.

mod allocator;
mod batch;
mod device;
mod error;
mod table;

pub use allocator::{BlockAllocator, BlockId, MAX_SLOTS};
pub use batch::{PAD_BLOCK, PackedBlockTables};
pub use device::{KvCacheDeviceError, KvCacheShape, KvCacheTensors};
pub use error::{Corruption, KvCacheError, Result};
pub use table::{Append, BlockCopy, CacheSnapshot, PagedCache, SeqId, SequenceSnapshot, SlotMapping};

#[cfg(test)]
mod tests;
