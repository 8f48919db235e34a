/* Scale matrices: the four layouts of the header, their sizes, element access and conversions between them. */
#include "internal.h"

#include <math.h>
#include <string.h>

#define PACKED_PER_WORD 4 /* UE8M0 exponents per uint32 */

static bool layout_valid(bfp8_scale_layout layout) { return (unsigned)layout < (unsigned)BFP8_LAYOUT_COUNT; }
static bool format_valid(bfp8_scale_format format) { return (unsigned)format < (unsigned)BFP8_SCALE_FORMAT_COUNT; }

/* Leading dimension of the MN-major layouts in elements: rows, or rows rounded up to 4 (16 bytes). */
static int64_t layout_ld(bfp8_scale_layout layout, int64_t rows) {
    return layout == BFP8_LAYOUT_MN_MAJOR ? rows : bfp8_round_up(rows, 4);
}

/* Element count of the buffer (floats, or uint32 words for PACKED); false on negative sizes or overflow. */
static bool layout_elems(bfp8_scale_layout layout, int64_t rows, int64_t kblocks, int64_t *elems) {
    if (rows < 0 || kblocks < 0 || rows > INT64_MAX - 4 || kblocks > INT64_MAX - 4) return false;
    switch (layout) {
    case BFP8_LAYOUT_ROW_MAJOR:
    case BFP8_LAYOUT_MN_MAJOR: return bfp8_mul_ok(rows, kblocks, elems);
    case BFP8_LAYOUT_MN_MAJOR_ALIGNED: return bfp8_mul_ok(layout_ld(layout, rows), kblocks, elems);
    case BFP8_LAYOUT_PACKED_UE8M0:
        return bfp8_mul_ok(layout_ld(layout, rows), bfp8_ceil_div(kblocks, PACKED_PER_WORD), elems);
    case BFP8_LAYOUT_COUNT: break;
    }
    return false;
}

size_t bfp8_scales_bytes(bfp8_scale_layout layout, int64_t rows, int64_t kblocks) {
    int64_t elems, bytes;
    if (!layout_valid(layout)) {
        bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "unknown scale layout %d", (int)layout);
        return 0;
    }
    if (!layout_elems(layout, rows, kblocks, &elems) || !bfp8_mul_ok(elems, 4, &bytes) ||
        (uint64_t)bytes > (uint64_t)SIZE_MAX) {
        bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "scales [%lld, %lld] in layout %s: negative or overflowing size",
                  (long long)rows, (long long)kblocks, bfp8_scale_layout_name(layout));
        return 0;
    }
    return (size_t)bytes;
}

uint32_t bfp8_scale_layouts_for(bfp8_scale_format format) {
    if (!format_valid(format)) return 0;
    uint32_t set = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR) | BFP8_BIT(BFP8_LAYOUT_MN_MAJOR) |
                   BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED);
    if (format == BFP8_SCALE_UE8M0) set |= BFP8_BIT(BFP8_LAYOUT_PACKED_UE8M0);
    return set;
}

/* Format, layout and size checks shared by init and check_scales (data is not looked at). */
static bfp8_status check_combination(const char *what, bfp8_scale_format format, bfp8_scale_layout layout,
                                     int64_t rows, int64_t kblocks, size_t *bytes) {
    int64_t elems, total;
    BFP8_CHECK_ARG(format_valid(format), "%s: unknown scale format %d", what, (int)format);
    BFP8_CHECK_ARG(layout_valid(layout), "%s: unknown scale layout %d", what, (int)layout);
    BFP8_CHECK_ARG(bfp8_scale_layouts_for(format) & BFP8_BIT(layout), "%s: layout %s holds only ue8m0 scales, not %s",
                   what, bfp8_scale_layout_name(layout), bfp8_scale_format_name(format));
    BFP8_CHECK_ARG(rows >= 0 && kblocks >= 0, "%s: negative scale shape [%lld, %lld]", what, (long long)rows,
                   (long long)kblocks);
    BFP8_CHECK_ARG(layout_elems(layout, rows, kblocks, &elems) && bfp8_mul_ok(elems, 4, &total) &&
                       (uint64_t)total <= (uint64_t)SIZE_MAX,
                   "%s: scale shape [%lld, %lld] overflows", what, (long long)rows, (long long)kblocks);
    if (bytes) *bytes = (size_t)total;
    return BFP8_OK;
}

