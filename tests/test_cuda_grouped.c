/* Grouped (MoE) GEMM on the GPU, cuda_generic's kernel and (on sm_90) hopper's: against the reference on fresh
 * random data for both layouts, every output dtype, both scale formats and every scale layout each backend takes,
 * ragged N/K, bias; rows that must stay unwritten (padding, beyond masked_m) and a guard after the output; what the
 * device does with bad contents (masked_m > max_m or < 0, indices outside [-1, G)); the dense kernel's bytes where
 * its sum order is the grouped one's; a CUDA graph of a masked call replayed with masked_m changed between replays;
 * a grouped weight's upload in every scale layout; the grouped linear layer. hopper's cases are at its boundaries: K
 * a multiple of 16, tiles of 64 and 128 rows (expected_m), tiles mixing experts (scattered rows), partial row and
 * weight tiles.
 *
 * Without a device it checks that grouped CUDA calls say why and prints "cuda_grouped: skipped: <why>";
 * BFP8_REQUIRE_CUDA=1 turns a missing device into a failure. */
#include "check.h"
#include "blockfp8_grouped.h"
#include "internal.h"
#include "weight_forms.h"

#ifdef BFP8_WITH_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_glue.h" /* the device's SMs, hopper's planner */
#endif

#define POISON 0xFF
#define GUARD 4096 /* poisoned bytes after every output: a write past the end shows */

static void *dev_upload(const void *host, size_t bytes) {
    void *p = NULL;
    CHECK_OK(bfp8_cuda_malloc(bytes ? bytes : 1, &p));
    if (p && bytes) CHECK_OK(bfp8_cuda_upload(p, host, bytes));
    return p;
}

/* One grouped problem on the host (row-major scales), as in test_grouped.c. */
typedef struct gcase {
    bfp8_grouped_layout layout;
    int64_t groups, m, n, k, kb, nb, rows;
    int64_t expected_m; /* the call's hint (0: the default) */
    bfp8_scale_format format;
    uint8_t *qa, *qb;
    float *sa, *sb;
    int32_t *idx, *masked_m;
    float *bias;
} gcase;

/* The group of a row as the device must treat it: masked_m clamped to [0, max_m], indices outside [0, G) unused. */
static int32_t row_group(const gcase *c, int64_t r) {
    if (c->layout == BFP8_GROUPED_MASKED) {
        const int64_t g = r / c->m, mg = c->masked_m[g] < 0 ? 0 : c->masked_m[g] > c->m ? c->m : c->masked_m[g];
        return r % c->m < mg ? (int32_t)g : -1;
    }
    return c->idx[r] >= 0 && c->idx[r] < c->groups ? c->idx[r] : -1;
}

typedef enum pattern { PAT_ALIGNED, PAT_SCATTERED, PAT_PADDING, PAT_MASKED } pattern;

static gcase make_case(bfp8_grouped_layout layout, int64_t groups, int64_t m, int64_t n, int64_t k,
                       bfp8_scale_format format, pattern pat) {
    gcase c = {.layout = layout, .groups = groups, .m = m, .n = n, .k = k, .format = format};
    c.kb = (k + 127) / 128;
    c.nb = (n + 127) / 128;
    c.rows = layout == BFP8_GROUPED_MASKED ? groups * m : m;
    float *a = malloc(sizeof(float) * (size_t)(c.rows * k + 1)), *b = malloc(sizeof(float) * (size_t)(groups * n * k + 1));
    c.qa = malloc((size_t)(c.rows * k + 1));
    c.qb = malloc((size_t)(groups * n * k + 1));
    c.sa = malloc(sizeof(float) * (size_t)(c.rows * c.kb + 1));
    c.sb = malloc(sizeof(float) * (size_t)(groups * c.nb * c.kb + 1));
    c.idx = malloc(sizeof(int32_t) * (size_t)(m + 1));
    c.masked_m = malloc(sizeof(int32_t) * (size_t)(groups + 1));
    c.bias = malloc(sizeof(float) * (size_t)(groups * n + 1));
    for (int64_t r = 0; r < c.rows; r++) {
        float s = ldexpf(1.0f, (int)(test_rand_u64() % 9) - 4);
        for (int64_t j = 0; j < k; j++) a[r * k + j] = test_randn(s);
    }
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < n; i++) {
            float s = ldexpf(1.0f, (int)((g + test_rand_u64() % 3) % 7) - 3) / sqrtf((float)(k ? k : 1));
            for (int64_t j = 0; j < k; j++) b[(g * n + i) * k + j] = test_randn(s);
        }
    for (int64_t i = 0; i < groups * n; i++) c.bias[i] = test_randn(0.5f);
    bfp8_scales s;
    CHECK_OK(bfp8_scales_init(&s, format, BFP8_LAYOUT_ROW_MAJOR, c.rows, c.kb, c.sa));
    CHECK_OK(bfp8_quantize_act(a, BFP8_DTYPE_F32, c.rows, k, c.qa, &s, NULL));
    for (int64_t g = 0; g < groups; g++) {
        CHECK_OK(bfp8_scales_init(&s, format, BFP8_LAYOUT_ROW_MAJOR, c.nb, c.kb, c.sb + g * c.nb * c.kb));
        CHECK_OK(bfp8_quantize_weight(b + g * n * k, BFP8_DTYPE_F32, n, k, c.qb + g * n * k, &s, NULL));
    }
    if (pat == PAT_MASKED) {
        for (int64_t g = 0; g < groups; g++)
            c.masked_m[g] = g == 0 ? 0 : g == 1 ? (int32_t)m : (int32_t)(test_rand_u64() % (uint64_t)(m + 1));
    } else if (pat == PAT_ALIGNED) {
        /* DeepGEMM's layout: segments in group order padded with -1 to 128 rows; group 1 empty. */
        int64_t r = 0;
        for (int64_t g = 0; g < groups && r < m; g++) {
            const int64_t cnt = g == 1 ? 0 : 1 + (int64_t)(test_rand_u64() % 200);
            for (int64_t i = 0; i < cnt && r < m; i++) c.idx[r++] = (int32_t)g;
            while (r < m && r % 128) c.idx[r++] = -1;
        }
        while (r < m) c.idx[r++] = -1;
    } else {
        for (int64_t r = 0; r < m; r++)
            c.idx[r] = pat == PAT_PADDING ? -1 : (int32_t)(test_rand_u64() % (uint64_t)(groups + 1)) - 1;
    }
    free(a), free(b);
    return c;
}

