/* blockfp8 quantize: activations (1x128 groups) or weights (128x128 blocks) of a safetensors file to E4M3. */
#include "cli.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 quantize --kind act|weight --in IN.safetensors --out OUT.safetensors [--tensor NAME]...\n"
    "                         [--skip PATTERN]... [--scale-format fp32|ue8m0]\n"
    "\n"
    "Quantizes 2-D F32/BF16/F16 tensors to F8_E4M3 with fp32 or power-of-two (UE8M0) scales (docs/numerics.md).\n"
    "  --kind act      NAME [M,K] -> NAME (F8_E4M3 [M,K]) + NAME_scale (F32 [M, ceil(K/128)]), one scale per\n"
    "                  token per group of 128 along K\n"
    "  --kind weight   NAME [N,K] -> NAME (F8_E4M3 [N,K]) + NAME_scale_inv (F32 [ceil(N/128), ceil(K/128)]),\n"
    "                  one scale per 128x128 block (DeepSeek naming; the scale is the dequantization multiplier)\n"
    "  --tensor NAME   quantize NAME (repeatable): only the listed tensors, whatever their names\n"
    "  --skip PATTERN  keep the tensors whose names match the glob PATTERN (repeatable; fnmatch, e.g. '*.mlp.*')\n"
    "  --scale-format  fp32 (default) or ue8m0; UE8M0 scales are stored as F32 powers of two\n"
    "Without --tensor, --kind weight converts only what is a linear layer's weight, as DeepSeek's FP8 checkpoints\n"
    "do: a 2-D f32/bf16/f16 tensor named *.weight that is not an embedding (*embed*), the output head (lm_head,\n"
    "*shared_head.head*), a norm (*norm*) or the MoE router (*.gate.weight, *router*). --kind act converts every 2-D\n"
    "f32/bf16/f16 tensor. Neither converts a scale tensor (*_scale_inv, *_scale) or one already in FP8. Every other\n"
    "tensor is copied through unchanged; stderr lists what was converted and what was kept, and why.\n"
    "Scales are row-major. Non-finite inputs encode as NaN and are reported on stderr. OUT may not be IN.\n";

/* Why a tensor is copied through instead of quantized. */
typedef enum keep_reason {
    CONVERT = 0,
    KEEP_SKIPPED,
    KEEP_NOT_LISTED,
    KEEP_DTYPE,
    KEEP_NOT_2D,
    KEEP_SCALE,
    KEEP_NOT_WEIGHT,
    KEEP_EMBEDDING,
    KEEP_HEAD,
    KEEP_NORM,
    KEEP_ROUTER,
    KEEP_COUNT
} keep_reason;

static const char *const keep_text[KEEP_COUNT] = {
    [KEEP_SKIPPED] = "matched by --skip",
    [KEEP_NOT_LISTED] = "not listed by --tensor",
    [KEEP_DTYPE] = "not f32, bf16 or f16 (already FP8, integers or scale exponents)",
    [KEEP_NOT_2D] = "not 2-D (norms, biases, higher-rank tensors)",
    [KEEP_SCALE] = "a scale tensor (*_scale_inv, *_scale)",
    [KEEP_NOT_WEIGHT] = "not named *.weight",
    [KEEP_EMBEDDING] = "an embedding (*embed*), which DeepSeek keeps in bf16",
    [KEEP_HEAD] = "the output head (lm_head, *shared_head.head*), which DeepSeek keeps in bf16",
    [KEEP_NORM] = "a norm (*norm*)",
    [KEEP_ROUTER] = "the MoE router (*.gate.weight, *router*), which DeepSeek keeps in bf16",
};

