/* blockfp8 linear: y = x @ W^T (+ bias) from a DeepSeek-format checkpoint and an input file. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 linear --weights CHECKPOINT --weight NAME --in X.safetensors --input NAME\n"
    "                       --out Y.safetensors [--bias NAME] [--out-dtype bf16|fp16|fp32]\n"
    "                       [--scale-format auto|fp32|ue8m0] [--device auto|cpu|cuda] [--backend NAME]\n"
    "                       [--strict] [--stats]\n"
    "\n"
    "Runs the block-FP8 linear layer: x is quantized in 1x128 groups with the weight's scale format, multiplied\n"
    "with the weight through the dispatcher, the bias added, and the result written as tensor `y`.\n"
    "  --weights         a .safetensors file, a sharded checkpoint's model.safetensors.index.json, or a directory\n"
    "                    holding one of them; shards are mapped, and only those holding the tensors used are read\n"
    "  --weight NAME     the weight NAME (F8_E4M3 [N,K]) with NAME_scale_inv ([ceil(N/128), ceil(K/128)], F32 or\n"
    "                    F8_E8M0)\n"
    "  --in, --input     the input NAME: F32, BF16 or F16 [..., K], any number of leading dimensions; y is [..., N]\n"
    "  --bias NAME       1-D [N] F32/BF16/F16, looked up in the checkpoint, then in the input file\n"
    "  --out-dtype       dtype of y (default bf16)\n"
    "  --scale-format    what NAME_scale_inv holds: auto (default: F8_E8M0 is UE8M0, F32 is fp32), fp32, or ue8m0\n"
    "                    (F32 powers of two, as `quantize --scale-format ue8m0` writes: each is checked); the\n"
    "                    activations are quantized with the same format\n"
    "  --device          where x, the weight and y live: auto (default) is the device of --backend when given, else\n"
    "                    cuda when a CUDA backend can run the layer, else cpu\n"
    "  --backend NAME    prefer NAME (default policy: auto, or BFP8_BACKEND)\n"
    "  --strict          NAME or an error carrying its reason\n"
    "  --stats           print the dispatcher's statistics (calls, fallbacks with reasons) to stderr\n"
    "OUT may not be any input file (the input, the checkpoint's index or any of its shards).\n";

static bool is_float_dtype(bfp8_dtype dt) {
    return dt == BFP8_DTYPE_F32 || dt == BFP8_DTYPE_BF16 || dt == BFP8_DTYPE_F16;
}

/* --device auto: the device of the named backend, else cuda when a CUDA backend can run the layer, else cpu. */
static bfp8_device pick_device(bfp8_dispatcher *d, const char *backend, int64_t m, int64_t n, int64_t k,
                               bfp8_dtype out_dtype, bfp8_scale_format format, bool has_bias, bfp8_dtype bias_dtype) {
    const bfp8_backend *named = backend ? bfp8_dispatcher_find(d, backend) : NULL;
    if (named) return named->caps.device;
    if (!bfp8_cuda_available(NULL, 0)) return BFP8_DEVICE_CPU;
    bfp8_problem p;
    if (cli_layer_problem(BFP8_DEVICE_CUDA, m, n, k, out_dtype, format, has_bias, bias_dtype, &p) != BFP8_OK)
        return BFP8_DEVICE_CPU;
    bfp8_decision dec;
    return bfp8_dispatcher_select(d, &p, &dec) == BFP8_OK ? BFP8_DEVICE_CUDA : BFP8_DEVICE_CPU;
}

/* Makes the forms every backend on `device` consumes (not those of the other device: no upload for a CPU run). */
static bfp8_status prepare_for_device(bfp8_weight *w, bfp8_dispatcher *d, bfp8_device device) {
    for (size_t i = 0; i < bfp8_dispatcher_count(d); i++) {
        const bfp8_backend *b = bfp8_dispatcher_at(d, i);
        if (b->caps.device == device) CLI_TRY(bfp8_weight_prepare(w, d, b->name));
    }
    return BFP8_OK;
}

/* Device copies of x and the bias, and room for y, for a run on CUDA. */
typedef struct device_buffers {
    void *x, *bias, *y;
} device_buffers;

static bfp8_status device_buffers_make(device_buffers *b, const bfp8_tensor *x, const bfp8_tensor *bias, size_t y_bytes) {
    CLI_TRY(bfp8_cuda_malloc(x->nbytes ? x->nbytes : 1, &b->x));
    CLI_TRY(bfp8_cuda_upload(b->x, x->data, x->nbytes));
    if (bias) {
        CLI_TRY(bfp8_cuda_malloc(bias->nbytes ? bias->nbytes : 1, &b->bias));
        CLI_TRY(bfp8_cuda_upload(b->bias, bias->data, bias->nbytes));
    }
    return bfp8_cuda_malloc(y_bytes ? y_bytes : 1, &b->y);
}

