// rocmforge_flash_mma.h: the online softmax on NVIDIA matrix-core fragments, shared by the
// mma.sync kernel (flash_mma.hip) and the warpgroup kernel (flash_wgmma.hip), whose S and O
// fragments are laid out alike: rows g and g + 8 of each 16-row fragment (g = lane / 4), columns
// 2t, 2t + 1 of each 8-wide n-tile (t = lane % 4); a row is held by the four lanes of a quad.

#ifndef ROCMFORGE_FLASH_MMA_H
#define ROCMFORGE_FLASH_MMA_H

#include "rocmforge_flash.h"
#include "rocmforge_mma.h"
#include "rocmforge_reduce.h"

#if RF_MMA_SYNC

// op over the 2 * NT scores of one row (h = 0: row g, 1: row g + 8) of an S fragment, as a
// tree (depth log2(2 NT), not a chain of 2 NT dependent operations).
template <int NT, typename Op>
RF_DEVICE float rf_flash_row_reduce(const float (&s)[NT][4], int h, Op op) {
    float v[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) v[n] = op(s[n][2 * h], s[n][2 * h + 1]);
#pragma unroll
    for (int w = 1; w < NT; w *= 2) {
#pragma unroll
        for (int n = 0; n + w < NT; n += 2 * w) v[n] = op(v[n], v[n + w]);
    }
    return v[0];
}

// O *= alpha row by row (alpha = exp2(m_old - m_new) from rf_flash_softmax_tile).
template <int MW, int DTILES>
RF_DEVICE void rf_flash_rescale_o(float (&o)[MW][DTILES][4], const float (&alpha)[MW][2]) {
    bool moved = false;
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) moved |= alpha[mi][0] != 1.0f || alpha[mi][1] != 1.0f;
    // exp2(0) is exactly 1: once the running maxima settle (most tiles of a long row) no row of
    // the warp moves and the O rescale (DT / 2 multiplies a fragment and thread) is skipped; the
    // vote keeps the branch uniform.
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
            for (int i = 0; i < DTILES; ++i) {
                o[mi][i][0] *= alpha[mi][0];
                o[mi][i][1] *= alpha[mi][0];
                o[mi][i][2] *= alpha[mi][1];
                o[mi][i][3] *= alpha[mi][1];
            }
        }
    }
}

// One key tile's online softmax for the thread's 2 * MW rows, shared by the mma.sync and wgmma
// kernels (their S and O fragments are laid out alike: rows g and g + 8 of each 16-row fragment,
// columns 2t, 2t + 1 of each 8-wide n-tile). When `edge` (tiles on the causal diagonal or at the
// end of the keys) the scores of keys a row may not see are masked first. Then the running max
// and sum move on, O is rescaled, and S becomes the tile's unnormalised probabilities. `row0`:
// the packed row of fragment 0's row 0; `key0`: the key of column 0. The scale (> 0, checked by
// the launcher) is applied inside the exponent: max(scale * s) = scale * max(s).
//
// O is rescaled by alpha = exp2(m_old - m_new) in the middle (the mma.sync kernels), or, with
// DEFER, left to the caller (rf_flash_rescale_o with the `alpha` returned): the warpgroup kernel
// runs this while the previous tile's P V is still accumulating into O.
template <int MW, int NT, int DTILES, bool DEFER = false>
RF_DEVICE void rf_flash_softmax_tile(const rf_flash_params& p, float (&s)[MW][NT][4], float (&o)[MW][DTILES][4],
                                     float (&m_run)[MW][2], float (&l_run)[MW][2], float (&alpha)[MW][2], bool edge,
                                     int row0, int key0, int key_end, int kv_head) {
    const int lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    if (edge) {
        // The last key each of the thread's rows sees, looked up here rather than held through
        // the loop (registers: only diagonal and last tiles get here). Keys fit 32 bits (seq_k
        // is an int).
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int last = (int)rf_flash_locate(p, row0 + 16 * mi + g + 8 * h, kv_head).last_key;
#pragma unroll
                for (int n = 0; n < NT; ++n) {
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int key = key0 + n * 8 + 2 * t + c;
                        float& v = s[mi][n][2 * h + c];
                        v = key <= last && key < key_end ? v : -INFINITY;
                    }
                }
            }
        }
    }
    // The online softmax of the thread's 2 * MW rows, phase by phase over all of them, with
    // no branch inside a phase: the rows' max and sum chains interleave (ncu: "wait" on
    // fixed-latency dependencies was the top stall when each row ran its chain alone).
    const float sl2 = p.scale_log2;
    float m_use[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = rf_flash_row_reduce<NT>(s[mi], h, [](float x, float y) { return fmaxf(x, y); });
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_run[mi][h], mx * sl2);
            m_use[mi][h] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[mi][h] = rf_fast_exp2(m_run[mi][h] - m_use[mi][h]);
            m_run[mi][h] = m_new;
        }
    }
    if constexpr (!DEFER) rf_flash_rescale_o(o, alpha);
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][n][e] = rf_fast_exp2(fmaf(s[mi][n][e], sl2, -m_use[mi][e / 2]));
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // Per-thread partial sums: the quad's are added once, at the end.
            const float sum = rf_flash_row_reduce<NT>(s[mi], h, [](float x, float y) { return x + y; });
            l_run[mi][h] = fmaf(l_run[mi][h], alpha[mi][h], sum);
        }
    }
}

