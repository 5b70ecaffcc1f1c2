//! Flash attention forward (`kernels/flash_*.hip`, one file per implementation; the shared
//! contract is `kernels/include/rocmforge_flash.h`): the launcher picks the kernel (matrix cores
//! or portable), the key split, and runs the combine pass when it splits.

use rocm_runtime::{DeviceBuffer, Function, LaunchConfig, MatrixCores, Stream};

use super::Attention;
use crate::KernelModule;
use crate::abi::flash as abi;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{Result, ensure};
use crate::launchable::{DTYPES, Launchable, Needs};
use crate::loader;

/// Which flash-attention kernel to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlashKernel {
    /// The matrix-core kernel where the device, the dtype (f16/bf16) and the layout allow it
    /// (head_dim, strides and pointers multiples of 8 elements / 16 bytes), else the portable.
    /// On AMD MFMA devices the portable kernel until the MFMA kernel has run on AMD hardware
    /// (`MFMA_AUTO` in this module).
    #[default]
    Auto,
    /// The portable kernel (f32 arithmetic on every platform).
    Portable,
    /// The matrix-core kernel, or an error saying why it cannot run this problem. On an sm_90
    /// device (H100/H200) with the sm_90a kernels built, prefill at head_dim up to 64 and 97 to
    /// 128 takes the warpgroup (`wgmma`) kernel; everything else the mma.sync kernel (NVIDIA) or
    /// MFMA (AMD).
    MatrixCores,
    /// As [`FlashKernel::MatrixCores`], but never the warpgroup kernel: the mma.sync kernel on
    /// Hopper too (to compare the two, and to test both on one device); elsewhere the same as
    /// `MatrixCores`.
    MmaSync,
}

/// How to run flash attention: which kernel, and how many ranges to cut the keys into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlashOptions {
    pub kernel: FlashKernel,
    /// `None`: chosen from the grid and the device (more than one only when the grid would not
    /// fill the device). `Some(n)`: at most `n` (1 to 64), fewer if the keys run out.
    pub splits: Option<usize>,
}

/// Packed (query, head) rows of a block, keys of a tile and threads of the portable kernel.
const PORTABLE_ROWS: usize = abi::RF_FLASH_P_ROWS as usize;
const PORTABLE_KEYS: usize = abi::RF_FLASH_P_KEYS as usize;
const THREADS: u32 = abi::RF_FLASH_P_THREADS;

/// Head dimensions the matrix-core kernel is instantiated for; a problem takes the smallest at
/// least its head_dim (the rest zero-padded on chip).
const MMA_HEAD_DIMS: [usize; 5] = [64, 80, 96, 128, 256];

/// One instantiation of the matrix-core kernel (`RF_FLASH_MMA_ENTRIES`): warps, K/V buffers,
/// keys a tile, whether the warps split the keys of one 16-row group, and 16-row fragments a
/// warp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MmaVariant {
    suffix: &'static str,
    warps: usize,
    stages: usize,
    keys: usize,
    key_split: bool,
    frags: usize,
}

impl MmaVariant {
    /// Prefill (more than 64 packed rows): four warps of two 16-row fragments, 128 rows, 64-key
    /// tiles (128 at head_dim 64), two blocks a compute unit: each K/V fragment read from shared
    /// memory feeds two mma (faster than the eight-warp, one-fragment block it replaced:
    /// docs/kernels/attention.md, version 9). Up to 64
    /// rows: four warps. Up to 16 rows (decode: the group's heads of one
    /// query): four warps splitting the keys, or three would idle. head_dim 256: four warps,
    /// 32-key tiles (registers).
    fn choose(head_dim: usize, rows: usize) -> MmaVariant {
        let v = |suffix, warps, stages, keys, key_split| MmaVariant {
            suffix,
            warps,
            stages,
            keys,
            key_split,
            frags: 1,
        };
        let m2 = |keys| MmaVariant { frags: 2, ..v("m2", 4, 2, keys, false) };
        match (head_dim, rows) {
            (256, _) => v("w4", 4, 2, 32, false),
            (_, 0..=16) => v("ks", 4, 3, 64, true),
            (_, 17..=64) => v("w4", 4, 2, 64, false),
            (64, _) => m2(128),
            _ => m2(64),
        }
    }

    /// Paged K/V is instantiated for the decode shapes only: key-split up to 16 rows, four
    /// warps beyond (chunked prefill).
    fn choose_paged(head_dim: usize, rows: usize) -> MmaVariant {
        let v = MmaVariant::choose(head_dim, rows);
        if v.frags > 1 { MmaVariant::choose(head_dim, 64) } else { v }
    }

