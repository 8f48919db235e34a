/* One dispatcher shared by threads that flip its policy, run GEMMs and linear layers through it (spy backends and
 * the real cpu and ref backends) and read, print and reset its statistics, all at once. Every call must succeed
 * (each policy names a backend that can run the problem, so a failure is a torn read) and, without resets, the
 * counts must add up exactly. `make tsan` runs this file under ThreadSanitizer. */
#include "check.h"

#include "internal.h"

#include <pthread.h>

static bfp8_status spy_gemm(const bfp8_backend *self, const bfp8_gemm_args *a) {
    (void)self, (void)a;
    return BFP8_OK;
}

#define ALL_FLOATS (BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16))
#define ALL_LAYOUTS ((1u << BFP8_LAYOUT_COUNT) - 1)
#define BOTH_FORMATS (BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0))

/* Names of different lengths, so that a torn copy makes a name nobody knows. */
static const bfp8_backend spy_fast = {
    .name = "fast",
    .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = BFP8_BIT(BFP8_DTYPE_BF16), .scale_formats = BOTH_FORMATS,
             .a_layouts = ALL_LAYOUTS, .b_layouts = ALL_LAYOUTS, .bias_dtypes = ALL_FLOATS, .min_k = 256,
             .priority = 20},
    .gemm = spy_gemm,
};
static const bfp8_backend spy_generic_long_name = {
    .name = "generic_with_a_long_name",
    .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = ALL_FLOATS, .scale_formats = BOTH_FORMATS,
             .a_layouts = ALL_LAYOUTS, .b_layouts = ALL_LAYOUTS, .bias_dtypes = ALL_FLOATS, .priority = 1},
    .gemm = spy_gemm,
};

/* Every policy here can run a bf16 K=256 problem: strict fast, prefer anything, auto. */
static const struct {
    bfp8_policy policy;
    const char *name;
} policies[] = {
    {BFP8_POLICY_PREFER, "generic_with_a_long_name"}, {BFP8_POLICY_STRICT, "fast"}, {BFP8_POLICY_AUTO, NULL},
    {BFP8_POLICY_PREFER, "cpu"},  {BFP8_POLICY_STRICT, "ref"}, {BFP8_POLICY_STRICT, "generic_with_a_long_name"},
    {BFP8_POLICY_PREFER, "fast"},
};
#define NPOLICIES (sizeof policies / sizeof policies[0])

enum { M = 2, N = 128, K = 256, KB = 2, CALLS = 150, FLIPS = 400, READS = 100 };

static bfp8_dispatcher *g_d;
static bfp8_weight *g_w;
static uint8_t g_a[M * K], g_b[N * K];
static float g_sa[M * KB], g_sb[KB], g_bias[N], g_x[M * K];
static int g_phase_resets; /* 1 in the second phase: one reader also resets */

typedef struct worker {
    int id;
    int failures;
    char first_error[512];
    int calls;
} worker;

static void note_failure(worker *w, bfp8_status st) {
    if (st == BFP8_OK) return;
    if (!w->failures++)
        snprintf(w->first_error, sizeof w->first_error, "%s: %s", bfp8_status_name(st), bfp8_last_error());
}

static void *caller(void *arg) {
    worker *w = arg;
    uint16_t y[M * N] = {0};
    for (int i = 0; i < CALLS; i++) {
        bfp8_status st;
        if ((i + w->id) % 3 == 0) {
            bfp8_linear_args la = {.x = g_x, .x_dtype = BFP8_DTYPE_F32, .m = M, .bias = g_bias,
                                   .bias_dtype = BFP8_DTYPE_F32, .y = y, .y_dtype = BFP8_DTYPE_BF16,
                                   .device = BFP8_DEVICE_CPU};
            st = bfp8_linear(g_d, g_w, &la);
        } else {
            bfp8_gemm_args g = {.m = M, .n = N, .k = K, .a = g_a, .b = g_b, .bias = g_bias,
                                .bias_dtype = BFP8_DTYPE_F32, .y = y, .y_dtype = BFP8_DTYPE_BF16,
                                .device = BFP8_DEVICE_CPU};
            bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, M, KB, g_sa);
            bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, KB, g_sb);
            st = bfp8_gemm(g_d, &g);
        }
        note_failure(w, st);
        w->calls += st == BFP8_OK;
    }
    return NULL;
}

static void *flipper(void *arg) {
    worker *w = arg;
    for (int i = 0; i < FLIPS; i++) {
        size_t j = (size_t)(i * 3 + w->id) % NPOLICIES;
        note_failure(w, bfp8_dispatcher_set_policy(g_d, policies[j].policy, policies[j].name));
    }
    return NULL;
}

