/* Host or CUDA device buffers for the unit tests and the CLI (tests/common/devbuf.c): public API only, so without
 * CUDA the device calls fail with the library's BFP8_ERR_UNSUPPORTED and its reason. */
#ifndef BFP8_TEST_DEVBUF_H
#define BFP8_TEST_DEVBUF_H

#include "blockfp8.h"

#include <stddef.h>
#include <stdint.h>

/* New device memory of max(bytes, 1) bytes (an empty operand still gets an address), holding a copy of `host`
 * (NULL: left uninitialized). On failure *out is NULL and nothing is held. */
bfp8_status test_dev_upload(const void *host, size_t bytes, void **out);
/* The same with every byte `pattern` (the poison of an output). */
bfp8_status test_dev_filled(size_t bytes, uint8_t pattern, void **out);

/* Buffers on one device, freed together. */
#define TEST_BUFFERS_MAX 16
typedef struct test_buffers {
    bfp8_device device;
    void *ptr[TEST_BUFFERS_MAX];
    int count;
} test_buffers;
/* A new buffer of max(bytes, 1) bytes on b->device, holding a copy of host memory `host` (NULL: uninitialized). */
bfp8_status test_buffers_put(test_buffers *b, const void *host, size_t bytes, void **out);
void test_buffers_free(test_buffers *b);

#endif
