//! `mxfp` (`kernels/mxfp.hip`): products with MX-quantised weights, dequantised in registers.
//!
//! The weight `W` is row-major `[n, k]`: row `r` is `k / 32` consecutive blocks of an
//! [`MxFormat`] along `k` (`k` a multiple of 32), so the buffer holds `n * k / 32` blocks. This
//! is how GGUF stores a linear layer's `[out_features, in_features]` weight.
//!
//! - [`mx_matvec`]: `y[r] = sum_c W[r, c] x[c]` (decode: one token); [`mx_matvec_group`]:
//!   several such products over the same vectors in one launch, one token or a few (batched
//!   decode).
//! - [`mx_matmul`]: `Y[i, r] = sum_c X[i, c] W[r, c]`, `X` `[m, k]` and `Y` `[m, n]` row-major
//!   (prefill: `Y = X W^T`).
//!
//! Activations and outputs are f32, f16 or bf16 (`T`); products and sums are f32, rounded to `T`
//! once. [`mx_matmul_reference`] is the CPU reference (f64 sums of the codec's exact weights).
//!
//! For decoding with MXFP4 weights that stay on the device, re-lay them out once with
//! [`super::TiledMxfp4`] and multiply with [`super::mx_matvec_tiled`]: the same numbers in less
//! time (`docs/kernels/mxfp.md`).

use rocm_runtime::{DeviceBuffer, LaunchConfig, MatrixCores, Stream};

use super::QK;
use super::dequant::BlockFormat;
use super::k_split::SplitScratch;
use super::matvec::{
    MAX_PRODUCTS, MmaFormat, QuantProduct, batch_arg, launch_products, matrix_core_products,
};
use super::mx::{Fp6, MxElem};
use crate::KernelModule;
use crate::abi::mxfp as abi;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{DTYPES, Launchable, Needs, every_dtype};
use crate::loader;

const KERNEL: &str = "mxfp";
const MODULE: KernelModule = KernelModule::Mxfp;

/// Rows of `W` a warp of the matrix-vector kernel owns.
const ROWS_PER_WARP: usize = abi::RF_MX_ROWS as usize;
/// Threads of a matrix-vector block (whole warps).
const MATVEC_THREADS: usize = 256;
/// Shared memory of the matrix-vector kernel: the element table, a chunk of x as f32 (groups
/// of 32 padded to 36), and per warp `ROWS_PER_WARP` weight stages of `warp * block + 16` bytes.
const LUT_BYTES: usize = abi::RF_MX_LUT_BYTES as usize;
const XGROUP_FLOATS: usize = abi::RF_MX_XGROUP as usize;
/// The matrix-core matrix-vector kernel (`rf_<fmt>_matvec_mma_<dt>`): rows a block owns, its
/// warps, weight blocks a warp stages per row and step and stages in flight.
const MMA_ROWS: usize = abi::RF_MXM_ROWS as usize;
const MMA_WARPS: usize = abi::RF_MXM_WARPS as usize;
const MMA_CHUNK_BLOCKS: usize = abi::RF_MXM_CHUNK as usize;
const MMA_STAGES: usize = abi::RF_MXM_STAGES as usize;
/// Threads and output tile of the matrix-matrix kernel.
const MATMUL_THREADS: u32 = abi::RF_MX_MM_THREADS;
const TILE: usize = abi::RF_MX_TILE as usize;

/// The weight formats the products read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MxFormat {
    /// MXFP4 in ggml's `block_mxfp4` layout (GGUF type 39), 17 bytes a block.
    Mxfp4Gguf,
    /// Packed MXFP6, 25 bytes a block.
    Mxfp6(Fp6),
}

impl MxFormat {
    /// Every format.
    pub const ALL: [MxFormat; 3] =
        [MxFormat::Mxfp4Gguf, MxFormat::Mxfp6(Fp6::E2M3), MxFormat::Mxfp6(Fp6::E3M2)];

    /// The block format (layout, size, CPU codec).
    pub const fn block_format(self) -> BlockFormat {
        match self {
            MxFormat::Mxfp4Gguf => BlockFormat::Mxfp4Gguf,
            MxFormat::Mxfp6(kind) => BlockFormat::Mxfp6(kind),
        }
    }

