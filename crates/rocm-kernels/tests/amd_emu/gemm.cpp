// CPU emulation of the portable GEMM on its AMD code path (kernels/gemm.hip: the tiled kernels
// of all four layouts and the two skinny ones, what an AMD GPU runs where rocBLAS cannot be
// loaded), the emulator being simt.h: f32/f16/bf16, wave32 and wave64, shapes with tails in M,
// N and K, leading dimensions with gaps (aligned for 16-byte loads and not), batches with
// strides, grids smaller than the problem (the kernels' strides over M, columns and batches),
// alpha and beta, beta == 0 over a C of NaN (C must not be read), alpha == 0 and K == 0 over A
// and B of NaN (neither may be read).
//
// The reference is an f64 product; the tolerance is the f32 sums' bound, (K + 2) 2^-23 times the
// sum of the terms' magnitudes, plus the output's rounding. Every element between a row's end and
// the next row's start keeps its sentinel. Built with AddressSanitizer on exact-size buffers.

#include "simt.h"

#include "gemm.hip"

using GemmKernel = void (*)(rf_gemm_params);
template <typename T> struct GemmEntries;
#define EMU_GEMM_ENTRIES(suffix, T)                                                                \
    template <> struct GemmEntries<T> {                                                            \
        static constexpr GemmKernel tiled[2][2] = {{rf_gemm_tiled_nn_##suffix, rf_gemm_tiled_nt_##suffix}, \
                                                   {rf_gemm_tiled_tn_##suffix, rf_gemm_tiled_tt_##suffix}}; \
        static constexpr GemmKernel skinny_n = rf_gemm_skinny_n_##suffix;                          \
        static constexpr GemmKernel skinny_t = rf_gemm_skinny_t_##suffix;                          \
    };
RF_FOR_EACH_DTYPE(EMU_GEMM_ENTRIES)

struct GemmCase {
    int m, n, k;
    bool ta, tb;       // A stored [K, M] / B stored [N, K]
    int batch;
    int pad;           // every leading dimension's gap past its row
    float alpha, beta;
    int grid_cap;      // 0: the launcher's grid; else x, y and z at most this
    bool quick;
};

template <typename T> static void gemm_case(const GemmCase& c, int width, std::mt19937_64& rng) {
    const int a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
    const int b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
    const size_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
    const size_t sa = a_rows * lda + 3, sb = b_rows * ldb + 5, sc = c.m * ldc + 7; // batch strides
    const size_t na = c.batch * sa, nb = c.batch * sb, nc = c.batch * sc;
    EmuBuffers mem;
    T* a = mem.exact<T>(na);
    T* b = mem.exact<T>(nb);
    T* cm = mem.exact<T>(nc);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const bool no_ab = c.alpha == 0.0f || c.k == 0; // A and B must not be read: NaN
    for (size_t i = 0; i < na; ++i) a[i] = Io<T>::store(no_ab ? NAN : u(rng));
    for (size_t i = 0; i < nb; ++i) b[i] = Io<T>::store(no_ab ? NAN : u(rng));
    const T sentinel = Io<T>::store(12345.0f);
    std::vector<T> c0(nc);
    for (size_t i = 0; i < nc; ++i) cm[i] = c0[i] = sentinel;
    for (int bt = 0; bt < c.batch; ++bt)
        for (int i = 0; i < c.m; ++i)
            for (int j = 0; j < c.n; ++j) // beta == 0: C must not be read
                cm[bt * sc + i * ldc + j] = c0[bt * sc + i * ldc + j] = Io<T>::store(c.beta == 0.0f ? NAN : u(rng));

    rf_gemm_params p{};
    p.a = a;
    p.b = b;
    p.c = cm;
    p.lda = lda;
    p.ldb = ldb;
    p.ldc = ldc;
    p.stride_a = sa;
    p.stride_b = sb;
    p.stride_c = sc;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.batch = c.batch;
    p.alpha = c.alpha;
    p.beta = c.beta;
    p.trans_a = c.ta;
    // crates/rocm-kernels/src/gemm.rs: skinny for m <= 8 (B [K, N], or B [N, K] with A as stored).
    GemmKernel kernel;
    unsigned gx, gy = 1;
    const char* name;
    if (c.m <= RF_SKINNY_M && !c.tb) {
        kernel = GemmEntries<T>::skinny_n;
        name = "skinny_n";
        gx = (c.n + RF_SKINNY_COLS - 1) / RF_SKINNY_COLS;
    } else if (c.m <= RF_SKINNY_M && !c.ta) {
        kernel = GemmEntries<T>::skinny_t;
        name = "skinny_t";
        const int warps = RF_GEMM_THREADS / width;
        gx = (c.n + warps - 1) / warps;
    } else {
        kernel = GemmEntries<T>::tiled[c.ta][c.tb];
        name = c.ta ? (c.tb ? "tiled_tt" : "tiled_tn") : (c.tb ? "tiled_nt" : "tiled_nn");
        gx = (c.n + RF_GEMM_BN - 1) / RF_GEMM_BN; // the tiled kernels' x covers N (no stride)
        gy = (c.m + RF_GEMM_BM - 1) / RF_GEMM_BM;
    }
    unsigned gz = c.batch;
    if (c.grid_cap > 0) {
        if (std::string(name).rfind("skinny", 0) == 0) gx = std::min<unsigned>(gx, c.grid_cap);
        gy = std::min<unsigned>(gy, c.grid_cap);
        gz = std::min<unsigned>(gz, c.grid_cap);
    }
    emu_launch(emu_dim3{gx, gy, gz}, RF_GEMM_THREADS, width, [&] { kernel(p); });

    int bad = 0;
    double worst = 0.0;
    for (int bt = 0; bt < c.batch; ++bt) {
        for (int i = 0; i < c.m; ++i) {
            for (size_t j = 0; j < ldc; ++j) {
                const size_t ci = bt * sc + i * ldc + j;
                if ((int)j >= c.n) {
                    if (emu_bits(cm[ci]) != emu_bits(sentinel) && bad++ < 5)
                        std::printf("    batch %d row %d: gap element %zu written\n", bt, i, j);
                    continue;
                }
                double want = 0.0, mag = 0.0;
                if (!no_ab)
                    for (int kk = 0; kk < c.k; ++kk) {
                        const double av = Io<T>::load(a[bt * sa + (c.ta ? kk * lda + i : i * lda + kk)]);
                        const double bv = Io<T>::load(b[bt * sb + (c.tb ? j * ldb + kk : kk * ldb + j)]);
                        want += av * bv;
                        mag += std::fabs(av * bv);
                    }
                want *= c.alpha;
                mag *= std::fabs(c.alpha);
                if (c.beta != 0.0f) {
                    const double cv = Io<T>::load(c0[ci]);
                    want += c.beta * cv;
                    mag += std::fabs(c.beta * cv);
                }
                const double tol = (c.k + 2.0) * 0x1p-23 * mag * (1.0 + Io<T>::rel) + Io<T>::rel * std::fabs(want) + Io<T>::abs;
                const double got = Io<T>::load(cm[ci]), err = std::fabs(got - want);
                if (!(err <= tol)) {
                    if (bad++ < 5) std::printf("    batch %d C[%d][%zu]: got %.9g, want %.9g\n", bt, i, j, got, want);
                } else if (tol > 0) {
                    worst = std::max(worst, err / tol);
                }
            }
        }
    }
    for (size_t bt = 0; bt < (size_t)c.batch; ++bt)
        for (size_t i = c.m * ldc; i < sc; ++i) // the batch stride's gap
            if (emu_bits(cm[bt * sc + i]) != emu_bits(sentinel) && bad++ < 5)
                std::printf("    batch %zu: element %zu past the last row written\n", bt, i);
    emu_record(bad, worst);
    std::printf("%-4s gemm_%-8s %-4s w%d grid %ux%ux%u m%-4d n%-4d k%-5d batch%d pad%d alpha%g beta%g -> %s (worst %.3f "
                "of tol)\n",
                bad ? "FAIL" : "ok", name, Io<T>::name, width, gx, gy, gz, c.m, c.n, c.k, c.batch, c.pad, c.alpha, c.beta,
                bad ? "MISMATCH" : "match", worst);
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0x6e33);
    const bool quick = emu_quick_arg(argc, argv);
    // {m, n, k, ta, tb, batch, pad, alpha, beta, grid cap, quick}
    const std::vector<GemmCase> cases = {
        {130, 140, 37, false, false, 1, 3, 1.0f, 0.0f, 0, true},     // tails everywhere, unaligned rows
        {129, 17, 64, false, true, 2, 8, 0.5f, 1.5f, 0, true},       // nn.Linear layout, batches, beta
        {33, 257, 16, true, false, 1, 0, 1.0f, 0.0f, 0, true},       // A transposed
        {20, 9, 40, true, true, 2, 5, -2.0f, 0.25f, 1, true},        // both transposed; one block strides batches
        {260, 33, 20, false, true, 1, 0, 1.0f, 0.0f, 1, false},      // y = 1: the m stride
        {3, 300, 77, false, false, 2, 1, 1.0f, 1.0f, 0, true},       // skinny_n
        {6, 65, 33, true, false, 1, 8, 1.0f, 0.0f, 1, true},         // skinny_n, A transposed, striding
        {8, 100, 1000, false, true, 1, 8, 1.0f, 0.0f, 0, true},      // skinny_t (decode), 16-byte rows
        {5, 70, 129, false, true, 2, 3, 0.75f, 2.0f, 2, true},       // skinny_t, unaligned rows, striding
        {40, 50, 30, false, true, 1, 0, 0.0f, 0.5f, 0, true},        // alpha == 0: A and B not read
        {7, 20, 0, false, false, 1, 2, 1.0f, 0.0f, 0, true},         // K == 0: C = 0
    };
    for (int width : {32, 64}) {
        for (const GemmCase& c : cases) {
            if (quick && !c.quick) continue;
            gemm_case<float>(c, width, rng);
            gemm_case<__half>(c, width, rng);
            gemm_case<rf_bf16>(c, width, rng);
        }
    }
    return emu_finish("gemm", "rf_gemm_tiled_* and rf_gemm_skinny_*, wave32 and wave64");
}
