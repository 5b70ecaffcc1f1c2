//! `paged_attention` over a cache filled by `kv_cache_write` through shuffled block tables,
//! against the f64 reference and against contiguous `flash_attention` of each sequence: decode
//! and chunked prefill, sequences of different lengths (1 token, a partial block, many blocks;
//! short ones in a wide table, whose key split each sequence recuts for its own length),
//! block sizes 16 and 7, GQA, both kernels, split and not; the caller's scratch giving the
//! allocating path's result bit for bit; a corrupt block table stays inside the cache; and the
//! shapes the launcher refuses.

use rocm_kernels::attention::{
    Attention, AttentionScratch, FlashKernel, FlashOptions, PagedAttention, PagedKv, attention_reference,
    flash_attention, paged_attention, paged_attention_in,
};
use rocm_kernels::kv_cache::{CacheShape, kv_cache_write};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, MatrixCores, bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, compare, gpu_test};

struct Case {
    lens: &'static [usize],
    seq_q: usize,
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    causal: bool,
    /// Blocks of the table at least (a decode graph's table is as wide as the longest
    /// sequence it will serve, whatever the lengths now).
    table: usize,
}

const CASES: &[Case] = &[
    // Decode, GQA 4, a one-token sequence and one of a partial block.
    Case {
        lens: &[1, 300, 1000],
        seq_q: 1,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 128,
        block_size: 16,
        causal: true,
        table: 0,
    },
    // Short sequences in a table of 4096 keys: the launcher plans the key split for the
    // table's width and each sequence cuts its own keys into it (1 key, one tile, a tile and
    // one, 200 keys), most splits empty.
    Case {
        lens: &[1, 63, 64, 65, 200],
        seq_q: 1,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 128,
        block_size: 16,
        causal: true,
        table: 256,
    },
    // Chunked prefill: 5 new tokens at the end of each sequence; odd block size.
    Case {
        lens: &[5, 77, 640],
        seq_q: 5,
        q_heads: 4,
        kv_heads: 4,
        head_dim: 64,
        block_size: 7,
        causal: true,
        table: 0,
    },
    // Non-causal, MQA, head_dim 80.
    Case {
        lens: &[33, 129],
        seq_q: 3,
        q_heads: 6,
        kv_heads: 1,
        head_dim: 80,
        block_size: 16,
        causal: false,
        table: 0,
    },
];

fn normal<T: Dtype>(rng: &mut Rng, len: usize) -> Vec<T> {
    rng.normal_f32_vec(len, 1.0).into_iter().map(T::from_f32).collect()
}

/// f16: P and O rounded (2^-11 each, a few units of max|v| ~ 4); bf16 2^-8; f32 the
/// accumulation only.
fn tolerance<T: Dtype>() -> Tolerance {
    let eps = match T::NAME {
        "f32" => 1e-6,
        "f16" => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    };
    Tolerance::new(4.5 * 4.0 * eps + 1e-5, 0.0)
}

/// The cache, its tables and each sequence's contiguous K/V.
struct Filled<T: Dtype> {
    k_cache: DeviceBuffer<T>,
    v_cache: DeviceBuffer<T>,
    table: DeviceBuffer<i32>,
    lens: DeviceBuffer<i32>,
    max_blocks: usize,
    num_blocks: usize,
    seqs: Vec<(Vec<T>, Vec<T>)>,
}

