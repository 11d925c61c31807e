"""Fitting a scene camera's pose and field of view to logged images (`robot-rl twin camera`).

Each logged frame comes with the ``state`` observation of the same step, which says where the arm, the objects
and the goal were (:func:`robot_rl.twin.start.scene_pose`). The fit renders those scenes from a candidate camera
(:mod:`robot_rl.sims.mujoco.camera_pose`: position shift, rotation about the camera's axes, factor on the field
of view) and compares the renders with the logged frames; CMA-ES moves the candidate until they agree.

The comparison is on grey images standardised per frame (zero mean, unit variance), so a real camera's
exposure, white balance or a scene lit and coloured differently from the simulator's changes the error little;
what moves pixels (where the camera is, where it looks, its focal length) changes it much. Each coordinate is
searched in a bounded box, normalised to ``[0, 1]`` as in the dynamics fit (:mod:`robot_rl.twin.fit`); the
uncertainty is the spread of the values over independent restarts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.sims.mujoco.camera_pose import ADJUST_FIELDS, NEUTRAL, nominal_camera, set_camera
from robot_rl.sims.mujoco.tasks import MujocoTaskConfig
from robot_rl.twin.logs import LogError, read_log_episodes
from robot_rl.twin.start import scene_pose

log = logging.getLogger(__name__)


@dataclass
class CameraFitConfig:
    """What `robot-rl twin camera` fits and how hard it searches."""

    camera: str = "front"
    """The scene camera the logged ``image.<camera>`` frames come from."""
    free: tuple[str, ...] = ADJUST_FIELDS
    """The adjustments fitted (of ``dx dy dz roll pitch yaw fovy_scale``); the others stay neutral. Fewer are
    found faster and more surely: leave out ``fovy_scale`` when the camera's intrinsics are known."""
    frames: int = 48
    """Logged frames compared, spread evenly over the episodes (each costs one render per candidate)."""
    max_shift: float = 0.1
    """Bound of the position shift on each axis (m)."""
    max_turn: float = 10.0
    """Bound of the rotation about each camera axis (degrees)."""
    fovy_range: tuple[float, float] = (0.7, 1.4)
    """Bounds of the factor on the field of view."""
    population: int = 12
    """CMA-ES candidates per iteration."""
    iterations: int = 60
    """CMA-ES iterations per restart."""
    restarts: int = 3
    """Independent CMA-ES runs (the first from the scene's camera); their spread is the uncertainty."""
    seed: int = 0

    def __post_init__(self) -> None:
        lo, hi = self.fovy_range
        unknown = sorted(set(self.free) - set(ADJUST_FIELDS))
        if unknown or len(set(self.free)) < 2:
            raise ConfigError(f"free: {unknown or list(self.free)}: name 2 or more of {', '.join(ADJUST_FIELDS)} "
                              "(CMA-ES searches 2 or more dimensions)")
        if self.frames < 1 or self.population < 2 or self.iterations < 1 or self.restarts < 1:
            raise ConfigError("frames >= 1, population >= 2, iterations >= 1 and restarts >= 1")
        if self.max_shift <= 0 or self.max_turn <= 0 or not 0.1 <= lo < 1.0 < hi <= 10.0:
            raise ConfigError("max_shift and max_turn must be > 0 and fovy_range must hold 1 within [0.1, 10]")


@dataclass
class CameraFit:
    """The fitted adjustment of one camera (``[dx, dy, dz, roll, pitch, yaw, fovy_scale]``)."""

    camera: str
    values: list[float]
    std: list[float]
    """Spread over the restarts, per value."""
    restarts: list[list[float]]
    error_before: float
    """Mean squared difference of the standardised frames with the scene's own camera."""
    error_after: float
    frames: int
    episodes: str
    settings: dict[str, Any] = field(default_factory=dict)

    def adjust(self) -> dict[str, list[float]]:
        """The ``task.camera_adjust`` mapping to train with."""
        return {self.camera: [round(v, 5) for v in self.values]}

    def write(self, path: Path) -> Path:
        """``path`` (JSON) with every number of the fit."""
        path.write_text(json.dumps({"format": "robot_rl.twin.camera", "version": 1, **asdict(self)}, indent=1))
        return path


def _gray(images: np.ndarray) -> np.ndarray:
    """``[K, H, W, 3]`` uint8 → ``[K, H·W]`` grey, standardised per frame."""
    g = images.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    g = g.reshape(len(g), -1)
    return (g - g.mean(1, keepdims=True)) / (g.std(1, keepdims=True) + 1e-3)


