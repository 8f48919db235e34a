/* Grouped (MoE) GEMM on the host backends: each group's output against the dense call of the same backend on that
 * group's rows (byte for byte), against an independent double computation and the reference, rows that must stay
 * unwritten, edge cases (G=1, G=256, empty groups, all padding, masked_m 0 or max_m), bad contents, dispatch of
 * grouped problems, grouped weights, the grouped linear layer and loading a checkpoint's experts. */
#include "check.h"
#include "blockfp8_grouped.h"
#include "internal.h"
#include "weight_forms.h"

#include <unistd.h>

#define POISON 0xFF /* all-ones bytes: NaN in f32, bf16 and f16 */

/* ---- one quantized grouped problem ------------------------------------------------------------------------- */
typedef enum pattern {
    PAT_ALIGNED,     /* DeepGEMM's layout: each group one segment, padded with -1 rows to a multiple of `align` */
    PAT_SEGMENTS,    /* each group one segment, no padding */
    PAT_SCATTERED,   /* every row a random group or -1 */
    PAT_ALL_PADDING, /* every row -1 */
    PAT_MASKED_RANDOM, /* masked_m random in [0, max_m], with 0 and max_m present when G allows */
    PAT_MASKED_FULL,   /* masked_m = max_m */
    PAT_MASKED_EMPTY,  /* masked_m = 0 */
} pattern;

typedef struct gcase {
    bfp8_grouped_layout layout;
    int64_t groups, m, n, k, kb, nb, rows; /* rows: of A and Y (masked: groups * m) */
    bfp8_scale_format format;
    uint8_t *qa, *qb;
    float *sa, *sb;     /* row-major: sa [rows][kb] (for masked, G matrices of m rows), sb [G][nb][kb] */
    float *xa, *wb;     /* unquantized */
    int32_t *idx;       /* contiguous: [m] */
    int32_t *masked_m;  /* masked: [G] */
    float *bias;        /* [G][n] */
    double *exact_q;    /* independent: the quantized operands' product in double, without bias, [rows][n] */
} gcase;

static int32_t group_of_row(const gcase *c, int64_t r) {
    if (c->layout == BFP8_GROUPED_MASKED) {
        int64_t g = r / c->m;
        return r % c->m < c->masked_m[g] ? (int32_t)g : -1;
    }
    return c->idx[r];
}

static void fill_indices(gcase *c, pattern pat, int64_t align) {
    if (c->layout == BFP8_GROUPED_MASKED) {
        for (int64_t g = 0; g < c->groups; g++) {
            int32_t v = pat == PAT_MASKED_FULL ? (int32_t)c->m : pat == PAT_MASKED_EMPTY ? 0
                                                                : (int32_t)(test_rand_u64() % (uint64_t)(c->m + 1));
            if (pat == PAT_MASKED_RANDOM && c->groups >= 3 && g == 1) v = 0;
            if (pat == PAT_MASKED_RANDOM && c->groups >= 3 && g == 2) v = (int32_t)c->m;
            c->masked_m[g] = v;
        }
        return;
    }
    if (pat == PAT_ALL_PADDING || pat == PAT_SCATTERED) {
        for (int64_t r = 0; r < c->m; r++)
            c->idx[r] = pat == PAT_ALL_PADDING ? -1 : (int32_t)(test_rand_u64() % (uint64_t)(c->groups + 1)) - 1;
        return;
    }
    /* Segments in group order; some groups empty. The rows left at the end are padding. */
    int64_t r = 0;
    for (int64_t g = 0; g < c->groups && r < c->m; g++) {
        int64_t left = c->m - r, count = (int64_t)(test_rand_u64() % (uint64_t)(2 * c->m / c->groups + 2));
        if (g == c->groups - 1 && pat == PAT_SEGMENTS) count = left;
        if (count > left) count = left;
        for (int64_t i = 0; i < count; i++) c->idx[r++] = (int32_t)g;
        if (pat == PAT_ALIGNED)
            while (r < c->m && r % align) c->idx[r++] = -1;
    }
    while (r < c->m) c->idx[r++] = -1;
}

/* Fresh random operands: rows of A and weight rows of each group differ in magnitude by up to 2^+-4, and each
 * group has its own magnitude, so a row computed with the wrong group or scale shows. */
static gcase make_case(bfp8_grouped_layout layout, int64_t groups, int64_t m, int64_t n, int64_t k,
                       bfp8_scale_format format, pattern pat, int64_t align) {
    gcase c = {.layout = layout, .groups = groups, .m = m, .n = n, .k = k, .format = format};
    c.kb = (k + 127) / 128;
    c.nb = (n + 127) / 128;
    c.rows = layout == BFP8_GROUPED_MASKED ? groups * m : m;
    c.qa = malloc((size_t)(c.rows * k + 1));
    c.qb = malloc((size_t)(groups * n * k + 1));
    c.sa = malloc(sizeof(float) * (size_t)(c.rows * c.kb + 1));
    c.sb = malloc(sizeof(float) * (size_t)(groups * c.nb * c.kb + 1));
    c.xa = malloc(sizeof(float) * (size_t)(c.rows * k + 1));
    c.wb = malloc(sizeof(float) * (size_t)(groups * n * k + 1));
    c.idx = malloc(sizeof(int32_t) * (size_t)(m + 1));
    c.masked_m = malloc(sizeof(int32_t) * (size_t)(groups + 1));
    c.bias = malloc(sizeof(float) * (size_t)(groups * n + 1));
    c.exact_q = malloc(sizeof(double) * (size_t)(c.rows * n + 1));
    for (int64_t r = 0; r < c.rows; r++) {
        float s = ldexpf(1.0f, (int)(test_rand_u64() % 9) - 4);
        for (int64_t j = 0; j < k; j++) c.xa[r * k + j] = test_randn(s);
    }
    for (int64_t g = 0; g < groups; g++) {
        float gs = ldexpf(1.0f, (int)(g % 5) - 2) / sqrtf((float)(k ? k : 1));
        for (int64_t i = 0; i < n; i++) {
            float s = gs * ldexpf(1.0f, (int)(test_rand_u64() % 9) - 4);
            for (int64_t j = 0; j < k; j++) c.wb[(g * n + i) * k + j] = test_randn(s);
        }
    }
    for (int64_t i = 0; i < groups * n; i++) c.bias[i] = test_randn(0.5f);
    bfp8_scales sa;
    CHECK_OK(bfp8_scales_init(&sa, format, BFP8_LAYOUT_ROW_MAJOR, c.rows, c.kb, c.sa));
    CHECK_OK(bfp8_quantize_act(c.xa, BFP8_DTYPE_F32, c.rows, k, c.qa, &sa, NULL));
    for (int64_t g = 0; g < groups; g++) {
        bfp8_scales sb;
        CHECK_OK(bfp8_scales_init(&sb, format, BFP8_LAYOUT_ROW_MAJOR, c.nb, c.kb, c.sb + g * c.nb * c.kb));
        CHECK_OK(bfp8_quantize_weight(c.wb + g * n * k, BFP8_DTYPE_F32, n, k, c.qb + g * n * k, &sb, NULL));
    }
    fill_indices(&c, pat, align);
    /* Independent: every row with every group's weight would be G times the work; only the row's own group. */
    for (int64_t r = 0; r < c.rows; r++) {
        int32_t g = group_of_row(&c, r);
        for (int64_t i = 0; i < n; i++) {
            double acc = 0;
            if (g >= 0)
                for (int64_t b = 0; b < c.kb; b++) {
                    double part = 0;
                    for (int64_t t = b * 128; t < k && t < (b + 1) * 128; t++)
                        part += (double)bfp8_e4m3_to_f32(c.qa[r * k + t]) *
                                (double)bfp8_e4m3_to_f32(c.qb[(g * n + i) * k + t]);
                    acc += part * c.sa[r * c.kb + b] * c.sb[(g * c.nb + i / 128) * c.kb + b];
                }
            c.exact_q[r * n + i] = acc;
        }
    }
    return c;
}

static void free_case(gcase *c) {
    free(c->qa), free(c->qb), free(c->sa), free(c->sb), free(c->xa), free(c->wb), free(c->idx), free(c->masked_m);
    free(c->bias), free(c->exact_q);
}

/* Scales of `mats` row-major matrices of `rows` rows, converted to `layout` (matrices back to back). */
static void *scales_to(const float *row_major, int64_t mats, int64_t rows, int64_t kb, bfp8_scale_format format,
                       bfp8_scale_layout layout, bfp8_scales *desc) {
    size_t one = bfp8_scales_bytes(layout, rows, kb);
    char *buf = calloc((size_t)mats, one + 1);
    for (int64_t i = 0; i < mats; i++) {
        bfp8_scales src, dst;
        CHECK_OK(bfp8_scales_init(&src, format, BFP8_LAYOUT_ROW_MAJOR, rows, kb, (void *)(row_major + i * rows * kb)));
        CHECK_OK(bfp8_scales_init(&dst, format, layout, rows, kb, buf + (size_t)i * one));
        CHECK_OK(bfp8_scales_convert(&src, &dst));
    }
    CHECK_OK(bfp8_scales_init(desc, format, layout, rows, kb, buf));
    return buf;
}

/* Grouped args of a case; scale buffers returned for freeing. */
typedef struct run_bufs {
    void *sa, *sb, *bias;
} run_bufs;

