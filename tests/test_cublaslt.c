/* cublaslt: the cuBLASLt backend against the reference backend and an fp64 product computed here from the
 * quantized operands, at the boundaries its caps declare: M = 1..5 and 4k +- 1 (both ways of running M % 4 != 0),
 * K = 128*j for j = 1..20 (ceil(K/128) % 4 != 0 included) and ragged K, N ragged (2112, 576, 64 + 128j), bf16 and
 * f16 output (f32 declined), both scale formats, both activation-scale layouts it reads, bias. Every output
 * element is checked against a per-element bound, outputs are poisoned (NaN) and followed by a guard that must
 * stay untouched, and every declined problem must say why and write nothing. Also: the timed algorithm choice
 * (BFP8_CUBLASLT_TUNE=1), other streams, CUDA graph capture (on a stream seen before and on a new one) and
 * threads.
 *
 * Without a device (or CUDA built), or on a device other than sm_90, it checks that the backend says why and
 * prints "cublaslt: skipped: <why>". BFP8_REQUIRE_CUDA=1 turns a missing device into a failure, as in test_cuda.
 * BFP8_TEST_SMALL=1 runs a few cases of each kind (compute-sanitizer runs). */
#include "check.h"
#include "internal.h"

#include <inttypes.h>

#ifdef BFP8_WITH_CUDA
#include <cuda_runtime_api.h>
#include <pthread.h>
#endif

/* ---- independent decoding (not the library's) ------------------------------------------------------------ */

static double e4m3_value(uint8_t c) {
    int e = (c >> 3) & 15, mant = c & 7;
    double v = e ? ldexp(1.0 + mant / 8.0, e - 7) : ldexp(mant / 8.0, -6);
    return (c & 0x80) ? -v : v;
}

static double half_value(uint16_t h) {
    int e = (h >> 10) & 31, mant = h & 1023;
    double v = e == 31 ? (mant ? NAN : INFINITY) : e ? ldexp(1.0 + mant / 1024.0, e - 15) : ldexp(mant / 1024.0, -14);
    return (h & 0x8000) ? -v : v;
}

static double bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double out_value(const void *y, bfp8_dtype dt, int64_t i) {
    switch (dt) {
    case BFP8_DTYPE_BF16: return bf16_value(((const uint16_t *)y)[i]);
    case BFP8_DTYPE_F16: return half_value(((const uint16_t *)y)[i]);
    default: return ((const float *)y)[i];
    }
}

/* ---- helpers ------------------------------------------------------------------------------------------------ */

/* BFP8_TEST_SMALL=1: a few cases of each kind. */
static bool small_run(void) {
    const char *e = getenv("BFP8_TEST_SMALL");
    return e && e[0] == '1';
}

