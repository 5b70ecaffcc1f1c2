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

#include "rocmforge_dependent_launch.h"
#include "rocmforge_quant.h"
#include "rocmforge_mma.h"
#include "rocmforge_mxfp_abi.h"
#include "rocmforge_products.h"

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
// Matrix-vector product on matrix cores (NVIDIA sm_80+): rf_mxfp4_matvec_mma_<f16|bf16>,
// rf_mxfp6_<e2m3|e3m2>_matvec_mma_f16
// ---------------------------------------------------------------------------------------------
//
// Why: the portable kernel spends about 4 instructions an element (a code cut out, a table read
// from shared memory, an f32 FMA) and stages synchronously; it holds 0.2 of copy bandwidth.
// Here mma.m16n8k16 does the multiply-adds (16 rows x 16 elements an instruction), and what is
// left an element is its decode into an exact f16/bf16 value in registers.
//
// Layout of the work: a block owns RF_MXM_ROWS = 16 rows (one m16 tile); its warps (up to
// RF_MXM_WARPS) split k into chunks of RF_MXM_CHUNK = 16 weight blocks (512 elements), warp w
// taking chunks w, w + warps, ... Each warp copies its 16 rows' bytes of a chunk (16 x 272 for
// MXFP4, 16 x 400 for MXFP6) and the chunk's x (1 KB) into its own shared stage with cp.async,
// the next chunk in flight while it decodes this one. With k % 512 == 0 rows are 16-byte
// aligned and copied as they are; other k (the _anyk entries) copy the 16-byte vectors covering
// each row's chunk and decode from the row's byte offset in its first vector. A stage row is
// padded to 4 mod 32 words (272 or 400 bytes are 68 or 100 words already), so the 8 rows a warp
// reads at once fall in distinct banks. x comes through shared memory because every lane reads
// it once a block: from global memory that was an L2 round trip on the critical path (L1 is
// mostly shared memory here).
//
// Fragments (lane = 4 g + t): for every weight block, thread t takes a quarter of the payload of
// rows g and g + 8 (MXFP4: word t, elements 4t..4t+3 in the low nibbles, 16+4t..16+4t+3 in the
// high ones, step 0 the low nibbles and step 1 the high; MXFP6: codes 8t..8t+7, step 0 the first
// four). k inside a step is ordered so that A's register pairs (a0, a2) meet x as it lies in
// memory (B's b0, b1: consecutive pairs of x). B is the same in all 8 columns, so every
// column of D holds the row's block sum. Each block's two steps start from zero; the block sum
// (f32) times the E8M0 scale (a power of two: exact) is added to the row's f32 total, so every
// product is exact and the sums are f32, as in the portable kernel. The four lanes of a row hold
// the same block sums, so lane t adds blocks t, t + 4, ... of each chunk (the ones whose scales
// it decodes) and the four totals meet at the tile's end; the warps' totals are added in shared
// memory in a fixed order.
//
// Decoding a thread's 8 codes into A pairs:
//   f16:  bit placement, no table: a code's magnitude bits under the f16 exponent and mantissa
//         are its value times 2^(bias - 15) exactly (E2M1 and E2M3: 2^-14, E3M2: 2^-12; codes
//         with a zero exponent become f16 subnormals, which the tensor cores take as they are;
//         the GPU tests cover every code), the sign at bit 15; the block sum is multiplied
//         back (exact).
//   bf16 (MXFP4 only): a bf16 subnormal times an activation would underflow in f32, so the
//         eight magnitudes come from a byte-permute table held in registers, exact bf16
//         values. MXFP6 with bf16, and f32 activations, run the portable kernel.
//
// A launch takes one product (w, y, n) or, in the _group entries, a product list of up to
// RF_QMV_MAX_PRODUCTS over the same x (rf_qmv_products, rocmforge_products.h): the blocks take
// the 16-row tiles of all its products, numbered one product after another, in turn. Each
// tile's computation is the same either way, so a product's output has the same bits.
//
// Entry: blockDim.x a multiple of 32 up to 32 * RF_MXM_WARPS, k % 512 == 0 (_anyk: k % 32 == 0),
// 16 * row bytes < 2^32, the tiles of all products below 2^31, every w, y and x 16-byte
// aligned; dynamic shared memory warps * RF_MXM_STAGES * (16 * stage row bytes + 1024) + warps
// * 16 * 4 (matvec_mma_shared_bytes in mxfp.rs).