bfp8_status bfp8_scales_init(bfp8_scales *s, bfp8_scale_format format, bfp8_scale_layout layout, int64_t rows,
                             int64_t kblocks, void *data) {
    BFP8_CHECK_ARG(s, "bfp8_scales_init: NULL descriptor");
    BFP8_TRY(check_combination("bfp8_scales_init", format, layout, rows, kblocks, NULL));
    s->format = format;
    s->layout = layout;
    s->rows = rows;
    s->kblocks = kblocks;
    s->data = data;
    return BFP8_OK;
}

bfp8_status bfp8_check_scales(const char *what, const bfp8_scales *s, int64_t rows, int64_t kblocks) {
    size_t bytes;
    BFP8_CHECK_ARG(s, "%s: NULL scales", what);
    BFP8_TRY(check_combination(what, s->format, s->layout, s->rows, s->kblocks, &bytes));
    BFP8_CHECK_ARG(s->rows == rows && s->kblocks == kblocks,
                   "%s: scales have shape [%lld, %lld] but the problem needs [%lld, %lld]", what,
                   (long long)s->rows, (long long)s->kblocks, (long long)rows, (long long)kblocks);
    BFP8_CHECK_ARG(bytes == 0 || s->data, "%s: NULL scale data for shape [%lld, %lld]", what, (long long)rows,
                   (long long)kblocks);
    return BFP8_OK;
}

/* Index of (row, kblock) in a float layout, or of its uint32 word in the packed one. */
static int64_t scale_index(const bfp8_scales *s, int64_t row, int64_t kblock) {
    switch (s->layout) {
    case BFP8_LAYOUT_ROW_MAJOR: return row * s->kblocks + kblock;
    case BFP8_LAYOUT_MN_MAJOR:
    case BFP8_LAYOUT_MN_MAJOR_ALIGNED: return kblock * layout_ld(s->layout, s->rows) + row;
    default: return (kblock / PACKED_PER_WORD) * bfp8_round_up(s->rows, 4) + row;
    }
}

float bfp8_scales_at(const bfp8_scales *s, int64_t row, int64_t kblock) {
    int64_t i = scale_index(s, row, kblock);
    if (s->layout == BFP8_LAYOUT_PACKED_UE8M0) {
        uint32_t word = ((const uint32_t *)s->data)[i];
        return bfp8_ue8m0_to_f32((uint8_t)(word >> (8 * (kblock % PACKED_PER_WORD))));
    }
    return ((const float *)s->data)[i];
}

void bfp8_scales_set_at(bfp8_scales *s, int64_t row, int64_t kblock, float value) {
    int64_t i = scale_index(s, row, kblock);
    if (s->layout == BFP8_LAYOUT_PACKED_UE8M0) {
        uint32_t *word = &((uint32_t *)s->data)[i];
        unsigned shift = 8u * (unsigned)(kblock % PACKED_PER_WORD);
        *word = (*word & ~(0xFFu << shift)) | ((uint32_t)bfp8_ue8m0_ceil(value) << shift);
        return;
    }
    ((float *)s->data)[i] = value;
}

void bfp8_scales_clear(bfp8_scales *s) {
    size_t bytes = bfp8_scales_bytes(s->layout, s->rows, s->kblocks);
    if (bytes) memset(s->data, 0, bytes);
}

/* A UE8M0 scale as docs/numerics.md makes them: 2^(e-127) for a biased exponent e in [1, 254], i.e. an exact
 * power of two in [2^-126, 2^127] (what the packed layout holds). NaN, inf, zero and negatives are not. */
