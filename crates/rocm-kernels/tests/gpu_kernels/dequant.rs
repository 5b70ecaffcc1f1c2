//! `dequant` against the CPU codec: every format (ggml q8_0, q4_0, mxfp4; MXFP6 E2M3 and E3M2;
//! ggml's k-quants q4_K, q5_K, q6_K), every output dtype, random bytes (so every code point,
//! every E8M0 scale including NaN, and f16 scales of every kind), awkward block counts, quantised
//! real-looking data, `dequantize_into` a longer scratch (the same values, the tail untouched),
//! and the lengths the launcher must refuse.

use rocm_kernels::quant::{BlockFormat, Fp6, QK, dequantize, dequantize_into, dequantize_reference};
use rocm_kernels::{Dtype, KernelError};
use rocm_runtime::{DeviceBuffer, Error, bf16, f16};
use rocm_testkit::{GpuTest, Rng, Tolerance, assert_close, gpu_test};

fn poisoned<T: Dtype>(gpu: &GpuTest, len: usize) -> DeviceBuffer<T> {
    let mut buf = gpu.stream().alloc::<T>(len).unwrap();
    buf.poison().unwrap();
    buf
}

fn floats<T: Dtype>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| f64::from(x.to_f32())).collect()
}

/// Exact: each element is a product that f32 holds exactly (a power of two or an f16 scale
/// times a value of at most 8 significant bits; q4_K / q5_K round one subtraction of two exact
/// products, as the codec does), rounded once to T on both sides with the same
/// round-to-nearest-even. The one allowance is f32::MIN_POSITIVE absolute: a device that
/// flushes f32 subnormals (possible on AMD) reads the MX products below 2^-126 as 0. Infinities
/// (E8M0 2^127 times 6 overflows f32) must match; NaN blocks must be NaN.
const EXACT_BUT_FLUSHED_SUBNORMALS: Tolerance = Tolerance::abs(f32::MIN_POSITIVE as f64);

/// The byte offsets of a k-quant super-block's f16 scales.
fn f16_scale_fields(format: BlockFormat) -> &'static [usize] {
    match format {
        BlockFormat::Q4K | BlockFormat::Q5K => &[0, 2],
        BlockFormat::Q6K => &[208],
        _ => &[],
    }
}

fn random_blocks(rng: &mut Rng, format: BlockFormat, nblocks: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..nblocks * format.block_bytes()).map(|_| rng.next_u64() as u8).collect();
    if matches!(format, BlockFormat::Mxfp4Gguf | BlockFormat::Mxfp6(_)) {
        // Every E8M0 byte in turn, NaN (0xFF) included, so the whole range is covered even in
        // a few hundred blocks.
        for (b, block) in bytes.chunks_exact_mut(format.block_bytes()).enumerate() {
            block[0] = (b * 97 % 256) as u8;
        }
    }
    // k-quants: a NaN or infinite f16 scale spoils a whole super-block (whose elements then
    // match a NaN poison even where the kernel never wrote), so 15 of every 16 blocks get
    // finite scales (exponent field 31 moved to 30); the 16th keeps its random bits, NaN and
    // infinity possible.
    for (b, block) in bytes.chunks_exact_mut(format.block_bytes()).enumerate() {
        for &at in f16_scale_fields(format) {
            if b % 16 != 15 && block[at + 1] & 0x7c == 0x7c {
                block[at + 1] &= !0x04;
            }
        }
    }
    bytes
}

/// Block counts for the tiles of 8192 elements (256 blocks of 32, 32 super-blocks of 256): one
/// and a few blocks, a tile exactly, a tile and one block, many tiles and a partial one.
fn block_counts(format: BlockFormat) -> &'static [usize] {
    if format.block_elems() == QK {
        // f32 stores 4 outputs (8 chunks a block) a store, chunk c of a tile with chunk c + 256
        // (256 threads): 32 blocks have no pairs, 64 exactly one round of pairs, 65 and 127
        // pairs and singles.
        &[1, 7, 32, 64, 65, 127, 256, 257, 2560, 4097, 100_003]
    } else {
        // 64 chunks of 4 a super-block: 4 super-blocks have no pairs, 8 one round, 9 and 15
        // pairs and singles; 32 a tile.
        &[1, 4, 7, 8, 9, 15, 32, 33, 320, 513, 12_503]
    }
}

fn random_bytes<T: Dtype>(gpu: &GpuTest, seed: u64) {
    let mut rng = Rng::new(seed);
    for format in BlockFormat::ALL {
        for &nblocks in block_counts(format) {
            let blocks = random_blocks(&mut rng, format, nblocks);
            let dblocks = gpu.stream().upload(&blocks).unwrap();
            let mut out = poisoned::<T>(gpu, nblocks * format.block_elems());
            dequantize(format, &dblocks, &mut out).unwrap();
            let expected = dequantize_reference::<T>(format, &blocks).unwrap();
            eprintln!("dequant {} -> {} x {nblocks} blocks", format.name(), T::NAME);
            let got = out.to_vec().unwrap();
            assert_close(&floats(&got), &floats(&expected), EXACT_BUT_FLUSHED_SUBNORMALS);
            assert_eq!(dblocks.to_vec().unwrap(), blocks, "the blocks are read only");
        }
    }
}

