/*
 * blockfp8 tensor parallelism: a block-FP8 linear layer sharded over R ranks (docs/tensor-parallel.md).
 *
 * column: the weight's N (output features) is split. Every rank holds the whole x [M, K] and computes its columns
 *         of y; an all-gather assembles y. Each output element is computed exactly as unsharded (bit-identical).
 * row:    K is split. Every rank holds its slice x[:, begin:end] and its columns of the weight; the fp32 partial
 *         products are summed by an all-reduce, then the bias is added (once) and y rounded once. The sum runs in
 *         another order than the unsharded GEMM's, so the result agrees within the fp32-output tolerance.
 *
 * Scales are sharded exactly like the weight. A shard boundary that cuts a 128-wide scale block is refused with
 * the shapes named, unless BFP8_SHARD_SHARE_BLOCKS is passed: then each rank's slice is padded in front with zero
 * rows (column) or zero columns (row) up to the block boundary, and the rank holds the scale block it shares with
 * its neighbour. The pad contributes exact zeros. In row mode the activations are then quantized per rank in groups
 * aligned to the weight's blocks, so a group that two ranks share gets one scale per rank (what the engines do,
 * since no rank holds the other half of that group): y then differs from the unsharded layer by that quantization.
 */
#ifndef BLOCKFP8_TP_H
#define BLOCKFP8_TP_H

#include "blockfp8.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the exported API (see blockfp8.h) */

typedef enum bfp8_tp_mode {
    BFP8_TP_COLUMN = 0, /* split N; all-gather */
    BFP8_TP_ROW,        /* split K; all-reduce */
    BFP8_TP_MODE_COUNT
} bfp8_tp_mode;

const char *bfp8_tp_mode_name(bfp8_tp_mode mode); /* "column", "row" */
bfp8_status bfp8_tp_mode_parse(const char *name, bfp8_tp_mode *out);

/* Flags of bfp8_shard_plan. */
#define BFP8_SHARD_SHARE_BLOCKS 1u /* pad a slice that cuts a 128-block and hold the shared scale block */

/* One rank's part of a sharded [n, k] weight. */
typedef struct bfp8_shard {
    bfp8_tp_mode mode;
    int rank, ranks;
    int64_t n, k;        /* the whole weight */
    int64_t begin, end;  /* the rank's slice of the split dimension (N for column, K for row) */
    int64_t lead;        /* zero rows (column) or columns (row) in front of the slice: begin % 128 when blocks are
                            shared, else 0 */
    int64_t block_begin; /* first 128-block of the split dimension held: the local weight's block j is block
                            block_begin + j of the whole one (its scales too) */
    int64_t n_local, k_local; /* the local weight's shape: the slice plus the lead along the split dimension */
} bfp8_shard;

/* The even split of the weight over `ranks` (the split dimension must divide by it). Refuses a split that cuts a
 * 128-block unless flags has BFP8_SHARD_SHARE_BLOCKS; the message names the shapes. Pure. */
bfp8_status bfp8_shard_plan(int64_t n, int64_t k, bfp8_tp_mode mode, int ranks, int rank, unsigned flags,
                            bfp8_shard *out);

/* The rank's local weight from a whole one given as host q [n, k] and its scales (any layout): copies only the
 * slice's bytes and scale blocks. Scales declared UE8M0 are checked whole, as bfp8_weight_create checks them, so
 * that every rank refuses the same weight and the error names the block of the whole one. */
bfp8_status bfp8_weight_shard(const uint8_t *q, const bfp8_scales *scales, const bfp8_shard *shard,
                              bfp8_weight **out);
/* Plans the shard from the tensor's shape and loads only its part of NAME + NAME_scale_inv (DeepSeek naming and
 * scale formats, as bfp8_weight_load_ex; options may be NULL) from an open file; *shard_out receives the plan. */
bfp8_status bfp8_weight_load_shard(const bfp8_safetensors *f, const char *name, const bfp8_weight_load_options *options,
                                   bfp8_tp_mode mode, int ranks, int rank, unsigned flags, bfp8_shard *shard_out,
                                   bfp8_weight **out);

/* One rank's share of the layer, without communication (what bfp8_tp_linear runs before its collective; also the
 * building block of an in-process simulation):
 *  column: args->x is the whole x [m, k]; args->y receives the rank's y_local [m, n_local] (the first `lead`
 *          columns are pad); the bias, if any, is the whole bias [n].
 *  row:    args->x is the rank's slice [m, end - begin] (without the lead); args->y receives the fp32 partial
 *          [m, n] (args->y_dtype must be f32); the bias [n], if any, is added on rank 0 only. */
bfp8_status bfp8_tp_linear_local(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_shard *shard,
                                 const bfp8_linear_args *args);

/* What the collective of bfp8_tp_linear moves for m rows (the bench's bytes and the Python layer's buffers come from
 * here, so they cannot drift from the library's). */
typedef struct bfp8_tp_traffic {
    int64_t count;    /* elements each rank hands to the collective: column, its section of the all-gather (m rows of
                         the widest local output, so that every rank sends as many); row, the whole partial [m, n] */
    bfp8_dtype dtype; /* their type: y's for column, f32 for row (partials are summed in fp32) */
    int64_t bytes;    /* the collective's buffer, what nccl-tests calls its size: ranks * count elements gathered,
                         or the count elements reduced */
} bfp8_tp_traffic;

/* The traffic of one call of bfp8_tp_linear on m rows with output dtype y_dtype (f32, bf16 or f16). Pure. */
bfp8_status bfp8_tp_traffic_get(const bfp8_shard *shard, int64_t m, bfp8_dtype y_dtype, bfp8_tp_traffic *out);

/* The whole tensor-parallel layer on a CUDA device: the local GEMM through the dispatcher, then the NCCL
 * all-gather (column) or all-reduce (row) on args->stream, all stream-ordered (CUDA-graph capturable; no host
 * sync). args->x as for bfp8_tp_linear_local; args->y is the whole y [m, n] on every rank. `nccl_comm` is the
 * caller's ncclComm_t, whose size and rank must match the shard. NCCL is loaded at the first call
 * (libnccl.so.2); without it, or without CUDA, the call returns BFP8_ERR_UNSUPPORTED with the reason. */
bfp8_status bfp8_tp_linear(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_shard *shard,
                           const bfp8_linear_args *args, void *nccl_comm);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* BLOCKFP8_TP_H */
