/* What an adversarial tester found (issue 28), one reproducer per finding: UE8M0 claims validated, every kind of
 * non-finite input counted, cpu and ref agreeing where fp32 promotion overflows, enums and sizes checked before
 * use, NULL outputs refused, exact statistics after a reset, error messages that do not format themselves, and
 * the aliasing that corrupted data refused before anything is written. */
#include "check.h"

#include "internal.h"
#include "backends/cpu.h"

/* A random finite E4M3 code (never 0x7F/0xFF). */
static uint8_t rand_code(void) {
    uint8_t c;
    do c = (uint8_t)test_rand_u64();
    while ((c & 0x7F) == 0x7F);
    return c;
}

static bool contains(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

/* ---- UE8M0 declared scales are validated --------------------------------------------------------------------- */
static void test_ue8m0_validation(void) {
    enum { N = 200, K = 300, NB = 2, KB = 3 };
    uint8_t *q = malloc(N * K);
    for (int i = 0; i < N * K; i++) q[i] = rand_code();
    float s[NB * KB];
    for (int i = 0; i < NB * KB; i++) s[i] = ldexpf(1.0f, (int)(test_rand_u64() % 40) - 30);
    bfp8_scales sc;
    CHECK_OK(bfp8_scales_init(&sc, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, NB, KB, s));
    bfp8_weight *w = NULL;
    CHECK_OK(bfp8_weight_create(q, N, K, &sc, &w));
    bfp8_weight_free(w);

    /* The smallest and largest UE8M0 scales pass; everything else is refused with its place. */
    s[0] = 0x1p-126f, s[1] = 0x1p127f;
    CHECK_OK(bfp8_weight_create(q, N, K, &sc, &w));
    bfp8_weight_free(w);
    const float bad[] = {0.3f, 0.75f * 0x1p-4f, NAN, INFINITY, 0.0f, -0.25f, 0x1p-127f, 0x1p-128f, -INFINITY, 3e38f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        float saved = s[1 * KB + 2];
        s[1 * KB + 2] = bad[i];
        w = (bfp8_weight *)&w; /* poison: must be set to NULL on failure */
        CHECK_STATUS(bfp8_weight_create(q, N, K, &sc, &w), BFP8_ERR_INVALID_ARGUMENT);
        CHECK(w == NULL, "out not cleared on failure");
        CHECK(contains(bfp8_last_error(), "(1, 2)") && contains(bfp8_last_error(), "power of two"),
              "value %g: message '%s' does not name scale (1, 2)", (double)bad[i], bfp8_last_error());
        s[1 * KB + 2] = saved;
    }
    /* The first bad one is named. */
    s[0 * KB + 1] = 0.5f * 3.0f, s[1 * KB + 0] = 5.0f;
    CHECK_STATUS(bfp8_weight_create(q, N, K, &sc, &w), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(contains(bfp8_last_error(), "(0, 1) = 1.5"), "first bad scale not named: '%s'", bfp8_last_error());
    /* The same values declared fp32 are fine (any positive value is an fp32 scale). */
    sc.format = BFP8_SCALE_FP32;
    CHECK_OK(bfp8_weight_create(q, N, K, &sc, &w));
    bfp8_weight_free(w);

    /* Packed exponents: byte 255 (NaN) and byte 0 (2^-127, below what bfp8_ue8m0_ceil gives) are refused. */
    uint32_t packed[1 * 4]; /* ceil(KB / 4) words x rows rounded up to 4 */
    memset(packed, 0, sizeof packed);
    packed[0] = 0x00807F7Eu, packed[1] = 0x00017F80u;
    CHECK_OK(bfp8_scales_init(&sc, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, NB, KB, packed));
    CHECK_OK(bfp8_weight_create(q, N, K, &sc, &w));
    bfp8_weight_free(w);
    for (int e = 0; e < 2; e++) {
        packed[1] = e ? 0x00FF7F80u : 0x00007F80u;
        CHECK_STATUS(bfp8_weight_create(q, N, K, &sc, &w), BFP8_ERR_INVALID_ARGUMENT);
        CHECK(contains(bfp8_last_error(), "(1, 2)"), "packed exponent %s: '%s'", e ? "255" : "0", bfp8_last_error());
    }
    free(q);
}

/* ---- non-finite values counted where they enter --------------------------------------------------------------- */
static bfp8_dispatcher *strict(const char *name) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, name));
    return d;
}

static bfp8_nonfinite_stats nonfinite_of(bfp8_dispatcher *d) {
    bfp8_nonfinite_stats s;
    memset(&s, 0xAB, sizeof s);
    CHECK_OK(bfp8_dispatcher_nonfinite(d, &s));
    return s;
}

