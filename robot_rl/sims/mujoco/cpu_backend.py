"""MuJoCo C on the CPU: one ``MjData`` per world, stepped in a plain loop or by a thread pool.

A control step of one world is ``mj_step2``, ``frame_skip − 1`` × ``mj_step``, ``mj_step1``: the
same stages, in the same order, as ``frame_skip`` × ``mj_step`` (``mj_step`` is ``mj_step1`` then
``mj_step2``), so the physics is bit-identical, but the position stage of the *next* step has
already run when the step returns. Sites, the grip frame and everything ``mj_jacSite`` needs then
match the new ``qpos`` without the extra ``mj_kinematics`` + ``mj_comPos`` a readout after
``mj_step`` would cost; MuJoCo documents the split for exactly this (set controls between
``mj_step1`` and ``mj_step2``).

The readout is preallocated float64 arrays ``[N, ...]``: a step copies each world's ``qpos``,
``qvel``, ``site_xpos`` and grip frame into its rows right after stepping it, while its data is
still in the cache (reading all worlds afterwards missed the cache for every world and field, about
2 µs per world at 512 worlds); ``mj_jacSite`` writes the Jacobian straight into its row. Resets
and state loads gather with ``np.concatenate`` over views cached when the worlds are made. The env
computes on those arrays (``task_readout``, numpy, see ``arrays.py``); the float32 torch copy that
``readout()`` shares is made only when someone asks for it.

``mj_step`` releases the GIL, so worker threads can step disjoint chunks of worlds in parallel;
a thread pool only pays when each thread gets enough worlds (``MIN_WORLDS_PER_THREAD``, measured
in benchmarks/mujoco_steps.py), below that the worlds are stepped on the calling thread.

Why a thread pool and not ``mujoco.rollout``: the controller needs each world's Jacobian after
every control step, which ``rollout`` does not return; calling it per control step adds a full
state load/store per world and call (see docs/sims-mujoco.md for the measurement).

Worlds share one ``MjModel`` until :meth:`CpuBackend.set_params` gives some world its own
parameters; from then on every world has its own copy (a model is about 50 kB here).
"""

from __future__ import annotations

import copy
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from robot_rl.sims.mujoco.params import PARAM_NAMES, check_param_values, param_view
from robot_rl.sims.mujoco.readout import Readout
from robot_rl.sims.mujoco.render import CameraRenderer
from robot_rl.sims.mujoco.scene import SceneIndex

#: Worlds each worker thread must get before a thread pool is used (``num_threads=0``). A world's
#: control step (8 × mj_step) costs about 65 µs; on the shared 2-core machine of
#: benchmarks/RESULTS_mujoco.md two threads beat one in every sweep from 16 worlds on and lost in
#: some at 4 and 8 (``--threads`` there): handing chunks to threads and joining them eats the gain.
MIN_WORLDS_PER_THREAD = 8


