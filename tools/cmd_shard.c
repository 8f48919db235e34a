/* blockfp8 shard: each rank's slice of a tensor-parallel weight, or the reason it cannot be sharded. */
#include "blockfp8_tp.h"
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 shard --ranks R --mode column|row (--weights W.safetensors --weight NAME | --n N --k K)\n"
    "                      [--share-blocks]\n"
    "\n"
    "Prints each rank's slice of an [N, K] block-FP8 weight split over R ranks (docs/tensor-parallel.md): column\n"
    "splits N (output features; y is all-gathered), row splits K (partial outputs are all-reduced). The split must\n"
    "be even, and a slice that cuts a 128-wide scale block is refused with the reason unless --share-blocks pads\n"
    "each slice to its block boundary and gives each rank the scale block it shares with its neighbour.\n"
    "  --ranks R         number of ranks (1..4096)\n"
    "  --mode            column or row\n"
    "  --weights FILE    a DeepSeek-format safetensors file, with --weight NAME (NAME + NAME_scale_inv)\n"
    "  --n, --k          the weight's shape instead of a file\n"
    "  --share-blocks    allow slices that cut a block (padded; the shared scale block on both ranks)\n";

int cmd_shard(int argc, char **argv) {
    const char *cmd = "shard", *weights = NULL, *name = NULL, *mode_name = NULL;
    int64_t ranks = -1, n = -1, k = -1;
    unsigned flags = 0;
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_is_help(argv[i])) {
            fputs(usage, stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--share-blocks") == 0) {
            flags |= BFP8_SHARD_SHARE_BLOCKS;
        } else if (cli_opt(argc, argv, &i, "--ranks", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--ranks", v, 1, 4096, &ranks))) return rc;
        } else if (cli_opt(argc, argv, &i, "--n", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--n", v, 0, CLI_MAX_DIM, &n))) return rc;
        } else if (cli_opt(argc, argv, &i, "--k", &v)) {
            if ((rc = cli_want_i64(cmd, usage, "--k", v, 0, CLI_MAX_DIM, &k))) return rc;
        } else if (cli_opt(argc, argv, &i, "--mode", &v)) {
            if (!v) return cli_usage_error(cmd, usage, "--mode needs a value (column or row)");
            mode_name = v;
        } else if (cli_opt(argc, argv, &i, "--weights", &v)) {
            if (!v) return cli_usage_error(cmd, usage, "--weights needs a file");
            weights = v;
        } else if (cli_opt(argc, argv, &i, "--weight", &v)) {
            if (!v) return cli_usage_error(cmd, usage, "--weight needs a tensor name");
            name = v;
        } else {
            return cli_usage_error(cmd, usage, "unknown option '%s'", argv[i]);
        }
    }
    if (ranks < 0) return cli_usage_error(cmd, usage, "--ranks is required");
    if (!mode_name) return cli_usage_error(cmd, usage, "--mode is required (column or row)");
    bfp8_tp_mode mode;
    if (bfp8_tp_mode_parse(mode_name, &mode) != BFP8_OK)
        return cli_usage_error(cmd, usage, "bad --mode '%s' (column or row)", mode_name);
    const bool from_file = weights != NULL, from_shape = n >= 0 || k >= 0;
    /* A --weight without --weights names nothing that is read: refused, not ignored. */
    if (from_file == from_shape || (from_file && !name) || (name && !from_file) || (from_shape && (n < 0 || k < 0)))
        return cli_usage_error(cmd, usage, "give either --weights FILE --weight NAME, or --n N --k K");

    bfp8_safetensors *f = NULL;
    if (weights) {
        bfp8_status st = bfp8_safetensors_open(weights, &f);
        if (st != BFP8_OK) return cli_lib_error(cmd, weights, st);
    }
    int status = CLI_OK;
    for (int rank = 0; rank < ranks && status == CLI_OK; rank++) {
        bfp8_shard s;
        bfp8_weight *w = NULL;
        bfp8_status st = f ? bfp8_weight_load_shard(f, name, NULL, mode, (int)ranks, rank, flags, &s, &w)
                           : bfp8_shard_plan(n, k, mode, (int)ranks, rank, flags, &s);
        bfp8_weight_free(w);
        if (st != BFP8_OK) {
            status = cli_lib_error(cmd, f ? weights : "cannot shard", st); /* a file's problem names it */
            break;
        }
        if (rank == 0)
            printf("%s-parallel over %d ranks: weight [%" PRId64 ", %" PRId64 "], %s split\n", bfp8_tp_mode_name(mode),
                   (int)ranks, s.n, s.k, mode == BFP8_TP_COLUMN ? "N" : "K");
        int64_t blocks = ((mode == BFP8_TP_COLUMN ? s.n_local : s.k_local) + BFP8_BLOCK - 1) / BFP8_BLOCK;
        printf("  rank %d: %s [%" PRId64 ", %" PRId64 "), scale blocks [%" PRId64 ", %" PRId64 "), local weight [%" PRId64
               ", %" PRId64 "]", rank, mode == BFP8_TP_COLUMN ? "rows" : "columns", s.begin, s.end, s.block_begin,
               s.block_begin + blocks, s.n_local, s.k_local);
        if (s.lead) printf(", %" PRId64 " pad %s in front (shares block %" PRId64 ")", s.lead, mode == BFP8_TP_COLUMN ? "rows" : "columns", s.block_begin);
        printf("\n");
    }
    bfp8_safetensors_close(f);
    return status;
}
