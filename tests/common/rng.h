/* The random data of the unit tests and the CLI: a seeded xorshift64* generator (tests/common/rng.c). */
#ifndef BFP8_TEST_RNG_H
#define BFP8_TEST_RNG_H

#include "blockfp8.h"

#include <stdint.h>

typedef struct test_rng {
    uint64_t state;
} test_rng;

/* A seed from /dev/urandom (the clock when that fails); never 0. */
uint64_t test_seed_fresh(void);
void test_rng_init(test_rng *r, uint64_t seed); /* seed 0 is replaced by a fixed non-zero one */
uint64_t test_rng_u64(test_rng *r);
/* Uniform in [-1, 1) in steps of 2^-23. */
float test_rng_uniform(test_rng *r);
/* Roughly normal (the sum of four uniforms) with standard deviation about `stddev`. */
float test_rng_normal(test_rng *r, float stddev);
/* n elements of a float-typed (f32, bf16, f16) array filled with rounded test_rng_normal values. */
void test_rng_fill_normal(test_rng *r, void *p, bfp8_dtype dtype, int64_t n, float stddev);
/* n random finite E4M3 codes (a NaN code draws its neighbour instead), eight from each draw of the generator: what
 * benchmarks fill weights and activations with when the values do not matter, only that they are not NaN. */
void test_rng_fill_fp8(test_rng *r, uint8_t *q, int64_t n);
/* n scales 2^(base - u), u uniform in {0, 1, 2, 3}: powers of two, so valid in the fp32 and the UE8M0 format. */
void test_rng_fill_pow2(test_rng *r, float *s, int64_t n, int base);

#endif
