/* The `cuda_generic` backend: the GPU's portable block-FP8 GEMM, the fallback for every problem a faster backend
 * declines. It runs every problem on an sm_89+ device: any M, N, K (K = 0 writes the bias), bf16/f16/f32 output,
 * f32/bf16/f16 bias, fp32 or UE8M0 scales in every layout, on its own kernel (gemm_generic.cu: FP8 mma.sync, split-K
 * partials in stream-ordered scratch). It never runs another backend's kernel: the dispatcher picks hopper or
 * cublaslt where they are faster, and a fallback to this one shows what that costs. */
#include "cuda_glue.h"
#include "cuda_grouped.h"

#include <stdlib.h>
#include <string.h>

static bfp8_status generic_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    (void)self;
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
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
    if (plan.workspace_bytes) BFP8_TRY(bfp8_cuda_malloc_async(plan.workspace_bytes, &ws, args->stream));
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
    .summary = "always works: any M/N/K, dtype and layout; its own FP8 mma.sync kernel (sm_89+)",
    .caps =
        {
            .device = BFP8_DEVICE_CUDA,
            /* sm_89 and sm_90a SASS, and compute_89 PTX that newer devices JIT (Makefile): no upper limit. */
            .min_arch = 89,
            .max_arch = 0,
            .out_dtypes = ALL_FLOAT_DTYPES,
            .scale_formats = BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0),
            .a_layouts = ALL_LAYOUTS,
            .b_layouts = ALL_LAYOUTS,
            .bias_dtypes = ALL_FLOAT_DTYPES,
            /* The kernel keeps 32-bit offsets inside a 128-row tile: 128 * K < 2^32. */
            .max_k = (int64_t)1 << 24,
            /* The last resort on the GPU: below hopper and cublaslt, which are faster where they run. */
            .priority = 20,
            .grouped_layouts = BFP8_BIT(BFP8_GROUPED_CONTIGUOUS) | BFP8_BIT(BFP8_GROUPED_MASKED),
            .max_groups = BFP8_CUDA_GROUPED_MAX_GROUPS,
        },
    .supports = NULL,
    .gemm = generic_gemm,
    .ctx = NULL,
    .grouped_gemm = bfp8_cuda_generic_grouped_gemm, /* cuda_generic_grouped.c */
};
