#!/bin/bash
# The one-call device check of hopper's wide kernel (issue 31, prefill; docs/hopper.md, the wide kernel): build; ptxas
# and the SASS (no spills, no serialized wgmma, QGMMA in the wide kernels); the planner's tests; test_hopper with the
# default plans and with the wide kernel forced everywhere (BFP8_HOPPER_TILE=256); compute-sanitizer memcheck on the
# small cases with the wide kernel forced; the shared-memory probe (bench/probes/smem_bw.cu); and the DeepSeek-R1
# shapes at M = 512 and 4096 with the wide kernel forced, with the plans from before it (BFP8_HOPPER_WIDE=0), with the
# default plans, and against cuBLASLt in the same runs, plus the wide kernel without its turn order on three shapes.
# Logs and JSON go under OUTDIR; a short summary is printed last. About 6-7 minutes on an H200.
#   scripts/prefill-check.sh OUTDIR
# PREFILL_ONLY="build probe bench-wide" runs only the named steps (names as in the summary; build is needed once per
# machine). PREFILL_RACECHECK=1 adds compute-sanitizer racecheck on the same small cases (about a minute more).
# Where cJSON is not installed, its header and library can be carried in build/deps/{include,lib}.
set -u
out=${1:?usage: scripts/prefill-check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
jobs=$(nproc 2>/dev/null || echo 8)
declare -A status
only=${PREFILL_ONLY:-}
steps="build sass plan test_hopper test_wide memcheck racecheck probe bench-wide bench-before bench-default
       bench-unordered"
step() { # name, command...: runs, records pass/fail with its time, keeps going
    local name=$1; shift
    case " ${only:-$name} " in *" $name "*) ;; *) return 0 ;; esac
    local t0=$(date +%s)
    if "$@"; then status[$name]="pass"; else status[$name]="FAIL"; fi
    status[$name]="${status[$name]} ($(( $(date +%s) - t0 ))s)"
}

if [ ! -f /usr/include/cjson/cJSON.h ] && [ -f build/deps/include/cJSON.h ]; then
    export CPATH="$PWD/build/deps/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$PWD/build/deps/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$PWD/build/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
mkdir -p build && touch build/.deps-ok # no package registry there: skip the optional-dependency step

# --- build, ptxas, SASS -----------------------------------------------------------------------------------------------
step build make -j"$jobs" all build/tests/test_hopper build/tests/test_hopper_plan build/smem_bw >"$out/build.log" 2>&1
sass() {
    sh tests/ptxas-check.sh build/cuda 1 || return 1
    # QGMMA and local-memory instructions per hopper kernel; the wide kernels need their 8 QGMMA and no LDL/STL.
    cuobjdump -sass build/cuda/launch.o | awk '
        /Function :/ { fn = $NF; sub(/.*_cu_[0-9a-f]+/, "", fn) }
        /QGMMA/ { q[fn]++; total++ } / (LDL|STL)[. ]/ { l[fn]++ }
        END { for (f in q) printf "  %-72s QGMMA %3d  LDL/STL %d\n", substr(f, 1, 72), q[f], l[f] + 0
              printf "  QGMMA in launch.o: %d\n", total }' | sort >"$out/sass-counts.txt"
    cat "$out/sass-counts.txt"
    awk '/wide_kernel/ { n++; if ($3 != 8 || $5 != 0) bad++ } END { exit !(n == 2 && !bad) }' "$out/sass-counts.txt"
}
step sass sass >"$out/sass.log" 2>&1

# --- tests -------------------------------------------------------------------------------------------------------------
# test_hopper prints "skipped" without a usable device: that is a failure here.
run_test() { # log, env..., then the command
    local log=$1; shift
    env "$@" >"$log" 2>&1 && ! grep -q "hopper: skipped" "$log"
}
step plan run_test "$out/plan.log" build/tests/test_hopper_plan
step test_hopper run_test "$out/test_hopper.log" BFP8_TEST_VERBOSE=1 timeout 300 build/tests/test_hopper
step test_wide run_test "$out/test_wide.log" BFP8_HOPPER_TILE=256 timeout 300 build/tests/test_hopper
step memcheck run_test "$out/memcheck.log" BFP8_HOPPER_TILE=256 timeout 300 compute-sanitizer --tool memcheck \
    --error-exitcode 9 build/tests/test_hopper --small
