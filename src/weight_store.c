/* The one store of a prepared weight's forms (weight_store.h): what bfp8_weight and bfp8_grouped_weight hold,
 * prepare, view and free. Preparing for a backend adds the forms it consumes and never drops one a fallback needs. */
#include "weight_store.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int64_t row_blocks(const bfp8_weight_store *s) { return bfp8_ceil_div(s->n, BFP8_BLOCK); }
static int64_t kblocks_of(const bfp8_weight_store *s) { return bfp8_ceil_div(s->k, BFP8_BLOCK); }

/* Bytes of all G matrices in `layout`. */
static bfp8_status all_scale_bytes(const bfp8_weight_store *s, bfp8_scale_layout layout, size_t *bytes) {
    const size_t one = bfp8_scales_bytes(layout, row_blocks(s), kblocks_of(s));
    int64_t total;
    BFP8_CHECK_ARG(bfp8_mul_ok((int64_t)one, s->groups, &total) && (uint64_t)total <= (uint64_t)SIZE_MAX,
                   "%s: %" PRId64 " scale matrices overflow", s->name, s->groups);
    *bytes = (size_t)total;
    return BFP8_OK;
}

bfp8_status bfp8_weight_store_init(bfp8_weight_store *s, const char *name, int64_t groups, int64_t n, int64_t k,
                                   bfp8_scale_format format) {
    int64_t rows;
    size_t q_bytes;
    BFP8_CHECK_ARG(groups >= 1, "%s: groups=%" PRId64 " (at least 1)", name, groups);
    BFP8_TRY(bfp8_check_dims(name, n, k)); /* first, so that a negative n is named as such, not as an overflow */
    BFP8_CHECK_ARG(bfp8_mul_ok(groups, n, &rows), "%s: groups x n overflows", name);
    BFP8_TRY(bfp8_check_matrix(name, rows, k, 1, &q_bytes));
    BFP8_CHECK_ARG((unsigned)format < (unsigned)BFP8_SCALE_FORMAT_COUNT, "%s: unknown scale format %d", name,
                   (int)format);
    *s = (bfp8_weight_store){.name = name, .groups = groups, .n = n, .k = k, .format = format};
    s->q_host = malloc(q_bytes ? q_bytes : 1);
    if (!s->q_host) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", name, q_bytes);
    return BFP8_OK;
}

bfp8_status bfp8_weight_store_adopt(bfp8_weight_store *s, bfp8_scale_layout layout) {
    size_t bytes;
    BFP8_TRY(bfp8_scales_init(&s->host_scales[layout], s->format, layout, row_blocks(s), kblocks_of(s), NULL));
    BFP8_TRY(all_scale_bytes(s, layout, &bytes));
    s->host_scales[layout].data = calloc(1, bytes ? bytes : 1);
    if (!s->host_scales[layout].data)
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes of scales", s->name, bytes);
    return BFP8_OK;
}

/* Group g's matrix of a descriptor that describes one of G. */
static bfp8_scales group_of(const bfp8_scales *held, int64_t g) {
    bfp8_scales v = *held;
    v.data = (char *)held->data + (size_t)g * bfp8_grouped_scale_stride(held);
    return v;
}

/* Makes sure the host holds the scales in `layout`, converting each group from a held layout. */
static bfp8_status hold_host_layout(bfp8_weight_store *s, bfp8_scale_layout layout) {
    if (s->host_scales[layout].data) return BFP8_OK;
    const bfp8_scales *src = NULL;
    for (int l = 0; l < BFP8_LAYOUT_COUNT && !src; l++)
        if (s->host_scales[l].data) src = &s->host_scales[l];
    BFP8_CHECK_ARG(src, "%s holds no scales", s->name);
    BFP8_TRY(bfp8_weight_store_adopt(s, layout));
    for (int64_t g = 0; g < s->groups; g++) {
        bfp8_scales from = group_of(src, g), to = group_of(&s->host_scales[layout], g);
        bfp8_status st = bfp8_scales_convert(&from, &to);
        if (st != BFP8_OK) {
            free(s->host_scales[layout].data);
            s->host_scales[layout].data = NULL;
            return st;
        }
    }
    return BFP8_OK;
}

bfp8_status bfp8_weight_store_copy(bfp8_weight_store *s, const char *what, const uint8_t *q,
                                   const bfp8_scales *scales) {
    char where[64];
    snprintf(where, sizeof where, "%s: scales", what);
    BFP8_TRY(bfp8_check_scales(where, scales, row_blocks(s), kblocks_of(s)));
    const size_t q_bytes = (size_t)(s->groups * s->n * s->k);
    BFP8_CHECK_ARG(q || !q_bytes, "%s: q is NULL", what);
    size_t bytes;
    BFP8_TRY(bfp8_weight_store_adopt(s, scales->layout));
    BFP8_TRY(all_scale_bytes(s, scales->layout, &bytes));
    if (bytes) memcpy(s->host_scales[scales->layout].data, scales->data, bytes);
    if (q_bytes) memcpy(s->q_host, q, q_bytes);
    return hold_host_layout(s, BFP8_LAYOUT_ROW_MAJOR);
}

