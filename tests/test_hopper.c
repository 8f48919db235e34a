/* The sm_90a backend `hopper`: its declared capabilities and priority (without a device too), and on an H200 its
 * results against an independent double computation of the same quantized inputs (docs/numerics.md tolerances) and
 * calc_diff against the unquantized product: ragged M x all eight DeepSeek-R1 (N, K) shapes, K and N at their
 * boundaries, every output and bias dtype, both scale formats, the swapped (decode) and normal paths with and without
 * split-K, poisoned outputs, run-to-run determinism, refusals, bfp8_linear on the device, and stream-K calls on a
 * partition of the SMs (a green context). Option --small: a few small cases, for compute-sanitizer. Without a device
 * it prints "hopper: skipped: <reason>" and checks only what needs none. The planner's own tests (golden plans, unit
 * grids) are tests/test_hopper_plan.c, which needs no CUDA; scripts/gpu-check.sh runs this suite under each forcing
 * knob (docs/hopper-knobs.md). Timing is `blockfp8 bench`'s job. */
#include "check.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef BFP8_WITH_CUDA
#include <cuda.h>         /* green contexts (a partition of the SMs), reached through the runtime's entry points */
#include <cuda_runtime.h> /* streams and graphs, for the capture test */
#include <cudaTypedefs.h>

#include "backends/hopper/hopper.h" /* bfp8_hopper_backend, the planner */
#include "hopper_h200.h"

static const int64_t dsr1_shapes[8][2] = {{2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384},
                                          {36864, 7168}, {7168, 18432}, {4096, 7168}, {7168, 2048}};

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

static bfp8_problem problem_of(int arch, int64_t m, int64_t n, int64_t k, bfp8_dtype out, bfp8_scale_format f,
                               uint32_t a_layouts, uint32_t b_layouts, bool bias, bfp8_dtype bias_dtype) {
    bfp8_problem p = {.device = BFP8_DEVICE_CUDA, .arch = arch, .m = m, .n = n, .k = k, .out_dtype = out,
                      .scale_format = f, .a_layouts = a_layouts, .b_layouts = b_layouts, .has_bias = bias,
                      .bias_dtype = bias_dtype};
    return p;
}

/* ------------------------------------------------------------------------------------------------------------------
 * Capabilities: pure checks, no device needed.
 * ---------------------------------------------------------------------------------------------------------------- */
static void test_caps(const bfp8_backend *b) {
    CHECK(b && strcmp(b->name, "hopper") == 0, "backend name");
    CHECK(b->gemm != NULL, "gemm hook");
    CHECK(b->caps.device == BFP8_DEVICE_CUDA && b->caps.min_arch == 90 && b->caps.max_arch == 90, "device/arch");
    /* auto ranks it by the measured table (tests/test_golden_dispatch.c pins that); outside the table by its
     * priority, above cublaslt's 30, with no shape rule of its own. */
    CHECK(b->caps.priority == 35 && !b->priority_for, "priority %d", b->caps.priority);
    const uint32_t aal = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED), brm = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR);
    char why[BFP8_REASON_MAX];
    bfp8_problem p = problem_of(90, 1, 2112, 7168, BFP8_DTYPE_BF16, BFP8_SCALE_FP32, aal, brm, false, BFP8_DTYPE_F32);
    CHECK(bfp8_backend_check(b, &p, why, sizeof why), "DSR1 decode shape refused: %s", why);
    p.scale_format = BFP8_SCALE_UE8M0;
    CHECK(bfp8_backend_check(b, &p, why, sizeof why), "ue8m0 refused: %s", why);
    /* Arch boundaries: exactly 90. */
    p.arch = 89;
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why) && why[0], "sm_89 accepted");
    p.arch = 100;
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why) && why[0], "sm_100 accepted");
    p.arch = 90;
    /* K boundaries: 16 is the least and the step. */
    p.k = 16;
    CHECK(bfp8_backend_check(b, &p, why, sizeof why), "K=16 refused: %s", why);
    p.k = 32;
    CHECK(bfp8_backend_check(b, &p, why, sizeof why), "K=32 refused: %s", why);
    p.k = 8;
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why), "K=8 accepted");
    p.k = 24;
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why), "K=24 accepted");
    p.k = 7168 + 8;
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why), "K=7176 accepted");
    p.k = 7168;
    /* Any M and N. */
    p.m = 3, p.n = 1;
    CHECK(bfp8_backend_check(b, &p, why, sizeof why), "M=3 N=1 refused: %s", why);
    p.m = 4095, p.n = 2113;
    CHECK(bfp8_backend_check(b, &p, why, sizeof why), "M=4095 N=2113 refused: %s", why);
    /* Output dtypes: the three float ones. */
    p.out_dtype = BFP8_DTYPE_F16;
    CHECK(bfp8_backend_check(b, &p, why, sizeof why), "f16 out refused: %s", why);
    p.out_dtype = BFP8_DTYPE_F32;
    CHECK(bfp8_backend_check(b, &p, why, sizeof why), "f32 out refused: %s", why);
    p.out_dtype = BFP8_DTYPE_E4M3;
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why), "e4m3 out accepted");
    p.out_dtype = BFP8_DTYPE_BF16;
    /* Scale layouts: activations only MN-major aligned, weights only row-major. */
    p.a_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR) | BFP8_BIT(BFP8_LAYOUT_MN_MAJOR);
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why), "row-major activation scales accepted");
    p.a_layouts = aal;
    p.b_layouts = BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED);
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why), "mn-major weight scales accepted");
    p.b_layouts = brm;
    p.scale_format = BFP8_SCALE_UE8M0;
    p.a_layouts = BFP8_BIT(BFP8_LAYOUT_PACKED_UE8M0);
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why), "packed ue8m0 accepted");
    p.a_layouts = aal;
    p.scale_format = BFP8_SCALE_FP32;
    /* Bias: f32, bf16, f16. */
    p.has_bias = true;
    for (int dt = 0; dt < 3; dt++) {
        p.bias_dtype = (bfp8_dtype[]){BFP8_DTYPE_F32, BFP8_DTYPE_BF16, BFP8_DTYPE_F16}[dt];
        CHECK(bfp8_backend_check(b, &p, why, sizeof why), "bias %s refused: %s", bfp8_dtype_name(p.bias_dtype), why);
    }
    p.device = BFP8_DEVICE_CPU;
    p.arch = 0;
    CHECK(!bfp8_backend_check(b, &p, why, sizeof why), "CPU problem accepted");
}

/* bfp8_gemm_args::act_from_prior_kernel reaches the problem, and so hopper's launch, on CUDA only (no
 * device needed: the pointers are never touched). */