static void test_nonfinite_linear(void) {
    enum { M = 3, N = 130, K = 300, NB = 2, KB = 3 };
    uint8_t *q = malloc(N * K);
    for (int i = 0; i < N * K; i++) q[i] = rand_code();
    q[5] = 0x7F, q[129 * K + 299] = 0xFF, q[64 * K + 128] = 0x7F; /* 3 NaN codes, one in the ragged corner */
    float s[NB * KB], bias[N], x[M * K];
    for (int i = 0; i < NB * KB; i++) s[i] = 0.001f + 0.001f * fabsf(test_rand_f32());
    s[1] = NAN, s[5] = INFINITY; /* 2 non-finite scales */
    for (int i = 0; i < N; i++) bias[i] = test_randn(1.0f);
    bias[0] = NAN, bias[N - 1] = -INFINITY; /* 2 */
    for (int i = 0; i < M * K; i++) x[i] = test_randn(1.0f);
    x[K + 7] = INFINITY; /* 1 */
    bfp8_scales sc;
    CHECK_OK(bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, NB, KB, s));
    bfp8_weight *w = NULL;
    CHECK_OK(bfp8_weight_create(q, N, K, &sc, &w));
    bfp8_weight_info wi;
    CHECK_OK(bfp8_weight_info_get(w, &wi));
    CHECK(wi.nonfinite_codes == 3 && wi.nonfinite_scales == 2, "weight info counts %lld codes, %lld scales",
          (long long)wi.nonfinite_codes, (long long)wi.nonfinite_scales);

    const char *backends[] = {"cpu", "ref"};
    for (int b = 0; b < 2; b++) {
        bfp8_dispatcher *d = strict(backends[b]);
        float *y = malloc(sizeof(float) * M * N);
        bfp8_linear_args a = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = M, .bias = bias, .bias_dtype = BFP8_DTYPE_F32,
                              .y = y, .y_dtype = BFP8_DTYPE_F32, .device = BFP8_DEVICE_CPU};
        for (int call = 1; call <= 2; call++) {
            CHECK_OK(bfp8_linear(d, w, &a));
            bfp8_nonfinite_stats st = nonfinite_of(d);
            CHECK(st.activations == 1u * call && st.weight_codes == 3u * call && st.weight_scales == 2u * call &&
                      st.bias == 2u * call && st.act_scales == 0 && st.uncounted_calls == 0,
                  "%s call %d: activations %llu, weight codes %llu, weight scales %llu, bias %llu", backends[b], call,
                  (unsigned long long)st.activations, (unsigned long long)st.weight_codes,
                  (unsigned long long)st.weight_scales, (unsigned long long)st.bias);
        }
        CHECK(bfp8_dispatcher_nonfinite_inputs(d) == 2, "nonfinite_inputs keeps meaning activations");
        /* --stats shows every kind. */
        FILE *tmp = tmpfile();
        bfp8_dispatcher_print_stats(d, tmp);
        char buf[2048] = {0};
        rewind(tmp);
        size_t len = fread(buf, 1, sizeof buf - 1, tmp);
        buf[len] = '\0';
        fclose(tmp);
        CHECK(contains(buf, "activations 2") && contains(buf, "weight codes 6") && contains(buf, "weight scales 4") &&
                  contains(buf, "bias 4"),
              "print_stats:\n%s", buf);
        bfp8_dispatcher_reset_stats(d);
        bfp8_nonfinite_stats st = nonfinite_of(d);
        CHECK(!st.activations && !st.weight_codes && !st.weight_scales && !st.bias, "reset keeps non-finite counts");
        /* A finite weight, x and bias add nothing. */
        bfp8_weight *wf = NULL;
        q[5] = q[129 * K + 299] = q[64 * K + 128] = 0x38;
        s[1] = s[5] = 0.002f;
        x[K + 7] = 0.5f;
        bias[0] = bias[N - 1] = 1.0f;
        CHECK_OK(bfp8_weight_create(q, N, K, &sc, &wf));
        CHECK_OK(bfp8_linear(d, wf, &a));
        st = nonfinite_of(d);
        CHECK(!st.activations && !st.weight_codes && !st.weight_scales && !st.bias, "finite inputs counted");
        q[5] = 0x7F, q[129 * K + 299] = 0xFF, q[64 * K + 128] = 0x7F;
        s[1] = NAN, s[5] = INFINITY;
        x[K + 7] = INFINITY;
        bias[0] = NAN, bias[N - 1] = -INFINITY;
        bfp8_weight_free(wf);
        free(y);
        bfp8_dispatcher_free(d);
    }
    bfp8_weight_free(w);

    /* bfp8_weight_quantize records its NaN codes (one per non-finite input) and still returns the count. */
    float *wf32 = malloc(sizeof(float) * N * K);
    for (int i = 0; i < N * K; i++) wf32[i] = test_randn(0.1f);
    wf32[17] = NAN, wf32[N * K - 1] = -INFINITY;
    int64_t bad = -1;
    CHECK_OK(bfp8_weight_quantize(wf32, BFP8_DTYPE_F32, N, K, BFP8_SCALE_UE8M0, &w, &bad));
    CHECK_OK(bfp8_weight_info_get(w, &wi));
    CHECK(bad == 2 && wi.nonfinite_codes == 2 && wi.nonfinite_scales == 0, "quantized weight: %lld / %lld",
          (long long)bad, (long long)wi.nonfinite_codes);
    bfp8_weight_free(w);
    free(wf32);
    free(q);
}

/* bfp8_linear on CUDA: x and the bias counted by kernels into the dispatcher's device counters (read only when the
 * statistics are), the weight from its recorded counts. Needs a GPU; says so and returns without one. */
