"""Data-parallel training over ``torch.distributed``: what an algorithm needs to learn on several ranks at once.

``torchrun --nproc-per-node N -m robot_rl.cli train …`` starts N ranks; each owns its envs and its data, the
gradients are averaged by :class:`~torch.nn.parallel.DistributedDataParallel` (NCCL on GPUs, gloo on CPU), and
the few statistics an update computes over its whole batch (advantage moments, the KL that sets PPO's step,
the observation normaliser) are reduced here so that every rank takes the same step a single process would take
on the union of the ranks' data. Random numbers drawn per batch row (an off-policy update's noise, augmentation)
are drawn for the whole run's batch and shared out (:func:`draw_rows`), so the ranks use exactly the numbers one
process would. An algorithm that supports this implements :class:`SupportsDataParallel`.
"""

from __future__ import annotations

import datetime
import inspect
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DataParallel:
    """A process's place among the ranks, and the collectives the algorithms use."""

    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the run (checkpoints, logs, evaluations) and publishes weights to remote actors."""
        return self.rank == 0

    @staticmethod
    def from_environment() -> DataParallel | None:
        """The layout torchrun (or any launcher setting RANK/WORLD_SIZE/LOCAL_RANK) gave this process, or None."""
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return None
        return DataParallel(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                            int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))

    def start(self, device: torch.device, timeout_s: float) -> None:
        """Join the process group (NCCL for CUDA devices, gloo otherwise); every collective then has a deadline."""
        if dist.is_initialized():
            return
        backend = "nccl" if device.type == "cuda" else "gloo"
        timeout = datetime.timedelta(seconds=timeout_s)
        if device.type == "cuda":
            dist.init_process_group(backend, timeout=timeout, device_id=device)
        else:
            dist.init_process_group(backend, timeout=timeout)

    def wrap(self, module: nn.Module) -> nn.Module:
        """``module`` under DistributedDataParallel: its gradients are averaged over the ranks in ``backward``."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        device_ids = [module_device(module)] if module_device(module).type == "cuda" else None
        # DDP compares a gradient's strides with its bucket's, also along dimensions of size 1 where they mean nothing
        # (ensemble critics' [E, in, 1] weights): the layout is the same, and the warning would only alarm.
        warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
        # Buffers (normaliser statistics) are kept equal by the algorithms (every rank folds in every rank's batch),
        # not by rank 0's copy each forward. torch >= 2.13 names that forward_sync_buffers (and warns on the old
        # name); its copy of rank 0's buffers at wrapping is what a resume hands every rank anyway.
        if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters:
            return DDP(module, device_ids=device_ids, forward_sync_buffers=False)
        return DDP(module, device_ids=device_ids, broadcast_buffers=False)

    def wrap_loss(self, loss: Callable[..., Any], params: Iterable[nn.Parameter]) -> nn.Module:
        """``loss`` under DDP: call the result as ``loss``; ``backward`` averages the gradients of ``params``.

        For algorithms whose optimisers each train a part of their networks (SAC's critics, actor and α): one
        :class:`LossModule` per optimiser. Wrapping copies rank 0's ``params`` to every rank.
        """
        return self.wrap(LossModule(loss, params))

    def share(self, full: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """The equal part of ``full`` along ``dim`` that is this rank's, in rank order (its rows of a whole batch)."""
        n = full.shape[dim] // self.world_size
        return full.narrow(dim, self.rank * n, n)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of ``x`` over the ranks (every rank gets it)."""
        out = x.detach().clone()
        dist.all_reduce(out)
        return out / self.world_size

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of ``x`` over the ranks."""
        out = x.detach().clone()
        dist.all_reduce(out)
        return out

    def cat(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's ``x`` concatenated along dim 0 in rank order (equal shapes on every rank)."""
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts)

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable; small: it travels pickled), in rank order."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether ``flag`` is true on any rank (a decision every rank must take together)."""
        return bool(self.sum(torch.tensor([float(flag)], device=device)).item() > 0)

    def broadcast_flag(self, flag: bool, device: torch.device) -> bool:
        """Rank 0's ``flag`` on every rank (e.g. its evaluation reached the threshold)."""
        t = torch.tensor([float(flag)], device=device)
        dist.broadcast(t, src=0)
        return bool(t.item() > 0)

    def stop(self) -> None:
        """Leave the process group."""
        if dist.is_initialized():
            dist.destroy_process_group()


class LossModule(nn.Module):
    """A loss function as a module over the parameters it trains, so that DistributedDataParallel can hook them.

    Several of these may split one model's parameters between them (one per optimiser); a parameter must be in at
    most one, and must get a gradient every time its module's loss is backpropagated (DDP waits for every one).
    The gradients of parameters computed outside ``loss`` but in the same ``backward`` are averaged too.
    """

    def __init__(self, loss: Callable[..., Any], params: Iterable[nn.Parameter]) -> None:
        super().__init__()
        self.loss = loss
        self.trained = nn.ParameterList(params)  # the same Parameter objects: the optimisers step these
        if not len(self.trained):
            raise ValueError("LossModule needs at least one parameter to train")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Whatever ``loss`` returns."""
        return self.loss(*args, **kwargs)


def draw_rows(draw: Callable[[tuple[int, ...]], torch.Tensor], shape: tuple[int, ...], dp: DataParallel | None,
              dim: int = 0) -> torch.Tensor:
    """``draw(shape)`` alone; as one of several ranks, this rank's rows of ``draw`` for the whole run's batch.

    ``dim`` is the batch dimension of ``shape``. Every rank draws the numbers for all ranks' rows from a generator
    in the same state and keeps its own share: together the ranks use exactly what one process draws for their
    concatenated batches, and their generators stay equal. (The cost, ``world_size`` times the draws, is small
    next to the update.)
    """
    if dp is None or dp.world_size == 1:
        return draw(shape)
    full = list(shape)
    full[dim] *= dp.world_size
    return dp.share(draw(tuple(full)), dim)


def module_device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter (CPU for a module without parameters)."""
    return next((p.device for p in module.parameters()), torch.device("cpu"))


def moments(x: torch.Tensor, dp: DataParallel | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (unbiased) standard deviation of ``x`` over every rank's elements (this rank's alone without ``dp``)."""
    if dp is None:
        return x.mean(), x.std()
    s = dp.sum(torch.stack([x.sum(), x.square().sum(), torch.tensor(float(x.numel()), device=x.device)]))
    n = s[2]
    mean = s[0] / n
    var = (s[1] - n * mean.square()) / (n - 1)
    return mean, var.clamp_min(0).sqrt()


@runtime_checkable
class SupportsDataParallel(Protocol):
    """An algorithm that can train as one of several data-parallel ranks."""

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """From now on, average gradients and batch statistics over ``dp``'s ranks (called once, before training)."""
        ...
