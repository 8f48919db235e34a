/* blockfp8: the command-line tool. Dispatches to one subcommand per file (tools/cmd_*.c, tools/bench.c). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: blockfp8 <command> [options]   (blockfp8 <command> --help for its options)\n"
    "\n"
    "commands:\n"
    "  demo      a DeepSeek-R1 layer from random weights: quantize, run on the chosen backend, check vs ref\n"
    "  explain   every backend with \"ok\" or its reason for a problem, then the choice\n"
    "  quantize  quantize tensors of a safetensors file (activations 1x128, weights 128x128)\n"
    "  linear    y = x @ W^T (+ bias) from a DeepSeek-format weight file and an input file\n"
    "  check     every backend against the reference on fresh random problems\n"
    "  bench     time backends on the DeepSeek-R1 shapes (--grouped: the MoE expert layers; --tp R: over R GPUs)\n"
    "  shard     each rank's slice of a tensor-parallel weight, or why it cannot be sharded\n"
    "\n"
    "options: --help, --version\n"
    "environment: BFP8_BACKEND=NAME (prefer a backend), BFP8_LOG=dispatch (log each decision once),\n"
    "             BFP8_NUM_THREADS=N (CPU threads, 1..256), BFP8_CPU_ISA=auto|portable|avx2\n";

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"demo", cmd_demo},         {"explain", cmd_explain}, {"quantize", cmd_quantize},
    {"linear", cmd_linear},     {"check", cmd_check},     {"bench", cmd_bench},     {"shard", cmd_shard},
};

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
        fputs(usage, stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("blockfp8 %s\n", BFP8_VERSION);
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        /* A setting the library would ignore is an error here, before any work (--help still works). */
        bool help = false;
        for (int a = 2; a < argc; a++) help = help || cli_is_help(argv[a]);
        if (!help && bfp8_check_env() != BFP8_OK) {
            fprintf(stderr, "blockfp8 %s: %s\n", argv[1], bfp8_last_error());
            return CLI_FAIL;
        }
        return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "blockfp8: unknown command '%s'\n", argv[1]);
    fputs(usage, stderr);
    return CLI_USAGE;
}
