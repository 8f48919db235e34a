/* Helpers shared by the CLI's subcommands: errors, option parsing, timing statistics, policies. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "blockfp8 CMD: message" and a newline, to stderr. */
static void report(const char *cmd, const char *fmt, va_list ap) {
    fprintf(stderr, "blockfp8 %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_error(int code, const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(cmd, fmt, ap);
    va_end(ap);
    return code;
}

int cli_lib_error(const char *cmd, const char *what, bfp8_status st) {
    const char *msg = bfp8_last_error();
    fprintf(stderr, "blockfp8 %s: %s: %s%s%s\n", cmd, what, bfp8_status_name(st), msg[0] ? ": " : "", msg);
    return CLI_FAIL;
}

int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(cmd, fmt, ap);
    va_end(ap);
    /* The synopsis only (the usage text up to its first blank line); --help has the rest. */
    const char *end = strstr(usage, "\n\n");
    fprintf(stderr, "%.*s\n(blockfp8 %s --help for details)\n", end ? (int)(end - usage) : (int)strlen(usage), usage,
            cmd);
    return CLI_USAGE;
}

int cli_want_i64(const char *cmd, const char *usage, const char *opt, const char *value, int64_t min, int64_t max,
                 int64_t *out) {
    if (!value) return cli_usage_error(cmd, usage, "%s needs a value", opt);
    if (!cli_parse_i64(value, min, max, out))
        return cli_usage_error(cmd, usage, "bad %s '%s' (want an integer in [%lld, %lld])", opt, value,
                               (long long)min, (long long)max);
    return CLI_OK;
}

bool cli_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

bool cli_opt(int argc, char **argv, int *i, const char *name, const char **value) {
    const char *arg = argv[*i];
    size_t len = strlen(name);
    if (strncmp(arg, name, len) != 0) return false;
    if (arg[len] == '=') {
        *value = arg + len + 1;
        return true;
    }
    if (arg[len] != '\0') return false;
    /* "--m --n 5": a following option is not a value (negative numbers are never valid values here). */
    if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
        *value = argv[++*i];
    } else {
        *value = NULL;
    }
    return true;
}

bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
    char *end;
    long long v;
    if (!s || !*s) return false;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s) return false;
    if (v < min || v > max) return false;
    *out = (int64_t)v;
    return true;
}

bool cli_parse_i64_list(const char *s, int64_t min, int64_t max, int64_t *out, int cap, int *count) {
    char buf[1024];
    char *save = NULL, *tok;
    int n = 0;
    if (!s || !*s || strlen(s) >= sizeof buf) return false;
    strcpy(buf, s);
    /* strtok_r would skip empty items ("1,,2"); reject them explicitly. */
    if (buf[0] == ',' || buf[strlen(buf) - 1] == ',' || strstr(buf, ",,")) return false;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n >= cap || !cli_parse_i64(tok, min, max, &out[n])) return false;
        n++;
    }
    *count = n;
    return n > 0;
}

bool cli_parse_out_dtype(const char *s, bfp8_dtype *out) {
    bfp8_dtype dt;
    if (!s || bfp8_dtype_parse(s, &dt) != BFP8_OK) return false;
    if (dt != BFP8_DTYPE_BF16 && dt != BFP8_DTYPE_F16 && dt != BFP8_DTYPE_F32) return false;
    *out = dt;
    return true;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bfp8_dispatcher *cli_default_dispatcher(const char *cmd) {
    bfp8_dispatcher *d = bfp8_dispatcher_default();
    if (!d) cli_error(CLI_FAIL, cmd, "%s", bfp8_last_error());
    return d;
}

bfp8_status cli_apply_policy(bfp8_dispatcher *d, const char *backend, bool strict) {
    if (!backend) return BFP8_OK;
    return bfp8_dispatcher_set_policy(d, strict ? BFP8_POLICY_STRICT : BFP8_POLICY_PREFER, backend);
}
