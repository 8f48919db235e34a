/* Status names, the thread-local last-error message and shared argument checks. */
#include "internal.h"

#include <stdio.h>

static _Thread_local char last_error[BFP8_ERROR_MAX];

const char *bfp8_status_name(bfp8_status status) {
    switch (status) {
    case BFP8_OK: return "ok";
    case BFP8_ERR_INVALID_ARGUMENT: return "invalid argument";
    case BFP8_ERR_UNSUPPORTED: return "unsupported";
    case BFP8_ERR_NOT_FOUND: return "not found";
    case BFP8_ERR_OUT_OF_MEMORY: return "out of memory";
    case BFP8_ERR_IO: return "I/O error";
    case BFP8_ERR_FORMAT: return "malformed file";
    case BFP8_ERR_DEVICE: return "device error";
    }
    return "unknown status";
}

const char *bfp8_last_error(void) { return last_error; }

/* Formats into a scratch buffer first: callers may pass the current message as an argument ("%s: %s",
 * bfp8_last_error()), and vsnprintf's source and destination must not overlap. */
bfp8_status bfp8_fail(bfp8_status status, const char *fmt, ...) {
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bfp8_escape_controls(msg, last_error, sizeof last_error);
    return status;
}

/* Messages name tensors read from files, and a hostile name must not drive the terminal that prints it. */
void bfp8_escape_controls(const char *src, char *dst, size_t dst_size) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && o + 1 < dst_size; p++) {
        if (!bfp8_is_control_byte(*p)) {
            dst[o++] = (char)*p;
        } else {
            if (o + 5 > dst_size) break; /* "\xNN" and the terminator */
            dst[o++] = '\\', dst[o++] = 'x', dst[o++] = hex[*p >> 4], dst[o++] = hex[*p & 15];
        }
    }
    if (dst_size) dst[o] = '\0';
}

bfp8_status bfp8_check_dims(const char *what, int64_t rows, int64_t cols) {
    BFP8_CHECK_ARG(rows >= 0 && cols >= 0, "%s: negative shape [%lld, %lld]", what, (long long)rows, (long long)cols);
    BFP8_CHECK_ARG(rows <= BFP8_DIM_MAX && cols <= BFP8_DIM_MAX, "%s: shape [%lld, %lld] is too large (max 2^62)", what,
                   (long long)rows, (long long)cols);
    return BFP8_OK;
}

bfp8_status bfp8_check_output_apart(const char *call, const void *y, size_t y_bytes, const bfp8_byte_range *in,
                                    size_t count) {
    for (size_t i = 0; i < count; i++)
        BFP8_CHECK_ARG(!bfp8_ranges_overlap(y, y_bytes, in[i].p, in[i].bytes), "%s: y overlaps %s", call, in[i].name);
    return BFP8_OK;
}

bfp8_status bfp8_check_matrix(const char *what, int64_t rows, int64_t cols, size_t elem_size, size_t *bytes) {
    int64_t elems, total;
    BFP8_TRY(bfp8_check_dims(what, rows, cols));
    BFP8_CHECK_ARG(bfp8_mul_ok(rows, cols, &elems) && bfp8_mul_ok(elems, (int64_t)elem_size, &total) &&
                       (uint64_t)total <= (uint64_t)SIZE_MAX,
                   "%s: shape [%lld, %lld] overflows", what, (long long)rows, (long long)cols);
    if (bytes) *bytes = (size_t)total;
    return BFP8_OK;
}
