/* Dispatcher tests: the seed's four regression cases with spy backends (no kernels run), capability boundaries,
 * policies, statistics under threads and BFP8_LOG=dispatch. */
#include "check.h"

#include <pthread.h>
#include <unistd.h>

/* ---- spies ---------------------------------------------------------------------------------------------------- */
static int fast_calls, generic_calls;

static bfp8_status fast_gemm(const bfp8_backend *self, const bfp8_gemm_args *a) {
    __atomic_fetch_add(&fast_calls, 1, __ATOMIC_RELAXED);
    return BFP8_OK;
}
static bfp8_status generic_gemm(const bfp8_backend *self, const bfp8_gemm_args *a) {
    __atomic_fetch_add(&generic_calls, 1, __ATOMIC_RELAXED);
    return BFP8_OK;
}

#define ALL_FLOAT_DTYPES (BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16))
#define BOTH_FORMATS (BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0))
#define ROW_MAJOR_ONLY BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)

/* The seed's TRTLLM-like fast kernel: bf16 output only, K >= 256, fp32 or UE8M0 scales. */
static const bfp8_backend mock_fast = {
    .name = "fast",
    .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = BFP8_BIT(BFP8_DTYPE_BF16), .scale_formats = BOTH_FORMATS,
             .a_layouts = ROW_MAJOR_ONLY, .b_layouts = ROW_MAJOR_ONLY, .bias_dtypes = ALL_FLOAT_DTYPES,
             .min_k = 256, .priority = 20},
    .gemm = fast_gemm,
};
/* The Triton-like generic kernel: any dtype, any K. */
static const bfp8_backend mock_generic = {
    .name = "generic",
    .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = ALL_FLOAT_DTYPES, .scale_formats = BOTH_FORMATS,
             .a_layouts = ROW_MAJOR_ONLY, .b_layouts = ROW_MAJOR_ONLY, .bias_dtypes = ALL_FLOAT_DTYPES,
             .priority = 1},
    .gemm = generic_gemm,
};

/* A real GEMM call (fresh random operands) through `d`; the spies see it, nothing computes. */
static bfp8_status invoke(bfp8_dispatcher *d, bfp8_dtype out, int64_t k, bfp8_scale_format format) {
    enum { M = 16, N = 512 };
    int64_t kb = (k + 127) / 128;
    uint8_t *a = malloc((size_t)(M * k)), *b = malloc((size_t)(N * k));
    float *sa = malloc(sizeof(float) * (size_t)(M * kb)), *sb = malloc(sizeof(float) * (size_t)(N / 128 * kb));
    float *y = malloc(sizeof(float) * M * N);
    for (int64_t i = 0; i < M * k; i++) a[i] = (uint8_t)test_rand_u64();
    for (int64_t i = 0; i < N * k; i++) b[i] = (uint8_t)test_rand_u64();
    for (int64_t i = 0; i < M * kb; i++) sa[i] = format == BFP8_SCALE_UE8M0 ? 0.0078125f : 0.01f + test_rand_f32() * 1e-3f;
    for (int64_t i = 0; i < N / 128 * kb; i++) sb[i] = format == BFP8_SCALE_UE8M0 ? 0.00390625f : 0.02f;
    bfp8_gemm_args g = {.m = M, .n = N, .k = k, .a = a, .b = b, .y = y, .y_dtype = out, .device = BFP8_DEVICE_CPU};
    bfp8_scales_init(&g.a_scales, format, BFP8_LAYOUT_ROW_MAJOR, M, kb, sa);
    bfp8_scales_init(&g.b_scales, format, BFP8_LAYOUT_ROW_MAJOR, N / 128, kb, sb);
    /* A plain GEMM's activations arrive quantized: its problem never claims a kernel to start behind. */
    bfp8_problem p;
    CHECK(bfp8_problem_from_gemm(&g, &p) != BFP8_OK || !p.act_from_prior_kernel, "gemm problem: act_from_prior_kernel");
    bfp8_status st = bfp8_gemm(d, &g);
    free(a), free(b), free(sa), free(sb), free(y);
    return st;
}

