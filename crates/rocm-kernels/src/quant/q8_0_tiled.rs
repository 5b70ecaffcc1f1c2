//! `q8_0_tiled` (`kernels/q8_0_tiled.hip`): the q8_0 matrix-vector product of one vector over a
//! weight re-laid out once, on the host, for the kernel's loads (the tiled shape
//! [`super::mxfp4_tiled`] gave MXFP4 and [`super::q4k_tiled`] q4_K).
//!
//! GGUF's `block_q8_0` rows (34-byte blocks of 32 elements: a scale `d` as f16, then 32 int8
//! codes `q`; element `i` is `d * q_i`) put a lane's codes for its matrix-core fragments 34 bytes
//! apart and unaligned. [`TiledQ8::from_gguf`] rewrites them so that a warp's share of the weight
//! is one contiguous run, each lane reads exactly its codes 16 bytes at a time, and the scales sit
//! in runs of their own; [`q8_0_matvec_tiled_fused`] multiplies one vector (on NVIDIA's matrix
//! cores; the portable kernel elsewhere), with the norm, SwiGLU and residual forms of the other
//! tiled layouts, [`q8_0_matvec_tiled_split`] and [`q8_0_matvec_tiled_rows`] any number (on the
//! matrix cores up to 32 a launch), and [`dequantize_tiled_q8`] gives the rows back for a
//! prefill's GEMM. Decoding is exact and the sums are f32, as in [`super::quant_matvec`], which
//! reads the GGUF rows as they are.
//!
//! # Layout
//!
//! `W[n, k]`, `k` a multiple of 256, `ng = k / 256` groups of 8 blocks a row. Rows are grouped
//! in tiles of [`TILE_ROWS`] = 16, the last padded with rows of zeros (`d = 0`).
//!
//! - **Payload**, `tiles * ng * 4096` bytes: for tile `t`, group `s`, mma pair `P < 8`
//!   (`h = P / 4`, `e = P % 4`) and lane `l = 4g + u` (`g < 8`, `u < 4`), 16 bytes at
//!   `(((t * ng + s) * 8 + P) * 32 + l) * 16`: the little-endian words `R(g, 0)`, `R(g + 8, 0)`,
//!   `R(g, 4)`, `R(g + 8, 4)`, rows counted inside the tile.
//! - **Word** `R(r, m)`: row `r`'s elements `8e + m + i` (`i < 4`) of block `u + 4h` of the
//!   group, element `8e + m + i` in byte `i`, each code `q` stored as the byte `q + 128`
//!   (0..=255), so that a byte above a zero byte is the f16 subnormal `(q + 128) 2^-24`: the
//!   kernel's decode.
//! - **Scales**, `tiles * ng * 256` bytes: row `rt`'s 8 block scales of tile `t`, group `s`, as
//!   GGUF stores them (f16), at `((t * ng + s) * 16 + rt) * 16 + 2 j` for block `j`.
//!
//! So a tiled weight is the GGUF bytes (34 a block) plus the last tile's padding rows.

use rocm_runtime::{DeviceBuffer, Stream};

use super::tiled::{
    self, ColumnsLayout, DeviceTiledBytes, Mode, TILE_ROWS, TiledBuffers, TiledBytes, TiledNorm, TiledOutput,
};
use super::{Q8_0_BLOCK_BYTES, QK};
use crate::KernelModule;
use crate::abi::mxfp4_tiled as abi;
use crate::dtype::Dtype;
use crate::error::{KernelError, Result, ensure};
use crate::launchable::Launchable;

const KERNEL: &str = "q8_0_tiled";
const MODULE: KernelModule = KernelModule::Q80Tiled;

/// Elements of a group: 8 blocks.
const GROUP: usize = 8 * QK;
/// Bytes of a group's codes and of its scales (16 rows each).
const PAYLOAD_BYTES: usize = abi::RF_T8_PAYLOAD_BYTES as usize;
const SCALE_BYTES: usize = abi::RF_T8_SCALE_BYTES as usize;
/// A stage's bytes in a warp's ring.
const STAGE_BYTES: usize = abi::RF_T8_STAGE as usize;
/// Blocks of 8 warps an SM the one-vector loop keeps resident at most (its launch bounds).
const RESIDENT_BLOCKS: usize = abi::RF_T8_RESIDENT_BLOCKS as usize;
/// What a code byte holds over its code.
const CODE_OFFSET: i32 = 128;

