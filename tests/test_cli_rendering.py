"""Verbs that render with MuJoCo, on a machine without libOSMesa: one line naming the package, exit 2.

Without the library, ``import mujoco`` under ``MUJOCO_GL=osmesa`` fails inside PyOpenGL
(``'NoneType' object has no attribute 'glGetError'``), and with ``MUJOCO_GL`` unset and no display the
renderer fails in GLFW. The commands run as a user types them, with no terminal. The absent library is
simulated by a ``sitecustomize`` that every Python process started with ``PYTHONPATH`` loads (the simulated
arm's own process too); the last test hides the real one with ``scripts/without-system-deps.sh``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Runs `robot-rl` as a user types it (docs/testing.md's tiers).
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ROBOT_RL = str(Path(sys.executable).with_name("robot-rl"))

#: A machine without libOSMesa, as PyOpenGL and ctypes see it.
NO_OSMESA = '''
import ctypes.util, os, sys

_find = ctypes.util.find_library
ctypes.util.find_library = lambda name: None if name == "OSMesa" else _find(name)


class _PyOpenGLWithoutOSMesa:
    """PyOpenGL's import with its osmesa platform library absent: the platform's GL is None."""

    def find_spec(self, name, path=None, target=None):
        if name == "OpenGL.GL" and "osmesa" in (os.environ.get("MUJOCO_GL"), os.environ.get("PYOPENGL_PLATFORM")):
            raise AttributeError("'NoneType' object has no attribute 'glGetError'")
        return None


sys.meta_path.insert(0, _PyOpenGLWithoutOSMesa())
'''


def _env(tmp_path: Path, mujoco_gl: str | None) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NO_OSMESA)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), env.get("PYTHONPATH", "")])
    if mujoco_gl is not None:
        env["MUJOCO_GL"] = mujoco_gl
    return env


def _one_line_error(run: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in run.stderr.splitlines() if ln.strip() and not ln.startswith("without-system-deps:")]
    assert run.returncode == 2, run.stderr[-3000:]
    assert len(lines) == 1, run.stderr[-3000:]  # no traceback, no GLFW warnings
    assert "apt-get install libosmesa6" in lines[0] and "MUJOCO_GL=egl" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("mujoco_gl", ["osmesa", None])
def test_train_on_camera_task_says_what_to_install(tmp_path: Path, mujoco_gl: str | None) -> None:
    """osmesa: `import mujoco` fails in PyOpenGL; unset: the env's CameraRenderer would open GLFW, headless."""
    pytest.importorskip("mujoco")
    cmd = [ROBOT_RL, "train", "--task", "mujoco/reach", f"run.root={tmp_path / 'runs'}", "task.obs=pixels",
           "task.num_envs=1", "loop.total_env_steps=100", "run.progress=false"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env(tmp_path, mujoco_gl),
                         stdin=subprocess.DEVNULL, cwd=tmp_path)
    line = _one_line_error(run)
    assert line.startswith("robot-rl: error: MuJoCo cannot render")
    assert ("libOSMesa is not installed" if mujoco_gl else "no display") in line


def test_record_from_sim_so101_cameras_says_what_to_install(tmp_path: Path) -> None:
    """The simulated arm renders in its own process: its failure reaches the user as the same one line."""
    pytest.importorskip("mujoco")
    pytest.importorskip("mink")
    cmd = [ROBOT_RL, "record", "--robot", "sim_so101", "--teleop", "pick_demonstrator", "--episodes", "1",
           "--no-status", "--out", str(tmp_path / "demos"), "robot.cameras={front: [32, 32]}"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env(tmp_path, None),
                         stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert "no display" in _one_line_error(run)
    assert not (tmp_path / "demos").exists() or not any((tmp_path / "demos").iterdir())


def test_record_with_libosmesa_hidden_says_what_to_install(tmp_path: Path) -> None:
    """The real library hidden (scripts/without-system-deps.sh), MUJOCO_GL=osmesa as the docs' commands set it."""
    pytest.importorskip("mujoco")
    pytest.importorskip("mink")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(MUJOCO_GL="osmesa", PYOPENGL_PLATFORM="osmesa")
    cmd = [str(ROOT / "scripts" / "without-system-deps.sh"), ROBOT_RL, "record", "--robot", "sim_so101",
           "--teleop", "pick_demonstrator", "--episodes", "1", "--no-status", "--out", str(tmp_path / "demos"),
           "robot.cameras={front: [32, 32]}"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
                         cwd=tmp_path)
    if "cannot hide" in run.stderr:
        pytest.skip("libosmesa6 is installed and cannot be hidden here (without-system-deps.sh needs root and unshare)")
    assert "libOSMesa is not installed" in _one_line_error(run)


def test_a_camera_less_simulated_arm_starts_with_libosmesa_hidden(tmp_path: Path) -> None:
    """MUJOCO_GL=osmesa exported before libosmesa6 is installed: the arm's physics needs no OpenGL, so a camera-less
    arm starts (its server drops the unusable backend) while one with cameras says what to install."""
    pytest.importorskip("mujoco")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(MUJOCO_GL="osmesa", PYOPENGL_PLATFORM="osmesa")
    code = ("from robot_rl.hardware.sim_arm import SimulatedArm, SimulatedArmConfig\n"
            "arm = SimulatedArm(SimulatedArmConfig(cameras={})); arm.connect(); arm.disconnect(); print('STARTED')\n"
            "try:\n    SimulatedArm(SimulatedArmConfig()).connect()\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    run = subprocess.run([str(ROOT / "scripts" / "without-system-deps.sh"), sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL, cwd=tmp_path)
    if "cannot hide" in run.stderr:  # "none of ... is installed": a fresh machine, the case itself
        pytest.skip("libosmesa6 is installed and cannot be hidden here (without-system-deps.sh needs root and unshare)")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "STARTED"
    assert lines[1].startswith("RenderingUnavailableError") and "apt-get install libosmesa6" in lines[1]


def test_find_limits_on_a_camera_less_so101_runs_with_libosmesa_hidden(tmp_path: Path) -> None:
    """The same export, and the arm kinematics (mink's MuJoCo model) imported in the command's own process: CI's
    fresh-machine pass once failed here when an earlier test had left MUJOCO_GL=osmesa in its worker."""
    pytest.importorskip("mujoco")
    pytest.importorskip("mink")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(MUJOCO_GL="osmesa", PYOPENGL_PLATFORM="osmesa")
    out = tmp_path / "limits.yaml"
    cmd = [str(ROOT / "scripts" / "without-system-deps.sh"), ROBOT_RL, "robot", "find-limits", "--robot", "sim_so101",
           "--teleop", "pick_demonstrator", "--seconds", "2", "--out", str(out), "robot.cameras={}"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
                         cwd=tmp_path)
    if "cannot hide" in run.stderr:
        pytest.skip("libosmesa6 is installed and cannot be hidden here (without-system-deps.sh needs root and unshare)")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "joint ranges" in run.stdout and out.exists()
