/* Host quantization (docs/numerics.md): activations in 1x128 groups along K, weights in 128x128 blocks, fp32 or
 * UE8M0 scales written through any layout; dequantization and the fp32 -> UE8M0 weight requantization.
 *
 * One driver (quantize_groups) serves all three quantizers: a group is `group_rows` rows (1 for activations, 128
 * for weights) by up to 128 columns, and its source is read one row span (<= 128 values) at a time as fp32. The
 * per-span work is in two scalar kernels, span_amax and span_encode; a SIMD version replaces exactly those and
 * must give the same bits (both are exact except for the one fp32 division per element). quant_avx2.c holds that
 * version; it runs when the host ISA choice (cpu_features.h: CPU check, BFP8_CPU_ISA, the test hook
 * bfp8_cpu_force_isa), the same as the `cpu` backend's, says avx2. Large matrices are split over threads by groups
 * of rows, and every group is computed the same way whatever thread runs it, so the bytes do not depend on the
 * thread count.
 *
 * Conventions: a non-finite input encodes as NaN with its sign (0x7F, or 0xFF when negative), is counted, and
 * never changes the scale. *nonfinite receives the count for the call (it is set, not added to). K = 0 means
 * kblocks = 0: valid, nothing is written; M = 0 or N = 0 likewise. */
#include "internal.h"
#include "cpu_features.h"
#include "quant_avx2.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ---- the per-span kernels ------------------------------------------------------------------------------------ */

/* Largest |x| over the finite values of x[0..n); adds the number of non-finite ones to *nonfinite. Starts at 0:
 * the 1e-10 floor is applied once per group by bfp8_group_scale. */
static float span_amax(const float *x, int64_t n, int64_t *nonfinite) {
    float amax = 0.0f;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(x[i]))
            amax = fmaxf(amax, fabsf(x[i]));
        else
            bad++;
    }
    *nonfinite += bad;
    return amax;
}

/* q[i] = e4m3(x[i] / scale), the division in fp32; non-finite x -> NaN with the sign kept. */
static void span_encode(const float *x, int64_t n, float scale, uint8_t *q) {
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(x[i]))
            q[i] = bfp8_e4m3_from_f32(x[i] / scale);
        else
            q[i] = signbit(x[i]) ? 0xFF : 0x7F;
    }
}

/* ---- sources: where a row span's fp32 values come from ------------------------------------------------------- */

typedef struct quant_source {
    const void *x;         /* [rows, k] f32/bf16/f16, or e4m3 codes for the requantizer */
    bfp8_dtype dtype;      /* for E4M3 the values are q * scales (dequantized) */
    const bfp8_scales *dq; /* the E4M3 source's scales (weight blocks) */
    bool avx2;             /* use the AVX2 span kernels (same bits) */
} quant_source;

/* The span (row, col0 .. col0+n) as fp32: a pointer into x for f32, otherwise decoded into buf[BFP8_BLOCK]. */
static const float *source_span(const quant_source *src, int64_t k, int64_t row, int64_t col0, int64_t n,
                                float *buf) {
    int64_t base = row * k + col0;
    switch (src->dtype) {
    case BFP8_DTYPE_F32: return (const float *)src->x + base;
    case BFP8_DTYPE_E4M3: {
        float s = bfp8_scales_at(src->dq, row / BFP8_BLOCK, col0 / BFP8_BLOCK);
        const uint8_t *q = (const uint8_t *)src->x + base;
        for (int64_t i = 0; i < n; i++) buf[i] = bfp8_e4m3_to_f32(q[i]) * s;
        return buf;
    }
    default:
        if (src->avx2) {
            bfp8_quant_load_span_avx2(src->x, src->dtype, base, n, buf);
            return buf;
        }
        for (int64_t i = 0; i < n; i++) buf[i] = bfp8_load_f32(src->x, src->dtype, base + i);
        return buf;
    }
}

