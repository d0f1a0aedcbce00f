"""Gamepad teleop (Xbox / PlayStation layout): stick and button events -> end-effector motion and buttons.

Default layout (robot base frame: x forward, y left, z up):
    left stick   up/down -> +x/-x, left/right -> +y/-y
    right stick  up/down -> +z/-z, left/right -> +yaw/-yaw
    south (A / cross)      open / close the gripper
    RB                     take over / hand back          LB       rewind
    start                  mark success                   select   mark failure
    west (X / square)      reset

Two backends turn their raw events into one normalized stream of ("axis", name, value in [-1, 1]) and
("button", name, pressed) events: evdev (Linux input events: type, code, value, scaled by each axis'
absinfo range; no display needed) and pygame (SDL joystick events, Xbox index layout). The device logic
only sees the normalized stream.
"""

from __future__ import annotations

import errno
import os

import numpy as np

from robot_rl.hil.device import Device, DeviceCommand, DeviceDisconnected, deadzone, unavailable

# Linux input-event-codes.h
EV_KEY, EV_ABS = 1, 3
EVDEV_AXES = {0: "lx", 1: "ly", 2: "lt", 3: "rx", 4: "ry", 5: "rt", 16: "hat_x", 17: "hat_y"}
EVDEV_BUTTONS = {304: "south", 305: "east", 307: "north", 308: "west", 310: "lb", 311: "rb",
                 314: "select", 315: "start", 316: "mode"}
TRIGGERS = ("lt", "rt")  # 0 released .. 1 fully pulled; sticks are -1 .. 1
# pygame (SDL2) joystick event types and the Xbox controller's indices on Linux
PG_AXISMOTION, PG_HATMOTION, PG_BUTTONDOWN, PG_BUTTONUP, PG_DEVICEREMOVED = 1536, 1538, 1539, 1540, 1542
PYGAME_AXES = {0: "lx", 1: "ly", 2: "lt", 3: "rx", 4: "ry", 5: "rt"}
PYGAME_BUTTONS = {0: "south", 1: "east", 2: "west", 3: "north", 4: "lb", 5: "rb", 6: "select", 7: "start", 8: "mode"}

MOTION = (("ly", -1.0), ("lx", -1.0), ("ry", -1.0), ("rx", -1.0))  # robot dx, dy, dz, dyaw: stick up is -y on pads
DEFAULT_BUTTONS = {"south": "grip", "rb": "take_over", "lb": "rewind", "start": "success", "select": "failure",
                   "west": "reset"}


def evdev_event(etype: int, code: int, value: int, absinfo: dict) -> tuple | None:
    """One Linux input event -> ("axis", name, value) / ("button", name, pressed), None if unused.

    absinfo: {code: (min, max)} of the device's axes."""
    if etype == EV_KEY and code in EVDEV_BUTTONS:
        return ("button", EVDEV_BUTTONS[code], value != 0)  # 1 down, 2 auto-repeat, 0 up
    if etype == EV_ABS and code in EVDEV_AXES:
        name = EVDEV_AXES[code]
        lo, hi = absinfo.get(code, (-1, 1))
        unit = (value - lo) / max(hi - lo, 1)  # 0 .. 1
        return ("axis", name, float(unit if name in TRIGGERS else 2 * unit - 1))
    return None


def pygame_event(event) -> tuple | None:
    """One pygame joystick event -> normalized event; raises DeviceDisconnected on JOYDEVICEREMOVED."""
    t = event.type
    if t == PG_DEVICEREMOVED:
        raise DeviceDisconnected("gamepad: the joystick was removed")
    if t == PG_AXISMOTION and event.axis in PYGAME_AXES:
        name = PYGAME_AXES[event.axis]
        v = float(event.value)
        return ("axis", name, (v + 1) / 2 if name in TRIGGERS else v)
    if t in (PG_BUTTONDOWN, PG_BUTTONUP) and event.button in PYGAME_BUTTONS:
        return ("button", PYGAME_BUTTONS[event.button], t == PG_BUTTONDOWN)
    if t == PG_HATMOTION:
        x, y = event.value
        return [("axis", "hat_x", float(x)), ("axis", "hat_y", float(-y))]
    return None


