/* Host-side internals of the CUDA glue (C only). */
#ifndef BFP8_CUDA_GLUE_H
#define BFP8_CUDA_GLUE_H

#include "internal.h"

#include "cuda_internal.h"

typedef struct bfp8_cuda_device_info {
    int arch; /* compute capability x10 */
    int num_sms;
    int l2_bytes;
} bfp8_cuda_device_info;

/* BFP8_ERR_DEVICE with "<what>: <error name> (<error string>)". */
bfp8_status bfp8_cuda_error(int cuda_error, const char *what);
/* Properties of the current device (cached at discovery). */
bfp8_status bfp8_cuda_device_info_get(bfp8_cuda_device_info *out);
/* How the kernels index a validated scale descriptor. */
bfp8_cuda_scale_view bfp8_cuda_scale_view_of(const bfp8_scales *s);

extern const bfp8_backend bfp8_backend_cuda_generic;
extern const bfp8_backend bfp8_backend_cublaslt;
/* Defined in hopper.cu. */
const bfp8_backend *bfp8_hopper_backend(void);
/* The plan hopper would run M x N x K with on `sms` SMs, as one line (host only; for logs and tests), on a device
 * where no cluster of CSPLIT kernels fits; the second on one where cluster_fit[s] clusters of s CTAs fit at once
 * (s = 2..BFP8_HOPPER_MAX_SPLIT_CLUSTER; the entries below 2 are not read); the third with the default knobs but
 * 2-CTA clusters allowed (BFP8_HOPPER_CLUSTER=1). */
enum { BFP8_HOPPER_MAX_SPLIT_CLUSTER = 8 };
void bfp8_hopper_plan_describe(int64_t m, int64_t n, int64_t k, int sms, char *out, size_t size);
void bfp8_hopper_plan_describe_fit(int64_t m, int64_t n, int64_t k, int sms, const int *cluster_fit, char *out,
                                   size_t size);
void bfp8_hopper_cluster_plan_describe(int64_t m, int64_t n, int64_t k, int sms, char *out, size_t size);
/* The clusters of s CTAs that fit at once on the current device with the CSPLIT kernels, into clusters[s] (s =
 * 2..BFP8_HOPPER_MAX_SPLIT_CLUSTER; the entries below 2 are set to 0); what hopper's plans on it use (queried once
 * per process). */
bfp8_status bfp8_hopper_device_cluster_fit(int *clusters);
/* Whether the units of that plan (with 2-CTA clusters allowed if `clusters`, stream-K wherever it applies if
 * `stream_k_all`) decode, with the kernel's divisors, to every (tile, K block) exactly once, as plain division does,
 * and stream-K pieces follow their protocol (false with the first difference in why). */
bool bfp8_hopper_check_units(int64_t m, int64_t n, int64_t k, int sms, bool clusters, bool stream_k_all, char *why,
                             size_t why_size);

#endif
