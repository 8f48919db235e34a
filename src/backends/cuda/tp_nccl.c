/* Tensor parallelism on CUDA: the stream-ordered copies of src/tp.c and bfp8_tp_linear, which runs the rank's
 * GEMM through the dispatcher and then the NCCL collective on the same stream. NCCL is loaded with dlopen at the
 * first call, so the library neither links nor needs it until a tensor-parallel layer runs. */
#include "cuda_glue.h"
#include "tp_internal.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#if __has_include(<nccl.h>)
#include <nccl.h>
#define BFP8_NCCL_HEADER 1
#endif

bfp8_status bfp8_cuda_tp_memset(void *dst, size_t bytes, void *stream) {
    cudaError_t err = cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)stream);
    return err == cudaSuccess ? BFP8_OK : bfp8_cuda_error(err, "tensor parallel: cudaMemsetAsync");
}

bfp8_status bfp8_cuda_tp_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                                 size_t height, void *stream) {
    if (!width || !height) return BFP8_OK;
    cudaError_t err = cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDeviceToDevice,
                                        (cudaStream_t)stream);
    return err == cudaSuccess ? BFP8_OK : bfp8_cuda_error(err, "tensor parallel: cudaMemcpy2DAsync");
}

#ifndef BFP8_NCCL_HEADER
bfp8_status bfp8_tp_linear(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_shard *shard,
                           const bfp8_linear_args *args, void *nccl_comm) {
    (void)d, (void)w, (void)shard, (void)args, (void)nccl_comm;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "tp_linear: built without nccl.h (NCCL's header, part of the CUDA toolkit)");
}
#else

static struct {
    pthread_once_t once;
    char why[BFP8_REASON_MAX];
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*count)(const ncclComm_t, int *);
    ncclResult_t (*user_rank)(const ncclComm_t, int *);
    const char *(*error_string)(ncclResult_t);
} g_nccl = {.once = PTHREAD_ONCE_INIT};

static void nccl_load(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_nccl.why, sizeof g_nccl.why, "NCCL not found: dlopen(libnccl.so.2): %s", dlerror());
        return;
    }
    *(void **)&g_nccl.all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&g_nccl.all_gather = dlsym(h, "ncclAllGather");
    *(void **)&g_nccl.count = dlsym(h, "ncclCommCount");
    *(void **)&g_nccl.user_rank = dlsym(h, "ncclCommUserRank");
    *(void **)&g_nccl.error_string = dlsym(h, "ncclGetErrorString");
    if (!g_nccl.all_reduce || !g_nccl.all_gather || !g_nccl.count || !g_nccl.user_rank || !g_nccl.error_string) {
        snprintf(g_nccl.why, sizeof g_nccl.why, "NCCL found but incomplete: a symbol is missing");
        g_nccl.all_reduce = NULL;
    }
}

static bfp8_status nccl_error(ncclResult_t r, const char *what) {
    return bfp8_fail(BFP8_ERR_DEVICE, "tp_linear: %s: %s", what, g_nccl.error_string(r));
}

static bool nccl_dtype(bfp8_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case BFP8_DTYPE_F32: *out = ncclFloat32; return true;
    case BFP8_DTYPE_F16: *out = ncclFloat16; return true;
    case BFP8_DTYPE_BF16: *out = ncclBfloat16; return true;
    default: return false;
    }
}

/* column: each rank writes its y_local into its section of a [ranks][section] buffer (bfp8_tp_traffic_get: m rows
 * of the widest local output, so that every rank sends the same count), the all-gather fills every section, and
 * each section's slice is copied (2-D, past its lead) into y. */