/// Blocks handed out in a shuffled order (plus spare ones), the table padded with -1, the cache
/// poisoned and then filled by `kv_cache_write` from the slot of every token.
fn fill<T: Dtype>(gpu: &GpuTest, rng: &mut Rng, case: &Case) -> Filled<T> {
    let s = gpu.stream();
    let bs = case.block_size;
    let row = case.kv_heads * case.head_dim;
    let blocks: Vec<usize> = case.lens.iter().map(|l| l.div_ceil(bs)).collect();
    let max_blocks = (*blocks.iter().max().unwrap() + 1).max(case.table);
    let num_blocks = blocks.iter().sum::<usize>() + 5;
    let mut ids: Vec<i32> = (0..num_blocks as i32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut next = ids.into_iter();
    let mut table = vec![-1i32; case.lens.len() * max_blocks];
    let (mut slots, mut k_all, mut v_all, mut seqs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (b, (&len, &nb)) in case.lens.iter().zip(&blocks).enumerate() {
        for j in 0..nb {
            table[b * max_blocks + j] = next.next().unwrap();
        }
        for t in 0..len {
            slots.push(table[b * max_blocks + t / bs] * bs as i32 + (t % bs) as i32);
        }
        let (k, v) = (normal::<T>(rng, len * row), normal::<T>(rng, len * row));
        k_all.extend_from_slice(&k);
        v_all.extend_from_slice(&v);
        seqs.push((k, v));
    }
    let shape = CacheShape { num_blocks, block_size: bs, kv_heads: case.kv_heads, head_dim: case.head_dim };
    let mut k_cache = s.alloc::<T>(shape.elements().unwrap()).unwrap();
    let mut v_cache = s.alloc::<T>(shape.elements().unwrap()).unwrap();
    k_cache.poison().unwrap();
    v_cache.poison().unwrap();
    let (dk, dv, dslots) = (s.upload(&k_all).unwrap(), s.upload(&v_all).unwrap(), s.upload(&slots).unwrap());
    kv_cache_write(&shape, &dk, &dv, &dslots, &mut k_cache, &mut v_cache).unwrap();
    let lens: Vec<i32> = case.lens.iter().map(|&l| l as i32).collect();
    Filled {
        k_cache,
        v_cache,
        table: s.upload(&table).unwrap(),
        lens: s.upload(&lens).unwrap(),
        max_blocks,
        num_blocks,
        seqs,
    }
}

fn problem(case: &Case, f: &Filled<impl Dtype>) -> PagedAttention {
    let p = PagedAttention::new(
        case.lens.len(),
        case.seq_q,
        case.q_heads,
        case.kv_heads,
        case.head_dim,
        case.block_size,
        f.num_blocks,
        f.max_blocks,
    );
    if case.causal { p } else { p.non_causal() }
}

fn check<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    check_cases::<T>(&gpu, seed, CASES);
}

/// Decode with one block per compute unit (one sequence per unit, one KV head of GQA 8): the
/// launcher takes the 8-warp key-split kernel with no split there (`ks8`), which the fixed
/// cases, sized for any device, do not reach. Sequence lengths 1 to 700, block size 16.
fn check_wide_decode<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let units = gpu.backend().info().compute_units as usize;
    let lens: &'static [usize] = Vec::leak((0..units).map(|i| 1 + (i * 37) % 700).collect());
    let case = Case {
        lens,
        seq_q: 1,
        q_heads: 8,
        kv_heads: 1,
        head_dim: 128,
        block_size: 16,
        causal: true,
        table: 0,
    };
    check_cases::<T>(&gpu, seed, std::slice::from_ref(&case));
}

fn check_cases<T: Dtype>(gpu: &GpuTest, seed: u64, cases: &[Case]) {
    let s = gpu.stream();
    let mut rng = Rng::new(seed);
    let mma = gpu.backend().info().matrix_cores != MatrixCores::None && T::NAME != "f32";
    for case in cases {
        let f = fill::<T>(gpu, &mut rng, case);
        let attn = problem(case, &f);
        let (hq, d, sq) = (case.q_heads, case.head_dim, case.seq_q);
        let q = normal::<T>(&mut rng, case.lens.len() * sq * hq * d);
        let dq = s.upload(&q).unwrap();
        let kv = PagedKv { k: &f.k_cache, v: &f.v_cache, block_table: &f.table, seq_lens: &f.lens };

        // Per sequence: the f64 reference and contiguous flash attention.
        let mut want = Vec::new();
        let mut contiguous = Vec::new();
        for (b, (k, v)) in f.seqs.iter().enumerate() {
            let len = case.lens[b];
            let mut one = Attention::new(1, sq, len, hq, case.kv_heads, d);
            if case.causal {
                one = one.causal();
            }
            let qb = &q[b * sq * hq * d..(b + 1) * sq * hq * d];
            want.extend(attention_reference(&one, qb, k, v).out);
            let (dqb, dk, dv) = (s.upload(qb).unwrap(), s.upload(k).unwrap(), s.upload(v).unwrap());
            let mut o = s.alloc::<T>(qb.len()).unwrap();
            flash_attention(&one, &dqb, &dk, &dv, &mut o, None).unwrap();
            contiguous.extend(o.to_vec().unwrap().iter().map(|x| x.to_f32() as f64));
        }

        let mut kernels =
            vec![(FlashKernel::Auto, None), (FlashKernel::Portable, None), (FlashKernel::Auto, Some(3))];
        if mma {
            kernels.push((FlashKernel::MatrixCores, Some(2)));
        }
        for (kernel, splits) in kernels {
            let mut o = s.alloc::<T>(q.len()).unwrap();
            o.poison().unwrap();
            paged_attention(&attn, &FlashOptions { kernel, splits }, &dq, &kv, &mut o, None).unwrap();
            let got: Vec<f64> = o.to_vec().unwrap().iter().map(|x| x.to_f32() as f64).collect();
            eprintln!(
                "paged {} lens {:?} sq {sq} d {d} bs {} {kernel:?} {splits:?}",
                T::NAME,
                case.lens,
                case.block_size
            );
            assert_close(&got, &want, tolerance::<T>());
            let both = Tolerance::new(2.0 * tolerance::<T>().abs, 0.0);
            let c = compare(&got, &contiguous, &both);
            assert!(c.passed(&both), "paged vs contiguous flash: {c}");
        }
    }
}

