/* The `hopper` backend: its caps, its priority, and the gemm hook that checks the run-time conditions and hands
 * the problem to the launcher (launch.cu). */
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
            /* auto ranks it by the measured table where a cell covers the problem (docs/dispatch.md, "The measured
             * ranking"), elsewhere by this: above cuBLASLt's 30, as hopper was the faster of the two in every cell
             * that seeded the table (bench/data/rank-h200.csv), from 0.7% (M=4096 7168x16384) to 2.5x (decode). */
            .priority = 35,
        },
    .supports = NULL, /* the caps say everything */
    .gemm = hopper_gemm,
    .ctx = NULL,
    .priority_for = NULL,
};

const bfp8_backend *bfp8_hopper_backend(void) { return &kHopperBackend; }
