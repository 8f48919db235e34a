/* blockfp8 quantize: activations (1x128 groups) or weights (128x128 blocks) of a safetensors file to E4M3. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: blockfp8 quantize --kind act|weight --in IN.safetensors --out OUT.safetensors [--tensor NAME]\n"
    "                         [--scale-format fp32|ue8m0]\n"
    "\n"
    "Quantizes 2-D F32/BF16/F16 tensors to F8_E4M3 with fp32 or power-of-two (UE8M0) scales (DESIGN section 3).\n"
    "  --kind act      NAME [M,K] -> NAME (F8_E4M3 [M,K]) + NAME_scale (F32 [M, ceil(K/128)]), one scale per\n"
    "                  token per group of 128 along K\n"
    "  --kind weight   NAME [N,K] -> NAME (F8_E4M3 [N,K]) + NAME_scale_inv (F32 [ceil(N/128), ceil(K/128)]),\n"
    "                  one scale per 128x128 block (DeepSeek naming; the scale is the dequantization multiplier)\n"
    "  --tensor NAME   quantize only NAME (default: every 2-D floating tensor); other tensors are copied through\n"
    "  --scale-format  fp32 (default) or ue8m0; UE8M0 scales are stored as F32 powers of two\n"
    "Scales are row-major. Non-finite inputs encode as NaN and are reported on stderr. OUT may not be IN.\n";

/* The same file, even under another name or through a link. */
static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (strcmp(a, b) == 0) return true;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static bool is_quantizable(const bfp8_tensor *t) {
    return t->ndim == 2 &&
           (t->dtype == BFP8_DTYPE_F32 || t->dtype == BFP8_DTYPE_BF16 || t->dtype == BFP8_DTYPE_F16);
}

static char *concat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

