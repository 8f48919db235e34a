/* `blockfp8 bench`: times GEMM backends on the DeepSeek-R1 shapes (or given ones) against a baseline measured in
 * the same run. Every number comes from the named backend: the dispatcher runs with the strict policy, so a
 * backend that cannot run a cell reports "n/a" instead of silently timing another one.
 * `bench --model ...` is the whole-model benchmark of tools/bench_model.c, `bench --grouped ...` the MoE expert
 * layers of tools/bench_grouped.c. */
#include "cli.h"
#include "cuda_timer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <time.h>

static const char USAGE[] =
    "usage: blockfp8 bench [--device cpu|cuda] [--backend NAME|all] [--shapes dsr1|NxK,...] [--m LIST]\n"
    "                      [--out-dtype bf16|fp16|fp32] [--scale-format fp32|ue8m0] [--baseline NAME]\n"
    "                      [--json FILE] [--iters N] [--warmup N] [--threads N] [--seed S] [--l2 clean|dirty|keep]\n"
    "       blockfp8 bench --model dsr1 ...   (the whole-model benchmark: blockfp8 bench --model dsr1 --help)\n"
    "       blockfp8 bench --grouped contiguous|masked ...   (the MoE expert layers: blockfp8 bench --grouped masked --help)\n"
    "       blockfp8 bench --tp R ...   (DeepSeek-R1 layers tensor-parallel over R GPUs: blockfp8 bench --tp 2 --help)\n"
    "\n"
    "Times y = x @ W^T on random block-quantized operands: the median of --iters runs per cell after --warmup\n"
    "untimed runs. Each backend runs through the dispatcher with the strict policy, so a cell it cannot run is\n"
    "reported as n/a with the reason, never timed on another backend. A cell's backends are timed interleaved:\n"
    "run i times each of them once, starting one further along the list each run.\n"
    "\n"
    "  --device D        cpu (default) or cuda (device memory, CUDA events, L2 flushed between runs)\n"
    "  --backend NAME    a backend, or all: every backend of the device except the scalar reference `ref`\n"
    "                    (default: cpu on the cpu, all on cuda)\n"
    "  --shapes S        dsr1 (the eight DeepSeek-R1 layers of bench/data/dsr1_shapes.csv, default) or N x K pairs: 2112x7168,...\n"
    "  --m LIST          token counts (default 1,16,128,512 on cpu; 1,16,64,128,512,4096 on cuda)\n"
    "  --out-dtype T     bf16 (default), fp16 or fp32\n"
    "  --scale-format F  fp32 (default) or ue8m0\n"
    "  --baseline NAME   openblas (cpu: cblas_sgemm on the dequantized fp32 weight, same thread count; loaded\n"
    "                    at run time, BFP8_OPENBLAS=LIBRARY names another) or cublaslt (cuda);\n"
    "                    ratio = baseline time / backend time, so above 1 is faster\n"
    "  --json FILE       records {backend, m, n, k, out_dtype, median_us, tflops, gbs[, baseline_ratio]}\n"
    "  --iters N         timed runs per cell (default 5 on cpu, 50 on cuda)\n"
    "  --warmup N        untimed runs first (default 1 on cpu, 5 on cuda; at least 1: the run that checks the\n"
    "                    backend can run the cell)\n"
    "  --threads N       CPU threads (default: BFP8_NUM_THREADS or every core)\n"
    "  --seed S          random data seed (default: fresh)\n"
    "  --l2 F            cuda: the L2 before each timed run. clean (default): a read of twice its size, so no\n"
    "                    operand is cached and no line is dirty; dirty: a write of that size (no operand cached,\n"
    "                    but the run pays to write back the flush's dirty lines, as after PyTorch's zero_());\n"
    "                    keep: no flush (each backend has its own operands and a cell's backends alternate, so a\n"
    "                    call finds in the L2 what the one before it left)\n";

#define MAX_SHAPES 32
#define MAX_MS 32
#define MAX_BACKENDS 16


typedef struct bench_opts {
    bfp8_device device;
    const char *backend, *baseline, *json_path;
    int64_t shapes[MAX_SHAPES][2];
    int nshapes;
    int64_t ms[MAX_MS];
    int nms;
    bfp8_dtype out_dtype;
    bfp8_scale_format format;
    int64_t iters, warmup, threads, seed;
    cli_l2_flush l2;
} bench_opts;

