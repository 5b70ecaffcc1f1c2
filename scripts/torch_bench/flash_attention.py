"""PyTorch side of crates/rocm-bench/src/bench/flash_attention.rs: scaled_dot_product_attention
with each of its CUDA backends (FlashAttention-2, cuDNN, memory-efficient) at the same shapes,
with the same FLOP and byte counts.

PyTorch takes [batch, heads, seq, head_dim]; the layout does not change the work. The decode
shape uses enable_gqa (K and V keep their 4 heads, as in rocmforge). A backend that refuses a
shape is reported as such rather than silently falling back.
"""

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

BACKENDS = [
    (SDPBackend.FLASH_ATTENTION, "flash2"),
    (SDPBackend.CUDNN_ATTENTION, "cudnn"),
    (SDPBackend.EFFICIENT_ATTENTION, "mem-eff"),
]
DTYPES = [(torch.float16, "f16"), (torch.bfloat16, "bf16")]


def shapes():
    for d in (128, 64):
        for causal in (False, True):
            yield 4, 32, 32, 4096, 4096, d, causal
    yield 32, 32, 4, 1, 4096, 128, True


def run(time_ms, row):
    rows = []
    for b, hq, hkv, sq, sk, d, causal in shapes():
        for dtype, name in DTYPES:
            q = torch.rand(b, hq, sq, d, device="cuda", dtype=dtype) * 2 - 1
            k = torch.rand(b, hkv, sk, d, device="cuda", dtype=dtype) * 2 - 1
            v = torch.rand(b, hkv, sk, d, device="cuda", dtype=dtype) * 2 - 1
            flops = 4 * b * hq * sq * sk * d / (2 if causal else 1)
            nbytes = (2 * q.numel() + 2 * k.numel()) * q.element_size()
            gqa = f" g{hq // hkv}" if hq != hkv else ""
            shape = f"B{b} H{hq} {sq}x{sk} D{d}{gqa}{' c' if causal else ''}"
            # Decode's single query is the last position: causal hides nothing from it, and
            # SDPA's is_causal (top-left aligned) would hide all but key 0. So causal means
            # is_causal only when seq_q == seq_k.
            is_causal = causal and sq == sk
            for backend, label in BACKENDS:
                try:
                    with sdpa_kernel(backend):
                        fn = lambda: sdpa(q, k, v, is_causal=is_causal, enable_gqa=hq != hkv)
                        fn()
                        ms = time_ms(fn)
                except RuntimeError as e:
                    print(f"  torch sdpa {label} {name} {shape}: not available ({str(e).splitlines()[0][:80]})")
                    continue
                rows.append(row(f"torch sdpa {label}", name, shape, ms, nbytes, flops))
            del q, k, v
    return rows
