/* The optimized CPU backend `cpu`: the driver (planning, activation packing, threads, epilogue), the portable C
 * kernels and the backend definition. The AVX2/FMA/F16C kernels live in cpu_avx2.c; the canonical summation
 * orders that make both give the same bytes are written down in cpu.h.
 *
 * Two paths, chosen from M alone (never from the thread count, so the bytes never depend on it):
 * - small M (decode; memory-bound): each weight row block is read once, widened to fp32 and dotted with every
 *   activation row;
 * - large M: 16-row weight panels are decoded once into fp32 [k][16] and a 6x16 register-blocked FMA tile runs
 *   over packed activation panels, the per-block scales applied at promotion.
 * Threads split the work along N (and M for narrow problems), never along K. */
#include "backends/cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

float bfp8_cpu_e4m3_scaled[256];
float bfp8_cpu_e4m3_exact[256];

static void tables_fill(void) {
    for (int c = 0; c < 256; c++) {
        bfp8_cpu_e4m3_exact[c] = bfp8_e4m3_to_f32((uint8_t)c);
        bfp8_cpu_e4m3_scaled[c] = bfp8_cpu_e4m3_exact[c] * 0x1p-8f; /* exact: a power-of-two factor, no underflow */
    }
}

void bfp8_cpu_tables_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tables_fill);
}

void bfp8_cpu_store_exact(const bfp8_cpu_plan *p, int64_t m, int64_t n) {
    bfp8_store_f64(p->y, p->y_dtype, m * p->n + n, bfp8_ref_element(p->args, m, n));
}

void bfp8_cpu_store(const bfp8_cpu_plan *p, int64_t m0, int64_t rows, int64_t n0, int64_t cols, const float *tot,
                    int64_t ld) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = (m0 + r) * p->n + n0;
        for (int64_t c = 0; c < cols; c++) {
            float v = tot[r * ld + c];
            if (p->bias) v = v + bfp8_load_f32(p->bias, p->bias_dtype, n0 + c);
            if (isfinite(v))
                bfp8_store_f32(p->y, p->y_dtype, base + c, v);
            else
                bfp8_cpu_store_exact(p, m0 + r, n0 + c);
        }
    }
}

/* --- portable kernels (the same orders as the AVX2 ones; fmaf is one rounding like the FMA instruction) -------- */
/* The 8 lanes of one block's dot product (cpu.h: small-M order): 32 lanes folded to 8 for M = 1, 8 for M >= 2. */
static void block_lanes(const float *a, const float *b, float v[8], bool lanes32) {
    float lane[32] = {0};
    if (lanes32) {
        for (int k = 0; k < 128; k++) lane[k % 32] = fmaf(a[k], b[k], lane[k % 32]);
        for (int i = 0; i < 8; i++) v[i] = (lane[i] + lane[8 + i]) + (lane[16 + i] + lane[24 + i]);
    } else {
        for (int k = 0; k < 128; k++) lane[k % 8] = fmaf(a[k], b[k], lane[k % 8]);
        for (int i = 0; i < 8; i++) v[i] = lane[i];
    }
}

