/* Scalar formats (docs/numerics.md): E4M3, UE8M0, bf16, fp16, the single rounding of doubles, names.
 * Expected values come from independent brute-force references built on doubles: the nearest representable value
 * found by searching a table of every code, ties broken towards the even code. */
#include "check.h"
#include "internal.h"

#include <float.h>

static double double_of(uint64_t u) {
    double x;
    memcpy(&x, &u, 8);
    return x;
}

/* ---- references ---------------------------------------------------------------------------------------------- */

/* E4M3 value by the textbook formula, in double. */
static double ref_e4m3_value(int code) {
    int e = (code >> 3) & 15, m = code & 7;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return (code & 0x80) ? -v : v;
}

/* Brute force over every finite code: nearest, ties to the even code; beyond 448 saturates; NaN -> 0x7F|sign. */
static uint8_t ref_e4m3_encode(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return sign | 0x7F;
    double a = fabs((double)x);
    if (a > 448.0) return sign | 0x7E;
    int best = 0;
    for (int c = 1; c <= 0x7E; c++) {
        double d = fabs(ref_e4m3_value(c) - a), db = fabs(ref_e4m3_value(best) - a); /* exact: few bits */
        if (d < db || (d == db && (c & 1) == 0)) best = c;
    }
    return (uint8_t)(sign | best);
}

/* Nearest in a sorted table of the non-negative finite values of a binary format (index == bit pattern), with
 * `overflow` standing for the pattern after the largest finite one (inf, reached when rounding goes past max).
 * Comparisons are against the exact midpoint, so no rounding happens here. */
static uint32_t ref_round_table(const double *table, uint32_t count, double overflow, double v) {
    double a = fabs(v);
    uint32_t lo = 0, hi = count; /* find the largest i with table[i] <= a */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (table[mid] <= a) lo = mid; else hi = mid;
    }
    double below = table[lo], above = lo + 1 < count ? table[lo + 1] : overflow;
    double midpoint = below + (above - below) / 2;
    uint32_t pick = a < midpoint ? lo : a > midpoint ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
    if (a == below) pick = lo;
    return pick;
}

static double bf16_table[0x7F80], f16_table[0x7C00];

static void build_tables(void) {
    for (uint32_t p = 0; p < 0x7F80; p++) bf16_table[p] = (double)bfp8_f32_from_bits(p << 16);
    for (uint32_t p = 0; p < 0x7C00; p++) {
        int e = (int)(p >> 10), m = (int)(p & 0x3FF);
        f16_table[p] = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    }
}

static uint16_t ref_bf16(double v) {
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    if (isinf(v)) return sign | 0x7F80;
    return (uint16_t)(sign | ref_round_table(bf16_table, 0x7F80, 0x1p128, v));
}
static uint16_t ref_f16(double v) {
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    if (isinf(v)) return sign | 0x7C00;
    return (uint16_t)(sign | ref_round_table(f16_table, 0x7C00, 65536.0, v));
}
static bool bf16_is_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F); }
static bool f16_is_nan(uint16_t b) { return (b & 0x7C00) == 0x7C00 && (b & 0x3FF); }

/* UE8M0 ceil by frexp: s = f * 2^e with f in [0.5, 1); an exact power of two has f = 0.5. */
static int ref_ue8m0_ceil(float s) {
    int e;
    double f = frexp((double)s, &e);
    int biased = (f == 0.5) ? e - 1 + 127 : e + 127;
    return biased < 1 ? 1 : biased > 254 ? 254 : biased;
}

/* Random fp32 bits with the exponent in [lo, hi]. */
static float rand_float_exp(int lo, int hi) {
    uint64_t r = test_rand_u64();
    uint32_t exp = (uint32_t)(lo + (int)((r >> 40) % (uint64_t)(hi - lo + 1)));
    return bfp8_f32_from_bits((uint32_t)(r & 0x807FFFFFu) | (exp << 23));
}

/* ---- E4M3 ---------------------------------------------------------------------------------------------------- */

