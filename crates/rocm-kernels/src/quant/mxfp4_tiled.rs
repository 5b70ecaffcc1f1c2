//! `mxfp4_tiled` (`kernels/mxfp4_tiled.hip`): the MXFP4 matrix-vector product over a weight
//! re-laid out once, on the host, for the kernel's loads.
//!
//! GGUF's `block_mxfp4` rows (17-byte blocks: a scale byte, then 16 bytes of E2M1 nibbles) are
//! a poor shape for a memory-bound GPU kernel: blocks are not aligned, and the codes a lane's
//! matrix-core fragment needs are scattered. [`TiledMxfp4::from_gguf`] rewrites the same bits
//! (17 bytes a block, plus padding) so that each lane reads exactly its own codes, 16 bytes at a
//! time, and the scales separately; [`mx_matvec_tiled`] multiplies. Decoding is exact and the
//! sums are f32, as in [`super::mx_matvec`], which reads GGUF rows as they are.
//!
//! # Layout
//!
//! `W[n, k]`, `nb = k / 32` blocks a row. Rows are grouped in tiles of [`TILE_ROWS`] = 16; each
//! row is padded to `nbp` = `nb` rounded up to [`GROUP_BLOCKS`] = 8 blocks, and the last tile to
//! 16 rows, with code 0 and scale byte 0.
//!
//! - **Payload**, `tiles * nbp * 256` bytes: for tile `t`, block pair `p` (blocks `2p`, `2p + 1`)
//!   and lane `l = 4g + u` (`g < 8`, `u < 4`), 16 bytes at `((t * nbp / 2 + p) * 32 + l) * 16`:
//!   the little-endian words `W(g, 2p, u)`, `W(g + 8, 2p, u)`, `W(g, 2p + 1, u)`,
//!   `W(g + 8, 2p + 1, u)`, rows counted inside the tile.
//! - **Word** `W(r, b, u)`: the eight E2M1 codes (sign in bit 3) of row `r`, elements
//!   `32b + 8u .. 32b + 8u + 8`, as pairs `i < 4` of elements (`32b + 8u + 2i`, `+ 1`): the
//!   pair's magnitudes at bits `MAG(i)..MAG(i) + 3` and `+ 16`, its signs at bits `SIGN(i)` and
//!   `+ 16`, `MAG = 9, 6, 3, 0`, `SIGN = 15, 12, 13, 14`. Pair 0 is then an f16 pair (times
//!   2^-14) after one mask, pair 1 after a shift and a mask, pairs 2 and 3 after a mask, a
//!   multiply and a mask: the matrix-core kernel's decode, for f16 and bf16 activations alike
//!   (it stages bf16 x as block-scaled f16).
//! - **Scales**, `tiles * 16 * nbp` bytes: the E8M0 byte of row `r` of tile `t`, block `b`, at
//!   `((t * nbp / 8 + b / 8) * 16 + r) * 8 + b % 8`: each group of 8 blocks of a tile is 128
//!   contiguous bytes, copied with its payload.

use rocm_runtime::{DeviceBuffer, MatrixCores, Stream};

use super::tiled::{
    self, BATCH_PASS, BATCH32_RESIDENT_BLOCKS, DeviceTiledBytes, MAX_WARPS, Mode, RESIDENT_BLOCKS, STAGES,
    TiledBytes,
};
pub use super::tiled::{MAX_TILED_BATCH, MAX_TILED_OUTPUTS, TILE_ROWS, TiledNorm, TiledOutput};
use super::{MXFP4_GGUF_BLOCK_BYTES, QK};
use crate::KernelModule;
use crate::abi::mxfp4_tiled as abi;
use crate::dtype::Dtype;
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{DTYPES, Launchable, Needs};
use crate::loader;

const KERNEL: &str = "mxfp4_tiled";
const MODULE: KernelModule = KernelModule::Mxfp4Tiled;

/// Blocks of a group, the unit a warp loads; rows are padded to a multiple.
pub const GROUP_BLOCKS: usize = abi::RF_T4_GROUP as usize;
/// Scale bytes up to this take the kernels' fast conversion; a matrix with a larger one (2^114
/// and up, or the NaN byte) takes the `_wide` entries.
const FAST_SCALE_MAX: u8 = abi::RF_T4_FAST_SCALE_MAX as u8;

/// Bit offsets of pair `i`'s magnitudes and signs in a word (module docs).
const FIELD_MAG: [u32; 4] = [9, 6, 3, 0];
const FIELD_SIGN: [u32; 4] = [15, 12, 13, 14];

/// Where code `2i + h` of a word goes: (magnitude bit offset, sign bit offset).
fn code_bits(i: usize, h: usize) -> (u32, u32) {
    let half = 16 * h as u32;
    (FIELD_MAG[i] + half, FIELD_SIGN[i] + half)
}

/// The word holding `codes[e]` (E2M1, sign in bit 3) as element `e` of a lane's eight.
fn encode_word(codes: [u8; 8]) -> u32 {
    let mut word = 0u32;
    for (e, &c) in codes.iter().enumerate() {
        let (mag, sign) = code_bits(e / 2, e % 2);
        word |= u32::from(c & 7) << mag | u32::from(c >> 3 & 1) << sign;
    }
    word
}

/// The inverse of [`encode_word`].
fn decode_word(word: u32) -> [u8; 8] {
    std::array::from_fn(|e| {
        let (mag, sign) = code_bits(e / 2, e % 2);
        ((word >> mag & 7) | (word >> sign & 1) << 3) as u8
    })
}

/// Blocks a row of `k` elements holds in the layout: `k / 32` rounded up to [`GROUP_BLOCKS`]
/// (`k / 32` is at most `usize::MAX / 32`, so this does not overflow).
fn padded_blocks(k: usize) -> usize {
    (k / QK).div_ceil(GROUP_BLOCKS) * GROUP_BLOCKS
}

/// Bytes of a tiled weight: (payload, scales) for an `[n, k]` matrix, `None` on overflow.
fn tiled_bytes(n: usize, k: usize) -> Option<(usize, usize)> {
    let tiles = n.div_ceil(TILE_ROWS);
    let cells = tiles.checked_mul(TILE_ROWS)?.checked_mul(padded_blocks(k))?;
    Some((cells.checked_mul(16)?, cells))
}

