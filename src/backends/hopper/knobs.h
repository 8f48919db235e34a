/* Every environment variable hopper reads, in one struct: read once per process (bfp8_hopper_knobs_env) and passed
 * to the planner as an argument, so that tests pose any setting without the environment and the dispatcher's
 * ranking always follows the default plans. docs/hopper-knobs.md has the table. The plan settings force a plan
 * for tests and side-by-side measurement; the default (all zero) is what the heuristics pick. */
#ifndef BFP8_HOPPER_KNOBS_H
#define BFP8_HOPPER_KNOBS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* BFP8_HOPPER_FORCE: one plan feature wherever it applies, instead of where the time model or the rules pick it. */
typedef enum bfp8_hopper_force {
    BFP8_HOPPER_FORCE_NONE = 0,
    /* "last-wave-split": whole tiles for the full waves and a K split of the last wave's tiles wherever the plan
     * allows it (no row slices, no stream-K then); the only way to reach it on the swapped path. */
    BFP8_HOPPER_FORCE_LAST_WAVE_SPLIT,
    /* "slices": row slices also with fewer tiles than SMs, where the rules would split K instead. */
    BFP8_HOPPER_FORCE_SLICES,
    /* "stream-k": stream-K wherever it applies: with fewer tiles than SMs, at M <= 64 (one consumer warpgroup) and
     * in place of the last-wave split. */
    BFP8_HOPPER_FORCE_STREAM_K,
} bfp8_hopper_force;

typedef struct bfp8_hopper_knobs {
    /* BFP8_HOPPER_TILE: "64" or "128" forces the normal path with weight tiles that wide; "RxQ" (R = 64 or 128,
     * Q = 32, 64 or 128) the normal path with activation tiles of R rows and weight tiles Q wide; "swap" the swapped
     * path while M <= 128 with a Q tile of the power of two >= M, "swapN" (N = 8, 16, 32, 64, 128) with Q tiles of N
     * tokens (several when M > N). Anything else is ignored (and bfp8_hopper_knobs_check reports it). */
    bool tile_forced;
    bool tile_swap;
    int tile_bq;   /* 0 with tile_swap: the power of two >= M */
    int tile_rows; /* normal path: 64 or 128 forced by "RxQ"; 0: the planner's (64 where M <= 64) */
    /* BFP8_HOPPER_SPLITS=S (1..1024): S K splits of every tile, at most one per K block, and no last-wave split,
     * row slices or stream-K (the sweeps that calibrate the split model); 0: the model decides. */
    int splits;
    bfp8_hopper_force force;
    /* BFP8_HOPPER_RASTER_GROUP=G (1..1024): rasterization groups of G P tiles where G is a power of two (the planner
     * takes no other: the kernel divides by a shift), for the sweep that sets the default; 0: the planner's. */
    int group_p;
    /* BFP8_HOPPER_TRACE=1 in a build made with `make HOPPER_TRACE=1`: the kernel stamps its timeline and each call
     * prints where its time went (synchronizes the stream: diagnosis only). */
    bool trace;
    /* BFP8_LOG with the topic "hopper": one stderr line per call with its plan. */
    bool log_plans;
} bfp8_hopper_knobs;

/* The defaults: every plan as the heuristics pick it, no trace, no log. */
bfp8_hopper_knobs bfp8_hopper_knobs_default(void);
/* The environment's settings, parsed on the first call (thread-safe); later changes of the environment are not
 * seen. */
const bfp8_hopper_knobs *bfp8_hopper_knobs_env(void);
/* The knobs of an environment given as a lookup function (getenv, or a table in tests). */
bfp8_hopper_knobs bfp8_hopper_knobs_parse(const char *(*lookup)(const char *name));
/* Whether every knob that is set (and not empty) holds a value the parse takes; else false, with the first that
 * does not, its value and what it takes in `why` (bfp8_check_env reports it: parsing ignores such a value). */
bool bfp8_hopper_knobs_check(const char *(*lookup)(const char *name), char *why, size_t why_size);

#ifdef __cplusplus
}
#endif
#endif
