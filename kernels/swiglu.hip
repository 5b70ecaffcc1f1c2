// SwiGLU: out[r, j] = silu(gate[r, j]) * up[r, j] with silu(g) = g / (1 + exp(-g)), for
// r < rows and j < cols; row r of each tensor starts `*_stride` elements after row r - 1.
//
//   two tensors:   gate, up and out separate, rows = 1 and cols = the element count;
//   fused gate-up: gate = gate_up, up = gate_up + ffn, both with stride 2 * ffn (each row of
//                  gate_up is [gate | up]); out has stride ffn.
//
// Storage f32, f16 or bf16 (<dt>), arithmetic in f32, one rounding on the store.
//
// Speed: purely memory-bound. The rows' whole 16-byte vectors are numbered as one flat range
// (row * vectors_per_row + vector), cut into chunks of blockDim.x * RF_SWIGLU_UNROLL vectors;
// blocks walk the chunks grid-stride. Each thread issues the loads of its RF_SWIGLU_UNROLL
// vectors of gate and of up (blockDim.x apart, so each load of a warp is contiguous) before it
// computes and stores any. Flat numbering keeps every thread's unroll slots full whatever the
// row length (v1 mapped blocks to row segments, which left slots idle when the row was not a
// multiple of the segment: ffn = 11 008 used 2.7 of 4). One division per thread per chunk finds
// the (row, vector) of its first slot; the others follow by addition. Rows whose pointers or
// strides are not 16-byte aligned take the same loop with one element per access; cols % N
// elements of a vectorised row are a scalar tail, handled after the vectors.

#include "rocmforge.h"

// 16-byte vectors each thread loads from each input before it stores any.
#define RF_SWIGLU_UNROLL 4

// silu(g) * u without an infinite intermediate: with e = exp(-|g|) in (0, 1],
// silu(g) = g / (1 + e) for g >= 0 and g * e / (1 + e) for g < 0. v1's g / (1 + exp(-g))
// overflowed exp to infinity below g = -88.7 and returned -0 where the result is a tiny normal
// number. -inf and NaN gates still give NaN, as the f64 reference does.
RF_DEVICE float rf_silu_mul(float g, float u) {
    const float e = expf(-fabsf(g));
    const float num = g >= 0.0f ? g : g * e;
    return num / (1.0f + e) * u;
}

// (row, vector) of flat index p in rows of nv vectors. 32-bit division when both fit.
RF_DEVICE void rf_swiglu_divmod(rf_u64 p, rf_u64 nv, rf_u64* row, rf_u64* col) {
    if (((p | nv) >> 32) == 0) {
        const unsigned int q = (unsigned int)p / (unsigned int)nv;
        *row = q;
        *col = p - (rf_u64)q * nv;
    } else {
        *row = p / nv;
        *col = p - *row * nv;
    }
}

