/* Tensor parallelism on the host: the shard plans (every R from 1 to 8 on the DeepSeek-R1 shapes, the TP16/TP32
 * shards that cut a block), the local weights, and the sharded layer simulated in-process (the all-gather as a
 * copy, the all-reduce as an fp32 sum) against the unsharded layer and an independent double computation. */
#include "blockfp8_tp.h"
#include "check.h"

#include <inttypes.h>
#include <unistd.h>

static const struct { int64_t n, k; } dsr1[] = {
    {2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384}, {36864, 7168}, {7168, 18432}, {4096, 7168}, {7168, 2048},
};

/* The plan's fields against their definition, for every rank of every split. */
static void check_plans(int64_t n, int64_t k) {
    for (int mode = 0; mode < BFP8_TP_MODE_COUNT; mode++) {
        int64_t dim = mode == BFP8_TP_COLUMN ? n : k;
        for (int ranks = 1; ranks <= 8; ranks++) {
            bool even = dim % ranks == 0, cuts = even && ranks > 1 && (dim / ranks) % 128 != 0;
            int64_t covered = 0;
            for (int rank = 0; rank < ranks; rank++) {
                bfp8_shard s, shared;
                bfp8_status st = bfp8_shard_plan(n, k, mode, ranks, rank, 0, &s);
                bfp8_status st2 = bfp8_shard_plan(n, k, mode, ranks, rank, BFP8_SHARD_SHARE_BLOCKS, &shared);
                if (!even) {
                    CHECK(st == BFP8_ERR_UNSUPPORTED && strstr(bfp8_last_error(), "evenly"), "%" PRId64 " over %d: %s",
                          dim, ranks, bfp8_last_error());
                    CHECK(st2 == BFP8_ERR_UNSUPPORTED, "uneven split accepted with shared blocks");
                    continue;
                }
                CHECK(st2 == BFP8_OK, "shared-block plan of %" PRId64 " over %d failed: %s", dim, ranks, bfp8_last_error());
                if (cuts) {
                    CHECK(st == BFP8_ERR_UNSUPPORTED && strstr(bfp8_last_error(), "128"),
                          "a split that cuts blocks (%" PRId64 " over %d) -> %s: %s", dim, ranks, bfp8_status_name(st),
                          bfp8_last_error());
                } else {
                    CHECK(st == BFP8_OK, "aligned split %" PRId64 " over %d refused: %s", dim, ranks, bfp8_last_error());
                    if (st == BFP8_OK)
                        CHECK(s.begin == shared.begin && s.lead == 0 && shared.lead == 0 && s.n_local == shared.n_local,
                              "the shared-block plan differs from the aligned one");
                }
                const bfp8_shard *p = &shared;
                CHECK(p->begin == covered && p->end - p->begin == dim / ranks, "rank %d slice [%" PRId64 ", %" PRId64 ")",
                      rank, p->begin, p->end);
                covered = p->end;
                CHECK(p->lead == p->begin % 128 && p->block_begin * 128 + p->lead == p->begin, "lead %" PRId64, p->lead);
                int64_t local = mode == BFP8_TP_COLUMN ? p->n_local : p->k_local;
                int64_t other = mode == BFP8_TP_COLUMN ? p->k_local : p->n_local;
                CHECK(local == p->lead + dim / ranks && other == (mode == BFP8_TP_COLUMN ? k : n), "local shape");
                CHECK(p->block_begin + (local + 127) / 128 == (p->end + 127) / 128, "local blocks end at the slice's");
            }
            if (even) CHECK(covered == dim, "slices cover %" PRId64 " of %" PRId64, covered, dim);
        }
    }
}

