#!/usr/bin/env bash
# The whole suite N times in a row (default 3) with two busy CPU loops beside it: a machine doing other work, where a
# test that races the clock, takes a fixed port or learns against the wall clock fails. Run it before a change that
# touches processes, the transport, a rate loop, a timeout or a learning test lands (docs/testing.md, "Under load").
#
#   bash scripts/stress-suite.sh                # 3 passes of the README's command (.venv/bin/pytest -q)
#   bash scripts/stress-suite.sh 5 -m unit      # 5 passes of the unit tier; arguments after N go to pytest
#   PYTEST=other/venv/bin/pytest bash scripts/stress-suite.sh
#
# It stops at the first pass that fails and prints each pass's time, load average and pytest's last line; each pass's
# output is kept in $STRESS_LOGS (default: a new temporary folder, printed). The busy loops are this script's own
# children: they are killed when it ends, on Ctrl-C and on SIGTERM, and each one also stops by itself once this
# script is gone (a kill -9 leaves no loop spinning). Exit status: 0 when every pass passed, else the failing
# pass's pytest status (130 after Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

passes=${1:-3}
if [ $# -gt 0 ]; then shift; fi
if ! [[ $passes =~ ^[1-9][0-9]*$ ]]; then
  echo "stress-suite: the first argument is the number of passes (a positive integer), got '$passes'" >&2
  exit 2
fi
pytest=${PYTEST:-.venv/bin/pytest}
python=${PYTHON:-$(dirname "$pytest")/python}
if ! [ -x "$pytest" ]; then
  echo "stress-suite: no pytest at $pytest: run the README's install first, or set PYTEST=path/to/pytest" >&2
  exit 2
fi
logs=${STRESS_LOGS:-$(mktemp -d -t stress-suite.XXXXXX)}
mkdir -p "$logs"

loops=()
stop_loops() {
  for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${loops[@]}"; do wait "$pid" 2>/dev/null || true; done
  loops=()
}
trap stop_loops EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Pure-Python spins, as benchmarks/hil_cli_workflow.py's --load runs them; each checks every few million
# iterations that its parent (this script) is still there.
for _ in 1 2; do
  "$python" -c '
import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(3_000_000):
        pass
' &
  loops+=($!)
done
echo "stress-suite: $passes passes of '$pytest -q $*' beside 2 busy CPU loops (pids ${loops[*]}); logs in $logs"

for ((pass = 1; pass <= passes; pass++)); do
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  start=$(date +%s)
  set +e
  "$pytest" -q "$@" >"$logs/pass$pass.log" 2>&1
  status=$?
  set -e
  seconds=$(($(date +%s) - start))
  last=$(grep -E '(passed|failed|error|no tests ran)' "$logs/pass$pass.log" | tail -n 1 | tr -s '=' | sed 's/^ *= *//; s/ *=$//')
  echo "pass $pass/$passes: $([ $status -eq 0 ] && echo passed || echo "FAILED (exit $status)") in ${seconds}s;" \
       "load average before ${load_before}, after $(cut -d' ' -f1-3 /proc/loadavg); ${last}"
  if [ $status -ne 0 ]; then
    grep -E '^(FAILED|ERROR) ' "$logs/pass$pass.log" || true
    echo "stress-suite: pass $pass failed; its output: $logs/pass$pass.log" >&2
    exit $status
  fi
done
echo "stress-suite: all $passes passes passed"
