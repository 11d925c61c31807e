"""Fakes shipped with the package for tests and examples (library code never imports ``tests/``)."""

from robot_rl.testing.fake_env import FakeVecEnv

__all__ = ["FakeVecEnv"]