/* The engines' failing shards: they are refused with the shapes named, and accepted with shared blocks. */
static void check_known_cuts(void) {
    bfp8_shard s;
    CHECK_STATUS(bfp8_shard_plan(7168, 18432, BFP8_TP_ROW, 32, 1, 0, &s), BFP8_ERR_UNSUPPORTED); /* TP32: 576 */
    CHECK(strstr(bfp8_last_error(), "576") && strstr(bfp8_last_error(), "18432"), "message: %s", bfp8_last_error());
    CHECK_OK(bfp8_shard_plan(7168, 18432, BFP8_TP_ROW, 32, 1, BFP8_SHARD_SHARE_BLOCKS, &s));
    CHECK(s.begin == 576 && s.lead == 64 && s.block_begin == 4 && s.k_local == 640, "TP32 rank 1: begin %" PRId64
          " lead %" PRId64 " k_local %" PRId64, s.begin, s.lead, s.k_local);
    CHECK_STATUS(bfp8_shard_plan(3072, 7168, BFP8_TP_COLUMN, 16, 3, 0, &s), BFP8_ERR_UNSUPPORTED); /* 192 */
    CHECK(strstr(bfp8_last_error(), "192"), "message: %s", bfp8_last_error());
    CHECK_STATUS(bfp8_shard_plan(33792, 7168, BFP8_TP_COLUMN, 16, 0, 0, &s), BFP8_ERR_UNSUPPORTED); /* 2112 */
    CHECK(strstr(bfp8_last_error(), "2112"), "message: %s", bfp8_last_error());
    CHECK_OK(bfp8_shard_plan(7168, 18432, BFP8_TP_ROW, 8, 7, 0, &s)); /* TP8: 2304 = 18 blocks */
    CHECK(s.begin == 7 * 2304 && s.lead == 0 && s.k_local == 2304, "TP8 rank 7");
    /* Bad arguments. */
    CHECK_STATUS(bfp8_shard_plan(256, 256, BFP8_TP_COLUMN, 0, 0, 0, &s), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_shard_plan(256, 256, BFP8_TP_COLUMN, 2, 2, 0, &s), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_shard_plan(256, 256, BFP8_TP_COLUMN, 2, -1, 0, &s), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_shard_plan(256, 256, (bfp8_tp_mode)7, 2, 0, 0, &s), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_shard_plan(256, 256, BFP8_TP_COLUMN, 2, 0, 0x80, &s), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_shard_plan(-1, 256, BFP8_TP_COLUMN, 2, 0, 0, &s), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_shard_plan(256, 256, BFP8_TP_COLUMN, 2, 0, 0, NULL), BFP8_ERR_INVALID_ARGUMENT);
    bfp8_tp_mode mode;
    CHECK_OK(bfp8_tp_mode_parse("row", &mode));
    CHECK(mode == BFP8_TP_ROW, "parse row");
    CHECK_STATUS(bfp8_tp_mode_parse("rows", &mode), BFP8_ERR_INVALID_ARGUMENT);
}

