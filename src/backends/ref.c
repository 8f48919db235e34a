/* The reference backend: the oracle every other backend is measured against (docs/numerics.md).
 * Products and sums in double, the two scales applied per 128-deep K block, bias added, one final rounding. */
#include "internal.h"

#include <pthread.h>

static double e4m3_table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void init_table(void) {
    for (int c = 0; c < 256; c++) e4m3_table[c] = (double)bfp8_e4m3_to_f32((uint8_t)c);
}

/* Products of two E4M3 values are multiples of 2^-18 below 2^18, so a block's partial (at most 128 of them) is
 * exact in double; the promotion and the total round in double, far below the output's rounding. */
double bfp8_ref_element(const bfp8_gemm_args *a, int64_t m, int64_t n) {
    pthread_once(&table_once, init_table);
    const int64_t kblocks = bfp8_ceil_div(a->k, BFP8_BLOCK);
    const uint8_t *arow = a->a + m * a->k, *brow = a->b + n * a->k;
    double total = 0.0;
    for (int64_t kb = 0; kb < kblocks; kb++) {
        int64_t k0 = kb * BFP8_BLOCK, k1 = k0 + BFP8_BLOCK < a->k ? k0 + BFP8_BLOCK : a->k;
        double partial = 0.0;
        for (int64_t k = k0; k < k1; k++) partial += e4m3_table[arow[k]] * e4m3_table[brow[k]];
        total += (double)bfp8_scales_at(&a->a_scales, m, kb) *
                 (double)bfp8_scales_at(&a->b_scales, n / BFP8_BLOCK, kb) * partial;
    }
    if (a->bias) total += (double)bfp8_load_f32(a->bias, a->bias_dtype, n);
    return total;
}

static bfp8_status ref_gemm(const bfp8_backend *self, const bfp8_gemm_args *a) {
    for (int64_t m = 0; m < a->m; m++)
        for (int64_t n = 0; n < a->n; n++) bfp8_store_f64(a->y, a->y_dtype, m * a->n + n, bfp8_ref_element(a, m, n));
    return BFP8_OK;
}

/* Per group exactly the dense reference on that group's rows (groups on parallel threads: each is serial). */
static bfp8_status ref_grouped_gemm(const bfp8_backend *self, const bfp8_grouped_gemm_args *a) {
    return bfp8_grouped_run_dense(self, a, 1e300);
}

const bfp8_backend bfp8_backend_ref = {
    .name = "ref",
    .summary = "scalar reference: double accumulation, one rounding (the oracle)",
    .caps =
        {
            .device = BFP8_DEVICE_CPU,
            .out_dtypes = BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16),
            .scale_formats = BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0),
            .a_layouts = (1u << BFP8_LAYOUT_COUNT) - 1, /* reads any layout through bfp8_scales_at */
            .b_layouts = (1u << BFP8_LAYOUT_COUNT) - 1,
            .bias_dtypes = BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16),
            .priority = 0,
            .grouped_layouts = BFP8_BIT(BFP8_GROUPED_CONTIGUOUS) | BFP8_BIT(BFP8_GROUPED_MASKED),
        },
    .gemm = ref_gemm,
    .grouped_gemm = ref_grouped_gemm,
};
