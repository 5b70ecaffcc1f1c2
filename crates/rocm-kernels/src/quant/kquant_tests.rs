//! The k-quant codecs against blocks whose values are worked out by hand from ggml's block
//! definitions (never computed by the code under test), and the encoders against error bounds
//! derived from the step sizes. Bit-exactness with gguf-py's decoders is checked by
//! rocm-model's Python interop tests.

use rocm_runtime::f16;

use super::tests::Mix;
use super::*;

/// f16 bit patterns used in the hand-built blocks.
const F16_QUARTER: [u8; 2] = [0x00, 0x34];
const F16_HALF: [u8; 2] = [0x00, 0x38];
const F16_NAN: [u8; 2] = [0x00, 0x7E];
const F16_INF: [u8; 2] = [0x00, 0x7C];

fn read_f16(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

#[test]
fn block_sizes_follow_the_layouts() {
    assert_eq!(QK_K, 256);
    assert_eq!(Q4_K_BLOCK_BYTES, 2 + 2 + 12 + QK_K / 2);
    assert_eq!(Q5_K_BLOCK_BYTES, 2 + 2 + 12 + QK_K / 8 + QK_K / 2);
    assert_eq!(Q6_K_BLOCK_BYTES, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2);
}

/// d = 0.5, dmin = 0.25; sub-block scales 1, 2, 3, 4, 17, 33, 49, 63 and mins 5, 6, 7, 8, 40,
/// 3, 20, 50 (the high bits of scale and min differ in each of sub-blocks 4..8), packed by hand: `b[s] = sc[s] | (sc[s+4] >> 4) << 6`,
/// `b[s+4] = m[s] | (m[s+4] >> 4) << 6`, `b[s+8] = (sc[s+4] & 15) | (m[s+4] & 15) << 4`.
fn hand_affine_header() -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..2].copy_from_slice(&F16_HALF);
    h[2..4].copy_from_slice(&F16_QUARTER);
    h[4..].copy_from_slice(&[0x41, 0x82, 0xC3, 0xC4, 0x85, 0x06, 0x47, 0xC8, 0x81, 0x31, 0x41, 0x2F]);
    h
}

/// `-dmin * m[s]` for the hand header: the value of code 0 in sub-block `s`.
const HAND_FLOORS: [f32; 8] = [-1.25, -1.5, -1.75, -2.0, -10.0, -0.75, -5.0, -12.5];

#[test]
fn q4_k_hand_block() {
    let mut block = [0u8; Q4_K_BLOCK_BYTES];
    block[..16].copy_from_slice(&hand_affine_header());
    let qs = &mut block[16..];
    qs[0] = 0xA3; // element 0 (sub-block 0): q 3; element 32 (sub-block 1): q 10
    qs[37] = 0xF0; // element 64 + 5 (sub-block 2): q 0; element 96 + 5 (sub-block 3): q 15
    qs[127] = 0x92; // element 192 + 31 (sub-block 6): q 2; element 224 + 31 (sub-block 7): q 9
    let mut out = [0.0f32; QK_K];
    dequantize_q4_k(&block, &mut out).unwrap();
    // d * sc * q - dmin * m, by hand.
    assert_eq!(out[0], 0.5 * 1.0 * 3.0 - 1.25);
    assert_eq!(out[32], 0.5 * 2.0 * 10.0 - 1.5);
    assert_eq!(out[69], -1.75);
    assert_eq!(out[101], 0.5 * 4.0 * 15.0 - 2.0);
    assert_eq!(out[223], 0.5 * 49.0 * 2.0 - 5.0);
    assert_eq!(out[255], 0.5 * 63.0 * 9.0 - 12.5);
    let set = [0, 32, 69, 101, 223, 255];
    for (i, &v) in out.iter().enumerate().filter(|(i, _)| !set.contains(i)) {
        assert_eq!(v, HAND_FLOORS[i / 32], "element {i} has code 0");
    }
}

