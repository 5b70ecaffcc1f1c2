#!/usr/bin/env python3
"""The byte-level pre-tokenizers' words, by the models' own expressions run by Python's `regex`.

Usage: pretokenize_regex.py INPUT. Each line of INPUT is `<pre-tokenizer name>\t<text as hex
UTF-8>`; each line of the output is that text's words, hex, comma-separated. The expressions are
those of the models' `tokenizer.json` (lookahead `\\s+(?!\\S)` included), which rocm-model runs
without the lookahead and completes by hand (src/model/vocabulary/pretokenize.rs): this is the
independent side of tests/host/pretokenize_regex.rs.
"""

import sys

import regex

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PATTERNS = {"gpt-2": GPT2, "llama-bpe": LLAMA3, "qwen2": QWEN2, "tekken": TEKKEN}


def main():
    compiled = {name: regex.compile(p) for name, p in PATTERNS.items()}
    out = []
    with open(sys.argv[1], encoding="ascii") as f:
        for line in f.read().splitlines():
            name, text = line.split("\t")
            words = compiled[name].findall(bytes.fromhex(text).decode("utf-8"))
            out.append(",".join(w.encode("utf-8").hex() for w in words))
    sys.stdout.write("".join(line + "\n" for line in out))


if __name__ == "__main__":
    main()
