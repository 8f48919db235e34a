/* hopper's tile schedule: the kernel's parameters and how a CTA turns a work-unit index into its tile, K range and
 * role. Shared by the device code and by the host planner's checks (plan.c), so it is C that both the C compiler and
 * nvcc accept: the checks run the kernel's own decode, not a copy of it. */
#ifndef BFP8_HOPPER_SCHEDULE_H
#define BFP8_HOPPER_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BFP8_HOPPER_HD __host__ __device__ __forceinline__
#else
#define BFP8_HOPPER_HD static inline
#endif

enum {
    BFP8_HOPPER_BK = 128,     /* K per stage = one scale block = one 128-byte swizzled row */
    BFP8_HOPPER_BP = 128,     /* P rows per tile: two consumer warpgroups of 64 */
    BFP8_HOPPER_GROUP_P = 8,  /* rasterization: groups of 8 P tiles walk Q together (L2 reuse); the default */
    BFP8_HOPPER_GROUP_P_SHORT_K = 32, /* ... and of 32 on the normal path where K is at most SHORT_K_BLOCKS blocks */
    BFP8_HOPPER_SHORT_K_BLOCKS = 4,
    BFP8_HOPPER_SHORT_K_NARROW_M = 128, /* ... where also 64-wide weight tiles on the normal path up to this M */
    BFP8_HOPPER_MAX_SPLIT_CLUSTER = 8, /* the largest cluster that sums K splits: the portable cluster size */
};

/* bfp8_hopper_params::grouped: a dense GEMM, or a grouped (MoE) one in one of DeepGEMM's layouts (docs/grouped.md). */
enum { BFP8_HOPPER_DENSE = 0, BFP8_HOPPER_CONTIGUOUS = 1, BFP8_HOPPER_MASKED = 2 };

/* fp32 values in one stream-K slot: a consumer warpgroup's 64 x bq partial (bfp8_hopper_params::sk_slots). */
#define BFP8_HOPPER_SK_SLOT_FLOATS(bq) (64 * (bq))

/* A divisor fixed for the whole launch, with the multiplier and shift that divide any x in [0, 2^31) by it exactly:
 * x / d = (x * mul) >> shift, with shift = 31 + ceil(log2 d) and mul = ceil(2^shift / d) (< 2^32; the error
 * x * (mul - 2^shift / d) / 2^shift stays under 2^-ceil(log2 d) <= 1/d). One wide multiply instead of a division's
 * ~25 dependent instructions on the CTAs' entry path. */
typedef struct bfp8_hopper_divisor {
    int d;
    uint32_t mul;
    int shift;
} bfp8_hopper_divisor;

BFP8_HOPPER_HD int bfp8_hopper_divide(int x, const bfp8_hopper_divisor *v) {
    return (int)(((uint64_t)(uint32_t)x * v->mul) >> v->shift);
}

/* The kernel's parameters (one struct, passed by value). The GEMM computes a 128 x BQ tile of P * Q^T: P = A, Q = B
 * on the normal path, P = B, Q = A swapped (kernel.cuh). */
