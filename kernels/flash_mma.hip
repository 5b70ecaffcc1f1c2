// Flash attention, the NVIDIA matrix-core kernel (contract and the other implementations:
// include/rocmforge_flash.h), built for NVIDIA targets only (sm_80 and later: mma.sync.m16n8k16,
// cp.async, ldmatrix).
//
// WARPS warps of MW 16-row fragments (prefill: 4 warps of 2,
// 128 rows a block), or warps splitting the keys of one 16-row group (decode); BC keys a tile
// (see the entries at the end of this section). Q, and K and V (STAGES buffers), are
// staged in shared memory as T by cp.async (zero-filled past the ends, so padding never holds
// NaN), rows padded by 16 bytes: the row stride is then an odd number of 16-byte chunks and the
// 8 rows one ldmatrix reads fall in different banks.
//
// Per warp, fragment and key tile: S (16 x BC) = Q K^T by mma.m16n8k16, Q fragments by ldmatrix
// (held in registers when MW = 1), K fragments by ldmatrix; the online softmax on S's
// accumulator fragments (each row is held by the 4 lanes of a quad); P, converted to T in
// registers, is directly the A operand of O (16 x D) += P V, with V fragments by
// ldmatrix.trans.

#include "rocmforge_dependent_launch.h"
#include "rocmforge_flash_mma.h"

#if !RF_MMA_SYNC && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#error "flash_mma.hip is built for NVIDIA sm_80 and later only (xtask kernels' target list)"
#endif

#if RF_MMA_SYNC
// Dependent launches (rocmforge_dependent_launch.h): the decode entries (KS) wait for the kernel
// ahead and let the next one in only once their keys have landed (in rf_flash_mma): in a decode
// step the next kernel is the O product, whose first weight copies would otherwise queue in the
// DRAM in front of the tiles' (docs/kernels/attention.md, version 14). The others let it in at
// once.
#define RF_FLASH_MMA_BODY(T, DT, BC, W, S, KS, PG, MW) \
    if (KS) {                                          \
        rf_wait_prior_grid();                          \
    } else {                                           \
        rf_follow_prior_grid();                        \
    }                                                  \
    rf_flash_mma<T, DT, BC, W, S, KS, PG, MW>(p);
#else
// A host pass (no device code): the entries are declarations only.
#define RF_FLASH_MMA_BODY(T, DT, BC, W, S, KS, PG, MW)
#endif

#if RF_MMA_SYNC

// Stages ROWS rows of D elements (zero-padded to DT) into shared memory, row stride LD
// elements. `row_ptr(r)` gives a row's global address, or null for a row past the end (zero-
// filled). `any` is a valid global address for the zero-fill copies, which read nothing.
template <typename T, int DT, int LD, int ROWS, int THREADS, typename RowPtr>
RF_DEVICE void rf_flash_stage(T* smem, int D, const void* any, RowPtr row_ptr) {
    constexpr int CHUNKS = DT / 8; // 16-byte chunks a row
    for (int e = threadIdx.x; e < ROWS * CHUNKS; e += THREADS) {
        const int r = e / CHUNKS, c = e % CHUNKS;
        const T* src = row_ptr(r);
        const bool ok = src != nullptr && c * 8 < D;
        rf_cp_async16(smem + r * LD + c * 8, ok ? (const void*)(src + c * 8) : any, ok ? 16 : 0);
    }
}