static void test_prior_kernel_flag(void) {
    /* Distinct buffers: the arguments are validated, y overlapping an operand included. */
    static uint8_t a[4 * 128], b[128 * 128];
    static uint16_t y[4 * 128];
    static float sa[4], sb[1];
    bfp8_gemm_args g = {.m = 4, .n = 128, .k = 128, .a = a, .b = b, .y = y, .y_dtype = BFP8_DTYPE_BF16,
                        .device = BFP8_DEVICE_CUDA, .act_from_prior_kernel = true};
    bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR_ALIGNED, 4, 1, sa);
    bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, sb);
    bfp8_problem p;
    CHECK_OK(bfp8_problem_from_gemm(&g, &p));
    CHECK(p.act_from_prior_kernel, "a CUDA GEMM whose activations come from the kernel before: flag lost");
    g.act_from_prior_kernel = false;
    CHECK_OK(bfp8_problem_from_gemm(&g, &p));
    CHECK(!p.act_from_prior_kernel, "a plain CUDA GEMM claims a kernel before");
    g.act_from_prior_kernel = true;
    g.device = BFP8_DEVICE_CPU;
    CHECK_OK(bfp8_problem_from_gemm(&g, &p));
    CHECK(!p.act_from_prior_kernel, "a CPU GEMM claims a kernel before");
}

/* ------------------------------------------------------------------------------------------------------------------
 * Device data
 * ---------------------------------------------------------------------------------------------------------------- */
typedef struct dev_buf {
    void *p;
    size_t bytes;
} dev_buf;

static void dev_free(dev_buf *d) {
    if (d->p) bfp8_cuda_free(d->p);
    d->p = NULL;
    d->bytes = 0;
}

/* `bytes` of `host` (NULL: none) into d, which grows when it is too small. */
static bool dev_put(dev_buf *d, const void *host, size_t bytes) {
    if (d->bytes < bytes) {
        dev_free(d);
        if (!(d->p = check_dev_upload(host, bytes))) return false;
        d->bytes = bytes;
        return true;
    }
    if (host && bytes) {
        bfp8_status st = bfp8_cuda_upload(d->p, host, bytes);
        CHECK(st == BFP8_OK, "upload: %s", bfp8_last_error());
        return st == BFP8_OK;
    }
    return true;
}

/* A weight (quantized on the host with the library's quantizer) and enough activations for max_m rows. */
typedef struct operands {
    int64_t n, k, kb, max_m;
    bfp8_scale_format format;
    float *x, *w;        /* unquantized, for calc_diff */
    uint8_t *qb;         /* [n, k] */
    float *sb;           /* row-major [ceil(n/128)][kb] */
    float *bias_f;       /* [n] values the stored bias holds */
    dev_buf b, sb_d;
} operands;

/* Magnitudes vary per activation row and group and per weight block, so every scale matters. */
static void operands_make(operands *o, int64_t max_m, int64_t n, int64_t k, bfp8_scale_format format, float x_mul) {
    memset(o, 0, sizeof *o);
    o->n = n, o->k = k, o->kb = bfp8_ceil_div(k, 128), o->max_m = max_m, o->format = format;
    const int64_t nb = bfp8_ceil_div(n, 128);
    o->x = xmalloc(sizeof(float) * (size_t)(max_m * k));
    o->w = xmalloc(sizeof(float) * (size_t)(n * k));
    float gmag[64];
    for (int i = 0; i < 64; i++) gmag[i] = ldexpf(1.0f, (int)(test_rand_u64() % 9) - 4);
    for (int64_t i = 0; i < max_m; i++) {
        const float rmag = ldexpf(x_mul, (int)(test_rand_u64() % 7) - 3);
        for (int64_t j = 0; j < k; j++) o->x[i * k + j] = test_rand_f32() * rmag * gmag[(i * 7 + j / 128) & 63];
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) o->w[i * k + j] = test_rand_f32() * 0.05f * gmag[(i / 128 * 5 + j / 128 * 3) & 63];
    o->qb = xmalloc((size_t)(n * k));
    o->sb = xmalloc(sizeof(float) * (size_t)(nb * o->kb));
    bfp8_scales sb;
    CHECK_OK(bfp8_scales_init(&sb, format, BFP8_LAYOUT_ROW_MAJOR, nb, o->kb, o->sb));
    CHECK_OK(bfp8_quantize_weight(o->w, BFP8_DTYPE_F32, n, k, o->qb, &sb, NULL));
    o->bias_f = xmalloc(sizeof(float) * (size_t)n);
    dev_put(&o->b, o->qb, (size_t)(n * k));
    dev_put(&o->sb_d, o->sb, sizeof(float) * (size_t)(nb * o->kb));
}

static void operands_free(operands *o) {
    free(o->x), free(o->w), free(o->qb), free(o->sb), free(o->bias_f);
    dev_free(&o->b), dev_free(&o->sb_d);
}

/* Activations of the first m rows, quantized on the host into the MN-major aligned layout, on the device. */
typedef struct acts {
    int64_t m;
    uint8_t *qa;
    float *sa; /* aligned MN-major [kb][round_up(m,4)] */
    dev_buf a, sa_d;
} acts;

static void acts_make(acts *a, const operands *o, int64_t m) {
    a->m = m;
    free(a->qa), free(a->sa);
    a->qa = xmalloc((size_t)(m * o->k));
    size_t sbytes = bfp8_scales_bytes(BFP8_LAYOUT_MN_MAJOR_ALIGNED, m, o->kb);
    a->sa = xmalloc(sbytes);
    bfp8_scales sa;
    CHECK_OK(bfp8_scales_init(&sa, o->format, BFP8_LAYOUT_MN_MAJOR_ALIGNED, m, o->kb, a->sa));
    CHECK_OK(bfp8_quantize_act(o->x, BFP8_DTYPE_F32, m, o->k, a->qa, &sa, NULL));
    dev_put(&a->a, a->qa, (size_t)(m * o->k));
    dev_put(&a->sa_d, a->sa, sbytes);
}

static void acts_free(acts *a) {
    free(a->qa), free(a->sa);
    a->qa = NULL, a->sa = NULL;
    dev_free(&a->a), dev_free(&a->sa_d);
}

static bfp8_gemm_args args_of(const operands *o, const acts *a, void *y, bfp8_dtype y_dtype, const void *bias_d,
                              bfp8_dtype bias_dtype) {
    bfp8_gemm_args g = {.m = a->m, .n = o->n, .k = o->k, .a = a->a.p, .b = o->b.p, .bias = bias_d,
                        .bias_dtype = bias_dtype, .y = y, .y_dtype = y_dtype, .device = BFP8_DEVICE_CUDA};
    bfp8_scales_init(&g.a_scales, o->format, BFP8_LAYOUT_MN_MAJOR_ALIGNED, a->m, o->kb, a->sa_d.p);
    bfp8_scales_init(&g.b_scales, o->format, BFP8_LAYOUT_ROW_MAJOR, bfp8_ceil_div(o->n, 128), o->kb, o->sb_d.p);
    return g;
}

static float e4m3_table[256];

/* The stream run_and_check launches on: the default one, or test_sm_partition's (kept here rather than passed
 * through every case). */
static cudaStream_t run_stream;

/* Waits for run_stream's call, for at most a minute: a kernel that never ends (a stream-K tail waiting for a CTA that never
 * runs) is reported as a failure instead of hanging the suite. */
