/* Prepared weights: the fp8 data and its scales, with the scale format and every layout held (host and device)
 * as explicit fields. Preparing for a backend adds the forms it consumes and never drops one a fallback needs. */
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct bfp8_weight {
    int64_t n, k;
    bfp8_scale_format format;
    uint8_t *q_host;                                /* [n, k], always held */
    bfp8_scales host_scales[BFP8_LAYOUT_COUNT];     /* .data == NULL: not held in that layout */
    uint8_t *q_device;                              /* NULL until prepared for a CUDA backend */
    bfp8_scales device_scales[BFP8_LAYOUT_COUNT];
    /* Counted once when the weight is made, so that each call records them without a scan. */
    int64_t nonfinite_codes, nonfinite_scales;
};

static int64_t weight_row_blocks(const bfp8_weight *w) { return bfp8_ceil_div(w->n, BFP8_BLOCK); }
static int64_t weight_kblocks(const bfp8_weight *w) { return bfp8_ceil_div(w->k, BFP8_BLOCK); }

/* Allocates a weight of the given shape with q and no scales. */
static bfp8_status weight_alloc(bfp8_weight **out, int64_t n, int64_t k, bfp8_scale_format format) {
    size_t q_bytes;
    BFP8_TRY(bfp8_check_matrix("weight", n, k, 1, &q_bytes));
    BFP8_CHECK_ARG((unsigned)format < (unsigned)BFP8_SCALE_FORMAT_COUNT, "weight: unknown scale format %d",
                   (int)format);
    bfp8_weight *w = calloc(1, sizeof *w);
    if (!w) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight: out of memory");
    w->n = n;
    w->k = k;
    w->format = format;
    w->q_host = malloc(q_bytes ? q_bytes : 1);
    if (!w->q_host) {
        free(w);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight: cannot allocate %zu bytes", q_bytes);
    }
    *out = w;
    return BFP8_OK;
}

/* Makes sure the host holds the scales in `layout`, converting from a held layout. */
static bfp8_status hold_host_layout(bfp8_weight *w, bfp8_scale_layout layout) {
    if (w->host_scales[layout].data) return BFP8_OK;
    const bfp8_scales *src = NULL;
    for (int l = 0; l < BFP8_LAYOUT_COUNT && !src; l++)
        if (w->host_scales[l].data) src = &w->host_scales[l];
    BFP8_CHECK_ARG(src, "weight holds no scales");
    size_t bytes = bfp8_scales_bytes(layout, weight_row_blocks(w), weight_kblocks(w));
    void *data = calloc(1, bytes ? bytes : 1);
    if (!data) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight: cannot allocate %zu bytes of scales", bytes);
    bfp8_scales dst;
    bfp8_status st = bfp8_scales_init(&dst, w->format, layout, weight_row_blocks(w), weight_kblocks(w), data);
    if (st == BFP8_OK) st = bfp8_scales_convert(src, &dst);
    if (st != BFP8_OK) {
        free(data);
        return st;
    }
    w->host_scales[layout] = dst;
    return BFP8_OK;
}

bfp8_status bfp8_weight_create(const uint8_t *q, int64_t n, int64_t k, const bfp8_scales *scales,
                               bfp8_weight **out) {
    BFP8_CHECK_ARG(out, "weight_create: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(scales, "weight_create: scales is NULL");
    bfp8_weight *w;
    BFP8_TRY(weight_alloc(&w, n, k, scales->format));
    bfp8_status st = bfp8_check_scales("weight_create: scales", scales, weight_row_blocks(w), weight_kblocks(w));
    if (st == BFP8_OK && !q && n * k > 0) st = bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "weight_create: q is NULL");
    /* A UE8M0 claim is checked, not trusted: kernels fed UE8M0 may treat a scale as its exponent alone. */
    if (st == BFP8_OK) st = bfp8_check_ue8m0_scales("weight_create", scales);
    if (st == BFP8_OK) {
        if (n * k > 0) memcpy(w->q_host, q, (size_t)(n * k));
        w->nonfinite_codes = bfp8_count_nan_codes(w->q_host, n * k);
        w->nonfinite_scales = bfp8_count_nonfinite_scales(scales);
        /* Hold the caller's layout as given, plus row-major, the form the reference and CPU read. */
        size_t bytes = bfp8_scales_bytes(scales->layout, weight_row_blocks(w), weight_kblocks(w));
        void *data = malloc(bytes ? bytes : 1);
        if (!data) st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight_create: out of memory");
        else {
            if (bytes) memcpy(data, scales->data, bytes);
            w->host_scales[scales->layout] = *scales;
            w->host_scales[scales->layout].data = data;
            st = hold_host_layout(w, BFP8_LAYOUT_ROW_MAJOR);
        }
    }
    if (st != BFP8_OK) {
        bfp8_weight_free(w);
        return st;
    }
    *out = w;
    return BFP8_OK;
}

bfp8_status bfp8_weight_quantize(const void *wdata, bfp8_dtype w_dtype, int64_t n, int64_t k,
                                 bfp8_scale_format format, bfp8_weight **out, int64_t *nonfinite) {
    BFP8_CHECK_ARG(out, "weight_quantize: out is NULL");
    *out = NULL;
    bfp8_weight *w;
    BFP8_TRY(weight_alloc(&w, n, k, format));
    size_t bytes = bfp8_scales_bytes(BFP8_LAYOUT_ROW_MAJOR, weight_row_blocks(w), weight_kblocks(w));
    void *data = calloc(1, bytes ? bytes : 1);
    bfp8_status st = data ? BFP8_OK : bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight_quantize: out of memory");
    bfp8_scales *s = &w->host_scales[BFP8_LAYOUT_ROW_MAJOR];
    if (st == BFP8_OK) st = bfp8_scales_init(s, format, BFP8_LAYOUT_ROW_MAJOR, weight_row_blocks(w), weight_kblocks(w), data);
    int64_t bad = 0; /* each non-finite input became one NaN code; the scales are finite */
    if (st == BFP8_OK) st = bfp8_quantize_weight(wdata, w_dtype, n, k, w->q_host, s, &bad);
    if (st == BFP8_OK) {
        w->nonfinite_codes = bad;
        if (nonfinite) *nonfinite = bad;
    }
    if (st != BFP8_OK) {
        if (!s->data) free(data);
        bfp8_weight_free(w);
        return st;
    }
    *out = w;
    return BFP8_OK;
}

