# The shell tests' counters, sourced by tests/*.sh: pass and fail count checks; fail also shows the first
# $fail_lines lines (default 6) of the file $fail_show, when set and not empty, each after $fail_prefix.
passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL: $*"
    if [ -n "${fail_show:-}" ] && [ -s "$fail_show" ]; then
        sed -n "1,${fail_lines:-6}s/^/    ${fail_prefix:-}/p" "$fail_show"
    fi
    return 0
}
