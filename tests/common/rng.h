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

#endif