static void test_e4m3_codes(void) {
    int bad_decode = 0, bad_roundtrip = 0;
    for (int c = 0; c < 256; c++) {
        float v = bfp8_e4m3_to_f32((uint8_t)c);
        if ((c & 0x7F) == 0x7F) {
            CHECK(isnan(v), "code 0x%02x decodes to %g, want NaN", c, v);
            CHECK(bfp8_e4m3_from_f32(v) == c, "NaN code 0x%02x re-encodes to 0x%02x", c, bfp8_e4m3_from_f32(v));
            continue;
        }
        if ((double)v != ref_e4m3_value(c) || !!signbit(v) != !!(c & 0x80)) bad_decode++;
        if (bfp8_e4m3_from_f32(v) != c) bad_roundtrip++;
    }
    CHECK(bad_decode == 0, "%d codes decode wrong", bad_decode);
    CHECK(bad_roundtrip == 0, "%d codes do not round-trip", bad_roundtrip);
    CHECK(bfp8_e4m3_to_f32(0x7E) == 448.0f && bfp8_e4m3_to_f32(0x01) == 0x1p-9f, "max/min");
}

static void test_e4m3_midpoints(void) {
    int bad = 0;
    for (int c = 0; c < 0x7E; c++) {
        for (int neg = 0; neg < 2; neg++) {
            uint8_t s = neg ? 0x80 : 0;
            float lo = bfp8_e4m3_to_f32((uint8_t)(s | c)), hi = bfp8_e4m3_to_f32((uint8_t)(s | (c + 1)));
            float mid = (lo + hi) / 2; /* exact: at most 5 significant bits */
            uint8_t even = (uint8_t)(s | ((c & 1) ? c + 1 : c));
            float above = nextafterf(mid, neg ? -INFINITY : INFINITY), below = nextafterf(mid, 0.0f);
            if (bfp8_e4m3_from_f32(mid) != even) bad++, fprintf(stderr, "mid %a -> 0x%02x want 0x%02x\n", mid, bfp8_e4m3_from_f32(mid), even);
            if (bfp8_e4m3_from_f32(above) != (s | (c + 1))) bad++, fprintf(stderr, "above %a\n", above);
            if (bfp8_e4m3_from_f32(below) != (s | c)) bad++, fprintf(stderr, "below %a\n", below);
            if (ref_e4m3_encode(mid) != even || ref_e4m3_encode(above) != (s | (c + 1)) ||
                ref_e4m3_encode(below) != (s | c))
                bad++, fprintf(stderr, "reference disagrees at code 0x%02x\n", c);
        }
    }
    CHECK(bad == 0, "%d midpoint cases wrong", bad);
}

static void test_e4m3_special(void) {
    const float sat[] = {448.0f, 449.0f, 463.99f, 464.0f, 465.0f, 480.0f, 1e30f, FLT_MAX, INFINITY};
    for (size_t i = 0; i < sizeof sat / sizeof sat[0]; i++) {
        CHECK(bfp8_e4m3_from_f32(sat[i]) == 0x7E, "%g -> 0x%02x, want 0x7E", sat[i], bfp8_e4m3_from_f32(sat[i]));
        CHECK(bfp8_e4m3_from_f32(-sat[i]) == 0xFE, "-%g -> 0x%02x, want 0xFE", sat[i], bfp8_e4m3_from_f32(-sat[i]));
    }
    CHECK(bfp8_e4m3_from_f32(nextafterf(448.0f, 0)) == 0x7E, "just below 448");
    CHECK(bfp8_e4m3_from_f32(432.0f) == 0x7E && bfp8_e4m3_from_f32(nextafterf(432.0f, 0)) == 0x7D, "416|448 tie");
    /* Subnormals: units of 2^-9. */
    CHECK(bfp8_e4m3_from_f32(0x1p-9f) == 0x01, "2^-9");
    CHECK(bfp8_e4m3_from_f32(0x1p-10f) == 0x00, "2^-10 ties to 0");
    CHECK(bfp8_e4m3_from_f32(nextafterf(0x1p-10f, 1)) == 0x01, "above 2^-10");
    CHECK(bfp8_e4m3_from_f32(3 * 0x1p-10f) == 0x02, "1.5 units ties to 2");
    CHECK(bfp8_e4m3_from_f32(5 * 0x1p-10f) == 0x02, "2.5 units ties to 2");
    CHECK(bfp8_e4m3_from_f32(15 * 0x1p-10f) == 0x08, "7.5 units ties to 2^-6 (0x08)");
    CHECK(bfp8_e4m3_from_f32(0x1p-6f) == 0x08, "min normal");
    CHECK(bfp8_e4m3_from_f32(bfp8_f32_from_bits(1)) == 0x00 && bfp8_e4m3_from_f32(-bfp8_f32_from_bits(1)) == 0x80,
          "fp32 denormal");
    CHECK(bfp8_e4m3_from_f32(0x1p-30f) == 0x00, "tiny");
    CHECK(bfp8_e4m3_from_f32(0.0f) == 0x00 && bfp8_e4m3_from_f32(-0.0f) == 0x80, "signed zero");
    CHECK(bfp8_e4m3_from_f32(-0x1p-11f) == 0x80, "negative that rounds to zero keeps its sign");
    CHECK(bfp8_e4m3_from_f32(NAN) == 0x7F && bfp8_e4m3_from_f32(-NAN) == 0xFF, "NaN");
    CHECK(bfp8_e4m3_from_f32(bfp8_f32_from_bits(0x7F800001u)) == 0x7F &&
              bfp8_e4m3_from_f32(bfp8_f32_from_bits(0xFFC00000u)) == 0xFF,
          "signalling / negative NaN");
}

