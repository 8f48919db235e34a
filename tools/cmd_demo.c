/* blockfp8 demo: the main job. A DeepSeek-R1-shaped layer from random weights, quantized, run on the backend the
 * dispatcher chooses, checked against the reference backend and the unquantized product, and timed. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 demo [--m M] [--n N] [--k K] [--out-dtype bf16|fp16|fp32] [--scale-format fp32|ue8m0]\n"
    "                     [--device auto|cpu|cuda] [--seed S]\n"
    "       blockfp8 demo --moe [...]   (a mixture-of-experts layer: blockfp8 demo --moe --help)\n"
    "\n"
    "Builds a linear layer from random weights (default: DeepSeek-R1's fused q_a+kv_a projection, M=16 tokens,\n"
    "N=2112, K=7168), quantizes it to block FP8, runs bfp8_linear on the backend the default dispatcher chooses\n"
    "(auto, or BFP8_BACKEND), then on the reference backend (on the host), and prints the decision, the errors\n"
    "and the times.\n"
    "Exits 1 unless the error vs the reference is within docs/numerics.md's tolerance and calc_diff vs the\n"
    "unquantized fp32 product is under 1e-3.\n"
    "  --m, --n, --k     shape (defaults 16, 2112, 7168)\n"
    "  --out-dtype       output dtype (default bf16)\n"
    "  --scale-format    fp32 (default) or ue8m0\n"
    "  --device          where x and y live: cuda when a GPU is available, else cpu (default auto)\n"
    "  --seed S          replay a run (default: a fresh seed, printed)\n";

#define DEMO_CALC_DIFF_LIMIT 1e-3
#define DEMO_MAX_ELEMS ((int64_t)1 << 31) /* per operand: keeps the demo's buffers within a few GiB */

typedef struct demo_run {
    double seconds; /* median */
    int runs;
    bfp8_status status;
} demo_run;

/* Times bfp8_linear: one run, then more (median) while they fit in about `budget_s`. The output is poisoned
 * (all-ones bytes are NaN in every float dtype) before the first run so unwritten elements show; it ends up in
 * y_host (downloaded when a->device is cuda, where a->y is device memory). */
static demo_run time_linear(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_linear_args *a, void *y_host,
                            size_t y_bytes, double budget_s) {
    double t[7];
    demo_run r = {0, 0, BFP8_OK};
    const bool on_gpu = a->device == BFP8_DEVICE_CUDA;
    memset(y_host, 0xFF, y_bytes);
    if (on_gpu && (r.status = bfp8_cuda_upload(a->y, y_host, y_bytes)) != BFP8_OK) return r;
    const double start = cli_now();
    for (int i = 0; i < 7; i++) {
        const double t0 = cli_now();
        r.status = bfp8_linear(d, w, a);
        if (r.status == BFP8_OK && on_gpu) r.status = bfp8_cuda_synchronize(a->stream);
        if (r.status != BFP8_OK) return r;
        t[r.runs++] = cli_now() - t0;
        if (cli_now() - start + t[0] > budget_s) break;
    }
    r.seconds = cli_median(t, r.runs);
    if (on_gpu) r.status = bfp8_cuda_download(y_host, a->y, y_bytes);
    return r;
}

/* y_exact[m, n] = x @ w^T in double from the unquantized operands. */
static void exact_product(const float *x, const float *w, int64_t m, int64_t n, int64_t k, float *y) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const float *xr = x + i * k, *wr = w + j * k;
            double acc = 0;
            for (int64_t l = 0; l < k; l++) acc += (double)xr[l] * (double)wr[l];
            y[i * n + j] = (float)acc;
        }
}

static void print_time(const char *name, const demo_run *r, int64_t m, int64_t n, int64_t k) {
    const double flops = 2.0 * (double)m * (double)n * (double)k;
    printf("  %-8s %10.3f ms  %8.2f GFLOP/s  (median of %d)\n", name, r->seconds * 1e3,
           r->seconds > 0 ? flops / r->seconds * 1e-9 : 0.0, r->runs);
}

