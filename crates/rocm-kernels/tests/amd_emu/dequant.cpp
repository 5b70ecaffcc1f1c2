// CPU emulation of the dequantisation kernel on its AMD code path (kernels/dequant.hip:
// rf_dequant_<fmt>_<dt>, what prefill on AMD runs before the GEMM), the emulator being simt.h:
// all eight block formats (ggml q8_0, q4_0, mxfp4; MXFP6 E2M3 and E3M2; ggml q4_K, q5_K, q6_K),
// f32/f16/bf16 outputs, the launcher's 256 threads and narrower blocks, grids that stride over
// tiles, partial tiles, and sources that are not 16-byte aligned (the byte-load staging).
//
// Every output is compared bit for bit with a decode written here from the formats' published
// layouts (ggml's blocks, the OCP MX element encodings), formed in f64 and rounded once to f32
// (each decode is exact in f32 or, for q4_K / q5_K, one rounding of an exact difference), then
// to the output type. Blocks are random bytes, f16 scales of random size and sign (some zero,
// some subnormal), E8M0 scales over their whole range (NaN's 0xFF included). Built with
// AddressSanitizer over exact-size buffers (run.sh): a read past the last block or a write past
// the last output is an error.

#include "simt.h"

#include "dequant.hip"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define EMU_ASAN 1
#endif
#endif

enum Fmt { Q8_0, Q4_0, MXFP4, MXFP6_E2M3, MXFP6_E3M2, Q4_K, Q5_K, Q6_K };
struct FmtInfo {
    const char* name;
    int elems, bytes;
};
static const FmtInfo FMTS[] = {
    {"q8_0", 32, 34},       {"q4_0", 32, 18},       {"mxfp4", 32, 17},  {"mxfp6_e2m3", 32, 25},
    {"mxfp6_e3m2", 32, 25}, {"q4_k", 256, 144},     {"q5_k", 256, 176}, {"q6_k", 256, 210},
};

