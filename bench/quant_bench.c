/* bfp8_quantize_act throughput, scalar (BFP8_CPU_ISA=portable) vs AVX2, on an [m, k] f32 or bf16 matrix.
 * Build and run:  make quant-bench && ./build/quant_bench [m k]
 * (BFP8_NUM_THREADS sets the threads, default all cores; BFP8_CPU_ISA=portable forces the scalar kernels). */
#include "blockfp8.h"
#include "backends/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int64_t m = argc > 2 ? atoll(argv[1]) : 4096, k = argc > 2 ? atoll(argv[2]) : 7168, kb = (k + 127) / 128;
    float *x = malloc((size_t)(m * k) * 4);
    uint16_t *xb = malloc((size_t)(m * k) * 2);
    uint8_t *q = malloc((size_t)(m * k));
    float *sd = malloc((size_t)(m * kb) * 4);
    uint64_t s = 12345;
    for (int64_t i = 0; i < m * k; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ((float)(s >> 40) / 16777216.0f - 0.5f) * 8.0f;
        xb[i] = bfp8_bf16_from_f32(x[i]);
    }
    const char *isas[] = {"portable", "avx2"};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 2; i++) {
            if (bfp8_cpu_force_isa(isas[i]) != BFP8_OK) continue;
            bfp8_scales sc;
            if (bfp8_scales_init(&sc, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, m, kb, sd) != BFP8_OK) return 1;
            double best = 1e9;
            for (int rep = 0; rep < 5; rep++) {
                double t0 = now_s();
                if (bfp8_quantize_act(d ? (void *)xb : (void *)x, d ? BFP8_DTYPE_BF16 : BFP8_DTYPE_F32, m, k, q, &sc,
                                      NULL) != BFP8_OK) {
                    fprintf(stderr, "quantize failed: %s\n", bfp8_last_error());
                    return 1;
                }
                double t = now_s() - t0;
                if (t < best) best = t;
            }
            printf("%-5s %-8s %lldx%lld threads=%d: %.1f ms, %.0f M elements/s\n", d ? "bf16" : "f32", isas[i],
                   (long long)m, (long long)k, bfp8_get_num_threads(), best * 1e3, (double)(m * k) / best / 1e6);
        }
    free(x), free(xb), free(q), free(sd);
    return 0;
}