static void device_buffers_free(device_buffers *b) {
    if (b->x) bfp8_cuda_free(b->x);
    if (b->bias) bfp8_cuda_free(b->bias);
    if (b->y) bfp8_cuda_free(b->y);
}

int cmd_linear(int argc, char **argv) {
    const char *cmd = "linear";
    const char *weights_path = NULL, *weight_name = NULL, *in_path = NULL, *input_name = NULL, *out_path = NULL;
    const char *bias_name = NULL, *backend = NULL;
    bfp8_dtype out_dtype = BFP8_DTYPE_BF16;
    bfp8_weight_load_options load = {0};
    bool strict = false, stats = false, device_auto = true;
    bfp8_device device = BFP8_DEVICE_CPU;

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
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            load.declare_format = !v || strcmp(v, "auto") != 0;
            if (load.declare_format && (!v || bfp8_scale_format_parse(v, &load.scale_format) != BFP8_OK))
                return cli_usage_error(cmd, usage, "bad --scale-format '%s' (auto, fp32 or ue8m0)", v ? v : "");
        } else if (cli_opt(argc, argv, &i, "--device", &v)) {
            device_auto = v && strcmp(v, "auto") == 0;
            if (!device_auto && (!v || bfp8_device_parse(v, &device) != BFP8_OK))
                return cli_usage_error(cmd, usage, "bad --device '%s' (auto, cpu or cuda)", v ? v : "");
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
    bfp8_checkpoint *ck = NULL;
    bfp8_safetensors *xf = NULL;
    bfp8_weight *w = NULL;
    void *y = NULL;
    const char **inputs = NULL;
    device_buffers dev = {0};
    bfp8_weight_info info;
    bfp8_status st;

    if ((st = bfp8_checkpoint_open(weights_path, &ck)) != BFP8_OK) {
        rc = cli_lib_error(cmd, weights_path, st);
        goto done;
    }
    /* Before anything is computed: the output may not replace the input, the index or any shard. */
    const size_t n_files = bfp8_checkpoint_file_count(ck);
    if (!(inputs = calloc(n_files + 1, sizeof *inputs))) {
        rc = cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }
    inputs[0] = in_path;
    for (size_t i = 0; i < n_files; i++) inputs[i + 1] = bfp8_checkpoint_file_path(ck, i);
    if (cli_output_is_input(cmd, out_path, inputs, n_files + 1)) {
        rc = CLI_FAIL;
        goto done;
    }
    if ((st = bfp8_checkpoint_weight_load(ck, weight_name, &load, &w)) != BFP8_OK) {
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
    if (x->ndim < 1 || !is_float_dtype(x->dtype)) {
        rc = cli_error(CLI_FAIL, cmd, "%s: input '%s' is %s with %d dimensions; want f32, bf16 or f16 [..., K]",
                       in_path, input_name, bfp8_dtype_name(x->dtype), x->ndim);
        goto done;
    }
    if (x->shape[x->ndim - 1] != info.k) {
        rc = cli_error(CLI_FAIL, cmd, "input '%s' has K=%lld but weight '%s' [%lld, %lld] needs K=%lld", input_name,
                       (long long)x->shape[x->ndim - 1], weight_name, (long long)info.n, (long long)info.k,
                       (long long)info.k);
        goto done;
    }
    /* [d0, ..., K] is M = d0 * ... rows; y keeps the leading dimensions. */
    int64_t m = 1;
    for (int d = 0; d + 1 < x->ndim; d++)
        if (__builtin_mul_overflow(m, x->shape[d], &m)) {
            rc = cli_error(CLI_FAIL, cmd, "input '%s': the leading dimensions overflow", input_name);
            goto done;
        }
    const bfp8_tensor *bias = NULL;
    if (bias_name) {
        st = bfp8_checkpoint_find(ck, bias_name, &bias);
        if (st != BFP8_OK && st != BFP8_ERR_NOT_FOUND) {
            rc = cli_lib_error(cmd, bias_name, st);
            goto done;
        }
        if (!bias) bias = bfp8_safetensors_find(xf, bias_name);
        if (!bias) {
            rc = cli_error(CLI_FAIL, cmd, "no bias tensor '%s' in %s or %s", bias_name, weights_path, in_path);
            goto done;
        }
        if (bias->ndim != 1 || bias->shape[0] != info.n || !is_float_dtype(bias->dtype)) {
            char shape[160] = "";
            for (int dim = 0, used = 0; dim < bias->ndim && used < (int)sizeof shape; dim++)
                used += snprintf(shape + used, sizeof shape - (size_t)used, "%s%lld", dim ? ", " : "",
                                 (long long)bias->shape[dim]);
            rc = cli_error(CLI_FAIL, cmd, "bias '%s' is %s [%s]; want 1-D [%lld] f32, bf16 or f16", bias_name,
                           bfp8_dtype_name(bias->dtype), shape, (long long)info.n);
            goto done;
        }
    }

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
    if (device_auto)
        device = pick_device(d, backend, m, info.n, info.k, out_dtype, info.scale_format, bias != NULL,
                             bias ? bias->dtype : BFP8_DTYPE_F32);
    char why[256];
    if (device == BFP8_DEVICE_CUDA && !bfp8_cuda_available(why, sizeof why)) {
        rc = cli_error(CLI_FAIL, cmd, "--device cuda: %s", why);
        goto done;
    }
    if ((st = prepare_for_device(w, d, device)) != BFP8_OK) {
        rc = cli_lib_error(cmd, "prepare weight", st);
        goto done;
    }
    if (device == BFP8_DEVICE_CUDA && (st = device_buffers_make(&dev, x, bias, y_bytes)) != BFP8_OK) {
        rc = cli_lib_error(cmd, "device buffers", st);
        goto done;
    }
    const bool on_gpu = device == BFP8_DEVICE_CUDA;
    const bfp8_linear_args args = {
        .x = on_gpu ? dev.x : x->data,
        .x_dtype = x->dtype,
        .m = m,
        .bias = bias ? (on_gpu ? dev.bias : bias->data) : NULL,
        .bias_dtype = bias ? bias->dtype : BFP8_DTYPE_F32,
        .y = on_gpu ? dev.y : y,
        .y_dtype = out_dtype,
        .device = device,
    };
    st = bfp8_linear(d, w, &args);
    if (st == BFP8_OK && on_gpu) st = bfp8_cuda_synchronize(NULL);
    if (st == BFP8_OK && on_gpu) st = bfp8_cuda_download(y, dev.y, y_bytes);
    if (stats) bfp8_dispatcher_print_stats(d, stderr);
    if (st != BFP8_OK) {
        rc = cli_lib_error(cmd, "linear", st);
        goto done;
    }
    /* Every operand's non-finite values reach y as NaN/inf: say which, so such a y is never written in silence. */
    bfp8_nonfinite_stats nf = {0};
    if (bfp8_dispatcher_nonfinite(d, &nf) != BFP8_OK)
        fprintf(stderr, "blockfp8 linear: warning: cannot read the non-finite counts: %s\n", bfp8_last_error());
    if (nf.activations)
        fprintf(stderr, "blockfp8 linear: warning: %llu non-finite input value(s) encoded as NaN\n",
                (unsigned long long)nf.activations);
    if (nf.weight_codes)
        fprintf(stderr, "blockfp8 linear: warning: weight '%s' holds %llu NaN code(s)\n", weight_name,
                (unsigned long long)nf.weight_codes);
    if (nf.weight_scales)
        fprintf(stderr, "blockfp8 linear: warning: weight '%s' has %llu non-finite scale(s) in %s_scale_inv\n",
                weight_name, (unsigned long long)nf.weight_scales, weight_name);
    if (nf.bias)
        fprintf(stderr, "blockfp8 linear: warning: bias '%s' holds %llu non-finite value(s)\n", bias_name,
                (unsigned long long)nf.bias);

    bfp8_tensor y_tensor = {.name = (char *)"y", .dtype = out_dtype, .ndim = x->ndim, .data = y, .nbytes = y_bytes};
    for (int dim = 0; dim + 1 < x->ndim; dim++) y_tensor.shape[dim] = x->shape[dim];
    y_tensor.shape[x->ndim - 1] = info.n;
    if ((st = cli_write_safetensors(out_path, &y_tensor, 1)) != BFP8_OK) {
        rc = cli_lib_error(cmd, out_path, st);
        goto done;
    }
    printf("wrote %s: y %s [", out_path, bfp8_dtype_name(out_dtype));
    for (int dim = 0; dim < y_tensor.ndim; dim++) printf("%s%lld", dim ? ", " : "", (long long)y_tensor.shape[dim]);
    printf("] (on %s, %s scales)\n", bfp8_device_name(device), bfp8_scale_format_name(info.scale_format));

done:
    device_buffers_free(&dev);
    free(y);
    free(inputs);
    bfp8_weight_free(w);
    bfp8_safetensors_close(xf);
    bfp8_checkpoint_close(ck);
    return rc;
}
