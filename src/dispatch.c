/* The dispatcher (docs/dispatch.md): capability checks, the pure selection function, the registry, policies,
 * thread-safe statistics, BFP8_LOG=dispatch and explain. */
#include "internal.h"
#include "rank.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BACKENDS 32
#define MAX_FALLBACKS 64
#define MAX_LOGGED 1024
#define NAME_MAX_LEN 64
#define MAX_CUDA_DEVICES 64

typedef struct unavailable_backend {
    char name[NAME_MAX_LEN];
    char why[BFP8_REASON_MAX];
} unavailable_backend;

struct bfp8_dispatcher {
    /* Guards the policy, the statistics, the device counters and the log set. The registry is fixed before the
     * first call and read without it. */
    pthread_mutex_t lock;
    const bfp8_backend *backends[MAX_BACKENDS];
    size_t count;
    unavailable_backend unavailable[MAX_BACKENDS];
    size_t unavailable_count;
    bfp8_policy policy;
    char preferred[NAME_MAX_LEN];
    bool log_dispatch;
    uint64_t calls[MAX_BACKENDS];
    uint64_t grouped_calls[MAX_BACKENDS]; /* the grouped ones among calls[] */
    bfp8_fallback_stat fallbacks[MAX_FALLBACKS];
    size_t fallback_count;
    uint64_t fallbacks_unrecorded; /* distinct fallbacks beyond MAX_FALLBACKS: still counted, never lost */
    bfp8_nonfinite_stats nonfinite; /* host-side counts; the CUDA counters are added when read */
    int64_t *cuda_counters[MAX_CUDA_DEVICES]; /* per device ordinal: device int64 [2] (activations, bias) or NULL */
    uint64_t logged[MAX_LOGGED]; /* hashes of decisions already printed */
    size_t logged_count;
};

/* The policy as one call sees it: copied under the lock, so a concurrent set_policy never tears the name. */
typedef struct policy_snapshot {
    bfp8_policy policy;
    char preferred[NAME_MAX_LEN];
} policy_snapshot;

static policy_snapshot snapshot_policy(bfp8_dispatcher *d) {
    policy_snapshot s;
    pthread_mutex_lock(&d->lock);
    s.policy = d->policy;
    memcpy(s.preferred, d->preferred, sizeof s.preferred);
    pthread_mutex_unlock(&d->lock);
    return s;
}

static const char *policy_name(bfp8_policy policy) {
    return policy == BFP8_POLICY_AUTO ? "auto" : policy == BFP8_POLICY_PREFER ? "prefer" : "strict";
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Capability check                                                                                              */
/* ------------------------------------------------------------------------------------------------------------ */

/* "{bf16, f16}" from a dtype bit set. */
static void format_dtype_set(uint32_t set, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "{");
    bool first = true;
    for (int dt = 0; dt < BFP8_DTYPE_COUNT && used < size; dt++) {
        if (!(set & BFP8_BIT(dt))) continue;
        used += (size_t)snprintf(buf + used, size - used, "%s%s", first ? "" : ", ", bfp8_dtype_name((bfp8_dtype)dt));
        first = false;
    }
    if (used < size) snprintf(buf + used, size - used, "}");
}

static void format_layout_set(uint32_t set, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "{");
    bool first = true;
    for (int l = 0; l < BFP8_LAYOUT_COUNT && used < size; l++) {
        if (!(set & BFP8_BIT(l))) continue;
        used += (size_t)snprintf(buf + used, size - used, "%s%s", first ? "" : ", ",
                                 bfp8_scale_layout_name((bfp8_scale_layout)l));
        first = false;
    }
    if (used < size) snprintf(buf + used, size - used, "}");
}

#define REJECT(...)                                                                                              \
    do {                                                                                                         \
        if (reason && reason_size) snprintf(reason, reason_size, __VA_ARGS__);                                   \
        return false;                                                                                            \
    } while (0)

#define DTYPE_MASK ((1u << BFP8_DTYPE_COUNT) - 1)
#define FORMAT_MASK ((1u << BFP8_SCALE_FORMAT_COUNT) - 1)
#define LAYOUT_MASK ((1u << BFP8_LAYOUT_COUNT) - 1)

