"""Fake motors under lerobot's own motor buses, so that lerobot's SO-100/SO-101 and Koch followers run unchanged.

lerobot's ``FeetechMotorsBus`` and ``DynamixelMotorsBus`` reach the motors through four objects of the vendor
SDK: a port handler, a packet handler, a group sync-reader and a group sync-writer. :func:`attach_fake_motors`
swaps those four on a bus for fakes over an in-memory control table per motor (the register addresses are the
bus's own), so everything above the serial link is lerobot's: the handshake (ping, firmware), the calibration
check against the motors' registers, the configuration and torque writes, sign encoding, and the conversion of
positions to degrees or -100..100. Build lerobot's robot, attach, then use the robot as on hardware::

    so101 = SO101Follower(SO101FollowerConfig(port="/dev/fake", id="t", calibration_dir=tmp))
    motors = attach_fake_motors(so101.bus, {"shoulder_pan": 2048, ...})   # present positions, motor ticks

Each motor follows a goal at once while its torque is on (and holds where it is when torque comes on).
``motors.writes`` lists every register write, ``motors.goal_ticks`` the goals, ``motors.opened`` whether the port
was ever opened. Needs lerobot and the motor SDK (``feetech-servo-sdk`` or ``dynamixel-sdk``) that the bus
imports when it is built.
"""

from __future__ import annotations

from typing import Any

from lerobot.motors.motors_bus import get_address

COMM_SUCCESS = 0
COMM_NO_MOTOR = -3001  # the SDKs' "RX timeout": nothing answered at that id

# The classes below keep the SDKs' camelCase method names: lerobot's bus calls them by those names.


class _Port:
    """The SDK's PortHandler, without a serial port."""

    def __init__(self, motors: FakeMotors, name: str, baudrate: int) -> None:
        self.motors, self.port_name, self.baudrate = motors, name, baudrate
        self.is_open = False
        self.is_using = False

    def openPort(self) -> bool:
        self.is_open = True
        self.motors.opened = True
        return True

    def closePort(self) -> None:
        self.is_open = False

    def clearPort(self) -> None:
        pass

    def setPacketTimeoutMillis(self, msec: float) -> None:
        pass

    def getBaudRate(self) -> int:
        return self.baudrate

    def setBaudRate(self, baudrate: int) -> bool:
        self.baudrate = baudrate
        return True


class _Packets:
    """The SDK's PacketHandler: single-motor ping, read and write on the fake control tables."""

    def __init__(self, motors: FakeMotors) -> None:
        self.motors = motors

    def ping(self, port: Any, motor_id: int) -> tuple[int, int, int]:
        if motor_id not in self.motors.memory:
            return 0, COMM_NO_MOTOR, 0
        return self.motors.model_numbers[motor_id], COMM_SUCCESS, 0

    def _read(self, motor_id: int, address: int, length: int) -> tuple[int, int, int]:
        if motor_id not in self.motors.memory:
            return 0, COMM_NO_MOTOR, 0
        return self.motors.get(motor_id, address, length), COMM_SUCCESS, 0

    def read1ByteTxRx(self, port: Any, motor_id: int, address: int) -> tuple[int, int, int]:
        return self._read(motor_id, address, 1)

    def read2ByteTxRx(self, port: Any, motor_id: int, address: int) -> tuple[int, int, int]:
        return self._read(motor_id, address, 2)

    def read4ByteTxRx(self, port: Any, motor_id: int, address: int) -> tuple[int, int, int]:
        return self._read(motor_id, address, 4)

    def writeTxRx(self, port: Any, motor_id: int, address: int, length: int,
                  data: list[int]) -> tuple[int, int]:
        if motor_id not in self.motors.memory:
            return COMM_NO_MOTOR, 0
        self.motors.write(motor_id, address, data)
        return COMM_SUCCESS, 0

    def getTxRxResult(self, result: int) -> str:
        return "[TxRxResult] no motor answered" if result != COMM_SUCCESS else "[TxRxResult] success"

    def getRxPacketError(self, error: int) -> str:
        return f"[RxPacketError] {error}"


class _SyncRead:
    """The SDK's GroupSyncRead over the fake control tables."""

    def __init__(self, motors: FakeMotors) -> None:
        self.motors = motors
        self.start_address, self.data_length = 0, 0
        self.ids: list[int] = []

    def clearParam(self) -> None:
        self.ids = []

    def addParam(self, motor_id: int) -> bool:
        self.ids.append(motor_id)
        return True

    def txRxPacket(self) -> int:
        return COMM_SUCCESS if all(i in self.motors.memory for i in self.ids) else COMM_NO_MOTOR

    def getData(self, motor_id: int, address: int, length: int) -> int:
        return self.motors.get(motor_id, address, length)


class _SyncWrite:
    """The SDK's GroupSyncWrite over the fake control tables."""

    def __init__(self, motors: FakeMotors) -> None:
        self.motors = motors
        self.start_address, self.data_length = 0, 0
        self.params: dict[int, list[int]] = {}

    def clearParam(self) -> None:
        self.params = {}

    def addParam(self, motor_id: int, data: list[int]) -> bool:
        self.params[motor_id] = list(data)
        return True

    def txPacket(self) -> int:
        for motor_id, data in self.params.items():
            if motor_id in self.motors.memory:
                self.motors.write(motor_id, self.start_address, data)
        return COMM_SUCCESS


