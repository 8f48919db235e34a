/* hopper's tall kernel: the normal path (P = A, the activations; Q = B, the weight) with tiles of 256 activation rows
 * x 128 weight rows, for large M (BFP8_HOPPER_TALL=1; plan.c).
 *
 * Why taller: per 128 K, a 128x128 tile (kernel.cuh) takes 32 KB from the L2 for 512 MMA clocks; a 256x128 tile
 * takes 48 KB for 1024, a quarter less per FLOP, and its epilogue and first loads are spread over twice the work.
 * Shared memory is not the limit (docs/hopper.md, design log 73). The cost is registers: a consumer warpgroup owns
 * 128 rows, a 128 x 128 fp32 total (128 registers a thread), which leaves room for one 64 x 128 partial, not two.
 *
 * One CTA = 3 warpgroups, as kernel.cuh: warpgroup 0 the producer (one thread issues the TMA loads of a stage: the
 * 256-row activation box, the 128-row weight box and the block's 256 activation scales, completing on the stage's
 * "full" mbarrier), warpgroups 1 and 2 the consumers, 128 activation rows each as two 64-row sub-blocks. Per K block
 * a consumer waits on "full", reads its four activation scales, then for each sub-block issues four m64n128k32 wgmmas
 * into its one partial, waits for them and promotes the partial into the sub-block's total (total += partial * sa *
 * sb); it releases the stage (one arrival per warp on "empty") after the second sub-block's MMAs, before that
 * promotion. A warpgroup's promotion runs on the CUDA cores while the other warpgroup's MMAs keep the tensor cores
 * busy: the two drift half a sub-block apart.
 *
 * Epilogue: 16-bit output with y_tma goes through shared memory in [64][64] TMA-store boxes with the 128-byte swizzle,
 * four a warpgroup (two sub-blocks x two column boxes), stored by one thread while the warpgroup starts its next unit;
 * any other output (fp32, N % 8 != 0, unaligned y) is stored from registers as column pairs, bounds-checked. Rows
 * past M and columns past N are computed (boxes past the matrix hold zeros or stale rows) and never stored.
 *
 * Plans: whole tiles only, walked persistently in steps of the grid (decode_tile_unit over the 256-row P tiles).
 *
 * Device code for launch.cu, its one includer (hence the unnamed namespace). */
#ifndef BFP8_HOPPER_KERNEL_TALL_CUH
#define BFP8_HOPPER_KERNEL_TALL_CUH

#include <cuda.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <string.h>
#include <type_traits>

#include "backends/cuda/fp8_math.cuh"
#include "backends/cuda/sm90_async.cuh"
#include "backends/hopper/config.cuh"
#include "backends/hopper/schedule.h"
#include "backends/hopper/wgmma.cuh"

