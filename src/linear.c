/* The block-FP8 linear layer: quantize x in 1x128 groups -> GEMM through the dispatcher (bias fused) -> y. */
#include "internal.h"

#include <stdlib.h>

/* What the problem alone decides: device, dtypes, shape. */
static bfp8_status check_linear_problem(bfp8_device device, int64_t m, int64_t n, int64_t k, bfp8_dtype y_dtype,
                                        bool has_bias, bfp8_dtype bias_dtype) {
    BFP8_CHECK_ARG(device >= 0 && device < BFP8_DEVICE_COUNT, "linear: unknown device %d", (int)device);
    BFP8_CHECK_ARG(bfp8_is_float_dtype(y_dtype), "linear: output dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(y_dtype));
    BFP8_CHECK_ARG(!has_bias || bfp8_is_float_dtype(bias_dtype), "linear: bias dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(bias_dtype));
    BFP8_TRY(bfp8_check_dims("linear: [M, N]", m, n));
    return bfp8_check_dims("linear: [N, K]", n, k);
}

/* The rest of a call: the input dtype, the buffers, their sizes and overlap. */
static bfp8_status check_linear_args(const bfp8_weight_info *wi, const bfp8_linear_args *a) {
    BFP8_CHECK_ARG(bfp8_is_float_dtype(a->x_dtype), "linear: input dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(a->x_dtype));
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
        BFP8_TRY(bfp8_cuda_malloc_async(q_bytes ? q_bytes : 1, (void **)&b->q, b->stream));
        return bfp8_cuda_malloc_async(s_bytes ? s_bytes : 1, &b->scales, b->stream);
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

bfp8_status bfp8_problem_for_linear(const bfp8_weight_info *w, bfp8_device device, int64_t m, bfp8_dtype y_dtype,
                                    bool has_bias, bfp8_dtype bias_dtype, bfp8_problem *out) {
    BFP8_CHECK_ARG(w, "linear: weight is NULL");
    BFP8_CHECK_ARG(out, "linear: problem is NULL");
    BFP8_CHECK_ARG((unsigned)w->scale_format < (unsigned)BFP8_SCALE_FORMAT_COUNT, "linear: unknown scale format %d",
                   (int)w->scale_format);
    BFP8_TRY(check_linear_problem(device, m, w->n, w->k, y_dtype, has_bias, bias_dtype));
    int arch = 0;
    const char *card = NULL;
    if (device == BFP8_DEVICE_CUDA) bfp8_cuda_identity(&arch, &card);
    *out = (bfp8_problem){
        .device = device,
        .arch = arch,
        .card = card,
        .m = m,
        .n = w->n,
        .k = w->k,
        .out_dtype = y_dtype,
        .scale_format = w->scale_format,
        /* Quantized in the call, into whichever layout the chosen backend takes. */
        .a_layouts = bfp8_scale_layouts_for(w->scale_format),
        .b_layouts = device == BFP8_DEVICE_CUDA ? w->device_layouts : w->host_layouts,
        .has_bias = has_bias,
        .bias_dtype = has_bias ? bias_dtype : BFP8_DTYPE_F32,
        /* On CUDA the quantization kernel runs just before the GEMM, on the same stream. */
        .act_from_prior_kernel = device == BFP8_DEVICE_CUDA,
    };
    return BFP8_OK;
}

bfp8_status bfp8_problem_from_linear(const bfp8_weight *w, const bfp8_linear_args *args, bfp8_problem *out) {
    BFP8_CHECK_ARG(w, "linear: weight is NULL");
    BFP8_CHECK_ARG(out, "linear: problem is NULL");
    BFP8_CHECK_ARG(args, "linear: args is NULL");
    bfp8_weight_info wi;
    bfp8_problem p;
    BFP8_TRY(bfp8_weight_info_get(w, &wi));
    BFP8_TRY(bfp8_problem_for_linear(&wi, args->device, args->m, args->y_dtype, args->bias != NULL,
                                     args->bias_dtype, &p));
    BFP8_TRY(check_linear_args(&wi, args));
    *out = p;
    return BFP8_OK;
}

bfp8_status bfp8_linear(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_linear_args *args) {
    bfp8_problem p;
    BFP8_TRY(bfp8_problem_from_linear(w, args, &p));
    if (!d) d = bfp8_dispatcher_default();
    if (!d) return BFP8_ERR_UNSUPPORTED;
    bfp8_decision dec;
    BFP8_TRY(bfp8_dispatch_record(d, &p, &dec));
    bfp8_scale_layout a_layout, b_layout;
    BFP8_TRY(bfp8_backend_layouts(dec.backend, &p, &a_layout, &b_layout));

    bfp8_gemm_args g = {
        .m = args->m, .n = p.n, .k = p.k,
        .bias = args->bias, .bias_dtype = args->bias_dtype,
        .y = args->y, .y_dtype = args->y_dtype,
        .device = args->device, .stream = args->stream,
        .act_from_prior_kernel = p.act_from_prior_kernel,
    };
    BFP8_TRY(bfp8_weight_view(w, args->device, b_layout, &g.b, &g.b_scales));

    int64_t kblocks = bfp8_ceil_div(p.k, BFP8_BLOCK);
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
                st = bfp8_cuda_quantize_act(args->x, args->x_dtype, args->m, p.k, buf.q, &g.a_scales, counters,
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
