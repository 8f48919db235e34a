/* AVX2/FMA/F16C kernels of the `cpu` backend (built with -mavx2 -mfma -mf16c; called only after run-time
 * detection). Each mirrors a portable kernel of cpu.c operation for operation: see the orders in cpu.h.
 *
 * E4M3 decode: the seven magnitude bits of an E4M3 code, shifted left by 7, are an fp16 with the same mantissa
 * and an exponent 8 lower (bias 15 instead of 7), subnormals included; F16C widens it exactly to fp32. So the
 * kernels compute with value * 2^-8 and multiply each 128-block partial by 256 (exact). The NaN codes 0x7F/0xFF
 * would become the finite fp16 1.875, so a block that holds one is decoded through the table instead. */
#include "backends/cpu.h"

#include <immintrin.h>
#include <math.h>

#ifndef BFP8_CPU_DECODE_TABLE
#define BFP8_CPU_DECODE_TABLE 0 /* 1: decode E4M3 by table gathers instead of F16C (slower; kept to re-measure) */
#endif
#ifndef BFP8_CPU_PREFETCH
#define BFP8_CPU_PREFETCH 2048 /* bytes ahead; measured, see bench/RESULTS.md */
#endif

/* True when any of the 128 bytes is an E4M3 NaN (magnitude bits all ones). */
static inline bool block_has_nan(const uint8_t *src) {
    const __m256i mag = _mm256_set1_epi8(0x7F);
    __m256i any = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(src + 32 * i));
        any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_and_si256(v, mag), mag));
    }
    return !_mm256_testz_si256(any, any);
}

/* 16 E4M3 codes without NaN -> 16 floats of value * 2^-8. */
static inline void decode16(const uint8_t *src, __m256 *lo, __m256 *hi) {
#if BFP8_CPU_DECODE_TABLE
    /* The alternative that was measured against F16C (bench/RESULTS.md): a gather from the 256-entry table. */
    __m128i codes = _mm_loadu_si128((const __m128i *)src);
    *lo = _mm256_i32gather_ps(bfp8_cpu_e4m3_scaled, _mm256_cvtepu8_epi32(codes), 4);
    *hi = _mm256_i32gather_ps(bfp8_cpu_e4m3_scaled, _mm256_cvtepu8_epi32(_mm_srli_si128(codes, 8)), 4);
#else
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)src)); /* sign fills the high byte */
    h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBF80)); /* S0EEEEMMM0000000 */
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
#endif
}

/* One weight row block (len codes, zero beyond) -> 128 floats of value * 2^-8. */
static inline void decode_block(const uint8_t *src, int64_t len, float *dst) {
    if (len == BFP8_BLOCK && !block_has_nan(src)) {
        for (int i = 0; i < BFP8_BLOCK; i += 16) {
            __m256 lo, hi;
            decode16(src + i, &lo, &hi);
            _mm256_store_ps(dst + i, lo);
            _mm256_store_ps(dst + i + 8, hi);
        }
        return;
    }
    for (int64_t i = 0; i < BFP8_BLOCK; i++) dst[i] = i < len ? bfp8_cpu_e4m3_scaled[src[i]] : 0.0f;
}

/* One block's dot product as the 8 folded lanes of cpu.h: 4 accumulators of 8 lanes, k in order. */
static inline __m256 block_lanes(const float *a, const float *b) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
           acc3 = _mm256_setzero_ps();
    for (int t = 0; t < BFP8_BLOCK; t += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_load_ps(a + t), _mm256_load_ps(b + t), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_load_ps(a + t + 8), _mm256_load_ps(b + t + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_load_ps(a + t + 16), _mm256_load_ps(b + t + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_load_ps(a + t + 24), _mm256_load_ps(b + t + 24), acc3);
    }
    return _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
}

