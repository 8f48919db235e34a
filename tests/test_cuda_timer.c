/* The CLI's GPU timer (tools/cuda_timer.c): its argument checks and the hold setting on
 * every machine; on a device, the number of calls it makes, the flush modes and that the hold before each call stays
 * outside the timed events. Without a device it prints "cuda_timer: skipped: <why>" after the checks that need none
 * (BFP8_REQUIRE_CUDA=1 makes that a failure). */
#include "check.h"

#include "cuda_timer.h"

static int noop_calls;
static bfp8_status noop(void *ctx) {
    (void)ctx;
    noop_calls++;
    return BFP8_OK;
}

/* A call that fails the way a library call does: a status and bfp8_last_error(). */
static bfp8_status failing(void *ctx) {
    (void)ctx;
    noop_calls++;
    return bfp8_cuda_malloc(16, NULL);
}

/* Expects `want` and a message that contains `needle`. */
static void expect(bfp8_status got, bfp8_status want, const char *why, const char *needle, const char *what) {
    CHECK(got == want, "%s -> %s, want %s (%s)", what, bfp8_status_name(got), bfp8_status_name(want), why);
    CHECK(why[0] != '\0' && strstr(why, needle) != NULL, "%s: message '%s' lacks '%s'", what, why, needle);
}

/* The user's BFP8_CUDA_TIME_HOLD_CYCLES, put back after the checks that change it. */
static char hold_saved[64];
static bool hold_was_set;

static void set_hold(const char *value) {
    if (value)
        setenv("BFP8_CUDA_TIME_HOLD_CYCLES", value, 1);
    else
        unsetenv("BFP8_CUDA_TIME_HOLD_CYCLES");
}

/* Refused before anything runs, with or without a device. */
static void check_arguments(void) {
    double t[4];
    char why[256];
    noop_calls = 0;
    expect(cli_cuda_time(NULL, NULL, 0, 1, CLI_L2_KEEP, NULL, t, why, sizeof why), BFP8_ERR_INVALID_ARGUMENT, why,
           "NULL", "fn NULL");
    expect(cli_cuda_time(noop, NULL, 0, 1, CLI_L2_KEEP, NULL, NULL, why, sizeof why), BFP8_ERR_INVALID_ARGUMENT,
           why, "NULL", "times NULL");
    expect(cli_cuda_time(noop, NULL, 0, 0, CLI_L2_KEEP, NULL, t, why, sizeof why), BFP8_ERR_INVALID_ARGUMENT, why,
           "iters", "iters 0");
    expect(cli_cuda_time(noop, NULL, -1, 1, CLI_L2_KEEP, NULL, t, why, sizeof why), BFP8_ERR_INVALID_ARGUMENT, why,
           "warmup", "warmup -1");
    expect(cli_cuda_time(noop, NULL, 0, 1, (cli_l2_flush)7, NULL, t, why, sizeof why), BFP8_ERR_INVALID_ARGUMENT,
           why, "flush", "flush mode 7");
    /* A hold that is not a cycle count is an error, not ignored. */
    const char *bad[] = {"", "12x", "-1", "99999999999"};
    for (int i = 0; i < 4; i++) {
        set_hold(bad[i]);
        expect(cli_cuda_time(noop, NULL, 0, 1, CLI_L2_KEEP, NULL, t, why, sizeof why), BFP8_ERR_INVALID_ARGUMENT,
               why, "BFP8_CUDA_TIME_HOLD_CYCLES", bad[i]);
    }
    set_hold(hold_was_set ? hold_saved : NULL);
    CHECK(noop_calls == 0, "fn called %d times by refused calls", noop_calls);
}

static void check_unavailable(const char *reason) {
    double t[1];
    char why[256];
    noop_calls = 0;
    expect(cli_cuda_time(noop, NULL, 0, 1, CLI_L2_KEEP, NULL, t, why, sizeof why), BFP8_ERR_UNSUPPORTED, why, reason,
           "no device");
    CHECK(noop_calls == 0, "fn called %d times without a device", noop_calls);
}

static void check_timing(void) {
    double times[5];
    char why[256];
    noop_calls = 0;
    CHECK(cli_cuda_time(noop, NULL, 2, 5, CLI_L2_CLEAN, NULL, times, why, sizeof why) == BFP8_OK, "clean: %s", why);
    CHECK(noop_calls == 7, "called fn %d times, expected 2 warmup + 5 timed", noop_calls);
    for (int i = 0; i < 5; i++) CHECK(times[i] >= 0 && times[i] < 1e6, "time[%d] = %g us", i, times[i]);
    CHECK(cli_cuda_time(noop, NULL, 0, 2, CLI_L2_DIRTY, NULL, times, why, sizeof why) == BFP8_OK, "dirty: %s", why);
    CHECK(cli_cuda_time(noop, NULL, 0, 2, CLI_L2_KEEP, NULL, times, why, sizeof why) == BFP8_OK, "keep: %s", why);
    CHECK(noop_calls == 11, "called fn %d times, expected 11", noop_calls);
    /* fn's failure comes back as it came, with its message. */
    noop_calls = 0;
    expect(cli_cuda_time(failing, NULL, 0, 3, CLI_L2_KEEP, NULL, times, why, sizeof why), BFP8_ERR_INVALID_ARGUMENT,
           why, "ptr is NULL", "fn fails");
    CHECK(noop_calls == 1, "a failing fn was called %d times, expected once", noop_calls);
    /* The hold: 0 is none; a long one (~1 ms at 2 GHz) is inside neither event. */
    set_hold("0");
    CHECK(cli_cuda_time(noop, NULL, 0, 2, CLI_L2_KEEP, NULL, times, why, sizeof why) == BFP8_OK, "hold 0: %s", why);
    set_hold("2000000");
    CHECK(cli_cuda_time(noop, NULL, 0, 2, CLI_L2_KEEP, NULL, times, why, sizeof why) == BFP8_OK, "hold: %s", why);
    CHECK(times[0] < 500 && times[1] < 500, "a timed no-op took %g / %g us: the hold is inside the events", times[0],
          times[1]);
    set_hold(hold_was_set ? hold_saved : NULL);
}

int main(void) {
    const char *hold = getenv("BFP8_CUDA_TIME_HOLD_CYCLES");
    if ((hold_was_set = hold != NULL)) snprintf(hold_saved, sizeof hold_saved, "%s", hold);
    check_arguments();
    char why[BFP8_REASON_MAX];
    if (!bfp8_cuda_available(why, sizeof why)) {
        check_unavailable(why);
        const char *req = getenv("BFP8_REQUIRE_CUDA");
        CHECK(!(req && req[0] == '1'), "BFP8_REQUIRE_CUDA=1 but no device: %s", why);
        printf("cuda_timer: skipped: %s\n", why);
        return TEST_SUMMARY("cuda_timer");
    }
    check_timing();
    return TEST_SUMMARY("cuda_timer");
}
