/* Linear layer and prepared weights: against an independent double computation from the quantized operands, the
 * unquantized product (calc_diff), the reference backend, DeepSeek-format loading, and bad arguments. */
#include "check.h"

#include <unistd.h>

/* The relative Frobenius error and calc_diff of fp32 outputs against double answers. */
static double rel_frobenius(const float *y, const double *ref, int64_t n) {
    test_frobenius f = {0};
    for (int64_t i = 0; i < n; i++) test_frobenius_add(&f, y[i], ref[i]);
    return test_frobenius_value(&f);
}

static double calc_diff(const float *y, const double *ref, int64_t n) {
    test_calc_diff c = {0};
    for (int64_t i = 0; i < n; i++) test_calc_diff_add(&c, y[i], ref[i]);
    return test_calc_diff_value(&c);
}

/* One linear call checked three ways. */
static void check_linear_case(bfp8_dispatcher *d, const char *label, int64_t m, int64_t n, int64_t k,
                              bfp8_dtype x_dtype, bfp8_dtype y_dtype, bfp8_scale_format format, bool bias) {
    size_t xs = bfp8_dtype_size(x_dtype), ys = bfp8_dtype_size(y_dtype);
    float *w = malloc(sizeof(float) * (size_t)(n * k + 1));
    float *xf = malloc(sizeof(float) * (size_t)(m * k + 1));
    void *x = malloc(xs * (size_t)(m * k + 1));
    float *bias_f = malloc(sizeof(float) * (size_t)(n + 1));
    uint16_t *bias_bf16 = malloc(sizeof(uint16_t) * (size_t)(n + 1));
    void *y = malloc(ys * (size_t)(m * n + 1));
    double *ref_q = malloc(sizeof(double) * (size_t)(m * n + 1));
    double *ref_exact = malloc(sizeof(double) * (size_t)(m * n + 1));
    float *yf = malloc(sizeof(float) * (size_t)(m * n + 1));

    /* Weights with a different magnitude per 128x128 block (scale indexing bugs show); Gaussian activations. */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) w[i * k + j] = test_randn(0.02f * (float)(1 + (i / 128 + j / 128) % 3));
    for (int64_t i = 0; i < m * k; i++) xf[i] = test_randn(1.0f);
    for (int64_t i = 0; i < m * k; i++) {
        test_store_f32(x, x_dtype, i, xf[i]);
        xf[i] = test_load_f32(x, x_dtype, i); /* the value the stored dtype holds */
    }
    for (int64_t i = 0; i < n; i++) bias_bf16[i] = bfp8_bf16_from_f32(test_randn(0.5f)), bias_f[i] = bfp8_bf16_to_f32(bias_bf16[i]);

    bfp8_weight *wt = NULL;
    CHECK_OK(bfp8_weight_quantize(w, BFP8_DTYPE_F32, n, k, format, &wt, NULL));
    if (!wt) goto out;
    CHECK_OK(bfp8_weight_prepare(wt, d, NULL));

    /* Independent computation from the quantized operands: the weight's own view, activations quantized with the
     * library's quantizer (tested bit-exactly elsewhere), the GEMM in double here. */
    int64_t kb = (k + 127) / 128;
    uint8_t *qa = malloc((size_t)(m * k + 1));
    float *sa = malloc(sizeof(float) * (size_t)(m * kb + 1));
    bfp8_scales sa_desc;
    CHECK_OK(bfp8_scales_init(&sa_desc, format, BFP8_LAYOUT_ROW_MAJOR, m, kb, sa));
    CHECK_OK(bfp8_quantize_act(x, x_dtype, m, k, qa, &sa_desc, NULL));
    const uint8_t *qb;
    bfp8_scales sb;
    CHECK_OK(bfp8_weight_view(wt, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &qb, &sb));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = bias ? bias_f[j] : 0.0, exact = acc;
            for (int64_t b = 0; b < kb; b++) {
                double part = 0;
                for (int64_t t = b * 128; t < k && t < (b + 1) * 128; t++)
                    part += (double)bfp8_e4m3_to_f32(qa[i * k + t]) * bfp8_e4m3_to_f32(qb[j * k + t]);
                acc += part * sa[i * kb + b] * ((const float *)sb.data)[(j / 128) * kb + b];
            }
            for (int64_t t = 0; t < k; t++) exact += (double)xf[i * k + t] * w[j * k + t];
            ref_q[i * n + j] = acc;
            ref_exact[i * n + j] = exact;
        }

    memset(y, 0xFF, ys * (size_t)(m * n)); /* NaN in every float dtype */
    bfp8_linear_args args = {.x = x, .x_dtype = x_dtype, .m = m, .bias = bias ? bias_bf16 : NULL,
                             .bias_dtype = BFP8_DTYPE_BF16, .y = y, .y_dtype = y_dtype, .device = BFP8_DEVICE_CPU};
    CHECK_OK(bfp8_linear(d, wt, &args));
    int64_t unwritten = 0;
    for (int64_t i = 0; i < m * n; i++) {
        yf[i] = test_load_f32(y, y_dtype, i);
        unwritten += isnan(yf[i]);
    }
    CHECK(unwritten == 0, "%s: %lld outputs unwritten (still NaN)", label, (long long)unwritten);
    if (m * n > 0) {
        double err = rel_frobenius(yf, ref_q, m * n), diff = calc_diff(yf, ref_exact, m * n);
        const double tol = test_tolerance(y_dtype, BFP8_DEVICE_CPU);
        CHECK(err <= tol, "%s: rel error %.3g > %.3g", label, err, tol);
        /* calc_diff averages FP8 noise (about 7e-4) against a 1e-3 limit: a stable statistic only over many
         * outputs of full 128-deep blocks. */
        if (k >= 256 && m * n >= 1024) CHECK(diff < 1e-3, "%s: calc_diff %.3g vs the unquantized product", label, diff);
    }
    free(qa), free(sa);
