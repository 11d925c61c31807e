#!/usr/bin/env bash
# Issue 24's `lang_push` comparison on a GPU: Q-chunking (best-of-N and QC-FQL) against DSRL and Flow-Noise PPO
# from one SFT checkpoint, each in its own process on the one GPU, for the same wall-clock (curves against env
# steps; benchmarks/flow_qchunk_bench.py --device cuda). On the 2-core CPU these methods made 1-2.5k updates in
# 10 minutes; the GPU's point here is updates.
#
# Carried: .whl/ (pyzmq 27.3.0, crc32c, tyro 1.0.17, docstring-parser, typeguard, shtab for Python 3.12; the
# machine has torch, numpy, msgpack, pyyaml, rich, matplotlib) and .flowsft/flowsft.tgz (sft/ and demos/ of one
# `flow_qchunk_bench.py --demos 400 --sft-steps 1500 --image-size 48` run, made on the CPU; 50 MB of npz
# episodes, 3 MB packed).
#
# Run (device tool, carry [".whl", ".flowsft"]):  bash benchmarks/device/flow_qchunk_gpu.sh
#   First a smoke pass (every run with 16 envs for 2,048 env steps) so that a CUDA error costs a minute, not the lease;
#   then every run for MINUTES (default 6.5) of wall-clock. Everything lands in $OUT/flow_qchunk_gpu.tgz.
#   DEVICE=cpu SMOKE_ONLY=1 checks the script itself on a CPU machine (with .venv's python first on PATH).
set -uo pipefail
OUT=${OUT:-benchmarks/out}; mkdir -p "$OUT"
if [ "${DEVICE:-cuda}" = cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:$PWD:$PWD/benchmarks" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
WORK=/tmp/fq; mkdir -p "$WORK/smoke" "$WORK/full" /tmp/flowsft
tar xzf .flowsft/flowsft.tgz -C /tmp/flowsft || exit 1
MINUTES=${MINUTES:-6.5}
COMMON=(--task lang_push --sft /tmp/flowsft/sft --demos-dir /tmp/flowsft/demos --image-size 48 --device "${DEVICE:-cuda}" --threads 2)

# name | flags of the run
RUNS=(
  "qc_envs256_utd0.1|--methods flow_qc --rl-envs 256 --qc-utd 0.1 --qc-batch 256 --qc-learning-starts 2048"
  "qc_envs64_utd0.5|--methods flow_qc --rl-envs 64 --qc-utd 0.5 --qc-batch 256 --qc-learning-starts 2048"
  "fql_envs256_utd0.1|--methods flow_qc_fql --qc-fql-alpha 10 --rl-envs 256 --qc-utd 0.1 --qc-batch 256 --qc-learning-starts 2048"
  "dsrl_envs256_utd0.25|--methods dsrl --rl-envs 256 --dsrl-utd 0.25 --dsrl-learning-starts 4096"
  "ppo_envs1024|--methods flow_ppo --rl-envs 1024 --ppo-rollout 4"
)

launch() {  # $1 smoke|full; every run in the background, then wait for all
  local pass=$1 pids=() spec name flags extra
  for spec in "${RUNS[@]}"; do
    name=${spec%%|*}; flags=${spec#*|}
    if [ "$pass" = smoke ]; then
      extra=(--env-steps 2048 --eval-every 2048 --eval-episodes 10 --minutes 1 --qc-learning-starts 256
             --dsrl-learning-starts 256 --rl-envs 16)
    else
      extra=(--env-steps 20000000 --eval-every 100000 --eval-episodes 100 --minutes "$MINUTES")
    fi
    # shellcheck disable=SC2086
    timeout $([ "$pass" = smoke ] && echo 120 || echo 450) python3 benchmarks/flow_qchunk_bench.py "${COMMON[@]}" \
      $flags "${extra[@]}" --out "$WORK/$pass/$name.json" > "$WORK/$pass/$name.log" 2>&1 &
    pids+=($!)
  done
  local failed=0 i=0 rc
  for pid in "${pids[@]}"; do
    wait "$pid"; rc=$?
    if [ $rc -ne 0 ]; then failed=1; echo "== $pass ${RUNS[$i]%%|*} FAILED (exit $rc)"; tail -25 "$WORK/$pass/${RUNS[$i]%%|*}.log"; fi
    i=$((i + 1))
  done
  return $failed
}

pack() { tar czf "$OUT/flow_qchunk_gpu.tgz" -C "$WORK" . ; }
echo "== smoke $(date -u +%T)"
if ! launch smoke; then pack; exit 1; fi
grep -h "success .* ->" "$WORK"/smoke/*.log
if [ "${SMOKE_ONLY:-0}" = 1 ]; then pack; exit 0; fi
echo "== full $(date -u +%T)"
launch full
nvidia-smi --query-gpu=memory.used --format=csv,noheader || true
grep -h "success .* ->" "$WORK"/full/*.log
pack
echo "== done $(date -u +%T)"
