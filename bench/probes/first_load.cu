/* What a CTA's first load costs, by the way it is issued (docs/hopper.md, "Floors").
 *
 * The hopper kernel's first TMA load issued ~0.85 us after its tensor maps were prefetched, wherever the prefetch
 * was, and the loads after it in ~0.05 us each: was that the descriptor's fetch? (No.) This tool times
 * one CTA a SM issuing its first 16 KB (128 rows x 128 bytes of a [32768][512] byte matrix, the swapped decode
 * path's first weight box) in each of the ways below, and reports medians over the CTAs of %globaltimer stamps
 * taken by the issuing thread:
 *   wait   from the CTA's first instruction to the issue (barrier set-up, prefetch, optional spin),
 *   issue  the issuing instruction(s) themselves,
 *   land   from the issue to the data being in shared memory (the mbarrier's phase completing).
 * Each mode runs with the L2 as the previous launch left it (keep) and after a 512 MB memset (dirty).
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o build/first_load bench/probes/first_load.cu
 *   build/first_load
 */
#include <cuda.h> /* CUtensorMap; the encoder is reached through cudaGetDriverEntryPointByVersion */
#include <cuda_runtime.h>
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled_v12000 */

#include "../../src/backends/cuda/sm90_async.cuh" /* mbar_*, tma_load_2d, global_ns */
#include "tool_check.h"                           /* CK */

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>


enum Mode {
    PARAM,          /* map as a __grid_constant__ parameter, prefetched first, then the load (the hopper kernel) */
    PARAM_NOPF,     /* the same without the prefetch */
    PARAM_SPIN,     /* prefetched, 3 us of spinning, then the load: does the prefetch finish in the background? */
    SPIN_PARAM,     /* 3 us of spinning, then prefetch and load: is the cost tied to the kernel's start? */
    PARAM_TWO,      /* prefetched, then the load and a second map's load; issue and land cover both */
    GLOBAL,         /* map in global memory (written by cudaMemcpy), prefetched, then the load */
    GLOBAL_NOPF,    /* the same without the prefetch */
    GLOBAL_SPIN,    /* prefetched, 3 us of spinning, then the load */
    BULK,           /* no descriptor: one cp.async.bulk of 16 contiguous KB */
    BULK_ROWS,      /* no descriptor: 128 cp.async.bulk of one 128-byte row each, issued by the 32 lanes of warp 0 */
    CP_ASYNC,       /* no descriptor: 16-byte cp.async by all 128 threads, completion through the mbarrier */
    LDG,            /* no descriptor: 16-byte loads into registers by all 128 threads */
    kModes
};
static const char *kModeName[kModes] = {"param",  "param-nopf",  "param-spin", "spin-param", "param-two", "global",
                                        "global-nopf", "global-spin", "bulk", "bulk-rows",  "cp.async",  "ldg"};

constexpr int kRows = 32768, kCols = 512, kBox = 128, kThreads = 128;

__device__ __forceinline__ void spin_ns(unsigned long long ns) {
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < ns) {
    }
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"((uint64_t)src), "r"(bytes), "r"(bar)
                 : "memory");
}

struct Maps {
    CUtensorMap a, b; /* b: the same matrix, for PARAM_TWO's second load */
};