static bfp8_dispatcher *seed_dispatcher(bfp8_policy policy) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create(&d));
    CHECK_OK(bfp8_dispatcher_add(d, &mock_fast));
    CHECK_OK(bfp8_dispatcher_add(d, &mock_generic));
    CHECK_OK(bfp8_dispatcher_set_policy(d, policy, "fast"));
    fast_calls = generic_calls = 0;
    return d;
}

static bool last_fallback_reason_contains(bfp8_dispatcher *d, const char *needle) {
    size_t n = bfp8_dispatcher_fallback_count(d);
    bfp8_fallback_stat f;
    if (n == 0 || bfp8_dispatcher_fallback_at(d, n - 1, &f) != BFP8_OK) return false;
    return strcmp(f.preferred, "fast") == 0 && strcmp(f.chosen, "generic") == 0 && strstr(f.reason, needle);
}

/* The four cases of the SGLang regression fix, plus the K boundary. */
static void test_seed_cases(void) {
    bfp8_dispatcher *d;

    /* 1. bf16 output, K=512, plain fp32 scales: the fast kernel, no fallback. */
    d = seed_dispatcher(BFP8_POLICY_PREFER);
    CHECK_OK(invoke(d, BFP8_DTYPE_BF16, 512, BFP8_SCALE_FP32));
    CHECK(fast_calls == 1 && generic_calls == 0, "seed 1: fast=%d generic=%d", fast_calls, generic_calls);
    CHECK(bfp8_dispatcher_fallback_count(d) == 0, "seed 1: a fallback was recorded");
    CHECK(bfp8_dispatcher_calls(d, "fast") == 1, "seed 1: stats count");
    bfp8_dispatcher_free(d);

    /* 2. The same with UE8M0 scales: still the fast kernel (the scale format is not a reason to fall back). */
    d = seed_dispatcher(BFP8_POLICY_PREFER);
    CHECK_OK(invoke(d, BFP8_DTYPE_BF16, 512, BFP8_SCALE_UE8M0));
    CHECK(fast_calls == 1 && generic_calls == 0, "seed 2: fast=%d generic=%d", fast_calls, generic_calls);
    bfp8_dispatcher_free(d);

    /* 3. fp16 output: the generic kernel, and the recorded reason names the output dtype. */
    d = seed_dispatcher(BFP8_POLICY_PREFER);
    CHECK_OK(invoke(d, BFP8_DTYPE_F16, 512, BFP8_SCALE_FP32));
    CHECK(fast_calls == 0 && generic_calls == 1, "seed 3: fast=%d generic=%d", fast_calls, generic_calls);
    CHECK(last_fallback_reason_contains(d, "output dtype f16"), "seed 3: reason does not name the output dtype");
    CHECK(bfp8_dispatcher_calls(d, "generic") == 1, "seed 3: stats count");
    bfp8_dispatcher_free(d);

    /* 4. bf16 output, K=128: the generic kernel, and the reason names K. */
    d = seed_dispatcher(BFP8_POLICY_PREFER);
    CHECK_OK(invoke(d, BFP8_DTYPE_BF16, 128, BFP8_SCALE_FP32));
    CHECK(fast_calls == 0 && generic_calls == 1, "seed 4: fast=%d generic=%d", fast_calls, generic_calls);
    CHECK(last_fallback_reason_contains(d, "K=128"), "seed 4: reason does not name K");
    bfp8_dispatcher_free(d);

    /* The boundary itself: K=255 falls back, K=256 does not. */
    d = seed_dispatcher(BFP8_POLICY_PREFER);
    CHECK_OK(invoke(d, BFP8_DTYPE_BF16, 255, BFP8_SCALE_FP32));
    CHECK(fast_calls == 0 && generic_calls == 1, "K=255: fast=%d generic=%d", fast_calls, generic_calls);
    CHECK(last_fallback_reason_contains(d, "K=255"), "K=255: reason does not name K");
    CHECK_OK(invoke(d, BFP8_DTYPE_BF16, 256, BFP8_SCALE_FP32));
    CHECK(fast_calls == 1 && generic_calls == 1, "K=256: fast=%d generic=%d", fast_calls, generic_calls);
    bfp8_dispatcher_free(d);

    /* Strict: the fast kernel or an error that carries the reason; nothing runs. */
    d = seed_dispatcher(BFP8_POLICY_STRICT);
    CHECK_STATUS(invoke(d, BFP8_DTYPE_F16, 512, BFP8_SCALE_FP32), BFP8_ERR_UNSUPPORTED);
    CHECK(strstr(bfp8_last_error(), "fast") && strstr(bfp8_last_error(), "output dtype f16"),
          "strict: message '%s' lacks the reason", bfp8_last_error());
    CHECK_STATUS(invoke(d, BFP8_DTYPE_BF16, 128, BFP8_SCALE_FP32), BFP8_ERR_UNSUPPORTED);
    CHECK(strstr(bfp8_last_error(), "K=128"), "strict: message '%s' lacks K", bfp8_last_error());
    CHECK(fast_calls == 0 && generic_calls == 0, "strict ran a kernel: fast=%d generic=%d", fast_calls, generic_calls);
    CHECK_OK(invoke(d, BFP8_DTYPE_BF16, 512, BFP8_SCALE_FP32));
    CHECK(fast_calls == 1, "strict: capable case did not run fast");
    bfp8_dispatcher_free(d);

    /* Auto picks the capable backend of highest priority, and falls to the next when it cannot run. */
    d = seed_dispatcher(BFP8_POLICY_AUTO);
    CHECK_OK(invoke(d, BFP8_DTYPE_BF16, 512, BFP8_SCALE_FP32));
    CHECK_OK(invoke(d, BFP8_DTYPE_F32, 512, BFP8_SCALE_FP32));
    CHECK(fast_calls == 1 && generic_calls == 1, "auto: fast=%d generic=%d", fast_calls, generic_calls);
    CHECK(bfp8_dispatcher_fallback_count(d) == 0, "auto records no fallback (nothing was preferred)");
    bfp8_dispatcher_free(d);
}

