"""PyTorch side of crates/rocm-bench/src/bench/mxfp.rs: the same weight shapes and minimal-traffic
byte counts.

PyTorch has no MXFP4/MXFP6 matrix-vector product, so two reference points:
- the same product with an unquantised weight (torch.mv, bf16 and f16): what quantisation saves;
- MXFP4 in GGUF's block layout decoded with tensor operations (table lookup, scale, then
  torch.mv), eager and torch.compile'd: what a user without a custom kernel gets. Its bytes are
  counted as the packed weight + x + y, like ours, so GB/s compare directly.
"""

import torch

SHAPES = [(14336, 4096), (4096, 14336)]
# E2M1 values by code (sign bit 3), from the OCP MX v1.0 table.
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def mxfp4_matvec(packed, x, lut):
    """packed: [n, k/32, 17] uint8 (E8M0 scale, then 16 bytes: element j low nibble of byte j,
    element j + 16 its high nibble); x: [k]."""
    n, blocks, _ = packed.shape
    qs = packed[..., 1:]
    codes = torch.cat([qs & 15, qs >> 4], dim=-1).long()
    scale = torch.exp2(packed[..., 0].float() - 127.0).unsqueeze(-1)
    w = (lut[codes] * scale).reshape(n, blocks * 32).to(x.dtype)
    return torch.mv(w, x)


def run(time_ms, row):
    rows = []
    try:
        compiled = torch.compile(mxfp4_matvec)
    except Exception as e:  # no triton, or an old torch
        print(f"torch.compile unavailable: {e}")
        compiled = None
    for n, k in SHAPES:
        shape = f"{n}x{k}"
        for name, dtype in [("f16", torch.float16), ("bf16", torch.bfloat16)]:
            w = torch.empty(n, k, device="cuda", dtype=dtype).uniform_(-1, 1)
            x = torch.empty(k, device="cuda", dtype=dtype).uniform_(-1, 1)
            nbytes = (n * k + n + k) * w.element_size()
            rows.append(row(f"torch {name} matvec (unquantised)", name, shape, time_ms(lambda: torch.mv(w, x)), nbytes))
            del w
        packed = torch.randint(0, 256, (n, k // 32, 17), device="cuda", dtype=torch.uint8)
        packed[..., 0] = torch.randint(118, 131, (n, k // 32), device="cuda", dtype=torch.uint8)
        lut = torch.tensor(E2M1, device="cuda", dtype=torch.float32)
        x = torch.empty(k, device="cuda", dtype=torch.float16).uniform_(-1, 1)
        nbytes = packed.numel() + (n + k) * 2
        variants = [("torch mxfp4 decode+mv", lambda: mxfp4_matvec(packed, x, lut))]
        if compiled is not None:
            variants.append(("torch mxfp4 decode+mv compile", lambda: compiled(packed, x, lut)))
        for label, fn in variants:
            try:
                rows.append(row(label, "f16", shape, time_ms(fn), nbytes))
            except Exception as e:
                print(f"{label} failed: {e}")
        del packed
    return rows