static bfp8_status finish_or_time_out(cudaStream_t stream, const char *label) {
    const time_t t0 = time(NULL);
    cudaError_t e;
    while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady) {
        if (time(NULL) - t0 > 60) {
            CHECK(0, "%s: not finished after 60 s (a kernel that does not end); giving up", label);
            const int rc = TEST_SUMMARY("hopper");
            fflush(stdout);
            _Exit(rc);
        }
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    return e == cudaSuccess ? BFP8_OK : bfp8_fail(BFP8_ERR_DEVICE, "%s: %s", label, cudaGetErrorString(e));
}

/* Picks up to `want` distinct indices of [0, count): the ends, block edges, then random ones; all when few. */
static int64_t pick_indices(int64_t count, int64_t want, int64_t *out) {
    if (count <= want) {
        for (int64_t i = 0; i < count; i++) out[i] = i;
        return count;
    }
    int64_t n = 0;
    const int64_t fixed[] = {0, count - 1, 127, 128, count - 129, count / 2};
    for (size_t f = 0; f < sizeof fixed / sizeof *fixed; f++) {
        int64_t v = fixed[f];
        bool dup = v < 0 || v >= count;
        for (int64_t j = 0; j < n && !dup; j++) dup = out[j] == v;
        if (!dup) out[n++] = v;
    }
    while (n < want) {
        int64_t v = (int64_t)(test_rand_u64() % (uint64_t)count);
        bool dup = false;
        for (int64_t j = 0; j < n && !dup; j++) dup = out[j] == v;
        if (!dup) out[n++] = v;
    }
    return n;
}

/* Runs hopper once into a poisoned output and checks every element was written, then compares a sample of rows x
 * columns (all of them for small problems) against double computations. Returns false on any failure. */
static bool run_and_check(const bfp8_backend *b, const operands *o, const acts *a, bfp8_dtype y_dtype,
                          bfp8_dtype bias_dtype, bool with_bias, int64_t sample_rows, int64_t sample_cols,
                          const char *label) {
    const int64_t m = a->m, n = o->n, k = o->k, kb = o->kb;
    const size_t ysize = bfp8_dtype_size(y_dtype), ybytes = (size_t)(m * n) * ysize;
    void *bias_host = NULL;
    dev_buf bias_d = {0}, y_d = {0};
    if (with_bias) {
        bias_host = xmalloc((size_t)n * bfp8_dtype_size(bias_dtype));
        for (int64_t j = 0; j < n; j++) {
            float v = test_rand_f32() * 2.0f;
            bfp8_store_f32(bias_host, bias_dtype, j, v);
            o->bias_f[j] = test_load_f32(bias_host, bias_dtype, j);
        }
        dev_put(&bias_d, bias_host, (size_t)n * bfp8_dtype_size(bias_dtype));
    }
    /* Poison: all-ones bytes are NaN in every float output dtype. */
    uint8_t *y = xmalloc(ybytes);
    memset(y, 0xFF, ybytes);
    dev_put(&y_d, y, ybytes);
    bfp8_gemm_args g = args_of(o, a, y_d.p, y_dtype, with_bias ? bias_d.p : NULL, bias_dtype);
    bool ok = true;
    if (run_stream) {
        /* The uploads above went through the legacy stream, which a non-blocking stream does not wait for. */
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "%s: synchronize before the call", label);
        g.stream = run_stream;
    }
    bfp8_status st = b->gemm(b, &g);
    if (st == BFP8_OK) st = run_stream ? finish_or_time_out(run_stream, label) : bfp8_cuda_synchronize(NULL);
    CHECK(st == BFP8_OK, "%s: gemm: %s", label, bfp8_last_error());
    if (st != BFP8_OK) ok = false;
    if (ok) CHECK_OK(bfp8_cuda_download(y, y_d.p, ybytes));
    int64_t unwritten = 0;
    for (int64_t i = 0; ok && i < m * n; i++)
        if (isnan(test_load_f32(y, y_dtype, i))) unwritten++;
    CHECK(unwritten == 0, "%s: %lld of %lld outputs NaN (unwritten or wrong)", label, (long long)unwritten,
          (long long)(m * n));
    if (unwritten) ok = false;

    /* Reference on the sample: double sums per K block, promoted with the two scales (docs/numerics.md), and the
     * unquantized product for calc_diff. */
    int64_t *rows = xmalloc(sizeof(int64_t) * (size_t)(m < sample_rows ? m : sample_rows));
    int64_t *cols = xmalloc(sizeof(int64_t) * (size_t)(n < sample_cols ? n : sample_cols));
    const int64_t nr = pick_indices(m, sample_rows, rows), nc = pick_indices(n, sample_cols, cols);
    const int64_t lda = bfp8_round_up(m, 4);
    test_frobenius fro = {0};
    test_calc_diff cd = {0}, cd_ref = {0}; /* output and quantized reference, both vs unquantized */
    /* Per sampled row, for the report when a check fails: calc_diff, error against the quantized reference. */
    double *row_cd = xmalloc(sizeof(double) * (size_t)(nr ? nr : 1));
    double *row_rel = xmalloc(sizeof(double) * (size_t)(nr ? nr : 1));
    /* The sampled weight rows decoded once; rows of the output outer, so calc_diff closes one row at a time. */
    float *bcols = xmalloc(sizeof(float) * (size_t)(nc * k)), *arow = xmalloc(sizeof(float) * (size_t)k);
    for (int64_t ci = 0; ci < nc; ci++)
        for (int64_t t = 0; t < k; t++) bcols[ci * k + t] = e4m3_table[o->qb[cols[ci] * k + t]];
    for (int64_t ri = 0; ok && ri < nr; ri++) {
        const int64_t i = rows[ri];
        for (int64_t t = 0; t < k; t++) arow[t] = e4m3_table[a->qa[i * k + t]];
        test_frobenius row_fro = {0};
        test_calc_diff row_cd_acc = {0};
        for (int64_t ci = 0; ci < nc; ci++) {
            const int64_t j = cols[ci];
            const float *brow = bcols + ci * k;
            double total = 0, raw = 0;
            for (int64_t blk = 0; blk < kb; blk++) {
                double part = 0;
                const int64_t t1 = (blk + 1) * 128 < k ? (blk + 1) * 128 : k;
                for (int64_t t = blk * 128; t < t1; t++) part += (double)arow[t] * brow[t];
                total += part * (double)a->sa[blk * lda + i] * (double)o->sb[(j / 128) * kb + blk];
            }
            for (int64_t t = 0; t < k; t++) raw += (double)o->x[i * k + t] * o->w[j * k + t];
            if (with_bias) total += o->bias_f[j], raw += o->bias_f[j];
            const double got = test_load_f32(y, y_dtype, i * n + j);
            test_frobenius_add(&fro, got, total);
            test_frobenius_add(&row_fro, got, total);
            test_calc_diff_add(&cd, got, raw);
            test_calc_diff_add(&cd_ref, total, raw);
            test_calc_diff_add(&row_cd_acc, got, raw);
        }
        row_cd[ri] = test_calc_diff_value(&row_cd_acc);
        row_rel[ri] = test_frobenius_value(&row_fro);
    }
    if (ok) {
        const double rel = test_frobenius_value(&fro);
        const double diff = test_calc_diff_value(&cd), diff_ref = test_calc_diff_value(&cd_ref);
        const double tol = test_tolerance(y_dtype, BFP8_DEVICE_CUDA);
        CHECK(rel <= tol, "%s: rel Frobenius %.3g > %.3g (%lld x %lld sampled)", label, rel, tol, (long long)nr,
              (long long)nc);
        /* calc_diff is a statistic of FP8 noise (about 6.5e-4 here): tested only over many outputs of full 128-deep
         * blocks (tests/check.h; on 3 outputs it reached 1.6e-3). */
        const bool diff_applies = k >= 256 && nr * nc >= 4096;
        const int failed_before = check_failed_;
        if (diff_applies) test_calc_diff_check(diff, diff_ref, label);
        if (rel > tol || check_failed_ != failed_before) {
            ok = false;
            /* The three rows with the largest calc_diff: quantization noise (error against the quantized reference
             * small, e.g. a row that cancels to near zero) or a wrong row (large). */
            for (int t = 0; t < 3 && t < nr; t++) {
                int64_t worst = 0;
                for (int64_t ri = 1; ri < nr; ri++)
                    if (row_cd[ri] > row_cd[worst]) worst = ri;
                printf("  worst row %lld: calc_diff %.3g, rel error vs the quantized reference %.3g\n",
                       (long long)rows[worst], row_cd[worst], row_rel[worst]);
                row_cd[worst] = -1;
            }
        }
        if (getenv("BFP8_TEST_VERBOSE"))
            printf("  %-44s rel %.2e  calc_diff %.2e  (%lld x %lld sampled)\n", label, rel, diff, (long long)nr,
                   (long long)nc);
    }
    free(rows), free(cols), free(bcols), free(arow), free(row_cd), free(row_rel), free(y), free(bias_host);
    dev_free(&bias_d), dev_free(&y_d);
    return ok;
}

