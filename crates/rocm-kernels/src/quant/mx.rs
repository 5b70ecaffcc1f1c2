//! The OCP Microscaling (MX) formats v1.0: blocks of 32 elements sharing one E8M0 scale.
//!
//! - **E8M0 scale**: an unsigned byte `e` meaning `2^(e - 127)` (so `2^-127 ..= 2^127`); `0xFF`
//!   is NaN and makes every element of its block NaN. There is no zero and no sign.
//! - **Elements** ([`MxElem`]): sign-magnitude minifloats with subnormals and no Inf/NaN codes.
//!
//! | type | bits | exp bias | max normal | emax | magnitudes |
//! |---|---|---|---|---|---|
//! | E2M1 (MXFP4) | 4 | 1 | 6.0 | 2 | 0, 0.5, 1, 1.5, 2, 3, 4, 6 |
//! | E2M3 (MXFP6) | 6 | 1 | 7.5 | 2 | k/8 (k < 8) subnormal, then 1..7.5 |
//! | E3M2 (MXFP6) | 6 | 3 | 28.0 | 4 | k/16 (k < 4) subnormal, then 0.25..28 |
//!
//! **Encoding** (the spec's conversion, section 6.3): the shared exponent is
//! `floor(log2(amax)) - emax` of the element type, clamped to the E8M0 range `[-127, 127]`; each
//! element is `x / 2^shared` rounded to nearest, ties to even, and clamped to the max normal
//! (values near `amax` can exceed it: e.g. 7.9 in E2M1 saturates to 6). Choices the spec leaves
//! to implementations, made here:
//! - an all-zero block gets scale byte `0` (`2^-127`), as ggml's writer does, so zero blocks are
//!   byte-identical to llama.cpp's;
//! - a block holding NaN or +-Inf gets the NaN scale `0xFF` (the element types cannot encode
//!   them), codes 0;
//! - negative values keep their sign bit even when they round to zero (`-0`).
//!
//! GGUF's `mxfp4` (ggml type 39) is exactly MXFP4: the scale byte is the E8M0 byte and the nibbles
//! are E2M1 codes (ggml tabulates the magnitudes doubled, `0,1,2,3,4,6,8,12`, and halves the
//! scale, `2^(e-128)`: the same numbers). The one difference in decoding is `e = 0xFF`, which
//! ggml reads as a number; here it is NaN, as the spec says.
//!
//! Encoding GGUF `mxfp4` ([`quantize_mxfp4_gguf`]) follows ggml's reference quantiser
//! (`quantize_row_mxfp4_ref`) instead of the spec's conversion, so that files written here have
//! the bytes llama.cpp (and gguf-py) would write. It differs from [`encode_block`] in three ways:
//! - the shared exponent is `floor(log2f(amax)) - 2 + 127` with `log2` rounded to f32 before the
//!   floor, so a block maximum a few ulps below `2^k` counts as `2^k` (`1023.99994` gets the
//!   exponent of 1024, and is then encoded as 1024 instead of saturating to 768);
//! - each element takes the nearest of the 16 codes in code order, errors measured in f32, the
//!   first on ties: ties go to the smaller magnitude (`0.75 -> 0.5`, not to even `1.0`);
//! - a negative value that rounds to zero gets code 0 (`+0`), not `-0`.
//!
//! Where ggml's reference is undefined (NaN or ±inf in a block, maxima below `2^-125` whose
//! exponent is negative) ours is the spec encoder's: scale `0xFF`, or the exponent clamped to 0.

use super::{MXFP4_GGUF_BLOCK_BYTES, MXFP6_BLOCK_BYTES, QK, QuantError, check_decode, check_encode};

/// The E8M0 scale byte that means NaN.
pub const E8M0_NAN: u8 = 0xFF;

/// E8M0 bias: the byte `e` means `2^(e - E8M0_BIAS)`.
pub const E8M0_BIAS: i32 = 127;

/// `2^(e - 127)`, or NaN for `0xFF`. Exact in f32 (`2^-127` is an f32 subnormal).
pub fn e8m0_to_f32(e: u8) -> f32 {
    if e == E8M0_NAN { f32::NAN } else { pow2(i32::from(e) - E8M0_BIAS) as f32 }
}

