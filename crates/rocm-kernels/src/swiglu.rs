//! `swiglu` (`kernels/swiglu.hip`): the gated activation of Llama-style MLPs,
//! `out = silu(gate) * up` with `silu(g) = g / (1 + exp(-g))`, computed in f32 from f32, f16 or
//! bf16 storage and rounded once.
//!
//! - [`swiglu`]: `gate`, `up` and `out` are separate tensors of one shape (any shape: the
//!   operation is elementwise, so only the element count matters).
//! - [`swiglu_fused`]: one `[rows, 2 * ffn]` tensor from a merged gate-up projection. In each row
//!   the **gate is the first half** (`[0, ffn)`) and **up the second half** (`[ffn, 2 * ffn)`), as
//!   vLLM's merged `gate_up_proj` (with `SiluAndMul`) and Hugging Face's Phi-3 `gate_up_proj` lay
//!   them out; `out` is `[rows, ffn]`.

use rocm_runtime::{DeviceBuffer, LaunchConfig, Stream};

use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader;

const KERNEL: &str = "swiglu";
const MODULE: KernelModule = KernelModule::Swiglu;

/// Threads per block; elements per thread per pass on the scalar path. The 16-byte path takes one
/// vector a thread per pass, and its grid has a thread per vector.
const BLOCK: usize = 256;
const UNROLL: usize = crate::abi::swiglu::RF_SWIGLU_UNROLL as usize;

/// `out[i] = silu(gate[i]) * up[i]` for every element, queued on `out`'s stream. The three
/// buffers must have the same length and belong to that stream.
pub fn swiglu<T: Dtype>(
    gate: &DeviceBuffer<T>,
    up: &DeviceBuffer<T>,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    let n = out.len();
    for (name, len) in [("gate", gate.len()), ("up", up.len())] {
        ensure(len == n, KERNEL, || format!("{name} has {len} elements, out has {n}"))?;
    }
    if n == 0 {
        return Ok(());
    }
    let stream = out.stream().clone();
    let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>("rf_swiglu"))?;
    let ptrs = [gate.device_ptr(), up.device_ptr(), out.device_ptr()];
    let config = config::<T>(&stream, &kernel, 1, n, &ptrs, &[0]);
    // SAFETY: rf_swiglu_<T>(const T* gate, const T* up, T* out, u64 gate_stride, u64 up_stride,
    // u64 out_stride, u64 rows, u64 cols) with rows = 1 and cols = n reads gate[0..n) and
    // up[0..n) and writes out[0..n); all three hold n elements (checked above) and out is a
    // buffer of its own. The strides of the single row only multiply row 0 (passed as 0, which
    // keeps the 16-byte path open whatever n is).
    unsafe {
        stream
            .launch(&kernel)
            // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
            .dependent()
            .buffer(gate)
            .buffer(up)
            .buffer_mut(out)
            .arg(0u64)
            .arg(0u64)
            .arg(0u64)
            .arg(1u64)
            .arg(n as u64)
            .launch(config)?
    };
    Ok(())
}

/// `out[r, j] = silu(gate_up[r, j]) * gate_up[r, ffn + j]` for `r < rows`, `j < ffn`: the
/// fused gate-up layout (gate first, up second in each row). `gate_up` holds exactly
/// `rows * 2 * ffn` elements and `out` `rows * ffn`; `ffn` must be at least 1.
pub fn swiglu_fused<T: Dtype>(
    gate_up: &DeviceBuffer<T>,
    out: &mut DeviceBuffer<T>,
    rows: usize,
    ffn: usize,
) -> Result<()> {
    let (gu_len, out_len) = fused_lengths(rows, ffn)?;
    ensure(gate_up.len() == gu_len, KERNEL, || {
        format!("gate_up has {} elements, expected {rows} x 2 x {ffn} = {gu_len}", gate_up.len())
    })?;
    ensure(out.len() == out_len, KERNEL, || {
        format!("out has {} elements, expected {rows} x {ffn} = {out_len}", out.len())
    })?;
    if rows == 0 {
        return Ok(());
    }
    let stream = out.stream().clone();
    let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>("rf_swiglu"))?;
    let gate = gate_up.device_ptr();
    let up = gate + (ffn * size_of::<T>()) as u64;
    let ptrs = [gate, up, out.device_ptr()];
    let config = config::<T>(&stream, &kernel, rows, ffn, &ptrs, &[2 * ffn, ffn]);
    let (stride, ffn64) = ((2 * ffn) as u64, ffn as u64);
    // SAFETY: rf_swiglu_<T>(gate, up, out, gate_stride, up_stride, out_stride, rows, cols) with
    // gate = gate_up, up = gate_up + ffn, both strides 2 * ffn, cols = ffn: reads gate_up[r *
    // 2ffn + j] and gate_up[r * 2ffn + ffn + j] for r < rows, j < ffn, all below rows * 2 * ffn
    // = gate_up.len(); writes out[r * ffn + j] < rows * ffn = out.len() (checked above). `up`
    // points into gate_up, which the builder checked for the stream with the first argument.
    unsafe {
        stream
            .launch(&kernel)
            // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
            .dependent()
            .buffer(gate_up)
            .arg(up)
            .buffer_mut(out)
            .arg(stride)
            .arg(stride)
            .arg(ffn64)
            .arg(rows as u64)
            .arg(ffn64)
            .launch(config)?
    };
    Ok(())
}

