//! ggml's k-quants `q4_K`, `q5_K` and `q6_K` (GGUF tensor types 12, 13 and 14), byte for byte.
//!
//! A k-quant block is a super-block of [`QK_K`] = 256 elements with f16 scales, split into
//! sub-blocks whose own scales are small integers relative to them (f16 fields little-endian):
//!
//! | format | bytes/block | fields, in order |
//! |---|---|---|
//! | `q4_K` (type 12) | [`Q4_K_BLOCK_BYTES`] = 144 | f16 `d`, f16 `dmin`, 12 B `scales`, 128 B `qs` |
//! | `q5_K` (type 13) | [`Q5_K_BLOCK_BYTES`] = 176 | `d`, `dmin`, 12 B `scales`, 32 B `qh`, 128 B `qs` |
//! | `q6_K` (type 14) | [`Q6_K_BLOCK_BYTES`] = 210 | 128 B `ql`, 64 B `qh`, 16 x i8 `scales`, f16 `d` |
//!
//! Element `i` (0..256) of `q4_K` and `q5_K` is `d * sc[s] * q - dmin * m[s]` with `s = i / 32`,
//! `q` of 4 or 5 bits (8 sub-blocks of 32 with a 6-bit scale and min each); of `q6_K` it is
//! `d * scales[i / 16] * (q - 32)`, `q` of 6 bits (16 sub-blocks of 16 with an i8 scale).
//!
//! **Scales and mins** (`q4_K`, `q5_K`): eight 6-bit scales `sc[s]` and mins `m[s]` in the 12
//! bytes `b`. For `s < 4`: `sc[s] = b[s] & 63`, `m[s] = b[s + 4] & 63`. For `s >= 4` the low four
//! bits are in `b[s + 4]` (scale low nibble, min high nibble) and the high two bits are the top
//! two bits of `b[s - 4]` (scale) and `b[s]` (min).
//!
//! **Codes**, element `i` in 0..256:
//! - `q4_K`: chunk `c = i / 64` owns `qs[32c..32c + 32]`; `q` is the low nibble of
//!   `qs[32c + i % 32]` when `i % 64 < 32`, its high nibble otherwise.
//! - `q5_K`: the same four bits, and bit `i / 32` of `qh[i % 32]` as bit 4.
//! - `q6_K`: half `h = i / 128`, quarter `k = i % 128 / 32`, lane `l = i % 32`: the low four
//!   bits are the low (`k < 2`) or high (`k >= 2`) nibble of `ql[64h + 32(k % 2) + l]`, the high
//!   two bits are bits `2k, 2k + 1` of `qh[32h + l]`.
//!
//! **Decoding** repeats ggml's f32 arithmetic in ggml's order, `(d * sc) * q - dmin * m` and
//! `(d * sc) * (q - 32)` (gguf-py's numpy code does too), so results agree bit for bit. Any
//! bytes decode: NaN or infinite f16 scales propagate as IEEE arithmetic says.
//!
//! **Encoding** is ours (ggml's is an iterative weighted search; gguf-py has none). It bounds
//! every element's error by half a step of its sub-block, with nothing clipped:
//! - `q4_K` / `q5_K` (`L` = 15 / 31): a sub-block spans `[-o, t]` with `o = max(0, -min x)` (the
//!   min is subtracted, so it cannot lift the floor above 0) and `t = max x`. `dmin` is the
//!   smallest f16 with `63 * dmin >= max o`, and `m = ceil(o / dmin)`, so the decoded floor
//!   `-dmin * m` is at or below every input. Each sub-block then needs the step
//!   `(t + dmin * m) / L`; `d` is the smallest f16 with `63 * d` at least the largest of them,
//!   and `sc = ceil(step / d)`. No input lies outside the decoded range, and rounding `q` to
//!   nearest errs by at most half of `d * sc`, less than `(step + d) / 2`.
//! - `q6_K`: a 16-element sub-block with step `s > 0` spans `[-32s, 31s]`, with `s < 0`
//!   `[-31|s|, 32|s|]`; the sign that covers the sub-block with the smaller `|s|` is taken
//!   (positive on ties). `d` is the smallest f16 with `127 * d >= max |s|`, and
//!   `sc = ±ceil(|s| / d)`, so again the error is at most half of `|d * sc| < |s| + d`.
//! - Rounding a sub-block's scale (and min) up wastes up to one unit of `d` (`dmin`), which
//!   matters where `sc` is small. So one unit lower is tried too, and of these candidates the
//!   one whose largest error (measured with the decoder's own arithmetic) is smallest is kept,
//!   the rounded-up one on ties: the bounds above still hold.
//! - A super-block holding NaN or ±inf, or needing a scale beyond f16's range, gets NaN scales
//!   and codes 0: every element decodes to NaN, never to a silently wrong number.
//! - `-0` decodes as `+0`. A super-block already in this encoder's form encodes back to the
//!   same bytes: for `q4_K`/`q5_K` every sub-block holds codes 0 and `L`, and the largest scale
//!   and the largest min are 63; for `q6_K` every sub-block holds code 0 (`q = -32`), and the
//!   largest scale magnitude is 127 (with `d > 0` and exact f32 arithmetic in both cases).

