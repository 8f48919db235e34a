/* MoE pieces shared by `demo --moe`, `bench --grouped` and `bench --model` (tools/moe.c): the skewed top-k routing
 * of tokens to experts and its grouped layouts, and a grouped GEMM call set up for the backend that will run it. */
#ifndef BFP8_CLI_MOE_H
#define BFP8_CLI_MOE_H

#include "cli.h"
#include "blockfp8_grouped.h"

/* Routing (moe_route): each token picks top_k distinct experts of `experts`. The first is drawn with weight
 * (g+1)^-skew for expert g (a Zipf law; skew 0 is uniform); each next one the same way among the experts not yet
 * picked (the weights renormalized over them, which is what redrawing repeats would give, in bounded time). Each
 * draw takes one 64-bit value of the generator, its top 53 bits a fraction f in [0, 1): the expert is the first, in
 * index order, whose running weight sum exceeds f x the sum of the weights still in play. Gate (combine) weights are
 * a softmax of test_rng_normal logits, one drawn after each choice's expert.
 * Layout (moe_lay_out): contiguous, each expert's rows one segment, experts in order, each segment padded to a
 * multiple of 128 rows with -1 (DeepGEMM's contiguous layout; an expert without tokens has no segment); masked,
 * [G, max_m] with max_m = the busiest expert's count rounded up to 128 (at least 128). Tokens keep their order
 * inside an expert. */
typedef struct moe_routing {
    int64_t experts, top_k, tokens;
    double skew;
    bfp8_grouped_layout layout;
    int32_t *choice; /* [tokens][top_k] experts */
    float *gate;     /* [tokens][top_k] combine weights */
    /* set by moe_lay_out */
    int64_t m, rows;     /* the grouped call's m (all rows, or max_m) and the rows of its buffers */
    int32_t *counts;     /* [experts] tokens per expert: the masked layout's masked_m */
    int64_t *first_row;  /* [experts] buffer row of each expert's first token */
    int32_t *m_indices;  /* contiguous: [m], the expert of each row, -1 for padding */
    int64_t *slot;       /* [tokens][top_k] the buffer row of each (token, choice) */
    int64_t busiest;     /* the largest count */
    int64_t active;      /* experts with at least one token */
} moe_routing;

/* Draws the routing of r->tokens tokens (experts, top_k <= experts, skew >= 0 set by the caller); false when out
 * of memory. */
bool moe_route(moe_routing *r, test_rng *rng);
/* Lays the drawn routing out in r->layout; false when out of memory. */
bool moe_lay_out(moe_routing *r);
void moe_routing_free(moe_routing *r);

/* Prepares a weight (dense or grouped: the other NULL) for the backends of d that run on `device` and for ref (the
 * checks against it), so that a cpu run on a GPU machine uploads nothing. */
bfp8_status moe_weight_prepare(bfp8_dispatcher *d, bfp8_device device, bfp8_weight *dense,
                               bfp8_grouped_weight *grouped);

/* One grouped GEMM call with its operands on `device`, in the scale layouts of the backend that dispatcher `d`
 * chooses for it (what a grouped linear call would hand that backend). */
typedef struct moe_call_spec {
    bfp8_grouped_layout layout;
    int64_t m, expected_m;          /* as in bfp8_grouped_gemm_args */
    const uint8_t *qa;              /* host: activation codes [rows, k] (rows = m, or G x max_m when masked) */
    const float *sa;                /* host: their row-major scales [rows, ceil(k/128)], in the weight's format */
    const int32_t *m_indices;       /* host: contiguous [m] */
    const int32_t *masked_m;        /* host: masked [G] */
    bfp8_dtype y_dtype;
    bfp8_device device;
} moe_call_spec;

typedef struct moe_call {
    bfp8_grouped_gemm_args g;     /* ready for bfp8_grouped_gemm(d, &g) */
    const bfp8_backend *backend;  /* the choice of d */
    int64_t rows;                 /* rows of A and Y */
    test_buffers bufs;            /* A, its scales, the indices or counts, Y */
} moe_call;

/* Chooses the backend (recording nothing), takes the weight's view in its layout on spec->device (the weight must
 * be prepared for d) and puts A, its scales, the indices and a Y buffer there. BFP8_ERR_UNSUPPORTED when no backend
 * of d can run the call, with the reason in `why`. On failure nothing is held. */
bfp8_status moe_call_init(moe_call *c, bfp8_dispatcher *d, const bfp8_grouped_weight *w, const moe_call_spec *spec,
                          char *why, size_t why_size);
void moe_call_free(moe_call *c);

#endif
