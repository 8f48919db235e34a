/* The `cublaslt` backend: cuBLASLt's block-scaled FP8 GEMM (CUDA 12.9+, sm_90): 1x128 activation scales
 * (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) x 128x128 weight scales (..._BLK128x128_32F), used as well as the
 * library allows, and on every problem torch's `_scaled_mm` accepts for that call and some it refuses.
 *
 * cuBLASLt is column-major and wants FP8 as "TN", so the row-major problem is posed transposed: cuBLASLt's A is
 * the weight ([N, K] row-major = K x N column-major, op T), its B the activations (K x M, op N), and its D the
 * output seen as N x M column-major, which is y [M, N] row-major. Hence the weight takes the BLK128x128 mode and
 * the activations VEC128.
 *
 * What cuBLASLt requires (measured on the H200: tests/cuda_probe.c, bench/RESULTS.md) and how each is met:
 * - VEC128 activation scales MN-major with a leading dimension of exactly cuBLASLt's n (our M), which must be a
 *   multiple of 4: otherwise the heuristic answers NOT_SUPPORTED. torch refuses such M; here, with M % 4 == 0 the
 *   scales are read in place (mn_major and mn_major_aligned are then the same bytes), and otherwise one of two
 *   ways runs, whichever moves fewer bytes (lt_split_is_cheaper):
 *   - pad: A is copied into a scratch of round_up(M, 4) rows and the output comes back through a scratch: two
 *     copies of M*K and M*N elements; cheap when the weight dominates (decode).
 *   - split: the first M - M % 4 rows and the last 4 rows (overlapping, written twice with the same values) run as
 *     two GEMMs in place, each on a copy of its columns of the scales: the scales are 1/32 of A, but the weight is
 *     read twice; cheap when the activations and the output dominate (prefill).
 * - BLK128x128 weight scales K-major with a row stride of round_up(ceil(K/128), 4) (another stride gives wrong
 *   results, not an error). torch asks its caller for that stride; bfp8's row-major layout has stride
 *   ceil(K/128), so where that is not a multiple of 4 the scales are copied per call into the padded stride
 *   (ceil(N/128) rows: a few KB).
 * - 16-byte alignment of pointers and leading dimensions: K % 16 and N % 8 (16-byte output rows) in the caps,
 *   pointers checked per call.
 *
 * Algorithms: the heuristic's first choice under a 32 MiB workspace cap (cuBLAS's size for Hopper), cached per
 * shape (M as posed, N, K, dtypes, pointer alignments) with its descriptors in a mutex-guarded LRU table. torch's
 * cap is 1 MiB: on the H200 (bench/data/side-by-side-h200-2026-12-04.csv) its choice ran 1.14-1.29x slower at M = 64 and 128 on
 * four of the eight DeepSeek-R1 shapes, and up to 9% faster in other cells, so neither cap is best everywhere.
 * BFP8_CUBLASLT_TUNE=1 instead times the heuristic's first candidates and torch's choice on the call's own
 * operands the first time a shape is seen, and keeps the fastest: a host synchronization per new shape (never
 * during graph capture), so it is opt-in. The lock is held through the enqueue because the scale and bias
 * pointers are attributes of the cached descriptor.
 *
 * Memory: one buffer of the workspace cap per (device, stream), allocated on the first call outside graph capture
 * and reused in stream order by every later call on that stream, graph captures included (as with torch's
 * workspace, a graph replayed on another stream concurrently with calls on this one would share it). The scratch
 * above comes from its start when it fits. A stream first seen during a capture, where cudaMalloc is not allowed,
 * takes workspace and scratch from the stream-ordered pool instead (captured as graph allocations), so the
 * algorithm and the results are the same as outside the capture. */
#include "cuda_glue.h"

#include <cublasLt.h>
#include "cublaslt_dl.h" /* cuBLASLt through dlopen: the names are macros */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define LT_ACT_LAYOUTS (BFP8_BIT(BFP8_LAYOUT_MN_MAJOR) | BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED))
#define LT_WEIGHT_LAYOUT BFP8_LAYOUT_ROW_MAJOR
#define LT_M_MULTIPLE 4
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
/* torch's cuBLASLt workspace cap (CUBLASLT_WORKSPACE_SIZE, default 1024 KiB): its choice is a tuning candidate. */
#define LT_TORCH_WORKSPACE_BYTES ((size_t)1 << 20)
#define LT_PIECE_ALIGN 256 /* workspace and scratch pieces */
#define LT_PLAN_CACHE 128
#define LT_MAX_DEVICES 16
#define LT_MAX_STREAM_BUFFERS 32
#define LT_TUNE_CANDIDATES 8
#define LT_TUNE_RUNS 5
/* A launch and the gap before the next one cost about what moving this many bytes does (~2 us at ~3.5 TB/s): the
 * price of split's extra GEMM in lt_split_is_cheaper. */
