//! What the launchers of the tiled matrix-vector kernels share ([`super::mxfp4_tiled`],
//! [`super::q4k_tiled`]; `kernels/include/rocmforge_tiled.h` on the device side): the forms of a
//! launch's output and its norm, and the checked kernel arguments they become. Every function
//! takes the launcher's kernel name for its errors.

use rocm_runtime::{DeviceBuffer, Stream};

use crate::abi::mxfp4_tiled as abi;
use crate::dtype::Dtype;
use crate::error::{KernelError, Result, ensure};

/// Rows of a tile.
pub const TILE_ROWS: usize = abi::RF_T4_ROWS as usize;
/// Most outputs one launch writes (a stacked weight's parts).
pub const MAX_TILED_OUTPUTS: usize = abi::RF_T4_OUTPUTS as usize;
/// Most warps a block of the kernels has; stages of a matrix-core warp's ring.
pub(crate) const MAX_WARPS: usize = abi::RF_T4_WARPS as usize;
pub(crate) const STAGES: usize = abi::RF_T4_STAGES as usize;
/// Shared memory the runtime reserves a block beside what the launch asks for (1 KB on sm_80+).
const RESERVED_SHARED: usize = 1024;
/// Vectors of one pass of the several-vector loops (B's 8 columns).
pub(crate) const BATCH_PASS: usize = abi::RF_T4_BATCH_PASS as usize;
/// Most vectors one matrix-core launch multiplies; the launchers run larger batches in launches
/// of this many.
pub const MAX_TILED_BATCH: usize = abi::RF_T4_MAX_BATCH as usize;
/// Blocks of 8 warps a matrix-core loop keeps resident on a multiprocessor where shared memory
/// allows (the entries' launch bounds promise it to the compiler); the 32-vector loops', with
/// more registers a thread.
pub(crate) const RESIDENT_BLOCKS: usize = abi::RF_T4_RESIDENT_BLOCKS as usize;
pub(crate) const BATCH32_RESIDENT_BLOCKS: usize = abi::RF_T4_BATCH32_RESIDENT_BLOCKS as usize;

/// The loop a launch of the q4_K and q8_0 tiled kernels runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loop {
    /// Any device, any batch (`rf_<layout>_tiled_{matvec,normed}_<dt>`).
    Portable,
    /// One vector on the matrix cores, x staged once a block
    /// (`rf_<layout>_tiled_{matvec,normed}_mma_<dt>`).
    One,
    /// Up to `8 * passes` vectors on the matrix cores, x read from global memory
    /// (`rf_<layout>_tiled_batch{8,32}_mma_<dt>`).
    Batch { passes: usize },
}

/// The loop for `batch` vectors (at most [`MAX_TILED_BATCH`] on the matrix cores; one when normed).
pub(crate) fn choose_loop(matrix_cores: bool, batch: usize) -> Loop {
    match batch {
        _ if !matrix_cores => Loop::Portable,
        0 | 1 => Loop::One,
        b if b <= BATCH_PASS => Loop::Batch { passes: 1 },
        _ => Loop::Batch { passes: MAX_TILED_BATCH / BATCH_PASS },
    }
}

/// The entry of layout `layout` (`q4k`, `q8_0`) a loop launches (`normed`: through an RMSNorm)
/// with activations `dtype`.
pub(crate) fn entry(layout: &str, lp: Loop, normed: bool, dtype: &str) -> String {
    let form = if normed { "normed" } else { "matvec" };
    match lp {
        Loop::Portable => format!("rf_{layout}_tiled_{form}_{dtype}"),
        Loop::One => format!("rf_{layout}_tiled_{form}_mma_{dtype}"),
        Loop::Batch { passes } => format!("rf_{layout}_tiled_batch{}_mma_{dtype}", passes * BATCH_PASS),
    }
}

/// The RMSNorm a normed launch applies to its input first: the input is then a row `h` of the
/// residual stream, and the product multiplies each element `h * s * weight` rounded to `T`,
/// `s = 1 / sqrt(mean(h^2) + eps)`, as [`crate::rmsnorm::RmsNorm::run`] computes a row (its sum
/// of squares in the kernel's own order, so `s` may differ from RmsNorm's in its last bit). So a
/// layer's norm costs no launch of its own: every block of the product normalises the row it
/// stages anyway.
#[derive(Clone, Copy, Debug)]
pub struct TiledNorm<'a, T: Dtype> {
    /// `k` elements.
    pub weight: &'a DeviceBuffer<T>,
    /// Positive and finite.
    pub eps: f32,
}

