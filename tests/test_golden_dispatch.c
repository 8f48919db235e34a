/* Golden dispatch table: which backend `auto` picks for every DeepSeek-R1 dense-path layer, on a registry that
 * models an H200 (the real backends' declared capabilities, arch sm_90; no GPU needed, no kernel runs) and on the
 * host. A change that moves a layer off the backend pinned here fails with the layer, the problem and the reason
 * the pinned backend was not chosen. Changing a pin is a decision: update the table with the measurement behind it
 * (bench/RESULTS.md). */
#include "check.h"
#include "internal.h"
#ifdef BFP8_WITH_CUDA
#include "backends/cuda/cuda_glue.h"
#endif

enum { NUM_M = 6 };
static const int64_t MS[NUM_M] = {1, 16, 64, 128, 512, 4096}; /* the M values of the benchmark table */

typedef struct golden_row {
    const char *layer;
    int64_t n, k;
    const char *backend[NUM_M]; /* for M = 1, 16, 64, 128, 512, 4096 */
} golden_row;

/* The H200 pins of bfp8_linear calls (bf16 and fp16 output alike), each where the pinned backend was measured
 * faster (bench/RESULTS.md, sessions of 04:30-05:15, 05:30-06:10 and of 2026-12-01 10:35 (v12), 12:25 (v14) and
 * 14:12 (v16)): hopper at M = 1, 16, 64 and 128 (at 16 and 64 the normal path with one consumer warpgroup; at 128 on
 * q_b and kv_b only because a linear call lets it start behind the quantization: gemm_pin), at M=512 on every layer
 * (1.01-1.27x in v16's two clean runs) and at M=4096 with K <= 7168 (1.01-1.19x); cuBLASLt at M=4096 for o_proj and
 * mlp.down (K > 7168: within 1% either way). */
static const golden_row H200_TABLE[] = {
    {"q_a+kv_a", 2112, 7168, {"hopper", "hopper", "hopper", "hopper", "hopper", "hopper"}},
    {"q_b", 24576, 1536, {"hopper", "hopper", "hopper", "hopper", "hopper", "hopper"}},
    {"kv_b", 32768, 512, {"hopper", "hopper", "hopper", "hopper", "hopper", "hopper"}},
    {"o_proj", 7168, 16384, {"hopper", "hopper", "hopper", "hopper", "hopper", "cublaslt"}},
    {"mlp.gate_up", 36864, 7168, {"hopper", "hopper", "hopper", "hopper", "hopper", "hopper"}},
    {"mlp.down", 7168, 18432, {"hopper", "hopper", "hopper", "hopper", "hopper", "cublaslt"}},
    {"shared.gate_up", 4096, 7168, {"hopper", "hopper", "hopper", "hopper", "hopper", "hopper"}},
    {"shared.down", 7168, 2048, {"hopper", "hopper", "hopper", "hopper", "hopper", "hopper"}},
};
enum { NUM_LAYERS = sizeof H200_TABLE / sizeof H200_TABLE[0] };

/* The problem bfp8_linear poses for a layer whose weight was prepared for every backend: activations are
 * quantized in the call (any fp32 layout; on CUDA by the kernel just before the GEMM), the weight holds row-major
 * scales on the device. */
static bfp8_problem layer_problem(bfp8_device device, int64_t m, const golden_row *row, bfp8_dtype out) {
    return (bfp8_problem){.device = device, .arch = device == BFP8_DEVICE_CUDA ? 90 : 0, .m = m, .n = row->n,
                          .k = row->k, .out_dtype = out, .scale_format = BFP8_SCALE_FP32,
                          .a_layouts = bfp8_scale_layouts_for(BFP8_SCALE_FP32),
                          .b_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR),
                          .act_from_prior_kernel = device == BFP8_DEVICE_CUDA};
}

/* The pin of the same layer in a plain GEMM call (activations already quantized): as in the table but for q_b and
 * kv_b at M=128, where hopper was 0.97-0.98x and 0.99-1.02x of cuBLASLt as a GEMM (v16's three clean tables). */
static const char *gemm_pin(const golden_row *row, int mi) {
    if (MS[mi] == 128 && (strcmp(row->layer, "q_b") == 0 || strcmp(row->layer, "kv_b") == 0)) return "cublaslt";
    return row->backend[mi];
}

