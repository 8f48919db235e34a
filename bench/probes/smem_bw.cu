/* Shared-memory bandwidth on Hopper the way hopper's GEMM kernel uses it (docs/hopper.md, "What is still open" and the
 * design log): is there one shared-memory port of ~128 bytes a clock that FP8 wgmma operand reads and the TMA's fills
 * share, so that a 128x128x128 block (32 KB written, 48 KB read in 512 MMA clocks: 160 B/clk) cannot pass ~80% of
 * the MMA peak, or do they not compete?
 *
 * Every kernel runs one CTA on each SM (all SMs busy, as in a GEMM; the last line repeats two with one CTA) and times
 * itself with clock64, so every rate is bytes per SM clock whatever the clock is; the clock the run held comes from
 * the event time. Lines:
 *   lds.128        128-bit ld.shared by 1024 threads, conflict-free: the LSU's shared-memory rate;
 *   ldmatrix.x4    the same bytes through ldmatrix (what an RS wgmma's A operand would cost);
 *   sts.128        128-bit st.shared by one warpgroup (the writer used below);
 *   tma fill       cp.async.bulk of 16 KB chunks from an L2-resident buffer into shared memory, 8 in flight, one
 *                  thread: the TMA's fill rate with every SM pulling from the L2 (x SMs = the L2's rate);
 *   wgmma nN xW    W warpgroups issuing m64nNk32 e4m3 wgmmas back to back from shared memory (both operands, the
 *                  kernel's 128-byte-swizzled K-major tiles; the warpgroups read different A rows and the same B, as
 *                  hopper's consumers do): the MMA rate as a fraction of 4096 MAC/clk/SM (the datasheet's dense FP8
 *                  rate) and the operand bytes it reads, (64 + N) x 32 per instruction;
 *   ... + sts / + tma   the same with a writer warpgroup storing to another shared-memory region as fast as it can
 *                  (st.shared) or with TMA filling it from the L2, for the whole MMA run.
 * The verdict line compares reads + writes under load with the lds.128 rate: a sum near that rate with the MMA slowed
 * means one port; an MMA rate that holds while the writer still writes means the fills do not take MMA bandwidth.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o build/smem_bw bench/probes/smem_bw.cu && build/smem_bw
 */
#include <cuda_runtime.h>

#include "../../src/backends/cuda/sm90_async.cuh" /* smem_u32, mbar_*, fences */
#include "../../src/backends/hopper/wgmma.cuh"    /* bfp8_wgmma<N>: m64nNk32 e4m3 */
#include "tool_check.h"                           /* CK */

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PROBE_SM90A 1
#endif

constexpr double kPeakMacPerClk = 4096.0; /* dense FP8 per SM: 1979 TFLOP/s / (132 SMs x 1.83 GHz x 2) */

/* ---- plain shared-memory loads ------------------------------------------------------------------------------- */

/* 64 KB, 1024 threads, 8 independent 16-byte loads per iteration, consecutive threads on consecutive 16 bytes. */
template <bool LDMATRIX>
__global__ void __launch_bounds__(1024, 1) load_kernel(int iters, unsigned long long *cycles, unsigned *sink) {
    extern __shared__ __align__(16) uint8_t smem[];
    const uint32_t base = smem_u32(smem);
    const int tid = threadIdx.x;
    for (int i = tid; i < 4096; i += blockDim.x) ((uint4 *)smem)[i] = make_uint4(i, i * 3, i * 5, i * 7);
    __syncthreads();
    uint32_t addr[8];
#pragma unroll
    for (int u = 0; u < 8; u++) addr[u] = base + (uint32_t)(((tid + u * 1024) & 4095) << 4);
    uint32_t x = 0;
    const long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int u = 0; u < 8; u++) {
            uint32_t a, b, c, d;
            if (LDMATRIX)
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                             : "r"(addr[u]));
            else
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                             : "r"(addr[u]));
            x ^= a ^ b ^ c ^ d;
        }
    }
    __syncthreads();
    const long long t1 = clock64();
    if (tid == 0) cycles[blockIdx.x] = (unsigned long long)(t1 - t0);
    if (x == 0x9e3779b9u) *sink = x;
}

/* ---- wgmma with a concurrent writer ---------------------------------------------------------------------------- */

enum Writer { kNone = 0, kSts = 1, kTma = 2 };
static const char *kWriterName[] = {"", " + sts", " + tma"};

