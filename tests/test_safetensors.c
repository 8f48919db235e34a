/* safetensors: write/read round trips of every dtype, every malformed case built byte by byte, I/O failures and
 * argument checks. */
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_dir[64];

static void path_in_tmp(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", tmp_dir, name); }

/* Number of entries of a directory other than . and .. (-1 if it cannot be read). */
static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void remove_tmp_dir(void) {
    DIR *d = opendir(tmp_dir);
    if (!d) return;
    char path[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        path_in_tmp(path, sizeof path, e->d_name);
        if (remove(path) != 0) rmdir(path);
    }
    closedir(d);
    rmdir(tmp_dir);
}

static bool write_bytes(const char *path, const void *bytes, size_t size) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return false;
    bool ok = fwrite(bytes, 1, size, fp) == size;
    return fclose(fp) == 0 && ok;
}

static unsigned char *read_bytes(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    *size = fread(buf, 1, (size_t)n, fp);
    fclose(fp);
    return buf;
}

/* A file built by hand: little-endian header length, the header text as given, then `data_len` data bytes. */
static unsigned char *make_file(uint64_t header_len_field, const char *header, size_t data_len, size_t *size) {
    size_t hlen = strlen(header);
    *size = 8 + hlen + data_len;
    unsigned char *buf = malloc(*size);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(header_len_field >> (8 * i));
    memcpy(buf + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) buf[8 + hlen + i] = (unsigned char)(i * 37 + 11);
    return buf;
}

/* Expects FORMAT with a message containing `needle`, from memory and from a file (message then names the path). */
static void expect_format_bytes(const char *label, const unsigned char *bytes, size_t size, const char *needle) {
    bfp8_safetensors *f = (bfp8_safetensors *)&f; /* poisoned: must come back NULL */
    bfp8_status st = bfp8_safetensors_parse(bytes, size, &f);
    const char *msg = bfp8_last_error();
    CHECK(st == BFP8_ERR_FORMAT && f == NULL, "%s: parse -> %s '%s'", label, bfp8_status_name(st), msg);
    CHECK(strstr(msg, needle) != NULL, "%s: message '%s' lacks '%s'", label, msg, needle);

    char path[256];
    path_in_tmp(path, sizeof path, "malformed.safetensors");
    CHECK(write_bytes(path, bytes, size), "%s: cannot write the test file", label);
    f = (bfp8_safetensors *)&f;
    st = bfp8_safetensors_open(path, &f);
    msg = bfp8_last_error();
    CHECK(st == BFP8_ERR_FORMAT && f == NULL, "%s: open -> %s '%s'", label, bfp8_status_name(st), msg);
    CHECK(strstr(msg, path) != NULL && strstr(msg, needle) != NULL, "%s: open message '%s'", label, msg);
    remove(path);
}

static void expect_format(const char *label, const char *header, size_t data_len, const char *needle) {
    size_t size;
    unsigned char *buf = make_file(strlen(header), header, data_len, &size);
    expect_format_bytes(label, buf, size, needle);
    free(buf);
}

/* Parses a hand-built file that must be valid; returns it (caller closes) or NULL. */
static bfp8_safetensors *expect_valid(const char *label, const char *header, size_t data_len) {
    size_t size;
    unsigned char *buf = make_file(strlen(header), header, data_len, &size);
    bfp8_safetensors *f = NULL;
    bfp8_status st = bfp8_safetensors_parse(buf, size, &f);
    CHECK(st == BFP8_OK && f != NULL, "%s: parse -> %s '%s'", label, bfp8_status_name(st), bfp8_last_error());
    free(buf);
    return f;
}

static void test_malformed_prefix(void) {
    unsigned char small[8] = {0};
    expect_format_bytes("empty file", small, 0, "shorter than the 8-byte");
    expect_format_bytes("7-byte file", small, 7, "shorter than the 8-byte");

    size_t size;
    unsigned char *buf = make_file(100, "{}", 10, &size);
    expect_format_bytes("header length past EOF", buf, size, "past the end");
    free(buf);
    buf = make_file(100000001ull, "{}", 10, &size);
    expect_format_bytes("header length just over the cap", buf, size, "limit");
    free(buf);
    buf = make_file(~0ull, "{}", 0, &size);
    expect_format_bytes("header length 2^64-1", buf, size, "limit");
    free(buf);
    buf = make_file(3, "{}", 0, &size); /* claims one byte more than the file has */
    expect_format_bytes("header length one past EOF", buf, size, "past the end");
    free(buf);
    /* Text files met in place of tensors say what they are: a Git LFS pointer (a clone without git-lfs), an index. */
    char text[160];
    snprintf(text, sizeof text, "version https://git-lfs.github.com/spec/v1\noid sha256:%016llx\nsize %u\n",
             (unsigned long long)test_rand_u64(), (unsigned)(test_rand_u64() % 5000000000u));
    expect_format_bytes("Git LFS pointer", (const unsigned char *)text, strlen(text), "a Git LFS pointer");
    snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": %u}, \"weight_map\": {}}",
             (unsigned)(test_rand_u64() % 1000000u));
    expect_format_bytes("an index", (const unsigned char *)text, strlen(text), "the file is JSON");
}

static void test_malformed_json(void) {
    expect_format("empty header", "", 0, "not valid JSON");
    expect_format("truncated JSON", "{\"a\":", 0, "not valid JSON");
    expect_format("garbage", "hello", 0, "not valid JSON");
    expect_format("trailing bytes", "{} x", 0, "trailing");
    expect_format("two objects", "{}{}", 0, "trailing");
    expect_format("invalid UTF-8", "{\"\xff\":1}", 0, "UTF-8");
    expect_format("overlong UTF-8", "{\"\xc0\xaf\":1}", 0, "UTF-8");
    expect_format("truncated UTF-8 at the end", "{}  \xe2\x82", 0, "UTF-8");
    expect_format("UTF-8 surrogate", "{\"\xed\xa0\x80\":1}", 0, "UTF-8");
    expect_format("raw control character", "{\"a\x01\":1}", 0, "control character");
    {
        /* A NUL inside the header (JSON never allows it raw). */
        size_t size;
        unsigned char *buf = make_file(4, "{}  ", 0, &size);
        buf[10] = 0;
        expect_format_bytes("NUL in header", buf, size, "control character");
        free(buf);
    }
    expect_format("array", "[]", 0, "not a JSON object");
    expect_format("string", "\"x\"", 0, "not a JSON object");
    expect_format("number", "1", 0, "not a JSON object");
    expect_format("null", "null", 0, "not a JSON object");
}

