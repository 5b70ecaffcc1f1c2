//! The unfused attention pipeline (`kernels/attention.hip`): scores, softmax, weighted sum.

use rocm_runtime::{DeviceBuffer, LaunchConfig, Stream};

use super::{Attention, KERNEL, Tensor};
use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader;
use crate::softmax::{Mask, Softmax};

const MODULE: KernelModule = KernelModule::Attention;

/// Outputs a block computes along each of m and n, and its threads.
const TILE: usize = crate::abi::attention::RF_GEMM_TILE as usize;
const THREADS: u32 = crate::abi::attention::RF_GEMM_THREADS;

/// The kernels' one argument (`rf_attn_gemm_params`, generated from
/// `kernels/include/rocmforge_attention_abi.h`).
type GemmParams = crate::abi::attention::rf_attn_gemm_params;

/// `scores[b, h, i, j] = scale * q[b, i, h] . k[b, j, h / group]` for every query and key (no
/// mask: the softmax applies it), as a contiguous `[batch, q_heads, seq_q, seq_k]` f32 tensor.
pub fn attention_scores<T: Dtype>(
    attn: &Attention,
    q: &DeviceBuffer<T>,
    k: &DeviceBuffer<T>,
    scores: &mut DeviceBuffer<f32>,
) -> Result<()> {
    attn.check_problem()?;
    attn.check_tensor(Tensor::Q, q.len())?;
    attn.check_tensor(Tensor::K, k.len())?;
    let len = scores_len(attn)?;
    ensure(scores.len() == len, KERNEL, || {
        format!("scores has {} elements, [batch, q_heads, seq_q, seq_k] needs {len}", scores.len())
    })?;
    let (sq, sk) = (attn.seq_q as u64, attn.seq_k as u64);
    let h = attn.q_heads as u64;
    let params = GemmParams {
        a: q.device_ptr(),
        b: k.device_ptr(),
        c: scores.device_ptr(),
        a_batch: attn.q.batch as u64,
        a_head: attn.q.head as u64,
        a_m: attn.q.seq as u64,
        a_k: 1,
        b_batch: attn.k.batch as u64,
        b_head: attn.k.head as u64,
        b_k: 1,
        b_n: attn.k.seq as u64,
        c_batch: h * sq * sk,
        c_head: sq * sk,
        c_m: sk,
        c_n: 1,
        m: attn.seq_q as i32,
        n: attn.seq_k as i32,
        k: attn.head_dim as i32,
        heads: attn.q_heads as i32,
        batch: attn.batch as i32,
        group_b: attn.group() as i32,
        alpha: attn.scale,
        pad: 0,
    };
    if attn.seq_q == 0 || attn.seq_k == 0 {
        return Ok(());
    }
    let stream = scores.stream().clone();
    let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>("rf_attention_scores"))?;
    let config = config(&stream, attn, attn.seq_q, attn.seq_k)?;
    // SAFETY: rf_attention_scores_<T>(rf_attn_gemm_params) reads q and k at the strides checked
    // against their lengths (check_tensor) for i < seq_q, j < seq_k, d < head_dim, and writes
    // scores[((b * q_heads + h) * seq_q + i) * seq_k + j] < scores.len() (checked above). The
    // pointers in `params` are those of the buffers named by reads/writes.
    unsafe { stream.launch(&kernel).reads(q).reads(k).writes(scores).arg(params).launch(config)? };
    Ok(())
}