static void free_case(gcase *c) {
    free(c->qa), free(c->qb), free(c->sa), free(c->sb), free(c->idx), free(c->masked_m), free(c->bias);
}

static void *scales_to(const float *row_major, int64_t mats, int64_t rows, int64_t kb, bfp8_scale_format format,
                       bfp8_scale_layout layout, bfp8_scales *desc, size_t *bytes) {
    const size_t one = bfp8_scales_bytes(layout, rows, kb);
    char *buf = calloc(1, one * (size_t)mats + 1);
    for (int64_t i = 0; i < mats; i++) {
        bfp8_scales src, dst;
        CHECK_OK(bfp8_scales_init(&src, format, BFP8_LAYOUT_ROW_MAJOR, rows, kb, (void *)(row_major + i * rows * kb)));
        CHECK_OK(bfp8_scales_init(&dst, format, layout, rows, kb, buf + (size_t)i * one));
        CHECK_OK(bfp8_scales_convert(&src, &dst));
    }
    CHECK_OK(bfp8_scales_init(desc, format, layout, rows, kb, buf));
    *bytes = one * (size_t)mats;
    return buf;
}

static bfp8_dispatcher *strict_dispatcher(const char *name) {
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (d) CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, name));
    return d;
}

/* The reference output of a case (host, strict ref), with the clamped contents the device applies. */
static void *ref_output(const gcase *c, bfp8_dtype out, const void *bias, bfp8_dtype bias_dtype) {
    const size_t ybytes = (size_t)(c->rows * c->n) * bfp8_dtype_size(out);
    void *y = malloc(ybytes + 1);
    memset(y, POISON, ybytes);
    int32_t *clamped = malloc(sizeof(int32_t) * (size_t)(c->layout == BFP8_GROUPED_MASKED ? c->groups : c->m) + 4);
    if (c->layout == BFP8_GROUPED_MASKED)
        for (int64_t g = 0; g < c->groups; g++)
            clamped[g] = c->masked_m[g] < 0 ? 0 : c->masked_m[g] > c->m ? (int32_t)c->m : c->masked_m[g];
    else
        for (int64_t r = 0; r < c->m; r++) clamped[r] = row_group(c, r);
    bfp8_grouped_gemm_args a = {.layout = c->layout, .groups = c->groups, .m = c->m, .n = c->n, .k = c->k,
                                .a = c->qa, .b = c->qb, .m_indices = clamped, .masked_m = clamped, .bias = bias,
                                .bias_dtype = bias_dtype, .y = y, .y_dtype = out, .device = BFP8_DEVICE_CPU};
    bfp8_scales_init(&a.a_scales, c->format, BFP8_LAYOUT_ROW_MAJOR, c->m, c->kb, c->sa);
    bfp8_scales_init(&a.b_scales, c->format, BFP8_LAYOUT_ROW_MAJOR, c->nb, c->kb, c->sb);
    bfp8_dispatcher *d = strict_dispatcher("ref");
    CHECK_OK(bfp8_grouped_gemm(d, &a));
    bfp8_dispatcher_free(d);
    free(clamped);
    return y;
}

static double tolerance(bfp8_dtype dt) { return dt == BFP8_DTYPE_BF16 ? 8e-3 : dt == BFP8_DTYPE_F16 ? 1e-3 : 2.5e-4; }

/* Device buffers of one call. */
typedef struct dev_call {
    bfp8_grouped_gemm_args args;
    void *bufs[8];
    int nbufs;
    size_t ybytes;
} dev_call;

static void *keep(dev_call *dc, void *p) { return dc->bufs[dc->nbufs++] = p; }

