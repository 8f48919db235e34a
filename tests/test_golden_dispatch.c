/* Golden dispatch: which backend `auto` picks, with no GPU and no kernel running.
 * - The measured ranking's rules (src/rank.h), pinned on a table and mock backends of this test's own: the faster
 *   measured backend wins whatever its priority, nearest measured M in log space (the geometric midpoints exactly),
 *   the dtype of the same size, a measured backend above an unmeasured one, caps priority outside the table, ties
 *   to the first registered, the table never making a backend capable, and each card ranked by its own cells (else
 *   the reference card's, or the first listed card's that has the shape).
 * - The built-in table (bench/data/rank-*.csv): well formed, covering every cell of the DeepSeek-R1 table on each of
 *   its cards, and, on a registry of the real backends' declared capabilities (sm_90), `auto` within 1% of the
 *   fastest capable backend measured in every cell of every card, in GEMM and linear calls; the M between cells
 *   following their nearest cell; shapes outside the table on the priorities.
 * - `explain` saying which cell ranked a problem, or that the priorities did.
 * - On the host, `cpu` for every DeepSeek-R1 layer. */
#include "check.h"
#include "blockfp8_grouped.h"
#include "internal.h"
#include "rank.h"
#ifdef BFP8_WITH_CUDA
#include "backends/cuda/cuda_glue.h"
#endif

#include <math.h>

typedef struct dsr1_layer {
    const char *name;
    int64_t n, k;
} dsr1_layer;

/* bench/data/dsr1_shapes.csv and dsr1_m.csv: the DeepSeek-R1 table. */
static const dsr1_layer DSR1[] = {
    {"q_a+kv_a", 2112, 7168},      {"q_b", 24576, 1536},         {"kv_b", 32768, 512},
    {"o_proj", 7168, 16384},       {"mlp.gate_up", 36864, 7168}, {"mlp.down", 7168, 18432},
    {"shared.gate_up", 4096, 7168}, {"shared.down", 7168, 2048},
};
enum { NUM_LAYERS = sizeof DSR1 / sizeof DSR1[0], NUM_M = 6 };
static const int64_t DSR1_M[NUM_M] = {1, 16, 64, 128, 512, 4096};

#define ALL_FLOATS (BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16))
#define ALL_LAYOUTS ((1u << BFP8_LAYOUT_COUNT) - 1)

/* The problem of a layer on CUDA: activations in any fp32 layout, row-major weight scales on the device; a linear
 * call (the quantization kernel just before) or a plain GEMM. */
static bfp8_problem cuda_problem(int arch, int64_t m, int64_t n, int64_t k, bfp8_dtype out, bool linear) {
    return (bfp8_problem){.device = BFP8_DEVICE_CUDA, .arch = arch, .m = m, .n = n, .k = k, .out_dtype = out,
                          .scale_format = BFP8_SCALE_FP32, .a_layouts = bfp8_scale_layouts_for(BFP8_SCALE_FP32),
                          .b_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR), .act_from_prior_kernel = linear};
}

static const char *choose(const bfp8_backend *const *list, size_t count, const bfp8_problem *p,
                          const bfp8_rank_table *table) {
    bfp8_decision dec;
    return bfp8_select_ranked(list, count, p, BFP8_POLICY_AUTO, NULL, table, &dec) == BFP8_OK ? dec.backend->name
                                                                                              : "(none)";
}

/* ------------------------------------------------------------------------------------------------------------ */
/* The rules, on a table of this test's own                                                                      */
/* ------------------------------------------------------------------------------------------------------------ */

static bfp8_status never_runs(const bfp8_backend *self, const bfp8_gemm_args *a) {
    CHECK(false, "%s: a golden dispatch test ran a kernel", self->name);
    return BFP8_ERR_UNSUPPORTED;
}

/* Three CUDA backends on any arch. alpha has the lowest priority and no bias; gamma the highest and is never
 * measured. */
#define MOCK_CAPS(prio, bias)                                                                                    \
    {.device = BFP8_DEVICE_CUDA, .out_dtypes = ALL_FLOATS, .scale_formats = BFP8_BIT(BFP8_SCALE_FP32),          \
     .a_layouts = ALL_LAYOUTS, .b_layouts = ALL_LAYOUTS, .bias_dtypes = (bias), .priority = (prio)}
static const bfp8_backend alpha = {.name = "alpha", .caps = MOCK_CAPS(10, 0), .gemm = never_runs};
static const bfp8_backend beta = {.name = "beta", .caps = MOCK_CAPS(20, ALL_FLOATS), .gemm = never_runs};
static const bfp8_backend gamma_ = {.name = "gamma", .caps = MOCK_CAPS(30, ALL_FLOATS), .gemm = never_runs};

static const char *const kTestBackends[] = {"alpha", "beta"};
static const char *const kTestSources[] = {"test-run (tests/test_golden_dispatch.c)", "other-run (here too)"};
/* Card 0 is the reference; card 1 orders two shapes the other way and alone measured a third. */
static const char *const kTestCards[] = {"Ref GPU", "Other GPU"};
static const bfp8_rank_cell kTestCells[] = {
    {90, 0, BFP8_DTYPE_BF16, 1000, 2000, 1, 0, {5, 10}},
    {90, 0, BFP8_DTYPE_BF16, 1000, 2000, 64, 0, {10, 5}},
    {90, 0, BFP8_DTYPE_BF16, 1000, 2000, 4096, 0, {0, 100}}, /* alpha not measured */
    {90, 0, BFP8_DTYPE_F16, 5000, 2000, 16, 0, {1, 2}},       /* f16 cells only */
    {90, 0, BFP8_DTYPE_F32, 3000, 2000, 16, 0, {7, 7}},       /* a tie */
    {90, 0, BFP8_DTYPE_BF16, 7000, 2000, 16, 0, {NAN, -1}},   /* not times: not measured */
    {90, 1, BFP8_DTYPE_BF16, 1000, 2000, 1, 1, {10, 5}},      /* [6] */
    {90, 1, BFP8_DTYPE_BF16, 1000, 2000, 64, 1, {5, 10}},
    {90, 1, BFP8_DTYPE_F16, 5000, 2000, 16, 1, {2, 1}},       /* [8]: f16, as card 0's */
    {90, 1, BFP8_DTYPE_BF16, 9000, 2000, 16, 1, {3, 4}},      /* [9]: only card 1 measured it */
    {90, 1, BFP8_DTYPE_BF16, 3000, 2000, 16, 1, {4, 3}},      /* [10]: card 1 has 3000x2000 in bf16, not f32 */
};
static const bfp8_rank_table kTestTable = {.backends = kTestBackends, .nbackends = 2, .sources = kTestSources,
                                           .nsources = 2, .cards = kTestCards, .ncards = 2, .cells = kTestCells,
                                           .ncells = sizeof kTestCells / sizeof kTestCells[0]};

