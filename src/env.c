/* The environment variables the library reads, checked in one place (bfp8_check_env), and BFP8_LOG's topics.
 * Each reader falls back to its default on a bad value and stays silent; this is where such a value is reported. */
#include "internal.h"
#include "backends/hopper/knobs.h"
#include "cpu_features.h"

#include <stdlib.h>
#include <string.h>

#define LOG_TOPICS "dispatch,hopper"

/* The length of the comma-separated list's item at p; *next: the item after it, NULL after the last. */
static size_t list_item(const char *p, const char **next) {
    const char *comma = strchr(p, ',');
    *next = comma ? comma + 1 : NULL;
    return comma ? (size_t)(comma - p) : strlen(p);
}

/* Whether the comma-separated `list` (NULL: empty) holds the `len` bytes at `item` as one whole item. */
static bool list_holds(const char *list, const char *item, size_t len) {
    for (const char *p = list, *next; p; p = next)
        if (list_item(p, &next) == len && strncmp(p, item, len) == 0) return true;
    return false;
}

bool bfp8_log_has_topic(const char *value, const char *topic) { return list_holds(value, topic, strlen(topic)); }

static bfp8_status check_log(void) {
    const char *value = getenv("BFP8_LOG");
    if (!value || !*value) return BFP8_OK;
    for (const char *p = value, *next; p; p = next) {
        const size_t n = list_item(p, &next);
        if (!list_holds(LOG_TOPICS, p, n))
            return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT,
                             "BFP8_LOG='%.64s': '%.*s' is not a topic (it takes a comma-separated list of dispatch "
                             "and hopper)", value, (int)(n < 32 ? n : 32), p);
    }
    return BFP8_OK;
}

static const char *env_lookup(const char *name) { return getenv(name); }

bfp8_status bfp8_check_env(void) {
    BFP8_TRY(bfp8_threads_check_env());
    BFP8_TRY(bfp8_cpu_check_env());
    BFP8_TRY(check_log());
    char why[BFP8_REASON_MAX];
    if (!bfp8_hopper_knobs_check(env_lookup, why, sizeof why)) return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "%s", why);
    return BFP8_OK;
}
