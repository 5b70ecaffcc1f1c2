// CPU emulation of the NVIDIA matrix-core MX matrix-vector kernels (kernels/mxfp.hip:
// rf_<fmt>_matvec_mma_<dt>, the _anyk and _group entries, and MXFP4's gate-and-up entries
// rf_mxfp4_matvec_mma_glu_<dt> where mxfp.hip has them), on the emulator's `sm80` target: simt.h's lanes in warps of 32
// and emu_mma_sync.h's mma.sync and cp.async, so that a change to these kernels can be checked
// on a machine without a GPU. MXFP4 with f16 and bf16 activations, MXFP6 (E2M3, E3M2) with f16;
// whole 512-element chunks and any k; one product, lists of up to three with ragged last tiles;
// grids of a block a tile and grids that stride; 1 to 4 warps.
//
// The reference decodes the blocks with reference_blocks.h and sums in f64; the tolerance is
// the f32 sums' bound, (k + 1) 2^-23 times the sum of the terms' magnitudes, plus the output's
// rounding (as mxfp.cpp). The gate-and-up entry must give the bits of the group entry over
// [gate, up] followed by rocmforge_silu.h's activation, as its GPU test asserts. Outputs are
// poisoned before each launch; shared memory starts as garbage (0xa5 bytes) and what the launch
// does not ask for is poisoned for AddressSanitizer.

#define EMU_EXTERN_SHARED 1
#include "simt.h"

alignas(16) uint4 rf_mx_smem[64 * 1024 / 16];
alignas(16) unsigned char rf_mxm_smem[160 * 1024];

#include "mxfp.hip"
#include "reference_blocks.h"
#include "rocmforge_silu.h"
#include "sm80.h"

template <typename T> using MmaOne = void (*)(const unsigned char*, const T*, T*, rf_u64, rf_u64);
template <typename T> using MmaList = void (*)(const rf_qmv_products, const T*, rf_u64, unsigned);

// The entries of a format and activation type: one product (whole chunks, any k), a list, and
// (MXFP4 only) gate and up.
template <typename T> struct MmaEntries {
    MmaOne<T> one, any_k;
    MmaList<T> list, glu;
};
// The gate-and-up entries where mxfp.hip has them.
#ifdef RF_MXM_GLU_BODY
#define EMU_MXFP4_GLU(dt) rf_mxfp4_matvec_mma_glu_##dt
#else
#define EMU_MXFP4_GLU(dt) nullptr
#endif
template <typename T> static MmaEntries<T> entries(Fmt f);
template <> MmaEntries<__half> entries<__half>(Fmt f) {
    switch (f) {
    case MXFP4:
        return {rf_mxfp4_matvec_mma_f16, rf_mxfp4_matvec_mma_anyk_f16, rf_mxfp4_matvec_mma_group_f16,
                EMU_MXFP4_GLU(f16)};
    case MXFP6_E2M3:
        return {rf_mxfp6_e2m3_matvec_mma_f16, rf_mxfp6_e2m3_matvec_mma_anyk_f16, rf_mxfp6_e2m3_matvec_mma_group_f16,
                nullptr};
    default:
        return {rf_mxfp6_e3m2_matvec_mma_f16, rf_mxfp6_e3m2_matvec_mma_anyk_f16, rf_mxfp6_e3m2_matvec_mma_group_f16,
                nullptr};
    }
}
// bf16: MXFP4 only (MXFP6 with bf16 runs the portable kernel).
template <> MmaEntries<rf_bf16> entries<rf_bf16>(Fmt) {
    return {rf_mxfp4_matvec_mma_bf16, rf_mxfp4_matvec_mma_anyk_bf16, rf_mxfp4_matvec_mma_group_bf16,
            EMU_MXFP4_GLU(bf16)};
}

// The launch's dynamic shared memory, as quant/mxfp.rs sizes it (matvec_mma_shared_bytes).
static size_t mma_shared_bytes(Fmt f, int warps, bool any_k) {
    const int row = RF_MXM_CHUNK * FMTS[f].bytes;
    const int need = any_k ? 4 * ((row + 30) / 16) : row / 4;
    const int words = need + (4 + 32 - need % 32) % 32;
    const size_t stage = (size_t)RF_MXM_ROWS * 4 * words + RF_MXM_CHUNK * 32 * 2;
    return (size_t)warps * RF_MXM_STAGES * stage + (size_t)warps * RF_MXM_ROWS * 4;
}

// Runs `launch` on `grid` blocks of `warps` warps with `shared` bytes of shared memory.
template <typename F> static void mma_launch(unsigned grid, int warps, size_t shared, F&& launch) {
    emu_launch_shared(rf_mxm_smem, sizeof rf_mxm_smem, shared, emu_dim3{grid, 1, 1}, 32 * warps, 32, launch);
}

// Random blocks of `f`, scales 2^-15 .. 2^0.
static unsigned char* random_weight(EmuBuffers& mem, Fmt f, int rows, int blocks_a_row, std::mt19937_64& rng) {
    const size_t n = (size_t)rows * blocks_a_row;
    unsigned char* w = mem.exact<unsigned char>(n * FMTS[f].bytes);
    ref_random_blocks(f, w, n, 0, 1, rng);
    for (size_t blk = 0; blk < n; ++blk) w[blk * FMTS[f].bytes] = (unsigned char)(112 + rng() % 16);
    return w;
}

