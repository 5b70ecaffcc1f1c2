//! One decoder layer's weights on the GPU ([`LayerWeights`]) and the parts of its pass that
//! differ between architectures: the QKV projections with their biases, the post-norms, and the
//! MLP with separate or stacked gate/up projections; and, where the layer is tiled MXFP4, the
//! same with its norms and residual adds folded into the products ([`Folded`]). `forward.rs`
//! runs the rest (norms with their residual adds, RoPE, the KV cache, attention).

use std::sync::Arc;

use rocm_kernels::gemm::GemmElement;
use rocm_kernels::quant::{
    DeviceTiledMxfp4, DeviceTiledQ4k, DeviceTiledQ8, MXFP4_TILE_ROWS, TiledMxfp4, TiledNorm, TiledOutput,
    TiledQ4k, TiledQ8, mx_matvec_tiled_fused, q4k_matvec_tiled_fused, q4k_tiled_on_matrix_cores,
    q8_0_matvec_tiled_fused, q8_0_tiled_on_matrix_cores,
};
use rocm_kernels::rmsnorm::RmsNorm;
use rocm_kernels::swiglu::{swiglu, swiglu_fused};
use rocm_runtime::{DeviceBuffer, Stream};

use super::config::ModelConfig;
use super::error::Result;
use super::linear::{
    Linear, Products, TiledStack, add_bias, apply_glu, apply_shared, stacked_gate_up, stacked_tiled,
};
use super::options::{LoadOptions, Mxfp4Layout, Q4kLayout, Q8Layout};
use super::weights::{Block, LayerTensor, load_device, load_linear, tensor_name};
use crate::gguf::GgmlType;
use crate::lazy::DeviceTensors;

/// A layer's weights: vectors (norm weights, biases) in `T`, projections (`[out, in]`) as the
/// file stores them; only the tensors the file has for its architecture
/// ([`super::weights::layer_tensors`]).
pub(super) struct LayerWeights<T: GemmElement> {
    vectors: Vec<(LayerTensor, DeviceBuffer<T>)>,
    matrices: Projections<T>,
    /// [`Q4kLayout::TiledCopy`]'s or [`Q8Layout::TiledCopy`]'s copy, where the layer and the
    /// device allow it.
    tiled_copy: Option<TiledCopy>,
}

/// A layer's projections, by tensor.
type Projections<T> = Vec<(LayerTensor, Linear<T>)>;

impl<T: GemmElement> LayerWeights<T> {
    /// Uploads `present`, the checked tensors of layer `layer`, MXFP4 and q8_0 projections in the
    /// layouts `options` asks for.
    pub fn load(
        tensors: &DeviceTensors,
        config: &ModelConfig,
        layer: usize,
        present: &[LayerTensor],
        options: LoadOptions,
    ) -> Result<Self> {
        let (mut vectors, mut matrices) = (Vec::new(), Vec::new());
        let mut tiled = Vec::new();
        if options.mxfp4 == Mxfp4Layout::Tiled || options.q8_0 == Q8Layout::Tiled {
            // Q, K and V stacked, gate and up stacked (one launch each), every other projection
            // alone.
            let mut groups: Vec<Vec<LayerTensor>> = STACKED.iter().map(|g| g.to_vec()).collect();
            groups.extend(present.iter().filter(|t| t.is_matrix()).map(|&t| vec![t]));
            for group in groups {
                if group.iter().any(|t| !present.contains(t) || tiled.contains(t)) {
                    continue;
                }
                if let Some(parts) = load_tiled(tensors, config, layer, &group, options)? {
                    matrices.extend(parts);
                    tiled.extend(group);
                }
            }
        }
        for &t in present.iter().filter(|t| !tiled.contains(t)) {
            let name = tensor_name(layer, t);
            if t.is_matrix() {
                let (out, inp) = t.out_in(config);
                matrices.push((t, load_linear(tensors, &name, out, inp)?));
            } else {
                vectors.push((t, load_device(tensors, &name)?));
            }
        }
        let stream = tensors.stream();
        let q4k = options.q4k == Q4kLayout::TiledCopy && q4k_tiled_on_matrix_cores::<T>(stream);
        let q8 = options.q8_0 == Q8Layout::TiledCopy && q8_0_tiled_on_matrix_cores::<T>(stream);
        let tiled_copy = match copy_type(tensors, config, layer, present) {
            Some(GgmlType::Q4_K) if q4k => Some(TiledCopy::Q4k(load_copy(
                tensors,
                config,
                layer,
                |w, n, k| Ok(TiledQ4k::from_gguf(w, n, k)?),
                |parts| Ok(TiledQ4k::stack(parts)?.upload(stream)?),
            )?)),
            Some(GgmlType::Q8_0) if q8 => Some(TiledCopy::Q8(load_copy(
                tensors,
                config,
                layer,
                |w, n, k| Ok(TiledQ8::from_gguf(w, n, k)?),
                |parts| Ok(TiledQ8::stack(parts)?.upload(stream)?),
            )?)),
            _ => None,
        };
        Ok(LayerWeights { vectors, matrices, tiled_copy })
    }

