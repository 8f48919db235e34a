/* Quantization, dequantization, requantization and scale layouts (docs/numerics.md), against a reference written
 * here from the spec: amax in double over the finite values that exist, the scale by its own route (frexp for
 * UE8M0), E4M3 by a table search, scale positions by the test's own index arithmetic. */
#include "check.h"
#include "internal.h"

#include <float.h>

static const bfp8_scale_layout all_layouts[] = {BFP8_LAYOUT_ROW_MAJOR, BFP8_LAYOUT_MN_MAJOR,
                                                BFP8_LAYOUT_MN_MAJOR_ALIGNED, BFP8_LAYOUT_PACKED_UE8M0};

/* ---- reference ----------------------------------------------------------------------------------------------- */

static float ref_pow2_ceil(float s) {
    int e;
    double f = frexp((double)s, &e);
    if (f == 0.5) e -= 1; /* exact power of two */
    if (e < -126) e = -126;
    if (e > 127) e = 127;
    return ldexpf(1.0f, e);
}

/* E4M3 by its own route: binary search in the 127 non-negative finite values (textbook formula), compare with
 * the exact midpoint, ties to the even code; beyond 448 saturates. */
static uint8_t ref_e4m3(float x) {
    static double values[127];
    if (values[1] == 0)
        for (int c = 0; c < 127; c++)
            values[c] = (c >> 3) == 0 ? ldexp((c & 7) / 8.0, -6) : ldexp(1.0 + (c & 7) / 8.0, (c >> 3) - 7);
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return sign | 0x7F;
    double a = fabs((double)x);
    if (a >= 448.0) return sign | 0x7E;
    int lo = 0, hi = 126; /* values[lo] <= a < values[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (values[mid] <= a) lo = mid; else hi = mid;
    }
    double midpoint = (values[lo] + values[hi]) / 2;
    int pick = a < midpoint ? lo : a > midpoint ? hi : (lo % 2 == 0 ? lo : hi);
    return (uint8_t)(sign | pick);
}

/* x is fp32 (already the values the library sees). Scales row-major [rows/group_rows][kblocks]. */
static int64_t ref_quantize(const float *x, int64_t rows, int64_t k, int64_t group_rows, bfp8_scale_format format,
                            uint8_t *q, float *scales) {
    int64_t kblocks = (k + 127) / 128, bad = 0;
    for (int64_t g = 0; g * group_rows < rows; g++) {
        for (int64_t kb = 0; kb < kblocks; kb++) {
            double amax = 0;
            for (int64_t r = g * group_rows; r < rows && r < (g + 1) * group_rows; r++)
                for (int64_t c = kb * 128; c < k && c < (kb + 1) * 128; c++) {
                    double v = x[r * k + c];
                    if (isfinite(v)) {
                        if (fabs(v) > amax) amax = fabs(v);
                    } else {
                        bad++;
                    }
                }
            float a = (float)amax < 1e-10f ? 1e-10f : (float)amax;
            float s = a / 448.0f;
            if (format == BFP8_SCALE_UE8M0) s = ref_pow2_ceil(s);
            scales[g * kblocks + kb] = s;
            for (int64_t r = g * group_rows; r < rows && r < (g + 1) * group_rows; r++)
                for (int64_t c = kb * 128; c < k && c < (kb + 1) * 128; c++) {
                    float v = x[r * k + c];
                    q[r * k + c] = isfinite(v) ? ref_e4m3(v / s) : (signbit(v) ? 0xFF : 0x7F);
                }
        }
    }
    return bad;
}

/* The scale at (r, kb) read straight from the buffer with the header's layout formulas. */
static float raw_scale(const bfp8_scales *s, int64_t r, int64_t kb) {
    int64_t ld = (s->rows + 3) / 4 * 4;
    switch (s->layout) {
    case BFP8_LAYOUT_ROW_MAJOR: return ((const float *)s->data)[r * s->kblocks + kb];
    case BFP8_LAYOUT_MN_MAJOR: return ((const float *)s->data)[kb * s->rows + r];
    case BFP8_LAYOUT_MN_MAJOR_ALIGNED: return ((const float *)s->data)[kb * ld + r];
    default: {
        uint32_t w = ((const uint32_t *)s->data)[(kb / 4) * ld + r];
        uint8_t e = (uint8_t)(w >> (8 * (kb % 4)));
        return ldexpf(1.0f, e - 127);
    }
    }
}

/* Padding (rows..ld of the MN-major aligned/packed layouts, unused bytes of the last packed word) is zero. */
static int count_nonzero_padding(const bfp8_scales *s) {
    int64_t ld = (s->rows + 3) / 4 * 4, bad = 0;
    if (s->layout == BFP8_LAYOUT_MN_MAJOR_ALIGNED) {
        for (int64_t kb = 0; kb < s->kblocks; kb++)
            for (int64_t r = s->rows; r < ld; r++) bad += ((const uint32_t *)s->data)[kb * ld + r] != 0;
    } else if (s->layout == BFP8_LAYOUT_PACKED_UE8M0) {
        int64_t words = (s->kblocks + 3) / 4;
        for (int64_t w = 0; w < words; w++)
            for (int64_t r = 0; r < ld; r++) {
                uint32_t v = ((const uint32_t *)s->data)[w * ld + r];
                for (int b = 0; b < 4; b++)
                    if (r >= s->rows || w * 4 + b >= s->kblocks) bad += ((v >> (8 * b)) & 0xFF) != 0;
            }
    }
    return (int)bad;
}

/* ---- data ---------------------------------------------------------------------------------------------------- */

/* Normal values whose magnitude changes from group to group (10^-4 .. 10^4), plus rare outliers. */
static void fill_data(float *x, int64_t rows, int64_t k) {
    float mags[64];
    for (int i = 0; i < 64; i++) mags[i] = powf(10.0f, 8.0f * (test_rand_f32() + 1.0f) / 2.0f - 4.0f);
    uint64_t salt = test_rand_u64();
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < k; c++) {
            float mag = mags[((uint64_t)(r / 7) * 31 + (uint64_t)(c / 128) * 17 + salt) % 64];
            float v = test_randn(mag);
            if (test_rand_u64() % 211 == 0) v *= 50.0f + 100.0f * fabsf(test_rand_f32());
            x[r * k + c] = v == 0.0f ? mag : v;
        }
}

