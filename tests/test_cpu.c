/* The optimized CPU backend `cpu`: against an independent double computation and the reference backend, on
 * ragged shapes, every output and bias dtype, both scale formats, both ISAs (AVX2 and portable, byte for byte),
 * both paths (small-M and large-M), 1 and 2 threads (byte for byte), NaN propagation, poisoned outputs, every
 * E4M3 code, its capabilities and the thread setting. */
#include "check.h"

#include "backends/cpu.h"

static const bfp8_dtype out_dtypes[] = {BFP8_DTYPE_F32, BFP8_DTYPE_BF16, BFP8_DTYPE_F16};

/* A quantized problem with its exact (double) answers. */
typedef struct problem {
    int64_t m, n, k, kb;
    bfp8_scale_format format;
    uint8_t *a, *b;
    float *sa, *sb;     /* row-major scales */
    float *bias_f;      /* bias values as fp32 (what the stored bias dtype holds) */
    void *bias;         /* stored bias or NULL */
    bfp8_dtype bias_dtype;
    double *exact_q;    /* from the quantized operands, in double */
    double *exact_raw;  /* from the unquantized operands */
    bool varied;        /* magnitudes vary by 2^8 across groups and blocks (stress for the scales) */
} problem;

static void problem_free(problem *p) {
    free(p->a), free(p->b), free(p->sa), free(p->sb), free(p->bias_f), free(p->bias), free(p->exact_q),
        free(p->exact_raw);
}

static void *xmalloc(size_t bytes) { return malloc(bytes ? bytes : 1); }

/* Natural problems draw normal values (like DeepGEMM's tests); varied ones change the magnitude by up to 2^8 per
 * activation group and weight block, so that a wrong scale index shows, at the price of a noisier calc_diff. */
static void problem_make_ex(problem *p, int64_t m, int64_t n, int64_t k, bfp8_scale_format format, int bias_kind,
                            bool varied) {
    memset(p, 0, sizeof *p);
    p->m = m, p->n = n, p->k = k, p->kb = (k + 127) / 128, p->format = format, p->varied = varied;
    int64_t nb = (n + 127) / 128;
    float *x = xmalloc(sizeof(float) * (size_t)(m * k)), *w = xmalloc(sizeof(float) * (size_t)(n * k));
    /* Magnitudes that vary per activation group and per weight block, so the scales matter. */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < k; j++)
            x[i * k + j] = test_randn(varied ? ldexpf(1.0f, (int)((i * 7 + j / 128 * 3) % 9) - 4) : 1.0f);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++)
            w[i * k + j] = test_randn(varied ? ldexpf(0.02f, (int)((i / 128 * 5 + j / 128) % 7) - 3) : 0.02f);
    p->a = xmalloc((size_t)(m * k)), p->b = xmalloc((size_t)(n * k));
    p->sa = xmalloc(sizeof(float) * (size_t)(m * p->kb)), p->sb = xmalloc(sizeof(float) * (size_t)(nb * p->kb));
    bfp8_scales sa, sb;
    CHECK_OK(bfp8_scales_init(&sa, format, BFP8_LAYOUT_ROW_MAJOR, m, p->kb, p->sa));
    CHECK_OK(bfp8_scales_init(&sb, format, BFP8_LAYOUT_ROW_MAJOR, nb, p->kb, p->sb));
    if (m * k > 0) CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, m, k, p->a, &sa, NULL));
    if (n * k > 0) CHECK_OK(bfp8_quantize_weight(w, BFP8_DTYPE_F32, n, k, p->b, &sb, NULL));
    p->bias_f = xmalloc(sizeof(float) * (size_t)n);
    p->bias_dtype = bias_kind == 1 ? BFP8_DTYPE_F32 : bias_kind == 2 ? BFP8_DTYPE_BF16 : BFP8_DTYPE_F16;
    if (bias_kind) {
        p->bias = xmalloc(4 * (size_t)n);
        for (int64_t j = 0; j < n; j++) {
            float v = test_randn(0.5f);
            if (p->bias_dtype == BFP8_DTYPE_F32) ((float *)p->bias)[j] = v;
            else if (p->bias_dtype == BFP8_DTYPE_BF16) ((uint16_t *)p->bias)[j] = bfp8_bf16_from_f32(v);
            else ((uint16_t *)p->bias)[j] = bfp8_f16_from_f32(v);
            p->bias_f[j] = test_load_f32(p->bias, p->bias_dtype, j);
        }
    } else {
        for (int64_t j = 0; j < n; j++) p->bias_f[j] = 0.0f;
    }
    p->exact_q = xmalloc(sizeof(double) * (size_t)(m * n));
    p->exact_raw = xmalloc(sizeof(double) * (size_t)(m * n));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double tq = 0, traw = 0;
            for (int64_t kb = 0; kb < p->kb; kb++) {
                double part = 0;
                for (int64_t kk = kb * 128; kk < k && kk < kb * 128 + 128; kk++) {
                    part += (double)bfp8_e4m3_to_f32(p->a[i * k + kk]) * bfp8_e4m3_to_f32(p->b[j * k + kk]);
                    traw += (double)x[i * k + kk] * w[j * k + kk];
                }
                tq += (double)p->sa[i * p->kb + kb] * p->sb[(j / 128) * p->kb + kb] * part;
            }
            p->exact_q[i * n + j] = tq + p->bias_f[j];
            p->exact_raw[i * n + j] = traw + p->bias_f[j];
        }
    free(x), free(w);
}