    /// A projection the layer has (checked at load).
    pub fn linear(&self, t: LayerTensor) -> &Linear<T> {
        self.maybe_linear(t).expect("a projection checked at load")
    }

    /// A projection, if the layer has it.
    fn maybe_linear(&self, t: LayerTensor) -> Option<&Linear<T>> {
        self.matrices.iter().find(|(x, _)| *x == t).map(|(_, w)| w)
    }

    /// The tiled weights of a pass of `tokens` that folds this layer's norms and residual adds
    /// into its products ([`Folded`]): one token, Q, K and V stacked in one tiled weight and gate
    /// and up in another, O and down each tiled alone, and no post-norms (glm4's normalise a
    /// block's output before it joins the stream, so it cannot join it in the product's store).
    pub fn folded(&self, tokens: usize) -> Option<Folded<'_>> {
        let post_norms = [LayerTensor::AttnPostNorm, LayerTensor::FfnPostNorm];
        if tokens != 1 || post_norms.iter().any(|&t| self.vector(t).is_some()) {
            return None;
        }
        match &self.tiled_copy {
            Some(TiledCopy::Q4k(c)) => return Some(c.folded(TiledWeight::Q4k)),
            Some(TiledCopy::Q8(c)) => return Some(c.folded(TiledWeight::Q8)),
            None => {}
        }
        let linear = |t| self.maybe_linear(t);
        let (q, k, v) =
            (linear(LayerTensor::AttnQ)?, linear(LayerTensor::AttnK)?, linear(LayerTensor::AttnV)?);
        Some(Folded {
            qkv: TiledWeight::of(stacked_tiled(&[q, k, v], tokens)?),
            o: TiledWeight::of(stacked_tiled(&[linear(LayerTensor::AttnOutput)?], tokens)?),
            gate_up: TiledWeight::of(stacked_gate_up(
                linear(LayerTensor::FfnGate)?,
                linear(LayerTensor::FfnUp)?,
                tokens,
            )?),
            down: TiledWeight::of(stacked_tiled(&[linear(LayerTensor::FfnDown)?], tokens)?),
        })
    }

    /// A norm weight or bias, if the layer has it.
    pub fn vector(&self, t: LayerTensor) -> Option<&DeviceBuffer<T>> {
        self.vectors.iter().find(|(x, _)| *x == t).map(|(_, w)| w)
    }

    /// A norm weight every layer of the architecture has (checked at load).
    pub fn norm(&self, t: LayerTensor) -> &DeviceBuffer<T> {
        self.vector(t).expect("a norm weight checked at load")
    }

    pub fn has_biases(&self) -> bool {
        self.vector(LayerTensor::AttnQBias).is_some()
    }

    pub fn device_bytes(&self) -> u64 {
        self.read_bytes() + self.tiled_copy.as_ref().map_or(0, TiledCopy::device_bytes)
    }

    /// The weight bytes one pass reads: the device bytes less the tiled copy, since a pass
    /// reads either the rows or the copy (the same bytes, the copy's padding aside), never both.
    pub fn read_bytes(&self) -> u64 {
        let vectors: usize = self.vectors.iter().map(|(_, v)| v.len() * size_of::<T>()).sum();
        vectors as u64 + self.matrices.iter().map(|(_, w)| w.device_bytes()).sum::<u64>()
    }

    /// The projections, for sizing what their products need.
    pub fn linears(&self) -> impl Iterator<Item = &Linear<T>> {
        self.matrices.iter().map(|(_, w)| w)
    }

    /// `q, k, v = x Wq^T, x Wk^T, x Wv^T` (each `+ bias` where the layer has them): one launch
    /// for the three where their blocks allow it ([`apply_shared`]).
    #[allow(clippy::too_many_arguments)]
    pub fn project_qkv(
        &self,
        x: &DeviceBuffer<T>,
        tokens: usize,
        ones: Option<&DeviceBuffer<T>>,
        q: &mut DeviceBuffer<T>,
        k: &mut DeviceBuffer<T>,
        v: &mut DeviceBuffer<T>,
        products: &mut Products<'_, T>,
    ) -> Result<()> {
        let weights = [LayerTensor::AttnQ, LayerTensor::AttnK, LayerTensor::AttnV].map(|t| self.linear(t));
        apply_shared(&weights, x, tokens, &mut [&mut *q, &mut *k, &mut *v], products)?;
        self.add_qkv_biases(tokens, ones, [q, k, v], products)
    }

    /// Q, K and V's biases, where the layer has them, added to their products.
    fn add_qkv_biases(
        &self,
        tokens: usize,
        ones: Option<&DeviceBuffer<T>>,
        qkv: [&mut DeviceBuffer<T>; 3],
        products: &Products<'_, T>,
    ) -> Result<()> {
        let biases = [LayerTensor::AttnQBias, LayerTensor::AttnKBias, LayerTensor::AttnVBias];
        for (bias, y) in biases.into_iter().zip(qkv) {
            if let (Some(b), Some(ones)) = (self.vector(bias), ones) {
                add_bias(y, b, ones, tokens, products.gemm)?;
            }
        }
        Ok(())
    }

    /// [`LayerWeights::project_qkv`] of one token with the layer's attention norm folded in: the
    /// products of `rmsnorm(h, attn_norm)` in one launch, which normalises `h` (the residual
    /// stream, every block's output already added) as it stages it.
    #[allow(clippy::too_many_arguments)]
    pub fn project_qkv_folded(
        &self,
        folded: &Folded<'_>,
        h: &DeviceBuffer<T>,
        eps: f32,
        ones: Option<&DeviceBuffer<T>>,
        q: &mut DeviceBuffer<T>,
        k: &mut DeviceBuffer<T>,
        v: &mut DeviceBuffer<T>,
        products: &mut Products<'_, T>,
    ) -> Result<()> {
        let norm = TiledNorm { weight: self.norm(LayerTensor::AttnNorm), eps };
        let outputs = TiledOutput::Split(&mut [&mut *q, &mut *k, &mut *v]);
        folded.qkv.fused(h, Some(norm), outputs)?;
        self.add_qkv_biases(1, ones, [q, k, v], products)
    }

    /// A block's output projection of one token added to the residual stream `h` in its own
    /// launch (what the next norm's residual form would do), where the pass folds the norms.
    pub fn block_output_folded(
        &self,
        folded: &Folded<'_>,
        block: Block,
        x: &DeviceBuffer<T>,
        h: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        let w = match block {
            Block::Attention => folded.o,
            Block::Mlp => folded.down,
        };
        w.fused(x, None, TiledOutput::Add(h))?;
        Ok(())
    }

    /// `act = silu(gate) * up` of `rmsnorm(h, ffn_norm)` for one token in one launch: the gate
    /// and up products with the norm folded in and the activation in their store.
    pub fn mlp_activation_folded(
        &self,
        folded: &Folded<'_>,
        h: &DeviceBuffer<T>,
        eps: f32,
        act: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        let norm = TiledNorm { weight: self.norm(LayerTensor::FfnNorm), eps };
        folded.gate_up.fused(h, Some(norm), TiledOutput::Swiglu(act))?;
        Ok(())
    }

    /// `delta = x W^T` for the block's output projection, then its post-norm when the layer
    /// has one (glm4): `delta = rmsnorm(delta) * post`, through `spare`.
    #[allow(clippy::too_many_arguments)]
    pub fn block_output(
        &self,
        block: Block,
        norm: &RmsNorm,
        x: &DeviceBuffer<T>,
        tokens: usize,
        delta: &mut DeviceBuffer<T>,
        spare: &mut Option<DeviceBuffer<T>>,
        products: &mut Products<'_, T>,
    ) -> Result<()> {
        let (t, post) = block.output_and_post_norm();
        self.linear(t).apply_with(x, tokens, delta, products)?;
        if let (Some(weight), Some(out)) = (self.vector(post), spare.as_mut()) {
            norm.run(delta, weight, out)?;
            std::mem::swap(delta, out);
        }
        Ok(())
    }

    /// `act = silu(gate) * up` of `xn`: separate `ffn_gate` and `ffn_up`, or glm4's stacked
    /// `ffn_up` (each output row `[gate | up]`, in `mlp.gate`).
    pub fn mlp_activation(
        &self,
        xn: &DeviceBuffer<T>,
        tokens: usize,
        ffn: usize,
        mlp: &mut Mlp<T>,
        products: &mut Products<'_, T>,
    ) -> Result<()> {
        match &mut mlp.up {
            Some(up) => {
                let weights = [LayerTensor::FfnGate, LayerTensor::FfnUp].map(|t| self.linear(t));
                // One launch for the products and the activation where a kernel takes them.
                if apply_glu(weights[0], weights[1], xn, tokens, &mut mlp.act)? {
                    return Ok(());
                }
                apply_shared(&weights, xn, tokens, &mut [&mut mlp.gate, &mut *up], products)?;
                swiglu(&mlp.gate, up, &mut mlp.act)?;
            }
            None => {
                self.linear(LayerTensor::FfnUp).apply_with(xn, tokens, &mut mlp.gate, products)?;
                swiglu_fused(&mlp.gate, &mut mlp.act, tokens, ffn)?;
            }
        }
        Ok(())
    }
}