    /// The element type.
    pub const fn elem(self) -> MxElem {
        match self {
            MxFormat::Mxfp4Gguf => MxElem::E2M1,
            MxFormat::Mxfp6(kind) => kind.elem(),
        }
    }

    pub const fn block_bytes(self) -> usize {
        self.block_format().block_bytes()
    }
}

impl From<MxFormat> for BlockFormat {
    fn from(f: MxFormat) -> Self {
        f.block_format()
    }
}

fn overflow(m: usize, n: usize, k: usize) -> KernelError {
    KernelError::Shape { kernel: KERNEL, message: format!("[{m}, {k}] x [{n}, {k}]^T overflows usize") }
}

/// Checks a product's shape and buffer lengths without a device: `k` a multiple of 32, the
/// weight exactly `n * k / 32` blocks, `x` exactly `m * k` and `y` exactly `m * n` elements
/// (`m = 1` for the matrix-vector product).
pub fn check_product(
    format: MxFormat,
    m: usize,
    n: usize,
    k: usize,
    w_len: usize,
    x_len: usize,
    y_len: usize,
) -> Result<()> {
    ensure(k.is_multiple_of(QK), KERNEL, || format!("k = {k} is not a multiple of {QK}"))?;
    let w_need = n.checked_mul(k / QK).and_then(|b| b.checked_mul(format.block_bytes()));
    let x_need = m.checked_mul(k);
    let y_need = m.checked_mul(n);
    let (Some(w_need), Some(x_need), Some(y_need)) = (w_need, x_need, y_need) else {
        return Err(overflow(m, n, k));
    };
    ensure(w_len == w_need, KERNEL, || {
        format!("w holds {w_len} bytes; {n} rows of {} {format:?} blocks need {w_need}", k / QK)
    })?;
    ensure(x_len == x_need, KERNEL, || format!("x has {x_len} elements, expected {m} x {k} = {x_need}"))?;
    ensure(y_len == y_need, KERNEL, || format!("y has {y_len} elements, expected {m} x {n} = {y_need}"))?;
    Ok(())
}

fn check_aligned<T: Dtype>(x: &DeviceBuffer<T>, y: &DeviceBuffer<T>) -> Result<()> {
    // Device allocations are at least 256-byte aligned; the kernels' 16-byte accesses rely on it.
    ensure(x.device_ptr().is_multiple_of(16) && y.device_ptr().is_multiple_of(16), KERNEL, || {
        "x and y must be 16-byte aligned".into()
    })
}

