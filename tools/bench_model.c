/* `blockfp8 bench --model dsr1`: the GEMMs of DeepSeek-R1's decoder layers, in model order, with the backend each
 * gets and its time: the attention projections, the dense MLP of layers 0-2, and the MoE of layers 3-60 (the shared
 * expert, and the 256 routed experts through the grouped GEMM with a skewed routing, tools/moe.h). The step is one
 * MoE decoder layer, split into its dense and its expert part; `--compare` runs every layer on the engines' slow
 * fallback beside it (the seed regression: every layer on the fallback kernel). Each layer's output is checked once
 * against `ref` on a sample of rows before it is timed, so a wrong kernel cannot produce a nice number. */
#include "moe.h"
#include "cuda_timer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "usage: blockfp8 bench --model dsr1 [--batch LIST] [--device cpu|cuda] [--backend NAME] [--compare]\n"
    "                      [--experts G] [--top-k K] [--skew S] [--moe-layout auto|masked|contiguous]\n"
    "                      [--scale-format fp32|ue8m0] [--iters N] [--json FILE] [--seed S]\n"
    "\n"
    "The GEMMs of DeepSeek-R1's decoder layers (no tensor or expert parallelism), in model order: attention\n"
    "(q_a+kv_a, q_b, kv_b, o_proj), the dense MLP of layers 0-2 (mlp.gate_up, mlp.down), and the MoE of layers\n"
    "3-60: the shared expert (shared.gate_up, shared.down, dense GEMMs) and the routed experts (experts.gate_up,\n"
    "experts.down: one grouped GEMM each over all G experts). Weights are random FP8 of the real shapes, resident on\n"
    "the device. Dense layers take a bf16 input quantized in the call (bfp8_linear); the grouped GEMMs take FP8\n"
    "activations (bfp8_grouped_gemm), as DeepEP's dispatch delivers them. Each layer's output is checked against\n"
    "`ref` on a sample of rows before it is timed (exit 1 beyond docs/numerics.md's tolerance). Prints per layer the\n"
    "backend and its median time, then the step, one MoE decoder layer (attention + shared expert + routed experts),\n"
    "with its dense and expert parts, the dense layer of layers 0-2, and the tokens/s of the 61 layers' GEMMs.\n"
    "Routing: each token picks top-k distinct experts, expert g drawn with weight (g+1)^-S (Zipf), each next one among\n"
    "those left; the batch's routing comes from --seed and the batch size alone, and the counts per expert are printed.\n"
    "  --batch LIST    tokens per step, comma-separated (default 1)\n"
    "  --device D      cpu (default) or cuda (CUDA events, L2 flushed before each run)\n"
    "  --backend NAME  prefer NAME (default: auto, or BFP8_BACKEND)\n"
    "  --compare       also run every layer on the fallback (cuda_generic on cuda, ref on cpu) and print the slowdown\n"
    "  --experts G     routed experts resident, 1..256 (default: 256, DeepSeek-R1's, on cuda; 32 on cpu, where 256\n"
    "                  experts' weights, 11 GB, take too long to run: the output says when G is not 256)\n"
    "  --top-k K       experts per token (default 8, DeepSeek-R1's; at most G)\n"
    "  --skew S        Zipf exponent of the routing, 0 (uniform) to 16 (default 0.5)\n"
    "  --moe-layout L  auto (default: masked for a batch up to 128, DeepEP's low-latency decode; contiguous above,\n"
    "                  its prefill mode), masked or contiguous\n"
    "  --scale-format F fp32 (default) or ue8m0\n"
    "  --iters N       timed runs per layer (default 5; on the cpu fewer when one run takes over a second)\n"
    "  --json FILE     one record per layer and batch, and one per step\n"
    "  --seed S        weights, inputs and routing (default 1)\n";

/* DeepSeek-R1: 61 decoder layers, the first 3 with a dense MLP, the other 58 with the MoE; 256 routed experts, 8
 * per token. */
enum { DSR1_DENSE_LAYERS = 3, DSR1_MOE_LAYERS = 58, DSR1_EXPERTS = 256, DSR1_TOP_K = 8 };
/* The largest batch the masked layout gets by default: DeepEP's low-latency buffers hold 128 tokens per rank. */
enum { MASKED_MAX_BATCH = 128 };
/* Routed experts of a cpu run by default: 32 x 44 MB of FP8 weights (all 256 are 11 GB). */
enum { CPU_EXPERTS = 32 };

typedef enum model_part { PART_ATTENTION, PART_DENSE_MLP, PART_SHARED, PART_EXPERTS, PART_COUNT } model_part;
static const char *const PART_NAME[PART_COUNT] = {"attention", "dense MLP", "shared", "experts"};
static const char *const PART_JSON[PART_COUNT] = {"attention", "dense_mlp", "shared_expert", "routed_experts"};

typedef struct model_layer {
    const char *name;
    model_part part;
    int64_t n, k;
} model_layer;

/* DeepSeek-R1's GEMMs, in the order a token meets them: the dense layers of CLI_DSR1_LAYERS (tools/dsr1_layers.c),
 * then the routed experts. */
enum { NUM_LAYERS = CLI_DSR1_LAYER_COUNT + 2, MAX_BATCHES = 16 };
static const model_part DENSE_PART[CLI_DSR1_LAYER_COUNT] = {
    PART_ATTENTION, PART_ATTENTION, PART_ATTENTION, PART_ATTENTION, PART_DENSE_MLP, PART_DENSE_MLP, PART_SHARED,
    PART_SHARED};
