/* GPU GEMM timing on the DeepSeek-R1 shapes of shared/BENCHMARKS.md: every CUDA backend of the default dispatcher,
 * bf16 output, CUDA events with the L2 flushed before each call (bfp8_cuda_time), median of the timed calls.
 * Prints a table with the ratio to cuBLASLt (measured in the same run) and to the Triton anchor, cross-checks the
 * backends' outputs against each other, and writes JSON. Run by scripts/gpu-check.sh:
 *   build/cuda_bench [--json FILE] [--iters N] */
#include "check.h"
#include "internal.h"

/* The harness counters are unused here (this is a driver, not a test). */
static void bench_unused(void) { (void)check_passed_, (void)check_failed_; }

#include <inttypes.h>

typedef struct shape { int64_t n, k; } shape;
static const shape kShapes[] = {{2112, 7168}, {4096, 7168}, {7168, 2048}, {7168, 16384},
                                {7168, 18432}, {24576, 1536}, {32768, 512}, {36864, 7168}};
static const int64_t kMs[] = {1, 16, 64, 128, 512, 4096};
/* Triton column of shared/BENCHMARKS.md (µs), same order as kShapes x kMs. */
static const double kTriton[8][6] = {
    {38.1, 41.5, 38.8, 56.0, 51.7, 217.0},   {42.5, 48.0, 44.1, 40.8, 48.1, 372.8},
    {38.7, 35.8, 26.4, 36.1, 35.7, 190.8},   {65.7, 66.8, 70.3, 78.0, 196.0, 1434.8},
    {72.3, 73.7, 77.5, 86.8, 220.4, 1610.6}, {44.3, 23.3, 20.1, 29.2, 70.8, 509.2},
    {24.5, 26.1, 29.0, 28.8, 47.3, 297.0},   {82.4, 78.1, 96.5, 141.6, 418.4, 3264.9}};

typedef struct run_ctx {
    const bfp8_backend *b;
    bfp8_gemm_args args;
} run_ctx;

static bfp8_status run_once(void *p) {
    run_ctx *r = p;
    return r->b->gemm(r->b, &r->args);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *upload_random(size_t bytes, bool e4m3) {
    uint8_t *h = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) {
        h[i] = (uint8_t)test_rand_u64();
        if (e4m3 && (h[i] & 0x7F) == 0x7F) h[i] ^= 1; /* no NaN codes */
    }
    void *d = NULL;
    if (bfp8_cuda_malloc(&d, bytes) != BFP8_OK || bfp8_cuda_upload(d, h, bytes) != BFP8_OK) {
        fprintf(stderr, "cuda_bench: upload of %zu bytes: %s\n", bytes, bfp8_last_error());
        exit(1);
    }
    free(h);
    return d;
}

static void *upload_scales(bfp8_scale_layout layout, int64_t rows, int64_t kblocks) {
    size_t bytes = bfp8_scales_bytes(layout, rows, kblocks);
    float *h = calloc(1, bytes);
    bfp8_scales s;
    bfp8_scales_init(&s, BFP8_SCALE_FP32, layout, rows, kblocks, h);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t kb = 0; kb < kblocks; kb++)
            bfp8_scales_set(&s, r, kb, ldexpf(0.5f + (float)(test_rand_u64() % 1000) / 2000.0f, -8));
    void *d = NULL;
    if (bfp8_cuda_malloc(&d, bytes) != BFP8_OK || bfp8_cuda_upload(d, h, bytes) != BFP8_OK) exit(1);
    free(h);
    return d;
}

