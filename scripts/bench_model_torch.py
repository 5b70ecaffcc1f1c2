#!/usr/bin/env python3
"""PyTorch side of `rocm-bench bench model`: Hugging Face's Llama decoder at Llama-3-8B layer
shapes, timed the way the Rust rows are, printed in the same columns.

On the GPU host (torch and transformers installed), from the repository root:

    python3 scripts/bench_model_torch.py [--iters 20] [--no-torch-compile] [--layers 1]

`rocm-bench bench model` runs it after its own rows. Without torch or transformers it prints one
line saying so and exits 0.

What it measures. A `LlamaModel` of `--layers` decoder layers (default 1; hidden 4096,
intermediate 14336, 32 query and 8 KV heads of 128, rope_theta 500000, rms eps 1e-5, SDPA
attention), bf16 weights on cuda, random init; the input rows are given as `inputs_embeds`, so
no embedding and no head is run (the final RMSNorm is, a few us). Each configuration is run
eagerly and through `torch.compile` (default mode), the compile warm-up untimed and any
recompile during the timed steps turned into an error (that row then says why it failed).

- decode b1/b8/b32: one token for each of 1, 8 or 32 sequences whose StaticCache already holds
  CONTEXT (`--context`, default 512; `bench model` passes its own 128 and 2 layers) tokens (filled by an eager prefill), then untimed warm-up steps and `--iters`
  timed ones; each step timed whole, from an idle GPU to an idle GPU (host work included, as
  the Rust rows' wall clock), median, divided by the layers. Bytes: one layer's bf16 weights, so
  "of copy" is the weight-read rate against the copy bandwidth this script measures itself
  (`torch copy` row: a 1 GiB device-to-device `copy_`, read + write bytes). The static cache is
  CONTEXT + warm-up + iters + 1 long; SDPA reads all of it under the mask.
- prefill 512: 512 tokens of one sequence (no cache kept), per layer, TFLOP/s as
  2 x tokens x projection parameters.
"""

import argparse
import inspect
import statistics
import sys
import time

HIDDEN = 4096
FFN = 14_336
Q_HEADS = 32
KV_HEADS = 8
HEAD_DIM = 128
ROPE_THETA = 500_000.0
EPS = 1e-5
CONTEXT = 512
PREFILL = 512
BATCHES = (1, 8, 32)
DTYPE_NAME = "BF16"
# Projection parameters of one layer (q, k, v, o, gate, up, down), as the Rust prefill row counts.
PROJ_PARAMS = HIDDEN * (Q_HEADS * HEAD_DIM + 2 * KV_HEADS * HEAD_DIM) + Q_HEADS * HEAD_DIM * HIDDEN + 3 * HIDDEN * FFN
# Every weight of one layer (projections and the two norms), bf16.
LAYER_BYTES = 2 * (PROJ_PARAMS + 2 * HIDDEN)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=20, help="timed steps per row (median reported)")
    p.add_argument(
        "--torch-compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time torch.compile (default mode) rows (default: on)",
    )
    p.add_argument("--layers", type=int, default=1, help="decoder layers run; times are per layer")
    p.add_argument("--context", type=int, default=CONTEXT, help="tokens each decode row's sequences hold")
    return p.parse_args()


def fmt_row(kernel, shape, ms, nbytes, copy_gbps, flops=None, dtype=DTYPE_NAME):
    """One line in rocm-bench's columns: kernel, dtype, shape, time(us), GB/s, of copy, TFLOP/s."""
    gbps = nbytes / (ms * 1e6)
    tflops = f"{flops / (ms * 1e9):.1f}" if flops else ""
    return f"{kernel:<28} {dtype:<5} {shape:<24} {ms * 1e3:>10.1f} {gbps:>9.0f} {gbps / copy_gbps:>8.2f} {tflops:>9}"


def failed_row(kernel, err):
    reason = " ".join(f"{type(err).__name__}: {err}".split())
    return f"{kernel:<28} {DTYPE_NAME:<5} failed: {reason[:200]}"


