/* Environment variables the library reads: a value it would ignore is reported by bfp8_check_env (and
 * bfp8_set_num_threads(0)), never taken silently; valid values pass, and a bad one falls back to the default. */
#include "check.h"
#include "internal.h" /* bfp8_log_has_topic */

#include <unistd.h>

static void test_num_threads(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int def = cores < 1 ? 1 : cores > 256 ? 256 : (int)cores;
    static const struct {
        const char *value;
        int threads; /* what bfp8_get_num_threads gives; 0: bad */
    } cases[] = {
        {"abc", 0}, {"4x", 0}, {"", -1}, {"0", 0}, {"-2", 0}, {"257", 0}, {"99999999999999999999", 0},
        {" 3", 0}, {"1", 1}, {"3", 3}, {"256", 256},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("BFP8_NUM_THREADS", cases[i].value, 1);
        bfp8_status env = bfp8_check_env();
        bfp8_status set = bfp8_set_num_threads(0);
        int got = bfp8_get_num_threads();
        if (cases[i].threads == 0) {
            CHECK(env == BFP8_ERR_INVALID_ARGUMENT && strstr(bfp8_last_error(), "BFP8_NUM_THREADS") &&
                      strstr(bfp8_last_error(), cases[i].value),
                  "BFP8_NUM_THREADS='%s': check_env %s '%s'", cases[i].value, bfp8_status_name(env), bfp8_last_error());
            CHECK(set == BFP8_ERR_INVALID_ARGUMENT, "BFP8_NUM_THREADS='%s': set_num_threads(0) -> %s", cases[i].value,
                  bfp8_status_name(set));
            CHECK(got == def, "BFP8_NUM_THREADS='%s': %d threads, want the default %d", cases[i].value, got, def);
        } else {
            int want = cases[i].threads < 0 ? def : cases[i].threads;
            CHECK(env == BFP8_OK && set == BFP8_OK && got == want, "BFP8_NUM_THREADS='%s': %s/%s, %d threads (want %d)",
                  cases[i].value, bfp8_status_name(env), bfp8_status_name(set), got, want);
        }
    }
    /* An explicit count does not depend on the environment. */
    setenv("BFP8_NUM_THREADS", "abc", 1);
    CHECK_OK(bfp8_set_num_threads(2));
    CHECK(bfp8_get_num_threads() == 2, "explicit count");
    unsetenv("BFP8_NUM_THREADS");
    CHECK_OK(bfp8_set_num_threads(0));
    CHECK_OK(bfp8_check_env());
}

