/* The dlopen of libcublasLt (cublaslt_dl.h says why). */
#define BFP8_CUBLASLT_DL_LOADER
#include "cublaslt_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define LT_SONAME BFP8_CUBLASLT_SONAME

bfp8_cublaslt_api bfp8_cublaslt;

static struct {
    pthread_once_t once;
    bool ok;
    char why[256];
} g_load = {.once = PTHREAD_ONCE_INIT};

static void load_once(void) {
    void *h = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
    const char *err = h ? NULL : dlerror();
#ifdef BFP8_CUDA_LIBDIR
    if (!h) {
        h = dlopen(BFP8_CUDA_LIBDIR "/" LT_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!h) err = dlerror();
    }
#endif
    if (!h) {
        snprintf(g_load.why, sizeof g_load.why, "%s not loadable: %s", LT_SONAME, err ? err : "?");
        return;
    }
    bfp8_cublaslt_api api;
    /* dlsym returns void *; the C standard leaves its conversion to a function pointer to POSIX, hence memcpy. */
#define LT_LOAD(f)                                                                                               \
    {                                                                                                            \
        void *p = dlsym(h, "cublasLt" #f);                                                                       \
        if (!p) {                                                                                                \
            snprintf(g_load.why, sizeof g_load.why, "%s lacks cublasLt%s", LT_SONAME, #f);                       \
            dlclose(h);                                                                                          \
            return;                                                                                              \
        }                                                                                                        \
        memcpy(&api.f, &p, sizeof p);                                                                            \
    }
    BFP8_CUBLASLT_FUNCS(LT_LOAD)
#undef LT_LOAD
    bfp8_cublaslt = api; /* kept loaded for the life of the process */
    g_load.ok = true;
}

bool bfp8_cublaslt_load(char *why, size_t why_size) {
    pthread_once(&g_load.once, load_once);
    if (why && why_size) snprintf(why, why_size, "%s", g_load.ok ? "" : g_load.why);
    return g_load.ok;
}