static dev_call dev_prepare(const gcase *c, bfp8_dtype out, const void *bias, bfp8_dtype bias_dtype,
                            bfp8_scale_layout la, bfp8_scale_layout lb) {
    dev_call dc = {.ybytes = (size_t)(c->rows * c->n) * bfp8_dtype_size(out)};
    bfp8_grouped_gemm_args *a = &dc.args;
    *a = (bfp8_grouped_gemm_args){.layout = c->layout, .groups = c->groups, .m = c->m, .n = c->n, .k = c->k,
                                  .expected_m = c->expected_m, .bias_dtype = bias_dtype, .y_dtype = out,
                                  .device = BFP8_DEVICE_CUDA};
    size_t bytes;
    void *host = scales_to(c->sa, c->layout == BFP8_GROUPED_MASKED ? c->groups : 1, c->m, c->kb, c->format, la,
                           &a->a_scales, &bytes);
    a->a_scales.data = keep(&dc, dev_upload(host, bytes));
    free(host);
    host = scales_to(c->sb, c->groups, c->nb, c->kb, c->format, lb, &a->b_scales, &bytes);
    a->b_scales.data = keep(&dc, dev_upload(host, bytes));
    free(host);
    a->a = keep(&dc, dev_upload(c->qa, (size_t)(c->rows * c->k)));
    a->b = keep(&dc, dev_upload(c->qb, (size_t)(c->groups * c->n * c->k)));
    if (c->layout == BFP8_GROUPED_MASKED)
        a->masked_m = keep(&dc, dev_upload(c->masked_m, sizeof(int32_t) * (size_t)c->groups));
    else
        a->m_indices = keep(&dc, dev_upload(c->idx, sizeof(int32_t) * (size_t)c->m));
    if (bias) a->bias = keep(&dc, dev_upload(bias, (size_t)(c->groups * c->n) * bfp8_dtype_size(bias_dtype)));
    unsigned char *poison = malloc(dc.ybytes + GUARD);
    memset(poison, POISON, dc.ybytes + GUARD);
    a->y = keep(&dc, dev_upload(poison, dc.ybytes + GUARD));
    free(poison);
    return dc;
}

static void dev_release(dev_call *dc) {
    for (int i = 0; i < dc->nbufs; i++) bfp8_cuda_free(dc->bufs[i]);
}

/* Downloads the output (and guard) of a call and checks it against ref: used rows within tolerance and written,
 * unused rows and the guard untouched. */
static void check_output(const gcase *c, const dev_call *dc, const void *ref, const char *desc) {
    const bfp8_dtype out = dc->args.y_dtype;
    const size_t row_bytes = (size_t)c->n * bfp8_dtype_size(out);
    unsigned char *y = malloc(dc->ybytes + GUARD);
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    CHECK_OK(bfp8_cuda_download(y, dc->args.y, dc->ybytes + GUARD));
    int64_t touched = 0, unwritten = 0, guard = 0;
    double num = 0, den = 0;
    for (int64_t r = 0; r < c->rows; r++) {
        const unsigned char *row = y + (size_t)r * row_bytes, *rrow = (const unsigned char *)ref + (size_t)r * row_bytes;
        if (row_group(c, r) < 0) {
            for (size_t i = 0; i < row_bytes; i++) touched += row[i] != POISON;
            continue;
        }
        for (int64_t j = 0; j < c->n; j++) {
            const double v = bfp8_load_f32(row, out, j), w = bfp8_load_f32(rrow, out, j);
            unwritten += isnan(v);
            num += (v - w) * (v - w), den += w * w;
        }
    }
    for (size_t i = 0; i < GUARD; i++) guard += y[dc->ybytes + i] != POISON;
    const double err = den > 0 ? sqrt(num / den) : sqrt(num);
    CHECK(touched == 0, "%s: %lld bytes of unused rows written", desc, (long long)touched);
    CHECK(guard == 0, "%s: %lld bytes written past the output", desc, (long long)guard);
    CHECK(unwritten == 0, "%s: %lld outputs of used rows unwritten", desc, (long long)unwritten);
    CHECK(err <= tolerance(out), "%s: relative error %.3g vs ref > %.1g", desc, err, tolerance(out));
    free(y);
}

static int calls_checked;

static void run_case(bfp8_dispatcher *d, const gcase *c, bfp8_dtype out, bool with_bias, bfp8_dtype bias_dtype,
                     bfp8_scale_layout la, bfp8_scale_layout lb, const char *label) {
    void *bias = NULL;
    if (with_bias) {
        bias = malloc((size_t)(c->groups * c->n) * 4 + 1);
        for (int64_t i = 0; i < c->groups * c->n; i++) bfp8_store_f32(bias, bias_dtype, i, c->bias[i]);
    }
    char desc[256];
    snprintf(desc, sizeof desc, "%s %s G=%lld m=%lld n=%lld k=%lld expected_m=%lld out=%s scales=%s/%s,%s bias=%s",
             label, bfp8_grouped_layout_name(c->layout), (long long)c->groups, (long long)c->m, (long long)c->n,
             (long long)c->k, (long long)c->expected_m, bfp8_dtype_name(out), bfp8_scale_format_name(c->format),
             bfp8_scale_layout_name(la),
             bfp8_scale_layout_name(lb), with_bias ? bfp8_dtype_name(bias_dtype) : "none");
    void *ref = ref_output(c, out, bias, bias_dtype);
    dev_call dc = dev_prepare(c, out, bias, bias_dtype, la, lb);
    bfp8_status st = bfp8_grouped_gemm(d, &dc.args);
    CHECK(st == BFP8_OK, "%s: %s: %s", desc, bfp8_status_name(st), bfp8_last_error());
    if (st == BFP8_OK) check_output(c, &dc, ref, desc);
    calls_checked++;
    dev_release(&dc);
    free(ref), free(bias);
}

/* ---- tests ---------------------------------------------------------------------------------------------------- */

