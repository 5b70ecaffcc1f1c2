//! Hand-worked cases of the block tables, and the refusals. Random interleavings are in
//! `tests/host/kv_cache_props.rs`.

use super::*;

fn ids(blocks: &[BlockId]) -> Vec<usize> {
    blocks.iter().map(|b| b.index()).collect()
}

fn corruption(e: KvCacheError) -> Corruption {
    match e {
        KvCacheError::BlockTableCorrupt(c) => c,
        other => panic!("expected a corrupt table, got {other:?}"),
    }
}

#[test]
fn appends_take_blocks_only_when_a_token_needs_one() {
    let mut cache = PagedCache::new(4, 4).unwrap();
    let s = cache.add_sequence();
    assert_eq!((cache.seq_len(s).unwrap(), cache.block_table(s).unwrap()), (0, &[][..]));
    let a = cache.append(s, 3).unwrap();
    assert_eq!(a.copy, None);
    assert_eq!(a.slot_ids(), [0, 1, 2]);
    assert_eq!(a.slots[2], SlotMapping { position: 2, block: BlockId::new(0), offset: 2, slot: 2 });
    // The fourth token fills block 0; the fifth opens block 1.
    assert_eq!(cache.blocks_needed(s, 1).unwrap(), 0);
    assert_eq!(cache.blocks_needed(s, 2).unwrap(), 1);
    let a = cache.append(s, 2).unwrap();
    assert_eq!(a.slots.iter().map(|m| (m.position, m.slot)).collect::<Vec<_>>(), [(3, 3), (4, 4)]);
    assert_eq!((cache.seq_len(s).unwrap(), ids(cache.block_table(s).unwrap())), (5, vec![0, 1]));
    assert_eq!((cache.num_free_blocks(), cache.num_used_blocks()), (2, 2));
    cache.validate().unwrap();
}

#[test]
fn slots_follow_the_physical_blocks_not_the_token_order() {
    // Interleave two sequences so their blocks alternate: 0, 1 for a and b, then 2 for a.
    let mut cache = PagedCache::new(4, 2).unwrap();
    let (a, b) = (cache.add_sequence(), cache.add_sequence());
    cache.append(a, 2).unwrap(); // block 0
    cache.append(b, 1).unwrap(); // block 1
    let more = cache.append(a, 2).unwrap(); // block 2: slots 4, 5
    assert_eq!(more.slot_ids(), [4, 5]);
    assert_eq!(more.slots[1], SlotMapping { position: 3, block: BlockId::new(2), offset: 1, slot: 5 });
    assert_eq!(cache.append(b, 1).unwrap().slot_ids(), [3], "b's second token: block 1, offset 1");
    assert_eq!(ids(cache.block_table(a).unwrap()), [0, 2]);
}

#[test]
fn forks_share_blocks_and_copy_a_shared_partial_block_on_write() {
    let mut cache = PagedCache::new(6, 4).unwrap();
    let parent = cache.add_sequence();
    cache.append(parent, 6).unwrap(); // blocks 0 (full) and 1 (2 of 4)
    let child = cache.fork(parent).unwrap();
    assert_eq!(cache.block_table(child).unwrap(), cache.block_table(parent).unwrap());
    assert_eq!(cache.allocator().refcounts()[..2], [2, 2]);
    assert_eq!(cache.num_used_blocks(), 2, "a fork takes no block");
    cache.validate().unwrap();

    // The parent writes first: its partial block 1 is shared, so it gets a copy (block 2).
    let a = cache.append(parent, 1).unwrap();
    assert_eq!(a.copy, Some(BlockCopy { src: BlockId::new(1), dst: BlockId::new(2), tokens: 2 }));
    assert_eq!(a.copy.unwrap().pair(), (1, 2));
    assert_eq!(a.slot_ids(), [2 * 4 + 2]);
    assert_eq!(ids(cache.block_table(parent).unwrap()), [0, 2]);
    assert_eq!(cache.allocator().refcounts()[..3], [2, 1, 1]);
    // Block 1 is the child's alone now: it writes in place, no copy.
    let b = cache.append(child, 3).unwrap();
    assert_eq!(b.copy, None);
    assert_eq!(b.slot_ids(), [4 + 2, 4 + 3, 3 * 4], "block 1 slots 2 and 3, then a fresh block 3");
    assert_eq!(ids(cache.block_table(child).unwrap()), [0, 1, 3]);
    cache.validate().unwrap();

    // Freeing the parent frees only its private block; the shared block 0 stays for the child.
    assert_eq!(cache.free_sequence(parent).unwrap(), 1);
    assert_eq!(cache.allocator().refcount(BlockId::new(0)).unwrap(), 1);
    assert_eq!(cache.free_sequence(child).unwrap(), 3);
    assert_eq!(cache.num_free_blocks(), 6);
    cache.validate().unwrap();
}