/// `y = W x`: `w` holds the `[n, k]` weight (`n * k / 32` blocks of `format`), `x` `k` and `y`
/// `n` elements; queued on `y`'s stream (`w` and `x` must belong to it). `k = 0` gives zeros.
pub fn mx_matvec<T: Dtype>(
    format: MxFormat,
    w: &DeviceBuffer<u8>,
    x: &DeviceBuffer<T>,
    y: &mut DeviceBuffer<T>,
    n: usize,
    k: usize,
) -> Result<()> {
    check_product(format, 1, n, k, w.len(), x.len(), y.len())?;
    if n == 0 {
        return Ok(());
    }
    check_aligned(x, y)?;
    let stream = y.stream().clone();
    let cores = stream.backend().info().matrix_cores;
    let (kernel, config) = if matvec_on_matrix_cores(cores, format, T::NAME, k, w.device_ptr()) {
        check_mma_tiles(n.div_ceil(MMA_ROWS))?;
        let any_k = !k.is_multiple_of(QK * MMA_CHUNK_BLOCKS);
        let variant = if any_k { "matvec_mma_anyk" } else { "matvec_mma" };
        let name = kernel_name::<T>(&format!("rf_{}_{variant}", format.block_format().name()));
        let kernel = loader::kernel(&stream, MODULE, &name)?;
        let config = matvec_mma_config(&stream, &kernel, format, n, k)?;
        (kernel, config)
    } else {
        let name = kernel_name::<T>(&format!("rf_{}_matvec", format.block_format().name()));
        let kernel = loader::kernel(&stream, MODULE, &name)?;
        let config = matvec_config(&stream, &kernel, format, n)?;
        (kernel, config)
    };
    // SAFETY: both kernels are (const u8* w, const T* x, T* y, u64 n, u64 k); each reads bytes
    // [0, n * k / 32 * block_bytes) of w and x[0, k) and writes y[0, n), lengths check_product
    // proved. x is 16-byte aligned (check_aligned) for their 16-byte loads and copies.
    // - rf_<fmt>_matvec_<T> (portable): its dynamic shared memory is sized by matvec_config
    //   with the kernel's formula for the block and warp size it launches with.
    // - rf_<fmt>_matvec_mma[_anyk]_<T>: taken only where matvec_on_matrix_cores proved a 16-byte
    //   aligned w. With k % 512 == 0 it copies whole 16-byte chunks of rows; the _anyk entry
    //   copies the 16-byte vectors covering each row's chunk, from the vector holding its first
    //   byte (inside w, which starts aligned), cutting the last one short at w's end; rows past
    //   n are zero-filled without reading. matvec_mma_config gives it 1..=4 warps of 32 lanes, the
    //   shared memory its formula needs (checked against the device's limit) and checks
    //   16 row_bytes < 2^32, which keeps its 32-bit copy offsets exact.
    // w and x are shared borrows distinct from y; the builder checks the stream. Dependent
    // (rocmforge_dependent_launch.h): the portable entry waits for the kernel ahead first; the
    // matrix-core entries issue a block's first weight copies before that wait, and x's copies
    // and every write after it.
    unsafe {
        stream
            .launch(&kernel)
            .dependent()
            .buffer(w)
            .reads_before_wait(w)
            .buffer(x)
            .buffer_mut(y)
            .arg(n as u64)
            .arg(k as u64)
            .launch(config)?;
    }
    Ok(())
}

