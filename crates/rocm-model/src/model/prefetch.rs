//! [`WeightPrefetch`]: which projection weights a decode step asks the device's L2 for, and
//! when (docs/model.md, "Weights into the L2 ahead of their products").
//!
//! Between its products a decode step runs kernels that leave the DRAM nearly idle (RoPE, the
//! KV write, attention at a short context, the norms, SwiGLU). Each of the three points below
//! queues an `l2_prefetch` of the next products' weights, so that the DRAM streams them while
//! those kernels run and the products find part of their bytes in the L2. The amounts are
//! bytes; a point with 0 queues nothing.

use rocm_kernels::gemm::GemmElement;
use rocm_kernels::l2_prefetch::{L2Range, l2_prefetch};

use super::error::Result;
use super::linear::Linear;

/// The environment variable that overrides [`WeightPrefetch::for_l2`]: `0` turns prefetching
/// off; three byte counts in MiB, `attention,mlp,next` (fractions allowed), set the points.
pub const WEIGHT_PREFETCH_ENV: &str = "ROCMFORGE_WEIGHT_PREFETCH";

/// Bytes asked for at each point of a layer (the weights in the order their products read
/// them, each from its start, until the budget is spent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WeightPrefetch {
    /// After RoPE, before the KV write and attention: the output projection, then the MLP's
    /// first product (gate, or glm4's stacked gate and up).
    pub attention: usize,
    /// After the gate and up products, before SwiGLU: the down projection.
    pub mlp: usize,
    /// After the down projection: the next layer's Q, K and V.
    pub next_layer: usize,
}

impl WeightPrefetch {
    pub const OFF: WeightPrefetch = WeightPrefetch { attention: 0, mlp: 0, next_layer: 0 };

    /// The default for a device with an L2 of `l2_bytes`, or [`WEIGHT_PREFETCH_ENV`]'s
    /// setting when it is set (a malformed value is an error naming it).
    pub fn for_l2(l2_bytes: usize) -> Result<WeightPrefetch> {
        match std::env::var(WEIGHT_PREFETCH_ENV) {
            Ok(v) => Self::parse(&v),
            Err(_) => {
                Ok(WeightPrefetch { attention: l2_bytes / 2, mlp: l2_bytes / 4, next_layer: l2_bytes / 4 })
            }
        }
    }

    /// `0`, or `attention,mlp,next` in MiB.
    pub fn parse(v: &str) -> Result<WeightPrefetch> {
        let bad = || {
            super::error::ModelError::BadInput(format!(
                "{WEIGHT_PREFETCH_ENV}={v:?}: expected 0, or three sizes in MiB (attention,mlp,next)"
            ))
        };
        if v.trim() == "0" {
            return Ok(Self::OFF);
        }
        let mib: Vec<f64> = v
            .split(',')
            .map(|s| s.trim().parse::<f64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad())?;
        let [a, m, n] = mib[..] else { return Err(bad()) };
        if mib.iter().any(|x| !x.is_finite() || *x < 0.0 || *x > 1e6) {
            return Err(bad());
        }
        let bytes = |x: f64| (x * 1024.0 * 1024.0) as usize;
        Ok(WeightPrefetch { attention: bytes(a), mlp: bytes(m), next_layer: bytes(n) })
    }
}

/// Queues a prefetch of `weights`' bytes in order, each from its start, `budget` bytes in all:
/// one launch for the block-format weights and one for the dense ones (whichever there are).
pub(super) fn prefetch<T: GemmElement>(weights: &[&Linear<T>], budget: usize) -> Result<()> {
    let (mut blocks, mut dense) = (Vec::new(), Vec::new());
    let mut left = budget;
    for w in weights {
        if left == 0 {
            break;
        }
        match w {
            Linear::Blocks { blocks: b, .. } => {
                let r = L2Range::prefix(&**b, left);
                left -= r.elems.len();
                blocks.push(r);
            }
            Linear::Dense { w, .. } => {
                let r = L2Range::prefix(w, left / size_of::<T>());
                left -= r.elems.len() * size_of::<T>();
                dense.push(r);
            }
        }
    }
    l2_prefetch(&blocks)?;
    l2_prefetch(&dense)?;
    Ok(())
}
