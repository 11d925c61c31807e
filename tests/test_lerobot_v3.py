"""The native LeRobotDataset v3 writer without LeRobot: files, metadata and stats, read back by our reader.

tests/test_lerobot_io.py checks the same files against LeRobot's own loader where lerobot is installed.
"""

import json
import os

import numpy as np
import pytest

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("PIL")

from test_data_cli import _record  # noqa: E402 - tests/ is on sys.path under pytest

import robot_rl.testing  # noqa: E402, F401 - registers the "fake" task
from robot_rl.cli import main  # noqa: E402
from robot_rl.data.lerobot_io import LeRobotReader  # noqa: E402
from robot_rl.data.lerobot_v3 import BOOKKEEPING, LeRobotV3Writer  # noqa: E402
from robot_rl.data.store import EpisodeStore  # noqa: E402

FIELDS = ("action", "reward", "terminated", "truncated", "intervened", "success")


def _episodes_table(root):
    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def test_export_reads_back_byte_for_byte_with_info_and_stats(tmp_path, capsys):
    store, _ = _record(tmp_path / "rec", episodes=4)
    out = tmp_path / "lr"
    assert main(["data", "export", str(tmp_path / "rec"), str(out), "--robot-type", "so101_follower"]) == 0
    assert "robot_type 'so101_follower'" in capsys.readouterr().out
    ours = list(store)
    back = list(LeRobotReader(out))
    assert len(back) == 4
    for a, b in zip(ours, back):
        for k in a.obs:
            assert b.obs[k].dtype == a.obs[k].dtype and b.obs[k].tobytes() == a.obs[k].tobytes()
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        assert b.task == "fake"

    info = json.loads((out / "meta" / "info.json").read_text())
    n = store.total_frames
    assert info["codebase_version"] == "v3.0" and info["robot_type"] == "so101_follower" and info["fps"] == 10
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (4, n, 1)
    assert info["splits"] == {"train": "0:4"} and info["video_path"] is None and info["chunks_size"] == 1000
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert list(info["features"])[-5:] == list(BOOKKEEPING)
    assert info["features"]["observation.images.front"] == {
        "dtype": "image", "shape": [16, 16, 3], "names": ["height", "width", "channels"]}

    frames = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    assert frames["index"] == list(range(n))
    np.testing.assert_array_equal(np.asarray(frames["timestamp"], np.float32),
                                  (np.asarray(frames["frame_index"]) / 10).astype(np.float32))

    rows = _episodes_table(out)
    assert [r["dataset_from_index"] for r in rows] == [0, *np.cumsum([len(e) for e in ours])[:-1]]
    assert [r["length"] for r in rows] == [len(e) for e in ours] and rows[0]["tasks"] == ["fake"]
    np.testing.assert_allclose(rows[1]["stats/action/mean"], ours[1].action.mean(0), rtol=1e-6)
    assert rows[1]["stats/next.done/max"] == [True] and rows[1]["stats/observation.state/count"] == [len(ours[1])]

    stats = json.loads((out / "meta" / "stats.json").read_text())
    state = np.concatenate([e.obs["state"] for e in ours]).astype(np.float64)
    st = stats["observation.state"]
    assert st["count"] == [n]
    np.testing.assert_allclose(st["mean"], state.mean(0), rtol=1e-9)
    np.testing.assert_allclose(st["std"], state.std(0), rtol=1e-9)
    np.testing.assert_array_equal(st["min"], state.min(0))
    np.testing.assert_array_equal(st["max"], state.max(0))
    img = np.concatenate([e.obs["image.front"] for e in ours]).reshape(-1, 3) / 255.0
    im = stats["observation.images.front"]
    assert np.shape(im["mean"]) == (3, 1, 1) and 0 <= np.min(im["q01"]) <= np.max(im["q99"]) <= 1
    np.testing.assert_allclose(np.ravel(im["mean"]), img.mean(0), rtol=1e-9)
    np.testing.assert_allclose(np.ravel(im["std"]), img.std(0), rtol=1e-9)  # LeRobot 0.4.4 writes 0 here
    done = np.concatenate([e.terminated | e.truncated for e in ours])
    assert stats["next.done"]["mean"] == pytest.approx([done.mean()])


def test_robot_type_comes_from_the_store_when_not_given(tmp_path, capsys):
    store, _ = _record(tmp_path / "rec", episodes=2)
    for name, source in (("typed", {"robot": "lerobot", "robot_type": "koch_follower"}), ("bare", {})):
        copy = EpisodeStore.create(tmp_path / name, store.spec, fps=10, task="fake", source=source)
        for ep in store:
            copy.append(ep)
        assert main(["data", "export", str(tmp_path / name), str(tmp_path / f"{name}_lr")]) == 0
    assert json.loads((tmp_path / "typed_lr" / "meta" / "info.json").read_text())["robot_type"] == "koch_follower"
    assert json.loads((tmp_path / "bare_lr" / "meta" / "info.json").read_text())["robot_type"] is None
    assert "robot_type unknown" in capsys.readouterr().out


def _columns(rng, n, camera="image"):
    return {"observation.state": rng.standard_normal((n, 3)).astype(np.float32),
            f"observation.images.{camera}": rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8),
            "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            "next.reward": rng.standard_normal((n, 1)).astype(np.float32)}


