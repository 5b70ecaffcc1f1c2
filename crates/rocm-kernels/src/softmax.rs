//! `softmax` (`kernels/softmax.hip`): softmax over the last dimension, with a scale and an
//! optional causal or additive mask.
//!
//! For each of `rows` rows of `cols` elements:
//!
//! ```text
//! t[j] = scale * x[j]  (+ mask[r % mask_rows][j])      additive mask
//! t[j] = -inf where j > (r % seq_q) + offset            causal mask
//! y[j] = exp(t[j] - max t) / sum_k exp(t[k] - max t)
//! ```
//!
//! computed in f32 from f32, f16 or bf16 storage and rounded once to the storage type.
//!
//! - **Fully masked rows** (every `t` is `-inf`: a causal row that sees no column, or an
//!   additive mask row of `-inf`) are written as zeros, not NaN.
//! - **Stability**: the row maximum is subtracted (in f32) before `exp`, so logits of magnitude
//!   1e4 and more give finite results. The scaled logit `scale * x` is itself rounded to f32: at
//!   magnitude 1e4 that is an error of up to 5e-4 in the exponent (relative 5e-4 in the output),
//!   as for any f32 softmax; with `scale = 1` (or a power of two) it is exact.
//! - **Causal mask** ([`Mask::Causal`]): rows are `[.., seq_q]` flattened (`rows` a multiple of
//!   `seq_q`), row `r` is query `i = r % seq_q` and sees columns `j <= i + offset`. `offset`
//!   defaults to `cols - seq_q`: the queries are the last `seq_q` of `cols` keys (a KV cache
//!   holding `cols - seq_q` earlier tokens). A negative offset (more queries than keys) hides
//!   every column from the first rows, which are then zeros. Hidden elements of `x` are not read.
//! - **Additive mask** ([`Mask::Additive`]): a contiguous `[mask_rows, cols]` tensor of the
//!   storage type, row `r` adding mask row `r % mask_rows`. With `mask_rows = seq_q` it is the
//!   usual `[seq_q, seq_k]` mask broadcast over batch and heads (rows laid out
//!   `[batch, heads, seq_q]`); with `mask_rows = rows` a mask per row; with `1` one row for all.
//!   `-inf` entries exclude a column. The mask must not be `y`.
//! - **Strides**: row `r` of x starts at `r * x_stride`, of y at `r * y_stride` (both at least
//!   `cols`); elements between rows are neither read nor written. In place
//!   ([`Softmax::run_in_place`]) y is x, with x's stride.
//! - NaN in a row makes the row NaN; `+inf` logits give NaN (`inf - inf`), as in PyTorch.
//!
//! [`softmax`] covers contiguous tensors; [`Softmax`] adds strides and the in-place form.
//! [`softmax_reference`] is the f64 CPU reference.

use rocm_runtime::DeviceBuffer;

use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader::{self, strided_len};

const KERNEL: &str = "softmax";
const MODULE: KernelModule = KernelModule::Softmax;

/// Elements of a row each thread of `rf_softmax_<T>` keeps in registers (`ITEMS` in the kernel).
/// The block is sized so that a row fits when it can (up to 16 * 1024 elements); longer rows take
/// the kernel's streaming path, which reads x twice.
const ITEMS: usize = 16;

/// Bytes of a row each thread of `rf_softmax_fast_<T>` keeps in registers: four 16-byte vectors
/// (`FAST_VECTORS` in the kernel), 16 f32 or 32 f16/bf16 elements.
const FAST_BYTES: usize = 64;

/// Largest block of `rf_softmax_fast_<T>` (its `__launch_bounds__`).
const FAST_BLOCK: usize = 256;

/// Scales the fast entry point takes: it folds the scale into the exponent's factor
/// `scale * log2(e)`, which must be a positive normal f32 for the maximum of x to be the maximum
/// of the logits (and -inf logits to stay -inf).
const FAST_SCALES: std::ops::RangeInclusive<f32> = f32::MIN_POSITIVE..=1e30;