typedef struct bfp8_hopper_params {
    int64_t m, n, k;
    int p_rows; /* rows of the P operand: n swapped, m normal */
    int kblocks;
    int p_tiles, q_tiles, splits, kb_per_split, units;
    /* Units [0, whole_units) are tiles 0.. with the whole K range; the rest cover the remaining tiles split
     * `splits` ways (all tiles when whole_units = 0). The whole tiles cover a prefix of the output's columns. With
     * row slices (below) the slices come first and the whole tiles are the last whole_units units. */
    int whole_units;
    /* Swapped plans only: > 0 where the weight rows after the whole tiles are cut into row slices instead of
     * split K (plan.c says why): units [0, units - whole_units) are the slices, then the whole tiles. Slice v
     * takes rows [whole_units * BP + v * slice_rows, + slice_rows) with the whole K range, loaded with the
     * p_last map (whose box then has slice_rows rows, a power of two that divides BP, so a slice lies inside one
     * weight-scale block), and writes y: no partials, no reduce. */
    int slice_rows;
    /* decode_unit's divisors, over the grid of tiles: the split units' tiles (that grid's size less whole_units), a
     * rasterization group's units (its P tiles x the Q tile count) and the last group's P tiles (fewer when the P
     * tile count is not a multiple of the group's). full_groups groups have 1 << group_shift P tiles
     * (bfp8_hopper_plan::group_p, a power of two): a shift, because a third divisor's live values cost the 128 x 128
     * kernel's ring loop 21 instructions a pass (ptxas, CUDA 13.0). */
    bfp8_hopper_divisor tail_tiles, group_units, last_group_rows;
    int full_groups, group_shift;
    const float *sb; /* weight scales, ROW_MAJOR [ceil(n/128)][kblocks] */
    const void *bias;
    int bias_dtype; /* -1: no bias */
    void *y;
    int y_dtype;
    float *workspace; /* [splits][m][n] when splits > 1 */
    int y_vec;        /* y 16-byte aligned and n % 8 == 0: whole 16-byte chunks of output rows */
    int y_tma;        /* normal path, no split, 16-bit output, y_vec: the epilogue stores through TMA (maps.y) */
    /* Builds with HOPPER_TRACE=1 and BFP8_HOPPER_TRACE=1 set: per CTA kTraceSlots %globaltimer stamps (ns), in
     * the order of TraceSlot (kernel.cuh). NULL: no stamps. */
    unsigned long long *trace;
    /* Launched as a programmatic dependent of the kernel that wrote the activations (bfp8_gemm_args::
     * act_from_prior_kernel): the first stages' weight tiles are requested at entry, the activations after
     * waiting for that kernel. */
    int dependent;
    /* Thread 0 issues up to this many (at most kStages) of the first unit's stages at entry: weights and
     * activations, or only the weights when dependent; 0: the producer loop issues them. */
    int entry_stages;
    /* Rows of the box that loads the last P (Q) tile when the matrix ends inside it (a multiple of 8, under BP
     * (BQ)), or (P, in a plan with row slices) a slice: p_box_rows; 0: the whole box. TMA zero-fills rows past
     * the matrix, but not for free: a 128-row activation box with 127 rows past M=129 made every K block ~60%
     * slower. The shared-memory rows past the smaller box keep stale bytes; they feed only accumulator rows
     * (columns, swapped) that lie outside the output (the slice) and are never stored. */
    int p_last_rows, q_last_rows;
    /* Normal path with 64-row tiles (tile_rows; M <= 64, or few tiles): the second warpgroup's rows would lie past
     * the tile, so it would only take tensor-core time from the first. It exits at once, and the empty barriers count
     * the first warpgroup's 4 warps only (4-15% faster at M = 64). */
    int one_consumer;
    /* One P tile (normal) or one Q tile (swapped): each weight byte is loaded once, the weight streams through
     * the L2 once, so its loads carry the evict-first hint and do not push out lines that are used again (the
     * activations, and whatever the caller's other kernels keep there): 2.5-10% faster with an L2 full of dirty
     * lines at M <= 128, neutral with a clean one. */
    int weight_evict_first;
    /* CSPLIT kernels (swapped with 8-token tiles, or normal with 64-wide weight tiles and one P tile; split K, no
     * whole tiles): the `csplit` splits of a tile run in the CTAs of one cluster, cluster c taking tile c and its
     * CTA of rank r split r, and the splits are summed over distributed shared memory instead of by the reduce
     * kernel (no workspace, no second kernel). One unit per CTA (the grid is the units; csplit_fits, checked again
     * before the launch), which the kernel relies on three ways: the producer's thread 0 takes no part in the
     * cluster barriers of the epilogue, so it must have issued its CTA's last load before its consumers reach one
     * (with a second unit it could still be waiting for a free stage there, and neither would move); the normal
     * path stages its partial in the ring, free only once no load is left to issue; and nothing waits for the
     * peers' reads of one unit's staging before the next unit's. 0 in the other kernels. */
    int csplit;
    /* STREAMK kernels (normal path; bfp8_hopper_plan::sk_tiles says where the plan picks them): the tiles after the
     * first whole_units, sk_tiles x kblocks (tile, K block) pairs in tile order, are cut into sk_ctas (the grid)
     * equal runs, CTA c taking [c * sk_share + min(c, sk_extra), + sk_share + (c < sk_extra)). A run begins in a
     * tile's last K blocks (that tile's "tail") and ends in a tile's first ones. The CTA runs its pieces from its
     * second tile on first and the tail last, so that all CTAs step through K roughly together, as whole tiles do:
     * the operands that tiles share (the activations, and at large M the weights) are then read from the L2 while
     * they are there (in run order the stream-K cells ran 1.3-1.4x slower). A piece that ends before its tile's
     * last K block leaves its partial in the CTA's slot of sk_slots and raises its flag (sk_flags, zeroed before
     * the launch); the tail waits for the flags of the CTAs before it whose runs end inside its tile, adds their
     * slots nearest first, and stores the tile. Only a CTA's last piece waits, and only for CTAs with lower run
     * indices, whose slots are written before their own last pieces: the waits form no cycle, and each ends once
     * the CTAs it waits for have run. The run index c is not the block index but a ticket, the order in which the
     * CTAs started (sk_ticket): the CTAs a tail waits for have started, so the waits end even where fewer SMs than
     * the grid are free (MPS limits, a green context, other kernels still running) and whatever order the hardware
     * dispatches the CTAs in (the launch is not cooperative). decode_unit numbers a CTA's pieces
     * whole_units + c + j * sk_ctas, j = 0, 1, .. (empty past its run); the kernel walks its whole tiles by block
     * index, so whole_units is a multiple of sk_ctas (checked before the launch). 0 in the other kernels. */
    int sk_ctas, sk_tiles, sk_share, sk_extra; /* (sk_tiles: the plan's, for the host's check; the kernel does not
                                                * read it) */
    bfp8_hopper_divisor sk_cta_div, sk_kb_div; /* by sk_ctas and by kblocks */
    float *sk_slots;     /* [sk_ctas][2 warpgroups][BFP8_HOPPER_SK_SLOT_FLOATS(BQ)]: a piece's partial */
    unsigned *sk_flags;  /* [sk_ctas][2 warpgroups]: 1 once the slot is written */
    unsigned *sk_ticket; /* the tickets handed out so far (zeroed with the flags) */
    /* GROUPED kernels (normal path, whole tiles, no split): a grouped GEMM in DeepGEMM's layouts. P is A as one
     * matrix of p_rows rows (contiguous: its m rows; masked: the G buffers of group_rows rows back to back), Q the
     * G weights as one [groups * n, K] matrix, so a tile's group is a row offset of the same tensor maps, and y has
     * P's rows. Contiguous: the units are the dense grid's tiles; a tile's rows may belong to several experts
     * (m_indices, read on the device), and it runs one pass per expert, each storing only that expert's rows (with
     * DeepGEMM's 128-aligned segments every tile has one). Masked: unit u is (row tile, group, weight tile), weight
     * tile fastest, so that the first row tile of every group comes first (decode: every unit that has rows is in
     * the first G x q_tiles); a unit whose row tile starts at or past the group's rows (masked_m[g], clamped to
     * [0, group_rows], read on the device) is empty. Rows past a group's count, and padding rows, are never stored.
     * 0 (BFP8_HOPPER_DENSE) in the other kernels. */
    int grouped;
    int groups;
    int group_rows;    /* masked: max_m, the rows of each group's buffer */
    /* P rows a tile: 128, or 64 where one consumer warpgroup runs it (one_consumer; normal path and masked only).
     * Masked 64-row tiles are all loaded with the p_last box. */
    int tile_rows;
    int weight_blocks; /* 128-row weight-scale blocks of one group: its scales are [weight_blocks][kblocks] */
    bfp8_hopper_divisor q_tile_div, group_div; /* masked decode: by q_tiles and by groups */
    const int *m_indices; /* contiguous: [p_rows], -1 (or anything outside [0, groups)) = a padding row */
    const int *masked_m;  /* masked: [groups] */
} bfp8_hopper_params;

