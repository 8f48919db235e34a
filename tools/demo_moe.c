/* blockfp8 demo --moe: a DeepSeek-style mixture-of-experts layer from random weights. Tokens are routed to top_k of
 * G experts (the skewed routing of tools/moe.h), gathered into the grouped layout, and run through two grouped linear calls
 * (gate_up fused, then down) with SiLU(gate) * up between them; the experts' outputs are combined per token. Each
 * grouped GEMM is checked against the reference backend on the same inputs and against the unquantized product. */
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 demo --moe [--experts G] [--top-k K] [--tokens T] [--hidden H] [--inter I]\n"
    "                           [--layout contiguous|masked] [--device auto|cpu|cuda] [--seed S] [--stats]\n"
    "\n"
    "A mixture-of-experts layer (DeepSeek's routed experts, scaled down by default): T tokens of width H, each\n"
    "routed to top_k of G experts, every expert a gate_up [2*I, H] and a down [H, I] block-FP8 weight (gate and\n"
    "up fused, gate rows first, as engines load them). Routing is skewed: expert g is drawn with weight 1/(g+1),\n"
    "top_k distinct experts per token, gate weights a softmax of random logits. The tokens are laid out as the\n"
    "grouped GEMM takes them: contiguous (each expert's rows one segment padded to 128 rows with -1, DeepGEMM's\n"
    "layout) or masked ([G, max_m, H] with the count per expert). Both grouped linear calls run on the backend the\n"
    "dispatcher chooses and on `ref`; exits 1 unless each is within docs/numerics.md's tolerance of ref and its\n"
    "calc_diff vs the unquantized product is under 1e-3.\n"
    "  --experts G       experts (default 8)\n"
    "  --top-k K         experts per token (default 2)\n"
    "  --tokens T        tokens (default 32)\n"
    "  --hidden H        model width, K of gate_up (default 1024; DeepSeek-R1: 7168)\n"
    "  --inter I         expert intermediate size, a multiple of 128 (default 512; DeepSeek-R1: 2048)\n"
    "  --layout L        contiguous (default) or masked\n"
    "  --device          where the data lives (default: cuda when a GPU is available)\n"
    "  --seed S          replay a run\n"
    "  --stats           print the dispatcher's statistics\n";

#define MOE_CALC_DIFF_LIMIT 1e-3

/* One grouped linear call on `device` (copies in and out when it is cuda), y in the output dtype. */
static bfp8_status grouped_call(bfp8_dispatcher *d, const bfp8_grouped_weight *w, const moe_routing *r, const void *x,
                                int64_t k, void *y, int64_t n, bfp8_device device) {
    const size_t x_bytes = (size_t)(r->rows * k) * 2, y_bytes = (size_t)(r->rows * n) * 2;
    bfp8_grouped_linear_args a = {.layout = r->layout, .x = x, .x_dtype = BFP8_DTYPE_BF16, .m = r->m,
                                  .m_indices = r->m_indices, .masked_m = r->counts, .y = y,
                                  .y_dtype = BFP8_DTYPE_BF16, .device = device};
    memset(y, 0xFF, y_bytes);
    if (device != BFP8_DEVICE_CUDA) return bfp8_grouped_linear(d, w, &a);
    void *xd = NULL, *yd = NULL, *idx = NULL;
    const size_t idx_bytes = sizeof(int32_t) * (size_t)(r->layout == BFP8_GROUPED_MASKED ? r->experts : r->m);
    bfp8_status st = bfp8_cuda_malloc(x_bytes + 1, &xd);
    if (st == BFP8_OK) st = bfp8_cuda_malloc(y_bytes + 1, &yd);
    if (st == BFP8_OK) st = bfp8_cuda_malloc(idx_bytes + 1, &idx);
    if (st == BFP8_OK) st = bfp8_cuda_upload(xd, x, x_bytes);
    if (st == BFP8_OK) st = bfp8_cuda_upload(yd, y, y_bytes);
    if (st == BFP8_OK)
        st = bfp8_cuda_upload(idx, r->layout == BFP8_GROUPED_MASKED ? (const void *)r->counts : r->m_indices, idx_bytes);
    a.x = xd, a.y = yd, a.m_indices = idx, a.masked_m = idx;
    if (st == BFP8_OK) st = bfp8_grouped_linear(d, w, &a);
    if (st == BFP8_OK) st = bfp8_cuda_synchronize(NULL);
    if (st == BFP8_OK) st = bfp8_cuda_download(y, yd, y_bytes);
    if (xd) bfp8_cuda_free(xd);
    if (yd) bfp8_cuda_free(yd);
    if (idx) bfp8_cuda_free(idx);
    return st;
}

/* Per (token, choice) row: the output of `y` [rows, n] against ref and the unquantized product of x32 with w. */
typedef struct gemm_report {
    double rel_ref, calc_diff, ref_calc_diff;
    int64_t unwritten;
} gemm_report;

