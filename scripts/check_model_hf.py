#!/usr/bin/env python3
"""Checks rocm-model's llama, qwen2 and glm4 paths against Hugging Face transformers' own
LlamaForCausalLM, Qwen2ForCausalLM and Glm4ForCausalLM.

On the GPU host (torch and transformers installed, the `gguf` package on PYTHONPATH):

    python3 scripts/check_model_hf.py --bench .gpu/rocm-bench [--arch qwen2 ...]

Anywhere with numpy and gguf (no torch, no GPU), the half that does not need them:

    python3 scripts/check_model_hf.py --self-test [--bench target/debug/rocm-bench]
        [--gguf-tool target/debug/gguf]

What it does. A small random model of each architecture (hidden 256, 2 layers, 4 query and 2 KV
heads of 64, intermediate 688, vocab 320, rms_norm_eps 1e-5; rope_theta 10000, 1e6 for qwen2)
is made in Hugging Face's layout and naming from a fixed seed (numpy's generator, so the
self-test writes the very same files without torch), and written as GGUF the way llama.cpp's
convert_hf_to_gguf.py writes that architecture: its metadata, llama.cpp's tensor names (checked
against gguf-py's own name map), and
  - llama: q_proj/k_proj rows permuted from HF's half-split ("rotate_half") RoPE order into the
    interleaved order GGUF llama weights use (`to_gguf_rows`; llama.cpp's `permute(w, n_head,
    n_head_kv)`: reshape to (heads, 2, head_dim/2, ...), swap axes 1 and 2; heads = n_head for
    Q, n_head_kv for K);
  - qwen2: no permutation (llama.cpp rotates qwen2 with NeoX pairs, as HF does), q/k/v biases
    (attn_{q,k,v}.bias, F32);
  - glm4 (GLM-4-0414): no permutation (HF's Glm4 already pairs (2i, 2i+1), llama.cpp's NORM
    type), half of each head rotated (partial_rotary_factor 0.5 written as rope.dimension_count),
    q/k/v biases, mlp.gate_up_proj kept whole as ffn_up (gate rows first), post_self_attn_layernorm
    and post_mlp_layernorm as post_attention_norm and post_ffw_norm, post_attention_layernorm (the
    pre-MLP norm) as ffn_norm.
Matrices are stored in the variant's type (1-D norms and biases stay F32; a matrix whose rows
Q8_0 cannot split into 32-blocks, here ffn_down with rows of 688, falls back to F16, as
llama.cpp's converter does).

`rocm-bench model-run` then runs each file on the GPU: a prompt of 37 random ids, prefill and 20
greedy decode steps, writing the 21 rows of logits and the chosen ids. The HF model, given the
values the file stores (decoded with gguf.quants.dequantize and, for llama, un-permuted back: for
Q8_0, F16 and BF16 files the quantised or rounded weights, so storage error is not counted), runs
in float64 on the CPU (default; --hf-device cuda --hf-dtype float32 is the other choice),
teacher-forced on the prompt followed by the tokens rocm-model chose, and its logits at the same
21 positions are compared. `model-run --reference` (rocm-model's own f64 CPU forward pass) is
compared the same way, so a failure says whether the GPU path or the conventions (layout,
permutation, RoPE pairing, biases, norms) are wrong.

Variants (file weights / rocm-model activations), for each architecture: F32 / f32, F16 / f16,
BF16 / bf16, Q8_0 / f32; llama also F32 / bf16; llama and qwen2 also a tied head (no
output.weight; HF tie_word_embeddings=True) F32 / f32. `--arch` picks architectures.

Bounds, on the relative L2 error ||rocm - hf|| / ||hf|| of each row of logits (the worst row is
checked):
  - f32 activations: 1e-5, the issue's bound. About 170 units of f32 roundoff (u = 2^-24):
    what is left is f32 accumulation order in GEMMs and attention and f32 sin/cos in the RoPE
    kernel, and on the HF side its own float32 RoPE cos/sin, softmax and RMSNorm (HF computes
    these in float32 even in a float64 model; the self-test measures their effect on this
    model's logits: about 8e-7, nearly all of it the RoPE's float32 angles).
    rocm-model's GPU test measures ~4e-7 against its exact f64 reference (docs/model.md).
  - f16 activations: 6e-3, about 12 u (u = 2^-11 = 4.9e-4).
  - bf16 activations: 4e-2, about 10 u (u = 2^-8 = 3.9e-3).
  A correct 16-bit pipeline rounds the weights, every activation, the residual stream after
  each add, the KV cache and the logits to its type once each; rocm-model's emulation of that
  (Rounding::F16/Bf16 in its CPU reference, docs/model.md) lands at about 2 u of relative L2
  (glm4 f16: 2.8 u), so 10-12 u leaves a factor of 4 or more and still catches any real error
  (a wrong convention gives O(1)).
  These are the relative-L2 bounds of rocm-model's own GPU-vs-reference parity tolerance
  (synthetic.rs `parity_tolerance`). Max |error| is printed, not bounded (the logits are of
  order 1, tied head or not).
Greedy agreement (HF's argmax at each position against rocm-model's token) is printed; a
disagreement can only be a near tie within the error, so it fails nothing by itself. A token
that is not the argmax of rocm-model's own written logits fails the row.

Exits non-zero when a row exceeds its bound, a run fails, or the self-test finds a problem.
"""

import argparse
import json
import math
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

import gguf

GT = gguf.GGMLQuantizationType

# The models: one shape, three architectures. `head_dim` = hidden / heads; `max_positions` only
# goes into the metadata.
CONFIG = dict(
    hidden=256,
    layers=2,
    heads=4,
    kv_heads=2,
    ffn=688,
    vocab=320,
    rms_eps=1e-5,
    max_positions=256,
)