/* What bfp8_tp_linear's collective moves: the counts every rank sends, their dtype and the buffer's bytes. */
static void check_traffic(void) {
    bfp8_shard s;
    bfp8_tp_traffic t;
    CHECK_OK(bfp8_shard_plan(36864, 7168, BFP8_TP_COLUMN, 2, 1, 0, &s)); /* gate_up at TP2: 18432 rows each */
    CHECK_OK(bfp8_tp_traffic_get(&s, 16, BFP8_DTYPE_BF16, &t));
    CHECK(t.count == 16 * 18432 && t.dtype == BFP8_DTYPE_BF16 && t.bytes == 2 * 16 * 18432 * 2,
          "column TP2: count %" PRId64 " bytes %" PRId64, t.count, t.bytes);
    CHECK_OK(bfp8_shard_plan(7168, 18432, BFP8_TP_ROW, 2, 0, 0, &s)); /* down at TP2: the fp32 partial [m, N] */
    CHECK_OK(bfp8_tp_traffic_get(&s, 16, BFP8_DTYPE_BF16, &t));
    CHECK(t.count == 16 * 7168 && t.dtype == BFP8_DTYPE_F32 && t.bytes == 16 * 7168 * 4,
          "row TP2: count %" PRId64 " bytes %" PRId64, t.count, t.bytes);
    /* Shared blocks: 2112 over 2 is 1056 rows (8.25 blocks); rank 1 has a lead of 32, and every rank sends the
     * widest local output, 1056 + 32. */
    CHECK_OK(bfp8_shard_plan(2112, 7168, BFP8_TP_COLUMN, 2, 0, BFP8_SHARD_SHARE_BLOCKS, &s));
    CHECK_OK(bfp8_tp_traffic_get(&s, 3, BFP8_DTYPE_F32, &t));
    CHECK(t.count == 3 * 1088 && t.bytes == 2 * 3 * 1088 * 4, "shared column: count %" PRId64, t.count);
    /* Every rank's section is the widest local output exactly, whatever the leads: one rank with a ragged N (no
     * lead), slices of 192 (leads 0 and 64), leads cycling past 128 ranks, aligned slices. */
    static const struct { int64_t n; int ranks; } widths[] = {
        {200, 1}, {3072, 16}, {2112, 2}, {2112, 3}, {129 * 200, 200}, {192 * 1000, 1000}, {640, 5}, {300, 4}, {0, 9},
    };
    for (size_t c = 0; c < sizeof widths / sizeof widths[0]; c++) {
        int64_t widest = 0, count = -1;
        for (int rank = 0; rank < widths[c].ranks; rank++) {
            int64_t n = widths[c].n;
            CHECK_OK(bfp8_shard_plan(n, 256, BFP8_TP_COLUMN, widths[c].ranks, rank, BFP8_SHARD_SHARE_BLOCKS, &s));
            CHECK_OK(bfp8_tp_traffic_get(&s, 3, BFP8_DTYPE_BF16, &t));
            CHECK(count < 0 || t.count == count, "N=%" PRId64 " R=%d: ranks send different counts", widths[c].n,
                  widths[c].ranks);
            count = t.count;
            if (s.n_local > widest) widest = s.n_local;
        }
        CHECK(count == 3 * widest && t.bytes == (int64_t)widths[c].ranks * count * 2,
              "N=%" PRId64 " R=%d: each rank sends %" PRId64 " elements, the widest local output is 3 x %" PRId64,
              widths[c].n, widths[c].ranks, count, widest);
    }
    CHECK_OK(bfp8_tp_traffic_get(&s, 0, BFP8_DTYPE_F16, &t));
    CHECK(t.count == 0 && t.bytes == 0, "M=0 moves nothing");
    CHECK_STATUS(bfp8_tp_traffic_get(&s, 3, BFP8_DTYPE_E4M3, &t), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_tp_traffic_get(&s, -1, BFP8_DTYPE_BF16, &t), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_tp_traffic_get(&s, 3, BFP8_DTYPE_BF16, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_tp_traffic_get(NULL, 3, BFP8_DTYPE_BF16, &t), BFP8_ERR_INVALID_ARGUMENT);
}

typedef struct layer {
    int64_t m, n, k;
    bfp8_scale_format format;
    uint8_t *q;     /* [n, k] */
    float *scales;  /* row-major [ceil(n/128), ceil(k/128)] */
    float *x;       /* [m, k] f32 */
    uint16_t *bias; /* [n] bf16 */
} layer;

static void layer_make(layer *L, int64_t m, int64_t n, int64_t k, bfp8_scale_format format) {
    *L = (layer){.m = m, .n = n, .k = k, .format = format};
    float *w = malloc(sizeof(float) * (size_t)(n * k));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) w[i * k + j] = test_randn(0.02f * (float)(1 + (i / 128 + 2 * (j / 128)) % 5));
    int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
    L->q = malloc((size_t)(n * k));
    L->scales = malloc(sizeof(float) * (size_t)(nb * kb));
    bfp8_scales s;
    CHECK_OK(bfp8_scales_init(&s, format, BFP8_LAYOUT_ROW_MAJOR, nb, kb, L->scales));
    CHECK_OK(bfp8_quantize_weight(w, BFP8_DTYPE_F32, n, k, L->q, &s, NULL));
    free(w);
    L->x = malloc(sizeof(float) * (size_t)(m * k));
    for (int64_t i = 0; i < m * k; i++) L->x[i] = test_randn(1.0f);
    L->bias = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) L->bias[i] = bfp8_bf16_from_f32(test_randn(0.5f));
}

static void layer_free(layer *L) {
    free(L->q), free(L->scales), free(L->x), free(L->bias);
}

static void poison(void *p, size_t bytes) { memset(p, 0xFF, bytes); /* NaN in f32, bf16 and f16 */ }

