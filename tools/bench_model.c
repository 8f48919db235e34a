/* `blockfp8 bench --model dsr1`: one forward step through DeepSeek-R1's block-FP8 dense-path linear layers in model
 * order, with the backend each layer gets, its time, the step time and tokens/s; `--compare` runs the engines'
 * slow fallback beside it (the seed regression: every layer on the fallback kernel). */
#include "cli.h"
#include "cuda_timer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: blockfp8 bench --model dsr1 [--batch LIST] [--device cpu|cuda] [--backend NAME] [--compare]\n"
    "                      [--scale-format fp32|ue8m0] [--iters N] [--json FILE] [--seed S]\n"
    "  One forward step through the DeepSeek-R1 dense-path linear layers (bench/data/dsr1_shapes.csv), in model order.\n"
    "  Weights are random FP8 of the real shapes, resident on the device; each layer's bf16 input is quantized in\n"
    "  the call. Prints per layer the backend chosen and its median time, then the step time and tokens/s.\n"
    "  --batch LIST   tokens per step, comma-separated (default 1)\n"
    "  --backend NAME prefer NAME (default: auto, or BFP8_BACKEND)\n"
    "  --compare      also run every layer on the fallback (cuda_generic on cuda, ref on cpu) and print the slowdown\n"
    "  --iters N      timed runs per layer (default 5; fewer when one run takes over a second)\n";

enum { MAX_BATCHES = 16 };

/* A random weight of the real shape (cli_random_fp8_weight), held by the library. */
static bfp8_status random_weight(test_rng *rng, int64_t n, int64_t k, bfp8_scale_format format, bfp8_weight **out) {
    int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
    uint8_t *q = malloc((size_t)(n * k));
    float *s = malloc(sizeof(float) * (size_t)(nb * kb));
    bfp8_status st = BFP8_ERR_OUT_OF_MEMORY;
    if (q && s) {
        cli_random_fp8_weight(rng, n, k, format, q, s);
        bfp8_scales desc;
        st = bfp8_scales_init(&desc, format, BFP8_LAYOUT_ROW_MAJOR, nb, kb, s);
        if (st == BFP8_OK) st = bfp8_weight_create(q, n, k, &desc, out);
    }
    free(q);
    free(s);
    return st;
}

typedef struct layer_run {
    bfp8_dispatcher *d;
    const bfp8_weight *w;
    bfp8_linear_args args;
} layer_run;

static bfp8_status run_layer(void *ctx) {
    layer_run *r = ctx;
    return bfp8_linear(r->d, r->w, &r->args);
}

/* Median time of one layer in µs: CUDA events with the L2 flushed before each run on the GPU (in a real step
 * the weight was evicted by the layers before it), wall clock on the CPU. A failure of the GPU timer itself is
 * described in `why` (left empty otherwise: bfp8_last_error() tells). */
static bfp8_status time_layer(layer_run *r, int iters, double *median_us, char *why, size_t why_size) {
    double times[64];
    if (iters > 64) iters = 64;
    why[0] = '\0';
    if (r->args.device == BFP8_DEVICE_CUDA) {
        bfp8_status st = cli_cuda_time(run_layer, r, 2, iters, CLI_L2_CLEAN, NULL, times, why, why_size);
        if (st == BFP8_OK) *median_us = cli_median(times, iters);
        return st;
    }
    bfp8_status st = run_layer(r); /* warm-up */
    int done = 0;
    double spent = 0;
    while (st == BFP8_OK && done < iters && (done == 0 || spent < 1.0)) {
        double t0 = cli_now();
        if ((st = run_layer(r)) != BFP8_OK) break;
        times[done] = (cli_now() - t0) * 1e6;
        spent += times[done++] * 1e-6;
    }
    if (st == BFP8_OK) *median_us = cli_median(times, done);
    return st;
}

/* Host or device buffers for one layer's input and output. */
typedef struct io_buffers {
    void *x, *y;
    bfp8_device device;
} io_buffers;

static bfp8_status io_alloc(io_buffers *io, test_rng *rng, int64_t m, int64_t n, int64_t k) {
    size_t xb = (size_t)(m * k) * 2, yb = (size_t)(m * n) * 2;
    void *hx = malloc(xb ? xb : 1);
    if (!hx) return BFP8_ERR_OUT_OF_MEMORY;
    test_rng_fill_normal(rng, hx, BFP8_DTYPE_BF16, m * k, 1.0f);
    bfp8_status st = BFP8_OK;
    if (io->device == BFP8_DEVICE_CUDA) {
        st = bfp8_cuda_malloc(xb ? xb : 1, &io->x);
        if (st == BFP8_OK) st = bfp8_cuda_upload(io->x, hx, xb);
        if (st == BFP8_OK) st = bfp8_cuda_malloc(yb ? yb : 1, &io->y);
        free(hx);
    } else {
        io->x = hx;
        io->y = malloc(yb ? yb : 1);
        if (!io->y) st = BFP8_ERR_OUT_OF_MEMORY;
    }
    return st;
}