// The same for ROWS rows `row_stride` elements apart starting at `first`, of which the first
// `valid_rows` exist: a K or V tile. Where the threads divide the rows' chunks evenly, each
// thread keeps one column chunk and steps down the rows, so the per-copy work is an add and a
// compare (this runs for every tile, in the kernel's main loop).
template <typename T, int DT, int LD, int ROWS, int THREADS>
RF_DEVICE void rf_flash_stage_tile(T* smem, const T* first, rf_u64 row_stride, int valid_rows, int D,
                                   const void* any) {
    constexpr int CHUNKS = DT / 8;
    if constexpr (THREADS % CHUNKS == 0 && ROWS % (THREADS / CHUNKS) == 0) {
        constexpr int RSTEP = THREADS / CHUNKS;
        const int c = threadIdx.x % CHUNKS;
        const int r0 = threadIdx.x / CHUNKS;
        const bool col_ok = c * 8 < D;
        const T* src = first + (rf_u64)r0 * row_stride + c * 8;
        T* dst = smem + r0 * LD + c * 8;
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; ++i) {
            const bool ok = col_ok && r0 + i * RSTEP < valid_rows;
            rf_cp_async16(dst + i * RSTEP * LD, ok ? (const void*)src : any, ok ? 16 : 0);
            src += (rf_u64)RSTEP * row_stride;
        }
    } else {
        rf_flash_stage<T, DT, LD, ROWS, THREADS>(smem, D, any, [&](int r) -> const T* {
            return r < valid_rows ? first + (rf_u64)r * row_stride : nullptr;
        });
    }
}

// The paged fast path (power-of-two blocks, 32-bit slot strides: every real cache), for the
// kernels whose threads divide a tile's 16-byte chunks evenly (each thread keeps one column
// chunk and copies rows r0, r0 + RSTEP, ...). It is split in two so the block ids of the next
// tile can be loaded a tile ahead: rf_flash_paged_ids reads the thread's ids of the tile at k0,
// rf_flash_stage_kv_ids issues its copies. Per row that is a table load (off the critical
// path), a shift and a mask, one unsigned compare and one 32 x 32 -> 64-bit multiply-add a
// tensor, against ~30 instructions of 64-bit arithmetic and a dependent table load in the
// general form below (ncu on the 8-warp decode kernel: the general form made the paged kernel
// issue twice the contiguous kernel's instructions; docs/kernels/attention.md). Slots fit 32
// bits: the launcher keeps num_blocks * block_size < 2^31.
template <int DT, int ROWS, int THREADS>
RF_DEVICE void rf_flash_paged_ids(const rf_flash_params& p, const int* table, long long k0, long long k_end, int D,
                                  unsigned* ids) {
    constexpr int CHUNKS = DT / 8;
    constexpr int RSTEP = THREADS / CHUNKS;
    const int c = threadIdx.x % CHUNKS;
    const int r0 = threadIdx.x / CHUNKS;
    const bool col_ok = c * 8 < D;
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i) {
        const long long key = k0 + r0 + i * RSTEP;
        // Rows past the keys read no table entry (their index may be past the table); they and
        // columns past head_dim get num_blocks, an id that reads as zeros.
        ids[i] = col_ok && key < k_end ? (unsigned)table[(int)key >> p.block_shift] : (unsigned)p.num_blocks;
    }
}

template <typename T, int DT, int LD, int ROWS, int THREADS>
RF_DEVICE void rf_flash_stage_kv_ids(T* ksm, T* vsm, const rf_flash_params& p, const T* kbase, const T* vbase,
                                     long long k0, const unsigned* ids) {
    constexpr int CHUNKS = DT / 8;
    constexpr int RSTEP = THREADS / CHUNKS;
    const int c = threadIdx.x % CHUNKS;
    const int r0 = threadIdx.x / CHUNKS;
    const int shift = p.block_shift;
    const unsigned mask = (unsigned)p.block_size - 1u;
    const unsigned blocks = (unsigned)p.num_blocks;
    const unsigned kseq = (unsigned)p.k_seq, vseq = (unsigned)p.v_seq;
    const T* kc = kbase + c * 8;
    const T* vc = vbase + c * 8;
    const unsigned key0 = (unsigned)k0 + (unsigned)r0;
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; ++i) {
        const int r = r0 + i * RSTEP;
        const unsigned blk = ids[i];
        const bool ok = blk < blocks; // also refuses a corrupt (negative) id
        const unsigned slot = (blk << shift) | ((key0 + (unsigned)(i * RSTEP)) & mask);
        rf_cp_async16(ksm + r * LD + c * 8, ok ? (const void*)(kc + (rf_u64)slot * kseq) : p.k, ok ? 16 : 0);
        rf_cp_async16(vsm + r * LD + c * 8, ok ? (const void*)(vc + (rf_u64)slot * vseq) : p.v, ok ? 16 : 0);
    }
}

