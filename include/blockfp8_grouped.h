/*
 * blockfp8 grouped (MoE) GEMM: the DeepSeek expert layers, contiguous (prefill) and masked (decode) layouts
 * (docs/grouped.md). The grouped problem's fields (bfp8_grouped_layout, bfp8_problem::grouped) and the backends'
 * grouped hook are in blockfp8.h and blockfp8_backend.h; this header holds the calls and the grouped weights.
 */
#ifndef BLOCKFP8_GROUPED_H
#define BLOCKFP8_GROUPED_H

#include "blockfp8.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the exported API (see blockfp8.h) */

/* ---------------------------------------------------------------------------------------------------------------
 * Grouped GEMM (mixture-of-experts): G weights of the same shape, each row of A multiplied by the weight of its
 * group. The layouts and their names follow DeepGEMM's m_grouped_fp8_gemm_nt_{contiguous,masked}, so an engine can
 * swap one for the other; docs/grouped.md lists the differences. Numerics: docs/numerics.md per group, and a
 * group's rows get, byte for byte, what the dense call of the same backend gives on those rows alone (on the
 * backends that keep that promise: docs/grouped.md).
 *
 * - CONTIGUOUS (prefill, DeepEP normal mode): A [m, K], Y [m, N], m_indices int32 [m]: row r belongs to group
 *   m_indices[r] in [0, G), or is padding (-1). Padding rows' outputs are never written. DeepGEMM also requires each
 *   group's rows to be one segment aligned to 128 rows; here any order is correct, and that layout is the fast one
 *   on the GPU (docs/grouped.md).
 * - MASKED (decode, DeepEP low-latency mode, CUDA-graph friendly): A [G, max_m, K], Y [G, max_m, N], masked_m
 *   int32 [G] in the data's memory (read by the kernel on CUDA: no host sync): group g uses rows [0, masked_m[g]).
 *   Rows at or beyond masked_m[g] are never written. expected_m is a host hint of the typical masked_m.
 * - B [G, N, K] e4m3; its scales are G matrices of [ceil(N/128), ceil(K/128)] stored back to back: the descriptor
 *   describes one (rows = ceil(N/128)), group g's starts g * bfp8_scales_bytes(layout, rows, kblocks) bytes in.
 * - Activation scales: contiguous, one matrix of m rows; masked, G matrices of max_m rows back to back (the
 *   descriptor describes one, as for B).
 * - bias: optional, [G, N] (one row per group; DeepGEMM has none).
 * Invalid contents (an index outside [-1, G), masked_m < 0 or > max_m) are BFP8_ERR_INVALID_ARGUMENT on host data,
 * checked before anything is written. On CUDA the host cannot see them without a sync: the kernels skip rows with
 * such an index and clamp masked_m to [0, max_m], so nothing is written out of bounds (docs/grouped.md).
 * ------------------------------------------------------------------------------------------------------------- */
struct bfp8_grouped_gemm_args {
    bfp8_grouped_layout layout; /* CONTIGUOUS or MASKED */
    int64_t groups;             /* G >= 1 */
    int64_t m;                  /* contiguous: rows of A and Y; masked: max_m, the rows of each group's buffer */
    int64_t n, k;
    const uint8_t *a;          /* contiguous [m, k]; masked [groups, m, k] */
    bfp8_scales a_scales;      /* rows m (masked: one group's matrix; G of them back to back) */
    const int32_t *m_indices;  /* contiguous: [m]; ignored for masked */
    const int32_t *masked_m;   /* masked: [groups]; ignored for contiguous */
    int64_t expected_m;        /* host hint of the rows per group (0: m / groups for contiguous, m for masked) */
    const uint8_t *b;          /* [groups, n, k] */
    bfp8_scales b_scales;      /* rows ceil(n/128): one group's matrix, G of them back to back */
    const void *bias;          /* [groups, n] or NULL */
    bfp8_dtype bias_dtype;
    void *y;                   /* contiguous [m, n]; masked [groups, m, n] */
    bfp8_dtype y_dtype;
    bfp8_device device;        /* where every pointer above lives */
    void *stream;              /* cudaStream_t for CUDA, NULL = default stream */
};

/* The problem a grouped call poses (grouped, groups and expected_m set; expected_m 0 replaced by its default). */
bfp8_status bfp8_problem_from_grouped_gemm(const bfp8_grouped_gemm_args *args, bfp8_problem *out);
/* Validates (on host data also m_indices and masked_m), decides like bfp8_gemm (stats, fallbacks, BFP8_LOG) and
 * runs. d = NULL uses the default dispatcher. */
bfp8_status bfp8_grouped_gemm(bfp8_dispatcher *d, const bfp8_grouped_gemm_args *args);