use std::ops::Range;

use rocm_runtime::f16;

use super::{BlockShape, QuantError};

/// Elements per k-quant super-block (ggml's `QK_K`).
pub const QK_K: usize = 256;
/// Bytes of a ggml `block_q4_K`: f16 `d`, f16 `dmin`, 12 bytes of scales and mins, 128 of nibbles.
pub const Q4_K_BLOCK_BYTES: usize = 144;
/// Bytes of a ggml `block_q5_K`: `block_q4_K`'s fields plus 32 bytes of fifth bits.
pub const Q5_K_BLOCK_BYTES: usize = 176;
/// Bytes of a ggml `block_q6_K`: 128 bytes of low nibbles, 64 of high bit pairs, 16 i8 scales,
/// f16 `d`.
pub const Q6_K_BLOCK_BYTES: usize = 210;

/// Elements per sub-block of `q4_K` and `q5_K` (each has its own scale and min).
const AFFINE_SUB: usize = 32;
/// Elements per sub-block of `q6_K`.
const SYMMETRIC_SUB: usize = 16;
/// The largest 6-bit sub-block scale or min of `q4_K` and `q5_K`.
const MAX_SCALE6: u8 = 63;
/// The largest sub-block scale magnitude `q6_K`'s encoder writes (its i8 scales also hold -128).
const MAX_SCALE8: u8 = 127;
/// `q6_K` stores `q + 32`, so its codes span `-32..=31`.
const Q6_K_ZERO: i8 = 32;

const Q4_K_SHAPE: BlockShape = BlockShape { values: QK_K, bytes: Q4_K_BLOCK_BYTES };
const Q5_K_SHAPE: BlockShape = BlockShape { values: QK_K, bytes: Q5_K_BLOCK_BYTES };
const Q6_K_SHAPE: BlockShape = BlockShape { values: QK_K, bytes: Q6_K_BLOCK_BYTES };

/// Byte ranges of the fields of `q4_K` and `q5_K` (the first three are shared).
const D: Range<usize> = 0..2;
const DMIN: Range<usize> = 2..4;
const SCALES: Range<usize> = 4..16;
const Q4_K_QS: Range<usize> = 16..144;
const Q5_K_QH: Range<usize> = 16..48;
const Q5_K_QS: Range<usize> = 48..176;
/// Byte ranges of the fields of `q6_K`.
const Q6_K_QL: Range<usize> = 0..128;
const Q6_K_QH: Range<usize> = 128..192;
const Q6_K_SCALES: Range<usize> = 192..208;
const Q6_K_D: Range<usize> = 208..210;

// ---- decoding ----

/// Decodes ggml `q4_K` blocks into `out` (`blocks.len() / 144 * 256` values).
pub fn dequantize_q4_k(blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    Q4_K_SHAPE.blocks_to_decode(blocks.len(), out.len())?;
    for (block, out) in blocks.chunks_exact(Q4_K_BLOCK_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        decode_affine(&affine_header(block), &q4_k_codes(&block[Q4_K_QS]), out);
    }
    Ok(())
}