/* A work unit: (P tile, Q tile, split) and its K-block range [kb0, kb1); partial: the unit writes fp32 partial sums
 * for the reduce kernel instead of y. */
typedef struct bfp8_hopper_unit {
    int pt, qt, split, kb0, kb1;
    bool partial;
    int p0, p_end; /* the P rows [p0, p_end) it computes: its tile's (p_end: the matrix's rows), or its slice's */
    bool p_cut;    /* its P box is the smaller one (maps.p_last): the last tile the matrix ends inside, or a slice */
    /* Stream-K pieces (bfp8_hopper_params::sk_ctas): sk_store, it leaves its partial in its CTA's slot (it ends
     * before its tile's last K block); sk_gather, it is its tile's tail (it starts past K block 0 and ends the tile)
     * and adds the slots of the CTAs before it whose runs reach into the tile, which starts at sk_tile0 in the run
     * numbering. An empty piece (past its CTA's run) has kb0 == kb1. */
    bool sk_store, sk_gather;
    int sk_tile0;
    /* GROUPED kernels: the unit's group (contiguous: the expert of the current pass; -1 where the tile has none) and
     * the rows it may store, [p0, p_end) (masked: up to the group's count; contiguous: the tile's rows, of which a
     * pass stores its expert's). */
    int group;
} bfp8_hopper_unit;