/* One self-contained problem: every element checked for the poison, the reference compared on up to
 * sample_rows x sample_cols of them (pick_indices: the edges, the tile boundaries, the rest random). */
static void sampled_case(const bfp8_backend *b, int64_t m, int64_t n, int64_t k, bfp8_scale_format f, bfp8_dtype out,
                         bool bias, bfp8_dtype bias_dtype, int64_t sample_rows, int64_t sample_cols) {
    char label[128];
    snprintf(label, sizeof label, "M=%lld N=%lld K=%lld %s out=%s bias=%s", (long long)m, (long long)n, (long long)k,
             bfp8_scale_format_name(f), bfp8_dtype_name(out), bias ? bfp8_dtype_name(bias_dtype) : "none");
    operands o;
    acts a = {0};
    /* fp16 overflows to inf (as it must) past 65504: keep f16 outputs in range. */
    operands_make(&o, m, n, k, f, out == BFP8_DTYPE_F16 ? 1.0f / 64 : 1.0f);
    acts_make(&a, &o, m);
    run_and_check(b, &o, &a, out, bias_dtype, bias, sample_rows, sample_cols, label);
    acts_free(&a);
    operands_free(&o);
}

/* A small problem, the reference compared on every element. */
static void small_case(const bfp8_backend *b, int64_t m, int64_t n, int64_t k, bfp8_scale_format f, bfp8_dtype out,
                       bool bias, bfp8_dtype bias_dtype) {
    sampled_case(b, m, n, k, f, out, bias, bias_dtype, 1 << 20, 1 << 20);
}