static void portable_small_m_rows(const bfp8_cpu_plan *p, int64_t n0, int64_t n1, float *scratch) {
    const int64_t m_count = p->m;
    float *T = scratch, *V = T + m_count * 8, *tot = V + m_count * 64, *buf = tot + m_count * BFP8_CPU_SMALL_ROWS;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *brow = p->b + n * p->k;
        const float *sb = p->sb + (n / BFP8_BLOCK) * p->sld;
        for (int64_t i = 0; i < m_count * 8; i++) T[i] = 0.0f;
        for (int64_t g = 0; g * 8 < p->kblocks; g++) {
            for (int j = 0; j < 8; j++) {
                int64_t kb = g * 8 + j, k0 = kb * BFP8_BLOCK;
                if (kb >= p->kblocks) {
                    for (int64_t m = 0; m < m_count; m++)
                        for (int i = 0; i < 8; i++) V[(m * 8 + j) * 8 + i] = 0.0f;
                    continue;
                }
                int64_t len = p->k - k0 < BFP8_BLOCK ? p->k - k0 : BFP8_BLOCK;
                for (int64_t i = 0; i < BFP8_BLOCK; i++) buf[i] = i < len ? bfp8_cpu_e4m3_scaled[brow[k0 + i]] : 0.0f;
                for (int64_t m = 0; m < m_count; m++)
                    block_lanes(p->a_f32 + m * p->kpad + k0, buf, V + (m * 8 + j) * 8, m_count == 1);
            }
            for (int64_t m = 0; m < m_count; m++) {
                const float *sa = p->sa + m * p->sld + g * 8;
                for (int j = 0; j < 8; j++) {
                    const float *v = V + (m * 8 + j) * 8;
                    float partial = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
                    T[m * 8 + j] = fmaf(sa[j] * sb[g * 8 + j], partial * 256.0f, T[m * 8 + j]);
                }
            }
        }
        for (int64_t m = 0; m < m_count; m++) {
            const float *t = T + m * 8;
            float u0 = t[0] + t[4], u1 = t[1] + t[5], u2 = t[2] + t[6], u3 = t[3] + t[7];
            tot[m * BFP8_CPU_SMALL_ROWS + (n - n0)] = (u0 + u2) + (u1 + u3);
        }
    }
    bfp8_cpu_store(p, 0, m_count, n0, n1 - n0, tot, BFP8_CPU_SMALL_ROWS);
}

static void portable_pack_b(const bfp8_cpu_plan *p, int64_t n0, int64_t kb0, int64_t kb1, float *bp) {
    for (int64_t j = 0; j < BFP8_CPU_NR; j++) {
        int64_t n = n0 + j;
        for (int64_t k = kb0 * BFP8_BLOCK; k < kb1 * BFP8_BLOCK; k++) {
            float v = (n < p->n && k < p->k) ? bfp8_cpu_e4m3_scaled[p->b[n * p->k + k]] : 0.0f;
            bp[(k - kb0 * BFP8_BLOCK) * BFP8_CPU_NR + j] = v;
        }
    }
}

static void portable_tile(const float *ap, const float *sp, const float *bp, const float *sb_row, int64_t kblocks,
                          float *tot) {
    for (int64_t kb = 0; kb < kblocks; kb++) {
        float acc[BFP8_CPU_MR][BFP8_CPU_NR] = {{0}};
        const float *a = ap + kb * BFP8_BLOCK * BFP8_CPU_MR, *b = bp + kb * BFP8_BLOCK * BFP8_CPU_NR;
        for (int kk = 0; kk < BFP8_BLOCK; kk++)
            for (int r = 0; r < BFP8_CPU_MR; r++)
                for (int j = 0; j < BFP8_CPU_NR; j++)
                    acc[r][j] = fmaf(a[kk * BFP8_CPU_MR + r], b[kk * BFP8_CPU_NR + j], acc[r][j]);
        for (int r = 0; r < BFP8_CPU_MR; r++) {
            float s = sp[kb * BFP8_CPU_MR + r] * sb_row[kb];
            for (int j = 0; j < BFP8_CPU_NR; j++)
                tot[r * BFP8_CPU_NR + j] = fmaf(s, acc[r][j] * 256.0f, tot[r * BFP8_CPU_NR + j]);
        }
    }
}

const bfp8_cpu_kernels bfp8_cpu_kernels_portable = {
    .isa = "portable",
    .small_m_rows = portable_small_m_rows,
    .pack_b = portable_pack_b,
    .tile = portable_tile,
    .store = bfp8_cpu_store,
};

/* --- ISA and path selection ----------------------------------------------------------------------------------- */
static atomic_int forced_path; /* 0 auto, 1 small-M, 2 large-M */
static atomic_int forced_kc_blocks; /* 0: BFP8_CPU_KC_BLOCKS */

void bfp8_cpu_force_path(int path) { atomic_store(&forced_path, path >= 0 && path <= 2 ? path : 0); }

void bfp8_cpu_force_kc_blocks(int kc_blocks) { atomic_store(&forced_kc_blocks, kc_blocks > 0 ? kc_blocks : 0); }

/* The ISA is chosen in cpu_features.c, the same for the quantizers. */
static const bfp8_cpu_kernels *select_kernels(void) {
    return bfp8_cpu_isa_current() == BFP8_CPU_ISA_AVX2 ? &bfp8_cpu_kernels_avx2 : &bfp8_cpu_kernels_portable;
}

