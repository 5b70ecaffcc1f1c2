"""PyTorch side of crates/rocm-bench/src/bench/rope.rs: RoPE in place on Q [16384, 32, 128] and K
[16384, 8, 128], each dtype, NeoX (full rotary, base 500000) and GLM (interleaved pairs on the
first half of the head), written in plain torch ops the way model code does it: the angles from
the position ids and inv_freq in f32, cos/sin cast to the storage dtype, the rotation, and a copy
back into Q and K. Bytes: the rotated elements read and written once plus 4 bytes of position a
token, as in the Rust benchmark.
"""

import torch

TOKENS, Q_HEADS, K_HEADS, HEAD_DIM = 16384, 32, 8, 128
DTYPES = [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")]


def inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, device="cuda", dtype=torch.float32) / dim))


def cos_sin(positions, freqs, dtype):
    angles = positions[:, None].float() * freqs[None, :]  # [T, d/2]
    return angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]


def neox_(x, cos, sin):
    """Half-split pairs (i, i + d/2) over the whole head, in place."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    x.copy_(torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1))


def glm_(x, cos, sin):
    """Interleaved pairs (2i, 2i + 1) over the first half of the head, in place."""
    rot = x[..., : x.shape[-1] // 2].unflatten(-1, (-1, 2))
    a, b = rot[..., 0], rot[..., 1]
    rot.copy_(torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1))


def run(time_ms, row):
    rows = []
    positions = (torch.arange(TOKENS, device="cuda", dtype=torch.int32) % 4096) * 16
    shape = f"{TOKENS} x ({Q_HEADS}+{K_HEADS}) x {HEAD_DIM}"
    variants = [
        ("torch rope neox", neox_, inv_freq(500000.0, HEAD_DIM), HEAD_DIM),
        ("torch rope glm", glm_, inv_freq(10000.0, HEAD_DIM // 2), HEAD_DIM // 2),
    ]
    for dtype, name in DTYPES:
        q = (torch.rand(TOKENS, Q_HEADS, HEAD_DIM, device="cuda") * 4 - 2).to(dtype)
        k = (torch.rand(TOKENS, K_HEADS, HEAD_DIM, device="cuda") * 4 - 2).to(dtype)
        for kernel, apply_, freqs, rotated in variants:

            def step(apply_=apply_, freqs=freqs):
                cos, sin = cos_sin(positions, freqs, dtype)
                apply_(q, cos, sin)
                apply_(k, cos, sin)

            ms = time_ms(step)
            elements = TOKENS * (Q_HEADS + K_HEADS) * rotated
            rows.append(row(kernel, name, shape, ms, 2 * elements * q.element_size() + 4 * TOKENS))
        del q, k
    return rows