/* ---- capability boundaries of bfp8_backend_check ---------------------------------------------------------------- */
static bfp8_problem base_problem(void) {
    return (bfp8_problem){.device = BFP8_DEVICE_CUDA, .arch = 90, .m = 64, .n = 256, .k = 512,
                          .out_dtype = BFP8_DTYPE_BF16, .scale_format = BFP8_SCALE_FP32,
                          .a_layouts = ROW_MAJOR_ONLY, .b_layouts = ROW_MAJOR_ONLY};
}

static void expect(const bfp8_backend *b, bfp8_problem p, bool want, const char *needle, const char *what) {
    char why[BFP8_REASON_MAX];
    bool got = bfp8_backend_check(b, &p, why, sizeof why);
    CHECK(got == want, "%s: check gave %d (reason '%s')", what, got, why);
    if (!want && needle) CHECK(strstr(why, needle) != NULL, "%s: reason '%s' lacks '%s'", what, why, needle);
}

static void test_capability_boundaries(void) {
    bfp8_backend b = mock_fast;
    b.caps = (bfp8_caps){.device = BFP8_DEVICE_CUDA, .min_arch = 90, .max_arch = 90,
                         .out_dtypes = BFP8_BIT(BFP8_DTYPE_BF16), .scale_formats = BFP8_BIT(BFP8_SCALE_FP32),
                         .a_layouts = ROW_MAJOR_ONLY, .b_layouts = ROW_MAJOR_ONLY,
                         .bias_dtypes = BFP8_BIT(BFP8_DTYPE_F32), .min_k = 256, .m_multiple = 4,
                         .n_multiple = 64, .k_multiple = 128, .max_m = 4096, .max_n = 65536, .max_k = 32768};
    bfp8_problem p = base_problem();
    expect(&b, p, true, NULL, "base");
    p = base_problem(); p.device = BFP8_DEVICE_CPU; p.arch = 0; expect(&b, p, false, "cpu", "device");
    p = base_problem(); p.arch = 89; expect(&b, p, false, "sm_89", "arch below");
    p = base_problem(); p.arch = 100; expect(&b, p, false, "sm_100", "arch above");
    p = base_problem(); p.out_dtype = BFP8_DTYPE_F16; expect(&b, p, false, "output dtype f16", "dtype");
    p = base_problem(); p.scale_format = BFP8_SCALE_UE8M0; expect(&b, p, false, "ue8m0", "format");
    p = base_problem(); p.k = 255; expect(&b, p, false, "K=255", "min K");
    p = base_problem(); p.k = 256; expect(&b, p, true, NULL, "min K exact");
    p = base_problem(); p.k = 384 + 1; expect(&b, p, false, "multiple of 128", "K multiple");
    p = base_problem(); p.n = 64 * 3; expect(&b, p, true, NULL, "N multiple exact");
    p = base_problem(); p.n = 64 * 3 + 1; expect(&b, p, false, "N=193", "N multiple");
    p = base_problem(); p.m = 5; expect(&b, p, false, "M=5", "M multiple");
    p = base_problem(); p.m = 4; expect(&b, p, true, NULL, "M multiple exact");
    b.caps.pads_m = true;
    p = base_problem(); p.m = 5; expect(&b, p, true, NULL, "M padded internally");
    p = base_problem(); p.m = 4097; expect(&b, p, false, "M=4097", "max M");
    p = base_problem(); p.m = 4096; expect(&b, p, true, NULL, "max M exact");
    p = base_problem(); p.n = 65536 + 64; expect(&b, p, false, "N=65600", "max N");
    p = base_problem(); p.k = 32768 + 128; expect(&b, p, false, "K=32896", "max K");
    p = base_problem(); p.has_bias = true; p.bias_dtype = BFP8_DTYPE_F32; expect(&b, p, true, NULL, "bias f32");
    p = base_problem(); p.has_bias = true; p.bias_dtype = BFP8_DTYPE_BF16; expect(&b, p, false, "bias dtype bf16", "bias dtype");
    p = base_problem(); p.a_layouts = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR); expect(&b, p, false, "activation scales", "A layout");
    p = base_problem(); p.b_layouts = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR); expect(&b, p, false, "weight scales", "B layout");
    p = base_problem(); p.b_layouts = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR) | ROW_MAJOR_ONLY; expect(&b, p, true, NULL, "B layouts overlap");
    b.caps.bias_dtypes = 0;
    p = base_problem(); p.has_bias = true; expect(&b, p, false, "no bias", "no bias support");
}

