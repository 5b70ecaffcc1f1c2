// What the suites of the sm80 target (mma.cpp, qmvm.cpp) share: the check of a gate-and-up
// entry's bits. After simt.h and rocmforge_silu.h.
#pragma once

// The gate-and-up entry's outputs `act` against the bits of the two products' outputs (gate, up:
// as the list entry stored them) through rf_silu_mul; false on a mismatch.
template <typename T> static bool glu_bits_match(const T* act, const T* gate, const T* up, int n) {
    int bad = 0;
    for (int r = 0; r < n; ++r) {
        const T want = Io<T>::store(rf_silu_mul(Io<T>::load(gate[r]), Io<T>::load(up[r])));
        if (emu_bits(act[r]) != emu_bits(want) && bad++ < 5)
            std::printf("    glu row %d: got %#x, want %#x\n", r, emu_bits(act[r]), emu_bits(want));
    }
    return bad == 0;
}
