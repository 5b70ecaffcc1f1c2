// Products with MX-quantised weights: MXFP4 in ggml's block_mxfp4 layout (GGUF type 39) and
// packed MXFP6 (E2M3, E3M2); layouts in rocmforge_quant.h. W is row-major [n, k], each row k / 32
// blocks along k. Activations and outputs are f32, f16 or bf16 (<dt>); products and sums in f32.
//
//   rf_<fmt>_matvec_<dt>(w, x, y, n, k):    y[r] = sum_c W[r, c] x[c]             (decode)
//   rf_<fmt>_matmul_<dt>(w, x, y, m, n, k): Y[i, r] = sum_c X[i, c] W[r, c]       (prefill)
//
// Matrix-vector product (memory-bound: the packed weight is the traffic). A block of threads owns
// RF_MX_ROWS rows per warp and walks k in chunks of one weight block per lane (32 * warp size
// elements). Per chunk:
//   1. the block stages the chunk of x in shared memory as f32 (16-byte loads), once for all its
//      rows; groups of 32 are padded to 36 floats so that lane l's 128-byte read of its group
//      does not collide in banks with its neighbours';
//   2. each warp copies its rows' chunk of the weight into shared memory with 16-byte loads
//      (byte loads when a row is not a whole number of 16-byte words: k % 512 != 0);
//   3. lane l decodes block l of each row from shared memory (32-bit reads, funnel-shifted to
//      the block's odd offset), looks its codes up in a table of the element values, and
//      accumulates code * x in f32; the block's E8M0 scale multiplies the block's sum (exact: a
//      power of two).
// Rows are then reduced across the warp with shuffles. The full weight is never materialised.
//
// Matrix-matrix product (prefill; correctness first): 64 x 64 output tiles, 256 threads with 4 x 4
// outputs each; per 32-wide k step the block stages X as f32 and decodes one weight block per row
// into shared memory, then accumulates from there.

#include "rocmforge_quant.h"

// Rows of W each warp of the matrix-vector kernel owns (the launcher sizes shared memory for it).
#define RF_MX_ROWS 2
// Floats a staged group of 32 activations occupies (4 of padding against bank conflicts).
#define RF_MX_XGROUP 36
// Bytes of the element table at the start of shared memory (64 floats: the 6-bit codes).
#define RF_MX_LUT_BYTES 256

extern __shared__ uint4 rf_mx_smem[];

// Bytes of one row's weight stage: a chunk (warp size blocks) plus 16 bytes, so that the 32-bit
// reads of the last lane's block may run past it.
RF_DEVICE int rf_mx_stage_row(int warp, int block_bytes) { return warp * block_bytes + 16; }

// x[0..count) (count a multiple of 32) -> xs as f32, groups of 32 padded to RF_MX_XGROUP.
// x is 16-byte aligned (the launcher checks), so the loads are 16-byte vectors.
template <typename T> RF_DEVICE void rf_mx_stage_x(const T* x, int count, float* xs) {
    typedef rf_access<T, true> A;
    constexpr int V = A::V;
    for (int i = threadIdx.x; i * V < count; i += blockDim.x) {
        const int e = i * V;
        float f[V];
        A::load(x + e, f);
        // e % 4 == 0 and RF_MX_XGROUP % 4 == 0: d is 16-byte aligned. V is 4 or 8.
        float* d = xs + (e >> 5) * RF_MX_XGROUP + (e & 31);
#pragma unroll
        for (int u = 0; u < V; u += 4) {
            *reinterpret_cast<float4*>(d + u) = make_float4(f[u], f[u + 1], f[u + 2], f[u + 3]);
        }
    }
}

// `bytes` bytes from src to dst (16-byte aligned), by the `width` lanes of one warp. `vector`:
// src is 16-byte aligned and bytes % 16 == 0.
RF_DEVICE void rf_mx_stage_w(const unsigned char* src, int bytes, unsigned char* dst, bool vector, int lane,
                             int width) {
    if (vector) {
        for (int i = lane; i < bytes / 16; i += width) {
            rf_store16(dst + 16 * i, rf_load16(src + 16 * i));
        }
    } else {
        for (int i = lane; i < bytes; i += width) {
            dst[i] = src[i];
        }
    }
}

