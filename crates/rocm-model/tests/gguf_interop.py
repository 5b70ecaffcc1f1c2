#!/usr/bin/env python3
"""Interop helper for rocm-model's GGUF reader and writer, driven by tests/python_interop.rs.

Uses the reference Python implementation (the `gguf` package, from llama.cpp's gguf-py) as the
independent side. Every mode prints a canonical description of a GGUF file, one line per item,
which the Rust test compares line by line with its own:

    kv <key> <value>                          values: u8:7  i32:-1  f32:<LE hex>  bool:1
                                              str:<utf-8 hex>  arr:<elem>[v,v,...]
    tensor <name> <type id> <d0,d1,..> <offset> <data hex>   dims in GGUF order (ne[0] first)
    f32 <name> <LE hex of the tensor decoded to float32>     decodable types only, -0 as +0

Modes:
    write OUT.gguf [BLOCKS.gguf]   write a file with gguf.GGUFWriter; print what was written.
                                   Every tensor of BLOCKS.gguf (blocks our encoders made) is
                                   copied in as raw bytes, named `ours.<name>`.
    read IN.gguf                   read a file with gguf.GGUFReader; print what it holds
    npy IN.npy                     print `npy <shape> <dtype> <LE hex>` of a .npy file
    quantize IN.gguf               for each F32 tensor `<type>.<case>` (type Q8_0, Q4_0 or
                                   MXFP4), print `quant <name> <hex>` of its values encoded by
                                   gguf.quants.quantize
"""

import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

# Canonical names by value type id (the Rust side uses the same table).
TYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"]
DECODABLE = {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.MXFP4, Q.Q4_K, Q.Q5_K, Q.Q6_K}


def canon(vtype, value):
    """Canonical text of a value of GGUF type `vtype` (arrays: (elem_type, [values]))."""
    vtype = int(vtype)
    name = TYPE_NAMES[vtype]
    if vtype == V.FLOAT32:
        return f"f32:{struct.pack('<f', float(value)).hex()}"
    if vtype == V.FLOAT64:
        return f"f64:{struct.pack('<d', float(value)).hex()}"
    if vtype == V.BOOL:
        return f"bool:{int(bool(value))}"
    if vtype == V.STRING:
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return f"str:{raw.hex()}"
    if vtype == V.ARRAY:
        elem, items = value
        return f"arr:{TYPE_NAMES[int(elem)]}[{','.join(canon(elem, i) for i in items)}]"
    return f"{name}:{int(value)}"


def dequant(raw: bytes, qtype) -> bytes:
    """The tensor decoded to float32 by the reference implementation (LE bytes)."""
    if qtype == Q.F32:
        out = np.frombuffer(raw, dtype="<f4")
    elif qtype == Q.F16:
        out = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif qtype == Q.BF16:
        out = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        # The largest MXFP4 scale times the largest element overflows to inf, as it should.
        with np.errstate(over="ignore"):
            out = gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8), qtype)
    # Signed zeros are normalised: ggml decodes the E2M1 code 0b1000 as +0, the OCP MX spec
    # (and rocm_kernels) as -0; the two compare equal.
    out = np.where(out == 0, np.float32(0), out)
    return np.ascontiguousarray(out, dtype="<f4").tobytes()


def tensor_lines(name, qtype, dims, offset, raw):
    lines = [f"tensor {name} {int(qtype)} {','.join(str(int(d)) for d in dims)} {offset} {raw.hex()}"]
    if qtype in DECODABLE:
        lines.append(f"f32 {name} {dequant(raw, qtype).hex()}")
    return lines


def finite_f16(rng, n_blocks):
    """Random f16 fields of either sign, every finite value possible (subnormals and zeros too)."""
    bits = rng.integers(0, 0x7C00, size=(n_blocks, 1)) | (rng.integers(0, 2, size=(n_blocks, 1)) << 15)
    return bits.astype("<u2").view(np.uint8)