static void problem_make(problem *p, int64_t m, int64_t n, int64_t k, bfp8_scale_format format, int bias_kind) {
    problem_make_ex(p, m, n, k, format, bias_kind, true);
}

static bfp8_gemm_args problem_args(const problem *p, void *y, bfp8_dtype y_dtype) {
    bfp8_gemm_args g = {.m = p->m, .n = p->n, .k = p->k, .a = p->a, .b = p->b, .bias = p->bias,
                        .bias_dtype = p->bias_dtype, .y = y, .y_dtype = y_dtype, .device = BFP8_DEVICE_CPU};
    bfp8_scales_init(&g.a_scales, p->format, BFP8_LAYOUT_ROW_MAJOR, p->m, p->kb, p->sa);
    bfp8_scales_init(&g.b_scales, p->format, BFP8_LAYOUT_ROW_MAJOR, (p->n + 127) / 128, p->kb, p->sb);
    return g;
}

/* Runs the cpu backend with a poisoned output; false if the call failed. */
static bool run_cpu(const problem *p, void *y, bfp8_dtype dt, const char *isa, int path, int threads) {
    size_t bytes = (size_t)(p->m * p->n) * bfp8_dtype_size(dt);
    memset(y, 0xFF, bytes ? bytes : 1); /* NaN in every dtype */
    CHECK_OK(bfp8_cpu_force_isa(isa));
    bfp8_cpu_force_path(path);
    CHECK_OK(bfp8_set_num_threads(threads));
    bfp8_gemm_args g = problem_args(p, y, dt);
    bfp8_status st = bfp8_backend_cpu.gemm(&bfp8_backend_cpu, &g);
    CHECK(st == BFP8_OK, "cpu gemm: %s", bfp8_last_error());
    bfp8_cpu_force_isa("auto");
    bfp8_cpu_force_path(0);
    bfp8_set_num_threads(0);
    return st == BFP8_OK;
}

/* The relative Frobenius error of an output against a double answer; *nonfinite counts its inf and NaN outputs. */
static double rel_err(const void *y, bfp8_dtype dt, const double *ref, int64_t count, int64_t *nonfinite) {
    test_frobenius f = {0};
    *nonfinite = 0;
    for (int64_t i = 0; i < count; i++) {
        float v = test_load_f32(y, dt, i);
        if (!isfinite(v)) (*nonfinite)++;
        test_frobenius_add(&f, v, ref[i]);
    }
    return test_frobenius_value(&f);
}

/* calc_diff of an output against a double answer. */
static double calc_diff(const void *y, bfp8_dtype dt, const double *ref, int64_t count) {
    test_calc_diff c = {0};
    for (int64_t i = 0; i < count; i++) test_calc_diff_add(&c, test_load_f32(y, dt, i), ref[i]);
    return test_calc_diff_value(&c);
}

/* One problem through every ISA x path x thread count; all against the exact answer, ISAs and thread counts byte
 * for byte against each other, and the reference backend within tolerance. */
