/* The AVX2 quantizer kernels (src/quant_avx2.c) against the scalar ones: the same bytes, scales and non-finite
 * counts, switched in one process with the `cpu` backend's ISA hook. The scalar path itself is tested against an
 * independent reference in test_quant.c. Skipped (with a note) on a CPU without AVX2. */
#include "check.h"
#include "internal.h"
#include "backends/cpu.h"
#include "quant_avx2.h"

#include <math.h>

/* ---- the encoder on its own: every fp32 around each rounding position ---------------------------------------- */

static int encode_mismatches;

/* Encodes xs[0..n) (n <= 128) with scale 1 through the AVX2 kernel and compares with bfp8_e4m3_from_f32. */
static void check_encode_batch(const float *xs, int n) {
    uint8_t q[BFP8_BLOCK + 8];
    memset(q, 0xA5, sizeof q);
    bfp8_quant_span_encode_avx2(xs, n, 1.0f, q);
    for (int i = 0; i < n; i++) {
        uint8_t want = isfinite(xs[i]) ? bfp8_e4m3_from_f32(xs[i]) : (signbit(xs[i]) ? 0xFF : 0x7F);
        if (q[i] != want && encode_mismatches++ < 5)
            fprintf(stderr, "encode(%a = 0x%08x) = 0x%02x, want 0x%02x\n", xs[i], bfp8_f32_bits(xs[i]), q[i], want);
    }
    for (int i = n; i < (int)sizeof q; i++)
        if (q[i] != 0xA5 && encode_mismatches++ < 5) fprintf(stderr, "encode wrote past n = %d at %d\n", n, i);
}

typedef struct batch {
    float xs[BFP8_BLOCK];
    int n;
} batch;

static void batch_add(batch *b, float x) {
    b->xs[b->n++] = x;
    if (b->n == BFP8_BLOCK) {
        check_encode_batch(b->xs, b->n);
        b->n = 0;
    }
}

static void test_encoder_exhaustive(void) {
    batch b = {.n = 0};
    /* All 256 codes: the value, its fp32 neighbours, and the midpoints to the next code with their neighbours. */
    for (int c = 0; c < 256; c++) {
        float v = bfp8_e4m3_to_f32((uint8_t)c);
        batch_add(&b, v);
        if (isnan(v)) continue;
        batch_add(&b, nextafterf(v, INFINITY));
        batch_add(&b, nextafterf(v, -INFINITY));
        if ((c & 0x7F) < 0x7E) {
            float next = bfp8_e4m3_to_f32((uint8_t)(c + 1));
            float mid = (float)(((double)v + (double)next) / 2); /* exact: fp8 midpoints fit in fp32 */
            batch_add(&b, mid);
            batch_add(&b, nextafterf(mid, INFINITY));
            batch_add(&b, nextafterf(mid, -INFINITY));
        }
    }
    /* Every exponent and sign, 6 top mantissa bits, and the tie patterns at every shift the encoder uses (20 for
     * normals, 21..26 for E4M3 subnormals): below, at and above half, and the all-ones tail. */
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t e = 0; e < 256; e++)
            for (uint32_t top = 0; top < 64; top++)
                for (int shift = 19; shift <= 27; shift++) {
                    uint32_t half = 1u << (shift - 1);
                    uint32_t tails[] = {0, 1, half - 1, half, half + 1, (half << 1) - 1};
                    for (int t = 0; t < 6; t++) {
                        uint32_t mant = ((top << 17) | tails[t]) & 0x7FFFFFu;
                        batch_add(&b, bfp8_f32_from_bits((sign << 31) | (e << 23) | mant));
                    }
                }
    /* Random bit patterns: NaN payloads, infinities, fp32 subnormals included. */
    for (int i = 0; i < 200000; i++) batch_add(&b, bfp8_f32_from_bits((uint32_t)test_rand_u64()));
    batch_add(&b, 0.0f);
    batch_add(&b, -0.0f);
    batch_add(&b, INFINITY);
    batch_add(&b, -INFINITY);
    batch_add(&b, 448.0f);
    batch_add(&b, 464.0f);
    batch_add(&b, -1e30f);
    if (b.n) check_encode_batch(b.xs, b.n);
    /* Every span length, so the partial vectors are covered. */
    for (int n = 0; n <= BFP8_BLOCK; n++) {
        float xs[BFP8_BLOCK];
        for (int i = 0; i < n; i++) xs[i] = test_randn(300.0f);
        check_encode_batch(xs, n);
    }
    CHECK(encode_mismatches == 0, "AVX2 encoder: %d mismatches", encode_mismatches);
}

/* ---- amax on its own ---------------------------------------------------------------------------------------- */

