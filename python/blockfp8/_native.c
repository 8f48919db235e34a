/* blockfp8._native: the one file through which Python calls libblockfp8 (include/blockfp8.h, public API only).
 *
 * Thin on purpose: functions take integer addresses, sizes and enum values, build the library's structs here (so
 * no struct layout is ever copied into Python), call the library with the GIL released, and raise an exception
 * carrying bfp8_last_error() on failure. Shapes, dtypes, devices and layouts are decided in the package's Python
 * modules; the library validates everything again. The one exception is the torch fast lane (fast_*, below): the
 * eager calls on plain torch tensors read them here, take only what the Python path would accept as it is, and
 * leave everything else to the Python path.
 *
 * Calls that run a GEMM return the default dispatcher's count of distinct fallbacks, so that the Python layer can
 * warn once per new reason without a second call. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfp8.h"
#include "blockfp8_backend.h"
#include "blockfp8_tp.h"
#include "blockfp8_grouped.h"

/* ---------------------------------------------------------------------------------------------------------------
 * Errors: one exception class per status, all under blockfp8.Error (a RuntimeError).
 * ------------------------------------------------------------------------------------------------------------- */
static PyObject *Error;                  /* base */
static PyObject *status_errors[BFP8_ERR_DEVICE + 1];

static PyObject *raise_status(bfp8_status st, const char *what) {
    PyObject *cls = (st > 0 && st <= BFP8_ERR_DEVICE && status_errors[st]) ? status_errors[st] : Error;
    const char *msg = bfp8_last_error();
    /* The library's message may already name the call ("gemm: y overlaps A"): not twice. */
    const size_t what_len = strlen(what);
    const int named = msg && strncmp(msg, what, what_len) == 0 && msg[what_len] == ':';
    PyObject *text = named            ? PyUnicode_FromString(msg)
                     : msg && msg[0] ? PyUnicode_FromFormat("%s: %s", what, msg)
                                     : PyUnicode_FromFormat("%s: %s", what, bfp8_status_name(st));
    if (!text) return NULL;
    PyObject *exc = PyObject_CallOneArg(cls, text);
    Py_DECREF(text);
    if (!exc) return NULL;
    PyObject *name = PyUnicode_FromString(bfp8_status_name(st));
    if (name) {
        PyObject_SetAttrString(exc, "status", name);
        Py_DECREF(name);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Argument helpers for METH_FASTCALL (positional only; the Python layer names things)
 * ------------------------------------------------------------------------------------------------------------- */
static int want_args(const char *fn, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want) return 0;
    PyErr_Format(PyExc_TypeError, "_native.%s takes %zd arguments (%zd given)", fn, want, nargs);
    return -1;
}

/* An address as an int (None = NULL). */
static int arg_ptr(PyObject *o, void **out) {
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyLong_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "expected an integer address or None");
        return -1;
    }
    *out = PyLong_AsVoidPtr(o);
    return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
}

static int arg_i64(PyObject *o, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)v;
    return 0;
}

static int arg_int(PyObject *o, int *out) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "enum value out of range");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* A str or None. */
static int arg_str(PyObject *o, const char **out) {
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    *out = PyUnicode_AsUTF8(o);
    return *out ? 0 : -1;
}

static bfp8_dispatcher *dispatcher(void) {
    bfp8_dispatcher *d = bfp8_dispatcher_default();
    if (!d) raise_status(BFP8_ERR_UNSUPPORTED, "blockfp8");
    return d;
}

static PyObject *fallback_count(bfp8_dispatcher *d) { return PyLong_FromSize_t(bfp8_dispatcher_fallback_count(d)); }

/* The layouts a scale format can be stored in: those bfp8_scales_init accepts with it. */
static uint32_t layouts_for_format(bfp8_scale_format format) {
    uint32_t set = 0;
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++) {
        bfp8_scales s;
        if (bfp8_scales_init(&s, format, (bfp8_scale_layout)l, 1, 1, NULL) == BFP8_OK) set |= BFP8_BIT(l);
    }
    return set;
}

static bfp8_scale_layout first_layout(uint32_t set) {
    for (int l = 0; l < BFP8_LAYOUT_COUNT; l++)
        if (set & BFP8_BIT(l)) return (bfp8_scale_layout)l;
    return BFP8_LAYOUT_ROW_MAJOR;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---------------------------------------------------------------------------------------------------------------
 * Module information
 * ------------------------------------------------------------------------------------------------------------- */
static PyObject *py_cuda_available(PyObject *self, PyObject *unused) {
    char why[512];
    bool ok = bfp8_cuda_available(why, sizeof why);
    return Py_BuildValue("(Os)", ok ? Py_True : Py_False, why);
}

static PyObject *py_layouts_for_format(PyObject *self, PyObject *arg) {
    int format;
    if (arg_int(arg, &format)) return NULL;
    return PyLong_FromUnsignedLong(layouts_for_format((bfp8_scale_format)format));
}

static PyObject *py_scales_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int layout;
    int64_t rows, kblocks;
    if (want_args("scales_bytes", nargs, 3) || arg_int(args[0], &layout) || arg_i64(args[1], &rows) ||
        arg_i64(args[2], &kblocks))
        return NULL;
    size_t n = bfp8_scales_bytes((bfp8_scale_layout)layout, rows, kblocks);
    if (n == 0 && rows > 0 && kblocks > 0) return raise_status(BFP8_ERR_INVALID_ARGUMENT, "scales");
    return PyLong_FromSize_t(n);
}

/* address(array) -> the address of its first element, by the buffer protocol (numpy's __array_interface__ builds a
 * dict per call). No format is asked for: numpy exports ml_dtypes' bfloat16 and float8 arrays that way too. */
static PyObject *py_address(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_STRIDES)) return NULL;
    PyObject *out = PyLong_FromVoidPtr(view.buf);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg) {
    int n;
    if (arg_int(arg, &n)) return NULL;
    bfp8_status st = bfp8_set_num_threads(n);
    if (st != BFP8_OK) return raise_status(st, "set_num_threads");
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(bfp8_get_num_threads());
}

static PyObject *py_check_env(PyObject *self, PyObject *unused) {
    bfp8_status st = bfp8_check_env();
    if (st != BFP8_OK) return raise_status(st, "check_env");
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Quantization
 * ------------------------------------------------------------------------------------------------------------- */
/* quantize_act(x, x_dtype, m, k, q, s, s_format, s_layout, device, stream) -> non-finite count (-1 on cuda: the
 * device kernel is not asked to count, which would need a synchronizing read-back). */
static PyObject *py_quantize_act(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *x, *q, *s, *stream;
    int x_dtype, fmt, layout, device;
    int64_t m, k;
    if (want_args("quantize_act", nargs, 10) || arg_ptr(args[0], &x) || arg_int(args[1], &x_dtype) ||
        arg_i64(args[2], &m) || arg_i64(args[3], &k) || arg_ptr(args[4], &q) || arg_ptr(args[5], &s) ||
        arg_int(args[6], &fmt) || arg_int(args[7], &layout) || arg_int(args[8], &device) ||
        arg_ptr(args[9], &stream))
        return NULL;
    bfp8_scales scales;
    int64_t nonfinite = -1;
    bfp8_status st = bfp8_scales_init(&scales, (bfp8_scale_format)fmt, (bfp8_scale_layout)layout, m,
                                      ceil_div(k, BFP8_BLOCK), s);
    if (st == BFP8_OK) {
        Py_BEGIN_ALLOW_THREADS
        if (device == BFP8_DEVICE_CUDA) {
            st = bfp8_cuda_quantize_act(x, (bfp8_dtype)x_dtype, m, k, q, &scales, NULL, stream);
        } else {
            nonfinite = 0;
            st = bfp8_quantize_act(x, (bfp8_dtype)x_dtype, m, k, q, &scales, &nonfinite);
        }
        Py_END_ALLOW_THREADS
    }
    if (st != BFP8_OK) return raise_status(st, "quantize activations");
    return PyLong_FromLongLong(nonfinite);
}

/* quantize_weight(w, w_dtype, n, k, q, s, s_format, s_layout) -> non-finite count (host memory only). */
static PyObject *py_quantize_weight(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *w, *q, *s;
    int w_dtype, fmt, layout;
    int64_t n, k;
    if (want_args("quantize_weight", nargs, 8) || arg_ptr(args[0], &w) || arg_int(args[1], &w_dtype) ||
        arg_i64(args[2], &n) || arg_i64(args[3], &k) || arg_ptr(args[4], &q) || arg_ptr(args[5], &s) ||
        arg_int(args[6], &fmt) || arg_int(args[7], &layout))
        return NULL;
    bfp8_scales scales;
    int64_t nonfinite = 0;
    bfp8_status st = bfp8_scales_init(&scales, (bfp8_scale_format)fmt, (bfp8_scale_layout)layout,
                                      ceil_div(n, BFP8_BLOCK), ceil_div(k, BFP8_BLOCK), s);
    if (st == BFP8_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = bfp8_quantize_weight(w, (bfp8_dtype)w_dtype, n, k, (uint8_t *)q, &scales, &nonfinite);
        Py_END_ALLOW_THREADS
    }
    if (st != BFP8_OK) return raise_status(st, "quantize weight");
    return PyLong_FromLongLong(nonfinite);
}

/* ---------------------------------------------------------------------------------------------------------------
 * GEMM
 *
 * A scale tensor from Python may satisfy several layouts at once (one row, one K block, rows a multiple of 4):
 * the caller passes the set its memory satisfies. Where a set has more than one layout, the dispatcher is asked
 * once with all of them on offer and the layouts its choice reads are used (bfp8_backend_layouts); the call then
 * decides again on those single layouts, which keeps the same backend (its capability and priority do not depend
 * on the other layouts).
 * ------------------------------------------------------------------------------------------------------------- */
/* The set (BFP8_BIT bits) of layouts that `groups` [rows, cols] scale matrices, sg elements apart, with element
 * strides (s0, s1), satisfy, where `avail` elements from the first one belong to the tensor. cols is ceil(K/128)
 * for fp32 scales and ceil(K/512) for packed words. A layout counts only if the whole footprint the library may
 * read (bfp8_scales_bytes) is available and, for several matrices, sg is that footprint (the library finds matrix
 * g g footprints after the first); a stride of a dimension of extent <= 1 is free. The one rule for every path:
 * Python's layouts_of is this function. */
static uint32_t scale_layouts(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool packed, int64_t avail,
                              int64_t groups, int64_t sg) {
    if (rows == 0 || cols == 0) return BFP8_BIT(packed ? BFP8_LAYOUT_PACKED_UE8M0 : BFP8_LAYOUT_ROW_MAJOR);
    if (rows < 0 || cols < 0 || groups < 1 || rows > INT64_MAX / 4 / cols / groups) return 0;
    const bool mn = rows <= 1 || s0 == 1;
    const int64_t ld = (rows + 3) / 4 * 4, dense = rows * cols, padded = ld * cols;
    const bool dense_fits = avail >= groups * dense && (groups <= 1 || sg == dense);
    const bool padded_fits = avail >= groups * padded && (groups <= 1 || sg == padded);
    if (packed)
        return mn && (cols <= 1 || s1 == ld) && padded_fits ? BFP8_BIT(BFP8_LAYOUT_PACKED_UE8M0) : 0;
    uint32_t set = 0;
    if (dense_fits && (rows <= 1 || s0 == cols) && (cols <= 1 || s1 == 1)) set |= BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR);
    if (dense_fits && mn && (cols <= 1 || s1 == rows)) set |= BFP8_BIT(BFP8_LAYOUT_MN_MAJOR);
    if (padded_fits && mn && (cols <= 1 || s1 == ld)) set |= BFP8_BIT(BFP8_LAYOUT_MN_MAJOR_ALIGNED);
    return set;
}