/* The unsharded layer on `d`, into y [m, n] of y_dtype. */
static void unsharded(bfp8_dispatcher *d, const layer *L, bfp8_dtype y_dtype, void *y) {
    bfp8_scales s;
    CHECK_OK(bfp8_scales_init(&s, L->format, BFP8_LAYOUT_ROW_MAJOR, (L->n + 127) / 128, (L->k + 127) / 128, L->scales));
    bfp8_weight *w = NULL;
    CHECK_OK(bfp8_weight_create(L->q, L->n, L->k, &s, &w));
    if (!w) return;
    bfp8_linear_args a = {.x = L->x, .x_dtype = BFP8_DTYPE_F32, .m = L->m, .bias = L->bias,
                          .bias_dtype = BFP8_DTYPE_BF16, .y = y, .y_dtype = y_dtype, .device = BFP8_DEVICE_CPU};
    CHECK_OK(bfp8_linear(d, w, &a));
    bfp8_weight_free(w);
}

/* calc_diff of y against the exact product of the unquantized-activation layer (dequantized weight, f32 x). */
static double calc_diff_exact(const layer *L, const float *y) {
    int64_t kb = (L->k + 127) / 128;
    test_calc_diff c = {0};
    for (int64_t i = 0; i < L->m; i++)
        for (int64_t j = 0; j < L->n; j++) {
            double acc = bfp8_bf16_to_f32(L->bias[j]);
            for (int64_t t = 0; t < L->k; t++)
                acc += (double)L->x[i * L->k + t] * bfp8_e4m3_to_f32(L->q[j * L->k + t]) * L->scales[(j / 128) * kb + t / 128];
            test_calc_diff_add(&c, y[i * L->n + j], acc);
        }
    return test_calc_diff_value(&c);
}

/* The sharded layer simulated over `ranks` ranks of the cpu backend, into y [m, n] bf16 (as floats). Returns false
 * when the split is refused. */
static bool sharded(bfp8_dispatcher *d, const layer *L, bfp8_tp_mode mode, int ranks, float *y) {
    bfp8_scales s;
    CHECK_OK(bfp8_scales_init(&s, L->format, BFP8_LAYOUT_ROW_MAJOR, (L->n + 127) / 128, (L->k + 127) / 128, L->scales));
    float *sum = mode == BFP8_TP_ROW ? calloc((size_t)(L->m * L->n), sizeof(float)) : NULL;
    for (int rank = 0; rank < ranks; rank++) {
        bfp8_shard sh;
        if (bfp8_shard_plan(L->n, L->k, mode, ranks, rank, BFP8_SHARD_SHARE_BLOCKS, &sh) != BFP8_OK) {
            free(sum);
            return false;
        }
        bfp8_weight *w = NULL;
        CHECK_OK(bfp8_weight_shard(L->q, &s, &sh, &w));
        if (!w) break;
        int64_t slice = sh.end - sh.begin;
        bfp8_linear_args a = {.x_dtype = BFP8_DTYPE_F32, .m = L->m, .bias = L->bias, .bias_dtype = BFP8_DTYPE_BF16,
                              .device = BFP8_DEVICE_CPU};
        if (mode == BFP8_TP_COLUMN) {
            uint16_t *yl = malloc(sizeof(uint16_t) * (size_t)(L->m * sh.n_local));
            poison(yl, sizeof(uint16_t) * (size_t)(L->m * sh.n_local));
            a.x = L->x, a.y = yl, a.y_dtype = BFP8_DTYPE_BF16;
            CHECK_OK(bfp8_tp_linear_local(d, w, &sh, &a));
            bfp8_tp_traffic t;
            CHECK_OK(bfp8_tp_traffic_get(&sh, L->m, BFP8_DTYPE_BF16, &t));
            CHECK(L->m * sh.n_local <= t.count && t.bytes == (int64_t)ranks * t.count * 2,
                  "rank %d's local output (%" PRId64 " x %" PRId64 ") does not fit its section of %" PRId64, rank,
                  L->m, sh.n_local, t.count);
            for (int64_t i = 0; i < L->m; i++) /* the all-gather: each rank's slice, past its lead */
                for (int64_t j = 0; j < slice; j++) y[i * L->n + sh.begin + j] = bfp8_bf16_to_f32(yl[i * sh.n_local + sh.lead + j]);
            free(yl);
        } else {
            float *xs = malloc(sizeof(float) * (size_t)(L->m * slice + 1)), *part = malloc(sizeof(float) * (size_t)(L->m * L->n));
            for (int64_t i = 0; i < L->m; i++) memcpy(xs + i * slice, L->x + i * L->k + sh.begin, sizeof(float) * (size_t)slice);
            poison(part, sizeof(float) * (size_t)(L->m * L->n));
            a.x = xs, a.y = part, a.y_dtype = BFP8_DTYPE_F32;
            CHECK_OK(bfp8_tp_linear_local(d, w, &sh, &a));
            for (int64_t i = 0; i < L->m * L->n; i++) sum[i] += part[i]; /* the all-reduce, in rank order */
            free(xs), free(part);
        }
        bfp8_weight_free(w);
    }
    if (sum)
        for (int64_t i = 0; i < L->m * L->n; i++) y[i] = bfp8_bf16_to_f32(bfp8_bf16_from_f32(sum[i]));
    free(sum);
    return true;
}

