/* The measured ranking of `auto` on CUDA (docs/dispatch.md, "The measured ranking"): a table of median times per
 * backend, measured by `blockfp8 bench` on the GPU and generated into rank_table.c, and the lookup of the cell that
 * ranks a problem. A pure function of the problem and the table. The dispatcher orders the capable backends by it
 * (dispatch.c); the table never makes a backend capable. */
#ifndef BFP8_RANK_H
#define BFP8_RANK_H

#include "blockfp8.h"

#define BFP8_RANK_MAX_BACKENDS 8
/* Measured M are at most this, so the product of two fits in int64 (the nearest-M rule multiplies them). */
#define BFP8_RANK_MAX_M ((int64_t)1 << 31)

/* One measured problem: y[M, N] of dtype out_dtype from an N x K weight on card `card` (of compute capability
 * arch), a plain GEMM call, and its median time on each backend of the table. */
typedef struct bfp8_rank_cell {
    int arch;
    int card; /* index into the table's cards */
    bfp8_dtype out_dtype;
    int64_t n, k, m;
    int source;                          /* index into the table's sources: the run that measured it */
    double us[BFP8_RANK_MAX_BACKENDS];   /* per table backend; 0: not measured (the bench could not run it) */
} bfp8_rank_cell;

typedef struct bfp8_rank_table {
    const char *const *backends; /* names, as the bench records them */
    int nbackends;
    const char *const *sources; /* each run: its name and the CSV that holds it */
    int nsources;
    /* The cards measured, as the driver names them (bfp8_problem::card); the first is the reference card, whose
     * cells rank a card that has none of its own for a problem's shape and dtype. */
    const char *const *cards;
    int ncards;
    const bfp8_rank_cell *cells; /* sorted by (arch, card, out_dtype, n, k, m), no key twice */
    size_t ncells;
} bfp8_rank_table;

/* The table generated from bench/data/rank-*.csv (rank_table.c). */
extern const bfp8_rank_table bfp8_rank_table_builtin;

typedef enum bfp8_rank_miss {
    BFP8_RANK_FOUND = 0,
    BFP8_RANK_MISS_NOT_CUDA, /* the table measures CUDA backends */
    BFP8_RANK_MISS_SHAPE,    /* no cell of this arch, N and K on any card */
    BFP8_RANK_MISS_DTYPE,    /* cells of this arch, N and K, but none of this output dtype or one of its size */
    BFP8_RANK_MISS_GROUPED,  /* a grouped problem: the table's cells time dense GEMMs */
} bfp8_rank_miss;

/* How a problem is ranked: by `cell` of `table`, or (cell NULL) by the backends' priorities, and why. */
typedef struct bfp8_rank {
    const bfp8_rank_table *table;
    const bfp8_rank_cell *cell;
    bfp8_rank_miss miss;
    bool other_card; /* the cell was measured on another card than the problem's, which has none there */
} bfp8_rank;

/* The cell that ranks `p`, or why none does. A CUDA problem's cells are those of its arch, N, K and output dtype,
 * else those of the other 2-byte dtype (bf16 for f16 and the reverse: the same bytes move), on its card
 * (p->card); where that card has none (or p->card is NULL or unknown), on the first card in the table's list
 * that has them (the reference card first). Among them, the one whose M is nearest in log space: for measured
 * a < M < b, a's when M*M <= a*b, else b's; M below the smallest measured takes the smallest, above the largest
 * the largest (M = 0 counts as 1). Anything else has no cell. */
bfp8_rank bfp8_rank_find(const bfp8_rank_table *table, const bfp8_problem *p);

/* The measured median time of backend `name` in the rank's cell, or 0 (no cell, or not measured there). */
double bfp8_rank_time(const bfp8_rank *r, const char *name);

/* "measured on NVIDIA H200: sm_90 bf16 N=7168 K=18432 M=4096 (nearest measured M to 3000), run NAME (CSV)", with
 * "(CARD has no cells of this shape and dtype)" when the cell is another card's, or "caps priority: ..." with the
 * reason there is no cell. */
void bfp8_rank_describe(const bfp8_rank *r, const bfp8_problem *p, char *buf, size_t size);

/* bfp8_select, ranking `auto` by `table` (NULL: priorities only). bfp8_select is this with the built-in table;
 * tests pin the rules with tables of their own. */
bfp8_status bfp8_select_ranked(const bfp8_backend *const *backends, size_t count, const bfp8_problem *p,
                               bfp8_policy policy, const char *preferred_name, const bfp8_rank_table *table,
                               bfp8_decision *out);

#endif
