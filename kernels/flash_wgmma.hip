// Flash attention, the Hopper warpgroup kernel (contract and the other implementations:
// include/rocmforge_flash.h), built for sm_90a only (wgmma.mma_async, rocmforge_wgmma.h; the
// launcher takes the mma.sync kernel where this module or the device's warpgroup MMA is absent).
//
// prefill at
// head_dim 64 and 128. Warpgroup 0 copies Q, then K and V tiles (cp.async); the MATH_WGS
// warpgroups after it compute, 64 packed rows each (64 MATH_WGS rows a block). Q and STAGES K/V
// buffers sit in shared memory in the 128-byte swizzled layout, as DT / 64 column blocks of
// 128-byte rows. Per key tile, each math warpgroup runs
//   S (64 x BC) = Q K^T: DT / 16 wgmma with both operands in shared memory (K-major: Q and K rows
//     are along head_dim);
//   the online softmax on S's accumulators (rf_flash_softmax_tile: the mma.sync fragment layout);
//   O (64 x DT) += P V: BC / 16 wgmma with P from registers (converted to T, the A layout) and V
//     N-major in shared memory (its rows are along head_dim, which is O's N).
// A tile's Q K^T is issued together with the previous tile's P V, so the softmax of one runs
// while the other is on the tensor cores. Where the mma.sync kernel issues one m16n8k16 per
// 16 x 8 x 16 product and feeds it with ldmatrix, a wgmma reads its operands from shared memory
// itself and covers 64 x N x 16; and no math warp spends issue slots on copies.

#include "rocmforge_flash_mma.h"
#include "rocmforge_wgmma.h"

#if !RF_WGMMA && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "flash_wgmma.hip is built for sm_90a only (xtask kernels' target list)"
#endif

#if RF_WGMMA

// Stages ROWS rows of D elements (zero past D, up to DT, and in rows `row_ptr` gives null for)
// into a swizzled tile. `any` is a valid global address for the zero-fill copies.
template <typename T, int DT, int ROWS, int THREADS, typename RowPtr>
RF_DEVICE void rf_flash_stage_sw128(unsigned char* smem, int D, const void* any, RowPtr row_ptr) {
    constexpr int CHUNKS = DT / 8;
    static_assert(THREADS % CHUNKS == 0 && ROWS % (THREADS / CHUNKS) == 0, "even chunks");
    // Each thread keeps one column chunk and steps down the rows.
    constexpr int RSTEP = THREADS / CHUNKS;
    const int tid = threadIdx.x % THREADS;
    const int c = tid % CHUNKS;
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i) {
        const int r = tid / CHUNKS + i * RSTEP;
        const T* src = c * 8 < D ? row_ptr(r) : nullptr;
        rf_cp_async16(smem + rf_sw128_offset<ROWS>(r, c), src ? (const void*)(src + c * 8) : any, src ? 16 : 0);
    }
}

