//! `rope` (`kernels/rope.hip`): not written yet.
