"""Suite-wide settings."""

import ctypes.util
import importlib.util
import os
import sys

import pytest
import torch

# The test tiers: every test is `unit` unless marked `integration` or `slow`, and a unit test that starts a
# process, uses a socket, sleeps or runs long fails (tests/tiers.py, docs/testing.md).
pytest_plugins = ["tiers"]

# Where the environment sets PYTHONDONTWRITEBYTECODE (this machine's image does), pytest rewrites every test
# module's asserts again on each run (collection 23 s instead of 10 s here) and each `robot-rl` subprocess the
# tests start compiles the package from source again (about 0.3 s of its 2.5 s start). The caches go to
# __pycache__/ (git-ignored) and change no behaviour.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# MuJoCo must load its OpenGL (OSMesa) before anything else does: test_maniskill.py imports SAPIEN at
# collection, and once SAPIEN's stack has loaded first, OSMesa contexts fail (gladLoadGL error, or an
# abort inside Mesa). Users hit the same rule in one process (docs/sims-maniskill.md).
# Without libOSMesa (a fresh machine before `apt-get install libosmesa6`), MUJOCO_GL=osmesa would make
# `import mujoco` itself raise inside PyOpenGL and stop collection; then MuJoCo runs without a renderer
# (physics tests run) and the rendering tests skip naming the package (tests/needs.py).
if "MUJOCO_GL" not in os.environ and ctypes.util.find_library("OSMesa") is not None:
    os.environ["MUJOCO_GL"] = "osmesa"
elif os.environ.get("MUJOCO_GL") in ("osmesa", "egl") and ctypes.util.find_library(
        {"osmesa": "OSMesa", "egl": "EGL"}[os.environ["MUJOCO_GL"]]) is None:
    # Exported by the user (as the docs suggest) before its library is installed: the same as not set.
    del os.environ["MUJOCO_GL"]
    os.environ.pop("PYOPENGL_PLATFORM", None)
if os.environ.get("MUJOCO_GL") == "osmesa":
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
if importlib.util.find_spec("mujoco") is not None:
    # Where a CUDA torch brought triton (the LeRobot venv, which has MuJoCo for the arm kinematics), triton's
    # LLVM must load before OSMesa's: the other way round, torchvision's import of triton segfaults.
    if os.environ.get("MUJOCO_GL") == "osmesa" and importlib.util.find_spec("triton") is not None:
        import triton  # noqa: F401
    import mujoco  # noqa: F401


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with a slow test first, then files with an integration test, then the rest, each file's tests together.

    pytest-xdist (`-n`, pyproject.toml) hands out whole files as its workers free up; a file of minutes that came
    last in the alphabet would leave one worker running it alone at the end.
    """
    def rank(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("integration") else 2

    files: dict[object, int] = {}
    for item in items:
        files[item.path] = min(files.get(item.path, 2), rank(item))
    first = {path: i for i, path in enumerate(files)}
    items.sort(key=lambda item: (files[item.path], first[item.path]))


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # CI has 2 cores shared with other jobs; idle intra-op threads spin and slow tiny ops down 10-20x.
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.fixture(autouse=True)
def _no_real_time_left_behind():
    # A test that connects a SafetyLayer with real-time scheduling and never disconnects it leaves the suite's
    # thread on SCHED_FIFO: every later test then runs ahead of everything else on the machine (and starved a
    # benchmark's simulated arm for a second). Put the thread back, and fail the test that left it.
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    before = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    yield
    after = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    if after != before:
        os.sched_setscheduler(0, before[0], os.sched_param(before[1]))
        pytest.fail(f"the test left its thread on scheduling policy {after[0]} priority {after[1]} (was {before}): "
                    "disconnect the SafetyLayer it connected (`with SafetyLayer(...)`, or layer.close())")


@pytest.fixture(scope="session")
def smolvla_dir(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random SmolVLA for ``lang_reach`` (camera ``top`` 48x48, state 6, action 2, chunk 8), built once.

    The LeRobot tests (their own venv) load it as a user's checkpoint; a module may define its own ``smolvla_dir``.
    """
    from robot_rl.testing.tiny_smolvla import build_tiny_smolvla

    return build_tiny_smolvla(tmp_path_factory.mktemp("smolvla"), {"top": (48, 48)}, state_dim=6, action_dim=2,
                              chunk_size=8, words="reach the red green blue target".split())


@pytest.fixture(scope="session")
def gloo_rank_pair():
    """Two gloo rank processes for the session (one per pytest-xdist worker), spawned when a module first asks."""
    from gloo_ranks import RankPair

    pair = RankPair()
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def two_ranks(request: pytest.FixtureRequest) -> list:
    """What the requesting module's ``GLOO_RANKS`` function saved on each of two gloo ranks (tests/gloo_ranks.py)."""
    from gloo_ranks import shared_ranks

    return shared_ranks(request)