static void test_cpu_isa(void) {
    static const struct {
        const char *value;
        bool ok;
    } cases[] = {{"bogus", false}, {"AVX2", false}, {"avx512", false}, {"auto", true}, {"portable", true},
                 {"avx2", true}, {"", true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("BFP8_CPU_ISA", cases[i].value, 1);
        bfp8_status st = bfp8_check_env();
        if (cases[i].ok)
            CHECK(st == BFP8_OK, "BFP8_CPU_ISA='%s': %s '%s'", cases[i].value, bfp8_status_name(st), bfp8_last_error());
        else
            CHECK(st == BFP8_ERR_INVALID_ARGUMENT && strstr(bfp8_last_error(), "BFP8_CPU_ISA") &&
                      strstr(bfp8_last_error(), cases[i].value) && strstr(bfp8_last_error(), "portable"),
                  "BFP8_CPU_ISA='%s': %s '%s'", cases[i].value, bfp8_status_name(st), bfp8_last_error());
    }
    unsetenv("BFP8_CPU_ISA");
    CHECK_OK(bfp8_check_env());
}

/* A variable whose value bfp8_check_env must take (ok) or report, naming the variable, the value and, in `names`,
 * what it takes. */
static void check_value(const char *var, const char *value, bool ok, const char *names) {
    setenv(var, value, 1);
    const bfp8_status st = bfp8_check_env();
    if (ok)
        CHECK(st == BFP8_OK, "%s='%s': %s '%s'", var, value, bfp8_status_name(st), bfp8_last_error());
    else
        CHECK(st == BFP8_ERR_INVALID_ARGUMENT && strstr(bfp8_last_error(), var) &&
                  strstr(bfp8_last_error(), value) && strstr(bfp8_last_error(), names),
              "%s='%s': %s '%s'", var, value, bfp8_status_name(st), bfp8_last_error());
    unsetenv(var);
}

/* BFP8_LOG: a comma-separated list of the topics dispatch and hopper, each item whole. */
static void test_log(void) {
    static const struct {
        const char *value;
        bool ok;
    } cases[] = {{"dispatch", true}, {"hopper", true},  {"dispatch,hopper", true}, {"hopper,dispatch", true},
                 {"", true},         {"dispach", false}, {"Dispatch", false},       {"dispatch,", false},
                 {",hopper", false}, {"dispatch hopper", false}, {"dispatchx", false}, {"all", false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_value("BFP8_LOG", cases[i].value, cases[i].ok, "dispatch and hopper");
    /* What the dispatcher and hopper's knobs read from it. */
    CHECK(bfp8_log_has_topic("dispatch,hopper", "hopper") && bfp8_log_has_topic("hopper,dispatch", "dispatch") &&
              bfp8_log_has_topic("dispatch", "dispatch") && bfp8_log_has_topic("x,,hopper", "hopper"),
          "bfp8_log_has_topic misses a topic");
    CHECK(!bfp8_log_has_topic(NULL, "dispatch") && !bfp8_log_has_topic("", "dispatch") &&
              !bfp8_log_has_topic("dispatchhopper", "hopper") && !bfp8_log_has_topic("hoppe", "hopper") &&
              !bfp8_log_has_topic("dispatch", "hopper"),
          "bfp8_log_has_topic finds a topic that is not there");
}

/* hopper's knobs (docs/hopper-knobs.md): what the planner takes passes; what it would ignore is reported. */
static void test_hopper_knobs(void) {
    static const struct {
        const char *var, *value;
        bool ok;
        const char *names;
    } cases[] = {
        {"BFP8_HOPPER_TILE", "64x32", true, ""},           {"BFP8_HOPPER_TILE", "swap16", true, ""},
        {"BFP8_HOPPER_TILE", "", true, ""},                {"BFP8_HOPPER_TILE", "64x48", false, "RxQ"},
        {"BFP8_HOPPER_TILE", "swap12", false, "swapN"},     {"BFP8_HOPPER_SPLITS", "4", true, ""},
        {"BFP8_HOPPER_SPLITS", "0", false, "[1, 1024]"},   {"BFP8_HOPPER_SPLITS", "4x", false, "[1, 1024]"},
        {"BFP8_HOPPER_FORCE", "stream-k", true, ""},       {"BFP8_HOPPER_FORCE", "stream-K", false, "slices"},
        {"BFP8_HOPPER_RASTER_GROUP", "16", true, ""},      {"BFP8_HOPPER_RASTER_GROUP", "12", false, "power of two"},
        {"BFP8_HOPPER_RASTER_GROUP", "2048", false, "power of two"}, {"BFP8_HOPPER_TRACE", "1", true, ""},
        {"BFP8_HOPPER_TRACE", "0", true, ""},              {"BFP8_HOPPER_TRACE", "yes", false, "0 or 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_value(cases[i].var, cases[i].value, cases[i].ok, cases[i].names);
}

int main(void) {
    test_seed();
    static const char *const vars[] = {"BFP8_NUM_THREADS",  "BFP8_CPU_ISA",      "BFP8_LOG",
                                       "BFP8_HOPPER_TILE",  "BFP8_HOPPER_SPLITS", "BFP8_HOPPER_FORCE",
                                       "BFP8_HOPPER_RASTER_GROUP", "BFP8_HOPPER_TRACE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    test_num_threads();
    test_cpu_isa();
    test_log();
    test_hopper_knobs();
    return TEST_SUMMARY("env");
}
