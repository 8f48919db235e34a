/* The fixed costs under the bench's timing method, measured on their own (docs/hopper.md, "Floors").
 *
 * Every figure is the median of event-to-event times with the L2 flushed clean before each run, exactly as
 * `blockfp8 bench --device cuda` times a GEMM: the floor a decode-sized GEMM cannot go under, and the price of
 * each piece a split-K GEMM adds (a memset, a second kernel launched as a programmatic dependent). The read
 * kernel streams a weight-sized buffer with 16-byte loads from 1, 2 or 4 CTAs per SM, so its time over bytes is
 * the read rate a GEMM's weight stream can hope for. The bench spins the GPU ~100 us between the flush and the
 * start event (cli_cuda_time's hold), and so does this tool. bench/RESULTS.md has its figures.
 *
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o build/launch_floor bench/probes/launch_floor.cu && build/launch_floor
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "tool_check.h" /* CK */

__global__ void empty_kernel(int *sink) {
    if (sink && threadIdx.x == 1024) *sink = 1; /* never true: keeps the kernel from being empty to the compiler */
}

__global__ void dependent_kernel(int *sink) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    if (sink && threadIdx.x == 1024) *sink = 1;
}

__global__ void primary_kernel(int *sink) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    if (sink && threadIdx.x == 1024) *sink = 1;
}

