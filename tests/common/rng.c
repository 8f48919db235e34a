/* xorshift64* (tests/common/rng.h). */
#include "rng.h"

#include "numerics.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

uint64_t test_seed_fresh(void) {
    uint64_t seed = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&seed, sizeof seed, 1, f) != 1) seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
    if (f) fclose(f);
    return seed ? seed : 1;
}

void test_rng_init(test_rng *r, uint64_t seed) { r->state = seed ? seed : 0x9E3779B97F4A7C15ull; }

uint64_t test_rng_u64(test_rng *r) {
    uint64_t x = r->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

float test_rng_uniform(test_rng *r) {
    return (float)(test_rng_u64(r) >> 40) * 0x1p-23f - 1.0f; /* 24 bits: exact in fp32, never 1 */
}

float test_rng_normal(test_rng *r, float stddev) {
    /* Four uniforms in [-1, 1) have variance 4/3: 0.866 brings the sum to about 1. */
    double s = 0;
    for (int i = 0; i < 4; i++) s += test_rng_uniform(r);
    return (float)(s * 0.8660254 * stddev);
}

void test_rng_fill_normal(test_rng *r, void *p, bfp8_dtype dtype, int64_t n, float stddev) {
    for (int64_t i = 0; i < n; i++) test_store_f32(p, dtype, i, test_rng_normal(r, stddev));
}

void test_rng_fill_fp8(test_rng *r, uint8_t *q, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) {
        uint64_t bits = test_rng_u64(r);
        for (int64_t j = i; j < n && j < i + 8; j++, bits >>= 8) {
            const uint8_t c = (uint8_t)bits;
            q[j] = (c & 0x7F) == 0x7F ? (uint8_t)(c ^ 0x01) : c;
        }
    }
}

void test_rng_fill_pow2(test_rng *r, float *s, int64_t n, int base) {
    for (int64_t i = 0; i < n; i++) s[i] = ldexpf(1.0f, base - (int)(test_rng_u64(r) % 4));
}
