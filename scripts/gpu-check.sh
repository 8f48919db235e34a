#!/bin/bash
# The one-call GPU check: build, GPU unit tests, compute-sanitizer (memcheck + racecheck), the SASS of the CUDA
# kernels, the cuBLASLt limits probe and the DeepSeek-R1 GEMM benchmark (`blockfp8 bench`, every CUDA backend
# against cuBLASLt in the same run; cuda_generic once more with the dirty flush, beside a Triton block-FP8 kernel
# timed the same way: bench/triton_baseline.py; DeepGEMM and torch's cuBLASLt beside blockfp8 in one process:
# bench/deepgemm_baseline.py), with the SM clocks sampled during the benchmarks. Logs and JSON go under OUTDIR; a short
# summary table is printed last.
#   scripts/gpu-check.sh OUTDIR
# GPU_CHECK_ONLY="build bench-dirty triton" runs only the named steps (names as in the summary); GPU_CHECK_QUICK=1
# is "build test_cuda sanitizer sass", a re-check that spends little device time.
# On a machine without cJSON installed, headers and library can be carried in build/deps/{include,lib}
# (copies of /usr/include/cjson/cJSON.h and libcjson.so*): the script points the compiler there.
set -u
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
jobs=$(nproc 2>/dev/null || echo 8)
declare -A status

only=${GPU_CHECK_ONLY:-}
[ "${GPU_CHECK_QUICK:-0}" = 1 ] && only="build test_cuda sanitizer sass"
step() { # name, command...: runs, records pass/fail, keeps going (skipped when GPU_CHECK_ONLY leaves it out)
    local name=$1; shift
    case " ${only:-$name} " in *" $name "*) ;; *) return 0 ;; esac
    local t0=$(date +%s)
    if "$@"; then status[$name]="pass"; else status[$name]="FAIL"; fi
    status[$name]="${status[$name]} ($(( $(date +%s) - t0 ))s)"
}

# Runs a command while nvidia-smi samples the SM clock, power and temperature every 100 ms into OUT/NAME-clocks.csv,
# so that a benchmark's times come with the clocks they ran at (a card at its power limit clocks down under long
# runs of FP8 GEMMs). Without nvidia-smi the command runs alone.
with_clocks() { # NAME, command...
    local name=$1; shift
    command -v nvidia-smi >/dev/null || { "$@"; return; }
    nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 \
        >"$out/$name-clocks.csv" 2>/dev/null &
    local smi=$! rc=0
    "$@" || rc=$?
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    return $rc
}
clocks_summary() { # NAME: one line over OUT/NAME-clocks.csv
    local f="$out/$1-clocks.csv"
    [ -s "$f" ] || { echo "no samples"; return; }
    sort -t, -k1,1n "$f" | awk -F', *' '{c[NR] = $1; p += $2; if ($2 > pmax) pmax = $2; if ($3 > tmax) tmax = $3}
        END {printf "%d samples: SM clock %d MHz median, %d at the 10th percentile, %d lowest; power %.0f W mean, %.0f peak; %d C peak\n",
             NR, c[int((NR + 1) / 2)], c[int(NR / 10) + 1], c[1], p / NR, pmax, tmax}'
}

# --- dependencies (the GPU image has no package registry) ---------------------------------------------------------
if [ ! -f /usr/include/cjson/cJSON.h ] && [ -f build/deps/include/cJSON.h ]; then
    export CPATH="$PWD/build/deps/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$PWD/build/deps/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$PWD/build/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# No registry there, so scripts/install-deps.sh --build cannot install the optional OpenBLAS: skip that step.
mkdir -p build && touch build/.deps-ok

# --- build --------------------------------------------------------------------------------------------------------
build() {
    make -j"$jobs" all && make -j"$jobs" $(ls tests/test_*.c | sed 's|tests/\(.*\)\.c|build/tests/\1|') || return 1
    local cuda=/usr/local/cuda
    cc -std=c11 -O2 -I$cuda/include -o build/cuda_probe tests/cuda_probe.c -L$cuda/lib64 -lcublasLt -lcudart -lm \
        -Wl,-rpath,$cuda/lib64
}
step build build >"$out/build.log" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/unit.log" 2>&1

