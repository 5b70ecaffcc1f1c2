"""PyTorch side of crates/rocm-bench/src/bench/softmax.rs: softmax over 16384 rows of 4096, each
dtype, plain and causal, with the same minimal-traffic byte counts.

- plain: torch.softmax(x, -1). PyTorch's softmax has no scale argument, and attention code folds
  it into Q or the scores elsewhere, so the scale is left out here (rocmforge applies it inside).
- causal: x viewed as 4 heads of 4096 queries over 4096 keys, masked_fill of the upper triangle
  with -inf, then softmax (what eager attention code does; the masked_fill is a pass of its own).
  Bytes: the visible part of x read plus all of y written, as in the Rust benchmark.
"""

import torch

ROWS, COLS, SEQ_Q = 16384, 4096, 4096
DTYPES = [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")]


def run(time_ms, row):
    rows = []
    n = ROWS * COLS
    heads = ROWS // SEQ_Q
    # Query i sees keys 0..=i + (COLS - SEQ_Q): hide the rest.
    hidden = torch.ones(SEQ_Q, COLS, dtype=torch.bool, device="cuda").triu(COLS - SEQ_Q + 1)
    visible = heads * SEQ_Q * (SEQ_Q + 1) // 2
    shape = f"{ROWS} x {COLS}"
    for dtype, name in DTYPES:
        x = (torch.randn(ROWS, COLS, device="cuda") * 3).to(dtype)
        size = x.element_size()
        ms = time_ms(lambda: torch.softmax(x, dim=-1))
        rows.append(row("torch softmax", name, shape, ms, 2 * n * size))
        x3 = x.view(heads, SEQ_Q, COLS)
        ms = time_ms(lambda: torch.softmax(x3.masked_fill(hidden, float("-inf")), dim=-1))
        rows.append(row("torch softmax causal", name, shape, ms, (visible + n) * size))
        del x, x3
    return rows
