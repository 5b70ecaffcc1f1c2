//! `l2_prefetch` (`kernels/l2_prefetch.hip`): asks the device to bring parts of buffers into its
//! last-level cache while the stream's next kernels run. A decode step uses it to start reading
//! a projection's weight during the kernels ahead of it that leave the DRAM idle (RoPE, the KV
//! write, attention at a short context; docs/kernels/l2_prefetch.md).
//!
//! A hint: it changes no memory and returns no result, so its only observable effects are the
//! time the kernels after it take and its own launch. It is a dependent launch that lets the
//! next kernel be scheduled at once, so a step pays little more than its launch for it.

use std::ops::Range;

use rocm_runtime::{DeviceBuffer, DeviceCopy, LaunchConfig};

use crate::KernelModule;
use crate::abi::l2_prefetch as abi;
use crate::error::{Result, ensure};
use crate::launchable::{Launchable, Needs};
use crate::loader;

const KERNEL: &str = "l2_prefetch";
const ENTRY: &str = "rf_l2_prefetch";
const MAX_RANGES: usize = abi::RF_L2_PREFETCH_MAX_RANGES as usize;
const PIECE: u64 = abi::RF_L2_PREFETCH_PIECE as u64;
const THREADS: u32 = abi::RF_L2_PREFETCH_THREADS;

/// Elements `elems` of `buffer`, to be prefetched.
#[derive(Debug, Clone)]
pub struct L2Range<'a, T: DeviceCopy> {
    pub buffer: &'a DeviceBuffer<T>,
    pub elems: Range<usize>,
}

impl<'a, T: DeviceCopy> L2Range<'a, T> {
    /// The whole buffer.
    pub fn whole(buffer: &'a DeviceBuffer<T>) -> Self {
        L2Range { buffer, elems: 0..buffer.len() }
    }

    /// Its first `elems` elements, or all of it when it is shorter.
    pub fn prefix(buffer: &'a DeviceBuffer<T>, elems: usize) -> Self {
        L2Range { buffer, elems: 0..elems.min(buffer.len()) }
    }
}

/// Queues a prefetch of `ranges` on their buffers' stream (all must share one; empty ranges
/// are skipped, and nothing at all is queued for none). More than
/// `RF_L2_PREFETCH_MAX_RANGES` ranges take several launches. A range past its buffer's end, or
/// running backwards, is refused before anything is queued.
pub fn l2_prefetch<T: DeviceCopy>(ranges: &[L2Range<'_, T>]) -> Result<()> {
    for r in ranges {
        ensure(r.elems.start <= r.elems.end && r.elems.end <= r.buffer.len(), KERNEL, || {
            format!("range {:?} does not lie in a buffer of {} elements", r.elems, r.buffer.len())
        })?;
    }
    let ranges: Vec<_> = ranges.iter().filter(|r| !r.elems.is_empty()).collect();
    let Some(first) = ranges.first() else { return Ok(()) };
    let stream = first.buffer.stream().clone();
    let kernel = loader::kernel(&stream, KernelModule::L2Prefetch, ENTRY)?;
    let size = size_of::<T>() as u64;
    for group in ranges.chunks(MAX_RANGES) {
        let mut params = abi::rf_l2_prefetch_ranges::default();
        let mut pieces = 0u64;
        for (i, r) in group.iter().enumerate() {
            params.base[i] = r.buffer.device_ptr() + r.elems.start as u64 * size;
            params.bytes[i] = r.elems.len() as u64 * size;
            pieces += params.bytes[i].div_ceil(PIECE);
        }
        // A thread a piece, at most a block a compute unit: spread over the SMs, since one SM's
        // copy engine takes a bulk request's lines one after another.
        let units = u64::from(stream.backend().info().compute_units.max(1));
        let blocks = pieces.div_ceil(u64::from(THREADS)).clamp(1, units) as u32;
        let config = LaunchConfig { grid: [blocks, 1, 1], block: [THREADS, 1, 1], shared_mem_bytes: 0 };
        let mut launch = stream.launch(&kernel).dependent();
        for r in group {
            launch = launch.reads(r.buffer);
        }
        // SAFETY: rf_l2_prefetch(rf_l2_prefetch_ranges r, unsigned* never) touches only
        // [base[i], base[i] + bytes[i]) for each range: each lies inside its buffer (checked
        // above), and every buffer belongs to the launching stream (`reads`). `never` is null,
        // so the kernel writes nothing. It lets the next kernel start before its own wait and
        // completes only after the kernel ahead (the dependent-launch contract: it reads
        // nothing any kernel's result depends on and writes nothing).
        unsafe { launch.arg(params).arg(0u64).launch(config)? };
    }
    Ok(())
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    vec![Launchable::new(KernelModule::L2Prefetch, ENTRY, Needs::Nothing)]
}