/// Byte offset of word `R(rt, m)` (`m` 0 or 4) of tile `tile`, group `s`, pair `p`, lane column
/// `u` in the payload.
fn word_offset(tile: usize, ng: usize, s: usize, p: usize, rt: usize, u: usize, m: usize) -> usize {
    let lane = 4 * (rt % 8) + u;
    (((tile * ng + s) * 8 + p) * 32 + lane) * 16 + 8 * (m / 4) + 4 * (rt / 8)
}

/// Element of a group that byte `i` of word `R(., m)` of pair `p`, lane column `u` holds.
fn word_element(p: usize, u: usize, m: usize, i: usize) -> usize {
    QK * (u + 4 * (p / 4)) + 8 * (p % 4) + m + i
}

/// Byte offset of row `rt`'s scale of block `j` of tile `tile`, group `s`.
fn scale_offset(tile: usize, ng: usize, s: usize, rt: usize, j: usize) -> usize {
    ((tile * ng + s) * TILE_ROWS + rt) * 16 + 2 * j
}

/// Bytes of a tiled weight: (payload, scales) for an `[n, k]` matrix, `None` on overflow.
fn tiled_bytes(n: usize, k: usize) -> Option<(usize, usize)> {
    let groups = n.div_ceil(TILE_ROWS).checked_mul(k / GROUP)?;
    Some((groups.checked_mul(PAYLOAD_BYTES)?, groups.checked_mul(SCALE_BYTES)?))
}

/// An `[n, k]` q8_0 weight in the tiled layout (module docs), on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiledQ8 {
    tiles: TiledBytes,
}

impl TiledQ8 {
    /// Re-lays out `n` rows of `k / 32` GGUF `block_q8_0` blocks (`n * k / 32 * 34` bytes), `k` a
    /// multiple of 256.
    pub fn from_gguf(blocks: &[u8], n: usize, k: usize) -> Result<Self> {
        ensure(k.is_multiple_of(GROUP), KERNEL, || format!("k = {k} is not a multiple of {GROUP}"))?;
        tiled::check_gguf_rows(KERNEL, blocks.len(), n, k, (QK, Q8_0_BLOCK_BYTES, "q8_0 blocks"))?;
        let ng = k / GROUP;
        let (payload_bytes, scale_bytes) = tiled_bytes(n, k).ok_or_else(|| KernelError::Shape {
            kernel: KERNEL,
            message: format!("the tiled [{n}, {k}] weight overflows usize"),
        })?;
        let mut payload = vec![CODE_OFFSET as u8; payload_bytes];
        let mut scales = vec![0u8; scale_bytes];
        for (r, row) in blocks.chunks_exact((k / QK * Q8_0_BLOCK_BYTES).max(1)).take(n).enumerate() {
            let (tile, rt) = (r / TILE_ROWS, r % TILE_ROWS);
            for s in 0..ng {
                let group = &row[s * 8 * Q8_0_BLOCK_BYTES..][..8 * Q8_0_BLOCK_BYTES];
                for (j, block) in group.chunks_exact(Q8_0_BLOCK_BYTES).enumerate() {
                    let at = scale_offset(tile, ng, s, rt, j);
                    scales[at..at + 2].copy_from_slice(&block[..2]);
                }
                let code = |e: usize| {
                    let b = e / QK;
                    group[b * Q8_0_BLOCK_BYTES + 2 + e % QK] ^ 0x80 // q + 128 as a byte
                };
                for p in 0..8 {
                    for u in 0..4 {
                        for m in [0, 4] {
                            let at = word_offset(tile, ng, s, p, rt, u, m);
                            for i in 0..4 {
                                payload[at + i] = code(word_element(p, u, m, i));
                            }
                        }
                    }
                }
            }
        }
        Ok(TiledQ8 { tiles: TiledBytes { n, k, payload, scales } })
    }