#define LT_LAUNCH_BYTES (7.0 * 1024 * 1024)

typedef struct lt_key {
    int device;
    int64_t rows, n, k; /* rows: the activation rows of the call, a multiple of 4 */
    int out_dtype;
    int bias_dtype; /* -1: no bias */
    unsigned align_w, align_a, align_y; /* bytes, powers of two up to 256 */
    bool tuned;
} lt_key;

typedef struct lt_plan {
    bool used;
    lt_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
    uint64_t last_use;
} lt_plan;

typedef struct lt_stream_buffer {
    int device;
    cudaStream_t stream;
    uint8_t *base; /* LT_WORKSPACE_BYTES, from cudaMalloc (256-byte aligned) */
} lt_stream_buffer;

static struct {
    pthread_mutex_t lock;
    cublasLtHandle_t handle[LT_MAX_DEVICES];
    lt_plan plans[LT_PLAN_CACHE];
    uint64_t clock;
    lt_stream_buffer buffers[LT_MAX_STREAM_BUFFERS];
    int nbuffers;
} g_lt = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* What every cuBLASLt call of one GEMM shares. */
typedef struct lt_shared {
    int device;
    cublasLtHandle_t handle;
    int64_t n, k;
    const uint8_t *w;
    const float *w_scales; /* [ceil(N/128)][round_up(kblocks, 4)] */
    const void *bias;
    int bias_dtype, out_dtype;
    cudaStream_t stream;
} lt_shared;

/* One cuBLASLt call: `rows` activation rows (a multiple of 4) with their scales [kblocks][rows], into y. */
typedef struct lt_call {
    int64_t rows;
    const uint8_t *a;
    const float *a_scales;
    void *y;
} lt_call;

static bfp8_status lt_error(cublasStatus_t s, const char *what) {
    return bfp8_fail(BFP8_ERR_DEVICE, "cublaslt: %s: %s (%s)", what, cublasLtGetStatusName(s),
                     cublasLtGetStatusString(s));
}

static cudaDataType_t lt_dtype(int dtype) {
    switch (dtype) {
    case BFP8_DTYPE_BF16: return CUDA_R_16BF;
    case BFP8_DTYPE_F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}

/* The largest power of two, up to 256, that divides the address: what the heuristic is told to assume. */
static unsigned lt_alignment(const void *p) {
    unsigned a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}

static size_t lt_piece(size_t bytes) { return (size_t)bfp8_round_up((int64_t)bytes, LT_PIECE_ALIGN); }

/* Pool memory for `bytes` whose start is LT_PIECE_ALIGN-aligned (cuBLASLt wants its workspace 256-byte aligned,
 * and plans are keyed by alignment, so pool and persistent memory must look alike); *raw is what to free. */
static bfp8_status lt_pool_alloc(size_t bytes, cudaStream_t stream, uint8_t **raw, uint8_t **aligned) {
    *raw = *aligned = NULL;
    if (!bytes) return BFP8_OK;
    BFP8_TRY(bfp8_cuda_malloc_async(bytes + LT_PIECE_ALIGN, (void **)raw, stream));
    *aligned = *raw + (LT_PIECE_ALIGN - (uintptr_t)*raw % LT_PIECE_ALIGN) % LT_PIECE_ALIGN;
    return BFP8_OK;
}

/* ---- environment ------------------------------------------------------------------------------------------- */

typedef enum lt_tail { LT_TAIL_AUTO, LT_TAIL_PAD, LT_TAIL_SPLIT } lt_tail;

/* BFP8_CUBLASLT_TUNE: unset or 0 (the heuristic's choice), 1 (timed choice). */
static bfp8_status lt_env_tune(bool *tune) {
    const char *e = getenv("BFP8_CUBLASLT_TUNE");
    *tune = e && strcmp(e, "1") == 0;
    if (e && strcmp(e, "0") != 0 && strcmp(e, "1") != 0)
        return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "BFP8_CUBLASLT_TUNE='%s': need 0 or 1", e);
    return BFP8_OK;
}