#[test]
fn paged_attention_matches_the_reference_f32() {
    check::<f32>(0x9a61);
}

#[test]
fn paged_attention_matches_the_reference_f16() {
    check::<f16>(0x9a62);
}

#[test]
fn paged_attention_matches_the_reference_bf16() {
    check::<bf16>(0x9a63);
}

#[test]
fn wide_decode_matches_the_reference_f16() {
    check_wide_decode::<f16>(0x9a64);
}

#[test]
fn wide_decode_matches_the_reference_bf16() {
    check_wide_decode::<bf16>(0x9a65);
}

/// Block ids past the cache, negative ones and a length past the table: the kernels stay inside
/// the cache (rows read as zeros, the length is clamped), so the result is finite garbage, not a
/// fault; the leak check at the end of the scope still passes.
#[test]
fn a_corrupt_block_table_stays_inside_the_cache() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let mut rng = Rng::new(0x9a64);
    let case = &CASES[0];
    let f = fill::<f16>(&gpu, &mut rng, case);
    let attn = problem(case, &f);
    let mut table = f.table.to_vec().unwrap();
    table[0] = 1 << 30;
    table[1] = -5;
    let table = s.upload(&table).unwrap();
    let lens = s.upload(&[1 << 30, 300, -4]).unwrap();
    let kv = PagedKv { k: &f.k_cache, v: &f.v_cache, block_table: &table, seq_lens: &lens };
    let q = s.upload(&normal::<f16>(&mut rng, 3 * case.q_heads * case.head_dim)).unwrap();
    for kernel in [FlashKernel::Auto, FlashKernel::Portable] {
        let mut o = s.alloc::<f16>(q.len()).unwrap();
        paged_attention(&attn, &FlashOptions { kernel, splits: None }, &q, &kv, &mut o, None).unwrap();
        assert!(o.to_vec().unwrap().iter().all(|x| x.is_finite()), "{kernel:?}");
    }
}

#[test]
fn bad_shapes_are_refused() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let attn = PagedAttention::new(2, 1, 4, 2, 64, 16, 8, 4);
    let cache = s.alloc_zeroed::<f16>(8 * 16 * 2 * 64).unwrap();
    let table = s.alloc_zeroed::<i32>(8).unwrap();
    let lens = s.alloc_zeroed::<i32>(2).unwrap();
    let q = s.alloc_zeroed::<f16>(2 * 4 * 64).unwrap();
    let mut o = s.alloc_zeroed::<f16>(2 * 4 * 64).unwrap();
    let opts = FlashOptions::default();
    let message = |r: rocm_kernels::Result<()>| match r {
        Err(KernelError::Shape { message, .. }) => message,
        other => panic!("expected a shape error, got {other:?}"),
    };
    let kv = PagedKv { k: &cache, v: &cache, block_table: &table, seq_lens: &lens };
    paged_attention(&attn, &opts, &q, &kv, &mut o, None).unwrap();
    let short_table = s.alloc_zeroed::<i32>(7).unwrap();
    let bad = PagedKv { block_table: &short_table, ..kv };
    assert!(message(paged_attention(&attn, &opts, &q, &bad, &mut o, None)).contains("block_table has 7"));
    let short_lens = s.alloc_zeroed::<i32>(1).unwrap();
    let bad = PagedKv { seq_lens: &short_lens, ..kv };
    assert!(message(paged_attention(&attn, &opts, &q, &bad, &mut o, None)).contains("seq_lens has 1"));
    let short_cache = s.alloc_zeroed::<f16>(100).unwrap();
    let bad = PagedKv { k: &short_cache, ..kv };
    assert!(message(paged_attention(&attn, &opts, &q, &bad, &mut o, None)).contains("k cache has 100"));
    let odd = PagedAttention { kv_heads: 3, ..attn };
    assert!(message(paged_attention(&odd, &opts, &q, &kv, &mut o, None)).contains("kv_heads 3"));
    let empty = PagedAttention { block_size: 0, ..attn };
    assert!(paged_attention(&empty, &opts, &q, &kv, &mut o, None).is_err());
}