static void test_layouts(bfp8_dispatcher *d) {
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32};
    int v = 0;
    for (int f = 0; f < 2; f++) {
        const bfp8_scale_format fmt = (bfp8_scale_format)f;
        const int nl = f ? 4 : 3; /* packed only for UE8M0 */
        /* Contiguous: DeepGEMM's 128-aligned segments on aligned and ragged shapes, scattered rows (several
         * experts per tile), all padding, G = 256. */
        struct { pattern p; int64_t g, m, n, k; } cs[] = {
            {PAT_ALIGNED, 4, 640, 256, 512}, {PAT_ALIGNED, 3, 512, 200, 300}, {PAT_SCATTERED, 5, 77, 200, 300},
            {PAT_SCATTERED, 7, 300, 384, 1000}, {PAT_PADDING, 3, 64, 128, 256}, {PAT_SCATTERED, 256, 600, 64, 256},
        };
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++, v++) {
            gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, cs[i].g, cs[i].m, cs[i].n, cs[i].k, fmt, cs[i].p);
            run_case(d, &c, outs[v % 3], v % 2, outs[(v / 2) % 3], (bfp8_scale_layout)(v % nl),
                     (bfp8_scale_layout)((v + 1) % nl), "layouts");
            free_case(&c);
        }
        /* Masked: decode shapes (max_m 128 with a few rows), ragged, many groups. */
        struct { int64_t g, m, n, k; } ms[] = {{8, 128, 256, 512}, {3, 17, 130, 255}, {32, 4, 192, 128}, {6, 256, 512, 384}};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++, v++) {
            gcase c = make_case(BFP8_GROUPED_MASKED, ms[i].g, ms[i].m, ms[i].n, ms[i].k, fmt, PAT_MASKED);
            run_case(d, &c, outs[v % 3], v % 2, outs[(v / 2) % 3], (bfp8_scale_layout)(v % nl),
                     (bfp8_scale_layout)((v + 2) % nl), "layouts");
            free_case(&c);
        }
    }
    /* Unaligned K (the byte-load path) and K = 0 (the bias alone). */
    gcase c = make_case(BFP8_GROUPED_MASKED, 3, 40, 96, 200, BFP8_SCALE_FP32, PAT_MASKED);
    run_case(d, &c, BFP8_DTYPE_BF16, true, BFP8_DTYPE_BF16, BFP8_LAYOUT_ROW_MAJOR, BFP8_LAYOUT_ROW_MAJOR, "K=200");
    free_case(&c);
    c = make_case(BFP8_GROUPED_CONTIGUOUS, 3, 40, 96, 0, BFP8_SCALE_FP32, PAT_SCATTERED);
    run_case(d, &c, BFP8_DTYPE_F32, true, BFP8_DTYPE_F32, BFP8_LAYOUT_ROW_MAJOR, BFP8_LAYOUT_ROW_MAJOR, "K=0");
    free_case(&c);
}

/* What the device does with contents the host cannot check without a sync: masked_m beyond max_m writes max_m
 * rows and nothing past them, negative writes none, indices outside [-1, G) are skipped. */
static void test_bad_contents(bfp8_dispatcher *d) {
    gcase c = make_case(BFP8_GROUPED_MASKED, 4, 32, 128, 256, BFP8_SCALE_FP32, PAT_MASKED);
    c.masked_m[0] = 33, c.masked_m[1] = INT32_MAX, c.masked_m[2] = -5, c.masked_m[3] = INT32_MIN;
    run_case(d, &c, BFP8_DTYPE_BF16, false, BFP8_DTYPE_F32, BFP8_LAYOUT_MN_MAJOR_ALIGNED, BFP8_LAYOUT_ROW_MAJOR,
             "bad masked_m");
    free_case(&c);
    c = make_case(BFP8_GROUPED_CONTIGUOUS, 4, 300, 128, 256, BFP8_SCALE_FP32, PAT_SCATTERED);
    c.idx[0] = 4, c.idx[1] = -2, c.idx[130] = INT32_MAX, c.idx[131] = INT32_MIN, c.idx[299] = 1000;
    run_case(d, &c, BFP8_DTYPE_BF16, true, BFP8_DTYPE_F32, BFP8_LAYOUT_MN_MAJOR_ALIGNED, BFP8_LAYOUT_ROW_MAJOR,
             "bad m_indices");
    free_case(&c);
}

/* Whether the dense call of the dispatcher's backend on a group's `rows` rows sums in the grouped kernel's order. */
typedef bool (*same_order_fn)(const gcase *c, int64_t rows);

/* A group's bytes are, where same_order says so, the dense call's on its rows (gathered in row order), with scales
 * in the layouts la / lb; at least one group must be compared. */
