/* CUDA: device memory API, GPU activation quantization (bytes identical to the host's), and every GPU backend
 * against the reference on fresh random data: ragged shapes, all output and bias dtypes, both scale formats, the
 * capability boundaries, poisoned outputs; a prepared weight's upload in every scale layout and a linear call on it.
 *
 * Without a device (or without CUDA built) it checks that everything says why and prints "cuda: skipped: <why>".
 * BFP8_REQUIRE_CUDA=1 (scripts/gpu-check.sh sets it) turns a missing device into a failure, so the GPU suite
 * cannot pass silently on a GPU machine. */
#include "check.h"
#include "internal.h"
#include "weight_forms.h"

#include <inttypes.h>

/* ---- helpers ----------------------------------------------------------------------------------------------- */

static void fill_input(void *x, bfp8_dtype dt, int64_t count, bool specials) {
    for (int64_t i = 0; i < count; i++) {
        /* Magnitudes vary per 128-group so scales span many binades (subnormal fp8 codes included). GEMM inputs
         * (no specials) stay in 2^-8..2^3 so that fp16 outputs do not overflow. */
        float mag = specials ? ldexpf(1.0f, (int)((i / 128) % 24) - 12) : ldexpf(1.0f, (int)((i / 128) % 12) - 8);
        float v = test_randn(mag);
        if (specials) {
            uint64_t r = test_rand_u64() % 397;
            if (r == 0) v = NAN;
            if (r == 1) v = -INFINITY;
            if (r == 2) v = INFINITY;
            if (r == 3) v = -0.0f;
            if (r == 4) v = -NAN;
            if (r == 5) v = mag * 1e-6f;
        }
        bfp8_store_f32(x, dt, i, v);
    }
}

static size_t scales_bytes(bfp8_scale_layout layout, int64_t rows, int64_t kblocks) {
    return rows && kblocks ? bfp8_scales_bytes(layout, rows, kblocks) : 0;
}

/* ---- no device ---------------------------------------------------------------------------------------------- */

static void check_unavailable(const char *why) {
    void *p = (void *)1;
    uint8_t q[4];
    float x[4] = {1, 2, 3, 4}, s[1];
    bfp8_scales sc;
    CHECK(why[0] != '\0', "bfp8_cuda_available gave no reason");
    CHECK_STATUS(bfp8_cuda_malloc(16, &p), BFP8_ERR_UNSUPPORTED);
    CHECK(p == NULL, "bfp8_cuda_malloc left the pointer set");
    CHECK_STATUS(bfp8_cuda_upload(q, x, 4), BFP8_ERR_UNSUPPORTED);
    CHECK_STATUS(bfp8_cuda_download(x, q, 4), BFP8_ERR_UNSUPPORTED);
    CHECK_STATUS(bfp8_cuda_synchronize(NULL), BFP8_ERR_UNSUPPORTED);
    CHECK_STATUS(bfp8_cuda_malloc_async(16, &p, NULL), BFP8_ERR_UNSUPPORTED);
    CHECK_OK(bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, s));
    CHECK_STATUS(bfp8_cuda_quantize_act(x, BFP8_DTYPE_F32, 1, 4, q, &sc, NULL, NULL), BFP8_ERR_UNSUPPORTED);
    CHECK(bfp8_cuda_arch() == 0, "arch without a device");
    /* The default dispatcher lists both CUDA backends as unavailable, with the reason. */
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (!d) return;
    int seen = 0;
    for (size_t i = 0; i < bfp8_dispatcher_unavailable_count(d); i++) {
        const char *name, *reason;
        CHECK_OK(bfp8_dispatcher_unavailable_at(d, i, &name, &reason));
        if (!strcmp(name, "cuda_generic") || !strcmp(name, "cublaslt")) {
            seen++;
            CHECK(strstr(reason, why) != NULL, "%s unavailable for '%s', expected '%s'", name, reason, why);
        }
    }
    CHECK(seen == 2, "%d CUDA backends listed as unavailable, expected 2", seen);
    CHECK(bfp8_dispatcher_find(d, "cuda_generic") == NULL, "cuda_generic registered without a device");
    bfp8_dispatcher_free(d);
    /* A weight prepared for a CUDA backend says why and keeps its host forms. */
    bfp8_dispatcher *spies = test_layout_spies(BFP8_DEVICE_CUDA);
    bfp8_weight *wt = NULL;
    CHECK_OK(bfp8_weight_quantize(x, BFP8_DTYPE_F32, 1, 4, BFP8_SCALE_FP32, &wt, NULL));
    if (spies && wt) {
        bfp8_weight_info info;
        CHECK_STATUS(bfp8_weight_prepare(wt, spies, NULL), BFP8_ERR_UNSUPPORTED);
        CHECK_OK(bfp8_weight_info_get(wt, &info));
        CHECK(info.device_layouts == 0 && (info.host_layouts & BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)),
              "a failed upload left layouts host %#x device %#x", info.host_layouts, info.device_layouts);
    }
    bfp8_weight_free(wt);
    bfp8_dispatcher_free(spies);
}