/// Decodes ggml `q5_K` blocks into `out` (`blocks.len() / 176 * 256` values).
pub fn dequantize_q5_k(blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    Q5_K_SHAPE.blocks_to_decode(blocks.len(), out.len())?;
    for (block, out) in blocks.chunks_exact(Q5_K_BLOCK_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        decode_affine(&affine_header(block), &q5_k_codes(&block[Q5_K_QH], &block[Q5_K_QS]), out);
    }
    Ok(())
}

/// Decodes ggml `q6_K` blocks into `out` (`blocks.len() / 210 * 256` values).
pub fn dequantize_q6_k(blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    Q6_K_SHAPE.blocks_to_decode(blocks.len(), out.len())?;
    for (block, out) in blocks.chunks_exact(Q6_K_BLOCK_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let d = read_f16(&block[Q6_K_D]);
        let codes = q6_k_codes(&block[Q6_K_QL], &block[Q6_K_QH]);
        for (s, out) in out.chunks_exact_mut(SYMMETRIC_SUB).enumerate() {
            let step = symmetric_step(d, block[Q6_K_SCALES][s] as i8);
            for (o, &q) in out.iter_mut().zip(&codes[s * SYMMETRIC_SUB..]) {
                *o = symmetric_value(step, q);
            }
        }
    }
    Ok(())
}

/// For each element of `q4_K` (`fifth_bit` false) or `q5_K` blocks, `|step * q| + |min|`: the
/// sizes of the two parts of its value `step * q - min` (the codec rounds their difference once).
/// A product that sums the parts separately (`quant::matvec`) has a rounding error bounded by
/// these, not by the values. `out` holds 256 entries a block.
pub(crate) fn affine_part_magnitudes(
    blocks: &[u8],
    fifth_bit: bool,
    out: &mut [f32],
) -> Result<(), QuantError> {
    let (shape, qs) = if fifth_bit { (Q5_K_SHAPE, Q5_K_QS) } else { (Q4_K_SHAPE, Q4_K_QS) };
    shape.blocks_to_decode(blocks.len(), out.len())?;
    for (block, out) in blocks.chunks_exact(shape.bytes).zip(out.chunks_exact_mut(QK_K)) {
        let header = affine_header(block);
        let codes = if fifth_bit {
            q5_k_codes(&block[Q5_K_QH], &block[qs.clone()])
        } else {
            q4_k_codes(&block[qs.clone()])
        };
        for (s, out) in out.chunks_exact_mut(AFFINE_SUB).enumerate() {
            let (step, offset) = affine_step_offset(&header, s);
            for (o, &q) in out.iter_mut().zip(&codes[s * AFFINE_SUB..]) {
                *o = (step * f32::from(q)).abs() + offset.abs();
            }
        }
    }
    Ok(())
}

/// The scales of a `q4_K` or `q5_K` super-block: `d`, `dmin` and the per-sub-block 6-bit
/// scales and mins.
#[derive(Debug, Clone, PartialEq)]
struct AffineHeader {
    d: f32,
    dmin: f32,
    scales: [u8; 8],
    mins: [u8; 8],
}

fn affine_header(block: &[u8]) -> AffineHeader {
    let (scales, mins) = unpack_scales_mins(&block[SCALES]);
    AffineHeader { d: read_f16(&block[D]), dmin: read_f16(&block[DMIN]), scales, mins }
}

/// Element `i` of a `q4_K` / `q5_K` super-block is `step[s] * q - offset[s]`, `s = i / 32`.
fn decode_affine(header: &AffineHeader, codes: &[u8; QK_K], out: &mut [f32]) {
    for (s, out) in out.chunks_exact_mut(AFFINE_SUB).enumerate() {
        let (step, offset) = affine_step_offset(header, s);
        for (o, &q) in out.iter_mut().zip(&codes[s * AFFINE_SUB..]) {
            *o = affine_value(step, offset, q);
        }
    }
}

/// `(d * sc, dmin * m)` of sub-block `s`.
fn affine_step_offset(header: &AffineHeader, s: usize) -> (f32, f32) {
    (scaled(header.d, header.scales[s]), scaled(header.dmin, header.mins[s]))
}