static void check_equals_dense(bfp8_dispatcher *d, const gcase *c, bfp8_scale_layout la, bfp8_scale_layout lb,
                               same_order_fn same_order, const char *label) {
    dev_call dc = dev_prepare(c, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32, la, lb);
    CHECK_OK(bfp8_grouped_gemm(d, &dc.args));
    const size_t row_bytes = (size_t)c->n * 2;
    unsigned char *y = malloc(dc.ybytes), *yd = malloc(dc.ybytes);
    CHECK_OK(bfp8_cuda_synchronize(NULL));
    CHECK_OK(bfp8_cuda_download(y, dc.args.y, dc.ybytes));
    int64_t differ = 0, compared = 0;
    for (int64_t g = 0; g < c->groups; g++) {
        int64_t cnt = 0;
        uint8_t *a = malloc((size_t)(c->m * c->k));
        float *sa = malloc(sizeof(float) * (size_t)(c->m * c->kb));
        int64_t *rows = malloc(sizeof(int64_t) * (size_t)c->m);
        for (int64_t r = 0; r < c->m; r++)
            if (c->idx[r] == g) {
                memcpy(a + cnt * c->k, c->qa + r * c->k, (size_t)c->k);
                memcpy(sa + cnt * c->kb, c->sa + r * c->kb, sizeof(float) * (size_t)c->kb);
                rows[cnt++] = r;
            }
        if (cnt && same_order(c, cnt)) {
            bfp8_gemm_args dg = {
                .m = cnt, .n = c->n, .k = c->k, .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CUDA};
            dg.a = dev_upload(a, (size_t)(cnt * c->k));
            size_t bytes;
            void *host = scales_to(sa, 1, cnt, c->kb, c->format, la, &dg.a_scales, &bytes);
            dg.a_scales.data = dev_upload(host, bytes);
            free(host);
            dg.b = (const uint8_t *)dc.args.b + g * c->n * c->k;
            dg.b_scales = dc.args.b_scales;
            dg.b_scales.data = (char *)dc.args.b_scales.data + g * bfp8_grouped_scale_stride(&dc.args.b_scales);
            void *ydev = NULL;
            CHECK_OK(bfp8_cuda_malloc((size_t)cnt * row_bytes, &ydev));
            dg.y = ydev;
            CHECK_OK(bfp8_gemm(d, &dg));
            CHECK_OK(bfp8_cuda_synchronize(NULL));
            CHECK_OK(bfp8_cuda_download(yd, ydev, (size_t)cnt * row_bytes));
            for (int64_t i = 0; i < cnt; i++)
                differ += memcmp(y + rows[i] * row_bytes, yd + i * row_bytes, row_bytes) != 0;
            compared++;
            bfp8_cuda_free((void *)dg.a), bfp8_cuda_free(dg.a_scales.data), bfp8_cuda_free(ydev);
        }
        free(a), free(sa), free(rows);
    }
    CHECK(compared > 0, "%s: no group compared with the dense call", label);
    CHECK(differ == 0, "%s: %lld rows differ from the dense call on their group's rows", label, (long long)differ);
    free(y), free(yd);
    dev_release(&dc);
}

/* cuda_generic: the dense mma.sync kernel splits K only from 4 K blocks on (and at M <= 256). */
static bool generic_same_order(const gcase *c, int64_t rows) { return c->kb < 4 || rows > 256; }

static void test_equals_dense(bfp8_dispatcher *d) {
    gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, 3, 200, 192, 384, BFP8_SCALE_UE8M0, PAT_SCATTERED);
    check_equals_dense(d, &c, BFP8_LAYOUT_ROW_MAJOR, BFP8_LAYOUT_ROW_MAJOR, generic_same_order, "cuda_generic");
    free_case(&c);
}

/* A masked call captured in a CUDA graph replays correctly when masked_m changes between replays: the count is
 * read by the kernel at each launch. */
static void test_graph_replay(bfp8_dispatcher *d) {
#ifdef BFP8_WITH_CUDA
    gcase c = make_case(BFP8_GROUPED_MASKED, 8, 128, 256, 512, BFP8_SCALE_FP32, PAT_MASKED);
    dev_call dc = dev_prepare(&c, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32, BFP8_LAYOUT_MN_MAJOR_ALIGNED,
                              BFP8_LAYOUT_ROW_MAJOR);
    cudaStream_t stream;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CHECK(cudaStreamCreate(&stream) == cudaSuccess, "stream");
    dc.args.stream = stream;
    bfp8_status st = BFP8_OK;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess, "begin capture");
    st = bfp8_grouped_gemm(d, &dc.args);
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess && st == BFP8_OK, "capture: %s", bfp8_last_error());
    CHECK(graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
    unsigned char *poison = malloc(dc.ybytes + GUARD);
    memset(poison, POISON, dc.ybytes + GUARD);
    for (int replay = 0; replay < 3 && exec; replay++) {
        for (int64_t g = 0; g < c.groups; g++)
            c.masked_m[g] = replay == 2 ? 0 : (int32_t)(test_rand_u64() % (uint64_t)(c.m + 1));
        CHECK_OK(bfp8_cuda_upload((void *)dc.args.masked_m, c.masked_m, sizeof(int32_t) * (size_t)c.groups));
        CHECK_OK(bfp8_cuda_upload(dc.args.y, poison, dc.ybytes + GUARD));
        CHECK(cudaGraphLaunch(exec, stream) == cudaSuccess, "replay %d", replay);
        CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "replay %d sync", replay);
        void *ref = ref_output(&c, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32);
        char desc[64];
        snprintf(desc, sizeof desc, "graph replay %d", replay);
        check_output(&c, &dc, ref, desc);
        free(ref);
    }
    free(poison);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    dev_release(&dc);
    free_case(&c);
#else
    (void)d;
#endif
}


/* Dispatch on the device: auto picks hopper for grouped problems it takes on sm_90 (grouped problems rank by
 * priority), cuda_generic elsewhere and for what hopper declines; cublaslt says why not. */