static void set_env(const char *name, const char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

/* ---- one problem: data, expectations, runs, checks -------------------------------------------------------- */

typedef struct lt_case {
    int64_t m, n, k;
    bfp8_dtype out;
    int bias; /* -1 none, else a bfp8_dtype */
    bfp8_scale_format fmt;
    bfp8_scale_layout a_layout; /* activation scales as handed to the GEMM */
    const char *tail;           /* BFP8_CUBLASLT_TAIL for the run (NULL: unset, auto) */
    bool tune;                  /* BFP8_CUBLASLT_TUNE=1 for the run */
} lt_case;

#define LT(m_, n_, k_, out_, bias_, fmt_) \
    ((lt_case){(m_), (n_), (k_), (out_), (bias_), (bfp8_scale_format)(fmt_), BFP8_LAYOUT_MN_MAJOR_ALIGNED, NULL, false})

static const char *tail_name(const lt_case *c) { return c->tail ? c->tail : "auto"; }

/* Host operands and what the output must be; device copies. */
typedef struct lt_data {
    lt_case c;
    int64_t kb, nb;
    float *x, *w;              /* unquantized (calc_diff) */
    uint8_t *qa, *qb;
    float *sa, *sb;            /* row-major */
    void *bias;                /* host, c.bias dtype */
    double *y64, *mag;         /* [m, n]: the exact product of the quantized operands, and sum |terms| */
    size_t y_bytes, guard_bytes;
    void *da, *db, *dsa, *dsb, *dbias, *dy;
    bfp8_gemm_args args;
} lt_data;


static void fill_act(float *x, int64_t count) {
    /* Magnitudes vary per 128-group so that scales span many binades; 2^-8..2^3 keeps fp16 outputs finite. */
    for (int64_t i = 0; i < count; i++) x[i] = test_randn(ldexpf(1.0f, (int)((i / 128) % 12) - 8));
}

static double host_macs; /* sum of M*N*K checked on the host (printed: the test's cost) */

static bool data_make(lt_data *t, lt_case c) {
    memset(t, 0, sizeof *t);
    t->c = c;
    const int64_t m = c.m, n = c.n, k = c.k, kb = bfp8_ceil_div(k, BFP8_BLOCK), nb = bfp8_ceil_div(n, BFP8_BLOCK);
    t->kb = kb, t->nb = nb;
    t->x = malloc(sizeof(float) * (size_t)(m * k));
    t->w = malloc(sizeof(float) * (size_t)(n * k));
    t->qa = malloc((size_t)(m * k));
    t->qb = malloc((size_t)(n * k));
    t->sa = malloc(sizeof(float) * (size_t)(m * kb));
    t->sb = malloc(sizeof(float) * (size_t)(nb * kb));
    t->y64 = malloc(sizeof(double) * (size_t)(m * n));
    t->mag = malloc(sizeof(double) * (size_t)(m * n));
    if (!t->x || !t->w || !t->qa || !t->qb || !t->sa || !t->sb || !t->y64 || !t->mag) {
        CHECK(false, "out of host memory for m=%" PRId64 " n=%" PRId64 " k=%" PRId64, m, n, k);
        return false;
    }
    fill_act(t->x, m * k);
    for (int64_t i = 0; i < n * k; i++) t->w[i] = test_randn(0.05f);
    bfp8_scales as, bs;
    CHECK_OK(bfp8_scales_init(&as, c.fmt, BFP8_LAYOUT_ROW_MAJOR, m, kb, t->sa));
    CHECK_OK(bfp8_scales_init(&bs, c.fmt, BFP8_LAYOUT_ROW_MAJOR, nb, kb, t->sb));
    CHECK_OK(bfp8_quantize_act(t->x, BFP8_DTYPE_F32, m, k, t->qa, &as, NULL));
    CHECK_OK(bfp8_quantize_weight(t->w, BFP8_DTYPE_F32, n, k, t->qb, &bs, NULL));
    if (c.bias >= 0) {
        t->bias = malloc(bfp8_dtype_size((bfp8_dtype)c.bias) * (size_t)n);
        for (int64_t j = 0; j < n; j++) bfp8_store_f32(t->bias, (bfp8_dtype)c.bias, j, test_randn(1.0f));
    }

    /* The exact product of the quantized operands, in double, with the sum of the magnitudes of its terms. */
    double *a64 = malloc(sizeof(double) * (size_t)(m * k)), *b64 = malloc(sizeof(double) * (size_t)(n * k));
    for (int64_t i = 0; i < m * k; i++) a64[i] = e4m3_value(t->qa[i]);
    for (int64_t i = 0; i < n * k; i++) b64[i] = e4m3_value(t->qb[i]);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (int64_t b = 0; b < kb; b++) {
                const double s = (double)t->sa[i * kb + b] * (double)t->sb[(j / BFP8_BLOCK) * kb + b];
                const double *ar = a64 + i * k, *br = b64 + j * k;
                double part = 0, part_mag = 0;
                for (int64_t q = b * BFP8_BLOCK; q < k && q < (b + 1) * BFP8_BLOCK; q++) {
                    part += ar[q] * br[q];
                    part_mag += fabs(ar[q] * br[q]);
                }
                sum += s * part;
                mag += fabs(s) * part_mag;
            }
            if (t->bias) {
                const double bv = out_value(t->bias, (bfp8_dtype)c.bias, j);
                sum += bv;
                mag += fabs(bv);
            }
            t->y64[i * n + j] = sum;
            t->mag[i * n + j] = mag;
        }
    free(a64), free(b64);
    host_macs += (double)m * (double)n * (double)k;

    /* Device copies: the activation scales in the case's layout; y poisoned (0xFF: NaN in bf16/f16/f32) and
     * followed by a guard of 4 more rows and 256 bytes (0xA5) that no run may touch. */
    size_t sab = bfp8_scales_bytes(c.a_layout, m, kb);
    void *sa2 = calloc(1, sab);
    bfp8_scales as2;
    CHECK_OK(bfp8_scales_init(&as2, c.fmt, c.a_layout, m, kb, sa2));
    CHECK_OK(bfp8_scales_convert(&as, &as2));
    t->y_bytes = (size_t)(m * n) * bfp8_dtype_size(c.out);
    t->guard_bytes = (size_t)(4 * n) * bfp8_dtype_size(c.out) + 256;
    t->da = check_dev_upload(t->qa, (size_t)(m * k));
    t->db = check_dev_upload(t->qb, (size_t)(n * k));
    t->dsa = check_dev_upload(sa2, sab);
    t->dsb = check_dev_upload(t->sb, sizeof(float) * (size_t)(nb * kb));
    t->dbias = t->bias ? check_dev_upload(t->bias, bfp8_dtype_size((bfp8_dtype)c.bias) * (size_t)n) : NULL;
    t->dy = check_dev_filled(t->y_bytes + t->guard_bytes, 0xFF);
    free(sa2);
    t->args = (bfp8_gemm_args){.m = m, .n = n, .k = k, .a = t->da, .b = t->db, .bias = t->dbias,
                               .bias_dtype = c.bias >= 0 ? (bfp8_dtype)c.bias : BFP8_DTYPE_F32, .y = t->dy,
                               .y_dtype = c.out, .device = BFP8_DEVICE_CUDA};
    CHECK_OK(bfp8_scales_init(&t->args.a_scales, c.fmt, c.a_layout, m, kb, t->dsa));
    CHECK_OK(bfp8_scales_init(&t->args.b_scales, c.fmt, BFP8_LAYOUT_ROW_MAJOR, nb, kb, t->dsb));
    return t->da && t->db && t->dsa && t->dsb && t->dy;
}

static void data_poison(lt_data *t);

static void data_free(lt_data *t) {
    free(t->x), free(t->w), free(t->qa), free(t->qb), free(t->sa), free(t->sb), free(t->bias), free(t->y64);
    free(t->mag);
    bfp8_cuda_free(t->da), bfp8_cuda_free(t->db), bfp8_cuda_free(t->dsa), bfp8_cuda_free(t->dsb);
    bfp8_cuda_free(t->dbias), bfp8_cuda_free(t->dy);
    memset(t, 0, sizeof *t);
}