/* ---- device memory API -------------------------------------------------------------------------------------- */

static void check_memory_api(void) {
    enum { N = 1000 };
    uint8_t h[N], back[N];
    for (int i = 0; i < N; i++) h[i] = (uint8_t)test_rand_u64();
    void *p = check_dev_upload(h, N);
    memset(back, 0, N);
    CHECK_OK(bfp8_cuda_download(back, p, N));
    CHECK(memcmp(h, back, N) == 0, "upload/download round trip differs");
    CHECK_OK(bfp8_cuda_free(p));
    CHECK_OK(bfp8_cuda_free(NULL));
    CHECK_STATUS(bfp8_cuda_malloc(16, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_cuda_upload(NULL, h, 16), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    void *a = NULL;
    CHECK_OK(bfp8_cuda_malloc_async(4096, &a, NULL));
    CHECK(a != NULL, "malloc_async gave NULL");
    CHECK_OK(bfp8_cuda_free_async(a, NULL));
    int arch = bfp8_cuda_arch();
    printf("device: sm_%d\n", arch);
    CHECK(arch >= 50, "arch %d", arch);
}

/* ---- GPU quantization == host quantization ------------------------------------------------------------------ */

static void check_quant_case(int64_t m, int64_t k, bfp8_dtype dt, bfp8_scale_format fmt, bfp8_scale_layout layout) {
    int64_t kb = bfp8_ceil_div(k, BFP8_BLOCK);
    size_t xb = (size_t)(m * k) * bfp8_dtype_size(dt), sb = scales_bytes(layout, m, kb);
    void *x = malloc(xb ? xb : 1);
    uint8_t *q_cpu = malloc(m * k > 0 ? m * k : 1), *q_gpu = malloc(m * k > 0 ? m * k : 1);
    uint8_t *s_cpu = calloc(1, sb ? sb : 1), *s_gpu = malloc(sb ? sb : 1);
    fill_input(x, dt, m * k, true);
    bfp8_scales cs, gs;
    int64_t bad_cpu = -1;
    CHECK_OK(bfp8_scales_init(&cs, fmt, layout, m, kb, s_cpu));
    CHECK_OK(bfp8_quantize_act(x, dt, m, k, q_cpu, &cs, &bad_cpu));

    void *dx = check_dev_upload(x, xb);
    uint8_t *dq = check_dev_filled(m * k, 0xA5);
    void *ds = check_dev_filled(sb, 0x5A);
    int64_t zero = 0, bad_gpu = -1;
    int64_t *dbad = check_dev_upload(&zero, sizeof zero);
    CHECK_OK(bfp8_scales_init(&gs, fmt, layout, m, kb, ds));
    CHECK_OK(bfp8_cuda_quantize_act(dx, dt, m, k, dq, &gs, dbad, NULL));
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    CHECK_OK(bfp8_cuda_download(q_gpu, dq, m * k));
    CHECK_OK(bfp8_cuda_download(s_gpu, ds, sb));
    CHECK_OK(bfp8_cuda_download(&bad_gpu, dbad, sizeof bad_gpu));
    int64_t first = -1;
    for (int64_t i = 0; i < m * k && first < 0; i++)
        if (q_cpu[i] != q_gpu[i]) first = i;
    CHECK(first < 0, "quant m=%" PRId64 " k=%" PRId64 " %s %s %s: byte %" PRId64 " gpu 0x%02x cpu 0x%02x (x=%g)",
          m, k, bfp8_dtype_name(dt), bfp8_scale_format_name(fmt), bfp8_scale_layout_name(layout), first,
          first >= 0 ? q_gpu[first] : 0, first >= 0 ? q_cpu[first] : 0,
          first >= 0 ? (double)test_load_f32(x, dt, first) : 0.0);
    CHECK(memcmp(s_cpu, s_gpu, sb) == 0, "quant m=%" PRId64 " k=%" PRId64 " %s %s %s: scale bytes differ", m, k,
          bfp8_dtype_name(dt), bfp8_scale_format_name(fmt), bfp8_scale_layout_name(layout));
    CHECK(bad_cpu == bad_gpu, "non-finite count gpu %" PRId64 " cpu %" PRId64, bad_gpu, bad_cpu);
    bfp8_cuda_free(dx), bfp8_cuda_free(dq), bfp8_cuda_free(ds), bfp8_cuda_free(dbad);
    free(x), free(q_cpu), free(q_gpu), free(s_cpu), free(s_gpu);
}

/* BFP8_TEST_SMALL=1: a few cases of each kind (the compute-sanitizer runs). */
static bool small_run(void) {
    const char *e = getenv("BFP8_TEST_SMALL");
    return e && e[0] == '1';
}

static void check_quantization(void) {
    static const int64_t shapes[][2] = {{1, 1}, {3, 127}, {7, 129}, {5, 128}, {33, 300}, {64, 1024}, {9, 7168}};
    size_t nshapes = small_run() ? 3 : sizeof shapes / sizeof shapes[0];
    for (size_t s = 0; s < nshapes; s++)
        for (int dt = 0; dt < 3; dt++)
            for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT; f++)
                for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
                    if (l == BFP8_LAYOUT_PACKED_UE8M0 && f != BFP8_SCALE_UE8M0) continue;
                    check_quant_case(shapes[s][0], shapes[s][1], (bfp8_dtype)dt, (bfp8_scale_format)f,
                                     (bfp8_scale_layout)l);
                }
    /* Every fp32 bit pattern class through the encoder: a sweep of one group per binade, scale fixed by a 448. */
    int64_t k = 128, m = 256;
    float *x = malloc(sizeof(float) * m * k);
    for (int64_t r = 0; r < m; r++) {
        x[r * k] = 448.0f;
        for (int64_t c = 1; c < k; c++) {
            uint32_t bits = (uint32_t)(test_rand_u64() & 0x807FFFFFu) | (uint32_t)((r % 140 + 0) << 23);
            memcpy(&x[r * k + c], &bits, 4);
        }
    }
    uint8_t *q1 = malloc(m * k), *q2 = malloc(m * k);
    float s1[256], s2[256];
    bfp8_scales cs, gs;
    CHECK_OK(bfp8_scales_init(&cs, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, m, 1, s1));
    CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, m, k, q1, &cs, NULL));
    void *dx = check_dev_upload(x, sizeof(float) * m * k), *dq = check_dev_upload(NULL, m * k),
         *ds = check_dev_upload(NULL, sizeof s2);
    CHECK_OK(bfp8_scales_init(&gs, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, m, 1, ds));
    CHECK_OK(bfp8_cuda_quantize_act(dx, BFP8_DTYPE_F32, m, k, dq, &gs, NULL, NULL));
    CHECK_OK(bfp8_cuda_download(q2, dq, m * k));
    CHECK_OK(bfp8_cuda_download(s2, ds, sizeof s2));
    CHECK(memcmp(q1, q2, m * k) == 0 && memcmp(s1, s2, sizeof s1) == 0, "binade sweep differs");
    bfp8_cuda_free(dx), bfp8_cuda_free(dq), bfp8_cuda_free(ds);
    free(x), free(q1), free(q2);
    /* Argument checks. */
    CHECK_STATUS(bfp8_cuda_quantize_act(NULL, BFP8_DTYPE_E4M3, 1, 1, NULL, &cs, NULL, NULL),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_cuda_quantize_act(NULL, BFP8_DTYPE_F32, 2, 128, NULL, &cs, NULL, NULL),
                 BFP8_ERR_INVALID_ARGUMENT);
}

