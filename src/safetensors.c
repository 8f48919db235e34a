/* safetensors reading and writing (the checkpoint format of Hugging Face and DeepSeek).
 *
 * Layout: a little-endian u64 header length N, N bytes of UTF-8 JSON, then the data section. The JSON object maps
 * each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets relative to the data
 * section; gaps between tensors are allowed, overlaps are not) plus an optional "__metadata__" object of strings.
 *
 * Documented limits:
 * - the whole file is read into memory (a DeepSeek shard is ~5 GB; fine for the tool, mmap would be the next step);
 * - only the dtypes blockfp8 computes with are accepted (F8_E4M3, BF16, F16, F32, I32); any other is FORMAT;
 * - "__metadata__" is validated (an object of strings) but neither exposed nor written;
 * - unknown keys inside a tensor entry are ignored, as other readers do;
 * - integers in the header must be exact in a double (<= 2^53), since cJSON numbers are doubles (a literal such as
 *   9007199254740993 rounds to 2^53 while parsing and is read as 2^53);
 * - a name containing an escaped NUL (\u0000) is cut at the NUL (cJSON strings are C strings) and then checked for
 *   emptiness and duplicates as such;
 * - data bytes are taken as they are: the host is assumed little-endian, like the format;
 * - cJSON records its last parse error in a global, so parsing from several threads at once races on that global
 *   (harmless: we never read it).
 */
#include "internal.h"

#include <cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER_BYTES ((uint64_t)100 * 1000 * 1000) /* refuse bigger headers before allocating */
#define ST_MAX_NAME_BYTES 1024
#define ST_MAX_EXACT_INT ((int64_t)1 << 53) /* largest integer a JSON number (a double) holds exactly */
#define ST_METADATA_KEY "__metadata__"
#define ST_DATA_ALIGN 8 /* the writer pads the header so the data section starts at a multiple of this */

struct bfp8_safetensors {
    size_t count;
    bfp8_tensor *tensors; /* in header order */
    size_t *by_name;      /* tensor indices sorted by name, for find() */
    void **copies;        /* per tensor: an aligned copy of misaligned data, else NULL */
    unsigned char *block; /* the file's bytes, shifted so that the data section starts 8-aligned */
};

static const struct {
    const char *name;
    bfp8_dtype dtype;
} st_dtypes[] = {
    {"F8_E4M3", BFP8_DTYPE_E4M3}, {"BF16", BFP8_DTYPE_BF16}, {"F16", BFP8_DTYPE_F16},
    {"F32", BFP8_DTYPE_F32},      {"I32", BFP8_DTYPE_I32},
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

/* The header must be UTF-8 without raw control characters (JSON allows them only as whitespace). */
static bfp8_status st_check_header_text(const unsigned char *p, size_t n) {
    size_t bad = st_utf8_invalid_at(p, n);
    if (bad < n) return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: header byte %zu is not valid UTF-8 (0x%02x)", bad, p[bad]);
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 && !st_is_json_space(p[i]))
            return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: header byte %zu is a control character (0x%02x)", i, p[i]);
    return BFP8_OK;
}

/* Names must be non-empty, at most ST_MAX_NAME_BYTES and UTF-8 (so that a written file reads back). */
static bfp8_status st_check_name(const char *name, bfp8_status status, const char *context) {
    size_t len = strlen(name);
    if (len == 0) return bfp8_fail(status, "%s: a tensor has an empty name", context);
    if (len > ST_MAX_NAME_BYTES)
        return bfp8_fail(status, "%s: tensor name '%.64s...' is %zu bytes (limit %d)", context, name, len,
                         ST_MAX_NAME_BYTES);
    if (st_utf8_invalid_at((const unsigned char *)name, len) < len)
        return bfp8_fail(status, "%s: tensor name '%.64s' is not valid UTF-8", context, name);
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
    if (n > ST_MAX_HEADER_BYTES)
        return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: header length %llu exceeds the %llu-byte limit",
                         (unsigned long long)n, (unsigned long long)ST_MAX_HEADER_BYTES);
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

/* The value of `key` in an entry; NULL when absent; FORMAT when present twice (ambiguous). */
static bfp8_status st_entry_field(const cJSON *entry, const char *tensor, const char *key, const cJSON **out) {
    *out = NULL;
    for (const cJSON *c = entry->child; c; c = c->next) {
        if (strcmp(c->string, key) != 0) continue;
        if (*out) return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensor '%.200s' has \"%s\" twice", tensor, key);
        *out = c;
    }
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
                         "safetensors: tensor '%.200s': dtype '%.32s' is not supported (F8_E4M3, BF16, F16, F32, I32)",
                         name, dtype->valuestring);

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