static void test_amax(void) {
    int bad_cases = 0;
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + trial % BFP8_BLOCK;
        float xs[BFP8_BLOCK];
        float want = 0.0f;
        int64_t want_bad = 0;
        for (int i = 0; i < n; i++) {
            xs[i] = (trial & 1) ? bfp8_f32_from_bits((uint32_t)test_rand_u64())
                                : test_randn(1.0f) * ldexpf(1.0f, trial % 60 - 30);
            if (isfinite(xs[i])) want = fmaxf(want, fabsf(xs[i]));
            else want_bad++;
        }
        int64_t got_bad = 7;
        float got = bfp8_quant_span_amax_avx2(xs, n, &got_bad);
        if ((bfp8_f32_bits(got) != bfp8_f32_bits(want) || got_bad != 7 + want_bad) && bad_cases++ < 3)
            fprintf(stderr, "amax n=%d: %a (bad %lld), want %a (bad %lld)\n", n, got, (long long)got_bad - 7, want,
                    (long long)want_bad);
    }
    CHECK(bad_cases == 0, "AVX2 amax: %d mismatches", bad_cases);
}

/* ---- whole quantizers: portable vs avx2 ---------------------------------------------------------------------- */

typedef enum { KIND_ACT, KIND_WEIGHT, KIND_REQUANT } quant_kind;

typedef struct run_out {
    uint8_t *q;
    uint8_t *scales;
    int64_t bad;
} run_out;

/* One run with outputs poisoned by `poison`. For KIND_REQUANT, x is e4m3 with fp32 scales `src_scales`. */
static void run_quantizer(quant_kind kind, const void *x, bfp8_dtype dt, int64_t rows, int64_t k,
                          bfp8_scale_format format, bfp8_scale_layout layout, const bfp8_scales *src_scales,
                          int poison, run_out *out) {
    int64_t group_rows = kind == KIND_ACT ? 1 : BFP8_BLOCK;
    int64_t srows = bfp8_ceil_div(rows, group_rows), kblocks = bfp8_ceil_div(k, BFP8_BLOCK);
    size_t sbytes = bfp8_scales_bytes(layout, srows, kblocks);
    memset(out->q, poison, (size_t)(rows * k));
    memset(out->scales, poison, sbytes);
    bfp8_scales sc;
    CHECK_OK(bfp8_scales_init(&sc, format, layout, srows, kblocks, out->scales));
    out->bad = -1;
    bfp8_status st = kind == KIND_ACT      ? bfp8_quantize_act(x, dt, rows, k, out->q, &sc, &out->bad)
                     : kind == KIND_WEIGHT ? bfp8_quantize_weight(x, dt, rows, k, out->q, &sc, &out->bad)
                                           : bfp8_requantize_weight_ue8m0(x, rows, k, src_scales, out->q, &sc);
    CHECK(st == BFP8_OK, "quantize -> %s: %s", bfp8_status_name(st), bfp8_last_error());
}

/* Scalar (portable) once, then AVX2 with two poisons and each thread count: all must give the same bytes. */
static void compare_paths(quant_kind kind, const void *x, bfp8_dtype dt, int64_t rows, int64_t k,
                          bfp8_scale_format format, bfp8_scale_layout layout, const bfp8_scales *src_scales,
                          const char *what) {
    int64_t group_rows = kind == KIND_ACT ? 1 : BFP8_BLOCK;
    size_t sbytes = bfp8_scales_bytes(layout, bfp8_ceil_div(rows, group_rows), bfp8_ceil_div(k, BFP8_BLOCK));
    size_t qbytes = (size_t)(rows * k);
    run_out ref = {malloc(qbytes + 1), malloc(sbytes + 1), 0}, got = {malloc(qbytes + 1), malloc(sbytes + 1), 0};
    CHECK_OK(bfp8_cpu_force_isa("portable"));
    run_quantizer(kind, x, dt, rows, k, format, layout, src_scales, 0x5A, &ref);
    CHECK_OK(bfp8_cpu_force_isa("avx2"));
    for (int threads = 1; threads <= 2; threads++) {
        CHECK_OK(bfp8_set_num_threads(threads));
        for (int poison = 0; poison < 2; poison++) { /* an unwritten byte cannot match under both poisons */
            run_quantizer(kind, x, dt, rows, k, format, layout, src_scales, poison ? 0xFF : 0x00, &got);
            size_t first = 0;
            while (first < qbytes && got.q[first] == ref.q[first]) first++;
            CHECK(first == qbytes, "%s %s %lldx%lld %s %s: q[%zu] avx2 0x%02x, scalar 0x%02x", what,
                  bfp8_dtype_name(dt), (long long)rows, (long long)k, bfp8_scale_format_name(format),
                  bfp8_scale_layout_name(layout), first, first < qbytes ? got.q[first] : 0,
                  first < qbytes ? ref.q[first] : 0);
            CHECK(memcmp(got.scales, ref.scales, sbytes) == 0, "%s %s %lldx%lld %s %s: scales differ", what,
                  bfp8_dtype_name(dt), (long long)rows, (long long)k, bfp8_scale_format_name(format),
                  bfp8_scale_layout_name(layout));
            CHECK(got.bad == ref.bad, "%s: nonfinite %lld vs scalar %lld", what, (long long)got.bad,
                  (long long)ref.bad);
        }
    }
    CHECK_OK(bfp8_set_num_threads(0));
    CHECK_OK(bfp8_cpu_force_isa("auto"));
    free(ref.q), free(ref.scales), free(got.q), free(got.scales);
}

