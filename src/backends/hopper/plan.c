/* hopper's planner (plan.h): the tiling, the split model, the last wave's split, row slices and stream-K, the
 * kernel's unit grid, and check_units. The rules were measured on the H200's 132 SMs (docs/hopper.md has the
 * measurements); tests/test_hopper_plan.c pins the plans they give. */
#include "backends/hopper/plan.h"

#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

enum { kBK = BFP8_HOPPER_BK, kBP = BFP8_HOPPER_BP, kGroupP = BFP8_HOPPER_GROUP_P };
_Static_assert((kGroupP & (kGroupP - 1)) == 0 && (BFP8_HOPPER_GROUP_P_SHORT_K & (BFP8_HOPPER_GROUP_P_SHORT_K - 1)) == 0,
               "the kernel divides by a full group's P tiles with a shift");
enum { kShortRows = kBP / 2 }; /* a 64-row tile: one consumer warpgroup's rows */

/* ---- the split model ----------------------------------------------------------------------------------------
 * Split K when there are too few tiles to fill the SMs, choosing the split count that minimizes a time model: waves
 * of units, each costing (K blocks per unit) x (the time of one block) + ~0.5 us (epilogue, barriers, refill), plus,
 * for a split, the partials out and back and ~3 us for the reduce (or ~1 us for the sum inside clusters). A block's
 * time is the larger of its weight bytes from HBM (activations and, at large M, weights come from L2) and its FLOPs.
 * An SM streams at most ~50 GB/s, and the SMs of one wave share ~3.2 TB/s: 64 SMs already draw as much as 128.
 * Swapped units compute at ~0.5 PFLOP/s over the chip (a block took 0.38 us on one SM at M=64), normal ones at ~1.
 * Calibrated on the H200 by sweeps of forced split counts (BFP8_HOPPER_SPLITS): with a per-SM share of 4 TB/s / 132
 * instead, the model split M=1 7168x2048 in two (11.9 us) where one unit per tile takes 10.1, and 7168x16384 seven
 * ways (40.8 us) where two take 39.1; with 4 TB/s for the chip it split M=1 4096x7168 in three or four (14.1 / 15.9
 * us, summed in clusters / by the reduce) where two take 13.9 / 15.9, and 2112x7168 in five or seven (10.3 / 12.0)
 * where four take 10.2 / 11.9. */
typedef struct split_model {
    double hbm_bytes, flops; /* per K block of one unit */
    double flop_rate;        /* per SM */
} split_model;

static double block_time(const split_model *sm, int64_t active_sms) {
    const double chip_bw = 3.2e12, sm_bw_max = 50e9;
    const double bw = chip_bw / (double)active_sms < sm_bw_max ? chip_bw / (double)active_sms : sm_bw_max;
    const double mem_s = sm->hbm_bytes / bw, flop_s = sm->flops / sm->flop_rate;
    return mem_s > flop_s ? mem_s : flop_s;
}

/* `units` units of `per` K blocks on `sms` SMs, wave after wave. */
static double waves_time(const split_model *sm, int64_t units, int per, int sms) {
    double t = 0;
    for (int64_t left = units; left > 0; left -= sms) {
        const int64_t active = left < sms ? left : sms;
        t += per * block_time(sm, active) + 0.5e-6;
    }
    return t;
}

/* Partials of `outputs` outputs written and read back, and the reduce kernel. */
static double reduce_time(int splits, double outputs) { return (double)splits * outputs * 8.0 / 4.0e12 + 3.0e-6; }

/* The same splits summed inside clusters (bfp8_hopper_params::csplit): two cluster barriers and the partials over
 * distributed shared memory, no second kernel. On the H200 it took 0.4-2.9 us less than the reduce with the same
 * split count (sweeps of 2112x7168, 4096x7168 and 7168x2048 at M = 1..128, where the clusters fit), so ~2 us less
 * than reduce_time's 3. */
static double cluster_sum_time(int splits, double outputs) {
    return (double)splits * outputs * 4.0 / 4.0e12 + 1.0e-6;
}

/* Whether a tiling's `splits` splits of `tiles` tiles can be summed inside clusters: one cluster per tile, every
 * cluster running at once (in waves it would still be correct, but slower than the reduce), one unit per CTA
 * (bfp8_hopper_params::csplit), and a kernel for it: swapped with 8-token tiles, or normal with 64-wide weight tiles
 * and one P tile (M <= 128). */
static bool csplit_fits(bool swap, int bq, int p_tiles, int64_t tiles, int splits, int sms,
                        const bfp8_hopper_cluster_fit *fit) {
    const bool kernel = swap ? bq == 8 : bq == 64 && p_tiles == 1;
    return kernel && splits >= 2 && splits <= BFP8_HOPPER_MAX_SPLIT_CLUSTER && tiles * splits <= sms &&
           fit->clusters[splits] >= tiles;
}

int bfp8_hopper_plan_activation_tiles(const bfp8_hopper_plan *pl) { return pl->swap ? pl->q_tiles : pl->p_tiles; }

/* The start of CTA c's stream-K run among `blocks` (tile, K block) pairs cut into `ctas` runs whose lengths differ by
 * at most one (bfp8_hopper_params::sk_share, sk_extra). */
static int64_t stream_k_run_start(int64_t c, int64_t blocks, int ctas) {
    const int64_t share = blocks / ctas, extra = blocks % ctas;
    return c * share + (c < extra ? c : extra);
}

/* The most tiles that one of those runs meets (tiles of kblocks pairs). */
static int stream_k_pieces(int ctas, int64_t blocks, int kblocks) {
    int most = 0;
    for (int c = 0; c < ctas; c++) {
        const int64_t first = stream_k_run_start(c, blocks, ctas), last = stream_k_run_start(c + 1, blocks, ctas) - 1;
        const int pieces = last < first ? 0 : (int)(last / kblocks - first / kblocks + 1);
        most = pieces > most ? pieces : most;
    }
    return most;
}

