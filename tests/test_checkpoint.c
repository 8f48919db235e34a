/* Checkpoints and weight loading: a two-shard checkpoint with its index (a weight and its scales in different
 * shards), every malformed index, the scale formats on load (F32, F8_E8M0, declared UE8M0 and its power-of-two
 * check), and the UE8M0 pipeline end to end against an independent computation. */
#include "check.h"

#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_dir[64];

static void path_in_tmp(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", tmp_dir, name); }

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[1024];
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (remove(path) != 0) remove_tree(path);
    }
    closedir(d);
    rmdir(dir);
}

static bool write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return false;
    bool ok = fputs(text, fp) >= 0;
    return fclose(fp) == 0 && ok;
}

enum { N = 300, K = 260, NB = 3, KB = 3 };

typedef struct layer {
    uint8_t q[N * K];
    float s[NB * KB];        /* fp32 scales */
    uint8_t e[NB * KB];      /* the same magnitudes as UE8M0 exponents */
    float bias[N];
} layer;

static void make_layer(layer *l) {
    for (int i = 0; i < N * K; i++) {
        uint8_t c = (uint8_t)(test_rand_u64() & 0xFF);
        l->q[i] = (c & 0x7F) == 0x7F ? (uint8_t)(c & 0xFE) : c; /* finite codes */
    }
    for (int i = 0; i < NB * KB; i++) {
        l->s[i] = 1e-3f * (1.0f + test_rand_f32());
        l->e[i] = (uint8_t)(117 + test_rand_u64() % 6); /* 2^-10 .. 2^-5 */
    }
    for (int i = 0; i < N; i++) l->bias[i] = test_randn(1.0f);
}

/* shard 1: the weight and an extra tensor; shard 2: its scales (F32 and F8_E8M0 copies) and the bias. */
static void write_two_shards(const layer *l, const char *dir) {
    char p1[512], p2[512], idx[512];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    float norm[K];
    for (int i = 0; i < K; i++) norm[i] = 1.0f + 0.01f * (float)i;
    const bfp8_tensor s1[] = {
        {.name = "layers.0.proj.weight", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {N, K}, .data = (void *)l->q,
         .nbytes = sizeof l->q},
        {.name = "layers.0.norm.weight", .dtype = BFP8_DTYPE_F32, .ndim = 1, .shape = {K}, .data = norm,
         .nbytes = sizeof norm},
        {.name = "layers.1.proj.weight", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {N, K}, .data = (void *)l->q,
         .nbytes = sizeof l->q},
    };
    const bfp8_tensor s2[] = {
        {.name = "layers.0.proj.weight_scale_inv", .dtype = BFP8_DTYPE_F32, .ndim = 2, .shape = {NB, KB},
         .data = (void *)l->s, .nbytes = sizeof l->s},
        {.name = "layers.1.proj.weight_scale_inv", .dtype = BFP8_DTYPE_UE8M0, .ndim = 2, .shape = {NB, KB},
         .data = (void *)l->e, .nbytes = sizeof l->e},
        {.name = "layers.0.proj.bias", .dtype = BFP8_DTYPE_F32, .ndim = 1, .shape = {N}, .data = (void *)l->bias,
         .nbytes = sizeof l->bias},
    };
    CHECK_OK(bfp8_safetensors_write(p1, s1, 3));
    CHECK_OK(bfp8_safetensors_write(p2, s2, 3));
    CHECK(write_text(idx, "{\"metadata\": {\"total_size\": 1},\n \"weight_map\": {\n"
                          "  \"layers.0.proj.weight\": \"model-00001-of-00002.safetensors\",\n"
                          "  \"layers.0.proj.weight_scale_inv\": \"model-00002-of-00002.safetensors\",\n"
                          "  \"layers.0.norm.weight\": \"model-00001-of-00002.safetensors\",\n"
                          "  \"layers.1.proj.weight\": \"model-00001-of-00002.safetensors\",\n"
                          "  \"layers.1.proj.weight_scale_inv\": \"model-00002-of-00002.safetensors\",\n"
                          "  \"layers.0.proj.bias\": \"model-00002-of-00002.safetensors\"}}\n"),
          "write index");
}

