#!/bin/sh
# Builds and runs the CPU emulation of AMD kernels (the emulator: simt.h), each suite once per
# target. Suites:
#   flash    the flash-attention kernels (flash.cpp): on gfx908 (MFMA, bf16 as two 16x16x8 steps),
#            gfx90a (MFMA 16x16x16 f16 / bf16_1k), gfx942 (CDNA3), gfx950 (CDNA4), and gfx1100
#            (RDNA3, no MFMA: the portable kernel and rocmforge.h's wave helpers, wave32 and wave64)
#   decode   the decode step's small kernels (decode.cpp: RoPE, the KV-cache writes, RMSNorm,
#            SwiGLU), wave32 and wave64 on every target
#   quant    the portable quantised matrix-vector kernel (quant.cpp: quant_matvec.hip, every ggml
#            format), wave32 and wave64 on every target
#   dequant  the dequantisation kernel (dequant.cpp: dequant.hip, all eight block formats, bit for
#            bit), wave32 and wave64 on every target
#   mxfp     the portable MX matrix-vector kernel (mxfp.cpp: mxfp.hip, MXFP4 and MXFP6), wave32
#            and wave64 on every target
#   gemm     the portable GEMM (gemm.cpp: gemm.hip, tiled and skinny kernels), wave32 and wave64
#            on every target
#   mma      NVIDIA's matrix-core MX matrix-vector kernels (mma.cpp: mxfp.hip's rf_*_matvec_mma_*),
#            on the one NVIDIA target, sm80: the kernels built with RF_EMU_MMA_SYNC, whose
#            mma.sync, cp.async and warp primitives emu_mma_sync.h emulates (AMD targets do not
#            run this suite, nor sm80 the others)
#   qmvm     NVIDIA's matrix-core matrix-vector kernels of ggml's formats (qmvm.cpp:
#            quant_matvec_mma.hip's rf_qmvm_*: the pipelined loop, its passes of 8, q4_K's
#            columns loop and its gate-and-up entry), on sm80 as mma
#   tiled    the matrix-vector kernels over the tiled layouts (tiled.cpp: mxfp4_tiled.hip,
#            q4k_tiled.hip, q8_0_tiled.hip): the portable kernels and the dequantisations, wave32 and wave64, on
#            every AMD target; the matrix-core entries of each on sm80
# Every suite is built with AddressSanitizer over exact-size buffers (an access outside one is
# an error), or with `race`, ThreadSanitizer instead.
# Usage: crates/rocm-kernels/tests/amd_emu/run.sh [quick] [race] [SUITE...] [TARGET...]
#        (default: every suite, each on every target it runs on)
#   race     build with ThreadSanitizer instead (simt.h, "Races"): two lanes of a block touching
#            the same memory, one writing, with no barrier or wavefront operation between them,
#            fail the suite (exit status 66)
# Needs clang (ext_vector_type, _Float16 on the host: clang 15 or newer on x86-64): $CXX if that
# is clang, else clang++, else the newest clang++-NN on PATH. Binaries go to $AMD_EMU_OUT, else
# ${CARGO_TARGET_DIR:-target}/amd_emu. Optimisation: $AMD_EMU_OPT, else -O0 for quick (the build
# dominates there) and -O1 for the full run (every level gives the same results).
# Exit status: 0 only if every suite built and passed on every target.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
out=${AMD_EMU_OUT:-${CARGO_TARGET_DIR:-$root/target}/amd_emu}
all_targets="gfx908 gfx90a gfx942 gfx950 gfx1100"
all_suites="flash decode quant dequant mxfp gemm mma qmvm tiled"

