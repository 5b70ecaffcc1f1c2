// Flash attention, the AMD CDNA matrix-core kernel (contract and the other implementations:
// include/rocmforge_flash.h), built for the AMD targets with MFMA only.
//
// MFMA: gfx908, gfx90a, gfx940-942, gfx950. W wavefronts of 64 lanes, 16 packed rows each (16 * W
// a block), RF_FLASH_MFMA_KEYS (32) keys a tile. K and V tiles are staged in LDS as T (rows padded
// by 16 bytes, zero past the keys and past head_dim); Q stays in registers.
//
// v_mfma_f32_16x16x16{f16,bf16_1k} computes D (16 x 16, f32) += A (16 x 16) B (16 x 16). Operand
// layout (AMD's CDNA3 ISA guide, the ROCm blog "Matrix Core Programming on AMD CDNA3 and CDNA4",
// the AMD matrix instruction calculator): lane l holds A[l % 16][4 (l / 16) + i] and
// B[4 (l / 16) + i][l % 16] for i = 0..3 (four 16-bit values, element i in bits 16i..16i+15 of
// the 64-bit operand), and D[4 (l / 16) + i][l % 16] in its four f32 accumulators.
//
// The kernel computes the transposes, S^T = K Q^T and O^T = V^T P^T, so that every lane owns one
// row (l % 16) of its wavefront's 16, for all of S^T, P^T and O^T:
//   - S^T (16 keys x 16 rows) a step: A = K rows from LDS (8 contiguous bytes a lane), B = Q^T,
//     whose lane fragment is 4 contiguous elements of the lane's own Q row (registers);
//   - S^T's accumulator (keys 4 (l / 16) + i of row l % 16) is, rounded to T, exactly the B
//     operand of O^T = V^T P^T for that 16-key step: P never leaves the registers;
//   - A of O^T = V^T: four V rows at one column (four 2-byte LDS reads a lane);
//   - O^T's accumulator holds columns 16 dt + 4 (l / 16) + i of row l % 16.
// The row's max and sum are over the 4 lanes l % 16 + 16 j (shuffles by 16 and 32), and the
// online softmax rescales a lane's accumulators by one factor.

#include "rocmforge_flash.h"

#if RF_PLATFORM_AMD && (defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || \
                        defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__))
#define RF_FLASH_MFMA 1
#else
#define RF_FLASH_MFMA 0
#endif

#if !RF_FLASH_MFMA && (defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__))
#error "flash_mfma.hip is built for the AMD targets with MFMA only (xtask kernels' target list)"
#endif

#if RF_FLASH_MFMA

typedef float rf_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 rf_f16x4 __attribute__((ext_vector_type(4)));
typedef short rf_i16x4 __attribute__((ext_vector_type(4)));
typedef short rf_i16x2 __attribute__((ext_vector_type(2)));

// D += A B for one 16x16x16 step; a and b are a lane's four 16-bit values (element i in bits
// 16i.. of the pair).
template <typename T> struct rf_mfma;
template <> struct rf_mfma<__half> {
    static RF_DEVICE rf_f32x4 run(rf_f32x4 c, uint2 a, uint2 b) {
        rf_f16x4 av, bv;
        __builtin_memcpy(&av, &a, sizeof(av));
        __builtin_memcpy(&bv, &b, sizeof(bv));
        return __builtin_amdgcn_mfma_f32_16x16x16f16(av, bv, c, 0, 0, 0);
    }
};
template <> struct rf_mfma<rf_bf16> {
    static RF_DEVICE rf_f32x4 run(rf_f32x4 c, uint2 a, uint2 b) {
#if defined(__gfx908__)
        // gfx908 has no bf16_1k: two 16x16x8 steps (lane l: k = 2 (l / 16) + 0, 1), each taking
        // two of the lane's four values. The sum over k does not depend on which k a value is
        // labelled with as long as A and B agree, so this is the same product.
        rf_i16x2 a0, a1, b0, b1;
        __builtin_memcpy(&a0, &a.x, sizeof(a0));
        __builtin_memcpy(&a1, &a.y, sizeof(a1));
        __builtin_memcpy(&b0, &b.x, sizeof(b0));
        __builtin_memcpy(&b1, &b.y, sizeof(b1));
        c = __builtin_amdgcn_mfma_f32_16x16x8bf16(a0, b0, c, 0, 0, 0);
        return __builtin_amdgcn_mfma_f32_16x16x8bf16(a1, b1, c, 0, 0, 0);
#else
        rf_i16x4 av, bv;
        __builtin_memcpy(&av, &a, sizeof(av));
        __builtin_memcpy(&bv, &b, sizeof(bv));
        return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, c, 0, 0, 0);
#endif
    }
};

