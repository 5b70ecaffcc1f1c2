// Flash attention, the split-KV combine (contract: include/rocmforge_flash.h): every platform
// and target. One thread per output element (row, column) merges the splits' partial outputs,
// O = sum_s exp(lse_s - lse) O_s. Splits that saw no key have lse = -inf and weigh nothing; a row
// no split saw stays zeros with lse = -inf.

#include "rocmforge_dependent_launch.h"
#include "rocmforge_flash.h"

template <typename T>
RF_DEVICE void rf_flash_combine(const rf_flash_params& p) {
    const rf_u64 rows = (rf_u64)p.batch * p.q_heads * p.seq_q;
    const rf_u64 plane = rows; // elements between two splits' rows
    RF_GRID_STRIDE_LOOP(e, rows * (rf_u64)p.head_dim) {
        const rf_u64 row = e / (rf_u64)p.head_dim;
        const int col = (int)(e % (rf_u64)p.head_dim);
        float lse_max = -INFINITY;
        for (int s = 0; s < p.num_splits; ++s) lse_max = fmaxf(lse_max, p.partial_lse[s * plane + row]);
        float weight_sum = 0.0f, value = 0.0f;
        if (lse_max != -INFINITY) {
            for (int s = 0; s < p.num_splits; ++s) {
                const float w = expf(p.partial_lse[s * plane + row] - lse_max);
                weight_sum += w;
                value = fmaf(w, p.partial_o[(s * plane + row) * (rf_u64)p.head_dim + col], value);
            }
            value /= weight_sum;
        }
        const int query = (int)(row % (rf_u64)p.seq_q);
        const int head = (int)(row / (rf_u64)p.seq_q % (rf_u64)p.q_heads);
        const int b = (int)(row / ((rf_u64)p.seq_q * p.q_heads));
        T* o = (T*)p.o + (rf_u64)b * p.o_batch + (rf_u64)query * p.o_seq + (rf_u64)head * p.o_head;
        o[col] = rf_from_float<T>(value);
        if (col == 0 && p.lse) {
            p.lse[row] = lse_max == -INFINITY ? -INFINITY : lse_max + logf(weight_sum);
        }
    }
}

#define RF_FLASH_COMBINE_ENTRY(suffix, T) \
    RF_KERNEL void rf_flash_combine_##suffix(rf_flash_params p) { \
        rf_follow_prior_grid();                                    \
        rf_flash_combine<T>(p);                                    \
    }

RF_FOR_EACH_DTYPE(RF_FLASH_COMBINE_ENTRY)
