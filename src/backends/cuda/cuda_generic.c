/* The `cuda_generic` backend: the GPU's always-works block-FP8 GEMM. It runs every problem on an sm_89+ device:
 * any M, N, K (K = 0 writes the bias), bf16/f16/f32 output, f32/bf16/f16 bias, fp32 or UE8M0 scales in every
 * layout. Two kernels serve it:
 *  - on sm_90a, every problem the wgmma kernel of hopper.cu takes (K % 16 == 0, 16-byte aligned operands,
 *    activation scales mn_major_aligned, weight scales row_major) runs there. Hopper has no FP8 mma.sync datapath
 *    (the compiler emulates it with f16 HMMAs), which caps the mma.sync kernel at ~240 TFLOP/s there, below the
 *    Triton kernel the engines fall back to (bench/RESULTS.md). Triton itself lowers to wgmma on Hopper;
 *  - everything else (sm_89, ragged K, other layouts) runs on the mma.sync kernel of gemm_generic.cu, with
 *    split-K partials in stream-ordered scratch.
 * Both compute the same function to the tolerances of DESIGN.md section 3; tests/test_cuda.c runs both. */
#include "cuda_glue.h"
#include "cuda_grouped.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* 0: auto (wgmma where it applies), 1: always mma.sync, -1: not read yet (BFP8_CUDA_GENERIC_KERNEL=mma_sync gives 1). */
static atomic_int forced_mma_sync = -1;

void bfp8_cuda_generic_force_mma_sync(bool on) { atomic_store(&forced_mma_sync, on ? 1 : 0); }

static bool use_mma_sync_only(void) {
    int v = atomic_load(&forced_mma_sync);
    if (v < 0) {
        const char *e = getenv("BFP8_CUDA_GENERIC_KERNEL");
        v = e && strcmp(e, "mma_sync") == 0;
        int unset = -1;
        atomic_compare_exchange_strong(&forced_mma_sync, &unset, v);
    }
    return v == 1;
}

static bfp8_status generic_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    (void)self;
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
    char why[BFP8_REASON_MAX];
    if (!use_mma_sync_only() && bfp8_hopper_kernel_takes(args, info.arch, why, sizeof why))
        return bfp8_hopper_kernel_run(args, info.num_sms);
    bfp8_cuda_gemm_desc d = {
        .m = args->m,
        .n = args->n,
        .k = args->k,
        .a = args->a,
        .b = args->b,
        .sa = bfp8_cuda_scale_view_of(&args->a_scales),
        .sb = bfp8_cuda_scale_view_of(&args->b_scales),
        .bias = args->bias,
        .bias_dtype = (int)args->bias_dtype,
        .y = args->y,
        .y_dtype = (int)args->y_dtype,
    };
    if (d.m == 0 || d.n == 0) return BFP8_OK;
    bfp8_cuda_gemm_plan plan;
    bfp8_cuda_generic_plan(&d, info.num_sms, &plan);
    void *ws = NULL;
    if (plan.workspace_bytes) BFP8_TRY(bfp8_cuda_malloc_async(&ws, plan.workspace_bytes, args->stream));
    int err = bfp8_cuda_generic_launch(&d, &plan, (float *)ws, args->stream);
    bfp8_status st = err ? bfp8_cuda_error(err, "cuda_generic: kernel launch") : BFP8_OK;
    if (ws) {
        bfp8_status fst = bfp8_cuda_free_async(ws, args->stream);
        if (st == BFP8_OK) st = fst;
    }
    return st;
}

#define ALL_FLOAT_DTYPES (BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16))
#define ALL_LAYOUTS                                                                                              \
    (BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR) | BFP8_BIT(BFP8_LAYOUT_MN_MAJOR) | BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED) | \
     BFP8_BIT(BFP8_LAYOUT_PACKED_UE8M0))

const bfp8_backend bfp8_backend_cuda_generic = {
    .name = "cuda_generic",
    .summary = "always works: any M/N/K, dtype and layout; the wgmma kernel on sm_90a where it applies, "
               "FP8 mma.sync (sm_89+) elsewhere",
    .caps =
        {
            .device = BFP8_DEVICE_CUDA,
            .min_arch = 89,
            .out_dtypes = ALL_FLOAT_DTYPES,
            .scale_formats = BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0),
            .a_layouts = ALL_LAYOUTS,
            .b_layouts = ALL_LAYOUTS,
            .bias_dtypes = ALL_FLOAT_DTYPES,
            /* The kernel keeps 32-bit offsets inside a 128-row tile: 128 * K < 2^32. */
            .max_k = (int64_t)1 << 24,
            /* The last resort on the GPU: below hopper and cublaslt, which it shares a kernel with or trails
             * (bench/RESULTS.md). */
            .priority = 20,
            .grouped_layouts = BFP8_BIT(BFP8_GROUPED_CONTIGUOUS) | BFP8_BIT(BFP8_GROUPED_MASKED),
            .max_groups = BFP8_CUDA_GROUPED_MAX_GROUPS,
        },
    .supports = NULL,
    .gemm = generic_gemm,
    .ctx = NULL,
    .grouped_gemm = bfp8_cuda_generic_grouped_gemm, /* cuda_generic_grouped.c */
};
