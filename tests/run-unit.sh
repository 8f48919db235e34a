#!/bin/sh
# Runs every unit-test binary of a build directory; prints one line per binary and a closing total.
set -u
build=${1:-build}
passed=0; failed=0
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    if out=$("$t" 2>&1); then
        passed=$((passed + 1)); echo "PASS $(basename "$t"): $(echo "$out" | tail -n 1)"
    else
        failed=$((failed + 1)); echo "FAIL $(basename "$t")"; echo "$out" | tail -n 40
    fi
done
echo "unit ($build): $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
