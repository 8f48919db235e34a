/* The tolerance table and error metrics of tests/common/numerics.h. */
#include "numerics.h"

#include <math.h>
#include <stdlib.h>

double test_tolerance(bfp8_dtype out_dtype, bfp8_device device) {
    switch (out_dtype) {
    case BFP8_DTYPE_BF16: return 8e-3;
    case BFP8_DTYPE_F16: return 1e-3;
    default: return device == BFP8_DEVICE_CPU ? 1e-5 : 2.5e-4;
    }
}

float test_load_f32(const void *p, bfp8_dtype dtype, int64_t i) {
    switch (dtype) {
    case BFP8_DTYPE_BF16: return bfp8_bf16_to_f32(((const uint16_t *)p)[i]);
    case BFP8_DTYPE_F16: return bfp8_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

void test_store_f32(void *p, bfp8_dtype dtype, int64_t i, float v) {
    switch (dtype) {
    case BFP8_DTYPE_BF16: ((uint16_t *)p)[i] = bfp8_bf16_from_f32(v); break;
    case BFP8_DTYPE_F16: ((uint16_t *)p)[i] = bfp8_f16_from_f32(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

float *test_to_f32(const void *p, bfp8_dtype dtype, int64_t n) {
    if (n < 0 || (dtype != BFP8_DTYPE_F32 && dtype != BFP8_DTYPE_BF16 && dtype != BFP8_DTYPE_F16)) return NULL;
    float *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!out) return NULL;
    for (int64_t i = 0; i < n; i++) out[i] = test_load_f32(p, dtype, i);
    return out;
}

void test_frobenius_add(test_frobenius *f, double got, double ref) {
    f->err2 += (got - ref) * (got - ref);
    f->ref2 += ref * ref;
    f->count++;
}

double test_frobenius_value(const test_frobenius *f) {
    if (f->ref2 == 0) return f->err2 == 0 ? 0.0 : INFINITY;
    return sqrt(f->err2 / f->ref2);
}

double test_frobenius_value_normal(const test_frobenius *f, bfp8_dtype out_dtype) {
    const double tiny = out_dtype == BFP8_DTYPE_F16 ? 0x1p-14 : 0x1p-126; /* smallest normal: fp16; bf16 and fp32 */
    const double floor2 = (double)f->count * tiny * tiny;
    if (f->ref2 <= floor2) return floor2 > 0 ? sqrt(f->err2 / floor2) : test_frobenius_value(f);
    return sqrt(f->err2 / f->ref2);
}

double test_rel_frobenius(const float *y, const float *ref, int64_t n) {
    test_frobenius f = {0};
    for (int64_t i = 0; i < n; i++) test_frobenius_add(&f, y[i], ref[i]);
    return test_frobenius_value(&f);
}

void test_calc_diff_add(test_calc_diff *c, double got, double exact) {
    c->xy += got * exact;
    c->xx_yy += got * got + exact * exact;
}

double test_calc_diff_value(const test_calc_diff *c) { return c->xx_yy > 0 ? 1.0 - 2.0 * c->xy / c->xx_yy : 0.0; }

double test_calc_diff_of(const float *x, const float *y, int64_t n) {
    test_calc_diff c = {0};
    for (int64_t i = 0; i < n; i++) test_calc_diff_add(&c, x[i], y[i]);
    return test_calc_diff_value(&c);
}

int64_t test_count_nan(const float *p, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += isnan(p[i]) ? 1 : 0;
    return c;
}