/// The entry point and block size of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    /// `rf_softmax_fast_<T>` (no additive mask, a positive scale, rows of at most
    /// `FAST_BYTES / size * FAST_BLOCK` elements) rather than `rf_softmax_<T>`.
    fast: bool,
    block: usize,
}

impl Plan {
    /// `size`: bytes of an element; `warp`: the device's warp width.
    fn new(cols: usize, size: usize, warp: usize, additive: bool, scale: f32) -> Plan {
        let warp = warp.max(1);
        let fast_items = FAST_BYTES / size;
        if !additive && FAST_SCALES.contains(&scale) && cols <= fast_items * FAST_BLOCK {
            let block = cols.div_ceil(fast_items).div_ceil(warp).saturating_mul(warp).clamp(warp, FAST_BLOCK);
            return Plan { fast: true, block };
        }
        let block = cols.div_ceil(ITEMS).div_ceil(warp).saturating_mul(warp).clamp(warp, 1024);
        Plan { fast: false, block }
    }
}

/// Largest |offset| accepted for the causal mask (the kernel adds it to a row index in i64).
const MAX_OFFSET: i64 = 1 << 62;

/// The mask of a softmax: `M` is `&DeviceBuffer<T>` for the launchers and `&[f32]` for the
/// reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mask<M> {
    /// No mask.
    None,
    /// Row `r` (query `r % seq_q`) sees columns `j <= r % seq_q + offset`; `offset` defaults to
    /// `cols - seq_q`.
    Causal { seq_q: usize, offset: Option<i64> },
    /// `mask` is a contiguous `[mask_rows, cols]` tensor; row `r` adds mask row `r % mask_rows`.
    Additive { mask: M, mask_rows: usize },
}

impl<M> Mask<M> {
    /// The causal mask of `seq_q` queries that are the last of the keys (`offset = cols - seq_q`).
    pub fn causal(seq_q: usize) -> Self {
        Mask::Causal { seq_q, offset: None }
    }

    /// The causal mask with an explicit query offset.
    pub fn causal_with_offset(seq_q: usize, offset: i64) -> Self {
        Mask::Causal { seq_q, offset: Some(offset) }
    }

    /// An additive mask of `mask_rows` rows.
    pub fn additive(mask: M, mask_rows: usize) -> Self {
        Mask::Additive { mask, mask_rows }
    }
}

/// Shape, layout and scale of a softmax launch: `rows` rows of `cols` elements.
///
/// Strides (in elements, between the starts of consecutive rows) default to `cols`; `y_stride`
/// defaults to `cols` out of place and to `x_stride` in place.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Softmax {
    pub rows: usize,
    pub cols: usize,
    pub scale: f32,
    pub x_stride: usize,
    pub y_stride: Option<usize>,
}

impl Softmax {
    /// Contiguous rows, scale 1.
    pub fn new(rows: usize, cols: usize) -> Self {
        Softmax { rows, cols, scale: 1.0, x_stride: cols, y_stride: None }
    }

    pub fn with_scale(self, scale: f32) -> Self {
        Softmax { scale, ..self }
    }

    pub fn with_x_stride(self, stride: usize) -> Self {
        Softmax { x_stride: stride, ..self }
    }

    pub fn with_y_stride(self, stride: usize) -> Self {
        Softmax { y_stride: Some(stride), ..self }
    }

    /// Elements a buffer with this row stride must hold: `(rows - 1) * stride + cols`.
    pub fn required_len(&self, stride: usize) -> Option<usize> {
        strided_len(self.rows, stride, self.cols)
    }

    /// The causal offset the kernel uses for `mask` (`cols - seq_q` unless given).
    fn causal(&self, mask_seq_q: usize, offset: Option<i64>) -> Result<(u64, i64)> {
        ensure(mask_seq_q > 0, KERNEL, || "causal mask: seq_q must be at least 1".into())?;
        ensure(self.rows.is_multiple_of(mask_seq_q), KERNEL, || {
            format!("causal mask: rows = {} is not a multiple of seq_q = {mask_seq_q}", self.rows)
        })?;
        let offset = match offset {
            Some(o) => o,
            None => {
                i64::try_from(self.cols).unwrap_or(i64::MAX) - i64::try_from(mask_seq_q).unwrap_or(i64::MAX)
            }
        };
        ensure((-MAX_OFFSET..=MAX_OFFSET).contains(&offset), KERNEL, || {
            format!("causal mask: offset {offset} is out of range (|offset| <= 2^62)")
        })?;
        Ok((mask_seq_q as u64, offset))
    }

