//! `quant_mlp` (`kernels/quant_mlp_mma.hip`): a Llama MLP of one token in one launch, its gate,
//! up and down weights in one of ggml's block formats, on NVIDIA matrix cores:
//!
//! `act = silu(G x) * (U x)`, `y = D act`  (`G`, `U`: `[ffn, hidden]`; `D`: `[hidden, ffn]`).
//!
//! It replaces three launches of a decode step ([`quant_matvec_group`] of gate and up,
//! [`swiglu`](crate::swiglu::swiglu), [`quant_matvec`] of down): `act` gets their bits (gate and
//! up rounded to `T` as their outputs would be, then SwiGLU's formula), `y` theirs up to the order
//! of its f32 sums (the down product's `k` is split into parts, which its last part adds in
//! order). Why one launch, and how its blocks take work without ever waiting on a block the
//! device does not hold: the kernel's header and `docs/kernels/quant_matvec.md`, "v9".
//!
//! [`MlpScratch`] holds the down parts' totals and the launch's counters; a decode workspace
//! allocates one, so a recorded step allocates nothing.
//!
//! [`quant_matvec_group`]: super::quant_matvec_group
//! [`quant_matvec`]: super::quant_matvec

use std::num::NonZeroUsize;
use std::sync::OnceLock;

use rocm_runtime::{DeviceBuffer, DeviceInfo, LaunchConfig, MatrixCores, Stream};

use super::matvec::{GgmlFormat, MmaFormat, check_quant_matvec, matrix_core_chunk};
use crate::KernelModule;
use crate::abi::quant_mlp as abi;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, Needs};
use crate::loader;

const KERNEL: &str = "quant_mlp";
const MODULE: KernelModule = KernelModule::QuantMlpMma;
/// Rows of a work item, warps of a block.
const ROWS: usize = abi::RF_QMLP_ROWS as usize;
const WARPS: usize = abi::RF_QMLP_WARPS as usize;
/// Parts the down product's `k` is cut into at most.
pub const MLP_MAX_SPLITS: usize = abi::RF_QMLP_MAX_SPLITS as usize;
/// Counters before the down tiles' arrival counters.
const COUNTERS: usize = abi::RF_QMLP_ARRIVALS as usize;
/// Blocks of the kernel an SM holds at most: its launch bounds leave registers for four.
const BLOCKS_AN_SM: usize = 4;
/// Work items (tickets) are counted in 32 bits.
const ITEM_LIMIT: usize = 1 << 31;

/// Set to `0` to make [`quant_mlp_applies`] answer no (the model then runs the three launches
/// it replaces): the A/B switch of the benchmarks.
pub const FUSED_MLP_ENV: &str = "ROCMFORGE_FUSED_MLP";

/// Set to a number of parts to make it the down product's split wherever the caller leaves it
/// to the launcher (out of range: refused at launch): the benchmarks' A/B switch.
pub const MLP_SPLITS_ENV: &str = "ROCMFORGE_MLP_SPLITS";

fn splits_override() -> Option<NonZeroUsize> {
    static SPLITS: OnceLock<Option<NonZeroUsize>> = OnceLock::new();
    *SPLITS.get_or_init(|| std::env::var(MLP_SPLITS_ENV).ok().and_then(|v| v.trim().parse().ok()))
}

fn fused_mlp_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var(FUSED_MLP_ENV).map_or(true, |v| v.trim() != "0"))
}

/// The gate, up and down weights of one MLP, blocks of `format`: gate and up `[ffn, hidden]`,
/// down `[hidden, ffn]`, as GGUF stores them.
#[derive(Debug, Clone, Copy)]
pub struct QuantMlp<'a> {
    pub format: GgmlFormat,
    pub gate: &'a DeviceBuffer<u8>,
    pub up: &'a DeviceBuffer<u8>,
    pub down: &'a DeviceBuffer<u8>,
    pub hidden: usize,
    pub ffn: usize,
}

