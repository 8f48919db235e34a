#!/bin/sh
# The shared library exports exactly the public API: every function declared in the installed headers, and no
# other symbol (no internal bfp8_* helper, nothing of the static libraries linked into it, cudart's included).
# Usage: sh tests/check-exports.sh LIBRARY.so INCLUDE_DIR
set -u
so=${1:?usage: check-exports.sh LIBRARY.so INCLUDE_DIR}
inc=${2:-include}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bfp8-exports.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

if [ ! -f "$so" ]; then
    echo "check-exports: FAIL: $so is not built"
    exit 1
fi
# Functions declared in the headers: comments and preprocessor lines removed, then every `bfp8_name(` (the
# headers' declarations put the name right before the parenthesis; a function-pointer member reads `(*name)(`).
perl -0777 -pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g; s{^\s*#[^\n]*(\\\n[^\n]*)*}{}gm' "$inc"/*.h |
    grep -oE '\bbfp8_[a-z0-9_]+\(' | tr -d '(' | sort -u >"$tmp/declared"
# Defined dynamic symbols, less the linker's own.
nm -D --defined-only "$so" | awk '{print $NF}' |
    grep -vxE '_init|_fini|_edata|_end|__bss_start|_IO_stdin_used' | sort -u >"$tmp/exported"

bad=0
if [ ! -s "$tmp/declared" ]; then
    echo "check-exports: FAIL: no function declarations found in $inc/*.h"
    bad=1
fi
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then
    echo "check-exports: FAIL: exported but not declared in $inc/*.h ($(echo "$extra" | wc -l)):"
    echo "$extra" | sed 's/^/    /'
    bad=1
fi
if [ -n "$missing" ]; then
    echo "check-exports: FAIL: declared in $inc/*.h but not exported ($(echo "$missing" | wc -l); not defined, or" \
        "declared outside the header's visibility pragma):"
    echo "$missing" | sed 's/^/    /'
    bad=1
fi
[ "$bad" = 0 ] || exit 1
echo "check-exports: $(wc -l <"$tmp/exported") functions exported, exactly those declared in $inc/*.h"
