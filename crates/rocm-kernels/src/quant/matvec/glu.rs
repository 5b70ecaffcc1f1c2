//! [`quant_matvec_glu`]: an MLP's gate and up products with SwiGLU in their epilogue, one launch
//! (`rf_qmvm_q4_k_b1_glu_<dt>`, the one-vector q4_K columns loop of
//! `kernels/quant_matvec_mma.hip`) where a decode step made two, the products' and `rf_swiglu`'s.

use std::sync::OnceLock;

use rocm_runtime::{DeviceBuffer, LaunchConfig, Stream};

use super::{
    GROUP_LIMIT, KERNEL, MMA_MODULE, MMA_ROWS, MmaFormat, ProductShape, abi, check_quant_matvec_group,
    columns_blocks, columns_shared_bytes, columns_warps, matrix_core_chunk,
};
use crate::dtype::{Dtype, kernel_name};
use crate::error::{Result, ensure};
use crate::loader;
use crate::quant::GgmlFormat;

/// Set to `0` to make [`quant_matvec_glu_fuses`] answer no (the model then runs the products and
/// `swiglu`): the benchmarks' A/B switch (read once a process).
pub const QMVM_GLU_ENV: &str = "ROCMFORGE_QMVM_GLU";

fn glu_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var(QMVM_GLU_ENV).map_or(true, |v| v.trim() != "0"))
}

/// Output rows a block's tile holds: the gate's at the mma's rows g, the up's at g + 8.
const GLU_ROWS: usize = MMA_ROWS / 2;

/// Whether [`quant_matvec_glu`] runs for `batch` vectors of `T` and weights in `format` with
/// rows of `k` on `stream`'s device: one vector of q4_K on NVIDIA matrix cores (f16 or bf16)
/// whose `x` fits the columns loop's shared memory; and [`QMVM_GLU_ENV`] not `0`.
pub fn quant_matvec_glu_fuses<T: Dtype>(stream: &Stream, format: GgmlFormat, k: usize, batch: usize) -> bool {
    let info = stream.backend().info();
    glu_allowed()
        && batch == 1
        && format == GgmlFormat::Q4K
        && matrix_core_chunk(info.matrix_cores, format, T::NAME, k).is_some()
        && columns_shared_bytes(k) <= info.shared_mem_per_block_optin as usize
}

/// `act[r] = silu((gate x)[r]) * (up x)[r]` for one vector `x` (`[k]`) and two `[rows, k]`
/// weights in `format`, in one launch. The bits are those of [`super::quant_matvec_group`] over
/// `[gate, up]` followed by `swiglu`: each product's sum is rounded to `T`, then the activation
/// is formed as `kernels/swiglu.hip` forms it (`rocmforge_silu.h`). Only where
/// [`quant_matvec_glu_fuses`] says so; refused elsewhere. Queued on `act`'s stream.
pub fn quant_matvec_glu<T: Dtype>(
    format: GgmlFormat,
    gate: &DeviceBuffer<u8>,
    up: &DeviceBuffer<u8>,
    rows: usize,
    x: &DeviceBuffer<T>,
    k: usize,
    act: &mut DeviceBuffer<T>,
) -> Result<()> {
    let shapes = [gate.len(), up.len()].map(|w_len| ProductShape { rows, w_len, y_len: act.len() });
    check_quant_matvec_group(format, k, 1, x.len(), &shapes)?;
    let stream = act.stream().clone();
    ensure(quant_matvec_glu_fuses::<T>(&stream, format, k, 1), KERNEL, || {
        format!(
            "no gate-and-up kernel for {} weights, k = {k}, {} on this device (quant_matvec_glu_fuses)",
            format.name(),
            T::NAME
        )
    })?;
    if rows == 0 {
        return Ok(());
    }
    ensure(
        [x.device_ptr(), gate.device_ptr(), up.device_ptr(), act.device_ptr()]
            .iter()
            .all(|p| p.is_multiple_of(16)),
        KERNEL,
        || "w, x and y must be 16-byte aligned".into(),
    )?;
    let info = stream.backend().info();
    let mma = MmaFormat::ggml(format);
    let warps = columns_warps(k, mma);
    let threads = warps * 32;
    let row_bytes = k / mma.block_elems * mma.block_bytes;
    ensure(MMA_ROWS * row_bytes < 1 << 32, KERNEL, || {
        format!("k = {k} is too long for the matrix-core kernel")
    })?;
    let tiles = rows.div_ceil(GLU_ROWS);
    ensure(tiles < GROUP_LIMIT, KERNEL, || {
        format!("{rows} rows make {tiles} tiles; a launch takes fewer than 2^31")
    })?;
    let kernel = loader::kernel(&stream, MMA_MODULE, &kernel_name::<T>("rf_qmvm_q4_k_b1_glu"))?;
    ensure(info.warp_size == 32 && kernel.max_threads_per_block() as usize >= threads, KERNEL, || {
        format!("the matrix-core kernel needs {threads} threads of 32-wide warps")
    })?;
    let blocks = columns_blocks(info, warps, tiles);
    let config = LaunchConfig {
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_mem_bytes: columns_shared_bytes(k) as u32,
    };
    let mut params = abi::rf_qmv_products::default();
    params.w[0] = gate.device_ptr();
    params.w[1] = up.device_ptr();
    params.y[0] = act.device_ptr();
    params.rows[0] = rows as u64;
    params.rows[1] = rows as u64;
    // SAFETY: rf_qmvm_q4_k_b1_glu_<T>(rf_qmv_products p, const T* x, u64 k, u32 batch) is the
    // columns loop of matrix_core_products' contract with one product's rows: it reads bytes
    // [0, rows * row_bytes) of w[0] and of w[1] in 16-byte loads (a row past the end reads the
    // last row instead), x[0, k) once into shared memory (columns_shared_bytes(k), within the
    // device's opt-in limit: quant_matvec_glu_fuses), and writes y[0][0, rows). The gate and
    // up weights hold rows * row_bytes bytes, x k elements and act rows elements
    // (check_quant_matvec_group); all are 16-byte aligned (checked above); k is a positive
    // multiple of 256 (matrix_core_chunk); 16 * row_bytes < 2^32 and tiles and grid below
    // 2^31 (checked above). The block is `warps` (1 to ONE_WARPS_MAX: columns_warps) whole
    // warps of 32 lanes, within the entry's bound (checked). act is a `&mut` borrow, the
    // weights and x shared ones; `reads` / `writes` check each belongs to the stream.
    // Dependent: only the weights' first loads come before its wait for the kernel ahead.
    unsafe {
        stream
            .launch(&kernel)
            .dependent()
            .reads_before_wait(gate)
            .reads_before_wait(up)
            .writes(act)
            .arg(params)
            .buffer(x)
            .arg(k as u64)
            .arg(1u32)
            .launch(config)?
    };
    Ok(())
}