/* One timed thing: a backend through the strict dispatcher, or the OpenBLAS baseline. */
typedef struct bench_call {
    bfp8_dispatcher *d;
    const char *backend; /* the one backend the strict policy allows */
    const bfp8_gemm_args *args;
    /* OpenBLAS baseline */
    const float *a_f32, *w_f32;
    float *c_f32;
    int64_t m, n, k;
} bench_call;

/* The policy is set on every call because the backends of a cell are timed interleaved on one dispatcher; it is
 * host work, done before the GPU hold of the timer ends. */
static bfp8_status call_gemm(void *ctx) {
    const bench_call *c = ctx;
    bfp8_status st = bfp8_dispatcher_set_policy(c->d, BFP8_POLICY_STRICT, c->backend);
    return st == BFP8_OK ? bfp8_gemm(c->d, c->args) : st;
}

static bfp8_status call_openblas(void *ctx) {
    const bench_call *c = ctx;
    cli_openblas_sgemm_nt(c->m, c->n, c->k, c->a_f32, c->w_f32, c->c_f32);
    return BFP8_OK;
}

/* Host scales in row-major -> a copy in `layout` (host), malloc'ed into *data. */
static bfp8_status scales_in_layout(const bfp8_scales *src, bfp8_scale_layout layout, bfp8_scales *dst,
                                    void **data) {
    size_t bytes = bfp8_scales_bytes(layout, src->rows, src->kblocks);
    *data = malloc(bytes ? bytes : 1);
    if (!*data) return BFP8_ERR_OUT_OF_MEMORY;
    bfp8_status st = bfp8_scales_init(dst, src->format, layout, src->rows, src->kblocks, *data);
    return st == BFP8_OK ? bfp8_scales_convert(src, dst) : st;
}

typedef struct json_out {
    FILE *f;
    int records;
} json_out;

static void json_record(json_out *j, const char *backend, int64_t m, int64_t n, int64_t k, bfp8_dtype dt,
                        double us, double flops, double bytes, double ratio, const char *extra) {
    if (!j->f) return;
    fprintf(j->f, "%s\n  {\"backend\": \"%s\", \"m\": %" PRId64 ", \"n\": %" PRId64 ", \"k\": %" PRId64
                  ", \"out_dtype\": \"%s\", \"median_us\": %.3f, \"tflops\": %.6f, \"gbs\": %.3f",
            j->records ? "," : "", backend, m, n, k, bfp8_dtype_name(dt), us, flops / us * 1e-6, bytes / us * 1e-3);
    if (ratio > 0) fprintf(j->f, ", \"baseline_ratio\": %.4f", ratio);
    if (extra) fprintf(j->f, ", %s", extra);
    fputc('}', j->f);
    j->records++;
}

static int parse_shapes(const char *s, bench_opts *o) {
    if (strcmp(s, "dsr1") == 0) {
        for (o->nshapes = 0; o->nshapes < CLI_DSR1_LAYER_COUNT; o->nshapes++) {
            o->shapes[o->nshapes][0] = CLI_DSR1_LAYERS[o->nshapes].n;
            o->shapes[o->nshapes][1] = CLI_DSR1_LAYERS[o->nshapes].k;
        }
        return CLI_OK;
    }
    o->nshapes = 0;
    if (cli_list_has_empty_item(s))
        return cli_usage_error("bench", USAGE, "--shapes: '%s' has an empty item (NxK pairs separated by commas)", s);
    char *copy = strdup(s), *save = NULL;
    if (!copy) return cli_error(CLI_FAIL, "bench", "out of memory");
    int rc = CLI_OK;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == CLI_OK; tok = strtok_r(NULL, ",", &save)) {
        char *x = strchr(tok, 'x');
        if (!x) x = strchr(tok, 'X');
        int64_t n = 0, k = 0;
        if (x) *x = '\0';
        if (!x || !cli_parse_i64(tok, 1, CLI_MAX_DIM, &n) || !cli_parse_i64(x + 1, 1, CLI_MAX_DIM, &k) ||
            o->nshapes == MAX_SHAPES)
            rc = cli_usage_error("bench", USAGE, "--shapes: '%s' is not dsr1 or a list of up to %d NxK pairs", s,
                                 MAX_SHAPES);
        else
            o->shapes[o->nshapes][0] = n, o->shapes[o->nshapes][1] = k, o->nshapes++;
    }
    free(copy);
    if (rc == CLI_OK && o->nshapes == 0) rc = cli_usage_error("bench", USAGE, "--shapes: empty list");
    return rc;
}