/* BFP8_CUBLASLT_TAIL: how M % 4 != 0 runs: auto (default), pad, or split (where M >= 4). For tests and A/B. */
static bfp8_status lt_env_tail(lt_tail *tail) {
    const char *e = getenv("BFP8_CUBLASLT_TAIL");
    *tail = LT_TAIL_AUTO;
    if (!e || strcmp(e, "auto") == 0) return BFP8_OK;
    if (strcmp(e, "pad") == 0) *tail = LT_TAIL_PAD;
    else if (strcmp(e, "split") == 0) *tail = LT_TAIL_SPLIT;
    else return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "BFP8_CUBLASLT_TAIL='%s': need auto, pad or split", e);
    return BFP8_OK;
}

/* pad moves A in and y out (each read and written); split reads the weight again, copies the scales and costs
 * one more launch. */
static bool lt_split_is_cheaper(int64_t m, int64_t n, int64_t k, size_t out_size) {
    if (m < LT_M_MULTIPLE) return false;
    const double kb = (double)bfp8_ceil_div(k, BFP8_BLOCK);
    const double pad = 2.0 * (double)m * ((double)k + (double)n * (double)out_size);
    const double split = (double)n * (double)k + 8.0 * kb * (double)m + LT_LAUNCH_BYTES;
    return split < pad;
}

/* ---- plans ------------------------------------------------------------------------------------------------- */

static bool key_equal(const lt_key *x, const lt_key *y) {
    return x->device == y->device && x->rows == y->rows && x->n == y->n && x->k == y->k &&
           x->out_dtype == y->out_dtype && x->bias_dtype == y->bias_dtype && x->align_w == y->align_w &&
           x->align_a == y->align_a && x->align_y == y->align_y && x->tuned == y->tuned;
}

static void plan_destroy(lt_plan *p) {
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

#define LT_TRY(call, what)                                                                                       \
    do {                                                                                                         \
        cublasStatus_t lt_s_ = (call);                                                                           \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
            st = lt_error(lt_s_, what);                                                                          \
            goto fail;                                                                                           \
        }                                                                                                        \
    } while (0)

/* Points the descriptor at this call's scales and bias, and enqueues it. */
static bfp8_status lt_enqueue(const lt_plan *p, const cublasLtMatmulAlgo_t *algo, const lt_shared *s,
                              const lt_call *c, void *ws, size_t ws_bytes) {
    const void *sa = s->w_scales, *sb = c->a_scales; /* cuBLASLt's A is our weight */
    cublasStatus_t r = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    if (r == CUBLAS_STATUS_SUCCESS)
        r = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    if (r == CUBLAS_STATUS_SUCCESS && s->bias)
        r = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s->bias, sizeof s->bias);
    const float alpha = 1.0f, beta = 0.0f;
    if (r == CUBLAS_STATUS_SUCCESS)
        r = cublasLtMatmul(s->handle, p->op, &alpha, s->w, p->a, c->a, p->b, &beta, c->y, p->d, c->y, p->d, algo, ws,
                           ws_bytes, s->stream);
    return r == CUBLAS_STATUS_SUCCESS ? BFP8_OK : lt_error(r, "cublasLtMatmul");
}

static int cmp_float(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* The fastest of the candidates on this call's operands (median of LT_TUNE_RUNS runs after one untimed run, the
 * L2 warm), into *best. A candidate that fails to launch is skipped; a failure of the device is an error. */