/// An `[n, k]` MXFP4 weight in the tiled layout (module docs), on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiledMxfp4 {
    tiles: TiledBytes,
    max_scale: u8,
}

impl TiledMxfp4 {
    /// Re-lays out `n` rows of `k / 32` GGUF `block_mxfp4` blocks (`n * k / 32 * 17` bytes).
    pub fn from_gguf(blocks: &[u8], n: usize, k: usize) -> Result<Self> {
        tiled::check_gguf_rows(KERNEL, blocks.len(), n, k, (QK, MXFP4_GGUF_BLOCK_BYTES, "MXFP4 blocks"))?;
        let nb = k / QK;
        let (payload_bytes, scale_bytes) = tiled_bytes(n, k).ok_or_else(|| KernelError::Shape {
            kernel: KERNEL,
            message: format!("the tiled [{n}, {k}] weight overflows usize"),
        })?;
        let nbp = padded_blocks(k);
        let mut payload = vec![0u8; payload_bytes];
        let mut scales = vec![0u8; scale_bytes];
        let mut max_scale = 0u8;
        for (r, row) in blocks.chunks_exact((nb * MXFP4_GGUF_BLOCK_BYTES).max(1)).take(n).enumerate() {
            let (tile, rt) = (r / TILE_ROWS, r % TILE_ROWS);
            for (b, block) in row.chunks_exact(MXFP4_GGUF_BLOCK_BYTES).enumerate() {
                scales[scale_offset(tile, nbp, b, rt)] = block[0];
                max_scale = max_scale.max(block[0]);
                let payload_codes = &block[1..];
                // GGUF: element j < 16 is the low nibble of byte j, j + 16 the high one.
                let code = |j: usize| (payload_codes[j % 16] >> (4 * (j / 16))) & 15;
                for u in 0..4 {
                    let word = encode_word(std::array::from_fn(|e| code(8 * u + e)));
                    let at = word_offset(tile, nbp, b, rt, u);
                    payload[at..at + 4].copy_from_slice(&word.to_le_bytes());
                }
            }
        }
        Ok(TiledMxfp4 { tiles: TiledBytes { n, k, payload, scales }, max_scale })
    }

    /// The GGUF `block_mxfp4` rows this weight was made from (the inverse of [`Self::from_gguf`]).
    pub fn to_gguf(&self) -> Vec<u8> {
        let nb = self.tiles.k / QK;
        let nbp = self.padded_blocks();
        let mut out = vec![0u8; self.tiles.n * nb * MXFP4_GGUF_BLOCK_BYTES];
        for r in 0..self.tiles.n {
            let (tile, rt) = (r / TILE_ROWS, r % TILE_ROWS);
            for b in 0..nb {
                let block = &mut out[(r * nb + b) * MXFP4_GGUF_BLOCK_BYTES..][..MXFP4_GGUF_BLOCK_BYTES];
                block[0] = self.tiles.scales[scale_offset(tile, nbp, b, rt)];
                for u in 0..4 {
                    let at = word_offset(tile, nbp, b, rt, u);
                    let word = u32::from_le_bytes(self.tiles.payload[at..at + 4].try_into().unwrap());
                    for (e, c) in decode_word(word).into_iter().enumerate() {
                        let j = 8 * u + e;
                        block[1 + j % 16] |= c << (4 * (j / 16));
                    }
                }
            }
        }
        out
    }

    pub fn n(&self) -> usize {
        self.tiles.n
    }

    pub fn k(&self) -> usize {
        self.tiles.k
    }

    /// Blocks a row holds in the layout: `k / 32` rounded up to [`GROUP_BLOCKS`].
    pub fn padded_blocks(&self) -> usize {
        padded_blocks(self.tiles.k)
    }

    /// The codes, in the layout's order.
    pub fn payload(&self) -> &[u8] {
        &self.tiles.payload
    }

    /// The E8M0 scale bytes, in the layout's order.
    pub fn scales(&self) -> &[u8] {
        &self.tiles.scales
    }

    /// The largest scale byte (0 for an empty matrix): above 240 the kernels convert every scale
    /// the slower, general way.
    pub fn max_scale(&self) -> u8 {
        self.max_scale
    }

    /// Weights of the same `k` stacked along their rows into one, `[sum of n, k]`: a layer's Q,
    /// K and V, or its gate and up, multiplied in one launch by [`mx_matvec_tiled_split`]. The
    /// layout is tile by tile, so this is the parts' bytes one after another; every part but
    /// the last must have whole tiles ([`TILE_ROWS`] rows), so that no tile holds two parts.
    pub fn stack(parts: &[&TiledMxfp4]) -> Result<Self> {
        let tiles = TiledBytes::stack(KERNEL, &parts.iter().map(|p| &p.tiles).collect::<Vec<_>>())?;
        let max_scale = parts.iter().map(|p| p.max_scale).max().unwrap_or(0);
        Ok(TiledMxfp4 { tiles, max_scale })
    }

    /// Copies the weight to `stream`'s device.
    pub fn upload(&self, stream: &Stream) -> Result<DeviceTiledMxfp4> {
        Ok(DeviceTiledMxfp4 { tiles: self.tiles.upload(stream)?, max_scale: self.max_scale })
    }
}

/// Byte offset of the scale of row `rt` of tile `tile`, block `b`.
fn scale_offset(tile: usize, nbp: usize, b: usize, rt: usize) -> usize {
    ((tile * nbp / GROUP_BLOCKS + b / GROUP_BLOCKS) * TILE_ROWS + rt) * GROUP_BLOCKS + b % GROUP_BLOCKS
}

/// Byte offset of word `W(rt, b, u)` (row `rt` of tile `tile`) in the payload.
fn word_offset(tile: usize, nbp: usize, b: usize, rt: usize, u: usize) -> usize {
    let lane = 4 * (rt % 8) + u;
    let word = 2 * (b % 2) + rt / 8;
    ((tile * nbp / 2 + b / 2) * 32 + lane) * 16 + 4 * word
}

/// A [`TiledMxfp4`] on a device ([`TiledMxfp4::upload`]).
#[derive(Debug)]
pub struct DeviceTiledMxfp4 {
    tiles: DeviceTiledBytes,
    max_scale: u8,
}