    /// Decode whose blocks about fill the device once (3/4 to all of the compute units, as 32
    /// sequences x 4 KV heads do on a 132-unit H100/H200): one 8-warp key-split block per
    /// compute unit over 128-key tiles and no key split, instead of two 4-warp blocks a unit and
    /// a split in two: the same bytes in flight per unit, no partial outputs and no combine
    /// pass. Only when the caller left the split to the launcher (or asked for none).
    fn widen_decode(
        self,
        head_dim: usize,
        blocks: usize,
        compute_units: usize,
        splits: Option<usize>,
    ) -> Self {
        let fills_once = blocks * 4 >= compute_units * 3 && blocks <= compute_units;
        if self.key_split && head_dim <= 128 && fills_once && splits.is_none_or(|s| s == 1) {
            MmaVariant { suffix: "ks8", warps: 8, stages: 3, keys: 128, key_split: true, frags: 1 }
        } else {
            self
        }
    }

    fn rows(&self) -> usize {
        if self.key_split { 16 } else { 16 * self.warps * self.frags }
    }
}

/// Whether [`FlashKernel::Auto`] takes the MFMA kernel on AMD CDNA. Off until the MFMA kernel
/// has passed the GPU tests (`tests/gpu_kernels/{flash,paged}_attention.rs`, which run
/// `FlashKernel::MatrixCores` on every matrix-core device) on AMD hardware: it is verified only
/// by the CPU emulation (`tests/amd_emu`, suite `flash`) and compiled for gfx908/90a/940. Flipping it is the
/// one change needed then.
const MFMA_AUTO: bool = false;

/// Whether `Auto` runs the matrix-core kernel on a device with `cores` (where the problem fits).
fn auto_uses(cores: MatrixCores) -> bool {
    match cores {
        MatrixCores::MmaSync => true,
        MatrixCores::Mfma => MFMA_AUTO,
        MatrixCores::None => false,
    }
}

/// Keys a tile of the MFMA kernel.
const MFMA_KEYS: usize = abi::RF_FLASH_MFMA_KEYS as usize;

/// The MFMA kernel (`RF_FLASH_MFMA_ENTRIES`) for padded head_dim `dt` and `rows` packed rows a
/// (batch, KV head): one 64-lane wavefront a 16-row block up to 16 rows (decode), four beyond.
/// LDS: one K and one V tile of 32 rows of `dt + 8` elements.
fn mfma_plan(dtype: &str, dt: usize, rows: usize, paged: bool, elem_bytes: usize) -> Plan {
    let waves = if rows <= 16 { 1 } else { 4 };
    let smem = 2 * MFMA_KEYS * (dt + 8) * elem_bytes;
    Plan {
        module: KernelModule::FlashMfma,
        entry: format!("rf_flash_mfma_{dtype}_d{dt}_w{waves}{}", if paged { "_paged" } else { "" }),
        function: None,
        rows_per_block: 16 * waves,
        threads: 64 * waves as u32,
        shared_mem_bytes: smem as u32,
        // Blocks a compute unit holds by LDS (64 KiB), at most 8.
        blocks_per_cu: ((64 << 10) / smem).clamp(1, 8),
    }
}

/// The combine pass's entries (`rf_flash_combine_<dtype>`).
const COMBINE: &str = "rf_flash_combine";

fn portable_entry(dtype: &str, dmax: usize, paged: bool) -> String {
    format!("rf_flash_{dtype}_d{dmax}{}", if paged { "_paged" } else { "" })
}

fn mma_entry(dtype: &str, dt: usize, suffix: &str, paged: bool) -> String {
    format!("rf_flash_mma_{dtype}_d{dt}_{suffix}{}", if paged { "_paged" } else { "" })
}

fn wgmma_entry(dtype: &str, dt: usize) -> String {
    format!("rf_flash_wgmma_{dtype}_d{dt}")
}

/// And the portable kernel's register tiles.
const PORTABLE_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// Key splits are cut at multiples of this (every kernel's key tile divides it).
const SPLIT_ALIGN: usize = abi::RF_FLASH_SPLIT_ALIGN as usize;
const MAX_SPLITS: usize = 64;
/// The most splits the launcher picks itself for a paged cache ([`split_keys`]).
const MAX_PAGED_SPLITS: usize = 16;

/// Every entry's one argument (`rf_flash_params`, generated from
/// `kernels/include/rocmforge_flash_abi.h`).
type FlashParams = abi::rf_flash_params;

/// K and V in a paged cache (`rf_flash_params`' paged fields; see [`super::paged`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct PagedSource<'a> {
    pub block_table: &'a DeviceBuffer<i32>,
    pub seq_lens: &'a DeviceBuffer<i32>,
    pub block_size: usize,
    pub max_blocks: usize,
    pub num_blocks: usize,
}

/// The kernel a launch runs: its entry point, rows a block, dynamic shared memory.
#[derive(Debug, Clone)]
struct Plan {
    module: KernelModule,
    entry: String,
    /// The entry, where choosing the plan already looked it up (the warpgroup kernel's probe).
    function: Option<Function>,
    rows_per_block: usize,
    threads: u32,
    shared_mem_bytes: u32,
    /// Blocks of this kernel one compute unit holds at once (shared memory): the wave the key
    /// split fills.
    blocks_per_cu: usize,
}