/* ---- the pure selection function -------------------------------------------------------------------------------- */
static void test_select_pure(void) {
    const bfp8_backend *list[] = {&mock_generic, &mock_fast};
    bfp8_problem p = base_problem();
    p.device = BFP8_DEVICE_CPU;
    p.arch = 0;
    bfp8_decision a, b;
    CHECK_OK(bfp8_select(list, 2, &p, BFP8_POLICY_AUTO, NULL, &a));
    CHECK_OK(bfp8_select(list, 2, &p, BFP8_POLICY_AUTO, NULL, &b));
    CHECK(a.backend == &mock_fast && b.backend == &mock_fast && !a.fallback, "auto must pick the higher priority");
    CHECK_STATUS(bfp8_select(list, 2, &p, BFP8_POLICY_PREFER, "nonexistent", &a), BFP8_ERR_NOT_FOUND);
    CHECK(strstr(bfp8_last_error(), "generic") != NULL, "NOT_FOUND message lists registered backends");
    p.out_dtype = BFP8_DTYPE_F16;
    p.device = BFP8_DEVICE_CUDA;
    CHECK_STATUS(bfp8_select(list, 2, &p, BFP8_POLICY_AUTO, NULL, &a), BFP8_ERR_UNSUPPORTED);
    CHECK(strstr(bfp8_last_error(), "fast:") && strstr(bfp8_last_error(), "generic:"),
          "no-backend message gives every reason: '%s'", bfp8_last_error());
    CHECK_STATUS(bfp8_select(list, 0, &p, BFP8_POLICY_AUTO, NULL, &a), BFP8_ERR_UNSUPPORTED);
    p = base_problem();
    p.m = -1;
    CHECK_STATUS(bfp8_select(list, 2, &p, BFP8_POLICY_AUTO, NULL, &a), BFP8_ERR_INVALID_ARGUMENT);
    p = base_problem();
    p.out_dtype = BFP8_DTYPE_E4M3;
    CHECK_STATUS(bfp8_select(list, 2, &p, BFP8_POLICY_AUTO, NULL, &a), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_select(list, 2, NULL, BFP8_POLICY_AUTO, NULL, &a), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_select(list, 2, &p, BFP8_POLICY_AUTO, NULL, NULL), BFP8_ERR_INVALID_ARGUMENT);
}

