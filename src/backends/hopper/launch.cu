/* hopper's launcher: tensor maps, workspace, launch configurations, the split-K reduce after the GEMM, the device's
 * cluster occupancy and the trace report. The plan comes from plan.c, the kernels from kernel.cuh and
 * epilogue.cuh. */
#include <cuda.h> /* CUtensorMap and its enums only: the driver is reached through cudaGetDriverEntryPointByVersion */
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfp8.h"
#include "blockfp8_grouped.h"
#include "backends/hopper/epilogue.cuh"
#include "backends/hopper/hopper.h"
#include "backends/hopper/kernel.cuh"
extern "C" {
#include "backends/cuda/cuda_glue.h" /* device info, stream-ordered scratch, bfp8_fail */
}

namespace {

/* Stages of its first unit that a CTA issues at kernel entry (bfp8_hopper_params::entry_stages). Of 0, 2, 4 and all,
 * 4 did best on the cells that moved (the decode cells with K <= 2048, 2-3% faster than 0; M=16 2112x7168 1%
 * slower, 2-4% with all); over the 48 cells the four were within run-to-run noise. Inside bfp8_linear (weights only
 * at entry) 4, all and 0 gave the same DeepSeek-R1 step within 1%, so one cap serves both. */
constexpr int kEntryStages = 4;

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

/* Dynamic shared memory of a kernel: STREAMK kernels keep their ticket in room past the barriers, GROUPED ones their
 * unit slots. */
template <int BQ, bool SWAP, bool STREAMK = false, bool GROUPED = false, int PROWS = kBP> constexpr int kernel_smem() {
    return Config<BQ, SWAP, PROWS>::kSmemBytes + (STREAMK ? 8 * Config<BQ, SWAP, PROWS>::kStages : 0) +
           (GROUPED ? kUnitSlotBytes : 0);
}

/* Raises a kernel's dynamic shared-memory limit to what it uses, once (before its launch or an occupancy query). */
template <int BQ, bool SWAP, bool CSPLIT, bool STREAMK = false, bool GROUPED = false, int PROWS = kBP>
cudaError_t allow_kernel_smem() {
    static_assert(kernel_smem<BQ, SWAP, true>() <= kMaxSmem, "stream-K ticket");
    static_assert(kernel_smem<BQ, SWAP, false, true>() <= kMaxSmem, "grouped unit slots");
    static bool attr_set = false; /* idempotent: a race only sets it twice */
    if (attr_set) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(hopper_gemm_kernel<BQ, SWAP, CSPLIT, STREAMK, GROUPED, PROWS>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kernel_smem<BQ, SWAP, STREAMK, GROUPED, PROWS>());
    attr_set = e == cudaSuccess;
    return e;
}

/* Launches a persistent grid of `grid` CTAs. */
template <int BQ, bool SWAP, bool CSPLIT = false, bool STREAMK = false, bool GROUPED = false, int PROWS = kBP>
cudaError_t launch_kernel(const TensorMaps &maps, const HopperParams &hp, int grid, cudaStream_t stream) {
    auto kernel = hopper_gemm_kernel<BQ, SWAP, CSPLIT, STREAMK, GROUPED, PROWS>;
    const int smem = kernel_smem<BQ, SWAP, STREAMK, GROUPED, PROWS>();
    cudaError_t e = allow_kernel_smem<BQ, SWAP, CSPLIT, STREAMK, GROUPED, PROWS>();
    if (e != cudaSuccess) return e;
    if (!hp.dependent && !CSPLIT) {
        kernel<<<grid, kThreads, smem, stream>>>(maps, hp);
        return cudaGetLastError();
    }
    /* A programmatic dependent of the kernel before it (bfp8_hopper_params::dependent). CSPLIT: the whole plan in
     * clusters of hp.csplit (csplit_fits only picks it where all of them fit at once: in waves it would be correct,
     * clusters do not wait for each other, but slower than the reduce kernel). */
    const KernelLaunch launch(grid, kThreads, smem, stream, hp.dependent, CSPLIT ? hp.csplit : 1);
    return cudaLaunchKernelEx(&launch.cfg, kernel, maps, hp);
}

/* The kernel of the plan's tiling, with the plan's invariants that the kernel relies on checked again. */
cudaError_t launch_planned(const bfp8_hopper_plan &pl, const TensorMaps &maps, const HopperParams &hp,
                           cudaStream_t stream) {
    if (pl.csplit) {
        /* One unit per CTA and a kernel for the tiling (bfp8_hopper_params::csplit, csplit_fits). */
        const bool one_unit_each =
            pl.units == pl.csplit * pl.p_tiles * pl.q_tiles && pl.splits == pl.csplit && !pl.whole_units;
        if (!one_unit_each || (pl.swap ? pl.bq != 8 : pl.bq != 64 || pl.p_tiles != 1))
            return cudaErrorInvalidConfiguration;
        return pl.swap ? launch_kernel<8, true, true>(maps, hp, pl.units, stream)
                       : launch_kernel<64, false, true>(maps, hp, pl.units, stream);
    }
    if (pl.sk_tiles) {
        /* The grid is the runs, one CTA per SM (bfp8_hopper_params::sk_ctas); the whole tiles are a number of its
         * waves, walked by block index, and every CTA walks as many pieces (BFP8_SK_U renumbers them by ticket). */
        if (pl.swap || pl.grid != hp.sk_ctas || pl.whole_units % pl.grid ||
            pl.units != pl.whole_units + pl.grid * pl.sk_pieces || (pl.bq != 64 && pl.bq != 128))
            return cudaErrorInvalidConfiguration;
        return pl.bq == 64 ? launch_kernel<64, false, false, true>(maps, hp, pl.grid, stream)
                           : launch_kernel<128, false, false, true>(maps, hp, pl.grid, stream);
    }
    if (pl.stages64) {
        if (pl.swap || pl.tile_rows != 64 || pl.bq > 64) return cudaErrorInvalidConfiguration;
        return pl.bq == 32 ? launch_kernel<32, false, false, false, false, 64>(maps, hp, pl.grid, stream)
                           : launch_kernel<64, false, false, false, false, 64>(maps, hp, pl.grid, stream);
    }
    if (!pl.swap) {
        switch (pl.bq) {
        case 32: return launch_kernel<32, false>(maps, hp, pl.grid, stream);
        case 64: return launch_kernel<64, false>(maps, hp, pl.grid, stream);
        default: return launch_kernel<128, false>(maps, hp, pl.grid, stream);
        }
    }
    switch (pl.bq) {
    case 8: return launch_kernel<8, true>(maps, hp, pl.grid, stream);
    case 16: return launch_kernel<16, true>(maps, hp, pl.grid, stream);
    case 32: return launch_kernel<32, true>(maps, hp, pl.grid, stream);
    case 64: return launch_kernel<64, true>(maps, hp, pl.grid, stream);
    default: return launch_kernel<128, true>(maps, hp, pl.grid, stream);
    }
}

/* Whether the kernel stamps its timeline (bfp8_hopper_knobs::trace), which only a trace build can do. Read once. */
bool trace_enabled(void) {
    static const bool on = [] {
        if (!bfp8_hopper_knobs_env()->trace) return false;
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


/* How many clusters of each size fit on the device with the CSPLIT kernels (bfp8_hopper_cluster_fit), queried once
 * per process (like the SM count, for the first device that runs hopper): the smaller count of the two kernels for
 * each size (both take a whole SM, so the counts depend on the device only). A failed query leaves its size at 0
 * (the reduce kernel), and is not an error. BFP8_LOG=hopper prints the counts. */
template <int BQ, bool SWAP> int clusters_that_fit(int size, int sms) {
    int n = 0;
    const bool pending = cudaPeekAtLastError() != cudaSuccess; /* the caller's, left for it */
    cudaError_t e = allow_kernel_smem<BQ, SWAP, true>();
    if (e == cudaSuccess) {
        /* The query's grid must be a whole number of clusters (else cudaErrorInvalidClusterSize). */
        const int grid = sms >= size ? sms / size * size : size;
        const KernelLaunch query(grid, kThreads, kernel_smem<BQ, SWAP>(), nullptr, false, size);
        e = cudaOccupancyMaxActiveClusters(&n, hopper_gemm_kernel<BQ, SWAP, true>, &query.cfg);
    }
    if (e != cudaSuccess) {
        if (!pending) (void)cudaGetLastError(); /* this query's error: the reduce kernel, not a failure */
        n = 0;
    }
    return n;
}
const bfp8_hopper_cluster_fit &device_cluster_fit(int sms) {
    static const bfp8_hopper_cluster_fit fit = [sms] {
        bfp8_hopper_cluster_fit f = {};
        for (int size = 2; size <= BFP8_HOPPER_MAX_SPLIT_CLUSTER; size++) {
            const int swapped = clusters_that_fit<8, true>(size, sms), normal = clusters_that_fit<64, false>(size, sms);
            f.clusters[size] = swapped < normal ? swapped : normal;
        }
        if (bfp8_hopper_knobs_env()->log_plans) {
            fprintf(stderr, "[bfp8 hopper] clusters that fit at once (CTAs: clusters):");
            for (int size = 2; size <= BFP8_HOPPER_MAX_SPLIT_CLUSTER; size++)
                fprintf(stderr, " %d: %d", size, f.clusters[size]);
            fprintf(stderr, "\n");
        }
        return f;
    }();
    return fit;
}

} // namespace

extern "C" bfp8_status bfp8_hopper_run(const bfp8_gemm_args *args, int sms) {
    const int64_t m = args->m, n = args->n, k = args->k;
    if (m == 0 || n == 0) return BFP8_OK;
    const bfp8_hopper_knobs *knobs = bfp8_hopper_knobs_env();
    const bfp8_hopper_plan pl = bfp8_hopper_plan_make(m, n, k, sms, &device_cluster_fit(sms), knobs);
    const int64_t kblocks = bfp8_ceil_div(k, kBK);
    const int64_t sa_ld = bfp8_round_up(m, 4);
    const uint8_t *p_mat = pl.swap ? args->b : args->a;
    const uint8_t *q_mat = pl.swap ? args->a : args->b;
    const int64_t p_rows = pl.swap ? n : m, q_rows = pl.swap ? m : n;
    TensorMaps maps;
    memset(&maps, 0, sizeof maps); /* the maps a plan does not use stay zero */
    BFP8_TRY(encode_map(&maps.p, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p_mat, p_rows, k, k, kBK, (uint32_t)pl.tile_rows,
                        true, "P"));
    BFP8_TRY(encode_map(&maps.q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, q_mat, q_rows, k, k, kBK, (uint32_t)pl.bq, true,
                        "Q"));
    /* The last tile's rows, in whole 8-row swizzle groups: a smaller box when the matrix ends inside the tile. */
    const int p_last_rows = bfp8_hopper_plan_p_box_rows(&pl, p_rows);
    const int q_last_rows = bfp8_hopper_last_box_rows(q_rows, pl.bq);
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
    bfp8_hopper_params_set_units(&hp, &pl, (int)kblocks, p_rows);
    hp.sb = (const float *)args->b_scales.data;
    hp.bias = args->bias;
    hp.bias_dtype = args->bias ? (int)args->bias_dtype : -1;
    hp.y = args->y;
    hp.y_dtype = (int)args->y_dtype;
    /* Not with stream-K: its flags' memset comes between the kernel that wrote the activations and this one, and the
     * consumers read the flags without a griddepcontrol.wait of their own: a plain launch orders them after it. The
     * programmatic launch is worth 3.5-4% of a DeepSeek-R1 decode step. */
    hp.dependent = args->act_from_prior_kernel && !pl.sk_tiles;
    hp.entry_stages = kEntryStages;
    hp.q_last_rows = q_last_rows; /* p_last_rows: bfp8_hopper_params_set_units */
    hp.one_consumer = !pl.swap && pl.tile_rows < kBP;
    hp.csplit = pl.csplit;
    hp.weight_evict_first = bfp8_hopper_plan_activation_tiles(&pl) == 1;
    hp.y_vec = (n % 8 == 0) && ((uintptr_t)args->y % 16 == 0);
    /* (The TMA store writes 64-column boxes.) */
    hp.y_tma = !pl.swap && pl.bq >= 64 && pl.splits == 1 && hp.y_vec && args->y_dtype != BFP8_DTYPE_F32;
    if (hp.y_tma)
        BFP8_TRY(encode_map(&maps.y, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, args->y, m, n, n, 64, 64, true, "Y"));

    cudaStream_t stream = (cudaStream_t)args->stream;
    void *trace_d = nullptr;
    if (trace_enabled()) {
        const size_t bytes = (size_t)pl.grid * kTraceSlots * sizeof(unsigned long long);
        BFP8_TRY(bfp8_cuda_malloc_async(bytes, &trace_d, args->stream));
        if (cudaMemsetAsync(trace_d, 0, bytes, stream) != cudaSuccess) {
            bfp8_cuda_free_async(trace_d, args->stream);
            return bfp8_fail(BFP8_ERR_DEVICE, "hopper: trace buffer memset failed");
        }
        hp.trace = (unsigned long long *)trace_d;
    }
    /* The split-K partials, or stream-K's slots and flags (a stream-K plan has no K split). */
    void *ws = nullptr;
    auto workspace = [&](size_t bytes) {
        const bfp8_status st = bfp8_cuda_malloc_async(bytes, &ws, args->stream);
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
        const size_t slot_bytes = (size_t)pl.grid * 2 * BFP8_HOPPER_SK_SLOT_FLOATS(pl.bq) * sizeof(float);
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
    cudaError_t e = launch_planned(pl, maps, hp, stream);
    if (knobs->log_plans) {
        char line[160];
        bfp8_hopper_plan_describe(&pl, line, sizeof line);
        fprintf(stderr, "[bfp8 hopper] M=%lld N=%lld K=%lld: %s (launched %d CTAs)\n", (long long)m, (long long)n,
                (long long)k, line, pl.grid);
    }
    if (e == cudaSuccess && pl.splits > 1 && !hp.csplit) {
        /* The output columns of whole tiles are final already; the reduce covers the rest. */
        const int64_t n0 = bfp8_hopper_plan_whole_columns(&pl), count = m * (n - n0);
        const int vec = (n % 4 == 0) && ((uintptr_t)args->y % 16 == 0);
        int64_t blocks = ((vec ? count / 4 : count) + 255) / 256;
        if (blocks > 8 * (int64_t)sms) blocks = 8 * (int64_t)sms;
        /* Programmatic dependent launch hides the reduce kernel's launch latency behind the GEMM's tail. */
        const KernelLaunch launch(blocks, 256, 0, stream, true, 1);
        e = cudaLaunchKernelEx(&launch.cfg, hopper_splitk_reduce, (const float *)ws, pl.splits, m, n, n0, hp.bias,
                               hp.bias_dtype, args->y, hp.y_dtype, vec);
    }
    if (trace_d) {
        bfp8_status st = e == cudaSuccess ? trace_report(hp.trace, pl.grid, m, n, k, stream) : BFP8_OK;
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

extern "C" bfp8_status bfp8_hopper_run_grouped(const bfp8_grouped_gemm_args *args, int sms) {
    const bool masked = args->layout == BFP8_GROUPED_MASKED;
    const int64_t groups = args->groups, m = args->m, n = args->n, k = args->k;
    const int64_t p_rows = masked ? groups * m : m; /* A and y as one matrix (bfp8_hopper_params::grouped) */
    if (p_rows == 0 || n == 0) return BFP8_OK;
    const bfp8_hopper_knobs *knobs = bfp8_hopper_knobs_env();
    const bfp8_hopper_plan pl = bfp8_hopper_plan_grouped(masked ? BFP8_HOPPER_MASKED : BFP8_HOPPER_CONTIGUOUS, groups,
                                                         m, n, k, args->expected_m, sms, knobs);
    HopperParams hp = {};
    bfp8_hopper_params_set_grouped(&hp, &pl, m, n, k);
    const int64_t kblocks = bfp8_ceil_div(k, kBK), sa_ld = bfp8_round_up(m, 4);
    TensorMaps maps;
    memset(&maps, 0, sizeof maps);
    BFP8_TRY(encode_map(&maps.p, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, args->a, p_rows, k, k, kBK, kBP, true, "A"));
    if (hp.p_last_rows)
        BFP8_TRY(encode_map(&maps.p_last, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, args->a, p_rows, k, k, kBK,
                            (uint32_t)hp.p_last_rows, true, masked ? "A (64-row tiles)" : "A (last tile)"));
    BFP8_TRY(encode_map(&maps.q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, args->b, groups * n, k, k, kBK, (uint32_t)pl.bq,
                        true, "B"));
    /* Masked: the groups' [kblocks][sa_ld] matrices back to back, as one of groups x kblocks rows. */
    BFP8_TRY(encode_map(&maps.sa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, args->a_scales.data,
                        masked ? groups * kblocks : kblocks, sa_ld, sa_ld, kBP, 1, false, "activation scales"));
    hp.sb = (const float *)args->b_scales.data;
    hp.bias = args->bias;
    hp.bias_dtype = args->bias ? (int)args->bias_dtype : -1;
    hp.y = args->y;
    hp.y_dtype = (int)args->y_dtype;
    hp.m_indices = args->m_indices;
    hp.masked_m = args->masked_m;
    /* No loads at entry and no programmatic launch: the first unit's rows are known only after reading m_indices or
     * masked_m. Halves of tiles whose rows are all the pass's are stored whole through TMA (16-bit output), the
     * others row by row. */
    hp.dependent = 0;
    hp.entry_stages = 0;
    hp.one_consumer = masked ? pl.tile_rows < kBP : m <= 64;
    hp.weight_evict_first = masked ? pl.tile_rows < kBP : bfp8_ceil_div(m, groups) <= kBP;
    hp.y_vec = (n % 8 == 0) && ((uintptr_t)args->y % 16 == 0);
    hp.y_tma = hp.y_vec && args->y_dtype != BFP8_DTYPE_F32;
    if (hp.y_tma)
        BFP8_TRY(encode_map(&maps.y, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, args->y, p_rows, n, n, 64, 64, true, "Y"));
    cudaStream_t stream = (cudaStream_t)args->stream;
    const cudaError_t e = pl.bq == 64 ? launch_kernel<64, false, false, false, true>(maps, hp, pl.grid, stream)
                                      : launch_kernel<128, false, false, false, true>(maps, hp, pl.grid, stream);
    if (knobs->log_plans) {
        char line[160];
        bfp8_hopper_plan_describe(&pl, line, sizeof line);
        fprintf(stderr, "[bfp8 hopper] grouped M=%lld N=%lld K=%lld: %s\n", (long long)m, (long long)n,
                (long long)k, line);
    }
    if (e != cudaSuccess)
        return bfp8_fail(BFP8_ERR_DEVICE, "hopper: grouped launch (%s G=%lld m=%lld N=%lld K=%lld, BQ=%d) failed: %s",
                         masked ? "masked" : "contiguous", (long long)groups, (long long)m, (long long)n,
                         (long long)k, pl.bq, cudaGetErrorString(e));
    return BFP8_OK;
}

extern "C" bfp8_status bfp8_hopper_device_cluster_fit(bfp8_hopper_cluster_fit *out) {
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
    *out = device_cluster_fit(info.num_sms);
    return BFP8_OK;
}
