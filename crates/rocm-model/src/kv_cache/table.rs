//! Block tables: which physical blocks hold each sequence's tokens, with copy-on-write sharing.
//!
//! Token `p` of a sequence lives in slot `table[p / block_size] * block_size + p % block_size`.
//! A table always has exactly `ceil(len / block_size)` blocks: blocks are taken when a token
//! first needs one, never ahead, so the count of free blocks is the true headroom.

use std::collections::BTreeMap;
use std::fmt;

use super::allocator::{BlockAllocator, BlockId, check_config};
use super::error::{Corruption, KvCacheError, Result, corrupt};

/// A sequence of the cache. Ids are handed out by [`PagedCache::add_sequence`] and
/// [`PagedCache::fork`] and never reused by that cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeqId(u64);

impl SeqId {
    /// An id by value (for snapshots and tests); a cache hands out its own.
    pub const fn new(id: u64) -> Self {
        SeqId(id)
    }

    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for SeqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where one new token's K and V rows go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotMapping {
    /// The token's index in its sequence.
    pub position: usize,
    pub block: BlockId,
    /// The token's slot within the block.
    pub offset: usize,
    /// `block * block_size + offset`: the row of the cache tensors (see `KvCacheTensors`).
    pub slot: usize,
}

/// A copy the caller must make on the GPU, in every layer's K and V cache, before writing the
/// appended tokens: slots `0..tokens` of block `src` into the same slots of block `dst`.
/// (Copying the whole block is equally correct; the rest of `dst` is not read before it is
/// written.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCopy {
    pub src: BlockId,
    pub dst: BlockId,
    /// Filled slots of `src` that belong to the sequence.
    pub tokens: usize,
}

impl BlockCopy {
    /// `(src, dst)` block indices, the form a whole-block copy kernel takes.
    pub fn pair(&self) -> (usize, usize) {
        (self.src.index(), self.dst.index())
    }
}

/// What [`PagedCache::append`] asks of the caller: first the copy, if any, then one write a
/// token into its slot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Append {
    pub copy: Option<BlockCopy>,
    pub slots: Vec<SlotMapping>,
}

impl Append {
    /// The slots as a cache-write kernel takes them: one `i32` per new token, in order.
    pub fn slot_ids(&self) -> Vec<i32> {
        // Slots are below MAX_SLOTS = i32::MAX (checked when the cache was made).
        self.slots.iter().map(|s| s.slot as i32).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Sequence {
    blocks: Vec<BlockId>,
    tokens: usize,
}

/// The block tables of a paged KV cache: sequences, their blocks, and the allocator behind
/// them. Pure bookkeeping on the host; the tensors it indexes are `KvCacheTensors`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedCache {
    alloc: BlockAllocator,
    seqs: BTreeMap<SeqId, Sequence>,
    next_id: u64,
}

/// A sequence as saved in a [`CacheSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceSnapshot {
    pub id: SeqId,
    pub tokens: usize,
    pub blocks: Vec<BlockId>,
}

/// The whole state of a [`PagedCache`] as plain data, to save and restore (with
/// [`PagedCache::restore`], which checks it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSnapshot {
    pub block_size: usize,
    /// One per block: the cache has `refcounts.len()` blocks.
    pub refcounts: Vec<u32>,
    /// The free list; its last block is handed out next.
    pub free: Vec<BlockId>,
    /// In id order.
    pub sequences: Vec<SequenceSnapshot>,
    /// The id the next new sequence gets.
    pub next_id: u64,
}

impl PagedCache {
    /// An empty cache of `num_blocks` blocks of `block_size` tokens (see [`BlockAllocator::new`]
    /// for the limits).
    pub fn new(num_blocks: usize, block_size: usize) -> Result<Self> {
        Ok(PagedCache {
            alloc: BlockAllocator::new(num_blocks, block_size)?,
            seqs: BTreeMap::new(),
            next_id: 0,
        })
    }

    pub fn block_size(&self) -> usize {
        self.alloc.block_size()
    }

    pub fn num_blocks(&self) -> usize {
        self.alloc.num_blocks()
    }

    pub fn num_free_blocks(&self) -> usize {
        self.alloc.num_free()
    }

    pub fn num_used_blocks(&self) -> usize {
        self.alloc.num_used()
    }

    pub fn num_sequences(&self) -> usize {
        self.seqs.len()
    }

    /// The allocator, read-only (reference counts, the free list).
    pub fn allocator(&self) -> &BlockAllocator {
        &self.alloc
    }

