/* Private interface between the `cpu` backend's driver (cpu.c) and its ISA-specific kernels (cpu_avx2.c).
 *
 * Every kernel has a portable C twin in cpu.c that computes in the same order with the same fused operations, so
 * both paths give the same bytes (NaN payloads aside). Canonical orders (docs/numerics.md leaves "fp32 or better"):
 * - small-M path, one (m, n): per 128-block kb, 8 lanes v_i. For M = 1: 32 fp32 lanes, lane L accumulating the
 *   products k = L mod 32 with FMA in k order, folded to v_i = (L_i + L_{8+i}) + (L_{16+i} + L_{24+i}); for M >= 2:
 *   lane i accumulates the products k = i mod 8 with FMA in k order (the kernel blocks 4 weight rows x 3
 *   activation rows in registers, which leaves one accumulator per pair). Blocks go in groups of 8
 *   (missing blocks are zeros): P_j = ((v_0+v_1)+(v_2+v_3)) + ((v_4+v_5)+(v_6+v_7)) of block 8g+j, then
 *   T_j = fma(sa[m,kb] * sb[n/128,kb], P_j, T_j) per lane j, then u_i = T_i + T_{i+4} (i < 4) and
 *   total = (u_0 + u_2) + (u_1 + u_3). (Lanes along K; the per-group transposed reduction avoids one horizontal
 *   sum per block.)
 * - large-M path, one (m, n): per block the partial is an FMA chain over its 128 k in order (zero-padded), and
 *   total = fma(sa[m,kb] * sb[n/128,kb], partial, total) for kb ascending from 0.
 * - both: y = round(total + bias). Partials are computed on weights times 2^-8 and multiplied by 256 (exact).
 * - overflow: where total + bias is inf or NaN in fp32 (a promotion beyond fp32 on finite inputs, or a non-finite
 *   input), the element is recomputed as `ref` computes it (bfp8_ref_element, in double) and rounded once, so cpu
 *   and ref agree there byte for byte. A rare path: one O(K) scalar pass per such element. */
#ifndef BFP8_BACKENDS_CPU_H
#define BFP8_BACKENDS_CPU_H

#include "internal.h"
#include "cpu_features.h" /* bfp8_cpu_force_isa, bfp8_cpu_isa_name */

#define BFP8_CPU_MR 6  /* micro-tile rows (large-M path) */
#define BFP8_CPU_NR 16 /* micro-tile columns; divides 128 so a panel lies in one weight block row */

typedef struct bfp8_cpu_plan {
    int64_t m, n, k, kblocks, kpad; /* kpad = kblocks * 128 */
    const uint8_t *a, *b;
    int64_t sld;     /* row stride of sa and sb: kblocks rounded up to 8, the padding zero */
    const float *sa; /* [m][sld] */
    const float *sb; /* [ceil(n/128)][sld] */
    const float *a_f32; /* small-M path: decoded activations [m][kpad], zero-padded */
    const void *bias;
    bfp8_dtype bias_dtype;
    void *y;
    bfp8_dtype y_dtype;
    const bfp8_gemm_args *args; /* the call, for the overflow path */
} bfp8_cpu_plan;

typedef struct bfp8_cpu_kernels {
    const char *isa;
    /* Small-M path: y[:, n0:n1] with n1 - n0 <= BFP8_CPU_SMALL_ROWS; scratch: BFP8_CPU_SMALL_SCRATCH(m) floats,
     * 64-byte aligned. */
    void (*small_m_rows)(const bfp8_cpu_plan *p, int64_t n0, int64_t n1, float *scratch);
    /* Packs K blocks [kb0, kb1) of weight rows [n0, n0+16) (zero beyond n) as [kb - kb0][128][16] floats of
     * value * 2^-8. */
    void (*pack_b)(const bfp8_cpu_plan *p, int64_t n0, int64_t kb0, int64_t kb1, float *bp);
    /* One 6x16 tile over `kblocks` K blocks: ap [kb][128][6] exact activations, sp [kb][6] activation scales,
     * bp from pack_b, sb_row the weight scales of the panel's block row (all four starting at the same block);
     * tot [6][16] holds the running totals (zero before the first block) and receives them. Splitting K into
     * slices this way keeps the canonical order: the totals pass through memory exactly. */
    void (*tile)(const float *ap, const float *sp, const float *bp, const float *sb_row, int64_t kblocks,
                 float *tot);
    /* The epilogue, bit-identical to bfp8_cpu_store on every non-NaN value. */
    void (*store)(const bfp8_cpu_plan *p, int64_t m0, int64_t rows, int64_t n0, int64_t cols, const float *tot,
                  int64_t ld);
} bfp8_cpu_kernels;

extern const bfp8_cpu_kernels bfp8_cpu_kernels_portable;
extern const bfp8_cpu_kernels bfp8_cpu_kernels_avx2;

/* E4M3 values times 2^-8 (what the F16C widening yields), NaN kept. Filled by bfp8_cpu_tables_init. */
extern float bfp8_cpu_e4m3_scaled[256];
extern float bfp8_cpu_e4m3_exact[256];
void bfp8_cpu_tables_init(void);

/* Writes y[m0 + r, n0 + c] = round(tot[r * ld + c] + bias[n0 + c]) for r < rows, c < cols. */
void bfp8_cpu_store(const bfp8_cpu_plan *p, int64_t m0, int64_t rows, int64_t n0, int64_t cols, const float *tot,
                    int64_t ld);
/* The overflow path: y[m, n] as `ref` writes it. */
void bfp8_cpu_store_exact(const bfp8_cpu_plan *p, int64_t m, int64_t n);

/* Test hooks (the ISA's is bfp8_cpu_force_isa, cpu_features.h). Path: 0 auto, 1 small-M, 2 large-M.
 * Process-wide; tests use them to compare the paths byte for byte. */
void bfp8_cpu_force_path(int path);
/* K blocks per slice of the large-M path (0: the default, BFP8_CPU_KC_BLOCKS). */
void bfp8_cpu_force_kc_blocks(int kc_blocks);
#define BFP8_CPU_KC_BLOCKS 16
/* M at or below which the small-M path runs. */
#define BFP8_CPU_SMALL_M 8
/* Weight rows per small-M call (n1 - n0 <= this). */
#define BFP8_CPU_SMALL_ROWS 16
/* Small-M scratch per thread: T [m][4][8], V [m][4][8][8], tot [m][16], buf [4][128]. */
#define BFP8_CPU_SMALL_SCRATCH(m) ((m) * (288 + BFP8_CPU_SMALL_ROWS) + 512)

#endif
