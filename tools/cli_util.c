/* Helpers shared by the CLI's subcommands: errors, option parsing, timing statistics, policies. */
#include "cli.h"
#include "cuda_timer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

bool cli_parse_f64(const char *s, double min, double max, double *out) {
    char *end;
    if (!s || !*s) return false;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || end == s || !isfinite(v) || v < min || v > max) return false;
    *out = v;
    return true;
}

bool cli_list_has_empty_item(const char *s) {
    /* strtok_r skips empty items (",1", "1,,2", "1,"), so lists parsed with it reject them first. */
    return !*s || s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,");
}

bool cli_parse_i64_list(const char *s, int64_t min, int64_t max, int64_t *out, int cap, int *count) {
    char buf[1024];
    char *save = NULL, *tok;
    int n = 0;
    if (!s || cli_list_has_empty_item(s) || strlen(s) >= sizeof buf) return false;
    strcpy(buf, s);
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

bfp8_status cli_layer_problem(bfp8_device device, int64_t m, int64_t n, int64_t k, bfp8_dtype out_dtype,
                              bfp8_scale_format format, bool has_bias, bfp8_dtype bias_dtype, bfp8_problem *out) {
    const uint32_t layouts = bfp8_scale_layouts_for(format);
    const bfp8_weight_info wi = {.n = n, .k = k, .scale_format = format, .host_layouts = layouts,
                                 .device_layouts = layouts};
    return bfp8_problem_for_linear(&wi, device, m, out_dtype, has_bias, bias_dtype, out);
}

/* --- outputs that could destroy an input ------------------------------------------------------------------------ */

/* realpath() of the directory part plus the last component: a canonical name for a path that need not exist. */
static char *canonical_name(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    char *real = dir ? realpath(dir, NULL) : NULL;
    free(dir);
    if (!real) return NULL;
    size_t lr = strlen(real), lb = strlen(base);
    char *out = malloc(lr + lb + 2);
    if (out) snprintf(out, lr + lb + 2, "%s%s%s", real, strcmp(real, "/") == 0 ? "" : "/", base);
    free(real);
    return out;
}

static bool same_path(const char *out, const char *in) {
    if (strcmp(out, in) == 0) return true;
    struct stat so, si;
    bool out_exists = stat(out, &so) == 0;
    if (out_exists) return stat(in, &si) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino;
    char *a = canonical_name(out), *b = realpath(in, NULL);
    if (!b) b = canonical_name(in);
    bool same = a && b && strcmp(a, b) == 0;
    free(a);
    free(b);
    return same;
}

bool cli_output_is_input(const char *cmd, const char *out, const char *const *inputs, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (inputs[i] && same_path(out, inputs[i])) {
            if (strcmp(out, inputs[i]) == 0)
                cli_error(CLI_FAIL, cmd, "refusing to write %s: it is an input file", out);
            else
                cli_error(CLI_FAIL, cmd, "refusing to write %s: it is the input file %s", out, inputs[i]);
            return true;
        }
    return false;
}

/* --- writing with the temp file removed on a signal ---------------------------------------------------------- */

static char pending_temp[PATH_MAX + 64];
static volatile sig_atomic_t pending_temp_set;
static char pending_json[PATH_MAX + 64]; /* cli_json_open's temp file */
static volatile sig_atomic_t pending_json_set;
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void remove_temp_and_die(int sig) {
    if (pending_temp_set) unlink(pending_temp); /* async-signal-safe */
    if (pending_json_set) unlink(pending_json);
    signal(sig, SIG_DFL);
    raise(sig); /* delivered with the default action once this handler returns */
}

static void install_cleanup_handlers(void) {
    static bool installed;
    if (installed) return;
    installed = true;
    for (size_t i = 0; i < sizeof cleanup_signals / sizeof cleanup_signals[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(cleanup_signals[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = remove_temp_and_die;
        sigemptyset(&sa.sa_mask);
        for (size_t j = 0; j < sizeof cleanup_signals / sizeof cleanup_signals[0]; j++)
            sigaddset(&sa.sa_mask, cleanup_signals[j]);
        sigaction(cleanup_signals[i], &sa, NULL);
    }
}

static void register_temp(const char *temp_path, void *ctx) {
    (void)ctx;
    if (!temp_path) {
        pending_temp_set = 0;
        return;
    }
    size_t len = strlen(temp_path);
    if (len >= sizeof pending_temp) return; /* cannot happen: the temp name is short and in the output's directory */
    if (!pending_temp_set) {
        memcpy(pending_temp, temp_path, len + 1);
        pending_temp_set = 1;
        return; /* announced before it is created; called again once it exists */
    }
    const char *delay = getenv("BFP8_CLI_TEST_WRITE_DELAY_MS");
    if (delay && *delay) {
        long ms = strtol(delay, NULL, 10);
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
        while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

bfp8_status cli_write_safetensors(const char *path, const bfp8_tensor *tensors, size_t count) {
    install_cleanup_handlers();
    const bfp8_write_options options = {.on_temp = register_temp};
    return bfp8_safetensors_write_ex(path, tensors, count, &options);
}

/* --- --json files: written beside the destination, renamed onto it only when the command succeeds --------------- */

static char *json_dest;  /* where the records go (a symlink's target), NULL: straight to a non-regular file */
static int json_mode = -1; /* the mode of the file replaced, or -1 */

FILE *cli_json_open(const char *cmd, const char *path) {
    struct stat sb;
    if (!path[0] || path[strlen(path) - 1] == '/') { /* refused now, not after the whole run */
        cli_error(CLI_FAIL, cmd, "--json: '%s' is not a file name", path);
        return NULL;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        cli_error(CLI_FAIL, cmd, "--json: cannot write '%s': it is a directory", path);
        return NULL;
    }
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* /dev/stdout, a pipe: nothing there to keep */
        FILE *f = fopen(path, "w");
        if (!f) cli_error(CLI_FAIL, cmd, "--json: cannot write '%s': %s", path, strerror(errno));
        else fputc('[', f);
        return f;
    }
    struct stat lsb;
    char *dest = lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode) ? realpath(path, NULL) : NULL;
    if (!dest) dest = strdup(path);
    const char *slash = dest ? strrchr(dest, '/') : NULL;
    char *dir = !dest ? NULL : slash ? strndup(dest, slash == dest ? 1 : (size_t)(slash - dest)) : strdup(".");
    if (!dest || !dir || strlen(dir) + 40 >= sizeof pending_json) {
        cli_error(CLI_FAIL, cmd, "--json: cannot write '%s': %s", path,
                  dest && dir ? "path too long" : "out of memory");
        free(dest);
        free(dir);
        return NULL;
    }
    install_cleanup_handlers();
    int fd = -1;
    for (unsigned attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(pending_json, sizeof pending_json, "%s/.bfp8.tmp.json.%ld.%u", dir, (long)getpid(), attempt);
        pending_json_set = 1; /* before it exists, so a signal cannot miss it */
        fd = open(pending_json, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) pending_json_set = 0;
        if (fd < 0 && errno != EEXIST) break;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        cli_error(CLI_FAIL, cmd, "--json: cannot create a temp file in %s for '%s': %s", dir, path, strerror(errno));
        if (fd >= 0) close(fd), unlink(pending_json), pending_json_set = 0;
        free(dest);
        free(dir);
        return NULL;
    }
    free(dir);
    json_dest = dest;
    json_mode = stat(dest, &sb) == 0 ? (int)(sb.st_mode & 07777) : -1;
    fputc('[', f);
    return f;
}

int cli_json_close(const char *cmd, FILE *f, const char *path, int rc) {
    if (!f) return rc;
    fputs("\n]\n", f);
    if (!json_dest) { /* written straight to a non-regular file */
        if (fclose(f) != 0 && rc == CLI_OK) rc = cli_error(CLI_FAIL, cmd, "--json: writing '%s' failed", path);
        return rc;
    }
    int err = 0;
    if (rc == CLI_OK) {
        if (fflush(f) != 0 || ferror(f)) err = errno ? errno : EIO;
        if (!err && json_mode >= 0 && fchmod(fileno(f), (mode_t)json_mode) != 0) err = errno;
        if (!err && fsync(fileno(f)) != 0) err = errno;
    }
    if (fclose(f) != 0 && !err) err = errno;
    if (rc == CLI_OK && !err && rename(pending_json, json_dest) != 0) err = errno;
    if (rc != CLI_OK || err) unlink(pending_json); /* never a partial record set under the final name */
    pending_json_set = 0;
    free(json_dest);
    json_dest = NULL;
    if (rc == CLI_OK && err) rc = cli_error(CLI_FAIL, cmd, "--json: writing '%s' failed: %s", path, strerror(err));
    else if (rc != CLI_OK) fprintf(stderr, "blockfp8 %s: --json: '%s' not written (the run failed)\n", cmd, path);
    return rc;
}

bfp8_status cli_time_medians(bfp8_device device, int warmup, int iters, cli_l2_flush flush,
                             bfp8_status (*const *fns)(void *ctx), void *const *ctxs, int nfns, double *median_us,
                             int *failed, char *why, size_t why_size) {
    int failed_fn = -1;
    if (!failed) failed = &failed_fn;
    *failed = -1;
    why[0] = '\0';
    bool ok = fns && ctxs && median_us && nfns > 0 && warmup >= 0 && iters > 0;
    for (int f = 0; ok && f < nfns; f++) ok = fns[f] != NULL;
    if (!ok) {
        snprintf(why, why_size, "need functions, contexts and medians for nfns=%d > 0, warmup=%d >= 0, iters=%d > 0",
                 nfns, warmup, iters);
        return BFP8_ERR_INVALID_ARGUMENT;
    }
    double *t = malloc(sizeof(double) * (size_t)nfns * (size_t)iters);
    if (!t) {
        snprintf(why, why_size, "out of memory");
        return BFP8_ERR_OUT_OF_MEMORY;
    }
    bfp8_status st = BFP8_OK;
    if (device == BFP8_DEVICE_CUDA) {
        st = cli_cuda_time_interleaved(fns, ctxs, nfns, warmup, iters, flush, NULL, t, failed, why, why_size);
    } else { /* the same rounds, on the host's clock */
        for (int i = 0; i < warmup && st == BFP8_OK; i++)
            for (int f = 0; f < nfns && st == BFP8_OK; f++)
                if ((st = fns[f](ctxs[f])) != BFP8_OK) *failed = f;
        for (int i = 0; i < iters && st == BFP8_OK; i++)
            for (int j = 0; j < nfns && st == BFP8_OK; j++) {
                const int f = (i + j) % nfns;
                double t0 = cli_now();
                if ((st = fns[f](ctxs[f])) != BFP8_OK) *failed = f;
                t[(size_t)f * (size_t)iters + (size_t)i] = (cli_now() - t0) * 1e6;
            }
    }
    if (st != BFP8_OK && !why[0]) snprintf(why, why_size, "%s", bfp8_last_error());
    for (int f = 0; f < nfns && st == BFP8_OK; f++) median_us[f] = cli_median(t + (size_t)f * (size_t)iters, iters);
    free(t);
    return st;
}

bfp8_status cli_time_median(bfp8_device device, int warmup, int iters, cli_l2_flush flush, bfp8_status (*fn)(void *ctx),
                            void *ctx, double *median_us, char *why, size_t why_size) {
    return cli_time_medians(device, warmup, iters, flush, &fn, &ctx, 1, median_us, NULL, why, why_size);
}
