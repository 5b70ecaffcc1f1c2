//! `swiglu` (`kernels/swiglu.hip`): not written yet.
