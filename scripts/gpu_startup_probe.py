#!/usr/bin/env python3
"""Where a GPU test process's start-up time goes, and whether it serialises across processes.

    gpu_startup_probe.py [--procs N] [--gpus G] [--no-release] [FATBIN...]
    gpu_startup_probe.py --procs N --exec CMD [ARG...]

First form: starts N processes at once; each times, through the CUDA driver API (ctypes on
libcuda.so.1, nothing else needed), the steps a GPU test process takes before and after its
kernels: cuInit, retaining the primary context of device (index % G), one 64 MiB cuMemAlloc and
cuMemFree, cuModuleLoadData of each FATBIN, and releasing the context. Prints each step's
min / median / max over the processes and the wall time of the whole batch. A step whose time
grows with N while the device is idle is serialised somewhere in the driver. `--no-release`
leaves the context to the process's exit (the batch's wall time then includes that teardown).

Second form: starts N copies of CMD at once and prints their wall times (e.g. one GPU test
binary run with `--exact NAME`), to compare a whole test process with its CUDA steps.
"""

import ctypes
import json
import statistics
import subprocess
import sys
import time


def child(ordinal, fatbins, release=True):
    cuda = ctypes.CDLL("libcuda.so.1")
    times = {}

    def step(name, fn):
        t = time.perf_counter()
        r = fn()
        times[name] = time.perf_counter() - t
        if r != 0:
            raise SystemExit(f"{name}: CUDA error {r}")

    step("cuInit", lambda: cuda.cuInit(0))
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    step("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), ordinal))
    step("ctx retain", lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    step("ctx current", lambda: cuda.cuCtxSetCurrent(ctx))
    ptr = ctypes.c_uint64()
    step("alloc 64 MiB", lambda: cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(64 << 20)))
    step("free", lambda: cuda.cuMemFree_v2(ptr))
    for path in fatbins:
        image = open(path, "rb").read()
        module = ctypes.c_void_p()
        step(f"load {path.rsplit('/', 1)[-1]}", lambda: cuda.cuModuleLoadData(ctypes.byref(module), image))
    if release:
        step("ctx release", lambda: cuda.cuDevicePrimaryCtxRelease_v2(dev))
    print(json.dumps(times), flush=True)


def spread(values):
    values = sorted(values)
    return f"{values[0] * 1e3:8.1f} {statistics.median(values) * 1e3:8.1f} {values[-1] * 1e3:8.1f}"


def main(argv):
    procs, gpus, release, rest = 1, 1, True, []
    args = iter(argv)
    for a in args:
        if a == "--procs":
            procs = int(next(args))
        elif a == "--gpus":
            gpus = int(next(args))
        elif a == "--no-release":
            release = False
        elif a == "--child":
            ordinal = int(next(args))
            keep = next(args) == "release"
            child(ordinal, list(args), keep)
            return
        elif a == "--exec":
            rest = ["--exec", *args]
        else:
            rest.append(a)
    start = time.perf_counter()
    if rest[:1] == ["--exec"]:
        cmd = rest[1:]
        begun = []
        running = []
        for _ in range(procs):
            begun.append(time.perf_counter())
            running.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        took = []
        for b, p in zip(begun, running):
            p.wait()
            took.append(time.perf_counter() - b)
        print(f"{procs} x {' '.join(cmd)}: ms min/median/max {spread(took)}; "
              f"wall {time.perf_counter() - start:.2f} s")
        return
    running = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", str(i % gpus), "release" if release else "keep", *rest],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(procs)
    ]
    outputs = [p.communicate()[0] for p in running]
    if any(p.returncode != 0 for p in running):
        raise SystemExit("a probe process failed (its error is above)")
    results = [json.loads(out) for out in outputs]
    wall = time.perf_counter() - start
    kept = "" if release else ", contexts left to process exit"
    print(f"{procs} process(es) over {gpus} GPU(s){kept}, wall {wall:.2f} s; ms min / median / max:")
    for name in results[0]:
        print(f"  {name:<28} {spread([r[name] for r in results])}")


if __name__ == "__main__":
    main(sys.argv[1:])