out:
    bfp8_weight_free(wt);
    free(w), free(xf), free(x), free(bias_f), free(bias_bf16), free(y), free(ref_q), free(ref_exact), free(yf);
}

static bfp8_dispatcher *strict_dispatcher(const char *name) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, name));
    return d;
}

static void test_linear_backends(void) {
    const char *names[] = {"ref", "cpu"};
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32};
    for (int b = 0; b < 2; b++) {
        bfp8_dispatcher *d = strict_dispatcher(names[b]);
        if (!d) continue;
        char label[128];
        for (int o = 0; o < 3; o++) {
            snprintf(label, sizeof label, "%s out=%s ragged", names[b], bfp8_dtype_name(outs[o]));
            check_linear_case(d, label, 8, 200, 300, BFP8_DTYPE_BF16, outs[o], BFP8_SCALE_FP32, true);
        }
        snprintf(label, sizeof label, "%s ue8m0 f16-in", names[b]);
        check_linear_case(d, label, 6, 256, 384, BFP8_DTYPE_F16, BFP8_DTYPE_BF16, BFP8_SCALE_UE8M0, false);
        snprintf(label, sizeof label, "%s f32-in K<128", names[b]);
        check_linear_case(d, label, 2, 130, 100, BFP8_DTYPE_F32, BFP8_DTYPE_F32, BFP8_SCALE_FP32, true);
        snprintf(label, sizeof label, "%s M=0", names[b]);
        check_linear_case(d, label, 0, 130, 256, BFP8_DTYPE_BF16, BFP8_DTYPE_BF16, BFP8_SCALE_FP32, true);
        CHECK(bfp8_dispatcher_calls(d, names[b]) == 6, "%s: %llu calls recorded", names[b],
              (unsigned long long)bfp8_dispatcher_calls(d, names[b]));
        bfp8_dispatcher_free(d);
    }
    /* The default dispatcher picks `cpu` on the host (auto). */
    check_linear_case(NULL, "default", 4, 2112 / 8, 256, BFP8_DTYPE_BF16, BFP8_DTYPE_BF16, BFP8_SCALE_FP32, false);
}

/* Non-finite activations: counted, encoded as NaN, visible in the output row; other rows unaffected. */
static void test_nonfinite(void) {
    enum { M = 3, N = 8, K = 256 };
    bfp8_dispatcher *d = strict_dispatcher("ref");
    float w[N * K], x[M * K], y[M * N];
    for (int i = 0; i < N * K; i++) w[i] = test_randn(0.1f);
    for (int i = 0; i < M * K; i++) x[i] = test_randn(1.0f);
    x[1 * K + 5] = NAN;
    x[1 * K + 200] = INFINITY;
    bfp8_weight *wt;
    CHECK_OK(bfp8_weight_quantize(w, BFP8_DTYPE_F32, N, K, BFP8_SCALE_FP32, &wt, NULL));
    bfp8_linear_args a = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = M, .y = y, .y_dtype = BFP8_DTYPE_F32,
                          .device = BFP8_DEVICE_CPU};
    /* On the CPU the activations are quantized on the host: no kernel for a GEMM to start behind (test_hopper
     * checks the CUDA call's problem, which has one). */
    bfp8_problem p;
    CHECK_OK(bfp8_problem_from_linear(wt, &a, &p));
    CHECK(!p.act_from_prior_kernel, "a CPU linear call claims its activations come from a prior kernel");
    CHECK_OK(bfp8_linear(d, wt, &a));
    CHECK(bfp8_dispatcher_nonfinite_inputs(d) == 2, "nonfinite count %llu",
          (unsigned long long)bfp8_dispatcher_nonfinite_inputs(d));
    bool row1_nan = true, others_finite = true;
    for (int j = 0; j < N; j++) {
        row1_nan = row1_nan && isnan(y[N + j]);
        others_finite = others_finite && isfinite(y[j]) && isfinite(y[2 * N + j]);
    }
    CHECK(row1_nan && others_finite, "NaN must show in its row only");
    bfp8_weight_free(wt);
    bfp8_dispatcher_free(d);
}

