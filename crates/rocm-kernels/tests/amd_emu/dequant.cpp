// CPU emulation of the dequantisation kernel on its AMD code path (kernels/dequant.hip:
// rf_dequant_<fmt>_<dt>, what prefill on AMD runs before the GEMM), the emulator being simt.h:
// all eight block formats (ggml q8_0, q4_0, mxfp4; MXFP6 E2M3 and E3M2; ggml q4_K, q5_K, q6_K),
// f32/f16/bf16 outputs, the launcher's 256 threads and narrower blocks, grids that stride over
// tiles, partial tiles, and sources that are not 16-byte aligned (the byte-load staging).
//
// Every output is compared bit for bit with reference_blocks.h's decode (the formats' published
// layouts: ggml's blocks, the OCP MX element encodings), formed in f64 and rounded once to f32
// (each decode is exact in f32 or, for q4_K / q5_K, one rounding of an exact difference), then
// to the output type. Blocks are random bytes, f16 scales of random size and sign (some zero,
// some subnormal), E8M0 scales over their whole range (NaN's 0xFF included). Built with
// AddressSanitizer over exact-size buffers (run.sh): a read past the last block or a write past
// the last output is an error.

#include "simt.h"

#include "dequant.hip"
#include "reference_blocks.h"

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

struct DequantCase {
    Fmt fmt;
    size_t nblocks;
    int threads, grid; // grid 0: one block a tile
    size_t offset;     // of the source past 16-byte alignment
    bool quick;
};

template <typename T> static void dequant_case(const DequantCase& c, int width, std::mt19937_64& rng) {
    const FmtInfo& fi = FMTS[c.fmt];
    EmuBuffers mem;
    unsigned char* src = mem.exact<unsigned char>(c.nblocks * fi.bytes, c.offset);
    ref_random_blocks(c.fmt, src, c.nblocks, -14, 20, rng);
    const size_t n = c.nblocks * fi.elems;
    T* out = mem.exact<T>(n);
    for (size_t i = 0; i < n; ++i) std::memset(&out[i], 0xff, sizeof(T)); // NaN in every type
    const size_t tile_blocks = RF_DEQUANT_TILE_ELEMS / fi.elems;
    const size_t tiles = (c.nblocks + tile_blocks - 1) / tile_blocks;
    const unsigned grid = (unsigned)(c.grid > 0 ? std::min<size_t>(c.grid, tiles) : tiles);
    const DequantKernel<T> kernel = DequantEntries<T>::e[c.fmt];
    emu_launch(emu_dim3{grid, 1, 1}, c.threads, width, [&] { kernel(src, out, (rf_u64)c.nblocks); });

    int bad = 0;
    double want[256];
    for (size_t blk = 0; blk < c.nblocks; ++blk) {
        ref_decode_block(c.fmt, src + blk * fi.bytes, want, nullptr);
        for (int j = 0; j < fi.elems; ++j) {
            const size_t i = blk * fi.elems + j;
            const T expected = Io<T>::store((float)want[j]); // one rounding to f32, one to T
            const uint32_t g = emu_bits(out[i]), w = emu_bits(expected);
            // NaN's payload is not specified.
            const bool both_nan = std::isnan(Io<T>::load(expected)) && std::isnan(Io<T>::load(out[i]));
            if (g != w && !both_nan && bad++ < 5)
                std::printf("    block %zu element %d: bits %08x, want %08x (%.9g)\n", blk, j, g, w, want[j]);
        }
    }
    emu_record(bad, 0.0);
    std::printf("%-4s dequant %-10s %-4s w%d threads%-3d grid%-3u blocks%-4zu source+%zu -> %s\n", bad ? "FAIL" : "ok",
                fi.name, Io<T>::name, width, c.threads, grid, c.nblocks, c.offset,
                bad ? "MISMATCH" : "match (bit for bit)");
}

int main(int argc, char** argv) {
    std::mt19937_64 rng(0xdeca);
    const bool quick = emu_quick_arg(argc, argv);
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
    return emu_finish("dequant", "rf_dequant_* of eight block formats, bit for bit, wave32 and wave64");
}