    /// The sequences, in id order.
    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    pub fn contains(&self, seq: SeqId) -> bool {
        self.seqs.contains_key(&seq)
    }

    fn get(&self, seq: SeqId) -> Result<&Sequence> {
        self.seqs.get(&seq).ok_or(KvCacheError::SequenceNotFound(seq))
    }

    /// A new, empty sequence (no blocks until its first append).
    pub fn add_sequence(&mut self) -> SeqId {
        let id = self.new_id();
        self.seqs.insert(id, Sequence { blocks: Vec::new(), tokens: 0 });
        id
    }

    fn new_id(&mut self) -> SeqId {
        let id = SeqId(self.next_id);
        // 2^64 ids will not be handed out; saturating keeps this panic-free regardless.
        self.next_id = self.next_id.saturating_add(1);
        id
    }

    /// Tokens in `seq`.
    pub fn seq_len(&self, seq: SeqId) -> Result<usize> {
        Ok(self.get(seq)?.tokens)
    }

    /// The physical blocks of `seq`, in token order.
    pub fn block_table(&self, seq: SeqId) -> Result<&[BlockId]> {
        Ok(&self.get(seq)?.blocks)
    }

    /// Free blocks appending `n_tokens` to `seq` would take (including a copy-on-write block).
    pub fn blocks_needed(&self, seq: SeqId, n_tokens: usize) -> Result<usize> {
        Ok(self.plan(seq, n_tokens)?.needed())
    }

    /// What an append takes: fresh blocks for the new tokens, plus one if the last block is
    /// partly filled and shared (the new tokens cannot be written into it in place).
    fn plan(&self, seq: SeqId, n_tokens: usize) -> Result<Plan> {
        let s = self.get(seq)?;
        let bs = self.block_size();
        // Saturating: an absurd request simply needs more blocks than exist.
        let new_len = s.tokens.saturating_add(n_tokens);
        let fresh = new_len.div_ceil(bs).saturating_sub(s.blocks.len());
        let copy_on_write = match s.blocks.last() {
            Some(&last) if !s.tokens.is_multiple_of(bs) => self.alloc.refcount(last)? > 1,
            _ => false,
        };
        Ok(Plan { new_len, fresh, copy_on_write })
    }

    /// Appends `n_tokens` to `seq`: takes the blocks they need and returns each token's slot.
    /// If the sequence's last block is partly filled and shared with a fork, it is first
    /// replaced by a private copy: the returned [`BlockCopy`] must be carried out on the GPU
    /// before the tokens are written. All or nothing: on [`KvCacheError::CacheFull`] (or any
    /// other error) the cache is unchanged.
    pub fn append(&mut self, seq: SeqId, n_tokens: usize) -> Result<Append> {
        let plan = self.plan(seq, n_tokens)?;
        if n_tokens == 0 {
            return Err(KvCacheError::EmptyAppend(seq));
        }
        let needed = plan.needed();
        if needed > self.alloc.num_free() {
            return Err(KvCacheError::CacheFull {
                needed,
                free: self.alloc.num_free(),
                total: self.num_blocks(),
            });
        }
        let bs = self.block_size();
        // Enough blocks are free, so nothing below fails; the `?`s only pass on what a corrupt
        // state would make of it.
        let cow_block = if plan.copy_on_write { Some(self.alloc.allocate()?) } else { None };
        let fresh = self.alloc.allocate_many(plan.fresh)?;
        let s = self.seqs.get_mut(&seq).ok_or(KvCacheError::SequenceNotFound(seq))?;
        let old_len = s.tokens;
        let mut copy = None;
        if let (Some(dst), Some(last)) = (cow_block, s.blocks.last_mut()) {
            let src = std::mem::replace(last, dst);
            // Shared, so this drops our reference without freeing the block.
            self.alloc.release(src)?;
            copy = Some(BlockCopy { src, dst, tokens: old_len % bs });
        }
        s.blocks.extend(fresh);
        s.tokens = plan.new_len;
        let slots = (old_len..plan.new_len)
            .map(|position| {
                let block = s.blocks[position / bs];
                let offset = position % bs;
                SlotMapping { position, block, offset, slot: block.index() * bs + offset }
            })
            .collect();
        Ok(Append { copy, slots })
    }

