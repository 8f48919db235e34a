#!/bin/sh
# `make install` as a user of the library meets it: install into a temporary DESTDIR with PREFIX=/usr, check what
# landed there (headers, libblockfp8.so.X.Y.Z with SONAME libblockfp8.so.MAJOR.MINOR and its links, libblockfp8.a, the
# CLI, blockfp8.pc), ask pkg-config for the flags with PKG_CONFIG_SYSROOT_DIR/PKG_CONFIG_PATH pointed there, build
# a small C program against the shared library and against the static one and run both, then `make uninstall`.
# Usage: sh tests/install-test.sh MAKE BUILD_DIR CC      Closing line: "install: N passed, N failed".
set -u
make_cmd=${1:-make}
build=${2:-build}
cc=${3:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bfp8-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/dest
. "$(dirname "$0")/harness.sh"
fail_show=$tmp/log
fail_lines=12
check() { # check DESCRIPTION COMMAND...: passes when the command succeeds
    what=$1
    shift
    if "$@" >"$tmp/log" 2>&1; then pass; else fail "$what"; fi
}
finish() {
    echo "install: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}

version=$(sed -n 's/^#define BFP8_VERSION "\([0-9.]*\)".*/\1/p' include/blockfp8.h)
abi=$(echo "$version" | cut -d. -f1-2)
if ! $make_cmd --no-print-directory install DESTDIR="$dest" PREFIX=/usr BUILD="$build" >"$tmp/log" 2>&1; then
    fail "make install DESTDIR=$dest PREFIX=/usr"
    finish
fi
pass
lib=$dest/usr/lib

# --- what landed -------------------------------------------------------------------------------------------------
for h in include/*.h; do
    check "installed $(basename "$h")" cmp "$h" "$dest/usr/include/$(basename "$h")"
done
check "libblockfp8.so.$version is a file" test -f "$lib/libblockfp8.so.$version" -a ! -L "$lib/libblockfp8.so.$version"
check "libblockfp8.so.$abi -> libblockfp8.so.$version" \
    test "$(readlink "$lib/libblockfp8.so.$abi")" = "libblockfp8.so.$version"
check "libblockfp8.so -> libblockfp8.so.$abi" test "$(readlink "$lib/libblockfp8.so")" = "libblockfp8.so.$abi"
check "SONAME libblockfp8.so.$abi" \
    sh -c "readelf -d '$lib/libblockfp8.so.$version' | grep -q 'SONAME.*\[libblockfp8.so.$abi\]'"
check "libblockfp8.a" test -f "$lib/libblockfp8.a"
check "blockfp8.pc" test -f "$lib/pkgconfig/blockfp8.pc"
check "the installed CLI runs" sh -c "'$dest/usr/bin/blockfp8' --version | grep -q 'blockfp8 $version'"
sed -n 's/^Libs.private: *//p' "$lib/pkgconfig/blockfp8.pc" >"$tmp/private"
check "Libs.private has cJSON and -lpthread -lm" grep -qE -- '-lcjson.*-lpthread -lm' "$tmp/private"
if grep -q -- '-lcudart_static' "$tmp/private"; then
    check "Libs.private has the CUDA flags" grep -qE -- '-L[^ ]+ -lcudart_static -ldl -lrt -lstdc\+\+' "$tmp/private"
fi

# --- pkg-config, as the issue's "done when" asks ----------------------------------------------------------------
export PKG_CONFIG_SYSROOT_DIR="$dest" PKG_CONFIG_PATH="$lib/pkgconfig"
check "pkg-config --modversion blockfp8 = $version" test "$(pkg-config --modversion blockfp8)" = "$version"
flags=$(pkg-config --cflags --libs blockfp8 | sed "s/ *$//")
check "pkg-config --cflags --libs: '$flags'" test "$flags" = "-I$dest/usr/include -L$lib -lblockfp8"

# A program of the public API only: quantize a weight, run bfp8_linear on the CPU through the default dispatcher,
# compare with the fp32 product; a failing call must come with a message.
cat >"$tmp/prog.c" <<'EOF'
#include <blockfp8.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    enum { M = 3, N = 130, K = 300 };
    static float x[M * K], w[N * K], y[M * N];
    unsigned s = 12345;
    for (int i = 0; i < M * K; i++) x[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < N * K; i++) w[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < M * N; i++) y[i] = NAN;
    bfp8_weight *wt = NULL;
    bfp8_status st = bfp8_weight_quantize(w, BFP8_DTYPE_F32, N, K, BFP8_SCALE_FP32, &wt, NULL);
    bfp8_linear_args a = {.x = x, .x_dtype = BFP8_DTYPE_F32, .m = M, .y = y, .y_dtype = BFP8_DTYPE_F32,
                          .device = BFP8_DEVICE_CPU};
    if (st == BFP8_OK) st = bfp8_linear(NULL, wt, &a);
    if (st != BFP8_OK) {
        fprintf(stderr, "%s: %s\n", bfp8_status_name(st), bfp8_last_error());
        return 1;
    }
    double num = 0, den = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double exact = 0;
            for (int k = 0; k < K; k++) exact += (double)x[m * K + k] * w[n * K + k];
            num += (y[m * N + n] - exact) * (y[m * N + n] - exact);
            den += exact * exact;
        }
    bfp8_weight_free(wt);
    if (!(sqrt(num / den) < 0.05)) {
        fprintf(stderr, "relative error %g (NaN: an output not written)\n", sqrt(num / den));
        return 1;
    }
    /* Errors reach the caller with their message. */
    if (bfp8_linear(NULL, NULL, &a) != BFP8_ERR_INVALID_ARGUMENT || !bfp8_last_error()[0]) return 1;
    printf("ok %s\n", BFP8_VERSION);
    return 0;
}
EOF