#[test]
fn a_shared_full_block_needs_no_copy() {
    let mut cache = PagedCache::new(4, 4).unwrap();
    let parent = cache.add_sequence();
    cache.append(parent, 4).unwrap();
    let child = cache.fork(parent).unwrap();
    let a = cache.append(child, 1).unwrap();
    assert_eq!((a.copy, a.slot_ids()), (None, vec![4]), "the new token opens a fresh block");
    assert_eq!(ids(cache.block_table(child).unwrap()), [0, 1]);
    // Forking an empty sequence shares nothing.
    let empty = cache.add_sequence();
    let twin = cache.fork(empty).unwrap();
    assert_eq!((cache.seq_len(twin).unwrap(), cache.num_used_blocks()), (0, 2));
    cache.validate().unwrap();
}

#[test]
fn a_fork_of_a_fork_copies_until_the_block_is_private() {
    let mut cache = PagedCache::new(8, 4).unwrap();
    let a = cache.add_sequence();
    cache.append(a, 1).unwrap();
    let b = cache.fork(a).unwrap();
    let c = cache.fork(b).unwrap();
    assert_eq!(cache.allocator().refcount(BlockId::new(0)).unwrap(), 3);
    // Two of the three sharers copy; the last one left holds block 0 alone and writes in place.
    assert!(cache.append(a, 1).unwrap().copy.is_some());
    assert!(cache.append(b, 1).unwrap().copy.is_some());
    assert_eq!(cache.append(c, 1).unwrap().copy, None);
    assert_eq!(cache.block_table(c).unwrap(), [BlockId::new(0)]);
    cache.validate().unwrap();
}

#[test]
fn a_full_cache_refuses_and_stays_as_it_was() {
    let mut cache = PagedCache::new(3, 4).unwrap();
    let a = cache.add_sequence();
    cache.append(a, 10).unwrap(); // 3 blocks, 2 slots left in the last
    let before = cache.snapshot();
    assert_eq!(cache.append(a, 3), Err(KvCacheError::CacheFull { needed: 1, free: 0, total: 3 }));
    assert_eq!(cache.snapshot(), before);
    assert_eq!(cache.append(a, 2).unwrap().slot_ids(), [10, 11], "what fits still goes in");

    // Copy-on-write counts: a fork of a partial block needs one block before it can write.
    let mut cache = PagedCache::new(2, 4).unwrap();
    let a = cache.add_sequence();
    cache.append(a, 5).unwrap();
    let b = cache.fork(a).unwrap();
    assert_eq!(cache.blocks_needed(b, 1).unwrap(), 1);
    let before = cache.snapshot();
    let e = cache.append(b, 1).unwrap_err();
    assert_eq!(e, KvCacheError::CacheFull { needed: 1, free: 0, total: 2 });
    assert_eq!(e.to_string(), "the KV cache is full: 1 block(s) needed, 0 free of 2");
    assert_eq!(cache.snapshot(), before);

    // An absurd count is the same refusal, not an overflow.
    let e = cache.append(a, usize::MAX).unwrap_err();
    assert!(matches!(e, KvCacheError::CacheFull { free: 0, total: 2, .. }), "{e}");
    assert_eq!(cache.snapshot(), before);
}

