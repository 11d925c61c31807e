"""On-policy rollout storage ``[T, N, ...]`` and generalised advantage estimation.

A rollout holds ``T = length`` consecutive steps of each of ``N`` sub-env columns. Rows arrive as
:class:`~robot_rl.core.transition.TransitionBatch` es and are placed by ``(actor_id, env_index)``: the first
time a pair is seen it is given the next free column, and each column has its own time cursor. So one
actor sending all ``N`` rows per step, one actor sending its sub-envs in pieces, or several actors
each numbering their sub-envs from 0 all fill the same ``[T, N]`` grid, each column one trajectory in
time order. Column assignment survives :meth:`RolloutStorage.clear`.

The bookkeeping (column map, cursors) lives on the CPU, so ``len`` and ``is_full`` never wait for a
GPU; the data tensors live on the storage's device.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch

Fields = dict[str, torch.Tensor]


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a ``[T, N]`` rollout; returns ``(advantages, returns)``.

    ``next_values[t]`` is ``V(next_obs[t])``, the value of the *true* successor (the finished episode's
    last observation where the env auto-reset), never ``values[t + 1]``, which after a reset belongs to
    the next episode. ``terminated`` and ``done = terminated | truncated`` are bool ``[T, N]``::

        δ_t = r_t + γ (1 − term_t) V(s'_t) − V(s_t)
        A_t = δ_t + γ λ (1 − done_t) A_{t+1},      A_T = 0
        R_t = A_t + V(s_t)                          (the value target)

    A truncated step bootstraps from ``V(s'_t)`` but still cuts the recursion, which is the same as
    rsl_rl's time-out rule (add ``γ V(s'_t)`` to the reward, then treat the step as terminal) with the
    exact final observation instead of rsl_rl's ``V(s_t)`` stand-in. The last step of the rollout
    bootstraps from ``V(s'_{T-1})`` through δ with ``A_T = 0``.
    """
    not_term = (~terminated).to(rewards.dtype)
    not_done = (~done).to(rewards.dtype)
    deltas = rewards + gamma * not_term * next_values - values
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def iter_minibatches(
    fields: Fields, num_minibatches: int, num_epochs: int = 1, generator: torch.Generator | None = None
) -> Iterator[Fields]:
    """Yield ``num_epochs × num_minibatches`` shuffled minibatches of ``[T, N, ...]`` fields.

    The ``T·N`` rows are flattened and reshuffled every epoch; each minibatch holds
    ``T·N // num_minibatches`` rows (a remainder is left out of that epoch, as in rsl_rl). ``generator``
    must live on the fields' device.
    """
    if not fields:
        raise ValueError("iter_minibatches needs at least one field")
    first = next(iter(fields.values()))
    total = first.shape[0] * first.shape[1]
    size = total // num_minibatches
    if size == 0:
        raise ValueError(f"{total} rows cannot make {num_minibatches} minibatches")
    flat = {k: v.flatten(0, 1) for k, v in fields.items()}
    for _ in range(num_epochs):
        perm = torch.randperm(total, device=first.device, generator=generator)
        for i in range(num_minibatches):
            rows = perm[i * size:(i + 1) * size]
            yield {k: v[rows] for k, v in flat.items()}