# Shared: the program needs libblockfp8.so.MAJOR.MINOR and finds it in the DESTDIR.
# shellcheck disable=SC2086 # the flags are lists
if $cc -std=c11 -o "$tmp/prog_shared" "$tmp/prog.c" $flags -lm >"$tmp/log" 2>&1; then
    pass
    check "the shared program needs libblockfp8.so.$abi" \
        sh -c "readelf -d '$tmp/prog_shared' | grep -q 'NEEDED.*\[libblockfp8.so.$abi\]'"
    check "the shared program runs" env LD_LIBRARY_PATH="$lib" "$tmp/prog_shared"
else
    fail "compile against the shared library: $cc prog.c $flags"
fi

# A backend author's program: blockfp8_backend.h, a mock backend in an empty dispatcher, one GEMM through it.
cat >"$tmp/backend.c" <<'EOF'
#include <blockfp8_backend.h>
#include <stdio.h>

static int calls;
static bfp8_status mock_gemm(const bfp8_backend *self, const bfp8_gemm_args *args) {
    (void)self, (void)args;
    calls++;
    return BFP8_OK;
}

int main(void) {
    static const bfp8_backend mock = {
        .name = "mock",
        .caps = {.device = BFP8_DEVICE_CPU, .out_dtypes = BFP8_BIT(BFP8_DTYPE_F32),
                 .scale_formats = BFP8_BIT(BFP8_SCALE_FP32), .a_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR),
                 .b_layouts = BFP8_BIT(BFP8_LAYOUT_ROW_MAJOR)},
        .gemm = mock_gemm,
    };
    static unsigned char a[2 * 128], b[3 * 128];
    static float sa[2] = {1, 1}, sb[1] = {1}, y[2 * 3];
    bfp8_dispatcher *d = NULL;
    bfp8_gemm_args g = {.m = 2, .n = 3, .k = 128, .a = a, .b = b, .y = y, .y_dtype = BFP8_DTYPE_F32,
                        .device = BFP8_DEVICE_CPU};
    bfp8_status st = bfp8_dispatcher_create(&d);
    if (st == BFP8_OK) st = bfp8_dispatcher_add(d, &mock);
    if (st == BFP8_OK) st = bfp8_scales_init(&g.a_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 2, 1, sa);
    if (st == BFP8_OK) st = bfp8_scales_init(&g.b_scales, BFP8_SCALE_FP32, BFP8_LAYOUT_ROW_MAJOR, 1, 1, sb);
    if (st == BFP8_OK) st = bfp8_gemm(d, &g);
    bfp8_dispatcher_free(d);
    if (st != BFP8_OK || calls != 1) {
        fprintf(stderr, "%s (%d calls): %s\n", bfp8_status_name(st), calls, bfp8_last_error());
        return 1;
    }
    printf("ok\n");
    return 0;
}
EOF
# shellcheck disable=SC2086
if $cc -std=c11 -Wall -Werror -o "$tmp/backend" "$tmp/backend.c" $flags >"$tmp/log" 2>&1; then
    pass
    check "a mock backend through blockfp8_backend.h runs" env LD_LIBRARY_PATH="$lib" "$tmp/backend"
else
    fail "compile a backend against the installed blockfp8_backend.h: $cc backend.c $flags"
fi

# Static: libblockfp8.a and Libs.private. PKG_CONFIG_SYSROOT_DIR would put the DESTDIR before the CUDA -L path
# too, so the prefix is moved instead.
unset PKG_CONFIG_SYSROOT_DIR
static=$(pkg-config --define-variable=prefix="$dest/usr" --static --cflags --libs blockfp8 |
    sed 's/\(^\| \)-lblockfp8\( \|$\)/\1-l:libblockfp8.a\2/')
# shellcheck disable=SC2086
if $cc -std=c11 -o "$tmp/prog_static" "$tmp/prog.c" $static >"$tmp/log" 2>&1; then
    pass
    check "the static program does not need libblockfp8.so" \
        sh -c "! readelf -d '$tmp/prog_static' | grep -q 'NEEDED.*libblockfp8'"
    check "the static program runs" "$tmp/prog_static"
else
    fail "compile against the static library: $cc prog.c $static"
fi

# --- uninstall ---------------------------------------------------------------------------------------------------
if $make_cmd --no-print-directory uninstall DESTDIR="$dest" PREFIX=/usr BUILD="$build" >"$tmp/log" 2>&1; then
    pass
    find "$dest" ! -type d >"$tmp/left"
    cp "$tmp/left" "$tmp/log"
    check "make uninstall leaves no file" test ! -s "$tmp/left"
else
    fail "make uninstall"
fi
finish
