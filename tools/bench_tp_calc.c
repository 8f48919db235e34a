/* The GPU-free part of `blockfp8 bench --tp` (tools/bench_tp.h). */
#include "bench_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_tp_parse_layers(const char *s, int *index, int cap, int *count, char *why, size_t why_size) {
    *count = 0;
    if (strcmp(s, "all") == 0) {
        for (int i = 0; i < CLI_DSR1_LAYER_COUNT && *count < cap; i++)
            if (CLI_DSR1_LAYERS[i].tp_mode != CLI_TP_REPLICATED) index[(*count)++] = i;
        return true;
    }
    const char *p = s;
    while (true) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < CLI_DSR1_LAYER_COUNT; i++)
            if (strlen(CLI_DSR1_LAYERS[i].name) == len && strncmp(CLI_DSR1_LAYERS[i].name, p, len) == 0) found = i;
        if (found < 0) {
            snprintf(why, why_size, "'%.*s' is not a DeepSeek-R1 layer (q_b, kv_b, o_proj, mlp.gate_up, mlp.down, "
                     "shared.gate_up, shared.down, or all)", (int)len, p);
            return false;
        }
        if (CLI_DSR1_LAYERS[found].tp_mode == CLI_TP_REPLICATED) {
            snprintf(why, why_size, "%s is replicated on every rank by the engines, not split",
                     CLI_DSR1_LAYERS[found].name);
            return false;
        }
        for (int i = 0; i < *count; i++)
            if (index[i] == found) {
                snprintf(why, why_size, "%s is named twice", CLI_DSR1_LAYERS[found].name);
                return false;
            }
        if (*count == cap) {
            snprintf(why, why_size, "more than %d layers", cap);
            return false;
        }
        index[(*count)++] = found;
        if (p[len] == '\0') return true;
        p += len + 1;
    }
}

bfp8_status cli_tp_cell_plan(const cli_dsr1_layer *layer, int64_t m, int ranks, unsigned flags, bfp8_dtype y_dtype,
                             cli_tp_cell *out) {
    *out = (cli_tp_cell){.layer = layer, .m = m};
    bfp8_status st = bfp8_shard_plan(layer->n, layer->k, (bfp8_tp_mode)layer->tp_mode, ranks, 0, flags, &out->shard);
    return st == BFP8_OK ? bfp8_tp_traffic_get(&out->shard, m, y_dtype, &out->traffic) : st;
}

double cli_bus_bandwidth(bfp8_tp_mode mode, int ranks, double bytes, double us) {
    if (!(us > 0) || ranks < 1) return 0;
    double factor = (double)(ranks - 1) / ranks * (mode == BFP8_TP_ROW ? 2.0 : 1.0);
    return bytes / us * 1e-3 * factor; /* bytes/us = MB/s; GB/s = 1e-3 of that */
}