int cmd_quantize(int argc, char **argv) {
    const char *cmd = "quantize";
    const char *in_path = NULL, *out_path = NULL, *only = NULL, *kind = NULL;
    bfp8_scale_format format = BFP8_SCALE_FP32;

    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(usage, stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--kind", &v)) {
            if (!v || (strcmp(v, "act") != 0 && strcmp(v, "weight") != 0))
                return cli_usage_error(cmd, usage, "bad --kind '%s' (act or weight)", v ? v : "");
            kind = v;
        } else if (cli_opt(argc, argv, &i, "--in", &v)) {
            if (!v || !*v) return cli_usage_error(cmd, usage, "--in needs a file");
            in_path = v;
        } else if (cli_opt(argc, argv, &i, "--out", &v)) {
            if (!v || !*v) return cli_usage_error(cmd, usage, "--out needs a file");
            out_path = v;
        } else if (cli_opt(argc, argv, &i, "--tensor", &v)) {
            if (!v || !*v) return cli_usage_error(cmd, usage, "--tensor needs a name");
            only = v;
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            if (!v || bfp8_scale_format_parse(v, &format) != BFP8_OK)
                return cli_usage_error(cmd, usage, "bad --scale-format '%s' (fp32 or ue8m0)", v ? v : "");
        } else {
            return cli_usage_error(cmd, usage, "unknown option '%s'", argv[i]);
        }
    }
    if (!kind || !in_path || !out_path) return cli_usage_error(cmd, usage, "--kind, --in and --out are required");
    if (same_file(in_path, out_path))
        return cli_error(CLI_FAIL, cmd, "refusing to overwrite the input file '%s'", in_path);
    const bool is_act = strcmp(kind, "act") == 0;
    const char *suffix = is_act ? "_scale" : "_scale_inv";

    bfp8_safetensors *in = NULL;
    bfp8_status st = bfp8_safetensors_open(in_path, &in);
    if (st != BFP8_OK) return cli_lib_error(cmd, in_path, st);

    const size_t count = bfp8_safetensors_count(in);
    int rc = CLI_OK;
    size_t n_out = 0, n_quantized = 0;
    /* Each input gives at most two outputs; allocations are owned per output so cleanup is one loop. */
    bfp8_tensor *out = calloc(2 * count + 1, sizeof *out);
    void **owned = calloc(2 * count + 1, sizeof *owned);
    char **owned_names = calloc(2 * count + 1, sizeof *owned_names);
    if (!out || !owned || !owned_names) {
        rc = cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }
    if (only) {
        const bfp8_tensor *t = bfp8_safetensors_find(in, only);
        if (!t) {
            rc = cli_error(CLI_FAIL, cmd, "%s: no tensor named '%s'", in_path, only);
            goto done;
        }
        if (!is_quantizable(t)) {
            rc = cli_error(CLI_FAIL, cmd, "%s: tensor '%s' is %s with %d dimensions; want a 2-D f32, bf16 or f16",
                           in_path, only, bfp8_dtype_name(t->dtype), t->ndim);
            goto done;
        }
    }

    for (size_t i = 0; i < count; i++) {
        const bfp8_tensor *t = bfp8_safetensors_at(in, i);
        const bool quantize = only ? strcmp(t->name, only) == 0 : is_quantizable(t);
        if (!quantize) {
            out[n_out++] = *t; /* copied through: data borrowed from the open input */
            continue;
        }
        const int64_t rows = t->shape[0], k = t->shape[1];
        const int64_t kblocks = (k + BFP8_BLOCK - 1) / BFP8_BLOCK;
        const int64_t scale_rows = is_act ? rows : (rows + BFP8_BLOCK - 1) / BFP8_BLOCK;
        const size_t scale_bytes = bfp8_scales_bytes(BFP8_LAYOUT_ROW_MAJOR, scale_rows, kblocks);
        const size_t q_bytes = t->nbytes / bfp8_dtype_size(t->dtype);
        char *scale_name = concat(t->name, suffix);
        uint8_t *q = malloc(q_bytes ? q_bytes : 1);
        float *scale_data = malloc(scale_bytes ? scale_bytes : 1);
        owned[n_out] = q;
        owned[n_out + 1] = scale_data;
        owned_names[n_out + 1] = scale_name;
        if (!scale_name || !q || !scale_data) {
            rc = cli_error(CLI_FAIL, cmd, "out of memory for '%s'", t->name);
            goto done;
        }
        if (bfp8_safetensors_find(in, scale_name)) {
            rc = cli_error(CLI_FAIL, cmd, "%s: output tensor '%s' would collide with an input tensor of that name",
                           in_path, scale_name);
            goto done;
        }
        bfp8_scales scales;
        int64_t nonfinite = 0;
        st = bfp8_scales_init(&scales, format, BFP8_LAYOUT_ROW_MAJOR, scale_rows, kblocks, scale_data);
        if (st == BFP8_OK)
            st = is_act ? bfp8_quantize_act(t->data, t->dtype, rows, k, q, &scales, &nonfinite)
                        : bfp8_quantize_weight(t->data, t->dtype, rows, k, q, &scales, &nonfinite);
        if (st != BFP8_OK) {
            rc = cli_lib_error(cmd, t->name, st);
            goto done;
        }
        if (nonfinite > 0)
            fprintf(stderr, "blockfp8 quantize: warning: %s: %lld non-finite value(s) encoded as NaN\n", t->name,
                    (long long)nonfinite);
        out[n_out] = (bfp8_tensor){.name = t->name, .dtype = BFP8_DTYPE_E4M3, .ndim = 2,
                                   .shape = {rows, k}, .data = q, .nbytes = q_bytes};
        out[n_out + 1] = (bfp8_tensor){.name = scale_name, .dtype = BFP8_DTYPE_F32, .ndim = 2,
                                       .shape = {scale_rows, kblocks}, .data = scale_data,
                                       .nbytes = scale_bytes};
        printf("%s: %s [%lld, %lld] -> e4m3 + %s f32 [%lld, %lld] (%s scales)\n", t->name,
               bfp8_dtype_name(t->dtype), (long long)rows, (long long)k, scale_name, (long long)scale_rows,
               (long long)kblocks, bfp8_scale_format_name(format));
        n_out += 2;
        n_quantized++;
    }
    /* A quantized NAME's scale may collide with another quantized tensor's name (X and X_scale both inputs). */
    for (size_t a = 0; a < n_out; a++)
        for (size_t b = a + 1; b < n_out; b++)
            if (strcmp(out[a].name, out[b].name) == 0) {
                rc = cli_error(CLI_FAIL, cmd, "two output tensors would be named '%s'", out[a].name);
                goto done;
            }
    if (n_quantized == 0) fprintf(stderr, "blockfp8 quantize: warning: %s has no 2-D floating tensor\n", in_path);
    st = bfp8_safetensors_write(out_path, out, n_out);
    if (st != BFP8_OK) {
        rc = cli_lib_error(cmd, out_path, st);
        goto done;
    }
    printf("wrote %s: %zu tensor(s), %zu quantized\n", out_path, n_out, n_quantized);

done:
    if (owned)
        for (size_t i = 0; i < 2 * count + 1; i++) free(owned[i]);
    if (owned_names)
        for (size_t i = 0; i < 2 * count + 1; i++) free(owned_names[i]);
    free(owned);
    free(owned_names);
    free(out);
    bfp8_safetensors_close(in);
    return rc;
}