/* The rasterization group's P tiles: BFP8_HOPPER_RASTER_GROUP's where it is a power of two (the kernel divides by a
 * shift), else 8, or 32 on the normal path where K has at most 4 blocks. Measured on an H100 (docs/hopper.md, design
 * log 90): with K >= 1024 groups of 8 were as fast or up to 2.5% faster; with K = 256 or 512 and M >= 2048, groups of
 * 32 were 1-7% faster (M=4096 32768x512 149.7 -> 142.8 us). The swapped path and grouped calls were not swept. */
static int group_p_of(const bfp8_hopper_knobs *knobs, bool dense_normal, int kblocks) {
    const int g = knobs->group_p;
    if (g > 0 && g <= 1024 && (g & (g - 1)) == 0) return g;
    return dense_normal && kblocks <= BFP8_HOPPER_SHORT_K_BLOCKS ? BFP8_HOPPER_GROUP_P_SHORT_K : kGroupP;
}

/* One tiling (swapped with Q tiles of bq tokens, or normal with activation tiles of tile_rows rows and weight tiles of
 * bq rows): its K split, and where the last wave goes (a K split of its tiles, stream-K or row slices). */
static bfp8_hopper_plan plan_tiling(bool swap, int tile_rows, int bq, int64_t m, int64_t n, int64_t k, int sms,
                                    const bfp8_hopper_cluster_fit *fit, const bfp8_hopper_knobs *knobs) {
    bfp8_hopper_plan pl = {0};
    pl.swap = swap;
    pl.bq = bq;
    pl.tile_rows = tile_rows; /* (kBP swapped: P is the weight) */
    const int64_t p_rows = pl.swap ? n : m, q_rows = pl.swap ? m : n;
    pl.p_tiles = (int)bfp8_ceil_div(p_rows, pl.tile_rows);
    pl.q_tiles = (int)bfp8_ceil_div(q_rows, pl.bq);
    const int kblocks = (int)bfp8_ceil_div(k, kBK);
    pl.group_p = group_p_of(knobs, !swap, kblocks);
    const int64_t tiles = (int64_t)pl.p_tiles * pl.q_tiles;
    split_model model;
    /* Weight bytes per block come from HBM once per M tile: all of them when one M tile covers M. */
    model.hbm_bytes = pl.swap ? (double)kBP * kBK : (double)pl.bq * kBK / (double)pl.p_tiles;
    /* (128 rows also for 64-row tiles: the rates below were calibrated so, at M <= 64, on one consumer warpgroup.) */
    model.flops = 2.0 * kBP * pl.bq * kBK;
    model.flop_rate = (pl.swap ? 0.5e15 : 1.0e15) / sms;
    double best = 1e30;
    int best_s = 1;
    const int max_s = kblocks < 32 ? kblocks : 32;
    for (int s = 1; s <= max_s; s++) {
        const int per = (kblocks + s - 1) / s;
        const int real_s = (kblocks + per - 1) / per; /* no empty splits */
        if (real_s != s) continue;
        double t_s = waves_time(&model, tiles * s, per, sms);
        if (s > 1)
            t_s += csplit_fits(swap, bq, pl.p_tiles, tiles, s, sms, fit) ? cluster_sum_time(s, (double)m * n)
                                                                         : reduce_time(s, (double)m * n);
        if (t_s < best * 0.99) {
            best = t_s;
            best_s = s;
        }
    }
    if (knobs->splits) {
        const int per = (kblocks + knobs->splits - 1) / knobs->splits;
        best_s = (kblocks + per - 1) / per; /* no empty splits */
    }
    pl.splits = best_s;
    pl.csplit = csplit_fits(swap, bq, pl.p_tiles, tiles, best_s, sms, fit) ? best_s : 0;
    pl.kb_per_split = (kblocks + best_s - 1) / best_s;
    int64_t units = tiles * best_s;
    /* More tiles than SMs but not a whole number of waves (288 tiles on 132 SMs): whole tiles for the full waves, and
     * only the last partial wave's tiles split so that their pieces fill one wave. Splitting every tile instead pays
     * partials for all of them (8 bytes x splits x M x N: 75 MB at M=64 N=36864); not splitting leaves 24 SMs running
     * 56-block tiles alone at the end. On the H200 it pays only for long tiles: swapped 36864x7168 (56 K blocks)
     * M = 16/64/128: 82.5/92.4/128.3 -> 75.2/79.2/104.3 us, normal M = 100/128: 95.0/95.9 -> 81.2/82.6 us;
     * 24576x1536 (12 K blocks): 3-13% slower at M = 16..128, where the last wave is short and the tail's bytes stream
     * at the chip's rate anyway. Hence kblocks >= 32. Only where the whole tiles cover a prefix of the output's
     * columns, which is what the reduce skips: swapped with one Q tile, or normal with all P tiles in one
     * rasterization group (decode_unit numbers them P tile fastest; the whole tiles are rounded down to full
     * columns). On the swapped path the row slices below take its place wherever it would apply. */
    const int across = bfp8_hopper_plan_activation_tiles(&pl); /* tiles that share a column range of the output */
    if (across <= (pl.swap ? 1 : pl.group_p) && tiles > sms && tiles % sms != 0 && kblocks >= 32 && !knobs->splits) {
        const int64_t whole = tiles / sms * sms / across * across, tail = tiles - whole;
        int s = (int)(sms / tail);
        if (s > kblocks) s = kblocks;
        if (s >= 2) {
            const int per = (kblocks + s - 1) / s;
            s = (kblocks + per - 1) / per;
            const double t_h = waves_time(&model, whole, kblocks, sms) + waves_time(&model, tail * s, per, sms) +
                               reduce_time(s, (double)m * (double)(tail / across) * (swap ? kBP : bq));
            if (t_h < best * 0.97 || knobs->force == BFP8_HOPPER_FORCE_LAST_WAVE_SPLIT) {
                pl.csplit = 0;
                pl.splits = s;
                pl.kb_per_split = per;
                pl.whole_units = (int)whole;
                units = whole + tail * s;
            }
        }
    }
    /* Stream-K (normal path): where the tiles leave a partial last wave (544 tiles on 132 SMs), the full waves but
     * the last run whole tiles, and the tiles left, between one and two waves' worth, are cut into equal runs of
     * (tile, K block) pairs, one per CTA, so that every SM streams as many blocks (bfp8_hopper_params::sk_ctas). A
     * tile cut between runs is summed by its tail from the partials of the others (one slot each, through the L2), in
     * a fixed order; the flags cost a memset before the launch (~1.7 us). A run's blocks took 1.23-1.33x the time of
     * whole tiles' blocks on the H200 (M=512 7168x16384 105.8 -> 110.3 us for 217 blocks a CTA instead of 256), so it
     * is taken where the busiest CTA's blocks, those of its runs counted 1.3 times, drop by at least 5% and 3 us at
     * the model's block time: with a nearly empty last wave (M=4096 2112x7168, 4.1 waves: 115.7 -> 103.1 us), not
     * with a mostly full one (M = 128..4096 7168x16384: 5-8% slower). Only with more tiles than SMs (with fewer,
     * where a K split does not pay either, it is not measured), with two consumer warpgroups (M > 64: at M <= 64 the
     * weight stream runs at the chip's rate already), and not in place of a K split (the last-wave split above keeps
     * its reduce). BFP8_HOPPER_FORCE=stream-k lifts those three conditions. */
    const bool stream_k_kernel = !pl.swap && pl.bq >= 64; /* (the STREAMK kernels: 64- and 128-wide tiles) */
    if (stream_k_kernel && !knobs->splits && knobs->force != BFP8_HOPPER_FORCE_LAST_WAVE_SPLIT && !pl.csplit &&
        (pl.splits == 1 || pl.whole_units) && tiles % sms != 0) {
        const int64_t full_waves = tiles / sms;
        const int64_t whole = full_waves >= 1 ? (full_waves - 1) * sms : 0, sk_tiles = tiles - whole;
        const int64_t run_blocks = sk_tiles * kblocks;
        const double dp_blocks = (double)(bfp8_ceil_div(tiles, sms) * kblocks);
        const double sk_blocks = (double)(whole / sms * kblocks) + 1.3 * (double)bfp8_ceil_div(run_blocks, sms);
        const double saved = (dp_blocks - sk_blocks) * block_time(&model, sms);
        const bool pays =
            m > 64 && tiles > sms && !pl.whole_units && saved >= 3e-6 && sk_blocks <= 0.95 * dp_blocks;
        if (run_blocks / sms >= 4 && run_blocks < INT32_MAX && (pays || knobs->force == BFP8_HOPPER_FORCE_STREAM_K)) {
            pl.sk_tiles = (int)sk_tiles;
            pl.sk_pieces = stream_k_pieces(sms, run_blocks, kblocks);
            pl.whole_units = (int)whole;
            pl.splits = 1;
            pl.kb_per_split = kblocks;
            pl.csplit = 0;
            units = whole + (int64_t)sms * pl.sk_pieces;
        }
    }
    /* Row slices (swapped, one Q tile). Where the weight tiles leave a partial last wave (192 or 288 tiles on 132
     * SMs), the full waves run whole tiles and the weight rows left are cut into slices, one per CTA, each with the
     * whole K range, written straight to y: unlike the K split above no partials and no reduce kernel (that kernel
     * and its boundary cost ~2.6 us), unlike no split no CTAs streaming a whole tile alone at the end. The slices run
     * first (decode_unit): a slice of R rows keeps only R x 128 bytes x 11-12 stages of weights in flight, so a wave
     * of slices alone is latency-bound (run last, they made 36864x7168 2.6 us slower than the K split), but beside
     * the whole tiles of the CTAs without one the stream stays saturated (M = 1/8/16 36864x7168 73.7/72.0/72.2 ->
     * 70.1/68.0/68.6 us). R is a power of two, so a slice lies inside one 128-row weight-scale block (one scale per
     * K block, as for a tile), and at least 32. 36864x7168: 96 slices of 32 rows, then 264 whole tiles; 24576x1536:
     * 120 of 64, then 132. With fewer tiles than SMs (no whole wave), slices instead of the K split where they are 64
     * rows, K is long and they keep >= 10 MB in flight: 7168x18432 at M = 1/8 (a 2-way split summed in clusters)
     * 39.5/39.0 -> 37.3/37.4 us, 7168x16384 35.6/35.8 -> 33.5/33.5 (112 slices: 11 MB). Not there: 4096x7168 with
     * 64-row slices (64 of them, 6.3 MB) 13.7 -> 16.0, with 32-row slices 2112x7168 10.3 -> 16.1 and 4096x7168
     * 13.7 -> 16.5; 7168x2048 (16 K blocks) 3% slower at M = 1. */
    if (pl.swap && pl.q_tiles == 1 && tiles % sms != 0 && !knobs->splits &&
        knobs->force != BFP8_HOPPER_FORCE_LAST_WAVE_SPLIT) {
        const int64_t whole = tiles / sms * sms, left = p_rows - whole * kBP;
        int rows = 32;
        while ((int64_t)rows * sms < left) rows *= 2;
        /* Fewer tiles than SMs: a wave of slices alone, which pays only where the slices keep enough bytes in flight
         * (the 8-token kernel's 12 stages of R x 128 bytes each: rows_left x 1.5 KB over the chip) and K is long. */
        const double in_flight = (double)left * kBK * BFP8_HOPPER_STAGES_SWAP8;
        const bool few_tiles_pay = rows >= 64 && kblocks >= 64 && in_flight >= 10e6;
        if (rows < kBP && (whole > 0 || few_tiles_pay || knobs->force == BFP8_HOPPER_FORCE_SLICES)) {
            pl.slice_rows = rows;
            pl.whole_units = (int)whole;
            pl.splits = 1;
            pl.kb_per_split = kblocks;
            pl.csplit = 0;
            units = whole + bfp8_ceil_div(left, rows);
        }
    }
    pl.units = (int)units;
    pl.grid = (int)(units < sms ? units : sms);
    /* Stages of 64 P rows (more of them fit) for 64-row tiles up to 64 wide, with K long enough: on the H100 (design
     * log 80) 1-6% faster at K = 7168 (4096x7168 M = 16..128), within 1% at 16384, 2-8% slower at K = 512..2048; with
     * 128-wide tiles (8 stages instead of 5) M=64 36864x7168 ran 3-4% slower against DeepGEMM in the same runs. */
    pl.stages64 = !pl.swap && pl.tile_rows < kBP && pl.bq <= 64 && !pl.csplit && !pl.sk_tiles && kblocks >= 32;
    return pl;
}

