/* The one rounding of a row-parallel layer: the all-reduced fp32 sums into the output dtype. */
#include <cuda_runtime.h>

#include "fp8_math.cuh"
extern "C" {
#include "tp_internal.h"
}

namespace {
__global__ void f32_convert(const float *src, void *dst, int dtype, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        bfp8_dev_store_f32(dst, dtype, (int64_t)i, src[i]);
}
} // namespace

extern "C" int bfp8_cuda_launch_f32_convert(const float *src, void *dst, int dtype, size_t n, void *stream) {
    if (n == 0) return 0;
    size_t blocks = (n + 255) / 256;
    f32_convert<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, (cudaStream_t)stream>>>(src, dst, dtype, n);
    return (int)cudaGetLastError();
}
