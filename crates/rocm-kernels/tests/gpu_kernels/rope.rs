//! `rope` against its f64 CPU reference: every style (NeoX, GPT-J, partial rotary, GLM,
//! ChatGLM 2D), all three dtypes, both kernel paths (16-byte groups and single pairs), Q and K
//! with their own head counts, positions up to 1e5, linear scaling, strided tokens (a packed QKV
//! buffer), per-pair frequency factors (Llama 3.1's `rope_freqs`), invalid positions, and
//! shapes the launcher must refuse. RoPE works in place, so
//! instead of a poisoned output the tests check that every element outside the rotated
//! segments is bit-for-bit untouched.

use rocm_kernels::rope::{FreqFactors, Rope, RopeStyle, RopeTensor, rope_in_place, rope_reference};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{Error, bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, gpu_test};

fn data<T: Dtype>(rng: &mut Rng, len: usize) -> Vec<T> {
    rng.f32_vec(len, -2.0, 2.0).into_iter().map(T::from_f32).collect()
}

fn floats<T: Dtype>(v: &[T]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

/// The reference is the exact rotation of the stored inputs. The kernel's angle is within
/// ~1.2e-7 rad, cos/sin within a few 1e-7, and the rotation is f32 arithmetic: with inputs
/// below 2 in magnitude, 4e-6 absolute covers it. f16 and bf16 add one rounding of the output
/// (2^-11 and 2^-8 relative).
pub(crate) fn tolerance<T: Dtype>() -> Tolerance {
    let rel = match T::NAME {
        "f32" => 1e-6,
        "f16" => 1e-3,
        _ => 8e-3,
    };
    Tolerance::new(4e-6, rel)
}

/// Which elements of a head the style rotates.
fn rotated(rope: &Rope) -> Vec<bool> {
    let hd = rope.head_dim;
    let end = match rope.style {
        RopeStyle::NeoX { rotary_dim } | RopeStyle::GptJ { rotary_dim } => rotary_dim,
        RopeStyle::Glm { .. } => hd / 2,
        RopeStyle::ChatGlm2d => hd,
    };
    (0..hd).map(|e| e < end).collect()
}

/// Compares one tensor after the launch: rotated elements against the reference, everything
/// else (pass-through elements, gaps between tokens) bit-for-bit against the input.
#[allow(clippy::too_many_arguments)]
fn check_tensor<T: Dtype>(
    name: &str,
    rope: &Rope,
    before: &[T],
    after: &[T],
    heads: usize,
    stride: Option<usize>,
    positions: &[i32],
    block_positions: Option<&[i32]>,
) {
    let expected = rope_reference(rope, &floats(before), heads, stride, positions, block_positions);
    let row = heads * rope.head_dim;
    let stride = stride.unwrap_or(row);
    let mask = rotated(rope);
    let is_rotated = |i: usize| i % stride < row && mask[(i % stride) % rope.head_dim];
    let (mut got_r, mut want_r) = (Vec::new(), Vec::new());
    for (i, (&a, &b)) in after.iter().zip(before).enumerate() {
        if is_rotated(i) {
            got_r.push(a.to_f32() as f64);
            want_r.push(expected[i]);
        } else {
            assert_eq!(
                a.to_f32().to_bits(),
                b.to_f32().to_bits(),
                "{name}: element {i} (token {}, offset {}) is not rotated but changed",
                i / stride,
                i % stride
            );
        }
    }
    assert!(!got_r.is_empty());
    assert_close(&got_r, &want_r, tolerance::<T>());
}

/// Runs `rope` on random Q ([tokens, q_heads, hd]) and K ([tokens, k_heads, hd]) at random
/// positions below `max_pos` and checks both.
fn case<T: Dtype>(
    gpu: &GpuTest,
    rng: &mut Rng,
    rope: &Rope,
    tokens: usize,
    q_heads: usize,
    k_heads: usize,
    max_pos: u64,
) {
    let hd = rope.head_dim;
    let q = data::<T>(rng, tokens * q_heads * hd);
    let k = data::<T>(rng, tokens * k_heads * hd);
    let mut positions: Vec<i32> = (0..tokens).map(|_| rng.below(max_pos) as i32).collect();
    positions[0] = 0;
    if tokens > 1 {
        positions[tokens - 1] = (max_pos - 1) as i32;
    }
    let block_positions: Option<Vec<i32>> = matches!(rope.style, RopeStyle::ChatGlm2d)
        .then(|| (0..tokens).map(|_| rng.below(max_pos) as i32).collect());
    let mut dq = gpu.stream().upload(&q).unwrap();
    let mut dk = gpu.stream().upload(&k).unwrap();
    let dp = gpu.stream().upload(&positions).unwrap();
    let db = block_positions.as_ref().map(|b| gpu.stream().upload(b).unwrap());
    rope_in_place(rope, &mut dq, q_heads, &mut dk, k_heads, &dp, db.as_ref()).unwrap();
    eprintln!("rope {} {rope:?}: {tokens} tokens, {q_heads} + {k_heads} heads", T::NAME);
    let bp = block_positions.as_deref();
    check_tensor("q", rope, &q, &dq.to_vec().unwrap(), q_heads, None, &positions, bp);
    check_tensor("k", rope, &k, &dk.to_vec().unwrap(), k_heads, None, &positions, bp);
    assert_eq!(dp.to_vec().unwrap(), positions, "positions are read only");
}

/// Styles over head sizes that take the 16-byte path for every dtype (128, 64), only for some
/// (groups of 4 pairs fit f32 but not the 8 of f16/bf16: NeoX partial 24 of 96, GPT-J rotary
/// 24, 2D on 16) or never (head_dim 6, 10 and 12).
fn ropes() -> Vec<Rope> {
    vec![
        Rope::neox(128),
        Rope::neox(64).with_theta_base(500_000.0),
        Rope::new(RopeStyle::NeoX { rotary_dim: 32 }, 128),
        Rope::new(RopeStyle::NeoX { rotary_dim: 24 }, 96).with_scaling_factor(4.0),
        Rope::new(RopeStyle::NeoX { rotary_dim: 4 }, 6),
        Rope::new(RopeStyle::GptJ { rotary_dim: 128 }, 128),
        Rope::new(RopeStyle::GptJ { rotary_dim: 64 }, 256).with_scaling_factor(2.5),
        Rope::new(RopeStyle::GptJ { rotary_dim: 24 }, 128),
        Rope::new(RopeStyle::GptJ { rotary_dim: 2 }, 10),
        Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 128),
        Rope::new(RopeStyle::Glm { rope_ratio: 500.0 }, 128),
        Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 12),
        Rope::new(RopeStyle::ChatGlm2d, 128),
        Rope::new(RopeStyle::ChatGlm2d, 16),
        Rope::new(RopeStyle::ChatGlm2d, 12),
        // Work items a head that do not divide the warp (the warp path leaves lanes idle): 5
        // groups (f16/bf16) or 10 (f32) for NeoX-80, 6 or 12 for NeoX-96.
        Rope::neox(80),
        Rope::neox(96).with_theta_base(1_000_000.0),
        // 65 single pairs a head: more than a warp or wavefront holds (the table path).
        Rope::neox(130),
    ]
}

