//! Benchmark of `kernels/dequant.hip` and `kernels/mxfp.hip` at the weight shapes of a Llama-3-8B
//! MLP: 14336 x 4096 (gate/up: n = 14336 rows of k = 4096) and 4096 x 14336 (down).
//!
//! Minimal traffic: dequantisation reads the packed weight once and writes every element once;
//! the matrix-vector product reads the packed weight, x (k elements) and writes y (n elements);
//! the prefill product also reads X `[m, k]` and writes Y `[m, n]` (and reports TFLOP/s, 2 m n k).
//! The packed weights (31-46 MB) fit in a large L2 (50 MB on H100/H200), so each launch reads
//! the next of several copies totalling at least four times the L2: the rows measure DRAM.

use rocm_kernels::Dtype;
use rocm_kernels::quant::{
    BlockFormat, DeviceTiledMxfp4, Fp6, MxFormat, TiledMxfp4, dequantize, dequantize_tiled, mx_matmul,
    mx_matvec, mx_matvec_tiled,
};
use rocm_runtime::{DeviceBuffer, bf16, f16};

use super::{Bench, Row};
use crate::Result;

/// (n, k) of the weights.
const SHAPES: &[(usize, usize)] = &[(14_336, 4096), (4096, 14_336)];
/// (n, k) of gpt-oss-20b's expert gate/up weight (hidden 2880, two 2880-wide halves).
const GPT_OSS_GATE_UP: (usize, usize) = (5760, 2880);
/// Tokens of the prefill product.
const PREFILL: usize = 512;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (n, k) = SHAPES[0];
    let weight_bytes = BlockFormat::Mxfp4Gguf.bytes_for(n * k).ok_or("weight size")?;
    rows.push(small_read(b, weight_bytes)?);
    for format in BlockFormat::ALL {
        rows.push(dequant::<f16>(b, format, n, k)?);
    }
    rows.push(dequant::<f32>(b, BlockFormat::Mxfp4Gguf, n, k)?);
    rows.push(dequant::<bf16>(b, BlockFormat::Mxfp4Gguf, n, k)?);
    rows.push(tiled_dequant::<bf16>(b, n, k)?);
    for &(n, k) in SHAPES {
        for format in [MxFormat::Mxfp4Gguf, MxFormat::Mxfp6(Fp6::E2M3)] {
            rows.push(matvec::<f32>(b, format, n, k)?);
            rows.push(matvec::<f16>(b, format, n, k)?);
            rows.push(matvec::<bf16>(b, format, n, k)?);
        }
        rows.push(tiled_matvec::<f16>(b, n, k)?);
        rows.push(tiled_matvec::<bf16>(b, n, k)?);
    }
    // gpt-oss-20b's expert gate/up projection: k = 2880 is not a multiple of 512 (rows are not
    // 16-byte aligned), the matrix-core kernel's any-k entry.
    let (gn, gk) = GPT_OSS_GATE_UP;
    rows.push(matvec::<f32>(b, MxFormat::Mxfp4Gguf, gn, gk)?); // the portable kernel, for comparison
    rows.push(matvec::<f16>(b, MxFormat::Mxfp4Gguf, gn, gk)?);
    rows.push(matvec::<bf16>(b, MxFormat::Mxfp4Gguf, gn, gk)?);
    rows.push(tiled_matvec::<f16>(b, gn, gk)?);
    rows.push(tiled_matvec::<bf16>(b, gn, gk)?);
    for format in [MxFormat::Mxfp4Gguf, MxFormat::Mxfp6(Fp6::E2M3)] {
        rows.push(matmul::<f16>(b, format, PREFILL, n, k)?);
    }
    Ok(rows)
}

/// Copies of a random `[n, k]` weight in `format` (scale bytes 118..=130, so products stay
/// finite), enough of them to cover four times the L2 (at most 8), on the host.
pub(super) fn host_weights(b: &mut Bench, format: BlockFormat, n: usize, k: usize) -> Result<Vec<Vec<u8>>> {
    let bytes = format.bytes_for(n * k).ok_or("weight size")?;
    let l2 = b.backend.info().l2_cache_bytes.max(1) as usize;
    let copies = (4 * l2).div_ceil(bytes).clamp(1, 8);
    let mut out = Vec::with_capacity(copies);
    for _ in 0..copies {
        let mut host = b.random_bytes(bytes);
        if matches!(format, BlockFormat::Mxfp4Gguf | BlockFormat::Mxfp6(_)) {
            for block in host.chunks_exact_mut(format.block_bytes()) {
                block[0] = 118 + (block[0] % 13);
            }
        }
        out.push(host);
    }
    Ok(out)
}

/// [`host_weights`], uploaded.
pub(super) fn weights(
    b: &mut Bench,
    format: BlockFormat,
    n: usize,
    k: usize,
) -> Result<Vec<DeviceBuffer<u8>>> {
    let host = host_weights(b, format, n, k)?;
    Ok(host.iter().map(|w| b.stream.upload(w)).collect::<std::result::Result<_, _>>()?)
}

/// `stream_read` over as many bytes as the MXFP4 weight holds, from rotating buffers that
/// together exceed the L2: the read-only ceiling for the matrix-vector products at this size
/// (a launch this short spends a good part of its time filling and draining the memory
/// pipeline; a copy of the same bytes is no ceiling: its writes land in the L2 and reach
/// memory after it ends).
fn small_read(b: &mut Bench, bytes: usize) -> Result<Row> {
    let bytes = bytes / 16 * 16;
    let l2 = b.backend.info().l2_cache_bytes.max(1) as usize;
    let copies = (4 * l2).div_ceil(bytes).clamp(1, 16);
    let host = b.random_bytes(bytes);
    let bufs = (0..copies).map(|_| b.stream.upload(&host)).collect::<std::result::Result<Vec<_>, _>>()?;
    let ms = b.time_read(&bufs)?;
    Ok(Row {
        kernel: "read (weight-sized)".into(),
        dtype: "u8",
        shape: format!("{} MB", bytes / 1_000_000),
        ms,
        bytes: bytes as u64,
        flops: None,
    })
}

