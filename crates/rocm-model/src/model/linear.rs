//! [`Linear`]: a projection weight `[out, in]` on the device, kept as the file stores it.
//!
//! Plain types (F32, F16, BF16) are converted to the compute type `T` once at load. Block
//! formats (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4) stay as their blocks: device memory for the weights is the
//! file's tensor bytes, not `T`'s (an 8B model in Q8_0 is 8.5 GB; 16 GB in bf16). Each product
//! takes the path that reads them best:
//!
//! - few tokens (decode): a fused kernel reads every block once and decodes it in registers
//!   ([`fused_product`] says which formats and token counts have one);
//! - prefill up to [`mixed_input_max_tokens`], with a grid that fills the device:
//!   the mixed-input GEMM (`rocm_kernels::quant::quant_gemm`, Hopper), which decodes the blocks
//!   inside its tile loop ([`mixed_input_product`]);
//! - otherwise (prefill): the weight is dequantised to `T` and the GEMM runs on it
//!   (`rocm_kernels::quant::dequant_gemm`, in sequence): into a temporary freed in stream order,
//!   or into the caller's scratch ([`Products`]: a decode workspace's, allocated once, which a
//!   graph can record). Overlapping the two on a second stream measured slower on an H100
//!   (docs/kernels/quant_gemm.md, v2).
//!
//! MXFP4 and q8_0 weights loaded in their tiled layouts ([`crate::Mxfp4Layout::Tiled`],
//! [`crate::Q8Layout::Tiled`]) are [`Linear::Tiled`] ([`TiledStack`]): up to
//! [`TiledStack::max_tokens`] tokens (MXFP4 32, q8_0 8) run the tiled kernel (a layer's Q, K and V, or its gate and up, stacked into
//! one weight and multiplied in one launch: [`apply_shared`]; several tokens are B's columns on
//! the matrix cores); more tokens dequantise the part's rows from the tiles (`dequantize_tiled`)
//! and run the GEMM.
//!
//! `y = x W^T` either way, f32 accumulation, one rounding to `T` on store; the paths differ only
//! in the order of the sums.

use std::sync::Arc;

use rocm_kernels::gemm::{GemmDesc, GemmElement, GemmPath, gemm_with};
use rocm_kernels::quant::{
    BlockFormat, DeviceTiledMxfp4, DeviceTiledQ8, GgmlFormat, MAX_PRODUCTS, MAX_TILED_BATCH,
    MAX_TILED_OUTPUTS, MXFP4_TILE_ROWS, MxFormat, QUANT_GEMM_TILE_TOKENS, QuantProduct, SplitScratch,
    dequant_gemm, dequantize_into, dequantize_tiled, dequantize_tiled_q8, mx_matvec_group_in,
    mx_matvec_group_on_matrix_cores, mx_matvec_tiled_rows, mx_matvec_tiled_split, mx_matvec_tiled_swiglu,
    q8_0_matvec_tiled_rows, q8_0_matvec_tiled_split, q8_0_matvec_tiled_swiglu, quant_gemm, quant_gemm_grid,
    quant_gemm_runs, quant_matvec_glu, quant_matvec_glu_fuses, quant_matvec_group_in,
    quant_matvec_on_matrix_cores,
};
use rocm_runtime::DeviceBuffer;

use super::error::Result;

/// How a pass runs its products: the GEMM path (the model's, [`GemmPath::Auto`] by default);
/// where a block-format weight without a fused kernel for the token count is dequantised: a
/// scratch at least [`Linear::dequant_len`] long, or a temporary per product when `None`; and
/// where fused products that split `k` keep their parts (`None`: temporaries; the results are
/// the same).
pub(crate) struct Products<'a, T: GemmElement> {
    pub gemm: GemmPath,
    pub scratch: Option<&'a mut DeviceBuffer<T>>,
    pub split: Option<&'a mut SplitScratch>,
}

impl<T: GemmElement> Products<'_, T> {
    /// Temporaries per product, on `gemm`.
    pub fn temporaries(gemm: GemmPath) -> Self {
        Products { gemm, scratch: None, split: None }
    }
}

