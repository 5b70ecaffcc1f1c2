//! Token ids in, generated token ids out, on the GPU: each prompt prefilled as its own
//! sequence, then every sequence decoded together, one batched decode step per token, with each
//! sequence's logits sampled on the host.
//!
//! ```text
//! cargo run --release -p rocm-model --example generate -- [MODEL.gguf] [--tokens 1,2,3]...
//!     [--prompts "1,2,3;7,8"] [--prompt TEXT]... [--steps N] [--dtype f32|f16|bf16]
//!     [--temperature T] [--top-k K] [--top-p P] [--seed S] [--decode graph|eager] [--text] [--stop]
//! ```
//!
//! Each `--tokens` adds a prompt, and `--prompts` adds several (`;` between prompts); prompts
//! may differ in length. `--prompt TEXT` adds a prompt written as text, turned into ids by the
//! model file's own vocabulary (`Tokenizer`, `Encode::PROMPT`: the beginning-of-sequence token
//! where the file asks for it, control tokens written in the text such as `<|eot_id|>` parsed). Without either, one prompt of the id 1. The prompts are prefilled one
//! at a time (each its own sequence of the `PagedCache`, sized for the longest prompt plus the
//! steps), then decoded as one batch per step. Sequence `i` samples with its own `Sampler`,
//! seeded `S + i`.
//!
//! `--decode graph` (the default) records one decode step of the whole batch, head included,
//! and replays it (`Model::decode_workspace`, `DecodeWorkspace::graph`; eagerly on the same
//! buffers where the platform has no graphs); `eager` runs `Model::decode_step` and
//! `Model::logits` over all sequences each step.
//!
//! Without a GGUF path it builds a synthetic llama-style model (hidden 1024, 4 layers, a
//! 32000-token Q8_0 embedding and head, random weights: the tokens mean nothing, the speed
//! does). Temperature 0 (the default) is greedy. Progress and tokens/s (all sequences' tokens
//! together) go to stderr; the generated ids to stdout, one line per prompt, in order.
//!
//! `--stop` ends each sequence at its first end-of-generation token (`Tokenizer::
//! end_of_generation`: the end-of-sequence token and the control tokens models end a turn with,
//! such as `<|eot_id|>`; the token is kept in the ids), and stops decoding once every sequence
//! has ended; tokens/s then counts the steps run.
//!
//! `--text` prints each prompt's generated text instead of its ids, decoded with the model
//! file's own vocabulary (`Detokenizer`: SentencePiece or byte-level BPE; control tokens print
//! nothing), followed by a newline; the text itself may hold newlines. A file without
//! `tokenizer.ggml.tokens` (the synthetic model has none) refuses `--text`.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use rocm_kernels::gemm::GemmElement;
use rocm_model::GgmlType;
use rocm_model::GgufFile;
use rocm_model::kv_cache::{KvCacheTensors, PagedCache, SeqId};
use rocm_model::model::synthetic::{SyntheticSpec, SyntheticVocab};
use rocm_model::model::{
    Architecture, Detokenizer, Encode, LayerTensor, Model, ModelConfig, Sampler, Sampling, Tokenizer,
};
use rocm_runtime::{Backend, DeviceBuffer, Stream, bf16, f16};

type Res<T> = Result<T, Box<dyn Error>>;

/// A prompt as given: token ids, or text for the model's vocabulary.
enum Prompt {
    Ids(Vec<u32>),
    Text(String),
}

struct Args {
    path: Option<String>,
    /// One a sequence; no id list empty.
    prompts: Vec<Prompt>,
    steps: usize,
    dtype: String,
    sampling: Sampling,
    graph: bool,
    /// Print the generated text, not the ids.
    text: bool,
    /// End each sequence at its first end-of-generation token.
    stop: bool,
}

const USAGE: &str = "usage: generate [MODEL.gguf] [--tokens 1,2,3]... [--prompts \"1,2,3;7,8\"] [--prompt TEXT]... [--steps N] \
                     [--dtype f32|f16|bf16] [--temperature T] [--top-k K] [--top-p P] [--seed S] \
                     [--decode graph|eager] [--text] [--stop]";