static bfp8_status lt_tune(const lt_plan *p, const cublasLtMatmulHeuristicResult_t *cand, int count,
                           const lt_shared *s, const lt_call *c, int *best) {
    size_t ws_bytes = 0;
    for (int i = 0; i < count; i++)
        if (cand[i].workspaceSize > ws_bytes) ws_bytes = cand[i].workspaceSize;
    uint8_t *ws_raw = NULL, *ws = NULL;
    cudaEvent_t ev[2 * LT_TUNE_RUNS];
    int created = 0;
    bfp8_status st = lt_pool_alloc(ws_bytes, s->stream, &ws_raw, &ws);
    cudaError_t err = cudaSuccess;
    for (; st == BFP8_OK && created < 2 * LT_TUNE_RUNS; created++)
        if ((err = cudaEventCreate(&ev[created])) != cudaSuccess) st = bfp8_cuda_error(err, "cublaslt: tuning events");
    float best_us = 0;
    bool have_best = false;
    *best = 0;
    for (int i = 0; i < count && st == BFP8_OK; i++) {
        if (lt_enqueue(p, &cand[i].algo, s, c, ws, ws_bytes) != BFP8_OK) continue;
        bool launched = true;
        for (int r = 0; r < LT_TUNE_RUNS && launched && err == cudaSuccess; r++) {
            err = cudaEventRecord(ev[2 * r], s->stream);
            if (err == cudaSuccess) launched = lt_enqueue(p, &cand[i].algo, s, c, ws, ws_bytes) == BFP8_OK;
            if (err == cudaSuccess && launched) err = cudaEventRecord(ev[2 * r + 1], s->stream);
        }
        if (err == cudaSuccess) err = cudaStreamSynchronize(s->stream);
        if (err != cudaSuccess) {
            st = bfp8_cuda_error(err, "cublaslt: tuning");
            break;
        }
        if (!launched) continue;
        float us[LT_TUNE_RUNS];
        for (int r = 0; r < LT_TUNE_RUNS && err == cudaSuccess; r++) {
            err = cudaEventElapsedTime(&us[r], ev[2 * r], ev[2 * r + 1]);
            us[r] *= 1000.0f;
        }
        if (err != cudaSuccess) {
            st = bfp8_cuda_error(err, "cublaslt: tuning times");
            break;
        }
        qsort(us, LT_TUNE_RUNS, sizeof us[0], cmp_float);
        if (!have_best || us[LT_TUNE_RUNS / 2] < best_us) {
            best_us = us[LT_TUNE_RUNS / 2];
            *best = i;
            have_best = true;
        }
    }
    for (int i = 0; i < created; i++) cudaEventDestroy(ev[i]);
    if (ws_raw) bfp8_cuda_free_async(ws_raw, s->stream);
    return st;
}

/* Descriptors and the algorithm for one shape. The heuristic refuses a descriptor whose scale (and bias)
 * pointers are unset (CUBLAS_STATUS_INVALID_VALUE, measured), so the first call's pointers are set here; every
 * call sets its own before the enqueue. */
static bfp8_status plan_create(lt_plan *p, const lt_shared *s, const lt_call *c) {
    bfp8_status st = BFP8_OK;
    cublasLtMatmulPreference_t pref = NULL;
    const lt_key *key = &p->key;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int32_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    int8_t fast_accum = 0; /* block scaling promotes every 128 of K; fast accumulation would skip that */
    const void *sa = s->w_scales, *sb = c->a_scales;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof fast_accum),
           "FAST_ACCUM");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof mode_a),
           "A_SCALE_MODE");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof mode_b),
           "B_SCALE_MODE");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa),
           "A_SCALE_POINTER");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb),
           "B_SCALE_POINTER");
    if (key->bias_dtype >= 0) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = lt_dtype(key->bias_dtype);
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s->bias, sizeof s->bias),
               "BIAS_POINTER");
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
               "BIAS_DATA_TYPE");
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, (uint64_t)key->k, (uint64_t)key->n, key->k), "layout A");
    LT_TRY(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, (uint64_t)key->k, (uint64_t)key->rows, key->k),
           "layout B");
    LT_TRY(cublasLtMatrixLayoutCreate(&p->d, lt_dtype(key->out_dtype), (uint64_t)key->n, (uint64_t)key->rows, key->n),
           "layout D");

    /* Candidates: the heuristic's under the 32 MiB cap (its first only, unless tuning), then torch's choice. */
    cublasLtMatmulHeuristicResult_t cand[LT_TUNE_CANDIDATES + 1];
    int count = 0;
    cublasStatus_t hs = CUBLAS_STATUS_SUCCESS;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint32_t al_w = key->align_w, al_a = key->align_a, al_y = key->align_y;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w, sizeof al_w),
           "MIN_ALIGNMENT_A");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_a, sizeof al_a),
           "MIN_ALIGNMENT_B");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_y, sizeof al_y),
           "MIN_ALIGNMENT_C");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_y, sizeof al_y),
           "MIN_ALIGNMENT_D");
    const size_t caps[2] = {LT_WORKSPACE_BYTES, LT_TORCH_WORKSPACE_BYTES};
    for (int pass = 0; pass < (key->tuned ? 2 : 1); pass++) {
        size_t cap = caps[pass];
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof cap),
               "MAX_WORKSPACE_BYTES");
        cublasLtMatmulHeuristicResult_t res[LT_TUNE_CANDIDATES];
        int want = key->tuned && pass == 0 ? LT_TUNE_CANDIDATES : 1, found = 0;
        memset(res, 0, sizeof res);
        hs = cublasLtMatmulAlgoGetHeuristic(s->handle, p->op, p->a, p->b, p->d, p->d, pref, want, res, &found);
        if (hs != CUBLAS_STATUS_SUCCESS) break;
        for (int i = 0; i < found; i++) {
            bool seen = res[i].state != CUBLAS_STATUS_SUCCESS;
            for (int j = 0; j < count && !seen; j++) seen = memcmp(&cand[j].algo, &res[i].algo, sizeof res[i].algo) == 0;
            if (!seen) cand[count++] = res[i];
        }
    }
    if (count == 0) {
        st = bfp8_fail(BFP8_ERR_DEVICE,
                       "cublaslt: no algorithm for M=%lld N=%lld K=%lld out=%s (%s) although the caps accept it",
                       (long long)key->rows, (long long)key->n, (long long)key->k,
                       bfp8_dtype_name((bfp8_dtype)key->out_dtype), cublasLtGetStatusName(hs));
        goto fail;
    }
    int best = 0;
    if (count > 1 && (st = lt_tune(p, cand, count, s, c, &best)) != BFP8_OK) goto fail;
    p->algo = cand[best].algo;
    p->workspace = cand[best].workspaceSize;
    cublasLtMatmulPreferenceDestroy(pref);
    return BFP8_OK;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    plan_destroy(p);
    return st;
}

