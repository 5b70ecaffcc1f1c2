"""PyTorch side of crates/rocm-bench/src/bench/swiglu.rs: the same shapes and minimal-traffic byte
counts.

silu(gate) * up eager (two kernels: silu, then the product) and torch.compile'd (one fused
kernel), from separate tensors and from the fused [rows, 2 * ffn] gate-up tensor (gate first).
"""

import torch
import torch.nn.functional as F

ROWS, FFN = 16384, 11008
DTYPES = [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]


def swiglu(gate, up):
    return F.silu(gate) * up


def swiglu_fused(gate_up):
    return F.silu(gate_up[..., :FFN]) * gate_up[..., FFN:]


def run(time_ms, row):
    rows = []
    shape = f"{ROWS}x{FFN}"
    try:
        compiled = torch.compile(swiglu)
        compiled_fused = torch.compile(swiglu_fused)
    except Exception as e:  # no triton, or an old torch
        print(f"torch.compile unavailable: {e}")
        compiled = compiled_fused = None
    for name, dtype in DTYPES:
        gate_up = torch.empty(ROWS, 2 * FFN, device="cuda", dtype=dtype).uniform_(-6, 6)
        gate = gate_up[:, :FFN].contiguous()
        up = gate_up[:, FFN:].contiguous()
        nbytes = 3 * ROWS * FFN * gate.element_size()
        variants = [
            ("torch silu*mul", lambda: swiglu(gate, up)),
            ("torch silu*mul fused gate-up", lambda: swiglu_fused(gate_up)),
        ]
        if compiled is not None:
            variants += [
                ("torch silu*mul compile", lambda: compiled(gate, up)),
                ("torch silu*mul fused compile", lambda: compiled_fused(gate_up)),
            ]
        for label, fn in variants:
            try:
                rows.append(row(label, name, shape, time_ms(fn), nbytes))
            except Exception as e:
                print(f"{label} failed for {name}: {e}")
        del gate_up, gate, up
    return rows