// Both K and V rows of a tile from a paged cache (one block-table lookup a row serves both).
// Where the threads divide the rows' chunks evenly each thread keeps one column chunk and
// looks up only the rows it copies; otherwise one lookup a chunk.
template <typename T, int DT, int LD, int ROWS, int THREADS>
RF_DEVICE void rf_flash_stage_kv_paged(T* ksm, T* vsm, const rf_flash_params& p, const T* kbase, const T* vbase,
                                       int b, long long k0, int valid_rows, int D) {
    constexpr int CHUNKS = DT / 8;
    // Slot of key k0 + r, or -1 when the row is absent or outside the cache.
    auto slot_of = [&](int r) -> long long { return r < valid_rows ? rf_flash_slot(p, b, (int)k0 + r) : -1; };
    if constexpr (THREADS % CHUNKS == 0 && ROWS % (THREADS / CHUNKS) == 0) {
        constexpr int RSTEP = THREADS / CHUNKS;
        const int c = threadIdx.x % CHUNKS;
        const int r0 = threadIdx.x / CHUNKS;
        const bool col_ok = c * 8 < D;
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; ++i) {
            const int r = r0 + i * RSTEP;
            const long long slot = col_ok ? slot_of(r) : -1;
            const bool ok = slot >= 0;
            rf_cp_async16(ksm + r * LD + c * 8, ok ? (const void*)(kbase + (rf_u64)slot * p.k_seq + c * 8) : p.k, ok ? 16 : 0);
            rf_cp_async16(vsm + r * LD + c * 8, ok ? (const void*)(vbase + (rf_u64)slot * p.v_seq + c * 8) : p.v, ok ? 16 : 0);
        }
    } else {
        for (int e = threadIdx.x; e < ROWS * CHUNKS; e += THREADS) {
            const int r = e / CHUNKS, c = e % CHUNKS;
            const long long slot = c * 8 < D ? slot_of(r) : -1;
            const bool ok = slot >= 0;
            rf_cp_async16(ksm + r * LD + c * 8, ok ? (const void*)(kbase + (rf_u64)slot * p.k_seq + c * 8) : p.k, ok ? 16 : 0);
            rf_cp_async16(vsm + r * LD + c * 8, ok ? (const void*)(vbase + (rf_u64)slot * p.v_seq + c * 8) : p.v, ok ? 16 : 0);
        }
    }
}

