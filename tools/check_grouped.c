/* blockfp8 check, the grouped part: every backend with a grouped GEMM, strict, against `ref` on fresh random
 * grouped problems (contiguous: 128-aligned segments as DeepGEMM lays them out, scattered rows, G = 256; masked:
 * masked_m from 0 to max_m), every output dtype, both scale formats, with and without bias. Besides the error, each
 * run must write every used row and leave every unused one (padding, beyond masked_m) as it was. `ref` itself is
 * held against an fp64 product of the dequantized operands. */
#include "cli.h"
#include "blockfp8_grouped.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum gpattern { GP_ALIGNED, GP_SCATTERED, GP_MASKED } gpattern;

typedef struct gshape {
    gpattern pattern;
    int64_t groups, m, n, k; /* m: rows (contiguous) or max_m (masked) */
} gshape;

static const gshape gshapes[] = {
    {GP_ALIGNED, 4, 512, 256, 512},  {GP_SCATTERED, 5, 77, 200, 300}, {GP_SCATTERED, 256, 600, 64, 256},
    {GP_MASKED, 6, 32, 256, 1024},   {GP_MASKED, 3, 17, 130, 255},    {GP_MASKED, 32, 4, 192, 128},
};

typedef struct gcase {
    const gshape *s;
    bfp8_grouped_layout layout;
    bfp8_scale_format format;
    int64_t rows, kb, nb;
    uint8_t *qa, *qb;
    float *sa, *sb; /* row-major; sa [rows][kb] (masked: G matrices of max_m rows), sb [G][nb][kb] */
    int32_t *idx, *masked_m;
    double *expected; /* fp64 product of the dequantized operands of each used row, without bias */
} gcase;

static int32_t row_group(const gcase *c, int64_t r) {
    if (c->layout == BFP8_GROUPED_MASKED) return r % c->s->m < c->masked_m[r / c->s->m] ? (int32_t)(r / c->s->m) : -1;
    return c->idx[r];
}

static void free_gcase(gcase *c) {
    free(c->qa), free(c->qb), free(c->sa), free(c->sb), free(c->idx), free(c->masked_m), free(c->expected);
}