/// What a tiled launch does with each (row, vector) total, rounded to `T`.
#[derive(Debug)]
pub enum TiledOutput<'a, 'b, T: Dtype> {
    /// Each part of a stacked weight into its own output, as [`super::mx_matvec_tiled_split`].
    Split(&'a mut [&'b mut DeviceBuffer<T>]),
    /// A gate-and-up product's activation, as [`super::mx_matvec_tiled_swiglu`].
    Swiglu(&'a mut DeviceBuffer<T>),
    /// Added to the residual stream `h` (`[batch, n]`): `h = round(h + round(total))`, as
    /// [`crate::rmsnorm::RmsNorm::run_residual`] adds a block's output to it, so that the output
    /// joins the stream in the launch that computes it.
    Add(&'a mut DeviceBuffer<T>),
}

/// What the kernels do with a total (`rf_t4_outputs::mode`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Store,
    Swiglu,
    Add,
}

impl Mode {
    /// The ABI's value.
    pub(crate) fn abi(self) -> u32 {
        match self {
            Mode::Store => abi::RF_T4_STORE,
            Mode::Swiglu => abi::RF_T4_SWIGLU,
            Mode::Add => abi::RF_T4_ADD,
        }
    }
}

/// The checks every tiled launch makes before it picks a kernel, and the arguments they give:
/// `x` holds `batch` vectors of `k`; no vectors need empty outputs; the norm
/// ([`norm_arg`]) and the outputs ([`outputs`], or a gate-and-up launch's [`swiglu_outputs`])
/// as `mode` says, `ys` the `n` rows' outputs. `None` where there is nothing to launch (no
/// vectors, or no rows).
#[allow(clippy::too_many_arguments)] // every launcher's inputs, checked in one place
pub(crate) fn launch_args<T: Dtype>(
    kernel: &'static str,
    x: &DeviceBuffer<T>,
    batch: usize,
    k: usize,
    n: usize,
    norm: Option<&TiledNorm<'_, T>>,
    ys: &mut [&mut DeviceBuffer<T>],
    mode: Mode,
) -> Result<Option<(abi::rf_t4_outputs, abi::rf_t4_norm)>> {
    ensure(batch.checked_mul(k) == Some(x.len()), kernel, || {
        format!(
            "x has {} elements, {batch} vectors of the weight's k = {k} need {}",
            x.len(),
            batch.saturating_mul(k)
        )
    })?;
    if batch == 0 {
        ensure(ys.iter().all(|y| y.is_empty()), kernel, || {
            "no vectors, but outputs that are not empty".into()
        })?;
        return Ok(None);
    }
    let norm_param = norm_arg(kernel, norm, batch, k)?;
    // A residual launch's one output is the stream, laid out as a plain launch's.
    debug_assert!(mode != Mode::Add || ys.len() == 1, "one residual stream");
    let mut params = if mode == Mode::Swiglu {
        swiglu_outputs(kernel, ys[0], n, batch)?
    } else {
        outputs(kernel, ys, n, batch)?
    };
    params.mode = mode.abi();
    Ok((n > 0).then_some((params, norm_param)))
}

/// The kernels' outputs argument for `ys` splitting a weight of `n` rows for `batch` (>= 1)
/// vectors, checked as [`super::mx_matvec_tiled_split`] says: each output holds `batch` rows of its part,
/// each end is the running sum of the parts' rows, and the unused slots are empty ranges at `n`
/// (null pointers, never written).
pub(crate) fn outputs<T: Dtype>(
    kernel: &'static str,
    ys: &[&mut DeviceBuffer<T>],
    n: usize,
    batch: usize,
) -> Result<abi::rf_t4_outputs> {
    ensure((1..=MAX_TILED_OUTPUTS).contains(&ys.len()), kernel, || {
        format!("{} outputs; a launch writes 1 to {MAX_TILED_OUTPUTS}", ys.len())
    })?;
    let lens: Vec<usize> = ys.iter().map(|y| y.len()).collect();
    let total = lens.iter().try_fold(0usize, |a, &l| a.checked_add(l));
    let whole = lens.iter().all(|l| l.is_multiple_of(batch));
    ensure(whole && total == n.checked_mul(batch), kernel, || {
        format!(
            "the outputs hold {lens:?} elements; {batch} vectors of the weight's n = {n} rows need {batch} x its part's rows each"
        )
    })?;
    let n32 = rows_u32(kernel, n)?;
    let mut out = abi::rf_t4_outputs { end: [n32; MAX_TILED_OUTPUTS], ..Default::default() };
    let mut end = 0u32;
    for (i, y) in ys.iter().enumerate() {
        let rows = y.len() / batch;
        ensure(i + 1 == ys.len() || rows.is_multiple_of(TILE_ROWS), kernel, || {
            format!("output {i} has {rows} rows; every output but the last needs a multiple of {TILE_ROWS}")
        })?;
        end += rows as u32; // at most n, which fits
        out.y[i] = y.device_ptr();
        out.end[i] = end;
    }
    Ok(out)
}

