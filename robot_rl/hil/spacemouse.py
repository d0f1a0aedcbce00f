"""3Dconnexion SpaceMouse teleop: raw HID reports -> end-effector motion, gripper toggle and buttons.

HID reports (little-endian int16, about +-350 at full deflection):
    id 1, 7 bytes:   tx ty tz                 (SpaceNavigator, SpaceMouse Pro, Compact)
    id 1, 13 bytes:  tx ty tz rx ry rz        (SpaceMouse Wireless and newer models)
    id 2, 7 bytes:   rx ry rz
    id 3:            button bitmask (bit 0 = left, bit 1 = right, more on the Pro / Enterprise)
Raw axes: x right, y toward the user, z down. `axes` maps them to the robot's [dx, dy, dz, dyaw]; the
default suits an operator standing behind the robot, looking along its +x (push away = forward). If an
axis moves the wrong way on your setup, flip its sign in `spacemouse.axes` (configs/teleop.yaml).

The backend is the `hid` module of hidapi (`pip install hidapi`); the ctypes `hid` package works too.

Kept instead of pyspacemouse (MIT): it reads through easyhid, which loads the system's libhidapi-hidraw at import (an
apt package, not the self-contained hidapi wheel of the `teleop` extra), and gives levels of its own scaled axes, one
report per read; the device interface (robot_rl/hil/device.py) needs every pending report per poll, button presses
as edges and a configurable raw-axis mapping: this small parser.
"""

from __future__ import annotations

import struct

import numpy as np

from robot_rl.hil.device import BUTTONS, Device, DeviceCommand, DeviceDisconnected, deadzone, unavailable

VENDORS = (0x256F, 0x046D)  # 3Dconnexion, and Logitech for the older models
PRODUCTS = {  # product id -> model
    0xC626: "SpaceNavigator", 0xC627: "SpaceExplorer", 0xC628: "SpaceNavigator for Notebooks",
    0xC62B: "SpaceMouse Pro", 0xC62E: "SpaceMouse Wireless (cabled)", 0xC62F: "SpaceMouse Wireless receiver",
    0xC631: "SpaceMouse Pro Wireless (cabled)", 0xC632: "SpaceMouse Pro Wireless receiver",
    0xC633: "SpaceMouse Enterprise", 0xC635: "SpaceMouse Compact", 0xC652: "3Dconnexion Universal Receiver",
}
RAW_AXES = ("tx", "ty", "tz", "rx", "ry", "rz")
DEFAULT_AXES = ("-ty", "-tx", "-tz", "-rz")  # robot dx, dy, dz, dyaw
DEFAULT_BUTTONS = {0: "grip", 1: "take_over"}  # bit -> "grip" (toggle) or a name from BUTTONS


def parse_axes(spec) -> list[tuple[int, float]]:
    """["-ty", "-tx", ...] -> [(raw index, sign)] for robot dx, dy, dz, dyaw."""
    spec = list(spec)
    if len(spec) != 4:
        raise ValueError(f"spacemouse.axes={spec} must list 4 raw axes (robot dx, dy, dz, dyaw), e.g. {list(DEFAULT_AXES)}")
    out = []
    for s in spec:
        sign, name = (-1.0, s[1:]) if str(s).startswith("-") else (1.0, str(s).lstrip("+"))
        if name not in RAW_AXES:
            raise ValueError(f"spacemouse.axes entry {s!r}: axis must be one of {RAW_AXES}, optionally with a '-'")
        out.append((RAW_AXES.index(name), sign))
    return out


class SpaceMouseParser:
    """Raw state from HID reports: 6 axes (raw counts) and the button bitmask."""

    def __init__(self):
        self.raw = np.zeros(6)
        self.bits = 0

    def feed(self, report: bytes) -> int:
        """Apply one report; returns the button bits that went down with it."""
        report = bytes(report)
        if not report:
            return 0
        rid = report[0]
        if rid == 1 and len(report) >= 13:
            self.raw[:] = struct.unpack("<6h", report[1:13])
        elif rid == 1 and len(report) >= 7:
            self.raw[:3] = struct.unpack("<3h", report[1:7])
        elif rid == 2 and len(report) >= 7:
            self.raw[3:] = struct.unpack("<3h", report[1:7])
        elif rid == 3 and len(report) >= 2:
            bits = int.from_bytes(report[1:], "little")
            down, self.bits = bits & ~self.bits, bits
            return down
        return 0  # other report ids (battery level, LEDs) carry no motion