/* Poisons y and writes the guard after it. */
static void data_poison(lt_data *t) {
    uint8_t *h = malloc(t->y_bytes + t->guard_bytes);
    memset(h, 0xFF, t->y_bytes);
    memset(h + t->y_bytes, 0xA5, t->guard_bytes);
    CHECK_OK(bfp8_cuda_upload(t->dy, h, t->y_bytes + t->guard_bytes));
    free(h);
}

/* Downloads y (and the guard); false if the guard was touched. */
static uint8_t *data_download(lt_data *t, bool *guard_ok) {
    uint8_t *h = malloc(t->y_bytes + t->guard_bytes);
    CHECK_OK(bfp8_cuda_download(h, t->dy, t->y_bytes + t->guard_bytes));
    *guard_ok = true;
    for (size_t i = 0; i < t->guard_bytes; i++)
        if (h[t->y_bytes + i] != 0xA5) *guard_ok = false;
    return h;
}

static char *case_label(const lt_data *t, char *buf, size_t size) {
    const lt_case *c = &t->c;
    snprintf(buf, size, "m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " out=%s bias=%s %s %s tail=%s%s", c->m, c->n,
             c->k, bfp8_dtype_name(c->out), c->bias >= 0 ? bfp8_dtype_name((bfp8_dtype)c->bias) : "none",
             bfp8_scale_format_name(c->fmt), bfp8_scale_layout_name(c->a_layout), tail_name(c),
             c->tune ? " tuned" : "");
    return buf;
}

/* Every element of a downloaded output against the fp64 product (a per-element bound: the output's rounding plus
 * 2^-10 of the magnitude of its terms, far below what one wrong block, scale or row gives), the relative Frobenius
 * error against the reference backend (the numerics' (docs/numerics.md) tolerance), and DeepGEMM's calc_diff against the unquantized
 * product. */
static void data_verify(bfp8_dispatcher *d, lt_data *t, const uint8_t *y, bool guard_ok, const char *how) {
    const lt_case *c = &t->c;
    const int64_t m = c->m, n = c->n, k = c->k, kb = t->kb;
    char label[200];
    case_label(t, label, sizeof label);
    CHECK(guard_ok, "%s %s: the bytes after y were written", label, how);
    const double u = c->out == BFP8_DTYPE_BF16 ? ldexp(1, -8) : ldexp(1, -10);
    const double tiny = c->out == BFP8_DTYPE_F16 ? ldexp(1, -24) : 1e-37;
    int64_t unwritten = 0, bad = 0, first_bad = -1;
    for (int64_t i = 0; i < m * n; i++) {
        const double got = out_value(y, c->out, i), want = t->y64[i];
        if (isnan(got)) {
            unwritten++;
            continue;
        }
        if (!(fabs(got - want) <= u * fabs(want) + ldexp(t->mag[i], -10) + tiny)) {
            if (first_bad < 0) first_bad = i;
            bad++;
        }
    }
    CHECK(unwritten == 0, "%s %s: %" PRId64 " of %" PRId64 " outputs unwritten (NaN)", label, how, unwritten, m * n);
    CHECK(bad == 0, "%s %s: %" PRId64 " outputs off the fp64 product, first (%" PRId64 ", %" PRId64 "): %.9g vs %.9g",
          label, how, bad, first_bad >= 0 ? first_bad / n : 0, first_bad >= 0 ? first_bad % n : 0,
          first_bad >= 0 ? out_value(y, c->out, first_bad) : 0.0, first_bad >= 0 ? t->y64[first_bad] : 0.0);

    /* The reference backend (f32 output: one rounding of its double sum) on every row of small problems, else on
     * the first, the last four (where M % 4 runs differently) and a random sample; it must agree with the fp64
     * product computed here, and the output must be within the numerics' (docs/numerics.md) tolerance of it. */
    const bool all_rows = (double)m * (double)n * (double)k <= 3e7;
    int64_t rows[24];
    int64_t nrows = 0;
    if (all_rows) nrows = m;
    else {
        rows[nrows++] = 0;
        for (int64_t r = m - 4 > 1 ? m - 4 : 1; r < m; r++) rows[nrows++] = r;
        while (nrows < 24) rows[nrows++] = (int64_t)(test_rand_u64() % (uint64_t)m);
    }
    float *yr = malloc(sizeof(float) * (size_t)n);
    test_frobenius fro = {0};
    int64_t ref_off = 0;
    test_calc_diff cd = {0}, cd_ref = {0};
    for (int64_t ri = 0; ri < nrows; ri++) {
        const int64_t row = all_rows ? ri : rows[ri];
        bfp8_gemm_args h = {.m = 1, .n = n, .k = k, .a = t->qa + row * k, .b = t->qb, .bias = t->bias,
                            .bias_dtype = t->args.bias_dtype, .y = yr, .y_dtype = BFP8_DTYPE_F32,
                            .device = BFP8_DEVICE_CPU};
        CHECK_OK(bfp8_scales_init(&h.a_scales, c->fmt, BFP8_LAYOUT_ROW_MAJOR, 1, kb, t->sa + row * kb));
        CHECK_OK(bfp8_scales_init(&h.b_scales, c->fmt, BFP8_LAYOUT_ROW_MAJOR, t->nb, kb, t->sb));
        CHECK_OK(bfp8_backend_ref.gemm(&bfp8_backend_ref, &h));
        for (int64_t j = 0; j < n; j++) {
            const double ref = yr[j], want = t->y64[row * n + j], got = out_value(y, c->out, row * n + j);
            if (!(fabs(ref - want) <= 1.2e-7 * fabs(want) + 1e-12 * t->mag[row * n + j] + 1e-37)) ref_off++;
            test_frobenius_add(&fro, got, ref);
            double exact = t->bias ? out_value(t->bias, (bfp8_dtype)c->bias, j) : 0.0;
            for (int64_t q = 0; q < k; q++) exact += (double)t->x[row * k + q] * (double)t->w[j * k + q];
            test_calc_diff_add(&cd, got, exact);
            test_calc_diff_add(&cd_ref, ref, exact);
        }
    }
    free(yr);
    CHECK(ref_off == 0, "%s: the reference backend differs from the fp64 product in %" PRId64 " outputs", label,
          ref_off);
    const double rel = test_frobenius_value_normal(&fro, c->out);
    const double tol = test_tolerance(c->out, BFP8_DEVICE_CUDA);
    CHECK(rel <= tol, "%s %s: relative Frobenius error %.3g against the reference > %.3g", label, how, rel, tol);
    if (k >= 256 && nrows * n >= 1024) test_calc_diff_check(test_calc_diff_value(&cd), test_calc_diff_value(&cd_ref), label);
    if (getenv("BFP8_TEST_VERBOSE")) printf("  %-80s %s rel=%.2e\n", label, how, rel);
}

