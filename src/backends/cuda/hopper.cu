/* hopper: the sm_90a fast path for block-FP8 GEMM (TMA + FP8 wgmma + warp specialization).
 *
 * y[m,n] = sum_kb sa[m,kb] * sb[n/128,kb] * (sum_{k in kb} a[m,k] b[n,k]) + bias[n], one rounding at the end.
 *
 * The kernel computes a 128 x BQ tile of a product P * Q^T where P and Q are both K-major e4m3 matrices:
 *  - normal: P = A (activations, 128 rows a tile), Q = B (weights, BQ = 64 or 128 rows a tile: the narrower
 *    tile doubles the tiles to spread over the SMs when there are few);
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
 * more K blocks, two partials alternate, so block b+1's MMAs run while block b is promoted. On the normal path with
 * M <= 64 the second consumer, whose rows all lie past M, exits at once. setmaxnreg moves registers from the
 * producer to the consumers. After changing a consumer loop, check `-Xptxas -v` (make test does): when ptxas cannot
 * prove an accumulator idle it serializes the wgmmas and says so (C7514, C7518); the kernel stays correct, only
 * slower. Check the loop's SASS too: a branch on the warpgroup index inside it moved its stage index out of the
 * uniform registers and cost 9% without any ptxas message (bench/hopper-notes.md, v8).
 *
 * The grid is persistent: CTAs walk work units (P tile, Q tile, K split) with a stride of gridDim.x, so the
 * producer streams the next unit's data while the consumers finish the current one. Split-K (for decode and
 * other shapes with fewer tiles than SMs) writes fp32 partials to a workspace that a second kernel sums in a
 * fixed order, adds the bias to and rounds once (launched as a programmatic dependent to hide its launch). Where
 * every tile's splits fit in one cluster of up to 8 CTAs on the device at once (swapped with 8-token tiles, or
 * normal with 64-wide weight tiles and one activation tile), they run instead in the CTAs of one cluster, which
 * sum them over distributed shared memory after a cluster barrier (HopperParams::csplit: no workspace, no second
 * kernel); the plan's time model weighs both. On the swapped path the weight rows of a partial last wave (192 or
 * 288 tiles on 132 SMs) run instead as row slices of 32 or 64 rows with the whole K, before the whole tiles, and
 * need no sum at all (HopperParams::slice_rows). On the normal path a nearly empty last wave (544 tiles on 132
 * SMs) runs instead, with the wave before it, as stream-K: 132 equal runs of (tile, K block) pairs, one per CTA, the
 * tiles cut between runs summed by their tails from per-CTA partial slots in the L2, after a flag
 * (HopperParams::sk_ctas). K beyond the matrix is zero-filled by TMA, so a partial last K
 * block is exact; a last tile that the matrix ends inside is loaded with a box cut to the rows that exist (in
 * 8-row groups), and the stale rows past it feed only outputs that are not stored.
 * Thread 0 issues the first stages of its CTA's first unit as soon as the barriers exist, before the CTA's barrier
 * (not in the CLUSTER kernels). Inside bfp8_linear the kernel is launched as a programmatic dependent of the
 * activation quantization: those early loads are the first stages' weight tiles only, and the producer waits
 * for that kernel (griddepcontrol.wait) only before it loads activations, so launch and first-byte latency overlap
 * the quantization. The CLUSTER kernels issue nothing before that wait (since v15; before, their weights went early
 * too).
 * Opt-in (BFP8_HOPPER_CLUSTER, measured slower): the normal path in 2-CTA clusters whose tiles share one operand's
 * tile, each CTA loading half of it with TMA multicast into both; the two producers tell each other when a stage
 * is free, so the consumer loop is that of the plain kernel (HopperParams::pair_p).
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
#include <type_traits>

#include "blockfp8.h"
#include "fp8_math.cuh"
#include "hopper_wgmma.cuh"
#include "sm90_async.cuh" /* mbarriers, TMA, bulk groups, the clock: thin PTX wrappers */
extern "C" {
#include "cuda_glue.h" /* declares this file's extern "C" entry points */
}

