/* Host-side internals of the CUDA glue (C only). */
#ifndef BFP8_CUDA_GLUE_H
#define BFP8_CUDA_GLUE_H

#include "internal.h"

#include "cuda_internal.h"

typedef struct bfp8_cuda_device_info {
    int arch; /* compute capability x10 */
    int num_sms;
    char name[256]; /* as cudaDeviceProp::name; "" when the driver did not say */
} bfp8_cuda_device_info;

/* BFP8_ERR_DEVICE with "<what>: <error name> (<error string>)". */
bfp8_status bfp8_cuda_error(int cuda_error, const char *what);
/* Properties of the current device (cached at discovery). */
bfp8_status bfp8_cuda_device_info_get(bfp8_cuda_device_info *out);
/* How the kernels index a validated scale descriptor. */
bfp8_cuda_scale_view bfp8_cuda_scale_view_of(const bfp8_scales *s);

extern const bfp8_backend bfp8_backend_cuda_generic;
extern const bfp8_backend bfp8_backend_cublaslt;
#include "backends/hopper/hopper.h" /* bfp8_hopper_backend */

#endif