static void test_e4m3_random(void) {
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float x = i % 4 == 0 ? bfp8_f32_from_bits((uint32_t)test_rand_u64()) : rand_float_exp(100, 140);
        uint8_t got = bfp8_e4m3_from_f32(x), want = ref_e4m3_encode(x);
        if (got != want && bad++ < 5) fprintf(stderr, "e4m3(%a) = 0x%02x, want 0x%02x\n", x, got, want);
    }
    CHECK(bad == 0, "%d random e4m3 encodings differ from brute force", bad);
}

/* ---- UE8M0 --------------------------------------------------------------------------------------------------- */

static void test_ue8m0(void) {
    for (int e = 1; e <= 254; e++) {
        float p = ldexpf(1.0f, e - 127);
        CHECK(bfp8_ue8m0_to_f32((uint8_t)e) == p, "ue8m0 %d", e);
        CHECK(bfp8_ue8m0_ceil(p) == e, "ceil(2^%d) = %d", e - 127, bfp8_ue8m0_ceil(p));
        float up = nextafterf(p, INFINITY);
        CHECK(bfp8_ue8m0_ceil(up) == (e < 254 ? e + 1 : 254), "ceil(2^%d + ulp) = %d", e - 127, bfp8_ue8m0_ceil(up));
        float down = nextafterf(p, 0);
        if (e > 1) CHECK(bfp8_ue8m0_ceil(down) == e, "ceil(2^%d - ulp) = %d", e - 127, bfp8_ue8m0_ceil(down));
    }
    CHECK(bfp8_ue8m0_to_f32(0) == 0x1p-127f && isnan(bfp8_ue8m0_to_f32(255)), "ue8m0 0 and 255");
    CHECK(bfp8_ue8m0_ceil(0x1p-127f) == 1 && bfp8_ue8m0_ceil(bfp8_f32_from_bits(1)) == 1, "subnormal -> 1");
    CHECK(bfp8_ue8m0_ceil(0.0f) == 1 && bfp8_ue8m0_ceil(-0.0f) == 1 && bfp8_ue8m0_ceil(-1.0f) == 1 &&
              bfp8_ue8m0_ceil(-INFINITY) == 1,
          "non-positive -> 1");
    CHECK(bfp8_ue8m0_ceil(FLT_MAX) == 254 && bfp8_ue8m0_ceil(3e38f) == 254 && bfp8_ue8m0_ceil(INFINITY) == 254,
          "huge -> 254");
    CHECK(bfp8_ue8m0_ceil(NAN) == 254 && bfp8_ue8m0_ceil(-NAN) == 254, "NaN -> 254");
    CHECK(bfp8_ue8m0_ceil(0.75f) == 127 && bfp8_ue8m0_ceil(1.5f) == 128 && bfp8_ue8m0_ceil(1.0f) == 127, "small");
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        float s = fabsf(rand_float_exp(0, 254));
        if (bfp8_ue8m0_ceil(s) != ref_ue8m0_ceil(s) && bad++ < 5) fprintf(stderr, "ue8m0 ceil %a\n", s);
        if (s > 0 && s <= 0x1p127f && bfp8_ue8m0_to_f32(bfp8_ue8m0_ceil(s)) < s) bad++;
    }
    CHECK(bad == 0, "%d random ue8m0 ceil mismatches", bad);
}