/* ---- GEMM against the reference ------------------------------------------------------------------------------ */

typedef struct gemm_case {
    int64_t m, n, k;
    bfp8_dtype out;
    int bias; /* -1 none, else bfp8_dtype */
    bfp8_scale_format fmt;
    bool a_layout_set; /* false: the layout bfp8_linear would produce for this backend (bfp8_act_layout) */
    bfp8_scale_layout a_layout;
} gemm_case;

/* A case with the activation-scale layout left to bfp8_act_layout. */
#define CASE(m, n, k, out, bias, fmt) ((gemm_case){m, n, k, out, bias, fmt, false, BFP8_LAYOUT_ROW_MAJOR})

static int g_run, g_declined;

/* Runs one case on backend `name` (strict policy through the dispatcher) and compares with the reference on a
 * sample of rows (every row when small). expect: 1 must be accepted, 0 must be declined, -1 either. With y_out,
 * the device output is handed back (malloc'ed; NULL when declined). */
static void check_gemm_case_y(bfp8_dispatcher *d, const char *name, gemm_case c, int expect, uint8_t **y_out) {
    if (y_out) *y_out = NULL;
    const bfp8_backend *be = bfp8_dispatcher_find(d, name);
    if (!be) return;
    const int64_t m = c.m, n = c.n, k = c.k, kb = bfp8_ceil_div(k, BFP8_BLOCK), nb = bfp8_ceil_div(n, BFP8_BLOCK);
    bfp8_scale_layout al = c.a_layout_set ? c.a_layout
                                          : bfp8_act_layout(be->caps.a_layouts & bfp8_scale_layouts_for(c.fmt));
    bfp8_scale_layout bl = bfp8_first_layout(be->caps.b_layouts & bfp8_scale_layouts_for(c.fmt));
    bfp8_problem p = {.device = BFP8_DEVICE_CUDA, .arch = bfp8_cuda_arch(), .m = m, .n = n, .k = k,
                      .out_dtype = c.out, .scale_format = c.fmt, .a_layouts = BFP8_BIT(al), .b_layouts = BFP8_BIT(bl),
                      .has_bias = c.bias >= 0, .bias_dtype = c.bias >= 0 ? (bfp8_dtype)c.bias : BFP8_DTYPE_F32};
    char reason[BFP8_REASON_MAX];
    bool ok = bfp8_backend_check(be, &p, reason, sizeof reason);
    if (expect >= 0)
        CHECK(ok == (expect == 1), "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " out=%s: %s (%s)", name, m, n, k,
              bfp8_dtype_name(c.out), ok ? "accepted" : "declined", reason);
    if (!ok) {
        CHECK(reason[0] != '\0', "declined without a reason");
        g_declined++;
        return;
    }
    g_run++;

    /* Host data and its quantization (row-major scales), then the backend's layouts. */
    float *x = malloc(sizeof(float) * (m * k > 0 ? m * k : 1)), *w = malloc(sizeof(float) * (n * k > 0 ? n * k : 1));
    fill_input(x, BFP8_DTYPE_F32, m * k, false);
    for (int64_t i = 0; i < n * k; i++) w[i] = test_randn(0.05f);
    uint8_t *qa = malloc(m * k > 0 ? m * k : 1), *qb = malloc(n * k > 0 ? n * k : 1);
    size_t sab = scales_bytes(BFP8_LAYOUT_ROW_MAJOR, m, kb), sbb = scales_bytes(BFP8_LAYOUT_ROW_MAJOR, nb, kb);
    float *sa = calloc(1, sab + 4), *sb = calloc(1, sbb + 4);
    bfp8_scales as, bs;
    CHECK_OK(bfp8_scales_init(&as, c.fmt, BFP8_LAYOUT_ROW_MAJOR, m, kb, sa));
    CHECK_OK(bfp8_scales_init(&bs, c.fmt, BFP8_LAYOUT_ROW_MAJOR, nb, kb, sb));
    CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, m, k, qa, &as, NULL));
    CHECK_OK(bfp8_quantize_weight(w, BFP8_DTYPE_F32, n, k, qb, &bs, NULL));
    size_t sab2 = scales_bytes(al, m, kb), sbb2 = scales_bytes(bl, nb, kb);
    void *sa2 = calloc(1, sab2 + 4), *sb2 = calloc(1, sbb2 + 4);
    bfp8_scales as2, bs2;
    CHECK_OK(bfp8_scales_init(&as2, c.fmt, al, m, kb, sa2));
    CHECK_OK(bfp8_scales_init(&bs2, c.fmt, bl, nb, kb, sb2));
    CHECK_OK(bfp8_scales_convert(&as, &as2));
    CHECK_OK(bfp8_scales_convert(&bs, &bs2));
    size_t bias_size = c.bias >= 0 ? bfp8_dtype_size((bfp8_dtype)c.bias) : 0;
    void *bias = c.bias >= 0 ? malloc(bias_size * n + 1) : NULL;
    if (bias) fill_input(bias, (bfp8_dtype)c.bias, n, false);

    /* Device run into a poisoned output (0xFF.. is NaN in f32, bf16 and f16). */
    size_t ysz = bfp8_dtype_size(c.out), yb = (size_t)(m * n) * ysz;
    void *da = check_dev_upload(qa, m * k), *db = check_dev_upload(qb, n * k), *dsa = check_dev_upload(sa2, sab2),
         *dsb = check_dev_upload(sb2, sbb2), *dbias = bias ? check_dev_upload(bias, bias_size * n) : NULL,
         *dy = check_dev_filled(yb, 0xFF);
    bfp8_gemm_args g = {.m = m, .n = n, .k = k, .a = da, .b = db, .bias = dbias,
                        .bias_dtype = c.bias >= 0 ? (bfp8_dtype)c.bias : BFP8_DTYPE_F32, .y = dy, .y_dtype = c.out,
                        .device = BFP8_DEVICE_CUDA, .stream = NULL};
    CHECK_OK(bfp8_scales_init(&g.a_scales, c.fmt, al, m, kb, dsa));
    CHECK_OK(bfp8_scales_init(&g.b_scales, c.fmt, bl, nb, kb, dsb));
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, name));
    CHECK_OK(bfp8_gemm(d, &g));
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    uint8_t *y = malloc(yb ? yb : 1);
    CHECK_OK(bfp8_cuda_download(y, dy, yb));

    /* Reference (f32 output, so it is within one f32 rounding of the exact value) on sampled rows. */
    int64_t rows_checked = m <= 96 ? m : 24;
    test_frobenius fro = {0};
    test_calc_diff cd = {0}, cd_ref = {0}; /* output and reference, both vs unquantized */
    int64_t unwritten = 0;
    float *yr = malloc(sizeof(float) * (n ? n : 1));
    for (int64_t i = 0; i < rows_checked; i++) {
        int64_t row = m <= 96 ? i : (int64_t)(test_rand_u64() % (uint64_t)m);
        bfp8_gemm_args h = {.m = 1, .n = n, .k = k, .a = qa + row * k, .b = qb, .bias = bias,
                            .bias_dtype = g.bias_dtype, .y = yr, .y_dtype = BFP8_DTYPE_F32,
                            .device = BFP8_DEVICE_CPU};
        CHECK_OK(bfp8_scales_init(&h.a_scales, c.fmt, BFP8_LAYOUT_ROW_MAJOR, 1, kb, sa + row * kb));
        h.b_scales = bs;
        CHECK_OK(bfp8_backend_ref.gemm(&bfp8_backend_ref, &h));
        for (int64_t j = 0; j < n; j++) {
            double got = test_load_f32(y, c.out, row * n + j), ref = yr[j];
            if (isnan(got)) unwritten++;
            test_frobenius_add(&fro, got, ref);
            /* calc_diff against the unquantized product. */
            double exact = bias ? test_load_f32(bias, (bfp8_dtype)c.bias, j) : 0.0;
            for (int64_t t = 0; t < k; t++) exact += (double)x[row * k + t] * w[j * k + t];
            test_calc_diff_add(&cd, got, exact);
            test_calc_diff_add(&cd_ref, ref, exact);
        }
    }
    /* Outputs below the dtype's smallest normal count as that size (a lone fp16 output of 2.6e-5, k=1, failed the
     * plain relative error once in 4335 random cases on the H200). */
    double rel = test_frobenius_value_normal(&fro, c.out);
    double calc_diff = test_calc_diff_value(&cd);
    CHECK(unwritten == 0, "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 ": %" PRId64 " outputs NaN/unwritten", name, m,
          n, k, unwritten);
    const double tol = test_tolerance(c.out, BFP8_DEVICE_CUDA);
    CHECK(rel <= tol, "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " out=%s bias=%d %s: rel %.3g > %.3g", name, m, n,
          k, bfp8_dtype_name(c.out), c.bias, bfp8_scale_format_name(c.fmt), rel, tol);
    /* calc_diff is a mean of FP8 quantization noise (about 7e-4 here): only a statistic over many outputs of full
     * 128-deep blocks is stable enough to test (tests/check.h). */
    if (k >= 256 && rows_checked * n >= 1024) {
        char label[96];
        snprintf(label, sizeof label, "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64, name, m, n, k);
        test_calc_diff_check(calc_diff, test_calc_diff_value(&cd_ref), label);
    }
    if (getenv("BFP8_TEST_VERBOSE"))
        printf("  %-12s m=%-5" PRId64 " n=%-5" PRId64 " k=%-5" PRId64 " out=%-4s bias=%-2d %-5s rel=%.2e diff=%.2e\n",
               name, m, n, k, bfp8_dtype_name(c.out), c.bias, bfp8_scale_format_name(c.fmt), rel, calc_diff);

    bfp8_cuda_free(da), bfp8_cuda_free(db), bfp8_cuda_free(dsa), bfp8_cuda_free(dsb), bfp8_cuda_free(dy);
    if (dbias) bfp8_cuda_free(dbias);
    if (y_out) {
        *y_out = y;
        y = NULL;
    }
    free(x), free(w), free(qa), free(qb), free(sa), free(sb), free(sa2), free(sb2), free(bias), free(y), free(yr);
}

