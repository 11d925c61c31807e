"""Sim–real co-training (RL-Co).

Stage 1: SFT on mixed real + sim demos; stage 2: RL in simulation anchored by a supervised loss on real
demonstrations (see docs/cotraining.md).

Switched on by the ``cotrain`` section of a run config (:class:`~robot_rl.cotrain.config.CotrainConfig`), the
section of the ``cotrain`` extension (:mod:`robot_rl.cotrain.extension`, registered through the
``robot_rl.extensions`` entry points). Nothing is imported at package level: import the submodules directly.
"""