/* Per CTA: the MMA warpgroups' cycles, the writer's cycles and bytes. */
struct Result {
    unsigned long long mma_cycles[2];
    unsigned long long writer_cycles, writer_bytes;
};

constexpr int kABytes = 128 * 128, kBBytes = 256 * 128, kWBytes = 128 * 1024;
constexpr int kSlots = 8, kSlotBytes = kWBytes / kSlots;
constexpr int kMmaSmem = 1024 + kABytes + kBBytes + kWBytes + 256;

/* The kernel's descriptor (src/backends/hopper/config.cuh, smem_desc): K-major rows of 128 bytes, 128-byte swizzle,
 * 8-row groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t probe_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

/* Warpgroup 0 is the writer (kSts: all 128 threads store; kTma: thread 0 keeps kSlots bulk copies in flight); warpgroups
 * 1..WGS issue `iters` wgmmas each, in groups of 4 (one 128-deep K block), two groups in flight. With WGS = 0 the
 * writer runs `writer_iters` rounds alone. */
template <int N, int WGS>
__global__ void __launch_bounds__(384, 1) mma_kernel(int iters, int writer, int writer_iters, const uint8_t *src,
                                                     size_t src_chunks, Result *out, unsigned *sink) {
#ifdef PROBE_SM90A
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    uint8_t *a_tile = smem, *b_tile = smem + kABytes, *w_region = b_tile + kBBytes;
    uint64_t *bars = (uint64_t *)(w_region + kWBytes);
    unsigned *done = (unsigned *)(bars + kSlots);
    unsigned *bytes_sum = done + 1;
    const int tid = threadIdx.x;
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    /* Operands: e4m3 values below 1 in magnitude (never NaN), varied so that the tensor cores draw realistic power. */
    for (int i = tid; i < (kABytes + kBBytes) / 4; i += blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u;
        h ^= h >> 13;
        ((uint32_t *)a_tile)[i] = h & 0xB7B7B7B7u;
    }
    if (tid == 0) {
        for (int s = 0; s < kSlots; s++) mbar_init(smem_u32(bars + s), 1);
        *done = 0;
        *bytes_sum = 0;
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        fence_proxy_async();
    }
    __syncthreads();
    if (wg >= 1 && wg <= WGS) {
        float acc[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; i++) acc[i] = 0.0f;
        const uint64_t da = probe_desc(smem_u32(a_tile) + (uint32_t)((wg - 1) % 2) * 64 * 128);
        const uint64_t db = probe_desc(smem_u32(b_tile));
        const long long t0 = clock64();
        for (int it = 0; it < iters; it += 4) {
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < 4; kk++) bfp8_wgmma<N>::run(acc, da + 2 * kk, db + 2 * kk, 1);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        const long long t1 = clock64();
#pragma unroll
        for (int i = 0; i < N / 2; i++) asm volatile("" : "+f"(acc[i])::"memory");
        if (tid % 128 == 0) {
            out[blockIdx.x].mma_cycles[wg - 1] = (unsigned long long)(t1 - t0);
            atomicAdd(done, 1u);
        }
        if (acc[0] == 1234.5f) *sink = 1;
    } else if (wg == 0 && writer == kSts) {
        const uint32_t base = smem_u32(w_region);
        uint32_t addr[8];
#pragma unroll
        for (int u = 0; u < 8; u++) addr[u] = base + (uint32_t)(((tid + u * 128) & (kWBytes / 16 - 1)) << 4);
        const long long t0 = clock64();
        unsigned rounds = 0;
        for (;;) {
#pragma unroll
            for (int u = 0; u < 8; u++)
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr[u]), "r"(rounds), "r"(u),
                             "r"(tid), "r"(rounds ^ u)
                             : "memory");
            rounds++;
            if (WGS == 0 ? (int)rounds >= writer_iters : ((rounds & 15) == 0 && *(volatile unsigned *)done >= WGS))
                break;
        }
        const long long t1 = clock64();
        atomicAdd(bytes_sum, rounds * 8u * 16u);
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
        if (tid == 0) {
            out[blockIdx.x].writer_cycles = (unsigned long long)(t1 - t0);
            out[blockIdx.x].writer_bytes = *(volatile unsigned *)bytes_sum;
        }
    } else if (wg == 0 && writer == kTma && tid == 0) {
        const uint32_t base = smem_u32(w_region);
        const long long t0 = clock64();
        unsigned long long issued = 0;
        size_t chunk = (size_t)blockIdx.x * 977 % src_chunks;
        for (;;) {
            const int slot = (int)(issued % kSlots);
            const uint32_t bar = smem_u32(bars + slot);
            if (issued >= kSlots) mbar_wait(bar, (uint32_t)((issued / kSlots - 1) & 1));
            mbar_arrive_expect_tx(bar, kSlotBytes);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                         ::"r"(base + slot * kSlotBytes), "l"((uint64_t)(src + chunk * kSlotBytes)),
                         "r"(kSlotBytes), "r"(bar)
                         : "memory");
            issued++;
            chunk = chunk + 1 == src_chunks ? 0 : chunk + 1;
            if (WGS == 0 ? (int)issued >= writer_iters : *(volatile unsigned *)done >= WGS) break;
        }
        /* Drain: the last kSlots copies (each slot's latest phase). */
        for (unsigned long long j = issued > kSlots ? issued - kSlots : 0; j < issued; j++)
            mbar_wait(smem_u32(bars + j % kSlots), (uint32_t)((j / kSlots) & 1));
        const long long t1 = clock64();
        out[blockIdx.x].writer_cycles = (unsigned long long)(t1 - t0);
        out[blockIdx.x].writer_bytes = issued * kSlotBytes;
    }