impl DeviceTiledMxfp4 {
    pub fn n(&self) -> usize {
        self.tiles.n
    }

    pub fn k(&self) -> usize {
        self.tiles.k
    }

    /// Device bytes the weight occupies (codes and scales, padding included).
    pub fn bytes(&self) -> usize {
        self.tiles.bytes()
    }

    /// Device bytes of the tiles that hold `rows` (at most `n`) rows (a stacked weight's part:
    /// the parts' figures add up to [`Self::bytes`], every part but the last being whole tiles).
    pub fn rows_bytes(&self, rows: usize) -> usize {
        tiled_bytes(rows, self.tiles.k).map_or(usize::MAX, |(payload, scales)| payload + scales)
    }
}

/// Which of the kernel's loops a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loop {
    /// The portable kernel: any device and activation type, any number of vectors; `normed`
    /// through an RMSNorm ([`TiledNorm`]).
    Portable { normed: bool },
    /// The matrix-core kernel for one vector (bf16 x staged once a block as block-scaled f16).
    One,
    /// The same through an RMSNorm ([`TiledNorm`]): x staged once a block, normalised, whatever
    /// its type (f16 as f16, bf16 as block-scaled f16).
    Normed,
    /// The matrix-core kernel for up to 8 vectors a pass (B's 8 columns), `passes` passes over
    /// each decoded block: 1 (up to 8 vectors) or 4 (up to 32).
    Batch { passes: usize },
}

/// The loop for `batch` vectors (1..=[`MAX_TILED_BATCH`]; one when `normed`) of `dtype` on a
/// device with `cores`: the matrix-core loops on NVIDIA mma.sync devices with f16 or bf16
/// activations.
fn choose_loop(cores: MatrixCores, dtype: &str, batch: usize, normed: bool) -> Loop {
    if cores != MatrixCores::MmaSync || !matches!(dtype, "f16" | "bf16") {
        return Loop::Portable { normed };
    }
    match batch {
        1 if normed => Loop::Normed,
        1 => Loop::One,
        b if b <= BATCH_PASS => Loop::Batch { passes: 1 },
        _ => Loop::Batch { passes: MAX_TILED_BATCH / BATCH_PASS },
    }
}

/// The entry a loop launches (`_wide` when a scale byte is above 240).
fn entry(lp: Loop, dtype: &str, max_scale: u8) -> String {
    let wide = if max_scale <= FAST_SCALE_MAX { "" } else { "_wide" };
    match lp {
        Loop::Portable { normed: false } => format!("rf_mxfp4_tiled_matvec_{dtype}"),
        Loop::Portable { normed: true } => format!("rf_mxfp4_tiled_normed_{dtype}"),
        Loop::One => format!("rf_mxfp4_tiled_matvec_mma{wide}_{dtype}"),
        Loop::Normed => format!("rf_mxfp4_tiled_normed_mma{wide}_{dtype}"),
        Loop::Batch { passes } => format!("rf_mxfp4_tiled_batch{}_mma{wide}_{dtype}", passes * BATCH_PASS),
    }
}

/// Whether the loop stages x once a block, as f16 (one bf16 vector, block-scaled; one normed
/// vector of either type).
fn stages_x_once(lp: Loop, dtype: &str) -> bool {
    (lp == Loop::One && dtype == "bf16") || lp == Loop::Normed
}

/// Bytes of one stage of a matrix-core loop's per-warp ring: a group's payload and scales, and
/// its x for one f16 vector (the several-vector loop reads x from global memory).
fn stage_bytes(lp: Loop, dtype: &str) -> usize {
    let x_in_stage = lp == Loop::One && dtype == "f16";
    (if x_in_stage { abi::RF_T4_STAGE_F16 } else { abi::RF_T4_STAGE_BF16 }) as usize
}
/// Blocks of 8 warps of a matrix-core loop kept resident on a multiprocessor, where shared
/// memory allows (which the entries' launch bounds promise the compiler): 3 (24 warps; 2 and 3
/// stages or blocks an SM measured alike: docs/kernels/mxfp.md), 2 for the 32-vector loop.
fn resident_blocks(lp: Loop) -> usize {
    match lp {
        Loop::Batch { passes } if passes > 1 => BATCH32_RESIDENT_BLOCKS,
        _ => RESIDENT_BLOCKS,
    }
}

/// A matrix-core loop's dynamic shared memory for blocks of `warps` warps and rows of `k`
/// elements, `dtype` the activations': each warp's ring of stages, the tiles' totals (two
/// buffers of `warps * 16` floats a column: 1, or 8 a pass), then for one bf16 vector x staged
/// as f16 (the padded row's blocks) and each block's f32 factor
/// (`kernels/include/rocmforge_x16.h`), then for a gate-and-up launch (`swiglu`) a tile's gates
/// (16 floats a column).
fn mma_shared_bytes(lp: Loop, warps: usize, k: usize, dtype: &str, swiglu: bool) -> usize {
    let x_once = if stages_x_once(lp, dtype) { (2 * QK + 4) * padded_blocks(k) } else { 0 };
    let columns = match lp {
        Loop::Batch { passes } => passes * BATCH_PASS,
        _ => 1,
    };
    let gates = if swiglu { TILE_ROWS * 4 * columns } else { 0 };
    warps * (STAGES * stage_bytes(lp, dtype) + 2 * TILE_ROWS * 4 * columns) + x_once + gates
}

/// Launch shape: (blocks, warps a block, dynamic shared bytes). Warps split a tile's groups of 8
/// blocks, so there are never more warps than groups. The matrix-core loops keep their blocks
/// resident (block b walks tiles b, b + grid, ...: a block that waited for a slot would run its
/// whole share after the others) and need a ring of stages a warp; the portable one takes a
/// tile a block. A gate-and-up launch (`swiglu`) walks pairs of tiles (a gate tile and its up
/// tile) instead of tiles.
fn launch_shape(
    info: &rocm_runtime::DeviceInfo,
    lp: Loop,
    n: usize,
    k: usize,
    dtype: &str,
    swiglu: bool,
) -> Result<(usize, usize, usize)> {
    let groups = (k / QK).div_ceil(GROUP_BLOCKS);
    let units = if swiglu { n / (2 * TILE_ROWS) } else { n.div_ceil(TILE_ROWS) };
    let grid_limit = info.max_grid[0].max(1) as usize;
    if let Loop::Portable { .. } = lp {
        return Ok((units.clamp(1, grid_limit), groups.clamp(1, MAX_WARPS), 0));
    }
    let why = if stages_x_once(lp, dtype) { " (x is staged whole)" } else { "" };
    let shared = |warps| mma_shared_bytes(lp, warps, k, dtype, swiglu);
    tiled::resident_shape(KERNEL, info, units, groups, resident_blocks(lp), shared, (k, why))
}

