// What the suites of the sm80 target (mma.cpp, qmvm.cpp) share: a gate-and-up entry's
// parameters and the check of its bits. After simt.h, rocmforge_silu.h and the kernel file.
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

// A gate-and-up entry's parameters over the first two products of `p` (n rows each): w[0] the
// gate, w[1] the up projection, y[0] a poisoned output of n elements, returned in `act`.
template <typename T> static rf_qmv_products glu_products(EmuBuffers& mem, const rf_qmv_products& p, int n, T*& act) {
    rf_qmv_products g = {};
    g.w[0] = p.w[0];
    g.w[1] = p.w[1];
    g.rows[0] = (rf_u64)n;
    act = mem.exact<T>(n);
    for (int r = 0; r < n; ++r) act[r] = Io<T>::store(NAN);
    g.y[0] = act;
    return g;
}