static void check_weight(const char *label, const bfp8_weight *w, const uint8_t *q, const float *s,
                         bfp8_scale_format format) {
    bfp8_weight_info info;
    CHECK_OK(bfp8_weight_info_get(w, &info));
    CHECK(info.n == N && info.k == K && info.scale_format == format, "%s: [%lld, %lld] %s", label, (long long)info.n,
          (long long)info.k, bfp8_scale_format_name(info.scale_format));
    const uint8_t *vq;
    bfp8_scales vs;
    CHECK_OK(bfp8_weight_view(w, BFP8_DEVICE_CPU, BFP8_LAYOUT_ROW_MAJOR, &vq, &vs));
    CHECK(memcmp(vq, q, N * K) == 0, "%s: codes differ", label);
    CHECK(memcmp(vs.data, s, sizeof(float) * NB * KB) == 0, "%s: scales differ", label);
}

static void test_two_shards(void) {
    layer *l = malloc(sizeof *l);
    make_layer(l);
    char dir[256], path[512];
    path_in_tmp(dir, sizeof dir, "ckpt");
    CHECK(mkdir(dir, 0700) == 0, "mkdir");
    write_two_shards(l, dir);

    float e_values[NB * KB];
    for (int i = 0; i < NB * KB; i++) e_values[i] = bfp8_ue8m0_to_f32(l->e[i]);

    /* The index file itself and the directory holding it open the same checkpoint. */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    const char *opens[] = {path, dir};
    for (int o = 0; o < 2; o++) {
        bfp8_checkpoint *c = NULL;
        CHECK_OK(bfp8_checkpoint_open(opens[o], &c));
        if (!c) continue;
        CHECK(bfp8_checkpoint_file_count(c) == 3 && bfp8_checkpoint_tensor_count(c) == 6, "%s: %zu files, %zu tensors",
              opens[o], bfp8_checkpoint_file_count(c), bfp8_checkpoint_tensor_count(c));
        CHECK(strstr(bfp8_checkpoint_file_path(c, 0), "model.safetensors.index.json") &&
                  strstr(bfp8_checkpoint_file_path(c, 1), "model-00001-of-00002") &&
                  strstr(bfp8_checkpoint_file_path(c, 2), "model-00002-of-00002") &&
                  bfp8_checkpoint_file_path(c, 3) == NULL,
              "file list");
        bfp8_weight *w = NULL;
        CHECK_OK(bfp8_checkpoint_weight_load(c, "layers.0.proj.weight", NULL, &w));
        if (w) check_weight("fp32 across shards", w, l->q, l->s, BFP8_SCALE_FP32);
        bfp8_weight_free(w);
        w = NULL;
        CHECK_OK(bfp8_checkpoint_weight_load(c, "layers.1.proj.weight", NULL, &w));
        if (w) check_weight("F8_E8M0 scales (auto)", w, l->q, e_values, BFP8_SCALE_UE8M0);
        bfp8_weight_free(w);
        w = NULL;
        const bfp8_weight_load_options as_fp32 = {.declare_format = true, .scale_format = BFP8_SCALE_FP32};
        CHECK_OK(bfp8_checkpoint_weight_load(c, "layers.1.proj.weight", &as_fp32, &w));
        if (w) check_weight("F8_E8M0 scales declared fp32", w, l->q, e_values, BFP8_SCALE_FP32);
        bfp8_weight_free(w);
        w = NULL;
        /* Declared UE8M0, the fp32 scales (not powers of two) are refused, naming the first. */
        const bfp8_weight_load_options as_ue8m0 = {.declare_format = true, .scale_format = BFP8_SCALE_UE8M0};
        CHECK_STATUS(bfp8_checkpoint_weight_load(c, "layers.0.proj.weight", &as_ue8m0, &w), BFP8_ERR_FORMAT);
        CHECK(w == NULL && strstr(bfp8_last_error(), "declared UE8M0") && strstr(bfp8_last_error(), "[0, 0]"),
              "msg: %s", bfp8_last_error());

        const bfp8_tensor *t = NULL;
        CHECK_OK(bfp8_checkpoint_find(c, "layers.0.proj.bias", &t));
        CHECK(t && t->dtype == BFP8_DTYPE_F32 && memcmp(t->data, l->bias, sizeof l->bias) == 0, "bias from shard 2");
        CHECK_STATUS(bfp8_checkpoint_find(c, "nope", &t), BFP8_ERR_NOT_FOUND);
        CHECK(t == NULL, "not found leaves NULL");
        /* Missing tensors are named with the checkpoint they are missing from. */
        CHECK_STATUS(bfp8_checkpoint_weight_load(c, "layers.0.norm.weight", NULL, &w), BFP8_ERR_NOT_FOUND);
        CHECK(strstr(bfp8_last_error(), "'layers.0.norm.weight_scale_inv' in ") &&
                  strstr(bfp8_last_error(), "model.safetensors.index.json"),
              "msg: %s", bfp8_last_error());
        CHECK_STATUS(bfp8_checkpoint_weight_load(c, "layers.9.proj.weight", NULL, &w), BFP8_ERR_NOT_FOUND);
        CHECK(strstr(bfp8_last_error(), "'layers.9.proj.weight' in ") &&
                  strstr(bfp8_last_error(), "model.safetensors.index.json"),
              "msg: %s", bfp8_last_error());
        bfp8_checkpoint_close(c);
    }

    /* A single file is a checkpoint of one file. */
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    bfp8_checkpoint *c = NULL;
    CHECK_OK(bfp8_checkpoint_open(path, &c));
    if (c) {
        CHECK(bfp8_checkpoint_file_count(c) == 1 && bfp8_checkpoint_tensor_count(c) == 3, "single file");
        const bfp8_tensor *t = NULL;
        CHECK_OK(bfp8_checkpoint_find(c, "layers.0.norm.weight", &t));
        bfp8_weight *w = NULL;
        CHECK_STATUS(bfp8_checkpoint_weight_load(c, "layers.0.proj.weight", NULL, &w), BFP8_ERR_NOT_FOUND);
    }
    bfp8_checkpoint_close(c);

    /* A tensor that the index puts in a shard which lacks it. */
    snprintf(path, sizeof path, "%s/lying.index.json", dir);
    write_text(path, "{\"weight_map\": {\"layers.0.proj.weight\": \"model-00002-of-00002.safetensors\"}}");
    c = NULL;
    CHECK_OK(bfp8_checkpoint_open(path, &c));
    const bfp8_tensor *t = NULL;
    if (c) CHECK_STATUS(bfp8_checkpoint_find(c, "layers.0.proj.weight", &t), BFP8_ERR_FORMAT);
    CHECK(strstr(bfp8_last_error(), "which has no such tensor"), "msg: %s", bfp8_last_error());
    bfp8_checkpoint_close(c);

    /* A tensor in two shards (other scales in the second copy): the index names one, but which was meant is
     * unknown, so the shard holding the stray copy is refused, naming both files. */
    float other[NB * KB];
    for (int i = 0; i < NB * KB; i++) other[i] = 1e-3f * (1.0f + test_rand_f32());
    const bfp8_tensor copy[] = {
        {.name = "layers.0.proj.weight", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {N, K}, .data = l->q,
         .nbytes = sizeof l->q},
        {.name = "layers.0.proj.weight_scale_inv", .dtype = BFP8_DTYPE_F32, .ndim = 2, .shape = {NB, KB},
         .data = other, .nbytes = sizeof other},
    };
    snprintf(path, sizeof path, "%s/copy.safetensors", dir);
    CHECK_OK(bfp8_safetensors_write(path, copy, 2));
    snprintf(path, sizeof path, "%s/dup.index.json", dir);
    write_text(path, "{\"weight_map\": {\"layers.0.proj.weight\": \"copy.safetensors\", "
                     "\"layers.0.proj.weight_scale_inv\": \"model-00002-of-00002.safetensors\"}}");
    c = NULL;
    CHECK_OK(bfp8_checkpoint_open(path, &c));
    bfp8_weight *w = NULL;
    if (c) CHECK_STATUS(bfp8_checkpoint_weight_load(c, "layers.0.proj.weight", NULL, &w), BFP8_ERR_FORMAT);
    CHECK(w == NULL && strstr(bfp8_last_error(), "'layers.0.proj.weight_scale_inv' is in ") &&
              strstr(bfp8_last_error(), "copy.safetensors too") && strstr(bfp8_last_error(), "model-00002-of-00002"),
          "msg: %s", bfp8_last_error());
    bfp8_weight_free(w);
    bfp8_checkpoint_close(c);
    /* One file under two spellings is not two copies. */
    write_text(path, "{\"weight_map\": {\"layers.0.proj.weight\": \"./copy.safetensors\", "
                     "\"layers.0.proj.weight_scale_inv\": \"copy.safetensors\"}}");
    c = NULL;
    w = NULL;
    CHECK_OK(bfp8_checkpoint_open(path, &c));
    if (c) CHECK_OK(bfp8_checkpoint_weight_load(c, "layers.0.proj.weight", NULL, &w));
    if (w) check_weight("one file, two spellings", w, l->q, other, BFP8_SCALE_FP32);
    bfp8_weight_free(w);
    bfp8_checkpoint_close(c);
    free(l);
}

