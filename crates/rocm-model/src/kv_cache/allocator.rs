//! The block allocator: a fixed pool of equal blocks, a free list and a reference count a block.
//!
//! Reference counts, not owners, because a block may sit in several block tables at once: a
//! forked sequence shares its parent's blocks until one of them writes into a shared one
//! (copy-on-write, in `table.rs`). A block returns to the free list when its count drops to zero.

use std::fmt;

use super::error::{Corruption, KvCacheError, Result, corrupt};

/// The most slots (`num_blocks * block_size`) a cache may have. Kernels take block ids, slot
/// numbers and sequence lengths as `i32`; capping the slot count here means every one of those
/// the bookkeeping hands out converts without a check.
pub const MAX_SLOTS: usize = i32::MAX as usize;

/// A physical block of the cache: `block_size` consecutive slots, the first at slot
/// `index * block_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(u32);

impl BlockId {
    pub const fn new(index: u32) -> Self {
        BlockId(index)
    }

    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The id as kernels take it. Ids of a cache are below [`MAX_SLOTS`], so this is exact for
    /// them; a larger id (only constructible by hand) saturates to `i32::MAX`.
    pub fn as_i32(self) -> i32 {
        i32::try_from(self.0).unwrap_or(i32::MAX)
    }
}

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// `num_blocks` blocks of `block_size` tokens each, handed out and taken back by reference count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockAllocator {
    block_size: usize,
    refcounts: Vec<u32>,
    /// A stack: the last entry is handed out next, freed blocks go on top. O(1) both ways, and
    /// the order is predictable (0, 1, 2, ... at first; the block freed last comes back first).
    free: Vec<BlockId>,
}

/// Checks a pool size; the error names what is wrong.
pub(crate) fn check_config(num_blocks: usize, block_size: usize) -> Result<()> {
    if num_blocks == 0 || block_size == 0 {
        return Err(KvCacheError::InvalidConfig(format!(
            "{num_blocks} blocks of {block_size} tokens: both must be positive"
        )));
    }
    match num_blocks.checked_mul(block_size) {
        Some(slots) if slots <= MAX_SLOTS => Ok(()),
        _ => Err(KvCacheError::InvalidConfig(format!(
            "{num_blocks} blocks of {block_size} tokens exceed {MAX_SLOTS} slots (kernels index slots with i32)"
        ))),
    }
}

impl BlockAllocator {
    /// A pool of `num_blocks` free blocks of `block_size` tokens. Refused when either is zero or
    /// the slots exceed [`MAX_SLOTS`]. Blocks are handed out in order 0, 1, 2, ... at first.
    pub fn new(num_blocks: usize, block_size: usize) -> Result<Self> {
        check_config(num_blocks, block_size)?;
        // `check_config` bounds num_blocks by MAX_SLOTS < 2^31, so every index fits u32.
        let free = (0..num_blocks as u32).rev().map(BlockId).collect();
        Ok(BlockAllocator { block_size, refcounts: vec![0; num_blocks], free })
    }

    /// Rebuilds an allocator from saved parts without checking them (the caller validates).
    pub(crate) fn from_parts(block_size: usize, refcounts: Vec<u32>, free: Vec<BlockId>) -> Self {
        BlockAllocator { block_size, refcounts, free }
    }

    pub fn num_blocks(&self) -> usize {
        self.refcounts.len()
    }

    /// Tokens a block holds.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Blocks held by at least one table. Equals `num_blocks - num_free` while the state is valid.
    pub fn num_used(&self) -> usize {
        self.refcounts.iter().filter(|&&c| c > 0).count()
    }

    /// The free blocks, the next one handed out last.
    pub fn free_blocks(&self) -> &[BlockId] {
        &self.free
    }

    /// Every block's reference count, by index.
    pub fn refcounts(&self) -> &[u32] {
        &self.refcounts
    }

    /// How many tables hold `block` (0: free).
    pub fn refcount(&self, block: BlockId) -> Result<u32> {
        Ok(self.refcounts[self.check(block)?])
    }

    fn check(&self, block: BlockId) -> Result<usize> {
        if block.index() < self.refcounts.len() {
            Ok(block.index())
        } else {
            Err(KvCacheError::BlockOutOfRange { block, total: self.refcounts.len() })
        }
    }

    /// Takes a free block, with reference count 1.
    pub fn allocate(&mut self) -> Result<BlockId> {
        let Some(block) = self.free.pop() else {
            return Err(KvCacheError::CacheFull { needed: 1, free: 0, total: self.num_blocks() });
        };
        self.refcounts[block.index()] = 1;
        Ok(block)
    }

    /// Takes `n` free blocks, or none if fewer than `n` are free.
    pub fn allocate_many(&mut self, n: usize) -> Result<Vec<BlockId>> {
        if n > self.free.len() {
            return Err(KvCacheError::CacheFull {
                needed: n,
                free: self.free.len(),
                total: self.num_blocks(),
            });
        }
        let blocks = self.free.split_off(self.free.len() - n);
        // Hand them out in the order `allocate` would have.
        let blocks: Vec<_> = blocks.into_iter().rev().collect();
        for b in &blocks {
            self.refcounts[b.index()] = 1;
        }
        Ok(blocks)
    }

    /// One more table holds `block`; returns its new count. The block must be allocated.
    pub fn retain(&mut self, block: BlockId) -> Result<u32> {
        let i = self.check(block)?;
        let count = &mut self.refcounts[i];
        if *count == 0 {
            return Err(KvCacheError::BlockNotAllocated(block));
        }
        *count = count.checked_add(1).ok_or(KvCacheError::RefcountOverflow(block))?;
        Ok(*count)
    }

