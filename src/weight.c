/* Prepared weights: the fp8 data and its scales, with the scale format and every layout held (host and device)
 * as explicit fields, in the store shared with grouped weights (weight_store.h, here with G = 1). A dense weight
 * adds the non-finite counts a linear call records. */
#include "weight_store.h"

#include <stdlib.h>

struct bfp8_weight {
    bfp8_weight_store store;
    /* Counted once when the weight is made, so that each call records them without a scan. */
    int64_t nonfinite_codes, nonfinite_scales;
};

/* A weight of the given shape with q allocated and no scales. */
static bfp8_status weight_new(int64_t n, int64_t k, bfp8_scale_format format, bfp8_weight **out) {
    bfp8_weight *w = calloc(1, sizeof *w);
    if (!w) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight: out of memory");
    bfp8_status st = bfp8_weight_store_init(&w->store, "weight", 1, n, k, format);
    if (st != BFP8_OK) {
        bfp8_weight_free(w);
        return st;
    }
    *out = w;
    return BFP8_OK;
}

bfp8_status bfp8_weight_create(const uint8_t *q, int64_t n, int64_t k, const bfp8_scales *scales,
                               bfp8_weight **out) {
    BFP8_CHECK_ARG(out, "weight_create: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(scales, "weight_create: scales is NULL");
    bfp8_weight *w;
    BFP8_TRY(weight_new(n, k, scales->format, &w));
    bfp8_status st = bfp8_weight_store_copy(&w->store, "weight_create", q, scales);
    /* A UE8M0 claim is checked, not trusted: kernels fed UE8M0 may treat a scale as its exponent alone. */
    if (st == BFP8_OK) st = bfp8_check_ue8m0_scales("weight_create", scales);
    if (st != BFP8_OK) {
        bfp8_weight_free(w);
        return st;
    }
    w->nonfinite_codes = bfp8_count_nan_codes(w->store.q_host, n * k);
    w->nonfinite_scales = bfp8_count_nonfinite_scales(scales);
    *out = w;
    return BFP8_OK;
}

bfp8_status bfp8_weight_quantize(const void *wdata, bfp8_dtype w_dtype, int64_t n, int64_t k,
                                 bfp8_scale_format format, bfp8_weight **out, int64_t *nonfinite) {
    BFP8_CHECK_ARG(out, "weight_quantize: out is NULL");
    *out = NULL;
    bfp8_weight *w;
    BFP8_TRY(weight_new(n, k, format, &w));
    int64_t bad; /* each non-finite input became one NaN code; the scales are finite */
    bfp8_status st = bfp8_weight_store_quantize(&w->store, wdata, w_dtype, &bad);
    if (st != BFP8_OK) {
        bfp8_weight_free(w);
        return st;
    }
    w->nonfinite_codes = bad;
    if (nonfinite) *nonfinite = bad;
    *out = w;
    return BFP8_OK;
}

bfp8_status bfp8_weight_prepare(bfp8_weight *w, bfp8_dispatcher *d, const char *backend_name) {
    BFP8_CHECK_ARG(w, "weight_prepare: weight is NULL");
    return bfp8_weight_store_prepare(&w->store, "weight_prepare", d, backend_name, false);
}

bfp8_status bfp8_weight_info_get(const bfp8_weight *w, bfp8_weight_info *out) {
    BFP8_CHECK_ARG(w && out, "weight_info: NULL argument");
    *out = (bfp8_weight_info){.n = w->store.n, .k = w->store.k, .scale_format = w->store.format,
                              .nonfinite_codes = w->nonfinite_codes, .nonfinite_scales = w->nonfinite_scales};
    bfp8_weight_store_layouts(&w->store, &out->host_layouts, &out->device_layouts);
    return BFP8_OK;
}

bfp8_status bfp8_weight_view(const bfp8_weight *w, bfp8_device device, bfp8_scale_layout layout,
                             const uint8_t **q, bfp8_scales *scales) {
    BFP8_CHECK_ARG(w, "weight_view: NULL argument");
    return bfp8_weight_store_view(&w->store, "weight_view", device, layout, q, scales);
}

void bfp8_weight_free(bfp8_weight *w) {
    if (!w) return;
    bfp8_weight_store_release(&w->store);
    free(w);
}
