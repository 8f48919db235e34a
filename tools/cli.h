/* Shared helpers of the blockfp8 CLI's subcommands (implemented in tools/cli_util.c). */
#ifndef BFP8_CLI_H
#define BFP8_CLI_H

#include "blockfp8_backend.h" /* the CLI reads backends' names and caps */
#include "common/devbuf.h"
#include "common/numerics.h" /* tests/common: the tolerance table and error metrics the tests use */
#include "common/rng.h"

#include <stdbool.h>
#include <stdint.h>

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

/* Subcommands: each takes argc/argv starting at its own name and returns an exit status. */
int cmd_demo(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_linear(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_shard(int argc, char **argv);
/* `bench --model dsr1` (tools/bench_model.c); cmd_bench hands over when it sees --model. */
int cmd_bench_model(int argc, char **argv);

#endif
