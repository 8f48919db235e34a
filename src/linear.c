/* The block-FP8 linear layer: quantize x in 1x128 groups -> GEMM through the dispatcher (bias fused) -> y. */
#include "internal.h"

#include <stdlib.h>

static bfp8_status check_linear_args(const bfp8_weight_info *wi, const bfp8_linear_args *a) {
    BFP8_CHECK_ARG(a, "linear: args is NULL");
    BFP8_CHECK_ARG(a->device >= 0 && a->device < BFP8_DEVICE_COUNT, "linear: unknown device %d", (int)a->device);
    BFP8_CHECK_ARG(bfp8_is_float_dtype(a->x_dtype), "linear: input dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(a->x_dtype));
    BFP8_CHECK_ARG(bfp8_is_float_dtype(a->y_dtype), "linear: output dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(a->y_dtype));
    BFP8_CHECK_ARG(!a->bias || bfp8_is_float_dtype(a->bias_dtype), "linear: bias dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(a->bias_dtype));
    size_t y_bytes;
    BFP8_TRY(bfp8_check_matrix("linear: x", a->m, wi->k, bfp8_dtype_size(a->x_dtype), NULL));
    BFP8_TRY(bfp8_check_matrix("linear: y", a->m, wi->n, bfp8_dtype_size(a->y_dtype), &y_bytes));
    BFP8_CHECK_ARG(a->x || a->m == 0 || wi->k == 0, "linear: x is NULL");
    BFP8_CHECK_ARG(a->y || a->m == 0 || wi->n == 0, "linear: y is NULL");
    /* x is quantized into scratch before y is written, so y may overlap x; the bias is read while y is written. */
    size_t bias_bytes = a->bias ? (size_t)wi->n * bfp8_dtype_size(a->bias_dtype) : 0;
    BFP8_CHECK_ARG(!bfp8_ranges_overlap(a->y, y_bytes, a->bias, bias_bytes), "linear: y overlaps the bias");
    return BFP8_OK;
}

/* Scratch for the quantized activations, on the data's device. */
typedef struct act_buffers {
    uint8_t *q;
    void *scales;
    bfp8_device device;
    void *stream;
} act_buffers;

static bfp8_status act_alloc(act_buffers *b, size_t q_bytes, size_t s_bytes) {
    if (b->device == BFP8_DEVICE_CUDA) {
        BFP8_TRY(bfp8_cuda_malloc_async((void **)&b->q, q_bytes ? q_bytes : 1, b->stream));
        return bfp8_cuda_malloc_async(&b->scales, s_bytes ? s_bytes : 1, b->stream);
    }
    b->q = malloc(q_bytes ? q_bytes : 1);
    b->scales = malloc(s_bytes ? s_bytes : 1);
    if (!b->q || !b->scales) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "linear: cannot allocate activation scratch");
    return BFP8_OK;
}

static void act_free(act_buffers *b) {
    if (b->device == BFP8_DEVICE_CUDA) {
        if (b->q) bfp8_cuda_free_async(b->q, b->stream);
        if (b->scales) bfp8_cuda_free_async(b->scales, b->stream);
    } else {
        free(b->q);
        free(b->scales);
    }
}

bfp8_status bfp8_problem_from_linear(const bfp8_weight *w, const bfp8_linear_args *args, bfp8_problem *out) {
    BFP8_CHECK_ARG(w, "linear: weight is NULL");
    BFP8_CHECK_ARG(out, "linear: problem is NULL");
    bfp8_weight_info wi;
    BFP8_TRY(bfp8_weight_info_get(w, &wi));
    BFP8_TRY(check_linear_args(&wi, args));
    *out = (bfp8_problem){
        .device = args->device,
        .arch = args->device == BFP8_DEVICE_CUDA ? bfp8_cuda_current_arch() : 0,
        .m = args->m,
        .n = wi.n,
        .k = wi.k,
        .out_dtype = args->y_dtype,
        .scale_format = wi.scale_format,
        .a_layouts = bfp8_layouts_for_format(wi.scale_format),
        .b_layouts = args->device == BFP8_DEVICE_CUDA ? wi.device_layouts : wi.host_layouts,
        .has_bias = args->bias != NULL,
        .bias_dtype = args->bias ? args->bias_dtype : BFP8_DTYPE_F32,
        .act_from_prior_kernel = args->device == BFP8_DEVICE_CUDA,
    };
    return BFP8_OK;
}

bfp8_status bfp8_linear(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_linear_args *args) {
    bfp8_problem p;
    BFP8_TRY(bfp8_problem_from_linear(w, args, &p));
    if (!d) d = bfp8_dispatcher_default();
    if (!d) return BFP8_ERR_UNSUPPORTED;
    bfp8_decision dec;
    BFP8_TRY(bfp8_dispatch_record(d, &p, &dec));
    const bfp8_caps *caps = &dec.backend->caps;

    bfp8_gemm_args g = {
        .m = args->m, .n = p.n, .k = p.k,
        .bias = args->bias, .bias_dtype = args->bias_dtype,
        .y = args->y, .y_dtype = args->y_dtype,
        .device = args->device, .stream = args->stream,
        /* On CUDA the activations come from the quantization kernel launched just before the GEMM. */
        .act_from_prior_kernel = args->device == BFP8_DEVICE_CUDA,
    };
    BFP8_TRY(bfp8_weight_view(w, args->device, bfp8_first_layout(caps->b_layouts & p.b_layouts), &g.b, &g.b_scales));

    int64_t kblocks = bfp8_ceil_div(p.k, BFP8_BLOCK);
    bfp8_scale_layout a_layout = bfp8_act_layout(caps->a_layouts & p.a_layouts);
    size_t s_bytes = bfp8_scales_bytes(a_layout, args->m, kblocks);
    act_buffers buf = {.device = args->device, .stream = args->stream};
    bfp8_status st = act_alloc(&buf, (size_t)(args->m * p.k), s_bytes);
    if (st == BFP8_OK) st = bfp8_scales_init(&g.a_scales, p.scale_format, a_layout, args->m, kblocks, buf.scales);
    if (st == BFP8_OK) {
        g.a = buf.q;
        /* Non-finite inputs by kind: the weight's were counted when it was made; x and the bias here. On CUDA,
         * kernels add them to device counters that only reading the statistics waits for. */
        bfp8_weight_info wi;
        (void)bfp8_weight_info_get(w, &wi);
        bfp8_nonfinite_stats add = {.weight_codes = (uint64_t)wi.nonfinite_codes,
                                    .weight_scales = (uint64_t)wi.nonfinite_scales};
        if (args->device == BFP8_DEVICE_CUDA) {
            int64_t *counters = bfp8_dispatch_cuda_counters(d, args->stream);
            if (args->bias && counters)
                st = bfp8_cuda_count_nonfinite(args->bias, args->bias_dtype, p.n, &counters[1], args->stream);
            if (st == BFP8_OK)
                st = bfp8_quantize_act_cuda(args->x, args->x_dtype, args->m, p.k, buf.q, &g.a_scales, counters,
                                            args->stream);
        } else {
            int64_t nonfinite = 0;
            st = bfp8_quantize_act(args->x, args->x_dtype, args->m, p.k, buf.q, &g.a_scales, &nonfinite);
            add.activations = (uint64_t)nonfinite;
            if (args->bias) add.bias = (uint64_t)bfp8_count_nonfinite_values(args->bias, args->bias_dtype, p.n);
        }
        if (st == BFP8_OK && args->m > 0) bfp8_dispatch_count(d, &add);
    }
    if (st == BFP8_OK) st = bfp8_run_gemm(dec.backend, &g);
    act_free(&buf);
    return st;
}
