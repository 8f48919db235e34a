/* blockfp8 check: every backend of the default dispatcher, run with a strict policy, against the `ref` backend on
 * fresh random problems (ragged shapes, every output dtype, both scale formats, with and without bias). A backend
 * that declares it cannot run a case is NOT SUPPORTED for it, which is not a failure. The reference itself is held
 * against an fp64 product of the dequantized operands computed here. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 check [--seed S] [--backend NAME] [--verbose]\n"
    "\n"
    "Runs every backend of the default dispatcher (strict policy) against the reference backend `ref` on fresh\n"
    "random problems: ragged shapes (K not a multiple of 128, N = 2112 and smaller N % 128 = 64 variants, M = 0,\n"
    "1 and odd), every output dtype, fp32 and UE8M0 scales, with and without bias. Prints OK / FAIL / NOT\n"
    "SUPPORTED per backend; exits 1 on any FAIL. Tolerances (relative Frobenius error vs ref, docs/numerics.md):\n"
    "bf16 8e-3, fp16 1e-3, fp32 2.5e-4 (1e-5 for CPU backends). `ref` itself is checked against an fp64 product\n"
    "of the dequantized operands.\n"
    "Then the grouped (MoE) GEMM of every backend that has one, on contiguous (128-aligned and scattered rows,\n"
    "G = 256) and masked (masked_m from 0 to max_m) problems: the same tolerances, every used row written and\n"
    "every unused one (padding, beyond masked_m) left as it was.\n"
    "  --seed S          replay a run (default: a fresh seed, printed)\n"
    "  --backend NAME    check only NAME\n"
    "  --verbose         one line per case\n";

typedef struct check_shape {
    int64_t m, n, k;
} check_shape;

/* Ragged on purpose: partial K groups, partial N blocks (2112 = 16.5 blocks), single rows, empty M; and a few
 * that meet the alignment GPU libraries want (K a multiple of 512, i.e. 4 scale blocks), with M not a multiple
 * of 4. */
static const check_shape shapes[] = {
    {1, 64, 128},   {16, 2112, 384}, {3, 320, 300}, {7, 200, 1000}, {5, 129, 255}, {1, 192, 7168},
    {33, 1, 1},     {2, 130, 513},   {0, 64, 128},  {6, 320, 512},  {4, 2112, 1536}, {8, 256, 1024},
};
static const bfp8_dtype out_dtypes[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32};

/* One quantized problem, host side, row-major scales. */
typedef struct check_case {
    int64_t m, n, k, kblocks;
    bfp8_scale_format format;
    uint8_t *qa, *qb;
    float *sa, *sb;   /* row-major */
    float *expected;  /* fp64 product of the dequantized operands, without bias, rounded to fp32 */
} check_case;

typedef struct check_tally {
    int ok, fail, unsupported;
    double worst[BFP8_DTYPE_COUNT]; /* worst error / tolerance ratio per output dtype */
    char first_reason[BFP8_REASON_MAX];
} check_tally;

/* Random operands whose rows differ in magnitude by up to 2^+-6, so that a scale applied to the wrong row or
 * block shows. */