/* Host and (for cuda) device copies of one cell's operands. */
typedef struct cell_data {
    uint8_t *qa;
    float *sa;
    void *y;
    float *a_f32, *c_f32; /* baseline operands */
} cell_data;

static void *dev_copy(const void *host, size_t bytes, bfp8_status *st) {
    void *p = NULL;
    if (*st == BFP8_OK) *st = test_dev_upload(host, bytes, &p);
    return p;
}

typedef struct bench_state {
    const bench_opts *o;
    bfp8_dispatcher *d;
    const bfp8_backend *backends[MAX_BACKENDS];
    int nbackends;
    bool first_is_baseline; /* backends[0] is the baseline (cublaslt) */
    json_out json;
    int cells, cells_total;
    /* Per backend, over the cells with a baseline ratio: sum of log(ratio), count, cells slower than the baseline. */
    double log_ratio_sum[MAX_BACKENDS];
    int ratio_cells[MAX_BACKENDS], slower_cells[MAX_BACKENDS];
} bench_state;

static double frobenius_diff(const void *y, bfp8_dtype dt, const float *ref, int64_t count) {
    test_frobenius f = {0};
    for (int64_t i = 0; i < count; i++) test_frobenius_add(&f, test_load_f32(y, dt, i), ref[i]);
    return test_frobenius_value(&f);
}

/* One backend's call in a cell: its arguments, with the scales in the layouts it takes and, on cuda, device copies
 * of every operand (each backend its own, so that none reads what another left in place). */
typedef struct backend_run {
    bfp8_gemm_args g;
    bench_call call;
    void *sa_data, *sb_data, *dev[5];
} backend_run;

static bfp8_status backend_run_prepare(backend_run *r, const bfp8_backend *be, const bench_opts *o,
                                       const bfp8_scales *sa, const bfp8_scales *sb, size_t a_bytes, size_t b_bytes,
                                       size_t y_bytes) {
    /* The layouts bfp8_linear would hand the backend; row-major where it consumes none of this format's, and the
     * strict call says why it cannot run. */
    const uint32_t layouts = bfp8_scale_layouts_for(o->format);
    const bfp8_problem lp = {.a_layouts = layouts, .b_layouts = layouts};
    bfp8_scale_layout la = BFP8_LAYOUT_ROW_MAJOR, lb = BFP8_LAYOUT_ROW_MAJOR;
    (void)bfp8_backend_layouts(be, &lp, &la, &lb);
    bfp8_status st = scales_in_layout(sa, la, &r->g.a_scales, &r->sa_data);
    if (st == BFP8_OK) st = scales_in_layout(sb, lb, &r->g.b_scales, &r->sb_data);
    if (st != BFP8_OK || o->device != BFP8_DEVICE_CUDA) return st;
    r->dev[0] = dev_copy(r->g.a, a_bytes, &st);
    r->dev[1] = dev_copy(r->g.b, b_bytes, &st);
    r->dev[2] = dev_copy(r->sa_data, bfp8_scales_bytes(la, sa->rows, sa->kblocks), &st);
    r->dev[3] = dev_copy(r->sb_data, bfp8_scales_bytes(lb, sb->rows, sb->kblocks), &st);
    r->dev[4] = dev_copy(NULL, y_bytes, &st);
    if (st != BFP8_OK) return st;
    r->g.a = r->dev[0], r->g.b = r->dev[1], r->g.a_scales.data = r->dev[2], r->g.b_scales.data = r->dev[3];
    r->g.y = r->dev[4];
    return BFP8_OK;
}

static void backend_run_release(backend_run *r) {
    for (int i = 0; i < 5; i++)
        if (r->dev[i]) bfp8_cuda_free(r->dev[i]);
    free(r->sa_data);
    free(r->sb_data);
    *r = (backend_run){0};
}

