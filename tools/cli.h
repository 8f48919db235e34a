/* Shared helpers of the blockfp8 CLI's subcommands (implemented in tools/cli_util.c). */
#ifndef BFP8_CLI_H
#define BFP8_CLI_H

#include "blockfp8_backend.h" /* the CLI reads backends' names and caps */
#include "blockfp8_tp.h"
#include "common/devbuf.h"
#include "common/numerics.h" /* tests/common: the tolerance table and error metrics the tests use */
#include "common/rng.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

/* Returns the status of `expr` from the calling function when it is not BFP8_OK. */
#define CLI_TRY(expr)                                                                                            \
    do {                                                                                                         \
        bfp8_status cli_try_status_ = (expr);                                                                    \
        if (cli_try_status_ != BFP8_OK) return cli_try_status_;                                                  \
    } while (0)
/* a rounded up to a multiple of b (b > 0, no overflow check: for the CLI's own small sizes). */
static inline int64_t cli_round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

/* The lowest-numbered layout of a non-empty BFP8_BIT(layout) set. */
static inline bfp8_scale_layout cli_first_layout(uint32_t set) { return (bfp8_scale_layout)__builtin_ctz(set); }

/* Exit statuses: 0 ok, 1 runtime failure (I/O, numerics, unsupported), 2 usage error. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Largest M, N or K an option accepts (products are still checked where memory is allocated). */
#define CLI_MAX_DIM ((int64_t)1 << 31)

/* Prints "blockfp8 <cmd>: <message>" to stderr (printf-style) and returns `code`. */
int cli_error(int code, const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Reports a failed library call: "blockfp8 <cmd>: <what>: <status>: <bfp8_last_error()>"; returns CLI_FAIL. */
int cli_lib_error(const char *cmd, const char *what, bfp8_status st);

/* Strict parsers: the whole string must parse; false on junk, overflow or out of range. */
bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
/* A finite decimal number in [min, max]. */
bool cli_parse_f64(const char *s, double min, double max, double *out);
/* Whether a comma-separated list is empty or has an empty item (",1", "1,,2", "1,"). */
bool cli_list_has_empty_item(const char *s);
/* Comma-separated list of integers (e.g. "1,16,128"); at most `cap` values. */
bool cli_parse_i64_list(const char *s, int64_t min, int64_t max, int64_t *out, int cap, int *count);

/* Monotonic wall clock in seconds. */
double cli_now(void);
/* Median of n doubles (sorts in place). */
double cli_median(double *v, int n);

/* Option matching for subcommand loops. If argv[*i] is `name` ("--m") or "name=VALUE", returns true and sets
 * *value to the value (the next argument, consumed by advancing *i), or to NULL when the value is missing.
 * Returns false when argv[*i] is another option. Flags without values compare with strcmp. */
bool cli_opt(int argc, char **argv, int *i, const char *name, const char **value);
/* True for "--help" and "-h". */
bool cli_is_help(const char *arg);
/* Prints "blockfp8 <cmd>: <message>" and the synopsis (`usage` up to its first blank line) to stderr; returns
 * CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Parses an option's integer value into *out; on a missing or bad value prints the usage error and returns
 * CLI_USAGE, else CLI_OK. */
int cli_want_i64(const char *cmd, const char *usage, const char *opt, const char *value, int64_t min, int64_t max,
                 int64_t *out);
/* Output dtypes a GEMM can write: "bf16", "fp16"/"f16", "fp32"/"f32" (the names bfp8_dtype_parse takes). */
bool cli_parse_out_dtype(const char *s, bfp8_dtype *out);

/* The process-wide default dispatcher; on failure (e.g. a BFP8_BACKEND nobody knows) prints
 * "blockfp8 <cmd>: ..." to stderr and returns NULL. */
bfp8_dispatcher *cli_default_dispatcher(const char *cmd);
/* Applies --backend/--strict to a dispatcher: no name -> leave its policy (auto or BFP8_BACKEND); a name ->
 * prefer it (strict with `strict`); the dispatcher judges unknown names. */
bfp8_status cli_apply_policy(bfp8_dispatcher *d, const char *backend, bool strict);

/* True (after printing "blockfp8 <cmd>: refusing to write OUT: it is the input IN") when the output path names
 * one of the inputs: the same file (stat: symlinks and hard links included), the same string, or, for an output
 * that does not exist yet, the same canonical directory and name. */
bool cli_output_is_input(const char *cmd, const char *out, const char *const *inputs, size_t count);

/* bfp8_safetensors_write with the temp file removed on SIGINT, SIGTERM, SIGHUP and SIGQUIT (a signal the process
 * ignores stays ignored); the signal then ends the process as it would have. Test hook:
 * BFP8_CLI_TEST_WRITE_DELAY_MS=N waits N ms once the temp file exists, so a test can signal it there. */
bfp8_status cli_write_safetensors(const char *path, const bfp8_tensor *tensors, size_t count);

/* --json FILE of the bench commands: a JSON array of records, which cli_json_open opens ('[') and cli_json_close
 * closes. cli_json_open creates a temp file beside FILE (through a symlink, beside its target), removed on SIGINT,
 * SIGTERM, SIGHUP and SIGQUIT; on failure it prints why and returns NULL. A FILE that
 * exists and is not a regular file (/dev/stdout, a pipe) is written directly; a directory is refused.
 * cli_json_close(cmd, f, FILE, rc) closes it and, when rc is CLI_OK, renames it onto FILE (a file it replaces keeps
 * its mode); otherwise removes it, so a failed run never leaves partial records under FILE nor destroys a FILE that
 * was there. Returns rc, or CLI_FAIL (after printing why) when the file could not be written. f = NULL: returns
 * rc. One such file at a time. */
FILE *cli_json_open(const char *cmd, const char *path);
int cli_json_close(const char *cmd, FILE *f, const char *path, int rc);

/* The problem a bfp8_linear call poses for an [n, k] layer whose weight is prepared in every layout of `format`
 * (bfp8_problem_for_linear): what explain and `linear --device auto` ask the dispatcher about. */
bfp8_status cli_layer_problem(bfp8_device device, int64_t m, int64_t n, int64_t k, bfp8_dtype out_dtype,
                              bfp8_scale_format format, bool has_bias, bfp8_dtype bias_dtype, bfp8_problem *out);

/* The OpenBLAS baseline (tools/openblas.c), loaded with dlopen on demand: cli_openblas_load prints the reason and
 * returns CLI_FAIL when it cannot be loaded; the others need a successful load. C = A W^T in fp32 (row-major A
 * [m, k], W [n, k], C [m, n]); the core OpenBLAS chose; a pause that lets its spinning threads go idle. */
int cli_openblas_load(const char *cmd);
void cli_openblas_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, const float *w, float *c);
void cli_openblas_set_threads(int n);
const char *cli_openblas_core(void);
void cli_openblas_settle(void);

