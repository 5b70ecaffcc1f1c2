//! The KV cache's device tensors: allocated per layer on the test's stream through the memory
//! guard, sized and laid out as the bookkeeping's slots expect, and refused cleanly (nothing
//! allocated, the sizes named) when the whole cache does not fit the budget. The cache-write
//! and paged-attention kernels that use them are tested with those kernels.

use rocm_model::kv_cache::{KvCacheDeviceError, KvCacheShape, KvCacheTensors, PagedCache};
use rocm_runtime::f16;
use rocm_testkit::gpu_test;

#[test]
fn each_layer_gets_a_k_and_a_v_buffer_of_the_shape() {
    let gpu = gpu_test!();
    // 7 blocks of 16 slots, 3 layers, 2 KV heads of 64.
    let cache = PagedCache::new(7, 16).unwrap();
    let shape = KvCacheShape::for_cache(&cache, 3, 2, 64).unwrap();
    let kv = KvCacheTensors::<f16>::new(gpu.stream(), shape).unwrap();
    assert_eq!((kv.num_layers(), kv.shape()), (3, &shape));
    let mut pointers = Vec::new();
    for layer in 0..3 {
        for buffer in [kv.k(layer).unwrap(), kv.v(layer).unwrap()] {
            assert_eq!(buffer.len(), 7 * 16 * 2 * 64);
            assert!(buffer.stream().same_as(gpu.stream()), "the buffers belong to the given stream");
            pointers.push(buffer.device_ptr());
        }
    }
    pointers.sort();
    pointers.dedup();
    assert_eq!(pointers.len(), 6, "six distinct buffers");
    assert_eq!(kv.size_bytes(), shape.total_bytes::<f16>().unwrap());
    assert_eq!(kv.size_bytes(), 2 * 3 * 7 * 16 * 2 * 64 * 2);
    assert_eq!(gpu.account().live_bytes(), kv.size_bytes(), "charged to the test's account");
    let e = kv.v(3).unwrap_err();
    assert!(matches!(e, KvCacheDeviceError::LayerOutOfRange { layer: 3, layers: 3 }), "{e}");
    drop(kv);
    assert_eq!(gpu.account().live_bytes(), 0);
}

/// Rows written at the slots `append` hands out are where the layout says: slot `s`, head `h`
/// at `s * kv_heads * head_dim + h * head_dim`, in each layer's K and V.
#[test]
fn appended_slots_address_rows_of_the_buffers() {
    let gpu = gpu_test!();
    let mut cache = PagedCache::new(5, 4).unwrap();
    let (a, b) = (cache.add_sequence(), cache.add_sequence());
    let shape = KvCacheShape::for_cache(&cache, 2, 3, 8).unwrap();
    let mut kv = KvCacheTensors::<f32>::new(gpu.stream(), shape).unwrap();
    kv.fill_bytes(0xFF).unwrap();
    assert!(kv.k(1).unwrap().to_vec().unwrap().iter().all(|x| x.is_nan()), "poisoned");

    // Interleaved appends, so the sequences' blocks alternate.
    let mut writes = Vec::new(); // (sequence, position, slot)
    for (seq, n) in [(a, 3), (b, 6), (a, 4)] {
        for m in cache.append(seq, n).unwrap().slots {
            writes.push((seq, m.position, m.slot));
        }
    }
    // What a cache-write kernel would store: K row of (seq, position) = seq * 1000 + position
    // + head / 10 + dim / 1000, V the negation.
    let value = |seq: u64, pos: usize, h: usize, d: usize| {
        (seq * 1000) as f32 + pos as f32 + h as f32 / 10.0 + d as f32 / 1000.0
    };
    let mut host_k = vec![f32::NAN; shape.layer_elements()];
    for &(seq, pos, slot) in &writes {
        for h in 0..3 {
            let at = shape.offset(slot, h).unwrap();
            for d in 0..8 {
                host_k[at + d] = value(seq.get(), pos, h, d);
            }
        }
    }
    let host_v: Vec<f32> = host_k.iter().map(|x| -x).collect();
    for layer in 0..2 {
        let (k, v) = kv.layer_mut(layer).unwrap();
        k.copy_from_host(&host_k).unwrap();
        v.copy_from_host(&host_v).unwrap();
    }
    // Read back through the block tables, as paged attention does.
    let (bs, row) = (shape.block_size(), shape.slot_stride());
    for layer in 0..2 {
        let (k, v) = (kv.k(layer).unwrap().to_vec().unwrap(), kv.v(layer).unwrap().to_vec().unwrap());
        for seq in [a, b] {
            let table = cache.block_table(seq).unwrap();
            for pos in 0..cache.seq_len(seq).unwrap() {
                let slot = table[pos / bs].index() * bs + pos % bs;
                for h in 0..3 {
                    for d in 0..8 {
                        let i = slot * row + h * 8 + d;
                        assert_eq!(k[i], value(seq.get(), pos, h, d), "layer {layer} K seq {seq} pos {pos}");
                        assert_eq!(v[i], -value(seq.get(), pos, h, d));
                    }
                }
            }
        }
    }
}

/// A cache larger than the whole budget is refused before anything is allocated, whatever the
/// other tests of this binary hold meanwhile, with the shape and the guard's figures named.
#[test]
fn a_cache_past_the_budget_is_refused_before_allocating() {
    let gpu = gpu_test!();
    let budget = gpu.backend().ledger().budget();
    // One layer of u8 with 1 MiB a slot: K and V take 2 MiB a block; one block past the budget.
    let row = 1usize << 20;
    let blocks = usize::try_from(budget / (2 * row as u64)).unwrap() + 1;
    let shape = KvCacheShape::new(1, blocks, 1, 1, row).unwrap();
    assert!(shape.total_bytes::<u8>().unwrap() > budget);
    let e = KvCacheTensors::<u8>::new(gpu.stream(), shape).unwrap_err();
    match &e {
        KvCacheDeviceError::OverBudget { needed, budget: b, .. } => {
            assert_eq!((*needed, *b), (shape.total_bytes::<u8>().unwrap(), budget));
        }
        other => panic!("expected the up-front refusal, got {other}"),
    }
    let text = e.to_string();
    for needle in ["KV cache", "1 layers", "memory guard", "budget", "in use"] {
        assert!(text.contains(needle), "`{needle}` missing from: {text}");
    }
    assert_eq!(gpu.account().live_bytes(), 0, "nothing allocated");
    // The backend is still usable: a small cache fits.
    let small = KvCacheShape::new(1, 2, 16, 1, 64).unwrap();
    let kv = KvCacheTensors::<u8>::new(gpu.stream(), small).unwrap();
    assert_eq!(gpu.account().live_bytes(), kv.size_bytes());
}
