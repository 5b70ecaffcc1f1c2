//! GLM position ids through the RoPE kernels: ChatGLM-6B's 2D ids (prefill of a prompt with
//! the mask at the end or in the middle, then decode steps) with the ChatGLM 2D RoPE, and
//! GLM-4's plain ids with its interleaved half-head RoPE and `rope_ratio`, against the f64 CPU
//! reference fed the same ids.

use rocm_kernels::Dtype;
use rocm_kernels::rope::{Rope, rope_in_place, rope_reference};
use rocm_model::position::{ChatGlmPositions, chatglm_rope, glm4_rope, plain_positions};
use rocm_runtime::{bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, gpu_test};

/// As the RoPE kernel's own tests: the kernel is within a few f32 ulps of the exact rotation
/// (4e-6 absolute for inputs below 2), and f16/bf16 add one rounding of the output.
fn tolerance<T: Dtype>() -> Tolerance {
    let rel = match T::NAME {
        "f32" => 1e-6,
        "f16" => 1e-3,
        _ => 8e-3,
    };
    Tolerance::new(4e-6, rel)
}

/// Rotates random Q and K at `positions` (and `block_positions`) on the GPU and compares both
/// with the reference.
fn rotate_and_compare<T: Dtype>(
    gpu: &GpuTest,
    rng: &mut Rng,
    rope: &Rope,
    (q_heads, k_heads): (usize, usize),
    positions: &[i32],
    block_positions: Option<&[i32]>,
) {
    let (tokens, hd) = (positions.len(), rope.head_dim);
    let data =
        |rng: &mut Rng, len| -> Vec<T> { rng.f32_vec(len, -2.0, 2.0).into_iter().map(T::from_f32).collect() };
    let q = data(rng, tokens * q_heads * hd);
    let k = data(rng, tokens * k_heads * hd);
    let mut dq = gpu.stream().upload(&q).unwrap();
    let mut dk = gpu.stream().upload(&k).unwrap();
    let dp = gpu.stream().upload(positions).unwrap();
    let db = block_positions.map(|b| gpu.stream().upload(b).unwrap());
    rope_in_place(rope, &mut dq, q_heads, &mut dk, k_heads, &dp, db.as_ref()).unwrap();
    let floats = |v: &[T]| -> Vec<f32> { v.iter().map(|x| x.to_f32()).collect() };
    for (name, before, after, heads) in
        [("q", &q, dq.to_vec().unwrap(), q_heads), ("k", &k, dk.to_vec().unwrap(), k_heads)]
    {
        eprintln!("{name}: {} {rope:?}, {tokens} tokens", T::NAME);
        let want = rope_reference(rope, &floats(before), heads, None, positions, block_positions);
        let got: Vec<f64> = after.iter().map(|x| x.to_f32() as f64).collect();
        assert_close(&got, &want, tolerance::<T>());
    }
}

/// A ChatGLM-6B sequence: the prompt in one prefill, then decode steps one token at a time.
fn chatglm<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    let rope = chatglm_rope(128).unwrap();
    // (prompt length, mask position): [gMASK] just before <sop> at the end; [MASK] early on.
    for (prompt_len, mask) in [(38, 36), (21, 7), (2, 0)] {
        let p = ChatGlmPositions::new(prompt_len - 1, mask).unwrap();
        let ids = p.prefill(prompt_len).unwrap();
        assert_eq!(ids.positions[prompt_len - 1], mask as i32, "<sop> sits at the mask");
        assert_eq!(ids.block_positions[prompt_len - 1], 1);
        rotate_and_compare::<T>(gpu, &mut rng, &rope, (4, 2), &ids.positions, Some(&ids.block_positions));
        for step in 0..3 {
            let (pos, block) = p.decode(prompt_len, step).unwrap();
            assert_eq!((pos, block), (mask as i32, step as i32 + 2));
            rotate_and_compare::<T>(gpu, &mut rng, &rope, (4, 2), &[pos], Some(&[block]));
        }
    }
}

#[test]
fn chatglm_2d_positions_through_the_kernel_f32() {
    let gpu = gpu_test!();
    chatglm::<f32>(&gpu, 0x61a1);
}

#[test]
fn chatglm_2d_positions_through_the_kernel_f16() {
    let gpu = gpu_test!();
    chatglm::<f16>(&gpu, 0x61a2);
}

/// GLM-4: plain positions, prompt then decode, for `rope_ratio` 1 (ChatGLM2) and 500 (GLM-4
/// long-context configs), and positions deep into a long context.
fn glm4<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for (head_dim, ratio) in [(128, 1.0), (128, 500.0), (64, 50.0)] {
        let rope = glm4_rope(head_dim, 10_000.0, ratio).unwrap();
        let prompt = plain_positions(0, 61).unwrap();
        rotate_and_compare::<T>(gpu, &mut rng, &rope, (8, 2), &prompt, None);
        rotate_and_compare::<T>(gpu, &mut rng, &rope, (8, 2), &plain_positions(61, 1).unwrap(), None);
        rotate_and_compare::<T>(gpu, &mut rng, &rope, (2, 1), &plain_positions(120_000, 9).unwrap(), None);
    }
}

#[test]
fn glm4_positions_through_the_kernel_f32() {
    let gpu = gpu_test!();
    glm4::<f32>(&gpu, 0x61b1);
}

#[test]
fn glm4_positions_through_the_kernel_bf16() {
    let gpu = gpu_test!();
    glm4::<bf16>(&gpu, 0x61b2);
}
