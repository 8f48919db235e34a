/* NCCL for the two-GPU test (tests/test_tp_cuda.c) and the CLI's `bench --tp`, opened with dlopen at the first use as
 * the library opens it for bfp8_tp_linear: nothing links against NCCL, and without it the callers say why. */
#ifndef BFP8_TEST_NCCL_DL_H
#define BFP8_TEST_NCCL_DL_H

#include <stddef.h>

#if defined(BFP8_WITH_CUDA) && __has_include(<nccl.h>)
#include <nccl.h>
#define TEST_HAVE_NCCL 1

typedef struct test_nccl {
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*comm_init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*get_version)(int *);
    const char *(*error_string)(ncclResult_t);
} test_nccl;
#else
typedef struct test_nccl test_nccl; /* built without CUDA or nccl.h: test_nccl_load says so */
#endif

/* NCCL (libnccl.so.2), loaded once (thread-safe); NULL with the reason in `why` when this build has no nccl.h or
 * the library cannot be opened or lacks a function. */
const test_nccl *test_nccl_load(char *why, size_t why_size);

#endif