/// `y = W x` for a tiled MXFP4 weight: `x` holds `k` and `y` `n` elements, all on `y`'s stream.
/// `k = 0` gives zeros. Products are exact and sums f32, rounded to `T` once; on the matrix
/// cores bf16 x is first rounded to block-scaled f16 (`kernels/include/rocmforge_x16.h`: exact
/// but for elements 2^31 below their block's largest).
pub fn mx_matvec_tiled<T: Dtype>(
    w: &DeviceTiledMxfp4,
    x: &DeviceBuffer<T>,
    y: &mut DeviceBuffer<T>,
) -> Result<()> {
    launch(w, 0..w.tiles.n, x, 1, None, &mut [y], Mode::Store, false)
}

/// [`mx_matvec_tiled_split`] of rows `rows` of a stacked weight ([`TiledMxfp4::stack`];
/// `rows.start` a whole number of tiles: a part's first row) into `y` (`[batch, rows.len()]`):
/// one part alone, with the bits [`mx_matvec_tiled_split`] gives it.
pub fn mx_matvec_tiled_rows<T: Dtype>(
    w: &DeviceTiledMxfp4,
    rows: std::ops::Range<usize>,
    x: &DeviceBuffer<T>,
    batch: usize,
    y: &mut DeviceBuffer<T>,
) -> Result<()> {
    launch(w, rows, x, batch, None, &mut [y], Mode::Store, false)
}

/// `Y = X W^T` for `batch` vectors `x` (`[batch, k]`) and a stacked weight
/// ([`TiledMxfp4::stack`]) into one output a part, in one launch a [`MAX_TILED_BATCH`] vectors:
/// `ys` (1 to [`MAX_TILED_OUTPUTS`]) take the weight's rows in order, `ys[i]` `[batch, rows_i]`;
/// the parts' rows add up to `n`, and all but the last are whole tiles. Each vector's outputs
/// have the bits [`mx_matvec_tiled`] of that vector and its part alone gives (the several-vector
/// loop rounds bf16 x as the one-vector loop stages it and sums in the same order).
pub fn mx_matvec_tiled_split<T: Dtype>(
    w: &DeviceTiledMxfp4,
    x: &DeviceBuffer<T>,
    batch: usize,
    ys: &mut [&mut DeviceBuffer<T>],
) -> Result<()> {
    launch(w, 0..w.tiles.n, x, batch, None, ys, Mode::Store, false)
}

/// [`mx_matvec_tiled_split`] on the portable kernel, whatever the device has (tests compare the
/// two).
pub fn mx_matvec_tiled_portable<T: Dtype>(
    w: &DeviceTiledMxfp4,
    x: &DeviceBuffer<T>,
    batch: usize,
    ys: &mut [&mut DeviceBuffer<T>],
) -> Result<()> {
    launch(w, 0..w.tiles.n, x, batch, None, ys, Mode::Store, true)
}

/// `act = silu(x Wg^T) * (x Wu^T)` for `batch` vectors `x` (`[batch, k]`), the products and the
/// activation in one launch a [`MAX_TILED_BATCH`] vectors: `w` is a gate weight and its up weight
/// stacked ([`TiledMxfp4::stack`], in that order, each `n / 2` rows, a whole number of tiles), and
/// `act` is `[batch, n / 2]`. Each element has the bits of [`mx_matvec_tiled_split`] into gate and
/// up followed by `crate::swiglu::swiglu` on them: each product rounded to `T`, then
/// `silu(gate) * up` in f32 as `kernels/swiglu.hip` computes it, rounded to `T` once.
pub fn mx_matvec_tiled_swiglu<T: Dtype>(
    w: &DeviceTiledMxfp4,
    x: &DeviceBuffer<T>,
    batch: usize,
    act: &mut DeviceBuffer<T>,
) -> Result<()> {
    launch(w, 0..w.tiles.n, x, batch, None, &mut [act], Mode::Swiglu, false)
}

/// The tiled product in every form one launch takes: `batch` vectors `x` (`[batch, k]`), through
/// `norm` first where given (one vector: `x` is then the residual stream's row, [`TiledNorm`]),
/// into `out` ([`TiledOutput`]); `portable` runs the portable kernel whatever the device has
/// (tests compare the two). Every other function here is one of these forms.
pub fn mx_matvec_tiled_fused<T: Dtype>(
    w: &DeviceTiledMxfp4,
    x: &DeviceBuffer<T>,
    batch: usize,
    norm: Option<TiledNorm<'_, T>>,
    out: TiledOutput<'_, '_, T>,
    portable: bool,
) -> Result<()> {
    match out {
        TiledOutput::Split(ys) => launch(w, 0..w.tiles.n, x, batch, norm, ys, Mode::Store, portable),
        TiledOutput::Swiglu(act) => {
            launch(w, 0..w.tiles.n, x, batch, norm, &mut [act], Mode::Swiglu, portable)
        }
        TiledOutput::Add(h) => launch(w, 0..w.tiles.n, x, batch, norm, &mut [h], Mode::Add, portable),
    }
}

/// Checks that `rows` is a part of `w` (inside it, from a tile's first row) and gives the
/// buffers from its first tile.
fn part<'a>(w: &'a DeviceTiledMxfp4, rows: &std::ops::Range<usize>) -> Result<tiled::TiledBuffers<'a>> {
    w.tiles.part(KERNEL, rows, |start| tiled_bytes(start, w.tiles.k))
}

