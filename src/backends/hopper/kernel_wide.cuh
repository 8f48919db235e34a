/* hopper's wide kernel: the normal path (P = A, the activations; Q = B, the weight) with tiles of 128 activation rows
 * x 256 weight rows, for large M (plan.c picks it; BFP8_HOPPER_TILE=256 forces it).
 *
 * Why wider: per 128 x 128 x 128 block the 128-wide kernel (kernel.cuh) has 32 KB written into shared memory by TMA
 * and 48 KB read back by its wgmmas in 512 MMA clocks (160 B/clk against the SM's ~128) and takes 32 KB from the L2;
 * a 128 x 256 block moves 48 KB in and 96 KB out in 1024 clocks (144 B/clk) and takes 48 KB from the L2 for twice
 * the MMAs. The cost is registers: a consumer warpgroup's 64 x 256 fp32 total is 128 registers a thread, which
 * leaves room for one 64 x 128 partial, not two.
 *
 * One CTA = 3 warpgroups, as kernel.cuh: warpgroup 0 the producer (one thread issues the TMA loads of a stage: the
 * 128 x 128-byte activation box and the 256 x 128-byte weight box, completing on the stage's "full" mbarrier),
 * warpgroups 1 and 2 the consumers, 64 activation rows each, all 256 weight rows as two 128-column halves. Per K block
 * a consumer:
 *   1. waits on "full";
 *   2. issues the first half's four m64n128k32 wgmmas into its one partial, waits for them, promotes the partial into
 *      the first half's total (total += partial * sa * sb, the half's own weight scale);
 *   3. the same for the second half, releasing the stage (one arrival per warp on "empty") before that promotion.
 * A warpgroup's promotion runs on the CUDA cores while the other warpgroup's half keeps the tensor cores busy. To
 * make them alternate (ORDERED), the two take turns issuing: a warpgroup issues a half only once the other has issued
 * its previous one (named barriers 4 and 5: "warpgroup w has issued"), so the tensor cores run the halves one
 * warpgroup's after the other's instead of interleaved (where both would finish together and both promote while the
 * tensor cores idle). BFP8_HOPPER_WIDE=unordered runs the variant without the turns, for the measurement.
 * The activation scales are read by the consumers from global memory (hp.sa: two a thread a block, the next block's
 * loaded before this block's MMAs), not staged: the four stages of 48 KB and the epilogue's staging fill the 227 KB
 * (4 x 512 bytes of staged scales would not fit). The weight scales likewise (two a block, one per half).
 *
 * Epilogue: 16-bit output with y_tma goes through shared memory in [64][64] TMA-store boxes with the 128-byte swizzle,
 * four a warpgroup, through two 8 KB buffers per warpgroup in turn (before packing into one, the store that last read
 * it has read it: at most one store of the warpgroup still reading); fp32 output and K-split partials are stored from
 * registers as column pairs; 16-bit output without y_tma (N % 8 != 0, unaligned y) element by element. Rows past M and
 * columns past N are computed (the boxes past the matrix hold stale rows) and never stored.
 *
 * Plans: whole tiles or K splits of every tile (the reduce kernel sums the partials); no stream-K, last-wave split,
 * row slices or cluster sum (plan.c never plans them with this tiling). Both consumers always run (no one_consumer).
 *
 * Device code for launch.cu, its one includer (hence the unnamed namespace). */
#ifndef BFP8_HOPPER_KERNEL_WIDE_CUH
#define BFP8_HOPPER_KERNEL_WIDE_CUH

#include <cuda.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <string.h>
#include <type_traits>

#include "backends/cuda/fp8_math.cuh"
#include "backends/cuda/sm90_async.cuh"
#include "backends/hopper/config.cuh"
#include "backends/hopper/plan.h"
#include "backends/hopper/schedule.h"
#include "backends/hopper/wgmma.cuh"

