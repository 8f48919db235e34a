/* Grouped prepared weights: G weights [n, k] in one buffer [G, n, k] with their scales (G matrices back to back
 * per layout), held on the host and, once prepared for a CUDA backend, on the device; and the loading of one MoE
 * layer's experts from a DeepSeek checkpoint. */
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct bfp8_grouped_weight {
    int64_t groups, n, k;
    bfp8_scale_format format;
    uint8_t *q_host;                            /* [groups, n, k], always held */
    bfp8_scales host_scales[BFP8_LAYOUT_COUNT]; /* one group's descriptor; .data (NULL: not held) holds G */
    uint8_t *q_device;
    bfp8_scales device_scales[BFP8_LAYOUT_COUNT];
};

static int64_t row_blocks(const bfp8_grouped_weight *w) { return bfp8_ceil_div(w->n, BFP8_BLOCK); }
static int64_t kblocks_of(const bfp8_grouped_weight *w) { return bfp8_ceil_div(w->k, BFP8_BLOCK); }

/* Bytes of all G matrices in `layout` (0 with an error set when that overflows). */
static size_t all_scale_bytes(const bfp8_grouped_weight *w, bfp8_scale_layout layout) {
    size_t one = bfp8_scales_bytes(layout, row_blocks(w), kblocks_of(w));
    int64_t total;
    if (!bfp8_mul_ok((int64_t)one, w->groups, &total) || (uint64_t)total > (uint64_t)SIZE_MAX) {
        bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "grouped weight: %" PRId64 " scale matrices overflow", w->groups);
        return 0;
    }
    return (size_t)total;
}

static bfp8_status weight_alloc(bfp8_grouped_weight **out, int64_t groups, int64_t n, int64_t k,
                                bfp8_scale_format format) {
    int64_t rows;
    size_t q_bytes;
    BFP8_CHECK_ARG(groups >= 1, "grouped weight: groups=%" PRId64 " (at least 1)", groups);
    BFP8_CHECK_ARG(bfp8_mul_ok(groups, n, &rows), "grouped weight: groups x n overflows");
    BFP8_TRY(bfp8_check_matrix("grouped weight", rows, k, 1, &q_bytes));
    BFP8_CHECK_ARG(format >= 0 && format < BFP8_SCALE_FORMAT_COUNT, "grouped weight: unknown scale format %d",
                   (int)format);
    bfp8_grouped_weight *w = calloc(1, sizeof *w);
    if (!w) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped weight: out of memory");
    *w = (bfp8_grouped_weight){.groups = groups, .n = n, .k = k, .format = format};
    w->q_host = malloc(q_bytes ? q_bytes : 1);
    if (!w->q_host) {
        free(w);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped weight: cannot allocate %zu bytes", q_bytes);
    }
    *out = w;
    return BFP8_OK;
}

/* A zeroed host buffer for all G matrices in `layout`, adopted as held. */
static bfp8_status adopt_host_layout(bfp8_grouped_weight *w, bfp8_scale_layout layout) {
    BFP8_TRY(bfp8_scales_init(&w->host_scales[layout], w->format, layout, row_blocks(w), kblocks_of(w), NULL));
    size_t bytes = all_scale_bytes(w, layout);
    if (!bytes && row_blocks(w) * kblocks_of(w) > 0) return BFP8_ERR_INVALID_ARGUMENT;
    w->host_scales[layout].data = calloc(1, bytes ? bytes : 1);
    if (!w->host_scales[layout].data)
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped weight: cannot allocate %zu bytes of scales", bytes);
    return BFP8_OK;
}

/* Group g's matrix of a descriptor that describes one of G. */
static bfp8_scales group_view(const bfp8_scales *s, int64_t g) {
    bfp8_scales v = *s;
    v.data = (char *)s->data + (size_t)g * bfp8_grouped_scale_stride(s);
    return v;
}

