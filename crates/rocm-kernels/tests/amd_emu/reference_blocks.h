// The block formats as the quant and dequant suites' references read them, written from the
// formats' published layouts (ggml's block_q8_0, block_q4_0, block_mxfp4, block_q4_K,
// block_q5_K, block_q6_K; the OCP MX v1.0 element encodings and E8M0 scales), not from the
// kernels' code or the Rust codec; and random blocks to feed the kernels. After simt.h.
#pragma once

enum Fmt { Q8_0, Q4_0, MXFP4, MXFP6_E2M3, MXFP6_E3M2, Q4_K, Q5_K, Q6_K };
struct FmtInfo {
    const char* name;
    int elems, bytes;
};
static const FmtInfo FMTS[] = {
    {"q8_0", 32, 34},       {"q4_0", 32, 18},   {"mxfp4", 32, 17},  {"mxfp6_e2m3", 32, 25},
    {"mxfp6_e3m2", 32, 25}, {"q4_K", 256, 144}, {"q5_K", 256, 176}, {"q6_K", 256, 210},
};
// The most elements a block of any format holds (the k-quants' super-blocks).
constexpr int REF_MAX_ELEMS = 256;

static double ref_f16_at(const unsigned char* p) { return emu::f16f((uint16_t)(p[0] | p[1] << 8)); }

// E8M0: 2^(e - 127); 0xFF is NaN.
static double ref_e8m0(unsigned e) { return e == 0xff ? NAN : std::ldexp(1.0, (int)e - 127); }

// An OCP MX element of `ebits` exponent and `mbits` mantissa bits (sign on top): subnormal at
// exponent 0, bias 2^(ebits - 1) - 1, no infinities or NaNs (E2M1, E2M3, E3M2).
static double ref_mx_element(unsigned code, int ebits, int mbits) {
    const int bias = (1 << (ebits - 1)) - 1;
    const unsigned m = code & ((1u << mbits) - 1), e = (code >> mbits) & ((1u << ebits) - 1);
    const double mag = e == 0 ? std::ldexp((double)m, 1 - bias - mbits)
                              : std::ldexp(1.0 + std::ldexp((double)m, -mbits), (int)e - bias);
    return (code >> (ebits + mbits)) & 1 ? -mag : mag;
}

