/* safetensors reading and writing (the checkpoint format of Hugging Face and DeepSeek).
 *
 * Layout: a little-endian u64 header length N, N bytes of UTF-8 JSON, then the data section. The JSON object maps
 * each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets relative to the data
 * section) plus an optional "__metadata__" object of strings.
 *
 * What the reader accepts is what the Hugging Face reference reader accepts, with these differences stated:
 * - the header must start with '{' (so a byte order mark or leading whitespace is an error) and may end in
 *   whitespace padding; it must be UTF-8 without raw control characters;
 * - the tensors must cover the data section exactly: sorted by offset, each starts where the previous one ends,
 *   the first at 0 and the last at the end of the file (no gap, no overlap, no trailing byte), as the reference
 *   reader requires. An empty tensor therefore sits on a boundary;
 * - no object anywhere in the header may hold a key twice (cJSON keeps both copies; the reference reader refuses a
 *   field twice in a tensor entry and keeps the last of two tensors of one name, which hides data: we refuse);
 * - objects and arrays nest at most ST_MAX_DEPTH deep (serde_json's limit);
 * - a string holding an escaped NUL (\u0000) is an error: cJSON strings are C strings, so "F32\u0000junk" would
 *   read as "F32" and a name would be cut (the reference reader accepts NULs in names and metadata);
 * - tensor names hold no control character, escaped or not (they are printed; the reference reader accepts them);
 * - only the dtypes blockfp8 computes with are accepted (F8_E4M3, F8_E8M0, BF16, F16, F32, I32); any other is FORMAT;
 * - "__metadata__" is validated (an object of strings) but neither exposed nor written;
 * - unknown keys inside a tensor entry are ignored, as other readers do;
 * - integers in the header must be exact in a double (<= 2^53), since cJSON numbers are doubles (a literal such as
 *   9007199254740993 rounds to 2^53 while parsing and is read as 2^53);
 * - data bytes are taken as they are: the host is assumed little-endian, like the format;
 * - cJSON records its last parse error in a global, so parsing from several threads at once races on that global
 *   (harmless: we never read it).
 *
 * bfp8_safetensors_open maps the file read-only (MAP_PRIVATE) and reads only the header into memory: opening a
 * 4 GB shard costs no copy, and a tensor's pages are read when it is used. Sizes are validated against the file's
 * size before any data is touched, so a file whose header claims more data than it holds is FORMAT. A file that
 * another process truncates while it is open can still fault (SIGBUS) when the lost pages are read, as with every
 * mapped reader. Tensors whose offset is not a multiple of their element size are copied so that data is aligned.
 */
#include "internal.h"

#include <cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ST_MAX_HEADER_BYTES ((uint64_t)100 * 1000 * 1000) /* refuse bigger headers before allocating */
#define ST_MAX_NAME_BYTES 1024
#define ST_MAX_EXACT_INT ((int64_t)1 << 53) /* largest integer a JSON number (a double) holds exactly */
#define ST_MAX_DEPTH 128                    /* nesting of objects and arrays (serde_json's recursion limit) */
#define ST_METADATA_KEY "__metadata__"
#define ST_DATA_ALIGN 8 /* the writer pads the header so the data section starts at a multiple of this */

struct bfp8_safetensors {
    size_t count;
    bfp8_tensor *tensors; /* in header order */
    size_t *by_name;      /* tensor indices sorted by name, for find() */
    void **copies;        /* per tensor: an aligned copy of misaligned data, else NULL */
    unsigned char *block; /* parse(): the bytes, shifted so that the data section starts 8-aligned */
    void *map;            /* open(): the whole file, mapped read-only */
    size_t map_size;
};

static const struct {
    const char *name;
    bfp8_dtype dtype;
} st_dtypes[] = {
    {"F8_E4M3", BFP8_DTYPE_E4M3}, {"F8_E8M0", BFP8_DTYPE_UE8M0}, {"BF16", BFP8_DTYPE_BF16},
    {"F16", BFP8_DTYPE_F16},      {"F32", BFP8_DTYPE_F32},       {"I32", BFP8_DTYPE_I32},
};

static bool st_dtype_from_name(const char *name, bfp8_dtype *out) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(name, st_dtypes[i].name) == 0) {
            *out = st_dtypes[i].dtype;
            return true;
        }
    return false;
}

static const char *st_dtype_to_name(bfp8_dtype dtype) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == dtype) return st_dtypes[i].name;
    return NULL;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when it is not one (overlong, surrogate, > U+10FFFF). */
static size_t st_utf8_sequence(const unsigned char *p, size_t avail) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned min, cp;
    if ((c & 0xE0) == 0xC0) len = 2, min = 0x80, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, min = 0x800, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, min = 0x10000, cp = c & 0x07;
    else return 0;
    if (avail < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* Byte offset of the first invalid UTF-8 sequence in p[0, n), or n when all valid. */
static size_t st_utf8_invalid_at(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t len = st_utf8_sequence(p + i, n - i);
        if (len == 0) return i;
        i += len;
    }
    return n;
}