    /// Checks everything that does not need a device: the shape, the scale, the strides, the
    /// buffer lengths (`x_len`, `y_len`; `None` in place) and the mask.
    fn check<M>(
        &self,
        x_len: usize,
        y_len: Option<usize>,
        mask: &Mask<M>,
        mask_len: impl Fn(&M) -> usize,
    ) -> Result<()> {
        ensure(self.cols <= i32::MAX as usize, KERNEL, || format!("cols = {} exceeds 2^31 - 1", self.cols))?;
        ensure(self.scale.is_finite(), KERNEL, || format!("scale must be finite, got {}", self.scale))?;
        let y_stride = self.y_stride.unwrap_or(if y_len.is_some() { self.cols } else { self.x_stride });
        if y_len.is_none() {
            ensure(y_stride == self.x_stride, KERNEL, || {
                format!("in place, y_stride ({y_stride}) must equal x_stride ({})", self.x_stride)
            })?;
        }
        for (name, stride) in [("x", self.x_stride), ("y", y_stride)] {
            ensure(stride >= self.cols, KERNEL, || {
                format!("{name} row stride {stride} is less than cols = {}", self.cols)
            })?;
        }
        let buffers = [("x", Some(x_len), self.x_stride), ("y", y_len, y_stride)];
        for (name, len, stride) in buffers {
            let Some(len) = len else { continue };
            let need = self.required_len(stride);
            ensure(need.is_some_and(|need| len >= need), KERNEL, || match need {
                Some(need) => format!(
                    "{name} holds {len} elements; {} rows of {} at stride {stride} need {need}",
                    self.rows, self.cols
                ),
                None => format!("{} rows at stride {stride} overflow usize", self.rows),
            })?;
        }
        match mask {
            Mask::None => {}
            Mask::Causal { seq_q, offset } => {
                self.causal(*seq_q, *offset)?;
            }
            Mask::Additive { mask, mask_rows } => {
                let (len, mask_rows) = (mask_len(mask), *mask_rows);
                ensure(mask_rows > 0, KERNEL, || "additive mask: mask_rows must be at least 1".into())?;
                ensure(self.rows.is_multiple_of(mask_rows), KERNEL, || {
                    format!(
                        "additive mask: rows = {} is not a multiple of mask_rows = {mask_rows}",
                        self.rows
                    )
                })?;
                ensure(mask_rows.checked_mul(self.cols) == Some(len), KERNEL, || {
                    format!("additive mask holds {len} elements, expected {mask_rows} x {}", self.cols)
                })?;
            }
        }
        Ok(())
    }

    /// `y = softmax(scale * x [+ mask])`, queued on `y`'s stream (x and the mask must belong to
    /// it too).
    pub fn run<T: Dtype>(
        &self,
        x: &DeviceBuffer<T>,
        y: &mut DeviceBuffer<T>,
        mask: Mask<&DeviceBuffer<T>>,
    ) -> Result<()> {
        self.check(x.len(), Some(y.len()), &mask, |m| m.len())?;
        let y_stride = self.y_stride.unwrap_or(self.cols);
        let x_ptr = x.device_ptr();
        self.launch(y, x_ptr, Some(x), y_stride, mask)
    }

    /// `x = softmax(scale * x [+ mask])` in place (`y_stride`, if set, must equal `x_stride`).
    pub fn run_in_place<T: Dtype>(
        &self,
        x: &mut DeviceBuffer<T>,
        mask: Mask<&DeviceBuffer<T>>,
    ) -> Result<()> {
        self.check(x.len(), None, &mask, |m| m.len())?;
        let x_ptr = x.device_ptr();
        self.launch(x, x_ptr, None, self.x_stride, mask)
    }