/// A super-block scale times a sub-block's integer scale, the f32 product ggml forms.
fn scaled(unit: f32, k: u8) -> f32 {
    unit * f32::from(k)
}

fn affine_value(step: f32, offset: f32, q: u8) -> f32 {
    step * f32::from(q) - offset
}

fn symmetric_step(d: f32, scale: i8) -> f32 {
    d * f32::from(scale)
}

fn symmetric_value(step: f32, q: u8) -> f32 {
    step * f32::from(q as i8 - Q6_K_ZERO)
}

/// The eight 6-bit scales and mins packed in 12 bytes (see the module docs).
fn unpack_scales_mins(b: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut scales, mut mins) = ([0u8; 8], [0u8; 8]);
    for s in 0..4 {
        scales[s] = b[s] & 63;
        mins[s] = b[s + 4] & 63;
        scales[s + 4] = (b[s + 8] & 15) | (b[s] >> 6) << 4;
        mins[s + 4] = (b[s + 8] >> 4) | (b[s + 4] >> 6) << 4;
    }
    (scales, mins)
}

/// The inverse of [`unpack_scales_mins`]; every scale and min is below 64.
fn pack_scales_mins(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut b = [0u8; 12];
    for s in 0..4 {
        b[s] = scales[s] | (scales[s + 4] >> 4) << 6;
        b[s + 4] = mins[s] | (mins[s + 4] >> 4) << 6;
        b[s + 8] = (scales[s + 4] & 15) | (mins[s + 4] & 15) << 4;
    }
    b
}

/// Byte of `qs` and shift of the nibble that hold the low four bits of `q4_K`/`q5_K` element `i`.
fn nibble_of(i: usize) -> (usize, u32) {
    (i / 64 * 32 + i % 32, if i % 64 < 32 { 0 } else { 4 })
}

fn q4_k_codes(qs: &[u8]) -> [u8; QK_K] {
    std::array::from_fn(|i| {
        let (byte, shift) = nibble_of(i);
        (qs[byte] >> shift) & 15
    })
}

fn q5_k_codes(qh: &[u8], qs: &[u8]) -> [u8; QK_K] {
    let mut codes = q4_k_codes(qs);
    for (i, q) in codes.iter_mut().enumerate() {
        *q |= ((qh[i % 32] >> (i / 32)) & 1) << 4;
    }
    codes
}

/// Writes the low four bits of every code into `qs` (128 bytes).
fn pack_q4_k_codes(codes: &[u8; QK_K], qs: &mut [u8]) {
    qs.fill(0);
    for (i, &q) in codes.iter().enumerate() {
        let (byte, shift) = nibble_of(i);
        qs[byte] |= (q & 15) << shift;
    }
}

/// Writes five-bit codes into `qh` (32 bytes) and `qs` (128 bytes).
fn pack_q5_k_codes(codes: &[u8; QK_K], qh: &mut [u8], qs: &mut [u8]) {
    pack_q4_k_codes(codes, qs);
    qh.fill(0);
    for (i, &q) in codes.iter().enumerate() {
        qh[i % 32] |= (q >> 4 & 1) << (i / 32);
    }
}

/// Where the bits of `q6_K` element `i` live: (`ql` byte, nibble shift, `qh` byte, bit shift).
fn q6_k_bits_of(i: usize) -> (usize, u32, usize, u32) {
    let (half, quarter, lane) = (i / 128, i % 128 / 32, i % 32);
    let ql = 64 * half + 32 * (quarter % 2) + lane;
    let nibble = if quarter < 2 { 0 } else { 4 };
    (ql, nibble, 32 * half + lane, 2 * quarter as u32)
}

fn q6_k_codes(ql: &[u8], qh: &[u8]) -> [u8; QK_K] {
    std::array::from_fn(|i| {
        let (lo, nibble, hi, bits) = q6_k_bits_of(i);
        (ql[lo] >> nibble) & 15 | ((qh[hi] >> bits) & 3) << 4
    })
}

