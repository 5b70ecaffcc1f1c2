//! Matrix products: the vendor BLAS when the runtime can load it (cuBLAS, rocBLAS), the
//! portable kernel of `kernels/gemm.hip` otherwise, and an f64 CPU reference.
//!
//! ```no_run
//! # use rocm_kernels::gemm::{GemmDesc, gemm};
//! # fn f(x: &rocm_runtime::DeviceBuffer<rocm_runtime::bf16>, w: &rocm_runtime::DeviceBuffer<rocm_runtime::bf16>,
//! #      y: &mut rocm_runtime::DeviceBuffer<rocm_runtime::bf16>) -> rocm_kernels::Result<()> {
//! // y[512, 14336] = x[512, 4096] W^T, W stored [14336, 4096] like an nn.Linear weight.
//! let path = gemm(&GemmDesc::linear(512, 14336, 4096), x, w, y)?;
//! println!("ran on {path:?}");
//! # Ok(()) }
//! ```
//!
//! Every form takes the one [`GemmDesc`] (row-major, leading dimensions, transposes,
//! alpha/beta, strided batches; see its documentation), and the buffers of one stream (`c`'s).
//! [`gemm`] picks the vendor library when [`vendor_blas`] finds one and the portable kernel
//! otherwise; [`gemm_with`] names the path (tests and benchmarks compare the two).

use std::sync::Arc;

use rocm_runtime::{Blas, BlasElement, DeviceBuffer, LaunchConfig, Stream};
pub use rocm_runtime::{GemmDesc, Transpose};

use crate::KernelModule;
use crate::abi::gemm as abi;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader;

const KERNEL: &str = "gemm";
const MODULE: KernelModule = KernelModule::Gemm;
/// Output rows and columns of a tiled block (the kernels' tiles are square).
const TILE: usize = abi::RF_GEMM_BM as usize;
const _: () = assert!(abi::RF_GEMM_BM == abi::RF_GEMM_BN, "the launcher's grid assumes square tiles");
/// Threads of every GEMM block: the tile loaders are written for it.
const THREADS: u32 = abi::RF_GEMM_THREADS;
/// At most this many output rows go to the skinny kernels.
const SKINNY_M: usize = abi::RF_SKINNY_M as usize;
/// Columns of a skinny block when `B` is stored `[K, N]`.
const SKINNY_COLS: usize = abi::RF_SKINNY_COLS as usize;

/// The kernels' one argument (`rf_gemm_params`, generated from
/// `kernels/include/rocmforge_gemm_abi.h`).
type GemmParams = crate::abi::gemm::rf_gemm_params;

/// Storage types both paths take: f32, f16, bf16 (f32 accumulation for all).
pub trait GemmElement: Dtype + BlasElement {}
impl<T: Dtype + BlasElement> GemmElement for T {}

/// Which implementation computes a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GemmPath {
    /// The vendor library when it can be loaded, else the portable kernel.
    #[default]
    Auto,
    /// cuBLAS / rocBLAS; an error when the library is unavailable.
    Vendor,
    /// `kernels/gemm.hip`.
    Portable,
}

/// The vendor BLAS of the stream's device, or the reason there is none (a
/// [`rocm_runtime::Error::Load`] naming the paths tried, or the handle's creation failure).
pub fn vendor_blas(stream: &Stream) -> Result<Arc<Blas>> {
    Ok(Blas::open(stream.backend())?)
}

/// `C = alpha * op(A) op(B) + beta * C` on `c`'s stream, through the vendor BLAS when the
/// runtime can load it and the portable kernel otherwise. Returns the path taken.
pub fn gemm<T: GemmElement>(
    desc: &GemmDesc,
    a: &DeviceBuffer<T>,
    b: &DeviceBuffer<T>,
    c: &mut DeviceBuffer<T>,
) -> Result<GemmPath> {
    gemm_with(GemmPath::Auto, desc, a, b, c)
}

/// [`gemm`] on the named path ([`GemmPath::Auto`] resolved as [`gemm`] does). Returns the
/// path taken: [`GemmPath::Vendor`] or [`GemmPath::Portable`].
pub fn gemm_with<T: GemmElement>(
    path: GemmPath,
    desc: &GemmDesc,
    a: &DeviceBuffer<T>,
    b: &DeviceBuffer<T>,
    c: &mut DeviceBuffer<T>,
) -> Result<GemmPath> {
    let blas = match path {
        GemmPath::Portable => None,
        GemmPath::Vendor => Some(vendor_blas(c.stream())?),
        // The runtime refuses vendor BLAS calls while a graph is recorded: inside a capture,
        // Auto is the portable kernel.
        GemmPath::Auto if c.stream().is_capturing() => None,
        // Unavailable is a property of the machine, not an error: fall back. Failures of an
        // available library are errors (below), never a silent switch of implementation.
        GemmPath::Auto => vendor_blas(c.stream()).ok(),
    };
    match blas {
        Some(blas) => {
            blas.gemm(desc, a, b, c)?;
            Ok(GemmPath::Vendor)
        }
        None => {
            gemm_portable(desc, a, b, c)?;
            Ok(GemmPath::Portable)
        }
    }
}

