/* Scalar number formats (docs/numerics.md): E4M3, UE8M0, bf16, fp16, the single rounding of doubles, and the
 * enum name/parse helpers. Everything works on the bit patterns, so results do not depend on the FPU rounding mode
 * and every rounding is exactly one round-to-nearest-even step. */
#include "internal.h"

#include <math.h>
#include <string.h>
#include <strings.h>

/* v >> shift, rounded to nearest, ties to even. shift in [1, 63]. A carry out of the kept mantissa bits moves into
 * the exponent field above them, which is exactly the next binade. */
static uint64_t rne_shift(uint64_t v, unsigned shift) {
    uint64_t kept = v >> shift;
    uint64_t rest = v & ((UINT64_C(1) << shift) - 1);
    uint64_t half = UINT64_C(1) << (shift - 1);
    if (rest > half || (rest == half && (kept & 1))) kept++;
    return kept;
}

/* ----------------------------------------------------------------------------------------------------------------
 * E4M3 (OCP e4m3fn): bias 7, no infinities, NaN = S.1111.111, max finite 448 = 0x7E, min subnormal 2^-9.
 * -------------------------------------------------------------------------------------------------------------- */
#define E4M3_MAX_BITS_F32 0x43E00000u /* 448.0f */

uint8_t bfp8_e4m3_from_f32(float x) {
    uint32_t u = bfp8_f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)(sign | 0x7F); /* NaN */
    /* Beyond 448 (inf included) saturates, like cvt.rn.satfinite. Values in (448, 464] would round to 448 anyway
     * (464 is a tie and 448's mantissa is even), so one comparison covers both. */
    if (a >= E4M3_MAX_BITS_F32) return (uint8_t)(sign | 0x7E);
    uint32_t exp = a >> 23;
    if (exp >= 121) {
        /* Normal in E4M3 (|x| >= 2^-6): rebias 127 -> 7 and keep 3 mantissa bits. */
        uint64_t rebased = ((uint64_t)(exp - 120) << 23) | (a & 0x7FFFFFu);
        return (uint8_t)(sign | rne_shift(rebased, 20));
    }
    /* Subnormal in E4M3: count units of 2^-9. significand * 2^(e - 150) / 2^-9 = significand >> (141 - e). */
    uint32_t significand = exp ? ((a & 0x7FFFFFu) | 0x800000u) : (a & 0x7FFFFFu);
    unsigned shift = 141u - (exp ? exp : 1u);
    if (shift > 25) return sign; /* below a quarter unit: rounds to (signed) zero */
    return (uint8_t)(sign | rne_shift(significand, shift)); /* 8 units carries into 0x08 = 2^-6, correctly */
}

float bfp8_e4m3_to_f32(uint8_t code) {
    uint32_t sign = (uint32_t)(code & 0x80) << 24, exp = (code >> 3) & 0xF, mant = code & 0x7;
    if (exp == 0xF && mant == 0x7) return bfp8_f32_from_bits(sign | 0x7FC00000u); /* quiet NaN */
    if (exp == 0) { /* subnormal: mant * 2^-9, exact */
        float v = (float)mant * 0x1p-9f;
        return sign ? -v : v;
    }
    return bfp8_f32_from_bits(sign | ((exp + 120) << 23) | (mant << 20)); /* rebias 7 -> 127 */
}

/* ----------------------------------------------------------------------------------------------------------------
 * UE8M0: value 2^(e-127).
 * -------------------------------------------------------------------------------------------------------------- */

/* Exponent of s, +1 if any mantissa bit is set, clamped to [1, 254]. Out of the domain of a scale, the clamp
 * decides: s <= 0 (-0 and -inf included) and fp32 subnormals give 1 (2^-126, which covers any subnormal);
 * s > 2^127 and +inf give 254 (2^127, the largest); NaN gives 254 too (a NaN scale has no exponent; the largest
 * scale can never make a quantized value overflow). */
