// Mixed-input GEMM for prefill with block-quantised weights, the Hopper warpgroup kernel
// (sm_90a only: wgmma.mma_async, rocmforge_wgmma.h). Contract and launcher:
// crates/rocm-kernels/src/quant/quant_gemm.rs; measurements: docs/kernels/quant_gemm.md.
//
//   y[t, r] = sum_k x[t, k] W[r, k]       x: [tokens, k] (T), W: rows of blocks, y: [tokens, rows]
//
// Dequantising W to T first writes and reads back the whole weight in T (117 MB at 14336 x
// 4096): at 512 tokens that costs 40% on top of the GEMM. Here the blocks travel to shared memory
// as stored and are decoded into the wgmma's A registers, so W is read once at its own size and
// never exists in T anywhere.
//
// Roles: W rows are the wgmma's M (A from registers, the mma.sync m16n8k16 A layout), tokens its
// N (B: x, K-major in shared memory, 128-byte swizzled). A block owns RF_QGEMM_ROWS = 256 rows of
// W and RF_QGEMM_TOKENS = 128 tokens. Warpgroup 0 copies (16-byte cp.async) each K stage's x tile
// and the 256 rows' bytes of the stage (the 16-byte span around the stage's blocks for the
// 32-element formats; the header and the stage's part of each super-block for the k-quants) into
// a ring of STAGES buffers. Each copying thread arrives on the stage's `full` mbarrier when its
// copies land (cp.async.mbarrier.arrive.noinc), so all STAGES stages can be in flight; the math
// warpgroups arrive on `empty` when they are done with one. Math warpgroup m owns
// rows 128 m .. 128 m + 127 as two 64-row wgmma tiles (64 x 128 f32 accumulators each). Per 64 k
// it decodes its A fragments (per 16 k and tile, each thread 4 pairs: rows g, g + 8 of its
// warp's 16, k 2 (lane % 4) and + 8), then issues the eight wgmma and waits for them; the other
// math warpgroup's products run while it decodes.
//
// Numerics: each weight is decoded in f32 exactly as kernels/dequant.hip does (rocmforge_quant.h)
// and rounded once to T; products accumulate in f32 on the tensor cores; one rounding of each y
// to T. So y equals the GEMM of x with the dequantised weight up to the order of the sums.

#include "rocmforge_quant.h"
#include "rocmforge_quant_gemm_abi.h"
#include "rocmforge_wgmma.h"

#if !RF_WGMMA && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "quant_gemm_wgmma.hip is built for sm_90a only (xtask kernels' target list)"
#endif

#if RF_WGMMA

// ---------------------------------------------------------------------------------------------
// Formats as staged. Each names KS (k a stage: a multiple of 64 and of its block), COPY (16-byte
// chunks a row a stage), ROW_BYTES (a row's room in a stage's shared memory) and `pair`: the
// f32 values of elements e, e + 1 (e even, < KS) of the stage, from the row's staged bytes `s`.
// ---------------------------------------------------------------------------------------------

// Exact small integers from bytes without a conversion instruction (a quarter-rate unit on
// sm_90): the byte under the exponent of 2^23 is 2^23 + byte as an f32.
RF_DEVICE float rf_qg_u8_plus_2p23(unsigned word, unsigned selector) {
    return __int_as_float((int)__byte_perm(word, 0x4B000000u, selector));
}

// The 32-element formats: a stage is WINDOW bytes of a row from byte (k0 / 32) * BLOCK_BYTES,
// which is 2-aligned at best. It is copied as the COPY 16-byte chunks from the 16-byte boundary
// below it (the row's `delta` = its start % 16 lies in front of it in shared memory), into
// rows of an odd number of chunks, so the 8 rows a warp reads at once sit in 8 bank groups.
template <int BLOCK_BYTES_, int KS_> struct rf_qg_blocks32 {
    static constexpr int KS = KS_, BLOCK_BYTES = BLOCK_BYTES_;
    static constexpr bool ALIGNED = false;
    static constexpr int WINDOW = KS / 32 * BLOCK_BYTES;
    static constexpr int COPY = (15 + WINDOW + 15) / 16;
    static constexpr int ROW_BYTES = 16 * (COPY | 1);
    static RF_DEVICE rf_u64 window(int k0) { return (rf_u64)(k0 / 32) * BLOCK_BYTES; }
};

