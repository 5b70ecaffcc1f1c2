//! Benchmark of `kernels/quant_matvec.hip` at the linear layers of a Llama-3-8B block (hidden
//! 4096, MLP 14336, 8 KV heads of 128), for every ggml format it reads and batches of 1
//! (decode), 8 and 32 (batched decode), f16 and bf16 (the model's) activations (rows marked
//! `(mma)` where the matrix-core kernel ran):
//!
//! - `4096x4096`: q and o projections; `1024x4096`: k and v projections;
//! - `14336x4096`: gate and up; `4096x14336`: down (rows x k).
//!
//! Minimal traffic: the packed weight once, x (`batch x k`) once and y (`batch x rows`) once.
//! Each launch reads the next of several copies of the weight that together cover four times
//! the L2 (the 1024-row weights are 2-4 MB), so the rows measure DRAM, not the cache. A
//! `read (q4_k-sized)` row per shape is `stream_read` over the q4_K weight's bytes from
//! rotating buffers: the read-only ceiling at that size (a launch this short spends part of its
//! time filling and draining the memory pipeline; see docs/kernels/quant_matvec.md).
//!
//! Grouped launches (`quant_matvec_group`), as the model runs them, for q8_0 and q4_K: Q, K and
//! V in one launch (`4096+1024+1024x4096`) and gate and up in one (`14336+14336x4096`), rows
//! `<fmt> matvec group b<N>`, next to the sum of the single launches' rows above; and the same
//! groups of MXFP4 weights (`mx_matvec_group`, rows `mxfp4 matvec group b<N>`); each at 1, 8
//! and 32 vectors (32: `kernels/quant_matmul_mma.hip` on the matrix cores, whose products of
//! few rows split k across blocks, here in one [`SplitScratch`] as a decode workspace has). At
//! every batch, the MXFP4 groups over the tiled layout too: the weights stacked, one launch
//! (`kernels/mxfp4_tiled.hip`, rows `mxfp4 tiled matvec split b1`), and gate and up with their
//! SwiGLU in that launch (rows `mxfp4 tiled gate+up swiglu b<N>`); at one vector both again with
//! the layer's RMSNorm folded in (rows `mxfp4 tiled normed ... b1`: x the residual stream,
//! normalised as it is staged; the norm's own launch is then gone from the layer).
//!
//! And where `q4_K` runs and the device has the tiled q4_K kernel (`kernels/q4k_tiled.hip`, NVIDIA
//! matrix cores), one vector over that layout as a folded layer would run it: Q, K and V stacked
//! (`q4_K tiled matvec split b1`), O and down added to the residual stream (`... matvec add
//! b1`), gate and up with their SwiGLU, and Q, K, V and gate and up with the RMSNorm folded in
//! (`q4_K tiled normed ... b1`); and the layer's groups stacked at 1, 8 and 32 vectors, on the
//! matrix cores (`q4_K tiled matvec split b<N>`) and on the portable kernel (`q4_K tiled
//! portable matvec split b<N>`).
//!
//! `ROCMFORGE_BENCH_QMV_FORMATS` (a comma-separated list of ggml format names, `q4_K,q8_0`)
//! limits the rows to those formats (the MXFP4 groups run where `mxfp4` is named, the tiled q4_K
//! rows alone where `q4_K-tiled` is); the read ceilings always run.

use rocm_kernels::Dtype;
use rocm_kernels::quant::{
    BlockFormat, DeviceTiledQ4k, GgmlFormat, MxFormat, QuantProduct, SplitScratch, TiledMxfp4, TiledNorm,
    TiledOutput, TiledQ4k, mx_matvec_group_in, mx_matvec_tiled_fused, q4k_matvec_tiled_fused,
    q4k_matvec_tiled_split, q4k_tiled_on_matrix_cores, quant_matvec_glu, quant_matvec_glu_fuses,
    quant_matvec_group_in, quant_matvec_on_matrix_cores,
};
use rocm_runtime::{DeviceBuffer, bf16, f16};

use super::{Bench, Row};
use crate::Result;

/// (rows, k) of the weights.
const SHAPES: &[(usize, usize)] = &[(4096, 4096), (1024, 4096), (14_336, 4096), (4096, 14_336)];
/// Vectors a launch multiplies.
const BATCHES: &[usize] = &[1, 8, 32];
/// The products the model groups (rows of each; k = 4096): Q, K, V, and gate, up.
const GROUPS: &[&[usize]] = &[&[4096, 1024, 1024], &[14_336, 14_336]];