static bool ends_with(const char *s, const char *suffix) {
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* Whether a dot-separated component of `name` contains `part` (exact: the component equals it). */
static bool has_component(const char *name, const char *part, bool exact) {
    size_t lp = strlen(part);
    for (const char *p = name; *p;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (exact ? len == lp && strncmp(p, part, lp) == 0 : memmem(p, len, part, lp) != NULL) return true;
        p += len + (dot ? 1 : 0);
    }
    return false;
}

static bool is_float_2d(const bfp8_tensor *t) {
    return t->ndim == 2 &&
           (t->dtype == BFP8_DTYPE_F32 || t->dtype == BFP8_DTYPE_BF16 || t->dtype == BFP8_DTYPE_F16);
}

/* The rules of the usage text, in order; --tensor lists are handled by the caller. */
static keep_reason default_rule(const bfp8_tensor *t, bool is_act) {
    const char *name = t->name;
    if (t->dtype != BFP8_DTYPE_F32 && t->dtype != BFP8_DTYPE_BF16 && t->dtype != BFP8_DTYPE_F16) return KEEP_DTYPE;
    if (t->ndim != 2) return KEEP_NOT_2D;
    if (ends_with(name, "_scale_inv") || ends_with(name, "_scale")) return KEEP_SCALE;
    if (is_act) return CONVERT;
    if (strcmp(name, "weight") != 0 && !ends_with(name, ".weight")) return KEEP_NOT_WEIGHT;
    if (has_component(name, "embed", false)) return KEEP_EMBEDDING;
    if (has_component(name, "lm_head", true) || strstr(name, "shared_head.head.") != NULL) return KEEP_HEAD;
    if (has_component(name, "norm", false)) return KEEP_NORM;
    if (strcmp(name, "gate.weight") == 0 || ends_with(name, ".gate.weight") || has_component(name, "router", false))
        return KEEP_ROUTER;
    return CONVERT;
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

/* "N what: a, b, c ... and K more" on stderr, names of the tensors whose reason[] is r. */
static void print_group(const bfp8_safetensors *in, const keep_reason *reason, keep_reason r, const char *what) {
    enum { SHOWN = 8 };
    size_t count = 0, n = bfp8_safetensors_count(in);
    for (size_t i = 0; i < n; i++) count += reason[i] == r;
    if (!count) return;
    fprintf(stderr, "  %zu %s:", count, what);
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < SHOWN; i++)
        if (reason[i] == r) fprintf(stderr, "%s %s", shown++ ? "," : "", bfp8_safetensors_at(in, i)->name);
    if (count > SHOWN) fprintf(stderr, " ... and %zu more", count - SHOWN);
    fputc('\n', stderr);
}

int cmd_quantize(int argc, char **argv) {
    const char *cmd = "quantize";
    const char *in_path = NULL, *out_path = NULL, *kind = NULL;
    bfp8_scale_format format = BFP8_SCALE_FP32;
    const char **listed = calloc((size_t)argc, sizeof *listed), **skips = calloc((size_t)argc, sizeof *skips);
    int n_listed = 0, n_skips = 0;
    if (!listed || !skips) {
        free(listed);
        free(skips);
        return cli_error(CLI_FAIL, cmd, "out of memory");
    }
    int rc = CLI_OK;
#define USAGE_FAIL(...)                                                                                          \
    do {                                                                                                         \
        rc = cli_usage_error(cmd, usage, __VA_ARGS__);                                                           \
        goto parsed;                                                                                             \
    } while (0)
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(usage, stdout);
            goto parsed;
        } else if (cli_opt(argc, argv, &i, "--kind", &v)) {
            if (!v || (strcmp(v, "act") != 0 && strcmp(v, "weight") != 0))
                USAGE_FAIL("bad --kind '%s' (act or weight)", v ? v : "");
            kind = v;
        } else if (cli_opt(argc, argv, &i, "--in", &v)) {
            if (!v || !*v) USAGE_FAIL("--in needs a file");
            in_path = v;
        } else if (cli_opt(argc, argv, &i, "--out", &v)) {
            if (!v || !*v) USAGE_FAIL("--out needs a file");
            out_path = v;
        } else if (cli_opt(argc, argv, &i, "--tensor", &v)) {
            if (!v || !*v) USAGE_FAIL("--tensor needs a name");
            listed[n_listed++] = v;
        } else if (cli_opt(argc, argv, &i, "--skip", &v)) {
            if (!v || !*v) USAGE_FAIL("--skip needs a pattern");
            skips[n_skips++] = v;
        } else if (cli_opt(argc, argv, &i, "--scale-format", &v)) {
            if (!v || bfp8_scale_format_parse(v, &format) != BFP8_OK)
                USAGE_FAIL("bad --scale-format '%s' (fp32 or ue8m0)", v ? v : "");
        } else {
            USAGE_FAIL("unknown option '%s'", argv[i]);
        }
    }
    if (!kind || !in_path || !out_path) USAGE_FAIL("--kind, --in and --out are required");
