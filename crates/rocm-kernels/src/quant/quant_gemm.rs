//! `quant_gemm`: `y = x W^T` with `W` in a block format, the blocks decoded inside a
//! matrix-core GEMM's tile loop (`kernels/quant_gemm_wgmma.hip`: Hopper `wgmma`, sm_90a), so the
//! weight is read once at its stored size and never written out in `T` as
//! [`dequant_gemm`](super::dequant_gemm) does.
//!
//! Formats: q8_0, q4_0, mxfp4, q4_K, q5_K and q6_K; compute types f16 and bf16 (the wgmma's inputs);
//! `in` a multiple of the format's stage (64 elements, 128 for mxfp4) whose weight rows are whole
//! 16-byte units (the kernel copies the weight through a TMA tensor map: q8_0 and q4_0 need `in`
//! a multiple of 256, mxfp4 of 512, q6_K of 2048). Each weight is decoded in f32 exactly as the dequantiser
//! does and rounded once to `T`, the products accumulate in f32 and each output is rounded once
//! to `T`: the dequantise + GEMM product up to the order of the sums.
//!
//! `x` is first re-laid out (`rf_qgemm_pack_x`, into a temporary freed in stream order) as the
//! swizzled tiles the kernel bulk-copies, its columns permuted within each 64 so that each math
//! thread decodes 16 columns of a weight row its format reads together (16 contiguous ones; for
//! q4_0 and mxfp4 both nibbles of 8 bytes); the GEMM follows on the same stream.
//!
//! rocm-model's prefill takes it where it measured faster than dequantising and calling cuBLAS
//! (its `Linear` says for which formats, token counts and grids: up to 512 tokens at most; at 4096
//! cuBLAS's GEMM wins; docs/kernels/quant_gemm.md, v10 and v11). `bench quant_gemm` times it next
//! to the other paths.

use rocm_runtime::{DeviceBuffer, Stream};

use super::dequant::{BlockFormat, check_dequantize};
use crate::abi::quant_gemm as abi;
use crate::dtype::Dtype;
use crate::error::{KernelError, Result, ensure};
use crate::gemm::GemmDesc;
use crate::launchable::{Launchable, Needs};
use crate::loader;
use crate::modules::KernelModule;
use rocm_runtime::{LaunchConfig, TensorMap};

const KERNEL: &str = "quant_gemm";
const MODULE: KernelModule = KernelModule::QuantGemmWgmma;

/// A format's kernel: its entry's name part, `k` a stage, the width of the boxes in which it
/// copies the weight, the boxes a stage, the stages of the ring and the order of x's columns its
/// decode needs (rocmforge_quant_gemm_abi.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    name: &'static str,
    stage_k: usize,
    box_bytes: usize,
    boxes: usize,
    stages: usize,
    x_order: i32,
}

impl Shape {
    fn of(format: BlockFormat) -> Option<Shape> {
        let (name, stage_k, box_bytes, boxes, stages, x_order) = match format {
            BlockFormat::Q8_0 => (
                "q8_0",
                abi::RF_QGEMM_Q8_0_KS,
                abi::RF_QGEMM_Q8_0_BOX,
                abi::RF_QGEMM_Q8_0_BOXES,
                abi::RF_QGEMM_Q8_0_STAGES,
                abi::RF_QGEMM_Q8_0_X_ORDER,
            ),
            BlockFormat::Q4_0 => (
                "q4_0",
                abi::RF_QGEMM_Q4_0_KS,
                abi::RF_QGEMM_Q4_0_BOX,
                abi::RF_QGEMM_Q4_0_BOXES,
                abi::RF_QGEMM_Q4_0_STAGES,
                abi::RF_QGEMM_Q4_0_X_ORDER,
            ),
            BlockFormat::Mxfp4Gguf => (
                "mxfp4",
                abi::RF_QGEMM_MXFP4_KS,
                abi::RF_QGEMM_MXFP4_BOX,
                abi::RF_QGEMM_MXFP4_BOXES,
                abi::RF_QGEMM_MXFP4_STAGES,
                abi::RF_QGEMM_MXFP4_X_ORDER,
            ),
            BlockFormat::Q4K => (
                "q4_k",
                abi::RF_QGEMM_Q4_K_KS,
                abi::RF_QGEMM_Q4_K_BOX,
                abi::RF_QGEMM_Q4_K_BOXES,
                abi::RF_QGEMM_Q4_K_STAGES,
                abi::RF_QGEMM_Q4_K_X_ORDER,
            ),
            BlockFormat::Q5K => (
                "q5_k",
                abi::RF_QGEMM_Q5_K_KS,
                abi::RF_QGEMM_Q5_K_BOX,
                abi::RF_QGEMM_Q5_K_BOXES,
                abi::RF_QGEMM_Q5_K_STAGES,
                abi::RF_QGEMM_Q5_K_X_ORDER,
            ),
            BlockFormat::Q6K => (
                "q6_k",
                abi::RF_QGEMM_Q6_K_KS,
                abi::RF_QGEMM_Q6_K_BOX,
                abi::RF_QGEMM_Q6_K_BOXES,
                abi::RF_QGEMM_Q6_K_STAGES,
                abi::RF_QGEMM_Q6_K_X_ORDER,
            ),
            BlockFormat::Mxfp6(_) => return None,
        };
        Some(Shape {
            name,
            stage_k: stage_k as usize,
            box_bytes: box_bytes as usize,
            boxes: boxes as usize,
            stages: stages as usize,
            x_order: x_order as i32,
        })
    }