# --- GPU unit tests (the whole suite; test_cuda must not skip here) -------------------------------------------------
export BFP8_REQUIRE_CUDA=1
step unit-suite sh tests/run-unit.sh build >>"$out/unit.log" 2>&1
step test_cuda env BFP8_TEST_VERBOSE=1 timeout 300 build/tests/test_cuda >"$out/test_cuda.log" 2>&1
# hopper under each forcing knob (docs/hopper-knobs.md), each on every case: every tiling (normal path with 64/128-wide
# weight tiles, swapped while M <= 128 with one Q tile or with several 16-token ones), a K split of only the last
# wave's tiles wherever it applies (the only way to reach it on the swapped path), row slices and stream-K wherever
# they apply (stream-K with one consumer warpgroup and with fewer tiles than SMs), three K splits of every tile, and
# rasterization groups of 2 P tiles (several groups wherever there are 3 or more, a partial last one where odd).
# Commas join one variant's variables. Each full run takes ~55 s on the H200 (~30-40 s with --small), ~8 minutes in
# all; on a machine lent in 10-minute calls run GPU_CHECK_ONLY=variants in a call of its own, or split the list with
# GPU_CHECK_VARIANTS="...".
hopper_variants=${GPU_CHECK_VARIANTS:-"BFP8_HOPPER_TILE=64 BFP8_HOPPER_TILE=128 BFP8_HOPPER_TILE=64x32
    BFP8_HOPPER_TILE=64x64 BFP8_HOPPER_TILE=64x128 BFP8_HOPPER_TILE=swap
    BFP8_HOPPER_TILE=swap16 BFP8_HOPPER_FORCE=last-wave-split BFP8_HOPPER_FORCE=slices BFP8_HOPPER_FORCE=stream-k
    BFP8_HOPPER_SPLITS=3 BFP8_HOPPER_RASTER_GROUP=2"}
variants() {
    local v rc=0
    for v in $hopper_variants; do
        echo "== $v"
        env $(echo "$v" | tr , ' ') timeout 300 build/tests/test_hopper || rc=1
        # The grouped kernel takes only the tile-width knob.
        case $v in BFP8_HOPPER_TILE=64|BFP8_HOPPER_TILE=128)
            echo "== $v test_cuda_grouped"; env $v timeout 300 build/tests/test_cuda_grouped || rc=1 ;;
        esac
    done
    return $rc
}
step variants variants >"$out/test_hopper_variants.log" 2>&1

# --- compute-sanitizer on a small run -------------------------------------------------------------------------------
# GPU_CHECK_SANITIZER_QUICK=1: memcheck on every listed test, racecheck on test_hopper --small only.
sanitize() {
    local tool
    if [ "${GPU_CHECK_SANITIZER_QUICK:-0}" = 1 ]; then
        local cs="timeout 240 compute-sanitizer --error-exitcode 9 --tool"
        echo "== memcheck test_hopper --small"; $cs memcheck build/tests/test_hopper --small || return 1
        echo "== memcheck test_hopper --small, stream-K forced"
        BFP8_HOPPER_FORCE=stream-k $cs memcheck build/tests/test_hopper --small || return 1
        echo "== memcheck test_cuda_grouped"; $cs memcheck build/tests/test_cuda_grouped || return 1
        echo "== memcheck test_cuda (small)"; BFP8_TEST_SMALL=1 $cs memcheck build/tests/test_cuda || return 1
        echo "== racecheck test_hopper --small"; $cs racecheck build/tests/test_hopper --small || return 1
        echo "== racecheck test_cuda_grouped"; $cs racecheck build/tests/test_cuda_grouped || return 1
        return 0
    fi
    for tool in memcheck racecheck; do
        echo "== compute-sanitizer --tool $tool"
        BFP8_TEST_SMALL=1 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_cuda ||
            return 1
        timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small || return 1
        BFP8_TEST_SMALL=1 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_cuda_grouped ||
            return 1
        # Plans the default does not reach on the small cases.
        for v in BFP8_HOPPER_TILE=swap BFP8_HOPPER_TILE=64x32 BFP8_HOPPER_FORCE=stream-k; do
            echo "== $v"
            env $(echo "$v" | tr , ' ') timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 \
                build/tests/test_hopper --small || return 1
        done
    done
}
step sanitizer sanitize >"$out/sanitizer.log" 2>&1

