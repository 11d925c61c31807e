"""Camera images of MuJoCo worlds with ``mujoco.Renderer`` (OpenGL: osmesa on CPU, egl on GPU).

Images are drawn from each world's ``qpos`` and mocap positions, loaded into one scratch
``MjData`` with kinematics rerun, so both backends render the same way and the worker threads
never touch the OpenGL context (it belongs to the thread that created it: the env's).

Without the OpenGL library the backend needs, MuJoCo fails deep inside PyOpenGL (``import mujoco`` with
``MUJOCO_GL=osmesa`` and no libOSMesa: ``'NoneType' object has no attribute 'glGetError'``); every place that
imports MuJoCo for a renderer or creates one turns that into :class:`RenderingUnavailableError`, whose one line
says what to install, and the CLI prints it as a user error.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from typing import Any

import numpy as np

from robot_rl.core.errors import UserError

#: The library each headless backend loads.
_GL_LIBRARIES = {"osmesa": ("OSMesa", "libOSMesa"), "egl": ("EGL", "libEGL")}
#: MUJOCO_GL values that mean GLFW on Linux, which needs a display.
_GLFW = ("", "glfw", "enable", "enabled", "on", "true", "1")
_FIX = "headless CPU: `apt-get install libosmesa6` and MUJOCO_GL=osmesa, with an NVIDIA GPU: MUJOCO_GL=egl"


class RenderingUnavailableError(RuntimeError, UserError):
    """MuJoCo cannot render here: no OpenGL for the chosen backend. The message is one line saying what to do."""


#: The ``MUJOCO_GL`` that :func:`import_mujoco` forgot for a physics-only import (its library is missing), so that
#: a renderer asked for later still names what the user chose and what to install.
_forgotten_backend: str | None = None


def forgotten_backend() -> str | None:
    """The ``MUJOCO_GL`` a physics-only import forgot in this process (for a child process that renders), or None."""
    return _forgotten_backend


def _missing_library() -> str | None:
    """The one-line error when ``MUJOCO_GL`` names a headless backend whose library is not installed, else None."""
    backend = os.environ.get("MUJOCO_GL", "").lower().strip() or (_forgotten_backend or "")
    lib = _GL_LIBRARIES.get(backend)
    if lib is None or ctypes.util.find_library(lib[0]) is not None:
        return None
    return f"MuJoCo cannot render: MUJOCO_GL={backend} but {lib[1]} is not installed; {_FIX}"


def gl_unavailable() -> str | None:
    """Why MuJoCo cannot render here, known before trying (one line naming the fix), or None.

    ``MUJOCO_GL`` names a headless backend whose library is not installed, or (Linux) it means GLFW and there
    is no display: :func:`choose_gl` left it unset because libOSMesa is missing.
    """
    if _forgotten_backend is not None and "MUJOCO_GL" not in os.environ:
        return _missing_library()
    backend = os.environ.get("MUJOCO_GL", "").lower().strip()
    headless = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if backend in _GLFW and headless and sys.platform.startswith("linux"):
        return f"MuJoCo cannot render: no display and no headless OpenGL (MUJOCO_GL={backend or 'unset'}); {_FIX}"
    return _missing_library()


def import_mujoco(renders: bool = True) -> Any:
    """``import mujoco``; :class:`RenderingUnavailableError` when it fails for want of the chosen OpenGL library.

    MuJoCo missing altogether stays an ImportError, for the caller to name the extra that brings it. A caller
    that never renders (``renders=False``: kinematics, a camera-less arm's physics) first forgets a ``MUJOCO_GL``
    whose library is missing (exported before libosmesa6 was installed, say): physics needs no OpenGL.
    """
    global _forgotten_backend
    if not renders and "mujoco" not in sys.modules and _missing_library() is not None:
        _forgotten_backend = os.environ.pop("MUJOCO_GL").lower().strip()
        os.environ.pop("PYOPENGL_PLATFORM", None)
    try:
        import mujoco
    except Exception as e:  # PyOpenGL's import fails with AttributeError when its platform library is absent
        problem = None if isinstance(e, ImportError) and e.name == "mujoco" else _missing_library()
        if problem is None:
            raise
        raise RenderingUnavailableError(problem) from e
    return mujoco


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


def new_renderer(mujoco: Any, model: Any, height: int, width: int) -> Any:
    """``mujoco.Renderer(model, height, width)``, or :class:`RenderingUnavailableError` saying what to install."""
    problem = gl_unavailable()  # known before trying: GLFW would print its own warnings first
    if problem is not None:
        raise RenderingUnavailableError(problem)
    try:
        return mujoco.Renderer(model, height=height, width=width)
    except Exception as e:
        where = os.environ.get("MUJOCO_GL") or "unset"
        raise RenderingUnavailableError(f"MuJoCo could not open an OpenGL context ({_first_clause(e)}; "
                                        f"MUJOCO_GL={where}); {_FIX}") from e


def _first_clause(e: BaseException) -> str:
    """``Type: first clause`` of an exception: mujoco's own errors run to several sentences (one line is the aim)."""
    try:
        text = " ".join(str(e).split())
    except Exception:  # PyOpenGL's EGLError can fail to print itself
        text = ""
    clause = text.split(", ")[0].split(". ")[0]
    return f"{type(e).__name__}: {clause}" if clause else type(e).__name__


class CameraRenderer:
    """Renders ``[k, H, W, 3]`` uint8 images of worlds given their ``qpos``/``mocap_pos``."""

    def __init__(self, model: Any, camera: str, height: int, width: int) -> None:
        mujoco = import_mujoco()
        self._mj = mujoco
        self.model = model
        self.camera = camera
        self.data = mujoco.MjData(model)
        self.renderer = new_renderer(mujoco, model, height, width)

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