/* ---- registry and policies -------------------------------------------------------------------------------------- */
static void test_registry(void) {
    bfp8_dispatcher *d;
    CHECK_OK(bfp8_dispatcher_create(&d));
    CHECK_OK(bfp8_dispatcher_add(d, &mock_generic));
    CHECK_STATUS(bfp8_dispatcher_add(d, &mock_generic), BFP8_ERR_INVALID_ARGUMENT); /* duplicate name */
    CHECK_OK(bfp8_dispatcher_add_unavailable(d, "gpu_fast", "no CUDA device"));
    CHECK_STATUS(bfp8_dispatcher_add_unavailable(d, "generic", "x"), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dispatcher_set_policy(d, BFP8_POLICY_PREFER, "typo"), BFP8_ERR_NOT_FOUND);
    CHECK_STATUS(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dispatcher_set_policy(d, (bfp8_policy)42, "generic"), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(bfp8_dispatcher_find(d, "generic") == &mock_generic && bfp8_dispatcher_count(d) == 1, "find/count");

    /* Preferring an unavailable built-in falls back with its reason; strict fails with it. */
    generic_calls = 0;
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_PREFER, "gpu_fast"));
    CHECK_OK(invoke(d, BFP8_DTYPE_BF16, 512, BFP8_SCALE_FP32));
    CHECK(generic_calls == 1, "prefer unavailable: generic ran %d times", generic_calls);
    bfp8_fallback_stat f;
    CHECK_OK(bfp8_dispatcher_fallback_at(d, 0, &f));
    CHECK(strcmp(f.preferred, "gpu_fast") == 0 && strstr(f.reason, "no CUDA device"), "fallback reason '%s'", f.reason);
    CHECK_STATUS(bfp8_dispatcher_fallback_at(d, 1, &f), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "gpu_fast"));
    CHECK_STATUS(invoke(d, BFP8_DTYPE_BF16, 512, BFP8_SCALE_FP32), BFP8_ERR_UNSUPPORTED);
    CHECK(strstr(bfp8_last_error(), "no CUDA device"), "strict unavailable message '%s'", bfp8_last_error());
    CHECK(generic_calls == 1, "strict unavailable must not run anything");

    /* explain prints every backend, the unavailable ones and the choice. */
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_AUTO, NULL));
    char buf[4096] = {0};
    FILE *mem = fmemopen(buf, sizeof buf - 1, "w");
    bfp8_problem p = base_problem();
    p.device = BFP8_DEVICE_CPU;
    CHECK_OK(bfp8_dispatcher_explain(d, &p, mem));
    fclose(mem);
    CHECK(strstr(buf, "generic") && strstr(buf, "gpu_fast") && strstr(buf, "no CUDA device") &&
              strstr(buf, "choice:  generic"), "explain output:\n%s", buf);
    bfp8_dispatcher_free(d);

    /* The default dispatcher holds the built-in host backends. */
    bfp8_dispatcher *def = bfp8_dispatcher_default();
    CHECK(def && bfp8_dispatcher_find(def, "ref") && bfp8_dispatcher_find(def, "cpu"), "default dispatcher");
}

/* ---- statistics under concurrency ------------------------------------------------------------------------------- */
enum { THREADS = 4, CALLS_PER_THREAD = 200 };
static bfp8_dispatcher *shared_d;

static void *hammer(void *arg) {
    intptr_t id = (intptr_t)arg;
    for (int i = 0; i < CALLS_PER_THREAD; i++) {
        bfp8_problem p = base_problem();
        p.device = BFP8_DEVICE_CPU;
        p.out_dtype = (i + id) % 2 ? BFP8_DTYPE_F16 : BFP8_DTYPE_BF16;
        bfp8_decision dec;
        if (bfp8_dispatcher_select(shared_d, &p, &dec) != BFP8_OK) return (void *)1;
    }
    return NULL;
}

static void *hammer_gemm(void *arg) {
    for (int i = 0; i < CALLS_PER_THREAD / 4; i++)
        if (invoke(shared_d, i % 2 ? BFP8_DTYPE_F16 : BFP8_DTYPE_BF16, 512, BFP8_SCALE_FP32) != BFP8_OK) return (void *)1;
    return NULL;
}

