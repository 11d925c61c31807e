"""Same-behaviour check for ``loop.demos_*`` → the ``demos`` extension (issue 51): one JSON line per tree.

Builds a SAC runner on the fake task with recorded demonstrations in its demo buffer (the keys every tree takes:
``loop.demos_path``, ``loop.demos_correction_weight``), then prints digests of what a run starts from: the demo
buffer's rows, the actor's weights, the global torch RNG state after the build, and the losses of the first
``--updates`` SAC updates on batches drawn from the demo buffer with a fixed generator. Run it in the tree before
and after a change and compare the lines (``--new-keys``: the ``demos.*`` spelling, after the change only)::

    PYTHONPATH=/tmp/before python benchmarks/before_after/demos_fingerprint.py > before.json
    PYTHONPATH=$PWD python benchmarks/before_after/demos_fingerprint.py > after.json && diff before.json after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import torch

import robot_rl.testing  # noqa: F401 - registers the fake task
from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import InProcessRunner
from robot_rl.testing.fake_env import record_random_store


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for key in sorted(tensors):
        h.update(key.encode())
        h.update(tensors[key].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def fingerprint(root: Path, updates: int, new_keys: bool, seed: int = 0) -> dict[str, Any]:
    """The digests and losses of the module docstring, for a run under ``root``."""
    store = record_random_store(root / "demos", episodes=6, seed=seed)
    keys = (["demos.path", "demos.correction_weight"] if new_keys
            else ["loop.demos_path", "loop.demos_correction_weight"])
    cfg = resolve_train_config("fake", "sac", overrides=[
        f"run.root={root}", "run.name=fp", f"run.seed={seed}", "run.progress=false", "run.device=cpu",
        "algo.demo_ratio=0.5", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "algo.batch_size=32",
        f"{keys[0]}={store}", f"{keys[1]}=2"])
    runner = InProcessRunner(cfg)
    try:
        rng_after_build = hashlib.sha256(torch.random.get_rng_state().numpy().tobytes()).hexdigest()[:16]
        demos = runner.learner.storage.buffers["demos"]
        rows = demos.sample(len(demos), torch.Generator().manual_seed(0))  # a fixed draw covers the content
        rows_digest = _digest({"action": rows.action, "reward": rows.reward, **{f"obs.{k}": v for k, v in
                                                                              rows.obs.items()}})
        actor = runner.algo.actor_weights()
        weights = _digest({k: v for k, v in actor.items() if isinstance(v, torch.Tensor)})
        gen = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(updates):
            stats = runner.algo.update(demos.sample(32, gen))
            losses.append({k: round(float(v), 6) for k, v in sorted(stats.items()) if "loss" in k})
        return {"demo_rows": len(demos), "demo_rows_digest": rows_digest, "actor_weights": weights,
                "rng_after_build": rng_after_build, "losses": losses}
    finally:
        runner.close()


def main() -> None:
    """Print the fingerprint as one JSON object."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--updates", type=int, default=5)
    p.add_argument("--new-keys", action="store_true", help="spell the keys demos.path, demos.correction_weight")
    a = p.parse_args()
    logging.disable(logging.WARNING)  # the deprecation line of the old keys is not part of the fingerprint
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(fingerprint(Path(tmp), a.updates, a.new_keys), indent=1))


if __name__ == "__main__":
    main()
