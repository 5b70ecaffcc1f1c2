//! `Rope::run_into_cache` (RoPE with K and V written into the paged cache, one launch where the
//! layout allows) against the two launches it replaces, `Rope::run` then `kv_cache_write`, on
//! the same inputs and poisoned caches, and Q against the f64 reference: styles that fuse (NeoX
//! and GPT-J over whole heads, head sizes whose items do not divide a warp, a strided Q) and
//! styles that take the two launches (partial rotary, GLM); padding slots and a slot past the
//! cache; 1, 3 and 17 tokens; shapes the launcher must refuse.

use rocm_kernels::Dtype;
use rocm_kernels::kv_cache::{CacheShape, kv_cache_write};
use rocm_kernels::rope::{Rope, RopeStyle, RopeTensor, rope_reference};
use rocm_runtime::{DeviceBuffer, bf16, f16};
use rocm_testkit::{GpuTest, Rng, assert_close, gpu_test};

use crate::bits;
use crate::rope::tolerance;
use crate::shape_message;

fn data<T: Dtype>(rng: &mut Rng, len: usize) -> Vec<T> {
    rng.f32_vec(len, -2.0, 2.0).into_iter().map(T::from_f32).collect()
}

struct Case {
    rope: Rope,
    q_heads: usize,
    kv_heads: usize,
    /// Q's token stride past its heads (a packed QKV's K and V after it).
    q_gap: usize,
}

fn cases() -> Vec<Case> {
    let case = |rope, q_heads, kv_heads, q_gap| Case { rope, q_heads, kv_heads, q_gap };
    vec![
        // One launch: NeoX / GPT-J over the whole head.
        case(Rope::neox(128).with_theta_base(500_000.0), 32, 8, 0), // Llama 3
        case(Rope::neox(128).with_theta_base(1_000_000.0), 28, 4, 1024), // Qwen2, strided Q
        case(Rope::new(RopeStyle::GptJ { rotary_dim: 64 }, 64), 4, 4, 0),
        case(Rope::neox(80), 5, 1, 0), // items a head that do not divide a warp
        case(Rope::neox(10), 3, 3, 2), // scalar: no 16-byte groups
        // Two launches: pass-through elements the cache needs too, or a style of its own.
        case(Rope::new(RopeStyle::NeoX { rotary_dim: 32 }, 128), 8, 2, 0),
        case(Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 128), 6, 2, 0),
    ]
}

/// A cache of 5 blocks of 7 slots, poisoned; `tokens` distinct shuffled slots, the second a
/// padding slot (-1) and the last one past the cache when there are more than 2.
fn slots(rng: &mut Rng, shape: &CacheShape, tokens: usize) -> Vec<i32> {
    let mut all: Vec<i32> = (0..shape.num_slots() as i32).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut slots = all[..tokens].to_vec();
    if tokens > 2 {
        slots[1] = -1;
        slots[tokens - 1] = shape.num_slots() as i32 + 3;
    }
    slots
}

fn poisoned<T: Dtype>(gpu: &GpuTest, len: usize) -> DeviceBuffer<T> {
    let mut b = gpu.stream().alloc::<T>(len).unwrap();
    b.poison().unwrap();
    b
}

fn case<T: Dtype>(gpu: &GpuTest, rng: &mut Rng, c: &Case, tokens: usize) {
    let s = gpu.stream();
    let hd = c.rope.head_dim;
    let shape = CacheShape { num_blocks: 5, block_size: 7, kv_heads: c.kv_heads, head_dim: hd };
    let len = shape.elements().unwrap();
    let q_stride = c.q_heads * hd + c.q_gap;
    let q = data::<T>(rng, tokens * q_stride);
    let k = data::<T>(rng, tokens * shape.row());
    let v = data::<T>(rng, tokens * shape.row());
    let positions: Vec<i32> = (0..tokens).map(|_| rng.below(100_000) as i32).collect();
    let slots = slots(rng, &shape, tokens);
    let (dp, ds, dv) = (s.upload(&positions).unwrap(), s.upload(&slots).unwrap(), s.upload(&v).unwrap());

    // The fused call.
    let (mut q1, mut k1) = (s.upload(&q).unwrap(), s.upload(&k).unwrap());
    let (mut kc1, mut vc1) = (poisoned::<T>(gpu, len), poisoned::<T>(gpu, len));
    let poison = kc1.to_vec().unwrap();
    let q_tensor = RopeTensor::new(&mut q1, c.q_heads).with_token_stride(q_stride);
    c.rope.run_into_cache(q_tensor, &mut k1, &dv, &dp, &shape, &ds, &mut kc1, &mut vc1).unwrap();

    // The two launches it replaces.
    let (mut q2, mut k2) = (s.upload(&q).unwrap(), s.upload(&k).unwrap());
    let (mut kc2, mut vc2) = (poisoned::<T>(gpu, len), poisoned::<T>(gpu, len));
    let q_tensor = RopeTensor::new(&mut q2, c.q_heads).with_token_stride(q_stride);
    c.rope.run(q_tensor, Some(RopeTensor::new(&mut k2, c.kv_heads)), &dp, None).unwrap();
    kv_cache_write(&shape, &k2, &dv, &ds, &mut kc2, &mut vc2).unwrap();

    let what = format!("{} {:?}, {tokens} tokens, {} + {} heads", T::NAME, c.rope, c.q_heads, c.kv_heads);
    eprintln!("rope into cache: {what}");
    // Q: the reference's rotation where rotated, every other element (gaps, pass-through) as it
    // was; and as the two launches left it.
    let (got_q, two_q) = (q1.to_vec().unwrap(), q2.to_vec().unwrap());
    let floats = |v: &[T]| v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
    let want_q = rope_reference(&c.rope, &floats(&q), c.q_heads, Some(q_stride), &positions, None);
    assert_close(&floats(&got_q), &want_q, tolerance::<T>());
    assert_close(&floats(&got_q), &floats(&two_q), tolerance::<T>());
    // V: a copy, bit for bit; the slots no token writes keep their poison.
    assert_eq!(bits(&vc1.to_vec().unwrap()), bits(&vc2.to_vec().unwrap()), "v cache: {what}");
    // K: rotated rows in the written slots (the two launches' K rotation passed rope.rs's
    // tests), the poison elsewhere, bit for bit.
    let (got_kc, two_kc) = (kc1.to_vec().unwrap(), kc2.to_vec().unwrap());
    let row = shape.row();
    let mut written = vec![false; shape.num_slots()];
    for &slot in &slots {
        if slot >= 0 && (slot as usize) < shape.num_slots() {
            written[slot as usize] = true;
        }
    }
    let (mut got_r, mut two_r) = (Vec::new(), Vec::new());
    for (slot, &w) in written.iter().enumerate() {
        let at = slot * row..(slot + 1) * row;
        if w {
            got_r.extend(floats(&got_kc[at.clone()]));
            two_r.extend(floats(&two_kc[at]));
        } else {
            assert_eq!(bits(&got_kc[at.clone()]), bits(&poison[at]), "k cache slot {slot} written: {what}");
        }
    }
    assert_close(&got_r, &two_r, tolerance::<T>());
    let differing =
        got_kc.iter().zip(&two_kc).filter(|(a, b)| a.to_f32().to_bits() != b.to_f32().to_bits()).count();
    eprintln!("  k cache: {differing} of {} elements differ in bits from the two launches'", got_kc.len());
}