/* Uploads q (once) and the scales of one layout to the device. */
static bfp8_status hold_device_layout(bfp8_weight *w, bfp8_scale_layout layout) {
    if (w->device_scales[layout].data) return BFP8_OK;
    BFP8_TRY(hold_host_layout(w, layout));
    size_t q_bytes = (size_t)(w->n * w->k);
    if (!w->q_device) {
        void *q_dev;
        BFP8_TRY(bfp8_cuda_malloc(q_bytes ? q_bytes : 1, &q_dev));
        bfp8_status st = bfp8_cuda_upload(q_dev, w->q_host, q_bytes);
        if (st != BFP8_OK) {
            bfp8_cuda_free(q_dev);
            return st;
        }
        w->q_device = q_dev;
    }
    const bfp8_scales *hs = &w->host_scales[layout];
    size_t bytes = bfp8_scales_bytes(layout, hs->rows, hs->kblocks);
    void *s_dev;
    BFP8_TRY(bfp8_cuda_malloc(bytes ? bytes : 1, &s_dev));
    bfp8_status st = bfp8_cuda_upload(s_dev, hs->data, bytes);
    if (st != BFP8_OK) {
        bfp8_cuda_free(s_dev);
        return st;
    }
    w->device_scales[layout] = *hs;
    w->device_scales[layout].data = s_dev;
    return BFP8_OK;
}

/* Gives one backend a form it consumes: a layout in its caps, on its device. A backend whose only layouts
 * cannot hold this weight's format (packed needs UE8M0) is left unprepared; dispatch then says why. */
static bfp8_status prepare_for(bfp8_weight *w, const bfp8_backend *b) {
    uint32_t usable = b->caps.b_layouts & bfp8_scale_layouts_for(w->format);
    if (!usable) return BFP8_OK;
    bool on_device = b->caps.device == BFP8_DEVICE_CUDA;
    const bfp8_scales *held = on_device ? w->device_scales : w->host_scales;
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++)
        if ((usable & BFP8_BIT(l)) && held[l].data) return BFP8_OK;
    bfp8_scale_layout layout = bfp8_first_layout(usable);
    return on_device ? hold_device_layout(w, layout) : hold_host_layout(w, layout);
}

bfp8_status bfp8_weight_prepare(bfp8_weight *w, bfp8_dispatcher *d, const char *backend_name) {
    BFP8_CHECK_ARG(w, "weight_prepare: weight is NULL");
    if (!d) d = bfp8_dispatcher_default();
    if (!d) return BFP8_ERR_UNSUPPORTED;
    if (backend_name) {
        const bfp8_backend *b = bfp8_dispatcher_find(d, backend_name);
        if (!b) return bfp8_fail(BFP8_ERR_NOT_FOUND, "weight_prepare: no backend named '%s'", backend_name);
        return prepare_for(w, b);
    }
    for (size_t i = 0; i < bfp8_dispatcher_count(d); i++) BFP8_TRY(prepare_for(w, bfp8_dispatcher_at(d, i)));
    return BFP8_OK;
}

bfp8_status bfp8_weight_info_get(const bfp8_weight *w, bfp8_weight_info *out) {
    BFP8_CHECK_ARG(w && out, "weight_info: NULL argument");
    *out = (bfp8_weight_info){.n = w->n, .k = w->k, .scale_format = w->format,
                              .nonfinite_codes = w->nonfinite_codes, .nonfinite_scales = w->nonfinite_scales};
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
        if (w->host_scales[l].data) out->host_layouts |= BFP8_BIT(l);
        if (w->device_scales[l].data) out->device_layouts |= BFP8_BIT(l);
    }
    return BFP8_OK;
}

bfp8_status bfp8_weight_view(const bfp8_weight *w, bfp8_device device, bfp8_scale_layout layout,
                             const uint8_t **q, bfp8_scales *scales) {
    BFP8_CHECK_ARG(w && q && scales, "weight_view: NULL argument");
    BFP8_CHECK_ARG(device >= 0 && device < BFP8_DEVICE_COUNT, "weight_view: unknown device %d", (int)device);
    BFP8_CHECK_ARG(layout >= 0 && layout < BFP8_LAYOUT_COUNT, "weight_view: unknown layout %d", (int)layout);
    const bfp8_scales *held = device == BFP8_DEVICE_CUDA ? &w->device_scales[layout] : &w->host_scales[layout];
    if (!held->data)
        return bfp8_fail(BFP8_ERR_NOT_FOUND, "weight_view: no %s scales on %s (prepare the weight first)",
                         bfp8_scale_layout_name(layout), bfp8_device_name(device));
    *q = device == BFP8_DEVICE_CUDA ? w->q_device : w->q_host;
    *scales = *held;
    return BFP8_OK;
}

void bfp8_weight_free(bfp8_weight *w) {
    if (!w) return;
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
        free(w->host_scales[l].data);
        if (w->device_scales[l].data) bfp8_cuda_free(w->device_scales[l].data);
    }
    if (w->q_device) bfp8_cuda_free(w->q_device);
    free(w->q_host);
    free(w);
}
