// Dequantisation of block-quantised weights to f32, f16 or bf16: ggml q8_0, q4_0 and mxfp4
// (GGUF type 39), and packed MXFP6 (E2M3, E3M2). Formats and layouts: rocmforge_quant.h.
//
//   rf_dequant_<fmt>_<dt>(const unsigned char* blocks, T* out, u64 nblocks)
//   out[32 b + j] = element j of block b, for b < nblocks.
//
// Speed: bound by the output writes (a 4-bit weight becomes 2 or 4 bytes). One thread per group
// of 8 consecutive outputs (a quarter block), so a warp writes a contiguous run (16-byte stores
// (one 16-byte store for f16/bf16, two for f32), and reads the few bytes of its
// group with byte loads: neighbouring threads share blocks, so those come from L1. Grid-stride
// over groups. The launcher checks that `out` is 16-byte aligned and holds 32 * nblocks elements.

#include "rocmforge_quant.h"

// `out` is 16-byte aligned (the launcher checks; device allocations are): group g's 8 outputs
// start 8 g elements in, so each group is one or two whole 16-byte vectors.
template <typename F, typename T>
RF_DEVICE void rf_dequant(const unsigned char* blocks, T* out, rf_u64 nblocks) {
    constexpr int N = rf_pack16<T>::N;
    RF_GRID_STRIDE_LOOP(g, nblocks * 4) {
        const rf_u64 b = g >> 2;
        const int p = (int)(g & 3);
        float v[8];
        F::group(blocks + b * (rf_u64)F::BLOCK_BYTES, p, v);
        T* o = out + g * 8;
#pragma unroll
        for (int i = 0; i < 8; i += N) {
            rf_store16(o + i, rf_pack16<T>::pack(v + i));
        }
    }
}

#define RF_DEQUANT_ENTRY(fmt, F, suffix, T)                                                               \
    RF_KERNEL void rf_dequant_##fmt##_##suffix(const unsigned char* blocks, T* out, rf_u64 nblocks) { \
        rf_dequant<F, T>(blocks, out, nblocks);                                                        \
    }

#define RF_DEQUANT_Q8_0(suffix, T) RF_DEQUANT_ENTRY(q8_0, rf_q8_0, suffix, T)
#define RF_DEQUANT_Q4_0(suffix, T) RF_DEQUANT_ENTRY(q4_0, rf_q4_0, suffix, T)
#define RF_DEQUANT_MXFP4(suffix, T) RF_DEQUANT_ENTRY(mxfp4, rf_mxfp4, suffix, T)
#define RF_DEQUANT_MXFP6_E2M3(suffix, T) RF_DEQUANT_ENTRY(mxfp6_e2m3, rf_mxfp6_e2m3, suffix, T)
#define RF_DEQUANT_MXFP6_E3M2(suffix, T) RF_DEQUANT_ENTRY(mxfp6_e3m2, rf_mxfp6_e3m2, suffix, T)

RF_FOR_EACH_DTYPE(RF_DEQUANT_Q8_0)
RF_FOR_EACH_DTYPE(RF_DEQUANT_Q4_0)
RF_FOR_EACH_DTYPE(RF_DEQUANT_MXFP4)
RF_FOR_EACH_DTYPE(RF_DEQUANT_MXFP6_E2M3)
RF_FOR_EACH_DTYPE(RF_DEQUANT_MXFP6_E3M2)
