"""The offline phase: CQL updates on recorded episodes with a held-out TD error that falls as the critics fit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.data.episode import Episode
from robot_rl.data.offline import load_offline
from robot_rl.loop.offline_phase import OfflineConfig, pretrain, write_curve
from robot_rl.policies.sac import SACConfig

SPEC = EnvSpec(observation={"state": ArraySpec((2,), "float32")}, action=ArraySpec((1,), "float32", -1.0, 1.0))


def _episodes(n: int, seed: int = 0) -> list[Episode]:
    # Two-step episodes: the reward is the first state coordinate, then 1 at the end (a value worth learning).
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        s = rng.uniform(-1, 1, (2, 2)).astype(np.float32)
        out.append(Episode(obs={"state": s}, action=np.full((2, 1), 0.5, np.float32),
                           reward=np.array([s[0, 0], 1.0], np.float32), terminated=np.array([False, True]),
                           truncated=np.array([False, False]), intervened=np.zeros(2, bool),
                           success=np.array([False, True]), final_obs={"state": s[1]}))
    return out


def test_the_offline_curve_has_its_held_out_td_error_falling(tmp_path: Path) -> None:
    data = load_offline(_episodes(200), SPEC, gamma=0.9, heldout_fraction=0.1)
    algo = SACConfig(actor_hidden=(64, 64), critic_hidden=(64, 64), batch_size=64, gamma=0.9, learning_starts=0,
                     init_temperature=0.01, cql_alpha=1.0, calql=True).build(SPEC, "cpu", 0)
    points: list[dict[str, float]] = []
    curve = pretrain(algo, data, OfflineConfig(updates=400, log_every=100), batch_size=64, on_point=points.append,
                     progress=False)
    assert curve == points and [p["update"] for p in curve] == [100, 200, 300, 400]
    td = [p["heldout_td"] for p in curve]
    assert all(np.isfinite(td)) and td[-1] < td[0], td
    assert {"critic_loss", "actor_loss", "q_mean"} <= set(curve[0])
    for p in curve:  # the TD error on the scale of Q
        assert p["heldout_td_rel"] == pytest.approx(math.sqrt(p["heldout_td"]) / abs(p["q_mean"]))
    saved = json.loads(write_curve(curve, tmp_path).read_text())
    assert saved[-1]["heldout_td"] == pytest.approx(td[-1])


def test_bad_offline_settings_are_refused() -> None:
    with pytest.raises(ValueError, match=r"offline\.updates"):
        OfflineConfig(updates=-1)
    with pytest.raises(ValueError, match="heldout_fraction"):
        OfflineConfig(heldout_fraction=1.0)


def test_train_offline_then_online_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli import main
    from robot_rl.testing.fake_env import record_random_store  # importing robot_rl.testing registers "fake"

    record_random_store(tmp_path / "data", episodes=20)
    args = ["train", "--task", "fake", "--offline", str(tmp_path / "data"), "--name", "o", f"run.root={tmp_path}",
            "loop.total_env_steps=400", "loop.eval_every_env_steps=200", "loop.eval_episodes=4", "run.progress=false",
            "algo.learning_starts=64", "algo.batch_size=32", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]",
            "algo.demo_ratio=0.5", "algo.cql_alpha=1.0", "algo.calql=true", "offline.updates=100",
            "offline.log_every=50"]
    assert main(args) == 0
    curve = json.loads((tmp_path / "o" / "offline_curve.json").read_text())
    assert [p["update"] for p in curve] == [50, 100] and all("heldout_td" in p for p in curve)
    err = capsys.readouterr().err  # no terminal: a line per logged point instead of a bar
    assert "offline update 50/100: critic_loss" in err and "offline update 100/100: critic_loss" in err
    assert main(["train", "--task", "fake", "--offline", str(tmp_path / "nowhere"), "--name", "x",
                 f"run.root={tmp_path}", "run.progress=false"]) == 2


def test_actor_warmup_needs_an_offline_phase_longer_than_itself(tmp_path: Path) -> None:
    from robot_rl.core.config import ConfigError
    from robot_rl.loop.offline_phase import check_actor_warmup
    from robot_rl.policies.sac import SACConfig

    warm = SACConfig(actor_bc_updates=100)
    with pytest.raises(ConfigError, match="without --offline DATA"):
        check_actor_warmup(warm, OfflineConfig())
    with pytest.raises(ConfigError, match=r"offline\.updates=100"):
        check_actor_warmup(warm, OfflineConfig(data=str(tmp_path), updates=100))
    check_actor_warmup(warm, OfflineConfig(data=str(tmp_path), updates=101))
    check_actor_warmup(SACConfig(), OfflineConfig())


def test_the_hil_learner_refuses_the_warmup_it_has_no_phase_for(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli import main

    run_dir = tmp_path / "hil"
    assert main(["deploy", "--role", "learner", "--run-dir", str(run_dir), "algo.actor_bc_updates=10"]) == 2
    assert "set it to 0" in capsys.readouterr().err
    assert not run_dir.exists(), "refused before anything is written"
