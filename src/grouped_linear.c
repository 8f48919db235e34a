/* The grouped linear layer: quantize x in 1x128 groups, then the grouped GEMM through the dispatcher. On host data
 * only the rows in use are quantized (their values alone are counted as non-finite); on CUDA every row is, by the
 * quantization kernel, since which rows are in use is known only on the device. */
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static bfp8_status check_args(const bfp8_grouped_weight_info *wi, const bfp8_grouped_linear_args *a, int64_t *rows) {
    BFP8_CHECK_ARG(a, "grouped linear: args is NULL");
    BFP8_CHECK_ARG(a->device >= 0 && a->device < BFP8_DEVICE_COUNT, "grouped linear: unknown device %d",
                   (int)a->device);
    BFP8_CHECK_ARG(a->layout == BFP8_GROUPED_CONTIGUOUS || a->layout == BFP8_GROUPED_MASKED,
                   "grouped linear: layout must be contiguous or masked, not %s", bfp8_grouped_layout_name(a->layout));
    BFP8_CHECK_ARG(bfp8_is_float_dtype(a->x_dtype), "grouped linear: input dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(a->x_dtype));
    BFP8_CHECK_ARG(a->m >= 0 && a->expected_m >= 0, "grouped linear: m=%" PRId64 " and expected_m=%" PRId64
                   " must be >= 0", a->m, a->expected_m);
    *rows = a->m;
    BFP8_CHECK_ARG(a->layout != BFP8_GROUPED_MASKED || bfp8_mul_ok(wi->groups, a->m, rows),
                   "grouped linear: groups x max_m overflows");
    BFP8_TRY(bfp8_check_matrix("grouped linear: x", *rows, wi->k, bfp8_dtype_size(a->x_dtype), NULL));
    BFP8_CHECK_ARG(a->x || *rows == 0 || wi->k == 0, "grouped linear: x is NULL");
    return BFP8_OK;
}

/* The grouped GEMM a linear call runs, without its A and scales (filled once they exist). */
static bfp8_grouped_gemm_args gemm_args_of(const bfp8_grouped_weight_info *wi, const bfp8_grouped_linear_args *a) {
    return (bfp8_grouped_gemm_args){
        .layout = a->layout, .groups = wi->groups, .m = a->m, .n = wi->n, .k = wi->k,
        .m_indices = a->m_indices, .masked_m = a->masked_m, .expected_m = a->expected_m,
        .bias = a->bias, .bias_dtype = a->bias_dtype, .y = a->y, .y_dtype = a->y_dtype,
        .device = a->device, .stream = a->stream,
    };
}

/* The problem of the call, with the GEMM's shapes and pointers validated through a stand-in for A's scales. */
static bfp8_status linear_problem(const bfp8_grouped_weight *w, const bfp8_grouped_linear_args *args,
                                  bfp8_grouped_weight_info *wi, int64_t *rows, bfp8_problem *out) {
    BFP8_CHECK_ARG(w, "grouped linear: weight is NULL");
    BFP8_CHECK_ARG(out, "grouped linear: problem is NULL");
    BFP8_TRY(bfp8_grouped_weight_info_get(w, wi));
    BFP8_TRY(check_args(wi, args, rows));
    bfp8_grouped_gemm_args g = gemm_args_of(wi, args);
    const int64_t kblocks = bfp8_ceil_div(wi->k, BFP8_BLOCK);
    /* The weight's and the activations' forms do not matter for validation: one stand-in each, never read (nor
     * checked apart from y: the real ones are the weight's own memory and this call's scratch). */
    static const uint8_t stand_in[16];
    g.a = g.b = stand_in;
    BFP8_TRY(bfp8_scales_init(&g.a_scales, wi->scale_format, BFP8_LAYOUT_ROW_MAJOR, args->m, kblocks, (void *)stand_in));
    BFP8_TRY(bfp8_scales_init(&g.b_scales, wi->scale_format, BFP8_LAYOUT_ROW_MAJOR, bfp8_ceil_div(wi->n, BFP8_BLOCK),
                              kblocks, (void *)stand_in));
    BFP8_TRY(bfp8_problem_from_grouped_stand_ins(&g, out));
    out->a_layouts = bfp8_scale_layouts_for(wi->scale_format);
    out->b_layouts = args->device == BFP8_DEVICE_CUDA ? wi->device_layouts : wi->host_layouts;
    return BFP8_OK;
}

bfp8_status bfp8_problem_from_grouped_linear(const bfp8_grouped_weight *w, const bfp8_grouped_linear_args *args,
                                             bfp8_problem *out) {
    bfp8_grouped_weight_info wi;
    int64_t rows;
    return linear_problem(w, args, &wi, &rows, out);
}

/* Host: quantizes rows [r0, r0 + count) of x into q and row-major scales (kblocks per row). */
static bfp8_status quantize_rows(const bfp8_grouped_linear_args *a, int64_t k, int64_t r0, int64_t count,
                                 uint8_t *q, float *scales, bfp8_scale_format format, int64_t *nonfinite) {
    const int64_t kblocks = bfp8_ceil_div(k, BFP8_BLOCK);
    bfp8_scales s;
    BFP8_TRY(bfp8_scales_init(&s, format, BFP8_LAYOUT_ROW_MAJOR, count, kblocks, scales + r0 * kblocks));
    int64_t bad = 0;
    BFP8_TRY(bfp8_quantize_act((const char *)a->x + (size_t)(r0 * k) * bfp8_dtype_size(a->x_dtype), a->x_dtype, count,
                               k, q + r0 * k, &s, &bad));
    *nonfinite += bad;
    return BFP8_OK;
}

/* Host: the rows in use, into q and row-major scales of every row (the rest zero). */
static bfp8_status quantize_host(const bfp8_grouped_gemm_args *g, const bfp8_grouped_linear_args *a, uint8_t *q,
                                 float *scales, bfp8_scale_format format, int64_t *nonfinite) {
    if (g->layout == BFP8_GROUPED_MASKED) {
        for (int64_t grp = 0; grp < g->groups; grp++)
            if (g->masked_m[grp] > 0)
                BFP8_TRY(quantize_rows(a, g->k, grp * g->m, g->masked_m[grp], q, scales, format, nonfinite));
        return BFP8_OK;
    }
    for (int64_t r = 0; r < g->m;) {
        if (g->m_indices[r] < 0) {
            r++;
            continue;
        }
        int64_t end = r + 1;
        while (end < g->m && g->m_indices[end] >= 0) end++;
        BFP8_TRY(quantize_rows(a, g->k, r, end - r, q, scales, format, nonfinite));
        r = end;
    }
    return BFP8_OK;
}

bfp8_status bfp8_grouped_linear(bfp8_dispatcher *d, const bfp8_grouped_weight *w,
                                const bfp8_grouped_linear_args *args) {
    bfp8_grouped_weight_info wi;
    bfp8_problem p;
    int64_t rows;
    BFP8_TRY(linear_problem(w, args, &wi, &rows, &p));
    if (!d) d = bfp8_dispatcher_default();
    if (!d) return BFP8_ERR_UNSUPPORTED;
    bfp8_grouped_gemm_args g = gemm_args_of(&wi, args);
    const bool on_cuda = args->device == BFP8_DEVICE_CUDA, masked = args->layout == BFP8_GROUPED_MASKED;
    if (!on_cuda) BFP8_TRY(bfp8_grouped_check_host_contents(&g));
    bfp8_decision dec;
    BFP8_TRY(bfp8_dispatch_record(d, &p, &dec));
    if (args->m == 0 || wi.n == 0) return BFP8_OK;
    const bfp8_caps *caps = &dec.backend->caps;
    BFP8_TRY(bfp8_grouped_weight_view(w, args->device, bfp8_first_layout(caps->b_layouts & p.b_layouts), &g.b,
                                      &g.b_scales));

    /* Activation scales: row-major on the host (what a host run converts to anyway), else the GPU's choice. */
    const uint32_t offered = caps->a_layouts & p.a_layouts;
    const bfp8_scale_layout layout = !on_cuda && (offered & BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)) ? BFP8_LAYOUT_ROW_MAJOR
                                                                                             : bfp8_act_layout(offered);
    const int64_t kblocks = bfp8_ceil_div(wi.k, BFP8_BLOCK), mats = masked ? wi.groups : 1;
    const size_t one = bfp8_scales_bytes(layout, args->m, kblocks);
    const size_t q_bytes = (size_t)(rows * wi.k), s_bytes = one * (size_t)mats;
    BFP8_TRY(bfp8_scales_init(&g.a_scales, wi.scale_format, layout, args->m, kblocks, NULL));

    uint8_t *q = NULL;
    void *s = NULL;
    float *row_major = NULL; /* host, when the backend wants another layout */
    bfp8_status st = BFP8_OK;
    if (on_cuda) {
        st = bfp8_cuda_malloc_async(q_bytes ? q_bytes : 1, (void **)&q, args->stream);
        if (st == BFP8_OK) st = bfp8_cuda_malloc_async(s_bytes ? s_bytes : 1, &s, args->stream);
    } else {
        q = malloc(q_bytes ? q_bytes : 1);
        s = calloc(1, s_bytes ? s_bytes : 1);
        if (layout != BFP8_LAYOUT_ROW_MAJOR) row_major = calloc((size_t)(rows * kblocks) + 1, sizeof(float));
        if (!q || !s || (layout != BFP8_LAYOUT_ROW_MAJOR && !row_major))
            st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped linear: cannot allocate activation scratch");
    }
    g.a = q;
    g.a_scales.data = s;
    if (st == BFP8_OK && on_cuda) {
        /* One launch when the rows' scales are one matrix (contiguous, or masked row-major), else one a group. */
        const bool one_matrix = !masked || layout == BFP8_LAYOUT_ROW_MAJOR;
        const int64_t launches = one_matrix ? 1 : wi.groups, per = one_matrix ? rows : args->m;
        /* Non-finite inputs land in the dispatcher's device counters, as in bfp8_linear (read with the stats). */
        int64_t *counters = bfp8_dispatch_cuda_counters(d, args->stream);
        for (int64_t i = 0; i < launches && st == BFP8_OK; i++) {
            bfp8_scales si;
            st = bfp8_scales_init(&si, wi.scale_format, layout, per, kblocks, (char *)s + (size_t)i * one);
            if (st == BFP8_OK)
                st = bfp8_cuda_quantize_act((const char *)args->x + (size_t)(i * per * wi.k) * bfp8_dtype_size(args->x_dtype),
                                            args->x_dtype, per, wi.k, q + i * per * wi.k, &si, counters, args->stream);
        }
    } else if (st == BFP8_OK) {
        int64_t nonfinite = 0;
        st = quantize_host(&g, args, q, layout == BFP8_LAYOUT_ROW_MAJOR ? (float *)s : row_major, wi.scale_format,
                           &nonfinite);
        bfp8_nonfinite_stats add = {.activations = (uint64_t)nonfinite};
        bfp8_dispatch_count(d, &add);
        for (int64_t i = 0; i < mats && st == BFP8_OK && row_major; i++) {
            bfp8_scales from, to = g.a_scales;
            to.data = (char *)s + (size_t)i * one;
            st = bfp8_scales_init(&from, wi.scale_format, BFP8_LAYOUT_ROW_MAJOR, args->m, kblocks,
                                  row_major + i * args->m * kblocks);
            if (st == BFP8_OK) st = bfp8_scales_convert(&from, &to);
        }
    }
    if (st == BFP8_OK) {
        st = dec.backend->grouped_gemm(dec.backend, &g);
        if (st != BFP8_OK && !bfp8_last_error()[0]) bfp8_fail(st, "backend '%s' failed (grouped)", dec.backend->name);
    }
    if (on_cuda) {
        if (q) bfp8_cuda_free_async(q, args->stream);
        if (s) bfp8_cuda_free_async(s, args->stream);
    } else {
        free(q);
        free(s);
        free(row_major);
    }
    return st;
}
