//! Element types the kernels store: f32, f16 and bf16. Kernels load them to f32, compute in
//! f32 and store back; the entry point for each is suffixed with [`Dtype::NAME`].

use rocm_runtime::{DeviceCopy, bf16, f16};

/// A storage type a kernel is instantiated for (`RF_FOR_EACH_DTYPE` in `rocmforge.h`).
pub trait Dtype: DeviceCopy + PartialEq + std::fmt::Debug {
    /// Suffix of the kernel entry points for this type: `f32`, `f16`, `bf16`.
    const NAME: &'static str;
    fn to_f32(self) -> f32;
    /// Round-to-nearest-even, as the kernels' stores do.
    fn from_f32(value: f32) -> Self;
}

impl Dtype for f32 {
    const NAME: &'static str = "f32";
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl Dtype for f16 {
    const NAME: &'static str = "f16";
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl Dtype for bf16 {
    const NAME: &'static str = "bf16";
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

/// `prefix_<dtype>`: the entry point of a kernel instantiated for `T`.
pub fn kernel_name<T: Dtype>(prefix: &str) -> String {
    format!("{prefix}_{}", T::NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_round_trips() {
        assert_eq!(kernel_name::<bf16>("rf_rmsnorm"), "rf_rmsnorm_bf16");
        assert_eq!(f16::from_f32(1.5).to_f32(), 1.5);
        assert_eq!(<bf16 as Dtype>::from_f32(1.0 + 1.0 / 256.0).to_f32(), 1.0, "ties to even");
    }
}