/* The cached plan for one call (creating it, evicting the least recently used); call with the lock held. While
 * the stream is capturing, a tuned plan is used if one exists, but none is made (tuning synchronizes). */
static bfp8_status plan_get(const lt_shared *s, const lt_call *c, bool tune, bool capturing, lt_plan **out) {
    lt_key key = {.device = s->device, .rows = c->rows, .n = s->n, .k = s->k, .out_dtype = s->out_dtype,
                  .bias_dtype = s->bias ? s->bias_dtype : -1, .align_w = lt_alignment(s->w),
                  .align_a = lt_alignment(c->a), .align_y = lt_alignment(c->y), .tuned = tune};
    lt_plan *victim = &g_lt.plans[0], *untuned = NULL;
    for (int i = 0; i < LT_PLAN_CACHE; i++) {
        lt_plan *p = &g_lt.plans[i];
        if (p->used && key_equal(&p->key, &key)) {
            p->last_use = ++g_lt.clock;
            *out = p;
            return BFP8_OK;
        }
        if (tune && capturing && p->used) {
            lt_key plain = key;
            plain.tuned = false;
            if (key_equal(&p->key, &plain)) untuned = p;
        }
        if (!p->used || (victim->used && p->last_use < victim->last_use)) victim = p;
    }
    if (untuned) {
        untuned->last_use = ++g_lt.clock;
        *out = untuned;
        return BFP8_OK;
    }
    if (tune && capturing) key.tuned = false;
    if (victim->used) plan_destroy(victim);
    victim->key = key;
    BFP8_TRY(plan_create(victim, s, c));
    victim->used = true;
    victim->last_use = ++g_lt.clock;
    *out = victim;
    return BFP8_OK;
}

/* The handle of the current device (created once); call with the lock held. */
static bfp8_status lt_handle(int device, cublasLtHandle_t *out) {
    if (device < 0 || device >= LT_MAX_DEVICES)
        return bfp8_fail(BFP8_ERR_DEVICE, "cublaslt: device %d is beyond the %d this backend serves", device,
                         LT_MAX_DEVICES);
    if (!g_lt.handle[device]) {
        cublasStatus_t s = cublasLtCreate(&g_lt.handle[device]);
        if (s != CUBLAS_STATUS_SUCCESS) {
            g_lt.handle[device] = NULL;
            return lt_error(s, "cublasLtCreate");
        }
    }
    *out = g_lt.handle[device];
    return BFP8_OK;
}