fn styles<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for rope in ropes() {
        // (tokens, q_heads, k_heads): decode; awkward counts; grouped-query; K with more heads.
        for &(tokens, qh, kh) in &[(1, 4, 1), (7, 3, 3), (127, 8, 2), (5, 1, 5)] {
            case::<T>(gpu, &mut rng, &rope, tokens, qh, kh, 100_000);
        }
    }
    // 10 000 tokens, small heads, positions near the top of a long context.
    case::<T>(gpu, &mut rng, &Rope::neox(64), 10_000, 4, 2, 131_072);
    case::<T>(gpu, &mut rng, &Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 64), 10_000, 2, 1, 131_072);
    // Decode at Llama-3-8B shapes (32 + 8 heads of 128): one and four tokens, whose heads the
    // warp path splits over many warps (grid z), in rounds that do not divide evenly.
    case::<T>(gpu, &mut rng, &Rope::new(RopeStyle::GptJ { rotary_dim: 128 }, 128), 1, 32, 8, 8192);
    case::<T>(gpu, &mut rng, &Rope::neox(128), 4, 32, 8, 8192);
    case::<T>(gpu, &mut rng, &Rope::neox(128), 3, 7, 1, 8192);
    // A token with more work items than a block (rounds of the block loop): 40 heads of 256.
    case::<T>(gpu, &mut rng, &Rope::new(RopeStyle::GptJ { rotary_dim: 256 }, 256), 3, 32, 8, 4096);
    case::<T>(gpu, &mut rng, &Rope::new(RopeStyle::ChatGlm2d, 1024), 2, 3, 2, 4096);
}