static bfp8_grouped_gemm_args args_of(const gcase *c, void *y, bfp8_dtype y_dtype, bool bias, bfp8_dtype bias_dtype,
                                      bfp8_scale_layout la, bfp8_scale_layout lb, run_bufs *rb) {
    bfp8_grouped_gemm_args a = {.layout = c->layout, .groups = c->groups, .m = c->m, .n = c->n, .k = c->k,
                                .a = c->qa, .b = c->qb, .m_indices = c->idx, .masked_m = c->masked_m,
                                .y = y, .y_dtype = y_dtype, .device = BFP8_DEVICE_CPU};
    rb->sa = scales_to(c->sa, c->layout == BFP8_GROUPED_MASKED ? c->groups : 1, c->m, c->kb, c->format, la,
                       &a.a_scales);
    rb->sb = scales_to(c->sb, c->groups, c->nb, c->kb, c->format, lb, &a.b_scales);
    rb->bias = NULL;
    if (bias) {
        rb->bias = malloc(bfp8_dtype_size(bias_dtype) * (size_t)(c->groups * c->n + 1));
        for (int64_t i = 0; i < c->groups * c->n; i++) bfp8_store_f32(rb->bias, bias_dtype, i, c->bias[i]);
        a.bias = rb->bias;
        a.bias_dtype = bias_dtype;
    }
    return a;
}

static void free_bufs(run_bufs *rb) { free(rb->sa), free(rb->sb), free(rb->bias); }

static bfp8_dispatcher *strict_dispatcher(const char *name) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (d) CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, name));
    return d;
}

static double ref_tolerance(bfp8_dtype dt) { /* one rounding of the output dtype */
    return dt == BFP8_DTYPE_BF16 ? 4e-3 : dt == BFP8_DTYPE_F16 ? 5e-4 : 1e-6;
}
static double cpu_tolerance(bfp8_dtype dt) { /* docs/numerics.md, CPU backends */
    return dt == BFP8_DTYPE_BF16 ? 8e-3 : dt == BFP8_DTYPE_F16 ? 1e-3 : 1e-5;
}

static int cases_run;

/* The dense call of `d` on group g's rows of a case (gathered, in row order), into y_dense [rows_g][n]. */
static bfp8_status dense_on_group(bfp8_dispatcher *d, const gcase *c, const bfp8_grouped_gemm_args *ga, int64_t g,
                                  const int64_t *rows, int64_t count, void *y_dense) {
    uint8_t *a = malloc((size_t)(count * c->k + 1));
    float *sa = malloc(sizeof(float) * (size_t)(count * c->kb + 1));
    for (int64_t i = 0; i < count; i++) {
        memcpy(a + i * c->k, c->qa + rows[i] * c->k, (size_t)c->k);
        memcpy(sa + i * c->kb, c->sa + rows[i] * c->kb, sizeof(float) * (size_t)c->kb);
    }
    bfp8_gemm_args dg = {.m = count, .n = c->n, .k = c->k, .a = a, .b = c->qb + g * c->n * c->k,
                         .bias = ga->bias ? (const char *)ga->bias + (size_t)(g * c->n) * bfp8_dtype_size(ga->bias_dtype)
                                          : NULL,
                         .bias_dtype = ga->bias_dtype, .y = y_dense, .y_dtype = ga->y_dtype,
                         .device = BFP8_DEVICE_CPU};
    bfp8_scales_init(&dg.a_scales, c->format, BFP8_LAYOUT_ROW_MAJOR, count, c->kb, sa);
    bfp8_scales_init(&dg.b_scales, c->format, BFP8_LAYOUT_ROW_MAJOR, c->nb, c->kb, c->sb + g * c->nb * c->kb);
    bfp8_status st = bfp8_gemm(d, &dg);
    free(a), free(sa);
    return st;
}

/* One grouped call of backend `name` on a case, checked: every used row byte-equal to the dense call on its
 * group's rows, every unused row still poison, the whole against the independent product and (for cpu) ref. */
static void run_case(const char *name, const gcase *c, bfp8_dtype y_dtype, bool bias, bfp8_dtype bias_dtype,
                     bfp8_scale_layout la, bfp8_scale_layout lb, const char *label) {
    bfp8_dispatcher *d = strict_dispatcher(name);
    if (!d) return;
    const size_t ys = bfp8_dtype_size(y_dtype), row_bytes = (size_t)c->n * ys;
    void *y = malloc(row_bytes * (size_t)c->rows + 1);
    memset(y, POISON, row_bytes * (size_t)c->rows);
    run_bufs rb;
    bfp8_grouped_gemm_args ga = args_of(c, y, y_dtype, bias, bias_dtype, la, lb, &rb);
    char desc[256];
    snprintf(desc, sizeof desc, "%s %s %s G=%lld m=%lld n=%lld k=%lld out=%s scales=%s/%s,%s bias=%s", name, label,
             bfp8_grouped_layout_name(c->layout), (long long)c->groups, (long long)c->m, (long long)c->n,
             (long long)c->k, bfp8_dtype_name(y_dtype), bfp8_scale_format_name(c->format), bfp8_scale_layout_name(la),
             bfp8_scale_layout_name(lb), bias ? bfp8_dtype_name(bias_dtype) : "none");
    bfp8_status st = bfp8_grouped_gemm(d, &ga);
    CHECK(st == BFP8_OK, "%s: %s: %s", desc, bfp8_status_name(st), bfp8_last_error());
    cases_run++;
    if (st == BFP8_OK) {
        /* Unused rows untouched; used rows fully written. */
        int64_t touched = 0, unwritten = 0;
        for (int64_t r = 0; r < c->rows; r++) {
            const unsigned char *row = (const unsigned char *)y + (size_t)r * row_bytes;
            if (group_of_row(c, r) < 0) {
                for (size_t b = 0; b < row_bytes; b++) touched += row[b] != POISON;
            } else {
                for (int64_t j = 0; j < c->n; j++) unwritten += isnan(bfp8_load_f32(row, y_dtype, j));
            }
        }
        CHECK(touched == 0, "%s: %lld bytes of unused rows were written", desc, (long long)touched);
        CHECK(unwritten == 0, "%s: %lld outputs of used rows unwritten", desc, (long long)unwritten);

        /* Each group: byte for byte the dense call on its rows. */
        int64_t *rows = malloc(sizeof(int64_t) * (size_t)(c->rows + 1));
        void *yd = malloc(row_bytes * (size_t)(c->rows + 1));
        int64_t differing_groups = 0;
        for (int64_t g = 0; g < c->groups; g++) {
            int64_t count = 0;
            for (int64_t r = 0; r < c->rows; r++)
                if (group_of_row(c, r) == g) rows[count++] = r;
            if (!count) continue;
            CHECK_OK(dense_on_group(d, c, &ga, g, rows, count, yd));
            bool same = true;
            for (int64_t i = 0; i < count && same; i++)
                same = memcmp((const char *)y + (size_t)rows[i] * row_bytes, (const char *)yd + (size_t)i * row_bytes,
                              row_bytes) == 0;
            differing_groups += !same;
        }
        CHECK(differing_groups == 0, "%s: %lld group(s) differ from the dense call on their rows", desc,
              (long long)differing_groups);

        /* Against the independent product (+ bias as the output dtype's input), over the used rows. */
        double num = 0, den = 0;
        for (int64_t r = 0; r < c->rows; r++) {
            int32_t g = group_of_row(c, r);
            if (g < 0) continue;
            for (int64_t j = 0; j < c->n; j++) {
                double want = c->exact_q[r * c->n + j];
                if (bias) want += (double)bfp8_load_f32(rb.bias, bias_dtype, g * c->n + j);
                double got = (double)bfp8_load_f32((const char *)y + (size_t)r * row_bytes, y_dtype, j);
                num += (got - want) * (got - want);
                den += want * want;
            }
        }
        double err = den > 0 ? sqrt(num / den) : sqrt(num);
        double tol = strcmp(name, "ref") == 0 ? ref_tolerance(y_dtype) : cpu_tolerance(y_dtype);
        CHECK(err <= tol, "%s: relative error %.3g vs the independent product > %.1g", desc, err, tol);
        free(rows), free(yd);
    }
    free(y);
    free_bufs(&rb);
    bfp8_dispatcher_free(d);
}

static const char *const HOST_BACKENDS[] = {"ref", "cpu"};

/* ---- tests ---------------------------------------------------------------------------------------------------- */

