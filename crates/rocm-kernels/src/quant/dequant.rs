//! `dequant` (`kernels/dequant.hip`): block-quantised weights to f32, f16 or bf16 on the GPU.
//!
//! [`dequantize`] decodes `blocks.len() / block_bytes` blocks of a [`BlockFormat`] into
//! `out`, [`BlockFormat::block_elems`] elements a block (32, or 256 for the k-quants), exactly as
//! the CPU codec does ([`BlockFormat::dequantize`]): every element is the codec's f32 value,
//! rounded once to the storage type. (On a device that flushes f32 subnormals, MX results below
//! 2^-126 may read 0; no other format produces f32 subnormals.)
//!
//! [`dequantize_reference`] is the CPU reference: the codec's f32 values rounded to `T`.

use rocm_runtime::{DeviceBuffer, LaunchConfig};

use super::mx::{self, Fp6};
use super::{
    MXFP4_GGUF_BLOCK_BYTES, MXFP6_BLOCK_BYTES, Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK, QuantError, ggml,
    kquant,
};
use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader;

const KERNEL: &str = "dequant";
const MODULE: KernelModule = KernelModule::Dequant;

/// Elements a thread block of the kernel stages and decodes at a time: 256 blocks of 32, or 32
/// k-quant super-blocks.
const TILE_ELEMS: usize = crate::abi::dequant::RF_DEQUANT_TILE_ELEMS as usize;

/// The launch of the tiled kernel: 256 threads a block (fewer if the kernel allows fewer; the
/// kernel takes any block size), one block per tile of `tile_blocks` quant blocks, at most 16
/// blocks per compute unit (the kernel strides over the tiles).
fn tile_config(nblocks: usize, tile_blocks: usize, max_threads: u32, compute_units: u32) -> LaunchConfig {
    let threads = 256.min(max_threads).max(1);
    let max_blocks = compute_units.saturating_mul(16).max(1);
    let mut config = LaunchConfig::linear(nblocks.div_ceil(tile_blocks), 1, max_blocks);
    config.block = [threads, 1, 1];
    config
}

/// A block-quantised storage format: blocks of [`BlockFormat::block_elems`] elements (32, or a
/// 256-element super-block for ggml's k-quants) of [`BlockFormat::block_bytes`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockFormat {
    /// ggml `q8_0` (GGUF type 8): f16 scale, 32 x i8.
    Q8_0,
    /// ggml `q4_0` (GGUF type 2): f16 scale, 32 nibbles, `d * (q - 8)`.
    Q4_0,
    /// ggml `mxfp4` (GGUF type 39): E8M0 scale, 32 E2M1 nibbles.
    Mxfp4Gguf,
    /// Packed MXFP6: E8M0 scale, 32 six-bit codes in 24 bytes.
    Mxfp6(Fp6),
    /// ggml `q4_K` (GGUF type 12): 256-element super-blocks of 4-bit codes with 6-bit
    /// sub-block scales and mins, 144 bytes.
    Q4K,
    /// ggml `q5_K` (GGUF type 13): as `q4_K` with a fifth bit per code, 176 bytes.
    Q5K,
    /// ggml `q6_K` (GGUF type 14): 256-element super-blocks of 6-bit codes with i8 sub-block
    /// scales, 210 bytes.
    Q6K,
}

impl BlockFormat {
    /// Every format.
    pub const ALL: [BlockFormat; 8] = [
        BlockFormat::Q8_0,
        BlockFormat::Q4_0,
        BlockFormat::Mxfp4Gguf,
        BlockFormat::Mxfp6(Fp6::E2M3),
        BlockFormat::Mxfp6(Fp6::E3M2),
        BlockFormat::Q4K,
        BlockFormat::Q5K,
        BlockFormat::Q6K,
    ];

    /// The formats GGUF files store (ggml's types; MXFP6 is this crate's own): what rocm-model
    /// keeps on the device.
    pub const GGUF: [BlockFormat; 6] = [
        BlockFormat::Q8_0,
        BlockFormat::Q4_0,
        BlockFormat::Q4K,
        BlockFormat::Q5K,
        BlockFormat::Q6K,
        BlockFormat::Mxfp4Gguf,
    ];

    /// Bytes of one block.
    pub const fn block_bytes(self) -> usize {
        match self {
            BlockFormat::Q8_0 => Q8_0_BLOCK_BYTES,
            BlockFormat::Q4_0 => Q4_0_BLOCK_BYTES,
            BlockFormat::Mxfp4Gguf => MXFP4_GGUF_BLOCK_BYTES,
            BlockFormat::Mxfp6(_) => MXFP6_BLOCK_BYTES,
            BlockFormat::Q4K => kquant::Q4_K_BLOCK_BYTES,
            BlockFormat::Q5K => kquant::Q5_K_BLOCK_BYTES,
            BlockFormat::Q6K => kquant::Q6_K_BLOCK_BYTES,
        }
    }