/* layouts_of(rows, cols, s0, s1, packed, avail[, groups, sg]) -> layout set */
static PyObject *py_layouts_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t v[8] = {0, 0, 0, 0, 0, 0, 1, 0};
    if (nargs != 6 && nargs != 8) {
        PyErr_Format(PyExc_TypeError, "_native.layouts_of takes 6 or 8 arguments (%zd given)", nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (arg_i64(args[i], &v[i])) return NULL;
    return PyLong_FromUnsignedLong(scale_layouts(v[0], v[1], v[2], v[3], v[4] != 0, v[5], v[6], v[7]));
}

static bool several_layouts(uint32_t a_set, uint32_t b_set) { return (a_set & (a_set - 1)) || (b_set & (b_set - 1)); }

/* p: the problem the call poses with the scales' first layouts; sa and sb get the layouts the chosen backend reads.
 * A failure here is the call's own (bfp8_gemm would fail the same way), with its message set. */
static bfp8_status pick_layouts(bfp8_dispatcher *d, bfp8_problem *p, uint32_t a_set, uint32_t b_set,
                                bfp8_scales *sa, bfp8_scales *sb) {
    p->a_layouts = a_set;
    p->b_layouts = b_set;
    bfp8_decision dec;
    bfp8_status st = bfp8_dispatcher_select(d, p, &dec);
    if (st == BFP8_OK) st = bfp8_backend_layouts(dec.backend, p, &sa->layout, &sb->layout);
    return st;
}

static bfp8_status pick_gemm_layouts(bfp8_dispatcher *d, bfp8_gemm_args *g, uint32_t a_set, uint32_t b_set) {
    if (!several_layouts(a_set, b_set)) return BFP8_OK;
    bfp8_problem p;
    bfp8_status st = bfp8_problem_from_gemm(g, &p);
    return st == BFP8_OK ? pick_layouts(d, &p, a_set, b_set, &g->a_scales, &g->b_scales) : st;
}

/* A scale operand as the calls below take it: its address, format and the layouts its memory satisfies. */
typedef struct scale_arg {
    void *data;
    int format;
    uint32_t layouts;
} scale_arg;

/* The scale descriptors of an M x N x K GEMM's operands (one group's, for a grouped call), each in the first layout
 * its tensor offers (pick_layouts may change it to another it offers). */
static bfp8_status init_scales(bfp8_scales *a_scales, bfp8_scales *b_scales, scale_arg sa, scale_arg sb, int64_t m,
                               int64_t n, int64_t k) {
    const int64_t kblocks = ceil_div(k, BFP8_BLOCK);
    bfp8_status st =
        bfp8_scales_init(a_scales, (bfp8_scale_format)sa.format, first_layout(sa.layouts), m, kblocks, sa.data);
    if (st == BFP8_OK)
        st = bfp8_scales_init(b_scales, (bfp8_scale_format)sb.format, first_layout(sb.layouts),
                              ceil_div(n, BFP8_BLOCK), kblocks, sb.data);
    return st;
}

/* The calls of the Python paths (gemm, linear_dyn, grouped_gemm: integer arguments) and of the torch fast lane
 * (tensors read here): build the library's arguments, run with the GIL released, return the fallback count or
 * raise carrying the library's message. */
static PyObject *call_gemm(int64_t m, int64_t n, int64_t k, const void *a, scale_arg sa, const void *b, scale_arg sb,
                           const void *bias, int bias_dtype, void *y, int y_dtype, int device, void *stream) {
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    bfp8_gemm_args g = {
        .m = m, .n = n, .k = k, .a = a, .b = b,
        .bias = bias, .bias_dtype = (bfp8_dtype)bias_dtype,
        .y = y, .y_dtype = (bfp8_dtype)y_dtype,
        .device = (bfp8_device)device, .stream = stream,
    };
    bfp8_status st = init_scales(&g.a_scales, &g.b_scales, sa, sb, m, n, k);
    if (st == BFP8_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = pick_gemm_layouts(d, &g, sa.layouts, sb.layouts);
        if (st == BFP8_OK) st = bfp8_gemm(d, &g);
        Py_END_ALLOW_THREADS
    }
    if (st != BFP8_OK) return raise_status(st, "gemm");
    return fallback_count(d);
}

/* The activation scratch of linear_dyn: q at offset 0, the scales at the next multiple of 256 bytes, room for the
 * largest layout (the aligned MN-major one). */
static int64_t scratch_scale_offset(int64_t m, int64_t k) { return (m * k + 255) / 256 * 256; }

static int64_t scratch_bytes(int64_t m, int64_t k) {
    return scratch_scale_offset(m, k) +
           (int64_t)bfp8_scales_bytes(BFP8_LAYOUT_MN_MAJOR_ALIGNED, m, ceil_div(k, BFP8_BLOCK));
}

/* apply_w8a8_block_fp8_linear on raw memory: x quantized in 1x128 groups (the weight's scale format) into the
 * scratch, in the layout the chosen backend reads, then the dispatched GEMM. The scratch is the caller's on CUDA
 * (torch's allocator: stream-ordered, capturable); on the host scratch = NULL has the call allocate its own. */
static PyObject *call_linear_dyn(const void *x, int x_dtype, int64_t m, int64_t k, void *scratch,
                                 int64_t scratch_size, int64_t n, const void *b, scale_arg sb, const void *bias,
                                 int bias_dtype, void *y, int y_dtype, int device, void *stream) {
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    if (m < 0 || k < 0 || m > INT64_MAX / (k ? k : 1) - 256) {
        PyErr_Format(PyExc_ValueError, "linear: bad activation shape [%lld, %lld]", (long long)m, (long long)k);
        return NULL;
    }
    const int64_t kblocks = ceil_div(k, BFP8_BLOCK), s_off = scratch_scale_offset(m, k);
    void *own = NULL;
    if (!scratch && device == BFP8_DEVICE_CPU) {
        scratch_size = scratch_bytes(m, k);
        scratch = own = malloc((size_t)scratch_size + 1);
        if (!own) return PyErr_NoMemory();
    }
    uint8_t *q = scratch;
    void *sa = scratch ? (uint8_t *)scratch + s_off : NULL;
    bfp8_gemm_args g = {
        .m = m, .n = n, .k = k, .a = q, .b = b,
        .bias = bias, .bias_dtype = (bfp8_dtype)bias_dtype,
        .y = y, .y_dtype = (bfp8_dtype)y_dtype,
        .device = (bfp8_device)device, .stream = stream,
    };
    bfp8_status st = bfp8_scales_init(&g.b_scales, (bfp8_scale_format)sb.format, first_layout(sb.layouts),
                                      ceil_div(n, BFP8_BLOCK), kblocks, sb.data);
    const uint32_t a_set = layouts_for_format((bfp8_scale_format)sb.format);
    if (st == BFP8_OK)
        st = bfp8_scales_init(&g.a_scales, (bfp8_scale_format)sb.format, first_layout(a_set), m, kblocks, sa);
    bool short_scratch = false;
    if (st == BFP8_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = pick_gemm_layouts(d, &g, a_set, sb.layouts);
        short_scratch = st == BFP8_OK && m > 0 && kblocks > 0 &&
                        s_off + (int64_t)bfp8_scales_bytes(g.a_scales.layout, m, kblocks) > scratch_size;
        if (st == BFP8_OK && !short_scratch) {
            st = device == BFP8_DEVICE_CUDA
                     ? bfp8_cuda_quantize_act(x, (bfp8_dtype)x_dtype, m, k, q, &g.a_scales, NULL, stream)
                     : bfp8_quantize_act(x, (bfp8_dtype)x_dtype, m, k, q, &g.a_scales, NULL);
            if (st == BFP8_OK) st = bfp8_gemm(d, &g);
        }
        Py_END_ALLOW_THREADS
    }
    free(own);
    if (short_scratch) {
        PyErr_Format(PyExc_ValueError, "linear: scratch of %lld bytes is too small", (long long)scratch_size);
        return NULL;
    }
    if (st != BFP8_OK) return raise_status(st, "linear");
    return fallback_count(d);
}

/* bfp8_grouped_gemm: m is all rows (contiguous) or max_m (masked); row_map is m_indices (contiguous) or masked_m
 * (masked), int32 in the data's memory; sa and sb describe one group's scale matrix (masked sa and every sb hold G
 * of them back to back). */
static PyObject *call_grouped(int layout, int64_t groups, int64_t m, int64_t n, int64_t k, const void *a,
                              scale_arg sa, const int32_t *row_map, int64_t expected_m, const void *b, scale_arg sb,
                              void *y, int y_dtype, int device, void *stream) {
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    const bool masked = layout == BFP8_GROUPED_MASKED;
    bfp8_grouped_gemm_args g = {
        .layout = (bfp8_grouped_layout)layout, .groups = groups, .m = m, .n = n, .k = k,
        .a = a, .m_indices = masked ? NULL : row_map, .masked_m = masked ? row_map : NULL,
        .expected_m = expected_m, .b = b,
        .y = y, .y_dtype = (bfp8_dtype)y_dtype,
        .device = (bfp8_device)device, .stream = stream,
    };
    bfp8_status st = init_scales(&g.a_scales, &g.b_scales, sa, sb, m, n, k);
    if (st == BFP8_OK) {
        Py_BEGIN_ALLOW_THREADS
        if (several_layouts(sa.layouts, sb.layouts)) {
            bfp8_problem p;
            st = bfp8_problem_from_grouped_gemm(&g, &p);
            if (st == BFP8_OK) st = pick_layouts(d, &p, sa.layouts, sb.layouts, &g.a_scales, &g.b_scales);
        }
        if (st == BFP8_OK) st = bfp8_grouped_gemm(d, &g);
        Py_END_ALLOW_THREADS
    }
    if (st != BFP8_OK) return raise_status(st, "grouped gemm");
    return fallback_count(d);
}

static int arg_scale(PyObject *const *args, scale_arg *out) {
    int64_t set;
    if (arg_ptr(args[0], &out->data) || arg_int(args[1], &out->format) || arg_i64(args[2], &set)) return -1;
    out->layouts = (uint32_t)set;
    return 0;
}

/* gemm(m, n, k, a, sa, a_format, a_layouts, b, sb, b_format, b_layouts, bias, bias_dtype, y, y_dtype, device,
 *      stream) -> fallback count */
static PyObject *py_gemm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *a, *b, *bias, *y, *stream;
    int64_t m, n, k;
    int bias_dtype, y_dtype, device;
    scale_arg sa, sb;
    if (want_args("gemm", nargs, 17) || arg_i64(args[0], &m) || arg_i64(args[1], &n) || arg_i64(args[2], &k) ||
        arg_ptr(args[3], &a) || arg_scale(args + 4, &sa) || arg_ptr(args[7], &b) || arg_scale(args + 8, &sb) ||
        arg_ptr(args[11], &bias) || arg_int(args[12], &bias_dtype) || arg_ptr(args[13], &y) ||
        arg_int(args[14], &y_dtype) || arg_int(args[15], &device) || arg_ptr(args[16], &stream))
        return NULL;
    return call_gemm(m, n, k, a, sa, b, sb, bias, bias_dtype, y, y_dtype, device, stream);
}