#endif
}

/* ---- host ------------------------------------------------------------------------------------------------------ */

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

struct Probe {
    int sms;
    Result *out_d;
    unsigned long long *cycles_d;
    unsigned *sink;
    uint8_t *src;
    size_t src_chunks;
    double ghz_sum = 0;
    int ghz_n = 0;
};

/* Median over the CTAs of bytes / cycles for the loads. */
template <bool LDMATRIX> static double run_loads(Probe &p) {
    const int iters = 4096;
    CK(cudaFuncSetAttribute(load_kernel<LDMATRIX>, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
    load_kernel<LDMATRIX><<<p.sms, 1024, 65536>>>(16, p.cycles_d, p.sink); /* warm-up */
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    load_kernel<LDMATRIX><<<p.sms, 1024, 65536>>>(iters, p.cycles_d, p.sink);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    std::vector<unsigned long long> cyc(p.sms);
    CK(cudaMemcpy(cyc.data(), p.cycles_d, sizeof(cyc[0]) * p.sms, cudaMemcpyDeviceToHost));
    std::vector<double> rate;
    const double bytes = 1024.0 * 8 * 16 * iters;
    for (int i = 0; i < p.sms; i++) rate.push_back(bytes / (double)cyc[i]);
    p.ghz_sum += median(std::vector<double>(cyc.begin(), cyc.end())) / (ms * 1e6), p.ghz_n++;
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(rate);
}

struct MmaRate {
    double mma_frac, read_bpc, write_bpc;
};

template <int N, int WGS> static MmaRate run_mma(Probe &p, int writer, int grid) {
    const int iters = WGS ? 8192 * 128 / N : 0;
    const int writer_iters = writer == kSts ? 20000 : 2000;
    auto kernel = mma_kernel<N, WGS>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMmaSmem));
    CK(cudaMemset(p.out_d, 0, sizeof(Result) * p.sms));
    kernel<<<grid, 384, kMmaSmem>>>(iters / 16, writer, writer_iters / 16, p.src, p.src_chunks, p.out_d, p.sink);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    kernel<<<grid, 384, kMmaSmem>>>(iters, writer, writer_iters, p.src, p.src_chunks, p.out_d, p.sink);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    std::vector<Result> res(grid);
    CK(cudaMemcpy(res.data(), p.out_d, sizeof(Result) * grid, cudaMemcpyDeviceToHost));
    std::vector<double> frac, reads, writes, cyc;
    for (int i = 0; i < grid; i++) {
        const Result &r = res[i];
        if (WGS) {
            const double c = (double)std::max(r.mma_cycles[0], WGS > 1 ? r.mma_cycles[1] : 0ull);
            frac.push_back((double)iters * WGS * 64.0 * N * 32.0 / c / kPeakMacPerClk);
            reads.push_back((double)iters * WGS * (64.0 + N) * 32.0 / c);
            cyc.push_back(c);
        } else {
            cyc.push_back((double)r.writer_cycles);
        }
        if (writer) writes.push_back((double)r.writer_bytes / (double)r.writer_cycles);
    }
    if (grid == p.sms) p.ghz_sum += median(cyc) / (ms * 1e6), p.ghz_n++;
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return {median(frac), median(reads), median(writes)};
}

