"""Teleop devices and the intervention controller: takeover, toggle, a device freezing mid-intervention."""

import os
import time

import numpy as np
import pytest
from waiting import wait_until

from robot_rl.cli import main
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.keyboard import KeyboardDevice
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.devices.spacemouse import SpaceMouseDevice, parse_report
from robot_rl.human_loop.intervention import InterventionConfig, InterventionController

POLICY = np.array([0.2, 0.1, 0, 0, 0, 0, 1.0])


def human(engage_steps, delta=(0, 0, -0.5, 0, 0, 0), events=None):
    events = events or {}
    return lambda i: TeleopReading(0.0, delta=delta, engage=i in engage_steps, events=events.get(i, ()))


def test_hold_to_intervene_is_bumpless_and_counted():
    dev = ScriptedDevice(human(range(2, 5), events={3: ("success",)}))
    dev.connect()
    ctl = InterventionController(dev)
    out = [ctl.step(POLICY) for _ in range(7)]
    assert [o.source for o in out] == ["policy"] * 2 + ["human"] * 3 + ["policy"] * 2
    assert [o.intervened for o in out] == [False, False, True, True, True, False, False]
    assert np.allclose(out[2].action, [0, 0, -0.5, 0, 0, 0, 1.0])  # a delta: starts where the arm is, gripper kept
    assert out[3].events == ("success",)
    ep = ctl.reset_episode()
    assert ep.interventions == 1 and ep.lengths == [3] and ep.rate == pytest.approx(3 / 7)
    assert "HOLD" in ctl.mode_hint


def test_toggle_mode():
    events = {1: ("toggle",), 4: ("toggle",)}
    dev = ScriptedDevice(human(set(), events=events))
    dev.connect()
    ctl = InterventionController(dev, InterventionConfig(mode="toggle"))
    out = [ctl.step(POLICY).intervened for _ in range(6)]
    assert out == [False, True, True, True, False, False] and "PRESS" in ctl.mode_hint


@pytest.mark.integration
def test_device_freezing_mid_intervention_holds_until_released():
    dev = ScriptedDevice(human(range(0, 100)))
    dev.connect()
    ctl = InterventionController(dev, InterventionConfig(stale_after_s=0.2))
    assert ctl.step(POLICY).source == "human"
    dev.freeze()
    assert ctl.step(POLICY).source == "human"  # still fresh for a moment
    time.sleep(0.25)  # what is tested: the frozen device's last reading outlives stale_after_s
    for _ in range(3):  # stale: the arm holds; the policy does NOT take over
        step = ctl.step(POLICY)
        assert step.source == "hold" and not step.intervened and np.allclose(step.action[:6], 0)
        assert step.action[6] == 1.0  # gripper kept
    assert ctl.counts["teleop_lost"] == 1
    dev.unfreeze()
    dev.script = human(set())  # back, and released: hand back to the policy
    assert ctl.step(POLICY).source == "policy"


def test_unplugged_device_ends_the_intervention_safely():
    dev = ScriptedDevice(human(range(0, 100)))
    dev.connect()
    ctl = InterventionController(dev)
    ctl.step(POLICY)
    dev.unplug()
    assert ctl.step(POLICY).source == "hold" and ctl.counts["teleop_lost"] == 1
    dev.connect()  # plugged back in while still held down: the human continues
    assert ctl.step(POLICY).source == "human"


def test_relative_device_needs_ee_delta():
    with pytest.raises(ValueError, match="ee_delta"):
        InterventionController(ScriptedDevice(human(range(0, 3))), control_mode="joint")
    # A device that never acts (`--teleop scripted` in eval) fits every control mode.
    InterventionController(ScriptedDevice(), control_mode="joint_delta")