/// A weight `[out, in]` (row-major, like `nn.Linear`'s) on the device.
pub(crate) enum Linear<T: GemmElement> {
    /// Converted to `T` at load.
    Dense { w: DeviceBuffer<T>, out: usize, inp: usize },
    /// The file's blocks: `out` rows of `inp / block elements` blocks each.
    Blocks { format: BlockFormat, blocks: Arc<DeviceBuffer<u8>>, out: usize, inp: usize },
    /// MXFP4 or q8_0 in its tiled layout: rows `first..first + out` of `w`, which stacks this
    /// projection with the layer's others of the same input (Q, K and V; gate and up), or holds
    /// it alone.
    Tiled { w: TiledStack, first: usize, out: usize, inp: usize },
}

/// A stacked tiled weight ([`Linear::Tiled`]): tiled MXFP4 or tiled q8_0, shared by its parts.
#[derive(Clone)]
pub(crate) enum TiledStack {
    Mxfp4(Arc<DeviceTiledMxfp4>),
    Q8(Arc<DeviceTiledQ8>),
}

impl TiledStack {
    /// Most tokens a product runs on the tiled kernel; more dequantise and run the GEMM.
    pub fn max_tokens(&self) -> usize {
        match self {
            TiledStack::Mxfp4(_) => TILED_MAX_TOKENS,
            TiledStack::Q8(_) => Q8_TILED_MAX_TOKENS,
        }
    }

    /// The stacked rows.
    pub fn n(&self) -> usize {
        match self {
            TiledStack::Mxfp4(w) => w.n(),
            TiledStack::Q8(w) => w.n(),
        }
    }

