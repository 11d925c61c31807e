import json
import os
from pathlib import Path

import pytest
import torch

from robot_rl import checkpoint
from robot_rl.checkpoint import CheckpointError, list_checkpoints, load_latest, save_checkpoint


def _state(v: float) -> dict:
    return {"w": torch.full((3,), v), "nested": {"step": int(v), "opt": [torch.ones(2) * v]}}


def test_round_trip_and_keep(tmp_path: Path):
    for step in range(1, 6):
        save_checkpoint(tmp_path, step, _state(step), {"note": step}, keep=3)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["step_000000000003", "step_000000000004", "step_000000000005"]
    state, meta, path = load_latest(tmp_path)
    assert torch.equal(state["w"], torch.full((3,), 5.0))
    assert state["nested"]["step"] == 5 and meta["note"] == 5 and path.name.endswith("5")
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))


def test_corrupt_latest_falls_back_to_previous(tmp_path: Path, caplog):
    save_checkpoint(tmp_path, 1, _state(1), {})
    p2 = save_checkpoint(tmp_path, 2, _state(2), {})
    blob = bytearray((p2 / "state.pt").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (p2 / "state.pt").write_bytes(bytes(blob))
    state, _, path = load_latest(tmp_path)
    assert path.name.endswith("1") and state["nested"]["step"] == 1
    assert "falling back" in caplog.text


def test_same_step_twice_replaces(tmp_path: Path):
    save_checkpoint(tmp_path, 7, _state(1), {})
    save_checkpoint(tmp_path, 7, _state(2), {})
    state, meta, _ = load_latest(tmp_path)
    assert state["nested"]["step"] == 2 and meta["step"] == 7


def test_interrupted_write_leaves_previous_intact(tmp_path: Path):
    save_checkpoint(tmp_path, 1, _state(1), {})
    # A crash mid-write leaves a temp dir behind; it is never mistaken for a checkpoint.
    junk = tmp_path / "checkpoints" / ".tmp-step_000000000002-999"
    junk.mkdir()
    (junk / "state.pt").write_bytes(b"partial")
    state, _, _ = load_latest(tmp_path)
    assert state["nested"]["step"] == 1


def test_no_checkpoint_is_a_clear_error(tmp_path: Path):
    with pytest.raises(CheckpointError, match="without --resume"):
        load_latest(tmp_path)


class Evil:
    """Any class: weights_only loading must refuse to construct it."""


def test_pickled_objects_are_refused(tmp_path: Path):
    p = save_checkpoint(tmp_path, 1, {"w": torch.zeros(1)}, {})
    torch.save({"obj": Evil()}, p / "state.pt")
    import hashlib

    meta = json.loads((p / "meta.json").read_text())
    meta["sha256"] = hashlib.sha256((p / "state.pt").read_bytes()).hexdigest()
    (p / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError):
        load_latest(tmp_path)


class _Killed(BaseException):
    """A SIGKILL at a crash point, in-process: nothing after it runs, no handler cleans up."""


def _kill_at(monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    def crash_point(name: str) -> None:
        if name == point:
            raise _Killed(name)

    monkeypatch.setattr(checkpoint, "crash_point", crash_point)


def test_a_kill_after_the_commit_but_before_the_pointer_moved_resumes_from_the_new_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_checkpoint(tmp_path, 1, _state(1), {})
    _kill_at(monkeypatch, "checkpoint.before_latest")
    with pytest.raises(_Killed):
        save_checkpoint(tmp_path, 2, _state(2), {})
    # Committed (renamed into place), while `latest` still names step 1: the resume takes step 2.
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000000000001"
    state, meta, path = load_latest(tmp_path)
    assert path.name == "step_000000000002" and meta["step"] == 2 and state["nested"]["step"] == 2


def test_a_kill_between_the_renames_of_a_same_step_save_keeps_the_committed_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_checkpoint(tmp_path, 1, _state(1), {})
    save_checkpoint(tmp_path, 2, _state(2), {})
    _kill_at(monkeypatch, "checkpoint.mid_swap")
    with pytest.raises(_Killed):
        save_checkpoint(tmp_path, 2, _state(3), {})
    # step 2's committed copy is moved aside and the new one not yet in its place: the copy is still step 2's.
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["step_000000000001", f".old-step_000000000002-{os.getpid()}"]
    state, meta, _ = load_latest(tmp_path)
    assert meta["step"] == 2 and state["nested"]["step"] == 2
    monkeypatch.undo()
    save_checkpoint(tmp_path, 3, _state(3), {})  # the next commit removes the copy moved aside
    assert not list((tmp_path / "checkpoints").glob(".old-*"))
    assert load_latest(tmp_path)[1]["step"] == 3
