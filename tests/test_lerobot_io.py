"""LeRobotDataset v3 round trips, checked against LeRobot's own writer and loader.

Our files are written natively (robot_rl/data/lerobot_v3.py); here LeRobot's loader reads them, and they
are compared with what LeRobot's own writer makes of the same episodes. Runs where lerobot is installed
(CI: .venv-lerobot, see docs/datasets.md); skipped elsewhere (tests/test_lerobot_v3.py runs without it).
"""

import numpy as np
import pytest
import torch

lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytest.importorskip("pyarrow")
pytest.importorskip("av")

from test_data_cli import _record, _run_dir  # noqa: E402 - tests/ is on sys.path under pytest

import robot_rl.testing  # noqa: E402, F401 - registers the "fake" task
from robot_rl.cli import main  # noqa: E402
from robot_rl.data.demos import load_demos  # noqa: E402
from robot_rl.data.lerobot_io import LeRobotReader, write_lerobot  # noqa: E402
from robot_rl.data.lerobot_v3 import LeRobotV3Writer  # noqa: E402
from robot_rl.data.store import EpisodeStore  # noqa: E402

LeRobotDataset = lerobot_dataset.LeRobotDataset
# LeRobot's stats and `datasets`' scalar encoding warn on every frame; the warnings are theirs, not ours.
pytestmark = [pytest.mark.integration,  # LeRobot's own writer and loader, in their venv
              pytest.mark.filterwarnings("ignore::DeprecationWarning:datasets.*"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning:lerobot.*")]


def _lerobot_hwc(x: torch.Tensor) -> np.ndarray:
    """LeRobot's loader gives float CHW in [0, 1]; back to uint8 HWC."""
    return (x.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()


def _write_with_lerobot(root, episodes=(4, 3)):
    """A dataset made entirely by LeRobot's own API, with HIL-SERL style reward/done/intervention keys."""
    features = {
        "observation.state": {"dtype": "float32", "shape": (3,), "names": None},
        "observation.images.top": {"dtype": "image", "shape": (12, 10, 3), "names": ["height", "width", "channels"]},
        "action": {"dtype": "float32", "shape": (2,), "names": None},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
        "complementary_info.is_intervention": {"dtype": "bool", "shape": (1,), "names": None},
    }
    ds = LeRobotDataset.create("test/handmade", fps=15, features=features, root=root, use_videos=False)
    rng = np.random.default_rng(0)
    for length in episodes:
        for t in range(length):
            ds.add_frame({"observation.state": rng.standard_normal(3).astype(np.float32),
                          "observation.images.top": rng.integers(0, 256, (12, 10, 3), dtype=np.uint8),
                          "action": rng.uniform(-1, 1, 2).astype(np.float32),
                          "next.reward": np.array([t / 10], np.float32),
                          "next.done": np.array([t == length - 1]),
                          "complementary_info.is_intervention": np.array([t % 2 == 1]),
                          "task": "pick"})
        ds.save_episode()
    ds.finalize()


def test_we_load_a_dataset_lerobot_wrote(tmp_path):
    root = tmp_path / "handmade"
    _write_with_lerobot(root)
    reader = LeRobotReader(root)
    assert reader.fps == 15 and reader.num_episodes == 2 and reader.num_frames == 7
    assert set(reader.spec.observation) == {"state", "image.top"}
    assert reader.spec.observation["image.top"].shape == (12, 10, 3)
    ours = list(reader)
    theirs = LeRobotDataset("test/handmade", root=root)
    i = 0
    for ep in ours:
        assert ep.task == "pick"
        for t in range(len(ep)):
            frame = theirs[i]
            assert int(frame["episode_index"]) == ep.meta["lerobot_episode_index"]
            np.testing.assert_array_equal(ep.obs["state"][t], frame["observation.state"].numpy())
            np.testing.assert_array_equal(ep.obs["image.top"][t], _lerobot_hwc(frame["observation.images.top"]))
            np.testing.assert_array_equal(ep.action[t], frame["action"].numpy())
            assert ep.reward[t] == pytest.approx(float(frame["next.reward"]))
            assert ep.terminated[t] == bool(frame["next.done"]) and not ep.truncated[t]
            assert ep.intervened[t] == bool(frame["complementary_info.is_intervention"])
            i += 1
    assert i == len(theirs)

    # Imported as demos: every step terminates or has a successor, so all 7 become transitions.
    assert main(["data", "import", str(root), str(tmp_path / "demos")]) == 0
    store = EpisodeStore(tmp_path / "demos")
    assert len(store) == 2 and store.total_frames == 7 and store.fps == 15
    batch = load_demos(tmp_path / "demos", reader.spec)
    assert len(batch) == 7 and int(batch.terminated.sum()) == 2 and int(batch.intervened.sum()) == 3
    np.testing.assert_array_equal(batch.next_obs["state"][0].numpy(), ours[0].obs["state"][1])
    # A LeRobot directory also works directly as loop.demos_path.
    assert len(load_demos(root, reader.spec)) == 7


def test_lerobot_loads_what_we_exported(tmp_path, capsys):
    store, _ = _record(tmp_path / "rec", episodes=4)
    assert main(["data", "export", str(tmp_path / "rec"), str(tmp_path / "lr"), "--repo-id", "test/ours",
                 "--robot-type", "so101_follower"]) == 0
    assert "4 episodes" in capsys.readouterr().out
    theirs = LeRobotDataset("test/ours", root=tmp_path / "lr")
    assert theirs.num_episodes == 4 and len(theirs) == store.total_frames and theirs.fps == 10
    assert theirs.meta.robot_type == "so101_follower" and list(theirs.meta.tasks.index) == ["fake"]
    ends = np.cumsum([len(ep) for ep in store]).tolist()
    assert theirs.meta.episodes["dataset_to_index"] == ends
    assert theirs.meta.episodes["dataset_from_index"] == [0, *ends[:-1]]
    i = 0
    for ep in store:
        for t in range(len(ep)):
            frame = theirs[i]
            np.testing.assert_array_equal(frame["observation.state"].numpy(), ep.obs["state"][t])
            np.testing.assert_array_equal(_lerobot_hwc(frame["observation.images.front"]), ep.obs["image.front"][t])
            np.testing.assert_array_equal(frame["action"].numpy(), ep.action[t])
            assert float(frame["next.reward"]) == pytest.approx(float(ep.reward[t]))
            assert bool(frame["next.done"]) == bool(ep.terminated[t] or ep.truncated[t])
            assert bool(frame["next.truncated"]) == bool(ep.truncated[t])
            assert bool(frame["next.success"]) == bool(ep.success[t])
            assert bool(frame["complementary_info.is_intervention"]) == bool(ep.intervened[t])
            assert frame["task"] == "fake"
            i += 1
    # And back: our reader returns the same episodes (only the final observation is not representable).
    for a, b in zip(store, LeRobotReader(tmp_path / "lr")):
        for k in a.obs:
            np.testing.assert_array_equal(a.obs[k], b.obs[k])
        for f in ("action", "reward", "terminated", "truncated", "intervened", "success"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        assert b.final_obs is None
    assert main(["data", "verify", str(tmp_path / "lr")]) == 0


def _torchcodec_works() -> bool:
    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401
    except Exception:  # ImportError, or RuntimeError when FFmpeg's shared libraries are missing
        return False
    return True


def test_video_features_round_trip(tmp_path):
    store, _ = _record(tmp_path / "rec", episodes=3)
    assert main(["data", "export", str(tmp_path / "rec"), str(tmp_path / "lr"), "--video"]) == 0
    reader = LeRobotReader(tmp_path / "lr")
    assert reader.video_keys == ["observation.images.front"]
    ours = list(reader)
    for a, b in zip(store, ours):
        np.testing.assert_array_equal(a.obs["state"], b.obs["state"])
        err = np.abs(a.obs["image.front"].astype(int) - b.obs["image.front"].astype(int))
        assert err.mean() < 4 and b.obs["image.front"].shape == a.obs["image.front"].shape  # AV1 is lossy
    if not _torchcodec_works():
        pytest.skip("torchcodec or FFmpeg's shared libraries missing (apt-get install libavdevice59): LeRobot's "
                    "own video loader cannot run here (docs/datasets.md)")
    theirs = LeRobotDataset("local/robot_rl", root=tmp_path / "lr")
    flat = np.concatenate([e.obs["image.front"] for e in ours])
    for i in range(len(theirs)):
        diff = np.abs(_lerobot_hwc(theirs[i]["observation.images.front"]).astype(int) - flat[i].astype(int))
        assert diff.max() <= 2  # the same mp4 frames, through two decoders' colour conversions


def test_record_straight_into_lerobot(tmp_path, capsys):
    run = _run_dir(tmp_path)
    out = tmp_path / "lr"
    assert main(["data", "record", str(run), "--out", str(out), "--format", "lerobot", "--episodes", "3",
                 "--num-envs", "2", "--fps", "25"]) == 0
    assert "recorded 3 episodes" in capsys.readouterr().out
    theirs = LeRobotDataset("local/robot_rl", root=out)
    assert theirs.num_episodes == 3 and theirs.fps == 25 and theirs.meta.robot_type == "fake"  # the task names it
    assert sum(int(theirs[i]["next.done"]) for i in range(len(theirs))) == 3
    # Exporting onto an existing dataset is refused rather than mixed in.
    assert main(["data", "record", str(run), "--out", str(out), "--format", "lerobot", "--episodes", "1"]) == 2
    assert "not empty" in capsys.readouterr().err


def _assert_items_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def test_native_files_load_like_the_ones_lerobot_writes(tmp_path):
    """The same episodes through our writer and through LeRobot's: the same items, metadata and stats."""
    store, _ = _record(tmp_path / "rec", episodes=3)
    episodes = list(store)
    for backend in ("native", "lerobot"):
        write_lerobot(episodes, store.spec, tmp_path / backend, 10, repo_id="test/same", robot_type="so101_follower",
                      backend=backend)
    ours, theirs = (LeRobotDataset("test/same", root=tmp_path / b) for b in ("native", "lerobot"))
    assert ours.meta.info == theirs.meta.info
    assert ours.meta.tasks.equals(theirs.meta.tasks)
    assert ours.meta.episodes.to_dict() == theirs.meta.episodes.to_dict()
    assert len(ours) == len(theirs) == store.total_frames
    for i in range(len(theirs)):
        _assert_items_equal(ours[i], theirs[i])
    assert ours.meta.stats.keys() == theirs.meta.stats.keys()
    for key, st in theirs.meta.stats.items():
        assert {s: v.shape for s, v in ours.meta.stats[key].items()} == {s: v.shape for s, v in st.items()}, key
        np.testing.assert_array_equal(ours.meta.stats[key]["count"], st["count"])
        np.testing.assert_allclose(ours.meta.stats[key]["mean"], st["mean"], rtol=1e-5, atol=1e-6, err_msg=key)
        if "images" not in key:  # LeRobot 0.4.4's image std is wrong (uint8 squared); its quantiles are histograms
            for s in ("min", "max"):
                np.testing.assert_array_equal(ours.meta.stats[key][s], st[s], err_msg=f"{key} {s}")
            np.testing.assert_allclose(ours.meta.stats[key]["std"], st["std"], rtol=1e-4, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("camera", ["image", "video"])
def test_lerobot_loads_rolled_over_files_and_2d_actions(tmp_path, camera):
    if camera == "video" and not _torchcodec_works():
        pytest.skip("torchcodec or FFmpeg's shared libraries missing (apt-get install libavdevice59)")
    features = {"observation.images.cam": {"dtype": camera, "shape": (16, 16, 3),
                                           "names": ["height", "width", "channels"]},
                "action": {"dtype": "float32", "shape": (2, 3), "names": None},
                "next.done": {"dtype": "bool", "shape": (1,), "names": None}}
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 200, 16, dtype=np.uint8)[None, :, None]
    written = []
    with LeRobotV3Writer(tmp_path / "lr", features, 15, robot_type="x", chunks_size=2, data_files_size_in_mb=0.002,
                         video_files_size_in_mb=0.0001) as writer:
        for n in (30, 31, 32, 33):
            cols = {"observation.images.cam": np.stack([np.broadcast_to(ramp + t, (16, 16, 3)) for t in range(n)]),
                    "action": rng.standard_normal((n, 2, 3)).astype(np.float32), "next.done": np.arange(n) == n - 1}
            writer.add_episode(cols, f"task {n % 2}")
            written.append(cols)
    theirs = LeRobotDataset("test/rolled", root=tmp_path / "lr")
    key = "data" if camera == "image" else "videos/observation.images.cam"
    assert len(set(theirs.meta.episodes[f"{key}/file_index"])) > 1  # more than one file was written
    i = 0
    for e, cols in enumerate(written):
        for t in range(len(cols["action"])):
            item = theirs[i]
            assert int(item["episode_index"]) == e and item["task"] == f"task {len(cols['action']) % 2}"
            np.testing.assert_array_equal(item["action"].numpy(), cols["action"][t])
            assert bool(item["next.done"]) == bool(cols["next.done"][t])
            diff = np.abs(_lerobot_hwc(item["observation.images.cam"]).astype(int) - cols["observation.images.cam"][t])
            assert diff.max() <= (0 if camera == "image" else 12)  # AV1 is lossy
            i += 1
    assert i == len(theirs)
