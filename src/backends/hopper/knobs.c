/* hopper's environment variables, parsed once (knobs.h; docs/hopper-knobs.md). */
#include "backends/hopper/knobs.h"
#include "internal.h" /* bfp8_log_has_topic */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bfp8_hopper_knobs bfp8_hopper_knobs_default(void) {
    const bfp8_hopper_knobs k = {0};
    return k;
}

/* A whole decimal count in [lo, hi], or `fallback` for anything else (unset included). */
static int parse_count(const char *e, long lo, long hi, int fallback) {
    char *end = NULL;
    const long v = e ? strtol(e, &end, 10) : 0;
    return e && end != e && *end == '\0' && v >= lo && v <= hi ? (int)v : fallback;
}

/* Sets the tile knobs from a valid value; false (nothing set) for anything else. */
static bool parse_tile(const char *e, bfp8_hopper_knobs *k) {
    if (!e) return false;
    const bool swap = strncmp(e, "swap", 4) == 0;
    const char *num = swap ? e + 4 : e;
    char *end = NULL;
    long v = *num ? strtol(num, &end, 10) : 0, rows = 0;
    if (!swap && end && end != num && *end == 'x') { /* "RxQ" */
        rows = v;
        num = end + 1;
        v = *num ? strtol(num, &end, 10) : 0;
        if (!*num || (rows != 64 && rows != 128) || (v != 32 && v != 64 && v != 128)) return false;
    }
    const bool whole = !*num || (end != num && *end == '\0');
    const bool ok = whole && (swap ? (v == 0 || v == 8 || v == 16 || v == 32 || v == 64 || v == 128)
                                   : rows || v == 64 || v == 128);
    if (!ok) return false;
    k->tile_forced = true;
    k->tile_swap = swap;
    k->tile_bq = (int)v;
    k->tile_rows = (int)rows;
    return true;
}

static bfp8_hopper_force parse_force(const char *e) {
    if (!e) return BFP8_HOPPER_FORCE_NONE;
    if (strcmp(e, "last-wave-split") == 0) return BFP8_HOPPER_FORCE_LAST_WAVE_SPLIT;
    if (strcmp(e, "slices") == 0) return BFP8_HOPPER_FORCE_SLICES;
    if (strcmp(e, "stream-k") == 0) return BFP8_HOPPER_FORCE_STREAM_K;
    return BFP8_HOPPER_FORCE_NONE;
}

bfp8_hopper_knobs bfp8_hopper_knobs_parse(const char *(*lookup)(const char *name)) {
    bfp8_hopper_knobs k = bfp8_hopper_knobs_default();
    parse_tile(lookup("BFP8_HOPPER_TILE"), &k);
    k.splits = parse_count(lookup("BFP8_HOPPER_SPLITS"), 1, 1024, 0);
    k.force = parse_force(lookup("BFP8_HOPPER_FORCE"));
    k.group_p = parse_count(lookup("BFP8_HOPPER_RASTER_GROUP"), 1, 1024, 0);
    const char *trace = lookup("BFP8_HOPPER_TRACE");
    k.trace = trace && strcmp(trace, "1") == 0;
    k.log_plans = bfp8_log_has_topic(lookup("BFP8_LOG"), "hopper");
    return k;
}

/* What bfp8_hopper_knobs_parse takes of each knob (the planner takes only powers of two as raster groups). */
static bool takes_tile(const char *e) {
    bfp8_hopper_knobs k = bfp8_hopper_knobs_default();
    return parse_tile(e, &k);
}
static bool takes_splits(const char *e) { return parse_count(e, 1, 1024, 0) != 0; }
static bool takes_force(const char *e) { return parse_force(e) != BFP8_HOPPER_FORCE_NONE; }
static bool takes_group(const char *e) {
    const int g = parse_count(e, 1, 1024, 0);
    return g > 0 && (g & (g - 1)) == 0;
}
static bool takes_flag(const char *e) { return strcmp(e, "0") == 0 || strcmp(e, "1") == 0; }

bool bfp8_hopper_knobs_check(const char *(*lookup)(const char *name), char *why, size_t why_size) {
    static const struct {
        const char *name;
        bool (*takes)(const char *value);
        const char *values;
    } knobs[] = {
        {"BFP8_HOPPER_TILE", takes_tile, "64, 128, RxQ (R = 64 or 128, Q = 32, 64 or 128), swap or swapN (N = 8..128)"},
        {"BFP8_HOPPER_SPLITS", takes_splits, "an integer in [1, 1024]"},
        {"BFP8_HOPPER_FORCE", takes_force, "last-wave-split, slices or stream-k"},
        {"BFP8_HOPPER_RASTER_GROUP", takes_group, "a power of two in [1, 1024]"},
        {"BFP8_HOPPER_TRACE", takes_flag, "0 or 1"},
    };
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        const char *e = lookup(knobs[i].name);
        if (e && *e && !knobs[i].takes(e)) { /* unset and empty mean the default */
            snprintf(why, why_size, "%s='%.64s' is not %s", knobs[i].name, e, knobs[i].values);
            return false;
        }
    }
    return true;
}

static const char *env_lookup(const char *name) { return getenv(name); }

static bfp8_hopper_knobs g_env_knobs;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static void env_knobs_init(void) { g_env_knobs = bfp8_hopper_knobs_parse(env_lookup); }

const bfp8_hopper_knobs *bfp8_hopper_knobs_env(void) {
    pthread_once(&g_env_once, env_knobs_init);
    return &g_env_knobs;
}
