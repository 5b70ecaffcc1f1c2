//! `rocm-bench model-run MODEL.gguf --tokens 1,2,3 [--steps N] [--dtype f32|f16|bf16]
//! [--reference] --out DIR`: token ids through rocm-model, greedy, with every step's logits
//! written out, for `scripts/check_model_hf.py` to compare with Hugging Face (`LlamaForCausalLM`,
//! `Qwen2ForCausalLM`, `Glm4ForCausalLM`: any architecture `Model::load` reads).
//!
//! The model is loaded with `Model::<T>::load` (activations in `--dtype`, default f32); the prompt
//! is embedded and prefilled, the last token's logits give the first greedy token; then each of
//! the `N` decode steps (default 20) feeds the token chosen before it. Written to DIR:
//!
//! - `logits.npy`: f32 `[N + 1, vocab]`, the prompt's last-token logits, then each step's (a
//!   16-bit run's logits widened exactly);
//! - `tokens.npy`: i64 `[N + 1]`, the token chosen from each row (`Sampling::GREEDY`);
//! - `run.json`: what ran (dtype, prompt, steps, vocab).
//!
//! `--reference` runs rocm-model's f64 CPU reference instead (`ReferenceModel`, exact rounding,
//! logits rounded to f32 when written): no GPU needed, and on a GPU host it tells a GPU-path
//! error from a convention error. The model file, the ids and the options are checked before a
//! GPU is looked for.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocm_kernels::gemm::GemmElement;
use rocm_model::kv_cache::PagedCache;
use rocm_model::model::{Model, ModelConfig, ReferenceModel, Rounding, Sampler, Sampling, TOKEN_EMBEDDING};
use rocm_model::npy::{write_npy_f32, write_npy_i64};
use rocm_model::{GgufError, GgufFile};
use rocm_runtime::{Backend, DeviceBuffer, Stream, bf16, f16};

use crate::Result;

const USAGE: &str = "usage: rocm-bench model-run MODEL.gguf --tokens ID,ID,... [--steps N] \
                     [--dtype f32|f16|bf16] [--reference] --out DIR";

/// KV-cache block size of the run (tokens per block).
const BLOCK_SIZE: usize = 16;

#[derive(Debug, PartialEq)]
struct Args {
    model: PathBuf,
    tokens: Vec<u32>,
    steps: usize,
    /// `None` for the CPU reference.
    dtype: Option<&'static str>,
    out: PathBuf,
}

fn parse(args: &[String]) -> std::result::Result<Args, String> {
    let (mut model, mut tokens, mut steps, mut dtype, mut out) = (None, None, None, None, None);
    let mut reference = false;
    let mut it = args.iter();
    fn set<V>(slot: &mut Option<V>, name: &str, v: V) -> std::result::Result<(), String> {
        match slot.replace(v) {
            Some(_) => Err(format!("{name} given twice")),
            None => Ok(()),
        }
    }
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--tokens" => set(&mut tokens, "--tokens", parse_ids(value("--tokens")?)?)?,
            "--steps" => {
                let v = value("--steps")?;
                let n = v.parse().map_err(|e| format!("--steps {v}: {e} (a count of decode steps)"))?;
                set(&mut steps, "--steps", n)?
            }
            "--dtype" => {
                let v = value("--dtype")?;
                let d = match v.as_str() {
                    "f32" => "f32",
                    "f16" => "f16",
                    "bf16" => "bf16",
                    _ => return Err(format!("--dtype must be f32, f16 or bf16, not `{v}`")),
                };
                set(&mut dtype, "--dtype", d)?
            }
            "--out" => set(&mut out, "--out", PathBuf::from(value("--out")?))?,
            "--reference" => {
                if std::mem::replace(&mut reference, true) {
                    return Err("--reference given twice".into());
                }
            }
            s if s.starts_with('-') => return Err(format!("unknown option `{s}`")),
            s => {
                if let Some(first) = model.replace(PathBuf::from(s)) {
                    return Err(format!("one model file only: `{s}` after `{}`", first.display()));
                }
            }
        }
    }
    if reference && dtype.is_some() {
        return Err("--reference runs the f64 CPU reference: it takes no --dtype".into());
    }
    Ok(Args {
        model: model.ok_or("no MODEL.gguf given")?,
        tokens: tokens.ok_or("--tokens is required (the prompt's ids, comma-separated)")?,
        steps: steps.unwrap_or(20),
        dtype: if reference { None } else { Some(dtype.unwrap_or("f32")) },
        out: out.ok_or("--out DIR is required")?,
    })
}