/* The same, decoding a full NaN-free weight block on the fly (M = 1: no round trip through memory). */
static inline __m256 block_lanes_fused(const float *a, const uint8_t *src) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
           acc3 = _mm256_setzero_ps(), lo, hi;
    for (int t = 0; t < BFP8_BLOCK; t += 32) {
        decode16(src + t, &lo, &hi);
        acc0 = _mm256_fmadd_ps(_mm256_load_ps(a + t), lo, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_load_ps(a + t + 8), hi, acc1);
        decode16(src + t + 16, &lo, &hi);
        acc2 = _mm256_fmadd_ps(_mm256_load_ps(a + t + 16), lo, acc2);
        acc3 = _mm256_fmadd_ps(_mm256_load_ps(a + t + 24), hi, acc3);
    }
    return _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
}

/* P_j = ((v_j0+v_j1)+(v_j2+v_j3)) + ((v_j4+v_j5)+(v_j6+v_j7)) for the 8 blocks of a group. */
static inline __m256 reduce8x8(const __m256 *v) {
    __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
    __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* (u_0 + u_2) + (u_1 + u_3) with u_i = t_i + t_{i+4}. */
static inline float hsum8(__m256 t) {
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    __m128 w = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(w, _mm_shuffle_ps(w, w, 1)));
}

/* The epilogue, 8 columns at a time: + bias in fp32, then one RNE rounding. bf16 is the integer form of
 * bfp8_bf16_from_f32 (NaN -> quiet NaN, sign kept); fp16 is F16C's conversion (RNE, overflow -> inf), which agrees
 * with bfp8_f16_from_f32 on every non-NaN value. Ragged columns go through the scalar bfp8_cpu_store. */
static inline __m256 load_bias8(const void *bias, bfp8_dtype dt, int64_t i) {
    switch (dt) {
    case BFP8_DTYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)bias + i))), 16));
    case BFP8_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)bias + i)));
    default: return _mm256_loadu_ps((const float *)bias + i);
    }
}

static inline __m128i bf16_from_f32x8(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                        _mm256_set1_epi32(0x7F800000));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
    __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); /* 16-bit halves of both lanes, in order */
    return _mm256_castsi256_si128(r);
}

static void avx2_store(const bfp8_cpu_plan *p, int64_t m0, int64_t rows, int64_t n0, int64_t cols, const float *tot,
                       int64_t ld) {
    int64_t vec_cols = cols / 8 * 8;
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = (m0 + r) * p->n + n0;
        for (int64_t c = 0; c < vec_cols; c += 8) {
            __m256 v = _mm256_loadu_ps(tot + r * ld + c);
            if (p->bias) v = _mm256_add_ps(v, load_bias8(p->bias, p->bias_dtype, n0 + c));
            switch (p->y_dtype) {
            case BFP8_DTYPE_BF16:
                _mm_storeu_si128((__m128i *)((uint16_t *)p->y + base + c), bf16_from_f32x8(v));
                break;
            case BFP8_DTYPE_F16:
                _mm_storeu_si128((__m128i *)((uint16_t *)p->y + base + c),
                                 _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
                break;
            default: _mm256_storeu_ps((float *)p->y + base + c, v); break;
            }
            /* inf or NaN (|v| not below inf, unordered included): the overflow path for those lanes. */
            __m256 mag = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
            int bad = _mm256_movemask_ps(_mm256_cmp_ps(mag, _mm256_set1_ps(INFINITY), _CMP_NLT_UQ));
            for (int i = 0; bad; i++, bad >>= 1)
                if (bad & 1) bfp8_cpu_store_exact(p, m0 + r, n0 + c + i);
        }
    }
    if (vec_cols < cols) bfp8_cpu_store(p, m0, rows, n0 + vec_cols, cols - vec_cols, tot + vec_cols, ld);
}

/* M = 1: the lanes of weight block kb of one row (32-lane order, cpu.h), decoded on the fly when it is full and
 * NaN-free. The weight streams from memory once: it is prefetched ahead (rows are contiguous, so running past a
 * row's end prefetches the next one; a prefetch never faults). */
