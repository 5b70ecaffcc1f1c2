// rf_stream_read: reads every 16-byte vector of a buffer once and writes, per block, the wrapping
// sum of the 32-bit words it read. The benchmarks' read-only ceiling: what a kernel that only
// streams a weight in (a matrix-vector product) can reach, which the copy (read plus write) row
// does not show. rf_stream_read_dependent: the same for a dependent launch (the floor of a chain
// of products launched one after another, `bench model`'s layer reads).

#include "rocmforge.h"
#include "rocmforge_dependent_launch.h"

#define RF_STREAM_READ_THREADS 256
#define RF_STREAM_READ_UNROLL 4

// n vectors at src; partial[blockIdx.x] = sum of the block's words (mod 2^32). Grid-stride with
// RF_STREAM_READ_UNROLL independent loads a thread in flight; blockDim.x = RF_STREAM_READ_THREADS.
// DEPENDENT (rf_stream_read_dependent, for a dependent launch): the thread's first loads are
// issued before it waits for the kernel ahead, as the matrix-vector products issue their first
// weight copies (rocmforge_dependent_launch.h), and nothing is written before the wait.
template <bool DEPENDENT>
RF_DEVICE void rf_stream_read_body(const uint4* src, unsigned long long n, unsigned* partial) {
    __shared__ unsigned sums[RF_STREAM_READ_THREADS];
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    bool waited = !DEPENDENT;
    for (; i + (RF_STREAM_READ_UNROLL - 1) * stride < n; i += RF_STREAM_READ_UNROLL * stride) {
        uint4 v[RF_STREAM_READ_UNROLL];
#pragma unroll
        for (int u = 0; u < RF_STREAM_READ_UNROLL; ++u) {
            v[u] = src[i + u * stride];
        }
        if (!waited) {
            rf_follow_prior_grid();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < RF_STREAM_READ_UNROLL; ++u) {
            acc += v[u].x + v[u].y + v[u].z + v[u].w;
        }
    }
    if (!waited) {
        rf_follow_prior_grid();
    }
    for (; i < n; i += stride) {
        const uint4 v = src[i];
        acc += v.x + v.y + v.z + v.w;
    }
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            sums[threadIdx.x] += sums[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = sums[0];
    }
}

RF_KERNEL void __launch_bounds__(RF_STREAM_READ_THREADS)
    rf_stream_read(const uint4* src, unsigned long long n, unsigned* partial) {
    rf_stream_read_body<false>(src, n, partial);
}
RF_KERNEL void __launch_bounds__(RF_STREAM_READ_THREADS)
    rf_stream_read_dependent(const uint4* src, unsigned long long n, unsigned* partial) {
    rf_stream_read_body<true>(src, n, partial);
}