uint8_t bfp8_ue8m0_ceil(float s) {
    uint32_t u = bfp8_f32_bits(s);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 254; /* NaN */
    if (u & 0x80000000u) return 1;                   /* negative or -0 */
    uint32_t exp = u >> 23;
    if (u & 0x7FFFFFu) exp++;
    if (exp < 1) exp = 1;
    if (exp > 254) exp = 254;
    return (uint8_t)exp;
}

/* e = 0 is 2^-127 (an fp32 subnormal); e = 255 is NaN, as in the OCP MX spec. */
float bfp8_ue8m0_to_f32(uint8_t e) {
    if (e == 255) return NAN;
    if (e == 0) return bfp8_f32_from_bits(0x00400000u);
    return bfp8_f32_from_bits((uint32_t)e << 23);
}

float bfp8_group_scale(float amax, bfp8_scale_format format) {
    amax = fmaxf(amax, 1e-10f); /* also turns a NaN into 1e-10; callers pass the amax of finite values */
    float s = amax / 448.0f;
    if (format == BFP8_SCALE_UE8M0) s = bfp8_ue8m0_to_f32(bfp8_ue8m0_ceil(s));
    return s;
}

/* ----------------------------------------------------------------------------------------------------------------
 * Counting non-finite values (the dispatcher's per-kind statistics)
 * -------------------------------------------------------------------------------------------------------------- */

int64_t bfp8_count_nan_codes(const uint8_t *q, int64_t count) {
    int64_t bad = 0;
    for (int64_t i = 0; i < count; i++) bad += (q[i] & 0x7F) == 0x7F;
    return bad;
}

/* On the bit patterns: an all-ones exponent field is inf or NaN in every float format. */
int64_t bfp8_count_nonfinite_values(const void *p, bfp8_dtype dt, int64_t count) {
    int64_t bad = 0;
    if (dt == BFP8_DTYPE_F32) {
        const uint32_t *u = p;
        for (int64_t i = 0; i < count; i++) bad += (u[i] & 0x7F800000u) == 0x7F800000u;
    } else {
        const uint16_t *u = p;
        const uint16_t mask = dt == BFP8_DTYPE_BF16 ? 0x7F80u : 0x7C00u;
        for (int64_t i = 0; i < count; i++) bad += (u[i] & mask) == mask;
    }
    return bad;
}

/* ----------------------------------------------------------------------------------------------------------------
 * bf16 / fp16 and the single rounding of doubles
 * -------------------------------------------------------------------------------------------------------------- */

/* Rounds the double v once (RNE) to a binary format with `exp_bits` exponent bits (IEEE bias) and `mant_bits`
 * mantissa bits; returns its bit pattern. Overflow gives inf, NaN a quiet NaN with the sign kept. */
static uint64_t round_f64_to_format(double v, unsigned exp_bits, unsigned mant_bits) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    uint64_t sign = (u >> 63) << (exp_bits + mant_bits);
    uint64_t a = u & 0x7FFFFFFFFFFFFFFFull;
    uint64_t exp_all_ones = ((UINT64_C(1) << exp_bits) - 1) << mant_bits;
    uint64_t quiet_bit = UINT64_C(1) << (mant_bits - 1);
    if (a > 0x7FF0000000000000ull) return sign | exp_all_ones | quiet_bit | ((a & 0xFFFFFFFFFFFFFull) >> (52 - mant_bits));
    if (a == 0x7FF0000000000000ull) return sign | exp_all_ones;
    int bias = (1 << (exp_bits - 1)) - 1;
    int exp = (int)(a >> 52);
    uint64_t mant = a & 0xFFFFFFFFFFFFFull;
    if (exp - 1023 > bias) return sign | exp_all_ones; /* at least 2^(bias+1): beyond every finite value */
    if (exp - 1023 >= 1 - bias) {
        uint64_t rebased = ((uint64_t)(exp - 1023 + bias) << 52) | mant;
        uint64_t r = rne_shift(rebased, 52 - mant_bits);
        return sign | (r >= exp_all_ones ? exp_all_ones : r); /* a carry into the all-ones exponent is inf */
    }
    /* Subnormal in the target: units of 2^(1 - bias - mant_bits). */
    uint64_t significand = exp ? (mant | (UINT64_C(1) << 52)) : mant;
    /* value = significand * 2^(max(exp,1) - 1075); divided by the unit, that is significand >> shift. */
    int shift = 1076 - bias - (int)mant_bits - (exp ? exp : 1);
    if (shift > 54) return sign;
    return sign | rne_shift(significand, (unsigned)shift);
}