static void check_case(int64_t m, int64_t n, int64_t k, bfp8_dtype dt, bfp8_scale_format format, int bias_kind,
                       bool varied) {
    problem p;
    problem_make_ex(&p, m, n, k, format, bias_kind, varied);
    size_t bytes = (size_t)(m * n) * bfp8_dtype_size(dt) + 1;
    unsigned char *first = xmalloc(bytes), *y = xmalloc(bytes), *yref = xmalloc(bytes);
    char label[160];
    snprintf(label, sizeof label, "M=%lld N=%lld K=%lld out=%s %s bias=%d", (long long)m, (long long)n,
             (long long)k, bfp8_dtype_name(dt), bfp8_scale_format_name(format), bias_kind);
    bfp8_gemm_args g = problem_args(&p, yref, dt);
    memset(yref, 0xFF, bytes);
    CHECK_OK(bfp8_backend_ref.gemm(&bfp8_backend_ref, &g));
    /* The output rounding alone costs the reference this much; on tiny outputs (one fp16 value near the subnormal
     * range) it can pass the matrix tolerance by itself, so a backend may exceed the exact answer by tol + this. */
    const double tol = test_tolerance(dt, BFP8_DEVICE_CPU);
    int64_t ref_nonfinite;
    double ref_err = rel_err(yref, dt, p.exact_q, m * n, &ref_nonfinite);
    /* calc_diff of the exact product of the quantized inputs: the part of calc_diff no backend can avoid. */
    test_calc_diff exact_acc = {0};
    for (int64_t i = 0; i < m * n; i++) test_calc_diff_add(&exact_acc, p.exact_q[i], p.exact_raw[i]);
    const double exact_calc_diff = test_calc_diff_value(&exact_acc);
    const char *isas[] = {"avx2", "portable"};
    for (int path = 1; path <= 2; path++) {
        bool have_first = false;
        for (int ii = 0; ii < 2; ii++) {
            if (ii == 0 && strcmp(bfp8_cpu_isa_name(), "avx2") != 0) continue; /* no AVX2 here */
            for (int threads = 1; threads <= 2; threads++) {
                if (!run_cpu(&p, y, dt, isas[ii], path, threads)) continue;
                int64_t nonfinite;
                double e = rel_err(y, dt, p.exact_q, m * n, &nonfinite);
                CHECK(nonfinite == 0, "%s %s path %d threads %d: %lld outputs not finite (unwritten?)", label,
                      isas[ii], path, threads, (long long)nonfinite);
                CHECK(e <= tol + ref_err, "%s %s path %d: rel error %.3g vs exact > %.3g + %.3g (ref)", label,
                      isas[ii], path, e, tol, ref_err);
                /* Against the reference backend's output (itself within one rounding of exact). */
                test_frobenius fref = {0};
                for (int64_t i = 0; i < m * n; i++)
                    test_frobenius_add(&fref, test_load_f32(y, dt, i), test_load_f32(yref, dt, i));
                double eref = test_frobenius_value(&fref);
                CHECK(eref <= tol, "%s %s path %d: rel error %.3g vs ref", label, isas[ii], path, eref);
                /* calc_diff is an average: it needs enough outputs and terms to be stable (tests/check.h). */
                if (!varied && k >= 256 && m * n >= 1000) {
                    char where[200];
                    snprintf(where, sizeof where, "%s %s path %d", label, isas[ii], path);
                    test_calc_diff_check(calc_diff(y, dt, p.exact_raw, m * n), exact_calc_diff, where);
                }
                if (!have_first) {
                    memcpy(first, y, bytes - 1);
                    have_first = true;
                } else {
                    CHECK(memcmp(first, y, bytes - 1) == 0, "%s path %d: %s with %d threads differs in bytes", label,
                          path, isas[ii], threads);
                }
            }
        }
    }
    /* `first` now holds the large-M path's bytes: K in slices of 1 and 2 blocks (totals through memory between
     * slices) must give exactly the same. */
    if (p.kb > 1 && m * n > 0)
        for (int kc = 1; kc <= 2; kc++)
            for (int ii = 0; ii < 2; ii++) {
                if (ii == 0 && strcmp(bfp8_cpu_isa_name(), "avx2") != 0) continue;
                bfp8_cpu_force_kc_blocks(kc);
                bool ran = run_cpu(&p, y, dt, isas[ii], 2, 2);
                bfp8_cpu_force_kc_blocks(0);
                if (ran)
                    CHECK(memcmp(first, y, bytes - 1) == 0, "%s %s: K slices of %d blocks change the bytes", label,
                          isas[ii], kc);
            }
    free(first), free(y), free(yref);
    problem_free(&p);
}

