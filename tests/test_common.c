/* tests/common, which the tests and the CLI share: the tolerance table as docs/numerics.md states it, the error
 * metrics on values with known answers, element access in every float dtype, the generator's range and replay,
 * and host buffers. */
#include "check.h"

static void test_tolerances(void) {
    const struct {
        bfp8_dtype dt;
        bfp8_device dev;
        double want;
    } table[] = {
        {BFP8_DTYPE_BF16, BFP8_DEVICE_CPU, 8e-3}, {BFP8_DTYPE_BF16, BFP8_DEVICE_CUDA, 8e-3},
        {BFP8_DTYPE_F16, BFP8_DEVICE_CPU, 1e-3},  {BFP8_DTYPE_F16, BFP8_DEVICE_CUDA, 1e-3},
        {BFP8_DTYPE_F32, BFP8_DEVICE_CPU, 1e-5},  {BFP8_DTYPE_F32, BFP8_DEVICE_CUDA, 2.5e-4},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        CHECK(test_tolerance(table[i].dt, table[i].dev) == table[i].want, "%s on %s: %g, docs/numerics.md says %g",
              bfp8_dtype_name(table[i].dt), bfp8_device_name(table[i].dev),
              test_tolerance(table[i].dt, table[i].dev), table[i].want);
}

static void test_metrics(void) {
    const float ref[4] = {3, 0, -4, 0}, y[4] = {3, 1, -4, 0}, zero[4] = {0};
    CHECK(test_rel_frobenius(ref, ref, 4) == 0, "identical");
    CHECK(fabs(test_rel_frobenius(y, ref, 4) - 0.2) < 1e-15, "|(0,1,0,0)| / |(3,0,-4,0)| = 0.2: %.17g",
          test_rel_frobenius(y, ref, 4));
    CHECK(test_rel_frobenius(zero, zero, 4) == 0, "both zero");
    CHECK(isinf(test_rel_frobenius(y, zero, 4)), "only the reference zero");
    CHECK(test_rel_frobenius(y, ref, 0) == 0, "empty");
    /* Below the smallest normal, the reference counts as that size. */
    test_frobenius f = {0};
    test_frobenius_add(&f, 0x1p-20, 0x1p-21);
    CHECK(f.count == 1 && fabs(test_frobenius_value(&f) - 1.0) < 1e-15, "plain %.17g", test_frobenius_value(&f));
    CHECK(fabs(test_frobenius_value_normal(&f, BFP8_DTYPE_F16) - 0x1p-21 / 0x1p-14) < 1e-15, "fp16 floor %.17g",
          test_frobenius_value_normal(&f, BFP8_DTYPE_F16));
    CHECK(test_frobenius_value_normal(&f, BFP8_DTYPE_BF16) == test_frobenius_value(&f), "bf16 floor is far below");
    /* calc_diff: 0 for equal vectors, 2 for opposite ones, 1 for orthogonal ones. */
    const float a[2] = {1, 0}, b[2] = {0, 1}, na[2] = {-1, 0};
    CHECK(test_calc_diff_of(a, a, 2) == 0 && test_calc_diff_of(a, na, 2) == 2 && test_calc_diff_of(a, b, 2) == 1,
          "calc_diff %g %g %g", test_calc_diff_of(a, a, 2), test_calc_diff_of(a, na, 2), test_calc_diff_of(a, b, 2));
    CHECK(test_calc_diff_of(zero, zero, 4) == 0, "calc_diff of zeros");
    const float nan4[4] = {NAN, 1, NAN, -0.0f};
    CHECK(test_count_nan(nan4, 4) == 2 && test_count_nan(nan4, 0) == 0, "count_nan");
}

static void test_elements(void) {
    const float v[5] = {1.5f, -0.0f, 65504.0f, 1e-8f, 3.14159f};
    const bfp8_dtype dts[3] = {BFP8_DTYPE_F32, BFP8_DTYPE_BF16, BFP8_DTYPE_F16};
    for (int d = 0; d < 3; d++) {
        uint32_t buf[5];
        for (int i = 0; i < 5; i++) test_store_f32(buf, dts[d], i, v[i]);
        float *back = test_to_f32(buf, dts[d], 5);
        CHECK(back != NULL, "to_f32");
        for (int i = 0; back && i < 5; i++) {
            /* The library's own conversions are the independent check here (tests/test_formats.c holds them). */
            float want = dts[d] == BFP8_DTYPE_BF16  ? bfp8_bf16_to_f32(bfp8_bf16_from_f32(v[i]))
                         : dts[d] == BFP8_DTYPE_F16 ? bfp8_f16_to_f32(bfp8_f16_from_f32(v[i]))
                                                    : v[i];
            CHECK(memcmp(&back[i], &want, 4) == 0 && test_load_f32(buf, dts[d], i) == want, "%s[%d]: %g, want %g",
                  bfp8_dtype_name(dts[d]), i, back[i], want);
        }
        free(back);
    }
    CHECK(test_to_f32(v, BFP8_DTYPE_E4M3, 5) == NULL && test_to_f32(v, BFP8_DTYPE_F32, -1) == NULL, "bad to_f32");
}

static void check_rng(void) {
    test_rng a, b;
    test_rng_init(&a, 12345);
    test_rng_init(&b, 12345);
    bool same = true, in_range = true;
    double sum = 0, sum2 = 0;
    enum { N = 100000 };
    for (int i = 0; i < 1000; i++) same = same && test_rng_u64(&a) == test_rng_u64(&b);
    for (int i = 0; i < N; i++) {
        const float u = test_rng_uniform(&a);
        in_range = in_range && u >= -1.0f && u < 1.0f;
        const double g = test_rng_normal(&a, 2.0f);
        sum += g, sum2 += g * g;
    }
    CHECK(same, "one seed, two sequences");
    CHECK(in_range, "uniform outside [-1, 1)");
    const double mean = sum / N, sd = sqrt(sum2 / N - mean * mean);
    CHECK(fabs(mean) < 0.05 && fabs(sd - 2.0) < 0.05, "normal(2): mean %g, sd %g", mean, sd);
    test_rng_init(&a, 0); /* 0 would stick: replaced */
    CHECK(test_rng_u64(&a) != 0 && test_rng_u64(&a) != 0, "seed 0");
    CHECK(test_seed_fresh() != 0, "fresh seed");
    uint16_t h[8];
    test_rng_init(&a, 7);
    test_rng_fill_normal(&a, h, BFP8_DTYPE_BF16, 8, 1.0f);
    test_rng_init(&b, 7);
    for (int i = 0; i < 8; i++)
        CHECK(h[i] == bfp8_bf16_from_f32(test_rng_normal(&b, 1.0f)), "fill_normal bf16[%d]", i);
}

static void check_buffers(void) {
    test_buffers b = {.device = BFP8_DEVICE_CPU};
    const char text[] = "blockfp8";
    void *p = NULL, *q = NULL;
    CHECK_OK(test_buffers_put(&b, text, sizeof text, &p));
    CHECK(p && memcmp(p, text, sizeof text) == 0, "host copy");
    CHECK_OK(test_buffers_put(&b, NULL, 0, &q));
    CHECK(q != NULL && q != p && b.count == 2, "an empty buffer still has an address");
    test_buffers_free(&b);
    CHECK(b.count == 0, "freed");
    for (int i = 0; i < TEST_BUFFERS_MAX; i++) CHECK_OK(test_buffers_put(&b, NULL, 4, &p));
    CHECK(test_buffers_put(&b, NULL, 4, &p) == BFP8_ERR_INVALID_ARGUMENT && p == NULL, "one buffer too many");
    test_buffers_free(&b);
    char why[BFP8_REASON_MAX];
    if (!bfp8_cuda_available(why, sizeof why)) {
        void *d = (void *)1;
        CHECK(test_dev_upload(text, sizeof text, &d) == BFP8_ERR_UNSUPPORTED && d == NULL, "device without CUDA");
        return;
    }
    void *d = NULL;
    char back[sizeof text] = "";
    CHECK_OK(test_dev_upload(text, sizeof text, &d));
    CHECK_OK(bfp8_cuda_download(back, d, sizeof text));
    CHECK(memcmp(back, text, sizeof text) == 0, "device round trip");
    bfp8_cuda_free(d);
    CHECK_OK(test_dev_filled(sizeof back, 0xA5, &d));
    CHECK_OK(bfp8_cuda_download(back, d, sizeof back));
    CHECK((unsigned char)back[0] == 0xA5 && (unsigned char)back[sizeof back - 1] == 0xA5, "filled");
    bfp8_cuda_free(d);
}

int main(void) {
    test_seed();
    test_tolerances();
    test_metrics();
    test_elements();
    check_rng();
    check_buffers();
    return TEST_SUMMARY("common");
}