    /// Dynamic shared memory of a block: the 1024-byte alignment slack, the ring of stages,
    /// each the x tile (256 tokens x `stage_k` in 16 bits) and the weight's boxes (128 rows of
    /// `box_bytes` each).
    fn shared_bytes(self) -> usize {
        1024 + self.stages
            * (abi::RF_QGEMM_TOKENS as usize * self.stage_k * 2
                + abi::RF_QGEMM_ROWS as usize * self.boxes * self.box_bytes)
    }
}

/// The formats [`quant_gemm`] has a kernel for.
pub const QUANT_GEMM_FORMATS: [BlockFormat; 6] = [
    BlockFormat::Q8_0,
    BlockFormat::Q4_0,
    BlockFormat::Mxfp4Gguf,
    BlockFormat::Q4K,
    BlockFormat::Q5K,
    BlockFormat::Q6K,
];

fn entry_name<T: Dtype>(shape: Shape) -> String {
    format!("rf_qgemm_wgmma_{}_{}", shape.name, T::NAME)
}

/// Why [`quant_gemm`] cannot run `format` in `T` at width `inp` on `stream`'s device, or `None`
/// when it can: the device has warpgroup MMA, its host API makes tensor maps (the CUDA driver;
/// not AMD's HIP for NVIDIA) and the module has its entry (sm_90a machine code), the
/// format a kernel, `T` is f16 or bf16, `inp` a whole number of the format's stages and a weight
/// row a whole number of 16 bytes (the stride of the tensor map through which the kernel copies
/// it: q8_0 and q4_0 need `inp` a multiple of 256, mxfp4 of 512, q6_K of 2048).
pub fn quant_gemm_runs<T: Dtype>(stream: &Stream, format: BlockFormat, inp: usize) -> Option<String> {
    let shape = match Shape::of(format) {
        Some(shape) => shape,
        None => {
            return Some(format!(
                "{} has no mixed-input GEMM (formats: q8_0, q4_0, mxfp4, q4_k, q5_k, q6_k)",
                format.name()
            ));
        }
    };
    if T::NAME == "f32" {
        return Some(
            "the mixed-input GEMM computes in f16 or bf16 (the matrix cores' inputs), not f32".into(),
        );
    }
    if !inp.is_multiple_of(shape.stage_k) {
        return Some(format!(
            "in = {inp} is not a multiple of the {} kernel's {}-element stage",
            format.name(),
            shape.stage_k
        ));
    }
    let row_bytes = inp / format.block_elems() * format.block_bytes();
    if !row_bytes.is_multiple_of(16) {
        return Some(format!(
            "in = {inp}: a {} weight row of {row_bytes} bytes is not a whole number of 16 bytes, \
             which the kernel's tensor copies need",
            format.name()
        ));
    }
    let info = stream.backend().info();
    if !info.warpgroup_mma {
        return Some(format!("{} ({}) has no warpgroup MMA (Hopper wgmma)", info.name, info.arch));
    }
    if !info.tensor_maps {
        return Some(format!(
            "{} is driven through the HIP runtime, which makes no tensor maps (the TMA descriptors \
             the kernel copies the weight through: NVIDIA's CUDA driver only)",
            info.name
        ));
    }
    loader::kernel(stream, MODULE, &entry_name::<T>(shape)).err().map(|e| e.to_string())
}

