// rf_spin_cycles: one thread busy-waits for at least `cycles` of its multiprocessor's clock and
// writes the cycles it actually waited. A stand-in for long work on a stream we do not own, in
// the tests that show our stream synchronisation never waits for other streams.
//
// rf_spin_cycles_then_store: the same for a dependent launch (rocmforge_dependent_launch.h)
// that lets the kernel behind it start at once and stores only after spinning, the count in
// each of out[0, n): a kernel behind it that read `out` before its own wait would read what was
// there before. The tests of `Launch::reads_before_wait`.

#include "rocmforge.h"
#include "rocmforge_dependent_launch.h"

RF_DEVICE unsigned long long rf_spin_for(unsigned long long cycles) {
    const long long start = clock64();
    long long now = start;
    while ((unsigned long long)(now - start) < cycles) {
        now = clock64();
    }
    return (unsigned long long)(now - start);
}

RF_KERNEL void rf_spin_cycles(unsigned long long cycles, unsigned long long* waited) {
    if (threadIdx.x != 0 || blockIdx.x != 0) {
        return;
    }
    *waited = rf_spin_for(cycles);
}

RF_KERNEL void rf_spin_cycles_then_store(unsigned long long cycles, unsigned long long* out, unsigned long long n) {
    rf_follow_prior_grid();
    if (threadIdx.x != 0 || blockIdx.x != 0) {
        return;
    }
    const unsigned long long spun = rf_spin_for(cycles);
    for (unsigned long long i = 0; i < n; ++i) {
        out[i] = spun;
    }
}