static void test_small(const bfp8_backend *b) {
    /* K at its boundaries (16, the step of 16, a partial last 128-block), both paths (M <= 8 swapped). */
    small_case(b, 1, 8, 16, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32);
    small_case(b, 5, 200, 16, BFP8_SCALE_FP32, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32);
    small_case(b, 33, 130, 48, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 130, 300, 144, BFP8_SCALE_FP32, BFP8_DTYPE_F16, true, BFP8_DTYPE_BF16);
    small_case(b, 257, 384, 1040, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F16);
    /* N at its boundaries: 1, 8, 129; M just past one tile; M = 8 swapped and 16..128 normal (wider swapped tiles
     * run under gpu-check's BFP8_HOPPER_TILE=swap). */
    small_case(b, 3, 1, 256, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32);
    small_case(b, 129, 129, 512, BFP8_SCALE_UE8M0, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32);
    for (int64_t m = 8; m <= 128; m *= 2) small_case(b, m, 256, 384, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32);
    /* Both sides of the switch from the swapped to the normal path (M = 8 | 9), and of the normal path's one
     * consumer warpgroup (M <= 64 | 65). */
    small_case(b, 8, 200, 384, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 9, 200, 384, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 65, 200, 384, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    /* Output dtypes on both paths; split-K on the normal path (few tiles, long K). */
    small_case(b, 64, 640, 2048, BFP8_SCALE_FP32, BFP8_DTYPE_F32, true, BFP8_DTYPE_F32);
    small_case(b, 300, 256, 8192, BFP8_SCALE_FP32, BFP8_DTYPE_F32, true, BFP8_DTYPE_F32);
    small_case(b, 300, 256, 8192, BFP8_SCALE_UE8M0, BFP8_DTYPE_F16, false, BFP8_DTYPE_F32);
    /* Normal path with several M tiles and the TMA-store epilogue (N % 8 == 0, 16-bit output), several tiles per
     * CTA, both weight-tile widths (64 for the first two, 128 for the last). */
    small_case(b, 512, 384, 1024, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, true, BFP8_DTYPE_BF16);
    small_case(b, 256, 1000, 256, BFP8_SCALE_FP32, BFP8_DTYPE_F16, false, BFP8_DTYPE_F32);
    small_case(b, 4096, 2048, 512, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32);
    /* The normal path with M a multiple of 128: split K with fp32 output, then a partial last K block with f16
     * output and a bf16 bias; with a ragged last activation tile: M = 4095 (127 rows, loaded with the whole box) and
     * M = 1000 (104 rows, a cut box), several units per CTA. */
    small_case(b, 256, 256, 8192, BFP8_SCALE_FP32, BFP8_DTYPE_F32, true, BFP8_DTYPE_F32);
    small_case(b, 384, 640, 2064, BFP8_SCALE_UE8M0, BFP8_DTYPE_F16, true, BFP8_DTYPE_BF16);
    small_case(b, 4095, 2048, 512, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 1000, 1024, 768, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32);
    /* The consumer's loop over whole rings of stages (kernel.cuh): several units a CTA with 23 and 41 K blocks, prime
     * to every stage count, so that units start at stages of both parities and run pairs up to the ring, whole rings
     * and the pairs after them (under gpu-check's BFP8_HOPPER_TILE variants, stage counts of both parities). */
    small_case(b, 640, 1152, 2944, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 257, 1664, 5248, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32);
    /* Fewer 128-row tiles than 3/4 of the SMs: 64-row tiles, one consumer warpgroup each, whole K (132 SMs): 2 x 66
     * tiles of 32 columns with a last P tile of 36 rows (the staged epilogue); 4 x 33 of 64 columns with a last P
     * tile of 8 rows (the TMA store). Under BFP8_HOPPER_TILE=64x32 and 64x128 (gpu-check) every normal-path case runs
     * 64-row tiles. */
    small_case(b, 100, 2112, 1024, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 200, 2112, 2048, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32);
    /* Plans whose K splits are summed inside clusters of that many CTAs (bfp8_hopper_params::csplit), where the
     * clusters fit (the BFP8_LOG=hopper line says which ran; where fewer clusters than tiles fit it is the reduce
     * kernel; test_hopper_plan pins these plans on the H200, and BFP8_HOPPER_SPLITS=3 reduces them). Swapped: 4
     * splits with a last weight tile cut by N (3000 = 23 x 128 + 56) and a full 8-token tile; 4 splits at M = 5 with an
     * fp16 output and a bf16 bias; 8 splits in 12 tiles with UE8M0 scales and fp32 output; 7 splits (an odd
     * cluster) in 8 tiles with a cut last tile. */
    small_case(b, 8, 3000, 2048, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 5, 2500, 3072, BFP8_SCALE_FP32, BFP8_DTYPE_F16, true, BFP8_DTYPE_BF16);
    small_case(b, 3, 1536, 4096, BFP8_SCALE_UE8M0, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32);
    small_case(b, 2, 1000, 2560, BFP8_SCALE_FP32, BFP8_DTYPE_F16, true, BFP8_DTYPE_F32);
    /* The normal path (64-wide weight tiles, one P tile), staged in the stages' shared memory: 6 splits with both
     * consumer warpgroups, a ragged M and a last weight tile of 40 columns; 8 splits with one consumer and
     * N % 4 != 0 (element stores), UE8M0 scales, fp16 output and a bf16 bias; 7 splits at M = 72 with fp32 output
     * and a last tile of 8 columns; 8 splits at M = 128 exactly. */
    small_case(b, 100, 1000, 4096, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 16, 330, 6144, BFP8_SCALE_UE8M0, BFP8_DTYPE_F16, true, BFP8_DTYPE_BF16);
    small_case(b, 72, 520, 3584, BFP8_SCALE_FP32, BFP8_DTYPE_F32, false, BFP8_DTYPE_F32);
    small_case(b, 128, 256, 8192, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32);
    /* Swapped plans with row slices (bfp8_hopper_plan::slice_rows; gpu-check also runs the suite with
     * BFP8_HOPPER_FORCE=last-wave-split, which plans them without slices), on 132 SMs, the slices before the whole
     * tiles: 4 slices of 32 rows, the last cut by N to 8; 79 slices of 64, the second warpgroup's rows all outside
     * every slice, the last slice 8 rows; the 16-token tile at M = 12 (the
     * normal path would split its last wave's K) with N % 4 != 0, 98 slices of 32, the last 2 rows; fewer tiles
     * than SMs and long K: 110 slices of 64, the last 24 rows, and no whole tile. test_hopper_plan pins the plans. */
    small_case(b, 3, 17000, 256, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32);
    small_case(b, 8, 21896, 512, BFP8_SCALE_UE8M0, BFP8_DTYPE_F16, false, BFP8_DTYPE_F32);
    small_case(b, 12, 20002, 4096, BFP8_SCALE_FP32, BFP8_DTYPE_F32, true, BFP8_DTYPE_BF16);
    small_case(b, 2, 7000, 8192, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F16);
    /* Stream-K plans (bfp8_hopper_plan::sk_tiles; gpu-check also runs the suite with BFP8_HOPPER_FORCE=stream-k), on
     * 132 SMs, a whole wave and then the tiles left in 132 runs: 157 tiles, runs over up to three, a last P tile of 52
     * rows and a last weight tile of 64 columns; 64-wide tiles, a last one of 28 columns (N % 8 != 0: the staged
     * epilogue's element stores); fp32 output with a last tile of 40 columns; a last K block of 16. A wrong slot or
     * sum spoils a whole 128 x BQ tile, so 40 rows (every P tile's edges among them) against every column suffice
     * and keep the host reference at a few seconds. test_hopper_plan pins the plans. */
    sampled_case(b, 2100, 2112, 2048, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32, 40, 1 << 20);
    sampled_case(b, 1500, 1500, 4096, BFP8_SCALE_UE8M0, BFP8_DTYPE_F16, false, BFP8_DTYPE_F32, 40, 1 << 20);
    sampled_case(b, 2100, 1000, 3072, BFP8_SCALE_FP32, BFP8_DTYPE_F32, true, BFP8_DTYPE_BF16, 40, 1 << 20);
    sampled_case(b, 700, 3000, 3088, BFP8_SCALE_UE8M0, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F16, 40, 1 << 20);
    /* Under BFP8_HOPPER_FORCE=stream-k only: fewer tiles than SMs (112) in two P tiles, and with one consumer
     * warpgroup (M <= 64). */
    sampled_case(b, 200, 7168, 8192, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32, 40, 1 << 20);
    sampled_case(b, 48, 7168, 4096, BFP8_SCALE_FP32, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32, 40, 1 << 20);
}

/* Stream-K with fewer SMs than CTAs. The plan is made for all of the device's SMs (132 CTAs), but the calls run on
 * a stream of a green context, a partition of 16 SMs (what an MPS limit or a serving engine's split of the SMs
 * gives), so most CTAs start only once others have finished. A tail waits only for CTAs that took their tickets
 * before it (bfp8_hopper_params::sk_ticket), which have started, so each call must end, and pass the checks of any
 * case. Skipped, and said so, where the driver has no green contexts. */
static void test_sm_partition(const bfp8_backend *b) {
    static const int64_t shapes[2][3] = {{2100, 2112, 2048}, {1500, 1500, 4096}};
    int ordinal = 0, sms = 0;
    CHECK(cudaGetDevice(&ordinal) == cudaSuccess &&
              cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal) == cudaSuccess,
          "SM partition test: the device's SM count");
    bfp8_hopper_cluster_fit fit;
    CHECK_OK(bfp8_hopper_device_cluster_fit(&fit));
    for (int i = 0; i < 2; i++) { /* the plans, as the calls will make them (the forcing knobs may leave none) */
        const bfp8_hopper_plan pl =
            bfp8_hopper_plan_make(shapes[i][0], shapes[i][1], shapes[i][2], sms, &fit, bfp8_hopper_knobs_env());
        char plan[256];
        bfp8_hopper_plan_describe(&pl, plan, sizeof plan);
        if (!pl.sk_tiles) {
            printf("SM partition test: skipped: M=%lld N=%lld K=%lld is not planned as stream-K here (%s)\n",
                   (long long)shapes[i][0], (long long)shapes[i][1], (long long)shapes[i][2], plan);
            return;
        }
    }
    PFN_cuDeviceGet_v2000 device_get = NULL;
    PFN_cuDeviceGetDevResource_v12040 get_resource = NULL;
    PFN_cuDevSmResourceSplitByCount_v12040 split = NULL;
    PFN_cuDevResourceGenerateDesc_v12040 make_desc = NULL;
    PFN_cuGreenCtxCreate_v12040 green_create = NULL;
    PFN_cuGreenCtxDestroy_v12040 green_destroy = NULL;
    PFN_cuGreenCtxStreamCreate_v12050 stream_create = NULL;
    PFN_cuStreamGetGreenCtx_v12040 stream_green = NULL;
    struct {
        const char *name;
        void **fn;
        int version;
    } entries[] = {{"cuDeviceGet", (void **)&device_get, 2000},
                   {"cuDeviceGetDevResource", (void **)&get_resource, 12040},
                   {"cuDevSmResourceSplitByCount", (void **)&split, 12040},
                   {"cuDevResourceGenerateDesc", (void **)&make_desc, 12040},
                   {"cuGreenCtxCreate", (void **)&green_create, 12040},
                   {"cuGreenCtxDestroy", (void **)&green_destroy, 12040},
                   {"cuGreenCtxStreamCreate", (void **)&stream_create, 12050},
                   {"cuStreamGetGreenCtx", (void **)&stream_green, 12040}};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion(entries[i].name, entries[i].fn, entries[i].version, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            printf("SM partition test: skipped: the driver has no %s\n", entries[i].name);
            return;
        }
    }
    CUdevice dev;
    CUdevResource all, part;
    CUdevResourceDesc desc;
    CUgreenCtx green = NULL, owner = NULL;
    CUstream stream = NULL;
    unsigned groups = 1;
    const char *step = "cuDeviceGet";
    CUresult r = device_get(&dev, ordinal);
    if (r == CUDA_SUCCESS) step = "cuDeviceGetDevResource", r = get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (r == CUDA_SUCCESS) step = "cuDevSmResourceSplitByCount", r = split(&part, &groups, &all, NULL, 0, 16);
    if (r == CUDA_SUCCESS) step = "cuDevResourceGenerateDesc", r = make_desc(&desc, &part, 1);
    if (r == CUDA_SUCCESS) step = "cuGreenCtxCreate", r = green_create(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r == CUDA_SUCCESS)
        step = "cuGreenCtxStreamCreate", r = stream_create(&stream, green, CU_STREAM_NON_BLOCKING, 0);
    if (r == CUDA_SUCCESS) step = "cuStreamGetGreenCtx", r = stream_green(stream, &owner);
    if (r == CUDA_ERROR_NOT_SUPPORTED) {
        printf("SM partition test: skipped: %s: not supported here (MPS, or a device without green contexts)\n", step);
    } else {
        CHECK(r == CUDA_SUCCESS, "SM partition test: %s failed with CUresult %d", step, (int)r);
        CHECK(r != CUDA_SUCCESS || (groups == 1 && owner == green && (int)part.sm.smCount < sms),
              "SM partition test: a stream of a green context of fewer SMs than %d expected (%u groups, %u SMs)", sms,
              groups, part.sm.smCount);
    }
    if (r == CUDA_SUCCESS && owner == green && (int)part.sm.smCount < sms) {
        printf("SM partition test: stream-K calls of %d CTAs on %u of %d SMs\n", sms, part.sm.smCount, sms);
        run_stream = (cudaStream_t)stream;
        sampled_case(b, shapes[0][0], shapes[0][1], shapes[0][2], BFP8_SCALE_FP32, BFP8_DTYPE_BF16, true,
                     BFP8_DTYPE_F32, 40, 1 << 20);
        sampled_case(b, shapes[1][0], shapes[1][1], shapes[1][2], BFP8_SCALE_UE8M0, BFP8_DTYPE_F16, false,
                     BFP8_DTYPE_F32, 40, 1 << 20);
        run_stream = NULL;
    }
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
    if (green) green_destroy(green);
}

