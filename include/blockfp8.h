/*
 * blockfp8: DeepSeek-style block-scaled FP8 linear layers (W8A8).
 *
 * Activations are quantized in 1x128 groups along K, weights in 128x128 blocks; each group carries one fp32
 * or power-of-two (UE8M0) scale. The GEMM accumulates every 128-deep K block in fp32, multiplies it by the two
 * scales ("promotion") and rounds once to the output dtype. Several backends implement it; a dispatcher picks one
 * per call from capabilities declared as data and never falls back silently. Numerics: docs/numerics.md; dispatch:
 * docs/dispatch.md. Backend authors (and tests with mock backends) also include blockfp8_backend.h.
 *
 * Conventions: every function that can fail returns a bfp8_status; on failure bfp8_last_error() holds a message
 * for the calling thread. Library code never exits or aborts. Sizes are int64_t and checked for overflow.
 * Matrices are row-major and contiguous: A (activations) is [M, K], B (the weight) is [N, K], Y is [M, N].
 * Each of M, N, K is at most 2^62. Enums outside their range are refused, never read as another value.
 *
 * Names: everything is bfp8_*; indexed access is <noun>_at (bfp8_dispatcher_at, bfp8_scales_at); every CUDA
 * function is bfp8_cuda_*. Parameters: the object a function acts on first (the dispatcher, the weight, the
 * descriptor bfp8_scales_init fills), then the inputs, then the outputs (where results are returned: a new object,
 * a descriptor, a count, the quantizers' codes and scales), a buffer's size right after the buffer; a CUDA stream,
 * where there is one, comes last, as in CUDA's own calls. The copies bfp8_cuda_upload/download take the
 * destination first, as memcpy does.
 *
 * Aliasing: inputs may share memory with one another; an output may share no byte with an input or another output
 * of the same call, and a call given such pointers fails with BFP8_ERR_INVALID_ARGUMENT before it writes: the
 * quantizers' q and scales with x and with each other, dequantize's out with q and the scales, gemm's y with A, B,
 * their scales and the bias, linear's y with the bias, requantize's and scales_convert's outputs with their inputs.
 * One exception: bfp8_linear reads all of x before it writes y, so y may overlap x. Device pointers are compared
 * the same way, as address ranges.
 */