/// The names of the formats whose rows run (`ROCMFORGE_BENCH_QMV_FORMATS`): the ggml formats',
/// `mxfp4`, and `q4_K-tiled` (the tiled q4_K rows alone; `q4_K` runs them too).
fn selected_formats() -> Result<Vec<&'static str>> {
    let names: Vec<&'static str> =
        GgmlFormat::ALL.iter().map(|f| f.name()).chain(["mxfp4", "q4_K-tiled"]).collect();
    super::env_selection("ROCMFORGE_BENCH_QMV_FORMATS", &names, |n| n)
}

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    let formats = selected_formats()?;
    // Names as `env_selection` matched them (case-insensitively): `q4_K` is the format `q4_k`.
    let selected = |name: &str| formats.iter().any(|f| f.eq_ignore_ascii_case(name));
    let mut rows = Vec::new();
    if selected("q4_K") || selected("q4_K-tiled") {
        // The tiled q4_K layer as a folded model would run it: Q, K and V stacked, O added to the
        // stream, gate and up with their SwiGLU, down added to the stream; Q, K, V and gate and
        // up once more with the RMSNorm folded in.
        let launches: &[(&[usize], usize, Q4kOut, bool)] = &[
            (&[4096, 1024, 1024], 4096, Q4kOut::Split, false),
            (&[4096, 1024, 1024], 4096, Q4kOut::Split, true),
            (&[4096], 4096, Q4kOut::Add, false),
            (&[14_336, 14_336], 4096, Q4kOut::Swiglu, false),
            (&[14_336, 14_336], 4096, Q4kOut::Swiglu, true),
            (&[4096], 14_336, Q4kOut::Add, false),
        ];
        for &(group, k, out, normed) in launches {
            rows.extend(q4k_tiled::<f16>(b, group, k, out, normed)?);
            rows.extend(q4k_tiled::<bf16>(b, group, k, out, normed)?);
        }
        for &(group, k) in
            &[(&[4096, 1024, 1024][..], 4096), (&[14_336, 14_336][..], 4096), (&[4096][..], 14_336)]
        {
            // One stacked weight for every batch; the matrix cores' b1 row is the one above.
            let weight = q4k_stacked(b, group, k)?;
            let mma = q4k_tiled_on_matrix_cores::<bf16>(&b.stream);
            for &batch in BATCHES {
                if mma && batch > 1 {
                    rows.push(q4k_tiled_batch::<bf16>(b, &weight, group, k, batch, false)?);
                }
                rows.push(q4k_tiled_batch::<bf16>(b, &weight, group, k, batch, true)?);
            }
        }
        // The GGUF rows' gate and up with their SwiGLU (what the model runs today), beside them.
        let (gate, up) =
            (weights(b, GgmlFormat::Q4K, 14_336, 4096)?, weights(b, GgmlFormat::Q4K, 14_336, 4096)?);
        rows.extend(rows_glu::<f16>(b, &gate, &up)?);
        rows.extend(rows_glu::<bf16>(b, &gate, &up)?);
    }
    for &(n, k) in SHAPES {
        rows.push(read_ceiling(b, GgmlFormat::Q4K, n, k)?);
        for format in GgmlFormat::ALL.into_iter().filter(|f| selected(f.name())) {
            let weights = weights(b, format, n, k)?;
            for &batch in BATCHES {
                rows.push(matvec::<f16>(b, format, &weights, n, k, batch)?);
            }
            for &batch in BATCHES {
                rows.push(matvec::<bf16>(b, format, &weights, n, k, batch)?);
            }
        }
    }
    for &group in GROUPS {
        for format in [GgmlFormat::Q8_0, GgmlFormat::Q4K].into_iter().filter(|f| selected(f.name())) {
            let weights = group.iter().map(|&n| weights(b, format, n, 4096)).collect::<Result<Vec<_>>>()?;
            for &batch in BATCHES {
                rows.push(matvec_group::<f16>(b, format, &weights, group, 4096, batch)?);
                rows.push(matvec_group::<bf16>(b, format, &weights, group, 4096, batch)?);
            }
        }
        if !selected("mxfp4") {
            continue;
        }
        let weights = group
            .iter()
            .map(|&n| super::mxfp::weights(b, BlockFormat::Mxfp4Gguf, n, 4096))
            .collect::<Result<Vec<_>>>()?;
        for &batch in BATCHES {
            rows.push(mx_group::<f16>(b, &weights, group, 4096, batch)?);
            rows.push(mx_group::<bf16>(b, &weights, group, 4096, batch)?);
        }
        let glu = matches!(group, [gate, up] if gate == up);
        for swiglu in [false, true].into_iter().filter(|&s| !s || glu) {
            for &batch in BATCHES {
                rows.push(tiled_split::<f16>(b, group, 4096, batch, swiglu, false)?);
                rows.push(tiled_split::<bf16>(b, group, 4096, batch, swiglu, false)?);
            }
            rows.push(tiled_split::<f16>(b, group, 4096, 1, swiglu, true)?);
            rows.push(tiled_split::<bf16>(b, group, 4096, 1, swiglu, true)?);
        }
    }
    Ok(rows)
}