# --- SASS: which matrix instructions the kernels use ------------------------------------------------------------------
sass() {
    local f
    for f in build/cuda/*/*.o; do
        echo "== $f"
        cuobjdump --dump-sass "$f" | awk '/arch = sm_/ {arch=$NF} /Function :/ {fn=$NF}
            match($0, /(HMMA|QMMA|IMMA|HGMMA|QGMMA|WGMMA)[.A-Za-z0-9]*/) {c[arch" "substr($0,RSTART,RLENGTH)]++}
            / (LDL|STL)[. ]/ {c[arch" local-memory LDL/STL (spills)"]++}
            END {for (x in c) print "  " x ": " c[x]}' | sort
    done
    echo "== ptxas"
    sh tests/ptxas-check.sh build/cuda 1
    sh tests/sass-check.sh build/cuda 1
}
step sass sass >>"$out/build.log" 2>&1

# --- cuBLASLt limits probe and the benchmark ---------------------------------------------------------------------------
step probe build/cuda_probe >"$out/probe.log" 2>&1
# The project's benchmark command (tools/bench.c): every CUDA backend, cuBLASLt as the baseline ratio.
step bench with_clocks bench timeout 300 build/blockfp8 bench --device cuda --backend all --baseline cublaslt \
    --shapes dsr1 --m 1,16,64,128,512,4096 --iters 20 --warmup 3 --json "$out/bench.json" >"$out/bench.log" 2>"$out/bench.err"
# cuda_generic against Triton (issue 4) with the dirty flush, the slower one for us and the one PyTorch's zero_()
# flushes leave (bench/RESULTS.md, "The L2 flush"): against a Triton block-FP8 kernel timed in this run by the same
# method (bench/triton_baseline.py, needs torch and triton), and against the Triton anchor of bench/data/anchors-h200-2026-11-30.csv
# where shared/ is here (scripts/compare-anchors.py OUTDIR/bench-dirty.json).
step bench-dirty timeout 300 build/blockfp8 bench --device cuda --backend cuda_generic \
    --baseline cublaslt --l2 dirty --shapes dsr1 --m 1,16,64,128,512,4096 --iters 20 --warmup 3 \
    --json "$out/bench-dirty.json" >"$out/bench-dirty.log" 2>&1
step triton env PYTHONUNBUFFERED=1 timeout 420 python3 bench/triton_baseline.py --l2 dirty --json "$out/triton-dirty.json" \
    >"$out/triton-dirty.log" 2>&1

# --- the Python package on CUDA tensors, the CLI on the GPU --------------------------------------------------------
python_ext() { # the Python package's extension, built once for the python and side steps
    [ -n "${python_ext_built:-}" ] && return 0
    python3 setup.py -q build_ext --inplace >"$out/python-build.log" 2>&1 && python_ext_built=1
}
python_cuda() {
    python_ext || return 1
    BFP8_CLI=$PWD/build/blockfp8 PYTHONPATH=$PWD/python timeout 300 python3 -m pytest -q -p no:cacheprovider \
        tests/python || return 1
    PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 timeout 120 python3 bench/python_overhead.py \
        --json "$out/python-overhead.json"
}
step python python_cuda >"$out/python.log" 2>&1

# --- DeepGEMM and torch's cuBLASLt beside blockfp8, in one process, interleaved (bench/README.md) ---------------------
# GPU_CHECK_DEEPGEMM=DIR: where deep_gemm is installed (built on the machine; nothing of it is in this repository).
# Without it deepgemm_baseline.py says so and times torch's _scaled_mm and blockfp8 only.
side() {
    python_ext || return 1
    PYTHONPATH="${GPU_CHECK_DEEPGEMM:+$GPU_CHECK_DEEPGEMM:}$PWD/python:$PWD/bench" PYTHONUNBUFFERED=1 \
        LD_PRELOAD="$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)" \
        with_clocks side timeout 420 python3 bench/deepgemm_baseline.py --baselines deepgemm,scaled_mm,blockfp8 \
        --iters 20 --warmup 3 --json "$out/side.json"
}
step side side >"$out/side.log" 2>&1
step cli sh tests/cli.sh build >"$out/cli.log" 2>&1