static bool is_packable_power_of_two(float v) {
    return v >= 0x1p-126f && v <= 0x1p127f && bfp8_ue8m0_to_f32(bfp8_ue8m0_ceil(v)) == v;
}

bfp8_status bfp8_check_ue8m0_scales(const char *what, const bfp8_scales *s) {
    if (s->format != BFP8_SCALE_UE8M0) return BFP8_OK;
    /* Through bfp8_scales_at, so packed exponents are checked too (byte 255 reads as NaN, byte 0 as 2^-127). */
    for (int64_t r = 0; r < s->rows; r++)
        for (int64_t kb = 0; kb < s->kblocks; kb++) {
            float v = bfp8_scales_at(s, r, kb);
            BFP8_CHECK_ARG(is_packable_power_of_two(v),
                           "%s: scale (%lld, %lld) = %g is declared ue8m0 but is not a power of two in "
                           "[2^-126, 2^127]",
                           what, (long long)r, (long long)kb, (double)v);
        }
    return BFP8_OK;
}

int64_t bfp8_count_nonfinite_scales(const bfp8_scales *s) {
    int64_t bad = 0;
    for (int64_t r = 0; r < s->rows; r++)
        for (int64_t kb = 0; kb < s->kblocks; kb++) bad += !isfinite(bfp8_scales_at(s, r, kb));
    return bad;
}

bfp8_status bfp8_scales_convert(const bfp8_scales *src, bfp8_scales *dst) {
    size_t src_bytes, dst_bytes;
    BFP8_CHECK_ARG(src && dst, "bfp8_scales_convert: NULL descriptor");
    BFP8_TRY(bfp8_check_scales("bfp8_scales_convert (src)", src, src->rows, src->kblocks));
    BFP8_TRY(bfp8_check_scales("bfp8_scales_convert (dst)", dst, src->rows, src->kblocks));
    BFP8_CHECK_ARG(!(src->format == BFP8_SCALE_FP32 && dst->format == BFP8_SCALE_UE8M0),
                   "bfp8_scales_convert: fp32 scales cannot become ue8m0 by conversion (the fp8 data depends on "
                   "the scale); use bfp8_requantize_weight_ue8m0");
    src_bytes = bfp8_scales_bytes(src->layout, src->rows, src->kblocks);
    dst_bytes = bfp8_scales_bytes(dst->layout, dst->rows, dst->kblocks);
    if (src_bytes == 0 || dst_bytes == 0) return BFP8_OK;
    const char *sb = (const char *)src->data, *db = (const char *)dst->data;
    if (sb == db && src->layout == dst->layout) return BFP8_OK; /* in place, nothing moves */
    BFP8_CHECK_ARG(sb + src_bytes <= db || db + dst_bytes <= sb, "bfp8_scales_convert: src and dst buffers overlap");

    int64_t rows = src->rows, kblocks = src->kblocks;
    if (dst->layout == BFP8_LAYOUT_PACKED_UE8M0) {
        /* Check everything first so that a refusal leaves dst untouched. */
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t kb = 0; kb < kblocks; kb++) {
                float v = bfp8_scales_at(src, r, kb);
                BFP8_CHECK_ARG(is_packable_power_of_two(v),
                               "bfp8_scales_convert: scale (%lld, %lld) = %g is not a power of two in "
                               "[2^-126, 2^127], so it has no packed ue8m0 form",
                               (long long)r, (long long)kb, (double)v);
            }
        }
    }
    if (dst->layout == BFP8_LAYOUT_PACKED_UE8M0 || dst->layout == BFP8_LAYOUT_MN_MAJOR_ALIGNED)
        bfp8_scales_clear(dst); /* padding is zero */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t kb = 0; kb < kblocks; kb++) bfp8_scales_set_at(dst, r, kb, bfp8_scales_at(src, r, kb));
    return BFP8_OK;
}