# What differs between the architectures, as Hugging Face builds them and llama.cpp's converter
# writes them: the RoPE base (qwen2's is 1e6 in real checkpoints), the rotated share of a head
# (glm4: partial_rotary_factor 0.5) and its pairing in HF's layout (rotate_half for llama and
# qwen2; glm4 pairs (2i, 2i+1)), QKV biases (qwen2 always, glm4 attention_bias=True), glm4's
# post-norms and stacked gate_up_proj, and whether the converter permutes q/k rows (llama only).
ARCHS = {
    "llama": dict(rope_theta=10000.0, rotary=1.0, hf_pairs="half", biases=False, glm=False, permute=True),
    "qwen2": dict(rope_theta=1e6, rotary=1.0, hf_pairs="half", biases=True, glm=False, permute=False),
    "glm4": dict(rope_theta=10000.0, rotary=0.5, hf_pairs="interleaved", biases=True, glm=True, permute=False),
}
HF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "glm4": "Glm4ForCausalLM"}


def config_of(arch):
    return dict(CONFIG, arch=arch, **ARCHS[arch])


# (arch, name, weight type in the file, rocm-model's activations, tied head, relative L2 bound)
VARIANTS = [
    ("llama", "F32 / f32", GT.F32, "f32", False, 1e-5),
    ("llama", "F32 / bf16", GT.F32, "bf16", False, 4e-2),
    ("llama", "F16 / f16", GT.F16, "f16", False, 6e-3),
    ("llama", "BF16 / bf16", GT.BF16, "bf16", False, 4e-2),
    ("llama", "Q8_0 / f32", GT.Q8_0, "f32", False, 1e-5),
    ("llama", "F32 tied / f32", GT.F32, "f32", True, 1e-5),
    ("qwen2", "F32 / f32", GT.F32, "f32", False, 1e-5),
    ("qwen2", "F16 / f16", GT.F16, "f16", False, 6e-3),
    ("qwen2", "BF16 / bf16", GT.BF16, "bf16", False, 4e-2),
    ("qwen2", "Q8_0 / f32", GT.Q8_0, "f32", False, 1e-5),
    ("qwen2", "F32 tied / f32", GT.F32, "f32", True, 1e-5),
    ("glm4", "F32 / f32", GT.F32, "f32", False, 1e-5),
    ("glm4", "F16 / f16", GT.F16, "f16", False, 6e-3),
    ("glm4", "BF16 / bf16", GT.BF16, "bf16", False, 4e-2),
    ("glm4", "Q8_0 / f32", GT.Q8_0, "f32", False, 1e-5),
]
# Bound of rocm-model's f64 CPU reference against HF (its only roundings: the f32 logits file,
# and HF's own float32 RoPE, softmax and RMSNorm).
REFERENCE_BOUND = 1e-5

FILE_TYPES = {
    GT.F32: gguf.LlamaFileType.ALL_F32,
    GT.F16: gguf.LlamaFileType.MOSTLY_F16,
    GT.BF16: gguf.LlamaFileType.MOSTLY_BF16,
    GT.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
}


def head_dim(cfg):
    return cfg["hidden"] // cfg["heads"]


def rotary_dim(cfg):
    """The rotated elements of a head (glm4: head_dim * partial_rotary_factor, as the converter
    writes rope.dimension_count)."""
    return int(head_dim(cfg) * cfg["rotary"])


def file_name(cfg, wtype, tied):
    return f"{cfg['arch']}-{wtype.name}{'-tied' if tied else ''}.gguf"


# ---------------------------------------------------------------------------------------------
# Weights, the Q/K row permutation, GGUF writing and reading (numpy and gguf only)