static void test_dispatch(void) {
    bfp8_dispatcher *d = bfp8_dispatcher_default();
    gcase c = make_case(BFP8_GROUPED_MASKED, 2, 16, 128, 256, BFP8_SCALE_FP32, PAT_MASKED);
    dev_call dc = dev_prepare(&c, BFP8_DTYPE_BF16, NULL, BFP8_DTYPE_F32, BFP8_LAYOUT_MN_MAJOR_ALIGNED,
                              BFP8_LAYOUT_ROW_MAJOR);
    bfp8_problem p;
    bfp8_decision dec;
    CHECK_OK(bfp8_problem_from_grouped_gemm(&dc.args, &p));
    const bfp8_backend *gpu[3];
    size_t count = 0;
    for (const char *const *name = (const char *const[]){"hopper", "cublaslt", "cuda_generic", NULL}; *name; name++)
        if (bfp8_dispatcher_find(d, *name)) gpu[count++] = bfp8_dispatcher_find(d, *name);
    CHECK_OK(bfp8_select(gpu, count, &p, BFP8_POLICY_AUTO, NULL, &dec));
    const char *want = bfp8_dispatcher_find(d, "hopper") ? "hopper" : "cuda_generic";
    CHECK(dec.backend && strcmp(dec.backend->name, want) == 0, "auto: %s, want %s",
          dec.backend ? dec.backend->name : "-", want);
    /* K = 200 is no multiple of 16: hopper declines it, cuda_generic takes it. */
    p.k = 200;
    CHECK_OK(bfp8_select(gpu, count, &p, BFP8_POLICY_AUTO, NULL, &dec));
    CHECK(dec.backend && strcmp(dec.backend->name, "cuda_generic") == 0, "auto at K=200: %s",
          dec.backend ? dec.backend->name : "-");
    if (bfp8_dispatcher_find(d, "cublaslt")) {
        bfp8_dispatcher *strict = strict_dispatcher("cublaslt");
        CHECK_STATUS(bfp8_grouped_gemm(strict, &dc.args), BFP8_ERR_UNSUPPORTED);
        CHECK(strstr(bfp8_last_error(), "no grouped GEMM"), "cublaslt strict: '%s'", bfp8_last_error());
        bfp8_dispatcher_free(strict);
    }
    dev_release(&dc);
    free_case(&c);
}

/* The weight store's upload for G groups (src/weight_store.c): a grouped weight prepared for a CUDA backend of each
 * scale layout holds each on the device with the host's bytes (all G matrices), q [G, N, K] uploaded once.
 * test_linear runs the grouped GEMM on such an upload. */
static void test_weight_upload(void) {
    enum { G = 3, N = 200, K = 300 }; /* ragged: the aligned and packed layouts pad their rows */
    float *w = malloc(sizeof(float) * G * N * K);
    for (int64_t i = 0; i < G * N * K; i++) w[i] = test_randn(0.05f * (float)(1 + i / (N * K)));
    bfp8_dispatcher *spies = test_layout_spies(BFP8_DEVICE_CUDA);
    for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT && spies; f++) {
        const bfp8_scale_format format = (bfp8_scale_format)f;
        bfp8_grouped_weight *gw = NULL;
        CHECK_OK(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_F32, G, N, K, format, &gw, NULL));
        if (!gw) continue;
        CHECK_OK(bfp8_grouped_weight_prepare(gw, spies, NULL));
        bfp8_grouped_weight_info info = {0};
        CHECK_OK(bfp8_grouped_weight_info_get(gw, &info));
        CHECK(info.device_layouts == bfp8_scale_layouts_for(format) && info.host_layouts == info.device_layouts,
              "%s: layouts host %#x device %#x", bfp8_scale_format_name(format), info.host_layouts,
              info.device_layouts);
        test_check_uploads(bfp8_scale_format_name(format), gw, test_view_grouped, info.device_layouts, G * N * K, G);
        bfp8_grouped_weight_free(gw);
    }
    bfp8_dispatcher_free(spies);
    free(w);
}