/* G = 1: the grouped call is the dense call (on both layouts), across the cpu backend's small/large-M boundary. */
static void test_single_group(void) {
    const int64_t ms[] = {1, 7, 8, 9, 33};
    for (int b = 0; b < 2; b++)
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
            gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, 1, ms[i], 200, 300, BFP8_SCALE_FP32, PAT_SEGMENTS, 1);
            run_case(HOST_BACKENDS[b], &c, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                     BFP8_LAYOUT_ROW_MAJOR, "G=1");
            /* And the whole output equals one dense call on the whole A. */
            bfp8_dispatcher *d = strict_dispatcher(HOST_BACKENDS[b]);
            uint16_t *yg = malloc(sizeof(uint16_t) * (size_t)(c.m * c.n)), *yd = malloc(sizeof(uint16_t) * (size_t)(c.m * c.n));
            run_bufs rb;
            bfp8_grouped_gemm_args ga = args_of(&c, yg, BFP8_DTYPE_BF16, true, BFP8_DTYPE_BF16, BFP8_LAYOUT_ROW_MAJOR,
                                                BFP8_LAYOUT_ROW_MAJOR, &rb);
            CHECK_OK(bfp8_grouped_gemm(d, &ga));
            bfp8_gemm_args dg = {.m = c.m, .n = c.n, .k = c.k, .a = c.qa, .a_scales = ga.a_scales, .b = c.qb,
                                 .b_scales = ga.b_scales, .bias = ga.bias, .bias_dtype = ga.bias_dtype, .y = yd,
                                 .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
            CHECK_OK(bfp8_gemm(d, &dg));
            CHECK(memcmp(yg, yd, sizeof(uint16_t) * (size_t)(c.m * c.n)) == 0, "%s G=1 M=%lld: differs from dense",
                  HOST_BACKENDS[b], (long long)c.m);
            /* Masked with G = 1 and masked_m = max_m: the same bytes. */
            int32_t full = (int32_t)c.m;
            memset(yg, POISON, sizeof(uint16_t) * (size_t)(c.m * c.n));
            ga.layout = BFP8_GROUPED_MASKED;
            ga.masked_m = &full;
            CHECK_OK(bfp8_grouped_gemm(d, &ga));
            CHECK(memcmp(yg, yd, sizeof(uint16_t) * (size_t)(c.m * c.n)) == 0, "%s masked G=1 M=%lld: differs from dense",
                  HOST_BACKENDS[b], (long long)c.m);
            free_bufs(&rb);
            free(yg), free(yd);
            bfp8_dispatcher_free(d);
            free_case(&c);
        }
}

/* Every layout pattern, output dtype, scale format and scale layout, with and without bias, ragged N and K. */
static void test_layouts(void) {
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32};
    const pattern contiguous[] = {PAT_ALIGNED, PAT_SEGMENTS, PAT_SCATTERED, PAT_ALL_PADDING};
    const pattern masked[] = {PAT_MASKED_RANDOM, PAT_MASKED_FULL, PAT_MASKED_EMPTY};
    int variant = 0;
    for (int f = 0; f < 2; f++) {
        const bfp8_scale_format format = (bfp8_scale_format)f;
        for (int p = 0; p < 4; p++) {
            /* Ragged: N = 200 (a partial weight block), K = 300 (a partial K block); one aligned shape. */
            const int64_t n = p == 1 ? 256 : 200, k = p == 1 ? 256 : 300;
            gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, 5, 40, n, k, format, contiguous[p], 8);
            for (int b = 0; b < 2; b++, variant++) {
                const bfp8_scale_layout la = (bfp8_scale_layout)(variant % (f ? 4 : 3));
                const bfp8_scale_layout lb = (bfp8_scale_layout)((variant + 1) % (f ? 4 : 3));
                run_case(HOST_BACKENDS[b], &c, outs[variant % 3], variant % 2, outs[(variant / 2) % 3], la, lb,
                         "layouts");
            }
            free_case(&c);
        }
        for (int p = 0; p < 3; p++) {
            gcase c = make_case(BFP8_GROUPED_MASKED, 4, 12, 200, 300, format, masked[p], 1);
            for (int b = 0; b < 2; b++, variant++) {
                const bfp8_scale_layout la = (bfp8_scale_layout)(variant % (f ? 4 : 3));
                const bfp8_scale_layout lb = (bfp8_scale_layout)((variant + 2) % (f ? 4 : 3));
                run_case(HOST_BACKENDS[b], &c, outs[variant % 3], variant % 2, outs[(variant / 2) % 3], la, lb,
                         "layouts");
            }
            free_case(&c);
        }
    }
}

/* G = 256 (DeepSeek's expert count) on small N and K: most groups empty or tiny; groups run side by side. */
static void test_many_groups(void) {
    gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, 256, 300, 64, 160, BFP8_SCALE_UE8M0, PAT_SCATTERED, 1);
    for (int b = 0; b < 2; b++)
        run_case(HOST_BACKENDS[b], &c, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32, BFP8_LAYOUT_MN_MAJOR_ALIGNED,
                 BFP8_LAYOUT_ROW_MAJOR, "G=256");
    free_case(&c);
    c = make_case(BFP8_GROUPED_CONTIGUOUS, 256, 512, 32, 128, BFP8_SCALE_FP32, PAT_ALIGNED, 4);
    for (int b = 0; b < 2; b++)
        run_case(HOST_BACKENDS[b], &c, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                 BFP8_LAYOUT_MN_MAJOR, "G=256 aligned");
    free_case(&c);
    c = make_case(BFP8_GROUPED_MASKED, 256, 3, 64, 130, BFP8_SCALE_FP32, PAT_MASKED_RANDOM, 1);
    for (int b = 0; b < 2; b++)
        run_case(HOST_BACKENDS[b], &c, BFP8_DTYPE_F16, false, BFP8_DTYPE_F32, BFP8_LAYOUT_MN_MAJOR,
                 BFP8_LAYOUT_MN_MAJOR_ALIGNED, "G=256");
    free_case(&c);
}

/* The cpu backend on groups big enough to run one after the other, each threaded; and small enough to run side
 * by side: the bytes of both equal the dense calls (run_case), whatever the thread count. */
static void test_cpu_threads(void) {
    const int threads[] = {1, 2, 3};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        CHECK_OK(bfp8_set_num_threads(threads[t]));
        gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, 3, 150, 512, 1024, BFP8_SCALE_FP32, PAT_SEGMENTS, 1);
        run_case("cpu", &c, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR, BFP8_LAYOUT_ROW_MAJOR,
                 "threads big");
        free_case(&c);
        c = make_case(BFP8_GROUPED_MASKED, 6, 4, 1024, 512, BFP8_SCALE_UE8M0, PAT_MASKED_RANDOM, 1);
        run_case("cpu", &c, BFP8_DTYPE_BF16, true, BFP8_DTYPE_BF16, BFP8_LAYOUT_PACKED_UE8M0, BFP8_LAYOUT_PACKED_UE8M0,
                 "threads decode");
        free_case(&c);
    }
    CHECK_OK(bfp8_set_num_threads(0));
}

/* Empty shapes: nothing is written and nothing fails. */
static void test_empty(void) {
    for (int b = 0; b < 2; b++) {
        gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, 3, 0, 64, 128, BFP8_SCALE_FP32, PAT_SEGMENTS, 1);
        run_case(HOST_BACKENDS[b], &c, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                 BFP8_LAYOUT_ROW_MAJOR, "M=0");
        free_case(&c);
        c = make_case(BFP8_GROUPED_MASKED, 3, 0, 64, 128, BFP8_SCALE_FP32, PAT_MASKED_FULL, 1);
        run_case(HOST_BACKENDS[b], &c, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                 BFP8_LAYOUT_ROW_MAJOR, "max_m=0");
        free_case(&c);
        /* K = 0: the product is empty; the output is the bias (a one-row group takes the cpu's M = 1 kernel). */
        c = make_case(BFP8_GROUPED_CONTIGUOUS, 1, 1, 64, 0, BFP8_SCALE_FP32, PAT_SEGMENTS, 1);
        run_case(HOST_BACKENDS[b], &c, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                 BFP8_LAYOUT_ROW_MAJOR, "K=0");
        free_case(&c);
        c = make_case(BFP8_GROUPED_MASKED, 3, 5, 64, 0, BFP8_SCALE_FP32, PAT_MASKED_RANDOM, 1);
        run_case(HOST_BACKENDS[b], &c, BFP8_DTYPE_F32, true, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                 BFP8_LAYOUT_ROW_MAJOR, "K=0");
        free_case(&c);
    }
}

