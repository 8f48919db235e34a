/* The environment variables the library reads, checked in one place (bfp8_check_env), and BFP8_LOG's topics.
 * Each reader falls back to its default on a bad value and stays silent; this is where such a value is reported. */
#include "internal.h"
#include "backends/hopper/knobs.h"
#include "cpu_features.h"

#include <stdlib.h>
#include <string.h>

static const char *const log_topics[] = {"dispatch", "hopper"};

/* The next item of a comma-separated list: its start and length; NULL after the last. */
static const char *next_item(const char *p, size_t *len) {
    if (!p) return NULL;
    const char *comma = strchr(p, ',');
    *len = comma ? (size_t)(comma - p) : strlen(p);
    return p;
}

bool bfp8_log_has_topic(const char *value, const char *topic) {
    const size_t want = strlen(topic);
    size_t len;
    for (const char *p = next_item(value, &len); p; p = p[len] ? next_item(p + len + 1, &len) : NULL)
        if (len == want && strncmp(p, topic, len) == 0) return true;
    return false;
}

static bfp8_status check_log(void) {
    const char *value = getenv("BFP8_LOG");
    if (!value || !*value) return BFP8_OK;
    size_t len;
    for (const char *p = next_item(value, &len); p; p = p[len] ? next_item(p + len + 1, &len) : NULL) {
        bool known = false;
        for (size_t t = 0; t < sizeof log_topics / sizeof log_topics[0]; t++)
            known = known || (len == strlen(log_topics[t]) && strncmp(p, log_topics[t], len) == 0);
        if (!known)
            return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT,
                             "BFP8_LOG='%.64s': '%.*s' is not a topic (a comma-separated list of dispatch, hopper)",
                             value, (int)(len < 32 ? len : 32), p);
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
