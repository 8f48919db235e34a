/* Helpers for the tests of prepared weights' forms (the weight store, src/weight_store.h): backends that make a
 * weight hold every scale layout, and the byte comparison of its device forms with its host forms. Used by
 * test_grouped.c, test_cuda.c and test_cuda_grouped.c. */
#ifndef BFP8_TEST_WEIGHT_FORMS_H
#define BFP8_TEST_WEIGHT_FORMS_H

#include "blockfp8_grouped.h"
#include "check.h"

static inline bfp8_status test_spy_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    return BFP8_ERR_UNSUPPORTED; /* never run: these spies only shape what a weight prepares */
}
static inline bfp8_status test_spy_grouped_gemm(const bfp8_backend *self, const bfp8_grouped_gemm_args *args) {
    return BFP8_ERR_UNSUPPORTED;
}

#define TEST_LAYOUT_SPY(dev, layout, spy_name)                                                                   \
    {                                                                                                            \
        .name = spy_name,                                                                                        \
        .caps = {.device = dev, .out_dtypes = BFP8_BIT(BFP8_DTYPE_F32),                                          \
                 .scale_formats = BFP8_BIT(BFP8_SCALE_FP32) | BFP8_BIT(BFP8_SCALE_UE8M0),                        \
                 .a_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR), .b_layouts = BFP8_BIT(layout),                    \
                 .grouped_layouts = BFP8_BIT(BFP8_GROUPED_CONTIGUOUS) | BFP8_BIT(BFP8_GROUPED_MASKED)},          \
        .gemm = test_spy_gemm, .grouped_gemm = test_spy_grouped_gemm,                                            \
    }

/* A dispatcher of four spy backends on `device`, each consuming one weight-scale layout, dense and grouped: a
 * weight prepared for all of them (backend NULL) holds every layout its format can be stored in, on `device`. */
static inline bfp8_dispatcher *test_layout_spies(bfp8_device device) {
    static const bfp8_backend spies[BFP8_DEVICE_COUNT][BFP8_LAYOUT_COUNT] = {
        {TEST_LAYOUT_SPY(BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, "cpu_row_major"),
         TEST_LAYOUT_SPY(BFP8_DEVICE_CPU, BFP8_LAYOUT_MN_MAJOR, "cpu_mn_major"),
         TEST_LAYOUT_SPY(BFP8_DEVICE_CPU, BFP8_LAYOUT_MN_MAJOR_ALIGNED, "cpu_mn_major_aligned"),
         TEST_LAYOUT_SPY(BFP8_DEVICE_CPU, BFP8_LAYOUT_PACKED_UE8M0, "cpu_packed_ue8m0")},
        {TEST_LAYOUT_SPY(BFP8_DEVICE_CUDA, BFP8_LAYOUT_ROW_MAJOR, "cuda_row_major"),
         TEST_LAYOUT_SPY(BFP8_DEVICE_CUDA, BFP8_LAYOUT_MN_MAJOR, "cuda_mn_major"),
         TEST_LAYOUT_SPY(BFP8_DEVICE_CUDA, BFP8_LAYOUT_MN_MAJOR_ALIGNED, "cuda_mn_major_aligned"),
         TEST_LAYOUT_SPY(BFP8_DEVICE_CUDA, BFP8_LAYOUT_PACKED_UE8M0, "cuda_packed_ue8m0")},
    };
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create(&d));
    for (int l = 0; l < BFP8_LAYOUT_COUNT && d; l++) CHECK_OK(bfp8_dispatcher_add(d, &spies[device][l]));
    return d;
}

/* A weight's view, whichever its type. */
typedef bfp8_status (*test_view_fn)(const void *w, bfp8_device device, bfp8_scale_layout layout, const uint8_t **q,
                                    bfp8_scales *scales);
static inline bfp8_status test_view_dense(const void *w, bfp8_device device, bfp8_scale_layout layout,
                                          const uint8_t **q, bfp8_scales *scales) {
    return bfp8_weight_view((const bfp8_weight *)w, device, layout, q, scales);
}
static inline bfp8_status test_view_grouped(const void *w, bfp8_device device, bfp8_scale_layout layout,
                                            const uint8_t **q, bfp8_scales *scales) {
    return bfp8_grouped_weight_view((const bfp8_grouped_weight *)w, device, layout, q, scales);
}

/* Checks that weight w holds each layout of `layouts` on the device with the bytes it holds on the host: q_bytes
 * fp8 codes (one device copy shared by every layout) and `groups` scale matrices back to back, with the host's
 * descriptor. */
static inline void test_check_uploads(const char *what, const void *w, test_view_fn view, uint32_t layouts,
                                      size_t q_bytes, int64_t groups) {
    const uint8_t *q_first = NULL;
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
        if (!(layouts & BFP8_BIT(l))) continue;
        const char *name = bfp8_scale_layout_name((bfp8_scale_layout)l);
        const uint8_t *qd, *qh;
        bfp8_scales sd, sh;
        if (view(w, BFP8_DEVICE_CUDA, (bfp8_scale_layout)l, &qd, &sd) != BFP8_OK ||
            view(w, BFP8_DEVICE_CPU, (bfp8_scale_layout)l, &qh, &sh) != BFP8_OK) {
            CHECK(false, "%s %s: not held on both devices: %s", what, name, bfp8_last_error());
            continue;
        }
        CHECK(sd.format == sh.format && sd.layout == sh.layout && sd.rows == sh.rows && sd.kblocks == sh.kblocks &&
                  sd.data != sh.data,
              "%s %s: the device descriptor differs from the host's", what, name);
        const size_t s_bytes = bfp8_scales_bytes(sh.layout, sh.rows, sh.kblocks) * (size_t)groups;
        uint8_t *back = malloc(q_bytes + s_bytes + 1);
        CHECK_OK(bfp8_cuda_download(back, qd, q_bytes));
        CHECK_OK(bfp8_cuda_download(back + q_bytes, sd.data, s_bytes));
        CHECK(memcmp(back, qh, q_bytes) == 0, "%s %s: fp8 codes on the device differ from the host's", what, name);
        CHECK(memcmp(back + q_bytes, sh.data, s_bytes) == 0, "%s %s: scales on the device differ from the host's",
              what, name);
        free(back);
        if (!q_first) q_first = qd;
        CHECK(qd == q_first, "%s %s: q uploaded again", what, name);
    }
}

#endif
