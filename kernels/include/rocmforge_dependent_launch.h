// rocmforge_dependent_launch.h: the device side of a dependent launch (`Launch::dependent`).
//
// On NVIDIA sm_90+ a kernel launched with programmatic stream serialisation may be scheduled
// before the kernel ahead of it on the stream has finished: as soon as every block of that
// kernel has called rf_launch_dependents() or exited. Its blocks then do what needs nothing of
// the earlier kernel (issue the first copies of a weight, compute addresses) and call
// rf_wait_prior_grid(), which returns once that kernel has completed and its writes are
// visible. What the dependent kernel gains is the launch latency and its own prologue, hidden
// behind the earlier kernel's tail; a decode step is a chain of short kernels, so those are a
// good part of it.
//
// The contract of a kernel whose launcher marks it dependent: call rf_wait_prior_grid() before
// reading anything an earlier kernel writes and before writing anything at all (an earlier
// kernel may still read what would be overwritten). Waiting is transitive: the kernel ahead
// waited for its own predecessor before doing any of its work.
//
// Elsewhere (AMD, NVIDIA before sm_90, a launch that was not dependent) both are no-ops: the
// wait returns at once because the launch was ordered anyway.

#ifndef ROCMFORGE_DEPENDENT_LAUNCH_H
#define ROCMFORGE_DEPENDENT_LAUNCH_H

#include "rocmforge.h"

#if RF_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RF_DEPENDENT_LAUNCH 1
#else
#define RF_DEPENDENT_LAUNCH 0
#endif

// Waits until the kernel ahead of this one on the stream has completed and its memory
// operations are visible. Every thread that touches memory the contract covers calls it.
RF_DEVICE void rf_wait_prior_grid() {
#if RF_DEPENDENT_LAUNCH
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel on the stream (if its launch is dependent) be scheduled before this one
// ends; it still waits for this one's completion in rf_wait_prior_grid(). Called once this
// block's own wait has returned, so that a chain of dependent kernels never holds more than
// two kernels' blocks at once.
RF_DEVICE void rf_launch_dependents() {
#if RF_DEPENDENT_LAUNCH
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The prologue of a kernel with nothing to do before its wait: wait for the kernel ahead, then
// let the next one be scheduled.
RF_DEVICE void rf_follow_prior_grid() {
    rf_wait_prior_grid();
    rf_launch_dependents();
}

#endif