/* The stream's persistent buffer (LT_WORKSPACE_BYTES), made on first use; NULL during a capture that finds none,
 * when the table is full, when the allocation fails, and for cudaStreamPerThread, which names another stream in
 * each thread (the caller then takes pool memory). Call with the lock held. The allocation runs in relaxed
 * capture mode, so that it cannot invalidate another thread's capture. As with torch's per-stream workspace, a
 * stream destroyed with work pending and a new one created at the same address would share the buffer. */
static uint8_t *stream_buffer(int device, cudaStream_t stream, bool capturing) {
    if (stream == cudaStreamPerThread) return NULL;
    for (int i = 0; i < g_lt.nbuffers; i++)
        if (g_lt.buffers[i].device == device && g_lt.buffers[i].stream == stream) return g_lt.buffers[i].base;
    if (capturing || g_lt.nbuffers == LT_MAX_STREAM_BUFFERS) return NULL;
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    void *p = NULL;
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    cudaError_t err = cudaMalloc(&p, LT_WORKSPACE_BYTES);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    g_lt.buffers[g_lt.nbuffers++] = (lt_stream_buffer){.device = device, .stream = stream, .base = (uint8_t *)p};
    return p;
}

/* ---- the GEMM ---------------------------------------------------------------------------------------------- */

/* Byte offsets of the scratch pieces one GEMM needs (SIZE_MAX: not needed). */
typedef struct lt_scratch {
    size_t w_scales;            /* weight scales in the padded stride */
    size_t a_pad, y_pad;        /* pad: A and y with round_up(M, 4) rows */
    size_t s_pad;               /* pad: activation scales with that leading dimension (mn_major input) */
    size_t s_main, s_tail;      /* split: the scale columns of the two calls */
    size_t total;
} lt_scratch;

static size_t lt_take(lt_scratch *sc, size_t bytes) {
    size_t at = sc->total;
    sc->total += lt_piece(bytes);
    return at;
}

static bfp8_status lt_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                             cudaStream_t stream, const char *what) {
    cudaError_t err = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, stream);
    return err == cudaSuccess ? BFP8_OK : bfp8_cuda_error(err, what);
}

