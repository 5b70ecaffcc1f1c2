//! `rmsnorm` (`kernels/rmsnorm.hip`): RMSNorm over the last dimension, with an optional fused
//! residual add.
//!
//! For each row `x` of `cols` elements: `out = x / sqrt(mean(x^2) + eps) * weight`, computed in
//! f32 from f32, f16 or bf16 storage and rounded once to the storage type.
//!
//! With a residual (the pre-norm transformer step `h = h + f(h); y = norm(h)`), the kernel first
//! forms `s = x + residual` (an f32 add, rounded to the storage type), **writes `s` back into the
//! residual buffer** (the running hidden state the next layer adds to), then normalises `s` into
//! `out`. This is `fused_add_rms_norm` of other engines, with `out` a buffer of its own, or
//! `x` itself with [`RmsNorm::run_residual_in_place`].
//!
//! [`rmsnorm`] and [`rmsnorm_residual`] cover contiguous `[rows, cols]` tensors; [`RmsNorm`]
//! adds row strides (a row of each tensor starts `stride` elements after the previous one, for
//! views such as the Q or K heads inside a packed QKV tensor) and the in-place forms.

use rocm_runtime::{DeviceBuffer, Function, LaunchConfig, Stream};

use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader::{self, strided_len};

const KERNEL: &str = "rmsnorm";
const MODULE: KernelModule = KernelModule::Rmsnorm;

/// Elements of a row each thread keeps in registers on the scalar path (the vector path keeps
/// `RF_RMS_CACHE`); the block size is chosen so that a row fits.
const CACHE_SCALAR: usize = crate::abi::rmsnorm::RF_RMS_CACHE_SCALAR as usize;

/// Group path (v3): 16-byte vectors each thread keeps in registers; a row
/// of `n` vectors gets a block of `n / GROUP_CACHE` threads (rounded up to whole warps), which
/// must not pass 1024.
const GROUP_CACHE: usize = crate::abi::rmsnorm::RF_RMS_GROUP_CACHE as usize;

/// Shape and layout of an RMSNorm launch: `rows` rows of `cols` elements, normalised with `eps`.
///
/// Strides (in elements, between the starts of consecutive rows) default to `cols`
/// (contiguous). `out_stride` defaults to `cols` out of place and to `x_stride` in place.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsNorm {
    pub rows: usize,
    pub cols: usize,
    pub eps: f32,
    pub x_stride: usize,
    pub residual_stride: usize,
    pub out_stride: Option<usize>,
}

impl RmsNorm {
    /// Contiguous rows.
    pub fn new(rows: usize, cols: usize, eps: f32) -> Self {
        RmsNorm { rows, cols, eps, x_stride: cols, residual_stride: cols, out_stride: None }
    }

    pub fn with_x_stride(self, stride: usize) -> Self {
        RmsNorm { x_stride: stride, ..self }
    }

    pub fn with_residual_stride(self, stride: usize) -> Self {
        RmsNorm { residual_stride: stride, ..self }
    }

    pub fn with_out_stride(self, stride: usize) -> Self {
        RmsNorm { out_stride: Some(stride), ..self }
    }

    /// Elements a buffer with this row stride must hold: `(rows - 1) * stride + cols`.
    pub fn required_len(&self, stride: usize) -> Option<usize> {
        strided_len(self.rows, stride, self.cols)
    }

    /// `out = rmsnorm(x) * weight`, queued on `out`'s stream (all buffers must belong to it).
    pub fn run<T: Dtype>(
        &self,
        x: &DeviceBuffer<T>,
        weight: &DeviceBuffer<T>,
        out: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        let out_stride = self.out_stride.unwrap_or(self.cols);
        self.check(weight.len())?;
        self.check_buffer("x", x.len(), self.x_stride)?;
        self.check_buffer("out", out.len(), out_stride)?;
        if self.rows == 0 {
            return Ok(());
        }
        let stream = out.stream().clone();
        let ptrs = [x.device_ptr(), weight.device_ptr(), out.device_ptr()];
        let (kernel, config) = self.plan::<T>(&stream, "rf_rmsnorm", &ptrs, &[self.x_stride, out_stride])?;
        let (xs, os, rows, cols) =
            (self.x_stride as u64, out_stride as u64, self.rows as u64, self.cols as u32);
        // SAFETY: rf_rmsnorm_<T>(const T* x, const T* weight, T* out, u64 x_stride, u64 out_stride,
        // u64 rows, u32 cols, float eps) reads x[r * x_stride + j] and weight[j], and writes
        // out[r * out_stride + j], for r < rows and j < cols: checked above to lie inside each
        // buffer (weight holds cols elements). The builder checks that the buffers are the
        // stream's; x and out are distinct buffers (a shared and a mutable borrow).
        unsafe {
            stream
                .launch(&kernel)
                // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
                .dependent()
                .buffer(x)
                .buffer(weight)
                .buffer_mut(out)
                .arg(xs)
                .arg(os)
                .arg(rows)
                .arg(cols)
                .arg(self.eps)
                .launch(config)?
        };
        Ok(())
    }