/// The kernel a product runs on: skinny for at most [`SKINNY_M`] output rows (`B` stored
/// `[N, K]` only with `A` as stored), tiled otherwise.
fn kernel_for(desc: &GemmDesc) -> &'static str {
    use Transpose::{No, Yes};
    if desc.m <= SKINNY_M {
        match (desc.trans_a, desc.trans_b) {
            (_, No) => return "rf_gemm_skinny_n",
            (No, Yes) => return "rf_gemm_skinny_t",
            (Yes, Yes) => {}
        }
    }
    match (desc.trans_a, desc.trans_b) {
        (No, No) => "rf_gemm_tiled_nn",
        (No, Yes) => "rf_gemm_tiled_nt",
        (Yes, No) => "rf_gemm_tiled_tn",
        (Yes, Yes) => "rf_gemm_tiled_tt",
    }
}

/// The portable kernel (`kernels/gemm.hip`) on `c`'s stream.
pub fn gemm_portable<T: Dtype>(
    desc: &GemmDesc,
    a: &DeviceBuffer<T>,
    b: &DeviceBuffer<T>,
    c: &mut DeviceBuffer<T>,
) -> Result<()> {
    desc.check_buffers(a.len(), b.len(), c.len())
        .map_err(|message| KernelError::Shape { kernel: KERNEL, message })?;
    if desc.is_empty() {
        return Ok(());
    }
    let stream = c.stream().clone();
    let name = kernel_for(desc);
    let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>(name))?;
    ensure(kernel.max_threads_per_block() >= THREADS, KERNEL, || {
        format!(
            "{name} runs {THREADS} threads a block; this device allows {}",
            kernel.max_threads_per_block()
        )
    })?;
    let config = config(&stream, desc, name);
    // `check` bounds every size by i32::MAX and every stride by i64::MAX; `check_buffers`
    // proved each offset plus its matrix's extent within its buffer.
    let [a_at, b_at, c_at] = desc.operand_addresses(a, b, c);
    let params = GemmParams {
        a: a_at,
        b: b_at,
        c: c_at,
        lda: desc.lda as u64,
        ldb: desc.ldb as u64,
        ldc: desc.ldc as u64,
        stride_a: desc.stride_a as u64,
        stride_b: desc.stride_b as u64,
        stride_c: desc.stride_c as u64,
        m: desc.m as i32,
        n: desc.n as i32,
        k: desc.k as i32,
        batch: desc.batch as i32,
        alpha: desc.alpha,
        beta: desc.beta,
        trans_a: desc.trans_a.is_transposed() as i32,
        pad: 0,
    };
    // SAFETY: rf_gemm_<kind>_<T>(rf_gemm_params) reads A, B (and C when beta != 0) and writes
    // C only at (batch, row, column) positions inside the description, whose extents were
    // checked against the three buffers' lengths (check_buffers): every address is below
    // `offset + batch_index * stride + (rows - 1) * ld + cols <= len`. Batch outputs do not overlap
    // (checked), so no two threads write one element. The pointers are those of the buffers
    // named by reads/writes, which belong to the launching stream.
    unsafe { stream.launch(&kernel).reads(a).reads(b).writes(c).arg(params).launch(config)? };
    Ok(())
}

/// Grid for `name`: tiles (or columns) on x, row tiles on y, the batch on z; y and z are
/// walked grid-stride past the device's limits.
fn config(stream: &Stream, desc: &GemmDesc, name: &str) -> LaunchConfig {
    let info = stream.backend().info();
    let max_y = info.max_grid[1].clamp(1, 65_535) as usize;
    let max_z = info.max_grid[2].clamp(1, 65_535) as usize;
    let max_x = info.max_grid[0].max(1) as usize;
    let z = desc.batch.clamp(1, max_z) as u32;
    let (x, y) = if name == "rf_gemm_skinny_t" {
        // A warp per column; enough blocks to fill the device a few times over, grid-stride
        // past that.
        let warps = (THREADS / info.warp_size.max(1)).max(1) as usize;
        let cap = (info.compute_units.max(1) as usize * 32).min(max_x);
        (desc.n.div_ceil(warps).clamp(1, cap), 1)
    } else if name == "rf_gemm_skinny_n" {
        (desc.n.div_ceil(SKINNY_COLS).clamp(1, max_x), 1)
    } else {
        (desc.n.div_ceil(TILE).clamp(1, max_x), desc.m.div_ceil(TILE).clamp(1, max_y))
    };
    LaunchConfig { grid: [x as u32, y as u32, z], block: [THREADS, 1, 1], shared_mem_bytes: 0 }
}

