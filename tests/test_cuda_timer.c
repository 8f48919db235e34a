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

/* Interleaved timing: each call appends its function's index to `order`; function 1 also spins the GPU, so that
 * its times stand apart from function 0's in the [nfns][iters] output. */
static int order[64], norder;
#ifdef BFP8_WITH_CUDA
int cli_cuda_launch_hold(long long cycles, void *stream); /* tools/cuda_timer_kernels.cu */
#endif
static bfp8_status logged(void *ctx) {
    const int f = *(const int *)ctx;
    if (norder < 64) order[norder++] = f;
#ifdef BFP8_WITH_CUDA
    if (f == 1 && cli_cuda_launch_hold(400000, NULL) != 0) return BFP8_ERR_DEVICE;
#endif
    return BFP8_OK;
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
    bfp8_status (*fns[2])(void *) = {noop, NULL};
    void *ctxs[2] = {NULL, NULL};
    expect(cli_cuda_time_interleaved(fns, ctxs, 0, 0, 1, CLI_L2_KEEP, NULL, t, NULL, why, sizeof why),
           BFP8_ERR_INVALID_ARGUMENT, why, "nfns", "no functions");
    expect(cli_cuda_time_interleaved(fns, ctxs, 2, 0, 1, CLI_L2_KEEP, NULL, t, NULL, why, sizeof why),
           BFP8_ERR_INVALID_ARGUMENT, why, "fns[1]", "a NULL function");
    expect(cli_cuda_time_interleaved(NULL, ctxs, 1, 0, 1, CLI_L2_KEEP, NULL, t, NULL, why, sizeof why),
           BFP8_ERR_INVALID_ARGUMENT, why, "NULL", "fns NULL");
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

/* Three functions, 1 warmup round and 3 timed ones: the warmup in order, then round i starting at function i % 3;
 * function 1's spin (~200 us) shows in its own times only. */
static void check_interleaved(void) {
    const int ids[3] = {0, 1, 2};
    bfp8_status (*fns[3])(void *) = {logged, logged, logged};
    void *ctxs[3] = {(void *)&ids[0], (void *)&ids[1], (void *)&ids[2]};
    double times[3][3];
    char why[256];
    norder = 0;
    int failed = 7;
    CHECK(cli_cuda_time_interleaved(fns, ctxs, 3, 1, 3, CLI_L2_CLEAN, NULL, &times[0][0], &failed, why, sizeof why) ==
              BFP8_OK,
          "interleaved: %s", why);
    CHECK(failed == -1, "no call failed, but failed = %d", failed);
    const int want[] = {0, 1, 2, 0, 1, 2, 1, 2, 0, 2, 0, 1};
    CHECK(norder == 12, "%d calls, expected 12", norder);
    for (int i = 0; i < 12 && i < norder; i++)
        CHECK(order[i] == want[i], "call %d ran function %d, want %d", i, order[i], want[i]);
    for (int i = 0; i < 3; i++) {
        CHECK(times[1][i] > 50 && times[1][i] < 1e5, "the spinning function's time %d: %g us", i, times[1][i]);
        CHECK(times[0][i] < 50 && times[2][i] < 50 && times[0][i] < times[1][i] / 2 && times[2][i] < times[1][i] / 2,
              "round %d: no-op times %g and %g us beside the spin's %g: times are not [function][round]", i,
              times[0][i], times[2][i], times[1][i]);
    }
    /* A failing function: its status and message as they came, and its index. */
    bfp8_status (*two[2])(void *) = {noop, failing};
    void *none[2] = {NULL, NULL};
    noop_calls = 0;
    expect(cli_cuda_time_interleaved(two, none, 2, 0, 3, CLI_L2_KEEP, NULL, &times[0][0], &failed, why, sizeof why),
           BFP8_ERR_INVALID_ARGUMENT, why, "ptr is NULL", "the second function fails");
    CHECK(failed == 1 && noop_calls == 2, "failed = %d after %d calls, want 1 after 2", failed, noop_calls);
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
    check_interleaved();
    return TEST_SUMMARY("cuda_timer");
}