static bfp8_status make_case(check_case *c, test_rng *rng, const check_shape *s, bfp8_scale_format format) {
    memset(c, 0, sizeof *c);
    c->m = s->m;
    c->n = s->n;
    c->k = s->k;
    c->kblocks = (s->k + BFP8_BLOCK - 1) / BFP8_BLOCK;
    c->format = format;
    const int64_t nb = (s->n + BFP8_BLOCK - 1) / BFP8_BLOCK;
    float *a = malloc((size_t)(s->m * s->k + 1) * sizeof(float));
    float *b = malloc((size_t)(s->n * s->k + 1) * sizeof(float));
    float *da = malloc((size_t)(s->m * s->k + 1) * sizeof(float));
    float *db = malloc((size_t)(s->n * s->k + 1) * sizeof(float));
    c->qa = malloc((size_t)(s->m * s->k + 1));
    c->qb = malloc((size_t)(s->n * s->k + 1));
    c->sa = malloc((size_t)(s->m * c->kblocks + 1) * sizeof(float));
    c->sb = malloc((size_t)(nb * c->kblocks + 1) * sizeof(float));
    c->expected = malloc((size_t)(s->m * s->n + 1) * sizeof(float));
    bfp8_status st = BFP8_ERR_OUT_OF_MEMORY;
    if (!a || !b || !da || !db || !c->qa || !c->qb || !c->sa || !c->sb || !c->expected) goto out;
    for (int64_t i = 0; i < s->m; i++) {
        const float row_scale = ldexpf(1.0f, (int)(test_rng_u64(rng) % 13) - 6);
        test_rng_fill_normal(rng, a + i * s->k, BFP8_DTYPE_F32, s->k, row_scale);
    }
    for (int64_t j = 0; j < s->n; j++) {
        const float row_scale = ldexpf(1.0f, (int)(test_rng_u64(rng) % 13) - 6);
        test_rng_fill_normal(rng, b + j * s->k, BFP8_DTYPE_F32, s->k, row_scale / sqrtf((float)s->k));
    }
    bfp8_scales sa, sb;
    if ((st = bfp8_scales_init(&sa, format, BFP8_LAYOUT_ROW_MAJOR, s->m, c->kblocks, c->sa)) != BFP8_OK ||
        (st = bfp8_scales_init(&sb, format, BFP8_LAYOUT_ROW_MAJOR, nb, c->kblocks, c->sb)) != BFP8_OK ||
        (st = bfp8_quantize_act(a, BFP8_DTYPE_F32, s->m, s->k, c->qa, &sa, NULL)) != BFP8_OK ||
        (st = bfp8_quantize_weight(b, BFP8_DTYPE_F32, s->n, s->k, c->qb, &sb, NULL)) != BFP8_OK ||
        (st = bfp8_dequantize(c->qa, s->m, s->k, &sa, 1, da)) != BFP8_OK ||
        (st = bfp8_dequantize(c->qb, s->n, s->k, &sb, BFP8_BLOCK, db)) != BFP8_OK)
        goto out;
    for (int64_t i = 0; i < s->m; i++)
        for (int64_t j = 0; j < s->n; j++) {
            double acc = 0;
            for (int64_t l = 0; l < s->k; l++) acc += (double)da[i * s->k + l] * (double)db[j * s->k + l];
            c->expected[i * s->n + j] = (float)acc;
        }
out:
    free(a);
    free(b);
    free(da);
    free(db);
    return st;
}

static void free_case(check_case *c) {
    free(c->qa);
    free(c->qb);
    free(c->sa);
    free(c->sb);
    free(c->expected);
}

/* Scales of a case in `layout` (host), for upload. */
static bfp8_status scales_in_layout(const check_case *c, const float *row_major, int64_t rows,
                                    bfp8_scale_layout layout, void **host, bfp8_scales *desc) {
    bfp8_scales src;
    const size_t bytes = bfp8_scales_bytes(layout, rows, c->kblocks);
    *host = malloc(bytes ? bytes : 1);
    if (!*host) return BFP8_ERR_OUT_OF_MEMORY;
    bfp8_status st = bfp8_scales_init(&src, c->format, BFP8_LAYOUT_ROW_MAJOR, rows, c->kblocks, (void *)row_major);
    if (st == BFP8_OK) st = bfp8_scales_init(desc, c->format, layout, rows, c->kblocks, *host);
    return st == BFP8_OK ? bfp8_scales_convert(&src, desc) : st;
}

typedef enum run_result { RUN_OK, RUN_FAIL, RUN_UNSUPPORTED } run_result;

