//! `bench model`'s read-only ceilings of a decode layer's weight stream: what a layer would cost
//! if its products did nothing but read their weights, in the launches the decode step makes
//! and in one launch.
//!
//! A batch-1 decode step of block-format weights reads each layer's weights once, as four
//! products (Q, K and V grouped; O; gate and up grouped; down), each its own launch.
//! `stream_read` over exactly those bytes, recorded in a graph for [`LAYERS`] layers (each
//! layer's weights in their own buffers, so the L2 holds none of the next one's), gives:
//!
//! - `read layer, 4 launches (graph)`: a launch a product, as the step makes them;
//! - `read layer, 4 dependent launches (graph)`: the same as dependent launches
//!   (`stream_read_dependent`: each launch's first loads before its wait for the one ahead, as
//!   the products issue their first weight copies), which the decode step's products are;
//! - `read layer, 1 launch (graph)`: the layer's weights in one buffer, one launch, as a
//!   persistent layer kernel would stream them;
//! - `read layer, 1 launch, 4 stages ... (graph)`: all [`LAYERS`] layers in one cooperative
//!   launch (`stream_read_staged`), each product's bytes a stage consumed only after a grid
//!   barrier (where a persistent layer kernel waits for the product before), with dependent
//!   loads on 8 blocks between stages standing in for the latency-bound work there (attention,
//!   the norms), from the DRAM or the L2, and the blocks' copies running on past the gates
//!   (the next product's weights need nothing of this one) or waiting at them, the 8 blocks'
//!   SMs copying weights or not.
//!
//! Each row is one graph launch over [`LAYERS`] layers divided by them. The dependent row is the
//! fastest a chain of product kernels launched one a product, as ours are, can be; issue 21's
//! target for the whole layer (1.25 x the layer's bytes over the copy bandwidth) is the row's
//! "of copy" at 0.8.

use rocm_kernels::stream_read::{
    StagedScratch, staged_chase_table, stream_read, stream_read_dependent, stream_read_reference,
    stream_read_staged,
};
use rocm_model::GgmlType;
use rocm_model::model::{LayerTensor, ModelConfig};
use rocm_runtime::DeviceBuffer;

use super::{Bench, Row};
use crate::Result;

/// Layers a graph reads: every launch's weights come from the DRAM (4 layers of even the
/// smallest format are ~460 MB against an L2 of tens of MB).
const LAYERS: usize = 4;

/// The bytes of a layer's four products in `ty` (Q, K and V; O; gate and up; down), as the
/// model's launches read them: the layer's own tensor shapes ([`LayerTensor::dims`]).
pub fn product_bytes(ty: GgmlType, c: &ModelConfig) -> [u64; 4] {
    use LayerTensor::{AttnK, AttnOutput, AttnQ, AttnV, FfnDown, FfnGate, FfnUp};
    let bytes = |tensors: &[LayerTensor]| -> u64 {
        tensors.iter().map(|t| t.dims(c).iter().product::<u64>() / ty.block_size() * ty.type_size()).sum()
    };
    [bytes(&[AttnQ, AttnK, AttnV]), bytes(&[AttnOutput]), bytes(&[FfnGate, FfnUp]), bytes(&[FfnDown])]
}

/// The three rows for `ty` (the module's doc).
pub fn rows(b: &mut Bench, ty: GgmlType, config: &ModelConfig) -> Result<Vec<Row>> {
    let products = product_bytes(ty, config);
    let layer: u64 = products.iter().sum();
    // Random bytes (some memory systems compress uniform data), made once on the host.
    let host = b.random_bytes(layer as usize);
    let upload = |len: u64| -> Result<DeviceBuffer<u8>> { Ok(b.stream.upload(&host[..len as usize])?) };
    let per_product: Vec<Vec<DeviceBuffer<u8>>> =
        (0..LAYERS).map(|_| products.iter().map(|&n| upload(n)).collect()).collect::<Result<_>>()?;
    let whole: Vec<DeviceBuffer<u8>> = (0..LAYERS).map(|_| upload(layer)).collect::<Result<_>>()?;
    let launches_per_product: Vec<&DeviceBuffer<u8>> = per_product.iter().flatten().collect();
    let launches_whole: Vec<&DeviceBuffer<u8>> = whole.iter().collect();
    let mut rows = Vec::new();
    for (kernel, launches, dependent) in [
        ("read layer, 4 launches (graph)", &launches_per_product, false),
        ("read layer, 4 dependent launches (graph)", &launches_per_product, true),
        ("read layer, 1 launch (graph)", &launches_whole, false),
    ] {
        let ms = time_graph(b, launches, dependent)?;
        rows.push(Row {
            kernel: kernel.into(),
            dtype: ty.name(),
            shape: format!("{:.1} MB a layer", layer as f64 / 1e6),
            ms: ms / LAYERS as f64,
            bytes: layer,
            flops: None,
        });
    }
    rows.extend(staged_rows(b, ty, &products, &host)?);
    Ok(rows)
}