class CpuBackend:
    """``N`` MuJoCo worlds on the CPU (see the module docstring)."""

    #: ``task_readout()`` gives float64 numpy arrays: the env runs its per-step math in numpy.
    host_arrays = True

    def __init__(self, model: Any, ix: SceneIndex, num_envs: int, frame_skip: int, num_threads: int,
                 device: torch.device) -> None:
        import mujoco

        self._mj = mujoco
        self.ix = ix
        self.num_envs = num_envs
        self.frame_skip = frame_skip
        self.device = device
        self.model = model
        self.models = [model] * num_envs
        self.own_models = False
        self.datas = [mujoco.MjData(model) for _ in range(num_envs)]
        n, nq, nv, ns, nm = num_envs, model.nq, model.nv, model.nsite, model.nmocap
        self._grip = ix.site["grip"]
        # Views into each world's MjData (their buffers never move), gathered by np.concatenate per step.
        self._v_qpos = [d.qpos for d in self.datas]
        self._v_qvel = [d.qvel for d in self.datas]
        self._v_site = [d.site_xpos for d in self.datas]
        self._v_rot = [d.site_xmat[self._grip].reshape(3, 3) for d in self.datas]
        self._v_mocap = [d.mocap_pos for d in self.datas]
        self._v_ctrl = [d.ctrl for d in self.datas]
        self._jac64 = np.zeros((n, 6, nv))
        self._v_jacp = [self._jac64[i, :3] for i in range(n)]
        self._v_jacr = [self._jac64[i, 3:] for i in range(n)]
        arm = np.asarray(ix.arm_dof)
        contiguous = len(arm) and (np.diff(arm) == 1).all()
        self._arm_cols: slice | np.ndarray = slice(int(arm[0]), int(arm[-1]) + 1) if contiguous else arm
        self._ctrl = np.zeros((n, model.nu))
        # float32 arrays behind readout(), shared with torch (from_numpy), converted only on demand.
        self._np = {"qpos": np.zeros((n, nq), np.float32), "qvel": np.zeros((n, nv), np.float32),
                    "site_pos": np.zeros((n, ns, 3), np.float32), "grip_rot": np.zeros((n, 3, 3), np.float32),
                    "jac": np.zeros((n, 6, 6), np.float32), "mocap_pos": np.zeros((n, nm, 3), np.float32)}
        # The same memory seen as the concatenation of the per-world views ([N·rows, cols]).
        self._np64 = {k: np.zeros(v.shape) for k, v in self._np.items() if k != "jac"}
        self._flat64 = {k: v.reshape(-1, *v.shape[2:]) for k, v in self._np64.items()}
        self._gather_views = [("qpos", self._v_qpos), ("qvel", self._v_qvel), ("site_pos", self._v_site),
                              ("grip_rot", self._v_rot)]
        cpu = Readout(**{k: torch.from_numpy(v) for k, v in self._np.items()})
        self._cpu_readout = cpu
        self._host_readout = Readout(**self._np64, jac=self._jac64[:, :, self._arm_cols])
        self._stale32 = True  # the float32 arrays lag the float64 ones until readout() converts
        self._on_cpu = device.type == "cpu"
        threads = num_threads or (os.cpu_count() or 1)
        self.num_threads = max(1, min(threads, num_envs // MIN_WORLDS_PER_THREAD if num_threads == 0 else num_envs))
        self.chunks = [range(int(c[0]), int(c[-1]) + 1)
                       for c in np.array_split(np.arange(n), self.num_threads) if len(c)]
        self.pool = ThreadPoolExecutor(self.num_threads, "mujoco") if self.num_threads > 1 else None

    # ---- stepping ---------------------------------------------------------------------------

    def _step_chunk(self, k: int) -> None:
        mj, models, datas, fs = self._mj, self.models, self.datas, self.frame_skip
        step, step1, step2, jac_site = mj.mj_step, mj.mj_step1, mj.mj_step2, mj.mj_jacSite
        ctrl, v_ctrl, jp, jr, grip = self._ctrl, self._v_ctrl, self._v_jacp, self._v_jacr, self._grip
        (q, vq), (v, vv), (s, vs), (r, vr) = ((self._np64[key], views) for key, views in self._gather_views)
        for i in self.chunks[k]:
            m, d = models[i], datas[i]
            v_ctrl[i][:] = ctrl[i]
            # mj_step1 already ran for this state (end of the previous call or a reset).
            step2(m, d)
            for _ in range(fs - 1):
                step(m, d)
            step1(m, d)
            jac_site(m, d, jp[i], jr[i], grip)
            # Read the world out while its data is in the cache: gathering all worlds afterwards
            # misses the cache for every world and field (~0.7 µs each at 512 worlds).
            q[i], v[i], s[i], r[i] = vq[i], vv[i], vs[i], vr[i]

    def _run(self, fn: Any) -> None:
        if self.pool is None:
            fn(0)
            return
        for f in [self.pool.submit(fn, k) for k in range(len(self.chunks))]:
            f.result()

    def _gather(self, mocap: bool = False, ids: list[int] | None = None) -> None:
        """Copy every world's state (or only worlds ``ids``) into the readout arrays."""
        views = self._gather_views + ([("mocap_pos", self._v_mocap)] if mocap else [])
        # A few reset worlds are copied row by row: gathering all N again after every auto-reset
        # would cost ~1 ms at 512 worlds (a cache miss per world and field).
        if ids is not None and len(ids) * 8 < self.num_envs:
            for key, vs in views:
                dst = self._np64[key]
                for i in ids:
                    dst[i] = vs[i]
        else:
            # np.concatenate loops over the views in C (np.stack would do Python work per world).
            for key, vs in views:
                np.concatenate(vs, out=self._flat64[key])
        self._stale32 = True

    def step(self, ctrl: torch.Tensor | np.ndarray) -> None:
        """Hold ``ctrl [N, nu]`` for ``frame_skip`` physics steps in every world."""
        self._ctrl[...] = ctrl if isinstance(ctrl, np.ndarray) else ctrl.detach().cpu().numpy()
        self._run(self._step_chunk)  # reads each world out as it goes
        self._stale32 = True

    def _refresh(self, i: int) -> None:
        """Position stage and Jacobian of world ``i`` after its state was set from outside."""
        m, d = self.models[i], self.datas[i]
        self._mj.mj_step1(m, d)
        self._mj.mj_jacSite(m, d, self._v_jacp[i], self._v_jacr[i], self._grip)

    def set_start(self, ids: np.ndarray, qpos: torch.Tensor, mocap_pos: torch.Tensor) -> None:
        """Reset worlds ``ids [k]`` to ``qpos [k, nq]`` / ``mocap_pos [k, nmocap, 3]``, at rest."""
        if len(ids) == 0:
            return
        q = qpos.detach().to("cpu", torch.float64).numpy()
        mp = mocap_pos.detach().to("cpu", torch.float64).numpy()
        ix = self.ix
        rows = ids.tolist()
        for row, i in enumerate(rows):
            m, d = self.models[i], self.datas[i]
            self._mj.mj_resetData(m, d)
            d.qpos[:] = q[row]
            d.mocap_pos[:] = mp[row]
            # The servos start at the current pose, so nothing jumps on the first step.
            d.ctrl[ix.arm_ctrl] = q[row, ix.arm_qpos]
            d.ctrl[ix.finger_ctrl] = q[row, ix.finger_qpos]
            self._refresh(i)
        self._gather(mocap=True, ids=rows)

    def task_readout(self) -> Readout:
        """The current state of all worlds as float64 numpy arrays (the env's per-step math reads these).

        They are the backend's own buffers: the next ``step`` or ``set_start`` overwrites them.
        """
        if isinstance(self._arm_cols, slice):
            return self._host_readout
        return self._host_readout._replace(jac=self._jac64[:, :, self._arm_cols])  # a gather copies

    def readout(self) -> Readout:
        """The current state of all worlds as float32 torch tensors on the env's device.

        On a CPU device these share memory with the backend's float32 arrays, refreshed in place by
        the first call after a step or reset (not by the step itself); callers copy what they keep.
        """
        if self._stale32:
            # float64 → float32, one copy per field, only when asked for after a change.
            for key, v64 in self._np64.items():
                np.copyto(self._np[key], v64, casting="same_kind")
            self._np["jac"][...] = self._jac64[:, :, self._arm_cols]
            self._stale32 = False
        if self._on_cpu:
            return self._cpu_readout
        return Readout(*(t.to(self.device) for t in self._cpu_readout))

    def images(self, camera: CameraRenderer, ids: np.ndarray, r: Readout) -> np.ndarray:
        """``uint8 [k, H, W, 3]`` images of worlds ``ids``, drawn from their own ``MjData``.

        ``mj_step1`` (end of every step and reset) has run kinematics and the camera frames, so
        nothing is recomputed; ``r`` is not needed here.
        """
        return camera.render_datas([self.datas[i] for i in ids.tolist()])

    # ---- state and parameters ---------------------------------------------------------------

    def get_state(self) -> torch.Tensor:
        """``float64 [N, S]``: each world's full integration state (``mj_getState``, ``mjSTATE_INTEGRATION``)."""
        spec = self._mj.mjtState.mjSTATE_INTEGRATION
        size = self._mj.mj_stateSize(self.model, spec)
        out = np.zeros((self.num_envs, size))
        for i, d in enumerate(self.datas):
            self._mj.mj_getState(self.models[i], d, out[i], spec)
        return torch.from_numpy(out)

    def set_state(self, state: torch.Tensor) -> None:
        """Load states from :meth:`get_state` (bit-exact continuation) and refresh the readout."""
        spec = self._mj.mjtState.mjSTATE_INTEGRATION
        s = state.detach().to("cpu", torch.float64).numpy()
        if s.shape != (self.num_envs, self._mj.mj_stateSize(self.model, spec)):
            raise ValueError(f"state shape {list(s.shape)} does not match this env's "
                             f"[{self.num_envs}, {self._mj.mj_stateSize(self.model, spec)}]")
        for i, d in enumerate(self.datas):
            self._mj.mj_setState(self.models[i], d, s[i], spec)
            self._refresh(i)
        self._gather(mocap=True)

    def get_params(self) -> dict[str, torch.Tensor]:
        """Every randomisable parameter, ``float64 [N, ...]`` per world (see ``params.py``)."""
        return {name: torch.from_numpy(np.stack([param_view(m, name) for m in self.models]).copy())
                for name in PARAM_NAMES}

    def set_params(self, name: str, values: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Set parameter ``name`` of worlds ``env_ids`` (all when ``None``) to ``values [len(ids), ...]``."""
        ids = np.arange(self.num_envs) if env_ids is None else env_ids.detach().cpu().numpy().astype(np.int64)
        v = check_param_values(name, values, (len(ids), *param_view(self.model, name).shape))
        if not self.own_models:
            self.models = [copy.deepcopy(self.model) for _ in range(self.num_envs)]
            self.own_models = True
        for row, i in enumerate(ids):
            param_view(self.models[int(i)], name)[...] = v[row]
            if name == "actuator_gain":
                # A position servo's force is kp·ctrl − kp·q − kv·q̇: its bias must follow its gain.
                bias = self.models[int(i)].actuator_biasprm
                is_servo = self.models[int(i)].actuator_biastype == self._mj.mjtBias.mjBIAS_AFFINE
                bias[is_servo, 1] = -v[row][is_servo]
            # The position stage of the next physics step already ran with the old values (masses
            # enter the inertia matrix, frictions the contacts there): rerun it.
            self._refresh(int(i))
        self._gather()

    def close(self) -> None:
        """Stop the worker threads."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