    /// Queues the kernel reading rows at `x_ptr` (the buffer `x`, or `y` itself when `x` is
    /// `None`) and writing `y`. Everything was checked by `check`.
    fn launch<T: Dtype>(
        &self,
        y: &mut DeviceBuffer<T>,
        x_ptr: u64,
        x: Option<&DeviceBuffer<T>>,
        y_stride: usize,
        mask: Mask<&DeviceBuffer<T>>,
    ) -> Result<()> {
        if self.rows == 0 || self.cols == 0 {
            return Ok(());
        }
        let stream = y.stream().clone();
        let warp = stream.backend().info().warp_size as usize;
        let additive = matches!(mask, Mask::Additive { .. });
        let plan = Plan::new(self.cols, size_of::<T>(), warp, additive, self.scale);
        let name = if plan.fast { "rf_softmax_fast" } else { "rf_softmax" };
        let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>(name))?;
        let config = loader::row_per_block(&stream, &kernel, self.rows, plan.block as u32);
        let (seq_q, offset, causal, mask_rows) = match mask {
            Mask::None | Mask::Additive { .. } => (1u64, 0i64, 0i32, 1u64),
            Mask::Causal { seq_q, offset } => {
                let (seq_q, offset) = self.causal(seq_q, offset)?;
                (seq_q, offset, 1, 1)
            }
        };
        let (mask_buffer, mask_rows) = match mask {
            Mask::Additive { mask, mask_rows } => (Some(mask), mask_rows as u64),
            _ => (None, mask_rows),
        };
        // SAFETY: rf_softmax_<T> and rf_softmax_fast_<T>(const T* x, T* y, const T* mask,
        // u64 rows, u64 cols, u64 x_stride, u64 y_stride, u64 mask_rows, u64 seq_q, i64 offset,
        // int causal, float scale) read x[r * x_stride + j] and writes y[r * y_stride + j] for r < rows,
        // j < cols, and rf_softmax_<T> reads mask[(r % mask_rows) * cols + j] when the mask is
        // not null (the fast entry point is only chosen without one, and `Plan` gives it a block
        // of at least cols / (FAST_BYTES / size) threads, as it needs): `check`
        // proved those lie inside x (or y, in place), y and the mask. The builder checks that
        // x, y and the mask belong to the stream; x and the mask are shared borrows distinct
        // from y, except in place, where x is y itself and the kernel loads each element
        // before the same thread stores it.
        unsafe {
            let launch = stream.launch(&kernel);
            let launch = match x {
                Some(x) => launch.buffer(x),
                None => launch.arg(x_ptr),
            };
            let launch = launch.buffer_mut(y);
            let launch = match mask_buffer {
                Some(m) => launch.buffer(m),
                None => launch.arg(0u64),
            };
            launch
                .arg(self.rows as u64)
                .arg(self.cols as u64)
                .arg(self.x_stride as u64)
                .arg(y_stride as u64)
                .arg(mask_rows)
                .arg(seq_q)
                .arg(offset)
                .arg(causal)
                .arg(self.scale)
                .launch(config)?
        };
        Ok(())
    }
}

/// `y = softmax(scale * x [+ mask])` for contiguous `[rows, cols]` tensors (`x` and `y` hold
/// exactly `rows * cols` elements), queued on `y`'s stream.
pub fn softmax<T: Dtype>(
    x: &DeviceBuffer<T>,
    y: &mut DeviceBuffer<T>,
    rows: usize,
    cols: usize,
    scale: f32,
    mask: Mask<&DeviceBuffer<T>>,
) -> Result<()> {
    let n = rows.checked_mul(cols).ok_or_else(|| KernelError::Shape {
        kernel: KERNEL,
        message: format!("{rows} x {cols} overflows usize"),
    })?;
    for (name, len) in [("x", x.len()), ("y", y.len())] {
        ensure(len == n, KERNEL, || format!("{name} has {len} elements, expected {rows} x {cols}"))?;
    }
    Softmax::new(rows, cols).with_scale(scale).run(x, y, mask)
}

