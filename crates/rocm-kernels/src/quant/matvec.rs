//! `quant_matvec` (`kernels/quant_matvec.hip`): matrix-vector products with weights kept in
//! ggml's block formats on the device, decoded in registers (decoding one token, or a small
//! batch of them, at the speed of reading the packed weight).
//!
//! The weight `W` is `[rows, k]` as GGUF stores it: row `r` is `k / E` consecutive blocks of a
//! [`GgmlFormat`] (`E` = [`GgmlFormat::block_elems`]: 32, or 256 for the k-quants), so the buffer
//! holds `rows * k / E` blocks. The activations `x` are `[batch, k]` and the outputs `y`
//! `[batch, rows]`, row-major, in f32, f16 or bf16 (`T`):
//!
//! `y[b][r] = sum_c W[r][c] x[b][c]`  ([`quant_matvec`]).
//!
//! Numerics: the weights are the codec's values ([`GgmlFormat::block_format`]'s `dequantize`),
//! every sum is f32, and each output is rounded once to `T`. [`quant_matvec_reference`] gives the
//! f64 value of each output and the size of what its sum adds up ([`QuantMatvecReference`]),
//! from which [`QuantMatvecReference::allowed_error`] bounds the kernel's rounding. The design and
//! its speed: `docs/kernels/quant_matvec.md`.
//!
//! Two implementations of that contract: on NVIDIA matrix cores (sm_80 and later) for every
//! ggml format's weights with f16 or bf16 activations and rows of whole k steps
//! ([`quant_matvec_on_matrix_cores`]), `kernels/quant_matvec_mma.hip` for up to 8 vectors and
//! `kernels/quant_matmul_mma.hip` (passes of 32, the weight read once a pass) beyond; and the
//! portable `kernels/quant_matvec.hip` everywhere else. They differ only in the order of their
//! f32 sums.

use rocm_runtime::{DeviceBuffer, DeviceInfo, LaunchConfig, MatrixCores, Stream};

use super::dequant::BlockFormat;
use super::k_split::{self, SplitScratch};
use super::kquant;
use crate::KernelModule;
use crate::abi::quant_matvec as abi;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{DTYPES, Launchable, Needs, every_dtype};
use crate::loader;

mod glu;
pub use glu::{QMVM_GLU_ENV, quant_matvec_glu, quant_matvec_glu_fuses};

const KERNEL: &str = "quant_matvec";
const MODULE: KernelModule = KernelModule::QuantMatvec;
/// The matrix-core kernels (NVIDIA sm_80+).
const MMA_MODULE: KernelModule = KernelModule::QuantMatvecMma;
/// Rows a matrix-core block owns (one m16 tile), its warps at most (they split `k` into chunks)
/// and each warp's stages (the chunks in flight and the one computed on) for passes of 8 (one
/// vector: [`MmaFormat`]'s `stages_one`).
const MMA_ROWS: usize = abi::RF_QMVM_ROWS as usize;
const MMA_WARPS: usize = abi::RF_QMVM_WARPS as usize;
const MMA_STAGES_MANY: usize = abi::RF_QMVM_STAGES_MANY as usize;
const ONE_BLOCKS_AN_SM: usize = abi::RF_QMVM_ONE_BLOCKS_AN_SM as usize;
const ONE_WARPS_MAX: usize = abi::RF_QMVM_ONE_WARPS_MAX as usize;
/// The matrix-core kernel for more than 8 vectors (`kernels/quant_matmul_mma.hip`): rows a
/// block owns (a 16-row tile a warp), its warps, the vectors of a pass and its stages.
const WIDE_MODULE: KernelModule = KernelModule::QuantMatmulMma;
const WIDE_ROWS: usize = abi::RF_QMMM_ROWS as usize;
const WIDE_WARPS: usize = abi::RF_QMMM_WARPS as usize;
const WIDE_PASS: usize = abi::RF_QMMM_BATCH as usize;
const WIDE_STAGES: usize = abi::RF_QMMM_STAGES as usize;

/// Rows a thread block owns at a time.
const ROWS: usize = abi::RF_QMV_ROWS as usize;
/// The widest pass: activation vectors one pass over a row group handles.
const MAX_BATCH: usize = abi::RF_QMV_MAX_BATCH as usize;
/// Threads a block at most.
const THREADS: usize = abi::RF_QMV_THREADS as usize;
/// Elements a thread's unit (the piece of a block it decodes at a time).
const UNIT: usize = abi::RF_QMV_UNIT as usize;
/// The passes the kernel has entries for (`_b1`, `_b2`, `_b4`, `_b8`).
const PASSES: [usize; 4] = [1, 2, 4, MAX_BATCH];
/// Thread blocks per compute unit at most; the kernel strides over further row groups.
const BLOCKS_PER_COMPUTE_UNIT: u32 = 32;
/// Offsets inside a row (bytes) and inside a pass (elements) are 32-bit in the kernel.
const OFFSET_LIMIT: usize = 1 << 31;
/// Row groups of one launch, all products together, are counted in 32 bits by the kernel.
const GROUP_LIMIT: usize = 1 << 31;

/// The ggml block formats the product reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlFormat {
    /// `q8_0` (GGUF type 8): 34-byte blocks of 32 i8 codes and an f16 scale.
    Q8_0,
    /// `q4_0` (GGUF type 2): 18-byte blocks of 32 nibbles and an f16 scale.
    Q4_0,
    /// `q4_K` (GGUF type 12): 144-byte super-blocks of 256.
    Q4K,
    /// `q5_K` (GGUF type 13): 176-byte super-blocks of 256.
    Q5K,
    /// `q6_K` (GGUF type 14): 210-byte super-blocks of 256.
    Q6K,
}

impl GgmlFormat {
    /// Every format.
    pub const ALL: [GgmlFormat; 5] =
        [GgmlFormat::Q8_0, GgmlFormat::Q4_0, GgmlFormat::Q4K, GgmlFormat::Q5K, GgmlFormat::Q6K];

    /// The block format (layout, sizes, CPU codec).
    pub const fn block_format(self) -> BlockFormat {
        match self {
            GgmlFormat::Q8_0 => BlockFormat::Q8_0,
            GgmlFormat::Q4_0 => BlockFormat::Q4_0,
            GgmlFormat::Q4K => BlockFormat::Q4K,
            GgmlFormat::Q5K => BlockFormat::Q5K,
            GgmlFormat::Q6K => BlockFormat::Q6K,
        }
    }

    pub const fn block_bytes(self) -> usize {
        self.block_format().block_bytes()
    }

    pub const fn block_elems(self) -> usize {
        self.block_format().block_elems()
    }

    /// The name the kernels use (`rf_qmv_<name>_b<pass>_<dt>`).
    pub const fn name(self) -> &'static str {
        self.block_format().name()
    }

    /// Elements of a chunk of the matrix-core kernel (a warp's share of `k` at a time): 8 q8_0
    /// or q4_0 blocks (272, 144 bytes a row), 2 q4_K, q5_K or q6_K super-blocks (288, 352, 420).
    pub const fn matrix_core_chunk(self) -> usize {
        match self {
            GgmlFormat::Q8_0 | GgmlFormat::Q4_0 => 256,
            GgmlFormat::Q4K | GgmlFormat::Q5K | GgmlFormat::Q6K => 512,
        }
    }

    /// What `k` must be a multiple of for the matrix-core kernel: whole chunks, whose rows are
    /// whole 16-byte vectors (the kernel's copies). A q6_K chunk is not (420 bytes), so its
    /// rows must be: 8 super-blocks, 2048 elements.
    pub const fn matrix_core_k_step(self) -> usize {
        match self {
            GgmlFormat::Q6K => 2048,
            _ => self.matrix_core_chunk(),
        }
    }

    /// Whether an element is `step * q - min` (`q4_K`, `q5_K`), whose two parts the kernel sums
    /// separately, rather than a scale times a code.
    pub const fn is_affine(self) -> bool {
        matches!(self, GgmlFormat::Q4K | GgmlFormat::Q5K)
    }
}

