// CPU emulation of the portable MX matrix-vector kernel on its AMD code path (kernels/mxfp.hip:
// rf_<fmt>_matvec_<dt>, what AMD GPUs run for an MXFP4 model's decode), the emulator being
// simt.h: MXFP4 (ggml's block_mxfp4) and packed MXFP6 E2M3 / E3M2, f32/f16/bf16, wave32 and
// wave64 at the launcher's 256 threads and narrower blocks, rows that leave a block's last warp
// part-empty, grids that stride over row groups, and row lengths that are and are not whole
// 16-byte words (the staging's vector and byte copies).
//
// The reference decodes the blocks with reference_blocks.h (the published layouts, the OCP
// element encodings) and sums in f64; the tolerance is the f32 sums' bound, (k + 1) 2^-23 times
// the sum of the terms' magnitudes, plus the output's rounding. Built with AddressSanitizer on
// exact-size buffers (run.sh), the shared memory past what the launch asks for poisoned: a load
// past the weight's last byte or past the block's shared memory is an error.

// The kernel's dynamic shared memory is declared `extern __shared__` (at file scope): this array.
#define EMU_EXTERN_SHARED 1
#include "simt.h"

alignas(16) uint4 rf_mx_smem[64 * 1024 / 16];

#include "mxfp.hip"
#include "reference_blocks.h"

template <typename T> using MxKernel = void (*)(const unsigned char*, const T*, T*, rf_u64, rf_u64);
template <typename T> struct MxEntries;
#define EMU_MX_ENTRIES(suffix, T)                                                                  \
    template <> struct MxEntries<T> {                                                              \
        static constexpr MxKernel<T> e[3] = {rf_mxfp4_matvec_##suffix, rf_mxfp6_e2m3_matvec_##suffix, \
                                             rf_mxfp6_e3m2_matvec_##suffix};                       \
    };
RF_FOR_EACH_DTYPE(EMU_MX_ENTRIES)

struct MxCase {
    Fmt fmt;
    int rows, blocks_a_row, threads, grid; // grid 0: one block a group of rows
    bool quick;
};

template <typename T> static void mx_case(const MxCase& c, int width, std::mt19937_64& rng) {
    const FmtInfo& fi = FMTS[c.fmt];
    const int k = c.blocks_a_row * 32;
    const size_t bytes = (size_t)c.rows * c.blocks_a_row * fi.bytes;
    EmuBuffers mem;
    unsigned char* w = mem.exact<unsigned char>(bytes);
    ref_random_blocks(c.fmt, w, bytes / fi.bytes, 0, 1, rng);
    for (size_t blk = 0; blk < bytes / fi.bytes; ++blk) w[blk * fi.bytes] = (unsigned char)(112 + rng() % 16); // 2^-15 .. 2^0
    T* x = mem.exact<T>(k);
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
    for (int i = 0; i < k; ++i) x[i] = Io<T>::store(ux(rng));
    T* y = mem.exact<T>(c.rows);
    for (int r = 0; r < c.rows; ++r) y[r] = Io<T>::store(NAN);
    const int fmt_index = c.fmt == MXFP4 ? 0 : c.fmt == MXFP6_E2M3 ? 1 : 2;
    const int rows_per_block = c.threads / width * RF_MX_ROWS;
    const int groups = (c.rows + rows_per_block - 1) / rows_per_block;
    const unsigned grid = (unsigned)(c.grid > 0 ? std::min(c.grid, groups) : groups);
    // The launch's dynamic shared memory, as quant/mxfp.rs sizes it (the table, x's groups, each
    // warp's staged rows with 16 bytes of slack).
    const size_t shared = RF_MX_LUT_BYTES + width * RF_MX_XGROUP * 4 +
                          (size_t)(c.threads / width) * RF_MX_ROWS * (width * fi.bytes + 16);
    emu_launch_shared(reinterpret_cast<unsigned char*>(rf_mx_smem), sizeof rf_mx_smem, shared, emu_dim3{grid, 1, 1},
                      c.threads, width, [&] { MxEntries<T>::e[fmt_index](w, x, y, c.rows, k); });

    double worst = 0.0;
    const int bad = ref_check_rows(c.fmt, w, k, x, y, c.rows, 1, worst, "portable") ? 0 : 1;
    emu_record(bad, worst);
    std::printf("%-4s rf_%s_matvec_%-4s w%d threads%-3d grid%-3u rows%-4d k%-6d -> %s (worst %.3f of tol)\n",
                bad ? "FAIL" : "ok", fi.name, Io<T>::name, width, c.threads, grid, c.rows, k,
                bad ? "MISMATCH" : "match", worst);
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0x3f9);
    const bool quick = emu_quick_arg(argc, argv);
    std::vector<MxCase> cases;
    for (Fmt f : {MXFP4, MXFP6_E2M3, MXFP6_E3M2}) {
        // {fmt, rows, blocks a row, threads, grid, quick}
        cases.push_back({f, 1, 1, 256, 0, true});
        cases.push_back({f, 37, 128, 256, 0, true});  // k = 4096: whole 16-byte words (k % 512 == 0)
        cases.push_back({f, 21, 17, 128, 2, true});   // k = 544: byte copies; grid-stride
        cases.push_back({f, 9, 448, 256, 1, false});  // k = 14336
        cases.push_back({f, 5, 3, 64, 0, false});
    }
    for (int width : {32, 64}) {
        for (const MxCase& c : cases) {
            if (quick && !c.quick) continue;
            mx_case<float>(c, width, rng);
            mx_case<__half>(c, width, rng);
            mx_case<rf_bf16>(c, width, rng);
        }
    }
    return emu_finish("mxfp", "rf_<fmt>_matvec_* of MXFP4 and MXFP6, wave32 and wave64");
}
