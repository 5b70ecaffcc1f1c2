//! `fill`: every element set to one value (`kernels/fill.hip`).

use rocm_runtime::DeviceBuffer;

use crate::KernelModule;
use crate::error::Result;
use crate::launchable::{Launchable, Needs};
use crate::loader;

/// `out[i] = value` for every element, queued on `out`'s stream.
pub fn fill_f32(out: &mut DeviceBuffer<f32>, value: f32) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let stream = out.stream().clone();
    let kernel = loader::kernel(&stream, KernelModule::Fill, "rf_fill_f32")?;
    let config = loader::grid_stride(&stream, &kernel, out.len());
    let n = out.len() as u64;
    // SAFETY: rf_fill_f32(float* out, float value, u64 n) writes out[0..n), and `out` holds n floats.
    unsafe { stream.launch(&kernel).buffer_mut(out).arg(value).arg(n).launch(config)? };
    Ok(())
}

/// CPU reference of [`fill_f32`].
pub fn fill_reference(out: &mut [f32], value: f32) {
    out.fill(value);
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    vec![Launchable::new(KernelModule::Fill, "rf_fill_f32", Needs::Nothing)]
}