static void *reader(void *arg) {
    worker *w = arg;
    FILE *sink = fopen("/dev/null", "w");
    bfp8_problem p = {.device = BFP8_DEVICE_CPU, .m = M, .n = N, .k = K, .out_dtype = BFP8_DTYPE_BF16,
                      .a_layouts = 1, .b_layouts = 1};
    for (int i = 0; i < READS; i++) {
        (void)bfp8_dispatcher_calls(g_d, "cpu");
        size_t n = bfp8_dispatcher_fallback_count(g_d);
        bfp8_fallback_stat f;
        if (n) (void)bfp8_dispatcher_fallback_at(g_d, n - 1, &f); /* may have been reset meanwhile */
        bfp8_nonfinite_stats nf;
        note_failure(w, bfp8_dispatcher_nonfinite(g_d, &nf));
        if (sink) {
            bfp8_dispatcher_print_stats(g_d, sink);
            note_failure(w, bfp8_dispatcher_explain(g_d, &p, sink));
        }
        bfp8_decision dec;
        note_failure(w, bfp8_dispatcher_select(g_d, &p, &dec));
        if (g_phase_resets && w->id == 0 && i % 10 == 0) bfp8_dispatcher_reset_stats(g_d);
    }
    if (sink) fclose(sink);
    return NULL;
}

static void run_phase(int resets) {
    enum { CALLERS = 3, FLIPPERS = 2, READERS = 2, ALL = CALLERS + FLIPPERS + READERS };
    g_phase_resets = resets;
    bfp8_dispatcher_reset_stats(g_d);
    pthread_t t[ALL];
    worker w[ALL];
    memset(w, 0, sizeof w);
    for (int i = 0; i < ALL; i++) {
        w[i].id = i < CALLERS ? i : i < CALLERS + FLIPPERS ? i - CALLERS : i - CALLERS - FLIPPERS;
        void *(*fn)(void *) = i < CALLERS ? caller : i < CALLERS + FLIPPERS ? flipper : reader;
        CHECK(pthread_create(&t[i], NULL, fn, &w[i]) == 0, "pthread_create");
    }
    int calls = 0;
    for (int i = 0; i < ALL; i++) {
        pthread_join(t[i], NULL);
        CHECK(w[i].failures == 0, "phase %d thread %d: %d failures, first: %s", resets, i, w[i].failures,
              w[i].first_error);
        calls += w[i].calls;
    }
    CHECK(calls == CALLERS * CALLS, "phase %d: %d of %d calls succeeded", resets, calls, CALLERS * CALLS);
    if (resets) return;
    /* Without resets every call is in exactly one backend's count, and every fallback in one entry. */
    uint64_t recorded = 0, fallbacks = 0;
    const char *names[] = {"fast", "generic_with_a_long_name", "cpu", "ref"};
    for (int i = 0; i < 4; i++) recorded += bfp8_dispatcher_calls(g_d, names[i]);
    for (size_t i = 0; i < bfp8_dispatcher_fallback_count(g_d); i++) {
        bfp8_fallback_stat f;
        CHECK_OK(bfp8_dispatcher_fallback_at(g_d, i, &f));
        fallbacks += f.count;
    }
    CHECK(recorded == (uint64_t)calls, "calls recorded %llu, made %d", (unsigned long long)recorded, calls);
    CHECK(fallbacks <= recorded, "fallbacks %llu > calls %llu", (unsigned long long)fallbacks,
          (unsigned long long)recorded);
    /* The weight's NaN code is counted once per linear call. */
    bfp8_nonfinite_stats nf;
    CHECK_OK(bfp8_dispatcher_nonfinite(g_d, &nf));
    int linear_calls = 0;
    for (int id = 0; id < CALLERS; id++)
        for (int i = 0; i < CALLS; i++) linear_calls += (i + id) % 3 == 0;
    CHECK(nf.weight_codes == (uint64_t)linear_calls, "weight codes counted %llu, want %d",
          (unsigned long long)nf.weight_codes, linear_calls);
}

int main(void) {
    test_seed();
    for (int i = 0; i < M * K; i++) g_a[i] = (uint8_t)(test_rand_u64() % 0x7E);
    for (int i = 0; i < N * K; i++) g_b[i] = (uint8_t)(test_rand_u64() % 0x7E);
    for (int i = 0; i < M * KB; i++) g_sa[i] = 0.01f;
    for (int i = 0; i < KB; i++) g_sb[i] = 0.001f;
    for (int i = 0; i < N; i++) g_bias[i] = test_randn(1.0f);
    for (int i = 0; i < M * K; i++) g_x[i] = test_randn(1.0f);
    g_b[7] = 0x7F; /* one NaN code in the weight: counted per linear call from any thread */
    bfp8_scales sb;
    CHECK_OK(bfp8_scales_init(&sb, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, KB, g_sb));
    CHECK_OK(bfp8_weight_create(g_b, N, K, &sb, &g_w));
    g_b[7] = 0x30;
    CHECK_OK(bfp8_dispatcher_create_default(&g_d));
    CHECK_OK(bfp8_dispatcher_add(g_d, &spy_fast));
    CHECK_OK(bfp8_dispatcher_add(g_d, &spy_generic_long_name));
    CHECK_OK(bfp8_set_num_threads(2)); /* the cpu backend's pool runs under the callers too */
    run_phase(0);
    run_phase(1);
    bfp8_dispatcher_free(g_d);
    bfp8_weight_free(g_w);
    return TEST_SUMMARY("concurrency");
}