/* linear_dyn(x, x_dtype, m, k, scratch, scratch_bytes, n, b, sb, b_format, b_layouts, bias, bias_dtype, y,
 *            y_dtype, device, stream) -> fallback count */
static PyObject *py_linear_dyn(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *x, *scratch, *b, *bias, *y, *stream;
    int64_t m, k, scratch_size, n;
    int x_dtype, bias_dtype, y_dtype, device;
    scale_arg sb;
    if (want_args("linear_dyn", nargs, 17) || arg_ptr(args[0], &x) || arg_int(args[1], &x_dtype) ||
        arg_i64(args[2], &m) || arg_i64(args[3], &k) || arg_ptr(args[4], &scratch) ||
        arg_i64(args[5], &scratch_size) || arg_i64(args[6], &n) || arg_ptr(args[7], &b) ||
        arg_scale(args + 8, &sb) || arg_ptr(args[11], &bias) || arg_int(args[12], &bias_dtype) ||
        arg_ptr(args[13], &y) || arg_int(args[14], &y_dtype) || arg_int(args[15], &device) ||
        arg_ptr(args[16], &stream))
        return NULL;
    return call_linear_dyn(x, x_dtype, m, k, scratch, scratch_size, n, b, sb, bias, bias_dtype, y, y_dtype, device,
                           stream);
}

/* linear_scratch_bytes(m, k) -> the bytes of linear_dyn's scratch for [m, k] activations */
static PyObject *py_linear_scratch_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t m, k;
    if (want_args("linear_scratch_bytes", nargs, 2) || arg_i64(args[0], &m) || arg_i64(args[1], &k)) return NULL;
    if (m < 0 || k < 0 || m > INT64_MAX / (k ? k : 1) / 2) {
        PyErr_Format(PyExc_ValueError, "linear: bad activation shape [%lld, %lld]", (long long)m, (long long)k);
        return NULL;
    }
    return PyLong_FromLongLong(scratch_bytes(m, k));
}

/* grouped_gemm(layout, groups, m, n, k, a, sa, a_format, a_layouts, row_map, expected_m, b, sb, b_format,
 *              b_layouts, y, y_dtype, device, stream) -> fallback count */
static PyObject *py_grouped_gemm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *a, *row_map, *b, *y, *stream;
    int64_t groups, m, n, k, expected_m;
    int layout, y_dtype, device;
    scale_arg sa, sb;
    if (want_args("grouped_gemm", nargs, 19) || arg_int(args[0], &layout) || arg_i64(args[1], &groups) ||
        arg_i64(args[2], &m) || arg_i64(args[3], &n) || arg_i64(args[4], &k) || arg_ptr(args[5], &a) ||
        arg_scale(args + 6, &sa) || arg_ptr(args[9], &row_map) || arg_i64(args[10], &expected_m) ||
        arg_ptr(args[11], &b) || arg_scale(args + 12, &sb) || arg_ptr(args[15], &y) || arg_int(args[16], &y_dtype) ||
        arg_int(args[17], &device) || arg_ptr(args[18], &stream))
        return NULL;
    return call_grouped(layout, groups, m, n, k, a, sa, row_map, expected_m, b, sb, y, y_dtype, device, stream);
}

/* ---------------------------------------------------------------------------------------------------------------
 * The torch fast lane (issue 29): the eager calls on plain torch tensors, read here instead of in Python
 *
 * A torch call's host time is mostly reading tensor attributes in Python (~0.1 us each, some 25 a GEMM). torch
 * exports a C table, DLPack's exchange API (the capsule torch.Tensor.__dlpack_c_exchange_api__, DLPack 1.3), that
 * fills a DLTensor (address, device, dtype, shape, strides) without a Python call and gives the current CUDA stream
 * and a torch allocation. The fast_* functions take the public function's arguments, accept only calls that every
 * check of the Python path would accept (the same dtypes, shapes, devices, contiguity, alignment and scale layouts,
 * by the same scale_layouts) and run them; anything else (numpy arrays, subclasses and fake tensors, meta tensors,
 * arguments to copy, a CUDA device other than the current one, any error) returns None and the Python path runs,
 * which copies what needs copying and raises the error with its message. The library validates everything again.
 * The structs are DLPack 1.x's (dlpack.h); the table is used only where its major version is 1.
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct dl_device {
    int32_t device_type; /* DLDeviceType */
    int32_t device_id;
} dl_device;
typedef struct dl_dtype {
    uint8_t code, bits;
    uint16_t lanes;
} dl_dtype;
typedef struct dl_tensor {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape, *strides; /* strides in elements; NULL = compact row-major */
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_version {
    uint32_t major, minor;
} dl_version;
typedef struct dl_managed {
    dl_version version;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
    uint64_t flags;
    dl_tensor tensor;
} dl_managed;
typedef struct dl_api_header {
    dl_version version;
    struct dl_api_header *prev_api;
} dl_api_header;
typedef struct dl_exchange_api {
    dl_api_header header;
    int (*managed_tensor_allocator)(dl_tensor *prototype, dl_managed **out, void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind, const char *message));
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, dl_managed **out);
    int (*managed_tensor_to_py_object_no_sync)(dl_managed *tensor, void **out_py_object);
    int (*dltensor_from_py_object_no_sync)(void *py_object, dl_tensor *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_current_stream);
} dl_exchange_api;
enum { DL_CPU = 1, DL_CUDA = 2 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_FLOAT8_E4M3FN = 10 };

static struct {
    const dl_exchange_api *api;           /* NULL: no fast lane */
    PyTypeObject *tensor, *parameter;      /* the plain tensor types */
    PyObject *current_device;              /* torch's current CUDA device, a callable */
    PyObject *untyped_storage, *nbytes, *storage_offset; /* method names */
} lane;

/* use_torch(torch.Tensor, torch.nn.Parameter, exchange API capsule or None, current_device) -> whether the fast lane
 * is open. */