static int g_run, g_declined;

/* One strict run on the stream with the case's environment; returns the status. */
static bfp8_status data_run(bfp8_dispatcher *d, lt_data *t, void *stream) {
    set_env("BFP8_CUBLASLT_TAIL", t->c.tail);
    set_env("BFP8_CUBLASLT_TUNE", t->c.tune ? "1" : NULL);
    t->args.stream = stream;
    bfp8_status st = bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "cublaslt");
    if (st == BFP8_OK) st = bfp8_gemm(d, &t->args);
    if (st == BFP8_OK) st = bfp8_cuda_synchronize(stream);
    set_env("BFP8_CUBLASLT_TAIL", NULL);
    set_env("BFP8_CUBLASLT_TUNE", NULL);
    return st;
}

static const bfp8_backend *cublaslt(bfp8_dispatcher *d) { return bfp8_dispatcher_find(d, "cublaslt"); }

static bfp8_problem problem_of(const lt_case *c) {
    return (bfp8_problem){.device = BFP8_DEVICE_CUDA, .arch = bfp8_cuda_arch(), .m = c->m, .n = c->n,
                          .k = c->k, .out_dtype = c->out, .scale_format = c->fmt,
                          .a_layouts = BFP8_BIT(c->a_layout), .b_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR),
                          .has_bias = c->bias >= 0,
                          .bias_dtype = c->bias >= 0 ? (bfp8_dtype)c->bias : BFP8_DTYPE_F32};
}

/* A case the caps accept: run it twice (the second run finds its plan cached) into poisoned outputs. */
static void check_case(bfp8_dispatcher *d, lt_case c) {
    bfp8_problem p = problem_of(&c);
    char reason[BFP8_REASON_MAX];
    bool ok = bfp8_backend_check(cublaslt(d), &p, reason, sizeof reason);
    lt_data t;
    if (!data_make(&t, c)) return;
    char label[200];
    CHECK(ok, "%s: declined: %s", case_label(&t, label, sizeof label), reason);
    if (ok) {
        g_run++;
        for (int rep = 0; rep < 2; rep++) {
            data_poison(&t);
            CHECK_OK(data_run(d, &t, NULL));
            bool guard_ok;
            uint8_t *y = data_download(&t, &guard_ok);
            data_verify(d, &t, y, guard_ok, rep ? "(cached plan)" : "(first call)");
            free(y);
        }
    }
    data_free(&t);
}

/* A case the backend must decline: the check says why (the reason names `want`), a strict call fails with
 * BFP8_ERR_UNSUPPORTED and the poisoned output stays as it was. */
static void check_declined(bfp8_dispatcher *d, lt_case c, const char *want) {
    bfp8_problem p = problem_of(&c);
    char reason[BFP8_REASON_MAX];
    bool ok = bfp8_backend_check(cublaslt(d), &p, reason, sizeof reason);
    CHECK(!ok, "m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " out=%s %s accepted, expected a decline about '%s'", c.m, c.n,
          c.k, bfp8_dtype_name(c.out), bfp8_scale_layout_name(c.a_layout), want);
    if (ok) return;
    g_declined++;
    CHECK(strstr(reason, want) != NULL, "declined with '%s', expected a reason about '%s'", reason, want);
    if (c.k == 0 || c.a_layout == BFP8_LAYOUT_ROW_MAJOR || c.a_layout == BFP8_LAYOUT_PACKED_UE8M0) return;
    lt_data t;
    if (!data_make(&t, c)) return;
    data_poison(&t);
    CHECK_STATUS(data_run(d, &t, NULL), BFP8_ERR_UNSUPPORTED);
    bool guard_ok;
    uint8_t *y = data_download(&t, &guard_ok);
    size_t written = 0;
    for (size_t i = 0; i < t.y_bytes; i++) written += y[i] != 0xFF;
    CHECK(written == 0 && guard_ok, "declined m=%" PRId64 " k=%" PRId64 ": %zu output bytes written", c.m, c.k,
          written);
    free(y);
    data_free(&t);
}

/* ---- the boundaries ---------------------------------------------------------------------------------------- */