def random_blocks(rng, n_blocks, qtype):
    """Valid random blocks (no NaN/inf scales), covering every code of every element."""
    if qtype == Q.Q8_0:
        d = rng.uniform(1e-3, 0.1, size=(n_blocks, 1)).astype("<f2").view(np.uint8)
        return np.concatenate([d, rng.integers(0, 256, size=(n_blocks, 32), dtype=np.uint8)], axis=1)
    if qtype == Q.Q4_0:
        d = rng.uniform(-0.1, 0.1, size=(n_blocks, 1)).astype("<f2").view(np.uint8)
        return np.concatenate([d, rng.integers(0, 256, size=(n_blocks, 16), dtype=np.uint8)], axis=1)
    if qtype == Q.MXFP4:
        # Every finite E8M0 scale (255 is NaN), the extremes included.
        e = np.arange(n_blocks, dtype=np.int64) * 37 % 255
        e[:3] = [0, 1, 254][: min(3, n_blocks)]
        e = e.astype(np.uint8).reshape(n_blocks, 1)
        return np.concatenate([e, rng.integers(0, 256, size=(n_blocks, 16), dtype=np.uint8)], axis=1)
    if qtype in (Q.Q4_K, Q.Q5_K):
        # f16 d and dmin, then random scales, mins and codes (q5_K: 32 bytes more of fifth bits).
        rest = 12 + 128 + (32 if qtype == Q.Q5_K else 0)
        d, dmin = finite_f16(rng, n_blocks), finite_f16(rng, n_blocks)
        return np.concatenate([d, dmin, rng.integers(0, 256, size=(n_blocks, rest), dtype=np.uint8)], axis=1)
    if qtype == Q.Q6_K:
        # ql, qh and i8 scales, then f16 d last.
        body = rng.integers(0, 256, size=(n_blocks, 128 + 64 + 16), dtype=np.uint8)
        return np.concatenate([body, finite_f16(rng, n_blocks)], axis=1)
    raise ValueError(qtype)


def write(path, blocks_path=None):
    rng = np.random.default_rng(20240607)
    w = gguf.GGUFWriter(path, arch="interop")
    lines = [f"kv general.architecture {canon(V.STRING, 'interop')}"]

    def kv(key, vtype, value, elem=None):
        w.add_key_value(key, value, vtype, sub_type=elem)
        lines.append(f"kv {key} {canon(vtype, (elem, value) if vtype == V.ARRAY else value)}")

    kv("t.u8", V.UINT8, 250)
    kv("t.i8", V.INT8, -120)
    kv("t.u16", V.UINT16, 65000)
    kv("t.i16", V.INT16, -32000)
    kv("t.u32", V.UINT32, 4_000_000_000)
    kv("t.i32", V.INT32, -2_000_000_000)
    kv("t.f32", V.FLOAT32, np.float32(-3.5e-5))
    kv("t.bool", V.BOOL, True)
    kv("t.bool.false", V.BOOL, False)
    kv("t.str", V.STRING, "héllo ✓ wörld")
    kv("t.u64", V.UINT64, 2**64 - 1)
    kv("t.i64", V.INT64, -(2**63))
    kv("t.f64", V.FLOAT64, 2.718281828459045)
    kv("t.arr.u8", V.ARRAY, [0, 1, 255], V.UINT8)
    kv("t.arr.i16", V.ARRAY, [-5, 5], V.INT16)
    kv("t.arr.u32", V.ARRAY, [1, 2, 3], V.UINT32)
    kv("t.arr.i32", V.ARRAY, [-1, 0, 1], V.INT32)
    kv("t.arr.f32", V.ARRAY, [0.5, -0.25, 1e-3], V.FLOAT32)
    kv("t.arr.bool", V.ARRAY, [True, False], V.BOOL)
    kv("t.arr.str", V.ARRAY, ["<s>", "</s>", "ünï", ""], V.STRING)
    kv("t.arr.i64", V.ARRAY, [-(2**63), 2**63 - 1], V.INT64)
    kv("t.arr.f64", V.ARRAY, [1e300, -1e-300], V.FLOAT64)
    w.add_key_value("t.arr.nested", [[1, 2], [3]], V.ARRAY)
    # gguf-py infers nested element types from Python values: int -> int32.
    lines.append(f"kv t.arr.nested {canon(V.ARRAY, (V.ARRAY, [(V.INT32, [1, 2]), (V.INT32, [3])]))}")

    tensors = []

    def tensor(name, array, qtype, raw_dtype=None):
        w.add_tensor(name, array, raw_dtype=raw_dtype)
        tensors.append((name, qtype, array))

    tensor("f32", rng.standard_normal((3, 5)).astype(np.float32), Q.F32)
    tensor("f16", rng.standard_normal((2, 7)).astype(np.float16), Q.F16)
    bf16 = gguf.quants.quantize(rng.standard_normal((2, 4)).astype(np.float32), Q.BF16)
    tensor("bf16", bf16, Q.BF16, raw_dtype=Q.BF16)
    blocks_of = [
        ("q8_0", Q.Q8_0, 3, 2),
        ("q4_0", Q.Q4_0, 2, 3),
        ("mxfp4", Q.MXFP4, 4, 2),
        ("q4_k", Q.Q4_K, 2, 2),
        ("q5_k", Q.Q5_K, 1, 3),
        ("q6_k", Q.Q6_K, 3, 1),
    ]
    for name, qtype, rows, blocks in blocks_of:
        raw = random_blocks(rng, rows * blocks, qtype).reshape(rows, -1)
        tensor(name, raw, qtype, raw_dtype=qtype)
    tensor("i32", np.array([[1, -2, 3], [4, 5, -6]], dtype=np.int32), Q.I32)
    if blocks_path is not None:
        for t in gguf.GGUFReader(blocks_path).tensors:
            raw = np.frombuffer(t.data.tobytes(), dtype=np.uint8).reshape(1, -1)
            tensor(f"ours.{t.name}", raw, t.tensor_type, raw_dtype=t.tensor_type)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    offset = 0
    for name, qtype, array in tensors:
        raw = array.tobytes()
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        shape = list(array.shape)
        if array.dtype == np.uint8:  # raw blocks: the last axis counts bytes
            shape[-1] = shape[-1] // size * block
        dims = list(reversed(shape))  # GGUF order: ne[0] is the last numpy axis
        lines += tensor_lines(name, qtype, dims, offset, raw)
        offset += (len(raw) + 31) // 32 * 32
    print("\n".join(lines))