/// `2^n` as an f64, exactly, for the exponents the MX formats reach (|n| < 1000).
fn pow2(n: i32) -> f64 {
    debug_assert!((-1000..1000).contains(&n));
    // f64 normals reach 2^-1022: build the exponent field directly.
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// `floor(log2(x))` of a positive finite f64 that is normal (every f32 is normal as an f64).
fn floor_log2(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// An MX element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MxElem {
    /// FP4 E2M1 (MXFP4).
    E2M1,
    /// FP6 E2M3 (MXFP6).
    E2M3,
    /// FP6 E3M2 (MXFP6).
    E3M2,
}

impl MxElem {
    /// Every element type.
    pub const ALL: [MxElem; 3] = [MxElem::E2M1, MxElem::E2M3, MxElem::E3M2];

    /// Bits of a code, sign included.
    pub const fn bits(self) -> u32 {
        match self {
            MxElem::E2M1 => 4,
            MxElem::E2M3 | MxElem::E3M2 => 6,
        }
    }

    /// Exponent field bits.
    pub const fn exp_bits(self) -> u32 {
        match self {
            MxElem::E2M1 | MxElem::E2M3 => 2,
            MxElem::E3M2 => 3,
        }
    }

    /// Mantissa field bits.
    pub const fn man_bits(self) -> u32 {
        self.bits() - 1 - self.exp_bits()
    }

    /// Exponent bias.
    pub const fn bias(self) -> i32 {
        (1 << (self.exp_bits() - 1)) - 1
    }

    /// Exponent of the largest normal (`emax_elem` in the spec's scale rule).
    pub const fn emax(self) -> i32 {
        (1 << self.exp_bits()) - 1 - self.bias()
    }

    /// Largest finite magnitude: 6, 7.5, 28.
    pub fn max_normal(self) -> f32 {
        self.magnitude(self.max_code())
    }

    /// Code of the largest positive magnitude.
    pub const fn max_code(self) -> u8 {
        (1u8 << (self.bits() - 1)) - 1
    }

    /// The sign bit of a code.
    pub const fn sign_bit(self) -> u8 {
        1u8 << (self.bits() - 1)
    }

    /// The spacing of codes in the binade of exponent `e` (unbiased; subnormals use `1 - bias`).
    pub fn ulp(self, exponent: i32) -> f64 {
        pow2(exponent.max(1 - self.bias()) - self.man_bits() as i32)
    }

    /// The unsigned magnitude of code `code` (sign bit ignored).
    fn magnitude(self, code: u8) -> f32 {
        let m = self.man_bits();
        let exp = i32::from((code >> m) & ((1 << self.exp_bits()) - 1));
        let man = f64::from(code & ((1 << m) - 1));
        let value = if exp == 0 {
            // Subnormal: 0.m * 2^(1 - bias).
            man * pow2(1 - self.bias() - m as i32)
        } else {
            (1.0 + man * pow2(-(m as i32))) * pow2(exp - self.bias())
        };
        value as f32
    }

    /// The value of a code (its low [`bits`](Self::bits) bits; higher bits are ignored).
    pub fn decode(self, code: u8) -> f32 {
        let code = code & ((1u16 << self.bits()) - 1) as u8;
        let magnitude = self.magnitude(code & !self.sign_bit());
        if code & self.sign_bit() != 0 { -magnitude } else { magnitude }
    }

    /// The code nearest to `v` (ties to the even code), saturating at +-max normal. NaN gives
    /// code 0 (callers mark NaN blocks through the scale).
    pub fn encode(self, v: f64) -> u8 {
        if v.is_nan() {
            return 0;
        }
        let sign = if v.is_sign_negative() { self.sign_bit() } else { 0 };
        let a = v.abs();
        let max = f64::from(self.max_normal());
        let magnitude = if a >= max {
            max
        } else if a == 0.0 {
            0.0
        } else {
            // Round to the grid of a's binade (subnormals share the lowest normal's grid); a
            // division by a power of two is exact, so only the one rounding happens. Rounding up
            // to the next binade's first value is still on this grid, and stays <= max because
            // the max is the top of the last binade and a < max.
            let ulp = self.ulp(floor_log2(a));
            (a / ulp).round_ties_even() * ulp
        };
        // The code of a magnitude on the grid: exponent and mantissa fields (exact arithmetic).
        let m = self.man_bits() as i32;
        let min_normal = pow2(1 - self.bias());
        let code = if magnitude < min_normal {
            (magnitude / self.ulp(1 - self.bias())) as u8
        } else {
            let e = floor_log2(magnitude);
            let mantissa = (magnitude * pow2(-e) - 1.0) * pow2(m);
            (((e + self.bias()) as u8) << m) | mantissa as u8
        };
        sign | code
    }
}

/// The spec's shared-scale byte for a block: `floor(log2(amax)) - emax + 127`, clamped to
/// `0..=254`; `0` for an all-zero block and [`E8M0_NAN`] when the block holds NaN or Inf.
pub fn mx_scale(elem: MxElem, values: &[f32]) -> u8 {
    if values.iter().any(|v| !v.is_finite()) {
        return E8M0_NAN;
    }
    let amax = values.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
    if amax == 0.0 {
        return 0;
    }
    let shared = (floor_log2(amax) - elem.emax()).clamp(-E8M0_BIAS, E8M0_BIAS);
    (shared + E8M0_BIAS) as u8
}

/// Encodes one block of up to 32 values: `(scale byte, codes)`.
pub fn encode_block(elem: MxElem, values: &[f32]) -> (u8, [u8; QK]) {
    let mut codes = [0u8; QK];
    let scale = mx_scale(elem, values);
    if scale != E8M0_NAN {
        let inv = pow2(E8M0_BIAS - i32::from(scale));
        for (c, &v) in codes.iter_mut().zip(values) {
            // f32 * power of two in f64: exact, so the element rounding is the only one.
            *c = elem.encode(f64::from(v) * inv);
        }
    }
    (scale, codes)
}

/// Decodes one block: element `i` is `decode(codes[i]) * 2^(scale - 127)`, all NaN when
/// `scale == 0xFF`.
pub fn decode_block(elem: MxElem, scale: u8, codes: &[u8], out: &mut [f32]) {
    let s = e8m0_to_f32(scale);
    for (o, &c) in out.iter_mut().zip(codes) {
        // A product of an element (at most 5 significant bits) and a power of two: exact unless
        // it underflows f32 (scales below 2^-126 with small elements), where it rounds once.
        *o = elem.decode(c) * s;
    }
}

/// Decodes GGUF `mxfp4` blocks (ggml type 39, 17 bytes each) into `out`
/// (`blocks.len() / 17 * 32` values).
pub fn dequantize_mxfp4_gguf(blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_decode(blocks.len(), MXFP4_GGUF_BLOCK_BYTES, out.len())?;
    for (block, out) in blocks.chunks_exact(MXFP4_GGUF_BLOCK_BYTES).zip(out.chunks_exact_mut(QK)) {
        decode_block(MxElem::E2M1, block[0], &unpack_nibbles(&block[1..]), out);
    }
    Ok(())
}

/// Encodes `values` (a multiple of 32) as GGUF `mxfp4` blocks into `out`
/// (`values.len() / 32 * 17` bytes), as ggml's reference quantiser does (see the module docs).
pub fn quantize_mxfp4_gguf(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    check_encode(values.len(), MXFP4_GGUF_BLOCK_BYTES, out.len())?;
    for (x, block) in values.chunks_exact(QK).zip(out.chunks_exact_mut(MXFP4_GGUF_BLOCK_BYTES)) {
        let (scale, codes) = if x.iter().all(|v| v.is_finite()) {
            let scale = ggml_mxfp4_scale(x);
            // ggml's half scale 2^(e - 128) against its doubled element table: the same products.
            let half_scale = e8m0_to_f32(scale) / 2.0;
            (scale, std::array::from_fn(|i| ggml_nearest_e2m1(x[i], half_scale)))
        } else {
            encode_block(MxElem::E2M1, x)
        };
        block[0] = scale;
        pack_nibbles(&codes, &mut block[1..]);
    }
    Ok(())
}

/// ggml's `kvalues_mxfp4`: the E2M1 value of each code, doubled.
const GGML_E2M1_DOUBLED: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// ggml's shared exponent of a finite block: `floor(log2f(amax)) - 2 + 127`, `log2` rounded to
/// f32 first (a correctly rounded `log2f`), 0 for an all-zero block, clamped to `0..=254`.
fn ggml_mxfp4_scale(x: &[f32]) -> u8 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        return 0;
    }
    let log2 = (f64::from(amax).log2() as f32).floor();
    (log2 - MxElem::E2M1.emax() as f32 + E8M0_BIAS as f32).clamp(0.0, 254.0) as u8
}

