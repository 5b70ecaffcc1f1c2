//! Prefill a prompt and decode on the GPU, reporting tokens per second.
//!
//! ```text
//! cargo run --release -p rocm-model --example decode -- [MODEL.gguf] [--prompt N] [--steps N] [--dtype f32|f16|bf16]
//! ```
//!
//! Without a GGUF path it builds a synthetic llama-style model (hidden 1024, 4 layers, 16 query
//! and 4 KV heads of 64, FFN 2816, Q8_0 and MXFP4 weights). There is no embedding or LM head:
//! the inputs are random hidden states, and each decode step feeds a fresh one.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use rocm_kernels::gemm::GemmElement;
use rocm_model::GgmlType;
use rocm_model::GgufFile;
use rocm_model::kv_cache::PagedCache;
use rocm_model::model::synthetic::{SplitMix, SyntheticSpec};
use rocm_model::model::{Architecture, LayerTensor, Model, ModelConfig};
use rocm_runtime::{Backend, Stream, bf16, f16};

struct Args {
    path: Option<String>,
    prompt: usize,
    steps: usize,
    dtype: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { path: None, prompt: 128, steps: 64, dtype: "bf16".into() };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--prompt" => args.prompt = value("--prompt")?.parse().map_err(|e| format!("--prompt: {e}"))?,
            "--steps" => args.steps = value("--steps")?.parse().map_err(|e| format!("--steps: {e}"))?,
            "--dtype" => args.dtype = value("--dtype")?,
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => args.path = Some(s.to_string()),
        }
    }
    if args.prompt == 0 {
        return Err("--prompt must be at least 1".into());
    }
    Ok(args)
}

/// Matrices alternate Q8_0 and MXFP4 by layer; norms are F32.
fn example_types(layer: usize, t: LayerTensor) -> GgmlType {
    match t {
        LayerTensor::AttnNorm | LayerTensor::FfnNorm => GgmlType::F32,
        _ if layer.is_multiple_of(2) => GgmlType::Q8_0,
        _ => GgmlType::MXFP4,
    }
}

fn synthetic() -> Result<GgufFile, Box<dyn std::error::Error>> {
    let base = SyntheticSpec::small(Architecture::Llama);
    let spec = SyntheticSpec {
        config: ModelConfig {
            hidden: 1024,
            layers: 4,
            ffn: 2816,
            q_heads: 16,
            kv_heads: 4,
            head_dim: 64,
            rotary_dim: 64,
            ..base.config
        },
        types: example_types,
        ..base
    };
    Ok(GgufFile::from_bytes(spec.to_bytes()?)?)
}

fn run<T: GemmElement>(
    file: Arc<GgufFile>,
    stream: &Stream,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let model = Model::<T>::load(file, stream)?;
    stream.synchronize()?;
    let c = model.config().clone();
    eprintln!(
        "model: {} {} layers, hidden {}, {}/{} heads of {}, ffn {} in {} (loaded in {:.2} s)",
        c.architecture.name(),
        c.layers,
        c.hidden,
        c.q_heads,
        c.kv_heads,
        c.head_dim,
        c.ffn,
        std::any::type_name::<T>(),
        t0.elapsed().as_secs_f64()
    );
    let block_size = 16;
    // One more block for the warm-up sequence.
    let blocks = (args.prompt + args.steps).div_ceil(block_size) + 1;
    let mut cache = PagedCache::new(blocks, block_size)?;
    let mut kv = model.new_kv_cache(&cache)?;
    let seq = cache.add_sequence();
    let mut rng = SplitMix(1);
    let to_t = |x: Vec<f32>| -> Vec<T> { x.into_iter().map(T::from_f32).collect() };

    let prompt = stream.upload(&to_t(rng.hidden(args.prompt * c.hidden)))?;
    // Warm-up: one untimed token loads the kernels and the BLAS handle; its sequence is freed.
    let warm = cache.add_sequence();
    model.decode_step(&mut cache, &mut kv, &[warm], &stream.upload(&to_t(rng.hidden(c.hidden)))?)?;
    stream.synchronize()?;
    cache.free_sequence(warm)?;

    let t = Instant::now();
    model.prefill(&mut cache, &mut kv, seq, &prompt)?;
    stream.synchronize()?;
    let prefill_s = t.elapsed().as_secs_f64();
    eprintln!(
        "prefill: {} tokens in {:.3} s = {:.1} tokens/s",
        args.prompt,
        prefill_s,
        args.prompt as f64 / prefill_s
    );

    let inputs: Vec<_> =
        (0..args.steps).map(|_| stream.upload(&to_t(rng.hidden(c.hidden)))).collect::<Result<_, _>>()?;
    let t = Instant::now();
    for (i, x) in inputs.iter().enumerate() {
        model.decode_step(&mut cache, &mut kv, &[seq], x)?;
        stream.synchronize()?;
        let s = t.elapsed().as_secs_f64();
        eprint!("\rdecode: step {}/{} ({:.1} tokens/s)   ", i + 1, args.steps, (i + 1) as f64 / s);
    }
    if args.steps > 0 {
        let s = t.elapsed().as_secs_f64();
        eprintln!(
            "\rdecode: {} steps in {:.3} s = {:.1} tokens/s          ",
            args.steps,
            s,
            args.steps as f64 / s
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("usage: decode [MODEL.gguf] [--prompt N] [--steps N] [--dtype f32|f16|bf16]");
            return ExitCode::from(2);
        }
    };
    let backend = match Backend::open(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("the decode example needs a GPU: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = (|| -> Result<(), Box<dyn std::error::Error>> {
        let stream = backend.create_stream()?;
        let file = Arc::new(match &args.path {
            Some(p) => GgufFile::open(p)?,
            None => synthetic()?,
        });
        match args.dtype.as_str() {
            "f32" => run::<f32>(file, &stream, &args),
            "f16" => run::<f16>(file, &stream, &args),
            "bf16" => run::<bf16>(file, &stream, &args),
            other => Err(format!("--dtype must be f32, f16 or bf16, not {other}").into()),
        }
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
