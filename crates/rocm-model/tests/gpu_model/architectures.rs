//! qwen2 and glm4 on the GPU against the f64 CPU reference: the synthetic models of
//! `SyntheticSpec::small` (qwen2: QKV biases, half-split RoPE, base 1e6; glm4: QKV biases,
//! post-norms, stacked gate/up, half of each head rotated), weights in F32, F16, BF16, Q8_0, Q4_0
//! and MXFP4. Two sequences (prefill, then batched decode: the block formats dequantised for the
//! GEMM, the biases added by the rank-1 GEMM over every row), and one sequence alone (the fused
//! matrix-vector kernels, a bias on one row). Tolerances as for llama (`parity_tolerance`; the
//! CPU test `emulated_rounding_fits_the_parity_tolerance` covers both architectures).

use rocm_model::model::Architecture;
use rocm_runtime::{bf16, f16};
use rocm_testkit::gpu_test;

use crate::model::{parity, parity_one_sequence};

#[test]
fn qwen2_f32_matches_the_reference() {
    let gpu = gpu_test!();
    parity::<f32>(&gpu, Architecture::Qwen2);
}

#[test]
fn qwen2_f16_and_bf16_match_the_reference() {
    let gpu = gpu_test!();
    parity::<f16>(&gpu, Architecture::Qwen2);
    parity::<bf16>(&gpu, Architecture::Qwen2);
}

#[test]
fn qwen2_one_sequence_decode_matches_the_reference() {
    let gpu = gpu_test!();
    parity_one_sequence::<f32>(&gpu, Architecture::Qwen2);
    parity_one_sequence::<bf16>(&gpu, Architecture::Qwen2);
}

#[test]
fn glm4_f32_matches_the_reference() {
    let gpu = gpu_test!();
    parity::<f32>(&gpu, Architecture::Glm4);
}

#[test]
fn glm4_f16_and_bf16_match_the_reference() {
    let gpu = gpu_test!();
    parity::<f16>(&gpu, Architecture::Glm4);
    parity::<bf16>(&gpu, Architecture::Glm4);
}

#[test]
fn glm4_one_sequence_decode_matches_the_reference() {
    let gpu = gpu_test!();
    parity_one_sequence::<f32>(&gpu, Architecture::Glm4);
    parity_one_sequence::<bf16>(&gpu, Architecture::Glm4);
}
