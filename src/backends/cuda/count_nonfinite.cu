/* Counts inf and NaN in a device vector into a device counter (the dispatcher's non-finite statistics for inputs
 * that live on the GPU, such as a linear layer's bias). Nothing on the host waits for it. */
#include <cuda_runtime.h>

#include "fp8_math.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void count_nonfinite_kernel(const void *__restrict__ x, int dtype, int64_t n,
                                       unsigned long long *counter) {
    unsigned bad = 0;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += (int64_t)gridDim.x * kThreads)
        bad += !isfinite(bfp8_dev_load_f32(x, dtype, i));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) bad += __shfl_xor_sync(0xFFFFFFFFu, bad, off);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(counter, (unsigned long long)bad);
}

} // namespace

extern "C" int bfp8_cuda_launch_count_nonfinite(const void *x, int dtype, int64_t n, long long *counter,
                                                void *stream) {
    if (n <= 0) return 0;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 1024) blocks = 1024; /* grid-stride beyond that: a bias is a few thousand values */
    count_nonfinite_kernel<<<(unsigned)blocks, kThreads, 0, (cudaStream_t)stream>>>(x, dtype, n,
                                                                                    (unsigned long long *)counter);
    return (int)cudaGetLastError();
}