struct rf_qg_q8_0 : rf_qg_blocks32<34, 64> {
    static RF_DEVICE void pair(const unsigned char* s, int e, float* v) {
        const unsigned char* b = s + (e >> 5) * 34;
        const float d = __half2float(*(const __half*)b);
        // The two i8 as biased bytes: 2^23 + 128 + q.
        const unsigned q = (unsigned)*(const unsigned short*)(b + 2 + (e & 31)) ^ 0x8080u;
        v[0] = d * (rf_qg_u8_plus_2p23(q, 0x7650) - 8388736.0f);
        v[1] = d * (rf_qg_u8_plus_2p23(q, 0x7651) - 8388736.0f);
    }
};

struct rf_qg_q4_0 : rf_qg_blocks32<18, 64> {
    static RF_DEVICE void pair(const unsigned char* s, int e, float* v) {
        const unsigned char* b = s + (e >> 5) * 18;
        const float d = __half2float(*(const __half*)b);
        const unsigned q = (unsigned)*(const unsigned short*)(b + 2 + (e & 15)) >> ((e & 16) >> 2);
        v[0] = d * (__int_as_float(0x4B000000 | (q & 15u)) - 8388616.0f);
        v[1] = d * (__int_as_float(0x4B000000 | ((q >> 8) & 15u)) - 8388616.0f);
    }
};

// 17-byte blocks: odd starts, so byte loads.
struct rf_qg_mxfp4 : rf_qg_blocks32<17, 128> {
    static RF_DEVICE void pair(const unsigned char* s, int e, float* v) {
        const unsigned char* b = s + (e >> 5) * 17;
        const float scale = rf_e8m0_to_float(b[0]);
        const int shift = (e & 16) >> 2;
        v[0] = rf_mxfp4::element((unsigned)b[1 + (e & 15)] >> shift) * scale;
        v[1] = rf_mxfp4::element((unsigned)b[2 + (e & 15)] >> shift) * scale;
    }
};

// q4_K / q5_K, 64 elements (two sub-blocks) a stage: the super-block's 16-byte header (d, dmin,
// the packed scales), q5_K's 32 bytes of fifth bits, and the stage's 32 bytes of nibbles. The
// stage is quarter k0 % 256 / 64 of its super-block; the header tells its sub-blocks' scales.
template <bool FIFTH_BIT> struct rf_qg_kquant_affine {
    static constexpr int KS = 64, COPY = FIFTH_BIT ? 5 : 3;
    static constexpr bool ALIGNED = true; // 16-byte super-blocks and pieces
    static constexpr int ROW_BYTES = 16 * COPY;
    static constexpr int BLOCK_BYTES = FIFTH_BIT ? 176 : 144;
    static constexpr int QS = FIFTH_BIT ? 48 : 16; // the nibbles, in the super-block and staged
    // Byte offset in its row of 16-byte piece p of the stage at k0.
    static RF_DEVICE rf_u64 piece(int k0, int p) {
        const rf_u64 block = (rf_u64)(k0 / 256) * BLOCK_BYTES;
        return p * 16 < QS ? block + 16 * p : block + QS + 32 * ((k0 / 64) % 4) + 16 * p - QS;
    }
    static RF_DEVICE void pair(const unsigned char* s, int e, float* v, int quarter) {
        const int sub = 2 * quarter + (e >> 5);
        unsigned sc, m;
        rf_kquant_scale_min(s + 4, sub, &sc, &m);
        const float step = __half2float(*(const __half*)s) * (float)sc;
        const float offset = __half2float(*(const __half*)(s + 2)) * (float)m;
        const int shift = (e & 32) >> 3;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            unsigned code = ((unsigned)s[QS + (e & 31) + i] >> shift) & 15u;
            if (FIFTH_BIT) code |= (((unsigned)s[16 + (e & 31) + i] >> sub) & 1u) << 4;
            v[i] = step * (float)code - offset;
        }
    }
};

