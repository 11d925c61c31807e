"""The camera part of the twin: ``task.camera_adjust`` and `robot-rl twin camera` (robot_rl/twin/camera.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco")  # MUJOCO_GL is chosen in conftest.py, before anything imports mujoco

from needs import need_mujoco_rendering

from robot_rl.core.config import TASKS
from robot_rl.sims.mujoco.camera_pose import check_adjust, nominal_camera, set_camera
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, record_demos

pytestmark = pytest.mark.sim

#: The shifted world's camera offset (ShiftConfig.camera_offset): the "real" camera sits there.
OFFSET = np.array([0.03, -0.04, 0.02])


def test_set_camera_moves_turns_and_zooms_from_the_nominal_camera():
    import mujoco

    from robot_rl.sims.mujoco.scene import build_model

    model, _ = build_model((), 0.005)
    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "front")
    pos, quat, fovy = nominal = nominal_camera(model, cam)
    set_camera(model, nominal, cam, [0.01, -0.02, 0.03, 0.0, 0.0, 90.0, 1.2])
    np.testing.assert_allclose(model.cam_pos[cam], np.add(pos, [0.01, -0.02, 0.03]))
    assert model.cam_fovy[cam] == pytest.approx(1.2 * fovy)
    # 90° about the camera's own z axis: its x axis turns into its old y axis (in the parent's frame).
    def axes(q):
        m = np.zeros(9)
        mujoco.mju_quat2Mat(m, q)
        return m.reshape(3, 3)
    np.testing.assert_allclose(axes(model.cam_quat[cam])[:, 0], axes(quat)[:, 1], atol=1e-9)
    set_camera(model, nominal, cam, [0, 0, 0, 0, 0, 0, 1])  # neutral: back exactly where it was
    np.testing.assert_allclose(model.cam_pos[cam], pos)
    np.testing.assert_allclose(model.cam_quat[cam], quat, atol=1e-12)


def test_bad_camera_adjustments_are_refused_before_a_scene_is_built():
    cams = ("front", "side")
    check_adjust({"front": [0, 0, 0, 0, 0, 0, 1]}, cams)
    for bad, says in (({"back": [0] * 6 + [1]}, "not one of"), ({"front": [0, 0, 0]}, "7 finite numbers"),
                      ({"front": [0, 0, float("nan"), 0, 0, 0, 1]}, "7 finite numbers"),
                      ({"front": [0, 0, 0, 0, 0, 0, 0]}, "fovy_scale")):
        with pytest.raises(ValueError, match=says):
            check_adjust(bad, cams)
    with pytest.raises(ValueError, match="not one of"):
        TASKS.get("mujoco/reach")(camera_adjust={"back": [0] * 6 + [1]}).make("cpu", 0, num_envs=1)


def test_every_world_of_the_shifted_env_sees_from_the_moved_camera():
    # The shifted world once moved the camera only in the env's model, after set_params had copied it per world:
    # its images came from the unmoved camera. Now every world's model holds the offset, as camera_adjust's do.
    import mujoco

    shifted = TASKS.get("mujoco/reach_shifted")().make("cpu", 0, num_envs=2)
    adjusted = TASKS.get("mujoco/reach")(camera_adjust={"front": [*OFFSET, 0, 0, 0, 1]}).make("cpu", 0, num_envs=2)
    plain = TASKS.get("mujoco/reach")().make("cpu", 0, num_envs=1)
    try:
        cam = mujoco.mj_name2id(plain.model, mujoco.mjtObj.mjOBJ_CAMERA, "front")
        for env in (shifted, adjusted):
            for m in env.backend.models:
                np.testing.assert_allclose(m.cam_pos[cam], plain.model.cam_pos[cam] + OFFSET)
    finally:
        for env in (shifted, adjusted, plain):
            env.close()


def _record(out: Path, episodes: int = 3, steps: int = 8, size: int = 32) -> Path:
    """Logs of the shifted world's camera (moved, other colours and light) beside the full state."""
    real = TASKS.get("mujoco/reach_shifted")(obs="state_pixels", image_size=size, num_envs=episodes,
                                            terminate_on_success=False, max_episode_steps=steps)
    env = real.make("cpu", 1)
    try:
        record_demos(env, out, episodes, ScriptedReachDemonstrator(gain=0.3, noise=0.5, seed=3), seed=1, fps=25.0)
    finally:
        env.close()
    return out


@pytest.mark.integration
def test_the_camera_fit_finds_the_moved_camera(tmp_path: Path):
    need_mujoco_rendering()
    pytest.importorskip("cma")
    from robot_rl.twin.camera import CameraFitConfig, fit_camera

    logs = _record(tmp_path / "real")
    # The position alone (the intrinsics known): with the field of view free as well, a shift along the line of
    # sight and a zoom form a long valley that CMA-ES needs ~60 iterations to follow (docs/real2sim.md).
    cfg = CameraFitConfig(free=("dx", "dy", "dz"), frames=8, population=8, iterations=25, restarts=1)
    fit = fit_camera(TASKS.get("mujoco/reach")(image_size=32), logs, cfg)
    assert np.abs(np.asarray(fit.values[:3]) - OFFSET).max() < 0.01, fit.values
    assert fit.values[3:] == [0.0, 0.0, 0.0, 1.0], fit.values
    # Colours and light differ from the simulator's, yet the standardised grey error falls many-fold.
    assert fit.error_after < 0.1 * fit.error_before, (fit.error_before, fit.error_after)
    assert list(fit.adjust()) == ["front"] and len(fit.adjust()["front"]) == 7


@pytest.mark.integration
def test_the_cli_verb_says_what_the_logs_lack(tmp_path: Path):
    # State-only logs: no frames to fit to. Exit 2 with what to record instead, as a user sees it.
    real = TASKS.get("mujoco/reach")(num_envs=2, max_episode_steps=4)
    env = real.make("cpu", 0)
    try:
        record_demos(env, tmp_path / "logs", 2, ScriptedReachDemonstrator(seed=1), fps=25.0)
    finally:
        env.close()
    exe = str(Path(sys.executable).with_name("robot-rl"))
    done = subprocess.run([exe, "twin", "camera", "--episodes", str(tmp_path / "logs"), "--out",
                           str(tmp_path / "camera.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "image.front" in done.stderr and "task.obs=state_pixels" in done.stderr
    assert not (tmp_path / "camera.json").exists()