/// Writes six-bit codes into `ql` (128 bytes) and `qh` (64 bytes).
fn pack_q6_k_codes(codes: &[u8; QK_K], ql: &mut [u8], qh: &mut [u8]) {
    ql.fill(0);
    qh.fill(0);
    for (i, &q) in codes.iter().enumerate() {
        let (lo, nibble, hi, bits) = q6_k_bits_of(i);
        ql[lo] |= (q & 15) << nibble;
        qh[hi] |= (q >> 4 & 3) << bits;
    }
}

fn read_f16(bytes: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])).to_f32()
}

fn f16_bytes(v: f16) -> [u8; 2] {
    v.to_bits().to_le_bytes()
}

// ---- encoding ----

/// Encodes `values` (a multiple of 256) as ggml `q4_K` blocks into `out`
/// (`values.len() / 256 * 144` bytes). See the module docs for the choices made.
pub fn quantize_q4_k(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    Q4_K_SHAPE.blocks_to_encode(values.len(), out.len())?;
    for (x, block) in values.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q4_K_BLOCK_BYTES)) {
        let encoded = encode_affine(x, 15);
        write_affine_header(&encoded, block);
        pack_q4_k_codes(&encoded.codes, &mut block[Q4_K_QS]);
    }
    Ok(())
}

/// Encodes `values` (a multiple of 256) as ggml `q5_K` blocks into `out`
/// (`values.len() / 256 * 176` bytes). See the module docs for the choices made.
pub fn quantize_q5_k(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    Q5_K_SHAPE.blocks_to_encode(values.len(), out.len())?;
    for (x, block) in values.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q5_K_BLOCK_BYTES)) {
        let encoded = encode_affine(x, 31);
        write_affine_header(&encoded, block);
        let (qh, qs) = block[Q5_K_QH.start..].split_at_mut(Q5_K_QH.len());
        pack_q5_k_codes(&encoded.codes, qh, qs);
    }
    Ok(())
}

/// Encodes `values` (a multiple of 256) as ggml `q6_K` blocks into `out`
/// (`values.len() / 256 * 210` bytes). See the module docs for the choices made.
pub fn quantize_q6_k(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    Q6_K_SHAPE.blocks_to_encode(values.len(), out.len())?;
    for (x, block) in values.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q6_K_BLOCK_BYTES)) {
        let encoded = encode_symmetric(x);
        let (ql, qh) = block[..Q6_K_QH.end].split_at_mut(Q6_K_QL.len());
        pack_q6_k_codes(&encoded.codes, ql, qh);
        for (b, &s) in block[Q6_K_SCALES].iter_mut().zip(&encoded.scales) {
            *b = s as u8;
        }
        block[Q6_K_D].copy_from_slice(&f16_bytes(encoded.d));
    }
    Ok(())
}

/// An encoded `q4_K` / `q5_K` super-block.
struct AffineBlock {
    d: f16,
    dmin: f16,
    scales: [u8; 8],
    mins: [u8; 8],
    codes: [u8; QK_K],
}

impl AffineBlock {
    /// NaN scales and zero codes: every element decodes to NaN.
    fn nan() -> AffineBlock {
        AffineBlock { d: f16::NAN, dmin: f16::NAN, scales: [0; 8], mins: [0; 8], codes: [0; QK_K] }
    }
}

fn write_affine_header(encoded: &AffineBlock, block: &mut [u8]) {
    block[D].copy_from_slice(&f16_bytes(encoded.d));
    block[DMIN].copy_from_slice(&f16_bytes(encoded.dmin));
    block[SCALES].copy_from_slice(&pack_scales_mins(&encoded.scales, &encoded.mins));
}

/// The `q4_K` / `q5_K` encoder of the module docs, codes `0..=max_code`.
fn encode_affine(x: &[f32], max_code: u8) -> AffineBlock {
    let Some(plan) = AffinePlan::new(x, max_code) else {
        return AffineBlock::nan();
    };
    let mut encoded =
        AffineBlock { d: plan.d, dmin: plan.dmin, scales: [0; 8], mins: [0; 8], codes: [0; QK_K] };
    for (s, x) in x.chunks_exact(AFFINE_SUB).enumerate() {
        let (scale, min) = plan.best_scale_min(s, x);
        let (step, offset) = plan.step_offset(scale, min);
        for (q, &v) in encoded.codes[s * AFFINE_SUB..].iter_mut().zip(x) {
            *q = affine_code(v, step, offset, max_code);
        }
        (encoded.scales[s], encoded.mins[s]) = (scale, min);
    }
    encoded
}

