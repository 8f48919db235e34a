#!/bin/sh
# What the CLI and the shared library load, and what happens under a memory limit:
# - neither links OpenBLAS, cuBLASLt or the CUDA driver (OpenBLAS is loaded by `bench --baseline openblas` only,
#   libcublasLt where a CUDA device is found, libcuda.so.1 through cudart);
# - under `ulimit -v` (100 MB, and 200 MB) `--version` succeeds and `explain` ends with a clean exit or a clean
#   error: never a hang (timeout) or a crash (a signal);
# - without a CUDA driver, the CUDA backends are unavailable with "no CUDA driver found", not cudart's "driver
#   version is insufficient";
# - `bench --baseline openblas` runs where OpenBLAS is installed, and where it cannot be loaded it fails with a
#   message that says so.
# Usage: sh tests/runtime-deps.sh BUILD_DIR      Closing line: "runtime: N passed, N failed".
set -u
build=${1:-build}
cli=$build/blockfp8
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bfp8-runtime.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$(dirname "$0")/harness.sh"
fail_show=$tmp/err
fail_prefix="stderr: "
# run LIMIT_KB SECONDS COMMAND...: runs it under `ulimit -v LIMIT_KB` (0: none) and `timeout`; sets rc.
run() {
    limit=$1 secs=$2
    shift 2
    (
        [ "$limit" = 0 ] || ulimit -v "$limit" || exit 99
        exec timeout "$secs" "$@"
    ) >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
has() { if grep -qF -- "$2" "$tmp/$1"; then pass; else fail "std$1 lacks '$2'"; fi; }

if [ ! -x "$cli" ]; then
    echo "runtime: $cli is not built"
    echo "runtime: 0 passed, 1 failed"
    exit 1
fi

# --- linked libraries --------------------------------------------------------------------------------------------
for f in "$cli" "$build"/libblockfp8.so; do
    if readelf -d "$f" >"$tmp/dyn" 2>"$tmp/err"; then
        if grep -E 'NEEDED.*(openblas|cublas|libcuda\.so)' "$tmp/dyn" >"$tmp/err"; then
            fail "$f links $(cat "$tmp/err")"
        else pass; fi
    else
        fail "readelf -d $f"
    fi
done

# --- memory limits -----------------------------------------------------------------------------------------------
for limit in 100000 200000; do
    run "$limit" 20 "$cli" --version
    if [ "$rc" -eq 0 ]; then pass; else fail "--version under ulimit -v $limit: exit $rc (124: hung)"; fi
    has out "blockfp8 "
    run "$limit" 60 "$cli" explain --m 16 --n 2112 --k 7168
    case $rc in
    0) has out "choice:" ;;
    1) has err "blockfp8 explain: " ;;
    *) fail "explain under ulimit -v $limit: exit $rc (124: hung; above 128: a signal)" ;;
    esac
done

# --- where there is no CUDA driver, explain says so ------------------------------------------------------------
lacks() { if grep -qF -- "$2" "$tmp/$1"; then fail "std$1 has '$2'"; else pass; fi; }
run 0 60 "$cli" explain --m 16 --n 2112 --k 7168
if grep -q "unavailable: built without CUDA" "$tmp/out"; then
    :
elif /sbin/ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
    lacks out "no CUDA driver found"
else
    has out "hopper         no   unavailable: no CUDA driver found (libcuda.so.1 not loadable: "
    lacks out "driver version is insufficient"
fi

# --- the OpenBLAS baseline, loaded when asked for ----------------------------------------------------------------
bench="bench --device cpu --shapes 256x256 --m 1 --iters 1 --warmup 0 --baseline openblas"
# shellcheck disable=SC2086 # $bench is a list
if /sbin/ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0'; then
    run 0 120 "$cli" $bench
    if [ "$rc" -eq 0 ]; then pass; else fail "$bench: exit $rc"; fi
    has out "# baseline openblas: cblas_sgemm"
    grep -qE '^openblas +1 +256 +256 ' "$tmp/out" && pass || fail "no openblas row in: $(cat "$tmp/out")"
else
    echo "runtime: no libopenblas.so.0 here: the baseline's run is not tested (only its error)"
fi
# shellcheck disable=SC2086
run 0 60 env BFP8_OPENBLAS="$tmp/no-such-libopenblas.so" "$cli" $bench
if [ "$rc" -eq 1 ]; then pass; else fail "$bench with OpenBLAS missing: exit $rc (want 1)"; fi
has err "blockfp8 bench: --baseline openblas: OpenBLAS not loadable"
has err "no-such-libopenblas.so"

echo "runtime: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