namespace {

struct TallConfig {
    static constexpr int kBP = BFP8_HOPPER_TALL_BP; /* activation rows a tile: two consumers of 128 */
    static constexpr int kBQ = 128;                 /* weight rows a tile */
    static constexpr int kPBytes = kBP * kBK, kQBytes = kBQ * kBK;
    static constexpr int kStageBytes = kPBytes + kQBytes; /* 48 KB, a multiple of the 1024-byte swizzle atom */
    static constexpr int kScaleSlot = kBP * 4;            /* the block's activation scales */
    static constexpr int kOutBytes = 2 * 4 * 8192;        /* per consumer: 2 sub-blocks x 2 [64][64] 16-bit boxes */
    static constexpr int kStagesFit = (kMaxSmem - 1024 - kOutBytes - 256) / (kStageBytes + kScaleSlot + 16);
    static constexpr int kStages = kStagesFit;
    static constexpr int kSmemBytes = 1024 + kStages * (kStageBytes + kScaleSlot) + kOutBytes + kStages * 16;
};
static_assert(TallConfig::kStages == 3, "the tall kernel's ring: three stages of 48 KB");
static_assert(TallConfig::kSmemBytes <= kMaxSmem, "tall kernel shared memory");

__global__ void __launch_bounds__(kThreads, 1)
    hopper_tall_kernel(const __grid_constant__ TensorMaps maps, const HopperParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = TallConfig;
    constexpr int kStages = C::kStages, BP = C::kBP, BQ = C::kBQ;
    extern __shared__ uint8_t smem_raw[];
    /* Rounded up to the swizzle atom by an offset from smem_raw (kernel.cuh says why not by masking). */
    uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    uint8_t *tiles = smem;
    uint8_t *out_stage = smem + kStages * C::kStageBytes; /* 1024-aligned: TMA-store source */
    float *scales = (float *)(out_stage + C::kOutBytes);
    uint64_t *bars = (uint64_t *)(scales + kStages * (C::kScaleSlot / 4));
    const uint32_t tiles_u32 = smem_u32(tiles);
    const uint32_t full0 = smem_u32(bars), empty0 = smem_u32(bars + kStages);

    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    /* Warp-uniform through a shuffle (kernel.cuh says why). */
    const int warpgroup = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (threadIdx.x == 0) {
        tma_prefetch_map(&maps.p);
        tma_prefetch_map(&maps.q);
        tma_prefetch_map(&maps.sa);
        for (int s = 0; s < kStages; s++) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 8); /* one arrival per consumer warp */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    auto tile_of = [&](int u) { return bfp8_hopper_tall_unit(&p, bfp8_hopper_decode_tile_unit(&p, u, false)); };

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (threadIdx.x == 0) {
            asm volatile("griddepcontrol.wait;\n" ::: "memory");
            int stage = 0;
            uint32_t phase = 0;
            for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
                const Unit unit = tile_of(u);
                const bool q_last = p.q_last_rows && unit.qt == p.q_tiles - 1;
                const uint32_t bytes =
                    (uint32_t)(((unit.p_cut ? p.p_last_rows : BP) + (q_last ? p.q_last_rows : BQ)) * kBK + BP * 4);
                for (int kb = 0; kb < p.kblocks; kb++) {
                    mbar_wait(empty0 + 8 * stage, phase ^ 1);
                    const uint32_t full = full0 + 8 * stage, tile = tiles_u32 + stage * C::kStageBytes;
                    mbar_arrive_expect_tx(full, bytes);
                    tma_load_2d(tile, unit.p_cut ? &maps.p_last : &maps.p, kb * kBK, unit.p0, full);
                    if (p.weight_evict_first)
                        tma_load_2d_hint(tile + C::kPBytes, q_last ? &maps.q_last : &maps.q, kb * kBK, unit.qt * BQ,
                                         full, l2_policy_evict_first());
                    else
                        tma_load_2d(tile + C::kPBytes, q_last ? &maps.q_last : &maps.q, kb * kBK, unit.qt * BQ,
                                    full);
                    tma_load_2d(smem_u32(scales + stage * (C::kScaleSlot / 4)), &maps.sa, unit.p0, kb, full);
                    if (++stage == kStages) stage = 0, phase ^= 1;
                }
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int wg = warpgroup - 1; /* which 128 P rows */
    const int t = threadIdx.x - 128 * warpgroup, warp = t / 32, lane = t % 32;
    int stage = 0;
    uint32_t phase = 0;
    float acc[BQ / 2]; /* (each block's first wgmma overwrites it; zeroed once so that no asm reads it undefined) */
#pragma unroll
    for (int i = 0; i < BQ / 2; i++) acc[i] = 0.0f;
    float total[2][BQ / 2];
    /* Sub-block s of this warpgroup: P rows wg * 128 + s * 64 of the tile, 1024 bytes per 8 rows. */
    const uint64_t p_desc0 = smem_desc(tiles_u32 + wg * 128 * kBK), q_desc0 = smem_desc(tiles_u32 + C::kPBytes);
    auto issue = [&](int st, int s) {
        const uint32_t stage_off = (uint32_t)st * (C::kStageBytes >> 4);
        const uint64_t p_desc = p_desc0 + stage_off + s * (64 * kBK >> 4), q_desc = q_desc0 + stage_off;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; kk++) bfp8_wgmma<BQ>::run(acc, p_desc + 2 * kk, q_desc + 2 * kk, kk);
        wgmma_commit();
    };
    auto fence_acc = [&]() {
#pragma unroll
        for (int i = 0; i < BQ / 2; i++) asm volatile("" : "+f"(acc[i])::"memory");
    };
    for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
        const Unit unit = tile_of(u);
        const float *sb_row = p.sb + (int64_t)((unit.qt * BQ) / 128) * p.kblocks;
#pragma unroll
        for (int s = 0; s < 2; s++)
#pragma unroll
            for (int i = 0; i < BQ / 2; i++) total[s][i] = 0.0f;
        float sb_next = __ldg(sb_row);
        for (int kb = 0; kb < p.kblocks; kb++) {
            const float sb = sb_next;
            if (kb + 1 < p.kblocks) sb_next = __ldg(sb_row + kb + 1); /* hidden behind this block's MMAs */
            mbar_wait(full0 + 8 * stage, phase);
            /* Accumulator rows 16 * warp + lane / 4 (+ 8) of each sub-block carry the scales. */
            const float *sa = scales + stage * (C::kScaleSlot / 4) + wg * 128 + warp * 16 + lane / 4;
            const float s00 = sa[0] * sb, s01 = sa[8] * sb, s10 = sa[64] * sb, s11 = sa[72] * sb;
#pragma unroll
            for (int s = 0; s < 2; s++) {
                issue(stage, s);
                wgmma_wait<0>();
                fence_acc();
                if (s == 1) { /* the stage's MMAs and scale reads are done: give it back */
                    __syncwarp();
                    if (lane == 0) mbar_arrive(empty0 + 8 * stage);
                }
                const float lo = s ? s10 : s00, hi = s ? s11 : s01;
#pragma unroll
                for (int i = 0; i < BQ / 2; i++) total[s][i] = fmaf(acc[i], (i & 2) ? hi : lo, total[s][i]);
            }
            if (++stage == kStages) stage = 0, phase ^= 1;
        }

        /* Epilogue. Element i of a sub-block's fragment is its row 16 * warp + lane / 4 + 8 * ((i / 2) % 2), column
         * 8 * (i / 4) + 2 * (lane % 4) + i % 2. */
        const int64_t q_base = (int64_t)unit.qt * BQ;
        if (p.bias_dtype >= 0) {
#pragma unroll
            for (int j = 0; j < BQ / 8; j++) {
                const int64_t col = q_base + 8 * j + 2 * (lane % 4);
                const float b0 = col < p.n ? bfp8_dev_load_f32(p.bias, p.bias_dtype, col) : 0.0f;
                const float b1 = col + 1 < p.n ? bfp8_dev_load_f32(p.bias, p.bias_dtype, col + 1) : 0.0f;
#pragma unroll
                for (int s = 0; s < 2; s++)
                    total[s][4 * j] += b0, total[s][4 * j + 1] += b1, total[s][4 * j + 2] += b0,
                        total[s][4 * j + 3] += b1;
            }
        }
        const int64_t row_base = (int64_t)unit.p0 + wg * 128; /* this warpgroup's first row */
        if (p.y_tma) {
            /* The previous unit's stores have read the buffer. */
            if (t == 0) bulk_wait_read_all();
            named_barrier_sync(1 + wg);
            uint8_t *base = out_stage + wg * 32768 + (warp * 16 + lane / 4) * 128 + 4 * (lane % 4);
            const int chunk_xor = (lane / 4) << 4;
            auto pack_all = [&](auto bf16) {
#pragma unroll
                for (int s = 0; s < 2; s++)
#pragma unroll
                    for (int j = 0; j < BQ / 8; j++) {
                        const int chunk = ((j % 8) << 4) ^ chunk_xor;
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const float v0 = total[s][4 * j + 2 * h], v1 = total[s][4 * j + 2 * h + 1];
                            uint32_t packed;
                            if constexpr (decltype(bf16)::value) {
                                __nv_bfloat162 b2 = __floats2bfloat162_rn(v0, v1);
                                memcpy(&packed, &b2, 4);
                            } else {
                                __half2 h2 = __floats2half2_rn(v0, v1);
                                memcpy(&packed, &h2, 4);
                            }
                            *(uint32_t *)(base + s * 16384 + (j / 8) * 8192 + h * 1024 + chunk) = packed;
                        }
                    }
            };
            if (p.y_dtype == 1)
                pack_all(std::true_type());
            else
                pack_all(std::false_type());
            fence_proxy_async();
            named_barrier_sync(1 + wg);
            if (t == 0) {
                const uint32_t src = smem_u32(out_stage + wg * 32768);
#pragma unroll
                for (int s = 0; s < 2; s++)
#pragma unroll
                    for (int box = 0; box < BQ / 64; box++)
                        tma_store_2d(&maps.y, src + s * 16384 + box * 8192, (int)q_base + 64 * box,
                                     (int)(row_base + 64 * s));
                bulk_commit();
            }
        } else {
            /* fp32, or 16-bit output that TMA cannot store (N % 8 != 0, unaligned y): column pairs from registers. */
            const bool pairs = p.y_dtype == 0 && p.n % 2 == 0; /* fp32 (row, even col) pairs are 8-byte aligned */
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int j = 0; j < BQ / 8; j++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int64_t row = row_base + 64 * s + warp * 16 + lane / 4 + 8 * h;
                        const int64_t col = q_base + 8 * j + 2 * (lane % 4);
                        if (row >= p.m || col >= p.n) continue;
                        const float v0 = total[s][4 * j + 2 * h], v1 = total[s][4 * j + 2 * h + 1];
                        const int64_t o = row * p.n + col;
                        if (pairs) {
                            *(float2 *)((float *)p.y + o) = make_float2(v0, v1);
                        } else {
                            bfp8_dev_store_f32(p.y, p.y_dtype, o, v0);
                            if (col + 1 < p.n) bfp8_dev_store_f32(p.y, p.y_dtype, o + 1, v1);
                        }
                    }
        }
    }
    if (p.y_tma && t == 0) bulk_wait_all(); /* the last stores complete before the CTA exits */
#endif
}

} // namespace

#endif
