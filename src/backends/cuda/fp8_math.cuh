/* Bit-exact scalar conversions shared by the CUDA kernels (docs/numerics.md). Written in integer arithmetic so the
 * bytes match the host's bfp8_e4m3_from_f32 / bfp8_ue8m0_ceil on every input, subnormals and ties included. */
#ifndef BFP8_FP8_MATH_CUH
#define BFP8_FP8_MATH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"

/* E4M3 from fp32: RNE, saturation to +-448 (inf included), NaN -> 0x7F with the sign kept. */
__host__ __device__ static inline uint8_t bfp8_dev_e4m3_from_f32(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    uint32_t sign = (bits >> 24) & 0x80u;
    uint32_t a = bits & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)(sign | 0x7Fu);
    if (a >= 0x43E00000u) return (uint8_t)(sign | 0x7Eu); /* |x| >= 448 */
    if (a < 0x3C800000u) {                                /* |x| < 2^-6: subnormal step 2^-9 */
        float ax;
        memcpy(&ax, &a, 4);
        /* ax * 512 is exact (power-of-two scaling of a value far from overflow), then RNE to an integer 0..8;
         * 8 is the smallest normal's code, so the carry is already right. */
#ifdef __CUDA_ARCH__
        uint32_t mant = __float2uint_rn(ax * 512.0f);
#else
        uint32_t mant = (uint32_t)nearbyintf(ax * 512.0f);
#endif
        return (uint8_t)(sign | mant);
    }
    /* Normal: rebias the exponent (127 -> 7) and round the mantissa from 23 to 3 bits, ties to even. */
    uint32_t v = a - ((127u - 7u) << 23);
    v = (v + 0x7FFFFu + ((v >> 20) & 1u)) >> 20;
    if (v > 0x7Eu) v = 0x7Eu;
    return (uint8_t)(sign | v);
}

/* UE8M0 ceiling of a positive finite scale: exponent, +1 if any mantissa bit, clamped to [1, 254]. */
__host__ __device__ static inline uint32_t bfp8_dev_ue8m0_ceil(float s) {
    uint32_t bits;
    memcpy(&bits, &s, 4);
    int32_t e = (int32_t)((bits >> 23) & 0xFFu);
    if (bits & 0x7FFFFFu) e++;
    if (e < 1) e = 1;
    if (e > 254) e = 254;
    return (uint32_t)e;
}

/* UE8M0 exponent byte e -> 2^(e-127), as bfp8_ue8m0_to_f32 reads it on the host: 255 is NaN and 0 is 2^-127 (a
 * subnormal), which a plain shift into the exponent field would make inf and 0. Packed scales from a caller may
 * hold either. */
__device__ static inline float bfp8_dev_ue8m0_value(uint32_t e) {
    if (e == 0) return __uint_as_float(0x00400000u);
    if (e == 255) return __uint_as_float(0x7FC00000u);
    return __uint_as_float(e << 23);
}

/* Scale (r, kb) of a view, as fp32. */
__device__ static inline float bfp8_dev_scale_get(const bfp8_cuda_scale_view &v, int64_t r, int64_t kb) {
    if (v.packed) {
        const uint32_t *w = (const uint32_t *)v.data;
        uint32_t word = __ldg(w + r * v.row_stride + (kb >> 2) * v.kb_stride);
        return bfp8_dev_ue8m0_value((word >> (8 * (kb & 3))) & 0xFFu);
    }
    return __ldg((const float *)v.data + r * v.row_stride + kb * v.kb_stride);
}

/* One element as fp32, NaN sign kept (the hardware f16 -> f32 conversion returns a canonical NaN, but a NaN input
 * must quantize to 0x7F or 0xFF by its own sign). */
__device__ static inline float bfp8_dev_load_f32(const void *p, int dtype, int64_t i) {
    switch (dtype) {
    case 1: return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16); /* bf16 -> f32 is exact */
    case 2: {
        const uint16_t h = ((const uint16_t *)p)[i];
        if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu)) return __uint_as_float(0x7FC00000u | (uint32_t)(h & 0x8000u) << 16);
        return __half2float(__ushort_as_half(h));
    }
    default: return ((const float *)p)[i];
    }
}

/* One RNE rounding to the output dtype; fp16 overflow gives inf as the hardware conversion does. */
__device__ static inline void bfp8_dev_store_f32(void *p, int dtype, int64_t i, float v) {
    switch (dtype) {
    case 1: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case 2: ((__half *)p)[i] = __float2half_rn(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

#endif