[ "${PREFILL_RACECHECK:-0}" = 1 ] &&
    step racecheck run_test "$out/racecheck.log" BFP8_HOPPER_TILE=256 timeout 300 compute-sanitizer --tool racecheck \
        --error-exitcode 9 build/tests/test_hopper --small

# --- the shared-memory probe ---------------------------------------------------------------------------------------------
step probe run_test "$out/smem_bw.log" timeout 120 build/smem_bw

# --- benchmarks: hopper (forced wide / the plans before it / the default) against cuBLASLt --------------------------------
bench() { # name, env..., then bench options
    local name=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do envs+=("$1"); shift; done
    env ${envs[@]+"${envs[@]}"} BFP8_LOG=hopper timeout 300 build/blockfp8 bench --device cuda --backend hopper --iters 15 \
        --warmup 3 --json "$out/bench-$name.json" "$@" >"$out/bench-$name.log" 2>"$out/bench-$name.err"
}
step bench-wide bench wide BFP8_HOPPER_TILE=256 --baseline cublaslt --shapes dsr1 --m 512,4096
step bench-before bench before BFP8_HOPPER_WIDE=0 --baseline cublaslt --shapes dsr1 --m 512,4096
step bench-default bench default --shapes dsr1 --m 512,4096
step bench-unordered bench unordered BFP8_HOPPER_TILE=256 BFP8_HOPPER_WIDE=unordered \
    --shapes 7168x16384,36864x7168,4096x7168 --m 4096

# --- summary (printed last) ----------------------------------------------------------------------------------------------
echo "================ prefill-check summary ($(date -u +%FT%TZ), commit ${BFP8_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)})"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null | sed 's/^/  /'
for s in $steps; do
    [ "$s" = racecheck ] && [ "${PREFILL_RACECHECK:-0}" != 1 ] && continue
    printf '  %-16s %s\n' "$s" "${status[$s]:-not run}"
done
echo "-- tests:"
for f in plan test_hopper test_wide memcheck racecheck; do
    [ -f "$out/$f.log" ] || continue
    printf '  %-12s %s\n' "$f" "$(grep -E '^(hopper|hopper_plan): [0-9]+ passed|ERROR SUMMARY' "$out/$f.log" | tail -1)"
    grep -E 'CHECK.*failed' "$out/$f.log" | head -3 | cut -c1-220 | sed 's/^/    /'
