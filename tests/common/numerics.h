/* Numerics shared by the unit tests and the CLI (`blockfp8 check`, `demo`, `bench`): the tolerance table, element
 * access and the error metrics of docs/numerics.md. Compiled into both (tests/common/numerics.c); public API only. */
#ifndef BFP8_TEST_NUMERICS_H
#define BFP8_TEST_NUMERICS_H

#include "blockfp8.h"

#include <stdint.h>

/* The largest relative Frobenius error ||y - ref|| / ||ref|| a backend's output may have against the reference on
 * the same quantized inputs (docs/numerics.md): bf16 8e-3, fp16 1e-3, fp32 2.5e-4 from a GPU (tensor cores keep
 * about 14 bits inside a block) and 1e-5 from a CPU backend. */
double test_tolerance(bfp8_dtype out_dtype, bfp8_device device);

/* Element i of a float-typed (f32, bf16, f16) array as fp32, and the store that rounds once (RNE) into one. */
float test_load_f32(const void *p, bfp8_dtype dtype, int64_t i);
void test_store_f32(void *p, bfp8_dtype dtype, int64_t i, float v);
/* n elements of a float-typed array as a new fp32 array (malloc'ed; NULL when out of memory or not a float dtype). */
float *test_to_f32(const void *p, bfp8_dtype dtype, int64_t n);

/* The relative Frobenius error, accumulated element by element in double (for sampled or double references):
 * 0 when both are zero, inf when only the reference is. */
typedef struct test_frobenius {
    double err2, ref2;
    int64_t count;
} test_frobenius;
void test_frobenius_add(test_frobenius *f, double got, double ref);
double test_frobenius_value(const test_frobenius *f);
/* The same with reference values below the output dtype's smallest normal counted as that size: there one rounding
 * is a larger share of the value than the tolerance (a lone fp16 output of 2.6e-5 rounds with a relative error of
 * up to 1.1e-3). */
double test_frobenius_value_normal(const test_frobenius *f, bfp8_dtype out_dtype);
/* The same over two fp32 arrays of n elements. */
double test_rel_frobenius(const float *y, const float *ref, int64_t n);

/* DeepGEMM's calc_diff, 1 - 2*sum(x*y) / sum(x*x + y*y), of outputs x against the unquantized product y (under
 * 1e-3, docs/numerics.md), accumulated in double; 0 when both are zero. */
typedef struct test_calc_diff {
    double xy, xx_yy;
} test_calc_diff;
void test_calc_diff_add(test_calc_diff *c, double got, double exact);
double test_calc_diff_value(const test_calc_diff *c);
/* The same over two fp32 arrays of n elements. */
double test_calc_diff_of(const float *x, const float *y, int64_t n);

/* NaN elements among n: what is left of the poison (all-ones bytes, NaN in every float dtype) where nothing wrote. */
int64_t test_count_nan(const float *p, int64_t n);

#endif