/// Element `(row, col)` of batch `batch` of the product, in f64 from the stored values:
/// `alpha * sum_k op(A)[row, k] op(B)[k, col] + beta * C[row, col]`, with `C` not read when
/// `beta == 0` and `A`, `B` not read when `alpha == 0` (the portable kernel's rules).
/// Checks the description against the slices first.
pub fn gemm_reference_at<T: Dtype>(
    desc: &GemmDesc,
    a: &[T],
    b: &[T],
    c: &[T],
    batch: usize,
    row: usize,
    col: usize,
) -> Result<f64> {
    desc.check_buffers(a.len(), b.len(), c.len())
        .map_err(|message| KernelError::Shape { kernel: KERNEL, message })?;
    ensure(batch < desc.batch && row < desc.m && col < desc.n, KERNEL, || {
        format!("element ({batch}, {row}, {col}) is outside {desc:?}")
    })?;
    Ok(reference_element(desc, a, b, c, batch, row, col))
}

/// The reference element, for a description already checked against the slices.
fn reference_element<T: Dtype>(
    desc: &GemmDesc,
    a: &[T],
    b: &[T],
    c: &[T],
    batch: usize,
    row: usize,
    col: usize,
) -> f64 {
    let a = &a[desc.offset_a + batch * desc.stride_a..];
    let b = &b[desc.offset_b + batch * desc.stride_b..];
    let mut acc = 0.0f64;
    if desc.alpha != 0.0 {
        for k in 0..desc.k {
            let av = match desc.trans_a {
                Transpose::No => a[row * desc.lda + k],
                Transpose::Yes => a[k * desc.lda + row],
            };
            let bv = match desc.trans_b {
                Transpose::No => b[k * desc.ldb + col],
                Transpose::Yes => b[col * desc.ldb + k],
            };
            acc += av.to_f32() as f64 * bv.to_f32() as f64;
        }
    }
    let mut out = desc.alpha as f64 * acc;
    if desc.beta != 0.0 {
        out += desc.beta as f64
            * c[desc.offset_c + batch * desc.stride_c + row * desc.ldc + col].to_f32() as f64;
    }
    out
}

/// The whole `C` buffer after the product, in f64: the elements the description covers
/// computed as [`gemm_reference_at`] does, every other element (gaps between rows and between
/// batch matrices, the tail past the last one) unchanged from `c`.
pub fn gemm_reference<T: Dtype>(desc: &GemmDesc, a: &[T], b: &[T], c: &[T]) -> Result<Vec<f64>> {
    desc.check_buffers(a.len(), b.len(), c.len())
        .map_err(|message| KernelError::Shape { kernel: KERNEL, message })?;
    let mut out: Vec<f64> = c.iter().map(|v| v.to_f32() as f64).collect();
    if desc.is_empty() {
        return Ok(out);
    }
    for batch in 0..desc.batch {
        for row in 0..desc.m {
            for col in 0..desc.n {
                out[desc.offset_c + batch * desc.stride_c + row * desc.ldc + col] =
                    reference_element(desc, a, b, c, batch, row, col);
            }
        }
    }
    Ok(out)
}

