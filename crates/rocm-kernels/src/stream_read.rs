//! `stream_read` (`kernels/stream_read.hip`): reads a buffer once. Benchmark support: the
//! read-only ceiling next to the copy (`cargo xtask bench mxfp`), the floors of a decode layer's
//! weight stream as a chain of launches and as one persistent launch (`bench model`).

use rocm_runtime::{DeviceBuffer, LaunchConfig, MatrixCores, Stream};

use crate::KernelModule;
use crate::abi::stream_read as abi;
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

/// Most stages [`stream_read_staged`] takes.
pub const STAGED_MAX_STAGES: usize = abi::RF_STAGED_MAX_STAGES as usize;
/// Kinds of gate [`stream_read_staged`]'s `hops` describes (stage s's gate: `hops[s % 4]`).
pub const STAGED_KINDS: usize = abi::RF_STAGED_KINDS as usize;
const STAGED_THREADS: u32 = abi::RF_STAGED_THREADS;
const STAGED_SHARED: u32 = abi::RF_STAGED_SLOTS * abi::RF_STAGED_THREADS * abi::RF_STAGED_PER_THREAD * 16;

/// The barrier counters and timeout flag of [`stream_read_staged`], zero between launches (each
/// launch's last block puts the counters back), so one scratch serves every launch and replay
/// on its stream.
#[derive(Debug)]
pub struct StagedScratch {
    counters: DeviceBuffer<u32>,
    timeout: DeviceBuffer<u32>,
}

impl StagedScratch {
    pub fn new(stream: &Stream) -> Result<Self> {
        Ok(StagedScratch {
            counters: stream.alloc_zeroed(2 * STAGED_MAX_STAGES + 1)?,
            timeout: stream.alloc_zeroed(1)?,
        })
    }

    /// Whether a launch's barrier ever waited more than a second (its blocks were not all
    /// resident, which the cooperative launch rules out): its sums are then void.
    pub fn timed_out(&self) -> Result<bool> {
        Ok(self.timeout.to_vec()?[0] != 0)
    }
}

/// A table for [`stream_read_staged`]'s `chase`: a random cycle through `slots` entries
/// `spacing` words apart (the others zero), each holding the next one's index, so a chase of
/// any length stays on the cycle. `random` gives the shuffle's 64-bit draws.
pub fn staged_chase_table(slots: usize, spacing: usize, mut random: impl FnMut() -> u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..slots as u32).collect();
    for i in (1..slots).rev() {
        order.swap(i, (random() % (i as u64 + 1)) as usize);
    }
    let mut table = vec![0u32; slots * spacing];
    for i in 0..slots {
        table[order[i] as usize * spacing] = order[(i + 1) % slots] * spacing as u32;
    }
    table
}

