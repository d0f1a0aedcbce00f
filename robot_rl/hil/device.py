"""The device interface: what every teleop device (keyboard, SpaceMouse, gamepad) gives the HIL layer.

A device is polled once per control step and returns a `DeviceCommand`:
    motion   [4] float in [-1, 1]: end-effector delta [dx, dy, dz, dyaw] in the robot base frame
             (x forward, y left, z up), full scale = the env's max_ee_delta / max_yaw_delta per step
    grip     float in [-1, 1]: -1 closed, +1 open (sim/actions.py)
    buttons  the button *presses* since the last poll (edges, not levels): take over / hand back,
             mark success, mark failure, reset, rewind
`command_action` turns it into one normalized ee_delta action [dx, dy, dz, (dyaw,) grip], the same
convention as the ROS teleop topic (real/teleop.py), so a device drives sim and robot alike.

Device backends (evdev, hidapi, pygame, pynput) are imported only when a device is opened: a missing
package or an unplugged device raises `DeviceUnavailable` naming the device and the alternatives; a
device lost mid-episode raises `DeviceDisconnected` from `poll()`.
"""

from __future__ import annotations

import abc
import dataclasses

import numpy as np

DEVICES = ("keyboard", "spacemouse", "gamepad", "scripted")
BUTTONS = ("take_over", "success", "failure", "reset", "rewind")


class DeviceUnavailable(RuntimeError):
    """A device cannot be opened (package missing, nothing plugged in); the message names the alternatives."""


class DeviceDisconnected(RuntimeError):
    """A device that was open stopped answering (unplugged, out of range)."""


def unavailable(device: str, problem: str, fix: str) -> DeviceUnavailable:
    """The one error for a device that cannot be used: what is wrong, how to fix it, what else works."""
    others = ", ".join(f"device={d}" for d in DEVICES if d != device)
    return DeviceUnavailable(f"device={device}: {problem}; {fix}, or use {others}")


@dataclasses.dataclass
class DeviceCommand:
    motion: np.ndarray  # [4] dx, dy, dz, dyaw in [-1, 1]
    grip: float  # -1 closed, +1 open
    buttons: frozenset = frozenset()  # names from BUTTONS pressed since the last poll

    def pressed(self, name: str) -> bool:
        return name in self.buttons


def command_action(cmd: DeviceCommand, action_dim: int, use_yaw: bool) -> np.ndarray:
    """Normalized ee_delta action [action_dim] = [dx, dy, dz, (dyaw,) grip] from a device command."""
    if action_dim != (5 if use_yaw else 4):
        raise ValueError(
            f"teleop devices drive ee_delta actions ([dx, dy, dz, (dyaw,) grip]); the env has action_dim={action_dim}. "
            "Make the env with env.action_space=ee_delta"
        )
    parts = [cmd.motion[:3], cmd.motion[3:4] if use_yaw else [], [cmd.grip]]
    return np.clip(np.concatenate(parts), -1.0, 1.0).astype(np.float32)


def deadzone(x: np.ndarray, dz: float) -> np.ndarray:
    """Zero inside |x| < dz, rescaled so the output still spans [-1, 1] (no jump at the edge)."""
    x = np.clip(np.asarray(x, dtype=np.float64), -1.0, 1.0)
    if dz <= 0:
        return x
    return np.sign(x) * np.clip((np.abs(x) - dz) / (1.0 - dz), 0.0, 1.0)


class Device(abc.ABC):
    """A teleop device. `poll()` is called once per control step and must not block."""

    name: str = ""

    def __init__(self):
        self.grip = 1.0  # open; devices toggle it with a button

    @abc.abstractmethod
    def poll(self) -> DeviceCommand:
        """Everything that happened since the last poll. Raises DeviceDisconnected when the device is gone."""

    def set_grip(self, grip: float) -> None:
        """Start from this gripper command (on take-over: the policy's, so the object is not dropped)."""
        self.grip = 1.0 if grip >= 0 else -1.0

    def toggle_grip(self) -> None:
        self.grip = -self.grip

    def close(self) -> None:
        """Release the backend (file handles, listener threads)."""