/* Runs `b` (through a strict dispatcher `d`) on one case; y32 receives its output as fp32. */
static run_result run_backend(bfp8_dispatcher *d, const bfp8_backend *b, const check_case *c, bfp8_dtype out_dtype,
                              const void *bias, bfp8_dtype bias_dtype, float *y32, char *why, size_t why_size) {
    const uint32_t layouts = bfp8_scale_layouts_for(c->format);
    const int64_t nb = (c->n + BFP8_BLOCK - 1) / BFP8_BLOCK;
    run_result res = RUN_FAIL;
    void *sa_host = NULL, *sb_host = NULL, *y_host = NULL;
    test_buffers rb = {.device = b->caps.device};
    bfp8_gemm_args g = {.m = c->m, .n = c->n, .k = c->k, .bias_dtype = bias_dtype, .y_dtype = out_dtype,
                        .device = b->caps.device};
    bfp8_status st;

    /* Every layout of the format on offer; the backend gets those bfp8_linear would hand it. A backend that
     * consumes none of them, or cannot run the problem otherwise, declares a "cannot". */
    bfp8_problem p = {.device = b->caps.device,
                      .arch = b->caps.device == BFP8_DEVICE_CUDA ? bfp8_cuda_arch() : 0,
                      .m = c->m, .n = c->n, .k = c->k, .out_dtype = out_dtype, .scale_format = c->format,
                      .a_layouts = layouts, .b_layouts = layouts,
                      .has_bias = bias != NULL, .bias_dtype = bias ? bias_dtype : BFP8_DTYPE_F32};
    if (!bfp8_backend_check(b, &p, why, why_size)) return RUN_UNSUPPORTED;
    bfp8_scale_layout a_layout, b_layout;
    if (bfp8_backend_layouts(b, &p, &a_layout, &b_layout) != BFP8_OK) {
        snprintf(why, why_size, "%s", bfp8_last_error());
        return RUN_UNSUPPORTED;
    }

    const size_t y_bytes = (size_t)(c->m * c->n) * bfp8_dtype_size(out_dtype);
    if ((st = scales_in_layout(c, c->sa, c->m, a_layout, &sa_host, &g.a_scales)) != BFP8_OK ||
        (st = scales_in_layout(c, c->sb, nb, b_layout, &sb_host, &g.b_scales)) != BFP8_OK)
        goto out;
    void *dev;
    if ((st = test_buffers_put(&rb, c->qa, (size_t)(c->m * c->k), &dev)) != BFP8_OK) goto out;
    g.a = dev;
    if ((st = test_buffers_put(&rb, c->qb, (size_t)(c->n * c->k), &dev)) != BFP8_OK) goto out;
    g.b = dev;
    const size_t sa_bytes = bfp8_scales_bytes(a_layout, c->m, c->kblocks);
    const size_t sb_bytes = bfp8_scales_bytes(b_layout, nb, c->kblocks);
    if ((st = test_buffers_put(&rb, sa_host, sa_bytes, &g.a_scales.data)) != BFP8_OK ||
        (st = test_buffers_put(&rb, sb_host, sb_bytes, &g.b_scales.data)) != BFP8_OK)
        goto out;
    if (bias) {
        if ((st = test_buffers_put(&rb, bias, (size_t)c->n * bfp8_dtype_size(bias_dtype), &dev)) != BFP8_OK) goto out;
        g.bias = dev;
    }
    /* Poison: all-ones bytes are NaN in f32, bf16 and f16, so an element left unwritten shows. */
    y_host = malloc(y_bytes ? y_bytes : 1);
    if (!y_host) {
        st = BFP8_ERR_OUT_OF_MEMORY;
        goto out;
    }
    memset(y_host, 0xFF, y_bytes);
    if ((st = test_buffers_put(&rb, y_host, y_bytes, &g.y)) != BFP8_OK) goto out;

    st = bfp8_gemm(d, &g);
    if (st == BFP8_ERR_UNSUPPORTED) {
        snprintf(why, why_size, "%s", bfp8_last_error());
        res = RUN_UNSUPPORTED;
        goto out;
    }
    if (st == BFP8_OK && b->caps.device == BFP8_DEVICE_CUDA) {
        st = bfp8_cuda_synchronize(NULL);
        if (st == BFP8_OK) st = bfp8_cuda_download(y_host, g.y, y_bytes);
    } else if (st == BFP8_OK) {
        memcpy(y_host, g.y, y_bytes);
    }
    if (st != BFP8_OK) goto out;
    for (int64_t i = 0; i < c->m * c->n; i++) y32[i] = test_load_f32(y_host, out_dtype, i);
    res = RUN_OK;
out:
    if (res == RUN_FAIL)
        snprintf(why, why_size, "%s: %s", bfp8_status_name(st), bfp8_last_error());
    test_buffers_free(&rb);
    free(sa_host);
    free(sb_host);
    free(y_host);
    return res;
}

