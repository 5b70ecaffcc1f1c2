// CPU emulation of the NVIDIA matrix-core matrix-vector kernels of ggml's formats
// (kernels/quant_matvec_mma.hip) on the emulator's `sm80` target (emu_mma_sync.h's mma.sync and
// cp.async): the pipelined loop rf_qmvm_<fmt>_b1_<dt> (q8_0, q4_0, q5_K, q6_K) and its passes of
// 8 vectors rf_qmvm_<fmt>_b8_<dt> (those and q4_K, MXFP4), and q4_K's one-vector columns loop
// rf_qmvm_q4_k_b1_<dt> with its gate-and-up entry rf_qmvm_q4_k_b1_glu_<dt>; f16 and bf16; one
// product and lists of three with ragged tiles; grids of a block a tile and grids that stride;
// 1 to 8 warps.
//
// The reference decodes the blocks with reference_blocks.h and sums in f64; the tolerance is
// quant/matvec.rs's allowed_error (as quant.cpp: q4_K / q5_K's scaled codes and mins counted
// separately). The gate-and-up entry must give the bits of the two products through
// rocmforge_silu.h's activation. Outputs are poisoned first; shared memory starts as garbage and
// what the launch does not ask for is poisoned.

#define EMU_EXTERN_SHARED 1
#include "simt.h"

alignas(16) unsigned char rf_qmvm_smem[192 * 1024];

#include "quant_matvec_mma.hip"
#include "reference_blocks.h"
#include "rocmforge_silu.h"
#include "sm80.h"

#include <type_traits>

template <typename T> using QmvmKernel = void (*)(const rf_qmv_products, const T*, rf_u64, unsigned);

// A format's entries of one dtype, its chunk, row span and one-vector stages (the launcher's
// MmaFormat), and whether one vector runs the columns loop (q4_K).
template <typename T> struct QmvmFormat {
    Fmt fmt;
    QmvmKernel<T> b1, b8, glu;
    int chunk, span, stages_one;
    bool columns;
};
template <typename T> static std::vector<QmvmFormat<T>> formats();
#define EMU_QMVM_FORMATS(dt, T)                                                                                    \
    template <> std::vector<QmvmFormat<T>> formats<T>() {                                                          \
        std::vector<QmvmFormat<T>> f = {                                                                           \
            {Q8_0, rf_qmvm_q8_0_b1_##dt, rf_qmvm_q8_0_b8_##dt, nullptr, rf_qmvm_q8_0<T>::CHUNK,                    \
             rf_qmvm_q8_0<T>::SPAN, rf_qmvm_q8_0<T>::STAGES_B1, false},                                            \
            {Q4_0, rf_qmvm_q4_0_b1_##dt, rf_qmvm_q4_0_b8_##dt, nullptr, rf_qmvm_q4_0<T>::CHUNK,                    \
             rf_qmvm_q4_0<T>::SPAN, rf_qmvm_q4_0<T>::STAGES_B1, false},                                            \
            {Q4_K, rf_qmvm_q4_k_b1_##dt, rf_qmvm_q4_k_b8_##dt, rf_qmvm_q4_k_b1_glu_##dt, rf_qmvm_q4_k<T>::CHUNK,   \
             rf_qmvm_q4_k<T>::SPAN, rf_qmvm_q4_k<T>::STAGES_B1, true},                                             \
            {Q5_K, rf_qmvm_q5_k_b1_##dt, rf_qmvm_q5_k_b8_##dt, nullptr, rf_qmvm_q5_k<T>::CHUNK,                    \
             rf_qmvm_q5_k<T>::SPAN, rf_qmvm_q5_k<T>::STAGES_B1, false},                                            \
            {Q6_K, rf_qmvm_q6_k_b1_##dt, rf_qmvm_q6_k_b8_##dt, nullptr, rf_qmvm_q6_k<T>::CHUNK,                    \
             rf_qmvm_q6_k<T>::SPAN, rf_qmvm_q6_k<T>::STAGES_B1, false},                                            \
            {MXFP4, nullptr, rf_qmvm_mxfp4_b8_##dt, nullptr, rf_qmvm_mxfp4<T>::CHUNK, rf_qmvm_mxfp4<T>::SPAN,       \
             rf_qmvm_mxfp4<T>::STAGES_B1, false},                                                                  \
        };                                                                                                         \
        return f;                                                                                                  \
    }