#ifndef BLOCKFP8_H
#define BLOCKFP8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared in the headers of include/ is the public API, and nothing else is exported from
 * libblockfp8.so: the library is compiled with -fvisibility=hidden, and this pragma (gcc, clang, nvcc), in each
 * public header, gives every declaration up to the matching pop default visibility, so a new function is exported
 * without further marking (tests/check-exports.sh holds the exports to the declarations). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* 0.4.0: bfp8_problem gained `card` (which GPU's measurements rank `auto`) and bfp8_cuda_card is new: rebuild
 * programs written for 0.3 (docs/api-0.4.md). 0.3.0: the backend interface moved to blockfp8_backend.h,
 * bfp8_cuda_time left the library for the CLI, names and parameter orders follow the conventions above
 * (docs/api-0.3-renames.md maps every change), and bfp8_problem, bfp8_caps and bfp8_backend gained their grouped
 * (MoE) fields. */
#define BFP8_VERSION "0.4.0"
#define BFP8_BLOCK 128 /* group width along K, and the weight block edge */

/* ---------------------------------------------------------------------------------------------------------------
 * Status and errors
 * ------------------------------------------------------------------------------------------------------------- */
typedef enum bfp8_status {
    BFP8_OK = 0,
    BFP8_ERR_INVALID_ARGUMENT, /* NULL pointer, negative or overflowing size, shape mismatch, unknown enum */
    BFP8_ERR_UNSUPPORTED,      /* no backend can run the problem, or strict policy and the named one cannot */
    BFP8_ERR_NOT_FOUND,        /* unknown backend or tensor name */
    BFP8_ERR_OUT_OF_MEMORY,
    BFP8_ERR_IO,               /* open/read/write failed */
    BFP8_ERR_FORMAT,           /* malformed file */
    BFP8_ERR_DEVICE,           /* a CUDA or cuBLASLt call failed */
} bfp8_status;

const char *bfp8_status_name(bfp8_status status);
/* The message of the last failure on this thread ("" if none). Valid until the next failing call on the thread. */
const char *bfp8_last_error(void);

/* ---------------------------------------------------------------------------------------------------------------
 * Element types and scalar conversions (docs/numerics.md)
 * ------------------------------------------------------------------------------------------------------------- */
typedef enum bfp8_dtype {
    BFP8_DTYPE_F32 = 0,
    BFP8_DTYPE_BF16,
    BFP8_DTYPE_F16,
    BFP8_DTYPE_E4M3, /* OCP e4m3fn */
    BFP8_DTYPE_I32,
    BFP8_DTYPE_UE8M0, /* 8-bit power-of-two exponents (safetensors F8_E8M0): scale tensors of checkpoints only */
    BFP8_DTYPE_COUNT
} bfp8_dtype;

const char *bfp8_dtype_name(bfp8_dtype dtype);                  /* "f32", "bf16", "f16", "e4m3", "i32", "ue8m0" */
bfp8_status bfp8_dtype_parse(const char *name, bfp8_dtype *out); /* also accepts "fp32", "fp16", "float32", ... */
size_t bfp8_dtype_size(bfp8_dtype dtype);                       /* 0 for an unknown dtype */

/* E4M3: round to nearest even; |x| beyond 448 (inf included) saturates to +-448; NaN -> 0x7F with the sign kept. */
uint8_t bfp8_e4m3_from_f32(float x);
float bfp8_e4m3_to_f32(uint8_t code);
/* UE8M0: value 2^(e-127). ceil: exponent of s, +1 if any mantissa bit is set, clamped to [1, 254]. */
uint8_t bfp8_ue8m0_ceil(float s);
float bfp8_ue8m0_to_f32(uint8_t e);
/* bf16 / fp16: round to nearest even; NaN stays NaN; fp16 overflow -> inf. */
uint16_t bfp8_bf16_from_f32(float x);
float bfp8_bf16_to_f32(uint16_t bits);
uint16_t bfp8_f16_from_f32(float x);
float bfp8_f16_to_f32(uint16_t bits);

/* ---------------------------------------------------------------------------------------------------------------
 * Scales
 *
 * A scale matrix has `rows` rows (M for activations, ceil(N/128) for weights) and `kblocks` = ceil(K/128)
 * columns. Values are the dequantization multipliers (x ~ q * s). UE8M0 scales are powers of two; in the three
 * float layouts they are stored as fp32 values, in the packed layout as 8-bit exponents, four per uint32.
 * ------------------------------------------------------------------------------------------------------------- */
typedef enum bfp8_scale_format {
    BFP8_SCALE_FP32 = 0,
    BFP8_SCALE_UE8M0,
    BFP8_SCALE_FORMAT_COUNT
} bfp8_scale_format;

typedef enum bfp8_scale_layout {
    BFP8_LAYOUT_ROW_MAJOR = 0,    /* float [rows][kblocks]: element (r, kb) at r*kblocks + kb */
    BFP8_LAYOUT_MN_MAJOR,         /* float [kblocks][rows]: (r, kb) at kb*rows + r */
    BFP8_LAYOUT_MN_MAJOR_ALIGNED, /* float [kblocks][ld], ld = rows rounded up to 4 (16 bytes): kb*ld + r */
    BFP8_LAYOUT_PACKED_UE8M0,     /* uint32 [ceil(kblocks/4)][ld], ld = rows rounded up to 4; exponent of
                                     (r, kb) in byte kb%4 (little-endian) of word (kb/4)*ld + r; UE8M0 only */
    BFP8_LAYOUT_COUNT
} bfp8_scale_layout;

const char *bfp8_scale_format_name(bfp8_scale_format format); /* "fp32", "ue8m0" */
bfp8_status bfp8_scale_format_parse(const char *name, bfp8_scale_format *out);
const char *bfp8_scale_layout_name(bfp8_scale_layout layout); /* "row_major", "mn_major", ... */

typedef struct bfp8_scales {
    bfp8_scale_format format;
    bfp8_scale_layout layout;
    int64_t rows;
    int64_t kblocks;
    void *data; /* float* for the float layouts, uint32_t* for PACKED_UE8M0; host or device memory */
} bfp8_scales;

/* Number of bytes `data` needs for that layout and shape; 0 (with an error set) when invalid or overflowing. */
size_t bfp8_scales_bytes(bfp8_scale_layout layout, int64_t rows, int64_t kblocks);
/* Fills a descriptor (data may be NULL to only validate the combination). */
bfp8_status bfp8_scales_init(bfp8_scales *s, bfp8_scale_format format, bfp8_scale_layout layout, int64_t rows,
                             int64_t kblocks, void *data);
/* Host access to one scale as fp32, whatever the layout. No argument checks: for loops over valid indices. */
float bfp8_scales_at(const bfp8_scales *s, int64_t row, int64_t kblock);
/* The BFP8_BIT(layout) set of layouts scales of `format` can be stored in: all but PACKED_UE8M0, which holds UE8M0
 * only (0 for an unknown format). */
uint32_t bfp8_scale_layouts_for(bfp8_scale_format format);
/* Converts host scales between layouts (and fp32 -> ue8m0 formats is refused: requantize the data instead).
 * dst must be initialized with the wanted layout, the same rows/kblocks, and room for its bytes. */
bfp8_status bfp8_scales_convert(const bfp8_scales *src, bfp8_scales *dst);

/* ---------------------------------------------------------------------------------------------------------------
 * Quantization (host). Non-finite inputs encode as NaN, never change a scale, and are counted in *nonfinite
 * (may be NULL). Inputs are row-major f32, bf16 or f16.
 * ------------------------------------------------------------------------------------------------------------- */
/* x [m, k] -> q [m, k] e4m3 and scales (rows = m, kblocks = ceil(k/128), any layout, format set in `scales`). */
bfp8_status bfp8_quantize_act(const void *x, bfp8_dtype x_dtype, int64_t m, int64_t k, uint8_t *q,
                              bfp8_scales *scales, int64_t *nonfinite);
/* w [n, k] -> q [n, k] e4m3 and scales (rows = ceil(n/128), kblocks = ceil(k/128)). */
bfp8_status bfp8_quantize_weight(const void *w, bfp8_dtype w_dtype, int64_t n, int64_t k, uint8_t *q,
                                 bfp8_scales *scales, int64_t *nonfinite);
/* q * s back to fp32; `block_rows` is 1 for activations and 128 for weights. */
bfp8_status bfp8_dequantize(const uint8_t *q, int64_t rows, int64_t k, const bfp8_scales *scales,
                            int64_t block_rows, float *out);
/* Re-expresses an fp32-scaled weight with UE8M0 scales: dequantize each block, take a power-of-two scale from
 * its amax, quantize again. q_out/scales_out may not alias the inputs. */
bfp8_status bfp8_requantize_weight_ue8m0(const uint8_t *q, int64_t n, int64_t k, const bfp8_scales *scales,
                                         uint8_t *q_out, bfp8_scales *scales_out);

/* ---------------------------------------------------------------------------------------------------------------
 * Devices, problems and GEMM calls
 * ------------------------------------------------------------------------------------------------------------- */
typedef enum bfp8_device {
    BFP8_DEVICE_CPU = 0,
    BFP8_DEVICE_CUDA,
    BFP8_DEVICE_COUNT
} bfp8_device;

const char *bfp8_device_name(bfp8_device device); /* "cpu", "cuda" */
bfp8_status bfp8_device_parse(const char *name, bfp8_device *out);

#define BFP8_BIT(x) (1u << (unsigned)(x))

/* Grouped (MoE) problems: how the rows of A map to the G weights (the grouped API is in blockfp8_grouped.h). */
typedef enum bfp8_grouped_layout {
    BFP8_GROUPED_NONE = 0,   /* a dense GEMM */
    BFP8_GROUPED_CONTIGUOUS, /* A [m, K] with an expert index per row (prefill) */
    BFP8_GROUPED_MASKED,     /* A [G, max_m, K] with a row count per group on the data's device (decode) */
    BFP8_GROUPED_COUNT
} bfp8_grouped_layout;

const char *bfp8_grouped_layout_name(bfp8_grouped_layout layout); /* "none", "contiguous", "masked" */
bfp8_status bfp8_grouped_layout_parse(const char *name, bfp8_grouped_layout *out);

/* Everything a dispatch decision may depend on. Nothing else. */
typedef struct bfp8_problem {
    bfp8_device device;
    int arch; /* CUDA compute capability x10 (90 = sm_90); 0 on the CPU */
    int64_t m, n, k;
    bfp8_dtype out_dtype;
    bfp8_scale_format scale_format; /* of both operands */
    uint32_t a_layouts;             /* BFP8_BIT(layout) set of activation-scale layouts on offer */
    uint32_t b_layouts;             /* ... and of weight-scale layouts on offer */
    bool has_bias;
    bfp8_dtype bias_dtype; /* ignored without bias */
    /* The activations are quantized on the device by the kernel just before the GEMM, in the same stream (a
     * bfp8_linear call on CUDA): a backend whose kernel can start before that one ends (hopper, launched as a
     * programmatic dependent) hides its launch and first weight loads behind it, which changes the ranking. */
    bool act_from_prior_kernel;
    /* Grouped problems (BFP8_GROUPED_NONE: dense, and the two fields below are ignored). m is then the rows of A
     * (contiguous: all of them, padding included; masked: max_m, the rows of one group's buffer). */
    bfp8_grouped_layout grouped;
    int64_t groups;     /* G, the number of weights */
    int64_t expected_m; /* the caller's hint of the rows per group that carry data (never a limit) */
    /* The CUDA device's name as the driver reports it ("NVIDIA H200"; bfp8_cuda_card): which card's measured cells
     * rank `auto` (docs/dispatch.md, "Which card"). NULL (and on the CPU): the reference card's. Not copied: a
     * string that outlives the call, such as bfp8_cuda_card's. */
    const char *card;
} bfp8_problem;

/* Overflow: on finite inputs a block's partial times its two scales, or the running total, can exceed fp32. The
 * `cpu` backend recomputes each output element whose fp32 result is inf or NaN exactly as `ref` does (in double),
 * so the two agree there byte for byte (e.g. 0 where +X and -X cancel, inf where the exact value exceeds the output
 * dtype). The CUDA backends stay in fp32 and write inf or NaN for such an element. */
typedef struct bfp8_gemm_args {
    int64_t m, n, k;
    const uint8_t *a;     /* [m, k] e4m3 */
    bfp8_scales a_scales; /* rows m */
    const uint8_t *b;     /* [n, k] e4m3 */
    bfp8_scales b_scales; /* rows ceil(n/128) */
    const void *bias;     /* [n] or NULL */
    bfp8_dtype bias_dtype;
    void *y; /* [m, n] */
    bfp8_dtype y_dtype;
    bfp8_device device; /* where every pointer above lives */
    void *stream;       /* cudaStream_t for CUDA, NULL = default stream; ignored on the CPU */
    /* CUDA: a and a_scales were written by the kernel launched just before this call on `stream`, and nothing else
     * the call reads was (b, b_scales, bias). A backend may then start as that kernel's programmatic dependent and
     * load the weights before it ends (hopper does); it also ranks backends differently (bfp8_problem). bfp8_linear
     * sets it for its own quantization kernel; leave it false otherwise. */
    bool act_from_prior_kernel;
} bfp8_gemm_args;

typedef struct bfp8_grouped_gemm_args bfp8_grouped_gemm_args; /* blockfp8_grouped.h */
/* A GEMM backend: its name, capabilities and hooks. The definition is in blockfp8_backend.h. */
typedef struct bfp8_backend bfp8_backend;

/* ---------------------------------------------------------------------------------------------------------------
 * Dispatch (docs/dispatch.md)
 * ------------------------------------------------------------------------------------------------------------- */
typedef enum bfp8_policy {
    BFP8_POLICY_AUTO = 0, /* best capable backend on the data's device */
    BFP8_POLICY_PREFER,   /* the named one when capable, else auto among the rest (a recorded fallback) */
    BFP8_POLICY_STRICT,   /* the named one, or BFP8_ERR_UNSUPPORTED carrying its reason */
} bfp8_policy;

#define BFP8_REASON_MAX 256

typedef struct bfp8_decision {
    const bfp8_backend *backend;   /* chosen; NULL on failure */
    const bfp8_backend *preferred; /* the one the policy named, or NULL */
    bool fallback;                 /* preferred was named but not chosen */
    char reason[BFP8_REASON_MAX];  /* why the preferred one was not chosen (or why nothing was) */
} bfp8_decision;

/* A dispatcher: a registry of backends, a policy and thread-safe statistics. Add backends before the first call;
 * after that, calls, policy changes and statistics may come from any threads at once. */
typedef struct bfp8_dispatcher bfp8_dispatcher;

/* A dispatcher holding every built-in backend available on this machine, policy from BFP8_BACKEND (prefer). */
bfp8_status bfp8_dispatcher_create_default(bfp8_dispatcher **out);
/* The process-wide default dispatcher (created on first use; thread-safe). Never free it. */
bfp8_dispatcher *bfp8_dispatcher_default(void);
void bfp8_dispatcher_free(bfp8_dispatcher *d);

bfp8_status bfp8_dispatcher_set_policy(bfp8_dispatcher *d, bfp8_policy policy, const char *backend_name);
size_t bfp8_dispatcher_count(const bfp8_dispatcher *d);
const bfp8_backend *bfp8_dispatcher_at(const bfp8_dispatcher *d, size_t index);
const bfp8_backend *bfp8_dispatcher_find(const bfp8_dispatcher *d, const char *name);
size_t bfp8_dispatcher_unavailable_count(const bfp8_dispatcher *d);
bfp8_status bfp8_dispatcher_unavailable_at(const bfp8_dispatcher *d, size_t index, const char **name,
                                           const char **why);
/* Decides with the dispatcher's policy; records nothing. */
bfp8_status bfp8_dispatcher_select(bfp8_dispatcher *d, const bfp8_problem *p, bfp8_decision *out);
/* Prints every backend with "ok" or its reason, the unavailable ones, and the choice. */
bfp8_status bfp8_dispatcher_explain(bfp8_dispatcher *d, const bfp8_problem *p, FILE *out);

/* Statistics: every call per backend, every fallback per (preferred, chosen, reason). */
typedef struct bfp8_fallback_stat {
    char preferred[64];
    char chosen[64];
    char reason[BFP8_REASON_MAX];
    uint64_t count;
} bfp8_fallback_stat;
uint64_t bfp8_dispatcher_calls(bfp8_dispatcher *d, const char *backend_name);
/* The grouped GEMM calls among them. */
uint64_t bfp8_dispatcher_grouped_calls(bfp8_dispatcher *d, const char *backend_name);
size_t bfp8_dispatcher_fallback_count(bfp8_dispatcher *d);
bfp8_status bfp8_dispatcher_fallback_at(bfp8_dispatcher *d, size_t index, bfp8_fallback_stat *out);
/* Non-finite values that entered calls, by kind, counted per call (a weight with 3 NaN codes used 10 times adds
 * 30). bfp8_linear counts x, the weight (from its counts made once at creation) and the bias; on CUDA, x and the
 * bias are counted by kernels into device counters that only reading the statistics waits for, so figures cover
 * the calls completed by then. bfp8_gemm on the CPU checks y (O(M*N)) and, if it holds inf or NaN, counts its
 * operands' (a non-finite operand always reaches y); bfp8_gemm on CUDA counts nothing. */
typedef struct bfp8_nonfinite_stats {
    uint64_t activations;     /* inf/NaN x values (linear, each encoded as NaN) or NaN A codes (gemm) */
    uint64_t act_scales;      /* inf/NaN A scales (gemm) */
    uint64_t weight_codes;    /* NaN weight codes (0x7F, 0xFF) */
    uint64_t weight_scales;   /* inf/NaN weight scales */
    uint64_t bias;            /* inf/NaN bias values */
    uint64_t uncounted_calls; /* CUDA linear calls whose x and bias could not be counted (no device counter) */
} bfp8_nonfinite_stats;
bfp8_status bfp8_dispatcher_nonfinite(bfp8_dispatcher *d, bfp8_nonfinite_stats *out);
/* The `activations` count of bfp8_dispatcher_nonfinite. */
uint64_t bfp8_dispatcher_nonfinite_inputs(bfp8_dispatcher *d);
void bfp8_dispatcher_reset_stats(bfp8_dispatcher *d);
void bfp8_dispatcher_print_stats(bfp8_dispatcher *d, FILE *out);

/* The problem a GEMM call poses (arch is read from the current CUDA device for device = cuda). */
bfp8_status bfp8_problem_from_gemm(const bfp8_gemm_args *args, bfp8_problem *out);
/* Validates, decides (recording stats and, with BFP8_LOG=dispatch, logging each distinct decision once) and runs.
 * d = NULL uses the default dispatcher. */
bfp8_status bfp8_gemm(bfp8_dispatcher *d, const bfp8_gemm_args *args);

/* ---------------------------------------------------------------------------------------------------------------
 * Prepared weights and the linear layer
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct bfp8_weight bfp8_weight;

typedef struct bfp8_weight_info {
    int64_t n, k;
    bfp8_scale_format scale_format;
    uint32_t host_layouts;   /* BFP8_BIT(layout) set of scale layouts held in host memory */
    uint32_t device_layouts; /* ... held in CUDA device memory (with the fp8 data) */
    int64_t nonfinite_codes;  /* NaN codes in q, counted once when the weight is made */
    int64_t nonfinite_scales; /* inf/NaN scales (fp32 format; UE8M0 scales are validated) */
} bfp8_weight_info;