static void test_stats_threads(void) {
    shared_d = seed_dispatcher(BFP8_POLICY_PREFER);
    pthread_t t[THREADS];
    for (intptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, i % 2 ? hammer : hammer_gemm, (void *)i);
    bool ok = true;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        ok = ok && r == NULL;
    }
    CHECK(ok, "a thread failed");
    int gemm_calls = (THREADS / 2) * (CALLS_PER_THREAD / 4);
    uint64_t f = bfp8_dispatcher_calls(shared_d, "fast"), g = bfp8_dispatcher_calls(shared_d, "generic");
    CHECK(f + g == (uint64_t)gemm_calls && f == (uint64_t)gemm_calls / 2, "stats: fast=%llu generic=%llu of %d",
          (unsigned long long)f, (unsigned long long)g, gemm_calls);
    CHECK(fast_calls == (int)f && generic_calls == (int)g, "spies disagree with stats");
    bfp8_fallback_stat fb;
    CHECK(bfp8_dispatcher_fallback_count(shared_d) == 1, "one distinct fallback");
    CHECK_OK(bfp8_dispatcher_fallback_at(shared_d, 0, &fb));
    CHECK(fb.count == (uint64_t)gemm_calls / 2, "fallback count %llu", (unsigned long long)fb.count);
    bfp8_dispatcher_reset_stats(shared_d);
    CHECK(bfp8_dispatcher_calls(shared_d, "fast") == 0 && bfp8_dispatcher_fallback_count(shared_d) == 0, "reset");
    bfp8_dispatcher_free(shared_d);
}