static bfp8_status lt_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    (void)self;
    const int64_t m = args->m, n = args->n, k = args->k;
    const int64_t kb = bfp8_ceil_div(k, BFP8_BLOCK), nb = bfp8_ceil_div(n, BFP8_BLOCK);
    const int64_t kb4 = bfp8_round_up(kb, 4), mp = bfp8_round_up(m, LT_M_MULTIPLE), m4 = m - m % LT_M_MULTIPLE;
    const size_t out_size = bfp8_dtype_size(args->y_dtype);
    cudaStream_t stream = (cudaStream_t)args->stream;
    int64_t padded_elems;
    if (!bfp8_mul_ok(mp, k + n * (int64_t)out_size, &padded_elems))
        return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "cublaslt: M=%lld N=%lld K=%lld overflows the padded sizes",
                         (long long)m, (long long)n, (long long)k);
    if (((uintptr_t)args->a | (uintptr_t)args->b | (uintptr_t)args->y | (uintptr_t)args->a_scales.data |
         (uintptr_t)args->b_scales.data) % 16)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "cublaslt: A, B, Y and the scales must be 16-byte aligned");
    bool tune;
    lt_tail tail;
    BFP8_TRY(lt_env_tune(&tune));
    BFP8_TRY(lt_env_tail(&tail));
    int device = 0;
    cudaError_t cerr = cudaGetDevice(&device);
    if (cerr != cudaSuccess) return bfp8_cuda_error(cerr, "cublaslt: cudaGetDevice");
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cerr = cudaStreamIsCapturing(stream, &cap);
    if (cerr != cudaSuccess) return bfp8_cuda_error(cerr, "cublaslt: cudaStreamIsCapturing");
    const bool capturing = cap != cudaStreamCaptureStatusNone;

    /* The activation scales' leading dimension as given, and how M % 4 != 0 runs. */
    const int64_t lda_s = args->a_scales.layout == BFP8_LAYOUT_MN_MAJOR ? m : mp;
    const bool ragged = m % LT_M_MULTIPLE != 0;
    const bool split = ragged && m >= LT_M_MULTIPLE &&
                       (tail == LT_TAIL_SPLIT || (tail == LT_TAIL_AUTO && lt_split_is_cheaper(m, n, k, out_size)));
    const bool pad = ragged && !split;
    lt_scratch sc = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, 0};
    if (kb % 4) sc.w_scales = lt_take(&sc, sizeof(float) * (size_t)(nb * kb4));
    if (pad) {
        sc.a_pad = lt_take(&sc, (size_t)(mp * k));
        sc.y_pad = lt_take(&sc, (size_t)(mp * n) * out_size);
        if (lda_s != mp) sc.s_pad = lt_take(&sc, sizeof(float) * (size_t)(kb * mp));
    }
    if (split) {
        if (kb > 1) sc.s_main = lt_take(&sc, sizeof(float) * (size_t)(kb * m4));
        sc.s_tail = lt_take(&sc, sizeof(float) * (size_t)(kb * LT_M_MULTIPLE));
    }

    pthread_mutex_lock(&g_lt.lock);
    uint8_t *pool_scratch = NULL, *pool_ws = NULL; /* to free */
    lt_shared s = {.device = device, .n = n, .k = k, .w = args->b, .w_scales = args->b_scales.data,
                   .bias = args->bias, .bias_dtype = (int)args->bias_dtype, .out_dtype = (int)args->y_dtype,
                   .stream = stream};
    lt_call calls[2];
    int ncalls = 0;
    lt_plan *plans[2] = {NULL, NULL};
    bfp8_status st = lt_handle(device, &s.handle);
    uint8_t *buf = st == BFP8_OK ? stream_buffer(device, stream, capturing) : NULL, *scratch = buf;
    if (st == BFP8_OK && sc.total && (!buf || sc.total > LT_WORKSPACE_BYTES))
        st = lt_pool_alloc(sc.total, stream, &pool_scratch, &scratch);
    if (st != BFP8_OK) goto done;

    /* Copies into the scratch, enqueued before the GEMMs that read them. */
    if (sc.w_scales != SIZE_MAX) {
        s.w_scales = (const float *)(scratch + sc.w_scales);
        st = lt_copy2d(scratch + sc.w_scales, sizeof(float) * (size_t)kb4, args->b_scales.data,
                       sizeof(float) * (size_t)kb, sizeof(float) * (size_t)kb, (size_t)nb, stream,
                       "cublaslt: padding the weight scales' stride");
    }
    const uint8_t *a = args->a;
    const float *as = args->a_scales.data;
    uint8_t *y = args->y;
    if (st == BFP8_OK && pad) {
        /* The padded rows of A and of the scales hold whatever the scratch held: they only reach the padded
         * output rows, which are dropped. */
        calls[ncalls++] = (lt_call){.rows = mp, .a = scratch + sc.a_pad, .a_scales = as, .y = scratch + sc.y_pad};
        cerr = cudaMemcpyAsync(scratch + sc.a_pad, a, (size_t)(m * k), cudaMemcpyDeviceToDevice, stream);
        st = cerr == cudaSuccess ? BFP8_OK : bfp8_cuda_error(cerr, "cublaslt: padding M");
        if (st == BFP8_OK && sc.s_pad != SIZE_MAX) {
            calls[0].a_scales = (const float *)(scratch + sc.s_pad);
            st = lt_copy2d(scratch + sc.s_pad, sizeof(float) * (size_t)mp, as, sizeof(float) * (size_t)lda_s,
                           sizeof(float) * (size_t)m, (size_t)kb, stream, "cublaslt: padding the scales of M");
        }
    } else if (st == BFP8_OK && split) {
        calls[ncalls++] = (lt_call){.rows = m4, .a = a, .a_scales = as, .y = y};
        calls[ncalls++] = (lt_call){.rows = LT_M_MULTIPLE, .a = a + (m - LT_M_MULTIPLE) * k,
                                    .a_scales = (const float *)(scratch + sc.s_tail),
                                    .y = y + (size_t)((m - LT_M_MULTIPLE) * n) * out_size};
        if (sc.s_main != SIZE_MAX) {
            calls[0].a_scales = (const float *)(scratch + sc.s_main);
            st = lt_copy2d(scratch + sc.s_main, sizeof(float) * (size_t)m4, as, sizeof(float) * (size_t)lda_s,
                           sizeof(float) * (size_t)m4, (size_t)kb, stream, "cublaslt: the scales of the first rows");
        }
        if (st == BFP8_OK)
            st = lt_copy2d(scratch + sc.s_tail, sizeof(float) * LT_M_MULTIPLE, as + (m - LT_M_MULTIPLE),
                           sizeof(float) * (size_t)lda_s, sizeof(float) * LT_M_MULTIPLE, (size_t)kb, stream,
                           "cublaslt: the scales of the last rows");
    } else if (st == BFP8_OK) {
        calls[ncalls++] = (lt_call){.rows = m, .a = a, .a_scales = as, .y = y};
    }

    size_t ws_need = 0;
    for (int i = 0; i < ncalls && st == BFP8_OK; i++) {
        st = plan_get(&s, &calls[i], tune, capturing, &plans[i]);
        if (st == BFP8_OK && plans[i]->workspace > ws_need) ws_need = plans[i]->workspace;
    }
    uint8_t *ws = NULL;
    if (st == BFP8_OK && ws_need) {
        const size_t ws_at = lt_piece(sc.total);
        if (buf && scratch == buf && ws_at + ws_need <= LT_WORKSPACE_BYTES) ws = buf + ws_at;
        else if (buf && scratch != buf && ws_need <= LT_WORKSPACE_BYTES) ws = buf;
        else st = lt_pool_alloc(ws_need, stream, &pool_ws, &ws);
    }
    for (int i = 0; i < ncalls && st == BFP8_OK; i++)
        st = lt_enqueue(plans[i], &plans[i]->algo, &s, &calls[i], ws, ws_need);
    if (st == BFP8_OK && pad) {
        cerr = cudaMemcpyAsync(y, scratch + sc.y_pad, (size_t)(m * n) * out_size, cudaMemcpyDeviceToDevice, stream);
        if (cerr != cudaSuccess) st = bfp8_cuda_error(cerr, "cublaslt: copying the padded output");
    }