static PyObject *py_use_torch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (want_args("use_torch", nargs, 4)) return NULL;
    if (!PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "use_torch: two types and a callable");
        return NULL;
    }
    const dl_exchange_api *api = NULL;
    if (PyCapsule_IsValid(args[2], "dlpack_exchange_api")) {
        api = PyCapsule_GetPointer(args[2], "dlpack_exchange_api");
        if (api && (api->header.version.major != 1 || !api->dltensor_from_py_object_no_sync ||
                    !api->managed_tensor_allocator || !api->managed_tensor_to_py_object_no_sync ||
                    !api->current_work_stream))
            api = NULL;
    }
    if (!lane.untyped_storage) {
        lane.untyped_storage = PyUnicode_InternFromString("untyped_storage");
        lane.nbytes = PyUnicode_InternFromString("nbytes");
        lane.storage_offset = PyUnicode_InternFromString("storage_offset");
        if (!lane.untyped_storage || !lane.nbytes || !lane.storage_offset) return NULL;
    }
    Py_XSETREF(lane.tensor, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(lane.parameter, (PyTypeObject *)Py_NewRef(args[1]));
    Py_XSETREF(lane.current_device, Py_NewRef(args[3]));
    lane.api = api; /* the capsule's table lives as long as torch's library */
    return PyBool_FromLong(api != NULL);
}

/* A tensor as the fast lane reads it. dev: -1 for the CPU, else the CUDA device index. */
typedef struct operand {
    PyObject *obj;
    uint8_t *data;
    int dev;
    int ndim;
    int dtype; /* bfp8_dtype (uint8 as E4M3 codes), -1 for others */
    const int64_t *shape, *strides;
} operand;

/* The library dtype of a DLPack one (uint8 as E4M3 codes, as the Python path takes them), -1 for the others. */
static int dtype_of(dl_dtype t) {
    if (t.lanes != 1) return -1;
    switch (t.code) {
    case DL_FLOAT: return t.bits == 32 ? BFP8_DTYPE_F32 : t.bits == 16 ? BFP8_DTYPE_F16 : -1;
    case DL_BFLOAT: return t.bits == 16 ? BFP8_DTYPE_BF16 : -1;
    case DL_FLOAT8_E4M3FN:
    case DL_UINT: return t.bits == 8 ? BFP8_DTYPE_E4M3 : -1;
    case DL_INT: return t.bits == 32 ? BFP8_DTYPE_I32 : -1;
    default: return -1;
    }
}

/* Whether o is a plain CPU or CUDA tensor whose descriptor the exchange API gives; false clears any error. */
static bool view(PyObject *o, operand *t) {
    if (Py_TYPE(o) != lane.tensor && Py_TYPE(o) != lane.parameter) return false;
    dl_tensor dl;
    if (lane.api->dltensor_from_py_object_no_sync(o, &dl)) { /* e.g. meta tensors */
        PyErr_Clear();
        return false;
    }
    if (dl.device.device_type != DL_CPU && dl.device.device_type != DL_CUDA) return false;
    t->obj = o;
    t->data = (uint8_t *)dl.data + dl.byte_offset;
    t->dev = dl.device.device_type == DL_CPU ? -1 : dl.device.device_id;
    t->ndim = dl.ndim;
    t->dtype = dtype_of(dl.dtype);
    t->shape = dl.shape;
    t->strides = dl.strides;
    return true;
}

static bool is_float(const operand *t) {
    return t->dtype == BFP8_DTYPE_F32 || t->dtype == BFP8_DTYPE_BF16 || t->dtype == BFP8_DTYPE_F16;
}

/* Compact row-major (torch's is_contiguous: strides of extent-1 dimensions are free). */
static bool contiguous(const operand *t) {
    if (!t->strides) return true;
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 0) return true;
        if (t->shape[i] != 1 && t->strides[i] != want) return false;
        want *= t->shape[i];
    }
    return true;
}

static int64_t stride(const operand *t, int i) {
    if (t->strides) return t->strides[i];
    int64_t s = 1;
    for (int j = t->ndim - 1; j > i; j--) s *= t->shape[j];
    return s;
}

/* The elements from t's first one to the end of its storage (where an aligned layout's padding may lie beyond the
 * view), by torch's methods; -1 with the error cleared if they fail. */
static int64_t storage_avail(const operand *t) {
    int64_t nbytes = -1, offset = -1;
    PyObject *storage = PyObject_CallMethodNoArgs(t->obj, lane.untyped_storage);
    PyObject *size = storage ? PyObject_CallMethodNoArgs(storage, lane.nbytes) : NULL;
    PyObject *off = size ? PyObject_CallMethodNoArgs(t->obj, lane.storage_offset) : NULL;
    if (off) {
        nbytes = PyLong_AsLongLong(size);
        offset = PyLong_AsLongLong(off);
    }
    Py_XDECREF(storage);
    Py_XDECREF(size);
    Py_XDECREF(off);
    if (PyErr_Occurred() || nbytes < 0 || offset < 0) {
        PyErr_Clear();
        return -1;
    }
    return nbytes / 4 - offset;
}

/* Scales of [rows x K] operands on device dev, G matrices [groups, rows, cols] (groups = 0: a 2-D tensor), in a
 * layout their strides describe: fp32 [.., rows, ceil(K/128)] or int32 packed UE8M0 [.., rows, ceil(K/512)]. */
static bool scales_of(PyObject *o, int64_t groups, int64_t rows, int64_t kblocks, int dev, scale_arg *out) {
    operand s;
    if (!view(o, &s) || s.dev != dev || s.ndim != (groups ? 3 : 2)) return false;
    const bool packed = s.dtype == BFP8_DTYPE_I32;
    if (!packed && s.dtype != BFP8_DTYPE_F32) return false;
    const int64_t cols = packed ? ceil_div(kblocks, 4) : kblocks;
    const int r = s.ndim - 2;
    if ((groups && s.shape[0] != groups) || s.shape[r] != rows || s.shape[r + 1] != cols) return false;
    const int64_t s0 = stride(&s, r), s1 = stride(&s, r + 1), sg = groups ? stride(&s, 0) : 0, g = groups ? groups : 1;
    if (s0 < 0 || s1 < 0 || sg < 0) return false;
    int64_t avail = 0;
    if (rows && cols) {
        avail = 1 + (g - 1) * sg + (rows - 1) * s0 + (cols - 1) * s1;
        if (rows % 4 && (rows == 1 || s0 == 1) && (avail = storage_avail(&s)) < 0) return false;
    }
    out->data = s.data;
    out->format = packed ? BFP8_SCALE_UE8M0 : BFP8_SCALE_FP32;
    out->layouts = scale_layouts(rows, cols, s0, s1, packed, avail, g, sg);
    return out->layouts && (dev < 0 || !((uintptr_t)s.data & 15));
}

/* CUDA: whether dev is torch's current device (the library launches there), and its current stream. */
static bool on_current_device(int dev, void **stream) {
    *stream = NULL;
    if (dev < 0) return true;
    PyObject *cur = PyObject_CallNoArgs(lane.current_device);
    const long current = cur ? PyLong_AsLong(cur) : -1;
    Py_XDECREF(cur);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    return current == dev && lane.api->current_work_stream(DL_CUDA, dev, stream) == 0;
}

static bool aligned(const operand *t) { return t->dev < 0 || !((uintptr_t)t->data & 15); }

static bool pair_of(PyObject *o, PyObject **out) {
    if ((!PyTuple_Check(o) && !PyList_Check(o)) || PySequence_Fast_GET_SIZE(o) != 2) return false;
    out[0] = PySequence_Fast_GET_ITEM(o, 0);
    out[1] = PySequence_Fast_GET_ITEM(o, 1);
    return true;
}

/* A new torch tensor of the given shape and dtype on like's device, by torch's allocator (on CUDA its caching
 * allocator, on the current stream, as torch.empty), and its address; NULL with the error set. */
static void set_alloc_error(void *ctx, const char *kind, const char *message) {
    PyErr_Format(PyExc_RuntimeError, "torch could not allocate the output: %s: %s", kind, message);
}

static PyObject *new_tensor(const operand *like, int ndim, int64_t *shape, dl_dtype dtype, void **data) {
    dl_tensor proto = {.device = {like->dev < 0 ? DL_CPU : DL_CUDA, like->dev < 0 ? 0 : like->dev},
                       .ndim = ndim, .dtype = dtype, .shape = shape};
    dl_managed *m = NULL;
    if (lane.api->managed_tensor_allocator(&proto, &m, NULL, set_alloc_error)) return NULL;
    *data = (uint8_t *)m->tensor.data + m->tensor.byte_offset; /* owned by the tensor made of m below */
    void *obj = NULL;
    if (lane.api->managed_tensor_to_py_object_no_sync(m, &obj)) return NULL; /* m is stolen either way */
    return obj;
}

#define DECLINE Py_RETURN_NONE

/* fast_gemm_out((a, sfa), (b, sfb), d) -> fallback count, or None: fp8_gemm_nt without c */
static PyObject *py_fast_gemm_out(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *ab[4];
    operand a, b, d;
    if (nargs != 3 || !lane.api || !pair_of(args[0], ab) || !pair_of(args[1], ab + 2) || !view(ab[0], &a) ||
        !view(ab[2], &b) || !view(args[2], &d))
        DECLINE;
    if (a.ndim != 2 || b.ndim != 2 || d.ndim != 2 || a.dtype != BFP8_DTYPE_E4M3 || b.dtype != BFP8_DTYPE_E4M3 ||
        !is_float(&d) || b.dev != a.dev || d.dev != a.dev || !contiguous(&a) || !contiguous(&b) || !contiguous(&d) ||
        !aligned(&a) || !aligned(&b) || !aligned(&d))
        DECLINE;
    const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[0], kblocks = ceil_div(k, BFP8_BLOCK);
    scale_arg sa, sb;
    void *stream;
    if (b.shape[1] != k || d.shape[0] != m || d.shape[1] != n || !scales_of(ab[1], 0, m, kblocks, a.dev, &sa) ||
        !scales_of(ab[3], 0, ceil_div(n, BFP8_BLOCK), kblocks, a.dev, &sb) || !on_current_device(a.dev, &stream))
        DECLINE;
    return call_gemm(m, n, k, a.data, sa, b.data, sb, NULL, BFP8_DTYPE_F32, d.data, d.dtype,
                     a.dev < 0 ? BFP8_DEVICE_CPU : BFP8_DEVICE_CUDA, stream);
}

