/* Shared helpers of the blockfp8 CLI's subcommands (implemented in tools/cli_util.c). */
#ifndef BFP8_CLI_H
#define BFP8_CLI_H

#include "blockfp8.h"

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

/* Seeded xorshift64* generator; cli_seed_fresh() draws a seed from /dev/urandom (never 0). */
typedef struct cli_rng { uint64_t state; } cli_rng;
uint64_t cli_seed_fresh(void);
void cli_rng_init(cli_rng *r, uint64_t seed);
uint64_t cli_rng_u64(cli_rng *r);
/* Roughly normal values (sum of four uniforms) with standard deviation about `stddev`. */
float cli_rng_normal(cli_rng *r, float stddev);
/* Fills n elements of a float-typed array (f32/bf16/f16) with rounded normal values. */
void cli_fill_normal(cli_rng *r, void *p, bfp8_dtype dtype, int64_t n, float stddev);

/* n elements of a float-typed array as fp32 (malloc'ed; NULL when out of memory or not a float dtype). */
float *cli_to_f32(const void *p, bfp8_dtype dtype, int64_t n);
/* ||y - ref|| / ||ref|| in double (0 when both are empty or zero; inf when only ref is zero). */
double cli_rel_frobenius(const float *y, const float *ref, int64_t n);
/* DeepGEMM's calc_diff: 1 - 2*sum(x*y) / sum(x*x + y*y), in double. */
double cli_calc_diff(const float *x, const float *y, int64_t n);
/* Count of NaN elements (the poison left where nothing was written). */
int64_t cli_count_nan(const float *p, int64_t n);
/* DESIGN section 3 tolerance of the relative Frobenius error vs ref for an output dtype on a device. */
double cli_tolerance(bfp8_dtype out_dtype, bfp8_device device);

/* The process-wide default dispatcher; on failure (e.g. a BFP8_BACKEND nobody knows) prints
 * "blockfp8 <cmd>: ..." to stderr and returns NULL. */
bfp8_dispatcher *cli_default_dispatcher(const char *cmd);
/* Applies --backend/--strict to a dispatcher: no name -> leave its policy (auto or BFP8_BACKEND); a name ->
 * prefer it (strict with `strict`); the dispatcher judges unknown names. */
bfp8_status cli_apply_policy(bfp8_dispatcher *d, const char *backend, bool strict);
/* The problem a host bfp8_linear call on `d` poses for an [m, k] x [n, k] GEMM: the activation-scale layouts
 * quantization can produce, the weight-scale layouts the prepared weight holds (all of them when w is NULL). */
void cli_linear_problem(bfp8_problem *p, bfp8_device device, int arch, int64_t m, int64_t n, int64_t k,
                        bfp8_dtype out_dtype, bfp8_scale_format format, const bfp8_weight *w, bool has_bias,
                        bfp8_dtype bias_dtype);

/* True (after printing "blockfp8 <cmd>: refusing to write OUT: it is the input IN") when the output path names
 * one of the inputs: the same file (stat: symlinks and hard links included), the same string, or, for an output
 * that does not exist yet, the same canonical directory and name. */
bool cli_output_is_input(const char *cmd, const char *out, const char *const *inputs, size_t count);

/* bfp8_safetensors_write with the temp file removed on SIGINT, SIGTERM, SIGHUP and SIGQUIT (a signal the process
 * ignores stays ignored); the signal then ends the process as it would have. Test hook:
 * BFP8_CLI_TEST_WRITE_DELAY_MS=N waits N ms once the temp file exists, so a test can signal it there. */
bfp8_status cli_write_safetensors(const char *path, const bfp8_tensor *tensors, size_t count);

/* The OpenBLAS baseline (tools/openblas.c), loaded with dlopen on demand: cli_openblas_load prints the reason and
 * returns CLI_FAIL when it cannot be loaded; the others need a successful load. C = A W^T in fp32 (row-major A
 * [m, k], W [n, k], C [m, n]); the core OpenBLAS chose; a pause that lets its spinning threads go idle. */
int cli_openblas_load(const char *cmd);
void cli_openblas_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, const float *w, float *c);
void cli_openblas_set_threads(int n);
const char *cli_openblas_core(void);
void cli_openblas_settle(void);

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

#endif
