//! Property tests of the paged KV cache's bookkeeping: random interleavings of add, append,
//! fork and free, checked after every step against a model of what each sequence holds.
//!
//! The model keeps a simulated device memory (one value per slot) and carries out what the
//! cache asks of its caller: the copy-on-write block copy, then one write per new token into
//! the slot it was given. Reading every sequence back through its block table must give exactly
//! the tokens it was given, which fails if two sequences ever own a slot one of them writes
//! (a missing copy-on-write, a block handed out twice, a block freed while still held).

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use proptest::sample::Index;
use rocm_model::kv_cache::{KvCacheError, PAD_BLOCK, PagedCache, SeqId};

#[derive(Debug, Clone)]
enum Op {
    Add,
    Append { seq: Index, tokens: usize },
    Fork { seq: Index },
    Free { seq: Index },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Add),
        6 => (any::<Index>(), 1usize..14).prop_map(|(seq, tokens)| Op::Append { seq, tokens }),
        3 => any::<Index>().prop_map(|seq| Op::Fork { seq }),
        2 => any::<Index>().prop_map(|seq| Op::Free { seq }),
    ]
}

/// The cache, the simulated device memory behind it and what each sequence should read back.
struct Model {
    cache: PagedCache,
    memory: Vec<Option<u64>>,
    expected: BTreeMap<SeqId, Vec<u64>>,
    next_value: u64,
}

impl Model {
    fn new(num_blocks: usize, block_size: usize) -> Self {
        Model {
            cache: PagedCache::new(num_blocks, block_size).unwrap(),
            memory: vec![None; num_blocks * block_size],
            expected: BTreeMap::new(),
            next_value: 1,
        }
    }