// WARPS warps; STAGES K/V buffers (cp.async runs STAGES - 1 tiles ahead); KSPLIT: the warps
// share one 16-row group and split each key tile between them instead (decode, where a block
// has no more rows than the group's heads of one query), merging their results at the end.
// PAGED: K and V come through block tables (a separate instantiation, so the contiguous
// kernels carry none of it). MW: 16-row m-fragments a warp. With MW = 2 every K and V fragment
// read from shared memory feeds two mma instead of one (160 bytes of ldmatrix an mma instead of
// 256 at 64-key tiles), and the Q fragments are re-read from shared memory each k-step instead
// of being held (the registers go to the second fragment's O and S).
template <typename T, int DT, int BC, int WARPS, int STAGES, bool KSPLIT, bool PAGED, int MW>
RF_DEVICE void rf_flash_mma(const rf_flash_params& args) {
    const rf_flash_params p = PAGED ? rf_flash_for_batch(args, blockIdx.z) : args;
    constexpr int ROWS = KSPLIT ? 16 : 16 * MW * WARPS; // packed rows of the block
    constexpr int THREADS = 32 * WARPS;
    constexpr int LD = DT + 8;                      // padded row stride (elements)
    constexpr int KSTEPS = DT / 16;                 // k-steps of Q K^T
    constexpr int WKEYS = KSPLIT ? BC / WARPS : BC; // keys of each tile one warp takes
    constexpr int NT = WKEYS / 8;                   // n-tiles of the warp's S
    constexpr int DTILES = DT / 8;                  // n-tiles of O
    constexpr bool QREG = MW == 1;                  // Q fragments held in registers
    static_assert(WKEYS % 16 == 0 && STAGES >= 2, "tile shape");
    static_assert(MW == 1 || (MW == 2 && !KSPLIT), "two m-fragments a warp only for row-split blocks");
    extern __shared__ __align__(16) unsigned char rf_flash_mma_smem[];
    T* qs = (T*)rf_flash_mma_smem;
    T* ks = qs + ROWS * LD;         // [STAGES][BC][LD]
    T* vs = ks + STAGES * BC * LD;  // [STAGES][BC][LD]

    const int D = p.head_dim;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int g = lane / 4; // mma "group": rows g and g + 8 of each 16-row fragment
    const int t = lane % 4; // thread in group: columns 2t, 2t + 1 of each 8-wide tile
    const int wrow = KSPLIT ? 0 : warp * 16 * MW; // the warp's first row in the block
    const int wkey = KSPLIT ? warp * WKEYS : 0;   // the warp's first key in a tile
    const int b = blockIdx.z;
    const int kv_head = blockIdx.y % p.kv_heads;
    const int split = blockIdx.y / p.kv_heads;
    // Causal blocks with more rows do more work: start those first.
    const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = tile * ROWS;

    long long k_begin, k_end;
    rf_flash_key_range(p, m0 + ROWS - 1, kv_head, split, &k_begin, &k_end);
    // Keys every row of the block sees: tiles ending at or before this need no mask.
    const long long all_see = rf_flash_locate(p, m0, kv_head).last_key + 1;
    const bool warp_idle = !rf_flash_locate(p, m0 + wrow, kv_head).valid;

    const T* kbase = (const T*)p.k + (rf_u64)b * p.k_batch + (rf_u64)kv_head * p.k_head;
    const T* vbase = (const T*)p.v + (rf_u64)b * p.v_batch + (rf_u64)kv_head * p.v_head;

    rf_flash_stage<T, DT, LD, ROWS, THREADS>(qs, D, p.q, [&](int r) -> const T* {
        const rf_flash_row qr = rf_flash_locate(p, m0 + r, kv_head);
        if (!qr.valid) return nullptr;
        return (const T*)p.q + (rf_u64)b * p.q_batch + (rf_u64)qr.query * p.q_seq + (rf_u64)qr.head * p.q_head;
    });
    // Paged fast path: `ids` holds the block ids of the next tile to stage, loaded one tile
    // ahead (see rf_flash_paged_ids).
    constexpr bool EVEN_CHUNKS = THREADS % (DT / 8) == 0 && BC % (THREADS / (DT / 8)) == 0;
    unsigned ids[EVEN_CHUNKS ? BC / (THREADS / (DT / 8)) : 1];
    const int* table = PAGED ? p.block_table + (rf_u64)b * (rf_u64)p.max_blocks : nullptr;
    const bool paged_fast = PAGED && EVEN_CHUNKS && p.block_shift >= 0 && ((p.k_seq | p.v_seq) >> 32) == 0;
    if constexpr (PAGED && EVEN_CHUNKS) {
        if (paged_fast) rf_flash_paged_ids<DT, BC, THREADS>(p, table, k_begin, k_end, D, ids);
    }
    // Contiguous K and V tiles may be staged separately (SPLIT_KV below).
    auto stage_k = [&](long long k0, int buf) {
        const int valid = k_end - k0 < BC ? (int)(k_end - k0) : BC;
        rf_flash_stage_tile<T, DT, LD, BC, THREADS>(ks + buf * BC * LD, kbase + (rf_u64)k0 * p.k_seq, p.k_seq, valid,
                                                    D, p.k);
    };
    auto stage_v = [&](long long k0, int buf) {
        const int valid = k_end - k0 < BC ? (int)(k_end - k0) : BC;
        rf_flash_stage_tile<T, DT, LD, BC, THREADS>(vs + buf * BC * LD, vbase + (rf_u64)k0 * p.v_seq, p.v_seq, valid,
                                                    D, p.v);
    };
    auto stage_kv = [&](long long k0, int buf) {
        if constexpr (PAGED) {
            if constexpr (EVEN_CHUNKS) {
                if (paged_fast) {
                    // Tiles are staged in order, so the ids loaded last are this tile's.
                    rf_flash_stage_kv_ids<T, DT, LD, BC, THREADS>(ks + buf * BC * LD, vs + buf * BC * LD, p, kbase,
                                                                  vbase, k0, ids);
                    rf_flash_paged_ids<DT, BC, THREADS>(p, table, k0 + BC, k_end, D, ids);
                    return;
                }
            }
            const int valid = k_end - k0 < BC ? (int)(k_end - k0) : BC;
            rf_flash_stage_kv_paged<T, DT, LD, BC, THREADS>(ks + buf * BC * LD, vs + buf * BC * LD, p, kbase, vbase, b,
                                                            k0, valid, D);
        } else {
            stage_k(k0, buf);
            stage_v(k0, buf);
        }
    };
    // Prologue: Q with the first tile, then the next STAGES - 2 tiles, a commit group each. A
    // rolled loop: it runs once a launch, and its staging code unrolled is as long as the main
    // loop's (instruction fetches of cold code: see the merge below).
#pragma unroll 1
    for (int st = 0; st < STAGES - 1; ++st) {
        if (k_begin + st * BC < k_end) stage_kv(k_begin + st * BC, st);
        rf_cp_async_commit();
    }

    float o[MW][DTILES][4];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int i = 0; i < DTILES; ++i) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.0f;
    }
    float m_run[MW][2], l_run[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
        m_run[mi][0] = m_run[mi][1] = -INFINITY;
        l_run[mi][0] = l_run[mi][1] = 0.0f;
    }
    unsigned qf[QREG ? KSTEPS : 1][4];

    // ldmatrix lane addressing (see the header comment): A (Q) and B (K) non-transposed,
    // B (V) transposed.
    const int a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_col = 8 * (lane / 16);
    const int k_row = (lane % 8) + 8 * (lane / 16), k_col = 8 * ((lane / 8) % 2);
    const int v_row = (lane % 8) + 8 * ((lane / 8) % 2), v_col = 8 * (lane / 16);
    const T* qa = qs + (wrow + a_row) * LD + a_col;

    int it = 0;
    for (long long k0 = k_begin; k0 < k_end; k0 += BC, ++it) {
        // Tile `it` has landed once at most STAGES - 2 newer groups are pending; after the
        // barrier every warp is done with tile it - 1, whose buffer the prefetch refills. One
        // barrier a tile.
        rf_cp_async_wait<STAGES - 2>();
        __syncthreads();
        // The prefetch of tile it + STAGES - 1. Two-fragment blocks issue its K copies here and
        // its V copies after Q K^T: sixteen copies a thread in a row filled the memory queue,
        // and the instructions after them that reuse their address registers waited for it
        // (ncu: a share of the stall samples, long scoreboard). Split ran faster at head_dim 64
        // and 128; spread one or two copies a k-step, slower (docs/kernels/attention.md, v9).
        constexpr bool SPLIT_KV = !PAGED && MW > 1;
        const long long kp = k0 + (long long)(STAGES - 1) * BC;
        const int kp_buf = (it + STAGES - 1) % STAGES;
        const bool prefetch = kp < k_end;
        if (prefetch) {
            if constexpr (SPLIT_KV) {
                stage_k(kp, kp_buf);
            } else {
                stage_kv(kp, kp_buf);
            }
        }
        // The rest of the prefetch (V, when split) and its commit group.
        auto finish_prefetch = [&] {
            if constexpr (SPLIT_KV) {
                if (prefetch) stage_v(kp, kp_buf);
            }
            rf_cp_async_commit();
        };
        if constexpr (QREG) {
            if (it == 0) {
#pragma unroll
                for (int kk = 0; kk < KSTEPS; ++kk) rf_ldmatrix_x4(qf[kk], qa + kk * 16);
            }
        }
        if (warp_idle) {
            finish_prefetch();
            continue;
        }
        const T* kt = ks + (it % STAGES) * BC * LD + wkey * LD;
        const T* vt = vs + (it % STAGES) * BC * LD + wkey * LD;
        float s[MW][NT][4];
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
            for (int n = 0; n < NT; ++n) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            unsigned qk[MW][4];
#pragma unroll
            for (int mi = 0; mi < MW; ++mi) {
                if constexpr (QREG) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) qk[mi][e] = qf[kk][e];
                } else {
                    rf_ldmatrix_x4(qk[mi], qa + 16 * mi * LD + kk * 16);
                }
            }
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned kf[4];
                rf_ldmatrix_x4(kf, kt + (np * 16 + k_row) * LD + kk * 16 + k_col);
