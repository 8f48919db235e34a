/* `blockfp8 bench --grouped contiguous|masked`: the grouped (MoE) GEMM on DeepSeek-R1's routed-expert shapes
 * (gate_up N=4096 K=7168, down N=7168 K=2048), against a per-expert baseline measured in the same run: on the CPU
 * one OpenBLAS sgemm per expert on the dequantized fp32 weights, on CUDA one cuBLASLt call per expert (the
 * `cublaslt` backend, strict). The cells are those of bench/data/moe-anchor-h200-2026-12-04.csv: contiguous, each expert's
 * T rows one 128-aligned segment; masked, max_m = max(128, round_up(2 x T, 128)) with masked_m = expected_m = T. */
#include "moe.h"
#include "cuda_timer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char USAGE[] =
    "usage: blockfp8 bench --grouped contiguous|masked [--experts G] [--tokens T[,T...]] [--layer gate_up|down|both]\n"
    "                      [--device cpu|cuda] [--backend NAME] [--baseline openblas|cublaslt|none]\n"
    "                      [--out-dtype bf16|fp16|fp32] [--iters N] [--warmup N] [--threads N] [--seed S]\n"
    "                      [--json FILE]\n"
    "\n"
    "Times one grouped GEMM call over G experts with T tokens (rows) each, on DeepSeek-R1's expert layers, and the\n"
    "same work as one dense call per expert (the baseline), in the same run (on cuda the two timed interleaved);\n"
    "ratio = baseline / grouped, so above 1 is faster. Contiguous: each expert's T rows one segment padded to\n"
    "128 rows (DeepGEMM's layout); masked: [G, max_m, K] with max_m = max(128, round_up(2T, 128)) and\n"
    "masked_m = expected_m = T (the cells of bench/data/moe-anchor-h200-2026-12-04.csv).\n"
    "Operands are random FP8 codes with random power-of-two scales (fp32 format).\n"
    "  --experts G       experts (default 8)\n"
    "  --tokens LIST     tokens per expert (default: contiguous 128,512; masked 16,64)\n"
    "  --layer L         gate_up (4096x7168), down (7168x2048) or both (default)\n"
    "  --device D        cpu (default) or cuda (CUDA events, L2 flushed by a read before each run)\n"
    "  --backend NAME    the grouped backend, strict (default: the dispatcher's choice)\n"
    "  --baseline B      openblas (cpu default: cblas_sgemm per expert on dequantized fp32 weights), cublaslt\n"
    "                    (cuda default: the cublaslt backend per expert, strict) or none\n"
    "  --iters N         timed runs (default 5 on cpu, 50 on cuda); --warmup N untimed runs first (1, 5)\n"
    "  --threads N       CPU threads (default: BFP8_NUM_THREADS or every core)\n"
    "  --json FILE       one record per cell and method\n";

#define GB_MAX_TOKENS 16

typedef struct gb_opts {
    bfp8_grouped_layout layout;
    bfp8_device device;
    int64_t experts, tokens[GB_MAX_TOKENS];
    int ntokens;
    bool gate_up, down;
    const char *backend, *baseline, *json_path;
    bfp8_dtype out_dtype;
    int64_t iters, warmup, threads, seed;
} gb_opts;

static bool cuda_device(const gb_opts *o) { return o->device == BFP8_DEVICE_CUDA; }

/* One cell's operands: host arrays, and the grouped call on the data's device. */
typedef struct gb_cell {
    const gb_opts *o;
    int64_t n, k, kb, nb, tokens, m, rows; /* m: grouped m (rows or max_m); rows: of A and Y */
    uint8_t *qa;                            /* host */
    float *sa;                              /* host, row-major */
    int32_t *idx, *counts;                  /* host */
    moe_call call;                          /* the grouped call (device pointers on cuda) */
    /* baseline */
    bfp8_dispatcher *base_d;
    bfp8_gemm_args *per_expert; /* cuda: one dense call per expert */
    float *a32, *w32, *c32;     /* cpu: dequantized operands, output */
} gb_cell;

