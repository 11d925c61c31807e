"""robot_rl: reinforcement learning on real robots and in GPU-parallel simulators."""

__version__ = "0.1.0"
