/* Checkpoints of one or several safetensors files, and DeepSeek-format weights loaded from them.
 *
 * A sharded checkpoint is a Hugging Face index, {"metadata": {...}, "weight_map": {tensor: shard file}}, next to its
 * shards (DeepSeek-R1: model.safetensors.index.json over 163 files of ~4.3 GB). The index is parsed as strictly as
 * a safetensors header; shard names must be relative paths without "..", and each must exist when the index is
 * opened. A shard is opened (mapped, so without a copy) the first time a tensor in it is looked up, so loading one
 * layer touches one or two shards; a shard holding a tensor that the index puts in another is refused then.
 *
 * Weights: NAME (F8_E4M3 [N, K]) with NAME_scale_inv ([ceil(N/128), ceil(K/128)]) as F32 (fp32, or UE8M0 when
 * declared and every value is a power of two) or F8_E8M0 (UE8M0 exponents). */
#include "internal.h"

#include <cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CK_INDEX_NAME "model.safetensors.index.json"
#define CK_SINGLE_NAME "model.safetensors"
#define CK_MAX_INDEX_BYTES ((size_t)256 << 20)

typedef struct ck_entry {
    char *tensor;
    size_t shard; /* index into shards */
} ck_entry;

struct bfp8_checkpoint {
    char **files;             /* the index (when there is one), then the shards */
    size_t nfiles;
    char **shards;            /* = files + (index ? 1 : 0) */
    size_t nshards;
    bfp8_safetensors **open;  /* per shard, NULL until first used */
    ck_entry *entries;        /* from the index, sorted by tensor name; NULL for a single file */
    size_t nentries;
    pthread_mutex_t lock;     /* guards `open` */
};