/// `n` rows as the kernels count them (32 bits).
pub(crate) fn rows_u32(kernel: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| KernelError::Shape {
        kernel,
        message: format!("n = {n} is more than the kernel counts (32-bit rows)"),
    })
}

/// The kernels' outputs argument for a gate-and-up launch of `n` rows (gates, then as many ups)
/// for `batch` (>= 1) vectors into `act` (`[batch, n / 2]`): `n / 2` a whole number of tiles, as
/// [`super::mx_matvec_tiled_swiglu`] says (`rocmforge_mxfp4_tiled_abi.h`: `RF_T4_SWIGLU`; the caller
/// sets the mode).
pub(crate) fn swiglu_outputs<T: Dtype>(
    kernel: &'static str,
    act: &DeviceBuffer<T>,
    n: usize,
    batch: usize,
) -> Result<abi::rf_t4_outputs> {
    ensure(n.is_multiple_of(2 * TILE_ROWS), kernel, || {
        format!("gate and up of {n} rows: two halves of whole tiles ({TILE_ROWS} rows) needed")
    })?;
    let gates = n / 2;
    ensure(batch.checked_mul(gates) == Some(act.len()), kernel, || {
        format!(
            "the activation holds {} elements; {batch} vectors of {gates} gates need {}",
            act.len(),
            batch * gates
        )
    })?;
    let n32 = rows_u32(kernel, n)?;
    let mut out = abi::rf_t4_outputs { end: [n32 / 2, n32, n32], ..Default::default() };
    out.y[0] = act.device_ptr();
    Ok(out)
}

/// Checks a normed launch's norm for `batch` vectors of `k` elements and gives the kernels'
/// argument (a null weight without one).
pub(crate) fn norm_arg<T: Dtype>(
    kernel: &'static str,
    norm: Option<&TiledNorm<'_, T>>,
    batch: usize,
    k: usize,
) -> Result<abi::rf_t4_norm> {
    let Some(norm) = norm else {
        return Ok(abi::rf_t4_norm::default());
    };
    ensure(batch == 1, kernel, || format!("a normed launch takes one vector, got {batch}"))?;
    ensure(norm.weight.len() == k, kernel, || {
        format!("the norm's weight has {} elements, the weight's k = {k}", norm.weight.len())
    })?;
    ensure(norm.eps.is_finite() && norm.eps > 0.0, kernel, || {
        format!("the norm's eps must be positive and finite, got {}", norm.eps)
    })?;
    ensure(norm.weight.device_ptr().is_multiple_of(16), kernel, || {
        "the norm's weight must be 16-byte aligned".into()
    })?;
    Ok(abi::rf_t4_norm { weight: norm.weight.device_ptr(), eps: norm.eps, unused: 0 })
}

/// The rows of weights of `(n, k)` each stacked along their rows ([`super::TiledMxfp4::stack`],
/// [`super::TiledQ4k::stack`]): the parts' `n` added up, once every part has the first one's
/// `k` and every part but the last whole tiles (so that no tile holds two parts).
pub(crate) fn stacked_rows(kernel: &'static str, parts: &[(usize, usize)]) -> Result<usize> {
    let Some(&(_, k)) = parts.first() else {
        return Err(KernelError::Shape { kernel, message: "no weights to stack".into() });
    };
    for (i, &(n, part_k)) in parts.iter().enumerate() {
        ensure(part_k == k, kernel, || format!("weight {i} has k = {part_k}, weight 0 has k = {k}"))?;
        ensure(i + 1 == parts.len() || n.is_multiple_of(TILE_ROWS), kernel, || {
            format!("weight {i} has {n} rows; every weight but the last needs a multiple of {TILE_ROWS}")
        })?;
    }
    parts
        .iter()
        .try_fold(0usize, |total, &(n, _)| total.checked_add(n))
        .ok_or_else(|| KernelError::Shape { kernel, message: "the stacked rows overflow usize".into() })
}

