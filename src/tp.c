/* Tensor parallelism, host side: the shard plan, the local weight, and one rank's share of the layer. The NCCL
 * collectives are in src/backends/cuda/tp_nccl.c (CUDA builds only). */
#include "blockfp8_tp.h"
#include "internal.h"
#include "tp_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char *bfp8_tp_mode_name(bfp8_tp_mode mode) {
    switch (mode) {
    case BFP8_TP_COLUMN: return "column";
    case BFP8_TP_ROW: return "row";
    default: return "?";
    }
}

bfp8_status bfp8_tp_mode_parse(const char *name, bfp8_tp_mode *out) {
    BFP8_CHECK_ARG(name && out, "tp_mode_parse: NULL argument");
    if (strcmp(name, "column") == 0) *out = BFP8_TP_COLUMN;
    else if (strcmp(name, "row") == 0) *out = BFP8_TP_ROW;
    else return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "unknown tensor-parallel mode '%s' (column or row)", name);
    return BFP8_OK;
}

bfp8_status bfp8_shard_plan(int64_t n, int64_t k, bfp8_tp_mode mode, int ranks, int rank, unsigned flags,
                            bfp8_shard *out) {
    BFP8_CHECK_ARG(out, "shard: out is NULL");
    BFP8_CHECK_ARG(mode == BFP8_TP_COLUMN || mode == BFP8_TP_ROW, "shard: unknown mode %d", (int)mode);
    BFP8_CHECK_ARG((flags & ~BFP8_SHARD_SHARE_BLOCKS) == 0, "shard: unknown flags 0x%x", flags);
    BFP8_TRY(bfp8_check_matrix("shard: weight", n, k, 1, NULL));
    BFP8_CHECK_ARG(ranks >= 1, "shard: %d ranks (at least 1)", ranks);
    BFP8_CHECK_ARG(rank >= 0 && rank < ranks, "shard: rank %d is not in [0, %d)", rank, ranks);
    const char *dim_name = mode == BFP8_TP_COLUMN ? "N" : "K";
    const char *unit = mode == BFP8_TP_COLUMN ? "rows" : "columns";
    int64_t dim = mode == BFP8_TP_COLUMN ? n : k;
    if (dim % ranks != 0)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED,
                         "shard: %s-parallel: %s=%" PRId64 " does not split evenly over %d ranks (%" PRId64
                         " %% %d = %" PRId64 ")",
                         bfp8_tp_mode_name(mode), dim_name, dim, ranks, dim, ranks, dim % ranks);
    int64_t slice = dim / ranks;
    /* With every slice a multiple of 128, every boundary falls on a block edge; otherwise rank 1's does not. */
    bool cuts_blocks = ranks > 1 && slice % BFP8_BLOCK != 0;
    bool share = (flags & BFP8_SHARD_SHARE_BLOCKS) != 0;
    if (cuts_blocks && !share)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED,
                         "shard: %s-parallel over %d ranks gives slices of %" PRId64 " %s of %s=%" PRId64
                         ", not a multiple of the 128-wide scale blocks (rank 1 would start inside block %" PRId64
                         "); ask for shared blocks (BFP8_SHARD_SHARE_BLOCKS; CLI --share-blocks; Python "
                         "share_blocks=True) to pad each slice and hold the block it shares with its neighbour",
                         bfp8_tp_mode_name(mode), ranks, slice, unit, dim_name, dim, slice / BFP8_BLOCK);
    bfp8_shard s = {.mode = mode, .rank = rank, .ranks = ranks, .n = n, .k = k};
    s.begin = (int64_t)rank * slice;
    s.end = s.begin + slice;
    s.block_begin = s.begin / BFP8_BLOCK;
    s.lead = s.begin - s.block_begin * BFP8_BLOCK;
    s.n_local = mode == BFP8_TP_COLUMN ? s.lead + slice : n;
    s.k_local = mode == BFP8_TP_ROW ? s.lead + slice : k;
    *out = s;
    return BFP8_OK;
}

