#!/usr/bin/env bash
# The core CUDA checks, run on a GPU machine (Python 3.12 with a CUDA torch, no internet) in one short call:
#   1. SAC vs Stable-Baselines3 SAC, both on cuda, same steps (benchmarks/sac_vs_sb3.py --device cuda);
#   2. `robot-rl train` (SAC, default reach task) on cuda: wall-clock to >= 90% success;
#   3. `robot-rl train --algo ppo` on reach with 4096 envs on cuda: wall-clock to >= 90% success.
# Wheels it needs (carried in .whl-base/, fetched here with `pip download --python-version 3.12 ...`):
#   gymnasium==1.4.0 farama-notifications stable-baselines3==2.9.2 tyro==1.0.17 docstring-parser typeguard
#   pyzmq==27.3.0
# Logs go to $OUT (or ./benchmarks/out when OUT is unset).
set -u
OUT=${OUT:-benchmarks/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-core .whl-base/*.whl || exit 1
export PYTHONPATH=/tmp/site-core:$PWD
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"

echo "== 1. SAC vs SB3 on cuda"
timeout "${SAC_TIMEOUT:-200}" python3 benchmarks/sac_vs_sb3.py --device cuda --steps "${SAC_STEPS:-6000}" --learning-starts 1000 --chunk 1000 \
  --variants fp32,compile-graphs --eval-episodes 3 --out "$OUT/sac_vs_sb3_cuda.json" 2>&1 | tee "$OUT/sac_vs_sb3_cuda.log" | tail -8

if [ "${SKIP_SAC_CLI:-0}" != 1 ]; then
echo "== 2. robot-rl train (SAC reach) on cuda"
/usr/bin/time -f "wall %e s" timeout 150 python3 -m robot_rl.cli train --name sac-reach-cuda run.device=cuda \
  run.progress=false 2>&1 | tail -3
cat runs/sac-reach-cuda/summary.md 2>/dev/null | head -20 | tee "$OUT/sac_reach_cuda_summary.md"
fi

echo "== 3. robot-rl train --algo ppo (reach, 4096 envs) on cuda"
/usr/bin/time -f "wall %e s" timeout "${PPO_TIMEOUT:-150}" python3 -m robot_rl.cli train --algo ppo --name ppo-reach-cuda \
  task.num_envs=4096 run.device=cuda run.progress=false 2>&1 | tail -3
cat runs/ppo-reach-cuda/summary.md 2>/dev/null | head -20 | tee "$OUT/ppo_reach_cuda_summary.md"