/// Checks that `len` bytes are `n` GGUF rows of `k` elements in blocks of `elems` elements and
/// `bytes` bytes (`what` names the block in the error).
pub(crate) fn check_gguf_rows(
    kernel: &'static str,
    len: usize,
    n: usize,
    k: usize,
    (elems, bytes, what): (usize, usize, &str),
) -> Result<()> {
    ensure(k.is_multiple_of(elems), kernel, || format!("k = {k} is not a multiple of {elems}"))?;
    let blocks = k / elems;
    let need = n.checked_mul(blocks).and_then(|b| b.checked_mul(bytes));
    ensure(need == Some(len), kernel, || match need {
        Some(need) => format!("w holds {len} bytes; {n} rows of {blocks} {what} need {need}"),
        None => format!("[{n}, {k}] overflows usize"),
    })
}

/// A matrix-core launch's shape, (blocks, warps a block, dynamic shared bytes), for `units`
/// tiles (or gate-and-up pairs) whose rows hold `groups` groups: warps split a tile's groups (never
/// more warps than groups, at most [`MAX_WARPS`]), halved until `shared(warps)` fits the device's
/// opt-in limit; blocks stay resident (block b walks units b, b + grid, ...: a block that waited
/// for a slot would run its whole share after the others), at most `resident` blocks of 8 warps
/// an SM (the entries' launch bounds). `why` follows the refusal's shared-memory figure.
pub(crate) fn resident_shape(
    kernel: &'static str,
    info: &rocm_runtime::DeviceInfo,
    units: usize,
    groups: usize,
    resident: usize,
    shared: impl Fn(usize) -> usize,
    (k, why): (usize, &str),
) -> Result<(usize, usize, usize)> {
    let optin = info.shared_mem_per_block_optin as usize;
    let mut warps = groups.clamp(1, MAX_WARPS);
    while warps > 1 && shared(warps) > optin {
        warps /= 2;
    }
    let bytes = shared(warps);
    ensure(bytes <= optin, kernel, || {
        format!("k = {k} needs {bytes} bytes of shared memory{why}, the device allows {optin}")
    })?;
    // A multiprocessor's shared memory is the per-block opt-in limit plus the reserve.
    let per_sm =
        ((optin + RESERVED_SHARED) / (bytes + RESERVED_SHARED)).clamp(1, resident * MAX_WARPS / warps);
    let blocks = info.compute_units.max(1) as usize * per_sm;
    Ok((units.min(blocks).clamp(1, info.max_grid[0].max(1) as usize), warps, bytes))
}

/// Threads of a dequantisation block.
const DEQUANT_THREADS: usize = 256;
/// Dequantisation blocks an SM, at most (the kernels stride over the rest).
const DEQUANT_BLOCKS_AN_SM: usize = 8;