static void expect_choice(const bfp8_backend *const *list, size_t count, const bfp8_problem *p,
                          const bfp8_rank_table *t, const char *want, const char *why) {
    const char *got = choose(list, count, p, t);
    CHECK(strcmp(got, want) == 0, "%s: M=%lld N=%lld K=%lld out=%s sm_%d bias=%d: auto chose %s, want %s", why,
          (long long)p->m, (long long)p->n, (long long)p->k, bfp8_dtype_name(p->out_dtype), p->arch, p->has_bias,
          got, want);
}

/* The measured M of the cell that ranks p, or -1 for none. */
static int64_t cell_m(const bfp8_rank_table *t, const bfp8_problem *p) {
    bfp8_rank r = bfp8_rank_find(t, p);
    return r.cell ? r.cell->m : -1;
}

/* What explain prints about the cell that ranks p. */
static void expect_describe(const bfp8_rank_table *t, const bfp8_problem *p, const char *want) {
    const bfp8_rank r = bfp8_rank_find(t, p);
    char buf[512];
    bfp8_rank_describe(&r, p, buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0, "describe: '%s', want '%s'", buf, want);
}

static void test_rules(void) {
    const bfp8_backend *list[] = {&alpha, &beta, &gamma_};
    const bfp8_rank_table *t = &kTestTable;
    bfp8_problem p = cuda_problem(90, 1, 1000, 2000, BFP8_DTYPE_BF16, false);

    /* Measured: the faster, whatever the priorities (gamma, the highest, is not measured). */
    expect_choice(list, 3, &p, t, "alpha", "faster measured at M=1");
    p.m = 64;
    expect_choice(list, 3, &p, t, "beta", "faster measured at M=64");
    /* Nearest measured M in log space; the geometric midpoint goes to the lower (1*64 = 8*8, 64*4096 = 512*512). */
    const int64_t nearest[][2] = {{0, 1},    {1, 1},       {2, 1},           {7, 1},      {8, 1},
                                  {9, 64},   {63, 64},     {64, 64},         {65, 64},    {511, 64},
                                  {512, 64}, {513, 4096},  {4096, 4096},     {4097, 4096}, {(int64_t)1 << 40, 4096}};
    for (size_t i = 0; i < sizeof nearest / sizeof nearest[0]; i++) {
        p.m = nearest[i][0];
        CHECK(cell_m(t, &p) == nearest[i][1], "M=%lld ranked by the M=%lld cell, want M=%lld", (long long)p.m,
              (long long)cell_m(t, &p), (long long)nearest[i][1]);
    }
    p.m = 8;
    expect_choice(list, 3, &p, t, "alpha", "M=8: the M=1 cell");
    p.m = 9;
    expect_choice(list, 3, &p, t, "beta", "M=9: the M=64 cell");
    /* A measured backend above an unmeasured one, even of higher priority: at M=4096 only beta was measured. */
    p.m = 513;
    expect_choice(list, 3, &p, t, "beta", "measured beta above unmeasured alpha and gamma");

    /* It only orders capable backends: with a bias alpha cannot run, so the fastest capable measured one. */
    p.m = 1;
    p.has_bias = true;
    p.bias_dtype = BFP8_DTYPE_F32;
    expect_choice(list, 3, &p, t, "beta", "alpha (fastest) cannot take a bias");
    /* prefer alpha there: the fallback is auto among the rest, ranked the same way. */
    bfp8_decision dec;
    CHECK_OK(bfp8_select_ranked(list, 3, &p, BFP8_POLICY_PREFER, "alpha", t, &dec));
    CHECK(dec.backend == &beta && dec.fallback && strstr(dec.reason, "bias"), "prefer alpha with a bias: %s (%s)",
          dec.backend ? dec.backend->name : "none", dec.reason);
    p.has_bias = false;
    /* prefer and strict name a backend; the ranking does not overrule them. */
    CHECK_OK(bfp8_select_ranked(list, 3, &p, BFP8_POLICY_PREFER, "gamma", t, &dec));
    CHECK(dec.backend == &gamma_ && !dec.fallback, "prefer gamma: %s", dec.backend ? dec.backend->name : "none");
    CHECK_OK(bfp8_select_ranked(list, 3, &p, BFP8_POLICY_STRICT, "beta", t, &dec));
    CHECK(dec.backend == &beta, "strict beta: %s", dec.backend ? dec.backend->name : "none");

    /* The other 2-byte dtype's cells: f16 output takes bf16 cells, and bf16 output f16 cells where only those
     * exist. f32 has no such neighbour. */
    p = cuda_problem(90, 1, 1000, 2000, BFP8_DTYPE_F16, false);
    bfp8_rank r = bfp8_rank_find(t, &p);
    CHECK(r.cell == &kTestCells[0], "f16 output: not the bf16 M=1 cell");
    expect_choice(list, 3, &p, t, "alpha", "f16 output, bf16 cell");
    p = cuda_problem(90, 16, 5000, 2000, BFP8_DTYPE_BF16, false);
    CHECK(bfp8_rank_find(t, &p).cell == &kTestCells[3], "bf16 output: not the f16 cell");
    p = cuda_problem(90, 1, 1000, 2000, BFP8_DTYPE_F32, false);
    r = bfp8_rank_find(t, &p);
    CHECK(!r.cell && r.miss == BFP8_RANK_MISS_DTYPE, "f32 output took a 2-byte cell");
    expect_choice(list, 3, &p, t, "gamma", "f32 output: priorities");

    /* Equal times: the first registered of the two. */
    p = cuda_problem(90, 16, 3000, 2000, BFP8_DTYPE_F32, false);
    expect_choice(list, 3, &p, t, "alpha", "tie, alpha registered first");
    const bfp8_backend *reversed[] = {&gamma_, &beta, &alpha};
    expect_choice(reversed, 3, &p, t, "beta", "tie, beta registered first");

    /* Not a time (NaN, negative): not measured, so the priorities. */
    p = cuda_problem(90, 16, 7000, 2000, BFP8_DTYPE_BF16, false);
    r = bfp8_rank_find(t, &p);
    CHECK(r.cell && bfp8_rank_time(&r, "alpha") == 0 && bfp8_rank_time(&r, "beta") == 0, "NaN or -1 as a time");
    expect_choice(list, 3, &p, t, "gamma", "no valid time: priorities");

    /* Outside the table: priorities. No neighbouring shape, no other arch, not the CPU, no table. */
    p = cuda_problem(90, 1, 1000, 2048, BFP8_DTYPE_BF16, false);
    r = bfp8_rank_find(t, &p);
    CHECK(!r.cell && r.miss == BFP8_RANK_MISS_SHAPE, "K=2048 took K=2000's cells");
    expect_choice(list, 3, &p, t, "gamma", "unmeasured shape");
    p = cuda_problem(89, 1, 1000, 2000, BFP8_DTYPE_BF16, false);
    CHECK(cell_m(t, &p) == -1, "sm_89 took sm_90's cells");
    expect_choice(list, 3, &p, t, "gamma", "unmeasured arch");
    p = cuda_problem(90, 1, 1000, 2000, BFP8_DTYPE_BF16, false);
    expect_choice(list, 3, &p, NULL, "gamma", "no table");
    /* A linear call ranks by the same cells (the table measures GEMM calls). */
    p.act_from_prior_kernel = true;
    expect_choice(list, 3, &p, t, "alpha", "linear call, M=1");
    p.device = BFP8_DEVICE_CPU;
    r = bfp8_rank_find(t, &p);
    CHECK(!r.cell && r.miss == BFP8_RANK_MISS_NOT_CUDA, "a CPU problem took a CUDA cell");
    /* bfp8_select ranks by the built-in table, which knows none of these names: priorities. */
    p = cuda_problem(90, 1, 2112, 7168, BFP8_DTYPE_BF16, false);
    CHECK_OK(bfp8_select(list, 3, &p, BFP8_POLICY_AUTO, NULL, &dec));
    CHECK(dec.backend == &gamma_, "bfp8_select with unmeasured names: %s", dec.backend ? dec.backend->name : "none");

    /* What explain prints about it. */
    p = cuda_problem(90, 9, 1000, 2000, BFP8_DTYPE_F16, false);
    expect_describe(t, &p, "measured on Ref GPU: sm_90 bf16 N=1000 K=2000 M=64 (nearest measured M to 9) (the bf16 "
                           "cell for f16 output), run test-run (tests/test_golden_dispatch.c)");
    p = cuda_problem(90, 1, 1000, 2048, BFP8_DTYPE_BF16, false);
    expect_describe(t, &p, "caps priority (no measured cell for sm_90 N=1000 K=2048)");
}