static inline __attribute__((always_inline)) __m256 m1_block(const bfp8_cpu_plan *p, const uint8_t *brow,
                                                              int64_t kb, float *buf) {
    int64_t k0 = kb * BFP8_BLOCK, len = p->k - k0 < BFP8_BLOCK ? p->k - k0 : BFP8_BLOCK;
    _mm_prefetch((const char *)(brow + k0 + BFP8_CPU_PREFETCH), _MM_HINT_T0);
    _mm_prefetch((const char *)(brow + k0 + BFP8_CPU_PREFETCH + 64), _MM_HINT_T0);
    if (len == BFP8_BLOCK && !block_has_nan(brow + k0)) return block_lanes_fused(p->a_f32 + k0, brow + k0);
    decode_block(brow + k0, len, buf);
    return block_lanes(p->a_f32 + k0, buf);
}

/* Out of line for the long-K loop: inlining all 8 blocks of a group there spills registers (measured slower). */
static __attribute__((noinline)) __m256 m1_block_outlined(const bfp8_cpu_plan *p, const uint8_t *brow, int64_t kb,
                                                         float *buf) {
    return m1_block(p, brow, kb, buf);
}

/* M = 1 with K <= 512 (at most 4 blocks): two rows share one 8-block reduction, row A in lanes 0-3 and row B in
 * lanes 4-7. Every lane's arithmetic is that of the one-row order: P_j and T_j depend on lane j alone, a row's
 * missing blocks would add T_{i+4} = +0 (T starts at +0 and never becomes -0 under round-to-nearest), so
 * (T_0 + T_2) + (T_1 + T_3) is exactly the canonical total. */
static void avx2_m1_rows_short_k(const bfp8_cpu_plan *p, int64_t n0, int64_t n1, float *tot, float *buf) {
    const __m256 k256 = _mm256_set1_ps(256.0f), zero = _mm256_setzero_ps();
    const __m128 sa = _mm_load_ps(p->sa);
    for (int64_t n = n0; n < n1; n += 2) {
        int rows = n1 - n >= 2 ? 2 : 1;
        __m256 v[8];
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 4; j++)
                v[r * 4 + j] = r < rows && j < p->kblocks ? m1_block(p, p->b + (n + r) * p->k, j, buf) : zero;
        __m128 sa_a = _mm_mul_ps(sa, _mm_load_ps(p->sb + (n / BFP8_BLOCK) * p->sld));
        __m128 sa_b = _mm_mul_ps(sa, _mm_load_ps(p->sb + ((n + rows - 1) / BFP8_BLOCK) * p->sld));
        __m256 t = _mm256_fmadd_ps(_mm256_set_m128(sa_b, sa_a), _mm256_mul_ps(reduce8x8(v), k256), zero);
        for (int r = 0; r < rows; r++) {
            __m128 u = r ? _mm256_extractf128_ps(t, 1) : _mm256_castps256_ps128(t);
            __m128 w = _mm_add_ps(u, _mm_movehl_ps(u, u));
            tot[n - n0 + r] = _mm_cvtss_f32(_mm_add_ss(w, _mm_shuffle_ps(w, w, 1)));
        }
    }
}

/* M = 1: one weight row at a time, 32-lane blocks (cpu.h), decoding on the fly. */
static void avx2_m1_rows(const bfp8_cpu_plan *p, int64_t n0, int64_t n1, float *scratch) {
    float *tot = scratch, *buf = scratch + 64;
    if (p->kblocks <= 4) {
        avx2_m1_rows_short_k(p, n0, n1, tot, buf);
    } else {
        const __m256 k256 = _mm256_set1_ps(256.0f), zero = _mm256_setzero_ps();
        for (int64_t n = n0; n < n1; n++) {
            const uint8_t *brow = p->b + n * p->k;
            const float *sb = p->sb + (n / BFP8_BLOCK) * p->sld;
            __m256 t = zero;
            for (int64_t g = 0; g * 8 < p->kblocks; g++) {
                __m256 v[8];
                for (int j = 0; j < 8; j++)
                    v[j] = g * 8 + j < p->kblocks ? m1_block_outlined(p, brow, g * 8 + j, buf) : zero;
                __m256 s = _mm256_mul_ps(_mm256_load_ps(p->sa + g * 8), _mm256_load_ps(sb + g * 8));
                t = _mm256_fmadd_ps(s, _mm256_mul_ps(reduce8x8(v), k256), t);
            }
            tot[n - n0] = hsum8(t);
        }
    }
    avx2_store(p, 0, 1, n0, n1 - n0, tot, BFP8_CPU_SMALL_ROWS);
}

