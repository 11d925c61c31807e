"""Learners (SAC, PPO, …) and the policies actors run.

The built-in algorithms register themselves in ``robot_rl.config.ALGOS`` when their modules are
imported; :func:`robot_rl.config.ensure_registered` does that.
"""