static void test_ragged_shapes(void) {
    const int64_t ms[] = {0, 1, 3, 16, 33, 133};
    const int64_t ns[] = {1, 7, 128, 130, 2112};
    const int64_t ks[] = {1, 100, 128, 129, 256, 300};
    int c = 0;
    for (size_t im = 0; im < sizeof ms / sizeof *ms; im++)
        for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
            for (size_t ik = 0; ik < sizeof ks / sizeof *ks; ik++, c++) {
                int64_t m = ms[im], n = ns[in], k = ks[ik];
                if (n == 2112 && (k > 129 || m > 16)) continue; /* keep the sanitizer run in seconds */
                if (m * n * k > 3000000) continue;
                check_case(m, n, k, out_dtypes[c % 3], (bfp8_scale_format)(c / 3 % 2), c % 4, c % 2 == 0);
            }
}

static void test_every_dtype_and_bias(void) {
    for (int d = 0; d < 3; d++)
        for (int f = 0; f < 2; f++)
            for (int bias = 0; bias < 4; bias++)
                check_case(9, 130, 300, out_dtypes[d], (bfp8_scale_format)f, bias, bias % 2 == 1);
}

/* K = 0: y = bias (or zero) from every path. */
static void test_k_zero(void) {
    for (int path = 1; path <= 2; path++)
        for (int bias = 0; bias < 2; bias++) {
            problem p;
            problem_make(&p, 5, 20, 0, BFP8_SCALE_FP32, bias);
            float y[100];
            if (run_cpu(&p, y, BFP8_DTYPE_F32, "auto", path, 2)) {
                int bad = 0;
                for (int i = 0; i < 100; i++) bad += y[i] != p.bias_f[i % 20];
                CHECK(bad == 0, "K=0 path %d bias %d: %d wrong outputs", path, bias, bad);
            }
            problem_free(&p);
        }
}

/* Every E4M3 code as a weight, dotted with ones: y[n] = 128 * value(code n) exactly (NaN for the NaN codes), on
 * both ISAs and paths; the full-block decoder and the ragged one (K = 127 drops one term). */
static void test_every_code(void) {
    for (int64_t k = 127; k <= 128; k++) {
        problem p;
        memset(&p, 0, sizeof p);
        p.m = 7, p.n = 256, p.k = k, p.kb = 1, p.format = BFP8_SCALE_FP32;
        p.a = malloc((size_t)(p.m * k)), p.b = malloc((size_t)(p.n * k));
        p.sa = malloc(sizeof(float) * 7), p.sb = malloc(sizeof(float) * 2);
        memset(p.a, 0x38, (size_t)(p.m * k)); /* 1.0 */
        for (int c = 0; c < 256; c++) memset(p.b + c * k, c, (size_t)k);
        for (int i = 0; i < 7; i++) p.sa[i] = 1.0f;
        p.sb[0] = p.sb[1] = 1.0f;
        float *y = malloc(sizeof(float) * 7 * 256);
        const char *isas[] = {"avx2", "portable"};
        for (int ii = 0; ii < 2; ii++)
            for (int path = 1; path <= 2; path++) {
                if (ii == 0 && bfp8_cpu_force_isa("avx2") != BFP8_OK) continue;
                if (!run_cpu(&p, y, BFP8_DTYPE_F32, isas[ii], path, 2)) continue;
                int bad = 0;
                for (int m = 0; m < 7; m++)
                    for (int c = 0; c < 256; c++) {
                        float want = (float)k * bfp8_e4m3_to_f32((uint8_t)c), got = y[m * 256 + c];
                        if (isnan(want) ? !isnan(got) : got != want) bad++;
                    }
                CHECK(bad == 0, "every code, K=%lld %s path %d: %d wrong", (long long)k, isas[ii], path, bad);
            }
        free(y);
        problem_free(&p);
    }
}

