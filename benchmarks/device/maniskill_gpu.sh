#!/usr/bin/env bash
# ManiSkill3 on the GPU machine: PickCube-v1 physx_cuda steps/s (raw vs adapter), the adapter's CUDA
# test, and robot-rl PPO time to success. Finishes in < 6 minutes; prints SUMMARY lines at the end.
#
# Prepare here once (downloads; about 50 MiB of wheels + 0.4 MiB of debs, under the 64 MiB carry cap):
#     python3 benchmarks/device/maniskill_gpu.prepare.py
# Then run with the device tool, from the repository root:
#     run(command="bash benchmarks/device/maniskill_gpu.sh", carry=[".whl", ".gl"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/maniskill_gpu_out}
mkdir -p "$OUT"
log() { echo "[$(date +%T)] $*"; }

# Vulkan/EGL loaders (the image has the NVIDIA driver's ICD, not the loader), then the wheels.
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MS_ASSET_DIR=/tmp/maniskill_data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, sapien, mani_skill, gymnasium; print('torch', torch.__version__, 'sapien', sapien.__version__,
'mani_skill', mani_skill.__version__, 'gymnasium', gymnasium.__version__, 'cuda', torch.cuda.is_available())" || exit 1

log "steps/s"
timeout 90 python3 benchmarks/device/maniskill_gpu.py steps --num-envs 64 1024 4096 2>&1 | tee "$OUT/steps.log"
log "adapter test on physx_cuda"
# only the CUDA test: the CPU ones need lavapipe, and PegInsertionSide the wrist camera mesh the slim wheel drops
timeout 45 python3 -m pytest -q -p no:cacheprovider tests/test_maniskill.py -k "physx_cuda or resolves" \
  2>&1 | tail -5 | tee "$OUT/pytest.log"
log "PPO"
timeout 200 python3 benchmarks/device/maniskill_gpu.py ppo --wall-s "${PPO_WALL_S:-200}" --root /tmp/runs 2>&1 \
  | grep -v "^\s*$" | tail -40 | tee "$OUT/ppo.log"
log "done"
echo "===== summary ====="
grep -h "SUMMARY\|passed\|failed" "$OUT/steps.log" "$OUT/pytest.log" "$OUT/ppo.log"