/* Bad contents and arguments: a clear error, and the output untouched (checked before anything is written). */
static void test_bad_input(void) {
    gcase c = make_case(BFP8_GROUPED_MASKED, 4, 8, 64, 128, BFP8_SCALE_FP32, PAT_MASKED_RANDOM, 1);
    gcase cc = make_case(BFP8_GROUPED_CONTIGUOUS, 4, 20, 64, 128, BFP8_SCALE_FP32, PAT_SEGMENTS, 1);
    const size_t ybytes = sizeof(float) * (size_t)(c.rows * c.n);
    float *y = malloc(ybytes);
    for (int b = 0; b < 2; b++) {
        bfp8_dispatcher *d = strict_dispatcher(HOST_BACKENDS[b]);
        run_bufs rb, rbc;
        bfp8_grouped_gemm_args ga = args_of(&c, y, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                                            BFP8_LAYOUT_ROW_MAJOR, &rb);
        bfp8_grouped_gemm_args gc = args_of(&cc, y, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                                            BFP8_LAYOUT_ROW_MAJOR, &rbc);
        const int32_t bad_masked[] = {(int32_t)c.m + 1, -1};
        for (int i = 0; i < 2; i++) {
            int32_t saved = c.masked_m[3];
            c.masked_m[3] = bad_masked[i];
            memset(y, POISON, ybytes);
            CHECK_STATUS(bfp8_grouped_gemm(d, &ga), BFP8_ERR_INVALID_ARGUMENT);
            CHECK(strstr(bfp8_last_error(), "masked_m[3]"), "%s: message '%s'", HOST_BACKENDS[b], bfp8_last_error());
            bool untouched = true;
            for (size_t j = 0; j < ybytes; j++) untouched &= ((unsigned char *)y)[j] == POISON;
            CHECK(untouched, "%s: masked_m=%d: output written before the error", HOST_BACKENDS[b], bad_masked[i]);
            c.masked_m[3] = saved;
        }
        /* At the boundary: masked_m = max_m is fine. */
        c.masked_m[3] = (int32_t)c.m;
        CHECK_OK(bfp8_grouped_gemm(d, &ga));
        /* Mixed scale formats are an fp32 problem, as for the dense call: the same values give the same bytes. */
        float *y_mixed = malloc(ybytes);
        memcpy(y_mixed, y, ybytes);
        bfp8_grouped_gemm_args mixed = ga;
        mixed.a_scales.format = BFP8_SCALE_UE8M0;
        bfp8_problem pm;
        CHECK_OK(bfp8_problem_from_grouped_gemm(&mixed, &pm));
        CHECK(pm.scale_format == BFP8_SCALE_FP32, "mixed formats: problem format %d", (int)pm.scale_format);
        CHECK_OK(bfp8_grouped_gemm(d, &mixed));
        CHECK(memcmp(y, y_mixed, ybytes) == 0, "%s: mixed scale formats changed the output", HOST_BACKENDS[b]);
        free(y_mixed);
        const int32_t bad_index[] = {4, -2, INT32_MAX, INT32_MIN};
        for (int i = 0; i < 4; i++) {
            int32_t saved = cc.idx[7];
            cc.idx[7] = bad_index[i];
            memset(y, POISON, ybytes);
            CHECK_STATUS(bfp8_grouped_gemm(d, &gc), BFP8_ERR_INVALID_ARGUMENT);
            CHECK(strstr(bfp8_last_error(), "m_indices[7]"), "%s: message '%s'", HOST_BACKENDS[b], bfp8_last_error());
            bool untouched = true;
            for (size_t j = 0; j < ybytes; j++) untouched &= ((unsigned char *)y)[j] == POISON;
            CHECK(untouched, "%s: index %d: output written before the error", HOST_BACKENDS[b], bad_index[i]);
            cc.idx[7] = saved;
        }
        cc.idx[7] = 3, cc.idx[8] = -1; /* the boundary values themselves */
        CHECK_OK(bfp8_grouped_gemm(d, &gc));

        bfp8_grouped_gemm_args bad = gc;
        bad.m_indices = NULL;
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.masked_m = NULL;
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.groups = 0;
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.layout = BFP8_GROUPED_NONE;
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.b_scales.rows = 2; /* one group's matrix has ceil(64/128) = 1 row */
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.a_scales.layout = BFP8_LAYOUT_PACKED_UE8M0; /* packed holds only UE8M0, these are fp32 */
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.a_scales.data = NULL;
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.expected_m = -1;
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.groups = INT64_MAX / 2;
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        bad = ga;
        bad.y_dtype = BFP8_DTYPE_E4M3;
        CHECK_STATUS(bfp8_grouped_gemm(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(bfp8_grouped_gemm(d, NULL), BFP8_ERR_INVALID_ARGUMENT);
        free_bufs(&rb), free_bufs(&rbc);
        bfp8_dispatcher_free(d);
    }
    free(y);
    free_case(&c), free_case(&cc);
}

/* ---- dispatch ------------------------------------------------------------------------------------------------- */
static int dense_only_calls, contiguous_calls;
static bfp8_status spy_gemm(const bfp8_backend *self, const bfp8_gemm_args *a) {
    __atomic_fetch_add(&dense_only_calls, 1, __ATOMIC_RELAXED);
    return BFP8_OK;
}
static bfp8_status spy_grouped(const bfp8_backend *self, const bfp8_grouped_gemm_args *a) {
    __atomic_fetch_add(&contiguous_calls, 1, __ATOMIC_RELAXED);
    return BFP8_OK;
}

#define ALL_DT (BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16))
#define ALL_LAYOUTS ((1u << BFP8_LAYOUT_COUNT) - 1)
static const bfp8_backend spy_dense = {
    .name = "dense_only",
    .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = ALL_DT, .scale_formats = 3, .a_layouts = ALL_LAYOUTS,
             .b_layouts = ALL_LAYOUTS, .bias_dtypes = ALL_DT, .priority = 50},
    .gemm = spy_gemm,
};
static const bfp8_backend spy_contiguous = {
    .name = "contiguous_only",
    .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = ALL_DT, .scale_formats = 3, .a_layouts = ALL_LAYOUTS,
             .b_layouts = ALL_LAYOUTS, .bias_dtypes = ALL_DT, .priority = 40,
             .grouped_layouts = BFP8_BIT(BFP8_GROUPED_CONTIGUOUS), .max_groups = 64},
    .gemm = spy_gemm,
    .grouped_gemm = spy_grouped,
};

static bfp8_problem grouped_problem(bfp8_grouped_layout layout, int64_t groups) {
    return (bfp8_problem){.device = BFP8_DEVICE_CPU, .m = 256, .n = 4096, .k = 7168, .out_dtype = BFP8_DTYPE_BF16,
                          .scale_format = BFP8_SCALE_FP32, .a_layouts = ALL_LAYOUTS, .b_layouts = ALL_LAYOUTS,
                          .grouped = layout, .groups = groups, .expected_m = 32};
}

static void test_dispatch(void) {
    const bfp8_backend *list[] = {&spy_dense, &spy_contiguous, &bfp8_backend_ref};
    char why[BFP8_REASON_MAX];
    bfp8_problem p = grouped_problem(BFP8_GROUPED_CONTIGUOUS, 8);
    CHECK(!bfp8_backend_check(&spy_dense, &p, why, sizeof why) && strcmp(why, "no grouped GEMM") == 0,
          "dense-only backend on a grouped problem: '%s'", why);
    CHECK(!bfp8_backend_check(&bfp8_backend_ref, &(bfp8_problem){.device = BFP8_DEVICE_CUDA, .arch = 90, .grouped = BFP8_GROUPED_MASKED, .groups = 1}, why, sizeof why) &&
              strstr(why, "runs on cpu"), "ref on cuda: '%s'", why);
    bfp8_decision dec;
    CHECK_OK(bfp8_select(list, 3, &p, BFP8_POLICY_AUTO, NULL, &dec));
    CHECK(dec.backend == &spy_contiguous, "auto on contiguous: %s", dec.backend ? dec.backend->name : "none");
    p.grouped = BFP8_GROUPED_NONE;
    CHECK_OK(bfp8_select(list, 3, &p, BFP8_POLICY_AUTO, NULL, &dec));
    CHECK(dec.backend == &spy_dense, "auto on dense: %s", dec.backend ? dec.backend->name : "none");
    /* Masked: the contiguous-only backend says why, ref takes it. */
    p = grouped_problem(BFP8_GROUPED_MASKED, 8);
    CHECK(!bfp8_backend_check(&spy_contiguous, &p, why, sizeof why) &&
              strcmp(why, "grouped layout masked not supported (supports contiguous)") == 0, "masked: '%s'", why);
    CHECK_OK(bfp8_select(list, 3, &p, BFP8_POLICY_AUTO, NULL, &dec));
    CHECK(dec.backend == &bfp8_backend_ref, "auto on masked: %s", dec.backend ? dec.backend->name : "none");
    /* The group limit, exactly at the boundary. */
    p = grouped_problem(BFP8_GROUPED_CONTIGUOUS, 64);
    CHECK(bfp8_backend_check(&spy_contiguous, &p, why, sizeof why), "64 groups: %s", why);
    p.groups = 65;
    CHECK(!bfp8_backend_check(&spy_contiguous, &p, why, sizeof why) && strstr(why, "65 groups exceed its maximum 64"),
          "65 groups: '%s'", why);
    /* Prefer a dense-only backend: a recorded fallback; strict: an error with the reason. */
    p = grouped_problem(BFP8_GROUPED_CONTIGUOUS, 8);
    CHECK_OK(bfp8_select(list, 3, &p, BFP8_POLICY_PREFER, "dense_only", &dec));
    CHECK(dec.fallback && dec.backend == &spy_contiguous && strcmp(dec.reason, "no grouped GEMM") == 0,
          "prefer dense_only: fallback %d to %s: %s", dec.fallback, dec.backend ? dec.backend->name : "none", dec.reason);
    CHECK_STATUS(bfp8_select(list, 3, &p, BFP8_POLICY_STRICT, "dense_only", &dec), BFP8_ERR_UNSUPPORTED);
    CHECK(strstr(bfp8_last_error(), "no grouped GEMM"), "strict: '%s'", bfp8_last_error());
    /* Bad grouped descriptors. */
    p.groups = 0;
    CHECK_STATUS(bfp8_select(list, 3, &p, BFP8_POLICY_AUTO, NULL, &dec), BFP8_ERR_INVALID_ARGUMENT);
    p = grouped_problem((bfp8_grouped_layout)7, 8);
    CHECK_STATUS(bfp8_select(list, 3, &p, BFP8_POLICY_AUTO, NULL, &dec), BFP8_ERR_INVALID_ARGUMENT);

    /* Registration: grouped layouts without an entry are refused. */
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create(&d));
    bfp8_backend broken = spy_contiguous;
    broken.name = "broken";
    broken.grouped_gemm = NULL;
    CHECK_STATUS(bfp8_dispatcher_add(d, &broken), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_OK(bfp8_dispatcher_add(d, &spy_dense));
    CHECK_OK(bfp8_dispatcher_add(d, &spy_contiguous));
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_PREFER, "dense_only"));

    /* Real calls through the spies: statistics count grouped calls apart, and the fallback with its reason. */
    gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, 3, 10, 64, 128, BFP8_SCALE_FP32, PAT_SEGMENTS, 1);
    float *y = malloc(sizeof(float) * (size_t)(c.rows * c.n));
    run_bufs rb;
    bfp8_grouped_gemm_args ga = args_of(&c, y, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                                        BFP8_LAYOUT_ROW_MAJOR, &rb);
    contiguous_calls = dense_only_calls = 0;
    CHECK_OK(bfp8_grouped_gemm(d, &ga));
    CHECK_OK(bfp8_grouped_gemm(d, &ga));
    CHECK(contiguous_calls == 2 && dense_only_calls == 0, "spies: grouped %d dense %d", contiguous_calls,
          dense_only_calls);
    CHECK(bfp8_dispatcher_calls(d, "contiguous_only") == 2 && bfp8_dispatcher_grouped_calls(d, "contiguous_only") == 2 &&
              bfp8_dispatcher_grouped_calls(d, "dense_only") == 0,
          "stats: calls %llu grouped %llu", (unsigned long long)bfp8_dispatcher_calls(d, "contiguous_only"),
          (unsigned long long)bfp8_dispatcher_grouped_calls(d, "contiguous_only"));
    bfp8_fallback_stat f;
    CHECK(bfp8_dispatcher_fallback_count(d) == 1 && bfp8_dispatcher_fallback_at(d, 0, &f) == BFP8_OK &&
              f.count == 2 && strcmp(f.reason, "no grouped GEMM") == 0 && strcmp(f.chosen, "contiguous_only") == 0,
          "fallback stat");
    /* Masked on this registry: nothing can run it, and the message says why for each. */
    gcase cm = make_case(BFP8_GROUPED_MASKED, 3, 4, 64, 128, BFP8_SCALE_FP32, PAT_MASKED_FULL, 1);
    float *ym = malloc(sizeof(float) * (size_t)(cm.rows * cm.n));
    run_bufs rbm;
    bfp8_grouped_gemm_args gm = args_of(&cm, ym, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR,
                                        BFP8_LAYOUT_ROW_MAJOR, &rbm);
    CHECK_STATUS(bfp8_grouped_gemm(d, &gm), BFP8_ERR_UNSUPPORTED);
    CHECK(strstr(bfp8_last_error(), "dense_only: no grouped GEMM") &&
              strstr(bfp8_last_error(), "contiguous_only: grouped layout masked not supported"),
          "masked: '%s'", bfp8_last_error());
    /* explain shows the grouped descriptor and each reason. */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    bfp8_problem pe;
    CHECK_OK(bfp8_problem_from_grouped_gemm(&ga, &pe));
    CHECK(pe.grouped == BFP8_GROUPED_CONTIGUOUS && pe.groups == 3 && pe.expected_m == 4, "problem: %d %lld %lld",
          (int)pe.grouped, (long long)pe.groups, (long long)pe.expected_m);
    CHECK_OK(bfp8_dispatcher_explain(d, &pe, mem));
    fclose(mem);
    CHECK(text && strstr(text, "grouped=contiguous groups=3 expected_m=4") && strstr(text, "no grouped GEMM") &&
              strstr(text, "choice:  contiguous_only (fallback from dense_only: no grouped GEMM)"),
          "explain:\n%s", text ? text : "");
    free(text);
    text = NULL;
    mem = open_memstream(&text, &len);
    bfp8_dispatcher_print_stats(d, mem);
    fclose(mem);
    CHECK(text && strstr(text, "contiguous_only 2 (2 grouped)"), "stats:\n%s", text ? text : "");
    free(text);
    free(y), free(ym);
    free_bufs(&rb), free_bufs(&rbm);
    free_case(&c), free_case(&cm);
    bfp8_dispatcher_free(d);
}