/* The grouped linear on the device equals, within tolerance, the host reference's; unused rows stay unwritten. */
static void test_linear(const char *backend) {
    enum { G = 5, N = 256, K = 640, M = 130 };
    float *w = malloc(sizeof(float) * G * N * K);
    for (int64_t i = 0; i < G * N * K; i++) w[i] = test_randn(0.04f);
    bfp8_grouped_weight *gw = NULL;
    CHECK_OK(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_F32, G, N, K, BFP8_SCALE_UE8M0, &gw, NULL));
    bfp8_dispatcher *d = strict_dispatcher(backend), *ref = strict_dispatcher("ref");
    CHECK_OK(bfp8_grouped_weight_prepare(gw, d, backend));
    bfp8_grouped_weight_info info;
    CHECK_OK(bfp8_grouped_weight_info_get(gw, &info));
    CHECK(info.device_layouts != 0, "prepared on the device");
    for (int lay = 0; lay < 2 && gw; lay++) {
        const bool masked = lay == 1;
        const int64_t rows = masked ? G * M : M;
        uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(rows * K));
        for (int64_t i = 0; i < rows * K; i++) x[i] = bfp8_bf16_from_f32(test_randn(1.0f));
        int32_t idx[M], counts[G] = {0, 130, 7, 64, 1};
        for (int i = 0; i < M; i++) idx[i] = (int32_t)(test_rand_u64() % (G + 1)) - 1;
        const size_t ybytes = sizeof(uint16_t) * (size_t)(rows * N);
        uint16_t *y_ref = malloc(ybytes), *y = malloc(ybytes);
        memset(y_ref, POISON, ybytes), memset(y, POISON, ybytes);
        bfp8_grouped_linear_args a = {.layout = masked ? BFP8_GROUPED_MASKED : BFP8_GROUPED_CONTIGUOUS, .x = x,
                                      .x_dtype = BFP8_DTYPE_BF16, .m = M, .m_indices = idx, .masked_m = counts,
                                      .y = y_ref, .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
        CHECK_OK(bfp8_grouped_linear(ref, gw, &a));
        a.device = BFP8_DEVICE_CUDA;
        a.x = dev_upload(x, sizeof(uint16_t) * (size_t)(rows * K));
        a.y = dev_upload(y, ybytes);
        a.m_indices = dev_upload(idx, sizeof idx);
        a.masked_m = dev_upload(counts, sizeof counts);
        CHECK_OK(bfp8_grouped_linear(d, gw, &a));
        CHECK_OK(bfp8_cuda_synchronize(NULL));
        CHECK_OK(bfp8_cuda_download(y, a.y, ybytes));
        double num = 0, den = 0;
        int64_t touched = 0;
        for (int64_t r = 0; r < rows; r++) {
            const bool used = masked ? r % M < counts[r / M] : idx[r] >= 0;
            for (int64_t j = 0; j < N; j++) {
                if (!used) {
                    touched += y[r * N + j] != 0xFFFF;
                    continue;
                }
                const double v = bfp8_bf16_to_f32(y[r * N + j]), e = bfp8_bf16_to_f32(y_ref[r * N + j]);
                num += (v - e) * (v - e), den += e * e;
            }
        }
        CHECK(touched == 0, "%s linear %s: %lld unused outputs written", backend, masked ? "masked" : "contiguous",
              (long long)touched);
        CHECK(sqrt(num / den) <= 8e-3, "%s linear %s: relative error %.3g vs ref", backend,
              masked ? "masked" : "contiguous", sqrt(num / den));
        bfp8_cuda_free((void *)a.x), bfp8_cuda_free(a.y), bfp8_cuda_free((void *)a.m_indices), bfp8_cuda_free((void *)a.masked_m);
        free(x), free(y), free(y_ref);
    }
    bfp8_grouped_weight_free(gw);
    bfp8_dispatcher_free(d), bfp8_dispatcher_free(ref);
    free(w);
}

/* ---- hopper ---------------------------------------------------------------------------------------------------- */
#ifdef BFP8_WITH_CUDA

static int g_sms; /* the device's SMs, for the plans that hopper's cases reason about */

/* hopper's grouped kernel at its boundaries: K a multiple of 16 (16 the least), the scale layouts it takes
 * (activations mn_major_aligned, weights row_major), masked tiles of 64 rows (expected_m <= 64) and of 128, groups of
 * several row tiles, contiguous tiles mixing experts (scattered rows) or holding only padding, partial weight tiles
 * (N not a multiple of 64, N < 64), G = 256. */
static void test_hopper_layouts(bfp8_dispatcher *d) {
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32};
    const bfp8_scale_layout la = BFP8_LAYOUT_MN_MAJOR_ALIGNED, lb = BFP8_LAYOUT_ROW_MAJOR;
    int v = 0;
    for (int f = 0; f < 2; f++) {
        const bfp8_scale_format fmt = (bfp8_scale_format)f;
        struct { pattern p; int64_t g, m, n, k, expected; } cs[] = {
            {PAT_ALIGNED, 4, 640, 256, 512, 0},     {PAT_ALIGNED, 3, 512, 200, 304, 0},
            {PAT_SCATTERED, 5, 77, 200, 16, 0},     {PAT_SCATTERED, 7, 300, 384, 1024, 0},
            {PAT_PADDING, 3, 64, 128, 256, 0},      {PAT_SCATTERED, 256, 600, 64, 256, 0},
            {PAT_ALIGNED, 8, 1024, 2112, 512, 128}, {PAT_SCATTERED, 2, 1, 8, 32, 0},
        };
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++, v++) {
            gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, cs[i].g, cs[i].m, cs[i].n, cs[i].k, fmt, cs[i].p);
            c.expected_m = cs[i].expected;
            run_case(d, &c, outs[v % 3], v % 2, outs[(v / 2) % 3], la, lb, "hopper");
            free_case(&c);
        }
        /* Masked: decode (max_m 128, few rows: 64-row tiles), ragged max_m and N, many groups, several row tiles
         * per group with 64- and 128-row tiles (expected_m 64 and 200 on max_m 256). */
        struct { int64_t g, m, n, k, expected; } ms[] = {
            {8, 128, 256, 512, 16}, {3, 17, 130, 256, 0},   {32, 4, 192, 128, 0},    {6, 256, 512, 384, 64},
            {6, 256, 512, 384, 200}, {4, 130, 2112, 1024, 65}, {5, 200, 40, 16, 1},
        };
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++, v++) {
            gcase c = make_case(BFP8_GROUPED_MASKED, ms[i].g, ms[i].m, ms[i].n, ms[i].k, fmt, PAT_MASKED);
            c.expected_m = ms[i].expected;
            run_case(d, &c, outs[v % 3], v % 2, outs[(v / 2) % 3], la, lb, "hopper");
            free_case(&c);
        }
    }
}

/* hopper's dense call sums in the grouped kernel's order where its plan is the normal path's whole tiles of the
 * grouped plan's width (no K split, no stream-K, no swapped operands). */