/* --- the driver ------------------------------------------------------------------------------------------------ */
static float *alloc_floats(int64_t count) {
    int64_t bytes;
    if (!bfp8_mul_ok(count < 16 ? 16 : count, (int64_t)sizeof(float), &bytes)) return NULL;
    void *ptr = NULL;
    if (posix_memalign(&ptr, 64, (size_t)bytes) != 0) return NULL;
    return ptr;
}

typedef struct small_m_job {
    const bfp8_cpu_plan *plan;
    const bfp8_cpu_kernels *kern;
    float *scratch;
    int64_t scratch_stride, rows_per_task;
} small_m_job;

/* Output columns per task: 64 keeps the two threads' stores out of each other's cache lines (at 16 they shared
 * one per task, a measurable cost at K = 512). */
#define BFP8_CPU_COLS_PER_TASK 64

static void small_m_task(void *ctx, int64_t task, int thread) {
    const small_m_job *j = ctx;
    int64_t end = (task + 1) * j->rows_per_task < j->plan->n ? (task + 1) * j->rows_per_task : j->plan->n;
    for (int64_t n0 = task * j->rows_per_task; n0 < end; n0 += BFP8_CPU_SMALL_ROWS) {
        int64_t n1 = n0 + BFP8_CPU_SMALL_ROWS < end ? n0 + BFP8_CPU_SMALL_ROWS : end;
        j->kern->small_m_rows(j->plan, n0, n1, j->scratch + thread * j->scratch_stride);
    }
}

static bfp8_status run_small_m(const bfp8_cpu_plan *plan_in, const bfp8_cpu_kernels *kern, int threads) {
    bfp8_cpu_plan plan = *plan_in;
    int64_t a_count;
    if (!bfp8_mul_ok(plan.m, plan.kpad, &a_count)) return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "cpu: M*K overflows");
    float *a_f32 = alloc_floats(a_count);
    int64_t stride = bfp8_round_up(BFP8_CPU_SMALL_SCRATCH(plan.m), 16); /* 64-byte aligned per thread */
    float *scratch = alloc_floats(stride * threads);
    if (!a_f32 || !scratch) {
        free(a_f32);
        free(scratch);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "cpu: no memory for the activation buffers (M=%lld, K=%lld)",
                         (long long)plan.m, (long long)plan.k);
    }
    for (int64_t m = 0; m < plan.m; m++)
        for (int64_t k = 0; k < plan.kpad; k++)
            a_f32[m * plan.kpad + k] = k < plan.k ? bfp8_cpu_e4m3_exact[plan.a[m * plan.k + k]] : 0.0f;
    plan.a_f32 = a_f32;
    small_m_job job = {.plan = &plan, .kern = kern, .scratch = scratch, .scratch_stride = stride,
                       .rows_per_task = BFP8_CPU_COLS_PER_TASK};
    bfp8_status st = bfp8_parallel_for(bfp8_ceil_div(plan.n, job.rows_per_task), threads, small_m_task, &job);
    free(a_f32);
    free(scratch);
    return st;
}

typedef struct large_m_job {
    const bfp8_cpu_plan *plan;
    const bfp8_cpu_kernels *kern;
    int64_t m0, rows;          /* the M chunk */
    int64_t m_panels, m_groups, panels_per_group;
    int64_t kc_blocks;         /* K blocks per slice */
    float *ap, *sp;            /* packed activations [panel][kb][128][6], scales [panel][kb][6] */
    float *scratch;            /* per thread: bp [4][kc * 128][16], tot [panels_per_group][4][6][16] */
    int64_t scratch_stride;
} large_m_job;

