#!/usr/bin/env bash
# The venv of benchmarks/lerobot_side_by_side.py (RESULTS_so101.md §4): LeRobot 0.4.4's HIL-SERL stack and gym_hil
# beside robot-rl, in .venv-gymhil. Its own venv because gym-hil 0.1.14 pins mujoco<3.9 (.venv has 3.17) and
# lerobot 0.4.4 pins an older torch than the 2.13.0 CPU build of .venv; 2.14.1/0.29.1 is the pair that imports
# together here (as in .ci/run's .venv-lerobot).
#
#   bash benchmarks/setup_gym_hil_venv.sh            # then see lerobot_side_by_side.py's docstring
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
venv=${GYM_HIL_VENV:-.venv-gymhil}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip="$venv/bin/pip"
"$pip" install -q torch==2.14.1 torchvision==0.29.1
"$pip" install -q -e '.[gym,datasets]'
# lerobot without its dependency pins (they would replace the torch above); what lerobot.rl and lerobot.policies
# import, listed by hand as .ci/run does; grpcio/protobuf for its actor-learner transport.
"$pip" install -q --no-deps lerobot==0.4.4 torchcodec==0.14.0
"$pip" install -q 'numpy<2.4' 'datasets<5' 'huggingface-hub<0.36' 'draccus==0.10.0' av jsonlines accelerate \
  deepdiff termcolor 'imageio[ffmpeg]' 'transformers>=4.57.1,<5' 'diffusers<0.37' 'num2words>=0.5.14,<0.6' \
  pyserial einops gymnasium 'grpcio>=1.73' 'protobuf>=6.31,<7' wandb pynput opencv-python-headless
"$pip" install -q 'gym-hil==0.1.14'
# Importing triton after OSMesa's LLVM segfaults; nothing here needs it on a CPU.
"$pip" uninstall -q -y triton || true
"$venv/bin/python" -c "import torch, lerobot.rl.learner, gym_hil, mujoco; print('ok: torch', torch.__version__, \
'mujoco', mujoco.__version__)"