int64_t bfp8_hopper_normal_tiles(int64_t m, int64_t n, int bq) { return bfp8_ceil_div(m, kBP) * bfp8_ceil_div(n, bq); }

/* The tiling, from sweeps of the tilings on the DeepSeek-R1 table on the H200:
 *  - M <= 8: swapped, with an 8-token Q tile. Since a last tile loads only the rows that exist (edge boxes) and a
 *    normal tile with M <= 64 runs one consumer warpgroup (bfp8_hopper_params::one_consumer), the normal path is
 *    faster from M = 9: at M = 16 by 0-8% on all eight shapes, at M = 17, 24 and 32 by 3-14% on seven and 1-3% on
 *    36864x7168, at M = 40..64 by up to 25%; at M = 8 it wins on five shapes and loses on three (2112x7168,
 *    32768x512, 7168x2048 by 2-8%); at M = 1 it loses on most;
 *  - M = 9..16 where the normal path would split its last wave's K (36864x7168): swapped with a 16-token Q tile and
 *    row slices (72.2 -> 68.6 us at M=16);
 *  - otherwise the normal path, 64-wide weight tiles when their waves cost no more than the 128-wide tiles' waves:
 *    a 64-wide tile takes about 2/3 of a 128-wide one's time (measured 37 vs 56 us a wave at M = 512 and 4096,
 *    7168x16384), so 2 x waves(64) <= 3 x waves(128). That picks 64 for the few-tile shapes (M=128 with N <= 24576,
 *    M=512 N=2112: 11.8-22.2 us against 14.4-28.9 with 128-wide tiles) and 128 for the rest;
 *  - but 64-wide weight tiles wherever K has at most SHORT_K_BLOCKS blocks and M <= SHORT_K_NARROW_M: each unit is
 *    then a few K blocks, and the 128-wide kernel lost 1.2-1.8 us a call when other kernels ran between its calls,
 *    which the 64-wide ones did not (an H100, 32768x512 at M = 16 / 64 / 128, timed interleaved: 13.0 / 14.1 / 15.4
 *    us against 12.4 / 12.9 / 14.3; timed alone the 128-wide tiles were 2-6% faster; docs/hopper.md design log 92).
 * knobs->tile_* (BFP8_HOPPER_TILE) override the choice. */