/* The first (tile, K block) pair of CTA c's stream-K run (bfp8_hopper_params::sk_ctas); c = sk_ctas: their count. */
BFP8_HOPPER_HD int bfp8_hopper_stream_k_run(const bfp8_hopper_params *p, int c) {
    return c * p->sk_share + (c < p->sk_extra ? c : p->sk_extra);
}

/* Unit u of the tiles (no row slices): whole tiles, K splits or, with stream_k, stream-K pieces. Tiles are numbered
 * so that groups of GROUP_P P tiles sweep all Q tiles. */
BFP8_HOPPER_HD bfp8_hopper_unit bfp8_hopper_decode_tile_unit(const bfp8_hopper_params *p, int u, bool stream_k) {
    bfp8_hopper_unit w;
    int t;
    if (stream_k) w.sk_store = w.sk_gather = false, w.sk_tile0 = 0; /* (only the STREAMK kernels read them) */
    if (stream_k && u >= p->whole_units) {
        /* Piece j of CTA c's run, in the order the CTA runs them: the run's tiles from its second on, then its first
         * tile where the run starts inside it (bfp8_hopper_params::sk_ctas says why). */
        const int v = u - p->whole_units, j = bfp8_hopper_divide(v, &p->sk_cta_div), c = v - j * p->sk_ctas;
        const int run0 = bfp8_hopper_stream_k_run(p, c), run1 = bfp8_hopper_stream_k_run(p, c + 1);
        const int first_tile = bfp8_hopper_divide(run0, &p->sk_kb_div),
                  pieces = bfp8_hopper_divide(run1 - 1, &p->sk_kb_div) - first_tile + 1;
        w.split = 0, w.partial = false;
        if (j >= pieces) { /* past the run: nothing to do */
            w.pt = w.qt = 0, w.kb0 = w.kb1 = 0, w.p0 = 0, w.p_end = p->p_rows, w.p_cut = false;
            return w;
        }
        const bool rotate = run0 != first_tile * p->kblocks;
        const int tile = first_tile + (rotate ? (j + 1 == pieces ? 0 : j + 1) : j), tile0 = tile * p->kblocks;
        const int first = run0 > tile0 ? run0 : tile0,
                  end = run1 < tile0 + p->kblocks ? run1 : tile0 + p->kblocks;
        w.kb0 = first - tile0, w.kb1 = end - tile0;
        w.sk_store = w.kb1 < p->kblocks;
        w.sk_gather = w.kb0 > 0 && w.kb1 == p->kblocks;
        w.sk_tile0 = tile0;
        t = p->whole_units + tile;
    } else if (u < p->whole_units) {
        t = u;
        w.split = 0, w.kb0 = 0, w.kb1 = p->kblocks, w.partial = false;
    } else {
        const int v = u - p->whole_units;
        w.split = bfp8_hopper_divide(v, &p->tail_tiles);
        t = p->whole_units + (v - w.split * p->tail_tiles.d);
        w.kb0 = w.split * p->kb_per_split;
        w.kb1 = w.kb0 + p->kb_per_split < p->kblocks ? w.kb0 + p->kb_per_split : p->kblocks;
        w.partial = p->splits > 1;
    }
    const int g = bfp8_hopper_divide(t, &p->group_units);
    const int r = t - g * p->group_units.d;
    /* Within a group, P tile fastest; a full group's rows divide by a shift. */
    const bool full = g < p->full_groups;
    w.qt = full ? (int)((unsigned)r >> p->group_shift) : bfp8_hopper_divide(r, &p->last_group_rows);
    w.pt = (g << p->group_shift) + (r - (full ? w.qt << p->group_shift : w.qt * p->last_group_rows.d));
    w.p0 = w.pt * p->tile_rows, w.p_end = p->p_rows;
    w.p_cut = p->p_last_rows && w.pt == p->p_tiles - 1;
    return w;
}