/* Which card's cells: the problem's own, else the first listed card's that has the shape (the reference first);
 * names compare exactly; the dtype rule applies within a card, before falling back to another card. */
static void test_cards(void) {
    const bfp8_backend *list[] = {&alpha, &beta, &gamma_};
    const bfp8_rank_table *t = &kTestTable;
    bfp8_problem p = cuda_problem(90, 1, 1000, 2000, BFP8_DTYPE_BF16, false);
    bfp8_rank r = bfp8_rank_find(t, &p);
    CHECK(r.cell == &kTestCells[0] && !r.other_card, "no card: the reference card's cell");
    expect_choice(list, 3, &p, t, "alpha", "no card: the reference card's order");
    p.card = "Other GPU";
    r = bfp8_rank_find(t, &p);
    CHECK(r.cell == &kTestCells[6] && !r.other_card, "card 1: its own cell");
    expect_choice(list, 3, &p, t, "beta", "card 1: its own order at M=1");
    p.m = 64;
    expect_choice(list, 3, &p, t, "alpha", "card 1: its own order at M=64");
    p.m = 4096; /* card 1 measured M = 1 and 64 only: the nearest of its own cells, not card 0's M=4096 */
    CHECK(bfp8_rank_find(t, &p).cell == &kTestCells[7], "card 1 at M=4096: not its M=64 cell");
    /* An unknown card, and a name that differs only in case: the reference card's cells, marked as another's. */
    const char *const strangers[] = {"Unknown GPU", "other gpu", ""};
    for (size_t i = 0; i < sizeof strangers / sizeof strangers[0]; i++) {
        p = cuda_problem(90, 1, 1000, 2000, BFP8_DTYPE_BF16, false);
        p.card = strangers[i];
        r = bfp8_rank_find(t, &p);
        CHECK(r.cell == &kTestCells[0] && r.other_card, "card '%s': the reference card's cell, marked", strangers[i]);
        expect_choice(list, 3, &p, t, "alpha", "unknown card: the reference card's order");
    }
    p.card = "Unknown GPU";
    expect_describe(t, &p, "measured on Ref GPU (Unknown GPU has no cells of this shape and dtype): sm_90 bf16 "
                           "N=1000 K=2000 M=1, run test-run (tests/test_golden_dispatch.c)");
    /* A shape only card 1 measured ranks every card by card 1's cells; card 1's own problem is not marked. */
    p = cuda_problem(90, 16, 9000, 2000, BFP8_DTYPE_BF16, false);
    r = bfp8_rank_find(t, &p);
    CHECK(r.cell == &kTestCells[9] && !r.other_card, "no card, a shape only card 1 has");
    expect_choice(list, 3, &p, t, "alpha", "no card, a shape only card 1 has");
    p.card = "Ref GPU";
    r = bfp8_rank_find(t, &p);
    CHECK(r.cell == &kTestCells[9] && r.other_card, "card 0, a shape only card 1 has");
    expect_describe(t, &p, "measured on Other GPU (Ref GPU has no cells of this shape and dtype): sm_90 bf16 N=9000 "
                           "K=2000 M=16, run other-run (here too)");
    /* The dtype rule inside a card first: f16 output on card 1 takes card 1's f16 cell, and bf16 output card 1's
     * f16 cell rather than another card's bf16 one. */
    p = cuda_problem(90, 16, 5000, 2000, BFP8_DTYPE_BF16, false);
    p.card = "Other GPU";
    CHECK(bfp8_rank_find(t, &p).cell == &kTestCells[8], "card 1, bf16 output: not its f16 cell");
    expect_choice(list, 3, &p, t, "beta", "card 1, the same-size dtype");
    /* No card has the shape: the priorities, whatever the card. */
    p = cuda_problem(90, 16, 1000, 2048, BFP8_DTYPE_BF16, false);
    p.card = "Other GPU";
    r = bfp8_rank_find(t, &p);
    CHECK(!r.cell && r.miss == BFP8_RANK_MISS_SHAPE && !r.other_card, "a shape no card measured");
    /* f32 on card 1: card 1 has 3000x2000 only in bf16 (no stand-in for f32), card 0 in f32: card 0's f32 cell;
     * bf16 there is card 1's own. */
    p = cuda_problem(90, 16, 3000, 2000, BFP8_DTYPE_F32, false);
    p.card = "Other GPU";
    r = bfp8_rank_find(t, &p);
    CHECK(r.cell == &kTestCells[4] && r.other_card, "card 1, f32: card 0's f32 cell");
    expect_choice(list, 3, &p, t, "alpha", "card 1, f32: card 0's tie, the first registered");
    p.out_dtype = BFP8_DTYPE_BF16;
    CHECK(bfp8_rank_find(t, &p).cell == &kTestCells[10], "card 1, bf16: its own cell");
    expect_choice(list, 3, &p, t, "beta", "card 1, bf16: its own order");
}