static void check_gemm_case(bfp8_dispatcher *d, const char *name, gemm_case c, int expect) {
    check_gemm_case_y(d, name, c, expect, NULL);
}

/* Runs case c on backends x and y from the same random inputs; returns whether the outputs are byte-identical
 * (false when either declined). */
static bool same_output(bfp8_dispatcher *d, const char *x, const char *y, gemm_case c) {
    uint64_t seed = test_rand_u64();
    uint8_t *yx = NULL, *yy = NULL;
    test_rng_init(&test_rng_, seed);
    check_gemm_case_y(d, x, c, 1, &yx);
    test_rng_init(&test_rng_, seed);
    check_gemm_case_y(d, y, c, 1, &yy);
    bool same = yx && yy && memcmp(yx, yy, (size_t)(c.m * c.n) * bfp8_dtype_size(c.out)) == 0;
    free(yx), free(yy);
    return same;
}

static void check_gemms(void) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (!d) return;
    const bfp8_dtype outs[3] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32};
    const bool hopper = bfp8_cuda_arch() == 90;
    CHECK(bfp8_dispatcher_find(d, "cuda_generic") != NULL, "cuda_generic is not registered");
    if (hopper) CHECK(bfp8_dispatcher_find(d, "cublaslt") != NULL, "cublaslt is not registered on sm_90");

    /* cuda_generic: ragged shapes, every dtype and bias dtype, both formats; every tile config and split-K. Run
     * twice: with the activation-scale layout rotating through all four, then as bfp8_linear calls it
     * (mn_major_aligned, the layout hopper's kernel takes too). */
    static const int64_t ragged[][3] = {
        {1, 1, 1},     {3, 17, 1},    {5, 130, 127},  {17, 129, 129},  {33, 257, 300}, {64, 128, 256},
        {65, 200, 1000}, {1, 256, 4096}, {2, 2112, 1536}, {16, 96, 7168}, {129, 300, 384}, {7, 50, 0},
        {1152, 2048, 256}, {1152, 2048, 200}, {100, 136, 16}, {31, 33, 2047}, {9, 64, 8}, {40, 72, 24}};
    size_t nragged = small_run() ? 6 : sizeof ragged / sizeof ragged[0];
    for (int pass = 0; pass < 2; pass++) {
        for (size_t s = 0; s < nragged; s++)
            for (int o = 0; o < 3; o++) {
                gemm_case c = CASE(ragged[s][0], ragged[s][1], ragged[s][2], outs[o], (int)((s + o) % 4) - 1,
                                   (bfp8_scale_format)((s + o) % 2));
                if (pass == 0) {
                    int l = (int)((s + 2 * o) % 4);
                    if (l == BFP8_LAYOUT_PACKED_UE8M0 && c.fmt != BFP8_SCALE_UE8M0) l = BFP8_LAYOUT_MN_MAJOR;
                    c.a_layout_set = true;
                    c.a_layout = (bfp8_scale_layout)l;
                }
                check_gemm_case(d, "cuda_generic", c, 1);
            }
    }
    /* No backend runs another's kernel: where hopper takes a problem, cuda_generic still runs its own mma.sync
     * kernel, which sums in another order, so its fp32 outputs are not hopper's bytes. */
    if (hopper) {
        const gemm_case shared[] = {CASE(130, 2112, 512, BFP8_DTYPE_F32, BFP8_DTYPE_BF16, 1),
                                    CASE(16, 2112, 7168, BFP8_DTYPE_F32, -1, 0)};
        for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
            CHECK(!same_output(d, "cuda_generic", "hopper", shared[i]),
                  "cuda_generic m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " gave hopper's bytes", shared[i].m,
                  shared[i].n, shared[i].k);
    }

    /* cublaslt: the capability boundaries (expectations follow the declared caps: bench/RESULTS.md). */
    if (hopper && small_run()) {
        check_gemm_case(d, "cublaslt", CASE(3, 256, 512, BFP8_DTYPE_BF16, -1, 0), 1);
        check_gemm_case(d, "cublaslt", CASE(8, 256, 496, BFP8_DTYPE_F16, BFP8_DTYPE_F16, 1), 1);
    } else if (hopper) {
        for (int o = 0; o < 3; o++) {
            /* fp32 output is declined (it misses the 2.5e-4 tolerance): every shape below expects "no" there. */
            const bool f32 = outs[o] == BFP8_DTYPE_F32;
            const int yes = f32 ? 0 : 1;
            for (int64_t m = 1; m <= 5; m++)
                check_gemm_case(d, "cublaslt", CASE(m, 256, 512, outs[o], -1, 0), yes);
            check_gemm_case(d, "cublaslt", CASE(8, 256, 127, outs[o], -1, 0), 0);
            check_gemm_case(d, "cublaslt", CASE(8, 256, 129, outs[o], -1, 0), 0);
            check_gemm_case(d, "cublaslt", CASE(8, 256, 384, outs[o], -1, 0), yes); /* 3 K-blocks */
            check_gemm_case(d, "cublaslt", CASE(8, 256, 496, outs[o], -1, 1), yes); /* 4, last partial */
            check_gemm_case(d, "cublaslt", CASE(8, 256, 400, outs[o], -1, 0), yes); /* smallest K */
            check_gemm_case(d, "cublaslt", CASE(8, 256, 392, outs[o], -1, 0), 0);   /* K % 16 */
            check_gemm_case(d, "cublaslt", CASE(8, 256, 0, outs[o], -1, 0), 0);
            check_gemm_case(d, "cublaslt", CASE(8, 2112, 512, outs[o], -1, 0), yes);
            check_gemm_case(d, "cublaslt", CASE(12, 2116, 512, outs[o], -1, 0), 0); /* N % 8 */
            check_gemm_case(d, "cublaslt", CASE(12, 2120, 512, outs[o], -1, 1), yes);
            check_gemm_case(d, "cublaslt", CASE(130, 2112, 7168, outs[o], -1, 0), yes);
            /* Bias: bf16 with bf16 output, f16 with f16 output; f32 never. */
            check_gemm_case(d, "cublaslt", CASE(4, 136, 1024, outs[o], BFP8_DTYPE_F32, 0), 0);
            check_gemm_case(d, "cublaslt", CASE(4, 136, 1024, outs[o], BFP8_DTYPE_BF16, 0),
                            outs[o] == BFP8_DTYPE_BF16);
            check_gemm_case(d, "cublaslt", CASE(5, 136, 1024, outs[o], BFP8_DTYPE_F16, 1),
                            outs[o] == BFP8_DTYPE_F16);
        }
    }
    printf("gemm: %d cases run, %d declined\n", g_run, g_declined);
    bfp8_dispatcher_free(d);
}

