//! `softmax` (`kernels/softmax.hip`): not written yet.