bfp8_hopper_plan bfp8_hopper_plan_make(int64_t m, int64_t n, int64_t k, int sms, const bfp8_hopper_cluster_fit *fit,
                                       const bfp8_hopper_knobs *knobs) {
    static const bfp8_hopper_cluster_fit no_fit = {{0}};
    const bfp8_hopper_knobs defaults = bfp8_hopper_knobs_default();
    if (!fit) fit = &no_fit;
    if (!knobs) knobs = &defaults;
    /* One 64-row tile where it covers M: the second consumer warpgroup would have no rows. */
    const int rows = knobs->tile_rows ? knobs->tile_rows : m <= kShortRows ? kShortRows : kBP;
    if (knobs->tile_forced && !knobs->tile_swap)
        return plan_tiling(false, rows, knobs->tile_bq, m, n, k, sms, fit, knobs);
    if (m <= 8 || (knobs->tile_forced && m <= 128)) {
        int bq = 8;
        while (bq < m) bq *= 2;
        if (knobs->tile_forced && knobs->tile_bq) bq = knobs->tile_bq;
        return plan_tiling(true, kBP, bq, m, n, k, sms, fit, knobs);
    }
    const int64_t waves64 = bfp8_ceil_div(bfp8_hopper_normal_tiles(m, n, 64), sms);
    const int64_t waves128 = bfp8_ceil_div(bfp8_hopper_normal_tiles(m, n, 128), sms);
    const bool narrow_short_k =
        bfp8_ceil_div(k, kBK) <= BFP8_HOPPER_SHORT_K_BLOCKS && m <= BFP8_HOPPER_SHORT_K_NARROW_M;
    const bfp8_hopper_plan nrm =
        plan_tiling(false, rows, narrow_short_k || 2 * waves64 <= 3 * waves128 ? 64 : 128, m, n, k, sms, fit, knobs);
    /* Too few tiles to fill 3/4 of the SMs, which the plan makes up for by splitting K: 64-row tiles instead (one
     * consumer warpgroup each), as wide as gives the most tiles up to one wave, each with the whole K and no sum of
     * splits, if they fill 3/4 of the SMs and load at most 1.5x the split units' bytes per CTA. On the H100 (design
     * log 80): 2112x7168 at M = 96..256 and 4096x7168 at M = 16..128 3-20% faster (a split's sum took 3-4 us of ~15);
     * at 2x the bytes (576x7168 M=384, whose plan splits K 4 ways) 8% slower. */
    const int64_t few = (int64_t)nrm.p_tiles * nrm.q_tiles;
    if (4 * few < 3 * (int64_t)sms && !knobs->splits) {
        int short_bq = 0;
        int64_t short_tiles = 0;
        for (int bq = 128; bq >= 32; bq /= 2) {
            const int64_t t = bfp8_ceil_div(m, kShortRows) * bfp8_ceil_div(n, bq);
            if (t <= sms && t > short_tiles) short_tiles = t, short_bq = bq;
        }
        const int64_t short_bytes = (kShortRows + short_bq) * bfp8_ceil_div(k, kBK);
        const int64_t split_bytes = (int64_t)(nrm.tile_rows + nrm.bq) * nrm.kb_per_split;
        if (4 * short_tiles >= 3 * (int64_t)sms && 2 * short_bytes <= 3 * split_bytes) {
            /* (One split: the whole K, and none of the last wave's remedies, which one wave does not need.) */
            bfp8_hopper_knobs whole = *knobs;
            whole.splits = 1;
            return plan_tiling(false, kShortRows, short_bq, m, n, k, sms, fit, &whole);
        }
    }
    /* M = 9..16 where the normal path splits its last wave's K (36864x7168): the swapped path with row slices there,
     * which needs no reduce kernel after the GEMM. */
    if (m <= 16 && nrm.whole_units && nrm.splits > 1) {
        const bfp8_hopper_plan swapped = plan_tiling(true, kBP, 16, m, n, k, sms, fit, knobs);
        if (swapped.slice_rows) return swapped;
    }
    return nrm;
}