/* 8-lane block dot products of R activation rows (R = 1..3) against 4 decoded weight rows b [4][128]: each
 * activation vector feeds 4 weight rows and each weight vector R activation rows, so the activations stream from
 * cache a quarter as often as row by row. out[r * 4 + q]: lanes of (row r, weight row q). */
#define BFP8_UNROLL _Pragma("GCC unroll 4")
#define BFP8_QUAD_KERNEL(NAME, R)                                                                                  \
    static inline void NAME(const float *a, int64_t lda, const float *b, __m256 *out) {                          \
        __m256 acc[R][4];                                                                                        \
        BFP8_UNROLL for (int r = 0; r < R; r++) BFP8_UNROLL for (int q = 0; q < 4; q++) acc[r][q] =              \
            _mm256_setzero_ps();                                                                                 \
        for (int kk = 0; kk < BFP8_BLOCK; kk += 8) {                                                             \
            __m256 av[R];                                                                                        \
            BFP8_UNROLL for (int r = 0; r < R; r++) av[r] = _mm256_load_ps(a + r * lda + kk);                    \
            BFP8_UNROLL for (int q = 0; q < 4; q++) {                                                            \
                __m256 bq = _mm256_load_ps(b + q * BFP8_BLOCK + kk);                                             \
                BFP8_UNROLL for (int r = 0; r < R; r++) acc[r][q] = _mm256_fmadd_ps(av[r], bq, acc[r][q]);       \
            }                                                                                                    \
        }                                                                                                        \
        BFP8_UNROLL for (int r = 0; r < R; r++) BFP8_UNROLL for (int q = 0; q < 4; q++) out[r * 4 + q] =         \
            acc[r][q];                                                                                           \
    }
BFP8_QUAD_KERNEL(quad_lanes_1, 1)
BFP8_QUAD_KERNEL(quad_lanes_2, 2)
BFP8_QUAD_KERNEL(quad_lanes_3, 3)

/* M >= 2: weight rows four at a time, 8-lane blocks (cpu.h). Scratch: T [m][4][8], V [m][4][8][8], tot [m][16],
 * buf [4][128]. */