    /// `x = rmsnorm(x) * weight` in place (`out_stride`, if set, must equal `x_stride`).
    pub fn run_in_place<T: Dtype>(&self, x: &mut DeviceBuffer<T>, weight: &DeviceBuffer<T>) -> Result<()> {
        self.check(weight.len())?;
        self.check_in_place()?;
        self.check_buffer("x", x.len(), self.x_stride)?;
        if self.rows == 0 {
            return Ok(());
        }
        let stream = x.stream().clone();
        let x_ptr = x.device_ptr();
        let ptrs = [x_ptr, weight.device_ptr()];
        let (kernel, config) = self.plan::<T>(&stream, "rf_rmsnorm", &ptrs, &[self.x_stride])?;
        let (xs, rows, cols) = (self.x_stride as u64, self.rows as u64, self.cols as u32);
        // SAFETY: as in `run`, with out = x and out_stride = x_stride: the rows lie inside x
        // (checked above). The kernel reads each element before the same thread overwrites it.
        unsafe {
            stream
                .launch(&kernel)
                // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
                .dependent()
                .buffer_mut(x)
                .buffer(weight)
                .arg(x_ptr)
                .arg(xs)
                .arg(xs)
                .arg(rows)
                .arg(cols)
                .arg(self.eps)
                .launch(config)?
        };
        Ok(())
    }

    /// `residual = x + residual; out = rmsnorm(residual) * weight` (see the module docs).
    pub fn run_residual<T: Dtype>(
        &self,
        x: &DeviceBuffer<T>,
        residual: &mut DeviceBuffer<T>,
        weight: &DeviceBuffer<T>,
        out: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        let out_stride = self.out_stride.unwrap_or(self.cols);
        self.check(weight.len())?;
        self.check_buffer("x", x.len(), self.x_stride)?;
        self.check_buffer("residual", residual.len(), self.residual_stride)?;
        self.check_buffer("out", out.len(), out_stride)?;
        if self.rows == 0 {
            return Ok(());
        }
        let stream = out.stream().clone();
        let ptrs = [x.device_ptr(), residual.device_ptr(), weight.device_ptr(), out.device_ptr()];
        let strides = [self.x_stride, self.residual_stride, out_stride];
        let (kernel, config) = self.plan::<T>(&stream, "rf_rmsnorm_residual", &ptrs, &strides)?;
        let (rows, cols) = (self.rows as u64, self.cols as u32);
        // SAFETY: rf_rmsnorm_residual_<T>(const T* x, T* residual, const T* weight, T* out,
        // u64 x_stride, u64 residual_stride, u64 out_stride, u64 rows, u32 cols, float eps)
        // touches row r < rows, column j < cols of x, residual and out at their strides, and
        // weight[j]: all checked above to lie inside the buffers. x, residual and out are
        // distinct buffers; the builder checks their stream.
        unsafe {
            stream
                .launch(&kernel)
                // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
                .dependent()
                .buffer(x)
                .buffer_mut(residual)
                .buffer(weight)
                .buffer_mut(out)
                .arg(self.x_stride as u64)
                .arg(self.residual_stride as u64)
                .arg(out_stride as u64)
                .arg(rows)
                .arg(cols)
                .arg(self.eps)
                .launch(config)?
        };
        Ok(())
    }