static const model_layer EXPERT_LAYERS[2] = {{"experts.gate_up", PART_EXPERTS, 4096, 7168},
                                             {"experts.down", PART_EXPERTS, 7168, 2048}};
static void model_layers(model_layer out[NUM_LAYERS]) {
    for (int l = 0; l < CLI_DSR1_LAYER_COUNT; l++)
        out[l] = (model_layer){CLI_DSR1_LAYERS[l].name, DENSE_PART[l], CLI_DSR1_LAYERS[l].n, CLI_DSR1_LAYERS[l].k};
    out[CLI_DSR1_LAYER_COUNT] = EXPERT_LAYERS[0], out[CLI_DSR1_LAYER_COUNT + 1] = EXPERT_LAYERS[1];
}
/* Rows of each layer compared with ref: dense, the first, middle and last token; grouped, the last token of up to
 * this many experts spread over those with tokens (the first and the last among them included). */
enum { CHECK_DENSE_ROWS = 3, CHECK_EXPERTS = 8 };

typedef struct opts {
    bfp8_device device;
    bfp8_scale_format format;
    bool compare;
    int64_t iters, seed, experts, top_k;
    double skew;
    bfp8_grouped_layout moe_layout; /* NONE: by batch */
} opts;

/* The weights of `groups` random [n, k] layers: FP8 codes (no NaN) and power-of-two scales (valid in both
 * formats) of the shape the weight takes, row-major, G matrices back to back. */
static bfp8_status random_codes(test_rng *rng, int64_t groups, int64_t n, int64_t k, uint8_t **q, float **s) {
    const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
    *q = malloc((size_t)(groups * n * k));
    *s = malloc(sizeof(float) * (size_t)(groups * nb * kb));
    if (!*q || !*s) {
        free(*q), free(*s);
        *q = NULL, *s = NULL;
        return BFP8_ERR_OUT_OF_MEMORY;
    }
    test_rng_fill_fp8(rng, *q, groups * n * k);
    test_rng_fill_pow2(rng, *s, groups * nb * kb, -8);
    return BFP8_OK;
}

/* A layer's weight: dense, or the G experts of a grouped layer. */
typedef struct layer_weight {
    bfp8_weight *dense;
    bfp8_grouped_weight *grouped;
} layer_weight;

/* Random weights of L's shape, prepared for the backends of d that run on o->device and for ref (the checks). */
static bfp8_status make_weight(const opts *o, const model_layer *L, test_rng *rng, bfp8_dispatcher *d,
                               layer_weight *w) {
    const bool grouped = L->part == PART_EXPERTS;
    const int64_t groups = grouped ? o->experts : 1, nb = (L->n + 127) / 128, kb = (L->k + 127) / 128;
    uint8_t *q;
    float *s;
    CLI_TRY(random_codes(rng, groups, L->n, L->k, &q, &s));
    bfp8_scales desc;
    bfp8_status st = bfp8_scales_init(&desc, o->format, BFP8_LAYOUT_ROW_MAJOR, nb, kb, s);
    if (st == BFP8_OK)
        st = grouped ? bfp8_grouped_weight_create(q, groups, L->n, L->k, &desc, &w->grouped)
                     : bfp8_weight_create(q, L->n, L->k, &desc, &w->dense);
    free(q), free(s);
    return st == BFP8_OK ? moe_weight_prepare(d, o->device, w->dense, w->grouped) : st;
}

/* ---- one layer's runs ------------------------------------------------------------------------------------- */

/* A dense layer's call, or a grouped one. */
typedef struct layer_call {
    bfp8_dispatcher *d;
    const bfp8_weight *w;
    bfp8_linear_args args;
    moe_call *grouped;
} layer_call;

static bfp8_status run_call(void *ctx) {
    layer_call *c = ctx;
    return c->grouped ? bfp8_grouped_gemm(c->d, &c->grouped->g) : bfp8_linear(c->d, c->w, &c->args);
}

static void *call_y(const layer_call *c) { return c->grouped ? c->grouped->g.y : c->args.y; }
static size_t call_y_bytes(const layer_call *c, int64_t n) {
    return (size_t)((c->grouped ? c->grouped->rows : c->args.m) * n) * 2; /* bf16 */
}

/* Median time of one call in µs: CUDA events with the L2 flushed before each run on the GPU (in a real step the
 * weight was evicted by the layers before it), wall clock on the CPU. A failure of the GPU timer itself is
 * described in `why` (left empty otherwise: bfp8_last_error() tells). */
static bfp8_status time_call(layer_call *c, bfp8_device device, int iters, double *median_us, char *why,
                             size_t why_size) {
    double times[64];
    if (iters > 64) iters = 64;
    why[0] = '\0';
    if (device == BFP8_DEVICE_CUDA) {
        bfp8_status st = cli_cuda_time(run_call, c, 2, iters, CLI_L2_CLEAN, NULL, times, why, why_size);
        if (st == BFP8_OK) *median_us = cli_median(times, iters);
        return st;
    }
    bfp8_status st = run_call(c); /* warm-up */
    int done = 0;
    double spent = 0;
    while (st == BFP8_OK && done < iters && (done == 0 || spent < 1.0)) {
        double t0 = cli_now();
        if ((st = run_call(c)) != BFP8_OK) break;
        times[done] = (cli_now() - t0) * 1e6;
        spent += times[done++] * 1e-6;
    }
    if (st == BFP8_OK) *median_us = cli_median(times, done);
    return st;
}