/* Prepared weights: explicit layouts, views, and bad arguments. */
static void test_weight(void) {
    enum { N = 200, K = 300, NB = 2, KB = 3 };
    uint8_t q[N * K];
    float s_mn[NB * KB];
    for (int i = 0; i < N * K; i++) q[i] = (uint8_t)(test_rand_u64() % 0x7E);
    for (int i = 0; i < NB * KB; i++) s_mn[i] = 0.001f * (float)(i + 1);
    bfp8_scales s;
    CHECK_OK(bfp8_scales_init(&s, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR, NB, KB, s_mn));
    bfp8_weight *w = NULL;
    CHECK_OK(bfp8_weight_create(q, N, K, &s, &w));
    bfp8_weight_info info;
    CHECK_OK(bfp8_weight_info_get(w, &info));
    CHECK(info.n == N && info.k == K && info.scale_format == BFP8_SCALE_FP32 && info.device_layouts == 0 &&
              info.host_layouts == (BFP8_BIT(BFP8_LAYOUT_MN_MAJOR) | BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)),
          "weight info: layouts 0x%x", info.host_layouts);
    const uint8_t *vq;
    bfp8_scales vs;
    CHECK_OK(bfp8_weight_view(w, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &vq, &vs));
    CHECK(vq != q && memcmp(vq, q, sizeof q) == 0, "weight copies q");
    bool same = true;
    for (int r = 0; r < NB; r++)
        for (int c = 0; c < KB; c++) same = same && bfp8_scales_at(&vs, r, c) == s_mn[c * NB + r];
    CHECK(same, "row-major view matches the MN-major input");
    CHECK_STATUS(bfp8_weight_view(w, BFP8_DEVICE_CUDA, BFP8_LAYOUT_ROW_MAJOR, &vq, &vs), BFP8_ERR_NOT_FOUND);
    CHECK_STATUS(bfp8_weight_view(w, BFP8_DEVICE_CPU, BFP8_LAYOUT_PACKED_UE8M0, &vq, &vs), BFP8_ERR_NOT_FOUND);
    CHECK_STATUS(bfp8_weight_prepare(w, NULL, "no_such_backend"), BFP8_ERR_NOT_FOUND);

    /* Bad arguments: a clear status, never a crash. */
    float x[2 * K], y[2 * N];
    for (int i = 0; i < 2 * K; i++) x[i] = test_randn(1.0f);
    bfp8_linear_args a = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = 2, .y = y, .y_dtype = BFP8_DTYPE_F32};
    CHECK_STATUS(bfp8_linear(NULL, NULL, &a), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_linear(NULL, w, NULL), BFP8_ERR_INVALID_ARGUMENT);
    a.m = -1;
    CHECK_STATUS(bfp8_linear(NULL, w, &a), BFP8_ERR_INVALID_ARGUMENT);
    a.m = INT64_MAX / 2;
    CHECK_STATUS(bfp8_linear(NULL, w, &a), BFP8_ERR_INVALID_ARGUMENT);
    a.m = 2;
    a.x_dtype = BFP8_DTYPE_E4M3;
    CHECK_STATUS(bfp8_linear(NULL, w, &a), BFP8_ERR_INVALID_ARGUMENT);
    a.x_dtype = BFP8_DTYPE_F32;
    a.y_dtype = (bfp8_dtype)99;
    CHECK_STATUS(bfp8_linear(NULL, w, &a), BFP8_ERR_INVALID_ARGUMENT);
    a.y_dtype = BFP8_DTYPE_F32;
    a.x = NULL;
    CHECK_STATUS(bfp8_linear(NULL, w, &a), BFP8_ERR_INVALID_ARGUMENT);
    a.x = x;
    a.device = BFP8_DEVICE_CUDA; /* host pointers claimed as device: no CUDA backend here, or no prepared weight */
    bfp8_status st = bfp8_linear(NULL, w, &a);
    CHECK(st == BFP8_ERR_UNSUPPORTED, "linear on cuda without a prepared device weight: %s", bfp8_status_name(st));

    bfp8_weight *w2 = NULL;
    CHECK_STATUS(bfp8_weight_create(q, N + 200, K, &s, &w2), BFP8_ERR_INVALID_ARGUMENT); /* scale rows mismatch */
    CHECK_STATUS(bfp8_weight_create(q, N, -1, &s, &w2), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_weight_create(NULL, N, K, &s, &w2), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_weight_create(q, N, K, &s, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(w2 == NULL, "no weight on failure");
    bfp8_weight_free(w);
    bfp8_weight_free(NULL);
}

/* DeepSeek naming through safetensors: NAME (F8_E4M3) + NAME_scale_inv (F32). */
static void test_weight_load(void) {
    enum { N = 130, K = 260, NB = 2, KB = 3 };
    uint8_t q[N * K];
    float s[NB * KB];
    for (int i = 0; i < N * K; i++) q[i] = (uint8_t)(test_rand_u64() % 0x7E);
    for (int i = 0; i < NB * KB; i++) s[i] = 1e-3f * (1.0f + test_rand_f32() * 0.5f);
    char path[] = "/tmp/bfp8_test_weight_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    bfp8_tensor t[2] = {
        {.name = "model.layers.0.mlp.down_proj.weight", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {N, K},
         .data = q, .nbytes = sizeof q},
        {.name = "model.layers.0.mlp.down_proj.weight_scale_inv", .dtype = BFP8_DTYPE_F32, .ndim = 2,
         .shape = {NB, KB}, .data = s, .nbytes = sizeof s},
    };
    CHECK_OK(bfp8_safetensors_write(path, t, 2));
    bfp8_safetensors *f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    bfp8_weight *w = NULL;
    if (f) CHECK_OK(bfp8_weight_load(f, "model.layers.0.mlp.down_proj.weight", &w));
    if (w) {
        const uint8_t *vq;
        bfp8_scales vs;
        CHECK_OK(bfp8_weight_view(w, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &vq, &vs));
        CHECK(memcmp(vq, q, sizeof q) == 0 && memcmp(vs.data, s, sizeof s) == 0, "loaded weight matches");
    }
    bfp8_weight_free(w);
    w = NULL;
    if (f) CHECK_STATUS(bfp8_weight_load(f, "missing", &w), BFP8_ERR_NOT_FOUND);
    if (f) CHECK_STATUS(bfp8_weight_load(f, "model.layers.0.mlp.down_proj.weight_scale_inv", &w), BFP8_ERR_NOT_FOUND);
    bfp8_safetensors_close(f);

    /* A scale tensor of the wrong shape is a format error naming both shapes. */
    t[1].shape[1] = 1;
    t[1].nbytes = sizeof(float) * NB;
    CHECK_OK(bfp8_safetensors_write(path, t, 2));
    f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    w = NULL;
    if (f) CHECK_STATUS(bfp8_weight_load(f, "model.layers.0.mlp.down_proj.weight", &w), BFP8_ERR_FORMAT);
    CHECK(w == NULL && strstr(bfp8_last_error(), "[2, 3]"), "message: %s", bfp8_last_error());
    bfp8_safetensors_close(f);
    remove(path);
}