EMU_QMVM_FORMATS(f16, __half)
EMU_QMVM_FORMATS(bf16, rf_bf16)

// The launch of `batch` vectors as quant/matvec.rs configures it: warps, dynamic shared bytes,
// the grid for `tiles` tiles (0: a block a tile), and the entry.
struct QmvmLaunch {
    int warps;
    size_t shared;
};
template <typename T> static QmvmLaunch qmvm_launch(const QmvmFormat<T>& f, int k, int batch) {
    if (batch == 1 && f.columns) {
        // columns_warps and columns_shared_bytes.
        const int blocks = k / 256;
        const int most = blocks > RF_QMVM_WARPS * 8 ? RF_QMVM_ONE_WARPS_MAX : RF_QMVM_WARPS;
        return {std::max(1, std::min(blocks, most)), 2 * (size_t)k + 2 * RF_QMVM_ONE_WARPS_MAX * RF_QMVM_ROWS * 4};
    }
    // matrix_core_warps and MmaFormat::shared_bytes.
    const int warps = std::max(1, std::min(k / f.chunk, RF_QMVM_WARPS));
    const int pass = batch == 1 ? 1 : 8;
    const size_t x = pass == 1 ? 2 * (size_t)f.chunk : (size_t)pass * (2 * f.chunk + 64);
    const int stages = pass == 1 ? f.stages_one : RF_QMVM_STAGES_MANY;
    return {warps, (size_t)warps * stages * (RF_QMVM_ROWS * (size_t)f.span + x) +
                       (size_t)warps * RF_QMVM_ROWS * pass * 4};
}

template <typename F> static void qmvm_run(unsigned grid, const QmvmLaunch& l, F&& launch) {
    emu_launch_shared(rf_qmvm_smem, sizeof rf_qmvm_smem, l.shared, emu_dim3{grid, 1, 1}, 32 * l.warps, 32, launch);
}

struct QmvmCase {
    int rows[3];  // the products' rows (0: fewer products)
    int chunks;   // k in chunks of the format (q6_K: at least 4, its rows' 16-byte vectors)
    int batch;    // 1: the one-vector entry; more: passes of 8
    int grid;     // 0: a block a tile
    bool quick;
};

