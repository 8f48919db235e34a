/* The `hopper` backend: its caps, its priority, and the gemm and grouped-gemm hooks that check the run-time
 * conditions and hand the problem to the launcher (launch.cu). */
#include "backends/hopper/hopper.h"

#include <stdio.h>

#include "blockfp8_grouped.h"

#include "backends/cuda/cuda_glue.h"
#include "internal.h"

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Why the kernel cannot take these operands (written to why), or true when it can: what the caps promise the
 * dispatcher (checked again for callers of the hooks themselves) plus the run-time conditions. The dense and the
 * grouped GEMM share them. */
static bool hopper_takes(bfp8_device device, int arch, int64_t k, const uint8_t *a, const bfp8_scales *sa,
                         const uint8_t *b, const bfp8_scales *sb, char *why, size_t why_size) {
    if (device != BFP8_DEVICE_CUDA) {
        snprintf(why, why_size, "data must be on the CUDA device");
    } else if (arch != 90) {
        snprintf(why, why_size, "needs sm_90 (this device is sm_%d)", arch);
    } else if (k < 16 || k % 16 != 0) {
        snprintf(why, why_size, "K=%lld is not a multiple of 16", (long long)k);
    } else if (sa->layout != BFP8_LAYOUT_MN_MAJOR_ALIGNED || sb->layout != BFP8_LAYOUT_ROW_MAJOR) {
        snprintf(why, why_size, "needs activation scales mn_major_aligned and weight scales row_major (got %s, %s)",
                 bfp8_scale_layout_name(sa->layout), bfp8_scale_layout_name(sb->layout));
    } else if (!aligned16(a) || !aligned16(b) || !aligned16(sa->data)) {
        snprintf(why, why_size, "A, B and the activation scales must be 16-byte aligned (TMA): %p %p %p",
                 (const void *)a, (const void *)b, sa->data);
    } else {
        return true;
    }
    return false;
}

/* TMA coordinates and the kernel's unit numbers are int32: the grouped kernel sees A (and y) as one matrix of
 * groups x max_m rows when masked, the activation scales as one of groups x ceil(K/128) rows, B as one of groups x N
 * rows, and numbers its units up to groups x row tiles x weight tiles (at most 64-row by 64-wide tiles). */
static bool grouped_fits(const bfp8_problem *p, char *why, size_t why_size) {
    const bool masked = p->grouped == BFP8_GROUPED_MASKED;
    int64_t a_rows = p->m, sa_rows = 0, b_rows, units;
    const bool ok = (!masked || (bfp8_mul_ok(p->groups, p->m, &a_rows) &&
                                 bfp8_mul_ok(p->groups, bfp8_ceil_div(p->k, 128), &sa_rows))) &&
                    a_rows <= INT32_MAX && sa_rows <= INT32_MAX && bfp8_mul_ok(p->groups, p->n, &b_rows) &&
                    b_rows <= INT32_MAX &&
                    bfp8_mul_ok(bfp8_ceil_div(a_rows, 64), bfp8_ceil_div(p->n, 64), &units) && units <= INT32_MAX;
    if (!ok)
        snprintf(why, why_size, "grouped operands beyond 2^31-1 rows or units (TMA coordinates): G=%lld m=%lld N=%lld",
                 (long long)p->groups, (long long)p->m, (long long)p->n);
    return ok;
}

static bool hopper_supports(const bfp8_backend *self, const bfp8_problem *p, char *reason, size_t reason_size) {
    (void)self;
    return p->grouped == BFP8_GROUPED_NONE || grouped_fits(p, reason, reason_size);
}

static bfp8_status hopper_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    (void)self;
    if (args->m == 0 || args->n == 0) return BFP8_OK;
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
    char why[BFP8_REASON_MAX];
    if (!hopper_takes(args->device, info.arch, args->k, args->a, &args->a_scales, args->b, &args->b_scales, why,
                      sizeof why))
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "hopper: %s", why);
    if (args->m > INT32_MAX || args->n > INT32_MAX || args->k > INT32_MAX)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "hopper: dimensions beyond 2^31-1 (TMA coordinates)");
    return bfp8_hopper_run(args, info.num_sms);
}

static bfp8_status hopper_grouped_gemm(const bfp8_backend *self, const bfp8_grouped_gemm_args *args) {
    (void)self;
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
    char why[BFP8_REASON_MAX];
    bfp8_problem p;
    BFP8_TRY(bfp8_problem_from_grouped_gemm(args, &p));
    if (!hopper_takes(args->device, info.arch, args->k, args->a, &args->a_scales, args->b, &args->b_scales, why,
                      sizeof why) ||
        !grouped_fits(&p, why, sizeof why))
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "hopper: %s", why);
    return bfp8_hopper_run_grouped(args, info.num_sms);
}

static const bfp8_backend kHopperBackend = {
    .name = "hopper",
    .summary = "sm_90a TMA + FP8 wgmma, warp-specialized persistent kernel; swap-AB and split-K for decode; "
               "grouped (MoE) GEMM",
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
            /* DeepGEMM's two layouts, any number of groups (grouped_fits bounds the products). */
            .grouped_layouts = BFP8_BIT(BFP8_GROUPED_CONTIGUOUS) | BFP8_BIT(BFP8_GROUPED_MASKED),
            .max_groups = 0,
        },
    .supports = hopper_supports, /* grouped problems' sizes: what the caps cannot say */
    .gemm = hopper_gemm,
    .ctx = NULL,
    .priority_for = NULL,
    .grouped_gemm = hopper_grouped_gemm,
};

const bfp8_backend *bfp8_hopper_backend(void) { return &kHopperBackend; }