// W wavefronts; DT the padded head_dim (a multiple of 16); PAGED: K and V through block tables.
template <typename T, int DT, int W, bool PAGED>
RF_DEVICE void rf_flash_mfma(const rf_flash_params& args) {
    const rf_flash_params p = PAGED ? rf_flash_for_batch(args, blockIdx.z) : args;
    constexpr int BC = RF_FLASH_MFMA_KEYS;
    constexpr int ROWS = 16 * W;       // packed rows of the block
    constexpr int THREADS = 64 * W;
    constexpr int LD = DT + 8;         // padded LDS row (elements): 16-byte aligned rows
    constexpr int KSTEPS = DT / 16;    // k-steps of S^T = K Q^T
    constexpr int NT = BC / 16;        // 16-key steps of a tile
    constexpr int DTILES = DT / 16;    // 16-column tiles of O
    constexpr int CHUNKS = DT / 8;     // 16-byte chunks of a staged row
    static_assert(DT % 16 == 0 && BC % 16 == 0, "tile shape");
    extern __shared__ __align__(16) unsigned char rf_flash_mfma_smem[];
    T* ks = (T*)rf_flash_mfma_smem; // [BC][LD]
    T* vs = ks + BC * LD;           // [BC][LD]

    const int D = p.head_dim;
    const int wave = threadIdx.x / 64;
    const int lane = threadIdx.x % 64;
    const int r16 = lane % 16; // the lane's row among its wavefront's 16
    const int quad = lane / 16; // its k group: elements 4 quad .. 4 quad + 3 of each 16
    const int b = blockIdx.z;
    const int kv_head = blockIdx.y % p.kv_heads;
    const int split = blockIdx.y / p.kv_heads;
    // Causal blocks with more rows do more work: start those first.
    const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = tile * ROWS;

    long long k_begin, k_end;
    rf_flash_key_range(p, m0 + ROWS - 1, kv_head, split, &k_begin, &k_end);
    const rf_flash_row row = rf_flash_locate(p, m0 + wave * 16 + r16, kv_head);
    // Wavefront-uniform: a wavefront whose first row is past the end has no valid row.
    const bool wave_idle = !rf_flash_locate(p, m0 + wave * 16, kv_head).valid;

    // The lane's Q fragments: columns 16 kk + 4 quad .. + 3 of its row (8-byte loads: the
    // launcher checked 16-byte pointers and strides and head_dim in multiples of 8 elements).
    uint2 qf[KSTEPS];
    {
        const T* q = (const T*)p.q + (rf_u64)b * p.q_batch + (rf_u64)row.query * p.q_seq + (rf_u64)row.head * p.q_head;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            const int col = kk * 16 + 4 * quad;
            qf[kk] = row.valid && col < D ? *(const uint2*)(q + col) : make_uint2(0u, 0u);
        }
    }
    const T* kbase = (const T*)p.k + (rf_u64)b * p.k_batch + (rf_u64)kv_head * p.k_head;
    const T* vbase = (const T*)p.v + (rf_u64)b * p.v_batch + (rf_u64)kv_head * p.v_head;

    rf_f32x4 o[DTILES];
#pragma unroll
    for (int i = 0; i < DTILES; ++i) o[i] = rf_f32x4{0.0f, 0.0f, 0.0f, 0.0f};
    float m_run = -INFINITY, l_run = 0.0f;
    const float sl2 = p.scale_log2;

    for (long long k0 = k_begin; k0 < k_end; k0 += BC) {
        __syncthreads(); // every wavefront is done with the previous tile
        // Stage keys k0 .. k0 + BC of K and V, 16 bytes a copy, zeros past the keys, past
        // head_dim and (paged) for a block id outside the cache.
        for (int e = threadIdx.x; e < BC * CHUNKS; e += THREADS) {
            const int r = e / CHUNKS, c = e % CHUNKS;
            const long long key = k0 + r;
            uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = make_uint4(0u, 0u, 0u, 0u);
            if (key < k_end && c * 8 < D) {
                long long slot = key;
                if constexpr (PAGED) slot = rf_flash_slot(p, b, (int)key);
                if (slot >= 0) {
                    kv = rf_load16(kbase + (rf_u64)slot * p.k_seq + c * 8);
                    vv = rf_load16(vbase + (rf_u64)slot * p.v_seq + c * 8);
                }
            }
            rf_store16(ks + r * LD + c * 8, kv);
            rf_store16(vs + r * LD + c * 8, vv);
        }
        __syncthreads();
        if (wave_idle) continue;

        // S^T = K Q^T: s[n][i] = score of key k0 + 16 n + 4 quad + i for the lane's row.
        rf_f32x4 s[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            s[n] = rf_f32x4{0.0f, 0.0f, 0.0f, 0.0f};
            const T* krow = ks + (n * 16 + r16) * LD + 4 * quad;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) s[n] = rf_mfma<T>::run(s[n], *(const uint2*)(krow + kk * 16), qf[kk]);
        }
        // Mask keys the row may not see and keys past the range; the scale (> 0, checked by
        // the launcher) is applied inside the exponent: max(scale * s) = scale * max(s).
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const long long key = k0 + n * 16 + 4 * quad + i;
                const float v = key <= row.last_key && key < k_end ? s[n][i] : -INFINITY;
                s[n][i] = v;
                mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, rf_shfl_xor(mx, 16));
        mx = fmaxf(mx, rf_shfl_xor(mx, 32));
        const float m_new = fmaxf(m_run, mx * sl2);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; // a row that has seen nothing yet
        const float alpha = exp2f(m_run - m_use);
        float sum = 0.0f;
        uint2 pf[NT]; // P^T rounded to T: the B operand of O^T += V^T P^T
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            float e[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                e[i] = exp2f(fmaf(s[n][i], sl2, -m_use));
                sum += e[i];
            }
            pf[n] = make_uint2(rf_pack2_bits16<T>(e[0], e[1]), rf_pack2_bits16<T>(e[2], e[3]));
        }
        // Per-lane partial sums: the row's four lanes are added once, at the end.
        l_run = l_run * alpha + sum;
        m_run = m_new;
