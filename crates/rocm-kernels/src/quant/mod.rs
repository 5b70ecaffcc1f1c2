//! Block-quantised weights: CPU codecs for ggml's `q8_0`, `q4_0` and `mxfp4` blocks, its
//! k-quants `q4_K`, `q5_K` and `q6_K`, and the OCP Microscaling (MX) formats v1.0, plus the GPU
//! kernels that read them.
//!
//! Most formats here store blocks of [`QK`] = 32 consecutive elements with one shared scale:
//!
//! | format | bytes/block | layout | element |
//! |---|---|---|---|
//! | ggml `q8_0` (type 8) | [`Q8_0_BLOCK_BYTES`] = 34 | f16 `d` (LE), 32 x i8 `q` | `d * q` |
//! | ggml `q4_0` (type 2) | [`Q4_0_BLOCK_BYTES`] = 18 | f16 `d` (LE), 16 bytes | `d * (q - 8)`, `q` a nibble |
//! | ggml `mxfp4` (type 39) | [`MXFP4_GGUF_BLOCK_BYTES`] = 17 | E8M0 scale, 16 bytes | E2M1 code x scale |
//! | MXFP6 (ours, packed) | [`MXFP6_BLOCK_BYTES`] = 25 | E8M0 scale, 24 bytes | E2M3 / E3M2 code x scale |
//!
//! The k-quants ([`kquant`]) store super-blocks of [`QK_K`] = 256 elements: f16 super-block
//! scales and small integer scales per 32- or 16-element sub-block (layouts in [`kquant`]):
//!
//! | format | bytes/block | sub-blocks | element |
//! |---|---|---|---|
//! | ggml `q4_K` (type 12) | [`Q4_K_BLOCK_BYTES`] = 144 | 8 x 32 | `d * sc * q - dmin * m`, `q` 4 bits |
//! | ggml `q5_K` (type 13) | [`Q5_K_BLOCK_BYTES`] = 176 | 8 x 32 | `d * sc * q - dmin * m`, `q` 5 bits |
//! | ggml `q6_K` (type 14) | [`Q6_K_BLOCK_BYTES`] = 210 | 16 x 16 | `d * sc * (q - 32)`, `q` 6 bits |
//!
//! (`sc` and `m` are 6-bit sub-block scales and mins for `q4_K`/`q5_K`, `sc` an i8 for `q6_K`.)
//!
//! Nibble order (q4_0 and mxfp4 alike): element `j` (0..16) is the low nibble of payload byte
//! `j`, element `j + 16` its high nibble. MXFP6 packing: the 32 six-bit codes form a 192-bit
//! little-endian integer in bytes 1..25, code `i` in bits `6i..6i+6`; so each 3 bytes hold 4
//! codes: `b0 = c0 | c1 << 6`, `b1 = c1 >> 2 | c2 << 4`, `b2 = c2 >> 4 | c3 << 2`.
//!
//! - [`mx`] holds the spec-level codec: E8M0 scales, the E2M1 / E2M3 / E3M2 element types, and
//!   the encoder (shared exponent `floor(log2(amax)) - emax`, round-to-nearest-even, saturation).
//! - [`ggml`] holds `q8_0` and `q4_0`, as ggml defines them.
//! - [`kquant`] holds `q4_K`, `q5_K` and `q6_K`: ggml's decoding, and an encoder of our own.
//! - The byte-level functions re-exported here (`dequantize_*`, `quantize_*`) are what GGUF
//!   loaders and writers call.
//! - [`dequant`] (`kernels/dequant.hip`) and [`mxfp`] (`kernels/mxfp.hip`) are the GPU kernels:
//!   dequantisation of every format, and MXFP4/MXFP6 matrix-vector and matrix-matrix products.
//! - [`dequant_gemm`]: products of many tokens (prefill) as dequantisation + GEMM, overlapped
//!   on a second stream.
//! - [`matvec`] (`kernels/quant_matvec.hip`): matrix-vector products with weights in ggml's
//!   `q8_0`, `q4_0`, `q4_K`, `q5_K` and `q6_K` blocks, for one vector or a small batch.
//! - [`mxfp4_tiled`] (`kernels/mxfp4_tiled.hip`): MXFP4 weights re-laid out once for the
//!   matrix-vector product, the fast path for decoding.
//! - [`q4k_tiled`] (`kernels/q4k_tiled.hip`): `q4_K` weights re-laid out the same way, for the
//!   products of one vector and of up to 32 a launch on NVIDIA's matrix cores; [`q8_0_tiled`]
//!   (`kernels/q8_0_tiled.hip`) `q8_0` weights the same way; [`tiled`] holds what the launchers
//!   share.
//! - [`quant_gemm`] (`kernels/quant_gemm_wgmma.hip`, Hopper): products of many tokens that
//!   decode the blocks in a matrix-core GEMM's own tile loop, so the weight never exists in `T`.