/* Makes sure the host holds the scales in `layout`, converting each group from a held layout. */
static bfp8_status hold_host_layout(bfp8_grouped_weight *w, bfp8_scale_layout layout) {
    if (w->host_scales[layout].data) return BFP8_OK;
    const bfp8_scales *src = NULL;
    for (int l = 0; l < BFP8_LAYOUT_COUNT && !src; l++)
        if (w->host_scales[l].data) src = &w->host_scales[l];
    BFP8_CHECK_ARG(src, "grouped weight holds no scales");
    BFP8_TRY(adopt_host_layout(w, layout));
    for (int64_t g = 0; g < w->groups; g++) {
        bfp8_scales from = group_view(src, g), to = group_view(&w->host_scales[layout], g);
        bfp8_status st = bfp8_scales_convert(&from, &to);
        if (st != BFP8_OK) {
            free(w->host_scales[layout].data);
            w->host_scales[layout].data = NULL;
            return st;
        }
    }
    return BFP8_OK;
}

bfp8_status bfp8_grouped_weight_create(const uint8_t *q, int64_t groups, int64_t n,
                                       int64_t k, const bfp8_scales *scales, bfp8_grouped_weight **out) {
    BFP8_CHECK_ARG(out, "grouped_weight_create: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(scales, "grouped_weight_create: scales is NULL");
    bfp8_grouped_weight *w;
    BFP8_TRY(weight_alloc(&w, groups, n, k, scales->format));
    const size_t q_bytes = (size_t)(groups * n * k);
    bfp8_status st = bfp8_check_scales("grouped_weight_create: scales", scales, row_blocks(w), kblocks_of(w));
    if (st == BFP8_OK && !q && q_bytes) st = bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "grouped_weight_create: q is NULL");
    if (st == BFP8_OK) st = adopt_host_layout(w, scales->layout);
    if (st == BFP8_OK) {
        size_t bytes = all_scale_bytes(w, scales->layout);
        if (bytes && !scales->data) st = bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "grouped_weight_create: scale data is NULL");
        else if (bytes) memcpy(w->host_scales[scales->layout].data, scales->data, bytes);
    }
    if (st == BFP8_OK && q_bytes) memcpy(w->q_host, q, q_bytes);
    /* Row-major as well: the form the reference and CPU read. */
    if (st == BFP8_OK) st = hold_host_layout(w, BFP8_LAYOUT_ROW_MAJOR);
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
    BFP8_TRY(weight_alloc(&w, groups, n, k, format));
    bfp8_status st = adopt_host_layout(w, BFP8_LAYOUT_ROW_MAJOR);
    int64_t bad = 0;
    for (int64_t g = 0; g < groups && st == BFP8_OK; g++) {
        int64_t group_bad = 0;
        bfp8_scales s = group_view(&w->host_scales[BFP8_LAYOUT_ROW_MAJOR], g);
        const void *src = (const char *)wdata + (size_t)(g * n * k) * bfp8_dtype_size(w_dtype);
        st = bfp8_quantize_weight(src, w_dtype, n, k, w->q_host + g * n * k, &s, &group_bad);
        bad += group_bad;
    }
    if (st != BFP8_OK) {
        bfp8_grouped_weight_free(w);
        return st;
    }
    if (nonfinite) *nonfinite = bad;
    *out = w;
    return BFP8_OK;
}

/* Uploads q (once) and the scales of one layout to the device. */
static bfp8_status hold_device_layout(bfp8_grouped_weight *w, bfp8_scale_layout layout) {
    if (w->device_scales[layout].data) return BFP8_OK;
    BFP8_TRY(hold_host_layout(w, layout));
    const size_t q_bytes = (size_t)(w->groups * w->n * w->k);
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
    const size_t bytes = all_scale_bytes(w, layout);
    void *s_dev;
    BFP8_TRY(bfp8_cuda_malloc(bytes ? bytes : 1, &s_dev));
    bfp8_status st = bfp8_cuda_upload(s_dev, w->host_scales[layout].data, bytes);
    if (st != BFP8_OK) {
        bfp8_cuda_free(s_dev);
        return st;
    }
    w->device_scales[layout] = w->host_scales[layout];
    w->device_scales[layout].data = s_dev;
    return BFP8_OK;
}

/* The form one backend's grouped GEMM consumes; a backend without one, or whose layouts cannot hold this format,
 * is left alone (dispatch then says why). */