/// The persistent layer's rows (`stream_read_staged`): the [`LAYERS`] layers' bytes in one
/// cooperative launch, four stages a layer behind grid barriers, with or without dependent
/// loads on 8 blocks (attention's blocks at batch 1) between stages, from the DRAM (a 64 MiB
/// table) or the L2 (4 KiB), with each block's copies running on past the gates or waiting at
/// them, and with the 8 blocks' SMs copying weights too or nothing. Rows whose sums do not
/// match or whose barriers timed out are refused.
fn staged_rows(b: &mut Bench, ty: GgmlType, products: &[u64; 4], host: &[u8]) -> Result<Vec<Row>> {
    let layer: u64 = products.iter().sum();
    // LAYERS copies of the layer: their word sum is LAYERS times the layer's (mod 2^32).
    let want = stream_read_reference(host).wrapping_mul(LAYERS as u32);
    let mut all = Vec::with_capacity(layer as usize * LAYERS);
    for _ in 0..LAYERS {
        all.extend_from_slice(host);
    }
    let w = b.stream.upload(&all)?;
    drop(all);
    let mut ends = Vec::new();
    let mut at = 0u64;
    for _ in 0..LAYERS {
        for &p in products {
            at += p / 16;
            ends.push(at);
        }
    }
    // Chases through lines of 64 bytes: 1 Mi of them (64 MiB, mostly beyond the L2) or 64.
    let dram = b.stream.upload(&staged_chase_table(1 << 20, 16, || b.rng.next_u64()))?;
    let l2 = b.stream.upload(&staged_chase_table(64, 16, || b.rng.next_u64()))?;
    let mut scratch = StagedScratch::new(&b.stream)?;
    let mut partial = b.read_partials()?;
    let grid = b.backend.info().compute_units.max(1) as usize;
    let mut rows = Vec::new();
    let gates = |hops: [u32; 4], from: &str| match hops {
        [0, 0, 0, 0] => String::new(),
        [h, 0, 0, 0] => format!(", {h} {from} round trips after Q, K, V"),
        [h, o, g, d] => format!(", {h} + {o} + {g} + {d} {from} round trips"),
    };
    // idle: the 8 small-work blocks copy no weights, so their SMs issue nothing else.
    for (hops, chase, from, ahead, idle) in [
        ([0, 0, 0, 0], &dram, "DRAM", true, false),
        ([0, 0, 0, 0], &dram, "DRAM", false, false),
        ([8, 0, 0, 0], &dram, "DRAM", true, false),
        ([8, 2, 0, 2], &dram, "DRAM", true, false),
        ([8, 2, 0, 2], &dram, "DRAM", false, false),
        ([8, 2, 0, 2], &l2, "L2", true, false),
        ([0, 0, 0, 0], &dram, "DRAM", true, true),
        ([8, 2, 0, 2], &dram, "DRAM", true, true),
        ([8, 2, 0, 2], &l2, "L2", true, true),
    ] {
        let ms = {
            let graph = b.stream.capture(|_| -> Result<()> {
                stream_read_staged(&w, &ends, chase, hops, 8, idle, ahead, &mut scratch, &mut partial)?;
                Ok(())
            })?;
            b.time(|| Ok(graph.launch()?))?
        };
        let sums = partial.to_vec()?;
        let got = sums[..grid].iter().fold(0u32, |a, &x| a.wrapping_add(x));
        let name = format!(
            "read layer, 1 launch, 4 stages{}{}{}",
            gates(hops, from),
            if ahead { "" } else { ", copies wait at gates" },
            if idle { ", 8 SMs copy nothing" } else { "" }
        );
        if scratch.timed_out()? || got != want {
            return Err(format!("{name}: a barrier timed out, or the sum {got:#x} is not {want:#x}").into());
        }
        rows.push(Row {
            kernel: format!("{name} (graph)"),
            dtype: ty.name(),
            shape: format!("{:.1} MB a layer", layer as f64 / 1e6),
            ms: ms / LAYERS as f64,
            bytes: layer,
            flops: None,
        });
    }
    Ok(rows)
}

/// Median ms of one launch of a graph that runs `stream_read` (or `stream_read_dependent`) over
/// each buffer in turn.
fn time_graph(b: &mut Bench, launches: &[&DeviceBuffer<u8>], dependent: bool) -> Result<f64> {
    let mut partial = b.read_partials()?;
    let graph = b.stream.capture(|_| -> Result<()> {
        for &buffer in launches {
            match dependent {
                false => stream_read(buffer, &mut partial)?,
                true => stream_read_dependent(buffer, &mut partial)?,
            }
        }
        Ok(())
    })?;
    b.time(|| Ok(graph.launch()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_bytes_are_the_8b_layers_blocks() {
        let c = ModelConfig {
            hidden: 4096,
            ffn: 14_336,
            q_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            ..rocm_model::model::synthetic::SyntheticSpec::small(rocm_model::model::Architecture::Llama)
                .config
        };
        // q4_K: 144 bytes a block of 256; Q, K, V 6144 rows, O 4096, gate and up 2 x 14336, all of
        // k = 4096; down 4096 rows of 14336.
        assert_eq!(
            product_bytes(GgmlType::Q4_K, &c),
            [6144 * 16 * 144, 4096 * 16 * 144, 2 * 14_336 * 16 * 144, 4096 * 56 * 144]
        );
        // q8_0: 34 bytes a block of 32.
        assert_eq!(product_bytes(GgmlType::Q8_0, &c)[3], 4096 * 448 * 34);
    }
}