/// The launch of a tiled weight's dequantisation kernel over `vectors` 16-byte payload vectors
/// (a thread a vector a trip): enough blocks for each thread one, at most
/// [`DEQUANT_BLOCKS_AN_SM`] an SM, within the device's grid.
pub(crate) fn dequant_config(info: &rocm_runtime::DeviceInfo, vectors: usize) -> rocm_runtime::LaunchConfig {
    let blocks = vectors
        .div_ceil(DEQUANT_THREADS)
        .min(info.compute_units.max(1) as usize * DEQUANT_BLOCKS_AN_SM)
        .clamp(1, info.max_grid[0].max(1) as usize);
    rocm_runtime::LaunchConfig {
        grid: [blocks as u32, 1, 1],
        block: [DEQUANT_THREADS as u32, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// A tiled launch's configuration, `(blocks, warps, shared bytes)` as a launch shape gives it,
/// refused where `kernel` allows fewer threads a block.
pub(crate) fn launch_config(
    name: &'static str,
    kernel: &rocm_runtime::Function,
    (blocks, warps, shared): (usize, usize, usize),
) -> Result<rocm_runtime::LaunchConfig> {
    let threads = warps * 32;
    ensure(kernel.max_threads_per_block() as usize >= threads, name, || {
        format!(
            "the kernel needs {threads} threads a block, the device allows {}",
            kernel.max_threads_per_block()
        )
    })?;
    Ok(rocm_runtime::LaunchConfig {
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_mem_bytes: shared as u32,
    })
}

/// The outputs `params` (made for a batch of vectors, `parts` of them used) from vector `first`
/// on, for a launch of the vectors from there: each output's pointer moved `first` times its
/// part's rows of `elem`-byte elements.
pub(crate) fn outputs_from(
    params: &abi::rf_t4_outputs,
    parts: usize,
    first: usize,
    elem: u64,
) -> abi::rf_t4_outputs {
    let mut moved = *params;
    let mut start = 0u32;
    for i in 0..parts {
        let part = (params.end[i] - start) as u64;
        moved.y[i] = params.y[i] + first as u64 * part * elem;
        start = params.end[i];
    }
    moved
}

/// A tiled weight's bytes, whatever its format (MXFP4, q4_K, q8_0): `[n, k]` as the layout's
/// payload and its second run, `scales` (q4_K's super-block headers), each tile after tile. The
/// formats' types ([`super::TiledMxfp4`], [`super::TiledQ4k`], [`super::TiledQ8`]) make it and
/// say what its bytes mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TiledBytes {
    pub n: usize,
    pub k: usize,
    pub payload: Vec<u8>,
    pub scales: Vec<u8>,
}

impl TiledBytes {
    /// Weights of the same `k` stacked along their rows into one, `[sum of n, k]`: the layout is
    /// tile by tile, so this is the parts' bytes one after another ([`stacked_rows`] checks that
    /// no tile would hold two parts).
    pub fn stack(kernel: &'static str, parts: &[&TiledBytes]) -> Result<Self> {
        let n = stacked_rows(kernel, &parts.iter().map(|p| (p.n, p.k)).collect::<Vec<_>>())?;
        Ok(TiledBytes {
            n,
            k: parts[0].k, // stacked_rows refuses no parts
            payload: parts.iter().map(|p| p.payload.as_slice()).collect::<Vec<_>>().concat(),
            scales: parts.iter().map(|p| p.scales.as_slice()).collect::<Vec<_>>().concat(),
        })
    }

    /// Copies the bytes to `stream`'s device.
    pub fn upload(&self, stream: &Stream) -> Result<DeviceTiledBytes> {
        Ok(DeviceTiledBytes {
            n: self.n,
            k: self.k,
            payload: stream.upload(&self.payload)?,
            scales: stream.upload(&self.scales)?,
        })
    }
}

/// [`TiledBytes`] on a device.
#[derive(Debug)]
pub(crate) struct DeviceTiledBytes {
    pub n: usize,
    pub k: usize,
    pub payload: DeviceBuffer<u8>,
    pub scales: DeviceBuffer<u8>,
}

impl DeviceTiledBytes {
    /// Device bytes the weight occupies (the last tile's padding included).
    pub fn bytes(&self) -> usize {
        self.payload.len() + self.scales.len()
    }

    /// The whole weight's buffers, from its first tile.
    pub fn buffers(&self) -> TiledBuffers<'_> {
        TiledBuffers {
            payload: (&self.payload, self.payload.device_ptr()),
            scales: (&self.scales, self.scales.device_ptr()),
        }
    }

    /// Checks that `rows` is a part of the weight (inside it, from a tile's first row) and gives
    /// the buffers from its first tile: past the bytes of the `rows.start` rows before it,
    /// `bytes_before(rows.start)` (payload, scales; the layout's).
    pub fn part(
        &self,
        kernel: &'static str,
        rows: &std::ops::Range<usize>,
        bytes_before: impl FnOnce(usize) -> Option<(usize, usize)>,
    ) -> Result<TiledBuffers<'_>> {
        let n = self.n;
        ensure(rows.start <= rows.end && rows.end <= n, kernel, || {
            format!("rows {rows:?} are not inside the weight's {n}")
        })?;
        ensure(rows.start.is_multiple_of(TILE_ROWS), kernel, || {
            format!("rows start at {}, not at a tile ({TILE_ROWS} rows)", rows.start)
        })?;
        // Inside the weight, whose own sizes did not overflow.
        let (p, s) = bytes_before(rows.start).expect("a part of an allocated weight");
        Ok(TiledBuffers {
            payload: (&self.payload, self.payload.device_ptr() + p as u64),
            scales: (&self.scales, self.scales.device_ptr() + s as u64),
        })
    }
}