static void pack_a_task(void *ctx, int64_t panel, int thread) {
    const large_m_job *j = ctx;
    const bfp8_cpu_plan *p = j->plan;
    float *ap = j->ap + panel * p->kpad * BFP8_CPU_MR, *sp = j->sp + panel * p->kblocks * BFP8_CPU_MR;
    for (int r = 0; r < BFP8_CPU_MR; r++) {
        int64_t m = j->m0 + panel * BFP8_CPU_MR + r;
        bool valid = m < j->m0 + j->rows;
        const uint8_t *arow = valid ? p->a + m * p->k : NULL;
        for (int64_t k = 0; k < p->kpad; k++)
            ap[k * BFP8_CPU_MR + r] = valid && k < p->k ? bfp8_cpu_e4m3_exact[arow[k]] : 0.0f;
        for (int64_t kb = 0; kb < p->kblocks; kb++)
            sp[kb * BFP8_CPU_MR + r] = valid ? p->sa[m * p->sld + kb] : 0.0f;
    }
}

/* Floats between two packed weight panels of a slice: the slice, plus one cache line so that the panels do not
 * all fall into the same L2 sets (a power-of-two stride of 128 KB did, and cost 25% at K = 512). */
static int64_t large_m_bp_panel(int64_t kc_blocks, int64_t kblocks) {
    return (kc_blocks < kblocks ? kc_blocks : kblocks) * BFP8_BLOCK * BFP8_CPU_NR + 16;
}

/* One task: 64 output columns (4 weight panels) x a group of 6-row activation panels. K goes in slices of
 * kc_blocks: the 4 weight panels of a slice are packed (kc * 8 KB, in the L2) and every activation panel's slice
 * meets all 4 of them while it is in the L1/L2, so the packed activations stream from memory once per 64 columns
 * instead of once per 16. The totals wait in `tot` between slices. */
static void tile_task(void *ctx, int64_t task, int thread) {
    const large_m_job *j = ctx;
    const bfp8_cpu_plan *p = j->plan;
    const int64_t per_task = BFP8_CPU_COLS_PER_TASK / BFP8_CPU_NR, n_panels = bfp8_ceil_div(p->n, BFP8_CPU_NR);
    const int64_t tile = BFP8_CPU_MR * BFP8_CPU_NR, bp_panel = large_m_bp_panel(j->kc_blocks, p->kblocks);
    int64_t first_n = task / j->m_groups * per_task, group = task % j->m_groups;
    int64_t nq = n_panels - first_n < per_task ? n_panels - first_n : per_task;
    float *bp = j->scratch + thread * j->scratch_stride, *tot = bp + per_task * bp_panel;
    int64_t first = group * j->panels_per_group;
    int64_t last = first + j->panels_per_group < j->m_panels ? first + j->panels_per_group : j->m_panels;
    for (int64_t i = 0; i < (last - first) * per_task * tile; i++) tot[i] = 0.0f;
    for (int64_t kb0 = 0; kb0 < p->kblocks; kb0 += j->kc_blocks) {
        int64_t kb1 = kb0 + j->kc_blocks < p->kblocks ? kb0 + j->kc_blocks : p->kblocks;
        for (int64_t q = 0; q < nq; q++) j->kern->pack_b(p, (first_n + q) * BFP8_CPU_NR, kb0, kb1, bp + q * bp_panel);
        for (int64_t panel = first; panel < last; panel++) {
            const float *ap = j->ap + (panel * p->kpad + kb0 * BFP8_BLOCK) * BFP8_CPU_MR;
            const float *sp = j->sp + (panel * p->kblocks + kb0) * BFP8_CPU_MR;
            for (int64_t q = 0; q < nq; q++) {
                const float *sb_row = p->sb + ((first_n + q) * BFP8_CPU_NR / BFP8_BLOCK) * p->sld + kb0;
                j->kern->tile(ap, sp, bp + q * bp_panel, sb_row, kb1 - kb0,
                              tot + ((panel - first) * per_task + q) * tile);
            }
        }
    }
    for (int64_t panel = first; panel < last; panel++) {
        int64_t m0 = j->m0 + panel * BFP8_CPU_MR;
        int64_t rows = j->m0 + j->rows - m0 < BFP8_CPU_MR ? j->m0 + j->rows - m0 : BFP8_CPU_MR;
        for (int64_t q = 0; q < nq; q++) {
            int64_t n0 = (first_n + q) * BFP8_CPU_NR, cols = p->n - n0 < BFP8_CPU_NR ? p->n - n0 : BFP8_CPU_NR;
            j->kern->store(p, m0, rows, n0, cols, tot + ((panel - first) * per_task + q) * tile, BFP8_CPU_NR);
        }
    }
}