uint16_t bfp8_bf16_from_f32(float x) {
    uint32_t u = bfp8_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040); /* quiet NaN, sign kept */
    return (uint16_t)(rne_shift(u, 16)); /* carries run into the exponent and up to inf, as RNE wants */
}

float bfp8_bf16_to_f32(uint16_t bits) { return bfp8_f32_from_bits((uint32_t)bits << 16); }

uint16_t bfp8_f16_from_f32(float x) { return (uint16_t)round_f64_to_format((double)x, 5, 10); }

float bfp8_f16_to_f32(uint16_t bits) {
    uint32_t sign = (uint32_t)(bits & 0x8000) << 16;
    uint32_t exp = (bits >> 10) & 0x1F, mant = bits & 0x3FF;
    if (exp == 0x1F) return bfp8_f32_from_bits(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0));
    if (exp == 0) {
        float v = (float)mant * 0x1p-24f; /* exact */
        return sign ? -v : v;
    }
    return bfp8_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Straight from the double's bits: a double -> float -> bf16 path would round twice. */
void bfp8_store_f64(void *p, bfp8_dtype dt, int64_t i, double v) {
    switch (dt) {
    case BFP8_DTYPE_BF16: ((uint16_t *)p)[i] = (uint16_t)round_f64_to_format(v, 8, 7); break;
    case BFP8_DTYPE_F16: ((uint16_t *)p)[i] = (uint16_t)round_f64_to_format(v, 5, 10); break;
    default: {
        uint32_t bits = (uint32_t)round_f64_to_format(v, 8, 23);
        ((float *)p)[i] = bfp8_f32_from_bits(bits);
        break;
    }
    }
}

/* ----------------------------------------------------------------------------------------------------------------
 * Names and parsers (case-insensitive, with the aliases other tools use)
 * -------------------------------------------------------------------------------------------------------------- */
typedef struct name_alias {
    const char *name;
    int value;
} name_alias;

static bool lookup_alias(const name_alias *table, size_t count, const char *name, int *value) {
    for (size_t i = 0; i < count; i++) {
        if (strcasecmp(table[i].name, name) == 0) {
            *value = table[i].value;
            return true;
        }
    }
    return false;
}

static const name_alias dtype_aliases[] = {
    {"f32", BFP8_DTYPE_F32},        {"fp32", BFP8_DTYPE_F32},          {"float32", BFP8_DTYPE_F32},
    {"float", BFP8_DTYPE_F32},      {"bf16", BFP8_DTYPE_BF16},         {"bfloat16", BFP8_DTYPE_BF16},
    {"f16", BFP8_DTYPE_F16},        {"fp16", BFP8_DTYPE_F16},          {"float16", BFP8_DTYPE_F16},
    {"half", BFP8_DTYPE_F16},       {"e4m3", BFP8_DTYPE_E4M3},         {"e4m3fn", BFP8_DTYPE_E4M3},
    {"f8_e4m3", BFP8_DTYPE_E4M3},   {"fp8_e4m3", BFP8_DTYPE_E4M3},     {"float8_e4m3fn", BFP8_DTYPE_E4M3},
    {"fp8", BFP8_DTYPE_E4M3},       {"i32", BFP8_DTYPE_I32},           {"int32", BFP8_DTYPE_I32},
    {"ue8m0", BFP8_DTYPE_UE8M0},    {"f8_e8m0", BFP8_DTYPE_UE8M0},     {"float8_e8m0fnu", BFP8_DTYPE_UE8M0},
};

