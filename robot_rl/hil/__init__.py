"""The graded human-in-the-loop schedule of `robot-rl train` (``loop.hil``; VLAC's offline → return → human).

A training feature, apart from the deploy and record loops of :mod:`robot_rl.human_loop` (which build on the loop):
its torch-free config in :mod:`~robot_rl.hil.config` (so :mod:`robot_rl.loop.config` can hold it) and the machinery
that runs it in :mod:`~robot_rl.hil.schedule`. It imports only the core and the teleop contract and takeover of
:mod:`robot_rl.hardware`; this ``__init__`` imports nothing.
"""
