"""What `robot-rl data inspect|verify|import|export` do, as functions over paths.

A *path* is one of: an episode store (:mod:`robot_rl.data.store`), a LeRobotDataset v3 directory,
or a run directory (``config.yaml`` + ``checkpoints/``; its episode stores and LeRobot datasets one
level down, e.g. ``runs/x/demos/``, are listed and checked too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.data.lerobot_io import LeRobotReader, is_lerobot_dataset
from robot_rl.data.store import EpisodeStore, StoreError, is_store


def kind_of(path: Path) -> str:
    """``"episodes"``, ``"lerobot"`` or ``"run"``; ``FileNotFoundError`` for anything else."""
    if is_store(path):
        return "episodes"
    if is_lerobot_dataset(path):
        return "lerobot"
    if (path / "config.yaml").is_file():
        return "run"
    raise FileNotFoundError(f"{path} is not an episode store, a LeRobotDataset v3 or a run directory")


def _datasets_under(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if p.is_dir() and (is_store(p) or is_lerobot_dataset(p)))


def _spec_lines(spec: EnvSpec) -> list[str]:
    lines = [f"  {k:<24} {s.dtype}{list(s.shape)}" for k, s in spec.observation.items()]
    return [*lines, f"  {'action':<24} {spec.action.dtype}{list(spec.action.shape)}"
            + (f" in [{spec.action.low}, {spec.action.high}]" if spec.action.low is not None else "")]


def inspect_path(path: Path | str) -> str:
    """A human-readable summary: kind, features, episodes, frames, fps (and more per kind)."""
    path = Path(path)
    kind = kind_of(path)
    if kind == "episodes":
        s = EpisodeStore(path)
        succ = sum(e.success for e in s.entries)
        lines = [f"{path}: episode store (robot_rl.episodes v{s.meta.get('version')})",
                 f"episodes: {len(s)}  frames: {s.total_frames}  fps: {s.fps or 'unknown'}  task: {s.task or '-'}",
                 f"success: {succ}/{len(s)}  intervened frames: {sum(e.intervened for e in s.entries)}",
                 "features:", *_spec_lines(s.spec)]
        if s.meta.get("source"):
            lines.append(f"source: {json.dumps(s.meta['source'])}")
        if s.orphans or s.torn_lines:
            lines.append(f"uncommitted leftovers: {len(s.orphans)} orphan file(s), {s.torn_lines} torn index line(s)")
        return "\n".join(lines)
    if kind == "lerobot":
        r = LeRobotReader(path)
        feats = [f"  {k:<40} {v['dtype']}{list(v['shape'])}" for k, v in r.features.items()]
        return "\n".join([
            f"{path}: LeRobotDataset {r.info.get('codebase_version')} (robot_type {r.info.get('robot_type')})",
            f"episodes: {r.num_episodes}  frames: {r.num_frames}  fps: {r.fps:g}",
            "LeRobot features:", *feats, "as robot_rl spec:", *_spec_lines(r.spec)])
    from robot_rl.checkpoint import list_checkpoints

    lines = [f"{path}: run directory"]
    cfg = (path / "config.yaml").read_text()
    import yaml

    tree = yaml.safe_load(cfg) or {}
    lines.append(f"task: {(tree.get('task') or {}).get('type')}  algo: {(tree.get('algo') or {}).get('type')}")
    if (path / "spec.yaml").is_file():
        lines += ["features:", *_spec_lines(EnvSpec.from_dict(yaml.safe_load((path / "spec.yaml").read_text())))]
    ckpts = list_checkpoints(path)
    lines.append(f"checkpoints: {len(ckpts)}" + (f" (newest {ckpts[-1].name})" if ckpts else ""))
    for sub in _datasets_under(path):
        lines += ["", inspect_path(sub)]
    return "\n".join(lines)


@dataclass
class VerifyReport:
    """Outcome of :func:`verify_path`: ``problems`` make it fail; ``notes`` are informational."""

    path: Path
    kind: str
    episodes: int = 0
    frames: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problems found."""
        return not self.problems

    def text(self) -> str:
        """Multi-line report."""
        head = (f"{self.path} ({self.kind}): {self.episodes} episodes, {self.frames} frames checked: "
                + ("OK" if self.ok else f"{len(self.problems)} problem(s)"))
        return "\n".join([head, *[f"  problem: {p}" for p in self.problems], *[f"  note: {n}" for n in self.notes]])


def verify_path(path: Path | str) -> list[VerifyReport]:
    """Check every episode: checksums (stores), frame counts against the metadata, shapes, NaN/inf."""
    path = Path(path)
    kind = kind_of(path)
    if kind == "episodes":
        return [_verify_store(path)]
    if kind == "lerobot":
        return [_verify_lerobot(path)]
    rep = VerifyReport(path, "run")
    from robot_rl.checkpoint import load_latest

    try:
        _state, _meta, ckpt = load_latest(path)
        rep.notes.append(f"newest verifiable checkpoint: {ckpt.name}")
    except Exception as e:
        rep.problems.append(f"checkpoints: {e}")
    return [rep, *[r for sub in _datasets_under(path) for r in verify_path(sub)]]