/* ------------------------------------------------------------------------------------------------------------ */
/* The built-in table                                                                                            */
/* ------------------------------------------------------------------------------------------------------------ */

static int table_index(const char *name) {
    const bfp8_rank_table *t = &bfp8_rank_table_builtin;
    for (int i = 0; i < t->nbackends; i++)
        if (strcmp(t->backends[i], name) == 0) return i;
    return -1;
}

static int cmp_key(const bfp8_rank_cell *a, const bfp8_rank_cell *b) {
    const int64_t ka[6] = {a->arch, a->card, a->out_dtype, a->n, a->k, a->m},
                  kb[6] = {b->arch, b->card, b->out_dtype, b->n, b->k, b->m};
    for (int i = 0; i < 6; i++)
        if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

/* What the generator promises (scripts/make-rank-table.py) and the lookup relies on. */
static void test_builtin_well_formed(void) {
    const bfp8_rank_table *t = &bfp8_rank_table_builtin;
    CHECK(t->ncells > 0 && t->nbackends > 0 && t->nbackends <= BFP8_RANK_MAX_BACKENDS && t->nsources > 0,
          "built-in table: %zu cells, %d backends, %d sources", t->ncells, t->nbackends, t->nsources);
    for (int i = 0; i < t->nbackends; i++)
        for (int j = 0; j < i; j++)
            CHECK(strcmp(t->backends[i], t->backends[j]) != 0, "backend %s twice", t->backends[i]);
    /* The reference card first (scripts/make-rank-table.py's REFERENCE_CARD), each card once. */
    CHECK(t->ncards >= 1 && t->cards[0] && strcmp(t->cards[0], "NVIDIA H200") == 0, "built-in table: card 0 is '%s'",
          t->ncards >= 1 && t->cards[0] ? t->cards[0] : "(none)");
    for (int i = 0; i < t->ncards; i++)
        for (int j = 0; j < i; j++) CHECK(strcmp(t->cards[i], t->cards[j]) != 0, "card %s twice", t->cards[i]);
    for (size_t i = 0; i < t->ncells; i++) {
        const bfp8_rank_cell *c = &t->cells[i];
        int measured = 0;
        for (int b = 0; b < BFP8_RANK_MAX_BACKENDS; b++) {
            const bool valid = c->us[b] == 0 || (c->us[b] > 0 && isfinite(c->us[b]));
            CHECK(valid && (b < t->nbackends || c->us[b] == 0), "cell %zu: time %g for backend %d", i, c->us[b], b);
            measured += c->us[b] > 0;
        }
        CHECK(measured > 0, "cell %zu measures nothing", i);
        CHECK(c->m >= 1 && c->m <= BFP8_RANK_MAX_M && c->n >= 1 && c->k >= 1 && c->arch > 0, "cell %zu: key", i);
        CHECK(c->out_dtype == BFP8_DTYPE_BF16 || c->out_dtype == BFP8_DTYPE_F16 || c->out_dtype == BFP8_DTYPE_F32,
              "cell %zu: dtype %d", i, (int)c->out_dtype);
        CHECK(c->source >= 0 && c->source < t->nsources, "cell %zu: source %d", i, c->source);
        CHECK(c->card >= 0 && c->card < t->ncards, "cell %zu: card %d", i, c->card);
        if (i) CHECK(cmp_key(&t->cells[i - 1], c) < 0, "cells %zu and %zu out of order or the same", i - 1, i);
    }
}

/* On every card of the table, every cell of the DeepSeek-R1 table on sm_90 with bf16 output, its own, with hopper
 * and cublaslt both measured. */
static void test_builtin_covers_dsr1(void) {
    const bfp8_rank_table *t = &bfp8_rank_table_builtin;
    const int hopper = table_index("hopper"), cublaslt = table_index("cublaslt");
    CHECK(hopper >= 0 && cublaslt >= 0, "the built-in table has no hopper or no cublaslt column");
    if (hopper < 0 || cublaslt < 0) return;
    for (int card = 0; card < t->ncards; card++)
        for (int l = 0; l < NUM_LAYERS; l++)
            for (int mi = 0; mi < NUM_M; mi++) {
                bfp8_problem p = cuda_problem(90, DSR1_M[mi], DSR1[l].n, DSR1[l].k, BFP8_DTYPE_BF16, false);
                p.card = t->cards[card];
                bfp8_rank r = bfp8_rank_find(t, &p);
                CHECK(r.cell && r.cell->card == card && r.cell->m == p.m && r.cell->out_dtype == BFP8_DTYPE_BF16 &&
                          r.cell->us[hopper] > 0 && r.cell->us[cublaslt] > 0,
                      "%s, DeepSeek-R1 %s M=%lld: no measured sm_90 bf16 cell of its own with hopper and cublaslt",
                      t->cards[card], DSR1[l].name, (long long)p.m);
            }
}

/* explain on a registry of mocks that carry the real names (the table keys backends by name): the cell, the
 * backends in the order auto ranks them, the choice; outside the table, the priorities. */
static void test_explain(void) {
    static const bfp8_backend mock_hopper = {.name = "hopper", .caps = MOCK_CAPS(35, ALL_FLOATS), .gemm = never_runs};
    static const bfp8_backend mock_lt = {.name = "cublaslt", .caps = MOCK_CAPS(30, ALL_FLOATS), .gemm = never_runs};
    static const bfp8_backend mock_generic = {.name = "cuda_generic", .caps = MOCK_CAPS(20, ALL_FLOATS),
                                              .gemm = never_runs};
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create(&d));
    if (!d) return;
    CHECK_OK(bfp8_dispatcher_add(d, &mock_generic));
    CHECK_OK(bfp8_dispatcher_add(d, &mock_lt));
    CHECK_OK(bfp8_dispatcher_add(d, &mock_hopper));
    const bfp8_backend *list[] = {&mock_generic, &mock_lt, &mock_hopper};

    struct {
        int64_t m, n, k;
        const char *card, *ranking;
    } cases[] = {
        {3000, 7168, 18432, NULL,
         "ranking: measured on NVIDIA H200: sm_90 bf16 N=7168 K=18432 M=4096 (nearest measured M to 3000), run "},
        {16, 2112, 7168, NULL, "ranking: measured on NVIDIA H200: sm_90 bf16 N=2112 K=7168 M=16, run "},
        {128, 7168, 16384, "NVIDIA H100 80GB HBM3",
         "ranking: measured on NVIDIA H100 80GB HBM3: sm_90 bf16 N=7168 K=16384 M=128, run "},
        {128, 7168, 16384, "NVIDIA H800",
         "ranking: measured on NVIDIA H200 (NVIDIA H800 has no cells of this shape and dtype): sm_90 bf16 N=7168 "
         "K=16384 M=128, run "},
        {16, 1000, 7168, NULL, "ranking: caps priority (no measured cell for sm_90 N=1000 K=7168)\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bfp8_problem p = cuda_problem(90, cases[i].m, cases[i].n, cases[i].k, BFP8_DTYPE_BF16, true);
        p.card = cases[i].card;
        FILE *f = tmpfile();
        CHECK(f != NULL, "tmpfile");
        if (!f) break;
        CHECK_OK(bfp8_dispatcher_explain(d, &p, f));
        char text[4096] = "";
        rewind(f);
        size_t len = fread(text, 1, sizeof text - 1, f);
        text[len] = '\0';
        fclose(f);
        const char *want = choose(list, 3, &p, &bfp8_rank_table_builtin);
        char line[128];
        snprintf(line, sizeof line, "choice:  %s\n", want);
        CHECK(strstr(text, cases[i].ranking) && strstr(text, line), "explain M=%lld N=%lld: want '%s' and '%s' in\n%s",
              (long long)p.m, (long long)p.n, cases[i].ranking, line, text);
        /* The first backend listed is the one auto chose (all three are capable). */
        const char *first = strstr(text, "):\n");
        char head[64];
        snprintf(head, sizeof head, "):\n  %s ", want);
        CHECK(first && strncmp(first, head, strlen(head)) == 0, "explain lists another backend first:\n%s", text);
        if (p.card) {
            char card_line[96];
            snprintf(card_line, sizeof card_line, " arch=sm_90 card='%s'\n", p.card);
            CHECK(strstr(text, card_line), "explain's problem line names no card:\n%s", text);
        }
        const bool measured = strstr(cases[i].ranking, "measured on ") != NULL;
        CHECK(strstr(text, measured ? "backends (by measured time, then priority):" : "backends (by priority):"),
              "explain's backend header:\n%s", text);
        if (measured) CHECK(strstr(text, " us  priority "), "explain shows no measured times:\n%s", text);
    }
    bfp8_dispatcher_free(d);
}

#ifdef BFP8_WITH_CUDA
/* Registration order as in bfp8_cuda_register_backends, host backends too (they must never win on cuda). */
static const bfp8_backend *const *h200(size_t *count) {
    static const bfp8_backend *list[5];
    list[0] = &bfp8_backend_cpu, list[1] = &bfp8_backend_ref, list[2] = bfp8_hopper_backend();
    list[3] = &bfp8_backend_cublaslt, list[4] = &bfp8_backend_cuda_generic;
    *count = 5;
    return list;
}

/* The fastest time measured in p's cell among the capable backends of the list, or 0. */
static double fastest_capable(const bfp8_backend *const *list, size_t count, const bfp8_rank *r,
                              const bfp8_problem *p) {
    double best = 0;
    for (size_t i = 0; i < count; i++) {
        const double us = bfp8_rank_time(r, list[i]->name);
        if (us > 0 && bfp8_backend_check(list[i], p, NULL, 0) && (best == 0 || us < best)) best = us;
    }
    return best;
}

/* The target of issue 31: in every cell of the table, auto within 1% of the fastest capable backend measured
 * there, in a plain GEMM call and in a linear call, for the cell's dtype (and f16 where a bf16 cell stands in). */
static void test_h200_every_cell(void) {
    size_t count;
    const bfp8_backend *const *list = h200(&count);
    const bfp8_rank_table *t = &bfp8_rank_table_builtin;
    int pinned = 0;
    for (size_t i = 0; i < t->ncells; i++) {
        const bfp8_rank_cell *c = &t->cells[i];
        if (c->arch != 90) continue;
        const bfp8_dtype outs[2] = {c->out_dtype, c->out_dtype == BFP8_DTYPE_BF16 ? BFP8_DTYPE_F16 : c->out_dtype};
        for (int o = 0; o < 2; o++)
            for (int linear = 0; linear < 2; linear++) {
                bfp8_problem p = cuda_problem(90, c->m, c->n, c->k, outs[o], linear);
                p.card = t->cards[c->card];
                bfp8_rank r = bfp8_rank_find(t, &p);
                if (r.cell != c) continue; /* an f16 cell of its own ranks f16 */
                const double best = fastest_capable(list, count, &r, &p);
                const char *got = choose(list, count, &p, t);
                double us = bfp8_rank_time(&r, got);
                CHECK(best > 0 && us > 0 && us <= 1.01 * best,
                      "%s M=%lld N=%lld K=%lld out=%s %s: auto chose %s (%.1f us), the fastest capable took %.1f us",
                      p.card, (long long)p.m, (long long)p.n, (long long)p.k, bfp8_dtype_name(p.out_dtype),
                      linear ? "linear" : "gemm", got, us, best);
                pinned++;
            }
    }
    CHECK(pinned >= 4 * NUM_LAYERS * NUM_M * t->ncards, "only %d cells pinned", pinned);
    /* The case issue 31 names: M=4096 7168x18432, where the priorities chose cuBLASLt (916.3 us) over hopper
     * (869.9 us). Now the faster of the two as measured, whichever it is. */
    bfp8_problem p = cuda_problem(90, 4096, 7168, 18432, BFP8_DTYPE_BF16, false);
    bfp8_rank r = bfp8_rank_find(t, &p);
    const char *faster = bfp8_rank_time(&r, "hopper") <= bfp8_rank_time(&r, "cublaslt") ? "hopper" : "cublaslt";
    expect_choice(list, count, &p, t, faster, "M=4096 mlp.down");
}

/* The log-space distance rule, computed here independently (in floating point), for M between and beyond the
 * measured ones: the choice is that of the nearest cell. Exact midpoints are test_rules' business. */
static void test_h200_between_cells(void) {
    size_t count;
    const bfp8_backend *const *list = h200(&count);
    const bfp8_rank_table *t = &bfp8_rank_table_builtin;
    int probes = 0;
    for (int lc = 0; lc < NUM_LAYERS * t->ncards; lc++) {
        const int l = lc % NUM_LAYERS, card = lc / NUM_LAYERS;
        int64_t measured[32];
        int nm = 0;
        for (size_t i = 0; i < t->ncells && nm < 32; i++) {
            const bfp8_rank_cell *c = &t->cells[i];
            if (c->arch == 90 && c->card == card && c->out_dtype == BFP8_DTYPE_BF16 && c->n == DSR1[l].n &&
                c->k == DSR1[l].k)
                measured[nm++] = c->m;
        }
        for (int probe = 0; probe < 48; probe++) {
            /* Fixed points first, then log-uniform random M in [1, 2^14]. */
            static const int64_t fixed[] = {0, 2, 3, 5, 24, 100, 300, 1000, 2048, 3000, 8192, 65536};
            const int nfixed = sizeof fixed / sizeof fixed[0];
            int64_t m = probe < nfixed ? fixed[probe] : (int64_t)exp2((double)(test_rand_u64() % 14001) / 1000.0);
            const double lm = log((double)(m < 1 ? 1 : m));
            int best = -1;
            double best_d = 0, second_d = INFINITY;
            for (int j = 0; j < nm; j++) {
                const double dj = fabs(lm - log((double)measured[j]));
                if (best < 0 || dj < best_d) {
                    if (best >= 0) second_d = best_d;
                    best_d = dj;
                    best = j;
                } else if (dj < second_d) {
                    second_d = dj;
                }
            }
            if (best < 0 || second_d - best_d < 1e-9) continue; /* a midpoint */
            bfp8_problem p = cuda_problem(90, m, DSR1[l].n, DSR1[l].k, BFP8_DTYPE_BF16, false);
            p.card = t->cards[card];
            CHECK(cell_m(t, &p) == measured[best], "%s, %s M=%lld: the M=%lld cell, want M=%lld", p.card,
                  DSR1[l].name, (long long)m, (long long)cell_m(t, &p), (long long)measured[best]);
            bfp8_problem at = p;
            at.m = measured[best];
            char want[64];
            snprintf(want, sizeof want, "%s", choose(list, count, &at, t));
            expect_choice(list, count, &p, t, want, "M between cells: the nearest cell's choice");
            probes++;
        }
    }
    CHECK(probes > NUM_LAYERS * t->ncards * 40, "only %d probes", probes);
}

/* Off the table and off the fast path, each rule lands where it should. */
static void test_h200_outside(void) {
    size_t count;
    const bfp8_backend *const *list = h200(&count);
    const bfp8_rank_table *t = &bfp8_rank_table_builtin;
    /* Shapes the table does not hold (a K whose block count is not a multiple of 4; an 8-way tensor-parallel
     * q_b and gate_up; a square one): no cell, so the priorities, hopper's 35 above cuBLASLt's 30. */
    const int64_t shapes[][2] = {{7168, 1152}, {3072, 1536}, {4608, 7168}, {4096, 4096}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int mi = 0; mi < NUM_M; mi++) {
            bfp8_problem p = cuda_problem(90, DSR1_M[mi], shapes[s][0], shapes[s][1], BFP8_DTYPE_BF16, false);
            CHECK(cell_m(t, &p) == -1, "N=%lld K=%lld has a cell", (long long)p.n, (long long)p.k);
            expect_choice(list, count, &p, t, "hopper", "unmeasured shape: priorities");
        }
    CHECK(bfp8_hopper_backend()->caps.priority > bfp8_backend_cublaslt.caps.priority &&
              bfp8_backend_cublaslt.caps.priority > bfp8_backend_cuda_generic.caps.priority,
          "fallback priorities: hopper %d, cublaslt %d, cuda_generic %d", bfp8_hopper_backend()->caps.priority,
          bfp8_backend_cublaslt.caps.priority, bfp8_backend_cuda_generic.caps.priority);
    for (int l = 0; l < NUM_LAYERS; l++) {
        /* fp32 output: no fp32 cell, and cuBLASLt declines it (its error exceeds the fp32 tolerance): hopper. */
        bfp8_problem p = cuda_problem(90, 128, DSR1[l].n, DSR1[l].k, BFP8_DTYPE_F32, true);
        expect_choice(list, count, &p, t, "hopper", "fp32 output");
        /* An fp32 bias with bf16 output, which cuBLASLt declines: hopper, the cell's other measured backend, in
         * every cell, wherever cuBLASLt was the faster. The table never makes a backend capable. */
        for (int mi = 0; mi < NUM_M; mi++) {
            p = cuda_problem(90, DSR1_M[mi], DSR1[l].n, DSR1[l].k, BFP8_DTYPE_BF16, false);
            p.has_bias = true;
            p.bias_dtype = BFP8_DTYPE_F32;
            expect_choice(list, count, &p, t, "hopper", "f32 bias, bf16 out");
        }
        /* sm_89 and sm_100: no cells, and only the generic kernel declares them. */
        p = cuda_problem(89, 128, DSR1[l].n, DSR1[l].k, BFP8_DTYPE_BF16, true);
        expect_choice(list, count, &p, t, "cuda_generic", "sm_89");
        p.arch = 100;
        expect_choice(list, count, &p, t, "cuda_generic", "sm_100");
    }
    /* K not a multiple of 16: only the generic kernel. */
    bfp8_problem p = cuda_problem(90, 128, 7168, 1000, BFP8_DTYPE_BF16, true);
    expect_choice(list, count, &p, t, "cuda_generic", "K=1000");
}
#endif

static void test_host(void) {
    const bfp8_backend *host[] = {&bfp8_backend_cpu, &bfp8_backend_ref};
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16};
    for (int l = 0; l < NUM_LAYERS; l++)
        for (int mi = 0; mi < NUM_M; mi++)
            for (int o = 0; o < 2; o++) {
                bfp8_problem p = cuda_problem(0, DSR1_M[mi], DSR1[l].n, DSR1[l].k, outs[o], false);
                p.device = BFP8_DEVICE_CPU;
                expect_choice(host, 2, &p, &bfp8_rank_table_builtin, "cpu", DSR1[l].name);
            }
}


