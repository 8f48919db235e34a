/* libFuzzer target for the safetensors reader (and, on every input it accepts, the writer).
 *
 * For each input: parse it; if accepted, read every byte of every tensor through its dtype's element type (so
 * UBSan sees any misaligned pointer) and write the tensors out, open the written file and require the same
 * tensors back. A rejected input must leave *out NULL and an error message. Any violation traps.
 * The round-trip file lives in /dev/shm when available (fsync there costs nothing), one per process. */
#include "blockfp8.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_REQUIRE(cond, ...)                                                                                  \
    do {                                                                                                         \
        if (!(cond)) {                                                                                           \
            fprintf(stderr, "fuzz_safetensors: %s failed: ", #cond);                                            \
            fprintf(stderr, __VA_ARGS__);                                                                        \
            fprintf(stderr, "\n");                                                                               \
            __builtin_trap();                                                                                    \
        }                                                                                                        \
    } while (0)

static char round_trip_path[256];

static const char *fuzz_round_trip_path(void) {
    if (!round_trip_path[0]) {
        const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        snprintf(round_trip_path, sizeof round_trip_path, "%s/fuzz_safetensors.%ld.safetensors", dir, (long)getpid());
    }
    return round_trip_path;
}

static void fuzz_cleanup(void) {
    if (round_trip_path[0]) unlink(round_trip_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    atexit(fuzz_cleanup);
    return 0;
}

/* Sums every element through the dtype's own type: faults on a bad pointer, UBSan flags misalignment. */
static uint64_t fuzz_touch(const bfp8_tensor *t) {
    size_t elem = bfp8_dtype_size(t->dtype);
    FUZZ_REQUIRE(elem > 0 && t->nbytes % elem == 0, "tensor '%s' dtype %d nbytes %zu", t->name, (int)t->dtype,
                 t->nbytes);
    FUZZ_REQUIRE(t->data != NULL && (uintptr_t)t->data % elem == 0, "tensor '%s' data %p", t->name, t->data);
    size_t n = t->nbytes / elem;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        switch (elem) {
        case 1: sum += ((const uint8_t *)t->data)[i]; break;
        case 2: sum += ((const uint16_t *)t->data)[i]; break;
        default: sum += ((const uint32_t *)t->data)[i]; break;
        }
    }
    return sum;
}

static void fuzz_round_trip(const bfp8_safetensors *f) {
    size_t count = bfp8_safetensors_count(f);
    bfp8_tensor *copy = malloc((count ? count : 1) * sizeof *copy);
    FUZZ_REQUIRE(copy != NULL, "malloc");
    for (size_t i = 0; i < count; i++) copy[i] = *bfp8_safetensors_at(f, i);

    const char *path = fuzz_round_trip_path();
    bfp8_status st = bfp8_safetensors_write(path, copy, count);
    FUZZ_REQUIRE(st == BFP8_OK, "writing back an accepted file: %s", bfp8_last_error());
    bfp8_safetensors *g = NULL;
    st = bfp8_safetensors_open(path, &g);
    FUZZ_REQUIRE(st == BFP8_OK, "reading back a written file: %s", bfp8_last_error());
    FUZZ_REQUIRE(bfp8_safetensors_count(g) == count, "count %zu != %zu", bfp8_safetensors_count(g), count);
    for (size_t i = 0; i < count; i++) {
        const bfp8_tensor *a = &copy[i], *b = bfp8_safetensors_at(g, i);
        FUZZ_REQUIRE(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->ndim == b->ndim &&
                         a->nbytes == b->nbytes,
                     "tensor %zu '%s' header differs", i, a->name);
        for (int d = 0; d < a->ndim; d++) FUZZ_REQUIRE(a->shape[d] == b->shape[d], "'%s' dim %d", a->name, d);
        FUZZ_REQUIRE(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0, "'%s' data differs", a->name);
        FUZZ_REQUIRE(bfp8_safetensors_find(g, a->name) == b, "find('%s')", a->name);
    }
    bfp8_safetensors_close(g);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bfp8_safetensors *f = (bfp8_safetensors *)&f; /* poisoned: a failure must reset it */
    bfp8_status st = bfp8_safetensors_parse(data, size, &f);
    if (st != BFP8_OK) {
        FUZZ_REQUIRE(f == NULL && bfp8_last_error()[0] != '\0', "failure without NULL out or message");
        FUZZ_REQUIRE(st == BFP8_ERR_FORMAT || st == BFP8_ERR_OUT_OF_MEMORY, "status %d: %s", (int)st,
                     bfp8_last_error());
        return 0;
    }
    volatile uint64_t sink = 0;
    for (size_t i = 0; i < bfp8_safetensors_count(f); i++) {
        const bfp8_tensor *t = bfp8_safetensors_at(f, i);
        FUZZ_REQUIRE(t->name != NULL && t->name[0] != '\0', "tensor %zu has no name", i);
        FUZZ_REQUIRE(bfp8_safetensors_find(f, t->name) == t, "find('%s') does not return it", t->name);
        sink += fuzz_touch(t);
    }
    (void)sink;
    fuzz_round_trip(f);
    bfp8_safetensors_close(f);
    return 0;
}
