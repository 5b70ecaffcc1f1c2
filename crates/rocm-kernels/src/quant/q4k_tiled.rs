//! `q4k_tiled` (`kernels/q4k_tiled.hip`): the q4_K matrix-vector product over a weight re-laid
//! out once, on the host, for the kernel's loads (the tiled shape [`super::mxfp4_tiled`] gave
//! MXFP4).
//!
//! GGUF's `block_q4_K` rows (144-byte super-blocks of 256 elements: `d`, `dmin`, 12 bytes of 6-bit
//! sub-block scales and mins, 128 bytes of 4-bit codes) put a lane's codes for its matrix-core
//! fragments far apart, and each super-block's header between them. [`TiledQ4k::from_gguf`]
//! rewrites the same bytes so that a warp's share of the weight is one contiguous run, each lane
//! reads exactly its codes 16 bytes at a time, and the headers sit in runs of their own;
//! [`q4k_matvec_tiled_fused`] multiplies one vector (on NVIDIA's matrix cores; the portable
//! kernel elsewhere), [`q4k_matvec_tiled_split`] any number (on the matrix cores up to 32 a
//! launch, the sub-block scales in A; the portable kernel elsewhere), and
//! [`dequantize_tiled_q4k`] gives the rows back for a prefill's GEMM. Decoding is exact and the
//! sums are f32, as in [`super::quant_matvec`], which reads the GGUF rows as they are.
//!
//! # Layout
//!
//! `W[n, k]`, `k` a multiple of 256, `nsb = k / 256` super-blocks a row. Rows are grouped in
//! tiles of [`TILE_ROWS`] = 16, the last padded with rows of zeros (codes 0, `d = dmin = 0`).
//!
//! - **Payload**, `tiles * nsb * 2048` bytes: for tile `t`, super-block `s`, mma pair `P < 8`
//!   (`h = P / 4`, `e = P % 4`) and lane `l = 4g + u` (`g < 8`, `u < 4`), the little-endian
//!   words `W(g, P, u)` and `W(g + 8, P, u)` at byte
//!   `(((t * nsb + s) * 4 + P / 2) * 32 + l) * 16 + 8 * (P % 2)`, rows counted inside the tile.
//! - **Word** `W(r, P, u)`: row `r`'s elements `8e + m` (`m < 8`) of sub-block `u + 4h` (element
//!   `32 (u + 4h) + 8e + m` of the super-block), element `m` in nibble `NIBBLE[m]` =
//!   `0, 4, 2, 6, 1, 5, 3, 7` (bits `4 NIBBLE[m]` to `4 NIBBLE[m] + 3`). So elements 0..3 are two
//!   f16 subnormal pairs after one mask each (and a shift for the second), elements 4..7 the same
//!   at 16 times their value: the kernel's decode.
//! - **Headers**, `tiles * nsb * 256` bytes: the first 16 bytes of row `rt`'s `block_q4_K` of
//!   tile `t`, super-block `s` (`d`, `dmin`, the 12 scale bytes, as GGUF stores them) at
//!   `((t * nsb + s) * 16 + rt) * 16`: each super-block of a tile is 256 contiguous bytes, copied
//!   with its codes.
//!
//! So a tiled weight is the GGUF bytes (144 a super-block) plus the last tile's padding rows.

use rocm_runtime::{DeviceBuffer, Stream};

use super::kquant::{Q4_K_BLOCK_BYTES, QK_K};
use super::tiled::{
    self, BATCH32_RESIDENT_BLOCKS, ColumnsLayout, DeviceTiledBytes, Mode, RESIDENT_BLOCKS, TILE_ROWS,
    TiledBytes, TiledNorm, TiledOutput,
};
use crate::KernelModule;
use crate::abi::mxfp4_tiled as abi;
use crate::dtype::Dtype;
use crate::error::{KernelError, Result, ensure};
use crate::launchable::Launchable;

const KERNEL: &str = "q4k_tiled";
const MODULE: KernelModule = KernelModule::Q4kTiled;