#[test]
fn q5_k_hand_block() {
    let mut block = [0u8; Q5_K_BLOCK_BYTES];
    block[..16].copy_from_slice(&hand_affine_header());
    let (qh, qs) = block[16..].split_at_mut(32);
    // qh[l] bit s is bit 4 of element 32 s + l.
    qh[0] = 0b1000_0011; // elements 0, 32 and 224
    qh[31] = 0b0000_0001; // element 31
    qs[0] = 0xA3; // element 0: q 3 + 16; element 32: q 10 + 16
    qs[31] = 0x0F; // element 31: q 15 + 16; element 63: q 0
    qs[96] = 0x00; // element 192: q 0 (bit 6 of qh[0] clear); element 224: q 0 + 16
    let mut out = [0.0f32; QK_K];
    dequantize_q5_k(&block, &mut out).unwrap();
    assert_eq!(out[0], 0.5 * 1.0 * 19.0 - 1.25);
    assert_eq!(out[32], 0.5 * 2.0 * 26.0 - 1.5);
    assert_eq!(out[31], 0.5 * 1.0 * 31.0 - 1.25);
    assert_eq!(out[224], 0.5 * 63.0 * 16.0 - 12.5);
    let set = [0, 31, 32, 224];
    for (i, &v) in out.iter().enumerate().filter(|(i, _)| !set.contains(i)) {
        assert_eq!(v, HAND_FLOORS[i / 32], "element {i} has code 0");
    }
}

#[test]
fn q6_k_hand_block() {
    let mut block = [0u8; Q6_K_BLOCK_BYTES];
    let scales: [i8; 16] = [2, 1, -3, 1, 4, 1, 5, 1, 127, 1, 1, 1, 1, 1, 1, -128];
    for (b, s) in block[192..208].iter_mut().zip(scales) {
        *b = s as u8;
    }
    block[208..].copy_from_slice(&F16_HALF);
    // First half: ql[0] serves elements 0 (low nibble) and 64 (high), ql[32] elements 32 and
    // 96; qh[0] holds their high bit pairs at bits 0-1, 2-3, 4-5, 6-7.
    block[0] = 0x5A;
    block[32] = 0x3C;
    block[128] = 0b11_10_01_00;
    // Second half: ql[64] low nibble and qh[32] bits 0-1 are element 128's.
    block[64] = 0x0F;
    block[128 + 32] = 0b11;
    let mut out = [0.0f32; QK_K];
    dequantize_q6_k(&block, &mut out).unwrap();
    // d * scales[i / 16] * (q - 32), by hand.
    assert_eq!(out[0], 0.5 * 2.0 * (10.0 - 32.0)); // q = 0xA | 0 << 4
    assert_eq!(out[32], 0.5 * -3.0 * (28.0 - 32.0)); // q = 0xC | 1 << 4
    assert_eq!(out[64], 0.5 * 4.0 * (37.0 - 32.0)); // q = 0x5 | 2 << 4
    assert_eq!(out[96], 0.5 * 5.0 * (51.0 - 32.0)); // q = 0x3 | 3 << 4
    assert_eq!(out[128], 0.5 * 127.0 * (63.0 - 32.0)); // q = 0xF | 3 << 4
    assert_eq!(out[255], 0.5 * -128.0 * -32.0); // q = 0, i8 scale -128
    let set = [0, 32, 64, 96, 128];
    for (i, &v) in out.iter().enumerate().filter(|(i, _)| !set.contains(i)) {
        assert_eq!(v, 0.5 * f32::from(scales[i / 16]) * -32.0, "element {i} has code 0");
    }
}