static void test_group_scale(void) {
    CHECK(bfp8_group_scale(448.0f, BFP8_SCALE_FP32) == 1.0f, "448 -> 1");
    CHECK(bfp8_group_scale(0.0f, BFP8_SCALE_FP32) == 1e-10f / 448.0f, "amax floor");
    CHECK(bfp8_group_scale(NAN, BFP8_SCALE_FP32) == 1e-10f / 448.0f, "NaN amax -> floor");
    CHECK(bfp8_group_scale(1.0f, BFP8_SCALE_FP32) == 1.0f / 448.0f, "1 -> 1/448");
    CHECK(bfp8_group_scale(448.0f, BFP8_SCALE_UE8M0) == 1.0f, "ue8m0 448 -> 1");
    CHECK(bfp8_group_scale(449.0f, BFP8_SCALE_UE8M0) == 2.0f, "ue8m0 449 -> 2");
    CHECK(bfp8_group_scale(224.0f, BFP8_SCALE_UE8M0) == 0.5f, "ue8m0 224 -> 0.5");
    CHECK(bfp8_group_scale(1.0f, BFP8_SCALE_UE8M0) == 0x1p-8f, "ue8m0 1 -> 2^-8");
    CHECK(bfp8_group_scale(0.0f, BFP8_SCALE_UE8M0) == 0x1p-42f, "ue8m0 floor: 1e-10/448 -> 2^-42");
}

/* ---- bf16 / fp16 --------------------------------------------------------------------------------------------- */

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t p = 0; p < 0x10000; p++) { /* every pattern decodes and re-encodes to itself */
        float v = bfp8_bf16_to_f32((uint16_t)p);
        uint16_t back = bfp8_bf16_from_f32(v);
        if (bf16_is_nan((uint16_t)p) ? !(isnan(v) && bf16_is_nan(back)) : back != p) bad++;
    }
    CHECK(bad == 0, "%d bf16 patterns do not round-trip", bad);
    CHECK(bfp8_bf16_from_f32(bfp8_f32_from_bits(0x3F808000u)) == 0x3F80, "tie to even down");
    CHECK(bfp8_bf16_from_f32(bfp8_f32_from_bits(0x3F818000u)) == 0x3F82, "tie to even up");
    CHECK(bfp8_bf16_from_f32(bfp8_f32_from_bits(0x3F808001u)) == 0x3F81, "above the tie");
    CHECK(bfp8_bf16_from_f32(bfp8_f32_from_bits(0x7F7F8000u)) == 0x7F80, "max + half ulp -> inf");
    CHECK(bfp8_bf16_from_f32(bfp8_f32_from_bits(0x7F7F7FFFu)) == 0x7F7F, "below -> max");
    uint16_t n1 = bfp8_bf16_from_f32(bfp8_f32_from_bits(0x7F800001u));
    uint16_t n2 = bfp8_bf16_from_f32(bfp8_f32_from_bits(0xFF800001u));
    CHECK(bf16_is_nan(n1) && bf16_is_nan(n2) && (n2 & 0x8000) && (n1 & 0x40), "NaN stays quiet NaN: %04x %04x", n1, n2);
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        float x = i % 2 ? bfp8_f32_from_bits((uint32_t)test_rand_u64()) : rand_float_exp(0, 254);
        if (isnan(x)) continue;
        if (bfp8_bf16_from_f32(x) != ref_bf16(x) && bad++ < 5) fprintf(stderr, "bf16 %a\n", x);
    }
    CHECK(bad == 0, "%d random bf16 roundings differ", bad);
}