fn dequant<T: Dtype>(b: &mut Bench, format: BlockFormat, n: usize, k: usize) -> Result<Row> {
    let w = weights(b, format, n, k)?;
    let mut out = b.stream.alloc::<T>(n * k)?;
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        Ok(dequantize(format, &w[i % w.len()], &mut out)?)
    })?;
    Ok(Row {
        kernel: format!("dequant {}", format.name()),
        dtype: T::NAME,
        shape: format!("{n}x{k}"),
        ms,
        bytes: (w[0].len() + n * k * size_of::<T>()) as u64,
        flops: None,
    })
}

/// [`dequant`] of the same MXFP4 weights in the tiled layout (`dequantize_tiled`, the whole
/// weight): what a prefill pays for keeping its weights tiled.
fn tiled_dequant<T: Dtype>(b: &mut Bench, n: usize, k: usize) -> Result<Row> {
    let (tiled, gguf_bytes) = tiled_weights(b, n, k)?;
    let mut out = b.stream.alloc::<T>(n * k)?;
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        Ok(dequantize_tiled(&tiled[i % tiled.len()], 0..n, &mut out)?)
    })?;
    Ok(Row {
        kernel: "dequant mxfp4 tiled".into(),
        dtype: T::NAME,
        shape: format!("{n}x{k}"),
        ms,
        bytes: (gguf_bytes + n * k * size_of::<T>()) as u64,
        flops: None,
    })
}

fn matvec<T: Dtype>(b: &mut Bench, format: MxFormat, n: usize, k: usize) -> Result<Row> {
    let w = weights(b, format.block_format(), n, k)?;
    let label = format!("{} matvec", format.block_format().name());
    time_matvec::<T>(b, label, n, k, w[0].len(), |i, x, y| {
        Ok(mx_matvec(format, &w[i % w.len()], x, y, n, k)?)
    })
}

/// Times `launch(i, x, y)`, the i-th launch of a matrix-vector product with random x: the row
/// counts the weight's `weight_bytes`, x and y.
fn time_matvec<T: Dtype>(
    b: &mut Bench,
    kernel: String,
    n: usize,
    k: usize,
    weight_bytes: usize,
    mut launch: impl FnMut(usize, &DeviceBuffer<T>, &mut DeviceBuffer<T>) -> Result<()>,
) -> Result<Row> {
    let x = b.random::<T>(k, -1.0, 1.0);
    let x = b.stream.upload(&x)?;
    let mut y = b.stream.alloc::<T>(n)?;
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        launch(i, &x, &mut y)
    })?;
    Ok(Row {
        kernel,
        dtype: T::NAME,
        shape: format!("{n}x{k}"),
        ms,
        bytes: (weight_bytes + (k + n) * size_of::<T>()) as u64,
        flops: None,
    })
}

/// The matrix-vector product over the same random MXFP4 weights re-laid out by
/// `TiledMxfp4::from_gguf` (done before timing, as a loader would at upload). Traffic is counted
/// as for the GGUF rows: the layout holds the same 17 bytes a block, plus padding that is not
/// read past a row's last block (scales aside: at most 7 bytes a row).
fn tiled_matvec<T: Dtype>(b: &mut Bench, n: usize, k: usize) -> Result<Row> {
    let (tiled, gguf_bytes) = tiled_weights(b, n, k)?;
    let label = "mxfp4 tiled matvec".to_string();
    time_matvec::<T>(b, label, n, k, gguf_bytes, |i, x, y| {
        Ok(mx_matvec_tiled(&tiled[i % tiled.len()], x, y)?)
    })
}

/// [`host_weights`] of MXFP4 re-laid out by `TiledMxfp4::from_gguf` and uploaded (before any
/// timing, as a loader would), with the GGUF rows' bytes of one copy, by which the rows count
/// their traffic.
fn tiled_weights(b: &mut Bench, n: usize, k: usize) -> Result<(Vec<DeviceTiledMxfp4>, usize)> {
    let host = host_weights(b, BlockFormat::Mxfp4Gguf, n, k)?;
    let tiled = host
        .iter()
        .map(|w| Ok(TiledMxfp4::from_gguf(w, n, k)?.upload(&b.stream)?))
        .collect::<Result<Vec<_>>>()?;
    Ok((tiled, host[0].len()))
}

fn matmul<T: Dtype>(b: &mut Bench, format: MxFormat, m: usize, n: usize, k: usize) -> Result<Row> {
    let w = weights(b, format.block_format(), n, k)?;
    let x = b.random::<T>(m * k, -1.0, 1.0);
    let x = b.stream.upload(&x)?;
    let mut y = b.stream.alloc::<T>(m * n)?;
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        Ok(mx_matmul(format, &w[i % w.len()], &x, &mut y, m, n, k)?)
    })?;
    Ok(Row {
        kernel: format!("{} matmul", format.block_format().name()),
        dtype: T::NAME,
        shape: format!("{m}x{n}x{k}"),
        ms,
        bytes: (w[0].len() + (m * k + m * n) * size_of::<T>()) as u64,
        flops: Some(2.0 * (m * n * k) as f64),
    })
}