/* fast_linear_dyn(input, weight, weight_scale, bias) -> (output, fallback count), or None:
 * apply_w8a8_block_fp8_linear, input [..., K] float, output [..., N] of its dtype */
static PyObject *py_fast_linear_dyn(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    operand x, w, bias = {0};
    if (nargs != 4 || !lane.api || !view(args[0], &x) || !view(args[1], &w) ||
        (args[3] != Py_None && !view(args[3], &bias)))
        DECLINE;
    if (x.ndim < 1 || x.ndim > 8 || w.ndim != 2 || !is_float(&x) || w.dtype != BFP8_DTYPE_E4M3 || w.dev != x.dev ||
        !contiguous(&x) || !contiguous(&w) || !aligned(&x) || !aligned(&w))
        DECLINE;
    const int64_t k = x.shape[x.ndim - 1], n = w.shape[0], kblocks = ceil_div(k, BFP8_BLOCK);
    int64_t m = 1, shape[8];
    for (int i = 0; i < x.ndim - 1; i++) m *= shape[i] = x.shape[i];
    shape[x.ndim - 1] = n;
    if (w.shape[1] != k || (bias.obj && (bias.ndim != 1 || bias.shape[0] != n || !is_float(&bias) ||
                                         bias.dev != x.dev || !contiguous(&bias))))
        DECLINE;
    scale_arg sb;
    void *stream;
    if (!scales_of(args[2], 0, ceil_div(n, BFP8_BLOCK), kblocks, x.dev, &sb) || !on_current_device(x.dev, &stream))
        DECLINE;
    void *y_data, *scratch_data = NULL;
    const dl_dtype x_dl = {x.dtype == BFP8_DTYPE_BF16 ? DL_BFLOAT : DL_FLOAT, x.dtype == BFP8_DTYPE_F32 ? 32 : 16, 1};
    PyObject *y = new_tensor(&x, x.ndim, shape, x_dl, &y_data), *scratch = NULL;
    if (!y) return NULL;
    int64_t scratch_size = 0;
    if (x.dev >= 0) { /* torch's memory on CUDA; the host call allocates its own */
        scratch_size = m <= INT64_MAX / (k ? k : 1) / 2 ? scratch_bytes(m, k) : -1;
        scratch = scratch_size >= 0 ? new_tensor(&x, 1, &scratch_size, (dl_dtype){DL_UINT, 8, 1}, &scratch_data)
                                    : NULL;
        if (!scratch) {
            Py_DECREF(y);
            if (scratch_size >= 0) return NULL;
            DECLINE;
        }
    }
    PyObject *count = call_linear_dyn(x.data, x.dtype, m, k, scratch_data, scratch_size, n, w.data, sb,
                                      bias.obj ? bias.data : NULL, bias.obj ? bias.dtype : BFP8_DTYPE_F32, y_data,
                                      x.dtype, x.dev < 0 ? BFP8_DEVICE_CPU : BFP8_DEVICE_CUDA, stream);
    Py_XDECREF(scratch); /* back to torch's allocator, ordered after the call on the stream, as a torch.empty */
    if (!count) {
        Py_DECREF(y);
        return NULL;
    }
    return Py_BuildValue("(NN)", y, count);
}

/* fast_grouped(layout, (a, sfa), (b, sfb), d, row_map, expected_m) -> fallback count, or None:
 * m_grouped_fp8_gemm_nt_contiguous (row_map = m_indices) and _masked (row_map = masked_m) */
static PyObject *py_fast_grouped(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *ab[4];
    operand a, b, d, map;
    int layout;
    int64_t expected_m;
    if (nargs != 6 || !lane.api || arg_int(args[0], &layout) || arg_i64(args[5], &expected_m) ||
        !pair_of(args[1], ab) || !pair_of(args[2], ab + 2) || !view(ab[0], &a) || !view(ab[2], &b) ||
        !view(args[3], &d) || !view(args[4], &map)) {
        PyErr_Clear();
        DECLINE;
    }
    const bool masked = layout == BFP8_GROUPED_MASKED;
    if ((!masked && layout != BFP8_GROUPED_CONTIGUOUS) || expected_m < 0 || a.ndim != (masked ? 3 : 2) ||
        b.ndim != 3 || d.ndim != a.ndim || map.ndim != 1 || a.dtype != BFP8_DTYPE_E4M3 ||
        b.dtype != BFP8_DTYPE_E4M3 || !is_float(&d) || map.dtype != BFP8_DTYPE_I32 || b.dev != a.dev ||
        d.dev != a.dev || map.dev != a.dev || !contiguous(&a) || !contiguous(&b) || !contiguous(&d) ||
        !contiguous(&map) || !aligned(&a) || !aligned(&b) || !aligned(&d))
        DECLINE;
    const int64_t groups = b.shape[0], n = b.shape[1], k = b.shape[2], rows = a.shape[a.ndim - 2];
    const int64_t kblocks = ceil_div(k, BFP8_BLOCK);
    if (groups < 1 || a.shape[a.ndim - 1] != k || (masked && (a.shape[0] != groups || d.shape[0] != groups)) ||
        d.shape[d.ndim - 2] != rows || d.shape[d.ndim - 1] != n || map.shape[0] != (masked ? groups : rows))
        DECLINE;
    scale_arg sa, sb;
    void *stream;
    if (!scales_of(ab[1], masked ? groups : 0, rows, kblocks, a.dev, &sa) ||
        !scales_of(ab[3], groups, ceil_div(n, BFP8_BLOCK), kblocks, a.dev, &sb) || !on_current_device(a.dev, &stream))
        DECLINE;
    return call_grouped(layout, groups, rows, n, k, a.data, sa, (const int32_t *)map.data, expected_m, b.data, sb,
                        d.data, d.dtype, a.dev < 0 ? BFP8_DEVICE_CPU : BFP8_DEVICE_CUDA, stream);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Prepared weights (capsules) and bfp8_linear
 * ------------------------------------------------------------------------------------------------------------- */
static const char WEIGHT_CAPSULE[] = "blockfp8.weight";

static void weight_capsule_free(PyObject *capsule) {
    bfp8_weight *w = PyCapsule_GetPointer(capsule, WEIGHT_CAPSULE);
    if (w) bfp8_weight_free(w);
}

static PyObject *weight_capsule(bfp8_weight *w) {
    PyObject *c = PyCapsule_New(w, WEIGHT_CAPSULE, weight_capsule_free);
    if (!c) bfp8_weight_free(w);
    return c;
}

static bfp8_weight *arg_weight(PyObject *o) { return PyCapsule_GetPointer(o, WEIGHT_CAPSULE); }

/* weight_create(q, n, k, s, s_format, s_layout) -> capsule; q and s in host memory (copied). */
static PyObject *py_weight_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *q, *s;
    int64_t n, k;
    int fmt, layout;
    if (want_args("weight_create", nargs, 6) || arg_ptr(args[0], &q) || arg_i64(args[1], &n) ||
        arg_i64(args[2], &k) || arg_ptr(args[3], &s) || arg_int(args[4], &fmt) || arg_int(args[5], &layout))
        return NULL;
    bfp8_scales scales;
    bfp8_weight *w = NULL;
    bfp8_status st = bfp8_scales_init(&scales, (bfp8_scale_format)fmt, (bfp8_scale_layout)layout,
                                      ceil_div(n, BFP8_BLOCK), ceil_div(k, BFP8_BLOCK), s);
    if (st == BFP8_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = bfp8_weight_create(q, n, k, &scales, &w);
        Py_END_ALLOW_THREADS
    }
    if (st != BFP8_OK) return raise_status(st, "weight");
    return weight_capsule(w);
}

/* weight_quantize(w, w_dtype, n, k, s_format) -> (capsule, non-finite count); w in host memory. */
static PyObject *py_weight_quantize(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *src;
    int64_t n, k;
    int dtype, fmt;
    if (want_args("weight_quantize", nargs, 5) || arg_ptr(args[0], &src) || arg_int(args[1], &dtype) ||
        arg_i64(args[2], &n) || arg_i64(args[3], &k) || arg_int(args[4], &fmt))
        return NULL;
    bfp8_weight *w = NULL;
    int64_t nonfinite = 0;
    bfp8_status st;
    Py_BEGIN_ALLOW_THREADS
    st = bfp8_weight_quantize(src, (bfp8_dtype)dtype, n, k, (bfp8_scale_format)fmt, &w, &nonfinite);
    Py_END_ALLOW_THREADS
    if (st != BFP8_OK) return raise_status(st, "quantize weight");
    PyObject *c = weight_capsule(w);
    if (!c) return NULL;
    return Py_BuildValue("(NL)", c, (long long)nonfinite);
}

static PyObject *tensor_tuple(const bfp8_tensor *t) {
    PyObject *shape = PyTuple_New(t->ndim);
    if (!shape) return NULL;
    for (int i = 0; i < t->ndim; i++) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t->shape[i]));
    return Py_BuildValue("(iNy#)", (int)t->dtype, shape, (const char *)t->data, (Py_ssize_t)t->nbytes);
}

/* weight_load(path, name, extra_name or None) -> (capsule, (dtype, shape, bytes) of extra_name or None).
 * path: a safetensors file or a sharded checkpoint (bfp8_checkpoint_open: an index, or a directory holding one).
 * DeepSeek naming: NAME (F8_E4M3 [N, K]) + NAME_scale_inv (F32 or F8_E8M0), which may sit in different shards;
 * extra_name is another tensor of the checkpoint (a bias), read in the same pass. */
