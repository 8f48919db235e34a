/* The grouped (MoE) GEMM entry point: layout names, argument validation, the problem a call poses, the dispatched
 * run, and the per-group driver the host backends share (one dense call per group; docs/grouped.md). */
#include "internal.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const layout_names[BFP8_GROUPED_COUNT] = {"none", "contiguous", "masked"};

const char *bfp8_grouped_layout_name(bfp8_grouped_layout layout) {
    return (unsigned)layout < (unsigned)BFP8_GROUPED_COUNT ? layout_names[layout] : "unknown";
}

bfp8_status bfp8_grouped_layout_parse(const char *name, bfp8_grouped_layout *out) {
    BFP8_CHECK_ARG(name && out, "grouped layout: NULL argument");
    for (int l = 0; l < BFP8_GROUPED_COUNT; l++)
        if (strcmp(name, layout_names[l]) == 0) {
            *out = (bfp8_grouped_layout)l;
            return BFP8_OK;
        }
    return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "unknown grouped layout '%s' (none, contiguous, masked)", name);
}

size_t bfp8_grouped_scale_stride(const bfp8_scales *s) { return bfp8_scales_bytes(s->layout, s->rows, s->kblocks); }

/* A scale descriptor of one group's matrix whose data holds `groups` of them: shape, and that the whole fits. */
static bfp8_status check_group_scales(const char *what, const bfp8_scales *s, int64_t rows, int64_t kblocks,
                                      int64_t groups, bool needed) {
    BFP8_TRY(bfp8_check_scales(what, s, rows, kblocks));
    int64_t total;
    BFP8_CHECK_ARG(bfp8_mul_ok((int64_t)bfp8_grouped_scale_stride(s), groups, &total) &&
                       (uint64_t)total <= (uint64_t)SIZE_MAX,
                   "%s: %" PRId64 " matrices of [%" PRId64 ", %" PRId64 "] overflow", what, groups, rows, kblocks);
    BFP8_CHECK_ARG(s->data || !needed || total == 0, "%s: data is NULL", what);
    return BFP8_OK;
}

/* stand_ins: A, B and their scales are placeholders of the right sizes (grouped linear), whose ranges say nothing
 * about where y may lie: only the caller's own buffers are checked apart from y. */