static bfp8_status run_large_m(const bfp8_cpu_plan *p, const bfp8_cpu_kernels *kern, int threads) {
    /* Activations are packed one M chunk at a time so the packed copy stays bounded (about 32 MB). */
    const int64_t ap_budget = (int64_t)32 << 20;
    int64_t row_bytes = (p->kpad > 0 ? p->kpad : 1) * (int64_t)sizeof(float);
    int64_t chunk = ap_budget / row_bytes / BFP8_CPU_MR * BFP8_CPU_MR;
    if (chunk < BFP8_CPU_MR) chunk = BFP8_CPU_MR;
    if (chunk > bfp8_round_up(p->m, BFP8_CPU_MR)) chunk = bfp8_round_up(p->m, BFP8_CPU_MR);
    int64_t kc = atomic_load(&forced_kc_blocks) > 0 ? atomic_load(&forced_kc_blocks) : BFP8_CPU_KC_BLOCKS;
    const int64_t per_task = BFP8_CPU_COLS_PER_TASK / BFP8_CPU_NR;
    /* Per thread: the packed weight slices of a task, and the totals of up to a whole chunk of panels. */
    int64_t stride = bfp8_round_up(per_task * large_m_bp_panel(kc, p->kblocks) +
                                       chunk / BFP8_CPU_MR * per_task * BFP8_CPU_MR * BFP8_CPU_NR, 16);
    float *ap = alloc_floats(chunk * p->kpad), *sp = alloc_floats(chunk * p->kblocks);
    float *scratch = alloc_floats(stride * threads);
    bfp8_status st = BFP8_OK;
    if (!ap || !sp || !scratch) {
        st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "cpu: no memory for packing buffers (M=%lld, N=%lld, K=%lld)",
                       (long long)p->m, (long long)p->n, (long long)p->k);
        goto done;
    }
    int64_t n_tasks = bfp8_ceil_div(p->n, BFP8_CPU_COLS_PER_TASK);
    for (int64_t m0 = 0; m0 < p->m && st == BFP8_OK; m0 += chunk) {
        large_m_job job = {.plan = p, .kern = kern, .m0 = m0, .rows = p->m - m0 < chunk ? p->m - m0 : chunk,
                           .kc_blocks = kc, .ap = ap, .sp = sp, .scratch = scratch, .scratch_stride = stride};
        job.m_panels = bfp8_ceil_div(job.rows, BFP8_CPU_MR);
        /* Enough tasks to keep every thread busy when N is narrow; the split never changes a result. */
        job.m_groups = n_tasks >= 4 * threads ? 1 : bfp8_ceil_div(4 * threads, n_tasks);
        if (job.m_groups > job.m_panels) job.m_groups = job.m_panels;
        job.panels_per_group = bfp8_ceil_div(job.m_panels, job.m_groups);
        job.m_groups = bfp8_ceil_div(job.m_panels, job.panels_per_group);
        st = bfp8_parallel_for(job.m_panels, threads, pack_a_task, &job);
        if (st == BFP8_OK) st = bfp8_parallel_for(n_tasks * job.m_groups, threads, tile_task, &job);
    }
done:
    free(ap);
    free(sp);
    free(scratch);
    return st;
}

