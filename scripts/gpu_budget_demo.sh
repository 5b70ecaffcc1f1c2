#!/bin/sh
# The shared GPU budget, shown on a GPU host from the repository root with a packed suite in
# .gpu/ (cargo xtask gpu-archive). Uses the ignored tests of crates/rocm-testkit/tests/gpu_budget.rs
# and fill::planted_device_fault_writes_to_an_unmapped_address.
#   1. A 16 GiB budget: one test holds 12 GiB for 40 s; one asks for 8 GiB, waits 15 s and fails
#      naming the holder; the runtime's GPU tests (4 GiB each) still pass in what is left.
#   2. A holder killed with SIGKILL: the next test takes the whole budget without waiting.
#   3. A planted device fault: every later test on the device fails at once, naming it.
#   4. Bad input: a budget larger than the device; a declaration larger than the budget.
set -u
x=.gpu/xtask
export ROCMFORGE_GPU_BUDGET=16G ROCMFORGE_BUDGET_WAIT=15

echo "== 1. a test that asks for more than is left waits, then fails; the rest pass"
$x gpu-test --archive .gpu -- --no-fail-fast --run-ignored all \
    -E 'test(/budget_demo_holds|budget_demo_asks/) | binary(gpu_runtime)' 2>&1 |
    grep -E "^\s+(PASS|FAIL)|shared GPU budget|Summary" | sed 's/^ *//' | sort | uniq -c | sort -rn | head -20

echo "== 2. a SIGKILLed holder leaves no reservation"
$x gpu-test --archive .gpu -- --run-ignored all -E 'test(/budget_demo_holds/)' >/tmp/holder.log 2>&1 &
runner=$!
for _ in $(seq 60); do ls /tmp/rocmforge-budget/*/holder-* >/dev/null 2>&1 && break; sleep 0.5; done
echo "holders: $(cat /tmp/rocmforge-budget/*/holder-* 2>/dev/null | tr '\n' ' ')"
pkill -KILL -f 'budget_demo_holds' && echo "killed the holder with SIGKILL"
wait $runner
grep -E "SIGKILL|signal|FAIL|Summary" /tmp/holder.log | head -4
ROCMFORGE_BUDGET_WAIT=0 $x gpu-test --archive .gpu -- --run-ignored all -E 'test(/budget_demo_takes/)' 2>&1 |
    grep -E "PASS|FAIL|Summary|budget"

echo "== 3. a faulting kernel stops the run on its device"
unset ROCMFORGE_GPU_BUDGET
$x gpu-test --archive .gpu --serial -- --no-fail-fast --run-ignored all \
    -E 'test(/planted_device_fault/) | binary(gpu_runtime)' 2>&1 |
    grep -E "faulted earlier|illegal|ILLEGAL|Summary" | sed 's/^ *//' | sort | uniq -c | sort -rn | head -8

echo "== 4. bad input"
ROCMFORGE_GPU_BUDGET=100000G $x gpu-test --archive .gpu -- -E 'test(=axpy::axpy_matches_the_reference_at_awkward_sizes)' 2>&1 | grep -m1 -E "larger than the device"
ROCMFORGE_GPU_BUDGET=2G $x gpu-test --archive .gpu -- -E 'binary(gpu_runtime)' 2>&1 | grep -m1 -E "more than the whole"
$x gpu-test --archive .gpu --jobs-per-gpu 0 2>&1 | tail -1