/* A NaN code in one weight row poisons that output column only; one in an activation row, that row only. */
static void test_nan_propagation(void) {
    const int64_t ms[] = {1, 2, 10}, ks[] = {260, 1100}; /* M = 1 and M >= 2 kernels; K <= 512 and longer */
    for (int path = 1; path <= 2; path++)
        for (int ii = 0; ii < 2; ii++)
            for (int im = 0; im < 3; im++)
                for (int ik = 0; ik < 2; ik++) {
                    const char *isa = ii ? "portable" : "avx2";
                    if (ii == 0 && bfp8_cpu_force_isa("avx2") != BFP8_OK) continue;
                    int64_t m_count = ms[im], k = ks[ik];
                    problem p;
                    problem_make(&p, m_count, 140, k, BFP8_SCALE_UE8M0, 2);
                    p.b[37 * k + 5] = 0x7F;        /* a full block */
                    p.b[131 * k + k - 1] = 0xFF;   /* the ragged last block */
                    if (m_count > 1) p.a[(m_count - 1) * k + 200] = 0xFF; /* M = 1 keeps the column check */
                    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(m_count * 140));
                    if (run_cpu(&p, y, BFP8_DTYPE_BF16, isa, path, 2)) {
                        int bad = 0;
                        for (int64_t m = 0; m < m_count; m++)
                            for (int n = 0; n < 140; n++) {
                                bool want_nan = n == 37 || n == 131 || (m_count > 1 && m == m_count - 1);
                                float v = bfp8_bf16_to_f32(y[m * 140 + n]);
                                if (want_nan != (bool)isnan(v)) bad++;
                            }
                        CHECK(bad == 0, "NaN propagation %s path %d M=%lld K=%lld: %d wrong", isa, path,
                              (long long)m_count, (long long)k, bad);
                    }
                    free(y);
                    problem_free(&p);
                }
}

/* Outputs across the whole fp16/bf16 range (overflow to inf, subnormals, zeros): the vectorized epilogue and the
 * scalar one agree byte for byte, and both equal bfp8_*_from_f32 of the portable fp32 result. */
static void test_output_range(void) {
    problem p;
    problem_make(&p, 24, 32, 256, BFP8_SCALE_FP32, 0);
    for (int64_t m = 0; m < 24; m++)
        for (int kb = 0; kb < 2; kb++) p.sa[m * 2 + kb] = ldexpf(1.0f, (int)(m * 3) - 50); /* 2^-50 .. 2^19 */
    float yf[24 * 32];
    uint16_t y16[24 * 32], y16p[24 * 32];
    if (!run_cpu(&p, yf, BFP8_DTYPE_F32, "portable", 0, 1)) goto done;
    for (int d = 1; d < 3; d++) {
        bfp8_dtype dt = out_dtypes[d];
        int mismatch = 0, kinds[3] = {0};
        if (strcmp(bfp8_cpu_isa_name(), "avx2") == 0 && run_cpu(&p, y16, dt, "avx2", 0, 2) &&
            run_cpu(&p, y16p, dt, "portable", 0, 2)) {
            for (int i = 0; i < 24 * 32; i++) {
                uint16_t want = dt == BFP8_DTYPE_BF16 ? bfp8_bf16_from_f32(yf[i]) : bfp8_f16_from_f32(yf[i]);
                mismatch += y16[i] != want || y16p[i] != want;
                float v = test_load_f32(y16, dt, i);
                kinds[isinf(v) ? 0 : (v != 0 && fabsf(v) < 6.1e-5f) ? 1 : 2]++;
            }
            CHECK(mismatch == 0, "%s output range: %d outputs differ from the scalar rounding", bfp8_dtype_name(dt),
                  mismatch);
            if (dt == BFP8_DTYPE_F16) CHECK(kinds[0] > 0 && kinds[1] > 0, "f16 range not covered: %d inf, %d subnormal",
                                            kinds[0], kinds[1]);
        }
    }
done:
    problem_free(&p);
}

