/* The grouped (MoE) form of cuda_generic's mma.sync kernel, between its host glue (cuda_generic_grouped.c) and the
 * device code (gemm_generic.cu). Plain C types; docs/grouped.md says what the kernel does with each layout. */
#ifndef BFP8_CUDA_GROUPED_H
#define BFP8_CUDA_GROUPED_H

#include "cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The grouped part of a problem whose shapes and first group's pointers are in a bfp8_cuda_gemm_desc (m = the
 * rows of A for contiguous, max_m for masked). */
typedef struct bfp8_cuda_grouped_desc {
    int layout;               /* bfp8_grouped_layout value: 1 contiguous, 2 masked */
    int64_t groups;
    const int32_t *m_indices; /* contiguous: [m], read by the kernel */
    const int32_t *masked_m;  /* masked: [groups], read by the kernel */
    int64_t expected_m;       /* host hint of the rows per group: picks the tile height */
    int64_t a_group_bytes;    /* masked: bytes between groups' activation-scale matrices (A, Y advance by m rows) */
    int64_t b_group_bytes;    /* bytes between groups' weight-scale matrices (B by n rows, bias by n values) */
} bfp8_cuda_grouped_desc;

/* The grid's most groups (masked groups are grid z). */
#define BFP8_CUDA_GROUPED_MAX_GROUPS 65535

/* Launches the grouped kernel (no split-K: no workspace, no host sync; CUDA-graph capturable). */
int bfp8_cuda_generic_grouped_launch(const bfp8_cuda_gemm_desc *d, const bfp8_cuda_grouped_desc *g, int num_sms,
                                     void *stream);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include "internal.h"
/* cuda_generic's grouped entry (cuda_generic_grouped.c). */
bfp8_status bfp8_cuda_generic_grouped_gemm(const bfp8_backend *self, const bfp8_grouped_gemm_args *args);
#endif

#endif
