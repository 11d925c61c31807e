"""Moving a scene camera to where a real one sits: ``task.camera_adjust``.

A real camera is never mounted exactly where the simulated scene puts it, and its lens is not the scene's.
``camera_adjust`` maps a camera name to seven numbers, ``[dx, dy, dz, roll, pitch, yaw, fovy_scale]``: a shift of
the camera's position in its parent body's frame (m), a rotation about the camera's own x, y and z axes
(degrees, applied in that order), and a factor on its vertical field of view (the intrinsics a pinhole
model has: MuJoCo cameras are square-pixel pinholes, so the field of view is the focal length).
`robot-rl twin camera` fits these numbers from logged images (:mod:`robot_rl.twin.camera`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError

#: What each of the seven numbers is, in order (reports and errors).
ADJUST_FIELDS = ("dx", "dy", "dz", "roll", "pitch", "yaw", "fovy_scale")
#: The adjustment that changes nothing.
NEUTRAL = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


def check_adjust(adjust: Mapping[str, Sequence[float]], cameras: Sequence[str]) -> None:
    """Raise ``ValueError`` unless every entry names a scene camera and holds seven finite numbers."""
    for name, values in adjust.items():
        if name not in cameras:
            raise ConfigError(f"camera_adjust: {name!r} is not one of {', '.join(map(repr, cameras))}")
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (7,) or not np.isfinite(v).all():
            raise ConfigError(f"camera_adjust.{name} needs 7 finite numbers [{', '.join(ADJUST_FIELDS)}], "
                              f"got {list(values)}")
        if not 0.1 <= v[6] <= 10.0:
            raise ConfigError(f"camera_adjust.{name}: fovy_scale {v[6]:g} must be in [0.1, 10]")


def set_camera(model: Any, nominal: tuple[np.ndarray, np.ndarray, float], cam_id: int,
               values: Sequence[float]) -> None:
    """Put camera ``cam_id`` at ``nominal`` (its ``(pos, quat, fovy)``) adjusted by ``values`` (module docstring)."""
    import mujoco

    pos, quat, fovy = nominal
    v = np.asarray(values, dtype=np.float64)
    model.cam_pos[cam_id] = pos + v[:3]
    turn = np.zeros(4)
    mujoco.mju_euler2Quat(turn, np.deg2rad(v[3:6]), "xyz")  # lower case: about the rotating (camera) axes
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, quat, turn)
    model.cam_quat[cam_id] = out
    model.cam_fovy[cam_id] = min(fovy * v[6], 179.0)


def nominal_camera(model: Any, cam_id: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Camera ``cam_id``'s ``(pos, quat, fovy)`` as the model holds them now (copies)."""
    return model.cam_pos[cam_id].copy(), model.cam_quat[cam_id].copy(), float(model.cam_fovy[cam_id])


def apply_camera_adjust(model: Any, adjust: Mapping[str, Sequence[float]]) -> None:
    """Move every camera named in ``adjust`` (in place, before any renderer draws from ``model``)."""
    import mujoco

    for name, values in adjust.items():
        cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
        if cam_id < 0:
            raise ConfigError(f"camera_adjust: the scene has no camera {name!r}")
        set_camera(model, nominal_camera(model, cam_id), cam_id, values)
