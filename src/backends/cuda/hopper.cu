/* hopper: the sm_90a fast path for block-FP8 GEMM (TMA + FP8 wgmma + warp specialization).
 *
 * y[m,n] = sum_kb sa[m,kb] * sb[n/128,kb] * (sum_{k in kb} a[m,k] b[n,k]) + bias[n], one rounding at the end.
 *
 * The kernel computes a 128 x BQ tile of a product P * Q^T where P and Q are both K-major e4m3 matrices:
 *  - normal: P = A (activations, 128 rows a tile), Q = B (weights, BQ = 64 or 128 rows a tile: the narrower
 *    tile doubles the tiles to spread over the SMs when there are few);
 *  - swapped (decode, M <= 64; up to 128 when forced): P = B (weights) and Q = A (tokens, BQ = M rounded up to
 *    8..128), so the weight rows fill wgmma's M dimension and a one-token GEMM does not waste 63/64 of every
 *    instruction.
 * Either way a tile's weight rows (128 of them swapped, 64 or 128 aligned ones normal) lie inside one 128-row
 * weight block: every tile needs one weight scale per K block.
 *
 * One CTA = 3 warpgroups. Warpgroup 0 is the producer: one thread issues TMA loads (P tile, Q tile, and the 128 or
 * BQ activation scales of the K block) into a ring of shared-memory stages, each completing on a "full" mbarrier.
 * Warpgroups 1 and 2 are consumers, 64 P rows each: per K block they wait on "full", read the block's activation
 * scales, run four m64nBQk32 wgmmas into a fresh fp32 partial, wait for them, release the stage on its "empty"
 * mbarrier (one arrival per warp), then multiply the partial by sa*sb and add it to the fp32 total ("promotion",
 * needed because the FP8 MMA accumulator keeps only ~14 bits). On the normal path two partials alternate, so block
 * b+1's MMAs run while block b is promoted. setmaxnreg moves registers from the producer to the consumers. After
 * changing a consumer loop, check `-Xptxas -v` (make test does): when ptxas cannot prove an accumulator idle it
 * serializes the wgmmas and says so (C7514, C7518); the kernel stays correct, only slower.
 *
 * The grid is persistent: CTAs walk work units (P tile, Q tile, K split) with a stride of gridDim.x, so the
 * producer streams the next unit's data while the consumers finish the current one. Split-K (for decode and
 * other shapes with fewer tiles than SMs) writes fp32 partials to a workspace that a second kernel sums in a
 * fixed order, adds the bias to and rounds once (launched as a programmatic dependent to hide its launch). Rows,
 * columns and K beyond the matrix are zero-filled by TMA, so edge tiles and a partial last K block are exact.
 * Epilogue: the normal path with 16-bit output and N % 8 == 0 packs the tile into swizzled shared memory and
 * stores it with TMA (clipped at the matrix edges) while the warpgroup starts its next unit; other cases stage
 * through shared memory and store 16-byte (or 4-element) chunks of output rows, bounds-checked.
 *
 * Requirements (declared in the caps, checked again at run time): K % 16 == 0 (TMA row strides are 16-byte
 * multiples), A, B and the activation scales 16-byte aligned, activation scales MN_MAJOR_ALIGNED and weight scales
 * ROW_MAJOR as fp32 values (UE8M0 scales are exact powers of two in fp32). */
#include <cuda.h> /* CUtensorMap and its enums only: the driver is reached through cudaGetDriverEntryPointByVersion */
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blockfp8.h"
#include "fp8_math.cuh"
#include "hopper_wgmma.cuh"
extern "C" {
#include "cuda_glue.h"
}

extern "C" const bfp8_backend *bfp8_hopper_backend(void);
extern "C" bool bfp8_hopper_kernel_takes(const bfp8_gemm_args *args, int arch, char *why, size_t why_size);
extern "C" bfp8_status bfp8_hopper_kernel_run(const bfp8_gemm_args *args, int sms);

