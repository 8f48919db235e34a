/* `blockfp8 bench --tp R`: DeepSeek-R1 layers tensor-parallel over R GPUs of one host, each split as the engines
 * split it, timed against NCCL's own collective on buffers of the same sizes in the same run, and against the
 * unsharded layer on one GPU.
 *
 * One process, one thread per GPU, the communicators from ncclCommInitAll. One thread per GPU, not one for all: an
 * NCCL call may wait on the host for the other ranks, so one thread driving every GPU would have to wrap the ranks'
 * calls in ncclGroupStart/End, which defers each collective to the group's end, past the stream work that
 * bfp8_tp_linear posts after it to read its result. One process, not one per GPU: no unique id to pass around,
 * the host data made once, one table, and a failed setup (memory, a backend that cannot run the layer) agreed on by
 * every rank at a barrier before any collective is posted, where a rank that failed alone would leave the others
 * spinning in a collective. Without R GPUs or NCCL the command says what is missing and exits with 1; --dry-run
 * prints the plans and the bytes without either. */
#include "bench_tp.h"
#include "common/nccl_dl.h"
#include "cuda_timer.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef BFP8_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

static const char USAGE[] =
    "usage: blockfp8 bench --tp R [--layer LIST|all] [--m LIST] [--out-dtype bf16|fp16|fp32]\n"
    "                      [--scale-format fp32|ue8m0] [--backend NAME] [--share-blocks] [--iters N] [--warmup N]\n"
    "                      [--l2 clean|dirty|keep] [--json FILE] [--seed S] [--dry-run]\n"
    "\n"
    "Runs DeepSeek-R1 layers tensor-parallel over R GPUs of this host (one thread per GPU, NCCL communicators from\n"
    "ncclCommInitAll), each split as SGLang and vLLM split it: q_b, kv_b and the gate_up layers column-parallel\n"
    "(all-gather), o_proj and the down layers row-parallel (fp32 all-reduce). Random FP8 weights of the real shapes,\n"
    "bf16 inputs, no bias. Per layer and M, each time the slowest rank's median of --iters runs (CUDA events, the\n"
    "L2 flushed before each):\n"
    "  1gpu_us   the unsharded layer on GPU 0 (bfp8_linear); speedup = 1gpu_us / tp_us\n"
    "  tp_us     the layer on R GPUs (bfp8_tp_linear: the rank's GEMM, then the collective, on one stream)\n"
    "  gemm_us   the rank's GEMM alone (bfp8_tp_linear_local)\n"
    "  nccl_us   the baseline: NCCL's all-gather or all-reduce alone, in place, on buffers of the layer's count and\n"
    "            dtype, on the same communicators and streams\n"
    "  coll_MB   the bytes the collective moves: its buffer, what nccl-tests calls the size (the gathered y, or the\n"
    "            fp32 partial reduced)\n"
    "  nccl_busbw, tp_busbw   nccl-tests' bus bandwidth in GB/s: size / time x (R-1)/R for an all-gather, x 2(R-1)/R\n"
    "            for an all-reduce; for NCCL alone (nccl_us), and for the layer's communication (tp_us - gemm_us)\n"
    "  check     rank 0's y against the unsharded layer: 'same' (bit-identical) or the relative error, which\n"
    "            must be within the output dtype's tolerance (FAIL and exit status 1 otherwise)\n"
    "\n"
    "  --tp R            ranks, one GPU each (2..8)\n"
    "  --layer LIST      q_b,kv_b,o_proj,mlp.gate_up,mlp.down,shared.gate_up,shared.down or all\n"
    "                    (default mlp.gate_up,mlp.down: the dense MLP, one split of each kind)\n"
    "  --m LIST          tokens (default 1,16,64,128,512,4096)\n"
    "  --out-dtype T     bf16 (default), fp16 or fp32\n"
    "  --scale-format F  fp32 (default) or ue8m0\n"
    "  --backend NAME    prefer NAME for the GEMMs (default: auto, or BFP8_BACKEND)\n"
    "  --share-blocks    split layers whose slices cut a 128-block (padded, the scale block shared)\n"
    "  --iters N, --warmup N   timed and untimed runs per measurement (default 50 and 5)\n"
    "  --l2 F            clean (default), dirty or keep (as blockfp8 bench --help says)\n"
    "  --json FILE       one record per cell, each rank's times included\n"
    "  --seed S          random data seed (default: fresh)\n"
    "  --dry-run         print each cell's split and the bytes its collective moves, and exit (needs no GPU)\n";