static bfp8_status prepare_for(bfp8_grouped_weight *w, const bfp8_backend *b) {
    if (!b->grouped_gemm || !b->caps.grouped_layouts) return BFP8_OK;
    const uint32_t usable = b->caps.b_layouts & bfp8_scale_layouts_for(w->format);
    if (!usable) return BFP8_OK;
    const bool on_device = b->caps.device == BFP8_DEVICE_CUDA;
    const bfp8_scales *held = on_device ? w->device_scales : w->host_scales;
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++)
        if ((usable & BFP8_BIT(l)) && held[l].data) return BFP8_OK;
    const bfp8_scale_layout layout = bfp8_first_layout(usable);
    return on_device ? hold_device_layout(w, layout) : hold_host_layout(w, layout);
}

bfp8_status bfp8_grouped_weight_prepare(bfp8_grouped_weight *w, bfp8_dispatcher *d, const char *backend_name) {
    BFP8_CHECK_ARG(w, "grouped_weight_prepare: weight is NULL");
    if (!d) d = bfp8_dispatcher_default();
    if (!d) return BFP8_ERR_UNSUPPORTED;
    if (backend_name) {
        const bfp8_backend *b = bfp8_dispatcher_find(d, backend_name);
        if (!b) return bfp8_fail(BFP8_ERR_NOT_FOUND, "grouped_weight_prepare: no backend named '%s'", backend_name);
        return prepare_for(w, b);
    }
    for (size_t i = 0; i < bfp8_dispatcher_count(d); i++) BFP8_TRY(prepare_for(w, bfp8_dispatcher_at(d, i)));
    return BFP8_OK;
}

bfp8_status bfp8_grouped_weight_info_get(const bfp8_grouped_weight *w, bfp8_grouped_weight_info *out) {
    BFP8_CHECK_ARG(w && out, "grouped_weight_info: NULL argument");
    *out = (bfp8_grouped_weight_info){.groups = w->groups, .n = w->n, .k = w->k, .scale_format = w->format};
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
        if (w->host_scales[l].data) out->host_layouts |= BFP8_BIT(l);
        if (w->device_scales[l].data) out->device_layouts |= BFP8_BIT(l);
    }
    return BFP8_OK;
}

bfp8_status bfp8_grouped_weight_view(const bfp8_grouped_weight *w, bfp8_device device, bfp8_scale_layout layout,
                                     const uint8_t **q, bfp8_scales *scales) {
    BFP8_CHECK_ARG(w && q && scales, "grouped_weight_view: NULL argument");
    BFP8_CHECK_ARG(device >= 0 && device < BFP8_DEVICE_COUNT, "grouped_weight_view: unknown device %d", (int)device);
    BFP8_CHECK_ARG(layout >= 0 && layout < BFP8_LAYOUT_COUNT, "grouped_weight_view: unknown layout %d", (int)layout);
    const bfp8_scales *held = device == BFP8_DEVICE_CUDA ? &w->device_scales[layout] : &w->host_scales[layout];
    if (!held->data)
        return bfp8_fail(BFP8_ERR_NOT_FOUND, "grouped_weight_view: no %s scales on %s (prepare the weight first)",
                         bfp8_scale_layout_name(layout), bfp8_device_name(device));
    *q = device == BFP8_DEVICE_CUDA ? w->q_device : w->q_host;
    *scales = *held;
    return BFP8_OK;
}

void bfp8_grouped_weight_free(bfp8_grouped_weight *w) {
    if (!w) return;
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
        free(w->host_scales[l].data);
        if (w->device_scales[l].data) bfp8_cuda_free(w->device_scales[l].data);
    }
    if (w->q_device) bfp8_cuda_free(w->q_device);
    free(w->q_host);
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
    BFP8_TRY(weight_alloc(&w, experts, n, k, BFP8_SCALE_FP32)); /* checkpoint scales are plain fp32 */
    bfp8_status st = adopt_host_layout(w, BFP8_LAYOUT_ROW_MAJOR);
    const int64_t part_sblocks = bfp8_ceil_div(part_n, BFP8_BLOCK) * kblocks_of(w);
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
            memcpy(w->q_host + (e * n + i * part_n) * k, parts[i].q->data, (size_t)(part_n * k));
            float *dst = (float *)w->host_scales[BFP8_LAYOUT_ROW_MAJOR].data + (e * nparts + i) * part_sblocks;
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