namespace {

constexpr int kBK = 128;            /* K per stage = one scale block = one 128-byte swizzled row */
constexpr int kBP = 128;            /* P rows per tile: two consumer warpgroups of 64 */
constexpr int kThreads = 384;       /* producer warpgroup + two consumer warpgroups */
constexpr int kMaxSmem = 227 * 1024;

struct HopperParams {
    int64_t m, n, k;
    int kblocks;
    int p_tiles, q_tiles, splits, kb_per_split, units;
    /* Units [0, whole_units) are tiles 0.. with the whole K range; the rest cover the remaining tiles split
     * `splits` ways (all tiles when whole_units = 0). whole_units > 0 only on the swapped path. */
    int whole_units;
    const float *sb; /* weight scales, ROW_MAJOR [ceil(n/128)][kblocks] */
    const void *bias;
    int bias_dtype; /* -1: no bias */
    void *y;
    int y_dtype;
    float *workspace; /* [splits][m][n] when splits > 1 */
    int y_vec;        /* y 16-byte aligned and n % 8 == 0: whole 16-byte chunks of output rows */
    int y_tma;        /* normal path, no split, 16-bit output, y_vec: the epilogue stores through TMA (map_y) */
};

template <int BQ, bool SWAP> struct Config {
    static constexpr int kPBytes = kBP * kBK;
    static constexpr int kQBytes = BQ * kBK;
    static constexpr int kStageBytes = kPBytes + kQBytes; /* multiple of 1024: the swizzle atom */
    static constexpr int kScaleSlot = 512;                 /* up to 128 fp32 activation scales */
    /* Output staging per consumer warpgroup, rows padded by 16 bytes (conflict-free fragment writes): normal =
     * [64 rows][BQ] of 16-bit outputs, swapped = [BQ tokens][64 weight rows] of fp32 (transposed on the way). */
    static constexpr int kOutPitch = SWAP ? 64 * 4 + 16 : BQ * 2 + 16;
    static constexpr int kOutRows = SWAP ? BQ : 64;
    static constexpr int kOutBytes = (2 * kOutRows * kOutPitch + 1023) / 1024 * 1024;
    static_assert(SWAP || (kOutRows * kOutPitch) % 1024 == 0, "second warpgroup's TMA-store tile must be aligned");
    static_assert(SWAP || kOutRows * kOutPitch >= BQ / 64 * 8192, "a warpgroup's TMA-store boxes must fit");
    static constexpr int kStagesFit = (kMaxSmem - 1024 - kOutBytes - 256) / (kStageBytes + kScaleSlot + 16);
    static constexpr int kStages = kStagesFit > 12 ? 12 : kStagesFit;
    static constexpr int kSmemBytes = 1024 + kStages * (kStageBytes + kScaleSlot) + kOutBytes + kStages * 16;
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}
/* TMA store of a [64 rows][64 cols] 16-bit box from 128-byte-swizzled shared memory; completion is tracked by
 * bulk groups of the issuing thread. */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, uint32_t src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"((uint64_t)map), "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* The shared-memory source of every committed store has been read (the buffer may be rewritten). */
__device__ __forceinline__ void bulk_wait_read_all() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
/* Every committed store is complete. */
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* Makes this thread's ordinary shared-memory writes visible to the async proxy (TMA). */
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Barrier among the 128 threads of one consumer warpgroup (ids 1 and 2; 0 is __syncthreads). */
__device__ __forceinline__ void named_barrier_sync(int id) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Shared-memory matrix descriptor: K-major rows of 128 bytes with the 128-byte swizzle (what the TMA wrote), 8-row
 * core groups 1024 bytes apart. Advancing the start address by 32 bytes selects the next k32 slice. */
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

constexpr int kGroupP = 8; /* rasterization: groups of 8 P tiles walk Q together (L2 reuse) */

/* Unit u -> (P tile, Q tile, split) and its K-block range [kb0, kb1); partial: the unit writes fp32 partial sums
 * for the reduce kernel instead of y. Tiles are numbered so that groups of kGroupP P tiles sweep all Q tiles. */
struct Unit {
    int pt, qt, split, kb0, kb1;
    bool partial;
};
__device__ __forceinline__ Unit decode_unit(const HopperParams &p, int u) {
    Unit w;
    int t;
    if (u < p.whole_units) {
        t = u;
        w.split = 0, w.kb0 = 0, w.kb1 = p.kblocks, w.partial = false;
    } else {
        const int v = u - p.whole_units, tail = p.p_tiles * p.q_tiles - p.whole_units;
        w.split = v / tail;
        t = p.whole_units + (v - w.split * tail);
        w.kb0 = w.split * p.kb_per_split;
        w.kb1 = min(p.kblocks, w.kb0 + p.kb_per_split);
        w.partial = p.splits > 1;
    }
    const int group_size = kGroupP * p.q_tiles;
    const int g = t / group_size;
    const int first_p = g * kGroupP;
    const int rows_in_group = min(kGroupP, p.p_tiles - first_p);
    const int r = t - g * group_size;
    w.pt = first_p + r % rows_in_group;
    w.qt = r / rows_in_group;
    return w;
}
#endif

template <int BQ, bool SWAP>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_gemm_kernel(const __grid_constant__ CUtensorMap map_p, const __grid_constant__ CUtensorMap map_q,
                       const __grid_constant__ CUtensorMap map_sa, const __grid_constant__ CUtensorMap map_y,
                       const HopperParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = Config<BQ, SWAP>;
    constexpr int kStages = C::kStages;
    constexpr int kScaleRows = SWAP ? BQ : kBP; /* activation scales per K block of a tile */
    constexpr uint32_t kTxBytes = C::kStageBytes + kScaleRows * 4;
    static_assert(128 % BQ == 0, "a tile's weight rows lie inside one 128-row weight block (one scale per K block)");

    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *tiles = smem;
    uint8_t *out_stage = smem + kStages * C::kStageBytes; /* 1024-aligned: TMA-store source */
    float *scales = (float *)(out_stage + C::kOutBytes);
    uint64_t *bars = (uint64_t *)(scales + kStages * (C::kScaleSlot / 4));
    const uint32_t tiles_u32 = smem_u32(tiles);
    const uint32_t full0 = smem_u32(bars), empty0 = smem_u32(bars + kStages);

    /* A split-K reduce launched after this grid may start its launch now (it waits for this grid's completion). */
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    const int warpgroup = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(full0 + 8 * s, 1);
            /* One arrival per consumer warp: 256 per-thread arrivals on one barrier per K block cost shared-memory
             * atomics for nothing. */
            mbar_init(empty0 + 8 * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) {
            tma_prefetch_map(&map_p);
            tma_prefetch_map(&map_q);
            tma_prefetch_map(&map_sa);
            int stage = 0;
            uint32_t phase = 0;
            for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
                const Unit unit = decode_unit(p, u);
                const int act_row0 = SWAP ? unit.qt * BQ : unit.pt * kBP;
                for (int kb = unit.kb0; kb < unit.kb1; kb++) {
                    mbar_wait(empty0 + 8 * stage, phase ^ 1);
                    const uint32_t full = full0 + 8 * stage;
                    mbar_arrive_expect_tx(full, kTxBytes);
                    const uint32_t tile = tiles_u32 + stage * C::kStageBytes;
                    tma_load_2d(tile, &map_p, kb * kBK, unit.pt * kBP, full);
                    tma_load_2d(tile + C::kPBytes, &map_q, kb * kBK, unit.qt * BQ, full);
                    tma_load_2d(smem_u32(scales + stage * (C::kScaleSlot / 4)), &map_sa, act_row0, kb, full);
                    if (++stage == kStages) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int wg = warpgroup - 1; /* which 64 P rows */
        const int t = threadIdx.x - 128 * warpgroup;
        const int warp = t / 32, lane = t % 32;
        int stage = 0;
        uint32_t phase = 0;
        float acc[BQ / 2];
#pragma unroll
        for (int i = 0; i < BQ / 2; i++) acc[i] = 0.0f;

        /* Four k32 wgmmas of one K block into a fresh partial, committed as one group. */
        auto issue = [&](float(&acc)[BQ / 2], int st) {
            const uint32_t tile = tiles_u32 + st * C::kStageBytes;
            const uint32_t p_addr = tile + wg * 64 * kBK;
            const uint32_t q_addr = tile + C::kPBytes;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBK / 32; kk++)
                bfp8_wgmma<BQ>::run(acc, smem_desc(p_addr + kk * 32), smem_desc(q_addr + kk * 32), kk);
            wgmma_commit();
        };
        /* After a wgmma wait: the accumulator's registers count as written here, so the compiler cannot move a
         * read of them above the wait (the wgmma asm statements alone do not tie them to it). */
        auto fence_acc = [&](float(&acc)[BQ / 2]) {
#pragma unroll
            for (int i = 0; i < BQ / 2; i++) asm volatile("" : "+f"(acc[i])::"memory");
        };
        /* This thread's activation scales of the block in stage st, read before its MMAs are issued so that the
         * stage can go back to the producer as soon as the MMAs are done. Normal path: accumulator rows
         * 16*warp + lane/4 (+8) carry the scales; swapped: columns 8*j + 2*(lane%4) (+1) (tokens). */
        constexpr int kNumScales = SWAP ? BQ / 4 : 2;
        auto load_scales = [&](int st, float(&sv)[kNumScales]) {
            const float *sa = scales + st * (C::kScaleSlot / 4);
            if (!SWAP) {
                const int r = wg * 64 + warp * 16 + lane / 4;
                sv[0] = sa[r], sv[1] = sa[r + 8];
            } else {
#pragma unroll
                for (int j = 0; j < BQ / 8; j++) {
                    const float2 v = *(const float2 *)(sa + 8 * j + 2 * (lane % 4));
                    sv[2 * j] = v.x, sv[2 * j + 1] = v.y;
                }
            }
        };
        /* The stage's MMAs and scale reads are done: one arrival per warp gives it back. */
        auto release = [&](int st) {
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * st);
        };
        /* total += partial * sa * sb. */
        auto promote = [&](float(&total)[BQ / 2], const float(&acc)[BQ / 2], const float(&sv)[kNumScales], float sb) {
            if (!SWAP) {
                const float s0 = sv[0] * sb, s1 = sv[1] * sb;
#pragma unroll
                for (int i = 0; i < BQ / 2; i++) total[i] = fmaf(acc[i], (i & 2) ? s1 : s0, total[i]);
            } else {
#pragma unroll
                for (int j = 0; j < BQ / 8; j++) {
                    const float s0 = sv[2 * j] * sb, s1 = sv[2 * j + 1] * sb;
                    total[4 * j + 0] = fmaf(acc[4 * j + 0], s0, total[4 * j + 0]);
                    total[4 * j + 1] = fmaf(acc[4 * j + 1], s1, total[4 * j + 1]);
                    total[4 * j + 2] = fmaf(acc[4 * j + 2], s0, total[4 * j + 2]);
                    total[4 * j + 3] = fmaf(acc[4 * j + 3], s1, total[4 * j + 3]);
                }
            }
        };
        auto next_stage = [&]() {
            if (++stage == kStages) stage = 0, phase ^= 1;
        };
        float acc2[SWAP ? 1 : BQ / 2]; /* the second partial of the normal path's pipelined loop */
#pragma unroll
        for (int i = 0; i < (SWAP ? 1 : BQ / 2); i++) acc2[i] = 0.0f;

        for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
            const Unit unit = decode_unit(p, u);
            const int pt = unit.pt, qt = unit.qt, split = unit.split;
            const int kb0 = unit.kb0, kb1 = unit.kb1;
            const int64_t p_base = (int64_t)pt * kBP + wg * 64; /* first P row of this warpgroup */
            const int64_t q_base = (int64_t)qt * BQ;
            const int weight_block = SWAP ? pt : (qt * BQ) / 128;
            const float *sb_row = p.sb + (int64_t)weight_block * p.kblocks;
            float total[BQ / 2];
#pragma unroll
            for (int i = 0; i < BQ / 2; i++) total[i] = 0.0f;

            if constexpr (!SWAP) {
                /* Two partials in flight: block b+1's MMAs are issued before block b is promoted, so this
                 * warpgroup's promotion overlaps its own next MMAs, not only the other warpgroup's. Normal path
                 * only, where a block's scales are two registers (swapped, they are BQ / 4). Written as straight
                 * code, a loop unrolled by two and a tail, with no branch between a wgmma and its wait: an earlier
                 * form with the issue inside a conditional made ptxas serialize every wgmma of the kernel (C7514),
                 * and removing that took M=4096 7168x16384 from 949 to 787 us (bench/hopper-notes.md, v5). */
                float sva[kNumScales], svb[kNumScales];
                float sb_a = 0.0f, sb_b = 0.0f;
                int st_a = 0, st_b = 0;
                /* Block kb into (acc, sv, sb, st): wait for its stage, read its scales, issue its MMAs. */
                auto begin = [&](int kb, float(&acc)[BQ / 2], float(&sv)[kNumScales], float &sb, int &st) {
                    sb = __ldg(sb_row + kb);
                    st = stage;
                    mbar_wait(full0 + 8 * stage, phase);
                    load_scales(stage, sv);
                    issue(acc, stage);
                    next_stage();
                };
                /* A block whose MMAs are complete: give its stage back, promote it. */
                auto finish = [&](float(&acc)[BQ / 2], const float(&sv)[kNumScales], float sb, int st) {
                    fence_acc(acc);
                    release(st);
                    promote(total, acc, sv, sb);
                };
                begin(kb0, acc, sva, sb_a, st_a);
                int kb = kb0 + 1;
                for (; kb + 1 < kb1; kb += 2) {
                    begin(kb, acc2, svb, sb_b, st_b);
                    wgmma_wait<1>();
                    finish(acc, sva, sb_a, st_a);
                    begin(kb + 1, acc, sva, sb_a, st_a);
                    wgmma_wait<1>();
                    finish(acc2, svb, sb_b, st_b);
                }
                if (kb < kb1) {
                    begin(kb, acc2, svb, sb_b, st_b);
                    wgmma_wait<1>();
                    finish(acc, sva, sb_a, st_a);
                    wgmma_wait<0>();
                    finish(acc2, svb, sb_b, st_b);
                } else {
                    wgmma_wait<0>();
                    finish(acc, sva, sb_a, st_a);
                }
            } else {
                /* Swapped: MMAs of a block, wait, give the stage back, promote. The two consumer warpgroups drift
                 * apart and overlap each other's promotion. */
                float sb_next = __ldg(sb_row + kb0);
                float sv[kNumScales];
                for (int kb = kb0; kb < kb1; kb++) {
                    const float sb = sb_next;
                    if (kb + 1 < kb1) sb_next = __ldg(sb_row + kb + 1); /* hidden behind this block's MMAs */
                    mbar_wait(full0 + 8 * stage, phase);
                    load_scales(stage, sv);
                    issue(acc, stage);
                    wgmma_wait<0>();
                    fence_acc(acc);
                    release(stage);
                    promote(total, acc, sv, sb);
                    next_stage();
                }
            }

            /* Epilogue: element i of the fragment is P row 16*warp + lane/4 + 8*((i/2)%2) of this warpgroup's 64,
             * Q column 8*(i/4) + 2*(lane%4) + i%2. Staged through shared memory so that global stores are whole
             * 16-byte chunks of output rows; the producer keeps loading the next unit meanwhile. */
            uint8_t *stage_out = out_stage + wg * (C::kOutRows * C::kOutPitch);
            if (!SWAP && !unit.partial && p.y_dtype != 0) {
                /* 16-bit output: bias added, pairs packed into shared memory. With y_tma the layout is [BQ/64]
                 * boxes of [64][64] with the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8):
                 * conflict-free here, and what the TMA expects), and one thread stores them with TMA while the
                 * warpgroup moves on to the next unit; otherwise padded rows, copied out in 16-byte chunks. */
                if (p.y_tma && t == 0) bulk_wait_read_all(); /* the previous unit's store has read the buffer */
                named_barrier_sync(1 + wg); /* ... and (staged) the previous unit's copy-out is done */
#pragma unroll
                for (int j = 0; j < BQ / 8; j++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int r = warp * 16 + lane / 4 + 8 * h, c = 8 * j + 2 * (lane % 4);
                        float v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
                        if (p.bias_dtype >= 0) {
                            const int64_t n0 = q_base + c;
                            if (n0 < p.n) v0 += bfp8_dev_load_f32(p.bias, p.bias_dtype, n0);
                            if (n0 + 1 < p.n) v1 += bfp8_dev_load_f32(p.bias, p.bias_dtype, n0 + 1);
                        }
                        uint32_t packed;
                        if (p.y_dtype == 1) {
                            __nv_bfloat162 b2 = __floats2bfloat162_rn(v0, v1);
                            memcpy(&packed, &b2, 4);
                        } else {
                            __half2 h2 = __floats2half2_rn(v0, v1);
                            memcpy(&packed, &h2, 4);
                        }
                        const int cc = c % 64;
                        const int off = p.y_tma ? (c / 64) * 8192 + r * 128 + (((cc / 8) ^ (r & 7)) << 4) + (cc % 8) * 2
                                                : r * C::kOutPitch + c * 2;
                        *(uint32_t *)(stage_out + off) = packed;
                    }
                }
                if (p.y_tma) {
                    fence_proxy_async();
                    named_barrier_sync(1 + wg);
                    if (t == 0) {
                        const uint32_t src = smem_u32(stage_out);
#pragma unroll
                        for (int box = 0; box < BQ / 64; box++)
                            tma_store_2d(&map_y, src + box * 8192, (int)q_base + 64 * box, (int)p_base);
                        bulk_commit();
                    }
                } else {
                    named_barrier_sync(1 + wg);
                    constexpr int kChunks = BQ / 8; /* 16-byte chunks per staged row */
                    for (int idx = t; idx < 64 * kChunks; idx += 128) {
                        const int r = idx / kChunks, ch = idx % kChunks;
                        const int64_t row = p_base + r, col = q_base + ch * 8;
                        if (row >= p.m || col >= p.n) continue;
                        const uint8_t *src = stage_out + r * C::kOutPitch + ch * 16;
                        uint16_t *dst = (uint16_t *)p.y + row * p.n + col;
                        if (p.y_vec && col + 8 <= p.n) {
                            *(uint4 *)dst = *(const uint4 *)src;
                        } else {
                            for (int e = 0; e < 8 && col + e < p.n; e++) dst[e] = ((const uint16_t *)src)[e];
                        }
                    }
                }
            } else if (!SWAP) {
                /* fp32 output or split-K partials: adjacent column pairs straight from registers. */
#pragma unroll
                for (int j = 0; j < BQ / 8; j++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int64_t row = p_base + warp * 16 + lane / 4 + 8 * h;
                        const int64_t col = q_base + 8 * j + 2 * (lane % 4);
                        if (row >= p.m || col >= p.n) continue;
                        float v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
                        float *dst;
                        if (unit.partial) {
                            dst = p.workspace + ((int64_t)split * p.m + row) * p.n + col;
                        } else {
                            if (p.bias_dtype >= 0) {
                                v0 += bfp8_dev_load_f32(p.bias, p.bias_dtype, col);
                                if (col + 1 < p.n) v1 += bfp8_dev_load_f32(p.bias, p.bias_dtype, col + 1);
                            }
                            dst = (float *)p.y + row * p.n + col;
                        }
                        if (col + 1 < p.n && (p.n % 2) == 0) {
                            *(float2 *)dst = make_float2(v0, v1);
                        } else {
                            dst[0] = v0;
                            if (col + 1 < p.n) dst[1] = v1;
                        }
                    }
                }
            } else {
                /* Swapped: the fragment is [weight rows n][tokens m]; stage it transposed as fp32 [m][n], then
                 * write rows of y (or of the split's partials) four columns at a time. */
                float *sf = (float *)stage_out;
                constexpr int kPitchF = C::kOutPitch / 4;
                named_barrier_sync(1 + wg);
#pragma unroll
                for (int i = 0; i < BQ / 2; i++) {
                    const int n_local = warp * 16 + lane / 4 + 8 * ((i / 2) % 2);
                    const int m_local = 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
                    sf[m_local * kPitchF + n_local] = total[i];
                }
                named_barrier_sync(1 + wg);
                for (int idx = t; idx < BQ * 16; idx += 128) {
                    const int r = idx / 16, ch = idx % 16;
                    const int64_t row = q_base + r, col = p_base + ch * 4;
                    if (row >= p.m || col >= p.n) continue;
                    float4 v = *(const float4 *)(sf + r * kPitchF + ch * 4);
                    float vals[4] = {v.x, v.y, v.z, v.w};
                    const bool whole = col + 4 <= p.n && (p.n % 4) == 0;
                    if (unit.partial) {
                        float *dst = p.workspace + ((int64_t)split * p.m + row) * p.n + col;
                        if (whole) {
                            *(float4 *)dst = v;
                        } else {
                            for (int e = 0; e < 4 && col + e < p.n; e++) dst[e] = vals[e];
                        }
                        continue;
                    }
                    for (int e = 0; e < 4; e++)
                        if (p.bias_dtype >= 0 && col + e < p.n)
                            vals[e] += bfp8_dev_load_f32(p.bias, p.bias_dtype, col + e);
                    const int64_t o = row * p.n + col;
                    if (whole && p.y_vec && p.y_dtype == 1) {
                        __nv_bfloat162 lo = __floats2bfloat162_rn(vals[0], vals[1]);
                        __nv_bfloat162 hi = __floats2bfloat162_rn(vals[2], vals[3]);
                        uint2 w;
                        memcpy(&w.x, &lo, 4);
                        memcpy(&w.y, &hi, 4);
                        *(uint2 *)((uint16_t *)p.y + o) = w;
                    } else if (whole && p.y_vec && p.y_dtype == 0) {
                        *(float4 *)((float *)p.y + o) = make_float4(vals[0], vals[1], vals[2], vals[3]);
                    } else {
                        for (int e = 0; e < 4 && col + e < p.n; e++) bfp8_dev_store_f32(p.y, p.y_dtype, o + e, vals[e]);
                    }
                }
            }
        }
        if (!SWAP && p.y_tma && t == 0) bulk_wait_all(); /* the last stores complete before the CTA exits */
    }