def _verify_store(path: Path) -> VerifyReport:
    rep = VerifyReport(path, "episodes")
    try:
        store = EpisodeStore(path)
    except (StoreError, KeyError, ValueError) as e:
        rep.problems.append(str(e))
        return rep
    if store.torn_lines:
        rep.notes.append(f"{store.torn_lines} torn index line(s) at the end (an interrupted append; ignored)")
    if store.orphans:
        rep.notes.append(f"orphan episode file(s) never committed (ignored): {', '.join(store.orphans[:5])}")
    for i, entry in enumerate(store.entries):
        try:
            ep = store.read(i, verify=True)
            ep.validate(store.spec)
        except Exception as e:
            rep.problems.append(f"{entry.file}: {e}")
            continue
        bad = ep.nonfinite_steps()
        if bad:
            rep.problems.append(f"{entry.file}: {bad} step(s) with NaN/inf")
        if int(ep.intervened.sum()) != entry.intervened or ep.is_success != entry.success:
            rep.problems.append(f"{entry.file}: intervened/success differ from the index line")
        rep.episodes += 1
        rep.frames += len(ep)
    return rep


def _verify_lerobot(path: Path) -> VerifyReport:
    rep = VerifyReport(path, "lerobot")
    try:
        reader = LeRobotReader(path)
        table = reader.episode_table()
    except Exception as e:
        rep.problems.append(str(e))
        return rep
    lengths = {int(r["episode_index"]): int(r["length"]) for r in table}
    if len(lengths) != reader.num_episodes:
        rep.problems.append(f"meta/episodes lists {len(lengths)} episodes, info.json says {reader.num_episodes}")
    if sum(lengths.values()) != reader.num_frames:
        rep.problems.append(f"episode lengths sum to {sum(lengths.values())}, info.json says {reader.num_frames}")
    try:
        for ep in reader:
            idx = int(ep.meta["lerobot_episode_index"])
            if len(ep) != lengths.get(idx):
                rep.problems.append(f"episode {idx}: {len(ep)} frames in data/, meta/episodes says {lengths.get(idx)}")
            bad = ep.nonfinite_steps()
            if bad:
                rep.problems.append(f"episode {idx}: {bad} frame(s) with NaN/inf")
            rep.episodes += 1
            rep.frames += len(ep)
    except Exception as e:
        rep.problems.append(f"reading episodes: {e}")
    if rep.episodes != len(lengths):
        rep.problems.append(f"data/ holds {rep.episodes} episodes, meta/episodes {len(lengths)}")
    return rep


def import_lerobot(src: Path | str, out: Path | str) -> EpisodeStore:
    """Convert the LeRobotDataset v3 at ``src`` into a new episode store at ``out`` (demos for training)."""
    reader = LeRobotReader(src)
    store = EpisodeStore.create(out, reader.spec, fps=reader.fps,
                                source={"lerobot": str(Path(src).resolve()), "repo_id": reader.info.get("repo_id")})
    for ep in reader:
        store.append(ep)
    return store


def export_lerobot(src: Path | str, out: Path | str, repo_id: str = "local/robot_rl", task: str = "",
                   use_videos: bool = False, fps: float | None = None,
                   robot_type: str | None = None) -> tuple[int, int]:
    """Write the episode store at ``src`` (or the single one inside a run directory) as a LeRobotDataset v3.

    ``robot_type`` defaults to the one the store's ``source`` records (``robot_type``, else ``robot``).
    """
    from robot_rl.data.lerobot_io import write_lerobot

    src = Path(src)
    if kind_of(src) == "run":
        stores = [p for p in _datasets_under(src) if is_store(p)]
        if len(stores) != 1:
            raise FileNotFoundError(f"{src} holds {len(stores)} episode stores; name one of them: "
                                    f"{', '.join(map(str, stores)) or '(none: record with robot-rl data record)'}")
        src = stores[0]
    if not is_store(src):
        raise FileNotFoundError(f"{src} is not an episode store (record one with `robot-rl data record`)")
    store = EpisodeStore(src)
    rate = fps or store.fps
    if not rate:
        raise ConfigError(f"{src} does not record its fps; pass --fps")
    source = store.meta.get("source") or {}
    # `robot-rl record` stores the robot's LeRobot type (or at least its --robot name), `data record` the task.
    robot_type = robot_type or source.get("robot_type") or source.get("robot")
    return write_lerobot(iter(store), store.spec, out, rate, repo_id=repo_id, task=task or store.task,
                         use_videos=use_videos, robot_type=robot_type)