/* The rows of expert e: contiguous, a segment starting at e * round_up(T, 128); masked, rows [0, T) of group e. */
static int64_t expert_row0(const gb_cell *c, int64_t e) {
    return c->o->layout == BFP8_GROUPED_MASKED ? e * c->m : e * cli_round_up(c->tokens, 128);
}

static void cell_free(gb_cell *c) {
    moe_call_free(&c->call);
    if (c->per_expert) {
        for (int64_t e = 0; e < c->o->experts; e++) {
            if (c->o->device == BFP8_DEVICE_CUDA) {
                if (c->per_expert[e].a_scales.data) bfp8_cuda_free(c->per_expert[e].a_scales.data);
                if (c->per_expert[e].b_scales.data) bfp8_cuda_free(c->per_expert[e].b_scales.data);
                if (c->per_expert[e].y) bfp8_cuda_free(c->per_expert[e].y);
            }
        }
        free(c->per_expert);
    }
    free(c->qa), free(c->sa), free(c->idx), free(c->counts), free(c->a32), free(c->c32);
}

typedef struct gb_call {
    bfp8_dispatcher *d;
    gb_cell *c;
} gb_call;

static bfp8_status call_grouped(void *ctx) {
    const gb_call *x = ctx;
    return bfp8_grouped_gemm(x->d, &x->c->call.g);
}

static bfp8_status call_baseline(void *ctx) {
    const gb_call *x = ctx;
    gb_cell *c = x->c;
    for (int64_t e = 0; e < c->o->experts; e++) {
        if (c->o->device == BFP8_DEVICE_CUDA) {
            CLI_TRY(bfp8_gemm(c->base_d, &c->per_expert[e]));
        } else {
            const int64_t r0 = expert_row0(c, e);
            cli_openblas_sgemm_nt(c->tokens, c->n, c->k, c->a32 + r0 * c->k, c->w32 + e * c->n * c->k,
                                  c->c32 + r0 * c->n);
        }
    }
    return BFP8_OK;
}

/* The two things a cell times, in this order: the grouped call and its per-expert baseline. */
static bfp8_status (*const kTimed[2])(void *) = {call_grouped, call_baseline};
static const char *const kTimedNames[2] = {"grouped call", "baseline"};

/* Medians of kTimed[first .. first + n) into us[0 .. n), timed interleaved (cli_time_medians) where n = 2, as
 * `blockfp8 bench` times a cell's backends. */
static bfp8_status time_calls(const gb_opts *o, int first, int n, gb_call *call, double *us) {
    void *ctxs[2] = {call, call};
    char why[BFP8_REASON_MAX];
    int failed = -1;
    bfp8_status st = cli_time_medians(o->device, (int)o->warmup, (int)o->iters, CLI_L2_CLEAN, kTimed + first, ctxs,
                                      n, us, &failed, why, sizeof why);
    if (st != BFP8_OK)
        cli_error(CLI_FAIL, "bench", "%s: %s", failed >= 0 ? kTimedNames[first + failed] : "timing", why);
    return st;
}

static void json_cell(FILE *j, bool *first, const gb_opts *o, const char *layer, const gb_cell *c, const char *who,
                      double us, double ratio) {
    if (!j) return;
    const double flops = 2.0 * (double)o->experts * (double)c->tokens * (double)c->n * (double)c->k;
    fprintf(j, "%s\n  {\"layout\": \"%s\", \"layer\": \"%s\", \"experts\": %" PRId64 ", \"tokens\": %" PRId64
            ", \"n\": %" PRId64 ", \"k\": %" PRId64 ", \"method\": \"%s\", \"median_us\": %.3f, \"tflops\": %.3f, "
            "\"weight_gbs\": %.1f, \"ratio_vs_baseline\": %.4f}",
            *first ? "" : ",", bfp8_grouped_layout_name(o->layout), layer, o->experts, c->tokens, c->n, c->k, who, us,
            flops / us * 1e-6, (double)o->experts * (double)c->n * (double)c->k / us * 1e-3, ratio);
    *first = false;
}

