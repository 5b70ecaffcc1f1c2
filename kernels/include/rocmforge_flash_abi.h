// rocmforge_flash_abi.h: what the flash-attention kernels (kernels/flash_*.hip) and their launcher
// (crates/rocm-kernels/src/attention/flash.rs, through the generated abi/flash.rs) share: the
// parameter block every entry takes by value, and the tile sizes the launcher plans grids and
// shared memory with. See rocmforge_abi.h for the rules of an ABI header.

#ifndef ROCMFORGE_FLASH_ABI_H
#define ROCMFORGE_FLASH_ABI_H

#include "rocmforge_abi.h"

// The portable kernel (flash_portable.hip): packed (query, head) rows a block, keys a tile,
// threads a block.
#define RF_FLASH_P_ROWS 16
#define RF_FLASH_P_KEYS 32
#define RF_FLASH_P_THREADS 128

// Keys a tile of the MFMA kernel (flash_mfma.hip).
#define RF_FLASH_MFMA_KEYS 32

// Key splits are cut at multiples of this: every kernel's key tile divides it.
#define RF_FLASH_SPLIT_ALIGN 64

// Every entry's one argument. Tensors are addressed by element strides (head_dim contiguous);
// the launcher has checked every stride and length against the buffers.
struct rf_flash_params {
    RF_ABI_PTR(const void) q;
    RF_ABI_PTR(const void) k;
    RF_ABI_PTR(const void) v;
    RF_ABI_PTR(void) o;
    RF_ABI_PTR(float) lse;         // [batch, q_heads, seq_q] or null
    RF_ABI_PTR(float) partial_o;   // [splits, batch, q_heads, seq_q, head_dim] or null: then O is written
    RF_ABI_PTR(float) partial_lse; // [splits, batch, q_heads, seq_q]
    unsigned long long q_batch, q_seq, q_head;
    unsigned long long k_batch, k_seq, k_head;
    unsigned long long v_batch, v_seq, v_head;
    unsigned long long o_batch, o_seq, o_head;
    long long causal_offset;
    int batch, q_heads, kv_heads, seq_q, seq_k, head_dim;
    int group;          // q_heads / kv_heads
    int keys_per_split; // a multiple of RF_FLASH_SPLIT_ALIGN (paged: recut per batch, see rf_flash_for_batch)
    int num_splits;
    int causal;
    float scale_log2;
    int pad;
    // Paged K/V (null block_table: contiguous). Key j of batch b is slot
    // block_table[b * max_blocks + j / block_size] * block_size + j % block_size of the caches
    // K, V ([num_blocks * block_size] slots, a slot k_seq / v_seq elements apart, heads k_head /
    // v_head apart); batch b has seq_lens[b] keys, and its queries are the last seq_q of them.
    RF_ABI_PTR(const int) block_table;
    RF_ABI_PTR(const int) seq_lens;
    int block_size, max_blocks, num_blocks;
    int block_shift; // log2(block_size) when it is a power of two, else -1
};

#endif // ROCMFORGE_FLASH_ABI_H