#[test]
fn rope_matches_the_reference_f32() {
    let gpu = gpu_test!();
    styles::<f32>(&gpu, 0x40e1);
}

#[test]
fn rope_matches_the_reference_f16() {
    let gpu = gpu_test!();
    styles::<f16>(&gpu, 0x40e2);
}

#[test]
fn rope_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    styles::<bf16>(&gpu, 0x40e3);
}

/// Rotated pairs a segment: one frequency factor each.
fn pairs(rope: &Rope) -> usize {
    match rope.style {
        RopeStyle::NeoX { rotary_dim } | RopeStyle::GptJ { rotary_dim } => rotary_dim / 2,
        RopeStyle::Glm { .. } | RopeStyle::ChatGlm2d => rope.head_dim / 4,
    }
}

/// Random factors, log-uniform in [0.5, 8]: Llama 3.1's run from 1 to 8; below 1 a pair turns
/// faster than without.
fn random_factors(rng: &mut Rng, rope: &Rope) -> FreqFactors {
    let factors: Vec<f64> = (0..pairs(rope)).map(|_| 2f64.powf(rng.uniform(-1.0, 3.0))).collect();
    FreqFactors::new(&factors).unwrap()
}

/// Every style of `ropes()` with random per-pair frequency factors (each pair's frequency
/// divided by its own), against the reference, which applies them the same way.
fn freq_factors<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for rope in ropes() {
        let rope = rope.with_freq_factors(random_factors(&mut rng, &rope));
        for &(tokens, qh, kh) in &[(1, 4, 1), (33, 3, 2)] {
            case::<T>(gpu, &mut rng, &rope, tokens, qh, kh, 100_000);
        }
    }
    // Llama 3.1 8B's shape (interleaved pairs of 128, base 500000) over a long context, and the
    // table path (ChatGLM 2D on 1024: 256 factors, the kernel's whole table).
    let llama = Rope::new(RopeStyle::GptJ { rotary_dim: 128 }, 128).with_theta_base(500_000.0);
    let llama = llama.with_freq_factors(random_factors(&mut rng, &llama));
    case::<T>(gpu, &mut rng, &llama, 2000, 4, 1, 131_072);
    let big = Rope::new(RopeStyle::ChatGlm2d, 1024);
    let big = big.with_freq_factors(random_factors(&mut rng, &big));
    case::<T>(gpu, &mut rng, &big, 2, 3, 2, 4096);
}

#[test]
fn rope_with_freq_factors_matches_the_reference_f32() {
    let gpu = gpu_test!();
    freq_factors::<f32>(&gpu, 0xf0e1);
}

#[test]
fn rope_with_freq_factors_matches_the_reference_f16() {
    let gpu = gpu_test!();
    freq_factors::<f16>(&gpu, 0xf0e2);
}

#[test]
fn rope_with_freq_factors_matches_the_reference_bf16() {
    let gpu = gpu_test!();
    freq_factors::<bf16>(&gpu, 0xf0e3);
}