static void check_m(bfp8_dispatcher *d) {
    /* 1..5, then 4k - 1, 4k, 4k + 1 around a few k; every ragged M in both ways and the automatic choice. */
    static const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 129, 255, 257, 1023, 1025,
                                 4095, 4096, 4097};
    static const char *tails[] = {NULL, "pad", "split"};
    const size_t count = small_run() ? 6 : sizeof ms / sizeof ms[0];
    for (size_t i = 0; i < count; i++) {
        const int64_t m = ms[i];
        const int64_t n = m >= 1000 ? 64 : 576, k = m >= 1000 ? 256 : 1152; /* ceil(K/128) = 2 or 9 */
        for (int ti = 0; ti < 3; ti++) {
            if (ti > 0 && m % 4 == 0) break;
            if (ti == 2 && m < 4) break; /* split needs 4 rows */
            lt_case c = LT(m, n, k, (i + ti) % 2 ? BFP8_DTYPE_F16 : BFP8_DTYPE_BF16, -1, (i + ti) % 2);
            c.tail = tails[ti];
            c.a_layout = (i + ti) % 3 == 2 ? BFP8_LAYOUT_MN_MAJOR : BFP8_LAYOUT_MN_MAJOR_ALIGNED;
            if (i % 4 == 1) c.bias = c.out;
            check_case(d, c);
        }
    }
    /* The automatic choice at a size where split is the cheaper way (and pad forced on the same problem). */
    if (!small_run()) {
        lt_case c = LT(2049, 576, 1024, BFP8_DTYPE_BF16, BFP8_DTYPE_BF16, 0);
        check_case(d, c);
        c.tail = "pad";
        check_case(d, c);
    }
}

static void check_k(bfp8_dispatcher *d) {
    /* K = 128*j, j = 1..20: ceil(K/128) % 4 != 0 takes the padded weight-scale stride. M ragged and not. */
    const int jmax = small_run() ? 5 : 20;
    for (int j = 1; j <= jmax; j++)
        for (int mi = 0; mi < 2; mi++) {
            lt_case c = LT(mi ? 8 : 5, 576, 128 * j, (j + mi) % 2 ? BFP8_DTYPE_F16 : BFP8_DTYPE_BF16, -1, j % 2);
            if (j % 3 == 0) c.bias = c.out;
            if (j % 5 == 0) c.a_layout = BFP8_LAYOUT_MN_MAJOR;
            if (mi == 0 && j % 2) c.tail = "split";
            check_case(d, c);
        }
    /* Ragged K (a partial last block), multiples of 16. */
    static const int64_t ks[] = {144, 400, 496, 656, 2320, 7184};
    for (size_t i = 0; i < (small_run() ? 2 : sizeof ks / sizeof ks[0]); i++)
        check_case(d, LT((int64_t)(3 + i), 320, ks[i], i % 2 ? BFP8_DTYPE_F16 : BFP8_DTYPE_BF16, -1, i % 2));
}

static void check_n(bfp8_dispatcher *d) {
    /* 64 + 128j (a half block at the end), 2112 and 576 (shards that cut a block), and the smallest N. */
    static const int64_t ns[] = {64, 192, 320, 448, 704, 1088, 2112, 576, 8, 136, 2120};
    for (size_t i = 0; i < (small_run() ? 3 : sizeof ns / sizeof ns[0]); i++)
        check_case(d, LT((int64_t)(i % 5 + 1), ns[i], 512, i % 2 ? BFP8_DTYPE_F16 : BFP8_DTYPE_BF16,
                         i % 3 == 0 ? (int)(i % 2 ? BFP8_DTYPE_F16 : BFP8_DTYPE_BF16) : -1, (i / 2) % 2));
}

/* DeepSeek-R1 shapes at decode sizes, and the tensor-parallel shard and K of issue 31. */
static void check_model_shapes(bfp8_dispatcher *d) {
    if (small_run()) return;
    check_case(d, LT(1, 2112, 7168, BFP8_DTYPE_BF16, -1, 0));
    check_case(d, LT(3, 7168, 2048, BFP8_DTYPE_BF16, BFP8_DTYPE_BF16, 1));
    check_case(d, LT(4, 576, 7168, BFP8_DTYPE_F16, -1, 0));
    check_case(d, LT(2, 7168, 2304, BFP8_DTYPE_BF16, -1, 0)); /* ceil(K/128) = 18 */
    check_case(d, LT(17, 7168, 2304, BFP8_DTYPE_F16, BFP8_DTYPE_F16, 1));
}

static void check_dtypes_and_bias(bfp8_dispatcher *d) {
    const bfp8_dtype outs[2] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16};
    for (int o = 0; o < 2; o++)
        for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT; f++)
            for (int b = -1; b < 3; b++) {
                lt_case c = LT(6, 264, 640, outs[o], b, f);
                if (b == BFP8_DTYPE_F32) {
                    check_declined(d, c, "bias dtype f32");
                } else if (b >= 0 && b != (int)outs[o]) {
                    check_declined(d, c, "must be");
                } else {
                    check_case(d, c);
                }
            }
    /* f32 output: declined (it misses the numerics' (docs/numerics.md) 2.5e-4; the caps say so), with and without a bias. */
    check_declined(d, LT(4, 256, 512, BFP8_DTYPE_F32, -1, 0), "output dtype f32");
    check_declined(d, LT(5, 256, 512, BFP8_DTYPE_F32, BFP8_DTYPE_BF16, 1), "output dtype f32");
}