static gemm_report compare(const moe_routing *r, const uint16_t *y, const uint16_t *y_ref, const float *x32, const float *w,
                           int64_t n, int64_t k) {
    double num = 0, den = 0, xy = 0, xx = 0, rxy = 0, rxx = 0;
    gemm_report rep = {0};
    for (int64_t i = 0; i < r->tokens * r->top_k; i++) {
        const int64_t row = r->slot[i];
        const float *wg = w + (int64_t)r->choice[i] * n * k, *xr = x32 + row * k;
        for (int64_t j = 0; j < n; j++) {
            const double v = bfp8_bf16_to_f32(y[row * n + j]), ref = bfp8_bf16_to_f32(y_ref[row * n + j]);
            double exact = 0;
            for (int64_t l = 0; l < k; l++) exact += (double)xr[l] * wg[j * k + l];
            rep.unwritten += isnan(v);
            num += (v - ref) * (v - ref), den += ref * ref;
            xy += v * exact, xx += v * v + exact * exact;
            rxy += ref * exact, rxx += ref * ref + exact * exact;
        }
    }
    rep.rel_ref = den > 0 ? sqrt(num / den) : sqrt(num);
    rep.calc_diff = xx > 0 ? 1 - 2 * xy / xx : 0;
    rep.ref_calc_diff = rxx > 0 ? 1 - 2 * rxy / rxx : 0;
    return rep;
}