class RolloutStorage:
    """Preallocated ``[length, num_envs, ...]`` tensors for one on-policy rollout.

    Attributes after :meth:`add` (all ``[T, N, ...]`` on ``device``): ``obs`` / ``next_obs`` (dicts by
    observation key), ``action``, ``reward``, ``terminated``, ``truncated``, ``intervened``, ``policy_version`` and
    ``extras`` (allocated from the first batch's extras; later batches must carry the same keys).
    """

    def __init__(self, spec: EnvSpec, num_envs: int, length: int, device: torch.device | str = "cpu") -> None:
        if num_envs <= 0 or length <= 0:
            raise ValueError(f"num_envs ({num_envs}) and length ({length}) must be positive")
        self.spec = spec
        self.num_envs = num_envs
        self.length = length
        self.device = torch.device(device)
        shape = (length, num_envs)
        self.obs: Fields = {k: s.zeros(*shape, device=self.device) for k, s in spec.observation.items()}
        self.next_obs: Fields = {k: s.zeros(*shape, device=self.device) for k, s in spec.observation.items()}
        self.action = spec.action.zeros(*shape, device=self.device)
        self.reward = torch.zeros(shape, device=self.device)
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.truncated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.intervened = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.policy_version = torch.zeros(shape, dtype=torch.int64, device=self.device)
        self.extras: Fields = {}
        self._columns: dict[int, torch.Tensor] = {}  # actor_id -> [num_envs] column per env_index, -1 unseen
        self._next_column = 0
        self._cursor = torch.zeros(num_envs, dtype=torch.long)

    @property
    def done(self) -> torch.Tensor:
        """``[T, N]`` bool, ``terminated | truncated``."""
        return self.terminated | self.truncated

    def __len__(self) -> int:
        return int(self._cursor.sum())

    def is_full(self) -> bool:
        """Every column holds ``length`` steps."""
        return bool((self._cursor == self.length).all())

    def behind(self) -> torch.Tensor | None:
        """``[T, N]`` int64: versions between the weights that acted each row and the learner's, or ``None``.

        ``None`` here: a synchronous rollout is collected with the learner's current weights only, so the update
        needs no correction (:class:`~robot_rl.replay.async_rollout.AsyncRolloutStorage` returns the numbers).
        """
        return None

    def clear(self) -> None:
        """Forget the rows (the column assignment is kept); the tensors are reused, not reallocated."""
        self._cursor.zero_()

    def truncate_actor(self, actor_id: int) -> None:
        """Mark the newest row of each of ``actor_id``'s columns truncated (its actor process died there)."""
        table = self._columns.get(actor_id)
        if table is None:
            return
        cols = table[table >= 0]
        cols = cols[self._cursor[cols] > 0]
        if cols.numel():
            self.truncated[(self._cursor[cols] - 1).to(self.device), cols.to(self.device)] = True

    def _place(self, actor_id: int, env_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(time, column)`` CPU indices for rows of one actor; rows of one sub-env are in time order."""
        table = self._columns.get(actor_id)
        if table is None:
            table = self._columns[actor_id] = torch.full((self.num_envs,), -1, dtype=torch.long)
        if env_index.numel() and (int(env_index.min()) < 0 or int(env_index.max()) >= self.num_envs):
            raise IndexError(f"env_index outside [0, {self.num_envs}) from actor {actor_id}")
        cols = table[env_index]
        unseen = torch.unique(env_index[cols < 0])
        if unseen.numel():
            if self._next_column + unseen.numel() > self.num_envs:
                raise OverflowError(
                    f"actor {actor_id} brings more sub-envs than the {self.num_envs} columns of this rollout"
                )
            table[unseen] = torch.arange(self._next_column, self._next_column + unseen.numel())
            self._next_column += unseen.numel()
            cols = table[env_index]
        # A batch may hold several steps of one sub-env: its k-th row goes k steps after the cursor.
        order = torch.argsort(cols, stable=True)
        sorted_cols = cols[order]
        first = torch.searchsorted(sorted_cols, sorted_cols)
        rank = torch.empty_like(cols)
        rank[order] = torch.arange(cols.numel()) - first
        time = self._cursor[cols] + rank
        if time.numel() and int(time.max()) >= self.length:
            raise OverflowError("rollout is full for some sub-env; call update()/clear() before adding more")
        return time, cols

    def _check_extras(self, extras: Fields, rows: int) -> None:
        if self.extras and set(extras) != set(self.extras):
            raise KeyError(f"extras keys {sorted(extras)} differ from the rollout's {sorted(self.extras)}")
        for key, value in extras.items():
            if value.shape[:1] != (rows,):
                raise ValueError(f"extras[{key!r}] has {list(value.shape)}, expected [{rows}, ...]")
            if key in self.extras and (value.shape[1:] != self.extras[key].shape[2:]
                                       or value.dtype != self.extras[key].dtype):
                raise ValueError(f"extras[{key!r}] is {value.dtype}{list(value.shape[1:])} per row, the "
                                 f"rollout holds {self.extras[key].dtype}{list(self.extras[key].shape[2:])}")

    def add(self, batch: TransitionBatch) -> None:
        """Place each row of ``batch`` at its column's next time step (nothing is written on error)."""
        self._check_extras(batch.extras, len(batch))
        time, cols = self._place(int(batch.actor_id), batch.env_index.detach().to("cpu", torch.long))
        t, c = time.to(self.device), cols.to(self.device)
        batch = batch.to(self.device)
        for key, buf in self.obs.items():
            buf[t, c] = batch.obs[key]
            self.next_obs[key][t, c] = batch.next_obs[key]
        self.action[t, c] = batch.action
        self.reward[t, c] = batch.reward
        self.terminated[t, c] = batch.terminated
        self.truncated[t, c] = batch.truncated
        self.intervened[t, c] = batch.intervened
        self.policy_version[t, c] = batch.policy_version
        if not self.extras:
            self.extras = {k: torch.zeros(self.length, self.num_envs, *v.shape[1:], dtype=v.dtype,
                                          device=self.device) for k, v in batch.extras.items()}
        for key, buf in self.extras.items():
            buf[t, c] = batch.extras[key]
        self._cursor.index_add_(0, cols, torch.ones_like(cols))

    def fields(self) -> Fields:
        """The stored ``[T, N, ...]`` tensors by name (``obs.<key>``, ``next_obs.<key>``, ``extras.<key>``)."""
        out: Fields = {f"obs.{k}": v for k, v in self.obs.items()}
        out.update({f"next_obs.{k}": v for k, v in self.next_obs.items()})
        out.update(action=self.action, reward=self.reward, terminated=self.terminated,
                   truncated=self.truncated, intervened=self.intervened)
        out.update({f"extras.{k}": v for k, v in self.extras.items()})
        return out

    def minibatches(self, num_minibatches: int, num_epochs: int = 1, extra: Fields | None = None,
                    generator: torch.Generator | None = None) -> Iterator[Fields]:
        """Shuffled minibatches of :meth:`fields` plus ``extra`` ``[T, N, ...]`` tensors (advantages, …)."""
        if not self.is_full():
            raise RuntimeError(f"rollout holds {len(self)} of {self.length * self.num_envs} rows")
        fields = self.fields()
        fields.update(extra or {})
        return iter_minibatches(fields, num_minibatches, num_epochs, generator)
