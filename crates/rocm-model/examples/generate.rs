//! Token ids in, generated token ids out, on the GPU: embedding, prefill, then one decode step
//! per token with the logits sampled on the host.
//!
//! ```text
//! cargo run --release -p rocm-model --example generate -- [MODEL.gguf] [--tokens 1,2,3]
//!     [--steps N] [--dtype f32|f16|bf16] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//!     [--decode graph|eager]
//! ```
//!
//! `--decode graph` (the default) records one decode step, head included, and replays it
//! (`Model::decode_workspace`, `DecodeWorkspace::graph`; eagerly on the same buffers where the
//! platform has no graphs); `eager` runs `Model::decode_step` and `Model::logits` each step.
//!
//! Without a GGUF path it builds a synthetic llama-style model (hidden 1024, 4 layers, a
//! 32000-token Q8_0 embedding and head, random weights: the tokens mean nothing, the speed
//! does). Temperature 0 (the default) is greedy. Progress and tokens/s go to stderr; the
//! generated ids to stdout, one line.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use rocm_kernels::gemm::GemmElement;
use rocm_model::GgmlType;
use rocm_model::GgufFile;
use rocm_model::kv_cache::PagedCache;
use rocm_model::model::synthetic::{SyntheticSpec, SyntheticVocab};
use rocm_model::model::{Architecture, LayerTensor, Model, ModelConfig, Sampler, Sampling};
use rocm_runtime::{Backend, Stream, bf16, f16};

struct Args {
    path: Option<String>,
    tokens: Vec<u32>,
    steps: usize,
    dtype: String,
    sampling: Sampling,
    graph: bool,
}

const USAGE: &str = "usage: generate [MODEL.gguf] [--tokens 1,2,3] [--steps N] [--dtype f32|f16|bf16] \
                     [--temperature T] [--top-k K] [--top-p P] [--seed S] [--decode graph|eager]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        path: None,
        tokens: vec![1],
        steps: 32,
        dtype: "bf16".into(),
        sampling: Sampling::GREEDY,
        graph: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        fn num<N: std::str::FromStr>(name: &str, v: String) -> Result<N, String>
        where
            N::Err: std::fmt::Display,
        {
            v.parse().map_err(|e| format!("{name} {v}: {e}"))
        }
        match a.as_str() {
            "--tokens" => {
                args.tokens = value("--tokens")?
                    .split(',')
                    .map(|t| num("--tokens", t.trim().to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--steps" => args.steps = num("--steps", value("--steps")?)?,
            "--dtype" => args.dtype = value("--dtype")?,
            "--temperature" => args.sampling.temperature = num("--temperature", value("--temperature")?)?,
            "--top-k" => args.sampling.top_k = num("--top-k", value("--top-k")?)?,
            "--top-p" => args.sampling.top_p = num("--top-p", value("--top-p")?)?,
            "--seed" => args.sampling.seed = num("--seed", value("--seed")?)?,
            "--decode" => {
                args.graph = match value("--decode")?.as_str() {
                    "graph" => true,
                    "eager" => false,
                    other => return Err(format!("--decode must be graph or eager, not {other}")),
                }
            }
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => args.path = Some(s.to_string()),
        }
    }
    if args.tokens.is_empty() {
        return Err("--tokens needs at least one id".into());
    }
    Ok(args)
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
        types: |_, t| match t {
            LayerTensor::AttnNorm | LayerTensor::FfnNorm => GgmlType::F32,
            _ => GgmlType::Q8_0,
        },
        vocab: Some(SyntheticVocab { size: 32_000, ty: GgmlType::Q8_0, tied: false }),
        ..base
    };
    Ok(GgufFile::from_bytes(spec.to_bytes()?)?)
}

/// The logits of one row as f32, for the sampler.
fn host_row<T: GemmElement>(logits: &rocm_runtime::DeviceBuffer<T>) -> Result<Vec<f32>, rocm_runtime::Error> {
    Ok(logits.to_vec()?.iter().map(|v| v.to_f32()).collect())
}

fn run<T: GemmElement>(
    file: Arc<GgufFile>,
    stream: &Stream,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let in_file = file.tensor_bytes_total();
    let model = Model::<T>::load(file, stream)?;
    stream.synchronize()?;
    let c = model.config().clone();
    let vocab = model.vocab_size().ok_or("the model has no token embedding (token_embd.weight)")?;
    eprintln!(
        "model: {} {} layers, hidden {}, vocab {vocab}, activations {}; weights {:.1} MiB on the device \
         ({:.1} MiB of tensors in the file); loaded in {:.2} s",
        c.architecture.name(),
        c.layers,
        c.hidden,
        std::any::type_name::<T>(),
        model.weight_bytes() as f64 / (1 << 20) as f64,
        in_file as f64 / (1 << 20) as f64,
        t0.elapsed().as_secs_f64()
    );
    let mut sampler = Sampler::new(args.sampling)?;
    let block_size = 16;
    let mut cache = PagedCache::new((args.tokens.len() + args.steps).div_ceil(block_size), block_size)?;
    let mut kv = model.new_kv_cache(&cache)?;
    let seq = cache.add_sequence();

    let t = Instant::now();
    let out = model.prefill(&mut cache, &mut kv, seq, &model.embed(&args.tokens)?)?;
    let mut logits = model.logits(&model.last_token(&out)?)?;
    let mut next = sampler.sample(&host_row(&logits)?)?;
    let prefill_s = t.elapsed().as_secs_f64();
    eprintln!(
        "prefill: {} tokens in {:.3} s = {:.1} tokens/s",
        args.tokens.len(),
        prefill_s,
        args.tokens.len() as f64 / prefill_s
    );

    let mut generated = vec![next];
    let progress = |step: usize, t: Instant, mode: &str| {
        let s = t.elapsed().as_secs_f64();
        eprint!("\rdecode ({mode}): {step}/{} tokens, {:.1} tokens/s   ", args.steps - 1, step as f64 / s);
    };
    let (t, mode) = if args.graph {
        // Tables as wide as the cache: the sequence may take every block.
        let max_blocks = cache.num_blocks();
        let mut workspace = model.decode_workspace(&mut kv, 1, max_blocks)?;
        let mut graph = workspace.graph()?;
        let mode = if graph.is_captured() {
            "graph"
        } else {
            "eager workspace: no graphs here, or whole-weight GEMMs"
        };
        let t = Instant::now();
        for step in 1..args.steps {
            graph.step_tokens(&mut cache, &[seq], &[next])?;
            next = sampler.sample(&host_row(graph.logits().ok_or("the model has no output head")?)?)?;
            generated.push(next);
            progress(step, t, mode);
        }
        (t, mode)
    } else {
        let t = Instant::now();
        for step in 1..args.steps {
            let out = model.decode_step(&mut cache, &mut kv, &[seq], &model.embed(&[next])?)?;
            logits = model.logits(&out)?;
            next = sampler.sample(&host_row(&logits)?)?;
            generated.push(next);
            progress(step, t, "eager");
        }
        (t, "eager")
    };
    if args.steps > 1 {
        let s = t.elapsed().as_secs_f64();
        eprintln!(
            "\rdecode ({mode}): {} tokens in {s:.3} s = {:.1} tokens/s          ",
            args.steps - 1,
            (args.steps - 1) as f64 / s
        );
    }
    let ids: Vec<String> = generated.iter().take(args.steps).map(u32::to_string).collect();
    println!("{}", ids.join(" "));
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let backend = match Backend::open(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("the generate example needs a GPU: {e}");
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