# --- the grouped (MoE) GEMM against cuBLASLt called once per expert ---------------------------------------------------
grouped() { # the cells of bench/data/moe-anchor-h200-2026-12-04.csv: auto's choice (hopper on sm_90), then
             # cuda_generic on the G = 8 cells, each against cuBLASLt called once per expert in the same run
    local cell
    for cell in contiguous:8:128,512,2048 contiguous:32:128,512 contiguous:256:128 masked:8:16,64,256 \
                masked:32:16,64,128; do
        IFS=: read -r layout experts tokens <<<"$cell"
        timeout 240 build/blockfp8 bench --grouped $layout --device cuda --experts $experts --tokens $tokens \
            --baseline cublaslt --iters 10 --warmup 2 --json "$out/grouped-$layout-$experts.json" || return 1
    done
    for cell in contiguous:8:128,512,2048 masked:8:16,64,256; do
        IFS=: read -r layout experts tokens <<<"$cell"
        timeout 240 build/blockfp8 bench --grouped $layout --device cuda --experts $experts --tokens $tokens \
            --backend cuda_generic --baseline cublaslt --iters 10 --warmup 2 \
            --json "$out/grouped-generic-$layout-$experts.json" || return 1
    done
}
step grouped grouped >"$out/grouped.log" 2>&1

# --- A/B against an older tree built beside this one (GPU_CHECK_OLD=DIR: a checkout, e.g. from `git archive`) --------
# The two trees' full tables alternate, twice each, in one call; the old tree's two runs give the run-to-run noise.
ab() {
    local old=${GPU_CHECK_OLD:?GPU_CHECK_OLD names the old tree}
    (cd "$old" && mkdir -p build && touch build/.deps-ok && make -j"$jobs" all) >"$out/ab-build.log" 2>&1 || return 1
    local i
    for i in 1 2; do
        for t in old new; do
            local bin=build/blockfp8
            [ $t = old ] && bin=$old/build/blockfp8
            timeout 200 $bin bench --device cuda --backend all --baseline cublaslt --shapes dsr1 \
                --m 1,16,64,128,512,4096 --iters 20 --warmup 3 --json "$out/ab-$t-$i.json" >"$out/ab-$t-$i.log" 2>&1 || return 1
        done
    done
    python3 bench/reproduce.py ab "$out" >"$out/ab.md"
}
step ab ab >"$out/ab.log" 2>&1

# --- summary (printed last) -------------------------------------------------------------------------------------------
echo "================ gpu-check summary ($(date -u +%FT%TZ), commit ${BFP8_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)})"
head -2 "$out/unit.log" | tail -1
for s in build unit-suite test_cuda variants sanitizer sass probe bench bench-dirty triton python side cli grouped ab; do printf '  %-11s %s\n' "$s" "${status[$s]:-not run}"; done
echo "-- unit tests:"; grep -E '^(PASS|FAIL|unit)' "$out/unit.log" | sed 's/^/  /'
echo "-- test_cuda:"; tail -2 "$out/test_cuda.log" | sed 's/^/  /'
echo "-- test_hopper with each forced plan:"
# One line per variant (its name, then the test's count line), then the first failed checks, if any.
grep -E '^(== |hopper: [0-9]+ passed)' "$out/test_hopper_variants.log" 2>/dev/null | paste - - | sed 's/^== /  /'
grep -E 'CHECK.*failed' "$out/test_hopper_variants.log" 2>/dev/null | head -5 | cut -c1-200 | sed 's/^/  /'
echo "-- sanitizer:"; grep -E 'SUMMARY|cuda:|^== ' "$out/sanitizer.log" | sed 's/^/  /'
echo "-- sass:"; sed -n '/^== /,$p' "$out/build.log" | sed 's/^/  /'
echo "-- probe (cuBLASLt limits):"
[ -f "$out/probe.log" ] && grep -vE ' ok$' "$out/probe.log" | cut -c1-150 | head -25 | sed 's/^/  /'
echo "-- bench (bf16 out, median µs with the L2 flushed; ratio = cuBLASLt time / backend time):"
# One line per cell: every backend's time and ratio side by side, then the geomean lines of `blockfp8 bench`.
[ -f "$out/bench.log" ] && awk '
    /^#/ || /^backend/ || NF < 8 {next}
    { cell = sprintf("%6s %6s %6s", $2, $3, $4); if (!(cell in seen)) {seen[cell] = 1; order[++n] = cell}
      if (!($1 in bseen)) {bseen[$1] = 1; bk[++nb] = $1}
      t[cell, $1] = ($5 == "n/a") ? "n/a" : sprintf("%.1f", $5); r[cell, $1] = ($5 == "n/a") ? "" : $8 }
    END { printf "  %6s %6s %6s", "M", "N", "K"; for (j = 1; j <= nb; j++) printf " %18s", bk[j]; print ""
          for (i = 1; i <= n; i++) { printf "  %s", order[i]
              for (j = 1; j <= nb; j++) printf " %10s %7s", t[order[i], bk[j]], r[order[i], bk[j]]; print "" } }' "$out/bench.log"