/// The entries this module launches ([`crate::launchable`]): [`kernel_for`]'s every answer.
pub(crate) fn launchable() -> Vec<Launchable> {
    let mut names = Vec::new();
    for m in [1, SKINNY_M + 1] {
        for trans_a in [Transpose::No, Transpose::Yes] {
            for trans_b in [Transpose::No, Transpose::Yes] {
                let desc = GemmDesc { trans_a, trans_b, ..GemmDesc::new(m, 64, 64) };
                names.push(kernel_for(&desc));
            }
        }
    }
    names.sort();
    names.dedup();
    names.iter().flat_map(|name| every_dtype(MODULE, name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_params_struct_matches_the_kernel_layout() {
        // 9 x u64, then 4 x i32, 2 x f32, 2 x i32: 104 bytes, no padding.
        assert_eq!(size_of::<GemmParams>(), 104);
    }

    #[test]
    fn hand_computed_products() {
        // [1 2 3; 4 5 6] x [7 8; 9 10; 11 12] = [58 64; 139 154]
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0];
        let c = [0.0f32; 4];
        let d = GemmDesc::new(2, 2, 3);
        assert_eq!(gemm_reference(&d, &a, &b, &c).unwrap(), [58.0, 64.0, 139.0, 154.0]);
        // The same B stored transposed ([N, K] = [[7 9 11]; [8 10 12]]), as nn.Linear keeps it.
        let bt = [7.0f32, 9.0, 11.0, 8.0, 10.0, 12.0];
        assert_eq!(
            gemm_reference(&GemmDesc::linear(2, 2, 3), &a, &bt, &c).unwrap(),
            [58.0, 64.0, 139.0, 154.0]
        );
        // A stored transposed ([K, M]).
        let at = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
        let dt = GemmDesc::new(2, 2, 3).with_transposes(Transpose::Yes, Transpose::No);
        assert_eq!(gemm_reference(&dt, &at, &b, &c).unwrap(), [58.0, 64.0, 139.0, 154.0]);
        // alpha and beta: 0.5 * AB - 2 * C.
        let c1 = [1.0f32, 2.0, 3.0, 4.0];
        let d = GemmDesc::new(2, 2, 3).with_alpha_beta(0.5, -2.0);
        assert_eq!(gemm_reference(&d, &a, &b, &c1).unwrap(), [27.0, 28.0, 63.5, 69.0]);
    }

    #[test]
    fn gaps_keep_their_values_and_beta_zero_ignores_nan() {
        // 2 x 1 output with ldc 3: elements 1, 2 (row gap) and 4 (tail) are not covered.
        let a = [2.0f32, 3.0];
        let b = [5.0f32];
        let c = [f32::NAN, 7.0, 8.0, f32::NAN, 9.0];
        let d = GemmDesc::new(2, 1, 1).with_leading_dims(1, 1, 3);
        let out = gemm_reference(&d, &a, &b, &c).unwrap();
        assert_eq!(out[0], 10.0);
        assert_eq!(out[3], 15.0);
        assert_eq!((out[1], out[2], out[4]), (7.0, 8.0, 9.0));
        // alpha = 0 reads neither A nor B: NaN there does not matter.
        let d = GemmDesc::new(1, 1, 1).with_alpha_beta(0.0, 2.0);
        assert_eq!(gemm_reference(&d, &[f32::NAN], &[f32::NAN], &[3.0f32]).unwrap(), [6.0]);
        // K = 0: C = beta * C.
        let d = GemmDesc::new(1, 2, 0).with_alpha_beta(1.0, 0.5);
        assert_eq!(gemm_reference::<f32>(&d, &[], &[], &[4.0, 6.0]).unwrap(), [2.0, 3.0]);
    }

    #[test]
    fn batches_use_their_strides() {
        // Two 1 x 1 x 2 products; B shared through stride 0.
        let a = [1.0f32, 2.0, 3.0, 4.0];
        let b = [10.0f32, 100.0];
        let c = [0.0f32; 3];
        let d = GemmDesc::new(1, 1, 2).with_batch(2, 2, 0, 2);
        assert_eq!(gemm_reference(&d, &a, &b, &c).unwrap(), [210.0, 0.0, 430.0]);
        assert_eq!(gemm_reference_at(&d, &a, &b, &c, 1, 0, 0).unwrap(), 430.0);
        assert!(gemm_reference_at(&d, &a, &b, &c, 2, 0, 0).is_err());
    }

    #[test]
    fn short_buffers_are_refused() {
        let d = GemmDesc::new(2, 2, 2);
        let err = gemm_reference(&d, &[0.0f32; 4], &[0.0f32; 4], &[0.0f32; 3]).unwrap_err();
        assert!(err.to_string().contains("C has 3 elements, the product reaches 4"), "{err}");
    }

    #[test]
    fn kernels_are_chosen_by_rows_and_layout() {
        assert_eq!(kernel_for(&GemmDesc::linear(1, 4096, 4096)), "rf_gemm_skinny_t");
        assert_eq!(kernel_for(&GemmDesc::new(8, 4096, 4096)), "rf_gemm_skinny_n");
        let tiny_tt = GemmDesc::new(1, 64, 64).with_transposes(Transpose::Yes, Transpose::Yes);
        assert_eq!(kernel_for(&tiny_tt), "rf_gemm_tiled_tt");
        assert_eq!(kernel_for(&GemmDesc::linear(9, 4096, 4096)), "rf_gemm_tiled_nt");
        let tt = GemmDesc::new(512, 64, 64).with_transposes(Transpose::Yes, Transpose::Yes);
        assert_eq!(kernel_for(&tt), "rf_gemm_tiled_tt");
        assert_eq!(GemmPath::default(), GemmPath::Auto);
    }
}