/* The rows of a layer's output compared with ref, and ref's values there (bf16, [count, n]). */
typedef struct check_rows {
    int64_t row[CHECK_EXPERTS > CHECK_DENSE_ROWS ? CHECK_EXPERTS : CHECK_DENSE_ROWS];
    int count;
    uint16_t *ref;
} check_rows;

/* Runs the call once on a poisoned output and returns the relative Frobenius error of the sampled rows against
 * ref's (NaN when one of them was not written). */
static bfp8_status check_call(layer_call *c, bfp8_device device, int64_t n, const check_rows *cr, double *err) {
    const size_t bytes = call_y_bytes(c, n), row_bytes = (size_t)n * 2;
    void *y = call_y(c);
    if (device == BFP8_DEVICE_CUDA) {
        uint8_t *poison = malloc(bytes + 1);
        if (!poison) return BFP8_ERR_OUT_OF_MEMORY;
        memset(poison, 0xFF, bytes); /* NaN in bf16 */
        bfp8_status st = bfp8_cuda_upload(y, poison, bytes);
        free(poison);
        CLI_TRY(st);
    } else {
        memset(y, 0xFF, bytes);
    }
    CLI_TRY(run_call(c));
    if (device == BFP8_DEVICE_CUDA) CLI_TRY(bfp8_cuda_synchronize(NULL)); /* and a kernel's late error, here */
    uint16_t *got = malloc(row_bytes * (size_t)cr->count + 1);
    if (!got) return BFP8_ERR_OUT_OF_MEMORY;
    bfp8_status st = BFP8_OK;
    for (int i = 0; i < cr->count && st == BFP8_OK; i++) {
        const char *src = (const char *)y + (size_t)cr->row[i] * row_bytes;
        if (device == BFP8_DEVICE_CUDA) st = bfp8_cuda_download(got + (size_t)i * (size_t)n, src, row_bytes);
        else memcpy(got + (size_t)i * (size_t)n, src, row_bytes);
    }
    test_frobenius f = {0};
    for (int64_t i = 0; st == BFP8_OK && i < (int64_t)cr->count * n; i++)
        test_frobenius_add(&f, bfp8_bf16_to_f32(got[i]), bfp8_bf16_to_f32(cr->ref[i]));
    *err = test_frobenius_value(&f);
    free(got);
    return st;
}

/* ref on a dense layer's sampled rows: the first, middle and last token. */
static bfp8_status ref_dense(bfp8_dispatcher *d_ref, const bfp8_weight *w, const uint16_t *x, int64_t m, int64_t n,
                             int64_t k, check_rows *cr) {
    const int64_t want[CHECK_DENSE_ROWS] = {0, m / 2, m - 1};
    cr->count = 0;
    for (int i = 0; i < CHECK_DENSE_ROWS; i++)
        if (cr->count == 0 || want[i] != cr->row[cr->count - 1]) cr->row[cr->count++] = want[i];
    uint16_t *xs = malloc(sizeof(uint16_t) * (size_t)(cr->count * k) + 1);
    cr->ref = malloc(sizeof(uint16_t) * (size_t)(cr->count * n) + 1);
    if (!xs || !cr->ref) return free(xs), BFP8_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < cr->count; i++) memcpy(xs + i * k, x + cr->row[i] * k, sizeof(uint16_t) * (size_t)k);
    bfp8_linear_args a = {.x = xs, .x_dtype = BFP8_DTYPE_BF16, .m = cr->count, .y = cr->ref,
                          .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
    bfp8_status st = bfp8_linear(d_ref, w, &a);
    free(xs);
    return st;
}

/* ref on a grouped layer's sampled rows: each the last token of an expert, one dense ref GEMM of that expert's
 * weight (the host copy) on that row's codes. */