static bfp8_status check_grouped_args(const bfp8_grouped_gemm_args *a, bool stand_ins) {
    BFP8_CHECK_ARG(a, "grouped gemm: args is NULL");
    BFP8_CHECK_ARG(a->device >= 0 && a->device < BFP8_DEVICE_COUNT, "grouped gemm: unknown device %d", (int)a->device);
    BFP8_CHECK_ARG(a->layout == BFP8_GROUPED_CONTIGUOUS || a->layout == BFP8_GROUPED_MASKED,
                   "grouped gemm: layout must be contiguous or masked, not %s", bfp8_grouped_layout_name(a->layout));
    BFP8_CHECK_ARG(a->groups >= 1, "grouped gemm: groups=%" PRId64 " (at least 1)", a->groups);
    BFP8_CHECK_ARG(a->m >= 0 && a->n >= 0 && a->k >= 0,
                   "grouped gemm: negative size m=%" PRId64 " n=%" PRId64 " k=%" PRId64, a->m, a->n, a->k);
    BFP8_CHECK_ARG(a->expected_m >= 0, "grouped gemm: expected_m=%" PRId64 " is negative", a->expected_m);
    const bool masked = a->layout == BFP8_GROUPED_MASKED;
    int64_t rows = a->m, wrows;
    BFP8_CHECK_ARG(!masked || bfp8_mul_ok(a->groups, a->m, &rows), "grouped gemm: groups x max_m overflows");
    BFP8_CHECK_ARG(bfp8_mul_ok(a->groups, a->n, &wrows), "grouped gemm: groups x n overflows");
    size_t a_bytes, b_bytes, y_bytes;
    BFP8_TRY(bfp8_check_matrix("grouped gemm: A", rows, a->k, 1, &a_bytes));
    BFP8_TRY(bfp8_check_matrix("grouped gemm: B", wrows, a->k, 1, &b_bytes));
    BFP8_CHECK_ARG(bfp8_is_float_dtype(a->y_dtype), "grouped gemm: output dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(a->y_dtype));
    BFP8_TRY(bfp8_check_matrix("grouped gemm: Y", rows, a->n, bfp8_dtype_size(a->y_dtype), &y_bytes));
    const int64_t kblocks = bfp8_ceil_div(a->k, BFP8_BLOCK);
    const bool has_a = rows > 0 && a->k > 0, has_b = wrows > 0 && a->k > 0;
    BFP8_TRY(check_group_scales("grouped gemm: A scales", &a->a_scales, a->m, kblocks, masked ? a->groups : 1,
                                has_a && a->n > 0));
    BFP8_TRY(check_group_scales("grouped gemm: B scales", &a->b_scales, bfp8_ceil_div(a->n, BFP8_BLOCK), kblocks,
                                a->groups, has_b && rows > 0));
    BFP8_CHECK_ARG(a->a || !has_a, "grouped gemm: A is NULL");
    BFP8_CHECK_ARG(a->b || !has_b, "grouped gemm: B is NULL");
    BFP8_CHECK_ARG(a->y || rows == 0 || a->n == 0, "grouped gemm: Y is NULL");
    BFP8_CHECK_ARG(!masked || a->masked_m, "grouped gemm: masked layout without masked_m");
    BFP8_CHECK_ARG(masked || a->m_indices || a->m == 0, "grouped gemm: contiguous layout without m_indices");
    if (a->bias) {
        BFP8_CHECK_ARG(bfp8_is_float_dtype(a->bias_dtype), "grouped gemm: bias dtype %s is not f32, bf16 or f16",
                       bfp8_dtype_name(a->bias_dtype));
        BFP8_TRY(bfp8_check_matrix("grouped gemm: bias", a->groups, a->n, bfp8_dtype_size(a->bias_dtype), NULL));
    }
    const bfp8_byte_range in[] = {
        {"A", stand_ins ? NULL : a->a, a_bytes},
        {"B", stand_ins ? NULL : a->b, b_bytes},
        {"the A scales", stand_ins ? NULL : a->a_scales.data,
         bfp8_grouped_scale_stride(&a->a_scales) * (size_t)(masked ? a->groups : 1)},
        {"the B scales", stand_ins ? NULL : a->b_scales.data,
         bfp8_grouped_scale_stride(&a->b_scales) * (size_t)a->groups},
        {"m_indices", masked ? NULL : a->m_indices, (size_t)a->m * sizeof(int32_t)},
        {"masked_m", masked ? a->masked_m : NULL, (size_t)a->groups * sizeof(int32_t)},
        {"the bias", a->bias, a->bias ? (size_t)(a->groups * a->n) * bfp8_dtype_size(a->bias_dtype) : 0},
    };
    return bfp8_check_output_apart("grouped gemm", a->y, y_bytes, in, sizeof in / sizeof in[0]);
}

bfp8_status bfp8_check_grouped_gemm_args(const bfp8_grouped_gemm_args *a) { return check_grouped_args(a, false); }

bfp8_status bfp8_grouped_check_host_contents(const bfp8_grouped_gemm_args *a) {
    if (a->layout == BFP8_GROUPED_MASKED) {
        for (int64_t g = 0; g < a->groups; g++)
            BFP8_CHECK_ARG(a->masked_m[g] >= 0 && a->masked_m[g] <= a->m,
                           "grouped gemm: masked_m[%" PRId64 "] = %" PRId32 " is outside [0, max_m = %" PRId64 "]", g,
                           a->masked_m[g], a->m);
        return BFP8_OK;
    }
    for (int64_t r = 0; r < a->m; r++)
        BFP8_CHECK_ARG(a->m_indices[r] >= -1 && a->m_indices[r] < a->groups,
                       "grouped gemm: m_indices[%" PRId64 "] = %" PRId32 " is outside [-1, %" PRId64 ")", r,
                       a->m_indices[r], a->groups);
    return BFP8_OK;
}

static bfp8_status problem_of(const bfp8_grouped_gemm_args *args, bool stand_ins, bfp8_problem *out) {
    BFP8_CHECK_ARG(out, "problem is NULL");
    BFP8_TRY(check_grouped_args(args, stand_ins));
    const bool masked = args->layout == BFP8_GROUPED_MASKED;
    *out = bfp8_problem_of_operands(args->device, args->m, args->n, args->k, args->y_dtype, &args->a_scales,
                                    &args->b_scales, args->bias != NULL, args->bias_dtype);
    out->grouped = args->layout;
    out->groups = args->groups;
    out->expected_m = args->expected_m ? args->expected_m : masked ? args->m : bfp8_ceil_div(args->m, args->groups);
    return BFP8_OK;
}

bfp8_status bfp8_problem_from_grouped_gemm(const bfp8_grouped_gemm_args *args, bfp8_problem *out) {
    return problem_of(args, false, out);
}

bfp8_status bfp8_problem_from_grouped_stand_ins(const bfp8_grouped_gemm_args *args, bfp8_problem *out) {
    return problem_of(args, true, out);
}

bfp8_status bfp8_grouped_gemm(bfp8_dispatcher *d, const bfp8_grouped_gemm_args *args) {
    if (!d) d = bfp8_dispatcher_default();
    if (!d) return BFP8_ERR_UNSUPPORTED;
    bfp8_problem p;
    BFP8_TRY(bfp8_problem_from_grouped_gemm(args, &p));
    if (args->device == BFP8_DEVICE_CPU) BFP8_TRY(bfp8_grouped_check_host_contents(args));
    bfp8_decision dec;
    BFP8_TRY(bfp8_dispatch_record(d, &p, &dec));
    if (args->m == 0 || args->n == 0) return BFP8_OK; /* nothing to write */
    bfp8_status st = dec.backend->grouped_gemm(dec.backend, args);
    if (st != BFP8_OK && !bfp8_last_error()[0]) bfp8_fail(st, "backend '%s' failed (grouped)", dec.backend->name);
    return st;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* The host driver: one dense call per group                                                                     */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct group_job {
    const bfp8_backend *dense;
    const bfp8_grouped_gemm_args *args;
    const int64_t *offsets; /* contiguous: group g's rows are rows[offsets[g] .. offsets[g+1]) */
    const int64_t *rows;
    const int64_t *active;  /* the non-empty groups */
    pthread_mutex_t lock;
    bfp8_status status;     /* the first failure, and its message */
    char message[512];
} group_job;

static void record_failure(group_job *j, bfp8_status st) {
    pthread_mutex_lock(&j->lock);
    if (j->status == BFP8_OK) {
        j->status = st;
        snprintf(j->message, sizeof j->message, "%s", bfp8_last_error());
    }
    pthread_mutex_unlock(&j->lock);
}

static int64_t group_rows(const group_job *j, int64_t g) {
    const bfp8_grouped_gemm_args *a = j->args;
    return a->layout == BFP8_GROUPED_MASKED ? a->masked_m[g] : j->offsets[g + 1] - j->offsets[g];
}

/* Group g as a dense GEMM on its rows: A and Y in place when the rows are one run (always for masked), else
 * gathered into scratch and the output scattered back; activation scales always gathered to row-major, since a
 * row range of an MN-major matrix is no matrix of its own. */
static bfp8_status run_group(group_job *j, int64_t g) {
    const bfp8_grouped_gemm_args *a = j->args;
    const bool masked = a->layout == BFP8_GROUPED_MASKED;
    const int64_t mg = group_rows(j, g), kblocks = bfp8_ceil_div(a->k, BFP8_BLOCK);
    const size_t ysize = bfp8_dtype_size(a->y_dtype);
    const int64_t *rows = masked ? NULL : j->rows + j->offsets[g];
    const bool one_run = masked || rows[mg - 1] - rows[0] == mg - 1;
    const int64_t first = masked ? g * a->m : rows[0]; /* row of A and Y where the group starts */

    bfp8_scales sa_src = a->a_scales;
    if (masked) sa_src.data = (char *)a->a_scales.data + (size_t)g * bfp8_grouped_scale_stride(&a->a_scales);

    float *sa = malloc((size_t)(mg * kblocks + 1) * sizeof(float));
    uint8_t *a_gather = one_run ? NULL : malloc((size_t)(mg * a->k + 1));
    void *y_gather = one_run ? NULL : malloc((size_t)(mg * a->n) * ysize + 1);
    bfp8_status st = BFP8_OK;
    if (!sa || (!one_run && (!a_gather || !y_gather))) {
        st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped gemm: no memory for group %" PRId64 " (%" PRId64 " rows)", g,
                       mg);
        goto out;
    }
    for (int64_t i = 0; i < mg; i++) {
        const int64_t r = masked ? i : rows[i]; /* masked: row i of the group's own matrix */
        for (int64_t kb = 0; kb < kblocks; kb++) sa[i * kblocks + kb] = bfp8_scales_at(&sa_src, r, kb);
        if (!one_run) memcpy(a_gather + i * a->k, a->a + r * a->k, (size_t)a->k);
    }
    bfp8_gemm_args dg = {
        .m = mg, .n = a->n, .k = a->k,
        .a = one_run ? a->a + first * a->k : a_gather,
        .b = a->b + (size_t)g * (size_t)(a->n * a->k),
        .b_scales = a->b_scales,
        .bias = a->bias ? (const char *)a->bias + (size_t)(g * a->n) * bfp8_dtype_size(a->bias_dtype) : NULL,
        .bias_dtype = a->bias_dtype,
        .y = one_run ? (char *)a->y + (size_t)(first * a->n) * ysize : y_gather,
        .y_dtype = a->y_dtype,
        .device = BFP8_DEVICE_CPU,
    };
    dg.b_scales.data = (char *)a->b_scales.data + (size_t)g * bfp8_grouped_scale_stride(&a->b_scales);
    st = bfp8_scales_init(&dg.a_scales, a->a_scales.format, BFP8_LAYOUT_ROW_MAJOR, mg, kblocks, sa);
    if (st == BFP8_OK) st = bfp8_run_gemm(j->dense, &dg);
    if (st == BFP8_OK && !one_run)
        for (int64_t i = 0; i < mg; i++)
            memcpy((char *)a->y + (size_t)(rows[i] * a->n) * ysize, (char *)y_gather + (size_t)(i * a->n) * ysize,
                   (size_t)a->n * ysize);
out:
    free(sa);
    free(a_gather);
    free(y_gather);
    return st;
}

static void group_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    group_job *j = ctx;
    bfp8_status st = run_group(j, j->active[task]);
    if (st != BFP8_OK) record_failure(j, st);
}

