// CPU emulation of the portable quantised matrix-vector kernel on its AMD code path
// (kernels/quant_matvec.hip: rf_qmv_<fmt>_b<BC>_<dt>, the product AMD GPUs run for decode), the
// emulator being simt.h: every ggml format it reads (q8_0, q4_0, q4_K, q5_K, q6_K), f32/f16/bf16,
// each pass width (1, 2, 4, 8 vectors) with batches of one pass and of several, wavefronts of 32
// and 64 lanes, blocks narrower than 128 threads where rows are short, grids that stride over
// row groups and across the products of one launch.
//
// The reference decodes the blocks with reference_blocks.h (the formats' published layouts, not
// the kernel's or the Rust codec's code) and sums in f64; the tolerance is quant/matvec.rs's
// allowed_error (the kernel's f32 sums and the output's rounding, with q4_K / q5_K's scaled
// codes and mins counted separately). Weights are random bytes (every code, every 6-bit scale and min) with f16 scales
// of random size and sign, some zero and some subnormal; outputs are poisoned (NaN) first.
// run.sh builds this suite with AddressSanitizer and every buffer is its exact size, so a load
// past a weight's last byte (the 2-byte-aligned formats read 16-byte vectors) is an error.

#include "simt.h"

#include "quant_matvec.hip"
#include "reference_blocks.h"

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
    EmuBuffers mem;
    T* x = mem.exact<T>((size_t)c.batch * k);
    for (size_t i = 0; i < (size_t)c.batch * k; ++i) x[i] = Io<T>::store(ux(rng));
    rf_qmv_products prod{};
    std::vector<unsigned char*> ws;
    std::vector<T*> ys;
    int groups = 0;
    for (size_t i = 0; i < c.rows.size(); ++i) {
        const size_t bytes = (size_t)c.rows[i] * c.blocks_a_row * fi.bytes;
        unsigned char* w = mem.exact<unsigned char>(bytes);
        ref_random_blocks(c.fmt, w, bytes / fi.bytes, -12, 7, rng);
        T* y = mem.exact<T>((size_t)c.batch * c.rows[i]);
        for (int j = 0; j < c.batch * c.rows[i]; ++j) y[j] = Io<T>::store(NAN);
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
    const int format_index = c.fmt == Q8_0 ? 0 : c.fmt == Q4_0 ? 1 : c.fmt == Q4_K ? 2 : c.fmt == Q5_K ? 3 : 4;
    const QmvKernel<T> kernel = QmvEntries<T>::e[format_index][pass_index];
    emu_launch(emu_dim3{(unsigned)grid, 1, 1}, threads, width, [&] { kernel(prod, x, (rf_u64)k, (unsigned)c.batch); });

    int bad = 0;
    double worst = 0.0;
    std::vector<double> want(c.batch), mag(c.batch);
    for (size_t i = 0; i < c.rows.size(); ++i) {
        for (int r = 0; r < c.rows[i]; ++r) {
            ref_row(c.fmt, ws[i] + (size_t)r * c.blocks_a_row * fi.bytes, k, x, c.batch, want.data(), mag.data());
            for (int b = 0; b < c.batch; ++b) {
                const double tol = ref_tolerance<T>(k, mag[b], want[b]), got = Io<T>::load(ys[i][(size_t)b * c.rows[i] + r]);
                if (!ref_within(got, want[b], tol, worst) && bad++ < 5)
                    std::printf("    product %zu row %d vector %d: got %.9g, want %.9g (tolerance %.3g)\n", i, r, b, got,
                                want[b], tol);
            }
        }
    }
    emu_record(bad, worst);
    std::string rows;
    for (int r : c.rows) rows += (rows.empty() ? "" : "+") + std::to_string(r);
    std::printf("%-4s rf_qmv_%s_b%d_%-4s w%d threads%-3d grid%-3d rows %-8s k%-6d batch%-2d -> %s (worst %.3f of tol)\n",
                bad ? "FAIL" : "ok", fi.name, c.pass, Io<T>::name, width, threads, grid, rows.c_str(), k, c.batch,
                bad ? "MISMATCH" : "match", worst);
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0x9a11);
    const bool quick = emu_quick_arg(argc, argv);
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
        // One block of several warps over every row group and pass: the totals reused.
        cases.push_back({f, {9}, k_quant ? 16 : 128, 3, 2, 1, true});
    }
    for (int width : {32, 64}) {
        for (const QmvCase& c : cases) {
            if (quick && !c.quick) continue;
            qmv_case<float>(c, width, rng);
            qmv_case<__half>(c, width, rng);
            qmv_case<rf_bf16>(c, width, rng);
        }
    }
    return emu_finish("quant", "rf_qmv_* of five ggml formats, wave32 and wave64");
}