    /// `residual = x + residual; x = rmsnorm(residual) * weight` (vLLM's `fused_add_rms_norm`):
    /// the normalised rows replace `x` (`out_stride`, if set, must equal `x_stride`).
    pub fn run_residual_in_place<T: Dtype>(
        &self,
        x: &mut DeviceBuffer<T>,
        residual: &mut DeviceBuffer<T>,
        weight: &DeviceBuffer<T>,
    ) -> Result<()> {
        self.check(weight.len())?;
        self.check_in_place()?;
        self.check_buffer("x", x.len(), self.x_stride)?;
        self.check_buffer("residual", residual.len(), self.residual_stride)?;
        if self.rows == 0 {
            return Ok(());
        }
        let stream = x.stream().clone();
        let x_ptr = x.device_ptr();
        let ptrs = [x_ptr, residual.device_ptr(), weight.device_ptr()];
        let strides = [self.x_stride, self.residual_stride];
        let (kernel, config) = self.plan::<T>(&stream, "rf_rmsnorm_residual", &ptrs, &strides)?;
        let (xs, rows, cols) = (self.x_stride as u64, self.rows as u64, self.cols as u32);
        // SAFETY: as in `run_residual`, with out = x and out_stride = x_stride (rows checked to
        // lie inside x). The kernel reads each x element before the same thread overwrites it.
        unsafe {
            stream
                .launch(&kernel)
                // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
                .dependent()
                .buffer_mut(x)
                .buffer_mut(residual)
                .buffer(weight)
                .arg(x_ptr)
                .arg(xs)
                .arg(self.residual_stride as u64)
                .arg(xs)
                .arg(rows)
                .arg(cols)
                .arg(self.eps)
                .launch(config)?
        };
        Ok(())
    }

    /// Checks what does not depend on the buffers: cols, eps, weight length, strides.
    fn check(&self, weight_len: usize) -> Result<()> {
        ensure(self.cols > 0, KERNEL, || "cols must be at least 1".into())?;
        ensure(self.cols <= i32::MAX as usize, KERNEL, || format!("cols = {} exceeds 2^31 - 1", self.cols))?;
        ensure(self.eps.is_finite() && self.eps > 0.0, KERNEL, || {
            format!("eps must be positive and finite, got {}", self.eps)
        })?;
        ensure(weight_len == self.cols, KERNEL, || {
            format!("weight has {weight_len} elements, cols = {}", self.cols)
        })?;
        let strides = [
            ("x", self.x_stride),
            ("residual", self.residual_stride),
            ("out", self.out_stride.unwrap_or(self.cols)),
        ];
        for (name, stride) in strides {
            ensure(stride >= self.cols, KERNEL, || {
                format!("{name} row stride {stride} is less than cols = {}", self.cols)
            })?;
        }
        Ok(())
    }

    fn check_in_place(&self) -> Result<()> {
        ensure(self.out_stride.is_none_or(|s| s == self.x_stride), KERNEL, || {
            format!("in place, out_stride ({:?}) must equal x_stride ({})", self.out_stride, self.x_stride)
        })
    }

    fn check_buffer(&self, name: &str, len: usize, stride: usize) -> Result<()> {
        let need = self.required_len(stride);
        ensure(need.is_some_and(|need| len >= need), KERNEL, || match need {
            Some(need) => format!(
                "{name} holds {len} elements; {} rows of {} at stride {stride} need {need}",
                self.rows, self.cols
            ),
            None => format!("{} rows at stride {stride} overflow usize", self.rows),
        })
    }

    /// The kernel and launch for this shape: the group path (`<name>_group_<dt>`, one row per
    /// block of `group_block` threads) for 16-byte rows it holds, the block path otherwise. Both
    /// walk rows by blocks, so the 2-D grid of `row_per_block` covers any row count.
    fn plan<T: Dtype>(
        &self,
        stream: &Stream,
        name: &str,
        ptrs: &[u64],
        strides: &[usize],
    ) -> Result<(Function, LaunchConfig)> {
        let vector = vectorised::<T>(self.cols, ptrs, strides);
        let warp = stream.backend().info().warp_size.max(1) as usize;
        if let Some(block) = group_block::<T>(self.cols, vector, warp) {
            let kernel = loader::kernel(stream, MODULE, &kernel_name::<T>(&format!("{name}_group")))?;
            let config = loader::row_per_block(stream, &kernel, self.rows, block as u32);
            return Ok((kernel, config));
        }
        let kernel = loader::kernel(stream, MODULE, &kernel_name::<T>(name))?;
        let config = self.config::<T>(stream, &kernel, vector);
        Ok((kernel, config))
    }