def layer_shapes(cfg):
    """{HF module name under model.layers.N: shape} of one layer ([out, in] for nn.Linear)."""
    h, f, hd = cfg["hidden"], cfg["ffn"], head_dim(cfg)
    q, kv = cfg["heads"] * hd, cfg["kv_heads"] * hd
    shapes = {
        "input_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (q, h),
        "self_attn.k_proj.weight": (kv, h),
        "self_attn.v_proj.weight": (kv, h),
        "self_attn.o_proj.weight": (h, q),
        "post_attention_layernorm.weight": (h,),
        "mlp.down_proj.weight": (h, f),
    }
    if cfg["biases"]:
        shapes.update({"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,)})
    if cfg["glm"]:
        # Glm4MLP's gate_up_proj: the gate rows, then the up rows; and the two post-norms.
        shapes.update({
            "mlp.gate_up_proj.weight": (2 * f, h),
            "post_self_attn_layernorm.weight": (h,),
            "post_mlp_layernorm.weight": (h,),
        })
    else:
        shapes.update({"mlp.gate_proj.weight": (f, h), "mlp.up_proj.weight": (f, h)})
    return shapes


def hf_names(cfg, tied):
    """The HF parameter names of the model."""
    names = ["model.embed_tokens.weight"]
    names += [f"model.layers.{n}.{m}" for n in range(cfg["layers"]) for m in layer_shapes(cfg)]
    return names + ["model.norm.weight"] + ([] if tied else ["lm_head.weight"])


def random_weights(cfg, seed, tied):
    """HF state-dict names to float32 arrays in HF's layout (nn.Linear: [out, in]). Matrices,
    the embedding included, are normal with sd 1/sqrt(in) (so logits are of order 1, tied head or
    not, and the blocks' outputs rather than the input embedding dominate the residual stream, as
    in trained models), norm weights uniform in [0.8, 1.2], biases normal with sd 0.5 (of the
    order of the projections' outputs, so a lost or misplaced bias shows)."""
    rng = np.random.default_rng(seed)
    h, v = cfg["hidden"], cfg["vocab"]

    def value(name, shape):
        if name.endswith("bias"):
            return (0.5 * rng.standard_normal(shape)).astype(np.float32)
        if len(shape) == 1:
            return rng.uniform(0.8, 1.2, shape).astype(np.float32)
        return (rng.standard_normal(shape) / math.sqrt(shape[1])).astype(np.float32)

    w = {"model.embed_tokens.weight": value("embed", (v, h))}
    for layer in range(cfg["layers"]):
        for m, shape in layer_shapes(cfg).items():
            w[f"model.layers.{layer}.{m}"] = value(m, shape)
    w["model.norm.weight"] = value("norm", (h,))
    if not tied:
        w["lm_head.weight"] = value("head", (v, h))
    return w


def to_gguf_rows(w, heads):
    """HF's q_proj/k_proj rows to GGUF llama order (llama.cpp's converter rule). Within each head,
    HF's RoPE pairs element i with i + head_dim/2 ("rotate_half"); GGUF llama weights pair 2i with
    2i + 1. Viewing a head's rows as (2, head_dim/2) and transposing to (head_dim/2, 2) moves HF
    row i to 2i and row i + head_dim/2 to 2i + 1."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def from_gguf_rows(w, heads):
    """The inverse of `to_gguf_rows`: GGUF llama q/k rows back to HF's order."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# llama.cpp's names of HF modules (gguf-py's tensor_mapping for these architectures; the
# self-test checks this table against gguf's own map, which the converter uses).
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_self_attn_layernorm": "post_attention_norm",  # glm4 (ATTN_POST_NORM)
    "post_attention_layernorm": "ffn_norm",  # the pre-MLP norm in all three
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.gate_up_proj": "ffn_up",  # glm4: gate and up stacked in one tensor
    "mlp.down_proj": "ffn_down",
    "post_mlp_layernorm": "post_ffw_norm",  # glm4 (FFN_POST_NORM)
}


def gguf_name(hf_name):
    """llama.cpp's tensor name for an HF parameter."""
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf_name in fixed:
        return fixed[hf_name]
    parts = hf_name.split(".")  # model.layers.N.<module path>.<weight|bias>
    layer, module, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
    return f"blk.{layer}.{GGUF_LAYER_NAMES[module]}.{kind}"


def qk_heads(cfg, hf_name):
    """The head count a q/k weight is permuted by (llama only), None for every other tensor."""
    if not cfg["permute"]:
        return None
    if hf_name.endswith("q_proj.weight"):
        return cfg["heads"]
    if hf_name.endswith("k_proj.weight"):
        return cfg["kv_heads"]
    return None


def stored_type(array, wtype):
    """The type a tensor is stored in for a file of `wtype`: 1-D tensors (norms, biases) F32;
    Q8_0 falls back to F16 for rows that are not whole 32-blocks (llama.cpp's converter does the
    same)."""
    if array.ndim == 1:
        return GT.F32
    block = gguf.GGML_QUANT_SIZES[wtype][0]
    if array.shape[-1] % block != 0:
        return GT.F16
    return wtype


def write_gguf(path, cfg, weights, wtype):
    """Writes `weights` (HF names and layout) as a GGUF of `cfg`'s architecture with matrices in
    `wtype`, with the metadata llama.cpp's converter writes for it. Returns {gguf name: stored
    type}."""
    hd, arch = head_dim(cfg), cfg["arch"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"check_model_hf random {arch}")
    w.add_context_length(cfg["max_positions"])
    w.add_embedding_length(cfg["hidden"])
    w.add_block_count(cfg["layers"])
    w.add_feed_forward_length(cfg["ffn"])
    w.add_head_count(cfg["heads"])
    w.add_head_count_kv(cfg["kv_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_eps"])
    if arch == "llama":  # LlamaModel's own keys
        w.add_vocab_size(cfg["vocab"])
        w.add_rope_dimension_count(hd)
    if arch in ("llama", "glm4"):  # head_dim in the HF config: TextModel writes the lengths
        w.add_key_length(hd)
        w.add_value_length(hd)
    if arch == "glm4":  # Glm4Model: head_dim * partial_rotary_factor
        w.add_rope_dimension_count(rotary_dim(cfg))
    w.add_file_type(FILE_TYPES[wtype])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # A placeholder vocabulary: rocm-model checks its size against the embedding's rows.
    w.add_tokenizer_model("llama" if arch == "llama" else "gpt2")
    w.add_token_list([f"<t{i}>" for i in range(cfg["vocab"])])
    if arch == "llama":
        w.add_token_scores([0.0] * cfg["vocab"])
    w.add_token_types([gguf.TokenType.NORMAL] * cfg["vocab"])
    types = {}
    for hf_name, array in weights.items():
        name = gguf_name(hf_name)
        heads = qk_heads(cfg, hf_name)
        data = to_gguf_rows(array, heads) if heads else array
        qtype = stored_type(data, wtype)
        w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        types[name] = qtype
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def read_gguf(path):
    """{gguf name: (type, float64 array of the decoded values, rows x row length)} and the
    reader's fields."""
    r = gguf.GGUFReader(str(path))
    tensors = {}
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))  # GGUF dims are [row length, rows]
        values = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
        tensors[t.name] = (t.tensor_type, values.astype(np.float64))
    return tensors, r.fields


def hf_weights_from_gguf(cfg, tensors, tied):
    """The values a GGUF stores, back in HF's names and layout (q/k rows un-permuted), float64."""
    out = {}
    for hf_name in hf_names(cfg, tied):
        _, values = tensors[gguf_name(hf_name)]
        heads = qk_heads(cfg, hf_name)
        out[hf_name] = from_gguf_rows(values, heads) if heads else values
    return out


# ---------------------------------------------------------------------------------------------
# Reference forward passes