def logged_frames(path: Path | str, camera: str, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(states [K, D], frames [K, H, W, 3])``: ``count`` logged frames of ``camera``, evenly over the episodes."""
    episodes, spec, _, _ = read_log_episodes(path)
    key = f"image.{camera}"
    if key not in spec.observation or "state" not in spec.observation:
        raise LogError(f"{path}: the camera fit needs '{key}' frames and the 'state' observation beside them; "
                       f"the logs have {sorted(spec.observation)} (record with task.obs=state_pixels "
                       f"task.camera={camera})")
    rows = [(e, t) for e, ep in enumerate(episodes) for t in range(len(ep.obs["state"]))]
    if not rows:
        raise LogError(f"{path} holds no frames")
    pick = np.linspace(0, len(rows) - 1, min(count, len(rows))).round().astype(int)
    states = np.stack([episodes[rows[i][0]].obs["state"][rows[i][1]] for i in pick]).astype(np.float64)
    frames = np.stack([episodes[rows[i][0]].obs[key][rows[i][1]] for i in pick])
    return states, frames


class CameraScorer:
    """Renders the logged scenes from candidate cameras and scores them against the logged frames."""

    def __init__(self, cfg: MujocoTaskConfig, camera: str, states: np.ndarray, frames: np.ndarray) -> None:
        from robot_rl.sims.mujoco.render import CameraRenderer, choose_gl, import_mujoco
        from robot_rl.sims.mujoco.scene import build_model

        choose_gl("cpu")  # before MuJoCo is first imported: it reads MUJOCO_GL then
        mujoco = import_mujoco()
        self.model, ix = build_model(cfg.objects, cfg.timestep)
        if states.shape[1] != cfg.state_dim():
            raise LogError(f"the logged state has {states.shape[1]} numbers, {type(cfg).__name__} has "
                           f"{cfg.state_dim()}: the camera fit needs the full state (task.obs=state_pixels)")
        self.cam_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if self.cam_id < 0:
            raise ConfigError(f"the scene has no camera {camera!r}")
        self.nominal = nominal_camera(self.model, self.cam_id)
        self.qpos, self.mocap = scene_pose(cfg, self.model, ix, states)
        self.target = _gray(frames)
        self.renderer = CameraRenderer(self.model, camera, frames.shape[1], frames.shape[2])
        self.renders = 0

    def error(self, values: Any) -> float:
        """Mean squared difference of standardised frames with the camera adjusted by ``values``."""
        set_camera(self.model, self.nominal, self.cam_id, values)
        images = self.renderer.render(self.qpos, self.mocap)
        self.renders += len(images)
        return float(np.mean((_gray(images) - self.target) ** 2))

    def close(self) -> None:
        """Free the renderer's OpenGL context."""
        self.renderer.close()


def _bounds(cfg: CameraFitConfig) -> tuple[np.ndarray, np.ndarray]:
    s, t = cfg.max_shift, cfg.max_turn
    return np.array([-s, -s, -s, -t, -t, -t, cfg.fovy_range[0]]), np.array([s, s, s, t, t, t, cfg.fovy_range[1]])


def _from_unit(u: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Shifts and turns linear in the box; the field-of-view factor on a log scale (as the dynamics factors)."""
    u = np.clip(u, 0.0, 1.0)
    v = lo + u * (hi - lo)
    v[6] = lo[6] * (hi[6] / lo[6]) ** u[6]
    return v


def _to_unit(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    u = (v - lo) / (hi - lo)
    u[6] = np.log(v[6] / lo[6]) / np.log(hi[6] / lo[6])
    return np.clip(u, 0.0, 1.0)


def fit_camera(task: MujocoTaskConfig, episodes: Path | str, cfg: CameraFitConfig,
               progress: Callable[[int, int, float], None] | None = None) -> CameraFit:
    """Fit ``cfg.camera`` of ``task``'s scene to the frames logged in ``episodes`` (module docstring).

    ``progress(done, total, best error)`` after every CMA-ES iteration.
    """
    from robot_rl.twin.fit import _cma

    cma = _cma()
    states, frames = logged_frames(episodes, cfg.camera, cfg.frames)
    scorer = CameraScorer(task, cfg.camera, states, frames)
    lo, hi = _bounds(cfg)
    rng = np.random.default_rng(cfg.seed)
    neutral = np.asarray(NEUTRAL)
    free = np.array([f in cfg.free for f in ADJUST_FIELDS])
    base_u = _to_unit(neutral.copy(), lo, hi)

    def values(u_free: Any) -> np.ndarray:
        u = base_u.copy()
        u[free] = u_free
        return _from_unit(u, lo, hi)

    total, done, results = cfg.restarts * cfg.iterations, 0, []
    try:
        before = scorer.error(neutral)
        for r in range(cfg.restarts):
            start = base_u[free] if r == 0 else rng.uniform(0.2, 0.8, int(free.sum()))
            es = cma.CMAEvolutionStrategy(list(start), 0.25, {"bounds": [0.0, 1.0], "popsize": cfg.population,
                                                              "verbose": -9, "seed": cfg.seed * 1000 + r + 1})
            for _ in range(cfg.iterations):
                cands = es.ask()
                es.tell(cands, [scorer.error(values(np.asarray(c))) for c in cands])
                done += 1
                if progress is not None:
                    progress(done, total, float(es.result.fbest))
            best = values(np.asarray(es.result.xbest))
            results.append((float(es.result.fbest), best))
            log.info("camera fit restart %d: error %.4g at %s", r + 1, results[-1][0], np.round(best, 4).tolist())
        _, best = min(results, key=lambda x: x[0])
        after = scorer.error(best)
    finally:
        scorer.close()
    spread = np.std(np.stack([b for _, b in results]), axis=0)
    settings = {**asdict(cfg), "fovy_range": list(cfg.fovy_range), "free": list(cfg.free)}
    return CameraFit(cfg.camera, best.tolist(), spread.tolist(), [b.tolist() for _, b in results], before, after,
                     len(frames), str(episodes), settings)


def describe(fit: CameraFit) -> str:
    """A table of the fit, one line per value, for the terminal."""
    units = ("m", "m", "m", "deg", "deg", "deg", "x")
    lines = [f"{'':<11}{'fit':>10}{'± std':>10}"]
    for name, v, s, u in zip(ADJUST_FIELDS, fit.values, fit.std, units):
        lines.append(f"{name:<11}{v:>10.4f}{s:>10.4f} {u}")
    lines.append(f"image error (standardised grey, {fit.frames} frames): {fit.error_before:.4f} with the scene's "
                 f"camera -> {fit.error_after:.4f}")
    return "\n".join(lines)
