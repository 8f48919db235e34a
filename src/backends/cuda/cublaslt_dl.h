/* libcublasLt, loaded with dlopen rather than linked. Linked, it is loaded by every process that starts, GPU or
 * not: its load-time constructor costs start-up time and memory, and under a limit of ~800 MB of address space it
 * crashes the process (below ~650 MB the process does not start). Loaded by bfp8_cublaslt_load when the
 * registration has found a CUDA device, it costs nothing elsewhere.
 *
 * cublaslt.c includes this header after <cublasLt.h> and calls cuBLASLt by its usual names: each name below is a
 * macro for the pointer loaded here (cublasLtCreate is bfp8_cublaslt.Create). A cuBLASLt function missing from
 * BFP8_CUBLASLT_FUNCS and the macros is an undefined reference at link time: add it to both. */
#ifndef BFP8_CUBLASLT_DL_H
#define BFP8_CUBLASLT_DL_H

#include <cublasLt.h>
#include <stdbool.h>
#include <stddef.h>

#define BFP8_CUBLASLT_FUNCS(X)                                                                                   \
    X(Create)                                                                                                    \
    X(GetStatusName)                                                                                             \
    X(GetStatusString)                                                                                           \
    X(Matmul)                                                                                                    \
    X(MatmulAlgoGetHeuristic)                                                                                    \
    X(MatmulDescCreate)                                                                                          \
    X(MatmulDescDestroy)                                                                                         \
    X(MatmulDescSetAttribute)                                                                                    \
    X(MatmulPreferenceCreate)                                                                                    \
    X(MatmulPreferenceDestroy)                                                                                   \
    X(MatmulPreferenceSetAttribute)                                                                              \
    X(MatrixLayoutCreate)                                                                                        \
    X(MatrixLayoutDestroy)

typedef struct bfp8_cublaslt_api {
#define BFP8_CUBLASLT_MEMBER(f) __typeof__(&cublasLt##f) f;
    BFP8_CUBLASLT_FUNCS(BFP8_CUBLASLT_MEMBER)
#undef BFP8_CUBLASLT_MEMBER
} bfp8_cublaslt_api;

extern bfp8_cublaslt_api bfp8_cublaslt;

#define BFP8_CUBLASLT_STR_(x) #x
#define BFP8_CUBLASLT_STR(x) BFP8_CUBLASLT_STR_(x)
/* The library of the headers' major version: libcublasLt.so.13 for CUDA 13. */
#define BFP8_CUBLASLT_SONAME "libcublasLt.so." BFP8_CUBLASLT_STR(CUBLAS_VER_MAJOR)

/* Loads BFP8_CUBLASLT_SONAME once per process (the library path, then BFP8_CUDA_LIBDIR, the
 * toolkit's folder at build time) and every function above. True when all are there; otherwise false with why. */
bool bfp8_cublaslt_load(char *why, size_t why_size);

#ifndef BFP8_CUBLASLT_DL_LOADER
#define cublasLtCreate (*bfp8_cublaslt.Create)
#define cublasLtGetStatusName (*bfp8_cublaslt.GetStatusName)
#define cublasLtGetStatusString (*bfp8_cublaslt.GetStatusString)
#define cublasLtMatmul (*bfp8_cublaslt.Matmul)
#define cublasLtMatmulAlgoGetHeuristic (*bfp8_cublaslt.MatmulAlgoGetHeuristic)
#define cublasLtMatmulDescCreate (*bfp8_cublaslt.MatmulDescCreate)
#define cublasLtMatmulDescDestroy (*bfp8_cublaslt.MatmulDescDestroy)
#define cublasLtMatmulDescSetAttribute (*bfp8_cublaslt.MatmulDescSetAttribute)
#define cublasLtMatmulPreferenceCreate (*bfp8_cublaslt.MatmulPreferenceCreate)
#define cublasLtMatmulPreferenceDestroy (*bfp8_cublaslt.MatmulPreferenceDestroy)
#define cublasLtMatmulPreferenceSetAttribute (*bfp8_cublaslt.MatmulPreferenceSetAttribute)
#define cublasLtMatrixLayoutCreate (*bfp8_cublaslt.MatrixLayoutCreate)
#define cublasLtMatrixLayoutDestroy (*bfp8_cublaslt.MatrixLayoutDestroy)
#endif

#endif