/* Through the dispatcher: auto picks cpu on the host; strict cpu runs; caps say no to what cpu cannot do. */
static void test_dispatch_and_caps(void) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (!d) return;
    bfp8_problem pr = {.device = BFP8_DEVICE_CPU, .m = 1, .n = 2112, .k = 7168, .out_dtype = BFP8_DTYPE_BF16,
                       .scale_format = BFP8_SCALE_FP32, .a_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR),
                       .b_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)};
    bfp8_decision dec;
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_AUTO, NULL));
    CHECK_OK(bfp8_dispatcher_select(d, &pr, &dec));
    CHECK(dec.backend && strcmp(dec.backend->name, "cpu") == 0, "auto chose %s",
          dec.backend ? dec.backend->name : "nothing");
    char why[BFP8_REASON_MAX];
    bfp8_problem q = pr;
    q.k = 0, q.m = 0;
    CHECK(bfp8_backend_check(&bfp8_backend_cpu, &q, why, sizeof why), "M=K=0 refused: %s", why);
    q = pr, q.has_bias = true, q.bias_dtype = BFP8_DTYPE_F16;
    CHECK(bfp8_backend_check(&bfp8_backend_cpu, &q, why, sizeof why), "f16 bias refused: %s", why);
    q = pr, q.device = BFP8_DEVICE_CUDA, q.arch = 90;
    CHECK(!bfp8_backend_check(&bfp8_backend_cpu, &q, why, sizeof why), "cuda data accepted");
    q = pr, q.out_dtype = BFP8_DTYPE_E4M3;
    CHECK(!bfp8_backend_check(&bfp8_backend_cpu, &q, why, sizeof why), "e4m3 output accepted");
    q = pr, q.has_bias = true, q.bias_dtype = BFP8_DTYPE_I32;
    CHECK(!bfp8_backend_check(&bfp8_backend_cpu, &q, why, sizeof why), "i32 bias accepted");
    CHECK(bfp8_backend_cpu.caps.priority > bfp8_backend_ref.caps.priority, "cpu does not outrank ref");

    /* Strict cpu through bfp8_gemm, MN-major weight scales (any layout is read): matches the direct call. */
    problem p;
    problem_make(&p, 3, 200, 256, BFP8_SCALE_FP32, 1);
    float y1[600], y2[600];
    if (run_cpu(&p, y1, BFP8_DTYPE_F32, "auto", 0, 2)) {
        float sb_mn[4];
        bfp8_gemm_args g = problem_args(&p, y2, BFP8_DTYPE_F32);
        bfp8_scales mn;
        CHECK_OK(bfp8_scales_init(&mn, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR, 2, 2, sb_mn));
        CHECK_OK(bfp8_scales_convert(&g.b_scales, &mn));
        g.b_scales = mn;
        memset(y2, 0xFF, sizeof y2);
        CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "cpu"));
        CHECK_OK(bfp8_gemm(d, &g));
        CHECK(memcmp(y1, y2, sizeof y1) == 0, "strict cpu via bfp8_gemm with MN-major scales differs");
        CHECK(bfp8_dispatcher_calls(d, "cpu") == 1, "cpu calls %llu",
              (unsigned long long)bfp8_dispatcher_calls(d, "cpu"));
    }
    problem_free(&p);
    bfp8_dispatcher_free(d);
}

static void test_threads_setting(void) {
    CHECK_OK(bfp8_set_num_threads(3));
    CHECK(bfp8_get_num_threads() == 3, "got %d", bfp8_get_num_threads());
    CHECK_STATUS(bfp8_set_num_threads(100000), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(bfp8_get_num_threads() == 3, "a refused setting changed it to %d", bfp8_get_num_threads());
    setenv("BFP8_NUM_THREADS", "5", 1);
    CHECK_OK(bfp8_set_num_threads(0));
    CHECK(bfp8_get_num_threads() == 5, "env: got %d", bfp8_get_num_threads());
    setenv("BFP8_NUM_THREADS", "junk", 1);
    CHECK(bfp8_get_num_threads() >= 1, "junk env: got %d", bfp8_get_num_threads());
    unsetenv("BFP8_NUM_THREADS");
    CHECK(bfp8_get_num_threads() >= 1, "default: got %d", bfp8_get_num_threads());
    CHECK_STATUS(bfp8_cpu_force_isa("sse9"), BFP8_ERR_INVALID_ARGUMENT);
    /* More threads than tasks, and more than cores: still byte-identical (checked by the case loop with 1 and 2). */
    CHECK_OK(bfp8_set_num_threads(7));
    problem p;
    problem_make(&p, 20, 33, 130, BFP8_SCALE_FP32, 0);
    float y7[660], y1[660];
    if (run_cpu(&p, y1, BFP8_DTYPE_F32, "auto", 0, 1)) {
        CHECK_OK(bfp8_set_num_threads(7));
        bfp8_gemm_args g = problem_args(&p, y7, BFP8_DTYPE_F32);
        CHECK_OK(bfp8_backend_cpu.gemm(&bfp8_backend_cpu, &g));
        CHECK(memcmp(y1, y7, sizeof y1) == 0, "7 threads differ from 1");
    }
    bfp8_set_num_threads(0);
    problem_free(&p);
}

int main(void) {
    test_seed();
    printf("cpu ISA on this machine: %s\n", bfp8_cpu_isa_name());
    test_threads_setting();
    test_every_code();
    test_nan_propagation();
    test_k_zero();
    test_output_range();
    test_every_dtype_and_bias();
    test_ragged_shapes();
    test_dispatch_and_caps();
    test_calc_diff_mean_check("test_cpu");
    return TEST_SUMMARY("test_cpu");
}