class GamepadDevice(Device):
    """A gamepad read through `source.read() -> [normalized events]`."""

    name = "gamepad"

    def __init__(self, source, buttons=None, dead_zone: float = 0.15, speed: float = 1.0):
        super().__init__()
        from robot_rl.hil.device import BUTTONS

        self.source = source
        self.buttons = dict(DEFAULT_BUTTONS if buttons is None else buttons)
        for b, what in self.buttons.items():
            if what != "grip" and what not in BUTTONS:
                raise ValueError(f"gamepad.buttons.{b}={what!r}; valid: grip, {', '.join(BUTTONS)}")
        if not (0 <= dead_zone < 1) or not (0 < speed <= 1):
            raise ValueError("gamepad: dead_zone must be in [0, 1), speed in (0, 1]")
        self.dead_zone, self.speed = float(dead_zone), float(speed)
        self.axes = {name: 0.0 for _, name in sorted(EVDEV_AXES.items())}
        self.down: set = set()

    def poll(self) -> DeviceCommand:
        pressed: set = set()
        for ev in self.source.read():  # raises DeviceDisconnected
            kind, name, value = ev
            if kind == "axis":
                self.axes[name] = float(value)
            elif value and name not in self.down:
                self.down.add(name)
                what = self.buttons.get(name)
                if what == "grip":
                    self.toggle_grip()
                elif what is not None:
                    pressed.add(what)
            elif not value:
                self.down.discard(name)
        motion = np.array([sign * self.axes[name] for name, sign in MOTION])
        return DeviceCommand(deadzone(motion, self.dead_zone) * self.speed, self.grip, frozenset(pressed))

    def close(self) -> None:
        self.source.close()


class EvdevSource:
    """The first gamepad under /dev/input (a device with BTN_SOUTH and absolute axes), read non-blocking."""

    def __init__(self, path: str | None = None):
        try:
            import evdev
        except ImportError:
            raise unavailable("gamepad", "gamepad.backend=evdev needs the evdev package (Linux)",
                              "pip install evdev, or use gamepad.backend=pygame") from None
        paths = [path] if path else evdev.list_devices()
        self.dev = None
        for p in paths:
            try:
                d = evdev.InputDevice(p)
            except OSError:
                continue
            caps = d.capabilities(absinfo=True)
            if 304 in caps.get(EV_KEY, []) and caps.get(EV_ABS):
                self.dev = d
                self.absinfo = {code: (info.min, info.max) for code, info in caps[EV_ABS]}
                break
            d.close()
        if self.dev is None:
            where = path or "/dev/input/event*"
            raise unavailable("gamepad", f"no gamepad found at {where} (plugged in? readable by you: the input group?)",
                              "plug one in or set gamepad.path=/dev/input/eventN")

    def read(self) -> list:
        out = []
        try:
            while True:
                ev = self.dev.read_one()
                if ev is None:
                    break
                e = evdev_event(ev.type, ev.code, ev.value, self.absinfo)
                if e is not None:
                    out.append(e)
        except OSError as e:
            if e.errno in (errno.ENODEV, errno.EIO, errno.EBADF):
                raise DeviceDisconnected(f"gamepad: {self.dev.name} was unplugged") from None
            raise
        return out

    def close(self) -> None:
        try:
            self.dev.close()
        except Exception:
            pass


class PygameSource:
    """The first SDL joystick through pygame (headless: SDL's dummy video driver)."""

    def __init__(self):
        if not os.environ.get("DISPLAY"):
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        try:
            import pygame
        except ImportError:
            raise unavailable("gamepad", "gamepad.backend=pygame needs the pygame package",
                              "pip install pygame, or use gamepad.backend=evdev") from None
        pygame.display.init()
        pygame.joystick.init()
        if pygame.joystick.get_count() == 0:
            raise unavailable("gamepad", "pygame sees no joystick", "plug one in")
        self.pygame = pygame
        self.joystick = pygame.joystick.Joystick(0)
        self.joystick.init()

    def read(self) -> list:
        out = []
        for event in self.pygame.event.get():
            e = pygame_event(event)
            if isinstance(e, list):
                out += e
            elif e is not None:
                out.append(e)
        return out

    def close(self) -> None:
        self.pygame.joystick.quit()
