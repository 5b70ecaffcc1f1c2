// CPU emulation of the portable quantised matrix-vector kernel on its AMD code path
// (kernels/quant_matvec.hip: rf_qmv_<fmt>_b<BC>_<dt>, the product AMD GPUs run for decode), the
// emulator being simt.h: every ggml format it reads (q8_0, q4_0, q4_K, q5_K, q6_K), f32/f16/bf16,
// each pass width (1, 2, 4, 8 vectors) with batches of one pass and of several, wavefronts of 32
// and 64 lanes, blocks narrower than 128 threads where rows are short, grids that stride over
// row groups and across the products of one launch.
//
// The reference decodes the blocks here, from the formats' published layouts (ggml's
// block_q8_0 / block_q4_0 / block_q4_K / block_q5_K / block_q6_K), not from the kernel's or the
// Rust codec's code, and sums in f64; the tolerance is quant/matvec.rs's allowed_error (the
// kernel's f32 sums and the output's rounding, with q4_K / q5_K's scaled codes and mins counted
// separately). Weights are random bytes (every code, every 6-bit scale and min) with f16 scales
// of random size and sign, some zero and some subnormal; outputs are poisoned (NaN) first.
// run.sh builds this suite with AddressSanitizer and every buffer is its exact size, so a load
// past a weight's last byte (the 2-byte-aligned formats read 16-byte vectors) is an error.

#include "simt.h"

#include "quant_matvec.hip"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define EMU_ASAN 1
#endif
#endif

enum Fmt { Q8_0, Q4_0, Q4_K, Q5_K, Q6_K };
struct FmtInfo {
    const char* name;
    int elems, bytes;
    bool affine; // q4_K, q5_K: step * code - min
};
static const FmtInfo FMTS[] = {
    {"q8_0", 32, 34, false}, {"q4_0", 32, 18, false}, {"q4_K", 256, 144, true},
    {"q5_K", 256, 176, true}, {"q6_K", 256, 210, false},
};

template <typename T> using QmvKernel = void (*)(const rf_qmv_products, const T*, rf_u64, unsigned int);

// The entries of one dtype, [format][pass 1, 2, 4, 8].
template <typename T> struct QmvEntries;
#define EMU_QMV_PASSES(fmt, suffix) {rf_qmv_##fmt##_b1_##suffix, rf_qmv_##fmt##_b2_##suffix, \
                                     rf_qmv_##fmt##_b4_##suffix, rf_qmv_##fmt##_b8_##suffix}
#define EMU_QMV_ENTRIES(suffix, T)                                                                     \
    template <> struct QmvEntries<T> {                                                                 \
        static constexpr QmvKernel<T> e[5][4] = {EMU_QMV_PASSES(q8_0, suffix), EMU_QMV_PASSES(q4_0, suffix), \
                                                 EMU_QMV_PASSES(q4_k, suffix), EMU_QMV_PASSES(q5_k, suffix), \
                                                 EMU_QMV_PASSES(q6_k, suffix)};                        \
    };
RF_FOR_EACH_DTYPE(EMU_QMV_ENTRIES)

template <typename T> struct Out;
template <> struct Out<float> {
    static constexpr const char* name = "f32";
    static float load(float v) { return v; }
    static float store(float v) { return v; }
};
template <> struct Out<__half> {
    static constexpr const char* name = "f16";
    static float load(__half h) { return emu::f16f(__half_as_ushort(h)); }
    static __half store(float v) { return __float2half(v); }
};
template <> struct Out<unsigned short> {
    static constexpr const char* name = "bf16";
    static float load(unsigned short b) { return emu::bf16f(b); }
    static unsigned short store(float v) { return Dt<rf_bf16>::from(v); }
};

static double f16_at(const unsigned char* p) { return emu::f16f((uint16_t)(p[0] | p[1] << 8)); }

