//! `rmsnorm` (`kernels/rmsnorm.hip`): not written yet.