template <typename T> using DequantKernel = void (*)(const unsigned char*, T*, rf_u64);
template <typename T> struct DequantEntries;
#define EMU_DEQUANT_ENTRIES(suffix, T)                                                                 \
    template <> struct DequantEntries<T> {                                                             \
        static constexpr DequantKernel<T> e[8] = {                                                     \
            rf_dequant_q8_0_##suffix,       rf_dequant_q4_0_##suffix, rf_dequant_mxfp4_##suffix,       \
            rf_dequant_mxfp6_e2m3_##suffix, rf_dequant_mxfp6_e3m2_##suffix, rf_dequant_q4_k_##suffix,  \
            rf_dequant_q5_k_##suffix,       rf_dequant_q6_k_##suffix};                                 \
    };
RF_FOR_EACH_DTYPE(EMU_DEQUANT_ENTRIES)

// The output type's bits of an f32, rounded to nearest even (NaN kept NaN).
template <typename T> struct Bits;
template <> struct Bits<float> {
    static constexpr const char* name = "f32";
    static uint32_t of(float v) { return __float_as_uint(v); }
    static uint32_t got(float v) { return __float_as_uint(v); }
    static bool nan(uint32_t b) { return (b & 0x7fffffffu) > 0x7f800000u; }
};
template <> struct Bits<__half> {
    static constexpr const char* name = "f16";
    static uint32_t of(float v) { return __half_as_ushort(__float2half(v)); }
    static uint32_t got(__half v) { return __half_as_ushort(v); }
    static bool nan(uint32_t b) { return (b & 0x7fffu) > 0x7c00u; }
};
template <> struct Bits<unsigned short> {
    static constexpr const char* name = "bf16";
    static uint32_t of(float v) {
        const uint32_t u = __float_as_uint(v);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
        return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    }
    static uint32_t got(unsigned short v) { return v; }
    static bool nan(uint32_t b) { return (b & 0x7fffu) > 0x7f80u; }
};

static double f16_at(const unsigned char* p) { return emu::f16f((uint16_t)(p[0] | p[1] << 8)); }

// E8M0: 2^(e - 127); 0xFF is NaN.
static double e8m0(unsigned e) { return e == 0xff ? NAN : std::ldexp(1.0, (int)e - 127); }

// An OCP MX element of EBITS exponent and MBITS mantissa bits (sign on top): subnormal at
// exponent 0, bias 2^(EBITS - 1) - 1, no infinities or NaNs (E2M1, E2M3, E3M2).
static double mx_element(unsigned code, int ebits, int mbits) {
    const int bias = (1 << (ebits - 1)) - 1;
    const unsigned m = code & ((1u << mbits) - 1), e = (code >> mbits) & ((1u << ebits) - 1);
    const double mag = e == 0 ? std::ldexp((double)m, 1 - bias - mbits) : std::ldexp(1.0 + std::ldexp((double)m, -mbits), (int)e - bias);
    return (code >> (ebits + mbits)) & 1 ? -mag : mag;
}

static void scale_min_k4(int j, const unsigned char* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// One block's elements as f32 (exact, or one rounding for q4_K / q5_K).
static void decode_block(Fmt f, const unsigned char* b, float* out) {
    double w[256];
    switch (f) {
    case Q8_0:
        for (int j = 0; j < 32; ++j) w[j] = f16_at(b) * (signed char)b[2 + j];
        break;
    case Q4_0:
        for (int j = 0; j < 16; ++j) {
            w[j] = f16_at(b) * ((b[2 + j] & 0xF) - 8);
            w[j + 16] = f16_at(b) * ((b[2 + j] >> 4) - 8);
        }
        break;
    case MXFP4:
        for (int j = 0; j < 16; ++j) {
            w[j] = mx_element(b[1 + j] & 0xF, 2, 1) * e8m0(b[0]);
            w[j + 16] = mx_element(b[1 + j] >> 4, 2, 1) * e8m0(b[0]);
        }
        break;
    case MXFP6_E2M3:
    case MXFP6_E3M2:
        for (int j = 0; j < 32; ++j) {
            unsigned code = 0;
            for (int bit = 0; bit < 6; ++bit) {
                const int at = 6 * j + bit;
                code |= ((b[1 + at / 8] >> (at % 8)) & 1u) << bit;
            }
            w[j] = (f == MXFP6_E2M3 ? mx_element(code, 2, 3) : mx_element(code, 3, 2)) * e8m0(b[0]);
        }
        break;
    case Q4_K:
    case Q5_K: {
        const unsigned char* qh = b + 16;
        const unsigned char* qs = b + (f == Q5_K ? 48 : 16);
        for (int c = 0; c < 4; ++c)
            for (int half = 0; half < 2; ++half) {
                int sc, m;
                scale_min_k4(2 * c + half, b + 4, &sc, &m);
                for (int l = 0; l < 32; ++l) {
                    int q = half == 0 ? qs[32 * c + l] & 0xF : qs[32 * c + l] >> 4;
                    if (f == Q5_K && (qh[l] >> (2 * c + half) & 1)) q += 16;
                    w[64 * c + 32 * half + l] = f16_at(b) * sc * q - f16_at(b + 2) * m;
                }
            }
        break;
    }
    case Q6_K: {
        const signed char* sc = (const signed char*)(b + 192);
        const double d = f16_at(b + 208);
        for (int n = 0; n < 2; ++n)
            for (int l = 0; l < 32; ++l) {
                const unsigned char lo0 = b[64 * n + l], lo1 = b[64 * n + l + 32], hi = b[128 + 32 * n + l];
                const int is = 8 * n + l / 16;
                w[128 * n + l] = d * sc[is] * (((lo0 & 0xF) | ((hi & 3) << 4)) - 32);
                w[128 * n + l + 32] = d * sc[is + 2] * (((lo1 & 0xF) | (((hi >> 2) & 3) << 4)) - 32);
                w[128 * n + l + 64] = d * sc[is + 4] * (((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32);
                w[128 * n + l + 96] = d * sc[is + 6] * (((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32);
            }
        break;
    }
    }
    for (int j = 0; j < FMTS[f].elems; ++j) out[j] = (float)w[j];
}

// Random blocks: every byte random, then the scales: f16 ones of random size and sign (one in
// 32 zero, one in 32 subnormal), E8M0 ones over 100..154 mostly and anywhere (0xFF included) one
// in 16.
static void random_blocks(Fmt f, unsigned char* b, size_t nblocks, std::mt19937_64& rng) {
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
                               : std::ldexp(1.0f + (float)(rng() % 1024) / 1024.0f, -14 + (int)(rng() % 20));
            if (rng() & 1) v = -v;
            const uint16_t h = __half_as_ushort(__float2half(v));
            blk[at] = (unsigned char)h;
            blk[at + 1] = (unsigned char)(h >> 8);
        }
    }
}

// A heap buffer of exactly `bytes` bytes starting `offset` bytes past a 16-byte boundary, the
// rest of its allocation poisoned (AddressSanitizer), so any access outside it is an error.
static unsigned char* exact_bytes(size_t bytes, size_t offset, void** base) {
    const size_t total = (offset + bytes + 15) / 16 * 16 + 16;
    unsigned char* p = (unsigned char*)std::aligned_alloc(16, total);
    *base = p;
#ifdef EMU_ASAN
    ASAN_POISON_MEMORY_REGION(p, offset);
    ASAN_POISON_MEMORY_REGION(p + offset + bytes, total - offset - bytes);
#endif
    return p + offset;
}

static int failures = 0;
static int checks = 0;

struct DequantCase {
    Fmt fmt;
    size_t nblocks;
    int threads, grid; // grid 0: one block a tile
    size_t offset;     // of the source past 16-byte alignment
    bool quick;
};

template <typename T> static void dequant_case(const DequantCase& c, int width, std::mt19937_64& rng) {
    const FmtInfo& fi = FMTS[c.fmt];
    void* src_base;
    void* dst_base;
    unsigned char* src = exact_bytes(c.nblocks * fi.bytes, c.offset, &src_base);
    random_blocks(c.fmt, src, c.nblocks, rng);
    const size_t n = c.nblocks * fi.elems;
    T* out = (T*)exact_bytes(n * sizeof(T), 0, &dst_base);
    for (size_t i = 0; i < n; ++i) std::memset(&out[i], 0xff, sizeof(T)); // NaN in every type
    const size_t tile_blocks = RF_DEQUANT_TILE_ELEMS / fi.elems;
    const size_t tiles = (c.nblocks + tile_blocks - 1) / tile_blocks;
    const unsigned grid = (unsigned)(c.grid > 0 ? std::min<size_t>(c.grid, tiles) : tiles);
    const DequantKernel<T> kernel = DequantEntries<T>::e[c.fmt];
    emu_launch(emu_dim3{grid, 1, 1}, c.threads, width, [&] { kernel(src, out, (rf_u64)c.nblocks); });

    int bad = 0;
    float want[256];
    for (size_t blk = 0; blk < c.nblocks; ++blk) {
        decode_block(c.fmt, src + blk * fi.bytes, want);
        for (int j = 0; j < fi.elems; ++j) {
            const size_t i = blk * fi.elems + j;
            const uint32_t g = Bits<T>::got(out[i]), w = Bits<T>::of(want[j]);
            const bool both_nan = Bits<T>::nan(w) && Bits<T>::nan(g); // NaN's payload is not specified
            if (g != w && !both_nan && bad++ < 5)
                std::printf("    block %zu element %d: bits %08x, want %08x (%.9g)\n", blk, j, g, w, want[j]);
        }
    }
    std::free(src_base);
    std::free(dst_base);
    ++checks;
    if (bad) ++failures;
    std::printf("%-4s rf_dequant_%-10s %-4s w%d threads%-3d grid%-3u blocks%-4zu source+%zu -> %s\n", bad ? "FAIL" : "ok",
                fi.name, Bits<T>::name, width, c.threads, grid, c.nblocks, c.offset,
                bad ? "MISMATCH" : "match (bit for bit)");
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0xdeca);
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "quick") {
            quick = true;
        } else {
            std::fprintf(stderr, "usage: %s [quick]\n", argv[0]);
            return 2;
        }
    }
    std::vector<DequantCase> cases;
    for (Fmt f : {Q8_0, Q4_0, MXFP4, MXFP6_E2M3, MXFP6_E3M2, Q4_K, Q5_K, Q6_K}) {
        const bool k_quant = FMTS[f].elems == 256;
        const size_t tile = RF_DEQUANT_TILE_ELEMS / FMTS[f].elems;
        // {fmt, blocks, threads, grid, source offset, quick}
        cases.push_back({f, 1, 256, 0, 0, true});
        cases.push_back({f, 2 * tile + 7, 256, 2, 0, true});           // full tiles, a partial one, striding
        cases.push_back({f, tile + 3, 64, 0, 0, true});                // narrow blocks
        cases.push_back({f, k_quant ? 5u : 37u, 192, 1, 2, !k_quant}); // unaligned source (2-byte)
        cases.push_back({f, tile, 256, 1, 1, false});                  // unaligned source (odd)
    }
    for (int width : {32, 64}) {
        for (const DequantCase& c : cases) {
            if (quick && !c.quick) continue;
            dequant_case<float>(c, width, rng);
            dequant_case<__half>(c, width, rng);
            dequant_case<rf_bf16>(c, width, rng);
        }
    }
    std::printf("%s dequant (rf_dequant_* of eight block formats, wave32 and wave64): %d checks, %d failures\n",
                EMU_TARGET_NAME, checks, failures);
    if (checks == 0) {
        std::printf("no checks ran\n");
        return 1;
    }
    return failures ? 1 : 0;
}