#endif
}

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

/* ----------------------------------------------------------------------------------------------------------------
 * Host side: plan, tensor maps, launch.
 * -------------------------------------------------------------------------------------------------------------- */

struct Plan {
    bool swap;
    int bq;
    int p_tiles, q_tiles, splits, kb_per_split, units, grid;
    int whole_units; /* see HopperParams */
};

/* BFP8_HOPPER_HYBRID=0 never splits only the last wave's tiles, =1 always does where it applies (decode, long K,
 * tiles > SMs; for tests and side-by-side measurement); unset: the time model decides. Read once. */
int hybrid_mode(void) {
    static const int mode = [] {
        const char *e = getenv("BFP8_HOPPER_HYBRID");
        return e && (e[0] == '0' || e[0] == '1') ? e[0] - '0' : -1;
    }();
    return mode;
}

/* BFP8_HOPPER_TILE forces one tiling, for tests and side-by-side measurement: "swap" (swapped while M <= 128, Q tile
 * the power of two >= M), "swapN" (swapped while M <= 128, Q tiles of N = 8..128 tokens, several when M > N), or 64
 * or 128 (the normal path with weight tiles that wide). Anything else is ignored: make_plan decides. Read once. */
struct TileOverride {
    bool set, swap;
    int bq; /* 0 with swap: the power of two >= M */
};
TileOverride tile_override(void) {
    static const TileOverride tile = [] {
        TileOverride t = {false, false, 0};
        const char *e = getenv("BFP8_HOPPER_TILE");
        if (!e) return t;
        const bool swap = strncmp(e, "swap", 4) == 0;
        const char *num = swap ? e + 4 : e;
        char *end = nullptr;
        const long v = *num ? strtol(num, &end, 10) : 0;
        const bool whole = !*num || (end != num && *end == '\0');
        const bool ok = whole && (swap ? (v == 0 || v == 8 || v == 16 || v == 32 || v == 64 || v == 128)
                                       : (v == 64 || v == 128));
        if (ok) t = {true, swap, (int)v};
        return t;
    }();
    return tile;
}