static bool st_is_json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Names must be non-empty, at most ST_MAX_NAME_BYTES and UTF-8 (so that a written file reads back), and hold no
 * control character (an escaped "\u001b" in the JSON is one): names are printed, and no checkpoint needs one. */
static bfp8_status st_check_name(const char *name, bfp8_status status, const char *context) {
    size_t len = strlen(name);
    if (len == 0) return bfp8_fail(status, "%s: a tensor has an empty name", context);
    if (len > ST_MAX_NAME_BYTES)
        return bfp8_fail(status, "%s: tensor name '%.64s...' is %zu bytes (limit %d)", context, name, len,
                         ST_MAX_NAME_BYTES);
    if (st_utf8_invalid_at((const unsigned char *)name, len) < len)
        return bfp8_fail(status, "%s: tensor name '%.64s' is not valid UTF-8", context, name);
    for (size_t i = 0; i < len; i++)
        if (bfp8_is_control_byte((unsigned char)name[i]))
            return bfp8_fail(status, "%s: tensor name '%.64s' holds a control character (0x%02x at byte %zu)", context,
                             name, (unsigned)(unsigned char)name[i], i);
    return BFP8_OK;
}

/* --- strict JSON ------------------------------------------------------------------------------------------------ */

/* The raw text, before cJSON sees it: UTF-8 without raw control characters or a byte order mark, nesting at most
 * ST_MAX_DEPTH deep, no escaped NUL. The scan follows strings and escapes as a tokenizer does. */
static bfp8_status st_check_json_text(const unsigned char *p, size_t n, const char *what) {
    size_t bad = st_utf8_invalid_at(p, n);
    if (bad < n) return bfp8_fail(BFP8_ERR_FORMAT, "%s: byte %zu is not valid UTF-8 (0x%02x)", what, bad, p[bad]);
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 && !st_is_json_space(p[i]))
            return bfp8_fail(BFP8_ERR_FORMAT, "%s: byte %zu is a control character (0x%02x)", what, i, p[i]);
    if (n >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF)
        return bfp8_fail(BFP8_ERR_FORMAT, "%s: starts with a UTF-8 byte order mark (the JSON must start with '{')",
                         what);
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (in_string) {
            if (c == '\\') {
                if (i + 5 < n && p[i + 1] == 'u' && memcmp(p + i + 2, "0000", 4) == 0)
                    return bfp8_fail(BFP8_ERR_FORMAT,
                                     "%s: byte %zu: a string holds an escaped NUL (\\u0000), which names and dtypes "
                                     "cannot hold here", what, i);
                i++; /* the escaped character cannot end the string */
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > ST_MAX_DEPTH)
                return bfp8_fail(BFP8_ERR_FORMAT, "%s: objects and arrays nest more than %d deep (at byte %zu)",
                                 what, ST_MAX_DEPTH, i);
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return BFP8_OK;
}

/* One step of the path from the root to an object, for messages ("a"."extra"[2]). */
typedef struct st_json_path {
    const struct st_json_path *parent;
    const char *key; /* NULL: an array element */
    int index;
} st_json_path;

static void st_format_path(const st_json_path *p, char *buf, size_t size) {
    if (!p) {
        snprintf(buf, size, "at the top level");
        return;
    }
    const st_json_path *steps[ST_MAX_DEPTH + 2];
    int n = 0;
    for (; p && n < ST_MAX_DEPTH + 2; p = p->parent) steps[n++] = p;
    size_t used = (size_t)snprintf(buf, size, "in ");
    while (n-- > 0 && used < size) {
        int w = steps[n]->key ? snprintf(buf + used, size - used, "%s\"%.100s\"", used > 3 ? "." : "", steps[n]->key)
                              : snprintf(buf + used, size - used, "[%d]", steps[n]->index);
        if (w < 0) break;
        used += (size_t)w;
    }
}

