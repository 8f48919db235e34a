/* Grouped prepared weights: G weights [n, k] in one buffer [G, n, k] with their scales (G matrices back to back
 * per layout), held in the store shared with dense weights (weight_store.h); and the loading of one MoE layer's
 * experts from a DeepSeek checkpoint. */
#include "weight_store.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct bfp8_grouped_weight {
    bfp8_weight_store store;
};

/* A grouped weight of the given shape with q allocated and no scales. */
static bfp8_status grouped_weight_new(int64_t groups, int64_t n, int64_t k, bfp8_scale_format format,
                                     bfp8_grouped_weight **out) {
    bfp8_grouped_weight *w = calloc(1, sizeof *w);
    if (!w) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped weight: out of memory");
    bfp8_status st = bfp8_weight_store_init(&w->store, "grouped weight", groups, n, k, format);
    if (st != BFP8_OK) {
        bfp8_grouped_weight_free(w);
        return st;
    }
    *out = w;
    return BFP8_OK;
}

bfp8_status bfp8_grouped_weight_create(const uint8_t *q, int64_t groups, int64_t n,
                                       int64_t k, const bfp8_scales *scales, bfp8_grouped_weight **out) {
    BFP8_CHECK_ARG(out, "grouped_weight_create: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(scales, "grouped_weight_create: scales is NULL");
    bfp8_grouped_weight *w;
    BFP8_TRY(grouped_weight_new(groups, n, k, scales->format, &w));
    bfp8_status st = bfp8_weight_store_copy(&w->store, "grouped_weight_create", q, scales);
    /* A UE8M0 claim is checked, not trusted, in every group (as bfp8_weight_create does): a kernel fed UE8M0 may
     * keep a scale's exponent alone, and the packed form rounds it up. */
    for (int64_t g = 0; g < groups && st == BFP8_OK && scales->format == BFP8_SCALE_UE8M0; g++) {
        char what[64];
        bfp8_scales sg = *scales;
        if (g) sg.data = (char *)scales->data + (size_t)g * bfp8_grouped_scale_stride(scales);
        snprintf(what, sizeof what, "grouped_weight_create: group %" PRId64, g);
        st = bfp8_check_ue8m0_scales(what, &sg);
    }
    if (st != BFP8_OK) {
        bfp8_grouped_weight_free(w);
        return st;
    }
    *out = w;
    return BFP8_OK;
}

bfp8_status bfp8_grouped_weight_quantize(const void *wdata, bfp8_dtype w_dtype,
                                         int64_t groups, int64_t n, int64_t k, bfp8_scale_format format, bfp8_grouped_weight **out,
                                         int64_t *nonfinite) {
    BFP8_CHECK_ARG(out, "grouped_weight_quantize: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(bfp8_is_float_dtype(w_dtype), "grouped_weight_quantize: dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(w_dtype));
    BFP8_CHECK_ARG(wdata || n == 0 || k == 0, "grouped_weight_quantize: w is NULL");
    bfp8_grouped_weight *w;
    BFP8_TRY(grouped_weight_new(groups, n, k, format, &w));
    int64_t bad;
    bfp8_status st = bfp8_weight_store_quantize(&w->store, wdata, w_dtype, &bad);
    if (st != BFP8_OK) {
        bfp8_grouped_weight_free(w);
        return st;
    }
    if (nonfinite) *nonfinite = bad;
    *out = w;
    return BFP8_OK;
}

bfp8_status bfp8_grouped_weight_prepare(bfp8_grouped_weight *w, bfp8_dispatcher *d, const char *backend_name) {
    BFP8_CHECK_ARG(w, "grouped_weight_prepare: weight is NULL");
    return bfp8_weight_store_prepare(&w->store, "grouped_weight_prepare", d, backend_name, true);
}

bfp8_status bfp8_grouped_weight_info_get(const bfp8_grouped_weight *w, bfp8_grouped_weight_info *out) {
    BFP8_CHECK_ARG(w && out, "grouped_weight_info: NULL argument");
    *out = (bfp8_grouped_weight_info){.groups = w->store.groups, .n = w->store.n, .k = w->store.k,
                                      .scale_format = w->store.format};
    bfp8_weight_store_layouts(&w->store, &out->host_layouts, &out->device_layouts);
    return BFP8_OK;
}

bfp8_status bfp8_grouped_weight_view(const bfp8_grouped_weight *w, bfp8_device device, bfp8_scale_layout layout,
                                     const uint8_t **q, bfp8_scales *scales) {
    BFP8_CHECK_ARG(w, "grouped_weight_view: NULL argument");
    return bfp8_weight_store_view(&w->store, "grouped_weight_view", device, layout, q, scales);
}

void bfp8_grouped_weight_free(bfp8_grouped_weight *w) {
    if (!w) return;
    bfp8_weight_store_release(&w->store);
    free(w);
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Loading a DeepSeek MoE layer's routed experts                                                                 */
/* ------------------------------------------------------------------------------------------------------------ */

static const bfp8_tensor *find_in(const bfp8_safetensors *const *files, size_t count, const char *name) {
    for (size_t i = 0; i < count; i++) {
        const bfp8_tensor *t = files[i] ? bfp8_safetensors_find(files[i], name) : NULL;
        if (t) return t;
    }
    return NULL;
}

/* One DeepSeek-format weight: NAME F8_E4M3 [n, k] and NAME_scale_inv F32 [ceil(n/128), ceil(k/128)]. */
typedef struct expert_tensor {
    const bfp8_tensor *q, *s;
} expert_tensor;

static bfp8_status find_weight(const bfp8_safetensors *const *files, size_t count, const char *name,
                               expert_tensor *out) {
    char scale_name[512];
    out->q = find_in(files, count, name);
    if (!out->q) return bfp8_fail(BFP8_ERR_NOT_FOUND, "load experts: no tensor '%s'", name);
    snprintf(scale_name, sizeof scale_name, "%s_scale_inv", name);
    out->s = find_in(files, count, scale_name);
    if (!out->s)
        return bfp8_fail(BFP8_ERR_NOT_FOUND, "load experts: no tensor '%s' (DeepSeek naming: the weight's "
                         "dequantization scales)", scale_name);
    const bfp8_tensor *q = out->q, *s = out->s;
    if (q->dtype != BFP8_DTYPE_E4M3 || q->ndim != 2)
        return bfp8_fail(BFP8_ERR_FORMAT, "load experts: '%s' must be a 2-D F8_E4M3 tensor, got %s with %d dims", name,
                         bfp8_dtype_name(q->dtype), q->ndim);
    const int64_t nb = bfp8_ceil_div(q->shape[0], BFP8_BLOCK), kb = bfp8_ceil_div(q->shape[1], BFP8_BLOCK);
    if (s->dtype != BFP8_DTYPE_F32 || s->ndim != 2 || s->shape[0] != nb || s->shape[1] != kb)
        return bfp8_fail(BFP8_ERR_FORMAT, "load experts: '%s' must be F32 [%" PRId64 ", %" PRId64 "] for a [%" PRId64
                         ", %" PRId64 "] weight, got %s with %d dims", scale_name, nb, kb, q->shape[0], q->shape[1],
                         bfp8_dtype_name(s->dtype), s->ndim);
    return BFP8_OK;
}

static void expert_name(char *buf, size_t size, int64_t layer, int64_t e, const char *proj) {
    snprintf(buf, size, "model.layers.%" PRId64 ".mlp.experts.%" PRId64 ".%s.weight", layer, e, proj);
}

/* The parts of expert e (gate then up, or down alone), each checked against the first expert's shape. */
static bfp8_status expert_parts(const bfp8_safetensors *const *files, size_t count, int64_t layer, int64_t e,
                                bfp8_expert_proj proj, expert_tensor parts[2], int *nparts) {
    static const char *const names[] = {"gate_proj", "up_proj", "down_proj"};
    char name[256];
    *nparts = proj == BFP8_EXPERT_GATE_UP ? 2 : 1;
    for (int i = 0; i < *nparts; i++) {
        expert_name(name, sizeof name, layer, e, names[proj == BFP8_EXPERT_GATE_UP ? i : 2]);
        BFP8_TRY(find_weight(files, count, name, &parts[i]));
    }
    if (*nparts == 2 && (parts[0].q->shape[0] != parts[1].q->shape[0] || parts[0].q->shape[1] != parts[1].q->shape[1]))
        return bfp8_fail(BFP8_ERR_FORMAT, "load experts: expert %" PRId64 " of layer %" PRId64 ": gate_proj [%" PRId64
                         ", %" PRId64 "] and up_proj [%" PRId64 ", %" PRId64 "] differ", e, layer, parts[0].q->shape[0],
                         parts[0].q->shape[1], parts[1].q->shape[0], parts[1].q->shape[1]);
    return BFP8_OK;
}

bfp8_status bfp8_grouped_weight_load_experts(const bfp8_safetensors *const *files, size_t count, int64_t layer,
                                             bfp8_expert_proj proj, int64_t experts, bfp8_grouped_weight **out) {
    BFP8_CHECK_ARG(out, "load experts: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(files && count > 0, "load experts: no files");
    BFP8_CHECK_ARG(proj == BFP8_EXPERT_GATE_UP || proj == BFP8_EXPERT_DOWN, "load experts: unknown projection %d",
                   (int)proj);
    BFP8_CHECK_ARG(layer >= 0 && experts >= 0, "load experts: layer %" PRId64 " and experts %" PRId64 " must be >= 0",
                   layer, experts);
    expert_tensor first[2];
    int nparts;
    BFP8_TRY(expert_parts(files, count, layer, 0, proj, first, &nparts));
    if (experts == 0) {
        /* Count experts 0, 1, ... while their first tensor exists. */
        char name[256];
        const char *probe = proj == BFP8_EXPERT_GATE_UP ? "gate_proj" : "down_proj";
        do expert_name(name, sizeof name, layer, ++experts, probe);
        while (find_in(files, count, name));
    }
    const int64_t part_n = first[0].q->shape[0], k = first[0].q->shape[1];
    if (nparts == 2 && part_n % BFP8_BLOCK)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "load experts: gate/up fusion needs the intermediate size (%" PRId64
                         ") to be a multiple of %d, so that up_proj starts a scale block", part_n, BFP8_BLOCK);
    const int64_t n = part_n * nparts;
    bfp8_grouped_weight *w;
    BFP8_TRY(grouped_weight_new(experts, n, k, BFP8_SCALE_FP32, &w)); /* checkpoint scales are plain fp32 */
    bfp8_status st = bfp8_weight_store_adopt(&w->store, BFP8_LAYOUT_ROW_MAJOR);
    const int64_t part_sblocks = bfp8_ceil_div(part_n, BFP8_BLOCK) * bfp8_ceil_div(k, BFP8_BLOCK);
    for (int64_t e = 0; e < experts && st == BFP8_OK; e++) {
        expert_tensor parts[2];
        st = expert_parts(files, count, layer, e, proj, parts, &nparts);
        for (int i = 0; i < nparts && st == BFP8_OK; i++) {
            if (parts[i].q->shape[0] != part_n || parts[i].q->shape[1] != k) {
                st = bfp8_fail(BFP8_ERR_FORMAT, "load experts: '%s' is [%" PRId64 ", %" PRId64 "], expert 0's is [%"
                               PRId64 ", %" PRId64 "]", parts[i].q->name, parts[i].q->shape[0], parts[i].q->shape[1],
                               part_n, k);
                break;
            }
            memcpy(w->store.q_host + (e * n + i * part_n) * k, parts[i].q->data, (size_t)(part_n * k));
            float *dst = (float *)w->store.host_scales[BFP8_LAYOUT_ROW_MAJOR].data + (e * nparts + i) * part_sblocks;
            memcpy(dst, parts[i].s->data, (size_t)part_sblocks * sizeof(float));
        }
    }
    if (st != BFP8_OK) {
        bfp8_grouped_weight_free(w);
        return st;
    }
    *out = w;
    return BFP8_OK;
}