/* One tiling (swapped with Q tiles of bq tokens, or normal with weight tiles of bq rows) and its K split. Split K
 * when there are too few tiles to fill the SMs evenly, choosing the split count that minimizes a simple time model:
 * waves of units x (K blocks per unit x the time of one block on one SM + a fixed cost per unit), plus the
 * workspace traffic and the reduce of a split. A block's time is the larger of its weight bytes from HBM at a 1/sms
 * share of the bandwidth (activations and, at large M, weights come from L2) and its FLOPs at a 1/sms share of
 * ~1000 TFLOP/s. The per-unit cost (~0.5 us: epilogue, barriers, pipeline refill) and the reduce's ~3 us come from
 * the H200 (ncu: M=1 7168x2048 was split 16 ways into one-block units, GEMM 9.6 us + reduce 7 us, where 2 splits
 * model faster; with 2 us the model split M=1 24576x1536 in two, 22.0 us, where the unsplit plan of M=16 took
 * 18.1; bench/hopper-notes.md, v4). */
Plan plan_tiling(bool swap, int bq, int64_t m, int64_t n, int64_t k, int sms) {
    Plan pl = {};
    pl.swap = swap;
    pl.bq = bq;
    const int64_t p_rows = pl.swap ? n : m, q_rows = pl.swap ? m : n;
    pl.p_tiles = (int)bfp8_ceil_div(p_rows, kBP);
    pl.q_tiles = (int)bfp8_ceil_div(q_rows, pl.bq);
    const int kblocks = (int)bfp8_ceil_div(k, kBK);
    const int64_t tiles = (int64_t)pl.p_tiles * pl.q_tiles;
    const double chip_bw = 4.0e12, sm_bw = chip_bw / sms, sm_flops = 1.0e15 / sms;
    /* Weight bytes per block come from HBM once per M tile: all of them when one M tile covers M. */
    const double hbm_bytes = pl.swap ? (double)kBP * kBK : (double)pl.bq * kBK / (double)pl.p_tiles;
    const double mem_s = hbm_bytes / sm_bw, flop_s = 2.0 * kBP * pl.bq * kBK / sm_flops;
    const double block_s = mem_s > flop_s ? mem_s : flop_s;
    double best = 1e30;
    int best_s = 1;
    const int max_s = kblocks < 32 ? kblocks : 32;
    for (int s = 1; s <= max_s; s++) {
        const int per = (kblocks + s - 1) / s;
        const int real_s = (kblocks + per - 1) / per; /* no empty splits */
        if (real_s != s) continue;
        const int64_t units = tiles * s;
        const int64_t waves = (units + sms - 1) / sms;
        double t_s = (double)waves * (per * block_s + 0.5e-6);
        if (s > 1) t_s += ((double)s * m * n * 8.0) / chip_bw + 3.0e-6; /* partials out and back, the reduce */
        if (t_s < best * 0.97) {
            best = t_s;
            best_s = s;
        }
    }
    pl.splits = best_s;
    pl.kb_per_split = (kblocks + best_s - 1) / best_s;
    int64_t units = tiles * best_s;
    /* Decode with more tiles than SMs but not a whole number of waves (288 weight tiles on 132 SMs): whole tiles
     * for the full waves, and only the last partial wave's tiles split so that their pieces fill one wave. Splitting
     * every tile instead pays partials for all of them (8 bytes x splits x M x N: 75 MB at M=64 N=36864); not
     * splitting leaves 24 SMs running 56-block tiles alone at the end. Measured on the H200 (bench/hopper-notes.md,
     * v4) it pays only for long tiles: 36864x7168 (56 K blocks) M = 16/64/128: 82.5/92.4/128.3 -> 75.2/79.2/104.3
     * us; 24576x1536 (12 K blocks): 3-13% slower at M = 16..128, where the last wave is short and the tail's bytes
     * stream at the chip's rate anyway. Hence kblocks >= 32. Swapped with one Q tile only: there the whole tiles'
     * columns are a prefix of N, which is what the reduce skips. */
    if (pl.swap && pl.q_tiles == 1 && tiles > sms && tiles % sms != 0 && kblocks >= 32 && hybrid_mode() != 0) {
        const int64_t whole = tiles / sms * sms, tail = tiles - whole;
        int s = (int)(sms / tail);
        if (s > kblocks) s = kblocks;
        if (s >= 2) {
            const int per = (kblocks + s - 1) / s;
            s = (kblocks + per - 1) / per;
            double t_h = (double)(whole / sms) * (kblocks * block_s + 0.5e-6) + (per * block_s + 0.5e-6);
            t_h += ((double)s * m * tail * kBP * 8.0) / chip_bw + 3.0e-6;
            if (t_h < best * 0.97 || hybrid_mode() == 1) {
                pl.splits = s;
                pl.kb_per_split = per;
                pl.whole_units = (int)whole;
                units = whole + tail * s;
            }
        }
    }
    pl.units = (int)units;
    pl.grid = (int)(units < sms ? units : sms);
    return pl;
}

