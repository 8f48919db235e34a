/* hopper's GEMM kernel: the sm_90a fast path for block-FP8 GEMM (TMA + FP8 wgmma + warp specialization).
 *
 * y[m,n] = sum_kb sa[m,kb] * sb[n/128,kb] * (sum_{k in kb} a[m,k] b[n,k]) + bias[n], one rounding at the end.
 *
 * The kernel computes a 128 x BQ tile of a product P * Q^T where P and Q are both K-major e4m3 matrices:
 *  - normal: P = A (activations, 128 rows a tile, or 64 with one consumer warpgroup), Q = B (weights, BQ = 32, 64
 *    or 128 rows a tile: the narrower tiles spread over more SMs when there are few);
 *  - swapped (decode, M <= 8, M <= 16 where it gives row slices; up to 128 when forced): P = B (weights) and
 *    Q = A (tokens, BQ = M rounded up to 8..128), so the weight rows fill wgmma's M dimension and a one-token GEMM
 *    does not waste 63/64 of every instruction.
 * Either way a tile's weight rows (128 of them swapped, 64 or 128 aligned ones normal) lie inside one 128-row
 * weight block: every tile needs one weight scale per K block.
 *
 * One CTA = 3 warpgroups. Warpgroup 0 is the producer: one thread issues TMA loads (P tile, Q tile, and the 128 or
 * BQ activation scales of the K block) into a ring of shared-memory stages, each completing on a "full" mbarrier.
 * Warpgroups 1 and 2 are consumers, 64 P rows each: per K block they wait on "full", read the block's activation
 * scales, run four m64nBQk32 wgmmas into a fresh fp32 partial, wait for them, release the stage on its "empty"
 * mbarrier (one arrival per warp), then multiply the partial by sa*sb and add it to the fp32 total ("promotion",
 * needed because the FP8 MMA accumulator keeps only ~14 bits). On the normal path, and on swapped units of 12 or
 * more K blocks, two partials alternate, so block b+1's MMAs run while block b is promoted; their steady state walks
 * whole rings of stages with compile-time stage indexes (no per-block stage arithmetic). On the normal path with
 * 64-row tiles the second consumer exits at once. setmaxnreg moves registers from the producer to the consumers.
 * After changing a consumer loop, check `-Xptxas -v` (make test does): when ptxas cannot prove an accumulator idle
 * it serializes the wgmmas and says so (C7514, C7518); the kernel stays correct, only slower. Check the loop's SASS
 * too: a branch on the warpgroup index inside it moved its stage index out of the uniform registers and cost 9%
 * without any ptxas message.
 *
 * The grid is persistent: CTAs walk work units (schedule.h) with a stride of gridDim.x, so the producer streams the
 * next unit's data while the consumers finish the current one. The planner (plan.c) picks among: whole tiles; K
 * splits, whose fp32 partials a second kernel (epilogue.cuh) sums in a fixed order, or, where every tile's splits fit
 * in one cluster of up to 8 CTAs on the device at once (swapped with 8-token tiles, or normal with 64-wide weight
 * tiles and one activation tile), the CTAs of one cluster over distributed shared memory (the CSPLIT kernels);
 * swapped, the weight rows of a partial last wave as row slices of 32 or 64 rows with the whole K, before the whole
 * tiles (no sum at all); normal, a nearly empty last wave with the wave before it as stream-K runs, one per CTA, the
 * tiles cut between runs summed by their tails from per-CTA partial slots in the L2 after a flag (the STREAMK
 * kernels). K beyond the matrix is zero-filled by TMA, so a partial last K block is exact; a last tile that the
 * matrix ends inside is loaded with a box cut to the rows that exist (in 8-row groups), and the stale rows past it
 * feed only outputs that are not stored.
 * Thread 0 issues the first stages of its CTA's first unit as soon as the barriers exist, before the CTA's barrier.
 * Inside bfp8_linear the kernel is launched as a programmatic dependent of the activation quantization: those early
 * loads are the first stages' weight tiles only, and the producer waits for that kernel (griddepcontrol.wait) only
 * before it loads activations, so launch and first-byte latency overlap the quantization.
 * Epilogue: the normal path with 16-bit output, no K split and N % 8 == 0 packs the tile into swizzled shared memory
 * and stores it with TMA (clipped at the matrix edges) while the warpgroup starts its next unit; other cases stage
 * through shared memory and store 16-byte (or 4-element) chunks of output rows, bounds-checked. It stays inline in
 * the kernel: as a function of its own (forceinline) it changed the normal-path kernels' instruction schedule.
 *
 * Requirements (declared in the caps, checked again at run time): K % 16 == 0 (TMA row strides are 16-byte
 * multiples), A, B and the activation scales 16-byte aligned, activation scales MN_MAJOR_ALIGNED and weight scales
 * ROW_MAJOR as fp32 values (UE8M0 scales are exact powers of two in fp32).
 *
 * Device code for launch.cu, its one includer (hence the unnamed namespace). */
#ifndef BFP8_HOPPER_KERNEL_CUH
#define BFP8_HOPPER_KERNEL_CUH

#include <cuda.h>
#include <cuda_runtime.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#include "backends/cuda/fp8_math.cuh"
#include "backends/cuda/sm90_async.cuh"
#include "backends/hopper/config.cuh"
#include "backends/hopper/schedule.h"
#include "backends/hopper/wgmma.cuh"

namespace {

/* GROUPED kernels: the producer warp reads a unit's rows (masked_m, or the tile's m_indices) and hands the consumers
 * what they need in a small ring of unit slots in shared memory, one slot per pass (an empty unit takes one too), so
 * that the consumers never wait for those loads. Flags of a slot: */
enum : int {
    kSlotEmpty = 1,  /* no rows: nothing was loaded, nothing to compute */
    kSlotMore = 2,   /* contiguous: another pass of the same tile follows (the tile holds rows of several experts) */
    kSlotFullLo = 4, /* every row of the tile's first 64 that lies in the matrix is this pass's: stored whole (TMA) */
    kSlotFullHi = 8, /* ... of its second 64 */
};
constexpr int kUnitSlots = 4;
struct UnitSlot {
    int group, p_end, flags, pad;
};
/* Shared memory past the stages' barriers: the slots, then their full and empty barriers. */
constexpr int kUnitSlotBytes = kUnitSlots * (int)sizeof(UnitSlot) + 2 * kUnitSlots * 8;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* GROUPED: what the producer warp reads of a unit's rows, a unit ahead of its use so that the loads' latency hides
 * behind the unit before: masked, its group's count (v[0]); contiguous, the tile's expert indices, rows lane +
 * 32 i, with kPastEnd for rows past the tile's end. */
constexpr int kPastEnd = INT_MIN;
struct UnitRows {
    int v[kBP / 32];
};
__device__ __forceinline__ UnitRows read_unit_rows(const HopperParams &p, const Unit &unit) {
    UnitRows r;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < kBP / 32; i++) {
        const int row = unit.p0 + lane + 32 * i;
        if (p.grouped == BFP8_HOPPER_MASKED)
            r.v[i] = i == 0 ? __ldg(p.masked_m + unit.group) : 0;
        else
            r.v[i] = row < unit.p_end ? __ldg(p.m_indices + row) : kPastEnd;
    }
    return r;
}