/// Tokens a block of the KV cache holds.
const BLOCK_SIZE: usize = 16;

fn num<N: std::str::FromStr>(name: &str, v: &str) -> Result<N, String>
where
    N::Err: std::fmt::Display,
{
    v.parse().map_err(|e| format!("{name} {v}: {e}"))
}

/// One prompt's ids, `1,2,3`; `which` names it in errors.
fn parse_prompt(which: &str, text: &str) -> Result<Vec<u32>, String> {
    if text.trim().is_empty() {
        return Err(format!("{which} is empty: a prompt needs at least one token id"));
    }
    text.split(',').map(|t| num(which, t.trim())).collect()
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        path: None,
        prompts: Vec::new(),
        steps: 32,
        dtype: "bf16".into(),
        sampling: Sampling::GREEDY,
        graph: true,
        text: false,
        stop: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--tokens" => {
                let which = format!("--tokens (prompt {})", args.prompts.len());
                args.prompts.push(Prompt::Ids(parse_prompt(&which, &value("--tokens")?)?))
            }
            "--prompts" => {
                for text in value("--prompts")?.split(';') {
                    let which = format!("--prompts (prompt {})", args.prompts.len());
                    args.prompts.push(Prompt::Ids(parse_prompt(&which, text)?));
                }
            }
            "--prompt" => args.prompts.push(Prompt::Text(value("--prompt")?)),
            "--steps" => args.steps = num("--steps", &value("--steps")?)?,
            "--dtype" => args.dtype = value("--dtype")?,
            "--temperature" => args.sampling.temperature = num("--temperature", &value("--temperature")?)?,
            "--top-k" => args.sampling.top_k = num("--top-k", &value("--top-k")?)?,
            "--top-p" => args.sampling.top_p = num("--top-p", &value("--top-p")?)?,
            "--seed" => args.sampling.seed = num("--seed", &value("--seed")?)?,
            "--decode" => {
                args.graph = match value("--decode")?.as_str() {
                    "graph" => true,
                    "eager" => false,
                    other => return Err(format!("--decode must be graph or eager, not {other}")),
                }
            }
            "--text" => args.text = true,
            "--stop" => args.stop = true,
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => args.path = Some(s.to_string()),
        }
    }
    if args.prompts.is_empty() {
        args.prompts.push(Prompt::Ids(vec![1]));
    }
    Ok(args)
}