/// `paged_attention_in` with a scratch from `AttentionScratch::for_paged` equals
/// `paged_attention` (which allocates its split temporaries) bit for bit, split or not (forced
/// splits, the launcher's own choice, one split), for every case; with `lse` too. A scratch
/// sized for a problem that does not split is refused by one that does, naming the sizes.
fn scratch_equals_allocating<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let mut rng = Rng::new(seed);
    let bits = |v: Vec<T>| v.iter().map(|x| x.to_f32().to_bits()).collect::<Vec<_>>();
    for case in CASES {
        let f = fill::<T>(&gpu, &mut rng, case);
        let attn = problem(case, &f);
        let q = normal::<T>(&mut rng, case.lens.len() * case.seq_q * case.q_heads * case.head_dim);
        let dq = s.upload(&q).unwrap();
        let kv = PagedKv { k: &f.k_cache, v: &f.v_cache, block_table: &f.table, seq_lens: &f.lens };
        let lse_len = case.lens.len() * case.q_heads * case.seq_q;
        for splits in [Some(3), None, Some(1)] {
            let options = FlashOptions { kernel: FlashKernel::Auto, splits };
            let mut scratch = AttentionScratch::for_paged::<T>(s, &attn, &options).unwrap();
            if splits == Some(3) {
                assert!(
                    !scratch.is_empty(),
                    "3 splits of {} keys need scratch",
                    f.max_blocks * case.block_size
                );
            }
            if splits == Some(1) {
                assert!(scratch.is_empty());
            }
            let (mut want, mut want_lse) = (s.alloc::<T>(q.len()).unwrap(), s.alloc::<f32>(lse_len).unwrap());
            let (mut got, mut got_lse) = (s.alloc::<T>(q.len()).unwrap(), s.alloc::<f32>(lse_len).unwrap());
            got.poison().unwrap();
            got_lse.poison().unwrap();
            paged_attention(&attn, &options, &dq, &kv, &mut want, Some(&mut want_lse)).unwrap();
            paged_attention_in(&attn, &options, &dq, &kv, &mut got, Some(&mut got_lse), &mut scratch)
                .unwrap();
            eprintln!(
                "paged {} lens {:?} splits {splits:?}: scratch of {} f32",
                T::NAME,
                case.lens,
                scratch.len()
            );
            assert_eq!(
                bits(got.to_vec().unwrap()),
                bits(want.to_vec().unwrap()),
                "{:?} {splits:?}",
                case.lens
            );
            let lse_bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(lse_bits(got_lse.to_vec().unwrap()), lse_bits(want_lse.to_vec().unwrap()), "lse");
            if splits == Some(1) {
                let forced = FlashOptions { kernel: FlashKernel::Auto, splits: Some(3) };
                let err =
                    paged_attention_in(&attn, &forced, &dq, &kv, &mut got, None, &mut scratch).unwrap_err();
                assert!(
                    matches!(&err, KernelError::Shape { message, .. } if message.contains("the scratch holds 0 + 0 f32")),
                    "{err}"
                );
            }
        }
    }
}

#[test]
fn scratch_equals_the_allocating_path_f32() {
    scratch_equals_allocating::<f32>(0x9a66);
}

#[test]
fn scratch_equals_the_allocating_path_bf16() {
    scratch_equals_allocating::<bf16>(0x9a67);
}
