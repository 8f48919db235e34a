/* The environment variables the library reads, checked in one place (bfp8_check_env), and BFP8_LOG's topics.
 * Each reader falls back to its default on a bad value and stays silent; this is where such a value is reported. */
#include "internal.h"
#include "backends/hopper/knobs.h"
#include "cpu_features.h"

#include <stdlib.h>
#include <string.h>

#define LOG_TOPICS "dispatch,hopper"

/* Whether the comma-separated `list` (NULL: empty) holds the `len` bytes at `item` as one whole item. */
static bool list_holds(const char *list, const char *item, size_t len) {
    while (list) {
        const char *comma = strchr(list, ',');
        const size_t n = comma ? (size_t)(comma - list) : strlen(list);
        if (n == len && strncmp(list, item, len) == 0) return true;
        list = comma ? comma + 1 : NULL;
    }
    return false;
}

bool bfp8_log_has_topic(const char *value, const char *topic) { return list_holds(value, topic, strlen(topic)); }

static bfp8_status check_log(void) {
    const char *value = getenv("BFP8_LOG");
    if (!value || !*value) return BFP8_OK;
    for (const char *item = value; item;) {
        const char *comma = strchr(item, ',');
        const size_t n = comma ? (size_t)(comma - item) : strlen(item);
        if (!list_holds(LOG_TOPICS, item, n))
            return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT,
                             "BFP8_LOG='%.64s': '%.*s' is not a topic (it takes a comma-separated list of dispatch "
                             "and hopper)", value, (int)(n < 32 ? n : 32), item);
        item = comma ? comma + 1 : NULL;
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
