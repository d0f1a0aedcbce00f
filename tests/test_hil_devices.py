"""Teleop devices through their real parsing code: keyboard key events, SpaceMouse HID reports, gamepad
evdev / pygame event streams; missing backends and devices lost mid-stream."""

from __future__ import annotations

import struct
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from robot_rl.hil import DeviceDisconnected, DeviceUnavailable, command_action, open_device
from robot_rl.hil.gamepad import (
    EV_ABS, EV_KEY, PG_AXISMOTION, PG_BUTTONDOWN, PG_BUTTONUP, PG_DEVICEREMOVED, GamepadDevice, evdev_event, pygame_event,
)
from robot_rl.hil.keyboard import EventQueue, KeyboardDevice, glfw_key_name
from robot_rl.hil.spacemouse import SpaceMouseDevice, SpaceMouseParser


class Script:
    """A device backend replaying a list of per-poll event batches; an exception in the list is raised."""

    def __init__(self, batches):
        self.batches = list(batches)

    def read(self):
        b = self.batches.pop(0) if self.batches else []
        if isinstance(b, Exception):
            raise b
        return b

    def close(self):
        pass


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


# ---- keyboard --------------------------------------------------------------------------------------
def test_keyboard_held_keys_move_until_released_and_buttons_fire_once():
    src = Script([[("w", "down"), ("r", "down")], [], [("w", "up"), ("t", "down"), ("t", "up")], [("space", "down")]])
    kb = KeyboardDevice(src, speed=0.5)
    c1, c2, c3, c4 = (kb.poll() for _ in range(4))
    assert np.allclose(c1.motion, [0.5, 0, 0.5, 0]) and np.allclose(c2.motion, [0.5, 0, 0.5, 0])
    assert np.allclose(c3.motion, [0, 0, 0.5, 0]) and c3.buttons == {"take_over"} and not c2.buttons
    assert c3.grip == 1.0 and c4.grip == -1.0  # space closes the (open) gripper
    assert command_action(c3, 4, use_yaw=False).tolist() == [0, 0, 0.5, 1.0]
    assert command_action(c4, 5, use_yaw=True).shape == (5,)


def test_keyboard_press_only_events_hold_motion_for_hold_s():
    clock = Clock()
    src = Script([[("a", "press")], [("a", "press")], [], []])
    kb = KeyboardDevice(src, speed=1.0, hold_s=0.15, clock=clock)
    assert kb.poll().motion[1] == 1.0
    clock.t = 0.1
    assert kb.poll().motion[1] == 1.0  # auto-repeat refreshed the hold
    clock.t = 0.2
    assert kb.poll().motion[1] == 1.0  # 0.1 + 0.15 not yet reached
    clock.t = 0.3
    assert kb.poll().motion[1] == 0.0  # released: stops within hold_s


def test_viewer_key_codes_map_to_key_names_and_queue_disconnect_raises():
    assert glfw_key_name(ord("W")) == "w" and glfw_key_name(32) == "space" and glfw_key_name(340) is None
    q = EventQueue()
    q.push("g", "press")
    kb = KeyboardDevice(q)
    assert kb.poll().buttons == {"success"}
    q.disconnect("the viewer window closed")
    with pytest.raises(DeviceDisconnected, match="keyboard: the viewer window closed"):
        kb.poll()


# ---- SpaceMouse ------------------------------------------------------------------------------------
def _t(x, y, z):
    return struct.pack("<B3h", 1, x, y, z)


def test_spacemouse_reports_parse_to_robot_frame_motion():
    p = SpaceMouseParser()
    p.feed(_t(10, -20, 30))
    p.feed(struct.pack("<B3h", 2, 1, 2, 3))
    assert p.raw.tolist() == [10, -20, 30, 1, 2, 3]
    p.feed(struct.pack("<B6h", 1, 4, 5, 6, 7, 8, 9))  # newer models: one 13-byte report
    assert p.raw.tolist() == [4, 5, 6, 7, 8, 9]
    # Push the cap away from you (raw y < 0) and lift it (raw z < 0): robot +x and +z; push right: robot -y.
    dev = SpaceMouseDevice(Script([[_t(0, -350, 0)], [_t(350, 0, -175)], [_t(10, 0, 0)]]), dead_zone=0.1)
    assert np.allclose(dev.poll().motion, [1, 0, 0, 0])
    assert np.allclose(dev.poll().motion, [0, -1, (0.5 - 0.1) / 0.9, 0])
    assert np.allclose(dev.poll().motion, 0)  # inside the dead zone