static PyObject *py_weight_load(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *path, *name, *extra;
    if (want_args("weight_load", nargs, 3) || arg_str(args[0], &path) || arg_str(args[1], &name) ||
        arg_str(args[2], &extra))
        return NULL;
    if (!path || !name) {
        PyErr_SetString(PyExc_TypeError, "weight_load: path and name are required");
        return NULL;
    }
    bfp8_checkpoint *c = NULL;
    bfp8_weight *w = NULL;
    const bfp8_tensor *t = NULL;
    bfp8_status st;
    Py_BEGIN_ALLOW_THREADS
    st = bfp8_checkpoint_open(path, &c);
    if (st == BFP8_OK) st = bfp8_checkpoint_weight_load(c, name, NULL, &w);
    if (st == BFP8_OK && extra) st = bfp8_checkpoint_find(c, extra, &t);
    Py_END_ALLOW_THREADS
    if (st != BFP8_OK) {
        bfp8_weight_free(w);
        bfp8_checkpoint_close(c);
        return raise_status(st, path);
    }
    PyObject *capsule = weight_capsule(w), *extra_obj = t ? tensor_tuple(t) : Py_NewRef(Py_None);
    bfp8_checkpoint_close(c);
    if (!capsule || !extra_obj) {
        Py_XDECREF(capsule);
        Py_XDECREF(extra_obj);
        return NULL;
    }
    return Py_BuildValue("(NN)", capsule, extra_obj);
}

/* safetensors_read(path, name) -> (dtype, shape, bytes). */
static PyObject *py_safetensors_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *path, *name;
    if (want_args("safetensors_read", nargs, 2) || arg_str(args[0], &path) || arg_str(args[1], &name)) return NULL;
    if (!path || !name) {
        PyErr_SetString(PyExc_TypeError, "safetensors_read: path and name are required");
        return NULL;
    }
    bfp8_safetensors *f = NULL;
    bfp8_status st;
    Py_BEGIN_ALLOW_THREADS
    st = bfp8_safetensors_open(path, &f);
    Py_END_ALLOW_THREADS
    if (st != BFP8_OK) return raise_status(st, path);
    const bfp8_tensor *t = bfp8_safetensors_find(f, name);
    PyObject *out = NULL;
    if (t) {
        out = tensor_tuple(t);
    } else {
        PyObject *msg = PyUnicode_FromFormat("%s: no tensor named '%s'", path, name);
        if (msg) {
            PyErr_SetObject(status_errors[BFP8_ERR_NOT_FOUND], msg);
            Py_DECREF(msg);
        }
    }
    bfp8_safetensors_close(f);
    return out;
}

/* weight_prepare(capsule, device): what every backend of that device reads (scale layouts; device copies on
 * cuda, on the current CUDA device). */
static PyObject *py_weight_prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int device;
    if (want_args("weight_prepare", nargs, 2) || arg_int(args[1], &device)) return NULL;
    bfp8_weight *w = arg_weight(args[0]);
    if (!w) return NULL;
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    bfp8_status st = BFP8_OK;
    size_t prepared = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < bfp8_dispatcher_count(d) && st == BFP8_OK; i++) {
        const bfp8_backend *b = bfp8_dispatcher_at(d, i);
        if ((int)b->caps.device != device) continue;
        st = bfp8_weight_prepare(w, d, b->name);
        prepared++;
    }
    Py_END_ALLOW_THREADS
    if (st != BFP8_OK) return raise_status(st, "prepare weight");
    return PyLong_FromSize_t(prepared);
}

/* weight_info(capsule) -> (n, k, scale_format, host_layouts, device_layouts) */
static PyObject *py_weight_info(PyObject *self, PyObject *arg) {
    bfp8_weight *w = arg_weight(arg);
    if (!w) return NULL;
    bfp8_weight_info info;
    bfp8_status st = bfp8_weight_info_get(w, &info);
    if (st != BFP8_OK) return raise_status(st, "weight");
    return Py_BuildValue("(LLiII)", (long long)info.n, (long long)info.k, (int)info.scale_format,
                         (unsigned)info.host_layouts, (unsigned)info.device_layouts);
}

/* weight_read(capsule, q_dst, s_dst): the host copy's fp8 codes [n, k] and its scales as row-major fp32. */
static PyObject *py_weight_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *q_dst, *s_dst;
    if (want_args("weight_read", nargs, 3) || arg_ptr(args[1], &q_dst) || arg_ptr(args[2], &s_dst)) return NULL;
    bfp8_weight *w = arg_weight(args[0]);
    if (!w) return NULL;
    bfp8_weight_info info;
    bfp8_status st = bfp8_weight_info_get(w, &info);
    const uint8_t *q = NULL;
    bfp8_scales held, dst;
    if (st == BFP8_OK) st = bfp8_weight_view(w, BFP8_DEVICE_CPU, first_layout(info.host_layouts), &q, &held);
    /* A packed UE8M0 copy converts to fp32 row-major like any other layout. */
    if (st == BFP8_OK)
        st = bfp8_scales_init(&dst, held.format, BFP8_LAYOUT_ROW_MAJOR, held.rows, held.kblocks, s_dst);
    if (st == BFP8_OK) {
        if (q_dst && info.n > 0 && info.k > 0) memcpy(q_dst, q, (size_t)(info.n * info.k));
        st = bfp8_scales_convert(&held, &dst);
    }
    if (st != BFP8_OK) return raise_status(st, "weight");
    Py_RETURN_NONE;
}

/* The nine arguments of a linear call from args[0] on (x, x_dtype, m, bias, bias_dtype, y, y_dtype, device, stream):
 * linear's and tp_linear's. */
static int arg_linear_args(PyObject *const *args, bfp8_linear_args *out) {
    void *x, *bias, *y, *stream;
    int64_t m;
    int x_dtype, bias_dtype, y_dtype, device;
    if (arg_ptr(args[0], &x) || arg_int(args[1], &x_dtype) || arg_i64(args[2], &m) || arg_ptr(args[3], &bias) ||
        arg_int(args[4], &bias_dtype) || arg_ptr(args[5], &y) || arg_int(args[6], &y_dtype) ||
        arg_int(args[7], &device) || arg_ptr(args[8], &stream))
        return -1;
    *out = (bfp8_linear_args){
        .x = x, .x_dtype = (bfp8_dtype)x_dtype, .m = m,
        .bias = bias, .bias_dtype = (bfp8_dtype)bias_dtype,
        .y = y, .y_dtype = (bfp8_dtype)y_dtype,
        .device = (bfp8_device)device, .stream = stream,
    };
    return 0;
}

/* linear(capsule, x, x_dtype, m, bias, bias_dtype, y, y_dtype, device, stream) -> fallback count */
static PyObject *py_linear(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    bfp8_linear_args la;
    if (want_args("linear", nargs, 10) || arg_linear_args(args + 1, &la)) return NULL;
    bfp8_weight *w = arg_weight(args[0]);
    if (!w) return NULL;
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    bfp8_status st;
    Py_BEGIN_ALLOW_THREADS
    st = bfp8_linear(d, w, &la);
    Py_END_ALLOW_THREADS
    if (st != BFP8_OK) return raise_status(st, "linear");
    return fallback_count(d);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Tensor parallelism (include/blockfp8_tp.h). A shard crosses into Python as its plan's inputs (n, k, mode, ranks,
 * rank, flags) and is planned again here, so no struct layout is copied; the plan goes back as a tuple.
 * ------------------------------------------------------------------------------------------------------------- */
/* args[0..5] = (n, k, mode, ranks, rank, flags) -> bfp8_shard_plan, or the exception carrying its refusal. */
static int arg_shard(PyObject *const *args, bfp8_shard *s) {
    int64_t n, k;
    int mode, ranks, rank, flags;
    if (arg_i64(args[0], &n) || arg_i64(args[1], &k) || arg_int(args[2], &mode) || arg_int(args[3], &ranks) ||
        arg_int(args[4], &rank) || arg_int(args[5], &flags))
        return -1;
    bfp8_status st = bfp8_shard_plan(n, k, (bfp8_tp_mode)mode, ranks, rank, (unsigned)flags, s);
    if (st != BFP8_OK) {
        raise_status(st, "cannot shard");
        return -1;
    }
    return 0;
}

/* (n, k, begin, end, lead, block_begin, n_local, k_local) */
static PyObject *plan_tuple(const bfp8_shard *s) {
    return Py_BuildValue("(LLLLLLLL)", (long long)s->n, (long long)s->k, (long long)s->begin, (long long)s->end,
                         (long long)s->lead, (long long)s->block_begin, (long long)s->n_local, (long long)s->k_local);
}

/* tp_mode_parse(name) -> mode */
static PyObject *py_tp_mode_parse(PyObject *self, PyObject *arg) {
    const char *name;
    if (arg_str(arg, &name)) return NULL;
    bfp8_tp_mode mode;
    bfp8_status st = bfp8_tp_mode_parse(name ? name : "None", &mode);
    if (st != BFP8_OK) return raise_status(st, "tensor parallel");
    return PyLong_FromLong((long)mode);
}

/* shard_plan(n, k, mode, ranks, rank, flags) -> plan */
static PyObject *py_shard_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    bfp8_shard s;
    if (want_args("shard_plan", nargs, 6) || arg_shard(args, &s)) return NULL;
    return plan_tuple(&s);
}

/* weight_shard(n, k, mode, ranks, rank, flags, q, s, s_format, s_layout) -> (capsule, plan): the rank's local weight
 * from the whole one, q [n, k] and its scales in host memory (bfp8_weight_shard reads only the slice). */
static PyObject *py_weight_shard(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    bfp8_shard sh;
    void *q, *s;
    int fmt, layout;
    if (want_args("weight_shard", nargs, 10) || arg_shard(args, &sh) || arg_ptr(args[6], &q) ||
        arg_ptr(args[7], &s) || arg_int(args[8], &fmt) || arg_int(args[9], &layout))
        return NULL;
    bfp8_scales scales;
    bfp8_weight *w = NULL;
    bfp8_status st = bfp8_scales_init(&scales, (bfp8_scale_format)fmt, (bfp8_scale_layout)layout,
                                      ceil_div(sh.n, BFP8_BLOCK), ceil_div(sh.k, BFP8_BLOCK), s);
    if (st == BFP8_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = bfp8_weight_shard(q, &scales, &sh, &w);
        Py_END_ALLOW_THREADS
    }
    if (st != BFP8_OK) return raise_status(st, "cannot shard");
    PyObject *c = weight_capsule(w);
    return c ? Py_BuildValue("(NN)", c, plan_tuple(&sh)) : NULL;
}