static void test_malformed_entries(void) {
    expect_format("entry is a number", "{\"a\":1}", 0, "entry 'a' is not an object");
    expect_format("entry is an array", "{\"a\":[]}", 0, "entry 'a' is not an object");
    expect_format("missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "has no \"dtype\"");
    expect_format("missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "has no \"shape\"");
    expect_format("missing data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "has no \"data_offsets\"");
    expect_format("dtype twice", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                  4, "key 'dtype' appears twice in \"a\"");
    expect_format("dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                  "\"dtype\" is not a string");
    expect_format("shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4,
                  "\"shape\" is not an array");
    expect_format("data_offsets not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":4}}", 4,
                  "not an array of two");

    /* Valid safetensors dtypes blockfp8 does not handle, and junk: FORMAT naming tensor and dtype. */
    const char *dtypes[] = {"F64", "I64", "U8", "I8", "BOOL", "F8_E5M2", "U16", "f32", "junk", ""};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        char header[200], needle[100];
        snprintf(header, sizeof header, "{\"w.x\":{\"dtype\":\"%s\",\"shape\":[1],\"data_offsets\":[0,8]}}",
                 dtypes[i]);
        snprintf(needle, sizeof needle, "tensor 'w.x': dtype '%s' is not supported", dtypes[i]);
        expect_format(dtypes[i], header, 8, needle);
    }
}

static void test_malformed_shapes(void) {
    expect_format("negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape dim 0");
    expect_format("fractional dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
                  "shape dim 0");
    expect_format("string dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}", 8,
                  "shape dim 1");
    expect_format("null dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,4]}}", 4, "shape dim 0");
    expect_format("dim above 2^53 (E4M3)",
                  "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[0,9007199254740994],\"data_offsets\":[0,0]}}", 0,
                  "shape dim 1");
    expect_format("dim 1e300", "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1e300],\"data_offsets\":[0,1]}}", 1,
                  "shape dim 0");
    expect_format("9 dims", "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
                  "more than 8 dims");
    expect_format("element count overflow",
                  "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,1]}}", 1,
                  "element count overflows");
    expect_format("byte count overflow",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,1]}}", 1,
                  "byte count overflows");
    /* Boundaries that are valid: 8 dims; a 2^53 dim next to a zero dim (zero elements). */
    bfp8_safetensors *f = expect_valid(
        "8 dims", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[1,2,1,2,1,2,1,2],\"data_offsets\":[0,32]}}", 32);
    if (f) {
        const bfp8_tensor *t = bfp8_safetensors_at(f, 0);
        CHECK(t->ndim == 8 && t->shape[7] == 2 && t->nbytes == 32, "8 dims: ndim %d", t->ndim);
    }
    bfp8_safetensors_close(f);
    f = expect_valid("2^53 dim times 0",
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,0],\"data_offsets\":[0,0]}}", 0);
    if (f) CHECK(bfp8_safetensors_at(f, 0)->shape[0] == 9007199254740992ll, "2^53 dim");
    bfp8_safetensors_close(f);
}

