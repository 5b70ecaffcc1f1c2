//! The CPU codecs against tables written by hand from the OCP MX v1.0 spec and ggml's block
//! definitions (never against values computed by the code under test).

use super::mx::{E8M0_NAN, Fp6, MxElem, decode_block, encode_block, mx_scale, pack_6bit, unpack_6bit};
use super::*;

/// E2M1 codes 0..8 (sign bit clear), from the spec's FP4 table.
const E2M1: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// E2M3 codes 0..32: exponent field 0 is subnormal (m/8), then 1.m, 2 x 1.m, 4 x 1.m.
#[rustfmt::skip]
const E2M3: [f32; 32] = [
    0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875,
    1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
    2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75,
    4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5,
];

/// E3M2 codes 0..32: exponent field 0 is subnormal (m/16), then 2^(e-3) x 1.m.
#[rustfmt::skip]
const E3M2: [f32; 32] = [
    0.0, 0.0625, 0.125, 0.1875,
    0.25, 0.3125, 0.375, 0.4375,
    0.5, 0.625, 0.75, 0.875,
    1.0, 1.25, 1.5, 1.75,
    2.0, 2.5, 3.0, 3.5,
    4.0, 5.0, 6.0, 7.0,
    8.0, 10.0, 12.0, 14.0,
    16.0, 20.0, 24.0, 28.0,
];

fn table(elem: MxElem) -> &'static [f32] {
    match elem {
        MxElem::E2M1 => &E2M1,
        MxElem::E2M3 => &E2M3,
        MxElem::E3M2 => &E3M2,
    }
}

/// Same value and same sign (so -0 is told from +0), or both NaN.
fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// A small deterministic generator (SplitMix64): the codec tests need no GPU test kit.
pub(super) struct Mix(pub(super) u64);

