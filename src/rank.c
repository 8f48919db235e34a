/* The measured ranking's lookup (rank.h): which cell of the table ranks a problem. */
#include "rank.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A cell the lookup may use: M in range (the nearest-M rule multiplies two of them). */
static bool cell_usable(const bfp8_rank_cell *c) { return c->m >= 1 && c->m <= BFP8_RANK_MAX_M; }

static bool cell_of(const bfp8_rank_cell *c, int card, int arch, bfp8_dtype dt, int64_t n, int64_t k) {
    return cell_usable(c) && c->card == card && c->arch == arch && c->out_dtype == dt && c->n == n && c->k == k;
}

static bool has_shape(const bfp8_rank_table *t, int card, int arch, bfp8_dtype dt, int64_t n, int64_t k) {
    for (size_t i = 0; i < t->ncells; i++)
        if (cell_of(&t->cells[i], card, arch, dt, n, k)) return true;
    return false;
}

/* The other output dtype of the same size, whose cells rank this one's: bf16 <-> f16. */
static bool same_size_dtype(bfp8_dtype dt, bfp8_dtype *alt) {
    if (dt == BFP8_DTYPE_BF16) *alt = BFP8_DTYPE_F16;
    else if (dt == BFP8_DTYPE_F16) *alt = BFP8_DTYPE_BF16;
    else return false;
    return true;
}

/* The index of the card named `name` in the table's list, or -1 (NULL, or a card the table has not measured). */
static int card_index(const bfp8_rank_table *t, const char *name) {
    for (int i = 0; name && i < t->ncards; i++)
        if (t->cards[i] && strcmp(t->cards[i], name) == 0) return i;
    return -1;
}

/* The dtype whose cells of `card` rank p (p's output dtype, else the one of the same size); false: neither. */
static bool card_dtype(const bfp8_rank_table *t, int card, const bfp8_problem *p, bfp8_dtype *dt) {
    bfp8_dtype alt;
    if (has_shape(t, card, p->arch, p->out_dtype, p->n, p->k)) {
        *dt = p->out_dtype;
        return true;
    }
    if (same_size_dtype(p->out_dtype, &alt) && has_shape(t, card, p->arch, alt, p->n, p->k)) {
        *dt = alt;
        return true;
    }
    return false;
}

bfp8_rank bfp8_rank_find(const bfp8_rank_table *t, const bfp8_problem *p) {
    bfp8_rank r = {.table = t, .cell = NULL, .miss = BFP8_RANK_MISS_SHAPE, .other_card = false};
    if (p->device != BFP8_DEVICE_CUDA) {
        r.miss = BFP8_RANK_MISS_NOT_CUDA;
        return r;
    }
    if (p->grouped != BFP8_GROUPED_NONE) {
        r.miss = BFP8_RANK_MISS_GROUPED;
        return r;
    }
    if (!t) return r;
    /* The problem's card first, then the table's cards in their order. */
    const int own = card_index(t, p->card);
    int card = -1;
    bfp8_dtype dt = p->out_dtype;
    for (int i = -1; i < t->ncards && card < 0; i++) {
        const int c = i < 0 ? own : i;
        if (c >= 0 && (i < 0 || c != own) && card_dtype(t, c, p, &dt)) card = c;
    }
    if (card < 0) {
        for (size_t i = 0; i < t->ncells; i++) {
            const bfp8_rank_cell *c = &t->cells[i];
            if (cell_usable(c) && c->arch == p->arch && c->n == p->n && c->k == p->k) r.miss = BFP8_RANK_MISS_DTYPE;
        }
        return r;
    }
    /* The measured M just below and just above (or at) M. */
    const int64_t m = p->m < 1 ? 1 : p->m;
    const bfp8_rank_cell *lo = NULL, *hi = NULL;
    for (size_t i = 0; i < t->ncells; i++) {
        const bfp8_rank_cell *c = &t->cells[i];
        if (!cell_of(c, card, p->arch, dt, p->n, p->k)) continue;
        if (c->m <= m && (!lo || c->m > lo->m)) lo = c;
        if (c->m >= m && (!hi || c->m < hi->m)) hi = c;
    }
    /* Nearest in log space: M*M <= lo*hi, as M <= floor(lo*hi / M), exact in int64 (lo, hi <= 2^31). */
    if (!lo) r.cell = hi;
    else if (!hi || lo == hi) r.cell = lo;
    else r.cell = m <= lo->m * hi->m / m ? lo : hi;
    r.miss = BFP8_RANK_FOUND;
    r.other_card = p->card && card != own;
    return r;
}

double bfp8_rank_time(const bfp8_rank *r, const char *name) {
    if (!r || !r->cell || !name) return 0;
    for (int i = 0; i < r->table->nbackends && i < BFP8_RANK_MAX_BACKENDS; i++) {
        if (strcmp(r->table->backends[i], name) != 0) continue;
        const double us = r->cell->us[i];
        return us > 0 ? us : 0; /* NaN and non-positive times are "not measured" */
    }
    return 0;
}

void bfp8_rank_describe(const bfp8_rank *r, const bfp8_problem *p, char *buf, size_t size) {
    if (!size) return;
    if (!r->cell) {
        switch (r->miss) {
        case BFP8_RANK_MISS_NOT_CUDA:
            snprintf(buf, size, "caps priority (the measured table ranks CUDA backends)");
            break;
        case BFP8_RANK_MISS_GROUPED:
            snprintf(buf, size, "caps priority (the measured table times dense GEMMs, not grouped ones)");
            break;
        case BFP8_RANK_MISS_DTYPE:
            snprintf(buf, size, "caps priority (no measured cell of output %s for sm_%d N=%" PRId64 " K=%" PRId64 ")",
                     bfp8_dtype_name(p->out_dtype), p->arch, p->n, p->k);
            break;
        default:
            snprintf(buf, size, "caps priority (no measured cell for sm_%d N=%" PRId64 " K=%" PRId64 ")", p->arch, p->n,
                     p->k);
            break;
        }
        return;
    }
    const bfp8_rank_cell *c = r->cell;
    char how[96] = "";
    size_t used = 0;
    if (c->m != p->m)
        used += (size_t)snprintf(how, sizeof how, " (nearest measured M to %" PRId64 ")", p->m);
    if (c->out_dtype != p->out_dtype && used < sizeof how)
        snprintf(how + used, sizeof how - used, " (the %s cell for %s output)", bfp8_dtype_name(c->out_dtype),
                 bfp8_dtype_name(p->out_dtype));
    const char *source = c->source >= 0 && c->source < r->table->nsources ? r->table->sources[c->source] : "?";
    const char *card = c->card >= 0 && c->card < r->table->ncards ? r->table->cards[c->card] : "?";
    char other[BFP8_REASON_MAX] = "";
    if (r->other_card) snprintf(other, sizeof other, " (%s has no cells of this shape and dtype)", p->card);
    snprintf(buf, size, "measured on %s%s: sm_%d %s N=%" PRId64 " K=%" PRId64 " M=%" PRId64 "%s, run %s", card, other,
             c->arch, bfp8_dtype_name(c->out_dtype), c->n, c->k, c->m, how, source);
}
