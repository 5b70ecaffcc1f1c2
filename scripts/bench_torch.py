#!/usr/bin/env python3
"""PyTorch side of `cargo xtask bench`, for the same device in the same session.

Runs each module in scripts/torch_bench/ (named like the kernel family it mirrors), with the
same shapes and the same minimal-traffic byte counts as crates/rocm-bench/src/bench/, and prints
the same table. Usage on the GPU host: python3 scripts/bench_torch.py [FILTER...]
"""

import importlib
import pathlib
import sys

import torch

ITERS = 50
# About 0.5 ms at 2 GHz: longer than Python takes to queue the timed call, even an eager
# sequence of several operations, so PyTorch is timed on the GPU alone (its best case).
SPIN_CYCLES = 1_000_000


def time_ms(fn):
    """Median milliseconds of fn(), CUDA events around each call, after warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(ITERS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # Queue the call behind a spin so the start event fires when the GPU reaches it, not
        # while it waits for Python to launch it (xtask bench does the same).
        torch.cuda._sleep(SPIN_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def row(kernel, dtype, shape, ms, nbytes, flops=None):
    return {"kernel": kernel, "dtype": dtype, "shape": shape, "ms": ms, "bytes": nbytes, "flops": flops}


def copy_rows():
    n = 1 << 30
    src = torch.full((n,), 0x5A, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return [row("torch copy", "u8", "1 GiB", time_ms(lambda: dst.copy_(src)), 2 * n)]


def main():
    filters = sys.argv[1:]
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()} torch {torch.__version__}")
    rows = copy_rows()
    here = pathlib.Path(__file__).parent / "torch_bench"
    sys.path.insert(0, str(here))
    for path in sorted(here.glob("*.py")):
        if filters and not any(f in path.stem for f in filters):
            continue
        rows += importlib.import_module(path.stem).run(time_ms, row)
    copy = rows[0]["bytes"] / (rows[0]["ms"] * 1e6)
    print(f"{'kernel':<28} {'dtype':<5} {'shape':<24} {'time(us)':>10} {'GB/s':>9} {'of copy':>8} {'TFLOP/s':>9}")
    for r in rows:
        gbps = r["bytes"] / (r["ms"] * 1e6)
        tflops = f"{r['flops'] / (r['ms'] * 1e9):.1f}" if r.get("flops") else ""
        print(
            f"{r['kernel']:<28} {r['dtype']:<5} {r['shape']:<24} {r['ms'] * 1e3:>10.1f} {gbps:>9.0f} {gbps / copy:>8.2f} {tflops:>9}"
        )


if __name__ == "__main__":
    main()