/* Every malformed index is FORMAT (or IO for a missing shard) with a message that says what. */
static void test_bad_index(void) {
    char dir[256], path[512], shard[512];
    path_in_tmp(dir, sizeof dir, "bad");
    CHECK(mkdir(dir, 0700) == 0, "mkdir");
    snprintf(shard, sizeof shard, "%s/a.safetensors", dir);
    float v = 1;
    const bfp8_tensor t = {.name = "t", .dtype = BFP8_DTYPE_F32, .ndim = 1, .shape = {1}, .data = &v, .nbytes = 4};
    CHECK_OK(bfp8_safetensors_write(shard, &t, 1));
    snprintf(path, sizeof path, "%s/x.index.json", dir);
    static const struct {
        const char *text;
        bfp8_status status;
        const char *needle;
    } cases[] = {
        {"", BFP8_ERR_FORMAT, "not valid JSON"},
        {"[]", BFP8_ERR_FORMAT, "not a JSON object"},
        {"\xEF\xBB\xBF{\"weight_map\":{}}", BFP8_ERR_FORMAT, "byte order mark"},
        {"{\"metadata\":{}}", BFP8_ERR_FORMAT, "no \"weight_map\""},
        {"{\"weight_map\":[]}", BFP8_ERR_FORMAT, "no \"weight_map\""},
        {"{\"weight_map\":{\"t\":1}}", BFP8_ERR_FORMAT, "is not a string"},
        {"{\"weight_map\":{\"t\":\"a.safetensors\",\"t\":\"a.safetensors\"}}", BFP8_ERR_FORMAT,
         "key 't' appears twice in \"weight_map\""},
        {"{\"weight_map\":{\"t\":\"a.safetensors\"},\"weight_map\":{}}", BFP8_ERR_FORMAT, "appears twice"},
        {"{\"weight_map\":{\"t\":\"../a.safetensors\"}}", BFP8_ERR_FORMAT, "not a relative file name"},
        {"{\"weight_map\":{\"t\":\"/etc/passwd\"}}", BFP8_ERR_FORMAT, "not a relative file name"},
        {"{\"weight_map\":{\"t\":\"\"}}", BFP8_ERR_FORMAT, "not a relative file name"},
        {"{\"weight_map\":{\"t\":\"sub/\"}}", BFP8_ERR_FORMAT, "not a relative file name"},
        {"{\"weight_map\":{\"\":\"a.safetensors\"}}", BFP8_ERR_FORMAT, "empty tensor name"},
        {"{\"weight_map\":{\"t\":\"a.safetensors\\u0000x\"}}", BFP8_ERR_FORMAT, "escaped NUL"},
        {"{\"weight_map\":{\"t\":\"missing.safetensors\"}}", BFP8_ERR_IO, "missing.safetensors"},
        {"{\"weight_map\":{\"t\":\"a.safetensors\"}} x", BFP8_ERR_FORMAT, "trailing bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(write_text(path, cases[i].text), "write index %zu", i);
        bfp8_checkpoint *c = (bfp8_checkpoint *)&c;
        bfp8_status st = bfp8_checkpoint_open(path, &c);
        CHECK(st == cases[i].status && c == NULL && strstr(bfp8_last_error(), cases[i].needle) &&
                  strstr(bfp8_last_error(), path),
              "index %zu '%s': %s '%s'", i, cases[i].text, bfp8_status_name(st), bfp8_last_error());
    }
    /* The closest valid index, and a directory without either file name. */
    CHECK(write_text(path, "{\"weight_map\":{\"t\":\"a.safetensors\"}}"), "write index");
    bfp8_checkpoint *c = NULL;
    CHECK_OK(bfp8_checkpoint_open(path, &c));
    bfp8_checkpoint_close(c);
    CHECK_STATUS(bfp8_checkpoint_open(dir, &c), BFP8_ERR_NOT_FOUND);
    CHECK(strstr(bfp8_last_error(), "model.safetensors.index.json"), "msg: %s", bfp8_last_error());
    CHECK_STATUS(bfp8_checkpoint_open(NULL, &c), BFP8_ERR_INVALID_ARGUMENT);
    /* An index naming 200000 distinct shards (none there) fails on the first missing one at once: a search per
     * entry through the shards seen so far took minutes (the alarm turns that into a failure). */
    enum { MANY = 200000 };
    const size_t cap = (size_t)MANY * 48 + 64;
    char *big = malloc(cap);
    if (big) {
        size_t used = (size_t)snprintf(big, cap, "{\"weight_map\": {");
        const unsigned salt = (unsigned)(test_rand_u64() % 1000);
        for (int i = 0; i < MANY; i++)
            used += (size_t)snprintf(big + used, cap - used, "%s\"t%d\": \"s%u-%d.safetensors\"", i ? ", " : "", i,
                                     salt, i);
        snprintf(big + used, cap - used, "}}");
        snprintf(path, sizeof path, "%s/many.index.json", dir);
        CHECK(write_text(path, big), "write index");
        alarm(30);
        CHECK_STATUS(bfp8_checkpoint_open(path, &c), BFP8_ERR_IO);
        alarm(0);
        char want[64];
        snprintf(want, sizeof want, "/s%u-0.safetensors: No such file", salt);
        CHECK(strstr(bfp8_last_error(), want), "msg: %s", bfp8_last_error());
        free(big);
    }
    /* A snapshot copied without following its links: the index and a shard link to blobs that are not there. Each
     * is named, as a link to nothing (not "a directory without model.safetensors.index.json"). */
    char snap[512], link[600], target[64];
    snprintf(snap, sizeof snap, "%s/snapshot", dir);
    CHECK(mkdir(snap, 0700) == 0, "mkdir");
    snprintf(target, sizeof target, "../../blobs/%016llx", (unsigned long long)test_rand_u64());
    snprintf(link, sizeof link, "%s/model.safetensors.index.json", snap);
    CHECK(symlink(target, link) == 0, "symlink");
    CHECK_STATUS(bfp8_checkpoint_open(snap, &c), BFP8_ERR_IO);
    CHECK(strstr(bfp8_last_error(), link) && strstr(bfp8_last_error(), "a symbolic link whose target is missing"),
          "msg: %s", bfp8_last_error());
    remove(link);
    CHECK(write_text(link, "{\"weight_map\":{\"t\":\"model-1.safetensors\"}}"), "write index");
    snprintf(link, sizeof link, "%s/model-1.safetensors", snap);
    CHECK(symlink(target, link) == 0, "symlink");
    CHECK_STATUS(bfp8_checkpoint_open(snap, &c), BFP8_ERR_IO);
    CHECK(strstr(bfp8_last_error(), link) && strstr(bfp8_last_error(), "a symbolic link whose target is missing"),
          "msg: %s", bfp8_last_error());
    /* A FIFO named like an index is refused, not waited on for a writer (the alarm turns a hang into a failure). */
    snprintf(path, sizeof path, "%s/fifo.index.json", dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    alarm(20);
    CHECK_STATUS(bfp8_checkpoint_open(path, &c), BFP8_ERR_IO);
    alarm(0);
    CHECK(strstr(bfp8_last_error(), "not a regular file") && strstr(bfp8_last_error(), path), "msg: %s",
          bfp8_last_error());
    path_in_tmp(path, sizeof path, "nothing-here");
    CHECK_STATUS(bfp8_checkpoint_open(path, &c), BFP8_ERR_IO);
}

/* Scale formats on load from one file: F8_E8M0 exponents 0 and 255 refused; declared UE8M0 accepts exactly the
 * powers of two in [2^-126, 2^127]; the old bfp8_weight_load is auto. */
static void test_scale_formats(void) {
    layer *l = malloc(sizeof *l);
    make_layer(l);
    char path[512];
    path_in_tmp(path, sizeof path, "formats.safetensors");
    float pow2[NB * KB];
    for (int i = 0; i < NB * KB; i++) pow2[i] = bfp8_ue8m0_to_f32(l->e[i]);
    bfp8_tensor t[2] = {
        {.name = "w", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {N, K}, .data = l->q, .nbytes = sizeof l->q},
        {.name = "w_scale_inv", .dtype = BFP8_DTYPE_F32, .ndim = 2, .shape = {NB, KB}, .data = pow2,
         .nbytes = sizeof pow2},
    };
    const bfp8_weight_load_options as_ue8m0 = {.declare_format = true, .scale_format = BFP8_SCALE_UE8M0};
    /* Boundary values: the smallest and largest UE8M0 scales pass; their neighbours fail. */
    static const struct {
        float value;
        bool ok;
    } probes[] = {
        {0x1p-126f, true}, {0x1p127f, true}, {1.0f, true}, {0.5f, true},
        {0x1p-127f, false}, {0.75f, false}, {-1.0f, false}, {0.0f, false}, {INFINITY, false}, {NAN, false},
        {0x1.000002p0f, false},
    };
    for (size_t i = 0; i <= sizeof probes / sizeof probes[0]; i++) {
        if (i > 0) pow2[4] = probes[i - 1].value;
        CHECK_OK(bfp8_safetensors_write(path, t, 2));
        bfp8_safetensors *f = NULL;
        CHECK_OK(bfp8_safetensors_open(path, &f));
        bfp8_weight *w = NULL;
        bfp8_status st = f ? bfp8_weight_load_ex(f, "w", &as_ue8m0, &w) : BFP8_ERR_IO;
        bool want_ok = i == 0 || probes[i - 1].ok;
        CHECK((st == BFP8_OK) == want_ok && (want_ok || (st == BFP8_ERR_FORMAT && strstr(bfp8_last_error(), "[1, 1]"))),
              "declared UE8M0 with scale %g: %s '%s'", i ? (double)probes[i - 1].value : 0.0, bfp8_status_name(st),
              bfp8_last_error());
        if (w && i == 0) check_weight("declared UE8M0", w, l->q, pow2, BFP8_SCALE_UE8M0);
        bfp8_weight_free(w);
        /* Without the declaration the same file is fp32, whatever the values. */
        w = NULL;
        if (f) CHECK_OK(bfp8_weight_load(f, "w", &w));
        if (w) {
            bfp8_weight_info info;
            bfp8_weight_info_get(w, &info);
            CHECK(info.scale_format == BFP8_SCALE_FP32, "auto with F32 scales is fp32");
        }
        bfp8_weight_free(w);
        bfp8_safetensors_close(f);
    }

    /* F8_E8M0: every exponent in [1, 254] loads; 0 and 255 are refused with the position. */
    t[1].dtype = BFP8_DTYPE_UE8M0;
    t[1].data = l->e;
    t[1].nbytes = sizeof l->e;
    const uint8_t edge[] = {1, 254, 0, 255};
    for (size_t i = 0; i < sizeof edge; i++) {
        l->e[7] = edge[i];
        CHECK_OK(bfp8_safetensors_write(path, t, 2));
        bfp8_safetensors *f = NULL;
        CHECK_OK(bfp8_safetensors_open(path, &f));
        bfp8_weight *w = NULL;
        bfp8_status st = f ? bfp8_weight_load(f, "w", &w) : BFP8_ERR_IO;
        bool want_ok = edge[i] != 0 && edge[i] != 255;
        CHECK((st == BFP8_OK) == want_ok && (want_ok || strstr(bfp8_last_error(), "[2, 1]")),
              "F8_E8M0 exponent %u: %s '%s'", edge[i], bfp8_status_name(st), bfp8_last_error());
        bfp8_weight_free(w);
        bfp8_safetensors_close(f);
    }
    /* Any other scale dtype is a format error naming both. */
    t[1].dtype = BFP8_DTYPE_I32;
    t[1].shape[1] = 1;
    t[1].nbytes = 4 * NB;
    t[1].data = pow2;
    CHECK_OK(bfp8_safetensors_write(path, t, 2));
    bfp8_safetensors *f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    bfp8_weight *w = NULL;
    if (f) CHECK_STATUS(bfp8_weight_load(f, "w", &w), BFP8_ERR_FORMAT);
    CHECK(strstr(bfp8_last_error(), "F32 or F8_E8M0 [3, 3]"), "msg: %s", bfp8_last_error());
    bfp8_safetensors_close(f);
    remove(path);
    free(l);
}

/* The UE8M0 pipeline: a weight loaded with UE8M0 scales makes bfp8_linear quantize x with UE8M0 scales too. The
 * expected y is computed here from bfp8_quantize_act (UE8M0) and the block formula in double. */
static void test_ue8m0_pipeline(void) {
    layer *l = malloc(sizeof *l);
    make_layer(l);
    enum { M = 5 };
    char path[512];
    path_in_tmp(path, sizeof path, "ue8m0.safetensors");
    const bfp8_tensor t[2] = {
        {.name = "w", .dtype = BFP8_DTYPE_E4M3, .ndim = 2, .shape = {N, K}, .data = l->q, .nbytes = sizeof l->q},
        {.name = "w_scale_inv", .dtype = BFP8_DTYPE_UE8M0, .ndim = 2, .shape = {NB, KB}, .data = l->e,
         .nbytes = sizeof l->e},
    };
    CHECK_OK(bfp8_safetensors_write(path, t, 2));
    bfp8_safetensors *f = NULL;
    CHECK_OK(bfp8_safetensors_open(path, &f));
    bfp8_weight *w = NULL;
    if (f) CHECK_OK(bfp8_weight_load(f, "w", &w));
    float x[M * K], y[M * N], sa[M * KB];
    uint8_t qa[M * K];
    for (int i = 0; i < M * K; i++) x[i] = test_randn(3.0f);
    bfp8_scales as;
    CHECK_OK(bfp8_scales_init(&as, BFP8_SCALE_UE8M0, BFP8_LAYOUT_ROW_MAJOR, M, KB, sa));
    CHECK_OK(bfp8_quantize_act(x, BFP8_DTYPE_F32, M, K, qa, &as, NULL));
    for (int i = 0; i < M * N; i++) y[i] = NAN;
    bfp8_dispatcher *d = NULL;
    CHECK_OK(bfp8_dispatcher_create_default(&d));
    if (d && w) {
        CHECK_OK(bfp8_dispatcher_set_policy(d, BFP8_POLICY_STRICT, "ref"));
        CHECK_OK(bfp8_weight_prepare(w, d, NULL));
        const bfp8_linear_args a = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = M, .y = y, .y_dtype = BFP8_DTYPE_F32};
        CHECK_OK(bfp8_linear(d, w, &a));
        double worst = 0;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double acc = 0;
                for (int kb = 0; kb < KB; kb++) {
                    double part = 0;
                    for (int k = kb * 128; k < K && k < (kb + 1) * 128; k++)
                        part += (double)bfp8_e4m3_to_f32(qa[m * K + k]) * bfp8_e4m3_to_f32(l->q[n * K + k]);
                    acc += part * sa[m * KB + kb] * bfp8_ue8m0_to_f32(l->e[(n / 128) * KB + kb]);
                }
                double err = fabs((double)y[m * N + n] - acc) / (fabs(acc) + 1e-30);
                if (!(err <= worst)) worst = err;
            }
        CHECK(worst <= 1e-6, "UE8M0 pipeline: worst relative error %.3g vs activations quantized with UE8M0", worst);
        for (int i = 0; i < M * KB; i++) {
            uint32_t u;
            memcpy(&u, &sa[i], 4);
            CHECK((u & 0x7FFFFF) == 0, "activation scale %d is not a power of two", i);
        }
    }
    bfp8_dispatcher_free(d);
    bfp8_weight_free(w);
    bfp8_safetensors_close(f);
    remove(path);
    free(l);
}

int main(void) {
    test_seed();
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/bfp8_test_ckpt_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_two_shards();
    test_bad_index();
    test_scale_formats();
    test_ue8m0_pipeline();
    remove_tree(tmp_dir);
    return TEST_SUMMARY("checkpoint");
}