static int st_compare_keys(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* No object in the tree under `item` holds a key twice. Recursion depth is bounded by st_check_json_text. */
static bfp8_status st_check_duplicate_keys(const cJSON *item, const st_json_path *path, const char *what) {
    if (!cJSON_IsObject(item) && !cJSON_IsArray(item)) return BFP8_OK;
    size_t n = 0;
    for (const cJSON *c = item->child; c; c = c->next) n++;
    if (cJSON_IsObject(item) && n > 1) {
        const cJSON **keys = malloc(n * sizeof *keys);
        if (!keys) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: no memory to check %zu keys", what, n);
        size_t i = 0;
        for (const cJSON *c = item->child; c; c = c->next) keys[i++] = c;
        qsort(keys, n, sizeof *keys, st_compare_keys);
        for (i = 1; i < n; i++)
            if (strcmp(keys[i - 1]->string, keys[i]->string) == 0) {
                char where[512];
                st_format_path(path, where, sizeof where);
                bfp8_status st = bfp8_fail(BFP8_ERR_FORMAT, "%s: key '%.200s' appears twice %s", what,
                                           keys[i]->string, where);
                free(keys);
                return st;
            }
        free(keys);
    }
    int index = 0;
    for (const cJSON *c = item->child; c; c = c->next, index++) {
        st_json_path step = {.parent = path, .key = cJSON_IsObject(item) ? c->string : NULL, .index = index};
        BFP8_TRY(st_check_duplicate_keys(c, &step, what));
    }
    return BFP8_OK;
}

bfp8_status bfp8_json_parse_object(const char *text, size_t len, const char *what, struct cJSON **out) {
    *out = NULL;
    BFP8_TRY(st_check_json_text((const unsigned char *)text, len, what));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - text) : 0;
        return bfp8_fail(BFP8_ERR_FORMAT, "%s: not valid JSON (error near byte %zu of %zu)", what, at, len);
    }
    bfp8_status st = BFP8_OK;
    /* Only whitespace (a writer's padding) may follow the value. */
    for (const char *p = end; p < text + len && st == BFP8_OK; p++)
        if (!st_is_json_space((unsigned char)*p))
            st = bfp8_fail(BFP8_ERR_FORMAT, "%s: trailing bytes after the JSON at byte %zu", what, (size_t)(p - text));
    if (st == BFP8_OK && !cJSON_IsObject(root)) st = bfp8_fail(BFP8_ERR_FORMAT, "%s: not a JSON object", what);
    if (st == BFP8_OK && text[0] != '{')
        st = bfp8_fail(BFP8_ERR_FORMAT, "%s: must start with '{' (byte 0 is 0x%02x)", what, (unsigned char)text[0]);
    if (st == BFP8_OK) st = st_check_duplicate_keys(root, NULL, what);
    if (st != BFP8_OK) {
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return BFP8_OK;
}

/* --- names: duplicates and lookup ------------------------------------------------------------------------------ */

/* Sorts indices by name (a merge sort: qsort has no context argument and a global would not be thread-safe). */
static void st_merge_sort_names(const bfp8_tensor *t, size_t *idx, size_t *tmp, size_t n) {
    if (n < 2) return;
    size_t half = n / 2;
    st_merge_sort_names(t, idx, tmp, half);
    st_merge_sort_names(t, idx + half, tmp, n - half);
    size_t i = 0, j = half, k = 0;
    while (i < half && j < n) tmp[k++] = strcmp(t[idx[j]].name, t[idx[i]].name) < 0 ? idx[j++] : idx[i++];
    while (i < half) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* Fills order[] with the indices of tensors sorted by name; fails with `status` on a duplicate name. */
static bfp8_status st_sort_names(const bfp8_tensor *tensors, size_t count, size_t *order, bfp8_status status) {
    size_t *tmp = malloc((count ? count : 1) * sizeof *tmp);
    if (!tmp) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "safetensors: no memory to index %zu names", count);
    for (size_t i = 0; i < count; i++) order[i] = i;
    st_merge_sort_names(tensors, order, tmp, count);
    free(tmp);
    for (size_t i = 1; i < count; i++)
        if (strcmp(tensors[order[i - 1]].name, tensors[order[i]].name) == 0)
            return bfp8_fail(status, "safetensors: duplicate tensor name '%.200s'", tensors[order[i]].name);
    return BFP8_OK;
}

/* --- reading ---------------------------------------------------------------------------------------------------- */

static uint64_t st_read_u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Checks the 8-byte prefix against the file size; *header_len on success. Runs before any allocation. */
static bfp8_status st_check_prefix(const unsigned char *prefix, size_t size, uint64_t *header_len) {
    if (size < 8)
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: file is %zu bytes, shorter than the 8-byte header length",
                         size);
    uint64_t n = st_read_u64le(prefix);
    /* Text where the length should be: say what the file is, since a huge length alone does not tell. */
    const char *hint = memcmp(prefix, "version ", 8) == 0 ? " (the file is text: a Git LFS pointer instead of the "
                                                            "tensors? `git lfs pull` fetches them)"
                       : prefix[0] == '{' ? " (the file is JSON, such as a model.safetensors.index.json, not "
                                            "safetensors)"
                                          : "";
    if (n > ST_MAX_HEADER_BYTES)
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: header length %llu exceeds the %llu-byte limit%s",
                         (unsigned long long)n, (unsigned long long)ST_MAX_HEADER_BYTES, hint);
    if (n > size - 8)
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: header length %llu runs past the end of the %zu-byte file",
                         (unsigned long long)n, size);
    *header_len = n;
    return BFP8_OK;
}

/* Bytes to leave before the file's first byte so that its data section (at 8 + header_len) is 8-aligned. */
static size_t st_shift_for(uint64_t header_len) { return (size_t)((ST_DATA_ALIGN - (8 + header_len) % ST_DATA_ALIGN) % ST_DATA_ALIGN); }

/* A JSON number that is an integer in [0, 2^53]. */
static bool st_json_index(const cJSON *item, int64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double d = item->valuedouble;
    if (!(d >= 0 && d <= (double)ST_MAX_EXACT_INT) || d != (double)(int64_t)d) return false;
    *out = (int64_t)d;
    return true;
}