/* A grouped plan: the normal path's whole tiles, no K split. The groups' tiles usually fill the SMs by themselves
 * (8 experts x 32 weight tiles of gate_up are 256 units), and a split would need partials of every group's rows and
 * a reduce that reads masked_m again. The weight tiles' width follows the dense rule, on the tiles the host expects
 * to have rows (expected_m in each group: the counts themselves are on the device). A masked plan expecting at most
 * 64 rows a group runs 64-row tiles with one consumer warpgroup, as the dense path does at M <= 64: a 128-row tile
 * would spend the second warpgroup's MMAs on rows that are not there. */
bfp8_hopper_plan bfp8_hopper_plan_grouped(int grouped, int64_t groups, int64_t m, int64_t n, int64_t k,
                                          int64_t expected_m, int sms, const bfp8_hopper_knobs *knobs) {
    const bfp8_hopper_knobs defaults = bfp8_hopper_knobs_default();
    if (!knobs) knobs = &defaults;
    const bool masked = grouped == BFP8_HOPPER_MASKED;
    bfp8_hopper_plan pl = {0};
    pl.grouped = grouped;
    pl.groups = (int)groups;
    int64_t per_group = expected_m > 0 ? expected_m : masked ? m : bfp8_ceil_div(m, groups);
    if (per_group > m) per_group = m;
    if (per_group < 1) per_group = 1;
    pl.tile_rows = masked && per_group <= 64 ? 64 : kBP;
    pl.group_p = group_p_of(knobs, false, 0);
    pl.p_tiles = (int)bfp8_ceil_div(m, pl.tile_rows); /* masked: per group */
    const int64_t busy_p_tiles = masked ? groups * bfp8_ceil_div(per_group, pl.tile_rows) : pl.p_tiles;
    const int64_t waves64 = bfp8_ceil_div(busy_p_tiles * bfp8_ceil_div(n, 64), sms);
    const int64_t waves128 = bfp8_ceil_div(busy_p_tiles * bfp8_ceil_div(n, 128), sms);
    /* (Forced "RxQ" tiles are the dense path's: the grouped kernels have 64- and 128-wide weight tiles.) */
    const bool forced = knobs->tile_forced && !knobs->tile_swap && !knobs->tile_rows;
    pl.bq = forced ? knobs->tile_bq : 2 * waves64 <= 3 * waves128 ? 64 : 128;
    pl.q_tiles = (int)bfp8_ceil_div(n, pl.bq);
    pl.splits = 1;
    pl.kb_per_split = (int)bfp8_ceil_div(k, kBK);
    const int64_t units = (masked ? groups : 1) * pl.p_tiles * pl.q_tiles; /* < 2^31: the backend's check */
    pl.units = pl.whole_units = (int)units;
    pl.grid = (int)(units < sms ? units : sms);
    return pl;
}

int64_t bfp8_hopper_plan_whole_columns(const bfp8_hopper_plan *pl) {
    return pl->swap ? (int64_t)pl->whole_units * kBP : (int64_t)(pl->whole_units / pl->p_tiles) * pl->bq;
}

void bfp8_hopper_plan_describe(const bfp8_hopper_plan *pl, char *out, size_t size) {
    char extra[64] = "";
    if (pl->slice_rows)
        snprintf(extra, sizeof extra, "; %d row slices of %d first", pl->units - pl->whole_units, pl->slice_rows);
    if (pl->sk_tiles)
        snprintf(extra, sizeof extra, "; stream-K over %d tiles, up to %d pieces a CTA", pl->sk_tiles, pl->sk_pieces);
    char path[64];
    if (pl->grouped)
        snprintf(path, sizeof path, "grouped %s G=%d, %d-row tiles,",
                 pl->grouped == BFP8_HOPPER_MASKED ? "masked" : "contiguous", pl->groups, pl->tile_rows);
    else
        snprintf(path, sizeof path, "%s",
                 pl->swap ? "swapped" : pl->tile_rows < kBP ? "normal 64-row tiles," : "normal");
    snprintf(out, size, "%s BQ=%d splits=%d (K blocks per split %d) units=%d (whole %d%s) grid=%d%s", path, pl->bq,
             pl->splits, pl->kb_per_split, pl->units, pl->whole_units, extra, pl->grid,
             pl->csplit ? " summed in clusters" : "");
}

int bfp8_hopper_last_box_rows(int64_t rows, int tile) {
    const int left = (int)(rows - (bfp8_ceil_div(rows, tile) - 1) * tile);
    const int box = (left + 7) / 8 * 8;
    return box < tile ? box : 0;
}

int bfp8_hopper_plan_p_box_rows(const bfp8_hopper_plan *pl, int64_t p_rows) {
    return pl->slice_rows ? pl->slice_rows : bfp8_hopper_last_box_rows(p_rows, pl->tile_rows);
}

