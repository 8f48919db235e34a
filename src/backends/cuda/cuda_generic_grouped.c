/* cuda_generic's grouped GEMM: the mma.sync kernel of gemm_generic.cu with a group index (cuda_grouped.h). Every
 * layout, dtype and scale layout the dense kernel takes; masked_m and m_indices are read by the kernel, so a call
 * is one launch with no host sync (CUDA-graph capturable). */
#include "cuda_glue.h"
#include "cuda_grouped.h"

bfp8_status bfp8_cuda_generic_grouped_gemm(const bfp8_backend *self, const bfp8_grouped_gemm_args *args) {
    (void)self;
    if (args->device != BFP8_DEVICE_CUDA)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "cuda_generic: the data is on %s, not on the GPU",
                         bfp8_device_name(args->device));
    if (args->groups > BFP8_CUDA_GROUPED_MAX_GROUPS)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "cuda_generic: %lld groups exceed the grid's %d", (long long)args->groups,
                         BFP8_CUDA_GROUPED_MAX_GROUPS);
    bfp8_cuda_device_info info;
    BFP8_TRY(bfp8_cuda_device_info_get(&info));
    const bfp8_cuda_gemm_desc d = {
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
    const bfp8_cuda_grouped_desc g = {
        .layout = (int)args->layout,
        .groups = args->groups,
        .m_indices = args->m_indices,
        .masked_m = args->masked_m,
        .expected_m = args->expected_m,
        .a_group_bytes = args->layout == BFP8_GROUPED_MASKED ? (int64_t)bfp8_grouped_scale_stride(&args->a_scales) : 0,
        .b_group_bytes = (int64_t)bfp8_grouped_scale_stride(&args->b_scales),
    };
    int err = bfp8_cuda_generic_grouped_launch(&d, &g, info.num_sms, args->stream);
    return err ? bfp8_cuda_error(err, "cuda_generic: grouped kernel launch") : BFP8_OK;
}
