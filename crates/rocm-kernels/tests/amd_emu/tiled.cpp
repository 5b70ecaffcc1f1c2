// CPU emulation of the matrix-vector kernels over the tiled layouts (kernels/mxfp4_tiled.hip, and on
// sm80 kernels/q4k_tiled.hip's and kernels/q8_0_tiled.hip's matrix-core entries, one vector and several, with the same checks as the MXFP4 ones': columns_case; their portable
// kernels on the AMD targets: columns_portable_case).
// MXFP4 (kernels/mxfp4_tiled.hip):
// on the AMD targets the portable rf_mxfp4_tiled_matvec_<dt> (what an AMD GPU runs for a tiled
// weight), f32/f16/bf16, wave32 and wave64; on the `sm80` target the matrix-core entries
// rf_mxfp4_tiled_matvec_mma[_wide]_<dt> (bf16 x staged as block-scaled f16, with x of a wide
// range too) and the several-vector rf_mxfp4_tiled_batch{8,32}_mma[_wide]_<dt> (x from global
// memory, bf16 rounded in registers, B's columns the vectors) on emu_mma_sync.h's mma.sync,
// cp.async and shuffles, with
// grids of a block a tile and resident blocks that walk several tiles (each warp's ring running
// across the tiles' ends, the row totals alternating by tile parity). Some cases write the rows
// to three outputs (rf_t4_outputs: a stacked weight's parts), gathered for the check; some are
// gate-and-up products (rf_t4_outputs::mode RF_T4_SWIGLU), launched both ways: the rows to two
// outputs, checked against the reference, then the activation, which must be silu(gate) * up of
// those rows bit for bit (rocmforge_silu.h's formula, evaluated here). Every case of one output
// is launched again adding to a residual stream (RF_T4_ADD), which must then hold
// round(stream + row) bit for bit; every one-vector case once more through the RMSNorm
// (rf_t4_norm: the normed matrix-core entries on sm80, the portable one on AMD), with x a residual
// row of multiples of 2^-4, whose sum of squares is exact in any order, so that the reference
// normalises it as the kernel does, bit for bit, and checks the rows as any x's. On the AMD
// targets also rf_mxfp4_tiled_dequant_<dt>, against the GGUF rows decoded and rounded to T once
// (bit for bit), on a grid that strides (fewer threads than payload vectors).
//
// The weight is made as GGUF rows of block_mxfp4 (17-byte blocks) and re-laid out here from the
// layout's description (crates/rocm-kernels/src/quant/mxfp4_tiled.rs, module docs; not from its
// packer). The reference decodes the GGUF rows with reference_blocks.h and sums in f64; the
// tolerance is the f32 sums' bound, as in mma.cpp, with staging's rounding (x16_reference.h) for
// the matrix-core bf16 entries. Outputs are poisoned before each launch; the
// matrix-core launches' shared memory starts as garbage and what a launch does not ask for is
// poisoned for AddressSanitizer.

#ifdef RF_EMU_MMA_SYNC
// The matrix-core kernel's rings are `extern __shared__` (dynamic shared memory): this array.
// (`__shared__` is then not `static`, so the portable kernel's static totals would be each
// lane's own: the sm80 build runs the matrix-core entries only, the AMD builds the portable.)
#define EMU_EXTERN_SHARED 1
#endif
#include "simt.h"

#ifdef RF_EMU_MMA_SYNC
alignas(16) unsigned char rf_t4_smem[160 * 1024]; // q8_0's one-vector rings: 104 KB and x
#endif

#include "mxfp4_tiled.hip"
#include "q4k_tiled.hip"
#include "q8_0_tiled.hip"
#include "reference_blocks.h"
#include "x16_reference.h"

#include <type_traits>

template <typename T>
using TiledEntry = void (*)(const uint4*, const unsigned char*, const T*, rf_t4_outputs, rf_t4_norm, unsigned, unsigned);

// Bit offsets of pair i's magnitudes and signs in a word (the layout's docs).
static const int FIELD_MAG[4] = {9, 6, 3, 0};
static const int FIELD_SIGN[4] = {15, 12, 13, 14};

// The word of eight E2M1 codes (sign in bit 3), element e of the lane's eight being pair e / 2,
// half e % 2.
static unsigned tiled_word(const unsigned char (&c)[8]) {
    unsigned w = 0;
    for (int e = 0; e < 8; ++e) {
        const int i = e / 2, h = 16 * (e % 2);
        w |= (unsigned)(c[e] & 7) << (FIELD_MAG[i] + h) | (unsigned)(c[e] >> 3 & 1) << (FIELD_SIGN[i] + h);
    }
    return w;
}

// An [n, k] weight of GGUF rows (nb = k / 32 blocks of 17 bytes a row: the E8M0 scale, then
// element j < 16 in the low nibble of byte j, element j + 16 in its high nibble), tiled.
struct Tiled {
    const uint4* payload;
    const unsigned char* scales;
};
static Tiled tile_gguf(EmuBuffers& mem, const unsigned char* gguf, int n, int nb) {
    const int nbp = (nb + RF_T4_GROUP - 1) / RF_T4_GROUP * RF_T4_GROUP;
    const int tiles = (n + RF_T4_ROWS - 1) / RF_T4_ROWS;
    // Element e of (row r, block b): its 4-bit code, 0 in the padding.
    auto code = [&](int row, int b, int e) -> unsigned char {
        if (row >= n || b >= nb) return 0;
        const unsigned char* blk = gguf + ((size_t)row * nb + b) * 17;
        return e < 16 ? blk[1 + e] & 0xF : blk[1 + e - 16] >> 4;
    };
    unsigned char* payload = mem.exact<unsigned char>((size_t)tiles * nbp * 256);
    unsigned char* scales = mem.exact<unsigned char>((size_t)tiles * nbp * RF_T4_ROWS);
    for (int t = 0; t < tiles; ++t) {
        for (int p = 0; p < nbp / 2; ++p) {
            for (int l = 0; l < 32; ++l) {
                const int g = l / 4, u = l % 4;
                // W(g, 2p, u), W(g + 8, 2p, u), W(g, 2p + 1, u), W(g + 8, 2p + 1, u).
                const int rows[4] = {g, g + 8, g, g + 8}, blocks[4] = {2 * p, 2 * p, 2 * p + 1, 2 * p + 1};
                unsigned char* at = payload + (((size_t)t * nbp / 2 + p) * 32 + l) * 16;
                for (int j = 0; j < 4; ++j) {
                    unsigned char c[8];
                    for (int e = 0; e < 8; ++e) c[e] = code(t * RF_T4_ROWS + rows[j], blocks[j], 8 * u + e);
                    const unsigned w = tiled_word(c);
                    std::memcpy(at + 4 * j, &w, 4);
                }
            }
        }
        for (int r = 0; r < RF_T4_ROWS; ++r) {
            const int row = t * RF_T4_ROWS + r;
            for (int b = 0; b < nbp; ++b) {
                scales[(((size_t)t * nbp / 8 + b / 8) * RF_T4_ROWS + r) * 8 + b % 8] =
                    row < n && b < nb ? gguf[((size_t)row * nb + b) * 17] : 0;
            }
        }
    }
    return {reinterpret_cast<const uint4*>(payload), scales};
}

// Scale bytes of a case's weight: the fast entries' range (2^-15 .. 2^0, and 0: 2^-127), or for
// the wide entries also bytes above RF_T4_FAST_SCALE_MAX (x is then small enough that nothing
// overflows).
enum Scales { FAST, WIDE_BYTES };

