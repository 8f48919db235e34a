/* hopper's planner: how an M x N x K problem is cut into the kernel's work units (tiling, K splits summed by the
 * reduce kernel or inside clusters, the last wave's tiles split or cut into row slices, stream-K), the kernel's
 * parameters that describe the cut, and the host check that the cut covers every output exactly once. Plain C with
 * no CUDA: every build compiles it, and tests/test_hopper_plan.c pins its plans on any machine. */
#ifndef BFP8_HOPPER_PLAN_H
#define BFP8_HOPPER_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/hopper/knobs.h"
#include "backends/hopper/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pipeline stages of the swapped kernel with 8-token tiles (kernel.cuh's Config<8, true>::kStages, which checks
 * this): the row slices' in-flight estimate. */
enum { BFP8_HOPPER_STAGES_SWAP8 = 12 };

/* How many clusters of each size (index: CTAs per cluster, 2..BFP8_HOPPER_MAX_SPLIT_CLUSTER) the device runs at once
 * with the CSPLIT kernels (one CTA per SM; a cluster's CTAs share one GPC, so this is not sms / size). All 0: none,
 * and the plan never sums splits inside clusters (what plans made without a device see). */
typedef struct bfp8_hopper_cluster_fit {
    int clusters[BFP8_HOPPER_MAX_SPLIT_CLUSTER + 1];
} bfp8_hopper_cluster_fit;

typedef struct bfp8_hopper_plan {
    bool swap; /* P = weights, Q = tokens (decode) */
    int bq;    /* Q rows per tile: 8..128 swapped, 64 or 128 normal */
    int p_tiles, q_tiles, splits, kb_per_split, units, grid;
    int whole_units; /* bfp8_hopper_params::whole_units */
    int csplit;      /* the splits summed inside clusters of this many CTAs (bfp8_hopper_params::csplit); 0: reduce */
    int slice_rows;  /* the rows after the whole tiles in slices of this many (plan.c); 0: none */
    int sk_tiles;    /* the tiles after the whole tiles in stream-K runs (bfp8_hopper_params::sk_ctas); 0: none */
    int sk_pieces;   /* stream-K: the most pieces in one CTA's run (units = whole + grid x sk_pieces) */
    /* A grouped plan (bfp8_hopper_params::grouped; BFP8_HOPPER_DENSE in the others): its groups. The P rows of a
     * tile (bfp8_hopper_params::tile_rows): 64 where one consumer warpgroup runs it, else 128. Masked plans count
     * p_tiles per group. */
    int grouped, groups, tile_rows;
    bool stages64; /* normal path, 64-row tiles 32 or 64 wide: the kernel whose stages hold 64 P rows (plan.c) */
    int group_p;   /* rasterization: groups of this many P tiles (a power of two) walk the Q tiles together */
} bfp8_hopper_plan;

/* The plan for M x N x K on `sms` SMs where `fit` clusters fit (NULL: none), with `knobs` (NULL: the defaults). */
bfp8_hopper_plan bfp8_hopper_plan_make(int64_t m, int64_t n, int64_t k, int sms, const bfp8_hopper_cluster_fit *fit,
                                       const bfp8_hopper_knobs *knobs);
/* The plan of a grouped GEMM (bfp8_hopper_params::grouped: BFP8_HOPPER_CONTIGUOUS or BFP8_HOPPER_MASKED) of
 * `groups` weights of N x K, with `m` rows of A (masked: max_m, the rows of each group's buffer) and expected_m
 * rows per group expected (0: m / groups for contiguous, m for masked), on `sms` SMs. knobs->tile_* (BFP8_HOPPER_TILE
 * 64 or 128) force the weight tiles' width; the other knobs ("RxQ" tiles included) do not apply. */
bfp8_hopper_plan bfp8_hopper_plan_grouped(int grouped, int64_t groups, int64_t m, int64_t n, int64_t k,
                                          int64_t expected_m, int sms, const bfp8_hopper_knobs *knobs);
/* One line naming a plan: path, tile, K split, units, grid and clusters (BFP8_LOG=hopper, tests). */
void bfp8_hopper_plan_describe(const bfp8_hopper_plan *pl, char *out, size_t size);

/* Normal-path tiles of an M x N output with weight tiles bq wide. */
int64_t bfp8_hopper_normal_tiles(int64_t m, int64_t n, int bq);
/* Tiles of the activation operand (P normal, Q swapped): 1 when one tile covers M, and then every weight tile is
 * loaded by the units of one tile only. */
int bfp8_hopper_plan_activation_tiles(const bfp8_hopper_plan *pl);
/* Output columns [0, whole_columns) come from whole tiles only: the split-K reduce sums the columns after them. */
int64_t bfp8_hopper_plan_whole_columns(const bfp8_hopper_plan *pl);
/* Rows of the box for the last of the `tile`-row tiles of a `rows`-row matrix: what is left of the matrix rounded up
 * to whole 8-row swizzle groups, or 0 where that is the whole tile (bfp8_hopper_params::p_last_rows). */
int bfp8_hopper_last_box_rows(int64_t rows, int tile);
/* Rows of the smaller P box: a plan's row slices, whose whole tiles never include the last one, else the last
 * tile's cut box. */
int bfp8_hopper_plan_p_box_rows(const bfp8_hopper_plan *pl, int64_t p_rows);
/* The plan's unit grid in the kernel's parameters: counts, boxes and decode_unit's divisors (p_rows: rows of the P
 * operand). */
void bfp8_hopper_params_set_units(bfp8_hopper_params *hp, const bfp8_hopper_plan *pl, int kblocks, int64_t p_rows);
/* A grouped plan's unit grid and its groups in the kernel's parameters (the whole of set_units for it): m, n, k as
 * in bfp8_hopper_plan_grouped. The pointers (m_indices, masked_m, ...) are the caller's to set. */
void bfp8_hopper_params_set_grouped(bfp8_hopper_params *hp, const bfp8_hopper_plan *pl, int64_t m, int64_t n,
                                    int64_t k);
/* Whether the plan's units decode, with the kernel's divisors, to every (tile, K block) exactly once, as plain
 * division does, and stream-K pieces follow their protocol; false with the first difference in why. */
bool bfp8_hopper_plan_check_units(const bfp8_hopper_plan *pl, int64_t m, int64_t n, int64_t k, char *why,
                                  size_t why_size);

#ifdef __cplusplus
}
#endif
#endif