/* The value of `key` in an entry (keys are unique: checked before); FORMAT when absent. */
static bfp8_status st_entry_field(const cJSON *entry, const char *tensor, const char *key, const cJSON **out) {
    *out = cJSON_GetObjectItemCaseSensitive(entry, key);
    if (!*out) return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s' has no \"%s\"", tensor, key);
    return BFP8_OK;
}

/* Parses one tensor entry into t (name not yet set) and its [begin, end) in the data section. */
static bfp8_status st_parse_entry(const cJSON *entry, const char *name, uint64_t data_size, bfp8_tensor *t,
                                  uint64_t *begin, uint64_t *end) {
    if (!cJSON_IsObject(entry))
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: entry '%.200s' is not an object", name);
    const cJSON *dtype, *shape, *offsets;
    BFP8_TRY(st_entry_field(entry, name, "dtype", &dtype));
    BFP8_TRY(st_entry_field(entry, name, "shape", &shape));
    BFP8_TRY(st_entry_field(entry, name, "data_offsets", &offsets));

    if (!cJSON_IsString(dtype))
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s': \"dtype\" is not a string", name);
    if (!st_dtype_from_name(dtype->valuestring, &t->dtype))
        return bfp8_fail(BFP8_ERR_FORMAT,
                         "safetensors: tensor '%.200s': dtype '%.32s' is not supported (F8_E4M3, F8_E8M0, BF16, F16, "
                         "F32, I32)", name, dtype->valuestring);

    if (!cJSON_IsArray(shape))
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s': \"shape\" is not an array", name);
    int ndim = 0;
    int64_t elems = 1;
    for (const cJSON *d = shape->child; d; d = d->next) {
        if (ndim == BFP8_MAX_DIMS)
            return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s': shape has more than %d dims", name,
                             BFP8_MAX_DIMS);
        int64_t dim;
        if (!st_json_index(d, &dim))
            return bfp8_fail(BFP8_ERR_FORMAT,
                             "safetensors: tensor '%.200s': shape dim %d is not an integer in [0, 2^53]", name, ndim);
        if (!bfp8_mul_ok(elems, dim, &elems))
            return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s': element count overflows", name);
        t->shape[ndim++] = dim;
    }
    t->ndim = ndim;
    int64_t nbytes;
    if (!bfp8_mul_ok(elems, (int64_t)bfp8_dtype_size(t->dtype), &nbytes))
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s': byte count overflows", name);

    int64_t b, e;
    if (!cJSON_IsArray(offsets) || !offsets->child || !offsets->child->next || offsets->child->next->next)
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s': \"data_offsets\" is not an array of two",
                         name);
    if (!st_json_index(offsets->child, &b) || !st_json_index(offsets->child->next, &e))
        return bfp8_fail(BFP8_ERR_FORMAT,
                         "safetensors: tensor '%.200s': data_offsets are not integers in [0, 2^53]", name);
    if (b > e)
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s': data_offsets begin %lld > end %lld", name,
                         (long long)b, (long long)e);
    if ((uint64_t)e > data_size)
        return bfp8_fail(BFP8_ERR_FORMAT,
                         "safetensors: tensor '%.200s': data_offsets end %lld is past the %llu-byte data section",
                         name, (long long)e, (unsigned long long)data_size);
    if (e - b != nbytes)
        return bfp8_fail(BFP8_ERR_FORMAT,
                         "safetensors: tensor '%.200s': %lld bytes in data_offsets, but shape and %s need %lld", name,
                         (long long)(e - b), dtype->valuestring, (long long)nbytes);
    t->nbytes = (size_t)nbytes;
    *begin = (uint64_t)b;
    *end = (uint64_t)e;
    return BFP8_OK;
}

static bfp8_status st_check_metadata(const cJSON *meta) {
    if (!cJSON_IsObject(meta)) return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: \"__metadata__\" is not an object");
    for (const cJSON *c = meta->child; c; c = c->next)
        if (!cJSON_IsString(c))
            return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: \"__metadata__\" value of '%.200s' is not a string",
                             c->string);
    return BFP8_OK;
}

typedef struct st_range {
    uint64_t begin, end;
    size_t index;
} st_range;

static int st_compare_ranges(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Sorted by offset, each tensor starts where the previous one ends, from 0 to the end of the data section. */
static bfp8_status st_check_coverage(st_range *ranges, size_t count, const bfp8_tensor *tensors, uint64_t data_size) {
    qsort(ranges, count, sizeof *ranges, st_compare_ranges);
    uint64_t at = 0;
    const st_range *prev = NULL;
    for (size_t i = 0; i < count; i++) {
        const st_range *r = &ranges[i];
        if (r->begin < at)
            return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensors '%.120s' [%llu, %llu) and '%.120s' [%llu, %llu) "
                             "overlap", tensors[prev->index].name, (unsigned long long)prev->begin,
                             (unsigned long long)prev->end, tensors[r->index].name, (unsigned long long)r->begin,
                             (unsigned long long)r->end);
        if (r->begin > at)
            return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: bytes [%llu, %llu) of the data section belong to no tensor "
                             "(a gap before '%.120s'; tensors must cover the data section exactly)",
                             (unsigned long long)at, (unsigned long long)r->begin, tensors[r->index].name);
        if (r->end > r->begin || !prev) prev = r;
        at = r->end;
    }
    if (at != data_size)
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: the data section has %llu bytes but the tensors end at %llu "
                         "(%llu trailing bytes; tensors must cover the data section exactly)",
                         (unsigned long long)data_size, (unsigned long long)at,
                         (unsigned long long)(data_size - at));
    return BFP8_OK;
}