/* Values of many magnitudes (2^-149 .. 2^100, fp32 subnormals included) with -0, ±inf and NaN sprinkled in; per
 * row a random range so some groups have tiny amax (the 1e-10 floor) and some produce E4M3 subnormals. */
static void fill_mixed(float *x, int64_t rows, int64_t k) {
    for (int64_t r = 0; r < rows; r++) {
        int top = (int)(test_rand_u64() % 250) - 149, span = (int)(test_rand_u64() % 30);
        for (int64_t c = 0; c < k; c++) {
            float v = ldexpf(1.0f + test_rand_f32() * 0.999f, top - (int)(test_rand_u64() % (unsigned)(span + 1)));
            uint64_t pick = test_rand_u64() % 1000;
            if (pick == 0) v = NAN;
            else if (pick == 1) v = INFINITY;
            else if (pick == 2) v = 0.0f;
            else if (pick == 3) v = bfp8_f32_from_bits((uint32_t)test_rand_u64() & 0x007FFFFFu); /* fp32 subnormal */
            if (test_rand_u64() & 1) v = -v;
            x[r * k + c] = v;
        }
    }
}

/* x as dtype dt (bf16/f16: random bit patterns half the time, which reach their NaNs, infinities, subnormals). */
static void *make_input(const float *x, int64_t count, bfp8_dtype dt, bool random_bits) {
    if (dt == BFP8_DTYPE_F32) {
        float *out = malloc((size_t)count * 4 + 4);
        memcpy(out, x, (size_t)count * 4);
        return out;
    }
    uint16_t *out = malloc((size_t)count * 2 + 2);
    for (int64_t i = 0; i < count; i++)
        out[i] = random_bits ? (uint16_t)test_rand_u64()
                 : dt == BFP8_DTYPE_BF16 ? bfp8_bf16_from_f32(x[i]) : bfp8_f16_from_f32(x[i]);
    return out;
}

static const bfp8_scale_layout all_layouts[] = {BFP8_LAYOUT_ROW_MAJOR, BFP8_LAYOUT_MN_MAJOR,
                                                BFP8_LAYOUT_MN_MAJOR_ALIGNED, BFP8_LAYOUT_PACKED_UE8M0};
static const bfp8_dtype float_dtypes[] = {BFP8_DTYPE_F32, BFP8_DTYPE_BF16, BFP8_DTYPE_F16};

static void compare_all_formats(quant_kind kind, int64_t rows, int64_t k, bool random_bits) {
    float *x = malloc((size_t)(rows * k) * 4 + 4);
    fill_mixed(x, rows, k);
    for (int d = 0; d < 3; d++) {
        void *xin = make_input(x, rows * k, float_dtypes[d], random_bits);
        for (int f = 0; f < BFP8_SCALE_FORMAT_COUNT; f++)
            for (int l = 0; l < 4; l++) {
                if (all_layouts[l] == BFP8_LAYOUT_PACKED_UE8M0 && f != BFP8_SCALE_UE8M0) continue;
                compare_paths(kind, xin, float_dtypes[d], rows, k, (bfp8_scale_format)f, all_layouts[l], NULL,
                              kind == KIND_ACT ? "act" : "weight");
            }
        free(xin);
    }
    free(x);
}