int cmd_demo(int argc, char **argv) {
    const char *cmd = "demo";
    int64_t m = 16, n = 2112, k = 7168, seed_arg = 0;
    bool have_seed = false;
    bfp8_dtype out_dtype = BFP8_DTYPE_BF16;
    bfp8_scale_format format = BFP8_SCALE_FP32;
    const char *device_arg = "auto";
    int rc;

    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--moe") == 0) return cmd_demo_moe(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(usage, stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--m", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--m", v, 0, CLI_MAX_DIM, &m))) return rc;
        } else if (cli_opt(argc, argv, &i, "--n", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--n", v, 1, CLI_MAX_DIM, &n))) return rc;
        } else if (cli_opt(argc, argv, &i, "--k", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--k", v, 1, CLI_MAX_DIM, &k))) return rc;
        } else if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--seed", v, 1, INT64_MAX, &seed_arg))) return rc;
            have_seed = true;
        } else if (cli_opt(argc, argv, &i, "--out-dtype", &v)) {
            if (!cli_parse_out_dtype(v, &out_dtype))
                return cli_usage_error(cmd, usage, "bad --out-dtype '%s' (bf16, fp16 or fp32)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            if (!v || bfp8_scale_format_parse(v, &format) != BFP8_OK)
                return cli_usage_error(cmd, usage, "bad --scale-format '%s' (fp32 or ue8m0)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--device", &v)) {
            bfp8_device parsed;
            if (!v || (strcmp(v, "auto") != 0 && bfp8_device_parse(v, &parsed) != BFP8_OK))
                return cli_usage_error(cmd, usage, "bad --device '%s' (auto, cpu or cuda)", v ? v : "");
            device_arg = v;
        } else {
            return cli_usage_error(cmd, usage, "unknown option '%s'", argv[i]);
        }
    }
    if (m * k > DEMO_MAX_ELEMS || n * k > DEMO_MAX_ELEMS || m * n > DEMO_MAX_ELEMS)
        return cli_usage_error(cmd, usage, "shape M=%lld N=%lld K=%lld is too large for the demo", (long long)m,
                               (long long)n, (long long)k);

    char no_gpu[BFP8_REASON_MAX] = "";
    const bool have_gpu = bfp8_cuda_available(no_gpu, sizeof no_gpu);
    bfp8_device device = have_gpu ? BFP8_DEVICE_CUDA : BFP8_DEVICE_CPU;
    if (strcmp(device_arg, "auto") != 0) bfp8_device_parse(device_arg, &device);
    if (device == BFP8_DEVICE_CUDA && !have_gpu) return cli_error(CLI_FAIL, cmd, "--device cuda: %s", no_gpu);

    const uint64_t seed = have_seed ? (uint64_t)seed_arg : test_seed_fresh() >> 1;
    const size_t y_bytes = (size_t)(m * n) * bfp8_dtype_size(out_dtype);
    rc = CLI_FAIL;
    bfp8_status st;
    bfp8_dispatcher *ref_d = NULL;
    bfp8_weight *w = NULL;
    float *w_f32 = malloc((size_t)(n * k) * sizeof(float) + 1);
    uint16_t *x_bf16 = malloc((size_t)(m * k) * sizeof(uint16_t) + 1);
    void *y = malloc(y_bytes + 1), *y_ref = malloc(y_bytes + 1), *x_dev = NULL, *y_dev = NULL;
    float *y_exact = malloc((size_t)(m * n) * sizeof(float) + 1), *x_f32 = NULL, *y32 = NULL, *ref32 = NULL;
    if (!w_f32 || !x_bf16 || !y || !y_ref || !y_exact) {
        cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }

    printf("blockfp8 demo: M=%lld N=%lld K=%lld%s, x bf16, y %s, %s scales, data on %s, seed %llu\n", (long long)m,
           (long long)n, (long long)k, m == 16 && n == 2112 && k == 7168 ? " (DeepSeek-R1 fused q_a+kv_a, 16 tokens)" : "",
           bfp8_dtype_name(out_dtype), bfp8_scale_format_name(format), bfp8_device_name(device),
           (unsigned long long)seed);

    /* Weights about as large as a trained layer's (std 1/sqrt(K)), activations of unit scale. */
    test_rng rng;
    test_rng_init(&rng, seed);
    test_rng_fill_normal(&rng, w_f32, BFP8_DTYPE_F32, n * k, (float)(1.0 / sqrt((double)k)));
    test_rng_fill_normal(&rng, x_bf16, BFP8_DTYPE_BF16, m * k, 1.0f);

    int64_t nonfinite = 0;
    double t0 = cli_now();
    if ((st = bfp8_weight_quantize(w_f32, BFP8_DTYPE_F32, n, k, format, &w, &nonfinite)) != BFP8_OK) {
        cli_lib_error(cmd, "quantize weight", st);
        goto done;
    }
    const double quant_s = cli_now() - t0;
    bfp8_dispatcher *d = cli_default_dispatcher(cmd);
    if (!d) goto done;
    t0 = cli_now();
    if ((st = bfp8_weight_prepare(w, NULL, NULL)) != BFP8_OK) {
        cli_lib_error(cmd, "prepare weight", st);
        goto done;
    }
    const double prepare_s = cli_now() - t0;

    bfp8_linear_args args = {.x = x_bf16, .x_dtype = BFP8_DTYPE_BF16, .m = m, .y = y, .y_dtype = out_dtype,
                             .device = device};
    if (device == BFP8_DEVICE_CUDA) {
        const size_t x_bytes = (size_t)(m * k) * sizeof(uint16_t);
        if ((st = bfp8_cuda_malloc(x_bytes ? x_bytes : 1, &x_dev)) != BFP8_OK ||
            (st = bfp8_cuda_malloc(y_bytes ? y_bytes : 1, &y_dev)) != BFP8_OK ||
            (st = bfp8_cuda_upload(x_dev, x_bf16, x_bytes)) != BFP8_OK) {
            cli_lib_error(cmd, "device buffers", st);
            goto done;
        }
        args.x = x_dev;
        args.y = y_dev;
    }

    /* The decision, as bfp8_linear will pose it (pure: nothing recorded). */
    bfp8_problem p;
    bfp8_decision dec;
    if ((st = bfp8_problem_from_linear(w, &args, &p)) != BFP8_OK) {
        cli_lib_error(cmd, "problem", st);
        goto done;
    }
    if ((st = bfp8_dispatcher_select(d, &p, &dec)) != BFP8_OK) {
        cli_error(CLI_FAIL, cmd, "no backend can run this layer: %s", dec.reason[0] ? dec.reason : bfp8_last_error());
        goto done;
    }
    const bfp8_backend *chosen = dec.backend;
    printf("decision: %s", chosen->name);
    if (dec.fallback)
        printf(" (fallback: the preferred backend %s cannot run it: %s)\n", dec.preferred ? dec.preferred->name : "?",
               dec.reason);
    else if (dec.preferred)
        printf(" (preferred by BFP8_BACKEND, and it can run this layer)\n");
    else
        printf(" (auto: the first backend below that can run it, for data on %s)\n", bfp8_device_name(device));
    bfp8_dispatcher_explain(d, &p, stdout); /* every backend with ok or its reason */

    const uint64_t calls_before = bfp8_dispatcher_calls(d, chosen->name);
    demo_run run = time_linear(d, w, &args, y, y_bytes, 1.0);
    if (run.status != BFP8_OK) {
        cli_lib_error(cmd, "linear", run.status);
        goto done;
    }
    const uint64_t calls = bfp8_dispatcher_calls(d, chosen->name) - calls_before;
    if (calls != (uint64_t)run.runs) {
        cli_error(CLI_FAIL, cmd, "the dispatcher counted %llu call(s) of %s for %d run(s): the decision changed",
                  (unsigned long long)calls, chosen->name, run.runs);
        goto done;
    }

    if ((st = bfp8_dispatcher_create_default(&ref_d)) != BFP8_OK ||
        (st = bfp8_dispatcher_set_policy(ref_d, BFP8_POLICY_STRICT, "ref")) != BFP8_OK) {
        cli_lib_error(cmd, "reference dispatcher", st);
        goto done;
    }
    /* The reference runs on the host. */
    args = (bfp8_linear_args){.x = x_bf16, .x_dtype = BFP8_DTYPE_BF16, .m = m, .y = y_ref, .y_dtype = out_dtype,
                              .device = BFP8_DEVICE_CPU};
    demo_run ref_run = time_linear(ref_d, w, &args, y_ref, y_bytes, 0.0);
    if (ref_run.status != BFP8_OK) {
        cli_lib_error(cmd, "linear on ref", ref_run.status);
        goto done;
    }

    x_f32 = test_to_f32(x_bf16, BFP8_DTYPE_BF16, m * k);
    y32 = test_to_f32(y, out_dtype, m * n);
    ref32 = test_to_f32(y_ref, out_dtype, m * n);
    if (!x_f32 || !y32 || !ref32) {
        cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }
    t0 = cli_now();
    exact_product(x_f32, w_f32, m, n, k, y_exact);
    const double exact_s = cli_now() - t0;

    const int64_t unwritten = test_count_nan(y32, m * n), ref_unwritten = test_count_nan(ref32, m * n);
    const double tol = test_tolerance(out_dtype, chosen->caps.device);
    const double rel_ref = test_rel_frobenius(y32, ref32, m * n);
    const double rel_exact = test_rel_frobenius(y32, y_exact, m * n);
    const double diff = test_calc_diff_of(y32, y_exact, m * n);
    const double ref_diff = test_calc_diff_of(ref32, y_exact, m * n);

    printf("time:\n");
    printf("  %-8s %10.3f ms  (weight quantization, once)\n", "quantize", quant_s * 1e3);
    printf("  %-8s %10.3f ms  (scale layouts for every backend, once)\n", "prepare", prepare_s * 1e3);
    print_time(chosen->name, &run, m, n, k);
    print_time("ref", &ref_run, m, n, k);
    printf("  %-8s %10.3f ms  (unquantized product in double, for the error below)\n", "exact", exact_s * 1e3);
    if (ref_run.seconds > 0 && run.seconds > 0 && chosen != bfp8_dispatcher_find(ref_d, "ref"))
        printf("  %s is %.1fx faster than ref\n", chosen->name, ref_run.seconds / run.seconds);
    printf("error:\n");
    printf("  %s vs ref:              rel Frobenius %.3e  (tolerance %.1e for %s output)\n", chosen->name,
           rel_ref, tol, bfp8_dtype_name(out_dtype));
    printf("  %s vs fp32 product:     calc_diff %.3e  (limit %.0e), rel Frobenius %.3e\n", chosen->name, diff,
           DEMO_CALC_DIFF_LIMIT, rel_exact);
    printf("  ref vs fp32 product:     calc_diff %.3e\n", ref_diff);
    if (unwritten || ref_unwritten)
        printf("  unwritten (NaN) outputs: %s %lld, ref %lld\n", chosen->name, (long long)unwritten,
               (long long)ref_unwritten);
    if (nonfinite) printf("  non-finite weights: %lld\n", (long long)nonfinite);

    const bool pass = !unwritten && !ref_unwritten && rel_ref <= tol && diff < DEMO_CALC_DIFF_LIMIT &&
                      ref_diff < DEMO_CALC_DIFF_LIMIT;
    printf("%s\n", pass ? "PASS" : "FAIL");
    rc = pass ? CLI_OK : CLI_FAIL;

done:
    if (x_dev) bfp8_cuda_free(x_dev);
    if (y_dev) bfp8_cuda_free(y_dev);
    bfp8_dispatcher_free(ref_d);
    bfp8_weight_free(w);
    free(w_f32);
    free(x_bf16);
    free(y);
    free(y_ref);
    free(y_exact);
    free(x_f32);
    free(y32);
    free(ref32);
    return rc;
}
