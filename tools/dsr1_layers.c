/* DeepSeek-R1's dense-path block-FP8 linear layers (bench/data/dsr1_shapes.csv): one table for `bench --shapes dsr1`,
 * `bench --model dsr1` and `bench --tp`. */
#include "cli.h"

/* In the order a token meets them. The split is the engines' (SGLang, vLLM): the fused q_a+kv_a projection is
 * replicated on every rank; q_b, kv_b and the gate_up layers are column-parallel, o_proj and the down layers
 * row-parallel (their inputs are the column-parallel layers' local outputs). */
const cli_dsr1_layer CLI_DSR1_LAYERS[CLI_DSR1_LAYER_COUNT] = {
    {"q_a+kv_a", 2112, 7168, CLI_TP_REPLICATED},       {"q_b", 24576, 1536, BFP8_TP_COLUMN},
    {"kv_b", 32768, 512, BFP8_TP_COLUMN},              {"o_proj", 7168, 16384, BFP8_TP_ROW},
    {"mlp.gate_up", 36864, 7168, BFP8_TP_COLUMN},      {"mlp.down", 7168, 18432, BFP8_TP_ROW},
    {"shared.gate_up", 4096, 7168, BFP8_TP_COLUMN},    {"shared.down", 7168, 2048, BFP8_TP_ROW},
};