    /// The GGUF `block_q8_0` rows this weight was made from (the inverse of [`Self::from_gguf`]).
    pub fn to_gguf(&self) -> Vec<u8> {
        let ng = self.tiles.k / GROUP;
        let mut out = vec![0u8; self.tiles.n * self.tiles.k / QK * Q8_0_BLOCK_BYTES];
        for r in 0..self.tiles.n {
            let (tile, rt) = (r / TILE_ROWS, r % TILE_ROWS);
            for s in 0..ng {
                let group = &mut out[(r * ng + s) * 8 * Q8_0_BLOCK_BYTES..][..8 * Q8_0_BLOCK_BYTES];
                for j in 0..8 {
                    let at = scale_offset(tile, ng, s, rt, j);
                    group[j * Q8_0_BLOCK_BYTES..][..2].copy_from_slice(&self.tiles.scales[at..at + 2]);
                }
                for p in 0..8 {
                    for u in 0..4 {
                        for m in [0, 4] {
                            let at = word_offset(tile, ng, s, p, rt, u, m);
                            for i in 0..4 {
                                let e = word_element(p, u, m, i);
                                group[e / QK * Q8_0_BLOCK_BYTES + 2 + e % QK] =
                                    self.tiles.payload[at + i] ^ 0x80;
                            }
                        }
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

    /// The codes (`q + 128`), in the layout's order.
    pub fn payload(&self) -> &[u8] {
        &self.tiles.payload
    }

    /// The blocks' scales, in the layout's order.
    pub fn scales(&self) -> &[u8] {
        &self.tiles.scales
    }

    /// Weights of the same `k` stacked along their rows into one, `[sum of n, k]`, as
    /// [`super::TiledQ4k::stack`] does: the parts' bytes one after another, every part but the
    /// last whole tiles.
    pub fn stack(parts: &[&TiledQ8]) -> Result<Self> {
        let parts: Vec<_> = parts.iter().map(|p| &p.tiles).collect();
        Ok(TiledQ8 { tiles: TiledBytes::stack(KERNEL, &parts)? })
    }

    /// Copies the weight to `stream`'s device.
    pub fn upload(&self, stream: &Stream) -> Result<DeviceTiledQ8> {
        Ok(DeviceTiledQ8 { tiles: self.tiles.upload(stream)? })
    }
}

/// A [`TiledQ8`] on a device ([`TiledQ8::upload`]).
#[derive(Debug)]
pub struct DeviceTiledQ8 {
    tiles: DeviceTiledBytes,
}

impl DeviceTiledQ8 {
    pub fn n(&self) -> usize {
        self.tiles.n
    }

    pub fn k(&self) -> usize {
        self.tiles.k
    }

    /// Device bytes the weight occupies (codes and scales, the last tile's padding included).
    pub fn bytes(&self) -> usize {
        self.tiles.bytes()
    }

    /// Device bytes of the first `rows` rows' tiles (a stacked weight's parts, each but the last
    /// whole tiles, add up to [`Self::bytes`]).
    pub fn rows_bytes(&self, rows: usize) -> usize {
        tiled_bytes(rows, self.tiles.k).map_or(usize::MAX, |(payload, scales)| payload + scales)
    }
}

/// Whether `T` takes the matrix-core kernels on `stream`'s device (NVIDIA `mma.sync`, sm_80+, f16
/// or bf16): one vector, or up to [`MAX_TILED_BATCH`] a launch; elsewhere the portable kernel
/// runs (any device, f32 / f16 / bf16, any batch; a lane's codes times x in f32, far slower past
/// one vector).
pub fn q8_0_tiled_on_matrix_cores<T: Dtype>(stream: &Stream) -> bool {
    tiled::columns_on_matrix_cores::<T>(stream)
}

/// The layout as the shared launcher takes it ([`tiled::ColumnsLayout`]): two blocks of 8 warps
/// an SM for one vector, one for several (their x loads take the registers; the entries' launch
/// bounds).
const LAYOUT: ColumnsLayout = ColumnsLayout {
    kernel: KERNEL,
    module: MODULE,
    name: "q8_0",
    stage: STAGE_BYTES,
    resident: [RESIDENT_BLOCKS, 1, 1],
};

/// `y = W x` for a tiled q8_0 weight and one vector: `x` holds `k` and `y` `n` elements.
pub fn q8_0_matvec_tiled<T: Dtype>(
    w: &DeviceTiledQ8,
    x: &DeviceBuffer<T>,
    y: &mut DeviceBuffer<T>,
) -> Result<()> {
    launch(w, 0..w.tiles.n, x, 1, None, &mut [y], Mode::Store, false)
}

/// The tiled q8_0 product of one vector `x` (`k` elements) in every form one launch takes:
/// through `norm` first where given (`x` is then the residual stream's row, [`TiledNorm`]), into
/// `out` ([`TiledOutput`]: a stacked weight's parts each into its output, a gate-and-up product's
/// SwiGLU, or added to the residual stream), as [`super::q4k_matvec_tiled_fused`] does for q4_K.
/// Products are exact and sums f32, rounded to `T` once; x is first staged as f16 (bf16 as
/// block-scaled f16: `kernels/include/rocmforge_x16.h`, exact but for elements 2^31 below their
/// block's largest) on the matrix cores ([`q8_0_tiled_on_matrix_cores`]); elsewhere the portable
/// kernel runs.
pub fn q8_0_matvec_tiled_fused<T: Dtype>(
    w: &DeviceTiledQ8,
    x: &DeviceBuffer<T>,
    norm: Option<TiledNorm<'_, T>>,
    out: TiledOutput<'_, '_, T>,
) -> Result<()> {
    let all = 0..w.tiles.n;
    match out {
        TiledOutput::Split(ys) => launch(w, all, x, 1, norm, ys, Mode::Store, false),
        TiledOutput::Swiglu(act) => launch(w, all, x, 1, norm, &mut [act], Mode::Swiglu, false),
        TiledOutput::Add(h) => launch(w, all, x, 1, norm, &mut [h], Mode::Add, false),
    }
}

/// `Y = X W^T` for `batch` vectors `x` (`[batch, k]`) and a stacked weight into one output a
/// part (`ys[i]`: `[batch, rows_i]`): on the matrix cores where [`q8_0_tiled_on_matrix_cores`]
/// (in launches of [`MAX_TILED_BATCH`] vectors; several vectors as B's columns, two a block's
/// column pair), else or where `portable` on the portable kernel. Each vector's outputs are
/// within the one-vector kernel's bound (bf16 x rounded by the same rule, block by block).
pub fn q8_0_matvec_tiled_split<T: Dtype>(
    w: &DeviceTiledQ8,
    x: &DeviceBuffer<T>,
    batch: usize,
    ys: &mut [&mut DeviceBuffer<T>],
    portable: bool,
) -> Result<()> {
    launch(w, 0..w.tiles.n, x, batch, None, ys, Mode::Store, portable)
}

/// `act = silu(x Wg^T) * (x Wu^T)` for `batch` vectors `x` (`[batch, k]`), the products and the
/// activation in one launch a [`MAX_TILED_BATCH`] vectors: `w` is a gate weight and its up weight
/// stacked ([`TiledQ8::stack`], in that order, each `n / 2` rows, a whole number of tiles), and
/// `act` is `[batch, n / 2]`; each element has the bits of [`q8_0_matvec_tiled_split`] into gate
/// and up followed by `crate::swiglu::swiglu` on them.
pub fn q8_0_matvec_tiled_swiglu<T: Dtype>(
    w: &DeviceTiledQ8,
    x: &DeviceBuffer<T>,
    batch: usize,
    act: &mut DeviceBuffer<T>,
) -> Result<()> {
    launch(w, 0..w.tiles.n, x, batch, None, &mut [act], Mode::Swiglu, false)
}

/// [`q8_0_matvec_tiled_split`] of rows `rows` of a stacked weight ([`TiledQ8::stack`];
/// `rows.start` a whole number of tiles: a part's first row) into `y` (`[batch, rows.len()]`):
/// one part alone.
pub fn q8_0_matvec_tiled_rows<T: Dtype>(
    w: &DeviceTiledQ8,
    rows: std::ops::Range<usize>,
    x: &DeviceBuffer<T>,
    batch: usize,
    y: &mut DeviceBuffer<T>,
) -> Result<()> {
    launch(w, rows, x, batch, None, &mut [y], Mode::Store, false)
}

/// Checks that `rows` is a part of `w` (inside it, from a tile's first row) and gives the
/// buffers from its first tile.
fn part<'a>(w: &'a DeviceTiledQ8, rows: &std::ops::Range<usize>) -> Result<TiledBuffers<'a>> {
    w.tiles.part(KERNEL, rows, |start| tiled_bytes(start, w.tiles.k))
}

/// Rows `rows` of `w` times `batch` vectors `x` (through `norm` first where given: one vector)
/// into `ys` as `mode` says; `portable` runs the portable kernel whatever the device has.
#[allow(clippy::too_many_arguments)] // the launcher every public form funnels into
fn launch<T: Dtype>(
    w: &DeviceTiledQ8,
    rows: std::ops::Range<usize>,
    x: &DeviceBuffer<T>,
    batch: usize,
    norm: Option<TiledNorm<'_, T>>,
    ys: &mut [&mut DeviceBuffer<T>],
    mode: Mode,
    portable: bool,
) -> Result<()> {
    let buffers = part(w, &rows)?;
    // SAFETY: the part's tiles, from its first (checked whole and inside the weight), of rows of
    // k elements (k a multiple of 256: TiledQ8::from_gguf checks it), as TiledQ8::upload laid
    // them out: a DeviceTiledQ8 is only built from a layout of exactly its n and k.
    unsafe { LAYOUT.launch(buffers, (rows.len(), w.tiles.k), x, batch, norm, ys, mode, portable) }
}

/// Rows `rows` of a tiled q8_0 weight (a part of a stacked one: `rows.start` a whole number of
/// tiles) dequantised to `T` into the first `rows.len() * k` elements of `out` (row-major; `out`
/// may be longer): the operand of a prefill's GEMM. Each element is `d q` in f32 rounded to `T`
/// once, what `dequantize` gives from the GGUF rows.
pub fn dequantize_tiled_q8<T: Dtype>(
    w: &DeviceTiledQ8,
    rows: std::ops::Range<usize>,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    let buffers = part(w, &rows)?;
    let Some(args) = tiled::dequant_args(KERNEL, rows.len(), w.tiles.k, out)? else {
        return Ok(());
    };
    // A thread a run of 8 elements of the output.
    let runs = rows.len() * (w.tiles.k / 8);
    let entry = format!("rf_q8_0_tiled_dequant_{}", T::NAME);
    // SAFETY: the part's tiles from its first (checked whole and inside the weight), of which the
    // entry reads the payload and scales of rows.len() rows, as TiledQ8::upload laid them out; out
    // holds rows k elements (dequant_args), written in runs of 8 from the first.
    unsafe { tiled::launch_dequant(MODULE, &entry, buffers, args, runs, out) }
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    tiled::columns_launchable(&LAYOUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize_q8_0, quantize_q8_0};
    use rocm_runtime::f16;

    /// `n` rows of `k` random q8_0 weights (a wide range of scales), as GGUF bytes.
    fn random_rows(seed: u64, n: usize, k: usize) -> Vec<u8> {
        let mut state = seed;
        let values: Vec<f32> = (0..n * k)
            .map(|i| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                unit * (1 + (i / 32) % 7) as f32
            })
            .collect();
        let mut out = vec![0u8; n * k / QK * Q8_0_BLOCK_BYTES];
        quantize_q8_0(&values, &mut out).unwrap();
        out
    }

    /// Row `r` of a tiled weight decoded from the layout's description alone (not the packer's
    /// helpers): each element from its byte, and its block's scale.
    fn decode_row(t: &TiledQ8, r: usize) -> Vec<f32> {
        let ng = t.k() / 256;
        let (tile, rt) = (r / 16, r % 16);
        let mut out = vec![0f32; t.k()];
        for s in 0..ng {
            for p in 0..8 {
                for u in 0..4 {
                    let lane = 4 * (rt % 8) + u;
                    let at = (((tile * ng + s) * 8 + p) * 32 + lane) * 16 + 4 * (rt / 8);
                    let j = u + 4 * (p / 4);
                    let sc = &t.scales()[((tile * ng + s) * 16 + rt) * 16 + 2 * j..][..2];
                    let d = f16::from_bits(u16::from_le_bytes([sc[0], sc[1]])).to_f32();
                    for (half, m) in [(0, 0), (1, 4)] {
                        for i in 0..4 {
                            let byte = t.payload()[at + 8 * half + i];
                            let e = 32 * j + 8 * (p % 4) + m + i;
                            out[s * 256 + e] = d * (i32::from(byte) - 128) as f32;
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn tiled_rows_decode_as_the_gguf_rows_and_round_trip() {
        for (n, k) in [(1, 256), (16, 512), (37, 1024), (50, 256)] {
            let gguf = random_rows(n as u64 * 31 + k as u64, n, k);
            let t = TiledQ8::from_gguf(&gguf, n, k).unwrap();
            assert_eq!(t.to_gguf(), gguf, "[{n}, {k}] round trip");
            let tiles = n.div_ceil(16);
            assert_eq!(t.payload().len() + t.scales().len(), tiles * 16 * k / QK * Q8_0_BLOCK_BYTES);
            let row_bytes = k / QK * Q8_0_BLOCK_BYTES;
            let mut row = vec![0f32; k];
            for r in 0..n {
                dequantize_q8_0(&gguf[r * row_bytes..][..row_bytes], &mut row).unwrap();
                assert_eq!(decode_row(&t, r), row, "[{n}, {k}] row {r}");
            }
            // The padding rows decode to zeros (codes 0, scales 0).
            for r in n..tiles * 16 {
                assert!(decode_row(&t, r).iter().all(|&v| v == 0.0), "[{n}, {k}] padding row {r}");
            }
        }
    }

    #[test]
    fn stacked_weights_are_their_parts_one_after_another() {
        let (a, b) = (random_rows(1, 32, 512), random_rows(2, 20, 512));
        let (ta, tb) = (TiledQ8::from_gguf(&a, 32, 512).unwrap(), TiledQ8::from_gguf(&b, 20, 512).unwrap());
        let s = TiledQ8::stack(&[&ta, &tb]).unwrap();
        assert_eq!(s.n(), 52);
        assert_eq!(s.to_gguf(), [a, b].concat());
        let message = |r: Result<TiledQ8>| crate::error::shape_message(r.map(|_| ()), KERNEL);
        assert_eq!(
            message(TiledQ8::stack(&[&tb, &ta])),
            "weight 0 has 20 rows; every weight but the last needs a multiple of 16"
        );
    }

    #[test]
    fn malformed_weights_are_refused() {
        let message = |r: Result<TiledQ8>| crate::error::shape_message(r.map(|_| ()), KERNEL);
        assert_eq!(message(TiledQ8::from_gguf(&[], 1, 96)), "k = 96 is not a multiple of 256");
        assert_eq!(
            message(TiledQ8::from_gguf(&[0; 100], 1, 256)),
            "w holds 100 bytes; 1 rows of 8 q8_0 blocks need 272"
        );
        assert_eq!(
            message(TiledQ8::from_gguf(&[], usize::MAX, 512)),
            format!("[{}, 512] overflows usize", usize::MAX)
        );
    }

    #[test]
    fn shared_memory_fits_the_model_shapes() {
        use crate::quant::tiled::Loop;
        let shared = |lp, k, swiglu| LAYOUT.shared_bytes(lp, 8, k, swiglu);
        // An H100's opt-in limit (227 KB) holds 8 warps at the model's k with x staged whole, two
        // blocks an SM at k = 4096.
        assert!(2 * (shared(Loop::One, 4096, true) + 1024) <= 228 * 1024);
        assert!(shared(Loop::One, 14336, true) <= 227 * 1024);
        assert_eq!(shared(Loop::One, 4096, false), 8 * (3 * 4352 + 2 * 16 * 4) + 128 * 72 + 512);
        // The several-vector loops.
        assert!(shared(Loop::Batch { passes: 1 }, 14336, true) <= 227 * 1024);
        assert!(shared(Loop::Batch { passes: 4 }, 14336, true) <= 227 * 1024);
        assert_eq!(LAYOUT.entry(Loop::One, true, "bf16"), "rf_q8_0_tiled_normed_mma_bf16");
        assert_eq!(LAYOUT.entry(Loop::Portable, false, "f32"), "rf_q8_0_tiled_matvec_f32");
        assert_eq!(LAYOUT.entry(Loop::Batch { passes: 4 }, false, "f16"), "rf_q8_0_tiled_batch32_mma_f16");
    }
}