/* The CSPLIT clusters' occupancy query answers for every size (a query that read some sizes as "none fit" would send
 * every plan to the reduce kernel without a failed check). Printed, and compared with the H200's counts that
 * test_hopper_plan's golden plans use. */
static void test_cluster_fit(void) {
    bfp8_hopper_cluster_fit fit = {{0}};
    CHECK_OK(bfp8_hopper_device_cluster_fit(&fit));
    bool as_h200 = true;
    printf("clusters that fit at once:");
    for (int s = 2; s <= BFP8_HOPPER_MAX_SPLIT_CLUSTER; s++) {
        printf(" %d: %d", s, fit.clusters[s]);
        CHECK(fit.clusters[s] >= 1, "no cluster of %d CTAs fits on this device", s);
        as_h200 = as_h200 && fit.clusters[s] == kH200ClusterFit.clusters[s];
    }
    printf(" (%s the H200's)\n", as_h200 ? "as" : "not");
}

/* Misuse that must be refused with a message, never crash. */
static void test_refusals(const bfp8_backend *b) {
    operands o;
    acts a = {0};
    operands_make(&o, 4, 128, 256, BFP8_SCALE_FP32, 1.0f);
    acts_make(&a, &o, 4);
    dev_buf y = {0};
    dev_put(&y, NULL, 4 * 128 * 2);
    bfp8_gemm_args g = args_of(&o, &a, y.p, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32);
    g.a = (const uint8_t *)a.a.p + 1; /* TMA needs 16-byte alignment */
    CHECK_STATUS(b->gemm(b, &g), BFP8_ERR_UNSUPPORTED);
    g = args_of(&o, &a, y.p, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32);
    g.a_scales.layout = BFP8_LAYOUT_MN_MAJOR;
    CHECK_STATUS(b->gemm(b, &g), BFP8_ERR_UNSUPPORTED);
    g = args_of(&o, &a, y.p, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32);
    g.m = 0; /* empty output: nothing to do */
    CHECK_OK(b->gemm(b, &g));
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    dev_free(&y);
    acts_free(&a);
    operands_free(&o);
}

/* bfp8_linear on the device with hopper: the activation quantization kernel, then the GEMM launched as its
 * programmatic dependent, which requests weight tiles before the activations are written. Checked on every
 * output against the same layer on the host with the reference backend (the two quantizations are bit-identical,
 * tests/test_cuda.c), poisoned outputs, with the split-K, swapped and normal plans. */