/* Copies q [n, k] and its scales (any layout) into a new weight held in host memory. Scales declared UE8M0 must
 * be exact powers of two in [2^-126, 2^127] (an error names the first that is not). */
bfp8_status bfp8_weight_create(const uint8_t *q, int64_t n, int64_t k, const bfp8_scales *scales,
                               bfp8_weight **out);
/* Quantizes w [n, k] (f32, bf16 or f16) into a new weight; non-finite inputs are counted as by
 * bfp8_quantize_weight. */
bfp8_status bfp8_weight_quantize(const void *w, bfp8_dtype w_dtype, int64_t n, int64_t k, bfp8_scale_format format,
                                 bfp8_weight **out, int64_t *nonfinite);
/* Makes what the named backend consumes (scale layouts; device residency for CUDA backends) and keeps
 * everything already held, so that a fallback still finds its form. NULL backend_name prepares for every
 * backend of the dispatcher. */
bfp8_status bfp8_weight_prepare(bfp8_weight *w, bfp8_dispatcher *d, const char *backend_name);
bfp8_status bfp8_weight_info_get(const bfp8_weight *w, bfp8_weight_info *out);
/* Borrowed views: fp8 data and the scales in `layout`, on `device` (BFP8_ERR_NOT_FOUND if not held). */
bfp8_status bfp8_weight_view(const bfp8_weight *w, bfp8_device device, bfp8_scale_layout layout,
                             const uint8_t **q, bfp8_scales *scales);