/* The tiling, from a sweep of the tilings on the DeepSeek-R1 table (H200, bench/hopper-notes.md, v5):
 *  - M <= 64: swapped, the Q tile the power of two >= M (fastest in 23 of 24 cells; the normal path's 128-row
 *    activation tile is mostly padding there);
 *  - otherwise the normal path, 64-wide weight tiles when their waves cost no more than the 128-wide tiles' waves:
 *    a 64-wide tile takes about 2/3 of a 128-wide one's time (measured 37 vs 56 us a wave at M = 512 and 4096,
 *    7168x16384), so 2 x waves(64) <= 3 x waves(128). That picks 64 for the few-tile shapes (M=128 with N <= 24576,
 *    M=512 N=2112: 11.8-22.2 us against 14.4-28.9 with 128-wide tiles) and 128 for the rest.
 * BFP8_HOPPER_TILE overrides (tile_override). */
/* Normal-path tiles of an M x N output with weight tiles bq wide (make_plan and hopper_priority). */
int64_t normal_tiles(int64_t m, int64_t n, int bq) { return bfp8_ceil_div(m, kBP) * bfp8_ceil_div(n, bq); }

Plan make_plan(int64_t m, int64_t n, int64_t k, int sms) {
    const TileOverride forced = tile_override();
    if (forced.set && !forced.swap) return plan_tiling(false, forced.bq, m, n, k, sms);
    if (m <= 64 || (forced.set && m <= 128)) {
        int bq = 8;
        while (bq < m) bq *= 2;
        if (forced.set && forced.bq) bq = forced.bq;
        return plan_tiling(true, bq, m, n, k, sms);
    }
    const int64_t waves64 = bfp8_ceil_div(normal_tiles(m, n, 64), sms);
    const int64_t waves128 = bfp8_ceil_div(normal_tiles(m, n, 128), sms);
    return plan_tiling(false, 2 * waves64 <= 3 * waves128 ? 64 : 128, m, n, k, sms);
}