typedef struct quant_job {
    const quant_source *src;
    int64_t rows, k, group_rows;
    int64_t groups_per_task;
    uint8_t *q;
    bfp8_scales *scales;
    atomic_llong nonfinite;
} quant_job;

/* Row groups [g0, g1) of the job: every group's amax, scale and codes. Returns the non-finite count. */
static int64_t quantize_row_groups(const quant_job *job, int64_t g0, int64_t g1) {
    const quant_source *src = job->src;
    float buf[BFP8_BLOCK];
    int64_t bad = 0, k = job->k, group_rows = job->group_rows;
    int64_t kblocks = bfp8_ceil_div(k, BFP8_BLOCK);
    for (int64_t g = g0; g < g1; g++) {
        int64_t r0 = g * group_rows;
        int64_t r1 = r0 + group_rows < job->rows ? r0 + group_rows : job->rows;
        for (int64_t kb = 0; kb < kblocks; kb++) {
            int64_t c0 = kb * BFP8_BLOCK;
            int64_t n = k - c0 < BFP8_BLOCK ? k - c0 : BFP8_BLOCK; /* the last group is partial */
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; r++) {
                const float *x = source_span(src, k, r, c0, n, buf);
                amax = fmaxf(amax, src->avx2 ? bfp8_quant_span_amax_avx2(x, n, &bad) : span_amax(x, n, &bad));
            }
            float s = bfp8_group_scale(amax, job->scales->format);
            bfp8_scales_set_at(job->scales, g, kb, s);
            for (int64_t r = r0; r < r1; r++) {
                const float *x = source_span(src, k, r, c0, n, buf);
                if (src->avx2)
                    bfp8_quant_span_encode_avx2(x, n, s, job->q + r * k + c0);
                else
                    span_encode(x, n, s, job->q + r * k + c0);
            }
        }
    }
    return bad;
}

static void quantize_task(void *ctx, int64_t task, int thread) {
    quant_job *job = ctx;
    int64_t groups = bfp8_ceil_div(job->rows, job->group_rows);
    int64_t g0 = task * job->groups_per_task;
    int64_t g1 = g0 + job->groups_per_task < groups ? g0 + job->groups_per_task : groups;
    atomic_fetch_add(&job->nonfinite, (long long)quantize_row_groups(job, g0, g1));
}

/* Below this many elements a matrix is quantized on the calling thread; above, tasks of about this size. */
#define QUANT_PARALLEL_MIN_ELEMS (INT64_C(1) << 18)
#define QUANT_TASK_ELEMS (INT64_C(1) << 16)

/* Quantizes [rows, k] in groups of group_rows x BFP8_BLOCK; scales (already validated, shape
 * [ceil(rows/group_rows), ceil(k/128)]) receive one value per group. Tasks own whole row groups, so no two write
 * the same q bytes or scale words (packed UE8M0 words hold 4 kblocks of one row). */
static void quantize_groups(quant_source *src, int64_t rows, int64_t k, int64_t group_rows, uint8_t *q,
                            bfp8_scales *scales, int64_t *nonfinite) {
    src->avx2 = bfp8_cpu_isa_current() == BFP8_CPU_ISA_AVX2;
    if (scales->layout == BFP8_LAYOUT_PACKED_UE8M0 || scales->layout == BFP8_LAYOUT_MN_MAJOR_ALIGNED)
        bfp8_scales_clear(scales); /* padding is zero */
    quant_job job = {.src = src, .rows = rows, .k = k, .group_rows = group_rows, .q = q, .scales = scales};
    atomic_init(&job.nonfinite, 0);
    int64_t groups = bfp8_ceil_div(rows, group_rows);
    int64_t elems = 0, group_elems = 0;
    int threads = bfp8_get_num_threads();
    bool parallel = threads > 1 && groups > 1 && bfp8_mul_ok(rows, k, &elems) && elems >= QUANT_PARALLEL_MIN_ELEMS &&
                    bfp8_mul_ok(group_rows, k, &group_elems);
    if (!parallel) {
        job.groups_per_task = groups;
        int64_t bad = groups ? quantize_row_groups(&job, 0, groups) : 0;
        if (nonfinite) *nonfinite = bad;
        return;
    }
    job.groups_per_task = group_elems >= QUANT_TASK_ELEMS ? 1 : bfp8_ceil_div(QUANT_TASK_ELEMS, group_elems);
    /* bfp8_parallel_for fails only on invalid arguments, which these are not. */
    (void)bfp8_parallel_for(bfp8_ceil_div(groups, job.groups_per_task), threads, quantize_task, &job);
    if (nonfinite) *nonfinite = (int64_t)atomic_load(&job.nonfinite);
}