/* One pin: `auto` on `list` must choose `want`; otherwise say which layer, and why `want` was passed over. */
static void expect_pin(const bfp8_backend *const *list, size_t count, const char *layer, const bfp8_problem *p,
                       const char *want) {
    bfp8_decision dec;
    bfp8_status st = bfp8_select(list, count, p, BFP8_POLICY_AUTO, NULL, &dec);
    const char *got = st == BFP8_OK ? dec.backend->name : "(none)";
    if (st == BFP8_OK && strcmp(got, want) == 0) {
        CHECK(true, "pinned");
        return;
    }
    char why[BFP8_REASON_MAX] = "it can run the problem, but another backend now ranks above it";
    for (size_t i = 0; i < count; i++)
        if (strcmp(list[i]->name, want) == 0 && !bfp8_backend_check(list[i], p, why, sizeof why)) break;
    CHECK(false, "DeepSeek-R1 layer %s (M=%lld N=%lld K=%lld out=%s on %s) moved off %s to %s: %s", layer,
          (long long)p->m, (long long)p->n, (long long)p->k, bfp8_dtype_name(p->out_dtype),
          bfp8_device_name(p->device), want, got, st == BFP8_OK ? why : bfp8_last_error());
}

static void test_host_table(void) {
    const bfp8_backend *host[] = {&bfp8_backend_cpu, &bfp8_backend_ref};
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16};
    for (int l = 0; l < NUM_LAYERS; l++)
        for (int mi = 0; mi < NUM_M; mi++)
            for (int o = 0; o < 2; o++) {
                bfp8_problem p = layer_problem(BFP8_DEVICE_CPU, MS[mi], &H200_TABLE[l], outs[o]);
                expect_pin(host, 2, H200_TABLE[l].layer, &p, "cpu");
            }
}

#ifdef BFP8_WITH_CUDA
static void test_h200_table(void) {
    /* Registration order as in bfp8_cuda_register_backends, host backends too (they must never win on cuda). */
    const bfp8_backend *h200[] = {&bfp8_backend_cpu, &bfp8_backend_ref, bfp8_hopper_backend(),
                                  &bfp8_backend_cublaslt, &bfp8_backend_cuda_generic};
    const bfp8_dtype outs[] = {BFP8_DTYPE_BF16, BFP8_DTYPE_F16};
    for (int l = 0; l < NUM_LAYERS; l++)
        for (int mi = 0; mi < NUM_M; mi++)
            for (int o = 0; o < 2; o++) {
                bfp8_problem p = layer_problem(BFP8_DEVICE_CUDA, MS[mi], &H200_TABLE[l], outs[o]);
                expect_pin(h200, 5, H200_TABLE[l].layer, &p, H200_TABLE[l].backend[mi]);
                p.act_from_prior_kernel = false;
                expect_pin(h200, 5, H200_TABLE[l].layer, &p, gemm_pin(&H200_TABLE[l], mi));
            }

    /* Off the bf16 fast path, each rule lands where it should. fp32 output: cuBLASLt's fp32 error exceeds the
     * fp32 tolerance, so it declines; hopper serves. On an sm_89 device only the generic kernel runs. */
    bfp8_problem p = layer_problem(BFP8_DEVICE_CUDA, 128, &H200_TABLE[3], BFP8_DTYPE_F32);
    expect_pin(h200, 5, "o_proj (fp32 out)", &p, "hopper");
    p = layer_problem(BFP8_DEVICE_CUDA, 128, &H200_TABLE[3], BFP8_DTYPE_BF16);
    p.arch = 89;
    expect_pin(h200, 5, "o_proj (sm_89)", &p, "cuda_generic");
    /* A K whose block count is not a multiple of 4 (cuBLASLt then needs its weight scales restrided): hopper. */
    golden_row odd = {"K=1152", 7168, 1152, {0}};
    p = layer_problem(BFP8_DEVICE_CUDA, 128, &odd, BFP8_DTYPE_BF16);
    expect_pin(h200, 5, "K=1152", &p, "hopper");
    /* K not a multiple of 16: only the generic kernel. */
    golden_row ragged = {"K=1000", 7168, 1000, {0}};
    p = layer_problem(BFP8_DEVICE_CUDA, 128, &ragged, BFP8_DTYPE_BF16);
    expect_pin(h200, 5, "K=1000", &p, "cuda_generic");
}
#endif

int main(void) {
    test_seed();
    test_host_table();
#ifdef BFP8_WITH_CUDA
    test_h200_table();
#else
    printf("golden_dispatch: H200 table skipped: built without CUDA (CI builds with it)\n");
#endif
    return TEST_SUMMARY("golden_dispatch");
}