template <int N, int WGS> static MmaRate mma_line(Probe &p, int writer, int grid = 0) {
    const MmaRate r = run_mma<N, WGS>(p, writer, grid ? grid : p.sms);
    char name[64];
    snprintf(name, sizeof name, "wgmma n%d x%d%s%s", N, WGS, kWriterName[writer], grid == 1 ? " (1 SM)" : "");
    printf("%-28s mma %.3f of peak  reads %6.1f B/clk", name, r.mma_frac, r.read_bpc);
    if (writer) printf("  writes %6.1f B/clk  sum %6.1f B/clk", r.write_bpc, r.read_bpc + r.write_bpc);
    printf("\n");
    return r;
}

int main(void) {
    Probe p;
    CK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9) {
        fprintf(stderr, "smem_bw: needs sm_90 (this device is sm_%d%d)\n", prop.major, prop.minor);
        return 1;
    }
    const size_t src_bytes = 16u << 20; /* L2-resident after the first pass */
    CK(cudaMalloc(&p.out_d, sizeof(Result) * p.sms));
    CK(cudaMalloc(&p.cycles_d, sizeof(unsigned long long) * p.sms));
    CK(cudaMalloc(&p.sink, sizeof(unsigned)));
    CK(cudaMalloc(&p.src, src_bytes));
    CK(cudaMemset(p.src, 0x3c, src_bytes));
    p.src_chunks = src_bytes / kSlotBytes;
    printf("smem_bw: %s, %d SMs; one CTA per SM; rates per SM clock (medians over the CTAs)\n", prop.name, p.sms);

    const double lds = run_loads<false>(p);
    printf("%-28s %6.1f B/clk\n", "lds.128", lds);
    printf("%-28s %6.1f B/clk\n", "ldmatrix.x4", run_loads<true>(p));
    const MmaRate sts = run_mma<64, 0>(p, kSts, p.sms);
    printf("%-28s %6.1f B/clk\n", "sts.128 (one warpgroup)", sts.write_bpc);
    const MmaRate tma = run_mma<64, 0>(p, kTma, p.sms);
    printf("%-28s %6.1f B/clk per SM, %.0f B/clk over %d SMs\n", "tma fill from L2", tma.write_bpc,
           tma.write_bpc * p.sms, p.sms);

    mma_line<64, 1>(p, kNone);
    mma_line<128, 1>(p, kNone);
    mma_line<256, 1>(p, kNone);
    mma_line<64, 2>(p, kNone);
    const MmaRate n128 = mma_line<128, 2>(p, kNone);
    mma_line<256, 2>(p, kNone);
    const MmaRate n128s = mma_line<128, 2>(p, kSts);
    const MmaRate n128t = mma_line<128, 2>(p, kTma);
    mma_line<256, 2>(p, kSts);
    mma_line<256, 2>(p, kTma);
    mma_line<64, 2>(p, kSts);

    const MmaRate tma1 = run_mma<64, 0>(p, kTma, 1);
    printf("%-28s %6.1f B/clk\n", "tma fill from L2 (1 SM)", tma1.write_bpc);
    mma_line<128, 2>(p, kTma, 1);

    printf("clock held: %.2f GHz (cycles / event time, averaged over the all-SM runs)\n",
           p.ghz_n ? p.ghz_sum / p.ghz_n : 0.0);
    /* The model: one port of ~lds B/clk shared by operand reads and fills. */
    const double sum_s = n128s.read_bpc + n128s.write_bpc, sum_t = n128t.read_bpc + n128t.write_bpc;
    const bool shared_port = sum_s < 1.15 * lds && n128s.mma_frac < 0.97 * n128.mma_frac;
    printf("verdict: wgmma n128 x2 alone %.3f of peak (%.1f B/clk read); with st.shared %.3f (read+write %.1f), with "
           "TMA %.3f (read+write %.1f); lds.128 %.1f B/clk: %s\n",
           n128.mma_frac, n128.read_bpc, n128s.mma_frac, sum_s, n128t.mma_frac, sum_t, lds,
           shared_port ? "reads and writes share one port (the 128 B/clk model holds)"
                       : "the writes did not take the MMA's operand bandwidth (the model is refuted)");
    return 0;
}