/// Rows `rows` of `w` times `batch` vectors `x` (through `norm` first where given) into `ys`,
/// as `mode` says: one output a part (Store), `ys[0]` a gate-and-up product's activation
/// (Swiglu) or the residual stream it adds to (Add); `portable` runs the portable kernel.
#[allow(clippy::too_many_arguments)] // the launcher every public form funnels into
fn launch<T: Dtype>(
    w: &DeviceTiledMxfp4,
    rows: std::ops::Range<usize>,
    x: &DeviceBuffer<T>,
    batch: usize,
    norm: Option<TiledNorm<'_, T>>,
    ys: &mut [&mut DeviceBuffer<T>],
    mode: Mode,
    portable: bool,
) -> Result<()> {
    let swiglu = mode == Mode::Swiglu;
    let k = w.tiles.k;
    let part = part(w, &rows)?;
    let n = rows.len();
    let Some((params, norm_param)) = tiled::launch_args(KERNEL, x, batch, k, n, norm.as_ref(), ys, mode)?
    else {
        return Ok(());
    };
    ensure(u32::try_from(n).is_ok() && u32::try_from(k / QK).is_ok(), KERNEL, || {
        format!("[{n}, {k}] is more than the kernel counts (32-bit rows and blocks)")
    })?;
    ensure(x.device_ptr().is_multiple_of(16), KERNEL, || "x must be 16-byte aligned".into())?;
    let stream = ys[0].stream().clone();
    let info = stream.backend().info();
    let cores = if portable { MatrixCores::None } else { info.matrix_cores };
    // The portable kernel takes any batch in one launch (u32 vectors); the matrix-core loops
    // [`MAX_TILED_BATCH`] vectors a launch.
    let chunk = match choose_loop(cores, T::NAME, 1, false) {
        Loop::Portable { .. } => u32::MAX as usize,
        _ => MAX_TILED_BATCH,
    };
    let elem = std::mem::size_of::<T>() as u64;
    for first in (0..batch).step_by(chunk) {
        let count = chunk.min(batch - first);
        let lp = choose_loop(cores, T::NAME, count, norm.is_some());
        let kernel = loader::kernel(&stream, MODULE, &entry(lp, T::NAME, w.max_scale))?;
        let config = tiled::launch_config(KERNEL, &kernel, launch_shape(info, lp, n, k, T::NAME, swiglu)?)?;
        // Vectors first.. of this launch: x's rows and each output's rows from there.
        let chunk_params = tiled::outputs_from(&params, ys.len(), first, elem);
        let x_first = x.device_ptr() + (first * k) as u64 * elem;
        // SAFETY: every entry is (const uint4* payload, const u8* scales, const T* x, rf_t4_outputs
        // y, rf_t4_norm norm, u32 nb, u32 batch). Given the part's first tile t0 (rows.start / 16,
        // checked whole), for tile t < ceil(n / 16), n = y.end[2] = rows.len(), they read payload
        // bytes [256 (t0 + t) nbp, 256 (t0 + t + 1) nbp) and scale bytes [16 (t0 + t) nbp, 16 (t0 +
        // t + 1) nbp) (nbp = nb rounded up to 8), inside the weight's tiles (rows.end <= w.tiles.n,
        // checked), which the buffers hold: a DeviceTiledMxfp4 is only built by TiledMxfp4::upload
        // from a layout of exactly its n and k. They read x rows [0, count) of k elements from
        // x_first, rows first..first + count of x (batch * k elements, checked), never past a row's
        // last block; x_first is 16-byte aligned (x is, checked, and k is a multiple of 32) for the
        // 16-byte copies and loads; device allocations are 256-byte aligned, so the payload's and
        // scales' 16- and 8-byte accesses are aligned. They write row r < n of vector v < count to
        // y[i][v * rows_i + r - end[i - 1]] for the first i with r < end[i], y[i] this chunk's
        // pointer, vector `first` of output i: `outputs` made the ends the running sums of the
        // parts' rows (rows_i = ys[i].len() / batch, checked whole and to reach n), so that index
        // is inside ys[i] for first + v < batch; the unused slots' ends are n, never chosen. With
        // swiglu they write instead y[0][v * n / 2 + r] for gate rows r < n / 2 only
        // (swiglu_outputs: n a multiple of 32, ys[0] = act of batch * n / 2 elements, ends n / 2,
        // n, n), inside act; with Add they read each element they write first (one output, the
        // stream alone: mx_matvec_tiled_fused's Add, laid out as Store lays it out). With a norm
        // (norm_arg: one vector, its weight k elements, 16-byte aligned) the loop is a normed one
        // (choose_loop), whose entries read norm.weight[0..k): the matrix-core one copies it before
        // the wait (a weight, declared so), the portable one after; without one it is null, which
        // every other entry requires (they trap otherwise). Blocks are 1..=8 whole warps, within
        // the entries' launch bounds, never more warps than groups (launch_shape; the matrix-core
        // entries trap otherwise); the matrix-core entries run only on mma.sync devices
        // (`choose_loop`), with count <= 1, 8 or 32 as their names say, and the rings' and totals'
        // shared memory (launch_shape checks it against the device's limit). w and x are shared
        // borrows distinct from the outputs (each a distinct &mut); the builder checks the streams.
        // Dependent (rocmforge_dependent_launch.h): the portable entries wait for the kernel ahead
        // first; the one-vector f16 entries too; the others issue a block's first weight copies
        // before that wait, and x's reads and every write after it.
        unsafe {
            let mut launch = stream
                .launch(&kernel)
                .dependent()
                .reads_before_wait(part.payload.0)
                .arg(part.payload.1)
                .reads_before_wait(part.scales.0)
                .arg(part.scales.1)
                .reads(x)
                .arg(x_first);
            if let Some(norm) = &norm {
                launch = launch.reads_before_wait(norm.weight);
            }
            for y in ys.iter_mut() {
                launch = launch.writes(&mut **y);
            }
            launch.arg(chunk_params).arg(norm_param).arg((k / QK) as u32).arg(count as u32).launch(config)?;
        }
    }
    Ok(())
}