enum { MAX_MS = 16, MAX_RANKS = 8 };

typedef struct tp_opts {
    int ranks;
    int layers[CLI_DSR1_LAYER_COUNT];
    int nlayers;
    int64_t ms[MAX_MS];
    int nms;
    bfp8_dtype out_dtype;
    bfp8_scale_format format;
    const char *backend, *json_path;
    unsigned flags;
    int64_t iters, warmup, seed;
    cli_l2_flush l2;
    bool dry_run;
} tp_opts;

static int parse(int argc, char **argv, tp_opts *o) {
    const char *cmd = "bench", *layers = "mlp.gate_up,mlp.down", *ms = "1,16,64,128,512,4096";
    int64_t ranks = 0;
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_opt(argc, argv, &i, "--tp", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--tp", v, 2, MAX_RANKS, &ranks)) != CLI_OK) return rc;
        } else if (cli_opt(argc, argv, &i, "--layer", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--layer needs a list of layers or all");
            layers = v;
        } else if (cli_opt(argc, argv, &i, "--m", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--m needs a list");
            ms = v;
        } else if (cli_opt(argc, argv, &i, "--out-dtype", &v)) {
            if (!v || !cli_parse_out_dtype(v, &o->out_dtype))
                return cli_usage_error(cmd, USAGE, "--out-dtype: '%s' is not bf16, fp16 or fp32", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            if (!v || bfp8_scale_format_parse(v, &o->format) != BFP8_OK)
                return cli_usage_error(cmd, USAGE, "--scale-format: '%s' is not fp32 or ue8m0", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--backend", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--backend needs a name");
            o->backend = v;
        } else if (strcmp(argv[i], "--share-blocks") == 0) {
            o->flags |= BFP8_SHARD_SHARE_BLOCKS;
        } else if (cli_opt(argc, argv, &i, "--iters", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--iters", v, 1, 100000, &o->iters)) != CLI_OK) return rc;
        } else if (cli_opt(argc, argv, &i, "--warmup", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--warmup", v, 0, 100000, &o->warmup)) != CLI_OK) return rc;
        } else if (cli_opt(argc, argv, &i, "--l2", &v)) {
            if (v && strcmp(v, "clean") == 0) o->l2 = CLI_L2_CLEAN;
            else if (v && strcmp(v, "dirty") == 0) o->l2 = CLI_L2_DIRTY;
            else if (v && strcmp(v, "keep") == 0) o->l2 = CLI_L2_KEEP;
            else return cli_usage_error(cmd, USAGE, "--l2: '%s' is not clean, dirty or keep", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--json", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--json needs a file name");
            o->json_path = v;
        } else if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--seed", v, 0, INT64_MAX, &o->seed)) != CLI_OK) return rc;
        } else if (strcmp(argv[i], "--dry-run") == 0) {
            o->dry_run = true;
        } else {
            return cli_usage_error(cmd, USAGE, "unknown option '%s'", argv[i]);
        }
    }
    o->ranks = (int)ranks;
    char why[256];
    if (!cli_tp_parse_layers(layers, o->layers, CLI_DSR1_LAYER_COUNT, &o->nlayers, why, sizeof why))
        return cli_usage_error(cmd, USAGE, "--layer: %s", why);
    if (!cli_parse_i64_list(ms, 1, CLI_MAX_DIM, o->ms, MAX_MS, &o->nms) || o->nms == 0)
        return cli_usage_error(cmd, USAGE, "--m: '%s' is not a list of up to %d token counts (1 or more)", ms, MAX_MS);
    return CLI_OK;
}

static const char *collective_name(int mode) { return mode == BFP8_TP_COLUMN ? "all-gather" : "all-reduce"; }

/* Whether the library splits the layer over the ranks; if not, its refusal in `why`. */
static bool layer_splits(const tp_opts *o, const cli_dsr1_layer *L, char *why, size_t why_size) {
    cli_tp_cell c;
    if (cli_tp_cell_plan(L, 1, o->ranks, o->flags, o->out_dtype, &c) == BFP8_OK) return true;
    snprintf(why, why_size, "%s", bfp8_last_error());
    return false;
}

static int dry_run(const tp_opts *o) {
    printf("# blockfp8 bench --tp %d --dry-run: each cell's split and what its collective moves (nothing runs)\n",
           o->ranks);
    printf("%-15s %-7s %6s %6s %6s  %-16s %-11s %12s %-5s %12s\n", "layer", "mode", "M", "N", "K", "local weight",
           "collective", "count/rank", "dtype", "bytes");
    for (int li = 0; li < o->nlayers; li++) {
        const cli_dsr1_layer *L = &CLI_DSR1_LAYERS[o->layers[li]];
        char why[BFP8_REASON_MAX];
        if (!layer_splits(o, L, why, sizeof why)) {
            printf("%-15s %-7s n/a: %s\n", L->name, bfp8_tp_mode_name(L->tp_mode), why);
            continue;
        }
        for (int mi = 0; mi < o->nms; mi++) {
            cli_tp_cell c;
            bfp8_status st = cli_tp_cell_plan(L, o->ms[mi], o->ranks, o->flags, o->out_dtype, &c);
            if (st != BFP8_OK) return cli_lib_error("bench", L->name, st);
            char local[40]; /* rank 0's (with shared blocks the others' have a pad in front) */
            snprintf(local, sizeof local, "[%" PRId64 ", %" PRId64 "]", c.shard.n_local, c.shard.k_local);
            printf("%-15s %-7s %6" PRId64 " %6" PRId64 " %6" PRId64 "  %-16s %-11s %12" PRId64 " %-5s %12" PRId64 "\n",
                   L->name, bfp8_tp_mode_name(L->tp_mode), c.m, L->n, L->k, local, collective_name(L->tp_mode),
                   c.traffic.count, bfp8_dtype_name(c.traffic.dtype), c.traffic.bytes);
        }
    }
    return CLI_OK;
}

/* Whether this host has R GPUs and NCCL; else what is missing, in `why`. */
static bool host_can_run(int ranks, char *why, size_t why_size) {
    char gpus[300] = "", nccl[300] = "", reason[256] = "";
    if (!bfp8_cuda_available(reason, sizeof reason)) {
        snprintf(gpus, sizeof gpus, "GPUs: none usable (%s)", reason);
    } else {
        int count = 0;
#ifdef BFP8_WITH_CUDA
        if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
#endif
        if (count < ranks) snprintf(gpus, sizeof gpus, "GPUs: %d found", count);
    }
    if (!test_nccl_load(reason, sizeof reason)) snprintf(nccl, sizeof nccl, "NCCL: %s", reason);
    if (!gpus[0] && !nccl[0]) return true;
    snprintf(why, why_size, "--tp %d needs %d CUDA GPUs in this host and NCCL (libnccl.so.2); missing: %s%s%s", ranks,
             ranks, gpus, gpus[0] && nccl[0] ? "; " : "", nccl);
    return false;
}

#ifdef TEST_HAVE_NCCL
/* ---------------------------------------------------------------------------------------------------------------
 * The run on the GPUs
 * ------------------------------------------------------------------------------------------------------------- */
/* A layer's host data, made once: the whole weight and an input of the largest M. */
typedef struct host_layer {
    const cli_dsr1_layer *L;
    uint8_t *q;
    float *s;
    uint16_t *x; /* bf16 [max_m, k] */
} host_layer;

/* What each rank measured in one cell (microseconds; 1gpu on rank 0 only) and rank 0's check. */
typedef struct cell_result {
    double one_gpu, gemm, nccl, tp;
} cell_result;

typedef struct tp_run {
    const tp_opts *o;
    const test_nccl *nccl;
    ncclComm_t comms[MAX_RANKS];
    host_layer layers[CLI_DSR1_LAYER_COUNT];
    int64_t max_m;
    pthread_barrier_t barrier;
    bool failed[MAX_RANKS];               /* written before a barrier, read after it */
    char why[MAX_RANKS][BFP8_REASON_MAX]; /* a rank's failure */
    cell_result result[MAX_RANKS];        /* the current cell's */
    FILE *json;
    int records, rc;
} tp_run;

/* Every rank says whether its setup worked; all learn whether every one did, before any collective is posted. */
static bool agree(tp_run *R, int rank, bool ok) {
    R->failed[rank] = !ok;
    pthread_barrier_wait(&R->barrier);
    bool all = true;
    for (int r = 0; r < R->o->ranks; r++) all = all && !R->failed[r];
    pthread_barrier_wait(&R->barrier); /* nobody writes failed[] again before everyone has read it */
    return all;
}

/* A failure once collectives are posted: the other ranks may be waiting in one that this rank will never join,
 * and nothing can call them back, so the process ends here (a command-line tool may; the library never does). */
static void die(int rank, const char *what, bfp8_status st, const char *why) {
    fprintf(stderr, "blockfp8 bench: rank %d: %s: %s: %s\n", rank, what, bfp8_status_name(st),
            why && why[0] ? why : bfp8_last_error());
    fflush(stdout);
    fflush(stderr);
    _exit(CLI_FAIL);
}

/* One timed thing. */
typedef struct tp_call {
    bfp8_dispatcher *d;
    const bfp8_weight *w;
    const bfp8_shard *shard;
    bfp8_linear_args args;
    ncclComm_t comm;
    /* the NCCL baseline */
    const test_nccl *nccl;
    int mode, rank;
    void *buf;
    size_t count, elem_size;
    ncclDataType_t dtype;
    char nccl_why[160];
} tp_call;

static bfp8_status call_linear(void *ctx) {
    tp_call *c = ctx;
    return bfp8_linear(c->d, c->w, &c->args);
}

static bfp8_status call_local(void *ctx) {
    tp_call *c = ctx;
    return bfp8_tp_linear_local(c->d, c->w, c->shard, &c->args);
}

static bfp8_status call_tp(void *ctx) {
    tp_call *c = ctx;
    return bfp8_tp_linear(c->d, c->w, c->shard, &c->args, c->comm);
}

/* In place, as bfp8_tp_linear runs it: each rank's section of the gathered buffer is its send buffer. */
static bfp8_status call_nccl(void *ctx) {
    tp_call *c = ctx;
    cudaStream_t s = (cudaStream_t)c->args.stream;
    ncclResult_t r = c->mode == BFP8_TP_COLUMN
                         ? c->nccl->all_gather((char *)c->buf + (size_t)c->rank * c->count * c->elem_size, c->buf,
                                               c->count, c->dtype, c->comm, s)
                         : c->nccl->all_reduce(c->buf, c->buf, c->count, ncclFloat32, ncclSum, c->comm, s);
    if (r == ncclSuccess) return BFP8_OK;
    snprintf(c->nccl_why, sizeof c->nccl_why, "%s: %s", c->mode == BFP8_TP_COLUMN ? "ncclAllGather" : "ncclAllReduce",
             c->nccl->error_string(r));
    return BFP8_ERR_DEVICE;
}

static double timed(const tp_run *R, int rank, const char *what, tp_call *c, bfp8_status (*fn)(void *)) {
    double *t = malloc(sizeof(double) * (size_t)R->o->iters);
    char why[BFP8_REASON_MAX] = "";
    if (!t) die(rank, what, BFP8_ERR_OUT_OF_MEMORY, "the timings");
    c->nccl_why[0] = '\0';
    bfp8_status st = cli_cuda_time(fn, c, (int)R->o->warmup, (int)R->o->iters, R->o->l2, c->args.stream, t, why,
                                   sizeof why);
    if (st != BFP8_OK) die(rank, what, st, c->nccl_why[0] ? c->nccl_why : why);
    double median = cli_median(t, (int)R->o->iters);
    free(t);
    return median;
}

static ncclDataType_t nccl_dtype(bfp8_dtype dt) {
    return dt == BFP8_DTYPE_BF16 ? ncclBfloat16 : dt == BFP8_DTYPE_F16 ? ncclFloat16 : ncclFloat32;
}

/* Rank 0's y against the unsharded layer's: the relative error (-1 when a copy fails), and whether the bytes are
 * the same. Column is bit-identical where the rank's GEMM and the unsharded one run on the same backend (auto may
 * rank another for the narrower local N); row sums its fp32 partials in another order. Either must be within the
 * output dtype's tolerance. */
static double check_y(const void *d_tp, const void *d_one, bfp8_dtype dt, int64_t count, bool *identical) {
    size_t bytes = (size_t)count * bfp8_dtype_size(dt);
    void *a = malloc(bytes ? bytes : 1), *b = malloc(bytes ? bytes : 1);
    double e = -1;
    if (a && b && bfp8_cuda_download(a, d_tp, bytes) == BFP8_OK && bfp8_cuda_download(b, d_one, bytes) == BFP8_OK) {
        *identical = memcmp(a, b, bytes) == 0;
        test_frobenius f = {0};
        for (int64_t i = 0; i < count; i++) test_frobenius_add(&f, test_load_f32(a, dt, i), test_load_f32(b, dt, i));
        e = test_frobenius_value(&f);
    }
    free(a);
    free(b);
    return e;
}

/* Rank 0 prints the cell (every rank's results are in by the barrier before). */
static void report(tp_run *R, const cli_tp_cell *c, double err, bool identical) {
    const tp_opts *o = R->o;
    const cli_dsr1_layer *L = c->layer;
    cell_result worst = R->result[0];
    for (int r = 1; r < o->ranks; r++) {
        worst.gemm = fmax(worst.gemm, R->result[r].gemm);
        worst.nccl = fmax(worst.nccl, R->result[r].nccl);
        worst.tp = fmax(worst.tp, R->result[r].tp);
    }
    double bytes = (double)c->traffic.bytes;
    double nccl_bw = cli_bus_bandwidth(L->tp_mode, o->ranks, bytes, worst.nccl);
    double tp_bw = cli_bus_bandwidth(L->tp_mode, o->ranks, bytes, worst.tp - worst.gemm);
    bool ok = err >= 0 && err <= test_tolerance(o->out_dtype, BFP8_DEVICE_CUDA);
    char check[32];
    if (err < 0) snprintf(check, sizeof check, "FAIL (copy)");
    else if (identical) snprintf(check, sizeof check, "same");
    else snprintf(check, sizeof check, "%s%.1e", ok ? "" : "FAIL ", err);
    if (!ok) R->rc = CLI_FAIL;
    printf("%-15s %-7s %6" PRId64 " %6" PRId64 " %6" PRId64 " %9.1f %9.1f %7.2fx %9.1f %9.1f %10.3f %10.1f %9.1f  %s\n",
           L->name, bfp8_tp_mode_name(L->tp_mode), c->m, L->n, L->k, worst.one_gpu, worst.tp, worst.one_gpu / worst.tp,
           worst.gemm, worst.nccl, bytes * 1e-6, nccl_bw, tp_bw, check);
    fflush(stdout);
    if (!R->json) return;
    fprintf(R->json, "%s\n  {\"layer\": \"%s\", \"mode\": \"%s\", \"ranks\": %d, \"m\": %" PRId64 ", \"n\": %" PRId64
                     ", \"k\": %" PRId64 ", \"out_dtype\": \"%s\", \"scale_format\": \"%s\", \"one_gpu_us\": %.3f, "
                     "\"tp_us\": %.3f, \"gemm_us\": %.3f, \"nccl_us\": %.3f, \"collective\": \"%s\", "
                     "\"bytes\": %" PRId64
                     ", \"count_per_rank\": %" PRId64 ", \"nccl_busbw_gbs\": %.3f, \"tp_busbw_gbs\": %.3f, "
                     "\"check\": \"%s\", \"ranks_us\": [",
            R->records++ ? "," : "", L->name, bfp8_tp_mode_name(L->tp_mode), o->ranks, c->m, L->n, L->k,
            bfp8_dtype_name(o->out_dtype), bfp8_scale_format_name(o->format), worst.one_gpu, worst.tp, worst.gemm,
            worst.nccl, collective_name(L->tp_mode), c->traffic.bytes, c->traffic.count, nccl_bw, tp_bw, check);
    for (int r = 0; r < o->ranks; r++)
        fprintf(R->json, "%s{\"tp\": %.3f, \"gemm\": %.3f, \"nccl\": %.3f}", r ? ", " : "", R->result[r].tp,
                R->result[r].gemm, R->result[r].nccl);
    fputs("]}", R->json);
}

/* Device buffers of one rank for one cell, freed together. */
typedef struct cell_buffers {
    void *x, *y, *y_local, *coll, *x_full, *y_full;
} cell_buffers;

static void cell_free(cell_buffers *b) {
    void *all[] = {b->x, b->y, b->y_local, b->coll, b->x_full, b->y_full};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) bfp8_cuda_free(all[i]);
    *b = (cell_buffers){0};
}

/* x rows [0, m), columns [begin, end) of the layer's bf16 input, on this rank's GPU. */
static bfp8_status upload_x(const host_layer *H, int64_t m, int64_t begin, int64_t end, void **out) {
    int64_t w = end - begin;
    uint16_t *tmp = malloc(sizeof(uint16_t) * (size_t)(m * w + 1));
    if (!tmp) return BFP8_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < m; i++) memcpy(tmp + i * w, H->x + i * H->L->k + begin, sizeof(uint16_t) * (size_t)w);
    bfp8_status st = test_dev_upload(tmp, sizeof(uint16_t) * (size_t)(m * w), out);
    free(tmp);
    return st;
}

typedef struct rank_arg {
    tp_run *R;
    int rank;
} rank_arg;

static void *rank_main(void *arg) {
    tp_run *R = ((rank_arg *)arg)->R;
    const int rank = ((rank_arg *)arg)->rank;
    const tp_opts *o = R->o;
    char *why = R->why[rank];
    bfp8_dispatcher *d = NULL;
    cudaStream_t stream = NULL;
    bfp8_status st = BFP8_OK;
    cudaError_t err = cudaSetDevice(rank);
    /* A stream of its own: NCCL's calls and the legacy default stream's implicit synchronization do not mix. */
    if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) snprintf(why, BFP8_REASON_MAX, "GPU %d: %s", rank, cudaGetErrorString(err));
    if (err == cudaSuccess && ((st = bfp8_dispatcher_create_default(&d)) != BFP8_OK ||
                               (st = cli_apply_policy(d, o->backend, false)) != BFP8_OK))
        snprintf(why, BFP8_REASON_MAX, "dispatcher: %s", bfp8_last_error());
    bool ok = agree(R, rank, err == cudaSuccess && st == BFP8_OK);
    for (int li = 0; li < o->nlayers && ok; li++) {
        const host_layer *H = &R->layers[li];
        const cli_dsr1_layer *L = H->L;
        if (!H->q) continue; /* a split the library refuses: reported by the main thread */
        const bfp8_tp_mode mode = (bfp8_tp_mode)L->tp_mode;
        bfp8_shard shard;
        bfp8_weight *w = NULL, *whole = NULL;
        bfp8_scales s;
        st = bfp8_scales_init(&s, o->format, BFP8_LAYOUT_ROW_MAJOR, (L->n + 127) / 128, (L->k + 127) / 128, H->s);
        if (st == BFP8_OK) st = bfp8_shard_plan(L->n, L->k, mode, o->ranks, rank, o->flags, &shard);
        if (st == BFP8_OK) st = bfp8_weight_shard(H->q, &s, &shard, &w);
        if (st == BFP8_OK) st = bfp8_weight_prepare(w, d, NULL);
        if (st == BFP8_OK && rank == 0) st = bfp8_weight_create(H->q, L->n, L->k, &s, &whole);
        if (st == BFP8_OK && rank == 0) st = bfp8_weight_prepare(whole, d, NULL);
        if (st != BFP8_OK) snprintf(why, BFP8_REASON_MAX, "%s: weights: %s", L->name, bfp8_last_error());
        ok = agree(R, rank, st == BFP8_OK);
        for (int mi = 0; mi < o->nms && ok; mi++) {
            const int64_t m = o->ms[mi];
            cli_tp_cell c;
            cell_buffers b = {0};
            st = cli_tp_cell_plan(L, m, o->ranks, o->flags, o->out_dtype, &c);
            const size_t ys = bfp8_dtype_size(o->out_dtype);
            const size_t local_bytes = mode == BFP8_TP_COLUMN ? (size_t)(m * shard.n_local) * ys
                                                              : (size_t)(m * L->n) * sizeof(float);
            const size_t coll_elems = mode == BFP8_TP_COLUMN ? (size_t)o->ranks * (size_t)c.traffic.count
                                                             : (size_t)c.traffic.count;
            if (st == BFP8_OK) st = upload_x(H, m, mode == BFP8_TP_ROW ? shard.begin : 0,
                                             mode == BFP8_TP_ROW ? shard.end : L->k, &b.x);
            if (st == BFP8_OK) st = test_dev_filled((size_t)(m * L->n) * ys, 0xFF, &b.y); /* poisoned: NaN */
            if (st == BFP8_OK) st = test_dev_upload(NULL, local_bytes, &b.y_local);
            if (st == BFP8_OK) st = test_dev_filled(coll_elems * bfp8_dtype_size(c.traffic.dtype), 0, &b.coll);
            if (st == BFP8_OK && rank == 0) st = upload_x(H, m, 0, L->k, &b.x_full);
            if (st == BFP8_OK && rank == 0) st = test_dev_filled((size_t)(m * L->n) * ys, 0xFF, &b.y_full);
            if (st != BFP8_OK)
                snprintf(why, BFP8_REASON_MAX, "%s M=%" PRId64 ": buffers: %s", L->name, m, bfp8_last_error());
            ok = agree(R, rank, st == BFP8_OK);
            if (!ok) {
                cell_free(&b);
                break;
            }
            const bfp8_linear_args base = {.x_dtype = BFP8_DTYPE_BF16, .m = m, .y_dtype = o->out_dtype,
                                           .device = BFP8_DEVICE_CUDA, .stream = stream};
            tp_call call = {.d = d, .w = w, .shard = &shard, .args = base, .comm = R->comms[rank], .nccl = R->nccl,
                            .mode = mode, .rank = rank, .buf = b.coll, .count = (size_t)c.traffic.count,
                            .elem_size = bfp8_dtype_size(c.traffic.dtype), .dtype = nccl_dtype(c.traffic.dtype)};
            cell_result *res = &R->result[rank];
            *res = (cell_result){0};
            if (rank == 0) { /* the unsharded layer; the other GPUs wait at the barrier */
                tp_call one = call;
                one.w = whole, one.args.x = b.x_full, one.args.y = b.y_full;
                fprintf(stderr, "\rbench: %s M=%" PRId64 ": 1 GPU   ", L->name, m);
                res->one_gpu = timed(R, rank, "the unsharded layer", &one, call_linear);
            }
            pthread_barrier_wait(&R->barrier);
            call.args.x = b.x, call.args.y = b.y_local;
            call.args.y_dtype = mode == BFP8_TP_COLUMN ? o->out_dtype : BFP8_DTYPE_F32;
            if (rank == 0) fprintf(stderr, "\rbench: %s M=%" PRId64 ": GEMM    ", L->name, m);
            res->gemm = timed(R, rank, "bfp8_tp_linear_local", &call, call_local);
            pthread_barrier_wait(&R->barrier);
            if (rank == 0) fprintf(stderr, "\rbench: %s M=%" PRId64 ": NCCL    ", L->name, m);
            res->nccl = timed(R, rank, "NCCL alone", &call, call_nccl);
            call.args.y = b.y, call.args.y_dtype = o->out_dtype;
            if (rank == 0) fprintf(stderr, "\rbench: %s M=%" PRId64 ": TP      ", L->name, m);
            res->tp = timed(R, rank, "bfp8_tp_linear", &call, call_tp);
            pthread_barrier_wait(&R->barrier); /* every rank's results are in */
            if (rank == 0) {
                fprintf(stderr, "\r%40s\r", "");
                bool identical = false;
                double e = check_y(b.y, b.y_full, o->out_dtype, m * L->n, &identical);
                report(R, &c, e, identical);
            }
            cell_free(&b);
            pthread_barrier_wait(&R->barrier);
        }
        bfp8_weight_free(w);
        bfp8_weight_free(whole);
    }
    if (stream) cudaStreamDestroy(stream);
    bfp8_dispatcher_free(d);
    R->nccl->comm_destroy(R->comms[rank]); /* each rank its own, as one process per rank would */
    return NULL;
}

