"""Episode recording, the append-only episode store, demos loading and `robot-rl data` (no LeRobot needed)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import robot_rl.testing  # noqa: F401 - registers the "fake" task
from robot_rl.checkpoint import save_checkpoint
from robot_rl.cli import main
from robot_rl.config_io import save_yaml
from robot_rl.core.config import ConfigError
from robot_rl.core.specs import SpecMismatchError
from robot_rl.data.demos import load_demos
from robot_rl.data.episode import Episode, to_transitions
from robot_rl.data.recorder import EpisodeRecorder, StoreSink
from robot_rl.data.store import EpisodeStore, StoreError
from robot_rl.loop.config import resolve_train_config
from robot_rl.testing.fake_env import FakeVecEnv


def _record(path: Path, episodes: int = 5, image: bool = True, seed: int = 0):
    """Record ``episodes`` episodes of random actions; also return every env step for comparison."""
    env = FakeVecEnv(num_envs=3, image=image, episode_length=6, seed=seed)
    store = EpisodeStore.create(path, env.spec, fps=10, task="fake")
    rec = EpisodeRecorder(StoreSink(store), env.num_envs, task="fake", max_episodes=episodes)
    gen = torch.Generator().manual_seed(seed)
    obs = env.reset(seed=seed)
    rec.reset(obs)
    steps = []
    while not rec.full:
        action = torch.rand(3, 2, generator=gen) * 2 - 1
        # Mark sub-env 1's actions as a human's, to see the flag travel.
        result = env.step(action)
        steps.append((obs, action, result))
        rec.step(action, result, intervened=torch.tensor([False, True, False]))
        obs = result.obs
    rec.close()
    return store, steps


def test_recorder_keeps_whole_episodes_with_true_final_obs(tmp_path):
    store, steps = _record(tmp_path / "s", episodes=5)
    assert len(store) == 5
    # Rebuild sub-env 0's first episode straight from the env steps and compare field by field.
    rows = []
    for obs, action, result in steps:
        rows.append((obs, action, result))
        if bool(result.terminated[0] | result.truncated[0]):
            break
    eps = [store.read(i) for i in range(len(store))]
    ep0 = next(e for e in eps if np.array_equal(e.action, np.stack([a[0].numpy() for _, a, _ in rows])))
    assert len(ep0) == len(rows)
    np.testing.assert_array_equal(ep0.obs["state"], np.stack([o["state"][0].numpy() for o, _, _ in rows]))
    np.testing.assert_array_equal(ep0.obs["image.front"], np.stack([o["image.front"][0].numpy() for o, _, _ in rows]))
    np.testing.assert_array_equal(ep0.reward, np.array([r.reward[0].item() for _, _, r in rows], np.float32))
    last = rows[-1][2]
    np.testing.assert_array_equal(ep0.final_obs["state"], last.info["final_obs"]["state"][0].numpy())
    assert ep0.truncated[-1] or ep0.terminated[-1]
    assert not ep0.intervened.any()
    assert any(e.intervened.all() for e in eps)  # sub-env 1's episodes

    # Transitions: next_obs is the next step's obs within the episode and the true final obs at its end.
    batch, dropped = to_transitions([ep0])
    assert dropped == 0 and len(batch) == len(ep0)
    np.testing.assert_array_equal(batch.next_obs["state"][:-1].numpy(), ep0.obs["state"][1:])
    np.testing.assert_array_equal(batch.next_obs["state"][-1].numpy(), ep0.final_obs["state"])
    assert batch.obs["image.front"].dtype == torch.uint8


def test_transitions_without_final_obs_drop_only_unbootstrappable_steps():
    ep = Episode(obs={"state": np.arange(8, dtype=np.float32).reshape(4, 2)}, action=np.zeros((4, 1), np.float32),
                 reward=np.array([0, 0, np.nan, 1], np.float32), terminated=np.zeros(4, bool),
                 truncated=np.array([0, 0, 0, 1], bool), intervened=np.zeros(4, bool), success=np.zeros(4, bool))
    batch, dropped = to_transitions([ep])
    # Step 2 has a NaN reward; step 3 was truncated and has no successor observation.
    assert dropped == 2 and len(batch) == 2
    ep.terminated[-1], ep.truncated[-1] = True, False
    ep.reward[2] = 0.5
    batch, dropped = to_transitions([ep])
    assert dropped == 0 and batch.next_obs["state"][-1].tolist() == [6.0, 7.0]


def test_store_survives_torn_index_and_orphans(tmp_path):
    _record(tmp_path / "s", episodes=3, image=False)
    index = tmp_path / "s" / "index.jsonl"
    good = index.read_bytes()
    # A crash inside the index append leaves half a line; one after the file rename, an orphan file.
    index.write_bytes(good + good.splitlines(keepends=True)[0][:25])
    orphan = tmp_path / "s" / "episodes" / "ep_000003.npz"
    orphan.write_bytes((tmp_path / "s" / "episodes" / "ep_000000.npz").read_bytes())
    reopened = EpisodeStore(tmp_path / "s")
    assert len(reopened) == 3 and reopened.torn_lines == 1 and reopened.orphans == ["episodes/ep_000003.npz"]
    assert main(["data", "verify", str(tmp_path / "s")]) == 0  # leftovers are notes, not problems
    # The next append cuts the torn line and takes the orphan's number; everything reads back.
    reopened.append(reopened.read(0))
    again = EpisodeStore(tmp_path / "s")
    assert len(again) == 4 and again.torn_lines == 0 and not again.orphans
    assert [len(e) for e in again] == [e.frames for e in again.entries]


def test_verify_reports_damage_and_nan(tmp_path, capsys):
    store, _ = _record(tmp_path / "s", episodes=2, image=False)
    f = tmp_path / "s" / store.entries[1].file
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    assert main(["data", "verify", str(tmp_path / "s")]) == 1
    out = capsys.readouterr().out
    assert "sha256" in out and "1 problem" in out
    with pytest.raises(StoreError, match="damaged"):
        store.read(1)

    ep = store.read(0)
    ep.obs["state"][2, 0] = np.nan
    nan_store = EpisodeStore.create(tmp_path / "n", store.spec, fps=10)
    nan_store.append(ep)
    assert main(["data", "verify", str(tmp_path / "n")]) == 1
    assert "1 step(s) with NaN" in capsys.readouterr().out


def test_store_rejects_wrong_spec_and_bad_dirs(tmp_path):
    store, _ = _record(tmp_path / "s", episodes=1, image=False)
    ep = store.read(0)
    ep.obs["state"] = ep.obs["state"][:, :2]
    with pytest.raises(SpecMismatchError, match="state"):
        store.append(ep)
    with pytest.raises(StoreError, match="already holds"):
        EpisodeStore.create(tmp_path / "s", store.spec)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x").write_text("x")
    with pytest.raises(StoreError, match="not an empty directory"):
        EpisodeStore.create(tmp_path / "junk", store.spec)


def _run_dir(tmp_path: Path, *overrides: str) -> Path:
    cfg = resolve_train_config("fake", "sac", overrides=["algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]",
                                                         *overrides])
    run = tmp_path / "run"
    run.mkdir()
    save_yaml(cfg, run / "config.yaml")
    env = cfg.task.make("cpu", 0)
    algo = cfg.algo.build(env.spec, "cpu", 0)
    save_checkpoint(run, 0, {"algo": algo.state_dict()}, {})
    return run


def test_cli_record_inspect_verify(tmp_path, capsys):
    run = _run_dir(tmp_path, "task.image=true")
    out = run / "demos"
    assert main(["data", "record", str(run), "--out", str(out), "--episodes", "4", "--num-envs", "2"]) == 0
    assert "recorded 4 episodes" in capsys.readouterr().out
    store = EpisodeStore(out)
    assert len(store) == 4 and store.meta["source"]["run_dir"] == str(run)
    assert main(["data", "inspect", str(run)]) == 0
    text = capsys.readouterr().out
    assert "run directory" in text and "checkpoints: 1" in text and "episodes: 4" in text
    assert "image.front" in text and "uint8[16, 16, 3]" in text
    assert main(["data", "verify", str(run)]) == 0
    text = capsys.readouterr().out
    assert "OK" in text and f"4 episodes, {store.total_frames} frames" in text


def test_cli_errors_are_clear(tmp_path, capsys):
    assert main(["data", "inspect", str(tmp_path / "nope")]) == 2
    assert "not an episode store, a LeRobotDataset v3 or a run directory" in capsys.readouterr().err
    _record(tmp_path / "s", episodes=1, image=False)
    if importlib.util.find_spec("pyarrow") is None:  # export needs the datasets extra (not LeRobot)
        assert main(["data", "export", str(tmp_path / "s"), str(tmp_path / "lr")]) == 2
        err = capsys.readouterr().err
        assert "needs pyarrow" in err and "robot-rl[datasets]" in err
    (tmp_path / "fake_lr" / "meta").mkdir(parents=True)
    (tmp_path / "fake_lr" / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v3.0",
                                                                          "features": {}, "fps": 10}))
    assert main(["data", "import", str(tmp_path / "fake_lr"), str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "action" in err


def test_demos_path_fills_the_demo_buffer(tmp_path):
    from robot_rl.loop.runner import InProcessRunner

    store, _ = _record(tmp_path / "demos", episodes=4, image=False)
    base = ["run.progress=false", "loop.eval_episodes=4", "loop.eval_every_env_steps=100", "loop.total_env_steps=120",
            "loop.success_threshold=null", "algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]",
            "algo.learning_starts=32", "algo.batch_size=16", f"loop.demos_path={tmp_path / 'demos'}"]
    cfg = resolve_train_config("fake", "sac", overrides=[*base, f"run.root={tmp_path}", "run.name=a",
                                                          "algo.demo_ratio=0.5"])
    runner = InProcessRunner(cfg)
    expected = len(load_demos(tmp_path / "demos", runner.spec))
    assert expected == store.total_frames  # every recorded step has its true successor
    assert len(runner.learner.storage.buffers["demos"]) == expected
    result = runner.train()
    assert result.updates > 0
    # On resume the demo buffer comes back from the replay segments and is not loaded a second time.
    resumed = InProcessRunner(cfg, run_dir=result.run_dir, resume=True)
    assert len(resumed.learner.storage.buffers["demos"]) == expected
    resumed.close()  # not trained further: release its envs and log

    # Without a demo buffer the run refuses to start and says what to set.
    cfg = resolve_train_config("fake", "sac", overrides=[*base, f"run.root={tmp_path}", "run.name=b"])
    with pytest.raises(ConfigError, match="demo_ratio"):
        InProcessRunner(cfg)
    # Demos of another spec are refused with the difference spelled out.
    cfg = resolve_train_config("fake", "sac", overrides=[*base, f"run.root={tmp_path}", "run.name=c",
                                                          "algo.demo_ratio=0.5", "task.image=true"])
    with pytest.raises(SpecMismatchError, match=r"image\.front"):
        InProcessRunner(cfg)


def test_rac_labelled_demos_are_weighted_by_the_loop_config(tmp_path):
    import dataclasses

    from robot_rl.data.episode import SEGMENT_CORRECTION, SEGMENT_REWIND
    from robot_rl.loop.runner import InProcessRunner

    src, _ = _record(tmp_path / "plain", episodes=2, image=False)
    labelled = EpisodeStore.create(tmp_path / "demos", src.spec, fps=10, task="fake")
    segments = []
    for ep in src:
        seg = np.zeros(len(ep.action), dtype=np.int8)
        seg[1:3], seg[3:5] = SEGMENT_REWIND, SEGMENT_CORRECTION
        segments.append(seg)
        labelled.append(dataclasses.replace(ep, segment=seg))
    base = ["run.progress=false", "loop.success_threshold=null", "algo.demo_ratio=0.5", "algo.actor_hidden=[16,16]",
            "algo.critic_hidden=[16,16]", f"loop.demos_path={tmp_path / 'demos'}", f"run.root={tmp_path}"]
    rows = {}
    for name, extra in (("plain", []), ("weighted", ["loop.demos_correction_weight=3", "loop.demos_rewind_weight=0"])):
        runner = InProcessRunner(resolve_train_config("fake", "sac", overrides=[*base, f"run.name={name}", *extra]))
        rows[name] = len(runner.learner.storage.buffers["demos"])
        runner.close()
    seg = np.concatenate(segments)
    assert rows["plain"] == len(seg)
    assert rows["weighted"] == int((seg == 0).sum() + 3 * (seg == SEGMENT_CORRECTION).sum())