/// One vector through `quant_matvec_glu` (gate and up of 14336 x 4096 q4_K GGUF rows with their
/// SwiGLU), where it runs: rows `q4_K matvec glu b1`.
fn rows_glu<T: Dtype>(
    b: &mut Bench,
    gate: &[DeviceBuffer<u8>],
    up: &[DeviceBuffer<u8>],
) -> Result<Option<Row>> {
    let (n, k) = (14_336, 4096);
    if !quant_matvec_glu_fuses::<T>(&b.stream, GgmlFormat::Q4K, k, 1) {
        return Ok(None);
    }
    let x = b.random::<T>(k, -1.0, 1.0);
    let x = b.stream.upload(&x)?;
    let mut act = b.stream.alloc::<T>(n)?;
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        let c = i % gate.len().min(up.len());
        Ok(quant_matvec_glu(GgmlFormat::Q4K, &gate[c], &up[c], n, &x, k, &mut act)?)
    })?;
    Ok(Some(Row {
        kernel: "q4_K matvec glu b1".into(),
        dtype: T::NAME,
        shape: group_shape(&[n, n], k),
        ms,
        bytes: (gate[0].len() + up[0].len() + (k + n) * size_of::<T>()) as u64,
        flops: None,
    }))
}

/// A tiled row's device inputs and outputs: random x (`batch` vectors of `k`), an output a part
/// of `group` (`batch` rows each), and a norm weight (`k`, for the normed rows).
type TiledIo<T> = (DeviceBuffer<T>, Vec<DeviceBuffer<T>>, DeviceBuffer<T>);
fn tiled_io<T: Dtype>(b: &mut Bench, group: &[usize], k: usize, batch: usize) -> Result<TiledIo<T>> {
    let x = b.random::<T>(batch * k, -1.0, 1.0);
    let x = b.stream.upload(&x)?;
    let ys =
        group.iter().map(|&n| b.stream.alloc::<T>(batch * n)).collect::<std::result::Result<Vec<_>, _>>()?;
    let norm_weight = b.random::<T>(k, 0.5, 1.5);
    Ok((x, ys, b.stream.upload(&norm_weight)?))
}

/// What a tiled q4_K row's launch does with its totals ([`TiledOutput`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Q4kOut {
    Split,
    Swiglu,
    Add,
}

/// One vector through the tiled q4_K kernel (`kernels/q4k_tiled.hip`), where the device runs it:
/// the group's weights (random super-blocks, every f16 scale finite) stacked along their rows
/// before timing, as a loader would, into one output each, their SwiGLU (gate and up), or added
/// to a residual stream; `normed` with an RMSNorm folded in (x the residual stream). Rows
/// `q4_K tiled ... b1`, traffic counted as for the GGUF rows (the norm's weight not counted).
fn q4k_tiled<T: Dtype>(
    b: &mut Bench,
    group: &[usize],
    k: usize,
    out: Q4kOut,
    normed: bool,
) -> Result<Option<Row>> {
    if !q4k_tiled_on_matrix_cores::<T>(&b.stream) {
        return Ok(None);
    }
    let (device, weight_bytes) = q4k_stacked(b, group, k)?;
    let (x, mut ys, norm_weight) = tiled_io::<T>(b, group, k, 1)?;
    let norm = normed.then_some(TiledNorm { weight: &norm_weight, eps: 1e-5 });
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        let w = &device[i % device.len()];
        let mut outs: Vec<&mut DeviceBuffer<T>> = ys.iter_mut().collect();
        let to = match out {
            Q4kOut::Swiglu => TiledOutput::Swiglu(&mut *outs[0]),
            Q4kOut::Add => TiledOutput::Add(&mut *outs[0]),
            Q4kOut::Split => TiledOutput::Split(&mut outs),
        };
        Ok(q4k_matvec_tiled_fused(w, &x, norm, to)?)
    })?;
    let rows: usize = if out == Q4kOut::Swiglu { group[0] } else { group.iter().sum() };
    let what = match out {
        Q4kOut::Split => "matvec split",
        Q4kOut::Swiglu => "gate+up swiglu",
        Q4kOut::Add => "matvec add",
    };
    Ok(Some(Row {
        kernel: format!("q4_K tiled {}{what} b1", if normed { "normed " } else { "" }),
        dtype: T::NAME,
        shape: group_shape(group, k),
        ms,
        bytes: (weight_bytes + (k + rows) * size_of::<T>()) as u64,
        flops: None,
    }))
}