done
echo "-- sass:"; grep -E 'ptxas-check|wide_kernel|QGMMA in' "$out/sass.log" 2>/dev/null | sed 's/^/  /'
echo "-- shared-memory probe (B/clk per SM):"; [ -f "$out/smem_bw.log" ] && sed 's/^/  /' "$out/smem_bw.log"
echo "-- DeepSeek-R1, bf16 out, median us with the L2 flushed (wide = BFP8_HOPPER_TILE=256, before = BFP8_HOPPER_WIDE=0,"
echo "   default = the plan the rule picks; cuBLASLt from the wide run; est. vs DeepGEMM = (DeepGEMM / hopper in the"
echo "   side-by-side run of 2026-12-04, issue 31) x (before / wide): an estimate across runs, not a measurement):"
awk '
    # The side-by-side run of 2026-12-04 (issue 31; DeepGEMM 54e2261, main 1e16e46): DeepGEMM and hopper at M = 512, 4096.
    BEGIN {
        split("2112x7168 24576x1536 32768x512 7168x16384 36864x7168 7168x18432 4096x7168 7168x2048", sh, " ")
        split("18.2 35.8 22.7 124.1 230.7 139.1 27.5 21.6", dg512, " "); split("100.4 235.9 134.0 687.6 1694.7 824.3 171.6 96.1", dg4096, " ")
        split("20.7 35.9 23.3 105.7 210.0 118.5 27.7 18.9", hp512, " "); split("102.6 250.7 144.9 757.8 1749.4 869.9 185.0 101.3", hp4096, " ")
        for (i = 1; i <= 8; i++) { dg["512 " sh[i]] = dg512[i]; dg["4096 " sh[i]] = dg4096[i]
                                   hp["512 " sh[i]] = hp512[i]; hp["4096 " sh[i]] = hp4096[i] }
    }
    FNR == 1 { run = FILENAME; sub(/.*bench-/, "", run); sub(/\.(log|err)$/, "", run); err = FILENAME ~ /\.err$/ }
    # The plan lines (BFP8_LOG=hopper) of the default run: which tile each cell took.
    err && run == "default" && /\[bfp8 hopper\] M=/ {
        m = $3; n = $4; k = $5; sub(/M=/, "", m); sub(/N=/, "", n); sub(/K=/, "", k); sub(/:/, "", k)
        plan[m " " n "x" k] = $0 ~ /BQ=256/ ? "wide" : $0 ~ /BQ=64/ ? "64" : "128"; next }
    err { next }
    $1 == "hopper" || $1 == "cublaslt" {
        cell = $2 " " $3 "x" $4
        if (!(cell in seen)) { seen[cell] = 1; order[++nc] = cell }
        t[run, $1, cell] = $5 }
    END {
        printf "  %5s %-11s %9s %7s %9s %9s %9s %7s %9s %7s %10s\n", "M", "NxK", "wide", "TF/s", "before",
               "speedup", "default", "plan", "cuBLASLt", "vs cuBL", "est.vs DG"
        for (i = 1; i <= nc; i++) {
            c = order[i]; split(c, mk, " "); split(mk[2], nk, "x")
            w = t["wide", "hopper", c]; b = t["before", "hopper", c]; d = t["default", "hopper", c]
            cb = t["wide", "cublaslt", c]
            tf = w ? 2.0 * mk[1] * nk[1] * nk[2] / w * 1e-6 : 0
            est = (w && b && (c in dg)) ? dg[c] / hp[c] * b / w : 0
            printf "  %5s %-11s %9s %7.0f %9s %8.3fx %9s %7s %9s %6.3fx %9.3fx\n", mk[1], mk[2], w, tf, b,
                   (w && b) ? b / w : 0, d, (c in plan) ? plan[c] : "-", cb, (w && cb) ? cb / w : 0, est
            if (w && b) { lw += log(b / w); nw++ }
            if (w && cb) { lc += log(cb / w); ncb++ }
            if (d && b) { ld += log(b / d); nd++ }
            if (est) { le += log(est); ne++ }
            if (d && b && (c in dg)) { lde += log(dg[c] / hp[c] * b / d); nde++ }
            if (t["unordered", "hopper", c]) uo[c] = t["unordered", "hopper", c]
        }
        if (nw) printf "  geomean: wide %.3fx the plans before it over %d cells", exp(lw / nw), nw
        if (ncb) printf ", %.3fx cuBLASLt", exp(lc / ncb)
        if (nd) printf "; default %.3fx the plans before it", exp(ld / nd)
        if (ne) printf "; est. wide %.3fx DeepGEMM", exp(le / ne)
        if (nde) printf ", default %.3fx", exp(lde / nde)
        printf "\n"
        fmt = "  wide without the turns (BFP8_HOPPER_WIDE=unordered), M=%s: %s us, with them %s us (the turns %.3fx faster)\n"
        for (c in uo) printf fmt, c, uo[c], t["wide", "hopper", c], t["wide", "hopper", c] ? uo[c] / t["wide", "hopper", c] : 0
    }' $(ls "$out"/bench-wide.log "$out"/bench-before.log "$out"/bench-default.log "$out"/bench-default.err \
    "$out"/bench-unordered.log 2>/dev/null) # only those that exist: mawk stops at a missing file
for s in "${!status[@]}"; do case "${status[$s]}" in FAIL*) exit 1 ;; esac; done
exit 0