/// Where [`quant_mlp`] keeps the down parts' f32 totals and its counters (zero between launches:
/// each launch sets them back). For MLPs of up to `hidden` rows of output.
#[derive(Debug)]
pub struct MlpScratch {
    partial: DeviceBuffer<f32>,
    counters: DeviceBuffer<u32>,
    hidden: usize,
}

impl MlpScratch {
    /// A scratch for MLPs of up to `hidden` outputs, queued on `stream`: `MLP_MAX_SPLITS *
    /// hidden` f32 and a counter for every 16 rows (128 KiB and 1 KiB at hidden 4096).
    pub fn new(stream: &Stream, hidden: usize) -> Result<MlpScratch> {
        let tiles = hidden.div_ceil(ROWS);
        Ok(MlpScratch {
            partial: stream.alloc(MLP_MAX_SPLITS * hidden.max(1))?,
            counters: stream.alloc_zeroed(COUNTERS + tiles)?,
            hidden,
        })
    }

    /// Device bytes it holds.
    pub fn bytes(&self) -> usize {
        self.partial.len() * size_of::<f32>() + self.counters.len() * size_of::<u32>()
    }
}

/// Whether [`quant_mlp`] runs for `format` with activations `T` on `stream`'s device: NVIDIA
/// `mma.sync` devices, f16 or bf16, `hidden` and `ffn` positive multiples of the format's k step
/// (so every product's rows are whole chunks), and not turned off by [`FUSED_MLP_ENV`].
pub fn quant_mlp_applies<T: Dtype>(stream: &Stream, format: GgmlFormat, hidden: usize, ffn: usize) -> bool {
    let cores = stream.backend().info().matrix_cores;
    fused_mlp_allowed()
        && matrix_core_chunk(cores, format, T::NAME, hidden).is_some()
        && matrix_core_chunk(cores, format, T::NAME, ffn).is_some()
}

/// Shared bytes of a block: each warp's stages (a chunk of 16 rows and of x each) and the
/// warps' totals for two products.
fn shared_bytes(format: MmaFormat) -> usize {
    WARPS * format.stages_one() * (ROWS * format.span() + 2 * format.chunk()) + 2 * WARPS * ROWS * 4
}

/// Blocks of `shared` bytes the device holds at once: four an SM (the launch bounds), fewer
/// where shared memory runs out (an SM's shared memory taken as the per-block opt-in limit plus
/// the 1 KiB the driver keeps for each block). The grid's size only: the kernel finishes for
/// any grid.
fn resident_blocks(info: &DeviceInfo, shared: usize) -> usize {
    let per_sm = (info.shared_mem_per_block_optin as usize + 1024) / (shared + 1024);
    info.compute_units as usize * per_sm.clamp(1, BLOCKS_AN_SM)
}

/// Parts of the down product's `k`: enough that its tiles' parts give every resident block one
/// (`resident / tiles`, rounded up), at most [`MLP_MAX_SPLITS`] and the row's chunks.
fn splits_for(resident: usize, tiles: usize, chunks: usize) -> usize {
    resident.div_ceil(tiles.max(1)).clamp(1, MLP_MAX_SPLITS.min(chunks.max(1)))
}