static void check_declines(bfp8_dispatcher *d) {
    check_declined(d, LT(8, 256, 127, BFP8_DTYPE_BF16, -1, 0), "K=127");
    check_declined(d, LT(8, 256, 112, BFP8_DTYPE_BF16, -1, 0), "minimum K=128");
    check_declined(d, LT(8, 256, 136, BFP8_DTYPE_BF16, -1, 0), "multiple of 16");
    check_declined(d, LT(8, 256, 0, BFP8_DTYPE_BF16, -1, 0), "K=0");
    check_declined(d, LT(12, 2116, 512, BFP8_DTYPE_BF16, -1, 0), "multiple of 8");
    check_declined(d, LT(4, 4, 512, BFP8_DTYPE_F16, -1, 1), "multiple of 8");
    lt_case c = LT(4, 256, 512, BFP8_DTYPE_BF16, -1, 0);
    c.a_layout = BFP8_LAYOUT_ROW_MAJOR;
    check_declined(d, c, "activation scales");
    c.fmt = BFP8_SCALE_UE8M0;
    c.a_layout = BFP8_LAYOUT_PACKED_UE8M0;
    check_declined(d, c, "activation scales");
    /* Weight scales in a layout other than row-major. */
    bfp8_problem p = problem_of(&(lt_case){4, 256, 512, BFP8_DTYPE_BF16, -1, BFP8_SCALE_FP32,
                                           BFP8_LAYOUT_MN_MAJOR_ALIGNED, NULL, false});
    p.b_layouts = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED);
    char reason[BFP8_REASON_MAX];
    CHECK(!bfp8_backend_check(cublaslt(d), &p, reason, sizeof reason) && strstr(reason, "weight scales"),
          "mn_major_aligned weight scales: '%s'", reason);
}

/* The switches are checked: a value that is not one of theirs is an error, never ignored. */
static void check_env(bfp8_dispatcher *d) {
    lt_data t;
    if (!data_make(&t, LT(5, 64, 256, BFP8_DTYPE_BF16, -1, 0))) return;
    static const char *names[2] = {"BFP8_CUBLASLT_TUNE", "BFP8_CUBLASLT_TAIL"};
    static const char *bad[2] = {"yes", "both"};
    for (int i = 0; i < 2; i++) {
        setenv(names[i], bad[i], 1);
        CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "cublaslt"));
        CHECK_STATUS(bfp8_gemm(d, &t.args), BFP8_ERR_INVALID_ARGUMENT);
        CHECK(strstr(bfp8_last_error(), names[i]) != NULL, "%s=%s: '%s'", names[i], bad[i], bfp8_last_error());
        unsetenv(names[i]);
    }
    data_free(&t);
}

/* The timed choice: tuned plans on both ways of M % 4, a cached tuned plan, then the heuristic's plan again. */
static void check_tune(bfp8_dispatcher *d) {
    lt_case cs[] = {LT(16, 2112, 1536, BFP8_DTYPE_BF16, -1, 0), LT(7, 576, 2304, BFP8_DTYPE_F16, BFP8_DTYPE_F16, 1),
                    LT(130, 448, 1024, BFP8_DTYPE_BF16, BFP8_DTYPE_BF16, 0)};
    cs[1].tail = "pad";
    cs[2].tail = "split";
    for (size_t i = 0; i < (small_run() ? 1 : sizeof cs / sizeof cs[0]); i++) {
        cs[i].tune = true;
        check_case(d, cs[i]);
        cs[i].tune = false;
        check_case(d, cs[i]);
    }
}

/* The weight path end to end: a K whose block count is not a multiple of 4, prepared for cublaslt and run through
 * bfp8_linear (strict), on the GPU-quantized activations. */
static void check_linear(bfp8_dispatcher *d) {
    const int64_t n = 576, k = 2304;
    const int64_t ms[2] = {3, 17};
    float *wf = malloc(sizeof(float) * (size_t)(n * k));
    for (int64_t i = 0; i < n * k; i++) wf[i] = test_randn(0.05f);
    bfp8_weight *w = NULL;
    CHECK_OK(bfp8_weight_quantize(wf, BFP8_DTYPE_F32, n, k, BFP8_SCALE_FP32, &w, NULL));
    if (!w) {
        free(wf);
        return;
    }
    CHECK_OK(bfp8_weight_prepare(w, d, "cublaslt"));
    const uint8_t *qb;
    bfp8_scales sb;
    CHECK_OK(bfp8_weight_view(w, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &qb, &sb));
    for (int mi = 0; mi < 2; mi++) {
        const int64_t m = ms[mi], kb = bfp8_ceil_div(k, BFP8_BLOCK);
        float *x = malloc(sizeof(float) * (size_t)(m * k)), *sa = malloc(sizeof(float) * (size_t)(m * kb));
        uint8_t *qa = malloc((size_t)(m * k));
        fill_act(x, m * k);
        bfp8_scales as;
        CHECK_OK(bfp8_scales_init(&as, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, m, kb, sa));
        CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, m, k, qa, &as, NULL)); /* the GPU's bytes (test_cuda) */
        void *dx = check_dev_upload(x, sizeof(float) * (size_t)(m * k));
        size_t yb = (size_t)(m * n) * 2;
        void *dy = check_dev_filled(yb, 0xFF);
        bfp8_linear_args la = {.x = dx, .x_dtype = BFP8_DTYPE_F32, .m = m, .y = dy, .y_dtype = BFP8_DTYPE_BF16,
                               .device = BFP8_DEVICE_CUDA};
        CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "cublaslt"));
        uint64_t calls = bfp8_dispatcher_calls(d, "cublaslt");
        CHECK_OK(bfp8_linear(d, w, &la));
        CHECK_OK(bfp8_cuda_synchronize(NULL));
        CHECK(bfp8_dispatcher_calls(d, "cublaslt") == calls + 1, "linear K=2304 did not run on cublaslt");
        uint16_t *y = malloc(yb);
        CHECK_OK(bfp8_cuda_download(y, dy, yb));
        int64_t bad = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = 0, mag = 0;
                for (int64_t b = 0; b < kb; b++) {
                    double part = 0, part_mag = 0;
                    for (int64_t q = b * BFP8_BLOCK; q < (b + 1) * BFP8_BLOCK && q < k; q++) {
                        const double t = e4m3_value(qa[i * k + q]) * e4m3_value(qb[j * k + q]);
                        part += t;
                        part_mag += fabs(t);
                    }
                    const double s = (double)sa[i * kb + b] * (double)bfp8_scales_at(&sb, j / BFP8_BLOCK, b);
                    want += s * part;
                    mag += fabs(s) * part_mag;
                }
                const double got = bf16_value(y[i * n + j]);
                if (!(fabs(got - want) <= ldexp(fabs(want), -8) + ldexp(mag, -10) + 1e-37)) bad++;
            }
        CHECK(bad == 0, "linear m=%" PRId64 " n=%" PRId64 " k=%" PRId64 ": %" PRId64 " outputs off", m, n, k, bad);
        free(x), free(sa), free(qa), free(y);
        bfp8_cuda_free(dx), bfp8_cuda_free(dy);
    }
    bfp8_weight_free(w);
    free(wf);
}