    /// Elements of one block: [`QK`] = 32, or [`kquant::QK_K`] = 256 for the k-quants.
    pub const fn block_elems(self) -> usize {
        match self {
            BlockFormat::Q8_0 | BlockFormat::Q4_0 | BlockFormat::Mxfp4Gguf | BlockFormat::Mxfp6(_) => QK,
            BlockFormat::Q4K | BlockFormat::Q5K | BlockFormat::Q6K => kquant::QK_K,
        }
    }

    /// The name the kernels use for the format (`rf_dequant_<name>_<dt>`).
    pub const fn name(self) -> &'static str {
        match self {
            BlockFormat::Q8_0 => "q8_0",
            BlockFormat::Q4_0 => "q4_0",
            BlockFormat::Mxfp4Gguf => "mxfp4",
            BlockFormat::Mxfp6(Fp6::E2M3) => "mxfp6_e2m3",
            BlockFormat::Mxfp6(Fp6::E3M2) => "mxfp6_e3m2",
            BlockFormat::Q4K => "q4_k",
            BlockFormat::Q5K => "q5_k",
            BlockFormat::Q6K => "q6_k",
        }
    }

    /// Bytes that `elements` elements (a multiple of [`BlockFormat::block_elems`]) take, or
    /// `None` when they are not a whole number of blocks or the size overflows.
    pub fn bytes_for(self, elements: usize) -> Option<usize> {
        if !elements.is_multiple_of(self.block_elems()) {
            return None;
        }
        (elements / self.block_elems()).checked_mul(self.block_bytes())
    }

    /// CPU decoding (the codec in [`crate::quant`]).
    pub fn dequantize(self, blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        match self {
            BlockFormat::Q8_0 => ggml::dequantize_q8_0(blocks, out),
            BlockFormat::Q4_0 => ggml::dequantize_q4_0(blocks, out),
            BlockFormat::Mxfp4Gguf => mx::dequantize_mxfp4_gguf(blocks, out),
            BlockFormat::Mxfp6(kind) => mx::dequantize_mxfp6(kind, blocks, out),
            BlockFormat::Q4K => kquant::dequantize_q4_k(blocks, out),
            BlockFormat::Q5K => kquant::dequantize_q5_k(blocks, out),
            BlockFormat::Q6K => kquant::dequantize_q6_k(blocks, out),
        }
    }

    /// CPU encoding (the codec in [`crate::quant`]).
    pub fn quantize(self, values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
        match self {
            BlockFormat::Q8_0 => ggml::quantize_q8_0(values, out),
            BlockFormat::Q4_0 => ggml::quantize_q4_0(values, out),
            BlockFormat::Mxfp4Gguf => mx::quantize_mxfp4_gguf(values, out),
            BlockFormat::Mxfp6(kind) => mx::quantize_mxfp6(kind, values, out),
            BlockFormat::Q4K => kquant::quantize_q4_k(values, out),
            BlockFormat::Q5K => kquant::quantize_q5_k(values, out),
            BlockFormat::Q6K => kquant::quantize_q6_k(values, out),
        }
    }
}

/// Checks the lengths of a dequantisation without a device: `blocks_len` bytes must be whole
/// blocks and `out_len` exactly [`BlockFormat::block_elems`] elements a block. Returns the
/// number of blocks.
pub fn check_dequantize(format: BlockFormat, blocks_len: usize, out_len: usize) -> Result<usize> {
    let bb = format.block_bytes();
    ensure(blocks_len.is_multiple_of(bb), KERNEL, || {
        format!("{blocks_len} bytes are not a whole number of {}-byte {} blocks", bb, format.name())
    })?;
    let blocks = blocks_len / bb;
    let elems = format.block_elems();
    ensure(blocks.checked_mul(elems) == Some(out_len), KERNEL, || {
        format!("out has {out_len} elements, {blocks} {} blocks decode to {}", format.name(), blocks * elems)
    })?;
    Ok(blocks)
}

/// Decodes `blocks` (whole blocks of `format`) into `out` ([`BlockFormat::block_elems`] elements
/// a block), queued on `out`'s stream; `blocks` must belong to it.
pub fn dequantize<T: Dtype>(
    format: BlockFormat,
    blocks: &DeviceBuffer<u8>,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    let nblocks = check_dequantize(format, blocks.len(), out.len())?;
    launch_dequantize(format, blocks, 0, nblocks, out)
}

