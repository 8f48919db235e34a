/* Environment variables the library reads: a value it would ignore is reported by bfp8_check_env (and
 * bfp8_set_num_threads(0)), never taken silently; valid values pass, and a bad one falls back to the default. */
#include "check.h"

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

int main(void) {
    test_seed();
    unsetenv("BFP8_NUM_THREADS");
    unsetenv("BFP8_CPU_ISA");
    test_num_threads();
    test_cpu_isa();
    return TEST_SUMMARY("env");
}