/* ---- public entry points ------------------------------------------------------------------------------------- */

static bfp8_status check_quant_args(const char *what, const void *x, bfp8_dtype dtype, int64_t rows, int64_t k,
                                    int64_t group_rows, const uint8_t *q, const bfp8_scales *scales) {
    size_t bytes;
    BFP8_TRY(bfp8_check_dims(what, rows, k));
    BFP8_CHECK_ARG(bfp8_is_float_dtype(dtype), "%s: input dtype %s (%d) is not f32, bf16 or f16", what,
                   bfp8_dtype_name(dtype), (int)dtype);
    BFP8_TRY(bfp8_check_matrix(what, rows, k, bfp8_dtype_size(dtype), &bytes));
    BFP8_CHECK_ARG(bytes == 0 || (x && q), "%s: NULL input or output for [%lld, %lld]", what, (long long)rows,
                   (long long)k);
    BFP8_TRY(bfp8_check_scales(what, scales, bfp8_ceil_div(rows, group_rows), bfp8_ceil_div(k, BFP8_BLOCK)));
    /* Groups are read twice (amax, then encode) while q and the scales are written: no sharing at all. */
    size_t q_bytes = (size_t)(rows * k), s_bytes = bfp8_scales_bytes(scales->layout, scales->rows, scales->kblocks);
    BFP8_CHECK_ARG(!bfp8_ranges_overlap(q, q_bytes, x, bytes), "%s: q overlaps the input", what);
    BFP8_CHECK_ARG(!bfp8_ranges_overlap(scales->data, s_bytes, x, bytes), "%s: the scales overlap the input", what);
    BFP8_CHECK_ARG(!bfp8_ranges_overlap(q, q_bytes, scales->data, s_bytes), "%s: q overlaps the scales", what);
    return BFP8_OK;
}

bfp8_status bfp8_quantize_act(const void *x, bfp8_dtype x_dtype, int64_t m, int64_t k, uint8_t *q,
                              bfp8_scales *scales, int64_t *nonfinite) {
    BFP8_TRY(check_quant_args("bfp8_quantize_act", x, x_dtype, m, k, 1, q, scales));
    quant_source src = {x, x_dtype, NULL, false};
    quantize_groups(&src, m, k, 1, q, scales, nonfinite);
    return BFP8_OK;
}

bfp8_status bfp8_quantize_weight(const void *w, bfp8_dtype w_dtype, int64_t n, int64_t k, uint8_t *q,
                                 bfp8_scales *scales, int64_t *nonfinite) {
    BFP8_TRY(check_quant_args("bfp8_quantize_weight", w, w_dtype, n, k, BFP8_BLOCK, q, scales));
    quant_source src = {w, w_dtype, NULL, false};
    quantize_groups(&src, n, k, BFP8_BLOCK, q, scales, nonfinite);
    return BFP8_OK;
}