impl Mix {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub(super) fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

#[test]
fn element_parameters_follow_the_spec() {
    assert_eq!((MxElem::E2M1.bias(), MxElem::E2M1.emax(), MxElem::E2M1.max_normal()), (1, 2, 6.0));
    assert_eq!((MxElem::E2M3.bias(), MxElem::E2M3.emax(), MxElem::E2M3.max_normal()), (1, 2, 7.5));
    assert_eq!((MxElem::E3M2.bias(), MxElem::E3M2.emax(), MxElem::E3M2.max_normal()), (3, 4, 28.0));
}

#[test]
fn every_code_point_decodes_as_the_spec_tables() {
    for elem in MxElem::ALL {
        let t = table(elem);
        assert_eq!(t.len(), 1 << (elem.bits() - 1));
        for (code, &value) in t.iter().enumerate() {
            let code = code as u8;
            assert!(same(elem.decode(code), value), "{elem:?} code {code:#x}");
            let neg = code | elem.sign_bit();
            assert!(same(elem.decode(neg), -value), "{elem:?} code {neg:#x}");
            // And back: every value encodes to its own code (including -0).
            assert_eq!(elem.encode(f64::from(value)), code, "{elem:?} encode {value}");
            assert_eq!(elem.encode(-f64::from(value)), neg, "{elem:?} encode -{value}");
        }
    }
}

#[test]
fn e8m0_scales() {
    assert_eq!(e8m0_to_f32(127), 1.0);
    assert_eq!(e8m0_to_f32(128), 2.0);
    assert_eq!(e8m0_to_f32(126), 0.5);
    // 2^127: exponent field 254, mantissa 0.
    assert_eq!(e8m0_to_f32(254).to_bits(), 0x7F00_0000);
    // 2^-127 = 2^22 * 2^-149: an f32 subnormal with mantissa bit 22 set.
    assert_eq!(e8m0_to_f32(0).to_bits(), 0x0040_0000);
    assert!(e8m0_to_f32(E8M0_NAN).is_nan());
}

#[test]
fn shared_scale_is_floor_log2_amax_minus_emax() {
    let block = |amax: f32| {
        let mut v = [0.25f32; QK];
        v[7] = -amax;
        v
    };
    // E2M1: amax 6 -> floor(log2 6) = 2 -> shared 0 -> byte 127.
    assert_eq!(mx_scale(MxElem::E2M1, &block(6.0)), 127);
    assert_eq!(mx_scale(MxElem::E2M1, &block(4.0)), 127);
    assert_eq!(mx_scale(MxElem::E2M1, &block(3.99)), 126);
    assert_eq!(mx_scale(MxElem::E2M1, &block(1.0)), 125);
    assert_eq!(mx_scale(MxElem::E2M3, &block(7.5)), 127);
    // E3M2: emax 4, so amax 16..32 -> shared 0.
    assert_eq!(mx_scale(MxElem::E3M2, &block(28.0)), 127);
    assert_eq!(mx_scale(MxElem::E3M2, &block(1.0)), 123);
    // f32::MAX: floor(log2) = 127 -> 125 (E2M1) -> byte 252.
    assert_eq!(mx_scale(MxElem::E2M1, &[f32::MAX; QK]), 252);
    // The smallest subnormal: 2^-149 - 2 is below the E8M0 range, clamped to byte 0.
    assert_eq!(mx_scale(MxElem::E2M1, &[f32::from_bits(1); QK]), 0);
    // All zero: byte 0 (defined here, as ggml writes it); decodes to zeros.
    assert_eq!(mx_scale(MxElem::E3M2, &[0.0; QK]), 0);
    let (s, codes) = encode_block(MxElem::E2M1, &[-0.0; QK]);
    let mut out = [1.0f32; QK];
    decode_block(MxElem::E2M1, s, &codes, &mut out);
    assert!(out.iter().all(|&v| v == 0.0));
}

/// Encodes `x` in a block whose amax fixes the scale to 1 (byte 127), decoding element 0.
fn at_unit_scale(elem: MxElem, x: f32) -> f32 {
    let mut v = [0.0f32; QK];
    v[0] = x;
    // An element at 2^emax pins floor(log2(amax)) = emax as long as |x| < 2^(emax+1).
    v[1] = (1 << elem.emax()) as f32;
    let (s, codes) = encode_block(elem, &v);
    assert_eq!(s, 127, "{elem:?} {x}");
    let mut out = [0.0f32; QK];
    decode_block(elem, s, &codes, &mut out);
    out[0]
}

#[test]
fn ties_round_to_even() {
    // (input, expected) at scale 1, by hand: a tie goes to the code with an even mantissa.
    let e2m1 = [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)];
    let e2m3 = [(0.0625, 0.0), (0.1875, 0.25), (1.0625, 1.0), (1.1875, 1.25), (7.25, 7.0), (6.75, 7.0)];
    let e3m2 = [(0.03125, 0.0), (0.09375, 0.125), (1.125, 1.0), (1.375, 1.5), (26.0, 24.0), (18.0, 16.0)];
    for (elem, cases) in [(MxElem::E2M1, &e2m1[..]), (MxElem::E2M3, &e2m3[..]), (MxElem::E3M2, &e3m2[..])] {
        for &(x, want) in cases {
            assert_eq!(at_unit_scale(elem, x), want, "{elem:?} {x}");
            assert_eq!(at_unit_scale(elem, -x), -want, "{elem:?} -{x}");
        }
    }
    // Just off a tie goes to the nearer value.
    assert_eq!(at_unit_scale(MxElem::E2M1, 5.0001), 6.0);
    assert_eq!(at_unit_scale(MxElem::E2M1, 0.2501), 0.5);
}

#[test]
fn values_past_the_max_normal_saturate() {
    // amax in [2^emax, 2^(emax+1)) keeps scale 1, but may exceed the max normal.
    assert_eq!(at_unit_scale(MxElem::E2M1, 7.99), 6.0);
    assert_eq!(at_unit_scale(MxElem::E2M1, -6.5), -6.0);
    assert_eq!(at_unit_scale(MxElem::E2M3, 7.9), 7.5);
    assert_eq!(at_unit_scale(MxElem::E3M2, 31.0), 28.0);
    assert_eq!(at_unit_scale(MxElem::E3M2, -30.0), -28.0);
    // The element encoder alone saturates too (including infinities).
    assert_eq!(MxElem::E2M1.decode(MxElem::E2M1.encode(1e30)), 6.0);
    assert_eq!(MxElem::E3M2.decode(MxElem::E3M2.encode(f64::NEG_INFINITY)), -28.0);
}