/// The first code, in code order, whose value is nearest `x` (ggml's `best_index_mxfp4`).
fn ggml_nearest_e2m1(x: f32, half_scale: f32) -> u8 {
    let err = |code: usize| (f32::from(GGML_E2M1_DOUBLED[code]) * half_scale - x).abs();
    (1..16).fold(0, |best, code| if err(code) < err(best) { code } else { best }) as u8
}

/// The two MXFP6 element types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp6 {
    E2M3,
    E3M2,
}

impl Fp6 {
    /// Both six-bit types.
    pub const ALL: [Fp6; 2] = [Fp6::E2M3, Fp6::E3M2];

    /// The element type.
    pub const fn elem(self) -> MxElem {
        match self {
            Fp6::E2M3 => MxElem::E2M3,
            Fp6::E3M2 => MxElem::E3M2,
        }
    }
}

/// Decodes packed MXFP6 blocks (25 bytes each, see the [module docs](super)) into `out`
/// (`blocks.len() / 25 * 32` values).
pub fn dequantize_mxfp6(kind: Fp6, blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_decode(blocks.len(), MXFP6_BLOCK_BYTES, out.len())?;
    for (block, out) in blocks.chunks_exact(MXFP6_BLOCK_BYTES).zip(out.chunks_exact_mut(QK)) {
        decode_block(kind.elem(), block[0], &unpack_6bit(&block[1..]), out);
    }
    Ok(())
}