#if RF_MMA_SYNC

// Per format and activation type: UNIT (what the decoded values are scaled by, undone on the
// block sums), piece(stage row, delta, b, t, a) (thread t's codes of block b of a staged row
// whose blocks start delta bytes in, decoded into the A pairs of the block's two mma steps) and
// x(block's x, t) (the matching B pairs: step 0's b0, b1, step 1's b0, b1).
template <typename F, typename T> struct rf_mxm;

// MXFP4: thread t takes payload word t (elements 4t..4t+3 low nibbles, +16 high nibbles).
template <typename T> struct rf_mxm_mxfp4 {
    // Word t of block b: bytes o + 4t .. o + 4t + 3, o = delta + 17 b + 1, of the 16-byte
    // aligned stage row whose blocks start `delta` bytes in; with delta = 0 (rows of whole
    // 16-byte chunks) o % 4 is a compile-time constant once b is unrolled.
    static RF_DEVICE unsigned word(const unsigned char* row, int delta, int b, int t) {
        const int o = delta + b * rf_mxfp4::BLOCK_BYTES + 1;
        const unsigned* p = reinterpret_cast<const unsigned*>(row) + (o >> 2) + t;
        const unsigned shift = 8u * (unsigned)(o & 3);
        return shift ? __funnelshift_r(p[0], p[1], shift) : p[0];
    }
    static RF_DEVICE uint4 x(const T* xb, int t) {
        const uint2 lo = *reinterpret_cast<const uint2*>(xb + 4 * t);
        const uint2 hi = *reinterpret_cast<const uint2*>(xb + 16 + 4 * t);
        return make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
};
template <typename T> struct rf_mxm<rf_mxfp4, T> : rf_mxm_mxfp4<T> {
    static constexpr float UNIT = rf_e2m1_mma<T>::UNIT;
    static RF_DEVICE void piece(const unsigned char* row, int delta, int b, int t, unsigned (&a)[2][2]) {
        rf_e2m1_mma<T>::run(rf_mxm_mxfp4<T>::word(row, delta, b, t), a);
    }
};

// MXFP6 with f16 activations: thread t takes payload bytes 6t..6t+5 (codes 8t..8t+7); step 0
// multiplies codes 8t..8t+3, step 1 codes 8t+4..8t+7, against x[8t..8t+7] as it lies. A code's
// five magnitude bits under the f16 exponent and mantissa (shifted by 10 - MBITS) are its value
// times 2^(BIAS - 15) exactly (E2M3: 2^-14, E3M2: 2^-12; exponent-0 codes as f16 subnormals).
template <int EBITS, int MBITS> struct rf_mxm<rf_mxfp6<EBITS, MBITS>, __half> {
    static constexpr int SHIFT = 10 - MBITS;
    static constexpr float UNIT = (float)(1 << (15 - ((1 << (EBITS - 1)) - 1))); // 2^(15 - bias)
    static constexpr unsigned MAG = 0x1fu << SHIFT;
    // Codes at bits 0 and 6 of q -> an f16 pair.
    static RF_DEVICE unsigned pair(unsigned q) {
        const unsigned u = (q & 0x3fu) | ((q << 10) & 0x3f0000u); // the codes at 0 and 16
        return ((u << SHIFT) & (MAG | (MAG << 16))) | ((u << 10) & 0x80008000u);
    }
    static RF_DEVICE void piece(const unsigned char* row, int delta, int b, int t, unsigned (&a)[2][2]) {
        const int o = delta + b * rf_mxfp6<EBITS, MBITS>::BLOCK_BYTES + 1 + 6 * t; // 6t: the lane's alignment
        const unsigned* p = reinterpret_cast<const unsigned*>(row) + (o >> 2);
        const unsigned shift = 8u * (unsigned)(o & 3);
        const unsigned lo = __funnelshift_r(p[0], p[1], shift); // bits 0..31 of the 48
        const unsigned hi = __funnelshift_r(p[1], p[2], shift); // bits 32..63
        const unsigned q0 = lo;                                  // codes 0..3 at 0, 6, 12, 18
        const unsigned q1 = __funnelshift_r(lo, hi, 24);         // codes 4..7 likewise
        a[0][0] = pair(q0);
        a[0][1] = pair(q0 >> 12);
        a[1][0] = pair(q1);
        a[1][1] = pair(q1 >> 12);
    }
    static RF_DEVICE uint4 x(const __half* xb, int t) { return *reinterpret_cast<const uint4*>(xb + 8 * t); }
};

// Words of a stage row: ROW bytes (ANY_K: the 16-byte vectors covering them from up to 15 bytes
// before), rounded up to 4 mod 32 words so that the 8 rows a warp reads at once start in
// distinct banks.
template <int ROW, bool ANY_K> struct rf_mxm_stage_row {
    static constexpr int NEED = ANY_K ? 4 * ((ROW + 30) / 16) : ROW / 4;
    static constexpr int WORDS = NEED + ((4 - NEED % 32) + 32) % 32;
};

// The products of `p` (one for the single-product entries), their 16-row tiles numbered one
// product after another and taken by the blocks in turn: a layer's Q, K and V (4096, 1024 and
// 1024 rows at 8B shapes) in one launch fill the device where K and V alone would not.
template <typename F, typename T, bool ANY_K>
RF_DEVICE void rf_mx_matvec_mma(const rf_qmv_products& p, const T* x, rf_u64 k) {
    typedef rf_mxm<F, T> D;
    constexpr int BB = F::BLOCK_BYTES;
    constexpr int ROW = RF_MXM_CHUNK * BB; // bytes of a row's chunk: 272 (MXFP4), 400 (MXFP6)
    constexpr int VECS = ROW / 16;
    constexpr int RS = 4 * rf_mxm_stage_row<ROW, ANY_K>::WORDS;   // stage row stride, bytes
    constexpr int AV = (ROW + 30) / 16;                           // ANY_K: vectors copied a row
    static_assert(ANY_K || RS == ROW, "whole-chunk rows are stored unpadded");
    constexpr int WBYTES = RF_MXM_ROWS * RS;                      // the rows' chunk
    constexpr int XBYTES = RF_QK * RF_MXM_CHUNK * (int)sizeof(T); // the chunk's x: 1024
    constexpr int STAGE = WBYTES + XBYTES;
    constexpr int COPIES = (RF_MXM_ROWS * VECS + 31) / 32; // 16-byte weight copies a lane issues
    extern __shared__ __align__(16) unsigned char rf_mxm_smem[];
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int warps = (int)blockDim.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    unsigned char* stages = rf_mxm_smem + warp * RF_MXM_STAGES * STAGE;
    float* totals = reinterpret_cast<float*>(rf_mxm_smem + warps * RF_MXM_STAGES * STAGE);
    const rf_u64 nblocks = k / RF_QK;
    const rf_u64 chunks = (nblocks + RF_MXM_CHUNK - 1) / RF_MXM_CHUNK;
    const rf_u64 row_bytes = nblocks * BB;
    // The launcher keeps the tiles of all products below 2^31.
    const unsigned tiles0 = (unsigned)((p.rows[0] + RF_MXM_ROWS - 1) / RF_MXM_ROWS);
    const unsigned tiles01 = tiles0 + (unsigned)((p.rows[1] + RF_MXM_ROWS - 1) / RF_MXM_ROWS);
    const unsigned tiles = tiles01 + (unsigned)((p.rows[2] + RF_MXM_ROWS - 1) / RF_MXM_ROWS);
    // Lane's copies: copy j is 16-byte vector i = lane + 32 j of the stage, row i / VECS. Its
    // offset from the chunk's start in row 0 fits 32 bits (the launcher checks 16 row_bytes).
    unsigned src_off[COPIES];
#pragma unroll
    for (int j = 0; j < COPIES; ++j) {
        const int i = lane + 32 * j;
        src_off[j] = (unsigned)(i / VECS) * (unsigned)row_bytes + 16u * (unsigned)(i % VECS);
    }
    constexpr int ACOPIES = (RF_MXM_ROWS * AV + 31) / 32; // ANY_K: vectors a lane copies per chunk

    const rf_l2_policy stream = rf_l2_evict_first(); // the weights: rocmforge_mma.h
    bool first = true; // before the block's first wait for the kernel ahead
    // Uniform across the block: every thread reaches both barriers.
    for (unsigned gt = blockIdx.x; gt < tiles; gt += gridDim.x) {
        const int prod = gt < tiles0 ? 0 : gt < tiles01 ? 1 : 2;
        const unsigned char* w = rf_products_pick(p.w, prod);
        T* y = reinterpret_cast<T*>(rf_products_pick(p.y, prod));
        const rf_u64 n = rf_products_pick(p.rows, prod);
        const rf_u64 row0 = (rf_u64)(gt - (prod == 0 ? 0u : prod == 1 ? tiles0 : tiles01)) * RF_MXM_ROWS;
        const unsigned char* w_end = w + n * row_bytes;
        const unsigned char* tile = w + row0 * row_bytes;
        const int rows = n - row0 < RF_MXM_ROWS ? (int)(n - row0) : RF_MXM_ROWS;
        // ANY_K: where rows g and g + 8 start within their first 16-byte vector (chunks are
        // 16-byte multiples, so the same in every chunk); rows of whole chunks start at 0.
        const int delta_g = ANY_K ? (int)(((row0 + (rf_u64)g) * row_bytes) & 15u) : 0;
        const int delta_h = ANY_K ? (int)(((row0 + (rf_u64)g + 8u) * row_bytes) & 15u) : 0;
        // Weight blocks of chunk c that exist: all but possibly the last chunk's (ANY_K).
        auto chunk_blocks = [&](rf_u64 c) -> int {
            return ANY_K && nblocks - c * RF_MXM_CHUNK < RF_MXM_CHUNK ? (int)(nblocks - c * RF_MXM_CHUNK)
                                                                    : RF_MXM_CHUNK;
        };
        // Chunk c of the tile's rows -> stage s (stage_w) and of x (stage_x); rows past n are
        // zero-filled (nothing read).
        auto stage_w = [&](rf_u64 c, int s) {
            unsigned char* dst = stages + s * STAGE;
            const unsigned char* src = tile + c * ROW;
            if (!ANY_K) {
#pragma unroll
                for (int j = 0; j < COPIES; ++j) {
                    const int i = lane + 32 * j;
                    if (RF_MXM_ROWS * VECS % 32 == 0 || i < RF_MXM_ROWS * VECS) {
                        const bool ok = i < rows * VECS;
                        rf_cp_async16_policy(dst + 16 * i, ok ? src + src_off[j] : src, ok ? 16 : 0, stream); // RS == ROW
                    }
                }
            } else {
                // Rows of any length: the 16-byte vectors that cover each row's chunk, from the
                // one holding its first byte (inside w, which starts aligned); a vector past the
                // end of w is cut short (zero-filled), and rows past n are not read at all.
#pragma unroll
                for (int j = 0; j < ACOPIES; ++j) {
                    const int i = lane + 32 * j;
                    const int r = i / AV;
                    const int v = i - r * AV;
                    if (RF_MXM_ROWS * AV % 32 == 0 || i < RF_MXM_ROWS * AV) {
                        const unsigned char* row = src + (rf_u64)r * row_bytes;
                        const unsigned char* vec = row - (reinterpret_cast<rf_u64>(row) & 15u) + 16 * v;
                        const rf_u64 left = r < rows && vec < w_end ? (rf_u64)(w_end - vec) : 0u;
                        unsigned char* to = dst + r * RS + 16 * v;
                        if (left >= 16u) {
                            rf_cp_async16_policy(to, vec, 16, stream);
                        } else {
                            // The vector w ends in (or one past it): read only w's bytes and
                            // zero the rest. A 16-byte cp.async with a shorter source size
                            // still names 16 bytes at `vec`, past the end of w, and
                            // compute-sanitizer reports it as an out-of-bounds read. One vector
                            // a row at the very end of w: plain loads cost nothing here.
                            for (int b = 0; b < 16; ++b) {
                                to[b] = (rf_u64)b < left ? vec[b] : (unsigned char)0;
                            }
                        }
                    }
                }
            }
        };
        auto stage_x = [&](rf_u64 c, int s) {
            unsigned char* dst = stages + s * STAGE;
            const unsigned char* xsrc = reinterpret_cast<const unsigned char*>(x + c * (RF_QK * RF_MXM_CHUNK));
            // x of the chunk's blocks that exist.
            const int xvecs = chunk_blocks(c) * RF_QK * (int)sizeof(T) / 16;
            for (int i = lane; i < xvecs; i += 32) {
                rf_cp_async16(dst + WBYTES + 16 * i, xsrc + 16 * i, 16);
            }
        };
        float total_g = 0.0f; // row g
        float total_h = 0.0f; // row g + 8
        int s = 0;
        if ((rf_u64)warp < chunks) {
            stage_w((rf_u64)warp, 0);
        }
        // The weights need nothing of the kernel ahead (a dependent launch:
        // rocmforge_dependent_launch.h), so the block's first copies of them are issued before
        // its wait; x's, and every write, come after. Uniform across the block.
        if (first) {
            rf_follow_prior_grid();
            first = false;
        }
        if ((rf_u64)warp < chunks) {
            stage_x((rf_u64)warp, 0);
        }
        rf_cp_async_commit();
        for (rf_u64 c = (rf_u64)warp; c < chunks; c += (rf_u64)warps) {
            if (c + (rf_u64)warps < chunks) {
                stage_w(c + (rf_u64)warps, s ^ 1);
                stage_x(c + (rf_u64)warps, s ^ 1);
            }
            rf_cp_async_commit();
            rf_cp_async_wait<1>(); // chunk c has landed (this lane's copies) ...
            __syncwarp();          // ... and every lane's
            const unsigned char* rg = stages + s * STAGE + g * RS;
            const unsigned char* rh = rg + 8 * RS;
            const int cb = chunk_blocks(c);
            // The chunk's 32 scales (16 blocks of rows g and g + 8) are decoded once per group
            // of four lanes: lane t takes blocks t, t + 4, t + 8, t + 12, and adds only those
            // blocks' sums (below).
            float scale_g[RF_MXM_CHUNK / 4];
            float scale_h[RF_MXM_CHUNK / 4];
#pragma unroll
            for (int j = 0; j < RF_MXM_CHUNK / 4; ++j) {
                scale_g[j] = rf_e8m0_to_float(rg[delta_g + (4 * j + t) * BB]);
                scale_h[j] = rf_e8m0_to_float(rh[delta_h + (4 * j + t) * BB]);
            }
            const T* xc = reinterpret_cast<const T*>(stages + s * STAGE + WBYTES);
#pragma unroll
            for (int b = 0; b < RF_MXM_CHUNK; ++b) {
                if (ANY_K && b >= cb) {
                    break; // uniform across the warp
                }
                unsigned ag[2][2];
                unsigned ah[2][2];
                D::piece(rg, delta_g, b, t, ag);
                D::piece(rh, delta_h, b, t, ah);
                const uint4 xb = D::x(xc + b * RF_QK, t);
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                const unsigned a0[4] = {ag[0][0], ah[0][0], ag[0][1], ah[0][1]};
                const unsigned a1[4] = {ag[1][0], ah[1][0], ag[1][1], ah[1][1]};
                rf_mma<T>::run(d, a0, xb.x, xb.y);
                rf_mma<T>::run(d, a1, xb.z, xb.w);
                // Every column of D holds the row's block sum (B's columns are all x), so the
                // four lanes of a row hold the same sums: lane t adds its own blocks' (b % 4 ==
                // t) with the scales it decoded, and the four totals meet at the tile's end.
                if ((b & 3) == t) {
                    total_g = fmaf(d[0] * D::UNIT, scale_g[b >> 2], total_g);
                    total_h = fmaf(d[2] * D::UNIT, scale_h[b >> 2], total_h);
                }
            }
            __syncwarp(); // every lane is done with stage s before it is refilled
            s ^= 1;
        }
        // The four lanes' totals of each row, in a fixed order (every lane of the warp gets here).
        total_g += __shfl_xor_sync(0xffffffffu, total_g, 1);
        total_h += __shfl_xor_sync(0xffffffffu, total_h, 1);
        total_g += __shfl_xor_sync(0xffffffffu, total_g, 2);
        total_h += __shfl_xor_sync(0xffffffffu, total_h, 2);
        if (t == 0) {
            totals[warp * RF_MXM_ROWS + g] = total_g;
            totals[warp * RF_MXM_ROWS + g + 8] = total_h;
        }
        __syncthreads();
        if ((int)threadIdx.x < rows) {
            float sum = 0.0f;
            for (int i = 0; i < warps; ++i) {
                sum += totals[i * RF_MXM_ROWS + threadIdx.x];
            }
            y[row0 + threadIdx.x] = rf_from_float<T>(sum);
        }
        __syncthreads(); // the totals are read before the next tile writes them
    }
}

// One product: the list of just it.
#define RF_MXM_BODY(F, T, ANY_K)                                                        \
    rf_qmv_products p = {};                                                             \
    p.w[0] = w;                                                                         \
    p.y[0] = y;                                                                         \
    p.rows[0] = n;                                                                      \
    rf_mx_matvec_mma<F, T, ANY_K>(p, x, k);
#define RF_MXM_GROUP_BODY(F, T, ANY_K) rf_mx_matvec_mma<F, T, ANY_K>(p, x, k);
#else
#define RF_MXM_BODY(F, T, ANY_K) RF_MMA_UNAVAILABLE();
#define RF_MXM_GROUP_BODY(F, T, ANY_K) RF_MMA_UNAVAILABLE();
#endif // RF_MMA_SYNC

// At most 128 threads; 5 blocks an SM is what shared memory allows for MXFP4 (43 KB each), and
// asking for it keeps registers at a level that fits them.
#define RF_MXM_ENTRY(name, F, T, ANY_K)                                                 \
    RF_KERNEL void __launch_bounds__(32 * RF_MXM_WARPS, 5)                              \
        name(const unsigned char* w, const T* x, T* y, rf_u64 n, rf_u64 k) {            \
        RF_MXM_BODY(F, T, ANY_K)                                                        \
    }
// A product list (rows 0: unused) over one x, with quant_matvec_mma's parameters so that one
// launcher serves both; `batch` is 1 (one vector: these entries have no passes).
#define RF_MXM_GROUP_ENTRY(name, F, T, ANY_K)                                           \
    RF_KERNEL void __launch_bounds__(32 * RF_MXM_WARPS, 5)                              \
        name(const rf_qmv_products p, const T* x, rf_u64 k, unsigned batch) {           \
        (void)batch;                                                                    \
        RF_MXM_GROUP_BODY(F, T, ANY_K)                                                  \
    }
// rf_<fmt>_matvec_mma_<dt>: k % 512 == 0; rf_<fmt>_matvec_mma_anyk_<dt>: any k % 32 == 0;
// rf_<fmt>_matvec_mma_group_<dt>: a product list, k % 512 == 0 (an _anyk list spilled at this
// register budget, 32-96 bytes; other k run a launch a product).
#define RF_MXM_ENTRIES(fmt, F, suffix, T)                                               \
    RF_MXM_ENTRY(rf_##fmt##_matvec_mma_##suffix, F, T, false)                           \
    RF_MXM_ENTRY(rf_##fmt##_matvec_mma_anyk_##suffix, F, T, true)                       \
    RF_MXM_GROUP_ENTRY(rf_##fmt##_matvec_mma_group_##suffix, F, T, false)
RF_MXM_ENTRIES(mxfp4, rf_mxfp4, f16, __half)
RF_MXM_ENTRIES(mxfp4, rf_mxfp4, bf16, rf_bf16)
RF_MXM_ENTRIES(mxfp6_e2m3, rf_mxfp6_e2m3, f16, __half)
RF_MXM_ENTRIES(mxfp6_e3m2, rf_mxfp6_e3m2, f16, __half)

// ---------------------------------------------------------------------------------------------
// Matrix-matrix product
// ---------------------------------------------------------------------------------------------

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
        rf_follow_prior_grid();                                                                             \
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
