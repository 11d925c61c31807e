"""Datasets: recorded episodes, the append-only episode store, LeRobotDataset v3 import/export, demos.

Modules: :mod:`~robot_rl.data.episode` (the :class:`Episode` record, conversion to transitions),
:mod:`~robot_rl.data.store` (append-only checksummed store), :mod:`~robot_rl.data.recorder`
(record from an env loop or a run's policy), :mod:`~robot_rl.data.lerobot_io` (LeRobot v3),
:mod:`~robot_rl.data.demos` (demos into a replay buffer), :mod:`~robot_rl.data.tools` (the CLI verbs).
Nothing here imports LeRobot, pyarrow or PyAV until a LeRobot dataset is actually read or written, and
the package itself imports nothing, so `robot-rl --help` stays fast.
"""