#[test]
fn nan_or_inf_in_a_block_makes_the_scale_nan() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut v = [1.0f32; QK];
        v[31] = bad;
        for elem in MxElem::ALL {
            let (s, codes) = encode_block(elem, &v);
            assert_eq!(s, E8M0_NAN);
            let mut out = [0.0f32; QK];
            decode_block(elem, s, &codes, &mut out);
            assert!(out.iter().all(|v| v.is_nan()), "{elem:?}");
        }
    }
    // A NaN scale byte in GGUF and MXFP6 blocks: the whole block is NaN, the next one is not.
    let mut bytes = [0u8; 2 * MXFP4_GGUF_BLOCK_BYTES];
    bytes[0] = E8M0_NAN;
    bytes[MXFP4_GGUF_BLOCK_BYTES] = 127;
    bytes[MXFP4_GGUF_BLOCK_BYTES + 1] = 0x21; // element 0 = code 1 (0.5), element 16 = code 2 (1.0)
    let mut out = [0.0f32; 2 * QK];
    dequantize_mxfp4_gguf(&bytes, &mut out).unwrap();
    assert!(out[..QK].iter().all(|v| v.is_nan()));
    assert_eq!((out[QK], out[QK + 16], out[QK + 1]), (0.5, 1.0, 0.0));
    let mut bytes = [0u8; MXFP6_BLOCK_BYTES];
    bytes[0] = E8M0_NAN;
    let mut out = [0.0f32; QK];
    dequantize_mxfp6(Fp6::E3M2, &bytes, &mut out).unwrap();
    assert!(out.iter().all(|v| v.is_nan()));
}

/// |decode(encode(x)) - x| is at most half the element spacing of x's binade (times the
/// scale), or exactly the saturation error for elements beyond the max normal.
#[test]
fn round_trips_stay_within_half_an_ulp() {
    let mut rng = Mix(7);
    for elem in MxElem::ALL {
        for trial in 0..2000 {
            // Magnitudes spread over 2^-20..2^20 so every element binade and subnormals occur.
            let base = 2f32.powi((trial % 41) - 20);
            let v: Vec<f32> = (0..QK).map(|i| rng.unit() * base * 2f32.powi(-((i % 9) as i32))).collect();
            let (s, codes) = encode_block(elem, &v);
            let scale = f64::from(e8m0_to_f32(s));
            let mut out = [0.0f32; QK];
            decode_block(elem, s, &codes, &mut out);
            for (&x, &y) in v.iter().zip(&out) {
                let t = f64::from(x) / scale;
                let max = f64::from(elem.max_normal());
                let err = (f64::from(y) - f64::from(x)).abs();
                if t.abs() > max {
                    assert_eq!(f64::from(y), max.copysign(t) * scale, "{elem:?} {x}");
                } else {
                    let e = if t == 0.0 { -1000 } else { t.abs().log2().floor() as i32 };
                    let bound = 0.5 * elem.ulp(e) * scale;
                    assert!(err <= bound, "{elem:?} x {x} got {y} err {err} > {bound}");
                }
            }
        }
    }
}