/* x as the dtype's storage; xf receives the values the library reads (rounded through the dtype). */
static void *encode_input(const float *x, int64_t count, bfp8_dtype dt, float *xf) {
    void *buf = malloc((size_t)count * bfp8_dtype_size(dt) + 1);
    for (int64_t i = 0; i < count; i++) {
        bfp8_store_f32(buf, dt, i, x[i]);
        xf[i] = bfp8_load_f32(buf, dt, i);
    }
    return buf;
}

static void inject_nonfinite(float *x, int64_t count, int n) {
    const float specials[] = {NAN, INFINITY, -INFINITY, -NAN};
    for (int i = 0; i < n && count > 0; i++) x[test_rand_u64() % (uint64_t)count] = specials[i % 4];
}

/* ---- quantizer vs reference ---------------------------------------------------------------------------------- */

static void check_quantizer(bool weight, int64_t rows, int64_t k, bfp8_dtype dt, bfp8_scale_format format,
                            bfp8_scale_layout layout, int n_nonfinite) {
    int64_t group_rows = weight ? 128 : 1;
    int64_t srows = (rows + group_rows - 1) / group_rows, kblocks = (k + 127) / 128, count = rows * k;
    float *x = malloc((size_t)count * 4 + 4), *xf = malloc((size_t)count * 4 + 4);
    fill_data(x, rows, k);
    inject_nonfinite(x, count, n_nonfinite);
    void *xin = encode_input(x, count, dt, xf);
    uint8_t *q = malloc((size_t)count + 1), *qref = malloc((size_t)count + 1);
    float *sref = malloc((size_t)(srows * kblocks) * 4 + 4);
    int64_t want_bad = ref_quantize(xf, rows, k, group_rows, format, qref, sref);

    size_t sbytes = bfp8_scales_bytes(layout, srows, kblocks);
    void *sdata = malloc(sbytes + 4);
    int mismatches = 0;
    for (int poison = 0; poison < 2; poison++) { /* two poisons: an element left unwritten cannot match both */
        memset(q, poison ? 0xFF : 0x00, (size_t)count);
        memset(sdata, poison ? 0xFF : 0x7F, sbytes);
        bfp8_scales sc;
        CHECK_OK(bfp8_scales_init(&sc, format, layout, srows, kblocks, sdata));
        int64_t bad = -1;
        bfp8_status st = weight ? bfp8_quantize_weight(xin, dt, rows, k, q, &sc, &bad)
                                : bfp8_quantize_act(xin, dt, rows, k, q, &sc, &bad);
        CHECK(st == BFP8_OK, "quantize -> %s: %s", bfp8_status_name(st), bfp8_last_error());
        CHECK(bad == want_bad, "nonfinite count %lld, want %lld", (long long)bad, (long long)want_bad);
        for (int64_t i = 0; i < count; i++)
            if (q[i] != qref[i] && mismatches++ < 3)
                fprintf(stderr, "q[%lld] = 0x%02x, want 0x%02x (x = %a)\n", (long long)i, q[i], qref[i], xf[i]);
        for (int64_t r = 0; r < srows; r++)
            for (int64_t kb = 0; kb < kblocks; kb++) {
                float got = bfp8_scales_at(&sc, r, kb), raw = raw_scale(&sc, r, kb), want = sref[r * kblocks + kb];
                if ((got != want || raw != want) && mismatches++ < 6)
                    fprintf(stderr, "scale (%lld,%lld) = %a / raw %a, want %a\n", (long long)r, (long long)kb, got,
                            raw, want);
            }
        CHECK(count_nonzero_padding(&sc) == 0, "padding not zero (%s)", bfp8_scale_layout_name(layout));
    }
    CHECK(mismatches == 0, "%s %lldx%lld %s %s %s: %d mismatches", weight ? "weight" : "act", (long long)rows,
          (long long)k, bfp8_dtype_name(dt), bfp8_scale_format_name(format), bfp8_scale_layout_name(layout),
          mismatches);
    free(x), free(xf), free(xin), free(q), free(qref), free(sref), free(sdata);
}