def test_keyboard_through_a_pipe():
    r, w = os.pipe()
    kb = KeyboardDevice(fd=r, hold_window_s=0.1)
    kb.connect()
    try:
        os.write(w, b"wwqoG")
        events: tuple[str, ...] = ()

        def gripper_read():
            nonlocal events
            r = kb.read()
            events += r.events
            return r if r.gripper is not None else None

        reading = wait_until(gripper_read, 5.0, "the reader to take the piped keys", seen=lambda: events)
        assert reading.engage and reading.delta[0] == 1.0 and reading.delta[5] == 1.0 and reading.gripper == 1.0
        assert events == ("success",)  # upper case counts too
        # No repeat arrives within the hold window (0.1 s): released.
        wait_until(lambda: not kb.read().engage, 5.0, "the keys to be released after the hold window")
        os.close(w)  # terminal gone: the reader stops, so the device is disconnected
        wait_until(lambda: not kb.is_connected, 5.0, "the keyboard to disconnect when its terminal closed")
    finally:
        kb.disconnect()
        os.close(r)


def test_keyboard_events_are_delivered_once():
    kb = KeyboardDevice(keys=None)
    for ch in "gbn t":
        kb.press(ch)
    assert kb.read().events == ("success", "failure", "reset", "estop", "toggle")
    assert kb.read().events == ()


def test_spacemouse_report_parsing():
    raw, buttons = np.zeros(6), [0, 0]
    parse_report(bytes([1]) + (350).to_bytes(2, "little", signed=True) + (0).to_bytes(2, "little")
                 + (-175).to_bytes(2, "little", signed=True), raw, buttons)
    parse_report(bytes([2, 0, 0, 0, 0]) + (100).to_bytes(2, "little"), raw, buttons)
    parse_report(bytes([3, 0b10]), raw, buttons)
    assert list(raw) == [350, 0, -175, 0, 0, 100] and buttons == [0, 1]
    dev = SpaceMouseDevice()
    dev._raw, dev._buttons, dev._alive_t = raw, buttons, time.monotonic()
    reading = dev.read()
    assert reading.engage and reading.gripper == 1.0
    assert reading.delta[1] == pytest.approx(1.0) and reading.delta[2] == pytest.approx(0.5)


def test_reading_rejects_unknown_events():
    with pytest.raises(ValueError, match="unknown teleop events"):
        TeleopReading(0.0, events=("jump",))


def test_devices_verb_works_with_nothing_connected(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "keyboard:" in out and "space" in out and "E-STOP" in out
    # The scripted ones are listed (last) as what they are: a script in place of a person.
    for name in ("pick_demonstrator", "pick_intervener", "scripted"):
        assert f"{name} (scripted, no person):" in out, name
    assert out.index("keyboard:") < out.index("pick_demonstrator")
    assert main(["devices", "--no-scripted"]) == 0
    assert "pick_demonstrator" not in capsys.readouterr().out
    assert "spacemouse:" in out and "gamepad:" in out


def test_the_hint_tells_only_a_person_how_to_take_over():
    """`deploy --teleop scripted` printed `HOLD the intervene control to take over` with nobody at any control."""
    from robot_rl.human_loop.operator import make_teleop

    class Scene:  # a simulated robot's pick task, as a scripted person sees it (nothing to see before a step)
        def pick_view(self):
            return None

    nobody = InterventionController(make_teleop("scripted", Scene()))
    assert nobody.mode_hint.startswith("nobody takes over") and nobody.hint == "nobody takes over"
    script = InterventionController(make_teleop("pick_intervener", Scene()))
    assert script.mode_hint == "no person at the teleop: pick_intervener (scripted person) takes over by itself"
    assert script.hint == "a script takes over"
    for ctl in (nobody, script):
        assert "HOLD" not in ctl.mode_hint and "control" not in ctl.mode_hint + ctl.hint
    person = InterventionController(ScriptedDevice(human(set())), InterventionConfig(mode="toggle"))
    assert person.mode_hint.startswith("PRESS the toggle control") and person.hint == "toggle to take over"