/// Bytes of a super-block's header (`d`, `dmin`, 12 scale bytes) and of its codes.
const HEADER_BYTES: usize = 16;
const CODE_BYTES: usize = Q4_K_BLOCK_BYTES - HEADER_BYTES;
/// Where element `m` of a word's eight lies: nibble `NIBBLE[m]` (module docs).
const NIBBLE: [u32; 8] = [0, 4, 2, 6, 1, 5, 3, 7];
/// A stage's bytes in a warp's ring.
const STAGE_BYTES: usize = abi::RF_T4K_STAGE as usize;

/// Code `i` (< 256) of a GGUF `block_q4_K`'s 128 code bytes: sub-block `j = i / 32` is the low
/// nibbles (`j` even) or the high ones (`j` odd) of bytes `32 (j / 2) ..`.
fn gguf_code(codes: &[u8], i: usize) -> u8 {
    let (byte, shift) = gguf_code_place(i);
    (codes[byte] >> shift) & 15
}

/// Where code `i` sits among the code bytes: (byte, shift of its nibble).
fn gguf_code_place(i: usize) -> (usize, u32) {
    let (j, l) = (i / 32, i % 32);
    (32 * (j / 2) + l, 4 * (j % 2) as u32)
}

/// Byte offset of word `W(rt, p, u)` of tile `tile`, super-block `s` in the payload.
fn word_offset(tile: usize, nsb: usize, s: usize, p: usize, rt: usize, u: usize) -> usize {
    let lane = 4 * (rt % 8) + u;
    (((tile * nsb + s) * 4 + p / 2) * 32 + lane) * 16 + 8 * (p % 2) + 4 * (rt / 8)
}

/// Byte offset of row `rt`'s header of tile `tile`, super-block `s`.
fn header_offset(tile: usize, nsb: usize, s: usize, rt: usize) -> usize {
    ((tile * nsb + s) * TILE_ROWS + rt) * HEADER_BYTES
}

/// Element `32 (u + 4h) + 8e + m` of a super-block: the one word `W(., p, u)` holds as its `m`th.
fn word_element(p: usize, u: usize, m: usize) -> usize {
    32 * (u + 4 * (p / 4)) + 8 * (p % 4) + m
}

/// Bytes of a tiled weight: (payload, headers) for an `[n, k]` matrix, `None` on overflow.
fn tiled_bytes(n: usize, k: usize) -> Option<(usize, usize)> {
    let cells = n.div_ceil(TILE_ROWS).checked_mul(TILE_ROWS)?.checked_mul(k / QK_K)?;
    Some((cells.checked_mul(CODE_BYTES)?, cells.checked_mul(HEADER_BYTES)?))
}

/// An `[n, k]` q4_K weight in the tiled layout (module docs), on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiledQ4k {
    /// The codes as the payload, the super-blocks' headers as the scales.
    tiles: TiledBytes,
}

impl TiledQ4k {
    /// Re-lays out `n` rows of `k / 256` GGUF `block_q4_K` super-blocks (`n * k / 256 * 144`
    /// bytes).
    pub fn from_gguf(blocks: &[u8], n: usize, k: usize) -> Result<Self> {
        tiled::check_gguf_rows(KERNEL, blocks.len(), n, k, (QK_K, Q4_K_BLOCK_BYTES, "q4_K super-blocks"))?;
        let nsb = k / QK_K;
        let (payload_bytes, header_bytes) = tiled_bytes(n, k).ok_or_else(|| KernelError::Shape {
            kernel: KERNEL,
            message: format!("the tiled [{n}, {k}] weight overflows usize"),
        })?;
        let mut payload = vec![0u8; payload_bytes];
        let mut headers = vec![0u8; header_bytes];
        for (r, row) in blocks.chunks_exact((nsb * Q4_K_BLOCK_BYTES).max(1)).take(n).enumerate() {
            let (tile, rt) = (r / TILE_ROWS, r % TILE_ROWS);
            for (s, block) in row.chunks_exact(Q4_K_BLOCK_BYTES).enumerate() {
                let at = header_offset(tile, nsb, s, rt);
                headers[at..at + HEADER_BYTES].copy_from_slice(&block[..HEADER_BYTES]);
                let codes = &block[HEADER_BYTES..];
                for p in 0..8 {
                    for u in 0..4 {
                        let word = (0..8).fold(0u32, |w, m| {
                            w | u32::from(gguf_code(codes, word_element(p, u, m))) << (4 * NIBBLE[m])
                        });
                        let at = word_offset(tile, nsb, s, p, rt, u);
                        payload[at..at + 4].copy_from_slice(&word.to_le_bytes());
                    }
                }
            }
        }
        Ok(TiledQ4k { tiles: TiledBytes { n, k, payload, scales: headers } })
    }