PFN_cuTensorMapEncodeTiled_v12000 get_encode_fn(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *ptr = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            ptr = nullptr;
        return (PFN_cuTensorMapEncodeTiled_v12000)ptr;
    }();
    return fn;
}

/* 2D map over a row-major [rows, cols] matrix of `elem` bytes per element, row stride `ld` elements. Encoded maps
 * are kept in a small per-thread cache keyed by everything that goes into them (weights are encoded once; a
 * reused address with the same shape gives the same map), which keeps the encoding off the per-call path. */
struct MapKey {
    const void *base;
    int64_t rows, cols, ld;
    uint32_t box_cols, box_rows;
    int type;
    bool swizzle;
};

bfp8_status encode_map(CUtensorMap *map, CUtensorMapDataType type, size_t elem, const void *base, int64_t rows,
                       int64_t cols, int64_t ld, uint32_t box_cols, uint32_t box_rows, bool swizzle,
                       const char *what) {
    constexpr int kCache = 16;
    static thread_local MapKey keys[kCache];
    static thread_local CUtensorMap maps[kCache];
    static thread_local int used = 0, next = 0;
    const MapKey key = {base, rows, cols, ld, box_cols, box_rows, (int)type, swizzle};
    for (int i = 0; i < used; i++) {
        const MapKey &c = keys[i];
        if (c.base == key.base && c.rows == key.rows && c.cols == key.cols && c.ld == key.ld &&
            c.box_cols == key.box_cols && c.box_rows == key.box_rows && c.type == key.type &&
            c.swizzle == key.swizzle) {
            *map = maps[i];
            return BFP8_OK;
        }
    }
    PFN_cuTensorMapEncodeTiled_v12000 encode = get_encode_fn();
    if (!encode) return bfp8_fail(BFP8_ERR_DEVICE, "hopper: cuTensorMapEncodeTiled not found in the CUDA driver");
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)(ld * (int64_t)elem)};
    const cuuint32_t box[2] = {box_cols, box_rows};
    const cuuint32_t estrides[2] = {1, 1};
    CUresult r = encode(map, type, 2, const_cast<void *>(base), dims, strides, box, estrides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE,
                        swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return bfp8_fail(BFP8_ERR_DEVICE, "hopper: cuTensorMapEncodeTiled(%s: %lld x %lld, ld %lld) failed: %d", what,
                         (long long)rows, (long long)cols, (long long)ld, (int)r);
    keys[next] = key;
    maps[next] = *map;
    next = (next + 1) % kCache;
    if (used < kCache) used++;
    return BFP8_OK;
}