fn fused_lengths(rows: usize, ffn: usize) -> Result<(usize, usize)> {
    ensure(ffn > 0, KERNEL, || "ffn must be at least 1".into())?;
    let overflow =
        || KernelError::Shape { kernel: KERNEL, message: format!("{rows} x 2 x {ffn} overflows usize") };
    let gate_up = ffn.checked_mul(2).and_then(|w| w.checked_mul(rows)).ok_or_else(overflow)?;
    Ok((gate_up, rows * ffn))
}

/// A 2-D grid: `grid.y` rows (grid-stride beyond 65535), `grid.x` blocks of `BLOCK` threads
/// along a row (16-byte vectors when the kernel will take its vector path: the same test as
/// `rf_swiglu`; elements otherwise). See [`grid_x`].
fn config<T: Dtype>(
    stream: &Stream,
    kernel: &rocm_runtime::Function,
    rows: usize,
    cols: usize,
    ptrs: &[u64],
    strides: &[usize],
) -> LaunchConfig {
    let info = stream.backend().info();
    let warp = info.warp_size.max(1) as usize;
    let max_block = kernel.max_threads_per_block() as usize;
    let n = 16 / size_of::<T>();
    let vector = cols >= n && ptrs.iter().all(|p| p % 16 == 0) && strides.iter().all(|s| s % n == 0);
    let per_row = if vector { cols / n } else { cols }.max(1);
    let block = (BLOCK.min(max_block).max(warp) / warp * warp).max(1);
    let grid_y = rows.clamp(1, info.max_grid[1].clamp(1, 65_535) as usize);
    let wanted_blocks = (info.compute_units.max(1) as usize) * 8;
    let grid_x = grid_x(vector, per_row, block, grid_y, wanted_blocks, info.max_grid[0].max(1) as usize);
    LaunchConfig { grid: [grid_x as u32, grid_y as u32, 1], block: [block as u32, 1, 1], shared_mem_bytes: 0 }
}

/// Blocks along a row. 16-byte path: a thread per vector (`per_row / block`, rounded up), so each
/// thread normally makes one pass with one vector of gate and of up in flight: faster than v3's
/// four vectors a thread (one block per fused row; docs/kernels/swiglu.md, version 4). Scalar path: `UNROLL` elements a thread
/// per pass, raised for short batches so the device gets `wanted_blocks`. At most `max_x`, and
/// at most 2^32 - 1 threads along x (the kernel walks any row grid-stride, so a smaller grid
/// stays correct).
fn grid_x(
    vector: bool,
    per_row: usize,
    block: usize,
    grid_y: usize,
    wanted_blocks: usize,
    max_x: usize,
) -> usize {
    let covering = per_row.div_ceil(block);
    let grid_x = if vector {
        covering
    } else {
        let unrolled = per_row.div_ceil(block * UNROLL);
        if unrolled * grid_y < wanted_blocks {
            wanted_blocks.div_ceil(grid_y).min(covering).max(unrolled)
        } else {
            unrolled
        }
    };
    grid_x.clamp(1, max_x.min(u32::MAX as usize / block.max(1)).max(1))
}

/// `silu(g) * u` in f64, in the kernel's stable form (`e = exp(-|g|)`, never infinite), which
/// in f64 equals `g / (1 + exp(-g))` wherever that does not overflow.
fn silu_mul(g: f64, u: f64) -> f64 {
    let e = (-g.abs()).exp();
    let num = if g >= 0.0 { g } else { g * e };
    num / (1.0 + e) * u
}

/// CPU reference of [`swiglu`]: f64, rounded to `T` once.
pub fn swiglu_reference<T: Dtype>(gate: &[T], up: &[T], out: &mut [T]) {
    assert!(gate.len() == out.len() && up.len() == out.len(), "swiglu reference: lengths differ");
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = T::from_f32(silu_mul(g.to_f32() as f64, u.to_f32() as f64) as f32);
    }
}