class FakeMotors:
    """The motors on one fake bus: a little-endian control table (bytes) per motor id."""

    def __init__(self, bus: Any, ticks: dict[str, int]) -> None:
        self.bus = bus
        self.names = {m.id: name for name, m in bus.motors.items()}
        self.model_numbers = {m.id: bus.model_number_table[m.model] for m in bus.motors.values()}
        self.memory = {m.id: bytearray(256) for m in bus.motors.values()}
        self.opened = False
        self.writes: list[tuple[str, str, int]] = []
        """Every register write after attaching: ``(register, motor, raw value)``."""
        for name in bus.motors:
            cal = bus.calibration.get(name)
            if cal is not None:  # the registers lerobot's calibration check compares with the file
                for reg, value in (("Homing_Offset", cal.homing_offset), ("Min_Position_Limit", cal.range_min),
                                   ("Max_Position_Limit", cal.range_max), ("Drive_Mode", cal.drive_mode)):
                    self._store(name, reg, value)
            self._store(name, "Present_Position", int(ticks[name]))
            self._store(name, "Goal_Position", int(ticks[name]))

    def _address(self, motor: str, register: str) -> tuple[int, int] | None:
        table = self.bus.model_ctrl_table[self.bus.motors[motor].model]
        return get_address(self.bus.model_ctrl_table, self.bus.motors[motor].model, register) \
            if register in table else None

    def _store(self, motor: str, register: str, value: int) -> None:
        where = self._address(motor, register)
        if where is not None:
            motor_id = self.bus.motors[motor].id
            encoded = self.bus._encode_sign(register, {motor_id: value})[motor_id]  # the bus's own sign encoding
            self.set(motor_id, where[0], where[1], encoded)

    def get(self, motor_id: int, address: int, length: int) -> int:
        """The raw (still sign-encoded) register value."""
        return int.from_bytes(self.memory[motor_id][address:address + length], "little")

    def set(self, motor_id: int, address: int, length: int, value: int) -> None:
        """Store a raw register value."""
        self.memory[motor_id][address:address + length] = int(value).to_bytes(length, "little")

    def write(self, motor_id: int, address: int, data: list[int]) -> None:
        """A write from the bus: store it, log it, and move the motor when it is a goal under torque."""
        motor = self.names[motor_id]
        self.memory[motor_id][address:address + len(data)] = bytes(data)
        register = self._register_at(motor, address)
        self.writes.append((register, motor, int.from_bytes(bytes(data), "little")))
        torque = self._address(motor, "Torque_Enable")
        goal, present = self._address(motor, "Goal_Position"), self._address(motor, "Present_Position")
        assert torque is not None and goal is not None and present is not None
        torque_on = self.get(motor_id, *torque) == 1
        if register == "Torque_Enable" and torque_on:  # a servo holds where it is when torque comes on
            self.set(motor_id, goal[0], goal[1], self.get(motor_id, *present))
        if register == "Goal_Position" and torque_on:
            self.set(motor_id, present[0], present[1], self.get(motor_id, *goal))

    def _register_at(self, motor: str, address: int) -> str:
        table = self.bus.model_ctrl_table[self.bus.motors[motor].model]
        return next((name for name, (addr, _) in table.items() if addr == address), f"@{address}")

    def _decoded(self, motor: str, register: str) -> int:
        where = self._address(motor, register)
        assert where is not None
        motor_id = self.bus.motors[motor].id
        return int(self.bus._decode_sign(register, {motor_id: self.get(motor_id, *where)})[motor_id])

    def goal_ticks(self, motor: str) -> int:
        """The motor's goal position register, ticks."""
        return self._decoded(motor, "Goal_Position")

    def present_ticks(self, motor: str) -> int:
        """The motor's present position register, ticks."""
        return self._decoded(motor, "Present_Position")

    def move_by_hand(self, motor: str, ticks: int) -> None:
        """A person turns ``motor`` to ``ticks`` (only possible with its torque off)."""
        torque = self._address(motor, "Torque_Enable")
        assert torque is not None
        if self.get(self.bus.motors[motor].id, *torque) == 1:
            raise RuntimeError(f"{motor}: torque is on, it cannot be moved by hand")
        self._store(motor, "Present_Position", ticks)

    def torque_on(self, motor: str) -> bool:
        """Whether ``motor`` holds (its Torque_Enable register is 1)."""
        torque = self._address(motor, "Torque_Enable")
        assert torque is not None
        return self.get(self.bus.motors[motor].id, *torque) == 1

    def goal_writes(self) -> list[tuple[str, int]]:
        """``(motor, raw goal)`` of every goal position written."""
        return [(motor, value) for reg, motor, value in self.writes if reg == "Goal_Position"]


def attach_fake_motors(bus: Any, ticks: dict[str, int]) -> FakeMotors:
    """Put fake motors at ``ticks`` (present position per motor name) under lerobot's ``bus`` (not connected yet).

    The motors' calibration registers are set from ``bus.calibration`` (lerobot loads it from the calibration
    file when it builds the robot), so lerobot finds them calibrated when that file exists.
    """
    motors = FakeMotors(bus, ticks)
    bus.port_handler = _Port(motors, bus.port, bus.default_baudrate)
    bus.packet_handler = _Packets(motors)
    bus.sync_reader = _SyncRead(motors)
    bus.sync_writer = _SyncWrite(motors)
    bus._comm_success, bus._no_error = COMM_SUCCESS, 0
    return motors
