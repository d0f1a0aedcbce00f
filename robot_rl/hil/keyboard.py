"""Keyboard teleop: key events -> end-effector motion, gripper toggle and buttons.

Default keys (robot base frame: x forward, y left, z up):
    w / s  +x / -x      a / d  +y / -y      r / f  +z / -z      q / e  +yaw / -yaw
    space  open / close the gripper          t  take over / hand back
    g  mark success    b  mark failure       x  reset           z  rewind

Backends deliver (key, kind) events, kind "down" / "up" (pynput: real key releases) or "press" (a
terminal or MuJoCo's viewer: key presses only, auto-repeat while held). A "press" holds its motion for
`hold_s` seconds, long enough to bridge the auto-repeat gap, so holding a key moves the arm smoothly
and releasing it stops the arm within hold_s.
"""

from __future__ import annotations

import collections
import os
import select
import sys
import threading
import time

import numpy as np

from robot_rl.hil.device import Device, DeviceCommand, DeviceDisconnected, unavailable

MOTION_KEYS = {  # key -> (axis of [dx, dy, dz, dyaw], sign)
    "w": (0, 1.0), "s": (0, -1.0), "a": (1, 1.0), "d": (1, -1.0),
    "r": (2, 1.0), "f": (2, -1.0), "q": (3, 1.0), "e": (3, -1.0),
}
BUTTON_KEYS = {"t": "take_over", "g": "success", "b": "failure", "x": "reset", "z": "rewind"}
GRIP_KEY = "space"
KINDS = ("down", "up", "press")
# GLFW key codes (MuJoCo's viewer key_callback): printable keys are their upper-case ASCII code.
GLFW_NAMES = {32: "space", 257: "enter", 259: "backspace", 256: "escape"}


class KeyboardDevice(Device):
    """Key events from `source.read() -> [(key, kind)]` through the key map; `clock` is injectable for tests."""

    name = "keyboard"

    def __init__(self, source, speed: float = 0.6, hold_s: float = 0.15, clock=time.monotonic):
        super().__init__()
        if not (0 < speed <= 1):
            raise ValueError(f"keyboard.speed={speed} must be in (0, 1]")
        if hold_s <= 0:
            raise ValueError(f"keyboard.hold_s={hold_s} must be > 0")
        self.source, self.speed, self.hold_s, self.clock = source, float(speed), float(hold_s), clock
        self._held: dict[str, float] = {}  # motion key -> time it stops counting as held (inf while down)

    def handle(self, key: str, kind: str, now: float, buttons: set) -> None:
        """Apply one key event (the parsing step, separate from any backend)."""
        if kind not in KINDS:
            raise ValueError(f"key event kind {kind!r}; valid: {KINDS}")
        key = key.lower()
        if key in MOTION_KEYS:
            if kind == "down":
                self._held[key] = float("inf")
            elif kind == "up":
                self._held.pop(key, None)
            else:
                self._held[key] = now + self.hold_s
        elif kind == "up":
            return  # buttons and the gripper act on the press
        elif key == GRIP_KEY:
            self.toggle_grip()
        elif key in BUTTON_KEYS:
            buttons.add(BUTTON_KEYS[key])

    def poll(self) -> DeviceCommand:
        events = self.source.read()  # raises DeviceDisconnected
        now = self.clock()
        buttons: set = set()
        for key, kind in events:
            self.handle(key, kind, now, buttons)
        motion = np.zeros(4)
        for key, until in list(self._held.items()):
            if until < now:
                del self._held[key]
                continue
            axis, sign = MOTION_KEYS[key]
            motion[axis] += sign * self.speed
        return DeviceCommand(np.clip(motion, -1, 1), self.grip, frozenset(buttons))

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


class EventQueue:
    """Thread-safe queue of (key, kind) events that a backend callback pushes into; `read` drains it."""

    def __init__(self):
        self._q: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._gone: str | None = None

    def push(self, key: str, kind: str) -> None:
        with self._lock:
            self._q.append((key, kind))

    def disconnect(self, why: str) -> None:
        self._gone = why

    def read(self) -> list:
        with self._lock:
            out = list(self._q)
            self._q.clear()
        if self._gone is not None and not out:
            raise DeviceDisconnected(f"keyboard: {self._gone}")
        return out


def glfw_key_name(keycode: int) -> str | None:
    """Key name of a GLFW key code (MuJoCo viewer key_callback), None for keys we do not use."""
    if keycode in GLFW_NAMES:
        return GLFW_NAMES[keycode]
    if 32 < keycode < 127:
        return chr(keycode).lower()
    return None


def viewer_source() -> tuple[EventQueue, callable]:
    """(source, key_callback) for mujoco.viewer.launch_passive(..., key_callback=...)."""
    q = EventQueue()

    def callback(keycode: int) -> None:
        name = glfw_key_name(int(keycode))
        if name is not None:
            q.push(name, "press")

    return q, callback


class TerminalSource:
    """Key presses from the controlling terminal in cbreak mode (no display needed; no release events)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdin
        try:
            import termios
            import tty
        except ImportError:
            raise unavailable("keyboard", "terminal key input needs termios (Linux / macOS)", "run in a terminal") from None
        if not self.stream.isatty():
            raise unavailable("keyboard", "standard input is not a terminal, so keys cannot be read",
                              "run robot-rl-teleop in an interactive terminal (or with a display: keyboard.backend=pynput)")
        self.fd = self.stream.fileno()
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)

    def read(self) -> list:
        out = []
        while select.select([self.fd], [], [], 0)[0]:
            ch = os.read(self.fd, 1)
            if not ch:
                raise DeviceDisconnected("keyboard: the terminal closed")
            c = ch.decode(errors="ignore")
            out.append(("space" if c == " " else c, "press"))
        return out

    def close(self) -> None:
        import termios

        termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)


def pynput_source() -> EventQueue:
    """Key down / up events from pynput's global listener (needs a display)."""
    try:
        from pynput import keyboard as kb
    except ImportError:
        raise unavailable("keyboard", "keyboard.backend=pynput needs the pynput package",
                          "pip install pynput, or use keyboard.backend=terminal") from None
    except Exception as e:  # pynput raises at import when no X display is reachable
        raise unavailable("keyboard", f"pynput cannot reach a display ({e})", "use keyboard.backend=terminal") from None
    q = EventQueue()

    def name(key) -> str:
        if key == kb.Key.space:
            return "space"
        return getattr(key, "char", None) or str(getattr(key, "name", key))

    listener = kb.Listener(on_press=lambda k: q.push(name(k), "down"), on_release=lambda k: q.push(name(k), "up"))
    listener.start()
    q.close = listener.stop  # type: ignore[attr-defined]
    return q