int cmd_demo_moe(int argc, char **argv) {
    const char *cmd = "demo";
    /* The routing of tools/moe.h with weights 1/(g+1) (skew 1). */
    moe_routing r = {.experts = 8, .top_k = 2, .tokens = 32, .skew = 1.0, .layout = BFP8_GROUPED_CONTIGUOUS};
    int64_t hidden = 1024, inter = 512;
    int64_t seed_arg = 0;
    bool have_seed = false, stats = false;
    const char *device_arg = "auto";
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(usage, stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--moe") == 0) {
        } else if (strcmp(argv[i], "--stats") == 0) {
            stats = true;
        } else if (cli_opt(argc, argv, &i, "--experts", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--experts", v, 1, 4096, &r.experts))) return rc;
        } else if (cli_opt(argc, argv, &i, "--top-k", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--top-k", v, 1, 64, &r.top_k))) return rc;
        } else if (cli_opt(argc, argv, &i, "--tokens", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--tokens", v, 1, 1 << 16, &r.tokens))) return rc;
        } else if (cli_opt(argc, argv, &i, "--hidden", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--hidden", v, 1, 1 << 16, &hidden))) return rc;
        } else if (cli_opt(argc, argv, &i, "--inter", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--inter", v, 128, 1 << 16, &inter))) return rc;
        } else if (cli_opt(argc, argv, &i, "--layout", &v)) {
            if (!v || bfp8_grouped_layout_parse(v, &r.layout) != BFP8_OK || r.layout == BFP8_GROUPED_NONE)
                return cli_usage_error(cmd, usage, "bad --layout '%s' (contiguous or masked)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--seed", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--seed", v, 1, INT64_MAX, &seed_arg))) return rc;
            have_seed = true;
        } else if (cli_opt(argc, argv, &i, "--device", &v)) {
            bfp8_device parsed;
            if (!v || (strcmp(v, "auto") != 0 && bfp8_device_parse(v, &parsed) != BFP8_OK))
                return cli_usage_error(cmd, usage, "bad --device '%s' (auto, cpu or cuda)", v ? v : "");
            device_arg = v;
        } else {
            return cli_usage_error(cmd, usage, "unknown option '%s'", argv[i]);
        }
    }
    if (inter % 128) return cli_usage_error(cmd, usage, "--inter %lld is not a multiple of 128", (long long)inter);
    if (r.top_k > r.experts) return cli_usage_error(cmd, usage, "--top-k exceeds --experts");
    if (r.experts * 2 * inter * hidden > ((int64_t)1 << 31))
        return cli_usage_error(cmd, usage, "experts x 2 x inter x hidden is too large for the demo");
    char no_gpu[BFP8_REASON_MAX] = "";
    const bool have_gpu = bfp8_cuda_available(no_gpu, sizeof no_gpu);
    bfp8_device device = have_gpu ? BFP8_DEVICE_CUDA : BFP8_DEVICE_CPU;
    if (strcmp(device_arg, "auto") != 0) bfp8_device_parse(device_arg, &device);
    if (device == BFP8_DEVICE_CUDA && !have_gpu) return cli_error(CLI_FAIL, cmd, "--device cuda: %s", no_gpu);
    const uint64_t seed = have_seed ? (uint64_t)seed_arg : test_seed_fresh() >> 1;
    test_rng rng;
    test_rng_init(&rng, seed);

    const int64_t G = r.experts, H = hidden, I = inter, T = r.tokens;
    rc = CLI_FAIL;
    bfp8_dispatcher *ref_d = NULL;
    bfp8_grouped_weight *w_gu = NULL, *w_dn = NULL;
    float *wgu = malloc(sizeof(float) * (size_t)(G * 2 * I * H)), *wdn = malloc(sizeof(float) * (size_t)(G * H * I));
    uint16_t *tok = malloc(sizeof(uint16_t) * (size_t)(T * H));
    uint16_t *x = NULL, *h = NULL, *gu = NULL, *gu_ref = NULL, *dn = NULL, *dn_ref = NULL;
    float *x32 = NULL, *h32 = NULL;
    if (!wgu || !wdn || !tok) {
        cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }
    test_rng_fill_normal(&rng, wgu, BFP8_DTYPE_F32, G * 2 * I * H, (float)(1.0 / sqrt((double)H)));
    test_rng_fill_normal(&rng, wdn, BFP8_DTYPE_F32, G * H * I, (float)(1.0 / sqrt((double)I)));
    test_rng_fill_normal(&rng, tok, BFP8_DTYPE_BF16, T * H, 1.0f);
    if (!moe_route(&r, &rng) || !moe_lay_out(&r)) {
        cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }
    printf("blockfp8 demo --moe: %lld tokens x top-%lld of %lld experts (routing weight 1/(g+1)), hidden %lld, inter "
           "%lld, %s layout (%lld rows), data on %s, seed %llu\n", (long long)T, (long long)r.top_k, (long long)G,
           (long long)H, (long long)I, bfp8_grouped_layout_name(r.layout), (long long)r.rows,
           bfp8_device_name(device), (unsigned long long)seed);
    printf("tokens per expert:");
    for (int64_t g = 0; g < G && g < 16; g++) printf(" %d", r.counts[g]);
    printf("%s\n", G > 16 ? " ..." : "");

    bfp8_status st;
    if ((st = bfp8_grouped_weight_quantize(wgu, BFP8_DTYPE_F32, G, 2 * I, H, BFP8_SCALE_FP32, &w_gu, NULL)) ||
        (st = bfp8_grouped_weight_quantize(wdn, BFP8_DTYPE_F32, G, H, I, BFP8_SCALE_FP32, &w_dn, NULL)) ||
        (st = bfp8_grouped_weight_prepare(w_gu, NULL, NULL)) || (st = bfp8_grouped_weight_prepare(w_dn, NULL, NULL))) {
        cli_lib_error(cmd, "weights", st);
        goto done;
    }
    bfp8_dispatcher *d = cli_default_dispatcher(cmd);
    if (!d) goto done;
    if ((st = bfp8_dispatcher_create_default(&ref_d)) || (st = bfp8_dispatcher_set_policy(ref_d, BFP8_POLICY_STRICT, "ref"))) {
        cli_lib_error(cmd, "reference dispatcher", st);
        goto done;
    }

    /* Gather: each (token, choice) into its expert's row; rows nobody uses stay zero. */
    x = calloc((size_t)(r.rows * H) + 1, sizeof *x);
    h = calloc((size_t)(r.rows * I) + 1, sizeof *h);
    gu = malloc(sizeof *gu * (size_t)(r.rows * 2 * I) + 1), gu_ref = malloc(sizeof *gu * (size_t)(r.rows * 2 * I) + 1);
    dn = malloc(sizeof *dn * (size_t)(r.rows * H) + 1), dn_ref = malloc(sizeof *dn * (size_t)(r.rows * H) + 1);
    x32 = calloc((size_t)(r.rows * H) + 1, sizeof *x32), h32 = calloc((size_t)(r.rows * I) + 1, sizeof *h32);
    if (!x || !h || !gu || !gu_ref || !dn || !dn_ref || !x32 || !h32) {
        cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < T * r.top_k; i++) memcpy(x + r.slot[i] * H, tok + (i / r.top_k) * H, sizeof *x * (size_t)H);
    for (int64_t i = 0; i < r.rows * H; i++) x32[i] = bfp8_bf16_to_f32(x[i]);

    bfp8_problem p;
    bfp8_decision dec;
    bfp8_grouped_linear_args pa = {.layout = r.layout, .x = x, .x_dtype = BFP8_DTYPE_BF16, .m = r.m,
                                   .m_indices = r.m_indices, .masked_m = r.counts, .y = gu,
                                   .y_dtype = BFP8_DTYPE_BF16, .device = BFP8_DEVICE_CPU};
    if ((st = bfp8_problem_from_grouped_linear(w_gu, &pa, &p)) != BFP8_OK) {
        cli_lib_error(cmd, "problem", st);
        goto done;
    }
    p.device = device;
    p.arch = device == BFP8_DEVICE_CUDA ? bfp8_cuda_arch() : 0;
    bfp8_grouped_weight_info wi;
    bfp8_grouped_weight_info_get(w_gu, &wi);
    p.b_layouts = device == BFP8_DEVICE_CUDA ? wi.device_layouts : wi.host_layouts;
    if ((st = bfp8_dispatcher_select(d, &p, &dec)) != BFP8_OK) {
        cli_error(CLI_FAIL, cmd, "no backend can run the experts: %s", dec.reason[0] ? dec.reason : bfp8_last_error());
        goto done;
    }
    printf("decision (gate_up): %s%s%s\n", dec.backend->name, dec.fallback ? ", fallback: " : "",
           dec.fallback ? dec.reason : "");
    bfp8_dispatcher_explain(d, &p, stdout);

    double t0 = cli_now();
    if ((st = grouped_call(d, w_gu, &r, x, H, gu, 2 * I, device)) != BFP8_OK) {
        cli_lib_error(cmd, "gate_up", st);
        goto done;
    }
    const double t_gu = cli_now() - t0;
    if ((st = grouped_call(ref_d, w_gu, &r, x, H, gu_ref, 2 * I, BFP8_DEVICE_CPU)) != BFP8_OK) {
        cli_lib_error(cmd, "gate_up on ref", st);
        goto done;
    }
    /* SiLU(gate) * up on the used rows (from the chosen backend's output; both downs take the same input). */
    for (int64_t i = 0; i < T * r.top_k; i++) {
        const int64_t row = r.slot[i];
        for (int64_t j = 0; j < I; j++) {
            const float g = bfp8_bf16_to_f32(gu[row * 2 * I + j]), u = bfp8_bf16_to_f32(gu[row * 2 * I + I + j]);
            h[row * I + j] = bfp8_bf16_from_f32(g / (1.0f + expf(-g)) * u);
            h32[row * I + j] = bfp8_bf16_to_f32(h[row * I + j]);
        }
    }
    t0 = cli_now();
    if ((st = grouped_call(d, w_dn, &r, h, I, dn, H, device)) != BFP8_OK) {
        cli_lib_error(cmd, "down", st);
        goto done;
    }
    const double t_dn = cli_now() - t0;
    if ((st = grouped_call(ref_d, w_dn, &r, h, I, dn_ref, H, BFP8_DEVICE_CPU)) != BFP8_OK) {
        cli_lib_error(cmd, "down on ref", st);
        goto done;
    }
    const gemm_report a = compare(&r, gu, gu_ref, x32, wgu, 2 * I, H), b = compare(&r, dn, dn_ref, h32, wdn, H, I);
    /* The combined output of token 0, as a sign of life: sum over its choices of gate weight x expert output. */
    double y0 = 0;
    for (int64_t j = 0; j < r.top_k; j++) y0 += r.gate[j] * bfp8_bf16_to_f32(dn[r.slot[j] * H]);
    const double tol = test_tolerance(BFP8_DTYPE_BF16, device);
    printf("gate_up [%lld x %lld, %lld]: %.3f ms (incl. copies), vs ref rel Frobenius %.3e (tol %.0e), calc_diff vs "
           "fp32 %.3e (ref %.3e)\n", (long long)G, (long long)(2 * I), (long long)H, t_gu * 1e3, a.rel_ref, tol,
           a.calc_diff, a.ref_calc_diff);
    printf("down    [%lld x %lld, %lld]: %.3f ms (incl. copies), vs ref rel Frobenius %.3e (tol %.0e), calc_diff vs "
           "fp32 %.3e (ref %.3e)\n", (long long)G, (long long)H, (long long)I, t_dn * 1e3, b.rel_ref, tol, b.calc_diff,
           b.ref_calc_diff);
    printf("token 0: y[0] = %.5f\n", y0);
    if (a.unwritten || b.unwritten) printf("unwritten outputs: gate_up %lld, down %lld\n", (long long)a.unwritten,
                                           (long long)b.unwritten);
    if (stats) bfp8_dispatcher_print_stats(d, stdout);
    const bool pass = !a.unwritten && !b.unwritten && a.rel_ref <= tol && b.rel_ref <= tol &&
                      a.calc_diff < MOE_CALC_DIFF_LIMIT && b.calc_diff < MOE_CALC_DIFF_LIMIT;
    printf("%s\n", pass ? "PASS" : "FAIL");
    rc = pass ? CLI_OK : CLI_FAIL;
done:
    bfp8_dispatcher_free(ref_d);
    bfp8_grouped_weight_free(w_gu), bfp8_grouped_weight_free(w_dn);
    free(wgu), free(wdn), free(tok);
    moe_routing_free(&r);
    free(x), free(h), free(gu), free(gu_ref), free(dn), free(dn_ref), free(x32), free(h32);
    return rc;
}
