"""Humans in the loop: teleop devices, interventions, `robot-rl deploy`/`record`, HIL-SERL, the graded schedule.

The schedule that ``loop.hil`` switches on lives here too: its torch-free config in
:mod:`~robot_rl.human_loop.config` (so :mod:`robot_rl.loop.config` can hold it) and the machinery that
runs it in :mod:`~robot_rl.human_loop.schedule`. This ``__init__`` imports nothing, so importing the config
never pulls in the deploy loop or the learner.
"""