static void test_nonfinite_cuda(void) {
    char why[BFP8_REASON_MAX];
    if (!bfp8_cuda_available(why, sizeof why)) {
        printf("non-finite counts on CUDA: skipped (%s)\n", why);
        return;
    }
    enum { M = 3, N = 256, K = 512, NB = 2, KB = 4 };
    uint8_t *q = malloc(N * K);
    for (int i = 0; i < N * K; i++) q[i] = rand_code();
    q[300] = 0xFF;
    float s[NB * KB], bias[N], x[M * K];
    for (int i = 0; i < NB * KB; i++) s[i] = 0.001f;
    s[6] = INFINITY;
    for (int i = 0; i < N; i++) bias[i] = test_randn(1.0f);
    bias[3] = NAN, bias[200] = INFINITY, bias[255] = -INFINITY;
    for (int i = 0; i < M * K; i++) x[i] = test_randn(1.0f);
    x[0] = NAN, x[2 * K + 511] = -INFINITY;
    bfp8_scales sc;
    CHECK_OK(bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, NB, KB, s));
    bfp8_weight *w = NULL;
    CHECK_OK(bfp8_weight_create(q, N, K, &sc, &w));
    bfp8_dispatcher *d = strict("cuda_generic");
    CHECK_OK(bfp8_weight_prepare(w, d, "cuda_generic"));
    void *xd = NULL, *bd = NULL, *yd = NULL;
    CHECK_OK(bfp8_cuda_malloc(sizeof x, &xd));
    CHECK_OK(bfp8_cuda_malloc(sizeof bias, &bd));
    CHECK_OK(bfp8_cuda_malloc(sizeof(uint16_t) * M * N, &yd));
    CHECK_OK(bfp8_cuda_upload(xd, x, sizeof x));
    CHECK_OK(bfp8_cuda_upload(bd, bias, sizeof bias));
    bfp8_linear_args la = {.x = xd, .x_dtype = BFP8_DTYPE_F32, .m = M, .bias = bd, .bias_dtype = BFP8_DTYPE_F32,
                           .y = yd, .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CUDA};
    for (int call = 1; call <= 2; call++) CHECK_OK(bfp8_linear(d, w, &la));
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    bfp8_nonfinite_stats st = nonfinite_of(d);
    CHECK(st.activations == 4 && st.bias == 6 && st.weight_codes == 2 && st.weight_scales == 2 &&
              st.uncounted_calls == 0,
          "cuda: activations %llu, bias %llu, weight codes %llu, weight scales %llu, uncounted %llu",
          (unsigned long long)st.activations, (unsigned long long)st.bias, (unsigned long long)st.weight_codes,
          (unsigned long long)st.weight_scales, (unsigned long long)st.uncounted_calls);
    bfp8_dispatcher_reset_stats(d);
    st = nonfinite_of(d);
    CHECK(!st.activations && !st.bias && !st.weight_codes, "cuda: reset left counts");
    CHECK_OK(bfp8_linear(d, w, &la));
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    st = nonfinite_of(d);
    CHECK(st.activations == 2 && st.bias == 3, "cuda after reset: activations %llu, bias %llu",
          (unsigned long long)st.activations, (unsigned long long)st.bias);
    bfp8_cuda_free(xd), bfp8_cuda_free(bd), bfp8_cuda_free(yd);
    bfp8_weight_free(w);
    bfp8_dispatcher_free(d);
    free(q);
}

/* bfp8_gemm on the host: operands' non-finite values by kind, found because y shows them. */
static void test_nonfinite_gemm(void) {
    enum { M = 5, N = 140, K = 260, NB = 2, KB = 3 };
    uint8_t *a = malloc(M * K), *b = malloc(N * K);
    float sa[M * KB], sb[NB * KB], bias[N];
    uint16_t *y = malloc(sizeof(uint16_t) * M * N);
    for (int i = 0; i < M * K; i++) a[i] = rand_code();
    for (int i = 0; i < N * K; i++) b[i] = rand_code();
    for (int i = 0; i < M * KB; i++) sa[i] = 0.01f;
    for (int i = 0; i < NB * KB; i++) sb[i] = 0.001f;
    for (int i = 0; i < N; i++) bias[i] = test_randn(1.0f);
    bfp8_gemm_args g = {.m = M, .n = N, .k = K, .a = a, .b = b, .bias = bias, .bias_dtype = BFP8_DTYPE_F32, .y = y,
                        .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
    CHECK_OK(bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, M, KB, sa));
    CHECK_OK(bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, NB, KB, sb));
    const char *backends[] = {"cpu", "ref"};
    for (int bi = 0; bi < 2; bi++) {
        bfp8_dispatcher *d = strict(backends[bi]);
        CHECK_OK(bfp8_gemm(d, &g));
        bfp8_nonfinite_stats st = nonfinite_of(d);
        CHECK(!st.activations && !st.act_scales && !st.weight_codes && !st.weight_scales && !st.bias,
              "%s: finite operands counted", backends[bi]);
        a[3] = 0xFF, a[4 * K + 259] = 0x7F, sa[7] = INFINITY, b[139 * K] = 0x7F, sb[4] = NAN, bias[9] = INFINITY,
        bias[10] = NAN;
        CHECK_OK(bfp8_gemm(d, &g));
        st = nonfinite_of(d);
        CHECK(st.activations == 2 && st.act_scales == 1 && st.weight_codes == 1 && st.weight_scales == 1 &&
                  st.bias == 2,
              "%s: activations %llu act scales %llu weight codes %llu weight scales %llu bias %llu", backends[bi],
              (unsigned long long)st.activations, (unsigned long long)st.act_scales,
              (unsigned long long)st.weight_codes, (unsigned long long)st.weight_scales,
              (unsigned long long)st.bias);
        a[3] = a[4 * K + 259] = b[139 * K] = 0x30, sa[7] = 0.01f, sb[4] = 0.001f, bias[9] = bias[10] = 0.0f;
        bfp8_dispatcher_free(d);
    }
    free(a), free(b), free(y);
}

/* ---- cpu and ref agree where the fp32 promotion overflows ---------------------------------------------------- */
typedef struct overflow_case {
    const char *what;
    uint8_t a0, a1, b; /* A's codes in K block 0 and 1, B's codes everywhere (0 = code zero) */
    float sa, sb;
} overflow_case;

