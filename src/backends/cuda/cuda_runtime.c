/* CUDA host glue: device discovery, device memory, the GPU quantization entry point and the
 * registration of the CUDA backends. Compiled only when CUDA is built (src/cuda_stub.c otherwise). */
#include "internal.h"

#include "cuda_glue.h"
#include "cublaslt_dl.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

bfp8_status bfp8_cuda_error(int err, const char *what) {
    cudaError_t e = (cudaError_t)err;
    return bfp8_fail(BFP8_ERR_DEVICE, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- device discovery (once per process) ------------------------------------------------------------------- */

#define BFP8_MAX_CUDA_DEVICES 64

static struct {
    pthread_once_t once;
    bool available;
    char why[BFP8_REASON_MAX];
    int count;
    bfp8_cuda_device_info info[BFP8_MAX_CUDA_DEVICES];
} g_cuda = {.once = PTHREAD_ONCE_INIT};

static void cuda_discover(void) {
    /* Without a driver cudart says "CUDA driver version is insufficient for CUDA runtime version", which reads as
     * an old driver: ask for the driver library first. cudart opens it again; it stays loaded. */
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
        const char *err = dlerror();
        if (!err) err = "?";
        if (strncmp(err, "libcuda.so.1: ", 14) == 0) err += 14;
        snprintf(g_cuda.why, sizeof g_cuda.why, "no CUDA driver found (libcuda.so.1 not loadable: %s)", err);
        return;
    }
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        snprintf(g_cuda.why, sizeof g_cuda.why, "no CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(err));
        (void)cudaGetLastError(); /* reset the runtime's last error so later calls start clean */
        return;
    }
    if (count <= 0) {
        snprintf(g_cuda.why, sizeof g_cuda.why, "no CUDA device: cudaGetDeviceCount found 0 devices");
        return;
    }
    if (count > BFP8_MAX_CUDA_DEVICES) count = BFP8_MAX_CUDA_DEVICES;
    for (int i = 0; i < count; i++) {
        bfp8_cuda_device_info *d = &g_cuda.info[i];
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i) != cudaSuccess ||
            cudaDeviceGetAttribute(&d->num_sms, cudaDevAttrMultiProcessorCount, i) != cudaSuccess) {
            snprintf(g_cuda.why, sizeof g_cuda.why, "no usable CUDA device: cudaDeviceGetAttribute(%d): %s", i,
                     cudaGetErrorString(cudaGetLastError()));
            return;
        }
        d->arch = major * 10 + minor;
        /* The name only picks the measured ranking's cells: without it the device still runs (name "": no card). */
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) snprintf(d->name, sizeof d->name, "%s", prop.name);
        else (void)cudaGetLastError();
    }
    g_cuda.count = count;
    g_cuda.available = true;
}

bool bfp8_cuda_available(char *why, size_t why_size) {
    pthread_once(&g_cuda.once, cuda_discover);
    if (why && why_size) snprintf(why, why_size, "%s", g_cuda.available ? "" : g_cuda.why);
    return g_cuda.available;
}

/* BFP8_ERR_UNSUPPORTED with the reason when there is no device. */
static bfp8_status require_device(const char *what) {
    if (bfp8_cuda_available(NULL, 0)) return BFP8_OK;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: %s", what, g_cuda.why);
}

/* The current device's entry of the discovery's table (read-only once discovery ran, and never freed). */
static bfp8_status current_info(const bfp8_cuda_device_info **out) {
    BFP8_TRY(require_device("cuda"));
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return bfp8_cuda_error(err, "cudaGetDevice");
    if (dev < 0 || dev >= g_cuda.count) return bfp8_fail(BFP8_ERR_DEVICE, "cuda: current device %d is out of range", dev);
    *out = &g_cuda.info[dev];
    return BFP8_OK;
}

bfp8_status bfp8_cuda_device_info_get(bfp8_cuda_device_info *out) {
    const bfp8_cuda_device_info *info = NULL;
    BFP8_TRY(current_info(&info));
    *out = *info;
    return BFP8_OK;
}

void bfp8_cuda_identity(int *arch, const char **card) {
    const bfp8_cuda_device_info *info = NULL;
    const bool ok = bfp8_cuda_available(NULL, 0) && current_info(&info) == BFP8_OK;
    *arch = ok ? info->arch : 0;
    *card = ok && info->name[0] ? info->name : NULL;
}

int bfp8_cuda_arch(void) {
    int arch;
    const char *card;
    bfp8_cuda_identity(&arch, &card);
    return arch;
}

const char *bfp8_cuda_card(void) {
    int arch;
    const char *card;
    bfp8_cuda_identity(&arch, &card);
    return card;
}

/* ---- device memory ----------------------------------------------------------------------------------------- */

