/* The `hopper` backend: its caps, its priority against cuBLASLt, and the gemm hook that checks the run-time
 * conditions and hands the problem to the launcher (launch.cu). */
#include "backends/hopper/hopper.h"

#include <stdio.h>

#include "backends/cuda/cuda_glue.h"
#include "internal.h"

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Why the kernel cannot run `args` (written to why), or true when it can: what the caps promise the dispatcher
 * (checked again for callers of the gemm hook itself) plus the run-time conditions. */
static bool hopper_takes(const bfp8_gemm_args *args, int arch, char *why, size_t why_size) {
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

static bfp8_status hopper_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    (void)self;
    if (args->m == 0 || args->n == 0) return BFP8_OK;
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
    char why[BFP8_REASON_MAX];
    if (!hopper_takes(args, info.arch, why, sizeof why)) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "hopper: %s", why);
    return bfp8_hopper_run(args, info.num_sms);
}

/* Where `hopper` is measured faster than cuBLASLt in same-run tables on the H200: every M <= 64 cell (swapped at
 * M <= 8 and where M <= 16 gives row slices, else the normal path with one consumer warpgroup at M = 9..64); above
 * M = 64, with K <= 7168, where the normal path's 64-wide weight tiles fit one wave of the H200's 132 SMs (M=128 with
 * N <= 7168, M=512 with N=2112: few tiles, which cuBLASLt's fixed tiling leaves on idle SMs); M = 65..128 where the
 * normal path splits only its last wave's tiles (36864x7168 at M=128: 1.03x); M = 65..128 with K > 7168 (M=128
 * 7168x16384 / 7168x18432: 1.06x / 1.04x); and M >= 512 but for M >= 4096 with K > 7168: hopper was faster at M=512
 * on every layer (1.01-1.06x with K >= 2048, 1.14-1.27x below) and at M=4096 with K <= 7168 (1.01-1.19x). At M=4096
 * with K > 7168 (7168x16384, 7168x18432) the two are within 1% either way (0.995-1.010x), so cuBLASLt, the vendor
 * path, keeps them, as it keeps M=128 24576x1536 and 32768x512 (0.97-0.98x and 0.99-1.02x) in a plain GEMM call.
 * Inside bfp8_linear (act_from_prior_kernel) hopper starts behind the activation quantization and streams its
 * weights before the activations exist, which cuBLASLt cannot: there the same two M=128 layers took 23.9 / 16.7 us
 * on hopper against 26.1 / 19.0 on cuBLASLt, so it ranks first at every M <= 128 of a linear call. The rules
 * extrapolate from the measured M (1, 16, 64, 128, 512, 4096) to the M between. Elsewhere cuBLASLt (priority 30)
 * ranks above hopper (25), which serves what it declines. The plans are the default ones, whatever the environment
 * forces (bfp8_hopper_knobs). */
static int hopper_priority(const bfp8_backend *self, const bfp8_problem *p) {
    (void)self;
    if (p->m <= 64) return 35;
    if (p->k <= 7168 && bfp8_hopper_normal_tiles(p->m, p->n, 64) <= 132) return 35;
    if (p->m >= 512 && (p->m < 4096 || p->k <= 7168)) return 35;
    if (p->m <= 128) {
        if (p->k > 7168 || p->act_from_prior_kernel) return 35;
        const bfp8_hopper_plan pl = bfp8_hopper_plan_make(p->m, p->n, p->k, 132, NULL, NULL);
        if (!pl.swap && pl.whole_units > 0 && pl.splits > 1) return 35; /* the last-wave split, not stream-K */
    }
    return 25;
}

static const bfp8_backend kHopperBackend = {
    .name = "hopper",
    .summary = "sm_90a TMA + FP8 wgmma, warp-specialized persistent kernel; swap-AB and split-K for decode",
    .caps =
        {
            .device = BFP8_DEVICE_CUDA,
            /* sm_90a SASS only: the arch-specific wgmma/setmaxnreg code runs on sm_90 and nowhere else. */
            .min_arch = 90,
            .max_arch = 90,
            .out_dtypes = BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16) | BFP8_BIT(BFP8_DTYPE_F32),
            .scale_formats = BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0),
            .a_layouts = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED),
            .b_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR),
            .bias_dtypes = BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16),
            .min_k = 16,
            .m_multiple = 1, /* any M (TMA zero-fills the rows beyond M) */
            .pads_m = false,
            .n_multiple = 1,  /* any N (zero-filled rows, bounds-checked stores) */
            .k_multiple = 16, /* TMA row strides are multiples of 16 bytes */
            .max_m = INT32_MAX, /* TMA coordinates are int32 */
            .max_n = INT32_MAX,
            .max_k = INT32_MAX,
            .priority = 25, /* see hopper_priority */
        },
    .supports = NULL, /* the caps say everything */
    .gemm = hopper_gemm,
    .ctx = NULL,
    .priority_for = hopper_priority,
};

const bfp8_backend *bfp8_hopper_backend(void) { return &kHopperBackend; }