// The buffers hand over through mbarriers, two a buffer: `full` (the 128 copying threads arrive
// once their copies of the tile have landed and been fenced for the async proxy) and `empty`
// (the math threads, 128 a warpgroup, arrive once the tile's P V is done). There is no block
// barrier in the loop, so the math warpgroups drift apart and one's softmax runs under another's
// products.
// The copying warps keep two tiles in flight; the math warps hold tile t's K and tile t - 1's V,
// so STAGES >= 3 (and 4 lets the copies run a tile further ahead).
template <typename T, int DT, int BC, int STAGES, int MATH_WGS, int COPY_REGS, int MATH_REGS>
RF_DEVICE void rf_flash_wgmma(const rf_flash_params& p) {
    constexpr int ROWS = 64 * MATH_WGS;
    constexpr int NT = BC / 8;
    constexpr int DTILES = DT / 8;
    constexpr unsigned Q_BYTES = ROWS * DT * 2, KV_BYTES = BC * DT * 2;
    static_assert(DT % 64 == 0 && BC % 64 == 0 && STAGES >= 3, "swizzle atoms; the producer keeps two tiles in flight");
    static_assert(128 * (COPY_REGS + MATH_WGS * MATH_REGS) <= 65536, "setmaxnreg within the SM's registers");
    extern __shared__ __align__(1024) unsigned char rf_flash_wgmma_smem[];
    __shared__ unsigned long long full[STAGES], empty[STAGES], q_full;
    unsigned char* qs = rf_flash_wgmma_smem + ((1024u - (rf_smem_addr(rf_flash_wgmma_smem) & 1023u)) & 1023u);
    unsigned char* ks = qs + Q_BYTES;               // [STAGES][KV_BYTES]
    unsigned char* vs = ks + STAGES * KV_BYTES;     // [STAGES][KV_BYTES]

    const int D = p.head_dim;
    const int wg = threadIdx.x / 128;
    const int b = blockIdx.z;
    const int kv_head = blockIdx.y % p.kv_heads;
    const int split = blockIdx.y / p.kv_heads;
    const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = tile * ROWS;
    long long k_begin, k_end;
    rf_flash_key_range(p, m0 + ROWS - 1, kv_head, split, &k_begin, &k_end);
    const int tiles = k_end > k_begin ? (int)((k_end - k_begin + BC - 1) / BC) : 0;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int st = 0; st < STAGES; ++st) {
            rf_mbar_init(&full[st], 128);
            rf_mbar_init(&empty[st], 128 * MATH_WGS);
        }
        rf_mbar_init(&q_full, 128);
    }
    __syncthreads(); // the barriers' initialisation, for everyone

    if (wg == 0) {
        // The copying warps need few registers: hand the rest to the math warpgroups. The
        // warpgroup-wide setmaxnreg is also what lets ptxas see the math warps' wgmma as
        // convergent after this divergent branch: without it they are serialised (C7520, which
        // `cargo xtask kernels` refuses; docs/kernels/attention.md has the cost).
        rf_setmaxnreg_dec<COPY_REGS>();
        const T* kbase = (const T*)p.k + (rf_u64)b * p.k_batch + (rf_u64)kv_head * p.k_head;
        const T* vbase = (const T*)p.v + (rf_u64)b * p.v_batch + (rf_u64)kv_head * p.v_head;
        // Copy groups in order: Q, tile 0, tile 1, ...; each is handed over once the next is
        // issued, so two are in flight (Q's latency overlaps tile 0's).
        rf_flash_stage_sw128<T, DT, ROWS, 128>(qs, D, p.q, [&](int r) -> const T* {
            const rf_flash_row qr = rf_flash_locate(p, m0 + r, kv_head);
            if (!qr.valid) return nullptr;
            return (const T*)p.q + (rf_u64)b * p.q_batch + (rf_u64)qr.query * p.q_seq + (rf_u64)qr.head * p.q_head;
        });
        rf_cp_async_commit();
        for (int t = 0; t < tiles; ++t) {
            const int st = t % STAGES;
            rf_mbar_wait(&empty[st], ((t / STAGES) & 1) ^ 1);
            const long long k0 = k_begin + (long long)t * BC;
            const int valid = k_end - k0 < BC ? (int)(k_end - k0) : BC;
            const T* kt = kbase + (rf_u64)k0 * p.k_seq;
            const T* vt = vbase + (rf_u64)k0 * p.v_seq;
            rf_flash_stage_sw128<T, DT, BC, 128>(ks + st * KV_BYTES, D, p.k, [&](int r) -> const T* {
                return r < valid ? kt + (rf_u64)r * p.k_seq : nullptr;
            });
            rf_flash_stage_sw128<T, DT, BC, 128>(vs + st * KV_BYTES, D, p.v, [&](int r) -> const T* {
                return r < valid ? vt + (rf_u64)r * p.v_seq : nullptr;
            });
            rf_cp_async_commit();
            // The group before this tile's (Q, or tile t - 1) has landed: hand it over.
            rf_cp_async_wait<1>();
            rf_fence_proxy_async();
            rf_mbar_arrive(t == 0 ? &q_full : &full[(t - 1) % STAGES]);
        }
        rf_cp_async_wait<0>();
        rf_fence_proxy_async();
        rf_mbar_arrive(tiles > 0 ? &full[(tiles - 1) % STAGES] : &q_full);
        return;
    }

    rf_setmaxnreg_inc<MATH_REGS>();
    const int warp = threadIdx.x / 32 - 4;
    const int wrow = 64 * (warp / 4) + 16 * (warp % 4); // the warp's first row in the block
    const long long all_see = rf_flash_locate(p, m0, kv_head).last_key + 1;
    float o[1][DTILES][4];
