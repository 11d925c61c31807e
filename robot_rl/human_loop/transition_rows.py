"""The deploy loop's recorded transition rows (numpy, one step each) as the batch a learner takes."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from robot_rl.core.transition import TransitionBatch


def rows_to_batch(rows: list[dict[str, Any]]) -> TransitionBatch:
    """Stack recorded transition rows (numpy, no batch dimension) into one :class:`TransitionBatch`."""

    def stack(key: str) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(np.stack([r[key][k] for r in rows])) for k in rows[0][key]}

    extras = {k: torch.cat([r["extras"][k] for r in rows]) for k in rows[0]["extras"]}
    return TransitionBatch(
        obs=stack("obs"), action=torch.as_tensor(np.stack([r["action"] for r in rows])),
        reward=torch.tensor([r["reward"] for r in rows], dtype=torch.float32),
        terminated=torch.tensor([r["terminated"] for r in rows]),
        truncated=torch.tensor([r["truncated"] for r in rows]), next_obs=stack("next_obs"),
        intervened=torch.tensor([r["intervened"] for r in rows]),
        policy_version=torch.tensor([r["version"] for r in rows], dtype=torch.int64),
        env_index=torch.zeros(len(rows), dtype=torch.int64), extras=extras)
