#!/usr/bin/env bash
# The JavaScript unit tests (tests/ui/unit/*.test.mjs: the client web/attnd.js and the viewer's
# DOM-free modules) under node's own test runner; no browser, no daemon. Prints node's report,
# then "N passed, N failed" for tests/run_tests.sh to sum.
# Without node on the machine they are skipped: a line says so and the count is "0 passed, 0 failed"
# (the C suite does not need node; `make test-ui` installs it).
set -u
cd "$(dirname "$0")/../.."
if ! command -v node >/dev/null 2>&1; then
    echo "node not found: the JavaScript unit tests are skipped (apt-get install nodejs to run them)"
    echo "0 passed, 0 failed"
    exit 0
fi
out=$(mktemp)
node --test --test-reporter=tap tests/ui/unit/ >"$out" 2>&1
rc=$?
grep -E '^(not ok|# (tests|pass|fail))' "$out"
grep -A 20 '^not ok' "$out" | grep -E 'error:|expected|actual|at .*test\.mjs' | head -40
pass=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$out" | tail -n 1)
fail=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$out" | tail -n 1)
rm -f "$out"
if [ -z "$pass" ] || [ -z "$fail" ]; then
    echo "node --test gave no summary (exit $rc)"
    echo "0 passed, 1 failed"
    exit 1
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$rc" -eq 0 ]
