//! `stream_rmw` (`kernels/stream_rmw.hip`): reads and writes back part of every row of a buffer.
//! Benchmark support: the read-modify-write ceiling of a layout, next to the kernel that updates
//! those bytes (`cargo xtask bench rope`: the GLM styles touch half of every head).

use rocm_runtime::{DeviceBuffer, LaunchConfig};

use crate::KernelModule;
use crate::error::{Result, ensure};
use crate::launchable::{Launchable, Needs};
use crate::loader;

const KERNEL: &str = "stream_rmw";
const MODULE: KernelModule = KernelModule::StreamRmw;
const THREADS: u32 = 256;
/// Blocks a compute unit: the measured best of 8, 16 and 32 (docs/kernels/rope.md).
const BLOCKS_PER_CU: u32 = 32;

/// In place: every 32-bit word (little-endian) of the bytes `[k * pitch, k * pitch + run)`, for
/// each `k` whose run ends inside `buf`, XOR-ed with `mask`; every other byte untouched. `run`
/// and `pitch` are whole numbers of 16-byte vectors, `0 < run <= pitch` (`run == pitch` is the
/// whole buffer, up to its last whole run).
pub fn stream_rmw(buf: &mut DeviceBuffer<u8>, run: usize, pitch: usize, mask: u32) -> Result<()> {
    ensure(run > 0 && run <= pitch, KERNEL, || format!("a run of {run} bytes every {pitch} bytes"))?;
    ensure(run.is_multiple_of(16) && pitch.is_multiple_of(16), KERNEL, || {
        format!("run {run} and pitch {pitch} must be whole numbers of 16-byte vectors")
    })?;
    let runs = runs(buf.len(), run, pitch);
    if runs == 0 {
        return Ok(());
    }
    let stream = buf.stream().clone();
    let kernel = loader::kernel(&stream, MODULE, "rf_stream_rmw")?;
    ensure(kernel.max_threads_per_block() >= THREADS, KERNEL, || format!("{THREADS} threads do not fit"))?;
    let cus = stream.backend().info().compute_units.max(1);
    let config = LaunchConfig::linear(runs * (run / 16), THREADS, cus.saturating_mul(BLOCKS_PER_CU));
    // SAFETY: rf_stream_rmw(uint4* buf, u64 runs, u64 run_vecs, u64 pitch_vecs, u32 mask) touches
    // vectors k * pitch_vecs + [0, run_vecs) for k < runs: the last ends at byte (runs - 1) *
    // pitch + run <= buf.len() (`runs`); device allocations are 256-byte aligned, so every
    // vector is 16-byte aligned.
    unsafe {
        stream
            .launch(&kernel)
            .buffer_mut(buf)
            .arg(runs as u64)
            .arg((run / 16) as u64)
            .arg((pitch / 16) as u64)
            .arg(mask)
            .launch(config)?
    };
    Ok(())
}

/// Runs of `run` bytes, `pitch` apart, that fit in `len` bytes.
fn runs(len: usize, run: usize, pitch: usize) -> usize {
    if len < run { 0 } else { (len - run) / pitch + 1 }
}

/// CPU reference of [`stream_rmw`].
pub fn stream_rmw_reference(buf: &mut [u8], run: usize, pitch: usize, mask: u32) {
    for k in 0..runs(buf.len(), run, pitch) {
        for word in buf[k * pitch..k * pitch + run].chunks_exact_mut(4) {
            let v = u32::from_le_bytes([word[0], word[1], word[2], word[3]]) ^ mask;
            word.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    vec![Launchable::new(MODULE, "rf_stream_rmw", Needs::Nothing)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_those_that_end_inside_the_buffer() {
        assert_eq!(runs(0, 16, 32), 0);
        assert_eq!(runs(15, 16, 32), 0);
        assert_eq!(runs(16, 16, 32), 1);
        assert_eq!(runs(47, 16, 32), 1);
        assert_eq!(runs(48, 16, 32), 2);
        assert_eq!(runs(64, 32, 32), 2);
    }

    #[test]
    fn reference_touches_only_the_runs() {
        let mut buf = vec![0u8; 80];
        stream_rmw_reference(&mut buf, 16, 32, 0x0102_0304);
        for (i, &b) in buf.iter().enumerate() {
            let inside = i % 32 < 16 && i < 64 + 16;
            let want = if inside { [4u8, 3, 2, 1][i % 4] } else { 0 };
            assert_eq!(b, want, "byte {i}");
        }
    }
}