static void test_f16(void) {
    int bad = 0;
    for (uint32_t p = 0; p < 0x10000; p++) {
        float v = bfp8_f16_to_f32((uint16_t)p);
        bool nan = f16_is_nan((uint16_t)p);
        double want = (p & 0x7FFF) == 0x7C00 ? INFINITY : (p & 0x7FFF) < 0x7C00 ? f16_table[p & 0x7FFF] : NAN;
        if (p & 0x8000) want = -want;
        if (nan ? !isnan(v) : ((double)v != want || !!signbit(v) != !!(p & 0x8000))) bad++;
        uint16_t back = bfp8_f16_from_f32(v);
        if (nan ? !f16_is_nan(back) || (back & 0x8000) != (p & 0x8000) : back != p) bad++;
    }
    CHECK(bad == 0, "%d f16 patterns wrong", bad);
    CHECK(bfp8_f16_from_f32(65520.0f) == 0x7C00 && bfp8_f16_from_f32(-65520.0f) == 0xFC00, "65520 -> inf");
    CHECK(bfp8_f16_from_f32(nextafterf(65520.0f, 0)) == 0x7BFF, "65519.996 -> 65504");
    CHECK(bfp8_f16_from_f32(65504.0f) == 0x7BFF && bfp8_f16_from_f32(1e10f) == 0x7C00, "max, overflow");
    CHECK(bfp8_f16_from_f32(INFINITY) == 0x7C00 && bfp8_f16_from_f32(-INFINITY) == 0xFC00, "inf");
    CHECK(bfp8_f16_from_f32(0x1p-24f) == 0x0001 && bfp8_f16_from_f32(0x1p-25f) == 0x0000, "min subnormal, tie");
    CHECK(bfp8_f16_from_f32(nextafterf(0x1p-25f, 1)) == 0x0001 && bfp8_f16_from_f32(3 * 0x1p-25f) == 0x0002,
          "subnormal rounding");
    CHECK(bfp8_f16_from_f32(0x1p-14f - 0x1p-25f) == 0x0400, "tie into the min normal");
    CHECK(bfp8_f16_from_f32(-0.0f) == 0x8000 && bfp8_f16_from_f32(-0x1p-26f) == 0x8000, "negative zero");
    CHECK(bfp8_f16_from_f32(1.0f + 0x1p-11f) == 0x3C00 && bfp8_f16_from_f32(1.0f + 3 * 0x1p-11f) == 0x3C02, "ties");
    uint16_t n = bfp8_f16_from_f32(bfp8_f32_from_bits(0xFF800001u));
    CHECK(f16_is_nan(n) && (n & 0x8000), "NaN stays NaN: %04x", n);
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        float x = i % 2 ? bfp8_f32_from_bits((uint32_t)test_rand_u64()) : rand_float_exp(95, 145);
        if (isnan(x)) continue;
        if (bfp8_f16_from_f32(x) != ref_f16(x) && bad++ < 5) fprintf(stderr, "f16 %a\n", x);
    }
    CHECK(bad == 0, "%d random f16 roundings differ", bad);
}

/* ---- bfp8_store_f64: exactly one rounding -------------------------------------------------------------------- */

static uint16_t store16(bfp8_dtype dt, double v) {
    uint16_t out = 0xDEAD;
    bfp8_store_f64(&out, dt, 0, v);
    return out;
}