#pragma unroll
        for (int dt = 0; dt < DTILES; ++dt) o[dt] *= alpha;
        // O^T += V^T P^T: A = V^T, lane l: column 16 dt + r16 of keys 16 n + 4 quad + j.
        const unsigned short* vt = (const unsigned short*)vs;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const unsigned short* vcol = vt + (n * 16 + 4 * quad) * LD + r16;
#pragma unroll
            for (int dt = 0; dt < DTILES; ++dt) {
                const unsigned short* v = vcol + dt * 16;
                const uint2 a = make_uint2((unsigned)v[0] | ((unsigned)v[LD] << 16),
                                           (unsigned)v[2 * LD] | ((unsigned)v[3 * LD] << 16));
                o[dt] = rf_mfma<T>::run(o[dt], a, pf[n]);
            }
        }
    }

    l_run += rf_shfl_xor(l_run, 16);
    l_run += rf_shfl_xor(l_run, 32);
    if (!row.valid) return;
    const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
#pragma unroll
    for (int dt = 0; dt < DTILES; ++dt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int col = dt * 16 + 4 * quad + i;
            if (col < D) rf_flash_store<T>(p, b, row, split, col, o[dt][i] * inv);
        }
    }
    if (quad == 0) rf_flash_store_lse(p, b, row, split, m_run, l_run);
}

#endif // RF_FLASH_MFMA

#if RF_FLASH_MFMA
#define RF_FLASH_MFMA_BODY(T, DT, W, PG) rf_flash_mfma<T, DT, W, PG>(p);
#else
// A host pass (hipcc's, or the CPU emulation's build for a target without MFMA): declarations
// only.
#define RF_FLASH_MFMA_BODY(T, DT, W, PG)
#endif

#define RF_FLASH_MFMA_ENTRY(T, DT, W, PG, NAME) \
    RF_KERNEL void __launch_bounds__(64 * W) NAME(rf_flash_params p) { RF_FLASH_MFMA_BODY(T, DT, W, PG) }

// Variants (the launcher's `mfma_plan`): _w4, four wavefronts and 64 rows a block; _w1, one
// wavefront and 16 rows (decode: up to 16 packed rows); _paged: K/V from a paged cache.
#define RF_FLASH_MFMA_DIM(suffix, T, DT)                                                        \
    RF_FLASH_MFMA_ENTRY(T, DT, 4, false, rf_flash_mfma_##suffix##_d##DT##_w4)                   \
    RF_FLASH_MFMA_ENTRY(T, DT, 1, false, rf_flash_mfma_##suffix##_d##DT##_w1)                   \
    RF_FLASH_MFMA_ENTRY(T, DT, 4, true, rf_flash_mfma_##suffix##_d##DT##_w4_paged)              \
    RF_FLASH_MFMA_ENTRY(T, DT, 1, true, rf_flash_mfma_##suffix##_d##DT##_w1_paged)
#define RF_FLASH_MFMA_ENTRIES(suffix, T)                                                        \
    RF_FLASH_MFMA_DIM(suffix, T, 64)                                                            \
    RF_FLASH_MFMA_DIM(suffix, T, 80)                                                            \
    RF_FLASH_MFMA_DIM(suffix, T, 96)                                                            \
    RF_FLASH_MFMA_DIM(suffix, T, 128)                                                           \
    RF_FLASH_MFMA_DIM(suffix, T, 256)

RF_FLASH_MFMA_ENTRIES(f16, __half)
RF_FLASH_MFMA_ENTRIES(bf16, rf_bf16)