/// Factors of 1 give the table without factors bit for bit, so the kernel's output is the same
/// bytes (f32 and bf16, NeoX, GPT-J partial and GLM).
#[test]
fn unit_freq_factors_give_the_same_bytes() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xf1);
    for rope in [
        Rope::neox(128).with_theta_base(500_000.0),
        Rope::new(RopeStyle::GptJ { rotary_dim: 64 }, 128).with_scaling_factor(2.0),
        Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 128),
    ] {
        let ones = rope.with_freq_factors(FreqFactors::new(&vec![1.0; pairs(&rope)]).unwrap());
        let (tokens, qh, kh) = (17, 4, 2);
        let positions: Vec<i32> = (0..tokens).map(|_| rng.below(100_000) as i32).collect();
        let dp = gpu.stream().upload(&positions).unwrap();
        let q = data::<f32>(&mut rng, tokens * qh * rope.head_dim);
        let k = data::<bf16>(&mut rng, tokens * kh * rope.head_dim);
        let mut outputs = Vec::new();
        for r in [&rope, &ones] {
            let mut dq = gpu.stream().upload(&q).unwrap();
            let mut dk = gpu.stream().upload(&k).unwrap();
            r.run(RopeTensor::new(&mut dq, qh), None, &dp, None).unwrap();
            r.run(RopeTensor::new(&mut dk, kh), None, &dp, None).unwrap();
            let q_bits: Vec<u32> = dq.to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
            let k_bits: Vec<u16> = dk.to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
            outputs.push((q_bits, k_bits));
        }
        assert!(outputs[0] == outputs[1], "{rope:?}: factors of 1 changed the output");
        assert!(outputs[0].0 != q.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "nothing rotated");
    }
}

/// Q and K heads packed in one `[tokens, q_heads + 2 * kv_heads, hd]` QKV buffer: one tensor
/// of `q_heads + kv_heads` heads with the QKV row as stride rotates Q and K and leaves V alone.
fn packed_qkv<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for rope in [Rope::neox(128), Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 128), Rope::neox(6)] {
        let (tokens, qh, kvh) = (33, 4, 2);
        let hd = rope.head_dim;
        let stride = (qh + 2 * kvh) * hd;
        let qkv = data::<T>(&mut rng, tokens * stride);
        let positions: Vec<i32> = (0..tokens).map(|_| rng.below(50_000) as i32).collect();
        let mut d = gpu.stream().upload(&qkv).unwrap();
        let dp = gpu.stream().upload(&positions).unwrap();
        rope.run(RopeTensor::new(&mut d, qh + kvh).with_token_stride(stride), None, &dp, None).unwrap();
        eprintln!("packed QKV rope {} {rope:?}", T::NAME);
        // The V heads are the "gap" between tokens: check_tensor requires them untouched.
        let after = d.to_vec().unwrap();
        let used = (tokens - 1) * stride + (qh + kvh) * hd;
        check_tensor("qkv", &rope, &qkv[..used], &after[..used], qh + kvh, Some(stride), &positions, None);
        assert_eq!(after[used..], qkv[used..], "the last token's V heads changed");
    }
}

#[test]
fn packed_qkv_rope_leaves_v_alone_f32() {
    let gpu = gpu_test!();
    packed_qkv::<f32>(&gpu, 0x9c1);
}

#[test]
fn packed_qkv_rope_leaves_v_alone_f16() {
    let gpu = gpu_test!();
    packed_qkv::<f16>(&gpu, 0x9c2);
}

#[test]
fn packed_qkv_rope_leaves_v_alone_bf16() {
    let gpu = gpu_test!();
    packed_qkv::<bf16>(&gpu, 0x9c3);
}

