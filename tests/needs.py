"""Skips for absent system dependencies, each naming the Debian package that provides it.

A test skips only when something it needs is not installed; once it is installed, a failure to start (a
simulator that does not connect, a renderer that cannot make a context) fails the test.
"""

from __future__ import annotations

import ctypes.util
import glob
import os

import pytest

# MUJOCO_GL backend -> (the library MuJoCo loads, the Debian package that ships it)
_GL_LIBS = {"osmesa": ("OSMesa", "libosmesa6"), "egl": ("EGL", "libegl1")}


def need_mujoco_rendering() -> None:
    """Skip (a test or a whole module) unless MuJoCo and the OpenGL library its ``MUJOCO_GL`` backend loads exist.

    ``tests/conftest.py`` sets ``MUJOCO_GL=osmesa`` (CPU rendering) unless it is already set; the simulated
    arm's process does the same without a display.
    """
    pytest.importorskip("mujoco")
    backend = os.environ.get("MUJOCO_GL", "osmesa")
    lib = _GL_LIBS.get(backend)
    if lib is not None and ctypes.util.find_library(lib[0]) is None:
        pytest.skip(f"MuJoCo rendering with MUJOCO_GL={backend} needs lib{lib[0]}: apt-get install {lib[1]}",
                    allow_module_level=True)


def need_vulkan_driver() -> None:
    """Skip unless a Vulkan driver (an ICD manifest) is installed: SAPIEN, under ManiSkill, renders with Vulkan.

    On a CPU-only machine that is Mesa's lavapipe, ``mesa-vulkan-drivers`` (Mesa >= 25: on Debian bookworm from
    bookworm-backports, as ``.ci/run`` installs it); on a GPU machine the GPU driver's own ICD.
    """
    if os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
        return
    dirs = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
    if not any(glob.glob(os.path.join(d, "*.json")) for d in dirs):
        pytest.skip("no Vulkan driver for SAPIEN: apt-get install mesa-vulkan-drivers (lavapipe, Mesa >= 25)",
                    allow_module_level=True)