/* A shard is a plan of bfp8_shard_plan, unchanged (planning with shared blocks gives the same plan as without
 * wherever that one exists). */
static bfp8_status check_shard(const bfp8_shard *s) {
    BFP8_CHECK_ARG(s, "shard is NULL");
    bfp8_shard again;
    if (bfp8_shard_plan(s->n, s->k, s->mode, s->ranks, s->rank, BFP8_SHARD_SHARE_BLOCKS, &again) != BFP8_OK)
        return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "shard: not a plan of bfp8_shard_plan: %s", bfp8_last_error());
    bool same = again.mode == s->mode && again.rank == s->rank && again.ranks == s->ranks && again.n == s->n &&
                again.k == s->k && again.begin == s->begin && again.end == s->end && again.lead == s->lead &&
                again.block_begin == s->block_begin && again.n_local == s->n_local && again.k_local == s->k_local;
    BFP8_CHECK_ARG(same, "shard: fields changed since bfp8_shard_plan");
    return BFP8_OK;
}

bfp8_status bfp8_weight_shard(const uint8_t *q, const bfp8_scales *scales, const bfp8_shard *shard,
                              bfp8_weight **out) {
    BFP8_CHECK_ARG(out, "weight_shard: out is NULL");
    *out = NULL;
    BFP8_TRY(check_shard(shard));
    const bfp8_shard *s = shard;
    BFP8_CHECK_ARG(scales, "weight_shard: scales is NULL");
    BFP8_TRY(bfp8_check_scales("weight_shard: scales", scales, bfp8_ceil_div(s->n, BFP8_BLOCK),
                               bfp8_ceil_div(s->k, BFP8_BLOCK)));
    /* The whole matrix, as bfp8_weight_create and the loaders check it: every rank refuses the same weight, and the
     * message names the caller's block, not the local copy's. */
    BFP8_TRY(bfp8_check_ue8m0_scales("weight_shard: scales", scales));
    BFP8_CHECK_ARG(q || s->n * s->k == 0, "weight_shard: q is NULL");
    size_t q_bytes;
    BFP8_TRY(bfp8_check_matrix("weight_shard: local weight", s->n_local, s->k_local, 1, &q_bytes));
    int64_t rows = bfp8_ceil_div(s->n_local, BFP8_BLOCK), kblocks = bfp8_ceil_div(s->k_local, BFP8_BLOCK);
    size_t s_bytes = bfp8_scales_bytes(BFP8_LAYOUT_ROW_MAJOR, rows, kblocks);
    uint8_t *ql = calloc(1, q_bytes ? q_bytes : 1); /* the lead stays zero: code 0 is +0.0 */
    float *sl = calloc(1, s_bytes ? s_bytes : 1);
    if (!ql || !sl) {
        free(ql);
        free(sl);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight_shard: cannot allocate the local weight");
    }
    int64_t slice = s->end - s->begin;
    if (s->mode == BFP8_TP_COLUMN) {
        for (int64_t i = 0; i < slice; i++)
            if (s->k) memcpy(ql + (s->lead + i) * s->k, q + (s->begin + i) * s->k, (size_t)s->k);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t kb = 0; kb < kblocks; kb++) sl[r * kblocks + kb] = bfp8_scales_at(scales, s->block_begin + r, kb);
    } else {
        for (int64_t r = 0; r < s->n; r++)
            if (slice) memcpy(ql + r * s->k_local + s->lead, q + r * s->k + s->begin, (size_t)slice);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t kb = 0; kb < kblocks; kb++) sl[r * kblocks + kb] = bfp8_scales_at(scales, r, s->block_begin + kb);
    }
    bfp8_scales local;
    bfp8_status st = bfp8_scales_init(&local, scales->format, BFP8_LAYOUT_ROW_MAJOR, rows, kblocks, sl);
    if (st == BFP8_OK) st = bfp8_weight_create(ql, s->n_local, s->k_local, &local, out);
    free(ql);
    free(sl);
    return st;
}

