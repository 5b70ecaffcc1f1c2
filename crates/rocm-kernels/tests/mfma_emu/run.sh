#!/bin/sh
# Builds and runs the CPU emulation of the MFMA flash-attention kernels (see emu.cpp), once as
# gfx90a (16x16x16 f16 / bf16_1k) and once as gfx908 (bf16 as two 16x16x8 steps).
# Usage: crates/rocm-kernels/tests/mfma_emu/run.sh [quick]   (needs clang++ with _Float16)
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
out=${CARGO_TARGET_DIR:-$root/target}/mfma_emu
mkdir -p "$out"
CXX=${CXX:-clang++}
for arch in gfx90a gfx908; do
    $CXX -std=c++17 -O2 -Wall -Wno-unused-function -D__HIP__ -D__${arch}__ -I"$here" -I"$root/kernels" \
        -I"$root/kernels/include" -o "$out/emu_$arch" "$here/emu.cpp"
    "$out/emu_$arch" "$@"
done