static void linear_case(bfp8_dispatcher *dev, bfp8_dispatcher *host, int64_t m, int64_t n, int64_t k,
                        bfp8_scale_format f, bool bias) {
    char label[128];
    snprintf(label, sizeof label, "linear M=%lld N=%lld K=%lld %s%s", (long long)m, (long long)n, (long long)k,
             bfp8_scale_format_name(f), bias ? " +bias" : "");
    float *x = xmalloc(sizeof(float) * (size_t)(m * k)), *w = xmalloc(sizeof(float) * (size_t)(n * k));
    float *b = xmalloc(sizeof(float) * (size_t)n), *y_ref = xmalloc(sizeof(float) * (size_t)(m * n));
    uint16_t *y = xmalloc(sizeof(uint16_t) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++) x[i] = test_rand_f32() * ldexpf(1.0f, (int)((i / k) % 5) - 2);
    for (int64_t i = 0; i < n * k; i++) w[i] = test_rand_f32() * 0.05f;
    for (int64_t i = 0; i < n; i++) b[i] = test_rand_f32();
    bfp8_weight *wt = NULL;
    dev_buf x_d = {0}, b_d = {0}, y_d = {0};
    CHECK_OK(bfp8_weight_quantize(w, BFP8_DTYPE_F32, n, k, f, &wt, NULL));
    memset(y, 0xFF, sizeof(uint16_t) * (size_t)(m * n)); /* bf16 NaN: the poison every output must overwrite */
    if (wt && bfp8_weight_prepare(wt, dev, "hopper") == BFP8_OK && bfp8_weight_prepare(wt, host, "ref") == BFP8_OK &&
        dev_put(&x_d, x, sizeof(float) * (size_t)(m * k)) && dev_put(&b_d, b, sizeof(float) * (size_t)n) &&
        dev_put(&y_d, y, sizeof(uint16_t) * (size_t)(m * n))) {
        bfp8_linear_args la = {.x = x_d.p, .x_dtype = BFP8_DTYPE_F32, .m = m, .bias = bias ? b_d.p : NULL,
                               .bias_dtype = BFP8_DTYPE_F32, .y = y_d.p, .y_dtype = BFP8_DTYPE_BF16,
                               .device = BFP8_DEVICE_CUDA};
        CHECK_OK(bfp8_linear(dev, wt, &la));
        CHECK_OK(bfp8_cuda_synchronize(NULL));
        CHECK_OK(bfp8_cuda_download(y, y_d.p, sizeof(uint16_t) * (size_t)(m * n)));
        bfp8_linear_args lh = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = m, .bias = bias ? b : NULL,
                               .bias_dtype = BFP8_DTYPE_F32, .y = y_ref, .y_dtype = BFP8_DTYPE_F32,
                               .device = BFP8_DEVICE_CPU};
        CHECK_OK(bfp8_linear(host, wt, &lh));
        /* The problems the two calls pose: only the device call's activations come from a kernel before the GEMM. */
        bfp8_problem pd, ph;
        CHECK_OK(bfp8_problem_from_linear(wt, &la, &pd));
        CHECK_OK(bfp8_problem_from_linear(wt, &lh, &ph));
        CHECK(pd.act_from_prior_kernel && !ph.act_from_prior_kernel, "act_from_prior_kernel: cuda %d, cpu %d",
              (int)pd.act_from_prior_kernel, (int)ph.act_from_prior_kernel);
        test_frobenius fro = {0};
        int64_t bad = 0;
        for (int64_t i = 0; i < m * n; i++) {
            const double got = test_load_f32(y, BFP8_DTYPE_BF16, i), ref = y_ref[i];
            if (!isfinite(got)) bad++;
            test_frobenius_add(&fro, got, ref);
        }
        const double rel = test_frobenius_value(&fro);
        CHECK(bad == 0, "%s: %lld outputs not finite (unwritten?)", label, (long long)bad);
        const double tol = test_tolerance(BFP8_DTYPE_BF16, BFP8_DEVICE_CUDA);
        CHECK(rel <= tol, "%s: rel Frobenius %.3g vs the host reference > %.3g", label, rel, tol);
    } else {
        CHECK(0, "%s: setup failed: %s", label, bfp8_last_error());
    }
    bfp8_weight_free(wt);
    dev_free(&x_d), dev_free(&b_d), dev_free(&y_d);
    free(x), free(w), free(b), free(y_ref), free(y);
}

/* bfp8_linear captured into a CUDA graph (how serving engines run decode): the quantization, the workspace
 * allocation, hopper as a programmatic dependent and the split-K reduce must all be capturable, and a replay must
 * give the bytes of a direct run (split-K sums in a fixed order). */
static void test_linear_graph(bfp8_dispatcher *dev, int64_t m, int64_t n, int64_t k) {
    float *x = xmalloc(sizeof(float) * (size_t)(m * k)), *w = xmalloc(sizeof(float) * (size_t)(n * k));
    for (int64_t i = 0; i < m * k; i++) x[i] = test_rand_f32();
    for (int64_t i = 0; i < n * k; i++) w[i] = test_rand_f32() * 0.05f;
    const size_t y_bytes = sizeof(uint16_t) * (size_t)(m * n);
    uint16_t *y1 = xmalloc(y_bytes), *y2 = xmalloc(y_bytes);
    bfp8_weight *wt = NULL;
    dev_buf x_d = {0}, y1_d = {0}, y2_d = {0};
    cudaStream_t stream = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    memset(y2, 0xFF, y_bytes);
    CHECK_OK(bfp8_weight_quantize(w, BFP8_DTYPE_F32, n, k, BFP8_SCALE_FP32, &wt, NULL));
    bool ok = wt && bfp8_weight_prepare(wt, dev, "hopper") == BFP8_OK &&
              dev_put(&x_d, x, sizeof(float) * (size_t)(m * k)) && dev_put(&y1_d, NULL, y_bytes) &&
              dev_put(&y2_d, y2, y_bytes);
    CHECK(ok && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "graph test setup: %s",
          bfp8_last_error());
    if (ok && stream) {
        bfp8_linear_args la = {.x = x_d.p, .x_dtype = BFP8_DTYPE_F32, .m = m, .y = y1_d.p,
                               .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CUDA, .stream = stream};
        CHECK_OK(bfp8_linear(dev, wt, &la)); /* direct run (and first-call setup outside the capture) */
        CHECK_OK(bfp8_cuda_synchronize(stream));
        la.y = y2_d.p;
        cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
        bfp8_status st = e == cudaSuccess ? bfp8_linear(dev, wt, &la) : BFP8_OK;
        cudaError_t e_end = e == cudaSuccess ? cudaStreamEndCapture(stream, &graph) : e;
        CHECK(e == cudaSuccess && st == BFP8_OK && e_end == cudaSuccess, "capture of bfp8_linear: %s / %s / %s",
              cudaGetErrorString(e), bfp8_status_name(st), cudaGetErrorString(e_end));
        e = graph ? cudaGraphInstantiate(&exec, graph, 0) : cudaErrorInvalidValue;
        /* Twice: the second replay starts from what the first left in the graph's workspace (stream-K flags). */
        for (int replay = 0; replay < 2 && e == cudaSuccess; replay++) {
            CHECK_OK(bfp8_cuda_upload(y2_d.p, y2, y_bytes)); /* poison again */
            e = cudaGraphLaunch(exec, stream);
            if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
            CHECK(e == cudaSuccess, "graph replay %d: %s", replay, cudaGetErrorString(e));
            uint16_t *got = xmalloc(y_bytes);
            CHECK_OK(bfp8_cuda_download(y1, y1_d.p, y_bytes));
            CHECK_OK(bfp8_cuda_download(got, y2_d.p, y_bytes));
            CHECK(memcmp(y1, got, y_bytes) == 0, "graph replay %d of bfp8_linear M=%lld N=%lld K=%lld differs from "
                  "the direct run", replay, (long long)m, (long long)n, (long long)k);
            free(got);
        }
    }
    (void)cudaGetLastError(); /* a failed capture leaves its error here; it was reported above */
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (stream) cudaStreamDestroy(stream);
    bfp8_weight_free(wt);
    dev_free(&x_d), dev_free(&y1_d), dev_free(&y2_d);
    free(x), free(w), free(y1), free(y2);
}