/* One layer at every token count: weights once, then a cell per T. */
static int bench_layer(const gb_opts *o, bfp8_dispatcher *d, const char *layer, int64_t n, int64_t k, test_rng *rng,
                       FILE *json, bool *json_first) {
    const char *cmd = "bench";
    const int64_t G = o->experts, kb = (k + 127) / 128, nb = (n + 127) / 128;
    const size_t wbytes = (size_t)(G * n * k);
    uint8_t *qb = malloc(wbytes ? wbytes : 1);
    float *sb = malloc(sizeof(float) * (size_t)(G * nb * kb) + 1), *w32 = NULL;
    if (!qb || !sb) {
        free(qb), free(sb);
        return cli_error(CLI_FAIL, cmd, "out of memory for %" PRId64 " experts of %" PRId64 "x%" PRId64, G, n, k);
    }
    test_rng_fill_fp8(rng, qb, (int64_t)wbytes);
    test_rng_fill_pow2(rng, sb, G * nb * kb, -8);
    /* The experts as one grouped weight, on the device once for every cell. */
    bfp8_grouped_weight *w = NULL;
    bfp8_scales sb_desc;
    bfp8_scales_init(&sb_desc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, nb, kb, sb);
    bfp8_status wst = bfp8_grouped_weight_create(qb, G, n, k, &sb_desc, &w);
    if (wst == BFP8_OK) wst = moe_weight_prepare(d, o->device, NULL, w);
    if (wst != BFP8_OK) {
        bfp8_grouped_weight_free(w);
        free(qb), free(sb);
        return cli_lib_error(cmd, "grouped weight", wst);
    }
    const bool cpu_base = o->device == BFP8_DEVICE_CPU && o->baseline && strcmp(o->baseline, "openblas") == 0;
    if (cpu_base) {
        int rc_load = cli_openblas_load(cmd);
        if (rc_load != CLI_OK) {
            bfp8_grouped_weight_free(w);
            free(qb), free(sb);
            return rc_load;
        }
        cli_openblas_set_threads(bfp8_get_num_threads());
        w32 = malloc(sizeof(float) * wbytes + 1);
        if (!w32) {
            bfp8_grouped_weight_free(w);
            free(qb), free(sb);
            return cli_error(CLI_FAIL, cmd, "out of memory for the baseline's fp32 weights (%.1f GB)", 4e-9 * (double)wbytes);
        }
        for (int64_t e = 0; e < G; e++) {
            bfp8_scales s;
            bfp8_scales_init(&s, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, nb, kb, sb + e * nb * kb);
            bfp8_dequantize(qb + e * n * k, n, k, &s, BFP8_BLOCK, w32 + e * n * k);
        }
    }
    int rc = CLI_OK;
    for (int ti = 0; ti < o->ntokens && rc == CLI_OK; ti++) {
        gb_cell c = {.o = o, .n = n, .k = k, .kb = kb, .nb = nb, .tokens = o->tokens[ti], .w32 = w32};
        const bool masked = o->layout == BFP8_GROUPED_MASKED;
        c.m = masked ? (cli_round_up(2 * c.tokens, 128) > 128 ? cli_round_up(2 * c.tokens, 128) : 128)
                     : G * cli_round_up(c.tokens, 128);
        c.rows = masked ? G * c.m : c.m;
        c.qa = malloc((size_t)(c.rows * k) + 1);
        c.sa = malloc(sizeof(float) * (size_t)(c.rows * kb) + 1);
        c.idx = malloc(sizeof(int32_t) * (size_t)c.m + 1);
        c.counts = malloc(sizeof(int32_t) * (size_t)G);
        bfp8_status st = c.qa && c.sa && c.idx && c.counts ? BFP8_OK : BFP8_ERR_OUT_OF_MEMORY;
        if (st == BFP8_OK) {
            test_rng_fill_fp8(rng, c.qa, c.rows * k);
            test_rng_fill_pow2(rng, c.sa, c.rows * kb, -4);
            for (int64_t r = 0; r < c.m; r++) c.idx[r] = -1;
            for (int64_t e = 0; e < G; e++) {
                c.counts[e] = (int32_t)c.tokens;
                if (!masked)
                    for (int64_t i = 0; i < c.tokens; i++) c.idx[expert_row0(&c, e) + i] = (int32_t)e;
            }
        }
        /* The grouped call, in the layouts of the backend that will run it. */
        if (st == BFP8_OK) {
            const moe_call_spec spec = {.layout = o->layout, .m = c.m, .expected_m = c.tokens, .qa = c.qa, .sa = c.sa,
                                        .m_indices = c.idx, .masked_m = c.counts, .y_dtype = o->out_dtype,
                                        .device = o->device};
            char why[BFP8_REASON_MAX];
            st = moe_call_init(&c.call, d, w, &spec, why, sizeof why);
            if (st == BFP8_ERR_UNSUPPORTED) {
                printf("%-11s %-8s %4" PRId64 " %6" PRId64 "   n/a: %s\n", bfp8_grouped_layout_name(o->layout), layer,
                       G, c.tokens, why);
                cell_free(&c);
                continue;
            }
        }
        const bfp8_backend *be = c.call.backend;
        double t[2] = {0, 0}; /* µs: the grouped call, the baseline */
        gb_call call = {.d = d, .c = &c};
        if (st == BFP8_OK) {
            fprintf(stderr, "bench: %s %s G=%" PRId64 " T=%" PRId64 " on %s\n", bfp8_grouped_layout_name(o->layout),
                    layer, G, c.tokens, be->name);
            /* One untimed call: a failure here is the grouped call's, never the baseline's. */
            st = call_grouped(&call);
            if (st == BFP8_OK && cuda_device(o)) st = bfp8_cuda_synchronize(NULL);
        }
        /* The baseline: one dense call per expert on its rows. */
        bool have_base = false;
        if (st == BFP8_OK && o->baseline && strcmp(o->baseline, "none") != 0) {
            if (o->device == BFP8_DEVICE_CUDA) {
                c.per_expert = calloc((size_t)G, sizeof *c.per_expert);
                const bfp8_backend *lt = bfp8_dispatcher_find(d, o->baseline);
                if (!c.per_expert) st = BFP8_ERR_OUT_OF_MEMORY;
                else if (!lt) {
                    cli_error(CLI_FAIL, cmd, "no backend '%s' for the baseline", o->baseline);
                    st = BFP8_ERR_NOT_FOUND;
                }
                if (st == BFP8_OK && (st = bfp8_dispatcher_create_default(&c.base_d)) == BFP8_OK)
                    st = bfp8_dispatcher_set_policy(c.base_d, BFP8_POLICY_STRICT, o->baseline);
                const uint32_t fl = bfp8_scale_layouts_for(BFP8_SCALE_FP32);
                for (int64_t e = 0; e < G && st == BFP8_OK; e++) {
                    bfp8_gemm_args *a = &c.per_expert[e];
                    const int64_t r0 = expert_row0(&c, e);
                    *a = (bfp8_gemm_args){.m = c.tokens, .n = n, .k = k, .a = c.call.g.a + r0 * k,
                                          .b = c.call.g.b + e * n * k, .y_dtype = o->out_dtype, .device = o->device};
                    /* Each expert's scales in cuBLASLt's layouts, its own output buffer. */
                    bfp8_scale_layout la = BFP8_LAYOUT_ROW_MAJOR, lb = BFP8_LAYOUT_ROW_MAJOR;
                    const bfp8_problem lp = {.device = o->device, .scale_format = BFP8_SCALE_FP32, .a_layouts = fl,
                                             .b_layouts = fl};
                    if (bfp8_backend_layouts(lt, &lp, &la, &lb) != BFP8_OK) st = BFP8_ERR_UNSUPPORTED;
                    const size_t sab = bfp8_scales_bytes(la, c.tokens, kb), sbb = bfp8_scales_bytes(lb, nb, kb);
                    char *hs = calloc(1, (sab > sbb ? sab : sbb) + 1);
                    bfp8_scales src;
                    if (!hs) st = BFP8_ERR_OUT_OF_MEMORY;
                    if (st == BFP8_OK) {
                        bfp8_scales_init(&src, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, c.tokens, kb, c.sa + r0 * kb);
                        bfp8_scales_init(&a->a_scales, BFP8_SCALE_FP32, la, c.tokens, kb, hs);
                        st = bfp8_scales_convert(&src, &a->a_scales);
                    }
                    if (st == BFP8_OK && (st = bfp8_cuda_malloc(sab + 1, &a->a_scales.data)) == BFP8_OK)
                        st = bfp8_cuda_upload(a->a_scales.data, hs, sab);
                    if (st == BFP8_OK) {
                        bfp8_scales_init(&src, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, nb, kb, sb + e * nb * kb);
                        bfp8_scales_init(&a->b_scales, BFP8_SCALE_FP32, lb, nb, kb, hs);
                        st = bfp8_scales_convert(&src, &a->b_scales);
                    }
                    if (st == BFP8_OK && (st = bfp8_cuda_malloc(sbb + 1, &a->b_scales.data)) == BFP8_OK)
                        st = bfp8_cuda_upload(a->b_scales.data, hs, sbb);
                    if (st == BFP8_OK)
                        st = bfp8_cuda_malloc((size_t)(c.tokens * n) * bfp8_dtype_size(o->out_dtype) + 1, &a->y);
                    free(hs);
                }
            } else {
                c.a32 = malloc(sizeof(float) * (size_t)(c.rows * k) + 1);
                c.c32 = malloc(sizeof(float) * (size_t)(c.rows * n) + 1);
                if (!c.a32 || !c.c32 || !w32) st = BFP8_ERR_OUT_OF_MEMORY;
                for (int64_t e = 0; e < G && st == BFP8_OK; e++) {
                    bfp8_scales s;
                    const int64_t r0 = expert_row0(&c, e);
                    bfp8_scales_init(&s, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, c.tokens, kb, c.sa + r0 * kb);
                    st = bfp8_dequantize(c.qa + r0 * k, c.tokens, k, &s, 1, c.a32 + r0 * k);
                }
            }
            if (st == BFP8_OK) {
                fprintf(stderr, "bench: %s %s G=%" PRId64 " T=%" PRId64 " baseline %s per expert\n",
                        bfp8_grouped_layout_name(o->layout), layer, G, c.tokens, o->baseline);
                /* cuda: one untimed call says whether cuBLASLt runs the experts' shape. (Not on the CPU, where
                 * OpenBLAS always runs and its spinning workers would slow the grouped call timed next.) */
                if (cuda_device(o) && (st = call_baseline(&call)) == BFP8_OK) st = bfp8_cuda_synchronize(NULL);
            }
            if (st == BFP8_ERR_UNSUPPORTED) {
                printf("%-11s %-8s %4" PRId64 " %6" PRId64 "   baseline n/a: %s\n", bfp8_grouped_layout_name(o->layout),
                       layer, G, c.tokens, bfp8_last_error());
                st = BFP8_OK;
            } else if (st == BFP8_OK) {
                have_base = true;
            }
        }
        if (st == BFP8_OK && have_base && cuda_device(o)) {
            st = time_calls(o, 0, 2, &call, t); /* interleaved */
        } else if (st == BFP8_OK) {
            /* The grouped call first: OpenBLAS's workers spin for a while after a call and would steal its cores.
             * Then let them go idle before the next cell. */
            st = time_calls(o, 0, 1, &call, &t[0]);
            if (st == BFP8_OK && have_base) {
                st = time_calls(o, 1, 1, &call, &t[1]);
                nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 300000000}, NULL);
            }
        }
        const double us = t[0], base_us = t[1];
        if (st != BFP8_OK) {
            rc = cli_lib_error(cmd, layer, st);
        } else {
            const double flops = 2.0 * (double)G * (double)c.tokens * (double)n * (double)k;
            const double wgbs = (double)G * (double)n * (double)k / us * 1e-3;
            char ratio[32] = "-";
            if (have_base) snprintf(ratio, sizeof ratio, "%.2fx", base_us / us);
            printf("%-11s %-8s %4" PRId64 " %6" PRId64 "  %-12s %10.1f %9.2f %9.1f", bfp8_grouped_layout_name(o->layout),
                   layer, G, c.tokens, be->name, us, flops / us * 1e-6, wgbs);
            if (have_base) printf("  %-9s %10.1f %8s", o->baseline, base_us, ratio);
            printf("\n");
            json_cell(json, json_first, o, layer, &c, be->name, us, have_base ? base_us / us : 0);
            if (have_base) json_cell(json, json_first, o, layer, &c, o->baseline, base_us, 1.0);
        }
        bfp8_dispatcher_free(c.base_d);
        cell_free(&c);
        fflush(stdout);
    }
    bfp8_grouped_weight_free(w);
    free(qb), free(sb), free(w32);
    return rc;
}

