#!/usr/bin/env bash
# Issue 25's GPU benchmark: FastSAC vs PPO on `mujoco/pick_cube` at 4,096 MJX worlds, training wall time to 90 %
# success (benchmarks/fasttd3_vs_ppo.py on cuda; the learners take turns, evaluation untimed).
#
# Carried wheels: .whl/ of mujoco_gpu.sh (mujoco, mujoco-mjx and their small pure-Python deps) and .whl-base/ of
# core_gpu.sh (tyro and the rest the CLI config needs). The machine already has torch (CUDA), JAX with CUDA,
# numpy and scipy.
#
# Run (device tool, carry [".whl", ".whl-base"]):  bash benchmarks/device/fastsac_gpu.sh
#   BUDGET_S (default 150): training seconds per learner; the whole script stays under 8 minutes.
set -euo pipefail
OUT=${OUT:-benchmarks/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl .whl-base/*.whl
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # share the GPU with torch
export JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
timeout 470 python3 benchmarks/fasttd3_vs_ppo.py --device cuda --tasks mujoco/pick_cube --learners fastsac ppo \
  --num-envs 4096 --task-overrides task.backend=mjx --budget-s "${BUDGET_S:-150}" --eval-every 204800 \
  --eval-episodes 100 --out "$OUT/fasttd3_vs_ppo_pick_cube_gpu.json" 2>&1 | tee "$OUT/fastsac_pick_cube_gpu.log" | tail -25