int cmd_check(int argc, char **argv) {
    const char *cmd = "check";
    int64_t seed_arg = 0;
    bool have_seed = false, verbose = false;
    const char *only = NULL;
    int rc;

    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(usage, stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
        } else if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--seed", v, 1, INT64_MAX, &seed_arg))) return rc;
            have_seed = true;
        } else if (cli_opt(argc, argv, &i, "--backend", &v)) {
            if (!v || !*v) return cli_usage_error(cmd, usage, "--backend needs a name");
            only = v;
        } else {
            return cli_usage_error(cmd, usage, "unknown option '%s'", argv[i]);
        }
    }
    bfp8_dispatcher *d = cli_default_dispatcher(cmd);
    if (!d) return CLI_FAIL;
    if (only && !bfp8_dispatcher_find(d, only)) {
        bool unavailable = false;
        for (size_t i = 0; i < bfp8_dispatcher_unavailable_count(d); i++) {
            const char *name = NULL, *why = NULL;
            if (bfp8_dispatcher_unavailable_at(d, i, &name, &why) == BFP8_OK && strcmp(name, only) == 0) {
                printf("  %-14s NOT SUPPORTED (unavailable here: %s)\n", name, why);
                unavailable = true;
            }
        }
        if (unavailable) return CLI_OK;
        return cli_error(CLI_FAIL, cmd, "no backend named '%s'", only);
    }

    const uint64_t seed = have_seed ? (uint64_t)seed_arg : test_seed_fresh() >> 1;
    const size_t nbackends = bfp8_dispatcher_count(d);
    const size_t nshapes = sizeof shapes / sizeof shapes[0];
    printf("blockfp8 check: seed %llu (replay with --seed %llu), %zu shapes x 3 output dtypes x 2 scale formats x "
           "{no bias, bias} per backend\n",
           (unsigned long long)seed, (unsigned long long)seed, nshapes);

    bfp8_dispatcher **strict = calloc(nbackends + 1, sizeof *strict);
    check_tally *tally = calloc(nbackends + 1, sizeof *tally);
    float *y32 = NULL, *ref32 = NULL;
    void *bias = NULL;
    rc = CLI_FAIL;
    if (!strict || !tally) {
        cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }
    for (size_t bi = 0; bi < nbackends; bi++) {
        const bfp8_backend *b = bfp8_dispatcher_at(d, bi);
        bfp8_status st = bfp8_dispatcher_create_default(&strict[bi]);
        if (st == BFP8_OK) st = bfp8_dispatcher_set_policy(strict[bi], BFP8_POLICY_STRICT, b->name);
        if (st != BFP8_OK) {
            cli_lib_error(cmd, "strict dispatcher", st);
            goto done;
        }
    }
    const bfp8_backend *ref = bfp8_dispatcher_find(d, "ref");
    if (!ref) {
        cli_error(CLI_FAIL, cmd, "the default dispatcher has no `ref` backend to check against");
        goto done;
    }
    size_t ref_index = 0;
    while (bfp8_dispatcher_at(d, ref_index) != ref) ref_index++;

    test_rng rng;
    test_rng_init(&rng, seed);
    int case_id = 0;
    for (size_t si = 0; si < nshapes; si++) {
        const check_shape *s = &shapes[si];
        free(y32);
        free(ref32);
        free(bias);
        y32 = malloc((size_t)(s->m * s->n + 1) * sizeof(float));
        ref32 = malloc((size_t)(s->m * s->n + 1) * sizeof(float));
        bias = malloc((size_t)(s->n + 1) * sizeof(float));
        if (!y32 || !ref32 || !bias) {
            cli_error(CLI_FAIL, cmd, "out of memory");
            goto done;
        }
        for (int fi = 0; fi < BFP8_SCALE_FORMAT_COUNT; fi++) {
            check_case c;
            bfp8_status st = make_case(&c, &rng, s, (bfp8_scale_format)fi);
            if (st != BFP8_OK) {
                free_case(&c);
                cli_lib_error(cmd, "quantize a case", st);
                goto done;
            }
            for (size_t oi = 0; oi < sizeof out_dtypes / sizeof out_dtypes[0]; oi++) {
                for (int with_bias = 0; with_bias < 2; with_bias++) {
                    const bfp8_dtype out_dtype = out_dtypes[oi];
                    /* The bias dtype rotates so that each one meets each output dtype across cases. */
                    const bfp8_dtype bias_dtype = out_dtypes[(oi + (size_t)case_id) % 3];
                    char desc[160], why[BFP8_REASON_MAX];
                    case_id++;
                    if (with_bias) test_rng_fill_normal(&rng, bias, bias_dtype, s->n, 0.5f);
                    snprintf(desc, sizeof desc, "M=%lld N=%lld K=%lld out=%s scales=%s bias=%s", (long long)s->m,
                             (long long)s->n, (long long)s->k, bfp8_dtype_name(out_dtype),
                             bfp8_scale_format_name(c.format), with_bias ? bfp8_dtype_name(bias_dtype) : "none");

                    /* What ref is held to: the dequantized product (+ bias), here in double. */
                    float *expected = c.expected;
                    float *expected_bias = NULL;
                    if (with_bias) {
                        expected_bias = malloc((size_t)(s->m * s->n + 1) * sizeof(float));
                        if (!expected_bias) {
                            free_case(&c);
                            cli_error(CLI_FAIL, cmd, "out of memory");
                            goto done;
                        }
                        for (int64_t i = 0; i < s->m * s->n; i++)
                            expected_bias[i] = (float)((double)c.expected[i] +
                                                       (double)test_load_f32(bias, bias_dtype, i % s->n));
                        expected = expected_bias;
                    }
                    run_result ref_res = run_backend(strict[ref_index], ref, &c, out_dtype, with_bias ? bias : NULL,
                                                     bias_dtype, ref32, why, sizeof why);
                    for (size_t bi = 0; bi < nbackends; bi++) {
                        const bfp8_backend *b = bfp8_dispatcher_at(d, bi);
                        check_tally *t = &tally[bi];
                        if (only && strcmp(b->name, only) != 0) continue;
                        const double tol = test_tolerance(out_dtype, b->caps.device);
                        run_result r;
                        const float *against;
                        if (b == ref) {
                            r = ref_res;
                            memcpy(y32, ref32, (size_t)(s->m * s->n) * sizeof(float));
                            against = expected;
                        } else {
                            r = run_backend(strict[bi], b, &c, out_dtype, with_bias ? bias : NULL, bias_dtype, y32,
                                            why, sizeof why);
                            against = ref32;
                            if (r != RUN_UNSUPPORTED && ref_res != RUN_OK) {
                                r = RUN_FAIL;
                                snprintf(why, sizeof why, "the reference failed on this case");
                            }
                        }
                        if (r == RUN_UNSUPPORTED) {
                            t->unsupported++;
                            if (!t->first_reason[0]) snprintf(t->first_reason, sizeof t->first_reason, "%s", why);
                            if (verbose) printf("  %-14s NOT SUPPORTED %s: %s\n", b->name, desc, why);
                            continue;
                        }
                        double err = 0;
                        int64_t unwritten = 0;
                        if (r == RUN_OK) {
                            unwritten = test_count_nan(y32, s->m * s->n);
                            err = test_rel_frobenius(y32, against, s->m * s->n);
                            if (unwritten) {
                                r = RUN_FAIL;
                                snprintf(why, sizeof why, "%lld element(s) left unwritten (NaN poison)",
                                         (long long)unwritten);
                            } else if (!(err <= tol)) {
                                r = RUN_FAIL;
                                snprintf(why, sizeof why, "relative Frobenius error %.3e > tolerance %.1e", err, tol);
                            }
                            if (err / tol > t->worst[out_dtype]) t->worst[out_dtype] = err / tol;
                        }
                        if (r == RUN_OK) {
                            t->ok++;
                            if (verbose) printf("  %-14s ok   %s: rel err %.2e (tol %.1e)\n", b->name, desc, err, tol);
                        } else {
                            t->fail++;
                            printf("  %-14s FAIL %s: %s\n", b->name, desc, why);
                        }
                    }
                    free(expected_bias);
                }
            }
            free_case(&c);
        }
    }

    bool any_fail = false;
    printf("results (vs ref; ref vs an fp64 product of the dequantized operands):\n");
    for (size_t bi = 0; bi < nbackends; bi++) {
        const bfp8_backend *b = bfp8_dispatcher_at(d, bi);
        const check_tally *t = &tally[bi];
        if (only && strcmp(b->name, only) != 0) continue;
        const char *verdict = t->fail ? "FAIL" : t->ok ? "OK" : "NOT SUPPORTED";
        any_fail |= t->fail > 0;
        printf("  %-14s %-13s %d passed, %d failed, %d not supported", b->name, verdict, t->ok, t->fail,
               t->unsupported);
        if (t->ok)
            printf("; worst error/tolerance: bf16 %.2f, f16 %.2f, f32 %.2f", t->worst[BFP8_DTYPE_BF16],
                   t->worst[BFP8_DTYPE_F16], t->worst[BFP8_DTYPE_F32]);
        printf("\n");
        if (t->unsupported) printf("  %-14s   e.g. not supported: %s\n", "", t->first_reason);
    }
    for (size_t i = 0; i < bfp8_dispatcher_unavailable_count(d); i++) {
        const char *name = NULL, *why = NULL;
        if (bfp8_dispatcher_unavailable_at(d, i, &name, &why) != BFP8_OK) continue;
        if (only && strcmp(name, only) != 0) continue;
        printf("  %-14s %-13s unavailable here: %s\n", name, "NOT SUPPORTED", why);
    }
    check_grouped(d, strict, only, seed, verbose, &any_fail);
    printf("%s\n", any_fail ? "check: FAIL" : "check: OK");
    rc = any_fail ? CLI_FAIL : CLI_OK;

done:
    if (strict)
        for (size_t bi = 0; bi < nbackends; bi++) bfp8_dispatcher_free(strict[bi]);
    free(strict);
    free(tally);
    free(y32);
    free(ref32);
    free(bias);
    return rc;
}
