/* bfp8_tp_linear on CUDA with NCCL: with two or more GPUs, two processes (one GPU each) run a DeepSeek-R1 layer at
 * TP=2 in both modes and compare with the single-GPU layer (column: bit-identical; row: within bf16 rounding); with
 * one GPU, the same at TP=1 through a one-rank communicator. Skips without a GPU or without NCCL. */
#include "blockfp8_tp.h"
#include "check.h"
#include "common/nccl_dl.h"

#include <inttypes.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TEST_HAVE_NCCL
int main(void) {
    printf("test_tp_cuda: skipped (built without CUDA or without nccl.h)\n0 passed, 0 failed\n");
    return 0;
}
#else
static const test_nccl *nccl;

enum { M = 5, N = 2112, K = 7168 };

/* The layer's data, from a seed shared by every process. */
static uint8_t q[N * K];
static float sc[17 * 56], x[M * K];
static uint16_t bias[N];

static void make_layer(uint64_t seed) {
    test_rng_init(&test_rng_, seed);
    float *w = malloc(sizeof(float) * N * K);
    for (int64_t i = 0; i < (int64_t)N * K; i++) w[i] = test_randn(0.02f);
    bfp8_scales s;
    bfp8_scales_init(&s, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 17, 56, sc);
    bfp8_quantize_weight(w, BFP8_DTYPE_F32, N, K, q, &s, NULL);
    free(w);
    for (int i = 0; i < M * K; i++) x[i] = test_randn(1.0f);
    for (int i = 0; i < N; i++) bias[i] = bfp8_bf16_from_f32(test_randn(0.5f));
}

/* y [M, N] bf16 of rank `rank` of `ranks` (ranks = 0: unsharded) on the current GPU. */
static bfp8_status run_layer(bfp8_tp_mode mode, int ranks, int rank, ncclComm_t comm, uint16_t *y) {
    bfp8_scales s;
    bfp8_scales_init(&s, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 17, 56, sc);
    bfp8_weight *w = NULL;
    bfp8_shard sh = {0};
    bfp8_status st = ranks ? bfp8_shard_plan(N, K, mode, ranks, rank, BFP8_SHARD_SHARE_BLOCKS, &sh) : BFP8_OK;
    if (st == BFP8_OK) st = ranks ? bfp8_weight_shard(q, &s, &sh, &w) : bfp8_weight_create(q, N, K, &s, &w);
    if (st == BFP8_OK) st = bfp8_weight_prepare(w, NULL, NULL);
    int64_t xk = ranks && mode == BFP8_TP_ROW ? sh.end - sh.begin : K, x0 = ranks && mode == BFP8_TP_ROW ? sh.begin : 0;
    float *xs = malloc(sizeof(float) * M * (size_t)xk);
    for (int i = 0; i < M; i++) memcpy(xs + i * xk, x + i * K + x0, sizeof(float) * (size_t)xk);
    void *dx = NULL, *dy = NULL, *db = NULL;
    if (st == BFP8_OK) st = bfp8_cuda_malloc(sizeof(float) * M * (size_t)xk, &dx);
    if (st == BFP8_OK) st = bfp8_cuda_malloc(sizeof(uint16_t) * M * N, &dy);
    if (st == BFP8_OK) st = bfp8_cuda_malloc(sizeof bias, &db);
    if (st == BFP8_OK) st = bfp8_cuda_upload(dx, xs, sizeof(float) * M * (size_t)xk);
    if (st == BFP8_OK) st = bfp8_cuda_upload(db, bias, sizeof bias);
    memset(y, 0xFF, sizeof(uint16_t) * M * N);
    if (st == BFP8_OK) st = bfp8_cuda_upload(dy, y, sizeof(uint16_t) * M * N); /* poison */
    bfp8_linear_args a = {.x = dx, .x_dtype = BFP8_DTYPE_F32, .m = M, .bias = db, .bias_dtype = BFP8_DTYPE_BF16,
                          .y = dy, .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CUDA};
    if (st == BFP8_OK) st = ranks ? bfp8_tp_linear(NULL, w, &sh, &a, comm) : bfp8_linear(NULL, w, &a);
    if (st == BFP8_OK) st = bfp8_cuda_synchronize(NULL);
    if (st == BFP8_OK) st = bfp8_cuda_download(y, dy, sizeof(uint16_t) * M * N);
    bfp8_cuda_free(dx), bfp8_cuda_free(dy), bfp8_cuda_free(db);
    free(xs);
    bfp8_weight_free(w);
    return st;
}

