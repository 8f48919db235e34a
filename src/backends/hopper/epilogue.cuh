/* hopper's split-K reduce: the second kernel of a plan whose K splits are not summed inside clusters. Device code for
 * launch.cu, its one includer (hence the unnamed namespace). */
#ifndef BFP8_HOPPER_EPILOGUE_CUH
#define BFP8_HOPPER_EPILOGUE_CUH

#include <cuda_runtime.h>

#include <stdint.h>
#include <string.h>

#include "backends/cuda/fp8_math.cuh"

namespace {
/* Sums the split-K partials of columns [n0, n) in split order, adds the bias, rounds once (columns below n0 came
 * from whole tiles, written by the GEMM). With vec (n and n0 multiples of 4, y 16-byte aligned) each thread handles
 * four adjacent outputs with 16-byte loads. The loads of up to kLoadsInFlight splits are issued before they are
 * added: a decode-sized reduce has few threads, and one dependent load after another (~0.5 us each from HBM) made it
 * latency-bound (7 us for 16 splits of 7168 outputs, measured with ncu). */
constexpr int kLoadsInFlight = 8;

template <int V> struct Lanes;
template <> struct Lanes<1> {
    float v[1];
    __device__ __forceinline__ void load(const float *p) { v[0] = *p; }
};
template <> struct Lanes<4> {
    float v[4];
    __device__ __forceinline__ void load(const float *p) {
        const float4 q = *(const float4 *)p;
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
};

template <int V>
__device__ __forceinline__ void reduce_lanes(const float *__restrict__ ws, int splits, int64_t m, int64_t n, int64_t n0,
                                             const void *__restrict__ bias, int bias_dtype, void *__restrict__ y,
                                             int y_dtype) {
    const int64_t mn = m * n, cols = n - n0, count = m * cols;
    const int64_t step = (int64_t)gridDim.x * blockDim.x * V;
    for (int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V; e < count; e += step) {
        const int64_t col = n0 + e % cols, o = (e / cols) * n + col;
        float v[V];
#pragma unroll
        for (int x = 0; x < V; x++) v[x] = -0.0f; /* -0 + x == x for every x */
        for (int s0 = 0; s0 < splits; s0 += kLoadsInFlight) {
            Lanes<V> part[kLoadsInFlight];
#pragma unroll
            for (int j = 0; j < kLoadsInFlight; j++)
                if (s0 + j < splits) part[j].load(ws + (s0 + j) * mn + o);
#pragma unroll
            for (int j = 0; j < kLoadsInFlight; j++)
                if (s0 + j < splits)
#pragma unroll
                    for (int x = 0; x < V; x++) v[x] += part[j].v[x];
        }
#pragma unroll
        for (int x = 0; x < V; x++) {
            if (bias_dtype >= 0) v[x] += bfp8_dev_load_f32(bias, bias_dtype, col + x);
            if (V == 1) bfp8_dev_store_f32(y, y_dtype, o, v[0]);
        }
        if (V == 4 && y_dtype == 0) {
            *(float4 *)((float *)y + o) = make_float4(v[0], v[1], v[2], v[3]);
        } else if (V == 4) {
            uint2 packed;
            if (y_dtype == 1) {
                __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
                memcpy(&packed.x, &lo, 4);
                memcpy(&packed.y, &hi, 4);
            } else {
                __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);
                memcpy(&packed.x, &lo, 4);
                memcpy(&packed.y, &hi, 4);
            }
            *(uint2 *)((uint16_t *)y + o) = packed;
        }
    }
}

__global__ void hopper_splitk_reduce(const float *__restrict__ ws, int splits, int64_t m, int64_t n, int64_t n0,
                                     const void *__restrict__ bias, int bias_dtype, void *__restrict__ y, int y_dtype,
                                     int vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* Launched as a programmatic dependent of the GEMM: wait until its partials are complete and visible. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    if (vec)
        reduce_lanes<4>(ws, splits, m, n, n0, bias, bias_dtype, y, y_dtype);
    else
        reduce_lanes<1>(ws, splits, m, n, n0, bias, bias_dtype, y, y_dtype);
}

} // namespace

#endif