/* Fills f's tensors from the header tree; `data` is the data section, `data_size` bytes; `empty` is an aligned
 * address that empty tensors point at (data is never NULL). */
static bfp8_status st_build(bfp8_safetensors *f, const cJSON *root, const unsigned char *data, uint64_t data_size,
                            void *empty) {
    size_t count = 0;
    for (const cJSON *c = root->child; c; c = c->next) count += strcmp(c->string, ST_METADATA_KEY) != 0;
    size_t alloc = count ? count : 1;
    f->tensors = calloc(alloc, sizeof *f->tensors);
    f->by_name = calloc(alloc, sizeof *f->by_name);
    f->copies = calloc(alloc, sizeof *f->copies);
    st_range *ranges = calloc(alloc, sizeof *ranges);
    if (!f->tensors || !f->by_name || !f->copies || !ranges) {
        free(ranges);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "safetensors: no memory for %zu tensor descriptors", count);
    }

    bfp8_status st = BFP8_OK;
    for (const cJSON *c = root->child; c && st == BFP8_OK; c = c->next) {
        if (strcmp(c->string, ST_METADATA_KEY) == 0) {
            st = st_check_metadata(c);
            continue;
        }
        st = st_check_name(c->string, BFP8_ERR_FORMAT, "safetensors");
        if (st != BFP8_OK) break;
        bfp8_tensor *t = &f->tensors[f->count];
        st = st_parse_entry(c, c->string, data_size, t, &ranges[f->count].begin, &ranges[f->count].end);
        if (st != BFP8_OK) break;
        t->name = strdup(c->string);
        if (!t->name) {
            st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "safetensors: no memory for a tensor name");
            break;
        }
        ranges[f->count].index = f->count;
        f->count++;
    }
    if (st == BFP8_OK) st = st_sort_names(f->tensors, f->count, f->by_name, BFP8_ERR_FORMAT);
    if (st == BFP8_OK) st = st_check_coverage(ranges, f->count, f->tensors, data_size);

    /* Hand out data aligned for its dtype: only offsets that are not a multiple of the element size (or a data
     * section that does not start 8-aligned in a mapped file) need a copy. */
    if (st == BFP8_OK) {
        for (size_t j = 0; j < f->count; j++) {
            bfp8_tensor *t = &f->tensors[ranges[j].index];
            const unsigned char *src = data + ranges[j].begin;
            size_t elem = bfp8_dtype_size(t->dtype);
            if (t->nbytes == 0) {
                t->data = empty;
            } else if ((uintptr_t)src % elem == 0) {
                t->data = (void *)src;
            } else {
                void *copy = malloc(t->nbytes);
                if (!copy) {
                    st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "safetensors: no memory to align tensor '%.200s' (%zu bytes)",
                                   t->name, t->nbytes);
                    break;
                }
                memcpy(copy, src, t->nbytes);
                f->copies[ranges[j].index] = copy;
                t->data = copy;
            }
        }
    }
    free(ranges);
    return st;
}

/* Parses the header text (header_len bytes) of a file object whose storage (block or map) is already set; the data
 * section follows at `data`. */
static bfp8_status st_parse_header(bfp8_safetensors *f, const unsigned char *header, uint64_t header_len,
                                   const unsigned char *data, uint64_t data_size, void *empty) {
    cJSON *root = NULL;
    BFP8_TRY(bfp8_json_parse_object((const char *)header, (size_t)header_len, "safetensors: header", &root));
    bfp8_status st = st_build(f, root, data, data_size, empty);
    cJSON_Delete(root);
    return st;
}

bfp8_status bfp8_safetensors_parse(const void *bytes, size_t size, bfp8_safetensors **out) {
    BFP8_CHECK_ARG(out != NULL, "bfp8_safetensors_parse: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(bytes != NULL || size == 0, "bfp8_safetensors_parse: bytes is NULL");
    uint64_t header_len = 0;
    BFP8_TRY(st_check_prefix(bytes, size, &header_len));
    size_t shift = st_shift_for(header_len);
    if (size > SIZE_MAX - shift)
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "safetensors: %zu bytes do not fit in memory", size);
    bfp8_safetensors *f = calloc(1, sizeof *f);
    unsigned char *block = malloc(size + shift);
    if (!f || !block) {
        free(f);
        free(block);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "safetensors: no memory for a %zu-byte copy", size);
    }
    memcpy(block + shift, bytes, size);
    f->block = block;
    const unsigned char *header = block + shift + 8;
    bfp8_status st = st_parse_header(f, header, header_len, header + header_len, size - 8 - header_len, block);
    if (st != BFP8_OK) {
        bfp8_safetensors_close(f);
        return st;
    }
    *out = f;
    return BFP8_OK;
}

