/* The GEMM entry point: argument validation, the problem a call poses, and the dispatched run. */
#include "internal.h"

#include <inttypes.h>

bfp8_scale_layout bfp8_first_layout(uint32_t set) {
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++)
        if (set & BFP8_BIT(l)) return (bfp8_scale_layout)l;
    return BFP8_LAYOUT_ROW_MAJOR;
}

bfp8_scale_layout bfp8_act_layout(uint32_t set) {
    if (set & BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED)) return BFP8_LAYOUT_MN_MAJOR_ALIGNED;
    return bfp8_first_layout(set);
}

bfp8_status bfp8_backend_layouts(const bfp8_backend *b, const bfp8_problem *p, bfp8_scale_layout *a_layout,
                                 bfp8_scale_layout *b_layout) {
    BFP8_CHECK_ARG(b && p && a_layout && b_layout, "backend_layouts: NULL argument");
    const uint32_t a_set = b->caps.a_layouts & p->a_layouts, b_set = b->caps.b_layouts & p->b_layouts;
    if (!a_set || !b_set)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "backend '%s' consumes none of the %s-scale layouts on offer",
                         b->name ? b->name : "?", a_set ? "weight" : "activation");
    *a_layout = bfp8_act_layout(a_set);
    *b_layout = bfp8_first_layout(b_set);
    return BFP8_OK;
}

bfp8_status bfp8_check_gemm_args(const bfp8_gemm_args *args) {
    BFP8_CHECK_ARG(args, "gemm: args is NULL");
    BFP8_CHECK_ARG((unsigned)args->device < (unsigned)BFP8_DEVICE_COUNT, "gemm: unknown device %d",
                   (int)args->device);
    BFP8_TRY(bfp8_check_dims("gemm: [M, N]", args->m, args->n));
    BFP8_TRY(bfp8_check_dims("gemm: [N, K]", args->n, args->k));
    size_t a_bytes, b_bytes, y_bytes;
    BFP8_TRY(bfp8_check_matrix("gemm: A", args->m, args->k, 1, &a_bytes));
    BFP8_TRY(bfp8_check_matrix("gemm: B", args->n, args->k, 1, &b_bytes));
    BFP8_CHECK_ARG(bfp8_is_float_dtype(args->y_dtype), "gemm: output dtype %s (%d) is not f32, bf16 or f16",
                   bfp8_dtype_name(args->y_dtype), (int)args->y_dtype);
    BFP8_TRY(bfp8_check_matrix("gemm: Y", args->m, args->n, bfp8_dtype_size(args->y_dtype), &y_bytes));
    int64_t kblocks = bfp8_ceil_div(args->k, BFP8_BLOCK);
    BFP8_TRY(bfp8_check_scales("gemm: A scales", &args->a_scales, args->m, kblocks));
    BFP8_TRY(bfp8_check_scales("gemm: B scales", &args->b_scales, bfp8_ceil_div(args->n, BFP8_BLOCK), kblocks));
    bool has_a = args->m > 0 && args->k > 0, has_b = args->n > 0 && args->k > 0;
    BFP8_CHECK_ARG(args->a || !has_a, "gemm: A is NULL");
    BFP8_CHECK_ARG(args->b || !has_b, "gemm: B is NULL");
    BFP8_CHECK_ARG(args->y || args->m == 0 || args->n == 0, "gemm: Y is NULL");
    BFP8_CHECK_ARG(!args->bias || bfp8_is_float_dtype(args->bias_dtype),
                   "gemm: bias dtype %s (%d) is not f32, bf16 or f16", bfp8_dtype_name(args->bias_dtype),
                   (int)args->bias_dtype);
    const bfp8_byte_range in[] = {
        {"A", args->a, a_bytes},
        {"B", args->b, b_bytes},
        {"the A scales", args->a_scales.data, bfp8_scales_bytes(args->a_scales.layout, args->m, kblocks)},
        {"the B scales", args->b_scales.data, bfp8_scales_bytes(args->b_scales.layout, args->b_scales.rows, kblocks)},
        {"the bias", args->bias, args->bias ? (size_t)args->n * bfp8_dtype_size(args->bias_dtype) : 0},
    };
    return bfp8_check_output_apart("gemm", args->y, y_bytes, in, sizeof in / sizeof in[0]);
}

