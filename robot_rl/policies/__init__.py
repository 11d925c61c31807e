"""Learners (SAC, PPO, …) and the policies actors run.

The built-in algorithms register themselves in ``robot_rl.core.config.ALGOS`` when their modules are
imported; the `robot_rl.algorithms` entry points (pyproject.toml) name them.
"""