/* Packed UE8M0 activation scales as a caller may hand them: byte 255 (NaN) and byte 0 (2^-127) read as the host
 * reads them (bfp8_ue8m0_to_f32), so cuda_generic and ref agree on which outputs are NaN and on the rest. The
 * output is poisoned with a finite value, so a NaN row was written, not left. */
static void check_packed_scale_extremes(void) {
    enum { M = 3, N = 130, K = 300, KB = 3, NB = 2 };
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    const bfp8_backend *be = d ? bfp8_dispatcher_find(d, "cuda_generic") : NULL;
    if (!be) {
        bfp8_dispatcher_free(d);
        return;
    }
    CHECK(be->caps.a_layouts & BFP8_BIT(BFP8_LAYOUT_PACKED_UE8M0), "cuda_generic no longer takes packed A scales");
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K), sa[M * KB], sb[NB * KB];
    fill_input(x, BFP8_DTYPE_F32, M * K, false);
    for (int64_t i = 0; i < N * K; i++) w[i] = test_randn(0.05f);
    uint8_t qa[M * K], *qb = malloc(N * K);
    bfp8_scales as, bs, ap, bl;
    CHECK_OK(bfp8_scales_init(&as, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, M, KB, sa));
    CHECK_OK(bfp8_scales_init(&bs, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, NB, KB, sb));
    CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, M, K, qa, &as, NULL));
    CHECK_OK(bfp8_quantize_weight(w, BFP8_DTYPE_F32, N, K, qb, &bs, NULL));
    uint32_t packed[4] = {0}; /* ceil(KB/4) = 1 word per row, rows padded to 4 */
    CHECK_OK(bfp8_scales_init(&ap, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, M, KB, packed));
    CHECK_OK(bfp8_scales_convert(&as, &ap));
    packed[0] |= 0xFFu << 8;      /* row 0, K block 1: NaN */
    packed[1] &= ~(uint32_t)0xFF; /* row 1, K block 0: 2^-127 */
    const bfp8_scale_layout b_layout =
        bfp8_first_layout(be->caps.b_layouts & bfp8_scale_layouts_for(BFP8_SCALE_UE8M0));
    size_t bl_bytes = bfp8_scales_bytes(b_layout, NB, KB);
    void *sb2 = malloc(bl_bytes);
    CHECK_OK(bfp8_scales_init(&bl, BFP8_SCALE_UE8M0, b_layout, NB, KB, sb2));
    CHECK_OK(bfp8_scales_convert(&bs, &bl));

    float y_ref[M * N], y[M * N];
    bfp8_gemm_args h = {.m = M, .n = N, .k = K, .a = qa, .a_scales = ap, .b = qb, .b_scales = bs, .y = y_ref,
                        .y_dtype = BFP8_DTYPE_F32, .device = BFP8_DEVICE_CPU};
    CHECK_OK(bfp8_backend_ref.gemm(&bfp8_backend_ref, &h));
    void *da = check_dev_upload(qa, sizeof qa), *db = check_dev_upload(qb, N * K),
         *dsa = check_dev_upload(packed, sizeof packed), *dsb = check_dev_upload(sb2, bl_bytes),
         *dy = check_dev_filled(sizeof y, 0x7F); /* 3.4e38 in every f32 */
    bfp8_gemm_args g = h;
    g.a = da, g.b = db, g.y = dy, g.device = BFP8_DEVICE_CUDA;
    g.a_scales.data = dsa;
    g.b_scales = bl;
    g.b_scales.data = dsb;
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "cuda_generic"));
    CHECK_OK(bfp8_gemm(d, &g));
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    CHECK_OK(bfp8_cuda_download(y, dy, sizeof y));
    int64_t nan_mismatch = 0, ref_nan = 0;
    for (int i = 0; i < M * N; i++) {
        nan_mismatch += isnan(y[i]) != isnan(y_ref[i]);
        ref_nan += isnan(y_ref[i]);
    }
    CHECK(ref_nan == N, "ref: %lld NaN outputs, expected row 0's %d", (long long)ref_nan, N);
    CHECK(nan_mismatch == 0, "packed scale bytes 0/255: %lld outputs NaN on one side only", (long long)nan_mismatch);
    const double err = test_rel_frobenius(y + N, y_ref + N, (M - 1) * N);
    CHECK(err <= test_tolerance(BFP8_DTYPE_F32, BFP8_DEVICE_CUDA),
          "packed scale bytes 0/255: rows 1-2 rel Frobenius %.3g against ref", err);
    bfp8_cuda_free(da), bfp8_cuda_free(db), bfp8_cuda_free(dsa), bfp8_cuda_free(dsb), bfp8_cuda_free(dy);
    free(x), free(w), free(qb), free(sb2);
    bfp8_dispatcher_free(d);
}