int cmd_bench_grouped(int argc, char **argv) {
    const char *cmd = "bench";
    gb_opts o = {.experts = 8, .gate_up = true, .down = true, .out_dtype = BFP8_DTYPE_BF16, .iters = -1,
                 .warmup = -1};
    const char *layer = "both";
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(USAGE, stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--grouped", &v)) {
            if (!v || bfp8_grouped_layout_parse(v, &o.layout) != BFP8_OK || o.layout == BFP8_GROUPED_NONE)
                return cli_usage_error(cmd, USAGE, "bad --grouped '%s' (contiguous or masked)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--experts", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--experts", v, 1, 1024, &o.experts))) return rc;
        } else if (cli_opt(argc, argv, &i, "--tokens", &v)) {
            if (!v || !cli_parse_i64_list(v, 1, 1 << 16, o.tokens, GB_MAX_TOKENS, &o.ntokens))
                return cli_usage_error(cmd, USAGE, "bad --tokens '%s' (a list like 16,64)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--layer", &v)) {
            if (!v || (strcmp(v, "gate_up") && strcmp(v, "down") && strcmp(v, "both")))
                return cli_usage_error(cmd, USAGE, "bad --layer '%s' (gate_up, down or both)", v ? v : "");
            layer = v;
        } else if (cli_opt(argc, argv, &i, "--device", &v)) {
            if (!v || bfp8_device_parse(v, &o.device) != BFP8_OK)
                return cli_usage_error(cmd, USAGE, "bad --device '%s' (cpu or cuda)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--backend", &v)) {
            if (!v || !*v) return cli_usage_error(cmd, USAGE, "--backend needs a name");
            o.backend = v;
        } else if (cli_opt(argc, argv, &i, "--baseline", &v)) {
            if (!v || (strcmp(v, "openblas") && strcmp(v, "cublaslt") && strcmp(v, "none")))
                return cli_usage_error(cmd, USAGE, "bad --baseline '%s' (openblas, cublaslt or none)", v ? v : "");
            o.baseline = v;
        } else if (cli_opt(argc, argv, &i, "--out-dtype", &v)) {
            if (!cli_parse_out_dtype(v, &o.out_dtype))
                return cli_usage_error(cmd, USAGE, "bad --out-dtype '%s' (bf16, fp16 or fp32)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--iters", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--iters", v, 1, 100000, &o.iters))) return rc;
        } else if (cli_opt(argc, argv, &i, "--warmup", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--warmup", v, 0, 100000, &o.warmup))) return rc;
        } else if (cli_opt(argc, argv, &i, "--threads", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--threads", v, 1, 256, &o.threads))) return rc;
        } else if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--seed", v, 1, INT64_MAX, &o.seed))) return rc;
        } else if (cli_opt(argc, argv, &i, "--json", &v)) {
            if (!v || !*v) return cli_usage_error(cmd, USAGE, "--json needs a file name");
            o.json_path = v;
        } else {
            return cli_usage_error(cmd, USAGE, "unknown option '%s'", argv[i]);
        }
    }
    if (o.layout == BFP8_GROUPED_NONE) return cli_usage_error(cmd, USAGE, "--grouped contiguous|masked is required");
    const bool cuda = o.device == BFP8_DEVICE_CUDA;
    if (o.baseline && strcmp(o.baseline, cuda ? "openblas" : "cublaslt") == 0)
        return cli_usage_error(cmd, USAGE, "--baseline %s does not run on %s", o.baseline, bfp8_device_name(o.device));
    if (!o.baseline) o.baseline = cuda ? "cublaslt" : "openblas";
    if (!o.ntokens) {
        const int64_t def[2][2] = {{128, 512}, {16, 64}};
        o.ntokens = 2;
        memcpy(o.tokens, def[o.layout == BFP8_GROUPED_MASKED], sizeof def[0]);
    }
    if (o.iters < 0) o.iters = cuda ? 50 : 5;
    if (o.warmup < 0) o.warmup = cuda ? 5 : 1;
    o.gate_up = strcmp(layer, "down") != 0;
    o.down = strcmp(layer, "gate_up") != 0;
    if (o.threads > 0 && bfp8_set_num_threads((int)o.threads) != BFP8_OK)
        return cli_lib_error(cmd, "threads", BFP8_ERR_INVALID_ARGUMENT);
#ifdef BFP8_HAVE_OPENBLAS
    if (!cuda) openblas_set_num_threads(bfp8_get_num_threads());
#endif
    char why[BFP8_REASON_MAX];
    if (cuda && !bfp8_cuda_available(why, sizeof why)) return cli_error(CLI_FAIL, cmd, "--device cuda: %s", why);
    bfp8_dispatcher *d = NULL;
    bfp8_status st = bfp8_dispatcher_create_default(&d);
    if (st == BFP8_OK && o.backend) st = bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, o.backend);
    if (st != BFP8_OK) {
        bfp8_dispatcher_free(d);
        return cli_lib_error(cmd, "dispatcher", st);
    }
    FILE *json = NULL;
    bool json_first = true;
    if (o.json_path && !(json = cli_json_open(cmd, o.json_path))) {
        bfp8_dispatcher_free(d);
        return CLI_FAIL;
    }
    const uint64_t seed = o.seed ? (uint64_t)o.seed : test_seed_fresh() >> 1;
    test_rng rng;
    test_rng_init(&rng, seed);
    printf("blockfp8 bench --grouped %s: %" PRId64 " experts, %s, %s output, %d thread(s), seed %llu; baseline: %s per "
           "expert\n", bfp8_grouped_layout_name(o.layout), o.experts, bfp8_device_name(o.device),
           bfp8_dtype_name(o.out_dtype), bfp8_get_num_threads(), (unsigned long long)seed, o.baseline);
    printf("%-11s %-8s %4s %6s  %-12s %10s %9s %9s  %-9s %10s %8s\n", "layout", "layer", "G", "T", "backend", "us",
           "TFLOP/s", "W GB/s", "baseline", "us", "ratio");
    rc = CLI_OK;
    if (o.gate_up) rc = bench_layer(&o, d, "gate_up", 4096, 7168, &rng, json, &json_first);
    if (o.down && rc == CLI_OK) rc = bench_layer(&o, d, "down", 7168, 2048, &rng, json, &json_first);
    rc = cli_json_close(cmd, json, o.json_path, rc);
    bfp8_dispatcher_free(d);
    return rc;
}