static void test_store_f64(void) {
    /* bf16: 1 + 2^-8 is the tie between 0x3F80 (even) and 0x3F81. A hair above it must round up, but the float
     * in between collapses the hair and then ties to even (down): the double-rounding trap. */
    double above_tie = 1.0 + 0x1p-8 + 0x1p-40, below_tie = 1.0 + 3 * 0x1p-8 - 0x1p-40;
    CHECK((float)above_tie == 1.0f + 0x1p-8f && bfp8_bf16_from_f32((float)above_tie) == 0x3F80, "trap premise");
    CHECK(store16(BFP8_DTYPE_BF16, above_tie) == 0x3F81, "bf16 single rounding up: %04x",
          store16(BFP8_DTYPE_BF16, above_tie));
    CHECK(store16(BFP8_DTYPE_BF16, below_tie) == 0x3F81, "bf16 single rounding down: %04x",
          store16(BFP8_DTYPE_BF16, below_tie));
    CHECK(store16(BFP8_DTYPE_F16, 1.0 + 0x1p-11 + 0x1p-40) == 0x3C01, "f16 single rounding up");
    CHECK(store16(BFP8_DTYPE_F16, 1.0 + 3 * 0x1p-11 - 0x1p-40) == 0x3C01, "f16 single rounding down");
    CHECK(store16(BFP8_DTYPE_F16, 65520.0 - 0x1p-20) == 0x7BFF && store16(BFP8_DTYPE_F16, 65520.0) == 0x7C00,
          "f16 overflow boundary in double");
    CHECK(store16(BFP8_DTYPE_BF16, 1e300) == 0x7F80 && store16(BFP8_DTYPE_BF16, -1e300) == 0xFF80, "bf16 overflow");
    CHECK(store16(BFP8_DTYPE_F16, 1e-300) == 0x0000 && store16(BFP8_DTYPE_F16, -1e-300) == 0x8000, "underflow");
    CHECK(bf16_is_nan(store16(BFP8_DTYPE_BF16, double_of(0x7FF0000000000001ull))), "bf16 NaN");
    CHECK(f16_is_nan(store16(BFP8_DTYPE_F16, NAN)), "f16 NaN");
    /* A subnormal-f16 double-rounding trap: tie between 0x0001 and 0x0002 is 3*2^-25 (goes to 2); just below it
     * must give 1. */
    CHECK(store16(BFP8_DTYPE_F16, 3 * 0x1p-25 - 0x1p-60) == 0x0001, "f16 subnormal single rounding");

    int bad = 0;
    for (int i = 0; i < 300000; i++) {
        uint64_t r = test_rand_u64();
        uint64_t exp = 1023 - 40 + (r >> 54) % 60; /* 2^-40 .. 2^19 */
        double v = double_of((r & 0x800FFFFFFFFFFFFFull) | (exp << 52));
        if (i % 3 == 0) { /* land near a bf16 or f16 midpoint, the interesting place */
            double base = (double)bfp8_bf16_to_f32(ref_bf16(v));
            v = base + ldexp(1.0, ilogb(base) - 8) * ((r & 1) ? 1 : -1) + ldexp((double)((int)(r >> 8 & 7) - 3), ilogb(base) - 45);
        }
        if (store16(BFP8_DTYPE_BF16, v) != ref_bf16(v) && bad++ < 5) fprintf(stderr, "store bf16 %a\n", v);
        if (store16(BFP8_DTYPE_F16, v) != ref_f16(v) && bad++ < 5) fprintf(stderr, "store f16 %a\n", v);
        float f = -1;
        bfp8_store_f64(&f, BFP8_DTYPE_F32, 0, v);
        if (bfp8_f32_bits(f) != bfp8_f32_bits((float)v) && bad++ < 5) fprintf(stderr, "store f32 %a\n", v);
    }
    CHECK(bad == 0, "%d random bfp8_store_f64 mismatches", bad);
    float f = 0;
    bfp8_store_f64(&f, BFP8_DTYPE_F32, 0, 1e300);
    CHECK(isinf(f), "f32 overflow -> inf");
    bfp8_store_f64(&f, BFP8_DTYPE_F32, 0, 0x1p-149 * 1.5);
    CHECK(bfp8_f32_bits(f) == 2, "f32 subnormal tie to even: %08x", bfp8_f32_bits(f));
}

/* ---- names --------------------------------------------------------------------------------------------------- */

