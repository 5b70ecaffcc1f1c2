//! `axpy`: `y = a * x + y` (`kernels/axpy.hip`).

use rocm_runtime::DeviceBuffer;

use crate::KernelModule;
use crate::error::{Result, ensure};
use crate::launchable::{Launchable, Needs};
use crate::loader;

/// `y[i] = a * x[i] + y[i]` (one fused multiply-add), queued on `y`'s stream. `x` must belong
/// to the same stream and have `y`'s length.
pub fn axpy_f32(a: f32, x: &DeviceBuffer<f32>, y: &mut DeviceBuffer<f32>) -> Result<()> {
    ensure(x.len() == y.len(), "axpy", || format!("x has {} elements, y has {}", x.len(), y.len()))?;
    if y.is_empty() {
        return Ok(());
    }
    let stream = y.stream().clone();
    let kernel = loader::kernel(&stream, KernelModule::Axpy, "rf_axpy_f32")?;
    let config = loader::grid_stride(&stream, &kernel, y.len());
    let n = y.len() as u64;
    // SAFETY: rf_axpy_f32(float a, const float* x, float* y, u64 n) touches x[0..n) and
    // y[0..n); both buffers hold n floats (checked above) and the builder checks their stream.
    unsafe { stream.launch(&kernel).arg(a).buffer(x).buffer_mut(y).arg(n).launch(config)? };
    Ok(())
}

/// CPU reference of [`axpy_f32`], with the same single rounding (`mul_add`).
pub fn axpy_reference(a: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len());
    for (y, &x) in y.iter_mut().zip(x) {
        *y = a.mul_add(x, *y);
    }
}

/// The entries [`axpy_f32`] launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    vec![Launchable::new(KernelModule::Axpy, "rf_axpy_f32", Needs::Nothing)]
}