def _features(dtype):
    return {"observation.state": {"dtype": "float32", "shape": (3,), "names": None},
            f"observation.images.{dtype}": {"dtype": dtype, "shape": (16, 16, 3),
                                            "names": ["height", "width", "channels"]},
            "action": {"dtype": "float32", "shape": (2,), "names": None},
            "next.reward": {"dtype": "float32", "shape": (1,), "names": None}}


def test_files_roll_over_by_size_and_chunk(tmp_path):
    rng = np.random.default_rng(0)
    written = [_columns(rng, n) for n in (5, 6, 7, 8, 9)]
    with LeRobotV3Writer(tmp_path / "lr", _features("image"), 10, robot_type="x", chunks_size=2,
                         data_files_size_in_mb=0.004) as writer:
        for i, cols in enumerate(written):
            writer.add_episode(cols, f"task {i % 2}")
    files = sorted(p.relative_to(tmp_path / "lr").as_posix() for p in (tmp_path / "lr" / "data").rglob("*.parquet"))
    assert len(files) > 2 and "data/chunk-001/file-000.parquet" in files  # two files per chunk
    rows = _episodes_table(tmp_path / "lr")
    assert len({(r["data/chunk_index"], r["data/file_index"]) for r in rows}) == len(files)
    back = list(LeRobotReader(tmp_path / "lr"))
    assert [e.task for e in back] == ["task 0", "task 1"] * 2 + ["task 0"]
    for cols, ep in zip(written, back):
        np.testing.assert_array_equal(ep.obs["image.image"], cols["observation.images.image"])
        np.testing.assert_array_equal(ep.obs["state"], cols["observation.state"])
        np.testing.assert_array_equal(ep.action, cols["action"])
        np.testing.assert_array_equal(ep.reward, cols["next.reward"][:, 0])


def test_video_files_decode_and_roll_over(tmp_path):
    pytest.importorskip("av")
    scheduling = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    rng = np.random.default_rng(1)
    # Smooth frames: AV1 at CRF 30 keeps them close, unlike noise.
    ramp = np.linspace(0, 200, 16, dtype=np.uint8)[None, :, None]
    written = []
    for n in (30, 31, 32):  # SVT-AV1 holds ~25 frames back: the size limit sees bytes muxed so far
        cols = _columns(rng, n, camera="video")
        cols["observation.images.video"] = np.stack(
            [np.broadcast_to(ramp + t, (16, 16, 3)) for t in range(n)]).astype(np.uint8)
        written.append(cols)
    with LeRobotV3Writer(tmp_path / "lr", _features("video"), 10, video_files_size_in_mb=0.0001) as writer:
        for cols in written:
            writer.add_episode(cols, "t")
    info = json.loads((tmp_path / "lr" / "meta" / "info.json").read_text())
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    vinfo = info["features"]["observation.images.video"]["info"]
    assert (vinfo["video.codec"], vinfo["video.pix_fmt"], vinfo["video.fps"]) == ("av1", "yuv420p", 10)
    rows = _episodes_table(tmp_path / "lr")
    key = "videos/observation.images.video"
    assert len({r[f"{key}/file_index"] for r in rows}) > 1  # the tiny size limit started new files
    for r in rows:
        assert r[f"{key}/to_timestamp"] - r[f"{key}/from_timestamp"] == pytest.approx(r["length"] / 10)
    for cols, ep in zip(written, LeRobotReader(tmp_path / "lr")):
        err = np.abs(ep.obs["image.video"].astype(int) - cols["observation.images.video"].astype(int))
        assert err.mean() < 3
    # SVT-AV1 run by root leaves its calling thread on SCHED_FIFO 99; the writer gives the policy back.
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == scheduling


def test_writer_refuses_bad_input(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(FileExistsError):
        LeRobotV3Writer(tmp_path / "full", _features("image"), 10)
    with pytest.raises(ValueError, match="whole-number fps"):
        LeRobotV3Writer(tmp_path / "a", _features("image"), 12.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="may not contain"):
        LeRobotV3Writer(tmp_path / "b", {"a/b": {"dtype": "float32", "shape": (1,), "names": None}}, 10)
    writer = LeRobotV3Writer(tmp_path / "c", _features("image"), 10)
    cols = _columns(np.random.default_rng(0), 4)
    cols["action"] = cols["action"][:, :1]
    with pytest.raises(ValueError, match="does not match"):
        writer.add_episode(cols, "t")


def test_image_stats_from_histograms_equal_numpy():
    from robot_rl.data.lerobot_stats import image_stats, numeric_stats

    rng = np.random.default_rng(3)
    for frames in (rng.integers(0, 256, (7, 5, 4, 3), dtype=np.uint8),
                   rng.integers(0, 3, (1, 2, 2, 1), dtype=np.uint8)):
        got = image_stats(frames)
        flat = frames.reshape(-1, frames.shape[-1]) / 255.0
        want = {"min": flat.min(0), "max": flat.max(0), "mean": flat.mean(0), "std": flat.std(0)}
        want.update(zip(("q01", "q10", "q50", "q90", "q99"), np.quantile(flat, [0.01, 0.1, 0.5, 0.9, 0.99], axis=0)))
        for k, v in want.items():
            np.testing.assert_allclose(got[k].ravel(), v, rtol=1e-12, atol=1e-12, err_msg=k)
        assert got["count"].tolist() == [len(frames)]
    done = numeric_stats(np.array([[False], [True], [False]]))
    assert done["min"].dtype == bool and done["mean"].tolist() == [1 / 3] and done["count"].tolist() == [3]
