// Flash attention, the portable kernel (contract and the other implementations:
// include/rocmforge_flash.h): every platform and target, every dtype, head_dim up to DMAX.
//
// RF_FLASH_P_THREADS (128) threads, RF_FLASH_P_ROWS (16) packed rows, RF_FLASH_P_KEYS (32) keys a
// tile. Thread t owns row t / 8 and, of each key tile, keys t % 8 + 8 j; of the output, columns
// t % 8 + 8 c. Shared memory (f32): Q [16][D + 1], one K or V tile [32][D + 1] (K, then V, in
// the same space), P [16][32]. Rows are padded by one float so the 8 rows a warp reads at one
// column fall in different banks.

#include "rocmforge_flash.h"

// RF_FLASH_P_KEYS rows of K or V (from `base`, rows `stride` apart, or through the block table
// when PAGED) into shared memory as f32, row stride ld; rows from k_end on are zeros.
template <typename T, bool PAGED>
RF_DEVICE void rf_flash_load_tile(float* dst, int ld, const rf_flash_params& p, const T* base, rf_u64 stride, int b,
                                  long long k0, long long k_end) {
    const int D = p.head_dim;
    for (int e = threadIdx.x; e < RF_FLASH_P_KEYS * D; e += RF_FLASH_P_THREADS) {
        const int j = e / D, c = e % D;
        const long long key = k0 + j;
        float v = 0.0f;
        if (key < k_end) {
            if constexpr (PAGED) {
                const T* row = rf_flash_kv_row(p, base, stride, b, key);
                v = row ? rf_to_float(row[c]) : 0.0f;
            } else {
                v = rf_to_float(base[(rf_u64)key * stride + c]);
            }
        }
        dst[j * ld + c] = v;
    }
}