/* stamps[cta][4]: start, before the issue, after it, landed (ns). */
__global__ void __launch_bounds__(kThreads) first_load_kernel(const __grid_constant__ Maps maps,
                                                              const CUtensorMap *global_map, const uint8_t *src,
                                                              int mode, unsigned long long *stamps, unsigned *sink) {
    const unsigned long long t_start = global_ns();
    const int tid = threadIdx.x;
    const CUtensorMap *map = (mode == GLOBAL || mode == GLOBAL_NOPF || mode == GLOBAL_SPIN) ? global_map : &maps.a;
    if (tid == 0 && (mode == PARAM || mode == PARAM_SPIN || mode == PARAM_TWO || mode == GLOBAL ||
                     mode == GLOBAL_SPIN)) {
        tma_prefetch_map(map);
        if (mode == PARAM_TWO) tma_prefetch_map(&maps.b);
    }
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ uint64_t bar_storage;
    uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    const uint32_t dst = smem_u32(smem);
    const uint32_t bar = smem_u32(&bar_storage);
    const int row0 = blockIdx.x * kBox;
    const uint32_t box_bytes = kBox * kBox;
    if (tid == 0) {
        /* CP_ASYNC: one noinc arrival per thread; the others: one arrival with the transaction count */
        mbar_init(bar, mode == CP_ASYNC ? kThreads : 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (mode == PARAM_SPIN || mode == SPIN_PARAM || mode == GLOBAL_SPIN) spin_ns(3000);
    if (mode == SPIN_PARAM && tid == 0) tma_prefetch_map(map);

    unsigned long long t_before = global_ns(), t_issued = 0;
    unsigned acc = 0;
    if (mode == CP_ASYNC || mode == LDG) {
        /* 1024 16-byte chunks: chunk c is row c / 8, column chunk c % 8, stored 128B-swizzled as TMA would */
        uint4 v[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int c = tid + i * kThreads, r = c / 8, j = c % 8;
            const uint8_t *g = src + (size_t)(row0 + r) * kCols + j * 16;
            const uint32_t s = dst + r * 128 + ((j ^ (r % 8)) * 16);
            if (mode == CP_ASYNC)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(g) : "memory");
            else
                v[i] = __ldcg((const uint4 *)g);
        }
        if (mode == CP_ASYNC)
            asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
        t_issued = global_ns();
        if (mode == LDG) {
#pragma unroll
            for (int i = 0; i < 8; i++) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
            __syncthreads(); /* every thread's loads have returned */
        } else {
            mbar_wait(bar, 0);
        }
    } else if (mode == BULK_ROWS) {
        if (tid < 32) {
            if (tid == 0) mbar_arrive_expect_tx(bar, box_bytes);
            __syncwarp();
            for (int r = tid; r < kBox; r += 32)
                bulk_load(dst + r * 128, src + (size_t)(row0 + r) * kCols, 128, bar);
            __syncwarp();
            t_issued = global_ns();
        }
        mbar_wait(bar, 0);
    } else if (tid == 0) {
        const uint32_t bytes = mode == PARAM_TWO ? 2 * box_bytes : box_bytes;
        mbar_arrive_expect_tx(bar, bytes);
        t_before = global_ns();
        if (mode == BULK) {
            bulk_load(dst, src + (size_t)blockIdx.x * box_bytes, box_bytes, bar);
        } else {
            tma_load_2d(dst, map, 0, row0, bar);
            if (mode == PARAM_TWO) tma_load_2d(dst + box_bytes, &maps.b, kBox, row0, bar);
        }
        t_issued = global_ns();
        mbar_wait(bar, 0);
    }
    const unsigned long long t_landed = global_ns();
    if (tid == 0) {
        unsigned long long *s = stamps + 4 * blockIdx.x;
        s[0] = t_start, s[1] = t_before, s[2] = t_issued, s[3] = t_landed;
        acc ^= smem[tid * 7];
    }
    if (acc == 0x12345678u) *sink = acc;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

int main(void) {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int ctas = std::min(sms, kRows / kBox);
    uint8_t *mat, *flush;
    CUtensorMap *global_map;
    unsigned long long *stamps;
    unsigned *sink;
    const size_t flush_bytes = 512u << 20;
    CK(cudaMalloc(&mat, (size_t)kRows * kCols));
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaMalloc(&global_map, sizeof(CUtensorMap)));
    CK(cudaMalloc(&stamps, 4 * sizeof(unsigned long long) * ctas));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    CK(cudaMemset(mat, 0x3c, (size_t)kRows * kCols));

    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (!fn || q != cudaDriverEntryPointSuccess) {
        fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
        return 1;
    }
    Maps maps;
    const cuuint64_t dims[2] = {kCols, kRows}, strides[1] = {kCols};
    const cuuint32_t box[2] = {kBox, kBox}, elem[2] = {1, 1};
    for (CUtensorMap *m : {&maps.a, &maps.b}) {
        CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)fn)(
            m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, mat, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", (int)r);
            return 1;
        }
    }
    CK(cudaMemcpy(global_map, &maps.a, sizeof(CUtensorMap), cudaMemcpyHostToDevice));
    const int smem = 2 * kBox * kBox + 1024;
    CK(cudaFuncSetAttribute(first_load_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));

    printf("one CTA on each of %d SMs; medians over the CTAs, then over 9 launches (ns)\n\n", ctas);
    printf("| mode | L2 | wait | issue | land | first to landed |\n|---|---|---|---|---|---|\n");
    std::vector<unsigned long long> host(4 * ctas);
    for (int mode = 0; mode < kModes; mode++) {
        for (int dirty = 0; dirty < 2; dirty++) {
            std::vector<double> w, is, l, tot;
            for (int rep = 0; rep < 10; rep++) {
                if (dirty) CK(cudaMemsetAsync(flush, rep & 0xff, flush_bytes));
                first_load_kernel<<<ctas, kThreads, smem>>>(maps, global_map, mat, mode, stamps, sink);
                CK(cudaGetLastError());
                CK(cudaDeviceSynchronize());
                if (rep == 0) continue; /* the first launch loads the code */
                CK(cudaMemcpy(host.data(), stamps, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost));
                std::vector<double> cw, ci, cl, ct;
                for (int c = 0; c < ctas; c++) {
                    const unsigned long long *s = &host[4 * c];
                    cw.push_back((double)(s[1] - s[0])), ci.push_back((double)(s[2] - s[1]));
                    cl.push_back((double)(s[3] - s[2])), ct.push_back((double)(s[3] - s[0]));
                }
                w.push_back(median(cw)), is.push_back(median(ci)), l.push_back(median(cl)), tot.push_back(median(ct));
            }
            printf("| %s | %s | %.0f | %.0f | %.0f | %.0f |\n", kModeName[mode], dirty ? "dirty" : "keep", median(w),
                   median(is), median(l), median(tot));
        }
    }
    return 0;
}
