/* AVX2 twins of the quantizer's per-span kernels (built with -mavx2 -mfma -mf16c; quant.c calls them only after
 * the run-time check of the `cpu` backend). Bit-identical to the scalar kernels: the amax is an integer max over
 * the magnitude bits (for non-negative floats the integer order is the float order), the division is the same
 * IEEE fp32 division, and the E4M3 rounding is done on the fp32 bits with integer ops exactly as
 * bfp8_e4m3_from_f32 does it, so the FPU rounding mode does not matter beyond that one division. */
#include "quant_avx2.h"

#include <immintrin.h>
#include <string.h>

#define ABS_MASK 0x7FFFFFFF
#define INF_BITS 0x7F800000
#define E4M3_MAX_BITS 0x43E00000 /* 448.0f */
#define E4M3_MIN_NORMAL_BITS 0x3C800000 /* 2^-6: fp32 exponent 121 */

/* Lanes [n, 8) of a partial vector read as +0 (neutral for the amax; their codes are never stored). */
static __m256i load_partial(const float *x, int64_t n) {
    float tmp[8] = {0};
    memcpy(tmp, x, (size_t)n * sizeof(float));
    return _mm256_loadu_si256((const __m256i *)tmp);
}

float bfp8_quant_span_amax_avx2(const float *x, int64_t n, int64_t *nonfinite) {
    const __m256i abs_mask = _mm256_set1_epi32(ABS_MASK), inf = _mm256_set1_epi32(INF_BITS);
    __m256i amax = _mm256_setzero_si256(), bad = _mm256_setzero_si256();
    for (int64_t i = 0; i < n; i += 8) {
        __m256i v = n - i >= 8 ? _mm256_loadu_si256((const __m256i *)(x + i)) : load_partial(x + i, n - i);
        __m256i a = _mm256_and_si256(v, abs_mask);
        __m256i finite = _mm256_cmpgt_epi32(inf, a); /* a < inf: neither inf nor NaN */
        amax = _mm256_max_epi32(amax, _mm256_and_si256(a, finite));
        bad = _mm256_sub_epi32(bad, _mm256_andnot_si256(finite, _mm256_set1_epi32(-1)));
    }
    uint32_t lanes[8], counts[8];
    _mm256_storeu_si256((__m256i *)lanes, amax);
    _mm256_storeu_si256((__m256i *)counts, bad);
    uint32_t best = 0;
    int64_t total = 0;
    for (int l = 0; l < 8; l++) {
        if (lanes[l] > best) best = lanes[l];
        total += counts[l];
    }
    *nonfinite += total;
    float out;
    memcpy(&out, &best, sizeof out);
    return out;
}

/* bfp8_e4m3_from_f32 on 8 lanes; the code in the low byte of each 32-bit lane. */
static __m256i e4m3_from_f32x8(__m256 y) {
    __m256i u = _mm256_castps_si256(y);
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(ABS_MASK));
    __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(INF_BITS));
    __m256i saturates = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(E4M3_MAX_BITS - 1));
    __m256i normal = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(E4M3_MIN_NORMAL_BITS - 1));
    /* Normal: rebias the exponent 127 -> 7 and keep 3 mantissa bits, RNE at bit 20 (the +1 for an odd kept part
     * makes the tie round up only when it goes to even). Below 448 the result stays <= 0x7E. */
    __m256i rebased = _mm256_sub_epi32(a, _mm256_set1_epi32(120 << 23));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(rebased, 20), _mm256_set1_epi32(1));
    __m256i code_normal = _mm256_srli_epi32(
        _mm256_add_epi32(rebased, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), odd)), 20);
    /* Subnormal: units of 2^-9 = significand >> (141 - max(exp, 1)), RNE; shifts beyond 25 give 0, so the shift
     * is clamped to 26 (the significand is below 2^24, under half of 2^26). */
    __m256i exp = _mm256_srli_epi32(a, 23);
    __m256i mant = _mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF));
    __m256i has_exp = _mm256_cmpgt_epi32(exp, _mm256_setzero_si256());
    __m256i significand = _mm256_or_si256(mant, _mm256_and_si256(has_exp, _mm256_set1_epi32(0x800000)));
    __m256i shift = _mm256_sub_epi32(_mm256_set1_epi32(141), _mm256_max_epi32(exp, _mm256_set1_epi32(1)));
    shift = _mm256_min_epi32(shift, _mm256_set1_epi32(26));
    __m256i one = _mm256_set1_epi32(1);
    __m256i half_minus_one = _mm256_sub_epi32(_mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one)), one);
    __m256i sub_odd = _mm256_and_si256(_mm256_srlv_epi32(significand, shift), one);
    __m256i code_sub =
        _mm256_srlv_epi32(_mm256_add_epi32(significand, _mm256_add_epi32(half_minus_one, sub_odd)), shift);
    __m256i code = _mm256_blendv_epi8(code_sub, code_normal, normal);
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7E), saturates);
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), is_nan);
    return _mm256_or_si256(code, sign);
}

/* The low bytes of the 8 lanes as 8 consecutive bytes. */
static uint64_t pack_codes(__m256i codes) {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                                          -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i b = _mm256_shuffle_epi8(codes, pick);
    __m128i both = _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    return (uint64_t)_mm_cvtsi128_si64(both);
}

void bfp8_quant_span_encode_avx2(const float *x, int64_t n, float scale, uint8_t *q) {
    const __m256 s = _mm256_set1_ps(scale);
    const __m256i abs_mask = _mm256_set1_epi32(ABS_MASK), inf = _mm256_set1_epi32(INF_BITS);
    const __m256i one = _mm256_set1_epi32(1);
    for (int64_t i = 0; i < n; i += 8) {
        int64_t count = n - i < 8 ? n - i : 8;
        __m256i v = count == 8 ? _mm256_loadu_si256((const __m256i *)(x + i)) : load_partial(x + i, count);
        __m256i codes = e4m3_from_f32x8(_mm256_div_ps(_mm256_castsi256_ps(v), s));
        /* A non-finite x is NaN with the sign of x, whatever the quotient is. */
        __m256i nonfinite = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs_mask), _mm256_sub_epi32(inf, one));
        __m256i nan_code = _mm256_or_si256(_mm256_set1_epi32(0x7F),
                                           _mm256_and_si256(_mm256_srli_epi32(v, 24), _mm256_set1_epi32(0x80)));
        codes = _mm256_blendv_epi8(codes, nan_code, nonfinite);
        uint64_t bytes = pack_codes(codes);
        memcpy(q + i, &bytes, (size_t)count);
    }
}

void bfp8_quant_load_span_avx2(const void *p, bfp8_dtype dtype, int64_t base, int64_t n, float *out) {
    const uint16_t *src = (const uint16_t *)p + base;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        __m256 f = dtype == BFP8_DTYPE_BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                                            : _mm256_cvtph_ps(h); /* exact: every f16 is an fp32 */
        _mm256_storeu_ps(out + i, f);
    }
    for (; i < n; i++) out[i] = bfp8_load_f32(p, dtype, base + i);
}