static void test_quantizers(void) {
    static const bfp8_dtype dts[] = {BFP8_DTYPE_F32, BFP8_DTYPE_BF16, BFP8_DTYPE_F16};
    static const int64_t ks[] = {1, 127, 128, 129, 300, 7168};
    int turn = 0;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        for (int f = 0; f < 2; f++)
            for (int l = 0; l < 4; l++) {
                if (l == 3 && f == 0) continue; /* packed holds ue8m0 only */
                bfp8_dtype dt = dts[turn++ % 3];
                check_quantizer(false, ks[ki] > 1000 ? 3 : 5, ks[ki], dt, (bfp8_scale_format)f, all_layouts[l],
                                turn % 2 ? 3 : 0);
                check_quantizer(true, ks[ki] > 1000 ? 130 : 257, ks[ki], dt, (bfp8_scale_format)f, all_layouts[l],
                                turn % 2 ? 0 : 5);
            }
    }
    /* DeepSeek's N = 2112 (last block 64 rows) and ragged K at both edges. */
    check_quantizer(true, 2112, 300, BFP8_DTYPE_BF16, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR_ALIGNED, 7);
    check_quantizer(true, 2112, 129, BFP8_DTYPE_F32, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, 0);
    check_quantizer(false, 2112, 300, BFP8_DTYPE_F16, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, 9);
    check_quantizer(false, 1, 1, BFP8_DTYPE_F32, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 0);
}

/* ---- targeted cases ------------------------------------------------------------------------------------------ */