#[test]
fn unknown_sequences_and_empty_appends_are_refused() {
    let mut cache = PagedCache::new(2, 2).unwrap();
    let s = cache.add_sequence();
    cache.append(s, 1).unwrap();
    let before = cache.snapshot();
    let ghost = SeqId::new(77);
    let not_found = KvCacheError::SequenceNotFound(ghost);
    assert_eq!(cache.append(ghost, 1), Err(not_found.clone()));
    assert_eq!(cache.fork(ghost), Err(not_found.clone()));
    assert_eq!(cache.free_sequence(ghost), Err(not_found.clone()));
    assert_eq!(cache.seq_len(ghost), Err(not_found.clone()));
    assert_eq!(cache.block_table(ghost), Err(not_found.clone()));
    assert_eq!(cache.blocks_needed(ghost, 1), Err(not_found.clone()));
    assert_eq!(cache.pack_block_tables(&[s, ghost]), Err(not_found.clone()));
    assert_eq!(not_found.to_string(), "sequence 77 is not in the KV cache");
    assert_eq!(cache.append(s, 0), Err(KvCacheError::EmptyAppend(s)));
    assert_eq!(cache.snapshot(), before);
    // Freed is gone: a second free is refused, and its id is never handed out again.
    cache.free_sequence(s).unwrap();
    assert_eq!(cache.free_sequence(s), Err(KvCacheError::SequenceNotFound(s)));
    assert_ne!(cache.add_sequence(), s);
}

#[test]
fn packed_tables_pad_rows_to_the_longest_table() {
    let mut cache = PagedCache::new(8, 2).unwrap();
    let (a, b, c) = (cache.add_sequence(), cache.add_sequence(), cache.add_sequence());
    cache.append(a, 5).unwrap(); // blocks 0, 1, 2
    cache.append(b, 1).unwrap(); // block 3
    let packed = cache.pack_block_tables(&[b, a, c]).unwrap();
    assert_eq!((packed.batch, packed.max_blocks, packed.block_size), (3, 3, 2));
    #[rustfmt::skip]
    assert_eq!(packed.block_tables, [
        3, PAD_BLOCK, PAD_BLOCK,
        0, 1, 2,
        PAD_BLOCK, PAD_BLOCK, PAD_BLOCK,
    ]);
    assert_eq!(packed.context_lens, [1, 5, 0]);
    assert_eq!(packed.row(1), Some(&[0, 1, 2][..]));
    assert_eq!(packed.row(3), None);

    // A fixed width pads further, and refuses a table that does not fit.
    let wide = cache.pack_block_tables_with_width(&[a], 4).unwrap();
    assert_eq!(wide.block_tables, [0, 1, 2, PAD_BLOCK]);
    assert_eq!(
        cache.pack_block_tables_with_width(&[b, a], 2),
        Err(KvCacheError::TableTooNarrow { seq: a, blocks: 3, width: 2 })
    );
    assert!(matches!(cache.pack_block_tables_with_width(&[a], 0), Err(KvCacheError::InvalidConfig(_))));

    // Never zero columns: an empty device buffer would be a null table.
    let empty = cache.pack_block_tables(&[c]).unwrap();
    assert_eq!((empty.max_blocks, empty.block_tables, empty.context_lens), (1, vec![PAD_BLOCK], vec![0]));
    let none = cache.pack_block_tables(&[]).unwrap();
    assert_eq!((none.batch, none.block_tables.len(), none.context_lens.len()), (0, 0, 0));
}

#[test]
fn snapshots_restore_to_an_equal_cache() {
    let mut cache = PagedCache::new(6, 3).unwrap();
    let a = cache.add_sequence();
    cache.append(a, 4).unwrap();
    let b = cache.fork(a).unwrap();
    cache.append(b, 1).unwrap();
    let restored = PagedCache::restore(cache.snapshot()).unwrap();
    assert_eq!(restored, cache);
    // It carries on as the original would, ids included.
    let (mut x, mut y) = (cache, restored);
    assert_eq!(x.add_sequence(), y.add_sequence());
    assert_eq!(x.append(a, 5).unwrap(), y.append(a, 5).unwrap());
}

