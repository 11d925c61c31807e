"""Prepare what ``maniskill_gpu.sh`` carries to the GPU machine: wheels in ``.whl``, Vulkan loader debs in ``.gl``.

The GPU machine has Python 3.12 and torch, no internet, and a 64 MiB cap on everything that travels
(repository + wheels + debs). ManiSkill's and SAPIEN's wheels alone are 97 + 49 MiB, so the two are
repacked without what PickCube/PushCube/PegInsertionSide never load:

- mani_skill: other robots' meshes (the wrist camera's RealSense mesh too), the 23 MiB HDR environment
  map, scene datasets' data files (ReplicaCAD, kitchen), the tiled floor texture; every ``.py``/small
  file stays, and so do the Panda's meshes and the table. Any file over 100 KiB outside the kept
  folders is dropped.
- sapien: C headers, macOS libraries, the stereo-depth sensor's IR patterns and OIDN's CUDA plugin;
  its ELF libraries are stripped of static symbols (``strip --strip-unneeded``; dynamic symbols stay).

Run here, from the repository root (downloads from the package index, so not on the GPU machine)::

    python3 benchmarks/device/maniskill_gpu.prepare.py             # cp312 wheels into .whl/, debs into .gl/
    python3 benchmarks/device/maniskill_gpu.prepare.py --python-version 3.11 --dest /tmp/whl311 --no-gl
        # the same slimming for this machine's Python, to check the slim wheels work here first

The wheels do not include anything the GPU image already has (numpy, scipy, h5py, pillow, imageio,
rich, tqdm, pyyaml, psutil, huggingface-hub, lxml, opencv, nvidia-ml-py, requests, msgpack, tensorboard,
matplotlib, pygments, typing-extensions; see /work/.library/device/KINDS.md).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: Pinned: what `pip install mani-skill==3.0.1` resolved to here, minus the GPU image's packages and
#: minus what `import mani_skill.envs` + PickCube never imports (mplib, toppra, GitPython, tyro, ...).
WHEELS = [
    "mani-skill==3.0.1", "sapien==3.0.3", "gymnasium==1.4.0", "farama-notifications==0.0.6",
    "cloudpickle==3.1.3", "dacite==1.9.2", "transforms3d==0.4.2", "trimesh==5.2.0", "defusedxml==0.7.1",
    "pytorch-kinematics==0.7.6", "arm-pytorch-utilities==0.5.0", "pytorch-seed==0.2.0",
    # mani_skill.utils.visualization imports IPython.display at import time; IPython 9 imports its
    # shell lazily, so of its dependencies only traitlets (and pygments, in the image) are loaded
    "ipython==9.18.1", "traitlets==5.16.1",
    # robot_rl's runner imports its ZeroMQ transport
    "pyzmq==27.3.0",
]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux1_x86_64",
             "manylinux_2_26_x86_64"]
GL_DEBS = ["libvulkan1", "libegl1", "libglvnd0", "libopengl0", "libgl1", "libglx0", "libgles2"]

MANISKILL_KEEP = (
    "mani_skill/assets/robots/panda/franka_description/",  # the Panda (panda_v2.urdf); not the wristcam
    "mani_skill/utils/scene_builder/table/assets/",
)
MANISKILL_DROP_ABOVE = 100 * 1024
SAPIEN_DROP = ("sapien/include/", "sapien/sensor/assets/patterns/", "sapien/oidn_library/libOpenImageDenoise_device",
               "sapien/vulkan_library/libvulkan.1.3.290.dylib")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def repack(src: Path, dst: Path, keep: object, strip: bool) -> tuple[int, int]:
    """Copy wheel ``src`` to ``dst`` with the files ``keep(name, size)`` accepts, a fresh RECORD, and
    ELF files stripped when ``strip``; returns (files dropped, bytes saved)."""
    dropped = 0
    records: list[str] = []
    record_name = ""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout, \
            tempfile.TemporaryDirectory() as tmp:
        for info in zin.infolist():
            name = info.filename
            if name.endswith(".dist-info/RECORD"):
                record_name = name
                continue
            if not keep(name, info.file_size):  # type: ignore[operator]
                dropped += 1
                continue
            data = zin.read(info)
            if strip and data[:4] == b"\x7fELF":
                path = Path(tmp) / "lib.so"
                path.write_bytes(data)
                subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
                data = path.read_bytes()
            out = zipfile.ZipInfo(name, date_time=info.date_time)
            out.external_attr = info.external_attr
            zout.writestr(out, data, zipfile.ZIP_DEFLATED)
            records.append(_record_line(name, data))
        records.append(f"{record_name},,")
        zout.writestr(record_name, "\n".join(records) + "\n")
    return dropped, src.stat().st_size - dst.stat().st_size


def keep_maniskill(name: str, size: int) -> bool:
    """Small files and the folders PickCube/PushCube/PegInsertionSide load."""
    return size <= MANISKILL_DROP_ABOVE or name.startswith(MANISKILL_KEEP) or ".dist-info/" in name


def keep_sapien(name: str, size: int) -> bool:
    """Everything but headers, macOS libraries, stereo IR patterns and OIDN's CUDA plugin."""
    return not name.startswith(SAPIEN_DROP)


def main() -> int:
    """Download, slim, report sizes."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python-version", default="3.12")
    p.add_argument("--dest", type=Path, default=Path(".whl"))
    p.add_argument("--gl", type=Path, default=Path(".gl"))
    p.add_argument("--no-gl", action="store_true", help="skip downloading the Vulkan/EGL loader debs")
    args = p.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", args.python_version, "--implementation", "cp", "-d", tmp]
        for plat in PLATFORMS:
            cmd += ["--platform", plat]
        subprocess.run(cmd + WHEELS, check=True)
        for whl in sorted(Path(tmp).glob("*.whl")):
            target = args.dest / whl.name
            if whl.name.startswith("mani_skill-"):
                n, saved = repack(whl, target, keep_maniskill, strip=False)
            elif whl.name.startswith("sapien-"):
                n, saved = repack(whl, target, keep_sapien, strip=True)
            else:
                shutil.copy(whl, target)
                continue
            print(f"{whl.name}: dropped {n} files, {saved / 2**20:.1f} MiB smaller")
    if not args.no_gl:
        args.gl.mkdir(parents=True, exist_ok=True)
        lists = Path(tempfile.mkdtemp())
        (lists / "partial").mkdir()
        opts = ["-oAPT::Architecture=amd64", "-oAPT::Architectures=amd64", f"-oDir::State::Lists={lists}"]
        subprocess.run(["apt-get", *opts, "-qq", "update"], check=True)
        subprocess.run(["apt-get", *opts, "-qq", "download", *GL_DEBS], check=True, cwd=args.gl)
    total = sum(f.stat().st_size for f in args.dest.glob("*.whl"))
    gl = sum(f.stat().st_size for f in args.gl.glob("*.deb")) if args.gl.exists() else 0
    print(f"{args.dest}: {len(list(args.dest.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB; "
          f"{args.gl}: {gl / 2**20:.1f} MiB (the carry cap is 64 MiB with the repository)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