/* weight_load_shard(path, name, mode, ranks, rank, flags) -> (capsule, plan): plans from the tensor's shape and reads
 * only the rank's bytes of NAME and NAME_scale_inv. */
static PyObject *py_weight_load_shard(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *path, *name;
    int mode, ranks, rank, flags;
    if (want_args("weight_load_shard", nargs, 6) || arg_str(args[0], &path) || arg_str(args[1], &name) ||
        arg_int(args[2], &mode) || arg_int(args[3], &ranks) || arg_int(args[4], &rank) || arg_int(args[5], &flags))
        return NULL;
    if (!path || !name) {
        PyErr_SetString(PyExc_TypeError, "weight_load_shard: path and name are required");
        return NULL;
    }
    bfp8_safetensors *f = NULL;
    bfp8_weight *w = NULL;
    bfp8_shard sh;
    bfp8_status st;
    Py_BEGIN_ALLOW_THREADS
    st = bfp8_safetensors_open(path, &f);
    if (st == BFP8_OK)
        st = bfp8_weight_load_shard(f, name, NULL, (bfp8_tp_mode)mode, ranks, rank, (unsigned)flags, &sh, &w);
    bfp8_safetensors_close(f);
    Py_END_ALLOW_THREADS
    if (st != BFP8_OK) return raise_status(st, path);
    PyObject *c = weight_capsule(w);
    return c ? Py_BuildValue("(NN)", c, plan_tuple(&sh)) : NULL;
}

/* tp_traffic(n, k, mode, ranks, rank, flags, m, y_dtype) -> (count, dtype, bytes): what the collective moves. */
static PyObject *py_tp_traffic(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    bfp8_shard sh;
    int64_t m;
    int y_dtype;
    if (want_args("tp_traffic", nargs, 8) || arg_shard(args, &sh) || arg_i64(args[6], &m) ||
        arg_int(args[7], &y_dtype))
        return NULL;
    bfp8_tp_traffic t;
    bfp8_status st = bfp8_tp_traffic_get(&sh, m, (bfp8_dtype)y_dtype, &t);
    if (st != BFP8_OK) return raise_status(st, "tensor parallel");
    return Py_BuildValue("(LiL)", (long long)t.count, (int)t.dtype, (long long)t.bytes);
}

/* tp_linear(n, k, mode, ranks, rank, flags, capsule, x, x_dtype, m, bias, bias_dtype, y, y_dtype, device, stream,
 *           nccl_comm) -> fallback count. nccl_comm None: bfp8_tp_linear_local (the rank's share, no
 *           communication); an address: bfp8_tp_linear on that ncclComm_t. */
static PyObject *py_tp_linear(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    bfp8_shard sh;
    bfp8_linear_args la;
    void *comm;
    if (want_args("tp_linear", nargs, 17) || arg_shard(args, &sh) || arg_linear_args(args + 7, &la) ||
        arg_ptr(args[16], &comm))
        return NULL;
    bfp8_weight *w = arg_weight(args[6]);
    if (!w) return NULL;
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    bfp8_status st;
    Py_BEGIN_ALLOW_THREADS
    st = comm ? bfp8_tp_linear(d, w, &sh, &la, comm) : bfp8_tp_linear_local(d, w, &sh, &la);
    Py_END_ALLOW_THREADS
    if (st != BFP8_OK) return raise_status(st, "tensor-parallel linear");
    return fallback_count(d);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Dispatch: policy, stats, explain
 * ------------------------------------------------------------------------------------------------------------- */
static PyObject *py_set_policy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int policy;
    const char *name;
    if (want_args("set_policy", nargs, 2) || arg_int(args[0], &policy) || arg_str(args[1], &name)) return NULL;
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    bfp8_status st = bfp8_dispatcher_set_policy(d, (bfp8_policy)policy, name);
    if (st != BFP8_OK) return raise_status(st, "policy");
    Py_RETURN_NONE;
}

static PyObject *py_fallback_count(PyObject *self, PyObject *unused) {
    bfp8_dispatcher *d = dispatcher();
    return d ? fallback_count(d) : NULL;
}

/* stats() -> ({backend: calls}, [(preferred, chosen, reason, count)], non-finite inputs) */
static PyObject *py_stats(PyObject *self, PyObject *unused) {
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    PyObject *calls = PyDict_New(), *fallbacks = PyList_New(0);
    if (!calls || !fallbacks) goto fail;
    for (size_t i = 0; i < bfp8_dispatcher_count(d); i++) {
        const char *name = bfp8_dispatcher_at(d, i)->name;
        PyObject *v = PyLong_FromUnsignedLongLong(bfp8_dispatcher_calls(d, name));
        if (!v || PyDict_SetItemString(calls, name, v)) {
            Py_XDECREF(v);
            goto fail;
        }
        Py_DECREF(v);
    }
    for (size_t i = 0; i < bfp8_dispatcher_fallback_count(d); i++) {
        bfp8_fallback_stat f;
        if (bfp8_dispatcher_fallback_at(d, i, &f) != BFP8_OK) break; /* reset by another thread meanwhile */
        PyObject *t = Py_BuildValue("(sssK)", f.preferred, f.chosen, f.reason, (unsigned long long)f.count);
        if (!t || PyList_Append(fallbacks, t)) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    return Py_BuildValue("(NNK)", calls, fallbacks, (unsigned long long)bfp8_dispatcher_nonfinite_inputs(d));
fail:
    Py_XDECREF(calls);
    Py_XDECREF(fallbacks);
    return NULL;
}

static PyObject *py_reset_stats(PyObject *self, PyObject *unused) {
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    bfp8_dispatcher_reset_stats(d);
    Py_RETURN_NONE;
}

/* backends() -> [(name, summary, device, min_arch, max_arch, out_dtypes, scale_formats, a_layouts, b_layouts,
 *                 bias_dtypes, min_k, m_multiple, pads_m, n_multiple, k_multiple, max_m, max_n, max_k, priority)]
 * unavailable() -> [(name, why)] */
static PyObject *py_backends(PyObject *self, PyObject *unused) {
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    PyObject *out = PyList_New(0);
    for (size_t i = 0; out && i < bfp8_dispatcher_count(d); i++) {
        const bfp8_backend *b = bfp8_dispatcher_at(d, i);
        const bfp8_caps *c = &b->caps;
        PyObject *t = Py_BuildValue("(ssiiiIIIIILLOLLLLLi)", b->name, b->summary ? b->summary : "", (int)c->device,
                                    c->min_arch, c->max_arch, c->out_dtypes, c->scale_formats, c->a_layouts,
                                    c->b_layouts, c->bias_dtypes, (long long)c->min_k, (long long)c->m_multiple,
                                    c->pads_m ? Py_True : Py_False, (long long)c->n_multiple,
                                    (long long)c->k_multiple, (long long)c->max_m, (long long)c->max_n,
                                    (long long)c->max_k, c->priority);
        if (!t || PyList_Append(out, t)) Py_CLEAR(out);
        Py_XDECREF(t);
    }
    return out;
}

static PyObject *py_unavailable(PyObject *self, PyObject *unused) {
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;
    PyObject *out = PyList_New(0);
    for (size_t i = 0; out && i < bfp8_dispatcher_unavailable_count(d); i++) {
        const char *name, *why;
        if (bfp8_dispatcher_unavailable_at(d, i, &name, &why) != BFP8_OK) break;
        PyObject *t = Py_BuildValue("(ss)", name, why);
        if (!t || PyList_Append(out, t)) Py_CLEAR(out);
        Py_XDECREF(t);
    }
    return out;
}

/* A problem from explain's arguments: (device, arch (-1: current), m, n, k, out_dtype, scale_format, a_layouts,
 * b_layouts, has_bias, bias_dtype, act_from_prior_kernel, card (str, or None: the current device's with its arch,
 * none with a given arch)). The card's text lives as long as the argument. */
static int arg_problem(PyObject *const *args, bfp8_problem *p) {
    int device, arch, out_dtype, fmt, has_bias, bias_dtype, prior;
    int64_t m, n, k, a_set, b_set;
    if (arg_int(args[0], &device) || arg_int(args[1], &arch) || arg_i64(args[2], &m) || arg_i64(args[3], &n) ||
        arg_i64(args[4], &k) || arg_int(args[5], &out_dtype) || arg_int(args[6], &fmt) || arg_i64(args[7], &a_set) ||
        arg_i64(args[8], &b_set) || arg_int(args[9], &has_bias) || arg_int(args[10], &bias_dtype) ||
        arg_int(args[11], &prior))
        return -1;
    const char *card = arch < 0 && device == BFP8_DEVICE_CUDA ? bfp8_cuda_card() : NULL;
    if (args[12] != Py_None) {
        card = PyUnicode_Check(args[12]) ? PyUnicode_AsUTF8(args[12]) : NULL;
        if (!card) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "card must be a str or None");
            return -1;
        }
    }
    if (arch < 0) arch = device == BFP8_DEVICE_CUDA ? bfp8_cuda_arch() : 0;
    *p = (bfp8_problem){
        .device = (bfp8_device)device, .arch = arch, .m = m, .n = n, .k = k,
        .out_dtype = (bfp8_dtype)out_dtype, .scale_format = (bfp8_scale_format)fmt,
        .a_layouts = (uint32_t)a_set, .b_layouts = (uint32_t)b_set,
        .has_bias = has_bias != 0, .bias_dtype = has_bias ? (bfp8_dtype)bias_dtype : BFP8_DTYPE_F32,
        .act_from_prior_kernel = prior != 0, .card = card,
    };
    return 0;
}