static void test_edges_and_nonfinite(void) {
    /* A partial group of one element: the missing 127 do not exist, so its scale is |v|/448 and q is +-448. */
    float x[2 * 129];
    for (int i = 0; i < 2 * 129; i++) x[i] = 1000.0f + test_rand_f32();
    x[128] = 3.0f;
    x[129 + 128] = -0.001f;
    uint8_t q[2 * 129];
    float s[4];
    bfp8_scales sc;
    bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 2, 2, s);
    CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, 2, 129, q, &sc, NULL));
    CHECK(s[1] == 3.0f / 448.0f && q[128] == 0x7E, "partial group scale %a q 0x%02x", s[1], q[128]);
    CHECK(s[3] == 0.001f / 448.0f && q[129 + 128] == 0xFE, "partial group scale %a q 0x%02x", s[3], q[129 + 128]);

    /* Non-finite values: encoded as NaN with their sign, counted, and the scale is the one without them. */
    float y[128], y_clean[128];
    for (int i = 0; i < 128; i++) y[i] = y_clean[i] = test_randn(2.0f) + 0.01f;
    y[5] = NAN, y[6] = INFINITY, y[7] = -INFINITY, y[8] = -NAN;
    y_clean[5] = y_clean[6] = y_clean[7] = y_clean[8] = 0.0f;
    float s1, s2;
    uint8_t q1[128], q2[128];
    int64_t bad = -1, bad_clean = -1;
    bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, &s1);
    CHECK_OK(bfp8_quantize_act(y, BFP8_DTYPE_F32, 1, 128, q1, &sc, &bad));
    bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, &s2);
    CHECK_OK(bfp8_quantize_act(y_clean, BFP8_DTYPE_F32, 1, 128, q2, &sc, &bad_clean));
    CHECK(bad == 4 && bad_clean == 0, "counted %lld / %lld", (long long)bad, (long long)bad_clean);
    CHECK(s1 == s2, "non-finite changed the scale: %a vs %a", s1, s2);
    CHECK(q1[5] == 0x7F && q1[6] == 0x7F && q1[7] == 0xFF && q1[8] == 0xFF, "NaN codes %02x %02x %02x %02x", q1[5],
          q1[6], q1[7], q1[8]);
    int diff = 0;
    for (int i = 0; i < 128; i++) diff += (i < 5 || i > 8) && q1[i] != q2[i];
    CHECK(diff == 0, "other values changed");

    /* An all-non-finite group takes the 1e-10 floor. */
    float z[3] = {NAN, INFINITY, -INFINITY};
    uint8_t qz[3];
    bfp8_scales_init(&sc, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, 1, 1, &s1);
    CHECK_OK(bfp8_quantize_act(z, BFP8_DTYPE_F32, 1, 3, qz, &sc, &bad));
    CHECK(bad == 3 && s1 == 0x1p-42f && qz[0] == 0x7F && qz[2] == 0xFF, "all non-finite: scale %a", s1);

    /* Empty problems are valid and write nothing. */
    bfp8_scales empty;
    bfp8_scales_init(&empty, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 0, 3, NULL);
    CHECK_OK(bfp8_quantize_act(NULL, BFP8_DTYPE_F32, 0, 300, NULL, &empty, &bad));
    CHECK(bad == 0, "empty count");
    bfp8_scales_init(&empty, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 5, 0, NULL);
    CHECK_OK(bfp8_quantize_act(NULL, BFP8_DTYPE_F32, 5, 0, NULL, &empty, NULL));
    bfp8_scales_init(&empty, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, 0, 2, NULL);
    CHECK_OK(bfp8_quantize_weight(NULL, BFP8_DTYPE_BF16, 0, 200, NULL, &empty, NULL));
    uint32_t word = 0xFFFFFFFFu; /* K = 0: packed has zero words, nothing is written */
    bfp8_scales_init(&empty, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, 1, 0, &word);
    CHECK_OK(bfp8_quantize_weight(x, BFP8_DTYPE_F32, 100, 0, q, &empty, NULL));
    CHECK(word == 0xFFFFFFFFu, "K = 0 wrote scales");
}

/* ---- dequantize and requantize ------------------------------------------------------------------------------- */

/* Half the E4M3 spacing at |y| (y = x / s), for the round-to-nearest error bound. */
static double e4m3_half_ulp(double y) {
    y = fabs(y);
    if (y < 0x1p-6) return 0x1p-10;
    return ldexp(1.0, ilogb(y) - 4);
}

