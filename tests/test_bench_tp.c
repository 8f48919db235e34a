/* What `blockfp8 bench --tp` computes without a GPU (tools/bench_tp_calc.c): the layers --layer names, each cell's
 * plan and the bytes its collective moves (the library's bfp8_tp_traffic_get), and nccl-tests' bus bandwidth. */
#include "bench_tp.h"
#include "check.h"

#include <inttypes.h>

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

static void check_bus_bandwidth(void) {
    /* 1 GB in 1000 us is 1000 GB/s of algorithm bandwidth; the all-reduce's bus factor is 2(R-1)/R, the
     * all-gather's (R-1)/R (nccl-tests/doc/PERFORMANCE.md). */
    CHECK(near(cli_bus_bandwidth(BFP8_TP_ROW, 2, 1e9, 1000), 1000), "all-reduce R=2: %g",
          cli_bus_bandwidth(BFP8_TP_ROW, 2, 1e9, 1000));
    CHECK(near(cli_bus_bandwidth(BFP8_TP_COLUMN, 2, 1e9, 1000), 500), "all-gather R=2");
    CHECK(near(cli_bus_bandwidth(BFP8_TP_ROW, 8, 1e9, 1000), 1750), "all-reduce R=8");
    CHECK(near(cli_bus_bandwidth(BFP8_TP_COLUMN, 8, 1e9, 1000), 875), "all-gather R=8");
    CHECK(near(cli_bus_bandwidth(BFP8_TP_COLUMN, 4, 3e6, 10), 225), "all-gather R=4: 3 MB in 10 us");
    CHECK(cli_bus_bandwidth(BFP8_TP_ROW, 1, 1e9, 1000) == 0, "one rank moves nothing over a link");
    CHECK(cli_bus_bandwidth(BFP8_TP_ROW, 2, 1e9, 0) == 0 && cli_bus_bandwidth(BFP8_TP_ROW, 2, 1e9, -1) == 0,
          "no time, no bandwidth");
}

static void check_layers(void) {
    int idx[CLI_DSR1_LAYER_COUNT], n = 0;
    char why[256];
    CHECK(cli_tp_parse_layers("all", idx, CLI_DSR1_LAYER_COUNT, &n, why, sizeof why) && n == 7, "all: %d layers", n);
    for (int i = 0; i < n; i++) CHECK(CLI_DSR1_LAYERS[idx[i]].tp_mode != CLI_TP_REPLICATED, "all: replicated layer");
    CHECK(cli_tp_parse_layers("mlp.down,q_b", idx, CLI_DSR1_LAYER_COUNT, &n, why, sizeof why) && n == 2 &&
              strcmp(CLI_DSR1_LAYERS[idx[0]].name, "mlp.down") == 0 && strcmp(CLI_DSR1_LAYERS[idx[1]].name, "q_b") == 0,
          "a list, in order");
    CHECK(!cli_tp_parse_layers("q_b,nope", idx, CLI_DSR1_LAYER_COUNT, &n, why, sizeof why) && strstr(why, "'nope'"),
          "unknown: %s", why);
    CHECK(!cli_tp_parse_layers("q_a+kv_a", idx, CLI_DSR1_LAYER_COUNT, &n, why, sizeof why) && strstr(why, "replicated"),
          "replicated: %s", why);
    CHECK(!cli_tp_parse_layers("q_b,q_b", idx, CLI_DSR1_LAYER_COUNT, &n, why, sizeof why) && strstr(why, "twice"),
          "twice: %s", why);
    CHECK(!cli_tp_parse_layers("q_b,", idx, CLI_DSR1_LAYER_COUNT, &n, why, sizeof why), "empty name");
    CHECK(!cli_tp_parse_layers("q_b,kv_b", idx, 1, &n, why, sizeof why), "over the cap");
    /* The table is bench/data/dsr1_shapes.csv's, with the engines' splits. */
    CHECK(CLI_DSR1_LAYERS[4].n == 36864 && CLI_DSR1_LAYERS[4].k == 7168 && CLI_DSR1_LAYERS[4].tp_mode == BFP8_TP_COLUMN,
          "mlp.gate_up");
    CHECK(CLI_DSR1_LAYERS[5].n == 7168 && CLI_DSR1_LAYERS[5].k == 18432 && CLI_DSR1_LAYERS[5].tp_mode == BFP8_TP_ROW,
          "mlp.down");
}

/* The bytes of a cell: the gathered y [M, N] (bf16) for column, the fp32 partial [M, N] for row. */
static void check_cells(void) {
    for (int i = 0; i < CLI_DSR1_LAYER_COUNT; i++) {
        const cli_dsr1_layer *L = &CLI_DSR1_LAYERS[i];
        if (L->tp_mode == CLI_TP_REPLICATED) continue;
        for (int ranks = 2; ranks <= 8; ranks *= 2) {
            cli_tp_cell c;
            CHECK_OK(cli_tp_cell_plan(L, 16, ranks, 0, BFP8_DTYPE_BF16, &c));
            bool column = L->tp_mode == BFP8_TP_COLUMN;
            CHECK(c.traffic.bytes == 16 * L->n * (column ? 2 : 4), "%s R=%d: %" PRId64 " bytes", L->name, ranks,
                  c.traffic.bytes);
            CHECK(c.traffic.count == 16 * (column ? L->n / ranks : L->n), "%s R=%d: count %" PRId64, L->name, ranks,
                  c.traffic.count);
            CHECK(c.shard.rank == 0 && c.shard.ranks == ranks && c.m == 16 && c.layer == L, "cell fields");
        }
    }
    /* kv_b (N=32768) over 3 ranks: refused with the library's message; o_proj's K=16384 over 32 ranks is 512. */
    cli_tp_cell c;
    CHECK_STATUS(cli_tp_cell_plan(&CLI_DSR1_LAYERS[2], 1, 3, 0, BFP8_DTYPE_BF16, &c), BFP8_ERR_UNSUPPORTED);
    CHECK(strstr(bfp8_last_error(), "does not split evenly"), "message: %s", bfp8_last_error());
    /* mlp.down at TP32 cuts blocks (576 columns): refused, then planned with shared blocks; the partial is whole. */
    CHECK_STATUS(cli_tp_cell_plan(&CLI_DSR1_LAYERS[5], 4, 32, 0, BFP8_DTYPE_BF16, &c), BFP8_ERR_UNSUPPORTED);
    CHECK_OK(cli_tp_cell_plan(&CLI_DSR1_LAYERS[5], 4, 32, BFP8_SHARD_SHARE_BLOCKS, BFP8_DTYPE_BF16, &c));
    CHECK(c.traffic.bytes == 4 * 7168 * 4 && c.traffic.dtype == BFP8_DTYPE_F32, "row TP32: %" PRId64, c.traffic.bytes);
}

int main(void) {
    check_bus_bandwidth();
    check_layers();
    check_cells();
    return TEST_SUMMARY("test_bench_tp");
}