/* Sums a buffer with 16-byte loads, 4 in flight per thread; the sum goes to sink so the loads stay. */
__global__ void read_kernel(const uint4 *buf, size_t n16, unsigned *sink) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = __ldcs(buf + i + j * stride);
#pragma unroll
        for (int j = 0; j < 4; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldcs(buf + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *sink = acc;
}

/* Reads an [n][k] byte matrix as the swapped GEMM does: a unit is (128-row tile, K range), and per K block the
 * 128 rows' 128-byte pieces (16 KB), 8 blocks in flight per CTA (128 KB). blocked: the same bytes stored with each
 * 128 x 128 block contiguous, to tell the row-major layout's cost from the pipeline's. */
template <bool BLOCKED>
__global__ void tile_read_kernel(const uint4 *w, int64_t k, int tiles, int kblocks, int splits, unsigned *sink) {
    constexpr int kAhead = 8;
    unsigned acc = 0;
    const int per = (kblocks + splits - 1) / splits;
    for (int unit = blockIdx.x; unit < tiles * splits; unit += gridDim.x) {
        const int tile = unit % tiles, split = unit / tiles;
        const int kb0 = split * per, kb1 = min(kblocks, kb0 + per);
        for (int kb = kb0; kb < kb1; kb += kAhead) {
            uint4 v[2 * kAhead];
#pragma unroll
            for (int j = 0; j < kAhead; j++) {
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int chunk = threadIdx.x + c * 512, row = chunk / 8, col16 = chunk % 8;
                    const int64_t row_major = (((int64_t)tile * 128 + row) * k + (int64_t)(kb + j) * 128) / 16;
                    const int64_t off = BLOCKED ? ((int64_t)tile * kblocks + kb + j) * 1024 + chunk : row_major + col16;
                    v[2 * j + c] = kb + j < kb1 ? __ldcs(w + off) : make_uint4(0, 0, 0, 0);
                }
            }
#pragma unroll
            for (int j = 0; j < 2 * kAhead; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
        }
    }
    if (acc == 0x12345678u) *sink = acc;
}

/* One thread spinning for `cycles` clock cycles: cli_cuda_time's hold before the start event. */
__global__ void hold_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

struct Ctx {
    cudaStream_t s;
    int sms;
    int *sink;
    void *small; /* memset target */
};

template <typename F> double median_us(const Ctx &c, const uint4 *flush, size_t flush16, F &&work, int iters = 50) {
    std::vector<cudaEvent_t> ev(2 * iters);
    for (auto &e : ev) CK(cudaEventCreate(&e));
    for (int i = 0; i < 5; i++) work();
    for (int i = 0; i < iters; i++) {
        read_kernel<<<c.sms * 4, 512, 0, c.s>>>(flush, flush16, (unsigned *)c.sink);
        hold_kernel<<<1, 1, 0, c.s>>>(200000);
        CK(cudaEventRecord(ev[2 * i], c.s));
        work();
        CK(cudaEventRecord(ev[2 * i + 1], c.s));
    }
    CK(cudaStreamSynchronize(c.s));
    std::vector<double> t(iters);
    for (int i = 0; i < iters; i++) {
        float ms;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms * 1000.0;
    }
    for (auto &e : ev) CK(cudaEventDestroy(e));
    std::sort(t.begin(), t.end());
    return t[iters / 2];
}

int main() {
    Ctx c;
    CK(cudaStreamCreate(&c.s));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    c.sms = prop.multiProcessorCount;
    const size_t flush_bytes = 2 * (size_t)prop.l2CacheSize;
    const size_t max_weights = 256ull << 20;
    uint4 *flush, *weights;
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaMalloc(&weights, max_weights));
    CK(cudaMalloc(&c.sink, 64));
    CK(cudaMalloc(&c.small, 1 << 16));
    CK(cudaMemset(flush, 1, flush_bytes));
    CK(cudaMemset(weights, 2, max_weights));
    const size_t flush16 = flush_bytes / 16;
    printf("device: %s, %d SMs, L2 %d MB; medians of 50 event-to-event runs, L2 flushed clean before each\n",
           prop.name, c.sms, prop.l2CacheSize >> 20);
    CK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));

    printf("%-58s %8.2f us\n", "nothing between the events",
           median_us(c, flush, flush16, [&] {}));
    printf("%-58s %8.2f us\n", "empty kernel, 132 x 384 threads",
           median_us(c, flush, flush16, [&] { empty_kernel<<<c.sms, 384, 0, c.s>>>(nullptr); }));
    printf("%-58s %8.2f us\n", "empty kernel, 132 x 384 threads, 200 KB dynamic smem",
           median_us(c, flush, flush16, [&] { empty_kernel<<<c.sms, 384, 200 * 1024, c.s>>>(nullptr); }));
    printf("%-58s %8.2f us\n", "cudaMemsetAsync 4 KB + empty kernel", median_us(c, flush, flush16, [&] {
               CK(cudaMemsetAsync(c.small, 0, 4096, c.s));
               empty_kernel<<<c.sms, 384, 0, c.s>>>(nullptr);
           }));
    printf("%-58s %8.2f us\n", "empty kernel + its programmatic dependent", median_us(c, flush, flush16, [&] {
               primary_kernel<<<c.sms, 384, 0, c.s>>>(nullptr);
               cudaLaunchConfig_t cfg = {};
               cudaLaunchAttribute attr[1];
               attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
               attr[0].val.programmaticStreamSerializationAllowed = 1;
               cfg.gridDim = dim3(c.sms * 8);
               cfg.blockDim = dim3(256);
               cfg.stream = c.s;
               cfg.attrs = attr;
               cfg.numAttrs = 1;
               CK(cudaLaunchKernelEx(&cfg, dependent_kernel, (int *)nullptr));
           }));
    printf("%-58s %8.2f us\n", "empty kernel + a plain second kernel", median_us(c, flush, flush16, [&] {
               empty_kernel<<<c.sms, 384, 0, c.s>>>(nullptr);
               empty_kernel<<<c.sms * 8, 256, 0, c.s>>>(nullptr);
           }));
    const double sizes_mb[] = {4, 8, 14.7, 16.8, 29.4, 37.7, 117.4, 132.1, 264.2};
    for (double mb : sizes_mb) {
        const size_t bytes = (size_t)(mb * 1e6) / 16 * 16;
        for (int per_sm : {1, 2, 4}) {
            const double us = median_us(c, flush, flush16, [&] {
                read_kernel<<<c.sms * per_sm, 512, 0, c.s>>>(weights, bytes / 16, (unsigned *)c.sink);
            });
            printf("read %6.1f MB, %d CTA/SM x 512 threads %27s %8.2f us  %6.2f TB/s\n", mb, per_sm, "", us,
                   bytes / us * 1e-6);
        }
    }
    const int64_t tile_shapes[][2] = {{7168, 16384}, {7168, 18432}, {24576, 1536}, {36864, 7168}, {7168, 2048}};
    for (auto &sh : tile_shapes) {
        const int64_t n = sh[0], k = sh[1];
        const int tiles = (int)(n / 128), kblocks = (int)(k / 128);
        const double bytes = (double)n * k;
        for (int splits : {1, 2, 4}) {
            const int units = tiles * splits, grid = units < c.sms ? units : c.sms;
            const double us_rm = median_us(c, flush, flush16, [&] {
                tile_read_kernel<false><<<grid, 512, 0, c.s>>>(weights, k, tiles, kblocks, splits, (unsigned *)c.sink);
            });
            const double us_bl = median_us(c, flush, flush16, [&] {
                tile_read_kernel<true><<<grid, 512, 0, c.s>>>(weights, k, tiles, kblocks, splits, (unsigned *)c.sink);
            });
            printf("tile read %5lldx%-5lld %d splits (%3d CTAs): row-major %7.2f us %5.2f TB/s, blocked %7.2f us %5.2f "
                   "TB/s\n", (long long)n, (long long)k, splits, grid, us_rm, bytes / us_rm * 1e-6, us_bl,
                   bytes / us_bl * 1e-6);
        }
    }
    CK(cudaGetLastError());
    return 0;
}