/* GROUPED contiguous: the smallest expert index above `after` among the tile's rows, or -1 where none is left (an
 * index outside [0, groups) is a padding row). Warp-collective: a min reduction over the lanes' rows. */
__device__ __forceinline__ int tile_expert(const HopperParams &p, const UnitRows &rows, int after) {
    unsigned best = 0xFFFFFFFFu;
#pragma unroll
    for (int i = 0; i < kBP / 32; i++) {
        const unsigned e = (unsigned)rows.v[i]; /* a negative index is above every group */
        if (e < (unsigned)p.groups && (int)e > after) best = min(best, e);
    }
    return (int)__reduce_min_sync(0xffffffffu, best);
}

/* GROUPED: the halves of a unit's tile whose rows in the matrix are all the pass's (kSlotFullLo, kSlotFullHi): those
 * the epilogue stores whole, through TMA. Warp-collective for contiguous tiles. */
__device__ __forceinline__ int tile_full_halves(const HopperParams &p, const Unit &unit, const UnitRows &rows) {
    if (p.grouped == BFP8_HOPPER_MASKED)
        return (unit.p0 + 64 <= unit.p_end ? kSlotFullLo : 0) | (unit.p0 + 128 <= unit.p_end ? kSlotFullHi : 0);
    bool lo = true, hi = true;
#pragma unroll
    for (int i = 0; i < kBP / 32; i++)
        if (rows.v[i] != kPastEnd && rows.v[i] != unit.group) (i < 2 ? lo : hi) = false;
    return (__all_sync(0xffffffffu, lo) ? kSlotFullLo : 0) | (__all_sync(0xffffffffu, hi) ? kSlotFullHi : 0);
}
#endif

template <int BQ, bool SWAP, bool CSPLIT = false, bool STREAMK = false, bool GROUPED = false, int PROWS = kBP>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_gemm_kernel(const __grid_constant__ TensorMaps maps, const HopperParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(!STREAMK || (!SWAP && !CSPLIT), "stream-K runs the plain normal path only");
    static_assert(!GROUPED || (!SWAP && !CSPLIT && !STREAMK), "grouped GEMMs run the normal path's whole tiles");
    /* Registers after setmaxnreg (128 x producer + 256 x consumer <= 64K): the GROUPED producer walks the units'
     * rows and slots too, and spilled at 24; its consumers do not spill at 232. */
    constexpr int kProducerRegs = GROUPED ? 40 : 24, kConsumerRegs = GROUPED ? 232 : 240;
    static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "setmaxnreg budget");
    static_assert(PROWS == kBP || (PROWS == 64 && !SWAP && !CSPLIT && !STREAMK && !GROUPED),
                  "64-row stages: the plain normal path's 64-row tiles (one consumer warpgroup)");
    using C = Config<BQ, SWAP, PROWS>;
    constexpr int kStages = C::kStages;
    constexpr bool kSlices = SWAP && !CSPLIT; /* the kernels that run row slices (bfp8_hopper_params::slice_rows) */
    constexpr int kScaleRows = SWAP ? BQ : kBP; /* activation scales per K block of a tile */
    static_assert(128 % BQ == 0, "a tile's weight rows lie inside one 128-row weight block (one scale per K block)");

    extern __shared__ uint8_t smem_raw[];
    /* Rounded up to 1024 bytes (the 128-byte swizzle's atom) by an offset from smem_raw, not by masking its address:
     * a pointer derived from smem_raw stays in the shared address space, so the scale reads and the epilogue's
     * stores compile to LDS / STS; through an integer cast they are generic LD / ST (5% slower at K <= 2048,
     * M >= 512). */
    uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    uint8_t *tiles = smem;
    uint8_t *out_stage = smem + kStages * C::kStageBytes; /* 1024-aligned: TMA-store source */
    float *scales = (float *)(out_stage + C::kOutBytes);
    uint64_t *bars = (uint64_t *)(scales + kStages * (C::kScaleSlot / 4));
    const uint32_t tiles_u32 = smem_u32(tiles);
    const uint32_t full0 = smem_u32(bars), empty0 = smem_u32(bars + kStages);
    /* STREAMK: the CTA's ticket, past the barriers (kernel_smem). */
    int *const sk_ticket_smem = (int *)(bars + 2 * kStages);
    /* GROUPED: the unit slots, past the barriers too (kernel_smem). */
    UnitSlot *const slots = (UnitSlot *)(bars + 2 * kStages);
    const uint32_t slot_full0 = smem_u32(slots + kUnitSlots), slot_empty0 = slot_full0 + 8 * kUnitSlots;

    /* A split-K reduce launched after this grid may start its launch now (it waits for this grid's completion). */
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    /* Through a shuffle from lane 0, so that the compiler knows it is the same across the warp and keeps the
     * shared-memory addresses derived from it in uniform registers (fewer R2UR moves before each wgmma). */
    const int warpgroup = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    /* The units this CTA walks: from the block index in steps of the grid; STREAMK: its stream-K pieces are those
     * of its ticket's run (BFP8_SK_U). */
    /* CSPLIT: the CTA of rank r in cluster c runs unit r * T + c, split r of tile c (decode_unit numbers the T tiles
     * of one split together). The unit loops below are those of the other kernels, a walk in steps of the cluster
     * count, but a CSPLIT CTA runs exactly one unit: one cluster per tile (bfp8_hopper_params::csplit). */
    const int split_rank = CSPLIT ? (int)cluster_ctarank() : 0;
    /* Written out at each use as macros (#undef after the kernel): as variables, helpers or lambdas computed once,
     * they change the other kernels' code (checked in the SASS). */
#define BFP8_U_FIRST (CSPLIT ? split_rank * p.tail_tiles.d + (int)cluster_id_x() : blockIdx.x)
/* STREAMK: unit u of the walk, the stream-K pieces renumbered from the block index's run to the ticket's. */
#define BFP8_SK_U(u) ((int)(u) >= p.whole_units ? (int)(u) - (int)blockIdx.x + sk_cta : (int)(u))
#define BFP8_U_END (CSPLIT ? (split_rank + 1) * p.tail_tiles.d : p.units)
#define BFP8_U_STEP (CSPLIT ? (int)cluster_count_x() : gridDim.x)
/* Unit u of the walk. */
#define BFP8_DECODE(u)                                                                                                 \
    (GROUPED ? bfp8_hopper_decode_grouped_tile(&p, (u))                                                                \
             : bfp8_hopper_decode_unit(&p, STREAMK ? BFP8_SK_U(u) : (u), kSlices, STREAMK))