static void check_equivalence(bfp8_dispatcher *d, int64_t m, int64_t n, int64_t k, bfp8_scale_format format) {
    layer L;
    layer_make(&L, m, n, k, format);
    size_t count = (size_t)(m * n);
    uint16_t *y_bf16 = malloc(sizeof(uint16_t) * count);
    float *ref = malloc(sizeof(float) * count), *y = malloc(sizeof(float) * count);
    poison(y_bf16, sizeof(uint16_t) * count);
    unsharded(d, &L, BFP8_DTYPE_BF16, y_bf16);
    for (size_t i = 0; i < count; i++) ref[i] = bfp8_bf16_to_f32(y_bf16[i]);
    for (int mode = 0; mode < BFP8_TP_MODE_COUNT; mode++) {
        for (int ranks = 1; ranks <= 8; ranks++) {
            poison(y, sizeof(float) * count);
            if (!sharded(d, &L, mode, ranks, y)) continue;
            int64_t nan = 0;
            double num = 0, den = 0;
            bool identical = true;
            for (size_t i = 0; i < count; i++) {
                if (isnan(y[i])) nan++;
                identical &= memcmp(&y[i], &ref[i], sizeof(float)) == 0;
                num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
                den += (double)ref[i] * ref[i];
            }
            int64_t dim = mode == BFP8_TP_COLUMN ? n : k;
            bool shared = ranks > 1 && (dim / ranks) % 128 != 0;
            const char *label = bfp8_tp_mode_name(mode);
            CHECK(nan == 0, "%s M=%" PRId64 " N=%" PRId64 " K=%" PRId64 " R=%d: %" PRId64 " outputs unwritten", label, m,
                  n, k, ranks, nan);
            if (mode == BFP8_TP_COLUMN || ranks == 1) {
                CHECK(identical, "%s R=%d N=%" PRId64 " K=%" PRId64 ": not bit-identical to the unsharded layer", label,
                      ranks, n, k);
            } else if (!shared) {
                /* Only the order of the fp32 sums differs: within bf16 rounding of the same value. */
                CHECK(sqrt(num / den) < 8e-3, "row R=%d N=%" PRId64 " K=%" PRId64 ": rel %.3g", ranks, n, k, sqrt(num / den));
            }
            /* Shared blocks quantize the shared activation groups per rank: still a faithful W8A8 layer. */
            double cd = calc_diff_exact(&L, y);
            CHECK(cd < 1.5e-3, "%s R=%d N=%" PRId64 " K=%" PRId64 ": calc_diff vs the exact layer %.3g", label, ranks, n,
                  k, cd);
        }
    }
    free(y_bf16), free(ref), free(y);
    layer_free(&L);
}