#pragma unroll
                for (int mi = 0; mi < MW; ++mi) {
                    rf_mma<T>::run(s[mi][2 * np], qk[mi], kf[0], kf[1]);
                    rf_mma<T>::run(s[mi][2 * np + 1], qk[mi], kf[2], kf[3]);
                }
            }
        }
        finish_prefetch();
        // Mask where the tile reaches past what a row sees (only tiles on the causal diagonal
        // or at the end of the keys), then the online softmax.
        float alpha[MW][2];
        rf_flash_softmax_tile<MW, NT, DTILES>(p, s, o, m_run, l_run, alpha,
                                              k0 + BC > (all_see < k_end ? all_see : k_end), m0 + wrow,
                                              (int)k0 + wkey, (int)k_end, kv_head);
#pragma unroll
        for (int kk = 0; kk < WKEYS / 16; ++kk) {
            unsigned pf[MW][4];
#pragma unroll
            for (int mi = 0; mi < MW; ++mi) rf_flash_pack_p<T>(s[mi], kk, pf[mi]);
#pragma unroll
            for (int dp = 0; dp < DT / 16; ++dp) {
                unsigned vf[4];
                rf_ldmatrix_x4_trans(vf, vt + (kk * 16 + v_row) * LD + dp * 16 + v_col);
#pragma unroll
                for (int mi = 0; mi < MW; ++mi) {
                    rf_mma<T>::run(o[mi][2 * dp], pf[mi], vf[0], vf[1]);
                    rf_mma<T>::run(o[mi][2 * dp + 1], pf[mi], vf[2], vf[3]);
                }
            }
        }
    }
    rf_cp_async_wait<0>();
    if constexpr (KSPLIT) {
        // Decode: the next kernel is let in once this block's keys have landed, before the
        // merge (RF_FLASH_MMA_BODY).
        rf_launch_dependents();
    }

    float l_sum[MW][2];
    rf_flash_quad_sums(l_run, l_sum);
    if constexpr (KSPLIT) {
        // Merge the warps' (m, l, O) for the shared rows through shared memory (the K buffers,
        // free now): O = sum_w 2^(m_w - M) O_w, l = sum_w 2^(m_w - M) l_w, M = max_w m_w.
        // (MW is 1 here.) Every warp merges and stores its share of O's column tiles (tile i
        // goes to warp i % WARPS), where warp 0 used to do all of it while the others idled,
        // in a rolled loop: this runs once a launch, and in a decode step the kernel's code
        // comes cold (the weights streamed through the L2 since its last launch), so code
        // straight-line over every tile waited on instruction fetches (ncu, batch-1 decode:
        // 60 of a launch's 95 stall samples "no instruction", on the ~1400 unrolled
        // instructions of the merge and store; docs/kernels/attention.md, version 13). Rows of
        // the O scratch are padded by 8 floats, so the 8 rows one fragment position touches fall
        // in bank pairs instead of one bank.
        constexpr int RED_LD = DT + 8;
        float* red_m = (float*)ks;             // [WARPS][16]
        float* red_l = red_m + WARPS * 16;     // [WARPS][16]
        float* red_o = red_l + WARPS * 16;     // [WARPS][16][RED_LD]
        __syncthreads();
        if (t == 0) {
            red_m[warp * 16 + g] = m_run[0][0];
            red_m[warp * 16 + g + 8] = m_run[0][1];
            red_l[warp * 16 + g] = l_sum[0][0];
            red_l[warp * 16 + g + 8] = l_sum[0][1];
        }
#pragma unroll
        for (int i = 0; i < DTILES; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                red_o[(warp * 16 + g + 8 * (e / 2)) * RED_LD + i * 8 + 2 * t + (e % 2)] = o[0][i][e];
            }
        }
        __syncthreads();
        // The thread's rows g and g + 8: the warps' weights, the sum's inverse, where they go.
        float weight[2][WARPS];
        float inv[2];
        rf_flash_row rows[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = g + 8 * h;
            float mx = -INFINITY;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, red_m[w * 16 + r]);
            const float m_use = mx == -INFINITY ? 0.0f : mx;
            float l = 0.0f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) {
                weight[h][w] = rf_fast_exp2(red_m[w * 16 + r] - m_use);
                l = fmaf(weight[h][w], red_l[w * 16 + r], l);
            }
            rows[h] = rf_flash_locate(p, m0 + wrow + r, kv_head);
            inv[h] = l > 0.0f ? 1.0f / l : 0.0f;
            if (warp == 0 && t == 0 && rows[h].valid) rf_flash_store_lse(p, b, rows[h], split, mx, l);
        }
