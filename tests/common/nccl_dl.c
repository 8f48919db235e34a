/* NCCL through dlopen (tests/common/nccl_dl.h). */
#include "nccl_dl.h"

#include <stdio.h>

#ifdef TEST_HAVE_NCCL
#include <dlfcn.h>
#include <pthread.h>

static test_nccl g_nccl;
static char g_why[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_why, sizeof g_why, "NCCL not found: dlopen(libnccl.so.2): %s", dlerror());
        return;
    }
    test_nccl n;
    *(void **)&n.get_unique_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&n.comm_init_rank = dlsym(h, "ncclCommInitRank");
    *(void **)&n.comm_init_all = dlsym(h, "ncclCommInitAll");
    *(void **)&n.comm_destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&n.all_gather = dlsym(h, "ncclAllGather");
    *(void **)&n.all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&n.get_version = dlsym(h, "ncclGetVersion");
    *(void **)&n.error_string = dlsym(h, "ncclGetErrorString");
    if (!n.get_unique_id || !n.comm_init_rank || !n.comm_init_all || !n.comm_destroy || !n.all_gather ||
        !n.all_reduce || !n.get_version || !n.error_string) {
        snprintf(g_why, sizeof g_why, "NCCL found but incomplete: a function is missing from libnccl.so.2");
        return;
    }
    g_nccl = n;
}

const test_nccl *test_nccl_load(char *why, size_t why_size) {
    pthread_once(&g_once, load);
    if (g_nccl.error_string) return &g_nccl;
    if (why && why_size) snprintf(why, why_size, "%s", g_why);
    return NULL;
}
#else
const test_nccl *test_nccl_load(char *why, size_t why_size) {
    if (why && why_size)
        snprintf(why, why_size,
#ifdef BFP8_WITH_CUDA
                 "built without nccl.h (NCCL's header, part of the CUDA toolkit)"
#else
                 "built without CUDA"
#endif
        );
    return NULL;
}
#endif