#[test]
fn random_blocks_decode_as_the_codec_f32() {
    let gpu = gpu_test!();
    random_bytes::<f32>(&gpu, 0xde01);
}

#[test]
fn random_blocks_decode_as_the_codec_f16() {
    let gpu = gpu_test!();
    random_bytes::<f16>(&gpu, 0xde02);
}

#[test]
fn random_blocks_decode_as_the_codec_bf16() {
    let gpu = gpu_test!();
    random_bytes::<bf16>(&gpu, 0xde03);
}

fn decode_matches<T: Dtype>(gpu: &GpuTest, format: BlockFormat, blocks: &[u8], dblocks: &DeviceBuffer<u8>) {
    let mut out = poisoned::<T>(gpu, blocks.len() / format.block_bytes() * format.block_elems());
    dequantize(format, dblocks, &mut out).unwrap();
    let expected = dequantize_reference::<T>(format, blocks).unwrap();
    assert_close(&floats(&out.to_vec().unwrap()), &floats(&expected), EXACT_BUT_FLUSHED_SUBNORMALS);
}

/// More tiles of 8192 elements than the launch has thread blocks (16 per compute unit), so each
/// thread block strides over two or three tiles, the last one partial: the formats with the
/// smallest (17 bytes) and largest (34 bytes) blocks of 32, MXFP6 (25 bytes) and the largest
/// k-quant (q6_K, 210 bytes), to f16 (one 16-byte store a group of 8) and f32 (one 16-byte store
/// a chunk of 4, in pairs of chunks), each format to both.
#[test]
fn more_tiles_than_thread_blocks() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xde05);
    let units = gpu.backend().info().compute_units as usize;
    let formats =
        [BlockFormat::Mxfp4Gguf, BlockFormat::Q8_0, BlockFormat::Mxfp6(Fp6::E2M3), BlockFormat::Q6K];
    for format in formats {
        let tile = 8192 / format.block_elems();
        let nblocks = units * 16 * tile * 2 + 300 / (format.block_elems() / QK);
        let blocks = random_blocks(&mut rng, format, nblocks);
        let dblocks = gpu.stream().upload(&blocks).unwrap();
        decode_matches::<f16>(&gpu, format, &blocks, &dblocks);
        decode_matches::<f32>(&gpu, format, &blocks, &dblocks);
    }
}

/// Every MXFP6 code under every E8M0 scale byte, each at every position of a group of 8 (the
/// f16/bf16 kernels decode 8 codes from 6 payload bytes, the f32 ones 4 from 3): block
/// 2 e + h has scale byte e and code (32 h + j + e) % 64 at position j, so each scale byte meets
/// all 64 codes and each code meets every position across the scale bytes.
#[test]
fn mxfp6_every_code_and_scale() {
    let gpu = gpu_test!();
    for format in [BlockFormat::Mxfp6(Fp6::E2M3), BlockFormat::Mxfp6(Fp6::E3M2)] {
        let mut blocks = Vec::with_capacity(512 * 25);
        for e in 0..256usize {
            for h in 0..2usize {
                let mut payload = [0u8; 24];
                for j in 0..QK {
                    let code = ((32 * h + j + e) % 64) as u32;
                    for bit in 0..6 {
                        if (code >> bit) & 1 == 1 {
                            let at = 6 * j + bit;
                            payload[at / 8] |= 1 << (at % 8);
                        }
                    }
                }
                blocks.push(e as u8);
                blocks.extend_from_slice(&payload);
            }
        }
        let dblocks = gpu.stream().upload(&blocks).unwrap();
        decode_matches::<f32>(&gpu, format, &blocks, &dblocks);
        decode_matches::<f16>(&gpu, format, &blocks, &dblocks);
        decode_matches::<bf16>(&gpu, format, &blocks, &dblocks);
    }
}

/// Weights quantised by the CPU codec from normal values (per-32 magnitudes spread over
/// 2^-6..2^6): the GPU decodes them exactly as the codec does, and, as a sanity check of the
/// whole path, close to the original values. A third of the block maximum (a super-block's for
/// the k-quants, whose sub-blocks share its scale) is a loose bound on every format's error:
/// the worst is MXFP4's, whose spec scale lets the block maximum reach just under 8 units and
/// saturates it to 6 (an error just under a quarter of the maximum).
#[test]
fn quantised_weights_round_trip_f32() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xde04);
    // 129 k-quant super-blocks.
    let nblocks = 1032;
    let values: Vec<f32> = (0..nblocks * QK)
        .map(|i| {
            let block_scale = 2f64.powi(((i / QK) % 13) as i32 - 6);
            (rng.normal() * block_scale) as f32
        })
        .collect();
    for format in BlockFormat::ALL {
        let mut blocks = vec![0u8; format.bytes_for(values.len()).unwrap()];
        format.quantize(&values, &mut blocks).unwrap();
        let dblocks = gpu.stream().upload(&blocks).unwrap();
        let mut out = poisoned::<f32>(&gpu, values.len());
        dequantize(format, &dblocks, &mut out).unwrap();
        let got = out.to_vec().unwrap();
        let expected = dequantize_reference::<f32>(format, &blocks).unwrap();
        assert_close(&got, &expected, EXACT_BUT_FLUSHED_SUBNORMALS);
        let elems = format.block_elems();
        for (b, (g, v)) in got.chunks(elems).zip(values.chunks(elems)).enumerate() {
            let amax = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            for (a, e) in g.iter().zip(v) {
                assert!((a - e).abs() <= amax / 3.0, "{} block {b}: {a} vs {e}", format.name());
            }
        }
    }
}

