/* CPU feature detection and the choice of instruction set for the host kernels. One piece that the quantizers
 * (quant.c) and the `cpu` backend (backends/cpu.c) both ask, so that the two always run the same ISA. */
#ifndef BFP8_CPU_FEATURES_H
#define BFP8_CPU_FEATURES_H

#include "internal.h"

typedef enum bfp8_cpu_isa {
    BFP8_CPU_ISA_PORTABLE = 0, /* plain C */
    BFP8_CPU_ISA_AVX2,         /* AVX2 + FMA + F16C (the *_avx2.c files) */
} bfp8_cpu_isa;

/* Whether this CPU and its OS run AVX2, FMA and F16C code (cpuid, and xgetbv for the saved YMM state). Cached. */
bool bfp8_cpu_has_avx2(void);

/* The ISA the next host kernel runs: the forced one (bfp8_cpu_force_isa), else BFP8_CPU_ISA (auto, portable or
 * avx2; an unknown value means auto), else the best one the CPU has. avx2 only where the CPU has it. */
bfp8_cpu_isa bfp8_cpu_isa_current(void);
/* Its name: "portable" or "avx2". */
const char *bfp8_cpu_isa_name(void);

/* Test hook, process-wide: "auto" (default), "portable" or "avx2" (BFP8_ERR_UNSUPPORTED where the CPU lacks it).
 * Tests use it to compare the ISAs byte for byte. */
bfp8_status bfp8_cpu_force_isa(const char *isa);
/* INVALID_ARGUMENT when BFP8_CPU_ISA is set to a value the ISA choice ignores (part of bfp8_check_env). */
bfp8_status bfp8_cpu_check_env(void);

#endif