    /// Whether both are the same weight.
    fn same(&self, other: &TiledStack) -> bool {
        match (self, other) {
            (TiledStack::Mxfp4(a), TiledStack::Mxfp4(b)) => Arc::ptr_eq(a, b),
            (TiledStack::Q8(a), TiledStack::Q8(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Device bytes of the first `rows` rows' tiles.
    fn rows_bytes(&self, rows: usize) -> usize {
        match self {
            TiledStack::Mxfp4(w) => w.rows_bytes(rows),
            TiledStack::Q8(w) => w.rows_bytes(rows),
        }
    }

    /// Rows `rows` times `tokens` rows of `x` into `y` (one part alone).
    fn rows_product<T: GemmElement>(
        &self,
        rows: std::ops::Range<usize>,
        x: &DeviceBuffer<T>,
        tokens: usize,
        y: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        match self {
            TiledStack::Mxfp4(w) => mx_matvec_tiled_rows(w, rows, x, tokens, y)?,
            TiledStack::Q8(w) => q8_0_matvec_tiled_rows(w, rows, x, tokens, y)?,
        }
        Ok(())
    }

    /// Every part times `tokens` rows of `x`, each into its output, in one launch.
    fn split<T: GemmElement>(
        &self,
        x: &DeviceBuffer<T>,
        tokens: usize,
        ys: &mut [&mut DeviceBuffer<T>],
    ) -> Result<()> {
        match self {
            TiledStack::Mxfp4(w) => mx_matvec_tiled_split(w, x, tokens, ys)?,
            TiledStack::Q8(w) => q8_0_matvec_tiled_split(w, x, tokens, ys, false)?,
        }
        Ok(())
    }

    /// Gate and up (the two halves) with their SwiGLU into `act`, in one launch.
    fn swiglu<T: GemmElement>(
        &self,
        x: &DeviceBuffer<T>,
        tokens: usize,
        act: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        match self {
            TiledStack::Mxfp4(w) => mx_matvec_tiled_swiglu(w, x, tokens, act)?,
            TiledStack::Q8(w) => q8_0_matvec_tiled_swiglu(w, x, tokens, act)?,
        }
        Ok(())
    }

    /// Rows `rows` dequantised into `out` (a prefill's GEMM operand).
    fn dequantize<T: GemmElement>(
        &self,
        rows: std::ops::Range<usize>,
        out: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        match self {
            TiledStack::Mxfp4(w) => dequantize_tiled(w, rows, out)?,
            TiledStack::Q8(w) => dequantize_tiled_q8(w, rows, out)?,
        }
        Ok(())
    }
}

impl<T: GemmElement> Linear<T> {
    /// Device bytes the weight occupies.
    pub fn device_bytes(&self) -> u64 {
        match self {
            Linear::Dense { w, .. } => (w.len() * size_of::<T>()) as u64,
            Linear::Blocks { blocks, .. } => blocks.len() as u64,
            // The part's tiles: every part but the last is whole tiles, so the parts add up.
            Linear::Tiled { w, out, .. } => w.rows_bytes(*out) as u64,
        }
    }

    /// The weight's rows (`out`).
    pub fn rows(&self) -> usize {
        match *self {
            Linear::Dense { out, .. } | Linear::Blocks { out, .. } | Linear::Tiled { out, .. } => out,
        }
    }

    /// Elements of `T` a product of `tokens` rows dequantises the weight into (0 when it runs
    /// a fused kernel, or the weight is dense).
    pub fn dequant_len(&self, tokens: usize) -> usize {
        match *self {
            Linear::Blocks { format, ref blocks, out, inp }
                if !has_fused_product::<T>(format, blocks, inp, tokens) =>
            {
                out * inp
            }
            Linear::Tiled { ref w, out, inp, .. } if tokens > w.max_tokens() => out * inp,
            _ => 0,
        }
    }

    /// Whether a product over `tokens` rows runs a GEMM over the whole weight (dense, or
    /// dequantised first), rather than a fused matrix-vector kernel.
    pub fn uses_gemm(&self, tokens: usize) -> bool {
        match *self {
            Linear::Dense { .. } => true,
            Linear::Blocks { format, ref blocks, inp, .. } => {
                !has_fused_product::<T>(format, blocks, inp, tokens)
            }
            Linear::Tiled { ref w, .. } => tokens > w.max_tokens(),
        }
    }

    /// `y = x W^T` for `tokens` rows of `x` (`[tokens, in]`); `y` is `[tokens, out]`, on the
    /// GEMM path and with the dequantisation scratch of `products`.
    pub fn apply_with(
        &self,
        x: &DeviceBuffer<T>,
        tokens: usize,
        y: &mut DeviceBuffer<T>,
        products: &mut Products<'_, T>,
    ) -> Result<()> {
        let path = products.gemm;
        match *self {
            Linear::Dense { ref w, out, inp } => {
                gemm_with(path, &GemmDesc::linear(tokens, out, inp), x, w, y)?;
            }
            Linear::Blocks { format, ref blocks, out, inp } => {
                if !fused_product(format, blocks, out, inp, x, tokens, y, products.split.as_deref_mut())?
                    && !mixed_input_product(format, blocks, out, inp, x, tokens, y, path)?
                {
                    match products.scratch.as_deref_mut() {
                        Some(w) => {
                            dequantize_into(format, blocks, w)?;
                            gemm_with(path, &GemmDesc::linear(tokens, out, inp), x, w, y)?;
                        }
                        None => dequant_gemm(format, blocks, out, inp, x, tokens, y, path, None)?,
                    }
                }
            }
            Linear::Tiled { ref w, first, out, inp } => {
                let rows = first..first + out;
                if tokens <= w.max_tokens() {
                    w.rows_product(rows, x, tokens, y)?;
                    return Ok(());
                }
                // The pass's scratch, or a temporary freed in stream order.
                let mut temporary = None;
                let dense = match products.scratch.as_deref_mut() {
                    Some(scratch) => scratch,
                    None => temporary.insert(y.stream().alloc::<T>(out * inp)?),
                };
                w.dequantize(rows, dense)?;
                gemm_with(path, &GemmDesc::linear(tokens, out, inp), x, dense, y)?;
            }
        }
        Ok(())
    }
}

/// Most tokens the tiled MXFP4 kernel takes (one launch on the matrix cores; the rows' fused
/// kernels stop at the same count); more dequantise from the tiles and run the GEMM.
const TILED_MAX_TOKENS: usize = MAX_TILED_BATCH;

/// Most tokens the tiled q8_0 kernel takes. Its several-vector loop (two vectors a pass of the
/// one-vector op's mmas, docs/kernels/q8_0_tiled.md, version 2) grows with the batch, while
/// dequantise + GEMM costs about the same at any count: H100, `bench model --iters 20`, a
/// Llama-3-8B layer, us (the tiled MXFP4 loop in the same call for comparison):
///
/// | tokens | q8_0 loop | q8_0 dequantise + GEMM | MXFP4 loop | MXFP4 dequantise + GEMM |
/// |---|---|---|---|---|
/// | 8 | 376.5 | 496.6-538.7 | 136.8 | 519.4-622.8 |
/// | 32 | 2363.8 | 490.4-543.9 | 449.2 | 543.5-611.1 |
const Q8_TILED_MAX_TOKENS: usize = 8;

/// The stacked tiled weight whose parts `linears` are, in order and all of it, where one launch
/// can run them at `tokens` (one projection: a tiled weight that holds it alone).
pub(crate) fn stacked_tiled<'a, T: GemmElement>(
    linears: &[&'a Linear<T>],
    tokens: usize,
) -> Option<&'a TiledStack> {
    let Some(Linear::Tiled { w: stack, .. }) = linears.first() else { return None };
    let mut next = 0;
    let whole = tokens <= stack.max_tokens()
        && linears.len() <= MAX_TILED_OUTPUTS
        && linears.iter().all(|l| match l {
            Linear::Tiled { w, first, out, .. } if w.same(stack) && *first == next => {
                next += out;
                true
            }
            _ => false,
        })
        && next == stack.n();
    whole.then_some(stack)
}

/// `ys[i] = x W_i^T` for projections sharing their input `x` (`tokens` rows; a layer's Q, K
/// and V, or its gate and up). One launch for all when they are blocks of one format with a
/// fused product at `tokens` (`quant_matvec_group` for ggml's, `mx_matvec_group` for MXFP4:
/// fewer launches, each output with the bits of its own launch; docs/kernels/quant_matvec.md,
/// v2, and docs/kernels/mxfp.md have what it saves); otherwise each
/// through [`Linear::apply_with`].
pub(crate) fn apply_shared<T: GemmElement>(
    linears: &[&Linear<T>],
    x: &DeviceBuffer<T>,
    tokens: usize,
    ys: &mut [&mut DeviceBuffer<T>],
    products: &mut Products<'_, T>,
) -> Result<()> {
    assert_eq!(linears.len(), ys.len(), "one output per projection");
    // One launch into outputs of exactly the parts' rows.
    let fits = linears.iter().zip(ys.iter()).all(|(l, y)| y.len() == l.rows() * tokens);
    if let Some(stack) = stacked_tiled(linears, tokens).filter(|_| fits) {
        stack.split(x, tokens, ys)?;
        return Ok(());
    }
    match shared_blocks(linears, tokens) {
        Some((format, inp, weights)) => {
            let mut group: Vec<QuantProduct<'_, T>> = weights
                .into_iter()
                .zip(ys.iter_mut())
                .map(|((w, rows), y)| QuantProduct { w, y: &mut **y, rows })
                .collect();
            let split = products.split.as_deref_mut();
            match format {
                FusedFormat::Ggml(g) => quant_matvec_group_in(g, &mut group, x, inp, tokens, split)?,
                FusedFormat::Mx(m) => mx_matvec_group_in(m, &mut group, x, inp, tokens, split)?,
            }
        }
        None => {
            for (linear, y) in linears.iter().zip(ys.iter_mut()) {
                linear.apply_with(x, tokens, y, products)?;
            }
        }
    }
    Ok(())
}

/// `act = silu(x Wgate^T) * (x Wup^T)` in one launch where a kernel takes both: the tiled
/// kernel's gate-and-up launch (`mx_matvec_tiled_swiglu`) for gate and up stacked in one tiled
/// weight, up to its most tokens; `quant_matvec_glu` where both weights are blocks of one ggml
/// format of the same shape and that kernel takes them at `tokens` (`quant_matvec_glu_fuses`: one
/// vector of q4_K on NVIDIA matrix cores). `Ok(false)`, nothing queued, otherwise. The bits are
/// those of the two products followed by `swiglu`.
pub(crate) fn apply_glu<T: GemmElement>(
    gate: &Linear<T>,
    up: &Linear<T>,
    x: &DeviceBuffer<T>,
    tokens: usize,
    act: &mut DeviceBuffer<T>,
) -> Result<bool> {
    if let Some(stack) = stacked_gate_up(gate, up, tokens) {
        stack.swiglu(x, tokens, act)?;
        return Ok(true);
    }
    let (
        Linear::Blocks { format, blocks: g, out, inp },
        Linear::Blocks { format: up_format, blocks: u, out: up_out, inp: up_inp },
    ) = (gate, up)
    else {
        return Ok(false);
    };
    let Some(ggml) = GgmlFormat::of(*format) else { return Ok(false) };
    if (format, out, inp) != (up_format, up_out, up_inp)
        || !quant_matvec_glu_fuses::<T>(act.stream(), ggml, *inp, tokens)
    {
        return Ok(false);
    }
    quant_matvec_glu(ggml, g, u, *out, x, *inp, act)?;
    Ok(true)
}

/// The tiled weight that stacks `gate` and then `up` and nothing else ([`stacked_tiled`]), both
/// of the same whole tiles, where its gate-and-up launch takes `tokens`.
pub(crate) fn stacked_gate_up<'a, T: GemmElement>(
    gate: &'a Linear<T>,
    up: &'a Linear<T>,
    tokens: usize,
) -> Option<&'a TiledStack> {
    let halves = gate.rows() == up.rows() && gate.rows().is_multiple_of(MXFP4_TILE_ROWS);
    stacked_tiled(&[gate, up], tokens).filter(|_| halves)
}

/// The block formats with a fused matrix-vector kernel, by the kernel family that runs them
/// (alone, or a product list in one launch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FusedFormat {
    /// ggml's (`quant_matvec`, `quant_matvec_group`).
    Ggml(GgmlFormat),
    /// MXFP4 (`mx_matvec_group`).
    Mx(MxFormat),
}