/* A prepared grouped weight: G weights [n, k] with one scale format, the scale layouts held as explicit fields
 * (the grouped form of bfp8_weight). */
typedef struct bfp8_grouped_weight bfp8_grouped_weight;

typedef struct bfp8_grouped_weight_info {
    int64_t groups, n, k;
    bfp8_scale_format scale_format;
    uint32_t host_layouts;   /* BFP8_BIT(layout) set held in host memory */
    uint32_t device_layouts; /* ... in CUDA device memory (with the fp8 data) */
} bfp8_grouped_weight_info;

/* Copies q [groups, n, k] and its scales (one group's descriptor, G matrices back to back, any layout). UE8M0
 * scales must be exact powers of two in [2^-126, 2^127] in every group (an error names the first that is not). */
bfp8_status bfp8_grouped_weight_create(const uint8_t *q, int64_t groups, int64_t n,
                                       int64_t k, const bfp8_scales *scales, bfp8_grouped_weight **out);
/* Quantizes w [groups, n, k] (f32, bf16 or f16), each group in its own 128x128 blocks. */
bfp8_status bfp8_grouped_weight_quantize(const void *w, bfp8_dtype w_dtype,
                                         int64_t groups, int64_t n, int64_t k, bfp8_scale_format format, bfp8_grouped_weight **out,
                                         int64_t *nonfinite);
/* As bfp8_weight_prepare: adds what the named backend's grouped GEMM consumes (NULL: every backend of d that
 * has one), keeping every form already held. */
bfp8_status bfp8_grouped_weight_prepare(bfp8_grouped_weight *w, bfp8_dispatcher *d, const char *backend_name);
bfp8_status bfp8_grouped_weight_info_get(const bfp8_grouped_weight *w, bfp8_grouped_weight_info *out);
/* Borrowed views: q [groups, n, k] and the scales in `layout` on `device` (BFP8_ERR_NOT_FOUND if not held). */
bfp8_status bfp8_grouped_weight_view(const bfp8_grouped_weight *w, bfp8_device device, bfp8_scale_layout layout,
                                     const uint8_t **q, bfp8_scales *scales);
void bfp8_grouped_weight_free(bfp8_grouped_weight *w);

/* Which expert projection of a DeepSeek MoE layer to load. */
typedef enum bfp8_expert_proj {
    BFP8_EXPERT_GATE_UP = 0, /* gate_proj and up_proj fused: [G, 2*I, K], gate's I rows first (I % 128 == 0) */
    BFP8_EXPERT_DOWN,        /* down_proj: [G, hidden, I] */
} bfp8_expert_proj;

typedef struct bfp8_grouped_linear_args {
    bfp8_grouped_layout layout;
    const void *x; /* contiguous [m, k]; masked [groups, m, k] */
    bfp8_dtype x_dtype;
    int64_t m;     /* as in bfp8_grouped_gemm_args */
    const int32_t *m_indices;
    const int32_t *masked_m;
    int64_t expected_m;
    const void *bias; /* [groups, n] or NULL */
    bfp8_dtype bias_dtype;
    void *y; /* contiguous [m, n]; masked [groups, m, n] */
    bfp8_dtype y_dtype;
    bfp8_device device; /* where x, m_indices/masked_m, bias and y live */
    void *stream;
} bfp8_grouped_linear_args;

/* The problem a grouped linear call poses (as bfp8_problem_from_linear does for the dense one). */
bfp8_status bfp8_problem_from_grouped_linear(const bfp8_grouped_weight *w, const bfp8_grouped_linear_args *args,
                                             bfp8_problem *out);
/* The grouped linear layer: x quantized in 1x128 groups with the weight's scale format (on host data only the
 * rows in use; on CUDA every row, by one kernel per call, no host sync), then the grouped GEMM through the
 * dispatcher. Rows not in use are never written, as for bfp8_grouped_gemm. */
bfp8_status bfp8_grouped_linear(bfp8_dispatcher *d, const bfp8_grouped_weight *w,
                                const bfp8_grouped_linear_args *args);

/* Loads the routed experts of MoE layer `layer` into one grouped weight: tensors
 * model.layers.L.mlp.experts.E.{gate_proj,up_proj,down_proj}.weight (+ _scale_inv), looked up in each of the
 * `count` files in turn (a checkpoint's shards). experts = 0 loads experts 0, 1, ... up to the first missing one;
 * otherwise exactly that many (a missing one is BFP8_ERR_NOT_FOUND). Every expert must have the same shape. */
bfp8_status bfp8_grouped_weight_load_experts(const bfp8_safetensors *const *files, size_t count, int64_t layer,
                                             bfp8_expert_proj proj, int64_t experts, bfp8_grouped_weight **out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* BLOCKFP8_GROUPED_H */