static bool same_problem(const bfp8_problem *a, const bfp8_problem *b) {
    return a->device == b->device && a->arch == b->arch && a->m == b->m && a->n == b->n && a->k == b->k &&
           a->out_dtype == b->out_dtype && a->scale_format == b->scale_format && a->a_layouts == b->a_layouts &&
           a->b_layouts == b->b_layouts && a->has_bias == b->has_bias && a->bias_dtype == b->bias_dtype &&
           a->act_from_prior_kernel == b->act_from_prior_kernel && a->grouped == b->grouped &&
           a->groups == b->groups && a->expected_m == b->expected_m &&
           (a->card && b->card ? strcmp(a->card, b->card) == 0 : a->card == b->card);
}

/* The problem of a described layer (bfp8_problem_for_linear) is the problem a call with such a weight poses, on
 * either device; and what it refuses. */
static void test_problem_for_linear(void) {
    enum { N = 300, K = 520, M = 5 };
    float *w = malloc(sizeof(float) * N * K);
    for (int i = 0; i < N * K; i++) w[i] = test_randn(0.02f);
    /* Buffers of the right sizes; the problem never reads them. */
    uint16_t *bias = calloc(N, sizeof(uint16_t)), *x = calloc(M * K, sizeof(uint16_t)), *y = calloc(M * N, 2);
    for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT; f++) {
        bfp8_weight *wt = NULL;
        CHECK_OK(bfp8_weight_quantize(w, BFP8_DTYPE_F32, N, K, (bfp8_scale_format)f, &wt, NULL));
        if (!wt) continue;
        bfp8_weight_info wi;
        CHECK_OK(bfp8_weight_info_get(wt, &wi));
        for (int dev = 0; dev < BFP8_DEVICE_COUNT; dev++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const bfp8_linear_args a = {.x = x, .x_dtype = BFP8_DTYPE_BF16, .m = M, .bias = with_bias ? bias : NULL,
                                            .bias_dtype = BFP8_DTYPE_BF16, .y = y, .y_dtype = BFP8_DTYPE_F16,
                                            .device = (bfp8_device)dev};
                bfp8_problem from, described;
                CHECK_OK(bfp8_problem_from_linear(wt, &a, &from));
                CHECK_OK(bfp8_problem_for_linear(&wi, (bfp8_device)dev, M, BFP8_DTYPE_F16, with_bias,
                                                 BFP8_DTYPE_BF16, &described));
                CHECK(same_problem(&from, &described), "format %d device %d bias %d: problems differ", f, dev,
                      with_bias);
                /* Independently: what a linear call offers. */
                CHECK(described.a_layouts == bfp8_scale_layouts_for((bfp8_scale_format)f) &&
                          described.b_layouts == (dev == BFP8_DEVICE_CUDA ? wi.device_layouts : wi.host_layouts) &&
                          described.act_from_prior_kernel == (dev == BFP8_DEVICE_CUDA) && described.n == N &&
                          described.k == K && described.m == M &&
                          described.bias_dtype == (with_bias ? BFP8_DTYPE_BF16 : BFP8_DTYPE_F32),
                      "format %d device %d bias %d: fields", f, dev, with_bias);
            }
        bfp8_weight_free(wt);
    }
    free(w), free(bias), free(x), free(y);
    const bfp8_weight_info wi = {.n = N, .k = K, .scale_format = BFP8_SCALE_FP32,
                                 .host_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)};
    bfp8_problem p = {.m = 77};
    /* A bias dtype is ignored without a bias. */
    CHECK_OK(bfp8_problem_for_linear(&wi, BFP8_DEVICE_CPU, 0, BFP8_DTYPE_F32, false, BFP8_DTYPE_E4M3, &p));
    CHECK(p.m == 0 && !p.has_bias && p.bias_dtype == BFP8_DTYPE_F32 && p.arch == 0, "empty problem");
    p.m = 77;
    CHECK_STATUS(bfp8_problem_for_linear(NULL, BFP8_DEVICE_CPU, 1, BFP8_DTYPE_F32, false, 0, &p),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_problem_for_linear(&wi, BFP8_DEVICE_CPU, 1, BFP8_DTYPE_F32, false, 0, NULL),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_problem_for_linear(&wi, BFP8_DEVICE_COUNT, 1, BFP8_DTYPE_F32, false, 0, &p),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_problem_for_linear(&wi, BFP8_DEVICE_CPU, -1, BFP8_DTYPE_F32, false, 0, &p),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_problem_for_linear(&wi, BFP8_DEVICE_CPU, 1, BFP8_DTYPE_E4M3, false, 0, &p),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_problem_for_linear(&wi, BFP8_DEVICE_CPU, 1, BFP8_DTYPE_F32, true, BFP8_DTYPE_I32, &p),
                 BFP8_ERR_INVALID_ARGUMENT);
    bfp8_weight_info bad = wi;
    bad.scale_format = BFP8_SCALE_FORMAT_COUNT;
    CHECK_STATUS(bfp8_problem_for_linear(&bad, BFP8_DEVICE_CPU, 1, BFP8_DTYPE_F32, false, 0, &p),
                 BFP8_ERR_INVALID_ARGUMENT);
    bad = wi;
    bad.k = -1;
    CHECK_STATUS(bfp8_problem_for_linear(&bad, BFP8_DEVICE_CPU, 1, BFP8_DTYPE_F32, false, 0, &p),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK(p.m == 77, "a refused problem was written");
}

int main(void) {
    test_seed();
    test_problem_for_linear();
    test_linear_backends();
    test_nonfinite();
    test_weight();
    test_weight_load();
    return TEST_SUMMARY("linear");
}
