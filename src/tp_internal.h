/* Internals of tensor parallelism shared by src/tp.c and the CUDA side (src/backends/cuda/tp_nccl.c). */
#ifndef BFP8_TP_INTERNAL_H
#define BFP8_TP_INTERNAL_H

#include "blockfp8_tp.h"

/* Stream-ordered device memset to zero and 2-D copy (device to device), for the padded slices and the gather. */
bfp8_status bfp8_cuda_tp_memset(void *dst, size_t bytes, void *stream);
bfp8_status bfp8_cuda_tp_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                                 size_t height, void *stream);

#ifdef __cplusplus
extern "C" {
#endif
/* Rounds n fp32 values once (RNE) into dst of dtype (bfp8_dtype value: f32, bf16 or f16); a cudaError_t as int. */
int bfp8_cuda_launch_f32_convert(const float *src, void *dst, int dtype, size_t n, void *stream);
#ifdef __cplusplus
}
#endif

#endif