#undef USAGE_FAIL
    if (cli_output_is_input(cmd, out_path, &in_path, 1)) {
        rc = CLI_FAIL;
        goto parsed;
    }
    const bool is_act = strcmp(kind, "act") == 0;
    const char *suffix = is_act ? "_scale" : "_scale_inv";

    bfp8_safetensors *in = NULL;
    bfp8_status st = bfp8_safetensors_open(in_path, &in);
    if (st != BFP8_OK) {
        rc = cli_lib_error(cmd, in_path, st);
        goto parsed;
    }

    const size_t count = bfp8_safetensors_count(in);
    size_t n_out = 0, n_quantized = 0;
    /* Each input gives at most two outputs; allocations are owned per output so cleanup is one loop. */
    bfp8_tensor *out = calloc(2 * count + 1, sizeof *out);
    void **owned = calloc(2 * count + 1, sizeof *owned);
    char **owned_names = calloc(2 * count + 1, sizeof *owned_names);
    keep_reason *reason = calloc(count + 1, sizeof *reason);
    if (!out || !owned || !owned_names || !reason) {
        rc = cli_error(CLI_FAIL, cmd, "out of memory");
        goto done;
    }
    /* Listed tensors must exist and be quantizable; a --skip may not contradict a --tensor. */
    for (int j = 0; j < n_listed; j++) {
        const bfp8_tensor *t = bfp8_safetensors_find(in, listed[j]);
        if (!t) {
            rc = cli_error(CLI_FAIL, cmd, "%s: no tensor named '%s'", in_path, listed[j]);
            goto done;
        }
        if (!is_float_2d(t)) {
            rc = cli_error(CLI_FAIL, cmd, "%s: tensor '%s' is %s with %d dimensions; want a 2-D f32, bf16 or f16",
                           in_path, listed[j], bfp8_dtype_name(t->dtype), t->ndim);
            goto done;
        }
        for (int k = 0; k < n_skips; k++)
            if (fnmatch(skips[k], listed[j], 0) == 0) {
                rc = cli_usage_error(cmd, usage, "--tensor '%s' is also matched by --skip '%s'", listed[j], skips[k]);
                goto done;
            }
    }
    for (size_t i = 0; i < count; i++) {
        const bfp8_tensor *t = bfp8_safetensors_at(in, i);
        keep_reason r = n_listed ? KEEP_NOT_LISTED : default_rule(t, is_act);
        for (int j = 0; j < n_listed && r != CONVERT; j++)
            if (strcmp(t->name, listed[j]) == 0) r = CONVERT;
        for (int k = 0; k < n_skips && r != KEEP_SKIPPED; k++)
            if (fnmatch(skips[k], t->name, 0) == 0) r = KEEP_SKIPPED;
        reason[i] = r;
    }

    for (size_t i = 0; i < count; i++) {
        const bfp8_tensor *t = bfp8_safetensors_at(in, i);
        if (reason[i] != CONVERT) {
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

    /* What was converted and what was kept, and why. */
    fprintf(stderr, "blockfp8 quantize: converted %zu of %zu tensor(s) (--kind %s, %s scales)%s\n", n_quantized, count,
            kind, bfp8_scale_format_name(format), n_quantized ? ":" : "");
    print_group(in, reason, CONVERT, "converted");
    if (n_quantized < count) {
        fprintf(stderr, "blockfp8 quantize: kept %zu tensor(s) as they are:\n", count - n_quantized);
        for (int r = 1; r < KEEP_COUNT; r++) print_group(in, reason, (keep_reason)r, keep_text[r]);
    }
    if (n_quantized == 0) fprintf(stderr, "blockfp8 quantize: warning: nothing in %s to quantize\n", in_path);

    st = cli_write_safetensors(out_path, out, n_out);
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
    free(reason);
    bfp8_safetensors_close(in);
parsed:
    free(listed);
    free(skips);
    return rc;
}