done:
    pthread_mutex_unlock(&g_lt.lock);
    if (pool_ws) bfp8_cuda_free_async(pool_ws, stream);
    if (pool_scratch) bfp8_cuda_free_async(pool_scratch, stream);
    return st;
}

/* Beyond the caps: the bias dtype follows the output dtype (measured: the bias epilogue exists for a bf16 bias
 * with bf16 output and an f16 bias with f16 output; what torch's _scaled_mm also requires). */
static bool lt_supports(const bfp8_backend *self, const bfp8_problem *p, char *reason, size_t reason_size) {
    (void)self;
    bfp8_dtype bias_want = p->out_dtype == BFP8_DTYPE_F16 ? BFP8_DTYPE_F16 : BFP8_DTYPE_BF16;
    if (p->has_bias && p->bias_dtype != bias_want) {
        snprintf(reason, reason_size, "a bias with %s output must be %s (cuBLASLt has no %s-bias epilogue here)",
                 bfp8_dtype_name(p->out_dtype), bfp8_dtype_name(bias_want), bfp8_dtype_name(p->bias_dtype));
        return false;
    }
    return true;
}

const bfp8_backend bfp8_backend_cublaslt = {
    .name = "cublaslt",
    .summary = "cuBLASLt block-scaled FP8 (VEC128 x BLK128x128 scales, sm_90), M % 4 and the scales' strides "
               "handled internally",
    .caps =
        {
            .device = BFP8_DEVICE_CUDA,
            .min_arch = 90,
            .max_arch = 90,
            /* fp32 output runs but misses the numerics' (docs/numerics.md) 2.5e-4 tolerance (measured 1.5e-4..3.4e-4 against the
             * reference: its FP8 accumulation inside a block is coarser than cuda_generic's 5e-8), so it is not
             * declared; bf16 (2e-3 < 8e-3) and fp16 (3-4e-4 < 1e-3) are. */
            .out_dtypes = BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16),
            .scale_formats = BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0),
            .a_layouts = LT_ACT_LAYOUTS,
            .b_layouts = BFP8_BIT(LT_WEIGHT_LAYOUT),
            .bias_dtypes = BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16),
            /* Measured on the H200: K % 16 != 0 has no algorithm (16-byte rows of A and B), nor has K < 128. */
            .min_k = 128,
            .k_multiple = 16,
            /* 16-byte rows of the bf16/f16 output. */
            .n_multiple = 8,
            .m_multiple = LT_M_MULTIPLE,
            .pads_m = true,
            /* auto ranks it by the measured table where a cell covers the problem (docs/dispatch.md, "The measured
             * ranking"), elsewhere by this: below hopper's 35, above cuda_generic's 20 (bench/RESULTS.md). */
            .priority = 30,
        },
    .supports = lt_supports,
    .gemm = lt_gemm,
    .ctx = NULL,
};