static bfp8_status cpu_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    if (args->device != BFP8_DEVICE_CPU)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "cpu: the data is on %s, not in host memory",
                         bfp8_device_name(args->device));
    if (args->m == 0 || args->n == 0) return BFP8_OK;
    bfp8_cpu_tables_init();
    const bfp8_cpu_kernels *kern = select_kernels();
    bfp8_cpu_plan plan = {.m = args->m, .n = args->n, .k = args->k, .a = args->a, .b = args->b,
                          .bias = args->bias, .bias_dtype = args->bias_dtype, .y = args->y,
                          .y_dtype = args->y_dtype, .args = args};
    plan.kblocks = bfp8_ceil_div(args->k, BFP8_BLOCK);
    plan.kpad = plan.kblocks * BFP8_BLOCK;
    plan.sld = bfp8_round_up(plan.kblocks, 8);
    int64_t nblocks = bfp8_ceil_div(args->n, BFP8_BLOCK), sa_count, sb_count;
    if (!bfp8_mul_ok(plan.m, plan.sld, &sa_count) || !bfp8_mul_ok(nblocks, plan.sld, &sb_count))
        return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "cpu: scale shape overflows");
    /* Scales to plain row-major fp32 once per call (any layout is read through bfp8_scales_at), rows padded
     * with zeros to a multiple of 8 blocks for the small-M path's 8-block groups. */
    float *sa = alloc_floats(sa_count), *sb = alloc_floats(sb_count);
    if (!sa || !sb) {
        free(sa);
        free(sb);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "cpu: no memory for %lld scales", (long long)(sa_count + sb_count));
    }
    for (int64_t m = 0; m < plan.m; m++)
        for (int64_t kb = 0; kb < plan.sld; kb++)
            sa[m * plan.sld + kb] = kb < plan.kblocks ? bfp8_scales_at(&args->a_scales, m, kb) : 0.0f;
    for (int64_t nb = 0; nb < nblocks; nb++)
        for (int64_t kb = 0; kb < plan.sld; kb++)
            sb[nb * plan.sld + kb] = kb < plan.kblocks ? bfp8_scales_at(&args->b_scales, nb, kb) : 0.0f;
    /* K = 0 has no blocks, yet the M = 1 short-K kernel still multiplies 4 scales by its zero sums: zeros, not
     * whatever the allocation held (an inf or NaN there would turn the bias-only output into NaN). */
    if (plan.kblocks == 0) memset(sa, 0, 16 * sizeof(float)), memset(sb, 0, 16 * sizeof(float));
    plan.sa = sa;
    plan.sb = sb;
    /* Waking the pool costs microseconds: tiny problems run on the calling thread. (The split never changes a
     * result, so this only moves time.) */
    int threads = bfp8_get_num_threads();
    double work = (double)plan.m * (double)plan.n * (double)(plan.kpad > 0 ? plan.kpad : 1);
    if (work < (double)(1 << 20)) threads = 1;
    int path = atomic_load(&forced_path);
    bool small = path == 1 || (path == 0 && plan.m <= BFP8_CPU_SMALL_M);
    bfp8_status st = small ? run_small_m(&plan, kern, threads) : run_large_m(&plan, kern, threads);
    free(sa);
    free(sb);
    return st;
}

/* A group's bytes are the dense call's on its rows: one dense call per group. Groups below this many
 * multiply-adds on average run side by side on the threads (each dense call then on one); larger ones one after
 * the other, each threaded along N as a dense call is. */
#define CPU_GROUP_PARALLEL_WORK ((double)(1 << 24))

static bfp8_status cpu_grouped_gemm(const bfp8_backend *self, const bfp8_grouped_gemm_args *args) {
    if (args->device != BFP8_DEVICE_CPU)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "cpu: the data is on %s, not in host memory",
                         bfp8_device_name(args->device));
    return bfp8_grouped_run_dense(self, args, CPU_GROUP_PARALLEL_WORK);
}

#define CPU_FLOAT_DTYPES (BFP8_BIT(BFP8_DTYPE_F32) | BFP8_BIT(BFP8_DTYPE_BF16) | BFP8_BIT(BFP8_DTYPE_F16))

const bfp8_backend bfp8_backend_cpu = {
    .name = "cpu",
    .summary = "optimized CPU: AVX2/FMA/F16C kernels (portable C without them), threads along M/N",
    .caps =
        {
            .device = BFP8_DEVICE_CPU,
            .out_dtypes = CPU_FLOAT_DTYPES,
            .scale_formats = BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0),
            .a_layouts = (1u << BFP8_LAYOUT_COUNT) - 1, /* read once per call through bfp8_scales_at */
            .b_layouts = (1u << BFP8_LAYOUT_COUNT) - 1,
            .bias_dtypes = CPU_FLOAT_DTYPES,
            .priority = 10,
            .grouped_layouts = BFP8_BIT(BFP8_GROUPED_CONTIGUOUS) | BFP8_BIT(BFP8_GROUPED_MASKED),
        },
    .gemm = cpu_gemm,
    .grouped_gemm = cpu_grouped_gemm,
};
