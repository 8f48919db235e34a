/* Private interface between the quantizer driver (quant.c) and its AVX2 span kernels (quant_avx2.c). Each kernel
 * gives the same bits as its scalar twin in quant.c; call them only when bfp8_cpu_isa_current() is
 * BFP8_CPU_ISA_AVX2. */
#ifndef BFP8_QUANT_AVX2_H
#define BFP8_QUANT_AVX2_H

#include "internal.h"

/* Twin of span_amax: largest |x| over the finite x[0..n), n <= 128; adds the non-finite count to *nonfinite. */
float bfp8_quant_span_amax_avx2(const float *x, int64_t n, int64_t *nonfinite);
/* Twin of span_encode: q[i] = e4m3(x[i] / scale), n <= 128; non-finite x -> 0x7F with the sign of x. */
void bfp8_quant_span_encode_avx2(const float *x, int64_t n, float scale, uint8_t *q);
/* bf16 or f16 values p[base .. base+n) widened exactly to fp32 into out (n <= 128). */
void bfp8_quant_load_span_avx2(const void *p, bfp8_dtype dtype, int64_t base, int64_t n, float *out);

#endif