static void test_dequantize_and_requantize(void) {
    for (int trial = 0; trial < 4; trial++) {
        int64_t n = trial < 2 ? 2112 : 200, k = trial % 2 ? 300 : 7168 / 4;
        int64_t rows = (n + 127) / 128, kblocks = (k + 127) / 128, count = n * k;
        bfp8_scale_format format = trial % 2 ? BFP8_SCALE_UE8M0 : BFP8_SCALE_FP32;
        bfp8_scale_layout layout = all_layouts[trial % 2 ? 3 : trial];
        float *w = malloc((size_t)count * 4), *deq = malloc((size_t)count * 4), *deq2 = malloc((size_t)count * 4);
        uint8_t *q = malloc((size_t)count), *q2 = malloc((size_t)count), *q3 = malloc((size_t)count);
        void *sd = malloc(bfp8_scales_bytes(layout, rows, kblocks));
        float *sd2 = malloc((size_t)(rows * kblocks) * 4);
        uint32_t *sd3 = malloc(bfp8_scales_bytes(BFP8_LAYOUT_PACKED_UE8M0, rows, kblocks));
        fill_data(w, n, k);
        bfp8_scales sc, sc2, sc3;
        bfp8_scales_init(&sc, format, layout, rows, kblocks, sd);
        CHECK_OK(bfp8_quantize_weight(w, BFP8_DTYPE_F32, n, k, q, &sc, NULL));

        for (int64_t i = 0; i < count; i++) deq[i] = NAN;
        CHECK_OK(bfp8_dequantize(q, n, k, &sc, 128, deq));
        int bad = 0;
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < k; c++) {
                float s = raw_scale(&sc, r / 128, c / 128), x = w[r * k + c], d = deq[r * k + c];
                if (d != bfp8_e4m3_to_f32(q[r * k + c]) * s) bad++;
                /* Half an E4M3 step, plus the fp32 roundings of x / s and of q * s (2^-24 relative each). */
                double bound = e4m3_half_ulp(fmin(fabs((double)x / s), 448.0)) * s + fabs((double)x) * 0x1p-23 +
                               fmax(fabs((double)x / s) - 448.0, 0.0) * s;
                if (!(fabs((double)x - d) <= bound) && bad++ < 3)
                    fprintf(stderr, "dequant error %g > %g at x = %g\n", fabs((double)x - d), bound, x);
            }
        CHECK(bad == 0, "dequantize: %d elements off (trial %d)", bad, trial);

        /* Requantize to UE8M0, packed; it must equal quantizing the dequantized weight directly. */
        memset(q2, 0xAB, (size_t)count);
        memset(sd3, 0xFF, bfp8_scales_bytes(BFP8_LAYOUT_PACKED_UE8M0, rows, kblocks));
        bfp8_scales_init(&sc3, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, rows, kblocks, sd3);
        CHECK_OK(bfp8_requantize_weight_ue8m0(q, n, k, &sc, q2, &sc3));
        bfp8_scales_init(&sc2, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, rows, kblocks, sd2);
        CHECK_OK(bfp8_quantize_weight(deq, BFP8_DTYPE_F32, n, k, q3, &sc2, NULL));
        CHECK(memcmp(q2, q3, (size_t)count) == 0, "requantized bytes differ from a direct quantization");
        bad = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t kb = 0; kb < kblocks; kb++) {
                float s = bfp8_scales_at(&sc3, r, kb);
                if ((s != sd2[r * kblocks + kb] || s != ref_pow2_ceil(s)) &&
                    bad++ < 3)
                    fprintf(stderr, "requant scale %a (direct %a), was %a\n", s, sd2[r * kblocks + kb],
                            bfp8_scales_at(&sc, r, kb));
            }
        CHECK(bad == 0, "requantized scales: %d wrong", bad);
        CHECK(count_nonzero_padding(&sc3) == 0, "requant padding");
        CHECK_OK(bfp8_dequantize(q2, n, k, &sc3, 128, deq2));
        bad = 0;
        for (int64_t i = 0; i < count; i++) {
            float s = bfp8_scales_at(&sc3, (i / k) / 128, (i % k) / 128);
            double bound = e4m3_half_ulp(fmin(fabs((double)deq[i] / s), 448.0)) * s + fabs((double)deq[i]) * 0x1p-23;
            if (!(fabs((double)deq[i] - deq2[i]) <= bound)) bad++;
        }
        CHECK(bad == 0, "requantized values: %d off", bad);
        free(w), free(deq), free(deq2), free(q), free(q2), free(q3), free(sd), free(sd2), free(sd3);
    }

    /* Activations: block_rows = 1, NaN codes stay NaN. */
    uint8_t q[3 * 130];
    float out[3 * 130], sc_data[6];
    for (int i = 0; i < 3 * 130; i++) q[i] = (uint8_t)(test_rand_u64() & 0xFF);
    for (int i = 0; i < 6; i++) sc_data[i] = 0.5f + (float)i;
    bfp8_scales sc;
    bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR, 3, 2, sc_data);
    CHECK_OK(bfp8_dequantize(q, 3, 130, &sc, 1, out));
    int bad = 0;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 130; c++) {
            float want = bfp8_e4m3_to_f32(q[r * 130 + c]) * sc_data[(c / 128) * 3 + r];
            float got = out[r * 130 + c];
            if (isnan(want) ? !isnan(got) : got != want) bad++;
        }
    CHECK(bad == 0, "act dequantize: %d wrong", bad);
}

