/* Shared between the CUDA host glue (.c) and the device code (.cu): plain C types and extern "C" launchers.
 * Device code never calls bfp8_fail; launchers return a cudaError_t as int (0 = cudaSuccess) and the C glue turns
 * it into a bfp8_status with a message. */
#ifndef BFP8_CUDA_INTERNAL_H
#define BFP8_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One scale matrix as the kernels index it: value (r, kb) is at r*row_stride + kb*kb_stride (in floats), or for
 * packed UE8M0 the exponent byte kb%4 of the uint32 word r*row_stride + (kb/4)*kb_stride. */
typedef struct bfp8_cuda_scale_view {
    void *data;
    int64_t row_stride;
    int64_t kb_stride;
    int packed; /* 1: PACKED_UE8M0 words */
} bfp8_cuda_scale_view;

/* Activation quantization: x [m, k] (dtype code 0 f32, 1 bf16, 2 f16 = bfp8_dtype values) -> q, scales. */
int bfp8_cuda_launch_quantize_act(const void *x, int x_dtype, int64_t m, int64_t k, uint8_t *q,
                                  bfp8_cuda_scale_view scales, int ue8m0, long long *nonfinite, void *stream);

/* Adds the number of inf and NaN among x[0..n) (dtype as above) to the device int64 *counter. */
int bfp8_cuda_launch_count_nonfinite(const void *x, int dtype, int64_t n, long long *counter, void *stream);

/* Generic block-FP8 GEMM (mma.sync e4m3). `workspace` (fp32, at least bfp8_cuda_generic_workspace_bytes bytes)
 * holds split-K partial sums; it may be NULL when that size is 0. */
typedef struct bfp8_cuda_gemm_desc {
    int64_t m, n, k;
    const uint8_t *a, *b;
    bfp8_cuda_scale_view sa, sb;
    const void *bias;
    int bias_dtype; /* bfp8_dtype value; ignored without bias */
    void *y;
    int y_dtype; /* bfp8_dtype value */
} bfp8_cuda_gemm_desc;

/* The launch plan for a shape: tile config and split-K factor (host-side heuristic, shared with the launcher). */
typedef struct bfp8_cuda_gemm_plan {
    int config; /* index into the kernel table */
    int splits; /* K split factor (1 = none) */
    size_t workspace_bytes;
} bfp8_cuda_gemm_plan;

int bfp8_cuda_generic_plan(const bfp8_cuda_gemm_desc *d, int num_sms, bfp8_cuda_gemm_plan *plan);
int bfp8_cuda_generic_launch(const bfp8_cuda_gemm_desc *d, const bfp8_cuda_gemm_plan *plan, float *workspace,
                             void *stream);
#ifdef __cplusplus
}
#endif
#endif