/// `act = silu(G x) * (U x)` and `y = D act` for one token `x` (`[hidden]`), in one launch:
/// `act` is `[ffn]` (the gate-and-up products' SwiGLU, the down product's input), `y`
/// `[hidden]`; queued on `y`'s stream, which every buffer must belong to. `splits`: parts of
/// the down product's `k` (1 to [`MLP_MAX_SPLITS`] and `ffn`'s chunks; `None`: the launcher's
/// choice for the device). Only where [`quant_mlp_applies`] (else an error).
pub fn quant_mlp<T: Dtype>(
    mlp: &QuantMlp<'_>,
    x: &DeviceBuffer<T>,
    act: &mut DeviceBuffer<T>,
    y: &mut DeviceBuffer<T>,
    scratch: &mut MlpScratch,
    splits: Option<NonZeroUsize>,
) -> Result<()> {
    let QuantMlp { format, gate, up, down, hidden, ffn } = *mlp;
    named("gate", check_quant_matvec(format, ffn, hidden, 1, gate.len(), x.len(), act.len()))?;
    named("up", check_quant_matvec(format, ffn, hidden, 1, up.len(), x.len(), act.len()))?;
    named("down", check_quant_matvec(format, hidden, ffn, 1, down.len(), act.len(), y.len()))?;
    let stream = y.stream().clone();
    let info = stream.backend().info();
    let chunk = matrix_core_chunk(info.matrix_cores, format, T::NAME, hidden)
        .filter(|_| matrix_core_chunk(info.matrix_cores, format, T::NAME, ffn).is_some());
    ensure(chunk.is_some(), KERNEL, || {
        format!(
            "needs NVIDIA mma.sync matrix cores, f16 or bf16 activations and hidden ({hidden}) and ffn ({ffn}) \
             positive multiples of {}'s k step {} (device {}, {:?}, activations {})",
            format.name(),
            format.matrix_core_k_step(),
            info.name,
            info.matrix_cores,
            T::NAME
        )
    })?;
    ensure(scratch.hidden >= hidden, KERNEL, || {
        format!("the scratch was made for {} outputs, the MLP has {hidden}", scratch.hidden)
    })?;
    // Device allocations are at least 256-byte aligned; the kernel's 16-byte copies rely on it.
    ensure(
        [
            gate.device_ptr(),
            up.device_ptr(),
            down.device_ptr(),
            x.device_ptr(),
            act.device_ptr(),
            y.device_ptr(),
        ]
        .iter()
        .all(|p| p.is_multiple_of(16)),
        KERNEL,
        || "every buffer must be 16-byte aligned".into(),
    )?;
    let mma = MmaFormat::ggml(format);
    let chunks = ffn / mma.chunk();
    let row_bytes = ffn.max(hidden) / format.block_elems() * format.block_bytes();
    ensure(ROWS * row_bytes < 1 << 32, KERNEL, || {
        format!("hidden {hidden} and ffn {ffn} make rows too long")
    })?;
    let shared = shared_bytes(mma);
    ensure(shared <= info.shared_mem_per_block_optin as usize, KERNEL, || {
        format!(
            "needs {shared} bytes of shared memory, the device allows {}",
            info.shared_mem_per_block_optin
        )
    })?;
    let resident = resident_blocks(info, shared);
    let tiles = hidden.div_ceil(ROWS);
    let splits = match splits.or_else(splits_override) {
        Some(s) => s.get(),
        None => splits_for(resident, tiles, chunks),
    };
    ensure((1..=MLP_MAX_SPLITS.min(chunks)).contains(&splits), KERNEL, || {
        format!(
            "{splits} parts of the down product's {chunks} chunks: 1 to {} allowed",
            MLP_MAX_SPLITS.min(chunks)
        )
    })?;
    let items = ffn.div_ceil(ROWS) + tiles * splits;
    ensure(items < ITEM_LIMIT, KERNEL, || format!("{items} work items; a launch takes fewer than 2^31"))?;
    let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>(&format!("rf_qmlp_{}", format.name())))?;
    let threads = WARPS * 32;
    ensure(info.warp_size == 32 && kernel.max_threads_per_block() as usize >= threads, KERNEL, || {
        format!("the kernel needs {threads} threads of 32-wide warps")
    })?;
    let blocks = resident.min(items).clamp(1, info.max_grid[0].max(1) as usize);
    let config = LaunchConfig {
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_mem_bytes: shared as u32,
    };
    let params = abi::rf_qmlp_params {
        gate: gate.device_ptr(),
        up: up.device_ptr(),
        down: down.device_ptr(),
        x: x.device_ptr(),
        act: act.device_ptr(),
        y: y.device_ptr(),
        partial: scratch.partial.device_ptr(),
        counters: scratch.counters.device_ptr(),
        hidden: hidden as u64,
        ffn: ffn as u64,
        splits: splits as u32,
        pad: 0,
    };
    let launch = stream
        .launch(&kernel)
        .dependent()
        .reads(gate)
        .reads(up)
        .reads(down)
        .reads(x)
        .writes(act)
        .writes(y)
        .writes(&mut scratch.partial)
        .writes(&mut scratch.counters)
        .arg(params);
    // SAFETY: rf_qmlp_<fmt>_<T>(rf_qmlp_params p) reads gate and up ([ffn, hidden] blocks:
    // ffn * hidden / E blocks each) and down ([hidden, ffn]) in whole 16-byte vectors (their
    // rows are whole k steps, so whole 16-byte vectors; q6_K's spans past a row's end are
    // zero-filled without reading), x[0, hidden) and act[0, ffn) (after writing it), and writes
    // act[0, ffn), y[0, hidden), partial[0, splits * hidden) and counters[0, ARRIVALS + hidden /
    // 16): check_quant_matvec proved the weights', x's, act's and y's lengths, and the scratch
    // holds MLP_MAX_SPLITS * hidden f32 and the counters for at least `hidden` outputs (checked
    // above), splits being 1 to min(MLP_MAX_SPLITS, chunks) (checked). hidden and ffn are
    // positive multiples of the format's k step (matrix_core_chunk), its items below 2^31 and 16
    // row bytes below 2^32 (checked). Every pointer is 16-byte aligned (checked). The block is 4
    // whole warps of 32 lanes with the dynamic shared memory its formula needs (checked against
    // the opt-in limit; the launch opts in). The counters are zero: allocated zeroed, and every
    // launch leaves them zero for the next, which on the same stream waits for this one before
    // touching them (the kernel's first act is its wait for the kernel ahead, as a dependent
    // launch requires). The kernel finishes for any grid (its header). act and y are `&mut`
    // borrows distinct from each other and from the shared weights and x; `reads` / `writes`
    // check the stream.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// `check`'s refusal as this launcher's, naming the product (`gate`, `up`, `down`) it was about.