/* The shard loader reads the same local weight as bfp8_weight_shard on the whole one; wrong uses are refused. */
static void check_load_and_errors(bfp8_dispatcher *d) {
    layer L;
    layer_make(&L, 2, 576, 960, BFP8_SCALE_FP32); /* 3 ranks cut both ways: 192 rows, 320 columns */
    char path[] = "/tmp/bfp8_test_shard_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    bfp8_tensor t[2] = {
        {.name = "w", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {576, 960}, .data = L.q, .nbytes = 576 * 960},
        {.name = "w_scale_inv", .dtype = BFP8_DTYPE_F32, .ndim = 2, .shape = {5, 8}, .data = L.scales, .nbytes = 160},
    };
    CHECK_OK(bfp8_safetensors_write(path, t, 2));
    bfp8_safetensors *f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    bfp8_scales s;
    CHECK_OK(bfp8_scales_init(&s, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 5, 8, L.scales));
    for (int mode = 0; mode < BFP8_TP_MODE_COUNT && f; mode++) {
        for (int rank = 0; rank < 3; rank++) {
            bfp8_shard sh, sh2;
            bfp8_weight *a = NULL, *b = NULL;
            CHECK_OK(bfp8_weight_load_shard(f, "w", NULL, mode, 3, rank, BFP8_SHARD_SHARE_BLOCKS, &sh, &a));
            CHECK_OK(bfp8_shard_plan(576, 960, mode, 3, rank, BFP8_SHARD_SHARE_BLOCKS, &sh2));
            CHECK_OK(bfp8_weight_shard(L.q, &s, &sh2, &b));
            if (!a || !b) continue;
            const uint8_t *qa, *qb;
            bfp8_scales sa, sb;
            CHECK_OK(bfp8_weight_view(a, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &qa, &sa));
            CHECK_OK(bfp8_weight_view(b, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &qb, &sb));
            CHECK(memcmp(qa, qb, (size_t)(sh.n_local * sh.k_local)) == 0, "loaded shard's codes differ");
            CHECK(memcmp(sa.data, sb.data, sizeof(float) * (size_t)(sa.rows * sa.kblocks)) == 0, "scales differ");
            /* Every code of the local weight is the whole weight's at its place, and the lead is zero. */
            bool ok = true;
            for (int64_t i = 0; i < sh.n_local; i++)
                for (int64_t j = 0; j < sh.k_local; j++) {
                    int64_t gi = mode == BFP8_TP_COLUMN ? sh.block_begin * 128 + i : i;
                    int64_t gj = mode == BFP8_TP_ROW ? sh.block_begin * 128 + j : j;
                    bool lead = mode == BFP8_TP_COLUMN ? i < sh.lead : j < sh.lead;
                    ok &= qa[i * sh.k_local + j] == (lead ? 0 : L.q[gi * 960 + gj]);
                }
            CHECK(ok, "%s rank %d: local codes are not the slice", bfp8_tp_mode_name(mode), rank);
            bfp8_weight_free(a);
            bfp8_weight_free(b);
        }
    }
    bfp8_shard sh;
    bfp8_weight *w = NULL;
    CHECK_STATUS(bfp8_weight_load_shard(f, "w", NULL, BFP8_TP_COLUMN, 3, 0, 0, &sh, &w), BFP8_ERR_UNSUPPORTED);
    CHECK_STATUS(bfp8_weight_load_shard(f, "nope", NULL, BFP8_TP_COLUMN, 3, 0, 0, &sh, &w), BFP8_ERR_NOT_FOUND);
    CHECK(w == NULL, "no weight on failure");
    /* A tampered plan, and a weight that is not the shard's. */
    CHECK_OK(bfp8_shard_plan(576, 960, BFP8_TP_ROW, 3, 1, BFP8_SHARD_SHARE_BLOCKS, &sh));
    bfp8_shard bad = sh;
    bad.lead = 0;
    CHECK_STATUS(bfp8_weight_shard(L.q, &s, &bad, &w), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_OK(bfp8_weight_shard(L.q, &s, &sh, &w));
    float y[2 * 576], xs[2 * 320];
    for (int i = 0; i < 2 * 320; i++) xs[i] = test_randn(1.0f);
    bfp8_linear_args a = {.x = xs, .x_dtype = BFP8_DTYPE_F32, .m = 2, .y = y, .y_dtype = BFP8_DTYPE_BF16,
                          .device = BFP8_DEVICE_CPU};
    CHECK_STATUS(bfp8_tp_linear_local(d, w, &sh, &a), BFP8_ERR_INVALID_ARGUMENT); /* row partials must be f32 */
    a.y_dtype = BFP8_DTYPE_F32;
    CHECK_OK(bfp8_tp_linear_local(d, w, &sh, &a));
    bfp8_shard other;
    CHECK_OK(bfp8_shard_plan(576, 960, BFP8_TP_ROW, 3, 0, BFP8_SHARD_SHARE_BLOCKS, &other));
    CHECK_STATUS(bfp8_tp_linear_local(d, w, &other, &a), BFP8_ERR_INVALID_ARGUMENT); /* shape of another rank */
    float bias[576];
    for (int i = 0; i < 576; i++) bias[i] = test_randn(1.0f);
    a.bias = bias, a.bias_dtype = BFP8_DTYPE_I32;
    CHECK_STATUS(bfp8_tp_linear_local(d, w, &sh, &a), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(bfp8_last_error(), "bias dtype i32 is not f32, bf16 or f16"), "message: %s", bfp8_last_error());
    a.bias = NULL;
    a.m = -2; /* rank 1 has a lead: the message names the caller's x [m, 320], not the padded copy */
    CHECK_STATUS(bfp8_tp_linear_local(d, w, &sh, &a), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(bfp8_last_error(), "tp_linear_local: x: negative shape [-2, 320]"), "message: %s", bfp8_last_error());
    a.m = 2;
    CHECK(bfp8_tp_linear(d, w, &sh, &a, (void *)1) != BFP8_OK && bfp8_last_error()[0], "tp_linear on host data");
    bfp8_weight_free(w);
    bfp8_safetensors_close(f);
    unlink(path);
    layer_free(&L);
}