bfp8_status bfp8_grouped_run_dense(const bfp8_backend *dense, const bfp8_grouped_gemm_args *a,
                                   double parallel_group_work) {
    const bool masked = a->layout == BFP8_GROUPED_MASKED;
    if (a->m == 0 || a->n == 0) return BFP8_OK;
    int64_t *offsets = calloc((size_t)a->groups + 1, sizeof *offsets);
    int64_t *rows = masked ? NULL : malloc((size_t)a->m * sizeof *rows);
    int64_t *active = malloc((size_t)a->groups * sizeof *active);
    group_job job = {.dense = dense, .args = a, .offsets = offsets, .rows = rows, .active = active,
                     .status = BFP8_OK};
    bfp8_status st = BFP8_OK;
    if (!offsets || !active || (!masked && !rows)) {
        st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped gemm: no memory for the row lists of %" PRId64 " groups",
                       a->groups);
        goto out;
    }
    if (!masked) {
        /* Each group's rows in row order (a counting sort), padding rows (-1) in none. */
        for (int64_t r = 0; r < a->m; r++)
            if (a->m_indices[r] >= 0) offsets[a->m_indices[r] + 1]++;
        for (int64_t g = 0; g < a->groups; g++) offsets[g + 1] += offsets[g];
        int64_t *fill = malloc((size_t)a->groups * sizeof *fill);
        if (!fill) {
            st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped gemm: no memory for the row lists");
            goto out;
        }
        memcpy(fill, offsets, (size_t)a->groups * sizeof *fill);
        for (int64_t r = 0; r < a->m; r++)
            if (a->m_indices[r] >= 0) rows[fill[a->m_indices[r]]++] = r;
        free(fill);
    }
    int64_t nactive = 0, active_rows = 0;
    for (int64_t g = 0; g < a->groups; g++) {
        const int64_t mg = group_rows(&job, g);
        if (mg > 0) active[nactive++] = g, active_rows += mg;
    }
    if (nactive == 0) goto out;
    /* The split never changes a result (each dense call's bytes do not depend on its thread count). */
    const double work = (double)active_rows / (double)nactive * (double)a->n * (double)a->k;
    pthread_mutex_init(&job.lock, NULL);
    if (nactive > 1 && work < parallel_group_work) {
        st = bfp8_parallel_for(nactive, bfp8_get_num_threads(), group_task, &job);
    } else {
        for (int64_t i = 0; i < nactive && job.status == BFP8_OK; i++) group_task(&job, i, 0);
    }
    pthread_mutex_destroy(&job.lock);
    if (st == BFP8_OK && job.status != BFP8_OK) st = bfp8_fail(job.status, "%s", job.message);
out:
    free(offsets);
    free(rows);
    free(active);
    return st;
}