/// [`quant_gemm`]'s grid for `rows` weight rows and `tokens` tokens: `[token tiles, row tiles]`,
/// a block a tile of 256 tokens x 128 rows, one block an SM (its shared memory). A grid of fewer
/// blocks than SMs leaves the rest idle for the whole product, which is what callers weigh it by.
pub fn quant_gemm_grid(rows: usize, tokens: usize) -> [usize; 2] {
    [tokens.div_ceil(QUANT_GEMM_TILE_TOKENS), rows.div_ceil(abi::RF_QGEMM_ROWS as usize)]
}

/// Tokens of a [`quant_gemm`] tile: a partial last tile costs as much as a full one.
pub const QUANT_GEMM_TILE_TOKENS: usize = abi::RF_QGEMM_TOKENS as usize;

/// `y = x W^T`: `x` is `[tokens, inp]`, `y` `[tokens, rows]`, `w` the weight's `rows x inp`
/// elements as whole blocks of `format` (row-major, a row `inp / block elements` blocks), on
/// `y`'s stream. Refused with the reason [`quant_gemm_runs`] gives where the kernel cannot run,
/// and with a shape error for lengths that do not fit.
#[allow(clippy::too_many_arguments)]
pub fn quant_gemm<T: Dtype>(
    format: BlockFormat,
    w: &DeviceBuffer<u8>,
    rows: usize,
    inp: usize,
    x: &DeviceBuffer<T>,
    tokens: usize,
    y: &mut DeviceBuffer<T>,
) -> Result<()> {
    let elems = format.block_elems();
    ensure(inp.is_multiple_of(elems), KERNEL, || {
        format!("in = {inp} is not a whole number of {elems}-element {} blocks", format.name())
    })?;
    let weight =
        rows.checked_mul(inp).ok_or_else(|| shape_error(format!("{rows} x {inp} overflows usize")))?;
    check_dequantize(format, w.len(), weight)?;
    let desc = GemmDesc::linear(tokens, rows, inp);
    desc.check_buffers(x.len(), weight, y.len()).map_err(shape_error)?;
    // The kernel counts rows, tokens and k in 32 bits; a grid row per 128 weight rows.
    let limit = i32::MAX as usize;
    ensure(rows <= limit && tokens <= limit && inp <= limit, KERNEL, || {
        format!("{tokens} x {rows} x {inp}: each must be below 2^31")
    })?;
    let stream = y.stream().clone();
    if let Some(why) = quant_gemm_runs::<T>(&stream, format, inp) {
        return Err(shape_error(why));
    }
    if desc.is_empty() {
        return Ok(());
    }
    let shape = Shape::of(format).expect("quant_gemm_runs checked the format");
    ensure(x.device_ptr().is_multiple_of(16) && w.device_ptr().is_multiple_of(16), KERNEL, || {
        "w and x must be 16-byte aligned".into()
    })?;
    let pack = loader::kernel(&stream, MODULE, &format!("rf_qgemm_pack_x_{}", T::NAME))?;
    let kernel = loader::kernel(&stream, MODULE, &entry_name::<T>(shape))?;
    let [token_tiles, row_tiles] = quant_gemm_grid(rows, tokens);
    // x re-laid out as the GEMM's swizzled tiles (rf_qgemm_pack_x), freed in stream order.
    let tile_bytes = abi::RF_QGEMM_TILE_BYTES as usize;
    let mut tiles = stream.alloc::<u8>(token_tiles * (inp / 64) * tile_bytes)?;
    let mut params = abi::rf_qgemm_params {
        x: x.device_ptr(),
        x_tiles: tiles.device_ptr(),
        y: y.device_ptr(),
        x_ld: inp as u64,
        y_ld: rows as u64,
        rows: rows as i32,
        k: inp as i32,
        tokens: tokens as i32,
        x_order: shape.x_order,
    };
    // W's bytes as `rows` rows, copied in boxes of 128 rows (rows past the last arrive as zeros).
    // in = 0: no bytes to map, and the kernel copies nothing.
    let w_row_bytes = inp / elems * format.block_bytes();
    let w_map = if inp == 0 {
        bytemuck::Zeroable::zeroed()
    } else {
        TensorMap::bytes_2d(w, rows, w_row_bytes, shape.box_bytes, abi::RF_QGEMM_ROWS as usize)?
    };
    let chunks = tiles.len() / 16;
    let pack_blocks = chunks.div_ceil(256).min(stream.backend().info().compute_units.max(1) as usize * 16);
    let pack_config =
        LaunchConfig { grid: [pack_blocks as u32, 1, 1], block: [256, 1, 1], shared_mem_bytes: 0 };
    // (in = 0: no tile to pack, and the GEMM stores zeros.)
    if chunks > 0 {
        // SAFETY: rf_qgemm_pack_x_<T>(rf_qgemm_params p) reads x[t * x_ld + 64 c + 2 w ..][..2] for
        // t < tokens, c < k / 64, w < 32 (4-byte loads: x is 16-byte aligned, checked above, and
        // x_ld = inp a multiple of 64), all inside x[0, tokens * inp) (check_buffers), and writes
        // ceil(tokens / 256) * (k / 64) tiles of RF_QGEMM_TILE_BYTES, exactly `tiles` (a fresh
        // allocation, 256-byte aligned), in a grid-stride loop over its 16-byte chunks counted in
        // 64 bits. It reads no other field. `reads` / `writes` check both belong to the stream.
        unsafe {
            stream.launch(&pack).reads(x).writes(&mut tiles).arg(params).launch(pack_config)?;
        }
    }
    params.x = 0; // the GEMM reads x only through the tiles
    let config = LaunchConfig {
        grid: [token_tiles as u32, row_tiles as u32, 1],
        block: [abi::RF_QGEMM_THREADS, 1, 1],
        shared_mem_bytes: shape.shared_bytes() as u32,
    };
    // SAFETY: rf_qgemm_wgmma_<fmt>_<T>(rf_qgemm_params p, rf_tensor_map w_map), T f16 or bf16
    // (quant_gemm_runs), reads the weight only through w_map, whose tensor is w[0, rows *
    // w_row_bytes) (check_dequantize proved that equal to w.len(); what a box finds outside it
    // arrives as zeros), the tiles the pack kernel just wrote in stream order (block b's k / KS
    // stages of KS / 64 tiles from tile b * k / 64: all inside `tiles`, bulk-copied whole,
    // 16-byte aligned) and writes y[0, tokens * rows) (check_buffers), with rows, tokens and k
    // below 2^31 as it counts them; k is a whole number of its stages (quant_gemm_runs). The
    // grid covers ceil(tokens / 256) x ceil(rows / 128) tiles, at most 2^24 rows of blocks
    // (rows < 2^31), with RF_QGEMM_THREADS threads and the dynamic shared memory its entry's
    // stages take (rocmforge_quant_gemm_abi.h, mirrored by Shape::shared_bytes; the launch
    // checks the device's opt-in limit). `y` is a distinct `&mut` borrow, so it aliases neither
    // input; `reads` / `writes` check all three belong to the stream, and `reads(w)` keeps the
    // buffer w_map points into alive for the launch.
    unsafe {
        stream.launch(&kernel).reads(w).reads(&tiles).writes(y).arg(params).arg(w_map).launch(config)?;
    }
    Ok(())
    // `tiles` is dropped here: freed in stream order, after the GEMM.
}