/// A group's tiled q4_K weights on the device (copies) and their GGUF bytes.
type StackedQ4k = (Vec<DeviceTiledQ4k>, usize);

/// The group's weights (random super-blocks, every f16 scale finite) stacked along their rows
/// before timing, as a loader would, in enough device copies that the L2 holds none between
/// launches; and their GGUF bytes.
fn q4k_stacked(b: &mut Bench, group: &[usize], k: usize) -> Result<StackedQ4k> {
    let patterns =
        group.iter().map(|&n| host_patterns(b, GgmlFormat::Q4K, n, k)).collect::<Result<Vec<_>>>()?;
    let stacked: Vec<TiledQ4k> = (0..2)
        .map(|c| {
            let parts = patterns
                .iter()
                .zip(group)
                .map(|(p, &n)| TiledQ4k::from_gguf(&p[c], n, k))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            TiledQ4k::stack(&parts.iter().collect::<Vec<_>>())
        })
        .collect::<std::result::Result<_, _>>()?;
    let weight_bytes: usize = patterns.iter().map(|p| p[0].len()).sum();
    let device = (0..copies(b, weight_bytes))
        .map(|i| stacked[i % 2].upload(&b.stream))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((device, weight_bytes))
}

/// `batch` vectors through the tiled q4_K kernels (the matrix cores' one- and several-vector
/// loops where the device has them, or with `portable` the portable kernel), the group stacked
/// into one output a part: rows `q4_K tiled [portable ]matvec split b<N>`, beside the rows'
/// `q4_k matvec group b<N>`.
fn q4k_tiled_batch<T: Dtype>(
    b: &mut Bench,
    (device, weight_bytes): &StackedQ4k,
    group: &[usize],
    k: usize,
    batch: usize,
    portable: bool,
) -> Result<Row> {
    let (x, mut ys, _) = tiled_io::<T>(b, group, k, batch)?;
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        let mut outs: Vec<&mut DeviceBuffer<T>> = ys.iter_mut().collect();
        Ok(q4k_matvec_tiled_split(&device[i % device.len()], &x, batch, &mut outs, portable)?)
    })?;
    let rows: usize = group.iter().sum();
    Ok(Row {
        kernel: format!("q4_K tiled {}matvec split b{batch}", if portable { "portable " } else { "" }),
        dtype: T::NAME,
        shape: group_shape(group, k),
        ms,
        bytes: (weight_bytes + batch * (k + rows) * size_of::<T>()) as u64,
        flops: None,
    })
}