/// `o[b, i, h] = sum_j probs[b, h, i, j] * v[b, j, h / group]`: the attention-weighted sum of
/// the values, `probs` a contiguous `[batch, q_heads, seq_q, seq_k]` f32 tensor.
pub fn attention_weighted<T: Dtype>(
    attn: &Attention,
    probs: &DeviceBuffer<f32>,
    v: &DeviceBuffer<T>,
    o: &mut DeviceBuffer<T>,
) -> Result<()> {
    attn.check_problem()?;
    attn.check_tensor(Tensor::V, v.len())?;
    attn.check_tensor(Tensor::O, o.len())?;
    let len = scores_len(attn)?;
    ensure(probs.len() == len, KERNEL, || {
        format!("probs has {} elements, [batch, q_heads, seq_q, seq_k] needs {len}", probs.len())
    })?;
    let (sq, sk) = (attn.seq_q as u64, attn.seq_k as u64);
    let h = attn.q_heads as u64;
    let params = GemmParams {
        a: probs.device_ptr(),
        b: v.device_ptr(),
        c: o.device_ptr(),
        a_batch: h * sq * sk,
        a_head: sq * sk,
        a_m: sk,
        a_k: 1,
        b_batch: attn.v.batch as u64,
        b_head: attn.v.head as u64,
        b_k: attn.v.seq as u64,
        b_n: 1,
        c_batch: attn.o.batch as u64,
        c_head: attn.o.head as u64,
        c_m: attn.o.seq as u64,
        c_n: 1,
        m: attn.seq_q as i32,
        n: attn.head_dim as i32,
        k: attn.seq_k as i32,
        heads: attn.q_heads as i32,
        batch: attn.batch as i32,
        group_b: attn.group() as i32,
        alpha: 1.0,
        pad: 0,
    };
    if attn.seq_q == 0 {
        return Ok(());
    }
    let stream = o.stream().clone();
    let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>("rf_attention_weighted"))?;
    let config = config(&stream, attn, attn.seq_q, attn.head_dim)?;
    // SAFETY: rf_attention_weighted_<T>(rf_attn_gemm_params) reads probs (length checked
    // above) and v at its checked strides for i < seq_q, j < seq_k, d < head_dim, and writes o
    // at its checked, non-overlapping strides only. The pointers in `params` are those of the
    // buffers named by reads/writes.
    unsafe { stream.launch(&kernel).reads(probs).reads(v).writes(o).arg(params).launch(config)? };
    Ok(())
}

/// Attention through the unfused pipeline: the scores into a temporary `[batch, q_heads,
/// seq_q, seq_k]` f32 tensor (allocated on `o`'s stream, through the memory guard), the softmax
/// in place with the causal mask, then the weighted sum into `o`.
pub fn attention_unfused<T: Dtype>(
    attn: &Attention,
    q: &DeviceBuffer<T>,
    k: &DeviceBuffer<T>,
    v: &DeviceBuffer<T>,
    o: &mut DeviceBuffer<T>,
) -> Result<()> {
    attn.check(q.len(), k.len(), v.len(), o.len())?;
    let stream = o.stream().clone();
    let mut scores = stream.alloc::<f32>(scores_len(attn)?)?;
    attention_scores(attn, q, k, &mut scores)?;
    let softmax = Softmax::new(attn.batch * attn.q_heads * attn.seq_q, attn.seq_k);
    let mask = match attn.causal_offset {
        Some(offset) => Mask::causal_with_offset(attn.seq_q, offset),
        None => Mask::None,
    };
    softmax.run_in_place(&mut scores, mask)?;
    attention_weighted(attn, &scores, v, o)
}

fn scores_len(attn: &Attention) -> Result<usize> {
    attn.scores_len().ok_or_else(|| KernelError::Shape {
        kernel: KERNEL,
        message: format!(
            "the scores [{}, {}, {}, {}] overflow usize",
            attn.batch, attn.q_heads, attn.seq_q, attn.seq_k
        ),
    })
}

/// A block per 64 x 64 output tile of each (batch, head) plane; the z axis walks the planes
/// (grid-stride past the device's limit).
fn config(stream: &Stream, attn: &Attention, m: usize, n: usize) -> Result<LaunchConfig> {
    let info = stream.backend().info();
    let (x, y) = (n.div_ceil(TILE).max(1), m.div_ceil(TILE).max(1));
    ensure(x <= info.max_grid[0] as usize && y <= info.max_grid[1].min(65_535) as usize, KERNEL, || {
        format!("the unfused pipeline takes at most {} queries", info.max_grid[1].min(65_535) as usize * TILE)
    })?;
    let planes = (attn.batch * attn.q_heads).clamp(1, info.max_grid[2].clamp(1, 65_535) as usize);
    Ok(LaunchConfig {
        grid: [x as u32, y as u32, planes as u32],
        block: [THREADS, 1, 1],
        shared_mem_bytes: 0,
    })
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    [every_dtype(MODULE, "rf_attention_scores"), every_dtype(MODULE, "rf_attention_weighted")].concat()
}
