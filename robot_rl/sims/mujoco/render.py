"""Camera images of MuJoCo worlds with ``mujoco.Renderer`` (OpenGL: osmesa on CPU, egl on GPU).

Images are drawn from each world's ``qpos`` and mocap positions, loaded into one scratch
``MjData`` with kinematics rerun, so both backends render the same way and the worker threads
never touch the OpenGL context (it belongs to the thread that created it: the env's).
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from typing import Any

import numpy as np


def choose_gl(device_type: str) -> None:
    """Pick a headless OpenGL backend before MuJoCo is imported, unless the user chose one.

    ``MUJOCO_GL`` is read once, when ``mujoco`` is first imported; with a display we leave it alone.
    """
    if "mujoco" in sys.modules or "MUJOCO_GL" in os.environ or os.environ.get("DISPLAY"):
        return
    backend, lib = ("egl", "EGL") if device_type == "cuda" else ("osmesa", "OSMesa")
    if ctypes.util.find_library(lib) is None:
        # Choosing a backend whose library is missing would break `import mujoco` itself (inside PyOpenGL),
        # physics included; without it MuJoCo still simulates and CameraRenderer says what to install.
        return
    os.environ["MUJOCO_GL"] = backend
    os.environ.setdefault("PYOPENGL_PLATFORM", backend)


class CameraRenderer:
    """Renders ``[k, H, W, 3]`` uint8 images of worlds given their ``qpos``/``mocap_pos``."""

    def __init__(self, model: Any, camera: str, height: int, width: int) -> None:
        import mujoco

        self._mj = mujoco
        self.model = model
        self.camera = camera
        self.data = mujoco.MjData(model)
        try:
            self.renderer = mujoco.Renderer(model, height=height, width=width)
        except Exception as e:
            raise RuntimeError(
                f"MuJoCo could not create an OpenGL context ({type(e).__name__}: {e}). Headless CPU: "
                "apt-get install libosmesa6 and set MUJOCO_GL=osmesa before importing mujoco; "
                "GPU: MUJOCO_GL=egl. The current MUJOCO_GL is "
                f"{os.environ.get('MUJOCO_GL', '(unset)')}."
            ) from e

    def render(self, qpos: np.ndarray, mocap_pos: np.ndarray) -> np.ndarray:
        """Images of ``k`` worlds from ``qpos [k, nq]`` and ``mocap_pos [k, nmocap, 3]``."""
        mj, d = self._mj, self.data
        out = np.empty((qpos.shape[0], self.renderer.height, self.renderer.width, 3), np.uint8)
        for i in range(qpos.shape[0]):
            d.qpos[:] = qpos[i]
            d.mocap_pos[:] = mocap_pos[i]
            mj.mj_kinematics(self.model, d)
            mj.mj_camlight(self.model, d)
            self.renderer.update_scene(d, camera=self.camera)
            self.renderer.render(out=out[i])
        return out

    def render_datas(self, datas: list[Any]) -> np.ndarray:
        """Images of worlds straight from their ``MjData`` (kinematics and camera frames must be current)."""
        out = np.empty((len(datas), self.renderer.height, self.renderer.width, 3), np.uint8)
        for i, d in enumerate(datas):
            self.renderer.update_scene(d, camera=self.camera)
            self.renderer.render(out=out[i])
        return out

    def close(self) -> None:
        """Free the OpenGL context.

        ``mujoco.Renderer.close`` frees its textures and buffers in whatever context is current; with
        two renderers in a process (a training env and an eval env) that is the *other* one's, whose
        frames then turn to garbage. Making our own context current first frees the right objects.
        """
        gl = getattr(self.renderer, "_gl_context", None)
        if gl is not None:
            gl.make_current()
        self.renderer.close()
