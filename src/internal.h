/* Internal helpers shared by the library's C files. Not installed. */
#ifndef BFP8_INTERNAL_H
#define BFP8_INTERNAL_H

#include "blockfp8.h"
#include "blockfp8_backend.h"
#include "blockfp8_grouped.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Sets the thread-local error message, control characters escaped as \xNN, and returns `status` (so callers can
 * `return bfp8_fail(...)`). */
bfp8_status bfp8_fail(bfp8_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Size of the thread-local error message, room for two paths of PATH_MAX and the reason. */
#define BFP8_ERROR_MAX (2 * 4096 + 512)
/* A C0 control character or DEL: what a message or a tensor name must not carry to a terminal. */
static inline bool bfp8_is_control_byte(unsigned char c) { return c < 0x20 || c == 0x7f; }
/* src with every control byte written as \xNN, cut to fit dst (always terminated). */
void bfp8_escape_controls(const char *src, char *dst, size_t dst_size);

#define BFP8_CHECK_ARG(cond, ...)                                                                                \
    do {                                                                                                         \
        if (!(cond)) return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, __VA_ARGS__);                                  \
    } while (0)

#define BFP8_TRY(expr)                                                                                           \
    do {                                                                                                         \
        bfp8_status bfp8_try_status_ = (expr);                                                                   \
        if (bfp8_try_status_ != BFP8_OK) return bfp8_try_status_;                                                \
    } while (0)

/* ceil(a / b) for b > 0 and any a, without the overflow of (a + b - 1) / b near INT64_MAX. */
static inline int64_t bfp8_ceil_div(int64_t a, int64_t b) { return a / b + (a % b > 0); }
/* The bits of an fp32 and back (memcpy: no aliasing questions). */
static inline uint32_t bfp8_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float bfp8_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
/* a rounded up to a multiple of b (b > 0); -1 when that overflows, which every later size check refuses. Sizes
 * that passed bfp8_check_dims never overflow here. */
static inline int64_t bfp8_round_up(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(bfp8_ceil_div(a, b), b, &r) ? -1 : r;
}

/* a*b into *out; false on overflow or a negative operand. */
static inline bool bfp8_mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return false;
    return !__builtin_mul_overflow(a, b, out);
}

/* Largest M, N or K (and row count) the library accepts: far beyond any buffer, and small enough that the block
 * counts, the paddings to multiples of 128 and the ceil divisions of every layout cannot overflow. */
#define BFP8_DIM_MAX (INT64_C(1) << 62)
/* Each dimension in [0, BFP8_DIM_MAX]; the error names `what` and the shape. */
bfp8_status bfp8_check_dims(const char *what, int64_t rows, int64_t cols);

/* Whether the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte (empty ranges never do). Host or
 * device addresses alike: only the numbers are compared. */
static inline bool bfp8_ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return a && b && a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

/* An operand's bytes, named for the error message. */
typedef struct bfp8_byte_range {
    const char *name;
    const void *p;
    size_t bytes;
} bfp8_byte_range;
/* An output written while its operands are still being read may share no byte with any of them:
 * INVALID_ARGUMENT "<call>: y overlaps <name>" for the first that it does. */
bfp8_status bfp8_check_output_apart(const char *call, const void *y, size_t y_bytes, const bfp8_byte_range *in,
                                    size_t count);

/* Validates a [rows, cols] shape (non-negative, rows*cols*elem_size fits in size_t and int64). */
bfp8_status bfp8_check_matrix(const char *what, int64_t rows, int64_t cols, size_t elem_size, size_t *bytes);

/* Validates a scale descriptor against the shape it must have. */
bfp8_status bfp8_check_scales(const char *what, const bfp8_scales *s, int64_t rows, int64_t kblocks);
/* Host write of one scale through any layout (the inverse of bfp8_scales_at); no argument checks. PACKED_UE8M0
 * stores bfp8_ue8m0_ceil(value), so pass exact powers of two. Padding is not touched: see bfp8_scales_clear. */
void bfp8_scales_set_at(bfp8_scales *s, int64_t row, int64_t kblock, float value);
/* Zeroes the whole host buffer of a valid descriptor (padding words/bytes must be zero). */
void bfp8_scales_clear(bfp8_scales *s);

