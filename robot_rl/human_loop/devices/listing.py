"""Discovery for `robot-rl devices`: which teleop devices are connected and what each control does."""

from __future__ import annotations

from dataclasses import dataclass

from robot_rl.hardware.teleop import TELEOP_DEVICES


@dataclass
class DeviceListing:
    """One device kind: what was found, why nothing was, and its controls."""

    kind: str
    found: list[str]
    note: str
    controls: dict[str, str]
    scripted: bool = False


def list_devices(include_scripted: bool = True) -> list[DeviceListing]:
    """Probe every registered device kind (optional libraries are tried, never required); scripted ones last."""
    out = []
    kinds = sorted(TELEOP_DEVICES.names(), key=lambda k: (TELEOP_DEVICES.get(k).scripted, k))
    for kind in kinds:
        cfg_cls = TELEOP_DEVICES.get(kind)
        if cfg_cls.scripted and not include_scripted:
            continue
        found, note = cfg_cls.discover()
        out.append(DeviceListing(kind, found, note, cfg_cls.describe_controls(), cfg_cls.scripted))
    return out


def format_listing(listings: list[DeviceListing]) -> str:
    """Plain-text report; says so plainly when no device is connected."""
    lines = []
    for item in listings:
        status = ", ".join(item.found) if item.found else f"not found ({item.note})"
        lines.append(f"{item.kind}{' (scripted, no person)' if item.scripted else ''}: {status}")
        for control, meaning in item.controls.items():
            lines.append(f"    {control:<22} {meaning}")
    if not any(item.found for item in listings if not item.scripted):
        lines.append("No teleop device is connected. Plug in a gamepad, SpaceMouse or leader arm, or run from an "
                     "interactive terminal for the keyboard.")
    return "\n".join(lines)
