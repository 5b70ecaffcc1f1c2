"""PyTorch side of crates/rocm-bench/src/bench/rmsnorm.rs: the same shapes and minimal-traffic byte
counts.

rms_norm through torch.nn.functional.rms_norm; the fused residual form as PyTorch users write it
(residual += x, then rms_norm of the residual), eager and, where it works, torch.compile'd.
"""

import torch
import torch.nn.functional as F

ROWS, COLS, EPS = 16384, 4096, 1e-5
DTYPES = [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]


def add_rms_norm(x, residual, weight):
    residual.add_(x)
    return F.rms_norm(residual, (COLS,), weight, EPS)


def run(time_ms, row):
    rows = []
    shape = f"{ROWS}x{COLS}"
    n = ROWS * COLS
    try:
        compiled = torch.compile(add_rms_norm)
    except Exception as e:  # no triton, or an old torch
        print(f"torch.compile unavailable: {e}")
        compiled = None
    for name, dtype in DTYPES:
        x = torch.empty(ROWS, COLS, device="cuda", dtype=dtype).uniform_(-1, 1)
        residual = torch.empty_like(x).uniform_(-1, 1)
        weight = torch.empty(COLS, device="cuda", dtype=dtype).uniform_(-1, 1)
        size = x.element_size()
        ms = time_ms(lambda: F.rms_norm(x, (COLS,), weight, EPS))
        rows.append(row("torch rms_norm", name, shape, ms, (2 * n + COLS) * size))
        ms = time_ms(lambda: add_rms_norm(x, residual, weight))
        rows.append(row("torch add+rms_norm", name, shape, ms, (4 * n + COLS) * size))
        if compiled is not None:
            try:
                ms = time_ms(lambda: compiled(x, residual, weight))
                rows.append(row("torch add+rms_norm compile", name, shape, ms, (4 * n + COLS) * size))
            except Exception as e:
                print(f"torch.compile of add+rms_norm failed for {name}: {e}")
                compiled = None
        del x, residual, weight
    return rows
