"""MuJoCo XLA (MJX, JAX) backend: all worlds in one jitted, vmapped step on the env's device.

MJX needs only the ``mujoco`` and ``mujoco-mjx`` wheels (about 34 MB together, pure Python for MJX) on top
of JAX, which our GPU machines already have; MuJoCo Warp (``warp_backend.py``) also needs ``warp-lang`` (a
149 MB wheel), which does not fit the 64 MiB we may carry to a GPU machine. MJX is also testable on the CPU
here with ``jax[cpu]``.

The step is ``vmap`` over worlds of ``frame_skip`` × ``mjx.step`` (a ``lax.scan``), then forward
kinematics, ``mjx.jac`` at the grip site and one flat float32 readout row per world, handed to
torch through DLPack without a copy. Per-world parameters (``params.py``) are vmapped model fields.
Resets compute a fresh start for every world and select it where a world ended (``jnp.where``),
so the compiled reset has one shape. States use MuJoCo's ``mjSTATE_INTEGRATION`` layout, the same
as the CPU backend, so a CPU state can be loaded here (the parity check does that).

JAX computes in float32 unless ``JAX_ENABLE_X64`` is set; contacts use MJX's own collision code,
so trajectories agree with the CPU backend closely, not bit for bit.
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

#: Model fields vmapped per world (``actuator_gain`` lives in gainprm[:, 0] and biasprm[:, 1]).
_FIELDS = ("body_mass", "geom_friction", "dof_damping", "actuator_gainprm", "actuator_biasprm")


def import_mjx() -> tuple[Any, Any, Any]:
    """``(jax, jax.numpy, mujoco.mjx)``, or an ImportError naming the extra."""
    try:
        import jax
        import jax.numpy as jnp
        from mujoco import mjx
    except ImportError as e:
        raise ImportError(f"backend=mjx needs JAX and MJX ({e}): pip install 'robot-rl[mjx]' "
                          "(and a CUDA build of jax for GPUs)") from None
    return jax, jnp, mjx


def jax_device(jax: Any, device: torch.device) -> Any:
    """The JAX device for a torch device (``cuda:k`` → the k-th GPU)."""
    if device.type == "cuda":
        gpus = jax.devices("gpu")
        return gpus[device.index or 0]
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    raise ValueError(f"backend=mjx runs on cpu or cuda, not {device}")


class MjxBackend:
    """``N`` MJX worlds on one device (see the module docstring)."""

    #: The readout stays in torch on the env's device: the env's per-step math runs there.
    host_arrays = False

    def __init__(self, model: Any, ix: SceneIndex, num_envs: int, frame_skip: int, device: torch.device) -> None:
        import mujoco

        jax, jnp, mjx = import_mjx()
        self._mj, self._jax, self._jnp = mujoco, jax, jnp
        self.model, self.ix, self.num_envs, self.device = model, ix, num_envs, device
        self.jdev = jax_device(jax, device)
        mx = mjx.put_model(model, device=self.jdev)
        d0 = mujoco.MjData(model)
        mujoco.mj_forward(model, d0)
        dx0 = mjx.put_data(model, d0, device=self.jdev)
        self.params = {f: jax.device_put(np.repeat(getattr(model, f)[None], num_envs, 0).astype(np.float32),
                                         self.jdev) for f in _FIELDS}
        self.dx = jax.tree.map(lambda x: jnp.repeat(x[None], num_envs, 0), dx0)
        grip, arm_dof = ix.site["grip"], jnp.asarray(ix.arm_dof)
        arm_q, fin_q = jnp.asarray(ix.arm_qpos), jnp.asarray(ix.finger_qpos)
        arm_c, fin_c = jnp.asarray(ix.arm_ctrl), jnp.asarray(ix.finger_ctrl)
        body = int(model.site_bodyid[grip])
        nq, nv, ns, nm = model.nq, model.nv, model.nsite, model.nmocap
        self._shapes = {"qpos": (nq,), "qvel": (nv,), "site_pos": (ns, 3), "grip_rot": (3, 3), "jac": (6, 6),
                        "mocap_pos": (nm, 3)}

        def with_params(p: dict[str, Any]) -> Any:
            return mx.replace(**p)

        def finish(m: Any, d: Any) -> tuple[Any, Any]:
            # Kinematics after the last step: sites and Jacobian then match qpos (as on the CPU).
            d = mjx.com_pos(m, mjx.kinematics(m, d))
            jacp, jacr = mjx.jac(m, d, d.site_xpos[grip], body)
            jac = jnp.concatenate([jacp.T, jacr.T])[:, arm_dof]
            row = jnp.concatenate([d.qpos, d.qvel, d.site_xpos.ravel(), d.site_xmat[grip].ravel(), jac.ravel(),
                                   d.mocap_pos.ravel()])
            return d, row.astype(jnp.float32)

        def step_one(p: dict[str, Any], d: Any, ctrl: Any) -> tuple[Any, Any]:
            m = with_params(p)
            d = d.replace(ctrl=ctrl)
            d, _ = jax.lax.scan(lambda dd, _: (mjx.step(m, dd), None), d, None, length=frame_skip)
            return finish(m, d)

        def start_one(p: dict[str, Any], d: Any, mask: Any, qpos: Any, mocap: Any) -> tuple[Any, Any]:
            m = with_params(p)
            ctrl = jnp.zeros(model.nu, qpos.dtype).at[arm_c].set(qpos[arm_q]).at[fin_c].set(qpos[fin_q])
            fresh = dx0.replace(qpos=qpos.astype(dx0.qpos.dtype), mocap_pos=mocap.astype(dx0.mocap_pos.dtype),
                                ctrl=ctrl.astype(dx0.ctrl.dtype))
            fresh = mjx.forward(m, fresh)
            d = jax.tree.map(lambda a, b: jnp.where(mask, a, b), fresh, d)
            return finish(m, d)

        def load_one(p: dict[str, Any], qpos: Any, qvel: Any, act: Any, warm: Any, ctrl: Any, mocap: Any, mquat: Any,
                     time: Any) -> tuple[Any, Any]:
            m = with_params(p)
            d = dx0.replace(qpos=qpos, qvel=qvel, act=act, qacc_warmstart=warm, ctrl=ctrl, mocap_pos=mocap,
                            mocap_quat=mquat, time=time)
            return finish(m, mjx.forward(m, d))

        self._step = jax.jit(jax.vmap(step_one))
        self._start = jax.jit(jax.vmap(start_one))
        self._load = jax.jit(jax.vmap(load_one))
        self._row: Any = None
        self._inputs: list[torch.Tensor] = []
        self._rows_np: dict[str, slice] = {}

    # ---- torch ⇄ jax ------------------------------------------------------------------------

    def _to_jax(self, t: torch.Tensor) -> Any:
        t = t.detach().to(self.device, torch.float32).contiguous()
        # JAX runs the step asynchronously and may read this memory after we return: keep the
        # tensor alive until readout() has waited for the result.
        self._inputs.append(t)
        return self._jax.device_put(self._jax.dlpack.from_dlpack(t), self.jdev)

    def step(self, ctrl: torch.Tensor) -> None:
        """Hold ``ctrl [N, nu]`` for ``frame_skip`` physics steps in every world."""
        self.dx, self._row = self._step(self.params, self.dx, self._to_jax(ctrl))

    def set_start(self, ids: np.ndarray, qpos: torch.Tensor, mocap_pos: torch.Tensor) -> None:
        """Reset worlds ``ids [k]`` to ``qpos [k, nq]`` / ``mocap_pos [k, nmocap, 3]``, at rest."""
        if len(ids) == 0:
            return
        rows = torch.from_numpy(np.asarray(ids, np.int64)).to(self.device)
        mask = torch.zeros(self.num_envs, device=self.device)
        mask[rows] = 1.0
        q = torch.zeros(self.num_envs, qpos.shape[-1], device=self.device)
        q[rows] = qpos.to(self.device, torch.float32)
        mp = torch.zeros(self.num_envs, *mocap_pos.shape[1:], device=self.device)
        mp[rows] = mocap_pos.to(self.device, torch.float32)
        # A fresh start is computed for every world and selected where the mask holds (jnp.where).
        self.dx, self._row = self._start(self.params, self.dx, self._to_jax(mask) > 0.5, self._to_jax(q),
                                         self._to_jax(mp))

    def images(self, camera: CameraRenderer, ids: np.ndarray, r: Readout) -> np.ndarray:
        """``uint8 [k, H, W, 3]`` images of worlds ``ids``, from their ``qpos``/mocap in ``r``."""
        rows = torch.from_numpy(np.asarray(ids, np.int64)).to(r.qpos.device)
        q = r.qpos[rows].detach().to("cpu", torch.float64).numpy()
        m = r.mocap_pos[rows].detach().to("cpu", torch.float64).numpy()
        return camera.render(q, m)

    def readout(self) -> Readout:
        """The current state of all worlds as torch tensors on the env's device (DLPack, no copy)."""
        # Wait for the (asynchronous) step: DLPack hands torch the buffer, not a promise of it.
        self._row.block_until_ready()
        self._inputs.clear()
        flat = torch.from_dlpack(self._row)
        out: dict[str, torch.Tensor] = {}
        start = 0
        for key, shape in self._shapes.items():
            size = int(np.prod(shape))
            out[key] = flat[:, start:start + size].reshape(self.num_envs, *shape)
            start += size
        return Readout(**out)

    def task_readout(self) -> Readout:
        """What the env's per-step math reads: the torch :meth:`readout` itself."""
        return self.readout()

    # ---- state and parameters ---------------------------------------------------------------

    def get_state(self) -> torch.Tensor:
        """``float64 [N, S]`` in ``mjSTATE_INTEGRATION`` layout (as the CPU backend's)."""
        return torch.from_numpy(pack_states(self.model, {k: np.asarray(getattr(self.dx, k)) for k in STATE_FIELDS}))

    def set_state(self, state: torch.Tensor) -> None:
        """Load ``mjSTATE_INTEGRATION`` states (e.g. from the CPU backend) into every world."""
        fields = unpack_states(self.model, state, self.num_envs)
        args = [self._jax.device_put(self._jnp.asarray(fields[k]), self.jdev) for k in STATE_FIELDS]
        self.dx, self._row = self._load(self.params, *args)

    def get_params(self) -> dict[str, torch.Tensor]:
        """Every randomisable parameter, ``float64 [N, ...]`` per world."""
        p = {k: np.asarray(v, np.float64) for k, v in self.params.items()}
        return {"body_mass": torch.from_numpy(p["body_mass"]), "geom_friction": torch.from_numpy(p["geom_friction"]),
                "dof_damping": torch.from_numpy(p["dof_damping"]),
                "actuator_gain": torch.from_numpy(p["actuator_gainprm"][:, :, 0].copy())}

    def set_params(self, name: str, values: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Set parameter ``name`` of worlds ``env_ids`` (all when ``None``) to ``values [len(ids), ...]``."""
        if name not in PARAM_NAMES:
            raise KeyError(f"unknown parameter {name!r}; valid: {', '.join(PARAM_NAMES)}")
        jnp = self._jnp
        ids = np.arange(self.num_envs) if env_ids is None else env_ids.detach().cpu().numpy().astype(np.int64)
        v = jnp.asarray(check_param_values(name, values, (len(ids), *param_view(self.model, name).shape)),
                        jnp.float32)
        if name == "actuator_gain":
            servo = jnp.asarray(self.model.actuator_biastype == self._mj.mjtBias.mjBIAS_AFFINE)
            gain = self.params["actuator_gainprm"].at[ids, :, 0].set(v)
            bias = self.params["actuator_biasprm"]
            bias = bias.at[ids, :, 1].set(jnp.where(servo, -v, bias[ids, :, 1]))
            self.params = {**self.params, "actuator_gainprm": gain, "actuator_biasprm": bias}
        else:
            self.params = {**self.params, name: self.params[name].at[ids].set(v)}

    def close(self) -> None:
        """Nothing to release (device buffers are freed with the object)."""