static void avx2_quad_rows(const bfp8_cpu_plan *p, int64_t n0, int64_t n1, float *scratch) {
    const int64_t m_count = p->m;
    float *T = scratch, *V = T + m_count * 32, *tot = V + m_count * 256, *buf = tot + m_count * BFP8_CPU_SMALL_ROWS;
    const __m256 k256 = _mm256_set1_ps(256.0f);
    for (int64_t nq = n0; nq < n1; nq += 4) {
        int nr = n1 - nq < 4 ? (int)(n1 - nq) : 4;
        for (int64_t i = 0; i < m_count * 4; i++) _mm256_store_ps(T + i * 8, _mm256_setzero_ps());
        for (int64_t g = 0; g * 8 < p->kblocks; g++) {
            for (int j = 0; j < 8; j++) {
                int64_t kb = g * 8 + j, k0 = kb * BFP8_BLOCK;
                if (kb >= p->kblocks) {
                    for (int64_t i = 0; i < m_count * 4; i++) _mm256_store_ps(V + (i * 8 + j) * 8, _mm256_setzero_ps());
                    continue;
                }
                int64_t len = p->k - k0 < BFP8_BLOCK ? p->k - k0 : BFP8_BLOCK;
                for (int q = 0; q < 4; q++) {
                    if (q < nr) {
                        const uint8_t *src = p->b + (nq + q) * p->k + k0;
                        _mm_prefetch((const char *)(src + BFP8_CPU_PREFETCH), _MM_HINT_T0);
                        _mm_prefetch((const char *)(src + BFP8_CPU_PREFETCH + 64), _MM_HINT_T0);
                        decode_block(src, len, buf + q * BFP8_BLOCK);
                    } else {
                        for (int i = 0; i < BFP8_BLOCK; i += 8)
                            _mm256_store_ps(buf + q * BFP8_BLOCK + i, _mm256_setzero_ps());
                    }
                }
                __m256 out[12];
                int64_t m = 0;
                const float *a = p->a_f32 + k0;
                for (; m + 3 <= m_count; m += 3) {
                    quad_lanes_3(a + m * p->kpad, p->kpad, buf, out);
                    for (int i = 0; i < 12; i++) _mm256_store_ps(V + ((m * 4 + i) * 8 + j) * 8, out[i]);
                }
                if (m_count - m == 2) {
                    quad_lanes_2(a + m * p->kpad, p->kpad, buf, out);
                    for (int i = 0; i < 8; i++) _mm256_store_ps(V + ((m * 4 + i) * 8 + j) * 8, out[i]);
                } else if (m_count - m == 1) {
                    quad_lanes_1(a + m * p->kpad, p->kpad, buf, out);
                    for (int i = 0; i < 4; i++) _mm256_store_ps(V + ((m * 4 + i) * 8 + j) * 8, out[i]);
                }
            }
            for (int64_t m = 0; m < m_count; m++) {
                __m256 sav = _mm256_load_ps(p->sa + m * p->sld + g * 8);
                for (int q = 0; q < nr; q++) {
                    __m256 v[8];
                    const float *vq = V + (m * 4 + q) * 64;
                    for (int j = 0; j < 8; j++) v[j] = _mm256_load_ps(vq + j * 8);
                    __m256 s = _mm256_mul_ps(sav, _mm256_load_ps(p->sb + ((nq + q) / BFP8_BLOCK) * p->sld + g * 8));
                    float *t = T + (m * 4 + q) * 8;
                    _mm256_store_ps(t, _mm256_fmadd_ps(s, _mm256_mul_ps(reduce8x8(v), k256), _mm256_load_ps(t)));
                }
            }
        }
        for (int64_t m = 0; m < m_count; m++)
            for (int q = 0; q < nr; q++)
                tot[m * BFP8_CPU_SMALL_ROWS + (nq - n0) + q] = hsum8(_mm256_load_ps(T + (m * 4 + q) * 8));
    }
    avx2_store(p, 0, m_count, n0, n1 - n0, tot, BFP8_CPU_SMALL_ROWS);
}

static void avx2_small_m_rows(const bfp8_cpu_plan *p, int64_t n0, int64_t n1, float *scratch) {
    if (p->m == 1)
        avx2_m1_rows(p, n0, n1, scratch);
    else
        avx2_quad_rows(p, n0, n1, scratch);
}

/* 8x8 transpose of rows r[0..7] in place. */
static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