fn matches_the_two_launches<T: Dtype>(seed: u64) {
    let gpu = gpu_test!();
    let mut rng = Rng::new(seed);
    for c in cases() {
        for tokens in [1, 3, 17] {
            case::<T>(&gpu, &mut rng, &c, tokens);
        }
    }
}

#[test]
fn rope_into_cache_matches_rope_then_the_cache_write_f32() {
    matches_the_two_launches::<f32>(0x7a01);
}

#[test]
fn rope_into_cache_matches_rope_then_the_cache_write_f16() {
    matches_the_two_launches::<f16>(0x7a02);
}

#[test]
fn rope_into_cache_matches_rope_then_the_cache_write_bf16() {
    matches_the_two_launches::<bf16>(0x7a03);
}

#[test]
fn rope_into_cache_refuses_bad_shapes() {
    let gpu = gpu_test!();
    let s = gpu.stream();
    let rope = Rope::neox(64);
    let shape = CacheShape { num_blocks: 2, block_size: 4, kv_heads: 2, head_dim: 64 };
    let len = shape.elements().unwrap();
    let tokens = 3;
    let mut q = s.alloc::<f16>(tokens * 4 * 64).unwrap();
    let mut k = s.alloc::<f16>(tokens * shape.row()).unwrap();
    let v = s.alloc::<f16>(tokens * shape.row()).unwrap();
    let positions = s.upload(&[0i32, 1, 2]).unwrap();
    let slots = s.upload(&[0i32, 1, 2]).unwrap();
    let (mut kc, mut vc) = (s.alloc::<f16>(len).unwrap(), s.alloc::<f16>(len).unwrap());

    let two_slots = s.upload(&[0i32, 1]).unwrap();
    let r = rope.run_into_cache(
        RopeTensor::new(&mut q, 4),
        &mut k,
        &v,
        &positions,
        &shape,
        &two_slots,
        &mut kc,
        &mut vc,
    );
    assert!(shape_message(r, "rope").contains("2 cache slots for 3 positions"));

    let other = CacheShape { head_dim: 32, kv_heads: 4, ..shape };
    let r = rope.run_into_cache(
        RopeTensor::new(&mut q, 4),
        &mut k,
        &v,
        &positions,
        &other,
        &slots,
        &mut kc,
        &mut vc,
    );
    assert!(shape_message(r, "rope").contains("head_dim 32 is not the RoPE's 64"));

    let short_v = s.alloc::<f16>(tokens * shape.row() - 1).unwrap();
    let r = rope.run_into_cache(
        RopeTensor::new(&mut q, 4),
        &mut k,
        &short_v,
        &positions,
        &shape,
        &slots,
        &mut kc,
        &mut vc,
    );
    assert!(shape_message(r, "rope").contains("v has 383 elements"));

    let mut short_cache = s.alloc::<f16>(len - 1).unwrap();
    let r = rope.run_into_cache(
        RopeTensor::new(&mut q, 4),
        &mut k,
        &v,
        &positions,
        &shape,
        &slots,
        &mut kc,
        &mut short_cache,
    );
    assert!(shape_message(r, "kv_cache").contains("v_cache has"));

    // ChatGLM 2D needs block positions, which this call does not take.
    let glm2d = Rope::new(RopeStyle::ChatGlm2d, 64);
    let r = glm2d.run_into_cache(
        RopeTensor::new(&mut q, 4),
        &mut k,
        &v,
        &positions,
        &shape,
        &slots,
        &mut kc,
        &mut vc,
    );
    assert!(shape_message(r, "rope").contains("needs block_positions"));
}
