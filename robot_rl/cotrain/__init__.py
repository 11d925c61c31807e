"""Sim–real co-training (RL-Co).

Stage 1: SFT on mixed real + sim demos; stage 2: RL in simulation anchored by a supervised loss on real
demonstrations (see docs/cotraining.md).

Switched on by the ``cotrain`` section of :class:`~robot_rl.loop.config.TrainConfig`
(:class:`~robot_rl.cotrain.config.CotrainConfig`). This package is imported by ``robot_rl.loop.config``,
so it must not import torch-heavy modules at package level: import the submodules directly.
"""