fn synthetic() -> Res<GgufFile> {
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

/// Loads the model onto `stream` and says what it is.
fn load<T: GemmElement>(file: Arc<GgufFile>, stream: &Stream) -> Res<Model<T>> {
    let t0 = Instant::now();
    let in_file = file.tensor_bytes_total();
    let model = Model::<T>::load(file, stream)?;
    stream.synchronize()?;
    let c = model.config();
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
    Ok(model)
}

/// The block bookkeeping and the KV-cache tensors for `prompts`, each room for its prompt and
/// `steps` tokens, and the block tables' width (the longest sequence's blocks).
fn kv_cache<T: GemmElement>(
    model: &Model<T>,
    prompts: &[Vec<u32>],
    steps: usize,
) -> Res<(PagedCache, KvCacheTensors<T>, usize)> {
    let blocks = |p: &Vec<u32>| (p.len() + steps).div_ceil(BLOCK_SIZE);
    let max_blocks = prompts.iter().map(blocks).max().unwrap_or(1);
    let num_blocks: usize = prompts.iter().map(blocks).sum();
    let too_many = |e: &dyn Error| {
        let c = model.config();
        let per_block = 2 * c.layers * BLOCK_SIZE * c.kv_heads * c.head_dim * size_of::<T>();
        format!(
            "{} sequences of up to {} tokens need {num_blocks} KV-cache blocks of {BLOCK_SIZE} tokens \
             ({:.1} MiB): {e}",
            prompts.len(),
            prompts.iter().map(Vec::len).max().unwrap_or(0) + steps,
            num_blocks as f64 * per_block as f64 / (1 << 20) as f64
        )
    };
    let cache = PagedCache::new(num_blocks, BLOCK_SIZE).map_err(|e| too_many(&e))?;
    let kv = model.new_kv_cache(&cache).map_err(|e| too_many(&e))?;
    Ok((cache, kv, max_blocks))
}

/// One sampler a sequence, sequence `i` seeded `seed + i`.
fn samplers(sampling: Sampling, n: usize) -> Res<Vec<Sampler>> {
    (0..n as u64)
        .map(|i| Ok(Sampler::new(Sampling { seed: sampling.seed.wrapping_add(i), ..sampling })?))
        .collect()
}

/// Device logits as f32 on the host.
fn host_rows<T: GemmElement>(logits: &DeviceBuffer<T>) -> Res<Vec<f32>> {
    Ok(logits.to_vec()?.iter().map(|v| v.to_f32()).collect())
}

/// The next token of each sequence: row `i` of `logits` (`[samplers.len(), vocab]`) sampled by
/// sampler `i`.
fn sample_rows(samplers: &mut [Sampler], logits: &[f32]) -> Res<Vec<u32>> {
    let vocab = logits.len() / samplers.len();
    samplers.iter_mut().zip(logits.chunks_exact(vocab)).map(|(s, row)| Ok(s.sample(row)?)).collect()
}

/// Each prompt prefilled as a new sequence of `cache`, one at a time, and the first token after
/// it sampled. Returns the sequences and those tokens.
fn prefill<T: GemmElement>(
    model: &Model<T>,
    cache: &mut PagedCache,
    kv: &mut KvCacheTensors<T>,
    prompts: &[Vec<u32>],
    samplers: &mut [Sampler],
) -> Res<(Vec<SeqId>, Vec<u32>)> {
    let t = Instant::now();
    let mut seqs = Vec::with_capacity(prompts.len());
    let mut first = Vec::with_capacity(prompts.len());
    for (i, (prompt, sampler)) in prompts.iter().zip(samplers).enumerate() {
        let x = model.embed(prompt).map_err(|e| format!("prompt {i}: {e}"))?;
        let seq = cache.add_sequence();
        let out = model.prefill(cache, kv, seq, &x)?;
        let logits = host_rows(&model.logits(&model.last_token(&out)?)?)?;
        first.push(sampler.sample(&logits)?);
        seqs.push(seq);
    }
    let s = t.elapsed().as_secs_f64();
    let tokens: usize = prompts.iter().map(Vec::len).sum();
    eprintln!(
        "prefill: {tokens} tokens of {} prompt(s), one at a time, in {s:.3} s = {:.1} tokens/s",
        prompts.len(),
        tokens as f64 / s
    );
    Ok((seqs, first))
}

/// `steps - 1` decode steps after the prefill's tokens `first` (one a sequence): each feeds
/// every sequence's last token to `step`, which returns the logits (`[batch, vocab]`), and
/// samples the next. Progress and tokens/s (the batch's tokens) on stderr; returns each
/// sequence's `steps` tokens.
fn decode(
    steps: usize,
    mode: &str,
    samplers: &mut [Sampler],
    first: Vec<u32>,
    stops: &[u32],
    mut step: impl FnMut(&[u32]) -> Res<Vec<f32>>,
) -> Res<Vec<Vec<u32>>> {
    let batch = first.len();
    let mut generated: Vec<Vec<u32>> = first.iter().map(|&t| vec![t]).collect();
    // Whether each sequence has sampled an end-of-generation token yet.
    let mut ended: Vec<bool> = first.iter().map(|id| stops.contains(id)).collect();
    let mut next = first;
    let t = Instant::now();
    let mut steps_run = 1;
    for done in 1..steps {
        if ended.iter().all(|&e| e) {
            break;
        }
        next = sample_rows(samplers, &step(&next)?)?;
        steps_run += 1;
        for ((g, e), &id) in generated.iter_mut().zip(&mut ended).zip(&next) {
            g.push(id);
            *e |= stops.contains(&id);
        }
        let s = t.elapsed().as_secs_f64();
        eprint!(
            "\rdecode ({mode}): step {done}/{}, batch {batch}, {:.1} tokens/s   ",
            steps - 1,
            (done * batch) as f64 / s
        );
    }
    if steps_run > 1 {
        let s = t.elapsed().as_secs_f64();
        let tokens = (steps_run - 1) * batch;
        eprintln!(
            "\rdecode ({mode}): {} steps of batch {batch} = {tokens} tokens in {s:.3} s = {:.1} tokens/s          ",
            steps_run - 1,
            tokens as f64 / s
        );
    }
    for g in &mut generated {
        g.truncate(steps);
        // A sequence ends with its first end-of-generation token (kept).
        if let Some(at) = g.iter().position(|id| stops.contains(id)) {
            g.truncate(at + 1);
        }
    }
    Ok(generated)
}

/// The message for an option that needs the file's vocabulary when the file has none.
fn no_vocabulary(option: &str) -> String {
    format!("{option} needs a vocabulary, and the model file has none (no tokenizer.ggml.tokens)")
}

/// The prompts as ids: text through `tokenizer` (there whenever a prompt is text).
fn prompt_ids(tokenizer: Option<&Tokenizer>, prompts: &[Prompt]) -> Res<Vec<Vec<u32>>> {
    let mut out = Vec::with_capacity(prompts.len());
    for (i, prompt) in prompts.iter().enumerate() {
        let ids = match prompt {
            Prompt::Ids(ids) => ids.clone(),
            Prompt::Text(text) => {
                let ids = tokenizer.expect("read for text prompts").encode(text, Encode::PROMPT)?;
                if ids.is_empty() {
                    return Err(format!("prompt {i} ({text:?}) has no tokens").into());
                }
                eprintln!("prompt {i}: {} tokens", ids.len());
                ids
            }
        };
        out.push(ids);
    }
    Ok(out)
}

fn run<T: GemmElement>(file: Arc<GgufFile>, stream: &Stream, args: &Args) -> Res<()> {
    // Read before the weights are loaded, so a file without a vocabulary fails at once.
    let detokenizer = if args.text {
        Some(Detokenizer::from_file(&file)?.ok_or_else(|| no_vocabulary("--text"))?)
    } else {
        None
    };
    let text_prompts = args.prompts.iter().any(|p| matches!(p, Prompt::Text(_)));
    let tokenizer = if text_prompts || args.stop {
        let option = if text_prompts { "--prompt" } else { "--stop" };
        Some(Tokenizer::from_file(&file)?.ok_or_else(|| no_vocabulary(option))?)
    } else {
        None
    };
    let prompts = prompt_ids(tokenizer.as_ref(), &args.prompts)?;
    let stops = match &tokenizer {
        Some(t) if args.stop => t.end_of_generation().to_vec(),
        _ => Vec::new(),
    };
    let model = load::<T>(file, stream)?;
    let (mut cache, mut kv, max_blocks) = kv_cache(&model, &prompts, args.steps)?;
    let mut samplers = samplers(args.sampling, prompts.len())?;
    let (seqs, first) = prefill(&model, &mut cache, &mut kv, &prompts, &mut samplers)?;
    let generated = if args.graph {
        let mut workspace = model
            .decode_workspace(&mut kv, seqs.len(), max_blocks)
            .map_err(|e| format!("the decode workspace for {} sequences: {e}", seqs.len()))?;
        let mut graph = workspace.graph()?;
        let mode = if graph.is_captured() {
            "graph"
        } else {
            "eager workspace: no graphs here, or whole-weight GEMMs"
        };
        decode(args.steps, mode, &mut samplers, first, &stops, |ids| {
            graph.step_tokens(&mut cache, &seqs, ids)?;
            host_rows(graph.logits().ok_or("the model has no output head")?)
        })?
    } else {
        decode(args.steps, "eager", &mut samplers, first, &stops, |ids| {
            let out = model.decode_step(&mut cache, &mut kv, &seqs, &model.embed(ids)?)?;
            host_rows(&model.logits(&out)?)
        })?
    };
    for ids in generated {
        if let Some(d) = &detokenizer {
            println!("{}", d.decode(&ids)?);
            continue;
        }
        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("{}", ids.join(" "));
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
    let result = (|| -> Res<()> {
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