#[test]
fn q_alone_and_strided_k() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0x9a);
    let rope = Rope::new(RopeStyle::NeoX { rotary_dim: 64 }, 128);
    let (tokens, qh, kh, k_stride) = (9, 3, 2, 2 * 128 + 2);
    let q = data::<f32>(&mut rng, tokens * qh * 128);
    let k = data::<f32>(&mut rng, (tokens - 1) * k_stride + kh * 128);
    let positions: Vec<i32> = (0..tokens as i32).map(|t| 1000 * t + 7).collect();
    let dp = gpu.stream().upload(&positions).unwrap();
    // Q alone.
    let mut dq = gpu.stream().upload(&q).unwrap();
    rope.run(RopeTensor::new(&mut dq, qh), None, &dp, None).unwrap();
    check_tensor("q", &rope, &q, &dq.to_vec().unwrap(), qh, None, &positions, None);
    // K with a token stride that is not a whole number of 16-byte vectors (the pair-by-pair path
    // for K, and so for the launch) next to a contiguous Q.
    let mut dq = gpu.stream().upload(&q).unwrap();
    let mut dk = gpu.stream().upload(&k).unwrap();
    let kt = RopeTensor::new(&mut dk, kh).with_token_stride(k_stride);
    rope.run(RopeTensor::new(&mut dq, qh), Some(kt), &dp, None).unwrap();
    check_tensor("q", &rope, &q, &dq.to_vec().unwrap(), qh, None, &positions, None);
    check_tensor("k", &rope, &k, &dk.to_vec().unwrap(), kh, Some(k_stride), &positions, None);
}

/// The checked way in: host positions outside [0, max_position) are an error naming the token,
/// and nothing is uploaded; valid ones upload unchanged.
#[test]
fn upload_positions_refuses_out_of_range_ones() {
    let gpu = gpu_test!();
    let rope = Rope::neox(64).with_max_position(1000);
    for (bad, token, value) in
        [(vec![0, 999, 1000], 2, 1000), (vec![-1, 3], 0, -1), (vec![5, 7, 2_000_000], 2, 2_000_000)]
    {
        let message = rope.upload_positions(gpu.stream(), &bad).unwrap_err().to_string();
        assert!(message.contains(&format!("position {value} of token {token}")), "{message}");
    }
    let good = rope.upload_positions(gpu.stream(), &[0, 999, 3]).unwrap();
    assert_eq!(good.to_vec().unwrap(), [0, 999, 3]);
    let unbounded = Rope::neox(64).upload_positions(gpu.stream(), &[i32::MAX]).unwrap();
    assert_eq!(unbounded.to_vec().unwrap(), [i32::MAX]);
}

#[test]
fn invalid_positions_write_nan_into_their_token_only() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xbad);
    for rope in
        [Rope::neox(64).with_max_position(1000), Rope::new(RopeStyle::ChatGlm2d, 64).with_max_position(1000)]
    {
        let (tokens, qh, kh) = (6, 2, 1);
        let q = data::<f32>(&mut rng, tokens * qh * 64);
        let k = data::<f32>(&mut rng, tokens * kh * 64);
        let positions = [0, 999, -1, 1000, 5000, 3];
        let block = [1, -7, 0, 2, 3, 1000];
        let two_d = matches!(rope.style, RopeStyle::ChatGlm2d);
        let mut dq = gpu.stream().upload(&q).unwrap();
        let mut dk = gpu.stream().upload(&k).unwrap();
        let dp = gpu.stream().upload(&positions).unwrap();
        let db = gpu.stream().upload(&block).unwrap();
        rope_in_place(&rope, &mut dq, qh, &mut dk, kh, &dp, two_d.then_some(&db)).unwrap();
        let bp = two_d.then_some(&block[..]);
        let got_q = dq.to_vec().unwrap();
        check_tensor("q", &rope, &q, &got_q, qh, None, &positions, bp);
        check_tensor("k", &rope, &k, &dk.to_vec().unwrap(), kh, None, &positions, bp);
        // Tokens 2, 3, 4 (positions -1, 1000, 5000) are NaN where they rotate; 0, 1 and 5 are
        // finite except where a block position is invalid (2D: token 1 and 5, second half).
        for t in 0..tokens {
            let head = &got_q[t * qh * 64..][..64];
            let first_bad = (2..=4).contains(&t);
            assert_eq!(head[..32].iter().all(|v| v.is_nan()), first_bad, "token {t}, first half");
            if two_d {
                let second_bad = t == 1 || t == 5;
                assert_eq!(head[32..].iter().all(|v| v.is_nan()), second_bad, "token {t}, second half");
            }
        }
    }
}