/* A UE8M0 weight with one scale that is not a power of two is refused by every rank, whether its slice holds that
 * block or not, and the message names the block in the whole weight. */
static void check_bad_ue8m0_scale(void) {
    layer L;
    layer_make(&L, 1, 640, 384, BFP8_SCALE_UE8M0); /* 5 x 3 blocks */
    L.scales[4 * 3 + 1] *= 1.5f;
    bfp8_scales s;
    CHECK_OK(bfp8_scales_init(&s, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, 5, 3, L.scales));
    for (int mode = 0; mode < BFP8_TP_MODE_COUNT; mode++) {
        int ranks = mode == BFP8_TP_COLUMN ? 5 : 3;
        for (int rank = 0; rank < ranks; rank++) {
            bfp8_shard sh;
            bfp8_weight *w = NULL;
            CHECK_OK(bfp8_shard_plan(640, 384, mode, ranks, rank, 0, &sh));
            CHECK_STATUS(bfp8_weight_shard(L.q, &s, &sh, &w), BFP8_ERR_INVALID_ARGUMENT);
            CHECK(strstr(bfp8_last_error(), "weight_shard: scales: scale (4, 1)") != NULL, "%s rank %d: %s",
                  bfp8_tp_mode_name(mode), rank, bfp8_last_error());
            bfp8_weight_free(w);
        }
    }
    layer_free(&L);
}

int main(void) {
    test_seed();
    for (size_t i = 0; i < sizeof dsr1 / sizeof dsr1[0]; i++) check_plans(dsr1[i].n, dsr1[i].k);
    check_plans(576, 18432);
    check_plans(2112, 192);
    check_known_cuts();
    check_traffic();
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "cpu"));
    /* Shapes whose splits over 1..8 ranks include aligned ones, cut blocks, ragged last blocks and refusals; one
     * DeepSeek-R1 shape at full size. */
    check_equivalence(d, 3, 2112, 7168, BFP8_SCALE_FP32);
    check_equivalence(d, 5, 768, 1536, BFP8_SCALE_UE8M0);
    check_equivalence(d, 2, 1152, 2304, BFP8_SCALE_FP32);
    check_equivalence(d, 4, 840, 960, BFP8_SCALE_FP32);
    check_load_and_errors(d);
    check_bad_ue8m0_scale();
    bfp8_dispatcher_free(d);
    return TEST_SUMMARY("test_shard");
}
