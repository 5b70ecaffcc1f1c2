// The reference's side of kernels/include/rocmforge_x16.h (bf16 x staged as block-scaled f16),
// for the suites whose kernels stage x so (mma.cpp, qmvm.cpp, tiled.cpp): the bound on what
// staging moves an element, and x values that exercise it. After simt.h.
#pragma once

#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

// What rounding bf16 x to scaled f16 may cost an element of block `blk`: 2^(-25 - s), s putting
// the block's largest finite magnitude in [2^14, 2^15) (0 for a block of zeros, at most 126); 0
// for f16 x and where `scaled` says the entry takes x as it is.
template <typename T> static double x16_rounding(const T* x, int blk, bool scaled) {
    if (!scaled || !std::is_same<T, rf_bf16>::value) return 0.0;
    unsigned m = 0;
    for (int e = 0; e < 32; ++e) {
        const unsigned a = emu_bits(x[blk * 32 + e]) & 0x7fffu;
        if (a < 0x7f80u) m = std::max(m, a);
    }
    const int s = m == 0 ? 0 : std::min(141 - (int)(m >> 7), 126);
    return std::ldexp(1.0, -25 - s);
}

// x16_rounding for each 32-element block of `batch` vectors of x (k apart): ref_row's `unit`.
template <typename T> static std::vector<double> x16_units(const T* x, int k, int batch, bool scaled) {
    std::vector<double> unit((size_t)batch * (k / 32));
    for (int b = 0; b < batch; ++b)
        for (int blk = 0; blk < k / 32; ++blk) unit[(size_t)b * (k / 32) + blk] = x16_rounding(x + (size_t)b * k, blk, scaled);
    return unit;
}

// x's values: uniform in (-1, 1); or, block by block, magnitudes spread over 2^-60 .. 2^60 around
// a random block exponent in -40 .. 40 (rounded when staged as scaled f16), a block of zeros, a
// block of bf16 subnormals and blocks near 2^100 and 2^-100.
// RANGE: each block one element of magnitude 2^20 (the suite zeroes its weight in every row)
// and 31 near 2^-20, so the row sums are made of the elements that the scaled f16 rounds.
enum XValues { UNIFORM, WIDE, RANGE };

template <typename T> static void fill_x(T* x, int k, XValues xv, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
    for (int i = 0; i < k; ++i) x[i] = Io<T>::store(ux(rng));
    if (xv == UNIFORM) return;
    if (xv == RANGE) {
        for (int i = 0; i < k; ++i) x[i] = Io<T>::store(i % 32 == 0 ? std::ldexp(1.0f, 20) : std::ldexp(ux(rng), -20));
        return;
    }
    std::uniform_int_distribution<int> spread(-60, 60), centre(-40, 40);
    for (int blk = 0; blk < k / 32; ++blk) {
        const int kind = blk % 5, c = centre(rng);
        for (int e = 0; e < 32; ++e) {
            float v = ux(rng);
            if (kind == 0) v = std::ldexp(v, c + spread(rng));
            if (kind == 1) v = 0.0f;
            if (kind == 2) v = std::ldexp(v, -127 - (int)(rng() % 6)); // bf16 subnormals
            if (kind == 3) v = std::ldexp(v, 100);
            if (kind == 4) v = std::ldexp(v, -100 + spread(rng) / 4);
            x[blk * 32 + e] = Io<T>::store(v);
        }
    }
}