/// A layer's tiled weights where a one-token pass folds its norms and residual adds into the
/// products ([`LayerWeights::folded`]): Q, K and V, and gate and up, each normalise the residual
/// stream as they stage it (the tiled kernel's normed launch), and O and down each add their
/// output to the stream as they store it (its residual launch). Two launches fewer a layer than
/// the norms' own (docs/model.md, "The norms folded into the tiled products").
pub(super) struct Folded<'a> {
    qkv: TiledWeight<'a>,
    o: TiledWeight<'a>,
    gate_up: TiledWeight<'a>,
    down: TiledWeight<'a>,
}

/// A folded pass's weight: tiled MXFP4 (the projections themselves) or a tiled q4_K or q8_0
/// copy.
#[derive(Clone, Copy)]
enum TiledWeight<'a> {
    Mxfp4(&'a DeviceTiledMxfp4),
    Q4k(&'a DeviceTiledQ4k),
    Q8(&'a DeviceTiledQ8),
}

impl<'a> TiledWeight<'a> {
    /// A layer's own tiled weight (MXFP4 or q8_0).
    fn of(stack: &'a TiledStack) -> Self {
        match stack {
            TiledStack::Mxfp4(w) => TiledWeight::Mxfp4(w),
            TiledStack::Q8(w) => TiledWeight::Q8(w),
        }
    }

    /// One token `x` through `norm` first where given, into `out`.
    fn fused<T: GemmElement>(
        self,
        x: &DeviceBuffer<T>,
        norm: Option<TiledNorm<'_, T>>,
        out: TiledOutput<'_, '_, T>,
    ) -> Result<()> {
        match self {
            TiledWeight::Mxfp4(w) => mx_matvec_tiled_fused(w, x, 1, norm, out, false)?,
            TiledWeight::Q4k(w) => q4k_matvec_tiled_fused(w, x, norm, out)?,
            TiledWeight::Q8(w) => q8_0_matvec_tiled_fused(w, x, norm, out)?,
        }
        Ok(())
    }
}

/// A layer's q4_K or q8_0 projections copied into their tiled layout ([`Q4kLayout::TiledCopy`],
/// [`Q8Layout::TiledCopy`]).
enum TiledCopy {
    Q4k(CopyWeights<DeviceTiledQ4k>),
    Q8(CopyWeights<DeviceTiledQ8>),
}

impl TiledCopy {
    fn device_bytes(&self) -> u64 {
        match self {
            TiledCopy::Q4k(c) => c.bytes(DeviceTiledQ4k::bytes),
            TiledCopy::Q8(c) => c.bytes(DeviceTiledQ8::bytes),
        }
    }
}

/// A tiled copy's four weights: Q, K and V stacked, O, gate and up stacked, down.
struct CopyWeights<W> {
    qkv: W,
    o: W,
    gate_up: W,
    down: W,
}

impl<W> CopyWeights<W> {
    fn bytes(&self, of: impl Fn(&W) -> usize) -> u64 {
        [&self.qkv, &self.o, &self.gate_up, &self.down].into_iter().map(|w| of(w) as u64).sum()
    }

    /// The folded pass over the copy, each weight as `tiled` names it.
    fn folded<'a>(&'a self, tiled: impl Fn(&'a W) -> TiledWeight<'a>) -> Folded<'a> {
        Folded {
            qkv: tiled(&self.qkv),
            o: tiled(&self.o),
            gate_up: tiled(&self.gate_up),
            down: tiled(&self.down),
        }
    }
}

/// The projections a tiled copy holds.
const COPIED: [LayerTensor; 7] = {
    use LayerTensor::*;
    [AttnQ, AttnK, AttnV, AttnOutput, FfnGate, FfnUp, FfnDown]
};

/// The type of layer `layer`'s projections where a tiled copy can hold them: Q, K, V, O, gate,
/// up and down all present and of one type, Q, K and gate whole tiles, and no post-norms (a
/// folded pass needs none); `None` otherwise.
fn copy_type(
    tensors: &DeviceTensors,
    config: &ModelConfig,
    layer: usize,
    present: &[LayerTensor],
) -> Option<GgmlType> {
    use LayerTensor::*;
    let file = tensors.file();
    let ty = |t: LayerTensor| {
        present
            .contains(&t)
            .then(|| file.tensor(&tensor_name(layer, t)).ok().map(|info| info.ggml_type()))
            .flatten()
    };
    let first = ty(AttnQ)?;
    let whole = [AttnQ, AttnK, FfnGate].iter().all(|t| t.out_in(config).0.is_multiple_of(MXFP4_TILE_ROWS));
    let post_norms = present.iter().any(|t| matches!(t, AttnPostNorm | FfnPostNorm));
    (COPIED.iter().all(|&t| ty(t) == Some(first)) && whole && !post_norms).then_some(first)
}

/// Layer `layer`'s tiled copy ([`copy_type`] says it can hold the layer): each projection
/// re-laid out by `tile` (GGUF bytes, n, k), each group stacked and uploaded by `stack`.
fn load_copy<H, W>(
    tensors: &DeviceTensors,
    config: &ModelConfig,
    layer: usize,
    tile: impl Fn(&[u8], usize, usize) -> Result<H>,
    stack: impl Fn(&[&H]) -> Result<W>,
) -> Result<CopyWeights<W>> {
    use LayerTensor::*;
    let file = tensors.file();
    let stacked = |group: &[LayerTensor]| -> Result<W> {
        let parts = group
            .iter()
            .map(|&t| {
                let (out, inp) = t.out_in(config);
                tile(file.bytes(&tensor_name(layer, t))?, out, inp)
            })
            .collect::<Result<Vec<_>>>()?;
        stack(&parts.iter().collect::<Vec<_>>())
    };
    Ok(CopyWeights {
        qkv: stacked(&[AttnQ, AttnK, AttnV])?,
        o: stacked(&[AttnOutput])?,
        gate_up: stacked(&[FfnGate, FfnUp])?,
        down: stacked(&[FfnDown])?,
    })
}

/// The projections the tiled layouts stack into one weight where they are all MXFP4 (or all
/// q8_0) of one input width: their products share their input, so one launch runs them.
const STACKED: [&[LayerTensor]; 2] = [
    &[LayerTensor::AttnQ, LayerTensor::AttnK, LayerTensor::AttnV],
    &[LayerTensor::FfnGate, LayerTensor::FfnUp],
];

/// `group`'s projections of layer `layer` re-laid out from the file's MXFP4 (or q8_0) rows into
/// one stacked tiled weight on the device, one [`Linear::Tiled`] a part, where `options` asks for
/// that layout; `None` (nothing uploaded) unless every one is of that type and the same input
/// width (q8_0's a multiple of 256) and every part but the last whole tiles.
fn load_tiled<T: GemmElement>(
    tensors: &DeviceTensors,
    config: &ModelConfig,
    layer: usize,
    group: &[LayerTensor],
    options: LoadOptions,
) -> Result<Option<Projections<T>>> {
    let file = tensors.file();
    let shapes: Vec<(usize, usize)> = group.iter().map(|t| t.out_in(config)).collect();
    let inp = shapes[0].1;
    let ty = |t: LayerTensor| file.tensor(&tensor_name(layer, t)).ok().map(|info| info.ggml_type());
    let layout = match ty(group[0]) {
        Some(GgmlType::MXFP4) if options.mxfp4 == Mxfp4Layout::Tiled => GgmlType::MXFP4,
        Some(GgmlType::Q8_0) if options.q8_0 == Q8Layout::Tiled && inp.is_multiple_of(Q8_TILED_K) => {
            GgmlType::Q8_0
        }
        _ => return Ok(None),
    };
    let fits = group.iter().zip(&shapes).enumerate().all(|(i, (&t, &(out, width)))| {
        ty(t) == Some(layout) && width == inp && (i + 1 == group.len() || out.is_multiple_of(MXFP4_TILE_ROWS))
    });
    if !fits {
        return Ok(None);
    }
    let bytes = |t: LayerTensor| file.bytes(&tensor_name(layer, t));
    let stacked = match layout {
        GgmlType::MXFP4 => {
            let parts = group
                .iter()
                .zip(&shapes)
                .map(|(&t, &(out, inp))| Ok(TiledMxfp4::from_gguf(bytes(t)?, out, inp)?))
                .collect::<Result<Vec<_>>>()?;
            TiledStack::Mxfp4(Arc::new(
                TiledMxfp4::stack(&parts.iter().collect::<Vec<_>>())?.upload(tensors.stream())?,
            ))
        }
        _ => {
            let parts = group
                .iter()
                .zip(&shapes)
                .map(|(&t, &(out, inp))| Ok(TiledQ8::from_gguf(bytes(t)?, out, inp)?))
                .collect::<Result<Vec<_>>>()?;
            TiledStack::Q8(Arc::new(
                TiledQ8::stack(&parts.iter().collect::<Vec<_>>())?.upload(tensors.stream())?,
            ))
        }
    };
    let mut first = 0;
    Ok(Some(
        group
            .iter()
            .zip(shapes)
            .map(|(&t, (out, inp))| {
                let linear = Linear::Tiled { w: stacked.clone(), first, out, inp };
                first += out;
                (t, linear)
            })
            .collect(),
    ))
}

/// The input widths the tiled q8_0 layout takes: whole groups of 8 blocks.
const Q8_TILED_K: usize = 256;

/// The MLP's activations of one step.
pub(super) struct Mlp<T: GemmElement> {
    /// `[tokens, ffn]`, or `[tokens, 2 * ffn]` (`[gate | up]` rows) when gate and up are stacked.
    gate: DeviceBuffer<T>,
    /// `[tokens, ffn]`; none when gate and up are stacked.
    up: Option<DeviceBuffer<T>>,
    /// `[tokens, ffn]`: the down projection's input.
    pub act: DeviceBuffer<T>,
}

impl<T: GemmElement> Mlp<T> {
    pub fn new(stream: &Stream, config: &ModelConfig, tokens: usize) -> Result<Self> {
        let width = tokens * config.ffn;
        Ok(if config.architecture.fused_gate_up() {
            Mlp { gate: stream.alloc(2 * width)?, up: None, act: stream.alloc(width)? }
        } else {
            Mlp { gate: stream.alloc(width)?, up: Some(stream.alloc(width)?), act: stream.alloc(width)? }
        })
    }
}