/// Rows `rows` of a tiled weight (a part of a stacked one: `rows.start` a whole number of
/// tiles) dequantised to `T` into the first `rows.len() * k` elements of `out`, row-major
/// `[rows.len(), k]`: the operand of a prefill's GEMM (`out` may be longer: one scratch serves
/// weights of several sizes). Each element is what `dequantize` gives from the GGUF rows: E2M1
/// times the E8M0 scale in f32, rounded to `T` once.
pub fn dequantize_tiled<T: Dtype>(
    w: &DeviceTiledMxfp4,
    rows: std::ops::Range<usize>,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    let buffers = part(w, &rows)?;
    let Some(args) = tiled::dequant_args(KERNEL, rows.len(), w.tiles.k, out)? else {
        return Ok(());
    };
    let vectors = rows.len().div_ceil(TILE_ROWS) * padded_blocks(w.tiles.k) / 2 * 32;
    let entry = format!("rf_mxfp4_tiled_dequant_{}", T::NAME);
    // SAFETY: from the part's first tile t0 (rows.start / 16, checked whole), the payload vectors
    // of ceil(rows / 16) tiles, bytes [256 nbp t0, 256 nbp (t0 + tiles)), and their scale bytes
    // [16 nbp t0, 16 nbp (t0 + tiles)), inside the weight's n rows' tiles (rows.end <= n,
    // checked) as TiledMxfp4::upload laid them out (the entry skips the padding); out holds rows k
    // elements (dequant_args).
    unsafe { tiled::launch_dequant(MODULE, &entry, buffers, args, vectors, out) }
}

/// The most that staging a 32-element block of bf16 x as f16 scaled by 2^s
/// (`kernels/include/rocmforge_x16.h`, as the matrix-core kernel does) moves one of its
/// elements: 2^(-25 - s), `s` putting the block's largest finite magnitude in [2^14, 2^15), 0 for
/// a block of zeros, at most 126.
pub fn x16_rounding_unit(block: &[f32]) -> f64 {
    let m = block.iter().map(|v| v.abs()).filter(|v| v.is_finite()).fold(0.0f32, f32::max);
    let e = ((m.to_bits() >> 23) & 0xff) as i32;
    let s = if m == 0.0 { 0 } else { (141 - e).min(126) };
    2f64.powi(-25 - s)
}