/// The super-block scales of a `q4_K` / `q5_K` encoding, and what each sub-block needs.
struct AffinePlan {
    d: f16,
    dmin: f16,
    max_code: u8,
    /// The largest input of each sub-block.
    tops: [f64; 8],
    /// Each sub-block's min rounded up, `ceil(o / dmin)`.
    mins_up: [u8; 8],
}

impl AffinePlan {
    /// `None` where the input holds NaN or ±inf or needs a scale past f16's range.
    fn new(x: &[f32], max_code: u8) -> Option<AffinePlan> {
        if x.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let subs = || x.chunks_exact(AFFINE_SUB);
        // How far below zero each sub-block reaches (its min can only lower the floor).
        let offsets: Vec<f64> = subs().map(|s| -f64::from(min_of(s)).min(0.0)).collect();
        let dmin = f16_at_least(max_f64(&offsets) / f64::from(MAX_SCALE6))?;
        let mut plan = AffinePlan { d: f16::ZERO, dmin, max_code, tops: [0.0; 8], mins_up: [0; 8] };
        for (s, (sub, &offset)) in subs().zip(&offsets).enumerate() {
            plan.tops[s] = f64::from(max_of(sub));
            plan.mins_up[s] = units_up(offset, dmin.to_f64(), MAX_SCALE6);
        }
        let steps: Vec<f64> = (0..8).map(|s| plan.needed_step(s, plan.mins_up[s])).collect();
        plan.d = f16_at_least(max_f64(&steps) / f64::from(MAX_SCALE6))?;
        Some(plan)
    }

    /// The step sub-block `s` needs to reach its top from the floor `-dmin * min`.
    fn needed_step(&self, s: usize, min: u8) -> f64 {
        (self.tops[s] + self.dmin.to_f64() * f64::from(min)) / f64::from(self.max_code)
    }

    fn step_offset(&self, scale: u8, min: u8) -> (f32, f32) {
        (scaled(self.d.to_f32(), scale), scaled(self.dmin.to_f32(), min))
    }

    /// Of the min rounded up and one lower, each with its scale rounded up and one lower, the
    /// pair whose largest error over `x` (sub-block `s`) is smallest.
    fn best_scale_min(&self, s: usize, x: &[f32]) -> (u8, u8) {
        let candidates = one_lower_too(self.mins_up[s]).flat_map(|min| {
            let scale_up = units_up(self.needed_step(s, min), self.d.to_f64(), MAX_SCALE6);
            one_lower_too(scale_up).map(move |scale| (scale, min))
        });
        least_worst(candidates, |&(scale, min)| {
            let (step, offset) = self.step_offset(scale, min);
            worst_error(x, |v| affine_value(step, offset, affine_code(v, step, offset, self.max_code)))
        })
    }
}

/// The code in `0..=max_code` whose value `step * q - offset` is nearest `v`.
fn affine_code(v: f32, step: f32, offset: f32, max_code: u8) -> u8 {
    if step == 0.0 {
        return 0;
    }
    let q = ((f64::from(v) + f64::from(offset)) / f64::from(step)).round();
    q.clamp(0.0, f64::from(max_code)) as u8
}

/// An encoded `q6_K` super-block.
struct SymmetricBlock {
    d: f16,
    scales: [i8; 16],
    codes: [u8; QK_K],
}