static void test_malformed_offsets(void) {
    const char *two = "not an array of two";
    expect_format("one offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4, two);
    expect_format("no offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[]}}", 4, two);
    expect_format("three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, two);
    const char *ints = "data_offsets are not integers";
    expect_format("negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[-4,-4]}}", 4, ints);
    expect_format("fractional offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4.5]}}", 8, ints);
    expect_format("string offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", 4, ints);
    expect_format("offset above 2^53",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[9007199254740994,9007199254740994]}}", 4,
                  ints);
    expect_format("offset 1e300", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 4, ints);
    expect_format("begin > end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
                  "begin 8 > end 4");
    expect_format("end past data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7,
                  "end 8 is past the 7-byte data section");
    expect_format("empty tensor past data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[9,9]}}", 8,
                  "past the 8-byte data section");
    expect_format("byte count too small", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24,
                  "20 bytes in data_offsets, but shape and F32 need 24");
    expect_format("byte count too large", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                  "need 6");
    expect_format("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap");
    expect_format("overlap, reverse order", "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                                           "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
                  "overlap");
    expect_format("same range twice", "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "overlap");
    expect_format("contained range", "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[16],\"data_offsets\":[0,16]},"
                                    "\"c\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[20,22]},"
                                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 24, "overlap");
}

static void test_malformed_names(void) {
    expect_format("duplicate names", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                  "key 'a' appears twice at the top level");
    expect_format("duplicate names after others", "{\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                                                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                                 "\"c\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                                                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                  "key 'b' appears twice at the top level");
    expect_format("escaped NUL in a name", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                          "\"a\\u0000z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                  8, "escaped NUL");
    expect_format("empty name", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name");
    /* Escaped control characters in a name (raw ones are not JSON): refused, and escaped in the message, so that
     * printing it cannot drive a terminal. Every one of 0x01-0x1f, and DEL. */
    for (int c = 1; c <= 0x20; c++) {
        const int code = c == 0x20 ? 0x7f : c;
        char hdr[160], want[64];
        snprintf(hdr, sizeof hdr, "{\"ok\\u%04x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", code);
        snprintf(want, sizeof want, "'ok\\x%02x' holds a control character (0x%02x at byte 2)", code, code);
        expect_format("control character in a name", hdr, 4, want);
    }
    char header[1300], name[1100];
    memset(name, 'n', 1025);
    name[1025] = '\0';
    snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
    expect_format("1025-byte name", header, 4, "1025 bytes (limit 1024)");
    name[1024] = '\0';
    snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
    bfp8_safetensors *f = expect_valid("1024-byte name", header, 4);
    if (f) CHECK(bfp8_safetensors_find(f, name) != NULL, "1024-byte name not found");
    bfp8_safetensors_close(f);

    expect_format("metadata not an object", "{\"__metadata__\":[]}", 0, "\"__metadata__\" is not an object");
    expect_format("metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, "value of 'format'");
    expect_format("metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0,
                  "key '__metadata__' appears twice at the top level");
}

/* Valid files that exercise the permissive corners of the format. */
static void test_valid_corners(void) {
    bfp8_safetensors *f = expect_valid("empty header object", "{}", 0);
    if (f) CHECK(bfp8_safetensors_count(f) == 0 && bfp8_safetensors_at(f, 0) == NULL, "empty: count");
    bfp8_safetensors_close(f);

    /* Metadata, unknown keys, whitespace padding, a scalar, a zero-element tensor on a boundary, tensors out of
     * offset order, offsets that are not multiples of the element size, and a misaligned data section (it starts at
     * 8 + the header's length). */
    const char *header = "{\"__metadata__\":{\"format\":\"pt\"},"
                         "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[3,7],\"extra\":[1]},"
                         "\"z\":{\"dtype\":\"BF16\",\"shape\":[3,0],\"data_offsets\":[7,7]},"
                         "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[7,11]},"
                         "\"e\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[0,3]},"
                         "\"i\":{\"dtype\":\"I32\",\"shape\":[1,1],\"data_offsets\":[11,15]}}  \n";
    size_t size;
    unsigned char *buf = make_file(strlen(header), header, 15, &size);
    size_t data_start = 8 + strlen(header);
    CHECK(data_start % 4 != 0, "test setup: data section should be misaligned (%zu)", data_start);
    float s_expect;
    uint16_t h_expect[2];
    int32_t i_expect;
    memcpy(&s_expect, buf + data_start + 3, 4);
    memcpy(h_expect, buf + data_start + 7, 4);
    memcpy(&i_expect, buf + data_start + 11, 4);
    f = NULL;
    CHECK_OK(bfp8_safetensors_parse(buf, size, &f));
    free(buf); /* parse copies */
    if (f) {
        CHECK(bfp8_safetensors_count(f) == 5, "count %zu", bfp8_safetensors_count(f));
        const char *order[] = {"s", "z", "h", "e", "i"};
        for (size_t k = 0; k < 5; k++) {
            const bfp8_tensor *t = bfp8_safetensors_at(f, k);
            CHECK(t && strcmp(t->name, order[k]) == 0, "order %zu: %s", k, t ? t->name : "(null)");
            CHECK(t && t->data != NULL && (uintptr_t)t->data % bfp8_dtype_size(t->dtype) == 0,
                  "tensor %zu misaligned", k);
        }
        const bfp8_tensor *s = bfp8_safetensors_find(f, "s"), *z = bfp8_safetensors_find(f, "z");
        const bfp8_tensor *h = bfp8_safetensors_find(f, "h"), *i = bfp8_safetensors_find(f, "i");
        CHECK(s && s->ndim == 0 && s->nbytes == 4 && memcmp(s->data, &s_expect, 4) == 0, "scalar");
        CHECK(z && z->ndim == 2 && z->shape[0] == 3 && z->shape[1] == 0 && z->nbytes == 0, "zero-element");
        CHECK(h && h->dtype == BFP8_DTYPE_F16 && ((const uint16_t *)h->data)[0] == h_expect[0] &&
                  ((const uint16_t *)h->data)[1] == h_expect[1],
              "f16 data");
        CHECK(i && i->dtype == BFP8_DTYPE_I32 && ((const int32_t *)i->data)[0] == i_expect, "i32 data");
        CHECK(bfp8_safetensors_find(f, "__metadata__") == NULL && bfp8_safetensors_find(f, "x") == NULL &&
                  bfp8_safetensors_find(f, NULL) == NULL,
              "find of absent names");
    }
    bfp8_safetensors_close(f);
}

static void fill_random(void *data, size_t nbytes) {
    unsigned char *p = data;
    for (size_t i = 0; i < nbytes; i++) p[i] = (unsigned char)(test_rand_u64() >> 56);
}

static bool tensors_equal(const bfp8_tensor *a, const bfp8_tensor *b) {
    if (strcmp(a->name, b->name) != 0 || a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

/* Writes `tensors`, checks the layout independently (header length, padding, data order), reads back. */
static void check_round_trip(const char *label, const bfp8_tensor *tensors, size_t count) {
    char path[256];
    path_in_tmp(path, sizeof path, "round_trip.safetensors");
    CHECK_OK(bfp8_safetensors_write(path, tensors, count));
    CHECK(dir_entries(tmp_dir) == 1, "%s: %d entries in the temp dir (a stray temp file?)", label,
          dir_entries(tmp_dir));

    size_t size = 0;
    unsigned char *bytes = read_bytes(path, &size);
    size_t data_total = 0;
    for (size_t i = 0; i < count; i++) data_total += tensors[i].nbytes;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (bytes && size >= 8 ? bytes[i] : 0);
    CHECK(bytes && size >= 8 && hlen % 8 == 0 && size == 8 + hlen + data_total, "%s: size %zu, header %llu", label,
          size, (unsigned long long)hlen);
    if (bytes && size == 8 + hlen + data_total) {
        CHECK(bytes[8] == '{', "%s: header starts with '%c'", label, bytes[8]);
        size_t off = 8 + hlen;
        for (size_t i = 0; i < count; i++) {
            CHECK(tensors[i].nbytes == 0 || memcmp(bytes + off, tensors[i].data, tensors[i].nbytes) == 0,
                  "%s: data of '%s' not at offset %zu", label, tensors[i].name, off);
            off += tensors[i].nbytes;
        }
    }
    free(bytes);

    bfp8_safetensors *f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    if (f) {
        CHECK(bfp8_safetensors_count(f) == count, "%s: count %zu != %zu", label, bfp8_safetensors_count(f), count);
        for (size_t i = 0; i < count && i < bfp8_safetensors_count(f); i++) {
            const bfp8_tensor *t = bfp8_safetensors_at(f, i);
            CHECK(tensors_equal(t, &tensors[i]), "%s: tensor %zu ('%s') differs", label, i, tensors[i].name);
            CHECK(bfp8_safetensors_find(f, tensors[i].name) == t, "%s: find('%s')", label, tensors[i].name);
            CHECK((uintptr_t)t->data % bfp8_dtype_size(t->dtype) == 0, "%s: '%s' misaligned", label, t->name);
        }
    }
    bfp8_safetensors_close(f);
    remove(path);
}

static void test_round_trip_dtypes(void) {
    const bfp8_dtype dtypes[] = {BFP8_DTYPE_E4M3, BFP8_DTYPE_BF16, BFP8_DTYPE_F16, BFP8_DTYPE_F32, BFP8_DTYPE_I32,
                                 BFP8_DTYPE_UE8M0};
    enum { N = 6 };
    /* An E4M3 tensor of odd byte count first, so later tensors start at offsets that are not multiples of 4 unless
     * the writer's offsets are honoured exactly; every dtype twice with different ranks. */
    bfp8_tensor t[2 * N + 2];
    void *bufs[2 * N + 2] = {0};
    char names[2 * N + 2][32];
    size_t count = 0;
    for (int rep = 0; rep < 2; rep++)
        for (int d = 0; d < N; d++) {
            bfp8_tensor *x = &t[count];
            memset(x, 0, sizeof *x);
            snprintf(names[count], sizeof names[count], "model.layers.%d.%s", rep, bfp8_dtype_name(dtypes[d]));
            x->name = names[count];
            x->dtype = dtypes[d];
            x->ndim = rep == 0 ? 1 : 3;
            int64_t elems = 1;
            for (int k = 0; k < x->ndim; k++) {
                x->shape[k] = 1 + (int64_t)(test_rand_u64() % 37);
                elems *= x->shape[k];
            }
            x->nbytes = (size_t)elems * bfp8_dtype_size(x->dtype);
            bufs[count] = malloc(x->nbytes);
            fill_random(bufs[count], x->nbytes);
            x->data = bufs[count];
            count++;
        }
    /* A scalar and an empty tensor (NULL data is fine when there are no bytes). */
    float scalar = test_randn(3.0f);
    t[count] = (bfp8_tensor){.name = "scalar", .dtype = BFP8_DTYPE_F32, .ndim = 0, .data = &scalar, .nbytes = 4};
    count++;
    t[count] = (bfp8_tensor){.name = "empty", .dtype = BFP8_DTYPE_BF16, .ndim = 2, .shape = {4, 0}, .data = NULL};
    count++;
    check_round_trip("all dtypes", t, count);
    check_round_trip("no tensors", NULL, 0);
    for (size_t i = 0; i < count; i++) free(bufs[i]);
}

static void test_deepseek_pair(void) {
    enum { N = 200, K = 300 };
    uint8_t *w = malloc((size_t)N * K);
    float scales[2 * 3];
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = bfp8_e4m3_from_f32(test_randn(100.0f));
    for (int i = 0; i < 6; i++) scales[i] = fabsf(test_randn(1e-3f)) + 1e-5f;
    bfp8_tensor t[2] = {
        {.name = "layer.weight", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {N, K}, .data = w, .nbytes = N * K},
        {.name = "layer.weight_scale_inv", .dtype = BFP8_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = scales,
         .nbytes = sizeof scales},
    };
    check_round_trip("deepseek pair", t, 2);

    /* Overwriting an existing file replaces it whole. */
    char path[256];
    path_in_tmp(path, sizeof path, "pair.safetensors");
    CHECK_OK(bfp8_safetensors_write(path, t, 2));
    CHECK_OK(bfp8_safetensors_write(path, &t[1], 1));
    bfp8_safetensors *f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    if (f) {
        CHECK(bfp8_safetensors_count(f) == 1 && bfp8_safetensors_find(f, "layer.weight") == NULL, "overwrite");
        const bfp8_tensor *s = bfp8_safetensors_find(f, "layer.weight_scale_inv");
        CHECK(s && s->shape[0] == 2 && s->shape[1] == 3 && memcmp(s->data, scales, sizeof scales) == 0, "scales");
    }
    bfp8_safetensors_close(f);
    remove(path);
    free(w);
}

/* Strictness matched to the Hugging Face reader: one case per rule, next to the closest case that stays valid. */
static void test_strict(void) {
#define ENTRY_A "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"
    /* dtype strings: exact names only (cJSON would read "F32\u0000junk" as "F32"). */
    expect_format("dtype with an escaped NUL and trailing bytes",
                  "{\"a\":{\"dtype\":\"F32\\u0000junk\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "escaped NUL");
    expect_format("dtype with a trailing space", "{\"a\":{\"dtype\":\"F32 \",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                  "dtype 'F32 ' is not supported");
    expect_format("escaped NUL in metadata", "{\"__metadata__\":{\"k\":\"v\\u0000\"}}", 0, "escaped NUL");
    bfp8_safetensors *f = expect_valid("escaped backslash before u0000", "{\"__metadata__\":{\"k\":\"\\\\u0000\"}}", 0);
    bfp8_safetensors_close(f);

    /* The header starts with '{': no byte order mark, no leading whitespace; trailing padding is fine. */
    expect_format("byte order mark", "\xEF\xBB\xBF{}", 0, "byte order mark");
    expect_format("BOM before an entry", "\xEF\xBB\xBF{" ENTRY_A "}}", 4, "byte order mark");
    expect_format("leading space", " {}", 0, "must start with '{'");
    expect_format("leading newline", "\n{" ENTRY_A "}}", 4, "must start with '{'");
    f = expect_valid("trailing padding", "{" ENTRY_A "}}   \n\t ", 4);
    bfp8_safetensors_close(f);

    /* No key twice anywhere. */
    expect_format("metadata key twice", "{\"__metadata__\":{\"k\":\"1\",\"j\":\"0\",\"k\":\"2\"}}", 0,
                  "key 'k' appears twice in \"__metadata__\"");
    expect_format("key twice in an ignored object", "{" ENTRY_A ",\"extra\":{\"x\":1,\"y\":{\"z\":1,\"z\":2}}}}", 4,
                  "key 'z' appears twice in \"a\".\"extra\".\"y\"");
    expect_format("key twice in an array element", "{" ENTRY_A ",\"extra\":[1,{\"q\":1,\"q\":[]}]}}", 4,
                  "key 'q' appears twice in \"a\".\"extra\"[1]");
    {
        /* Many distinct keys are fine; one repeated far apart is found. */
        size_t cap = 16384, used = 0;
        char *h = malloc(cap);
        used += (size_t)snprintf(h + used, cap - used, "{\"__metadata__\":{");
        for (int i = 0; i < 500; i++) used += (size_t)snprintf(h + used, cap - used, "%s\"key%d\":\"v\"", i ? "," : "", i);
        snprintf(h + used, cap - used, "}}");
        f = expect_valid("500 metadata keys", h, 0);
        bfp8_safetensors_close(f);
        snprintf(h + used, cap - used, ",\"key3\":\"w\"}}");
        expect_format("the 3rd of 501 metadata keys repeated last", h, 0, "key 'key3' appears twice");
        free(h);
    }

    /* The tensors cover the data section exactly. */
    expect_format("gap at the start", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                  "bytes [0, 4) of the data section belong to no tensor");
    expect_format("gap between", "{" ENTRY_A "},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
                  "bytes [4, 8) of the data section belong to no tensor (a gap before 'b'");
    expect_format("one trailing byte", "{" ENTRY_A "}}", 5, "1 trailing bytes");
    expect_format("data without tensors", "{}", 3, "3 trailing bytes");
    expect_format("empty tensor inside another", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                                "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8,
                  "overlap");
    f = expect_valid("empty tensors on both ends", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                                  "\"y\":{\"dtype\":\"I32\",\"shape\":[0,2],\"data_offsets\":[0,0]},"
                                                  "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}", 8);
    if (f) CHECK(bfp8_safetensors_count(f) == 3, "empty tensors on both ends: count %zu", bfp8_safetensors_count(f));
    bfp8_safetensors_close(f);

    /* Nesting: 128 levels are fine, 129 are a clear error; brackets inside strings do not count. */
    for (int extra = 126; extra <= 127; extra++) {
        char h[1024];
        size_t used = (size_t)snprintf(h, sizeof h, "{" ENTRY_A ",\"x\":");
        for (int i = 0; i < extra; i++) h[used++] = '[';
        for (int i = 0; i < extra; i++) h[used++] = ']';
        snprintf(h + used, sizeof h - used, "}}");
        if (extra == 126) {
            f = expect_valid("nesting 128 deep", h, 4);
            bfp8_safetensors_close(f);
        } else {
            expect_format("nesting 129 deep", h, 4, "nest more than 128 deep");
        }
    }
    {
        char h[1024];
        size_t used = (size_t)snprintf(h, sizeof h, "{" ENTRY_A ",\"x\":\"\\\"");
        for (int i = 0; i < 300; i++) h[used++] = '[';
        snprintf(h + used, sizeof h - used, "\"}}");
        f = expect_valid("300 brackets inside a string after an escaped quote", h, 4);
        bfp8_safetensors_close(f);
    }

    /* F8_E8M0: UE8M0 exponents, one byte each. */
    f = expect_valid("F8_E8M0", "{\"s\":{\"dtype\":\"F8_E8M0\",\"shape\":[2,3],\"data_offsets\":[0,6]}}", 6);
    if (f) {
        const bfp8_tensor *t = bfp8_safetensors_find(f, "s");
        CHECK(t && t->dtype == BFP8_DTYPE_UE8M0 && t->nbytes == 6 && t->ndim == 2, "F8_E8M0 tensor");
    }
    bfp8_safetensors_close(f);
#undef ENTRY_A
}

/* Whether [p, p + n) lies inside one mapping of `path` in /proc/self/maps. */
static bool mapped_from(const void *p, size_t n, const char *path) {
    char real[PATH_MAX];
    if (!realpath(path, real)) return false;
    FILE *fp = fopen("/proc/self/maps", "r");
    if (!fp) return false;
    char line[PATH_MAX + 256];
    bool found = false;
    while (!found && fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        char name[PATH_MAX] = "";
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &lo, &hi, name) < 2) continue;
        found = strcmp(name, real) == 0 && (uintptr_t)p >= lo && (uintptr_t)p + n <= hi;
    }
    fclose(fp);
    return found;
}

static long max_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* open() maps the file instead of reading it: the data is inside a mapping of the file, a 4.6 GB (sparse) shard
 * opens without its bytes being read, and a header that claims more data than the file holds is FORMAT. */
static void test_mapped(void) {
    char path[256];
    path_in_tmp(path, sizeof path, "mapped.safetensors");
    uint8_t bytes[300];
    fill_random(bytes, sizeof bytes);
    bfp8_tensor t = {.name = "q", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {3, 100}, .data = bytes,
                     .nbytes = sizeof bytes};
    CHECK_OK(bfp8_safetensors_write(path, &t, 1));
    bfp8_safetensors *f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    const bfp8_tensor *q = f ? bfp8_safetensors_find(f, "q") : NULL;
    CHECK(q && memcmp(q->data, bytes, sizeof bytes) == 0, "mapped data");
    CHECK(q && mapped_from(q->data, q->nbytes, path), "tensor data is not inside a mapping of %s", path);
    bfp8_safetensors_close(f);
    remove(path);

    /* A shard-sized file: sparse, so it costs no disk; reading it whole would raise the peak RSS by 4.6 GB. */
    path_in_tmp(path, sizeof path, "big.safetensors");
    const int64_t big = 4600000000ll;
    char header[200];
    int hl = snprintf(header, sizeof header, "{\"big\":{\"dtype\":\"F8_E4M3\",\"shape\":[%lld],\"data_offsets\":[0,%lld]}}",
                      (long long)big, (long long)big);
    while (hl % 8) header[hl++] = ' ';
    FILE *fp = fopen(path, "wb");
    uint64_t hlen = (uint64_t)hl;
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)(hlen >> (8 * i));
    bool made = fp && fwrite(prefix, 1, 8, fp) == 8 && fwrite(header, 1, (size_t)hl, fp) == (size_t)hl &&
                fflush(fp) == 0 && ftruncate(fileno(fp), (off_t)(8 + hlen + (uint64_t)big)) == 0;
    if (fp) fclose(fp);
    if (!made) {
        printf("note: cannot make a %lld-byte sparse file here; the large-shard case is skipped\n", (long long)big);
    } else {
        long before = max_rss_kb();
        f = NULL;
        CHECK_OK(bfp8_safetensors_open(path, &f));
        long grew = max_rss_kb() - before;
        CHECK(grew < 64 * 1024, "opening a %lld-byte file raised the peak RSS by %ld KB", (long long)big, grew);
        const bfp8_tensor *b = f ? bfp8_safetensors_find(f, "big") : NULL;
        CHECK(b && b->nbytes == (size_t)big && ((const uint8_t *)b->data)[big - 1] == 0, "big tensor");
        bfp8_safetensors_close(f);
    }
    remove(path);

    /* The header claims 1 GB that the file does not have: FORMAT from open(), before any data is touched. */
    expect_format("1 GB claimed, 10 bytes present",
                  "{\"t\":{\"dtype\":\"F32\",\"shape\":[268435456],\"data_offsets\":[0,1073741824]}}", 10,
                  "past the 10-byte data section");
}

typedef struct temp_log {
    int calls;
    char first[512];
    bool absent_at_announce; /* announced before it is created: a handler that removes it cannot miss it */
    bool exists_at_second;   /* announced again, by the same name, once it exists */
    bool gone_at_null;       /* renamed or removed by the time NULL is announced */
    bool last_null;
} temp_log;

static void record_temp(const char *temp_path, void *ctx) {
    temp_log *log = ctx;
    if (log->calls == 0 && temp_path) {
        snprintf(log->first, sizeof log->first, "%s", temp_path);
        log->absent_at_announce = access(temp_path, F_OK) != 0;
    }
    if (log->calls == 1)
        log->exists_at_second = temp_path && strcmp(temp_path, log->first) == 0 && access(temp_path, F_OK) == 0;
    if (!temp_path) log->gone_at_null = access(log->first, F_OK) != 0;
    log->last_null = temp_path == NULL;
    log->calls++;
}

static mode_t mode_of(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_mode & 07777 : (mode_t)-1;
}

/* Writing never loses data: modes survive, symlinks are followed, long names work or fail with the whole
 * message, and the temp file (announced through on_temp) is gone after every failure. */
static void test_write_safety(void) {
    char path[1100];
    float v[4] = {1, 2, 3, 4};
    bfp8_tensor t = {.name = "v", .dtype = BFP8_DTYPE_F32, .ndim = 1, .shape = {4}, .data = v, .nbytes = 16};

    /* Modes: a replaced file keeps its own; a new one gets 0666 less the umask. */
    path_in_tmp(path, sizeof path, "mode.safetensors");
    mode_t old_umask = umask(022);
    CHECK_OK(bfp8_safetensors_write(path, &t, 1));
    CHECK(mode_of(path) == 0644, "new file under umask 022: mode %o", (unsigned)mode_of(path));
    const mode_t modes[] = {0600, 0640, 0444};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        chmod(path, modes[i]);
        CHECK_OK(bfp8_safetensors_write(path, &t, 1));
        CHECK(mode_of(path) == modes[i], "overwriting a %o file left %o", (unsigned)modes[i], (unsigned)mode_of(path));
    }
    remove(path);
    umask(077);
    CHECK_OK(bfp8_safetensors_write(path, &t, 1));
    CHECK(mode_of(path) == 0600, "new file under umask 077: mode %o", (unsigned)mode_of(path));
    umask(old_umask);

    /* A symlink is followed: the file it names is replaced (mode kept), the link stays. */
    char link[512];
    path_in_tmp(link, sizeof link, "link.safetensors");
    chmod(path, 0640);
    CHECK(symlink(path, link) == 0, "symlink");
    v[0] = 42;
    CHECK_OK(bfp8_safetensors_write(link, &t, 1));
    struct stat lsb;
    CHECK(lstat(link, &lsb) == 0 && S_ISLNK(lsb.st_mode), "the symlink was replaced");
    CHECK(mode_of(path) == 0640, "target mode %o", (unsigned)mode_of(path));
    bfp8_safetensors *f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    CHECK(f && ((const float *)bfp8_safetensors_find(f, "v")->data)[0] == 42, "the link's target was not written");
    bfp8_safetensors_close(f);
    remove(link);
    remove(path);
    CHECK(dir_entries(tmp_dir) == 0, "mode/symlink cases left %d entries", dir_entries(tmp_dir));

    /* Names of 255 bytes (NAME_MAX) work; 256 fail with the reason at the end of the message. */
    char name[300];
    memset(name, 'n', 255);
    memcpy(name + 255 - 12, ".safetensors", 13);
    path_in_tmp(path, sizeof path, name);
    temp_log log = {0};
    bfp8_write_options opt = {.on_temp = record_temp, .ctx = &log};
    CHECK_OK(bfp8_safetensors_write_ex(path, &t, 1, &opt));
    CHECK(log.calls == 3 && log.absent_at_announce && log.exists_at_second && log.gone_at_null && log.last_null,
          "on_temp: %d calls", log.calls);
    CHECK(strncmp(log.first, tmp_dir, strlen(tmp_dir)) == 0 && strlen(log.first) - strlen(tmp_dir) <= 24 &&
              access(log.first, F_OK) != 0,
          "temp file '%s': not short, not in the destination's directory, or still there", log.first);
    f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    CHECK(f && bfp8_safetensors_count(f) == 1, "255-byte name reads back");
    bfp8_safetensors_close(f);
    remove(path);
    memset(name, 'n', 256);
    memcpy(name + 256 - 12, ".safetensors", 13);
    path_in_tmp(path, sizeof path, name);
    log = (temp_log){0};
    CHECK_STATUS(bfp8_safetensors_write_ex(path, &t, 1, &opt), BFP8_ERR_IO);
    const char *msg = bfp8_last_error();
    const char *reason = strerror(ENAMETOOLONG);
    size_t ml = strlen(msg), rl = strlen(reason);
    CHECK(ml > rl && strcmp(msg + ml - rl, reason) == 0 && strstr(msg, path) == msg,
          "256-byte name: message '%s' does not start with the path and end with '%s'", msg, reason);
    CHECK(log.calls == 3 && log.last_null && log.gone_at_null && dir_entries(tmp_dir) == 0, "256-byte name left %d entries",
          dir_entries(tmp_dir));

    /* A write that fails half-way (RLIMIT_FSIZE: EFBIG) removes its temp file and leaves the old file whole. */
    path_in_tmp(path, sizeof path, "keep.safetensors");
    CHECK_OK(bfp8_safetensors_write(path, &t, 1));
    size_t n_big = 1 << 16;
    uint8_t *big = calloc(n_big, 1);
    bfp8_tensor tb = {.name = "big", .dtype = BFP8_DTYPE_E4M3, .ndim = 1, .shape = {(int64_t)n_big}, .data = big,
                      .nbytes = n_big};
    struct rlimit old_limit, small = {.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
    getrlimit(RLIMIT_FSIZE, &old_limit);
    small.rlim_max = old_limit.rlim_max;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    log = (temp_log){0};
    if (setrlimit(RLIMIT_FSIZE, &small) == 0) {
        bfp8_status st = bfp8_safetensors_write_ex(path, &tb, 1, &opt);
        setrlimit(RLIMIT_FSIZE, &old_limit);
        CHECK(st == BFP8_ERR_IO && strstr(bfp8_last_error(), "write failed"), "EFBIG: %s '%s'", bfp8_status_name(st),
              bfp8_last_error());
        CHECK(log.calls == 3 && log.absent_at_announce && log.exists_at_second && log.gone_at_null && log.last_null,
              "EFBIG: temp '%s' still there (%d calls)", log.first, log.calls);
        CHECK(dir_entries(tmp_dir) == 1, "EFBIG left %d entries", dir_entries(tmp_dir));
        f = NULL;
        CHECK_OK(bfp8_safetensors_open(path, &f));
        CHECK(f && bfp8_safetensors_find(f, "v") && !bfp8_safetensors_find(f, "big"), "the old file was damaged");
        bfp8_safetensors_close(f);
    }
    signal(SIGXFSZ, old_handler);
    free(big);
    remove(path);

    /* A directory we may not write to: the temp file cannot be created, and the message says where. */
    if (geteuid() != 0) {
        char dir[512];
        path_in_tmp(dir, sizeof dir, "ro");
        CHECK(mkdir(dir, 0500) == 0, "mkdir ro");
        snprintf(path, sizeof path, "%s/x.safetensors", dir);
        CHECK_STATUS(bfp8_safetensors_write(path, &t, 1), BFP8_ERR_IO);
        CHECK(strstr(bfp8_last_error(), "cannot create a temp file in") && strstr(bfp8_last_error(), dir),
              "msg: %s", bfp8_last_error());
        CHECK(dir_entries(dir) == 0, "read-only dir has %d entries", dir_entries(dir));
        rmdir(dir);
    }
}

static void test_io_errors(void) {
    char path[256];
    bfp8_safetensors *f = (bfp8_safetensors *)&f;
    path_in_tmp(path, sizeof path, "missing.safetensors");
    CHECK_STATUS(bfp8_safetensors_open(path, &f), BFP8_ERR_IO);
    CHECK(f == NULL && strstr(bfp8_last_error(), path) && strstr(bfp8_last_error(), "No such file"), "msg: %s",
          bfp8_last_error());
    CHECK_STATUS(bfp8_safetensors_open(tmp_dir, &f), BFP8_ERR_IO); /* a directory */
    /* A link to nothing says so (a copied Hugging Face snapshot links to blobs that did not come along). */
    path_in_tmp(path, sizeof path, "dangling.safetensors");
    char target[64];
    snprintf(target, sizeof target, "../blobs/%016llx", (unsigned long long)test_rand_u64());
    CHECK(symlink(target, path) == 0, "symlink");
    CHECK_STATUS(bfp8_safetensors_open(path, &f), BFP8_ERR_IO);
    CHECK(strstr(bfp8_last_error(), path) && strstr(bfp8_last_error(), "a symbolic link whose target is missing"),
          "msg: %s", bfp8_last_error());
    remove(path);

    float v = 1.5f;
    bfp8_tensor t = {.name = "v", .dtype = BFP8_DTYPE_F32, .ndim = 1, .shape = {1}, .data = &v, .nbytes = 4};
    path_in_tmp(path, sizeof path, "no_such_dir/out.safetensors");
    CHECK_STATUS(bfp8_safetensors_write(path, &t, 1), BFP8_ERR_IO);
    CHECK(strstr(bfp8_last_error(), "no_such_dir") != NULL, "msg: %s", bfp8_last_error());
    CHECK(dir_entries(tmp_dir) == 0, "write into a missing dir left %d entries", dir_entries(tmp_dir));

    /* The destination is a directory: refused before a temp file exists. */
    path_in_tmp(path, sizeof path, "a_dir");
    CHECK(mkdir(path, 0700) == 0, "mkdir");
    CHECK_STATUS(bfp8_safetensors_write(path, &t, 1), BFP8_ERR_IO);
    CHECK(strstr(bfp8_last_error(), "is a directory") != NULL, "msg: %s", bfp8_last_error());
    CHECK(dir_entries(tmp_dir) == 1 && dir_entries(path) == 0, "a directory destination left a temp file (%d entries)",
          dir_entries(tmp_dir));
    rmdir(path);

    /* Nor is anything else that is not a regular file (rename() would replace a device node such as /dev/null;
     * a FIFO stands in for it here). */
    path_in_tmp(path, sizeof path, "a_fifo");
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    CHECK_STATUS(bfp8_safetensors_write(path, &t, 1), BFP8_ERR_IO);
    CHECK(strstr(bfp8_last_error(), "not a regular file") != NULL, "msg: %s", bfp8_last_error());
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode) && dir_entries(tmp_dir) == 1, "the FIFO was replaced");
    /* Nor is one read: open() would wait for a writer forever (the alarm turns such a hang into a failure). */
    alarm(20);
    CHECK_STATUS(bfp8_safetensors_open(path, &f), BFP8_ERR_IO);
    alarm(0);
    CHECK(f == NULL && strstr(bfp8_last_error(), "not a regular file"), "msg: %s", bfp8_last_error());
    remove(path);
}

static void test_arguments(void) {
    bfp8_safetensors *f = NULL;
    unsigned char bytes[16] = {0};
    CHECK_STATUS(bfp8_safetensors_open(NULL, &f), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_safetensors_open("x", NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_safetensors_parse(NULL, 16, &f), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_safetensors_parse(bytes, sizeof bytes, NULL), BFP8_ERR_INVALID_ARGUMENT);
    CHECK(bfp8_safetensors_count(NULL) == 0 && bfp8_safetensors_at(NULL, 0) == NULL &&
              bfp8_safetensors_find(NULL, "a") == NULL,
          "NULL file accessors");
    bfp8_safetensors_close(NULL);

    char path[256];
    path_in_tmp(path, sizeof path, "args.safetensors");
    float v[2] = {1, 2};
    const bfp8_tensor good = {.name = "a", .dtype = BFP8_DTYPE_F32, .ndim = 1, .shape = {2}, .data = v, .nbytes = 8};
    CHECK_STATUS(bfp8_safetensors_write(NULL, &good, 1), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_safetensors_write("", &good, 1), BFP8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(bfp8_safetensors_write(path, NULL, 1), BFP8_ERR_INVALID_ARGUMENT);

    char long_name[1100];
    memset(long_name, 'x', 1025);
    long_name[1025] = '\0';
    struct {
        const char *label;
        bfp8_tensor t[2];
        size_t count;
    } bad[] = {
        {"NULL name", {good}, 1},
        {"empty name", {good}, 1},
        {"1025-byte name", {good}, 1},
        {"invalid UTF-8 name", {good}, 1},
        {"control character in a name", {good}, 1},
        {"reserved name", {good}, 1},
        {"unknown dtype", {good}, 1},
        {"negative dtype", {good}, 1},
        {"9 dims", {good}, 1},
        {"negative ndim", {good}, 1},
        {"negative dim", {good}, 1},
        {"nbytes mismatch", {good}, 1},
        {"NULL data", {good}, 1},
        {"duplicate names", {good, good}, 2},
        {"dim overflow", {good}, 1},
    };
    bad[0].t[0].name = NULL;
    bad[1].t[0].name = "";
    bad[2].t[0].name = long_name;
    bad[3].t[0].name = "a\xff";
    bad[4].t[0].name = "a\x1b[0m";
    bad[5].t[0].name = "__metadata__";
    bad[6].t[0].dtype = BFP8_DTYPE_COUNT;
    bad[7].t[0].dtype = (bfp8_dtype)-1;
    bad[8].t[0].ndim = 9;
    bad[9].t[0].ndim = -1;
    bad[10].t[0].shape[0] = -2;
    bad[11].t[0].nbytes = 4;
    bad[12].t[0].data = NULL;
    bad[14].t[0].ndim = 2;
    bad[14].t[0].shape[0] = bad[14].t[0].shape[1] = (int64_t)1 << 40;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bfp8_status st = bfp8_safetensors_write(path, bad[i].t, bad[i].count);
        CHECK(st == BFP8_ERR_INVALID_ARGUMENT && bfp8_last_error()[0], "%s: %s '%s'", bad[i].label,
              bfp8_status_name(st), bfp8_last_error());
    }
    CHECK(dir_entries(tmp_dir) == 0, "rejected writes left %d files", dir_entries(tmp_dir));
}

int main(void) {
    test_seed();
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/bfp8_test_st_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_malformed_prefix();
    test_malformed_json();
    test_malformed_entries();
    test_malformed_shapes();
    test_malformed_offsets();
    test_malformed_names();
    test_valid_corners();
    test_round_trip_dtypes();
    test_deepseek_pair();
    test_io_errors();
    test_arguments();
    test_strict();
    test_mapped();
    test_write_safety();
    remove_tmp_dir();
    return TEST_SUMMARY("safetensors");
}