#[test]
fn bad_shapes_are_refused() {
    let gpu = gpu_test!();
    let shape_error = |r: Result<(), KernelError>| crate::shape_message(r, "rope");
    let rope = Rope::neox(8);
    let positions = gpu.stream().upload(&[0i32, 1, 2]).unwrap();
    let mut q = gpu.stream().upload(&[1.0f32; 3 * 2 * 8]).unwrap();
    let mut k = gpu.stream().upload(&[1.0f32; 3 * 8]).unwrap();
    let mut short = gpu.stream().upload(&[1.0f32; 3 * 8 - 1]).unwrap();
    assert!(
        shape_error(rope_in_place(&rope, &mut q, 2, &mut short, 1, &positions, None)).contains("k has 23")
    );
    assert!(shape_error(rope_in_place(&rope, &mut q, 3, &mut k, 1, &positions, None)).contains("q has 48"));
    let odd = Rope::neox(7);
    assert!(shape_error(rope_in_place(&odd, &mut q, 2, &mut k, 1, &positions, None)).contains("head_dim"));
    let partial = Rope::new(RopeStyle::NeoX { rotary_dim: 10 }, 8);
    assert!(
        shape_error(rope_in_place(&partial, &mut q, 2, &mut k, 1, &positions, None)).contains("rotary_dim")
    );
    let two_d = Rope::new(RopeStyle::ChatGlm2d, 8);
    assert!(
        shape_error(rope_in_place(&two_d, &mut q, 2, &mut k, 1, &positions, None))
            .contains("block_positions")
    );
    let block = gpu.stream().upload(&[0i32, 1]).unwrap();
    assert!(
        shape_error(rope_in_place(&two_d, &mut q, 2, &mut k, 1, &positions, Some(&block)))
            .contains("block_positions has 2")
    );
    assert!(
        shape_error(rope_in_place(&rope, &mut q, 2, &mut k, 1, &positions, Some(&block)))
            .contains("only used")
    );
    // Frequency factors: one per rotated pair (4 for head_dim 8).
    let three = rope.with_freq_factors(FreqFactors::new(&[1.0, 2.0, 4.0]).unwrap());
    assert_eq!(
        shape_error(rope_in_place(&three, &mut q, 2, &mut k, 1, &positions, None)),
        "3 frequency factors, but the style rotates 4 pairs a segment"
    );
    let strided = RopeTensor::new(&mut q, 2).with_token_stride(15);
    assert!(shape_error(rope.run(strided, None, &positions, None)).contains("token stride 15"));
    // Buffers of another stream are refused before anything runs.
    let other = gpu.new_stream();
    let foreign = other.upload(&[0i32, 1, 2]).unwrap();
    let err = rope_in_place(&rope, &mut q, 2, &mut k, 1, &foreign, None).unwrap_err();
    assert!(matches!(err, KernelError::Runtime(Error::StreamMismatch { .. })), "{err}");
    let mut foreign_k = other.upload(&[1.0f32; 3 * 8]).unwrap();
    let err = rope_in_place(&rope, &mut q, 2, &mut foreign_k, 1, &positions, None).unwrap_err();
    assert!(matches!(err, KernelError::Runtime(Error::StreamMismatch { .. })), "{err}");
    assert!(q.to_vec().unwrap().iter().all(|&v| v == 1.0), "nothing ran after a refused launch");
    // No tokens: nothing to do.
    let none = gpu.stream().alloc::<i32>(0).unwrap();
    let mut empty_q = gpu.stream().alloc::<f32>(0).unwrap();
    let mut empty_k = gpu.stream().alloc::<f32>(0).unwrap();
    rope_in_place(&rope, &mut empty_q, 2, &mut empty_k, 1, &none, None).unwrap();
}
