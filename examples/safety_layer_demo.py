"""The safety layer between a misbehaving policy, a scripted human and an xArm (its SDK faked).

Runs a 20 Hz control loop for 4 seconds: the "policy" pushes the arm out through the +x face of the
workspace and now and then emits NaN or 1e9; a scripted operator takes over for a while; then the policy
stops sending and the watchdog holds the arm. Prints every counter and the loop's timing.

    python examples/safety_layer_demo.py
"""

import logging
import time

import numpy as np

from robot_rl.hardware.rate import RateLoop
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.xarm import XArmRobot, XArmRobotConfig
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.intervention import InterventionController
from robot_rl.testing.fake_xarm import FakeXArmAPI

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def policy(step: int) -> np.ndarray:
    if step % 17 == 5:
        return np.array([np.nan, 0, 0, 0, 0, 0, 1.0])
    if step % 23 == 7:
        return np.array([1e9, 0, 0, 0, 0, 0, 1.0])
    return np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])  # always +x: straight at the workspace face


def operator(step: int) -> TeleopReading:  # takes over between steps 40 and 55, pulling back and down
    return TeleopReading(0.0, delta=[-1.0, 0, -0.5, 0, 0, 0], engage=40 <= step < 55)


def main() -> None:
    robot = XArmRobot(XArmRobotConfig(), sdk=FakeXArmAPI)
    cfg = SafetyConfig(workspace_low=[0.2, -0.3, 0.1], workspace_high=[0.45, 0.3, 0.5], watchdog_timeout_s=0.15)
    device = ScriptedDevice(operator)
    with SafetyLayer(robot, cfg) as layer, device:
        ctl = InterventionController(device)
        loop = RateLoop(20.0, max_ticks=70)
        for tick in loop:
            step = ctl.step(policy(tick))
            applied, info = layer.step(step.action)
            if tick % 10 == 0 or info["safety_events"]:
                x = robot.measure().ee_pose[0]
                print(f"t={tick:2d} {step.source:6s} x={x:.3f} m applied dx={applied[0]:+.2f} "
                      f"events={','.join(info['safety_events']) or '-'}")
        print("policy process 'hangs' (no commands) ...")
        time.sleep(0.3)
        print(f"watchdog: latched={layer.latched!r}, stop {layer.watchdog.last_trip_delay_s * 1e3:.0f} ms after "
              f"the last command (timeout {cfg.watchdog_timeout_s * 1e3:.0f} ms)")
        print("safety counters:", dict(layer.counts))
        print("interventions:", dict(ctl.counts), f"rate {ctl.episode.rate:.0%}")
        print("loop:", loop.stats().summary())


if __name__ == "__main__":
    main()