#[test]
fn gguf_mxfp4_decodes_as_the_spec() {
    // ggml's own reading of block_mxfp4, written out by hand: the doubled table times 2^(e-128).
    const GGML_DOUBLED: [f64; 16] =
        [0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, -0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0];
    let mut rng = Mix(3);
    let blocks = 200;
    let mut bytes: Vec<u8> = (0..blocks * MXFP4_GGUF_BLOCK_BYTES).map(|_| rng.next() as u8).collect();
    for b in 0..blocks {
        // Every scale byte but NaN (ggml reads 0xFF as a number, the spec as NaN).
        bytes[b * MXFP4_GGUF_BLOCK_BYTES] = (b % 255) as u8;
    }
    let mut out = vec![0.0f32; blocks * QK];
    dequantize_mxfp4_gguf(&bytes, &mut out).unwrap();
    for b in 0..blocks {
        let block = &bytes[b * MXFP4_GGUF_BLOCK_BYTES..][..MXFP4_GGUF_BLOCK_BYTES];
        let half_scale = 2f64.powi(i32::from(block[0]) - 128);
        for j in 0..16 {
            let lo = GGML_DOUBLED[usize::from(block[1 + j] & 15)] * half_scale;
            let hi = GGML_DOUBLED[usize::from(block[1 + j] >> 4)] * half_scale;
            assert!(same(out[b * QK + j], lo as f32), "block {b} elem {j}");
            assert!(same(out[b * QK + j + 16], hi as f32), "block {b} elem {}", j + 16);
        }
    }
    // And the spec's table times 2^(e - 127), element by element.
    for (i, &v) in out.iter().enumerate() {
        let block = &bytes[i / QK * MXFP4_GGUF_BLOCK_BYTES..];
        let j = i % QK;
        let code = if j < 16 { block[1 + j] & 15 } else { block[1 + j - 16] >> 4 };
        let spec = E2M1[usize::from(code & 7)] * if code & 8 != 0 { -1.0 } else { 1.0 };
        assert!(same(v, (f64::from(spec) * 2f64.powi(i32::from(block[0]) - 127)) as f32));
    }
}

#[test]
fn gguf_mxfp4_round_trip_and_layout() {
    let mut v = [0.0f32; QK];
    v[0] = 6.0; // code 7, low nibble of byte 1
    v[16] = -0.5; // code 9, high nibble of byte 1
    v[15] = 3.0; // code 5, low nibble of byte 16
    v[31] = -4.0; // code 14, high nibble of byte 16
    let mut bytes = [0u8; MXFP4_GGUF_BLOCK_BYTES];
    quantize_mxfp4_gguf(&v, &mut bytes).unwrap();
    assert_eq!(bytes[0], 127);
    assert_eq!(bytes[1], 0x97);
    assert_eq!(bytes[16], 0xE5);
    assert!(bytes[2..16].iter().all(|&b| b == 0));
    let mut out = [1.0f32; QK];
    dequantize_mxfp4_gguf(&bytes, &mut out).unwrap();
    assert_eq!(out, v);
}

/// ggml's MXFP4 quantiser, by hand: ties to the smaller magnitude, +0 for negatives that round
/// to zero, and the exponent of `log2f` rounded to f32 before the floor.
#[test]
fn gguf_mxfp4_encodes_as_ggml_does() {
    let encode = |v: &[f32]| {
        let mut x = [0.0f32; QK];
        x[..v.len()].copy_from_slice(v);
        let mut bytes = [0u8; MXFP4_GGUF_BLOCK_BYTES];
        quantize_mxfp4_gguf(&x, &mut bytes).unwrap();
        let codes: Vec<u8> = (0..v.len()).map(|j| bytes[1 + j] & 15).collect();
        (bytes[0], codes)
    };
    // amax 4: scale byte 127 (2^0). Halfway values take the first (smaller) code:
    // 0.75 -> 0.5 (1), 1.75 -> 1.5 (3), 3.5 -> 3 (5), -0.75 -> -0.5 (9), 0.25 -> 0 (0).
    // -0.1 and -0.0 round to zero: code 0, not 8.
    let (scale, codes) = encode(&[4.0, 0.75, 1.75, 3.5, -0.75, 0.25, -0.1, -0.0, 5.0 / 4.0]);
    assert_eq!(scale, 127);
    assert_eq!(codes, [6, 1, 3, 5, 9, 0, 0, 0, 2]);
    // 1023.99994 (one ulp below 2^10): log2 rounds to 10.0 in f32, so the exponent is 10 - 2
    // (byte 135) and the value is encoded as 8 * 2^7 = 1024 (code 6), not saturated to 6 * 2^7.
    let below = |p: f32| f32::from_bits(p.to_bits() - 1);
    assert_eq!(encode(&[below(1024.0)]), (135, vec![6]));
    // One ulp below 2: log2 is 1 - 8.6e-8, and f32 holds 1 - 6e-8 there: the floor stays 0.
    assert_eq!(encode(&[below(2.0)]).0, 125);
    // An all-zero block: byte 0; NaN or inf: the spec's NaN scale (ggml's behaviour is undefined).
    assert_eq!(encode(&[0.0, -0.0]), (0, vec![0, 0]));
    assert_eq!(encode(&[1.0, f32::NAN]).0, E8M0_NAN);
    assert_eq!(encode(&[f32::NEG_INFINITY]).0, E8M0_NAN);
}

