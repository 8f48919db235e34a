/* cli_cuda_time (tools/cuda_timer.h): CUDA events around each call, with an L2 flush and a GPU spin before it; the
 * kernels are tools/cuda_timer_kernels.cu. Timing is the benchmark's business, not the library's, so this lives in
 * the CLI. Built without CUDA, it checks its arguments and says why it cannot time. */
#include "cuda_timer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef BFP8_WITH_CUDA
#include <cuda_runtime_api.h>

int cli_cuda_launch_fill(void *ptr, size_t bytes, unsigned value, void *stream);
int cli_cuda_launch_read(const void *ptr, size_t bytes, unsigned *sink, void *stream);
int cli_cuda_launch_hold(long long cycles, void *stream);
#endif

/* "cuda timer: <message>" into why; returns st. */
static bfp8_status fail(bfp8_status st, char *why, size_t why_size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static bfp8_status fail(bfp8_status st, char *why, size_t why_size, const char *fmt, ...) {
    if (why && why_size) {
        int n = snprintf(why, why_size, "cuda timer: ");
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < why_size) vsnprintf(why + n, why_size - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* The hold before each timed call, in GPU clock cycles: BFP8_CUDA_TIME_HOLD_CYCLES, or 200000 (~100 us at the
 * H200's clocks, bench/triton_baseline.py's hold); 0 holds nothing. */
static bfp8_status hold_cycles(long long *cycles, char *why, size_t why_size) {
    const char *e = getenv("BFP8_CUDA_TIME_HOLD_CYCLES");
    *cycles = 200000;
    if (!e) return BFP8_OK;
    char *end = NULL;
    const long long v = strtoll(e, &end, 10);
    if (end == e || *end != '\0' || v < 0 || v > 2000000000LL)
        return fail(BFP8_ERR_INVALID_ARGUMENT, why, why_size,
                    "BFP8_CUDA_TIME_HOLD_CYCLES='%s': need a count of clock cycles, 0 to 2000000000", e);
    *cycles = v;
    return BFP8_OK;
}

#ifdef BFP8_WITH_CUDA
static bfp8_status cuda_fail(int err, char *why, size_t why_size, const char *what) {
    return fail(BFP8_ERR_DEVICE, why, why_size, "%s: %s", what, cudaGetErrorString((cudaError_t)err));
}

/* Times fns[f](ctxs[f]) for every f, interleaved: round i times each once, starting at f = i % nfns, so that every
 * function meets the same conditions (clocks, temperature) as the others and none is always timed first or
 * last. times_us is [nfns][iters]. */
static bfp8_status time_calls(bfp8_status (*const *fns)(void *ctx), void *const *ctxs, int nfns, int warmup,
                              int iters, cli_l2_flush flush, long long hold, cudaStream_t s, double *times_us,
                              int *failed, char *why, size_t why_size) {
    int dev = 0, l2_bytes = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, dev);
    if (err != cudaSuccess) return cuda_fail(err, why, why_size, "the L2's size");
    /* Twice the L2's size, read or written, evicts whatever the previous call left there. The last word is the
     * read kernel's sink. */
    const size_t flush_bytes = flush != CLI_L2_KEEP ? 2 * (size_t)(l2_bytes > 0 ? l2_bytes : 64 << 20) : 0;
    const size_t calls = (size_t)nfns * (size_t)iters;
    void *buf = NULL;
    cudaEvent_t *ev = calloc(2 * calls, sizeof *ev);
    if (!ev) return fail(BFP8_ERR_OUT_OF_MEMORY, why, why_size, "%zu events", 2 * calls);
    bfp8_status st = BFP8_OK;
    size_t created = 0;
    if (flush_bytes) {
        err = cudaMalloc(&buf, flush_bytes + 16);
        /* Written once (untimed), so that the clean flush reads initialized memory. */
        if (err == cudaSuccess) err = (cudaError_t)cli_cuda_launch_fill(buf, flush_bytes + 16, 0x5A, s);
        if (err != cudaSuccess) {
            st = cuda_fail(err, why, why_size, "L2 flush buffer");
            goto done;
        }
    }
    for (; created < 2 * calls; created++) {
        err = cudaEventCreate(&ev[created]);
        if (err != cudaSuccess) {
            st = cuda_fail(err, why, why_size, "cudaEventCreate");
            goto done;
        }
    }
    for (int i = 0; i < warmup && st == BFP8_OK; i++)
        for (int f = 0; f < nfns && st == BFP8_OK; f++)
            if ((st = fns[f](ctxs[f])) != BFP8_OK) *failed = f;
    for (int i = 0; i < iters && st == BFP8_OK; i++) {
        for (int j = 0; j < nfns && st == BFP8_OK; j++) {
            const int f = (i + j) % nfns;
            cudaEvent_t *e = &ev[2 * ((size_t)f * (size_t)iters + (size_t)i)];
            if (flush == CLI_L2_DIRTY)
                err = (cudaError_t)cli_cuda_launch_fill(buf, flush_bytes, (unsigned)(i * nfns + j), s);
            else if (flush == CLI_L2_CLEAN)
                err = (cudaError_t)cli_cuda_launch_read(buf, flush_bytes, (unsigned *)((char *)buf + flush_bytes), s);
            /* The GPU then spins before the start event, so that the time to enqueue the call on the host can
             * never show in it (a Python launch costs tens of us; bench/triton_baseline.py holds the same way, and
             * the two are compared in one table). */
            if (err == cudaSuccess && hold) err = (cudaError_t)cli_cuda_launch_hold(hold, s);
            if (err != cudaSuccess) {
                st = cuda_fail(err, why, why_size, "L2 flush or hold");
                break;
            }
            err = cudaEventRecord(e[0], s);
            if (err == cudaSuccess && (st = fns[f](ctxs[f])) != BFP8_OK) *failed = f;
            if (err == cudaSuccess && st == BFP8_OK) err = cudaEventRecord(e[1], s);
            if (err != cudaSuccess) st = cuda_fail(err, why, why_size, "cudaEventRecord");
        }
    }
    /* fn's own failure: its status as it came, its message in why. */
    if (st != BFP8_OK && why && why_size && !why[0]) snprintf(why, why_size, "%s", bfp8_last_error());
    if (st == BFP8_OK) {
        err = cudaStreamSynchronize(s);
        if (err != cudaSuccess) st = cuda_fail(err, why, why_size, "the timed calls failed");
    }
    for (size_t c = 0; c < calls && st == BFP8_OK; c++) {
        float ms = 0;
        err = cudaEventElapsedTime(&ms, ev[2 * c], ev[2 * c + 1]);
        if (err != cudaSuccess) st = cuda_fail(err, why, why_size, "cudaEventElapsedTime");
        times_us[c] = (double)ms * 1000.0;
    }
done:
    if (st != BFP8_OK) (void)cudaStreamSynchronize(s);
    for (size_t c = 0; c < created; c++) cudaEventDestroy(ev[c]);
    free(ev);
    if (buf) cudaFree(buf);
    return st;
}
#endif

bfp8_status cli_cuda_time_interleaved(bfp8_status (*const *fns)(void *ctx), void *const *ctxs, int nfns, int warmup,
                                      int iters, cli_l2_flush flush, void *stream, double *times_us, int *failed,
                                      char *why, size_t why_size) {
    int failed_fn = -1;
    if (!failed) failed = &failed_fn;
    *failed = -1;
    if (why && why_size) why[0] = '\0';
    if (!fns || !ctxs || !times_us)
        return fail(BFP8_ERR_INVALID_ARGUMENT, why, why_size, "fns, ctxs or times_us is NULL");
    if (nfns <= 0 || warmup < 0 || iters <= 0)
        return fail(BFP8_ERR_INVALID_ARGUMENT, why, why_size,
                    "nfns=%d warmup=%d iters=%d (need nfns > 0, warmup >= 0, iters > 0)", nfns, warmup, iters);
    for (int f = 0; f < nfns; f++)
        if (!fns[f]) return fail(BFP8_ERR_INVALID_ARGUMENT, why, why_size, "fns[%d] is NULL", f);
    if (flush != CLI_L2_KEEP && flush != CLI_L2_CLEAN && flush != CLI_L2_DIRTY)
        return fail(BFP8_ERR_INVALID_ARGUMENT, why, why_size, "unknown L2 flush mode %d", (int)flush);
    long long hold = 0;
    bfp8_status st = hold_cycles(&hold, why, why_size);
    if (st != BFP8_OK) return st;
    char reason[BFP8_REASON_MAX] = "";
    if (!bfp8_cuda_available(reason, sizeof reason)) return fail(BFP8_ERR_UNSUPPORTED, why, why_size, "%s", reason);
#ifdef BFP8_WITH_CUDA
    return time_calls(fns, ctxs, nfns, warmup, iters, flush, hold, (cudaStream_t)stream, times_us, failed, why,
                      why_size);
#else
    (void)stream;
    return fail(BFP8_ERR_UNSUPPORTED, why, why_size, "built without CUDA");
#endif
}

bfp8_status cli_cuda_time(bfp8_status (*fn)(void *ctx), void *ctx, int warmup, int iters, cli_l2_flush flush,
                          void *stream, double *times_us, char *why, size_t why_size) {
    return cli_cuda_time_interleaved(&fn, &ctx, 1, warmup, iters, flush, stream, times_us, NULL, why, why_size);
}
