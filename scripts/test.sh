#!/usr/bin/env bash
# Set up if needed, then run the test suite (GPU tests are skipped without a GPU), in parallel with pytest-xdist: one
# worker a CPU, at most 8 (SCHEDGEN_TEST_WORKERS=N chooses; 0 runs in this process); a test file runs whole on one
# worker (`--dist loadfile`), so a module-scoped fixture (a module's compiled kernels) is computed once, not once a
# worker (`--dist loadgroup` does not group under pytest 9: tests/test_suite_runner.py). Arguments go to pytest.
# A test that passes its time limit (`timeout` in pyproject.toml, pytest-timeout; tests/timeouts_plugin.py's hard
# limit where that cannot interrupt it) fails with its stack; when hangs are the only failures, the tests that hung
# run once more, alone, and decide the result (both runs are printed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cpus=$(nproc 2>/dev/null || echo 1)
workers=${SCHEDGEN_TEST_WORKERS:-$(( cpus > 8 ? 8 : (cpus > 1 ? cpus : 0) ))}
record=$(mktemp)
trap 'rm -f "$record" "$record".*' EXIT
rc=0
SCHEDGEN_TIMED_OUT=$record .venv/bin/python -m pytest -q -n "$workers" --dist loadfile "$@" || rc=$?
for f in "$record".stacks.*; do          # the stacks of a test that passed the hard limit (tests/timeouts_plugin.py)
  if [ -s "$f" ]; then echo "schedgen: stacks of a process ended at the hard time limit:"; tail -n 150 "$f"; fi
done
if [ "$rc" -ne 0 ] && [ -s "$record" ] && [ ! -s "$record.other" ]; then
  echo "schedgen: $(sort -u "$record" | wc -l) test(s) passed their time limit; running them once more, alone:"
  sort -u "$record" | sed 's/^/  /'
  mapfile -t again < <(sort -u "$record")
  rc=0
  .venv/bin/python -m pytest -q "${again[@]}" || rc=$?
fi
exit "$rc"