/* Every enum and size of a problem, before any of them is used as a shift, an index or a divisor. */
static bool problem_valid(const bfp8_problem *p, char *reason, size_t reason_size) {
    if ((unsigned)p->device >= (unsigned)BFP8_DEVICE_COUNT) REJECT("unknown device %d", (int)p->device);
    if (p->arch < 0) REJECT("negative arch %d", p->arch);
    if (p->m < 0 || p->n < 0 || p->k < 0)
        REJECT("negative problem size m=%" PRId64 " n=%" PRId64 " k=%" PRId64, p->m, p->n, p->k);
    if (p->m > BFP8_DIM_MAX || p->n > BFP8_DIM_MAX || p->k > BFP8_DIM_MAX)
        REJECT("problem size m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " is too large (max 2^62)", p->m, p->n, p->k);
    if ((unsigned)p->out_dtype >= (unsigned)BFP8_DTYPE_COUNT || !bfp8_is_float_dtype(p->out_dtype))
        REJECT("output dtype %d is not f32, bf16 or f16", (int)p->out_dtype);
    if ((unsigned)p->scale_format >= (unsigned)BFP8_SCALE_FORMAT_COUNT)
        REJECT("unknown scale format %d", (int)p->scale_format);
    if ((p->a_layouts | p->b_layouts) & ~LAYOUT_MASK)
        REJECT("unknown scale layout bits 0x%x", (unsigned)((p->a_layouts | p->b_layouts) & ~LAYOUT_MASK));
    if (p->has_bias && !bfp8_is_float_dtype(p->bias_dtype))
        REJECT("bias dtype %d is not f32, bf16 or f16", (int)p->bias_dtype);
    if ((unsigned)p->grouped >= (unsigned)BFP8_GROUPED_COUNT) REJECT("unknown grouped layout %d", (int)p->grouped);
    if (p->grouped != BFP8_GROUPED_NONE && (p->groups < 1 || p->expected_m < 0))
        REJECT("grouped problem with groups=%" PRId64 " (>= 1) and expected_m=%" PRId64 " (>= 0)", p->groups,
               p->expected_m);
    return true;
}

/* Declared capabilities that mean something: known device, enum sets within their enums, no negative limits. */
static bool caps_valid(const bfp8_caps *c, char *reason, size_t reason_size) {
    if ((unsigned)c->device >= (unsigned)BFP8_DEVICE_COUNT) REJECT("unknown device %d", (int)c->device);
    if (c->min_arch < 0 || c->max_arch < 0) REJECT("negative arch limit");
    if ((c->out_dtypes | c->bias_dtypes) & ~DTYPE_MASK) REJECT("unknown dtype bits");
    if (c->scale_formats & ~FORMAT_MASK) REJECT("unknown scale format bits");
    if ((c->a_layouts | c->b_layouts) & ~LAYOUT_MASK) REJECT("unknown scale layout bits");
    if (c->min_k < 0 || c->m_multiple < 0 || c->n_multiple < 0 || c->k_multiple < 0 || c->max_m < 0 ||
        c->max_n < 0 || c->max_k < 0)
        REJECT("negative size limit");
    if (c->max_groups < 0) REJECT("negative max_groups");
    if (c->grouped_layouts & ~((1u << BFP8_GROUPED_COUNT) - 1) & ~BFP8_BIT(BFP8_GROUPED_NONE))
        REJECT("unknown grouped layout bits");
    return true;
}

bool bfp8_backend_check(const bfp8_backend *b, const bfp8_problem *p, char *reason, size_t reason_size) {
    char set[128];
    if (reason && reason_size) reason[0] = '\0';
    if (!b || !p) REJECT("no backend or no problem");
    if (!problem_valid(p, reason, reason_size)) return false;
    char why[BFP8_REASON_MAX / 2];
    if (!caps_valid(&b->caps, why, sizeof why)) REJECT("invalid capabilities: %s", why);
    const bfp8_caps *c = &b->caps;
    if (c->device != p->device)
        REJECT("runs on %s, the data is on %s", bfp8_device_name(c->device), bfp8_device_name(p->device));
    if (p->device == BFP8_DEVICE_CUDA) {
        if (c->min_arch && p->arch < c->min_arch)
            REJECT("needs compute capability >= sm_%d, the device is sm_%d", c->min_arch, p->arch);
        if (c->max_arch && p->arch > c->max_arch)
            REJECT("needs compute capability <= sm_%d, the device is sm_%d", c->max_arch, p->arch);
    }
    if (p->grouped != BFP8_GROUPED_NONE) {
        if (!b->grouped_gemm || !c->grouped_layouts) REJECT("no grouped GEMM");
        if (!(c->grouped_layouts & BFP8_BIT(p->grouped)))
            REJECT("grouped layout %s not supported (supports %s%s%s)", bfp8_grouped_layout_name(p->grouped),
                   c->grouped_layouts & BFP8_BIT(BFP8_GROUPED_CONTIGUOUS) ? "contiguous" : "",
                   c->grouped_layouts == (BFP8_BIT(BFP8_GROUPED_CONTIGUOUS) | BFP8_BIT(BFP8_GROUPED_MASKED)) ? ", " : "",
                   c->grouped_layouts & BFP8_BIT(BFP8_GROUPED_MASKED) ? "masked" : "");
        if (c->max_groups && p->groups > c->max_groups)
            REJECT("%" PRId64 " groups exceed its maximum %" PRId64, p->groups, c->max_groups);
    }
    if (!(c->out_dtypes & BFP8_BIT(p->out_dtype))) {
        format_dtype_set(c->out_dtypes, set, sizeof set);
        REJECT("output dtype %s not supported (supports %s)", bfp8_dtype_name(p->out_dtype), set);
    }
    if (!(c->scale_formats & BFP8_BIT(p->scale_format)))
        REJECT("scale format %s not supported", bfp8_scale_format_name(p->scale_format));
    if (c->min_k && p->k < c->min_k)
        REJECT("K=%" PRId64 " is below its minimum K=%" PRId64, p->k, c->min_k);
    if (c->k_multiple > 1 && p->k % c->k_multiple)
        REJECT("K=%" PRId64 " is not a multiple of %" PRId64, p->k, c->k_multiple);
    if (c->n_multiple > 1 && p->n % c->n_multiple)
        REJECT("N=%" PRId64 " is not a multiple of %" PRId64, p->n, c->n_multiple);
    if (c->m_multiple > 1 && !c->pads_m && p->m % c->m_multiple)
        REJECT("M=%" PRId64 " is not a multiple of %" PRId64, p->m, c->m_multiple);
    if (c->max_m && p->m > c->max_m) REJECT("M=%" PRId64 " exceeds its maximum %" PRId64, p->m, c->max_m);
    if (c->max_n && p->n > c->max_n) REJECT("N=%" PRId64 " exceeds its maximum %" PRId64, p->n, c->max_n);
    if (c->max_k && p->k > c->max_k) REJECT("K=%" PRId64 " exceeds its maximum %" PRId64, p->k, c->max_k);
    if (p->has_bias && !c->bias_dtypes) REJECT("no bias support");
    if (p->has_bias && !(c->bias_dtypes & BFP8_BIT(p->bias_dtype)))
        REJECT("bias dtype %s not supported", bfp8_dtype_name(p->bias_dtype));
    if (!(c->a_layouts & p->a_layouts)) {
        format_layout_set(c->a_layouts, set, sizeof set);
        REJECT("needs activation scales in %s", set);
    }
    if (!(c->b_layouts & p->b_layouts)) {
        char have[128];
        format_layout_set(c->b_layouts, set, sizeof set);
        format_layout_set(p->b_layouts, have, sizeof have);
        REJECT("needs weight scales in %s, the weight holds %s (prepare it for this backend)", set, have);
    }
    if (b->supports && !b->supports(b, p, reason, reason_size)) {
        if (reason && reason_size && !reason[0]) snprintf(reason, reason_size, "declined by its supports() check");
        return false;
    }
    return true;
}

static bfp8_status check_problem(const bfp8_problem *p) {
    char why[BFP8_REASON_MAX];
    BFP8_CHECK_ARG(p, "problem is NULL");
    BFP8_CHECK_ARG(problem_valid(p, why, sizeof why), "%s", why);
    return BFP8_OK;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Pure selection                                                                                                */
/* ------------------------------------------------------------------------------------------------------------ */

static int priority_of(const bfp8_backend *b, const bfp8_problem *p) {
    return b->priority_for ? b->priority_for(b, p) : b->caps.priority;
}

/* Whether `a` ranks above `b` for `auto` (docs/dispatch.md, "The measured ranking"): where the problem's cell of
 * the measured table has a time for both, the faster; a backend measured there above one that is not; otherwise
 * the higher priority. Equal ranks: false, so the first registered stays first. Capability is not its business. */
static bool ranks_above(const bfp8_backend *a, const bfp8_backend *b, const bfp8_problem *p, const bfp8_rank *r) {
    const double ta = bfp8_rank_time(r, a->name), tb = bfp8_rank_time(r, b->name);
    if (ta > 0 && tb > 0) return ta < tb;
    if ((ta > 0) != (tb > 0)) return ta > 0;
    return priority_of(a, p) > priority_of(b, p);
}

/* The capable backend that ranks first (first registered wins a tie), skipping `exclude`. */
static const bfp8_backend *pick_auto(const bfp8_backend *const *backends, size_t count, const bfp8_problem *p,
                                     const bfp8_rank *r, const bfp8_backend *exclude) {
    const bfp8_backend *best = NULL;
    for (size_t i = 0; i < count; i++) {
        const bfp8_backend *b = backends[i];
        if (b == exclude || !bfp8_backend_check(b, p, NULL, 0)) continue;
        if (!best || ranks_above(b, best, p, r)) best = b;
    }
    return best;
}

/* "a: why; b: why" for the message when nothing can run. */
static void collect_reasons(const bfp8_backend *const *backends, size_t count, const bfp8_problem *p, char *buf,
                            size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < count && used < size; i++) {
        char why[BFP8_REASON_MAX];
        bfp8_backend_check(backends[i], p, why, sizeof why);
        used += (size_t)snprintf(buf + used, size - used, "%s%s: %s", i ? "; " : "", backends[i]->name, why);
    }
}

bfp8_status bfp8_select(const bfp8_backend *const *backends, size_t count, const bfp8_problem *p,
                        bfp8_policy policy, const char *preferred_name, bfp8_decision *out) {
    return bfp8_select_ranked(backends, count, p, policy, preferred_name, &bfp8_rank_table_builtin, out);
}

bfp8_status bfp8_select_ranked(const bfp8_backend *const *backends, size_t count, const bfp8_problem *p,
                               bfp8_policy policy, const char *preferred_name, const bfp8_rank_table *table,
                               bfp8_decision *out) {
    BFP8_CHECK_ARG(out, "decision is NULL");
    memset(out, 0, sizeof *out);
    BFP8_CHECK_ARG(backends || count == 0, "backend list is NULL");
    BFP8_TRY(check_problem(p));
    BFP8_CHECK_ARG(policy == BFP8_POLICY_AUTO || policy == BFP8_POLICY_PREFER || policy == BFP8_POLICY_STRICT,
                   "unknown policy %d", (int)policy);

    if (policy != BFP8_POLICY_AUTO) {
        BFP8_CHECK_ARG(preferred_name && preferred_name[0], "policy %s needs a backend name",
                       policy == BFP8_POLICY_PREFER ? "prefer" : "strict");
        for (size_t i = 0; i < count; i++)
            if (strcmp(backends[i]->name, preferred_name) == 0) out->preferred = backends[i];
        if (!out->preferred) {
            char names[512];
            size_t used = 0;
            names[0] = '\0';
            for (size_t i = 0; i < count && used < sizeof names; i++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", backends[i]->name);
            return bfp8_fail(BFP8_ERR_NOT_FOUND, "no backend named '%s' (registered: %s)", preferred_name, names);
        }
        if (bfp8_backend_check(out->preferred, p, out->reason, sizeof out->reason)) {
            out->backend = out->preferred;
            return BFP8_OK;
        }
        if (policy == BFP8_POLICY_STRICT) {
            return bfp8_fail(BFP8_ERR_UNSUPPORTED, "strict backend '%s' cannot run m=%" PRId64 " n=%" PRId64
                             " k=%" PRId64 ": %s", preferred_name, p->m, p->n, p->k, out->reason);
        }
        out->fallback = true;
    }

    const bfp8_rank rank = bfp8_rank_find(table, p);
    out->backend = pick_auto(backends, count, p, &rank, out->preferred);
    if (!out->backend) {
        char reasons[1024];
        collect_reasons(backends, count, p, reasons, sizeof reasons);
        if (!out->reason[0]) snprintf(out->reason, sizeof out->reason, "no capable backend");
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "no backend can run m=%" PRId64 " n=%" PRId64 " k=%" PRId64
                         " out=%s on %s: %s", p->m, p->n, p->k, bfp8_dtype_name(p->out_dtype),
                         bfp8_device_name(p->device), count ? reasons : "no backends registered");
    }
    return BFP8_OK;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Registry                                                                                                      */
/* ------------------------------------------------------------------------------------------------------------ */

bfp8_status bfp8_dispatcher_create(bfp8_dispatcher **out) {
    BFP8_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    bfp8_dispatcher *d = calloc(1, sizeof *d);
    if (!d) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "dispatcher: out of memory");
    pthread_mutex_init(&d->lock, NULL);
    const char *log = getenv("BFP8_LOG");
    d->log_dispatch = bfp8_log_has_topic(log, "dispatch");
    *out = d;
    return BFP8_OK;
}

bfp8_status bfp8_dispatcher_create_default(bfp8_dispatcher **out) {
    BFP8_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    bfp8_dispatcher *d;
    BFP8_TRY(bfp8_dispatcher_create(&d));
    bfp8_status st = bfp8_dispatcher_add(d, &bfp8_backend_cpu);
    if (st == BFP8_OK) st = bfp8_dispatcher_add(d, &bfp8_backend_ref);
    if (st == BFP8_OK) st = bfp8_cuda_register_backends(d);
    const char *env = getenv("BFP8_BACKEND");
    if (st == BFP8_OK && env && env[0]) {
        st = bfp8_dispatcher_set_policy(d, BFP8_POLICY_PREFER, env);
        if (st != BFP8_OK) st = bfp8_fail(st, "BFP8_BACKEND: %s", bfp8_last_error());
    }
    if (st != BFP8_OK) {
        bfp8_dispatcher_free(d);
        return st;
    }
    *out = d;
    return BFP8_OK;
}

static bfp8_dispatcher *default_dispatcher;
static bfp8_status default_status;
static char default_error[512];
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void create_default_once(void) {
    default_status = bfp8_dispatcher_create_default(&default_dispatcher);
    if (default_status != BFP8_OK) snprintf(default_error, sizeof default_error, "%s", bfp8_last_error());
}

bfp8_dispatcher *bfp8_dispatcher_default(void) {
    pthread_once(&default_once, create_default_once);
    if (!default_dispatcher) bfp8_fail(default_status, "default dispatcher: %s", default_error);
    return default_dispatcher;
}

static void dispatcher_free(bfp8_dispatcher *d, bool free_device) {
    if (!d) return;
    for (int i = 0; i < MAX_CUDA_DEVICES && free_device; i++)
        if (d->cuda_counters[i]) bfp8_cuda_free(d->cuda_counters[i]);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

/* Releases the default dispatcher at exit so leak checkers see a clean process. Its device counters are left to
 * the process's end: the CUDA runtime may already be shut down when destructors run. */
__attribute__((destructor)) static void free_default_dispatcher(void) {
    dispatcher_free(default_dispatcher, false);
    default_dispatcher = NULL;
}

void bfp8_dispatcher_free(bfp8_dispatcher *d) { dispatcher_free(d, true); }

static bool name_taken(const bfp8_dispatcher *d, const char *name) {
    for (size_t i = 0; i < d->count; i++)
        if (strcmp(d->backends[i]->name, name) == 0) return true;
    for (size_t i = 0; i < d->unavailable_count; i++)
        if (strcmp(d->unavailable[i].name, name) == 0) return true;
    return false;
}

bfp8_status bfp8_dispatcher_add(bfp8_dispatcher *d, const bfp8_backend *backend) {
    BFP8_CHECK_ARG(d && backend, "dispatcher or backend is NULL");
    BFP8_CHECK_ARG(backend->name && backend->name[0] && strlen(backend->name) < NAME_MAX_LEN,
                   "backend name must be 1..%d characters", NAME_MAX_LEN - 1);
    BFP8_CHECK_ARG(backend->gemm, "backend '%s' has no gemm function", backend->name);
    char why[BFP8_REASON_MAX];
    BFP8_CHECK_ARG(caps_valid(&backend->caps, why, sizeof why), "backend '%s': invalid capabilities: %s",
                   backend->name, why);
    BFP8_CHECK_ARG(!backend->caps.grouped_layouts || backend->grouped_gemm,
                   "backend '%s' declares grouped layouts but has no grouped_gemm function", backend->name);
    BFP8_CHECK_ARG(!name_taken(d, backend->name), "a backend named '%s' is already registered", backend->name);
    BFP8_CHECK_ARG(d->count < MAX_BACKENDS, "too many backends (max %d)", MAX_BACKENDS);
    d->backends[d->count++] = backend;
    return BFP8_OK;
}

bfp8_status bfp8_dispatcher_add_unavailable(bfp8_dispatcher *d, const char *name, const char *why) {
    BFP8_CHECK_ARG(d && name && why, "NULL argument");
    BFP8_CHECK_ARG(name[0] && strlen(name) < NAME_MAX_LEN, "backend name must be 1..%d characters",
                   NAME_MAX_LEN - 1);
    BFP8_CHECK_ARG(!name_taken(d, name), "a backend named '%s' is already registered", name);
    BFP8_CHECK_ARG(d->unavailable_count < MAX_BACKENDS, "too many backends (max %d)", MAX_BACKENDS);
    unavailable_backend *u = &d->unavailable[d->unavailable_count++];
    snprintf(u->name, sizeof u->name, "%s", name);
    snprintf(u->why, sizeof u->why, "%s", why);
    return BFP8_OK;
}

static const unavailable_backend *find_unavailable(const bfp8_dispatcher *d, const char *name) {
    for (size_t i = 0; i < d->unavailable_count; i++)
        if (strcmp(d->unavailable[i].name, name) == 0) return &d->unavailable[i];
    return NULL;
}

bfp8_status bfp8_dispatcher_set_policy(bfp8_dispatcher *d, bfp8_policy policy, const char *backend_name) {
    BFP8_CHECK_ARG(d, "dispatcher is NULL");
    BFP8_CHECK_ARG(policy == BFP8_POLICY_AUTO || policy == BFP8_POLICY_PREFER || policy == BFP8_POLICY_STRICT,
                   "unknown policy %d", (int)policy);
    if (policy == BFP8_POLICY_AUTO) {
        pthread_mutex_lock(&d->lock);
        d->policy = policy;
        d->preferred[0] = '\0';
        pthread_mutex_unlock(&d->lock);
        return BFP8_OK;
    }
    BFP8_CHECK_ARG(backend_name && backend_name[0], "policy %s needs a backend name", policy_name(policy));
    /* A built-in backend that is unavailable on this machine is a valid name: calls then fall back (prefer)
     * or fail (strict) with the reason. A name nobody knows is a typo and an error now. */
    if (!bfp8_dispatcher_find(d, backend_name) && !find_unavailable(d, backend_name)) {
        char names[512];
        size_t used = 0;
        names[0] = '\0';
        for (size_t i = 0; i < d->count && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", d->backends[i]->name);
        for (size_t i = 0; i < d->unavailable_count && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, ", %s", d->unavailable[i].name);
        return bfp8_fail(BFP8_ERR_NOT_FOUND, "no backend named '%s' (known: %s)", backend_name, names);
    }
    /* Registered names are shorter than NAME_MAX_LEN, so this copy is the whole name. */
    pthread_mutex_lock(&d->lock);
    d->policy = policy;
    snprintf(d->preferred, sizeof d->preferred, "%s", backend_name);
    pthread_mutex_unlock(&d->lock);
    return BFP8_OK;
}

size_t bfp8_dispatcher_count(const bfp8_dispatcher *d) { return d ? d->count : 0; }

const bfp8_backend *bfp8_dispatcher_at(const bfp8_dispatcher *d, size_t index) {
    return d && index < d->count ? d->backends[index] : NULL;
}

const bfp8_backend *bfp8_dispatcher_find(const bfp8_dispatcher *d, const char *name) {
    if (!d || !name) return NULL;
    for (size_t i = 0; i < d->count; i++)
        if (strcmp(d->backends[i]->name, name) == 0) return d->backends[i];
    return NULL;
}

size_t bfp8_dispatcher_unavailable_count(const bfp8_dispatcher *d) { return d ? d->unavailable_count : 0; }

bfp8_status bfp8_dispatcher_unavailable_at(const bfp8_dispatcher *d, size_t index, const char **name,
                                           const char **why) {
    BFP8_CHECK_ARG(d && name && why, "NULL argument");
    BFP8_CHECK_ARG(index < d->unavailable_count, "index %zu out of range (%zu unavailable)", index,
                   d->unavailable_count);
    *name = d->unavailable[index].name;
    *why = d->unavailable[index].why;
    return BFP8_OK;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Decisions with the dispatcher's policy                                                                        */
/* ------------------------------------------------------------------------------------------------------------ */

static bfp8_status select_with(const bfp8_dispatcher *d, const policy_snapshot *pol, const bfp8_problem *p,
                               bfp8_decision *out) {
    const unavailable_backend *u = pol->policy != BFP8_POLICY_AUTO ? find_unavailable(d, pol->preferred) : NULL;
    if (!u) return bfp8_select(d->backends, d->count, p, pol->policy, pol->preferred, out);

    /* The preferred backend is built in but not usable here: strict fails, prefer falls back, both say why. */
    if (pol->policy == BFP8_POLICY_STRICT) {
        memset(out, 0, sizeof *out);
        snprintf(out->reason, sizeof out->reason, "unavailable: %.200s", u->why);
        BFP8_TRY(check_problem(p));
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "strict backend '%s' is unavailable: %s", u->name, u->why);
    }
    BFP8_TRY(bfp8_select(d->backends, d->count, p, BFP8_POLICY_AUTO, NULL, out));
    out->fallback = true;
    snprintf(out->reason, sizeof out->reason, "unavailable: %.200s", u->why);
    return BFP8_OK;
}

bfp8_status bfp8_dispatcher_select(bfp8_dispatcher *d, const bfp8_problem *p, bfp8_decision *out) {
    BFP8_CHECK_ARG(d, "dispatcher is NULL");
    BFP8_CHECK_ARG(out, "decision is NULL");
    policy_snapshot pol = snapshot_policy(d);
    return select_with(d, &pol, p, out);
}

static const char *preferred_name_of(const policy_snapshot *pol, const bfp8_decision *dec) {
    return dec->preferred ? dec->preferred->name : pol->preferred;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void describe_problem(const bfp8_problem *p, char *buf, size_t size) {
    int used = snprintf(buf, size, "device=%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " out=%s scales=%s bias=%s%s",
                        bfp8_device_name(p->device), p->m, p->n, p->k, bfp8_dtype_name(p->out_dtype),
                        bfp8_scale_format_name(p->scale_format), p->has_bias ? bfp8_dtype_name(p->bias_dtype) : "none",
                        p->act_from_prior_kernel ? " acts=prior-kernel" : "");
    if (p->grouped != BFP8_GROUPED_NONE && used >= 0 && (size_t)used < size)
        used += snprintf(buf + used, size - (size_t)used, " grouped=%s groups=%" PRId64 " expected_m=%" PRId64,
                         bfp8_grouped_layout_name(p->grouped), p->groups, p->expected_m);
    /* The device the ranking reads: its arch and card (docs/dispatch.md, "Which card"). */
    if (p->device == BFP8_DEVICE_CUDA && used >= 0 && (size_t)used < size)
        used += snprintf(buf + used, size - (size_t)used, " arch=sm_%d", p->arch);
    if (p->device == BFP8_DEVICE_CUDA && p->card && used >= 0 && (size_t)used < size)
        snprintf(buf + used, size - (size_t)used, " card='%s'", p->card);
}

bfp8_status bfp8_dispatch_record(bfp8_dispatcher *d, const bfp8_problem *p, bfp8_decision *dec) {
    BFP8_CHECK_ARG(d && dec, "dispatcher or decision is NULL");
    policy_snapshot pol = snapshot_policy(d);
    bfp8_status st = select_with(d, &pol, p, dec);
    if (st != BFP8_OK) return st;
    size_t idx = 0;
    while (idx < d->count && d->backends[idx] != dec->backend) idx++;

    pthread_mutex_lock(&d->lock);
    if (idx < d->count) d->calls[idx]++;
    if (idx < d->count && p->grouped != BFP8_GROUPED_NONE) d->grouped_calls[idx]++;
    if (dec->fallback) {
        const char *pref = preferred_name_of(&pol, dec);
        bfp8_fallback_stat *f = NULL;
        for (size_t i = 0; i < d->fallback_count; i++) {
            bfp8_fallback_stat *e = &d->fallbacks[i];
            if (!strcmp(e->preferred, pref) && !strcmp(e->chosen, dec->backend->name) && !strcmp(e->reason, dec->reason))
                f = e;
        }
        if (!f && d->fallback_count < MAX_FALLBACKS) {
            f = &d->fallbacks[d->fallback_count++];
            snprintf(f->preferred, sizeof f->preferred, "%s", pref);
            snprintf(f->chosen, sizeof f->chosen, "%s", dec->backend->name);
            snprintf(f->reason, sizeof f->reason, "%s", dec->reason);
        }
        if (f) f->count++;
        else d->fallbacks_unrecorded++;
    }
    bool print = false;
    if (d->log_dispatch) {
        /* Every field of the problem by value (not the struct's bytes: its padding is whatever the caller's copy
         * held), the card by its text (the pointer may be any copy of the name). */
        const int64_t fields[] = {p->device,       p->arch,       p->m,           p->n,         p->k,
                                  p->out_dtype,    p->scale_format, p->a_layouts,  p->b_layouts, p->has_bias,
                                  p->bias_dtype,   p->act_from_prior_kernel, p->grouped, p->groups, p->expected_m};
        uint64_t h = fnv1a(0xcbf29ce484222325ull, fields, sizeof fields);
        if (p->card) h = fnv1a(h, p->card, strlen(p->card) + 1);
        h = fnv1a(h, dec->backend->name, strlen(dec->backend->name));
        h = fnv1a(h, dec->reason, strlen(dec->reason));
        bool seen = false;
        for (size_t i = 0; i < d->logged_count && !seen; i++) seen = d->logged[i] == h;
        if (!seen) {
            print = true;
            if (d->logged_count < MAX_LOGGED) d->logged[d->logged_count++] = h;
        }
    }
    pthread_mutex_unlock(&d->lock);

    if (print) {
        char desc[640];
        describe_problem(p, desc, sizeof desc);
        if (dec->fallback)
            fprintf(stderr, "blockfp8 dispatch: %s -> %s (fallback from %s: %s)\n", desc, dec->backend->name,
                    preferred_name_of(&pol, dec), dec->reason);
        else
            fprintf(stderr, "blockfp8 dispatch: %s -> %s (%s)\n", desc, dec->backend->name,
                    pol.policy == BFP8_POLICY_PREFER ? "preferred" : policy_name(pol.policy));
    }
    return BFP8_OK;
}

void bfp8_dispatch_count(bfp8_dispatcher *d, const bfp8_nonfinite_stats *add) {
    if (!(add->activations | add->act_scales | add->weight_codes | add->weight_scales | add->bias |
          add->uncounted_calls))
        return;
    pthread_mutex_lock(&d->lock);
    d->nonfinite.activations += add->activations;
    d->nonfinite.act_scales += add->act_scales;
    d->nonfinite.weight_codes += add->weight_codes;
    d->nonfinite.weight_scales += add->weight_scales;
    d->nonfinite.bias += add->bias;
    d->nonfinite.uncounted_calls += add->uncounted_calls;
    pthread_mutex_unlock(&d->lock);
}

int64_t *bfp8_dispatch_cuda_counters(bfp8_dispatcher *d, void *stream) {
    int dev = bfp8_cuda_current_device();
    int64_t *c = NULL;
    pthread_mutex_lock(&d->lock);
    if (dev >= 0 && dev < MAX_CUDA_DEVICES) {
        c = d->cuda_counters[dev];
        /* Allocating and zeroing are synchronous calls, which a graph capture forbids: a call made while capturing
         * before any call outside it goes uncounted (and says so in the statistics). */
        if (!c && !bfp8_cuda_stream_capturing(stream)) {
            static const int64_t zero[2];
            void *mem = NULL;
            if (bfp8_cuda_malloc(sizeof zero, &mem) == BFP8_OK) {
                if (bfp8_cuda_upload(mem, zero, sizeof zero) == BFP8_OK)
                    c = d->cuda_counters[dev] = mem;
                else
                    bfp8_cuda_free(mem);
            }
        }
    }
    if (!c) d->nonfinite.uncounted_calls++;
    pthread_mutex_unlock(&d->lock);
    return c;
}

/* The counts with the device counters added; called with the lock held. The copies wait for the kernels of the
 * legacy stream (and of every blocking stream) that add to them. */
static bfp8_status read_nonfinite(bfp8_dispatcher *d, bfp8_nonfinite_stats *out) {
    *out = d->nonfinite;
    for (int i = 0; i < MAX_CUDA_DEVICES; i++) {
        int64_t dev[2];
        if (!d->cuda_counters[i]) continue;
        BFP8_TRY(bfp8_cuda_download(dev, d->cuda_counters[i], sizeof dev));
        out->activations += (uint64_t)dev[0];
        out->bias += (uint64_t)dev[1];
    }
    return BFP8_OK;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Statistics and explain                                                                                        */
/* ------------------------------------------------------------------------------------------------------------ */

uint64_t bfp8_dispatcher_calls(bfp8_dispatcher *d, const char *backend_name) {
    if (!d || !backend_name) return 0;
    uint64_t n = 0;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->count; i++)
        if (strcmp(d->backends[i]->name, backend_name) == 0) n = d->calls[i];
    pthread_mutex_unlock(&d->lock);
    return n;
}

uint64_t bfp8_dispatcher_grouped_calls(bfp8_dispatcher *d, const char *backend_name) {
    if (!d || !backend_name) return 0;
    uint64_t n = 0;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->count; i++)
        if (strcmp(d->backends[i]->name, backend_name) == 0) n = d->grouped_calls[i];
    pthread_mutex_unlock(&d->lock);
    return n;
}

size_t bfp8_dispatcher_fallback_count(bfp8_dispatcher *d) {
    if (!d) return 0;
    pthread_mutex_lock(&d->lock);
    size_t n = d->fallback_count;
    pthread_mutex_unlock(&d->lock);
    return n;
}

bfp8_status bfp8_dispatcher_fallback_at(bfp8_dispatcher *d, size_t index, bfp8_fallback_stat *out) {
    BFP8_CHECK_ARG(d && out, "NULL argument");
    pthread_mutex_lock(&d->lock);
    bool ok = index < d->fallback_count;
    if (ok) *out = d->fallbacks[index];
    size_t n = d->fallback_count;
    pthread_mutex_unlock(&d->lock);
    BFP8_CHECK_ARG(ok, "fallback index %zu out of range (%zu recorded)", index, n);
    return BFP8_OK;
}

bfp8_status bfp8_dispatcher_nonfinite(bfp8_dispatcher *d, bfp8_nonfinite_stats *out) {
    BFP8_CHECK_ARG(d && out, "NULL argument");
    pthread_mutex_lock(&d->lock);
    bfp8_status st = read_nonfinite(d, out);
    pthread_mutex_unlock(&d->lock);
    return st;
}

uint64_t bfp8_dispatcher_nonfinite_inputs(bfp8_dispatcher *d) {
    bfp8_nonfinite_stats n;
    return d && bfp8_dispatcher_nonfinite(d, &n) == BFP8_OK ? n.activations : 0;
}

void bfp8_dispatcher_reset_stats(bfp8_dispatcher *d) {
    if (!d) return;
    static const int64_t zero[2];
    pthread_mutex_lock(&d->lock);
    memset(d->calls, 0, sizeof d->calls);
    memset(d->fallbacks, 0, sizeof d->fallbacks); /* the entries' counts too, not only the list's length */
    memset(d->grouped_calls, 0, sizeof d->grouped_calls);
    d->fallback_count = 0;
    d->fallbacks_unrecorded = 0;
    memset(&d->nonfinite, 0, sizeof d->nonfinite);
    for (int i = 0; i < MAX_CUDA_DEVICES; i++)
        if (d->cuda_counters[i]) (void)bfp8_cuda_upload(d->cuda_counters[i], zero, sizeof zero);
    d->logged_count = 0;
    pthread_mutex_unlock(&d->lock);
}

void bfp8_dispatcher_print_stats(bfp8_dispatcher *d, FILE *out) {
    if (!d || !out) return;
    pthread_mutex_lock(&d->lock);
    fprintf(out, "dispatch stats:\n  calls:\n");
    for (size_t i = 0; i < d->count; i++) {
        fprintf(out, "    %-14s %" PRIu64, d->backends[i]->name, d->calls[i]);
        if (d->grouped_calls[i]) fprintf(out, " (%" PRIu64 " grouped)", d->grouped_calls[i]);
        fprintf(out, "\n");
    }
    fprintf(out, "  fallbacks:%s\n", d->fallback_count ? "" : " none");
    for (size_t i = 0; i < d->fallback_count; i++) {
        const bfp8_fallback_stat *f = &d->fallbacks[i];
        fprintf(out, "    %s -> %s x%" PRIu64 ": %s\n", f->preferred, f->chosen, f->count, f->reason);
    }
    if (d->fallbacks_unrecorded)
        fprintf(out, "    (+%" PRIu64 " fallbacks with further distinct reasons)\n", d->fallbacks_unrecorded);
    bfp8_nonfinite_stats nf;
    if (read_nonfinite(d, &nf) == BFP8_OK) {
        fprintf(out,
                "  non-finite inputs: activations %" PRIu64 ", activation scales %" PRIu64 ", weight codes %" PRIu64
                ", weight scales %" PRIu64 ", bias %" PRIu64 "\n",
                nf.activations, nf.act_scales, nf.weight_codes, nf.weight_scales, nf.bias);
        if (nf.uncounted_calls)
            fprintf(out, "    (%" PRIu64 " CUDA calls not counted: no device counter, as in a graph capture before any "
                    "call outside one)\n", nf.uncounted_calls);
    } else {
        fprintf(out, "  non-finite inputs: unreadable: %s\n", bfp8_last_error());
    }
    pthread_mutex_unlock(&d->lock);
}

bfp8_status bfp8_dispatcher_explain(bfp8_dispatcher *d, const bfp8_problem *p, FILE *out) {
    BFP8_CHECK_ARG(d && out, "NULL argument");
    BFP8_TRY(check_problem(p));
    policy_snapshot pol = snapshot_policy(d);
    char desc[640];
    describe_problem(p, desc, sizeof desc);
    fprintf(out, "problem: %s", desc);
    fprintf(out, "\npolicy:  %s%s%s\n", policy_name(pol.policy), pol.policy == BFP8_POLICY_AUTO ? "" : " ",
            pol.preferred);
    /* The ranking's basis, then the backends in the order auto considers them (pick_auto's). */
    const bfp8_rank rank = bfp8_rank_find(&bfp8_rank_table_builtin, p);
    char basis[2 * BFP8_REASON_MAX];
    bfp8_rank_describe(&rank, p, basis, sizeof basis);
    bool measured_capable = false;
    for (size_t i = 0; i < d->count && rank.cell; i++)
        measured_capable |=
            bfp8_rank_time(&rank, d->backends[i]->name) > 0 && bfp8_backend_check(d->backends[i], p, NULL, 0);
    fprintf(out, "ranking: %s%s\n", basis,
            rank.cell && !measured_capable ? "; no capable backend was measured there, so caps priority" : "");
    fprintf(out, "backends (%s):\n", rank.cell ? "by measured time, then priority" : "by priority");
    bool shown[MAX_BACKENDS] = {0};
    for (size_t n = 0; n < d->count; n++) {
        size_t best = d->count;
        for (size_t i = 0; i < d->count; i++)
            if (!shown[i] && (best == d->count || ranks_above(d->backends[i], d->backends[best], p, &rank))) best = i;
        shown[best] = true;
        const bfp8_backend *b = d->backends[best];
        char why[BFP8_REASON_MAX], time[32] = "";
        bool ok = bfp8_backend_check(b, p, why, sizeof why);
        const double us = bfp8_rank_time(&rank, b->name);
        if (rank.cell && us > 0) snprintf(time, sizeof time, "%9.1f us  ", us);
        else if (rank.cell) snprintf(time, sizeof time, "%9s     ", "-");
        fprintf(out, "  %-14s %-4s %spriority %-3d %s\n", b->name, ok ? "ok" : "no", time, priority_of(b, p),
                ok ? "" : why);
    }
    for (size_t i = 0; i < d->unavailable_count; i++)
        fprintf(out, "  %-14s %-4s unavailable: %s\n", d->unavailable[i].name, "no", d->unavailable[i].why);

    bfp8_decision dec;
    bfp8_status st = select_with(d, &pol, p, &dec);
    if (st != BFP8_OK) {
        fprintf(out, "choice:  none: %s\n", bfp8_last_error());
        return st;
    }
    if (dec.fallback)
        fprintf(out, "choice:  %s (fallback from %s: %s)\n", dec.backend->name, preferred_name_of(&pol, &dec),
                dec.reason);
    else
        fprintf(out, "choice:  %s\n", dec.backend->name);
    return BFP8_OK;
}