    /// The GGUF `block_q4_K` rows this weight was made from (the inverse of [`Self::from_gguf`]).
    pub fn to_gguf(&self) -> Vec<u8> {
        let nsb = self.tiles.k / QK_K;
        let mut out = vec![0u8; self.tiles.n * nsb * Q4_K_BLOCK_BYTES];
        for r in 0..self.tiles.n {
            let (tile, rt) = (r / TILE_ROWS, r % TILE_ROWS);
            for s in 0..nsb {
                let block = &mut out[(r * nsb + s) * Q4_K_BLOCK_BYTES..][..Q4_K_BLOCK_BYTES];
                let at = header_offset(tile, nsb, s, rt);
                block[..HEADER_BYTES].copy_from_slice(&self.tiles.scales[at..at + HEADER_BYTES]);
                let codes = &mut block[HEADER_BYTES..];
                for p in 0..8 {
                    for u in 0..4 {
                        let at = word_offset(tile, nsb, s, p, rt, u);
                        let word = u32::from_le_bytes(self.tiles.payload[at..at + 4].try_into().unwrap());
                        for (m, nibble) in NIBBLE.iter().enumerate() {
                            let (byte, shift) = gguf_code_place(word_element(p, u, m));
                            codes[byte] |= (((word >> (4 * nibble)) & 15) as u8) << shift;
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

    /// The codes, in the layout's order.
    pub fn payload(&self) -> &[u8] {
        &self.tiles.payload
    }

    /// The super-blocks' headers, in the layout's order.
    pub fn headers(&self) -> &[u8] {
        &self.tiles.scales
    }

    /// Weights of the same `k` stacked along their rows into one, `[sum of n, k]`: a layer's Q,
    /// K and V, or its gate and up, multiplied in one launch. The layout is tile by tile, so this
    /// is the parts' bytes one after another; every part but the last must have whole tiles
    /// ([`TILE_ROWS`] rows), so that no tile holds two parts.
    pub fn stack(parts: &[&TiledQ4k]) -> Result<Self> {
        let parts: Vec<_> = parts.iter().map(|p| &p.tiles).collect();
        Ok(TiledQ4k { tiles: TiledBytes::stack(KERNEL, &parts)? })
    }

    /// Copies the weight to `stream`'s device.
    pub fn upload(&self, stream: &Stream) -> Result<DeviceTiledQ4k> {
        Ok(DeviceTiledQ4k { tiles: self.tiles.upload(stream)? })
    }
}

/// A [`TiledQ4k`] on a device ([`TiledQ4k::upload`]).
#[derive(Debug)]
pub struct DeviceTiledQ4k {
    tiles: DeviceTiledBytes,
}

impl DeviceTiledQ4k {
    pub fn n(&self) -> usize {
        self.tiles.n
    }

    pub fn k(&self) -> usize {
        self.tiles.k
    }

    /// Device bytes the weight occupies (codes and headers, the last tile's padding included).
    pub fn bytes(&self) -> usize {
        self.tiles.bytes()
    }
}

/// Whether `T` takes the matrix-core kernels on `stream`'s device (NVIDIA `mma.sync`, sm_80+, f16
/// or bf16): one vector, or up to [`MAX_TILED_BATCH`] a launch; elsewhere the portable kernel
/// runs (any device, f32 / f16 / bf16, any batch; a lane's codes times x in f32, far slower past
/// one vector).
pub fn q4k_tiled_on_matrix_cores<T: Dtype>(stream: &Stream) -> bool {
    tiled::columns_on_matrix_cores::<T>(stream)
}

/// The layout as the shared launcher takes it ([`tiled::ColumnsLayout`]).
const LAYOUT: ColumnsLayout = ColumnsLayout {
    kernel: KERNEL,
    module: MODULE,
    name: "q4k",
    stage: STAGE_BYTES,
    resident: [RESIDENT_BLOCKS, RESIDENT_BLOCKS, BATCH32_RESIDENT_BLOCKS],
};

/// `y = W x` for a tiled q4_K weight and one vector: `x` holds `k` and `y` `n` elements.
pub fn q4k_matvec_tiled<T: Dtype>(
    w: &DeviceTiledQ4k,
    x: &DeviceBuffer<T>,
    y: &mut DeviceBuffer<T>,
) -> Result<()> {
    launch(w, x, 1, None, &mut [y], Mode::Store, false)
}

/// The tiled q4_K product of one vector `x` (`k` elements) in every form one launch takes:
/// through `norm` first where given (`x` is then the residual stream's row, [`TiledNorm`]), into
/// `out` ([`TiledOutput`]: a stacked weight's parts each into its output, a gate-and-up product's
/// SwiGLU, or added to the residual stream), as [`super::mx_matvec_tiled_fused`] does for MXFP4.
/// Products are exact and sums f32, rounded to `T` once; x is first staged as f16 (bf16 as
/// block-scaled f16: `kernels/include/rocmforge_x16.h`, exact but for elements 2^31 below their
/// block's largest) on the matrix cores ([`q4k_tiled_on_matrix_cores`]); elsewhere the portable
/// kernel runs.
pub fn q4k_matvec_tiled_fused<T: Dtype>(
    w: &DeviceTiledQ4k,
    x: &DeviceBuffer<T>,
    norm: Option<TiledNorm<'_, T>>,
    out: TiledOutput<'_, '_, T>,
) -> Result<()> {
    match out {
        TiledOutput::Split(ys) => launch(w, x, 1, norm, ys, Mode::Store, false),
        TiledOutput::Swiglu(act) => launch(w, x, 1, norm, &mut [act], Mode::Swiglu, false),
        TiledOutput::Add(h) => launch(w, x, 1, norm, &mut [h], Mode::Add, false),
    }
}

/// `Y = X W^T` for `batch` vectors `x` (`[batch, k]`) and a stacked weight into one output a
/// part (`ys[i]`: `[batch, rows_i]`): on the matrix cores where [`q4k_tiled_on_matrix_cores`]
/// (in launches of [`MAX_TILED_BATCH`] vectors), else or where `portable` on the portable kernel.
pub fn q4k_matvec_tiled_split<T: Dtype>(
    w: &DeviceTiledQ4k,
    x: &DeviceBuffer<T>,
    batch: usize,
    ys: &mut [&mut DeviceBuffer<T>],
    portable: bool,
) -> Result<()> {
    launch(w, x, batch, None, ys, Mode::Store, portable)
}

/// `w` times `batch` vectors `x` (through `norm` first where given: one vector) into `ys` as
/// `mode` says; `portable` runs the portable kernel whatever the device has.
fn launch<T: Dtype>(
    w: &DeviceTiledQ4k,
    x: &DeviceBuffer<T>,
    batch: usize,
    norm: Option<TiledNorm<'_, T>>,
    ys: &mut [&mut DeviceBuffer<T>],
    mode: Mode,
    portable: bool,
) -> Result<()> {
    let buffers = w.tiles.buffers();
    // SAFETY: the weight's tiles from its first, of rows of k elements (k a multiple of 256:
    // TiledQ4k::from_gguf checks it), as TiledQ4k::upload laid them out: a DeviceTiledQ4k is only
    // built from a layout of exactly its n and k.
    unsafe { LAYOUT.launch(buffers, (w.tiles.n, w.tiles.k), x, batch, norm, ys, mode, portable) }
}

/// Rows `rows` of a tiled q4_K weight dequantised to `T` into the first `rows * k` elements of
/// `out` (row-major; `out` may be longer): the operand of a prefill's GEMM. Each element is what
/// `dequantize` gives from the GGUF rows, `(d * sc) * q - dmin * m` in f32 rounded to `T` once.
pub fn dequantize_tiled_q4k<T: Dtype>(
    w: &DeviceTiledQ4k,
    rows: usize,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    let k = w.tiles.k;
    ensure(rows <= w.tiles.n, KERNEL, || format!("{rows} rows of a weight of {}", w.tiles.n))?;
    let Some(args) = tiled::dequant_args(KERNEL, rows, k, out)? else {
        return Ok(());
    };
    let vectors = rows.div_ceil(TILE_ROWS) * (k / QK_K) * 128;
    let buffers = w.tiles.buffers();
    let entry = format!("rf_q4k_tiled_dequant_{}", T::NAME);
    // SAFETY: the payload vectors of ceil(rows / 16) tiles (128 a super-block) and their headers,
    // inside the weight (rows <= n, checked) as TiledQ4k::upload laid it out; out holds rows k
    // elements (dequant_args).
    unsafe { tiled::launch_dequant(MODULE, &entry, buffers, args, vectors, out) }
}

/// The entries this module launches ([`crate::launchable`]): the one-vector ones, the 8- and
/// 32-vector ones and the dequantisation.
pub(crate) fn launchable() -> Vec<Launchable> {
    tiled::columns_launchable(&LAYOUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize_q4_k, quantize_q4_k};
    use rocm_runtime::f16;

    /// `n` rows of `k` random q4_K weights (a wide range of scales), as GGUF bytes.
    fn random_rows(seed: u64, n: usize, k: usize) -> Vec<u8> {
        let mut state = seed;
        let values: Vec<f32> = (0..n * k)
            .map(|i| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                unit * (1 + (i / 256) % 7) as f32
            })
            .collect();
        let mut out = vec![0u8; n * k / QK_K * Q4_K_BLOCK_BYTES];
        quantize_q4_k(&values, &mut out).unwrap();
        out
    }

    /// Row `r` of a tiled weight decoded from the layout's description alone (not the packer's
    /// helpers): each element from its word and nibble, and its super-block's header.
    fn decode_row(t: &TiledQ4k, r: usize) -> Vec<f32> {
        let nsb = t.k() / QK_K;
        let (tile, rt) = (r / 16, r % 16);
        let mut out = vec![0f32; t.k()];
        let nibble_of = [0u32, 4, 2, 6, 1, 5, 3, 7];
        for s in 0..nsb {
            let h = &t.headers()[((tile * nsb + s) * 16 + rt) * 16..][..16];
            let d = f16::from_bits(u16::from_le_bytes([h[0], h[1]])).to_f32();
            let dmin = f16::from_bits(u16::from_le_bytes([h[2], h[3]])).to_f32();
            let q = &h[4..16];
            let scale_min = |j: usize| -> (f32, f32) {
                if j < 4 {
                    ((q[j] & 63) as f32, (q[j + 4] & 63) as f32)
                } else {
                    (
                        ((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4)) as f32,
                        ((q[j + 4] >> 4) | ((q[j] >> 6) << 4)) as f32,
                    )
                }
            };
            for p in 0..8 {
                for u in 0..4 {
                    let lane = 4 * (rt % 8) + u;
                    let at = (((tile * nsb + s) * 4 + p / 2) * 32 + lane) * 16 + 8 * (p % 2) + 4 * (rt / 8);
                    let word = u32::from_le_bytes(t.payload()[at..at + 4].try_into().unwrap());
                    for (m, nib) in nibble_of.iter().enumerate() {
                        let j = u + 4 * (p / 4);
                        let e = 32 * j + 8 * (p % 4) + m;
                        let (sc, mn) = scale_min(j);
                        let code = ((word >> (4 * nib)) & 15) as f32;
                        out[s * QK_K + e] = d * sc * code - dmin * mn;
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
            let t = TiledQ4k::from_gguf(&gguf, n, k).unwrap();
            assert_eq!(t.to_gguf(), gguf, "[{n}, {k}] round trip");
            let tiles = n.div_ceil(16);
            assert_eq!(t.payload().len() + t.headers().len(), tiles * 16 * k / QK_K * Q4_K_BLOCK_BYTES);
            let mut row = vec![0f32; k];
            for r in 0..n {
                dequantize_q4_k(
                    &gguf[r * k / QK_K * Q4_K_BLOCK_BYTES..][..k / QK_K * Q4_K_BLOCK_BYTES],
                    &mut row,
                )
                .unwrap();
                let got = decode_row(&t, r);
                for (c, (a, b)) in got.iter().zip(&row).enumerate() {
                    // The same f32 operations in another order: within a rounding of the terms.
                    assert!(
                        (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                        "[{n}, {k}] row {r} element {c}: {a} against {b}"
                    );
                }
            }
            // The padding rows decode to zeros.
            for r in n..tiles * 16 {
                assert!(decode_row(&t, r).iter().all(|&v| v == 0.0), "[{n}, {k}] padding row {r}");
            }
        }
    }

    #[test]
    fn stacked_weights_are_their_parts_one_after_another() {
        let (a, b) = (random_rows(1, 32, 512), random_rows(2, 20, 512));
        let (ta, tb) = (TiledQ4k::from_gguf(&a, 32, 512).unwrap(), TiledQ4k::from_gguf(&b, 20, 512).unwrap());
        let s = TiledQ4k::stack(&[&ta, &tb]).unwrap();
        assert_eq!(s.n(), 52);
        assert_eq!(s.to_gguf(), [a, b].concat());
        let message = |r: Result<TiledQ4k>| crate::error::shape_message(r.map(|_| ()), KERNEL);
        assert_eq!(
            message(TiledQ4k::stack(&[&tb, &ta])),
            "weight 0 has 20 rows; every weight but the last needs a multiple of 16"
        );
        assert_eq!(message(TiledQ4k::stack(&[])), "no weights to stack");
    }

    #[test]
    fn malformed_weights_are_refused() {
        let message = |r: Result<TiledQ4k>| crate::error::shape_message(r.map(|_| ()), KERNEL);
        assert_eq!(message(TiledQ4k::from_gguf(&[], 1, 300)), "k = 300 is not a multiple of 256");
        assert_eq!(
            message(TiledQ4k::from_gguf(&[0; 100], 1, 256)),
            "w holds 100 bytes; 1 rows of 1 q4_K super-blocks need 144"
        );
        assert_eq!(
            message(TiledQ4k::from_gguf(&[], usize::MAX, 512)),
            format!("[{}, 512] overflows usize", usize::MAX)
        );
    }

    use crate::quant::tiled::{Loop, choose_loop};

    fn shared_bytes(lp: Loop, warps: usize, k: usize, swiglu: bool) -> usize {
        LAYOUT.shared_bytes(lp, warps, k, swiglu)
    }

    fn entry(lp: Loop, normed: bool, dtype: &str) -> String {
        LAYOUT.entry(lp, normed, dtype)
    }

    #[test]
    fn shared_memory_fits_the_model_shapes() {
        // An H100's opt-in limit (227 KB) holds 8 warps at the model's k, x staged whole for one
        // vector, and the 32-vector loop's totals.
        for lp in [Loop::One, Loop::Batch { passes: 1 }, Loop::Batch { passes: 4 }] {
            assert!(shared_bytes(lp, 8, 4096, true) <= 227 * 1024, "{lp:?}");
            assert!(shared_bytes(lp, 8, 14336, true) <= 227 * 1024, "{lp:?}");
        }
        assert_eq!(shared_bytes(Loop::Batch { passes: 4 }, 8, 4096, false), 8 * (3 * 2304 + 2 * 16 * 4 * 32));
    }

    #[test]
    fn loops_follow_the_device_and_the_batch() {
        assert_eq!(choose_loop(false, 1), Loop::Portable);
        assert_eq!(choose_loop(false, 40), Loop::Portable);
        assert_eq!(choose_loop(true, 1), Loop::One);
        assert_eq!(choose_loop(true, 2), Loop::Batch { passes: 1 });
        assert_eq!(choose_loop(true, 8), Loop::Batch { passes: 1 });
        assert_eq!(choose_loop(true, 9), Loop::Batch { passes: 4 });
        assert_eq!(choose_loop(true, 32), Loop::Batch { passes: 4 });
        assert_eq!(entry(Loop::Batch { passes: 4 }, false, "bf16"), "rf_q4k_tiled_batch32_mma_bf16");
        assert_eq!(entry(Loop::One, true, "f16"), "rf_q4k_tiled_normed_mma_f16");
        assert_eq!(entry(Loop::Portable, false, "f32"), "rf_q4k_tiled_matvec_f32");
    }
}
