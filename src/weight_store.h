/* The forms of a prepared block-FP8 weight, shared by bfp8_weight (G = 1) and bfp8_grouped_weight (G groups):
 * G weights [n, k] of one scale format, the fp8 codes always on the host, the scales in each layout held (host
 * and device) as explicit fields. A layout's buffer holds G scale matrices back to back, group g's
 * bfp8_grouped_scale_stride bytes after group g-1's, so for G = 1 it is the dense weight's one matrix. */
#ifndef BFP8_WEIGHT_STORE_H
#define BFP8_WEIGHT_STORE_H

#include "internal.h"

typedef struct bfp8_weight_store {
    const char *name; /* "weight" or "grouped weight": what messages call it */
    int64_t groups, n, k;
    bfp8_scale_format format;
    uint8_t *q_host;                            /* [groups, n, k], always held */
    bfp8_scales host_scales[BFP8_LAYOUT_COUNT]; /* one group's descriptor; .data (NULL: not held) holds all G */
    uint8_t *q_device;                          /* NULL until prepared for a CUDA backend */
    bfp8_scales device_scales[BFP8_LAYOUT_COUNT];
} bfp8_weight_store;

/* Validates the shape and format and allocates q_host (uninitialized), no scales held. On failure nothing is
 * held; after success, bfp8_weight_store_release frees it. */
bfp8_status bfp8_weight_store_init(bfp8_weight_store *s, const char *name, int64_t groups, int64_t n, int64_t k,
                                   bfp8_scale_format format);
/* Copies q [groups, n, k] and the G scale matrices that `scales` (one's descriptor, any layout, s->format) starts,
 * holding that layout as given and row-major, the form the reference and CPU read. Messages start with `what`. */
bfp8_status bfp8_weight_store_copy(bfp8_weight_store *s, const char *what, const uint8_t *q,
                                   const bfp8_scales *scales);
/* Quantizes w [groups, n, k] (f32, bf16 or f16), each group in its own 128x128 blocks, into q_host and row-major
 * scales; *nonfinite gets the count of non-finite inputs. */
bfp8_status bfp8_weight_store_quantize(bfp8_weight_store *s, const void *w, bfp8_dtype w_dtype, int64_t *nonfinite);
/* Holds zeroed host scales in `layout` (all G matrices), for a loader to fill. */
bfp8_status bfp8_weight_store_adopt(bfp8_weight_store *s, bfp8_scale_layout layout);
/* Adds the form the named backend consumes (NULL: every backend of d), keeping every form held. `grouped`: the
 * store feeds grouped GEMMs, so only backends with a grouped_gemm entry count. Messages start with `what`. */
bfp8_status bfp8_weight_store_prepare(bfp8_weight_store *s, const char *what, bfp8_dispatcher *d,
                                      const char *backend_name, bool grouped);
/* The BFP8_BIT(layout) sets held on the host and on the device. */
void bfp8_weight_store_layouts(const bfp8_weight_store *s, uint32_t *host, uint32_t *device);
/* Borrowed views of q and the scales in `layout` on `device` (BFP8_ERR_NOT_FOUND if not held). */
bfp8_status bfp8_weight_store_view(const bfp8_weight_store *s, const char *what, bfp8_device device,
                                   bfp8_scale_layout layout, const uint8_t **q, bfp8_scales *scales);
/* Frees every form, host and device (a zeroed store holds none). */
void bfp8_weight_store_release(bfp8_weight_store *s);

#endif