struct MmaCase {
    Fmt fmt;
    int rows[3];      // the products' rows (0: fewer products); one product runs the single entry too
    int blocks_a_row; // k / 32
    int grid;         // 0: a block a tile
    bool quick;
};

template <typename T> static void mma_case(const MmaCase& c, std::mt19937_64& rng) {
    const MmaEntries<T> e = entries<T>(c.fmt);
    const int k = c.blocks_a_row * 32;
    const bool any_k = k % (32 * RF_MXM_CHUNK) != 0;
    const int chunks = (c.blocks_a_row + RF_MXM_CHUNK - 1) / RF_MXM_CHUNK;
    const int warps = std::min(chunks, RF_MXM_WARPS);
    const size_t shared = mma_shared_bytes(c.fmt, warps, any_k);
    int products = 0, tiles = 0;
    while (products < 3 && c.rows[products] > 0) tiles += (c.rows[products++] + RF_MXM_ROWS - 1) / RF_MXM_ROWS;
    const unsigned grid = (unsigned)(c.grid > 0 ? std::min(c.grid, tiles) : tiles);

    EmuBuffers mem;
    T* x = mem.exact<T>(k);
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
    for (int i = 0; i < k; ++i) x[i] = Io<T>::store(ux(rng));
    rf_qmv_products p = {};
    for (int i = 0; i < products; ++i) {
        p.w[i] = random_weight(mem, c.fmt, c.rows[i], c.blocks_a_row, rng);
        T* y = mem.exact<T>(c.rows[i]);
        for (int r = 0; r < c.rows[i]; ++r) y[r] = Io<T>::store(NAN);
        p.y[i] = y;
        p.rows[i] = (rf_u64)c.rows[i];
    }

    char what[96];
    double worst = 0.0;
    bool ok = true;
    // A list (whole chunks only), or each product alone through the single entries.
    if (!any_k) {
        mma_launch(grid, warps, shared, [&] { e.list(p, x, (rf_u64)k, 1u); });
        for (int i = 0; i < products; ++i) {
            std::snprintf(what, sizeof what, "list product %d", i);
            ok &= ref_check_rows(c.fmt, p.w[i], k, x, (const T*)p.y[i], c.rows[i], 1, worst, what);
        }
    }
    if (products == 1) {
        T* y = (T*)p.y[0];
        for (int r = 0; r < c.rows[0]; ++r) y[r] = Io<T>::store(NAN);
        const unsigned one_grid = (unsigned)(c.grid > 0 ? std::min(c.grid, tiles) : tiles);
        mma_launch(one_grid, warps, shared, [&] { (any_k ? e.any_k : e.one)(p.w[0], x, y, (rf_u64)c.rows[0], (rf_u64)k); });
        ok &= ref_check_rows(c.fmt, p.w[0], k, x, y, c.rows[0], 1, worst, any_k ? "anyk" : "single");
    }
    // Gate and up: products 0 and 1 of equal rows; the bits of the list's outputs through
    // rf_silu_mul.
    if (e.glu && !any_k && products >= 2 && c.rows[0] == c.rows[1]) {
        const int n = c.rows[0];
        T* act = nullptr;
        const rf_qmv_products g = glu_products(mem, p, n, act);
        const int glu_tiles = (n + RF_MXM_ROWS / 2 - 1) / (RF_MXM_ROWS / 2);
        const unsigned glu_grid = (unsigned)(c.grid > 0 ? std::min(c.grid, glu_tiles) : glu_tiles);
        mma_launch(glu_grid, warps, shared, [&] { e.glu(g, x, (rf_u64)k, 1u); });
        ok &= glu_bits_match(act, (const T*)p.y[0], (const T*)p.y[1], n);
    }
    emu_record(ok ? 0 : 1, worst);
    std::printf("%-4s %s %-4s warps %d grid %-3u rows %d/%d/%d k %-6d -> %s (worst %.3f of tol)\n", ok ? "ok" : "FAIL",
                FMTS[c.fmt].name, Io<T>::name, warps, grid, c.rows[0], c.rows[1], c.rows[2], k,
                ok ? "match" : "MISMATCH", worst);
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0x5e90);
    const bool quick = emu_quick_arg(argc, argv);
    std::vector<MmaCase> cases;
    for (Fmt f : {MXFP4, MXFP6_E2M3, MXFP6_E3M2}) {
        // {fmt, rows of up to 3 products, blocks a row, grid, quick}
        cases.push_back({f, {37, 0, 0}, 128, 0, true});    // k = 4096: 4 warps of 2 chunks
        cases.push_back({f, {16, 16, 5}, 16, 2, true});    // one chunk, a list, a ragged tile, a striding grid
        cases.push_back({f, {21, 0, 0}, 17, 0, true});     // k = 544: any k, a short last chunk
        cases.push_back({f, {24, 24, 0}, 64, 1, false});   // gate and up; one block strides over all
        cases.push_back({f, {9, 0, 0}, 448, 0, false});    // k = 14336
        cases.push_back({f, {40, 17, 0}, 48, 3, false});   // 3 chunks over 3 warps
        cases.push_back({f, {3, 0, 0}, 90, 0, false});     // k = 2880 (gpt-oss): any k
    }
    for (const MmaCase& c : cases) {
        if (quick && !c.quick) continue;
        mma_case<__half>(c, rng);
        if (c.fmt == MXFP4) mma_case<rf_bf16>(c, rng);
    }
    return emu_finish("mma", "rf_<fmt>_matvec_mma_* of MXFP4 and MXFP6 on emulated mma.sync, warps of 32");
}
