//! Finding a kernel for the stream's device: the embedded image for its platform, loaded once
//! per backend (the backend's module cache), then the function by name.

use rocm_runtime::{Function, LaunchConfig, Platform, Stream};

use crate::embedded;
use crate::error::{KernelError, Result};

/// The kernel `function` of module `module` (`kernels/<module>.hip`) on the stream's device.
pub(crate) fn kernel(stream: &Stream, module: &'static str, function: &str) -> Result<Function> {
    let backend = stream.backend();
    let platform = backend.platform();
    let image = match platform {
        Platform::Nvidia => embedded::nvidia(module),
        Platform::Amd => embedded::amd(module),
    };
    let image = image.ok_or(KernelError::NotBuilt { module, platform })?;
    let loaded = backend.cached_module(module, || Ok(image))?;
    Ok(loaded.function(function)?)
}

/// A one-dimensional grid for a grid-stride kernel over `elements`: `block` threads a block,
/// enough blocks to cover the elements, at most a few waves of blocks per compute unit.
pub(crate) fn grid_stride(stream: &Stream, function: &Function, elements: usize) -> LaunchConfig {
    let block = 256.min(function.max_threads_per_block()).max(1);
    let max_blocks = stream.backend().info().compute_units.saturating_mul(16).max(1);
    LaunchConfig::linear(elements, block, max_blocks)
}