class SpaceMouseDevice(Device):
    """A SpaceMouse read through `reader.read() -> [report bytes]` (the hid backend, or a test's report list)."""

    name = "spacemouse"

    def __init__(self, reader, axes=DEFAULT_AXES, buttons=None, full_scale: float = 350.0, dead_zone: float = 0.1,
                 speed: float = 1.0):
        super().__init__()
        self.reader = reader
        self.axes = parse_axes(axes)
        self.buttons = dict(DEFAULT_BUTTONS if buttons is None else {int(k): str(v) for k, v in buttons.items()})
        for bit, what in self.buttons.items():
            if what != "grip" and what not in BUTTONS:
                raise ValueError(f"spacemouse.buttons[{bit}]={what!r}; valid: grip, {', '.join(BUTTONS)}")
        if full_scale <= 0 or not (0 <= dead_zone < 1) or not (0 < speed <= 1):
            raise ValueError("spacemouse: full_scale must be > 0, dead_zone in [0, 1), speed in (0, 1]")
        self.full_scale, self.dead_zone, self.speed = float(full_scale), float(dead_zone), float(speed)
        self.parser = SpaceMouseParser()

    def poll(self) -> DeviceCommand:
        pressed: set = set()
        for report in self.reader.read():  # raises DeviceDisconnected
            down = self.parser.feed(report)
            for bit, what in self.buttons.items():
                if down >> bit & 1:
                    if what == "grip":
                        self.toggle_grip()
                    else:
                        pressed.add(what)
        raw = self.parser.raw / self.full_scale
        motion = np.array([sign * raw[i] for i, sign in self.axes])
        motion = deadzone(motion, self.dead_zone) * self.speed
        return DeviceCommand(motion, self.grip, frozenset(pressed))

    def close(self) -> None:
        self.reader.close()


class HidReader:
    """Non-blocking reads of every pending report from the first SpaceMouse found by hidapi."""

    def __init__(self):
        try:
            import hid
        except ImportError:
            raise unavailable("spacemouse", "the hid module is not installed",
                              "pip install hidapi (and on Linux give your user access to /dev/hidraw*)") from None
        found = [d for d in hid.enumerate() if d.get("vendor_id") in VENDORS and d.get("product_id") in PRODUCTS]
        if not found:
            raise unavailable("spacemouse", "no 3Dconnexion SpaceMouse found over HID (is it plugged in, and "
                              "is /dev/hidraw* readable by you?)", "plug it in or fix the udev permissions")
        info = found[0]
        self.model = PRODUCTS[info["product_id"]]
        try:
            if hasattr(hid, "device"):  # cython-hidapi (PyPI: hidapi)
                self._dev = hid.device()
                self._dev.open_path(info["path"])
                self._dev.set_nonblocking(True)
                self._read = lambda: bytes(self._dev.read(64))
            else:  # ctypes bindings (PyPI: hid)
                self._dev = hid.Device(path=info["path"])
                self._read = lambda: bytes(self._dev.read(64, 0) or b"")
        except (OSError, IOError, ValueError) as e:
            raise unavailable("spacemouse", f"cannot open {self.model} ({e})", "check /dev/hidraw* permissions") from None

    def read(self) -> list[bytes]:
        out = []
        try:
            while len(out) < 256:
                r = self._read()
                if not r:
                    break
                out.append(r)
        except Exception as e:  # hidapi raises OSError / IOError / HIDException when the device goes away
            raise DeviceDisconnected(f"spacemouse: {self.model} stopped answering ({e})") from None
        return out

    def close(self) -> None:
        try:
            self._dev.close()
        except Exception:
            pass
