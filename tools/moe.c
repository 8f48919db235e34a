/* MoE pieces shared by demo --moe, bench --grouped and bench --model (tools/moe.h). */
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool moe_route(moe_routing *r, test_rng *rng) {
    const int64_t G = r->experts, picks = r->tokens * r->top_k;
    r->choice = malloc(sizeof(int32_t) * (size_t)(picks ? picks : 1));
    r->gate = malloc(sizeof(float) * (size_t)(picks ? picks : 1));
    double *weight = malloc(sizeof(double) * (size_t)G);
    bool *taken = calloc((size_t)G, sizeof *taken);
    const bool ok = r->choice && r->gate && weight && taken;
    if (ok) {
        double total = 0;
        for (int64_t g = 0; g < G; g++) total += weight[g] = pow((double)(g + 1), -r->skew);
        for (int64_t t = 0; t < r->tokens; t++) {
            int32_t *choice = r->choice + t * r->top_k;
            float *gate = r->gate + t * r->top_k;
            double left = total, gsum = 0;
            for (int64_t j = 0; j < r->top_k; j++) {
                const double u = (double)(test_rng_u64(rng) >> 11) * 0x1p-53 * left;
                double acc = 0;
                int32_t e = -1;
                for (int64_t g = 0; g < G; g++) {
                    if (taken[g]) continue;
                    e = (int32_t)g; /* the last one left when rounding leaves u beyond the sum */
                    if ((acc += weight[g]) > u) break;
                }
                taken[e] = true;
                left -= weight[e];
                choice[j] = e;
                gate[j] = expf(test_rng_normal(rng, 1.0f));
                gsum += gate[j];
            }
            for (int64_t j = 0; j < r->top_k; j++) {
                gate[j] /= (float)gsum;
                taken[choice[j]] = false;
            }
        }
    }
    free(weight);
    free(taken);
    return ok;
}

bool moe_lay_out(moe_routing *r) {
    const int64_t G = r->experts, picks = r->tokens * r->top_k;
    int64_t *next = calloc((size_t)G, sizeof *next);
    r->counts = calloc((size_t)G, sizeof *r->counts);
    r->first_row = malloc(sizeof(int64_t) * (size_t)G);
    r->slot = malloc(sizeof(int64_t) * (size_t)(picks ? picks : 1));
    if (!next || !r->counts || !r->first_row || !r->slot) return free(next), false;
    for (int64_t i = 0; i < picks; i++) r->counts[r->choice[i]]++;
    int64_t rows = 0;
    r->busiest = r->active = 0;
    for (int64_t g = 0; g < G; g++) {
        if (r->counts[g] > r->busiest) r->busiest = r->counts[g];
        r->active += r->counts[g] > 0;
        r->first_row[g] = rows;
        rows += cli_round_up(r->counts[g], 128);
    }
    if (r->layout == BFP8_GROUPED_MASKED) {
        r->m = cli_round_up(r->busiest > 0 ? r->busiest : 1, 128);
        r->rows = G * r->m;
        for (int64_t g = 0; g < G; g++) r->first_row[g] = g * r->m;
    } else {
        r->m = r->rows = rows;
    }
    r->m_indices = malloc(sizeof(int32_t) * (size_t)(r->m + 1));
    if (!r->m_indices) return free(next), false;
    for (int64_t i = 0; i < r->m; i++) r->m_indices[i] = -1;
    memcpy(next, r->first_row, sizeof(int64_t) * (size_t)G);
    for (int64_t i = 0; i < picks; i++) {
        const int32_t e = r->choice[i];
        r->slot[i] = next[e]++;
        if (r->layout == BFP8_GROUPED_CONTIGUOUS) r->m_indices[r->slot[i]] = e;
    }
    free(next);
    return true;
}

void moe_routing_free(moe_routing *r) {
    free(r->choice), free(r->gate), free(r->counts), free(r->first_row), free(r->m_indices), free(r->slot);
    r->choice = r->m_indices = r->counts = NULL;
    r->gate = NULL;
    r->first_row = r->slot = NULL;
}

bfp8_status moe_weight_prepare(bfp8_dispatcher *d, bfp8_device device, bfp8_weight *dense,
                               bfp8_grouped_weight *grouped) {
    for (size_t i = 0; i < bfp8_dispatcher_count(d); i++) {
        const bfp8_backend *b = bfp8_dispatcher_at(d, i);
        if (b->caps.device != device && strcmp(b->name, "ref") != 0) continue;
        CLI_TRY(grouped ? bfp8_grouped_weight_prepare(grouped, d, b->name) : bfp8_weight_prepare(dense, d, b->name));
    }
    return BFP8_OK;
}