static void test_promotion_overflow(void) {
    enum { N = 20, K = 256, KB = 2 };
    const overflow_case cases[] = {
        /* 128 * 448^2 * 3e38 is beyond fp32: +X from block 0 and -X from block 1, inf - inf = NaN in fp32. */
        {"+448/-448 blocks, sa 3e38", 0x7E, 0xFE, 0x7E, 3e38f, 1.0f},
        {"+448/-448 blocks, sa = sb = 3e38", 0x7E, 0xFE, 0x7E, 3e38f, 3e38f},
        /* sa * sb = 2^128 overflows while the element, 2^128 times one product 2^-9 * 1, is 2^119. */
        {"scale product beyond fp32, finite result", 0x01, 0x00, 0x38, 0x1p64f, 0x1p64f},
        /* Exact value beyond every output dtype: inf, in ref and cpu alike. */
        {"result beyond fp32", 0x7E, 0x7E, 0x7E, 3e38f, 1.0f},
    };
    const bfp8_dtype dts[] = {BFP8_DTYPE_F32, BFP8_DTYPE_BF16, BFP8_DTYPE_F16};
    const int64_t ms[] = {3, 13}; /* the small-M and large-M paths */
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const overflow_case *c = &cases[ci];
        for (int mi = 0; mi < 2; mi++) {
            int64_t m = ms[mi];
            uint8_t *a = malloc((size_t)(m * K)), b[N * K];
            float *sa = malloc(sizeof(float) * (size_t)(m * KB)), sb[KB] = {c->sb, c->sb};
            for (int64_t i = 0; i < m * K; i++) a[i] = (i % K) < 128 ? c->a0 : c->a1;
            if (c->a1 == 0) /* one product per element: a single nonzero code in block 0 */
                for (int64_t i = 0; i < m * K; i++) a[i] = (i % K) == 3 ? c->a0 : 0;
            for (int i = 0; i < N * K; i++) b[i] = c->b;
            for (int64_t i = 0; i < m * KB; i++) sa[i] = c->sa;
            for (int di = 0; di < 3; di++) {
                size_t es = bfp8_dtype_size(dts[di]);
                unsigned char *y_ref = malloc((size_t)(m * N) * es), *y = malloc((size_t)(m * N) * es);
                memset(y_ref, 0xA5, (size_t)(m * N) * es);
                bfp8_gemm_args g = {.m = m, .n = N, .k = K, .a = a, .b = b, .y = y_ref, .y_dtype = dts[di],
                                    .device = BFP8_DEVICE_CPU};
                CHECK_OK(bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, m, KB, sa));
                CHECK_OK(bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, KB, sb));
                CHECK_OK(bfp8_backend_ref.gemm(&bfp8_backend_ref, &g));
                /* ref's answer is the exact one rounded once: check it against an independent value. */
                double want = ci < 2 ? 0.0 : ci == 2 ? 0x1p119 : INFINITY;
                float got_ref = dts[di] == BFP8_DTYPE_F32 ? ((float *)y_ref)[0]
                                : dts[di] == BFP8_DTYPE_BF16 ? bfp8_bf16_to_f32(((uint16_t *)y_ref)[0])
                                                             : bfp8_f16_to_f32(((uint16_t *)y_ref)[0]);
                if (dts[di] == BFP8_DTYPE_F16 && ci == 2) want = INFINITY; /* beyond fp16 */
                CHECK((double)got_ref == want, "%s %s: ref gives %g, want %g", c->what, bfp8_dtype_name(dts[di]),
                      (double)got_ref, want);
                const char *isas[] = {"portable", "avx2"};
                for (int ii = 0; ii < 2; ii++) {
                    if (bfp8_cpu_force_isa(isas[ii]) != BFP8_OK) continue;
                    for (int threads = 1; threads <= 2; threads++) {
                        CHECK_OK(bfp8_set_num_threads(threads));
                        memset(y, 0xFF, (size_t)(m * N) * es);
                        g.y = y;
                        CHECK_OK(bfp8_backend_cpu.gemm(&bfp8_backend_cpu, &g));
                        int diff = 0;
                        for (int64_t i = 0; i < m * N; i++) diff += memcmp(y + i * es, y_ref + i * es, es) != 0;
                        CHECK(diff == 0, "%s M=%lld %s %s threads %d: %d outputs differ from ref", c->what,
                              (long long)m, bfp8_dtype_name(dts[di]), isas[ii], threads, diff);
                    }
                }
                bfp8_cpu_force_isa("auto");
                bfp8_set_num_threads(0);
                free(y_ref), free(y);
            }
            free(a), free(sa);
        }
    }
}

/* ---- enums and sizes checked before use ---------------------------------------------------------------------- */
static bfp8_status spy_gemm(const bfp8_backend *self, const bfp8_gemm_args *a) { return BFP8_OK; }

#define ALL_FLOATS (BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16))
#define ALL_LAYOUTS ((1u << BFP8_LAYOUT_COUNT) - 1)
static const bfp8_backend spy_any = {
    .name = "any",
    .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = ALL_FLOATS, .scale_formats = 3, .a_layouts = ALL_LAYOUTS,
             .b_layouts = ALL_LAYOUTS, .bias_dtypes = ALL_FLOATS, .priority = 1},
    .gemm = spy_gemm,
};
static const bfp8_backend spy_bf16 = {
    .name = "bf16only",
    .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = BFP8_BIT(BFP8_DTYPE_BF16), .scale_formats = 3,
             .a_layouts = ALL_LAYOUTS, .b_layouts = ALL_LAYOUTS, .bias_dtypes = ALL_FLOATS, .priority = 5},
    .gemm = spy_gemm,
};

static bfp8_problem good_problem(void) {
    return (bfp8_problem){.device = BFP8_DEVICE_CPU, .m = 4, .n = 256, .k = 512, .out_dtype = BFP8_DTYPE_BF16,
                          .scale_format = BFP8_SCALE_FP32, .a_layouts = 1, .b_layouts = 1};
}

static void expect_invalid(bfp8_problem p, const char *needle, const char *what) {
    char why[BFP8_REASON_MAX];
    CHECK(!bfp8_backend_check(&spy_any, &p, why, sizeof why) && contains(why, needle), "%s: check says '%s'", what,
          why);
    bfp8_decision dec;
    const bfp8_backend *list[] = {&spy_any};
    CHECK_STATUS(bfp8_select(list, 1, &p, BFP8_POLICY_AUTO, NULL, &dec), BFP8_ERR_INVALID_ARGUMENT);
}