/// [`dequantize`] into the first elements of `out`, which may be longer: one scratch buffer,
/// as large as the largest weight, serves weights of several sizes without an allocation per
/// product (a graph capture allows none). Returns the elements written.
pub fn dequantize_into<T: Dtype>(
    format: BlockFormat,
    blocks: &DeviceBuffer<u8>,
    out: &mut DeviceBuffer<T>,
) -> Result<usize> {
    let elems = blocks.len() / format.block_bytes() * format.block_elems();
    ensure(elems <= out.len(), KERNEL, || {
        format!("out has {} elements, {} {} bytes decode to {elems}", out.len(), blocks.len(), format.name())
    })?;
    let nblocks = check_dequantize(format, blocks.len(), elems)?;
    launch_dequantize(format, blocks, 0, nblocks, out)?;
    Ok(elems)
}

/// Decodes the blocks `first_block .. first_block + out.len() / block_elems` of `blocks` into
/// `out` (whole blocks' worth of elements): some rows of a weight, say, when a product is split
/// in row blocks. Queued on `out`'s stream; `blocks` must belong to it.
pub fn dequantize_range<T: Dtype>(
    format: BlockFormat,
    blocks: &DeviceBuffer<u8>,
    first_block: usize,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    let (bb, elems) = (format.block_bytes(), format.block_elems());
    ensure(out.len().is_multiple_of(elems), KERNEL, || {
        format!("out has {} elements, not whole {}-element {} blocks", out.len(), elems, format.name())
    })?;
    let nblocks = out.len() / elems;
    let have = check_dequantize(format, blocks.len(), blocks.len() / bb * elems)?;
    ensure(first_block.checked_add(nblocks).is_some_and(|end| end <= have), KERNEL, || {
        format!("blocks {first_block}..+{nblocks} are past the {have} {} blocks given", format.name())
    })?;
    launch_dequantize(format, blocks, first_block, nblocks, out)
}

/// Queues the decoding of blocks `first .. first + nblocks` of `blocks` (checked to hold them)
/// into the first `nblocks * block_elems` elements of `out` (checked to hold them).
fn launch_dequantize<T: Dtype>(
    format: BlockFormat,
    blocks: &DeviceBuffer<u8>,
    first: usize,
    nblocks: usize,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    if nblocks == 0 {
        return Ok(());
    }
    ensure(out.device_ptr().is_multiple_of(16), KERNEL, || "out is not 16-byte aligned".into())?;
    let stream = out.stream().clone();
    let name = kernel_name::<T>(&format!("rf_dequant_{}", format.name()));
    let kernel = loader::kernel(&stream, MODULE, &name)?;
    let tile_blocks = TILE_ELEMS / format.block_elems();
    let config = tile_config(
        nblocks,
        tile_blocks,
        kernel.max_threads_per_block(),
        stream.backend().info().compute_units,
    );
    let start = blocks.device_ptr() + (first * format.block_bytes()) as u64;
    // SAFETY: rf_dequant_<fmt>_<T>(const u8* blocks, T* out, u64 nblocks) reads bytes
    // [0, nblocks * block_bytes) from its `blocks` pointer (16-byte loads only where that
    // pointer is 16-byte aligned and the whole vector lies in the range, byte loads otherwise;
    // any grid and block size) and writes out[0, E * nblocks) (E = block_elems) with 16-byte
    // stores (out is 16-byte aligned, checked above). The pointer is `first` blocks into
    // `blocks`, and the callers proved `first + nblocks` blocks within it (check_dequantize,
    // dequantize_range), and out.len() >= E * nblocks (equal for `dequantize`). `blocks` is
    // read only and distinct from `out` (a shared and a mutable borrow); the builder checks both
    // belong to the stream (`reads` names the buffer behind the offset pointer).
    unsafe {
        stream.launch(&kernel).reads(blocks).arg(start).buffer_mut(out).arg(nblocks as u64).launch(config)?;
    }
    Ok(())
}

/// CPU reference of [`dequantize`]: the codec's f32 values rounded once to `T`.
pub fn dequantize_reference<T: Dtype>(format: BlockFormat, blocks: &[u8]) -> Result<Vec<T>> {
    let mut values = vec![0.0f32; blocks.len() / format.block_bytes() * format.block_elems()];
    format
        .dequantize(blocks, &mut values)
        .map_err(|e| KernelError::Shape { kernel: KERNEL, message: e.to_string() })?;
    Ok(values.into_iter().map(T::from_f32).collect())
}