impl From<GgmlFormat> for BlockFormat {
    fn from(f: GgmlFormat) -> Self {
        f.block_format()
    }
}

impl GgmlFormat {
    /// The format whose blocks `format` describes, if the product reads them (not MX formats).
    pub fn of(format: BlockFormat) -> Option<GgmlFormat> {
        GgmlFormat::ALL.into_iter().find(|g| g.block_format() == format)
    }
}

/// Checks a product's shape and buffer lengths without a device: `k` a multiple of the format's
/// block, the weight exactly `rows * k / E` blocks, `x` exactly `batch * k` and `y` exactly
/// `batch * rows` elements, and a row short enough for the kernel's 32-bit offsets.
pub fn check_quant_matvec(
    format: GgmlFormat,
    rows: usize,
    k: usize,
    batch: usize,
    w_len: usize,
    x_len: usize,
    y_len: usize,
) -> Result<()> {
    let elems = format.block_elems();
    ensure(k.is_multiple_of(elems), KERNEL, || {
        format!("k = {k} is not a multiple of {elems}, the {} block", format.name())
    })?;
    let row_bytes = k / elems * format.block_bytes();
    let overflow = || KernelError::Shape {
        kernel: KERNEL,
        message: format!("[{rows}, {k}] x [{batch}, {k}] overflows usize"),
    };
    let w_need = rows.checked_mul(row_bytes).ok_or_else(overflow)?;
    let x_need = batch.checked_mul(k).ok_or_else(overflow)?;
    let y_need = batch.checked_mul(rows).ok_or_else(overflow)?;
    ensure(w_len == w_need, KERNEL, || {
        format!("w holds {w_len} bytes; {rows} rows of {} {} blocks need {w_need}", k / elems, format.name())
    })?;
    ensure(x_len == x_need, KERNEL, || format!("x has {x_len} elements, expected {batch} x {k} = {x_need}"))?;
    ensure(y_len == y_need, KERNEL, || {
        format!("y has {y_len} elements, expected {batch} x {rows} = {y_need}")
    })?;
    ensure(row_bytes < OFFSET_LIMIT && k * MAX_BATCH < OFFSET_LIMIT, KERNEL, || {
        format!("k = {k} is too long: a row must stay below 2^31 bytes and 8 k below 2^31 elements")
    })?;
    Ok(())
}

/// The pass width (the entry's `_b<n>`) for `batch` vectors: the smallest entry that takes the
/// whole batch in one pass (so the weight is read once), 8 beyond that.
fn pass_for(batch: usize) -> usize {
    PASSES.into_iter().find(|&p| p >= batch).unwrap_or(MAX_BATCH)
}

/// The entry for a format, pass and storage type.
fn entry_name<T: Dtype>(format: GgmlFormat, pass: usize) -> String {
    kernel_name::<T>(&format!("rf_qmv_{}_b{pass}", format.name()))
}

/// `y = W x` for `batch` vectors: `w` holds the `[rows, k]` weight in `format`, `x` `[batch, k]`
/// and `y` `[batch, rows]`; queued on `y`'s stream (`w` and `x` must belong to it). `k = 0`
/// gives zeros; no rows or no vectors is a no-op.
pub fn quant_matvec<T: Dtype>(
    format: GgmlFormat,
    w: &DeviceBuffer<u8>,
    x: &DeviceBuffer<T>,
    y: &mut DeviceBuffer<T>,
    rows: usize,
    k: usize,
    batch: usize,
) -> Result<()> {
    quant_matvec_group(format, &mut [QuantProduct { w, y, rows }], x, k, batch)
}

/// One product of a [`quant_matvec_group`]: `y = W x`, `w` holding the `[rows, k]` weight and
/// `y` the `[batch, rows]` output.
#[derive(Debug)]
pub struct QuantProduct<'a, T: Dtype> {
    pub w: &'a DeviceBuffer<u8>,
    pub y: &'a mut DeviceBuffer<T>,
    pub rows: usize,
}