/// A q4_K super-block whose encoding follows from the module docs by hand: sub-block 0 holds
/// `(j % 16) * 63/64`, sub-block 1 holds -63/32 then zeros, the rest are zero.
#[test]
fn q4_k_hand_encode() {
    let mut v = [0.0f32; QK_K];
    for (j, v) in v[..32].iter_mut().enumerate() {
        *v = (j % 16) as f32 * 63.0 / 64.0;
    }
    v[32] = -63.0 / 32.0;
    let mut block = [0u8; Q4_K_BLOCK_BYTES];
    quantize_q4_k(&v, &mut block).unwrap();
    // Sub-block 1 reaches 63/32 below zero: dmin = 63/32 / 63 = 1/32 (f16 0x2800), min 63.
    assert_eq!(&block[2..4], &[0x00, 0x28]);
    // Steps needed: 63/64 (sub-block 0) and (0 + 63/32) / 15 = 8.4/64 (sub-block 1), so
    // d = 63/64 / 63 = 1/64 (f16 0x2400), scales 63 and ceil(8.4) = 9.
    assert_eq!(&block[..2], &[0x00, 0x24]);
    assert_eq!(&block[4..16], &[63, 9, 0, 0, 0, 63, 0, 0, 0, 0, 0, 0]);
    // Codes: sub-block 0 (low nibbles of qs[0..32]) j % 16; sub-block 1 (high nibbles) 0 for
    // -63/32 and 126/9 = 14 for zero (14 * 9/64 - 63/32 = 0 exactly).
    let qs = &block[16..];
    assert_eq!((qs[0], qs[1], qs[17], qs[31]), (0x00, 0xE1, 0xE1, 0xEF));
    assert!(qs[32..].iter().all(|&b| b == 0));
    let mut out = [1.0f32; QK_K];
    dequantize_q4_k(&block, &mut out).unwrap();
    assert_eq!(out, v);
}

/// A q6_K super-block whose encoding follows from the module docs by hand (d = 1/64):
/// sub-block 0 spans -63.5 (32 steps of 127/64 below zero) to 31 steps above; sub-block 1 is
/// symmetric, +-155/64 (31 steps of 5/64 either way: a tie, so the positive step); sub-block 2
/// holds only +1.5, reached by 32 negative steps of -3/64.
#[test]
fn q6_k_hand_encode() {
    let mut v = [0.0f32; QK_K];
    (v[0], v[1]) = (-32.0 * 127.0 / 64.0, 31.0 * 127.0 / 64.0);
    (v[16], v[17]) = (-155.0 / 64.0, 155.0 / 64.0);
    v[32] = 1.5;
    let mut block = [0u8; Q6_K_BLOCK_BYTES];
    quantize_q6_k(&v, &mut block).unwrap();
    assert_eq!(&block[208..], &[0x00, 0x24]); // 127/64 / 127 = 1/64
    assert_eq!(&block[192..196], &[127, 5, (-3i8) as u8, 0]);
    // Codes (q + 32): element 0 -> 0, 1 -> 63, 16 -> 1, 17 -> 63, 32 -> 0, every other 32
    // (0b10_0000: low nibble 0, high pair 2). ql[l] holds elements l and l + 64, ql[l + 32]
    // elements l + 32 and l + 96; qh[l] their high pairs at bits 0, 2, 4, 6.
    assert_eq!((block[0], block[1], block[16], block[17], block[32]), (0x00, 0x0F, 0x01, 0x0F, 0x00));
    assert_eq!((block[128], block[129], block[144], block[145]), (0xA0, 0xAB, 0xA8, 0xAB));
    let mut out = [1.0f32; QK_K];
    dequantize_q6_k(&block, &mut out).unwrap();
    assert_eq!(out, v);
}