/* No two tensors may share a byte (empty ones share none). Gaps are allowed. */
static bfp8_status st_check_overlaps(st_range *ranges, size_t count, const bfp8_tensor *tensors) {
    qsort(ranges, count, sizeof *ranges, st_compare_ranges);
    const st_range *prev = NULL;
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].begin == ranges[i].end) continue;
        if (prev && ranges[i].begin < prev->end)
            return bfp8_fail(BFP8_ERR_FORMAT, "safetensors: tensors '%.120s' [%llu, %llu) and '%.120s' [%llu, %llu) overlap",
                             tensors[prev->index].name, (unsigned long long)prev->begin,
                             (unsigned long long)prev->end, tensors[ranges[i].index].name,
                             (unsigned long long)ranges[i].begin, (unsigned long long)ranges[i].end);
        prev = &ranges[i];
    }
    return BFP8_OK;
}

/* Fills f's tensors from the header tree; `data` is the data section (inside f->block), `data_size` bytes. */
static bfp8_status st_build(bfp8_safetensors *f, const cJSON *root, const unsigned char *data, uint64_t data_size) {
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
    bool seen_metadata = false;
    for (const cJSON *c = root->child; c && st == BFP8_OK; c = c->next) {
        if (strcmp(c->string, ST_METADATA_KEY) == 0) {
            if (seen_metadata) st = bfp8_fail(BFP8_ERR_FORMAT, "safetensors: \"__metadata__\" appears twice");
            else st = st_check_metadata(c);
            seen_metadata = true;
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
    if (st == BFP8_OK) st = st_check_overlaps(ranges, f->count, f->tensors);

    /* Hand out data aligned for its dtype: the data section is 8-aligned, so only offsets that are not a multiple
     * of the element size need a copy. Empty tensors point at the (aligned) block so data is never NULL. */
    if (st == BFP8_OK) {
        for (size_t j = 0; j < f->count; j++) {
            bfp8_tensor *t = &f->tensors[ranges[j].index];
            const unsigned char *src = data + ranges[j].begin;
            size_t elem = bfp8_dtype_size(t->dtype);
            if (t->nbytes == 0) {
                t->data = f->block;
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

/* Parses a file held at block + shift (size bytes, prefix already checked); takes ownership of block. */
static bfp8_status st_parse_block(unsigned char *block, size_t shift, size_t size, uint64_t header_len,
                                  bfp8_safetensors **out) {
    bfp8_safetensors *f = calloc(1, sizeof *f);
    if (!f) {
        free(block);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "safetensors: no memory for the file object");
    }
    f->block = block;
    const unsigned char *bytes = block + shift;
    const unsigned char *header = bytes + 8;
    bfp8_status st = st_check_header_text(header, (size_t)header_len);
    cJSON *root = NULL;
    if (st == BFP8_OK) {
        const char *end = NULL;
        root = cJSON_ParseWithLengthOpts((const char *)header, (size_t)header_len, &end, 0);
        if (!root) {
            size_t at = end ? (size_t)(end - (const char *)header) : 0;
            st = bfp8_fail(BFP8_ERR_FORMAT, "safetensors: header is not valid JSON (error near byte %zu of %llu)", at,
                           (unsigned long long)header_len);
        } else {
            /* Only whitespace (the writer's padding) may follow the object. */
            for (const char *p = end; p < (const char *)header + header_len; p++)
                if (!st_is_json_space((unsigned char)*p)) {
                    st = bfp8_fail(BFP8_ERR_FORMAT, "safetensors: header has trailing bytes after the JSON at byte %zu",
                                   (size_t)(p - (const char *)header));
                    break;
                }
        }
    }
    if (st == BFP8_OK && !cJSON_IsObject(root))
        st = bfp8_fail(BFP8_ERR_FORMAT, "safetensors: header is not a JSON object");
    if (st == BFP8_OK) st = st_build(f, root, header + header_len, size - 8 - header_len);
    cJSON_Delete(root);
    if (st != BFP8_OK) {
        bfp8_safetensors_close(f);
        return st;
    }
    *out = f;
    return BFP8_OK;
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
    unsigned char *block = malloc(size + shift);
    if (!block) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "safetensors: no memory for a %zu-byte copy", size);
    memcpy(block + shift, bytes, size);
    return st_parse_block(block, shift, size, header_len, out);
}

/* Prefixes the current error message with the path. */
static bfp8_status st_fail_with_path(bfp8_status status, const char *path) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", bfp8_last_error());
    return bfp8_fail(status, "%s: %s", path, msg);
}

bfp8_status bfp8_safetensors_open(const char *path, bfp8_safetensors **out) {
    BFP8_CHECK_ARG(out != NULL, "bfp8_safetensors_open: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(path != NULL, "bfp8_safetensors_open: path is NULL");
    FILE *fp = fopen(path, "rb");
    if (!fp) return bfp8_fail(BFP8_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        int err = errno;
        fclose(fp);
        return bfp8_fail(BFP8_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(fp);
        return bfp8_fail(BFP8_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX - ST_DATA_ALIGN) {
        fclose(fp);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: %lld bytes do not fit in memory", path, (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    unsigned char prefix[8] = {0};
    size_t got = fread(prefix, 1, size < 8 ? size : 8, fp);
    if (got != (size < 8 ? size : 8)) {
        int err = errno;
        bool io = ferror(fp);
        fclose(fp);
        return bfp8_fail(BFP8_ERR_IO, "%s: read failed: %s", path, io ? strerror(err) : "file shrank while reading");
    }
    uint64_t header_len = 0;
    bfp8_status st = st_check_prefix(prefix, size, &header_len);
    if (st != BFP8_OK) {
        fclose(fp);
        return st_fail_with_path(st, path);
    }
    size_t shift = st_shift_for(header_len);
    unsigned char *block = malloc(size + shift);
    if (!block) {
        fclose(fp);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: no memory to read %zu bytes", path, size);
    }
    memcpy(block + shift, prefix, 8);
    got = fread(block + shift + 8, 1, size - 8, fp);
    if (got != size - 8) {
        int err = errno;
        bool io = ferror(fp);
        fclose(fp);
        free(block);
        return bfp8_fail(BFP8_ERR_IO, "%s: read failed after %zu of %zu bytes: %s", path, got + 8, size,
                         io ? strerror(err) : "file shrank while reading");
    }
    fclose(fp);
    st = st_parse_block(block, shift, size, header_len, out);
    return st == BFP8_OK ? st : st_fail_with_path(st, path);
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

/* Best effort: makes the rename durable. A failure here does not undo a complete, renamed file. */
static void st_sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

bfp8_status bfp8_safetensors_write(const char *path, const bfp8_tensor *tensors, size_t count) {
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
    if (!header) {
        cJSON_free(json);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_safetensors_write: no memory for the header");
    }
    memcpy(header, json, json_len);
    memset(header + json_len, ' ', header_len - json_len);
    cJSON_free(json);
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)header_len >> (8 * i));

    /* A unique temp name next to the destination, so rename() is atomic (same file system). */
    static atomic_uint seq;
    size_t tmp_size = strlen(path) + 64;
    char *tmp = malloc(tmp_size);
    if (!tmp) {
        free(header);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_safetensors_write: no memory");
    }
    int fd = -1, err = 0;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, tmp_size, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        err = fd < 0 ? errno : 0;
        if (fd < 0 && err != EEXIST) break;
    }
    if (fd < 0) {
        st = bfp8_fail(BFP8_ERR_IO, "%s: cannot create temp file %s: %s", path, tmp, strerror(err));
        free(tmp);
        free(header);
        return st;
    }

    const char *step = "write";
    err = st_write_all(fd, prefix, sizeof prefix);
    if (!err) err = st_write_all(fd, header, header_len);
    for (size_t i = 0; i < count && !err; i++)
        if (tensors[i].nbytes) err = st_write_all(fd, tensors[i].data, tensors[i].nbytes);
    if (!err && fsync(fd) != 0) err = errno, step = "fsync";
    if (close(fd) != 0 && !err) err = errno, step = "close";
    if (!err && rename(tmp, path) != 0) err = errno, step = "rename";
    if (err) {
        unlink(tmp);
        st = bfp8_fail(BFP8_ERR_IO, "%s: %s failed: %s", path, step, strerror(err));
    } else {
        st_sync_parent_dir(path);
    }
    free(tmp);
    free(header);
    return st;
}
