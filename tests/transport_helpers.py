"""Helpers the transport tests share: free TCP addresses, tagged chunks, and draining a learner."""

from __future__ import annotations

import socket

import torch
from waiting import wait_until

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
    """Receive ``count`` chunks; the test fails if they have not all arrived within ``timeout`` seconds."""
    got: list[TransitionBatch] = []

    def received() -> bool:
        b = learner.recv(0.05)  # blocks up to 50 ms: the poll period
        if b is not None:
            got.append(b)
        return len(got) >= count

    wait_until(received, timeout, f"{count} chunks at the learner", poll_s=0.0, seen=lambda: f"{len(got)} chunks")
    return got