def test_spacemouse_buttons_act_on_press_edges_only():
    b = lambda bits: struct.pack("<BB", 3, bits)  # noqa: E731
    dev = SpaceMouseDevice(Script([[b(1)], [b(1)], [b(0)], [b(2)], [b(3)]]))
    grips, buttons = [], []
    for _ in range(5):
        c = dev.poll()
        grips.append(c.grip)
        buttons.append(set(c.buttons))
    assert grips == [-1, -1, -1, -1, 1]  # left toggles on each press, not while held
    assert buttons == [set(), set(), set(), {"take_over"}, set()]


def test_spacemouse_rejects_a_bad_axis_map():
    with pytest.raises(ValueError, match="spacemouse.axes entry 'ty2'"):
        SpaceMouseDevice(Script([]), axes=["-ty", "ty2", "tz", "rz"])


# ---- gamepad ---------------------------------------------------------------------------------------
XBOX = {0: (-32768, 32767), 1: (-32768, 32767), 3: (-32768, 32767), 4: (-32768, 32767), 2: (0, 1023), 5: (0, 1023)}


def test_evdev_events_parse_through_absinfo_ranges():
    assert evdev_event(EV_ABS, 1, -32768, XBOX) == ("axis", "ly", -1.0)
    assert evdev_event(EV_ABS, 5, 1023, XBOX) == ("axis", "rt", 1.0)
    assert evdev_event(EV_ABS, 0, 128, {0: (0, 255)})[2] == pytest.approx(2 * 128 / 255 - 1)  # PS4 range
    assert evdev_event(EV_KEY, 304, 1, XBOX) == ("button", "south", True)
    assert evdev_event(0, 0, 0, XBOX) is None  # EV_SYN


def test_gamepad_evdev_stream_moves_toggles_and_presses():
    ev = lambda *e: evdev_event(*e, XBOX)  # noqa: E731
    stream = [
        [ev(EV_ABS, 1, -32768), ev(EV_ABS, 4, -16384)],  # left stick full up, right stick half up
        [ev(EV_KEY, 304, 1), ev(EV_KEY, 311, 1)],  # A down, RB down
        [ev(EV_KEY, 304, 2)],  # A auto-repeat: no second toggle
        [ev(EV_KEY, 304, 0), ev(EV_KEY, 311, 0), ev(EV_ABS, 1, 0), ev(EV_ABS, 4, 0)],
    ]
    pad = GamepadDevice(Script(stream), dead_zone=0.0)
    c = [pad.poll() for _ in range(4)]
    assert c[0].motion[0] == pytest.approx(1.0) and c[0].motion[2] == pytest.approx(0.5, abs=1e-4)
    assert c[1].grip == -1 and c[1].buttons == {"take_over"} and c[2].grip == -1 and not c[2].buttons
    assert np.allclose(c[3].motion, 0, atol=1e-4)


def test_gamepad_pygame_events_parse_and_removal_disconnects():
    evs = [SimpleNamespace(type=PG_AXISMOTION, axis=0, value=-1.0), SimpleNamespace(type=PG_BUTTONDOWN, button=7),
           SimpleNamespace(type=PG_BUTTONUP, button=7)]
    pad = GamepadDevice(Script([[pygame_event(e) for e in evs]]), dead_zone=0.0)
    c = pad.poll()
    assert c.motion[1] == pytest.approx(1.0) and c.buttons == {"success"}  # stick left = robot +y; start
    with pytest.raises(DeviceDisconnected, match="gamepad"):
        pygame_event(SimpleNamespace(type=PG_DEVICEREMOVED))


# ---- missing backends ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, settings, module, needle", [
    ("gamepad", {"backend": "evdev"}, "evdev", "pip install evdev"),
    ("gamepad", {"backend": "pygame"}, "pygame", "pip install pygame"),
    ("spacemouse", {}, "hid", "pip install hidapi"),
    ("keyboard", {"backend": "pynput"}, "pynput", "pip install pynput"),
])
def test_a_missing_backend_names_the_device_the_fix_and_the_alternatives(monkeypatch, name, settings, module, needle):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(DeviceUnavailable) as e:
        open_device(name, settings)
    msg = str(e.value)
    assert msg.startswith(f"device={name}:") and needle in msg
    assert all(f"device={d}" in msg for d in ("keyboard", "spacemouse", "gamepad", "scripted") if d != name)


def test_keyboard_terminal_backend_without_a_terminal_says_so(monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(DeviceUnavailable, match="not a terminal"):
        open_device("keyboard", {"backend": "terminal"})