/// The read floor of a persistent layer kernel (`bench model`, NVIDIA sm_80 and later): one
/// cooperative launch, one block an SM, reads `w` as consecutive stages (stage s: the 16-byte
/// vectors `[ends[s - 1], ends[s])`, the last end `w`'s length), as a decode step's products read
/// their weights, each stage's data consumed only once every block has consumed the stage
/// before (a grid barrier, where a layer kernel would wait for the previous product's output).
/// After stage s with `hops[s % 4] > 0`, blocks 0 to `small_blocks - 1` then chase that many
/// dependent loads through `chase` (a stand-in for the latency-bound work between products:
/// attention, the norms) before any block goes on; with `small_idle` those blocks copy none of
/// `w` (the others take their chunks), so their SMs issue only the chase. `ahead`: each block's
/// copies run on into the next stages while it waits at a gate (a ring of 6 chunks of 32 KiB),
/// as a layer kernel could, its weights needing nothing of the stage before; otherwise a stage's
/// copies start after its gate. Block b stores the wrapping sum of the 32-bit words it read in
/// `partial[b]` (0 for an idle one): the partials add up to [`stream_read_reference`] of `w`.
#[allow(clippy::too_many_arguments)]
pub fn stream_read_staged(
    w: &DeviceBuffer<u8>,
    ends: &[u64],
    chase: &DeviceBuffer<u32>,
    hops: [u32; STAGED_KINDS],
    small_blocks: u32,
    small_idle: bool,
    ahead: bool,
    scratch: &mut StagedScratch,
    partial: &mut DeviceBuffer<u32>,
) -> Result<()> {
    const NAME: &str = "stream_read_staged";
    let stream = partial.stream().clone();
    let info = stream.backend().info();
    let grid = info.compute_units.max(1);
    ensure(info.matrix_cores == MatrixCores::MmaSync && info.cooperative_launch, NAME, || {
        "needs NVIDIA sm_80 or later (cp.async into shared memory) and cooperative launches".into()
    })?;
    ensure(!ends.is_empty() && ends.len() <= STAGED_MAX_STAGES, NAME, || {
        format!("{} stages; it reads 1 to {STAGED_MAX_STAGES}", ends.len())
    })?;
    ensure(ends[0] > 0 && ends.windows(2).all(|p| p[0] < p[1]), NAME, || {
        format!("stage ends {ends:?} do not rise from above 0")
    })?;
    ensure(ends[ends.len() - 1] * 16 == w.len() as u64, NAME, || {
        format!("the last stage ends at vector {}, the buffer holds {} bytes", ends[ends.len() - 1], w.len())
    })?;
    ensure(partial.len() >= grid as usize, NAME, || {
        format!("{} partials for {grid} blocks (one a compute unit)", partial.len())
    })?;
    ensure(!chase.is_empty() && chase.len() < 1 << 32 && (1..=grid).contains(&small_blocks), NAME, || {
        format!("{small_blocks} small-work blocks of {grid}, a chase of {} entries", chase.len())
    })?;
    ensure(!small_idle || small_blocks < grid, NAME, || {
        format!("{small_blocks} idle small-work blocks of {grid} leave none to copy")
    })?;
    let kernel = loader::kernel(&stream, KernelModule::StreamRead, "rf_stream_read_staged")?;
    let mut end = [0u64; STAGED_MAX_STAGES];
    end[..ends.len()].copy_from_slice(ends);
    let args = abi::rf_staged_args {
        w: w.device_ptr(),
        end,
        chase: chase.device_ptr(),
        chase_len: chase.len() as u64,
        hops,
        stages: ends.len() as u32,
        small_blocks,
        ahead: ahead as u32,
        small_idle: small_idle as u32,
        counters: scratch.counters.device_ptr(),
        partial: partial.device_ptr(),
        timeout: scratch.timeout.device_ptr(),
    };
    let config =
        LaunchConfig { grid: [grid, 1, 1], block: [STAGED_THREADS, 1, 1], shared_mem_bytes: STAGED_SHARED };
    let launch = stream
        .launch(&kernel)
        .arg(args)
        .reads(w)
        .reads(chase)
        .writes(&mut scratch.counters)
        .writes(&mut scratch.timeout)
        .writes(partial)
        .cooperative();
    // SAFETY: rf_stream_read_staged(rf_staged_args) with 512 threads and one block a compute
    // unit, 192 KiB of dynamic shared memory (what its ring takes), launched cooperatively: every
    // block is resident or the launch fails, so its grid barriers never wait for a block that
    // has not started (one that waits over a second anyway lets the block through and sets the
    // flag: no hang). It reads w's vectors below the last end (w's length, checked), chase[0,
    // chase_len) (each loaded index clamped below chase_len), reads and writes the scratch's
    // counters[0, 2 stages + 1) (stages <= STAGED_MAX_STAGES, checked) and timeout[0], and writes
    // partial[0, grid) (checked). The counters start at zero: the scratch is made zeroed, and
    // every launch's last block zeroes them after every block has passed its last barrier.
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
        Launchable::new(KernelModule::StreamRead, "rf_stream_read_staged", Needs::MmaSync),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every slot on one cycle: a walk from slot 0 visits each once and comes back; the words
    /// between slots stay zero.
    #[test]
    fn the_chase_table_is_one_cycle_through_every_slot() {
        for (slots, spacing) in [(1, 1), (7, 1), (64, 16), (1000, 3)] {
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            let table = staged_chase_table(slots, spacing, || {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                state >> 11
            });
            assert_eq!(table.len(), slots * spacing);
            let mut seen = vec![false; slots];
            let mut at = 0usize;
            for _ in 0..slots {
                assert!(
                    at.is_multiple_of(spacing) && !seen[at / spacing],
                    "{slots} x {spacing}: slot {at} twice"
                );
                seen[at / spacing] = true;
                at = table[at] as usize;
            }
            assert_eq!(at, 0, "{slots} x {spacing}: the walk does not close");
            assert!(table.iter().enumerate().all(|(i, &v)| i.is_multiple_of(spacing) || v == 0));
        }
    }
}