static void test_enums_and_sizes(void) {
    char why[BFP8_REASON_MAX];
    bfp8_problem p = good_problem();
    CHECK(bfp8_backend_check(&spy_any, &p, why, sizeof why), "good problem refused: %s", why);
    /* out_dtype 32 used to shift by 32 (undefined; read as f32 on x86). */
    p.out_dtype = (bfp8_dtype)32;
    expect_invalid(p, "output dtype 32", "out_dtype 32");
    p = good_problem(), p.out_dtype = (bfp8_dtype)-1;
    expect_invalid(p, "output dtype -1", "out_dtype -1");
    p = good_problem(), p.out_dtype = BFP8_DTYPE_E4M3;
    expect_invalid(p, "output dtype", "out_dtype e4m3");
    p = good_problem(), p.m = -1;
    expect_invalid(p, "negative", "m = -1");
    p = good_problem(), p.k = INT64_MAX;
    expect_invalid(p, "too large", "k = INT64_MAX");
    p = good_problem(), p.device = (bfp8_device)9;
    expect_invalid(p, "unknown device 9", "device 9");
    p = good_problem(), p.scale_format = (bfp8_scale_format)40;
    expect_invalid(p, "scale format 40", "scale format 40");
    p = good_problem(), p.has_bias = true, p.bias_dtype = (bfp8_dtype)33;
    expect_invalid(p, "bias dtype 33", "bias dtype 33");
    p = good_problem(), p.a_layouts = 1u << 20;
    expect_invalid(p, "layout", "layout bit 20");
    p = good_problem(), p.arch = -5;
    expect_invalid(p, "arch", "arch -5");

    /* Capabilities that cannot mean anything are refused at registration. */
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create(&d));
    bfp8_backend bad = spy_any;
    bad.name = "bad";
    bad.caps.device = (bfp8_device)9;
    CHECK_STATUS(bfp8_dispatcher_add(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(contains(bfp8_last_error(), "unknown device 9"), "'%s'", bfp8_last_error());
    bad = spy_any, bad.name = "bad", bad.caps.out_dtypes = 1u << 31;
    CHECK_STATUS(bfp8_dispatcher_add(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
    bad = spy_any, bad.name = "bad", bad.caps.min_k = -1;
    CHECK_STATUS(bfp8_dispatcher_add(d, &bad), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(bfp8_dispatcher_count(d) == 0, "a bad backend was registered");
    /* A backend with bad caps handed to bfp8_select directly is declined, never matched. */
    bad = spy_any, bad.caps.device = (bfp8_device)9;
    p = good_problem();
    CHECK(!bfp8_backend_check(&bad, &p, why, sizeof why) && contains(why, "capabilities"), "bad caps: '%s'", why);
    bfp8_dispatcher_free(d);

    /* The size arithmetic cannot overflow. */
    CHECK(bfp8_ceil_div(INT64_MAX, 128) == (INT64_MAX >> 7) + 1, "ceil_div(INT64_MAX, 128)");
    CHECK(bfp8_ceil_div(INT64_MAX, 1) == INT64_MAX && bfp8_ceil_div(0, 128) == 0 && bfp8_ceil_div(129, 128) == 2,
          "ceil_div");
    CHECK(bfp8_round_up(INT64_MAX, 4) == -1 && bfp8_round_up(5, 4) == 8 && bfp8_round_up(0, 4) == 0, "round_up");
    /* k = INT64_MAX with empty M and N reached bfp8_ceil_div's overflow through bfp8_gemm. */
    bfp8_gemm_args g = {.m = 0, .n = 0, .k = INT64_MAX, .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
    g.a_scales = (bfp8_scales){.rows = 0, .kblocks = (INT64_MAX >> 7) + 1};
    g.b_scales = g.a_scales;
    CHECK_STATUS(bfp8_gemm(NULL, &g), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(contains(bfp8_last_error(), "too large"), "'%s'", bfp8_last_error());
    /* Negative sizes in the quantizers, linear problems, weights. */
    bfp8_weight *w = NULL;
    CHECK_STATUS(bfp8_weight_quantize(NULL, BFP8_DTYPE_F32, 0, INT64_MAX, BFP8_SCALE_FP32, &w, NULL),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK(w == NULL, "weight made");
}

/* ---- NULL outputs refused ------------------------------------------------------------------------------------ */
static void test_null_outputs(void) {
    CHECK_STATUS(bfp8_dispatcher_create_default(NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dispatcher_create(NULL), BFP8_ERR_INVALID_ARGUMENT);
    bfp8_dispatcher *d = strict("ref");
    CHECK_STATUS(bfp8_dispatcher_nonfinite(d, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dispatcher_nonfinite(NULL, NULL), BFP8_ERR_INVALID_ARGUMENT);
    bfp8_problem p = good_problem();
    CHECK_STATUS(bfp8_dispatcher_select(d, &p, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_select(NULL, 0, &p, BFP8_POLICY_AUTO, NULL, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dispatcher_fallback_at(d, 0, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_problem_from_gemm(NULL, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_weight_info_get(NULL, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_weight_create(NULL, 0, 0, NULL, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dtype_parse("f32", NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_scales_init(NULL, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, NULL), BFP8_ERR_INVALID_ARGUMENT);
    bfp8_dispatcher_free(d);
}

/* ---- statistics: a reset clears every count ------------------------------------------------------------------ */
static bfp8_status spy_call(bfp8_dispatcher *d, bfp8_dtype out) {
    enum { M = 2, N = 128, K = 256 };
    static uint8_t a[M * K], b[N * K];
    static float sa[M * 2] = {1, 1, 1, 1}, sb[2] = {1, 1}, y[M * N];
    bfp8_gemm_args g = {.m = M, .n = N, .k = K, .a = a, .b = b, .y = y, .y_dtype = out, .device = BFP8_DEVICE_CPU};
    bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, M, 2, sa);
    bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 2, sb);
    return bfp8_gemm(d, &g);
}

static void test_reset_clears_all(void) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create(&d));
    CHECK_OK(bfp8_dispatcher_add(d, &spy_bf16));
    CHECK_OK(bfp8_dispatcher_add(d, &spy_any));
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_PREFER, "bf16only"));
    for (int i = 0; i < 3; i++) CHECK_OK(spy_call(d, BFP8_DTYPE_F16)); /* 3 fallbacks */
    bfp8_fallback_stat f;
    CHECK_OK(bfp8_dispatcher_fallback_at(d, 0, &f));
    CHECK(f.count == 3, "3 fallbacks counted %llu", (unsigned long long)f.count);
    bfp8_dispatcher_reset_stats(d);
    CHECK(bfp8_dispatcher_fallback_count(d) == 0 && bfp8_dispatcher_calls(d, "any") == 0, "reset");
    CHECK_OK(spy_call(d, BFP8_DTYPE_F16));
    CHECK(bfp8_dispatcher_fallback_count(d) == 1, "one fallback entry");
    CHECK_OK(bfp8_dispatcher_fallback_at(d, 0, &f));
    CHECK(f.count == 1, "after a reset 1 fallback counts %llu", (unsigned long long)f.count);
    FILE *tmp = tmpfile();
    bfp8_dispatcher_print_stats(d, tmp);
    char buf[2048] = {0};
    rewind(tmp);
    size_t len = fread(buf, 1, sizeof buf - 1, tmp);
    buf[len] = '\0';
    fclose(tmp);
    CHECK(contains(buf, "bf16only -> any x1:"), "print_stats after reset:\n%s", buf);
    bfp8_dispatcher_free(d);
}

/* ---- error messages that quote an earlier message ------------------------------------------------------------- */
static void test_messages(void) {
    setenv("BFP8_BACKEND", "foo", 1);
    bfp8_dispatcher *d = (bfp8_dispatcher *)&d;
    CHECK_STATUS(bfp8_dispatcher_create_default(&d), BFP8_ERR_NOT_FOUND);
    unsetenv("BFP8_BACKEND");
    CHECK(d == NULL, "out not cleared");
    const char *msg = bfp8_last_error();
    const char *want = "BFP8_BACKEND: no backend named 'foo' (known: cpu, ref";
    CHECK(strncmp(msg, want, strlen(want)) == 0 &&
              !contains(msg + 1, "BFP8_BACKEND"),
          "BFP8_BACKEND=foo gives '%s'", msg);
    /* The general form: a message built from the current one. */
    bfp8_fail(BFP8_ERR_IO, "inner %d", 7);
    bfp8_fail(BFP8_ERR_IO, "outer: %s: %s", bfp8_last_error(), bfp8_last_error());
    CHECK(strcmp(bfp8_last_error(), "outer: inner 7: inner 7") == 0, "'%s'", bfp8_last_error());
}

/* ---- aliasing that corrupted data is refused before anything is written -------------------------------------- */
static bool untouched(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return false;
    return true;
}

static void test_aliasing_quant(void) {
    enum { M = 4, K = 300, KB = 3 };
    /* One arena: x as f32, q and the scales placed inside or beside it. */
    size_t xbytes = sizeof(float) * M * K, arena_bytes = xbytes + M * K + 64 * M * KB;
    unsigned char *arena = malloc(arena_bytes);
    float *x = (float *)arena;
    uint8_t *q_free = arena + xbytes;
    for (int i = 0; i < M * K; i++) x[i] = test_randn(1.0f);
    unsigned char *saved = malloc(arena_bytes);
    memcpy(saved, arena, arena_bytes);
    bfp8_scales s;
    const bfp8_scale_layout layouts[] = {BFP8_LAYOUT_ROW_MAJOR, BFP8_LAYOUT_MN_MAJOR_ALIGNED};
    for (int li = 0; li < 2; li++) {
        /* q overlapping the scales (the case): the scales start inside q. */
        CHECK_OK(bfp8_scales_init(&s, BFP8_SCALE_FP32, layouts[li], M, KB, q_free + M * K - 8));
        CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, M, K, q_free, &s, NULL), BFP8_ERR_INVALID_ARGUMENT);
        CHECK(contains(bfp8_last_error(), "q overlaps the scales"), "'%s'", bfp8_last_error());
        CHECK(memcmp(arena, saved, arena_bytes) == 0, "refused call wrote");
        /* q over x, in place. */
        CHECK_OK(bfp8_scales_init(&s, BFP8_SCALE_FP32, layouts[li], M, KB, q_free + M * K + 16));
        CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, M, K, (uint8_t *)x, &s, NULL), BFP8_ERR_INVALID_ARGUMENT);
        bfp8_scales ws1;
        CHECK_OK(bfp8_scales_init(&ws1, BFP8_SCALE_FP32, layouts[li], 1, KB, q_free + M * K + 16));
        CHECK_STATUS(bfp8_quantize_weight(x, BFP8_DTYPE_F32, M, K, (uint8_t *)x + 17, &ws1, NULL),
                     BFP8_ERR_INVALID_ARGUMENT);
        CHECK(contains(bfp8_last_error(), "q overlaps the input"), "'%s'", bfp8_last_error());
        /* the scales over x. */
        CHECK_OK(bfp8_scales_init(&s, BFP8_SCALE_FP32, layouts[li], M, KB, x + M * K - 2));
        CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, M, K, q_free, &s, NULL), BFP8_ERR_INVALID_ARGUMENT);
        CHECK(memcmp(arena, saved, arena_bytes) == 0, "refused call wrote");
    }
    /* Separate buffers still work, and the weight quantizer too. */
    uint8_t *q = malloc(M * K);
    float *scales = malloc(sizeof(float) * M * KB);
    CHECK_OK(bfp8_scales_init(&s, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, M, KB, scales));
    CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, M, K, q, &s, NULL));
    /* dequantize in place (out over q) and out over the scales. */
    float *out = malloc(sizeof(float) * M * K);
    CHECK_OK(bfp8_dequantize(q, M, K, &s, 1, out));
    unsigned char *qa = malloc(sizeof(float) * M * K);
    memcpy(qa, q, M * K);
    memset(qa + M * K, 0x5A, sizeof(float) * M * K - M * K);
    CHECK_STATUS(bfp8_dequantize(qa, M, K, &s, 1, (float *)qa), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(memcmp(qa, q, M * K) == 0 && untouched(qa + M * K, sizeof(float) * M * K - M * K, 0x5A), "wrote");
    float *big = malloc(sizeof(float) * (M * K + M * KB));
    bfp8_scales s_in_out;
    CHECK_OK(bfp8_scales_init(&s_in_out, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, M, KB, big + M * K - 3));
    memcpy(big + M * K - 3, scales, sizeof(float) * M * KB);
    CHECK_STATUS(bfp8_dequantize(q, M, K, &s_in_out, 1, big), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(contains(bfp8_last_error(), "out overlaps the scales"), "'%s'", bfp8_last_error());
    free(big);
    /* requantize: the two outputs overlapping each other. */
    enum { N = 130, NB = 2 };
    uint8_t *wq = malloc(N * K);
    float ws[NB * KB];
    for (int i = 0; i < N * K; i++) wq[i] = rand_code();
    for (int i = 0; i < NB * KB; i++) ws[i] = 0.01f;
    bfp8_scales wsc, osc;
    CHECK_OK(bfp8_scales_init(&wsc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, NB, KB, ws));
    uint8_t *qo = malloc(N * K + 64);
    CHECK_OK(bfp8_scales_init(&osc, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, NB, KB, qo + N * K - 4));
    CHECK_STATUS(bfp8_requantize_weight_ue8m0(wq, N, K, &wsc, qo, &osc), BFP8_ERR_INVALID_ARGUMENT);
    free(wq), free(qo), free(qa), free(out), free(q), free(scales), free(saved), free(arena);
}

/* Where a test places y, and the overlap the refusal must name. */
typedef struct y_place {
    const char *what;
    void *y;
} y_place;

static bfp8_status run_gemm(bfp8_dispatcher *d, void *args) { return bfp8_gemm(d, args); }
static bfp8_status run_grouped_gemm(bfp8_dispatcher *d, void *args) { return bfp8_grouped_gemm(d, args); }

/* y (*y_slot of args) placed over each operand in turn: the call is refused, names the overlap, and writes none of
 * the arena's first `bytes` (saved holds them as they were). */
static void check_y_refused(bfp8_status (*run)(bfp8_dispatcher *, void *), bfp8_dispatcher *d, void *args,
                            void **y_slot, const y_place *places, size_t count, const unsigned char *arena,
                            const unsigned char *saved, size_t bytes) {
    for (size_t i = 0; i < count; i++) {
        *y_slot = places[i].y;
        CHECK_STATUS(run(d, args), BFP8_ERR_INVALID_ARGUMENT);
        CHECK(contains(bfp8_last_error(), places[i].what), "want '%s': '%s'", places[i].what, bfp8_last_error());
        CHECK(memcmp(arena, saved, bytes) == 0, "%s: the refused call wrote", places[i].what);
    }
}

static void test_aliasing_gemm_linear(void) {
    enum { M = 3, N = 130, K = 260, NB = 2, KB = 3 };
    /* Every operand lives in one arena so that y can be placed over each of them. */
    size_t a_off = 0, b_off = a_off + M * K, sa_off = (b_off + N * K + 15) / 16 * 16, sb_off = sa_off + 4 * M * KB,
           bias_off = sb_off + 4 * NB * KB, end = bias_off + 4 * N;
    unsigned char *arena = malloc(end + 1024); /* room for a y placed over the last operands */
    for (size_t i = 0; i < M * K; i++) arena[a_off + i] = rand_code();
    for (size_t i = 0; i < N * K; i++) arena[b_off + i] = rand_code();
    float *sa = (float *)(arena + sa_off), *sb = (float *)(arena + sb_off), *bias = (float *)(arena + bias_off);
    for (int i = 0; i < M * KB; i++) sa[i] = 0.01f;
    for (int i = 0; i < NB * KB; i++) sb[i] = 0.002f;
    for (int i = 0; i < N; i++) bias[i] = test_randn(1.0f);
    unsigned char *saved = malloc(end);
    memcpy(saved, arena, end);
    bfp8_gemm_args g = {.m = M, .n = N, .k = K, .a = arena + a_off, .b = arena + b_off, .bias = bias,
                        .bias_dtype = BFP8_DTYPE_F32, .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
    CHECK_OK(bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, M, KB, sa));
    CHECK_OK(bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, NB, KB, sb));
    bfp8_dispatcher *d = strict("cpu");
    const y_place places[] = {
        {"y overlaps A", arena + a_off + 10},
        {"y overlaps B", arena + b_off + 1000},
        {"y overlaps the A scales", arena + sa_off + 4},
        {"y overlaps the B scales", arena + sb_off},
        {"y overlaps the bias", bias},
        {"y overlaps the bias", arena + bias_off + 6},
    };
    check_y_refused(run_gemm, d, &g, &g.y, places, sizeof places / sizeof places[0], arena, saved, end);
    uint16_t *y = malloc(sizeof(uint16_t) * M * N);
    g.y = y;
    CHECK_OK(bfp8_gemm(d, &g));

    /* linear: y == bias refused; y over x allowed (x is quantized before y is written) and exact. */
    bfp8_weight *w = NULL;
    CHECK_OK(bfp8_weight_create(arena + b_off, N, K, &g.b_scales, &w));
    float *x = malloc(sizeof(float) * M * K); /* y [M, N] f32 fits over x [M, K] */
    for (int i = 0; i < M * K; i++) x[i] = test_randn(1.0f);
    float *y_sep = malloc(sizeof(float) * M * N), *biasc = malloc(sizeof(float) * N * M);
    memcpy(biasc, bias, sizeof(float) * N);
    bfp8_linear_args la = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = M, .bias = biasc, .bias_dtype = BFP8_DTYPE_F32,
                           .y = y_sep, .y_dtype = BFP8_DTYPE_F32, .device = BFP8_DEVICE_CPU};
    CHECK_OK(bfp8_linear(d, w, &la));
    la.y = biasc;
    CHECK_STATUS(bfp8_linear(d, w, &la), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(contains(bfp8_last_error(), "bias") && memcmp(biasc, bias, sizeof(float) * N) == 0, "y == bias: '%s'",
          bfp8_last_error());
    la.y = x;
    CHECK_OK(bfp8_linear(d, w, &la));
    CHECK(memcmp(x, y_sep, sizeof(float) * M * N) == 0, "linear with y over x differs from a separate y");
    bfp8_weight_free(w);
    free(x), free(y_sep), free(biasc), free(y), free(saved), free(arena);
    bfp8_dispatcher_free(d);
}

/* ---- grouped GEMM: y may overlap no operand, as in bfp8_gemm ----------------------------------------------------- */
static void test_aliasing_grouped(void) {
    enum { G = 2, M = 3, N = 130, K = 260, NB = 2, KB = 3 };
    /* Every operand lives in one arena so that y (f32 [M, N], 1560 bytes) can be placed over each of them. */
    size_t a_off = 0, b_off = a_off + M * K, sa_off = (b_off + G * N * K + 15) / 16 * 16,
           sb_off = sa_off + 4 * M * KB, idx_off = sb_off + 4 * G * NB * KB, bias_off = idx_off + 4 * M,
           end = bias_off + 4 * G * N;
    unsigned char *arena = malloc(end + 4 * M * N); /* room for a y placed over the last operands */
    for (size_t i = 0; i < M * K; i++) arena[a_off + i] = rand_code();
    for (size_t i = 0; i < G * N * K; i++) arena[b_off + i] = rand_code();
    float *sa = (float *)(arena + sa_off), *sb = (float *)(arena + sb_off), *bias = (float *)(arena + bias_off);
    int32_t *idx = (int32_t *)(arena + idx_off);
    for (int i = 0; i < M * KB; i++) sa[i] = 0.01f;
    for (int i = 0; i < G * NB * KB; i++) sb[i] = 0.002f;
    for (int i = 0; i < G * N; i++) bias[i] = test_randn(1.0f);
    idx[0] = 1, idx[1] = -1, idx[2] = 0;
    unsigned char *saved = malloc(end);
    memcpy(saved, arena, end);
    bfp8_grouped_gemm_args g = {.layout = BFP8_GROUPED_CONTIGUOUS, .groups = G, .m = M, .n = N, .k = K,
                                .a = arena + a_off, .m_indices = idx, .b = arena + b_off, .y_dtype = BFP8_DTYPE_F32,
                                .device = BFP8_DEVICE_CPU};
    CHECK_OK(bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, M, KB, sa));
    CHECK_OK(bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, NB, KB, sb));
    bfp8_dispatcher *d = strict("cpu");
    const y_place places[] = {
        {"y overlaps A", arena + a_off + 10},
        {"y overlaps B", arena + b_off + G * N * K - 8},
        {"y overlaps the A scales", arena + sa_off + 4},
        {"y overlaps the B scales", arena + sb_off + 4 * NB * KB}, /* group 1's matrix */
        {"y overlaps m_indices", arena + idx_off + 4},
    };
    check_y_refused(run_grouped_gemm, d, &g, &g.y, places, sizeof places / sizeof places[0], arena, saved, end);
    /* The bias ([G, N]) and masked_m ([G]) too. */
    g.bias = bias, g.bias_dtype = BFP8_DTYPE_F32, g.y = arena + bias_off + 4 * N;
    CHECK_STATUS(bfp8_grouped_gemm(d, &g), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(contains(bfp8_last_error(), "y overlaps the bias"), "bias: '%s'", bfp8_last_error());
    g.bias = NULL;
    float *y = malloc(sizeof(float) * G * M * N);
    g.y = y;
    CHECK_OK(bfp8_grouped_gemm(d, &g));
    bfp8_grouped_gemm_args gm = g;
    int32_t counts[G] = {1, 1};
    gm.layout = BFP8_GROUPED_MASKED, gm.m_indices = NULL, gm.masked_m = counts, gm.m = 1;
    gm.a_scales.rows = 1;
    gm.y = counts;
    CHECK_STATUS(bfp8_grouped_gemm(d, &gm), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(contains(bfp8_last_error(), "y overlaps masked_m"), "masked_m: '%s'", bfp8_last_error());
    free(y), free(saved), free(arena);
    bfp8_dispatcher_free(d);
}

int main(void) {
    test_seed();
    test_ue8m0_validation();
    test_nonfinite_linear();
    test_nonfinite_gemm();
    test_nonfinite_cuda();
    test_promotion_overflow();
    test_enums_and_sizes();
    test_null_outputs();
    test_reset_clears_all();
    test_messages();
    test_aliasing_quant();
    test_aliasing_gemm_linear();
    test_aliasing_grouped();
    return TEST_SUMMARY("robustness");
}
