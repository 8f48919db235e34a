/* CUDA entry points when the library is built without CUDA (no nvcc, or CUDA=0): every call says why with
 * BFP8_ERR_UNSUPPORTED, and the CUDA backends are listed as unavailable with the same reason. */
#include "internal.h"

#include <stdio.h>

#define BFP8_NO_CUDA "built without CUDA"

static bfp8_status no_cuda(const char *what) { return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: " BFP8_NO_CUDA, what); }

bool bfp8_cuda_available(char *why, size_t why_size) {
    if (why && why_size) snprintf(why, why_size, "%s", BFP8_NO_CUDA);
    return false;
}

bfp8_status bfp8_cuda_malloc(size_t bytes, void **ptr) {
    (void)bytes;
    if (ptr) *ptr = NULL;
    return no_cuda("bfp8_cuda_malloc");
}
bfp8_status bfp8_cuda_free(void *ptr) {
    (void)ptr;
    return no_cuda("bfp8_cuda_free");
}
bfp8_status bfp8_cuda_upload(void *device_dst, const void *host_src, size_t bytes) {
    (void)device_dst, (void)host_src, (void)bytes;
    return no_cuda("bfp8_cuda_upload");
}
bfp8_status bfp8_cuda_download(void *host_dst, const void *device_src, size_t bytes) {
    (void)host_dst, (void)device_src, (void)bytes;
    return no_cuda("bfp8_cuda_download");
}
bfp8_status bfp8_cuda_synchronize(void *stream) {
    (void)stream;
    return no_cuda("bfp8_cuda_synchronize");
}
bfp8_status bfp8_cuda_quantize_act(const void *x, bfp8_dtype x_dtype, int64_t m, int64_t k, uint8_t *q,
                                   bfp8_scales *scales, int64_t *nonfinite, void *stream) {
    (void)x, (void)x_dtype, (void)m, (void)k, (void)q, (void)scales, (void)nonfinite, (void)stream;
    return no_cuda("bfp8_cuda_quantize_act");
}
bfp8_status bfp8_cuda_malloc_async(size_t bytes, void **ptr, void *stream) {
    (void)bytes, (void)stream;
    if (ptr) *ptr = NULL;
    return no_cuda("bfp8_cuda_malloc_async");
}
bfp8_status bfp8_cuda_free_async(void *ptr, void *stream) {
    (void)ptr, (void)stream;
    return no_cuda("bfp8_cuda_free_async");
}

int bfp8_cuda_arch(void) { return 0; }
const char *bfp8_cuda_card(void) { return NULL; }
void bfp8_cuda_identity(int *arch, const char **card) {
    *arch = 0;
    *card = NULL;
}
int bfp8_cuda_current_device(void) { return -1; }
bool bfp8_cuda_stream_capturing(void *stream) {
    (void)stream;
    return false;
}
bfp8_status bfp8_cuda_count_nonfinite(const void *x, bfp8_dtype dtype, int64_t n, int64_t *counter, void *stream) {
    (void)x, (void)dtype, (void)n, (void)counter, (void)stream;
    return no_cuda("bfp8_cuda_count_nonfinite");
}

bfp8_status bfp8_cuda_register_backends(bfp8_dispatcher *d) {
    BFP8_TRY(bfp8_dispatcher_add_unavailable(d, "hopper", BFP8_NO_CUDA));
    BFP8_TRY(bfp8_dispatcher_add_unavailable(d, "cublaslt", BFP8_NO_CUDA));
    return bfp8_dispatcher_add_unavailable(d, "cuda_generic", BFP8_NO_CUDA);
}