/* explain(problem...) -> (text, arch, card or None, [(name, ok, reason, priority)] in registration order, choice or
 *                          None, preferred or None, fallback, reason, error or None)
 * The text is bfp8_dispatcher_explain's; the rest is the same table as data. */
static PyObject *py_explain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    bfp8_problem p;
    if (want_args("explain", nargs, 13) || arg_problem(args, &p)) return NULL;
    bfp8_dispatcher *d = dispatcher();
    if (!d) return NULL;

    char *text = NULL;
    size_t text_len = 0;
    FILE *mem = open_memstream(&text, &text_len);
    if (!mem) return PyErr_NoMemory();
    bfp8_status st = bfp8_dispatcher_explain(d, &p, mem);
    fclose(mem);
    if (st != BFP8_OK && st != BFP8_ERR_UNSUPPORTED && st != BFP8_ERR_NOT_FOUND) {
        free(text);
        return raise_status(st, "explain");
    }

    PyObject *rows = PyList_New(0);
    for (size_t i = 0; rows && i < bfp8_dispatcher_count(d); i++) {
        const bfp8_backend *b = bfp8_dispatcher_at(d, i);
        char why[BFP8_REASON_MAX];
        bool ok = bfp8_backend_check(b, &p, why, sizeof why);
        int prio = b->priority_for ? b->priority_for(b, &p) : b->caps.priority;
        PyObject *t = Py_BuildValue("(sOsi)", b->name, ok ? Py_True : Py_False, ok ? "" : why, prio);
        if (!t || PyList_Append(rows, t)) Py_CLEAR(rows);
        Py_XDECREF(t);
    }
    if (!rows) {
        free(text);
        return NULL;
    }
    bfp8_decision dec;
    st = bfp8_dispatcher_select(d, &p, &dec);
    PyObject *out = Py_BuildValue(
        "(s#izNzzOsz)", text ? text : "", (Py_ssize_t)(text ? text_len : 0), p.arch, p.card, rows,
        st == BFP8_OK ? dec.backend->name : NULL, dec.preferred ? dec.preferred->name : NULL,
        dec.fallback ? Py_True : Py_False, dec.reason, st == BFP8_OK ? NULL : bfp8_last_error());
    free(text);
    return out;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Module
 * ------------------------------------------------------------------------------------------------------------- */
#define FAST(name) {#name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL, NULL}
static PyMethodDef methods[] = {
    {"cuda_available", py_cuda_available, METH_NOARGS, "(available, why not)"},
    {"layouts_for_format", py_layouts_for_format, METH_O, "bit set of the layouts a scale format can be stored in"},
    FAST(scales_bytes),
    {"address", py_address, METH_O, "the address of an array's first element (buffer protocol)"},
    {"set_num_threads", py_set_num_threads, METH_O, NULL},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, NULL},
    {"check_env", py_check_env, METH_NOARGS, NULL},
    FAST(quantize_act),
    FAST(quantize_weight),
    FAST(layouts_of),
    FAST(gemm),
    FAST(linear_dyn),
    FAST(linear_scratch_bytes),
    FAST(grouped_gemm),
    FAST(use_torch),
    FAST(fast_gemm_out),
    FAST(fast_linear_dyn),
    FAST(fast_grouped),
    FAST(weight_create),
    FAST(weight_quantize),
    FAST(weight_load),
    FAST(safetensors_read),
    FAST(weight_prepare),
    {"weight_info", py_weight_info, METH_O, NULL},
    FAST(weight_read),
    FAST(linear),
    {"tp_mode_parse", py_tp_mode_parse, METH_O, NULL},
    FAST(shard_plan),
    FAST(weight_shard),
    FAST(weight_load_shard),
    FAST(tp_traffic),
    FAST(tp_linear),
    FAST(set_policy),
    {"fallback_count", py_fallback_count, METH_NOARGS, NULL},
    {"stats", py_stats, METH_NOARGS, NULL},
    {"reset_stats", py_reset_stats, METH_NOARGS, NULL},
    {"backends", py_backends, METH_NOARGS, NULL},
    {"unavailable", py_unavailable, METH_NOARGS, NULL},
    FAST(explain),
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "blockfp8._native", "libblockfp8 (include/blockfp8.h) for the blockfp8 package.", -1,
    methods,
};

static int add_int(PyObject *m, const char *name, long v) { return PyModule_AddIntConstant(m, name, v); }

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Error = PyErr_NewExceptionWithDoc("blockfp8.Error", "A libblockfp8 call failed; .status names the bfp8_status.",
                                      PyExc_RuntimeError, NULL);
    if (!Error || PyModule_AddObjectRef(m, "Error", Error)) goto fail;
    /* Each status also derives from the builtin exception a Python user would catch for it. */
    static const struct {
        bfp8_status st;
        const char *name;
        PyObject **builtin;
    } kinds[] = {
        {BFP8_ERR_INVALID_ARGUMENT, "InvalidArgumentError", &PyExc_ValueError},
        {BFP8_ERR_UNSUPPORTED, "UnsupportedError", NULL},
        {BFP8_ERR_NOT_FOUND, "NotFoundError", &PyExc_LookupError},
        {BFP8_ERR_OUT_OF_MEMORY, "OutOfMemoryError", &PyExc_MemoryError},
        {BFP8_ERR_IO, "FileError", &PyExc_OSError},
        {BFP8_ERR_FORMAT, "FormatError", &PyExc_ValueError},
        {BFP8_ERR_DEVICE, "DeviceError", NULL},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char qualified[64];
        snprintf(qualified, sizeof qualified, "blockfp8.%s", kinds[i].name);
        PyObject *bases = kinds[i].builtin ? PyTuple_Pack(2, Error, *kinds[i].builtin) : PyTuple_Pack(1, Error);
        if (!bases) goto fail;
        PyObject *cls = PyErr_NewException(qualified, bases, NULL);
        Py_DECREF(bases);
        if (!cls || PyModule_AddObjectRef(m, kinds[i].name, cls)) {
            Py_XDECREF(cls);
            goto fail;
        }
        status_errors[kinds[i].st] = cls; /* the module keeps a reference too */
    }
    if (PyModule_AddStringConstant(m, "VERSION", BFP8_VERSION) || add_int(m, "BLOCK", BFP8_BLOCK) ||
        add_int(m, "DTYPE_F32", BFP8_DTYPE_F32) || add_int(m, "DTYPE_BF16", BFP8_DTYPE_BF16) ||
        add_int(m, "DTYPE_F16", BFP8_DTYPE_F16) || add_int(m, "DTYPE_E4M3", BFP8_DTYPE_E4M3) ||
        add_int(m, "DTYPE_I32", BFP8_DTYPE_I32) || add_int(m, "SCALE_FP32", BFP8_SCALE_FP32) ||
        add_int(m, "SCALE_UE8M0", BFP8_SCALE_UE8M0) || add_int(m, "LAYOUT_ROW_MAJOR", BFP8_LAYOUT_ROW_MAJOR) ||
        add_int(m, "LAYOUT_MN_MAJOR", BFP8_LAYOUT_MN_MAJOR) ||
        add_int(m, "LAYOUT_MN_MAJOR_ALIGNED", BFP8_LAYOUT_MN_MAJOR_ALIGNED) ||
        add_int(m, "LAYOUT_PACKED_UE8M0", BFP8_LAYOUT_PACKED_UE8M0) || add_int(m, "LAYOUT_COUNT", BFP8_LAYOUT_COUNT) ||
        add_int(m, "DEVICE_CPU", BFP8_DEVICE_CPU) || add_int(m, "DEVICE_CUDA", BFP8_DEVICE_CUDA) ||
        add_int(m, "GROUPED_CONTIGUOUS", BFP8_GROUPED_CONTIGUOUS) ||
        add_int(m, "GROUPED_MASKED", BFP8_GROUPED_MASKED) ||
        add_int(m, "POLICY_AUTO", BFP8_POLICY_AUTO) || add_int(m, "POLICY_PREFER", BFP8_POLICY_PREFER) ||
        add_int(m, "POLICY_STRICT", BFP8_POLICY_STRICT) || add_int(m, "TP_COLUMN", BFP8_TP_COLUMN) ||
        add_int(m, "TP_ROW", BFP8_TP_ROW) || add_int(m, "SHARD_SHARE_BLOCKS", BFP8_SHARD_SHARE_BLOCKS))
        goto fail;
    /* Names of the enums, from the library. */
    PyObject *names = Py_BuildValue("{s[ssss]s[ssss]s[ss]s[ss]}", "layouts",
                                    bfp8_scale_layout_name(BFP8_LAYOUT_ROW_MAJOR),
                                    bfp8_scale_layout_name(BFP8_LAYOUT_MN_MAJOR),
                                    bfp8_scale_layout_name(BFP8_LAYOUT_MN_MAJOR_ALIGNED),
                                    bfp8_scale_layout_name(BFP8_LAYOUT_PACKED_UE8M0), "dtypes",
                                    bfp8_dtype_name(BFP8_DTYPE_F32), bfp8_dtype_name(BFP8_DTYPE_BF16),
                                    bfp8_dtype_name(BFP8_DTYPE_F16), bfp8_dtype_name(BFP8_DTYPE_E4M3), "formats",
                                    bfp8_scale_format_name(BFP8_SCALE_FP32), bfp8_scale_format_name(BFP8_SCALE_UE8M0),
                                    "devices", bfp8_device_name(BFP8_DEVICE_CPU), bfp8_device_name(BFP8_DEVICE_CUDA));
    if (!names || PyModule_AddObject(m, "NAMES", names)) {
        Py_XDECREF(names);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