#[test]
fn mxfp6_packing_bit_order() {
    // Codes 1, 2, 3, 4: 1 | 2 << 6 | 3 << 12 | 4 << 18 = 0x103081, little-endian.
    let mut codes = [0u8; QK];
    codes[..4].copy_from_slice(&[1, 2, 3, 4]);
    codes[31] = 63; // bits 186..192: the top 6 bits of the last byte
    let mut payload = [0u8; 24];
    pack_6bit(&codes, &mut payload);
    let mut want = [0u8; 24];
    want[..3].copy_from_slice(&[0x81, 0x30, 0x10]);
    want[23] = 0xFC;
    assert_eq!(payload, want);
    assert_eq!(unpack_6bit(&payload), codes);
}

#[test]
fn mxfp6_round_trips_exactly_on_the_grid() {
    for kind in Fp6::ALL {
        let elem = kind.elem();
        // Every representable value at scale 2^-3 (one block: 32 codes).
        let t = table(elem);
        let v: Vec<f32> = (0..QK).map(|i| t[i] * 0.125 * if i % 3 == 1 { -1.0 } else { 1.0 }).collect();
        let mut bytes = [0u8; MXFP6_BLOCK_BYTES];
        quantize_mxfp6(kind, &v, &mut bytes).unwrap();
        assert_eq!(bytes[0], 124, "{kind:?}: max normal * 2^-3 -> scale byte 127 - 3");
        let mut out = [0.0f32; QK];
        dequantize_mxfp6(kind, &bytes, &mut out).unwrap();
        for (a, b) in out.iter().zip(&v) {
            assert!(same(*a, *b), "{kind:?}: {a} vs {b}");
        }
    }
}

#[test]
fn q8_0_hand_block() {
    // d = 0.5 (f16 0x3800), q = 1, -2, 127, -128, 0, ...
    let mut block = [0u8; Q8_0_BLOCK_BYTES];
    block[..2].copy_from_slice(&[0x00, 0x38]);
    block[2..6].copy_from_slice(&[1, 0xFE, 127, 0x80]);
    let mut out = [9.0f32; QK];
    dequantize_q8_0(&block, &mut out).unwrap();
    assert_eq!(&out[..5], &[0.5, -1.0, 63.5, -64.0, 0.0]);
    // Quantising 0..31 with amax 127 (element 31): d = 1 (0x3C00), q = x.
    let mut v: Vec<f32> = (0..QK).map(|i| i as f32).collect();
    v[31] = -127.0;
    let mut bytes = [0u8; Q8_0_BLOCK_BYTES];
    quantize_q8_0(&v, &mut bytes).unwrap();
    assert_eq!(&bytes[..2], &[0x00, 0x3C]);
    assert_eq!(bytes[2 + 5], 5);
    assert_eq!(bytes[2 + 31], (-127i8) as u8);
    dequantize_q8_0(&bytes, &mut out).unwrap();
    assert_eq!(out.to_vec(), v);
}