impl FusedFormat {
    /// The fused kernel family for `format`, if it has one.
    fn of(format: BlockFormat) -> Option<FusedFormat> {
        match (format, GgmlFormat::of(format)) {
            (_, Some(g)) => Some(FusedFormat::Ggml(g)),
            (BlockFormat::Mxfp4Gguf, None) => Some(FusedFormat::Mx(MxFormat::Mxfp4Gguf)),
            _ => None,
        }
    }

    /// The most tokens the family's fused product takes for a weight of `inp` columns on
    /// `stream`'s device in `T` ([`fused_max_tokens`]).
    fn max_tokens<T: GemmElement>(self, stream: &rocm_runtime::Stream, inp: usize) -> usize {
        fused_max_tokens(match self {
            FusedFormat::Ggml(g) => quant_matvec_on_matrix_cores::<T>(stream, g, inp),
            FusedFormat::Mx(m) => mx_matvec_group_on_matrix_cores::<T>(stream, m, inp),
        })
    }

    /// The fused kernel family for `format` when it takes `tokens` rows of `x` against `blocks`
    /// (`inp` columns).
    fn at<T: GemmElement>(
        format: BlockFormat,
        blocks: &DeviceBuffer<u8>,
        inp: usize,
        tokens: usize,
    ) -> Option<Self> {
        FusedFormat::of(format).filter(|f| tokens <= f.max_tokens::<T>(blocks.stream(), inp))
    }
}

