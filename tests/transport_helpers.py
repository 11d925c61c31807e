"""Helpers the transport tests share: free TCP addresses, tagged chunks, and bounded waits."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import torch

from robot_rl.core.transition import TransitionBatch


def free_tcp_addr() -> str:
    """A ``tcp://127.0.0.1:PORT`` address with a port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def tagged_batch(tag: float, n: int = 2, action: float = 0.0, next_offset: float = 0.0) -> TransitionBatch:
    """``n`` rows whose reward and state are all ``tag`` (next state ``tag + next_offset``), so a
    received chunk names itself and any corrupted array shows."""
    b = torch.zeros(n, dtype=torch.bool)
    return TransitionBatch(obs={"state": torch.full((n, 3), float(tag))}, action=torch.full((n, 2), action),
                           reward=torch.full((n,), float(tag)), terminated=b, truncated=b,
                           next_obs={"state": torch.full((n, 3), tag + next_offset)}, intervened=b,
                           policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n))


def drain(learner, count: int, timeout: float = 20.0) -> list[TransitionBatch]:
    """Receive up to ``count`` chunks, giving up after ``timeout`` seconds."""
    got: list[TransitionBatch] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        b = learner.recv(0.05)
        if b is not None:
            got.append(b)
    return got


def wait_until(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Poll ``cond`` every 20 ms until it holds (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False