static bfp8_status make_gcase(gcase *c, test_rng *rng, const gshape *s, bfp8_scale_format format) {
    memset(c, 0, sizeof *c);
    c->s = s;
    c->layout = s->pattern == GP_MASKED ? BFP8_GROUPED_MASKED : BFP8_GROUPED_CONTIGUOUS;
    c->format = format;
    c->rows = c->layout == BFP8_GROUPED_MASKED ? s->groups * s->m : s->m;
    c->kb = (s->k + 127) / 128;
    c->nb = (s->n + 127) / 128;
    float *a = malloc(sizeof(float) * (size_t)(c->rows * s->k + 1));
    float *b = malloc(sizeof(float) * (size_t)(s->groups * s->n * s->k + 1));
    c->qa = malloc((size_t)(c->rows * s->k + 1));
    c->qb = malloc((size_t)(s->groups * s->n * s->k + 1));
    c->sa = malloc(sizeof(float) * (size_t)(c->rows * c->kb + 1));
    c->sb = malloc(sizeof(float) * (size_t)(s->groups * c->nb * c->kb + 1));
    c->idx = malloc(sizeof(int32_t) * (size_t)(s->m + 1));
    c->masked_m = malloc(sizeof(int32_t) * (size_t)(s->groups + 1));
    c->expected = malloc(sizeof(double) * (size_t)(c->rows * s->n + 1));
    bfp8_status st = BFP8_ERR_OUT_OF_MEMORY;
    if (!a || !b || !c->qa || !c->qb || !c->sa || !c->sb || !c->idx || !c->masked_m || !c->expected) goto out;
    /* Magnitudes differ per row and per group, so a row computed with another group's weight shows. */
    for (int64_t r = 0; r < c->rows; r++)
        test_rng_fill_normal(rng, a + r * s->k, BFP8_DTYPE_F32, s->k, ldexpf(1.0f, (int)(test_rng_u64(rng) % 9) - 4));
    for (int64_t g = 0; g < s->groups; g++)
        for (int64_t j = 0; j < s->n; j++)
            test_rng_fill_normal(rng, b + (g * s->n + j) * s->k, BFP8_DTYPE_F32, s->k,
                            ldexpf(1.0f, (int)((g + test_rng_u64(rng) % 3) % 7) - 3) / sqrtf((float)s->k));
    if (s->pattern == GP_MASKED) {
        for (int64_t g = 0; g < s->groups; g++)
            c->masked_m[g] = g == 0 ? 0 : g == 1 ? (int32_t)s->m : (int32_t)(test_rng_u64(rng) % (uint64_t)(s->m + 1));
    } else if (s->pattern == GP_SCATTERED) {
        for (int64_t r = 0; r < s->m; r++) c->idx[r] = (int32_t)(test_rng_u64(rng) % (uint64_t)(s->groups + 1)) - 1;
    } else {
        /* DeepGEMM's layout: segments in group order, each padded with -1 rows to a multiple of 128; group 1 empty. */
        int64_t r = 0;
        for (int64_t g = 0; g < s->groups && r < s->m; g++) {
            int64_t rows = g == 1 ? 0 : 1 + (int64_t)(test_rng_u64(rng) % 128);
            for (int64_t i = 0; i < rows && r < s->m; i++) c->idx[r++] = (int32_t)g;
            while (r < s->m && r % 128) c->idx[r++] = -1;
        }
        while (r < s->m) c->idx[r++] = -1;
    }
    bfp8_scales sa;
    if ((st = bfp8_scales_init(&sa, format, BFP8_LAYOUT_ROW_MAJOR, c->rows, c->kb, c->sa)) != BFP8_OK ||
        (st = bfp8_quantize_act(a, BFP8_DTYPE_F32, c->rows, s->k, c->qa, &sa, NULL)) != BFP8_OK)
        goto out;
    for (int64_t g = 0; g < s->groups; g++) {
        bfp8_scales sb;
        if ((st = bfp8_scales_init(&sb, format, BFP8_LAYOUT_ROW_MAJOR, c->nb, c->kb, c->sb + g * c->nb * c->kb)) ||
            (st = bfp8_quantize_weight(b + g * s->n * s->k, BFP8_DTYPE_F32, s->n, s->k, c->qb + g * s->n * s->k, &sb,
                                       NULL)))
            goto out;
    }
    /* Dequantized with the library's dequantizer (row by row, only the used rows), the product here in double. */
    float *da = malloc(sizeof(float) * (size_t)(s->k + 1)), *db = malloc(sizeof(float) * (size_t)(s->n * s->k + 1));
    if (!da || !db) {
        free(da), free(db);
        st = BFP8_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (int64_t g = 0; g < s->groups && st == BFP8_OK; g++) {
        bfp8_scales sb;
        bfp8_scales_init(&sb, format, BFP8_LAYOUT_ROW_MAJOR, c->nb, c->kb, c->sb + g * c->nb * c->kb);
        st = bfp8_dequantize(c->qb + g * s->n * s->k, s->n, s->k, &sb, BFP8_BLOCK, db);
        for (int64_t r = 0; r < c->rows && st == BFP8_OK; r++) {
            if (row_group(c, r) != g) continue;
            bfp8_scales s1;
            bfp8_scales_init(&s1, format, BFP8_LAYOUT_ROW_MAJOR, 1, c->kb, c->sa + r * c->kb);
            st = bfp8_dequantize(c->qa + r * s->k, 1, s->k, &s1, 1, da);
            for (int64_t j = 0; j < s->n; j++) {
                double acc = 0;
                for (int64_t l = 0; l < s->k; l++) acc += (double)da[l] * (double)db[j * s->k + l];
                c->expected[r * s->n + j] = acc;
            }
        }
    }
    free(da), free(db);
out:
    free(a), free(b);
    return st;
}

/* Device or host copies of one run's buffers. */
typedef struct gbufs {
    bfp8_device device;
    void *ptr[8];
    int count;
} gbufs;

static bfp8_status put(gbufs *gb, const void *host, size_t bytes, void **out) {
    void *p = NULL;
    if (gb->device == BFP8_DEVICE_CUDA) {
        CLI_TRY(bfp8_cuda_malloc(bytes ? bytes : 1, &p));
        gb->ptr[gb->count++] = p;
        if (bytes) CLI_TRY(bfp8_cuda_upload(p, host, bytes));
    } else {
        p = malloc(bytes ? bytes : 1);
        if (!p) return BFP8_ERR_OUT_OF_MEMORY;
        gb->ptr[gb->count++] = p;
        if (bytes) memcpy(p, host, bytes);
    }
    *out = p;
    return BFP8_OK;
}

static void gbufs_free(gbufs *gb) {
    for (int i = 0; i < gb->count; i++) {
        if (gb->device == BFP8_DEVICE_CUDA) bfp8_cuda_free(gb->ptr[i]);
        else free(gb->ptr[i]);
    }
}

/* `mats` row-major matrices of `rows` rows in `layout`, back to back (host). */
static void *convert_scales(const gcase *c, const float *row_major, int64_t mats, int64_t rows,
                            bfp8_scale_layout layout, bfp8_scales *desc, size_t *bytes) {
    const size_t one = bfp8_scales_bytes(layout, rows, c->kb);
    char *buf = calloc(1, one * (size_t)mats + 1);
    if (!buf) return NULL;
    for (int64_t i = 0; i < mats; i++) {
        bfp8_scales src, dst;
        if (bfp8_scales_init(&src, c->format, BFP8_LAYOUT_ROW_MAJOR, rows, c->kb, (void *)(row_major + i * rows * c->kb)) ||
            bfp8_scales_init(&dst, c->format, layout, rows, c->kb, buf + (size_t)i * one) ||
            bfp8_scales_convert(&src, &dst)) {
            free(buf);
            return NULL;
        }
    }
    bfp8_scales_init(desc, c->format, layout, rows, c->kb, buf);
    *bytes = one * (size_t)mats;
    return buf;
}

typedef enum grun { GRUN_OK, GRUN_FAIL, GRUN_UNSUPPORTED } grun;

/* Runs `b` strictly on a case; y32 gets the output as fp32, *touched the bytes of unused rows it changed. */
static grun run_grouped(bfp8_dispatcher *d, const bfp8_backend *b, const gcase *c, bfp8_dtype out,
                        const void *bias, bfp8_dtype bias_dtype, float *y32, int64_t *touched, char *why,
                        size_t why_size) {
    const gshape *s = c->s;
    const uint32_t fl = bfp8_scale_layouts_for(c->format);
    const uint32_t a_set = b->caps.a_layouts & fl, b_set = b->caps.b_layouts & fl;
    const bool masked = c->layout == BFP8_GROUPED_MASKED;
    bfp8_problem p = {.device = b->caps.device, .arch = b->caps.device == BFP8_DEVICE_CUDA ? bfp8_cuda_arch() : 0,
                      .m = s->m, .n = s->n, .k = s->k, .out_dtype = out, .scale_format = c->format,
                      .a_layouts = a_set ? BFP8_BIT(cli_first_layout(a_set)) : fl,
                      .b_layouts = b_set ? BFP8_BIT(cli_first_layout(b_set)) : fl, .has_bias = bias != NULL,
                      .bias_dtype = bias ? bias_dtype : BFP8_DTYPE_F32, .grouped = c->layout, .groups = s->groups,
                      .expected_m = masked ? s->m / 2 + 1 : s->m / s->groups + 1};
    if (!bfp8_backend_check(b, &p, why, why_size)) return GRUN_UNSUPPORTED;
    const size_t row_bytes = (size_t)s->n * bfp8_dtype_size(out), y_bytes = row_bytes * (size_t)c->rows;
    gbufs gb = {.device = b->caps.device};
    void *sa_host = NULL, *sb_host = NULL, *dev;
    unsigned char *y_host = malloc(y_bytes + 1);
    size_t sa_bytes = 0, sb_bytes = 0;
    bfp8_grouped_gemm_args g = {.layout = c->layout, .groups = s->groups, .m = s->m, .n = s->n, .k = s->k,
                                .expected_m = p.expected_m, .bias_dtype = bias_dtype, .y_dtype = out,
                                .device = b->caps.device};
    grun res = GRUN_FAIL;
    bfp8_status st = BFP8_ERR_OUT_OF_MEMORY;
    sa_host = convert_scales(c, c->sa, masked ? s->groups : 1, s->m, cli_first_layout(a_set), &g.a_scales, &sa_bytes);
    sb_host = convert_scales(c, c->sb, s->groups, c->nb, cli_first_layout(b_set), &g.b_scales, &sb_bytes);
    if (!y_host || !sa_host || !sb_host) goto out;
    memset(y_host, 0xFF, y_bytes); /* NaN in every float dtype */
    if ((st = put(&gb, c->qa, (size_t)(c->rows * s->k), &dev))) goto out;
    g.a = dev;
    if ((st = put(&gb, c->qb, (size_t)(s->groups * s->n * s->k), &dev))) goto out;
    g.b = dev;
    if ((st = put(&gb, sa_host, sa_bytes, &g.a_scales.data)) || (st = put(&gb, sb_host, sb_bytes, &g.b_scales.data)))
        goto out;
    if (masked) {
        if ((st = put(&gb, c->masked_m, sizeof(int32_t) * (size_t)s->groups, &dev))) goto out;
        g.masked_m = dev;
    } else {
        if ((st = put(&gb, c->idx, sizeof(int32_t) * (size_t)s->m, &dev))) goto out;
        g.m_indices = dev;
    }
    if (bias) {
        if ((st = put(&gb, bias, (size_t)(s->groups * s->n) * bfp8_dtype_size(bias_dtype), &dev))) goto out;
        g.bias = dev;
    }
    if ((st = put(&gb, y_host, y_bytes, &g.y))) goto out;
    st = bfp8_grouped_gemm(d, &g);
    if (st == BFP8_ERR_UNSUPPORTED) {
        snprintf(why, why_size, "%s", bfp8_last_error());
        res = GRUN_UNSUPPORTED;
        goto out;
    }
    if (st == BFP8_OK && gb.device == BFP8_DEVICE_CUDA) {
        st = bfp8_cuda_synchronize(NULL);
        if (st == BFP8_OK) st = bfp8_cuda_download(y_host, g.y, y_bytes);
    } else if (st == BFP8_OK) {
        memcpy(y_host, g.y, y_bytes);
    }
    if (st != BFP8_OK) goto out;
    *touched = 0;
    for (int64_t r = 0; r < c->rows; r++) {
        const unsigned char *row = y_host + (size_t)r * row_bytes;
        for (int64_t j = 0; j < s->n; j++) y32[r * s->n + j] = test_load_f32(row, out, j);
        if (row_group(c, r) < 0)
            for (size_t i = 0; i < row_bytes; i++) *touched += row[i] != 0xFF;
    }
    res = GRUN_OK;
out:
    if (res == GRUN_FAIL) snprintf(why, why_size, "%s: %s", bfp8_status_name(st), bfp8_last_error());
    gbufs_free(&gb);
    free(sa_host), free(sb_host), free(y_host);
    return res;
}

/* Relative Frobenius error over the used rows only, and NaNs among them (unwritten outputs). */
static double used_rows_error(const gcase *c, const float *y, const float *ref, int64_t *nans) {
    double num = 0, den = 0;
    *nans = 0;
    for (int64_t r = 0; r < c->rows; r++) {
        if (row_group(c, r) < 0) continue;
        for (int64_t j = 0; j < c->s->n; j++) {
            const float v = y[r * c->s->n + j], w = ref[r * c->s->n + j];
            *nans += isnan(v);
            num += ((double)v - w) * ((double)v - w);
            den += (double)w * w;
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int check_grouped(bfp8_dispatcher *d, bfp8_dispatcher **strict, const char *only, uint64_t seed, bool verbose,
                  bool *any_fail) {
    const size_t nbackends = bfp8_dispatcher_count(d), nshapes = sizeof gshapes / sizeof gshapes[0];
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32};
    const bfp8_backend *ref = bfp8_dispatcher_find(d, "ref");
    size_t ref_index = 0;
    while (bfp8_dispatcher_at(d, ref_index) != ref) ref_index++;
    int *ok = calloc(nbackends, sizeof *ok), *fail = calloc(nbackends, sizeof *fail);
    int *unsupported = calloc(nbackends, sizeof *unsupported);
    char (*first_reason)[BFP8_REASON_MAX] = calloc(nbackends, sizeof *first_reason);
    if (!ok || !fail || !unsupported || !first_reason) {
        free(ok), free(fail), free(unsupported), free(first_reason);
        return cli_error(CLI_FAIL, "check", "out of memory");
    }
    printf("grouped: %zu problems (contiguous: 128-aligned segments, scattered rows, G=256; masked: masked_m 0..max_m)"
           " x 2 scale formats x 3 output dtypes, bias on every other case\n", nshapes);
    test_rng rng;
    test_rng_init(&rng, seed ^ 0x9E3779B97F4A7C15ull);
    int case_id = 0;
    for (size_t si = 0; si < nshapes; si++) {
        const gshape *s = &gshapes[si];
        const int64_t rows = s->pattern == GP_MASKED ? s->groups * s->m : s->m, count = rows * s->n;
        float *y32 = malloc(sizeof(float) * (size_t)(count + 1)), *ref32 = malloc(sizeof(float) * (size_t)(count + 1));
        float *expected = malloc(sizeof(float) * (size_t)(count + 1));
        float *bias = malloc(sizeof(float) * (size_t)(s->groups * s->n + 1));
        for (int fi = 0; fi < BFP8_SCALE_FORMAT_COUNT && y32 && ref32 && expected && bias; fi++) {
            gcase c;
            if (make_gcase(&c, &rng, s, (bfp8_scale_format)fi) != BFP8_OK) {
                free_gcase(&c);
                cli_lib_error("check", "grouped case", BFP8_ERR_OUT_OF_MEMORY);
                *any_fail = true;
                break;
            }
            for (int oi = 0; oi < 3; oi++, case_id++) {
                const bfp8_dtype out = outs[oi], bias_dtype = outs[(oi + (size_t)case_id) % 3];
                const bool with_bias = case_id % 2;
                if (with_bias) test_rng_fill_normal(&rng, bias, bias_dtype, s->groups * s->n, 0.5f);
                for (int64_t r = 0; r < rows; r++) {
                    const int32_t g = row_group(&c, r);
                    for (int64_t j = 0; j < s->n; j++)
                        expected[r * s->n + j] = g < 0 ? NAN : (float)(c.expected[r * s->n + j] +
                            (with_bias ? (double)test_load_f32(bias, bias_dtype, g * s->n + j) : 0.0));
                }
                char desc[200], why[BFP8_REASON_MAX];
                snprintf(desc, sizeof desc, "%s G=%lld m=%lld N=%lld K=%lld out=%s scales=%s bias=%s",
                         s->pattern == GP_MASKED ? "masked" : s->pattern == GP_ALIGNED ? "contiguous(aligned)"
                                                                                       : "contiguous(scattered)",
                         (long long)s->groups, (long long)s->m, (long long)s->n, (long long)s->k,
                         bfp8_dtype_name(out), bfp8_scale_format_name(c.format),
                         with_bias ? bfp8_dtype_name(bias_dtype) : "none");
                int64_t touched = 0;
                grun ref_res = run_grouped(strict[ref_index], ref, &c, out, with_bias ? bias : NULL, bias_dtype, ref32,
                                           &touched, why, sizeof why);
                if (ref_res == GRUN_OK && touched) ref_res = GRUN_FAIL;
                for (size_t bi = 0; bi < nbackends; bi++) {
                    const bfp8_backend *b = bfp8_dispatcher_at(d, bi);
                    if (only && strcmp(b->name, only) != 0) continue;
                    grun r = b == ref ? ref_res
                                      : run_grouped(strict[bi], b, &c, out, with_bias ? bias : NULL, bias_dtype, y32,
                                                    &touched, why, sizeof why);
                    if (b == ref) memcpy(y32, ref32, sizeof(float) * (size_t)count);
                    if (r == GRUN_UNSUPPORTED) {
                        unsupported[bi]++;
                        if (!first_reason[bi][0]) snprintf(first_reason[bi], BFP8_REASON_MAX, "%s", why);
                        if (verbose) printf("  %-14s NOT SUPPORTED %s: %s\n", b->name, desc, why);
                        continue;
                    }
                    if (r == GRUN_OK && b != ref && ref_res != GRUN_OK) {
                        r = GRUN_FAIL;
                        snprintf(why, sizeof why, "the reference failed on this case");
                    }
                    const double tol = b == ref ? test_tolerance(out, BFP8_DEVICE_CPU) / 2 : test_tolerance(out, b->caps.device);
                    if (r == GRUN_OK) {
                        int64_t nans;
                        const double err = used_rows_error(&c, y32, b == ref ? expected : ref32, &nans);
                        if (touched) {
                            r = GRUN_FAIL;
                            snprintf(why, sizeof why, "%lld byte(s) of unused rows written", (long long)touched);
                        } else if (nans) {
                            r = GRUN_FAIL;
                            snprintf(why, sizeof why, "%lld output(s) of used rows left unwritten", (long long)nans);
                        } else if (!(err <= tol)) {
                            r = GRUN_FAIL;
                            snprintf(why, sizeof why, "relative Frobenius error %.3e > tolerance %.1e", err, tol);
                        } else if (verbose) {
                            printf("  %-14s ok   %s: rel err %.2e (tol %.1e)\n", b->name, desc, err, tol);
                        }
                    }
                    if (r == GRUN_OK) {
                        ok[bi]++;
                    } else {
                        fail[bi]++;
                        printf("  %-14s FAIL %s: %s\n", b->name, desc, why);
                    }
                }
            }
            free_gcase(&c);
        }
        free(y32), free(ref32), free(expected), free(bias);
    }
    printf("grouped results (vs ref; ref vs an fp64 product of the dequantized operands):\n");
    for (size_t bi = 0; bi < nbackends; bi++) {
        const bfp8_backend *b = bfp8_dispatcher_at(d, bi);
        if (only && strcmp(b->name, only) != 0) continue;
        *any_fail |= fail[bi] > 0;
        printf("  %-14s %-13s %d passed, %d failed, %d not supported\n", b->name,
               fail[bi] ? "FAIL" : ok[bi] ? "OK" : "NOT SUPPORTED", ok[bi], fail[bi], unsupported[bi]);
        if (unsupported[bi]) printf("  %-14s   e.g. not supported: %s\n", "", first_reason[bi]);
    }
    free(ok), free(fail), free(unsupported), free(first_reason);
    return CLI_OK;
}