const char *bfp8_dtype_name(bfp8_dtype dtype) {
    switch (dtype) {
    case BFP8_DTYPE_F32: return "f32";
    case BFP8_DTYPE_BF16: return "bf16";
    case BFP8_DTYPE_F16: return "f16";
    case BFP8_DTYPE_E4M3: return "e4m3";
    case BFP8_DTYPE_I32: return "i32";
    case BFP8_DTYPE_UE8M0: return "ue8m0";
    case BFP8_DTYPE_COUNT: break;
    }
    return "unknown";
}

bfp8_status bfp8_dtype_parse(const char *name, bfp8_dtype *out) {
    int v;
    BFP8_CHECK_ARG(name && out, "bfp8_dtype_parse: NULL argument");
    BFP8_CHECK_ARG(lookup_alias(dtype_aliases, sizeof dtype_aliases / sizeof dtype_aliases[0], name, &v),
                   "unknown dtype '%s' (expected f32, bf16, f16, e4m3, i32 or ue8m0)", name);
    *out = (bfp8_dtype)v;
    return BFP8_OK;
}

size_t bfp8_dtype_size(bfp8_dtype dtype) {
    switch (dtype) {
    case BFP8_DTYPE_F32: return 4;
    case BFP8_DTYPE_BF16: return 2;
    case BFP8_DTYPE_F16: return 2;
    case BFP8_DTYPE_E4M3: return 1;
    case BFP8_DTYPE_I32: return 4;
    case BFP8_DTYPE_UE8M0: return 1;
    case BFP8_DTYPE_COUNT: break;
    }
    return 0;
}

static const name_alias scale_format_aliases[] = {
    {"fp32", BFP8_SCALE_FP32},  {"f32", BFP8_SCALE_FP32},  {"float32", BFP8_SCALE_FP32},
    {"ue8m0", BFP8_SCALE_UE8M0}, {"e8m0", BFP8_SCALE_UE8M0}, {"float8_e8m0fnu", BFP8_SCALE_UE8M0},
};

const char *bfp8_scale_format_name(bfp8_scale_format format) {
    switch (format) {
    case BFP8_SCALE_FP32: return "fp32";
    case BFP8_SCALE_UE8M0: return "ue8m0";
    case BFP8_SCALE_FORMAT_COUNT: break;
    }
    return "unknown";
}

bfp8_status bfp8_scale_format_parse(const char *name, bfp8_scale_format *out) {
    int v;
    BFP8_CHECK_ARG(name && out, "bfp8_scale_format_parse: NULL argument");
    BFP8_CHECK_ARG(
        lookup_alias(scale_format_aliases, sizeof scale_format_aliases / sizeof scale_format_aliases[0], name, &v),
        "unknown scale format '%s' (expected fp32 or ue8m0)", name);
    *out = (bfp8_scale_format)v;
    return BFP8_OK;
}

const char *bfp8_scale_layout_name(bfp8_scale_layout layout) {
    switch (layout) {
    case BFP8_LAYOUT_ROW_MAJOR: return "row_major";
    case BFP8_LAYOUT_MN_MAJOR: return "mn_major";
    case BFP8_LAYOUT_MN_MAJOR_ALIGNED: return "mn_major_aligned";
    case BFP8_LAYOUT_PACKED_UE8M0: return "packed_ue8m0";
    case BFP8_LAYOUT_COUNT: break;
    }
    return "unknown";
}

const char *bfp8_device_name(bfp8_device device) {
    switch (device) {
    case BFP8_DEVICE_CPU: return "cpu";
    case BFP8_DEVICE_CUDA: return "cuda";
    case BFP8_DEVICE_COUNT: break;
    }
    return "unknown";
}

bfp8_status bfp8_device_parse(const char *name, bfp8_device *out) {
    static const name_alias device_aliases[] = {{"cpu", BFP8_DEVICE_CPU}, {"cuda", BFP8_DEVICE_CUDA}};
    int v;
    BFP8_CHECK_ARG(name && out, "bfp8_device_parse: NULL argument");
    BFP8_CHECK_ARG(lookup_alias(device_aliases, sizeof device_aliases / sizeof device_aliases[0], name, &v),
                   "unknown device '%s' (expected cpu or cuda)", name);
    *out = (bfp8_device)v;
    return BFP8_OK;
}