/* Unit u of a launch: with slices (the kernels that can run them) the first units are row slices where
 * p->slice_rows says so, then the tiles. slices and stream_k never go together. The host checks that the units
 * cover every tile and split once (bfp8_hopper_plan_check_units). */
BFP8_HOPPER_HD bfp8_hopper_unit bfp8_hopper_decode_unit(const bfp8_hopper_params *p, int u, bool slices,
                                                        bool stream_k) {
    if (slices && p->slice_rows) {
        /* The slices first (units [0, units - whole_units)), then the whole tiles. */
        const int n_slices = p->units - p->whole_units;
        if (u >= n_slices) return bfp8_hopper_decode_tile_unit(p, u - n_slices, false);
        bfp8_hopper_unit w;
        if (stream_k) w.sk_store = w.sk_gather = false, w.sk_tile0 = 0;
        w.split = 0, w.kb0 = 0, w.kb1 = p->kblocks, w.partial = false, w.qt = 0, w.p_cut = true;
        w.p0 = p->whole_units * BFP8_HOPPER_BP + u * p->slice_rows;
        w.pt = w.p0 / BFP8_HOPPER_BP; /* the tile the slice lies in: its weight-scale row */
        w.p_end = w.p0 + p->slice_rows < p->p_rows ? w.p0 + p->slice_rows : p->p_rows;
        return w;
    }
    return bfp8_hopper_decode_tile_unit(p, u, stream_k);
}

/* The tile of unit u of a GROUPED launch (bfp8_hopper_params::grouped), before its rows are known: masked, its
 * group and row tile, with the group's whole buffer (p_end; bfp8_hopper_grouped_set_rows cuts it to the count);
 * contiguous, the dense grid's tile with its rows up to the matrix's end, and no group yet (-1: the tile's experts are
 * m_indices', which the producer reads; kernel.cuh). Reads no memory. */
BFP8_HOPPER_HD bfp8_hopper_unit bfp8_hopper_decode_grouped_tile(const bfp8_hopper_params *p, int u) {
    if (p->grouped == BFP8_HOPPER_CONTIGUOUS) {
        bfp8_hopper_unit w = bfp8_hopper_decode_tile_unit(p, u, false);
        w.p_end = w.p0 + BFP8_HOPPER_BP < p->p_rows ? w.p0 + BFP8_HOPPER_BP : p->p_rows;
        w.group = -1;
        return w;
    }
    bfp8_hopper_unit w;
    w.sk_store = w.sk_gather = false, w.sk_tile0 = 0;
    w.split = 0, w.partial = false;
    const int tile = bfp8_hopper_divide(u, &p->q_tile_div), row_tile = bfp8_hopper_divide(tile, &p->group_div);
    w.qt = u - tile * p->q_tiles;
    w.group = tile - row_tile * p->groups;
    w.p0 = w.group * p->group_rows + row_tile * p->tile_rows;
    w.p_end = (w.group + 1) * p->group_rows;
    w.pt = w.p0 / BFP8_HOPPER_BP;            /* (unused by the GROUPED kernels) */
    w.p_cut = p->tile_rows < BFP8_HOPPER_BP; /* the 64-row box (maps.p_last) */
    w.kb0 = 0, w.kb1 = p->kblocks;
    return w;
}

/* A masked unit's rows, from its group's count as masked_m holds it: clamped to [0, group_rows]; the unit is empty
 * (kb1 = kb0) where its row tile starts at or past them. */
BFP8_HOPPER_HD void bfp8_hopper_grouped_set_rows(const bfp8_hopper_params *p, bfp8_hopper_unit *w, int count) {
    const int rows = count < 0 ? 0 : count > p->group_rows ? p->group_rows : count, first = w->group * p->group_rows;
    w->p_end = first + rows;
    if (w->p0 >= w->p_end) w->kb1 = w->kb0;
}

#endif