int main(int argc, char **argv) {
    const char *json_path = NULL;
    int iters = 30;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    }
    bench_unused();
    char why[BFP8_REASON_MAX];
    if (!bfp8_cuda_available(why, sizeof why)) {
        printf("cuda_bench: skipped: %s\n", why);
        return 1;
    }
    test_seed();
    bfp8_dispatcher *d = NULL;
    if (bfp8_dispatcher_create_default(&d) != BFP8_OK) return 1;
    const char *names[2] = {"cublaslt", "cuda_generic"};
    const bfp8_backend *be[2] = {bfp8_dispatcher_find(d, names[0]), bfp8_dispatcher_find(d, names[1])};
    FILE *json = json_path ? fopen(json_path, "w") : NULL;
    if (json) fprintf(json, "{\"device\": \"cuda\", \"arch\": %d, \"output\": \"bf16\", \"results\": [\n",
                      bfp8_cuda_current_arch());
    double *times = malloc(sizeof(double) * iters);
    double geo_lt = 0, geo_tr = 0;
    int n_lt = 0, n_tr = 0, beat_tr = 0;
    printf("%-5s %-6s %-6s | %9s %9s %9s | %8s %8s | %7s %7s | %s\n", "M", "N", "K", "triton", "cublaslt", "generic",
           "gen TF/s", "gen GB/s", "gen/tri", "gen/lt", "max rel diff");
    for (size_t s = 0; s < sizeof kShapes / sizeof kShapes[0]; s++) {
        const int64_t n = kShapes[s].n, k = kShapes[s].k, kb = bfp8_ceil_div(k, 128), nb = bfp8_ceil_div(n, 128);
        void *b = upload_random((size_t)(n * k), true);
        void *sb = upload_scales(BFP8_LAYOUT_ROW_MAJOR, nb, kb);
        for (size_t mi = 0; mi < sizeof kMs / sizeof kMs[0]; mi++) {
            const int64_t m = kMs[mi];
            void *a = upload_random((size_t)(m * k), true);
            void *sa = upload_scales(BFP8_LAYOUT_MN_MAJOR_ALIGNED, m, kb);
            double us[2] = {-1, -1};
            uint16_t *y_host[2] = {NULL, NULL};
            for (int bi = 0; bi < 2; bi++) {
                if (!be[bi]) continue;
                void *y = NULL;
                bfp8_cuda_malloc(&y, (size_t)(m * n) * 2);
                run_ctx r = {.b = be[bi]};
                r.args = (bfp8_gemm_args){.m = m, .n = n, .k = k, .a = a, .b = b, .y = y, .y_dtype = BFP8_DTYPE_BF16,
                                          .device = BFP8_DEVICE_CUDA};
                bfp8_scales_init(&r.args.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR_ALIGNED, m, kb, sa);
                bfp8_scales_init(&r.args.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, nb, kb, sb);
                bfp8_problem p;
                char reason[BFP8_REASON_MAX];
                if (bfp8_problem_from_gemm(&r.args, &p) != BFP8_OK ||
                    !bfp8_backend_check(be[bi], &p, reason, sizeof reason)) {
                    bfp8_cuda_free(y);
                    continue;
                }
                if (bfp8_cuda_time(run_once, &r, 3, iters, true, NULL, times) != BFP8_OK) {
                    fprintf(stderr, "cuda_bench: %s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 ": %s\n", names[bi], m, n,
                            k, bfp8_last_error());
                    bfp8_cuda_free(y);
                    continue;
                }
                qsort(times, iters, sizeof *times, cmp_double);
                us[bi] = times[iters / 2];
                y_host[bi] = malloc((size_t)(m * n) * 2);
                bfp8_cuda_download(y_host[bi], y, (size_t)(m * n) * 2);
                bfp8_cuda_free(y);
            }
            double diff = -1;
            if (y_host[0] && y_host[1]) {
                double e2 = 0, r2 = 0;
                for (int64_t i = 0; i < m * n; i++) {
                    double u = bfp8_bf16_to_f32(y_host[0][i]), v = bfp8_bf16_to_f32(y_host[1][i]);
                    e2 += (u - v) * (u - v), r2 += u * u;
                }
                diff = sqrt(e2 / (r2 > 0 ? r2 : 1));
            }
            const double tri = kTriton[s][mi];
            const double flops = 2.0 * m * n * k, bytes = (double)n * k + (double)m * k + 2.0 * m * n;
            printf("%-5" PRId64 " %-6" PRId64 " %-6" PRId64 " | %9.1f %9.1f %9.1f | %8.0f %8.0f | %7.2f %7.2f | %.1e\n",
                   m, n, k, tri, us[0], us[1], us[1] > 0 ? flops / us[1] * 1e-6 : 0,
                   us[1] > 0 ? bytes / us[1] * 1e-3 : 0, us[1] > 0 ? tri / us[1] : 0,
                   us[1] > 0 && us[0] > 0 ? us[0] / us[1] : 0, diff);
            if (us[1] > 0) {
                geo_tr += log(tri / us[1]), n_tr++;
                beat_tr += us[1] <= tri;
                if (us[0] > 0) geo_lt += log(us[0] / us[1]), n_lt++;
            }
            if (json)
                fprintf(json,
                        "%s  {\"m\": %" PRId64 ", \"n\": %" PRId64 ", \"k\": %" PRId64
                        ", \"triton_us\": %.1f, \"cublaslt_us\": %.2f, \"cuda_generic_us\": %.2f, "
                        "\"generic_vs_lt_rel_diff\": %.3g}",
                        (s || mi) ? ",\n" : "", m, n, k, tri, us[0], us[1], diff);
            free(y_host[0]), free(y_host[1]);
            bfp8_cuda_free(a), bfp8_cuda_free(sa);
        }
        bfp8_cuda_free(b), bfp8_cuda_free(sb);
    }
    printf("cuda_generic: faster than triton in %d of %d cells; geomean speedup vs triton %.2fx, vs cublaslt %.2fx\n",
           beat_tr, n_tr, n_tr ? exp(geo_tr / n_tr) : 0, n_lt ? exp(geo_lt / n_lt) : 0);
    if (json) {
        fprintf(json, "\n]}\n");
        fclose(json);
    }
    free(times);
    bfp8_dispatcher_free(d);
    return 0;
}