/* One rank's process: both modes, compared with the unsharded layer on the same GPU. Returns failures. */
static int run_rank(int ranks, int rank, ncclUniqueId id, uint64_t seed) {
    cudaSetDevice(rank);
    make_layer(seed);
    ncclComm_t comm;
    if (nccl->comm_init_rank(&comm, ranks, id, rank) != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
        return 1;
    }
    static uint16_t y1[M * N], yt[M * N];
    CHECK_OK(run_layer(BFP8_TP_COLUMN, 0, 0, comm, y1));
    for (int mode = 0; mode < BFP8_TP_MODE_COUNT; mode++) {
        CHECK_OK(run_layer(mode, ranks, rank, comm, yt));
        double num = 0, den = 0;
        int64_t nan = 0;
        for (int i = 0; i < M * N; i++) {
            float a = bfp8_bf16_to_f32(yt[i]), b = bfp8_bf16_to_f32(y1[i]);
            nan += isnan(a);
            num += (double)(a - b) * (a - b), den += (double)b * b;
        }
        CHECK(nan == 0, "%s TP=%d rank %d: %" PRId64 " outputs unwritten", bfp8_tp_mode_name(mode), ranks, rank, nan);
        if (mode == BFP8_TP_COLUMN)
            CHECK(memcmp(yt, y1, sizeof yt) == 0, "column TP=%d rank %d: not bit-identical", ranks, rank);
        else
            CHECK(sqrt(num / den) < 8e-3, "row TP=%d rank %d: rel %.3g vs unsharded", ranks, rank, sqrt(num / den));
        printf("rank %d: %s TP=%d rel vs unsharded %.3g\n", rank, bfp8_tp_mode_name(mode), ranks, sqrt(num / den));
    }
    nccl->comm_destroy(comm);
    return check_failed_;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--rank") == 0) { /* a child: rank, unique id (hex), seed */
        ncclUniqueId id;
        for (size_t i = 0; i < sizeof id; i++) {
            unsigned v = 0;
            sscanf(argv[3] + 2 * i, "%2x", &v);
            ((unsigned char *)&id)[i] = (unsigned char)v;
        }
        if (!(nccl = test_nccl_load(NULL, 0))) return 1;
        int failed = run_rank(2, atoi(argv[2]), id, strtoull(argv[4], NULL, 10));
        printf("rank %s: %d passed, %d failed\n", argv[2], check_passed_, failed);
        return failed ? 1 : 0;
    }
    uint64_t seed = test_seed();
    char why[256];
    if (!bfp8_cuda_available(why, sizeof why)) {
        printf("test_tp_cuda: skipped (%s)\n0 passed, 0 failed\n", why);
        return 0;
    }
    if (!(nccl = test_nccl_load(why, sizeof why))) {
        printf("test_tp_cuda: skipped (%s)\n0 passed, 0 failed\n", why);
        return 0;
    }
    int gpus = 0;
    cudaGetDeviceCount(&gpus);
    int ranks = gpus >= 2 ? 2 : 1;
    ncclUniqueId id;
    nccl->get_unique_id(&id);
    if (ranks == 1) {
        run_rank(1, 0, id, seed);
        return TEST_SUMMARY("test_tp_cuda (TP=1, one GPU)");
    }
    /* Two processes, each exec'ed afresh (a forked child may not use the CUDA state of its parent); the parent holds
     * NCCL's bootstrap root for the unique id and waits. */
    char hex[2 * sizeof id + 1], seed_s[32];
    for (size_t i = 0; i < sizeof id; i++) sprintf(hex + 2 * i, "%02x", ((unsigned char *)&id)[i]);
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char rank_s[8];
            snprintf(rank_s, sizeof rank_s, "%d", r);
            execl("/proc/self/exe", "test_tp_cuda", "--rank", rank_s, hex, seed_s, (char *)NULL);
            _exit(127);
        }
    }
    for (int r = 0; r < 2; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d failed (status %d)", r, status);
    }
    return TEST_SUMMARY("test_tp_cuda (TP=2, two processes)");
}
#endif