/// A tiled weight's buffers as a launch reads them: each with the device address of the first
/// tile it reads (a stacked weight's part may start past the first).
#[derive(Clone, Copy)]
pub(crate) struct TiledBuffers<'a> {
    pub payload: (&'a DeviceBuffer<u8>, u64),
    pub scales: (&'a DeviceBuffer<u8>, u64),
}

/// Checks a dequantisation of `count` rows of `k` into `out` and gives `None` where there is
/// nothing to launch, else the entry's `u32` rows and blocks.
pub(crate) fn dequant_args<T: Dtype>(
    kernel: &'static str,
    count: usize,
    k: usize,
    out: &DeviceBuffer<T>,
) -> Result<Option<(u32, u32)>> {
    ensure(count.checked_mul(k).is_some_and(|need| need <= out.len()), kernel, || {
        format!("out has {} elements; {count} rows of {k} need {}", out.len(), count.saturating_mul(k))
    })?;
    if count == 0 || k == 0 {
        return Ok(None);
    }
    match (u32::try_from(count), u32::try_from(k / 32)) {
        (Ok(rows), Ok(blocks)) => Ok(Some((rows, blocks))),
        _ => Err(KernelError::Shape {
            kernel,
            message: format!("[{count}, {k}] is more than the kernel counts (32-bit rows and blocks)"),
        }),
    }
}

/// Launches a tiled layout's dequantisation entry `entry` of `module`, a thread each of `items`
/// (the entry's unit: a payload vector, or a run of the output), at most [`dequant_config`]'s
/// grid: (payload, scales, T* out, u32 rows, u32 nb) with `args` from [`dequant_args`].
///
/// # Safety
/// `w`'s addresses must start the tiles of `rows` rows of `nb` blocks of the layout `entry`
/// reads, inside their buffers, and `out` hold `rows * 32 nb` elements (what [`dequant_args`]
/// checks); the entry writes `out[row * 32 nb + c]` for row < rows only.
pub(crate) unsafe fn launch_dequant<T: Dtype>(
    module: crate::KernelModule,
    entry: &str,
    w: TiledBuffers<'_>,
    (rows, nb): (u32, u32),
    items: usize,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    let stream = out.stream().clone();
    let kernel = crate::loader::kernel(&stream, module, entry)?;
    let config = dequant_config(stream.backend().info(), items);
    // SAFETY: the caller's promise; w's buffers are shared borrows distinct from out; the builder
    // checks the streams.
    unsafe {
        stream
            .launch(&kernel)
            .reads(w.payload.0)
            .arg(w.payload.1)
            .reads(w.scales.0)
            .arg(w.scales.1)
            .buffer_mut(out)
            .arg(rows)
            .arg(nb)
            .launch(config)?;
    }
    Ok(())
}

/// Whether `T` takes the matrix-core kernels of the q4_K and q8_0 tiled layouts on `stream`'s
/// device: NVIDIA `mma.sync` (sm_80+), f16 or bf16.
pub(crate) fn columns_on_matrix_cores<T: Dtype>(stream: &rocm_runtime::Stream) -> bool {
    stream.backend().info().matrix_cores == rocm_runtime::MatrixCores::MmaSync
        && matches!(T::NAME, "f16" | "bf16")
}

/// A tiled layout whose one-vector kernel takes its blocks as B's columns (`rf_t4_block_columns`:
/// q4_K, q8_0), as its launches need it: names, a group's stage bytes in a ring, and the blocks
/// of 8 warps each loop keeps resident on a multiprocessor (its entries' launch bounds).
pub(crate) struct ColumnsLayout {
    /// The launcher's name in errors.
    pub kernel: &'static str,
    pub module: crate::KernelModule,
    /// The entries' prefix: `rf_<name>_tiled_...`.
    pub name: &'static str,
    /// A group's payload and scale bytes in a stage.
    pub stage: usize,
    /// Resident blocks of the one-vector loop, and of the 8- and 32-vector loops.
    pub resident: [usize; 3],
}

/// The row of zeros the one-vector loop's lanes that give no x read (`rf_t4_block_columns::ZEROS`).
const ZERO_BYTES: usize = 512;

impl ColumnsLayout {
    /// The entry a loop launches (`normed`: through an RMSNorm) with activations `dtype`.
    pub fn entry(&self, lp: Loop, normed: bool, dtype: &str) -> String {
        entry(self.name, lp, normed, dtype)
    }

    /// Dynamic shared memory of a matrix-core launch with `warps` warps a block over rows of `k`
    /// elements: each warp's ring and the tiles' totals (two buffers of `warps * 16` floats a
    /// column), a gate-and-up launch's 16 gates a column; and for one vector x staged as f16
    /// with its blocks' factors and sums, and the row of zeros.
    pub fn shared_bytes(&self, lp: Loop, warps: usize, k: usize, swiglu: bool) -> usize {
        let columns = match lp {
            Loop::Batch { passes } => passes * BATCH_PASS,
            _ => 1,
        };
        let x_once = if lp == Loop::One { (k / 32) * (64 + 4 + 4) + ZERO_BYTES } else { 0 };
        let gates = if swiglu { TILE_ROWS * 4 * columns } else { 0 };
        warps * (STAGES * self.stage + 2 * TILE_ROWS * 4 * columns) + x_once + gates
    }

    /// Launch shape: (blocks, warps a block, dynamic shared bytes), a warp a group (256
    /// elements) at most, over tiles (or gate-and-up pairs of tiles). The matrix-core loops keep
    /// their blocks resident ([`resident_shape`]); the portable one takes a tile a block.
    pub fn launch_shape(
        &self,
        info: &rocm_runtime::DeviceInfo,
        lp: Loop,
        n: usize,
        k: usize,
        swiglu: bool,
    ) -> Result<(usize, usize, usize)> {
        let units = if swiglu { n / (2 * TILE_ROWS) } else { n.div_ceil(TILE_ROWS) };
        let groups = k / 256;
        let resident = match lp {
            Loop::Portable => {
                return Ok((units.clamp(1, info.max_grid[0].max(1) as usize), groups.clamp(1, MAX_WARPS), 0));
            }
            Loop::One => self.resident[0],
            Loop::Batch { passes } if passes > 1 => self.resident[2],
            Loop::Batch { .. } => self.resident[1],
        };
        let why = if lp == Loop::One { " (x is staged whole)" } else { "" };
        let shared = |warps| self.shared_bytes(lp, warps, k, swiglu);
        resident_shape(self.kernel, info, units, groups, resident, shared, (k, why))
    }

    /// `n` rows of a tiled weight of this layout (`w`: from the rows' first tile) times `batch`
    /// vectors `x` (through `norm` first where given: one vector) into `ys` as `mode` says: on the
    /// matrix cores where [`columns_on_matrix_cores`] and not `portable` (launches of
    /// [`MAX_TILED_BATCH`] vectors), else on the portable kernel (one launch).
    ///
    /// # Safety
    /// `w`'s addresses must start `ceil(n / 16)` tiles of this layout for rows of `k` elements
    /// (`k` a multiple of 256; groups of `stage - 256` payload and 256 scale bytes), inside their
    /// buffers, laid out as the layout's packer lays them out.
    #[allow(clippy::too_many_arguments)] // the launch every public form funnels into
    pub unsafe fn launch<T: Dtype>(
        &self,
        w: TiledBuffers<'_>,
        (n, k): (usize, usize),
        x: &DeviceBuffer<T>,
        batch: usize,
        norm: Option<TiledNorm<'_, T>>,
        ys: &mut [&mut DeviceBuffer<T>],
        mode: Mode,
        portable: bool,
    ) -> Result<()> {
        let kernel_name = self.kernel;
        let Some((params, norm_param)) = launch_args(kernel_name, x, batch, k, n, norm.as_ref(), ys, mode)?
        else {
            return Ok(());
        };
        let swiglu = mode == Mode::Swiglu;
        ensure(x.device_ptr().is_multiple_of(16), kernel_name, || "x must be 16-byte aligned".into())?;
        ensure(u32::try_from(k / 32).is_ok() && u32::try_from(batch).is_ok(), kernel_name, || {
            format!("[{n}, {k}] x {batch} is more than the kernel counts (32-bit blocks and vectors)")
        })?;
        let stream = ys[0].stream().clone();
        let info = stream.backend().info();
        let matrix_cores = !portable && columns_on_matrix_cores::<T>(&stream);
        // The portable kernel takes any batch in one launch; the matrix-core loops
        // MAX_TILED_BATCH vectors a launch.
        let chunk = if matrix_cores { MAX_TILED_BATCH } else { batch };
        let elem = size_of::<T>() as u64;
        for first in (0..batch).step_by(chunk) {
            let count = chunk.min(batch - first);
            let lp = choose_loop(matrix_cores, count);
            let kernel =
                crate::loader::kernel(&stream, self.module, &self.entry(lp, norm.is_some(), T::NAME))?;
            let config = launch_config(kernel_name, &kernel, self.launch_shape(info, lp, n, k, swiglu)?)?;
            // Vectors first.. of this launch: x's rows and each output's rows from there.
            let chunk_params = outputs_from(&params, ys.len(), first, elem);
            let x_first = x.device_ptr() + (first * k) as u64 * elem;
            // SAFETY: every entry is (const uint4* payload, const u8* scales, const T* x,
            // rf_t4_outputs y, rf_t4_norm norm, u32 nb, u32 batch). For tile t < ceil(n / 16)
            // they read its groups' payload and scale bytes (k / 256 groups a tile row) from w's
            // addresses on, which the caller promises are inside the buffers. They read `count`
            // rows of k elements of x from x_first, rows first..first + count of x (batch k
            // elements, checked by launch_args), 16-byte aligned (x is, checked, and k is a
            // multiple of 256) for the matrix-core kernels' 16-byte loads; device allocations are
            // 256-byte aligned for the 16-byte copies of the weight. They write row r < n of
            // vector v < count to y[i][v rows_i + r - end[i - 1]] for the first i with r < end[i],
            // y[i] this launch's pointer, vector `first` of output i (outputs: each output batch x
            // its part's rows, the ends the running sums of the parts' rows, reaching n; unused
            // slots end at n, never chosen), so inside ys[i] for first + v < batch; with SwiGLU
            // y[0][v n / 2 + r] for gate rows r < n / 2 only (swiglu_outputs: n a multiple of 32,
            // ys[0] batch n / 2 elements, ends n / 2, n, n); with Add they read each element they
            // write first (one output, the stream). With a norm (norm_arg: one vector, its weight
            // k elements, 16-byte aligned) the entry is a normed one, which reads
            // norm.weight[0..k) (the matrix-core one before its wait: a weight, declared so);
            // without, it is null, which the other entries require (they trap otherwise). Blocks
            // are 1..=8 whole warps, within the launch bounds, never more warps than groups
            // (launch_shape; the matrix-core kernels trap otherwise); the matrix-core entries run
            // only on mma.sync devices (columns_on_matrix_cores), with count <= 1, 8 or 32 as
            // their names say (choose_loop), and the shared memory shared_bytes gives (checked
            // against the device's limit by resident_shape); the portable ones with static shared
            // memory alone. k = 0: no groups, every row's total 0 (the kernels' empty paths). w
            // and x are shared borrows distinct from the outputs (each a distinct &mut); the
            // builder checks the streams. Dependent (rocmforge_dependent_launch.h): the
            // matrix-core kernels issue their first weight copies (and the norm's weight) before
            // waiting for the kernel ahead, x's reads and every write after it; the portable one
            // waits first.
            unsafe {
                let mut launch = stream
                    .launch(&kernel)
                    .dependent()
                    .reads_before_wait(w.payload.0)
                    .arg(w.payload.1)
                    .reads_before_wait(w.scales.0)
                    .arg(w.scales.1)
                    .reads(x)
                    .arg(x_first);
                if let Some(norm) = &norm {
                    launch = launch.reads_before_wait(norm.weight);
                }
                for y in ys.iter_mut() {
                    launch = launch.writes(&mut **y);
                }
                launch
                    .arg(chunk_params)
                    .arg(norm_param)
                    .arg((k / 32) as u32)
                    .arg(count as u32)
                    .launch(config)?;
            }
        }
        Ok(())
    }
}

/// The entries a [`ColumnsLayout`]'s launcher launches ([`crate::launchable`]): the portable
/// kernels (plain and normed) and the dequantisation for every type; the matrix-core one-vector
/// kernels (plain and normed) and the 8- and 32-vector ones for f16 and bf16.
pub(crate) fn columns_launchable(layout: &ColumnsLayout) -> Vec<crate::launchable::Launchable> {
    use crate::launchable::{DTYPES, Launchable, Needs};
    let mut out = Vec::new();
    for dtype in DTYPES {
        for normed in [false, true] {
            out.push(Launchable::new(
                layout.module,
                layout.entry(Loop::Portable, normed, dtype),
                Needs::Nothing,
            ));
            if dtype != "f32" {
                out.push(Launchable::new(
                    layout.module,
                    layout.entry(Loop::One, normed, dtype),
                    Needs::MmaSync,
                ));
            }
        }
        if dtype != "f32" {
            for passes in [1, MAX_TILED_BATCH / BATCH_PASS] {
                let entry = layout.entry(Loop::Batch { passes }, false, dtype);
                out.push(Launchable::new(layout.module, entry, Needs::MmaSync));
            }
        }
        out.push(Launchable::new(
            layout.module,
            format!("rf_{}_tiled_dequant_{dtype}", layout.name),
            Needs::Nothing,
        ));
    }
    out
}