#pragma unroll
    for (int i = 0; i < DTILES; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.0f;
    float m_run[1][2] = {{-INFINITY, -INFINITY}}, l_run[1][2] = {{0.0f, 0.0f}};
    unsigned pf[BC / 16][4]; // P of the previous tile, T pairs in the A layout
    // This warpgroup's 64 Q rows.
    const unsigned q_addr = rf_smem_addr(qs) + (warp / 4) * 64 * 128;
    // O += P V for the tile in buffer `st`: step kk takes keys 16 kk .. 16 kk + 15, V's rows
    // 16 kk.. (2048 bytes a step); V's column blocks (two at head_dim 128, one at 64) are
    // BC * 128 bytes apart.
    auto issue_pv = [&](int st) {
        const unsigned v_addr = rf_smem_addr(vs + st * KV_BYTES);
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            rf_wgmma<T, DT>::rs(o[0], pf[kk], rf_wgmma_desc(v_addr + kk * 2048, BC * 128, 1024), 1);
        }
    };
    rf_mbar_wait(&q_full, 0);
    // Every math warp runs the same number of tiles (a block-wide count): with a count that
    // differs between warpgroups (say, the first group stopping a causal tile early) ptxas
    // can no longer prove the wgmma convergent and serialises them (C7520), 15% slower.
    for (int t = 0; t < tiles; ++t) {
        const int st = t % STAGES;
        const long long k0 = k_begin + (long long)t * BC;
        rf_mbar_wait(&full[st], (t / STAGES) & 1);
        const unsigned k_addr = rf_smem_addr(ks + st * KV_BYTES);
        // S = Q K^T. Step kk takes head_dim 16 kk .. 16 kk + 15: column block kk / 4, bytes
        // 32 (kk % 4) of each row (the hardware applies the swizzle to the full address).
        // Tile t - 1's P V goes with it.
        float s[1][NT][4];
        rf_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DT / 16; ++kk) {
            const unsigned col = (kk % 4) * 32;
            const rf_u64 da = rf_wgmma_desc(q_addr + (kk / 4) * ROWS * 128 + col, 16, 1024);
            const rf_u64 db = rf_wgmma_desc(k_addr + (kk / 4) * BC * 128 + col, 16, 1024);
            rf_wgmma<T, BC>::ss(s[0], da, db, kk > 0);
        }
        rf_wgmma_commit();
        if (t > 0) {
            issue_pv((t - 1) % STAGES);
            rf_wgmma_commit();
            rf_wgmma_wait<1>(); // S is in (groups complete in order); P V may still run
        } else {
            rf_wgmma_wait<0>();
        }
        rf_wgmma_reg_fence(s[0]);
        float alpha[1][2];
        rf_flash_softmax_tile<1, NT, DTILES, true>(p, s, o, m_run, l_run, alpha,
                                                   k0 + BC > (all_see < k_end ? all_see : k_end), m0 + wrow,
                                                   (int)k0, (int)k_end, kv_head);
        // Tile t - 1's P V is in: its buffer goes back to the copying warps, its A registers
        // (pf) are free for this tile's P (packed before the next fence: wgmma reads registers
        // written before the fence, and reads them while it runs), and O can be rescaled.
        rf_wgmma_wait<0>();
        rf_wgmma_reg_fence(o[0]);
        if (t > 0) rf_mbar_arrive(&empty[(t - 1) % STAGES]);
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) rf_flash_pack_p<T>(s[0], kk, pf[kk]);
        rf_flash_rescale_o(o, alpha);
    }
    if (tiles > 0) {
        rf_wgmma_fence();
        issue_pv((tiles - 1) % STAGES);
        rf_wgmma_commit();
        rf_wgmma_wait<0>();
        rf_wgmma_reg_fence(o[0]);
    }
    float l_sum[1][2];
    rf_flash_quad_sums(l_run, l_sum);
    rf_flash_store_rows<T>(p, o, m_run, l_sum, m0 + wrow, b, kv_head, split);
}

// Entry points (only in sm_90a code; the launcher looks them up and takes the mma.sync kernel
// where they are absent), one block an SM, 64-key tiles and four K/V buffers each. More math
// warpgroups keep the tensor cores busy while others run the softmax, as far as the registers
// allow (two blocks an SM instead would leave too few: at 104 a math thread ptxas serialised
// every wgmma, C7512):
// - head_dim 128: three math warpgroups (192 rows, 178 KiB of shared memory), 24 registers a
//   copying thread and 160 a math thread (O takes 64, S 32, P 16);
// - head_dim 64: four math warpgroups (256 rows, 98 KiB), 24 and 112 (O 32, S 32, P 16).
// Both beat two math warpgroups, two blocks of two, and the mma.sync kernel at these shapes
// (docs/kernels/attention.md, version 11, has the measurements).
#define RF_FLASH_WGMMA_ENTRY(T, NAME, DT, MATH_WGS, COPY_REGS, MATH_REGS)           \
    RF_KERNEL void __launch_bounds__(128 * (MATH_WGS + 1), 1) NAME(rf_flash_params p) { \
        rf_flash_wgmma<T, DT, 64, 4, MATH_WGS, COPY_REGS, MATH_REGS>(p);             \
    }
RF_FLASH_WGMMA_ENTRY(__half, rf_flash_wgmma_f16_d128, 128, 3, 24, 160)
RF_FLASH_WGMMA_ENTRY(rf_bf16, rf_flash_wgmma_bf16_d128, 128, 3, 24, 160)
RF_FLASH_WGMMA_ENTRY(__half, rf_flash_wgmma_f16_d64, 64, 4, 24, 112)
RF_FLASH_WGMMA_ENTRY(rf_bf16, rf_flash_wgmma_bf16_d64, 64, 4, 24, 112)

#endif // RF_WGMMA