def numpy_model(cfg, w, ids, hf_float32=False, pairs=None):
    """The HF model's forward pass (LlamaForCausalLM, Qwen2ForCausalLM, Glm4ForCausalLM) in numpy
    float64 on HF-layout weights: logits of every position. RoPE over the first rotary_dim
    elements of each head, paired as HF pairs them for the architecture (`pairs` overrides it,
    for the self-test's negative checks): "half" is rotate_half (llama, qwen2), "interleaved"
    pairs (2i, 2i+1) with cos/sin repeat_interleave'd (glm4); q/k/v biases when the weights have
    them; GQA by repeating KV heads; causal softmax; SiLU-gated MLP, glm4's gate_up_proj split
    gate first; glm4's post-norms on each block's output before its residual add. With
    `hf_float32`, RoPE's cos/sin, the softmax and RMSNorm's normalisation are computed in float32
    as HF's modeling code does whatever the model's dtype, to measure what that costs."""
    nh, nkv, hd, rd = cfg["heads"], cfg["kv_heads"], head_dim(cfg), rotary_dim(cfg)
    pairs = pairs or cfg["hf_pairs"]
    n = len(ids)
    x = w["model.embed_tokens.weight"][np.asarray(ids)].astype(np.float64)
    exponent = np.arange(0, rd, 2) / rd
    if hf_float32:
        inv_freq = (1.0 / np.float32(cfg["rope_theta"]) ** exponent.astype(np.float32)).astype(np.float32)
        angles = np.arange(n, dtype=np.float32)[:, None] * inv_freq[None, :]
    else:
        angles = np.arange(n)[:, None] * cfg["rope_theta"] ** -exponent[None, :]
    cos, sin = np.cos(angles).astype(np.float64)[:, None, :], np.sin(angles).astype(np.float64)[:, None, :]

    def rms(v, weight):
        if hf_float32:  # HF's RMSNorms normalise in float32, then multiply in the model's dtype
            v = v.astype(np.float32)
            scale = 1 / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + np.float32(cfg["rms_eps"]))
            return (v * scale).astype(np.float64) * weight
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + cfg["rms_eps"]) * weight

    def rope(t):  # [n, heads, hd]: pair i turns by pos * base^(-2i/rd)
        out = t.copy()
        if pairs == "half":
            a, b = t[..., : rd // 2], t[..., rd // 2 : rd]
            out[..., : rd // 2], out[..., rd // 2 : rd] = a * cos - b * sin, b * cos + a * sin
        else:
            a, b = t[..., 0:rd:2], t[..., 1:rd:2]
            out[..., 0:rd:2], out[..., 1:rd:2] = a * cos - b * sin, b * cos + a * sin
        return out

    def linear(t, p, name):
        y = t @ w[p + name + ".weight"].T
        return y + w[p + name + ".bias"] if p + name + ".bias" in w else y

    def post_norm(t, p, name):
        return rms(t, w[p + name]) if p + name in w else t

    mask = np.triu(np.full((n, n), -np.inf), k=1)
    for layer in range(cfg["layers"]):
        p = f"model.layers.{layer}."
        xn = rms(x, w[p + "input_layernorm.weight"])
        q = rope(linear(xn, p, "self_attn.q_proj").reshape(n, nh, hd))
        k = rope(linear(xn, p, "self_attn.k_proj").reshape(n, nkv, hd))
        v = linear(xn, p, "self_attn.v_proj").reshape(n, nkv, hd)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask
        if hf_float32:
            scores = scores.astype(np.float32)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = (probs / probs.sum(axis=-1, keepdims=True)).astype(np.float64)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(n, nh * hd)
        x = x + post_norm(linear(attn, p, "self_attn.o_proj"), p, "post_self_attn_layernorm.weight")
        xn = rms(x, w[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate_up_proj.weight" in w:
            gate, up = np.split(linear(xn, p, "mlp.gate_up_proj"), 2, axis=-1)
        else:
            gate, up = linear(xn, p, "mlp.gate_proj"), linear(xn, p, "mlp.up_proj")
        mlp = linear(gate / (1.0 + np.exp(-gate)) * up, p, "mlp.down_proj")
        x = x + post_norm(mlp, p, "post_mlp_layernorm.weight")
    x = rms(x, w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def set_rope(config, theta, partial):
    """The RoPE base and rotated share on an HF config, wherever this transformers version keeps
    them (attributes in 4.x, `rope_parameters` in 5.x); hf_logits checks what the model built."""
    config.rope_theta = theta
    if partial != 1.0:
        config.partial_rotary_factor = partial
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict):
        params["rope_theta"] = theta
        if partial != 1.0:
            params["partial_rotary_factor"] = partial


def hf_config(cfg, tied):
    """The transformers config of `cfg`'s architecture: small, eager attention, no cache."""
    import transformers

    common = dict(
        vocab_size=cfg["vocab"],
        hidden_size=cfg["hidden"],
        intermediate_size=cfg["ffn"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["kv_heads"],
        max_position_embeddings=cfg["max_positions"],
        rms_norm_eps=cfg["rms_eps"],
        hidden_act="silu",
        tie_word_embeddings=tied,
        use_cache=False,
        attn_implementation="eager",
    )
    if cfg["arch"] == "llama":
        config = transformers.LlamaConfig(attention_bias=False, **common)
    elif cfg["arch"] == "qwen2":  # q/k/v biases are unconditional in Qwen2Attention
        config = transformers.Qwen2Config(use_sliding_window=False, **common)
    else:
        # Glm4Config's token ids default to GLM-4's 151k vocabulary; the embedding's padding_idx
        # must lie inside this one's (unset: no padding row).
        config = transformers.Glm4Config(
            head_dim=head_dim(cfg), attention_bias=True, pad_token_id=None, bos_token_id=None, eos_token_id=None,
            **common,
        )
    set_rope(config, cfg["rope_theta"], cfg["rotary"])
    return config


def hf_logits(cfg, w, ids, tied, device, dtype_name, seed):
    """HF's own model class for `cfg`'s architecture with weights `w` (HF names, float64 values):
    logits of every position of `ids`, float64 numpy."""
    import torch
    import transformers

    torch.manual_seed(seed)  # HF's own init, overwritten below; fixed all the same
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 on a GPU means float32
    dtype = getattr(torch, dtype_name)
    model_class = getattr(transformers, HF_CLASSES[cfg["arch"]])
    model = model_class(hf_config(cfg, tied)).to(device=device, dtype=dtype).eval()
    # The RoPE HF built from the config (its keys have moved between versions): base and width.
    rd = rotary_dim(cfg)
    inv_freq = model.model.rotary_emb.inv_freq.double().cpu().numpy()
    want = cfg["rope_theta"] ** -(np.arange(0, rd, 2) / rd)
    if inv_freq.shape != want.shape or np.abs(inv_freq / want - 1).max() > 1e-6:
        raise SystemExit(f"HF's RoPE inv_freq {inv_freq[:4]}... ({inv_freq.shape[0]} pairs) is not base "
                         f"{cfg['rope_theta']} over {rd} elements")
    params = dict(model.named_parameters())  # a tied lm_head is the embedding, listed once
    if set(params) != set(w):
        raise SystemExit(f"HF parameters {sorted(set(params) ^ set(w))} do not match the weights")
    with torch.no_grad():
        for name, value in w.items():
            if tuple(params[name].shape) != value.shape:
                raise SystemExit(f"{name}: HF shape {tuple(params[name].shape)}, weights {value.shape}")
            params[name].copy_(torch.from_numpy(value))
        if tied and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
            raise SystemExit("tie_word_embeddings=True but HF's lm_head is not the embedding")
        out = model(input_ids=torch.tensor([list(ids)], device=device), use_cache=False)
    return out.logits[0].to(torch.float64).cpu().numpy()


# ---------------------------------------------------------------------------------------------
# rocm-model's side and the comparison


def model_run(bench, path, prompt, steps, dtype, out):
    """Runs `rocm-bench model-run` (dtype "reference": the CPU reference). Returns (logits
    [steps + 1, vocab] float64, tokens [steps + 1]) or raises RuntimeError with its stderr."""
    cmd = [str(bench), "model-run", str(path), "--tokens", ",".join(map(str, prompt))]
    cmd += ["--steps", str(steps), "--out", str(out)]
    cmd += ["--reference"] if dtype == "reference" else ["--dtype", dtype]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr.strip()}")
    logits = np.load(out / "logits.npy").astype(np.float64)
    tokens = np.load(out / "tokens.npy")
    meta = json.loads((out / "run.json").read_text())
    if logits.shape[0] != steps + 1 or tokens.shape != (steps + 1,) or meta["dtype"] != dtype:
        raise RuntimeError(f"{out}: logits {logits.shape}, tokens {tokens.shape}, dtype {meta['dtype']}")
    return logits, tokens


def teacher_forced_ids(prompt, tokens):
    """The sequence that gives rocm-model's rows: the prompt, then every chosen token but the last."""
    return list(prompt) + [int(t) for t in tokens[:-1]]


def compare(rocm, tokens, ref):
    """Errors of rocm-model's rows against a reference's rows at the same positions."""
    diff = rocm - ref
    rel = np.linalg.norm(diff, axis=1) / np.linalg.norm(ref, axis=1)
    row_abs = np.abs(diff).max(axis=1)
    own_argmax = rocm.argmax(axis=1)  # the lowest id among equals, like rocm-model's sampler
    ref_argmax = ref.argmax(axis=1)
    gaps = [
        (i, float(ref[i, ref_argmax[i]] - ref[i, tokens[i]]), 2 * float(row_abs[i]))
        for i in range(len(tokens))
        if ref_argmax[i] != tokens[i]
    ]
    return dict(
        max_abs=float(row_abs.max()),
        rel_l2=float(rel.max()),
        worst_row=int(rel.argmax()),
        agree=int((ref_argmax == tokens).sum()),
        rows=len(tokens),
        not_own_argmax=[int(i) for i in np.nonzero(own_argmax != tokens)[0]],
        near_ties=gaps,
    )


def print_row(name, run, m, bound):
    ok = m["rel_l2"] <= bound and not m["not_own_argmax"]
    greedy = f"{m['agree']}/{m['rows']}"
    if m["near_ties"]:
        ties = ", ".join(f"row {i} gap {g:.1e} <= {a:.1e}" for i, g, a in m["near_ties"])
        greedy += f" (near ties: {ties})"
    if m["not_own_argmax"]:
        greedy += f" NOT the argmax of its own logits at rows {m['not_own_argmax']}"
    print(
        f"{'ok  ' if ok else 'FAIL'} {name:<21} {run:<9} {m['max_abs']:>9.2e} {m['rel_l2']:>9.2e} "
        f"(row {m['worst_row']:>2}) {bound:>7.0e}  {greedy}"
    )
    return ok


def make_prompt(cfg, seed, length):
    rng = np.random.default_rng(seed + 1)
    return [int(t) for t in rng.integers(0, cfg["vocab"], length)]


def run_checks(args, workdir):
    prompt = make_prompt(CONFIG, args.seed, args.prompt_len)
    print(f"prompt ({len(prompt)} ids): {prompt}")
    classes = ", ".join(HF_CLASSES[a] for a in args.arch)
    print(f"{args.steps} greedy steps; HF {classes} in {args.hf_dtype} on {args.hf_device}")
    print(f"     {'variant':<21} {'run':<9} {'max|err|':>9} {'rel L2':>9} {'(worst)':>8} {'bound':>7}  greedy vs HF")
    failures = 0
    written, referenced = set(), set()
    for arch, variant, wtype, dtype, tied, bound in VARIANTS:
        if arch not in args.arch:
            continue
        cfg, name = config_of(arch), f"{arch} {variant}"
        path = workdir / file_name(cfg, wtype, tied)
        if path not in written:
            write_gguf(path, cfg, random_weights(cfg, args.seed, tied), wtype)
            written.add(path)
        tensors, _ = read_gguf(path)
        stored = hf_weights_from_gguf(cfg, tensors, tied)
        runs = [(f"gpu {dtype}", dtype, bound)]
        if args.reference and path not in referenced:
            referenced.add(path)
            runs.append(("cpu ref", "reference", REFERENCE_BOUND))
        for run, run_dtype, run_bound in runs:
            out = workdir / f"{path.stem}-{run_dtype}"
            try:
                logits, tokens = model_run(args.bench, path, prompt, args.steps, run_dtype, out)
            except RuntimeError as e:
                print(f"FAIL {name:<21} {run:<9} {e}")
                failures += 1
                continue
            ids = teacher_forced_ids(prompt, tokens)
            ref = hf_logits(cfg, stored, ids, tied, args.hf_device, args.hf_dtype, args.seed)
            ref = ref[len(prompt) - 1 :]
            failures += not print_row(name, run, compare(logits, tokens, ref), run_bound)
    print(f"{failures} check(s) failed")
    return failures


# ---------------------------------------------------------------------------------------------
# The self-test: everything but torch and the GPU


def rope_interleaved(t, pos, base):
    """GGUF llama's RoPE (rocm-model's GptJ style): pairs (2i, 2i + 1) rotated by pos * base^(-2i/d)."""
    d = t.shape[-1]
    theta = pos * base ** (-np.arange(0, d, 2) / d)
    a, b = t[..., 0::2], t[..., 1::2]
    out = np.empty_like(t)
    out[..., 0::2] = a * np.cos(theta) - b * np.sin(theta)
    out[..., 1::2] = b * np.cos(theta) + a * np.sin(theta)
    return out


def rope_half(t, pos, base):
    """HF's RoPE: pairs (i, i + d/2) ("rotate_half") rotated by pos * base^(-2i/d)."""
    d = t.shape[-1]
    theta = np.tile(pos * base ** (-np.arange(0, d, 2) / d), 2)
    rotated = np.concatenate([-t[..., d // 2 :], t[..., : d // 2]], axis=-1)
    return t * np.cos(theta) + rotated * np.sin(theta)


class Checker:
    def __init__(self):
        self.failures = 0

    def check(self, ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        self.failures += not ok


def self_test(args, workdir):
    cfg = config_of("llama")
    c = Checker()
    rng = np.random.default_rng(123)

    # 1. The permutation: llama.cpp's rule by index, and its inverse.
    for heads, hd in [(4, 64), (2, 64), (3, 8), (1, 2)]:
        w = rng.standard_normal((heads * hd, 5))
        p = to_gguf_rows(w, heads)
        by_index = np.empty_like(w)
        for h in range(heads):
            for i in range(hd // 2):
                by_index[h * hd + 2 * i] = w[h * hd + i]
                by_index[h * hd + 2 * i + 1] = w[h * hd + hd // 2 + i]
        c.check(np.array_equal(p, by_index), f"permute {heads} heads of {hd}: HF row i -> 2i, i + hd/2 -> 2i+1")
        c.check(np.array_equal(from_gguf_rows(p, heads), w), f"permute {heads} heads of {hd}: round trip")

    # 2. Direction: HF's rotate_half RoPE on HF rows equals GGUF's interleaved RoPE on the
    # permuted rows (as vectors permuted the same way), so attention scores q.k are the same.
    hd, heads, kv_heads = head_dim(cfg), cfg["heads"], cfg["kv_heads"]
    wq = rng.standard_normal((heads * hd, cfg["hidden"]))
    wk = rng.standard_normal((kv_heads * hd, cfg["hidden"]))
    x = rng.standard_normal(cfg["hidden"])
    worst, score_err = 0.0, 0.0
    for pos in [0, 1, 7, 56, 1000]:
        q_hf = rope_half((wq @ x).reshape(heads, hd), pos, cfg["rope_theta"])
        q_gguf = rope_interleaved((to_gguf_rows(wq, heads) @ x).reshape(heads, hd), pos, cfg["rope_theta"])
        worst = max(worst, np.abs(to_gguf_rows(q_hf.reshape(-1, 1), heads).ravel() - q_gguf.ravel()).max())
        k_hf = rope_half((wk @ x).reshape(kv_heads, hd), pos + 3, cfg["rope_theta"])
        k_rows = (to_gguf_rows(wk, kv_heads) @ x).reshape(kv_heads, hd)
        k_gguf = rope_interleaved(k_rows, pos + 3, cfg["rope_theta"])
        group = heads // kv_heads
        s_hf = np.einsum("hd,hd->h", q_hf, np.repeat(k_hf, group, axis=0))
        s_gguf = np.einsum("hd,hd->h", q_gguf, np.repeat(k_gguf, group, axis=0))
        score_err = max(score_err, np.abs(s_hf - s_gguf).max() / np.abs(s_hf).max())
    c.check(worst < 1e-9, f"RoPE: HF's rotate_half on HF rows == interleaved on permuted rows (max {worst:.1e})")
    c.check(score_err < 1e-12, f"RoPE: q.k scores equal, GQA included (max relative {score_err:.1e})")
    # The wrong direction (the inverse permutation applied to HF rows) must not pass the same test.
    wrong = rope_interleaved((from_gguf_rows(wq, heads) @ x).reshape(heads, hd), 5, cfg["rope_theta"])
    right = rope_half((wq @ x).reshape(heads, hd), 5, cfg["rope_theta"])
    off = np.abs(to_gguf_rows(right.reshape(-1, 1), heads).ravel() - wrong.ravel()).max()
    c.check(off > 1e-3, f"RoPE: the inverse permutation does not match (differs by {off:.1e})")

    # 3. The files of every architecture: names (against gguf's own converter map too), dims,
    # types, metadata and values read back with gguf's reader.
    prompt = make_prompt(cfg, args.seed, args.prompt_len)
    files = {}
    for arch, _, wtype, _, tied, _ in VARIANTS:
        acfg = config_of(arch)
        path = workdir / file_name(acfg, wtype, tied)
        if path not in files:
            files[path] = (acfg, tied, check_file(c, acfg, path, wtype, tied, args.seed))

    # 4. HF's float32 RoPE, softmax and RMSNorm, inside a float64 model, against exact: what the
    # f32 bound must leave room for on the HF side.
    ids = prompt + make_prompt(cfg, args.seed + 7, args.steps)
    for arch in ARCHS:
        acfg = config_of(arch)
        stored = files[workdir / file_name(acfg, GT.F32, False)][2]
        exact = numpy_model(acfg, stored, ids)
        hf_like = numpy_model(acfg, stored, ids, hf_float32=True)
        rel = (np.linalg.norm(hf_like - exact, axis=1) / np.linalg.norm(exact, axis=1)).max()
        c.check(rel < 2e-6, f"{arch}: HF's float32 RoPE, softmax and RMSNorm cost {rel:.1e} relative L2 (< 2e-6)")

    # 5. rocm-model's `gguf` tool reads the files, and decodes a tensor as gguf's reader does.
    tool = pathlib.Path(args.gguf_tool) if args.gguf_tool else None
    if tool and tool.exists():
        for path in files:
            p = subprocess.run([str(tool), "inspect", str(path)], capture_output=True, text=True)
            c.check(p.returncode == 0, f"gguf inspect {path.name} {p.stderr.strip() if p.returncode else ''}")
            for name in ["blk.1.attn_k.weight", "token_embd.weight", "blk.0.ffn_down.weight"]:
                npy = workdir / f"{path.stem}-{name}.npy"
                cmd = [str(tool), "dump", str(path), name, "-o", str(npy)]
                p = subprocess.run(cmd, capture_output=True, text=True)
                want = read_gguf(path)[0][name][1]
                same = p.returncode == 0 and np.array_equal(np.load(npy).astype(np.float64), want)
                c.check(same, f"gguf dump {path.name} {name} == gguf's reader {'' if same else p.stderr.strip()}")
    else:
        print(f"skip rocm-model's gguf tool: not found at {tool} (pass --gguf-tool target/debug/gguf)")

    # 6. rocm-model's CPU reference (`model-run --reference`) against the numpy HF model: layout,
    # names, permutation, RoPE pairing and width, biases, post-norms, stacked gate/up, GQA, tied
    # head and Q8_0 decoding, end to end.
    bench = pathlib.Path(args.bench)
    if not bench.exists():
        print(f"skip model-run --reference: no rocm-bench at {bench} (pass --bench target/debug/rocm-bench)")
        print(f"{c.failures} self-test check(s) failed")
        return c.failures
    for path, (acfg, tied, stored) in files.items():
        out = workdir / f"{path.stem}-reference"
        try:
            logits, tokens = model_run(bench, path, prompt, args.steps, "reference", out)
        except RuntimeError as e:
            c.check(False, f"model-run --reference {path.name}: {e}")
            continue
        ids = teacher_forced_ids(prompt, tokens)
        ref = numpy_model(acfg, stored, ids)[len(prompt) - 1 :]
        m = compare(logits, tokens, ref)
        c.check(m["rel_l2"] < 1e-6 and not m["not_own_argmax"] and m["agree"] == m["rows"],
                f"model-run --reference {path.name} vs numpy HF model: rel L2 {m['rel_l2']:.1e}, "
                f"max|err| {m['max_abs']:.1e}, greedy {m['agree']}/{m['rows']}")
    # The checks above can fail: the numpy model with each architecture's convention broken (the
    # wrong permutation, pairing, bias, gate/up order, post-norms) is far from rocm-model's logits.
    for arch, what, broken in negative_controls(cfg):
        acfg = config_of(arch)
        path = workdir / file_name(acfg, GT.F32, False)
        logits = np.load(workdir / f"{path.stem}-reference" / "logits.npy").astype(np.float64)
        tokens = np.load(workdir / f"{path.stem}-reference" / "tokens.npy")
        wrong = broken(acfg, files[path][2], teacher_forced_ids(prompt, tokens))[len(prompt) - 1 :]
        rel = compare(logits, tokens, wrong)["rel_l2"]
        c.check(rel > 1e-2, f"{arch}: {what}, the logits differ ({rel:.1e}): the check can fail")

    print(f"{c.failures} self-test check(s) failed")
    return c.failures


def check_file(c, cfg, path, wtype, tied, seed):
    """Writes `cfg`'s model as `path` and checks it as read back; returns the values it stores in
    HF's names and layout."""
    weights = random_weights(cfg, seed, tied)
    types = write_gguf(path, cfg, weights, wtype)
    tensors, fields = read_gguf(path)
    label = f"{path.name}:"
    want_names = {gguf_name(n) for n in weights}
    c.check(set(tensors) == want_names and ("output.weight" in want_names) != tied,
            f"{label} {len(tensors)} tensors, llama.cpp's names{' (no output.weight)' if tied else ''}")
    converter = gguf.get_tensor_name_map(gguf.MODEL_ARCH[cfg["arch"].upper()], cfg["layers"])
    theirs = {n: converter.get_name(n, try_suffixes=(".weight", ".bias")) for n in weights}
    c.check(all(theirs[n] == gguf_name(n) for n in weights), f"{label} the names gguf's converter map gives")
    dims_ok = all(tensors[gguf_name(n)][1].shape == a.shape for n, a in weights.items())
    c.check(dims_ok, f"{label} every tensor's GGUF dims are its HF shape reversed ([in, out])")
    type_ok = all(tensors[n][0] == t for n, t in types.items())
    c.check(type_ok, f"{label} stored types {sorted({t.name for t in types.values()})}")
    if wtype == GT.Q8_0:
        c.check(types["blk.0.ffn_down.weight"] == GT.F16 and types["blk.0.ffn_up.weight"] == GT.Q8_0,
                f"{label} ffn_down (rows of {cfg['ffn']}) falls back to F16, the rest Q8_0")

    def field(key):
        f = fields.get(key)
        if f is None:
            return None
        return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]][0]

    arch, hd = cfg["arch"], head_dim(cfg)
    meta = {
        "general.architecture": arch,
        f"{arch}.embedding_length": cfg["hidden"],
        f"{arch}.block_count": cfg["layers"],
        f"{arch}.feed_forward_length": cfg["ffn"],
        f"{arch}.attention.head_count": cfg["heads"],
        f"{arch}.attention.head_count_kv": cfg["kv_heads"],
        # llama: the whole head; qwen2: not written (llama.cpp's default, the head); glm4: half.
        f"{arch}.rope.dimension_count": {"llama": hd, "qwen2": None, "glm4": hd // 2}[arch],
        f"{arch}.rope.rope_ratio": None,
        "general.file_type": int(FILE_TYPES[wtype]),
    }
    bad = {k: field(k) for k, v in meta.items() if field(k) != v}
    eps = float(field(f"{arch}.attention.layer_norm_rms_epsilon"))
    theta = float(field(f"{arch}.rope.freq_base"))
    c.check(not bad and eps == float(np.float32(cfg["rms_eps"])) and theta == cfg["rope_theta"],
            f"{label} {arch}.* metadata {bad or 'as configured'}")
    stored = hf_weights_from_gguf(cfg, tensors, tied)
    errs = []
    for n, a in weights.items():
        t = types[gguf_name(n)]
        v = stored[n]
        if t == GT.F32:
            ok = np.array_equal(v, a)
        elif t == GT.F16:
            ok = np.array_equal(v, a.astype(np.float16).astype(np.float64))
        elif t == GT.BF16:
            # Round to nearest: within half a bf16 unit (2^-8 relative) of the value.
            ok = np.all(np.abs(v - a) <= np.abs(a) * 2.0**-8)
        else:
            # Q8_0: each value within half a step of its block's scale (max |x| / 127) of it,
            # plus the f16 rounding of the scale.
            blocks = np.abs(a.reshape(-1, 32)).max(axis=1, keepdims=True)
            bound = (blocks / 127) * (0.5 + 127 * 2.0**-11)
            ok = np.all(np.abs(v - a).reshape(-1, 32) <= bound)
        if not ok:
            errs.append(n)
    c.check(not errs, f"{label} values read back{' and un-permuted' if cfg['permute'] else ''}: "
            f"the weights as {wtype.name} {errs or ''}")
    return stored


def negative_controls(cfg):
    """(arch, what is broken, numpy model with it broken) for the self-test's last checks."""

    def permuted(acfg, w, ids):  # llama: the q/k rows left in GGUF order
        heads = {n: qk_heads(acfg, n) for n in w}
        return numpy_model(acfg, {n: to_gguf_rows(a, heads[n]) if heads[n] else a for n, a in w.items()}, ids)

    def pairs_swapped(acfg, w, ids):
        return numpy_model(acfg, w, ids, pairs="interleaved" if acfg["hf_pairs"] == "half" else "half")

    def without(suffix):
        return lambda acfg, w, ids: numpy_model(acfg, {n: a for n, a in w.items() if not n.endswith(suffix)}, ids)

    def up_first(acfg, w, ids):  # glm4: gate_up_proj read as [up; gate]
        swap = {n: np.concatenate(np.split(a, 2)[::-1]) if n.endswith("gate_up_proj.weight") else a
                for n, a in w.items()}
        return numpy_model(acfg, swap, ids)

    return [
        ("llama", "without the un-permutation", permuted),
        ("qwen2", "with interleaved RoPE pairs", pairs_swapped),
        ("qwen2", "without the QKV biases", without("proj.bias")),
        ("glm4", "with half-split RoPE pairs", pairs_swapped),
        ("glm4", "without the QKV biases", without("proj.bias")),
        ("glm4", "with up before gate", up_first),
        ("glm4", "without the post-norms", without(("post_self_attn_layernorm.weight", "post_mlp_layernorm.weight"))),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=".gpu/rocm-bench", help="the rocm-bench binary (default .gpu/rocm-bench)")
    ap.add_argument("--self-test", action="store_true", help="check the GGUF files and conventions without torch")
    ap.add_argument("--gguf-tool", help="rocm-model's gguf binary, for --self-test")
    ap.add_argument("--steps", type=int, default=20, help="greedy decode steps (default 20)")
    ap.add_argument("--prompt-len", type=int, default=37, help="random prompt ids (default 37)")
    ap.add_argument("--seed", type=int, default=0, help="weights and prompt seed (default 0)")
    ap.add_argument("--hf-device", default="cpu", help="torch device for the HF model (default cpu)")
    ap.add_argument("--hf-dtype", help="float64 (default on cpu) or float32 (default elsewhere)")
    ap.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip the runs of rocm-model's CPU reference (model-run --reference)")
    ap.add_argument("--keep", help="write the GGUF files and outputs here (default: a temporary directory)")
    ap.add_argument("--arch", action="append", choices=list(ARCHS),
                    help="check only this architecture (repeatable; default: all of them)")
    args = ap.parse_args()
    if args.steps < 0 or args.prompt_len < 1:
        ap.error("--steps must be >= 0 and --prompt-len >= 1")
    if args.prompt_len + args.steps > CONFIG["max_positions"]:
        ap.error(f"--prompt-len + --steps must be at most {CONFIG['max_positions']}")
    args.arch = args.arch or list(ARCHS)
    args.hf_dtype = args.hf_dtype or ("float64" if args.hf_device == "cpu" else "float32")
    if not args.self_test:
        if not pathlib.Path(args.bench).exists():
            ap.error(f"no rocm-bench at {args.bench} (pass --bench PATH)")
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as e:
            ap.error(f"the comparison needs torch and transformers ({e}); --self-test runs without them")

    def go(workdir):
        workdir = pathlib.Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        return self_test(args, workdir) if args.self_test else run_checks(args, workdir)

    if args.keep:
        failures = go(args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="check_model_hf-") as d:
            failures = go(d)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