    /// A new sequence sharing every block of `parent` (each block's count goes up by one): a
    /// beam or a parallel sample that starts from the same prefix without copying it. Either
    /// sequence's next write into a shared, partly filled block copies it first (see
    /// [`PagedCache::append`]).
    pub fn fork(&mut self, parent: SeqId) -> Result<SeqId> {
        let p = self.get(parent)?.clone();
        for (i, &block) in p.blocks.iter().enumerate() {
            if let Err(e) = self.alloc.retain(block) {
                // Undo the retains so far: all or nothing.
                for &done in &p.blocks[..i] {
                    let _ = self.alloc.release(done);
                }
                return Err(e);
            }
        }
        let child = self.new_id();
        self.seqs.insert(child, p);
        Ok(child)
    }

    /// Removes `seq`, dropping its reference to each block; returns how many blocks that freed
    /// (blocks still shared with a fork stay).
    pub fn free_sequence(&mut self, seq: SeqId) -> Result<usize> {
        let s = self.seqs.remove(&seq).ok_or(KvCacheError::SequenceNotFound(seq))?;
        let mut freed = 0;
        for block in s.blocks {
            // Only fails on a corrupt state; keep releasing the rest rather than leak them.
            if let Ok(true) = self.alloc.release(block) {
                freed += 1;
            }
        }
        Ok(freed)
    }

    /// Checks every invariant (`docs/kv_cache.md`): each table has `ceil(len / block_size)`
    /// blocks, all existing and none twice; each block's count equals the number of tables
    /// holding it; the free list holds exactly the blocks nobody holds, once each; sequence ids
    /// are below the next id. Returns [`KvCacheError::BlockTableCorrupt`] naming the first
    /// problem found.
    pub fn validate(&self) -> Result<()> {
        let total = self.num_blocks();
        let bs = self.block_size();
        let mut holders = vec![0usize; total];
        let mut seen_in = vec![None::<SeqId>; total];
        for (&seq, s) in &self.seqs {
            if seq.0 >= self.next_id {
                return corrupt(Corruption::IdCounterBehind { next_id: self.next_id, seq });
            }
            if s.blocks.len() != s.tokens.div_ceil(bs) {
                return corrupt(Corruption::LengthMismatch {
                    seq,
                    tokens: s.tokens,
                    blocks: s.blocks.len(),
                    block_size: bs,
                });
            }
            for &block in &s.blocks {
                let i = block.index();
                if i >= total {
                    return corrupt(Corruption::BlockOutOfRange { seq: Some(seq), block, total });
                }
                if seen_in[i] == Some(seq) {
                    return corrupt(Corruption::DuplicateInTable { seq, block });
                }
                seen_in[i] = Some(seq);
                holders[i] += 1;
            }
        }
        for (i, (&refcount, &tables)) in self.alloc.refcounts().iter().zip(&holders).enumerate() {
            if refcount as usize != tables {
                return corrupt(Corruption::RefcountMismatch {
                    block: BlockId::new(i as u32),
                    refcount,
                    tables,
                });
            }
        }
        self.alloc.validate()
    }

    /// The state as plain data.
    pub fn snapshot(&self) -> CacheSnapshot {
        CacheSnapshot {
            block_size: self.block_size(),
            refcounts: self.alloc.refcounts().to_vec(),
            free: self.alloc.free_blocks().to_vec(),
            sequences: self
                .seqs
                .iter()
                .map(|(&id, s)| SequenceSnapshot { id, tokens: s.tokens, blocks: s.blocks.clone() })
                .collect(),
            next_id: self.next_id,
        }
    }

    /// A cache in the state of `snapshot`, after checking the configuration and every
    /// invariant ([`PagedCache::validate`]). A snapshot edited or saved from elsewhere that
    /// breaks one is refused with [`KvCacheError::BlockTableCorrupt`].
    pub fn restore(snapshot: CacheSnapshot) -> Result<Self> {
        check_config(snapshot.refcounts.len(), snapshot.block_size)?;
        let mut seqs = BTreeMap::new();
        for s in snapshot.sequences {
            if seqs.insert(s.id, Sequence { blocks: s.blocks, tokens: s.tokens }).is_some() {
                return corrupt(Corruption::DuplicateSequence { seq: s.id });
            }
        }
        let alloc = BlockAllocator::from_parts(snapshot.block_size, snapshot.refcounts, snapshot.free);
        let cache = PagedCache { alloc, seqs, next_id: snapshot.next_id };
        cache.validate()?;
        Ok(cache)
    }
}

/// The blocks an append takes.
#[derive(Debug, Clone, Copy)]
struct Plan {
    new_len: usize,
    fresh: usize,
    copy_on_write: bool,
}

impl Plan {
    fn needed(&self) -> usize {
        self.fresh.saturating_add(self.copy_on_write as usize)
    }
}
