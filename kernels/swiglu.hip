// SwiGLU: out[r, j] = silu(gate[r, j]) * up[r, j] with silu(g) = g / (1 + exp(-g)), for
// r < rows and j < cols; row r of each tensor starts `*_stride` elements after row r - 1.
//
//   two tensors:   gate, up and out separate, rows = 1 and cols = the element count;
//   fused gate-up: gate = gate_up, up = gate_up + ffn, both with stride 2 * ffn (each row of
//                  gate_up is [gate | up]); out has stride ffn.
//
// Storage f32, f16 or bf16 (<dt>), arithmetic in f32, one rounding on the store.
//
// Speed: purely memory-bound. A 2-D grid: blockIdx.y walks the rows, blockIdx.x and threadIdx.x
// the row's 16-byte vectors (grid-stride both ways, so any grid covers any shape and no
// per-element division is needed). On the 16-byte path (v4) each thread takes one vector of
// gate and of up per pass and the host launches a thread per vector, so a thread normally makes
// one pass: Triton's shape for elementwise kernels, measured faster than four vectors a thread
// (swiglu.md); the index is 32-bit whenever the row's vectors allow it. Rows whose pointers or
// strides are not 16-byte aligned take a scalar path (RF_SWIGLU_UNROLL elements a thread per
// pass); cols % N elements of a vectorised row are a scalar tail.

#include "rocmforge.h"
#include "rocmforge_dependent_launch.h"
#include "rocmforge_silu.h"
#include "rocmforge_swiglu_abi.h"

// 16-byte path: one vector of gate and of up a thread per pass, vector i of a row at
// i = blockIdx.x * blockDim.x + threadIdx.x, then every gridDim.x * blockDim.x. I is the index
// type: 32-bit when nv + that step cannot wrap it (the caller checks), else 64-bit.
template <typename T, typename I>
RF_DEVICE void rf_swiglu_vector_rows(const T* gate, const T* up, T* out, rf_u64 gate_stride, rf_u64 up_stride,
                                     rf_u64 out_stride, rf_u64 rows, rf_u64 cols) {
    typedef rf_pack16<T> P;
    constexpr int V = P::N;
    const I nv = (I)(cols / (rf_u64)V);
    const rf_u64 tail = cols - (rf_u64)nv * V;
    const I first = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
    const I step = (I)gridDim.x * (I)blockDim.x;
    for (rf_u64 row = blockIdx.y; row < rows; row += gridDim.y) {
        const T* g = gate + row * gate_stride;
        const T* u = up + row * up_stride;
        T* o = out + row * out_stride;
        for (I i = first; i < nv; i += step) {
            const uint4 graw = rf_load16(g + (rf_u64)i * V);
            const uint4 uraw = rf_load16(u + (rf_u64)i * V);
            float gv[V];
            float uv[V];
            P::unpack(graw, gv);
            P::unpack(uraw, uv);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                gv[e] = rf_silu_mul(gv[e], uv[e]);
            }
            rf_store16(o + (rf_u64)i * V, P::pack(gv));
        }
        if ((rf_u64)first < tail) {
            const rf_u64 j = (rf_u64)nv * V + first;
            o[j] = rf_from_float<T>(rf_silu_mul(rf_to_float(g[j]), rf_to_float(u[j])));
        }
    }
}

// Scalar path (any alignment): RF_SWIGLU_UNROLL elements of each input a thread per pass.
template <typename T, bool VECTOR>
RF_DEVICE void rf_swiglu_rows(const T* gate, const T* up, T* out, rf_u64 gate_stride, rf_u64 up_stride,
                              rf_u64 out_stride, rf_u64 rows, rf_u64 cols) {
    typedef rf_access<T, VECTOR> A;
    constexpr int V = A::V;
    constexpr int U = RF_SWIGLU_UNROLL;
    const rf_u64 nv = cols / (rf_u64)V;
    const rf_u64 tail = cols - nv * (rf_u64)V;
    const rf_u64 first = (rf_u64)blockIdx.x * blockDim.x + threadIdx.x;
    const rf_u64 step = (rf_u64)gridDim.x * blockDim.x;
    for (rf_u64 row = blockIdx.y; row < rows; row += gridDim.y) {
        const T* g = gate + row * gate_stride;
        const T* u = up + row * up_stride;
        T* o = out + row * out_stride;
        for (rf_u64 base = first; base < nv; base += U * step) {
            typename A::Raw graw[U];
            typename A::Raw uraw[U];
#pragma unroll
            for (int k = 0; k < U; ++k) {
                const rf_u64 i = base + (rf_u64)k * step;
                if (i < nv) {
                    graw[k] = A::load_raw(g + i * V);
                    uraw[k] = A::load_raw(u + i * V);
                }
            }
#pragma unroll
            for (int k = 0; k < U; ++k) {
                const rf_u64 i = base + (rf_u64)k * step;
                if (i < nv) {
                    float gv[V];
                    float uv[V];
                    A::unpack(graw[k], gv);
                    A::unpack(uraw[k], uv);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        gv[e] = rf_silu_mul(gv[e], uv[e]);
                    }
                    A::store(o + i * V, gv);
                }
            }
        }
        if (first < tail) {
            const rf_u64 j = nv * V + first;
            o[j] = rf_from_float<T>(rf_silu_mul(rf_to_float(g[j]), rf_to_float(u[j])));
        }
    }
}

// Entry point. 1 <= rows, cols; the host launcher checks that every row lies inside its buffer.
// `out` must not overlap `gate` or `up` except exactly (out == gate or out == up with equal
// strides), since each element is read before the same thread writes it.
template <typename T>
RF_DEVICE void rf_swiglu(const T* gate, const T* up, T* out, rf_u64 gate_stride, rf_u64 up_stride,
                         rf_u64 out_stride, rf_u64 rows, rf_u64 cols) {
    constexpr rf_u64 N = (rf_u64)rf_pack16<T>::N;
    const bool vector = cols >= N && rf_is_aligned16(gate) && rf_is_aligned16(up) && rf_is_aligned16(out) &&
                        gate_stride % N == 0 && up_stride % N == 0 && out_stride % N == 0;
    if (vector) {
        // 32-bit indices when i < nv plus one grid step stays below 2^32.
        const rf_u64 nv = cols / N;
        const rf_u64 step = (rf_u64)gridDim.x * blockDim.x;
        if (nv + step <= 0xffffffffull) {
            rf_swiglu_vector_rows<T, unsigned int>(gate, up, out, gate_stride, up_stride, out_stride, rows, cols);
        } else {
            rf_swiglu_vector_rows<T, rf_u64>(gate, up, out, gate_stride, up_stride, out_stride, rows, cols);
        }
    } else {
        rf_swiglu_rows<T, false>(gate, up, out, gate_stride, up_stride, out_stride, rows, cols);
    }
}

#define RF_SWIGLU_ENTRY(suffix, T)                                                                    \
    RF_KERNEL void rf_swiglu_##suffix(const T* gate, const T* up, T* out, rf_u64 gate_stride,           \
                                      rf_u64 up_stride, rf_u64 out_stride, rf_u64 rows, rf_u64 cols) { \
        rf_follow_prior_grid();                                                                        \
        rf_swiglu<T>(gate, up, out, gate_stride, up_stride, out_stride, rows, cols);                   \
    }

RF_FOR_EACH_DTYPE(RF_SWIGLU_ENTRY)