/// The entries this module launches ([`crate::launchable`]): [`entry`]'s every answer.
pub(crate) fn launchable() -> Vec<Launchable> {
    let mut out = Vec::new();
    for dtype in DTYPES {
        for normed in [false, true] {
            out.push(Launchable::new(MODULE, entry(Loop::Portable { normed }, dtype, 0), Needs::Nothing));
        }
        out.push(Launchable::new(MODULE, format!("rf_mxfp4_tiled_dequant_{dtype}"), Needs::Nothing));
        for (batch, normed) in [(1, false), (1, true), (BATCH_PASS, false), (MAX_TILED_BATCH, false)] {
            let lp = choose_loop(MatrixCores::MmaSync, dtype, batch, normed);
            if !matches!(lp, Loop::Portable { .. }) {
                for max_scale in [0, u8::MAX] {
                    out.push(Launchable::new(MODULE, entry(lp, dtype, max_scale), Needs::MmaSync));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize_mxfp4_gguf, quantize_mxfp4_gguf};

    fn random_blocks(seed: u64, n: usize, k: usize) -> Vec<u8> {
        let mut state = seed;
        (0..n * k / QK * MXFP4_GGUF_BLOCK_BYTES)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            })
            .collect()
    }

    #[test]
    fn words_encode_every_code_in_every_place() {
        for c in 0..16u8 {
            for e in 0..8 {
                let mut lane = [0u8; 8];
                lane[e] = c;
                let word = encode_word(lane);
                assert_eq!(word.count_ones(), c.count_ones(), "code {c} element {e}");
                assert_eq!(decode_word(word), lane, "code {c} element {e}");
            }
        }
        // Every bit of the word belongs to exactly one code.
        let mut all = 0u32;
        for e in 0..8 {
            let word = encode_word(std::array::from_fn(|i| if i == e { 15 } else { 0 }));
            assert_eq!(all & word, 0, "element {e} shares a bit");
            all |= word;
        }
        assert_eq!(all, u32::MAX);
    }

    /// The kernel's f16 decode (`rf_t4_decode_f16`) on the host: pair i of a word, as two
    /// f16 bit patterns, is its codes' values times 2^-14, for every code in every place.
    #[test]
    fn fields_decode_to_f16_values_times_2_pow_minus_14() {
        let decode = |w: u32| -> [u32; 4] {
            [
                w & 0x8e00_8e00,
                (w << 3) & 0x8e00_8e00,
                ((w & 0x2038_2038).wrapping_mul(68)) & 0x8e00_8e00,
                ((w & 0x4007_4007).wrapping_mul(514)) & 0x8e00_8e00,
            ]
        };
        let e2m1 = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for seed in 0..4096u32 {
            let mixed = seed.wrapping_mul(2_654_435_761);
            let lane: [u8; 8] = std::array::from_fn(|e| ((mixed >> (4 * e)) & 15) as u8);
            let pairs = decode(encode_word(lane));
            for (e, &c) in lane.iter().enumerate() {
                let bits = (pairs[e / 2] >> (16 * (e % 2))) as u16;
                let value = rocm_runtime::f16::from_bits(bits).to_f32() * 16384.0;
                let magnitude = e2m1[usize::from(c & 7)];
                let expected = if c & 8 != 0 { -magnitude } else { magnitude };
                assert_eq!(value.to_bits(), expected.to_bits(), "code {c} element {e}");
            }
        }
    }

    #[test]
    fn gguf_rows_survive_the_round_trip() {
        let shapes = [(1, 32), (7, 96), (16, 256), (17, 288), (33, 2880), (5, 0), (0, 64)];
        for (n, k) in shapes {
            let blocks = random_blocks(n as u64 * 31 + k as u64, n, k);
            let tiled = TiledMxfp4::from_gguf(&blocks, n, k).unwrap();

            assert_eq!(tiled.to_gguf(), blocks, "n {n} k {k}");
            let (payload, scales) = tiled_bytes(n, k).unwrap();
            assert_eq!((tiled.payload().len(), tiled.scales().len()), (payload, scales));
            assert_eq!(tiled.max_scale(), blocks.chunks_exact(17).map(|b| b[0]).max().unwrap_or(0));
        }
    }

    /// Stacking whole tiles is the tiling of the rows one after another.
    #[test]
    fn stacked_weights_are_the_tiling_of_their_rows() {
        let k = 2880;
        let parts = [(32, 1u64), (16, 2), (23, 3)];
        let blocks: Vec<Vec<u8>> = parts.iter().map(|&(n, seed)| random_blocks(seed, n, k)).collect();
        let tiled: Vec<TiledMxfp4> =
            blocks.iter().zip(&parts).map(|(b, &(n, _))| TiledMxfp4::from_gguf(b, n, k).unwrap()).collect();
        let stacked = TiledMxfp4::stack(&tiled.iter().collect::<Vec<_>>()).unwrap();
        let rows: Vec<u8> = blocks.concat();
        assert_eq!(stacked, TiledMxfp4::from_gguf(&rows, 71, k).unwrap());
        assert_eq!(stacked.to_gguf(), rows);
    }

    /// One code at a time, placed by hand from the layout in the module docs.
    #[test]
    fn codes_land_where_the_layout_says() {
        let (n, k) = (19, 3 * 32);
        let nbp = 8;
        // Row 18 (tile 1, row 2), block 1, element 13: lane 4 * 2 + 1 = 9 (u = 13 / 8), pair 0,
        // word 2 (block 1, row < 8), element 8u + 2i + 1 with i = 2: magnitude bits 19..22 and
        // sign bit 29.
        let mut blocks = vec![0u8; n * 3 * 17];
        let at = (18 * 3 + 1) * 17;
        blocks[at] = 0x85; // scale
        blocks[at + 1 + 13] = 0x0B; // element 13: low nibble of byte 13, code -1.5
        let tiled = TiledMxfp4::from_gguf(&blocks, n, k).unwrap();
        let word: u32 = 3 << 19 | 1 << 29;
        let word_at = ((nbp / 2) * 32 + 9) * 16 + 4 * 2;
        let mut expected = vec![0u8; tiled.payload().len()];
        expected[word_at..word_at + 4].copy_from_slice(&word.to_le_bytes());
        assert_eq!(tiled.payload(), &expected[..]);
        // Tile 1, group 0, row 2, block 1.
        let mut scales = vec![0u8; 2 * 16 * nbp];
        scales[(16 + 2) * 8 + 1] = 0x85;
        assert_eq!(tiled.scales(), &scales[..]);
        // Row 8 of a tile sits in the second word of its pair; block 2 starts pair 1.
        assert_eq!(word_offset(0, 8, 2, 8, 3), (32 + 3) * 16 + 4);
        // Block 9 of a row is in the tile's second group of scales.
        assert_eq!(scale_offset(0, 16, 9, 5), (16 + 5) * 8 + 1);
    }

    #[test]
    fn quantised_values_decode_the_same_both_ways() {
        let (n, k) = (5, 64);
        let values: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let mut blocks = vec![0u8; n * k / QK * 17];
        quantize_mxfp4_gguf(&values, &mut blocks).unwrap();
        let back = TiledMxfp4::from_gguf(&blocks, n, k).unwrap().to_gguf();
        let (mut a, mut b) = (vec![0.0; n * k], vec![0.0; n * k]);
        dequantize_mxfp4_gguf(&blocks, &mut a).unwrap();
        dequantize_mxfp4_gguf(&back, &mut b).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn bad_shapes_are_refused() {
        let message = |r: Result<TiledMxfp4>| crate::error::shape_message(r, KERNEL);
        assert!(message(TiledMxfp4::from_gguf(&[0; 17], 1, 33)).contains("not a multiple of 32"));
        assert!(message(TiledMxfp4::from_gguf(&[0; 16], 1, 32)).contains("w holds 16 bytes"));
        assert!(message(TiledMxfp4::from_gguf(&[0; 17], usize::MAX, 32)).contains("overflows"));
    }

    fn nvidia(name: &str, sms: u32, optin_kib: u32) -> rocm_runtime::DeviceInfo {
        rocm_runtime::DeviceInfo {
            ordinal: 0,
            platform: rocm_runtime::Platform::Nvidia,
            code_objects: rocm_runtime::CodeObjectKind::Nvidia,
            name: name.into(),
            arch: "sm_90".into(),
            compute_units: sms,
            warp_size: 32,
            max_threads_per_block: 1024,
            max_grid: [i32::MAX as u32, 65_535, 65_535],
            shared_mem_per_block: 48 * 1024,
            shared_mem_per_block_optin: optin_kib * 1024,
            l2_cache_bytes: 50 << 20,
            total_memory: 80 << 30,
            pci_bus_id: 0,
            stream_ordered_memory: true,
            matrix_cores: MatrixCores::MmaSync,
            warpgroup_mma: true,
            dependent_launch: false,
            cooperative_launch: true,
            tensor_maps: true,
            drives_display: false,
        }
    }

    /// Resident blocks follow the multiprocessor's shared memory: 3 a multiprocessor on an H100
    /// (227 KiB a block opt-in), 2 on an A100 (163 KiB); warps never outnumber groups.
    #[test]
    fn launch_shapes_fit_the_devices() {
        let h100 = nvidia("H100", 132, 227);
        let a100 = nvidia("A100", 108, 163);
        let one = Loop::One;
        let shared = mma_shared_bytes(one, 8, 4096, "bf16", false);
        assert_eq!(shared, 8 * (3 * 2176 + 128) + 4096 * 2 + 128 * 4);
        assert_eq!(launch_shape(&h100, one, 14_336, 4096, "bf16", false).unwrap(), (3 * 132, 8, shared));
        assert_eq!(launch_shape(&a100, one, 14_336, 4096, "bf16", false).unwrap(), (2 * 108, 8, shared));
        let ring = mma_shared_bytes(one, 8, 4096, "f16", false);
        assert_eq!(ring, 8 * (3 * 2688 + 128));
        assert_eq!(launch_shape(&h100, one, 14_336, 4096, "f16", false).unwrap(), (3 * 132, 8, ring));
        // Fewer tiles than slots: a tile a block (bf16 x of 14336 elements leaves 2 blocks an SM).
        let long = mma_shared_bytes(one, 8, 14_336, "bf16", false);
        assert_eq!(long, 8 * (3 * 2176 + 128) + 14_336 * 2 + 448 * 4);
        assert_eq!(launch_shape(&h100, one, 4096, 14_336, "bf16", false).unwrap(), (256, 8, long));
        assert_eq!(launch_shape(&h100, one, 8192, 14_336, "bf16", false).unwrap(), (2 * 132, 8, long));
        assert_eq!(launch_shape(&h100, one, 8192, 14_336, "f16", false).unwrap(), (3 * 132, 8, ring));
        // k = 96: one group, one warp; bf16 x padded to the group's 8 blocks.
        assert_eq!(
            launch_shape(&h100, one, 7, 96, "f16", false).unwrap(),
            (1, 1, mma_shared_bytes(one, 1, 96, "f16", false))
        );
        assert_eq!(mma_shared_bytes(one, 1, 96, "f16", false), 3 * 2688 + 128);
        assert_eq!(mma_shared_bytes(one, 1, 96, "bf16", false), 3 * 2176 + 128 + 8 * 68);
        assert_eq!(
            launch_shape(&h100, Loop::Portable { normed: false }, 14_336, 4096, "bf16", false).unwrap(),
            (896, 8, 0)
        );
        // Several vectors: no x in the stages or staged, totals of 8 or 32 columns; the
        // 32-vector loop keeps 2 blocks an SM.
        let b8 = Loop::Batch { passes: 1 };
        let b32 = Loop::Batch { passes: 4 };
        assert_eq!(mma_shared_bytes(b8, 8, 14_336, "f16", false), 8 * (3 * 2176 + 128 * 8));
        assert_eq!(mma_shared_bytes(b32, 8, 14_336, "bf16", false), 8 * (3 * 2176 + 128 * 32));
        assert_eq!(launch_shape(&h100, b8, 14_336, 14_336, "bf16", false).unwrap().0, 3 * 132);
        assert_eq!(launch_shape(&h100, b32, 14_336, 4096, "f16", false).unwrap().0, 2 * 132);
        // A device offering less shared memory gets fewer warps, or an error.
        assert_eq!(launch_shape(&nvidia("small", 10, 48), one, 160, 4096, "f16", false).unwrap().1, 4);
        assert!(launch_shape(&nvidia("tiny", 10, 4), one, 160, 4096, "f16", false).is_err());
        // A row too long for x to be staged whole is refused, saying so; the several-vector
        // loop takes it.
        let message =
            crate::error::shape_message(launch_shape(&h100, one, 16, 32 * 4096, "bf16", false), KERNEL);
        assert!(message.contains("x is staged whole"), "{message}");
        assert!(launch_shape(&h100, b8, 16, 32 * 4096, "bf16", false).is_ok());
    }

    /// A gate-and-up launch walks pairs of tiles (at most one block a pair) and keeps a tile's
    /// gates past everything else: 16 floats a column.
    #[test]
    fn swiglu_launches_walk_pairs_and_keep_the_gates() {
        let h100 = nvidia("H100", 132, 227);
        let (one, b32) = (Loop::One, Loop::Batch { passes: 4 });
        assert_eq!(mma_shared_bytes(one, 1, 96, "f16", true), 3 * 2688 + 128 + 64);
        assert_eq!(mma_shared_bytes(b32, 8, 4096, "bf16", true), 8 * (3 * 2176 + 128 * 32) + 64 * 32);
        let gate_up = launch_shape(&h100, one, 2 * 14_336, 4096, "bf16", true).unwrap();
        assert_eq!(gate_up, (3 * 132, 8, mma_shared_bytes(one, 8, 4096, "bf16", true)));
        assert_eq!(launch_shape(&h100, one, 2 * 48, 4096, "f16", true).unwrap().0, 3);
        assert_eq!(
            launch_shape(&h100, Loop::Portable { normed: false }, 2 * 14_336, 4096, "bf16", true).unwrap().0,
            896
        );
    }

    #[test]
    fn entries_follow_the_device_the_batch_and_the_scales() {
        let entry_for =
            |cores, dtype, batch, max_scale| entry(choose_loop(cores, dtype, batch, false), dtype, max_scale);
        assert_eq!(entry_for(MatrixCores::MmaSync, "f16", 1, 240), "rf_mxfp4_tiled_matvec_mma_f16");
        assert_eq!(entry_for(MatrixCores::MmaSync, "bf16", 1, 241), "rf_mxfp4_tiled_matvec_mma_wide_bf16");
        assert_eq!(entry_for(MatrixCores::MmaSync, "bf16", 2, 0), "rf_mxfp4_tiled_batch8_mma_bf16");
        assert_eq!(entry_for(MatrixCores::MmaSync, "f16", 8, 255), "rf_mxfp4_tiled_batch8_mma_wide_f16");
        assert_eq!(entry_for(MatrixCores::MmaSync, "f16", 9, 0), "rf_mxfp4_tiled_batch32_mma_f16");
        assert_eq!(entry_for(MatrixCores::MmaSync, "bf16", 32, 0), "rf_mxfp4_tiled_batch32_mma_bf16");
        assert_eq!(entry_for(MatrixCores::MmaSync, "f32", 8, 0), "rf_mxfp4_tiled_matvec_f32");
        assert_eq!(entry_for(MatrixCores::None, "f16", 1, 0), "rf_mxfp4_tiled_matvec_f16");
        let normed = |cores, dtype, max_scale| entry(choose_loop(cores, dtype, 1, true), dtype, max_scale);
        assert_eq!(normed(MatrixCores::MmaSync, "f16", 0), "rf_mxfp4_tiled_normed_mma_f16");
        assert_eq!(normed(MatrixCores::MmaSync, "bf16", 255), "rf_mxfp4_tiled_normed_mma_wide_bf16");
        assert_eq!(normed(MatrixCores::MmaSync, "f32", 0), "rf_mxfp4_tiled_normed_f32");
        assert_eq!(normed(MatrixCores::None, "bf16", 0), "rf_mxfp4_tiled_normed_bf16");
    }

    /// A normed launch stages x once whatever its type: f16 too leaves x out of its stages.
    #[test]
    fn normed_launches_stage_x_once() {
        let h100 = nvidia("H100", 132, 227);
        let bf16 = mma_shared_bytes(Loop::One, 8, 4096, "bf16", false);
        for dtype in ["f16", "bf16"] {
            assert_eq!(mma_shared_bytes(Loop::Normed, 8, 4096, dtype, false), bf16);
            // A layer's Q, K and V (6144 rows): a tile a block, fewer than the 3 * 132 slots.
            assert_eq!(launch_shape(&h100, Loop::Normed, 6144, 4096, dtype, false).unwrap(), (384, 8, bf16));
        }
    }
}