grep '^# ' "$out/bench.log" 2>/dev/null | grep -E 'geomean|summary' | sed 's/^/  /'
[ -f "$out/bench.log" ] && echo "  clocks during bench: $(clocks_summary bench)"
if [ -s "$out/side.json" ]; then
    echo "-- side by side (interleaved; ratio = other time / hopper time, geomean over the cells both ran):"
    python3 - "$out/side.json" <<'PY' | sed 's/^/  /'
import json, math, sys
cells, choice = {}, {}
for r in json.load(open(sys.argv[1])):
    cells.setdefault((r["m"], r["n"], r["k"]), {})[r["backend"]] = r["median_us"]
    if r.get("auto_choice"):
        choice[(r["m"], r["n"], r["k"])] = "blockfp8_" + r["auto_choice"]
geomean = lambda r: math.exp(sum(map(math.log, r)) / len(r))
for other in ("deepgemm", "torch_scaled_mm"):
    r = [c[other] / c["blockfp8_hopper"] for c in cells.values() if other in c and "blockfp8_hopper" in c]
    if r:
        print(f"hopper against {other}: {geomean(r):.3f}x over {len(r)} cells, hopper slower in {sum(x < 1 for x in r)}")
fastest = lambda c: min(c["blockfp8_hopper"], c["blockfp8_cublaslt"])
best = [c["blockfp8_auto"] / fastest(c) for c in cells.values()
        if {"blockfp8_auto", "blockfp8_hopper", "blockfp8_cublaslt"} <= c.keys()]
if best:
    print(f"auto against the faster of hopper and cublaslt: {geomean(best):.4f}x the time, within 1% in "
          f"{sum(x <= 1.01 for x in best)} of {len(best)} cells")
# auto judged by its choice: the strict run of the backend it picks against the faster one (no second timing).
picked = [c[choice[key]] / fastest(c) for key, c in cells.items()
          if key in choice and {choice[key], "blockfp8_hopper", "blockfp8_cublaslt"} <= c.keys()]
if picked:
    print(f"auto's choice against the faster of hopper and cublaslt: {geomean(picked):.4f}x the time, within 1% "
          f"in {sum(x <= 1.01 for x in picked)} of {len(picked)} cells ({len(cells) - len(picked)} cells left out: "
          f"no recorded choice, or no strict run of it or of both backends)")
PY
    echo "  clocks during side: $(clocks_summary side)"
fi
if [ -f "$out/bench-dirty.json" ] && [ -f "$out/triton-dirty.json" ]; then
    echo "-- cuda_generic vs triton, same run (dirty flush; the cells where triton is faster, then the count):"
    python3 scripts/compare-anchors.py "$out/bench-dirty.json" --against "$out/triton-dirty.json" >"$out/vs-triton.md"
    awk -F'|' '/^\| [0-9]/ && $7 + 0 < 1' "$out/vs-triton.md" | sed 's/^/  /'
    tail -1 "$out/vs-triton.md" | sed 's/^/  /'
fi
anchors=bench/data/anchors-h200-2026-11-30.csv
if [ -f "$out/bench-dirty.json" ] && [ -f "$anchors" ]; then
    echo "-- cuda_generic vs the triton anchor (dirty flush):"
    python3 scripts/compare-anchors.py "$out/bench-dirty.json" "$anchors" | tail -1 | sed 's/^/  /'
elif [ -f "$out/bench-dirty.json" ]; then
    echo "-- cuda_generic vs the triton anchor: $anchors not here; run scripts/compare-anchors.py $out/bench-dirty.json"
fi
# Exit status: 1 if any step that ran failed.
for s in "${!status[@]}"; do case "${status[$s]}" in FAIL*) exit 1 ;; esac; done
exit 0