void bfp8_weight_free(bfp8_weight *w);

typedef struct bfp8_linear_args {
    const void *x; /* [m, k] */
    bfp8_dtype x_dtype;
    int64_t m;
    const void *bias; /* [n] or NULL */
    bfp8_dtype bias_dtype;
    void *y; /* [m, n] */
    bfp8_dtype y_dtype;
    bfp8_device device; /* where x, bias and y live */
    void *stream;
} bfp8_linear_args;

/* The problem a linear call poses: activations are quantized in the call, so every layout of the weight's scale
 * format is on offer for them (and on CUDA they come from the kernel before the GEMM: act_from_prior_kernel); the
 * weight offers the layouts it holds on args->device. Validates args as bfp8_linear does. */
bfp8_status bfp8_problem_from_linear(const bfp8_weight *w, const bfp8_linear_args *args, bfp8_problem *out);
/* The same rule for a layer described rather than held (no data: what `blockfp8 explain` poses): a weight of
 * w->n x w->k with w->scale_format scales in the layouts w->host_layouts or w->device_layouts (by `device`), m
 * tokens, output y_dtype, a bias of bias_dtype when has_bias. The arch is the current CUDA device's on cuda. */
bfp8_status bfp8_problem_for_linear(const bfp8_weight_info *w, bfp8_device device, int64_t m, bfp8_dtype y_dtype,
                                    bool has_bias, bfp8_dtype bias_dtype, bfp8_problem *out);
