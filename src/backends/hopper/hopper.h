/* The hopper backend (the sm_90a fast path) as the rest of the library and the tests reach it. Host C. */
#ifndef BFP8_HOPPER_H
#define BFP8_HOPPER_H

#include "blockfp8.h"
#include "blockfp8_grouped.h"

#include "backends/hopper/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend: caps, priority, gemm (backend.c). */
const bfp8_backend *bfp8_hopper_backend(void);
/* Runs a problem the backend takes on a device of `sms` SMs (launch.cu). */
bfp8_status bfp8_hopper_run(const bfp8_gemm_args *args, int sms);
/* Runs a grouped problem the backend takes on a device of `sms` SMs (launch.cu). */
bfp8_status bfp8_hopper_run_grouped(const bfp8_grouped_gemm_args *args, int sms);
/* The clusters that fit at once on the current device with the CSPLIT kernels: what hopper's plans on it use
 * (queried once per process; launch.cu). */
bfp8_status bfp8_hopper_device_cluster_fit(bfp8_hopper_cluster_fit *out);

#ifdef __cplusplus
}
#endif
#endif