#pragma unroll 1
        for (int i = warp; i < DTILES; i += WARPS) {
            const int col = i * 8 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    float v = 0.0f;
#pragma unroll
                    for (int w = 0; w < WARPS; ++w) v = fmaf(weight[h][w], red_o[(w * 16 + g + 8 * h) * RED_LD + col + c], v);
                    if (rows[h].valid && col < p.head_dim) rf_flash_store<T>(p, b, rows[h], split, col + c, v * inv[h]);
                }
            }
        }
        return;
    }

    rf_flash_store_rows<T>(p, o, m_run, l_sum, m0 + wrow, b, kv_head, split);
}

#endif // RF_MMA_SYNC

#define RF_FLASH_MMA_ENTRY(T, DT, BC, W, S, KS, PG, NAME) \
    RF_KERNEL void __launch_bounds__(32 * W) NAME(rf_flash_params p) { RF_FLASH_MMA_BODY(T, DT, BC, W, S, KS, PG, 1) }
// Two 16-row fragments a warp, two blocks a compute unit (at most 255 registers a thread).
#define RF_FLASH_MMA_ENTRY_M2(T, DT, BC, W, S, NAME) \
    RF_KERNEL void __launch_bounds__(32 * W, 2) NAME(rf_flash_params p) { RF_FLASH_MMA_BODY(T, DT, BC, W, S, false, false, 2) }

