#!/usr/bin/env bash
# MuJoCo tasks on the GPU machine with the MJX backend: steps/s for num_envs 1..4096 and CPU parity.
#
# Carried wheels (put them in .whl/ at the repo root, about 35 MB; Python 3.12, manylinux x86_64):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       -d .whl mujoco==3.17.0 mujoco-mjx==3.17.0 absl-py etils trimesh
#   mujoco-3.17.0-cp312-...whl (26.7 MB), mujoco_mjx-3.17.0-py3-none-any.whl (7.3 MB),
#   absl_py-2.5.1, etils-1.15.0, trimesh-5.2.0 (pure Python, < 1 MB together).
# The machine already has torch (CUDA), JAX with CUDA, numpy and scipy. glfw/pyopengl are not
# needed: state observations only, no rendering.
#
# Run (device tool, carry [".whl"]):  bash benchmarks/device/mujoco_gpu.sh   (finishes in < 3 min)
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${WHL_DIR:-.whl}"/*.whl
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # share the GPU with torch
export MUJOCO_GL=egl
export JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache   # a rerun in the same lease skips compiling
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
timeout 170 python3 benchmarks/device/mujoco_gpu.py "$@"
