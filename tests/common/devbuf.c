/* Host and device buffers (tests/common/devbuf.h). */
#include "devbuf.h"

#include <stdlib.h>
#include <string.h>

bfp8_status test_dev_upload(const void *host, size_t bytes, void **out) {
    void *p = NULL;
    bfp8_status st = bfp8_cuda_malloc(bytes ? bytes : 1, &p);
    if (st == BFP8_OK && host && bytes) st = bfp8_cuda_upload(p, host, bytes);
    if (st != BFP8_OK && p) bfp8_cuda_free(p), p = NULL;
    *out = p;
    return st;
}

bfp8_status test_dev_filled(size_t bytes, uint8_t pattern, void **out) {
    uint8_t *h = malloc(bytes ? bytes : 1);
    *out = NULL;
    if (!h) return BFP8_ERR_OUT_OF_MEMORY;
    memset(h, pattern, bytes ? bytes : 1);
    bfp8_status st = test_dev_upload(h, bytes ? bytes : 1, out);
    free(h);
    return st;
}

bfp8_status test_buffers_put(test_buffers *b, const void *host, size_t bytes, void **out) {
    void *p = NULL;
    *out = NULL;
    if (b->count == TEST_BUFFERS_MAX) return BFP8_ERR_INVALID_ARGUMENT; /* more than the set holds */
    if (b->device == BFP8_DEVICE_CUDA) {
        bfp8_status st = test_dev_upload(host, bytes, &p);
        if (st != BFP8_OK) return st;
    } else {
        p = malloc(bytes ? bytes : 1);
        if (!p) return BFP8_ERR_OUT_OF_MEMORY;
        if (host && bytes) memcpy(p, host, bytes);
    }
    b->ptr[b->count++] = p;
    *out = p;
    return BFP8_OK;
}

void test_buffers_free(test_buffers *b) {
    for (int i = 0; i < b->count; i++) {
        if (b->device == BFP8_DEVICE_CUDA)
            bfp8_cuda_free(b->ptr[i]);
        else
            free(b->ptr[i]);
    }
    b->count = 0;
}