/* The rows a unit may store end at the matrix's (GROUPED: at the unit's p_end); a GROUPED contiguous pass stores only
 * the rows of its expert. */
#define BFP8_ROW_END(unit) (GROUPED ? (int64_t)(unit).p_end : p.m)
#define BFP8_ROW_OF_PASS(unit, row)                                                                                    \
    (!GROUPED || p.grouped != BFP8_HOPPER_CONTIGUOUS || __ldg(p.m_indices + (row)) == (unit).group)
/* GROUPED: the halves of the tile this warpgroup stores whole (slot flags). */
#define BFP8_WG_FULL(flags, wg) (!GROUPED || ((flags) & (kSlotFullLo << (wg))))
    /* The producer's loads (thread 0, at entry and in the producer loop). A unit's boxes: the smaller one for a
     * last tile that the matrix ends inside, and for a row slice. */
    auto q_last = [&](const Unit &unit) { return p.q_last_rows && unit.qt == p.q_tiles - 1; };
    /* The weight's loads carry the evict-first hint where it streams through once (the policy is made at each
     * load: one instruction, and no register kept live into the producer's 24). */
    auto load = [&](uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t full, bool weight) {
        if (weight && p.weight_evict_first)
            tma_load_2d_hint(dst, map, c0, c1, full, l2_policy_evict_first());
        else
            tma_load_2d(dst, map, c0, c1, full);
    };
    auto load_p = [&](uint32_t tile, uint32_t full, const Unit &unit, int kb) {
        load(tile, unit.p_cut ? &maps.p_last : &maps.p, kb * kBK, unit.p0, full, SWAP);
    };
    /* GROUPED: the weights are one [groups * n, K] matrix, the unit's group a row offset. */
    auto load_q = [&](uint32_t tile, uint32_t full, const Unit &unit, int kb) {
        const int row = GROUPED ? unit.group * (int)p.n + unit.qt * BQ : unit.qt * BQ;
        load(tile + C::kPBytes, q_last(unit) ? &maps.q_last : &maps.q, kb * kBK, row, full, !SWAP);
    };
    /* Bytes that complete one of the unit's stages (boxes count whole, zero-filled rows included). */
    auto stage_bytes = [&](const Unit &unit) {
        const int p_rows = unit.p_cut ? p.p_last_rows : p.tile_rows, q_rows = q_last(unit) ? p.q_last_rows : BQ;
        return (uint32_t)((p_rows + q_rows) * kBK + kScaleRows * 4);
    };
    /* Stage st's box of the weight (P when swapped, Q otherwise) or of the activations; the activations' scales
     * come with the latter. */
    auto load_operand = [&](bool weight, int st, const Unit &unit, int kb) {
        const uint32_t full = full0 + 8 * st, tile = tiles_u32 + st * C::kStageBytes;
        if (weight == SWAP)
            load_p(tile, full, unit, kb);
        else
            load_q(tile, full, unit, kb);
    };
    auto load_weight = [&](int st, const Unit &unit, int kb) { load_operand(true, st, unit, kb); };
    /* The activation scales' map is [kblocks][rows]; GROUPED masked, [groups * kblocks][group_rows] (the groups'
     * matrices back to back). */
    auto load_acts = [&](int st, const Unit &unit, int kb) {
        load_operand(false, st, unit, kb);
        int row = SWAP ? unit.qt * BQ : unit.p0, block = kb;
        if (GROUPED && p.grouped == BFP8_HOPPER_MASKED)
            row -= unit.group * p.group_rows, block += unit.group * p.kblocks;
        tma_load_2d(smem_u32(scales + st * (C::kScaleSlot / 4)), &maps.sa, row, block, full0 + 8 * st);
    };
    unsigned long long *trace = kTraceBuild && p.trace ? p.trace + (size_t)blockIdx.x * kTraceSlots : nullptr;
    if (trace && threadIdx.x == 0) trace[kTraceStart] = global_ns();
    int entry_issued = 0; /* thread 0: stages of the first unit whose loads were issued at entry */
    /* STREAMK: the CTA's stream-K run, its ticket (bfp8_hopper_params::sk_ticket), taken first so that the atomic's
     * round trip overlaps the setup below; every thread reads it after the CTA's barrier. Its whole tiles stay those
     * of its block index: the hardware spreads consecutive block indices, so tiles that share operands run on SMs far
     * apart (assigning the whole tiles by ticket costs M=4096 2112x7168 3 us). */
    int sk_cta = 0;
    if (threadIdx.x == 0) {
        if (STREAMK) sk_cta = (int)atomicAdd(p.sk_ticket, 1u);
        /* First thing, before the barriers are set up. (Timed alone, a first TMA load's instruction takes 64 ns and
         * its bytes land as soon with or without the prefetch; it costs nothing.) */
        tma_prefetch_map(&maps.p);
        tma_prefetch_map(&maps.q);
        tma_prefetch_map(&maps.sa);
        if (trace) trace[kTracePrefetched] = global_ns();
        for (int s = 0; s < kStages; s++) {
            mbar_init(full0 + 8 * s, 1);
            /* One arrival per consumer warp: 256 per-thread arrivals on one barrier per K block cost shared-memory
             * atomics for nothing. */
            mbar_init(empty0 + 8 * s, p.one_consumer ? 4 : 8);
        }
        /* A slot is filled by the producer warp's lane 0 and given back by every consumer thread (take_slot). */
        for (int s = 0; GROUPED && s < kUnitSlots; s++) {
            mbar_init(slot_full0 + 8 * s, 1);
            mbar_init(slot_empty0 + 8 * s, p.one_consumer ? 128 : 256);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        if (STREAMK) *sk_ticket_smem = sk_cta;
        if (trace) trace[kTraceBarriersReady] = global_ns();
        /* The first unit's first stages, issued here rather than from the producer loop (empty barriers start
         * free; the expected bytes cover the whole stage): the weights, and the activations too unless they come
         * from the kernel before this one (p.dependent: the producer loads them after griddepcontrol.wait). From
         * the loop, reached after the CTA's barrier, setmaxnreg and the producer's cold code, the first load
         * issues ~1.0 us after the CTA starts; from here 0.61-0.64. */
        const int entry_max = min(kStages, p.entry_stages);
        if (!GROUPED && entry_max > 0 && (CSPLIT ? BFP8_U_FIRST < BFP8_U_END : (int)blockIdx.x < p.units)) {
            const Unit unit = bfp8_hopper_decode_unit(
                &p, CSPLIT ? BFP8_U_FIRST : STREAMK ? BFP8_SK_U(blockIdx.x) : blockIdx.x, kSlices, STREAMK);
            if (trace) trace[kTraceUnitDecoded] = global_ns();
            for (int kb = unit.kb0; kb < unit.kb1 && entry_issued < entry_max; kb++, entry_issued++) {
                mbar_arrive_expect_tx(full0 + 8 * entry_issued, stage_bytes(unit));
                load_weight(entry_issued, unit, kb);
                if (trace && entry_issued == 0) trace[kTraceFirstWeightIssued] = global_ns();
                if (p.dependent) continue;
                load_acts(entry_issued, unit, kb);
                if (trace && entry_issued == 0) trace[kTraceFirstIssued] = global_ns();
            }
        }
    }
    if (CSPLIT)
        cluster_sync_relaxed(); /* every CTA of the cluster has started before one reads another's shared memory */
    else
        __syncthreads();
    if (STREAMK) sk_cta = __shfl_sync(0xffffffffu, *sk_ticket_smem, 0); /* (warp-uniform, as entry_issued below) */
    if (trace && threadIdx.x == 0) trace[kTraceSynced] = global_ns();

    if (warpgroup == 0) {
        /* The producer's one active thread needs few registers; the consumers' 240 give the 128-wide normal kernel
         * the room that the uniform warpgroup index above costs it (at 232 it spills). */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
        /* Thread 0's count, through a shuffle so that the compiler knows it is warp-uniform: the producer loop's
         * stage, phase and box coordinates then stay in uniform registers. Without it they moved to per-thread
         * ones (an R2UR before each TMA load) and the normal path runs 4-18% slower at M >= 128. */
        entry_issued = __shfl_sync(0xffffffffu, entry_issued, 0); /* other warps: their lane 0's 0, unused */
        /* An idle producer warp stamps the first stage's arrival (it starts waiting before the load is issued). */
        if (trace && threadIdx.x == 32) {
            mbar_wait(full0, 0);
            trace[kTraceFirstStage] = global_ns();
        }
        /* Thread 0 issues the loads. GROUPED, its whole warp walks the units: it reads their rows (masked_m, or the
         * tile's m_indices, a unit ahead so that the loads' latency hides behind the unit before), and fills a unit
         * slot per pass for the consumers. What it reads goes through lane 0 (__shfl_sync), so that the compiler
         * knows the loop's state warp-uniform and keeps the TMA operands in uniform registers (otherwise every
         * load's operands went through per-thread registers, as the comment on entry_issued below describes). */
        if (GROUPED ? threadIdx.x < 32 : threadIdx.x == 0) {
            const bool issuer = !GROUPED || threadIdx.x == 0;
            /* The activations may come from the previous kernel of the stream: wait for it (a no-op unless this
             * grid was launched as its programmatic dependent), then load those of the stages issued at entry. */
            asm volatile("griddepcontrol.wait;\n" ::: "memory");
            if (trace && issuer) trace[kTraceDepWaited] = global_ns();
            if (!GROUPED && p.dependent && entry_issued) {
                const Unit unit = bfp8_hopper_decode_unit(
                    &p, CSPLIT ? BFP8_U_FIRST : STREAMK ? BFP8_SK_U(blockIdx.x) : blockIdx.x, kSlices, STREAMK);
#pragma unroll 1
                for (int i = 0; i < entry_issued; i++) load_acts(i, unit, unit.kb0 + i);
                if (trace) trace[kTraceFirstIssued] = global_ns();
            }
            /* The stages issued at entry are the first unit's first ones: the loop goes on after them. */
            int stage = entry_issued % kStages, issued = entry_issued, skip = entry_issued;
            uint32_t phase = entry_issued == kStages;
            int slot = 0; /* GROUPED: the next unit slot to fill */
            uint32_t slot_phase = 0;
            UnitRows rows_ahead; /* GROUPED: the rows of the walk's next unit */
            if constexpr (GROUPED)
                if (BFP8_U_FIRST < BFP8_U_END) rows_ahead = read_unit_rows(p, BFP8_DECODE(BFP8_U_FIRST));
            for (int u = BFP8_U_FIRST; u < BFP8_U_END; u += BFP8_U_STEP) {
                Unit unit = BFP8_DECODE(u);
                int next = -1; /* GROUPED contiguous: the tile's expert after this pass's */
                UnitRows rows;
                if constexpr (GROUPED) {
                    rows = rows_ahead;
                    if (u + BFP8_U_STEP < BFP8_U_END) rows_ahead = read_unit_rows(p, BFP8_DECODE(u + BFP8_U_STEP));
                    if (p.grouped == BFP8_HOPPER_MASKED)
                        bfp8_hopper_grouped_set_rows(&p, &unit, __shfl_sync(0xffffffffu, rows.v[0], 0));
                    else
                        unit.group = __shfl_sync(0xffffffffu, tile_expert(p, rows, -1), 0);
                }
                do { /* GROUPED contiguous: one pass per expert of the tile; otherwise once */
                    if constexpr (GROUPED) {
                        /* The pass's slot: the consumers learn from it what this unit is, or that it is empty. */
                        const bool empty = unit.kb0 == unit.kb1 || unit.group < 0;
                        if (!empty && p.grouped == BFP8_HOPPER_CONTIGUOUS)
                            next = __shfl_sync(0xffffffffu, tile_expert(p, rows, unit.group), 0);
                        const int flags =
                            empty ? kSlotEmpty : (next >= 0 ? kSlotMore : 0) | tile_full_halves(p, unit, rows);
                        if (issuer) {
                            mbar_wait(slot_empty0 + 8 * slot, slot_phase ^ 1);
                            slots[slot] = UnitSlot{unit.group, unit.p_end, flags, 0};
                            mbar_arrive(slot_full0 + 8 * slot); /* (release: the consumers see the slot's words) */
                        }
                        __syncwarp();
                        if (++slot == kUnitSlots) slot = 0, slot_phase ^= 1;
                        if (empty) break;
                    }
                    for (int kb = unit.kb0 + skip; kb < unit.kb1; kb++, issued++) {
                        mbar_wait(empty0 + 8 * stage, phase ^ 1);
                        if (issuer) {
                            mbar_arrive_expect_tx(full0 + 8 * stage, stage_bytes(unit));
                            load_weight(stage, unit, kb);
                            if (trace && issued == 0) trace[kTraceFirstWeightIssued] = global_ns();
                            load_acts(stage, unit, kb);
                            if (trace && issued == 0) trace[kTraceFirstIssued] = global_ns();
                        }
                        if (++stage == kStages) {
                            stage = 0;
                            phase ^= 1;
                        }
                    }
                    skip = 0;
                } while (GROUPED && (unit.group = next) >= 0);
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
        const int wg = warpgroup - 1; /* which 64 P rows */
        /* The second warpgroup's rows all lie past M: it has nothing to do (bfp8_hopper_params::one_consumer).
         * Leaving here, before the loop, keeps the loop's code as it is: a skip inside it, per unit, makes the
         * compiler keep the stage index in per-thread registers and costs every normal-path kernel 9%. */
        if (p.one_consumer && wg == 1) return;
        const int t = threadIdx.x - 128 * warpgroup;
        const int warp = t / 32, lane = t % 32;
        int stage = 0;
        uint32_t phase = 0;
        float acc[BQ / 2];
#pragma unroll
        for (int i = 0; i < BQ / 2; i++) acc[i] = 0.0f;

        /* Four k32 wgmmas of one K block into a fresh partial, committed as one group. The descriptors are those of
         * stage 0's tiles plus st * kStageBytes / 16 + 2 * kk in the address field (which never carries: shared
         * memory is under 256 KB), one add each: rebuilding each from its address (mask, shift, or) and the
         * warpgroup index in per-thread registers costs M = 512..4096 5-12%. */
        uint64_t p_desc0 = smem_desc(tiles_u32 + wg * 64 * kBK), q_desc0 = smem_desc(tiles_u32 + C::kPBytes);
        auto issue = [&](float(&acc)[BQ / 2], int st) {
            const uint32_t stage_off = (uint32_t)st * (C::kStageBytes >> 4);
            const uint64_t p_desc = p_desc0 + stage_off, q_desc = q_desc0 + stage_off;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBK / 32; kk++) bfp8_wgmma<BQ>::run(acc, p_desc + 2 * kk, q_desc + 2 * kk, kk);
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
        /* Normal path: the shared address of this thread's first row in stage 0's scales; a stage's address is
         * it plus the stage's (uniform) offset, one add fewer a block than indexing from the stage's pointer. */
        const uint32_t scale_row_u32 = smem_u32(scales) + 4u * (wg * 64 + warp * 16 + lane / 4);
        auto load_scales = [&](int st, float(&sv)[kNumScales]) {
            if (!SWAP) {
                const uint32_t at = scale_row_u32 + (uint32_t)st * C::kScaleSlot;
                sv[0] = ld_shared_f32(at), sv[1] = ld_shared_f32(at + 8 * 4); /* rows r and r + 8 */
            } else {
                const float *sa = scales + st * (C::kScaleSlot / 4);
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
        /* Two partials in flight where the registers allow: the normal path (a block's scales are two registers)
         * and swapped Q tiles up to 64 tokens (BQ / 4 scales a block; at 128 two sets would not fit). Swapped
         * units shorter than kMinBlocksTwoPartials run one partial: measured on the H200, two partials gain 2-11%
         * with 12 or more K blocks a unit (24576x1536, 7168x16384 at M <= 64) and lose up to 10% with 4
         * (32768x512). */
        constexpr bool kTwoPartials = !SWAP || BQ <= 64;
        constexpr int kMinBlocksTwoPartials = 12;
        float acc2[kTwoPartials ? BQ / 2 : 1]; /* the second partial of the pipelined loop */
#pragma unroll
        for (int i = 0; i < (kTwoPartials ? BQ / 2 : 1); i++) acc2[i] = 0.0f;
        /* One partial: MMAs of a block, wait, give the stage back, promote. The two consumer warpgroups drift
         * apart and overlap each other's promotion. */
        auto one_partial_loop = [&](float(&total)[BQ / 2], const float *sb_row, int kb0, int kb1) {
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
        };

        /* GROUPED: this thread's next unit slot: the pass's group and rows into the unit, and the slot's flags. Each
         * thread arrives on the slot's empty barrier once it has read it: compute-sanitizer's racecheck then sees every
         * read ordered before the slot's next write (with a warpgroup barrier and one arrival instead, it reports
         * hazards; either way a unit took the same time on the H100). */
        int slot = 0;
        uint32_t slot_phase = 0;
        auto take_slot = [&](Unit &unit) {
            mbar_wait(slot_full0 + 8 * slot, slot_phase);
            const UnitSlot w = slots[slot];
            mbar_arrive(slot_empty0 + 8 * slot);
            if (++slot == kUnitSlots) slot = 0, slot_phase ^= 1;
            unit.group = w.group, unit.p_end = w.p_end;
            return w.flags;
        };
        int units_done = 0;
        for (int u = BFP8_U_FIRST; u < BFP8_U_END; u += BFP8_U_STEP) {
            Unit unit = BFP8_DECODE(u);
            int flags = 0; /* GROUPED: the pass's slot flags */
            if (GROUPED) flags = take_slot(unit);
            /* Past this CTA's stream-K run; GROUPED, a unit with no rows (nothing was loaded for it). */
            if ((STREAMK && unit.kb0 == unit.kb1) || (GROUPED && (flags & kSlotEmpty))) continue;
            do { /* GROUPED contiguous: one pass per expert of the tile, as the producer's; otherwise once */
                const int pt = unit.pt, qt = unit.qt, split = unit.split;
                const int kb0 = unit.kb0, kb1 = unit.kb1;
                const int64_t p_base = (int64_t)unit.p0 + wg * 64; /* first P row of this warpgroup */
                const int64_t q_base = (int64_t)qt * BQ;
                const int weight_block = SWAP ? pt : (qt * BQ) / 128;
                /* GROUPED: the groups' scale matrices are back to back. */
                const float *sb_row =
                    p.sb + ((GROUPED ? (int64_t)unit.group * p.weight_blocks : 0) + weight_block) * p.kblocks;
                float total[BQ / 2];
#pragma unroll
                for (int i = 0; i < BQ / 2; i++) total[i] = 0.0f;

                bool two_partials = false;
                if constexpr (kTwoPartials) two_partials = !SWAP || kb1 - kb0 >= kMinBlocksTwoPartials;
                if (!two_partials) {
                    one_partial_loop(total, sb_row, kb0, kb1);
                } else if constexpr (kTwoPartials) {
                    /* Two partials in flight: block b+1's MMAs are issued before block b is promoted, so this
                     * warpgroup's promotion overlaps its own next MMAs, not only the other warpgroup's. Written as
                     * straight code, loops of pairs and of whole rings and a tail, with no branch between a wgmma and
                     * its wait: with the issue inside a conditional ptxas serializes every wgmma of the kernel (C7514),
                     * and M=4096 7168x16384 takes 949 us instead of 787. */
                    float sva[kNumScales], svb[kNumScales];
                    float sb_a = 0.0f, sb_b = 0.0f;
                    int st_a = 0, st_b = 0;
                    /* The weight scales through a pointer that walks the K blocks: indexing by kb costs a sign
                     * extension and a 64-bit address computation a block. */
                    const float *sb_at = sb_row + kb0;
                    /* The next block into (acc, sv, sb, st) from stage `at`: wait for it, read its scales, issue its
                     * MMAs. In the ring loop below `at` is a compile-time constant. */
                    auto begin_at = [&](float(&acc)[BQ / 2], float(&sv)[kNumScales], float &sb, int &st, int at) {
                        sb = __ldg(sb_at++);
                        st = at;
                        mbar_wait(full0 + 8 * at, phase);
                        load_scales(at, sv);
                        issue(acc, at);
                    };
                    auto begin = [&](float(&acc)[BQ / 2], float(&sv)[kNumScales], float &sb, int &st) {
                        begin_at(acc, sv, sb, st, stage);
                        next_stage();
                    };
                    /* A block whose MMAs are complete: give its stage back, promote it. */
                    auto finish = [&](float(&acc)[BQ / 2], const float(&sv)[kNumScales], float sb, int st) {
                        fence_acc(acc);
                        release(st);
                        promote(total, acc, sv, sb);
                    };
                    /* Two blocks with the first partial's in flight: the second partial's, then the first's. */
                    auto pair = [&]() {
                        begin(acc2, svb, sb_b, st_b);
                        wgmma_wait<1>();
                        finish(acc, sva, sb_a, st_a);
                        begin(acc, sva, sb_a, st_a);
                        wgmma_wait<1>();
                        finish(acc2, svb, sb_b, st_b);
                    };
                    /* The steady loop walks whole rings of stages, one pass per kRing blocks, entered with the first
                     * partial's block of stage 0 in flight: its stage indexes are compile-time constants, so the
                     * descriptors, barrier and scale addresses of each block are a base plus an immediate instead of
                     * a product by a runtime stage (docs/hopper.md design log 86). With an odd stage count a pass
                     * spans two rings, so that each stage meets the same partial in every pass. Not in the grouped
                     * 128-wide kernel, whose registers it would overflow (186 bytes of spills). */
                    constexpr bool kRingLoop = !(GROUPED && BQ == 128);
                    constexpr int kRing = kStages % 2 == 0 ? kStages : 2 * kStages;
                    auto ring = [&]() {
#pragma unroll
                        for (int j = 1; j <= kRing; j++) {
                            const int at = j % kStages, done = (j - 1) % kStages;
                            if (at == 0) {
                                phase ^= 1;
                                asm volatile("" : "+l"(p_desc0), "+l"(q_desc0));
                            }
                            if (j % 2) {
                                begin_at(acc2, svb, sb_b, st_b, at);
                                wgmma_wait<1>();
                                finish(acc, sva, sb_a, done);
                            } else {
                                begin_at(acc, sva, sb_a, st_a, at);
                                wgmma_wait<1>();
                                finish(acc2, svb, sb_b, done);
                            }
                        }
                    };
                    int kb = kb0 + 1;
                    if (kRingLoop && kStages % 2 == 0 && (stage & 1) && kb1 - kb0 >= 2) {
                        /* With an even stage count the first partial takes the stages of its first block's parity:
                         * from an odd stage, the unit's first block goes into the second partial. */
                        begin(acc2, svb, sb_b, st_b);
                        begin(acc, sva, sb_a, st_a);
                        wgmma_wait<1>();
                        finish(acc2, svb, sb_b, st_b);
                        kb++;
                    } else {
                        begin(acc, sva, sb_a, st_a);
                    }
                    /* Pairs up to the first partial's block of stage 0 (then the next stage is 1), whole rings, pairs. */
                    if constexpr (kRingLoop) {
                        for (; stage != 1 && kb + 1 < kb1; kb += 2) pair();
                        if (stage == 1)
                            for (; kb + kRing <= kb1; kb += kRing) ring();
                    }
                    for (; kb + 1 < kb1; kb += 2) pair();
                    if (kb < kb1) {
                        begin(acc2, svb, sb_b, st_b);
                        wgmma_wait<1>();
                        finish(acc, sva, sb_a, st_a);
                        wgmma_wait<0>();
                        finish(acc2, svb, sb_b, st_b);
                    } else {
                        wgmma_wait<0>();
                        finish(acc, sva, sb_a, st_a);
                    }
                }

                if constexpr (STREAMK) {
                    /* A stream-K piece (bfp8_hopper_params::sk_ctas): this warpgroup's partial goes to its slot, or, in
                     * its tile's tail, the slots of the CTAs before it whose runs end inside the tile are added,
                     * nearest first. Each thread keeps its own fragment elements at the same place in every slot: [BQ /
                     * 8][128] float4s. */
                    const int cta = sk_cta;
                    static_assert(BFP8_HOPPER_SK_SLOT_FLOATS(BQ) == BQ / 8 * 128 * 4, "a slot: [BQ / 8][128] float4s");
                    auto slot = [&](int c) { return (float4 *)p.sk_slots + (size_t)(c * 2 + wg) * (BQ / 8) * 128 + t; };
                    if (unit.sk_store) {
                        float4 *dst = slot(cta);
#pragma unroll
                        for (int i = 0; i < BQ / 8; i++)
                            __stcg(dst + i * 128,
                                   make_float4(total[4 * i], total[4 * i + 1], total[4 * i + 2], total[4 * i + 3]));
                        named_barrier_sync(1 + wg); /* the warpgroup's stores precede the release */
                        if (t == 0) st_release_gpu_u32(p.sk_flags + cta * 2 + wg, 1u);
                        continue;
                    }
                    if (unit.sk_gather) {
                        /* CTAs cta - 1, cta - 2, ..: each run ends inside this tile; the last one starts at or before
                         * its first K block. */
                        for (int c = cta - 1, more = 1; more; c--) {
                            more = bfp8_hopper_stream_k_run(&p, c) > unit.sk_tile0;
                            if (t == 0)
                                while (ld_acquire_gpu_u32(p.sk_flags + c * 2 + wg) == 0u) __nanosleep(64);
                            named_barrier_sync(1 + wg); /* the acquire precedes the warpgroup's loads */
                            const float4 *src = slot(c);
#pragma unroll
                            for (int i = 0; i < BQ / 8; i++) {
                                const float4 v = __ldcg(src + i * 128); /* L2: the slot was written on another SM */
                                total[4 * i] += v.x, total[4 * i + 1] += v.y, total[4 * i + 2] += v.z,
                                    total[4 * i + 3] += v.w;
                            }
                        }
                    }
                }
                if (trace && wg == 0 && t == 0 && units_done < kTraceUnits)
                    trace[kTraceUnits0 + 2 * units_done] = global_ns();
                /* Epilogue: element i of the fragment is P row 16*warp + lane/4 + 8*((i/2)%2) of this warpgroup's 64,
                 * Q column 8*(i/4) + 2*(lane%4) + i%2. Staged through shared memory so that global stores are whole
                 * 16-byte chunks of output rows; the producer keeps loading the next unit meanwhile. */
                uint8_t *stage_out = out_stage + wg * (C::kOutRows * C::kOutPitch);
                if (!SWAP && !unit.partial && p.bias_dtype >= 0) {
                    /* This thread's columns are q_base + 8*j + 2*(lane%4) + {0, 1}, the same for both of its rows:
                     * one pair of bias values per j, loaded once for both epilogues below (the bias code, inlined per
                     * element and per epilogue, was a third of the kernel's instructions). */
                    const int64_t bias0 = GROUPED ? (int64_t)unit.group * p.n : 0; /* GROUPED: the group's row */
#pragma unroll
                    for (int j = 0; j < BQ / 8; j++) {
                        const int64_t col = q_base + 8 * j + 2 * (lane % 4);
                        const float b0 = col < p.n ? bfp8_dev_load_f32(p.bias, p.bias_dtype, bias0 + col) : 0.0f;
                        const float b1 =
                            col + 1 < p.n ? bfp8_dev_load_f32(p.bias, p.bias_dtype, bias0 + col + 1) : 0.0f;
                        total[4 * j] += b0, total[4 * j + 1] += b1, total[4 * j + 2] += b0, total[4 * j + 3] += b1;
                    }
                }
                if (!SWAP && !CSPLIT && !unit.partial && p.y_dtype != 0) {
                    /* 16-bit output: pairs packed into shared memory. With y_tma the layout is [BQ/64]
                     * boxes of [64][64] with the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8):
                     * conflict-free here, and what the TMA expects), and one thread stores them with TMA while the
                     * warpgroup moves on to the next unit; otherwise padded rows, copied out in 16-byte chunks. */
                    /* Stamps of the second unit's steps (trace builds). */
                    const bool stamp_steps = trace && wg == 0 && t == 0 && units_done == 1;
                    /* The previous unit's store has read the buffer. */
                    if (p.y_tma && t == 0) bulk_wait_read_all();
                    if (stamp_steps) trace[kTraceEpiStoreRead] = global_ns();
                    named_barrier_sync(1 + wg); /* ... and (staged) the previous unit's copy-out is done */
                    if (stamp_steps) trace[kTraceEpiSync1] = global_ns();
                    /* Elements 4j + 2h and 4j + 2h + 1 go to row r = 16*warp + lane/4 + 8h, columns c = 8j + 2*(lane%4)
                     * and c + 1. The per-thread part of the address is computed once: the swizzled chunk of column c,
                     * (c % 64) / 8 ^ r % 8, is (j % 8) ^ lane / 4, so each store adds only a constant and one xor. The
                     * output type and the layout are chosen outside the loops (per element they cost twice the
                     * conversions and the address arithmetic of both layouts). */
                    const int row0 = warp * 16 + lane / 4;
                    auto pack_all = [&](auto bf16) {
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
                        if (p.y_tma && BFP8_WG_FULL(flags, wg)) {
                            uint8_t *base = stage_out + row0 * 128 + 4 * (lane % 4);
                            const int chunk_xor = (lane / 4) << 4;
#pragma unroll
                            for (int j = 0; j < BQ / 8; j++) {
                                const int chunk = ((j % 8) << 4) ^ chunk_xor;
#pragma unroll
                                for (int h = 0; h < 2; h++)
                                    *(uint32_t *)(base + (j / 8) * 8192 + h * 1024 + chunk) = pack(j, h);
                            }
                        } else {
                            uint8_t *base = stage_out + row0 * C::kOutPitch + 4 * (lane % 4);
#pragma unroll
                            for (int j = 0; j < BQ / 8; j++)
#pragma unroll
                                for (int h = 0; h < 2; h++)
                                    *(uint32_t *)(base + h * 8 * C::kOutPitch + 16 * j) = pack(j, h);
                        }
                    };
                    if (p.y_dtype == 1)
                        pack_all(std::true_type());
                    else
                        pack_all(std::false_type());
                    if (stamp_steps) trace[kTraceEpiPacked] = global_ns();
                    if (p.y_tma && BFP8_WG_FULL(flags, wg)) {
                        fence_proxy_async();
                        named_barrier_sync(1 + wg);
                        if (stamp_steps) trace[kTraceEpiSync2] = global_ns();
                        if (t == 0) {
                            const uint32_t src = smem_u32(stage_out);
#pragma unroll
                            for (int box = 0; box < BQ / 64; box++)
                                tma_store_2d(&maps.y, src + box * 8192, (int)q_base + 64 * box, (int)p_base);
                            bulk_commit();
                        }
                    } else {
                        named_barrier_sync(1 + wg);
                        constexpr int kChunks = BQ / 8; /* 16-byte chunks per staged row */
                        for (int idx = t; idx < 64 * kChunks; idx += 128) {
                            const int r = idx / kChunks, ch = idx % kChunks;
                            const int64_t row = p_base + r, col = q_base + ch * 8;
                            if (row >= BFP8_ROW_END(unit) || col >= p.n || !BFP8_ROW_OF_PASS(unit, row)) continue;
                            const uint8_t *src = stage_out + r * C::kOutPitch + ch * 16;
                            uint16_t *dst = (uint16_t *)p.y + row * p.n + col;
                            if (p.y_vec && col + 8 <= p.n) {
                                *(uint4 *)dst = *(const uint4 *)src;
                            } else {
                                for (int e = 0; e < 8 && col + e < p.n; e++) dst[e] = ((const uint16_t *)src)[e];
                            }
                        }
                    }
                } else if (!SWAP && !CSPLIT) {
                    /* fp32 output (bias added above) or split-K partials: adjacent column pairs from registers. */
                    float *out = unit.partial ? p.workspace + (int64_t)split * p.m * p.n : (float *)p.y;
                    const bool pairs = p.n % 2 == 0; /* (row, even col) pairs are 8-byte aligned */
#pragma unroll
                    for (int j = 0; j < BQ / 8; j++) {
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int64_t row = p_base + warp * 16 + lane / 4 + 8 * h;
                            const int64_t col = q_base + 8 * j + 2 * (lane % 4);
                            if (row >= BFP8_ROW_END(unit) || col >= p.n || !BFP8_ROW_OF_PASS(unit, row)) continue;
                            const float v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
                            float *dst = out + row * p.n + col;
                            if (pairs) {
                                *(float2 *)dst = make_float2(v0, v1);
                            } else {
                                dst[0] = v0;
                                if (col + 1 < p.n) dst[1] = v1;
                            }
                        }
                    }
                } else {
                    /* Swapped, or CSPLIT: stage the fragment as fp32 [rows of y][columns of y], then write rows of y
                     * (or of the split's partials) four columns at a time. Swapped, the fragment is [weight rows
                     * n][tokens m], staged transposed in the output staging; the normal path's CSPLIT kernels stage
                     * their [64 tokens][BQ] in the first stages' shared memory, free once both warpgroups' MMAs are
                     * done (one unit per CTA: the producer has no load left to issue). */
                    constexpr int kPitchF = SWAP ? C::kOutPitch / 4 : BQ + 4; /* rows padded by 16 bytes */
                    static_assert(SWAP || 2 * 64 * kPitchF * 4 <= kStages * C::kStageBytes, "CSPLIT staging");
                    float *sf = SWAP ? (float *)stage_out : (float *)tiles + wg * 64 * kPitchF;
                    if (SWAP)
                        named_barrier_sync(1 + wg); /* the previous unit's copy-out has read the staging */
                    else
                        /* The other warpgroup's MMAs have read the stages. */
                        consumers_sync(p.one_consumer ? 128 : 256);
#pragma unroll
                    for (int i = 0; i < BQ / 2; i++) {
                        const int p_local = warp * 16 + lane / 4 + 8 * ((i / 2) % 2);
                        const int q_local = 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
                        sf[SWAP ? q_local * kPitchF + p_local : p_local * kPitchF + q_local] = total[i];
                    }
                    named_barrier_sync(1 + wg);
                    /* CSPLIT: every CTA of the cluster has its split of the tile staged at the same offset. Once all
                     * have (a cluster barrier: it waits for the cluster's threads that have not exited, here the
                     * consumers; the producer warps have exited, or thread 0 is about to, its last load issued), this
                     * CTA sums its share of the chunks (rank r those whose index is r modulo the cluster size) over the
                     * cluster in split order. */
                    if (CSPLIT) {
                        cluster_arrive_release();
                        cluster_wait_acquire();
                    }
                    constexpr int kRowChunks = SWAP ? 16 : BQ / 4;          /* 16-byte chunks per staged row */
                    constexpr int kChunks = (SWAP ? BQ : 64) * kRowChunks; /* this warpgroup's */
                    const int64_t row0 = SWAP ? q_base : p_base, col0 = SWAP ? p_base : q_base;
                    /* Four outputs from (row, col) on: the split's partials for the reduce kernel, or, with the bias,
                     * rounded into y. */
                    auto put_chunk = [&](int64_t row, int64_t col, float4 v) {
                        float vals[4] = {v.x, v.y, v.z, v.w};
                        const bool whole = col + 4 <= p.n && (p.n % 4) == 0;
                        if (unit.partial && !CSPLIT) {
                            float *dst = p.workspace + ((int64_t)split * p.m + row) * p.n + col;
                            if (whole) {
                                *(float4 *)dst = v;
                            } else {
                                for (int e = 0; e < 4 && col + e < p.n; e++) dst[e] = vals[e];
                            }
                            return;
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
                            for (int e = 0; e < 4 && col + e < p.n; e++)
                                bfp8_dev_store_f32(p.y, p.y_dtype, o + e, vals[e]);
                        }
                    };
                    if (CSPLIT) {
                        /* This CTA's chunks are rank + csplit * (t + 128 * i), at most kPerThread per thread (csplit >=
                         * 2). Each is summed over the cluster's stagings in split (rank) order from -0, as the reduce
                         * kernel sums; the loads of one peer for all of a thread's chunks go out together, so the sum
                         * waits for one DSMEM round trip per peer, not one per chunk and peer (a chunk at a time, the
                         * cells with 64-128 tokens ran slower than with the reduce kernel). */
                        constexpr int kPerThread = (kChunks + 255) / 256;
                        float4 sum[kPerThread];
                        uint32_t at[kPerThread];
                        bool mine[kPerThread];
#pragma unroll
                        for (int i = 0; i < kPerThread; i++) {
                            const int c = split_rank + p.csplit * (t + 128 * i), r = c / kRowChunks,
                                      ch = c % kRowChunks;
                            mine[i] = c < kChunks && row0 + r < p.m && col0 + ch * 4 < p.n;
                            at[i] = smem_u32(sf + r * kPitchF + ch * 4);
                            sum[i] = make_float4(-0.0f, -0.0f, -0.0f, -0.0f);
                        }
                        for (int q = 0; q < p.csplit; q++) {
#pragma unroll
                            for (int i = 0; i < kPerThread; i++) {
                                if (!mine[i]) continue;
                                const float4 part = ld_shared_cluster_f32x4(cluster_peer_addr(at[i], q));
                                sum[i].x += part.x, sum[i].y += part.y, sum[i].z += part.z, sum[i].w += part.w;
                            }
                        }
                        /* This CTA has read its share of every CTA's staging. Before the stores: the arrival's release
                         * fence (MEMBAR.GPU) would otherwise wait for them to complete. */
                        cluster_arrive_release();
#pragma unroll
                        for (int i = 0; i < kPerThread; i++) {
                            const int c = split_rank + p.csplit * (t + 128 * i);
                            if (mine[i]) put_chunk(row0 + c / kRowChunks, col0 + (c % kRowChunks) * 4, sum[i]);
                        }
                    } else {
                        /* Swapped, the columns of y end where the unit's weight rows do (a row slice's end; p.n else).
                         */
                        const int64_t col_end = SWAP ? unit.p_end : p.n;
                        for (int idx = t; idx < kChunks; idx += 128) {
                            const int r = idx / kRowChunks, ch = idx % kRowChunks;
                            const int64_t row = row0 + r, col = col0 + ch * 4;
                            if (row >= p.m || col >= col_end) continue;
                            put_chunk(row, col, *(const float4 *)(sf + r * kPitchF + ch * 4));
                        }
                    }
                }
                if (trace && wg == 0 && t == 0 && units_done < kTraceUnits)
                    trace[kTraceUnits0 + 2 * units_done + 1] = global_ns();
                units_done++;
            } while (GROUPED && (flags & kSlotMore) && ((flags = take_slot(unit)), true));
        }
        /* The last stores complete before the CTA exits. */
        if (!SWAP && p.y_tma && t == 0) bulk_wait_all();
        /* CSPLIT: no CTA exits while another still reads its shared memory (the arrival after its reads). */
        if (CSPLIT) cluster_wait_acquire();
    }
#endif
}
#undef BFP8_U_FIRST
#undef BFP8_U_END
#undef BFP8_U_STEP
#undef BFP8_SK_U
#undef BFP8_DECODE
#undef BFP8_WG_FULL
#undef BFP8_ROW_END
#undef BFP8_ROW_OF_PASS

} // namespace

#endif