// Variants (the launcher's `plan` picks one by rows and head_dim; docs/kernels/attention.md has
// the measurements behind them):
//   _m2: four warps of two 16-row fragments, 128 rows a block, 64-key tiles (128 at head_dim
//        64), two blocks a compute unit: prefill;
//   _w4: four warps, 64 rows, 64-key tiles: up to 64 rows, and head_dim 256 (32-key tiles);
//   _ks: four warps splitting each 64-key tile over one 16-row group, three stages: decode;
//   _ks8: eight warps splitting 128-key tiles, one block per compute unit: decode whose
//         blocks about fill the device once (no key split, no combine pass);
//   _paged: K/V from a paged cache (key-split for decode, four warps otherwise).
#define RF_FLASH_MMA_ENTRIES(suffix, T)                                                        \
    RF_FLASH_MMA_ENTRY_M2(T, 64, 128, 4, 2, rf_flash_mma_##suffix##_d64_m2)                    \
    RF_FLASH_MMA_ENTRY_M2(T, 80, 64, 4, 2, rf_flash_mma_##suffix##_d80_m2)                     \
    RF_FLASH_MMA_ENTRY_M2(T, 96, 64, 4, 2, rf_flash_mma_##suffix##_d96_m2)                     \
    RF_FLASH_MMA_ENTRY_M2(T, 128, 64, 4, 2, rf_flash_mma_##suffix##_d128_m2)                   \
    RF_FLASH_MMA_ENTRY(T, 64, 64, 4, 2, false, false, rf_flash_mma_##suffix##_d64_w4)          \
    RF_FLASH_MMA_ENTRY(T, 80, 64, 4, 2, false, false, rf_flash_mma_##suffix##_d80_w4)          \
    RF_FLASH_MMA_ENTRY(T, 96, 64, 4, 2, false, false, rf_flash_mma_##suffix##_d96_w4)          \
    RF_FLASH_MMA_ENTRY(T, 128, 64, 4, 2, false, false, rf_flash_mma_##suffix##_d128_w4)        \
    RF_FLASH_MMA_ENTRY(T, 256, 32, 4, 2, false, false, rf_flash_mma_##suffix##_d256_w4)        \
    RF_FLASH_MMA_ENTRY(T, 64, 64, 4, 3, true, false, rf_flash_mma_##suffix##_d64_ks)           \
    RF_FLASH_MMA_ENTRY(T, 80, 64, 4, 3, true, false, rf_flash_mma_##suffix##_d80_ks)           \
    RF_FLASH_MMA_ENTRY(T, 96, 64, 4, 3, true, false, rf_flash_mma_##suffix##_d96_ks)           \
    RF_FLASH_MMA_ENTRY(T, 128, 64, 4, 3, true, false, rf_flash_mma_##suffix##_d128_ks)         \
    RF_FLASH_MMA_ENTRY(T, 64, 128, 8, 3, true, false, rf_flash_mma_##suffix##_d64_ks8)         \
    RF_FLASH_MMA_ENTRY(T, 80, 128, 8, 3, true, false, rf_flash_mma_##suffix##_d80_ks8)         \
    RF_FLASH_MMA_ENTRY(T, 96, 128, 8, 3, true, false, rf_flash_mma_##suffix##_d96_ks8)         \
    RF_FLASH_MMA_ENTRY(T, 128, 128, 8, 3, true, false, rf_flash_mma_##suffix##_d128_ks8)       \
    RF_FLASH_MMA_ENTRY(T, 64, 64, 4, 2, false, true, rf_flash_mma_##suffix##_d64_w4_paged)     \
    RF_FLASH_MMA_ENTRY(T, 80, 64, 4, 2, false, true, rf_flash_mma_##suffix##_d80_w4_paged)     \
    RF_FLASH_MMA_ENTRY(T, 96, 64, 4, 2, false, true, rf_flash_mma_##suffix##_d96_w4_paged)     \
    RF_FLASH_MMA_ENTRY(T, 128, 64, 4, 2, false, true, rf_flash_mma_##suffix##_d128_w4_paged)   \
    RF_FLASH_MMA_ENTRY(T, 256, 32, 4, 2, false, true, rf_flash_mma_##suffix##_d256_w4_paged)   \
    RF_FLASH_MMA_ENTRY(T, 64, 64, 4, 3, true, true, rf_flash_mma_##suffix##_d64_ks_paged)      \
    RF_FLASH_MMA_ENTRY(T, 80, 64, 4, 3, true, true, rf_flash_mma_##suffix##_d80_ks_paged)      \
    RF_FLASH_MMA_ENTRY(T, 96, 64, 4, 3, true, true, rf_flash_mma_##suffix##_d96_ks_paged)      \
    RF_FLASH_MMA_ENTRY(T, 128, 64, 4, 3, true, true, rf_flash_mma_##suffix##_d128_ks_paged)    \
    RF_FLASH_MMA_ENTRY(T, 64, 128, 8, 3, true, true, rf_flash_mma_##suffix##_d64_ks8_paged)    \
    RF_FLASH_MMA_ENTRY(T, 80, 128, 8, 3, true, true, rf_flash_mma_##suffix##_d80_ks8_paged)    \
    RF_FLASH_MMA_ENTRY(T, 96, 128, 8, 3, true, true, rf_flash_mma_##suffix##_d96_ks8_paged)    \
    RF_FLASH_MMA_ENTRY(T, 128, 128, 8, 3, true, true, rf_flash_mma_##suffix##_d128_ks8_paged)

RF_FLASH_MMA_ENTRIES(f16, __half)
RF_FLASH_MMA_ENTRIES(bf16, rf_bf16)