/* The divisor of d (1 <= d < 2^31; 0 is taken as 1, for a count that no unit divides by). */
static bfp8_hopper_divisor make_divisor(int d) {
    if (d < 1) d = 1;
    int log2_ceil = 0;
    while ((1ll << log2_ceil) < d) log2_ceil++;
    const int shift = 31 + log2_ceil;
    const bfp8_hopper_divisor v = {d, (uint32_t)(((1ull << shift) + (uint64_t)d - 1) / (uint64_t)d), shift};
    return v;
}

void bfp8_hopper_params_set_units(bfp8_hopper_params *hp, const bfp8_hopper_plan *pl, int kblocks, int64_t p_rows) {
    hp->p_rows = (int)p_rows;
    hp->p_last_rows = bfp8_hopper_plan_p_box_rows(pl, p_rows);
    hp->kblocks = kblocks;
    hp->p_tiles = pl->p_tiles;
    hp->tile_rows = pl->tile_rows;
    hp->q_tiles = pl->q_tiles;
    hp->splits = pl->splits;
    hp->kb_per_split = pl->kb_per_split;
    hp->whole_units = pl->whole_units;
    hp->slice_rows = pl->slice_rows;
    hp->units = pl->units;
    hp->tail_tiles = make_divisor(pl->p_tiles * pl->q_tiles - pl->whole_units);
    hp->group_shift = 0;
    while ((1 << hp->group_shift) < pl->group_p) hp->group_shift++; /* (a power of two: group_p_of) */
    hp->group_units = make_divisor(pl->group_p * pl->q_tiles);
    hp->full_groups = pl->p_tiles / pl->group_p;
    hp->last_group_rows = make_divisor(pl->p_tiles % pl->group_p);
    if (pl->sk_tiles) {
        const int64_t blocks = (int64_t)pl->sk_tiles * kblocks; /* < 2^31: plan_tiling */
        hp->sk_ctas = pl->grid;
        hp->sk_tiles = pl->sk_tiles;
        hp->sk_share = (int)(blocks / pl->grid);
        hp->sk_extra = (int)(blocks % pl->grid);
        hp->sk_cta_div = make_divisor(pl->grid);
        hp->sk_kb_div = make_divisor(kblocks);
    }
}

void bfp8_hopper_params_set_grouped(bfp8_hopper_params *hp, const bfp8_hopper_plan *pl, int64_t m, int64_t n,
                                    int64_t k) {
    const bool masked = pl->grouped == BFP8_HOPPER_MASKED;
    const int64_t p_rows = masked ? (int64_t)pl->groups * m : m;
    bfp8_hopper_params_set_units(hp, pl, (int)bfp8_ceil_div(k, kBK), p_rows); /* contiguous: the dense grid */
    hp->m = p_rows, hp->n = n, hp->k = k;
    hp->grouped = pl->grouped;
    hp->groups = pl->groups;
    hp->group_rows = masked ? (int)m : 0;
    hp->tile_rows = pl->tile_rows;
    hp->weight_blocks = (int)bfp8_ceil_div(n, kBP);
    hp->q_tile_div = make_divisor(pl->q_tiles);
    hp->group_div = make_divisor(pl->groups);
    if (masked) hp->p_last_rows = pl->tile_rows < kBP ? pl->tile_rows : 0; /* the 64-row tiles' box */
}

/* ---- check_units --------------------------------------------------------------------------------------------- */

/* Tile t of the unit grid's numbering (decode_unit's, by plain division): groups of group_p P tiles (fewer in the
 * last), P tile fastest within a group. */
static void tile_of(int t, int p_count, int q_count, int group_p, int *pt, int *qt) {
    const int g = t / (group_p * q_count), r = t % (group_p * q_count);
    const int rows = p_count - g * group_p < group_p ? p_count - g * group_p : group_p;
    *pt = g * group_p + r % rows, *qt = r / rows;
}

/* Counts saturate at 2: "more than once". */
static void count_once(unsigned char *c) { *c = *c < 2 ? *c + 1 : 2; }

/* check_units for one stream-K piece (bfp8_hopper_params::sk_ctas): decode_unit against plain division; its (tile, K
 * block) cells counted in `covered`; and the protocol that makes every wait end: a piece that waits (a tail, which
 * gathers) is the last that its CTA runs, and the slots it adds are exactly those of the CTAs before it whose runs end
 * inside its tile, each a stored piece of that tile (`stored` counts, per CTA, the times its slot is read: each must
 * come to 1 where the CTA stores one). */