/* Prefixes the current error message with the path. */
static bfp8_status st_fail_with_path(bfp8_status status, const char *path) {
    char msg[BFP8_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", bfp8_last_error());
    return bfp8_fail(status, "%s: %s", path, msg);
}

/* Reads exactly n bytes at `offset`; an error message on failure. */
static bfp8_status st_pread_all(int fd, void *buf, size_t n, uint64_t offset, const char *path) {
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, p + got, n - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return bfp8_fail(BFP8_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (r == 0)
            return bfp8_fail(BFP8_ERR_IO, "%s: read failed after %llu bytes: the file shrank while reading", path,
                             (unsigned long long)(offset + got));
        got += (size_t)r;
    }
    return BFP8_OK;
}

const char *bfp8_dangling_link_hint(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) ? " (a symbolic link whose target is missing)" : "";
}

bfp8_status bfp8_safetensors_open(const char *path, bfp8_safetensors **out) {
    BFP8_CHECK_ARG(out != NULL, "bfp8_safetensors_open: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(path != NULL, "bfp8_safetensors_open: path is NULL");
    /* O_NONBLOCK: open() of a FIFO without a writer would wait forever; it is refused below as not a regular file.
     * Regular files read the same either way. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int err = errno;
        return bfp8_fail(BFP8_ERR_IO, "%s: cannot open: %s%s", path, strerror(err), bfp8_dangling_link_hint(path));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return bfp8_fail(BFP8_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return bfp8_fail(BFP8_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: %lld bytes cannot be mapped", path, (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    unsigned char prefix[8] = {0};
    bfp8_status st = st_pread_all(fd, prefix, size < 8 ? size : 8, 0, path);
    uint64_t header_len = 0;
    if (st == BFP8_OK && (st = st_check_prefix(prefix, size, &header_len)) != BFP8_OK) st = st_fail_with_path(st, path);
    /* The header is read into memory (it is parsed and dropped); the data stays in the file, mapped. */
    unsigned char *header = NULL;
    if (st == BFP8_OK && !(header = malloc(header_len ? (size_t)header_len : 1)))
        st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: no memory for a %llu-byte header", path,
                       (unsigned long long)header_len);
    if (st == BFP8_OK) st = st_pread_all(fd, header, (size_t)header_len, 8, path);
    void *map = MAP_FAILED;
    if (st == BFP8_OK) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) st = bfp8_fail(BFP8_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
    }
    close(fd);
    bfp8_safetensors *f = NULL;
    if (st == BFP8_OK && !(f = calloc(1, sizeof *f))) {
        munmap(map, size);
        st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: no memory for the file object", path);
    }
    if (st != BFP8_OK) {
        free(header);
        return st;
    }
    f->map = map;
    f->map_size = size;
    const unsigned char *data = (const unsigned char *)map + 8 + header_len;
    st = st_parse_header(f, header, header_len, data, size - 8 - header_len, map);
    free(header);
    if (st != BFP8_OK) {
        bfp8_safetensors_close(f);
        return st_fail_with_path(st, path);
    }
    *out = f;
    return BFP8_OK;
}

size_t bfp8_safetensors_count(const bfp8_safetensors *f) { return f ? f->count : 0; }

const bfp8_tensor *bfp8_safetensors_at(const bfp8_safetensors *f, size_t index) {
    return f && index < f->count ? &f->tensors[index] : NULL;
}