/* ---- scale layouts ------------------------------------------------------------------------------------------- */

static void test_scale_layouts(void) {
    static const int64_t shapes[][2] = {{1, 1}, {3, 5}, {4, 4}, {5, 9}, {130, 3}, {7, 0}, {0, 4}, {17, 56}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], kblocks = shapes[si][1], ld = (rows + 3) / 4 * 4;
        CHECK(bfp8_scales_bytes(BFP8_LAYOUT_ROW_MAJOR, rows, kblocks) == (size_t)(rows * kblocks * 4) &&
                  bfp8_scales_bytes(BFP8_LAYOUT_MN_MAJOR, rows, kblocks) == (size_t)(rows * kblocks * 4) &&
                  bfp8_scales_bytes(BFP8_LAYOUT_MN_MAJOR_ALIGNED, rows, kblocks) == (size_t)(ld * kblocks * 4) &&
                  bfp8_scales_bytes(BFP8_LAYOUT_PACKED_UE8M0, rows, kblocks) == (size_t)(ld * ((kblocks + 3) / 4) * 4),
              "bytes for [%lld, %lld]", (long long)rows, (long long)kblocks);
        for (int f = 0; f < 2; f++) {
            bfp8_scale_format format = (bfp8_scale_format)f;
            float *orig = malloc((size_t)(rows * kblocks) * 4 + 4);
            for (int64_t i = 0; i < rows * kblocks; i++)
                orig[i] = format == BFP8_SCALE_UE8M0 ? ldexpf(1.0f, (int)(test_rand_u64() % 254) - 126)
                                                     : fabsf(test_randn(1.0f)) + 1e-3f;
            bfp8_scales src;
            bfp8_scales_init(&src, format, BFP8_LAYOUT_ROW_MAJOR, rows, kblocks, orig);
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    if ((a == 3 || b == 3) && format != BFP8_SCALE_UE8M0) continue;
                    size_t ab = bfp8_scales_bytes(all_layouts[a], rows, kblocks);
                    size_t bb = bfp8_scales_bytes(all_layouts[b], rows, kblocks);
                    void *da = malloc(ab + 4), *db = malloc(bb + 4);
                    float *back = malloc((size_t)(rows * kblocks) * 4 + 4);
                    memset(da, 0xFF, ab), memset(db, 0xEE, bb), memset(back, 0xFF, (size_t)(rows * kblocks) * 4);
                    bfp8_scales sa, sb, sback;
                    CHECK_OK(bfp8_scales_init(&sa, format, all_layouts[a], rows, kblocks, da));
                    CHECK_OK(bfp8_scales_init(&sb, format, all_layouts[b], rows, kblocks, db));
                    CHECK_OK(bfp8_scales_init(&sback, format, BFP8_LAYOUT_ROW_MAJOR, rows, kblocks, back));
                    CHECK_OK(bfp8_scales_convert(&src, &sa));
                    CHECK_OK(bfp8_scales_convert(&sa, &sb));
                    CHECK_OK(bfp8_scales_convert(&sb, &sback));
                    int bad = 0;
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t kb = 0; kb < kblocks; kb++) {
                            float want = orig[r * kblocks + kb];
                            bad += raw_scale(&sa, r, kb) != want || raw_scale(&sb, r, kb) != want ||
                                   bfp8_scales_at(&sb, r, kb) != want || back[r * kblocks + kb] != want;
                        }
                    bad += count_nonzero_padding(&sa) + count_nonzero_padding(&sb);
                    CHECK(bad == 0, "convert %s -> %s [%lld, %lld] %s: %d wrong", bfp8_scale_layout_name(all_layouts[a]),
                          bfp8_scale_layout_name(all_layouts[b]), (long long)rows, (long long)kblocks,
                          bfp8_scale_format_name(format), bad);
                    free(da), free(db), free(back);
                }
            free(orig);
        }
    }

    /* Format rules. */
    float f32s[6] = {1.0f, 0.5f, 3.0f, 2.0f, 0x1p-127f, 4.0f}, out[8];
    uint32_t packed[4] = {0x11111111u, 0x22222222u, 0x33333333u, 0x44444444u};
    bfp8_scales src, dst;
    bfp8_scales_init(&src, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 2, 3, f32s);
    bfp8_scales_init(&dst, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, 2, 3, out);
    CHECK_STATUS(bfp8_scales_convert(&src, &dst), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(bfp8_last_error(), "bfp8_requantize_weight_ue8m0") != NULL, "message points at requant: %s",
          bfp8_last_error());
    src.format = BFP8_SCALE_UE8M0; /* claims ue8m0 but holds 3.0 and 2^-127: packing must refuse, dst untouched */
    bfp8_scales_init(&dst, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, 2, 3, packed);
    CHECK_STATUS(bfp8_scales_convert(&src, &dst), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(packed[0] == 0x11111111u && packed[3] == 0x44444444u, "refused conversion wrote dst");
    f32s[2] = 8.0f, f32s[4] = 0x1p-126f;
    CHECK_OK(bfp8_scales_convert(&src, &dst));
    CHECK(packed[0] == 0x00827E7Fu && packed[1] == 0x00810180u && packed[2] == 0 && packed[3] == 0, "packed words %08x %08x %08x %08x",
          packed[0], packed[1], packed[2], packed[3]);
    bfp8_scales_init(&src, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR, 2, 3, out); /* ue8m0 -> fp32 is exact: allowed */
    CHECK_OK(bfp8_scales_convert(&dst, &src));
    CHECK(out[0] == 1.0f && out[2] == 0.5f && out[3] == 0x1p-126f && out[4] == 8.0f, "unpacked to fp32");
    CHECK_STATUS(bfp8_scales_init(&src, BFP8_SCALE_FP32, BFP8_LAYOUT_PACKED_UE8M0, 2, 3, packed),
                 BFP8_ERR_INVALID_ARGUMENT);
    bfp8_scales_init(&src, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, 2, 4, f32s);
    CHECK_STATUS(bfp8_scales_convert(&src, &dst), BFP8_ERR_INVALID_ARGUMENT); /* shapes differ */
    bfp8_scales_init(&src, BFP8_SCALE_UE8M0, BFP8_LAYOUT_MN_MAJOR, 2, 3, f32s);
    bfp8_scales_init(&dst, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, 2, 3, f32s + 1);
    CHECK_STATUS(bfp8_scales_convert(&src, &dst), BFP8_ERR_INVALID_ARGUMENT); /* overlapping buffers */
}

