/* What hopper's device code shares: the tile and stage sizes, the shared-memory layout (Config), the kernel's tensor
 * maps, the trace stamps and the barrier and wgmma helpers. Device code for launch.cu, its one includer (hence the
 * unnamed namespace). */
#ifndef BFP8_HOPPER_CONFIG_CUH
#define BFP8_HOPPER_CONFIG_CUH

#include <cuda.h> /* CUtensorMap */
#include <cuda_runtime.h>

#include <stdint.h>

#include "backends/cuda/sm90_async.cuh" /* mbarriers, TMA, bulk groups, the clock: thin PTX wrappers */
#include "backends/hopper/plan.h"      /* BFP8_HOPPER_STAGES_SWAP8 */
#include "backends/hopper/schedule.h"

namespace {

using HopperParams = bfp8_hopper_params;
using Unit = bfp8_hopper_unit;

constexpr int kBK = BFP8_HOPPER_BK; /* K per stage = one scale block = one 128-byte swizzled row */
constexpr int kBP = BFP8_HOPPER_BP; /* P rows per tile: two consumer warpgroups of 64 */
constexpr int kThreads = 384;       /* producer warpgroup + two consumer warpgroups */
constexpr int kMaxSmem = 227 * 1024;

/* The stamps of a trace build, per CTA (not in time order: the first boxes usually go out at entry, before the CTA
 * synchronizes): its start; the barriers initialized and the CTA synchronized; in the producer's thread: the maps
 * prefetched, griddepcontrol.wait passed, the first weight box and then the whole first stage issued; the first
 * stage landed; the steps of the second unit's 16-bit epilogue (the previous store has read its buffer, the first
 * barrier, the fragment packed, the second barrier); thread 0's entry path split (its barriers initialized, its
 * first unit decoded); then, for each of the first kTraceUnits units, when its last block was promoted (its
 * epilogue starts) and when its epilogue was done. (Stream-K pieces that store a slot are not stamped, and a tail's
 * wait for the slots it adds falls before its epilogue's start: the report's "main loop" then spans them.) */
enum TraceSlot {
    kTraceStart,
    kTraceSynced,
    kTracePrefetched,
    kTraceDepWaited,
    kTraceFirstWeightIssued,
    kTraceFirstIssued,
    kTraceFirstStage,
    kTraceEpiStoreRead,
    kTraceEpiSync1,
    kTraceEpiPacked,
    kTraceEpiSync2,
    kTraceBarriersReady,
    kTraceUnitDecoded,
    kTraceUnits0
};
constexpr int kTraceUnits = 6;
constexpr int kTraceSlots = kTraceUnits0 + 2 * kTraceUnits;

/* The kernel's TMA descriptors, one kernel parameter (__grid_constant__: TMA reads them from parameter space). */
struct TensorMaps {
    CUtensorMap p, q;           /* the P and Q operands, 128 x kBP and 128 x BQ boxes */
    CUtensorMap p_last, q_last; /* the same with p_last_rows / q_last_rows rows (unused when those are 0): the last
                                 * tile's box, or a row slice's (p_last) */
    CUtensorMap sa;             /* activation scales, one K block of a tile's rows */
    CUtensorMap y;              /* the output for the TMA-store epilogue (unused unless y_tma) */
};
/* The stamps cost the normal path ~3.5% even when off (a live pointer through the consumer loop), so they are
 * compiled only into diagnostic builds: make HOPPER_TRACE=1. */
#ifndef BFP8_HOPPER_TRACE
#define BFP8_HOPPER_TRACE 0
#endif
constexpr bool kTraceBuild = BFP8_HOPPER_TRACE != 0;

/* PROWS: the P rows a stage holds, kBP, or 64 for the normal path's 64-row tiles (one consumer warpgroup: half the
 * P bytes and one warpgroup's output staging a stage, so more stages fit). */
template <int BQ, bool SWAP, int PROWS = kBP> struct Config {
    static constexpr int kPBytes = PROWS * kBK;
    static constexpr int kQBytes = BQ * kBK;
    static constexpr int kStageBytes = kPBytes + kQBytes; /* multiple of 1024: the swizzle atom */
    static constexpr int kScaleSlot = 512;                 /* up to 128 fp32 activation scales */
    /* Output staging per consumer warpgroup, rows padded by 16 bytes (conflict-free fragment writes): normal =
     * [64 rows][BQ] of 16-bit outputs, swapped = [BQ tokens][64 weight rows] of fp32 (transposed on the way). */
    static constexpr int kOutPitch = SWAP ? 64 * 4 + 16 : BQ * 2 + 16;
    static constexpr int kOutRows = SWAP ? BQ : 64;
    static constexpr int kOutBytes = ((SWAP ? 2 : PROWS / 64) * kOutRows * kOutPitch + 1023) / 1024 * 1024;
    static_assert(SWAP || (kOutRows * kOutPitch) % 1024 == 0, "second warpgroup's TMA-store tile must be aligned");
    static_assert(SWAP || kOutRows * kOutPitch >= BQ / 64 * 8192, "a warpgroup's TMA-store boxes must fit");
    static constexpr int kStagesFit = (kMaxSmem - 1024 - kOutBytes - 256) / (kStageBytes + kScaleSlot + 16);
    static constexpr int kMaxStages = PROWS < kBP ? 16 : 12;
    static constexpr int kStagesCap = kStagesFit > kMaxStages ? kMaxStages : kStagesFit;
    static constexpr int kStages = kStagesCap % 2 ? kStagesCap - 1 : kStagesCap; /* EXPERIMENT: even rings */
    static constexpr int kSmemBytes = 1024 + kStages * (kStageBytes + kScaleSlot) + kOutBytes + kStages * 16;
};
static_assert(Config<8, true>::kStages == BFP8_HOPPER_STAGES_SWAP8, "plan.h's stage count of the 8-token kernel");

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Barrier among the 128 threads of one consumer warpgroup (ids 1 and 2; 0 is __syncthreads). */
__device__ __forceinline__ void named_barrier_sync(int id) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
/* Barrier among the consumer warpgroups that run (id 3; 128 or 256 threads). */
__device__ __forceinline__ void consumers_sync(int threads) {
    asm volatile("bar.sync 3, %0;\n" ::"r"(threads) : "memory");
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

#endif

} // namespace

#endif
