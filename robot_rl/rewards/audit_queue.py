"""The audit's questions and answers on disk, so a person can answer them at their own pace (``audit.answers=queue``).

A run that audits its learned reward through the queue does not hold the robot for an answer: it pays the reward
as the classifier says, writes the question, and carries on; a person answers with `robot-rl reward audit RUN`
whenever they like, and the run reads the answers back (the classifier's head is retrained on them, and the
replay's rewards of the rejected steps are corrected: :mod:`robot_rl.human_loop.audit_relabel`). Layout of
``<run>/audit_queue/``::

    questions/<id>.json     one question: the episode and step, the suspicion, the camera frames' files, and the
                            step's next observation on its small keys (what finds the step's row in the replay)
    frames/<id>_<cam>.png   the frame the classifier fired on, per camera
    answers/<id>.json       the answer, ``{"id", "success": true|false, "by", "time"}``
    relabels.jsonl          what the learner is to correct in its replay, one JSON line per step (the actor writes
                            it; the learner reads it from where it last stopped)

Every question and answer file is written atomically (temp, fsync, rename): a reader never sees half of one, and a
person who stops answering half-way (Ctrl-C) keeps every answer given.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.durable import commit_file

QUEUE_DIR = "audit_queue"
RELABELS = "relabels.jsonl"


@dataclass
class Question:
    """One fire of the learned reward put to a person."""

    id: str
    episode: int
    step: int
    actor_id: int = 0
    suspicion: float = 0.0
    probability: float | None = None
    kind: str = "suspicious"
    """``suspicious`` (at or above the bar) or ``random`` (a sample of the unsuspicious fires)."""
    frames: dict[str, str] = field(default_factory=dict)
    """Camera → the frame's file, relative to the queue's directory."""
    key: dict[str, list[float]] = field(default_factory=dict)
    """The step's next observation on its small keys (the state): finds its row in the learner's replay."""
    paid: bool = True
    """The reward was paid while the question waited (a "no" takes it back)."""
    time: float = 0.0


@dataclass
class Answer:
    """A person's answer to one question."""

    id: str
    success: bool
    by: str = "person"
    time: float = 0.0


def question_id(actor_id: int, episode: int, step: int) -> str:
    """The id of the question about ``actor_id``'s ``episode`` at ``step`` (sorts in the order they were asked)."""
    return f"a{actor_id:02d}-e{episode:06d}-s{step:04d}"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    commit_file(path, [json.dumps(data).encode()])


def _save_png(path: Path, image: np.ndarray) -> None:
    from PIL import Image  # matplotlib's dependency: always there

    img = np.asarray(image)
    if img.dtype != np.uint8:  # a float frame in [0, 1]
        img = (np.clip(img, 0.0, 1.0) * 255).astype(np.uint8)
    if img.ndim == 3 and img.shape[0] in (1, 3) and img.shape[-1] not in (1, 3):  # channels first
        img = np.moveaxis(img, 0, -1)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    Image.fromarray(img[..., 0] if img.ndim == 3 and img.shape[-1] == 1 else img).save(tmp, format="PNG")
    os.replace(tmp, path)


class AuditQueue:
    """The questions and answers in ``directory`` (see the module docstring); created on first write."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._relabel_offset = 0

    @classmethod
    def of_run(cls, run: Path | str) -> AuditQueue:
        """The queue of the run directory ``run`` (or ``run`` itself when it is a queue directory)."""
        run = Path(run)
        return cls(run if (run / "questions").is_dir() or run.name == QUEUE_DIR else run / QUEUE_DIR)

    # ---- the run's side -------------------------------------------------------------------------

    def ask(self, question: Question, images: dict[str, np.ndarray]) -> Question:
        """Write the frames, then the question (a reader that sees the question finds its frames)."""
        (self.directory / "frames").mkdir(parents=True, exist_ok=True)
        (self.directory / "questions").mkdir(parents=True, exist_ok=True)
        for cam, img in images.items():
            name = f"frames/{question.id}_{cam}.png"
            _save_png(self.directory / name, img)
            question.frames[cam] = name
        question.time = question.time or round(time.time(), 3)
        _write_json(self.directory / "questions" / f"{question.id}.json", asdict(question))
        return question

    def add_relabels(self, records: list[dict[str, Any]]) -> None:
        """Append corrections for the learner's replay (``{"actor_id", "key", "success", "source", ...}``)."""
        if not records:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / RELABELS).open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records))
            f.flush()
            os.fsync(f.fileno())

    # ---- the learner's side ---------------------------------------------------------------------

    def new_relabels(self) -> list[dict[str, Any]]:
        """The corrections appended since the last call (a line still being written waits for the next)."""
        path = self.directory / RELABELS
        if not path.is_file():
            return []
        with path.open("rb") as f:
            f.seek(self._relabel_offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._relabel_offset += end
        return [json.loads(line) for line in data[:end].splitlines() if line.strip()]

    # ---- the person's side ----------------------------------------------------------------------

    def questions(self) -> list[Question]:
        """Every question asked so far, oldest first."""
        folder = self.directory / "questions"
        out = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            out.append(Question(**json.loads(path.read_text())))
        return out

    def answers(self) -> dict[str, Answer]:
        """Every answer given so far, by question id."""
        folder = self.directory / "answers"
        out = {}
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            a = Answer(**json.loads(path.read_text()))
            out[a.id] = a
        return out

    def pending(self) -> list[Question]:
        """The questions nobody has answered yet, oldest first."""
        done = self.answers()
        return [q for q in self.questions() if q.id not in done]

    def answer(self, question_id: str, success: bool, by: str = "person") -> Answer:
        """Record an answer (atomically: the run never reads half of one)."""
        (self.directory / "answers").mkdir(parents=True, exist_ok=True)
        a = Answer(question_id, bool(success), by, round(time.time(), 3))
        _write_json(self.directory / "answers" / f"{question_id}.json", asdict(a))
        return a