/* ---- grouped weights and the grouped linear ------------------------------------------------------------------ */
static void test_grouped_weight(void) {
    enum { G = 3, N = 200, K = 300 };
    const int64_t nb = 2, kb = 3;
    float *w = malloc(sizeof(float) * G * N * K);
    for (int64_t i = 0; i < G * N * K; i++) w[i] = test_randn(0.05f * (float)(1 + i / (N * K)));
    for (int f = 0; f < 2; f++) {
        bfp8_grouped_weight *gw = NULL;
        int64_t nonfinite = -1;
        CHECK_OK(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_F32, G, N, K, (bfp8_scale_format)f, &gw, &nonfinite));
        if (!gw) continue;
        CHECK(nonfinite == 0, "nonfinite %lld", (long long)nonfinite);
        bfp8_grouped_weight_info info;
        CHECK_OK(bfp8_grouped_weight_info_get(gw, &info));
        CHECK(info.groups == G && info.n == N && info.k == K && info.scale_format == (bfp8_scale_format)f &&
                  info.host_layouts == BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR) && info.device_layouts == 0,
              "info");
        const uint8_t *q;
        bfp8_scales s;
        CHECK_OK(bfp8_grouped_weight_view(gw, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &q, &s));
        CHECK(s.rows == nb && s.kblocks == kb, "view shape");
        /* Each group exactly what the dense quantizer gives on it. */
        for (int64_t g = 0; g < G; g++) {
            bfp8_weight *dw = NULL;
            CHECK_OK(bfp8_weight_quantize(w + g * N * K, BFP8_DTYPE_F32, N, K, (bfp8_scale_format)f, &dw, NULL));
            const uint8_t *dq;
            bfp8_scales ds;
            CHECK_OK(bfp8_weight_view(dw, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &dq, &ds));
            CHECK(memcmp(dq, q + g * N * K, N * K) == 0 &&
                      memcmp(ds.data, (float *)s.data + g * nb * kb, sizeof(float) * (size_t)(nb * kb)) == 0,
                  "group %lld differs from the dense quantizer", (long long)g);
            bfp8_weight_free(dw);
        }
        CHECK_STATUS(bfp8_grouped_weight_view(gw, BFP8_DEVICE_CPU, BFP8_LAYOUT_MN_MAJOR, &q, &s), BFP8_ERR_NOT_FOUND);
        CHECK_STATUS(bfp8_grouped_weight_view(gw, BFP8_DEVICE_CUDA, BFP8_LAYOUT_ROW_MAJOR, &q, &s), BFP8_ERR_NOT_FOUND);
        /* Create from another layout: the row-major form is derived, per group. */
        CHECK_OK(bfp8_grouped_weight_view(gw, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &q, &s));
        const bfp8_scale_layout other = f ? BFP8_LAYOUT_PACKED_UE8M0 : BFP8_LAYOUT_MN_MAJOR_ALIGNED;
        bfp8_scales os;
        void *obuf = scales_to(s.data, G, nb, kb, (bfp8_scale_format)f, other, &os);
        bfp8_grouped_weight *gw2 = NULL;
        CHECK_OK(bfp8_grouped_weight_create(q, G, N, K, &os, &gw2));
        if (gw2) {
            const uint8_t *q2;
            bfp8_scales s2;
            CHECK_OK(bfp8_grouped_weight_view(gw2, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &q2, &s2));
            CHECK(memcmp(q2, q, G * N * K) == 0 && memcmp(s2.data, s.data, sizeof(float) * G * nb * kb) == 0,
                  "create from %s", bfp8_scale_layout_name(other));
            CHECK_OK(bfp8_grouped_weight_info_get(gw2, &info));
            CHECK(info.host_layouts == (BFP8_BIT(other) | BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)), "layouts held");
            /* Preparing for every backend keeps what it holds; CUDA backends are unavailable here or add theirs. */
            CHECK_OK(bfp8_grouped_weight_prepare(gw2, NULL, "cpu"));
            CHECK_STATUS(bfp8_grouped_weight_prepare(gw2, NULL, "nosuch"), BFP8_ERR_NOT_FOUND);
        }
        free(obuf);
        bfp8_grouped_weight_free(gw2);
        if (f == BFP8_SCALE_UE8M0) {
            /* A UE8M0 claim is checked in every group, not only the first (as bfp8_weight_create checks it). */
            float *ns = malloc(sizeof(float) * G * nb * kb);
            memcpy(ns, s.data, sizeof(float) * G * nb * kb);
            ns[(G - 1) * nb * kb + 1] *= 1.5f;
            bfp8_scales bs;
            CHECK_OK(bfp8_scales_init(&bs, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, nb, kb, ns));
            gw2 = NULL;
            CHECK_STATUS(bfp8_grouped_weight_create(q, G, N, K, &bs, &gw2), BFP8_ERR_INVALID_ARGUMENT);
            CHECK(gw2 == NULL && strstr(bfp8_last_error(), "group 2"), "non-power-of-two UE8M0 scale: %s",
                  bfp8_last_error());
            bfp8_grouped_weight_free(gw2);
            free(ns);
        }
        bfp8_grouped_weight_free(gw);
    }
    bfp8_grouped_weight *bad = NULL;
    CHECK_STATUS(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_F32, 0, N, K, BFP8_SCALE_FP32, &bad, NULL),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_grouped_weight_quantize(NULL, BFP8_DTYPE_F32, G, N, K, BFP8_SCALE_FP32, &bad, NULL),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_E4M3, G, N, K, BFP8_SCALE_FP32, &bad, NULL),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK(bad == NULL, "no weight on failure");
    free(w);
}

/* The store both weights share (src/weight_store.h): a grouped weight prepared for a backend of every scale layout
 * holds, group by group, the bytes of G dense weights prepared the same way (fp8 codes and each layout's scale
 * matrix), also when created from one of those layouts; a backend without a grouped GEMM adds nothing to it. */
