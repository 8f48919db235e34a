/* Internal helpers shared by the library's C files. Not installed. */
#ifndef BFP8_INTERNAL_H
#define BFP8_INTERNAL_H

#include "blockfp8.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Sets the thread-local error message and returns `status` (so callers can `return bfp8_fail(...)`). */
bfp8_status bfp8_fail(bfp8_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define BFP8_CHECK_ARG(cond, ...)                                                                                \
    do {                                                                                                         \
        if (!(cond)) return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, __VA_ARGS__);                                  \
    } while (0)

#define BFP8_TRY(expr)                                                                                           \
    do {                                                                                                         \
        bfp8_status bfp8_try_status_ = (expr);                                                                   \
        if (bfp8_try_status_ != BFP8_OK) return bfp8_try_status_;                                                \
    } while (0)

static inline int64_t bfp8_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
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
static inline int64_t bfp8_round_up(int64_t a, int64_t b) { return bfp8_ceil_div(a, b) * b; }

/* a*b into *out; false on overflow or a negative operand. */
static inline bool bfp8_mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return false;
    return !__builtin_mul_overflow(a, b, out);
}

/* Validates a [rows, cols] shape (non-negative, rows*cols*elem_size fits in size_t and int64). */
bfp8_status bfp8_check_matrix(const char *what, int64_t rows, int64_t cols, size_t elem_size, size_t *bytes);

/* Validates a scale descriptor against the shape it must have. */
bfp8_status bfp8_check_scales(const char *what, const bfp8_scales *s, int64_t rows, int64_t kblocks);
/* Host write of one scale through any layout (the inverse of bfp8_scales_get); no argument checks. PACKED_UE8M0
 * stores bfp8_ue8m0_ceil(value), so pass exact powers of two. Padding is not touched: see bfp8_scales_clear. */
void bfp8_scales_set(bfp8_scales *s, int64_t row, int64_t kblock, float value);
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

/* Scale of one group from its amax over finite values (DESIGN section 3). */
float bfp8_group_scale(float amax, bfp8_scale_format format);

/* Decides with the dispatcher's policy and records the call (stats, fallback, BFP8_LOG=dispatch). */
bfp8_status bfp8_dispatch_record(bfp8_dispatcher *d, const bfp8_problem *p, bfp8_decision *dec);
void bfp8_dispatch_count_nonfinite(bfp8_dispatcher *d, int64_t count);
/* Validates GEMM arguments (shapes, pointers, scale descriptors, dtypes). */
bfp8_status bfp8_check_gemm_args(const bfp8_gemm_args *args);
/* Runs a validated GEMM on the decided backend; an empty output (M or N = 0) returns at once. */
bfp8_status bfp8_run_gemm(const bfp8_backend *b, const bfp8_gemm_args *args);
/* True while bfp8_linear runs a CUDA GEMM on activations that its quantization kernel, launched just before on the
 * same stream, is writing. That kernel lets its dependents launch early (griddepcontrol.launch_dependents), so a
 * backend may launch the GEMM as its programmatic dependent and load the weight before waiting for the
 * activations (hopper does). False for every other call: there the previous kernel is unknown. */
bool bfp8_act_from_prior_kernel(void);
/* Layouts a scale format can be stored in (packed only for UE8M0). */
uint32_t bfp8_layouts_for_format(bfp8_scale_format format);
/* The lowest-numbered layout of a set (sets are never empty where this is used). */
bfp8_scale_layout bfp8_first_layout(uint32_t set);
/* The layout activation scales are produced in, of those a backend takes: mn_major_aligned when offered (what the
 * GPU kernels load with TMA, and what cuda_generic needs for its wgmma kernel), else the first offered. */
bfp8_scale_layout bfp8_act_layout(uint32_t set);

/* CPU threads (src/threads.c). Runs fn(ctx, task, thread) for task in [0, ntasks) on at most max_threads threads
 * (the caller is thread 0; thread < max_threads always, so per-thread scratch can be sized by it). Which thread
 * runs which task varies: results must not depend on it. A nested or concurrent call runs serially. */
typedef void (*bfp8_task_fn)(void *ctx, int64_t task, int thread);
bfp8_status bfp8_parallel_for(int64_t ntasks, int max_threads, bfp8_task_fn fn, void *ctx);

/* Grouped GEMM (src/grouped.c). Validates the arguments' shapes, pointers and descriptors (not the contents of
 * m_indices / masked_m, which may live on the device). */
bfp8_status bfp8_check_grouped_gemm_args(const bfp8_grouped_gemm_args *args);
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
/* CUDA arch of the current device x10, or 0. */
int bfp8_cuda_current_arch(void);
/* Test hook: true runs every cuda_generic problem on its mma.sync kernel (env BFP8_CUDA_GENERIC_KERNEL=mma_sync
 * does the same), false restores the default (the wgmma kernel where it applies). No-op without CUDA. */
void bfp8_cuda_generic_force_mma_sync(bool on);
/* Stream-ordered device scratch (cudaMallocAsync), for per-call buffers such as quantized activations. */
bfp8_status bfp8_cuda_malloc_async(void **ptr, size_t bytes, void *stream);
bfp8_status bfp8_cuda_free_async(void *ptr, void *stream);

#endif
