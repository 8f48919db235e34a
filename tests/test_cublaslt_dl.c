/* libcublasLt is loaded with dlopen, only where a CUDA device is found (src/backends/cuda/cublaslt_dl.h): creating
 * the default dispatcher on a machine without a device leaves it unmapped; bfp8_cublaslt_load finds the library
 * where the toolkit has it and fills every entry point. A build without CUDA has nothing to test. */
#include "check.h"

#ifdef BFP8_WITH_CUDA
#include "backends/cuda/cublaslt_dl.h"

#include <unistd.h>

/* Whether any mapping of this process is a libcublasLt. */
static bool cublaslt_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, "libcublasLt") != NULL;
    fclose(f);
    return found;
}

int main(void) {
    char why[256] = "";
    const bool device = bfp8_cuda_available(why, sizeof why);
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (!device) CHECK(!cublaslt_mapped(), "libcublasLt mapped without a CUDA device (%s)", why);
    bfp8_dispatcher_free(d);

    const bool present = access(BFP8_CUDA_LIBDIR "/" BFP8_CUBLASLT_SONAME, F_OK) == 0;
    char lt_why[256] = "?";
    const bool loaded = bfp8_cublaslt_load(lt_why, sizeof lt_why);
    if (present) CHECK(loaded, "libcublasLt is in " BFP8_CUDA_LIBDIR " but did not load: %s", lt_why);
    if (loaded) {
        CHECK(lt_why[0] == '\0', "a loaded library with a reason '%s'", lt_why);
        CHECK(cublaslt_mapped(), "loaded but not mapped");
#define CHECK_ENTRY(f) CHECK(bfp8_cublaslt.f != NULL, "no cublasLt%s", #f);
        BFP8_CUBLASLT_FUNCS(CHECK_ENTRY)
#undef CHECK_ENTRY
        const char *name = cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED);
        CHECK(name && strcmp(name, "CUBLAS_STATUS_NOT_SUPPORTED") == 0, "status name '%s'", name ? name : "(null)");
        /* A second call answers the same without loading again. */
        CHECK(bfp8_cublaslt_load(NULL, 0), "second load");
    } else {
        CHECK(lt_why[0] != '\0' && strstr(lt_why, "libcublasLt"), "a failed load says why: '%s'", lt_why);
        printf("libcublasLt not loadable here: %s\n", lt_why);
    }
    return TEST_SUMMARY("cublaslt_dl");
}
#else
int main(void) {
    printf("built without CUDA: nothing to load\n");
    return TEST_SUMMARY("cublaslt_dl");
}
#endif
