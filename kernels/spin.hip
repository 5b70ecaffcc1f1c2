// rf_spin_cycles: one thread busy-waits for at least `cycles` of its multiprocessor's clock and
// writes the cycles it actually waited. A stand-in for long work on a stream we do not own, in
// the tests that show our stream synchronisation never waits for other streams.

#include "rocmforge.h"

RF_KERNEL void rf_spin_cycles(unsigned long long cycles, unsigned long long* waited) {
    if (threadIdx.x != 0 || blockIdx.x != 0) {
        return;
    }
    const long long start = clock64();
    long long now = start;
    while ((unsigned long long)(now - start) < cycles) {
        now = clock64();
    }
    *waited = (unsigned long long)(now - start);
}