pub mod dequant;
pub mod dequant_gemm;
pub mod ggml;
pub mod k_split;
pub mod kquant;
pub mod matvec;
pub mod mx;
pub mod mxfp;
pub mod mxfp4_tiled;
pub mod q4k_tiled;
pub mod q8_0_tiled;
pub mod quant_gemm;
pub mod tiled;

#[cfg(test)]
mod kquant_tests;
#[cfg(test)]
mod tests;

pub use dequant::{BlockFormat, dequantize, dequantize_into, dequantize_range, dequantize_reference};
pub use dequant_gemm::{OVERLAP_BLOCKS, Overlap, dequant_gemm};
pub use ggml::{dequantize_q4_0, dequantize_q8_0, quantize_q4_0, quantize_q8_0};
pub use k_split::{K_SPLIT_ENV, SplitScratch};
pub use kquant::{
    Q4_K_BLOCK_BYTES, Q5_K_BLOCK_BYTES, Q6_K_BLOCK_BYTES, QK_K, dequantize_q4_k, dequantize_q5_k,
    dequantize_q6_k, quantize_q4_k, quantize_q5_k, quantize_q6_k,
};
pub use matvec::{
    GgmlFormat, MAX_PRODUCTS, ProductShape, QMVM_GLU_ENV, QuantMatvecReference, QuantProduct,
    check_quant_matvec, check_quant_matvec_group, quant_matvec, quant_matvec_glu, quant_matvec_glu_fuses,
    quant_matvec_group, quant_matvec_group_in, quant_matvec_on_matrix_cores, quant_matvec_reference,
};
pub use mx::{
    E8M0_NAN, Fp6, MxElem, dequantize_mxfp4_gguf, dequantize_mxfp6, e8m0_to_f32, quantize_mxfp4_gguf,
    quantize_mxfp6,
};
pub use mxfp::{
    MxFormat, mx_matmul, mx_matmul_reference, mx_matvec, mx_matvec_group, mx_matvec_group_in,
    mx_matvec_group_on_matrix_cores,
};
pub use mxfp4_tiled::{
    DeviceTiledMxfp4, MAX_TILED_BATCH, MAX_TILED_OUTPUTS, TILE_ROWS as MXFP4_TILE_ROWS, TiledMxfp4,
    TiledNorm, TiledOutput, dequantize_tiled, mx_matvec_tiled, mx_matvec_tiled_fused,
    mx_matvec_tiled_portable, mx_matvec_tiled_rows, mx_matvec_tiled_split, mx_matvec_tiled_swiglu,
    x16_rounding_unit,
};
pub use q4k_tiled::{
    DeviceTiledQ4k, TiledQ4k, dequantize_tiled_q4k, q4k_matvec_tiled, q4k_matvec_tiled_fused,
    q4k_matvec_tiled_split, q4k_tiled_on_matrix_cores,
};
pub use q8_0_tiled::{
    DeviceTiledQ8, TiledQ8, dequantize_tiled_q8, q8_0_matvec_tiled, q8_0_matvec_tiled_fused,
    q8_0_matvec_tiled_rows, q8_0_matvec_tiled_split, q8_0_matvec_tiled_swiglu, q8_0_tiled_on_matrix_cores,
};
pub use quant_gemm::{
    QUANT_GEMM_FORMATS, QUANT_GEMM_TILE_TOKENS, quant_gemm, quant_gemm_grid, quant_gemm_runs,
};