static bfp8_status ref_grouped(bfp8_dispatcher *d_ref, const bfp8_grouped_weight *w, const moe_routing *r,
                               const uint8_t *qa, const float *sa, bfp8_scale_format format, int64_t n, int64_t k,
                               check_rows *cr) {
    const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
    int64_t active[DSR1_EXPERTS], na = 0;
    for (int64_t g = 0; g < r->experts && na < DSR1_EXPERTS; g++)
        if (r->counts[g] > 0) active[na++] = g;
    const int count = na < CHECK_EXPERTS ? (int)na : CHECK_EXPERTS;
    const uint8_t *qb;
    bfp8_scales sb;
    CLI_TRY(bfp8_grouped_weight_view(w, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &qb, &sb));
    cr->ref = malloc(sizeof(uint16_t) * (size_t)(count * n) + 1);
    if (!cr->ref) return BFP8_ERR_OUT_OF_MEMORY;
    cr->count = 0;
    for (int i = 0; i < count; i++) {
        const int64_t e = count > 1 ? active[(int64_t)i * (na - 1) / (count - 1)] : active[0];
        const int64_t row = r->first_row[e] + r->counts[e] - 1;
        bfp8_gemm_args g = {.m = 1, .n = n, .k = k, .a = qa + row * k, .b = qb + e * n * k,
                            .y = cr->ref + (int64_t)i * n, .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
        bfp8_scales_init(&g.a_scales, format, BFP8_LAYOUT_ROW_MAJOR, 1, kb, (void *)(sa + row * kb));
        bfp8_scales_init(&g.b_scales, format, BFP8_LAYOUT_ROW_MAJOR, nb, kb,
                         (char *)sb.data + (size_t)e * bfp8_scales_bytes(BFP8_LAYOUT_ROW_MAJOR, nb, kb));
        CLI_TRY(bfp8_gemm(d_ref, &g));
        cr->row[cr->count++] = row;
    }
    return BFP8_OK;
}

/* One layer's figures at one batch. */
typedef struct layer_result {
    const char *backend;
    double us, fallback_us, err, fallback_err;
} layer_result;

/* The dispatchers of a run: under test, the forced fallback (--compare) and the reference of the checks. */
typedef struct runners {
    bfp8_dispatcher *main, *fallback, *ref;
    const char *fallback_name;
} runners;

/* Checks and times `c` on the main dispatcher, then (with a fallback) the same layer on it, which `fb` describes
 * (NULL: the same call with the fallback dispatcher). */
static bfp8_status check_and_time(const opts *o, const runners *rs, layer_call *c, layer_call *fb, int64_t n,
                                  const check_rows *cr, layer_result *res, char *why, size_t why_size) {
    why[0] = '\0';
    CLI_TRY(check_call(c, o->device, n, cr, &res->err));
    CLI_TRY(time_call(c, o->device, (int)o->iters, &res->us, why, why_size));
    if (!rs->fallback) return BFP8_OK;
    layer_call same = *c;
    same.d = rs->fallback;
    if (!fb) fb = &same;
    CLI_TRY(check_call(fb, o->device, n, cr, &res->fallback_err));
    return time_call(fb, o->device, (int)o->iters, &res->fallback_us, why, why_size);
}

/* A dense layer: a bf16 input of m tokens, quantized in the call. */
static bfp8_status run_dense(const opts *o, const runners *rs, const model_layer *L, const bfp8_weight *w, int64_t m,
                             test_rng *rng, layer_result *res, char *why, size_t why_size) {
    const size_t xb = (size_t)(m * L->k) * 2, yb = (size_t)(m * L->n) * 2;
    uint16_t *hx = malloc(xb);
    check_rows cr = {0};
    test_buffers io = {.device = o->device};
    void *x = NULL, *y = NULL;
    bfp8_status st = hx ? BFP8_OK : BFP8_ERR_OUT_OF_MEMORY;
    if (st == BFP8_OK) {
        test_rng_fill_normal(rng, hx, BFP8_DTYPE_BF16, m * L->k, 1.0f);
        st = test_buffers_put(&io, hx, xb, &x);
    }
    if (st == BFP8_OK) st = test_buffers_put(&io, NULL, yb, &y);
    if (st == BFP8_OK) st = ref_dense(rs->ref, w, hx, m, L->n, L->k, &cr);
    bfp8_problem p;
    bfp8_decision dec;
    layer_call c = {.d = rs->main, .w = w,
                    .args = {.x = x, .x_dtype = BFP8_DTYPE_BF16, .m = m, .y = y, .y_dtype = BFP8_DTYPE_BF16,
                             .device = o->device}};
    if (st == BFP8_OK) st = bfp8_problem_from_linear(w, &c.args, &p);
    if (st == BFP8_OK) st = bfp8_dispatcher_select(rs->main, &p, &dec);
    if (st == BFP8_OK) {
        res->backend = dec.backend->name;
        st = check_and_time(o, rs, &c, NULL, L->n, &cr, res, why, why_size);
    }
    test_buffers_free(&io);
    free(hx), free(cr.ref);
    return st;
}

/* A grouped layer: the routed rows' FP8 codes in the layout of `r`, one grouped GEMM over every expert. */
static bfp8_status run_grouped(const opts *o, const runners *rs, const model_layer *L, const bfp8_grouped_weight *w,
                               const moe_routing *r, int64_t expected_m, test_rng *rng, layer_result *res, char *why,
                               size_t why_size) {
    const int64_t kb = (L->k + 127) / 128;
    uint8_t *qa = malloc((size_t)(r->rows * L->k) + 1);
    float *sa = malloc(sizeof(float) * (size_t)(r->rows * kb) + 1);
    check_rows cr = {0};
    moe_call mc = {0}, fc = {0};
    bfp8_status st = qa && sa ? BFP8_OK : BFP8_ERR_OUT_OF_MEMORY;
    why[0] = '\0';
    if (st == BFP8_OK) {
        test_rng_fill_fp8(rng, qa, r->rows * L->k); /* padding rows too: what a buffer holds there is garbage */
        test_rng_fill_pow2(rng, sa, r->rows * kb, -4);
        st = ref_grouped(rs->ref, w, r, qa, sa, o->format, L->n, L->k, &cr);
    }
    const moe_call_spec spec = {.layout = r->layout, .m = r->m, .expected_m = expected_m, .qa = qa, .sa = sa,
                                .m_indices = r->m_indices, .masked_m = r->counts, .y_dtype = BFP8_DTYPE_BF16,
                                .device = o->device};
    if (st == BFP8_OK) st = moe_call_init(&mc, rs->main, w, &spec, why, why_size);
    if (st == BFP8_OK && rs->fallback) st = moe_call_init(&fc, rs->fallback, w, &spec, why, why_size);
    if (st == BFP8_OK) {
        res->backend = mc.backend->name;
        layer_call c = {.d = rs->main, .grouped = &mc}, fb = {.d = rs->fallback, .grouped = &fc};
        st = check_and_time(o, rs, &c, &fb, L->n, &cr, res, why, why_size);
    }
    moe_call_free(&mc), moe_call_free(&fc);
    free(qa), free(sa), free(cr.ref);
    return st;
}

/* ---- output ----------------------------------------------------------------------------------------------- */

static void print_counts(const moe_routing *r) {
    int width = 1;
    for (int64_t b = r->busiest; b >= 10; b /= 10) width++;
    printf("tokens per expert, expert 0 first:");
    for (int64_t g = 0; g < r->experts; g++) printf("%s%*d", g % 32 ? " " : "\n  ", width, r->counts[g]);
    printf("\n");
}

static void json_counts(FILE *j, const moe_routing *r) {
    fprintf(j, "[");
    for (int64_t g = 0; g < r->experts; g++) fprintf(j, "%s%d", g ? ", " : "", r->counts[g]);
    fprintf(j, "]");
}

static double share(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

/* One line of the step's summary: time, share of the MoE layer (when `whole` > 0), and the fallback's. */
static void summary_line(const opts *o, const char *what, double us, double fb_us, double whole, double whole_fb) {
    printf("  %-34s %12.1f", what, us);
    if (whole > 0) printf(" %6.1f%%", share(us, whole));
    if (o->compare) {
        if (whole <= 0) printf(" %7s", "");
        printf("   %12.1f", fb_us);
        if (whole > 0) printf(" %6.1f%%", share(fb_us, whole_fb));
        else printf(" %7s", "");
        printf(" %7.2fx", fb_us / us);
    }
    printf("\n");
}

/* Tokens per second with three significant digits at least (a cpu run makes well under one). */
static void print_rate(double tokens_per_s) { printf(tokens_per_s < 10 ? "%.3f" : "%.1f", tokens_per_s); }

int cmd_bench_model(int argc, char **argv) {
    const char *cmd = "bench";
    const char *model = NULL, *batch_list = "1", *backend = NULL, *json_path = NULL;
    opts o = {.device = BFP8_DEVICE_CPU, .format = BFP8_SCALE_FP32, .iters = 5, .seed = 1, .experts = -1,
              .top_k = -1, .skew = 0.5, .moe_layout = BFP8_GROUPED_NONE};
    for (int i = 1; i < argc; i++) {
        const char *v;
        int rc;
        if (cli_is_help(argv[i])) {
            fputs(USAGE, stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--model", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--model needs a value");
            model = v;
        } else if (cli_opt(argc, argv, &i, "--batch", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--batch needs a value");
            batch_list = v;
        } else if (cli_opt(argc, argv, &i, "--device", &v)) {
            if (!v || bfp8_device_parse(v, &o.device) != BFP8_OK)
                return cli_usage_error(cmd, USAGE, "--device must be cpu or cuda");
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            if (!v || bfp8_scale_format_parse(v, &o.format) != BFP8_OK)
                return cli_usage_error(cmd, USAGE, "--scale-format must be fp32 or ue8m0");
        } else if (cli_opt(argc, argv, &i, "--backend", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--backend needs a value");
            backend = v;
        } else if (cli_opt(argc, argv, &i, "--json", &v)) {
            if (!v) return cli_usage_error(cmd, USAGE, "--json needs a value");
            json_path = v;
        } else if (cli_opt(argc, argv, &i, "--iters", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--iters", v, 1, 64, &o.iters))) return rc;
        } else if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--seed", v, 1, INT64_MAX, &o.seed))) return rc;
        } else if (cli_opt(argc, argv, &i, "--experts", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--experts", v, 1, DSR1_EXPERTS, &o.experts))) return rc;
        } else if (cli_opt(argc, argv, &i, "--top-k", &v)) {
            if ((rc = cli_want_i64(cmd, USAGE, "--top-k", v, 1, DSR1_EXPERTS, &o.top_k))) return rc;
        } else if (cli_opt(argc, argv, &i, "--skew", &v)) {
            if (!v || !cli_parse_f64(v, 0, 16, &o.skew))
                return cli_usage_error(cmd, USAGE, "bad --skew '%s' (a number from 0 to 16)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--moe-layout", &v)) {
            if (v && strcmp(v, "auto") == 0) o.moe_layout = BFP8_GROUPED_NONE;
            else if (!v || bfp8_grouped_layout_parse(v, &o.moe_layout) != BFP8_OK || o.moe_layout == BFP8_GROUPED_NONE)
                return cli_usage_error(cmd, USAGE, "bad --moe-layout '%s' (auto, masked or contiguous)", v ? v : "");
        } else if (strcmp(argv[i], "--compare") == 0) {
            o.compare = true;
        } else {
            return cli_usage_error(cmd, USAGE, "unknown option '%s'", argv[i]);
        }
    }
    if (!model || strcmp(model, "dsr1") != 0) return cli_usage_error(cmd, USAGE, "--model must be dsr1");
    int64_t batches[MAX_BATCHES];
    int nbatch = 0;
    if (!cli_parse_i64_list(batch_list, 1, 65536, batches, MAX_BATCHES, &nbatch))
        return cli_usage_error(cmd, USAGE, "--batch must be 1..%d positive integers up to 65536", MAX_BATCHES);
    const bool cuda = o.device == BFP8_DEVICE_CUDA, experts_given = o.experts > 0;
    if (!experts_given) o.experts = cuda ? DSR1_EXPERTS : CPU_EXPERTS;
    if (o.top_k < 0) o.top_k = o.experts < DSR1_TOP_K ? o.experts : DSR1_TOP_K;
    if (o.top_k > o.experts)
        return cli_usage_error(cmd, USAGE, "--top-k %" PRId64 " exceeds the %" PRId64 " experts", o.top_k, o.experts);
    if (cuda) {
        char why[256];
        if (!bfp8_cuda_available(why, sizeof why)) return cli_error(CLI_FAIL, cmd, "--device cuda: %s", why);
    }

    /* Three dispatchers: the one under test (auto, or --backend / BFP8_BACKEND), the forced fallback, and ref for
     * the checks. */
    runners rs = {.fallback_name = cuda ? "cuda_generic" : "ref"};
    bfp8_status st = bfp8_dispatcher_create_default(&rs.main);
    if (st == BFP8_OK && backend) st = cli_apply_policy(rs.main, backend, false);
    if (st == BFP8_OK && (st = bfp8_dispatcher_create_default(&rs.ref)) == BFP8_OK)
        st = bfp8_dispatcher_set_policy(rs.ref, BFP8_POLICY_STRICT, "ref");
    if (st == BFP8_OK && o.compare && (st = bfp8_dispatcher_create_default(&rs.fallback)) == BFP8_OK)
        st = bfp8_dispatcher_set_policy(rs.fallback, BFP8_POLICY_STRICT, rs.fallback_name);
    if (st != BFP8_OK) {
        int rc = cli_lib_error(cmd, "dispatcher", st);
        bfp8_dispatcher_free(rs.main), bfp8_dispatcher_free(rs.ref), bfp8_dispatcher_free(rs.fallback);
        return rc;
    }

    test_rng rng;
    test_rng_init(&rng, (uint64_t)o.seed);
    layer_weight weights[NUM_LAYERS] = {{0}};
    model_layer layers[NUM_LAYERS];
    model_layers(layers);
    int rc = CLI_OK;
    const double expert_gb = 1e-9 * (double)o.experts * (4096.0 * 7168 + 7168.0 * 2048);
    fprintf(stderr, "bench: building %d random DeepSeek-R1 layers (%s scales, %" PRId64 " routed experts: %.1f GB of "
            "FP8) on %s...\n", NUM_LAYERS, bfp8_scale_format_name(o.format), o.experts, expert_gb,
            bfp8_device_name(o.device));
    for (int l = 0; l < NUM_LAYERS && rc == CLI_OK; l++)
        if ((st = make_weight(&o, &layers[l], &rng, rs.main, &weights[l])) != BFP8_OK)
            rc = cli_lib_error(cmd, layers[l].name, st);

    FILE *json = NULL;
    if (rc == CLI_OK && json_path && !(json = cli_json_open(cmd, json_path))) rc = CLI_FAIL;
    bool first_record = true;
    const double tol = test_tolerance(BFP8_DTYPE_BF16, o.device);

    if (rc == CLI_OK) {
        printf("blockfp8 bench --model dsr1: %s, bf16 in/out, %s scales, seed %" PRId64 "\n", bfp8_device_name(o.device),
               bfp8_scale_format_name(o.format), o.seed);
        printf("routed experts: %" PRId64 " resident, top-%" PRId64 " per token, routing Zipf(%g): expert g drawn with "
               "weight (g+1)^-%g\n", o.experts, o.top_k, o.skew, o.skew);
        if (o.experts != DSR1_EXPERTS || o.top_k != DSR1_TOP_K)
            printf("  scaled down (%s): DeepSeek-R1 routes 8 of 256, so here each expert gets about %.0fx the tokens "
                   "it would, and %.2fx the expert GEMM work per token\n",
                   experts_given ? "--experts, --top-k" : "the cpu default; --experts",
                   (double)DSR1_EXPERTS / (double)o.experts * (double)o.top_k / DSR1_TOP_K,
                   (double)o.top_k / DSR1_TOP_K);
        printf("dense layers: bfp8_linear, bf16 input quantized in the call; routed experts: bfp8_grouped_gemm on FP8 "
               "input (quantized by the dispatch in an engine)\n");
    }
    for (int b = 0; b < nbatch && rc == CLI_OK; b++) {
        const int64_t m = batches[b];
        /* The routing of this batch, from the seed and the batch size alone. */
        moe_routing r = {.experts = o.experts, .top_k = o.top_k, .tokens = m, .skew = o.skew,
                         .layout = o.moe_layout != BFP8_GROUPED_NONE ? o.moe_layout
                                   : m <= MASKED_MAX_BATCH           ? BFP8_GROUPED_MASKED
                                                                     : BFP8_GROUPED_CONTIGUOUS};
        test_rng route_rng;
        test_rng_init(&route_rng, (uint64_t)o.seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)m));
        if (!moe_route(&r, &route_rng) || !moe_lay_out(&r)) {
            moe_routing_free(&r);
            rc = cli_error(CLI_FAIL, cmd, "out of memory for the routing of batch %" PRId64, m);
            break;
        }
        const bool masked = r.layout == BFP8_GROUPED_MASKED;
        /* The hint engines pass: masked, the mean tokens per expert (the counts are on the device); contiguous,
         * the mean padded segment (DeepEP's normal mode hands the counts to the host). */
        const int64_t routed = m * o.top_k;
        const int64_t expected_m = masked ? (routed + o.experts - 1) / o.experts : r.m / (r.active ? r.active : 1);

        printf("\nDeepSeek-R1 decoder layers, batch %" PRId64 " (%s)\n", m, bfp8_device_name(o.device));
        printf("routing: %" PRId64 " rows (batch x top-%" PRId64 ") to %" PRId64 " of %" PRId64 " experts, busiest %"
               PRId64 ", mean %.1f per expert with tokens\n", routed, o.top_k, r.active, o.experts, r.busiest,
               (double)routed / (double)(r.active ? r.active : 1));
        if (masked)
            printf("layout: masked [%" PRId64 ", %" PRId64 ", K], masked_m = the counts below, expected_m %" PRId64
                   " (%s)\n", o.experts, r.m, expected_m,
                   o.moe_layout != BFP8_GROUPED_NONE ? "--moe-layout" : "batch <= 128: decode");
        else
            printf("layout: contiguous, %" PRId64 " rows: each expert's segment padded to 128 (%.2fx the routed rows), "
                   "expected_m %" PRId64 " (%s)\n", r.m, (double)r.m / (double)routed, expected_m,
                   o.moe_layout != BFP8_GROUPED_NONE ? "--moe-layout" : "batch > 128: prefill");
        print_counts(&r);
        printf("%-10s %-16s %6s %6s  %-14s %10s %9s", "part", "layer", "N", "K", "backend", "time us", "vs ref");
        if (o.compare) printf("  %-14s %10s %8s", "fallback", "time us", "slower");
        printf("\n");

        double sum[PART_COUNT] = {0}, sum_fb[PART_COUNT] = {0};
        const char *bad = NULL;
        double bad_err = 0;
        for (int l = 0; l < NUM_LAYERS && rc == CLI_OK; l++) {
            const model_layer *L = &layers[l];
            fprintf(stderr, "\rbench: batch %" PRId64 " layer %d/%d %-16s", m, l + 1, NUM_LAYERS, L->name);
            layer_result res = {0};
            char why[BFP8_REASON_MAX] = "";
            st = L->part == PART_EXPERTS
                     ? run_grouped(&o, &rs, L, weights[l].grouped, &r, expected_m, &rng, &res, why, sizeof why)
                     : run_dense(&o, &rs, L, weights[l].dense, m, &rng, &res, why, sizeof why);
            if (st != BFP8_OK) {
                fprintf(stderr, "\n");
                rc = why[0] ? cli_error(CLI_FAIL, cmd, "%s: %s: %s", L->name, bfp8_status_name(st), why)
                            : cli_lib_error(cmd, L->name, st);
                break;
            }
            const bool ok = res.err <= tol, fb_ok = !o.compare || res.fallback_err <= tol;
            if ((!ok || !fb_ok) && !bad) bad = L->name, bad_err = ok ? res.fallback_err : res.err;
            sum[L->part] += res.us;
            sum_fb[L->part] += res.fallback_us;
            char err[24];
            snprintf(err, sizeof err, "%s%.1e", ok ? "" : "FAIL ", res.err);
            printf("%-10s %-16s %6" PRId64 " %6" PRId64 "  %-14s %10.1f %9s", PART_NAME[L->part], L->name, L->n, L->k,
                   res.backend, res.us, err);
            if (o.compare)
                printf("  %-14s %10.1f %7.2fx%s", rs.fallback_name, res.fallback_us, res.fallback_us / res.us,
                       fb_ok ? "" : " FAIL");
            printf("\n");
            if (json) {
                fprintf(json, "%s  {\"model\": \"dsr1\", \"device\": \"%s\", \"batch\": %" PRId64 ", \"part\": \"%s\", "
                        "\"layer\": \"%s\", \"n\": %" PRId64 ", \"k\": %" PRId64 ", \"backend\": \"%s\", "
                        "\"median_us\": %.3f, \"rel_err_vs_ref\": %.3e", first_record ? "" : ",\n",
                        bfp8_device_name(o.device), m, PART_JSON[L->part], L->name, L->n, L->k, res.backend, res.us,
                        res.err);
                if (L->part == PART_EXPERTS)
                    fprintf(json, ", \"layout\": \"%s\", \"groups\": %" PRId64 ", \"grouped_m\": %" PRId64 ", "
                            "\"expected_m\": %" PRId64, bfp8_grouped_layout_name(r.layout), o.experts, r.m, expected_m);
                if (o.compare)
                    fprintf(json, ", \"fallback\": \"%s\", \"fallback_us\": %.3f", rs.fallback_name, res.fallback_us);
                fprintf(json, "}");
                first_record = false;
            }
            fflush(stdout);
        }
        fprintf(stderr, "\r%60s\r", "");
        if (rc == CLI_OK && bad)
            rc = cli_error(CLI_FAIL, cmd, "%s: the output differs from ref by %.3e (relative Frobenius over the "
                           "checked rows; tolerance %.0e): no step is reported", bad, bad_err, tol);
        if (rc != CLI_OK) {
            moe_routing_free(&r);
            break;
        }

        /* The step: one MoE decoder layer; its dense part (attention + shared expert) and its expert part. */
        const double moe_us = sum[PART_ATTENTION] + sum[PART_SHARED] + sum[PART_EXPERTS];
        const double moe_fb = sum_fb[PART_ATTENTION] + sum_fb[PART_SHARED] + sum_fb[PART_EXPERTS];
        const double dense_layer = sum[PART_ATTENTION] + sum[PART_DENSE_MLP];
        const double dense_layer_fb = sum_fb[PART_ATTENTION] + sum_fb[PART_DENSE_MLP];
        const double model_us = DSR1_DENSE_LAYERS * dense_layer + DSR1_MOE_LAYERS * moe_us;
        const double model_fb = DSR1_DENSE_LAYERS * dense_layer_fb + DSR1_MOE_LAYERS * moe_fb;
        printf("step: one MoE decoder layer (layers 3-60)   time us   share");
        if (o.compare) printf("   %-12s   share  slower", rs.fallback_name);
        printf("\n");
        summary_line(&o, "attention", sum[PART_ATTENTION], sum_fb[PART_ATTENTION], moe_us, moe_fb);
        summary_line(&o, "shared expert", sum[PART_SHARED], sum_fb[PART_SHARED], moe_us, moe_fb);
        summary_line(&o, "routed experts (grouped)", sum[PART_EXPERTS], sum_fb[PART_EXPERTS], moe_us, moe_fb);
        summary_line(&o, "dense part (attention + shared)", sum[PART_ATTENTION] + sum[PART_SHARED],
                     sum_fb[PART_ATTENTION] + sum_fb[PART_SHARED], moe_us, moe_fb);
        summary_line(&o, "expert part (routed experts)", sum[PART_EXPERTS], sum_fb[PART_EXPERTS], moe_us, moe_fb);
        summary_line(&o, "step", moe_us, moe_fb, moe_us, moe_fb);
        summary_line(&o, "dense layer (layers 0-2)", dense_layer, dense_layer_fb, 0, 0);
        summary_line(&o, "61 layers (3 dense + 58 MoE)", model_us, model_fb, 0, 0);
        printf("tokens/s: ");
        print_rate((double)m / (model_us * 1e-6));
        if (o.compare) {
            const double change = 100.0 * (1.0 - model_us / model_fb); /* fewer tokens/s on the fallback */
            printf("   all-fallback: ");
            print_rate((double)m / (model_fb * 1e-6));
            printf(" (%.1f%% %s)", fabs(change), change >= 0 ? "lower" : "higher");
        }
        printf("   (the 61 layers' GEMMs only: no attention core, router, lm_head or communication)\n");
        if (json) {
            fprintf(json, ",\n  {\"model\": \"dsr1\", \"device\": \"%s\", \"batch\": %" PRId64 ", \"layer\": \"step\", "
                    "\"median_us\": %.3f, \"attention_us\": %.3f, \"shared_expert_us\": %.3f, "
                    "\"routed_experts_us\": %.3f, \"dense_part_us\": %.3f, \"expert_share\": %.4f, "
                    "\"dense_mlp_us\": %.3f, \"dense_layer_us\": %.3f, \"model_us\": %.3f, \"tokens_per_s\": %.3f, "
                    "\"experts\": %" PRId64 ", \"top_k\": %" PRId64 ", \"skew\": %g, \"moe_layout\": \"%s\", "
                    "\"routed_rows\": %" PRId64 ", \"active_experts\": %" PRId64 ", \"busiest_expert\": %" PRId64
                    ", \"seed\": %" PRId64 ", \"tokens_per_expert\": ", bfp8_device_name(o.device), m, moe_us,
                    sum[PART_ATTENTION], sum[PART_SHARED], sum[PART_EXPERTS], sum[PART_ATTENTION] + sum[PART_SHARED],
                    share(sum[PART_EXPERTS], moe_us) / 100, sum[PART_DENSE_MLP], dense_layer, model_us,
                    (double)m / (model_us * 1e-6), o.experts, o.top_k, o.skew, bfp8_grouped_layout_name(r.layout),
                    routed, r.active, r.busiest, o.seed);
            json_counts(json, &r);
            if (o.compare)
                fprintf(json, ", \"fallback\": \"%s\", \"fallback_us\": %.3f, \"fallback_routed_experts_us\": %.3f, "
                        "\"fallback_model_us\": %.3f, \"fallback_tokens_per_s\": %.3f", rs.fallback_name, moe_fb,
                        sum_fb[PART_EXPERTS], model_fb, (double)m / (model_fb * 1e-6));
            fprintf(json, "}");
        }
        moe_routing_free(&r);
    }
    rc = cli_json_close(cmd, json, json_path, rc);
    for (int l = 0; l < NUM_LAYERS; l++) {
        bfp8_weight_free(weights[l].dense);
        bfp8_grouped_weight_free(weights[l].grouped);
    }
    bfp8_dispatcher_free(rs.main), bfp8_dispatcher_free(rs.fallback), bfp8_dispatcher_free(rs.ref);
    return rc;
}