const bfp8_tensor *bfp8_safetensors_find(const bfp8_safetensors *f, const char *name) {
    if (!f || !name) return NULL;
    size_t lo = 0, hi = f->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const bfp8_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

void bfp8_safetensors_close(bfp8_safetensors *f) {
    if (!f) return;
    for (size_t i = 0; i < f->count; i++) {
        free(f->tensors[i].name);
        if (f->copies) free(f->copies[i]);
    }
    free(f->tensors);
    free(f->by_name);
    free(f->copies);
    free(f->block);
    if (f->map) munmap(f->map, f->map_size);
    free(f);
}

/* --- writing ---------------------------------------------------------------------------------------------------- */

static bfp8_status st_check_write_tensor(const bfp8_tensor *t, size_t i) {
    BFP8_CHECK_ARG(t->name != NULL, "bfp8_safetensors_write: tensor %zu has a NULL name", i);
    BFP8_TRY(st_check_name(t->name, BFP8_ERR_INVALID_ARGUMENT, "bfp8_safetensors_write"));
    BFP8_CHECK_ARG(strcmp(t->name, ST_METADATA_KEY) != 0, "bfp8_safetensors_write: the name '%s' is reserved",
                   ST_METADATA_KEY);
    BFP8_CHECK_ARG((unsigned)t->dtype < BFP8_DTYPE_COUNT && st_dtype_to_name(t->dtype) != NULL,
                   "bfp8_safetensors_write: tensor '%.200s' has unknown dtype %d", t->name, (int)t->dtype);
    BFP8_CHECK_ARG(t->ndim >= 0 && t->ndim <= BFP8_MAX_DIMS,
                   "bfp8_safetensors_write: tensor '%.200s' has ndim %d (0..%d)", t->name, t->ndim, BFP8_MAX_DIMS);
    int64_t elems = 1, nbytes = 0;
    for (int d = 0; d < t->ndim; d++) {
        BFP8_CHECK_ARG(t->shape[d] >= 0 && t->shape[d] <= ST_MAX_EXACT_INT,
                       "bfp8_safetensors_write: tensor '%.200s' dim %d is %lld", t->name, d, (long long)t->shape[d]);
        BFP8_CHECK_ARG(bfp8_mul_ok(elems, t->shape[d], &elems),
                       "bfp8_safetensors_write: tensor '%.200s' element count overflows", t->name);
    }
    BFP8_CHECK_ARG(bfp8_mul_ok(elems, (int64_t)bfp8_dtype_size(t->dtype), &nbytes) && (uint64_t)nbytes == t->nbytes,
                   "bfp8_safetensors_write: tensor '%.200s' has nbytes %zu, but its shape and dtype need %lld",
                   t->name, t->nbytes, (long long)nbytes);
    BFP8_CHECK_ARG(t->data != NULL || t->nbytes == 0, "bfp8_safetensors_write: tensor '%.200s' has NULL data",
                   t->name);
    return BFP8_OK;
}

static cJSON *st_json_int(int64_t v) {
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)v); /* exact, never in exponent form */
    return cJSON_CreateRaw(text);
}

