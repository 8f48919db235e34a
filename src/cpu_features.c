/* CPU feature detection (cpuid + xgetbv, which gcc and clang both compile: clang 14's __builtin_cpu_supports has
 * no "f16c") and the ISA choice of the host kernels. */
#include "cpu_features.h"

#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static bool detect_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const unsigned fma = 1u << 12, osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((c & (fma | osxsave | avx | f16c)) != (fma | osxsave | avx | f16c)) return false;
    /* The OS must save the XMM and YMM registers on a context switch (XCR0 bits 1 and 2). */
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 6u) != 6u) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (b & (1u << 5)) != 0; /* AVX2 */
}
#else
static bool detect_avx2(void) { return false; }
#endif

static atomic_int g_has_avx2 = -1; /* -1: not asked yet */

bool bfp8_cpu_has_avx2(void) {
    int v = atomic_load_explicit(&g_has_avx2, memory_order_relaxed);
    if (v < 0) {
        v = detect_avx2() ? 1 : 0; /* the same answer on every thread, so a race only repeats the question */
        atomic_store_explicit(&g_has_avx2, v, memory_order_relaxed);
    }
    return v == 1;
}

enum { ISA_AUTO = 0, ISA_PORTABLE, ISA_AVX2 };
static atomic_int g_forced_isa; /* ISA_* */

static int isa_from_name(const char *name) {
    if (!name || !*name || strcmp(name, "auto") == 0) return ISA_AUTO;
    if (strcmp(name, "portable") == 0) return ISA_PORTABLE;
    if (strcmp(name, "avx2") == 0) return ISA_AVX2;
    return -1;
}

bfp8_status bfp8_cpu_force_isa(const char *isa) {
    int v = isa_from_name(isa);
    BFP8_CHECK_ARG(v >= 0, "bfp8_cpu_force_isa: unknown ISA '%s' (auto, portable, avx2)", isa);
    if (v == ISA_AVX2 && !bfp8_cpu_has_avx2())
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cpu_force_isa: this CPU lacks AVX2, FMA or F16C");
    atomic_store(&g_forced_isa, v);
    return BFP8_OK;
}

bfp8_cpu_isa bfp8_cpu_isa_current(void) {
    int want = atomic_load(&g_forced_isa);
    if (want == ISA_AUTO) {
        int env = isa_from_name(getenv("BFP8_CPU_ISA"));
        want = env > 0 ? env : ISA_AUTO; /* an unknown value means auto */
    }
    if (want == ISA_PORTABLE || !bfp8_cpu_has_avx2()) return BFP8_CPU_ISA_PORTABLE;
    return BFP8_CPU_ISA_AVX2;
}

const char *bfp8_cpu_isa_name(void) {
    return bfp8_cpu_isa_current() == BFP8_CPU_ISA_AVX2 ? "avx2" : "portable";
}

bfp8_status bfp8_cpu_check_env(void) {
    const char *env = getenv("BFP8_CPU_ISA");
    if (isa_from_name(env) >= 0) return BFP8_OK;
    return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "BFP8_CPU_ISA='%.64s' is not auto, portable or avx2", env);
}
