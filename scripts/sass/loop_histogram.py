#!/usr/bin/env python3
"""Count a kernel's instructions in its loops from `cuobjdump -sass` text (NVIDIA SASS).

Usage: cuobjdump -sass -fun ENTRY file.cubin | loop_histogram.py [--loops N] [--top M]

Prints, for the N largest loops (a backward branch and its target: the instructions between
them, nested loops included), the instruction count and a histogram of opcodes (predicates and
modifiers stripped: `@P0 IMAD.WIDE.U32` counts as IMAD). The docs/kernels notes use it to count
a loop's instructions a weight (the loop's count over the weights one trip consumes): the
quickest prediction of a decode kernel's issue time, and one that needs no GPU. cuobjdump's
-sass needs nvdisasm on PATH (`pip install nvidia-cuda-nvdisasm==13.*` has one).
"""
import argparse
import collections
import re
import sys

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")


def parse(text):
    """[(address, opcode, text)] and {label: address} from cuobjdump's listing."""
    insts, labels = [], {}
    pending = []
    for raw in text.splitlines():
        m = re.match(r"\s*\.L_x_(\d+):", raw)
        if m:
            pending.append(m.group(1))
            continue
        m = LINE.search(raw)
        if not m:
            continue
        addr = int(m.group(1), 16)
        body = m.group(2).strip()
        for name in pending:
            labels[name] = addr
        pending = []
        words = body.split()
        if words and words[0].startswith("@"):
            words = words[1:]
        if not words:
            continue
        insts.append((addr, words[0].split(".")[0], body))
    return insts, labels


def branch_target(body, labels):
    m = re.search(r"\.L_x_(\d+)", body)
    if m:
        return labels.get(m.group(1))
    m = re.search(r"\b0x([0-9a-f]+)\b\s*\)?\s*$", body)
    return int(m.group(1), 16) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loops", type=int, default=1, help="how many of the largest loops to print")
    ap.add_argument("--top", type=int, default=40, help="opcodes shown a loop")
    args = ap.parse_args()
    insts, labels = parse(sys.stdin.read())
    if not insts:
        sys.exit("no SASS instructions in the input (cuobjdump -sass needs nvdisasm on PATH)")
    index = {addr: i for i, (addr, _, _) in enumerate(insts)}
    loops = []
    for i, (addr, op, body) in enumerate(insts):
        if op not in ("BRA", "JMP"):
            continue
        target = branch_target(body, labels)
        if target is not None and target <= addr and target in index:
            loops.append((i - index[target] + 1, index[target], i))
    loops.sort(reverse=True)
    print(f"{len(insts)} instructions in the function, {len(loops)} backward branches")
    for size, start, end in loops[: args.loops]:
        hist = collections.Counter(op for _, op, _ in insts[start : end + 1])
        print(f"\nloop {insts[start][0]:#06x}..{insts[end][0]:#06x}: {size} instructions")
        for op, n in hist.most_common(args.top):
            print(f"  {op:10s} {n}")


if __name__ == "__main__":
    main()