bfp8_status bfp8_weight_store_quantize(bfp8_weight_store *s, const void *w, bfp8_dtype w_dtype, int64_t *nonfinite) {
    BFP8_TRY(bfp8_weight_store_adopt(s, BFP8_LAYOUT_ROW_MAJOR));
    const int64_t group_elems = s->n * s->k;
    *nonfinite = 0;
    for (int64_t g = 0; g < s->groups; g++) {
        int64_t bad = 0; /* each non-finite input becomes one NaN code; the scales stay finite */
        bfp8_scales sg = group_of(&s->host_scales[BFP8_LAYOUT_ROW_MAJOR], g);
        /* Group 0 starts at w itself, which may be NULL for an empty weight (no offset of NULL). */
        const void *src = g ? (const char *)w + (size_t)(g * group_elems) * bfp8_dtype_size(w_dtype) : w;
        BFP8_TRY(bfp8_quantize_weight(src, w_dtype, s->n, s->k, s->q_host + g * group_elems, &sg, &bad));
        *nonfinite += bad;
    }
    return BFP8_OK;
}

/* Uploads q (once) and the scales of one layout to the device. */
static bfp8_status hold_device_layout(bfp8_weight_store *s, bfp8_scale_layout layout) {
    if (s->device_scales[layout].data) return BFP8_OK;
    BFP8_TRY(hold_host_layout(s, layout));
    const size_t q_bytes = (size_t)(s->groups * s->n * s->k);
    if (!s->q_device) {
        void *q_dev;
        BFP8_TRY(bfp8_cuda_malloc(q_bytes ? q_bytes : 1, &q_dev));
        bfp8_status st = bfp8_cuda_upload(q_dev, s->q_host, q_bytes);
        if (st != BFP8_OK) {
            bfp8_cuda_free(q_dev);
            return st;
        }
        s->q_device = q_dev;
    }
    size_t bytes;
    BFP8_TRY(all_scale_bytes(s, layout, &bytes));
    void *s_dev;
    BFP8_TRY(bfp8_cuda_malloc(bytes ? bytes : 1, &s_dev));
    bfp8_status st = bfp8_cuda_upload(s_dev, s->host_scales[layout].data, bytes);
    if (st != BFP8_OK) {
        bfp8_cuda_free(s_dev);
        return st;
    }
    s->device_scales[layout] = s->host_scales[layout];
    s->device_scales[layout].data = s_dev;
    return BFP8_OK;
}

/* Gives one backend a form it consumes: a layout in its caps, on its device. A backend whose only layouts cannot
 * hold this format (packed needs UE8M0), or a grouped store's backend without a grouped GEMM, is left alone;
 * dispatch then says why. */
static bfp8_status prepare_for(bfp8_weight_store *s, const bfp8_backend *b, bool grouped) {
    if (grouped && (!b->grouped_gemm || !b->caps.grouped_layouts)) return BFP8_OK;
    const uint32_t usable = b->caps.b_layouts & bfp8_scale_layouts_for(s->format);
    if (!usable) return BFP8_OK;
    const bool on_device = b->caps.device == BFP8_DEVICE_CUDA;
    const bfp8_scales *held = on_device ? s->device_scales : s->host_scales;
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++)
        if ((usable & BFP8_BIT(l)) && held[l].data) return BFP8_OK;
    const bfp8_scale_layout layout = bfp8_first_layout(usable);
    return on_device ? hold_device_layout(s, layout) : hold_host_layout(s, layout);
}

bfp8_status bfp8_weight_store_prepare(bfp8_weight_store *s, const char *what, bfp8_dispatcher *d,
                                      const char *backend_name, bool grouped) {
    if (!d) d = bfp8_dispatcher_default();
    if (!d) return BFP8_ERR_UNSUPPORTED;
    if (backend_name) {
        const bfp8_backend *b = bfp8_dispatcher_find(d, backend_name);
        if (!b) return bfp8_fail(BFP8_ERR_NOT_FOUND, "%s: no backend named '%s'", what, backend_name);
        return prepare_for(s, b, grouped);
    }
    for (size_t i = 0; i < bfp8_dispatcher_count(d); i++) BFP8_TRY(prepare_for(s, bfp8_dispatcher_at(d, i), grouped));
    return BFP8_OK;
}

void bfp8_weight_store_layouts(const bfp8_weight_store *s, uint32_t *host, uint32_t *device) {
    *host = *device = 0;
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
        if (s->host_scales[l].data) *host |= BFP8_BIT(l);
        if (s->device_scales[l].data) *device |= BFP8_BIT(l);
    }
}

bfp8_status bfp8_weight_store_view(const bfp8_weight_store *s, const char *what, bfp8_device device,
                                   bfp8_scale_layout layout, const uint8_t **q, bfp8_scales *scales) {
    BFP8_CHECK_ARG(q && scales, "%s: NULL argument", what);
    BFP8_CHECK_ARG(device >= 0 && device < BFP8_DEVICE_COUNT, "%s: unknown device %d", what, (int)device);
    BFP8_CHECK_ARG(layout >= 0 && layout < BFP8_LAYOUT_COUNT, "%s: unknown layout %d", what, (int)layout);
    const bfp8_scales *held = device == BFP8_DEVICE_CUDA ? &s->device_scales[layout] : &s->host_scales[layout];
    if (!held->data)
        return bfp8_fail(BFP8_ERR_NOT_FOUND, "%s: no %s scales on %s (prepare the weight first)", what,
                         bfp8_scale_layout_name(layout), bfp8_device_name(device));
    *q = device == BFP8_DEVICE_CUDA ? s->q_device : s->q_host;
    *scales = *held;
    return BFP8_OK;
}

void bfp8_weight_store_release(bfp8_weight_store *s) {
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
        free(s->host_scales[l].data);
        if (s->device_scales[l].data) bfp8_cuda_free(s->device_scales[l].data);
    }
    if (s->q_device) bfp8_cuda_free(s->q_device);
    free(s->q_host);
}