/// The same group of MXFP4 products over the tiled layout: the weights stacked along their rows
/// (`TiledMxfp4::stack`, before timing, as a loader would) and multiplied in one launch into one
/// output each (`mx_matvec_tiled_split`), or with `swiglu` (gate and up) into their activation
/// (`mx_matvec_tiled_swiglu`, rows `mxfp4 tiled gate+up swiglu b<N>`); `normed` (one vector)
/// with an RMSNorm folded in (`TiledNorm`: x the residual stream). Traffic counted as for the
/// GGUF rows (the norm's weight not counted: k elements).
fn tiled_split<T: Dtype>(
    b: &mut Bench,
    group: &[usize],
    k: usize,
    batch: usize,
    swiglu: bool,
    normed: bool,
) -> Result<Row> {
    let parts = group
        .iter()
        .map(|&n| super::mxfp::host_weights(b, BlockFormat::Mxfp4Gguf, n, k))
        .collect::<Result<Vec<_>>>()?;
    let copies = parts.iter().map(Vec::len).min().unwrap_or(1);
    let mut stacked = Vec::with_capacity(copies);
    for c in 0..copies {
        let tiled = parts
            .iter()
            .zip(group)
            .map(|(copies, &n)| TiledMxfp4::from_gguf(&copies[c], n, k))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        stacked.push(TiledMxfp4::stack(&tiled.iter().collect::<Vec<_>>())?.upload(&b.stream)?);
    }
    let (x, mut ys, norm_weight) = tiled_io::<T>(b, group, k, batch)?;
    let norm = normed.then_some(TiledNorm { weight: &norm_weight, eps: 1e-5 });
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        let w = &stacked[i % stacked.len()];
        let mut outs: Vec<&mut DeviceBuffer<T>> = ys.iter_mut().collect();
        let out = match swiglu {
            true => TiledOutput::Swiglu(&mut *outs[0]),
            false => TiledOutput::Split(&mut outs),
        };
        Ok(mx_matvec_tiled_fused(w, &x, batch, norm, out, false)?)
    })?;
    let weight_bytes: usize = parts.iter().map(|copies| copies[0].len()).sum();
    let rows: usize = if swiglu { group[0] } else { group.iter().sum() };
    let kernel = match (normed, swiglu) {
        (false, true) => "tiled gate+up swiglu",
        (false, false) => "tiled matvec split",
        (true, true) => "tiled normed gate+up swiglu",
        (true, false) => "tiled normed matvec split",
    };
    Ok(Row {
        kernel: format!("mxfp4 {kernel} b{batch}"),
        dtype: T::NAME,
        shape: group_shape(group, k),
        ms,
        bytes: (weight_bytes + batch * (k + rows) * size_of::<T>()) as u64,
        flops: None,
    })
}

/// One grouped launch over products of `group[i]` rows (`w[i]`: the copies of product i's
/// weight), all at `k`.
fn matvec_group<T: Dtype>(
    b: &mut Bench,
    format: GgmlFormat,
    w: &[Vec<DeviceBuffer<u8>>],
    group: &[usize],
    k: usize,
    batch: usize,
) -> Result<Row> {
    let label = format!("{} matvec group b{batch}{}", format.name(), path_mark::<T>(b, format, k));
    time_group::<T>(b, label, w, group, k, batch, |products, x, split| {
        Ok(quant_matvec_group_in(format, products, x, k, batch, Some(split))?)
    })
}

/// [`matvec_group`] for MXFP4 weights (`mx_matvec_group`; past one vector on NVIDIA matrix cores
/// it runs `kernels/quant_matvec_mma.hip` too).
fn mx_group<T: Dtype>(
    b: &mut Bench,
    w: &[Vec<DeviceBuffer<u8>>],
    group: &[usize],
    k: usize,
    batch: usize,
) -> Result<Row> {
    let label = format!("mxfp4 matvec group b{batch}");
    time_group::<T>(b, label, w, group, k, batch, |products, x, split| {
        Ok(mx_matvec_group_in(MxFormat::Mxfp4Gguf, products, x, k, batch, Some(split))?)
    })
}

/// Times `launch(products, x, split scratch)` over random `x` (`batch` vectors of `k`), the i-th
/// call taking the i-th copy of each weight.
fn time_group<T: Dtype>(
    b: &mut Bench,
    kernel: String,
    w: &[Vec<DeviceBuffer<u8>>],
    group: &[usize],
    k: usize,
    batch: usize,
    mut launch: impl FnMut(&mut [QuantProduct<'_, T>], &DeviceBuffer<T>, &mut SplitScratch) -> Result<()>,
) -> Result<Row> {
    let x = b.random::<T>(batch * k, -1.0, 1.0);
    let x = b.stream.upload(&x)?;
    let mut split = SplitScratch::new(&b.stream)?;
    let mut ys =
        group.iter().map(|&n| b.stream.alloc::<T>(batch * n)).collect::<std::result::Result<Vec<_>, _>>()?;
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        let mut products: Vec<QuantProduct<'_, T>> = w
            .iter()
            .zip(ys.iter_mut())
            .zip(group)
            .map(|((copies, y), &rows)| QuantProduct { w: &copies[i % copies.len()], y, rows })
            .collect();
        launch(&mut products, &x, &mut split)
    })?;
    let weight_bytes: usize = w.iter().map(|copies| copies[0].len()).sum();
    let rows: usize = group.iter().sum();
    Ok(Row {
        kernel,
        dtype: T::NAME,
        shape: group_shape(group, k),
        ms,
        bytes: (weight_bytes + batch * (k + rows) * size_of::<T>()) as u64,
        flops: None,
    })
}

