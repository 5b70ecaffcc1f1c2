//! `causal_mask` (`kernels/causal_mask.hip`): not written yet.