fn shape_error(message: String) -> KernelError {
    KernelError::Shape { kernel: KERNEL, message }
}

/// The entries this module launches ([`crate::launchable`]): every format in f16 and bf16, and
/// the x re-layout in both.
pub(crate) fn launchable() -> Vec<Launchable> {
    let mut out: Vec<Launchable> = ["f16", "bf16"]
        .iter()
        .map(|t| Launchable::new(MODULE, format!("rf_qgemm_pack_x_{t}"), Needs::WarpgroupMma))
        .collect();
    for format in QUANT_GEMM_FORMATS {
        let shape = Shape::of(format).expect("a format with a kernel");
        for t in ["f16", "bf16"] {
            out.push(Launchable::new(
                MODULE,
                format!("rf_qgemm_wgmma_{}_{t}", shape.name),
                Needs::WarpgroupMma,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_fits_the_shared_memory_of_an_sm90_block() {
        for format in QUANT_GEMM_FORMATS {
            let shape = Shape::of(format).unwrap();
            assert!(shape.shared_bytes() <= 227 << 10, "{}: {} bytes", shape.name, shape.shared_bytes());
            assert!(
                shape.stage_k.is_multiple_of(64)
                    && shape.stage_k.is_multiple_of(format.block_elems().min(64))
            );
        }
        assert_eq!(Shape::of(BlockFormat::Mxfp6(crate::quant::Fp6::E2M3)), None);
    }
}