/* y = dequant(quant(x)) @ dequant(w)^T + bias: x quantized in 1x128 groups with the weight's scale format, the
 * GEMM through the dispatcher (d = NULL: default). The equivalent of SGLang's apply_w8a8_block_fp8_linear. */
bfp8_status bfp8_linear(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_linear_args *args);

/* ---------------------------------------------------------------------------------------------------------------
 * safetensors
 * ------------------------------------------------------------------------------------------------------------- */
#define BFP8_MAX_DIMS 8

typedef struct bfp8_tensor {
    char *name;
    bfp8_dtype dtype;
    int ndim;
    int64_t shape[BFP8_MAX_DIMS];
    void *data; /* owned by the file (reader) or borrowed (writer) */
    size_t nbytes;
} bfp8_tensor;

typedef struct bfp8_safetensors bfp8_safetensors;

/* Opens and validates a file: header, dtypes, shapes, byte counts and offsets, which must cover the data section
 * exactly (as the Hugging Face reader requires). Malformed -> FORMAT. The file is mapped read-only, not copied:
 * tensor data of an opened file must not be written to. */
bfp8_status bfp8_safetensors_open(const char *path, bfp8_safetensors **out);
/* The same from memory (copied); what the fuzzer drives. */
bfp8_status bfp8_safetensors_parse(const void *bytes, size_t size, bfp8_safetensors **out);
size_t bfp8_safetensors_count(const bfp8_safetensors *f);
const bfp8_tensor *bfp8_safetensors_at(const bfp8_safetensors *f, size_t index);
const bfp8_tensor *bfp8_safetensors_find(const bfp8_safetensors *f, const char *name);
void bfp8_safetensors_close(bfp8_safetensors *f);

