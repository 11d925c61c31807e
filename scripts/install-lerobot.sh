#!/usr/bin/env bash
# LeRobot beside robot_rl in the virtualenv VENV (created if absent). The one recipe: the docs give this line and
# CI runs it (.ci/run; tests/test_docs_lerobot_install.py checks both):
#
#   bash scripts/install-lerobot.sh .venv-lerobot
#
# lerobot 0.4.4 (the newest for Python 3.11) pins torch<2.11 and torchvision<0.26, which no longer match the torch
# wheels here, so it goes in with --no-deps on a torch/torchvision pair that imports together, and then the packages
# its code imports (docs/datasets.md, "Installing LeRobot", says which for what). pip warns that lerobot wanted older
# torch, torchvision, av and torchcodec; CI's LeRobot tests are the proof that it works with these.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bash scripts/install-lerobot.sh VENV   (e.g. .venv-lerobot; created if it does not exist)" >&2
  exit 2
fi
venv=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip="$venv/bin/pip"

"$pip" install torch==2.14.1 torchvision==0.29.1
# robot_rl with its LeRobotDataset reader/writer; pytest to run the LeRobot tests in this venv (pytest-xdist: the
# addopts in pyproject.toml name its options).
"$pip" install -e "$repo[datasets]" pytest pytest-timeout 'pytest-xdist>=3.8'
"$pip" install --no-deps lerobot==0.4.4 torchcodec==0.14.0
# lerobot's datasets (numpy<2.4: NumPy 2.4 made `float(array)` of a (1,) array an error), SmolVLA/pi0 (transformers,
# num2words; diffusers because lerobot.policies imports GR00T once transformers is present), its robots, cameras and
# teleoperators (pyserial, einops, OpenCV: lerobot-calibrate imports every robot, LeKiwi's client imports cv2), and
# gymnasium (lerobot.policies.factory imports lerobot's env utilities).
"$pip" install 'numpy<2.4' 'datasets<5' 'huggingface-hub<0.36' 'draccus==0.10.0' av jsonlines accelerate deepdiff \
  termcolor 'imageio[ffmpeg]' 'transformers>=4.57.1,<5' 'diffusers<0.37' 'num2words>=0.5.14,<0.6' pyserial einops \
  'opencv-python-headless>=4.9,<4.13' gymnasium
# The SO and Koch followers' motor SDKs (lerobot's feetech and dynamixel extras) and the arm kinematics (mink, which
# brings MuJoCo; daqp): robot_rl's LeRobot arms in ee_delta/joint_delta.
"$pip" install 'feetech-servo-sdk>=1.0.0,<2.0.0' 'dynamixel-sdk>=3.7.31,<3.9.0' 'mink>=1.3,<2' 'daqp>=0.8.2'
echo "LeRobot is installed in $venv (activate it with: . $venv/bin/activate)"