#ifdef BFP8_WITH_CUDA
/* ---- streams, graphs, threads ------------------------------------------------------------------------------ */

#define CUDA_CHECK(call)                                                                                         \
    do {                                                                                                         \
        cudaError_t e_ = (call);                                                                                 \
        CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                                       \
    } while (0)

/* Outputs on another stream, and from a graph captured on a stream the backend has served before and on one it
 * has not (its memory then comes from the graph), each replayed twice: byte-identical to the eager run, which is
 * checked in full. */
static void check_streams_and_graphs(bfp8_dispatcher *d) {
    lt_case cs[] = {LT(5, 576, 1152, BFP8_DTYPE_BF16, BFP8_DTYPE_BF16, 0), LT(64, 2112, 512, BFP8_DTYPE_F16, -1, 1),
                    LT(131, 320, 2304, BFP8_DTYPE_BF16, -1, 1)};
    cs[0].tail = "pad";
    cs[2].tail = "split";
    for (size_t i = 0; i < (small_run() ? 1 : sizeof cs / sizeof cs[0]); i++)
        for (int tuned = 0; tuned < 2; tuned++) {
            cs[i].tune = tuned;
            lt_data t;
            if (!data_make(&t, cs[i])) return;
            cudaStream_t warm = NULL, fresh = NULL;
            CUDA_CHECK(cudaStreamCreateWithFlags(&warm, cudaStreamNonBlocking));
            CUDA_CHECK(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking));
            data_poison(&t);
            CHECK_OK(data_run(d, &t, warm));
            bool guard_ok;
            uint8_t *eager = data_download(&t, &guard_ok);
            data_verify(d, &t, eager, guard_ok, "(own stream)");
            for (int g = 0; g < 2; g++) {
                cudaStream_t s = g ? fresh : warm;
                data_poison(&t);
                set_env("BFP8_CUBLASLT_TAIL", t.c.tail);
                set_env("BFP8_CUBLASLT_TUNE", t.c.tune ? "1" : NULL);
                t.args.stream = s;
                cudaGraph_t graph = NULL;
                cudaGraphExec_t exec = NULL;
                CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "cublaslt"));
                CHECK_OK(bfp8_gemm(d, &t.args));
                CUDA_CHECK(cudaStreamEndCapture(s, &graph));
                set_env("BFP8_CUBLASLT_TAIL", NULL);
                set_env("BFP8_CUBLASLT_TUNE", NULL);
                if (graph) CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
                for (int rep = 0; rep < 2 && exec; rep++) {
                    if (rep) data_poison(&t);
                    CUDA_CHECK(cudaGraphLaunch(exec, s));
                    CUDA_CHECK(cudaStreamSynchronize(s));
                    uint8_t *y = data_download(&t, &guard_ok);
                    CHECK(guard_ok && memcmp(y, eager, t.y_bytes) == 0,
                          "m=%" PRId64 " n=%" PRId64 " tuned=%d: the graph captured on a %s stream, replay %d, "
                          "differs from the eager output", t.c.m, t.c.n, tuned, g ? "new" : "served", rep);
                    free(y);
                }
                if (exec) cudaGraphExecDestroy(exec);
                if (graph) cudaGraphDestroy(graph);
            }
            free(eager);
            cudaStreamDestroy(warm);
            cudaStreamDestroy(fresh);
            data_free(&t);
        }
}

typedef struct thread_job {
    bfp8_dispatcher *d;
    lt_data *cases;
    int ncases, reps;
    const uint8_t *const *want;
    int mismatches;
    bfp8_status status;
} thread_job;

/* Each thread runs every case on its own stream into its own outputs; results must equal the single-threaded
 * ones. The dispatcher's policy is not touched here (it is shared): the strict policy was set before. */