static void test_grouped_weight_forms(void) {
    enum { G = 3, N = 200, K = 300 }; /* ragged: the aligned and packed layouts pad their rows */
    float *w = malloc(sizeof(float) * G * N * K);
    for (int64_t i = 0; i < G * N * K; i++) w[i] = test_randn(0.05f * (float)(1 + i / (N * K)));
    bfp8_dispatcher *spies = test_layout_spies(BFP8_DEVICE_CPU);
    for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT && spies; f++) {
        const bfp8_scale_format format = (bfp8_scale_format)f;
        const uint32_t all = bfp8_scale_layouts_for(format);
        bfp8_grouped_weight *gw = NULL, *gw2 = NULL;
        bfp8_weight *dw[G] = {NULL};
        CHECK_OK(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_F32, G, N, K, format, &gw, NULL));
        CHECK_OK(bfp8_grouped_weight_prepare(gw, spies, NULL));
        bfp8_grouped_weight_info gi = {0};
        CHECK_OK(bfp8_grouped_weight_info_get(gw, &gi));
        CHECK(gi.host_layouts == all && gi.device_layouts == 0, "%s: grouped layouts %#x, want %#x",
              bfp8_scale_format_name(format), gi.host_layouts, all);
        for (int64_t g = 0; g < G; g++) {
            CHECK_OK(bfp8_weight_quantize(w + g * N * K, BFP8_DTYPE_F32, N, K, format, &dw[g], NULL));
            CHECK_OK(bfp8_weight_prepare(dw[g], spies, NULL));
            bfp8_weight_info di = {0};
            CHECK_OK(bfp8_weight_info_get(dw[g], &di));
            CHECK(di.host_layouts == all && di.device_layouts == 0, "dense layouts %#x", di.host_layouts);
        }
        for (int l = 0; l < BFP8_LAYOUT_COUNT && gw; l++) {
            if (!(all & BFP8_BIT(l))) continue;
            const uint8_t *gq;
            bfp8_scales gs;
            CHECK_OK(bfp8_grouped_weight_view(gw, BFP8_DEVICE_CPU, (bfp8_scale_layout)l, &gq, &gs));
            const size_t stride = bfp8_grouped_scale_stride(&gs);
            for (int64_t g = 0; g < G && dw[g]; g++) {
                const uint8_t *dq;
                bfp8_scales ds;
                CHECK_OK(bfp8_weight_view(dw[g], BFP8_DEVICE_CPU, (bfp8_scale_layout)l, &dq, &ds));
                CHECK(ds.format == gs.format && ds.layout == gs.layout && ds.rows == gs.rows &&
                          ds.kblocks == gs.kblocks && memcmp(dq, gq + g * N * K, N * K) == 0 &&
                          memcmp(ds.data, (const char *)gs.data + g * stride, stride) == 0,
                      "%s %s: group %lld differs from the dense weight", bfp8_scale_format_name(format),
                      bfp8_scale_layout_name((bfp8_scale_layout)l), (long long)g);
            }
            /* Created from this layout, then prepared: every layout's bytes are the quantized weight's. */
            CHECK_OK(bfp8_grouped_weight_create(gq, G, N, K, &gs, &gw2));
            if (gw2) CHECK_OK(bfp8_grouped_weight_prepare(gw2, spies, NULL));
            for (int l2 = 0; l2 < BFP8_LAYOUT_COUNT && gw2; l2++) {
                if (!(all & BFP8_BIT(l2))) continue;
                const uint8_t *q1, *q2;
                bfp8_scales s1, s2;
                CHECK_OK(bfp8_grouped_weight_view(gw, BFP8_DEVICE_CPU, (bfp8_scale_layout)l2, &q1, &s1));
                CHECK_OK(bfp8_grouped_weight_view(gw2, BFP8_DEVICE_CPU, (bfp8_scale_layout)l2, &q2, &s2));
                CHECK(memcmp(q1, q2, G * N * K) == 0 &&
                          memcmp(s1.data, s2.data, (size_t)G * bfp8_grouped_scale_stride(&s1)) == 0,
                      "%s: created from %s, the %s form differs", bfp8_scale_format_name(format),
                      bfp8_scale_layout_name((bfp8_scale_layout)l), bfp8_scale_layout_name((bfp8_scale_layout)l2));
            }
            bfp8_grouped_weight_free(gw2);
            gw2 = NULL;
        }
        for (int64_t g = 0; g < G; g++) bfp8_weight_free(dw[g]);
        bfp8_grouped_weight_free(gw);
    }
    bfp8_dispatcher_free(spies);

    /* A backend with only a dense GEMM: the dense weight gets its layout, the grouped one nothing. */
    static const bfp8_backend dense_only = {
        .name = "dense_only",
        .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = BFP8_BIT(BFP8_DTYPE_F32),
                 .scale_formats = BFP8_BIT(BFP8_SCALE_FP32), .a_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR),
                 .b_layouts = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR)},
        .gemm = test_spy_gemm,
    };
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create(&d));
    if (d) CHECK_OK(bfp8_dispatcher_add(d, &dense_only));
    bfp8_grouped_weight *gw = NULL;
    bfp8_weight *dw = NULL;
    CHECK_OK(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_F32, G, N, K, BFP8_SCALE_FP32, &gw, NULL));
    CHECK_OK(bfp8_weight_quantize(w, BFP8_DTYPE_F32, N, K, BFP8_SCALE_FP32, &dw, NULL));
    if (d && gw && dw) {
        CHECK_OK(bfp8_grouped_weight_prepare(gw, d, "dense_only"));
        CHECK_OK(bfp8_weight_prepare(dw, d, "dense_only"));
        bfp8_grouped_weight_info gi;
        bfp8_weight_info di;
        CHECK_OK(bfp8_grouped_weight_info_get(gw, &gi));
        CHECK_OK(bfp8_weight_info_get(dw, &di));
        CHECK(gi.host_layouts == BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR), "grouped weight prepared for a dense-only backend");
        CHECK(di.host_layouts == (BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR) | BFP8_BIT(BFP8_LAYOUT_MN_MAJOR)),
              "dense weight not prepared for its backend");
    }
    bfp8_grouped_weight_free(gw);
    bfp8_weight_free(dw);
    bfp8_dispatcher_free(d);
    free(w);
}

/* The grouped linear equals quantize (the library's quantizer) + grouped GEMM, byte for byte; unused rows are
 * neither written nor quantized (their non-finite values are not counted). */