#[test]
fn q4_0_hand_block() {
    // d = 2.0 (f16 0x4000); byte 0 = 0xF0: element 0 = (0 - 8) * 2, element 16 = (15 - 8) * 2.
    let mut block = [0u8; Q4_0_BLOCK_BYTES];
    block[..2].copy_from_slice(&[0x00, 0x40]);
    block[2] = 0xF0;
    block[17] = 0x9A; // element 15 = (10 - 8) * 2 = 4, element 31 = (9 - 8) * 2 = 2
    let mut out = [0.0f32; QK];
    dequantize_q4_0(&block, &mut out).unwrap();
    assert_eq!((out[0], out[16], out[15], out[31], out[1]), (-16.0, 14.0, 4.0, 2.0, -16.0));
    // Largest magnitude -8 -> d = 1, codes q = floor(x + 8.5).
    let mut v = [0.0f32; QK];
    v[0] = -8.0;
    v[1] = 7.0;
    v[2] = 0.5; // floor(9.0) = 9 -> 1.0
    v[17] = -3.2; // floor(5.3) = 5 -> -3
    let mut bytes = [0u8; Q4_0_BLOCK_BYTES];
    quantize_q4_0(&v, &mut bytes).unwrap();
    assert_eq!(&bytes[..2], &[0x00, 0x3C]);
    assert_eq!(bytes[2], 0x80); // element 0 -> 0, element 16 (0.0) -> 8
    assert_eq!(bytes[3], 0x5F); // element 1 -> 15, element 17 -> 5
    dequantize_q4_0(&bytes, &mut out).unwrap();
    assert_eq!((out[0], out[1], out[2], out[17], out[5]), (-8.0, 7.0, 1.0, -3.0, 0.0));
}

#[test]
fn ggml_round_trips_within_half_a_step() {
    let mut rng = Mix(11);
    let v: Vec<f32> = (0..QK * 64).map(|_| rng.unit() * 3.0).collect();
    let mut q8 = vec![0u8; 64 * Q8_0_BLOCK_BYTES];
    let mut q4 = vec![0u8; 64 * Q4_0_BLOCK_BYTES];
    quantize_q8_0(&v, &mut q8).unwrap();
    quantize_q4_0(&v, &mut q4).unwrap();
    let (mut o8, mut o4) = (vec![0.0f32; v.len()], vec![0.0f32; v.len()]);
    dequantize_q8_0(&q8, &mut o8).unwrap();
    dequantize_q4_0(&q4, &mut o4).unwrap();
    for b in 0..64 {
        let d8 = f32::from(rocm_runtime::f16::from_bits(u16::from_le_bytes([q8[b * 34], q8[b * 34 + 1]])));
        let d4 = f32::from(rocm_runtime::f16::from_bits(u16::from_le_bytes([q4[b * 18], q4[b * 18 + 1]])));
        for i in b * QK..(b + 1) * QK {
            // Half a step, plus the f16 rounding of d carried through |q| <= 127 (resp. 8).
            assert!((o8[i] - v[i]).abs() <= 0.5 * d8.abs() * (1.0 + 127.0 / 1024.0) + 1e-6, "q8 {i}");
            // q4_0 spans [-8, 7] steps: values past 7.5 steps (on the side opposite the
            // largest magnitude, which sits at -8 steps) clip to 7 steps.
            let target = if v[i] / d4 > 7.5 { 7.0 * d4 } else { v[i] };
            assert!((o4[i] - target).abs() <= 0.5 * d4.abs() * (1.0 + 8.0 / 1024.0) + 1e-6, "q4 {i}");
        }
    }
}

#[test]
fn lengths_are_checked() {
    let mut out = [0.0f32; QK];
    assert_eq!(
        dequantize_q8_0(&[0; 33], &mut out),
        Err(QuantError::PartialBlock { len: 33, block_bytes: 34 })
    );
    assert_eq!(
        dequantize_q4_0(&[0; 36], &mut out),
        Err(QuantError::OutLength { expected: 64, got: 32, unit: "values" })
    );
    assert_eq!(
        quantize_mxfp4_gguf(&[0.0; 31], &mut [0; 17]),
        Err(QuantError::PartialValues { len: 31, block_values: 32 })
    );
    assert_eq!(
        quantize_mxfp6(Fp6::E2M3, &[0.0; 32], &mut [0; 24]),
        Err(QuantError::OutLength { expected: 25, got: 24, unit: "bytes" })
    );
    assert!(dequantize_mxfp6(Fp6::E3M2, &[0; 25], &mut out).is_ok());
    assert!(quantize_q4_0(&[], &mut []).is_ok());
}