/* ---- BFP8_LOG=dispatch prints each distinct decision once --------------------------------------------------------- */
static void test_log_once(void) {
    setenv("BFP8_LOG", "dispatch", 1);
    bfp8_dispatcher *d = seed_dispatcher(BFP8_POLICY_PREFER);
    unsetenv("BFP8_LOG");
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    for (int i = 0; i < 3; i++) {
        invoke(d, BFP8_DTYPE_BF16, 512, BFP8_SCALE_FP32);
        invoke(d, BFP8_DTYPE_F16, 512, BFP8_SCALE_FP32);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[4096] = {0};
    rewind(tmp);
    size_t n = fread(buf, 1, sizeof buf - 1, tmp);
    fclose(tmp);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    CHECK(lines == 2, "expected 2 log lines, got %d:\n%s", lines, buf);
    CHECK(strstr(buf, "-> fast") && strstr(buf, "-> generic (fallback from fast: output dtype f16"), "log:\n%s", buf);
    bfp8_dispatcher_free(d);
}

/* ---- the layouts a backend is handed ------------------------------------------------------------------------ */
static bfp8_scale_layout spy_a_layout, spy_b_layout;
static bfp8_status layout_spy_gemm(const bfp8_backend *self, const bfp8_gemm_args *a) {
    spy_a_layout = a->a_scales.layout;
    spy_b_layout = a->b_scales.layout;
    return BFP8_OK;
}

static void test_layouts(void) {
    /* Which layouts each format can be stored in, against what bfp8_scales_init accepts. */
    const uint32_t all = BFP8_BIT(BFP8_LAYOUT_COUNT) - 1;
    CHECK(bfp8_scale_layouts_for(BFP8_SCALE_UE8M0) == all, "ue8m0 layouts %#x",
          bfp8_scale_layouts_for(BFP8_SCALE_UE8M0));
    CHECK(bfp8_scale_layouts_for(BFP8_SCALE_FP32) == (all & ~BFP8_BIT(BFP8_LAYOUT_PACKED_UE8M0)), "fp32 layouts %#x",
          bfp8_scale_layouts_for(BFP8_SCALE_FP32));
    CHECK(bfp8_scale_layouts_for(BFP8_SCALE_FORMAT_COUNT) == 0 && bfp8_scale_layouts_for((bfp8_scale_format)-1) == 0,
          "unknown formats have layouts");
    for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT; f++)
        for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
            bfp8_scales s;
            const bool ok = bfp8_scales_init(&s, (bfp8_scale_format)f, (bfp8_scale_layout)l, 4, 4, NULL) == BFP8_OK;
            CHECK(ok == !!(bfp8_scale_layouts_for((bfp8_scale_format)f) & BFP8_BIT(l)), "format %d layout %d: init %d",
                  f, l, ok);
        }

    /* Every pair of (consumed, offered) sets, exhaustively. */
    for (uint32_t consumed = 0; consumed <= all; consumed++)
        for (uint32_t offered = 0; offered <= all; offered++) {
            const bfp8_backend b = {.name = "layouts", .caps = {.a_layouts = consumed, .b_layouts = consumed}};
            const bfp8_problem p = {.a_layouts = offered, .b_layouts = offered};
            bfp8_scale_layout la = BFP8_LAYOUT_COUNT, lb = BFP8_LAYOUT_COUNT;
            const bfp8_status st = bfp8_backend_layouts(&b, &p, &la, &lb);
            const uint32_t both = consumed & offered;
            if (!both) {
                CHECK(st == BFP8_ERR_UNSUPPORTED && bfp8_last_error()[0], "consumed %#x offered %#x: %s", consumed,
                      offered, bfp8_status_name(st));
                CHECK(la == BFP8_LAYOUT_COUNT && lb == BFP8_LAYOUT_COUNT, "outputs written on failure");
                continue;
            }
            int lowest = 0;
            while (!(both & BFP8_BIT(lowest))) lowest++;
            const int want_a = (both & BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED)) ? BFP8_LAYOUT_MN_MAJOR_ALIGNED : lowest;
            CHECK(st == BFP8_OK && (int)la == want_a && (int)lb == lowest,
                  "consumed %#x offered %#x: a %d b %d, want a %d b %d", consumed, offered, (int)la, (int)lb, want_a,
                  lowest);
        }
    CHECK_STATUS(bfp8_backend_layouts(NULL, NULL, NULL, NULL), BFP8_ERR_INVALID_ARGUMENT);

    /* bfp8_linear hands the backend exactly those layouts (a spy records them). */
    const bfp8_backend spy = {
        .name = "spy",
        .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = ALL_FLOAT_DTYPES, .scale_formats = BOTH_FORMATS,
                 .a_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR) | BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED),
                 .b_layouts = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR) | BFP8_BIT(BFP8_LAYOUT_PACKED_UE8M0), .priority = 1},
        .gemm = layout_spy_gemm,
    };
    enum { M = 3, N = 130, K = 300 };
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create(&d));
    CHECK_OK(bfp8_dispatcher_add(d, &spy));
    for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT && d; f++) {
        float *w = malloc(sizeof(float) * N * K), x[M * K], y[M * N];
        for (int i = 0; i < N * K; i++) w[i] = test_randn(0.02f);
        for (int i = 0; i < M * K; i++) x[i] = test_randn(1.0f);
        bfp8_weight *wt = NULL;
        CHECK_OK(bfp8_weight_quantize(w, BFP8_DTYPE_F32, N, K, (bfp8_scale_format)f, &wt, NULL));
        CHECK_OK(bfp8_weight_prepare(wt, d, "spy"));
        const bfp8_linear_args a = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = M, .y = y, .y_dtype = BFP8_DTYPE_F32,
                                    .device = BFP8_DEVICE_CPU};
        bfp8_problem p;
        bfp8_scale_layout want_a = BFP8_LAYOUT_COUNT, want_b = BFP8_LAYOUT_COUNT;
        CHECK_OK(bfp8_problem_from_linear(wt, &a, &p));
        CHECK_OK(bfp8_backend_layouts(&spy, &p, &want_a, &want_b));
        spy_a_layout = spy_b_layout = BFP8_LAYOUT_COUNT;
        CHECK_OK(bfp8_linear(d, wt, &a));
        CHECK(spy_a_layout == want_a && spy_b_layout == want_b, "%s: linear handed a %d b %d, want a %d b %d",
              bfp8_scale_format_name((bfp8_scale_format)f), (int)spy_a_layout, (int)spy_b_layout, (int)want_a,
              (int)want_b);
        CHECK(want_a == BFP8_LAYOUT_MN_MAJOR_ALIGNED && want_b == BFP8_LAYOUT_MN_MAJOR, "want a %d b %d", (int)want_a,
              (int)want_b);
        bfp8_weight_free(wt);
        free(w);
    }
    bfp8_dispatcher_free(d);
}

int main(void) {
    test_seed();
    test_seed_cases();
    test_layouts();
    test_capability_boundaries();
    test_select_pure();
    test_registry();
    test_stats_threads();
    test_log_once();
    return TEST_SUMMARY("dispatch");
}
