//! `stream_read` (`kernels/stream_read.hip`): reads a buffer once. Benchmark support: the
//! read-only ceiling next to the copy (`cargo xtask bench mxfp`).

use rocm_runtime::{DeviceBuffer, LaunchConfig};

use crate::KernelModule;
use crate::error::{Result, ensure};
use crate::launchable::{Launchable, Needs};
use crate::loader;

const THREADS: u32 = 256;

/// Reads every byte of `src` (a whole number of 16-byte vectors) once; block `b` of the
/// `partial.len()` blocks stores the wrapping sum of the little-endian 32-bit words it read in
/// `partial[b]`, so that the partials add up (mod 2^32) to [`stream_read_reference`] of `src`.
pub fn stream_read(src: &DeviceBuffer<u8>, partial: &mut DeviceBuffer<u32>) -> Result<()> {
    launch(src, partial, false)
}

/// [`stream_read`] as a dependent launch (`Launch::dependent`): where the device has them, its
/// blocks may start before the kernel ahead on the stream has finished and issue their first
/// loads, then wait for it before the rest (as the quantised products do with their first weight
/// copies). The benchmarks' floor for a chain of launches that only read.
pub fn stream_read_dependent(src: &DeviceBuffer<u8>, partial: &mut DeviceBuffer<u32>) -> Result<()> {
    launch(src, partial, true)
}

fn launch(src: &DeviceBuffer<u8>, partial: &mut DeviceBuffer<u32>, dependent: bool) -> Result<()> {
    ensure(src.len().is_multiple_of(16), "stream_read", || {
        format!("{} bytes are not a whole number of 16-byte vectors", src.len())
    })?;
    ensure(!partial.is_empty(), "stream_read", || "`partial` needs one element a block".into())?;
    let stream = partial.stream().clone();
    let entry = if dependent { "rf_stream_read_dependent" } else { "rf_stream_read" };
    let kernel = loader::kernel(&stream, KernelModule::StreamRead, entry)?;
    let grid_limit = stream.backend().info().max_grid[0].max(1) as usize;
    ensure(partial.len() <= grid_limit && kernel.max_threads_per_block() >= THREADS, "stream_read", || {
        format!("{} blocks of {THREADS} threads do not fit the device", partial.len())
    })?;
    let config =
        LaunchConfig { grid: [partial.len() as u32, 1, 1], block: [THREADS, 1, 1], shared_mem_bytes: 0 };
    let vectors = (src.len() / 16) as u64;
    let launch = stream.launch(&kernel).buffer(src).arg(vectors).buffer_mut(partial);
    let launch = if dependent { launch.dependent().reads_before_wait(src) } else { launch };
    // SAFETY: rf_stream_read[_dependent](const uint4* src, u64 n, u32* partial), with 256 threads
    // and partial.len() blocks, reads src[0, n) (n 16-byte vectors: src's bytes, a whole number of
    // them, checked; device allocations are 256-byte aligned) and writes partial[0, blocks). The
    // dependent entry reads only src before its wait for the kernel ahead and writes after it.
    unsafe { launch.launch(config)? };
    Ok(())
}

/// CPU reference of the sum [`stream_read`]'s partials add up to: the wrapping sum of `src`'s
/// little-endian 32-bit words.
pub fn stream_read_reference(src: &[u8]) -> u32 {
    src.chunks_exact(4).fold(0u32, |acc, w| acc.wrapping_add(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    vec![
        Launchable::new(KernelModule::StreamRead, "rf_stream_read", Needs::Nothing),
        Launchable::new(KernelModule::StreamRead, "rf_stream_read_dependent", Needs::Nothing),
    ]
}
