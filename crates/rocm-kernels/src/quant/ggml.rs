//! ggml's `q8_0` and `q4_0` blocks (the GGUF tensor types 8 and 2), byte for byte.
//!
//! - `block_q8_0`: `d: f16` (little-endian) then `qs: [i8; 32]`; element `j` is `d * qs[j]`.
//! - `block_q4_0`: `d: f16` then `qs: [u8; 16]`; element `j` (0..16) is `d * ((qs[j] & 15) - 8)`
//!   and element `j + 16` is `d * ((qs[j] >> 4) - 8)`.
//!
//! The quantisers follow ggml's reference choices so that files written here read back as ggml
//! would write them: q8_0 takes `d = amax / 127` and rounds `x / d` half away from zero; q4_0
//! takes the element of largest magnitude `m` (sign kept), `d = m / -8`, and
//! `q = min(15, floor(x / d + 8.5))`, which maps `m` itself to `q = 0`, so the range is
//! `[-8, 7] * d` without wasting a code on the side that `m` is not on.

use rocm_runtime::f16;

use super::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK, QuantError, check_decode, check_encode};

fn read_f16(bytes: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])).to_f32()
}

/// Decodes ggml `q8_0` blocks into `out` (`blocks.len() / 34 * 32` values).
pub fn dequantize_q8_0(blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_decode(blocks.len(), Q8_0_BLOCK_BYTES, out.len())?;
    for (block, out) in blocks.chunks_exact(Q8_0_BLOCK_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = read_f16(block);
        for (o, &q) in out.iter_mut().zip(&block[2..]) {
            *o = d * f32::from(q as i8);
        }
    }
    Ok(())
}

/// Decodes ggml `q4_0` blocks into `out` (`blocks.len() / 18 * 32` values).
pub fn dequantize_q4_0(blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_decode(blocks.len(), Q4_0_BLOCK_BYTES, out.len())?;
    for (block, out) in blocks.chunks_exact(Q4_0_BLOCK_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = read_f16(block);
        for (j, &byte) in block[2..].iter().enumerate() {
            out[j] = d * (f32::from(byte & 15) - 8.0);
            out[j + QK / 2] = d * (f32::from(byte >> 4) - 8.0);
        }
    }
    Ok(())
}

/// Encodes `values` (a multiple of 32) as ggml `q8_0` blocks into `out`
/// (`values.len() / 32 * 34` bytes). Non-finite values give a non-finite scale.
pub fn quantize_q8_0(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    check_encode(values.len(), Q8_0_BLOCK_BYTES, out.len())?;
    for (x, block) in values.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES)) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for (q, &v) in block[2..].iter_mut().zip(x) {
            // |v * id| <= 127 up to rounding; the clamp keeps a rounding overshoot in range.
            *q = ((v * id).round().clamp(-127.0, 127.0) as i8) as u8;
        }
    }
    Ok(())
}

/// Encodes `values` (a multiple of 32) as ggml `q4_0` blocks into `out`
/// (`values.len() / 32 * 18` bytes).
pub fn quantize_q4_0(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    check_encode(values.len(), Q4_0_BLOCK_BYTES, out.len())?;
    for (x, block) in values.chunks_exact(QK).zip(out.chunks_exact_mut(Q4_0_BLOCK_BYTES)) {
        // The element of largest magnitude, sign kept (the first one on ties).
        let m = x.iter().fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = m / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        let code = |v: f32| (v * id + 8.5).floor().clamp(0.0, 15.0) as u8;
        for j in 0..QK / 2 {
            block[2 + j] = code(x[j]) | code(x[j + QK / 2]) << 4;
        }
    }
    Ok(())
}