template <int BQ, bool SWAP>
cudaError_t launch_kernel(const CUtensorMap &mp, const CUtensorMap &mq, const CUtensorMap &ms, const CUtensorMap &my,
                          const HopperParams &hp, int grid, cudaStream_t stream) {
    auto kernel = hopper_gemm_kernel<BQ, SWAP>;
    const int smem = Config<BQ, SWAP>::kSmemBytes;
    static bool attr_set = false; /* idempotent: a race only sets it twice */
    if (!attr_set) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    kernel<<<grid, kThreads, smem, stream>>>(mp, mq, ms, my, hp);
    return cudaGetLastError();
}

cudaError_t launch_planned(const Plan &pl, const CUtensorMap &mp, const CUtensorMap &mq, const CUtensorMap &ms,
                           const CUtensorMap &my, const HopperParams &hp, cudaStream_t stream) {
    if (!pl.swap) {
        switch (pl.bq) {
        case 64: return launch_kernel<64, false>(mp, mq, ms, my, hp, pl.grid, stream);
        default: return launch_kernel<128, false>(mp, mq, ms, my, hp, pl.grid, stream);
        }
    }
    switch (pl.bq) {
    case 8: return launch_kernel<8, true>(mp, mq, ms, my, hp, pl.grid, stream);
    case 16: return launch_kernel<16, true>(mp, mq, ms, my, hp, pl.grid, stream);
    case 32: return launch_kernel<32, true>(mp, mq, ms, my, hp, pl.grid, stream);
    case 64: return launch_kernel<64, true>(mp, mq, ms, my, hp, pl.grid, stream);
    default: return launch_kernel<128, true>(mp, mq, ms, my, hp, pl.grid, stream);
    }
}

/* BFP8_HOPPER_TMA_STORE=0 keeps the v2 epilogue (16-byte stores by every thread) on the normal path, for
 * side-by-side measurement. Read once. */
bool tma_store_enabled(void) {
    static const bool on = [] {
        const char *e = getenv("BFP8_HOPPER_TMA_STORE");
        return !(e && e[0] == '0');
    }();
    return on;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* BFP8_LOG containing "hopper": one stderr line per call with the plan (path, tile, splits, grid). Read once. */
bool log_plans(void) {
    static const bool on = [] {
        const char *e = getenv("BFP8_LOG");
        return e && strstr(e, "hopper") != nullptr;
    }();
    return on;
}

/* Why this kernel cannot run `args` (written to why), or true when it can: what the caps promise the dispatcher
 * (checked again because cuda_generic and direct callers reach the kernel too) plus the run-time conditions. */
bool hopper_takes(const bfp8_gemm_args *args, int arch, char *why, size_t why_size) {
    const int64_t m = args->m, n = args->n, k = args->k;
    if (args->device != BFP8_DEVICE_CUDA) {
        snprintf(why, why_size, "data must be on the CUDA device");
    } else if (arch != 90) {
        snprintf(why, why_size, "needs sm_90 (this device is sm_%d)", arch);
    } else if (k < 16 || k % 16 != 0) {
        snprintf(why, why_size, "K=%lld is not a multiple of 16", (long long)k);
    } else if (args->a_scales.layout != BFP8_LAYOUT_MN_MAJOR_ALIGNED ||
               args->b_scales.layout != BFP8_LAYOUT_ROW_MAJOR) {
        snprintf(why, why_size, "needs activation scales mn_major_aligned and weight scales row_major (got %s, %s)",
                 bfp8_scale_layout_name(args->a_scales.layout), bfp8_scale_layout_name(args->b_scales.layout));
    } else if (!aligned16(args->a) || !aligned16(args->b) || !aligned16(args->a_scales.data)) {
        snprintf(why, why_size, "A, B and the activation scales must be 16-byte aligned (TMA): %p %p %p",
                 (const void *)args->a, (const void *)args->b, args->a_scales.data);
    } else if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
        snprintf(why, why_size, "dimensions beyond 2^31-1 (TMA coordinates)");
    } else {
        return true;
    }
    return false;
}