#[test]
fn bad_lengths_are_refused() {
    let gpu = gpu_test!();
    let shape_error = |r: Result<(), KernelError>| crate::shape_message(r, "dequant");
    let blocks = gpu.stream().upload(&[0x11u8; 2 * 17]).unwrap();
    let mut out = poisoned::<f32>(&gpu, 64);
    let mut short = poisoned::<f32>(&gpu, 63);
    assert!(shape_error(dequantize(BlockFormat::Mxfp4Gguf, &blocks, &mut short)).contains("out has 63"));
    // 34 bytes are one q8_0 block (32 elements, not 64), and no whole number of 18- or 25-byte
    // blocks.
    assert!(shape_error(dequantize(BlockFormat::Q8_0, &blocks, &mut out)).contains("out has 64"));
    assert!(shape_error(dequantize(BlockFormat::Q4_0, &blocks, &mut out)).contains("18-byte q4_0"));
    let e3m2 = BlockFormat::Mxfp6(Fp6::E3M2);
    assert!(shape_error(dequantize(e3m2, &blocks, &mut out)).contains("34 bytes are not"));
    // k-quants: 256 elements a super-block.
    let q6k = gpu.stream().upload(&[0u8; 2 * 210]).unwrap();
    assert!(
        shape_error(dequantize(BlockFormat::Q6K, &q6k, &mut out)).contains("2 q6_k blocks decode to 512")
    );
    assert!(shape_error(dequantize(BlockFormat::Q4K, &q6k, &mut out)).contains("144-byte q4_k"));
    let other = gpu.new_stream();
    let foreign = other.upload(&[0x11u8; 2 * 17]).unwrap();
    let err = dequantize(BlockFormat::Mxfp4Gguf, &foreign, &mut out).unwrap_err();
    assert!(matches!(err, KernelError::Runtime(Error::StreamMismatch { .. })), "{err}");
    assert!(out.to_vec().unwrap().iter().all(|v| v.is_nan()), "nothing ran after a refused launch");
    // Empty input: a no-op.
    let empty = gpu.stream().alloc::<u8>(0).unwrap();
    let mut empty_out = gpu.stream().alloc::<f32>(0).unwrap();
    dequantize(BlockFormat::Q8_0, &empty, &mut empty_out).unwrap();
    // And a valid launch after the refusals works.
    dequantize(BlockFormat::Mxfp4Gguf, &blocks, &mut out).unwrap();
    let expected = dequantize_reference::<f32>(BlockFormat::Mxfp4Gguf, &[0x11u8; 34]).unwrap();
    assert_eq!(out.to_vec().unwrap(), expected);
}

/// `dequantize_into` a scratch longer than the weight, as a decode step's shared scratch is:
/// the leading elements bit for bit what `dequantize` writes, the rest keeps its poison; a
/// scratch shorter than the weight is refused.
#[test]
fn dequantize_into_a_longer_scratch_writes_only_the_weight() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xde04);
    let mut scratch = poisoned::<bf16>(&gpu, 40 * 256 + 100);
    for (format, nblocks) in [(BlockFormat::Q8_0, 37), (BlockFormat::Mxfp4Gguf, 320), (BlockFormat::Q4K, 40)]
    {
        let blocks = random_blocks(&mut rng, format, nblocks);
        let dblocks = gpu.stream().upload(&blocks).unwrap();
        let elems = nblocks * format.block_elems();
        let mut exact = poisoned::<bf16>(&gpu, elems);
        dequantize(format, &dblocks, &mut exact).unwrap();
        scratch.poison().unwrap();
        assert_eq!(dequantize_into(format, &dblocks, &mut scratch).unwrap(), elems, "{}", format.name());
        let got = scratch.to_vec().unwrap();
        let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got[..elems]), bits(&exact.to_vec().unwrap()), "{}", format.name());
        assert!(got[elems..].iter().all(|v| v.is_nan()), "{}: the tail keeps its poison", format.name());
    }
    let blocks = gpu.stream().upload(&[0u8; 3 * 34]).unwrap();
    let mut short = poisoned::<f32>(&gpu, 95);
    let err = dequantize_into(BlockFormat::Q8_0, &blocks, &mut short).unwrap_err();
    assert!(matches!(&err, KernelError::Shape { message, .. } if message.contains("out has 95")), "{err}");
}
