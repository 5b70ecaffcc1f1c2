#!/usr/bin/env python3
"""Fetches llama.cpp's tokenizer test vocabularies into a folder (default: target/llama-vocabs).

llama.cpp keeps, per tokenizer, a vocabulary-only GGUF (`ggml-vocab-<name>.gguf`, written by its
converter from the model's Hugging Face tokenizer) and 46 texts (`.inp`) with the ids Hugging
Face `tokenizers` gives them (`.out`, `encode(text, add_special_tokens=False)`). rocm-model's
`tests/host/llama_vocabs.rs` checks its tokenizer against them: an implementation nobody here
wrote, on real vocabularies.

They come from the llama-cpp-python source distribution on PyPI (it vendors llama.cpp), pinned by
version and SHA-256, since only the package registries are reachable from CI. Only the files
named in VOCABS are extracted (about 17 MB). Nothing is fetched when they are all present.
"""

import hashlib
import os
import sys
import tarfile
import tempfile
import urllib.request

URL = (
    "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
    "llama_cpp_python-0.3.36.tar.gz"
)
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
VOCABS = ["llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2"]


def wanted():
    for name in VOCABS:
        for suffix in (".gguf", ".gguf.inp", ".gguf.out"):
            yield f"ggml-vocab-{name}{suffix}"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("target", "llama-vocabs")
    names = list(wanted())
    if all(os.path.isfile(os.path.join(out, n)) for n in names):
        print(f"all {len(names)} files present in {out}")
        return
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, "sdist.tar.gz")
        print(f"downloading {URL}")
        with urllib.request.urlopen(URL, timeout=300) as response, open(archive, "wb") as f:
            while chunk := response.read(1 << 20):
                f.write(chunk)
        digest = hashlib.sha256(open(archive, "rb").read()).hexdigest()
        if digest != SHA256:
            sys.exit(f"SHA-256 mismatch: got {digest}, expected {SHA256}")
        with tarfile.open(archive) as tar:
            for name in names:
                member = tar.getmember(PREFIX + name)
                src = tar.extractfile(member)
                if src is None:
                    sys.exit(f"{PREFIX + name} is not a file in the archive")
                with open(os.path.join(out, name), "wb") as dst:
                    dst.write(src.read())
    print(f"{len(names)} files in {out}")


if __name__ == "__main__":
    main()
