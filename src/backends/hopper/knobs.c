/* hopper's environment variables, parsed once (knobs.h; docs/hopper-knobs.md). */
#include "backends/hopper/knobs.h"

#include <pthread.h>
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

static void parse_tile(const char *e, bfp8_hopper_knobs *k) {
    if (!e) return;
    const bool swap = strncmp(e, "swap", 4) == 0;
    const char *num = swap ? e + 4 : e;
    char *end = NULL;
    long v = *num ? strtol(num, &end, 10) : 0, rows = 0;
    if (!swap && end && end != num && *end == 'x') { /* "RxQ" */
        rows = v;
        num = end + 1;
        v = *num ? strtol(num, &end, 10) : 0;
        if (!*num || (rows != 64 && rows != 128) || (v != 32 && v != 64 && v != 128)) return;
    }
    const bool whole = !*num || (end != num && *end == '\0');
    const bool ok = whole && (swap ? (v == 0 || v == 8 || v == 16 || v == 32 || v == 64 || v == 128)
                                   : rows || v == 64 || v == 128);
    if (!ok) return;
    k->tile_forced = true;
    k->tile_swap = swap;
    k->tile_bq = (int)v;
    k->tile_rows = (int)rows;
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
    k.trace = trace && trace[0] == '1';
    const char *log = lookup("BFP8_LOG");
    k.log_plans = log && strstr(log, "hopper") != NULL;
    return k;
}

static const char *env_lookup(const char *name) { return getenv(name); }

static bfp8_hopper_knobs g_env_knobs;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static void env_knobs_init(void) { g_env_knobs = bfp8_hopper_knobs_parse(env_lookup); }

const bfp8_hopper_knobs *bfp8_hopper_knobs_env(void) {
    pthread_once(&g_env_once, env_knobs_init);
    return &g_env_knobs;
}