/// Rounding a small sub-block scale up can double its step; one unit lower clips a little and
/// errs less, and the encoder must take it. d = 1/64 in both cases (set by sub-block 0).
#[test]
fn a_sub_block_scale_one_unit_lower_wins_where_it_errs_less() {
    let d = 1.0 / 64.0;
    // q4_K: sub-block 1 spans [0, 15.3 d]: scale 2 errs up to d, scale 1 at most 0.5 d (the
    // top clips by 0.3 d).
    let mut v = [0.0f32; QK_K];
    for j in 0..32 {
        v[j] = (j % 16) as f32 * 63.0 * d;
        v[32 + j] = j as f32 / 31.0 * 15.3 * d;
    }
    let mut out = [0.0f32; QK_K];
    let mut block = [0u8; Q4_K_BLOCK_BYTES];
    quantize_q4_k(&v, &mut block).unwrap();
    dequantize_q4_k(&block, &mut out).unwrap();
    assert_eq!(block[5], 1, "sub-block 1's scale");
    let worst = v[32..64].iter().zip(&out[32..64]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(worst <= 0.5 * d, "{worst}");
    // q6_K: sub-block 1 reaches 32.64 d below zero: scale 2 errs up to d, scale 1 0.64 d.
    let mut v = [0.0f32; QK_K];
    v[0] = -32.0 * 127.0 * d;
    for j in 0..16 {
        v[16 + j] = -(j as f32) / 15.0 * 32.64 * d;
    }
    let mut block = [0u8; Q6_K_BLOCK_BYTES];
    quantize_q6_k(&v, &mut block).unwrap();
    dequantize_q6_k(&block, &mut out).unwrap();
    assert_eq!(block[193], 1, "sub-block 1's scale");
    let worst = v[16..32].iter().zip(&out[16..32]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(worst <= 0.65 * d, "{worst}");
}

#[test]
fn k_quant_lengths_are_checked() {
    let mut out = [0.0f32; QK_K];
    assert_eq!(
        dequantize_q4_k(&[0; 143], &mut out),
        Err(QuantError::PartialBlock { len: 143, block_bytes: 144 })
    );
    assert_eq!(
        dequantize_q6_k(&[0; 210], &mut out[..255]),
        Err(QuantError::OutLength { expected: 256, got: 255, unit: "values" })
    );
    assert_eq!(
        quantize_q5_k(&[0.0; 32], &mut [0; 176]),
        Err(QuantError::PartialValues { len: 32, block_values: 256 })
    );
    assert_eq!(
        quantize_q4_k(&[0.0; 256], &mut [0; 143]),
        Err(QuantError::OutLength { expected: 144, got: 143, unit: "bytes" })
    );
    assert_eq!(
        QuantError::PartialValues { len: 32, block_values: 256 }.to_string(),
        "32 values are not a whole number of 256-element blocks"
    );
    assert!(dequantize_q5_k(&[], &mut []).is_ok());
    assert!(quantize_q6_k(&[], &mut []).is_ok());
}

type Encode = fn(&[f32], &mut [u8]) -> Result<(), QuantError>;
type Decode = fn(&[u8], &mut [f32]) -> Result<(), QuantError>;

/// The three k-quants: name, block bytes, encoder, decoder.
const KINDS: [(&str, usize, Encode, Decode); 3] = [
    ("q4_K", Q4_K_BLOCK_BYTES, quantize_q4_k, dequantize_q4_k),
    ("q5_K", Q5_K_BLOCK_BYTES, quantize_q5_k, dequantize_q5_k),
    ("q6_K", Q6_K_BLOCK_BYTES, quantize_q6_k, dequantize_q6_k),
];

fn round_trip(encode: Encode, decode: Decode, block_bytes: usize, v: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = vec![0u8; v.len() / QK_K * block_bytes];
    encode(v, &mut bytes).unwrap();
    let mut out = vec![0.0f32; v.len()];
    decode(&bytes, &mut out).unwrap();
    (bytes, out)
}

/// Super-blocks of varied shapes: uniform at magnitudes 2^-20..2^20, all positive, all
/// negative, one loud sub-block among quiet ones (small sub-block scales), zero and constant
/// sub-blocks, and awkward values (ties of the code grid, -0, subnormals).
fn test_super_blocks(rng: &mut Mix) -> Vec<f32> {
    let mut v = Vec::new();
    for k in -20..=20 {
        let base = 2f32.powi(k);
        v.extend((0..QK_K).map(|_| rng.unit() * base));
    }
    v.extend((0..QK_K).map(|_| rng.unit().abs() + 0.5));
    v.extend((0..QK_K).map(|_| -rng.unit().abs() * 3.0 - 1.0));
    v.extend((0..QK_K).map(|i| if i / 32 == 3 { rng.unit() * 100.0 } else { rng.unit() * 0.3 }));
    v.extend((0..QK_K).map(|i| match i / 32 {
        0 => 0.0,
        1 => -0.0,
        2 => 7.25,
        3 => -7.25,
        _ => rng.unit(),
    }));
    v.extend((0..QK_K).map(|i| (i % 31) as f32 * 0.5 - 7.5));
    v.extend((0..QK_K).map(|i| if i % 2 == 0 { f32::from_bits(1 + i as u32) } else { -1e-30 }));
    v
}

/// Bounds the decoding of `x` by what the module docs promise, from the input alone: half the
/// step a sub-block needs plus half a unit of `d` (the rounding up of its scale), and `d` (`dmin`)
/// at most an f16 rounding up of what the largest sub-block needs. `slack` is f32 rounding in
/// the decoder's subtraction, a few ulps of the sub-block's magnitude.
fn check_affine_bound(name: &str, levels: f32, block: &[u8], x: &[f32], y: &[f32]) {
    let (d, dmin) = (read_f16(&block[..2]), read_f16(&block[2..4]));
    let f16_up = |v: f32| v * (1.0 + 2f32.powi(-10)) + 2f32.powi(-24);
    let floor = |x: &[f32]| -x.iter().fold(0.0f32, |m, &v| m.min(v));
    let top = |x: &[f32]| x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let subs: Vec<&[f32]> = x.chunks_exact(32).collect();
    let max_floor = subs.iter().map(|s| floor(s)).fold(0.0, f32::max);
    assert!(dmin <= f16_up(max_floor / 63.0), "{name}: dmin {dmin} for floors up to {max_floor}");
    // The decoded floor is below the input's by less than one dmin.
    let need = |s: &[f32]| (top(s) + floor(s) + dmin) / levels;
    let max_need = subs.iter().map(|s| need(s)).fold(0.0, f32::max);
    assert!(d <= f16_up(max_need / 63.0), "{name}: d {d} for steps up to {max_need}");
    for (s, (x, y)) in subs.iter().zip(y.chunks_exact(32)).enumerate() {
        let slack = (top(x).abs() + floor(x) + dmin * 63.0) * 2f32.powi(-21);
        let bound = 0.5 * (need(x) + d) + slack;
        for (&a, &b) in x.iter().zip(y) {
            assert!((a - b).abs() <= bound, "{name} sub-block {s}: {a} -> {b}, bound {bound}");
        }
    }
}

/// The `q6_K` counterpart of [`check_affine_bound`]: a sub-block needs the smaller of the two
/// signed steps that cover it (32 steps on one side of zero, 31 on the other).
fn check_symmetric_bound(block: &[u8], x: &[f32], y: &[f32]) {
    let d = read_f16(&block[208..]);
    let need = |s: &[f32]| {
        let below = -s.iter().fold(0.0f32, |m, &v| m.min(v));
        let above = s.iter().fold(0.0f32, |m, &v| m.max(v));
        (below / 32.0).max(above / 31.0).min((above / 32.0).max(below / 31.0))
    };
    let max_need = x.chunks_exact(16).map(need).fold(0.0, f32::max);
    assert!(d <= max_need / 127.0 * (1.0 + 2f32.powi(-10)) + 2f32.powi(-24), "q6_K: d {d}");
    for (s, (x, y)) in x.chunks_exact(16).zip(y.chunks_exact(16)).enumerate() {
        // Decoding is exact (d * sc * q has at most 24 significant bits); the slack covers the
        // encoder's f64 choice of q near a tie.
        let bound = 0.5 * (need(x) + d) * (1.0 + 2f32.powi(-20));
        for (&a, &b) in x.iter().zip(y) {
            assert!((a - b).abs() <= bound, "q6_K sub-block {s}: {a} -> {b}, bound {bound}");
        }
    }
}

#[test]
fn k_quant_round_trips_stay_within_half_a_step() {
    let v = test_super_blocks(&mut Mix(17));
    for (name, block_bytes, encode, decode) in KINDS {
        let (bytes, out) = round_trip(encode, decode, block_bytes, &v);
        for ((block, x), y) in
            bytes.chunks_exact(block_bytes).zip(v.chunks_exact(QK_K)).zip(out.chunks_exact(QK_K))
        {
            match name {
                "q4_K" => check_affine_bound(name, 15.0, block, x, y),
                "q5_K" => check_affine_bound(name, 31.0, block, x, y),
                _ => check_symmetric_bound(block, x, y),
            }
        }
    }
}

#[test]
fn zero_blocks_decode_to_positive_zero() {
    let mut v = vec![0.0f32; QK_K];
    v[7] = -0.0;
    for (name, block_bytes, encode, decode) in KINDS {
        let (bytes, out) = round_trip(encode, decode, block_bytes, &v);
        assert!(out.iter().all(|y| y.to_bits() == 0), "{name}");
        // Zero scales: d (and dmin) are f16 +0.
        let d = if name == "q6_K" { &bytes[208..] } else { &bytes[..4] };
        assert!(d.iter().all(|&b| b == 0), "{name}");
    }
}

#[test]
fn unrepresentable_super_blocks_decode_to_nan() {
    let mut rng = Mix(5);
    let finite: Vec<f32> = (0..3 * QK_K).map(|_| rng.unit()).collect();
    for (name, block_bytes, encode, decode) in KINDS {
        // q6_K reaches 65504 * 127 * 32 (about 2.7e8), q4_K and q5_K less: 1e30 needs an f16
        // scale past 65504 in all three.
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30] {
            let mut v = finite.clone();
            v[QK_K + 100] = bad;
            let (_, out) = round_trip(encode, decode, block_bytes, &v);
            assert!(out[QK_K..2 * QK_K].iter().all(|y| y.is_nan()), "{name} with {bad}");
            // The super-blocks beside it are untouched.
            assert!(out[..QK_K].iter().chain(&out[2 * QK_K..]).all(|y| y.is_finite()), "{name} with {bad}");
        }
    }
    // A large value that still fits: q6_K's d becomes about 1e8 / 32 / 127, well inside f16.
    let mut v = finite[..QK_K].to_vec();
    v[0] = 1e8;
    let (_, out) = round_trip(quantize_q6_k, dequantize_q6_k, Q6_K_BLOCK_BYTES, &v);
    assert!(out.iter().all(|y| y.is_finite()) && (out[0] - 1e8).abs() < 1e8 * 0.02);
}

#[test]
fn nan_and_inf_scale_bytes_follow_ieee_arithmetic() {
    // q4_K: d NaN makes every element NaN (NaN * 0 too).
    let mut block = [0u8; Q4_K_BLOCK_BYTES];
    block[..2].copy_from_slice(&F16_NAN);
    let mut out = [0.0f32; QK_K];
    dequantize_q4_k(&block, &mut out).unwrap();
    assert!(out.iter().all(|y| y.is_nan()));
    // q5_K: dmin inf with min 0 is inf * 0 = NaN; d = 0.5 with scale 1 (sub-block 0) is fine.
    let mut block = [0u8; Q5_K_BLOCK_BYTES];
    block[..2].copy_from_slice(&F16_HALF);
    block[2..4].copy_from_slice(&F16_INF);
    block[4] = 1;
    dequantize_q5_k(&block, &mut out).unwrap();
    assert!(out.iter().all(|y| y.is_nan()));
    // q6_K: d inf times scale 1 and q - 32 = -32 is -inf; scale 0 gives NaN.
    let mut block = [0u8; Q6_K_BLOCK_BYTES];
    block[208..].copy_from_slice(&F16_INF);
    block[192] = 1;
    dequantize_q6_k(&block, &mut out).unwrap();
    assert!(out[..16].iter().all(|&y| y == f32::NEG_INFINITY));
    assert!(out[16..].iter().all(|y| y.is_nan()));
}

/// A random f16 in [2^-8, 2^-6): d * sc * q and dmin * m then share a grid of 2^-18 and stay
/// below 2^5, so the decoder's f32 arithmetic is exact (the module docs' condition).
fn exact_scale(rng: &mut Mix) -> [u8; 2] {
    (0x1C00 + (rng.next() % 0x800) as u16).to_le_bytes()
}

/// Random `q4_K` / `q5_K` blocks patched into the encoder's form: every sub-block scale at
/// least 1, scale and min of sub-block 0 at 63, codes 0 and `L` in every sub-block.
fn canonical_affine_blocks(rng: &mut Mix, n: usize, five_bit: bool) -> Vec<u8> {
    let block_bytes = if five_bit { Q5_K_BLOCK_BYTES } else { Q4_K_BLOCK_BYTES };
    let mut bytes: Vec<u8> = (0..n * block_bytes).map(|_| rng.next() as u8).collect();
    for block in bytes.chunks_exact_mut(block_bytes) {
        block[..2].copy_from_slice(&exact_scale(rng));
        block[2..4].copy_from_slice(&exact_scale(rng));
        let sc = &mut block[4..16];
        sc[0] |= 63; // scale 0 (low six bits of byte 0)
        sc[4] |= 63; // min 0 (low six bits of byte 4)
        for s in 0..4 {
            sc[s] |= 1; // scale s >= 1
            sc[s + 8] |= 1; // scale s + 4 >= 1 (its low nibble)
        }
        let (qh, qs) = block[16..].split_at_mut(if five_bit { 32 } else { 0 });
        for s in 0..8 {
            // Sub-block s is the low (even s) or high (odd s) nibbles of qs[32 (s / 2)..]: its
            // element 0 gets code 0, its element 1 code L.
            let (byte, shift) = (32 * (s / 2), 4 * (s % 2));
            qs[byte] &= !(15 << shift);
            qs[byte + 1] |= 15 << shift;
            if five_bit {
                qh[0] &= !(1 << s);
                qh[1] |= 1 << s;
            }
        }
    }
    bytes
}

/// Random `q6_K` blocks in the encoder's form: scales in `-127..=127` without 0, scale 0 at
/// +-127, code 0 (`q = -32`) at element 0 of every sub-block, `d > 0`.
fn canonical_q6_k_blocks(rng: &mut Mix, n: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..n * Q6_K_BLOCK_BYTES).map(|_| rng.next() as u8).collect();
    for block in bytes.chunks_exact_mut(Q6_K_BLOCK_BYTES) {
        for b in &mut block[192..208] {
            if *b == 0 || *b == 0x80 {
                *b = 1;
            }
        }
        block[192] = if rng.next().is_multiple_of(2) { 127 } else { (-127i8) as u8 };
        block[208..].copy_from_slice(&exact_scale(rng));
        for s in 0..16 {
            // Element 16 s: half h = s / 8, quarter k = s % 8 / 2, lane 16 (s % 2).
            let (h, k, lane) = (s / 8, s % 8 / 2, 16 * (s % 2));
            block[64 * h + 32 * (k % 2) + lane] &= if k < 2 { 0xF0 } else { 0x0F };
            block[128 + 32 * h + lane] &= !(3 << (2 * k));
        }
    }
    bytes
}

#[test]
fn blocks_in_the_encoders_form_encode_back_to_the_same_bytes() {
    let mut rng = Mix(23);
    let blocks = 40;
    let cases = [
        canonical_affine_blocks(&mut rng, blocks, false),
        canonical_affine_blocks(&mut rng, blocks, true),
        canonical_q6_k_blocks(&mut rng, blocks),
    ];
    for ((name, block_bytes, encode, decode), bytes) in KINDS.into_iter().zip(cases) {
        let mut values = vec![0.0f32; blocks * QK_K];
        decode(&bytes, &mut values).unwrap();
        let (again, out) = round_trip(encode, decode, block_bytes, &values);
        for (b, (want, got)) in
            bytes.chunks_exact(block_bytes).zip(again.chunks_exact(block_bytes)).enumerate()
        {
            assert_eq!(want, got, "{name} block {b}");
        }
        assert_eq!(out, values, "{name}");
    }
}