/* Writes tensors (data borrowed from the array) to `path` atomically: a temp file with a short name in the same
 * directory, renamed over `path` at the end and removed on every failure. A file being replaced keeps its mode
 * bits, and one the caller may not write (read-only) is not replaced; a symlink at `path` is followed, so the file
 * it names is replaced and the link stays. */
bfp8_status bfp8_safetensors_write(const char *path, const bfp8_tensor *tensors, size_t count);

typedef struct bfp8_write_options {
    /* Called with the temp file's path just before it is created (exclusively) and again just after, and with
     * NULL once it has been renamed or removed, or could not be created: a program that removes it from a signal
     * handler (SIGINT, SIGTERM) keeps a copy of the path, and never misses a temp file that exists. May be NULL. */
    void (*on_temp)(const char *temp_path, void *ctx);
    void *ctx;
} bfp8_write_options;
/* bfp8_safetensors_write with options (NULL: none). */
bfp8_status bfp8_safetensors_write_ex(const char *path, const bfp8_tensor *tensors, size_t count,
                                      const bfp8_write_options *options);

/* A checkpoint of one or several safetensors files (src/checkpoint.c). `path` is a .safetensors file, a
 * Hugging Face index (NAME.index.json: {"weight_map": {tensor: shard file}}, shards relative to its directory), or a
 * directory holding model.safetensors.index.json or model.safetensors. Shards are opened (mapped) when a tensor in
 * them is first looked up. Thread-safe. */
