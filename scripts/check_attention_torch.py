#!/usr/bin/env python3
"""Checks rocmforge's attention against PyTorch's scaled_dot_product_attention.

On the GPU host:
    .gpurun/xtask attention-dump /tmp/attn && python3 scripts/check_attention_torch.py /tmp/attn

For each case written by `xtask attention-dump`, PyTorch computes attention from the same stored
inputs twice: SDPA in float64 (the math backend: an independent reference) and SDPA in the
case's dtype (its fast backends). rocmforge's fused and unfused outputs must be as close to the
float64 result as PyTorch's own low-precision result is (times a small factor), and agree with
each other. Rows that see no key are zeros in rocmforge (PyTorch gives NaN there): they are
checked separately. Exits non-zero on any failure.
"""

import json
import pathlib
import sys

import numpy as np
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def load(d, name, suffix, shape):
    return torch.from_numpy(np.fromfile(d / f"{name}.{suffix}.f32", dtype="<f4").reshape(shape)).cuda()


def torch_attention(q, k, v, meta, dtype):
    # [b, s, h, d] -> [b, h, s, d]; the causal mask with rocmforge's offset as an explicit mask.
    q, k, v = (x.transpose(1, 2).to(dtype) for x in (q, k, v))
    sq, sk = meta["seq_q"], meta["seq_k"]
    mask = None
    if meta["causal_offset"] is not None:
        i = torch.arange(sq, device="cuda")[:, None]
        j = torch.arange(sk, device="cuda")[None, :]
        mask = j <= i + meta["causal_offset"]
    group = meta["q_heads"] // meta["kv_heads"]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = sdpa(q, k, v, attn_mask=mask, scale=meta["scale"])
    return out.transpose(1, 2).to(torch.float64)


def main():
    d = pathlib.Path(sys.argv[1])
    failures = 0
    for meta_path in sorted(d.glob("case*.json")):
        name = meta_path.stem
        meta = json.loads(meta_path.read_text())
        b, sq, sk, hq, hkv, hd = (meta[k] for k in ("batch", "seq_q", "seq_k", "q_heads", "kv_heads", "head_dim"))
        q = load(d, name, "q", (b, sq, hq, hd))
        k = load(d, name, "k", (b, sk, hkv, hd))
        v = load(d, name, "v", (b, sk, hkv, hd))
        fused = load(d, name, "fused", (b, sq, hq, hd)).double()
        unfused = load(d, name, "unfused", (b, sq, hq, hd)).double()
        exact = torch_attention(q, k, v, meta, torch.float64)
        native = torch_attention(q, k, v, meta, DTYPES[meta["dtype"]])
        seen = ~torch.isnan(exact).any(dim=-1)  # rows with at least one visible key
        vmax = v.abs().max().item()

        def err(x):
            return (x - exact)[seen].abs().max().item() if seen.any() else 0.0

        e_fused, e_unfused, e_torch = err(fused), err(unfused), err(native)
        # rocmforge may be as far from float64 as PyTorch's own kernel in this dtype, times 4,
        # plus a floor of a few f32 units of vmax (f32 cases, where PyTorch is nearly exact).
        allowed = 4 * e_torch + 1e-5 * vmax
        masked_ok = bool((fused[~seen] == 0).all() and (unfused[~seen] == 0).all())
        ok = e_fused <= allowed and e_unfused <= allowed and masked_ok
        failures += not ok
        print(
            f"{'ok  ' if ok else 'FAIL'} {name} {meta['dtype']:<4} b{b} sq{sq} sk{sk} hq{hq} hkv{hkv} d{hd} "
            f"causal={meta['causal_offset']}: max|err| vs float64: fused {e_fused:.2e}, unfused {e_unfused:.2e}, "
            f"torch {meta['dtype']} {e_torch:.2e} (allowed {allowed:.2e}); fully masked rows "
            f"{int((~seen).sum())} zeros: {masked_ok}"
        )
    print(f"{failures} case(s) failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
