//! `rocm-bench attention-dump DIR` (or `cargo xtask attention-dump DIR`, which forwards here):
//! runs flash attention and the unfused pipeline on a few problems and writes inputs and outputs
//! to DIR, for `scripts/check_attention_torch.py` to compare with PyTorch's
//! `scaled_dot_product_attention` on the same machine (an independent implementation; the GPU
//! tests compare with rocmforge's own f64 reference).
//!
//! Per case `caseN`: `caseN.json` (the problem), `caseN.{q,k,v}.f32` (the stored inputs widened
//! to f32, `[batch, seq, heads, head_dim]`), `caseN.{fused,unfused}.f32` (outputs, same
//! layout) and `caseN.lse.f32` (`[batch, q_heads, seq_q]`), little-endian.

use std::path::Path;

use rocm_kernels::Dtype;
use rocm_kernels::attention::{Attention, attention_unfused, flash_attention};
use rocm_runtime::{Backend, Stream, bf16, f16};
use rocm_testkit::Rng;

use crate::Result;

/// (dtype, batch, seq_q, seq_k, q_heads, kv_heads, head_dim, causal offset, input sd)
type Case = (&'static str, usize, usize, usize, usize, usize, usize, Option<i64>, f32);

const CASES: &[Case] = &[
    ("f16", 2, 17, 17, 3, 3, 64, Some(0), 1.0),
    // Prefill at head_dim 64 past 64 packed rows: Hopper's four-warpgroup wgmma kernel.
    ("bf16", 1, 1000, 1000, 8, 2, 64, Some(0), 30.0),
    ("f16", 2, 300, 300, 4, 4, 64, None, 1.0),
    ("bf16", 1, 255, 255, 8, 2, 128, Some(0), 30.0),
    ("f16", 3, 1, 1000, 8, 1, 128, None, 1.0),
    ("bf16", 1, 17, 4097, 8, 1, 96, Some(4080), 1.0),
    ("f32", 1, 33, 20, 2, 2, 64, Some(-13), 1.0),
    ("f16", 2, 300, 300, 4, 4, 256, None, 1.0),
    ("f16", 32, 1, 4096, 32, 4, 128, Some(4095), 1.0),
];

pub fn run(args: &[String]) -> Result<()> {
    let [dir] = args else { return Err("usage: rocm-bench attention-dump DIR".into()) };
    let dir = Path::new(dir);
    std::fs::create_dir_all(dir)?;
    let backend = Backend::open(0)?;
    let stream = backend.create_stream()?;
    let mut rng = Rng::new(0x5d9a);
    for (n, case) in CASES.iter().enumerate() {
        let name = format!("case{n}");
        match case.0 {
            "f32" => dump::<f32>(&stream, &mut rng, dir, &name, case)?,
            "f16" => dump::<f16>(&stream, &mut rng, dir, &name, case)?,
            _ => dump::<bf16>(&stream, &mut rng, dir, &name, case)?,
        }
        println!("attention-dump: {name} {case:?}");
    }
    Ok(())
}

fn dump<T: Dtype>(stream: &Stream, rng: &mut Rng, dir: &Path, name: &str, case: &Case) -> Result<()> {
    let &(dtype, b, sq, sk, hq, hkv, d, offset, sd) = case;
    let mut attn = Attention::new(b, sq, sk, hq, hkv, d);
    if let Some(o) = offset {
        attn = attn.causal_with_offset(o);
    }
    let mut normal = |len: usize, sd: f32| -> Vec<T> {
        rng.normal_f32_vec(len, sd).into_iter().map(T::from_f32).collect()
    };
    let (q, k, v) =
        (normal(b * sq * hq * d, sd), normal(b * sk * hkv * d, sd), normal(b * sk * hkv * d, 1.0));
    let (dq, dk, dv) = (stream.upload(&q)?, stream.upload(&k)?, stream.upload(&v)?);
    let mut fused = stream.alloc::<T>(q.len())?;
    let mut unfused = stream.alloc::<T>(q.len())?;
    let mut lse = stream.alloc::<f32>(attn.lse_len())?;
    flash_attention(&attn, &dq, &dk, &dv, &mut fused, Some(&mut lse))?;
    attention_unfused(&attn, &dq, &dk, &dv, &mut unfused)?;
    let write = |suffix: &str, data: &[T]| -> Result<()> {
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_f32().to_le_bytes()).collect();
        Ok(std::fs::write(dir.join(format!("{name}.{suffix}.f32")), bytes)?)
    };
    write("q", &q)?;
    write("k", &k)?;
    write("v", &v)?;
    write("fused", &fused.to_vec()?)?;
    write("unfused", &unfused.to_vec()?)?;
    let lse_bytes: Vec<u8> = lse.to_vec()?.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(dir.join(format!("{name}.lse.f32")), lse_bytes)?;
    let offset = offset.map_or("null".to_string(), |o| o.to_string());
    let json = format!(
        "{{\"dtype\": \"{dtype}\", \"batch\": {b}, \"seq_q\": {sq}, \"seq_k\": {sk}, \"q_heads\": {hq}, \
         \"kv_heads\": {hkv}, \"head_dim\": {d}, \"causal_offset\": {offset}, \"scale\": {}, \"sd\": {sd}}}\n",
        attn.scale
    );
    std::fs::write(dir.join(format!("{name}.json")), json)?;
    Ok(())
}
