#!/bin/sh
# What blockfp8 needs, checked or installed. `make` and `make test` only check (and say what is missing and how to
# get it); `make deps` installs (Debian/Ubuntu, as root).
#   --check-build : cJSON (required), compiled and linked with $CC $CJSON_CFLAGS $CJSON_LIBS as the Makefile does
#   --check-test  : the above, plus python3 with numpy + ml_dtypes (cross-checks), clang with libFuzzer (fuzz stage,
#                   clang build) and pkg-config (install test)
#   --all         : installs whatever of those is missing, and the OpenBLAS runtime (the optional bench baseline,
#                   loaded at run time only by `blockfp8 bench --baseline openblas`)
set -eu
mode=${1:---all}
CC=${CC:-cc}
CJSON_CFLAGS=${CJSON_CFLAGS:--I/usr/include/cjson}
CJSON_LIBS=${CJSON_LIBS:--lcjson}
CLANG=${CLANG:-clang}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bfp8-deps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# Each check is what the build does, so a header or library found through CPATH/LIBRARY_PATH counts.
have_cjson() {
    printf '#include <cJSON.h>\nint main(void) { cJSON_Delete(cJSON_CreateNull()); return 0; }\n' >"$tmp/cjson.c"
    # shellcheck disable=SC2086 # the flags are lists
    $CC $CJSON_CFLAGS -o "$tmp/cjson" "$tmp/cjson.c" $CJSON_LIBS >/dev/null 2>&1
}
have_python() { python3 -c 'import numpy, ml_dtypes' >/dev/null 2>&1; }
have_fuzzer() {
    printf '#include <stddef.h>\n#include <stdint.h>\n%s\n' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' >"$tmp/fuzz.c"
    "$CLANG" -fsanitize=fuzzer -o "$tmp/fuzz" "$tmp/fuzz.c" >/dev/null 2>&1
}
have_pkgconfig() { pkg-config --version >/dev/null 2>&1; }
have_openblas_runtime() { /sbin/ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0'; }

# missing NAME DEBIAN_PACKAGES WHAT_FOR: one line saying what is missing and how to get it.
missing() {
    echo "$1 not found ($3): run \`make deps\` as root, or install $2" >&2
    ok=0
}

check_build() {
    have_cjson || missing cJSON libcjson-dev "required: the safetensors reader"
}
check_test() {
    check_build
    have_python || missing "python3 with numpy and ml_dtypes" "python3 and then: pip install numpy ml_dtypes" \
        "the cross-checks of make test"
    have_fuzzer || missing "clang with libFuzzer" "clang libclang-rt-14-dev" \
        "the fuzz stage and the clang build of make test"
    have_pkgconfig || missing pkg-config pkg-config "the install test of make test"
}

ok=1
case "$mode" in
--check-build)
    check_build
    [ "$ok" = 1 ]
    ;;
--check-test)
    check_test
    [ "$ok" = 1 ]
    ;;
--all)
    pkgs=""
    have_cjson || pkgs="$pkgs libcjson-dev"
    have_pkgconfig || pkgs="$pkgs pkg-config"
    have_fuzzer || pkgs="$pkgs clang libclang-rt-14-dev"
    have_python || command -v python3 >/dev/null 2>&1 || pkgs="$pkgs python3 python3-pip"
    have_openblas_runtime || pkgs="$pkgs libopenblas0"
    if [ -n "$pkgs" ]; then
        if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            echo "install-deps: missing Debian packages:$pkgs (as root: apt-get install$pkgs)" >&2
            exit 1
        fi
        echo "install-deps: apt-get install$pkgs" >&2
        apt-get update -qq >/dev/null
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null
    fi
    if ! have_python; then
        echo "install-deps: pip install numpy ml_dtypes" >&2
        python3 -m pip install -q numpy ml_dtypes 2>/dev/null ||
            python3 -m pip install -q --break-system-packages numpy ml_dtypes
    fi
    ;;
*)
    echo "usage: $0 [--check-build|--check-test|--all]" >&2
    exit 2
    ;;
esac