static void test_grouped_linear(void) {
    enum { G = 4, N = 200, K = 300, M = 10 };
    const int64_t kb = 3;
    float *w = malloc(sizeof(float) * G * N * K);
    for (int64_t i = 0; i < G * N * K; i++) w[i] = test_randn(0.05f);
    for (int lay = 0; lay < 2; lay++)
        for (int b = 0; b < 2; b++) {
            const bool masked = lay == 1;
            const int64_t rows = masked ? G * M : M;
            bfp8_dispatcher *d = strict_dispatcher(HOST_BACKENDS[b]);
            bfp8_grouped_weight *gw = NULL;
            CHECK_OK(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_F32, G, N, K, BFP8_SCALE_UE8M0, &gw, NULL));
            CHECK_OK(bfp8_grouped_weight_prepare(gw, d, NULL));
            uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(rows * K));
            for (int64_t i = 0; i < rows * K; i++) x[i] = bfp8_bf16_from_f32(test_randn(1.0f));
            int32_t idx[M] = {2, 2, -1, 0, 0, 0, -1, 3, 2, -1};
            int32_t counts[G] = {3, 0, 10, 1};
            /* Garbage where nothing is used: NaN in a padding row and beyond masked_m. */
            if (masked) x[(0 * M + 5) * K + 7] = 0x7FC0, x[(1 * M + 0) * K] = 0x7FC0;
            else x[2 * K + 1] = 0x7FC0;
            float *bias = malloc(sizeof(float) * G * N);
            for (int i = 0; i < G * N; i++) bias[i] = test_randn(0.3f);
            const size_t ybytes = sizeof(uint16_t) * (size_t)(rows * N);
            uint16_t *y = malloc(ybytes), *y2 = malloc(ybytes);
            memset(y, POISON, ybytes), memset(y2, POISON, ybytes);
            bfp8_grouped_linear_args la = {.layout = masked ? BFP8_GROUPED_MASKED : BFP8_GROUPED_CONTIGUOUS,
                                           .x = x, .x_dtype = BFP8_DTYPE_BF16, .m = M, .m_indices = idx,
                                           .masked_m = counts, .bias = bias, .bias_dtype = BFP8_DTYPE_F32, .y = y,
                                           .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
            bfp8_dispatcher_reset_stats(d);
            CHECK_OK(bfp8_grouped_linear(d, gw, &la));
            CHECK(bfp8_dispatcher_nonfinite_inputs(d) == 0, "%s: %llu non-finite counted from unused rows",
                  HOST_BACKENDS[b], (unsigned long long)bfp8_dispatcher_nonfinite_inputs(d));
            CHECK(bfp8_dispatcher_grouped_calls(d, HOST_BACKENDS[b]) == 1, "grouped call counted");
            bfp8_problem p;
            CHECK_OK(bfp8_problem_from_grouped_linear(gw, &la, &p));
            CHECK(p.grouped == la.layout && p.groups == G && p.n == N && p.k == K && p.m == M &&
                      p.expected_m == (masked ? M : 3) && p.scale_format == BFP8_SCALE_UE8M0,
                  "linear problem");
            /* By hand: quantize every row, then the grouped GEMM. */
            uint8_t *qa = malloc((size_t)(rows * K));
            float *sa = malloc(sizeof(float) * (size_t)(rows * kb));
            bfp8_scales sd;
            CHECK_OK(bfp8_scales_init(&sd, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, rows, kb, sa));
            CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_BF16, rows, K, qa, &sd, NULL));
            bfp8_grouped_gemm_args ga = {.layout = la.layout, .groups = G, .m = M, .n = N, .k = K, .a = qa,
                                         .m_indices = idx, .masked_m = counts, .bias = bias,
                                         .bias_dtype = BFP8_DTYPE_F32, .y = y2, .y_dtype = BFP8_DTYPE_BF16,
                                         .device = BFP8_DEVICE_CPU};
            CHECK_OK(bfp8_scales_init(&ga.a_scales, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, M, kb, sa));
            CHECK_OK(bfp8_grouped_weight_view(gw, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &ga.b, &ga.b_scales));
            CHECK_OK(bfp8_grouped_gemm(d, &ga));
            CHECK(memcmp(y, y2, ybytes) == 0, "%s %s: linear differs from quantize + grouped gemm", HOST_BACKENDS[b],
                  masked ? "masked" : "contiguous");
            int64_t touched = 0;
            for (int64_t r = 0; r < rows; r++) {
                bool used = masked ? r % M < counts[r / M] : idx[r] >= 0;
                for (int64_t j = 0; j < N && !used; j++) touched += y[r * N + j] != 0xFFFF;
            }
            CHECK(touched == 0, "%s: %lld outputs of unused rows written", HOST_BACKENDS[b], (long long)touched);
            /* A NaN in a used row is counted. */
            x[5] = 0x7FC0; /* row 0: used in both layouts */
            CHECK_OK(bfp8_grouped_linear(d, gw, &la));
            CHECK(bfp8_dispatcher_nonfinite_inputs(d) == 1, "%s: non-finite in a used row counted %llu",
                  HOST_BACKENDS[b], (unsigned long long)bfp8_dispatcher_nonfinite_inputs(d));
            /* Bad contents are refused before anything is written. */
            counts[1] = M + 1;
            memset(y, POISON, ybytes);
            if (masked) {
                CHECK_STATUS(bfp8_grouped_linear(d, gw, &la), BFP8_ERR_INVALID_ARGUMENT);
                CHECK(y[0] == 0xFFFF, "written before the error");
            }
            counts[1] = 0;
            bfp8_grouped_linear_args bad = la;
            bad.x = NULL;
            CHECK_STATUS(bfp8_grouped_linear(d, gw, &bad), BFP8_ERR_INVALID_ARGUMENT);
            bad = la;
            bad.x_dtype = BFP8_DTYPE_I32;
            CHECK_STATUS(bfp8_grouped_linear(d, gw, &bad), BFP8_ERR_INVALID_ARGUMENT);
            CHECK_STATUS(bfp8_grouped_linear(d, NULL, &la), BFP8_ERR_INVALID_ARGUMENT);
            free(qa), free(sa), free(x), free(bias), free(y), free(y2);
            bfp8_grouped_weight_free(gw);
            bfp8_dispatcher_free(d);
        }
    free(w);
}

/* Grouped linear validated through stand-ins for A, B and their scales: a y anywhere (here in this program's
 * static data, a few MB past the library's read-only data when linked statically, inside the G*N*K bytes a
 * stand-in for B would span) is no overlap, and the call gives the bytes it gives with y on the heap. */
static float static_y[2][2048];

static void test_grouped_linear_y_anywhere(void) {
    enum { G = 4, N = 2048, K = 4096, M = 2 };
    uint8_t *q = calloc((size_t)G * N * K, 1);
    float *s = malloc(sizeof(float) * G * (N / 128) * (K / 128)), *x = malloc(sizeof(float) * M * K);
    float *y = malloc(sizeof static_y);
    for (size_t i = 0; i < (size_t)G * N * K; i += 4093) q[i] = (uint8_t)(test_randn(40.0f)) & 0x7F;
    for (int i = 0; i < G * (N / 128) * (K / 128); i++) s[i] = 0.5f;
    for (int i = 0; i < M * K; i++) x[i] = test_randn(1.0f);
    bfp8_scales sd;
    bfp8_grouped_weight *w = NULL;
    CHECK_OK(bfp8_scales_init(&sd, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, N / 128, K / 128, s));
    CHECK_OK(bfp8_grouped_weight_create(q, G, N, K, &sd, &w));
    int32_t idx[M] = {3, 1};
    bfp8_grouped_linear_args la = {.layout = BFP8_GROUPED_CONTIGUOUS, .x = x, .x_dtype = BFP8_DTYPE_F32, .m = M,
                                   .m_indices = idx, .y = y, .y_dtype = BFP8_DTYPE_F32, .device = BFP8_DEVICE_CPU};
    bfp8_dispatcher *d = strict_dispatcher("cpu");
    CHECK_OK(bfp8_grouped_linear(d, w, &la));
    la.y = static_y;
    bfp8_problem p;
    CHECK_OK(bfp8_problem_from_grouped_linear(w, &la, &p));
    CHECK_OK(bfp8_grouped_linear(d, w, &la));
    CHECK(memcmp(y, static_y, sizeof static_y) == 0, "static y: other bytes than heap y");
    bfp8_dispatcher_free(d);
    bfp8_grouped_weight_free(w);
    free(q), free(s), free(x), free(y);
}

/* ---- loading a checkpoint's experts --------------------------------------------------------------------------- */
typedef struct synth_weight {
    uint8_t *q;
    float *s;
    int64_t n, k;
} synth_weight;

static synth_weight synth(int64_t n, int64_t k) {
    synth_weight w = {.n = n, .k = k};
    const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
    w.q = malloc((size_t)(n * k));
    w.s = malloc(sizeof(float) * (size_t)(nb * kb));
    for (int64_t i = 0; i < n * k; i++) w.q[i] = (uint8_t)(test_rand_u64() % 0x7E); /* finite, positive codes */
    for (int64_t i = 0; i < nb * kb; i++) w.s[i] = 0.001f * (1.0f + (float)(test_rand_u64() % 1000));
    return w;
}

static void add_pair(bfp8_tensor *t, size_t *count, char names[][96], const char *name, const synth_weight *w) {
    snprintf(names[*count], 96, "%s", name);
    t[*count] = (bfp8_tensor){.name = names[*count], .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {w->n, w->k},
                              .data = w->q, .nbytes = (size_t)(w->n * w->k)};
    (*count)++;
    snprintf(names[*count], 96, "%s_scale_inv", name);
    const int64_t nb = (w->n + 127) / 128, kb = (w->k + 127) / 128;
    t[*count] = (bfp8_tensor){.name = names[*count], .dtype = BFP8_DTYPE_F32, .ndim = 2, .shape = {nb, kb},
                              .data = w->s, .nbytes = sizeof(float) * (size_t)(nb * kb)};
    (*count)++;
}