namespace {

constexpr int kBK = 128;            /* K per stage = one scale block = one 128-byte swizzled row */
constexpr int kBP = 128;            /* P rows per tile: two consumer warpgroups of 64 */
constexpr int kThreads = 384;       /* producer warpgroup + two consumer warpgroups */
constexpr int kMaxSmem = 227 * 1024;
constexpr int kGroupP = 8; /* rasterization: groups of 8 P tiles walk Q together (L2 reuse) */
/* Stages of its first unit that a CTA issues at kernel entry (HopperParams::entry_stages). Of 0, 2, 4 and all
 * (v15), 4 did best on the cells that moved (the decode cells with K <= 2048, 2-3% faster than 0; M=16 2112x7168 1%
 * slower, 2-4% with all); over the 48 cells the four were within run-to-run noise. Inside bfp8_linear (weights
 * only at entry) 4, all and 0 gave the same DeepSeek-R1 step within 1% (v16), so one cap serves both. */
constexpr int kEntryStages = 4;

/* A divisor fixed for the whole launch, with the multiplier and shift that divide any x in [0, 2^31) by it exactly:
 * x / d = (x * mul) >> shift, with shift = 31 + ceil(log2 d) and mul = ceil(2^shift / d) (< 2^32; the error
 * x * (mul - 2^shift / d) / 2^shift stays under 2^-ceil(log2 d) <= 1/d). One wide multiply instead of a division's
 * ~25 dependent instructions: decode_unit's three divisions cost the entry path ~0.4 us before (v16). */
struct Divisor {
    int d;
    uint32_t mul;
    int shift;
};
__host__ __device__ __forceinline__ int divide(int x, const Divisor &v) {
    return (int)(((uint64_t)(uint32_t)x * v.mul) >> v.shift);
}

struct HopperParams {
    int64_t m, n, k;
    int p_rows; /* rows of the P operand: n swapped, m normal */
    int kblocks;
    int p_tiles, q_tiles, splits, kb_per_split, units;
    /* Units [0, whole_units) are tiles 0.. with the whole K range; the rest cover the remaining tiles split
     * `splits` ways (all tiles when whole_units = 0). The whole tiles cover a prefix of the output's columns. With
     * row slices (below) the slices come first and the whole tiles are the last whole_units units. */
    int whole_units;
    /* Swapped plans only: > 0 where the weight rows after the whole tiles are cut into row slices instead of
     * split K (plan_tiling says why): units [0, units - whole_units) are the slices, then the whole tiles. Slice v
     * takes rows [whole_units * kBP + v * slice_rows, + slice_rows) with the whole K range, loaded with the
     * p_last map (whose box then has slice_rows rows, a power of two that divides kBP, so a slice lies inside one
     * weight-scale block), and writes y: no partials, no reduce. */
    int slice_rows;
    /* decode_unit's divisors, over the grid of tiles (of tile pairs with clusters): the split units' tiles (that
     * grid's size less whole_units), a rasterization group's units (kGroupP x its Q count) and the last group's P
     * rows (under kGroupP when its P count is not a multiple of it); full_groups groups have kGroupP rows. */
    Divisor tail_tiles, group_units, last_group_rows;
    int full_groups;
    const float *sb; /* weight scales, ROW_MAJOR [ceil(n/128)][kblocks] */
    const void *bias;
    int bias_dtype; /* -1: no bias */
    void *y;
    int y_dtype;
    float *workspace; /* [splits][m][n] when splits > 1 */
    int y_vec;        /* y 16-byte aligned and n % 8 == 0: whole 16-byte chunks of output rows */
    int y_tma;        /* normal path, no split, 16-bit output, y_vec: the epilogue stores through TMA (maps.y) */
    /* Builds with HOPPER_TRACE=1 and BFP8_HOPPER_TRACE=1 set: per CTA kTraceSlots %globaltimer stamps (ns), in
     * the order of TraceSlot. NULL: no stamps. */
    unsigned long long *trace;
    /* Launched as a programmatic dependent of the kernel that wrote the activations (bfp8_linear's quantization):
     * the first stages' weight tiles are requested at entry (not by the CLUSTER kernels), the activations after
     * waiting for that kernel. */
    int dependent;
    /* Thread 0 issues up to this many (at most kStages) of the first unit's stages at entry: weights and
     * activations, or only the weights when dependent; 0: the producer loop issues them. Ignored by the CLUSTER
     * kernels (nothing at entry). */
    int entry_stages;
    /* Rows of the box that loads the last P (Q) tile when the matrix ends inside it (a multiple of 8, under kBP
     * (BQ)), or (P, in a plan with row slices) a slice: p_box_rows; 0: the whole box. TMA zero-fills rows past
     * the matrix, but not for free: a 128-row activation box with 127 rows past M=129 made every K block ~60%
     * slower (bench/hopper-notes.md, v7). The shared-memory rows past the smaller box keep stale bytes; they feed
     * only accumulator rows (columns, swapped) that lie outside the output (the slice) and are never stored. */
    int p_last_rows, q_last_rows;
    /* Normal path with M <= 64: the one P tile's second 64 rows lie past M, so its warpgroup would only take
     * tensor-core time from the first with MMAs on rows never stored. It exits at once, and the empty barriers count
     * the first warpgroup's 4 warps only. M = 64 cells ran 4-15% faster than with both warpgroups (v8). */
    int one_consumer;
    /* One P tile (normal) or one Q tile (swapped): each weight byte is loaded once, the weight streams through
     * the L2 once, so its loads carry the evict-first hint and do not push out lines that are used again (the
     * activations, and whatever the caller's other kernels keep there). Measured with the L2 full of dirty lines
     * (bench --l2 dirty) at M <= 128: 3.6% faster in geomean, up to 11% on the 29-132 MB weights, 2-7% slower on
     * the 15-17 MB ones (2112x7168, 32768x512 at M=16); neutral with a clean L2 (bench/hopper-notes.md, v9). */
    int weight_evict_first;
    /* CLUSTER kernels (2-CTA clusters, opt-in: BFP8_HOPPER_CLUSTER): the two CTAs of a cluster run units of the
     * same K range whose tiles share one operand, and each loads half of that shared tile with TMA multicast into
     * both CTAs, so each CTA reads fewer bytes a block: 24 KB instead of 32 with 128-wide weight tiles, 16
     * (sharing activations) or 20 instead of 24 with 64-wide ones. pair_q = 2: adjacent Q tiles sharing the P tile
     * (activations); pair_p = 2: adjacent P tiles sharing the Q tile (weights). Both 1 in the other kernels. The
     * shared tile is always whole (the plan requires the shared operand's rows to be a multiple of the tile).
     * Correct, but measured 1-20% slower than the plain kernel in each of the 21 DeepSeek-R1 cells at M >= 128
     * where they apply (bench/hopper-notes.md, v10), so the plan never picks them unless asked to. */
    int pair_p, pair_q;
    /* CSPLIT kernels (swapped with 8-token tiles, or normal with 64-wide weight tiles and one P tile; split K, no
     * whole tiles): the `csplit` splits of a tile run in the CTAs of one cluster, cluster c taking tile c and its
     * CTA of rank r split r, and the splits are summed over distributed shared memory instead of by the reduce
     * kernel (no workspace, no second kernel). One unit per CTA (the grid is the units; csplit_fits, checked again
     * by launch_planned), which the kernel relies on three ways: the producer's thread 0 takes no part in the
     * cluster barriers of the epilogue, so it must have issued its CTA's last load before its consumers reach one
     * (with a second unit it could still be waiting for a free stage there, and neither would move); the normal
     * path stages its partial in the ring, free only once no load is left to issue; and nothing waits for the
     * peers' reads of one unit's staging before the next unit's. 0 in the other kernels. */
    int csplit;
    /* STREAMK kernels (normal path; Plan::sk_tiles says where the plan picks them): the tiles after the first
     * whole_units, sk_tiles x kblocks (tile, K block) pairs in tile order, are cut into sk_ctas (the grid) equal
     * runs, CTA c taking [c * sk_share + min(c, sk_extra), + sk_share + (c < sk_extra)). A run begins in a tile's
     * last K blocks (that tile's "tail") and ends in a tile's first ones. The CTA runs its pieces from its second
     * tile on first and the tail last, so that all CTAs step through K roughly together, as whole tiles do: the
     * operands that tiles share (the activations, and at large M the weights) are then read from the L2 while they
     * are there. (In run order, call 3, the stream-K cells ran 1.3-1.4x slower.) A piece that ends before its
     * tile's last K block leaves its partial in the CTA's slot of sk_slots and raises its flag (sk_flags, zeroed
     * before the launch); the tail waits for the flags of the CTAs before it whose runs end inside its tile, adds
     * their slots nearest first, and stores the tile. Only a CTA's last piece waits, and only for CTAs with lower
     * run indices, whose slots are written before their own last pieces: the waits form no cycle, and each ends once
     * the CTAs it waits for have run. The run index c is not the block index but a ticket, the order in which
     * the CTAs started (sk_ticket): the CTAs a tail waits for have started, so the waits end even where fewer SMs
     * than the grid are free (MPS limits, a green context, other kernels still running) and whatever order the
     * hardware dispatches the CTAs in (the launch is not cooperative). decode_unit numbers a CTA's pieces
     * whole_units + c + j * sk_ctas, j = 0, 1, .. (empty past its run); the kernel walks its whole tiles by block
     * index, so whole_units is a multiple of sk_ctas (launch_planned checks). 0 in the other kernels. */
    int sk_ctas, sk_tiles, sk_share, sk_extra; /* (sk_tiles: the plan's, for the host's check; the kernel does not
                                                * read it) */
    Divisor sk_cta_div, sk_kb_div; /* by sk_ctas and by kblocks */
    float *sk_slots;               /* [sk_ctas][2 warpgroups][stream_k_slot_floats(BQ)]: a piece's partial */
    unsigned *sk_flags;            /* [sk_ctas][2 warpgroups]: 1 once the slot is written */
    unsigned *sk_ticket;           /* the tickets handed out so far (zeroed with the flags) */
};
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
/* The CLUSTER kernels' maps: one more, the shared operand with a box of half its tile's rows. A type of their own
 * keeps the other kernels' parameters where they were. */
struct ClusterTensorMaps : TensorMaps {
    CUtensorMap half;
};
template <bool CLUSTER> using KernelMaps = typename std::conditional<CLUSTER, ClusterTensorMaps, TensorMaps>::type;
/* The stamps cost the normal path ~3.5% even when off (a live pointer through the consumer loop; measured on the
 * H200, bench/hopper-notes.md v6), so they are compiled only into diagnostic builds: make HOPPER_TRACE=1. */
#ifndef BFP8_HOPPER_TRACE
#define BFP8_HOPPER_TRACE 0
#endif
constexpr bool kTraceBuild = BFP8_HOPPER_TRACE != 0;

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
/* The half-tile map of a CLUSTER kernel's maps (none in the others'). */
__device__ __forceinline__ const CUtensorMap *half_map(const TensorMaps &) { return nullptr; }
__device__ __forceinline__ const CUtensorMap *half_map(const ClusterTensorMaps &maps) { return &maps.half; }

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

/* Unit u -> (P tile, Q tile, split) and its K-block range [kb0, kb1); partial: the unit writes fp32 partial sums
 * for the reduce kernel instead of y. Tiles are numbered so that groups of kGroupP P tiles sweep all Q tiles.
 * CLUSTER: units are numbered over the grid of tile pairs (p_tiles / pair_p x q_tiles / pair_q), both CTAs of a
 * cluster decode the same unit, and `rank` picks the CTA's tile of the pair. SLICES (the kernels that can run them):
 * the first units are row slices where p.slice_rows says so. Host and device: the host checks
 * that the units cover every tile and split once (bfp8_hopper_check_units). */
struct Unit {
    int pt, qt, split, kb0, kb1;
    bool partial;
    int p0, p_end; /* the P rows [p0, p_end) it computes: its tile's (p_end: the matrix's rows), or its slice's */
    bool p_cut;    /* its P box is the smaller one (maps.p_last): the last tile the matrix ends inside, or a slice */
    /* Stream-K pieces (HopperParams::sk_ctas): sk_store, it leaves its partial in its CTA's slot (it ends before
     * its tile's last K block); sk_gather, it is its tile's tail (it starts past K block 0 and ends the tile) and
     * adds the slots of the CTAs before it whose runs reach into the tile, which starts at sk_tile0 in the run
     * numbering. An empty piece (past its CTA's run) has kb0 == kb1. */
    bool sk_store, sk_gather;
    int sk_tile0;
};
/* fp32 values in one stream-K slot: a consumer warpgroup's 64 x bq partial (HopperParams::sk_slots). */
__host__ __device__ constexpr int stream_k_slot_floats(int bq) { return 64 * bq; }
/* The first (tile, K block) pair of CTA c's stream-K run (HopperParams::sk_ctas); c = sk_ctas: their count. */
__host__ __device__ __forceinline__ int stream_k_run(const HopperParams &p, int c) {
    return c * p.sk_share + (c < p.sk_extra ? c : p.sk_extra);
}
template <bool CLUSTER, bool SLICES, bool STREAMK = false>
__host__ __device__ __forceinline__ Unit decode_unit(const HopperParams &p, int u, int rank) {
    Unit w;
    int t;
    if (STREAMK) w.sk_store = w.sk_gather = false, w.sk_tile0 = 0; /* (only the STREAMK kernels read them) */
    if (SLICES && p.slice_rows) {
        /* The slices first (units [0, units - whole_units)), then the whole tiles. */
        const int slices = p.units - p.whole_units;
        if (u >= slices) return decode_unit<CLUSTER, false>(p, u - slices, rank);
        w.split = 0, w.kb0 = 0, w.kb1 = p.kblocks, w.partial = false, w.qt = 0, w.p_cut = true;
        w.p0 = p.whole_units * kBP + u * p.slice_rows;
        w.pt = w.p0 / kBP; /* the tile the slice lies in: its weight-scale row */
        w.p_end = w.p0 + p.slice_rows < p.p_rows ? w.p0 + p.slice_rows : p.p_rows;
        return w;
    }
    if (STREAMK && u >= p.whole_units) {
        /* Piece j of CTA c's run, in the order the CTA runs them: the run's tiles from its second on, then its first
         * tile where the run starts inside it (HopperParams::sk_ctas says why). */
        const int v = u - p.whole_units, j = divide(v, p.sk_cta_div), c = v - j * p.sk_ctas;
        const int run0 = stream_k_run(p, c), run1 = stream_k_run(p, c + 1);
        const int first_tile = divide(run0, p.sk_kb_div), pieces = divide(run1 - 1, p.sk_kb_div) - first_tile + 1;
        w.split = 0, w.partial = false;
        if (j >= pieces) { /* past the run: nothing to do */
            w.pt = w.qt = 0, w.kb0 = w.kb1 = 0, w.p0 = 0, w.p_end = p.p_rows, w.p_cut = false;
            return w;
        }
        const bool rotate = run0 != first_tile * p.kblocks;
        const int tile = first_tile + (rotate ? (j + 1 == pieces ? 0 : j + 1) : j), tile0 = tile * p.kblocks;
        const int first = run0 > tile0 ? run0 : tile0, end = run1 < tile0 + p.kblocks ? run1 : tile0 + p.kblocks;
        w.kb0 = first - tile0, w.kb1 = end - tile0;
        w.sk_store = w.kb1 < p.kblocks;
        w.sk_gather = w.kb0 > 0 && w.kb1 == p.kblocks;
        w.sk_tile0 = tile0;
        t = p.whole_units + tile;
    } else if (u < p.whole_units) {
        t = u;
        w.split = 0, w.kb0 = 0, w.kb1 = p.kblocks, w.partial = false;
    } else {
        const int v = u - p.whole_units;
        w.split = divide(v, p.tail_tiles);
        t = p.whole_units + (v - w.split * p.tail_tiles.d);
        w.kb0 = w.split * p.kb_per_split;
        w.kb1 = w.kb0 + p.kb_per_split < p.kblocks ? w.kb0 + p.kb_per_split : p.kblocks;
        w.partial = p.splits > 1;
    }
    const int g = divide(t, p.group_units);
    const int r = t - g * p.group_units.d;
    /* Within a group, P tile fastest; a full group's kGroupP rows divide by a shift. */
    const bool full = g < p.full_groups;
    w.qt = full ? (int)((unsigned)r / kGroupP) : divide(r, p.last_group_rows);
    w.pt = g * kGroupP + (r - w.qt * (full ? kGroupP : p.last_group_rows.d));
    if (CLUSTER) {
        w.pt = w.pt * p.pair_p + (p.pair_p == 2 ? rank : 0);
        w.qt = w.qt * p.pair_q + (p.pair_q == 2 ? rank : 0);
    }
    w.p0 = w.pt * kBP, w.p_end = p.p_rows;
    w.p_cut = p.p_last_rows && w.pt == p.p_tiles - 1;
    return w;
}

template <int BQ, bool SWAP, bool CLUSTER, bool CSPLIT = false, bool STREAMK = false>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_gemm_kernel(const __grid_constant__ KernelMaps<CLUSTER> maps, const HopperParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(!CLUSTER || !SWAP, "2-CTA clusters run the normal path only");
    static_assert(!CSPLIT || !CLUSTER, "splits summed in a cluster: not with 2-CTA clusters");
    static_assert(!STREAMK || (!SWAP && !CLUSTER && !CSPLIT), "stream-K runs the plain normal path only");
    using C = Config<BQ, SWAP>;
    constexpr int kStages = C::kStages;
    constexpr bool kSlices = SWAP && !CSPLIT; /* the kernels that run row slices (HopperParams::slice_rows) */
    constexpr int kScaleRows = SWAP ? BQ : kBP; /* activation scales per K block of a tile */
    static_assert(128 % BQ == 0, "a tile's weight rows lie inside one 128-row weight block (one scale per K block)");

    extern __shared__ uint8_t smem_raw[];
    /* Rounded up to 1024 bytes (the 128-byte swizzle's atom) by an offset from smem_raw, not by masking its address:
     * a pointer derived from smem_raw stays in the shared address space, so the scale reads and the epilogue's
     * stores compile to LDS / STS; through an integer cast they were generic LD / ST. Measured (v14): K <= 2048 at
     * M >= 512 5% faster, K >= 7168 there 1.3% slower (the main loop's instruction schedule moved). */
    uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    uint8_t *tiles = smem;
    uint8_t *out_stage = smem + kStages * C::kStageBytes; /* 1024-aligned: TMA-store source */
    float *scales = (float *)(out_stage + C::kOutBytes);
    uint64_t *bars = (uint64_t *)(scales + kStages * (C::kScaleSlot / 4));
    const uint32_t tiles_u32 = smem_u32(tiles);
    const uint32_t full0 = smem_u32(bars), empty0 = smem_u32(bars + kStages);
    /* CLUSTER: "the other CTA's stage is free", one arrival by the other CTA's producer per refill (see the
     * producer loop). STREAMK: the CTA's ticket, in the same room past the barriers (kernel_smem). */
    const uint32_t peer_free0 = smem_u32(bars + 2 * kStages);
    int *const sk_ticket_smem = (int *)(bars + 2 * kStages);

    /* A split-K reduce launched after this grid may start its launch now (it waits for this grid's completion). */
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    /* Through a shuffle from lane 0, so that the compiler knows it is the same across the warp and keeps the
     * shared-memory addresses derived from it in uniform registers (fewer R2UR moves before each wgmma). */
    const int warpgroup = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    /* The units this CTA walks: from the block index in steps of the grid, or with clusters from the cluster index
     * in steps of the cluster count (both CTAs of a cluster walk the same units, and rank picks each one's tile of
     * a unit's pair); STREAMK: its stream-K pieces are those of its ticket's run (BFP8_SK_U). Written out where
     * used: helpers for them changed the other kernels' instruction schedule. */
    const int rank = CLUSTER ? (int)cluster_ctarank() : 0;
    /* CSPLIT: the CTA of rank r in cluster c runs unit r * T + c, split r of tile c (decode_unit numbers the T tiles
     * of one split together). The unit loops below are those of the other kernels, a walk in steps of the cluster
     * count, but a CSPLIT CTA runs exactly one unit: one cluster per tile (HopperParams::csplit). */
    const int split_rank = CSPLIT ? (int)cluster_ctarank() : 0;
    /* Written out at each use as macros (#undef after the kernel): as variables or helpers computed once, they
     * changed the other kernels' code (checked in the SASS; v10 saw the same with lambdas). */
#define BFP8_U_FIRST (CSPLIT ? split_rank * p.tail_tiles.d + (int)cluster_id_x() : (CLUSTER ? blockIdx.x / 2 : blockIdx.x))
/* STREAMK: unit u of the walk, the stream-K pieces renumbered from the block index's run to the ticket's. */
#define BFP8_SK_U(u) ((int)(u) >= p.whole_units ? (int)(u) - (int)blockIdx.x + sk_cta : (int)(u))
#define BFP8_U_END (CSPLIT ? (split_rank + 1) * p.tail_tiles.d : p.units)
#define BFP8_U_STEP (CSPLIT ? (int)cluster_count_x() : (CLUSTER ? gridDim.x / 2 : gridDim.x))
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
    /* With clusters, this CTA loads half of the shared tile (the same tile in both CTAs) into both CTAs, and
     * the other CTA the other half. */
    auto load_half = [&](uint32_t dst, int tile_rows, int tile_row0, uint32_t full, int kb) {
        const int half = tile_rows / 2;
        tma_load_2d_multicast(dst + rank * half * kBK, half_map(maps), kb * kBK, tile_row0 + rank * half,
                              full, 0x3);
    };
    auto load_p = [&](uint32_t tile, uint32_t full, const Unit &unit, int kb) {
        if (CLUSTER && p.pair_q == 2)
            load_half(tile, kBP, unit.p0, full, kb);
        else
            load(tile, unit.p_cut ? &maps.p_last : &maps.p, kb * kBK, unit.p0, full, SWAP);
    };
    auto load_q = [&](uint32_t tile, uint32_t full, const Unit &unit, int kb) {
        if (CLUSTER && p.pair_p == 2)
            load_half(tile + C::kPBytes, BQ, unit.qt * BQ, full, kb);
        else
            load(tile + C::kPBytes, q_last(unit) ? &maps.q_last : &maps.q, kb * kBK, unit.qt * BQ, full,
                 !SWAP);
    };
    /* Bytes that complete one of the unit's stages (boxes count whole, zero-filled rows included). */
    auto stage_bytes = [&](const Unit &unit) {
        const int p_rows = unit.p_cut ? p.p_last_rows : kBP, q_rows = q_last(unit) ? p.q_last_rows : BQ;
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
    auto load_acts = [&](int st, const Unit &unit, int kb) {
        load_operand(false, st, unit, kb);
        tma_load_2d(smem_u32(scales + st * (C::kScaleSlot / 4)), &maps.sa, SWAP ? unit.qt * BQ : unit.p0, kb,
                    full0 + 8 * st);
    };
    unsigned long long *trace = kTraceBuild && p.trace ? p.trace + (size_t)blockIdx.x * kTraceSlots : nullptr;
    if (trace && threadIdx.x == 0) trace[kTraceStart] = global_ns();
    int entry_issued = 0; /* thread 0: stages of the first unit whose loads were issued at entry */
    /* STREAMK: the CTA's stream-K run, its ticket (HopperParams::sk_ticket), taken first so that the atomic's round
     * trip overlaps the setup below; every thread reads it after the CTA's barrier. Its whole tiles stay those of
     * its block index: the hardware spreads consecutive block indices, so tiles that share operands run on SMs far
     * apart, and assigning the whole tiles by ticket cost M=4096 2112x7168 3 us (v21). */
    int sk_cta = 0;
    if (threadIdx.x == 0) {
        if (STREAMK) sk_cta = (int)atomicAdd(p.sk_ticket, 1u);
        /* First thing, before the barriers are set up. (v14 read the ~0.85 us from this request to the first load
         * as the descriptor's fetch; timed alone, bench/first_load.cu, a first TMA load's instruction takes 64 ns and
         * its bytes land as soon with or without the prefetch (v15). Kept: it costs nothing.) */
        tma_prefetch_map(&maps.p);
        tma_prefetch_map(&maps.q);
        tma_prefetch_map(&maps.sa);
        if (trace) trace[kTracePrefetched] = global_ns();
        for (int s = 0; s < kStages; s++) {
            mbar_init(full0 + 8 * s, 1);
            /* One arrival per consumer warp: 256 per-thread arrivals on one barrier per K block cost shared-memory
             * atomics for nothing. */
            mbar_init(empty0 + 8 * s, p.one_consumer ? 4 : 8);
            if (CLUSTER) mbar_init(peer_free0 + 8 * s, 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        if (STREAMK) *sk_ticket_smem = sk_cta;
        if (trace) trace[kTraceBarriersReady] = global_ns();
        /* The first unit's first stages, issued here rather than from the producer loop (empty barriers start
         * free; the expected bytes cover the whole stage): the weights, and the activations too unless they come
         * from the kernel before this one (p.dependent: the producer loads them after griddepcontrol.wait). From
         * the loop, reached after the CTA's barrier, setmaxnreg and the producer's cold code, the first load
         * issued ~1.0 us after the CTA started; from here 0.61-0.64 (bench/hopper-notes.md v15). Not with clusters:
         * loads into the other CTA wait for the cluster's barrier. */
        const int entry_max = min(kStages, p.entry_stages);
        if (!CLUSTER && entry_max > 0 && (CSPLIT ? BFP8_U_FIRST < BFP8_U_END : (int)blockIdx.x < p.units)) {
            const Unit unit = decode_unit<CLUSTER, kSlices, STREAMK>(
                p, CSPLIT ? BFP8_U_FIRST : STREAMK ? BFP8_SK_U(blockIdx.x) : blockIdx.x, rank);
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
    if (CLUSTER || CSPLIT)
        cluster_sync_relaxed(); /* CLUSTER: the other CTA's barriers exist before anything arrives on them or loads
                                 * into it; CSPLIT: every CTA of the cluster has started before one reads another's
                                 * shared memory */
    else
        __syncthreads();
    if (STREAMK) sk_cta = __shfl_sync(0xffffffffu, *sk_ticket_smem, 0); /* (warp-uniform, as entry_issued below) */
    if (trace && threadIdx.x == 0) trace[kTraceSynced] = global_ns();

    if (warpgroup == 0) {
        /* The producer's one active thread needs few registers; the consumers' 240 (232 before v12) give the
         * 128-wide normal kernel the room that the uniform warpgroup index above costs it (at 232 it spilled). */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        /* Thread 0's count, through a shuffle so that the compiler knows it is warp-uniform: the producer loop's
         * stage, phase and box coordinates then stay in uniform registers. Without it they moved to per-thread
         * ones (an R2UR before each TMA load) and the normal path ran 4-18% slower at M >= 128 (v15). */
        entry_issued = __shfl_sync(0xffffffffu, entry_issued, 0); /* other warps: their lane 0's 0, unused */
        /* An idle producer warp stamps the first stage's arrival (it starts waiting before the load is issued). */
        if (trace && threadIdx.x == 32) {
            mbar_wait(full0, 0);
            trace[kTraceFirstStage] = global_ns();
        }
        if (threadIdx.x == 0) {
            const uint32_t peer_free_remote = CLUSTER ? cluster_peer_addr(peer_free0, rank ^ 1) : 0;
            /* CLUSTER, before a refill of stage st: this CTA's consumers have released it; tell the other CTA's
             * producer, and wait for the same news from it (one arrival per refill on a count-1 barrier: the parity
             * is that of the empty barrier). */
            auto peer_handshake = [&](int st, uint32_t ph) {
                mbar_arrive_remote(peer_free_remote + 8 * st);
                mbar_wait(peer_free0 + 8 * st, ph ^ 1);
            };
            /* The activations may come from the previous kernel of the stream: wait for it (a no-op unless this
             * grid was launched as its programmatic dependent), then load those of the stages issued at entry. */
            asm volatile("griddepcontrol.wait;\n" ::: "memory");
            if (trace) trace[kTraceDepWaited] = global_ns();
            if (p.dependent && entry_issued) {
                const Unit unit = decode_unit<CLUSTER, kSlices, STREAMK>(
                    p, CSPLIT ? BFP8_U_FIRST : STREAMK ? BFP8_SK_U(blockIdx.x) : blockIdx.x, rank);
#pragma unroll 1
                for (int i = 0; i < entry_issued; i++) load_acts(i, unit, unit.kb0 + i);
                if (trace) trace[kTraceFirstIssued] = global_ns();
            }
            /* The stages issued at entry are the first unit's first ones: the loop goes on after them. */
            int stage = entry_issued % kStages, issued = entry_issued, skip = entry_issued;
            uint32_t phase = entry_issued == kStages;
            for (int u = BFP8_U_FIRST; u < BFP8_U_END; u += BFP8_U_STEP) {
                const Unit unit = decode_unit<CLUSTER, kSlices, STREAMK>(p, STREAMK ? BFP8_SK_U(u) : u, rank);
                for (int kb = unit.kb0 + skip; kb < unit.kb1; kb++, issued++) {
                    mbar_wait(empty0 + 8 * stage, phase ^ 1);
                    /* A refill writes half of the shared tile into the other CTA too; the first fill of each stage
                     * needs no handshake (all start free). Kept out of the consumer loop, whose code is then that
                     * of the plain kernel: consumer warps arriving on both CTAs' barriers made the loop branch and
                     * the cluster kernels up to 38% slower (bench/hopper-notes.md, v10). */
                    if (CLUSTER && issued >= kStages) peer_handshake(stage, phase);
                    mbar_arrive_expect_tx(full0 + 8 * stage, stage_bytes(unit));
                    load_weight(stage, unit, kb);
                    if (trace && issued == 0) trace[kTraceFirstWeightIssued] = global_ns();
                    load_acts(stage, unit, kb);
                    if (trace && issued == 0) trace[kTraceFirstIssued] = global_ns();
                    if (++stage == kStages) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                skip = 0;
            }
            if (CLUSTER) {
                /* One more round of the handshake for every stage that was filled: the other CTA's consumers have
                 * then taken every half this CTA multicast into it, and its producer has made every arrival on
                 * this CTA's barriers, so neither CTA exits while the other still writes into it. */
                for (int i = 0; i < kStages; i++, issued++) {
                    if (issued >= kStages) {
                        mbar_wait(empty0 + 8 * stage, phase ^ 1);
                        peer_handshake(stage, phase);
                    }
                    if (++stage == kStages) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
        const int wg = warpgroup - 1; /* which 64 P rows */
        /* The second warpgroup's rows all lie past M: it has nothing to do (see HopperParams::one_consumer). Leaving
         * here, before the loop, keeps the loop's code as it is: a skip inside it, per unit, made the compiler
         * keep the stage index in per-thread registers and cost every normal-path kernel 9% (v8). */
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
         * warpgroup index in per-thread registers cost M = 512..4096 5-12% (bench/hopper-notes.md, v12). */
        const uint64_t p_desc0 = smem_desc(tiles_u32 + wg * 64 * kBK), q_desc0 = smem_desc(tiles_u32 + C::kPBytes);
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
        /* Two partials in flight where the registers allow: the normal path (a block's scales are two registers)
         * and swapped Q tiles up to 64 tokens (BQ / 4 scales a block; at 128 two sets would not fit). Swapped
         * units shorter than kMinBlocksTwoPartials run one partial: measured on the H200 (bench/hopper-notes.md,
         * v6), two partials gain 2-11% with 12 or more K blocks a unit (24576x1536, 7168x16384 at M <= 64) and lose
         * up to 10% with 4 (32768x512). */
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

        int units_done = 0;
        for (int u = BFP8_U_FIRST; u < BFP8_U_END; u += BFP8_U_STEP) {
            const Unit unit = decode_unit<CLUSTER, kSlices, STREAMK>(p, STREAMK ? BFP8_SK_U(u) : u, rank);
            if (STREAMK && unit.kb0 == unit.kb1) continue; /* past this CTA's stream-K run */
            const int pt = unit.pt, qt = unit.qt, split = unit.split;
            const int kb0 = unit.kb0, kb1 = unit.kb1;
            const int64_t p_base = (int64_t)unit.p0 + wg * 64; /* first P row of this warpgroup */
            const int64_t q_base = (int64_t)qt * BQ;
            const int weight_block = SWAP ? pt : (qt * BQ) / 128;
            const float *sb_row = p.sb + (int64_t)weight_block * p.kblocks;
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
                 * straight code, a loop unrolled by two and a tail, with no branch between a wgmma and its wait:
                 * an earlier form with the issue inside a conditional made ptxas serialize every wgmma of the
                 * kernel (C7514), and removing that took M=4096 7168x16384 from 949 to 787 us
                 * (bench/hopper-notes.md, v5). */
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
            }

            if constexpr (STREAMK) {
                /* A stream-K piece (HopperParams::sk_ctas): this warpgroup's partial goes to its slot, or, in its
                 * tile's tail, the slots of the CTAs before it whose runs end inside the tile are added, nearest
                 * first. Each thread keeps its own fragment elements at the same place in every slot: [BQ / 8][128]
                 * float4s. */
                const int cta = sk_cta;
                static_assert(stream_k_slot_floats(BQ) == BQ / 8 * 128 * 4, "a slot: [BQ / 8][128] float4s");
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
                        more = stream_k_run(p, c) > unit.sk_tile0;
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
#pragma unroll
                for (int j = 0; j < BQ / 8; j++) {
                    const int64_t col = q_base + 8 * j + 2 * (lane % 4);
                    const float b0 = col < p.n ? bfp8_dev_load_f32(p.bias, p.bias_dtype, col) : 0.0f;
                    const float b1 = col + 1 < p.n ? bfp8_dev_load_f32(p.bias, p.bias_dtype, col + 1) : 0.0f;
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
                if (p.y_tma && t == 0) bulk_wait_read_all(); /* the previous unit's store has read the buffer */
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
                    if (p.y_tma) {
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
                if (p.y_tma) {
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
                        if (row >= p.m || col >= p.n) continue;
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
                    consumers_sync(p.one_consumer ? 128 : 256); /* the other warpgroup's MMAs have read the stages */
#pragma unroll
                for (int i = 0; i < BQ / 2; i++) {
                    const int p_local = warp * 16 + lane / 4 + 8 * ((i / 2) % 2);
                    const int q_local = 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
                    sf[SWAP ? q_local * kPitchF + p_local : p_local * kPitchF + q_local] = total[i];
                }
                named_barrier_sync(1 + wg);
                /* CSPLIT: every CTA of the cluster has its split of the tile staged at the same offset. Once all have
                 * (a cluster barrier: it waits for the cluster's threads that have not exited, here the consumers;
                 * the producer warps have exited, or thread 0 is about to, its last load issued), this CTA sums its
                 * share of the chunks (rank r those whose index is r modulo the cluster size) over the cluster in
                 * split order. */
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
                        for (int e = 0; e < 4 && col + e < p.n; e++) bfp8_dev_store_f32(p.y, p.y_dtype, o + e, vals[e]);
                    }
                };
                if (CSPLIT) {
                    /* This CTA's chunks are rank + csplit * (t + 128 * i), at most kPerThread per thread (csplit >=
                     * 2). Each is summed over the cluster's stagings in split (rank) order from -0, as the reduce
                     * kernel sums; the loads of one peer for all of a thread's chunks go out together, so the sum
                     * waits for one DSMEM round trip per peer, not one per chunk and peer (v18: a chunk at a time,
                     * the cells with 64-128 tokens ran slower than with the reduce kernel). */
                    constexpr int kPerThread = (kChunks + 255) / 256;
                    float4 sum[kPerThread];
                    uint32_t at[kPerThread];
                    bool mine[kPerThread];
#pragma unroll
                    for (int i = 0; i < kPerThread; i++) {
                        const int c = split_rank + p.csplit * (t + 128 * i), r = c / kRowChunks, ch = c % kRowChunks;
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
                    /* Swapped, the columns of y end where the unit's weight rows do (a row slice's end; p.n else). */
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
        }
        if (!SWAP && p.y_tma && t == 0) bulk_wait_all(); /* the last stores complete before the CTA exits */
        /* CSPLIT: no CTA exits while another still reads its shared memory (the arrival after its reads). */
        if (CSPLIT) cluster_wait_acquire();
    }
#endif
}
#undef BFP8_U_FIRST
#undef BFP8_U_END
#undef BFP8_U_STEP
#undef BFP8_SK_U

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
    int whole_units;    /* see HopperParams */
    int pair_p, pair_q; /* 2-CTA clusters (see HopperParams); units then count pairs of tiles */
    int csplit;         /* the splits summed inside clusters of this many CTAs (HopperParams::csplit); 0: reduce */
    int slice_rows;     /* the rows after the whole tiles in slices of this many (plan_tiling); 0: none */
    int sk_tiles;       /* the tiles after the whole tiles in stream-K runs (HopperParams::sk_ctas); 0: none */
    int sk_pieces;      /* stream-K: the most pieces in one CTA's run (units = whole + grid x sk_pieces) */
};

/* BFP8_HOPPER_HYBRID=0 never splits only the last wave's tiles, =1 always does where it applies (decode, long K,
 * tiles > SMs; for tests and side-by-side measurement), and then no plan takes row slices; unset: the time model
 * decides. Read once. With =0, M = 9..16 also stays on the normal path (make_plan takes the swapped path with row
 * slices only in place of a normal plan's last-wave split). */
int hybrid_mode(void) {
    static const int mode = [] {
        const char *e = getenv("BFP8_HOPPER_HYBRID");
        return e && (e[0] == '0' || e[0] == '1') ? e[0] - '0' : -1;
    }();
    return mode;
}

/* The environment variable `name` as a whole decimal count in [lo, hi]; `fallback` when it is unset or is
 * anything else (the measurement switches below ignore values they cannot use). */
int env_count(const char *name, long lo, long hi, int fallback) {
    const char *e = getenv(name);
    char *end = nullptr;
    const long v = e ? strtol(e, &end, 10) : 0;
    return e && end != e && *end == '\0' && v >= lo && v <= hi ? (int)v : fallback;
}

/* BFP8_HOPPER_SPLITS=S forces S K splits of every tile (at most one per K block; no last-wave split), for
 * side-by-side measurement of the split model; unset or 0: the model decides. Read once. */
int forced_splits(void) {
    static const int splits = env_count("BFP8_HOPPER_SPLITS", 1, 1024, 0);
    return splits;
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

/* BFP8_HOPPER_CLUSTER=1 runs 2-CTA clusters wherever pair_tiles allows them, =P or =Q only those sharing that
 * operand's tile; unset or anything else: never (measured slower, HopperParams::pair_p). For tests and
 * side-by-side measurement. Read once. */
enum ClusterMode { kClusterOff = 0, kClusterAny = 1, kClusterShareP = 2, kClusterShareQ = 3 };
int cluster_mode(void) {
    static const int mode = [] {
        const char *e = getenv("BFP8_HOPPER_CLUSTER");
        if (!e) return (int)kClusterOff;
        if (strcmp(e, "1") == 0) return (int)kClusterAny;
        if (strcmp(e, "P") == 0) return (int)kClusterShareP;
        if (strcmp(e, "Q") == 0) return (int)kClusterShareQ;
        return (int)kClusterOff;
    }();
    return mode;
}

/* Whether the environment variable `name` starts with '0' (the switches here are on unless set to 0). */
bool env_is_zero(const char *name) {
    const char *e = getenv(name);
    return e && e[0] == '0';
}

/* BFP8_HOPPER_CSPLIT=0 sums K splits with the reduce kernel only, never inside clusters (HopperParams::csplit),
 * for tests and side-by-side measurement. Read once. */
bool csplit_disabled(void) {
    static const bool off = env_is_zero("BFP8_HOPPER_CSPLIT");
    return off;
}

/* The plan features that the environment can turn off ("0") or force wherever they apply ("all"); unset or
 * anything else: the heuristic (plan_tiling). For tests and side-by-side measurement. */
enum FeatureMode { kFeatureOff = 0, kFeatureHeuristic = 1, kFeatureAll = 2 };
int feature_mode(const char *name) {
    if (env_is_zero(name)) return kFeatureOff;
    const char *e = getenv(name);
    return e && strcmp(e, "all") == 0 ? kFeatureAll : kFeatureHeuristic;
}

/* BFP8_HOPPER_SLICES: row slices of a swapped plan's weight rows (Plan::slice_rows); =all also with fewer tiles than
 * SMs where the heuristic would not cut them. Read once. */
int slices_mode(void) {
    static const int mode = feature_mode("BFP8_HOPPER_SLICES");
    return mode;
}

/* BFP8_HOPPER_STREAMK: the normal path's last waves as stream-K runs (Plan::sk_tiles). Read once. */
int stream_k_mode(void) {
    static const int mode = feature_mode("BFP8_HOPPER_STREAMK");
    return mode;
}

/* What the environment forces on the plan (the seven variables above). The plan functions take it as an argument,
 * so that the dispatcher's ranking (hopper_priority) follows the default heuristic whatever a test forces. */
struct PlanKnobs {
    TileOverride tile;
    int hybrid;      /* -1: the model decides */
    int splits;      /* 0: the model decides */
    int cluster;     /* ClusterMode */
    bool csplit_off; /* never sum splits inside clusters */
    int slices;      /* FeatureMode */
    int stream_k;    /* FeatureMode */
};
constexpr PlanKnobs kDefaultKnobs = {{false, false, 0}, -1, 0, kClusterOff, false, kFeatureHeuristic,
                                     kFeatureHeuristic};
PlanKnobs env_knobs(void) {
    return {tile_override(), hybrid_mode(), forced_splits(), cluster_mode(), csplit_disabled(), slices_mode(),
            stream_k_mode()};
}

/* The largest cluster that sums K splits (HopperParams::csplit): the portable cluster size. */
constexpr int kMaxSplitCluster = 8;

/* How many clusters of each size (index: CTAs per cluster, 2..kMaxSplitCluster) the device runs at once with the
 * CSPLIT kernels (one CTA per SM; a cluster's CTAs share one GPC, so this is not sms / size). All 0: none, and the
 * plan never sums splits inside clusters (what plans made without a device see). */
struct ClusterFit {
    int clusters[kMaxSplitCluster + 1];
};
constexpr ClusterFit kNoClusterFit = {};

/* One tiling (swapped with Q tiles of bq tokens, or normal with weight tiles of bq rows) and its K split. Split K
 * when there are too few tiles to fill the SMs, choosing the split count that minimizes a time model: waves of
 * units, each costing (K blocks per unit) x (the time of one block) + ~0.5 us (epilogue, barriers, refill), plus,
 * for a split, the partials out and back and ~3 us for the reduce (or ~1 us for the sum inside clusters). A block's
 * time is the larger of its weight bytes from HBM (activations and, at large M, weights come from L2) and its
 * FLOPs. An SM streams at most ~50 GB/s, and the SMs of one wave share ~3.2 TB/s: 64 SMs already draw as much as
 * 128. Swapped units compute at ~0.5 PFLOP/s over the chip (a block took 0.38 us on one SM at M=64), normal ones
 * at ~1. Calibrated on the H200 by sweeps of forced split counts (bench/hopper-notes.md, v6 and v18): with a
 * per-SM share of 4 TB/s / 132 instead, the model split M=1 7168x2048 in two (11.9 us) where one unit per tile
 * takes 10.1, and 7168x16384 seven ways (40.8 us) where two take 39.1; with 4 TB/s for the chip (v6 to v17) it
 * split M=1 4096x7168 in three or four (14.1 / 15.9 us, summed in clusters / by the reduce) where two take 13.9 /
 * 15.9, and 2112x7168 in five or seven (10.3 / 12.0) where four take 10.2 / 11.9. */
struct SplitModel {
    double hbm_bytes, flops; /* per K block of one unit */
    double flop_rate;        /* per SM */
    double block_time(int64_t active_sms) const {
        const double chip_bw = 3.2e12, sm_bw_max = 50e9;
        const double bw = chip_bw / (double)active_sms < sm_bw_max ? chip_bw / (double)active_sms : sm_bw_max;
        const double mem_s = hbm_bytes / bw, flop_s = flops / flop_rate;
        return mem_s > flop_s ? mem_s : flop_s;
    }
    /* `units` units of `per` K blocks on `sms` SMs, wave after wave. */
    double waves_time(int64_t units, int per, int sms) const {
        double t = 0;
        for (int64_t left = units; left > 0; left -= sms) {
            const int64_t active = left < sms ? left : sms;
            t += per * block_time(active) + 0.5e-6;
        }
        return t;
    }
    /* Partials of `outputs` outputs written and read back, and the reduce kernel. */
    static double reduce_time(int splits, double outputs) { return (double)splits * outputs * 8.0 / 4.0e12 + 3.0e-6; }
    /* The same splits summed inside clusters (HopperParams::csplit): two cluster barriers and the partials over
     * distributed shared memory, no second kernel. On the H200 it took 0.4-2.9 us less than the reduce with the
     * same split count (v18's sweep of 2112x7168, 4096x7168 and 7168x2048 at M = 1..128, where the clusters fit),
     * so ~2 us less than reduce_time's 3. */
    static double cluster_sum_time(int splits, double outputs) {
        return (double)splits * outputs * 4.0 / 4.0e12 + 1.0e-6;
    }
};

/* Whether a tiling's `splits` splits of `tiles` tiles can be summed inside clusters: one cluster per tile, every
 * cluster running at once (in waves it would still be correct, but slower than the reduce), one unit per CTA
 * (HopperParams::csplit), and a kernel for it: swapped with 8-token tiles, or normal with 64-wide weight tiles and
 * one P tile (M <= 128). */
bool csplit_fits(bool swap, int bq, int p_tiles, int64_t tiles, int splits, int sms, const ClusterFit &fit,
                 const PlanKnobs &knobs) {
    const bool kernel = swap ? bq == 8 : bq == 64 && p_tiles == 1;
    return kernel && !knobs.csplit_off && splits >= 2 && splits <= kMaxSplitCluster && tiles * splits <= sms &&
           fit.clusters[splits] >= tiles;
}

/* Tiles of the activation operand (P normal, Q swapped): 1 when one tile covers M, and then every weight tile is
 * loaded by the units of one tile only. */
int activation_tiles(const Plan &pl) { return pl.swap ? pl.q_tiles : pl.p_tiles; }

/* The start of CTA c's stream-K run among `blocks` (tile, K block) pairs cut into `ctas` runs whose lengths differ by
 * at most one (HopperParams::sk_share, sk_extra). */
int64_t stream_k_run_start(int64_t c, int64_t blocks, int ctas) {
    const int64_t share = blocks / ctas, extra = blocks % ctas;
    return c * share + (c < extra ? c : extra);
}
/* The most tiles that one of those runs meets (tiles of kblocks pairs). */
int stream_k_pieces(int ctas, int64_t blocks, int kblocks) {
    int most = 0;
    for (int c = 0; c < ctas; c++) {
        const int64_t first = stream_k_run_start(c, blocks, ctas), last = stream_k_run_start(c + 1, blocks, ctas) - 1;
        const int pieces = last < first ? 0 : (int)(last / kblocks - first / kblocks + 1);
        most = pieces > most ? pieces : most;
    }
    return most;
}

Plan plan_tiling(bool swap, int bq, int64_t m, int64_t n, int64_t k, int sms, const ClusterFit &fit,
                 const PlanKnobs &knobs) {
    Plan pl = {};
    pl.swap = swap;
    pl.bq = bq;
    const int64_t p_rows = pl.swap ? n : m, q_rows = pl.swap ? m : n;
    pl.p_tiles = (int)bfp8_ceil_div(p_rows, kBP);
    pl.q_tiles = (int)bfp8_ceil_div(q_rows, pl.bq);
    const int kblocks = (int)bfp8_ceil_div(k, kBK);
    const int64_t tiles = (int64_t)pl.p_tiles * pl.q_tiles;
    SplitModel model;
    /* Weight bytes per block come from HBM once per M tile: all of them when one M tile covers M. */
    model.hbm_bytes = pl.swap ? (double)kBP * kBK : (double)pl.bq * kBK / (double)pl.p_tiles;
    model.flops = 2.0 * kBP * pl.bq * kBK;
    model.flop_rate = (pl.swap ? 0.5e15 : 1.0e15) / sms;
    auto in_clusters = [&](int s) { return csplit_fits(swap, bq, pl.p_tiles, tiles, s, sms, fit, knobs); };
    double best = 1e30;
    int best_s = 1;
    const int max_s = kblocks < 32 ? kblocks : 32;
    for (int s = 1; s <= max_s; s++) {
        const int per = (kblocks + s - 1) / s;
        const int real_s = (kblocks + per - 1) / per; /* no empty splits */
        if (real_s != s) continue;
        double t_s = model.waves_time(tiles * s, per, sms);
        if (s > 1)
            t_s += in_clusters(s) ? SplitModel::cluster_sum_time(s, (double)m * n)
                                  : SplitModel::reduce_time(s, (double)m * n);
        if (t_s < best * 0.99) {
            best = t_s;
            best_s = s;
        }
    }
    if (knobs.splits) {
        const int per = (kblocks + knobs.splits - 1) / knobs.splits;
        best_s = (kblocks + per - 1) / per; /* no empty splits */
    }
    pl.splits = best_s;
    pl.csplit = in_clusters(best_s) ? best_s : 0;
    pl.kb_per_split = (kblocks + best_s - 1) / best_s;
    int64_t units = tiles * best_s;
    /* More tiles than SMs but not a whole number of waves (288 tiles on 132 SMs): whole tiles for the full waves, and
     * only the last partial wave's tiles split so that their pieces fill one wave. Splitting every tile instead pays
     * partials for all of them (8 bytes x splits x M x N: 75 MB at M=64 N=36864); not splitting leaves 24 SMs running
     * 56-block tiles alone at the end. Measured on the H200 (bench/hopper-notes.md, v4) it pays only for long tiles:
     * swapped 36864x7168 (56 K blocks) M = 16/64/128: 82.5/92.4/128.3 -> 75.2/79.2/104.3 us, normal M = 100/128:
     * 95.0/95.9 -> 81.2/82.6 us (v7); 24576x1536 (12 K blocks): 3-13% slower at M = 16..128, where the last wave is
     * short and the tail's bytes stream at the chip's rate anyway. Hence kblocks >= 32. Only where the whole tiles
     * cover a prefix of the output's columns, which is what the reduce skips: swapped with one Q tile, or normal with
     * all P tiles in one rasterization group (decode_unit numbers them P tile fastest; the whole tiles are rounded down
     * to full columns). */
    const int across = activation_tiles(pl); /* tiles that share a column range of the output */
    if (across <= (pl.swap ? 1 : kGroupP) && tiles > sms && tiles % sms != 0 && kblocks >= 32 &&
        knobs.hybrid != 0 && !knobs.splits) {
        const int64_t whole = tiles / sms * sms / across * across, tail = tiles - whole;
        int s = (int)(sms / tail);
        if (s > kblocks) s = kblocks;
        if (s >= 2) {
            const int per = (kblocks + s - 1) / s;
            s = (kblocks + per - 1) / per;
            const double t_h = model.waves_time(whole, kblocks, sms) + model.waves_time(tail * s, per, sms) +
                               SplitModel::reduce_time(s, (double)m * (double)(tail / across) * (swap ? kBP : bq));
            if (t_h < best * 0.97 || knobs.hybrid == 1) {
                pl.csplit = 0;
                pl.splits = s;
                pl.kb_per_split = per;
                pl.whole_units = (int)whole;
                units = whole + tail * s;
            }
        }
    }
    /* Stream-K (normal path): where the tiles leave a partial last wave (544 tiles on 132 SMs), the full waves but
     * the last run whole tiles, and the tiles left, between one and two waves' worth, are cut into equal runs of
     * (tile, K block) pairs, one per CTA, so that every SM streams as many blocks (HopperParams::sk_ctas). A tile
     * cut between runs is summed by its tail from the partials of the others (one slot each, through the L2), in a
     * fixed order; the flags cost a memset before the launch (~1.7 us). A run's blocks took 1.23-1.33x the time of
     * whole tiles' blocks on the H200 (v20, call 4: M=512 7168x16384 105.8 -> 110.3 us for 217 blocks a CTA
     * instead of 256), so it is taken where the busiest CTA's blocks, those of its runs counted 1.3 times, drop by
     * at least 5% and 3 us at the model's block time: with a nearly empty last wave (M=4096 2112x7168, 4.1 waves:
     * 115.7 -> 103.1 us), not with a mostly full one (M = 128..4096 7168x16384: 5-8% slower). Only with more tiles
     * than SMs (with fewer, where a K split does not pay either, it is not measured), with two consumer warpgroups
     * (M > 64: at M <= 64 the weight stream runs at the chip's rate already, v20 call 1), and not in place of a K
     * split (the last-wave split above keeps its reduce; BFP8_HOPPER_STREAMK=all replaces it). */
    if (!pl.swap && knobs.stream_k != kFeatureOff && !knobs.splits && knobs.hybrid != 1 && !pl.csplit &&
        (pl.splits == 1 || pl.whole_units) && knobs.cluster == kClusterOff && tiles % sms != 0) {
        const int64_t full_waves = tiles / sms;
        const int64_t whole = full_waves >= 1 ? (full_waves - 1) * sms : 0, sk_tiles = tiles - whole;
        const int64_t run_blocks = sk_tiles * kblocks;
        const double dp_blocks = (double)(bfp8_ceil_div(tiles, sms) * kblocks);
        const double sk_blocks = (double)(whole / sms * kblocks) + 1.3 * (double)bfp8_ceil_div(run_blocks, sms);
        const double saved = (dp_blocks - sk_blocks) * model.block_time(sms);
        const bool pays =
            m > 64 && tiles > sms && !pl.whole_units && saved >= 3e-6 && sk_blocks <= 0.95 * dp_blocks;
        if (run_blocks / sms >= 4 && run_blocks < INT32_MAX && (pays || knobs.stream_k == kFeatureAll)) {
            pl.sk_tiles = (int)sk_tiles;
            pl.sk_pieces = stream_k_pieces(sms, run_blocks, kblocks);
            pl.whole_units = (int)whole;
            pl.splits = 1;
            pl.kb_per_split = kblocks;
            pl.csplit = 0;
            units = whole + (int64_t)sms * pl.sk_pieces;
        }
    }
    /* Row slices (swapped, one Q tile). Where the weight tiles leave a partial last wave (192 or 288 tiles on 132
     * SMs), the full waves run whole tiles and the weight rows left are cut into slices, one per CTA, each with
     * the whole K range, written straight to y: unlike the K split above no partials and no reduce kernel (that
     * kernel and its boundary cost ~2.6 us, v11), unlike no split no CTAs streaming a whole tile alone at the end.
     * The slices run first (decode_unit): a slice of R rows keeps only R x 128 bytes x 11-12 stages of weights in
     * flight, so a wave of slices alone is latency-bound (run last, they made 36864x7168 2.6 us slower than the K
     * split), but beside the whole tiles of the CTAs without one the stream stays saturated (v19: M = 1/8/16
     * 36864x7168 73.7/72.0/72.2 -> 70.1/68.0/68.6 us). R is a power of two, so a slice lies inside one 128-row
     * weight-scale block (one scale per K block, as for a tile), and at least 32. 36864x7168: 96 slices of 32 rows,
     * then 264 whole tiles; 24576x1536: 120 of 64, then 132. With fewer tiles than SMs (no whole wave), slices
     * instead of the K split where they are 64 rows, K is long and they keep >= 10 MB in flight: 7168x18432 at
     * M = 1/8 (a 2-way split summed in clusters) 39.5/39.0 -> 37.3/37.4 us, 7168x16384 35.6/35.8 -> 33.5/33.5
     * (112 slices: 11 MB). Not there: 4096x7168 with 64-row slices (64 of them, 6.3 MB; v19 call 5) 13.7 -> 16.0,
     * with 32-row slices 2112x7168 10.3 -> 16.1 and 4096x7168 13.7 -> 16.5; 7168x2048 (16 K blocks) 3% slower at
     * M = 1 (v19 call 3, BFP8_HOPPER_SLICES=all). */
    if (pl.swap && pl.q_tiles == 1 && tiles % sms != 0 && !knobs.splits && knobs.hybrid != 1 &&
        knobs.slices != kFeatureOff) {
        const int64_t whole = tiles / sms * sms, left = p_rows - whole * kBP;
        int rows = 32;
        while ((int64_t)rows * sms < left) rows *= 2;
        /* Fewer tiles than SMs: a wave of slices alone, which pays only where the slices keep enough bytes in
         * flight (the 8-token kernel's 12 stages of R x 128 bytes each: rows_left x 1.5 KB over the chip) and K is
         * long. */
        const double in_flight = (double)left * kBK * Config<8, true>::kStages;
        const bool few_tiles_pay = rows >= 64 && kblocks >= 64 && in_flight >= 10e6;
        if (rows < kBP && (whole > 0 || few_tiles_pay || knobs.slices == kFeatureAll)) {
            pl.slice_rows = rows;
            pl.whole_units = (int)whole;
            pl.splits = 1;
            pl.kb_per_split = kblocks;
            pl.csplit = 0;
            units = whole + bfp8_ceil_div(left, rows);
        }
    }
    pl.units = (int)units;
    pl.grid = (int)(units < sms ? units : sms);
    pl.pair_p = pl.pair_q = 1;
    return pl;
}

/* With clusters asked for (knobs.cluster), 2-CTA clusters whose two tiles share one operand's tile
 * (HopperParams::pair_p, pair_q), on the normal path with both consumer warpgroups (M > 64) and without the
 * last-wave split, where the tiles pair up evenly and the shared tile is whole: the P tile (activations; the
 * pair's Q tiles adjacent) where M is a multiple of 128 and the Q tiles are even in number, else the Q tile
 * (weights; adjacent P tiles) where N is a multiple of the Q tile and the P tiles are even. Sharing P first: it is
 * the larger tile when Q tiles are 64 wide. */
void pair_tiles(Plan &pl, int64_t m, int64_t n, int sms, const PlanKnobs &knobs) {
    if (pl.swap || m <= 64 || pl.whole_units || pl.csplit || pl.sk_tiles || sms < 2 || knobs.cluster == kClusterOff)
        return;
    const bool share_p = m % kBP == 0 && pl.q_tiles % 2 == 0 && knobs.cluster != kClusterShareQ;
    const bool share_q = n % pl.bq == 0 && pl.p_tiles % 2 == 0 && knobs.cluster != kClusterShareP;
    if (share_p)
        pl.pair_q = 2;
    else if (share_q)
        pl.pair_p = 2;
    else
        return;
    pl.units /= 2; /* tiles x splits, with an even tile count */
    pl.grid = 2 * (pl.units < sms / 2 ? pl.units : sms / 2);
}

/* Normal-path tiles of an M x N output with weight tiles bq wide (make_plan and hopper_priority). */
int64_t normal_tiles(int64_t m, int64_t n, int bq) { return bfp8_ceil_div(m, kBP) * bfp8_ceil_div(n, bq); }

/* The tiling, from sweeps of the tilings on the DeepSeek-R1 table (H200, bench/hopper-notes.md, v5, v8 and v9):
 *  - M <= 8: swapped, with an 8-token Q tile. Up to M = 64 swapped was the fastest in v5, but since a last tile
 *    loads only the rows that exist (edge boxes, v7) and a normal tile with M <= 64 runs one consumer warpgroup
 *    (HopperParams::one_consumer, v8), the normal path is faster from M = 9: at M = 16 by 0-8% on all eight
 *    shapes, at M = 17, 24 and 32 by 3-14% on seven and 1-3% on 36864x7168, at M = 40..64 by up to 25%; at M = 8
 *    it wins on five shapes and loses on three (2112x7168, 32768x512, 7168x2048 by 2-8%); at M = 1 it loses on
 *    most (v9);
 *  - M = 9..16 where the normal path would split its last wave's K (36864x7168): swapped with a 16-token Q tile
 *    and row slices (plan_tiling; v19: 72.2 -> 68.6 us at M=16);
 *  - otherwise the normal path, 64-wide weight tiles when their waves cost no more than the 128-wide tiles' waves:
 *    a 64-wide tile takes about 2/3 of a 128-wide one's time (measured 37 vs 56 us a wave at M = 512 and 4096,
 *    7168x16384), so 2 x waves(64) <= 3 x waves(128). That picks 64 for the few-tile shapes (M=128 with N <= 24576,
 *    M=512 N=2112: 11.8-22.2 us against 14.4-28.9 with 128-wide tiles) and 128 for the rest.
 * knobs.tile (BFP8_HOPPER_TILE) overrides the choice. */
Plan make_plan(int64_t m, int64_t n, int64_t k, int sms, const ClusterFit &fit, const PlanKnobs &knobs) {
    /* The normal path with weight tiles bq wide, in clusters where asked for and allowed. */
    auto normal = [&](int bq) {
        Plan pl = plan_tiling(false, bq, m, n, k, sms, fit, knobs);
        pair_tiles(pl, m, n, sms, knobs);
        return pl;
    };
    const TileOverride &forced = knobs.tile;
    if (forced.set && !forced.swap) return normal(forced.bq);
    if (m <= 8 || (forced.set && m <= 128)) {
        int bq = 8;
        while (bq < m) bq *= 2;
        if (forced.set && forced.bq) bq = forced.bq;
        return plan_tiling(true, bq, m, n, k, sms, fit, knobs);
    }
    const int64_t waves64 = bfp8_ceil_div(normal_tiles(m, n, 64), sms);
    const int64_t waves128 = bfp8_ceil_div(normal_tiles(m, n, 128), sms);
    const Plan nrm = normal(2 * waves64 <= 3 * waves128 ? 64 : 128);
    /* M = 9..16 where the normal path splits its last wave's K (36864x7168): the swapped path with row slices
     * there, which needs no reduce kernel after the GEMM. */
    if (m <= 16 && nrm.whole_units && nrm.splits > 1) {
        const Plan swapped = plan_tiling(true, 16, m, n, k, sms, fit, knobs);
        if (swapped.slice_rows) return swapped;
    }
    return nrm;
}

/* Output columns [0, whole_columns) come from whole tiles only (see the last-wave split in plan_tiling). */
int64_t whole_columns(const Plan &pl) {
    return pl.swap ? (int64_t)pl.whole_units * kBP : (int64_t)(pl.whole_units / pl.p_tiles) * pl.bq;
}

/* One line naming a plan: path, tile, K split, units, grid and clusters (BFP8_LOG=hopper, and the tests' golden
 * plans). */
void describe_plan(const Plan &pl, char *out, size_t size) {
    char slices[64] = "";
    if (pl.slice_rows)
        snprintf(slices, sizeof slices, "; %d row slices of %d first", pl.units - pl.whole_units, pl.slice_rows);
    if (pl.sk_tiles)
        snprintf(slices, sizeof slices, "; stream-K over %d tiles, up to %d pieces a CTA", pl.sk_tiles, pl.sk_pieces);
    snprintf(out, size, "%s BQ=%d splits=%d (K blocks per split %d) units=%d (whole %d%s) grid=%d%s%s",
             pl.swap ? "swapped" : "normal", pl.bq, pl.splits, pl.kb_per_split, pl.units, pl.whole_units, slices,
             pl.grid, pl.pair_q == 2 ? " clusters of 2 sharing P" : pl.pair_p == 2 ? " clusters of 2 sharing Q" : "",
             pl.csplit ? " summed in clusters" : "");
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

/* A launch configuration for cudaLaunchKernelEx: optionally a programmatic dependent (a grid that may start before
 * the kernel launched ahead of it on `stream` completes, and waits for it with griddepcontrol.wait where it needs
 * that kernel's results), optionally in clusters of `cluster` CTAs. */
struct KernelLaunch {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    KernelLaunch(int64_t grid, int block, int smem, cudaStream_t stream, bool dependent, int cluster) {
        cfg.gridDim = dim3((unsigned)grid, 1, 1);
        cfg.blockDim = dim3((unsigned)block, 1, 1);
        cfg.dynamicSmemBytes = (size_t)smem;
        cfg.stream = stream;
        cfg.attrs = attr;
        if (dependent) {
            attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
        }
        if (cluster > 1) {
            attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
            attr[cfg.numAttrs++].val.clusterDim = {(unsigned)cluster, 1, 1};
        }
    }
    KernelLaunch(const KernelLaunch &) = delete; /* cfg points into the object */
};

/* Dynamic shared memory of a kernel: CLUSTER kernels keep one more barrier per stage (peer_free), STREAMK kernels
 * their ticket in the same room, in Config's 256 bytes of slack. */
template <int BQ, bool SWAP, bool CLUSTER, bool STREAMK = false> constexpr int kernel_smem() {
    return Config<BQ, SWAP>::kSmemBytes + (CLUSTER || STREAMK ? 8 * Config<BQ, SWAP>::kStages : 0);
}

/* Raises a kernel's dynamic shared-memory limit to what it uses, once (before its launch or an occupancy query). */
template <int BQ, bool SWAP, bool CLUSTER, bool CSPLIT, bool STREAMK = false> cudaError_t allow_kernel_smem() {
    static_assert(Config<BQ, SWAP>::kSmemBytes + 8 * Config<BQ, SWAP>::kStages <= kMaxSmem, "peer_free barriers / stream-K ticket");
    static bool attr_set = false; /* idempotent: a race only sets it twice */
    if (attr_set) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(hopper_gemm_kernel<BQ, SWAP, CLUSTER, CSPLIT, STREAMK>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kernel_smem<BQ, SWAP, CLUSTER, STREAMK>());
    attr_set = e == cudaSuccess;
    return e;
}

/* Launches a persistent grid of `grid` CTAs (fewer with clusters, if fewer clusters fit at once; *launched says how
 * many). */
template <int BQ, bool SWAP, bool CLUSTER, bool CSPLIT = false, bool STREAMK = false>
cudaError_t launch_kernel(const KernelMaps<CLUSTER> &maps, const HopperParams &hp, int grid, cudaStream_t stream,
                          int *launched) {
    auto kernel = hopper_gemm_kernel<BQ, SWAP, CLUSTER, CSPLIT, STREAMK>;
    const int smem = kernel_smem<BQ, SWAP, CLUSTER, STREAMK>();
    cudaError_t e = allow_kernel_smem<BQ, SWAP, CLUSTER, CSPLIT, STREAMK>();
    if (e != cudaSuccess) return e;
    *launched = grid;
    if (!hp.dependent && !CLUSTER && !CSPLIT) {
        kernel<<<grid, kThreads, smem, stream>>>(maps, hp);
        return cudaGetLastError();
    }
    if (CLUSTER) {
        /* The CTAs of a cluster run on SMs of one GPC: a persistent grid of more clusters than fit at once would
         * leave the rest for a second wave. Their count depends on the device only (one CTA per SM); cached for the
         * process (a race only queries twice): a cap from another device with fewer SMs would only shorten the grid
         * here, never break it (the units are walked with the grid's stride). */
        static int max_clusters = 0;
        if (!max_clusters) {
            const KernelLaunch query(grid, kThreads, smem, stream, false, 2);
            e = cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &query.cfg);
            if (e != cudaSuccess) return e;
            if (max_clusters < 1) return cudaErrorInvalidConfiguration;
        }
        if (grid > 2 * max_clusters) *launched = 2 * max_clusters;
    }
    /* A programmatic dependent of the kernel before it (see HopperParams::dependent). CSPLIT: the whole plan in
     * clusters of hp.csplit (csplit_fits only picks it where all of them fit at once: in waves it would be
     * correct, clusters do not wait for each other, but slower than the reduce kernel). */
    const KernelLaunch launch(*launched, kThreads, smem, stream, hp.dependent, CLUSTER ? 2 : CSPLIT ? hp.csplit : 1);
    return cudaLaunchKernelEx(&launch.cfg, kernel, maps, hp);
}

cudaError_t launch_planned(const Plan &pl, const ClusterTensorMaps &maps, const HopperParams &hp,
                           cudaStream_t stream, int *launched) {
    const bool cluster = pl.pair_p * pl.pair_q == 2;
    if (pl.csplit) {
        /* One unit per CTA and a kernel for the tiling (HopperParams::csplit, csplit_fits). */
        const bool one_unit_each = pl.units == pl.csplit * pl.p_tiles * pl.q_tiles && pl.splits == pl.csplit &&
                                   !pl.whole_units && pl.pair_p * pl.pair_q == 1;
        if (!one_unit_each || (pl.swap ? pl.bq != 8 : pl.bq != 64 || pl.p_tiles != 1))
            return cudaErrorInvalidConfiguration;
        return pl.swap ? launch_kernel<8, true, false, true>(maps, hp, pl.units, stream, launched)
                       : launch_kernel<64, false, false, true>(maps, hp, pl.units, stream, launched);
    }
    if (pl.sk_tiles) {
        /* The grid is the runs, one CTA per SM (HopperParams::sk_ctas); the whole tiles are a number of its waves,
         * walked by block index, and every CTA walks as many pieces (BFP8_SK_U renumbers them by ticket). */
        if (pl.swap || cluster || pl.grid != hp.sk_ctas || pl.whole_units % pl.grid ||
            pl.units != pl.whole_units + pl.grid * pl.sk_pieces || (pl.bq != 64 && pl.bq != 128))
            return cudaErrorInvalidConfiguration;
        return pl.bq == 64 ? launch_kernel<64, false, false, false, true>(maps, hp, pl.grid, stream, launched)
                           : launch_kernel<128, false, false, false, true>(maps, hp, pl.grid, stream, launched);
    }
    if (!pl.swap) {
        switch (pl.bq) {
        case 64:
            return cluster ? launch_kernel<64, false, true>(maps, hp, pl.grid, stream, launched)
                           : launch_kernel<64, false, false>(maps, hp, pl.grid, stream, launched);
        default:
            return cluster ? launch_kernel<128, false, true>(maps, hp, pl.grid, stream, launched)
                           : launch_kernel<128, false, false>(maps, hp, pl.grid, stream, launched);
        }
    }
    switch (pl.bq) {
    case 8: return launch_kernel<8, true, false>(maps, hp, pl.grid, stream, launched);
    case 16: return launch_kernel<16, true, false>(maps, hp, pl.grid, stream, launched);
    case 32: return launch_kernel<32, true, false>(maps, hp, pl.grid, stream, launched);
    case 64: return launch_kernel<64, true, false>(maps, hp, pl.grid, stream, launched);
    default: return launch_kernel<128, true, false>(maps, hp, pl.grid, stream, launched);
    }
}

/* BFP8_HOPPER_TMA_STORE=0 keeps the v2 epilogue (16-byte stores by every thread) on the normal path, for
 * side-by-side measurement. Read once. */
bool tma_store_enabled(void) {
    static const bool on = !env_is_zero("BFP8_HOPPER_TMA_STORE");
    return on;
}

/* BFP8_HOPPER_EDGE_BOX=0 loads a last tile that the matrix ends inside with the whole box (rows past the matrix
 * zero-filled by TMA; HopperParams::p_last_rows), for side-by-side measurement. Read once. */
bool edge_box_enabled(void) {
    static const bool on = !env_is_zero("BFP8_HOPPER_EDGE_BOX");
    return on;
}

/* Rows of the box for the last of the `tile`-row tiles of a `rows`-row matrix: what is left of the matrix rounded
 * up to whole 8-row swizzle groups, or 0 where that is the whole tile (see HopperParams::p_last_rows). */
int last_box_rows(int64_t rows, int tile) {
    const int left = (int)(rows - (bfp8_ceil_div(rows, tile) - 1) * tile);
    const int box = (left + 7) / 8 * 8;
    return box < tile && edge_box_enabled() ? box : 0;
}

/* Rows of the smaller P box (HopperParams::p_last_rows): a plan's row slices, whose whole tiles never include the
 * last one, else the last tile's cut box. */
int p_box_rows(const Plan &pl, int64_t p_rows) { return pl.slice_rows ? pl.slice_rows : last_box_rows(p_rows, kBP); }

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* BFP8_HOPPER_EVICT_FIRST=0 loads a weight that streams through once without the L2 evict-first hint
 * (HopperParams::weight_evict_first), for side-by-side measurement. Read once. */
bool evict_first_enabled(void) {
    static const bool on = !env_is_zero("BFP8_HOPPER_EVICT_FIRST");
    return on;
}

/* BFP8_HOPPER_ENTRY_STAGES=N: issue up to N of the first unit's stages at entry (HopperParams::entry_stages; 0:
 * none; default kEntryStages), for side-by-side measurement. Read once. */
int entry_stages_setting(void) {
    static const int n = env_count("BFP8_HOPPER_ENTRY_STAGES", 0, 1024, kEntryStages);
    return n;
}

/* BFP8_HOPPER_EARLY_WEIGHTS=0 launches after the activation quantization has finished even inside bfp8_linear, for
 * side-by-side measurement. Read once. */
bool early_weights_enabled(void) {
    static const bool on = !env_is_zero("BFP8_HOPPER_EARLY_WEIGHTS");
    return on;
}

/* BFP8_HOPPER_TRACE=1 in a build made with HOPPER_TRACE=1: the kernel stamps its timeline (HopperParams::trace)
 * and each call prints a summary to stderr. The call synchronizes its stream: for diagnosis only. Read once. */
bool trace_enabled(void) {
    static const bool on = [] {
        const char *e = getenv("BFP8_HOPPER_TRACE");
        if (!(e && e[0] == '1')) return false;
        if (!kTraceBuild)
            fprintf(stderr, "[bfp8 hopper] BFP8_HOPPER_TRACE=1 ignored: rebuild with make HOPPER_TRACE=1\n");
        return kTraceBuild;
    }();
    return on;
}

int compare_u64(const void *a, const void *b) {
    const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return (x > y) - (x < y);
}

/* Median and maximum of the nonzero stamps in column `slot` of the [grid][kTraceSlots] trace, in us after t0;
 * false when no CTA wrote that slot. */
bool trace_column(const unsigned long long *tr, int grid, int slot, unsigned long long t0, double *med, double *max) {
    unsigned long long v[1024];
    int count = 0;
    for (int c = 0; c < grid && count < 1024; c++)
        if (tr[c * kTraceSlots + slot]) v[count++] = tr[c * kTraceSlots + slot] - t0;
    if (!count) return false;
    qsort(v, (size_t)count, sizeof v[0], compare_u64);
    *med = v[count / 2] * 1e-3, *max = v[count - 1] * 1e-3;
    return true;
}

/* Waits for the call, then prints where its time went: the stamps of TraceSlot (median / latest over the CTAs, us
 * after the first CTA started). */
bfp8_status trace_report(const unsigned long long *trace_d, int grid, int64_t m, int64_t n, int64_t k,
                         cudaStream_t stream) {
    const size_t bytes = (size_t)grid * kTraceSlots * sizeof(unsigned long long);
    unsigned long long *tr = (unsigned long long *)malloc(bytes);
    if (!tr) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "hopper: trace buffer");
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess) e = cudaMemcpy(tr, trace_d, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        free(tr);
        return bfp8_fail(BFP8_ERR_DEVICE, "hopper: trace download: %s", cudaGetErrorString(e));
    }
    unsigned long long t0 = ~0ull;
    for (int c = 0; c < grid; c++) t0 = tr[c * kTraceSlots] && tr[c * kTraceSlots] < t0 ? tr[c * kTraceSlots] : t0;
    fprintf(stderr, "[bfp8 hopper trace] M=%lld N=%lld K=%lld grid=%d (us after the first CTA start, median/latest):",
            (long long)m, (long long)n, (long long)k, grid);
    double med, max;
    static const char *const names[kTraceUnits0] = {
        "start",       "synced",          "prefetched",   "dep-waited",  "first-weight-issued", "first-issued",
        "first-stage", "u1-store-read",   "u1-sync1",     "u1-packed",   "u1-sync2",  "barriers-ready",
        "unit-decoded"};
    for (int slot = 0; slot < kTraceSlots; slot++) {
        if (!trace_column(tr, grid, slot, t0, &med, &max)) continue;
        if (slot < kTraceUnits0)
            fprintf(stderr, " %s %.2f/%.2f", names[slot], med, max);
        else
            fprintf(stderr, " unit%d-%s %.2f/%.2f", (slot - kTraceUnits0) / 2,
                    (slot - kTraceUnits0) % 2 ? "end" : "epi", med, max);
    }
    /* Per-CTA intervals, median over the CTAs (and units): a CTA's own start to its first stage; a unit's main loop
     * (from the previous unit's end to its epilogue's start; the first unit excluded: it includes the first load's
     * latency); a unit's epilogue. */
    double *intervals = (double *)malloc((size_t)grid * kTraceUnits * sizeof(double));
    auto interval_median = [&](int from, int to, int units) {
        int count = 0;
        for (int c = 0; intervals && c < grid; c++) {
            const unsigned long long *row = tr + (size_t)c * kTraceSlots;
            for (int u = 0; u < units; u++) {
                const unsigned long long a = row[from + 2 * u], b = row[to + 2 * u];
                if (a && b && b >= a) intervals[count++] = (double)(b - a) * 1e-3;
            }
        }
        if (!count) return -1.0;
        qsort(intervals, (size_t)count, sizeof(double), [](const void *x, const void *y) {
            const double a = *(const double *)x, b = *(const double *)y;
            return (a > b) - (a < b);
        });
        return intervals[count / 2];
    };
    fprintf(stderr, " | per CTA: start-to-first-stage %.2f, main loop %.2f, epilogue %.2f",
            interval_median(kTraceStart, kTraceFirstStage, 1),
            interval_median(kTraceUnits0 + 1, kTraceUnits0 + 2, kTraceUnits - 1),
            interval_median(kTraceUnits0, kTraceUnits0 + 1, kTraceUnits));
    /* The producer's steps before its first stage, from the CTA's start; the second unit's epilogue steps, from its
     * start (16-bit outputs on the normal path only). */
    fprintf(stderr, "; producer: prefetched %.2f barriers-ready %.2f unit-decoded %.2f dep-waited %.2f "
            "weight-issued %.2f stage-issued %.2f",
            interval_median(kTraceStart, kTracePrefetched, 1), interval_median(kTraceStart, kTraceBarriersReady, 1),
            interval_median(kTraceStart, kTraceUnitDecoded, 1), interval_median(kTraceStart, kTraceDepWaited, 1),
            interval_median(kTraceStart, kTraceFirstWeightIssued, 1),
            interval_median(kTraceStart, kTraceFirstIssued, 1));
    const int u1_epi = kTraceUnits0 + 2, u1_end = kTraceUnits0 + 3;
    fprintf(stderr, "; unit-1 epilogue: store-read %.2f sync1 %.2f packed %.2f sync2 %.2f done %.2f\n",
            interval_median(u1_epi, kTraceEpiStoreRead, 1), interval_median(u1_epi, kTraceEpiSync1, 1),
            interval_median(u1_epi, kTraceEpiPacked, 1), interval_median(u1_epi, kTraceEpiSync2, 1),
            interval_median(u1_epi, u1_end, 1));
    free(intervals);
    free(tr);
    return BFP8_OK;
}

/* BFP8_LOG containing "hopper": one stderr line per call with the plan (path, tile, splits, grid). Read once. */
bool log_plans(void) {
    static const bool on = [] {
        const char *e = getenv("BFP8_LOG");
        return e && strstr(e, "hopper") != nullptr;
    }();
    return on;
}

/* Why this kernel cannot run `args` (written to why), or true when it can: what the caps promise the dispatcher
 * (checked again for direct callers of the gemm hook) plus the run-time conditions. */
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

/* The Divisor of d (1 <= d < 2^31; 0 is taken as 1, for a count that no unit divides by). */
Divisor make_divisor(int d) {
    if (d < 1) d = 1;
    int log2_ceil = 0;
    while ((1ll << log2_ceil) < d) log2_ceil++;
    const int shift = 31 + log2_ceil;
    return {d, (uint32_t)(((1ull << shift) + (uint64_t)d - 1) / (uint64_t)d), shift};
}

/* The plan's unit grid in the kernel's parameters: counts and decode_unit's divisors (p_rows: rows of the P
 * operand). */
void set_unit_grid(HopperParams &hp, const Plan &pl, int kblocks, int64_t p_rows) {
    hp.p_rows = (int)p_rows;
    hp.p_last_rows = p_box_rows(pl, p_rows);
    hp.kblocks = kblocks;
    hp.p_tiles = pl.p_tiles;
    hp.q_tiles = pl.q_tiles;
    hp.splits = pl.splits;
    hp.kb_per_split = pl.kb_per_split;
    hp.whole_units = pl.whole_units;
    hp.slice_rows = pl.slice_rows;
    hp.units = pl.units;
    hp.pair_p = pl.pair_p;
    hp.pair_q = pl.pair_q;
    const int p_count = pl.p_tiles / pl.pair_p, q_count = pl.q_tiles / pl.pair_q;
    hp.tail_tiles = make_divisor(p_count * q_count - pl.whole_units);
    hp.group_units = make_divisor(kGroupP * q_count);
    hp.full_groups = p_count / kGroupP;
    hp.last_group_rows = make_divisor(p_count % kGroupP);
    if (pl.sk_tiles) {
        const int64_t blocks = (int64_t)pl.sk_tiles * kblocks; /* < 2^31: plan_tiling */
        hp.sk_ctas = pl.grid;
        hp.sk_tiles = pl.sk_tiles;
        hp.sk_share = (int)(blocks / pl.grid);
        hp.sk_extra = (int)(blocks % pl.grid);
        hp.sk_cta_div = make_divisor(pl.grid);
        hp.sk_kb_div = make_divisor(kblocks);
    }
}

/* How many clusters of each size fit on the device with the CSPLIT kernels (ClusterFit), queried once per process
 * (like the SM count, for the first device that runs hopper): the smaller count of the two kernels for each size
 * (both take a whole SM, so the counts depend on the device only). A failed query leaves its size at 0 (the reduce
 * kernel), and is not an error. BFP8_LOG=hopper prints the counts. */
template <int BQ, bool SWAP> int clusters_that_fit(int size, int sms) {
    int n = 0;
    const bool pending = cudaPeekAtLastError() != cudaSuccess; /* the caller's, left for it */
    cudaError_t e = allow_kernel_smem<BQ, SWAP, false, true>();
    if (e == cudaSuccess) {
        /* The query's grid must be a whole number of clusters (else cudaErrorInvalidClusterSize). */
        const int grid = sms >= size ? sms / size * size : size;
        const KernelLaunch query(grid, kThreads, kernel_smem<BQ, SWAP, false>(), nullptr, false, size);
        e = cudaOccupancyMaxActiveClusters(&n, hopper_gemm_kernel<BQ, SWAP, false, true>, &query.cfg);
    }
    if (e != cudaSuccess) {
        if (!pending) (void)cudaGetLastError(); /* this query's error: the reduce kernel, not a failure */
        n = 0;
    }
    return n;
}
const ClusterFit &device_cluster_fit(int sms) {
    static const ClusterFit fit = [sms] {
        ClusterFit f = kNoClusterFit;
        for (int size = 2; size <= kMaxSplitCluster; size++) {
            const int swapped = clusters_that_fit<8, true>(size, sms), normal = clusters_that_fit<64, false>(size, sms);
            f.clusters[size] = swapped < normal ? swapped : normal;
        }
        if (log_plans()) {
            fprintf(stderr, "[bfp8 hopper] clusters that fit at once (CTAs: clusters):");
            for (int size = 2; size <= kMaxSplitCluster; size++) fprintf(stderr, " %d: %d", size, f.clusters[size]);
            fprintf(stderr, "\n");
        }
        return f;
    }();
    return fit;
}

/* Runs a problem hopper_takes() accepted. */
bfp8_status hopper_run(const bfp8_gemm_args *args, int sms) {
    const int64_t m = args->m, n = args->n, k = args->k;
    if (m == 0 || n == 0) return BFP8_OK;
    const Plan pl = make_plan(m, n, k, sms, device_cluster_fit(sms), env_knobs());
    const int64_t kblocks = bfp8_ceil_div(k, kBK);
    const int64_t sa_ld = bfp8_round_up(m, 4);
    const uint8_t *p_mat = pl.swap ? args->b : args->a;
    const uint8_t *q_mat = pl.swap ? args->a : args->b;
    const int64_t p_rows = pl.swap ? n : m, q_rows = pl.swap ? m : n;
    ClusterTensorMaps maps;
    memset(&maps, 0, sizeof maps); /* the maps a plan does not use stay zero */
    BFP8_TRY(encode_map(&maps.p, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p_mat, p_rows, k, k, kBK, kBP, true, "P"));
    BFP8_TRY(encode_map(&maps.q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, q_mat, q_rows, k, k, kBK, (uint32_t)pl.bq, true,
                        "Q"));
    /* The last tile's rows, in whole 8-row swizzle groups: a smaller box when the matrix ends inside the tile. */
    const int p_last_rows = p_box_rows(pl, p_rows);
    const int q_last_rows = last_box_rows(q_rows, pl.bq);
    if (p_last_rows)
        BFP8_TRY(encode_map(&maps.p_last, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p_mat, p_rows, k, k, kBK,
                            (uint32_t)p_last_rows, true, pl.slice_rows ? "P (row slice)" : "P (last tile)"));
    if (q_last_rows)
        BFP8_TRY(encode_map(&maps.q_last, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, q_mat, q_rows, k, k, kBK,
                            (uint32_t)q_last_rows, true, "Q (last tile)"));
    BFP8_TRY(encode_map(&maps.sa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, args->a_scales.data, kblocks, sa_ld, sa_ld,
                        pl.swap ? (uint32_t)pl.bq : (uint32_t)kBP, 1, false, "activation scales"));

    HopperParams hp = {};
    hp.m = m;
    hp.n = n;
    hp.k = k;
    set_unit_grid(hp, pl, (int)kblocks, p_rows);
    hp.sb = (const float *)args->b_scales.data;
    hp.bias = args->bias;
    hp.bias_dtype = args->bias ? (int)args->bias_dtype : -1;
    hp.y = args->y;
    hp.y_dtype = (int)args->y_dtype;
    /* Not with stream-K: its flags' memset comes between the kernel that wrote the activations and this one, and the
     * consumers read the flags without a griddepcontrol.wait of their own: a plain launch orders them after it. */
    hp.dependent = args->act_from_prior_kernel && early_weights_enabled() && !pl.sk_tiles;
    hp.entry_stages = entry_stages_setting();
    hp.q_last_rows = q_last_rows; /* p_last_rows: set_unit_grid */
    hp.one_consumer = !pl.swap && m <= 64;
    hp.csplit = pl.csplit;
    hp.weight_evict_first = activation_tiles(pl) == 1 && evict_first_enabled();
    /* Clusters: the shared operand's map with a box of half its tile (each CTA multicasts one half). */
    if (pl.pair_p * pl.pair_q == 2) {
        const bool share_p = pl.pair_q == 2;
        BFP8_TRY(encode_map(&maps.half, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, share_p ? p_mat : q_mat,
                            share_p ? p_rows : q_rows, k, k, kBK, (uint32_t)(share_p ? kBP : pl.bq) / 2, true,
                            share_p ? "P (half tile)" : "Q (half tile)"));
    }
    hp.y_vec = (n % 8 == 0) && ((uintptr_t)args->y % 16 == 0);
    hp.y_tma = !pl.swap && pl.splits == 1 && hp.y_vec && args->y_dtype != BFP8_DTYPE_F32 && tma_store_enabled();
    if (hp.y_tma)
        BFP8_TRY(encode_map(&maps.y, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, args->y, m, n, n, 64, 64, true, "Y"));

    cudaStream_t stream = (cudaStream_t)args->stream;
    void *trace_d = nullptr;
    if (trace_enabled()) {
        const size_t bytes = (size_t)pl.grid * kTraceSlots * sizeof(unsigned long long);
        BFP8_TRY(bfp8_cuda_malloc_async(&trace_d, bytes, args->stream));
        if (cudaMemsetAsync(trace_d, 0, bytes, stream) != cudaSuccess) {
            bfp8_cuda_free_async(trace_d, args->stream);
            return bfp8_fail(BFP8_ERR_DEVICE, "hopper: trace buffer memset failed");
        }
        hp.trace = (unsigned long long *)trace_d;
    }
    /* The split-K partials, or stream-K's slots and flags (a stream-K plan has no K split). */
    void *ws = nullptr;
    auto workspace = [&](size_t bytes) {
        const bfp8_status st = bfp8_cuda_malloc_async(&ws, bytes, args->stream);
        if (st != BFP8_OK && trace_d) bfp8_cuda_free_async(trace_d, args->stream);
        return st;
    };
    if (pl.splits > 1 && !hp.csplit) {
        BFP8_TRY(workspace((size_t)pl.splits * (size_t)m * (size_t)n * sizeof(float)));
        hp.workspace = (float *)ws;
    } else if (pl.sk_tiles) {
        /* Stream-K: a partial slot per CTA and consumer warpgroup (64 x bq fp32), then their flags and the ticket
         * counter, zeroed here (the pool's memory holds anything; a flag left from another call would let a tail
         * read a stale slot). */
        const size_t slot_bytes = (size_t)pl.grid * 2 * stream_k_slot_floats(pl.bq) * sizeof(float);
        const size_t flag_bytes = ((size_t)pl.grid * 2 + 1) * sizeof(unsigned);
        BFP8_TRY(workspace(slot_bytes + flag_bytes));
        hp.sk_slots = (float *)ws;
        hp.sk_flags = (unsigned *)((char *)ws + slot_bytes);
        hp.sk_ticket = hp.sk_flags + (size_t)pl.grid * 2;
        if (cudaMemsetAsync(hp.sk_flags, 0, flag_bytes, stream) != cudaSuccess) {
            bfp8_cuda_free_async(ws, args->stream);
            if (trace_d) bfp8_cuda_free_async(trace_d, args->stream);
            return bfp8_fail(BFP8_ERR_DEVICE, "hopper: stream-K flags memset failed");
        }
    }
    int launched = 0;
    cudaError_t e = launch_planned(pl, maps, hp, stream, &launched);
    if (log_plans()) {
        char line[160];
        describe_plan(pl, line, sizeof line);
        fprintf(stderr, "[bfp8 hopper] M=%lld N=%lld K=%lld: %s (launched %d CTAs)\n", (long long)m, (long long)n,
                (long long)k, line, launched);
    }
    if (e == cudaSuccess && pl.splits > 1 && !hp.csplit) {
        /* The output columns of whole tiles are final already; the reduce covers the rest. */
        const int64_t n0 = whole_columns(pl), count = m * (n - n0);
        const int vec = (n % 4 == 0) && ((uintptr_t)args->y % 16 == 0);
        int64_t blocks = ((vec ? count / 4 : count) + 255) / 256;
        if (blocks > 8 * (int64_t)sms) blocks = 8 * (int64_t)sms;
        /* Programmatic dependent launch hides the reduce kernel's launch latency behind the GEMM's tail. */
        const KernelLaunch launch(blocks, 256, 0, stream, true, 1);
        e = cudaLaunchKernelEx(&launch.cfg, hopper_splitk_reduce, (const float *)ws, pl.splits, m, n, n0, hp.bias,
                               hp.bias_dtype, args->y, hp.y_dtype, vec);
    }
    if (trace_d) {
        bfp8_status st = e == cudaSuccess ? trace_report(hp.trace, launched, m, n, k, stream) : BFP8_OK;
        bfp8_status st2 = bfp8_cuda_free_async(trace_d, args->stream);
        if (e == cudaSuccess && (st != BFP8_OK || st2 != BFP8_OK)) return st != BFP8_OK ? st : st2;
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

/* Where `hopper` is measured faster than cuBLASLt (bench/RESULTS.md, latest same-run tables): every M <= 64 cell
 * (swapped at M <= 8 and where M <= 16 gives row slices, else the normal path with one consumer warpgroup at
 * M = 9..64); above M = 64, with K <= 7168, where
 * the normal path's 64-wide weight tiles fit one wave of the H200's 132 SMs (M=128 with N <= 7168, M=512 with
 * N=2112: few tiles, which cuBLASLt's fixed tiling leaves on idle SMs); M = 65..128 where the normal path splits only
 * its last wave's tiles (36864x7168 at M=128: 1.03x); M = 65..128 with K > 7168 (M=128 7168x16384 / 7168x18432:
 * 1.06x / 1.04x, v12); and M >= 512 but for M >= 4096 with K > 7168: since v16's division-free unit decode, two
 * clean runs had hopper faster at M=512 on every layer (1.01-1.06x with K >= 2048, 1.14-1.27x below) and at
 * M=4096 with K <= 7168 (1.01-1.19x). At M=4096 with K > 7168 (7168x16384, 7168x18432) the two are within 1%
 * either way (0.995-1.010x), so cuBLASLt, the vendor path, keeps them, as it keeps M=128 24576x1536 and 32768x512
 * (0.97-0.98x and 0.99-1.02x) in a plain GEMM call. Inside bfp8_linear (act_from_prior_kernel) hopper starts behind the
 * activation quantization and streams its weights before the activations exist, which cuBLASLt cannot: there the
 * same two M=128 layers took 23.9 / 16.7 us on hopper against 26.1 / 19.0 on cuBLASLt (v16's model step), so it
 * ranks first at every M <= 128 of a linear call. The rules extrapolate from the measured M (1, 16, 64, 128, 512,
 * 4096) to the M between, and the linear-call rule assumes the default launch (it does not look at the switches
 * that turn the early weights off). Elsewhere cuBLASLt (priority 30) ranks above hopper (25), which serves what it
 * declines. */
int hopper_priority(const bfp8_backend *self, const bfp8_problem *p) {
    (void)self;
    if (p->m <= 64) return 35;
    if (p->k <= 7168 && normal_tiles(p->m, p->n, 64) <= 132) return 35;
    if (p->m >= 512 && (p->m < 4096 || p->k <= 7168)) return 35;
    if (p->m <= 128) {
        if (p->k > 7168 || p->act_from_prior_kernel) return 35;
        const Plan pl = make_plan(p->m, p->n, p->k, 132, kNoClusterFit, kDefaultKnobs);
        if (!pl.swap && pl.whole_units > 0 && pl.splits > 1) return 35; /* the last-wave split, not stream-K */
    }
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

/* Tile t of the unit grid's numbering (decode_unit's, by plain division): groups of kGroupP P tiles (fewer in the
 * last), P tile fastest within a group. */
void tile_of(int t, int p_count, int q_count, int *pt, int *qt) {
    const int g = t / (kGroupP * q_count), r = t % (kGroupP * q_count);
    const int rows = p_count - g * kGroupP < kGroupP ? p_count - g * kGroupP : kGroupP;
    *pt = g * kGroupP + r % rows, *qt = r / rows;
}

/* check_units for one stream-K piece (HopperParams::sk_ctas): decode_unit against plain division; its (tile, K
 * block) cells counted in `covered`; and the protocol that makes every wait end: a piece that waits (a tail, which
 * gathers) is the last that its CTA runs, and the slots it adds are exactly those of the CTAs before it whose runs end
 * inside its tile, each a stored piece of that tile (`stored` counts, per CTA, the times its slot is read: each must
 * come to 1 where the CTA stores one). */
bool check_stream_k_piece(const Plan &pl, const HopperParams &hp, int unit, int p_count, int q_count,
                          unsigned char *covered, unsigned char *stored, char *why, size_t why_size) {
    const int kblocks = hp.kblocks, v = unit - pl.whole_units, c = v % pl.grid, j = v / pl.grid;
    const int64_t blocks = (int64_t)pl.sk_tiles * kblocks;
    const int64_t run0 = stream_k_run_start(c, blocks, pl.grid), run1 = stream_k_run_start(c + 1, blocks, pl.grid);
    const int64_t first_tile = run0 / kblocks, pieces = (run1 - 1) / kblocks - first_tile + 1;
    const Unit w = decode_unit<false, false, true>(hp, unit, 0);
    if (j >= pieces) {
        if (w.kb0 != w.kb1) {
            snprintf(why, why_size, "stream-K unit %d (CTA %d piece %d): K blocks [%d, %d) past the run", unit, c, j,
                     w.kb0, w.kb1);
            return false;
        }
        return true;
    }
    /* The run's tiles from the second on, then the first where the run starts inside it. */
    const bool starts_inside = run0 % kblocks != 0;
    const int64_t tile = first_tile + (starts_inside ? (j + 1) % pieces : j), tile0 = tile * kblocks;
    const int64_t first = run0 > tile0 ? run0 : tile0, end = run1 < tile0 + kblocks ? run1 : tile0 + kblocks;
    int pt, qt;
    tile_of(pl.whole_units + (int)tile, p_count, q_count, &pt, &qt);
    const bool store = end < tile0 + kblocks, gather = first > tile0 && end == tile0 + kblocks;
    if (w.pt != pt || w.qt != qt || w.kb0 != first - tile0 || w.kb1 != end - tile0 || w.partial ||
        w.sk_store != store || w.sk_gather != gather || w.sk_tile0 != tile0 || w.p0 != pt * kBP ||
        w.p_cut != (hp.p_last_rows && pt == pl.p_tiles - 1)) {
        snprintf(why, why_size, "stream-K unit %d (CTA %d piece %d): decoded P %d Q %d K blocks [%d, %d) store %d "
                 "gather %d tile at %d, want P %d Q %d [%lld, %lld) store %d gather %d tile at %lld", unit, c, j,
                 w.pt, w.qt, w.kb0, w.kb1, (int)w.sk_store, (int)w.sk_gather, w.sk_tile0, pt, qt,
                 (long long)(first - tile0), (long long)(end - tile0), (int)store, (int)gather, (long long)tile0);
        return false;
    }
    if (gather && j != pieces - 1) {
        snprintf(why, why_size, "stream-K CTA %d piece %d: a tail that waits, not the CTA's last piece", c, j);
        return false;
    }
    if (gather) {
        /* The kernel's loop: CTAs c - 1, c - 2, .. while their runs start inside the tile, and the one that starts
         * at or before it. Their pieces must cover the tile's blocks before this one, back to back. */
        int64_t next = first;
        for (int d = c - 1;; d--) {
            const int64_t start = d >= 0 ? stream_k_run_start(d, blocks, pl.grid) : -1;
            const int64_t stop = d >= 0 ? stream_k_run_start(d + 1, blocks, pl.grid) : -1;
            if (d < 0 || stop != next || stop <= tile0 || stop >= tile0 + kblocks) {
                snprintf(why, why_size, "stream-K tail of CTA %d: CTA %d's run ends at %lld, want %lld inside the tile",
                         c, d, (long long)stop, (long long)next);
                return false;
            }
            stored[d] = stored[d] < 2 ? stored[d] + 1 : 2;
            next = start;
            if (start <= tile0) break;
        }
    }
    for (int kb = w.kb0; kb < w.kb1; kb++) { /* counts saturate at 2: "more than once" */
        unsigned char *cell = &covered[((size_t)pt * pl.q_tiles + qt) * kblocks + kb];
        *cell = *cell < 2 ? *cell + 1 : 2;
    }
    return true;
}

/* Host check of a plan's unit grid: decode_unit (with the launch's divisors) against the same decode by plain
 * division, and every (tile, K block) covered by exactly one unit, the partial units exactly those whose columns
 * the split-K reduce sums; with row slices (the first units), every P row after the whole tiles in exactly one
 * slice with the whole K range, each slice inside one 128-row weight-scale block. */
bool check_units(const Plan &pl, int64_t m, int64_t n, int64_t k, char *why, size_t why_size) {
    HopperParams hp = {};
    const int64_t p_rows = pl.swap ? n : m;
    set_unit_grid(hp, pl, (int)bfp8_ceil_div(k, kBK), p_rows);
    const bool clusters = pl.pair_p * pl.pair_q == 2;
    const int p_count = pl.p_tiles / pl.pair_p, q_count = pl.q_tiles / pl.pair_q, kblocks = hp.kblocks;
    const int64_t whole_cols = whole_columns(pl);
    const size_t cells = (size_t)pl.p_tiles * pl.q_tiles * kblocks;
    unsigned char *covered = (unsigned char *)calloc(cells, 1);
    /* per P row: the slices that cover it */
    unsigned char *rows_sliced = pl.slice_rows ? (unsigned char *)calloc((size_t)p_rows, 1) : nullptr;
    /* per CTA of a stream-K plan: the tails that add its slot */
    unsigned char *stored = pl.sk_tiles ? (unsigned char *)calloc((size_t)pl.grid, 1) : nullptr;
    if (!covered || (pl.slice_rows && !rows_sliced) || (pl.sk_tiles && !stored)) {
        free(covered), free(rows_sliced), free(stored);
        snprintf(why, why_size, "out of host memory (%zu bytes)", cells + (size_t)p_rows + (size_t)pl.grid);
        return false;
    }
    bool ok = true;
    if (pl.sk_tiles && (pl.swap || clusters || pl.csplit || pl.splits != 1 || pl.slice_rows ||
                        pl.whole_units % pl.grid != 0 || pl.units != pl.whole_units + pl.grid * pl.sk_pieces ||
                        pl.whole_units + pl.sk_tiles != pl.p_tiles * pl.q_tiles)) {
        snprintf(why, why_size, "stream-K over %d tiles in a plan it does not apply to", pl.sk_tiles);
        ok = false;
    }
    if (pl.slice_rows &&
        (!pl.swap || pl.q_tiles != 1 || clusters || pl.csplit || pl.splits != 1 || kBP % pl.slice_rows != 0)) {
        snprintf(why, why_size, "row slices of %d in a plan they do not apply to", pl.slice_rows);
        ok = false;
    }
    const int slices = pl.slice_rows ? pl.units - pl.whole_units : 0; /* units [0, slices), then the whole tiles */
    for (int unit = 0; ok && unit < pl.units; unit++) {
        if (unit < slices) {
            const Unit w = decode_unit<false, true>(hp, unit, 0);
            const int64_t p0 = (int64_t)pl.whole_units * kBP + (int64_t)unit * pl.slice_rows;
            const int64_t p_end = p0 + pl.slice_rows < p_rows ? p0 + pl.slice_rows : p_rows;
            if (p0 >= p_rows || w.p0 != p0 || w.p_end != p_end || w.pt != p0 / kBP || w.qt != 0 || w.kb0 != 0 ||
                w.kb1 != kblocks || w.partial || !w.p_cut || p0 % kBP + pl.slice_rows > kBP) {
                snprintf(why, why_size, "unit %d: slice rows [%d, %d) P %d Q %d K blocks [%d, %d)%s, want rows [%lld, "
                         "%lld) of %lld inside one 128-row block", unit, w.p0, w.p_end, w.pt, w.qt, w.kb0, w.kb1,
                         w.p_cut ? "" : " (full box)", (long long)p0, (long long)p_end, (long long)p_rows);
                ok = false;
            }
            for (int64_t r = p0; ok && r < p_end; r++) rows_sliced[r] = rows_sliced[r] < 2 ? rows_sliced[r] + 1 : 2;
            continue;
        }
        if (pl.sk_tiles && unit >= pl.whole_units) {
            ok = check_stream_k_piece(pl, hp, unit, p_count, q_count, covered, stored, why, why_size);
            continue;
        }
        const int u = unit - slices; /* the whole tiles' (and K splits') numbering */
        for (int rank = 0; rank < (clusters ? 2 : 1); rank++) {
            const Unit w = clusters      ? decode_unit<true, false>(hp, unit, rank)
                           : pl.sk_tiles ? decode_unit<false, false, true>(hp, unit, rank)
                                         : decode_unit<false, true>(hp, unit, rank);
            /* The reference: plain division. */
            const bool whole = u < pl.whole_units;
            const int tail = p_count * q_count - pl.whole_units, v = u - pl.whole_units;
            const int split = whole ? 0 : v / tail, t = whole ? u : pl.whole_units + v % tail;
            int pt, qt;
            tile_of(t, p_count, q_count, &pt, &qt);
            pt = pt * pl.pair_p + (pl.pair_p == 2 ? rank : 0);
            qt = qt * pl.pair_q + (pl.pair_q == 2 ? rank : 0);
            const int kb0 = whole ? 0 : split * pl.kb_per_split;
            const int kb1 = whole || kb0 + pl.kb_per_split > kblocks ? kblocks : kb0 + pl.kb_per_split;
            if (w.pt != pt || w.qt != qt || w.split != split || w.kb0 != kb0 || w.kb1 != kb1 ||
                w.partial != (!whole && pl.splits > 1)) {
                snprintf(why, why_size, "unit %d rank %d: decoded P %d Q %d split %d K blocks [%d, %d), want P %d Q %d "
                         "split %d [%d, %d)", unit, rank, w.pt, w.qt, w.split, w.kb0, w.kb1, pt, qt, split, kb0, kb1);
                ok = false;
                break;
            }
            /* The cut box only for a last tile that the matrix ends inside; never for a whole tile beside slices
             * (their box is the slices'). */
            const bool want_cut = hp.p_last_rows && pt == pl.p_tiles - 1 && !pl.slice_rows;
            if (w.p0 != pt * kBP || w.p_end != p_rows || w.p_cut != want_cut) {
                snprintf(why, why_size, "unit %d: tile rows [%d, %d) with the %s box, want [%d, %lld) with the %s box",
                         unit, w.p0, w.p_end, w.p_cut ? "cut" : "full", pt * kBP, (long long)p_rows,
                         want_cut ? "cut" : "full");
                ok = false;
                break;
            }
            if (pt < 0 || pt >= pl.p_tiles || qt < 0 || qt >= pl.q_tiles || kb0 >= kb1) {
                snprintf(why, why_size, "unit %d: P %d Q %d K blocks [%d, %d) outside %d x %d tiles, %d K blocks", unit,
                         pt, qt, kb0, kb1, pl.p_tiles, pl.q_tiles, kblocks);
                ok = false;
                break;
            }
            const int64_t col0 = pl.swap ? (int64_t)pt * kBP : (int64_t)qt * pl.bq;
            if (w.partial != (col0 >= whole_cols && pl.splits > 1)) {
                snprintf(why, why_size, "unit %d: partial %d at column %lld, the reduce sums from column %lld", unit,
                         (int)w.partial, (long long)col0, (long long)whole_cols);
                ok = false;
                break;
            }
            for (int kb = kb0; kb < kb1; kb++) { /* counts saturate at 2: "more than once" */
                unsigned char *c = &covered[((size_t)pt * pl.q_tiles + qt) * kblocks + kb];
                *c = *c < 2 ? *c + 1 : 2;
            }
        }
    }
    /* The slices' rows, then their tiles' cells (one Q tile), as computed once. */
    for (int64_t r = (int64_t)pl.whole_units * kBP; ok && pl.slice_rows && r < p_rows; r++) {
        if (rows_sliced[r] != 1) {
            snprintf(why, why_size, "P row %lld in %s", (long long)r,
                     rows_sliced[r] ? "more than one slice" : "no slice");
            ok = false;
        }
    }
    for (size_t i = (size_t)pl.whole_units * kblocks; ok && pl.slice_rows && i < cells; i++)
        covered[i] = covered[i] ? 2 : 1;
    for (int c = 0; ok && pl.sk_tiles && c <= pl.grid; c++) {
        const int64_t start = stream_k_run_start(c, (int64_t)pl.sk_tiles * kblocks, pl.grid);
        if (stream_k_run(hp, c) != start) {
            snprintf(why, why_size, "stream-K run %d starts at %d in the kernel, want %lld", c, stream_k_run(hp, c),
                     (long long)start);
            ok = false;
        }
    }
    for (int c = 0; ok && pl.sk_tiles && c < pl.grid; c++) {
        const int64_t end = stream_k_run_start(c + 1, (int64_t)pl.sk_tiles * kblocks, pl.grid);
        const int want = end % kblocks != 0; /* its run ends inside a tile: that piece stores its slot */
        if (stored[c] != want) {
            snprintf(why, why_size, "stream-K CTA %d's slot is added by %d tails, want %d", c, stored[c], want);
            ok = false;
        }
    }
    for (size_t i = 0; ok && i < cells; i++) {
        if (covered[i] != 1) {
            snprintf(why, why_size, "P tile %zu Q tile %zu K block %zu computed %s", i / kblocks / pl.q_tiles,
                     i / kblocks % pl.q_tiles, i % kblocks, covered[i] ? "more than once" : "by no unit");
            ok = false;
        }
    }
    free(covered), free(rows_sliced), free(stored);
    return ok;
}

} // namespace

extern "C" const bfp8_backend *bfp8_hopper_backend(void) { return &kHopperBackend; }

/* cluster_fit[s] clusters of s CTAs running at once (s = 2..BFP8_HOPPER_MAX_SPLIT_CLUSTER); NULL: none. */
static ClusterFit fit_from(const int *cluster_fit) {
    static_assert(kMaxSplitCluster == BFP8_HOPPER_MAX_SPLIT_CLUSTER, "cuda_glue.h");
    ClusterFit fit = kNoClusterFit;
    for (int s = 2; cluster_fit && s <= kMaxSplitCluster; s++) fit.clusters[s] = cluster_fit[s];
    return fit;
}

extern "C" void bfp8_hopper_plan_describe(int64_t m, int64_t n, int64_t k, int sms, char *out, size_t size) {
    describe_plan(make_plan(m, n, k, sms, kNoClusterFit, env_knobs()), out, size);
}

extern "C" void bfp8_hopper_plan_describe_fit(int64_t m, int64_t n, int64_t k, int sms, const int *cluster_fit,
                                              char *out, size_t size) {
    describe_plan(make_plan(m, n, k, sms, fit_from(cluster_fit), env_knobs()), out, size);
}

extern "C" bfp8_status bfp8_hopper_device_cluster_fit(int *clusters) {
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
    const ClusterFit &fit = device_cluster_fit(info.num_sms);
    for (int s = 0; s <= kMaxSplitCluster; s++) clusters[s] = fit.clusters[s];
    return BFP8_OK;
}

extern "C" bool bfp8_hopper_check_units(int64_t m, int64_t n, int64_t k, int sms, bool clusters, bool stream_k_all,
                                        char *why, size_t why_size) {
    PlanKnobs knobs = env_knobs();
    if (clusters) knobs.cluster = kClusterAny;
    if (stream_k_all) knobs.stream_k = kFeatureAll;
    return check_units(make_plan(m, n, k, sms, kNoClusterFit, knobs), m, n, k, why, why_size);
}

extern "C" void bfp8_hopper_cluster_plan_describe(int64_t m, int64_t n, int64_t k, int sms, char *out, size_t size) {
    PlanKnobs knobs = kDefaultKnobs;
    knobs.cluster = kClusterAny;
    describe_plan(make_plan(m, n, k, sms, kNoClusterFit, knobs), out, size);
}
