#!/usr/bin/env bash
# Same-behaviour check for a refactor: the four benchmarks the redesign (issue 19) names, run on the tree
# before it (a git worktree at BEFORE_REF) and on this tree, alternating per benchmark, with one venv.
#   bash benchmarks/before_after/run.sh b3d1236                    # all, outputs in benchmarks/results/before_after/
#   bash benchmarks/before_after/run.sh b3d1236 transport suite    # only these
#   OUT_DIR=benchmarks/results/before_after_issue51 PY=/path/to/python bash benchmarks/before_after/run.sh REF …
# The transport benchmark's pickle+lz4 peer needs `pip install lz4` (the bench extra).
# Compare the printed ratios within one run (the machine is shared and noisy). Then
# `python benchmarks/tables_redesign.py --printouts OUT_DIR --out OUT_DIR/before_after.json` writes the result file
# the tables render (`benchmarks/report.py`).
set -euo pipefail
cd "$(dirname "$0")/../.."
ref="${1:?usage: run.sh BEFORE_REF [NAME ...]}"
shift
only=" $* "
py="${PY:-$PWD/.venv/bin/python}"
out="${OUT_DIR:-$PWD/benchmarks/results/before_after}"
before="${BEFORE_DIR:-/tmp/robot_rl_before_$ref}"
mkdir -p "$out"
[ -d "$before" ] || git worktree add -f "$before" "$ref" -q
run() {  # run NAME TREE ARGS...: one benchmark in one tree, its output in $out/NAME-TREE.txt
  local name="$1" tree="$2"; shift 2
  if [ "$only" != "  " ] && [[ "$only" != *" $name "* ]]; then return 0; fi
  local dir; dir=$([ "$tree" = before ] && echo "$before" || echo "$PWD")
  echo "== $name ($tree)"
  (cd "$dir" && PYTHONPATH="$dir" /usr/bin/time -f "%e s wall, %U s user" "$py" "$@") > "$out/$name-$tree.txt" 2>&1
  tail -n 12 "$out/$name-$tree.txt"
}
for tree in before after; do run default_train "$tree" benchmarks/default_train.py --seeds 0 1 2; done
for tree in before after; do run sac_vs_sb3 "$tree" benchmarks/sac_vs_sb3.py --steps 15000 --variants fp32; done
for tree in before after; do run ppo_vs_rsl_rl "$tree" benchmarks/ppo_vs_rsl_rl.py --seeds 0,1; done
for tree in before after; do run transport "$tree" benchmarks/transport_bench.py --only throughput --rounds 3; done
# Issue 51: the demos' first losses, from this tree's script (a tree before it has none; it runs on either).
fp="$PWD/benchmarks/before_after/demos_fingerprint.py"
for tree in before after; do run demos_fingerprint "$tree" "$fp"; done
# The test suite's wall time (each tree's own tests; the after tree has more of them).
for tree in before after; do run suite "$tree" -m pytest -q -p no:cacheprovider; done