static bool hopper_same_order(const gcase *c, int64_t rows) {
    bfp8_hopper_cluster_fit fit;
    if (bfp8_hopper_device_cluster_fit(&fit) != BFP8_OK) return false;
    const bfp8_hopper_knobs *knobs = bfp8_hopper_knobs_env();
    const bfp8_hopper_plan dense = bfp8_hopper_plan_make(rows, c->n, c->k, g_sms, &fit, knobs);
    const bfp8_hopper_plan grouped =
        bfp8_hopper_plan_grouped(BFP8_HOPPER_CONTIGUOUS, c->groups, c->m, c->n, c->k, c->expected_m, g_sms, knobs);
    return !dense.swap && dense.splits == 1 && !dense.sk_tiles && !dense.slice_rows && dense.bq == grouped.bq;
}

/* Groups of 512 rows against a 4096 x 1024 weight: 4 x 32 tiles in the dense call, under one wave of 132 SMs, so its
 * plan is whole 128-wide tiles, as the grouped plan's (12 x 32 tiles). */
static void test_hopper_equals_dense(bfp8_dispatcher *d) {
    gcase c = make_case(BFP8_GROUPED_CONTIGUOUS, 3, 1536, 4096, 1024, BFP8_SCALE_UE8M0, PAT_ALIGNED);
    static const int32_t order[3] = {2, 0, 1};
    for (int64_t r = 0; r < c.m; r++) c.idx[r] = order[r / 512];
    check_equals_dense(d, &c, BFP8_LAYOUT_MN_MAJOR_ALIGNED, BFP8_LAYOUT_ROW_MAJOR, hopper_same_order, "hopper");
    free_case(&c);
}

/* hopper's grouped kernel on every case above, where the device has it (sm_90). */
static void test_hopper(void) {
    bfp8_dispatcher *defaults = bfp8_dispatcher_default();
    if (!bfp8_dispatcher_find(defaults, "hopper")) {
        printf("cuda_grouped: hopper not here (sm_%d): its grouped kernel not run\n", bfp8_cuda_arch());
        return;
    }
    bfp8_cuda_device_info info;
    CHECK_OK(bfp8_cuda_device_info_get(&info));
    g_sms = info.num_sms;
    bfp8_dispatcher *d = strict_dispatcher("hopper");
    test_hopper_layouts(d);
    test_bad_contents(d);
    test_hopper_equals_dense(d);
    test_graph_replay(d);
    bfp8_dispatcher_free(d);
    test_linear("hopper");
}
#else
static void test_hopper(void) {}
#endif

/* Without a device: a grouped call on device data says why. */
static void check_unavailable(const char *why) {
    int32_t counts[1] = {1};
    uint8_t a[128], b[128];
    float s = 1.0f, y[1];
    bfp8_grouped_gemm_args g = {.layout = BFP8_GROUPED_MASKED, .groups = 1, .m = 1, .n = 1, .k = 128, .a = a, .b = b,
                                .masked_m = counts, .y = y, .y_dtype = BFP8_DTYPE_F32, .device = BFP8_DEVICE_CUDA};
    bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, &s);
    bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, &s);
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    CHECK_STATUS(bfp8_grouped_gemm(d, &g), BFP8_ERR_UNSUPPORTED);
    CHECK(strstr(bfp8_last_error(), "cpu") != NULL, "no device (%s): '%s'", why, bfp8_last_error());
    bfp8_dispatcher_free(d);
    /* A grouped weight prepared for a CUDA backend says why and keeps its host forms. */
    bfp8_dispatcher *spies = test_layout_spies(BFP8_DEVICE_CUDA);
    bfp8_grouped_weight *gw = NULL;
    float w[2 * 128];
    for (int i = 0; i < 2 * 128; i++) w[i] = test_randn(1.0f);
    CHECK_OK(bfp8_grouped_weight_quantize(w, BFP8_DTYPE_F32, 2, 1, 128, BFP8_SCALE_FP32, &gw, NULL));
    if (spies && gw) {
        bfp8_grouped_weight_info info;
        CHECK_STATUS(bfp8_grouped_weight_prepare(gw, spies, NULL), BFP8_ERR_UNSUPPORTED);
        CHECK_OK(bfp8_grouped_weight_info_get(gw, &info));
        CHECK(info.device_layouts == 0 && (info.host_layouts & BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)),
              "a failed upload left layouts host %#x device %#x", info.host_layouts, info.device_layouts);
    }
    bfp8_grouped_weight_free(gw);
    bfp8_dispatcher_free(spies);
}

int main(void) {
    test_seed();
    char why[BFP8_REASON_MAX];
    if (!bfp8_cuda_available(why, sizeof why)) {
        check_unavailable(why);
        const char *req = getenv("BFP8_REQUIRE_CUDA");
        CHECK(!(req && req[0] == '1'), "BFP8_REQUIRE_CUDA=1 but no device: %s", why);
        printf("cuda_grouped: skipped: %s\n", why);
        return TEST_SUMMARY("cuda_grouped");
    }
    bfp8_dispatcher *d = strict_dispatcher("cuda_generic");
    if (d) {
        test_layouts(d);
        test_bad_contents(d);
        test_equals_dense(d);
        test_graph_replay(d);
    }
    bfp8_dispatcher_free(d);
    test_dispatch();
    test_weight_upload();
    test_linear("cuda_generic");
    test_hopper();
    printf("cuda_grouped: %d grouped calls checked against ref\n", calls_checked);
    return TEST_SUMMARY("cuda_grouped");
}