/// CPU reference of [`swiglu_fused`] (gate first, up second in each row of `gate_up`).
pub fn swiglu_fused_reference<T: Dtype>(gate_up: &[T], rows: usize, ffn: usize, out: &mut [T]) {
    assert_eq!(gate_up.len(), rows * 2 * ffn, "swiglu reference: gate_up length");
    assert_eq!(out.len(), rows * ffn, "swiglu reference: out length");
    if ffn == 0 {
        return;
    }
    for (row, o) in gate_up.chunks_exact(2 * ffn).zip(out.chunks_exact_mut(ffn)) {
        let (gate, up) = row.split_at(ffn);
        swiglu_reference(gate, up, o);
    }
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    every_dtype(MODULE, "rf_swiglu")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocm_runtime::bf16;

    #[test]
    fn reference_matches_hand_computed_values() {
        // silu(0) = 0; silu(1) = 1 / (1 + e^-1) = 0.7310586; silu(-2) = -2 / (1 + e^2) = -0.2384058.
        let gate = [0.0f32, 1.0, -2.0, 30.0];
        let up = [5.0f32, 2.0, -1.0, 0.5];
        let mut out = [f32::NAN; 4];
        swiglu_reference(&gate, &up, &mut out);
        let want = [0.0, 1.4621172, 0.2384058, 15.0];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() <= 1e-6 * w.abs().max(1.0), "{out:?}");
        }
        // Large negative gates give -0 * up, never NaN.
        let mut out = [f32::NAN; 1];
        swiglu_reference(&[-1000.0f32], &[3.0], &mut out);
        assert_eq!(out[0], 0.0);
    }

    #[test]
    fn fused_reference_takes_gate_first_then_up() {
        // Two rows of [g0 g1 | u0 u1].
        let gate_up = [1.0f32, 0.0, 2.0, 3.0, -2.0, 1.0, 1.0, 4.0];
        let mut fused = [f32::NAN; 4];
        swiglu_fused_reference(&gate_up, 2, 2, &mut fused);
        let mut separate = [f32::NAN; 4];
        swiglu_reference(&[1.0f32, 0.0, -2.0, 1.0], &[2.0, 3.0, 1.0, 4.0], &mut separate);
        assert_eq!(fused, separate);
        assert!((fused[0] - 1.4621172).abs() < 1e-6 && fused[1] == 0.0);
        let mut out = [bf16::ZERO; 1];
        swiglu_fused_reference(&[bf16::from_f32(1.0), bf16::from_f32(2.0)], 1, 1, &mut out);
        assert_eq!(out[0], bf16::from_f32(1.4621172));
    }

    #[test]
    fn vector_rows_get_a_thread_per_vector() {
        let max_x = i32::MAX as usize;
        // The benchmark's fused gate-up rows: 11 008 f16 = 1376 vectors, 6 blocks of 256 a row.
        assert_eq!(grid_x(true, 1376, 256, 16_384, 132 * 8, max_x), 6);
        // f32: 2752 vectors, 11 blocks.
        assert_eq!(grid_x(true, 2752, 256, 16_384, 132 * 8, max_x), 11);
        // Two tensors of 16384 x 11008 f16 as one row: 22 544 384 vectors, 88 064 blocks.
        assert_eq!(grid_x(true, 22_544_384, 256, 1, 132 * 8, max_x), 88_064);
        // Short rows: one block; a row of one vector too.
        assert_eq!(grid_x(true, 1, 256, 4, 132 * 8, max_x), 1);
        // Clamped to the device's limit and to 2^32 - 1 threads along x (the kernel loops).
        assert_eq!(grid_x(true, 1 << 40, 256, 1, 132 * 8, 65_535), 65_535);
        assert_eq!(grid_x(true, 1 << 40, 256, 1, 132 * 8, max_x), u32::MAX as usize / 256);
    }

    #[test]
    fn scalar_rows_take_unroll_elements_a_thread_and_fill_the_device() {
        let max_x = i32::MAX as usize;
        // Many long rows: UNROLL elements a thread per pass.
        assert_eq!(grid_x(false, 11_001, 256, 16_384, 132 * 8, max_x), 11);
        // One short batch: raised towards wanted_blocks, never past a thread per element.
        assert_eq!(grid_x(false, 1_000_000, 256, 1, 132 * 8, max_x), 1056);
        assert_eq!(grid_x(false, 3000, 256, 1, 132 * 8, max_x), 12);
        assert_eq!(grid_x(false, 1, 256, 1, 132 * 8, max_x), 1);
    }

    #[test]
    fn fused_lengths_are_checked() {
        assert_eq!(fused_lengths(3, 5).unwrap(), (30, 15));
        assert_eq!(fused_lengths(0, 5).unwrap(), (0, 0));
        assert!(fused_lengths(3, 0).is_err());
        assert!(fused_lengths(usize::MAX / 2, 2).is_err());
    }
}