static void test_load_experts(void) {
    enum { E = 5, I = 256, H = 300, LAYER = 3 };
    synth_weight gate[E], up[E], down[E];
    for (int e = 0; e < E; e++) gate[e] = synth(I, H), up[e] = synth(I, H), down[e] = synth(H, I);
    /* Two shards: experts 0-2 in the first (with an unrelated tensor), 3-4 in the second. */
    char dir[] = "/tmp/bfp8_grouped_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char paths[2][160];
    bfp8_tensor t[2][3 * E * 2 + 2];
    char names[2][3 * E * 2 + 2][96];
    size_t count[2] = {0, 0};
    for (int e = 0; e < E; e++) {
        const int shard = e < 3 ? 0 : 1;
        char base[96];
        snprintf(base, sizeof base, "model.layers.%d.mlp.experts.%d.gate_proj.weight", LAYER, e);
        add_pair(t[shard], &count[shard], names[shard], base, &gate[e]);
        snprintf(base, sizeof base, "model.layers.%d.mlp.experts.%d.up_proj.weight", LAYER, e);
        add_pair(t[shard], &count[shard], names[shard], base, &up[e]);
        snprintf(base, sizeof base, "model.layers.%d.mlp.experts.%d.down_proj.weight", LAYER, e);
        add_pair(t[shard], &count[shard], names[shard], base, &down[e]);
    }
    float other = 1.5f;
    t[0][count[0]++] = (bfp8_tensor){.name = "model.norm.weight", .dtype = BFP8_DTYPE_F32, .ndim = 1, .shape = {1},
                                     .data = &other, .nbytes = 4};
    bfp8_safetensors *files[2] = {NULL, NULL};
    for (int s = 0; s < 2; s++) {
        snprintf(paths[s], sizeof paths[s], "%s/model-%05d-of-00002.safetensors", dir, s + 1);
        CHECK_OK(bfp8_safetensors_write(paths[s], t[s], count[s]));
        CHECK_OK(bfp8_safetensors_open(paths[s], &files[s]));
    }
    const bfp8_safetensors *const *fl = (const bfp8_safetensors *const *)files;
    if (files[0] && files[1]) {
        bfp8_grouped_weight *gu = NULL, *dn = NULL;
        CHECK_OK(bfp8_grouped_weight_load_experts(fl, 2, LAYER, BFP8_EXPERT_GATE_UP, 0, &gu));
        CHECK_OK(bfp8_grouped_weight_load_experts(fl, 2, LAYER, BFP8_EXPERT_DOWN, 0, &dn));
        if (gu && dn) {
            bfp8_grouped_weight_info gi, di;
            CHECK_OK(bfp8_grouped_weight_info_get(gu, &gi));
            CHECK_OK(bfp8_grouped_weight_info_get(dn, &di));
            CHECK(gi.groups == E && gi.n == 2 * I && gi.k == H && gi.scale_format == BFP8_SCALE_FP32, "gate_up shape");
            CHECK(di.groups == E && di.n == H && di.k == I, "down shape");
            const uint8_t *q;
            bfp8_scales s;
            CHECK_OK(bfp8_grouped_weight_view(gu, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &q, &s));
            int bad = 0;
            const int64_t kb = (H + 127) / 128, ib = I / 128;
            for (int e = 0; e < E; e++) {
                /* Gate rows first, then up: rows and scale rows. */
                bad += memcmp(q + (size_t)e * 2 * I * H, gate[e].q, (size_t)I * H) != 0;
                bad += memcmp(q + (size_t)e * 2 * I * H + (size_t)I * H, up[e].q, (size_t)I * H) != 0;
                for (int64_t r = 0; r < 2 * ib; r++)
                    for (int64_t c = 0; c < kb; c++)
                        bad += bfp8_scales_at(&(bfp8_scales){.format = s.format, .layout = s.layout, .rows = s.rows,
                                                              .kblocks = s.kblocks,
                                                              .data = (char *)s.data + (size_t)e * bfp8_grouped_scale_stride(&s)},
                                               r, c) != (r < ib ? gate[e].s : up[e].s)[(r % ib) * kb + c];
            }
            CHECK(bad == 0, "gate_up: %d mismatches", bad);
            CHECK_OK(bfp8_grouped_weight_view(dn, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &q, &s));
            bad = 0;
            const int64_t hb = (H + 127) / 128, ikb = I / 128;
            for (int e = 0; e < E; e++) {
                bad += memcmp(q + (size_t)e * H * I, down[e].q, (size_t)H * I) != 0;
                bad += memcmp((float *)s.data + e * hb * ikb, down[e].s, sizeof(float) * (size_t)(hb * ikb)) != 0;
            }
            CHECK(bad == 0, "down: %d mismatches", bad);

            /* The fused weight computes gate and up at once: a grouped call equals two per-part dense ones. */
            gcase c = make_case(BFP8_GROUPED_MASKED, E, 3, 2 * I, H, BFP8_SCALE_FP32, PAT_MASKED_FULL, 1);
            bfp8_grouped_gemm_args ga = {.layout = BFP8_GROUPED_MASKED, .groups = E, .m = 3, .n = 2 * I, .k = H,
                                         .a = c.qa, .masked_m = c.masked_m, .y_dtype = BFP8_DTYPE_F32,
                                         .device = BFP8_DEVICE_CPU};
            float *y = malloc(sizeof(float) * E * 3 * 2 * I), *yd = malloc(sizeof(float) * 3 * I);
            ga.y = y;
            CHECK_OK(bfp8_scales_init(&ga.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 3, kb, c.sa));
            CHECK_OK(bfp8_grouped_weight_view(gu, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &ga.b, &ga.b_scales));
            bfp8_dispatcher *d = strict_dispatcher("cpu");
            CHECK_OK(bfp8_grouped_gemm(d, &ga));
            bad = 0;
            for (int e = 0; e < E; e++)
                for (int part = 0; part < 2; part++) {
                    const synth_weight *sw = part ? &up[e] : &gate[e];
                    bfp8_gemm_args dg = {.m = 3, .n = I, .k = H, .a = c.qa + e * 3 * H, .b = sw->q, .y = yd,
                                         .y_dtype = BFP8_DTYPE_F32, .device = BFP8_DEVICE_CPU};
                    bfp8_scales_init(&dg.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 3, kb, c.sa + e * 3 * kb);
                    bfp8_scales_init(&dg.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, ib, kb, sw->s);
                    CHECK_OK(bfp8_gemm(d, &dg));
                    for (int r = 0; r < 3; r++)
                        bad += memcmp(y + ((size_t)e * 3 + r) * 2 * I + part * I, yd + r * I, sizeof(float) * I) != 0;
                }
            CHECK(bad == 0, "fused gate_up call vs the parts: %d rows differ", bad);
            free(y), free(yd);
            bfp8_dispatcher_free(d);
            free_case(&c);
        }
        bfp8_grouped_weight_free(gu);
        bfp8_grouped_weight_free(dn);

        /* An explicit count: fewer is fine, more is NOT_FOUND; a missing layer; one shard alone has 3 experts. */
        bfp8_grouped_weight *x = NULL;
        CHECK_OK(bfp8_grouped_weight_load_experts(fl, 2, LAYER, BFP8_EXPERT_DOWN, 2, &x));
        bfp8_grouped_weight_info xi;
        if (x) CHECK(bfp8_grouped_weight_info_get(x, &xi) == BFP8_OK && xi.groups == 2, "2 experts");
        bfp8_grouped_weight_free(x);
        x = NULL;
        CHECK_STATUS(bfp8_grouped_weight_load_experts(fl, 2, LAYER, BFP8_EXPERT_DOWN, E + 1, &x), BFP8_ERR_NOT_FOUND);
        CHECK(strstr(bfp8_last_error(), "experts.5.down_proj"), "message '%s'", bfp8_last_error());
        CHECK_STATUS(bfp8_grouped_weight_load_experts(fl, 2, LAYER + 1, BFP8_EXPERT_GATE_UP, 0, &x), BFP8_ERR_NOT_FOUND);
        CHECK_OK(bfp8_grouped_weight_load_experts(fl, 1, LAYER, BFP8_EXPERT_GATE_UP, 0, &x));
        if (x) CHECK(bfp8_grouped_weight_info_get(x, &xi) == BFP8_OK && xi.groups == 3, "first shard: 3 experts");
        bfp8_grouped_weight_free(x);
        x = NULL;
        CHECK_STATUS(bfp8_grouped_weight_load_experts(NULL, 0, LAYER, BFP8_EXPERT_DOWN, 0, &x),
                     BFP8_ERR_INVALID_ARGUMENT);
        CHECK(x == NULL, "no weight on failure");
    }
    for (int s = 0; s < 2; s++) bfp8_safetensors_close(files[s]);

    /* Malformed checkpoints: a missing scale, an expert of another shape, an intermediate size that cannot fuse,
     * a wrong dtype. Each in its own one-file checkpoint. */
    for (int variant = 0; variant < 4; variant++) {
        bfp8_tensor tt[12];
        char nn[12][96];
        size_t cnt = 0;
        synth_weight odd_gate = synth(200, H), odd_up = synth(200, H), small = synth(I, 128);
        for (int e = 0; e < 2; e++) {
            char base[96];
            const bool odd = variant == 2, other_shape = variant == 1 && e == 1;
            snprintf(base, sizeof base, "model.layers.0.mlp.experts.%d.gate_proj.weight", e);
            add_pair(tt, &cnt, nn, base, odd ? &odd_gate : other_shape ? &small : &gate[e]);
            snprintf(base, sizeof base, "model.layers.0.mlp.experts.%d.up_proj.weight", e);
            add_pair(tt, &cnt, nn, base, odd ? &odd_up : other_shape ? &small : &up[e]);
        }
        if (variant == 0) cnt--; /* drop expert 1's up_proj scale */
        if (variant == 3) tt[0].dtype = BFP8_DTYPE_BF16, tt[0].shape[1] = H / 2;
        char path[200];
        snprintf(path, sizeof path, "%s/bad%d.safetensors", dir, variant);
        CHECK_OK(bfp8_safetensors_write(path, tt, cnt));
        bfp8_safetensors *f = NULL;
        CHECK_OK(bfp8_safetensors_open(path, &f));
        bfp8_grouped_weight *x = NULL;
        const bfp8_status want[] = {BFP8_ERR_NOT_FOUND, BFP8_ERR_FORMAT, BFP8_ERR_UNSUPPORTED, BFP8_ERR_FORMAT};
        if (f) {
            CHECK_STATUS(bfp8_grouped_weight_load_experts((const bfp8_safetensors *const *)&f, 1, 0,
                                                          BFP8_EXPERT_GATE_UP, 0, &x), want[variant]);
            CHECK(x == NULL, "variant %d: no weight on failure", variant);
        }
        bfp8_safetensors_close(f);
        remove(path);
        free(odd_gate.q), free(odd_gate.s), free(odd_up.q), free(odd_up.s), free(small.q), free(small.s);
    }
    for (int s = 0; s < 2; s++) remove(paths[s]);
    rmdir(dir);
    for (int e = 0; e < E; e++)
        free(gate[e].q), free(gate[e].s), free(up[e].q), free(up[e].s), free(down[e].q), free(down[e].s);
}

int main(void) {
    test_seed();
    test_single_group();
    test_layouts();
    test_many_groups();
    test_cpu_threads();
    test_empty();
    test_bad_input();
    test_dispatch();
    test_grouped_weight();
    test_grouped_weight_forms();
    test_grouped_linear();
    test_grouped_linear_y_anywhere();
    test_load_experts();
    printf("grouped: %d grouped calls checked against the dense calls and the independent product\n", cases_run);
    return TEST_SUMMARY("grouped");
}