static void test_quantizers(void) {
    for (int64_t k = 1; k <= 130; k++) compare_all_formats(KIND_ACT, 3, k, k % 2 == 0);
    compare_all_formats(KIND_ACT, 5, 300, false);
    compare_all_formats(KIND_ACT, 5, 300, true);
    int64_t weight_ks[] = {1, 7, 128, 129, 300};
    for (int i = 0; i < 5; i++) compare_all_formats(KIND_WEIGHT, 130, weight_ks[i], i % 2 == 1);
    /* Large enough to be split over threads (the bytes must not depend on the thread count). */
    int64_t rows = 300, k = 1100;
    float *x = malloc((size_t)(rows * k) * 4);
    fill_mixed(x, rows, k);
    compare_paths(KIND_ACT, x, BFP8_DTYPE_F32, rows, k, BFP8_SCALE_FP32, BFP8_LAYOUT_MN_MAJOR_ALIGNED, NULL, "act");
    compare_paths(KIND_WEIGHT, x, BFP8_DTYPE_F32, rows, k, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, NULL,
                  "weight");
    free(x);
}

/* A group whose amax is 448 with an fp32 scale is quantized with scale 1: its other values are every code
 * neighbourhood (midpoints, just above/below), so the full path meets each rounding case, subnormals and
 * saturation (values above 448 in a row whose amax is larger use a scale below 1 and round up to 448 or more). */
static void test_code_neighbourhoods(void) {
    float vals[2048];
    int n = 0;
    for (int c = 0; c < 0x7F; c++) {
        float v = bfp8_e4m3_to_f32((uint8_t)c);
        float next = c < 0x7E ? bfp8_e4m3_to_f32((uint8_t)(c + 1)) : 480.0f;
        float mid = (float)(((double)v + (double)next) / 2);
        float cand[] = {v, nextafterf(v, 0), nextafterf(v, INFINITY), mid, nextafterf(mid, 0),
                        nextafterf(mid, INFINITY)};
        for (int i = 0; i < 6; i++) {
            vals[n++] = cand[i];
            vals[n++] = -cand[i];
        }
    }
    int64_t k = BFP8_BLOCK, rows = bfp8_ceil_div(n, BFP8_BLOCK - 1);
    float *x = malloc((size_t)(rows * k) * 4);
    for (int64_t r = 0; r < rows; r++) {
        x[r * k] = 448.0f;
        for (int64_t c = 1; c < k; c++) {
            int64_t i = r * (k - 1) + c - 1;
            x[r * k + c] = i < n ? (vals[i] > 448.0f ? 448.0f : vals[i] < -448.0f ? -448.0f : vals[i]) : -0.0f;
        }
    }
    compare_paths(KIND_ACT, x, BFP8_DTYPE_F32, rows, k, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, NULL, "neighbourhoods");
    compare_paths(KIND_ACT, x, BFP8_DTYPE_F32, rows, k, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, NULL,
                  "neighbourhoods ue8m0");
    /* Same values times 1.5 with amax 672: scale 1.5, quotients saturate above 448. */
    for (int64_t i = 0; i < rows * k; i++) x[i] *= 1.5f;
    compare_paths(KIND_ACT, x, BFP8_DTYPE_F32, rows, k, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, NULL,
                  "neighbourhoods x1.5");
    free(x);
}

/* Requantization (e4m3 source with fp32 scales -> ue8m0): the E4M3 source route with the AVX2 span kernels. */
static void test_requantize(void) {
    int64_t n = 130, k = 300, kb = bfp8_ceil_div(k, BFP8_BLOCK);
    float *w = malloc((size_t)(n * k) * 4);
    uint8_t *q = malloc((size_t)(n * k));
    float sdata[2 * 3];
    for (int64_t i = 0; i < n * k; i++) w[i] = test_randn(1.0f) * ldexpf(1.0f, (int)(test_rand_u64() % 20) - 10);
    bfp8_scales sc;
    CHECK_OK(bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 2, kb, sdata));
    CHECK_OK(bfp8_quantize_weight(w, BFP8_DTYPE_F32, n, k, q, &sc, NULL));
    compare_paths(KIND_REQUANT, q, BFP8_DTYPE_E4M3, n, k, BFP8_SCALE_UE8M0, BFP8_LAYOUT_PACKED_UE8M0, &sc, "requant");
    compare_paths(KIND_REQUANT, q, BFP8_DTYPE_E4M3, n, k, BFP8_SCALE_UE8M0, BFP8_LAYOUT_MN_MAJOR, &sc, "requant");
    free(w), free(q);
}

int main(void) {
    test_seed();
    if (bfp8_cpu_force_isa("avx2") != BFP8_OK) {
        printf("test_quant_simd: no AVX2/FMA/F16C on this CPU, AVX2 quantizer not tested\n");
        CHECK_OK(bfp8_cpu_force_isa("auto"));
        return TEST_SUMMARY("test_quant_simd");
    }
    CHECK_OK(bfp8_cpu_force_isa("auto"));
    test_encoder_exhaustive();
    test_amax();
    test_quantizers();
    test_code_neighbourhoods();
    test_requantize();
    return TEST_SUMMARY("test_quant_simd");
}
