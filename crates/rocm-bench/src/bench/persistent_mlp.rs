//! `bench model`'s MLP rows (Q8_0, bf16 activations, one token): a layer's MLP block as the
//! decode step's chain runs it (`rmsnorm_residual`, the gate-and-up products, `swiglu`, the
//! down product: four dependent launches) and as one cooperative launch (`persistent_mlp`, the
//! first slice of the persistent decode layer), each recorded in a graph over [`LAYERS`]
//! layers' weights (each its own buffers: ~750 MB, the L2 holds none of the next layer's), the
//! row's time a layer. Before timing, one layer through each must agree (the kernels' own tests
//! hold their bounds; this keeps a broken build from timing garbage).

use rocm_kernels::persistent_mlp::{MlpWeights, PersistentMlp};
use rocm_kernels::quant::{GgmlFormat, QuantProduct, quant_matvec, quant_matvec_group};
use rocm_kernels::rmsnorm::RmsNorm;
use rocm_kernels::swiglu::swiglu;
use rocm_model::GgmlType;
use rocm_model::model::ModelConfig;
use rocm_runtime::{DeviceBuffer, bf16};

use super::model::random_blocks;
use super::{Bench, Row};
use crate::Result;

const LAYERS: usize = 4;
const EPS: f32 = 1e-5;

struct Layer {
    norm: DeviceBuffer<bf16>,
    gate: DeviceBuffer<u8>,
    up: DeviceBuffer<u8>,
    down: DeviceBuffer<u8>,
}

impl Layer {
    fn weights(&self) -> MlpWeights<'_, bf16> {
        MlpWeights { norm: &self.norm, gate: &self.gate, up: &self.up, down: &self.down }
    }
}

/// The two rows (this module's doc); none where the device has no persistent kernel.
pub fn rows(b: &mut Bench, c: &ModelConfig) -> Result<Vec<Row>> {
    if !PersistentMlp::runs_on(&b.stream) {
        return Ok(Vec::new());
    }
    let (hidden, ffn) = (c.hidden, c.ffn);
    let mut mlp = PersistentMlp::new(&b.stream, hidden, ffn, EPS)?;
    let host: [Vec<u8>; 3] = std::array::from_fn(|_| random_blocks(&mut b.rng, GgmlType::Q8_0, ffn * hidden));
    let norm: Vec<bf16> = (0..hidden).map(|i| bf16::from_f32(0.75 + (i % 7) as f32 / 14.0)).collect();
    let layers: Vec<Layer> = (0..LAYERS)
        .map(|_| -> Result<Layer> {
            Ok(Layer {
                norm: b.stream.upload(&norm)?,
                gate: b.stream.upload(&host[0])?,
                up: b.stream.upload(&host[1])?,
                down: b.stream.upload(&host[2])?,
            })
        })
        .collect::<Result<_>>()?;
    drop(host);
    let start: Vec<bf16> =
        (0..hidden).map(|i| bf16::from_f32(((i * 37 % 64) as f32 - 32.0) / 32.0)).collect();
    let delta_host: Vec<bf16> =
        (0..hidden).map(|i| bf16::from_f32(((i * 11 % 16) as f32 - 8.0) / 64.0)).collect();
    let delta = b.stream.upload(&delta_host)?;
    let mut h = b.stream.upload(&start)?;
    let mut xn = b.stream.alloc::<bf16>(hidden)?;
    let mut gate = b.stream.alloc::<bf16>(ffn)?;
    let mut up = b.stream.alloc::<bf16>(ffn)?;
    let mut act = b.stream.alloc::<bf16>(ffn)?;
    let mut y = b.stream.alloc::<bf16>(hidden)?;
    let rms = RmsNorm::new(1, hidden, EPS);
    let mut chain = |l: &Layer,
                     h: &mut DeviceBuffer<bf16>,
                     act: &mut DeviceBuffer<bf16>,
                     y: &mut DeviceBuffer<bf16>|
     -> Result<()> {
        rms.run_residual(&delta, h, &l.norm, &mut xn)?;
        let mut products = [
            QuantProduct { w: &l.gate, y: &mut gate, rows: ffn },
            QuantProduct { w: &l.up, y: &mut up, rows: ffn },
        ];
        quant_matvec_group(GgmlFormat::Q8_0, &mut products, &xn, hidden, 1)?;
        swiglu(&gate, &up, act)?;
        quant_matvec(GgmlFormat::Q8_0, &l.down, act, y, hidden, ffn, 1)?;
        Ok(())
    };

    // One layer each way from the same h: the outputs agree to well within bf16's spread.
    chain(&layers[0], &mut h, &mut act, &mut y)?;
    let want = y.to_vec()?;
    let mut h2 = b.stream.upload(&start)?;
    mlp.run(&layers[0].weights(), &mut h2, Some(&delta), &mut act, &mut y)?;
    let got = y.to_vec()?;
    let scale = want.iter().fold(0f32, |m, v| m.max(v.to_f32().abs()));
    let worst = got.iter().zip(&want).fold(0f32, |m, (g, w)| m.max((g.to_f32() - w.to_f32()).abs()));
    let finite = got.iter().all(|v| v.to_f32().is_finite());
    if mlp.timed_out()? || !finite || worst > 0.02 * scale {
        return Err(
            format!("persistent MLP: y differs from the chain's by {worst} (largest |y| {scale})").into()
        );
    }

    let mut rows = Vec::new();
    let bytes = mlp.weight_bytes();
    for persistent in [false, true] {
        let ms = {
            let graph = b.stream.capture(|_| -> Result<()> {
                for l in &layers {
                    match persistent {
                        false => chain(l, &mut h, &mut act, &mut y)?,
                        true => mlp.run(&l.weights(), &mut h, Some(&delta), &mut act, &mut y)?,
                    }
                }
                Ok(())
            })?;
            b.time(|| Ok(graph.launch()?))?
        };
        if mlp.timed_out()? {
            return Err("persistent MLP: a barrier timed out".into());
        }
        let kernel = match persistent {
            false => "MLP, 4 launches: rmsnorm_residual, gate and up, swiglu, down (graph)",
            true => "MLP, 1 persistent launch (graph)",
        };
        rows.push(Row {
            kernel: kernel.into(),
            dtype: GgmlType::Q8_0.name(),
            shape: format!("{hidden} x {ffn}, {:.1} MB a layer", bytes as f64 / 1e6),
            ms: ms / LAYERS as f64,
            bytes,
            flops: None,
        });
    }
    Ok(rows)
}