// The stage's quarter of a super-block only matters to the k-quants.
template <typename F> struct rf_qg_decode {
    static RF_DEVICE void pair(const unsigned char* s, int e, float* v, int) { F::pair(s, e, v); }
};
template <bool B> struct rf_qg_decode<rf_qg_kquant_affine<B>> {
    static RF_DEVICE void pair(const unsigned char* s, int e, float* v, int quarter) {
        rf_qg_kquant_affine<B>::pair(s, e, v, quarter);
    }
};

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------

template <typename F, int STAGES> struct rf_qgemm_layout {
    static constexpr int X_BYTES = RF_QGEMM_TOKENS * F::KS * 2; // KS / 64 swizzled column blocks
    static constexpr int W_BYTES = RF_QGEMM_ROWS * F::ROW_BYTES;
    // Dynamic shared memory: the 1024-byte alignment slack, then the x ring, then the W ring.
    static constexpr int SMEM = 1024 + STAGES * (X_BYTES + W_BYTES);
};

template <typename T, typename F, int STAGES, int COPY_REGS, int MATH_REGS>
RF_DEVICE void rf_qgemm_wgmma(const rf_qgemm_params& p) {
    typedef rf_qgemm_layout<F, STAGES> L;
    constexpr int MATH_ROWS = RF_QGEMM_ROWS / RF_QGEMM_MATH_WGS; // 128: two 64-row tiles
    constexpr int KK = F::KS / 16;
    static_assert(MATH_ROWS == 128 && KK % 4 == 0, "two 64-row tiles a math warpgroup; chunks of 64 k");
    static_assert(STAGES >= 3, "the copying warps keep two stages in flight");
    static_assert(128 * (COPY_REGS + RF_QGEMM_MATH_WGS * MATH_REGS) <= 65536, "setmaxnreg within the SM's registers");
    extern __shared__ __align__(1024) unsigned char rf_qgemm_smem[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    unsigned char* xs = rf_qgemm_smem + ((1024u - (rf_smem_addr(rf_qgemm_smem) & 1023u)) & 1023u);
    unsigned char* ws = xs + STAGES * L::X_BYTES;

    const int wg = threadIdx.x / 128;
    const int t0 = blockIdx.x * RF_QGEMM_TOKENS;
    const int r0 = blockIdx.y * RF_QGEMM_ROWS;
    const int stages = p.k / F::KS;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int st = 0; st < STAGES; ++st) {
            rf_mbar_init(&full[st], 128);
            rf_mbar_init(&empty[st], 128 * RF_QGEMM_MATH_WGS);
        }
    }
    __syncthreads();

    if (wg == 0) {
        rf_setmaxnreg_dec<COPY_REGS>();
        const int tid = threadIdx.x;
        const T* x = (const T*)p.x;
        const rf_u64 w_bytes = (rf_u64)p.rows * p.w_row_bytes;
        for (int s = 0; s < stages; ++s) {
            const int st = s % STAGES;
            rf_mbar_wait(&empty[st], ((s / STAGES) & 1) ^ 1);
            const int k0 = s * F::KS;
            // x: 128 token rows of KS elements, 16-byte chunks, zero past the last token. Each
            // thread keeps one chunk column and steps down the rows (few registers: this
            // warpgroup has given most of its own to the math warpgroups).
            constexpr int CHUNKS = F::KS / 8, RSTEP = 128 / CHUNKS;
            const int c = tid % CHUNKS;
#pragma unroll 2
            for (int r = tid / CHUNKS; r < RF_QGEMM_TOKENS; r += RSTEP) {
                const bool ok = t0 + r < p.tokens;
                const T* src = ok ? x + (rf_u64)(t0 + r) * p.x_ld + k0 + 8 * c : x;
                rf_cp_async16(xs + st * L::X_BYTES + rf_sw128_offset<RF_QGEMM_TOKENS>(r, c), src, ok ? 16 : 0);
            }
            // W: COPY 16-byte chunks of each of the 256 rows, zero past the last row (and past
            // the weight's end: a row's last chunks may reach into the next row).
            unsigned char* wst = ws + st * L::W_BYTES;
            for (int idx = tid; idx < RF_QGEMM_ROWS * F::COPY; idx += 128) {
                const int r = idx / F::COPY, c = idx % F::COPY;
                const rf_u64 row = (rf_u64)(r0 + r) * p.w_row_bytes;
                rf_u64 off;
                int bytes = r0 + r < p.rows ? 16 : 0;
                if constexpr (F::ALIGNED) {
                    off = row + F::piece(k0, c);
                } else {
                    off = ((row + F::window(k0)) & ~(rf_u64)15) + 16 * c;
                    bytes = off < w_bytes ? (w_bytes - off < (rf_u64)bytes ? (int)(w_bytes - off) : bytes) : 0;
                }
                rf_cp_async16(wst + r * F::ROW_BYTES + 16 * c, bytes ? p.w + off : p.w, bytes);
            }
            // The stage's buffers fill behind this thread's back: it arrives on `full` once
            // its copies have landed, and goes on to the next stage.
            rf_cp_async_mbar_arrive(&full[st]);
        }
        rf_cp_async_commit();
        rf_cp_async_wait<0>();
        return;
    }

    rf_setmaxnreg_inc<MATH_REGS>();
    const int lane = threadIdx.x % 32;
    const int warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, q = lane % 4;
    const int wrow = (wg - 1) * MATH_ROWS + 16 * warp + g; // row g of the warp's 16 (tile 0)
    float d[2][16][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 16; ++j) d[i][j][0] = d[i][j][1] = d[i][j][2] = d[i][j][3] = 0.0f;
    unsigned a[4][2][4]; // [k step of the chunk][64-row tile][register]

    // Fragments of k step kk (16 k) of the stage in `wst`: tile i, rows wrow + 64 i (+ 8).
    // A row's staged bytes start `delta` into its room (the 32-element formats' window is not
    // 16-byte aligned): (row * w_row_bytes + window) % 16, in 32 bits.
    auto staged = [&](const unsigned char* wst, int local, int k0) -> const unsigned char* {
        const unsigned char* room = wst + local * F::ROW_BYTES;
        if constexpr (F::ALIGNED) {
            return room;
        } else {
            const unsigned row_mod = (unsigned)(r0 + local) % 16u * (unsigned)(p.w_row_bytes % 16u);
            return room + ((row_mod + (unsigned)(F::window(k0) % 16u)) & 15u);
        }
    };
    auto decode = [&](unsigned (&frag)[2][4], const unsigned char* wst, int kk, int quarter, int k0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const unsigned char* row0 = staged(wst, wrow + 64 * i, k0);
            const unsigned char* row1 = staged(wst, wrow + 64 * i + 8, k0);
            float v[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int e = 16 * kk + 8 * h + 2 * q;
                rf_qg_decode<F>::pair(row0, e, v, quarter);
                frag[i][2 * h] = rf_pack2_bits16<T>(v[0], v[1]);
                rf_qg_decode<F>::pair(row1, e, v, quarter);
                frag[i][2 * h + 1] = rf_pack2_bits16<T>(v[0], v[1]);
            }
        }
    };

    // Chunks of 64 k: decode the chunk's four steps, then issue their eight wgmma and wait for
    // them. A warpgroup decodes only while none of its wgmma runs (ptxas serialises every wgmma
    // of a kernel that writes wgmma input registers while one is in flight, C7513); the other
    // math warpgroup's products keep the tensor cores busy meanwhile.
    for (int s = 0; s < stages; ++s) {
        const int st = s % STAGES;
        rf_mbar_wait(&full[st], (s / STAGES) & 1);
        rf_fence_proxy_async(); // the copies (generic proxy) before the wgmma reads x (async proxy)
        const unsigned char* wst = ws + st * L::W_BYTES;
        const unsigned x_addr = rf_smem_addr(xs + st * L::X_BYTES);
        const int quarter = (s * F::KS / 64) % 4;
#pragma unroll
        for (int c = 0; c < KK / 4; ++c) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) decode(a[kk], wst, 4 * c + kk, quarter, s * F::KS);
            rf_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                // Token rows are 128 bytes (64 k) a column block: step kk of chunk c is bytes
                // 32 kk of column block c (the hardware applies the swizzle to the full address).
                const rf_u64 b = rf_wgmma_desc(x_addr + c * RF_QGEMM_TOKENS * 128 + kk * 32, 16, 1024);
                rf_wgmma<T, 128>::rs_kmajor(d[0], a[kk][0], b, 1);
                rf_wgmma<T, 128>::rs_kmajor(d[1], a[kk][1], b, 1);
            }
            rf_wgmma_commit();
            rf_wgmma_wait<0>();
            rf_wgmma_reg_fence(d[0]);
            rf_wgmma_reg_fence(d[1]);
        }
        // The stage's wgmma and decodes are done: its buffers go back to the copying warps.
        rf_mbar_arrive(&empty[st]);
    }

    // d[i][j]: rows wrow + 64 i (+ 8 for [2], [3]), tokens t0 + 8 j + 2 q (+ 1 for [1], [3]).
    T* y = (T*)p.y;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = r0 + wrow + 64 * i + 8 * h;
            if (r >= p.rows) continue;
