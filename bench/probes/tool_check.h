/* For the standalone GPU probes in bench/probes/ (launch_floor.cu, first_load.cu): a failed CUDA call ends the tool with
 * its file, line, call and message. */
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                                    \
    do {                                                                                                         \
        cudaError_t e_ = (x);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)
