/* Experiments on cuBLASLt's block-scaled FP8 GEMM (VEC128 x BLK128x128): which scale layouts it reads, and
 * which M, N, K, output dtypes and bias dtypes it accepts and computes correctly. Not a unit test: run by
 * scripts/gpu-check.sh on the GPU machine; its findings are the caps of src/backends/cuda/cublaslt.c
 * (bench/RESULTS.md records them). Built by the script: cc tests/cuda_probe.c -lcublasLt -lcudart. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ACT_ROW, ACT_MN, ACT_MN4, ACT_COUNT };
enum { W_ROW, W_ROW4, W_MN, W_MN4, W_COUNT };
static const char *act_names[] = {"row_major", "mn_major", "mn_major_aligned"};
static const char *w_names[] = {"row_major", "row_major_ld4", "mn_major", "mn_major_aligned"};

static uint64_t rng = 0x1234567887654321ull;
static uint64_t rnd(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}
static double e4m3(uint8_t c) {
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return s ? -v : v;
}
static int64_t r4(int64_t x) { return (x + 3) / 4 * 4; }
static float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float f16_to_f32(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf(m / 1024.0f, -14);
    return s ? -v : v;
}

typedef struct result {
    int heur, run; /* cublasStatus_t */
    double rel;
    int nan;
} result;

/* One experiment; out: 0 f32, 1 bf16, 2 f16; bias: -1 none, else same codes. */
static result probe(int64_t m, int64_t n, int64_t k, int out, int act_l, int w_l, int bias) {
    result res = {-1, -1, -1, 0};
    int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
    uint8_t *a = malloc(m * k), *b = malloc(n * k);
    for (int64_t i = 0; i < m * k; i++) { a[i] = (uint8_t)rnd(); if ((a[i] & 0x7F) == 0x7F) a[i] ^= 1; }
    for (int64_t i = 0; i < n * k; i++) { b[i] = (uint8_t)rnd(); if ((b[i] & 0x7F) == 0x7F) b[i] ^= 1; }
    float *sa = malloc(sizeof(float) * m * kb), *sb = malloc(sizeof(float) * nb * kb);
    for (int64_t i = 0; i < m * kb; i++) sa[i] = ldexpf(0.5f + (rnd() % 1000) / 2000.0f, (int)(rnd() % 8) - 10);
    for (int64_t i = 0; i < nb * kb; i++) sb[i] = ldexpf(0.5f + (rnd() % 1000) / 2000.0f, (int)(rnd() % 8) - 6);
    /* Stored layouts (generously sized). */
    size_t act_n = (size_t)(r4(m) * r4(kb) + 16), w_n = (size_t)(r4(nb) * r4(kb) + 16);
    float *sa_st = calloc(act_n, 4), *sb_st = calloc(w_n, 4);
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < kb; j++) {
            int64_t idx = act_l == ACT_ROW ? r * kb + j : act_l == ACT_MN ? j * m + r : j * r4(m) + r;
            sa_st[idx] = sa[r * kb + j];
        }
    for (int64_t r = 0; r < nb; r++)
        for (int64_t j = 0; j < kb; j++) {
            int64_t idx = w_l == W_ROW ? r * kb + j : w_l == W_ROW4 ? r * r4(kb) + j : w_l == W_MN ? j * nb + r
                                                                                                : j * r4(nb) + r;
            sb_st[idx] = sb[r * kb + j];
        }
    float *bias_f = malloc(sizeof(float) * n);
    uint16_t *bias_h = malloc(2 * n);
    for (int64_t i = 0; i < n; i++) {
        bias_f[i] = (float)(rnd() % 2000) / 100.0f - 10.0f; /* exact in bf16? no: round below */
        uint32_t u;
        memcpy(&u, &bias_f[i], 4);
        u &= 0xFFFF0000u; /* make it exact in bf16 */
        memcpy(&bias_f[i], &u, 4);
        bias_h[i] = (uint16_t)(u >> 16);
    }
    size_t osz = out == 0 ? 4 : 2;
    void *da, *db, *dsa, *dsb, *dy, *dbias = NULL, *ws;
    cudaMalloc(&da, m * k + 16), cudaMalloc(&db, n * k + 16), cudaMalloc(&dsa, act_n * 4);
    cudaMalloc(&dsb, w_n * 4), cudaMalloc(&dy, m * n * osz + 16), cudaMalloc(&ws, 32 << 20);
    cudaMemcpy(da, a, m * k, cudaMemcpyHostToDevice), cudaMemcpy(db, b, n * k, cudaMemcpyHostToDevice);
    cudaMemcpy(dsa, sa_st, act_n * 4, cudaMemcpyHostToDevice), cudaMemcpy(dsb, sb_st, w_n * 4, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xFF, m * n * osz);
    if (bias >= 0) {
        cudaMalloc(&dbias, n * 4);
        if (bias == 0) cudaMemcpy(dbias, bias_f, n * 4, cudaMemcpyHostToDevice);
        else cudaMemcpy(dbias, bias_h, n * 2, cudaMemcpyHostToDevice);
    }
    cudaDataType_t ot = out == 0 ? CUDA_R_32F : out == 1 ? CUDA_R_16BF : CUDA_R_16F;
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulPreference_t pref;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int32_t ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dsb, sizeof dsb);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dsa, sizeof dsa);
    if (bias >= 0) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = bias == 0 ? CUDA_R_32F : bias == 1 ? CUDA_R_16BF : CUDA_R_16F;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias);
    }
    cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, n, k);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, m, k);
    cublasLtMatrixLayoutCreate(&ld, ot, n, m, n);
    cublasLtMatmulPreferenceCreate(&pref);
    size_t wsz = 32 << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
    cublasLtMatmulHeuristicResult_t hr;
    int found = 0;
    memset(&hr, 0, sizeof hr);
    res.heur = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &hr, &found);
    if (res.heur == 0 && found == 0) res.heur = 1000;
    if (res.heur == 0) {
        float alpha = 1, beta = 0;
        res.run = cublasLtMatmul(h, op, &alpha, db, la, da, lb, &beta, dy, ld, dy, ld, &hr.algo, ws, wsz, 0);
        cudaError_t ce = cudaDeviceSynchronize();
        if (res.run == 0 && ce != cudaSuccess) res.run = 2000 + ce;
        if (res.run == 0) {
            uint8_t *y = malloc(m * n * osz);
            cudaMemcpy(y, dy, m * n * osz, cudaMemcpyDeviceToHost);
            double e2 = 0, r2 = 0;
            int64_t rows = m < 6 ? m : 6;
            for (int64_t i = 0; i < rows; i++) {
                int64_t r = i * (m - 1) / (rows > 1 ? rows - 1 : 1);
                for (int64_t j = 0; j < n; j++) {
                    double tot = bias >= 0 ? bias_f[j] : 0.0;
                    for (int64_t q = 0; q < kb; q++) {
                        double p = 0;
                        for (int64_t t = q * 128; t < k && t < q * 128 + 128; t++) p += e4m3(a[r * k + t]) * e4m3(b[j * k + t]);
                        tot += p * sa[r * kb + q] * sb[(j / 128) * kb + q];
                    }
                    double got = out == 0 ? ((float *)y)[r * n + j]
                                          : out == 1 ? bf16_to_f32(((uint16_t *)y)[r * n + j])
                                                     : f16_to_f32(((uint16_t *)y)[r * n + j]);
                    if (isnan(got)) res.nan++;
                    else e2 += (got - tot) * (got - tot);
                    r2 += tot * tot;
                }
            }
            res.rel = sqrt(e2 / (r2 > 0 ? r2 : 1));
            free(y);
        }
    }
    cudaGetLastError();
    cublasLtMatmulPreferenceDestroy(pref), cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld), cublasLtMatmulDescDestroy(op), cublasLtDestroy(h);
    cudaFree(da), cudaFree(db), cudaFree(dsa), cudaFree(dsb), cudaFree(dy), cudaFree(ws);
    if (dbias) cudaFree(dbias);
    free(a), free(b), free(sa), free(sb), free(sa_st), free(sb_st), free(bias_f), free(bias_h);
    return res;
}