/* The header JSON text, not yet padded; NULL when out of memory. */
static char *st_build_header(const bfp8_tensor *tensors, size_t count) {
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    uint64_t offset = 0;
    for (size_t i = 0; i < count && ok; i++) {
        const bfp8_tensor *t = &tensors[i];
        cJSON *entry = cJSON_CreateObject();
        if (!entry || !cJSON_AddItemToObject(root, t->name, entry)) {
            cJSON_Delete(entry);
            ok = false;
            break;
        }
        cJSON *shape = NULL, *offsets = NULL;
        ok = cJSON_AddStringToObject(entry, "dtype", st_dtype_to_name(t->dtype)) != NULL &&
             (shape = cJSON_AddArrayToObject(entry, "shape")) != NULL &&
             (offsets = cJSON_AddArrayToObject(entry, "data_offsets")) != NULL;
        for (int d = 0; d < t->ndim && ok; d++) ok = cJSON_AddItemToArray(shape, st_json_int(t->shape[d]));
        ok = ok && cJSON_AddItemToArray(offsets, st_json_int((int64_t)offset));
        offset += t->nbytes;
        ok = ok && cJSON_AddItemToArray(offsets, st_json_int((int64_t)offset));
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

static int st_write_all(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The directory part of a path ("." when there is none); NULL when out of memory. */
static char *st_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

/* Best effort: makes the rename durable. A failure here does not undo a complete, renamed file. */
static void st_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* Where the file goes: through a symlink to the file it names (so the link and the file's mode survive); a dangling
 * link is replaced. NULL when out of memory. */
static char *st_destination(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        char *real = realpath(path, NULL);
        if (real) return real;
    }
    return strdup(path);
}

/* Creates a temp file with a short name in `dir` (so a destination name of up to NAME_MAX bytes still works), mode
 * 0666 less the umask, as a new file would get. Returns the fd (and the name in *tmp_out), or -1 with errno.
 * The name is announced through on_temp just before the file is created (O_EXCL), so that a signal handler
 * removing it cannot miss a file that exists, and again once it exists; a failed attempt announces NULL. */
static int st_create_temp(const char *dir, char **tmp_out, const bfp8_write_options *options) {
    static atomic_uint seq;
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    size_t size = strlen(dir) + 32;
    char *tmp = malloc(size);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        /* splitmix64 of pid, a counter and the time: unpredictable enough to make collisions rare */
        uint64_t x = ((uint64_t)getpid() << 32) ^ ((uint64_t)atomic_fetch_add(&seq, 1) << 16) ^
                     (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 40);
        x += 0x9E3779B97F4A7C15ull;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        x ^= x >> 31;
        char id[9];
        for (int i = 0; i < 8; i++, x /= 36) id[i] = alphabet[x % 36];
        id[8] = '\0';
        snprintf(tmp, size, "%s/.bfp8.tmp.%s", dir, id);
        if (options && options->on_temp) options->on_temp(tmp, options->ctx);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) {
            int err = errno;
            if (options && options->on_temp) options->on_temp(NULL, options->ctx);
            errno = err;
            if (err != EEXIST) break;
        } else if (options && options->on_temp) {
            options->on_temp(tmp, options->ctx);
        }
    }
    if (fd < 0) {
        int err = errno;
        free(tmp);
        errno = err;
        return -1;
    }
    *tmp_out = tmp;
    return fd;
}

/* Writes the file to a temp file in `dir` and renames it onto `dest`; the temp file is removed on every failure.
 * mode >= 0: the mode the file gets (the one it replaces). */
static bfp8_status st_write_via_temp(const char *path, const char *dest, const char *dir, int mode,
                                     const unsigned char prefix[8], const char *header, size_t header_len,
                                     const bfp8_tensor *tensors, size_t count, const bfp8_write_options *options) {
    char *tmp = NULL;
    int fd = st_create_temp(dir, &tmp, options);
    if (fd < 0) return bfp8_fail(BFP8_ERR_IO, "%s: cannot create a temp file in %s: %s", path, dir, strerror(errno));

    const char *step = "write";
    int err = 0;
    if (mode >= 0 && fchmod(fd, (mode_t)mode) != 0) err = errno, step = "chmod";
    if (!err) err = st_write_all(fd, prefix, 8);
    if (!err) err = st_write_all(fd, header, header_len);
    for (size_t i = 0; i < count && !err; i++)
        if (tensors[i].nbytes) err = st_write_all(fd, tensors[i].data, tensors[i].nbytes);
    if (!err && fsync(fd) != 0) err = errno, step = "fsync";
    if (close(fd) != 0 && !err) err = errno, step = "close";
    if (!err && rename(tmp, dest) != 0) err = errno, step = "rename";
    bfp8_status st = BFP8_OK;
    if (err) {
        unlink(tmp);
        st = bfp8_fail(BFP8_ERR_IO, "%s: %s failed: %s", path, step, strerror(err));
    } else {
        st_sync_dir(dir);
    }
    /* After the rename or unlink, so that a signal arriving in between still finds the name registered. */
    if (options && options->on_temp) options->on_temp(NULL, options->ctx);
    free(tmp);
    return st;
}

bfp8_status bfp8_safetensors_write(const char *path, const bfp8_tensor *tensors, size_t count) {
    return bfp8_safetensors_write_ex(path, tensors, count, NULL);
}

bfp8_status bfp8_safetensors_write_ex(const char *path, const bfp8_tensor *tensors, size_t count,
                                      const bfp8_write_options *options) {
    BFP8_CHECK_ARG(path != NULL && path[0] != '\0', "bfp8_safetensors_write: path is NULL or empty");
    BFP8_CHECK_ARG(tensors != NULL || count == 0, "bfp8_safetensors_write: tensors is NULL");
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        BFP8_TRY(st_check_write_tensor(&tensors[i], i));
        total += tensors[i].nbytes;
        BFP8_CHECK_ARG(total <= (uint64_t)ST_MAX_EXACT_INT,
                       "bfp8_safetensors_write: data section exceeds 2^53 bytes at tensor '%.200s'", tensors[i].name);
    }
    size_t *order = malloc((count ? count : 1) * sizeof *order);
    if (!order) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_safetensors_write: no memory");
    bfp8_status st = st_sort_names(tensors, count, order, BFP8_ERR_INVALID_ARGUMENT);
    free(order);
    BFP8_TRY(st);

    char *json = st_build_header(tensors, count);
    if (!json) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_safetensors_write: no memory for the header");
    size_t json_len = strlen(json);
    /* Pad with spaces so the data section (at 8 + header length) starts 8-aligned, as other writers do. */
    size_t header_len = (size_t)bfp8_round_up((int64_t)json_len, ST_DATA_ALIGN);
    char *header = malloc(header_len ? header_len : 1);
    char *dest = st_destination(path);
    char *dir = dest ? st_dir_of(dest) : NULL;
    if (!header || !dest || !dir) {
        cJSON_free(json);
        free(header);
        free(dest);
        free(dir);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_safetensors_write: no memory for the header");
    }
    memcpy(header, json, json_len);
    memset(header + json_len, ' ', header_len - json_len);
    cJSON_free(json);
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)header_len >> (8 * i));

    /* An existing file keeps its mode; anything else that exists there (a directory, a device such as /dev/null),
     * or a file this user may not write (0444: kept as cp keeps it), is refused before anything is written, since
     * rename() would replace it all the same. */
    struct stat old;
    bool replacing = stat(dest, &old) == 0;
    if (replacing && S_ISDIR(old.st_mode))
        st = bfp8_fail(BFP8_ERR_IO, "%s: cannot write: it is a directory", path);
    else if (replacing && !S_ISREG(old.st_mode))
        st = bfp8_fail(BFP8_ERR_IO, "%s: cannot write: it exists and is not a regular file", path);
    else if (replacing && access(dest, W_OK) != 0 && errno == EACCES)
        st = bfp8_fail(BFP8_ERR_IO, "%s: cannot write: the file exists and is read-only for this user", path);
    else
        st = st_write_via_temp(path, dest, dir, replacing ? (int)(old.st_mode & 07777) : -1, prefix, header,
                               header_len, tensors, count, options);
    free(header);
    free(dest);
    free(dir);
    return st;
}
