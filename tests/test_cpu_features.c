/* CPU feature detection and the host ISA choice (src/cpu_features.c): the cpuid answer against the kernel's own
 * view in /proc/cpuinfo, the forcing hook, and BFP8_CPU_ISA. */
#include "check.h"
#include "cpu_features.h"

#include <stdbool.h>

/* Whether /proc/cpuinfo's first "flags" line lists every one of avx2, fma and f16c; -1 when it cannot be read. */
static int cpuinfo_has_avx2(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    char line[8192];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        bool avx2 = false, fma = false, f16c = false;
        for (char *tok = strtok(strchr(line, ':') ? strchr(line, ':') + 1 : line, " \t\n"); tok;
             tok = strtok(NULL, " \t\n")) {
            avx2 |= strcmp(tok, "avx2") == 0;
            fma |= strcmp(tok, "fma") == 0;
            f16c |= strcmp(tok, "f16c") == 0;
        }
        found = avx2 && fma && f16c;
        break;
    }
    fclose(f);
    return found;
}

int main(void) {
    const bool has = bfp8_cpu_has_avx2();
    CHECK(bfp8_cpu_has_avx2() == has, "the cached answer changed");
#if defined(__x86_64__) || defined(__i386__)
    const int proc = cpuinfo_has_avx2();
    if (proc >= 0) CHECK(has == (proc == 1), "cpuid says avx2+fma+f16c=%d, /proc/cpuinfo says %d", has, proc);
#else
    CHECK(!has, "avx2 reported on a CPU that is not x86");
#endif

    /* Forcing. */
    CHECK_OK(bfp8_cpu_force_isa("portable"));
    CHECK(bfp8_cpu_isa_current() == BFP8_CPU_ISA_PORTABLE, "forced portable");
    CHECK(strcmp(bfp8_cpu_isa_name(), "portable") == 0, "name '%s'", bfp8_cpu_isa_name());
    if (has) {
        CHECK_OK(bfp8_cpu_force_isa("avx2"));
        CHECK(bfp8_cpu_isa_current() == BFP8_CPU_ISA_AVX2, "forced avx2");
        CHECK(strcmp(bfp8_cpu_isa_name(), "avx2") == 0, "name '%s'", bfp8_cpu_isa_name());
    } else {
        CHECK_STATUS(bfp8_cpu_force_isa("avx2"), BFP8_ERR_UNSUPPORTED);
    }
    CHECK_STATUS(bfp8_cpu_force_isa("sse9"), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_OK(bfp8_cpu_force_isa("auto"));
    const bfp8_cpu_isa best = has ? BFP8_CPU_ISA_AVX2 : BFP8_CPU_ISA_PORTABLE;

    /* BFP8_CPU_ISA, read at each choice; the forced value wins over it. */
    setenv("BFP8_CPU_ISA", "portable", 1);
    CHECK(bfp8_cpu_isa_current() == BFP8_CPU_ISA_PORTABLE, "BFP8_CPU_ISA=portable");
    if (has) {
        CHECK_OK(bfp8_cpu_force_isa("avx2"));
        CHECK(bfp8_cpu_isa_current() == BFP8_CPU_ISA_AVX2, "forced avx2 over BFP8_CPU_ISA=portable");
        CHECK_OK(bfp8_cpu_force_isa("auto"));
    }
    setenv("BFP8_CPU_ISA", "avx2", 1);
    CHECK(bfp8_cpu_isa_current() == best, "BFP8_CPU_ISA=avx2 gives avx2 only where the CPU has it");
    setenv("BFP8_CPU_ISA", "auto", 1);
    CHECK(bfp8_cpu_isa_current() == best, "BFP8_CPU_ISA=auto");
    unsetenv("BFP8_CPU_ISA");
    CHECK(bfp8_cpu_isa_current() == best, "default");
    return TEST_SUMMARY("cpu_features");
}