    /// Block path: one block per row, sized so that the row fits the kernel's register cache:
    /// four 16-byte loads per thread on the vector path (half the cache for f32, all of it for
    /// f16/bf16), `CACHE_SCALAR` elements on the scalar one.
    fn config<T: Dtype>(&self, stream: &Stream, kernel: &Function, vector: bool) -> LaunchConfig {
        let per_thread = if vector { 64 / size_of::<T>() } else { CACHE_SCALAR };
        let warp = stream.backend().info().warp_size.max(1) as usize;
        let block = self.cols.div_ceil(per_thread).div_ceil(warp).saturating_mul(warp).min(1024);
        loader::row_per_block(stream, kernel, self.rows, block as u32)
    }
}

/// The group path's block for a row of `cols`, if it takes that path: 16-byte rows (`vector`)
/// of at most `GROUP_CACHE` vectors a thread of a 1024-thread block; `cols / N / GROUP_CACHE`
/// threads rounded up to whole `warp`-wide warps (the `cols % N` tail elements go to the first
/// threads, at most 7 of them). The kernel checks the same and streams other rows, so this
/// decides speed, never correctness.
fn group_block<T: Dtype>(cols: usize, vector: bool, warp: usize) -> Option<usize> {
    let vectors = cols / (16 / size_of::<T>());
    let block = vectors.div_ceil(GROUP_CACHE).max(1).div_ceil(warp).saturating_mul(warp);
    (vector && block <= 1024).then_some(block)
}

/// Whether the kernel takes its 16-byte path (the same test as `rf_rmsnorm` in the kernel).
fn vectorised<T: Dtype>(cols: usize, ptrs: &[u64], strides: &[usize]) -> bool {
    let n = 16 / size_of::<T>();
    cols >= n && ptrs.iter().all(|p| p % 16 == 0) && strides.iter().all(|s| s % n == 0)
}