/* Row-major host scales, `mats` matrices of `rows` rows, converted to `layout` and put in c's buffers. */
static bfp8_status put_scales(moe_call *c, const float *rm, bfp8_scale_format format, int64_t mats, int64_t rows,
                              int64_t kblocks, bfp8_scale_layout layout, bfp8_scales *out) {
    const size_t one = bfp8_scales_bytes(layout, rows, kblocks);
    char *buf = calloc(1, one * (size_t)mats + 1);
    if (!buf) return BFP8_ERR_OUT_OF_MEMORY;
    bfp8_status st = BFP8_OK;
    for (int64_t i = 0; i < mats && st == BFP8_OK; i++) {
        bfp8_scales src, dst;
        bfp8_scales_init(&src, format, BFP8_LAYOUT_ROW_MAJOR, rows, kblocks, (void *)(rm + i * rows * kblocks));
        bfp8_scales_init(&dst, format, layout, rows, kblocks, buf + (size_t)i * one);
        st = bfp8_scales_convert(&src, &dst);
    }
    void *data = NULL;
    if (st == BFP8_OK) st = test_buffers_put(&c->bufs, buf, one * (size_t)mats, &data);
    free(buf);
    if (st == BFP8_OK) st = bfp8_scales_init(out, format, layout, rows, kblocks, data);
    return st;
}

bfp8_status moe_call_init(moe_call *c, bfp8_dispatcher *d, const bfp8_grouped_weight *w, const moe_call_spec *spec,
                          char *why, size_t why_size) {
    bfp8_grouped_weight_info wi;
    *c = (moe_call){.bufs = {.device = spec->device}};
    why[0] = '\0';
    bfp8_status st = bfp8_grouped_weight_info_get(w, &wi);
    if (st != BFP8_OK) return st;
    const bool masked = spec->layout == BFP8_GROUPED_MASKED;
    const int64_t kb = (wi.k + 127) / 128;
    c->rows = masked ? wi.groups * spec->m : spec->m;
    c->g = (bfp8_grouped_gemm_args){.layout = spec->layout, .groups = wi.groups, .m = spec->m, .n = wi.n, .k = wi.k,
                                    .expected_m = spec->expected_m, .y_dtype = spec->y_dtype,
                                    .device = spec->device};

    /* The problem, posed on the host operands, the output and one of the weight's views (the problem's checks
     * refuse a y that overlaps an operand, as the call's do), with every layout of the format on offer for A (the
     * codes are converted below) and every layout the weight holds on the device for B. */
    st = test_buffers_put(&c->bufs, NULL, (size_t)(c->rows * wi.n) * bfp8_dtype_size(spec->y_dtype), &c->g.y);
    const uint32_t held = spec->device == BFP8_DEVICE_CUDA ? wi.device_layouts : wi.host_layouts;
    int any = 0;
    while (any < BFP8_LAYOUT_COUNT - 1 && !(held & BFP8_BIT(any))) any++;
    bfp8_grouped_gemm_args probe = c->g;
    probe.a = spec->qa;
    probe.m_indices = spec->m_indices, probe.masked_m = spec->masked_m;
    bfp8_scales_init(&probe.a_scales, wi.scale_format, BFP8_LAYOUT_ROW_MAJOR, spec->m, kb, (void *)spec->sa);
    if (st == BFP8_OK)
        st = bfp8_grouped_weight_view(w, spec->device, (bfp8_scale_layout)any, &probe.b, &probe.b_scales);
    bfp8_problem p;
    bfp8_decision dec;
    bfp8_scale_layout la, lb;
    if (st == BFP8_OK && (st = bfp8_problem_from_grouped_gemm(&probe, &p)) == BFP8_OK) {
        p.a_layouts = bfp8_scale_layouts_for(wi.scale_format);
        p.b_layouts = spec->device == BFP8_DEVICE_CUDA ? wi.device_layouts : wi.host_layouts;
        if ((st = bfp8_dispatcher_select(d, &p, &dec)) != BFP8_OK)
            snprintf(why, why_size, "%s", dec.reason[0] ? dec.reason : bfp8_last_error());
    }
    if (st == BFP8_OK) {
        c->backend = dec.backend;
        if ((st = bfp8_backend_layouts(c->backend, &p, &la, &lb)) != BFP8_OK)
            snprintf(why, why_size, "%s", bfp8_last_error());
    }
    if (st == BFP8_OK) st = bfp8_grouped_weight_view(w, spec->device, lb, &c->g.b, &c->g.b_scales);
    if (st == BFP8_OK)
        st = put_scales(c, spec->sa, wi.scale_format, masked ? wi.groups : 1, spec->m, kb, la, &c->g.a_scales);
    void *p_a = NULL, *p_idx = NULL;
    if (st == BFP8_OK) st = test_buffers_put(&c->bufs, spec->qa, (size_t)(c->rows * wi.k), &p_a);
    if (st == BFP8_OK)
        st = masked ? test_buffers_put(&c->bufs, spec->masked_m, sizeof(int32_t) * (size_t)wi.groups, &p_idx)
                    : test_buffers_put(&c->bufs, spec->m_indices, sizeof(int32_t) * (size_t)spec->m, &p_idx);
    c->g.a = p_a;
    if (masked) c->g.masked_m = p_idx;
    else c->g.m_indices = p_idx;
    if (st != BFP8_OK) {
        if (!why[0]) snprintf(why, why_size, "%s", st == BFP8_ERR_OUT_OF_MEMORY ? "out of memory" : bfp8_last_error());
        moe_call_free(c);
    }
    return st;
}

void moe_call_free(moe_call *c) { test_buffers_free(&c->bufs); }