mode=
race=
suites=
targets=
for arg in "$@"; do
    case $arg in
    quick) mode=quick ;;
    race) race=race ;;
    flash | decode | quant | dequant | mxfp | gemm | mma | qmvm | tiled) suites="$suites $arg" ;;
    gfx908 | gfx90a | gfx942 | gfx950 | gfx1100 | sm80) targets="$targets $arg" ;;
    *)
        echo "run.sh: unknown argument '$arg' (usage: run.sh [quick] [race] [SUITE...] [TARGET...], suites: $all_suites, targets: $all_targets sm80)" >&2
        exit 2
        ;;
    esac
done
suites=${suites:-$all_suites}
targets=${targets:-$all_targets sm80}
if [ "$mode" = quick ]; then opt=${AMD_EMU_OPT:--O0}; else opt=${AMD_EMU_OPT:--O1}; fi

is_clang() {
    "$1" --version 2>/dev/null | grep -qi clang
}

# The compiler: $CXX if it is clang, else clang++, else the newest clang++-NN on PATH.
cxx=
if [ -n "${CXX:-}" ]; then
    if is_clang "$CXX"; then
        cxx=$CXX
    else
        echo "run.sh: CXX=$CXX is not clang (the emulation needs clang's ext_vector_type and _Float16); looking for clang++" >&2
    fi
fi
if [ -z "$cxx" ] && command -v clang++ >/dev/null 2>&1 && is_clang clang++; then
    cxx=clang++
fi
if [ -z "$cxx" ]; then
    best=0
    old_ifs=$IFS
    IFS=:
    for dir in $PATH; do
        IFS=$old_ifs
        for candidate in "${dir:-.}"/clang++-[0-9]*; do
            [ -x "$candidate" ] || continue
            version=${candidate##*/clang++-}
            case $version in *[!0-9]*) continue ;; esac
            if [ "$version" -gt "$best" ] && is_clang "$candidate"; then
                best=$version
                cxx=$candidate
            fi
        done
    done
    IFS=$old_ifs
fi
if [ -z "$cxx" ]; then
    cat >&2 <<EOF
run.sh: no clang C++ compiler found: set CXX to a clang++ (15 or newer on x86-64), or put clang++
or clang++-NN on PATH (Debian/Ubuntu: apt-get install clang, or hipcc, which brings clang++-NN).
EOF
    exit 127
fi
echo "run.sh: compiler $cxx ($("$cxx" --version | head -n 1))"

mkdir -p "$out"
status=0
for suite in $suites; do
    # AddressSanitizer: every suite's buffers are exact-size (simt.h's EmuBuffers); the fibers'
    # stacks live as long as the process (not leaks). Or ThreadSanitizer for `race`.
    sanitize=-fsanitize=address
    if [ -n "$race" ]; then sanitize="-fsanitize=thread -g"; fi
    for arch in $targets; do
        # The mma and qmvm suites run on sm80 only, tiled on every target, every other suite on
        # the AMD targets only.
        case $suite:$arch in
        # (-Wno-pass-failed: the kernels' `#pragma unroll` over loops that may break early,
        # which nvcc unrolls and the host compiler at -O1 says it cannot.)
        mma:sm80 | qmvm:sm80 | tiled:sm80) defines="-DRF_EMU_MMA_SYNC -Wno-pass-failed" ;;
        mma:* | qmvm:* | *:sm80) continue ;;
        *) defines=-D__${arch}__ ;;
        esac
        echo "== $suite $arch${mode:+ ($mode)}${race:+ ($race)}"
        bin="$out/${suite}_$arch${race:+_race}"
        if ! "$cxx" -std=c++17 $opt $sanitize -Wall -Wno-unused-function -D__HIP__ $defines -DEMU_TARGET_NAME="\"$arch\"" \
            -I"$here" -I"$root/kernels" -I"$root/kernels/include" -o "$bin" "$here/$suite.cpp"; then
            echo "run.sh: $suite $arch: build failed" >&2
            status=1
            continue
        fi
        if ! ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} "$bin" $mode; then
            echo "run.sh: $suite $arch: FAILED" >&2
            status=1
        fi
    done
done
exit $status