/// `out = rmsnorm(x) * weight` for contiguous `[rows, cols]` tensors (`x` and `out` hold exactly
/// `rows * cols` elements, `weight` `cols`), queued on `out`'s stream.
pub fn rmsnorm<T: Dtype>(
    x: &DeviceBuffer<T>,
    weight: &DeviceBuffer<T>,
    out: &mut DeviceBuffer<T>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<()> {
    let n = exact_len(rows, cols)?;
    for (name, len) in [("x", x.len()), ("out", out.len())] {
        ensure(len == n, KERNEL, || format!("{name} has {len} elements, expected {rows} x {cols}"))?;
    }
    RmsNorm::new(rows, cols, eps).run(x, weight, out)
}

/// `residual = x + residual; out = rmsnorm(residual) * weight` for contiguous `[rows, cols]`
/// tensors (`x`, `residual` and `out` hold exactly `rows * cols` elements, `weight` `cols`).
pub fn rmsnorm_residual<T: Dtype>(
    x: &DeviceBuffer<T>,
    residual: &mut DeviceBuffer<T>,
    weight: &DeviceBuffer<T>,
    out: &mut DeviceBuffer<T>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<()> {
    let n = exact_len(rows, cols)?;
    for (name, len) in [("x", x.len()), ("residual", residual.len()), ("out", out.len())] {
        ensure(len == n, KERNEL, || format!("{name} has {len} elements, expected {rows} x {cols}"))?;
    }
    RmsNorm::new(rows, cols, eps).run_residual(x, residual, weight, out)
}

fn exact_len(rows: usize, cols: usize) -> Result<usize> {
    rows.checked_mul(cols).ok_or_else(|| crate::KernelError::Shape {
        kernel: KERNEL,
        message: format!("{rows} x {cols} overflows usize"),
    })
}

/// Validates a shape for the references: the same rules as the launchers.
fn reference_check(shape: &RmsNorm, weight: usize, bufs: &[(&str, usize, usize)]) {
    shape.check(weight).expect("rmsnorm reference: invalid shape");
    for &(name, len, stride) in bufs {
        shape.check_buffer(name, len, stride).expect("rmsnorm reference: buffer too small");
    }
}

/// Normalises one row (given as f64 values of the storage type) into `out`.
fn normalise_row<T: Dtype>(values: &[f64], weight: &[T], eps: f32, out: &mut [T]) {
    let mean = values.iter().map(|v| v * v).sum::<f64>() / values.len() as f64;
    let scale = 1.0 / (mean + eps as f64).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(values).zip(weight) {
        *o = T::from_f32((v * scale * w.to_f32() as f64) as f32);
    }
}

/// CPU reference of [`RmsNorm::run`] (and [`rmsnorm`]) in f64, rounded to `T` once. Writes only
/// the `cols` elements of each row of `out`.
pub fn rmsnorm_reference<T: Dtype>(shape: &RmsNorm, x: &[T], weight: &[T], out: &mut [T]) {
    let out_stride = shape.out_stride.unwrap_or(shape.cols);
    reference_check(shape, weight.len(), &[("x", x.len(), shape.x_stride), ("out", out.len(), out_stride)]);
    for r in 0..shape.rows {
        let xr = &x[r * shape.x_stride..][..shape.cols];
        let values: Vec<f64> = xr.iter().map(|v| v.to_f32() as f64).collect();
        normalise_row(&values, weight, shape.eps, &mut out[r * out_stride..][..shape.cols]);
    }
}

/// CPU reference of [`RmsNorm::run_residual`] (and [`rmsnorm_residual`]): `residual = x +
/// residual` as the kernel forms it (an f32 add rounded to `T`, so bit-exact), then the f64
/// normalisation of that rounded sum into `out`.
pub fn rmsnorm_residual_reference<T: Dtype>(
    shape: &RmsNorm,
    x: &[T],
    residual: &mut [T],
    weight: &[T],
    out: &mut [T],
) {
    let out_stride = shape.out_stride.unwrap_or(shape.cols);
    reference_check(
        shape,
        weight.len(),
        &[
            ("x", x.len(), shape.x_stride),
            ("residual", residual.len(), shape.residual_stride),
            ("out", out.len(), out_stride),
        ],
    );
    for r in 0..shape.rows {
        let xr = &x[r * shape.x_stride..][..shape.cols];
        let rr = &mut residual[r * shape.residual_stride..][..shape.cols];
        for (s, &v) in rr.iter_mut().zip(xr) {
            *s = T::from_f32(v.to_f32() + s.to_f32());
        }
        let values: Vec<f64> = rr.iter().map(|v| v.to_f32() as f64).collect();
        normalise_row(&values, weight, shape.eps, &mut out[r * out_stride..][..shape.cols]);
    }
}

/// The entries this module launches ([`crate::launchable`]): each kernel and its group path.
pub(crate) fn launchable() -> Vec<Launchable> {
    ["rf_rmsnorm", "rf_rmsnorm_residual"]
        .iter()
        .flat_map(|name| [every_dtype(MODULE, name), every_dtype(MODULE, &format!("{name}_group"))].concat())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocm_runtime::{bf16, f16};

    #[test]
    fn reference_matches_a_hand_computed_row() {
        // mean(x^2) = (9 + 16) / 2 = 12.5; eps = 0.5 -> 1 / sqrt(13) = 0.27735...
        let shape = RmsNorm::new(1, 2, 0.5);
        let mut out = [0.0f32; 2];
        rmsnorm_reference(&shape, &[3.0f32, -4.0], &[1.0, 2.0], &mut out);
        let s = 1.0 / 13.0f64.sqrt();
        assert_eq!(out, [(3.0 * s) as f32, (-8.0 * s) as f32]);
    }

    #[test]
    fn reference_handles_strides_and_leaves_padding_alone() {
        // Rows [1, 1] and [2, 2] at stride 3; eps tiny: each row normalises to [1, 1].
        let shape = RmsNorm::new(2, 2, 1e-12).with_x_stride(3).with_out_stride(4);
        let x = [1.0f32, 1.0, 99.0, 2.0, 2.0];
        let mut out = [7.0f32; 6];
        rmsnorm_reference(&shape, &x, &[1.0, 1.0], &mut out);
        for (got, want) in out.iter().zip([1.0, 1.0, 7.0, 7.0, 1.0, 1.0]) {
            assert!((got - want).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn residual_reference_writes_the_sum_back() {
        let shape = RmsNorm::new(1, 4, 1e-6);
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut residual = [1.0f32, 0.0, -1.0, -2.0];
        let mut out = [0.0f32; 4];
        rmsnorm_residual_reference(&shape, &x, &mut residual, &[1.0; 4], &mut out);
        assert_eq!(residual, [2.0, 2.0, 2.0, 2.0]);
        for o in out {
            assert!((o - 1.0).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn residual_sum_is_rounded_to_the_storage_type_before_normalising() {
        // 1 + 2^-9 is not a bf16 (8 significant bits): the sum rounds to 1, which normalises to 1.
        let shape = RmsNorm::new(1, 1, 1e-12);
        let x = [bf16::from_f32(1.0)];
        let mut residual = [bf16::from_f32(1.0 / 512.0)];
        let mut out = [bf16::ZERO];
        rmsnorm_residual_reference(&shape, &x, &mut residual, &[bf16::ONE], &mut out);
        assert_eq!(residual[0].to_f32(), 1.0);
        assert_eq!(out[0].to_f32(), 1.0);
        let mut out = [f16::ZERO; 1];
        rmsnorm_reference(
            &RmsNorm::new(1, 1, 1e-12),
            &[f16::from_f32(-3.0)],
            &[f16::from_f32(0.5)],
            &mut out,
        );
        assert_eq!(out[0].to_f32(), -0.5);
    }

    #[test]
    fn bad_shapes_are_described() {
        let ok = RmsNorm::new(4, 8, 1e-5);
        assert!(ok.check(8).is_ok());
        assert!(ok.check(7).unwrap_err().to_string().contains("weight"));
        assert!(RmsNorm::new(4, 0, 1e-5).check(0).is_err());
        assert!(RmsNorm::new(4, 8, 0.0).check(8).is_err());
        assert!(RmsNorm::new(4, 8, -1.0).check(8).is_err());
        assert!(RmsNorm::new(4, 8, f32::NAN).check(8).is_err());
        assert!(RmsNorm::new(4, 8, f32::INFINITY).check(8).is_err());
        assert!(ok.with_x_stride(7).check(8).unwrap_err().to_string().contains("x row stride"));
        assert!(ok.with_out_stride(7).check(8).is_err());
        assert!(ok.with_residual_stride(7).check(8).is_err());
        assert!(ok.with_out_stride(9).check_in_place().is_err());
        assert!(ok.with_x_stride(9).with_out_stride(9).check_in_place().is_ok());
        assert!(ok.check_buffer("x", 31, 8).is_err());
        assert!(ok.check_buffer("x", 32, 8).is_ok());
        assert_eq!(ok.with_x_stride(10).required_len(10), Some(38));
        assert!(RmsNorm::new(usize::MAX, 8, 1e-5).check_buffer("x", 0, 8).is_err());
        assert_eq!(RmsNorm::new(0, 8, 1e-5).required_len(8), Some(0));
    }

    #[test]
    fn sixteen_byte_rows_of_up_to_two_vectors_a_thread_take_the_group_path() {
        // The benchmark's 4096 columns: 256 threads for f16/bf16 (512 vectors), 512 for f32.
        assert_eq!(group_block::<f16>(4096, true, 32), Some(256));
        assert_eq!(group_block::<bf16>(4096, true, 32), Some(256));
        assert_eq!(group_block::<f32>(4096, true, 32), Some(512));
        assert_eq!(group_block::<f16>(4096, true, 64), Some(256));
        // Whole warps, the tail not counted: 4103 f16 columns are still 512 vectors.
        assert_eq!(group_block::<f16>(4096 + 7, true, 32), Some(256));
        assert_eq!(group_block::<f16>(4096 + 8, true, 32), Some(288));
        assert_eq!(group_block::<f16>(4096 + 8, true, 64), Some(320));
        // Short rows get one warp (9 f16 columns: one vector and a tail element).
        assert_eq!(group_block::<f16>(9, true, 32), Some(32));
        assert_eq!(group_block::<f32>(127, true, 64), Some(64));
        // Up to 2048 vectors (1024 threads); longer rows and scalar rows take the block path.
        assert_eq!(group_block::<f16>(16_384, true, 32), Some(1024));
        assert_eq!(group_block::<f16>(16_384 + 8, true, 32), None);
        assert_eq!(group_block::<f32>(8192, true, 64), Some(1024));
        assert_eq!(group_block::<f32>(8196, true, 32), None);
        assert_eq!(group_block::<f16>(4096, false, 32), None);
    }

    #[test]
    fn the_vector_path_needs_aligned_pointers_and_strides() {
        assert!(vectorised::<f32>(8, &[0, 256], &[8, 12]));
        assert!(!vectorised::<f32>(8, &[0, 258], &[8]));
        assert!(!vectorised::<f32>(8, &[0], &[9]));
        assert!(!vectorised::<f32>(3, &[0], &[4]));
        assert!(vectorised::<f16>(8, &[0], &[16]));
        assert!(!vectorised::<bf16>(8, &[0], &[12]));
    }
}