typedef struct bfp8_checkpoint bfp8_checkpoint;
bfp8_status bfp8_checkpoint_open(const char *path, bfp8_checkpoint **out);
/* The tensor `name` (borrowed until close); NOT_FOUND when the checkpoint has none, FORMAT or IO when its shard
 * cannot be read, lacks the tensor the index puts there, or holds a tensor the index puts in another shard. */
bfp8_status bfp8_checkpoint_find(bfp8_checkpoint *c, const char *name, const bfp8_tensor **out);
/* Every file the checkpoint is made of: the index first (when there is one), then each shard, as paths. */
size_t bfp8_checkpoint_file_count(const bfp8_checkpoint *c);
const char *bfp8_checkpoint_file_path(const bfp8_checkpoint *c, size_t index);
/* Number of tensor names the checkpoint holds (the index's weight_map, or the single file's tensors). */
size_t bfp8_checkpoint_tensor_count(const bfp8_checkpoint *c);
void bfp8_checkpoint_close(bfp8_checkpoint *c);

/* How bfp8_weight_load_ex reads NAME_scale_inv. Zero-initialized (or NULL): auto. */
typedef struct bfp8_weight_load_options {
    /* false (auto): F8_E8M0 scales are UE8M0, F32 scales are fp32 (never guessed from the values).
     * true: the scales are `scale_format`. Declared UE8M0, F32 scales must each be a power of two in
     * [2^-126, 2^127] (else FORMAT, naming the first that is not); declared fp32, F8_E8M0 scales are read as the
     * fp32 values they stand for. Either way the weight, and so the activations of a linear call, use that format. */
    bool declare_format;
    bfp8_scale_format scale_format;
} bfp8_weight_load_options;