/// Encodes `values` (a multiple of 32) as packed MXFP6 blocks into `out`
/// (`values.len() / 32 * 25` bytes).
pub fn quantize_mxfp6(kind: Fp6, values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    check_encode(values.len(), MXFP6_BLOCK_BYTES, out.len())?;
    for (x, block) in values.chunks_exact(QK).zip(out.chunks_exact_mut(MXFP6_BLOCK_BYTES)) {
        let (scale, codes) = encode_block(kind.elem(), x);
        block[0] = scale;
        pack_6bit(&codes, &mut block[1..]);
    }
    Ok(())
}

/// 32 four-bit codes from 16 bytes: code `j` is the low nibble of byte `j`, code `j + 16` the
/// high nibble.
pub fn unpack_nibbles(payload: &[u8]) -> [u8; QK] {
    let mut codes = [0u8; QK];
    for (j, &b) in payload.iter().take(QK / 2).enumerate() {
        codes[j] = b & 15;
        codes[j + QK / 2] = b >> 4;
    }
    codes
}

/// The inverse of [`unpack_nibbles`]; `payload` holds 16 bytes.
pub fn pack_nibbles(codes: &[u8; QK], payload: &mut [u8]) {
    for (j, b) in payload.iter_mut().take(QK / 2).enumerate() {
        *b = (codes[j] & 15) | (codes[j + QK / 2] & 15) << 4;
    }
}

/// 32 six-bit codes from 24 bytes: code `i` is bits `6i..6i+6` of the little-endian 192-bit
/// integer the bytes form.
pub fn unpack_6bit(payload: &[u8]) -> [u8; QK] {
    let mut codes = [0u8; QK];
    for (group, bytes) in codes.chunks_exact_mut(4).zip(payload.chunks_exact(3)) {
        let word = u32::from(bytes[0]) | u32::from(bytes[1]) << 8 | u32::from(bytes[2]) << 16;
        for (k, c) in group.iter_mut().enumerate() {
            *c = ((word >> (6 * k)) & 63) as u8;
        }
    }
    codes
}

/// The inverse of [`unpack_6bit`]; `payload` holds 24 bytes.
pub fn pack_6bit(codes: &[u8; QK], payload: &mut [u8]) {
    for (group, bytes) in codes.chunks_exact(4).zip(payload.chunks_exact_mut(3)) {
        let word = group.iter().enumerate().fold(0u32, |w, (k, &c)| w | u32::from(c & 63) << (6 * k));
        bytes.copy_from_slice(&word.to_le_bytes()[..3]);
    }
}