def decode_parts(parts, i, vtype):
    """Decodes a value from a ReaderField's parts from index i; returns (next index, canon)."""
    vtype = int(vtype)
    if vtype == V.STRING:
        return i + 2, canon(V.STRING, parts[i + 1].tobytes())
    if vtype == V.ARRAY:
        elem, n = int(parts[i][0]), int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(n):
            i, item = decode_parts(parts, i, elem)
            items.append(item)
        return i, f"arr:{TYPE_NAMES[elem]}[{','.join(items)}]"
    return i + 1, canon(vtype, parts[i][0])


def read(path):
    r = gguf.GGUFReader(path)
    lines = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's pseudo-fields for the header
        _, text = decode_parts(field.parts, 3, field.parts[2][0])
        lines.append(f"kv {key} {text}")
    for t in r.tensors:
        dims = [int(d) for d in t.field.parts[3]]
        raw = t.data.tobytes()
        assert len(raw) == t.n_bytes, (t.name, len(raw), t.n_bytes)
        lines += tensor_lines(t.name, t.tensor_type, dims, t.data_offset - r.data_offset, raw)
    print("\n".join(lines))


def quantize(path):
    lines = []
    for t in gguf.GGUFReader(path).tensors:
        qtype = Q[t.name.split(".")[0]]
        values = np.asarray(t.data, dtype=np.float32).reshape(-1, 32)
        # Scales past f16's range overflow to inf, as ggml's do.
        with np.errstate(over="ignore"):
            raw = gguf.quants.quantize(values, qtype)
        lines.append(f"quant {t.name} {raw.tobytes().hex()}")
    print("\n".join(lines))


def npy(path):
    a = np.load(path)
    print(f"npy {','.join(str(d) for d in a.shape)} {a.dtype.str} {np.ascontiguousarray(a).tobytes().hex()}")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"write": write, "read": read, "npy": npy, "quantize": quantize}[mode](*args)