static const char *out_name(int o) { return o == 0 ? "f32" : o == 1 ? "bf16" : "f16"; }

static result show(int64_t m, int64_t n, int64_t k, int out, int al, int wl, int bias) {
    result r = probe(m, n, k, out, al, wl, bias);
    const char *verdict = r.heur ? "NO-ALGO" : r.run ? "RUN-FAIL" : (r.nan || r.rel > 1e-2) ? "WRONG" : "ok";
    printf("probe m=%-5lld n=%-5lld k=%-5lld out=%-4s act=%-16s w=%-16s bias=%-4s heur=%-4d run=%-4d nan=%-4d "
           "rel=%-9.2e %s\n",
           (long long)m, (long long)n, (long long)k, out_name(out), act_names[al], w_names[wl],
           bias < 0 ? "none" : out_name(bias), r.heur, r.run, r.nan, r.rel, verdict);
    fflush(stdout);
    return r;
}

int main(void) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) {
        printf("probe: no device\n");
        return 1;
    }
    /* 1. Layouts: kb = 4 and kb = 5, nb = 2 and 3, m = 8 and 6 distinguish row/mn and the padded strides. */
    int best_a = -1, best_w = -1;
    double best = 1e30;
    for (int al = 0; al < ACT_COUNT; al++)
        for (int wl = 0; wl < W_COUNT; wl++) {
            result r1 = show(8, 256, 512, 1, al, wl, -1);
            result r2 = show(8, 384, 640, 1, al, wl, -1); /* kb = 5: row-major stride 5 vs 8 */
            double e = (r1.heur || r1.run || r1.nan ? 1e9 : r1.rel) + (r2.heur || r2.run || r2.nan ? 1e9 : r2.rel);
            if (e < best) best = e, best_a = al, best_w = wl;
        }
    if (best_a < 0) best_a = ACT_MN4, best_w = W_ROW4;
    printf("probe: best layouts act=%s w=%s (sum rel %.2e)\n", act_names[best_a], w_names[best_w], best);
    /* 2. M, K, N limits and dtypes with those layouts. */
    for (int out = 0; out < 3; out++)
        for (int64_t m = 1; m <= 9; m++) show(m, 256, 512, out, best_a, best_w, -1);
    show(16, 256, 512, 1, best_a, best_w, -1);
    static const int64_t ks[] = {16, 64, 127, 128, 129, 144, 256, 384, 496, 512, 520, 640, 7168};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) show(8, 256, ks[i], 1, best_a, best_w, -1);
    static const int64_t ns[] = {8, 16, 100, 128, 136, 2112, 2116, 2120, 2052};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int out = 0; out < 3; out++) show(8, ns[i], 512, out, best_a, best_w, -1);
    for (int out = 0; out < 3; out++)
        for (int bias = 0; bias < 3; bias++) show(8, 256, 512, out, best_a, best_w, bias);
    show(4096, 7168, 2048, 1, best_a, best_w, -1);
    show(1, 2112, 7168, 1, best_a, best_w, -1);
    return 0;
}