#pragma unroll
            for (int j = 0; j < 16; ++j) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int t = t0 + 8 * j + 2 * q + c;
                    if (t < p.tokens) y[(rf_u64)t * p.y_ld + r] = rf_from_float<T>(d[i][j][2 * h + c]);
                }
            }
        }
    }
}

// Entry points rf_qgemm_wgmma_<format>_<T>, one block an SM, with the shape the ABI header
// gives the launcher (rocmforge_quant_gemm_abi.h: STAGES buffers as fit in ~200 KiB).
// Registers: 56 a copying thread (fewer spill), 224 a math thread (accumulators 128, a chunk's
// fragments 32).
#define RF_QGEMM_ENTRY(T, TNAME, F, FNAME, STAGES)                                                               \
    RF_KERNEL void __launch_bounds__(RF_QGEMM_THREADS, 1) rf_qgemm_wgmma_##FNAME##_##TNAME(rf_qgemm_params p) { \
        rf_qgemm_wgmma<T, F, STAGES, 56, 224>(p);                                                                \
    }
#define RF_QGEMM_ENTRIES(F, FNAME, NAME)                                                                      \
    static_assert(F::KS == RF_QGEMM_##NAME##_KS && F::ROW_BYTES == RF_QGEMM_##NAME##_ROW_BYTES, "ABI shape"); \
    RF_QGEMM_ENTRY(__half, f16, F, FNAME, RF_QGEMM_##NAME##_STAGES)                                          \
    RF_QGEMM_ENTRY(rf_bf16, bf16, F, FNAME, RF_QGEMM_##NAME##_STAGES)
RF_QGEMM_ENTRIES(rf_qg_q8_0, q8_0, Q8_0)
RF_QGEMM_ENTRIES(rf_qg_q4_0, q4_0, Q4_0)
RF_QGEMM_ENTRIES(rf_qg_mxfp4, mxfp4, MXFP4)
RF_QGEMM_ENTRIES(rf_qg_kquant_affine<false>, q4_k, Q4_K)
RF_QGEMM_ENTRIES(rf_qg_kquant_affine<true>, q5_k, Q5_K)

#endif // RF_WGMMA