static void test_names(void) {
    for (int d = 0; d < BFP8_DTYPE_COUNT; d++) {
        bfp8_dtype back = BFP8_DTYPE_COUNT;
        CHECK_OK(bfp8_dtype_parse(bfp8_dtype_name((bfp8_dtype)d), &back));
        CHECK(back == (bfp8_dtype)d, "dtype %d name round trip", d);
    }
    static const struct { const char *name; bfp8_dtype dt; } aliases[] = {
        {"fp32", BFP8_DTYPE_F32},    {"float32", BFP8_DTYPE_F32},   {"F32", BFP8_DTYPE_F32},
        {"bfloat16", BFP8_DTYPE_BF16}, {"BF16", BFP8_DTYPE_BF16},   {"fp16", BFP8_DTYPE_F16},
        {"float16", BFP8_DTYPE_F16}, {"half", BFP8_DTYPE_F16},      {"f8_e4m3", BFP8_DTYPE_E4M3},
        {"F8_E4M3", BFP8_DTYPE_E4M3}, {"float8_e4m3fn", BFP8_DTYPE_E4M3}, {"int32", BFP8_DTYPE_I32},
        {"I32", BFP8_DTYPE_I32},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        bfp8_dtype dt = BFP8_DTYPE_COUNT;
        CHECK_OK(bfp8_dtype_parse(aliases[i].name, &dt));
        CHECK(dt == aliases[i].dt, "alias %s", aliases[i].name);
    }
    bfp8_dtype dt;
    CHECK_STATUS(bfp8_dtype_parse("f64", &dt), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(bfp8_last_error(), "f64") != NULL, "message names the input: %s", bfp8_last_error());
    CHECK_STATUS(bfp8_dtype_parse("", &dt), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dtype_parse(NULL, &dt), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_dtype_parse("f32", NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(bfp8_dtype_size(BFP8_DTYPE_F32) == 4 && bfp8_dtype_size(BFP8_DTYPE_BF16) == 2 &&
              bfp8_dtype_size(BFP8_DTYPE_F16) == 2 && bfp8_dtype_size(BFP8_DTYPE_E4M3) == 1 &&
              bfp8_dtype_size(BFP8_DTYPE_I32) == 4 && bfp8_dtype_size(BFP8_DTYPE_COUNT) == 0 &&
              bfp8_dtype_size((bfp8_dtype)-1) == 0,
          "dtype sizes");
    CHECK(strcmp(bfp8_dtype_name((bfp8_dtype)99), "unknown") == 0, "unknown dtype name");

    bfp8_scale_format f = BFP8_SCALE_FORMAT_COUNT;
    for (int i = 0; i < BFP8_SCALE_FORMAT_COUNT; i++) {
        CHECK_OK(bfp8_scale_format_parse(bfp8_scale_format_name((bfp8_scale_format)i), &f));
        CHECK(f == (bfp8_scale_format)i, "scale format round trip");
    }
    CHECK_OK(bfp8_scale_format_parse("UE8M0", &f));
    CHECK(f == BFP8_SCALE_UE8M0, "UE8M0 alias");
    CHECK_OK(bfp8_scale_format_parse("float32", &f));
    CHECK(f == BFP8_SCALE_FP32, "float32 alias");
    CHECK_STATUS(bfp8_scale_format_parse("e4m3", &f), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_scale_format_parse(NULL, &f), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(strcmp(bfp8_scale_format_name((bfp8_scale_format)7), "unknown") == 0, "unknown format name");

    const char *layouts[] = {"row_major", "mn_major", "mn_major_aligned", "packed_ue8m0"};
    for (int i = 0; i < BFP8_LAYOUT_COUNT; i++)
        CHECK(strcmp(bfp8_scale_layout_name((bfp8_scale_layout)i), layouts[i]) == 0, "layout name %d", i);
    CHECK(strcmp(bfp8_scale_layout_name(BFP8_LAYOUT_COUNT), "unknown") == 0, "unknown layout name");

    bfp8_device dev = BFP8_DEVICE_COUNT;
    CHECK_OK(bfp8_device_parse("cpu", &dev));
    CHECK(dev == BFP8_DEVICE_CPU, "cpu");
    CHECK_OK(bfp8_device_parse("CUDA", &dev));
    CHECK(dev == BFP8_DEVICE_CUDA && strcmp(bfp8_device_name(dev), "cuda") == 0, "cuda");
    CHECK(strcmp(bfp8_device_name(BFP8_DEVICE_CPU), "cpu") == 0, "cpu name");
    CHECK_STATUS(bfp8_device_parse("tpu", &dev), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_device_parse(NULL, &dev), BFP8_ERR_INVALID_ARGUMENT);
}

int main(void) {
    test_seed();
    build_tables();
    test_e4m3_codes();
    test_e4m3_midpoints();
    test_e4m3_special();
    test_e4m3_random();
    test_ue8m0();
    test_group_scale();
    test_bf16();
    test_f16();
    test_store_f64();
    test_names();
    return TEST_SUMMARY("test_formats");
}
