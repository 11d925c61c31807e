"""The contracts every part of robot_rl depends on; this package imports nothing else from robot_rl.

- :mod:`~robot_rl.core.specs`: ``ArraySpec``, ``EnvSpec`` (shapes, dtypes, bounds; travel in handshakes);
- :mod:`~robot_rl.core.env`: ``VecEnv``, ``StepResult`` (batched envs, auto-reset semantics);
- :mod:`~robot_rl.core.transition`: ``TransitionBatch`` (what actors send and learners store);
- :mod:`~robot_rl.core.algorithm`: ``Policy``, ``Algorithm``, ``Storage`` and the optional capabilities
  as ``runtime_checkable`` Protocols;
- :mod:`~robot_rl.core.transport`: ``ActorEndpoint``, ``LearnerEndpoint``, ``VersionedWeights`` and the
  endpoints' optional capabilities;
- :mod:`~robot_rl.core.registry` and :mod:`~robot_rl.core.config`: name registries and the config bases of
  the component families.
"""
