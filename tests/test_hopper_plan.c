/* hopper's planner on the host: no device and no CUDA needed, so it runs in every `make test`. The golden plans are
 * data, (M, N, K, SMs, cluster fit) -> every field of the plan, for the DeepSeek-R1 table and the shapes whose plans
 * the rules were measured on (docs/hopper.md): a change of the rules that moves one of them must be measured again.
 * Then the plans that each forcing knob gives, the knobs' parsing, and check_units (the kernel's own unit decode
 * against plain division, every output covered once, the stream-K protocol) over many shapes, SM counts and knob
 * settings, with tampered plans that it must reject. */
#include "check.h"

#include "backends/hopper/plan.h"
#include "hopper_h200.h"

/* The path of a row's plan: swapped, normal with 128-row tiles, normal with 64-row tiles (one consumer warpgroup). */
enum { NORM, SWAP, N64 };

typedef struct plan_row {
    int64_t m, n, k;
    int sms;
    bool h200_fit; /* the H200's cluster counts (hopper_h200.h); false: none fit (the reduce kernel everywhere) */
    /* the plan */
    int path;
    int bq, splits, kb_per_split, units, whole_units, slice_rows, sk_tiles, sk_pieces, grid, csplit;
} plan_row;

/* "NAME=VALUE,NAME=VALUE" as an environment for bfp8_hopper_knobs_parse. */
static const char *g_env;
static const char *env_lookup(const char *name) {
    static char value[64];
    const size_t len = strlen(name);
    for (const char *p = g_env; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t item = end ? (size_t)(end - p) : strlen(p);
        if (item > len && strncmp(p, name, len) == 0 && p[len] == '=') {
            const size_t n = item - len - 1 < sizeof value - 1 ? item - len - 1 : sizeof value - 1;
            memcpy(value, p + len + 1, n);
            value[n] = '\0';
            return value;
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}
static bfp8_hopper_knobs knobs_of(const char *env) {
    g_env = env;
    return bfp8_hopper_knobs_parse(env_lookup);
}
/* Whether bfp8_hopper_knobs_check takes the environment: exactly when the parse applies every value set (an empty
 * value counts as unset). */
static bool knobs_taken(const char *env) {
    g_env = env;
    char why[256];
    return bfp8_hopper_knobs_check(env_lookup, why, sizeof why);
}
static bool value_empty(const char *env) { return !*env || env[strlen(env) - 1] == '='; }

static void check_row(const plan_row *r, const bfp8_hopper_knobs *knobs, const char *what) {
    const bfp8_hopper_cluster_fit none = {{0}};
    const bfp8_hopper_plan p = bfp8_hopper_plan_make(r->m, r->n, r->k, r->sms, r->h200_fit ? &kH200ClusterFit : &none,
                                                     knobs);
    const bfp8_hopper_plan want = {.swap = r->path == SWAP, .tile_rows = r->path == N64 ? 64 : 128, .bq = r->bq,
                                   .p_tiles = p.p_tiles, .q_tiles = p.q_tiles, .splits = r->splits,
                                   .kb_per_split = r->kb_per_split, .units = r->units, .grid = r->grid,
                                   .whole_units = r->whole_units, .csplit = r->csplit, .slice_rows = r->slice_rows,
                                   .sk_tiles = r->sk_tiles, .sk_pieces = r->sk_pieces};
    const bool same = p.swap == want.swap && p.tile_rows == want.tile_rows && p.bq == want.bq &&
                      p.splits == want.splits && p.kb_per_split == want.kb_per_split && p.units == want.units &&
                      p.grid == want.grid && p.whole_units == want.whole_units && p.csplit == want.csplit &&
                      p.slice_rows == want.slice_rows && p.sk_tiles == want.sk_tiles && p.sk_pieces == want.sk_pieces;
    char got_line[192], want_line[192];
    bfp8_hopper_plan_describe(&p, got_line, sizeof got_line);
    bfp8_hopper_plan_describe(&want, want_line, sizeof want_line);
    CHECK(same, "%s: M=%lld N=%lld K=%lld on %d SMs%s: %s, want %s", what, (long long)r->m, (long long)r->n,
          (long long)r->k, r->sms, r->h200_fit ? " (H200 clusters)" : "", got_line, want_line);
    /* The tiles follow from the tiling. */
    const int64_t p_rows = p.swap ? r->n : r->m, q_rows = p.swap ? r->m : r->n;
    CHECK(p.p_tiles == (p_rows + p.tile_rows - 1) / p.tile_rows && p.q_tiles == (q_rows + p.bq - 1) / p.bq,
          "%s: %d x %d tiles", what, p.p_tiles, p.q_tiles);
    char why[256] = "";
    CHECK(bfp8_hopper_plan_check_units(&p, r->m, r->n, r->k, why, sizeof why), "%s: units of M=%lld N=%lld K=%lld: %s",
          what, (long long)r->m, (long long)r->n, (long long)r->k, why);
}

static void check_rows(const plan_row *rows, size_t count, const char *what) {
    const bfp8_hopper_knobs defaults = bfp8_hopper_knobs_default();
    for (size_t i = 0; i < count; i++) check_row(&rows[i], &defaults, what);
}

/* The rows: M, N, K, SMs, the H200's cluster counts (1) or none (0); then the plan: path, BQ, splits, K blocks per
 * split, units, whole units, slice rows, stream-K tiles, stream-K pieces a CTA, grid, cluster size of the sum. */

/* The DeepSeek-R1 table on the H200 (132 SMs and its cluster counts): the plans behind every cell of `blockfp8 bench
 * --shapes dsr1`. M = 1: swapped, the split counts the measured best or within 0.1 us of it, summed in clusters where
 * they fit; the last wave in row slices (36864x7168, 24576x1536), and 64-row slices in place of a 2-way split on
 * 7168x16384 and 7168x18432; M = 16..128: the normal path (M = 16 36864x7168 swapped with row slices, where the
 * normal path would split its last wave's K), 64-wide weight tiles where their waves cost no more; M = 4096
 * 2112x7168 in stream-K (4.1 waves), the other M >= 512 cells whole tiles. */
static const plan_row kDsr1OnH200[] = {
    {    1,  2112,  7168, 132, 1, SWAP,   8,  4,  14,   68,    0,  0,   0, 0,  68, 4},
    {   16,  2112,  7168, 132, 1, N64 ,  64,  3,  19,   99,    0,  0,   0, 0,  99, 3},
    {   64,  2112,  7168, 132, 1, N64 ,  64,  3,  19,   99,    0,  0,   0, 0,  99, 3},
    {  128,  2112,  7168, 132, 1, N64 ,  32,  1,  56,  132,    0,  0,   0, 0, 132, 0},
    {  512,  2112,  7168, 132, 1, NORM,  64,  1,  56,  132,    0,  0,   0, 0, 132, 0},
    { 4096,  2112,  7168, 132, 1, NORM, 128,  1,  56,  792,  396,  0, 148, 3, 132, 0},
    {    1, 24576,  1536, 132, 1, SWAP,   8,  1,  12,  252,  132, 64,   0, 0, 132, 0},
    {   16, 24576,  1536, 132, 1, N64 ,  64,  1,  12,  384,    0,  0,   0, 0, 132, 0},
    {   64, 24576,  1536, 132, 1, N64 ,  64,  1,  12,  384,    0,  0,   0, 0, 132, 0},
    {  128, 24576,  1536, 132, 1, NORM,  64,  1,  12,  384,    0,  0,   0, 0, 132, 0},
    {  512, 24576,  1536, 132, 1, NORM, 128,  1,  12,  768,    0,  0,   0, 0, 132, 0},
    { 4096, 24576,  1536, 132, 1, NORM, 128,  1,  12, 6144,    0,  0,   0, 0, 132, 0},
    {    1, 32768,   512, 132, 1, SWAP,   8,  1,   4,  256,    0,  0,   0, 0, 132, 0},
    {   16, 32768,   512, 132, 1, N64 ,  64,  1,   4,  512,    0,  0,   0, 0, 132, 0},
    {   64, 32768,   512, 132, 1, N64 ,  64,  1,   4,  512,    0,  0,   0, 0, 132, 0},
    {  128, 32768,   512, 132, 1, NORM,  64,  1,   4,  512,    0,  0,   0, 0, 132, 0},
    {  512, 32768,   512, 132, 1, NORM, 128,  1,   4, 1024,    0,  0,   0, 0, 132, 0},
    { 4096, 32768,   512, 132, 1, NORM, 128,  1,   4, 8192,    0,  0,   0, 0, 132, 0},
    {    1,  7168, 16384, 132, 1, SWAP,   8,  1, 128,  112,    0, 64,   0, 0, 112, 0},
    {   16,  7168, 16384, 132, 1, N64 ,  64,  1, 128,  112,    0,  0,   0, 0, 112, 0},
    {   64,  7168, 16384, 132, 1, N64 ,  64,  1, 128,  112,    0,  0,   0, 0, 112, 0},
    {  128,  7168, 16384, 132, 1, NORM,  64,  1, 128,  112,    0,  0,   0, 0, 112, 0},
    {  512,  7168, 16384, 132, 1, NORM, 128,  1, 128,  224,    0,  0,   0, 0, 132, 0},
    { 4096,  7168, 16384, 132, 1, NORM, 128,  1, 128, 1792,    0,  0,   0, 0, 132, 0},
    {    1, 36864,  7168, 132, 1, SWAP,   8,  1,  56,  360,  264, 32,   0, 0, 132, 0},
    {   16, 36864,  7168, 132, 1, SWAP,  16,  1,  56,  360,  264, 32,   0, 0, 132, 0},
    {   64, 36864,  7168, 132, 1, N64 , 128,  5,  12,  384,  264,  0,   0, 0, 132, 0},
    {  128, 36864,  7168, 132, 1, NORM, 128,  5,  12,  384,  264,  0,   0, 0, 132, 0},
    {  512, 36864,  7168, 132, 1, NORM, 128,  1,  56, 1152,    0,  0,   0, 0, 132, 0},
    { 4096, 36864,  7168, 132, 1, NORM, 128,  1,  56, 9216,    0,  0,   0, 0, 132, 0},
    {    1,  7168, 18432, 132, 1, SWAP,   8,  1, 144,  112,    0, 64,   0, 0, 112, 0},
    {   16,  7168, 18432, 132, 1, N64 ,  64,  1, 144,  112,    0,  0,   0, 0, 112, 0},
    {   64,  7168, 18432, 132, 1, N64 ,  64,  1, 144,  112,    0,  0,   0, 0, 112, 0},
    {  128,  7168, 18432, 132, 1, NORM,  64,  1, 144,  112,    0,  0,   0, 0, 112, 0},
    {  512,  7168, 18432, 132, 1, NORM, 128,  1, 144,  224,    0,  0,   0, 0, 132, 0},
    { 4096,  7168, 18432, 132, 1, NORM, 128,  1, 144, 1792,    0,  0,   0, 0, 132, 0},
    {    1,  4096,  7168, 132, 1, SWAP,   8,  2,  28,   64,    0,  0,   0, 0,  64, 2},
    {   16,  4096,  7168, 132, 1, N64 ,  32,  1,  56,  128,    0,  0,   0, 0, 128, 0},
    {   64,  4096,  7168, 132, 1, N64 ,  32,  1,  56,  128,    0,  0,   0, 0, 128, 0},
    {  128,  4096,  7168, 132, 1, N64 ,  64,  1,  56,  128,    0,  0,   0, 0, 128, 0},
    {  512,  4096,  7168, 132, 1, NORM, 128,  1,  56,  128,    0,  0,   0, 0, 128, 0},
    { 4096,  4096,  7168, 132, 1, NORM, 128,  1,  56, 1024,    0,  0,   0, 0, 132, 0},
    {    1,  7168,  2048, 132, 1, SWAP,   8,  1,  16,   56,    0,  0,   0, 0,  56, 0},
    {   16,  7168,  2048, 132, 1, N64 ,  64,  1,  16,  112,    0,  0,   0, 0, 112, 0},
    {   64,  7168,  2048, 132, 1, N64 ,  64,  1,  16,  112,    0,  0,   0, 0, 112, 0},
    {  128,  7168,  2048, 132, 1, NORM,  64,  1,  16,  112,    0,  0,   0, 0, 112, 0},
    {  512,  7168,  2048, 132, 1, NORM, 128,  1,  16,  224,    0,  0,   0, 0, 132, 0},
    { 4096,  7168,  2048, 132, 1, NORM, 128,  1,  16, 1792,    0,  0,   0, 0, 132, 0},
};

/* Without clusters that fit (the reduce kernel sums every split), 132 SMs: the decode split counts (swept with the
 * reduce), the normal path from M = 9 with one consumer warpgroup, the last-wave split on the normal path (whole
 * tiles rounded down to full columns with two P tiles: 129 x 8576), and M = 9..16 36864x7168 swapped with row
 * slices. */
static const plan_row kNoClusters[] = {
    {    1,  7168,  2048, 132, 0, SWAP,   8,  1,  16,   56,    0,  0,   0, 0,  56, 0},
    {   16,  7168,  2048, 132, 0, N64 ,  64,  1,  16,  112,    0,  0,   0, 0, 112, 0},
    {   32,  7168,  2048, 132, 0, N64 ,  64,  1,  16,  112,    0,  0,   0, 0, 112, 0},
    {   33,  7168,  2048, 132, 0, N64 ,  64,  1,  16,  112,    0,  0,   0, 0, 112, 0},
    {    1,  7168, 16384, 132, 0, SWAP,   8,  1, 128,  112,    0, 64,   0, 0, 112, 0},
    {   16,  7168, 16384, 132, 0, N64 ,  64,  1, 128,  112,    0,  0,   0, 0, 112, 0},
    {   32,  7168, 16384, 132, 0, N64 ,  64,  1, 128,  112,    0,  0,   0, 0, 112, 0},
    {    1,  7168, 18432, 132, 0, SWAP,   8,  1, 144,  112,    0, 64,   0, 0, 112, 0},
    {   32,  7168, 18432, 132, 0, N64 ,  64,  1, 144,  112,    0,  0,   0, 0, 112, 0},
    {    1,  2112,  7168, 132, 0, SWAP,   8,  4,  14,   68,    0,  0,   0, 0,  68, 0},
    {    8,  2112,  7168, 132, 0, SWAP,   8,  4,  14,   68,    0,  0,   0, 0,  68, 0},
    {   16,  2112,  7168, 132, 0, N64 ,  64,  4,  14,  132,    0,  0,   0, 0, 132, 0},
    {   32,  2112,  7168, 132, 0, N64 ,  64,  4,  14,  132,    0,  0,   0, 0, 132, 0},
    {  128,  2112,  7168, 132, 0, N64 ,  32,  1,  56,  132,    0,  0,   0, 0, 132, 0},
    {    1,  4096,  7168, 132, 0, SWAP,   8,  2,  28,   64,    0,  0,   0, 0,  64, 0},
    {   16,  4096,  7168, 132, 0, N64 ,  32,  1,  56,  128,    0,  0,   0, 0, 128, 0},
    {   32,  4096,  7168, 132, 0, N64 ,  32,  1,  56,  128,    0,  0,   0, 0, 128, 0},
    {    8, 36864,  7168, 132, 0, SWAP,   8,  1,  56,  360,  264, 32,   0, 0, 132, 0},
    {   16, 36864,  7168, 132, 0, SWAP,  16,  1,  56,  360,  264, 32,   0, 0, 132, 0},
    {   64, 36864,  7168, 132, 0, N64 , 128,  5,  12,  384,  264,  0,   0, 0, 132, 0},
    {  128, 36864,  7168, 132, 0, NORM, 128,  5,  12,  384,  264,  0,   0, 0, 132, 0},
    {    1, 24576,  1536, 132, 0, SWAP,   8,  1,  12,  252,  132, 64,   0, 0, 132, 0},
    {   16, 24576,  1536, 132, 0, N64 ,  64,  1,  12,  384,    0,  0,   0, 0, 132, 0},
    {    1, 32768,   512, 132, 0, SWAP,   8,  1,   4,  256,    0,  0,   0, 0, 132, 0},
    {   64, 32768,   512, 132, 0, N64 ,  64,  1,   4,  512,    0,  0,   0, 0, 132, 0},
    {  129,  8576,  4096, 132, 0, NORM,  64, 32,   1,  392,  264,  0,   0, 0, 132, 0},
    {    9, 36864,  7168, 132, 0, SWAP,  16,  1,  56,  360,  264, 32,   0, 0, 132, 0},
    {   17, 36864,  7168, 132, 0, N64 , 128,  5,  12,  384,  264,  0,   0, 0, 132, 0},
    {  100,  7168, 16384, 132, 0, NORM,  64,  1, 128,  112,    0,  0,   0, 0, 112, 0},
    {  129,  7168, 16384, 132, 0, NORM, 128,  1, 128,  112,    0,  0,   0, 0, 112, 0},
    {  129,  2112,  7168, 132, 0, N64 ,  64,  1,  56,   99,    0,  0,   0, 0,  99, 0},
};

/* test_hopper's cases, on the H200: each reaches the plan its comment there names (splits summed in clusters of 4,
 * 7 and 8 CTAs, row slices with a cut last slice, stream-K runs over 2-3 tiles, the normal path's two consumer
 * widths). */
static const plan_row kTestCasesOnH200[] = {
    {    8,  3000,  2048, 132, 1, SWAP,   8,  4,   4,   96,    0,  0,   0, 0,  96, 4},
    {    5,  2500,  3072, 132, 1, SWAP,   8,  4,   6,   80,    0,  0,   0, 0,  80, 4},
    {    3,  1536,  4096, 132, 1, SWAP,   8,  8,   4,   96,    0,  0,   0, 0,  96, 8},
    {    2,  1000,  2560, 132, 1, SWAP,   8,  7,   3,   56,    0,  0,   0, 0,  56, 7},
    {  100,  1000,  4096, 132, 1, NORM,  64,  6,   6,   96,    0,  0,   0, 0,  96, 6},
    {   16,   330,  6144, 132, 1, N64 ,  64,  8,   6,   48,    0,  0,   0, 0,  48, 8},
    {   72,   520,  3584, 132, 1, NORM,  64,  7,   4,   63,    0,  0,   0, 0,  63, 7},
    {  128,   256,  8192, 132, 1, NORM,  64,  8,   8,   32,    0,  0,   0, 0,  32, 8},
    {    3, 17000,   256, 132, 1, SWAP,   8,  1,   2,  136,  132, 32,   0, 0, 132, 0},
    {    8, 21896,   512, 132, 1, SWAP,   8,  1,   4,  211,  132, 64,   0, 0, 132, 0},
    {    2,  7000,  8192, 132, 1, SWAP,   8,  1,  64,  110,    0, 64,   0, 0, 110, 0},
    {   12, 20002,  4096, 132, 1, SWAP,  16,  1,  32,  230,  132, 32,   0, 0, 132, 0},
    { 2100,  2112,  2048, 132, 1, NORM, 128,  1,  16,  528,  132,  0, 157, 3, 132, 0},
    { 1500,  1500,  4096, 132, 1, NORM,  64,  1,  32,  528,  132,  0, 156, 3, 132, 0},
    { 2100,  1000,  3072, 132, 1, NORM,  64,  1,  24,  396,  132,  0, 140, 2, 132, 0},
    {  700,  3000,  3088, 132, 1, NORM,  64,  1,  25,  528,  132,  0, 150, 3, 132, 0},
    {  200,  7168,  8192, 132, 1, NORM, 128,  1,  64,  112,    0,  0,   0, 0, 112, 0},
    {   48,  7168,  4096, 132, 1, N64 ,  64,  1,  32,  112,    0,  0,   0, 0, 112, 0},
    { 4095,  2048,   512, 132, 1, NORM, 128,  1,   4,  512,    0,  0,   0, 0, 132, 0},
    { 1000,  1024,   768, 132, 1, NORM,  64,  1,   6,  128,    0,  0,   0, 0, 128, 0},
    {  256,  1000,   256, 132, 1, N64 ,  32,  1,   2,  128,    0,  0,   0, 0, 128, 0},
};

/* Other SM counts (a partition of the device, other parts): no cluster counts. */
static const plan_row kOtherSms[] = {
    {    1,  2112,  7168, 114, 0, SWAP,   8,  4,  14,   68,    0,  0,   0, 0,  68, 0},
    {   64,  2112,  7168, 114, 0, N64 ,  64,  3,  19,   99,    0,  0,   0, 0,  99, 0},
    { 4096,  2112,  7168, 114, 0, NORM, 128,  1,  56,  544,    0,  0,   0, 0, 114, 0},
    {    1, 24576,  1536, 114, 0, SWAP,   8,  1,  12,  192,    0,  0,   0, 0, 114, 0},
    {   64, 24576,  1536, 114, 0, N64 , 128,  1,  12,  192,    0,  0,   0, 0, 114, 0},
    { 4096, 24576,  1536, 114, 0, NORM, 128,  1,  12, 6144,    0,  0,   0, 0, 114, 0},
    {    1, 32768,   512, 114, 0, SWAP,   8,  1,   4,  340,  228, 32,   0, 0, 114, 0},
    {   64, 32768,   512, 114, 0, N64 ,  64,  1,   4,  512,    0,  0,   0, 0, 114, 0},
    { 4096, 32768,   512, 114, 0, NORM, 128,  1,   4, 8192,    0,  0,   0, 0, 114, 0},
    {    1,  7168, 16384, 114, 0, SWAP,   8,  1, 128,  112,    0, 64,   0, 0, 112, 0},
    {   64,  7168, 16384, 114, 0, N64 ,  64,  1, 128,  112,    0,  0,   0, 0, 112, 0},
    { 4096,  7168, 16384, 114, 0, NORM, 128,  1, 128, 1792,    0,  0,   0, 0, 114, 0},
    {    1, 36864,  7168, 114, 0, SWAP,   8,  1,  56,  288,    0,  0,   0, 0, 114, 0},
    {   64, 36864,  7168, 114, 0, N64 , 128,  1,  56,  288,    0,  0,   0, 0, 114, 0},
    { 4096, 36864,  7168, 114, 0, NORM, 128,  1,  56, 9216,    0,  0,   0, 0, 114, 0},
    {    1,  7168, 18432, 114, 0, SWAP,   8,  1, 144,  112,    0, 64,   0, 0, 112, 0},
    {   64,  7168, 18432, 114, 0, N64 ,  64,  1, 144,  112,    0,  0,   0, 0, 112, 0},
    { 4096,  7168, 18432, 114, 0, NORM, 128,  1, 144, 1792,    0,  0,   0, 0, 114, 0},
    {    1,  4096,  7168, 114, 0, SWAP,   8,  2,  28,   64,    0,  0,   0, 0,  64, 0},
    {   64,  4096,  7168, 114, 0, N64 ,  64,  1,  56,   64,    0,  0,   0, 0,  64, 0},
    { 4096,  4096,  7168, 114, 0, NORM, 128,  1,  56, 1024,    0,  0,   0, 0, 114, 0},
    {    1,  7168,  2048, 114, 0, SWAP,   8,  1,  16,   56,    0,  0,   0, 0,  56, 0},
    {   64,  7168,  2048, 114, 0, N64 ,  64,  1,  16,  112,    0,  0,   0, 0, 112, 0},
    { 4096,  7168,  2048, 114, 0, NORM, 128,  1,  16, 1792,    0,  0,   0, 0, 114, 0},
    {    1, 36864,  7168,  78, 0, SWAP,   8,  1,  56,  288,    0,  0,   0, 0,  78, 0},
    {    1,  7000,  2304,  16, 0, SWAP,   8,  1,  18,   62,   48, 64,   0, 0,  16, 0},
    {   16, 36864,  7168,  78, 0, N64 , 128,  1,  56,  288,    0,  0,   0, 0,  78, 0},
    {   16,  7000,  2304,  16, 0, N64 , 128,  1,  18,   55,    0,  0,   0, 0,  16, 0},
    {  128, 36864,  7168,  78, 0, NORM, 128,  1,  56,  288,    0,  0,   0, 0,  78, 0},
    {  128,  7000,  2304,  16, 0, NORM, 128,  1,  18,   55,    0,  0,   0, 0,  16, 0},
    { 2049, 36864,  7168,  78, 0, NORM, 128,  1,  56, 4896,    0,  0,   0, 0,  78, 0},
    { 2049,  7000,  2304,  16, 0, NORM, 128,  1,  18,  935,    0,  0,   0, 0,  16, 0},
};

/* Plans next to a rule's threshold, so that a change of one of plan.c's constants moves one of them: the split
 * model's 1% margin and its chip share (102 x 2112), the reduce's and the cluster sum's fixed costs (576 x 16384, one
 * split count without clusters, another with them), the last-wave split's 3% margin (38 x 20002), stream-K's 3 us and
 * 5% (4096 x 576, 8192 x 2112: whole tiles, just short of both), the few-tile slices' 64 K blocks (1 x 7000) and
 * 10 MB in flight (1 x 6000: 9.2 MB, no slices; 1 x 6600: 10.1 MB, slices). */
static const plan_row kThresholds[] = {
    {  102,  2112,  7168, 132, 0, N64 ,  32,  1,  56,  132,    0,  0,   0, 0, 132, 0},
    {    1,   576, 16384, 132, 0, SWAP,   8, 13,  10,   65,    0,  0,   0, 0,  65, 0},
    {    1,   576, 16384, 132, 1, SWAP,   8,  8,  16,   40,    0,  0,   0, 0,  40, 8},
    {   38, 20002,  4096, 132, 0, N64 ,  64,  1,  32,  313,    0,  0,   0, 0, 132, 0},
    { 4096,   576,  2304, 132, 0, NORM,  64,  1,  18,  288,    0,  0,   0, 0, 132, 0},
    { 8192,  2112,  7168, 132, 0, NORM, 128,  1,  56, 1088,    0,  0,   0, 0, 132, 0},
    {    1,  7000,  7168, 132, 0, SWAP,   8,  1,  56,   55,    0,  0,   0, 0,  55, 0},
    {    1,  7000,  8192, 132, 0, SWAP,   8,  1,  64,  110,    0, 64,   0, 0, 110, 0},
    {    1,  6000,  8192, 132, 0, SWAP,   8,  2,  32,   94,    0,  0,   0, 0,  94, 0},
    {    1,  6600,  8192, 132, 0, SWAP,   8,  1,  64,  104,    0, 64,   0, 0, 104, 0},
};

/* The plans that the forcing knobs give (on the H200), which gpu-check runs test_hopper under: every kernel and plan
 * feature that the defaults reach only on some shapes, or not at all (the swapped last-wave split, swapped tiles of
 * 32..128 tokens, stream-K with one consumer warpgroup). Unknown values are ignored. */
static const struct {
    const char *env;
    plan_row row;
} kForced[] = {
    {"BFP8_HOPPER_FORCE=last-wave-split",
     {    8, 36864,  7168, 132, 1, SWAP,   8,  5,  12,  384,  264,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_FORCE=last-wave-split",
     {   16, 36864,  7168, 132, 1, N64 , 128,  5,  12,  384,  264,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_FORCE=last-wave-split",
     { 4096,  2112,  7168, 132, 1, NORM, 128,  1,  56,  544,    0,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_FORCE=slices", {    1,  4096,  7168, 132, 1, SWAP,   8,  1,  56,  128,    0, 32,   0, 0, 128, 0}},
    {"BFP8_HOPPER_FORCE=slices", {    1,  7168,  2048, 132, 1, SWAP,   8,  1,  16,  112,    0, 64,   0, 0, 112, 0}},
    {"BFP8_HOPPER_TILE=swap16,BFP8_HOPPER_FORCE=slices",
     {   16,  2112,  7168, 132, 1, SWAP,  16,  1,  56,   66,    0, 32,   0, 0,  66, 0}},
    {"BFP8_HOPPER_FORCE=stream-k", {  200,  7168,  8192, 132, 1, NORM, 128,  1,  64,  264,    0,  0, 112, 2, 132, 0}},
    {"BFP8_HOPPER_FORCE=stream-k", {   48,  7168,  4096, 132, 1, N64 ,  64,  1,  32,  264,    0,  0, 112, 2, 132, 0}},
    {"BFP8_HOPPER_FORCE=stream-k", {  128, 36864,  7168, 132, 1, NORM, 128,  1,  56,  528,  132,  0, 156, 3, 132, 0}},
    {"BFP8_HOPPER_FORCE=stream-k", { 4096,  7168, 16384, 132, 1, NORM, 128,  1, 128, 1980, 1584,  0, 208, 3, 132, 0}},
    {"BFP8_HOPPER_TILE=64", {    1,  2112,  7168, 132, 1, N64 ,  64,  3,  19,   99,    0,  0,   0, 0,  99, 3}},
    {"BFP8_HOPPER_TILE=64", {  512,  7168, 16384, 132, 1, NORM,  64,  2,  64,  500,  396,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_TILE=128", {   16,  7168,  2048, 132, 1, N64 , 128,  2,   8,  112,    0,  0,   0, 0, 112, 0}},
    {"BFP8_HOPPER_TILE=64x32", {  512,  7168,  2048, 132, 1, N64 ,  32,  1,  16, 1792,    0,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_TILE=128x32", {  256,  2112,  7168, 132, 1, NORM,  32,  1,  56,  132,    0,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_TILE=64x128", {   16,  7168,  2048, 132, 1, N64 , 128,  2,   8,  112,    0,  0,   0, 0, 112, 0}},
    {"BFP8_HOPPER_TILE=swap", {   64,  4096,  7168, 132, 1, SWAP,  64,  4,  14,  128,    0,  0,   0, 0, 128, 0}},
    {"BFP8_HOPPER_TILE=swap", {  100,  7168,  2048, 132, 1, SWAP, 128,  2,   8,  112,    0,  0,   0, 0, 112, 0}},
    {"BFP8_HOPPER_TILE=swap16", {   64,  2112,  7168, 132, 1, SWAP,  16,  1,  56,   68,    0,  0,   0, 0,  68, 0}},
    {"BFP8_HOPPER_TILE=swap32", {  128,  2112,  7168, 132, 1, SWAP,  32,  1,  56,   68,    0,  0,   0, 0,  68, 0}},
    {"BFP8_HOPPER_TILE=swap", {  512,  2112,  7168, 132, 1, NORM,  64,  1,  56,  132,    0,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_SPLITS=3", {    1,  2112,  7168, 132, 1, SWAP,   8,  3,  19,   51,    0,  0,   0, 0,  51, 3}},
    {"BFP8_HOPPER_SPLITS=5", { 4096,  7168, 16384, 132, 1, NORM, 128,  5,  26, 8960,    0,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_SPLITS=2", {    8, 36864,  7168, 132, 1, SWAP,   8,  2,  28,  576,    0,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_SPLITS=40", {    1,  4096,  7168, 132, 1, SWAP,   8, 28,   2,  896,    0,  0,   0, 0, 132, 0}},
    {"BFP8_HOPPER_TILE=96,BFP8_HOPPER_SPLITS=0,BFP8_HOPPER_FORCE=fast",
     {    8, 36864,  7168, 132, 1, SWAP,   8,  1,  56,  360,  264, 32,   0, 0, 132, 0}},
};

static void test_forced(void) {
    for (size_t i = 0; i < sizeof kForced / sizeof kForced[0]; i++) {
        const bfp8_hopper_knobs knobs = knobs_of(kForced[i].env);
        char what[128];
        snprintf(what, sizeof what, "plan under %s", kForced[i].env);
        check_row(&kForced[i].row, &knobs, what);
    }
}

/* Every plan of a grid (DeepSeek-R1 and ragged shapes, M = 1..130 and six larger, 132/114/78/16 SMs, no clusters /
 * the H200's / a small device's) as one FNV-1a hash of their plan lines. It last changed with the 64-row tiles of
 * docs/hopper.md's design log 80 (before them, it was the value the planner gave when it moved out of the CUDA code,
 * commit 1e16e46). A change of any plan in the grid changes it; the tables above say which. */
static void test_grid_fingerprint(void) {
    static const int64_t shapes[][2] = {
        {2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384}, {36864, 7168}, {7168, 18432}, {4096, 7168},
        {7168, 2048}, {576, 2304},   {576, 7168},  {576, 16384},  {2112, 2304},  {2112, 16384}, {7000, 2304},
        {7000, 7168}, {7000, 16384}, {129, 144},   {1, 16},       {7000, 16},    {36864, 144},  {8576, 4096},
        {1000, 2560}, {3000, 2048},  {17000, 256}, {21896, 512},  {20002, 4096}, {7000, 8192},  {1500, 4096},
        {256, 8192},  {330, 6144},   {520, 3584},  {2100, 3072}};
    static const int sms[] = {132, 114, 78, 16};
    const bfp8_hopper_cluster_fit none = {{0}}, small = {{0, 0, 8, 5, 4, 3, 2, 2, 2}};
    const bfp8_hopper_cluster_fit *const fits[] = {&none, &kH200ClusterFit, &small};
    static const char *const fit_names[] = {"none", "h200", "small"};
    int64_t ms[136];
    int nm = 0;
    for (int m = 1; m <= 130; m++) ms[nm++] = m;
    static const int64_t more[] = {256, 512, 1000, 2049, 4096, 8192};
    for (int i = 0; i < 6; i++) ms[nm++] = more[i];
    uint64_t hash = 0xcbf29ce484222325ull;
    int plans = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int i = 0; i < nm; i++)
            for (size_t c = 0; c < sizeof sms / sizeof sms[0]; c++)
                for (int f = 0; f < 3; f++) {
                    const bfp8_hopper_plan p =
                        bfp8_hopper_plan_make(ms[i], shapes[s][0], shapes[s][1], sms[c], fits[f], NULL);
                    char plan[192], line[256];
                    bfp8_hopper_plan_describe(&p, plan, sizeof plan);
                    const int len = snprintf(line, sizeof line, "%lld %lld %lld sms=%d fit=%s: %s\n",
                                             (long long)ms[i], (long long)shapes[s][0], (long long)shapes[s][1],
                                             sms[c], fit_names[f], plan);
                    for (int b = 0; b < len; b++) hash = (hash ^ (unsigned char)line[b]) * 0x100000001b3ull;
                    plans++;
                }
    CHECK(plans == 52224 && hash == 0xdeb6380116136b0eull, "the grid's %d plans hash to 0x%016llx, want 52224 plans, "
          "0xdeb6380116136b0e", plans, (unsigned long long)hash);
}

/* The knobs' parsing: the values docs/hopper-knobs.md lists, and what is ignored. */
static void test_knobs(void) {
    const bfp8_hopper_knobs d = bfp8_hopper_knobs_default();
    CHECK(!d.tile_forced && !d.splits && d.force == BFP8_HOPPER_FORCE_NONE && !d.trace && !d.log_plans, "defaults");
    static const struct {
        const char *env;
        bool forced, swap;
        int bq, rows;
    } tiles[] = {{"BFP8_HOPPER_TILE=64", true, false, 64, 0},        {"BFP8_HOPPER_TILE=128", true, false, 128, 0},
                 {"BFP8_HOPPER_TILE=64x32", true, false, 32, 64},    {"BFP8_HOPPER_TILE=64x128", true, false, 128, 64},
                 {"BFP8_HOPPER_TILE=128x32", true, false, 32, 128},  {"BFP8_HOPPER_TILE=128x64", true, false, 64, 128},
                 {"BFP8_HOPPER_TILE=swap", true, true, 0, 0},        {"BFP8_HOPPER_TILE=swap8", true, true, 8, 0},
                 {"BFP8_HOPPER_TILE=swap128", true, true, 128, 0},   {"BFP8_HOPPER_TILE=swap0", true, true, 0, 0},
                 {"BFP8_HOPPER_TILE=32", false, false, 0, 0},        {"BFP8_HOPPER_TILE=swap12", false, false, 0, 0},
                 {"BFP8_HOPPER_TILE=64x", false, false, 0, 0},       {"BFP8_HOPPER_TILE=", false, false, 0, 0},
                 {"BFP8_HOPPER_TILE=64x48", false, false, 0, 0},     {"BFP8_HOPPER_TILE=32x64", false, false, 0, 0},
                 {"BFP8_HOPPER_TILE=64x32x", false, false, 0, 0},    {"BFP8_HOPPER_TILE=x64", false, false, 0, 0},
                 {"BFP8_HOPPER_TILE=swap64x32", false, false, 0, 0}, {"BFP8_HOPPER_TILE=swap256", false, false, 0, 0},
                 {"", false, false, 0, 0}};
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        const bfp8_hopper_knobs k = knobs_of(tiles[i].env);
        CHECK(k.tile_forced == tiles[i].forced && k.tile_swap == tiles[i].swap && k.tile_bq == tiles[i].bq &&
                  k.tile_rows == tiles[i].rows,
              "'%s': forced %d swap %d bq %d rows %d", tiles[i].env, (int)k.tile_forced, (int)k.tile_swap, k.tile_bq,
              k.tile_rows);
        CHECK(knobs_taken(tiles[i].env) == (k.tile_forced || value_empty(tiles[i].env)), "'%s': check says %d",
              tiles[i].env, (int)knobs_taken(tiles[i].env));
    }
    static const struct {
        const char *env;
        int splits;
    } splits[] = {{"BFP8_HOPPER_SPLITS=1", 1},    {"BFP8_HOPPER_SPLITS=3", 3},  {"BFP8_HOPPER_SPLITS=1024", 1024},
                  {"BFP8_HOPPER_SPLITS=1025", 0}, {"BFP8_HOPPER_SPLITS=0", 0},  {"BFP8_HOPPER_SPLITS=-2", 0},
                  {"BFP8_HOPPER_SPLITS=3a", 0},   {"BFP8_HOPPER_SPLITS=", 0}};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        CHECK(knobs_of(splits[i].env).splits == splits[i].splits, "'%s': %d splits", splits[i].env,
              knobs_of(splits[i].env).splits);
        CHECK(knobs_taken(splits[i].env) == (splits[i].splits != 0 || value_empty(splits[i].env)),
              "'%s': check says %d", splits[i].env, (int)knobs_taken(splits[i].env));
    }
    static const struct {
        const char *env;
        bfp8_hopper_force force;
    } forces[] = {{"BFP8_HOPPER_FORCE=last-wave-split", BFP8_HOPPER_FORCE_LAST_WAVE_SPLIT},
                  {"BFP8_HOPPER_FORCE=slices", BFP8_HOPPER_FORCE_SLICES},
                  {"BFP8_HOPPER_FORCE=stream-k", BFP8_HOPPER_FORCE_STREAM_K},
                  {"BFP8_HOPPER_FORCE=stream-K", BFP8_HOPPER_FORCE_NONE},
                  {"BFP8_HOPPER_FORCE=all", BFP8_HOPPER_FORCE_NONE}};
    for (size_t i = 0; i < sizeof forces / sizeof forces[0]; i++) {
        CHECK(knobs_of(forces[i].env).force == forces[i].force, "'%s': force %d", forces[i].env,
              (int)knobs_of(forces[i].env).force);
        CHECK(knobs_taken(forces[i].env) == (forces[i].force != BFP8_HOPPER_FORCE_NONE), "'%s': check says %d",
              forces[i].env, (int)knobs_taken(forces[i].env));
    }
    static const struct {
        const char *env;
        int group_p;
    } groups[] = {{"BFP8_HOPPER_RASTER_GROUP=1", 1},       {"BFP8_HOPPER_RASTER_GROUP=16", 16},
                  {"BFP8_HOPPER_RASTER_GROUP=1024", 1024}, {"BFP8_HOPPER_RASTER_GROUP=2048", 0},
                  {"BFP8_HOPPER_RASTER_GROUP=0", 0},       {"BFP8_HOPPER_RASTER_GROUP=8x", 0},
                  {"BFP8_HOPPER_RASTER_GROUP=12", 12},     {"BFP8_HOPPER_RASTER_GROUP=-8", 0}};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        const int g = groups[i].group_p;
        CHECK(knobs_of(groups[i].env).group_p == g, "'%s': groups of %d", groups[i].env,
              knobs_of(groups[i].env).group_p);
        /* The planner takes only powers of two, so the check refuses 12. */
        CHECK(knobs_taken(groups[i].env) == (g > 0 && (g & (g - 1)) == 0), "'%s': check says %d", groups[i].env,
              (int)knobs_taken(groups[i].env));
    }
    CHECK(bfp8_hopper_plan_make(4096, 7168, 16384, 132, NULL, NULL).group_p == BFP8_HOPPER_GROUP_P &&
              bfp8_hopper_plan_make(4096, 7168, 16384, 132, NULL, &(bfp8_hopper_knobs){.group_p = 16}).group_p == 16 &&
              bfp8_hopper_plan_make(4096, 7168, 16384, 132, NULL, &(bfp8_hopper_knobs){.group_p = 12}).group_p ==
                  BFP8_HOPPER_GROUP_P,
          "the plan's rasterization group follows BFP8_HOPPER_RASTER_GROUP where it is a power of two");
    /* The default's short-K rule at its boundary (SHORT_K_BLOCKS blocks of K), on the normal path only. */
    const int64_t short_k = (int64_t)BFP8_HOPPER_SHORT_K_BLOCKS * BFP8_HOPPER_BK;
    const int64_t ks[] = {1, short_k - 1, short_k, short_k + 1, short_k + BFP8_HOPPER_BK, 7168};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const bfp8_hopper_plan pl = bfp8_hopper_plan_make(4096, 32768, ks[i], 132, NULL, NULL);
        const int want = ks[i] <= short_k ? BFP8_HOPPER_GROUP_P_SHORT_K : BFP8_HOPPER_GROUP_P;
        CHECK(!pl.swap && pl.group_p == want, "M=4096 N=32768 K=%lld: groups of %d P tiles, want %d",
              (long long)ks[i], pl.group_p, want);
        const bfp8_hopper_plan forced = bfp8_hopper_plan_make(4096, 32768, ks[i], 132, NULL,
                                                              &(bfp8_hopper_knobs){.group_p = 8});
        CHECK(forced.group_p == 8, "K=%lld: BFP8_HOPPER_RASTER_GROUP=8 gives groups of %d", (long long)ks[i],
              forced.group_p);
        const bfp8_hopper_plan swapped = bfp8_hopper_plan_make(
            16, 32768, ks[i], 132, NULL, &(bfp8_hopper_knobs){.tile_forced = true, .tile_swap = true});
        CHECK(swapped.swap && swapped.group_p == BFP8_HOPPER_GROUP_P,
              "M=16 K=%lld swapped: groups of %d, not the normal path's short-K rule", (long long)ks[i],
              swapped.group_p);
        const bfp8_hopper_plan moe = bfp8_hopper_plan_grouped(BFP8_HOPPER_CONTIGUOUS, 8, 4096, 32768, ks[i], 0, 132,
                                                              NULL);
        CHECK(moe.group_p == BFP8_HOPPER_GROUP_P, "grouped K=%lld: groups of %d", (long long)ks[i], moe.group_p);
    }
    /* ... and its 64-wide weight tiles at M <= SHORT_K_NARROW_M (one more block of K, or one more row, and the
     * waves rule picks 128 for this shape); forced tiles still win. */
    const struct {
        int64_t m, k;
        int bq;
    } narrow[] = {{9, short_k, 64},
                  {16, 1, 64},
                  {64, short_k, 64},
                  {BFP8_HOPPER_SHORT_K_NARROW_M, short_k, 64},
                  {BFP8_HOPPER_SHORT_K_NARROW_M + 1, short_k, 128},
                  {16, short_k + 1, 128},
                  {BFP8_HOPPER_SHORT_K_NARROW_M, short_k + BFP8_HOPPER_BK, 128}};
    for (size_t i = 0; i < sizeof narrow / sizeof narrow[0]; i++) {
        const bfp8_hopper_plan pl = bfp8_hopper_plan_make(narrow[i].m, 32768, narrow[i].k, 132, NULL, NULL);
        CHECK(!pl.swap && pl.bq == narrow[i].bq, "M=%lld N=32768 K=%lld: %s BQ=%d, want the normal path's BQ=%d",
              (long long)narrow[i].m, (long long)narrow[i].k, pl.swap ? "swapped" : "normal", pl.bq, narrow[i].bq);
    }
    const bfp8_hopper_knobs tile128 = {.tile_forced = true, .tile_bq = 128};
    CHECK(bfp8_hopper_plan_make(64, 32768, short_k, 132, NULL, &tile128).bq == 128,
          "BFP8_HOPPER_TILE=128 overrides the short-K tile width");
    CHECK(knobs_of("BFP8_HOPPER_TRACE=1").trace && !knobs_of("BFP8_HOPPER_TRACE=0").trace, "BFP8_HOPPER_TRACE");
    /* Whole topics only (test_env checks comma-separated lists, which this lookup cannot pose). */
    CHECK(knobs_of("BFP8_LOG=hopper").log_plans && !knobs_of("BFP8_LOG=dispatch").log_plans &&
              !knobs_of("BFP8_LOG=dispatch+hopper").log_plans && !knobs_of("BFP8_LOG=hoppers").log_plans,
          "BFP8_LOG");
    /* The process's environment is read once, and the test runs under none of these (gpu-check's variants set
     * them for test_hopper, not for this binary). */
    CHECK(bfp8_hopper_knobs_env() == bfp8_hopper_knobs_env(), "the environment's knobs are one struct");
}

/* No fit and no knobs mean none fit and the defaults; the plan line's format (BFP8_LOG=hopper). */
static void test_defaults_and_lines(void) {
    const bfp8_hopper_cluster_fit none = {{0}};
    const bfp8_hopper_knobs defaults = bfp8_hopper_knobs_default();
    const bfp8_hopper_plan a = bfp8_hopper_plan_make(1, 2112, 7168, 132, NULL, NULL);
    const bfp8_hopper_plan b = bfp8_hopper_plan_make(1, 2112, 7168, 132, &none, &defaults);
    /* Field by field: the struct has padding, whose bytes memcmp would compare too. */
    char la[256], lb[256];
    bfp8_hopper_plan_describe(&a, la, sizeof la);
    bfp8_hopper_plan_describe(&b, lb, sizeof lb);
    CHECK(a.swap == b.swap && a.bq == b.bq && a.p_tiles == b.p_tiles && a.q_tiles == b.q_tiles &&
              a.splits == b.splits && a.kb_per_split == b.kb_per_split && a.units == b.units && a.grid == b.grid &&
              a.whole_units == b.whole_units && a.csplit == b.csplit && a.slice_rows == b.slice_rows &&
              a.sk_tiles == b.sk_tiles && a.sk_pieces == b.sk_pieces,
          "NULL fit and knobs are not 'none fit' and the defaults: %s vs %s", la, lb);
    static const struct {
        int64_t m, n, k;
        const char *line;
    } lines[] = {
        {1, 2112, 7168, "swapped BQ=8 splits=4 (K blocks per split 14) units=68 (whole 0) grid=68 summed in clusters"},
        {8, 36864, 7168, "swapped BQ=8 splits=1 (K blocks per split 56) units=360 (whole 264; 96 row slices of 32 "
                         "first) grid=132"},
        {4096, 2112, 7168, "normal BQ=128 splits=1 (K blocks per split 56) units=792 (whole 396; stream-K over 148 "
                           "tiles, up to 3 pieces a CTA) grid=132"},
        {128, 36864, 7168, "normal BQ=128 splits=5 (K blocks per split 12) units=384 (whole 264) grid=132"},
        {128, 2112, 7168, "normal 64-row tiles, BQ=32 splits=1 (K blocks per split 56) units=132 (whole 0) grid=132"},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        const bfp8_hopper_plan p = bfp8_hopper_plan_make(lines[i].m, lines[i].n, lines[i].k, 132, &kH200ClusterFit,
                                                         NULL);
        char line[192];
        bfp8_hopper_plan_describe(&p, line, sizeof line);
        CHECK(strcmp(line, lines[i].line) == 0, "line of M=%lld N=%lld K=%lld: '%s', want '%s'", (long long)lines[i].m,
              (long long)lines[i].n, (long long)lines[i].k, line, lines[i].line);
    }
}

/* check_units over a grid: the DeepSeek-R1 shapes and ragged ones at many M, on several SM counts, under the defaults
 * and each forcing knob, with and without the H200's clusters. */
static void test_unit_grids(void) {
    static const int64_t shapes[][2] = {{2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384}, {36864, 7168},
                                        {7168, 18432}, {4096, 7168},  {7168, 2048},  {8576, 4096},  {2048, 512},
                                        {200, 300},    {1, 1},        {256, 8192},   {130, 129},    {7000, 2304},
                                        {576, 16384}};
    /* 1200 and 2000: 10 and 16 P tiles, several rasterization groups with a partial last one. */
    static const int64_t ms[] = {1, 5, 8, 9, 16, 33, 64, 65, 100, 128, 129, 256, 512, 1000, 1200, 2000, 4095, 4096};
    static const int sms[] = {132, 114, 78, 7, 2, 1};
    static const char *const envs[] = {"",
                                       "BFP8_HOPPER_FORCE=last-wave-split",
                                       "BFP8_HOPPER_FORCE=slices",
                                       "BFP8_HOPPER_FORCE=stream-k",
                                       "BFP8_HOPPER_TILE=64",
                                       "BFP8_HOPPER_TILE=128",
                                       "BFP8_HOPPER_TILE=64x32",
                                       "BFP8_HOPPER_TILE=64x128",
                                       "BFP8_HOPPER_TILE=128x32",
                                       "BFP8_HOPPER_TILE=swap",
                                       "BFP8_HOPPER_TILE=swap16",
                                       "BFP8_HOPPER_SPLITS=3",
                                       "BFP8_HOPPER_RASTER_GROUP=1",
                                       "BFP8_HOPPER_RASTER_GROUP=2",
                                       "BFP8_HOPPER_RASTER_GROUP=16",
                                       "BFP8_HOPPER_RASTER_GROUP=12",
                                       "BFP8_HOPPER_RASTER_GROUP=4,BFP8_HOPPER_FORCE=stream-k"};
    int checked = 0, sliced = 0, stream_k = 0, in_clusters = 0, split = 0, staged64 = 0;
    for (size_t e = 0; e < sizeof envs / sizeof envs[0]; e++) {
        const bfp8_hopper_knobs knobs = knobs_of(envs[e]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
                for (size_t c = 0; c < sizeof sms / sizeof sms[0]; c++) {
                    const bfp8_hopper_cluster_fit none = {{0}};
                    const bfp8_hopper_cluster_fit *fit = (s + i) % 2 ? &kH200ClusterFit : &none;
                    const bfp8_hopper_plan p =
                        bfp8_hopper_plan_make(ms[i], shapes[s][0], shapes[s][1], sms[c], fit, &knobs);
                    char why[256] = "";
                    CHECK(bfp8_hopper_plan_check_units(&p, ms[i], shapes[s][0], shapes[s][1], why, sizeof why),
                          "units of M=%lld N=%lld K=%lld on %d SMs under '%s': %s", (long long)ms[i],
                          (long long)shapes[s][0], (long long)shapes[s][1], sms[c], envs[e], why);
                    CHECK(p.grid >= 1 && p.grid <= sms[c] && p.grid <= p.units, "grid %d of %d units on %d SMs",
                          p.grid, p.units, sms[c]);
                    /* The 64-row-stage kernels exist for the plain normal path's 64-row tiles, 32 or 64 wide. */
                    CHECK(!p.stages64 || (!p.swap && p.tile_rows == 64 && p.bq <= 64 && !p.csplit && !p.sk_tiles),
                          "64-row stages for M=%lld N=%lld K=%lld under '%s': swap %d, %d-row tiles, BQ=%d, "
                          "csplit %d, stream-K %d", (long long)ms[i], (long long)shapes[s][0],
                          (long long)shapes[s][1], envs[e], (int)p.swap, p.tile_rows, p.bq, p.csplit, p.sk_tiles);
                    checked++;
                    sliced += p.slice_rows != 0, stream_k += p.sk_tiles != 0, in_clusters += p.csplit != 0;
                    split += p.splits > 1 && !p.csplit, staged64 += p.stages64;
                }
    }
    /* The grid reaches every kind of plan. */
    CHECK(sliced && stream_k && in_clusters && split && staged64,
          "plans with slices %d, stream-K %d, clusters %d, reduce %d, 64-row stages %d", sliced, stream_k, in_clusters,
          split, staged64);
    printf("unit grids: %d plans checked (%d with row slices, %d stream-K, %d summed in clusters, %d reduced)\n",
           checked, sliced, stream_k, in_clusters, split);
}

/* check_units must reject plans whose units miss or repeat outputs. */
static void test_check_units_rejects(void) {
    static const struct {
        int64_t m, n, k;
        const char *what;
    } shapes[] = {{129, 8576, 4096, "a last-wave split"}, {8, 36864, 7168, "row slices"},
                  {4096, 2112, 7168, "stream-K"},         {1, 4096, 7168, "a split summed in clusters"},
                  {512, 7168, 16384, "whole tiles"}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const bfp8_hopper_plan good =
            bfp8_hopper_plan_make(shapes[i].m, shapes[i].n, shapes[i].k, 132, &kH200ClusterFit, NULL);
        char why[256] = "";
        CHECK(bfp8_hopper_plan_check_units(&good, shapes[i].m, shapes[i].n, shapes[i].k, why, sizeof why), "%s: %s",
              shapes[i].what, why);
        bfp8_hopper_plan bad[3] = {good, good, good};
        bad[0].units--;   /* an output tile, slice or stream-K piece left out */
        bad[1].q_tiles++; /* a column of tiles that no unit computes */
        /* and one of the plan's own kind: a slice row, a K block, a stream-K piece left out */
        if (good.slice_rows)
            bad[2].slice_rows /= 2;
        else if (good.sk_tiles)
            bad[2].sk_pieces--;
        else
            bad[2].kb_per_split--;
        for (int b = 0; b < 3; b++) {
            why[0] = '\0';
            CHECK(!bfp8_hopper_plan_check_units(&bad[b], shapes[i].m, shapes[i].n, shapes[i].k, why, sizeof why) &&
                      why[0],
                  "%s with tampering %d accepted", shapes[i].what, b);
        }
    }
}

/* Grouped plans (bfp8_hopper_plan_grouped) on the MoE anchor's cells on 132 SMs: the tile rows and widths the rule
 * picks, pinned (a change moves the measured cells: bench/RESULTS.md); then the kernel's grouped unit decode against
 * plain arithmetic: masked, every row of every group with rows in exactly one non-empty unit per weight tile, with
 * the counts clamped to [0, max_m] as the kernel reads them, and empty units elsewhere; contiguous, the dense grid's
 * tiles, each once, with its rows cut at m. */
static void test_grouped_plans(void) {
    static const struct {
        int layout;
        int64_t groups, m, n, k, expected;
        int tile_rows, bq, units, grid;
    } golden[] = {
        /* contiguous G x rows: m = G x rows; masked G x tokens: max_m = max(128, round_up(2 x tokens, 128)) */
        {BFP8_HOPPER_CONTIGUOUS, 8, 1024, 4096, 7168, 128, 128, 128, 256, 132},
        {BFP8_HOPPER_CONTIGUOUS, 8, 16384, 4096, 7168, 2048, 128, 128, 4096, 132},
        {BFP8_HOPPER_CONTIGUOUS, 256, 32768, 7168, 2048, 128, 128, 128, 14336, 132},
        {BFP8_HOPPER_CONTIGUOUS, 8, 1024, 7168, 2048, 128, 128, 128, 448, 132},
        {BFP8_HOPPER_MASKED, 8, 128, 4096, 7168, 16, 64, 128, 512, 132},
        {BFP8_HOPPER_MASKED, 8, 128, 4096, 7168, 64, 64, 128, 512, 132},
        {BFP8_HOPPER_MASKED, 32, 256, 4096, 7168, 128, 128, 128, 2048, 132},
        {BFP8_HOPPER_MASKED, 8, 512, 7168, 2048, 256, 128, 128, 1792, 132},
        {BFP8_HOPPER_MASKED, 2, 128, 256, 512, 16, 64, 64, 16, 16},
    };
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        const bfp8_hopper_plan pl = bfp8_hopper_plan_grouped(golden[i].layout, golden[i].groups, golden[i].m,
                                                             golden[i].n, golden[i].k, golden[i].expected, 132, NULL);
        CHECK(pl.grouped == golden[i].layout && pl.tile_rows == golden[i].tile_rows && pl.bq == golden[i].bq &&
                  pl.units == golden[i].units && pl.grid == golden[i].grid && pl.splits == 1 && !pl.swap,
              "grouped plan %zu: %d-row tiles BQ=%d units=%d grid=%d, want %d-row BQ=%d units=%d grid=%d", i,
              pl.tile_rows, pl.bq, pl.units, pl.grid, golden[i].tile_rows, golden[i].bq, golden[i].units,
              golden[i].grid);
    }
    /* ("64x32": the dense path's only; grouped plans keep their own widths, 64 or 128.) */
    static const char *const envs[] = {"", "BFP8_HOPPER_TILE=64", "BFP8_HOPPER_TILE=128", "BFP8_HOPPER_TILE=64x32"};
    static const int64_t shapes[][4] = {/* G, m (masked: max_m), N, K */
                                        {1, 1, 1, 16},     {3, 17, 130, 256},  {8, 128, 4096, 7168}, {5, 300, 200, 512},
                                        {32, 64, 192, 128}, {6, 256, 512, 384}, {256, 129, 64, 256}};
    static const int64_t expected[] = {0, 1, 64, 65, 1000};
    int checked = 0;
    for (size_t e = 0; e < sizeof envs / sizeof envs[0]; e++) {
        const bfp8_hopper_knobs knobs = knobs_of(envs[e]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t x = 0; x < sizeof expected / sizeof expected[0]; x++) {
                const int64_t G = shapes[s][0], m = shapes[s][1], n = shapes[s][2], k = shapes[s][3];
                /* masked */
                bfp8_hopper_plan pl =
                    bfp8_hopper_plan_grouped(BFP8_HOPPER_MASKED, G, m, n, k, expected[x], 132, &knobs);
                int *counts = malloc(sizeof(int) * (size_t)G);
                for (int64_t g = 0; g < G; g++) {
                    const uint64_t r = test_rand_u64();
                    counts[g] = g == 0 ? 0 : g == 1 ? (int)m : r % 7 == 0 ? -(int)(r % 5) - 1
                                : r % 7 == 1 ? (int)m + 1 + (int)(r % 50) : (int)(r % (uint64_t)(m + 1));
                }
                bfp8_hopper_params hp;
                memset(&hp, 0, sizeof hp);
                bfp8_hopper_params_set_grouped(&hp, &pl, m, n, k);
                /* cover[(g * m + row) * q_tiles + qt]: how many non-empty units store that row of that weight tile */
                unsigned char *cover = calloc((size_t)(G * m * pl.q_tiles), 1);
                bool ok = pl.units == G * pl.p_tiles * pl.q_tiles && (pl.tile_rows == 64 || pl.tile_rows == 128) &&
                          (pl.bq == 64 || pl.bq == 128); /* the grouped kernels' widths */
                CHECK(ok, "masked plan of G=%lld m=%lld N=%lld under '%s': %d-row tiles BQ=%d", (long long)G,
                      (long long)m, (long long)n, envs[e], pl.tile_rows, pl.bq);
                for (int u = 0; ok && u < pl.units; u++) {
                    bfp8_hopper_unit w = bfp8_hopper_decode_grouped_tile(&hp, u);
                    bfp8_hopper_grouped_set_rows(&hp, &w, counts[w.group]);
                    const int qt = u % pl.q_tiles, g = u / pl.q_tiles % (int)G, rt = u / pl.q_tiles / (int)G;
                    const int rows = counts[g] < 0 ? 0 : counts[g] > m ? (int)m : counts[g];
                    const bool busy = rt * pl.tile_rows < rows;
                    ok = w.group == g && w.qt == qt && w.p0 == g * m + rt * pl.tile_rows && w.p_end == g * m + rows &&
                         w.kb0 == 0 && w.kb1 == (busy ? hp.kblocks : 0) && w.p_cut == (pl.tile_rows == 64) &&
                         !w.partial;
                    CHECK(ok, "masked unit %d of G=%lld m=%lld N=%lld under '%s': group %d qt %d rows [%d, %d) K "
                              "[%d, %d), want group %d qt %d row tile %d of %d rows",
                          u, (long long)G, (long long)m, (long long)n, envs[e], w.group, w.qt, w.p0, w.p_end, w.kb0,
                          w.kb1, g, qt, rt, rows);
                    for (int r = w.p0; ok && busy && r < w.p0 + pl.tile_rows && r < w.p_end; r++)
                        cover[(size_t)r * pl.q_tiles + qt]++;
                }
                for (int64_t g = 0; ok && g < G; g++)
                    for (int64_t r = 0; r < m; r++)
                        for (int qt = 0; qt < pl.q_tiles; qt++) {
                            const int want = r < counts[g] ? 1 : 0;
                            if (cover[(size_t)(g * m + r) * pl.q_tiles + qt] != want) {
                                CHECK(0, "masked G=%lld m=%lld: group %lld row %lld weight tile %d stored %d times",
                                      (long long)G, (long long)m, (long long)g, (long long)r, qt,
                                      cover[(size_t)(g * m + r) * pl.q_tiles + qt]);
                                ok = false;
                            }
                            if (!ok) break;
                        }
                free(cover), free(counts);
                /* contiguous, with m = G x m rows */
                const int64_t rows = G * m;
                pl = bfp8_hopper_plan_grouped(BFP8_HOPPER_CONTIGUOUS, G, rows, n, k, expected[x], 132, &knobs);
                memset(&hp, 0, sizeof hp);
                bfp8_hopper_params_set_grouped(&hp, &pl, rows, n, k);
                unsigned char *tiles = calloc((size_t)pl.p_tiles * pl.q_tiles, 1);
                ok = pl.tile_rows == 128 && pl.units == pl.p_tiles * pl.q_tiles;
                for (int u = 0; ok && u < pl.units; u++) {
                    const bfp8_hopper_unit w = bfp8_hopper_decode_grouped_tile(&hp, u);
                    const bfp8_hopper_unit d = bfp8_hopper_decode_tile_unit(&hp, u, false);
                    ok = w.pt == d.pt && w.qt == d.qt && w.p0 == d.pt * 128 &&
                         w.p_end == (w.p0 + 128 < rows ? w.p0 + 128 : rows) && w.kb0 == 0 && w.kb1 == hp.kblocks &&
                         w.group == -1 && w.pt < pl.p_tiles && w.qt < pl.q_tiles;
                    CHECK(ok, "contiguous unit %d of m=%lld N=%lld: tile %d,%d rows [%d, %d)", u, (long long)rows,
                          (long long)n, w.pt, w.qt, w.p0, w.p_end);
                    if (ok) tiles[(size_t)w.pt * pl.q_tiles + w.qt]++;
                }
                for (int64_t t = 0; ok && t < (int64_t)pl.p_tiles * pl.q_tiles; t++)
                    CHECK(tiles[t] == 1, "contiguous m=%lld N=%lld: tile %lld decoded %d times", (long long)rows,
                          (long long)n, (long long)t, tiles[t]);
                free(tiles);
                checked += 2;
            }
    }
    printf("grouped plans: %d unit grids checked\n", checked);
}

int main(void) {
    test_seed();
    check_rows(kDsr1OnH200, sizeof kDsr1OnH200 / sizeof kDsr1OnH200[0], "DeepSeek-R1 plan on the H200");
    check_rows(kNoClusters, sizeof kNoClusters / sizeof kNoClusters[0], "plan without clusters");
    check_rows(kTestCasesOnH200, sizeof kTestCasesOnH200 / sizeof kTestCasesOnH200[0], "test case on the H200");
    check_rows(kOtherSms, sizeof kOtherSms / sizeof kOtherSms[0], "plan on other SMs");
    check_rows(kThresholds, sizeof kThresholds / sizeof kThresholds[0], "plan at a threshold");
    test_grid_fingerprint();
    test_forced();
    test_knobs();
    test_defaults_and_lines();
    test_unit_grids();
    test_check_units_rejects();
    test_grouped_plans();
    return TEST_SUMMARY("hopper_plan");
}