/// A group's shape column: its products' rows joined by `+`, then `x k` (`4096+1024+1024x4096`).
fn group_shape(group: &[usize], k: usize) -> String {
    format!("{}x{k}", group.iter().map(|n| n.to_string()).collect::<Vec<_>>().join("+"))
}

/// ` (mma)` where the product runs on the matrix cores (`kernels/quant_matvec_mma.hip`).
fn path_mark<T: Dtype>(b: &Bench, format: GgmlFormat, k: usize) -> &'static str {
    if quant_matvec_on_matrix_cores::<T>(&b.stream, format, k) { " (mma)" } else { "" }
}

/// How many copies of a `bytes`-byte weight cover four times the L2.
fn copies(b: &Bench, bytes: usize) -> usize {
    let l2 = b.backend.info().l2_cache_bytes.max(1) as usize;
    (4 * l2).div_ceil(bytes.max(1)).clamp(2, 128)
}

/// Copies of a random `[n, k]` weight: random bytes (every code), each f16 scale made finite
/// (exponent field 31 moved to 30), as [`copies`] asks. Two host patterns, uploaded in turn.
fn weights(b: &mut Bench, format: GgmlFormat, n: usize, k: usize) -> Result<Vec<DeviceBuffer<u8>>> {
    let patterns = host_patterns(b, format, n, k)?;
    let count = copies(b, patterns[0].len());
    Ok((0..count).map(|i| b.stream.upload(&patterns[i % 2])).collect::<std::result::Result<_, _>>()?)
}

/// The two host patterns [`weights`] uploads: random bytes, each f16 scale made finite.
fn host_patterns(b: &mut Bench, format: GgmlFormat, n: usize, k: usize) -> Result<Vec<Vec<u8>>> {
    let bytes = format.block_format().bytes_for(n * k).ok_or("weight size")?;
    let scales: &[usize] = match format {
        GgmlFormat::Q8_0 | GgmlFormat::Q4_0 => &[0],
        GgmlFormat::Q4K | GgmlFormat::Q5K => &[0, 2],
        GgmlFormat::Q6K => &[208],
    };
    let mut patterns = Vec::new();
    for _ in 0..2 {
        let mut host = b.random_bytes(bytes);
        for block in host.chunks_exact_mut(format.block_bytes()) {
            for &at in scales {
                if block[at + 1] & 0x7c == 0x7c {
                    block[at + 1] &= !0x04;
                }
            }
        }
        patterns.push(host);
    }
    Ok(patterns)
}

fn matvec<T: Dtype>(
    b: &mut Bench,
    format: GgmlFormat,
    w: &[DeviceBuffer<u8>],
    n: usize,
    k: usize,
    batch: usize,
) -> Result<Row> {
    let x = b.random::<T>(batch * k, -1.0, 1.0);
    let x = b.stream.upload(&x)?;
    let mut y = b.stream.alloc::<T>(batch * n)?;
    let mut split = SplitScratch::new(&b.stream)?;
    let mut i = 0;
    let ms = b.time(|| {
        i += 1;
        let product = &mut [QuantProduct { w: &w[i % w.len()], y: &mut y, rows: n }];
        Ok(quant_matvec_group_in(format, product, &x, k, batch, Some(&mut split))?)
    })?;
    Ok(Row {
        kernel: format!("{} matvec b{batch}{}", format.name(), path_mark::<T>(b, format, k)),
        dtype: T::NAME,
        shape: format!("{n}x{k}"),
        ms,
        bytes: (w[0].len() + batch * (k + n) * size_of::<T>()) as u64,
        flops: None,
    })
}

/// `stream_read` over as many bytes as the `[n, k]` weight in `format` holds, from rotating
/// buffers that together exceed the L2.
fn read_ceiling(b: &mut Bench, format: GgmlFormat, n: usize, k: usize) -> Result<Row> {
    let bytes = format.block_format().bytes_for(n * k).ok_or("weight size")? / 16 * 16;
    let host = b.random_bytes(bytes);
    let count = copies(b, bytes);
    let bufs = (0..count).map(|_| b.stream.upload(&host)).collect::<std::result::Result<Vec<_>, _>>()?;
    let ms = b.time_read(&bufs)?;
    Ok(Row {
        kernel: format!("read ({}-sized)", format.name()),
        dtype: "u8",
        shape: format!("{n}x{k}"),
        ms,
        bytes: bytes as u64,
        flops: None,
    })
}