// ggml's 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K super-block's 12 bytes.
static void ref_scale_min_k4(int j, const unsigned char* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// One block's elements in f64 (exact: every one is exact in f32 but q4_K / q5_K's difference,
// which is exact here and rounds once to f32), and, when `mag` is given, the magnitude of what
// a product adds for each: |w|, or |step code| + |min| for q4_K / q5_K (added apart).
static void ref_decode_block(Fmt f, const unsigned char* b, double* w, double* mag) {
    bool affine = false;
    switch (f) {
    case Q8_0:
        for (int j = 0; j < 32; ++j) w[j] = ref_f16_at(b) * (signed char)b[2 + j];
        break;
    case Q4_0:
        for (int j = 0; j < 16; ++j) {
            w[j] = ref_f16_at(b) * ((b[2 + j] & 0xF) - 8);
            w[j + 16] = ref_f16_at(b) * ((b[2 + j] >> 4) - 8);
        }
        break;
    case MXFP4:
        for (int j = 0; j < 16; ++j) {
            w[j] = ref_mx_element(b[1 + j] & 0xF, 2, 1) * ref_e8m0(b[0]);
            w[j + 16] = ref_mx_element(b[1 + j] >> 4, 2, 1) * ref_e8m0(b[0]);
        }
        break;
    case MXFP6_E2M3:
    case MXFP6_E3M2:
        for (int j = 0; j < 32; ++j) { // code j: bits 6j .. 6j + 5 of the little-endian payload
            unsigned code = 0;
            for (int bit = 0; bit < 6; ++bit) code |= ((b[1 + (6 * j + bit) / 8] >> ((6 * j + bit) % 8)) & 1u) << bit;
            w[j] = (f == MXFP6_E2M3 ? ref_mx_element(code, 2, 3) : ref_mx_element(code, 3, 2)) * ref_e8m0(b[0]);
        }
        break;
    case Q4_K:
    case Q5_K: {
        affine = true;
        const double d = ref_f16_at(b), dmin = ref_f16_at(b + 2);
        const unsigned char* qh = b + 16; // q5_K: 32 bytes of fifth bits
        const unsigned char* qs = b + (f == Q5_K ? 48 : 16);
        for (int c = 0; c < 4; ++c) { // 64 elements: sub-blocks 2c (low nibbles) and 2c + 1 (high)
            for (int half = 0; half < 2; ++half) {
                int sc, m;
                ref_scale_min_k4(2 * c + half, b + 4, &sc, &m);
                for (int l = 0; l < 32; ++l) {
                    int q = half == 0 ? qs[32 * c + l] & 0xF : qs[32 * c + l] >> 4;
                    if (f == Q5_K && (qh[l] >> (2 * c + half) & 1)) q += 16;
                    const int e = 64 * c + 32 * half + l;
                    w[e] = d * sc * q - dmin * m;
                    if (mag) mag[e] = std::fabs(d * sc * q) + std::fabs(dmin * m);
                }
            }
        }
        break;
    }
    case Q6_K: {
        const signed char* sc = (const signed char*)(b + 192);
        const double d = ref_f16_at(b + 208);
        for (int n = 0; n < 2; ++n) {
            for (int l = 0; l < 32; ++l) {
                const unsigned char lo0 = b[64 * n + l], lo1 = b[64 * n + l + 32], hi = b[128 + 32 * n + l];
                const int is = 8 * n + l / 16;
                w[128 * n + l] = d * sc[is] * (((lo0 & 0xF) | ((hi & 3) << 4)) - 32);
                w[128 * n + l + 32] = d * sc[is + 2] * (((lo1 & 0xF) | (((hi >> 2) & 3) << 4)) - 32);
                w[128 * n + l + 64] = d * sc[is + 4] * (((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32);
                w[128 * n + l + 96] = d * sc[is + 6] * (((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32);
            }
        }
        break;
    }
    }
    if (mag && !affine)
        for (int j = 0; j < FMTS[f].elems; ++j) mag[j] = std::fabs(w[j]);
}

// One row's reference over `batch` vectors of x (vector-major, k apart; the storage type's
// values): want[b] = sum of w x in f64, mag[b] = sum of the terms' magnitudes per ref_decode_block
// (what the kernels' f32 sums' bound is taken of). With `unit` (per vector, per 32-element block
// of x: what staging x may move an element, k / 32 apart), xr[b] = sum of the terms' magnitudes
// per unit of |x| times their block's unit.
template <typename T>
static void ref_row(Fmt f, const unsigned char* row, int k, const T* x, int batch, double* want, double* mag,
                    double* xr = nullptr, const double* unit = nullptr) {
    const FmtInfo& fi = FMTS[f];
    double w[REF_MAX_ELEMS], m[REF_MAX_ELEMS]; // a block's (no allocation a row)
    for (int b = 0; b < batch; ++b) {
        want[b] = mag[b] = 0.0;
        if (xr) xr[b] = 0.0;
    }
    for (int blk = 0; blk < k / fi.elems; ++blk) {
        ref_decode_block(f, row + (size_t)blk * fi.bytes, w, m);
        for (int b = 0; b < batch; ++b)
            for (int e = 0; e < fi.elems; ++e) {
                const int c = blk * fi.elems + e;
                const double xv = Io<T>::load(x[(size_t)b * k + c]);
                want[b] += w[e] * xv;
                mag[b] += m[e] * std::fabs(xv);
                if (xr) xr[b] += m[e] * unit[(size_t)b * (k / 32) + c / 32];
            }
    }
}

// The tolerance on an output of type T of a sum of k terms of magnitude `mag`: the f32 sums'
// (k + 1) 2^-23 mag (quant/matvec.rs, allowed_error) and one rounding to T; `xr`, what rounding
// x may have moved the sum (ref_row), joins the terms.
template <typename T> static double ref_tolerance(int k, double mag, double want, double xr = 0.0) {
    return ((k + 1.0) * 0x1p-23 * (mag + xr) + xr) * (1.0 + Io<T>::rel) + Io<T>::rel * std::fabs(want) + Io<T>::abs;
}

// Whether `got` is within `tol` of `want` (a NaN fails); a passing output raises `worst`, the
// suite's worst error as a fraction of its tolerance.
static bool ref_within(double got, double want, double tol, double& worst) {
    const double err = std::fabs(got - want);
    if (!(err <= tol)) return false;
    if (tol > 0) worst = std::max(worst, err / tol);
    return true;
}

// Checks a kernel's outputs for `rows` rows of `w` (rows of k elements of format f) over `batch`
// vectors of x: y[b * rows + r] against ref_row within ref_tolerance. `unit`, where the kernel
// stages x rounded: what that may move each 32-element block's elements (ref_row). Prints the
// first mismatches (tagged `what`), raises `worst` (ref_within) and returns false on any.
template <typename T>
static bool ref_check_rows(Fmt f, const unsigned char* w, int k, const T* x, const T* y, int rows, int batch,
                           double& worst, const char* what, const double* unit = nullptr) {
    std::vector<double> want(batch), mag(batch), xr(batch, 0.0);
    int bad = 0;
    for (int r = 0; r < rows; ++r) {
        ref_row(f, w + (size_t)r * (k / FMTS[f].elems) * FMTS[f].bytes, k, x, batch, want.data(), mag.data(),
                unit ? xr.data() : nullptr, unit);
        for (int b = 0; b < batch; ++b) {
            const double tol = ref_tolerance<T>(k, mag[b], want[b], xr[b]), got = Io<T>::load(y[(size_t)b * rows + r]);
            if (!ref_within(got, want[b], tol, worst) && bad++ < 5)
                std::printf("    %s row %d vector %d: got %.9g, want %.9g (tolerance %.3g)\n", what, r, b, got,
                            want[b], tol);
        }
    }
    return bad == 0;
}

// `nblocks` random blocks: every byte random, then the scales: f16 ones of random size
// (2^lo .. 2^(lo + span)) and sign, one in 32 zero and one in 32 subnormal; E8M0 ones mostly
// 100..154, anywhere (0xFF's NaN included) one in 16.
static void ref_random_blocks(Fmt f, unsigned char* b, size_t nblocks, int lo, int span, std::mt19937_64& rng) {
    const int bytes = FMTS[f].bytes;
    for (size_t i = 0; i < nblocks * bytes; ++i) b[i] = (unsigned char)rng();
    for (size_t k = 0; k < nblocks; ++k) {
        unsigned char* blk = b + k * bytes;
        std::vector<int> f16_fields;
        switch (f) {
        case Q8_0:
        case Q4_0: f16_fields = {0}; break;
        case Q4_K:
        case Q5_K: f16_fields = {0, 2}; break;
        case Q6_K: f16_fields = {208}; break;
        default: blk[0] = rng() % 16 == 0 ? (unsigned char)rng() : (unsigned char)(100 + rng() % 55); break;
        }
        for (int at : f16_fields) {
            const unsigned r = rng() % 32;
            float v = r == 0 ? 0.0f
                      : r == 1 ? std::ldexp((float)(1 + rng() % 1023), -24)
                               : std::ldexp(1.0f + (float)(rng() % 1024) / 1024.0f, lo + (int)(rng() % span));
            if (rng() & 1) v = -v;
            const uint16_t h = __half_as_ushort(__float2half(v));
            blk[at] = (unsigned char)h;
            blk[at + 1] = (unsigned char)(h >> 8);
        }
    }
}