static void test_linear(bool small_only) {
    bfp8_dispatcher *dev = NULL, *host = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&dev));
    CHECK_OK(bfp8_dispatcher_create_default(&host));
    if (!dev || !host) return;
    CHECK_OK(bfp8_dispatcher_set_policy(dev, BFP8_POLICY_STRICT, "hopper"));
    CHECK_OK(bfp8_dispatcher_set_policy(host, BFP8_POLICY_STRICT, "ref"));
    linear_case(dev, host, 1, 1024, 512, BFP8_SCALE_FP32, false);     /* swapped, 4-block units (one partial) */
    linear_case(dev, host, 3, 256, 8192, BFP8_SCALE_UE8M0, true);     /* swapped, split K */
    linear_case(dev, host, 40, 1024, 1536, BFP8_SCALE_FP32, true);    /* normal, one consumer warpgroup */
    linear_case(dev, host, 100, 384, 1040, BFP8_SCALE_FP32, true);    /* normal, partial last K block */
    linear_case(dev, host, 129, 8576, 4096, BFP8_SCALE_UE8M0, true);  /* normal, last wave's tiles split */
    linear_case(dev, host, 1000, 1024, 768, BFP8_SCALE_FP32, false);  /* normal, a cut last activation tile */
    if (!small_only) {
        linear_case(dev, host, 8, 2048, 8192, BFP8_SCALE_FP32, true);   /* swapped, 13-block units (two partials) */
        linear_case(dev, host, 129, 512, 8192, BFP8_SCALE_FP32, false); /* normal, split K */
        linear_case(dev, host, 600, 1536, 768, BFP8_SCALE_UE8M0, true); /* normal, several tiles per CTA */
        linear_case(dev, host, 512, 1024, 2048, BFP8_SCALE_FP32, true); /* normal, four whole P tiles */
        test_linear_graph(dev, 3, 256, 8192);   /* swapped with split K: every node kind above */
        test_linear_graph(dev, 2100, 2112, 2048); /* stream-K: the flags' memset in the graph */
    }
    bfp8_dispatcher_free(dev);
    bfp8_dispatcher_free(host);
}

/* Ragged M x every DSR1 shape, sampled reference; and split-K determinism on a decode shape. */
static void test_dsr1(const bfp8_backend *b) {
    /* 1, 3, 8: swapped; 9, 17, 40, 64: the normal path, one consumer warpgroup; whole-K 64-row tiles in the kernel
     * with 64-row stages at 100 and 129 on 2112x7168, at 9..100 on 4096x7168. */
    static const int64_t ms[] = {1, 3, 8, 9, 17, 40, 64, 100, 129, 4095};
    for (int s = 0; s < 8; s++) {
        const int64_t n = dsr1_shapes[s][0], k = dsr1_shapes[s][1];
        const bfp8_scale_format f = (s % 3 == 2) ? BFP8_SCALE_UE8M0 : BFP8_SCALE_FP32;
        operands o;
        operands_make(&o, 4095, n, k, f, 1.0f);
        acts a = {0};
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
            const int64_t m = ms[mi];
            char label[128];
            const bool bias = (mi + s) % 2 == 1;
            snprintf(label, sizeof label, "DSR1 M=%lld N=%lld K=%lld %s%s", (long long)m, (long long)n, (long long)k,
                     bfp8_scale_format_name(f), bias ? " +bias" : "");
            acts_make(&a, &o, m);
            run_and_check(b, &o, &a, BFP8_DTYPE_BF16, BFP8_DTYPE_F32, bias, 32, 192, label);
            if (m == 17 && s == 0) {
                /* Split-K sums in a fixed order: two runs give the same bytes. */
                size_t bytes = (size_t)(m * n) * 2;
                dev_buf y1 = {0}, y2 = {0};
                dev_put(&y1, NULL, bytes), dev_put(&y2, NULL, bytes);
                bfp8_gemm_args g1 = args_of(&o, &a, y1.p, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32);
                bfp8_gemm_args g2 = args_of(&o, &a, y2.p, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32);
                CHECK_OK(b->gemm(b, &g1));
                CHECK_OK(b->gemm(b, &g2));
                uint8_t *h1 = xmalloc(bytes), *h2 = xmalloc(bytes);
                CHECK_OK(bfp8_cuda_download(h1, y1.p, bytes));
                CHECK_OK(bfp8_cuda_download(h2, y2.p, bytes));
                CHECK(memcmp(h1, h2, bytes) == 0, "two runs differ (M=%lld N=%lld K=%lld)", (long long)m,
                      (long long)n, (long long)k);
                free(h1), free(h2);
                dev_free(&y1), dev_free(&y2);
            }
        }
        acts_free(&a);
        operands_free(&o);
    }
}

#endif

int main(int argc, char **argv) {
    test_seed();
    bool small_only = false;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--small") == 0) small_only = true;
#ifndef BFP8_WITH_CUDA
    (void)small_only;
    printf("hopper: skipped: built without CUDA\n");
    CHECK(1, "nothing to run");
    return TEST_SUMMARY("hopper");
#else
    const bfp8_backend *b = bfp8_hopper_backend();
    test_caps(b);
    test_prior_kernel_flag();
    char why[BFP8_REASON_MAX] = "";
    bool have = bfp8_cuda_available(why, sizeof why);
    int arch = have ? bfp8_cuda_arch() : 0;
    if (have && arch != 90) snprintf(why, sizeof why, "the device is sm_%d, hopper needs sm_90", arch);
    if (!have || arch != 90) {
        printf("hopper: skipped: %s\n", why);
        /* Nothing can run: the call is refused with a message (pointers are never touched). */
        static uint64_t fake[64];
        bfp8_gemm_args g = {.m = 4, .n = 128, .k = 128, .a = (const uint8_t *)fake, .b = (const uint8_t *)fake,
                            .y = fake, .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CUDA};
        bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR_ALIGNED, 4, 1, fake);
        bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, fake);
        bfp8_status st = b->gemm(b, &g);
        CHECK(st != BFP8_OK && bfp8_last_error()[0], "gemm without a usable device returned %s",
              bfp8_status_name(st));
        return TEST_SUMMARY("hopper");
    }
    for (int i = 0; i < 256; i++) e4m3_table[i] = bfp8_e4m3_to_f32((uint8_t)i);
    const clock_t t0 = clock();
    test_cluster_fit();
    test_small(b);
    test_refusals(b);
    test_linear(small_only);
    if (!small_only) test_sm_partition(b);
    if (!small_only) test_dsr1(b);
    printf("correctness: %.1f s CPU\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
    test_calc_diff_mean_check("hopper");
    return TEST_SUMMARY("hopper");
#endif
}
