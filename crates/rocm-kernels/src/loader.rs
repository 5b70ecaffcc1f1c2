//! Finding a kernel for the stream's device: the embedded image of the kind of code object the
//! device loads, loaded once per backend (the backend's module cache), then the function by name.

use rocm_runtime::{Function, LaunchConfig, Stream};

use crate::embedded;
use crate::error::{KernelError, Result};

/// The kernel `function` of module `module` (`kernels/<module>.hip`) on the stream's device.
pub(crate) fn kernel(stream: &Stream, module: &'static str, function: &str) -> Result<Function> {
    let backend = stream.backend();
    let kind = backend.info().code_objects;
    let image = embedded::image(kind, module).ok_or(KernelError::NotBuilt { module, kind })?;
    let loaded = backend.cached_module(module, || Ok(image))?;
    Ok(loaded.function(function)?)
}

/// One block per row: `rows` blocks (2-D grid when there are more than the x limit allows),
/// `block` threads each, rounded to whole warps and capped at the kernel's limit. Kernels
/// recover the row as `blockIdx.y * gridDim.x + blockIdx.x` and skip rows past the end.
pub(crate) fn row_per_block(stream: &Stream, function: &Function, rows: usize, block: u32) -> LaunchConfig {
    let info = stream.backend().info();
    let warp = info.warp_size.max(1);
    let block = block.min(function.max_threads_per_block()).max(warp) / warp * warp;
    let max_x = info.max_grid[0].clamp(1, 65_535) as usize;
    let x = rows.clamp(1, max_x);
    let y = rows.div_ceil(x).max(1) as u32;
    LaunchConfig { grid: [x as u32, y, 1], block: [block, 1, 1], shared_mem_bytes: 0 }
}

/// A one-dimensional grid for a grid-stride kernel over `elements`: `block` threads a block,
/// enough blocks to cover the elements, at most a few waves of blocks per compute unit.
pub(crate) fn grid_stride(stream: &Stream, function: &Function, elements: usize) -> LaunchConfig {
    let block = 256.min(function.max_threads_per_block()).max(1);
    let max_blocks = stream.backend().info().compute_units.saturating_mul(16).max(1);
    LaunchConfig::linear(elements, block, max_blocks)
}

/// Elements a buffer of `rows` rows of `cols`, `stride` elements apart, must hold:
/// `(rows - 1) * stride + cols`, or `None` when that overflows.
pub(crate) fn strided_len(rows: usize, stride: usize, cols: usize) -> Option<usize> {
    match rows {
        0 => Some(0),
        rows => (rows - 1).checked_mul(stride)?.checked_add(cols),
    }
}