static bool check_stream_k_piece(const bfp8_hopper_plan *pl, const bfp8_hopper_params *hp, int unit,
                                 unsigned char *covered, unsigned char *stored, char *why, size_t why_size) {
    const int kblocks = hp->kblocks, v = unit - pl->whole_units, c = v % pl->grid, j = v / pl->grid;
    const int64_t blocks = (int64_t)pl->sk_tiles * kblocks;
    const int64_t run0 = stream_k_run_start(c, blocks, pl->grid), run1 = stream_k_run_start(c + 1, blocks, pl->grid);
    const int64_t first_tile = run0 / kblocks, pieces = (run1 - 1) / kblocks - first_tile + 1;
    const bfp8_hopper_unit w = bfp8_hopper_decode_unit(hp, unit, false, true);
    if (j >= pieces) {
        if (w.kb0 != w.kb1) {
            snprintf(why, why_size, "stream-K unit %d (CTA %d piece %d): K blocks [%d, %d) past the run", unit, c, j,
                     w.kb0, w.kb1);
            return false;
        }
        return true;
    }
    /* The run's tiles from the second on, then the first where the run starts inside it. */
    const bool starts_inside = run0 % kblocks != 0;
    const int64_t tile = first_tile + (starts_inside ? (j + 1) % pieces : j), tile0 = tile * kblocks;
    const int64_t first = run0 > tile0 ? run0 : tile0, end = run1 < tile0 + kblocks ? run1 : tile0 + kblocks;
    int pt, qt;
    tile_of(pl->whole_units + (int)tile, pl->p_tiles, pl->q_tiles, pl->group_p, &pt, &qt);
    const bool store = end < tile0 + kblocks, gather = first > tile0 && end == tile0 + kblocks;
    if (w.pt != pt || w.qt != qt || w.kb0 != first - tile0 || w.kb1 != end - tile0 || w.partial ||
        w.sk_store != store || w.sk_gather != gather || w.sk_tile0 != tile0 || w.p0 != pt * pl->tile_rows ||
        w.p_cut != (hp->p_last_rows && pt == pl->p_tiles - 1)) {
        snprintf(why, why_size,
                 "stream-K unit %d (CTA %d piece %d): decoded P %d Q %d K blocks [%d, %d) store %d gather %d tile at "
                 "%d, want P %d Q %d [%lld, %lld) store %d gather %d tile at %lld",
                 unit, c, j, w.pt, w.qt, w.kb0, w.kb1, (int)w.sk_store, (int)w.sk_gather, w.sk_tile0, pt, qt,
                 (long long)(first - tile0), (long long)(end - tile0), (int)store, (int)gather, (long long)tile0);
        return false;
    }
    if (gather && j != pieces - 1) {
        snprintf(why, why_size, "stream-K CTA %d piece %d: a tail that waits, not the CTA's last piece", c, j);
        return false;
    }
    if (gather) {
        /* The kernel's loop: CTAs c - 1, c - 2, .. while their runs start inside the tile, and the one that starts
         * at or before it. Their pieces must cover the tile's blocks before this one, back to back. */
        int64_t next = first;
        for (int d = c - 1;; d--) {
            const int64_t start = d >= 0 ? stream_k_run_start(d, blocks, pl->grid) : -1;
            const int64_t stop = d >= 0 ? stream_k_run_start(d + 1, blocks, pl->grid) : -1;
            if (d < 0 || stop != next || stop <= tile0 || stop >= tile0 + kblocks) {
                snprintf(why, why_size, "stream-K tail of CTA %d: CTA %d's run ends at %lld, want %lld inside the tile",
                         c, d, (long long)stop, (long long)next);
                return false;
            }
            count_once(&stored[d]);
            next = start;
            if (start <= tile0) break;
        }
    }
    for (int kb = w.kb0; kb < w.kb1; kb++) count_once(&covered[((size_t)pt * pl->q_tiles + qt) * kblocks + kb]);
    return true;
}

/* check_units for unit `unit`, a whole tile or a K split: decode_unit against plain division. */
static bool check_tile_unit(const bfp8_hopper_plan *pl, const bfp8_hopper_params *hp, int unit, int u,
                            int64_t p_rows, unsigned char *covered, char *why, size_t why_size) {
    const int kblocks = hp->kblocks;
    const bfp8_hopper_unit w = bfp8_hopper_decode_unit(hp, unit, !pl->sk_tiles, pl->sk_tiles != 0);
    /* The reference: plain division. */
    const bool whole = u < pl->whole_units;
    const int tail = pl->p_tiles * pl->q_tiles - pl->whole_units, v = u - pl->whole_units;
    const int split = whole ? 0 : v / tail, t = whole ? u : pl->whole_units + v % tail;
    int pt, qt;
    tile_of(t, pl->p_tiles, pl->q_tiles, pl->group_p, &pt, &qt);
    const int kb0 = whole ? 0 : split * pl->kb_per_split;
    const int kb1 = whole || kb0 + pl->kb_per_split > kblocks ? kblocks : kb0 + pl->kb_per_split;
    if (w.pt != pt || w.qt != qt || w.split != split || w.kb0 != kb0 || w.kb1 != kb1 ||
        w.partial != (!whole && pl->splits > 1)) {
        snprintf(why, why_size,
                 "unit %d: decoded P %d Q %d split %d K blocks [%d, %d), want P %d Q %d split %d [%d, %d)", unit, w.pt,
                 w.qt, w.split, w.kb0, w.kb1, pt, qt, split, kb0, kb1);
        return false;
    }
    /* The cut box only for a last tile that the matrix ends inside; never for a whole tile beside slices (their box
     * is the slices'). */
    const bool want_cut = hp->p_last_rows && pt == pl->p_tiles - 1 && !pl->slice_rows;
    if (w.p0 != pt * pl->tile_rows || w.p_end != p_rows || w.p_cut != want_cut) {
        snprintf(why, why_size, "unit %d: tile rows [%d, %d) with the %s box, want [%d, %lld) with the %s box", unit,
                 w.p0, w.p_end, w.p_cut ? "cut" : "full", pt * pl->tile_rows, (long long)p_rows,
                 want_cut ? "cut" : "full");
        return false;
    }
    if (pt < 0 || pt >= pl->p_tiles || qt < 0 || qt >= pl->q_tiles || kb0 >= kb1) {
        snprintf(why, why_size, "unit %d: P %d Q %d K blocks [%d, %d) outside %d x %d tiles, %d K blocks", unit, pt,
                 qt, kb0, kb1, pl->p_tiles, pl->q_tiles, kblocks);
        return false;
    }
    const int64_t col0 = pl->swap ? (int64_t)pt * kBP : (int64_t)qt * pl->bq;
    const int64_t whole_cols = bfp8_hopper_plan_whole_columns(pl);
    if (w.partial != (col0 >= whole_cols && pl->splits > 1)) {
        snprintf(why, why_size, "unit %d: partial %d at column %lld, the reduce sums from column %lld", unit,
                 (int)w.partial, (long long)col0, (long long)whole_cols);
        return false;
    }
    for (int kb = kb0; kb < kb1; kb++) count_once(&covered[((size_t)pt * pl->q_tiles + qt) * kblocks + kb]);
    return true;
}

/* decode_unit (with the launch's divisors) against the same decode by plain division, and every (tile, K block)
 * covered by exactly one unit, the partial units exactly those whose columns the split-K reduce sums; with row slices
 * (the first units), every P row after the whole tiles in exactly one slice with the whole K range, each slice inside
 * one 128-row weight-scale block. */