/* ---- argument validation ------------------------------------------------------------------------------------- */

static void test_bad_arguments(void) {
    float x[4 * 200];
    for (int i = 0; i < 4 * 200; i++) x[i] = test_randn(1.0f);
    uint8_t q[4 * 200], q2[4 * 200];
    float sd[8], sd2[8];
    bfp8_scales sc, sc2;
    bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 4, 2, sd);
    const int64_t huge = INT64_MAX / 2;
    CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, 200, q, &sc, NULL));
    CHECK_STATUS(bfp8_quantize_act(NULL, BFP8_DTYPE_F32, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, 200, NULL, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, 200, q, NULL, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, -1, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, -200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, huge, huge, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    bfp8_scales none;
    bfp8_scales_init(&none, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 0, 0, NULL);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, INT64_MAX, 0, q, &none, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_weight(x, BFP8_DTYPE_F32, 0, INT64_MAX, q, &none, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dequantize(q, INT64_MAX - 1, 0, &none, 128, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_requantize_weight_ue8m0(q, 0, INT64_MAX, &none, q2, &none), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_E4M3, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_I32, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, (bfp8_dtype)99, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, 300, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(bfp8_last_error(), "[4, 2]") && strstr(bfp8_last_error(), "[4, 3]"),
          "message names given and expected shapes: %s", bfp8_last_error());
    CHECK_STATUS(bfp8_quantize_weight(x, BFP8_DTYPE_F32, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(bfp8_last_error(), "[1, 2]") != NULL, "weight expects [1, 2]: %s", bfp8_last_error());
    sc.data = NULL;
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    sc.data = sd;
    sc.layout = (bfp8_scale_layout)9;
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    sc.layout = BFP8_LAYOUT_PACKED_UE8M0; /* with format fp32 */
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    sc.layout = BFP8_LAYOUT_ROW_MAJOR;
    sc.format = (bfp8_scale_format)5;
    CHECK_STATUS(bfp8_quantize_act(x, BFP8_DTYPE_F32, 4, 200, q, &sc, NULL), BFP8_ERR_INVALID_ARGUMENT);
    sc.format = BFP8_SCALE_FP32;

    float out[4 * 200];
    CHECK_STATUS(bfp8_dequantize(q, 4, 200, &sc, 2, out), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dequantize(q, 4, 200, &sc, 128, out), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dequantize(NULL, 4, 200, &sc, 1, out), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dequantize(q, 4, 200, &sc, 1, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dequantize(q, -4, 200, &sc, 1, out), BFP8_ERR_INVALID_ARGUMENT);

    bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 2, sd);
    bfp8_scales_init(&sc2, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, 1, 2, sd2);
    CHECK_OK(bfp8_quantize_weight(x, BFP8_DTYPE_F32, 4, 200, q, &sc, NULL));
    CHECK_OK(bfp8_requantize_weight_ue8m0(q, 4, 200, &sc, q2, &sc2));
    CHECK_STATUS(bfp8_requantize_weight_ue8m0(q, 4, 200, &sc, q, &sc2), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_requantize_weight_ue8m0(q, 4, 200, &sc, q2, &sc), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_requantize_weight_ue8m0(NULL, 4, 200, &sc, q2, &sc2), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_requantize_weight_ue8m0(q, 4, 300, &sc, q2, &sc2), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_requantize_weight_ue8m0(q, 4, 200, &sc, q2, NULL), BFP8_ERR_INVALID_ARGUMENT);

    CHECK_STATUS(bfp8_scales_init(NULL, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, sd), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, -1, 1, sd), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, INT64_MAX, INT64_MAX, sd),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR_ALIGNED, INT64_MAX, 1, sd),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_scales_init(&sc, BFP8_SCALE_FORMAT_COUNT, BFP8_LAYOUT_ROW_MAJOR, 1, 1, sd),
                 BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_COUNT, 1, 1, sd), BFP8_ERR_INVALID_ARGUMENT);
    bfp8_fail(BFP8_OK, "%s", "");
    CHECK(bfp8_scales_bytes(BFP8_LAYOUT_ROW_MAJOR, -1, 3) == 0 && bfp8_last_error()[0], "bytes of a negative shape");
    bfp8_fail(BFP8_OK, "%s", "");
    CHECK(bfp8_scales_bytes(BFP8_LAYOUT_PACKED_UE8M0, INT64_MAX - 1, 8) == 0 && bfp8_last_error()[0], "overflow");
    CHECK(bfp8_scales_bytes(BFP8_LAYOUT_COUNT, 1, 1) == 0, "unknown layout");
    CHECK_STATUS(bfp8_scales_convert(NULL, &sc), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_check_scales("test", NULL, 1, 1), BFP8_ERR_INVALID_ARGUMENT);
}

int main(void) {
    test_seed();
    test_quantizers();
    test_edges_and_nonfinite();
    test_dequantize_and_requantize();
    test_scale_layouts();
    test_bad_arguments();
    return TEST_SUMMARY("test_quant");
}