/// The entries this module launches ([`crate::launchable`]): every block format, every dtype.
pub(crate) fn launchable() -> Vec<Launchable> {
    BlockFormat::ALL.iter().flat_map(|f| every_dtype(MODULE, &format!("rf_dequant_{}", f.name()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocm_runtime::f16;

    #[test]
    fn lengths_are_checked_without_a_device() {
        assert_eq!(check_dequantize(BlockFormat::Q8_0, 68, 64).unwrap(), 2);
        assert_eq!(check_dequantize(BlockFormat::Mxfp6(Fp6::E2M3), 0, 0).unwrap(), 0);
        let err = check_dequantize(BlockFormat::Mxfp4Gguf, 18, 32).unwrap_err().to_string();
        assert!(err.contains("not a whole number of 17-byte mxfp4 blocks"), "{err}");
        let err = check_dequantize(BlockFormat::Q4_0, 36, 63).unwrap_err().to_string();
        assert!(err.contains("out has 63 elements"), "{err}");
        // k-quants: 256 elements a super-block.
        assert_eq!(check_dequantize(BlockFormat::Q5K, 2 * 176, 512).unwrap(), 2);
        let err = check_dequantize(BlockFormat::Q6K, 210, 32).unwrap_err().to_string();
        assert!(err.contains("out has 32 elements, 1 q6_k blocks decode to 256"), "{err}");
        let err = check_dequantize(BlockFormat::Q4K, 145, 256).unwrap_err().to_string();
        assert!(err.contains("not a whole number of 144-byte q4_k blocks"), "{err}");
    }

    #[test]
    fn format_names_and_sizes() {
        let names: Vec<_> =
            BlockFormat::ALL.iter().map(|f| (f.name(), f.block_elems(), f.block_bytes())).collect();
        assert_eq!(
            names,
            [
                ("q8_0", 32, 34),
                ("q4_0", 32, 18),
                ("mxfp4", 32, 17),
                ("mxfp6_e2m3", 32, 25),
                ("mxfp6_e3m2", 32, 25),
                ("q4_k", 256, 144),
                ("q5_k", 256, 176),
                ("q6_k", 256, 210),
            ]
        );
        assert_eq!(BlockFormat::Mxfp4Gguf.bytes_for(4096), Some(128 * 17));
        assert_eq!(BlockFormat::Q8_0.bytes_for(33), None);
        assert_eq!(BlockFormat::Q6K.bytes_for(4096), Some(16 * 210));
        assert_eq!(BlockFormat::Q4K.bytes_for(4096 + 32), None, "whole super-blocks only");
        // Every tile is whole 16-byte vectors (the kernel stages it with 16-byte loads).
        for f in BlockFormat::ALL {
            assert_eq!(TILE_ELEMS % f.block_elems(), 0, "{f:?}");
            assert_eq!(TILE_ELEMS / f.block_elems() * f.block_bytes() % 16, 0, "{f:?}");
        }
    }

    #[test]
    fn one_block_per_tile_up_to_16_per_compute_unit() {
        // 14336 x 4096 MXFP4 weights: 1835008 quant blocks, 7168 tiles; 132 SMs cap it at 2112.
        let c = tile_config(14336 * 4096 / QK, 256, 1024, 132);
        assert_eq!((c.grid, c.block), ([2112, 1, 1], [256, 1, 1]));
        // A partial tile is a tile; one quant block is one thread block.
        assert_eq!(tile_config(257, 256, 1024, 132).grid, [2, 1, 1]);
        assert_eq!(tile_config(1, 256, 1024, 132).grid, [1, 1, 1]);
        // A kernel limited to fewer threads gets fewer (the kernel strides by blockDim.x).
        assert_eq!(tile_config(4097, 256, 128, 4).block, [128, 1, 1]);
        assert_eq!(tile_config(4097, 256, 128, 4).grid, [17, 1, 1]);
        assert_eq!(tile_config(10_000, 256, 256, 0).grid, [1, 1, 1]);
        // k-quants: 32 super-blocks (the same 8192 elements) a tile.
        assert_eq!(TILE_ELEMS / BlockFormat::Q6K.block_elems(), 32);
        assert_eq!(tile_config(33, 32, 1024, 132).grid, [2, 1, 1]);
    }

    #[test]
    fn the_reference_rounds_the_codec_values_once() {
        // q8_0 with d = 0.5 and q = 3: 1.5, exact in every type; a partial block is an error.
        let mut block = [0u8; 34];
        block[..2].copy_from_slice(&[0x00, 0x38]);
        block[2] = 3;
        let r = dequantize_reference::<f16>(BlockFormat::Q8_0, &block).unwrap();
        assert_eq!((r[0].to_f32(), r[1].to_f32()), (1.5, 0.0));
        assert!(dequantize_reference::<f32>(BlockFormat::Q8_0, &block[..33]).is_err());
    }
}
