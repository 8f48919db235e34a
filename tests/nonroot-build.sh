#!/bin/sh
# The quick start of a user who is not root and has no OpenBLAS: a copy of the tree built with CUDA=0 as an
# unprivileged user (nobody, when this runs as root), with pkg-config seeing no package at all (PKG_CONFIG_LIBDIR
# empty: no openblas.pc, no libcjson.pc, so the Makefile's fallback for cJSON is used). `make demo` must build and
# pass, and the bench's OpenBLAS baseline must fail cleanly. Then a machine without cJSON (the compiler pointed
# away from it): `make` must stop before compiling anything, say what is missing and how to get it, and install
# nothing.
# Usage: sh tests/nonroot-build.sh      Closing line: "nonroot: N passed, N failed".
set -u
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bfp8-nonroot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$(dirname "$0")/harness.sh"
fail_show=$tmp/log
fail_lines=12
has() { if grep -qF -- "$1" "$tmp/log"; then pass; else fail "output lacks '$1'"; fi; }

mkdir "$tmp/src" "$tmp/no-pkgconfig"
# The project's own files only: not .git, the builds or the test venv (torch alone is gigabytes, more than a CI
# machine's /tmp may hold).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | tar -cf - --null -T - | tar -xf - -C "$tmp/src"
else
    tar -cf - --exclude=./.git --exclude='./build' --exclude='./build-*' --exclude=./.venv --exclude=./.whl . |
        tar -xf - -C "$tmp/src"
fi
if [ "$(id -u)" = 0 ]; then
    if ! command -v setpriv >/dev/null 2>&1 || ! id nobody >/dev/null 2>&1; then
        echo "nonroot: running as root without setpriv or the user nobody: cannot drop privileges"
        echo "nonroot: 0 passed, 1 failed"
        exit 1
    fi
    chown -R nobody "$tmp"
    as_user() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"; }
    who="nobody"
else
    as_user() { "$@"; }
    who=$(id -un)
fi
# The user's make: no MAKEFLAGS or jobserver of an enclosing make, a PATH without /usr/local/cuda.
in_tree() {
    as_user env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS PATH=/usr/bin:/bin HOME="$tmp" \
        PKG_CONFIG_LIBDIR="$tmp/no-pkgconfig" sh -c "cd '$tmp/src' && $1" >"$tmp/log" 2>&1
}

if in_tree "make CUDA=0 demo"; then pass; else fail "make CUDA=0 demo as $who"; fi
has "PASS"
# A second make rebuilds nothing (the header dependencies and the library's links are in order).
if in_tree "make CUDA=0 all" && ! grep -qE '^(cc|ar|ln) ' "$tmp/log"; then pass; else
    fail "a second make CUDA=0 all rebuilt something"
fi
bench="bench --shapes 256x256 --m 1 --iters 1 --baseline openblas"
if in_tree "BFP8_OPENBLAS=/nonexistent/libopenblas.so.0 build/blockfp8 $bench"; then
    fail "bench --baseline openblas without OpenBLAS succeeded"
else
    pass
fi
has "blockfp8 bench: --baseline openblas: OpenBLAS not loadable"

# A read-only output (as this user) is not replaced: its bytes and mode stay. The input: one F32 [1, 4] tensor.
hdr='{"w":{"dtype":"F32","shape":[1,4],"data_offsets":[0,16]}}'
{ printf "\\$(printf %03o ${#hdr})\\0\\0\\0\\0\\0\\0\\0%s" "$hdr"; printf '\0\0\200\77%.0s' 1 2 3 4; } >"$tmp/in.safetensors"
printf kept >"$tmp/ro.safetensors"
chmod 444 "$tmp/ro.safetensors"
[ "$(id -u)" = 0 ] && chown nobody "$tmp/in.safetensors" "$tmp/ro.safetensors"
if in_tree "build/blockfp8 quantize --kind act --in '$tmp/in.safetensors' --out '$tmp/ro.safetensors'"; then
    fail "quantize replaced a read-only --out"
else
    pass
fi
has "is read-only for this user"
if [ "$(cat "$tmp/ro.safetensors")" = kept ] && [ "$(stat -c %a "$tmp/ro.safetensors")" = 444 ]; then pass; else
    fail "the read-only file changed"
fi
# The same input to a writable output: quantized (so the refusal above was the mode's).
if in_tree "build/blockfp8 quantize --kind act --in '$tmp/in.safetensors' --out '$tmp/rw.safetensors'"; then pass; else
    fail "quantize of the read-only case's input failed"
fi

# No cJSON: a header path and a library name that do not exist.
if in_tree "make CUDA=0 BUILD=build-nocjson CJSON_CFLAGS=-I/nonexistent CJSON_LIBS=-lbfp8_no_such_cjson"; then
    fail "make without cJSON succeeded"
else
    pass
fi
has "cJSON not found"
has "run \`make deps\` as root, or install libcjson-dev"
if grep -q "apt-get" "$tmp/log"; then fail "make without cJSON tried to install"; else pass; fi
if [ -e "$tmp/src/build-nocjson/obj" ]; then fail "make without cJSON compiled something"; else pass; fi

echo "nonroot: $passed passed, $failed failed (as $who)"
[ "$failed" -eq 0 ]