// ggml's 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K super-block's 12 bytes.
static void scale_min_k4(int j, const unsigned char* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// One block's weights, and what the kernel adds for each (|w|, or |step code| + |min|).
static void decode_block(Fmt f, const unsigned char* b, double* w, double* mag) {
    switch (f) {
    case Q8_0: {
        const double d = f16_at(b);
        for (int j = 0; j < 32; ++j) w[j] = d * (signed char)b[2 + j];
        break;
    }
    case Q4_0: {
        const double d = f16_at(b);
        for (int j = 0; j < 16; ++j) {
            w[j] = d * ((b[2 + j] & 0xF) - 8);
            w[j + 16] = d * ((b[2 + j] >> 4) - 8);
        }
        break;
    }
    case Q4_K:
    case Q5_K: {
        const double d = f16_at(b), dmin = f16_at(b + 2);
        const unsigned char* scales = b + 4;
        const unsigned char* qh = b + 16;                // q5_K: 32 bytes of fifth bits
        const unsigned char* qs = b + (f == Q5_K ? 48 : 16);
        for (int c = 0; c < 4; ++c) { // 64 elements: sub-blocks 2c (low nibbles) and 2c + 1 (high)
            for (int half = 0; half < 2; ++half) {
                int sc, m;
                scale_min_k4(2 * c + half, scales, &sc, &m);
                for (int l = 0; l < 32; ++l) {
                    int q = half == 0 ? qs[32 * c + l] & 0xF : qs[32 * c + l] >> 4;
                    if (f == Q5_K && (qh[l] >> (2 * c + half) & 1)) q += 16;
                    const int e = 64 * c + 32 * half + l;
                    w[e] = d * sc * q - dmin * m;
                    mag[e] = std::fabs(d * sc * q) + std::fabs(dmin * m);
                }
            }
        }
        return;
    }
    case Q6_K: {
        const unsigned char* ql = b;
        const unsigned char* qh = b + 128;
        const signed char* sc = (const signed char*)(b + 192);
        const double d = f16_at(b + 208);
        for (int n = 0; n < 2; ++n) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[64 * n + l] & 0xF) | (((qh[32 * n + l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[64 * n + l + 32] & 0xF) | (((qh[32 * n + l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[64 * n + l] >> 4) | (((qh[32 * n + l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[64 * n + l + 32] >> 4) | (((qh[32 * n + l] >> 6) & 3) << 4)) - 32;
                w[128 * n + l] = d * sc[8 * n + is] * q1;
                w[128 * n + l + 32] = d * sc[8 * n + is + 2] * q2;
                w[128 * n + l + 64] = d * sc[8 * n + is + 4] * q3;
                w[128 * n + l + 96] = d * sc[8 * n + is + 6] * q4;
            }
        }
        break;
    }
    }
    for (int j = 0; j < FMTS[f].elems; ++j) mag[j] = std::fabs(w[j]);
}

// The byte offsets of a block's f16 scales.
static std::vector<int> scale_fields(Fmt f) {
    switch (f) {
    case Q8_0:
    case Q4_0: return {0};
    case Q4_K:
    case Q5_K: return {0, 2};
    default: return {208};
    }
}

// An exact-size heap buffer (AddressSanitizer's redzones catch any access past it), 16-byte
// aligned as the kernel requires.
template <typename X> static X* exact(size_t n) {
    const size_t used = n * sizeof(X), total = std::max<size_t>(16, (used + 15) / 16 * 16);
    void* p = std::aligned_alloc(16, total);
    // aligned_alloc takes a multiple of the alignment: the rounding is poisoned, so an access
    // past n elements is still an error.
#ifdef EMU_ASAN
    if (total > used) ASAN_POISON_MEMORY_REGION((char*)p + used, total - used);
#endif
    return (X*)p;
}

static int failures = 0;
static int checks = 0;
static double worst_ratio = 0.0;

struct QmvCase {
    Fmt fmt;
    std::vector<int> rows; // 1 to 3 products over one x
    int blocks_a_row;
    int batch, pass;       // pass: the entry's vectors (1, 2, 4, 8)
    int grid;              // 0: one block a row group
    bool quick;
};

template <typename T> static void qmv_case(const QmvCase& c, int width, std::mt19937_64& rng) {
    const FmtInfo& fi = FMTS[c.fmt];
    const int k = c.blocks_a_row * fi.elems;
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
    T* x = exact<T>((size_t)c.batch * k);
    std::vector<double> xd((size_t)c.batch * k);
    for (size_t i = 0; i < xd.size(); ++i) {
        x[i] = Out<T>::store(ux(rng));
        xd[i] = Out<T>::load(x[i]);
    }
    rf_qmv_products prod{};
    std::vector<unsigned char*> ws;
    std::vector<T*> ys;
    int groups = 0;
    for (size_t i = 0; i < c.rows.size(); ++i) {
        const size_t bytes = (size_t)c.rows[i] * c.blocks_a_row * fi.bytes;
        unsigned char* w = exact<unsigned char>(bytes);
        for (size_t j = 0; j < bytes; ++j) w[j] = (unsigned char)rng();
        for (size_t blk = 0; blk < bytes / fi.bytes; ++blk) {
            for (int at : scale_fields(c.fmt)) {
                const unsigned r = rng() % 32;
                float v = r == 0 ? 0.0f
                          : r == 1 ? std::ldexp((float)(1 + rng() % 1023), -24)
                                   : std::ldexp(1.0f + (float)(rng() % 1024) / 1024.0f, -12 + (int)(rng() % 7));
                if (rng() & 1) v = -v;
                const uint16_t h = __half_as_ushort(__float2half(v));
                w[blk * fi.bytes + at] = (unsigned char)h;
                w[blk * fi.bytes + at + 1] = (unsigned char)(h >> 8);
            }
        }
        T* y = exact<T>((size_t)c.batch * c.rows[i]);
        for (int j = 0; j < c.batch * c.rows[i]; ++j) y[j] = Out<T>::store(NAN);
        prod.w[i] = w;
        prod.y[i] = y;
        prod.rows[i] = (unsigned long long)c.rows[i];
        ws.push_back(w);
        ys.push_back(y);
        groups += (c.rows[i] + RF_QMV_ROWS - 1) / RF_QMV_ROWS;
    }
    // quant/matvec.rs's block: whole warps for the row's units, at most RF_QMV_THREADS.
    const int units = k / RF_QMV_UNIT;
    const int threads = std::min(RF_QMV_THREADS, (units + width - 1) / width * width);
    const int grid = c.grid > 0 ? std::min(c.grid, groups) : groups;
    const int pass_index = c.pass == 1 ? 0 : c.pass == 2 ? 1 : c.pass == 4 ? 2 : 3;
    const QmvKernel<T> kernel = QmvEntries<T>::e[c.fmt][pass_index];
    emu_launch(emu_dim3{(unsigned)grid, 1, 1}, threads, width, [&] { kernel(prod, x, (rf_u64)k, (unsigned)c.batch); });

    const double out_rel = sizeof(T) == 4 ? std::ldexp(1.0, -24) : std::is_same<T, __half>::value ? std::ldexp(1.0, -11)
                                                                                               : std::ldexp(1.0, -8);
    const double out_abs = std::is_same<T, __half>::value ? std::ldexp(1.0, -24) : 0.0;
    int bad = 0;
    double worst = 0.0;
    std::vector<double> w(fi.elems), mag(fi.elems);
    for (size_t i = 0; i < c.rows.size(); ++i) {
        for (int r = 0; r < c.rows[i]; ++r) {
            std::vector<double> want(c.batch, 0.0), m(c.batch, 0.0);
            for (int blk = 0; blk < c.blocks_a_row; ++blk) {
                decode_block(c.fmt, ws[i] + ((size_t)r * c.blocks_a_row + blk) * fi.bytes, w.data(), mag.data());
                for (int b = 0; b < c.batch; ++b)
                    for (int e = 0; e < fi.elems; ++e) {
                        const double xv = xd[(size_t)b * k + blk * fi.elems + e];
                        want[b] += w[e] * xv;
                        m[b] += mag[e] * std::fabs(xv);
                    }
            }
            for (int b = 0; b < c.batch; ++b) {
                const double got = Out<T>::load(ys[i][(size_t)b * c.rows[i] + r]);
                const double sum = (k + 1.0) * std::ldexp(1.0, -23) * m[b];
                const double tol = sum * (1.0 + out_rel) + out_rel * std::fabs(want[b]) + out_abs;
                const double err = std::fabs(got - want[b]);
                if (!(err <= tol)) {
                    if (bad++ < 5)
                        std::printf("    product %zu row %d vector %d: got %.9g, want %.9g (tolerance %.3g)\n", i, r, b,
                                    got, want[b], tol);
                } else if (tol > 0) {
                    worst = std::max(worst, err / tol);
                }
            }
        }
    }
    for (unsigned char* p : ws) std::free(p);
    for (T* p : ys) std::free(p);
    std::free(x);
    ++checks;
    worst_ratio = std::max(worst_ratio, worst);
    if (bad) ++failures;
    std::string rows;
    for (int r : c.rows) rows += (rows.empty() ? "" : "+") + std::to_string(r);
    std::printf("%-4s rf_qmv_%s_b%d_%-4s w%d threads%-3d grid%-3d rows %-8s k%-6d batch%-2d -> %s (worst %.3f of tol)\n",
                bad ? "FAIL" : "ok", fi.name, c.pass, Out<T>::name, width, threads, grid, rows.c_str(), k, c.batch,
                bad ? "MISMATCH" : "match", worst);
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0x9a11);
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "quick") {
            quick = true;
        } else {
            std::fprintf(stderr, "usage: %s [quick]\n", argv[0]);
            return 2;
        }
    }
    std::vector<QmvCase> cases;
    for (Fmt f : {Q8_0, Q4_0, Q4_K, Q5_K, Q6_K}) {
        const bool k_quant = FMTS[f].elems == 256;
        // {fmt, rows, blocks a row, batch, pass, grid, quick}
        cases.push_back({f, {1}, 1, 1, 1, 0, true});                               // one block
        cases.push_back({f, {5, 1, 7}, k_quant ? 3 : 17, 3, 4, 2, true});          // a group, grid-stride
        cases.push_back({f, {9}, k_quant ? 16 : 128, 1, 1, 0, true});              // k = 4096
        cases.push_back({f, {4}, k_quant ? 56 : 448, 2, 2, 0, false});             // k = 14336: units a thread
        cases.push_back({f, {7, 6}, k_quant ? 2 : 9, 11, 8, 1, true});             // two passes of 8
        cases.push_back({f, {3}, k_quant ? 5 : 40, 8, 8, 0, false});
    }
    for (int width : {32, 64}) {
        for (const QmvCase& c : cases) {
            if (quick && !c.quick) continue;
            qmv_case<float>(c, width, rng);
            qmv_case<__half>(c, width, rng);
            qmv_case<rf_bf16>(c, width, rng);
        }
    }
    std::printf("%s quant (rf_qmv_* of five ggml formats, wave32 and wave64): %d checks, %d failures, worst error %.3f "
                "of the tolerance\n",
                EMU_TARGET_NAME, checks, failures, worst_ratio);
    if (checks == 0) {
        std::printf("no checks ran\n");
        return 1;
    }
    return failures ? 1 : 0;
}