bfp8_status bfp8_weight_load_shard(const bfp8_safetensors *f, const char *name, const bfp8_weight_load_options *options,
                                   bfp8_tp_mode mode, int ranks, int rank, unsigned flags, bfp8_shard *shard_out,
                                   bfp8_weight **out) {
    BFP8_CHECK_ARG(out, "weight_load_shard: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(f && name && shard_out, "weight_load_shard: NULL argument");
    const uint8_t *q;
    bfp8_scales scales;
    int64_t n, k;
    float *owned;
    BFP8_TRY(bfp8_weight_tensors(f, name, options, &q, &n, &k, &scales, &owned));
    bfp8_status st = bfp8_shard_plan(n, k, mode, ranks, rank, flags, shard_out);
    if (st == BFP8_OK) st = bfp8_weight_shard(q, &scales, shard_out, out);
    free(owned);
    return st;
}

bfp8_status bfp8_tp_traffic_get(const bfp8_shard *shard, int64_t m, bfp8_dtype y_dtype, bfp8_tp_traffic *out) {
    BFP8_CHECK_ARG(out, "tp_traffic: out is NULL");
    BFP8_TRY(check_shard(shard));
    const bfp8_shard *s = shard;
    BFP8_CHECK_ARG(bfp8_is_float_dtype(y_dtype), "tp_traffic: output dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(y_dtype));
    bfp8_dtype dt = s->mode == BFP8_TP_COLUMN ? y_dtype : BFP8_DTYPE_F32;
    /* Column: rank r's local output is lead + slice wide, lead = (r * slice) % 128. The leads repeat with a period
     * that divides 128, so the first min(ranks, 128) ranks hold the largest (not always 127: 0 and 64 for slices
     * of 192, and none at all for one rank). */
    int64_t slice = s->end - s->begin, width = s->n;
    if (s->mode == BFP8_TP_COLUMN) {
        int64_t widest_lead = 0;
        for (int64_t r = 1; r < s->ranks && r < BFP8_BLOCK; r++) {
            int64_t lead = r * (slice % BFP8_BLOCK) % BFP8_BLOCK;
            if (lead > widest_lead) widest_lead = lead;
        }
        width = slice + widest_lead;
    }
    int64_t gathered = s->mode == BFP8_TP_COLUMN ? s->ranks : 1;
    size_t bytes;
    BFP8_TRY(bfp8_check_matrix("tp_traffic: the collective's buffer", m, width * gathered, bfp8_dtype_size(dt), &bytes));
    *out = (bfp8_tp_traffic){.count = m * width, .dtype = dt, .bytes = (int64_t)bytes};
    return BFP8_OK;
}

/* x [m, slice] into the zeroed [m, lead + slice] buffer `padded` at column `lead` (host or device). */
static bfp8_status pad_columns(const bfp8_linear_args *a, const bfp8_shard *s, void *padded) {
    size_t es = bfp8_dtype_size(a->x_dtype);
    size_t src_pitch = (size_t)(s->end - s->begin) * es, dst_pitch = (size_t)s->k_local * es;
    if (a->device == BFP8_DEVICE_CUDA) {
        BFP8_TRY(bfp8_cuda_tp_memset(padded, (size_t)a->m * dst_pitch, a->stream));
        return bfp8_cuda_tp_copy_2d((char *)padded + (size_t)s->lead * es, dst_pitch, a->x, src_pitch, src_pitch,
                                    (size_t)a->m, a->stream);
    }
    memset(padded, 0, (size_t)a->m * dst_pitch);
    for (int64_t r = 0; r < a->m; r++)
        memcpy((char *)padded + (size_t)r * dst_pitch + (size_t)s->lead * es, (const char *)a->x + (size_t)r * src_pitch,
               src_pitch);
    return BFP8_OK;
}

bfp8_status bfp8_tp_linear_local(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_shard *shard,
                                 const bfp8_linear_args *args) {
    BFP8_TRY(check_shard(shard));
    BFP8_CHECK_ARG(w && args, "tp_linear_local: NULL argument");
    const bfp8_shard *s = shard;
    bfp8_weight_info wi;
    BFP8_TRY(bfp8_weight_info_get(w, &wi));
    BFP8_CHECK_ARG(wi.n == s->n_local && wi.k == s->k_local,
                   "tp_linear_local: the weight is [%" PRId64 ", %" PRId64 "], the shard's local weight is [%" PRId64
                   ", %" PRId64 "]", wi.n, wi.k, s->n_local, s->k_local);
    BFP8_CHECK_ARG(!args->bias || bfp8_is_float_dtype(args->bias_dtype),
                   "tp_linear_local: bias dtype %s is not f32, bf16 or f16", bfp8_dtype_name(args->bias_dtype));
    bfp8_linear_args local = *args;
    if (s->mode == BFP8_TP_COLUMN) {
        /* Local output column j is whole column block_begin*128 + j: the bias from there on. */
        if (args->bias)
            local.bias = (const char *)args->bias + (size_t)(s->block_begin * BFP8_BLOCK) * bfp8_dtype_size(args->bias_dtype);
        return bfp8_linear(d, w, &local);
    }
    BFP8_CHECK_ARG(args->y_dtype == BFP8_DTYPE_F32,
                   "tp_linear_local: row-parallel partials are summed in fp32: y must be f32, not %s",
                   bfp8_dtype_name(args->y_dtype));
    BFP8_CHECK_ARG(bfp8_is_float_dtype(args->x_dtype), "tp_linear_local: input dtype %s is not f32, bf16 or f16",
                   bfp8_dtype_name(args->x_dtype));
    if (s->rank != 0) local.bias = NULL;
    if (s->lead == 0 || args->m == 0) return bfp8_linear(d, w, &local);
    size_t bytes;
    /* The caller's x [m, slice] first, so that a bad m is named against it, not against the internal padded copy. */
    size_t es = bfp8_dtype_size(args->x_dtype);
    BFP8_TRY(bfp8_check_matrix("tp_linear_local: x", args->m, s->end - s->begin, es, NULL));
    BFP8_TRY(bfp8_check_matrix("tp_linear_local: padded x", args->m, s->k_local, es, &bytes));
    BFP8_CHECK_ARG(args->x, "tp_linear_local: x is NULL");
    void *padded = NULL;
    if (args->device == BFP8_DEVICE_CUDA) BFP8_TRY(bfp8_cuda_malloc_async(bytes, &padded, args->stream));
    else if (!(padded = malloc(bytes)))
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "tp_linear_local: cannot allocate %zu bytes", bytes);
    bfp8_status st = pad_columns(args, s, padded);
    local.x = padded;
    if (st == BFP8_OK) st = bfp8_linear(d, w, &local);
    if (args->device == BFP8_DEVICE_CUDA) bfp8_cuda_free_async(padded, args->stream);
    else free(padded);
    return st;
}

#ifndef BFP8_WITH_CUDA
bfp8_status bfp8_cuda_tp_memset(void *dst, size_t bytes, void *stream) {
    (void)dst, (void)bytes, (void)stream;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "tensor parallel on cuda: built without CUDA");
}
bfp8_status bfp8_cuda_tp_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                                 size_t height, void *stream) {
    (void)dst, (void)dst_pitch, (void)src, (void)src_pitch, (void)width, (void)height, (void)stream;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "tensor parallel on cuda: built without CUDA");
}
bfp8_status bfp8_tp_linear(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_shard *shard,
                           const bfp8_linear_args *args, void *nccl_comm) {
    (void)d, (void)w, (void)shard, (void)args, (void)nccl_comm;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "tp_linear: built without CUDA (NCCL runs on CUDA devices)");
}
#endif