bfp8_problem bfp8_problem_of_operands(bfp8_device device, int64_t m, int64_t n, int64_t k, bfp8_dtype y_dtype,
                                      const bfp8_scales *a_scales, const bfp8_scales *b_scales, bool has_bias,
                                      bfp8_dtype bias_dtype) {
    int arch = 0;
    const char *card = NULL;
    if (device == BFP8_DEVICE_CUDA) bfp8_cuda_identity(&arch, &card);
    return (bfp8_problem){
        .device = device,
        .arch = arch,
        .card = card,
        .m = m,
        .n = n,
        .k = k,
        .out_dtype = y_dtype,
        /* UE8M0 scales are fp32 values too, so mixed operands are an fp32 problem. */
        .scale_format = a_scales->format == BFP8_SCALE_UE8M0 && b_scales->format == BFP8_SCALE_UE8M0
                            ? BFP8_SCALE_UE8M0
                            : BFP8_SCALE_FP32,
        .a_layouts = BFP8_BIT(a_scales->layout),
        .b_layouts = BFP8_BIT(b_scales->layout),
        .has_bias = has_bias,
        .bias_dtype = has_bias ? bias_dtype : BFP8_DTYPE_F32,
    };
}

bfp8_status bfp8_problem_from_gemm(const bfp8_gemm_args *args, bfp8_problem *out) {
    BFP8_CHECK_ARG(out, "problem is NULL");
    BFP8_TRY(bfp8_check_gemm_args(args));
    *out = bfp8_problem_of_operands(args->device, args->m, args->n, args->k, args->y_dtype, &args->a_scales,
                                    &args->b_scales, args->bias != NULL, args->bias_dtype);
    out->act_from_prior_kernel = args->device == BFP8_DEVICE_CUDA && args->act_from_prior_kernel;
    return BFP8_OK;
}

bfp8_status bfp8_run_gemm(const bfp8_backend *b, const bfp8_gemm_args *args) {
    if (args->m == 0 || args->n == 0) return BFP8_OK; /* nothing to write */
    bfp8_status st = b->gemm(b, args);
    if (st != BFP8_OK && !bfp8_last_error()[0]) bfp8_fail(st, "backend '%s' failed", b->name);
    return st;
}

/* Whether a host output holds inf or NaN. */
static bool output_nonfinite(const bfp8_gemm_args *a) {
    return bfp8_count_nonfinite_values(a->y, a->y_dtype, a->m * a->n) > 0;
}

/* Every non-finite value among a host GEMM's operands, by kind. */
static void count_operands(const bfp8_gemm_args *a, bfp8_nonfinite_stats *out) {
    out->activations = (uint64_t)bfp8_count_nan_codes(a->a, a->m * a->k);
    out->act_scales = (uint64_t)bfp8_count_nonfinite_scales(&a->a_scales);
    out->weight_codes = (uint64_t)bfp8_count_nan_codes(a->b, a->n * a->k);
    out->weight_scales = (uint64_t)bfp8_count_nonfinite_scales(&a->b_scales);
    out->bias = a->bias ? (uint64_t)bfp8_count_nonfinite_values(a->bias, a->bias_dtype, a->n) : 0;
}

bfp8_status bfp8_gemm(bfp8_dispatcher *d, const bfp8_gemm_args *args) {
    if (!d) d = bfp8_dispatcher_default();
    if (!d) return BFP8_ERR_UNSUPPORTED; /* bfp8_dispatcher_default set the message */
    bfp8_problem p;
    BFP8_TRY(bfp8_problem_from_gemm(args, &p));
    bfp8_decision dec;
    BFP8_TRY(bfp8_dispatch_record(d, &p, &dec));
    BFP8_TRY(bfp8_run_gemm(dec.backend, args));
    /* A non-finite operand always reaches y (NaN and inf survive every product and sum, and inf * 0 is NaN), so
     * a finite y proves the operands finite at the cost of one pass over y; only then are the operands scanned.
     * On CUDA that pass would need a host sync per call: not counted there. */
    if (args->device == BFP8_DEVICE_CPU && args->m > 0 && args->n > 0 && output_nonfinite(args)) {
        bfp8_nonfinite_stats add;
        count_operands(args, &add);
        bfp8_dispatch_count(d, &add);
    }
    return BFP8_OK;
}