/// Flash attention forward: `o = softmax(scale * q k^T [+ causal mask]) v` for the problem
/// `attn`, queued on `o`'s stream (every buffer must belong to it), with `lse` (`[batch,
/// q_heads, seq_q]` f32) written when given. The kernel and the key split are chosen for the
/// device; [`flash_attention_with`] sets them.
pub fn flash_attention<T: Dtype>(
    attn: &Attention,
    q: &DeviceBuffer<T>,
    k: &DeviceBuffer<T>,
    v: &DeviceBuffer<T>,
    o: &mut DeviceBuffer<T>,
    lse: Option<&mut DeviceBuffer<f32>>,
) -> Result<()> {
    flash_attention_with(attn, &FlashOptions::default(), q, k, v, o, lse)
}

/// [`flash_attention`] with explicit [`FlashOptions`]. When the keys are split, a temporary of
/// `splits x batch x q_heads x seq_q x (head_dim + 1)` f32 is allocated on the stream (through
/// the memory guard) and a combine pass merges the splits.
pub fn flash_attention_with<T: Dtype>(
    attn: &Attention,
    options: &FlashOptions,
    q: &DeviceBuffer<T>,
    k: &DeviceBuffer<T>,
    v: &DeviceBuffer<T>,
    o: &mut DeviceBuffer<T>,
    lse: Option<&mut DeviceBuffer<f32>>,
) -> Result<()> {
    attn.check(q.len(), k.len(), v.len(), o.len())?;
    run(attn, options, q, k, v, None, o, lse, None)
}

/// Memory for the partial results of a key split (f32 outputs and log-sum-exps of every split),
/// provided by the caller so that a launch allocates nothing: what a graph capture needs
/// (`rocm_runtime::Graph`), and a serving loop that runs one shape every step.
///
/// Sized by [`AttentionScratch::for_paged`] for one problem, options, dtype and device, with
/// the split that launch will take; a launch that needs more (another problem, a split forced
/// larger) is refused with a shape error rather than allocating.
#[derive(Debug)]
pub struct AttentionScratch {
    o: DeviceBuffer<f32>,
    lse: DeviceBuffer<f32>,
}