// The A fragment of P for 16-key step kk (n-tiles 2 kk and 2 kk + 1 of S, in the mma.sync m16n8k16
// A layout, which is also wgmma's register A layout), rounded to T.
template <typename T, int NT> RF_DEVICE void rf_flash_pack_p(const float (&s)[NT][4], int kk, unsigned (&a)[4]) {
    a[0] = rf_pack2_bits16<T>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = rf_pack2_bits16<T>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = rf_pack2_bits16<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = rf_pack2_bits16<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// The rows' sums: each thread holds partial sums of its rows (rf_flash_softmax_tile), the quad's
// four lanes together the whole.
template <int MW> RF_DEVICE void rf_flash_quad_sums(const float (&l_run)[MW][2], float (&l_sum)[MW][2]) {
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            l_sum[mi][h] = l_run[mi][h];
            l_sum[mi][h] += __shfl_xor_sync(0xffffffffu, l_sum[mi][h], 1);
            l_sum[mi][h] += __shfl_xor_sync(0xffffffffu, l_sum[mi][h], 2);
        }
    }
}

// Normalises the thread's rows of O (fragment mi's rows g and g + 8; `row0` the packed row of
// fragment 0's row 0) by their sums and writes them and their LSE.
template <typename T, int MW, int DTILES>
RF_DEVICE void rf_flash_store_rows(const rf_flash_params& p, const float (&o)[MW][DTILES][4], const float (&m_run)[MW][2],
                                   const float (&l_sum)[MW][2], int row0, int b, int kv_head, int split) {
    const int lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const rf_flash_row r = rf_flash_locate(p, row0 + 16 * mi + g + 8 * h, kv_head);
            if (!r.valid) continue;
            const float l = l_sum[mi][h];
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
            for (int i = 0; i < DTILES; ++i) {
                const int col = i * 8 + 2 * t;
                if (col < p.head_dim) {
                    rf_flash_store<T>(p, b, r, split, col, o[mi][i][2 * h] * inv);
                    rf_flash_store<T>(p, b, r, split, col + 1, o[mi][i][2 * h + 1] * inv);
                }
            }
            if (t == 0) rf_flash_store_lse(p, b, r, split, m_run[mi][h], l);
        }
    }
}

#endif // RF_MMA_SYNC

#endif // ROCMFORGE_FLASH_MMA_H