    /// One table fewer holds `block`; returns whether that freed it. Releasing a free block (a
    /// double free) is an error and changes nothing.
    pub fn release(&mut self, block: BlockId) -> Result<bool> {
        let i = self.check(block)?;
        let count = &mut self.refcounts[i];
        if *count == 0 {
            return Err(KvCacheError::BlockNotAllocated(block));
        }
        *count -= 1;
        if *count == 0 {
            self.free.push(block);
            return Ok(true);
        }
        Ok(false)
    }

    /// Checks the allocator's own invariants: the free list names existing blocks, each once,
    /// each with count zero, and every block with count zero is on it. (Whether the counts match
    /// the tables is the cache's check: `PagedCache::validate`.)
    pub fn validate(&self) -> Result<()> {
        let total = self.refcounts.len();
        let mut on_free_list = vec![false; total];
        for &block in &self.free {
            let i = block.index();
            if i >= total {
                return corrupt(Corruption::BlockOutOfRange { seq: None, block, total });
            }
            if std::mem::replace(&mut on_free_list[i], true) {
                return corrupt(Corruption::DuplicateInFreeList { block });
            }
            if self.refcounts[i] != 0 {
                return corrupt(Corruption::FreeBlockInUse { block, refcount: self.refcounts[i] });
            }
        }
        if let Some(i) = (0..total).find(|&i| self.refcounts[i] == 0 && !on_free_list[i]) {
            return corrupt(Corruption::LostBlock { block: BlockId(i as u32) });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_handed_out_in_order_and_reused_last_freed_first() {
        let mut a = BlockAllocator::new(4, 16).unwrap();
        assert_eq!((a.num_blocks(), a.block_size(), a.num_free(), a.num_used()), (4, 16, 4, 0));
        let b0 = a.allocate().unwrap();
        let rest = a.allocate_many(2).unwrap();
        assert_eq!((b0, rest.as_slice()), (BlockId(0), &[BlockId(1), BlockId(2)][..]));
        assert_eq!((a.num_free(), a.num_used()), (1, 3));
        assert!(a.release(BlockId(1)).unwrap());
        assert_eq!(a.allocate().unwrap(), BlockId(1), "the block freed last comes back first");
        a.validate().unwrap();
    }

    #[test]
    fn shared_blocks_are_freed_by_the_last_release() {
        let mut a = BlockAllocator::new(2, 1).unwrap();
        let b = a.allocate().unwrap();
        assert_eq!(a.retain(b).unwrap(), 2);
        assert!(!a.release(b).unwrap());
        assert_eq!(a.refcount(b).unwrap(), 1);
        assert!(a.release(b).unwrap());
        assert_eq!((a.refcount(b).unwrap(), a.num_free()), (0, 2));
        a.validate().unwrap();
    }

    #[test]
    fn bad_requests_are_refused_and_change_nothing() {
        let mut a = BlockAllocator::new(2, 8).unwrap();
        let before = a.clone();
        assert_eq!(a.allocate_many(3), Err(KvCacheError::CacheFull { needed: 3, free: 2, total: 2 }));
        assert_eq!(a.release(BlockId(0)), Err(KvCacheError::BlockNotAllocated(BlockId(0))), "double free");
        assert_eq!(a.retain(BlockId(1)), Err(KvCacheError::BlockNotAllocated(BlockId(1))));
        assert_eq!(a.retain(BlockId(2)), Err(KvCacheError::BlockOutOfRange { block: BlockId(2), total: 2 }));
        assert_eq!(
            a.refcount(BlockId(7)),
            Err(KvCacheError::BlockOutOfRange { block: BlockId(7), total: 2 })
        );
        assert_eq!(a, before);
        a.allocate_many(2).unwrap();
        let e = a.allocate().unwrap_err();
        assert_eq!(e, KvCacheError::CacheFull { needed: 1, free: 0, total: 2 });
        assert_eq!(e.to_string(), "the KV cache is full: 1 block(s) needed, 0 free of 2");
    }

    #[test]
    fn configurations_past_the_limits_are_refused() {
        for (n, bs) in [(0, 16), (16, 0), (MAX_SLOTS, 2), (usize::MAX, usize::MAX)] {
            let e = BlockAllocator::new(n, bs).unwrap_err();
            assert!(matches!(e, KvCacheError::InvalidConfig(_)), "{n} x {bs}: {e}");
        }
        assert!(BlockAllocator::new(1, MAX_SLOTS).is_ok());
    }

    #[test]
    fn validate_names_what_is_wrong() {
        let broken = |refcounts: Vec<u32>, free: Vec<u32>| {
            let a = BlockAllocator::from_parts(4, refcounts, free.into_iter().map(BlockId).collect());
            match a.validate() {
                Err(KvCacheError::BlockTableCorrupt(c)) => c,
                other => panic!("expected corruption, got {other:?}"),
            }
        };
        assert_eq!(
            broken(vec![0, 0], vec![0, 2]),
            Corruption::BlockOutOfRange { seq: None, block: BlockId(2), total: 2 }
        );
        assert_eq!(broken(vec![0, 0], vec![1, 1]), Corruption::DuplicateInFreeList { block: BlockId(1) });
        assert_eq!(
            broken(vec![0, 3], vec![0, 1]),
            Corruption::FreeBlockInUse { block: BlockId(1), refcount: 3 }
        );
        assert_eq!(broken(vec![0, 0], vec![1]), Corruption::LostBlock { block: BlockId(0) });
    }
}