def main():
    global CONTEXT
    args = parse_args()
    CONTEXT = max(args.context, 1)
    try:
        import torch
    except ImportError as e:
        print(f"torch rows: absent, torch is not importable ({e})")
        return 0
    try:
        import transformers
        from transformers import LlamaConfig, LlamaModel
    except ImportError as e:
        print(f"torch rows: absent, transformers is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        print(f"torch rows: absent, torch {torch.__version__} sees no GPU")
        return 0
    iters = max(args.iters, 1)
    layers = max(args.layers, 1)
    dev = torch.device("cuda")
    torch.manual_seed(0)

    # Copy bandwidth of this process: a 1 GiB device-to-device copy, read + write bytes.
    n = 1 << 30
    src = torch.full((n,), 0x5A, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_ms = time_gpu(torch, lambda: dst.copy_(src), warm=3, iters=max(iters, 10))
    del src, dst
    copy_gbps = 2 * n / (copy_ms * 1e6)

    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=layers,
        num_attention_heads=Q_HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=8192,
        rms_norm_eps=EPS,
        # transformers 5 reads rope_parameters, 4.x rope_theta; each ignores the other.
        rope_theta=ROPE_THETA,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        attn_implementation="sdpa",
        use_cache=True,
    )
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", None))
    torch.set_default_dtype(torch.bfloat16)
    with dev:
        model = LlamaModel(cfg)
    torch.set_default_dtype(torch.float32)
    model = model.to(device=dev, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        for name, w in model.named_parameters():
            if w.dim() == 2:
                w.normal_(0.0, 0.02)
            elif "norm" in name:
                w.fill_(1.0)
    print(
        f"torch rows: torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.cuda.get_device_name()}, HF LlamaModel {layers} layer(s) bf16 sdpa, rope_theta {theta}, "
        f"decode context {CONTEXT}; times per layer; of copy against torch's own copy row"
    )
    print(fmt_row("torch copy", "1 GiB d2d", copy_ms, 2 * n, copy_gbps, dtype="u8"))
    sys.stdout.flush()

    forward_params = inspect.signature(model.forward).parameters
    modes = [("eager", model)]
    if args.torch_compile:
        modes.append(("compile", torch.compile(model)))
    for mode, fn in modes:
        t0 = time.monotonic()
        for batch in BATCHES:
            kernel = f"torch {mode} decode b{batch}"
            try:
                ms = decode_step_ms(torch, model, fn, mode, cfg, batch, iters, forward_params)
                layer_ms = ms / layers
                tok_s = batch / (layer_ms * 32 / 1e3)
                print(fmt_row(kernel, f"8B layer: {tok_s:.0f} tok/s@32L", layer_ms, LAYER_BYTES, copy_gbps))
            except Exception as e:  # one row's failure never stops the others
                print(failed_row(kernel, e))
            sys.stdout.flush()
        kernel = f"torch {mode} prefill {PREFILL}"
        try:
            x = torch.randn(1, PREFILL, HIDDEN, device=dev, dtype=torch.bfloat16)

            def prefill():
                fn(inputs_embeds=x, use_cache=False)

            ms = time_steps(torch, prefill, mode, warm=3, iters=max(iters // 4, 3))
            layer_ms = ms / layers
            tok_s = PREFILL / (layer_ms * 32 / 1e3)
            print(
                fmt_row(
                    kernel,
                    f"8B layer: {tok_s:.0f} tok/s@32L",
                    layer_ms,
                    LAYER_BYTES,
                    copy_gbps,
                    flops=2.0 * PREFILL * PROJ_PARAMS,
                )
            )
        except Exception as e:
            print(failed_row(kernel, e))
        if mode == "compile":
            print(f"torch rows: torch.compile rows took {time.monotonic() - t0:.0f} s, compilation included")
        sys.stdout.flush()
    return 0


def time_gpu(torch, fn, warm, iters):
    """Median ms of fn() between CUDA events, GPU work only (the copy row)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    return statistics.median(event_times(torch, fn, iters, idle_first=False))


def time_steps(torch, fn, mode, warm, iters):
    """Median ms of whole calls of fn(), each from an idle GPU to an idle GPU (host work
    included). Warm-up (and for compile, compilation) untimed; a recompile while timing is an
    error, not a silently slower row."""
    with torch.no_grad():
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        with no_recompile(torch, mode):
            return statistics.median(event_times(torch, fn, iters, idle_first=True))


def event_times(torch, fn, iters, idle_first):
    """ms of each of `iters` calls of fn() between CUDA events; with `idle_first`, the GPU is
    idle before each call starts."""
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if idle_first:
            torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def no_recompile(torch, mode):
    import contextlib

    if mode != "compile" or not hasattr(torch._dynamo.config, "error_on_recompile"):
        return contextlib.nullcontext()
    try:
        return torch._dynamo.config.patch(error_on_recompile=True)
    except Exception:  # a torch without the flag: time without the guard
        return contextlib.nullcontext()


def static_cache(cfg, batch, max_len, dtype, device):
    """transformers' StaticCache across constructor versions: 5.x (and 4.56+) take the config and
    max_cache_len and size batch, dtype and device at the first update; older ones need them."""
    from transformers import StaticCache

    attempts = [
        dict(config=cfg, max_cache_len=max_len),
        dict(config=cfg, max_batch_size=batch, max_cache_len=max_len, device=device, dtype=dtype),
        dict(config=cfg, batch_size=batch, max_cache_len=max_len, device=device, dtype=dtype),
    ]
    errors = []
    for kw in attempts:
        try:
            return StaticCache(**kw)
        except TypeError as e:
            errors.append(str(e))
    raise TypeError("StaticCache: no known constructor fits: " + " | ".join(errors))


def decode_step_ms(torch, model, fn, mode, cfg, batch, iters, forward_params):
    """Median ms of a decode step of `batch` sequences of CONTEXT tokens through fn."""
    dev = torch.device("cuda")
    warm = 5 if mode == "compile" else 3
    steps = warm + iters
    cache = static_cache(cfg, batch, CONTEXT + steps + 1, torch.bfloat16, dev)
    with_cache_position = "cache_position" in forward_params

    def kwargs(start, length):
        kw = {
            "past_key_values": cache,
            "use_cache": True,
            "position_ids": torch.arange(start, start + length, device=dev).unsqueeze(0).expand(batch, -1),
        }
        if with_cache_position:  # gone from newer transformers: the cache counts itself
            kw["cache_position"] = torch.arange(start, start + length, device=dev)
        return kw

    with torch.no_grad():
        context = torch.randn(batch, CONTEXT, HIDDEN, device=dev, dtype=torch.bfloat16)
        model(inputs_embeds=context, **kwargs(0, CONTEXT))  # eager: the cache holds CONTEXT tokens
        del context
    x = torch.randn(batch, 1, HIDDEN, device=dev, dtype=torch.bfloat16)
    # Every step's inputs made before timing; each step appends one token to each sequence.
    per_step = [kwargs(CONTEXT + i, 1) for i in range(steps)]
    it = iter(per_step)

    def step():
        fn(inputs_embeds=x, **next(it))

    return time_steps(torch, step, mode, warm=warm, iters=iters)


if __name__ == "__main__":
    sys.exit(main())