/// `1,2,3` (spaces allowed around ids) as token ids; at least one.
fn parse_ids(list: &str) -> std::result::Result<Vec<u32>, String> {
    let ids = list
        .split(',')
        .map(|t| {
            t.trim().parse::<u32>().map_err(|e| format!("--tokens: `{}` is not a token id: {e}", t.trim()))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(ids)
}

/// What a run produced: `tokens.len()` rows of `vocab` logits, and the token of each row.
#[derive(Debug)]
struct Run {
    vocab: usize,
    logits: Vec<f32>,
    tokens: Vec<u32>,
}

/// The greedy loop: `last_logits(ids, prefill)` runs `ids` as the sequence's next tokens (the
/// prompt first, then one token a step) and returns the last one's logits.
fn generate(
    prompt: &[u32],
    steps: usize,
    mut last_logits: impl FnMut(&[u32], bool) -> Result<Vec<f32>>,
) -> Result<Run> {
    let mut sampler = Sampler::new(Sampling::GREEDY)?;
    let mut row = last_logits(prompt, true)?;
    let vocab = row.len();
    let mut run = Run { vocab, logits: Vec::with_capacity((steps + 1) * vocab), tokens: Vec::new() };
    loop {
        let token = sampler.sample(&row)?;
        run.logits.extend_from_slice(&row);
        run.tokens.push(token);
        if run.tokens.len() > steps {
            return Ok(run);
        }
        row = last_logits(&[token], false)?;
        if row.len() != vocab {
            return Err(format!("a step gave {} logits, the prompt {vocab}", row.len()).into());
        }
    }
}

fn gpu_run<T: GemmElement>(
    file: Arc<GgufFile>,
    stream: &Stream,
    prompt: &[u32],
    steps: usize,
) -> Result<Run> {
    let model = Model::<T>::load(file, stream)?;
    // Every token but the last chosen one goes through the model.
    let blocks = (prompt.len() + steps).div_ceil(BLOCK_SIZE);
    let mut cache = PagedCache::new(blocks, BLOCK_SIZE)?;
    let mut kv = model.new_kv_cache(&cache)?;
    let seq = cache.add_sequence();
    let to_host = |logits: DeviceBuffer<T>| -> Result<Vec<f32>> {
        Ok(logits.to_vec()?.iter().map(|v| v.to_f32()).collect())
    };
    generate(prompt, steps, |ids, prefill| {
        let x = model.embed(ids)?;
        let out = if prefill {
            model.last_token(&model.prefill(&mut cache, &mut kv, seq, &x)?)?
        } else {
            model.decode_step(&mut cache, &mut kv, &[seq], &x)?
        };
        to_host(model.logits(&out)?)
    })
}

fn reference_run(file: &GgufFile, prompt: &[u32], steps: usize) -> Result<Run> {
    let reference = ReferenceModel::load(file, Rounding::Exact)?;
    let hidden = reference.config().hidden;
    let mut seq = reference.new_sequence();
    generate(prompt, steps, |ids, _| {
        let out = reference.forward(&mut seq, &reference.embed(ids)?)?;
        let logits = reference.logits(&out[out.len() - hidden..])?;
        Ok(logits.iter().map(|&v| v as f32).collect())
    })
}

/// Checks what can be checked without a GPU: the configuration, an embedding, the ids' range.
fn check_model_and_ids(file: &GgufFile, tokens: &[u32]) -> Result<()> {
    ModelConfig::from_metadata(file.metadata())?;
    let info = file
        .tensor(TOKEN_EMBEDDING)
        .map_err(|_| format!("the model has no token embedding ({TOKEN_EMBEDDING}): ids cannot go in"))?;
    let vocab = info.dims().get(1).copied().unwrap_or(0);
    if let Some((i, t)) = tokens.iter().enumerate().find(|&(_, &t)| u64::from(t) >= vocab) {
        return Err(format!(
            "token id {t} (at {i} in --tokens) is out of range: the vocabulary has {vocab} tokens"
        )
        .into());
    }
    Ok(())
}

pub fn run(args: &[String]) -> Result<()> {
    let args = parse(args).map_err(|e| format!("{e}\n{USAGE}"))?;
    let file = Arc::new(GgufFile::open(&args.model).map_err(|e| match e {
        // These already name the path.
        GgufError::Io { .. } | GgufError::NotAFile { .. } => e.to_string(),
        _ => format!("{}: {e}", args.model.display()),
    })?);
    check_model_and_ids(&file, &args.tokens).map_err(|e| format!("{}: {e}", args.model.display()))?;
    let run = match args.dtype {
        None => reference_run(&file, &args.tokens, args.steps)?,
        Some(dtype) => {
            let backend = Backend::open(0).map_err(|e| {
                format!("{e}\n(--reference runs rocm-model's f64 CPU reference without a GPU)")
            })?;
            let stream = backend.create_stream()?;
            let (file, t, n) = (file.clone(), &args.tokens, args.steps);
            match dtype {
                "f32" => gpu_run::<f32>(file, &stream, t, n)?,
                "f16" => gpu_run::<f16>(file, &stream, t, n)?,
                _ => gpu_run::<bf16>(file, &stream, t, n)?,
            }
        }
    };
    let dtype = args.dtype.unwrap_or("reference");
    write_run(&args.out, &run, dtype, &args.tokens)?;
    let ids: Vec<String> = run.tokens.iter().map(u32::to_string).collect();
    println!(
        "model-run: {} ({dtype}): {} prompt tokens, {} steps -> {}; wrote {} (logits.npy [{}, {}], tokens.npy)",
        args.model.display(),
        args.tokens.len(),
        args.steps,
        ids.join(","),
        args.out.display(),
        run.tokens.len(),
        run.vocab
    );
    Ok(())
}

fn write_run(dir: &Path, run: &Run, dtype: &str, prompt: &[u32]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--out {}: {e}", dir.display()))?;
    let rows = run.tokens.len() as u64;
    let mut logits = Vec::new();
    write_npy_f32(&mut logits, &[rows, run.vocab as u64], &run.logits)?;
    std::fs::write(dir.join("logits.npy"), logits)?;
    let mut tokens = Vec::new();
    let ids: Vec<i64> = run.tokens.iter().map(|&t| i64::from(t)).collect();
    write_npy_i64(&mut tokens, &[rows], &ids)?;
    std::fs::write(dir.join("tokens.npy"), tokens)?;
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    let json = format!(
        "{{\"dtype\": \"{dtype}\", \"prompt\": [{}], \"steps\": {}, \"vocab\": {}, \"tokens\": [{}]}}\n",
        list(prompt),
        rows - 1,
        run.vocab,
        list(&run.tokens)
    );
    std::fs::write(dir.join("run.json"), json)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rocm_model::GgmlType;
    use rocm_model::model::Architecture;
    use rocm_model::model::synthetic::{SyntheticSpec, SyntheticVocab};

    use super::*;

    fn strings(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn arguments_parse_with_defaults() {
        let a = parse(&strings("m.gguf --tokens 1,2,3 --out d")).unwrap();
        assert_eq!(
            a,
            Args {
                model: "m.gguf".into(),
                tokens: vec![1, 2, 3],
                steps: 20,
                dtype: Some("f32"),
                out: "d".into()
            }
        );
        let a = parse(&strings("--steps 4 --dtype bf16 --out d m.gguf --tokens 7")).unwrap();
        assert_eq!((a.steps, a.dtype, a.tokens), (4, Some("bf16"), vec![7]));
        let a = parse(&strings("m.gguf --tokens 0 --reference --out d")).unwrap();
        assert_eq!(a.dtype, None);
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        for (args, want) in [
            ("--tokens 1 --out d", "no MODEL.gguf"),
            ("m.gguf --out d", "--tokens is required"),
            ("m.gguf --tokens 1", "--out DIR is required"),
            ("m.gguf --tokens 1,x --out d", "`x` is not a token id"),
            ("m.gguf --tokens 1,,2 --out d", "`` is not a token id"),
            ("m.gguf --tokens -1 --out d", "`-1` is not a token id"),
            ("m.gguf --tokens 1 --steps -2 --out d", "--steps -2"),
            ("m.gguf --tokens 1 --dtype f64 --out d", "f32, f16 or bf16, not `f64`"),
            ("m.gguf --tokens 1 --dtype f16 --reference --out d", "takes no --dtype"),
            ("m.gguf --tokens 1 --tokens 2 --out d", "--tokens given twice"),
            ("m.gguf n.gguf --tokens 1 --out d", "one model file only: `n.gguf` after `m.gguf`"),
            ("m.gguf --tokens 1 --out", "--out needs a value"),
            ("m.gguf --tokens 1 --out d --top-k 3", "unknown option `--top-k`"),
        ] {
            let e = parse(&strings(args)).unwrap_err();
            assert!(e.contains(want), "{args}: {e}");
        }
    }

    /// The CPU reference end to end on a synthetic model: shapes, each token the argmax of its
    /// row, and the steps' logits those of the whole sequence run at once (teacher forcing).
    #[test]
    fn reference_run_writes_consistent_logits_and_tokens() {
        let base = SyntheticSpec::small(Architecture::Llama);
        let spec = SyntheticSpec {
            vocab: Some(SyntheticVocab { size: 50, ty: GgmlType::F32, tied: false }),
            types: |_, _| GgmlType::F32,
            ..base
        };
        let dir = std::env::temp_dir().join(format!("rocm-bench-model-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        std::fs::write(&path, spec.to_bytes().unwrap()).unwrap();
        let out = dir.join("out");
        let args = [path.to_str().unwrap(), "--tokens", "3,1,4,1,5", "--steps", "3", "--reference"];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["--out".to_string(), out.to_str().unwrap().to_string()]);
        run(&args).unwrap();

        let logits = std::fs::read(out.join("logits.npy")).unwrap();
        let tokens = std::fs::read(out.join("tokens.npy")).unwrap();
        let body = |b: &[u8]| b[10 + u16::from_le_bytes([b[8], b[9]]) as usize..].to_vec();
        let logits: Vec<f32> =
            body(&logits).chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        let tokens: Vec<i64> =
            body(&tokens).chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!((logits.len(), tokens.len()), (4 * 50, 4));
        for (row, &t) in logits.chunks(50).zip(&tokens) {
            let best = (0..50).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            assert_eq!(best as i64, t);
        }
        // Teacher forcing: the prompt and the first three chosen tokens in one pass.
        let file = GgufFile::open(&path).unwrap();
        let reference = ReferenceModel::load(&file, Rounding::Exact).unwrap();
        let mut ids = vec![3, 1, 4, 1, 5];
        ids.extend(tokens[..3].iter().map(|&t| t as u32));
        let mut seq = reference.new_sequence();
        let h = reference.forward(&mut seq, &reference.embed(&ids).unwrap()).unwrap();
        let all = reference.logits(&h).unwrap();
        for (r, row) in logits.chunks(50).enumerate() {
            let want = &all[(4 + r) * 50..][..50];
            for (a, b) in row.iter().zip(want) {
                assert!((*a as f64 - b).abs() <= 1e-6 * b.abs().max(1.0), "row {r}: {a} vs {b}");
            }
        }
        let json = std::fs::read_to_string(out.join("run.json")).unwrap();
        assert!(json.starts_with("{\"dtype\": \"reference\", \"prompt\": [3, 1, 4, 1, 5], \"steps\": 3"));

        // Out-of-range ids are refused before anything runs, naming the id.
        let bad: Vec<String> = [path.to_str().unwrap(), "--tokens", "1,50", "--reference", "--out", "x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let e = run(&bad).unwrap_err().to_string();
        assert!(e.contains("token id 50 (at 1 in --tokens) is out of range"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