/* ---- prepared weights on the device ------------------------------------------------------------------------ */

/* The weight store's upload (src/weight_store.c): a weight prepared for a CUDA backend of each scale layout holds
 * each on the device with the host's bytes, q uploaded once; prepared for every backend of the default dispatcher,
 * bfp8_linear on device data gives what ref gives on the host, within the bf16 tolerance. */
static void check_weight_upload(void) {
    enum { M = 5, N = 200, K = 300 }; /* ragged: the aligned and packed layouts pad their rows */
    float *w = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * M * K);
    for (int64_t i = 0; i < N * K; i++) w[i] = test_randn(0.05f);
    fill_input(x, BFP8_DTYPE_F32, M * K, false);
    const size_t ybytes = sizeof(uint16_t) * M * N;
    uint16_t *y = malloc(ybytes), *y_ref = malloc(ybytes);
    bfp8_dispatcher *spies = test_layout_spies(BFP8_DEVICE_CUDA), *ref = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&ref));
    if (ref) CHECK_OK(bfp8_dispatcher_set_policy(ref, BFP8_POLICY_STRICT, "ref"));
    for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT && spies && ref; f++) {
        const bfp8_scale_format format = (bfp8_scale_format)f;
        bfp8_weight *wt = NULL;
        CHECK_OK(bfp8_weight_quantize(w, BFP8_DTYPE_F32, N, K, format, &wt, NULL));
        if (!wt) continue;
        CHECK_OK(bfp8_weight_prepare(wt, spies, NULL));
        bfp8_weight_info info = {0};
        CHECK_OK(bfp8_weight_info_get(wt, &info));
        CHECK(info.device_layouts == bfp8_scale_layouts_for(format) && info.host_layouts == info.device_layouts,
              "%s: layouts host %#x device %#x", bfp8_scale_format_name(format), info.host_layouts,
              info.device_layouts);
        test_check_uploads(bfp8_scale_format_name(format), wt, test_view_dense, info.device_layouts, N * K, 1);
        /* The real backends' forms, and a linear call on them. */
        CHECK_OK(bfp8_weight_prepare(wt, NULL, NULL));
        bfp8_linear_args a = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = M, .y = y_ref, .y_dtype = BFP8_DTYPE_BF16,
                              .device = BFP8_DEVICE_CPU};
        CHECK_OK(bfp8_linear(ref, wt, &a));
        a.device = BFP8_DEVICE_CUDA;
        a.x = check_dev_upload(x, sizeof(float) * M * K);
        a.y = check_dev_filled(ybytes, 0xFF);
        if (a.x && a.y) {
            CHECK_OK(bfp8_linear(NULL, wt, &a));
            CHECK_OK(bfp8_cuda_synchronize(NULL));
            CHECK_OK(bfp8_cuda_download(y, a.y, ybytes));
            float *yf = test_to_f32(y, BFP8_DTYPE_BF16, M * N), *rf = test_to_f32(y_ref, BFP8_DTYPE_BF16, M * N);
            const double err = test_rel_frobenius(yf, rf, M * N);
            const double tol = test_tolerance(BFP8_DTYPE_BF16, BFP8_DEVICE_CUDA);
            const int64_t unwritten = test_count_nan(yf, M * N);
            CHECK(unwritten == 0 && err <= tol, "%s weight: linear on the device vs ref: %lld unwritten, "
                  "rel Frobenius %.3g (tolerance %.1g)", bfp8_scale_format_name(format), (long long)unwritten, err, tol);
            free(yf), free(rf);
        }
        bfp8_cuda_free((void *)a.x), bfp8_cuda_free(a.y);
        bfp8_weight_free(wt);
    }
    bfp8_dispatcher_free(spies), bfp8_dispatcher_free(ref);
    free(w), free(x), free(y), free(y_ref);
}

int main(void) {
    test_seed();
    char why[BFP8_REASON_MAX];
    if (!bfp8_cuda_available(why, sizeof why)) {
        check_unavailable(why);
        const char *req = getenv("BFP8_REQUIRE_CUDA");
        CHECK(!(req && req[0] == '1'), "BFP8_REQUIRE_CUDA=1 but no device: %s", why);
        printf("cuda: skipped: %s\n", why);
        return TEST_SUMMARY("cuda");
    }
    check_memory_api();
    check_quantization();
    check_gemms();
    check_packed_scale_extremes();
    check_weight_upload();
    test_calc_diff_mean_check("cuda");
    return TEST_SUMMARY("cuda");
}
