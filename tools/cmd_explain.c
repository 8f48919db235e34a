/* blockfp8 explain: the dispatcher's table for one problem (every backend with "ok" or its reason, the choice). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 explain --m M --n N --k K [--out-dtype bf16|fp16|fp32] [--scale-format fp32|ue8m0]\n"
    "                        [--device cpu|cuda] [--arch SM] [--card NAME] [--bias] [--bias-dtype fp32|bf16|fp16]\n"
    "                        [--gemm] [--backend NAME] [--strict]\n"
    "                        [--grouped contiguous|masked --groups G [--expected-m E]]\n"
    "\n"
    "Prints every registered backend with \"ok\" or the reason it cannot run the problem, the backends built in\n"
    "but unavailable here, and the one the policy chooses. The `ranking:` line says what orders them: on cuda the\n"
    "measured table's cell for the problem (bench/data/rank-*.csv), else the backends' priorities, and why.\n"
    "The problem is the one a linear call poses (activations quantized in the call; on cuda by the kernel just\n"
    "before the GEMM, which lets hopper start early: the problem line then ends in acts=prior-kernel).\n"
    "  --m, --n, --k     problem shape: activations [M,K], weight [N,K]\n"
    "  --out-dtype       output dtype (default bf16)\n"
    "  --scale-format    scale format of both operands (default fp32)\n"
    "  --device          where the data lives (default cpu)\n"
    "  --arch SM         CUDA compute capability x10 (default: the current device's, for --device cuda)\n"
    "  --card NAME       the GPU as the driver names it, whose measured cells rank the backends, e.g.\n"
    "                    \"NVIDIA H100 80GB HBM3\" (default: the current device's; with --arch, none, so the\n"
    "                    reference card's cells rank)\n"
    "  --bias            the layer has a bias (dtype from --bias-dtype, default fp32)\n"
    "  --gemm            a plain GEMM call instead: the activations arrive quantized (no kernel to start behind)\n"
    "  --backend NAME    prefer NAME (default policy: auto, or BFP8_BACKEND)\n"
    "  --strict          NAME or nothing: exit 1 with the reason when NAME cannot run the problem\n"
    "  --grouped LAYOUT  a grouped (MoE) GEMM of G weights [N,K]: contiguous (M = all rows of A, padding\n"
    "                    included) or masked (M = max_m, the rows of one group's buffer); see docs/grouped.md\n"
    "  --groups G        the number of groups (experts)\n"
    "  --expected-m E    rows per group that carry data, a hint (default M/G for contiguous, M for masked)\n";

int cmd_explain(int argc, char **argv) {
    const char *cmd = "explain";
    int64_t m = -1, n = -1, k = -1, arch = -1;
    bfp8_dtype out_dtype = BFP8_DTYPE_BF16, bias_dtype = BFP8_DTYPE_F32;
    bfp8_scale_format format = BFP8_SCALE_FP32;
    bfp8_device device = BFP8_DEVICE_CPU;
    bool has_bias = false, strict = false, gemm = false;
    bfp8_grouped_layout grouped = BFP8_GROUPED_NONE;
    int64_t groups = 0, expected_m = 0;
    const char *backend = NULL, *card = NULL;
    int rc;

    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(usage, stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--bias") == 0) {
            has_bias = true;
        } else if (strcmp(argv[i], "--gemm") == 0) {
            gemm = true;
        } else if (strcmp(argv[i], "--strict") == 0) {
            strict = true;
        } else if (cli_opt(argc, argv, &i, "--m", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--m", v, 0, CLI_MAX_DIM, &m))) return rc;
        } else if (cli_opt(argc, argv, &i, "--n", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--n", v, 0, CLI_MAX_DIM, &n))) return rc;
        } else if (cli_opt(argc, argv, &i, "--k", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--k", v, 0, CLI_MAX_DIM, &k))) return rc;
        } else if (cli_opt(argc, argv, &i, "--arch", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--arch", v, 0, 1000, &arch))) return rc;
        } else if (cli_opt(argc, argv, &i, "--card", &v)) {
            if (!v || !*v) return cli_usage_error(cmd, usage, "--card needs a name");
            card = v;
        } else if (cli_opt(argc, argv, &i, "--out-dtype", &v)) {
            if (!cli_parse_out_dtype(v, &out_dtype))
                return cli_usage_error(cmd, usage, "bad --out-dtype '%s' (bf16, fp16 or fp32)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--bias-dtype", &v)) {
            if (!cli_parse_out_dtype(v, &bias_dtype))
                return cli_usage_error(cmd, usage, "bad --bias-dtype '%s' (fp32, bf16 or fp16)", v ? v : "");
            has_bias = true;
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            if (!v || bfp8_scale_format_parse(v, &format) != BFP8_OK)
                return cli_usage_error(cmd, usage, "bad --scale-format '%s' (fp32 or ue8m0)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--device", &v)) {
            if (!v || bfp8_device_parse(v, &device) != BFP8_OK)
                return cli_usage_error(cmd, usage, "bad --device '%s' (cpu or cuda)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--grouped", &v)) {
            if (!v || bfp8_grouped_layout_parse(v, &grouped) != BFP8_OK || grouped == BFP8_GROUPED_NONE)
                return cli_usage_error(cmd, usage, "bad --grouped '%s' (contiguous or masked)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--groups", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--groups", v, 1, CLI_MAX_DIM, &groups))) return rc;
        } else if (cli_opt(argc, argv, &i, "--expected-m", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--expected-m", v, 0, CLI_MAX_DIM, &expected_m))) return rc;
        } else if (cli_opt(argc, argv, &i, "--backend", &v)) {
            if (!v || !*v) return cli_usage_error(cmd, usage, "--backend needs a name");
            backend = v;
        } else {
            return cli_usage_error(cmd, usage, "unknown option '%s'", argv[i]);
        }
    }
    if (m < 0 || n < 0 || k < 0) return cli_usage_error(cmd, usage, "--m, --n and --k are required");
    if (strict && !backend) return cli_usage_error(cmd, usage, "--strict needs --backend NAME");
    if ((grouped != BFP8_GROUPED_NONE) != (groups > 0))
        return cli_usage_error(cmd, usage, "--grouped and --groups go together");
    if (card && device != BFP8_DEVICE_CUDA) return cli_usage_error(cmd, usage, "--card needs --device cuda");

    bfp8_dispatcher *d = cli_default_dispatcher(cmd);
    if (!d) return CLI_FAIL;
    bfp8_status st = cli_apply_policy(d, backend, strict);
    if (st != BFP8_OK) return cli_lib_error(cmd, "policy", st);

    const bool arch_given = arch >= 0; /* another GPU of that arch: not this machine's card */
    if (arch < 0 && device == BFP8_DEVICE_CUDA) {
        /* Without a device there is no arch to pose the problem for (it would read as sm_0). */
        char why[256];
        if (!bfp8_cuda_available(why, sizeof why))
            return cli_error(CLI_FAIL, cmd, "--device cuda: no CUDA device here (%s); pass --arch SM (e.g. --arch 90, "
                             "and --card NAME for a card's own measurements) to see the problem and the ranking for "
                             "that GPU (its backends stay unavailable here, so nothing is chosen)",
                             why);
        arch = bfp8_cuda_arch();
    }
    if (arch < 0) arch = 0;
    bfp8_problem p;
    st = cli_layer_problem(device, m, n, k, out_dtype, format, has_bias, bias_dtype, &p);
    if (st != BFP8_OK) return cli_lib_error(cmd, "problem", st);
    if (arch >= 0) p.arch = (int)arch;
    if (arch_given) p.card = NULL;
    if (card) p.card = card;
    if (gemm) p.act_from_prior_kernel = false;
    if (grouped != BFP8_GROUPED_NONE) {
        p.grouped = grouped;
        p.groups = groups;
        p.expected_m = expected_m ? expected_m : grouped == BFP8_GROUPED_MASKED ? m : (m + groups - 1) / groups;
        p.act_from_prior_kernel = false; /* no grouped kernel starts behind the quantization */
    }

    st = bfp8_dispatcher_explain(d, &p, stdout);
    fflush(stdout);
    if (st != BFP8_OK && !(strict && st == BFP8_ERR_UNSUPPORTED)) return cli_lib_error(cmd, "the dispatcher", st);

    bfp8_decision dec;
    st = bfp8_dispatcher_select(d, &p, &dec);
    if (st != BFP8_OK) {
        if (strict)
            return cli_error(CLI_FAIL, cmd, "strict %s cannot run this problem: %s", backend,
                             dec.reason[0] ? dec.reason : bfp8_last_error());
        return cli_error(CLI_FAIL, cmd, "no backend can run this problem: %s",
                         dec.reason[0] ? dec.reason : bfp8_last_error());
    }
    return CLI_OK;
}