impl AttentionScratch {
    /// f32 elements in all (0 when the problem it was sized for does not split).
    pub fn len(&self) -> usize {
        self.o.len() + self.lse.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Scratch of `splits` partial results of `rows` rows of `head_dim`, on `stream`.
    pub(super) fn new(stream: &Stream, splits: usize, rows: usize, head_dim: usize) -> Result<Self> {
        let (o_len, lse_len) = scratch_lens(splits, rows, head_dim);
        Ok(AttentionScratch { o: stream.alloc::<f32>(o_len)?, lse: stream.alloc::<f32>(lse_len)? })
    }
}

/// Elements of the partial outputs and log-sum-exps of `splits` splits (none for one split).
fn scratch_lens(splits: usize, rows: usize, head_dim: usize) -> (usize, usize) {
    if splits > 1 { (splits * rows * head_dim, splits * rows) } else { (0, 0) }
}

/// The splits a launch of `attn` with `options` in `T` on `stream` takes, as [`run`] chooses
/// them, for buffers at aligned addresses (every allocation is): what
/// [`AttentionScratch::for_paged`] sizes for.
pub(super) fn planned_splits<T: Dtype>(
    stream: &Stream,
    attn: &Attention,
    options: &FlashOptions,
    paged: bool,
) -> Result<usize> {
    let plan = plan::<T>(stream, attn, options.kernel, options.splits, &[0; 4], paged)?;
    Ok(split_keys(stream, attn, &plan, options.splits, paged).0)
}

/// The key split of a launch: (splits, keys a split). With a paged cache `attn.seq_k` is the
/// table's width and each batch recuts its own keys into the splits on the device
/// (`rf_flash_for_batch`), so the split is planned for the width: two [`SPLIT_ALIGN`]-key
/// tiles a split of it, and at most [`MAX_PAGED_SPLITS`]. Measured at batch 1 on an H100
/// (docs/kernels/attention.md, v12): a split of one tile costs more in the combine than it
/// saves (128 keys: 13.0 us in two splits, 10.0 in one), and 33 splits of a 4096-key table
/// cost ~4 us more than 16 whatever the length.
fn split_keys(
    stream: &Stream,
    attn: &Attention,
    plan: &Plan,
    splits: Option<usize>,
    paged: bool,
) -> (usize, usize) {
    let row_blocks = (attn.group() * attn.seq_q).div_ceil(plan.rows_per_block);
    let blocks = row_blocks * attn.kv_heads * attn.batch;
    let (min_keys, most) =
        if paged { (2 * SPLIT_ALIGN, MAX_PAGED_SPLITS) } else { (4 * SPLIT_ALIGN, MAX_SPLITS) };
    let num_splits = splits
        .unwrap_or_else(|| auto_splits(stream, plan.blocks_per_cu, blocks, attn.seq_k, min_keys).min(most))
        .max(1);
    let keys_per_split = attn.seq_k.div_ceil(num_splits).div_ceil(SPLIT_ALIGN).max(1) * SPLIT_ALIGN;
    (attn.seq_k.div_ceil(keys_per_split).max(1), keys_per_split)
}

/// Launches the flash kernel (and the combine) for a problem whose buffers were checked by the
/// caller: `attn.check` for contiguous K/V, the paged checks for a paged cache (where `attn`'s
/// `seq_k` is the most keys a block table can hold). A split writes its partial results into
/// `scratch` when given (refused if too small), else into temporaries allocated here.
#[allow(clippy::too_many_arguments)]
pub(super) fn run<T: Dtype>(
    attn: &Attention,
    options: &FlashOptions,
    q: &DeviceBuffer<T>,
    k: &DeviceBuffer<T>,
    v: &DeviceBuffer<T>,
    paged: Option<PagedSource<'_>>,
    o: &mut DeviceBuffer<T>,
    mut lse: Option<&mut DeviceBuffer<f32>>,
    scratch: Option<&mut AttentionScratch>,
) -> Result<()> {
    let (kernel, splits) = (options.kernel, options.splits);
    if let Some(l) = &lse {
        ensure(l.len() == attn.lse_len(), super::KERNEL, || {
            format!("lse has {} elements, [batch, q_heads, seq_q] needs {}", l.len(), attn.lse_len())
        })?;
    }
    if let Some(s) = splits {
        ensure((1..=MAX_SPLITS).contains(&s), super::KERNEL, || {
            format!("splits {s} is out of range (1 to {MAX_SPLITS})")
        })?;
    }
    if attn.seq_q == 0 {
        return Ok(());
    }
    let stream = o.stream().clone();
    let ptrs = [q.device_ptr(), k.device_ptr(), v.device_ptr(), o.device_ptr()];
    let mut plan = plan::<T>(&stream, attn, kernel, splits, &ptrs, paged.is_some())?;
    let function = match plan.function.take() {
        Some(function) => function,
        None => loader::kernel(&stream, plan.module, &plan.entry)?,
    };
    let row_blocks = (attn.group() * attn.seq_q).div_ceil(plan.rows_per_block);
    let (num_splits, keys_per_split) = split_keys(&stream, attn, &plan, splits, paged.is_some());
    ensure(attn.kv_heads * num_splits <= 65_535, super::KERNEL, || {
        format!("kv_heads {} x splits {num_splits} exceed the grid's 65535", attn.kv_heads)
    })?;

    let rows = attn.lse_len();
    let (o_len, lse_len) = scratch_lens(num_splits, rows, attn.head_dim);
    let mut owned: Option<AttentionScratch> = None;
    let mut partial: Option<(&mut DeviceBuffer<f32>, &mut DeviceBuffer<f32>)> = match scratch {
        _ if num_splits == 1 => None,
        Some(s) => {
            ensure(s.o.len() >= o_len && s.lse.len() >= lse_len, super::KERNEL, || {
                format!(
                    "the scratch holds {} + {} f32, {num_splits} splits of {rows} rows need {o_len} + {lse_len}",
                    s.o.len(),
                    s.lse.len()
                )
            })?;
            Some((&mut s.o, &mut s.lse))
        }
        None => {
            let s = owned.insert(AttentionScratch::new(&stream, num_splits, rows, attn.head_dim)?);
            Some((&mut s.o, &mut s.lse))
        }
    };
    let s = |x: super::Strides| x.all().map(|v| v as u64);
    let [q_batch, q_seq, q_head] = s(attn.q);
    let [k_batch, k_seq, k_head] = s(attn.k);
    let [v_batch, v_seq, v_head] = s(attn.v);
    let [o_batch, o_seq, o_head] = s(attn.o);
    let lse_ptr = lse.as_ref().map_or(0, |l| l.device_ptr());
    let params = FlashParams {
        q: ptrs[0],
        k: ptrs[1],
        v: ptrs[2],
        o: ptrs[3],
        lse: lse_ptr,
        partial_o: partial.as_ref().map_or(0, |p| p.0.device_ptr()),
        partial_lse: partial.as_ref().map_or(0, |p| p.1.device_ptr()),
        q_batch,
        q_seq,
        q_head,
        k_batch,
        k_seq,
        k_head,
        v_batch,
        v_seq,
        v_head,
        o_batch,
        o_seq,
        o_head,
        causal_offset: attn.causal_offset.unwrap_or(0),
        batch: attn.batch as i32,
        q_heads: attn.q_heads as i32,
        kv_heads: attn.kv_heads as i32,
        seq_q: attn.seq_q as i32,
        seq_k: attn.seq_k as i32,
        head_dim: attn.head_dim as i32,
        group: attn.group() as i32,
        keys_per_split: keys_per_split.min(i32::MAX as usize) as i32,
        num_splits: num_splits as i32,
        causal: attn.causal_offset.is_some() as i32,
        scale_log2: attn.scale * std::f32::consts::LOG2_E,
        pad: 0,
        block_table: paged.map_or(0, |p| p.block_table.device_ptr()),
        seq_lens: paged.map_or(0, |p| p.seq_lens.device_ptr()),
        block_size: paged.map_or(0, |p| p.block_size as i32),
        max_blocks: paged.map_or(0, |p| p.max_blocks as i32),
        num_blocks: paged.map_or(0, |p| p.num_blocks as i32),
        block_shift: paged
            .filter(|p| p.block_size.is_power_of_two())
            .map_or(-1, |p| p.block_size.trailing_zeros() as i32),
    };
    let config = LaunchConfig {
        grid: [row_blocks as u32, (attn.kv_heads * num_splits) as u32, attn.batch as u32],
        block: [plan.threads, 1, 1],
        shared_mem_bytes: plan.shared_mem_bytes,
    };
    // SAFETY: rf_flash[_mma]_<T>_d<D>(rf_flash_params) reads q, k and v at the strides
    // `attn.check` verified against their lengths (rows of packed row m < group * seq_q, keys <
    // seq_k, columns < head_dim), and writes either o at its checked, non-overlapping strides
    // and lse (length checked: batch * q_heads * seq_q), or, when split, the two partial
    // buffers (temporaries sized above, or the caller's scratch, checked to be at least that
    // long) at split < num_splits, row < rows, column < head_dim. The dynamic shared memory
    // is the kernel's layout for this head_dim (plan). The pointers in `params` are those of
    // the buffers named by reads/writes. Paged: every key row comes through the block table,
    // whose ids the kernel checks against num_blocks (the caches' lengths were checked for
    // num_blocks x block_size slots), for keys below each batch's clamped seq_lens entry.
    unsafe {
        let launch = stream.launch(&function);
        // The mma.sync entries wait for the kernel ahead first (flash_mma.hip): dependent.
        let launch = if plan.module == KernelModule::FlashMma { launch.dependent() } else { launch };
        let launch = launch.reads(q).reads(k).reads(v);
        let launch = match paged {
            Some(p) => launch.reads(p.block_table).reads(p.seq_lens),
            None => launch,
        };
        match &mut partial {
            Some((po, pl)) => launch.writes(&mut **po).writes(&mut **pl).arg(params).launch(config)?,
            None => match lse.as_deref_mut() {
                Some(l) => launch.writes(o).writes(l).arg(params).launch(config)?,
                None => launch.writes(o).arg(params).launch(config)?,
            },
        }
    }
    if let Some((po, pl)) = &partial {
        let combine = loader::kernel(&stream, KernelModule::FlashCombine, &kernel_name::<T>(COMBINE))?;
        let config = loader::grid_stride(&stream, &combine, rows * attn.head_dim);
        // SAFETY: rf_flash_combine_<T>(rf_flash_params) reads the two partial buffers (at least
        // num_splits x rows x head_dim and num_splits x rows, written above on this stream) and writes o
        // at its checked strides and lse (length checked) when given.
        unsafe {
            // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
            let launch = stream.launch(&combine).dependent().reads(&**po).reads(&**pl).writes(o);
            match lse {
                Some(l) => launch.writes(l).arg(params).launch(config)?,
                None => launch.arg(params).launch(config)?,
            }
        }
    }
    Ok(())
}

/// Chooses the kernel for `kernel` on this device, dtype and layout.
fn plan<T: Dtype>(
    stream: &Stream,
    attn: &Attention,
    kernel: FlashKernel,
    splits: Option<usize>,
    ptrs: &[u64],
    paged: bool,
) -> Result<Plan> {
    let info = stream.backend().info();
    let mma_fits = || -> std::result::Result<usize, String> {
        if info.matrix_cores == MatrixCores::None {
            return Err(format!("{} ({}) has no matrix-core path", info.name, info.arch));
        }
        if info.matrix_cores == MatrixCores::Mfma && info.warp_size != 64 {
            return Err(format!(
                "the MFMA kernel needs 64-lane wavefronts, {} has {}",
                info.arch, info.warp_size
            ));
        }
        if T::NAME == "f32" {
            return Err("the matrix-core kernel takes f16 or bf16".into());
        }
        let strides = [attn.q, attn.k, attn.v, attn.o].iter().flat_map(|s| s.all()).collect::<Vec<_>>();
        if !attn.head_dim.is_multiple_of(8)
            || !strides.iter().all(|s| s.is_multiple_of(8))
            || !ptrs.iter().all(|p| p.is_multiple_of(16))
        {
            return Err(
                "the matrix-core kernel needs head_dim, strides and offsets in multiples of 8 elements"
                    .into(),
            );
        }
        Ok(*MMA_HEAD_DIMS.iter().find(|&&d| d >= attn.head_dim).expect("head_dim <= 256 was checked"))
    };
    let mma = match kernel {
        FlashKernel::Portable => None,
        FlashKernel::Auto => mma_fits().ok().filter(|_| auto_uses(info.matrix_cores)),
        FlashKernel::MatrixCores | FlashKernel::MmaSync => Some(
            mma_fits().map_err(|why| crate::KernelError::Shape { kernel: super::KERNEL, message: why })?,
        ),
    };
    let chosen = kernel_plan::<T>(stream, attn, kernel, splits, paged, mma);
    // A device (or host API) may give a block less shared memory than a plan needs: HIP for
    // NVIDIA cannot opt a module kernel in past 48 KiB. `Auto` then takes the portable kernel.
    let limit = info.shared_mem_per_block_optin;
    let chosen = match chosen {
        plan if plan.shared_mem_bytes <= limit => plan,
        _ if kernel == FlashKernel::Auto && mma.is_some() => {
            kernel_plan::<T>(stream, attn, kernel, splits, paged, None)
        }
        plan => plan,
    };
    if chosen.shared_mem_bytes > limit {
        return Err(crate::KernelError::Shape {
            kernel: super::KERNEL,
            message: format!(
                "`{}` needs {} bytes of shared memory a block; {} ({}) allows {limit}",
                chosen.entry, chosen.shared_mem_bytes, info.name, info.arch
            ),
        });
    }
    Ok(chosen)
}

/// The plan of the kernel `mma` selects: the matrix-core kernel at padded head_dim `dt`, or the
/// portable one for `None`.
fn kernel_plan<T: Dtype>(
    stream: &Stream,
    attn: &Attention,
    kernel: FlashKernel,
    splits: Option<usize>,
    paged: bool,
    mma: Option<usize>,
) -> Plan {
    let info = stream.backend().info();
    match mma {
        Some(dt) if info.matrix_cores == MatrixCores::Mfma => {
            mfma_plan(T::NAME, dt, attn.group() * attn.seq_q, paged, size_of::<T>())
        }
        Some(dt) => {
            let rows = attn.group() * attn.seq_q;
            if kernel != FlashKernel::MmaSync
                && let Some(plan) = warpgroup_plan::<T>(stream, dt, rows, paged)
            {
                return plan;
            }
            let variant =
                if paged { MmaVariant::choose_paged(dt, rows) } else { MmaVariant::choose(dt, rows) };
            let blocks = rows.div_ceil(variant.rows()) * attn.kv_heads * attn.batch;
            let variant = variant.widen_decode(dt, blocks, info.compute_units as usize, splits);
            let block_rows = variant.rows();
            let smem = (block_rows + 2 * variant.stages * variant.keys) * (dt + 8) * size_of::<T>();
            Plan {
                module: KernelModule::FlashMma,
                entry: mma_entry(T::NAME, dt, variant.suffix, paged),
                function: None,
                rows_per_block: block_rows,
                threads: 32 * variant.warps as u32,
                shared_mem_bytes: smem as u32,
                blocks_per_cu: if variant.warps == 8 && variant.key_split { 1 } else { 2 },
            }
        }
        None => {
            let dmax = *PORTABLE_HEAD_DIMS.iter().find(|&&d| d >= attn.head_dim).expect("head_dim <= 256");
            let ld = attn.head_dim + 1;
            let floats = PORTABLE_ROWS * ld + PORTABLE_KEYS * ld + PORTABLE_ROWS * PORTABLE_KEYS;
            Plan {
                module: KernelModule::FlashPortable,
                entry: portable_entry(T::NAME, dmax, paged),
                function: None,
                rows_per_block: PORTABLE_ROWS,
                threads: THREADS,
                shared_mem_bytes: (floats * 4) as u32,
                blocks_per_cu: 2,
            }
        }
    }
}

/// The warpgroup kernel (`wgmma`, sm_90a only, `rf_flash_wgmma_<T>_d<64|128>`): prefill (more
/// than 64 packed rows) at padded head_dim 64 or 128 from contiguous K/V, on a device with
/// warpgroup MMA (`DeviceInfo::warpgroup_mma`) whose module has the entry (it exists only in
/// sm_90a SASS: `ROCMFORGE_NVIDIA_ARCHS` with `90a`, the default). One copying warpgroup and
/// [`warpgroup_math_groups`] math warpgroups of 64 rows; Q and four 64-key K/V buffers in shared
/// memory, plus 2 KiB for the mbarriers and the alignment to the 1024-byte swizzle pattern. One
/// block an SM. Its speed against the mma.sync kernel: docs/kernels/attention.md (version 11).
fn warpgroup_plan<T: Dtype>(stream: &Stream, dt: usize, rows: usize, paged: bool) -> Option<Plan> {
    if paged || rows <= 64 || !WARPGROUP_HEAD_DIMS.contains(&dt) || !stream.backend().info().warpgroup_mma {
        return None;
    }
    let groups = warpgroup_math_groups(dt);
    let entry = wgmma_entry(T::NAME, dt);
    let function = loader::kernel(stream, KernelModule::FlashWgmma, &entry).ok()?;
    Some(Plan {
        module: KernelModule::FlashWgmma,
        entry,
        function: Some(function),
        rows_per_block: 64 * groups,
        threads: 128 * (groups as u32 + 1),
        shared_mem_bytes: warpgroup_smem(dt, size_of::<T>()) as u32,
        blocks_per_cu: 1,
    })
}

/// Padded head_dims with a warpgroup kernel.
const WARPGROUP_HEAD_DIMS: [usize; 2] = [64, 128];

/// Math warpgroups in a block of the warpgroup kernel (its entries' `MATH_WGS`): as many as the
/// registers allow, so that some keep the tensor cores busy while others run the softmax: four
/// at head_dim 64 (112 registers a math thread), three at 128 (160).
const fn warpgroup_math_groups(dt: usize) -> usize {
    if dt <= 64 { 4 } else { 3 }
}

/// Dynamic shared memory of the warpgroup kernel: 64 Q rows a math warpgroup and four buffers of
/// 64 K and 64 V rows, plus 2 KiB (the 1024-byte alignment, and the static mbarriers' share).
const fn warpgroup_smem(dt: usize, elem: usize) -> usize {
    (64 * warpgroup_math_groups(dt) + 2 * 4 * 64) * dt * elem + 2048
}

/// Splits of the keys when the grid is smaller than the device: as many as keep the blocks
/// within one wave (`blocks_per_cu` per compute unit), each split at least `min_keys` long
/// (contiguous K/V: four 64-key tiles; paged: two of the table's width, see [`split_keys`]).
/// More splits than that start a second, mostly idle wave, which measured slower the more
/// splits there were (docs/kernels/attention.md).
fn auto_splits(stream: &Stream, blocks_per_cu: usize, blocks: usize, seq_k: usize, min_keys: usize) -> usize {
    let wave = stream.backend().info().compute_units.max(1) as usize * blocks_per_cu.max(1);
    let by_grid = wave / blocks.max(1);
    let by_keys = (seq_k / min_keys).max(1);
    by_grid.clamp(1, by_keys).min(MAX_SPLITS)
}

/// The entries this module launches ([`crate::launchable`]), named by the plans themselves: the
/// portable kernel and the combine for every dtype; the mma.sync variants [`MmaVariant`]'s
/// choices reach (every row count class, paged or not, widened for decode); the warpgroup and
/// MFMA kernels at every padded head_dim.
pub(crate) fn launchable() -> Vec<Launchable> {
    let mut out = Vec::new();
    for dtype in DTYPES {
        out.push(Launchable::new(KernelModule::FlashCombine, format!("{COMBINE}_{dtype}"), Needs::Nothing));
        for dmax in PORTABLE_HEAD_DIMS {
            for paged in [false, true] {
                out.push(Launchable::new(
                    KernelModule::FlashPortable,
                    portable_entry(dtype, dmax, paged),
                    Needs::Nothing,
                ));
            }
        }
    }
    for dtype in ["f16", "bf16"] {
        for dt in MMA_HEAD_DIMS {
            for paged in [false, true] {
                for rows in [1, 16, 17, 64, 65, 4096] {
                    let variant =
                        if paged { MmaVariant::choose_paged(dt, rows) } else { MmaVariant::choose(dt, rows) };
                    // 100 blocks fill a 132-unit device once: the widened decode variant.
                    for v in [variant, variant.widen_decode(dt, 100, 132, None)] {
                        let l = Launchable::new(
                            KernelModule::FlashMma,
                            mma_entry(dtype, dt, v.suffix, paged),
                            Needs::MmaSync,
                        );
                        if !out.contains(&l) {
                            out.push(l);
                        }
                    }
                    let entry = mfma_plan(dtype, dt, rows, paged, 2).entry;
                    let l = Launchable::new(KernelModule::FlashMfma, entry, Needs::Mfma);
                    if !out.contains(&l) {
                        out.push(l);
                    }
                }
            }
        }
        for dt in WARPGROUP_HEAD_DIMS {
            out.push(Launchable::new(KernelModule::FlashWgmma, wgmma_entry(dtype, dt), Needs::WarpgroupMma));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_fit_their_rows_and_shared_memory() {
        // The warpgroup kernel's buffers fit an sm_90 block.
        for dt in WARPGROUP_HEAD_DIMS {
            let smem = warpgroup_smem(dt, 2);
            assert!(smem <= 227 << 10, "d{dt}: {smem} bytes");
        }
        assert_eq!(MmaVariant::choose(128, 8).suffix, "ks");
        assert_eq!(MmaVariant::choose(128, 17).suffix, "w4");
        assert_eq!(MmaVariant::choose(128, 65).suffix, "m2");
        assert_eq!(MmaVariant::choose(128, 65).rows(), 128);
        assert_eq!(MmaVariant::choose(64, 4096).keys, 128);
        assert_eq!(MmaVariant::choose_paged(128, 4096).suffix, "w4");
        assert_eq!(MmaVariant::choose(256, 8).suffix, "w4");
        // Decode filling a 132-unit device once: the 8-warp key split, unless a split was asked.
        let ks = MmaVariant::choose(128, 8);
        assert_eq!(ks.widen_decode(128, 128, 132, None).suffix, "ks8");
        assert_eq!(ks.widen_decode(128, 128, 132, Some(1)).suffix, "ks8");
        assert_eq!(ks.widen_decode(128, 128, 132, Some(2)).suffix, "ks");
        assert_eq!(ks.widen_decode(128, 64, 132, None).suffix, "ks");
        assert_eq!(ks.widen_decode(128, 133, 132, None).suffix, "ks");
        assert_eq!(MmaVariant::choose(256, 8).widen_decode(256, 128, 132, None).suffix, "w4");
        assert_eq!(MmaVariant::choose(128, 64).widen_decode(128, 128, 132, None).suffix, "w4");
        // Every variant's buffers fit the 227 KiB an sm_80/sm_90 block may opt in to, and a
        // key split's merge scratch (m, l and O of each warp, f32) fits its K buffers.
        for dt in MMA_HEAD_DIMS {
            for rows in [1, 16, 17, 64, 65, 4096] {
                let narrow = MmaVariant::choose(dt, rows);
                for v in [narrow, narrow.widen_decode(dt, 128, 132, None)] {
                    let smem = (v.rows() + 2 * v.stages * v.keys) * (dt + 8) * 2;
                    assert!(smem <= 227 << 10, "d{dt} {v:?}: {smem} bytes");
                    if v.frags > 1 {
                        // Two blocks a compute unit on sm_90 (228 KiB of shared memory; sm_80's
                        // 164 KiB holds one at head_dim 64).
                        assert!(2 * smem <= 228 << 10, "d{dt} {v:?}: {smem} bytes");
                    }
                    if v.key_split {
                        // m and l of each warp's 16 rows, then O with rows padded by 8 floats.
                        assert!(
                            v.warps * 16 * (dt + 8 + 2) * 4 <= v.stages * v.keys * (dt + 8) * 2,
                            "d{dt} {v:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn auto_takes_mfma_only_once_flipped() {
        assert!(auto_uses(MatrixCores::MmaSync));
        assert!(!auto_uses(MatrixCores::None));
        // Portable on AMD until the MFMA kernel has passed the GPU tests there.
        assert_eq!(auto_uses(MatrixCores::Mfma), MFMA_AUTO);
    }

    #[test]
    fn mfma_variants_and_lds() {
        let p = mfma_plan("f16", 128, 8, false, 2);
        assert_eq!(p.entry, "rf_flash_mfma_f16_d128_w1");
        assert_eq!((p.rows_per_block, p.threads), (16, 64));
        let p = mfma_plan("bf16", 80, 17, true, 2);
        assert_eq!(p.entry, "rf_flash_mfma_bf16_d80_w4_paged");
        assert_eq!((p.rows_per_block, p.threads), (64, 256));
        assert_eq!(mfma_plan("f16", 64, 16, true, 2).entry, "rf_flash_mfma_f16_d64_w1_paged");
        assert_eq!(mfma_plan("f16", 256, 4096, false, 2).entry, "rf_flash_mfma_f16_d256_w4");
        // Every instantiation's LDS fits the 64 KiB a CDNA workgroup may use, and its key tile
        // divides the split alignment.
        assert!(SPLIT_ALIGN.is_multiple_of(MFMA_KEYS));
        for dt in MMA_HEAD_DIMS {
            for rows in [1, 16, 17, 4096] {
                let p = mfma_plan("bf16", dt, rows, false, 2);
                assert!(p.shared_mem_bytes <= 64 << 10, "d{dt}: {}", p.shared_mem_bytes);
                assert!(p.blocks_per_cu >= 1);
            }
        }
    }

    #[test]
    fn params_match_the_kernel_struct() {
        // 7 pointers, 12 strides, the offset (8 bytes each), 12 four-byte fields, then the paged
        // cache's 2 pointers and 4 four-byte fields.
        assert_eq!(size_of::<FlashParams>(), 20 * 8 + 12 * 4 + 2 * 8 + 4 * 4);
    }
}