static void layers_free(tp_run *R) {
    for (int i = 0; i < R->o->nlayers; i++) free(R->layers[i].q), free(R->layers[i].s), free(R->layers[i].x);
}

static int run_on_gpus(const tp_opts *o, const test_nccl *nccl) {
    const char *cmd = "bench";
    tp_run *R = calloc(1, sizeof *R);
    if (!R) return cli_error(CLI_FAIL, cmd, "out of memory");
    R->o = o, R->nccl = nccl;
    for (int i = 0; i < o->nms; i++) R->max_m = o->ms[i] > R->max_m ? o->ms[i] : R->max_m;
    uint64_t seed = o->seed ? (uint64_t)o->seed : test_seed_fresh();
    test_rng rng;
    test_rng_init(&rng, seed);
    int rc = CLI_OK;
    /* The host data, once; a layer whose split is refused is reported here and left out. */
    for (int li = 0; li < o->nlayers && rc == CLI_OK; li++) {
        host_layer *H = &R->layers[li];
        H->L = &CLI_DSR1_LAYERS[o->layers[li]];
        char why[BFP8_REASON_MAX];
        if (!layer_splits(o, H->L, why, sizeof why)) {
            printf("%-15s %-7s n/a: %s\n", H->L->name, bfp8_tp_mode_name(H->L->tp_mode), why);
            continue;
        }
        fprintf(stderr, "bench: random %s weight [%" PRId64 ", %" PRId64 "]...\n", H->L->name, H->L->n, H->L->k);
        int64_t n = H->L->n, k = H->L->k;
        H->q = malloc((size_t)(n * k));
        H->s = malloc(sizeof(float) * (size_t)(((n + 127) / 128) * ((k + 127) / 128)));
        H->x = malloc(sizeof(uint16_t) * (size_t)(R->max_m * k));
        if (!H->q || !H->s || !H->x) {
            rc = cli_error(CLI_FAIL, cmd, "out of memory for the %s layer's host data", H->L->name);
            break;
        }
        test_rng_fill_fp8(&rng, H->q, n * k);
        test_rng_fill_pow2(&rng, H->s, ((n + 127) / 128) * ((k + 127) / 128), -8); /* valid in both formats */
        test_rng_fill_normal(&rng, H->x, BFP8_DTYPE_BF16, R->max_m * k, 1.0f);
    }
    if (rc == CLI_OK && o->json_path && !(R->json = cli_json_open(cmd, o->json_path))) rc = CLI_FAIL;
    ncclResult_t nr = ncclSuccess;
    if (rc == CLI_OK && (nr = nccl->comm_init_all(R->comms, o->ranks, NULL)) != ncclSuccess)
        rc = cli_error(CLI_FAIL, cmd, "ncclCommInitAll over %d GPUs: %s", o->ranks, nccl->error_string(nr));
    if (rc == CLI_OK) { /* from here every rank's thread runs, and destroys its communicator at its end */
        char names[MAX_RANKS * 64] = "";
        for (int r = 0; r < o->ranks; r++) {
            struct cudaDeviceProp p;
            if (cudaGetDeviceProperties(&p, r) != cudaSuccess) snprintf(p.name, sizeof p.name, "?");
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", r ? ", " : "", p.name);
        }
        int version = 0;
        nccl->get_version(&version);
        printf("# blockfp8 bench --tp %d: DeepSeek-R1 layers over %d GPUs (%s), NCCL %d.%d.%d, one thread per GPU; "
               "out %s, %s scales, %" PRId64 " warmup + %" PRId64 " timed runs (median), L2 %s, seed %" PRIu64 "\n",
               o->ranks, o->ranks, names, version / 10000, version / 100 % 100, version % 100,
               bfp8_dtype_name(o->out_dtype), bfp8_scale_format_name(o->format), o->warmup, o->iters,
               o->l2 == CLI_L2_CLEAN ? "flushed clean" : o->l2 == CLI_L2_DIRTY ? "flushed dirty" : "kept", seed);
        printf("# times: the slowest rank's median (1gpu: GPU 0); coll_MB: the collective's buffer; busbw: nccl-tests' "
               "bus bandwidth, GB/s\n");
        printf("%-15s %-7s %6s %6s %6s %9s %9s %8s %9s %9s %10s %10s %9s  %s\n", "layer", "mode", "M", "N", "K",
               "1gpu_us", "tp_us", "speedup", "gemm_us", "nccl_us", "coll_MB", "nccl_busbw", "tp_busbw", "check");
        pthread_barrier_init(&R->barrier, NULL, (unsigned)o->ranks);
        pthread_t threads[MAX_RANKS];
        rank_arg args[MAX_RANKS];
        int started = 0;
        for (; started < o->ranks; started++) {
            args[started] = (rank_arg){R, started};
            if (pthread_create(&threads[started], NULL, rank_main, &args[started]) != 0) break;
        }
        /* A thread that cannot start leaves the others at their first barrier: nothing has been posted yet. */
        if (started < o->ranks) {
            fprintf(stderr, "blockfp8 bench: cannot start the thread of rank %d\n", started);
            fflush(NULL);
            _exit(CLI_FAIL);
        }
        for (int r = 0; r < o->ranks; r++) pthread_join(threads[r], NULL);
        pthread_barrier_destroy(&R->barrier);
        for (int r = 0; r < o->ranks; r++)
            if (R->failed[r]) rc = cli_error(CLI_FAIL, cmd, "rank %d: %s", r, R->why[r]);
        if (rc == CLI_OK && R->rc != CLI_OK)
            rc = cli_error(CLI_FAIL, cmd, "a tensor-parallel result differs from the unsharded layer (check column)");
    }
    rc = cli_json_close(cmd, R->json, o->json_path, rc);
    layers_free(R);
    free(R);
    return rc;
}
#endif

int cmd_bench_tp(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
    tp_opts o = {.out_dtype = BFP8_DTYPE_BF16, .format = BFP8_SCALE_FP32, .iters = 50, .warmup = 5,
                 .l2 = CLI_L2_CLEAN};
    int rc = parse(argc, argv, &o);
    if (rc != CLI_OK) return rc;
    if (o.dry_run) return dry_run(&o);
    char why[1024];
    if (!host_can_run(o.ranks, why, sizeof why)) return cli_error(CLI_FAIL, "bench", "%s", why);
#ifdef TEST_HAVE_NCCL
    return run_on_gpus(&o, test_nccl_load(NULL, 0));
#else
    return cli_error(CLI_FAIL, "bench", "--tp: built without NCCL"); /* host_can_run said so already */
#endif
}
