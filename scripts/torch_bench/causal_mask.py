"""PyTorch side of crates/rocm-bench/src/bench/causal_mask.rs: the same shape and minimal-traffic
bytes.

scores.masked_fill_(mask, -inf) with mask = triu(ones(seq, seq), diagonal=1) broadcast over the
32 matrices. The byte count is the masked elements written once, as for rocmforge's kernel;
masked_fill_ itself also reads the scores and the mask.
"""

import torch

BATCH, SEQ = 32, 4096
DTYPES = [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]


def run(time_ms, row):
    rows = []
    mask = torch.triu(torch.ones(SEQ, SEQ, device="cuda", dtype=torch.bool), diagonal=1)
    masked = BATCH * SEQ * (SEQ - 1) // 2
    for name, dtype in DTYPES:
        scores = torch.zeros(BATCH, SEQ, SEQ, device="cuda", dtype=dtype)
        ms = time_ms(lambda: scores.masked_fill_(mask, float("-inf")))
        rows.append(row("torch masked_fill triu", name, f"{BATCH}x{SEQ}x{SEQ}", ms, masked * scores.element_size()))
        del scores
    return rows
