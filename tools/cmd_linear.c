/* blockfp8 linear: y = x @ W^T (+ bias) from a DeepSeek-format weight file and an input file. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 linear --weights W.safetensors --weight NAME --in X.safetensors --input NAME\n"
    "                       --out Y.safetensors [--bias NAME] [--out-dtype bf16|fp16|fp32] [--backend NAME]\n"
    "                       [--strict] [--stats]\n"
    "\n"
    "Runs the block-FP8 linear layer: x is quantized in 1x128 groups with the weight's scale format, multiplied\n"
    "with the weight through the dispatcher, the bias added, and the result written as tensor `y` [M, N].\n"
    "  --weights, --weight  the weight NAME (F8_E4M3 [N,K]) with NAME_scale_inv (F32 [ceil(N/128), ceil(K/128)])\n"
    "  --in, --input        the input NAME: 2-D F32, BF16 or F16 [M,K]\n"
    "  --bias NAME          1-D [N] F32/BF16/F16, looked up in the weights file, then in the input file\n"
    "  --out-dtype          dtype of y (default bf16)\n"
    "  --backend NAME       prefer NAME (default policy: auto, or BFP8_BACKEND)\n"
    "  --strict             NAME or an error carrying its reason\n"
    "  --stats              print the dispatcher's statistics (calls, fallbacks with reasons) to stderr\n";

int cmd_linear(int argc, char **argv) {
    const char *cmd = "linear";
    const char *weights_path = NULL, *weight_name = NULL, *in_path = NULL, *input_name = NULL, *out_path = NULL;
    const char *bias_name = NULL, *backend = NULL;
    bfp8_dtype out_dtype = BFP8_DTYPE_BF16;
    bool strict = false, stats = false;

    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        const char **dst = NULL;
        const char *opt = argv[i];
        if (cli_is_help(argv[i])) {
            fputs(usage, stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--strict") == 0) {
            strict = true;
        } else if (strcmp(argv[i], "--stats") == 0) {
            stats = true;
        } else if (cli_opt(argc, argv, &i, "--out-dtype", &v)) {
            if (!cli_parse_out_dtype(v, &out_dtype))
                return cli_usage_error(cmd, usage, "bad --out-dtype '%s' (bf16, fp16 or fp32)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--weights", &v)) {
            dst = &weights_path;
        } else if (cli_opt(argc, argv, &i, "--weight", &v)) {
            dst = &weight_name;
        } else if (cli_opt(argc, argv, &i, "--input", &v)) {
            dst = &input_name;
        } else if (cli_opt(argc, argv, &i, "--in", &v)) {
            dst = &in_path;
        } else if (cli_opt(argc, argv, &i, "--out", &v)) {
            dst = &out_path;
        } else if (cli_opt(argc, argv, &i, "--bias", &v)) {
            dst = &bias_name;
        } else if (cli_opt(argc, argv, &i, "--backend", &v)) {
            dst = &backend;
        } else {
            return cli_usage_error(cmd, usage, "unknown option '%s'", argv[i]);
        }
        if (dst) {
            if (!v || !*v) return cli_usage_error(cmd, usage, "%s needs a value", opt);
            *dst = v;
        }
    }
    if (!weights_path || !weight_name || !in_path || !input_name || !out_path)
        return cli_usage_error(cmd, usage, "--weights, --weight, --in, --input and --out are required");
    if (strict && !backend) return cli_usage_error(cmd, usage, "--strict needs --backend NAME");

    int rc = CLI_OK;
    bfp8_safetensors *wf = NULL, *xf = NULL;
    bfp8_weight *w = NULL;
    void *y = NULL;
    bfp8_weight_info info;
    bfp8_status st;

    if ((st = bfp8_safetensors_open(weights_path, &wf)) != BFP8_OK) {
        rc = cli_lib_error(cmd, weights_path, st);
        goto done;
    }
    if ((st = bfp8_weight_load(wf, weight_name, &w)) != BFP8_OK) {
        rc = cli_lib_error(cmd, weight_name, st);
        goto done;
    }
    if ((st = bfp8_weight_info_get(w, &info)) != BFP8_OK) {
        rc = cli_lib_error(cmd, "weight info", st);
        goto done;
    }
    if ((st = bfp8_safetensors_open(in_path, &xf)) != BFP8_OK) {
        rc = cli_lib_error(cmd, in_path, st);
        goto done;
    }
    const bfp8_tensor *x = bfp8_safetensors_find(xf, input_name);
    if (!x) {
        rc = cli_error(CLI_FAIL, cmd, "%s: no tensor named '%s'", in_path, input_name);
        goto done;
    }
    if (x->ndim != 2 || (x->dtype != BFP8_DTYPE_F32 && x->dtype != BFP8_DTYPE_BF16 && x->dtype != BFP8_DTYPE_F16)) {
        rc = cli_error(CLI_FAIL, cmd, "%s: input '%s' is %s with %d dimensions; want a 2-D f32, bf16 or f16",
                       in_path, input_name, bfp8_dtype_name(x->dtype), x->ndim);
        goto done;
    }
    if (x->shape[1] != info.k) {
        rc = cli_error(CLI_FAIL, cmd, "input '%s' has K=%lld but weight '%s' [%lld, %lld] needs K=%lld", input_name,
                       (long long)x->shape[1], weight_name, (long long)info.n, (long long)info.k,
                       (long long)info.k);
        goto done;
    }
    const bfp8_tensor *bias = NULL;
    if (bias_name) {
        bias = bfp8_safetensors_find(wf, bias_name);
        if (!bias) bias = bfp8_safetensors_find(xf, bias_name);
        if (!bias) {
            rc = cli_error(CLI_FAIL, cmd, "no bias tensor '%s' in %s or %s", bias_name, weights_path, in_path);
            goto done;
        }
        if (bias->ndim != 1 || bias->shape[0] != info.n ||
            (bias->dtype != BFP8_DTYPE_F32 && bias->dtype != BFP8_DTYPE_BF16 && bias->dtype != BFP8_DTYPE_F16)) {
            rc = cli_error(CLI_FAIL, cmd, "bias '%s' is %s with %d dimension(s); want 1-D [%lld] f32, bf16 or f16",
                           bias_name, bfp8_dtype_name(bias->dtype), bias->ndim, (long long)info.n);
            goto done;
        }
    }

    const int64_t m = x->shape[0];
    size_t y_bytes = 0;
    if (__builtin_mul_overflow((uint64_t)m, (uint64_t)info.n, &y_bytes) ||
        __builtin_mul_overflow(y_bytes, bfp8_dtype_size(out_dtype), &y_bytes) || !(y = malloc(y_bytes ? y_bytes : 1))) {
        rc = cli_error(CLI_FAIL, cmd, "output [%lld, %lld] is too large", (long long)m, (long long)info.n);
        goto done;
    }

    bfp8_dispatcher *d = cli_default_dispatcher(cmd);
    if (!d) {
        rc = CLI_FAIL;
        goto done;
    }
    if ((st = cli_apply_policy(d, backend, strict)) != BFP8_OK) {
        rc = cli_lib_error(cmd, "policy", st);
        goto done;
    }
    if ((st = bfp8_weight_prepare(w, d, NULL)) != BFP8_OK) {
        rc = cli_lib_error(cmd, "prepare weight", st);
        goto done;
    }
    const bfp8_linear_args args = {
        .x = x->data,
        .x_dtype = x->dtype,
        .m = m,
        .bias = bias ? bias->data : NULL,
        .bias_dtype = bias ? bias->dtype : BFP8_DTYPE_F32,
        .y = y,
        .y_dtype = out_dtype,
        .device = BFP8_DEVICE_CPU,
    };
    st = bfp8_linear(d, w, &args);
    if (stats) bfp8_dispatcher_print_stats(d, stderr);
    if (st != BFP8_OK) {
        rc = cli_lib_error(cmd, "linear", st);
        goto done;
    }
    const uint64_t nonfinite = bfp8_dispatcher_nonfinite_inputs(d);
    if (nonfinite)
        fprintf(stderr, "blockfp8 linear: warning: %llu non-finite input value(s) encoded as NaN\n",
                (unsigned long long)nonfinite);

    const bfp8_tensor y_tensor = {.name = (char *)"y", .dtype = out_dtype, .ndim = 2, .shape = {m, info.n},
                                  .data = y, .nbytes = y_bytes};
    if ((st = bfp8_safetensors_write(out_path, &y_tensor, 1)) != BFP8_OK) {
        rc = cli_lib_error(cmd, out_path, st);
        goto done;
    }
    printf("wrote %s: y %s [%lld, %lld]\n", out_path, bfp8_dtype_name(out_dtype), (long long)m, (long long)info.n);

done:
    free(y);
    bfp8_weight_free(w);
    bfp8_safetensors_close(xf);
    bfp8_safetensors_close(wf);
    return rc;
}