fn named(product: &str, check: Result<()>) -> Result<()> {
    check.map_err(|e| match e {
        KernelError::Shape { message, .. } => {
            KernelError::Shape { kernel: KERNEL, message: format!("{product}: {message}") }
        }
        other => other,
    })
}

/// The entries [`quant_mlp`] launches ([`crate::launchable`]): every ggml format, f16 and bf16.
pub(crate) fn launchable() -> Vec<Launchable> {
    let mut out = Vec::new();
    for format in GgmlFormat::ALL {
        for dtype in ["f16", "bf16"] {
            debug_assert!(
                matrix_core_chunk(MatrixCores::MmaSync, format, dtype, format.matrix_core_k_step()).is_some()
            );
            out.push(Launchable::new(MODULE, format!("rf_qmlp_{}_{dtype}", format.name()), Needs::MmaSync));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_parts_give_every_resident_block_one() {
        // An H200 (132 SMs): q4_K holds 4 blocks an SM, q8_0's three stages 3.
        assert_eq!(splits_for(528, 256, 28), 3);
        assert_eq!(splits_for(396, 256, 56), 2);
        assert_eq!(splits_for(528, 1024, 28), 1, "enough tiles");
        assert_eq!(splits_for(528, 16, 28), 8, "at most 8 parts");
        assert_eq!(splits_for(528, 16, 3), 3, "at most a chunk a part");
    }

    #[test]
    fn blocks_fit_their_shared_memory() {
        for format in GgmlFormat::ALL {
            let bytes = shared_bytes(MmaFormat::ggml(format));
            // 228 KiB an SM on sm_90: at least three blocks of every format.
            assert!((3 * (bytes + 1024)) <= 228 * 1024, "{}: {bytes}", format.name());
        }
    }
}
