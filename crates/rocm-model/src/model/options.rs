//! [`LoadOptions`]: how [`super::Model::load_with`] keeps a model's weights on the device.

/// How a model's weights are kept on the device ([`super::Model::load_with`]); the default is
/// what [`super::Model::load`] does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The layout of MXFP4 projections.
    pub mxfp4: Mxfp4Layout,
    /// Whether q4_K layers also keep a tiled copy for one-token passes.
    pub q4k: Q4kLayout,
    /// Whether q8_0 layers also keep a tiled copy for one-token passes.
    pub q8_0: Q8Layout,
}

/// Where a layer's q8_0 projections are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Q8Layout {
    /// As the file stores them (GGUF `block_q8_0` rows), for every pass.
    #[default]
    Rows,
    /// The rows, and beside them a copy re-laid out at load for the tiled kernel
    /// (`rocm_kernels::quant::TiledQ8`, stacked as [`Q4kLayout::TiledCopy`]'s) where the device
    /// runs it (NVIDIA matrix cores, f16 or bf16): one-token passes fold the layer's norms, SwiGLU
    /// and residual adds into its products on the copy, every other pass reads the rows. Twice
    /// the projections' device bytes: a measurement of the tiled q8_0 layer
    /// (docs/kernels/q8_0_tiled.md), not a way to hold a model ([`Q8Layout::Tiled`] holds the
    /// file's bytes).
    TiledCopy,
    /// Re-laid out once at load for the tiled kernel (`rocm_kernels::quant::TiledQ8`: the file's
    /// bytes; Q, K and V stacked into one weight, gate and up into another) where a projection's
    /// input width is a multiple of 256, as [`Mxfp4Layout::Tiled`] does for MXFP4: products of
    /// up to 8 tokens run on it (one token with the layer's norms, SwiGLU and residual adds
    /// folded in; several as the matrix cores' columns on NVIDIA, the portable kernel elsewhere),
    /// more dequantise the part's rows from the tiles and run the GEMM. For decoding one
    /// sequence: a Llama-3-8B layer at batch 1 in 93.5-94.3 us on an H100 against the rows'
    /// 105-106, but 8 sequences take 3 times the rows' time, 32 about 2.5 times, a 512-token
    /// prefill 1.2 times (docs/kernels/q8_0_tiled.md, version 2).
    Tiled,
}

/// Where a layer's q4_K projections are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Q4kLayout {
    /// As the file stores them (GGUF `block_q4_K` rows), for every pass.
    #[default]
    Rows,
    /// The rows, and beside them a copy re-laid out at load for the tiled kernel
    /// (`rocm_kernels::quant::TiledQ4k`: Q, K and V stacked, gate and up stacked, O and down
    /// alone) where the device runs it (NVIDIA matrix cores, f16 or bf16): one-token passes fold
    /// the layer's norms and residual adds into its products on the copy, every other pass reads
    /// the rows. Twice the projections' device bytes: a measurement of the tiled q4_K layer
    /// (docs/kernels/q4k_tiled.md: at batch 1 on an H100, 60-61 us a Llama-3-8B layer against
    /// the rows' 64-66), not a way to hold a model; the tiled layout alone waits for its
    /// several-vector loop to reach the rows' speed at batches 8 and 32.
    TiledCopy,
}

/// Where a layer's MXFP4 projections are kept. Either way the device holds the file's bytes
/// (the tiled layout pads rows to 256 elements and the last rows to 16, nothing at Llama's
/// shapes) and every product has the same bits as the other path's up to the order of its sums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mxfp4Layout {
    /// As the file stores them (GGUF `block_mxfp4` rows): every token count has a kernel that
    /// reads the blocks (fused products up to 32 tokens, the mixed-input GEMM for some prefills).
    #[default]
    Rows,
    /// Re-laid out once at load for the decode kernel (`rocm_kernels::quant::TiledMxfp4`, Q, K
    /// and V stacked into one weight, gate and up into another): products of up to 32 tokens run
    /// on it (an 8B layer at batch 1: 74.5 -> 57.7 us on an H200, docs/model.md; several
    /// sequences take the kernel's several-vector loops, not measured yet). Prefills dequantise
    /// the part's rows from the tiles and run the GEMM, 22% slower than the rows' path at 512
    /// tokens (before the dequantisation's second version). For decoding.
    Tiled,
}