/// CPU reference of [`Softmax::run`] in f64, from the values of the storage type (`x` and the
/// mask given as f32, at the layout `shape` describes). Returns the `rows * cols` outputs,
/// contiguous (not at `y_stride`), unrounded. Panics on a shape the launchers refuse.
pub fn softmax_reference(shape: &Softmax, x: &[f32], mask: Mask<&[f32]>) -> Vec<f64> {
    let y_len = shape.required_len(shape.y_stride.unwrap_or(shape.cols)).unwrap_or(usize::MAX);
    shape.check(x.len(), Some(y_len), &mask, |m| m.len()).expect("softmax reference: invalid shape");
    let mut out = vec![0.0f64; shape.rows * shape.cols];
    if shape.cols == 0 {
        return out;
    }
    let scale = shape.scale as f64;
    for (r, y) in out.chunks_exact_mut(shape.cols).enumerate() {
        let xr = &x[r * shape.x_stride..][..shape.cols];
        let visible = match mask {
            Mask::Causal { seq_q, offset } => {
                let (_, offset) = shape.causal(seq_q, offset).expect("checked");
                let last = (r % seq_q) as i64 + offset;
                if last < 0 { 0 } else { (last as usize).saturating_add(1).min(shape.cols) }
            }
            _ => shape.cols,
        };
        let mask_row = match mask {
            Mask::Additive { mask, mask_rows } => Some(&mask[(r % mask_rows) * shape.cols..][..shape.cols]),
            _ => None,
        };
        let t: Vec<f64> = (0..shape.cols)
            .map(|j| {
                if j >= visible {
                    return f64::NEG_INFINITY;
                }
                let add = mask_row.map_or(0.0, |m| m[j] as f64);
                scale * xr[j] as f64 + add
            })
            .collect();
        let max = t.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            continue; // fully masked: zeros
        }
        let sum: f64 = t.iter().map(|&v| (v - max).exp()).sum();
        for (o, &v) in y.iter_mut().zip(&t) {
            *o = (v - max).exp() / sum;
        }
    }
    out
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    [every_dtype(MODULE, "rf_softmax_fast"), every_dtype(MODULE, "rf_softmax")].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() < 1e-8, "element {i}: got {g}, want {w} (all: {got:?})");
        }
    }

    // softmax([1, 2, 3]) = e^(j-3) / (1 + e^-1 + e^-2): 1 + 0.36787944 + 0.13533528 = 1.50321472.
    const ONE_TWO_THREE: [f64; 3] = [0.09003057317038046, 0.24472847105479767, 0.6652409557748219];

    #[test]
    fn a_hand_computed_row() {
        let y = softmax_reference(&Softmax::new(1, 3), &[1.0, 2.0, 3.0], Mask::None);
        close(&y, &ONE_TWO_THREE);
        // The scale applies before the exponential: 0.5 * [2, 4, 6] = [1, 2, 3].
        let y = softmax_reference(&Softmax::new(1, 3).with_scale(0.5), &[2.0, 4.0, 6.0], Mask::None);
        close(&y, &ONE_TWO_THREE);
    }

    #[test]
    fn logits_of_magnitude_1e4_stay_finite() {
        // [1e4, 1e4 - 1, 1e4 - 2] is softmax([0, -1, -2]): the reverse of softmax([1, 2, 3]).
        let y = softmax_reference(&Softmax::new(1, 3), &[1e4, 1e4 - 1.0, 1e4 - 2.0], Mask::None);
        close(&y, &[ONE_TWO_THREE[2], ONE_TWO_THREE[1], ONE_TWO_THREE[0]]);
        let y = softmax_reference(&Softmax::new(1, 2), &[-1e4, -1e4], Mask::None);
        close(&y, &[0.5, 0.5]);
    }

    #[test]
    fn the_causal_mask_hides_later_columns() {
        // 3 queries over 3 keys (offset 0): row i sees columns 0..=i.
        let x = [1.0, 2.0, 3.0].repeat(3);
        let y = softmax_reference(&Softmax::new(3, 3), &x, Mask::causal(3));
        // softmax([1, 2]) = [1, e] / (1 + e) = [0.26894142, 0.73105858].
        let want = [1.0, 0.0, 0.0, 0.2689414213699951, 0.7310585786300049, 0.0];
        close(&y[..6], &want);
        close(&y[6..], &ONE_TWO_THREE);
        // 2 queries, the last 2 of 3 keys (default offset 1): row 0 sees 2 columns, row 1 all 3.
        let y = softmax_reference(&Softmax::new(2, 3), &x[..6], Mask::causal(2));
        close(&y[..3], &[0.2689414213699951, 0.7310585786300049, 0.0]);
        close(&y[3..], &ONE_TWO_THREE);
        // Two heads of 2 queries: the query index is the row modulo seq_q.
        let y = softmax_reference(&Softmax::new(4, 3), &x[..3].repeat(4), Mask::causal_with_offset(2, 0));
        close(&y[..6], &[1.0, 0.0, 0.0, 0.2689414213699951, 0.7310585786300049, 0.0]);
        close(&y[6..], &[1.0, 0.0, 0.0, 0.2689414213699951, 0.7310585786300049, 0.0]);
    }

    #[test]
    fn fully_masked_rows_are_zeros() {
        // Three queries, one key (default offset -2): rows 0 and 1 see nothing.
        let y = softmax_reference(&Softmax::new(3, 1), &[5.0, 6.0, 7.0], Mask::causal(3));
        close(&y, &[0.0, 0.0, 1.0]);
        // An additive mask row of -inf, broadcast over two heads.
        let inf = f32::NEG_INFINITY;
        let mask = [inf, inf, inf, 0.0, inf, 0.0];
        let x = [1.0, 2.0, 3.0].repeat(4);
        let y = softmax_reference(&Softmax::new(4, 3), &x, Mask::additive(&mask[..], 2));
        // Row 1 of the mask keeps columns 0 and 2: softmax([1, 3]) = [1, e^2] / (1 + e^2).
        let kept = [0.11920292202211755, 0.0, 0.8807970779778823];
        close(&y, &[[0.0; 3], kept, [0.0; 3], kept].concat());
    }

    #[test]
    fn an_additive_mask_adds_before_the_exponential() {
        // 1 + [1, 0, -1] = [2, 2, 2] -> uniform.
        let y = softmax_reference(
            &Softmax::new(1, 3),
            &[1.0, 2.0, 3.0],
            Mask::additive(&[1.0, 0.0, -1.0][..], 1),
        );
        close(&y, &[1.0 / 3.0; 3]);
    }

    #[test]
    fn strided_rows_skip_the_gaps() {
        let x = [1.0, 2.0, 3.0, 99.0, 3.0, 2.0, 1.0, 99.0];
        let y = softmax_reference(&Softmax::new(2, 3).with_x_stride(4), &x, Mask::None);
        close(&y[..3], &ONE_TWO_THREE);
        close(&y[3..], &[ONE_TWO_THREE[2], ONE_TWO_THREE[1], ONE_TWO_THREE[0]]);
    }

    fn refused(shape: Softmax, x_len: usize, y_len: Option<usize>, mask: Mask<usize>) -> String {
        crate::error::shape_message(shape.check(x_len, y_len, &mask, |&m| m), "softmax")
    }

    #[test]
    fn bad_shapes_are_refused() {
        let s = Softmax::new(4, 8);
        assert!(s.check(32, Some(32), &Mask::<usize>::None, |&m| m).is_ok());
        assert!(refused(s, 31, Some(32), Mask::None).contains("x holds 31"));
        assert!(refused(s, 32, Some(31), Mask::None).contains("y holds 31"));
        assert!(refused(s.with_x_stride(7), 64, Some(32), Mask::None).contains("stride 7"));
        assert!(refused(s.with_scale(f32::NAN), 32, Some(32), Mask::None).contains("scale"));
        assert!(refused(s, 32, Some(32), Mask::causal(3)).contains("multiple of seq_q"));
        assert!(refused(s, 32, Some(32), Mask::causal(0)).contains("seq_q"));
        assert!(refused(s, 32, Some(32), Mask::causal_with_offset(4, i64::MIN)).contains("offset"));
        assert!(refused(s, 32, Some(32), Mask::additive(15, 2)).contains("15 elements"));
        assert!(refused(s, 32, Some(32), Mask::additive(24, 3)).contains("multiple of mask_rows"));
        assert!(refused(s.with_x_stride(9).with_y_stride(10), 40, None, Mask::None).contains("in place"));
        // In place with strides: only x must be big enough.
        assert!(s.with_x_stride(9).check(35, None, &Mask::<usize>::None, |&m| m).is_ok());
        // Empty shapes are fine (nothing to do).
        assert!(Softmax::new(0, 8).check(0, Some(0), &Mask::<usize>::causal(2), |&m| m).is_ok());
    }

    #[test]
    fn the_block_covers_a_row_in_registers() {
        // The generic entry point: ITEMS elements a thread, whole warps, at most 1024.
        let generic = |cols: usize, warp: usize| {
            let plan = Plan::new(cols, 4, warp, true, 1.0);
            assert!(!plan.fast);
            plan.block
        };
        assert_eq!(generic(4096, 32), 256);
        assert_eq!(generic(4096, 64), 256);
        assert_eq!(generic(4097, 64), 320);
        assert_eq!(generic(7, 64), 64);
        assert_eq!(generic(1 << 20, 32), 1024);
        for cols in [1, 7, 127, 4097, 16384] {
            for warp in [32, 64] {
                assert!(generic(cols, warp) * ITEMS >= cols);
            }
        }
    }

    #[test]
    fn the_fast_entry_point_takes_unmasked_rows_that_fit() {
        // The benchmark's rows: 256 threads x 16 f32, 128 threads x 32 f16/bf16.
        assert_eq!(Plan::new(4096, 4, 32, false, 0.088), Plan { fast: true, block: 256 });
        assert_eq!(Plan::new(4096, 2, 32, false, 0.088), Plan { fast: true, block: 128 });
        assert_eq!(Plan::new(4096, 2, 64, false, 1.0), Plan { fast: true, block: 128 });
        // Short rows: one warp.
        assert_eq!(Plan::new(7, 2, 64, false, 1.0), Plan { fast: true, block: 64 });
        assert_eq!(Plan::new(1, 4, 32, false, 1.0), Plan { fast: true, block: 32 });
        // 16-bit rows up to 8192, f32 up to 4096; longer ones go to the generic entry point.
        assert_eq!(Plan::new(8192, 2, 32, false, 1.0), Plan { fast: true, block: 256 });
        assert_eq!(Plan::new(8193, 2, 32, false, 1.0), Plan { fast: false, block: 544 });
        assert_eq!(Plan::new(4097, 4, 32, false, 1.0), Plan { fast: false, block: 288 });
        assert_eq!(Plan::new(4097, 2, 64, false, 1.0), Plan { fast: true, block: 192 });
        // An additive mask, or a scale that is not a positive normal f32, takes the generic one.
        assert!(!Plan::new(4096, 2, 32, true, 1.0).fast);
        for scale in [0.0, -0.0, -1.0, 1e-40, 1e31] {
            assert!(!Plan::new(4096, 2, 32, false, scale).fast, "scale {scale}");
        }
        // Every fast block holds its row: FAST_BYTES / size elements a thread.
        for cols in 1..=8192 {
            for (size, warp) in [(4, 32), (4, 64), (2, 32), (2, 64)] {
                let plan = Plan::new(cols, size, warp, false, 0.5);
                if plan.fast {
                    assert!(plan.block * (FAST_BYTES / size) >= cols && plan.block <= FAST_BLOCK);
                    assert_eq!(plan.block % warp, 0);
                } else {
                    assert!(cols > FAST_BYTES / size * FAST_BLOCK);
                }
            }
        }
    }
}