template <typename T, bool VECTOR>
RF_DEVICE void rf_swiglu_rows(const T* gate, const T* up, T* out, rf_u64 gate_stride, rf_u64 up_stride,
                              rf_u64 out_stride, rf_u64 rows, rf_u64 cols) {
    typedef rf_access<T, VECTOR> A;
    constexpr int V = A::V;
    constexpr int U = RF_SWIGLU_UNROLL;
    const rf_u64 nv = cols / (rf_u64)V;
    const rf_u64 tail = cols - nv * (rf_u64)V;
    const rf_u64 block = blockDim.x;
    const rf_u64 chunk = block * U;
    const rf_u64 total = rows * nv;  // < 2^63: the host checked rows * cols fits usize
    // Advancing a flat index by `block`: block / nv rows and block % nv vectors.
    rf_u64 brow;
    rf_u64 bcol;
    rf_swiglu_divmod(block, nv, &brow, &bcol);
    // Stepping a flat index by `block` moves each tensor's pointer by these many elements, plus
    // `*_wrap` more when the vector index passes the end of a row.
    const rf_u64 gate_step = brow * gate_stride + bcol * V;
    const rf_u64 up_step = brow * up_stride + bcol * V;
    const rf_u64 out_step = brow * out_stride + bcol * V;
    const rf_u64 gate_wrap = gate_stride - nv * V;
    const rf_u64 up_wrap = up_stride - nv * V;
    const rf_u64 out_wrap = out_stride - nv * V;
    for (rf_u64 base = (rf_u64)blockIdx.x * chunk; base < total; base += (rf_u64)gridDim.x * chunk) {
        const rf_u64 p0 = base + threadIdx.x;
        rf_u64 row0;
        rf_u64 col0;
        rf_swiglu_divmod(p0, nv, &row0, &col0);
        const T* g = gate + row0 * gate_stride + col0 * V;
        const T* u = up + row0 * up_stride + col0 * V;
        rf_u64 col = col0;
        typename A::Raw graw[U];
        typename A::Raw uraw[U];
#pragma unroll
        for (int k = 0; k < U; ++k) {
            if (p0 + (rf_u64)k * block < total) {
                graw[k] = A::load_raw(g);
                uraw[k] = A::load_raw(u);
            }
            col += bcol;
            g += gate_step;
            u += up_step;
            if (col >= nv) {
                col -= nv;
                g += gate_wrap;
                u += up_wrap;
            }
        }
        T* o = out + row0 * out_stride + col0 * V;
        col = col0;
#pragma unroll
        for (int k = 0; k < U; ++k) {
            if (p0 + (rf_u64)k * block < total) {
                float gv[V];
                float uv[V];
                A::unpack(graw[k], gv);
                A::unpack(uraw[k], uv);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    gv[e] = rf_silu_mul(gv[e], uv[e]);
                }
                A::store(o, gv);
            }
            col += bcol;
            o += out_step;
            if (col >= nv) {
                col -= nv;
                o += out_wrap;
            }
        }
    }
    // The scalar tails: `tail` (< V) elements after the vectors of each row.
    if (tail != 0) {
        const rf_u64 ntail = rows * tail;
        for (rf_u64 q = (rf_u64)blockIdx.x * block + threadIdx.x; q < ntail; q += (rf_u64)gridDim.x * block) {
            const rf_u64 row = q / tail;
            const rf_u64 j = nv * V + (q - row * tail);
            out[row * out_stride + j] =
                rf_from_float<T>(rf_silu_mul(rf_to_float(gate[row * gate_stride + j]), rf_to_float(up[row * up_stride + j])));
        }
    }
}

// Entry point. 1 <= rows, cols; rows * cols < 2^63; the host launcher checks that every row lies
// inside its buffer. A 1-D grid of any size (grid-stride). `out` must not overlap `gate` or `up`
// except exactly (out == gate or out == up with equal strides), since each element is read
// before the same thread writes it.
template <typename T>
RF_DEVICE void rf_swiglu(const T* gate, const T* up, T* out, rf_u64 gate_stride, rf_u64 up_stride,
                         rf_u64 out_stride, rf_u64 rows, rf_u64 cols) {
    constexpr rf_u64 N = (rf_u64)rf_pack16<T>::N;
    const bool vector = cols >= N && rf_is_aligned16(gate) && rf_is_aligned16(up) && rf_is_aligned16(out) &&
                        gate_stride % N == 0 && up_stride % N == 0 && out_stride % N == 0;
    if (vector) {
        rf_swiglu_rows<T, true>(gate, up, out, gate_stride, up_stride, out_stride, rows, cols);
    } else {
        rf_swiglu_rows<T, false>(gate, up, out, gate_stride, up_stride, out_stride, rows, cols);
    }
}

#define RF_SWIGLU_ENTRY(suffix, T)                                                                    \
    RF_KERNEL void rf_swiglu_##suffix(const T* gate, const T* up, T* out, rf_u64 gate_stride,           \
                                      rf_u64 up_stride, rf_u64 out_stride, rf_u64 rows, rf_u64 cols) { \
        rf_swiglu<T>(gate, up, out, gate_stride, up_stride, out_stride, rows, cols);                   \
    }

RF_FOR_EACH_DTYPE(RF_SWIGLU_ENTRY)