struct TiledCase {
    int rows, blocks_a_row; // n, nb = k / 32
    int grid;               // 0: a block a tile (the portable kernel always)
    bool quick;
    Scales scales = FAST;
    XValues xv = UNIFORM; // WIDE and RANGE: the matrix-core bf16 entries only (x16_reference.h)
    int split = 0;        // > 0: rows [0, split) and [split, 2 split) to outputs 0 and 1, the rest to 2
    int batch = 1;        // vectors: x [batch, k], each output [batch, its rows]
    bool swiglu = false;  // gates (rows / 2, whole tiles) and ups: also the activation launch
    // The launcher's block: a warp a group of 8 blocks, at most RF_T4_WARPS (mxfp4_tiled.rs).
    int warps() const { return std::min((blocks_a_row + RF_T4_GROUP - 1) / RF_T4_GROUP, (int)RF_T4_WARPS); }
    // The case's grid: `grid` blocks, never more than the tiles; 0: a block a tile.
    unsigned blocks() const {
        const int tiles = (rows + RF_T4_ROWS - 1) / RF_T4_ROWS;
        return (unsigned)(grid > 0 ? std::min(grid, tiles) : tiles);
    }
};

// A case's GGUF weight (random codes; scales per `scales`), tiled, and x (uniform in (-1, 1),
// times 2^-60 with the wide bytes, which only bf16 and f32 hold; or per the case's XValues,
// RANGE with element 0 of every block's weight zero in every row).
template <typename T> struct CaseData {
    unsigned char* gguf;
    Tiled w;
    T* x;
};
template <typename T> static CaseData<T> make_case(EmuBuffers& mem, const TiledCase& c, std::mt19937_64& rng) {
    const size_t blocks = (size_t)c.rows * c.blocks_a_row;
    unsigned char* gguf = mem.exact<unsigned char>(blocks * 17);
    ref_random_blocks(MXFP4, gguf, blocks, 0, 1, rng);
    for (size_t b = 0; b < blocks; ++b) {
        const unsigned r = (unsigned)(rng() % 16);
        unsigned char s = (unsigned char)(112 + rng() % 16);
        if (r == 0) s = 0;
        if (c.scales == WIDE_BYTES && r >= 12) s = (unsigned char)(RF_T4_FAST_SCALE_MAX + 1 + rng() % 10);
        gguf[b * 17] = s;
    }
    const int k = c.blocks_a_row * 32;
    T* x = mem.exact<T>((size_t)c.batch * k);
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
    for (int i = 0; i < c.batch * k; ++i) x[i] = Io<T>::store(c.scales == WIDE_BYTES ? std::ldexp(ux(rng), -60) : ux(rng));
    if (c.xv != UNIFORM) fill_x(x, c.batch * k, c.xv, rng);
    if (c.xv == RANGE) { // element 0 of each block: the low nibble of its first payload byte
        for (size_t b = 0; b < blocks; ++b) gguf[b * 17 + 1] &= 0xf0;
    }
    return {gguf, tile_gguf(mem, gguf, c.rows, c.blocks_a_row), x};
}

template <typename T> static T* poisoned_y(EmuBuffers& mem, int n) {
    T* y = mem.exact<T>(n);
    for (int r = 0; r < n; ++r) y[r] = Io<T>::store(NAN);
    return y;
}

// A case's outputs, poisoned: one of n rows, or (split) three exact allocations of split, split
// and n - 2 split rows, so that AddressSanitizer sees a row written past its output; each
// `batch` times its rows.
template <typename T> struct Outputs {
    rf_t4_outputs arg;
    T* part[RF_T4_OUTPUTS];
    int rows[RF_T4_OUTPUTS];
    int batch;
    // [batch, n]: each vector's rows in order, for the check.
    std::vector<T> gathered() const {
        std::vector<T> y;
        for (int v = 0; v < batch; ++v)
            for (int i = 0; i < RF_T4_OUTPUTS; ++i)
                if (rows[i] > 0) y.insert(y.end(), part[i] + (size_t)v * rows[i], part[i] + (size_t)(v + 1) * rows[i]);
        return y;
    }
};
template <typename T> static Outputs<T> poisoned_outputs(EmuBuffers& mem, const TiledCase& c) {
    Outputs<T> o{};
    o.batch = c.batch;
    const int n = c.rows;
    const int split = c.swiglu ? n / 2 : c.split; // gates and ups to outputs 0 and 1
    const int rows[RF_T4_OUTPUTS] = {split > 0 ? split : n, split > 0 ? split : 0, split > 0 ? n - 2 * split : 0};
    unsigned end = 0;
    for (int i = 0; i < RF_T4_OUTPUTS; ++i) {
        o.rows[i] = rows[i];
        o.part[i] = rows[i] > 0 ? poisoned_y<T>(mem, c.batch * rows[i]) : nullptr;
        end += (unsigned)rows[i];
        o.arg.y[i] = o.part[i];
        o.arg.end[i] = end;
    }
    return o;
}

// A gate-and-up case's activation launch: `launch(arg)` writes [batch, n / 2] into a poisoned
// exact allocation, which must hold silu(gate) * up of the rows the plain launch gave (`rows`,
// [batch, n], each vector's gates then ups), each rounded as the kernels round it, bit for bit.
template <typename T, class Launch>
static bool swiglu_matches(EmuBuffers& mem, const TiledCase& c, const std::vector<T>& rows, Launch&& launch) {
    const int gates = c.rows / 2;
    T* act = poisoned_y<T>(mem, c.batch * gates);
    rf_t4_outputs arg{};
    arg.y[0] = act;
    arg.end[0] = (unsigned)gates;
    arg.end[1] = arg.end[2] = (unsigned)c.rows;
    arg.mode = RF_T4_SWIGLU;
    launch(arg);
    int bad = 0;
    for (int v = 0; v < c.batch; ++v) {
        for (int r = 0; r < gates; ++r) {
            const float g = Io<T>::load(rows[(size_t)v * c.rows + r]);
            const float u = Io<T>::load(rows[(size_t)v * c.rows + gates + r]);
            const T want = Io<T>::store(rf_silu_mul(g, u));
            const T got = act[(size_t)v * gates + r];
            const bool nan = std::isnan(Io<T>::load(want));
            if (nan ? !std::isnan(Io<T>::load(got)) : std::memcmp(&want, &got, sizeof(T)) != 0) {
                if (bad++ < 5)
                    std::printf("    swiglu row %d vector %d: got %.9g, want %.9g\n", r, v, Io<T>::load(got),
                                Io<T>::load(want));
            }
        }
    }
    return bad == 0;
}

// A one-output case's residual launch: `launch(arg)` adds its rows to a stream of random values
// (an exact allocation), which must then hold round(stream + row) of the rows the plain launch
// gave (`rows`, [batch, n]), bit for bit.
template <typename T, class Launch>
static bool add_matches(EmuBuffers& mem, const TiledCase& c, const std::vector<T>& rows, std::mt19937_64& rng,
                        Launch&& launch) {
    const size_t count = (size_t)c.batch * c.rows;
    T* stream = mem.exact<T>(count);
    std::vector<T> before(count);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (size_t i = 0; i < count; ++i) stream[i] = before[i] = Io<T>::store(u(rng));
    rf_t4_outputs arg{};
    arg.y[0] = stream;
    arg.end[0] = arg.end[1] = arg.end[2] = (unsigned)c.rows;
    arg.mode = RF_T4_ADD;
    launch(arg);
    int bad = 0;
    for (size_t i = 0; i < count; ++i) {
        const T want = Io<T>::store(Io<T>::load(rows[i]) + Io<T>::load(before[i]));
        const bool nan = std::isnan(Io<T>::load(want));
        if (nan ? !std::isnan(Io<T>::load(stream[i])) : std::memcmp(&want, &stream[i], sizeof(T)) != 0) {
            if (bad++ < 5)
                std::printf("    add element %zu: got %.9g, want %.9g\n", i, Io<T>::load(stream[i]), Io<T>::load(want));
        }
    }
    return bad == 0;
}

