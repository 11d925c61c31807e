"""Capabilities are declared, not probed (issue 51 item 4).

Code in robot_rl/ asks whether an object can do something with ``isinstance`` on a runtime-checkable Protocol
(``CriticPublisher``, ``NamedBufferStorage``, ``Observable``, ``PoseAware``, ...), never with
``getattr(obj, "name", default)`` or ``hasattr(obj, "name")``. An AST scan finds every getattr/hasattr whose name
argument is a string literal; only the adapters to third-party libraries and the OS may do it, each entry below with
the reason. A name built at run time (``getattr(cfg, f.name)`` over a dataclass's fields) is not a probe.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1] / "robot_rl"

# (module, attribute) -> why a probe is right there: the object belongs to a library whose versions differ.
ALLOWED: dict[tuple[str, str], str] = {
    ("data/lerobot_video.py", "sched_getscheduler"): "os: the call exists on Linux only",
    ("hardware/realtime.py", "sched_setscheduler"): "os: the call exists on Linux only",
    ("hardware/realtime.py", "SCHED_RESET_ON_FORK"): "os: the flag exists on Linux only",
    ("hardware/camera.py", "set"): "OpenCV: a cv2.VideoCapture can rewind a looped file; an image list cannot",
    ("hardware/lerobot_arm.py", "bus"): "lerobot: only its motor-bus robots have a bus",
    ("hardware/lerobot_robot.py", "bus"): "lerobot: only its motor-bus robots have a bus",
    ("hardware/lerobot_robot.py", "config_class"): "lerobot: finding the Robot class of a config class",
    ("hardware/lerobot_robot.py", "__abstractmethods__"): "lerobot: skipping its abstract Robot classes",
    ("hardware/xarm.py", "error_code"): "xArm SDK: older versions lack the attribute",
    ("human_loop/devices/gamepad.py", "JOYDEVICEREMOVED"): "pygame: the event exists from pygame 2 on",
    ("policies/flow/lerobot_flow_ppo.py", "adapt_to_pi_aloha"): "lerobot: a pi0 config field other policies lack",
    ("policies/flow/lerobot_flow_ppo.py", "use_cache"): "lerobot: a config field of some policy types only",
    ("rewards/vlm.py", "image_token"): "transformers: processors of some models name their image token",
    ("sims/maniskill.py", "control_mode"): "ManiSkill: env attributes differ between versions",
    ("sims/maniskill.py", "render_mode"): "gymnasium/ManiSkill: unwrapped envs may lack it",
    ("sims/maniskill.py", "_max_episode_steps"): "gymnasium: the TimeLimit wrapper's private limit",
    ("sims/maniskill.py", "env"): "gymnasium: walking its wrapper chain (each wrapper's .env)",
    ("sims/mujoco/render.py", "_gl_context"): "mujoco: the Renderer's private GL context, freed on close",
}


def literal_probes(path: Path, root: Path = ROOT) -> list[tuple[str, int, str]]:
    """``(module, line, attribute)`` of each getattr/hasattr in ``path`` whose name is a string literal."""
    rel = path.relative_to(root).as_posix()
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            out.append((rel, node.lineno, node.args[1].value))
    return out


def test_no_capability_probe_outside_the_adapters() -> None:
    found = [p for path in sorted(ROOT.rglob("*.py")) for p in literal_probes(path)]
    bad = [f"robot_rl/{m}:{line}: {attr!r}" for m, line, attr in found if (m, attr) not in ALLOWED]
    assert not bad, ("declare the capability as a runtime_checkable Protocol and check it with isinstance (or add "
                     "an adapter to a third-party library to ALLOWED, with the reason):\n" + "\n".join(bad))
    stale = set(ALLOWED) - {(m, attr) for m, _, attr in found}
    assert not stale, f"ALLOWED entries no longer used: {sorted(stale)}"


def test_the_scan_sees_literal_names_only(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text('a = getattr(x, "critic_weights", None)\nb = hasattr(env, "_observe")\n'
                   'c = getattr(cfg, f.name)\nd = getattr(self, name)\n')
    assert [(line, attr) for _, line, attr in literal_probes(src, tmp_path)] == \
        [(1, "critic_weights"), (2, "_observe")]