bfp8_status bfp8_cuda_malloc(size_t bytes, void **ptr) {
    BFP8_CHECK_ARG(ptr, "bfp8_cuda_malloc: ptr is NULL");
    *ptr = NULL;
    BFP8_TRY(require_device("bfp8_cuda_malloc"));
    if (bytes == 0) return BFP8_OK;
    cudaError_t err = cudaMalloc(ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_cuda_malloc: %zu bytes: %s", bytes, cudaGetErrorString(err));
    }
    if (err != cudaSuccess) return bfp8_cuda_error(err, "bfp8_cuda_malloc: cudaMalloc");
    return BFP8_OK;
}

bfp8_status bfp8_cuda_free(void *ptr) {
    BFP8_TRY(require_device("bfp8_cuda_free"));
    if (!ptr) return BFP8_OK;
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess) return bfp8_cuda_error(err, "bfp8_cuda_free: cudaFree");
    return BFP8_OK;
}

bfp8_status bfp8_cuda_upload(void *device_dst, const void *host_src, size_t bytes) {
    BFP8_TRY(require_device("bfp8_cuda_upload"));
    if (bytes == 0) return BFP8_OK;
    BFP8_CHECK_ARG(device_dst && host_src, "bfp8_cuda_upload: NULL pointer for %zu bytes", bytes);
    cudaError_t err = cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice);
    if (err != cudaSuccess) return bfp8_cuda_error(err, "bfp8_cuda_upload: cudaMemcpy");
    return BFP8_OK;
}

bfp8_status bfp8_cuda_download(void *host_dst, const void *device_src, size_t bytes) {
    BFP8_TRY(require_device("bfp8_cuda_download"));
    if (bytes == 0) return BFP8_OK;
    BFP8_CHECK_ARG(host_dst && device_src, "bfp8_cuda_download: NULL pointer for %zu bytes", bytes);
    cudaError_t err = cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) return bfp8_cuda_error(err, "bfp8_cuda_download: cudaMemcpy");
    return BFP8_OK;
}

bfp8_status bfp8_cuda_synchronize(void *stream) {
    BFP8_TRY(require_device("bfp8_cuda_synchronize"));
    cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);
    if (err != cudaSuccess) return bfp8_cuda_error(err, "bfp8_cuda_synchronize");
    return BFP8_OK;
}

/* The default pool normally gives freed memory back to the driver at every synchronization; per-call scratch
 * would then be mapped again on each call. Keep it pooled (process-wide setting of the device's default pool). */
static pthread_once_t g_pool_once = PTHREAD_ONCE_INIT;
static void keep_pool_memory(void) {
    int dev = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
        uint64_t threshold = UINT64_MAX;
        (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
    (void)cudaGetLastError();
}

bfp8_status bfp8_cuda_malloc_async(size_t bytes, void **ptr, void *stream) {
    BFP8_CHECK_ARG(ptr, "bfp8_cuda_malloc_async: ptr is NULL");
    *ptr = NULL;
    BFP8_TRY(require_device("bfp8_cuda_malloc_async"));
    if (bytes == 0) return BFP8_OK;
    pthread_once(&g_pool_once, keep_pool_memory);
    cudaError_t err = cudaMallocAsync(ptr, bytes, (cudaStream_t)stream);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_cuda_malloc_async: %zu bytes: %s", bytes,
                         cudaGetErrorString(err));
    }
    if (err != cudaSuccess) return bfp8_cuda_error(err, "bfp8_cuda_malloc_async: cudaMallocAsync");
    return BFP8_OK;
}

bfp8_status bfp8_cuda_free_async(void *ptr, void *stream) {
    BFP8_TRY(require_device("bfp8_cuda_free_async"));
    if (!ptr) return BFP8_OK;
    cudaError_t err = cudaFreeAsync(ptr, (cudaStream_t)stream);
    if (err != cudaSuccess) return bfp8_cuda_error(err, "bfp8_cuda_free_async: cudaFreeAsync");
    return BFP8_OK;
}

/* ---- scales and quantization ------------------------------------------------------------------------------- */

bfp8_cuda_scale_view bfp8_cuda_scale_view_of(const bfp8_scales *s) {
    bfp8_cuda_scale_view v = {.data = s->data, .row_stride = 1, .kb_stride = 1, .packed = 0};
    switch (s->layout) {
    case BFP8_LAYOUT_ROW_MAJOR: v.row_stride = s->kblocks; break;
    case BFP8_LAYOUT_MN_MAJOR: v.kb_stride = s->rows; break;
    case BFP8_LAYOUT_MN_MAJOR_ALIGNED: v.kb_stride = bfp8_round_up(s->rows, 4); break;
    case BFP8_LAYOUT_PACKED_UE8M0:
        v.kb_stride = bfp8_round_up(s->rows, 4);
        v.packed = 1;
        break;
    default: break;
    }
    return v;
}