/* The DeepSeek-R1 routed-expert layers as grouped problems, in the cells of the MoE anchor table
 * (bench/data/moe-anchor-h200-2026-12-04.csv): contiguous G x rows per group (m = G x rows, segments 128-aligned), masked G x tokens with
 * max_m = max(128, round_up(2 x tokens, 128)). On the host `cpu` serves them; on the H200 `hopper` (grouped problems
 * rank by priority: the measured table times dense GEMMs), and cublaslt, which has no grouped GEMM, says so. */
typedef struct grouped_cell {
    bfp8_grouped_layout layout;
    int64_t groups, per_group;
} grouped_cell;

static const grouped_cell GROUPED_CELLS[] = {
    {BFP8_GROUPED_CONTIGUOUS, 8, 128}, {BFP8_GROUPED_CONTIGUOUS, 8, 512},  {BFP8_GROUPED_CONTIGUOUS, 8, 2048},
    {BFP8_GROUPED_CONTIGUOUS, 32, 128}, {BFP8_GROUPED_CONTIGUOUS, 32, 512}, {BFP8_GROUPED_CONTIGUOUS, 256, 128},
    {BFP8_GROUPED_MASKED, 8, 16},       {BFP8_GROUPED_MASKED, 8, 64},       {BFP8_GROUPED_MASKED, 32, 16},
    {BFP8_GROUPED_MASKED, 32, 64},      {BFP8_GROUPED_MASKED, 32, 128},     {BFP8_GROUPED_MASKED, 8, 256},
};
static const dsr1_layer EXPERT_LAYERS[] = {
    {"experts.gate_up", 4096, 7168},
    {"experts.down", 7168, 2048},
};

