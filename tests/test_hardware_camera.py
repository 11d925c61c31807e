"""Cameras: a generated video, crop/resize, timestamps, drop-stale, and a stalling source that makes the robot hold."""

import itertools
import threading
import time

import numpy as np
import pytest
from waiting import wait_until

cv2 = pytest.importorskip("cv2")

from robot_rl.hardware.camera import CameraConfig, CameraStaleError, OpenCVCamera  # noqa: E402
from robot_rl.hardware.robot import RobotConfig  # noqa: E402
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer  # noqa: E402
from robot_rl.hardware.xarm import XArmRobot, XArmRobotConfig  # noqa: E402
from robot_rl.testing.fake_xarm import FakeXArmAPI  # noqa: E402


@pytest.fixture
def video(tmp_path):
    path = str(tmp_path / "clip.avi")
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 30, (80, 60))
    for i in range(15):
        frame = np.zeros((60, 80, 3), np.uint8)
        frame[:, :, 2] = 200  # red in BGR
        frame[10:20, i * 4:i * 4 + 4] = 255
        writer.write(frame)
    writer.release()
    return path


class StallingSource:
    """Delivers ``n`` frames at 100 Hz, then blocks like a camera whose cable went loose."""

    def __init__(self, n):
        self.n, self.release_event = n, threading.Event()

    def read(self):
        if self.n <= 0:
            self.release_event.wait()
            return False, None
        self.n -= 1
        time.sleep(0.01)  # the fake camera's 100 Hz frame period
        return True, np.full((48, 64, 3), 100, np.uint8)

    def release(self):
        self.release_event.set()


def test_video_file_crop_resize_timestamps_and_end_goes_stale(video):
    cfg = CameraConfig(source=video, width=32, height=16, crop=(0, 0, 80, 40), fps=100, stale_after_s=0.15)
    with OpenCVCamera(cfg, "front") as cam:
        seen = [cam.read(wait_new=True) for _ in range(5)]
        assert all(f.image.shape == (16, 32, 3) and f.image.dtype == np.uint8 for f in seen)
        assert seen[0].image[..., 0].mean() > seen[0].image[..., 2].mean()  # RGB out: red channel first
        assert all(b.timestamp > a.timestamp and b.seq > a.seq for a, b in itertools.pairwise(seen))
        wait_until(lambda: cam.ended and cam.stale, 5.0, "the 15-frame file to end and go stale",
                   seen=cam.info)
        with pytest.raises(CameraStaleError, match="stale"):
            cam.read()


def test_drop_stale_policy_keeps_only_the_newest_frame():
    cam = OpenCVCamera(CameraConfig(width=64, height=48), source_factory=lambda c: StallingSource(1000))
    with cam:
        wait_until(lambda: cam.dropped >= 5, 5.0, "5 frames captured and dropped unread", seen=cam.info)
        frame = cam.read()
        # The newest (the source still delivers every 10 ms), not the oldest queued; room for a loaded machine.
        assert frame.seq == cam.frames - 1 and frame.age_s < 0.1


def test_stalling_camera_is_detected_and_the_robot_holds():
    source = StallingSource(5)
    cam = OpenCVCamera(CameraConfig(width=64, height=48, stale_after_s=0.1), "wrist",
                       source_factory=lambda c: source)
    robot = XArmRobot(XArmRobotConfig(cameras={"wrist": (48, 64)}), sdk=FakeXArmAPI)
    assert robot.features.observation["image.wrist"].shape == (48, 64, 3)
    with cam, SafetyLayer(robot, SafetyConfig(watchdog_timeout_s=0)) as layer:
        robot.attach_cameras({"wrist": cam})
        obs = robot.observe()
        assert obs["image.wrist"].shape == (48, 64, 3)
        # 5 frames at 100 Hz, then the stall outlasts stale_after_s
        wait_until(lambda: robot.stale_sensors() == ["camera wrist"], 5.0, "the stalled camera to go stale",
                   seen=robot.stale_sensors)
        _, info = layer.step(np.array([0.5, 0, 0, 0, 0, 0, 1.0]))
        assert info["safety_held"] and "sensor_stale" in info["safety_events"] and robot.arm.state == 4
        with pytest.raises(CameraStaleError):
            robot.observe()


def test_camera_that_never_delivers_fails_connect_and_mismatched_cameras_are_refused():
    cam = OpenCVCamera(CameraConfig(open_timeout_s=0.1), source_factory=lambda c: StallingSource(0))
    with pytest.raises(CameraStaleError, match="no frame"):
        cam.connect()
    cam.disconnect()
    robot = XArmRobot(XArmRobotConfig(cameras={"front": (48, 64)}), sdk=FakeXArmAPI)
    with pytest.raises(ValueError, match="do not match"):
        robot.attach_cameras({"front": OpenCVCamera(CameraConfig(width=32, height=32))})
    assert RobotConfig(cameras={"a": (8, 8)}).cameras == {"a": (8, 8)}