static bool ck_ends_with(const char *s, const char *suffix) {
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

static char *ck_join(const char *dir, const char *name) {
    size_t ld = strlen(dir), ln = strlen(name);
    char *s = malloc(ld + ln + 2);
    if (!s) return NULL;
    memcpy(s, dir, ld);
    s[ld] = '/';
    memcpy(s + ld + 1, name, ln + 1);
    return s;
}

static char *ck_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

static int ck_compare_entries(const void *a, const void *b) {
    return strcmp(((const ck_entry *)a)->tensor, ((const ck_entry *)b)->tensor);
}

/* A shard name from an index: relative, no ".." component, not empty. */
static bool ck_shard_name_ok(const char *name) {
    if (!name[0] || name[0] == '/') return false;
    for (const char *p = name; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.')) return false;
        p += len + (slash ? 1 : 0);
        if (slash && !*p) return false; /* a trailing slash names a directory */
    }
    return true;
}

static bfp8_checkpoint *ck_alloc(size_t nfiles) {
    bfp8_checkpoint *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->files = calloc(nfiles, sizeof *c->files);
    if (!c->files) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void bfp8_checkpoint_close(bfp8_checkpoint *c) {
    if (!c) return;
    for (size_t i = 0; i < c->nshards && c->open; i++) bfp8_safetensors_close(c->open[i]);
    free(c->open);
    for (size_t i = 0; i < c->nfiles; i++) free(c->files[i]);
    free(c->files);
    for (size_t i = 0; i < c->nentries; i++) free(c->entries[i].tensor);
    free(c->entries);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static bfp8_status ck_open_single(const char *path, bfp8_checkpoint **out) {
    bfp8_checkpoint *c = ck_alloc(1);
    if (!c || !(c->files[0] = strdup(path)) || !(c->open = calloc(1, sizeof *c->open))) {
        bfp8_checkpoint_close(c);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    }
    c->nfiles = 1;
    c->shards = c->files;
    c->nshards = 1;
    bfp8_status st = bfp8_safetensors_open(path, &c->open[0]);
    if (st != BFP8_OK) {
        bfp8_checkpoint_close(c);
        return st;
    }
    *out = c;
    return BFP8_OK;
}

/* Reads a whole (small) file into a NUL-terminated buffer. */
static bfp8_status ck_read_text(const char *path, char **text, size_t *len) {
    /* O_NONBLOCK: a FIFO without a writer would block open() forever; it is refused as not a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int err = errno;
        return bfp8_fail(BFP8_ERR_IO, "%s: cannot open: %s%s", path, strerror(err), bfp8_dangling_link_hint(path));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return bfp8_fail(BFP8_ERR_IO, "%s: not a regular file", path);
    }
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        int err = errno;
        close(fd);
        return bfp8_fail(BFP8_ERR_IO, "%s: cannot open: %s", path, strerror(err));
    }
    if ((uint64_t)sb.st_size > CK_MAX_INDEX_BYTES) {
        fclose(fp);
        return bfp8_fail(BFP8_ERR_FORMAT, "%s: an index of %lld bytes exceeds the %zu-byte limit", path,
                         (long long)sb.st_size, CK_MAX_INDEX_BYTES);
    }
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(fp);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: no memory for %zu bytes", path, size);
    }
    size_t got = fread(buf, 1, size, fp);
    bool io = ferror(fp);
    fclose(fp);
    if (got != size) {
        free(buf);
        return bfp8_fail(BFP8_ERR_IO, "%s: read failed after %zu of %zu bytes%s", path, got, size,
                         io ? "" : " (the file shrank)");
    }
    buf[size] = '\0';
    *text = buf;
    *len = size;
    return BFP8_OK;
}

/* FNV-1a: shard names hash into a table, so that an index naming many distinct shards costs no search per entry
 * (a linear search made a hostile index of 10^5 shard names take minutes before any shard was looked at). */
static uint64_t ck_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The index of shard `name` in c->shards, added (dir/name) when new. slots: an open-addressing table of mask + 1
 * shard indices + 1 (0: empty), with room for every shard the index can name. */
static bfp8_status ck_shard_of(bfp8_checkpoint *c, uint32_t *slots, size_t mask, const char *dir, size_t dir_len,
                               const char *name, const char *path, size_t *out) {
    size_t h = (size_t)ck_hash(name) & mask;
    while (slots[h] && strcmp(c->shards[slots[h] - 1] + dir_len, name) != 0) h = (h + 1) & mask;
    if (!slots[h]) {
        if (!(c->shards[c->nshards] = ck_join(dir, name)))
            return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        slots[h] = (uint32_t)++c->nshards;
        c->nfiles++;
    }
    *out = slots[h] - 1;
    return BFP8_OK;
}

/* Fills c's shards and entries from an index's weight_map (c->shards has room for one shard per entry). */
static bfp8_status ck_build_index(bfp8_checkpoint *c, const cJSON *map, const char *path, const char *dir) {
    size_t n = 0;
    for (const cJSON *e = map->child; e; e = e->next) n++;
    if (n > UINT32_MAX / 2)
        return bfp8_fail(BFP8_ERR_FORMAT, "%s: weight_map has %zu entries, more than %u", path, n, UINT32_MAX / 2);
    size_t cap = 2; /* a power of two, at least twice the shards: probes stay short */
    while (cap < 2 * n) cap *= 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    c->entries = calloc(n ? n : 1, sizeof *c->entries);
    if (!slots || !c->entries) {
        free(slots);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: no memory for %zu entries", path, n);
    }
    const size_t dir_len = strlen(dir) + 1; /* shard paths are dir + '/' + name */
    bfp8_status st = BFP8_OK;
    for (const cJSON *e = map->child; e && st == BFP8_OK; e = e->next) {
        const char *shard = e->valuestring;
        ck_entry *entry = &c->entries[c->nentries];
        if (!e->string[0])
            st = bfp8_fail(BFP8_ERR_FORMAT, "%s: weight_map has an empty tensor name", path);
        else if (!cJSON_IsString(e))
            st = bfp8_fail(BFP8_ERR_FORMAT, "%s: weight_map['%.200s'] is not a string (a shard file name)", path,
                           e->string);
        else if (!ck_shard_name_ok(shard))
            st = bfp8_fail(BFP8_ERR_FORMAT, "%s: weight_map['%.200s'] = '%.200s' is not a relative file name "
                           "inside the checkpoint's directory", path, e->string, shard);
        else if ((st = ck_shard_of(c, slots, cap - 1, dir, dir_len, shard, path, &entry->shard)) == BFP8_OK &&
                 !(entry->tensor = strdup(e->string)))
            st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        if (st == BFP8_OK) c->nentries++;
    }
    free(slots);
    BFP8_TRY(st);
    qsort(c->entries, c->nentries, sizeof *c->entries, ck_compare_entries);
    for (size_t i = 0; i < c->nshards; i++) {
        struct stat sb;
        if (stat(c->shards[i], &sb) != 0) {
            int err = errno;
            return bfp8_fail(BFP8_ERR_IO, "%s: shard %s: %s%s", path, c->shards[i], strerror(err),
                             bfp8_dangling_link_hint(c->shards[i]));
        }
        if (!S_ISREG(sb.st_mode))
            return bfp8_fail(BFP8_ERR_IO, "%s: shard %s is not a regular file", path, c->shards[i]);
    }
    if (!(c->open = calloc(c->nshards ? c->nshards : 1, sizeof *c->open)))
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    return BFP8_OK;
}

static bfp8_status ck_open_index(const char *path, bfp8_checkpoint **out) {
    char *text = NULL;
    size_t len = 0;
    BFP8_TRY(ck_read_text(path, &text, &len));
    cJSON *root = NULL;
    bfp8_status st = bfp8_json_parse_object(text, len, path, &root);
    free(text);
    BFP8_TRY(st);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    size_t n = 0;
    if (map)
        for (const cJSON *e = map->child; e; e = e->next) n++;
    bfp8_checkpoint *c = NULL;
    char *dir = ck_dir_of(path);
    if (!map || !cJSON_IsObject(map)) {
        st = bfp8_fail(BFP8_ERR_FORMAT, "%s: no \"weight_map\" object (a safetensors index maps each tensor to its "
                       "shard file)", path);
    } else if (!dir || !(c = ck_alloc(n + 1))) {
        st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    } else if (!(c->files[0] = strdup(path))) {
        st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    } else {
        c->nfiles = 1;
        c->shards = c->files + 1;
        st = ck_build_index(c, map, path, dir);
    }
    cJSON_Delete(root);
    free(dir);
    if (st != BFP8_OK) {
        bfp8_checkpoint_close(c);
        return st;
    }
    *out = c;
    return BFP8_OK;
}

bfp8_status bfp8_checkpoint_open(const char *path, bfp8_checkpoint **out) {
    BFP8_CHECK_ARG(out, "checkpoint_open: out is NULL");
    *out = NULL;
    BFP8_CHECK_ARG(path && path[0], "checkpoint_open: path is NULL or empty");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int err = errno;
        return bfp8_fail(BFP8_ERR_IO, "%s: cannot open: %s%s", path, strerror(err), bfp8_dangling_link_hint(path));
    }
    if (S_ISDIR(sb.st_mode)) {
        char *index = ck_join(path, CK_INDEX_NAME), *single = ck_join(path, CK_SINGLE_NAME);
        bfp8_status st;
        /* lstat: a link to nothing is still the file meant, and opening it says what is wrong. */
        if (!index || !single) st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "checkpoint_open: out of memory");
        else if (lstat(index, &sb) == 0) st = ck_open_index(index, out);
        else if (lstat(single, &sb) == 0) st = ck_open_single(single, out);
        else st = bfp8_fail(BFP8_ERR_NOT_FOUND, "%s: a directory without %s or %s", path, CK_INDEX_NAME, CK_SINGLE_NAME);
        free(index);
        free(single);
        return st;
    }
    return ck_ends_with(path, ".json") ? ck_open_index(path, out) : ck_open_single(path, out);
}

size_t bfp8_checkpoint_file_count(const bfp8_checkpoint *c) { return c ? c->nfiles : 0; }

const char *bfp8_checkpoint_file_path(const bfp8_checkpoint *c, size_t index) {
    return c && index < c->nfiles ? c->files[index] : NULL;
}

size_t bfp8_checkpoint_tensor_count(const bfp8_checkpoint *c) {
    if (!c) return 0;
    return c->entries ? c->nentries : bfp8_safetensors_count(c->open[0]);
}

/* Whether two paths name one file ("a.safetensors" and "./a.safetensors", or links to one blob). */
static bool ck_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Opens shard i (c->lock held). A tensor that the index puts in another shard file is a second copy: which one the
 * writer meant is unknown (other loaders take either), so the shard is refused rather than one copy picked. */
static bfp8_status ck_open_shard(bfp8_checkpoint *c, size_t i) {
    bfp8_safetensors *f;
    BFP8_TRY(bfp8_safetensors_open(c->shards[i], &f));
    for (size_t t = 0; t < bfp8_safetensors_count(f); t++) {
        ck_entry key = {.tensor = bfp8_safetensors_at(f, t)->name};
        const ck_entry *e = bsearch(&key, c->entries, c->nentries, sizeof *c->entries, ck_compare_entries);
        if (e && e->shard != i && !ck_same_file(c->shards[i], c->shards[e->shard])) {
            bfp8_status st = bfp8_fail(BFP8_ERR_FORMAT, "%s: tensor '%.200s' is in %s too, but the index puts it in "
                                       "%s: two copies, and no way to tell which is meant", c->files[0], key.tensor,
                                       c->shards[i], c->shards[e->shard]);
            bfp8_safetensors_close(f);
            return st;
        }
    }
    c->open[i] = f;
    return BFP8_OK;
}

bfp8_status bfp8_checkpoint_find(bfp8_checkpoint *c, const char *name, const bfp8_tensor **out) {
    BFP8_CHECK_ARG(c && name && out, "checkpoint_find: NULL argument");
    *out = NULL;
    if (!c->entries) {
        *out = bfp8_safetensors_find(c->open[0], name);
        return *out ? BFP8_OK : bfp8_fail(BFP8_ERR_NOT_FOUND, "%s: no tensor '%.200s'", c->files[0], name);
    }
    ck_entry key = {.tensor = (char *)name};
    const ck_entry *e = bsearch(&key, c->entries, c->nentries, sizeof *c->entries, ck_compare_entries);
    if (!e) return bfp8_fail(BFP8_ERR_NOT_FOUND, "%s: no tensor '%.200s' in the weight_map", c->files[0], name);
    bfp8_status st = BFP8_OK;
    pthread_mutex_lock(&c->lock);
    if (!c->open[e->shard]) st = ck_open_shard(c, e->shard);
    const bfp8_safetensors *f = c->open[e->shard];
    pthread_mutex_unlock(&c->lock);
    BFP8_TRY(st);
    *out = bfp8_safetensors_find(f, name);
    if (!*out)
        return bfp8_fail(BFP8_ERR_FORMAT, "%s: the index puts tensor '%.200s' in %s, which has no such tensor",
                         c->files[0], name, c->shards[e->shard]);
    return BFP8_OK;
}

/* --- weights ---------------------------------------------------------------------------------------------------- */

/* A value that UE8M0 holds exactly: a positive power of two with biased exponent in [1, 254]. */
static bool ck_is_ue8m0_value(float v) {
    uint32_t u = bfp8_f32_bits(v);
    uint32_t e = u >> 23;
    return (u & 0x7FFFFFu) == 0 && e >= 1 && e <= 254; /* the sign bit makes e > 255 */
}

bfp8_status bfp8_weight_parts(const char *name, const bfp8_tensor *q, const char *scale_name, const bfp8_tensor *s,
                              const bfp8_weight_load_options *opt, int64_t *n_out, int64_t *k_out,
                              bfp8_scales *scales, float **owned) {
    *owned = NULL;
    if (q->dtype != BFP8_DTYPE_E4M3 || q->ndim != 2)
        return bfp8_fail(BFP8_ERR_FORMAT, "weight_load: '%.200s' must be a 2-D F8_E4M3 tensor, got %s with %d dims",
                         name, bfp8_dtype_name(q->dtype), q->ndim);
    int64_t n = q->shape[0], k = q->shape[1];
    int64_t nb = bfp8_ceil_div(n, BFP8_BLOCK), kb = bfp8_ceil_div(k, BFP8_BLOCK);
    if ((s->dtype != BFP8_DTYPE_F32 && s->dtype != BFP8_DTYPE_UE8M0) || s->ndim != 2 || s->shape[0] != nb ||
        s->shape[1] != kb)
        return bfp8_fail(BFP8_ERR_FORMAT, "weight_load: '%.200s' must be F32 or F8_E8M0 [%" PRId64 ", %" PRId64 "] "
                         "for a [%" PRId64 ", %" PRId64 "] weight, got %s with %d dims [%" PRId64 ", %" PRId64 "]",
                         scale_name, nb, kb, n, k, bfp8_dtype_name(s->dtype), s->ndim, s->ndim > 0 ? s->shape[0] : 0,
                         s->ndim > 1 ? s->shape[1] : 0);
    bfp8_scale_format format = s->dtype == BFP8_DTYPE_UE8M0 ? BFP8_SCALE_UE8M0 : BFP8_SCALE_FP32;
    if (opt && opt->declare_format) {
        BFP8_CHECK_ARG(opt->scale_format >= 0 && opt->scale_format < BFP8_SCALE_FORMAT_COUNT,
                       "weight_load: unknown scale format %d", (int)opt->scale_format);
        format = opt->scale_format;
    }
    const int64_t count = nb * kb;
    const float *values = s->data;
    if (s->dtype == BFP8_DTYPE_UE8M0) {
        /* Exponents 0 (2^-127, an fp32 subnormal) and 255 (NaN) have no UE8M0 scale blockfp8 can hold. */
        float *converted = malloc((size_t)(count ? count : 1) * sizeof *converted);
        if (!converted) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight_load: no memory for %" PRId64 " scales", count);
        const uint8_t *e = s->data;
        for (int64_t i = 0; i < count; i++) {
            if (e[i] == 0 || e[i] == 255) {
                free(converted);
                return bfp8_fail(BFP8_ERR_FORMAT, "weight_load: '%.200s' [%" PRId64 ", %" PRId64 "] is the F8_E8M0 "
                                 "exponent %u (%s), outside the scales' range [1, 254]", scale_name, i / kb, i % kb,
                                 e[i], e[i] ? "NaN" : "2^-127");
            }
            converted[i] = bfp8_ue8m0_to_f32(e[i]);
        }
        values = *owned = converted;
    } else if (format == BFP8_SCALE_UE8M0) {
        for (int64_t i = 0; i < count; i++)
            if (!ck_is_ue8m0_value(values[i]))
                return bfp8_fail(BFP8_ERR_FORMAT, "weight_load: '%.200s' is declared UE8M0, but [%" PRId64 ", %" PRId64
                                 "] = %.9g is not a power of two in [2^-126, 2^127]", scale_name, i / kb, i % kb,
                                 (double)values[i]);
    }
    bfp8_status st = bfp8_scales_init(scales, format, BFP8_LAYOUT_ROW_MAJOR, nb, kb, (void *)values);
    if (st != BFP8_OK) {
        free(*owned);
        *owned = NULL;
        return st;
    }
    *n_out = n;
    *k_out = k;
    return BFP8_OK;
}

/* The weight from its two tensors. */
static bfp8_status ck_weight_from(const char *name, const bfp8_tensor *q, const char *scale_name,
                                  const bfp8_tensor *s, const bfp8_weight_load_options *opt, bfp8_weight **out) {
    int64_t n, k;
    bfp8_scales scales;
    float *owned;
    BFP8_TRY(bfp8_weight_parts(name, q, scale_name, s, opt, &n, &k, &scales, &owned));
    bfp8_status st = bfp8_weight_create(q->data, n, k, &scales, out);
    free(owned);
    return st;
}

static char *ck_scale_name(const char *name) {
    size_t len = strlen(name);
    char *s = malloc(len + sizeof "_scale_inv");
    if (s) {
        memcpy(s, name, len);
        memcpy(s + len, "_scale_inv", sizeof "_scale_inv");
    }
    return s;
}

bfp8_status bfp8_weight_tensors(const bfp8_safetensors *f, const char *name, const bfp8_weight_load_options *options,
                               const uint8_t **q_out, int64_t *n, int64_t *k, bfp8_scales *scales, float **owned) {
    BFP8_CHECK_ARG(f && name && q_out && n && k && scales && owned, "weight_load: NULL argument");
    *owned = NULL;
    const bfp8_tensor *q = bfp8_safetensors_find(f, name);
    if (!q) return bfp8_fail(BFP8_ERR_NOT_FOUND, "weight_load: no tensor '%.200s'", name);
    char *scale_name = ck_scale_name(name);
    if (!scale_name) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight_load: out of memory");
    const bfp8_tensor *s = bfp8_safetensors_find(f, scale_name);
    bfp8_status st = s ? bfp8_weight_parts(name, q, scale_name, s, options, n, k, scales, owned)
                       : bfp8_fail(BFP8_ERR_NOT_FOUND, "weight_load: no tensor '%.200s' (DeepSeek naming: the weight's "
                                   "dequantization scales)", scale_name);
    free(scale_name);
    if (st == BFP8_OK) *q_out = q->data;
    return st;
}

bfp8_status bfp8_weight_load_ex(const bfp8_safetensors *f, const char *name, const bfp8_weight_load_options *options,
                                bfp8_weight **out) {
    BFP8_CHECK_ARG(f && name && out, "weight_load: NULL argument");
    *out = NULL;
    const uint8_t *q;
    int64_t n, k;
    bfp8_scales scales;
    float *owned;
    BFP8_TRY(bfp8_weight_tensors(f, name, options, &q, &n, &k, &scales, &owned));
    bfp8_status st = bfp8_weight_create(q, n, k, &scales, out);
    free(owned);
    return st;
}

bfp8_status bfp8_weight_load(const bfp8_safetensors *f, const char *name, bfp8_weight **out) {
    return bfp8_weight_load_ex(f, name, NULL, out);
}

bfp8_status bfp8_checkpoint_weight_load(bfp8_checkpoint *c, const char *name, const bfp8_weight_load_options *options,
                                        bfp8_weight **out) {
    BFP8_CHECK_ARG(c && name && out, "weight_load: NULL argument");
    *out = NULL;
    const bfp8_tensor *q, *s;
    bfp8_status st = bfp8_checkpoint_find(c, name, &q);
    if (st == BFP8_ERR_NOT_FOUND) return bfp8_fail(st, "weight_load: no tensor '%.200s' in %s", name, c->files[0]);
    BFP8_TRY(st);
    char *scale_name = ck_scale_name(name);
    if (!scale_name) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "weight_load: out of memory");
    st = bfp8_checkpoint_find(c, scale_name, &s);
    if (st == BFP8_ERR_NOT_FOUND)
        st = bfp8_fail(st, "weight_load: no tensor '%.200s' in %s (DeepSeek naming: the weight's dequantization "
                       "scales)", scale_name, c->files[0]);
    if (st == BFP8_OK) st = ck_weight_from(name, q, scale_name, s, options, out);
    free(scale_name);
    return st;
}
