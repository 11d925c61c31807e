"""MuJoCo Warp backend: all worlds in one ``mujoco_warp`` data batch on the env's device (a GPU, or Warp's CPU).

MuJoCo Warp (``mujoco-warp``, the GPU MuJoCo that mjlab builds on) keeps ``nworld`` copies of ``Data`` in Warp
arrays. Each field is shared with torch without a copy (``wp.to_torch``), so controls go in and the readout comes
out as tensors on the env's device. A control step is ``frame_skip`` × ``mjw.step``, then forward kinematics
(``kinematics``, ``com_pos``) and ``mjw.jac`` at the grip site, so the sites and the Jacobian match ``qpos`` as on
the other backends. Per-world parameters (``params.py``) are batched model fields (``put_model``'s
``batch_sizes``), changed in place. Resets clear the chosen worlds (``reset_data`` with a mask), write their start
pose, and run ``forward``. States use MuJoCo's ``mjSTATE_INTEGRATION`` layout, as on the CPU and MJX backends.

Warp compiles its kernels on first use and caches them (``~/.cache/warp``): the first env made on a machine takes
about a minute on a CPU before its first step. Warp computes in float32 and uses its own collision code, so
trajectories agree with the CPU backend closely, not bit for bit (tests/test_mujoco_warp.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from robot_rl.sims.mujoco.params import PARAM_NAMES, check_param_values, param_view
from robot_rl.sims.mujoco.readout import Readout
from robot_rl.sims.mujoco.render import CameraRenderer
from robot_rl.sims.mujoco.scene import SceneIndex
from robot_rl.sims.mujoco.state_layout import STATE_FIELDS, pack_states, unpack_states

#: Model fields batched per world (``actuator_gain`` lives in gainprm[:, 0] and biasprm[:, 1]).
_FIELDS = ("body_mass", "geom_friction", "dof_damping", "actuator_gainprm", "actuator_biasprm")


def import_warp() -> tuple[Any, Any]:
    """``(warp, mujoco_warp)``, or an ImportError naming the extra."""
    try:
        import warp

        # Warp prints a banner and a line per compiled module to stdout; the env's users read their own output.
        warp.config.log_level = warp.LOG_WARNING
        import mujoco_warp
    except ImportError as e:
        raise ImportError(f"backend=warp needs MuJoCo Warp ({e}): pip install 'robot-rl[warp]'") from None
    return warp, mujoco_warp


def warp_device(device: torch.device) -> str:
    """The Warp device for a torch device (``cuda:k`` → ``cuda:k``)."""
    if device.type == "cuda":
        return f"cuda:{device.index or 0}"
    if device.type == "cpu":
        return "cpu"
    raise ValueError(f"backend=warp runs on cpu or cuda, not {device}")


class WarpBackend:
    """``N`` MuJoCo Warp worlds on one device (see the module docstring)."""

    #: The readout stays in torch on the env's device: the env's per-step math runs there.
    host_arrays = False

    def __init__(self, model: Any, ix: SceneIndex, num_envs: int, frame_skip: int, device: torch.device) -> None:
        import mujoco

        wp, mjw = import_warp()
        self._mj, self._wp, self._mjw = mujoco, wp, mjw
        self.model, self.ix, self.num_envs, self.frame_skip, self.device = model, ix, num_envs, frame_skip, device
        self.wdev = warp_device(device)
        d0 = mujoco.MjData(model)
        mujoco.mj_forward(model, d0)
        with wp.ScopedDevice(self.wdev):
            self.m = mjw.put_model(model, batch_sizes=dict.fromkeys(_FIELDS, num_envs))
            self.d = mjw.put_data(model, d0, nworld=num_envs)
            self._jacp = wp.zeros((num_envs, 3, model.nv), dtype=float)
            self._jacr = wp.zeros((num_envs, 3, model.nv), dtype=float)
            grip = ix.site["grip"]
            self._body = wp.array(np.full(num_envs, int(model.site_bodyid[grip]), np.int32), dtype=int)
            self._point = wp.zeros(num_envs, dtype=wp.vec3)
        self._grip = grip
        self._arm_dof = torch.as_tensor(ix.arm_dof, device=device)
        self.t = {k: wp.to_torch(getattr(self.d, k)) for k in (*STATE_FIELDS, "site_xpos", "site_xmat")}
        self.p = {k: wp.to_torch(getattr(self.m, k)) for k in _FIELDS}
        self._finish()

    def _run(self, fn: Any, *args: Any) -> None:
        with self._wp.ScopedDevice(self.wdev):
            fn(*args)

    def _finish(self) -> None:
        """Kinematics after the last physics step, then the grip site's Jacobian (all worlds)."""
        mjw, m, d = self._mjw, self.m, self.d
        self._run(mjw.kinematics, m, d)
        self._run(mjw.com_pos, m, d)
        self._wp.to_torch(self._point).copy_(self.t["site_xpos"][:, self._grip])
        self._run(mjw.jac, m, d, self._jacp, self._jacr, self._point, self._body)
        self._wp.synchronize_device(self.wdev)

    def step(self, ctrl: torch.Tensor) -> None:
        """Hold ``ctrl [N, nu]`` for ``frame_skip`` physics steps in every world."""
        self.t["ctrl"].copy_(ctrl.detach().to(self.device, torch.float32))
        for _ in range(self.frame_skip):
            self._run(self._mjw.step, self.m, self.d)
        self._finish()

    def set_start(self, ids: np.ndarray, qpos: torch.Tensor, mocap_pos: torch.Tensor) -> None:
        """Reset worlds ``ids [k]`` to ``qpos [k, nq]`` / ``mocap_pos [k, nmocap, 3]``, at rest."""
        if len(ids) == 0:
            return
        rows = torch.as_tensor(np.asarray(ids, np.int64), device=self.device)
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        mask[rows] = True
        self._run(self._mjw.reset_data, self.m, self.d, self._wp.from_torch(mask))
        q = qpos.detach().to(self.device, torch.float32)
        ix, t = self.ix, self.t
        t["qpos"][rows] = q
        t["mocap_pos"][rows] = mocap_pos.detach().to(self.device, torch.float32)
        # The servos start at the current pose, so nothing jumps on the first step.
        t["ctrl"][rows[:, None], torch.as_tensor(ix.arm_ctrl, device=self.device)] = q[:, ix.arm_qpos]
        t["ctrl"][rows[:, None], torch.as_tensor(ix.finger_ctrl, device=self.device)] = q[:, ix.finger_qpos]
        self._run(self._mjw.forward, self.m, self.d)
        self._finish()

    def images(self, camera: CameraRenderer, ids: np.ndarray, r: Readout) -> np.ndarray:
        """``uint8 [k, H, W, 3]`` images of worlds ``ids``, from their ``qpos``/mocap in ``r``."""
        rows = torch.from_numpy(np.asarray(ids, np.int64)).to(r.qpos.device)
        return camera.render(r.qpos[rows].detach().to("cpu", torch.float64).numpy(),
                             r.mocap_pos[rows].detach().to("cpu", torch.float64).numpy())

    def readout(self) -> Readout:
        """The current state of all worlds as torch tensors on the env's device (views of Warp's arrays)."""
        wp, t = self._wp, self.t
        jac = torch.cat([wp.to_torch(self._jacp), wp.to_torch(self._jacr)], dim=1)[:, :, self._arm_dof]
        return Readout(qpos=t["qpos"], qvel=t["qvel"], site_pos=t["site_xpos"], grip_rot=t["site_xmat"][:, self._grip],
                       jac=jac, mocap_pos=t["mocap_pos"])

    def task_readout(self) -> Readout:
        """What the env's per-step math reads: the torch :meth:`readout` itself."""
        return self.readout()

    # ---- state and parameters ---------------------------------------------------------------

    def get_state(self) -> torch.Tensor:
        """``float64 [N, S]`` in ``mjSTATE_INTEGRATION`` layout (as the CPU backend's)."""
        fields = {k: self.t[k].detach().to("cpu", torch.float64).numpy() for k in STATE_FIELDS}
        return torch.from_numpy(pack_states(self.model, fields))

    def set_state(self, state: torch.Tensor) -> None:
        """Load ``mjSTATE_INTEGRATION`` states (e.g. from the CPU backend) into every world."""
        fields = unpack_states(self.model, state, self.num_envs)
        for k, v in fields.items():
            self.t[k].copy_(torch.from_numpy(v).to(self.device, self.t[k].dtype).reshape(self.t[k].shape))
        self._run(self._mjw.forward, self.m, self.d)
        self._finish()

    def get_params(self) -> dict[str, torch.Tensor]:
        """Every randomisable parameter, ``float64 [N, ...]`` per world."""
        p = {k: v.detach().to("cpu", torch.float64) for k, v in self.p.items()}
        return {"body_mass": p["body_mass"], "geom_friction": p["geom_friction"], "dof_damping": p["dof_damping"],
                "actuator_gain": p["actuator_gainprm"][:, :, 0].clone()}

    def set_params(self, name: str, values: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Set parameter ``name`` of worlds ``env_ids`` (all when ``None``) to ``values [len(ids), ...]``."""
        if name not in PARAM_NAMES:
            raise KeyError(f"unknown parameter {name!r}; valid: {', '.join(PARAM_NAMES)}")
        ids = torch.arange(self.num_envs) if env_ids is None else env_ids.detach().cpu().long()
        v = torch.from_numpy(check_param_values(name, values, (len(ids), *param_view(self.model, name).shape)))
        rows, v = ids.to(self.device), v.to(self.device, torch.float32)
        if name == "actuator_gain":
            self.p["actuator_gainprm"][rows, :, 0] = v
            servo = torch.as_tensor(self.model.actuator_biastype == self._mj.mjtBias.mjBIAS_AFFINE, device=self.device)
            bias = self.p["actuator_biasprm"]
            bias[rows, :, 1] = torch.where(servo, -v, bias[rows, :, 1])
        else:
            self.p[name][rows] = v

    def close(self) -> None:
        """Nothing to release (Warp frees the arrays with the object)."""