/// Up to [`MAX_PRODUCTS`] products `y_i = W_i x` over the same `batch` vectors `x` (`[batch,
/// k]`), each weight `[rows_i, k]` in `format` and each `y_i` `[batch, rows_i]`: a layer's Q, K
/// and V, or its gate and up, for `batch` tokens.
///
/// One vector: where [`mx_matvec`] takes the matrix cores and `k % 512 == 0`, one launch runs
/// them all, the 16-row tiles of every product numbered one after another: a 1024-row
/// projection alone (K, V at 8B shapes: 64 blocks) leaves most of an H100's 132 SMs idle, and
/// each launch is a boundary in the step. Elsewhere each runs its own [`mx_matvec`]. Either way
/// every output has exactly the bits [`mx_matvec`] of its product alone gives (the same tile
/// computation).
///
/// Several vectors: MXFP4 with f16 or bf16 activations, `k % 512 == 0`, on `mma.sync` devices
/// runs `kernels/quant_matvec_mma.hip` over the whole list, 8 vectors a pass over the weight
/// (the batch is the matrix cores' n: 8 vectors cost 1.2-1.5 times one, against 8 times;
/// docs/kernels/mxfp.md), and past 8 `kernels/quant_matmul_mma.hip`'s passes of 32, which may
/// split `k` as [`super::quant_matvec_group_in`] says. Everything else runs [`mx_matmul`] a
/// product. Numerics as [`mx_matvec`]'s: exact products, f32 sums, one rounding to `T`.
///
/// Queued on the first output's stream, which every buffer must belong to; shapes are checked
/// as [`mx_matmul`]'s (`m = batch`), product by product. No rows or no vectors: nothing runs.
pub fn mx_matvec_group<T: Dtype>(
    format: MxFormat,
    products: &mut [QuantProduct<'_, T>],
    x: &DeviceBuffer<T>,
    k: usize,
    batch: usize,
) -> Result<()> {
    mx_matvec_group_in(format, products, x, k, batch, None)
}

/// [`mx_matvec_group`] with a [`SplitScratch`] for the products that split `k` (MXFP4 at 9 to 32
/// vectors on the matrix cores; [`super::quant_matvec_group_in`] says more).
pub fn mx_matvec_group_in<T: Dtype>(
    format: MxFormat,
    products: &mut [QuantProduct<'_, T>],
    x: &DeviceBuffer<T>,
    k: usize,
    batch: usize,
    split: Option<&mut SplitScratch>,
) -> Result<()> {
    ensure((1..=MAX_PRODUCTS).contains(&products.len()), KERNEL, || {
        format!("{} products; a group takes 1 to {MAX_PRODUCTS}", products.len())
    })?;
    for p in products.iter() {
        check_product(format, batch, p.rows, k, p.w.len(), x.len(), p.y.len())?;
    }
    let total_rows: usize = products.iter().map(|p| p.rows).sum();
    if total_rows == 0 || batch == 0 {
        return Ok(());
    }
    for p in products.iter() {
        check_aligned(x, p.y)?;
    }
    let stream = products[0].y.stream().clone();
    let cores = stream.backend().info().matrix_cores;
    let fused = k.is_multiple_of(QK * MMA_CHUNK_BLOCKS)
        && products.iter().all(|p| matvec_on_matrix_cores(cores, format, T::NAME, k, p.w.device_ptr()));
    if fused && batch > 1 && format == MxFormat::Mxfp4Gguf {
        // The kernel's contract (matrix_core_products, which also bounds the tiles): check_product
        // proved each weight `rows * k / 32` blocks, x `batch * k` and each y `batch * rows`
        // elements; x, y (check_aligned) and w (matvec_on_matrix_cores) are 16-byte aligned; k is
        // a positive multiple of 512, so a row's chunk is 272 bytes, whole 16-byte vectors.
        return matrix_core_products(&stream, MmaFormat::MXFP4, products, x, k, batch_arg(batch)?, split);
    }
    if !(fused && batch == 1) {
        for p in products.iter_mut().filter(|p| p.rows > 0) {
            if batch == 1 {
                mx_matvec(format, p.w, x, p.y, p.rows, k)?;
            } else {
                mx_matmul(format, p.w, x, p.y, batch, p.rows, k)?;
            }
        }
        return Ok(());
    }
    let tiles: usize = products.iter().map(|p| p.rows.div_ceil(MMA_ROWS)).sum();
    check_mma_tiles(tiles)?;
    let name = kernel_name::<T>(&format!("rf_{}_matvec_mma_group", format.block_format().name()));
    let kernel = loader::kernel(&stream, MODULE, &name)?;
    let config = matvec_mma_config(&stream, &kernel, format, tiles * MMA_ROWS, k)?;
    // SAFETY: rf_<fmt>_matvec_mma_group_<T>(rf_qmv_products p, const T* x, u64 k, u32 batch):
    // for each product i with rows[i] > 0, the tiles of rf_<fmt>_matvec_mma_<T> over w[i] and
    // y[i] (that entry's contract, which mx_matvec's SAFETY states: reads bytes [0, rows[i] * k /
    // 32 * block_bytes) of w[i] and x[0, k), writes y[i][0, rows[i])), lengths check_product
    // proved for each. Its tiles counted across the products are below 2^31 (check_mma_tiles)
    // and its grid too (matvec_mma_config), so the 32-bit tile index cannot wrap; k % 512 == 0
    // and every w, y and x is 16-byte aligned (checked above, matvec_on_matrix_cores); products
    // with no rows hold null pointers it never reads. The outputs are distinct `&mut` borrows,
    // the weights and x shared ones; `reads` / `writes` check each belongs to the stream. batch
    // is 1 (the entry ignores it). Dependent, as mx_matvec's matrix-core entries.
    unsafe { launch_products(&stream, &kernel, config, products, x, k, 1, true, None) }
}

/// The matrix-core entries count 16-row tiles in 32 bits: a launch's `tiles` (all its
/// products') must be fewer than 2^31.
fn check_mma_tiles(tiles: usize) -> Result<()> {
    ensure(tiles < 1 << 31, KERNEL, || {
        format!("{tiles} tiles of {MMA_ROWS} rows; a launch takes fewer than 2^31")
    })
}

/// Whether [`mx_matvec_group`] of `format` at row length `k` runs several vectors on
/// `stream`'s device's matrix cores (MXFP4 with f16 or bf16 activations, `k % 512 == 0`, NVIDIA
/// `mma.sync`: `kernels/quant_matvec_mma.hip` up to 8 vectors a pass, `quant_matmul_mma.hip`'s
/// 32 beyond) rather than [`mx_matmul`] a product; for weights at 16-byte aligned addresses
/// (every allocation is).
pub fn mx_matvec_group_on_matrix_cores<T: Dtype>(stream: &Stream, format: MxFormat, k: usize) -> bool {
    format == MxFormat::Mxfp4Gguf
        && k.is_multiple_of(QK * MMA_CHUNK_BLOCKS)
        && matvec_on_matrix_cores(stream.backend().info().matrix_cores, format, T::NAME, k, 0)
}

/// Whether [`mx_matvec`] runs the matrix-core kernel: NVIDIA mma.sync devices, MXFP4 weights
/// with f16 or bf16 activations or MXFP6 weights with f16 activations (the types the kernel
/// builds those elements' values in exactly), and a 16-byte aligned weight. Rows of whole
/// 16-byte chunks of 16 blocks (`k % 512 == 0`) are copied as they are; any other `k` takes
/// the `_anyk` entry, which copies the 16-byte vectors covering each row's unaligned chunk.
/// Everything else runs the portable kernel.
fn matvec_on_matrix_cores(cores: MatrixCores, format: MxFormat, dtype: &str, k: usize, w_ptr: u64) -> bool {
    let typed = match format {
        MxFormat::Mxfp4Gguf => matches!(dtype, "f16" | "bf16"),
        MxFormat::Mxfp6(_) => dtype == "f16",
    };
    cores == MatrixCores::MmaSync && typed && k > 0 && w_ptr.is_multiple_of(16)
}

/// Warps of a matrix-core matrix-vector block: they split `k`'s chunks of 512 (the last one
/// possibly shorter), up to `MMA_WARPS` (4 measured best at k = 4096 and 14336:
/// docs/kernels/mxfp.md).
fn matvec_mma_warps(k: usize) -> usize {
    k.div_ceil(QK * MMA_CHUNK_BLOCKS).clamp(1, MMA_WARPS)
}

/// Shared bytes of the matrix-core matrix-vector kernel with `warps` warps: per warp
/// `MMA_STAGES` stages of `MMA_ROWS` rows of a chunk and the chunk's x, then the warps' row
/// totals (f32). A stage row is the chunk's bytes (`any_k`: the 16-byte vectors covering them
/// from up to 15 bytes before) rounded up to 4 mod 32 words (`rf_mxm_stage_row`).
fn matvec_mma_shared_bytes(format: MxFormat, warps: usize, any_k: bool) -> usize {
    let row = MMA_CHUNK_BLOCKS * format.block_bytes();
    let need = if any_k { 4 * ((row + 30) / 16) } else { row / 4 };
    let words = need + (4 + 32 - need % 32) % 32;
    let stage = MMA_ROWS * 4 * words + MMA_CHUNK_BLOCKS * QK * 2;
    warps * MMA_STAGES * stage + warps * MMA_ROWS * 4
}

/// Up to 4 warps (`matvec_mma_warps`), one block per 16 rows up to the grid's limit (the kernel
/// strides over the rest).
fn matvec_mma_config(
    stream: &Stream,
    kernel: &rocm_runtime::Function,
    format: MxFormat,
    n: usize,
    k: usize,
) -> Result<LaunchConfig> {
    let info = stream.backend().info();
    let warps = matvec_mma_warps(k);
    let threads = warps * 32;
    ensure(info.warp_size == 32 && kernel.max_threads_per_block() as usize >= threads, KERNEL, || {
        format!("the matrix-core matvec needs {threads} threads of 32-wide warps")
    })?;
    let row_bytes = k / QK * format.block_bytes();
    ensure((MMA_ROWS * row_bytes) < (1 << 32), KERNEL, || {
        format!("k = {k} is too long for the matrix-core matvec")
    })?;
    let shared = matvec_mma_shared_bytes(format, warps, !k.is_multiple_of(QK * MMA_CHUNK_BLOCKS));
    ensure(shared <= info.shared_mem_per_block_optin as usize, KERNEL, || {
        format!(
            "needs {shared} bytes of shared memory, the device allows {}",
            info.shared_mem_per_block_optin
        )
    })?;
    let blocks = n.div_ceil(MMA_ROWS).clamp(1, info.max_grid[0].max(1) as usize);
    Ok(LaunchConfig {
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_mem_bytes: shared as u32,
    })
}

/// Shared bytes of the matrix-vector kernel for a block of `threads` threads of warp size `warp`
/// (`RF_MX_LUT_BYTES + warp * RF_MX_XGROUP * 4 + warps * RF_MX_ROWS * (warp * block + 16)`).
fn matvec_shared_bytes(format: MxFormat, threads: usize, warp: usize) -> usize {
    let stage_row = warp * format.block_bytes() + 16;
    LUT_BYTES + warp * XGROUP_FLOATS * 4 + (threads / warp) * ROWS_PER_WARP * stage_row
}

/// 256 threads (whole warps), `ROWS_PER_WARP` rows a warp, one block per group of rows up to
/// the grid's limit (the kernel strides over the rest).
fn matvec_config(
    stream: &Stream,
    kernel: &rocm_runtime::Function,
    format: MxFormat,
    n: usize,
) -> Result<LaunchConfig> {
    let info = stream.backend().info();
    let warp = info.warp_size.max(1) as usize;
    let threads = MATVEC_THREADS.min(kernel.max_threads_per_block() as usize) / warp * warp;
    ensure(threads > 0 && warp.is_multiple_of(16), KERNEL, || {
        format!("unsupported warp size {warp} or block limit {}", kernel.max_threads_per_block())
    })?;
    let shared = matvec_shared_bytes(format, threads, warp);
    ensure(shared <= info.shared_mem_per_block as usize, KERNEL, || {
        format!("needs {shared} bytes of shared memory, the device allows {}", info.shared_mem_per_block)
    })?;
    let rows_per_block = threads / warp * ROWS_PER_WARP;
    let blocks = n.div_ceil(rows_per_block).clamp(1, info.max_grid[0].max(1) as usize);
    Ok(LaunchConfig {
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_mem_bytes: shared as u32,
    })
}

/// `Y = X W^T`: `x` is `[m, k]`, `w` the `[n, k]` weight, `y` `[m, n]`, all row-major; queued on
/// `y`'s stream (`w` and `x` must belong to it). `k = 0` gives zeros.
pub fn mx_matmul<T: Dtype>(
    format: MxFormat,
    w: &DeviceBuffer<u8>,
    x: &DeviceBuffer<T>,
    y: &mut DeviceBuffer<T>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    check_product(format, m, n, k, w.len(), x.len(), y.len())?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let stream = y.stream().clone();
    let name = kernel_name::<T>(&format!("rf_{}_matmul", format.block_format().name()));
    let kernel = loader::kernel(&stream, MODULE, &name)?;
    ensure(kernel.max_threads_per_block() >= MATMUL_THREADS, KERNEL, || {
        format!(
            "the matmul kernel needs {MATMUL_THREADS} threads a block, the device allows {}",
            kernel.max_threads_per_block()
        )
    })?;
    let info = stream.backend().info();
    let gx = n.div_ceil(TILE).clamp(1, info.max_grid[0].max(1) as usize);
    let gy = m.div_ceil(TILE).clamp(1, info.max_grid[1].clamp(1, 65_535) as usize);
    let config =
        LaunchConfig { grid: [gx as u32, gy as u32, 1], block: [MATMUL_THREADS, 1, 1], shared_mem_bytes: 0 };
    // SAFETY: rf_<fmt>_matmul_<T>(const u8* w, const T* x, T* y, u64 m, u64 n, u64 k), launched
    // with its 256 threads, reads bytes [0, n * k / 32 * block_bytes) of w and x[0, m * k), and
    // writes y[0, m * n) (rows and columns past m and n are masked); check_product proved those
    // lengths. w and x are shared borrows distinct from y; the builder checks the stream.
    unsafe {
        stream
            .launch(&kernel)
            .buffer(w)
            .buffer(x)
            .buffer_mut(y)
            .arg(m as u64)
            .arg(n as u64)
            .arg(k as u64)
            .launch(config)?;
    }
    Ok(())
}

/// CPU reference of [`mx_matmul`] (and, with `m = 1`, of [`mx_matvec`]): the weight decoded
/// by the CPU codec (exact), `x` as given (the storage type's values), sums in f64. Returns
/// `Y` `[m, n]` unrounded.
pub fn mx_matmul_reference(
    format: MxFormat,
    w: &[u8],
    x: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Result<Vec<f64>> {
    check_product(format, m, n, k, w.len(), x.len(), m.saturating_mul(n))?;
    let mut weights = vec![0.0f32; n * k];
    format
        .block_format()
        .dequantize(w, &mut weights)
        .map_err(|e| KernelError::Shape { kernel: KERNEL, message: e.to_string() })?;
    let mut y = vec![0.0f64; m * n];
    if k == 0 {
        return Ok(y);
    }
    for (xi, yi) in x.chunks_exact(k).zip(y.chunks_exact_mut(n)) {
        for (wr, out) in weights.chunks_exact(k).zip(yi.iter_mut()) {
            *out = wr.iter().zip(xi).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
        }
    }
    Ok(y)
}

/// The entries this module launches ([`crate::launchable`]): the portable matrix-vector and
/// matrix-matrix kernels for every format and dtype, and the matrix-core matrix-vector kernels
/// (both `k` forms) where [`matvec_on_matrix_cores`] takes them.
pub(crate) fn launchable() -> Vec<Launchable> {
    let mut out = Vec::new();
    for format in MxFormat::ALL {
        let fmt = format.block_format().name();
        out.extend(every_dtype(MODULE, &format!("rf_{fmt}_matvec")));
        out.extend(every_dtype(MODULE, &format!("rf_{fmt}_matmul")));
        for dtype in
            DTYPES.iter().filter(|dt| matvec_on_matrix_cores(MatrixCores::MmaSync, format, dt, QK, 0))
        {
            for variant in ["matvec_mma", "matvec_mma_anyk", "matvec_mma_group"] {
                out.push(Launchable::new(MODULE, format!("rf_{fmt}_{variant}_{dtype}"), Needs::MmaSync));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: Result<()>) -> String {
        crate::error::shape_message(r, "mxfp")
    }

    #[test]
    fn shapes_are_checked_without_a_device() {
        let f = MxFormat::Mxfp4Gguf;
        check_product(f, 3, 7, 96, 7 * 3 * 17, 3 * 96, 21).unwrap();
        check_product(MxFormat::Mxfp6(Fp6::E3M2), 1, 2, 64, 2 * 2 * 25, 64, 2).unwrap();
        check_product(f, 1, 5, 0, 0, 0, 5).unwrap();
        assert!(
            message(check_product(f, 1, 7, 100, 7 * 17 * 3, 100, 7))
                .contains("k = 100 is not a multiple of 32")
        );
        assert!(message(check_product(f, 1, 7, 96, 7 * 3 * 17 - 1, 96, 7)).contains("w holds 356 bytes"));
        assert!(message(check_product(f, 2, 7, 96, 7 * 3 * 17, 96, 14)).contains("x has 96 elements"));
        assert!(message(check_product(f, 2, 7, 96, 7 * 3 * 17, 192, 7)).contains("y has 7 elements"));
        assert!(message(check_product(f, usize::MAX, 2, 32, 34, 0, 0)).contains("overflows"));
    }

    #[test]
    fn shared_memory_fits_the_common_devices() {
        // 32-wide warps (NVIDIA, RDNA) and 64-wide wavefronts (CDNA), both formats: well under
        // the 48 KiB every device offers without opting in.
        for f in MxFormat::ALL {
            for warp in [32, 64] {
                let bytes = matvec_shared_bytes(f, 256, warp);
                assert!(bytes <= 48 * 1024, "{f:?} warp {warp}: {bytes}");
                assert_eq!(bytes % 16, 0);
            }
        }
        assert_eq!(
            matvec_shared_bytes(MxFormat::Mxfp4Gguf, 256, 32),
            256 + 32 * 144 + 8 * 2 * (32 * 17 + 16)
        );
    }

    #[test]
    fn matrix_cores_take_16_bit_activations_and_whole_chunks() {
        let f = MxFormat::Mxfp4Gguf;
        let on = |cores, format, dtype, k, ptr| matvec_on_matrix_cores(cores, format, dtype, k, ptr);
        assert!(on(MatrixCores::MmaSync, f, "f16", 4096, 256));
        assert!(on(MatrixCores::MmaSync, f, "bf16", 14_336, 0));
        assert!(on(MatrixCores::MmaSync, f, "f16", 512, 16));
        // Any k (the _anyk entry when k % 512 != 0), but not none, and not an unaligned weight.
        assert!(on(MatrixCores::MmaSync, f, "f16", 4128, 256));
        assert!(on(MatrixCores::MmaSync, f, "bf16", 2880, 256));
        assert!(!on(MatrixCores::MmaSync, f, "f16", 0, 256));
        assert!(!on(MatrixCores::MmaSync, f, "f16", 4096, 8));
        // MXFP6 with f16 activations only.
        assert!(on(MatrixCores::MmaSync, MxFormat::Mxfp6(Fp6::E2M3), "f16", 4096, 256));
        assert!(on(MatrixCores::MmaSync, MxFormat::Mxfp6(Fp6::E3M2), "f16", 14_336, 256));
        assert!(!on(MatrixCores::MmaSync, MxFormat::Mxfp6(Fp6::E3M2), "bf16", 4096, 256));
        // f32 activations, no mma.sync: the portable kernel.
        assert!(!on(MatrixCores::MmaSync, f, "f32", 4096, 256));
        assert!(!on(MatrixCores::Mfma, f, "f16", 4096, 256));
        assert!(!on(MatrixCores::None, f, "bf16", 4096, 256));
        // A warp per chunk of 512, up to 4.
        assert_eq!(matvec_mma_warps(512), 1);
        assert_eq!(matvec_mma_warps(1536), 3);
        assert_eq!(matvec_mma_warps(4096), 4);
        assert_eq!(matvec_mma_warps(14_336), 4);
        assert_eq!(matvec_mma_warps(32), 1);
        assert_eq!(matvec_mma_warps(2880), 4);
        // 4 warps x 2 stages x (16 rows x 272 bytes + 1 KB of x) + the totals: 43 KB, five
        // blocks on an H100/H200 SM, and under the 48 KB every device gives without opting in.
        assert_eq!(matvec_mma_shared_bytes(f, 4, false), 4 * 2 * (16 * 272 + 1024) + 4 * 16 * 4);
        assert!(matvec_mma_shared_bytes(f, 4, false) <= 48 * 1024);
        // Any k: 18 vectors a row (from up to 15 bytes before the chunk), 72 words padded to 100;
        // MXFP6 26 vectors, 104 words padded to 132.
        assert_eq!(matvec_mma_shared_bytes(f, 4, true), 4 * 2 * (16 * 400 + 1024) + 4 * 16 * 4);
        let f6 = MxFormat::Mxfp6(Fp6::E2M3);
        assert_eq!(matvec_mma_shared_bytes(f6, 1, true), 2 * (16 * 528 + 1024) + 16 * 4);
        assert_eq!(matvec_mma_shared_bytes(f6, 1, false), 2 * (16 * 400 + 1024) + 16 * 4);
    }

    #[test]
    fn the_reference_multiplies_decoded_weights() {
        // One row, one block: scale 2^0, codes 1..=4 on elements 0..4 (0.5, 1, 1.5, 2).
        let mut w = [0u8; 17];
        w[0] = 127;
        w[1] = 0x01;
        w[2] = 0x02;
        w[3] = 0x03;
        w[4] = 0x04;
        let mut x = [0.0f32; 32];
        x[..4].copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
        x[16] = 100.0; // element 16 is the high nibble of byte 1: code 0
        let y = mx_matmul_reference(MxFormat::Mxfp4Gguf, &w, &x, 1, 1, 32).unwrap();
        assert_eq!(y, [0.5 + 2.0 + 4.5 + 8.0]);
        // Two tokens: Y is [m, n].
        let x2: Vec<f32> =
            x.iter().chain(x.iter().map(|v| v * 2.0).collect::<Vec<_>>().iter()).copied().collect();
        let y = mx_matmul_reference(MxFormat::Mxfp4Gguf, &w, &x2, 2, 1, 32).unwrap();
        assert_eq!(y, [15.0, 30.0]);
    }
}
