"""Move the SO-101's tool frame around a square through IK, and check every goal with FK.

Starts from LeRobot's zero pose (the middle of every joint range), solves IK once to reach the first corner,
then walks the square's edges in 5 mm Cartesian steps with ``ik_delta`` (what an ``ee_delta`` controller
calls each control period). For each edge it prints the worst FK error of the
joint goals (how far the tool frame would be from where it was sent) and the largest joint move per step.
Needs the kinematics extra: ``pip install 'robot-rl[kinematics]'``.

    python examples/so101_ik.py
"""

import itertools
import time

import numpy as np

from robot_rl.hardware.kinematics import ArmKinematics

kin = ArmKinematics("so101")
print(f"joints {', '.join(kin.joint_names)}; limits (deg) {np.round(kin.joint_limits()[0])} .. "
      f"{np.round(kin.joint_limits()[1])}; workspace box {kin.workspace[0]} .. {kin.workspace[1]} m")

centre, half = np.array([0.26, 0.0, 0.12]), 0.05
corners = centre + half * np.array([[1, 1, 0], [1, -1, 0], [-1, -1, 0], [-1, 1, 0], [1, 1, 0]])

q = np.zeros(5)  # degrees, as LeRobot's so101_follower reports them with use_degrees=True
start = kin.solve(q, corners[0])
q = start.q
print(f"to the first corner: error {start.position_error_m * 1000:.3f} mm after {start.iterations} iterations, "
      f"q = {np.round(q, 1)} deg")

step_m, t0, steps = 0.005, time.perf_counter(), 0
for a, b in itertools.pairwise(corners):
    worst_error, worst_move = 0.0, 0.0
    n = round(np.linalg.norm(b - a) / step_m)
    for i in range(1, n + 1):
        aim = a + (b - a) * i / n
        here, _ = kin.fk(q)
        result = kin.ik_delta(q, aim - here, max_iterations=10)
        worst_move = max(worst_move, float(np.abs(result.q - q).max()))
        q = result.q
        reached, _ = kin.fk(q)
        worst_error = max(worst_error, float(np.linalg.norm(reached - aim)))
        steps += 1
    print(f"edge {np.round(a, 3)} -> {np.round(b, 3)}: {n} steps, worst FK error {worst_error * 1000:.3f} mm, "
          f"largest joint move per step {worst_move:.2f} deg")
print(f"{steps} IK steps in {time.perf_counter() - t0:.2f} s ({(time.perf_counter() - t0) / steps * 1000:.2f} ms each)")
