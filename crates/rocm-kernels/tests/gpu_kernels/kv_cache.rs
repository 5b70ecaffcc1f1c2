//! `kv_cache_write` and `kv_cache_copy_blocks` against the CPU reference: rows land in their
//! slots and nowhere else (the rest of the cache keeps its poison), padding and out-of-range
//! slots are skipped, block copies copy whole blocks (also through shared borrows), and bad
//! pairs are refused.

use crate::bits;
use rocm_kernels::Dtype;
use rocm_kernels::kv_cache::{
    CacheShape, kv_cache_copy_blocks, kv_cache_copy_blocks_shared, kv_cache_write, kv_cache_write_reference,
};
use rocm_runtime::{bf16, f16};
use rocm_testkit::{Rng, gpu_test};

/// The block copies `pairs` in host copies of both caches.
fn copy_on_host<T: Dtype>(shape: &CacheShape, pairs: &[(usize, usize)], caches: [&mut Vec<T>; 2]) {
    let block = shape.block_size * shape.row();
    for want in caches {
        for &(src, dst) in pairs {
            let copy = want[src * block..(src + 1) * block].to_vec();
            want[dst * block..(dst + 1) * block].copy_from_slice(&copy);
        }
    }
}

fn write_and_copy<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let mut rng = Rng::new(seed);
    let shape = CacheShape { num_blocks: 11, block_size: 7, kv_heads: 3, head_dim: 40 };
    let len = shape.elements().unwrap();
    // 23 tokens: distinct random slots, two padding entries and one past the cache.
    let mut slots: Vec<i32> = (0..shape.num_slots() as i32).collect();
    for i in (1..slots.len()).rev() {
        slots.swap(i, rng.below(i as u64 + 1) as usize);
    }
    slots.truncate(20);
    slots.extend([-1, shape.num_slots() as i32 + 5, -7]);
    let tokens = slots.len();
    let k: Vec<T> = rng.normal_f32_vec(tokens * shape.row(), 1.0).into_iter().map(T::from_f32).collect();
    let v: Vec<T> = rng.normal_f32_vec(tokens * shape.row(), 1.0).into_iter().map(T::from_f32).collect();

    let mut k_cache = s.alloc::<T>(len).unwrap();
    let mut v_cache = s.alloc::<T>(len).unwrap();
    k_cache.poison().unwrap();
    v_cache.poison().unwrap();
    let (mut k_want, mut v_want) = (k_cache.to_vec().unwrap(), v_cache.to_vec().unwrap());
    let (dk, dv, dslots) = (s.upload(&k).unwrap(), s.upload(&v).unwrap(), s.upload(&slots).unwrap());
    kv_cache_write(&shape, &dk, &dv, &dslots, &mut k_cache, &mut v_cache).unwrap();
    kv_cache_write_reference(&shape, &k, &v, &slots, &mut k_want, &mut v_want);
    assert_eq!(bits(&k_cache.to_vec().unwrap()), bits(&k_want), "k cache");
    assert_eq!(bits(&v_cache.to_vec().unwrap()), bits(&v_want), "v cache");

    // Copy blocks 2 -> 9 and 4 -> 0; then check on the host.
    let pairs = [(2usize, 9usize), (4, 0)];
    kv_cache_copy_blocks(&shape, &pairs, &mut k_cache, &mut v_cache).unwrap();
    copy_on_host(&shape, &pairs, [&mut k_want, &mut v_want]);
    assert_eq!(bits(&k_cache.to_vec().unwrap()), bits(&k_want), "k cache after copies");
    assert_eq!(bits(&v_cache.to_vec().unwrap()), bits(&v_want), "v cache after copies");

    // The same through shared borrows (caches a graph borrows): blocks 9 -> 3 and 0 -> 10.
    let pairs = [(9usize, 3usize), (0, 10)];
    kv_cache_copy_blocks_shared(&shape, &pairs, &k_cache, &v_cache).unwrap();
    copy_on_host(&shape, &pairs, [&mut k_want, &mut v_want]);
    assert_eq!(bits(&k_cache.to_vec().unwrap()), bits(&k_want), "k cache after shared copies");
    assert_eq!(bits(&v_cache.to_vec().unwrap()), bits(&v_want), "v cache after shared copies");
    // One buffer as both caches is refused (the shared form cannot rely on two borrows).
    assert!(kv_cache_copy_blocks_shared(&shape, &[(1, 2)], &k_cache, &k_cache).is_err());

    // Refused: out of range, a destination that is also a source, a block written twice.
    for bad in [&[(11usize, 0usize)][..], &[(1, 2), (2, 3)], &[(1, 3), (2, 3)], &[(5, 5)]] {
        assert!(kv_cache_copy_blocks(&shape, bad, &mut k_cache, &mut v_cache).is_err(), "{bad:?}");
    }
    let mut short = s.alloc::<T>(len - 1).unwrap();
    assert!(kv_cache_write(&shape, &dk, &dv, &dslots, &mut k_cache, &mut short).is_err());
}

#[test]
fn write_and_copy_f32() {
    write_and_copy::<f32>(0xcac1);
}

#[test]
fn write_and_copy_f16() {
    write_and_copy::<f16>(0xcac2);
}

#[test]
fn write_and_copy_bf16() {
    write_and_copy::<bf16>(0xcac3);
}