// A normed case's input: a residual row h of k multiples of 2^-4 in [-1, 1) (their squares'
// sum is exact in f32 in any order, under 2^14 with 8 fraction bits), the norm's weight, and the
// normalised row the kernel must multiply: h * s * weight rounded to T, s as the kernel forms it.
template <typename T> struct NormCase {
    T* h;
    T* weight;
    rf_t4_norm arg;
    std::vector<T> normed;
};
template <typename T> static NormCase<T> make_norm(EmuBuffers& mem, int k, std::mt19937_64& rng) {
    NormCase<T> n;
    n.h = mem.exact<T>(k);
    n.weight = mem.exact<T>(k);
    std::uniform_real_distribution<float> uw(0.5f, 1.5f);
    double sumsq = 0.0;
    for (int i = 0; i < k; ++i) {
        const float h = (float)((int)(rng() % 32) - 16) / 16.0f;
        n.h[i] = Io<T>::store(h);
        n.weight[i] = Io<T>::store(uw(rng));
        sumsq += (double)h * h;
    }
    n.arg.weight = n.weight;
    n.arg.eps = 1e-5f;
    const float s = rsqrtf((float)sumsq * (1.0f / (float)k) + n.arg.eps);
    for (int i = 0; i < k; ++i) n.normed.push_back(Io<T>::store(Io<T>::load(n.h[i]) * s * Io<T>::load(n.weight[i])));
    return n;
}