template <typename T> static void qmvm_case(const QmvmFormat<T>& f, const QmvmCase& c, std::mt19937_64& rng) {
    const FmtInfo& fi = FMTS[f.fmt];
    const QmvmKernel<T> entry = c.batch == 1 ? f.b1 : f.b8;
    if (!entry) return; // MXFP4's one vector runs mxfp.hip (the mma suite)
    const int k = (f.fmt == Q6_K ? std::max(c.chunks, 4) : c.chunks) * f.chunk;
    const QmvmLaunch l = qmvm_launch(f, k, c.batch);
    EmuBuffers mem;
    T* x = mem.exact<T>((size_t)c.batch * k);
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
    for (size_t i = 0; i < (size_t)c.batch * k; ++i) x[i] = Io<T>::store(ux(rng));
    rf_qmv_products p = {};
    int products = 0, tiles = 0;
    while (products < 3 && c.rows[products] > 0) {
        const int n = c.rows[products];
        const size_t nblocks = (size_t)n * (k / fi.elems);
        unsigned char* w = mem.exact<unsigned char>(nblocks * fi.bytes);
        ref_random_blocks(f.fmt, w, nblocks, -12, 7, rng);
        if (f.fmt == MXFP4)
            for (size_t b = 0; b < nblocks; ++b) w[b * fi.bytes] = (unsigned char)(112 + rng() % 16);
        T* y = mem.exact<T>((size_t)c.batch * n);
        for (int i = 0; i < c.batch * n; ++i) y[i] = Io<T>::store(NAN);
        p.w[products] = w;
        p.y[products] = y;
        p.rows[products] = (rf_u64)n;
        tiles += (n + RF_QMVM_ROWS - 1) / RF_QMVM_ROWS;
        ++products;
    }
    const unsigned grid = (unsigned)(c.grid > 0 ? std::min(c.grid, tiles) : tiles);
    qmvm_run(grid, l, [&] { entry(p, x, (rf_u64)k, (unsigned)c.batch); });
    double worst = 0.0;
    bool ok = true;
    char what[64];
    for (int i = 0; i < products; ++i) {
        std::snprintf(what, sizeof what, "product %d", i);
        ok &= ref_check_rows(f.fmt, p.w[i], k, x, (const T*)p.y[i], c.rows[i], c.batch, worst, what);
    }
    // Gate and up (q4_K, one vector): products 0 and 1 of equal rows.
    if (f.glu && c.batch == 1 && products >= 2 && c.rows[0] == c.rows[1]) {
        const int n = c.rows[0];
        T* act = nullptr;
        const rf_qmv_products g = glu_products(mem, p, n, act);
        const int glu_tiles = (n + RF_QMVM_ROWS / 2 - 1) / (RF_QMVM_ROWS / 2);
        qmvm_run((unsigned)(c.grid > 0 ? std::min(c.grid, glu_tiles) : glu_tiles), l,
                 [&] { f.glu(g, x, (rf_u64)k, 1u); });
        ok &= glu_bits_match(act, (const T*)p.y[0], (const T*)p.y[1], n);
    }
    emu_record(ok ? 0 : 1, worst);
    std::printf("%-4s rf_qmvm_%s_b%d_%-4s%s warps %d grid %-3u rows %d/%d/%d k %-6d batch %-2d -> %s (worst %.3f of tol)\n",
                ok ? "ok" : "FAIL", fi.name, c.batch == 1 ? 1 : 8, Io<T>::name,
                c.batch == 1 && f.columns ? " (columns)" : "", l.warps, grid, c.rows[0], c.rows[1], c.rows[2], k,
                c.batch, ok ? "match" : "MISMATCH", worst);
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0x9b27);
    const bool quick = emu_quick_arg(argc, argv);
    // {rows of up to 3 products, k in chunks, batch, grid, quick}
    const std::vector<QmvmCase> cases = {
        {{37, 0, 0}, 8, 1, 0, true},      // k = 8 chunks: 4 warps of 2, across two tiles' ends
        {{16, 16, 5}, 1, 1, 2, true},     // one chunk, a list with a ragged tile, a striding grid
        {{24, 24, 0}, 3, 1, 1, false},    // 3 chunks over 3 warps; one block over every tile
        {{20, 9, 0}, 2, 8, 0, true},      // a pass of 8
        {{17, 0, 0}, 4, 11, 2, false},    // a pass of 8 and one of 3
        {{9, 0, 0}, 56, 1, 0, false},     // long rows (q4_K: 8 warps of the columns loop)
        {{33, 16, 0}, 16, 2, 1, false},   // k = 16 chunks, 2 vectors
    };
    for (int dt = 0; dt < 2; ++dt) {
        for (const QmvmCase& c : cases) {
            if (quick && !c.quick) continue;
            if (dt == 0)
                for (const auto& f : formats<__half>()) qmvm_case(f, c, rng);
            else
                for (const auto& f : formats<rf_bf16>()) qmvm_case(f, c, rng);
        }
    }
    return emu_finish("qmvm", "rf_qmvm_* of five ggml formats and MXFP4 on emulated mma.sync, warps of 32");
}