/// The common format, input width and (blocks, rows) of `linears` when one grouped fused
/// launch can run them at `tokens`: 2 to [`MAX_PRODUCTS`] weights, all blocks of the same
/// format and width, with a fused product at `tokens`.
#[allow(clippy::type_complexity)]
fn shared_blocks<'a, T: GemmElement>(
    linears: &[&'a Linear<T>],
    tokens: usize,
) -> Option<(FusedFormat, usize, Vec<(&'a DeviceBuffer<u8>, usize)>)> {
    if !(2..=MAX_PRODUCTS).contains(&linears.len()) {
        return None;
    }
    let mut common = None;
    let mut weights = Vec::with_capacity(linears.len());
    for linear in linears {
        let Linear::Blocks { format, blocks, out, inp } = linear else { return None };
        let f = FusedFormat::at::<T>(*format, blocks, *inp, tokens)?;
        if *common.get_or_insert((f, *inp)) != (f, *inp) {
            return None;
        }
        weights.push((&**blocks, *out));
    }
    common.map(|(f, inp)| (f, inp, weights))
}

/// Whether [`fused_product`] runs a fused kernel for `format` at `tokens` against `blocks`
/// (`inp` columns).
fn has_fused_product<T: GemmElement>(
    format: BlockFormat,
    blocks: &DeviceBuffer<u8>,
    inp: usize,
    tokens: usize,
) -> bool {
    FusedFormat::at::<T>(format, blocks, inp, tokens).is_some()
}

/// Tokens up to which ggml's block formats take the fused matrix-vector kernel; past this the
/// weight is dequantised once into the step's scratch and the (vendor) GEMM runs on it. Chosen
/// when the fused kernel did every vector's FMAs on the SIMT units: measured on an H100 (`bench
/// model` at 8B layer shapes, one call each way), a decode step's layer took, fused /
/// dequantise + GEMM: Q8_0 428 / 562 us at 8 tokens and 1581 / 593 at 32; Q4_K 467 / 531 and
/// 1831 / 648. On the matrix cores (ggml's formats with 16-bit activations, NVIDIA) 8 tokens
/// cost 1.1-1.4 times one (H200, docs/kernels/quant_matvec.md v3) and 32 tokens take 4 passes
/// over the weight: with this at 32 (H200, 2026-12-02, one call), the 32-token layer took Q8_0
/// 409 us against 410 through the GEMM, Q4_K 361 against 397 (`bench quant_matvec`: q8_0 at 32
/// tokens 92 us, 3.4 times 8), too little to move the limit for one format. Where the matrix
/// cores take the product ([`FUSED_MAX_TOKENS_MATRIX_CORES`]) passes of 32 now read the weight
/// once for 32 tokens.
pub const FUSED_MAX_TOKENS: usize = 8;

/// Tokens up to which the fused kernel runs where the matrix cores take the product (NVIDIA
/// `mma.sync`, 16-bit activations: `quant_matvec_on_matrix_cores`,
/// `mx_matvec_group_on_matrix_cores`): `kernels/quant_matmul_mma.hip` reads the weight once for
/// up to 32 vectors (docs/kernels/quant_matvec.md, v7, has what a decode layer of 32 tokens
/// takes each way).
pub const FUSED_MAX_TOKENS_MATRIX_CORES: usize = 32;

/// The fused limit where the product does (`true`) or does not run on the matrix cores.
fn fused_max_tokens(matrix_cores: bool) -> usize {
    if matrix_cores { FUSED_MAX_TOKENS_MATRIX_CORES } else { FUSED_MAX_TOKENS }
}

/// Runs the fused quantised product where there is one for this format and token count, and
/// says whether it did: ggml's formats (`quant_matvec_group_in`) and MXFP4 (`mx_matvec_group_in`)
/// of one product, up to [`FUSED_MAX_TOKENS`] (or [`FUSED_MAX_TOKENS_MATRIX_CORES`]), with the
/// pass's split scratch.
#[allow(clippy::too_many_arguments)]
fn fused_product<T: GemmElement>(
    format: BlockFormat,
    blocks: &DeviceBuffer<u8>,
    out: usize,
    inp: usize,
    x: &DeviceBuffer<T>,
    tokens: usize,
    y: &mut DeviceBuffer<T>,
    split: Option<&mut SplitScratch>,
) -> Result<bool> {
    let Some(fused) = FusedFormat::at::<T>(format, blocks, inp, tokens) else { return Ok(false) };
    let product = &mut [QuantProduct { w: blocks, y, rows: out }];
    match fused {
        FusedFormat::Ggml(g) => quant_matvec_group_in(g, product, x, inp, tokens, split)?,
        FusedFormat::Mx(m) => mx_matvec_group_in(m, product, x, inp, tokens, split)?,
    }
    Ok(true)
}

/// Tokens up to which a block-format product past the fused kernels may run the mixed-input
/// GEMM (0: never). Measured on an H200 (`bench quant_gemm --iters 20`, one call, 2026-12-03;
/// docs/kernels/quant_gemm.md, v13), 14336 x 4096 in bf16, us, mixed-input against dequantise +
/// cuBLAS:
///
/// | tokens | q8_0 | q4_0 | q4_K | q5_K | q6_K | MXFP4 |
/// |---|---|---|---|---|---|---|
/// | 256 | 58.6 / 92.8 | 54.6 / 87.2 | 59.6 / 87.8 | 62.3 / 89.5 | 62.9 / 91.4 | 61.5 / 86.3 |
/// | 512 | 114.5 / 135.6 | 105.8 / 129.8 | 116.7 / 131.7 | 122.4 / 133.7 | 122.3 / 136.3 | 119.4 / 130.1 |
/// | 1024 | 218.5 / 197.8 | 201.2 / 191.7 | 222.9 / 194.2 | 233.6 / 195.7 | 232.1 / 199.7 | 227.1 / 189.3 |
///
/// Past that cuBLAS's GEMM outruns the decode's fixed cost (4096 tokens: 731-949 against
/// 611-643).
pub fn mixed_input_max_tokens(format: BlockFormat) -> usize {
    match format {
        BlockFormat::Q8_0
        | BlockFormat::Q4_0
        | BlockFormat::Q4K
        | BlockFormat::Q5K
        | BlockFormat::Q6K
        | BlockFormat::Mxfp4Gguf => 512,
        BlockFormat::Mxfp6(_) => 0,
    }
}

/// Whether the mixed-input GEMM's grid for `out` rows and `tokens` tokens suits it: at least 4/5
/// of the device's `sms` busy (a block a 128 x 256 tile, one an SM), and the last token tile at
/// least 3/4 full (a partial tile costs a whole one, while dequantise + GEMM pays by the token).
/// Measured on an H200 (132 SMs): the gate and up products at 512 tokens (224 blocks) and 256
/// (112) ran faster than dequantise + cuBLAS (the table of [`mixed_input_max_tokens`]), but with
/// every product of an 8B layer taking it -- Q, O and down at 64 blocks, K and V at 16 -- a
/// 512-token prefill layer took 728.0 us against 641.4 (q8_0) and 775.2 against 617.3 (q4_K).
/// The 3/4 is the table's interpolation: q8_0 at 384 tokens would still pay two tiles (~119 us)
/// where dequantise + cuBLAS takes ~114.
fn suits_the_grid(out: usize, tokens: usize, sms: usize) -> bool {
    let [token_tiles, row_tiles] = quant_gemm_grid(out, tokens);
    let last_tile = tokens.saturating_sub(token_tiles.saturating_sub(1) * QUANT_GEMM_TILE_TOKENS);
    5 * token_tiles * row_tiles >= 4 * sms && 4 * last_tile >= 3 * QUANT_GEMM_TILE_TOKENS
}

/// Runs the mixed-input GEMM where it is the faster path for this format and token count, and
/// says whether it did: on the default GEMM path ([`GemmPath::Auto`]; an explicit vendor or
/// portable GEMM is honoured), up to [`mixed_input_max_tokens`], with a grid that suits it
/// ([`suits_the_grid`]), where `quant_gemm_runs` says the device and width allow it (Hopper,
/// 16-bit `T`), and not while the stream records a graph.
#[allow(clippy::too_many_arguments)]
fn mixed_input_product<T: GemmElement>(
    format: BlockFormat,
    blocks: &DeviceBuffer<u8>,
    out: usize,
    inp: usize,
    x: &DeviceBuffer<T>,
    tokens: usize,
    y: &mut DeviceBuffer<T>,
    path: GemmPath,
) -> Result<bool> {
    // (Not while the stream records a graph, which would refuse its temporary, x's tiles.)
    if path != GemmPath::Auto
        || y.stream().is_capturing()
        || tokens > mixed_input_max_tokens(format)
        || !suits_the_grid(out, tokens, y.stream().backend().info().compute_units as usize)
        || quant_gemm_runs::<T>(y.stream(), format, inp).is_some()
    {
        return Ok(false);
    }
    quant_gemm(format, blocks, out, inp, x, tokens, y)?;
    Ok(true)
}

/// `y[t, j] += bias[j]` for `tokens` rows of `y` (`[tokens, out]`, `out` = `bias.len()`), with
/// `ones` holding at least `tokens` ones. There is no broadcast-add kernel; the GEMM's rank-1
/// update does it exactly: `y = 1 * ones[tokens, 1] bias[1, out] + 1 * y`, each element
/// `bias[j] + y[t, j]` summed in f32 and rounded once to `T` (the same as an add kernel), on
/// whichever path the GEMM takes.
pub(crate) fn add_bias<T: GemmElement>(
    y: &mut DeviceBuffer<T>,
    bias: &DeviceBuffer<T>,
    ones: &DeviceBuffer<T>,
    tokens: usize,
    gemm: GemmPath,
) -> Result<()> {
    gemm_with(gemm, &bias_desc(tokens, bias.len()), ones, bias, y)?;
    Ok(())
}

/// The product [`add_bias`] runs: `[tokens, 1] x [out, 1]^T`, accumulating into `C`.
fn bias_desc(tokens: usize, out: usize) -> GemmDesc {
    GemmDesc::linear(tokens, out, 1).with_alpha_beta(1.0, 1.0)
}

#[cfg(test)]
mod tests {
    use rocm_kernels::gemm::gemm_reference;

    use rocm_kernels::quant::BlockFormat;

    use super::{
        FUSED_MAX_TOKENS, FUSED_MAX_TOKENS_MATRIX_CORES, FusedFormat, bias_desc, fused_max_tokens,
        mixed_input_max_tokens, suits_the_grid,
    };

    /// Where prefill takes the mixed-input GEMM at 8B shapes on a 132-SM device: the gate and up
    /// products (14336 rows) with full or nearly full 256-token tiles, never the 4096-row (Q, O,
    /// down) or 1024-row (K, V) products, whose grids leave SMs idle.
    #[test]
    fn the_mixed_input_gemm_takes_the_products_that_fill_the_device() {
        let sms = 132;
        for tokens in [192, 256, 448, 512] {
            assert!(suits_the_grid(14336, tokens, sms), "gate at {tokens} tokens");
            assert!(!suits_the_grid(4096, tokens, sms) && !suits_the_grid(1024, tokens, sms), "{tokens}");
        }
        // A partial last tile under 3/4 full: 300 and 384 tokens pay two tiles.
        for tokens in [0, 1, 100, 300, 384] {
            assert!(!suits_the_grid(14336, tokens, sms), "gate at {tokens} tokens");
        }
        assert_eq!(mixed_input_max_tokens(BlockFormat::Q8_0), 512);
        assert_eq!(mixed_input_max_tokens(BlockFormat::Q6K), 512);
        assert_eq!(mixed_input_max_tokens(BlockFormat::Mxfp6(rocm_kernels::quant::Fp6::E2M3)), 0);
    }

    /// What a decode workspace sizes its dequantisation scratch by: ggml's formats and MXFP4
    /// fused up to 8 tokens, or 32 on the matrix cores; MXFP6 never.
    #[test]
    fn fused_products_cover_the_documented_token_counts() {
        for format in BlockFormat::GGUF {
            assert!(FusedFormat::of(format).is_some(), "{format:?}");
        }
        assert!(FusedFormat::of(BlockFormat::Mxfp6(rocm_kernels::quant::Fp6::E2M3)).is_none());
        assert_eq!(fused_max_tokens(false), FUSED_MAX_TOKENS);
        assert_eq!(fused_max_tokens(true), FUSED_MAX_TOKENS_MATRIX_CORES);
        assert_eq!((FUSED_MAX_TOKENS, FUSED_MAX_TOKENS_MATRIX_CORES), (8, 32));
    }

    /// The rank-1 product adds `bias` to every row, as the GEMMs' reference (which follows the
    /// descriptor's layout and leading dimensions like both GPU paths) computes it.
    #[test]
    fn the_bias_product_adds_the_bias_to_every_row() {
        let (tokens, out) = (3, 5);
        let ones = vec![1.0f32; tokens + 2]; // a longer ones buffer is fine: only `tokens` are read
        let bias: Vec<f32> = (0..out).map(|j| j as f32 - 1.5).collect();
        let y: Vec<f32> = (0..tokens * out).map(|i| (i * i) as f32 * 0.25).collect();
        let got = gemm_reference(&bias_desc(tokens, out), &ones, &bias, &y).unwrap();
        for (i, g) in got.iter().enumerate() {
            assert_eq!(*g, (y[i] + bias[i % out]) as f64, "element {i}");
        }
    }
}