bfp8_status bfp8_cuda_quantize_act(const void *x, bfp8_dtype x_dtype, int64_t m, int64_t k, uint8_t *q,
                                   bfp8_scales *scales, int64_t *nonfinite, void *stream) {
    const char *what = "bfp8_cuda_quantize_act";
    size_t bytes;
    BFP8_CHECK_ARG(bfp8_is_float_dtype(x_dtype), "%s: input dtype %s (%d) is not f32, bf16 or f16", what,
                   bfp8_dtype_name(x_dtype), (int)x_dtype);
    BFP8_TRY(bfp8_check_matrix(what, m, k, bfp8_dtype_size(x_dtype), &bytes));
    BFP8_CHECK_ARG(bytes == 0 || (x && q), "%s: NULL input or output for [%lld, %lld]", what, (long long)m,
                   (long long)k);
    BFP8_CHECK_ARG(scales, "%s: scales is NULL", what);
    int64_t kblocks = bfp8_ceil_div(k, BFP8_BLOCK);
    BFP8_TRY(bfp8_check_scales(what, scales, m, kblocks));
    BFP8_TRY(require_device(what));
    cudaStream_t s = (cudaStream_t)stream;
    /* Padding of the aligned layouts is zero, as on the host. */
    if (scales->layout == BFP8_LAYOUT_MN_MAJOR_ALIGNED || scales->layout == BFP8_LAYOUT_PACKED_UE8M0) {
        size_t sbytes = bfp8_scales_bytes(scales->layout, m, kblocks);
        if (sbytes && scales->data) {
            cudaError_t err = cudaMemsetAsync(scales->data, 0, sbytes, s);
            if (err != cudaSuccess) return bfp8_cuda_error(err, "bfp8_cuda_quantize_act: clearing scale padding");
        }
    }
    if (m == 0 || k == 0) return BFP8_OK;
    int err = bfp8_cuda_launch_quantize_act(x, (int)x_dtype, m, k, q, bfp8_cuda_scale_view_of(scales),
                                            scales->format == BFP8_SCALE_UE8M0, (long long *)nonfinite, stream);
    if (err) return bfp8_cuda_error(err, "bfp8_cuda_quantize_act: kernel launch");
    return BFP8_OK;
}

/* ---- what the dispatcher's device-side statistics need -------------------------------------------------------- */

int bfp8_cuda_current_device(void) {
    int dev = -1;
    if (!bfp8_cuda_available(NULL, 0)) return -1;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return dev;
}

bool bfp8_cuda_stream_capturing(void *stream) {
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &status) != cudaSuccess) {
        (void)cudaGetLastError();
        return true; /* e.g. the legacy stream while another stream captures: treat as capturing */
    }
    return status != cudaStreamCaptureStatusNone;
}

bfp8_status bfp8_cuda_count_nonfinite(const void *x, bfp8_dtype dtype, int64_t n, int64_t *counter, void *stream) {
    BFP8_CHECK_ARG(bfp8_is_float_dtype(dtype), "bfp8_cuda_count_nonfinite: dtype %d is not f32, bf16 or f16",
                   (int)dtype);
    BFP8_CHECK_ARG(n >= 0 && (n == 0 || (x && counter)), "bfp8_cuda_count_nonfinite: NULL pointer or negative n");
    BFP8_TRY(require_device("bfp8_cuda_count_nonfinite"));
    int err = bfp8_cuda_launch_count_nonfinite(x, (int)dtype, n, (long long *)counter, stream);
    if (err) return bfp8_cuda_error(err, "bfp8_cuda_count_nonfinite: kernel launch");
    return BFP8_OK;
}

/* ---- registration ------------------------------------------------------------------------------------------ */

bfp8_status bfp8_cuda_register_backends(bfp8_dispatcher *d) {
    char why[BFP8_REASON_MAX];
    const bfp8_backend *hopper = bfp8_hopper_backend();
    if (!bfp8_cuda_available(why, sizeof why)) {
        BFP8_TRY(bfp8_dispatcher_add_unavailable(d, hopper->name, why));
        BFP8_TRY(bfp8_dispatcher_add_unavailable(d, bfp8_backend_cublaslt.name, why));
        return bfp8_dispatcher_add_unavailable(d, bfp8_backend_cuda_generic.name, why);
    }
    /* Every CUDA backend is registered on any device: each declares the architectures it runs on, so explain
     * shows why (say) hopper cannot run on an sm_89 device instead of hiding it. */
    BFP8_TRY(bfp8_dispatcher_add(d, hopper));
    /* libcublasLt is loaded only here, where a device exists (cublaslt_dl.h says why). */
    if (bfp8_cublaslt_load(why, sizeof why))
        BFP8_TRY(bfp8_dispatcher_add(d, &bfp8_backend_cublaslt));
    else
        BFP8_TRY(bfp8_dispatcher_add_unavailable(d, bfp8_backend_cublaslt.name, why));
    return bfp8_dispatcher_add(d, &bfp8_backend_cuda_generic);
}