/* Runs a problem hopper_takes() accepted. */
bfp8_status hopper_run(const bfp8_gemm_args *args, int sms) {
    const int64_t m = args->m, n = args->n, k = args->k;
    if (m == 0 || n == 0) return BFP8_OK;
    const Plan pl = make_plan(m, n, k, sms);
    const int64_t kblocks = bfp8_ceil_div(k, kBK);
    const int64_t sa_ld = bfp8_round_up(m, 4);
    const uint8_t *p_mat = pl.swap ? args->b : args->a;
    const uint8_t *q_mat = pl.swap ? args->a : args->b;
    const int64_t p_rows = pl.swap ? n : m, q_rows = pl.swap ? m : n;
    CUtensorMap map_p, map_q, map_sa;
    BFP8_TRY(encode_map(&map_p, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p_mat, p_rows, k, k, kBK, kBP, true, "P"));
    BFP8_TRY(encode_map(&map_q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, q_mat, q_rows, k, k, kBK, (uint32_t)pl.bq, true,
                        "Q"));
    BFP8_TRY(encode_map(&map_sa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, args->a_scales.data, kblocks, sa_ld, sa_ld,
                        pl.swap ? (uint32_t)pl.bq : (uint32_t)kBP, 1, false, "activation scales"));

    HopperParams hp = {};
    hp.m = m;
    hp.n = n;
    hp.k = k;
    hp.kblocks = (int)kblocks;
    hp.p_tiles = pl.p_tiles;
    hp.q_tiles = pl.q_tiles;
    hp.splits = pl.splits;
    hp.kb_per_split = pl.kb_per_split;
    hp.whole_units = pl.whole_units;
    hp.units = pl.units;
    hp.sb = (const float *)args->b_scales.data;
    hp.bias = args->bias;
    hp.bias_dtype = args->bias ? (int)args->bias_dtype : -1;
    hp.y = args->y;
    hp.y_dtype = (int)args->y_dtype;
    hp.y_vec = (n % 8 == 0) && ((uintptr_t)args->y % 16 == 0);
    hp.y_tma = !pl.swap && pl.splits == 1 && hp.y_vec && args->y_dtype != BFP8_DTYPE_F32 && tma_store_enabled();
    CUtensorMap map_y;
    memset(&map_y, 0, sizeof map_y); /* unused unless y_tma */
    if (hp.y_tma)
        BFP8_TRY(encode_map(&map_y, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, args->y, m, n, n, 64, 64, true, "Y"));

    cudaStream_t stream = (cudaStream_t)args->stream;
    void *ws = nullptr;
    if (pl.splits > 1) {
        size_t bytes = (size_t)pl.splits * (size_t)m * (size_t)n * sizeof(float);
        BFP8_TRY(bfp8_cuda_malloc_async(&ws, bytes, args->stream));
        hp.workspace = (float *)ws;
    }
    cudaError_t e = launch_planned(pl, map_p, map_q, map_sa, map_y, hp, stream);
    if (log_plans())
        fprintf(stderr, "[bfp8 hopper] M=%lld N=%lld K=%lld: %s BQ=%d splits=%d (K blocks per split %d) units=%d "
                        "(whole %d) grid=%d\n",
                (long long)m, (long long)n, (long long)k, pl.swap ? "swapped" : "normal", pl.bq, pl.splits,
                pl.kb_per_split, pl.units, pl.whole_units, pl.grid);
    if (e == cudaSuccess && pl.splits > 1) {
        /* Columns (weight rows, swapped) of whole tiles are final already; the reduce covers the rest. */
        const int64_t n0 = pl.swap ? (int64_t)pl.whole_units * kBP : 0, count = m * (n - n0);
        const int vec = (n % 4 == 0) && ((uintptr_t)args->y % 16 == 0);
        int64_t blocks = ((vec ? count / 4 : count) + 255) / 256;
        if (blocks > 8 * (int64_t)sms) blocks = 8 * (int64_t)sms;
        /* Programmatic dependent launch hides the reduce kernel's launch latency behind the GEMM's tail. */
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3((unsigned)blocks, 1, 1);
        cfg.blockDim = dim3(256, 1, 1);
        cfg.stream = stream;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        e = cudaLaunchKernelEx(&cfg, hopper_splitk_reduce, (const float *)ws, pl.splits, m, n, n0, hp.bias,
                               hp.bias_dtype, args->y, hp.y_dtype, vec);
    }
    if (ws) {
        bfp8_status st = bfp8_cuda_free_async(ws, args->stream);
        if (st != BFP8_OK && e == cudaSuccess) return st;
    }
    if (e != cudaSuccess)
        return bfp8_fail(BFP8_ERR_DEVICE, "hopper: launch (M=%lld N=%lld K=%lld, %s BQ=%d splits=%d) failed: %s",
                         (long long)m, (long long)n, (long long)k, pl.swap ? "swapped" : "normal", pl.bq, pl.splits,
                         cudaGetErrorString(e));
    return BFP8_OK;
}

bfp8_status hopper_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    (void)self;
    if (args->m == 0 || args->n == 0) return BFP8_OK;
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
    char why[BFP8_REASON_MAX];
    if (!hopper_takes(args, info.arch, why, sizeof why)) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "hopper: %s", why);
    return hopper_run(args, info.num_sms);
}

/* Where `hopper` is measured faster than cuBLASLt (bench/RESULTS.md, latest same-run table): every M <= 4 cell;
 * M <= 16 with at least 16 MiB of weights; M <= 64 with K >= 7168; and above M = 64, with K <= 7168, where the
 * normal path's 64-wide weight tiles fit one wave of the H200's 132 SMs (M=128 with N <= 7168, M=512 with N=2112:
 * few tiles, which cuBLASLt's fixed tiling leaves on idle SMs). Elsewhere cuBLASLt (priority 30) is faster, so
 * hopper ranks below it and serves only what cuBLASLt declines. */
int hopper_priority(const bfp8_backend *self, const bfp8_problem *p) {
    (void)self;
    const bool big_weights = (double)p->n * (double)p->k >= 16.0 * 1024 * 1024;
    if (p->m <= 4 || (p->m <= 16 && big_weights) || (p->m <= 64 && p->k >= 7168)) return 35;
    if (p->m > 64 && p->k <= 7168 && normal_tiles(p->m, p->n, 64) <= 132) return 35;
    return 25;
}

const bfp8_backend kHopperBackend = {
    "hopper",
    "sm_90a TMA + FP8 wgmma, warp-specialized persistent kernel; swap-AB and split-K for decode",
    {
        BFP8_DEVICE_CUDA,
        90,
        90,
        BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16) | BFP8_BIT(BFP8_DTYPE_F32),
        BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0),
        BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED),
        BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR),
        BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16),
        16,         /* min_k */
        1,          /* m_multiple: any M (TMA zero-fills the rows beyond M) */
        false,      /* pads_m */
        1,          /* n_multiple: any N (zero-filled rows, bounds-checked stores) */
        16,         /* k_multiple: TMA row strides are multiples of 16 bytes */
        INT32_MAX,  /* max_m: TMA coordinates are int32 */
        INT32_MAX,  /* max_n */
        INT32_MAX,  /* max_k */
        25,         /* priority: see hopper_priority */
    },
    nullptr, /* supports: the caps say everything */
    hopper_gemm,
    nullptr,
    hopper_priority,
};

} // namespace

extern "C" const bfp8_backend *bfp8_hopper_backend(void) { return &kHopperBackend; }

extern "C" bool bfp8_hopper_kernel_takes(const bfp8_gemm_args *args, int arch, char *why, size_t why_size) {
    return hopper_takes(args, arch, why, why_size);
}

extern "C" bfp8_status bfp8_hopper_kernel_run(const bfp8_gemm_args *args, int sms) { return hopper_run(args, sms); }