/* The problem a bfp8_grouped_linear call poses for a cell: as layer_problem, with the grouped descriptor. */
static bfp8_problem grouped_problem(bfp8_device device, const grouped_cell *c, const dsr1_layer *row, bfp8_dtype out) {
    bfp8_problem p = cuda_problem(device == BFP8_DEVICE_CUDA ? 90 : 0, 0, row->n, row->k, out, false);
    p.device = device;
    const bool masked = c->layout == BFP8_GROUPED_MASKED;
    const int64_t max_m = bfp8_round_up(2 * c->per_group, 128) > 128 ? bfp8_round_up(2 * c->per_group, 128) : 128;
    p.m = masked ? max_m : c->groups * c->per_group;
    p.grouped = c->layout;
    p.groups = c->groups;
    p.expected_m = c->per_group;
    p.act_from_prior_kernel = false; /* no grouped kernel starts behind the quantization */
    return p;
}

static void test_grouped_table(const bfp8_backend *const *list, size_t count, bfp8_device device, const char *want) {
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32};
    char label[96];
    for (size_t l = 0; l < sizeof EXPERT_LAYERS / sizeof EXPERT_LAYERS[0]; l++)
        for (size_t c = 0; c < sizeof GROUPED_CELLS / sizeof GROUPED_CELLS[0]; c++)
            for (int o = 0; o < 3; o++) {
                const grouped_cell *cell = &GROUPED_CELLS[c];
                bfp8_problem p = grouped_problem(device, cell, &EXPERT_LAYERS[l], outs[o]);
                snprintf(label, sizeof label, "%s %s %lldx%lld", EXPERT_LAYERS[l].name,
                         bfp8_grouped_layout_name(cell->layout), (long long)cell->groups, (long long)cell->per_group);
                expect_choice(list, count, &p, &bfp8_rank_table_builtin, want, label);
                /* Every backend that passes on it says why; the dense-only ones with "no grouped GEMM". */
                for (size_t i = 0; i < count; i++) {
                    char why[BFP8_REASON_MAX];
                    if (!list[i]->grouped_gemm && list[i]->caps.device == device)
                        CHECK(!bfp8_backend_check(list[i], &p, why, sizeof why) && strcmp(why, "no grouped GEMM") == 0,
                              "%s on %s: '%s'", list[i]->name, label, why);
                }
            }
}