    fn pick(&self, index: &Index) -> Option<SeqId> {
        let seqs: Vec<_> = self.cache.sequences().collect();
        (!seqs.is_empty()).then(|| seqs[index.index(seqs.len())])
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let bs = self.cache.block_size();
        match op {
            Op::Add => {
                let seq = self.cache.add_sequence();
                prop_assert!(self.expected.insert(seq, Vec::new()).is_none(), "id {seq} reused");
            }
            Op::Fork { seq } => {
                let Some(parent) = self.pick(seq) else { return Ok(()) };
                let child = self.cache.fork(parent).unwrap();
                let tokens = self.expected[&parent].clone();
                prop_assert!(self.expected.insert(child, tokens).is_none(), "id {child} reused");
            }
            Op::Free { seq } => {
                let Some(seq) = self.pick(seq) else { return Ok(()) };
                let table = self.cache.block_table(seq).unwrap().to_vec();
                let sole: usize =
                    table.iter().filter(|&&b| self.cache.allocator().refcount(b).unwrap() == 1).count();
                prop_assert_eq!(self.cache.free_sequence(seq).unwrap(), sole, "blocks freed");
                self.expected.remove(&seq);
                // A freed block's old contents must never be read again: forget them.
                for b in table {
                    if self.cache.allocator().refcount(b).unwrap() == 0 {
                        self.memory[b.index() * bs..][..bs].fill(None);
                    }
                }
            }
            Op::Append { seq, tokens } => {
                let Some(seq) = self.pick(seq) else { return Ok(()) };
                let before = self.cache.snapshot();
                let needed = self.cache.blocks_needed(seq, *tokens).unwrap();
                match self.cache.append(seq, *tokens) {
                    Ok(append) => {
                        let old_len = self.expected[&seq].len();
                        prop_assert!(needed <= before.free.len());
                        prop_assert_eq!(self.cache.num_free_blocks(), before.free.len() - needed);
                        if let Some(copy) = append.copy {
                            prop_assert_eq!(copy.tokens, old_len % bs);
                            prop_assert!(copy.tokens > 0, "a full block is never copied");
                            let (src, dst) = (copy.src.index() * bs, copy.dst.index() * bs);
                            for i in 0..copy.tokens {
                                self.memory[dst + i] = self.memory[src + i];
                            }
                        }
                        prop_assert_eq!(append.slots.len(), *tokens);
                        for (k, s) in append.slots.iter().enumerate() {
                            prop_assert_eq!(s.position, old_len + k);
                            prop_assert_eq!(s.slot, s.block.index() * bs + s.offset);
                            prop_assert_eq!(s.offset, s.position % bs);
                            // Copy-on-write: a block written into belongs to this sequence alone.
                            prop_assert_eq!(self.cache.allocator().refcount(s.block).unwrap(), 1);
                            self.memory[s.slot] = Some(self.next_value);
                            self.expected.get_mut(&seq).unwrap().push(self.next_value);
                            self.next_value += 1;
                        }
                    }
                    Err(KvCacheError::CacheFull { needed: n, free, total }) => {
                        prop_assert_eq!(
                            (n, free, total),
                            (needed, before.free.len(), self.cache.num_blocks())
                        );
                        prop_assert!(needed > free);
                        prop_assert_eq!(
                            &self.cache.snapshot(),
                            &before,
                            "a refused append changed the cache"
                        );
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("append failed: {e}"))),
                }
            }
        }
        Ok(())
    }

    /// Every invariant, and every sequence reads back exactly its tokens.
    fn check(&self) -> Result<(), TestCaseError> {
        self.cache.validate().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let total = self.cache.num_blocks();
        prop_assert_eq!(self.cache.num_free_blocks() + self.cache.num_used_blocks(), total);
        let held: HashSet<_> =
            self.cache.sequences().flat_map(|s| self.cache.block_table(s).unwrap().to_vec()).collect();
        prop_assert_eq!(held.len(), self.cache.num_used_blocks(), "blocks held by some table");
        let free: HashSet<_> = self.cache.allocator().free_blocks().iter().copied().collect();
        prop_assert!(held.is_disjoint(&free), "a block is both free and held");
        prop_assert!(self.cache.sequences().eq(self.expected.keys().copied()));
        let bs = self.cache.block_size();
        for (&seq, tokens) in &self.expected {
            prop_assert_eq!(self.cache.seq_len(seq).unwrap(), tokens.len());
            let table = self.cache.block_table(seq).unwrap();
            let read: Vec<_> =
                (0..tokens.len()).map(|p| self.memory[table[p / bs].index() * bs + p % bs]).collect();
            let want: Vec<_> = tokens.iter().map(|&v| Some(v)).collect();
            prop_assert_eq!(read, want, "sequence {} reads back other tokens", seq);
        }
        Ok(())
    }

    /// Frees every sequence; every block must come back.
    fn free_all(&mut self) -> Result<(), TestCaseError> {
        for seq in self.cache.sequences().collect::<Vec<_>>() {
            self.cache.free_sequence(seq).unwrap();
        }
        self.expected.clear();
        self.check()?;
        prop_assert_eq!(self.cache.num_free_blocks(), self.cache.num_blocks());
        prop_assert_eq!(self.cache.num_used_blocks(), 0);
        prop_assert!(self.cache.allocator().refcounts().iter().all(|&c| c == 0));
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// No interleaving loses a block or lets two owners write one; freeing everything returns
    /// every block.
    #[test]
    fn random_interleavings_keep_every_invariant(
        num_blocks in 1usize..24,
        block_size in 1usize..9,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut model = Model::new(num_blocks, block_size);
        for op in &ops {
            model.apply(op)?;
            model.check()?;
        }
        model.free_all()?;
    }

    /// Whatever the state, an append of one token more than fits is refused without a change,
    /// and an append of exactly what fits succeeds.
    #[test]
    fn appending_past_capacity_fails_cleanly(
        num_blocks in 1usize..16,
        block_size in 1usize..9,
        ops in prop::collection::vec(op(), 0..40),
        victim in any::<Index>(),
    ) {
        let mut model = Model::new(num_blocks, block_size);
        for op in &ops {
            model.apply(op)?;
        }
        let seq = match model.pick(&victim) {
            Some(seq) => seq,
            None => {
                let seq = model.cache.add_sequence();
                model.expected.insert(seq, Vec::new());
                seq
            }
        };
        let (bs, free) = (block_size, model.cache.num_free_blocks());
        let len = model.cache.seq_len(seq).unwrap();
        let filled = len % bs;
        let shared_tail = filled > 0 && {
            let last = *model.cache.block_table(seq).unwrap().last().unwrap();
            model.cache.allocator().refcount(last).unwrap() > 1
        };
        // Room in the sequence's last block (none if it must be copied first), then whole blocks;
        // a copied tail takes a free block and brings its `filled` tokens along.
        let fits = match (filled, shared_tail) {
            (0, _) => free * bs,
            (_, true) => (free * bs).saturating_sub(filled),
            (_, false) => bs - filled + free * bs,
        };
        let before = model.cache.snapshot();
        let e = model.cache.append(seq, fits + 1).unwrap_err();
        prop_assert!(matches!(e, KvCacheError::CacheFull { .. }), "{}", e);
        prop_assert_eq!(&model.cache.snapshot(), &before);
        model.check()?;
        if fits > 0 {
            let append = model.cache.append(seq, fits).unwrap();
            prop_assert_eq!(append.slots.len(), fits);
            prop_assert_eq!(model.cache.num_free_blocks(), 0);
            prop_assert_eq!(model.cache.seq_len(seq).unwrap() % bs, 0, "the last block is full");
        }
        model.cache.validate().map_err(|e| TestCaseError::fail(e.to_string()))?;
    }

    /// Packed block tables hold each sequence's table, padded, and its length.
    #[test]
    fn packed_tables_match_the_tables(
        num_blocks in 1usize..24,
        block_size in 1usize..9,
        ops in prop::collection::vec(op(), 1..60),
        picks in prop::collection::vec(any::<Index>(), 0..6),
    ) {
        let mut model = Model::new(num_blocks, block_size);
        for op in &ops {
            model.apply(op)?;
        }
        let batch: Vec<_> = picks.iter().filter_map(|i| model.pick(i)).collect();
        let packed = model.cache.pack_block_tables(&batch).unwrap();
        prop_assert_eq!(packed.batch, batch.len());
        prop_assert_eq!(packed.block_tables.len(), batch.len() * packed.max_blocks);
        prop_assert!(packed.max_blocks >= 1);
        for (b, &seq) in batch.iter().enumerate() {
            let table = model.cache.block_table(seq).unwrap();
            let row = packed.row(b).unwrap();
            prop_assert!(row[..table.len()].iter().zip(table).all(|(&r, t)| r == t.index() as i32));
            prop_assert!(row[table.len()..].iter().all(|&r| r == PAD_BLOCK));
            prop_assert_eq!(packed.context_lens[b] as usize, model.cache.seq_len(seq).unwrap());
        }
    }
}