static void *thread_main(void *arg) {
    thread_job *j = arg;
    cudaStream_t s = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        j->status = BFP8_ERR_DEVICE;
        return NULL;
    }
    for (int r = 0; r < j->reps && j->status == BFP8_OK; r++)
        for (int i = 0; i < j->ncases && j->status == BFP8_OK; i++) {
            lt_data *t = &j->cases[i];
            void *y = NULL;
            bfp8_gemm_args g = t->args;
            j->status = bfp8_cuda_malloc(t->y_bytes, &y);
            g.y = y;
            g.stream = s;
            if (j->status == BFP8_OK) j->status = bfp8_gemm(j->d, &g);
            if (j->status == BFP8_OK) j->status = bfp8_cuda_synchronize(s);
            uint8_t *h = malloc(t->y_bytes);
            if (j->status == BFP8_OK) j->status = bfp8_cuda_download(h, y, t->y_bytes);
            if (j->status == BFP8_OK && memcmp(h, j->want[i], t->y_bytes) != 0) j->mismatches++;
            free(h);
            bfp8_cuda_free(y);
        }
    cudaStreamDestroy(s);
    return NULL;
}

static void check_threads(bfp8_dispatcher *d) {
    enum { THREADS = 4, CASES = 3 };
    lt_case cs[CASES] = {LT(3, 576, 1024, BFP8_DTYPE_BF16, -1, 0), LT(32, 448, 2304, BFP8_DTYPE_F16, -1, 1),
                         LT(9, 2112, 512, BFP8_DTYPE_BF16, BFP8_DTYPE_BF16, 0)};
    lt_data t[CASES];
    uint8_t *want[CASES];
    for (int i = 0; i < CASES; i++) {
        if (!data_make(&t[i], cs[i])) return;
        data_poison(&t[i]);
        CHECK_OK(data_run(d, &t[i], NULL));
        bool guard_ok;
        want[i] = data_download(&t[i], &guard_ok);
        data_verify(d, &t[i], want[i], guard_ok, "(before the threads)");
    }
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "cublaslt"));
    pthread_t th[THREADS];
    thread_job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (thread_job){.d = d, .cases = t, .ncases = CASES, .reps = small_run() ? 1 : 4,
                               .want = (const uint8_t *const *)want, .status = BFP8_OK};
        CHECK(pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].status == BFP8_OK && jobs[i].mismatches == 0, "thread %d: %s, %d outputs differ", i,
              bfp8_status_name(jobs[i].status), jobs[i].mismatches);
    }
    for (int i = 0; i < CASES; i++) {
        free(want[i]);
        data_free(&t[i]);
    }
}
#endif

/* ---- without a usable device ------------------------------------------------------------------------------- */

static void check_unusable(const char *why, bool have_device) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (!d) return;
    const bfp8_backend *be = cublaslt(d);
    if (!have_device) {
        /* Not registered: listed as unavailable with the reason. */
        CHECK(be == NULL, "cublaslt registered without a device");
        bool listed = false;
        for (size_t i = 0; i < bfp8_dispatcher_unavailable_count(d); i++) {
            const char *name, *reason;
            CHECK_OK(bfp8_dispatcher_unavailable_at(d, i, &name, &reason));
            if (strcmp(name, "cublaslt") == 0) {
                listed = true;
                CHECK(strstr(reason, why) != NULL, "cublaslt unavailable for '%s', expected '%s'", reason, why);
            }
        }
        CHECK(listed, "cublaslt is not listed as unavailable");
    } else if (be) {
        /* Registered on a device it cannot use: every problem is declined with the architecture as the reason. */
        lt_case c = LT(4, 256, 512, BFP8_DTYPE_BF16, -1, 0);
        bfp8_problem p = problem_of(&c);
        char reason[BFP8_REASON_MAX];
        CHECK(!bfp8_backend_check(be, &p, reason, sizeof reason) && strstr(reason, "sm_90"),
              "cublaslt on sm_%d: '%s'", p.arch, reason);
    }
    bfp8_dispatcher_free(d);
}

int main(void) {
    test_seed();
    char why[BFP8_REASON_MAX];
    if (!bfp8_cuda_available(why, sizeof why)) {
        check_unusable(why, false);
        const char *req = getenv("BFP8_REQUIRE_CUDA");
        CHECK(!(req && req[0] == '1'), "BFP8_REQUIRE_CUDA=1 but no device: %s", why);
        printf("cublaslt: skipped: %s\n", why);
        return TEST_SUMMARY("cublaslt");
    }
    if (bfp8_cuda_arch() != 90) {
        check_unusable(why, true);
        printf("cublaslt: skipped: the device is sm_%d, the backend runs on sm_90 only\n", bfp8_cuda_arch());
        return TEST_SUMMARY("cublaslt");
    }
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (!d || !cublaslt(d)) {
        CHECK(false, "cublaslt is not registered on sm_90");
        return TEST_SUMMARY("cublaslt");
    }
    check_declines(d);
    check_dtypes_and_bias(d);
    check_m(d);
    check_k(d);
    check_n(d);
    check_model_shapes(d);
    check_env(d);
    check_tune(d);
    check_linear(d);
#ifdef BFP8_WITH_CUDA
    check_streams_and_graphs(d);
    check_threads(d);
#endif
    test_calc_diff_mean_check("cublaslt");
    printf("cublaslt: %d cases run, %d declined, %.2g multiply-adds checked on the host\n", g_run, g_declined,
           host_macs);
    bfp8_dispatcher_free(d);
    return TEST_SUMMARY("cublaslt");
}