/// The `q6_K` encoder of the module docs.
fn encode_symmetric(x: &[f32]) -> SymmetricBlock {
    let nan = SymmetricBlock { d: f16::NAN, scales: [0; 16], codes: [0; QK_K] };
    if x.iter().any(|v| !v.is_finite()) {
        return nan;
    }
    let steps: Vec<f64> = x.chunks_exact(SYMMETRIC_SUB).map(signed_step).collect();
    let magnitudes: Vec<f64> = steps.iter().map(|s| s.abs()).collect();
    let Some(d) = f16_at_least(max_f64(&magnitudes) / f64::from(MAX_SCALE8)) else {
        return nan;
    };
    let mut encoded = SymmetricBlock { d, scales: [0; 16], codes: [0; QK_K] };
    let d = d.to_f32();
    for (s, x) in x.chunks_exact(SYMMETRIC_SUB).enumerate() {
        let sign = if steps[s] < 0.0 { -1 } else { 1 };
        let magnitude_up = units_up(magnitudes[s], f64::from(d), MAX_SCALE8);
        let candidates = one_lower_too(magnitude_up).map(|m| sign * m as i8);
        let scale = least_worst(candidates, |&scale| {
            let step = symmetric_step(d, scale);
            worst_error(x, |v| symmetric_value(step, symmetric_code(v, step)))
        });
        let step = symmetric_step(d, scale);
        for (q, &v) in encoded.codes[s * SYMMETRIC_SUB..].iter_mut().zip(x) {
            *q = symmetric_code(v, step);
        }
        encoded.scales[s] = scale;
    }
    encoded
}

/// The signed step of the smallest magnitude whose codes `-32..=31` cover `x`: a positive step
/// reaches 32 steps below zero and 31 above, a negative one the other way round.
fn signed_step(x: &[f32]) -> f64 {
    let below = -f64::from(min_of(x)).min(0.0);
    let above = f64::from(max_of(x)).max(0.0);
    let (long, short) = (f64::from(Q6_K_ZERO), f64::from(Q6_K_ZERO - 1));
    let positive = (below / long).max(above / short);
    let negative = (above / long).max(below / short);
    if positive <= negative { positive } else { -negative }
}

/// The stored code (`q + 32`) whose value `step * q` is nearest `v`.
fn symmetric_code(v: f32, step: f32) -> u8 {
    if step == 0.0 {
        return Q6_K_ZERO as u8;
    }
    let q = (f64::from(v) / f64::from(step)).round();
    (q.clamp(-f64::from(Q6_K_ZERO), f64::from(Q6_K_ZERO - 1)) as i8 + Q6_K_ZERO) as u8
}

/// `ceil(v / unit)`, at most `max` (0 when `unit` is 0, which happens only when `v` is 0 too).
fn units_up(v: f64, unit: f64, max: u8) -> u8 {
    if unit == 0.0 { 0 } else { (v / unit).ceil().min(f64::from(max)) as u8 }
}

/// The first candidate with the smallest `worst` (so the first one wins ties).
fn least_worst<T>(candidates: impl Iterator<Item = T>, worst: impl Fn(&T) -> f32) -> T {
    let mut best: Option<(f32, T)> = None;
    for c in candidates {
        let err = worst(&c);
        if best.as_ref().is_none_or(|(best_err, _)| err < *best_err) {
            best = Some((err, c));
        }
    }
    best.expect("one_lower_too yields at least one candidate").1
}

/// The largest `|decoded(v) - v|` over `x`.
fn worst_error(x: &[f32], decoded: impl Fn(f32) -> f32) -> f32 {
    x.iter().map(|&v| (decoded(v) - v).abs()).fold(0.0, f32::max)
}

/// `n`, then `n - 1` where that is not negative.
fn one_lower_too(n: u8) -> impl Iterator<Item = u8> {
    std::iter::once(n).chain(n.checked_sub(1))
}

/// The smallest f16 at or above `v` (finite, `>= 0`), or `None` past f16's largest finite value.
fn f16_at_least(v: f64) -> Option<f16> {
    let nearest = f16::from_f64(v);
    let up = if nearest.to_f64() < v { f16::from_bits(nearest.to_bits() + 1) } else { nearest };
    up.is_finite().then_some(up)
}

fn min_of(x: &[f32]) -> f32 {
    x.iter().fold(f32::INFINITY, |m, &v| m.min(v))
}

fn max_of(x: &[f32]) -> f32 {
    x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

fn max_f64(x: &[f64]) -> f64 {
    x.iter().fold(0.0, |m, &v| m.max(v))
}
