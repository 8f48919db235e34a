/* What `blockfp8 bench --tp` computes without a GPU (tools/bench_tp_calc.c), kept apart from the GPU run
 * (tools/bench_tp.c) so that tests/test_bench_tp.c pins it on any machine: the layers a --layer value names, each
 * cell's plan and the bytes its collective moves, and the bus bandwidth. */
#ifndef BFP8_CLI_BENCH_TP_H
#define BFP8_CLI_BENCH_TP_H

#include "cli.h"

#include <stdbool.h>
#include <stddef.h>

/* The layers of a --layer value: "all" (every split layer of CLI_DSR1_LAYERS) or a comma-separated list of their
 * names, as indices into CLI_DSR1_LAYERS in the order given. False, with the reason in `why`, for an unknown name,
 * a repeated one, the replicated q_a+kv_a (nothing to split), an empty list or more than `cap`. */
bool cli_tp_parse_layers(const char *s, int *index, int cap, int *count, char *why, size_t why_size);

/* One cell of the benchmark: a layer at m tokens split over `ranks` GPUs. */
typedef struct cli_tp_cell {
    const cli_dsr1_layer *layer;
    int64_t m;
    bfp8_shard shard;        /* rank 0's plan; every rank's slice is as large */
    bfp8_tp_traffic traffic; /* what bfp8_tp_linear's collective moves (the library's own account) */
} cli_tp_cell;

/* Plans a cell: bfp8_shard_plan of rank 0 (a refusal comes back as its status, the library's message in
 * bfp8_last_error()) and bfp8_tp_traffic_get for output dtype y_dtype. */
bfp8_status cli_tp_cell_plan(const cli_dsr1_layer *layer, int64_t m, int ranks, unsigned flags, bfp8_dtype y_dtype,
                             cli_tp_cell *out);

/* nccl-tests' bus bandwidth (its doc/PERFORMANCE.md), in GB/s, of a collective over `ranks` ranks that moves a
 * buffer of `bytes` (the gathered output of an all-gather, the reduced array of an all-reduce) in `us`
 * microseconds: the algorithm bandwidth bytes / time, times (R-1)/R for an all-gather (column) or 2(R-1)/R for an
 * all-reduce (row). That is the share each rank's link carries, so the figure compares with the link's speed
 * whatever R. 0 when us <= 0 or ranks < 1. */
double cli_bus_bandwidth(bfp8_tp_mode mode, int ranks, double bytes, double us);

#endif