static void avx2_pack_b(const bfp8_cpu_plan *p, int64_t n0, int64_t kb0, int64_t kb1, float *bp) {
    _Alignas(32) float rows[8][BFP8_BLOCK];
    for (int64_t kb = kb0; kb < kb1; kb++) {
        int64_t k0 = kb * BFP8_BLOCK, len = p->k - k0 < BFP8_BLOCK ? p->k - k0 : BFP8_BLOCK;
        float *dst = bp + (kb - kb0) * BFP8_BLOCK * BFP8_CPU_NR;
        for (int half = 0; half < BFP8_CPU_NR; half += 8) {
            for (int j = 0; j < 8; j++) {
                int64_t n = n0 + half + j;
                if (n < p->n)
                    decode_block(p->b + n * p->k + k0, len, rows[j]);
                else
                    for (int i = 0; i < BFP8_BLOCK; i++) rows[j][i] = 0.0f;
            }
            for (int kk = 0; kk < BFP8_BLOCK; kk += 8) {
                __m256 r[8];
                for (int j = 0; j < 8; j++) r[j] = _mm256_load_ps(rows[j] + kk);
                transpose8(r);
                for (int i = 0; i < 8; i++) _mm256_store_ps(dst + (kk + i) * BFP8_CPU_NR + half, r[i]);
            }
        }
    }
}

static void avx2_tile(const float *ap, const float *sp, const float *bp, const float *sb_row, int64_t kblocks,
                      float *tot) {
    __m256 t[BFP8_CPU_MR][2];
    for (int r = 0; r < BFP8_CPU_MR; r++) {
        t[r][0] = _mm256_loadu_ps(tot + r * BFP8_CPU_NR);
        t[r][1] = _mm256_loadu_ps(tot + r * BFP8_CPU_NR + 8);
    }
    const __m256 k256 = _mm256_set1_ps(256.0f);
    for (int64_t kb = 0; kb < kblocks; kb++) {
        const float *a = ap + kb * BFP8_BLOCK * BFP8_CPU_MR, *b = bp + kb * BFP8_BLOCK * BFP8_CPU_NR;
        __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
               c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
        for (int kk = 0; kk < BFP8_BLOCK; kk++, a += BFP8_CPU_MR, b += BFP8_CPU_NR) {
            __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8), x;
            x = _mm256_broadcast_ss(a + 0);
            c00 = _mm256_fmadd_ps(x, b0, c00);
            c01 = _mm256_fmadd_ps(x, b1, c01);
            x = _mm256_broadcast_ss(a + 1);
            c10 = _mm256_fmadd_ps(x, b0, c10);
            c11 = _mm256_fmadd_ps(x, b1, c11);
            x = _mm256_broadcast_ss(a + 2);
            c20 = _mm256_fmadd_ps(x, b0, c20);
            c21 = _mm256_fmadd_ps(x, b1, c21);
            x = _mm256_broadcast_ss(a + 3);
            c30 = _mm256_fmadd_ps(x, b0, c30);
            c31 = _mm256_fmadd_ps(x, b1, c31);
            x = _mm256_broadcast_ss(a + 4);
            c40 = _mm256_fmadd_ps(x, b0, c40);
            c41 = _mm256_fmadd_ps(x, b1, c41);
            x = _mm256_broadcast_ss(a + 5);
            c50 = _mm256_fmadd_ps(x, b0, c50);
            c51 = _mm256_fmadd_ps(x, b1, c51);
        }
        __m256 c[BFP8_CPU_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
        for (int r = 0; r < BFP8_CPU_MR; r++) {
            __m256 s = _mm256_set1_ps(sp[kb * BFP8_CPU_MR + r] * sb_row[kb]);
            t[r][0] = _mm256_fmadd_ps(s, _mm256_mul_ps(c[r][0], k256), t[r][0]);
            t[r][1] = _mm256_fmadd_ps(s, _mm256_mul_ps(c[r][1], k256), t[r][1]);
        }
    }
    for (int r = 0; r < BFP8_CPU_MR; r++) {
        _mm256_storeu_ps(tot + r * BFP8_CPU_NR, t[r][0]);
        _mm256_storeu_ps(tot + r * BFP8_CPU_NR + 8, t[r][1]);
    }
}

const bfp8_cpu_kernels bfp8_cpu_kernels_avx2 = {
    .isa = "avx2",
    .small_m_rows = avx2_small_m_rows,
    .pack_b = avx2_pack_b,
    .tile = avx2_tile,
    .store = avx2_store,
};
