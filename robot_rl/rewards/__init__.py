"""Rewards for the real world: success classifiers, process reward models, composition, relabelling.

- :mod:`~robot_rl.rewards.classifier`: a calibrated binary success classifier (HIL-SERL style);
- :mod:`~robot_rl.rewards.prm`: a process reward model (VLAC style): progress between two frames;
- :mod:`~robot_rl.rewards.wrapper`: batched classifier/PRM rewards inside any VecEnv's step;
- :mod:`~robot_rl.rewards.composer`: sparse + potential shaping + human keys + penalties, relabelling;
- :mod:`~robot_rl.rewards.service`: a classifier or PRM served in batches over ZeroMQ, so actors never wait.

See docs/rewards.md.
"""