/// Up to [`MAX_PRODUCTS`] products over the same activations `x` (`[batch, k]`) in one launch,
/// all in `format`: a layer's Q, K and V projections, or its gate and up projections. Each
/// output has exactly the bits [`quant_matvec`] of its product alone would give (except where
/// the launch splits `k`, at 9 to 32 vectors on the matrix cores: the group splits less than
/// its products alone would, so the order of their f32 sums may differ; `quant/k_split.rs`);
/// one launch as wide as all their rows reads the weights closer to the copy rate than one
/// launch each (a 1024-row projection alone cannot fill the memory pipeline). Queued on the first output's
/// stream, which every buffer must belong to.
pub fn quant_matvec_group<T: Dtype>(
    format: GgmlFormat,
    products: &mut [QuantProduct<'_, T>],
    x: &DeviceBuffer<T>,
    k: usize,
    batch: usize,
) -> Result<()> {
    quant_matvec_group_in(format, products, x, k, batch, None)
}

/// [`quant_matvec_group`] with a [`SplitScratch`] (of the products' stream) for the products
/// whose `k` is split across blocks (few rows at 9 to 32 vectors on the matrix cores:
/// `quant/k_split.rs`); with `None` a split launch allocates a temporary one, which a stream
/// that is recording a graph refuses. The results are the same either way.
pub fn quant_matvec_group_in<T: Dtype>(
    format: GgmlFormat,
    products: &mut [QuantProduct<'_, T>],
    x: &DeviceBuffer<T>,
    k: usize,
    batch: usize,
    split: Option<&mut SplitScratch>,
) -> Result<()> {
    let shapes: Vec<ProductShape> =
        products.iter().map(|p| ProductShape { rows: p.rows, w_len: p.w.len(), y_len: p.y.len() }).collect();
    check_quant_matvec_group(format, k, batch, x.len(), &shapes)?;
    let total_rows: usize = products.iter().map(|p| p.rows).sum();
    if total_rows == 0 || batch == 0 {
        return Ok(());
    }
    // Device allocations are at least 256-byte aligned; the kernel's 16-byte loads rely on it.
    ensure(
        x.device_ptr().is_multiple_of(16)
            && products
                .iter()
                .all(|p| p.w.device_ptr().is_multiple_of(16) && p.y.device_ptr().is_multiple_of(16)),
        KERNEL,
        || "w, x and y must be 16-byte aligned".into(),
    )?;
    let batch32 = batch_arg(batch)?;
    let stream = products[0].y.stream().clone();
    if matrix_core_chunk(stream.backend().info().matrix_cores, format, T::NAME, k).is_some() {
        return matrix_core_products(&stream, MmaFormat::ggml(format), products, x, k, batch32, split);
    }
    let kernel = loader::kernel(&stream, MODULE, &entry_name::<T>(format, pass_for(batch)))?;
    let groups: usize = products.iter().map(|p| p.rows.div_ceil(ROWS)).sum();
    // The kernel counts row groups in 32 bits, adding the grid (below 2^31 too) to one below this.
    ensure(groups < GROUP_LIMIT, KERNEL, || {
        format!("{total_rows} rows make {groups} row groups of {ROWS}; a launch takes fewer than 2^31")
    })?;
    let config = launch_config(&stream, &kernel, groups, k)?;
    // SAFETY: rf_qmv_<fmt>_b<n>_<T>(rf_qmv_products p, const T* x, u64 k, u32 batch): with its
    // row groups below 2^31 (checked above) and a grid below 2^31 (launch_config), for each
    // product i with rows[i] > 0, reads bytes [0, rows[i] * k / E * block_bytes) of w[i] (a
    // 16-byte load that would cross its end is replaced by 16-bit loads below it) and writes
    // y[i][0, batch * rows[i]); it reads x[0, batch * k). check_quant_matvec_group proved those
    // lengths for every product, and that the offsets the kernel keeps in 32 bits (inside a
    // row, inside a pass of 8 vectors) stay below 2^31; batch fits the u32 argument. Products
    // with no rows hold null pointers the kernel never reads (their row groups are 0). Every
    // w, y and x is 16-byte aligned (checked above). The outputs are distinct `&mut` borrows,
    // the weights and x shared ones (so no output aliases an input); `reads` / `writes` check
    // that each belongs to the launching stream. launch_config gives whole warps of 32 or 64
    // lanes, at most RF_QMV_THREADS, the shapes its shared totals and its warp reduction take.
    unsafe { launch_products(&stream, &kernel, config, products, x, k, batch32, false, None) }
}

/// `batch` as the kernels' 32-bit argument, refused when it does not fit.
pub(super) fn batch_arg(batch: usize) -> Result<u32> {
    u32::try_from(batch)
        .map_err(|_| KernelError::Shape { kernel: KERNEL, message: format!("batch = {batch} is too large") })
}

/// Queues `kernel`, an entry `(rf_qmv_products p, const T* x, u64 k, u32 batch)` of either
/// implementation, over `products` (unused slots: no rows, null pointers) and `x`: the weights
/// and x as reads, the outputs as writes, each checked to belong to `stream`.
///
/// `dependent`: launched as a [`Launch::dependent`](rocm_runtime::Launch::dependent) one.
/// `split`: the last argument of `quant_matmul_mma`'s `_split` entries, their k split, and the
/// scratch its pointers are into (a write); `None` for the other entries.
///
/// # Safety
/// The kernel, `config`, `k` and `batch` must keep every access inside the buffers' extents:
/// each caller proves it for its kernel. A `dependent` kernel must wait for the kernel ahead
/// before reading x or writing anything (rocmforge_dependent_launch.h).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn launch_products<T: Dtype>(
    stream: &Stream,
    kernel: &rocm_runtime::Function,
    config: LaunchConfig,
    products: &mut [QuantProduct<'_, T>],
    x: &DeviceBuffer<T>,
    k: usize,
    batch: u32,
    dependent: bool,
    split: Option<(abi::rf_qmmm_split, &mut SplitScratch)>,
) -> Result<()> {
    let mut params = abi::rf_qmv_products::default();
    for (i, p) in products.iter().enumerate() {
        if p.rows > 0 {
            params.w[i] = p.w.device_ptr();
            params.y[i] = p.y.device_ptr();
            params.rows[i] = p.rows as u64;
        }
    }
    let mut launch = stream.launch(kernel);
    if dependent {
        launch = launch.dependent();
    }
    for p in products.iter_mut() {
        // A dependent entry copies its first weights before it waits for the kernel ahead.
        launch = if dependent { launch.reads_before_wait(p.w) } else { launch.reads(p.w) };
        launch = launch.writes(&mut *p.y);
    }
    launch = launch.arg(params).buffer(x).arg(k as u64).arg(batch);
    if let Some((args, scratch)) = split {
        launch = launch.writes(&mut scratch.partial).writes(&mut scratch.arrivals).arg(args);
    }
    // SAFETY: the caller's contract.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// Whether [`quant_matvec`] and [`quant_matvec_group`] of `format` at row length `k` run on
/// `stream`'s device's matrix cores (`kernels/quant_matvec_mma.hip`) rather than the portable
/// kernel: NVIDIA `mma.sync` devices, f16 or bf16 activations (`T`), and `k` a positive multiple
/// of [`GgmlFormat::matrix_core_k_step`] (every ggml format).
pub fn quant_matvec_on_matrix_cores<T: Dtype>(stream: &Stream, format: GgmlFormat, k: usize) -> bool {
    matrix_core_chunk(stream.backend().info().matrix_cores, format, T::NAME, k).is_some()
}

/// The chunk of the matrix-core kernel where it takes the product (see
/// [`quant_matvec_on_matrix_cores`]).
fn matrix_core_chunk(cores: MatrixCores, format: GgmlFormat, dtype: &str, k: usize) -> Option<usize> {
    let step = format.matrix_core_k_step();
    (cores == MatrixCores::MmaSync && matches!(dtype, "f16" | "bf16") && k > 0 && k.is_multiple_of(step))
        .then_some(format.matrix_core_chunk())
}

/// Vectors a pass of the matrix-core kernels takes: `quant_matvec_mma`'s `_b1` entry for one
/// vector and `_b8` up to 8 (a pass's unused vectors cost nothing but their zero-filled stage);
/// beyond, `quant_matmul_mma`'s passes of 32, which read the weight once for all of them where
/// passes of 8 read it once each (docs/kernels/quant_matvec.md, v7).
fn matrix_core_pass(batch: u32) -> usize {
    match batch {
        1 => 1,
        2..=8 => MAX_BATCH,
        _ => WIDE_PASS,
    }
}

/// A weight format of the matrix-core kernel (`kernels/quant_matvec_mma.hip`): its entries'
/// name (`rf_qmvm_<name>_b<pass>_<dt>`), its blocks, its chunk (a warp's share of `k` at a time:
/// the kernel's `F::CHUNK`) and its stages at one vector (`F::STAGES_B1`). Every ggml format,
/// and MXFP4 for [`super::mx_matvec_group`]'s batches (passes of 8 only: its `_b8` entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MmaFormat {
    name: &'static str,
    block_elems: usize,
    block_bytes: usize,
    chunk: usize,
    stages_one: usize,
    /// One vector runs the kernel's columns loop (`rf_qmvm_q4k_b1`: a block's warps split the
    /// row's blocks, no staging): q4_K.
    columns_one: bool,
}

impl MmaFormat {
    pub(super) const fn ggml(format: GgmlFormat) -> MmaFormat {
        let stages_one = match format {
            GgmlFormat::Q8_0 | GgmlFormat::Q4_0 => abi::RF_QMVM_STAGES_ONE_Q8_0 as usize,
            GgmlFormat::Q4K | GgmlFormat::Q5K | GgmlFormat::Q6K => abi::RF_QMVM_STAGES_ONE_Q4_K as usize,
        };
        MmaFormat {
            name: format.name(),
            block_elems: format.block_elems(),
            block_bytes: format.block_bytes(),
            chunk: format.matrix_core_chunk(),
            stages_one,
            columns_one: matches!(format, GgmlFormat::Q4K),
        }
    }

    /// MXFP4 in ggml's layout: chunks of 16 blocks (272 bytes a row, whole 16-byte vectors when
    /// `k % 512 == 0`), q4_K's stages.
    pub(super) const MXFP4: MmaFormat = MmaFormat {
        name: BlockFormat::Mxfp4Gguf.name(),
        block_elems: BlockFormat::Mxfp4Gguf.block_elems(),
        block_bytes: BlockFormat::Mxfp4Gguf.block_bytes(),
        chunk: 512,
        stages_one: abi::RF_QMVM_STAGES_ONE_Q4_K as usize,
        columns_one: false,
    };

    /// Bytes of a row's chunk.
    const fn chunk_bytes(self) -> usize {
        self.chunk / self.block_elems * self.block_bytes
    }

    /// Bytes of shared memory a row's chunk takes (the kernel's `F::SPAN`): the chunk's bytes
    /// when they are whole 16-byte vectors; else (q6_K) the 16-byte vectors from the boundary
    /// below the chunk that cover it wherever it starts, at an offset that is a multiple of
    /// `gcd(bytes, 16)`.
    const fn span(self) -> usize {
        let bytes = self.chunk_bytes();
        let align = 1 << if bytes.trailing_zeros() < 4 { bytes.trailing_zeros() } else { 4 };
        (bytes + 16 - align).div_ceil(16) * 16
    }

    /// Shared bytes of a `quant_matmul_mma` block: its stages, each the chunk of its 64 rows and
    /// of the pass's 32 vectors of x, 64 bytes apart beyond the chunk's bytes.
    const fn wide_shared_bytes(self) -> usize {
        WIDE_STAGES * (WIDE_ROWS * self.span() + WIDE_PASS * (2 * self.chunk + 64))
    }

    /// Shared bytes of a `quant_matvec_mma` block with `warps` warps and passes of `pass` vectors:
    /// per warp its stages (`stages_one` for one vector, `MMA_STAGES_MANY` for passes of 8) of
    /// the tile's rows of a chunk ([`Self::span`] bytes each) and the chunk of x (one vector; or
    /// `pass` vectors 64 bytes apart beyond the chunk's bytes), then the warps' totals (`16 x
    /// pass` f32).
    const fn shared_bytes(self, warps: usize, pass: usize) -> usize {
        let (x, stages) = if pass == 1 {
            (2 * self.chunk, self.stages_one)
        } else {
            (pass * (2 * self.chunk + 64), MMA_STAGES_MANY)
        };
        warps * stages * (MMA_ROWS * self.span() + x) + warps * MMA_ROWS * pass * 4
    }
}

/// The one-vector q8_0 loop's block as `persistent_mlp` runs it inside its own launch: its warps
/// (each needs a chunk of every row: `k` at least this many chunks), the chunk, and its dynamic
/// shared memory.
pub(crate) fn q8_0_one_vector_loop() -> (usize, usize, usize) {
    let f = MmaFormat::ggml(GgmlFormat::Q8_0);
    (MMA_WARPS, f.chunk, f.shared_bytes(MMA_WARPS, 1))
}

/// Warps of a matrix-core block: one a chunk of the row, up to `MMA_WARPS` (so that every warp
/// has at least one chunk of each tile: the kernel's barriers need all of them at each tile).
fn matrix_core_warps(k: usize, chunk: usize) -> usize {
    (k / chunk).clamp(1, MMA_WARPS)
}

/// Super-blocks of a tile's row that each of `MMA_WARPS` warps walks, past which the columns
/// loop's blocks take up to `ONE_WARPS_MAX` warps (half as many blocks an SM, the same warps).
/// A warp's super-blocks are a chain of memory round trips; at 8B shapes the down product (56 a
/// row: 14 a warp at 4 warps, 256 tiles for 528 places) ran 1.3 us faster in the decode step
/// with 8, while the O product (16 a row) got slower behind it (docs/kernels/quant_matvec.md,
/// v14). By k alone, so that a product has the same warps, and bits, alone or in a group.
const LONG_ROW_BLOCKS_A_WARP: usize = 8;

/// Warps of a block of the columns loop (one vector of q4_K): one a block of the row (a
/// super-block), up to `MMA_WARPS`, or `ONE_WARPS_MAX` for long rows.
fn columns_warps(k: usize, format: MmaFormat) -> usize {
    let blocks = k / format.block_elems;
    let most = if blocks > MMA_WARPS * LONG_ROW_BLOCKS_A_WARP { ONE_WARPS_MAX } else { MMA_WARPS };
    blocks.clamp(1, most)
}

/// Shared bytes of a block of the columns loop: x (`k` 16-bit elements, staged once a block)
/// and the totals (`2 x ONE_WARPS_MAX x 16` f32: tiles alternate between two halves).
const fn columns_shared_bytes(k: usize) -> usize {
    2 * k + 2 * ONE_WARPS_MAX * MMA_ROWS * 4
}

/// Grid of a columns-loop launch of `units` tiles in blocks of `warps`: its blocks stride over
/// the tiles, each warp's loads running on across them, so as many blocks as are resident at
/// once (docs/kernels/quant_matvec.md, v10): the register bound's `ONE_BLOCKS_AN_SM` of
/// `MMA_WARPS` warps an SM, or fewer of more warps; at least one, within the grid's limit.
fn columns_blocks(info: &DeviceInfo, warps: usize, units: usize) -> usize {
    let an_sm = ONE_BLOCKS_AN_SM * MMA_WARPS / warps.max(MMA_WARPS);
    units.min(an_sm * info.compute_units.max(1) as usize).clamp(1, info.max_grid[0].max(1) as usize)
}

/// Products over `x` on the matrix cores (`kernels/quant_matvec_mma.hip`) in `format`, their
/// shapes already checked as [`check_quant_matvec_group`] checks them (the weights exactly
/// `rows * k / block_elems` blocks, x `batch * k` and each y `batch * rows` elements, every
/// buffer 16-byte aligned), on an `mma.sync` device with 16-bit activations and `k` a positive
/// multiple of a k step (whole chunks whose rows are whole 16-byte vectors, or q6_K's 2048).
/// [`MmaFormat::MXFP4`] has passes of 8 and 32 only (`batch > 1`). Passes of 32 may split `k`
/// (`quant/k_split.rs`), in `split` or a temporary scratch.
pub(super) fn matrix_core_products<T: Dtype>(
    stream: &Stream,
    format: MmaFormat,
    products: &mut [QuantProduct<'_, T>],
    x: &DeviceBuffer<T>,
    k: usize,
    batch: u32,
    split: Option<&mut SplitScratch>,
) -> Result<()> {
    let chunk = format.chunk;
    debug_assert!(
        k > 0 && k.is_multiple_of(chunk) && (k / format.block_elems * format.block_bytes).is_multiple_of(16)
    );
    let info = stream.backend().info();
    let pass = matrix_core_pass(batch);
    // One vector of q4_K runs the columns loop where its x fits in shared memory, else a pass
    // of 8 (the same contract, one vector used).
    let columns_fit = columns_shared_bytes(k) <= info.shared_mem_per_block_optin as usize;
    let columns = pass == 1 && format.columns_one && columns_fit;
    let pass = if pass == 1 && format.columns_one && !columns { MAX_BATCH } else { pass };
    let wide = pass == WIDE_PASS;
    let (module, prefix, rows_a_block) =
        if wide { (WIDE_MODULE, "rf_qmmm", WIDE_ROWS) } else { (MMA_MODULE, "rf_qmvm", MMA_ROWS) };
    let warps = match wide {
        true => WIDE_WARPS,
        false if columns => columns_warps(k, format),
        false => matrix_core_warps(k, chunk),
    };
    let threads = warps * 32;
    let row_bytes = k / format.block_elems * format.block_bytes;
    ensure(MMA_ROWS * row_bytes < 1 << 32, KERNEL, || {
        format!("k = {k} is too long for the matrix-core kernel")
    })?;
    let shared = match wide {
        true => format.wide_shared_bytes(),
        false if columns => columns_shared_bytes(k),
        false => format.shared_bytes(warps, pass),
    };
    ensure(shared <= info.shared_mem_per_block_optin as usize, KERNEL, || {
        format!(
            "needs {shared} bytes of shared memory, the device allows {}",
            info.shared_mem_per_block_optin
        )
    })?;
    // Each row block's parts along k, the same for every product (1: none; only passes of 32
    // split), and the launch's units of work (a row block, or a row block's part).
    let row_blocks: usize = products.iter().map(|p| p.rows.div_ceil(rows_a_block)).sum();
    let splits = match wide {
        true => {
            let resident = k_split::resident_blocks(info, shared);
            k_split::splits_for(info.compute_units as usize, resident, row_blocks, k / chunk, batch as usize)
        }
        false => 1,
    };
    let units = row_blocks * splits;
    ensure(units < GROUP_LIMIT, KERNEL, || {
        format!("{units} units of work of {rows_a_block} rows; a launch takes fewer than 2^31")
    })?;
    let entry = if splits > 1 {
        format!("{prefix}_{}_b{pass}_split", format.name)
    } else {
        format!("{prefix}_{}_b{pass}", format.name)
    };
    let kernel = loader::kernel(stream, module, &kernel_name::<T>(&entry))?;
    ensure(info.warp_size == 32 && kernel.max_threads_per_block() as usize >= threads, KERNEL, || {
        format!("the matrix-core kernel needs {threads} threads of 32-wide warps")
    })?;
    let blocks = match columns {
        true => columns_blocks(info, warps, units),
        false => units.clamp(1, info.max_grid[0].max(1) as usize),
    };
    let config = LaunchConfig {
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_mem_bytes: shared as u32,
    };
    let mut temporary;
    let split = match splits {
        1 => None,
        _ => {
            let scratch = match split {
                Some(s) => s,
                None => {
                    temporary = SplitScratch::new(stream)?;
                    &mut temporary
                }
            };
            ensure(scratch.holds(units, row_blocks), KERNEL, || {
                format!(
                    "the split scratch ({} bytes) has no room for {units} parts of {row_blocks} row \
                     blocks: it was made for another device",
                    scratch.bytes()
                )
            })?;
            let args = abi::rf_qmmm_split {
                partial: scratch.partial.device_ptr(),
                arrivals: scratch.arrivals.device_ptr(),
                splits: [splits as u32; MAX_PRODUCTS],
                pad: 0,
            };
            Some((args, scratch))
        }
    };
    // SAFETY: rf_qmvm_<fmt>_b<pass>_<T>, or past 8 vectors rf_qmmm_<fmt>_b32_<T> (the same
    // contract) or, where a product splits k, rf_qmmm_<fmt>_b32_split_<T> (the same and the
    // split, below), (rf_qmv_products p, const T* x, u64 k, u32 batch[, rf_qmmm_split split]):
    // for each product i with rows[i] > 0 it copies bytes [0, rows[i] * row_bytes) of w[i] in whole
    // 16-byte vectors (row_bytes a multiple of 16: k is whole k steps; rows past the end, and a
    // q6_K chunk's span past its row's end, are zero-filled without reading), reads x[0, batch *
    // k) likewise (vectors past the batch zero-filled) and writes y[i][0, batch * rows[i]);
    // the caller proved those lengths (check_quant_matvec_group, or mxfp's check_product for
    // each) and k a positive multiple of the format's k step (so of its chunk); the _b1 entry
    // gets batch 1 only (q4_K's, the columns loop, loads the same weight bytes straight into
    // registers, 16 bytes at a time, a row past a product's end reading its last row instead,
    // and x[0, k) once into shared memory, which columns_shared_bytes sizes; its warps are 1 to
    // min(k / 256, RF_QMVM_ONE_WARPS_MAX), as columns_warps gives, and its entries take
    // 32 * RF_QMVM_ONE_WARPS_MAX threads, checked above). Its copy offsets are 32-bit: 16 *
    // row_bytes < 2^32 (checked above), and its tile counter too (tiles and grid below 2^31).
    // The block is `warps` whole warps of 32 lanes, at most RF_QMVM_WARPS (RF_QMMM_WARPS for
    // rf_qmmm, RF_QMVM_ONE_WARPS_MAX for the columns loop), with the dynamic shared memory
    // its formula needs (checked against the device's opt-in limit; the launch opts in). Every
    // w, y and x is 16-byte aligned (checked by the caller). Outputs are distinct `&mut`
    // borrows, the weights and x shared ones; `reads` / `writes` check the stream. Dependent:
    // only the weights' first copies come before its wait for the kernel ahead; x's copies and
    // every write after. The split (rocmforge_quant_matvec_abi.h): every splits[i] is 1 to
    // min(k / chunk, RF_QMMM_MAX_SPLITS), and a split launch is one pass, batch <= 32
    // (splits_for); the units of all products are below 2^31 (checked above); its parts write
    // partial[0, units * 32 * 64) and count on arrivals[0, row_blocks), which the scratch
    // holds (checked above): a `&mut` borrow or a temporary, of this stream (`writes` checks),
    // its counters zero (allocated zeroed; a split launch leaves them zero, and two launches on
    // a stream never write them at once: a dependent one writes only after the kernel ahead
    // has completed).
    unsafe { launch_products(stream, &kernel, config, products, x, k, batch, true, split) }
}

/// Products one [`quant_matvec_group`] launch takes at most.
pub const MAX_PRODUCTS: usize = abi::RF_QMV_MAX_PRODUCTS as usize;

/// One product's shape for [`check_quant_matvec_group`]: its rows and its weight's bytes and
/// output's elements.
#[derive(Debug, Clone, Copy)]
pub struct ProductShape {
    pub rows: usize,
    pub w_len: usize,
    pub y_len: usize,
}

/// [`check_quant_matvec`] for each product of a [`quant_matvec_group`] (errors name the
/// product), and 1 to [`MAX_PRODUCTS`] products.
pub fn check_quant_matvec_group(
    format: GgmlFormat,
    k: usize,
    batch: usize,
    x_len: usize,
    products: &[ProductShape],
) -> Result<()> {
    ensure((1..=MAX_PRODUCTS).contains(&products.len()), KERNEL, || {
        format!("{} products in one launch; it takes 1 to {MAX_PRODUCTS}", products.len())
    })?;
    for (i, p) in products.iter().enumerate() {
        check_quant_matvec(format, p.rows, k, batch, p.w_len, x_len, p.y_len).map_err(|e| match e {
            KernelError::Shape { kernel, message } if products.len() > 1 => {
                KernelError::Shape { kernel, message: format!("product {i}: {message}") }
            }
            e => e,
        })?;
    }
    Ok(())
}

/// Threads of a block for a row of `units` units and warps of `warp` lanes: `THREADS` (128),
/// fewer when a row has fewer units (so that no warp is idle), whole warps, at most `limit`.
/// (Fewer threads taking several units each, so that a row group's fixed cost is shared, was
/// measured and not taken: docs/kernels/quant_matvec.md, v2.)
fn block_threads(units: usize, warp: usize, limit: usize) -> usize {
    let wanted = units.div_ceil(warp).max(1) * warp;
    wanted.min(THREADS).min(limit / warp * warp)
}

/// One block per row group (`groups` of `ROWS` rows, all products'), up to
/// `BLOCKS_PER_COMPUTE_UNIT` a compute unit (the kernel strides over the rest).
fn launch_config(
    stream: &Stream,
    kernel: &rocm_runtime::Function,
    groups: usize,
    k: usize,
) -> Result<LaunchConfig> {
    let info = stream.backend().info();
    let warp = info.warp_size as usize;
    // The kernel's reduction needs every warp to hold up to 32 values (4 rows x 8 vectors) and
    // its units to advance by a multiple of 8: warps of 32 or 64 lanes.
    ensure(warp == 32 || warp == 64, KERNEL, || format!("unsupported warp size {warp}"))?;
    let threads = block_threads(k / UNIT, warp, kernel.max_threads_per_block() as usize);
    ensure(threads > 0, KERNEL, || {
        format!("the kernel allows {} threads a block, less than a warp", kernel.max_threads_per_block())
    })?;
    let cap = info.compute_units.max(1).saturating_mul(BLOCKS_PER_COMPUTE_UNIT).min(info.max_grid[0].max(1));
    let blocks = groups.clamp(1, cap as usize);
    Ok(LaunchConfig { grid: [blocks as u32, 1, 1], block: [threads as u32, 1, 1], shared_mem_bytes: 0 })
}

/// The CPU reference of one product: each output's value and the size of its sum's terms.
#[derive(Debug, Clone)]
pub struct QuantMatvecReference {
    /// `y[b][r]` in f64, `[batch, rows]`: the codec's weights (exact in f32) times the
    /// activations as given, summed in f64.
    pub y: Vec<f64>,
    /// For each output, the sum of the magnitudes of what the kernel adds up: `sum_c |w_c x_c|`
    /// for q8_0, q4_0 and q6_K (the kernel multiplies exact weights), and
    /// `sum_c (|step q_c| + |min|) |x_c|` for q4_K and q5_K (it sums `step * q` and `min`
    /// separately; see `kernels/quant_matvec.hip`).
    pub magnitude: Vec<f64>,
    k: usize,
}

impl QuantMatvecReference {
    /// The largest error output `i` of the kernel may have when stored as `T` (`dtype`: `T::NAME`).
    ///
    /// Derivation. Every term the kernel adds is exact before its first rounding (codes and
    /// scales are small integers and f16 values, activations widen exactly), and passes through
    /// at most `d` f32 roundings: 16 in its run's FMA chain, 2 scaling the run, one for each unit
    /// its thread adds (at most `k / 32`), at most 6 in the warp reduction and 3 across warps:
    /// `d <= k / 32 + 27 <= k` for `k >= 32`. Whatever the order, such a sum errs by at most
    /// `gamma_d sum |terms| <= 2 d u M` (`u = 2^-24`, `d u < 1/2`; `M` = [`Self::magnitude`]),
    /// so by `k 2^-23 M`. q4_K and q5_K add one more `u M`: the reference multiplies the codec's
    /// weights, `step q - min` rounded once, while the kernel's parts are exact: in all,
    /// `(k + 1) 2^-23 M` bounds the f32 sum `s`. Storing `s` as `T` adds half an ulp: relative
    /// `u_T` (2^-24 f32, 2^-11 f16, 2^-8 bf16) of `|s| <= |y| + (k + 1) 2^-23 M`, plus half of
    /// f16's subnormal spacing (2^-25, taken as 2^-24) near zero.
    pub fn allowed_error(&self, i: usize, dtype: &str) -> f64 {
        let (out_rel, abs) = Self::store_rounding(dtype);
        let sum = (self.k as f64 + 1.0) * 2f64.powi(-23) * self.magnitude[i];
        sum * (1.0 + out_rel) + out_rel * self.y[i].abs() + abs
    }

    /// What storing an f32 value as `dtype` (`T::NAME`) may add: half an ulp relative (2^-24
    /// f32, 2^-11 f16, 2^-8 bf16), and half of f16's subnormal spacing (taken as 2^-24) absolute.
    pub fn store_rounding(dtype: &str) -> (f64, f64) {
        match dtype {
            "f32" => (2f64.powi(-24), 0.0),
            "f16" => (2f64.powi(-11), 2f64.powi(-24)),
            _ => (2f64.powi(-8), 0.0),
        }
    }
}

/// CPU reference of [`quant_matvec`]: see [`QuantMatvecReference`]. `x` is `[batch, k]` as the
/// kernel reads it (the storage type's values, widened).
pub fn quant_matvec_reference(
    format: GgmlFormat,
    w: &[u8],
    x: &[f32],
    rows: usize,
    k: usize,
    batch: usize,
) -> Result<QuantMatvecReference> {
    check_quant_matvec(format, rows, k, batch, w.len(), x.len(), batch.saturating_mul(rows))?;
    let codec_error = |e: super::QuantError| KernelError::Shape { kernel: KERNEL, message: e.to_string() };
    let mut weights = vec![0.0f32; rows * k];
    format.block_format().dequantize(w, &mut weights).map_err(codec_error)?;
    // What each weight's term adds to the magnitude, per unit of |x|.
    let parts = if format.is_affine() {
        let mut parts = vec![0.0f32; rows * k];
        kquant::affine_part_magnitudes(w, format == GgmlFormat::Q5K, &mut parts).map_err(codec_error)?;
        parts
    } else {
        weights.iter().map(|v| v.abs()).collect()
    };
    let mut y = vec![0.0f64; batch * rows];
    let mut magnitude = vec![0.0f64; batch * rows];
    if k > 0 {
        for (b, xb) in x.chunks_exact(k).enumerate() {
            for r in 0..rows {
                let (wr, pr) = (&weights[r * k..(r + 1) * k], &parts[r * k..(r + 1) * k]);
                let mut sum = 0.0f64;
                let mut size = 0.0f64;
                for ((&wc, &pc), &xc) in wr.iter().zip(pr).zip(xb) {
                    sum += f64::from(wc) * f64::from(xc);
                    size += f64::from(pc) * f64::from(xc).abs();
                }
                y[b * rows + r] = sum;
                magnitude[b * rows + r] = size;
            }
        }
    }
    Ok(QuantMatvecReference { y, magnitude, k })
}

/// The entries this module launches ([`crate::launchable`]): every format, pass and dtype of the
/// portable kernel, and the matrix-core kernel's for the dtypes [`matrix_core_chunk`] takes.
pub(crate) fn launchable() -> Vec<Launchable> {
    let mut out: Vec<Launchable> = GgmlFormat::ALL
        .iter()
        .flat_map(|f| {
            PASSES.iter().flat_map(move |p| every_dtype(MODULE, &format!("rf_qmv_{}_b{p}", f.name())))
        })
        .collect();
    for format in GgmlFormat::ALL {
        let step = format.matrix_core_k_step();
        for dtype in
            DTYPES.iter().filter(|dt| matrix_core_chunk(MatrixCores::MmaSync, format, dt, step).is_some())
        {
            for pass in [1, MAX_BATCH] {
                let name = format!("rf_qmvm_{}_b{pass}_{dtype}", format.name());
                out.push(Launchable::new(MMA_MODULE, name, Needs::MmaSync));
            }
            if format == GgmlFormat::Q4K {
                // quant_matvec_glu
                out.push(Launchable::new(MMA_MODULE, format!("rf_qmvm_q4_k_b1_glu_{dtype}"), Needs::MmaSync));
            }
        }
    }
    for dtype in ["f16", "bf16"] {
        let name = format!("rf_qmvm_{}_b{MAX_BATCH}_{dtype}", MmaFormat::MXFP4.name);
        out.push(Launchable::new(MMA_MODULE, name, Needs::MmaSync));
        for format in GgmlFormat::ALL.map(|f| f.name()).into_iter().chain([MmaFormat::MXFP4.name]) {
            for entry in ["", "_split"] {
                let name = format!("rf_qmmm_{format}_b{WIDE_PASS}{entry}_{dtype}");
                out.push(Launchable::new(WIDE_MODULE, name, Needs::MmaSync));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocm_runtime::f16;

    fn message(r: Result<()>) -> String {
        crate::error::shape_message(r, "quant_matvec")
    }

    #[test]
    fn shapes_are_checked_without_a_device() {
        let f = GgmlFormat::Q4K;
        check_quant_matvec(f, 3, 512, 2, 3 * 2 * 144, 1024, 6).unwrap();
        check_quant_matvec(GgmlFormat::Q8_0, 7, 96, 1, 7 * 3 * 34, 96, 7).unwrap();
        check_quant_matvec(f, 5, 0, 1, 0, 0, 5).unwrap();
        check_quant_matvec(f, 0, 256, 4, 0, 1024, 0).unwrap();
        assert!(message(check_quant_matvec(f, 1, 288, 1, 162, 288, 1)).contains("not a multiple of 256"));
        assert!(message(check_quant_matvec(GgmlFormat::Q4_0, 1, 48, 1, 0, 48, 1)).contains("multiple of 32"));
        assert!(
            message(check_quant_matvec(f, 3, 512, 2, 3 * 2 * 144 - 1, 1024, 6)).contains("w holds 863 bytes")
        );
        assert!(
            message(check_quant_matvec(f, 3, 512, 2, 3 * 2 * 144, 512, 6)).contains("x has 512 elements")
        );
        assert!(message(check_quant_matvec(f, 3, 512, 2, 3 * 2 * 144, 1024, 3)).contains("y has 3 elements"));
        assert!(message(check_quant_matvec(f, usize::MAX, 256, 1, 0, 256, 0)).contains("overflows"));
        let k = 1 << 28;
        let w = k / 256 * 144;
        assert!(message(check_quant_matvec(f, 1, k, 1, w, k, 1)).contains("too long"));
    }

    #[test]
    fn groups_are_checked_product_by_product() {
        let f = GgmlFormat::Q8_0;
        let shape = |rows: usize, w_len, y_len| ProductShape { rows, w_len, y_len };
        // Q, K and V of a small layer: 64 wide, 64 + 16 + 16 rows, 2 vectors.
        let qkv = [shape(64, 64 * 2 * 34, 128), shape(16, 16 * 2 * 34, 32), shape(16, 16 * 2 * 34, 32)];
        check_quant_matvec_group(f, 64, 2, 128, &qkv).unwrap();
        check_quant_matvec_group(f, 64, 2, 128, &[qkv[0], shape(0, 0, 0)]).unwrap();
        let bad_v = [qkv[0], qkv[1], shape(16, 16 * 2 * 34, 31)];
        assert!(
            message(check_quant_matvec_group(f, 64, 2, 128, &bad_v))
                .starts_with("product 2: y has 31 elements")
        );
        assert!(message(check_quant_matvec_group(f, 64, 2, 127, &qkv)).starts_with("product 0: x has 127"));
        // One product: the plain message.
        assert!(message(check_quant_matvec_group(f, 64, 2, 128, &bad_v[2..])).starts_with("y has 31"));
        assert!(message(check_quant_matvec_group(f, 64, 2, 128, &[])).contains("0 products"));
        let four = [qkv[0], qkv[1], qkv[2], qkv[1]];
        assert!(message(check_quant_matvec_group(f, 64, 2, 128, &four)).contains("4 products in one launch"));
        assert_eq!(MAX_PRODUCTS, 3);
    }

    #[test]
    fn block_formats_map_back_to_the_products_formats() {
        for g in GgmlFormat::ALL {
            assert_eq!(GgmlFormat::of(g.block_format()), Some(g));
        }
        assert_eq!(GgmlFormat::of(BlockFormat::Mxfp4Gguf), None);
    }

    #[test]
    fn one_pass_up_to_eight_vectors() {
        let passes: Vec<usize> = (1..=10).map(pass_for).collect();
        assert_eq!(passes, [1, 2, 4, 4, 8, 8, 8, 8, 8, 8]);
        assert_eq!(pass_for(32), 8);
        assert_eq!(entry_name::<f16>(GgmlFormat::Q6K, 4), "rf_qmv_q6_k_b4_f16");
        // The kernel reduces 4 rows x 8 vectors per warp: at most 32 values, a power of two.
        assert_eq!(ROWS * MAX_BATCH, 32);
        assert_eq!(UNIT, 32);
    }

    #[test]
    fn blocks_take_whole_warps_and_no_idle_ones() {
        // k = 4096: 128 units a row, one for each of 128 threads (4 warps of 32, 2 of 64).
        assert_eq!(block_threads(128, 32, 1024), 128);
        assert_eq!(block_threads(128, 64, 1024), 128);
        // Longer rows: still 128 threads, each taking several units.
        assert_eq!(block_threads(448, 32, 1024), 128);
        // Short rows: fewer warps, never less than one.
        assert_eq!(block_threads(8, 32, 1024), 32);
        assert_eq!(block_threads(8, 64, 1024), 64);
        assert_eq!(block_threads(40, 32, 1024), 64);
        assert_eq!(block_threads(0, 32, 1024), 32);
        // A kernel limited to fewer threads gets whole warps below its limit.
        assert_eq!(block_threads(448, 32, 96), 96);
        assert_eq!(block_threads(448, 64, 100), 64);
    }

    #[test]
    fn matrix_cores_take_every_ggml_format_with_16_bit_activations_and_whole_k_steps() {
        let on = |cores, f, dt, k| matrix_core_chunk(cores, f, dt, k);
        let mma = MatrixCores::MmaSync;
        assert_eq!(on(mma, GgmlFormat::Q4K, "bf16", 4096), Some(512));
        assert_eq!(on(mma, GgmlFormat::Q4K, "f16", 14_336), Some(512));
        assert_eq!(on(mma, GgmlFormat::Q8_0, "f16", 256), Some(256));
        // Not whole chunks, no k, f32 activations, other formats, other devices: portable.
        assert_eq!(on(mma, GgmlFormat::Q4K, "f16", 256), None);
        assert_eq!(on(mma, GgmlFormat::Q8_0, "bf16", 288), None);
        assert_eq!(on(mma, GgmlFormat::Q8_0, "bf16", 0), None);
        assert_eq!(on(mma, GgmlFormat::Q4K, "f32", 4096), None);
        assert_eq!(on(mma, GgmlFormat::Q5K, "bf16", 4096), Some(512));
        assert_eq!(on(mma, GgmlFormat::Q4_0, "bf16", 4096), Some(256));
        assert_eq!(on(mma, GgmlFormat::Q4_0, "f16", 4000), None);
        // q6_K: rows of whole 16-byte vectors, 2048 elements (1680 bytes) at a time.
        assert_eq!(on(mma, GgmlFormat::Q6K, "f16", 4096), Some(512));
        assert_eq!(on(mma, GgmlFormat::Q6K, "bf16", 14_336), Some(512));
        assert_eq!(on(mma, GgmlFormat::Q6K, "f16", 3584), None);
        assert_eq!(on(mma, GgmlFormat::Q6K, "f16", 1024), None);
        assert_eq!(on(MatrixCores::None, GgmlFormat::Q4K, "f16", 4096), None);
        assert_eq!(on(MatrixCores::Mfma, GgmlFormat::Q8_0, "bf16", 4096), None);
        // A k step's row bytes are whole 16-byte vectors (the kernel's copies), and whole chunks.
        for f in GgmlFormat::ALL {
            let (chunk, step) = (f.matrix_core_chunk(), f.matrix_core_k_step());
            assert_eq!(step / f.block_elems() * f.block_bytes() % 16, 0, "{f:?}");
            assert_eq!(step % chunk, 0, "{f:?}");
        }
        // Spans: the chunk's bytes where they are whole vectors; q6_K's 420 at offsets 0, 4, 8
        // or 12 of the vector below them: 432 (the kernel's F::SPAN).
        assert_eq!(MmaFormat::ggml(GgmlFormat::Q4K).span(), 288);
        assert_eq!(MmaFormat::ggml(GgmlFormat::Q8_0).span(), 272);
        assert_eq!(MmaFormat::ggml(GgmlFormat::Q6K).span(), 432);
        assert_eq!(MmaFormat::MXFP4.span(), 272);
        assert!((0..16).all(|c| c * 420 % 16 + 420 <= 432));
    }

    #[test]
    fn matrix_core_blocks_fit_their_shared_memory() {
        assert_eq!(matrix_core_pass(1), 1);
        assert_eq!(matrix_core_pass(2), 8);
        assert_eq!(matrix_core_pass(8), 8);
        assert_eq!(matrix_core_pass(9), 32);
        assert_eq!(matrix_core_pass(33), 32);
        assert_eq!(matrix_core_warps(512, 512), 1);
        assert_eq!(matrix_core_warps(1536, 512), 3);
        assert_eq!(matrix_core_warps(14_336, 512), 4);
        // q4_K, one vector: the columns loop, a warp a super-block up to 4, up to 8 past 32
        // super-blocks a row; x and two halves of totals for 8 warps.
        let (q4k, q8_0) = (MmaFormat::ggml(GgmlFormat::Q4K), MmaFormat::ggml(GgmlFormat::Q8_0));
        assert_eq!(columns_shared_bytes(4096), 8192 + 2 * 8 * 16 * 4);
        assert_eq!((columns_warps(256, q4k), columns_warps(768, q4k), columns_warps(4096, q4k)), (1, 3, 4));
        assert_eq!(
            (columns_warps(8192, q4k), columns_warps(8448, q4k), columns_warps(14_336, q4k)),
            (4, 8, 8)
        );
        // q8_0, one vector: 4 warps x 3 stages x (16 x 272 + 512) + 4 x 16 x 4.
        assert_eq!(q8_0.shared_bytes(4, 1), 12 * (16 * 272 + 512) + 256);
        // MXFP4: 16 blocks of 17 bytes a row's chunk, q4_K's two stages.
        assert_eq!(MmaFormat::MXFP4.shared_bytes(4, 1), 8 * (16 * 272 + 1024) + 256);
        // q8_0, 8 vectors: 4 warps x 2 stages, x of 8 x (512 + 64) bytes a stage.
        assert_eq!(q8_0.shared_bytes(4, 8), 8 * (16 * 272 + 8 * 576) + 4 * 16 * 8 * 4);
        // Three blocks an SM within an H100's 227 KiB at one vector, two at 8 (q5_K's larger
        // rows: one).
        for (f, at_8) in GgmlFormat::ALL
            .map(|g| (MmaFormat::ggml(g), if matches!(g, GgmlFormat::Q5K | GgmlFormat::Q6K) { 1 } else { 2 }))
            .into_iter()
            .chain([(MmaFormat::MXFP4, 2)])
        {
            assert!(3 * f.shared_bytes(4, 1) <= 227 * 1024, "{f:?}");
            assert!(at_8 * f.shared_bytes(4, 8) <= 227 * 1024, "{f:?}");
            // Passes of 32: at least one block an SM (q8_0 three, q4_K two, q6_K one).
            assert!(f.wide_shared_bytes() <= 227 * 1024, "{f:?}");
        }
        // q8_0, 32 vectors: 2 stages x (64 x 272 + 32 x (512 + 64)).
        assert_eq!(q8_0.wide_shared_bytes(), 2 * (64 * 272 + 32 * 576));
    }

    #[test]
    fn the_reference_multiplies_codec_weights() {
        // One q8_0 block, d = 0.5, codes 1, 2, 3 on elements 0..3; two vectors.
        let mut w = [0u8; 34];
        w[..2].copy_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
        w[2..5].copy_from_slice(&[1, 2, 0xfd]); // 0xfd = -3
        let mut x = vec![0.0f32; 64];
        x[..3].copy_from_slice(&[1.0, 2.0, 4.0]);
        x[32..35].copy_from_slice(&[-1.0, 0.0, 1.0]);
        let r = quant_matvec_reference(GgmlFormat::Q8_0, &w, &x, 1, 32, 2).unwrap();
        assert_eq!(r.y, [0.5 + 2.0 - 6.0, -0.5 - 1.5]);
        assert_eq!(r.magnitude, [0.5 + 2.0 + 6.0, 0.5 + 1.5]);
        // (k + 1) 2^-23 M, then f32's half ulp of |y|.
        let f32_bound = 33.0 * 2f64.powi(-23) * 8.5 * (1.0 + 2f64.powi(-24)) + 2f64.powi(-24) * 3.5;
        assert_eq!(r.allowed_error(0, "f32"), f32_bound);
    }

    #[test]
    fn affine_magnitudes_count_both_parts() {
        // A q4_K super-block: d = 1, dmin = 2, sub-block 0 with scale 3 and min 5, code 4 on
        // element 0: the value is 3 * 4 - 2 * 5 = 2, but the kernel sums 12 and 10.
        let mut w = [0u8; 144];
        w[..2].copy_from_slice(&f16::from_f32(1.0).to_bits().to_le_bytes());
        w[2..4].copy_from_slice(&f16::from_f32(2.0).to_bits().to_le_bytes());
        w[4] = 3; // scale of sub-block 0
        w[8] = 5; // min of sub-block 0
        w[16] = 4; // element 0: low nibble of qs[0]
        let mut x = vec![0.0f32; 256];
        x[0] = 1.0;
        x[1] = -1.0; // element 1: code 0, value -10
        let r = quant_matvec_reference(GgmlFormat::Q4K, &w, &x, 1, 256, 1).unwrap();
        assert_eq!(r.y, [2.0 + 10.0]);
        assert_eq!(r.magnitude, [(12.0 + 10.0) + (0.0 + 10.0)]);
    }
}
