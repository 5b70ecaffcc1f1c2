//! Finding a kernel for the stream's device: the embedded image of the kind of code object the
//! device loads, loaded once per backend (this module's cache), then the function by name.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use rocm_runtime::{Backend, Function, LaunchConfig, Module, Stream};

use crate::KernelModule;
use crate::embedded;
use crate::error::{KernelError, Result};

/// The kernel `function` of `module` (`kernels/<module>.hip`) on the stream's device.
pub(crate) fn kernel(stream: &Stream, module: KernelModule, function: &str) -> Result<Function> {
    let backend = stream.backend();
    let kind = backend.info().code_objects;
    let image = embedded::image(kind, module).ok_or(KernelError::NotBuilt { module: module.name(), kind })?;
    let loaded = cached_module(backend, module, image)?;
    Ok(loaded.function(function)?)
}

/// Modules loaded so far, by backend (its address) and module name. Entries are only ever
/// added, so a module handed out stays valid for the process. A cached module holds its
/// backend, so an address is never reused while its entries exist (and backends live for the
/// process anyway: `Backend::open` keeps them).
static MODULES: LazyLock<RwLock<HashMap<(usize, KernelModule), Module>>> = LazyLock::new(RwLock::default);

/// The module `name` of `backend`, loaded from `image` the first time.
fn cached_module(backend: &Arc<Backend>, name: KernelModule, image: &'static [u8]) -> Result<Module> {
    let key = (Arc::as_ptr(backend) as usize, name);
    // A panic elsewhere while holding the lock leaves the map as it was: insert-only, so the
    // entries in it are still right.
    if let Some(module) = MODULES.read().unwrap_or_else(PoisonError::into_inner).get(&key) {
        return Ok(module.clone());
    }
    let mut modules = MODULES.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(module) = modules.get(&key) {
        return Ok(module.clone());
    }
    let module = backend.load_module(image)?;
    modules.insert(key, module.clone());
    Ok(module)
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
