/*
 * blockfp8 backend interface: what a GEMM backend declares and implements, the pure selection function over a set
 * of backends, and the registration of backends in a dispatcher. For backend authors and for tests that install
 * mock backends (spies) to pin decisions without running a kernel; programs that only call the library need
 * blockfp8.h alone. Dispatch rules: docs/dispatch.md.
 */
#ifndef BLOCKFP8_BACKEND_H
#define BLOCKFP8_BACKEND_H

#include "blockfp8.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default) /* the exported API (see blockfp8.h) */
#endif

/* Capabilities, declared as data. A zero field means "no limit" where noted. */
typedef struct bfp8_caps {
    bfp8_device device;
    int min_arch, max_arch;   /* CUDA only; 0 = no limit */
    uint32_t out_dtypes;      /* BFP8_BIT(dtype) set */
    uint32_t scale_formats;   /* BFP8_BIT(format) set */
    uint32_t a_layouts;       /* scale layouts consumed, BFP8_BIT(layout) set */
    uint32_t b_layouts;
    uint32_t bias_dtypes;     /* 0 = no bias support */
    int64_t min_k;            /* 0 = none */
    int64_t m_multiple;       /* 0 or 1 = any */
    bool pads_m;              /* M that is not a multiple of m_multiple is padded internally */
    int64_t n_multiple, k_multiple;
    int64_t max_m, max_n, max_k; /* 0 = none */
    int priority;             /* auto picks the capable backend with the highest priority */
    /* Grouped GEMM: BFP8_BIT(bfp8_grouped_layout) set of the layouts it runs (0: dense only; needs the backend's
     * grouped_gemm entry), and the most groups it takes (0 = no limit). Every other field applies to grouped
     * problems too, with M as bfp8_problem says. */
    uint32_t grouped_layouts;
    int64_t max_groups;
} bfp8_caps;

struct bfp8_backend {
    const char *name;
    const char *summary;
    bfp8_caps caps;
    /* Optional: a further condition beyond `caps`. Returns true, or false with a reason written to `reason`. */
    bool (*supports)(const bfp8_backend *self, const bfp8_problem *p, char *reason, size_t reason_size);
    /* Runs the GEMM. Called only for problems the backend accepted; args are already validated. */
    bfp8_status (*gemm)(const bfp8_backend *self, const bfp8_gemm_args *args);
    void *ctx; /* backend-owned */
    /* Optional: the priority `auto` gives this backend for `p`, where measurement shows that the fastest backend
     * depends on the shape (a kernel that wins only at small M, say). NULL: caps.priority. Only orders capable
     * backends; it never makes a backend capable. */
    int (*priority_for)(const bfp8_backend *self, const bfp8_problem *p);
    /* Optional: runs a grouped GEMM (layouts in caps.grouped_layouts). NULL: the backend declares no grouped
     * layouts, and grouped problems are declined with "no grouped GEMM". Called only for accepted problems with
     * validated args (on host data, m_indices and masked_m already checked: see bfp8_grouped_gemm). */
    bfp8_status (*grouped_gemm)(const bfp8_backend *self, const bfp8_grouped_gemm_args *args);
};

/* Whether `b` can run `p`; on "no", a human-readable reason. Pure. */
bool bfp8_backend_check(const bfp8_backend *b, const bfp8_problem *p, char *reason, size_t reason_size);

/* The scale layouts the library hands `b` for `p`: what bfp8_linear quantizes the activations into and views the
 * weight's scales in. Of the layouts both `b` consumes and `p` offers: for the activations mn_major_aligned when
 * there (what the GPU kernels load with TMA), else the lowest-numbered; for the weight the lowest-numbered.
 * BFP8_ERR_UNSUPPORTED, outputs untouched, when a side has none in common. */
bfp8_status bfp8_backend_layouts(const bfp8_backend *b, const bfp8_problem *p, bfp8_scale_layout *a_layout,
                                 bfp8_scale_layout *b_layout);

/* The pure selection function: the same inputs always give the same decision, and nothing is recorded. */
bfp8_status bfp8_select(const bfp8_backend *const *backends, size_t count, const bfp8_problem *p,
                        bfp8_policy policy, const char *preferred_name, bfp8_decision *out);

/* An empty dispatcher, to add backends to (mock ones in tests). */
bfp8_status bfp8_dispatcher_create(bfp8_dispatcher **out);
/* The backend is borrowed: it must outlive the dispatcher. Names must be unique. */
bfp8_status bfp8_dispatcher_add(bfp8_dispatcher *d, const bfp8_backend *backend);
/* Records a backend that is built in but cannot be used here, with why (shown by explain). */
bfp8_status bfp8_dispatcher_add_unavailable(bfp8_dispatcher *d, const char *name, const char *why);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* BLOCKFP8_BACKEND_H */