/// A valid snapshot to break: a (4 tokens, blocks 0 and 1) forked into b, which appended one
/// token (block 1 copied into block 2); blocks 3 to 5 free.
fn snapshot() -> (CacheSnapshot, SeqId, SeqId) {
    let mut cache = PagedCache::new(6, 3).unwrap();
    let a = cache.add_sequence();
    cache.append(a, 4).unwrap();
    let b = cache.fork(a).unwrap();
    cache.append(b, 1).unwrap();
    let s = cache.snapshot();
    assert_eq!(s.refcounts, [2, 1, 1, 0, 0, 0]);
    (s, a, b)
}

fn restore_err(s: CacheSnapshot) -> Corruption {
    corruption(PagedCache::restore(s).unwrap_err())
}

#[test]
fn corrupt_tables_are_detected_and_named() {
    let b = |i| BlockId::new(i);
    let (good, a, sb) = snapshot();

    // A refcount that disagrees with the tables.
    let mut s = good.clone();
    s.refcounts[0] = 1;
    assert_eq!(restore_err(s), Corruption::RefcountMismatch { block: b(0), refcount: 1, tables: 2 });

    // A table naming a block that is on the free list (a use after free).
    let mut s = good.clone();
    s.sequences[0].blocks[1] = b(5);
    s.refcounts[1] = 0;
    s.refcounts[5] = 1;
    s.free.retain(|&f| f != b(5));
    s.free.push(b(1));
    assert_eq!(PagedCache::restore(s.clone()).map(|_| ()), Ok(()), "consistently moved: still valid");
    s.free.push(b(5));
    assert_eq!(restore_err(s), Corruption::FreeBlockInUse { block: b(5), refcount: 1 });

    // The same block twice in one table.
    let mut s = good.clone();
    s.sequences[1].blocks = vec![b(0), b(0)];
    assert_eq!(restore_err(s), Corruption::DuplicateInTable { seq: sb, block: b(0) });

    // A block past the end.
    let mut s = good.clone();
    s.sequences[0].blocks[1] = b(9);
    assert_eq!(restore_err(s), Corruption::BlockOutOfRange { seq: Some(a), block: b(9), total: 6 });

    // A length that does not match the blocks.
    let mut s = good.clone();
    s.sequences[0].tokens = 7;
    assert_eq!(restore_err(s), Corruption::LengthMismatch { seq: a, tokens: 7, blocks: 2, block_size: 3 });

    // A block lost from the free list, and one listed twice.
    let mut s = good.clone();
    s.free.pop();
    assert!(matches!(restore_err(s), Corruption::LostBlock { .. }));
    let mut s = good.clone();
    s.free.push(s.free[0]);
    assert_eq!(restore_err(s), Corruption::DuplicateInFreeList { block: good.free[0] });

    // Ids: two sequences with one id, and a counter that would hand an id out again.
    let mut s = good.clone();
    s.sequences[1].id = a;
    assert_eq!(restore_err(s), Corruption::DuplicateSequence { seq: a });
    let mut s = good.clone();
    s.next_id = 1;
    assert_eq!(restore_err(s), Corruption::IdCounterBehind { next_id: 1, seq: sb });

    // Configuration: no blocks, or blocks of no tokens.
    let mut s = good.clone();
    s.block_size = 0;
    assert!(matches!(PagedCache::restore(s), Err(KvCacheError::InvalidConfig(_))));

    // The messages say what is wrong.
    let e =
        KvCacheError::BlockTableCorrupt(Corruption::RefcountMismatch { block: b(4), refcount: 3, tables: 1 });
    assert_eq!(e.to_string(), "block table corrupt: block 4 has reference count 3 but 1 table(s) hold it");
}