// PAGED: K and V through block tables (a separate instantiation, as for the matrix-core kernel:
// the contiguous one carries none of it).
template <typename T, int DMAX, bool PAGED>
RF_DEVICE void rf_flash_portable(const rf_flash_params& args) {
    const rf_flash_params p = PAGED ? rf_flash_for_batch(args, blockIdx.z) : args;
    extern __shared__ float rf_flash_smem[];
    const int D = p.head_dim;
    const int ld = D + 1;
    float* qs = rf_flash_smem;
    float* kv = qs + RF_FLASH_P_ROWS * ld;
    float* ps = kv + RF_FLASH_P_KEYS * ld;

    const int tid = threadIdx.x;
    const int lr = tid / 8;
    const int l8 = tid % 8;
    const int b = blockIdx.z;
    const int kv_head = blockIdx.y % p.kv_heads;
    const int split = blockIdx.y / p.kv_heads;
    const int m0 = blockIdx.x * RF_FLASH_P_ROWS;
    const rf_flash_row row = rf_flash_locate(p, m0 + lr, kv_head);
    long long k_begin, k_end;
    rf_flash_key_range(p, m0 + RF_FLASH_P_ROWS - 1, kv_head, split, &k_begin, &k_end);

    for (int e = tid; e < RF_FLASH_P_ROWS * D; e += RF_FLASH_P_THREADS) {
        const int r = e / D, c = e % D;
        const rf_flash_row qr = rf_flash_locate(p, m0 + r, kv_head);
        const T* q = (const T*)p.q + (rf_u64)b * p.q_batch + (rf_u64)qr.query * p.q_seq + (rf_u64)qr.head * p.q_head;
        qs[r * ld + c] = qr.valid ? rf_to_float(q[c]) : 0.0f;
    }
    const T* kbase = (const T*)p.k + (rf_u64)b * p.k_batch + (rf_u64)kv_head * p.k_head;
    const T* vbase = (const T*)p.v + (rf_u64)b * p.v_batch + (rf_u64)kv_head * p.v_head;

    float acc[DMAX / 8];
#pragma unroll
    for (int c = 0; c < DMAX / 8; ++c) acc[c] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f;

    for (long long k0 = k_begin; k0 < k_end; k0 += RF_FLASH_P_KEYS) {
        __syncthreads(); // the previous tile's V (and, the first time, nothing) is done with
        rf_flash_load_tile<T, PAGED>(kv, ld, p, kbase, p.k_seq, b, k0, k_end);
        __syncthreads();
        float s[RF_FLASH_P_KEYS / 8];
        float tile_max = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < RF_FLASH_P_KEYS / 8; ++jj) {
            const int j = l8 + 8 * jj;
            const float* qrow = qs + lr * ld;
            const float* krow = kv + j * ld;
            float dot = 0.0f;
            for (int c = 0; c < D; ++c) dot = fmaf(qrow[c], krow[c], dot);
            const bool seen = k0 + j <= row.last_key && k0 + j < k_end;
            s[jj] = seen ? dot * p.scale_log2 : -INFINITY;
            tile_max = fmaxf(tile_max, s[jj]);
        }
        // The row's 8 threads are 8 consecutive lanes of one warp (8 divides 32 and 64).
        tile_max = fmaxf(tile_max, rf_shfl_xor(tile_max, 1));
        tile_max = fmaxf(tile_max, rf_shfl_xor(tile_max, 2));
        tile_max = fmaxf(tile_max, rf_shfl_xor(tile_max, 4));
        const float m_new = fmaxf(m_run, tile_max);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; // a row that has seen nothing yet
        const float alpha = exp2f(m_run - m_use);
        float sum = 0.0f;
#pragma unroll
        for (int jj = 0; jj < RF_FLASH_P_KEYS / 8; ++jj) {
            const float e = exp2f(s[jj] - m_use);
            ps[lr * RF_FLASH_P_KEYS + l8 + 8 * jj] = e;
            sum += e;
        }
        sum += rf_shfl_xor(sum, 1);
        sum += rf_shfl_xor(sum, 2);
        sum += rf_shfl_xor(sum, 4);
        l_run = l_run * alpha + sum;
        m_run = m_new;
#pragma unroll
        for (int c = 0; c < DMAX / 8; ++c) acc[c] *= alpha;
        __syncthreads(); // every row's scores are read from K: V may replace it
        rf_flash_load_tile<T, PAGED>(kv, ld, p, vbase, p.v_seq, b, k0, k_end);
        __syncthreads();
        const int keys = k_end - k0 < RF_FLASH_P_KEYS ? (int)(k_end - k0) : RF_FLASH_P_KEYS;
        for (int j = 0; j < keys; ++j) {
            const float pj = ps[lr * RF_FLASH_P_KEYS + j];
            const float* vrow = kv + j * ld;
#pragma unroll
            for (int c = 0; c < DMAX / 8; ++c) {
                const int col = l8 + 8 * c;
                if (col < D) acc[c] = fmaf(pj, vrow[col], acc[c]);
            }
        }
    }
    if (!row.valid) return;
    const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
#pragma unroll
    for (int c = 0; c < DMAX / 8; ++c) {
        const int col = l8 + 8 * c;
        if (col < D) rf_flash_store<T>(p, b, row, split, col, acc[c] * inv);
    }
    if (l8 == 0) rf_flash_store_lse(p, b, row, split, m_run, l_run);
}

#define RF_FLASH_PORTABLE_ENTRY(suffix, T, DMAX)                                                          \
    RF_KERNEL void __launch_bounds__(RF_FLASH_P_THREADS) rf_flash_##suffix##_d##DMAX(rf_flash_params p) {     \
        rf_flash_portable<T, DMAX, false>(p);                                                          \
    }                                                                                                  \
    RF_KERNEL void __launch_bounds__(RF_FLASH_P_THREADS) rf_flash_##suffix##_d##DMAX##_paged(rf_flash_params p) { \
        rf_flash_portable<T, DMAX, true>(p);                                                           \
    }
#define RF_FLASH_PORTABLE_ENTRIES(suffix, T)                                                          \
    RF_FLASH_PORTABLE_ENTRY(suffix, T, 64) RF_FLASH_PORTABLE_ENTRY(suffix, T, 128)                   \
        RF_FLASH_PORTABLE_ENTRY(suffix, T, 256)

RF_FOR_EACH_DTYPE(RF_FLASH_PORTABLE_ENTRIES)