/* One element of a float-typed (f32/bf16/f16) array as fp32. */
static inline float bfp8_load_f32(const void *p, bfp8_dtype dt, int64_t i) {
    switch (dt) {
    case BFP8_DTYPE_BF16: return bfp8_bf16_to_f32(((const uint16_t *)p)[i]);
    case BFP8_DTYPE_F16: return bfp8_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Rounds once (RNE) and stores into a float-typed array. */
static inline void bfp8_store_f32(void *p, bfp8_dtype dt, int64_t i, float v) {
    switch (dt) {
    case BFP8_DTYPE_BF16: ((uint16_t *)p)[i] = bfp8_bf16_from_f32(v); break;
    case BFP8_DTYPE_F16: ((uint16_t *)p)[i] = bfp8_f16_from_f32(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

static inline bool bfp8_is_float_dtype(bfp8_dtype dt) {
    return dt == BFP8_DTYPE_F32 || dt == BFP8_DTYPE_BF16 || dt == BFP8_DTYPE_F16;
}

/* Rounds a double once to the output dtype (the reference's single rounding). */
void bfp8_store_f64(void *p, bfp8_dtype dt, int64_t i, double v);

/* Scale of one group from its amax over finite values (docs/numerics.md). */
float bfp8_group_scale(float amax, bfp8_scale_format format);

/* Host scans for the non-finite statistics: NaN E4M3 codes (0x7F, 0xFF) among `count` codes; inf and NaN among
 * `count` f32/bf16/f16 values; inf and NaN among a host scale matrix's values. */
int64_t bfp8_count_nan_codes(const uint8_t *q, int64_t count);
int64_t bfp8_count_nonfinite_values(const void *p, bfp8_dtype dt, int64_t count);
int64_t bfp8_count_nonfinite_scales(const bfp8_scales *s);
/* Refuses host scales declared UE8M0 whose values are not exact powers of two in [2^-126, 2^127] (biased exponents
 * 1..254, every value bfp8_ue8m0_ceil gives and the packed layout holds), naming the first. fp32 scales pass. */
bfp8_status bfp8_check_ue8m0_scales(const char *what, const bfp8_scales *s);

/* Decides with the dispatcher's policy and records the call (stats, fallback, BFP8_LOG=dispatch). */
bfp8_status bfp8_dispatch_record(bfp8_dispatcher *d, const bfp8_problem *p, bfp8_decision *dec);
/* Adds to the non-finite statistics (takes the lock only when a count is non-zero). */
void bfp8_dispatch_count(bfp8_dispatcher *d, const bfp8_nonfinite_stats *add);
/* The dispatcher's counters on the current CUDA device, two device int64s: [0] activations, [1] bias. Kernels add
 * to them on the stream; the host reads them only when the statistics are read, so a call never waits for the
 * GPU. Allocated on first use; NULL when that is impossible without disturbing the caller (a graph capture in
 * progress, no memory), and the call is then recorded as uncounted. */
int64_t *bfp8_dispatch_cuda_counters(bfp8_dispatcher *d, void *stream);
/* The reference's value of y[m, n] before its one rounding: block partials and promotion in double, the bias
 * added (docs/numerics.md). Shared by `ref` and the `cpu` backend's overflow path, so both give the same bytes. */
double bfp8_ref_element(const bfp8_gemm_args *a, int64_t m, int64_t n);
/* The problem of a GEMM on these operands (dense; the caller adds act_from_prior_kernel or the grouped fields):
 * what bfp8_problem_from_gemm and bfp8_problem_from_grouped_gemm share. */
bfp8_problem bfp8_problem_of_operands(bfp8_device device, int64_t m, int64_t n, int64_t k, bfp8_dtype y_dtype,
                                      const bfp8_scales *a_scales, const bfp8_scales *b_scales, bool has_bias,
                                      bfp8_dtype bias_dtype);
/* Validates GEMM arguments (shapes, pointers, scale descriptors, dtypes, y overlapping an operand). */
bfp8_status bfp8_check_gemm_args(const bfp8_gemm_args *args);
/* Runs a validated GEMM on the decided backend; an empty output (M or N = 0) returns at once. */
bfp8_status bfp8_run_gemm(const bfp8_backend *b, const bfp8_gemm_args *args);
/* The rules of bfp8_backend_layouts, over one non-empty set: the lowest-numbered layout (weights), and for
 * activations mn_major_aligned when the set has it, else the lowest-numbered. */
bfp8_scale_layout bfp8_first_layout(uint32_t set);
bfp8_scale_layout bfp8_act_layout(uint32_t set);

/* CPU threads (src/threads.c). Runs fn(ctx, task, thread) for task in [0, ntasks) on at most max_threads threads
 * (the caller is thread 0; thread < max_threads always, so per-thread scratch can be sized by it). Which thread
 * runs which task varies: results must not depend on it. A nested or concurrent call runs serially. */
typedef void (*bfp8_task_fn)(void *ctx, int64_t task, int thread);
bfp8_status bfp8_parallel_for(int64_t ntasks, int max_threads, bfp8_task_fn fn, void *ctx);
/* BFP8_NUM_THREADS: INVALID_ARGUMENT where it is set to anything but an integer in [1, 256] (bfp8_check_env). */
bfp8_status bfp8_threads_check_env(void);

/* Whether BFP8_LOG's value (a comma-separated list of topics: dispatch, hopper; NULL when unset) names `topic`. */
bool bfp8_log_has_topic(const char *value, const char *topic);

/* Parses JSON text that must be an object, as strictly as a safetensors header (src/safetensors.c): UTF-8 without
 * raw control characters or a byte order mark, starting with '{', nesting at most 128 deep, no escaped NUL, no key
 * twice in any object, nothing but whitespace after it. FORMAT messages start with `what`. *out: cJSON_Delete it. */
struct cJSON;
bfp8_status bfp8_json_parse_object(const char *text, size_t len, const char *what, struct cJSON **out);
/* " (a symbolic link whose target is missing)" when `path` is one, else "" (src/safetensors.c): for messages about
 * a file that cannot be opened, since a Hugging Face snapshot copied without following links keeps links to
 * ../../blobs that lead nowhere, and "No such file" alone reads as a wrong path. */
const char *bfp8_dangling_link_hint(const char *path);
/* Grouped GEMM (src/grouped.c). Validates the arguments' shapes, pointers and descriptors (not the contents of
 * m_indices / masked_m, which may live on the device). */
bfp8_status bfp8_check_grouped_gemm_args(const bfp8_grouped_gemm_args *args);
/* As bfp8_problem_from_grouped_gemm for args whose A, B and scale pointers are stand-ins of the right sizes (grouped
 * linear validates its call before the real ones exist): only the caller's buffers are checked apart from y. */
bfp8_status bfp8_problem_from_grouped_stand_ins(const bfp8_grouped_gemm_args *args, bfp8_problem *out);
/* The contents on host data: every m_indices value in [-1, G), every masked_m value in [0, max_m]. */
bfp8_status bfp8_grouped_check_host_contents(const bfp8_grouped_gemm_args *args);
/* Runs a validated grouped GEMM on host data as one dense call of `dense` per non-empty group, on exactly that
 * group's rows in row order (gathered when they are not one run), so each group's bytes are the dense call's.
 * Groups run on parallel threads (each dense call then on one) when a group's work is below
 * `parallel_group_work` multiply-adds on average; otherwise one after the other, each dense call threaded. */
bfp8_status bfp8_grouped_run_dense(const bfp8_backend *dense, const bfp8_grouped_gemm_args *args,
                                   double parallel_group_work);
/* Byte offset of group g's matrix in a descriptor that describes one of G back to back. */
size_t bfp8_grouped_scale_stride(const bfp8_scales *s);

/* Built-in backends. Each file defines one; CUDA ones register themselves only when a device exists. */
extern const bfp8_backend bfp8_backend_ref;
extern const bfp8_backend bfp8_backend_cpu;
/* Adds the CUDA backends (or records why they are unavailable). Defined in the CUDA glue or its stub. */
bfp8_status bfp8_cuda_register_backends(bfp8_dispatcher *d);
/* The current CUDA device's ordinal, or -1 (no CUDA). */
int bfp8_cuda_current_device(void);
/* bfp8_cuda_arch and bfp8_cuda_card in one look at the current device (what a CUDA problem records). */
void bfp8_cuda_identity(int *arch, const char **card);
/* Whether `stream` is capturing a CUDA graph (where allocations and synchronous copies are not allowed). */
bool bfp8_cuda_stream_capturing(void *stream);
/* Adds the number of inf and NaN among x[0..n) (f32/bf16/f16, device memory) to the device int64 `counter`, by a
 * kernel on `stream`; nothing waits for it. */
bfp8_status bfp8_cuda_count_nonfinite(const void *x, bfp8_dtype dtype, int64_t n, int64_t *counter, void *stream);
/* Stream-ordered device scratch (cudaMallocAsync), for per-call buffers such as quantized activations. */
bfp8_status bfp8_cuda_malloc_async(size_t bytes, void **ptr, void *stream);
bfp8_status bfp8_cuda_free_async(void *ptr, void *stream);

/* The validated parts of a DeepSeek-format weight (NAME, NAME_scale_inv; checkpoint.c): q [n, k] borrowed from the
 * file and a row-major scale descriptor over fp32 values, the file's or, for F8_E8M0 scales, converted into *owned
 * (the caller frees it; NULL otherwise). What every weight loader reads through, the shard loader included. */
bfp8_status bfp8_weight_parts(const char *name, const bfp8_tensor *q, const char *scale_name, const bfp8_tensor *s,
                              const bfp8_weight_load_options *options, int64_t *n, int64_t *k, bfp8_scales *scales,
                              float **owned);
bfp8_status bfp8_weight_tensors(const bfp8_safetensors *f, const char *name, const bfp8_weight_load_options *options,
                               const uint8_t **q, int64_t *n, int64_t *k, bfp8_scales *scales, float **owned);

#endif