/* DeepSeek-R1's dense-path linear layers (tools/dsr1_layers.c) and the tensor-parallel split engines give each. */
enum { CLI_DSR1_LAYER_COUNT = 8, CLI_TP_REPLICATED = -1 /* not split: every rank holds the whole weight */ };
typedef struct cli_dsr1_layer {
    const char *name;
    int64_t n, k;
    int tp_mode; /* a bfp8_tp_mode, or CLI_TP_REPLICATED */
} cli_dsr1_layer;
extern const cli_dsr1_layer CLI_DSR1_LAYERS[CLI_DSR1_LAYER_COUNT];


/* Subcommands: each takes argc/argv starting at its own name and returns an exit status. */
int cmd_demo(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_linear(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_shard(int argc, char **argv);
/* The grouped part of `check` (tools/check_grouped.c): every backend of d with a grouped GEMM through its strict
 * dispatcher strict[i] (same order as d) against `ref`; sets *any_fail on a failure. */
int check_grouped(bfp8_dispatcher *d, bfp8_dispatcher **strict, const char *only, uint64_t seed, bool verbose,
                  bool *any_fail);
/* `demo --moe` (tools/demo_moe.c); cmd_demo hands over when it sees --moe. */
int cmd_demo_moe(int argc, char **argv);
/* `bench --grouped` (tools/bench_grouped.c); main hands over when `bench` has --grouped. */
int cmd_bench_grouped(int argc, char **argv);
/* `bench --model dsr1` (tools/bench_model.c); cmd_bench hands over when it sees --model. */
int cmd_bench_model(int argc, char **argv);
/* `bench --tp R` (tools/bench_tp.c): DeepSeek-R1 layers tensor-parallel over R GPUs; cmd_bench hands over. */
int cmd_bench_tp(int argc, char **argv);

#endif