static void io_free(io_buffers *io) {
    if (io->device == BFP8_DEVICE_CUDA) {
        if (io->x) bfp8_cuda_free(io->x);
        if (io->y) bfp8_cuda_free(io->y);
    } else {
        free(io->x);
        free(io->y);
    }
    io->x = io->y = NULL;
}

int cmd_bench_model(int argc, char **argv) {
    const char *cmd = "bench";
    const char *model = NULL, *batch_list = "1", *backend = NULL, *json_path = NULL;
    bfp8_device device = BFP8_DEVICE_CPU;
    bfp8_scale_format format = BFP8_SCALE_FP32;
    bool compare = false;
    int64_t iters = 5, seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            fputs(USAGE, stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--model", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--model needs a value");
            model = v;
        } else if (cli_opt(argc, argv, &i, "--batch", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--batch needs a value");
            batch_list = v;
        } else if (cli_opt(argc, argv, &i, "--device", &v)) {
            if (!v || bfp8_device_parse(v, &device) != BFP8_OK)
                return cli_usage_error(cmd, USAGE, "--device must be cpu or cuda");
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            if (!v || bfp8_scale_format_parse(v, &format) != BFP8_OK)
                return cli_usage_error(cmd, USAGE, "--scale-format must be fp32 or ue8m0");
        } else if (cli_opt(argc, argv, &i, "--backend", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--backend needs a value");
            backend = v;
        } else if (cli_opt(argc, argv, &i, "--json", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--json needs a value");
            json_path = v;
        } else if (cli_opt(argc, argv, &i, "--iters", &v)) {
            int rc = cli_want_i64(cmd, USAGE, "--iters", v, 1, 64, &iters);
            if (rc) return rc;
        } else if (cli_opt(argc, argv, &i, "--seed", &v)) {
            int rc = cli_want_i64(cmd, USAGE, "--seed", v, 1, INT64_MAX, &seed);
            if (rc) return rc;
        } else if (strcmp(argv[i], "--compare") == 0) {
            compare = true;
        } else {
            return cli_usage_error(cmd, USAGE, "unknown option '%s'", argv[i]);
        }
    }
    if (!model || strcmp(model, "dsr1") != 0) return cli_usage_error(cmd, USAGE, "--model must be dsr1");
    int64_t batches[MAX_BATCHES];
    int nbatch = 0;
    if (!cli_parse_i64_list(batch_list, 1, 65536, batches, MAX_BATCHES, &nbatch))
        return cli_usage_error(cmd, USAGE, "--batch must be 1..%d positive integers up to 65536", MAX_BATCHES);
    if (device == BFP8_DEVICE_CUDA) {
        char why[256];
        if (!bfp8_cuda_available(why, sizeof why)) return cli_error(CLI_FAIL, cmd, "--device cuda: %s", why);
    }

    /* Two dispatchers: the one under test (auto, or --backend / BFP8_BACKEND), and the forced fallback. */
    const char *fallback_name = device == BFP8_DEVICE_CUDA ? "cuda_generic" : "ref";
    bfp8_dispatcher *d_main = NULL, *d_fallback = NULL;
    bfp8_status st = bfp8_dispatcher_create_default(&d_main);
    if (st != BFP8_OK) return cli_lib_error(cmd, "dispatcher", st);
    if (backend && (st = cli_apply_policy(d_main, backend, false)) != BFP8_OK) {
        bfp8_dispatcher_free(d_main);
        return cli_lib_error(cmd, "--backend", st);
    }
    if (compare) {
        st = bfp8_dispatcher_create_default(&d_fallback);
        if (st == BFP8_OK) st = bfp8_dispatcher_set_policy(d_fallback, BFP8_POLICY_STRICT, fallback_name);
        if (st != BFP8_OK) {
            bfp8_dispatcher_free(d_main);
            bfp8_dispatcher_free(d_fallback);
            return cli_lib_error(cmd, "fallback dispatcher", st);
        }
    }

    test_rng rng;
    test_rng_init(&rng, seed ? (uint64_t)seed : test_seed_fresh());
    bfp8_weight *weights[CLI_DSR1_LAYER_COUNT] = {0};
    int rc = CLI_OK;
    fprintf(stderr, "bench: building %d random DeepSeek-R1 layers (%s scales) on %s...\n", CLI_DSR1_LAYER_COUNT,
            bfp8_scale_format_name(format), bfp8_device_name(device));
    for (int l = 0; l < CLI_DSR1_LAYER_COUNT && rc == CLI_OK; l++) {
        st = random_weight(&rng, CLI_DSR1_LAYERS[l].n, CLI_DSR1_LAYERS[l].k, format, &weights[l]);
        if (st == BFP8_OK) st = bfp8_weight_prepare(weights[l], d_main, NULL);
        if (st == BFP8_OK && d_fallback) st = bfp8_weight_prepare(weights[l], d_fallback, NULL);
        if (st != BFP8_OK) rc = cli_lib_error(cmd, CLI_DSR1_LAYERS[l].name, st);
    }

    FILE *json = NULL;
    if (rc == CLI_OK && json_path && !(json = fopen(json_path, "w")))
        rc = cli_error(CLI_FAIL, cmd, "cannot write %s", json_path);
    if (json) fprintf(json, "[\n");
    bool first_record = true;

    for (int b = 0; b < nbatch && rc == CLI_OK; b++) {
        int64_t m = batches[b];
        double step_main = 0, step_fallback = 0;
        printf("\nDeepSeek-R1 dense-path step, batch %" PRId64 " (%s, bf16 in/out, %s scales)\n", m,
               bfp8_device_name(device), bfp8_scale_format_name(format));
        printf("%-16s %6s %6s  %-14s %10s", "layer", "N", "K", "backend", "time us");
        if (compare) printf("  %-14s %10s %8s", "fallback", "time us", "slower");
        printf("\n");
        for (int l = 0; l < CLI_DSR1_LAYER_COUNT && rc == CLI_OK; l++) {
            const cli_dsr1_layer *L = &CLI_DSR1_LAYERS[l];
            fprintf(stderr, "\rbench: batch %" PRId64 " layer %d/%d %-16s", m, l + 1, CLI_DSR1_LAYER_COUNT, L->name);
            io_buffers io = {.device = device};
            st = io_alloc(&io, &rng, m, L->n, L->k);
            layer_run r = {.d = d_main, .w = weights[l],
                           .args = {.x = io.x, .x_dtype = BFP8_DTYPE_BF16, .m = m, .y = io.y,
                                    .y_dtype = BFP8_DTYPE_BF16, .device = device}};
            bfp8_problem p;
            bfp8_decision dec;
            double t_main = 0, t_fb = 0;
            char why[BFP8_REASON_MAX] = "";
            if (st == BFP8_OK) st = bfp8_problem_from_linear(r.w, &r.args, &p);
            if (st == BFP8_OK) st = bfp8_dispatcher_select(d_main, &p, &dec);
            if (st == BFP8_OK) st = time_layer(&r, (int)iters, &t_main, why, sizeof why);
            if (st == BFP8_OK && compare) {
                r.d = d_fallback;
                st = time_layer(&r, (int)iters, &t_fb, why, sizeof why);
            }
            io_free(&io);
            if (st != BFP8_OK) {
                fprintf(stderr, "\n");
                rc = why[0] ? cli_error(CLI_FAIL, cmd, "%s: %s: %s", L->name, bfp8_status_name(st), why)
                            : cli_lib_error(cmd, L->name, st);
                break;
            }
            step_main += t_main;
            step_fallback += t_fb;
            printf("%-16s %6" PRId64 " %6" PRId64 "  %-14s %10.1f", L->name, L->n, L->k, dec.backend->name, t_main);
            if (compare) printf("  %-14s %10.1f %7.2fx", fallback_name, t_fb, t_fb / t_main);
            printf("\n");
            if (json) {
                fprintf(json, "%s  {\"model\": \"dsr1\", \"device\": \"%s\", \"batch\": %" PRId64 ", \"layer\": \"%s\", "
                        "\"n\": %" PRId64 ", \"k\": %" PRId64 ", \"backend\": \"%s\", \"median_us\": %.3f",
                        first_record ? "" : ",\n", bfp8_device_name(device), m, L->name, L->n, L->k,
                        dec.backend->name, t_main);
                if (compare) fprintf(json, ", \"fallback\": \"%s\", \"fallback_us\": %.3f", fallback_name, t_fb);
                fprintf(json, "}");
                first_record = false;
            }
        }
        fprintf(stderr, "\r%60s\r", "");
        if (rc != CLI_OK) break;
        printf("%-16s %28s %10.1f", "step", "", step_main);
        if (compare) printf("  %-14s %10.1f %7.2fx", "", step_fallback, step_fallback / step_main);
        printf("\ntokens/s: %.1f", (double)m / (step_main * 1e-6));
        if (compare) {
            const double change = 100.0 * (1.0 - step_main / step_fallback); /* fewer tokens/s on the fallback */
            printf("   all-fallback: %.1f (%.1f%% %s)", (double)m / (step_fallback * 1e-6), fabs(change),
                   change >= 0 ? "lower" : "higher");
        }
        printf("   (one pass over the 8 layers above; a full model repeats them per transformer block)\n");
        if (json) {
            fprintf(json, ",\n  {\"model\": \"dsr1\", \"device\": \"%s\", \"batch\": %" PRId64 ", \"layer\": \"step\", "
                    "\"median_us\": %.3f, \"tokens_per_s\": %.3f", bfp8_device_name(device), m, step_main,
                    (double)m / (step_main * 1e-6));
            if (compare) fprintf(json, ", \"fallback_us\": %.3f, \"fallback_tokens_per_s\": %.3f", step_fallback,
                                 (double)m / (step_fallback * 1e-6));
            fprintf(json, "}");
        }
    }
    if (json) {
        fprintf(json, "\n]\n");
        if (fclose(json) != 0 && rc == CLI_OK) rc = cli_error(CLI_FAIL, cmd, "writing %s failed", json_path);
    }
    for (int l = 0; l < CLI_DSR1_LAYER_COUNT; l++) bfp8_weight_free(weights[l]);
    bfp8_dispatcher_free(d_main);
    bfp8_dispatcher_free(d_fallback);
    return rc;
}