bfp8_status bfp8_dequantize(const uint8_t *q, int64_t rows, int64_t k, const bfp8_scales *scales,
                            int64_t block_rows, float *out) {
    size_t bytes;
    BFP8_CHECK_ARG(block_rows == 1 || block_rows == BFP8_BLOCK,
                   "bfp8_dequantize: block_rows is %lld, expected 1 (activations) or 128 (weights)",
                   (long long)block_rows);
    BFP8_TRY(bfp8_check_dims("bfp8_dequantize", rows, k));
    BFP8_TRY(bfp8_check_matrix("bfp8_dequantize", rows, k, sizeof(float), &bytes));
    BFP8_CHECK_ARG(bytes == 0 || (q && out), "bfp8_dequantize: NULL input or output for [%lld, %lld]",
                   (long long)rows, (long long)k);
    BFP8_TRY(bfp8_check_scales("bfp8_dequantize", scales, bfp8_ceil_div(rows, block_rows),
                               bfp8_ceil_div(k, BFP8_BLOCK)));
    BFP8_CHECK_ARG(!bfp8_ranges_overlap(out, bytes, q, (size_t)(rows * k)), "bfp8_dequantize: out overlaps q");
    BFP8_CHECK_ARG(!bfp8_ranges_overlap(out, bytes, scales->data,
                                        bfp8_scales_bytes(scales->layout, scales->rows, scales->kblocks)),
                   "bfp8_dequantize: out overlaps the scales");
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c0 = 0; c0 < k; c0 += BFP8_BLOCK) {
            float s = bfp8_scales_at(scales, r / block_rows, c0 / BFP8_BLOCK);
            int64_t n = k - c0 < BFP8_BLOCK ? k - c0 : BFP8_BLOCK;
            for (int64_t i = 0; i < n; i++) out[r * k + c0 + i] = bfp8_e4m3_to_f32(q[r * k + c0 + i]) * s;
        }
    }
    return BFP8_OK;
}

bfp8_status bfp8_requantize_weight_ue8m0(const uint8_t *q, int64_t n, int64_t k, const bfp8_scales *scales,
                                         uint8_t *q_out, bfp8_scales *scales_out) {
    const char *what = "bfp8_requantize_weight_ue8m0";
    size_t bytes;
    BFP8_TRY(bfp8_check_dims(what, n, k));
    BFP8_TRY(bfp8_check_matrix(what, n, k, 1, &bytes));
    BFP8_CHECK_ARG(bytes == 0 || (q && q_out), "%s: NULL input or output for [%lld, %lld]", what, (long long)n,
                   (long long)k);
    int64_t rows = bfp8_ceil_div(n, BFP8_BLOCK), kblocks = bfp8_ceil_div(k, BFP8_BLOCK);
    BFP8_TRY(bfp8_check_scales(what, scales, rows, kblocks));
    BFP8_TRY(bfp8_check_scales(what, scales_out, rows, kblocks));
    BFP8_CHECK_ARG(scales_out->format == BFP8_SCALE_UE8M0, "%s: output scales have format %s, expected ue8m0", what,
                   bfp8_scale_format_name(scales_out->format));
    size_t in_sb = bfp8_scales_bytes(scales->layout, rows, kblocks);
    size_t out_sb = bfp8_scales_bytes(scales_out->layout, rows, kblocks);
    BFP8_CHECK_ARG(!bfp8_ranges_overlap(q, bytes, q_out, bytes) &&
                       !bfp8_ranges_overlap(q, bytes, scales_out->data, out_sb) &&
                       !bfp8_ranges_overlap(scales->data, in_sb, q_out, bytes) &&
                       !bfp8_ranges_overlap(scales->data, in_sb, scales_out->data, out_sb),
                   "%s: outputs alias the inputs", what);
    BFP8_CHECK_ARG(!bfp8_ranges_overlap(q_out, bytes, scales_out->data, out_sb), "%s: q_out overlaps scales_out",
                   what);
    quant_source src = {q, BFP8_DTYPE_E4M3, scales, false};
    quantize_groups(&src, n, k, BFP8_BLOCK, q_out, scales_out, NULL);
    return BFP8_OK;
}