/* Runs every backend (and the baseline) on one shape for every M. */
static int bench_shape(bench_state *s, int64_t n, int64_t k, test_rng *rng) {
    const bench_opts *o = s->o;
    const char *cmd = "bench";
    int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
    int rc = CLI_OK;
    bfp8_status st = BFP8_OK;
    size_t nk = (size_t)n * (size_t)k, ysz = bfp8_dtype_size(o->out_dtype);
    /* Every buffer below is at most 4 bytes an element of [M or N, K] or [M, N]: sizes past that do not fit. */
    const size_t max_elems = SIZE_MAX / sizeof(float);
    for (int mi = 0; mi < o->nms; mi++)
        if (nk > max_elems || (size_t)o->ms[mi] * (size_t)k > max_elems || (size_t)o->ms[mi] * (size_t)n > max_elems)
            return cli_error(CLI_FAIL, cmd, "M=%" PRId64 " N=%" PRId64 " K=%" PRId64 ": the buffers overflow",
                             o->ms[mi], n, k);
    float *w = malloc(sizeof(float) * nk), *w_deq = NULL;
    uint8_t *qb = malloc(nk ? nk : 1);
    float *sb = malloc(sizeof(float) * (size_t)(nb * kb));
    if (!w || !qb || !sb) {
        rc = cli_error(CLI_FAIL, cmd, "out of memory for a %" PRId64 "x%" PRId64 " weight", n, k);
        goto out;
    }
    fprintf(stderr, "bench: quantizing a random %" PRId64 "x%" PRId64 " weight...\n", n, k);
    test_rng_fill_normal(rng, w, BFP8_DTYPE_F32, (int64_t)nk, 0.02f);
    bfp8_scales sb_desc;
    bfp8_scales_init(&sb_desc, o->format, BFP8_LAYOUT_ROW_MAJOR, nb, kb, sb);
    if ((st = bfp8_quantize_weight(w, BFP8_DTYPE_F32, n, k, qb, &sb_desc, NULL)) != BFP8_OK) {
        rc = cli_lib_error(cmd, "bfp8_quantize_weight", st);
        goto out;
    }
    if (o->baseline && o->device == BFP8_DEVICE_CPU) { /* the baseline's fp32 weight: the same values */
        w_deq = w, w = NULL;
        if ((st = bfp8_dequantize(qb, n, k, &sb_desc, 128, w_deq)) != BFP8_OK) {
            rc = cli_lib_error(cmd, "bfp8_dequantize", st);
            goto out;
        }
    }
    free(w), w = NULL;

    for (int mi = 0; mi < o->nms && rc == CLI_OK; mi++) {
        int64_t m = o->ms[mi];
        size_t mk = (size_t)m * (size_t)k, mn = (size_t)m * (size_t)n;
        float *x = malloc(sizeof(float) * (mk ? mk : 1)), *sa = malloc(sizeof(float) * (size_t)(m * kb + 1));
        uint8_t *qa = malloc(mk ? mk : 1);
        void *y = malloc(ysz * (mn ? mn : 1));
        float *a_f32 = NULL, *c_f32 = NULL;
        if (!x || !sa || !qa || !y) {
            rc = cli_error(CLI_FAIL, cmd, "out of memory for M=%" PRId64, m);
            goto next_m;
        }
        test_rng_fill_normal(rng, x, BFP8_DTYPE_F32, (int64_t)mk, 1.0f);
        bfp8_scales sa_desc;
        bfp8_scales_init(&sa_desc, o->format, BFP8_LAYOUT_ROW_MAJOR, m, kb, sa);
        if ((st = bfp8_quantize_act(x, BFP8_DTYPE_F32, m, k, qa, &sa_desc, NULL)) != BFP8_OK) {
            rc = cli_lib_error(cmd, "bfp8_quantize_act", st);
            goto next_m;
        }
        double flops = 2.0 * (double)m * (double)n * (double)k;
        double bk_us[MAX_BACKENDS] = {0};
        bool bk_ran[MAX_BACKENDS] = {false};
        bench_call base_call = {0}; /* the OpenBLAS baseline's operands */
        /* The baseline's output once, untimed: the guard below compares every backend with it. */
        if (o->baseline && o->device == BFP8_DEVICE_CPU) {
            a_f32 = x, x = NULL;
            c_f32 = malloc(sizeof(float) * (mn ? mn : 1));
            if (!c_f32) {
                rc = cli_error(CLI_FAIL, cmd, "out of memory for the baseline output");
                goto next_m;
            }
            if ((st = bfp8_dequantize(qa, m, k, &sa_desc, 1, a_f32)) != BFP8_OK) {
                rc = cli_lib_error(cmd, "bfp8_dequantize", st);
                goto next_m;
            }
            base_call = (bench_call){.a_f32 = a_f32, .w_f32 = w_deq, .c_f32 = c_f32, .m = m, .n = n, .k = k};
            call_openblas(&base_call);
            cli_openblas_settle();
        }
        /* Each backend's operands (its scale layouts; device copies on cuda), then one untimed call: a backend
         * that cannot run the cell says why (n/a) and is not timed. The others are timed together, interleaved. */
        backend_run runs[MAX_BACKENDS] = {0};
        bfp8_status (*fns[MAX_BACKENDS])(void *ctx);
        void *ctxs[MAX_BACKENDS];
        int timed[MAX_BACKENDS], ntimed = 0;
        for (int bi = 0; bi < s->nbackends && rc == CLI_OK; bi++) {
            const bfp8_backend *be = s->backends[bi];
            backend_run *r = &runs[bi];
            r->g = (bfp8_gemm_args){.m = m, .n = n, .k = k, .a = qa, .b = qb, .y = y, .y_dtype = o->out_dtype,
                                    .device = o->device};
            r->call = (bench_call){.d = s->d, .backend = be->name, .args = &r->g};
            if ((st = backend_run_prepare(r, be, o, &sa_desc, &sb_desc, mk, nk, ysz * mn)) != BFP8_OK) {
                rc = cli_lib_error(cmd, "operands", st);
                break;
            }
            fprintf(stderr, "bench: [%d/%d] %s M=%" PRId64 " N=%" PRId64 " K=%" PRId64 "\n", s->cells + 1,
                    s->cells_total, be->name, m, n, k);
            st = call_gemm(&r->call);
            if (st == BFP8_ERR_UNSUPPORTED) { /* strict: this backend cannot run this cell; say why, go on */
                printf("%-10s %6" PRId64 " %6" PRId64 " %6" PRId64 " %10s   n/a: %s\n", be->name, m, n, k, "n/a",
                       bfp8_last_error());
                continue;
            }
            if (st == BFP8_OK && o->device == BFP8_DEVICE_CUDA) st = bfp8_cuda_synchronize(NULL);
            if (st != BFP8_OK) {
                rc = cli_error(CLI_FAIL, cmd, "%s: %s: %s", be->name, bfp8_status_name(st), bfp8_last_error());
                break;
            }
            /* A guard, not the accuracy test (`blockfp8 check` is): the same operands as the baseline. */
            if (c_f32 && mn > 0) {
                double e = frobenius_diff(y, o->out_dtype, c_f32, (int64_t)mn);
                if (!(e <= 1e-2))
                    fprintf(stderr, "bench: warning: %s differs from the baseline by %.3g (relative)\n", be->name, e);
            }
            fns[ntimed] = call_gemm, ctxs[ntimed] = &r->call, timed[ntimed++] = bi;
        }
        if (rc == CLI_OK && ntimed > 0) {
            double med[MAX_BACKENDS];
            char why[BFP8_REASON_MAX];
            const int warmup = o->warmup > 0 ? (int)o->warmup - 1 : 0; /* the call above was one */
            int failed = -1;
            st = cli_time_medians(o->device, warmup, (int)o->iters, o->l2, fns, ctxs, ntimed, med, &failed, why,
                                  sizeof why);
            if (st != BFP8_OK) {
                rc = cli_error(CLI_FAIL, cmd, "%s M=%" PRId64 " N=%" PRId64 " K=%" PRId64 ": %s: %s",
                               failed >= 0 ? s->backends[timed[failed]]->name : "timing", m, n, k,
                               bfp8_status_name(st), why);
            } else {
                for (int t = 0; t < ntimed; t++) bk_us[timed[t]] = med[t], bk_ran[timed[t]] = true;
            }
        }
        for (int bi = 0; bi < s->nbackends; bi++) backend_run_release(&runs[bi]);
        if (rc != CLI_OK) goto next_m;
        double base_us = s->first_is_baseline && bk_ran[0] ? bk_us[0] : 0;
        /* The baseline is timed after the backends: OpenBLAS's workers keep spinning for a while after a call
         * and would steal the cores from whatever runs next. */
        if (c_f32) {
            fprintf(stderr, "bench: [%d/%d] openblas M=%" PRId64 " N=%" PRId64 " K=%" PRId64 "\n", s->cells + 1,
                    s->cells_total, m, n, k);
            char why[BFP8_REASON_MAX];
            if ((st = cli_time_median(o->device, (int)o->warmup, (int)o->iters, o->l2, call_openblas, &base_call, &base_us, why, sizeof why)) != BFP8_OK) {
                rc = cli_error(CLI_FAIL, cmd, "openblas: %s: %s", bfp8_status_name(st), why);
                goto next_m;
            }
            cli_openblas_settle();
            double bytes = 4.0 * ((double)n * k + (double)m * k + (double)m * n);
            printf("%-10s %6" PRId64 " %6" PRId64 " %6" PRId64 " %10.1f %9.3f %9.1f %9s\n", "openblas", m, n, k,
                   base_us, flops / base_us * 1e-6, bytes / base_us * 1e-3, "1.00x");
            char extra[96];
            snprintf(extra, sizeof extra, "\"threads\": %d, \"openblas_core\": \"%s\"", bfp8_get_num_threads(),
                     cli_openblas_core());
            json_record(&s->json, "openblas", m, n, k, BFP8_DTYPE_F32, base_us, flops, bytes, 0, extra);
        }
        for (int bi = 0; bi < s->nbackends; bi++) {
            if (!bk_ran[bi]) continue;
            const bfp8_backend *be = s->backends[bi];
            double us = bk_us[bi];
            double bytes = (double)n * k + (double)m * k + (double)ysz * m * n;
            double ratio = base_us > 0 ? base_us / us : 0;
            char rbuf[32] = "-";
            if (ratio > 0) snprintf(rbuf, sizeof rbuf, "%.2fx", ratio);
            if (ratio > 0 && !(s->first_is_baseline && bi == 0)) {
                s->log_ratio_sum[bi] += log(ratio);
                s->ratio_cells[bi]++;
                s->slower_cells[bi] += ratio < 1.0;
            }
            printf("%-10s %6" PRId64 " %6" PRId64 " %6" PRId64 " %10.1f %9.3f %9.1f %9s\n", be->name, m, n, k, us,
                   flops / us * 1e-6, bytes / us * 1e-3, rbuf);
            char extra[64];
            snprintf(extra, sizeof extra, "\"threads\": %d", bfp8_get_num_threads());
            json_record(&s->json, be->name, m, n, k, o->out_dtype, us, flops, bytes, ratio,
                        o->device == BFP8_DEVICE_CPU ? extra : NULL);
        }
        s->cells++;
    next_m:
        free(x), free(sa), free(qa), free(y), free(a_f32), free(c_f32);
        fflush(stdout);
    }
out:
    free(w), free(w_deq), free(qb), free(sb);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 || strncmp(argv[i], "--model=", 8) == 0) return cmd_bench_model(argc, argv);
        if (strcmp(argv[i], "--tp") == 0 || strncmp(argv[i], "--tp=", 5) == 0) return cmd_bench_tp(argc, argv);
        if (strcmp(argv[i], "--grouped") == 0 || strncmp(argv[i], "--grouped=", 10) == 0)
            return cmd_bench_grouped(argc, argv);
    }
    bench_opts o = {.device = BFP8_DEVICE_CPU, .out_dtype = BFP8_DTYPE_BF16, .format = BFP8_SCALE_FP32,
                    .iters = -1, .warmup = -1, .threads = 0, .seed = 0, .l2 = CLI_L2_CLEAN};
    const char *shapes = "dsr1", *ms = NULL;
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(USAGE, stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--device", &v)) {
            if (!v || bfp8_device_parse(v, &o.device) != BFP8_OK)
                return cli_usage_error(cmd, USAGE, "--device: '%s' is not cpu or cuda", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--backend", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--backend needs a name or all");
            o.backend = v;
        } else if (cli_opt(argc, argv, &i, "--shapes", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--shapes needs dsr1 or NxK,...");
            shapes = v;
        } else if (cli_opt(argc, argv, &i, "--m", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--m needs a list");
            ms = v;
        } else if (cli_opt(argc, argv, &i, "--out-dtype", &v)) {
            if (!v || !cli_parse_out_dtype(v, &o.out_dtype))
                return cli_usage_error(cmd, USAGE, "--out-dtype: '%s' is not bf16, fp16 or fp32", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            if (!v || bfp8_scale_format_parse(v, &o.format) != BFP8_OK)
                return cli_usage_error(cmd, USAGE, "--scale-format: '%s' is not fp32 or ue8m0", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--baseline", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--baseline needs a name");
            o.baseline = v;
        } else if (cli_opt(argc, argv, &i, "--json", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--json needs a file name");
            o.json_path = v;
        } else if (cli_opt(argc, argv, &i, "--iters", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--iters", v, 1, 100000, &o.iters)) != CLI_OK) return rc;
        } else if (cli_opt(argc, argv, &i, "--warmup", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--warmup", v, 0, 100000, &o.warmup)) != CLI_OK) return rc;
        } else if (cli_opt(argc, argv, &i, "--threads", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--threads", v, 1, 256, &o.threads)) != CLI_OK) return rc;
        } else if (cli_opt(argc, argv, &i, "--l2", &v)) {
            if (v && strcmp(v, "clean") == 0) o.l2 = CLI_L2_CLEAN;
            else if (v && strcmp(v, "dirty") == 0) o.l2 = CLI_L2_DIRTY;
            else if (v && strcmp(v, "keep") == 0) o.l2 = CLI_L2_KEEP;
            else return cli_usage_error(cmd, USAGE, "--l2: '%s' is not clean, dirty or keep", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--seed", v, 0, INT64_MAX, &o.seed)) != CLI_OK) return rc;
        } else {
            return cli_usage_error(cmd, USAGE, "unknown option '%s'", argv[i]);
        }
    }
    bool cuda = o.device == BFP8_DEVICE_CUDA;
    if (o.iters < 0) o.iters = cuda ? 50 : 5;
    if (o.warmup < 0) o.warmup = cuda ? 5 : 1;
    if (!o.backend) o.backend = cuda ? "all" : "cpu";
    if ((rc = parse_shapes(shapes, &o)) != CLI_OK) return rc;
    if (!ms) ms = cuda ? "1,16,64,128,512,4096" : "1,16,128,512";
    if (!cli_parse_i64_list(ms, 0, CLI_MAX_DIM, o.ms, MAX_MS, &o.nms) || o.nms == 0)
        return cli_usage_error(cmd, USAGE, "--m: '%s' is not a list of up to %d sizes", ms, MAX_MS);
    if (o.threads > 0 && bfp8_set_num_threads((int)o.threads) != BFP8_OK)
        return cli_lib_error(cmd, "--threads", BFP8_ERR_INVALID_ARGUMENT);

    /* The baseline must exist in this binary and suit the device. */
    if (o.baseline) {
        if (strcmp(o.baseline, "openblas") == 0) {
            if (cuda) return cli_usage_error(cmd, USAGE, "--baseline openblas is a CPU baseline (--device cpu)");
            if ((rc = cli_openblas_load(cmd)) != CLI_OK) return rc;
        } else if (strcmp(o.baseline, "cublaslt") != 0) {
            return cli_usage_error(cmd, USAGE, "--baseline: '%s' is not openblas or cublaslt", o.baseline);
        } else if (!cuda) {
            return cli_usage_error(cmd, USAGE, "--baseline cublaslt is a CUDA baseline (--device cuda)");
        }
    }
    if (cuda) {
        char why[256] = "";
        if (!bfp8_cuda_available(why, sizeof why))
            return cli_error(CLI_FAIL, cmd, "--device cuda: CUDA is not available here: %s", why);
    }

    bench_state s = {.o = &o};
    bfp8_status st = bfp8_dispatcher_create_default(&s.d);
    if (st != BFP8_OK) return cli_lib_error(cmd, "dispatcher", st);
    /* The backends to time: the named one, or every one of the device except ref; cublaslt runs as the baseline. */
    const char *base_backend = o.baseline && strcmp(o.baseline, "cublaslt") == 0 ? "cublaslt" : NULL;
    if (base_backend) {
        const bfp8_backend *b = bfp8_dispatcher_find(s.d, base_backend);
        if (!b) {
            bfp8_dispatcher_free(s.d);
            return cli_error(CLI_FAIL, cmd, "--baseline cublaslt: no backend 'cublaslt' is registered here");
        }
        s.backends[s.nbackends++] = b;
        s.first_is_baseline = true;
    }
    if (strcmp(o.backend, "all") == 0) {
        for (size_t i = 0; i < bfp8_dispatcher_count(s.d) && s.nbackends < MAX_BACKENDS; i++) {
            const bfp8_backend *b = bfp8_dispatcher_at(s.d, i);
            if (b->caps.device != o.device || strcmp(b->name, "ref") == 0) continue;
            if (base_backend && strcmp(b->name, base_backend) == 0) continue;
            s.backends[s.nbackends++] = b;
        }
    } else {
        const bfp8_backend *b = bfp8_dispatcher_find(s.d, o.backend);
        if (!b) {
            bfp8_dispatcher_free(s.d);
            return cli_error(CLI_FAIL, cmd, "--backend: no backend named '%s' is available here", o.backend);
        }
        if (b->caps.device != o.device) {
            bfp8_dispatcher_free(s.d);
            return cli_usage_error(cmd, USAGE, "--backend %s runs on %s, not on --device %s", b->name,
                                   bfp8_device_name(b->caps.device), bfp8_device_name(o.device));
        }
        if (!base_backend || strcmp(b->name, base_backend) != 0) s.backends[s.nbackends++] = b;
    }
    if (s.nbackends == (s.first_is_baseline ? 1 : 0)) {
        bfp8_dispatcher_free(s.d);
        return cli_error(CLI_FAIL, cmd, "no backend to time on %s", bfp8_device_name(o.device));
    }
    if (o.json_path) {
        s.json.f = cli_json_open(cmd, o.json_path);
        if (!s.json.f) {
            bfp8_dispatcher_free(s.d);
            return CLI_FAIL;
        }
    }

    uint64_t seed = o.seed ? (uint64_t)o.seed : test_seed_fresh();
    test_rng rng;
    test_rng_init(&rng, seed);
    s.cells_total = o.nshapes * o.nms;
    printf("# blockfp8 bench: device %s, out %s, scales %s, %" PRId64 " warmup + %" PRId64
           " timed runs (median), seed %" PRIu64 "%s\n",
           bfp8_device_name(o.device), bfp8_dtype_name(o.out_dtype), bfp8_scale_format_name(o.format), o.warmup,
           o.iters, seed,
           !cuda                   ? ""
           : o.l2 == CLI_L2_CLEAN ? ", L2 flushed clean"
           : o.l2 == CLI_L2_DIRTY ? ", L2 flushed dirty"
                                   : ", L2 kept");
    if (!cuda) printf("# cpu threads: %d\n", bfp8_get_num_threads());
    if (o.baseline && !cuda) {
        printf("# baseline openblas: cblas_sgemm on dequantized fp32 operands, core %s, %d threads\n",
               cli_openblas_core(), bfp8_get_num_threads());
        cli_openblas_set_threads(bfp8_get_num_threads());
    }
    printf("%-10s %6s %6s %6s %10s %9s %9s %9s\n", "backend", "M", "N", "K", "median_us", "TFLOP/s", "GB/s",
           "vs_base");
    rc = CLI_OK;
    for (int si = 0; si < o.nshapes && rc == CLI_OK; si++) rc = bench_shape(&s, o.shapes[si][0], o.shapes[si][1], &rng);
    if (rc == CLI_OK && o.baseline) {
        printf("# summary vs %s (ratio = %s time / backend time; above 1 is faster)\n", o.baseline, o.baseline);
        for (int bi = 0; bi < s.nbackends; bi++)
            if (s.ratio_cells[bi])
                printf("# %-12s geomean %.3fx over %d cells, slower than %s in %d\n", s.backends[bi]->name,
                       exp(s.log_ratio_sum[bi] / s.ratio_cells[bi]), s.ratio_cells[bi], o.baseline,
                       s.slower_cells[bi]);
    }
    rc = cli_json_close(cmd, s.json.f, o.json_path, rc);
    bfp8_dispatcher_free(s.d);
    return rc;
}