bool bfp8_hopper_plan_check_units(const bfp8_hopper_plan *pl, int64_t m, int64_t n, int64_t k, char *why,
                                  size_t why_size) {
    bfp8_hopper_params hp;
    memset(&hp, 0, sizeof hp);
    const int64_t p_rows = pl->swap ? n : m;
    bfp8_hopper_params_set_units(&hp, pl, (int)bfp8_ceil_div(k, kBK), p_rows);
    const int kblocks = hp.kblocks;
    const size_t cells = (size_t)pl->p_tiles * pl->q_tiles * kblocks;
    unsigned char *covered = (unsigned char *)calloc(cells, 1);
    /* per P row: the slices that cover it */
    unsigned char *rows_sliced = pl->slice_rows ? (unsigned char *)calloc((size_t)p_rows, 1) : NULL;
    /* per CTA of a stream-K plan: the tails that add its slot */
    unsigned char *stored = pl->sk_tiles ? (unsigned char *)calloc((size_t)pl->grid, 1) : NULL;
    if (!covered || (pl->slice_rows && !rows_sliced) || (pl->sk_tiles && !stored)) {
        free(covered), free(rows_sliced), free(stored);
        snprintf(why, why_size, "out of host memory (%zu bytes)", cells + (size_t)p_rows + (size_t)pl->grid);
        return false;
    }
    bool ok = true;
    if (pl->sk_tiles && (pl->swap || pl->csplit || pl->splits != 1 || pl->slice_rows ||
                         pl->whole_units % pl->grid != 0 || pl->units != pl->whole_units + pl->grid * pl->sk_pieces ||
                         pl->whole_units + pl->sk_tiles != pl->p_tiles * pl->q_tiles)) {
        snprintf(why, why_size, "stream-K over %d tiles in a plan it does not apply to", pl->sk_tiles);
        ok = false;
    }
    if (pl->slice_rows &&
        (!pl->swap || pl->q_tiles != 1 || pl->csplit || pl->splits != 1 || kBP % pl->slice_rows != 0)) {
        snprintf(why, why_size, "row slices of %d in a plan they do not apply to", pl->slice_rows);
        ok = false;
    }
    const int slices = pl->slice_rows ? pl->units - pl->whole_units : 0; /* units [0, slices), then the whole tiles */
    for (int unit = 0; ok && unit < pl->units; unit++) {
        if (unit < slices) {
            const bfp8_hopper_unit w = bfp8_hopper_decode_unit(&hp, unit, true, false);
            const int64_t p0 = (int64_t)pl->whole_units * kBP + (int64_t)unit * pl->slice_rows;
            const int64_t p_end = p0 + pl->slice_rows < p_rows ? p0 + pl->slice_rows : p_rows;
            if (p0 >= p_rows || w.p0 != p0 || w.p_end != p_end || w.pt != p0 / kBP || w.qt != 0 || w.kb0 != 0 ||
                w.kb1 != kblocks || w.partial || !w.p_cut || p0 % kBP + pl->slice_rows > kBP) {
                snprintf(why, why_size,
                         "unit %d: slice rows [%d, %d) P %d Q %d K blocks [%d, %d)%s, want rows [%lld, %lld) of %lld "
                         "inside one 128-row block",
                         unit, w.p0, w.p_end, w.pt, w.qt, w.kb0, w.kb1, w.p_cut ? "" : " (full box)", (long long)p0,
                         (long long)p_end, (long long)p_rows);
                ok = false;
            }
            for (int64_t r = p0; ok && r < p_end; r++) count_once(&rows_sliced[r]);
        } else if (pl->sk_tiles && unit >= pl->whole_units) {
            ok = check_stream_k_piece(pl, &hp, unit, covered, stored, why, why_size);
        } else {
            ok = check_tile_unit(pl, &hp, unit, unit - slices, p_rows, covered, why, why_size);
        }
    }
    /* The slices' rows, then their tiles' cells (one Q tile), as computed once. */
    for (int64_t r = (int64_t)pl->whole_units * kBP; ok && pl->slice_rows && r < p_rows; r++) {
        if (rows_sliced[r] != 1) {
            snprintf(why, why_size, "P row %lld in %s", (long long)r,
                     rows_sliced[r] ? "more than one slice" : "no slice");
            ok = false;
        }
    }
    for (size_t i = (size_t)pl->whole_units * kblocks; ok && pl->slice_rows && i < cells; i++)
        covered[i] = covered[i] ? 2 : 1;
    for (int c = 0; ok && pl->sk_tiles && c <= pl->grid; c++) {
        const int64_t start = stream_k_run_start(c, (int64_t)pl->sk_tiles * kblocks, pl->grid);
        if (bfp8_hopper_stream_k_run(&hp, c) != start) {
            snprintf(why, why_size, "stream-K run %d starts at %d in the kernel, want %lld", c,
                     bfp8_hopper_stream_k_run(&hp, c), (long long)start);
            ok = false;
        }
    }
    for (int c = 0; ok && pl->sk_tiles && c < pl->grid; c++) {
        const int64_t end = stream_k_run_start(c + 1, (int64_t)pl->sk_tiles * kblocks, pl->grid);
        const int want = end % kblocks != 0; /* its run ends inside a tile: that piece stores its slot */
        if (stored[c] != want) {
            snprintf(why, why_size, "stream-K CTA %d's slot is added by %d tails, want %d", c, stored[c], want);
            ok = false;
        }
    }
    for (size_t i = 0; ok && i < cells; i++) {
        if (covered[i] != 1) {
            snprintf(why, why_size, "P tile %zu Q tile %zu K block %zu computed %s", i / kblocks / pl->q_tiles,
                     i / kblocks % pl->q_tiles, i % kblocks, covered[i] ? "more than once" : "by no unit");
            ok = false;
        }
    }
    free(covered), free(rows_sliced), free(stored);
    return ok;
}