// q4_K in the tiled layout (kernels/q4k_tiled.hip): the GGUF rows of block_q4_K (144 bytes: d,
// dmin, 12 scale bytes, 128 code bytes; code i of sub-block j = i / 32 the low (j even) or high
// nibble of byte 32 (j / 2) + i % 32) re-laid out from the layout's description
// (crates/rocm-kernels/src/quant/q4k_tiled.rs, module docs), not from its packer.
static Tiled tile_q4k(EmuBuffers& mem, const unsigned char* gguf, int n, int nsb) {
    static const int NIBBLE[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    const int tiles = (n + RF_T4_ROWS - 1) / RF_T4_ROWS;
    unsigned char* payload = mem.exact<unsigned char>((size_t)tiles * nsb * 2048);
    unsigned char* headers = mem.exact<unsigned char>((size_t)tiles * nsb * 256);
    std::memset(payload, 0, (size_t)tiles * nsb * 2048);
    std::memset(headers, 0, (size_t)tiles * nsb * 256);
    for (int row = 0; row < n; ++row) {
        const int t = row / RF_T4_ROWS, rt = row % RF_T4_ROWS;
        for (int s = 0; s < nsb; ++s) {
            const unsigned char* blk = gguf + ((size_t)row * nsb + s) * 144;
            std::memcpy(headers + (((size_t)t * nsb + s) * 16 + rt) * 16, blk, 16);
            for (int p = 0; p < 8; ++p) {
                for (int u = 0; u < 4; ++u) {
                    unsigned w = 0;
                    for (int m = 0; m < 8; ++m) {
                        const int i = 32 * (u + 4 * (p / 4)) + 8 * (p % 4) + m, j = i / 32;
                        const unsigned code = (blk[16 + 32 * (j / 2) + i % 32] >> (4 * (j % 2))) & 15u;
                        w |= code << (4 * NIBBLE[m]);
                    }
                    const size_t at = ((((size_t)t * nsb + s) * 4 + p / 2) * 32 + 4 * (rt % 8) + u) * 16 + 8 * (p % 2) + 4 * (rt / 8);
                    std::memcpy(payload + at, &w, 4);
                }
            }
        }
    }
    return {reinterpret_cast<const uint4*>(payload), headers};
}

// q8_0 in the tiled layout (kernels/q8_0_tiled.hip; its dequantisation gives the rows back as
// the reference decodes them, bit for bit): the GGUF rows of block_q8_0 (34 bytes: d,
// 32 int8 codes) re-laid out from the layout's description (crates/rocm-kernels/src/quant/
// q8_0_tiled.rs, module docs), not from its packer: group s of a row is its blocks 8s .. 8s + 7.
static Tiled tile_q8(EmuBuffers& mem, const unsigned char* gguf, int n, int ng) {
    const int tiles = (n + RF_T4_ROWS - 1) / RF_T4_ROWS;
    unsigned char* payload = mem.exact<unsigned char>((size_t)tiles * ng * 4096);
    unsigned char* scales = mem.exact<unsigned char>((size_t)tiles * ng * 256);
    std::memset(payload, 0x80, (size_t)tiles * ng * 4096); // codes 0
    std::memset(scales, 0, (size_t)tiles * ng * 256);
    for (int row = 0; row < n; ++row) {
        const int t = row / RF_T4_ROWS, rt = row % RF_T4_ROWS;
        for (int s = 0; s < ng; ++s) {
            const unsigned char* grp = gguf + ((size_t)row * ng + s) * 8 * 34;
            for (int j = 0; j < 8; ++j) std::memcpy(scales + (((size_t)t * ng + s) * 16 + rt) * 16 + 2 * j, grp + 34 * j, 2);
            for (int p = 0; p < 8; ++p) {
                for (int u = 0; u < 4; ++u) {
                    const int j = u + 4 * (p / 4);
                    const size_t lane_at = ((((size_t)t * ng + s) * 8 + p) * 32 + 4 * (rt % 8) + u) * 16 + 4 * (rt / 8);
                    for (int m = 0; m < 8; ++m) {
                        const int e = 8 * (p % 4) + m; // element of block j
                        payload[lane_at + 8 * (m / 4) + m % 4] = (unsigned char)(grp[34 * j + 2 + e] ^ 0x80);
                    }
                }
            }
        }
    }
    return {reinterpret_cast<const uint4*>(payload), scales};
}

// The matrix-core q8_0 kernel's rows: the f64 reference's, within the f32 sums' bound over the
// terms it adds, |d| (q + 128) |x| and 128 |d| |x| (kernels/q8_0_tiled.hip), and staging's
// rounding of x over the same magnitudes (`unit`, x16_units).
template <typename T>
static bool q8_offset_check(const unsigned char* w, int k, const T* x, const T* y, int rows, int batch, double& worst,
                            const char* what, const double* unit) {
    int bad = 0;
    for (int r = 0; r < rows; ++r) {
        for (int b = 0; b < batch; ++b) {
            double want = 0.0, mag = 0.0, xr = 0.0;
            for (int blk = 0; blk < k / 32; ++blk) {
                const unsigned char* bl = w + ((size_t)r * (k / 32) + blk) * 34;
                const double d = ref_f16_at(bl);
                for (int e = 0; e < 32; ++e) {
                    const double xv = Io<T>::load(x[(size_t)b * k + 32 * blk + e]);
                    const double q = (signed char)bl[2 + e];
                    const double m = std::fabs(d) * (std::fabs(q + 128.0) + 128.0);
                    want += d * q * xv;
                    mag += m * std::fabs(xv);
                    xr += m * unit[(size_t)b * (k / 32) + blk];
                }
            }
            const double tol = ref_tolerance<T>(k, mag, want, xr), got = Io<T>::load(y[(size_t)b * rows + r]);
            if (!ref_within(got, want, tol, worst) && bad++ < 5)
                std::printf("    %s row %d vector %d: got %.9g, want %.9g (tolerance %.3g)\n", what, r, b, got, want, tol);
        }
    }
    return bad == 0;
}

// The layouts whose blocks are B's columns (rf_t4_block_columns), as the cases below take them:
// the GGUF bytes and blocks of a group (8 blocks of 32), the tiling, the stage and the reference
// format.
struct Q4kLayout {
    static constexpr Fmt fmt = Q4_K;
    static constexpr const char* name = "q4k";
    static constexpr int group_bytes = 144, group_blocks = 1;
    static constexpr size_t stage = RF_T4K_STAGE;
    static Tiled tile(EmuBuffers& mem, const unsigned char* gguf, int n, int groups) { return tile_q4k(mem, gguf, n, groups); }
};
struct Q8Layout {
    static constexpr Fmt fmt = Q8_0;
    static constexpr const char* name = "q8_0";
    static constexpr int group_bytes = 8 * 34, group_blocks = 8;
    static constexpr size_t stage = RF_T8_STAGE;
    static Tiled tile(EmuBuffers& mem, const unsigned char* gguf, int n, int groups) { return tile_q8(mem, gguf, n, groups); }
};

#ifdef RF_EMU_MMA_SYNC

// [0]: one vector, [1]: up to 8, [2]: up to 32.
template <typename T> struct MmaEntries;
#define EMU_T4_MMA(suffix, T)                                                                                \
    template <> struct MmaEntries<T> {                                                                       \
        static constexpr TiledEntry<T> fast[3] = {rf_mxfp4_tiled_matvec_mma_##suffix,                        \
                                                  rf_mxfp4_tiled_batch8_mma_##suffix,                        \
                                                  rf_mxfp4_tiled_batch32_mma_##suffix};                      \
        static constexpr TiledEntry<T> wide[3] = {rf_mxfp4_tiled_matvec_mma_wide_##suffix,                   \
                                                  rf_mxfp4_tiled_batch8_mma_wide_##suffix,                   \
                                                  rf_mxfp4_tiled_batch32_mma_wide_##suffix};                 \
        static constexpr TiledEntry<T> normed[2] = {rf_mxfp4_tiled_normed_mma_##suffix,                       \
                                                    rf_mxfp4_tiled_normed_mma_wide_##suffix};                 \
    };
EMU_T4_MMA(f16, __half)
EMU_T4_MMA(bf16, rf_bf16)

// The matrix-core entries: warps as the launcher picks them (one a group of 8 blocks, at most
// RF_T4_WARPS), the rings and the totals as its dynamic shared memory, the case's grid.
template <typename T> static void mma_case(const TiledCase& c, std::mt19937_64& rng) {
    EmuBuffers mem;
    const CaseData<T> d = make_case<T>(mem, c, rng);
    const int n = c.rows, nb = c.blocks_a_row;
    const int warps = c.warps();
    const unsigned grid = c.blocks();
    // mxfp4_tiled.rs's choose_loop and mma_shared_bytes: the rings (x in them for one f16
    // vector), the totals (1, 8 or 32 columns), and for one bf16 vector x as f16 and its blocks'
    // factors.
    const bool bf16 = std::is_same<T, rf_bf16>::value;
    const int loop = c.batch == 1 ? 0 : c.batch <= RF_T4_BATCH_PASS ? 1 : 2;
    const size_t columns = loop == 0 ? 1 : loop == 1 ? RF_T4_BATCH_PASS : RF_T4_MAX_BATCH;
    const size_t nbp = (size_t)(nb + RF_T4_GROUP - 1) / RF_T4_GROUP * RF_T4_GROUP;
    const size_t stage = loop == 0 && !bf16 ? RF_T4_STAGE_F16 : RF_T4_STAGE_BF16;
    const size_t shared = (size_t)warps * (RF_T4_STAGES * stage + 2 * RF_T4_ROWS * 4 * columns) + (loop == 0 && bf16 ? 68 * nbp : 0) +
                          (c.swiglu ? RF_T4_ROWS * 4 * columns : 0);
    // The normed entries: x staged once a block whatever T (no x in the stages).
    const size_t normed_shared =
        (size_t)warps * (RF_T4_STAGES * RF_T4_STAGE_BF16 + 2 * RF_T4_ROWS * 4) + 68 * nbp + (c.swiglu ? RF_T4_ROWS * 4 : 0);
    const std::vector<double> staged = x16_units(d.x, nb * 32, c.batch, true);
    double worst = 0.0;
    bool ok = true;
    for (bool wide : {false, true}) {
        if (c.scales == WIDE_BYTES && !wide) continue; // the fast entries need bytes <= 240
        const Outputs<T> y = poisoned_outputs<T>(mem, c);
        const TiledEntry<T> entry = wide ? MmaEntries<T>::wide[loop] : MmaEntries<T>::fast[loop];
        emu_launch_shared(rf_t4_smem, sizeof rf_t4_smem, shared, emu_dim3{grid, 1, 1}, 32 * warps, 32,
                          [&] { entry(d.w.payload, d.w.scales, d.x, y.arg, rf_t4_norm{}, (unsigned)nb, (unsigned)c.batch); });
        const std::vector<T> rows = y.gathered();
        ok &= ref_check_rows(MXFP4, d.gguf, nb * 32, d.x, rows.data(), n, c.batch, worst, wide ? "wide" : "fast",
                             staged.data());
        // A pair a block at most (the launcher's grid): the case's grid over the pairs.
        const unsigned pairs = std::min(grid, (unsigned)(n / 2 / RF_T4_ROWS));
        if (c.swiglu) {
            ok &= swiglu_matches(mem, c, rows, [&](const rf_t4_outputs& arg) {
                emu_launch_shared(rf_t4_smem, sizeof rf_t4_smem, shared, emu_dim3{pairs, 1, 1}, 32 * warps, 32,
                                  [&] { entry(d.w.payload, d.w.scales, d.x, arg, rf_t4_norm{}, (unsigned)nb, (unsigned)c.batch); });
            });
        } else if (c.split == 0) {
            ok &= add_matches(mem, c, rows, rng, [&](const rf_t4_outputs& arg) {
                emu_launch_shared(rf_t4_smem, sizeof rf_t4_smem, shared, emu_dim3{grid, 1, 1}, 32 * warps, 32,
                                  [&] { entry(d.w.payload, d.w.scales, d.x, arg, rf_t4_norm{}, (unsigned)nb, (unsigned)c.batch); });
            });
        }
        if (c.batch == 1 && c.xv == UNIFORM && c.scales == FAST) { // (the wide bytes overflow)
            // Through the norm: the rows from the normed row, then (gate and up) its activation.
            const NormCase<T> nc = make_norm<T>(mem, nb * 32, rng);
            const std::vector<double> normed_staged = x16_units(nc.normed.data(), nb * 32, 1, true);
            const TiledEntry<T> normed = MmaEntries<T>::normed[wide ? 1 : 0];
            const Outputs<T> yn = poisoned_outputs<T>(mem, c);
            emu_launch_shared(rf_t4_smem, sizeof rf_t4_smem, normed_shared, emu_dim3{grid, 1, 1}, 32 * warps, 32,
                              [&] { normed(d.w.payload, d.w.scales, nc.h, yn.arg, nc.arg, (unsigned)nb, 1u); });
            const std::vector<T> normed_rows = yn.gathered();
            ok &= ref_check_rows(MXFP4, d.gguf, nb * 32, nc.normed.data(), normed_rows.data(), n, 1, worst, "normed",
                                 normed_staged.data());
            if (c.swiglu) {
                ok &= swiglu_matches(mem, c, normed_rows, [&](const rf_t4_outputs& arg) {
                    emu_launch_shared(rf_t4_smem, sizeof rf_t4_smem, normed_shared, emu_dim3{pairs, 1, 1}, 32 * warps, 32,
                                      [&] { normed(d.w.payload, d.w.scales, nc.h, arg, nc.arg, (unsigned)nb, 1u); });
                });
            }
        }
    }
    emu_record(ok ? 0 : 1, worst);
    static const char* const XV[] = {"uniform", "wide", "range"};
    static const char* const LOOP[] = {"matvec", "batch8", "batch32"};
    std::printf("%-4s rf_mxfp4_tiled_%s_mma_%-4s warps %d grid %-3u rows %-3d k %-6d batch %-2d scales %s x %-7s split %-2d%s -> "
                "%s (worst %.3f of tol)\n",
                ok ? "ok" : "FAIL", LOOP[loop], Io<T>::name, warps, grid, n, nb * 32, c.batch,
                c.scales == FAST ? "fast" : "wide", XV[c.xv], c.split, c.swiglu ? " swiglu" : "", ok ? "match" : "MISMATCH", worst);
}


template <class L, typename T> struct ColumnsEntries;
#define EMU_T4K(suffix, T)                                                                                   \
    template <> struct ColumnsEntries<Q4kLayout, T> {                                                        \
        static constexpr TiledEntry<T> plain = rf_q4k_tiled_matvec_mma_##suffix;                             \
        static constexpr TiledEntry<T> normed = rf_q4k_tiled_normed_mma_##suffix;                            \
        static constexpr TiledEntry<T> batch8 = rf_q4k_tiled_batch8_mma_##suffix;                            \
        static constexpr TiledEntry<T> batch32 = rf_q4k_tiled_batch32_mma_##suffix;                          \
    };                                                                                                       \
    template <> struct ColumnsEntries<Q8Layout, T> {                                                         \
        static constexpr TiledEntry<T> plain = rf_q8_0_tiled_matvec_mma_##suffix;                            \
        static constexpr TiledEntry<T> normed = rf_q8_0_tiled_normed_mma_##suffix;                           \
        static constexpr TiledEntry<T> batch8 = rf_q8_0_tiled_batch8_mma_##suffix;                           \
        static constexpr TiledEntry<T> batch32 = rf_q8_0_tiled_batch32_mma_##suffix;                         \
    };
EMU_T4K(f16, __half)
EMU_T4K(bf16, rf_bf16)

// A layout's rows against the reference: the rows' bound (q4_K's products add its parts as the
// reference's magnitudes count them), or q8_0's offset terms (q8_offset_check).
template <class L, typename T>
static bool columns_check(const unsigned char* w, int k, const T* x, const T* y, int rows, int batch, double& worst,
                          const char* what, const double* unit) {
    if constexpr (L::fmt == Q8_0) return q8_offset_check(w, k, x, y, rows, batch, worst, what, unit);
    else return ref_check_rows(L::fmt, w, k, x, y, rows, batch, worst, what, unit);
}

// The q4_K and q8_0 matrix-core entries: one vector (plain and normed) or several (q4_K's
// batch8 up to 8 vectors, batch32 up to 32); warps one a group, at most RF_T4_WARPS, the shared
// memory the launchers' shared_bytes gives; the same checks as the MXFP4 cases (rows against the
// f64 reference within the f32 sums' bound and staging's rounding, the activation and the
// residual add bit for bit against the same launch's rows, and for one vector the normed entry).
template <class L, typename T> static void columns_case(const TiledCase& c, std::mt19937_64& rng) {
    typedef ColumnsEntries<L, T> Entries;
    EmuBuffers mem;
    const int n = c.rows, nb = c.blocks_a_row, k = 32 * nb, groups = nb / 8, batch = c.batch;
    unsigned char* gguf = mem.exact<unsigned char>((size_t)n * groups * L::group_bytes);
    ref_random_blocks(L::fmt, gguf, (size_t)n * groups * L::group_blocks, -12, 7, rng);
    const Tiled w = L::tile(mem, gguf, n, groups);
    T* x = mem.exact<T>((size_t)batch * k);
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
    for (int i = 0; i < batch * k; ++i) x[i] = Io<T>::store(ux(rng));
    if (c.xv != UNIFORM) fill_x(x, batch * k, c.xv, rng);
    const int warps = c.warps();
    const unsigned grid = c.blocks();
    const bool one = batch == 1;
    const size_t columns = one ? 1 : batch <= RF_T4_BATCH_PASS ? RF_T4_BATCH_PASS : RF_T4_MAX_BATCH;
    const TiledEntry<T> plain =
        one ? Entries::plain : batch <= RF_T4_BATCH_PASS ? Entries::batch8 : Entries::batch32;
    // The rings and the totals a column; one vector's x staged with its factors and sums, and
    // the row of zeros; a gate-and-up launch's gates a column.
    const size_t shared = (size_t)warps * (RF_T4_STAGES * L::stage + 2 * RF_T4_ROWS * 4 * columns) +
                          (one ? (size_t)nb * 72 + 512 : 0) + (c.swiglu ? RF_T4_ROWS * 4 * columns : 0);
    const std::vector<double> staged = x16_units(x, k, batch, true);
    double worst = 0.0;
    bool ok = true;
    const unsigned pairs = std::min(grid, (unsigned)(n / 2 / RF_T4_ROWS));
    auto run = [&](TiledEntry<T> e, const T* in, const rf_t4_outputs& arg, rf_t4_norm norm, unsigned blocks) {
        emu_launch_shared(rf_t4_smem, sizeof rf_t4_smem, shared, emu_dim3{blocks, 1, 1}, 32 * warps, 32,
                          [&] { e(w.payload, w.scales, in, arg, norm, (unsigned)nb, (unsigned)batch); });
    };
    const Outputs<T> y = poisoned_outputs<T>(mem, c);
    run(plain, x, y.arg, rf_t4_norm{}, grid);
    const std::vector<T> rows = y.gathered();
    ok &= columns_check<L>(gguf, k, x, rows.data(), n, batch, worst, L::name, staged.data());
    if (c.swiglu) {
        ok &= swiglu_matches(mem, c, rows, [&](const rf_t4_outputs& arg) { run(plain, x, arg, rf_t4_norm{}, pairs); });
    } else if (c.split == 0) {
        ok &= add_matches(mem, c, rows, rng, [&](const rf_t4_outputs& arg) { run(plain, x, arg, rf_t4_norm{}, grid); });
    }
    if (one && c.xv == UNIFORM) {
        const NormCase<T> nc = make_norm<T>(mem, k, rng);
        const std::vector<double> normed_staged = x16_units(nc.normed.data(), k, 1, true);
        const Outputs<T> yn = poisoned_outputs<T>(mem, c);
        run(Entries::normed, nc.h, yn.arg, nc.arg, grid);
        const std::vector<T> normed_rows = yn.gathered();
        ok &= columns_check<L>(gguf, k, nc.normed.data(), normed_rows.data(), n, 1, worst, "normed", normed_staged.data());
        if (c.swiglu) {
            ok &= swiglu_matches(mem, c, normed_rows, [&](const rf_t4_outputs& arg) { run(Entries::normed, nc.h, arg, nc.arg, pairs); });
        }
    }
    emu_record(ok ? 0 : 1, worst);
    static const char* const XV[] = {"uniform", "wide", "range"};
    static const char* const LOOP[] = {"matvec", "batch8", "batch32"};
    std::printf("%-4s rf_%s_tiled_%s_mma_%-4s warps %d grid %-3u rows %-3d k %-6d batch %-2d x %-7s split %-2d%s -> %s (worst %.3f of tol)\n",
                ok ? "ok" : "FAIL", L::name, LOOP[one ? 0 : columns == RF_T4_BATCH_PASS ? 1 : 2], Io<T>::name, warps, grid, n, k,
                batch, XV[c.xv], c.split, c.swiglu ? " swiglu" : "", ok ? "match" : "MISMATCH", worst);
}

#else

template <typename T> struct PortableEntry;
#define EMU_T4_ENTRY(suffix, T)                                                                              \
    template <> struct PortableEntry<T> {                                                                    \
        static constexpr TiledEntry<T> e = rf_mxfp4_tiled_matvec_##suffix;                                  \
        static constexpr TiledEntry<T> normed = rf_mxfp4_tiled_normed_##suffix;                             \
    };
RF_FOR_EACH_DTYPE(EMU_T4_ENTRY)

// The portable entry: a tile a block, warps as the launcher picks them (32-thread "warps"
// whatever the wavefront width).
template <typename T> static void portable_case(const TiledCase& c, int width, std::mt19937_64& rng) {
    EmuBuffers mem;
    const CaseData<T> d = make_case<T>(mem, c, rng);
    const int n = c.rows, nb = c.blocks_a_row;
    const int warps = c.warps();
    const unsigned grid = c.blocks();
    const Outputs<T> y = poisoned_outputs<T>(mem, c);
    const TiledEntry<T> e = PortableEntry<T>::e;
    emu_launch(emu_dim3{grid, 1, 1}, 32 * warps, width,
               [&] { e(d.w.payload, d.w.scales, d.x, y.arg, rf_t4_norm{}, (unsigned)nb, (unsigned)c.batch); });
    double worst = 0.0;
    const std::vector<T> rows = y.gathered();
    bool ok = ref_check_rows(MXFP4, d.gguf, nb * 32, d.x, rows.data(), n, c.batch, worst, "portable");
    // The launcher's grid for a gate-and-up launch: a block a pair of tiles.
    const unsigned pairs = (unsigned)(n / 2 / RF_T4_ROWS);
    if (c.swiglu) {
        ok &= swiglu_matches(mem, c, rows, [&](const rf_t4_outputs& arg) {
            emu_launch(emu_dim3{pairs, 1, 1}, 32 * warps, width,
                       [&] { e(d.w.payload, d.w.scales, d.x, arg, rf_t4_norm{}, (unsigned)nb, (unsigned)c.batch); });
        });
    } else if (c.split == 0) {
        ok &= add_matches(mem, c, rows, rng, [&](const rf_t4_outputs& arg) {
            emu_launch(emu_dim3{grid, 1, 1}, 32 * warps, width,
                       [&] { e(d.w.payload, d.w.scales, d.x, arg, rf_t4_norm{}, (unsigned)nb, (unsigned)c.batch); });
        });
    }
    if (c.batch == 1 && c.scales == FAST) { // (the wide bytes times a normed row overflow)
        // Through the norm: the rows from the normed row, then (gate and up) its activation.
        const NormCase<T> nc = make_norm<T>(mem, nb * 32, rng);
        const Outputs<T> yn = poisoned_outputs<T>(mem, c);
        const TiledEntry<T> normed = PortableEntry<T>::normed;
        emu_launch(emu_dim3{grid, 1, 1}, 32 * warps, width,
                   [&] { normed(d.w.payload, d.w.scales, nc.h, yn.arg, nc.arg, (unsigned)nb, 1u); });
        const std::vector<T> normed_rows = yn.gathered();
        ok &= ref_check_rows(MXFP4, d.gguf, nb * 32, nc.normed.data(), normed_rows.data(), n, 1, worst, "normed");
        if (c.swiglu) {
            ok &= swiglu_matches(mem, c, normed_rows, [&](const rf_t4_outputs& arg) {
                emu_launch(emu_dim3{pairs, 1, 1}, 32 * warps, width,
                           [&] { normed(d.w.payload, d.w.scales, nc.h, arg, nc.arg, (unsigned)nb, 1u); });
            });
        }
    }
    emu_record(ok ? 0 : 1, worst);
    std::printf("%-4s rf_mxfp4_tiled_matvec_%-4s w%d warps %d grid %-3u rows %-3d k %-6d batch %-2d split %-2d%s -> %s (worst "
                "%.3f of tol)\n",
                ok ? "ok" : "FAIL", Io<T>::name, width, warps, grid, n, nb * 32, c.batch, c.split, c.swiglu ? " swiglu" : "",
                ok ? "match" : "MISMATCH", worst);
}

template <typename T> struct DequantEntry;
#define EMU_T4_DEQUANT(suffix, T)                                                                            \
    template <> struct DequantEntry<T> {                                                                     \
        static constexpr void (*e)(const uint4*, const unsigned char*, T*, unsigned, unsigned) =              \
            rf_mxfp4_tiled_dequant_##suffix;                                                                 \
    };
RF_FOR_EACH_DTYPE(EMU_T4_DEQUANT)

// The dequantisation entry over the whole weight, 2 blocks of 64 threads (a grid-stride walk).
template <typename T> static void dequant_case(const TiledCase& c, int width, std::mt19937_64& rng) {
    EmuBuffers mem;
    const CaseData<T> d = make_case<T>(mem, c, rng);
    const int n = c.rows, nb = c.blocks_a_row, k = 32 * nb;
    T* out = poisoned_y<T>(mem, n * k);
    emu_launch(emu_dim3{2, 1, 1}, 64, width,
               [&] { DequantEntry<T>::e(d.w.payload, d.w.scales, out, (unsigned)n, (unsigned)nb); });
    int bad = 0;
    for (int r = 0; r < n; ++r) {
        for (int b = 0; b < nb; ++b) {
            double w[32], mag[32];
            ref_decode_block(MXFP4, d.gguf + ((size_t)r * nb + b) * 17, w, mag);
            for (int e = 0; e < 32; ++e) {
                const T want = Io<T>::store((float)w[e]);
                const T got = out[(size_t)r * k + 32 * b + e];
                // NaN (scale byte 0xFF) as any NaN; everything else bit for bit.
                const bool nan = std::isnan(Io<T>::load(want));
                bad += nan ? !std::isnan(Io<T>::load(got)) : std::memcmp(&want, &got, sizeof(T)) != 0;
            }
        }
    }
    emu_record(bad == 0 ? 0 : 1, 0.0);
    std::printf("%-4s rf_mxfp4_tiled_dequant_%-4s w%d rows %-3d k %-6d -> %s (%d elements differ)\n", bad ? "FAIL" : "ok",
                Io<T>::name, width, n, k, bad ? "MISMATCH" : "match", bad);
}


template <class L, typename T> struct ColumnsPortable;
#define EMU_T4K_PORTABLE(suffix, T)                                                                          \
    template <> struct ColumnsPortable<Q4kLayout, T> {                                                       \
        static constexpr TiledEntry<T> plain = rf_q4k_tiled_matvec_##suffix;                                 \
        static constexpr TiledEntry<T> normed = rf_q4k_tiled_normed_##suffix;                                \
        static constexpr void (*dequant)(const uint4*, const unsigned char*, T*, unsigned, unsigned) =        \
            rf_q4k_tiled_dequant_##suffix;                                                                   \
    };                                                                                                       \
    template <> struct ColumnsPortable<Q8Layout, T> {                                                        \
        static constexpr TiledEntry<T> plain = rf_q8_0_tiled_matvec_##suffix;                                \
        static constexpr TiledEntry<T> normed = rf_q8_0_tiled_normed_##suffix;                               \
        static constexpr void (*dequant)(const uint4*, const unsigned char*, T*, unsigned, unsigned) =        \
            rf_q8_0_tiled_dequant_##suffix;                                                                  \
    };
RF_FOR_EACH_DTYPE(EMU_T4K_PORTABLE)

// The portable q4_K and q8_0 entries (a tile a block, warps one a group up to RF_T4_WARPS): the
// rows against the f64 reference, SwiGLU and the residual add bit for bit against the rows,
// the normed entry through an exact sum of squares; then the dequantisation (2 blocks of 64
// threads striding) against the GGUF rows decoded and rounded to T once, bit for bit.
template <class L, typename T> static void columns_portable_case(const TiledCase& c, int width, std::mt19937_64& rng) {
    typedef ColumnsPortable<L, T> Entries;
    EmuBuffers mem;
    const int n = c.rows, nb = c.blocks_a_row, k = 32 * nb, groups = nb / 8;
    unsigned char* gguf = mem.exact<unsigned char>((size_t)n * groups * L::group_bytes);
    ref_random_blocks(L::fmt, gguf, (size_t)n * groups * L::group_blocks, -12, 7, rng);
    const Tiled w = L::tile(mem, gguf, n, groups);
    T* x = mem.exact<T>((size_t)c.batch * k);
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
    for (int i = 0; i < c.batch * k; ++i) x[i] = Io<T>::store(ux(rng));
    const int warps = c.warps();
    const unsigned grid = c.blocks();
    const unsigned pairs = (unsigned)(n / 2 / RF_T4_ROWS);
    auto run = [&](TiledEntry<T> e, const T* in, const rf_t4_outputs& arg, rf_t4_norm norm, unsigned blocks, unsigned batch) {
        emu_launch(emu_dim3{blocks, 1, 1}, 32 * warps, width, [&] { e(w.payload, w.scales, in, arg, norm, (unsigned)nb, batch); });
    };
    double worst = 0.0;
    const Outputs<T> y = poisoned_outputs<T>(mem, c);
    run(Entries::plain, x, y.arg, rf_t4_norm{}, grid, (unsigned)c.batch);
    const std::vector<T> rows = y.gathered();
    bool ok = ref_check_rows(L::fmt, gguf, k, x, rows.data(), n, c.batch, worst, "portable");
    if (c.swiglu) {
        ok &= swiglu_matches(mem, c, rows, [&](const rf_t4_outputs& arg) { run(Entries::plain, x, arg, rf_t4_norm{}, pairs, (unsigned)c.batch); });
    } else if (c.split == 0) {
        ok &= add_matches(mem, c, rows, rng, [&](const rf_t4_outputs& arg) { run(Entries::plain, x, arg, rf_t4_norm{}, grid, (unsigned)c.batch); });
    }
    if (c.batch == 1) {
        const NormCase<T> nc = make_norm<T>(mem, k, rng);
        const Outputs<T> yn = poisoned_outputs<T>(mem, c);
        run(Entries::normed, nc.h, yn.arg, nc.arg, grid, 1u);
        const std::vector<T> normed_rows = yn.gathered();
        ok &= ref_check_rows(L::fmt, gguf, k, nc.normed.data(), normed_rows.data(), n, 1, worst, "portable normed");
    }
    int bad = 0;
    {
        T* out = poisoned_y<T>(mem, n * k);
        emu_launch(emu_dim3{2, 1, 1}, 64, width, [&] { Entries::dequant(w.payload, w.scales, out, (unsigned)n, (unsigned)nb); });
        for (int r = 0; r < n; ++r) {
            for (int s = 0; s < groups; ++s) {
                double v[256], mag[256];
                const unsigned char* group = gguf + ((size_t)r * groups + s) * L::group_bytes;
                for (int b = 0; b < L::group_blocks; ++b) {
                    const int elems = 256 / L::group_blocks;
                    ref_decode_block(L::fmt, group + b * (L::group_bytes / L::group_blocks), v + b * elems, mag + b * elems);
                }
                for (int e = 0; e < 256; ++e) {
                    const T want = Io<T>::store((float)v[e]);
                    const T got = out[(size_t)r * k + 256 * s + e];
                    bad += std::memcmp(&want, &got, sizeof(T)) != 0;
                }
            }
        }
    }
    ok &= bad == 0;
    emu_record(ok ? 0 : 1, worst);
    char dequant[32] = "";
    std::snprintf(dequant, sizeof dequant, ", dequant %d differ", bad);
    std::printf("%-4s rf_%s_tiled_matvec_%-4s w%d warps %d grid %-3u rows %-3d k %-6d batch %-2d split %-2d%s%s -> %s (worst %.3f of tol)\n",
                ok ? "ok" : "FAIL", L::name, Io<T>::name, width, warps, grid, n, k, c.batch, c.split, c.swiglu ? " swiglu" : "", dequant,
                ok ? "match" : "MISMATCH", worst);
}
#endif // RF_EMU_MMA_SYNC

int main(int argc, char** argv) {
    std::mt19937_64 rng(0x7113d);
    const bool quick = emu_quick_arg(argc, argv);
    // {rows, blocks a row, grid, quick, scales, x, split, batch}
    const std::vector<TiledCase> cases = {
        {37, 128, 0, true},            // k = 4096: 16 groups, 8 warps of 2 a tile; a ragged last tile
        {37, 128, 1, true},            // one block walks the 3 tiles, its rings across their ends
        {16, 8, 0, true},              // one group, one warp
        {21, 17, 2, true},             // k = 544: 3 groups (the last of 1 block), padding to 24 blocks
        {40, 90, 2, false},            // k = 2880 (gpt-oss): 12 groups over 8 warps (2 or 1 a warp), 2 blocks over 3 tiles
        {9, 448, 1, false},            // k = 14336: 56 groups, 7 a warp
        {5, 3, 0, false},              // k = 96: a group of 3 blocks, 5 rows
        {33, 64, 2, true, WIDE_BYTES}, // scale bytes past the fast conversion's range
        {37, 128, 2, true, FAST, WIDE}, // bf16 x of a wide range, staged as block-scaled f16
        {21, 17, 0, true, FAST, RANGE}, // rows made of the elements that staging rounds
        {9, 448, 1, false, FAST, WIDE}, // k = 14336: x of 28 KB staged a block
        {37, 128, 1, true, FAST, UNIFORM, 16}, // three outputs of 16, 16 and 5 rows, one block over all
        {53, 17, 2, true, FAST, UNIFORM, 16},  // 16, 16 and 21 rows, two blocks alternating outputs
        {37, 128, 1, true, FAST, UNIFORM, 0, 8},     // 8 vectors: one pass, a block over 3 tiles
        {21, 17, 2, true, FAST, UNIFORM, 0, 3},      // 3 vectors (columns past the batch), a partial group
        {53, 17, 2, true, FAST, UNIFORM, 16, 20},    // 20 vectors: three passes of four, three outputs
        {33, 64, 2, true, WIDE_BYTES, UNIFORM, 0, 5}, // wide scale bytes, several vectors
        {37, 128, 2, true, FAST, WIDE, 0, 8},        // bf16 x of a wide range rounded in registers
        {21, 17, 0, false, FAST, RANGE, 0, 32},      // 32 vectors of the elements that staging rounds
        {9, 448, 1, false, FAST, UNIFORM, 0, 9},     // k = 14336, 9 vectors (the 32-vector loop)
        // Gate and up with SwiGLU: gates 48 rows (3 tiles) and ups 48.
        {96, 128, 1, true, FAST, UNIFORM, 0, 1, true},  // one block walks the 3 pairs
        {96, 17, 2, true, FAST, UNIFORM, 0, 1, true},   // two blocks, pairs 0, 2 and 1; a partial group
        {96, 128, 2, true, FAST, WIDE, 0, 1, true},     // bf16 x of a wide range
        {64, 64, 2, true, WIDE_BYTES, UNIFORM, 0, 1, true}, // wide scale bytes (the _wide entries)
        {96, 17, 2, true, FAST, UNIFORM, 0, 5, true},   // 5 vectors (one pass)
        {64, 128, 1, false, FAST, UNIFORM, 0, 20, true}, // 20 vectors (passes of the 32-vector loop)
        {32, 3, 1, true, FAST, UNIFORM, 0, 3, true},    // k = 96, one pair, 3 vectors
    };
    for (const TiledCase& c : cases) {
        if (quick && !c.quick) continue;
#ifdef RF_EMU_MMA_SYNC
        if (c.scales == FAST && c.xv == UNIFORM) mma_case<__half>(c, rng); // the wide bytes and x overflow f16
        mma_case<rf_bf16>(c, rng);
#else
        if (c.xv != UNIFORM) continue; // the portable kernels take x as it is
        for (int width : {32, 64}) {
            portable_case<float>(c, width, rng);
            if (c.scales == FAST) portable_case<__half>(c, width, rng);
            portable_case<rf_bf16>(c, width, rng);
            if (c.split == 0 && !c.swiglu) {
                dequant_case<float>(c, width, rng);
                dequant_case<__half>(c, width, rng);
                dequant_case<rf_bf16>(c, width, rng);
            }
        }
#endif
    }
    // q4_K: {rows, blocks a row (8 a super-block), grid, quick, scales (unused), x, split, batch, swiglu}
    const std::vector<TiledCase> q4k_cases = {
        {37, 128, 0, true},                          // k = 4096: 16 super-blocks, 8 warps of 2 a tile; a ragged last tile
        {37, 128, 1, true},                          // one block walks the 3 tiles, its rings across their ends
        {16, 8, 0, true},                            // k = 256: one super-block, one warp
        {40, 24, 2, true},                           // k = 768: 3 warps, 2 blocks over 3 tiles
        {9, 448, 1, false},                          // k = 14336: 56 super-blocks, 7 a warp, x of 28 KB
        {37, 128, 2, true, FAST, WIDE},              // bf16 x of a wide range, staged as block-scaled f16
        {53, 16, 2, true, FAST, UNIFORM, 16},        // three outputs of 16, 16 and 21 rows
        {96, 128, 1, true, FAST, UNIFORM, 0, 1, true}, // gate and up with SwiGLU, one block over 3 pairs
        {96, 16, 2, true, FAST, UNIFORM, 0, 1, true},  // two blocks, k = 512
        {21, 16, 2, true, FAST, UNIFORM, 0, 3},        // 3 vectors (batch8 here; the portable kernel on AMD)
        {37, 128, 2, true, FAST, UNIFORM, 0, 8},       // 8 vectors, one pass; a ragged last tile
        {53, 24, 2, true, FAST, UNIFORM, 16, 5},       // 5 vectors into three outputs
        {96, 16, 2, true, FAST, UNIFORM, 0, 13, true}, // 13 vectors (the 32-vector loop) with SwiGLU
        {21, 448, 1, false, FAST, UNIFORM, 0, 32},     // 32 vectors at k = 14336, one block
    };
    // q8_0: q4_K's shapes; 8 blocks a group.
    const std::vector<TiledCase> q8_cases = {
        {37, 128, 0, true},                          // k = 4096: 16 groups, 8 warps of 2 a tile; a ragged last tile
        {37, 128, 1, true},                          // one block walks the 3 tiles, its rings across their ends
        {16, 8, 0, true},                            // k = 256: one group, one warp
        {40, 24, 2, true},                           // k = 768: 3 warps, 2 blocks over 3 tiles
        {9, 448, 1, false},                          // k = 14336: 56 groups, 7 a warp, x of 28 KB
        {37, 128, 2, true, FAST, WIDE},              // bf16 x of a wide range, staged as block-scaled f16
        {53, 16, 2, true, FAST, UNIFORM, 16},        // three outputs of 16, 16 and 21 rows
        {96, 128, 1, true, FAST, UNIFORM, 0, 1, true}, // gate and up with SwiGLU, one block over 3 pairs
        {96, 16, 2, true, FAST, UNIFORM, 0, 1, true},  // two blocks, k = 512
        {21, 16, 2, true, FAST, UNIFORM, 0, 3},        // 3 vectors (batch8 here; the portable kernel on AMD)
        {37, 128, 2, true, FAST, WIDE, 0, 8},          // 8 vectors of bf16 x of a wide range, one pass
        {53, 24, 2, true, FAST, UNIFORM, 16, 5},       // 5 vectors into three outputs
        {96, 16, 2, true, FAST, UNIFORM, 0, 13, true}, // 13 vectors (the 32-vector loop) with SwiGLU
        {21, 448, 1, false, FAST, UNIFORM, 0, 32},     // 32 vectors at k = 14336, one block
    };
#ifdef RF_EMU_MMA_SYNC
    for (const TiledCase& c : q4k_cases) {
        if (quick && !c.quick) continue;
        if (c.xv == UNIFORM) columns_case<Q4kLayout, __half>(c, rng);
        columns_case<Q4kLayout, rf_bf16>(c, rng);
    }
    for (const TiledCase& c : q8_cases) {
        if (quick && !c.quick) continue;
        if (c.xv == UNIFORM) columns_case<Q8Layout, __half>(c, rng);
        columns_case<Q8Layout, rf_bf16>(c, rng);
    }
    return emu_finish("tiled", "rf_mxfp4_tiled_*_mma[_wide]_*, rf_q4k_tiled_*_mma_* and rf_q8_0_tiled_*_mma_* on emulated mma.sync, warps of 32");
#else
    for (const TiledCase& c : q4k_cases) {
        if (quick && !c.quick) continue;
        if (c.xv != UNIFORM) continue; // the portable kernel takes x as it is
        for (int width : {32, 64}) {
            columns_portable_case<Q4kLayout, float>(c, width, rng);
            columns_portable_case<Q4kLayout, __half>(c, width, rng);
            columns_portable_case<Q4kLayout, rf_bf16>(c, width, rng);
        }
    }
    for (const TiledCase& c : q8_cases) {
        if ((quick && !c.quick) || c.xv != UNIFORM) continue;
        for (int width : {32, 64}) {
            columns_portable_case<Q8Layout, float>(c, width, rng);
            columns_portable_case<Q8Layout, __half>(c, width, rng);
            columns_portable_case<Q8Layout, rf_bf16>(c, width, rng);
        }
    }
    return emu_finish("tiled", "rf_mxfp4_tiled_*, rf_q4k_tiled_{matvec,normed,dequant}_* and rf_q8_0_tiled_{matvec,normed,dequant}_*, wave32 and wave64");
#endif
}
