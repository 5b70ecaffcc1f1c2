//! `rocm-bench`: the tools that run rocmforge's kernels, kept out of xtask so that building the
//! task runner never waits for the kernels (rocm-kernels embeds every compiled code object, and
//! rebuilds whenever `cargo xtask kernels` writes one).
//!
//! `cargo xtask bench` and `cargo xtask attention-dump` forward here; on a GPU host,
//! `gpu-archive` packs this binary as `.gpu/rocm-bench`, next to `.gpu/xtask`.

mod attention_dump;
mod bench;
mod kernels;
mod model_run;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: rocm-bench <command> [args]

commands:
  bench [FILTER...] [--iters N] [--list]
                      time kernels on the GPU: GB/s or TFLOP/s against measured copy bandwidth
  attention-dump DIR  write attention inputs/outputs for scripts/check_attention_torch.py
  kernels             the kernel code objects embedded in this build (and in the test binaries
                      built with it)
  model-run MODEL.gguf --tokens ID,ID,... [--steps N] [--dtype f32|f16|bf16] [--reference] --out DIR
                      greedy generation from token ids, every step's logits to DIR/logits.npy and
                      the chosen ids to DIR/tokens.npy, for scripts/check_model_hf.py
                      (--reference: rocm-model's f64 CPU reference instead of the GPU)
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        std::process::exit(2);
    };
    let result = match command.as_str() {
        "bench" => bench::run(rest),
        "attention-dump" => attention_dump::run(rest),
        "kernels" => kernels::run(rest),
        "model-run" => model_run::run(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n{USAGE}").into()),
    };
    if let Err(e) = result {
        eprintln!("rocm-bench {command}: error: {e}");
        std::process::exit(1);
    }
}