/// Elements per block, in every format here but the k-quants (ggml's `QK8_0`, `QK4_0`,
/// `QK_MXFP4`; the MX spec's block size `k`).
pub const QK: usize = 32;
/// Bytes of a ggml `block_q8_0`: f16 scale + 32 i8.
pub const Q8_0_BLOCK_BYTES: usize = 34;
/// Bytes of a ggml `block_q4_0`: f16 scale + 16 bytes of nibbles.
pub const Q4_0_BLOCK_BYTES: usize = 18;
/// Bytes of a ggml `block_mxfp4` (GGUF type 39): E8M0 scale + 16 bytes of E2M1 nibbles.
pub const MXFP4_GGUF_BLOCK_BYTES: usize = 17;
/// Bytes of a packed MXFP6 block: E8M0 scale + 32 six-bit codes in 24 bytes.
pub const MXFP6_BLOCK_BYTES: usize = 25;

/// Lengths that do not fit a block format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The packed bytes are not a whole number of blocks.
    #[error("{len} bytes are not a whole number of {block_bytes}-byte blocks")]
    PartialBlock { len: usize, block_bytes: usize },
    /// The values to quantise are not a whole number of blocks (32 elements, or 256 for the
    /// k-quants).
    #[error("{len} values are not a whole number of {block_values}-element blocks")]
    PartialValues { len: usize, block_values: usize },
    /// The output does not hold exactly what the input decodes or encodes to.
    #[error("output holds {got} {unit}, expected {expected}")]
    OutLength { expected: usize, got: usize, unit: &'static str },
}

/// One block of a format: how many values it holds and how many bytes it takes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockShape {
    pub values: usize,
    pub bytes: usize,
}

impl BlockShape {
    /// Number of blocks in `bytes` packed bytes, checking that `out` holds exactly what they
    /// decode to.
    pub(crate) fn blocks_to_decode(self, bytes: usize, out: usize) -> Result<usize, QuantError> {
        if !bytes.is_multiple_of(self.bytes) {
            return Err(QuantError::PartialBlock { len: bytes, block_bytes: self.bytes });
        }
        let blocks = bytes / self.bytes;
        let expected = blocks * self.values;
        if out != expected {
            return Err(QuantError::OutLength { expected, got: out, unit: "values" });
        }
        Ok(blocks)
    }

    /// Number of blocks in `values` values, checking that `out` holds exactly the bytes they
    /// encode to.
    pub(crate) fn blocks_to_encode(self, values: usize, out: usize) -> Result<usize, QuantError> {
        if !values.is_multiple_of(self.values) {
            return Err(QuantError::PartialValues { len: values, block_values: self.values });
        }
        let blocks = values / self.values;
        let expected = blocks * self.bytes;
        if out != expected {
            return Err(QuantError::OutLength { expected, got: out, unit: "bytes" });
        }
        Ok(blocks)
    }
}

/// [`BlockShape::blocks_to_decode`] for a format of [`QK`]-element blocks of `block_bytes` bytes.
pub(crate) fn check_decode(bytes: usize, block_bytes: usize, out: usize) -> Result<usize, QuantError> {
    BlockShape { values: QK, bytes: block_bytes }.blocks_to_decode(bytes, out)
}

/// [`BlockShape::blocks_to_encode`] for a format of [`QK`]-element blocks of `block_bytes` bytes.
pub(crate) fn check_encode(values: usize, block_bytes: usize, out: usize) -> Result<usize, QuantError> {
    BlockShape { values: QK, bytes: block_bytes }.blocks_to_encode(values, out)
}