namespace {

struct WideConfig {
    static constexpr int kBQ = BFP8_HOPPER_WIDE_BQ; /* weight rows a tile: two 128-column halves */
    static constexpr int kPBytes = kBP * kBK;       /* 16 KB of activations */
    static constexpr int kQBytes = kBQ * kBK;       /* 32 KB of weights */
    static constexpr int kStageBytes = kPBytes + kQBytes;
    static constexpr int kBoxBytes = 64 * 64 * 2;         /* one [64][64] 16-bit TMA-store box */
    static constexpr int kOutBytes = 2 * 2 * kBoxBytes;   /* two boxes a consumer warpgroup */
    static constexpr int kStagesFit = (kMaxSmem - 1024 - kOutBytes - 256) / (kStageBytes + 16);
    static constexpr int kStages = kStagesFit;
    static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kOutBytes + kStages * 16;
};
static_assert(WideConfig::kStages == 4, "the wide kernel's ring: four stages of 48 KB");
static_assert(WideConfig::kSmemBytes <= kMaxSmem, "the wide kernel's shared memory");

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The turn barriers of the two consumer warpgroups (ids 4 and 5: "warpgroup w has issued"; 1 and 2 are each
 * warpgroup's own, 3 kernel.cuh's consumers_sync). */
constexpr int kWideTurnBar = 4;
__device__ __forceinline__ void wide_turn_wait(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void wide_turn_give(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }
/* The shared-memory sources of all but the thread's latest committed store have been read. */
__device__ __forceinline__ void bulk_wait_read_but_one() {
    asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
}
#endif

template <bool ORDERED>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_wide_kernel(const __grid_constant__ TensorMaps maps, const HopperParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = WideConfig;
    constexpr int kStages = C::kStages, BQ = C::kBQ;
    extern __shared__ uint8_t smem_raw[];
    /* Rounded up to the 1024-byte swizzle atom by an offset from smem_raw (kernel.cuh says why not by a mask). */
    uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    uint8_t *tiles = smem;
    uint8_t *out_stage = smem + kStages * C::kStageBytes; /* 1024-aligned: TMA-store source */
    uint64_t *bars = (uint64_t *)(out_stage + C::kOutBytes);
    const uint32_t tiles_u32 = smem_u32(tiles);
    const uint32_t full0 = smem_u32(bars), empty0 = smem_u32(bars + kStages);

    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    const int warpgroup = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);

    auto q_last = [&](const Unit &unit) { return p.q_last_rows && unit.qt == p.q_tiles - 1; };
    auto load = [&](uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t full, bool weight) {
        if (weight && p.weight_evict_first)
            tma_load_2d_hint(dst, map, c0, c1, full, l2_policy_evict_first());
        else
            tma_load_2d(dst, map, c0, c1, full);
    };
    auto stage_bytes = [&](const Unit &unit) {
        const int p_rows = unit.p_cut ? p.p_last_rows : kBP, q_rows = q_last(unit) ? p.q_last_rows : BQ;
        return (uint32_t)((p_rows + q_rows) * kBK);
    };
    auto load_weight = [&](int st, const Unit &unit, int kb) {
        load(tiles_u32 + st * C::kStageBytes + C::kPBytes, q_last(unit) ? &maps.q_last : &maps.q, kb * kBK,
             unit.qt * BQ, full0 + 8 * st, true);
    };
    auto load_acts = [&](int st, const Unit &unit, int kb) {
        load(tiles_u32 + st * C::kStageBytes, unit.p_cut ? &maps.p_last : &maps.p, kb * kBK, unit.p0, full0 + 8 * st,
             false);
    };
    int entry_issued = 0; /* thread 0: stages of the first unit whose loads were issued at entry */
    if (threadIdx.x == 0) {
        tma_prefetch_map(&maps.p);
        tma_prefetch_map(&maps.q);
        for (int s = 0; s < kStages; s++) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 8); /* one arrival per consumer warp */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        /* The first unit's first stages (kernel.cuh's entry, the same rules). */
        const int entry_max = min(kStages, p.entry_stages);
        if (entry_max > 0 && (int)blockIdx.x < p.units) {
            const Unit unit = bfp8_hopper_decode_unit(&p, blockIdx.x, false, false);
            for (int kb = unit.kb0; kb < unit.kb1 && entry_issued < entry_max; kb++, entry_issued++) {
                mbar_arrive_expect_tx(full0 + 8 * entry_issued, stage_bytes(unit));
                load_weight(entry_issued, unit, kb);
                if (!p.dependent) load_acts(entry_issued, unit, kb);
            }
        }
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        /* Warp-uniform through a shuffle (kernel.cuh: keeps the producer loop in uniform registers). */
        entry_issued = __shfl_sync(0xffffffffu, entry_issued, 0);
        if (threadIdx.x == 0) {
            asm volatile("griddepcontrol.wait;\n" ::: "memory");
            if (p.dependent && entry_issued) {
                const Unit unit = bfp8_hopper_decode_unit(&p, blockIdx.x, false, false);
#pragma unroll 1
                for (int i = 0; i < entry_issued; i++) load_acts(i, unit, unit.kb0 + i);
            }
            int stage = entry_issued % kStages, skip = entry_issued;
            uint32_t phase = entry_issued == kStages;
            for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
                const Unit unit = bfp8_hopper_decode_unit(&p, u, false, false);
                for (int kb = unit.kb0 + skip; kb < unit.kb1; kb++) {
                    mbar_wait(empty0 + 8 * stage, phase ^ 1);
                    mbar_arrive_expect_tx(full0 + 8 * stage, stage_bytes(unit));
                    load_weight(stage, unit, kb);
                    load_acts(stage, unit, kb);
                    if (++stage == kStages) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                skip = 0;
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
        const int wg = warpgroup - 1; /* which 64 activation rows */
        const int t = threadIdx.x - 128 * warpgroup;
        const int warp = t / 32, lane = t % 32;
        /* The activation scales are read here from global memory: they may come from the kernel before this one. */
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        int stage = 0;
        uint32_t phase = 0;
        float acc[64]; /* the one partial: a 64 x 128 half of one K block */
        /* Stage 0's descriptors; a stage adds st * kStageBytes / 16, the second half 128 rows (16 KB / 16), a k32
         * step 2 (kernel.cuh: the 14-bit address field never carries). */
        const uint64_t p_desc0 = smem_desc(tiles_u32 + wg * 64 * kBK), q_desc0 = smem_desc(tiles_u32 + C::kPBytes);
        auto issue = [&](int st, int half) {
            const uint32_t off = (uint32_t)st * (C::kStageBytes >> 4);
            const uint64_t p_desc = p_desc0 + off, q_desc = q_desc0 + off + (uint32_t)half * ((128 * kBK) >> 4);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBK / 32; kk++) bfp8_wgmma<128>::run(acc, p_desc + 2 * kk, q_desc + 2 * kk, kk);
            wgmma_commit();
        };
        /* After the wait: the partial's registers count as written here (kernel.cuh's fence_acc). */
        auto fence_acc = [&]() {
#pragma unroll
            for (int i = 0; i < 64; i++) asm volatile("" : "+f"(acc[i])::"memory");
        };
        /* Taking turns: wait until the other warpgroup has issued its previous half, issue, say so. The barrier ids
         * come from the warpgroup index outside the loop (kernel.cuh: nothing in the loop may branch on it). */
        const int turn_mine = kWideTurnBar + wg, turn_other = kWideTurnBar + (wg ^ 1);
        auto issue_in_turn = [&](int st, int half) {
            if (ORDERED) wide_turn_wait(turn_other);
            issue(st, half);
            if (ORDERED) wide_turn_give(turn_mine);
        };
        /* Warpgroup 0 issues first: warpgroup 1 gives it the first turn; warpgroup 0 takes the last one back after
         * its loop, so that every arrival has its wait. */
        if (ORDERED && wg == 1) wide_turn_give(turn_mine);
        const int row_a = wg * 64 + warp * 16 + lane / 4; /* this thread's accumulator rows in the tile: +0, +8 */
        const int weight_blocks = (int)((p.n + 127) / 128);
        const int64_t sa_ld = p.sa_ld;

        for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
            const Unit unit = bfp8_hopper_decode_unit(&p, u, false, false);
            const int qt = unit.qt, split = unit.split, kb0 = unit.kb0, kb1 = unit.kb1;
            const int64_t p_base = (int64_t)unit.p0 + wg * 64; /* first activation row of this warpgroup */
            const int64_t q_base = (int64_t)qt * BQ;
            /* The halves' weight-scale rows and this thread's two activation-scale columns; a half or a row past the
             * matrix reads the last one that exists (its outputs are never stored). */
            const int wb0 = min(2 * qt, weight_blocks - 1), wb1 = min(2 * qt + 1, weight_blocks - 1);
            const float *sb0 = p.sb + (int64_t)wb0 * p.kblocks, *sb1 = p.sb + (int64_t)wb1 * p.kblocks;
            const float *sa0 = p.sa + min((int64_t)unit.p0 + row_a, p.m - 1);
            const float *sa1 = p.sa + min((int64_t)unit.p0 + row_a + 8, p.m - 1);
            float total[BQ / 2]; /* the 64 x 256 fragment: [half][64] */
#pragma unroll
            for (int i = 0; i < BQ / 2; i++) total[i] = 0.0f;
            float next_a0 = __ldg(sa0 + kb0 * sa_ld), next_a1 = __ldg(sa1 + kb0 * sa_ld);
            float next_b0 = __ldg(sb0 + kb0), next_b1 = __ldg(sb1 + kb0);
            for (int kb = kb0; kb < kb1; kb++) {
                const float a0 = next_a0, a1 = next_a1, b0 = next_b0, b1 = next_b1;
                /* The next block's scales, hidden behind this block's MMAs (the last block reloads its own). */
                const int kn = kb + 1 < kb1 ? kb + 1 : kb;
                next_a0 = __ldg(sa0 + kn * sa_ld), next_a1 = __ldg(sa1 + kn * sa_ld);
                next_b0 = __ldg(sb0 + kn), next_b1 = __ldg(sb1 + kn);
                mbar_wait(full0 + 8 * stage, phase);
                issue_in_turn(stage, 0);
                wgmma_wait<0>();
                fence_acc();
                {
                    const float s0 = a0 * b0, s1 = a1 * b0;
#pragma unroll
                    for (int i = 0; i < 64; i++) total[i] = fmaf(acc[i], (i & 2) ? s1 : s0, total[i]);
                }
                issue_in_turn(stage, 1);
                wgmma_wait<0>();
                fence_acc();
                /* Both halves' MMAs have read the stage: one arrival per warp gives it back. */
                __syncwarp();
                if (lane == 0) mbar_arrive(empty0 + 8 * stage);
                {
                    const float s0 = a0 * b1, s1 = a1 * b1;
#pragma unroll
                    for (int i = 0; i < 64; i++) total[64 + i] = fmaf(acc[i], (i & 2) ? s1 : s0, total[64 + i]);
                }
                if (++stage == kStages) stage = 0, phase ^= 1;
            }

            /* Epilogue: element i of the fragment is activation row 16*warp + lane/4 + 8*((i/2)%2) of this
             * warpgroup's 64, weight column 8*(i/4) + 2*(lane%4) + i%2 of the tile's 256 (the m64n256 layout: half h
             * holds columns 128h..). */
            if (!unit.partial && p.bias_dtype >= 0) {
#pragma unroll
                for (int j = 0; j < BQ / 8; j++) {
                    const int64_t col = q_base + 8 * j + 2 * (lane % 4);
                    const float v0 = col < p.n ? bfp8_dev_load_f32(p.bias, p.bias_dtype, col) : 0.0f;
                    const float v1 = col + 1 < p.n ? bfp8_dev_load_f32(p.bias, p.bias_dtype, col + 1) : 0.0f;
                    total[4 * j] += v0, total[4 * j + 1] += v1, total[4 * j + 2] += v0, total[4 * j + 3] += v1;
                }
            }
            if (!unit.partial && p.y_tma) {
                /* Four [64][64] boxes, packed in the TMA's 128-byte swizzle (16-byte chunk c of row r at c ^ r % 8)
                 * into this warpgroup's two buffers in turn, each stored by thread 0 while the next is packed. */
                const int row0 = warp * 16 + lane / 4;
                const int chunk_xor = (lane / 4) << 4;
                auto pack_boxes = [&](auto bf16) {
                    auto pack = [&](int j, int h) {
                        const float v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
                        uint32_t packed;
                        if constexpr (decltype(bf16)::value) {
                            __nv_bfloat162 b2 = __floats2bfloat162_rn(v0, v1);
                            memcpy(&packed, &b2, 4);
                        } else {
                            __half2 h2 = __floats2half2_rn(v0, v1);
                            memcpy(&packed, &h2, 4);
                        }
                        return packed;
                    };
#pragma unroll
                    for (int box = 0; box < BQ / 64; box++) {
                        uint8_t *buf = out_stage + (wg * 2 + box % 2) * C::kBoxBytes;
                        if (t == 0) bulk_wait_read_but_one(); /* the store two boxes ago has read this buffer */
                        named_barrier_sync(1 + wg);
                        uint8_t *base = buf + row0 * 128 + 4 * (lane % 4);
#pragma unroll
                        for (int jj = 0; jj < 8; jj++) {
                            const int chunk = (jj << 4) ^ chunk_xor;
#pragma unroll
                            for (int h = 0; h < 2; h++) *(uint32_t *)(base + h * 1024 + chunk) = pack(8 * box + jj, h);
                        }
                        fence_proxy_async();
                        named_barrier_sync(1 + wg);
                        if (t == 0) {
                            tma_store_2d(&maps.y, smem_u32(buf), (int)q_base + 64 * box, (int)p_base);
                            bulk_commit();
                        }
                    }
                };
                if (p.y_dtype == 1)
                    pack_boxes(std::true_type());
                else
                    pack_boxes(std::false_type());
            } else {
                /* From registers: fp32 (y or the split's partials) as column pairs, 16-bit element by element. */
                const bool f32 = unit.partial || p.y_dtype == 0;
                float *out = unit.partial ? p.workspace + (int64_t)split * p.m * p.n : (float *)p.y;
                const bool pairs = p.n % 2 == 0; /* (row, even col) pairs are 8-byte aligned */
#pragma unroll
                for (int j = 0; j < BQ / 8; j++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int64_t row = p_base + warp * 16 + lane / 4 + 8 * h;
                        const int64_t col = q_base + 8 * j + 2 * (lane % 4);
                        if (row >= p.m || col >= p.n) continue;
                        const float v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
                        const int64_t o = row * p.n + col;
                        if (f32 && pairs) {
                            *(float2 *)(out + o) = make_float2(v0, v1);
                        } else if (f32) {
                            out[o] = v0;
                            if (col + 1 < p.n) out[o + 1] = v1;
                        } else {
                            bfp8_dev_store_f32(p.y, p.y_dtype, o, v0);
                            if (col + 1 < p.n) bfp8_dev_store_f32(p.y, p.y_dtype, o + 1, v1);
                        }
                    }
                }
            }
        }
        if (ORDERED && wg == 0) wide_turn_wait(turn_other);
        if (p.y_tma && t == 0) bulk_wait_all(); /* the last stores complete before the CTA exits */
    }
#endif
}

} // namespace

#endif