/* Loads DeepSeek naming: NAME (F8_E4M3 [N,K]) + NAME_scale_inv (F32 or F8_E8M0 [ceil(N/128), ceil(K/128)]). */
bfp8_status bfp8_weight_load(const bfp8_safetensors *f, const char *name, bfp8_weight **out);
bfp8_status bfp8_weight_load_ex(const bfp8_safetensors *f, const char *name, const bfp8_weight_load_options *options,
                                bfp8_weight **out);
/* The same from a checkpoint (NAME and NAME_scale_inv may sit in different shards). */
bfp8_status bfp8_checkpoint_weight_load(bfp8_checkpoint *c, const char *name, const bfp8_weight_load_options *options,
                                        bfp8_weight **out);

/* ---------------------------------------------------------------------------------------------------------------
 * CUDA device memory and GPU quantization. Without CUDA (not built, or no device) these return
 * BFP8_ERR_UNSUPPORTED with the reason; bfp8_cuda_available() says which.
 * ------------------------------------------------------------------------------------------------------------- */
bool bfp8_cuda_available(char *why, size_t why_size);
/* The current CUDA device's compute capability x10 (90 = sm_90); 0 without CUDA or a device. */
int bfp8_cuda_arch(void);
/* The current CUDA device's name as the driver reports it ("NVIDIA H100 80GB HBM3"), valid for the process's
 * life; NULL without CUDA or a device. */
const char *bfp8_cuda_card(void);
bfp8_status bfp8_cuda_malloc(size_t bytes, void **ptr);
bfp8_status bfp8_cuda_free(void *ptr);
bfp8_status bfp8_cuda_upload(void *device_dst, const void *host_src, size_t bytes);
bfp8_status bfp8_cuda_download(void *host_dst, const void *device_src, size_t bytes);
bfp8_status bfp8_cuda_synchronize(void *stream);
/* Same contract and bytes as bfp8_quantize_act, with x, q and scales->data in device memory. nonfinite, if not
 * NULL, is a device int64 that the kernel adds the count of non-finite inputs to. */
bfp8_status bfp8_cuda_quantize_act(const void *x, bfp8_dtype x_dtype, int64_t m, int64_t k, uint8_t *q,
                                   bfp8_scales *scales, int64_t *nonfinite, void *stream);

/* ---------------------------------------------------------------------------------------------------------------
 * CPU threads (the `cpu` backend and the vectorized quantizers)
 * ------------------------------------------------------------------------------------------------------------- */
/* n <= 0 restores the default: BFP8_NUM_THREADS, else the number of online cores. With n <= 0, a BFP8_NUM_THREADS
 * that is not an integer in [1, 256] is INVALID_ARGUMENT (the default then is the number of online cores). */
bfp8_status bfp8_set_num_threads(int n);
int bfp8_get_num_threads(void);

/* Checks the environment variables the library reads for a value it would ignore: BFP8_NUM_THREADS (an integer in
 * [1, 256]), BFP8_CPU_ISA (auto, portable or avx2), BFP8_LOG (a comma-separated list of dispatch, hopper) and the
 * hopper backend's BFP8_HOPPER_* knobs (docs/hopper-knobs.md). Where a value is bad, the library uses its default and
 * stays silent; this call says so: INVALID_ARGUMENT with the variable, its value and what it takes. */
bfp8_status bfp8_check_env(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* BLOCKFP8_H */