// The NW payload words that start `off` bytes into a 16-byte-aligned stage row: aligned 32-bit
// reads, funnel-shifted into place (blocks are 17 or 25 bytes, so a payload starts at any byte
// offset). Reads one word past the payload, inside the stage row's 16 spare bytes at worst; its
// bits beyond the block are shifted out.
template <int NW> RF_DEVICE void rf_mx_payload(const unsigned int* row, int off, unsigned int* q) {
    const int w0 = off >> 2;
    const unsigned int shift = 8u * (unsigned int)(off & 3);
    unsigned int a[NW + 1];
#pragma unroll
    for (int i = 0; i <= NW; ++i) {
        a[i] = row[w0 + i];
    }
#pragma unroll
    for (int i = 0; i < NW; ++i) {
        q[i] = __funnelshift_r(a[i], a[i + 1], shift);
    }
}

// Entry: 1 <= n, k % 32 == 0; the launcher checks the buffers (w: n * k / 32 blocks, x: k, y: n;
// x 16-byte aligned) and sizes dynamic shared memory as RF_MX_LUT_BYTES + warp * RF_MX_XGROUP * 4
// + warps * RF_MX_ROWS * rf_mx_stage_row(warp, BLOCK_BYTES).
template <typename F, typename T>
RF_DEVICE void rf_mx_matvec(const unsigned char* w, const T* x, T* y, rf_u64 n, rf_u64 k) {
    constexpr int R = RF_MX_ROWS;
    constexpr int BB = F::BLOCK_BYTES;
    const int W = rf_warp_size();
    const int lane = rf_lane_id();
    const int warp = (int)threadIdx.x / W;
    const int warps = (int)blockDim.x / W;
    const int stage_row = rf_mx_stage_row(W, BB);
    unsigned char* smem = reinterpret_cast<unsigned char*>(rf_mx_smem);
    float* lut = reinterpret_cast<float*>(smem);
    float* xs = reinterpret_cast<float*>(smem + RF_MX_LUT_BYTES);
    unsigned char* ws = smem + RF_MX_LUT_BYTES + W * RF_MX_XGROUP * 4 + warp * R * stage_row;

    for (int i = threadIdx.x; i < F::CODES; i += blockDim.x) {
        lut[i] = F::element((unsigned int)i);
    }
    const rf_u64 nblocks = k / RF_QK;
    const rf_u64 row_bytes = nblocks * BB;
    const bool wvector = rf_is_aligned16(w) && row_bytes % 16 == 0;
    const rf_u64 rows_per_block = (rf_u64)warps * R;

    // Uniform across the block: every thread reaches every barrier.
    for (rf_u64 row0 = (rf_u64)blockIdx.x * rows_per_block; row0 < n; row0 += (rf_u64)gridDim.x * rows_per_block) {
        const rf_u64 first = row0 + (rf_u64)warp * R;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            acc[r] = 0.0f;
        }
        for (rf_u64 c0 = 0; c0 < nblocks; c0 += W) {
            const int cb = (int)(nblocks - c0 < (rf_u64)W ? nblocks - c0 : (rf_u64)W);
            __syncthreads(); // the previous chunk is consumed (and, the first time, the table written)
            rf_mx_stage_x<T>(x + c0 * RF_QK, cb * RF_QK, xs);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (first + r < n) {
                    rf_mx_stage_w(w + (first + r) * row_bytes + c0 * BB, cb * BB, ws + r * stage_row, wvector,
                                  lane, W);
                }
            }
            __syncthreads();
            if (lane < cb) {
                float xv[RF_QK];
                const float4* xp = reinterpret_cast<const float4*>(xs + lane * RF_MX_XGROUP);
#pragma unroll
                for (int i = 0; i < RF_QK / 4; ++i) {
                    const float4 v = xp[i];
                    xv[4 * i] = v.x;
                    xv[4 * i + 1] = v.y;
                    xv[4 * i + 2] = v.z;
                    xv[4 * i + 3] = v.w;
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (first + r < n) {
                        const unsigned char* row = ws + r * stage_row;
                        const float scale = rf_e8m0_to_float(row[lane * BB]);
                        unsigned int q[F::PAYLOAD_WORDS];
                        rf_mx_payload<F::PAYLOAD_WORDS>(reinterpret_cast<const unsigned int*>(row), lane * BB + 1, q);
                        // Four partial sums: independent FMA chains.
                        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                        for (int j = 0; j < RF_QK; ++j) {
                            s[j & 3] = fmaf(lut[F::code(q, j)], xv[j], s[j & 3]);
                        }
                        acc[r] = fmaf((s[0] + s[1]) + (s[2] + s[3]), scale, acc[r]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float total = rf_warp_sum(acc[r]);
            if (lane == 0 && first + r < n) {
                y[first + r] = rf_from_float<T>(total);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Matrix-matrix product
// ---------------------------------------------------------------------------------------------

#define RF_MX_TILE 64
#define RF_MX_MM_THREADS 256

// Entry: blockDim.x == RF_MX_MM_THREADS (the launcher's), k % 32 == 0. Grid: x over n tiles, y
// over m tiles, both grid-stride.
template <typename F, typename T>
RF_DEVICE void rf_mx_matmul(const unsigned char* w, const T* x, T* y, rf_u64 m, rf_u64 n, rf_u64 k) {
    constexpr int BB = F::BLOCK_BYTES;
    // k-major tiles: the inner loop reads xs[kk][ty + 16 i] (two addresses a warp: broadcasts)
    // and ws[kk][tx + 16 j] (16 consecutive floats: distinct banks).
    __shared__ float xs[RF_QK][RF_MX_TILE + 1];
    __shared__ float ws[RF_QK][RF_MX_TILE + 1];
    const int t = (int)threadIdx.x;
    const int tx = t % 16;
    const int ty = t / 16;
    // Staging: thread t fills tile row t / 4, elements 8 (t % 4) .. + 8 of the 32-wide k step.
    const int sr = t >> 2;
    const int sp = t & 3;
    const rf_u64 nblocks = k / RF_QK;
    for (rf_u64 bm = (rf_u64)blockIdx.y * RF_MX_TILE; bm < m; bm += (rf_u64)gridDim.y * RF_MX_TILE) {
        for (rf_u64 bn = (rf_u64)blockIdx.x * RF_MX_TILE; bn < n; bn += (rf_u64)gridDim.x * RF_MX_TILE) {
            float acc[4][4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    acc[i][j] = 0.0f;
                }
            }
            for (rf_u64 kb = 0; kb < nblocks; ++kb) {
                const rf_u64 xrow = bm + sr;
                const rf_u64 wrow = bn + sr;
                float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
                if (wrow < n) {
                    F::group(w + (wrow * nblocks + kb) * BB, sp, v);
                }
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int kk = 8 * sp + i;
                    xs[kk][sr] = xrow < m ? rf_to_float(x[xrow * k + kb * RF_QK + kk]) : 0.0f;
                    ws[kk][sr] = v[i];
                }
                __syncthreads();
#pragma unroll 8
                for (int kk = 0; kk < RF_QK; ++kk) {
                    float a[4];
                    float b[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        a[i] = xs[kk][ty + 16 * i];
                        b[i] = ws[kk][tx + 16 * i];
                    }
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                        }
                    }
                }
                __syncthreads();
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const rf_u64 row = bm + ty + 16 * i;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const rf_u64 col = bn + tx + 16 * j;
                    if (row < m && col < n) {
                        y[row * n + col] = rf_from_float<T>(acc[i][j]);
                    }
                }
            }
        }
    }
}

#define RF_MX_ENTRIES(fmt, F, suffix, T)                                                                      \
    RF_KERNEL void rf_##fmt##_matvec_##suffix(const unsigned char* w, const T* x, T* y, rf_u64 n, rf_u64 k) { \
        rf_mx_matvec<F, T>(w, x, y, n, k);                                                                  \
    }                                                                                                       \
    RF_KERNEL void rf_##fmt##_matmul_##suffix(const unsigned char* w, const T* x, T* y, rf_u64 m, rf_u64 n,   \
                                              rf_u64 k) {                                                   \
        rf_mx_matmul<F, T>(w, x, y, m, n, k);                                                               \
    }

#define RF_MX_MXFP4(suffix, T) RF_MX_ENTRIES(mxfp4, rf_mxfp4, suffix, T)
#define RF_MX_MXFP6_E2M3(suffix, T) RF_MX_ENTRIES(mxfp6_e2m3, rf_mxfp6_e2m3, suffix, T)
#define RF_MX_MXFP6_E3M2(suffix, T) RF_MX_ENTRIES(mxfp6_e3m2, rf_mxfp6_e3m2, suffix, T)

RF_FOR_EACH_DTYPE(RF_MX_MXFP4)
RF_FOR_EACH_DTYPE(RF_MX_MXFP6_E2M3)
RF_FOR_EACH_DTYPE(RF_MX_MXFP6_E3M2)
