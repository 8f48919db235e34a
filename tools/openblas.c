/* The OpenBLAS baseline of `blockfp8 bench` (dense and grouped): cblas_sgemm on dequantized fp32 weights. */
#include "cli.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* OpenBLAS is loaded with dlopen when its baseline is asked for, never linked: linked, every command would load it
 * at start (tens of ms and ~200 MB of memory), and under a memory limit its start-up retries its allocations
 * forever. BFP8_OPENBLAS names the library to load (default libopenblas.so.0, then libopenblas.so). */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 }; /* the CBLAS standard's values */
static struct {
    void (*sgemm)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc);
    void (*set_num_threads)(int n);
    char *(*get_corename)(void); /* optional */
} openblas;

/* dlsym's void * as a function pointer (POSIX guarantees the conversion; C does not, hence memcpy). */
static bool openblas_sym(void *lib, const char *name, void *fn_ptr, size_t size) {
    void *p = dlsym(lib, name);
    if (p) memcpy(fn_ptr, &p, size);
    return p != NULL;
}

int cli_openblas_load(const char *cmd) {
    const char *env = getenv("BFP8_OPENBLAS");
    const char *names[] = {env && *env ? env : "libopenblas.so.0", env && *env ? NULL : "libopenblas.so"};
    void *lib = NULL;
    const char *err = "";
    for (int i = 0; i < 2 && !lib && names[i]; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) err = dlerror();
    }
    if (!lib)
        return cli_error(CLI_FAIL, cmd,
                         "--baseline openblas: OpenBLAS not loadable (%s): install it (Debian libopenblas0) or name "
                         "the library in BFP8_OPENBLAS",
                         err);
    if (!openblas_sym(lib, "cblas_sgemm", &openblas.sgemm, sizeof openblas.sgemm) ||
        !openblas_sym(lib, "openblas_set_num_threads", &openblas.set_num_threads, sizeof openblas.set_num_threads)) {
        dlclose(lib);
        return cli_error(CLI_FAIL, cmd, "--baseline openblas: %s lacks cblas_sgemm or openblas_set_num_threads",
                         names[0]);
    }
    if (!openblas_sym(lib, "openblas_get_corename", &openblas.get_corename, sizeof openblas.get_corename))
        openblas.get_corename = NULL;
    return CLI_OK; /* kept loaded until exit */
}

const char *cli_openblas_core(void) {
    const char *core = openblas.get_corename ? openblas.get_corename() : NULL;
    return core ? core : "unknown";
}

/* OpenBLAS's worker threads spin (sched_yield) for a while after each call; let them go idle before timing
 * anything else on the same two cores. */
void cli_openblas_settle(void) { nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 300000000}, NULL); }


void cli_openblas_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, const float *w, float *c) {
    openblas.sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)m, (int)n, (int)k, 1.0f, a, (int)k, w, (int)k,
                   0.0f, c, (int)n);
}

void cli_openblas_set_threads(int n) { openblas.set_num_threads(n); }