static bfp8_status tp_column(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_shard *s,
                             const bfp8_linear_args *a, ncclComm_t comm) {
    ncclDataType_t dt;
    if (!nccl_dtype(a->y_dtype, &dt)) return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "tp_linear: output dtype %s", bfp8_dtype_name(a->y_dtype));
    size_t es = bfp8_dtype_size(a->y_dtype);
    int64_t slice = s->end - s->begin;
    bfp8_tp_traffic t;
    BFP8_TRY(bfp8_tp_traffic_get(s, a->m, a->y_dtype, &t));
    size_t section = (size_t)t.count;
    void *gathered = NULL;
    BFP8_TRY(bfp8_cuda_malloc_async(section * (size_t)s->ranks * es, &gathered, a->stream));
    bfp8_linear_args local = *a;
    local.y = (char *)gathered + section * (size_t)s->rank * es;
    bfp8_status st = bfp8_tp_linear_local(d, w, s, &local);
    if (st == BFP8_OK) {
        ncclResult_t r = g_nccl.all_gather(local.y, gathered, section, dt, comm, (cudaStream_t)a->stream);
        if (r != ncclSuccess) st = nccl_error(r, "ncclAllGather");
    }
    for (int rank = 0; rank < s->ranks && st == BFP8_OK; rank++) {
        int64_t begin = rank * slice, lead = begin % BFP8_BLOCK; /* that rank's lead: 0 unless blocks are shared */
        const char *src = (const char *)gathered + (section * (size_t)rank + (size_t)lead) * es;
        st = bfp8_cuda_tp_copy_2d((char *)a->y + (size_t)begin * es, (size_t)s->n * es, src,
                                  (size_t)(lead + slice) * es, (size_t)slice * es, (size_t)a->m, a->stream);
    }
    bfp8_status fst = bfp8_cuda_free_async(gathered, a->stream);
    return st != BFP8_OK ? st : fst;
}

/* row: the fp32 partials (bias on rank 0) summed in place by the all-reduce, then rounded once into y. */
static bfp8_status tp_row(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_shard *s, const bfp8_linear_args *a,
                          ncclComm_t comm) {
    if (!bfp8_is_float_dtype(a->y_dtype)) return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "tp_linear: output dtype %s", bfp8_dtype_name(a->y_dtype));
    bfp8_tp_traffic t;
    BFP8_TRY(bfp8_tp_traffic_get(s, a->m, a->y_dtype, &t));
    size_t count = (size_t)t.count;
    float *partial = a->y_dtype == BFP8_DTYPE_F32 ? (float *)a->y : NULL;
    if (!partial) BFP8_TRY(bfp8_cuda_malloc_async(count * sizeof(float), (void **)&partial, a->stream));
    bfp8_linear_args local = *a;
    local.y = partial;
    local.y_dtype = BFP8_DTYPE_F32;
    bfp8_status st = bfp8_tp_linear_local(d, w, s, &local);
    if (st == BFP8_OK) {
        ncclResult_t r = g_nccl.all_reduce(partial, partial, count, ncclFloat32, ncclSum, comm, (cudaStream_t)a->stream);
        if (r != ncclSuccess) st = nccl_error(r, "ncclAllReduce");
    }
    if (partial != a->y) {
        if (st == BFP8_OK) {
            int err = bfp8_cuda_launch_f32_convert(partial, a->y, (int)a->y_dtype, count, a->stream);
            if (err) st = bfp8_cuda_error(err, "tp_linear: rounding kernel");
        }
        bfp8_status fst = bfp8_cuda_free_async(partial, a->stream);
        if (st == BFP8_OK) st = fst;
    }
    return st;
}

bfp8_status bfp8_tp_linear(bfp8_dispatcher *d, const bfp8_weight *w, const bfp8_shard *shard,
                           const bfp8_linear_args *args, void *nccl_comm) {
    BFP8_CHECK_ARG(shard && args && w, "tp_linear: NULL argument");
    BFP8_CHECK_ARG(nccl_comm, "tp_linear: nccl_comm is NULL");
    BFP8_CHECK_ARG(args->device == BFP8_DEVICE_CUDA, "tp_linear: the data must be on cuda (NCCL), not %s",
                   bfp8_device_name(args->device));
    pthread_once(&g_nccl.once, nccl_load);
    if (!g_nccl.all_reduce) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "tp_linear: %s", g_nccl.why);
    ncclComm_t comm = (ncclComm_t)nccl_comm;
    int count = 0, rank = -1;
    ncclResult_t r = g_nccl.count(comm, &count);
    if (r == ncclSuccess) r = g_nccl.user_rank(comm, &rank);
    if (r != ncclSuccess) return nccl_error(r, "ncclCommCount/UserRank");
    BFP8_CHECK_ARG(count == shard->ranks && rank == shard->rank,
                   "tp_linear: the communicator is rank %d of %d, the shard rank %d of %d", rank, count, shard->rank,
                   shard->ranks);
    BFP8_CHECK_ARG(args->y || args->m == 0, "tp_linear: y is NULL");
    if (args->m == 0 || shard->n == 0) return BFP8_OK;
    return shard->mode == BFP8_TP_COLUMN ? tp_column(d, w, shard, args, comm) : tp_row(d, w, shard, args, comm);
}
#endif