#ifdef BFP8_WITH_CUDA
/* hopper's grouped limits, exactly at their boundaries: K a multiple of 16, and A (masked: G x max_m rows) and B
 * (G x N rows) under 2^31 rows as the TMA coordinates need. Past them auto takes cuda_generic, and hopper says why;
 * the measured table never ranks a grouped problem. */
static void test_grouped_boundaries(const bfp8_backend *const *list, size_t count) {
    const grouped_cell masked = {BFP8_GROUPED_MASKED, 8, 16}, contiguous = {BFP8_GROUPED_CONTIGUOUS, 8, 128};
    bfp8_problem p = grouped_problem(BFP8_DEVICE_CUDA, &masked, &EXPERT_LAYERS[0], BFP8_DTYPE_BF16);
    char why[BFP8_REASON_MAX];
    CHECK(bfp8_rank_find(&bfp8_rank_table_builtin, &p).miss == BFP8_RANK_MISS_GROUPED,
          "grouped problems are not ranked by the measured table");
    p.k = 7168 - 16;
    expect_choice(list, count, &p, &bfp8_rank_table_builtin, "hopper", "grouped K % 16 == 0");
    p.k = 7168 - 8;
    expect_choice(list, count, &p, &bfp8_rank_table_builtin, "cuda_generic", "grouped K % 16 != 0");
    CHECK(!bfp8_backend_check(list[2], &p, why, sizeof why) && strstr(why, "multiple of 16"), "hopper: '%s'", why);
    /* B: G x N rows. */
    p = grouped_problem(BFP8_DEVICE_CUDA, &contiguous, &EXPERT_LAYERS[0], BFP8_DTYPE_BF16);
    p.groups = 128, p.n = INT32_MAX / 128;
    expect_choice(list, count, &p, &bfp8_rank_table_builtin, "hopper", "grouped G x N = 2^31 - 128");
    p.n = INT32_MAX / 128 + 1;
    CHECK(!bfp8_backend_check(list[2], &p, why, sizeof why) && strstr(why, "2^31"), "hopper at G x N = 2^31: '%s'",
          why);
    /* A, masked: G x max_m rows. */
    p = grouped_problem(BFP8_DEVICE_CUDA, &masked, &EXPERT_LAYERS[0], BFP8_DTYPE_BF16);
    p.groups = 2, p.m = INT32_MAX / 2, p.n = 128;
    CHECK(bfp8_backend_check(list[2], &p, why, sizeof why), "hopper at G x max_m = 2^31 - 2: '%s'", why);
    p.m = INT32_MAX / 2 + 1;
    CHECK(!bfp8_backend_check(list[2], &p, why, sizeof why) && strstr(why, "2^31"), "hopper at G x max_m = 2^31: '%s'",
          why);
}
#endif

int main(void) {
    test_seed();
    test_rules();
    test_cards();
    test_builtin_well_formed();
    test_builtin_covers_dsr1();
    test_explain();
    test_host();
    const bfp8_backend *host[] = {&bfp8_backend_cpu, &bfp8_backend_ref};
    test_grouped_table(host, 2, BFP8_DEVICE_CPU, "cpu");
#ifdef BFP8_WITH_CUDA
    test_h200_every_cell();
    test_h200_between_cells();
    test_h200_outside();
    const bfp8_backend *h200[] = {&bfp8_backend_cpu, &bfp8_backend_ref, bfp8_hopper_backend(), &bfp8_backend_cublaslt,
                                  &bfp8_backend_cuda_generic};
    test_grouped_table(h200, 5, BFP8_DEVICE_CUDA, "hopper");
    test_grouped_boundaries(h200, 5);
#else
    printf("golden_dispatch: H200 registry skipped: built without CUDA (CI builds with it)\n");
#endif
    return TEST_SUMMARY("golden_dispatch");
}
