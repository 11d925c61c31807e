"""Suite-wide settings."""

import importlib.util
import os

import pytest
import torch

# MuJoCo must load its OpenGL (OSMesa) before anything else does: test_maniskill.py imports SAPIEN at
# collection, and once SAPIEN's stack has loaded first, OSMesa contexts fail (gladLoadGL error, or an
# abort inside Mesa). Users hit the same rule in one process (docs/sims-maniskill.md).
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
if importlib.util.find_spec("mujoco") is not None:
    import mujoco  # noqa: F401


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # CI has 2 cores shared with other jobs; idle intra-op threads spin and slow tiny ops down 10-20x.
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)

