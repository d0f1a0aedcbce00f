"""Human-in-the-loop: teleop devices, the scripted human, the intervention protocol, teleop sessions.

    from robot_rl.hil import InterventionController, ScriptedHuman, ScriptedHumanConfig
    hil = InterventionController(env.num_envs, ScriptedHuman(env, ScriptedHumanConfig(max_fraction=0.15)))

`open_device(name, settings)` opens keyboard / spacemouse / gamepad (backends imported lazily; a missing
package or device raises DeviceUnavailable naming the alternatives).
"""

from __future__ import annotations

from robot_rl.hil.device import (
    BUTTONS, DEVICES, Device, DeviceCommand, DeviceDisconnected, DeviceUnavailable, command_action,
)
from robot_rl.hil.intervention import (
    Decision, DeviceSupervisor, EpisodeInterventions, InterventionController, summary,
)
from robot_rl.hil.scripted import ScriptedHuman, ScriptedHumanConfig


def open_device(name: str, settings: dict, viewer_keys=None) -> Device:
    """A physical device from its settings (the `keyboard` / `spacemouse` / `gamepad` node of teleop.yaml).

    viewer_keys: the EventQueue fed by MuJoCo viewer's key_callback, used by keyboard.backend=auto/viewer."""
    s = dict(settings)
    if name == "keyboard":
        from robot_rl.hil import keyboard as kb

        backend = s.pop("backend", "auto")
        if backend == "auto":
            backend = "viewer" if viewer_keys is not None else "terminal"
        if backend == "viewer":
            if viewer_keys is None:
                raise DeviceUnavailable("device=keyboard: keyboard.backend=viewer needs the MuJoCo viewer (viewer=true, "
                                        "and a display); use keyboard.backend=terminal")
            source = viewer_keys
        elif backend == "terminal":
            source = kb.TerminalSource()
        elif backend == "pynput":
            source = kb.pynput_source()
        else:
            raise ValueError(f"keyboard.backend={backend!r}; valid: auto, viewer, terminal, pynput")
        return kb.KeyboardDevice(source, **s)
    if name == "spacemouse":
        from robot_rl.hil.spacemouse import HidReader, SpaceMouseDevice

        return SpaceMouseDevice(HidReader(), **s)
    if name == "gamepad":
        from robot_rl.hil import gamepad as gp

        backend, path = s.pop("backend", "evdev"), s.pop("path", None)
        if backend == "evdev":
            source = gp.EvdevSource(path)
        elif backend == "pygame":
            source = gp.PygameSource()
        else:
            raise ValueError(f"gamepad.backend={backend!r}; valid: evdev, pygame")
        return gp.GamepadDevice(source, **s)
    raise ValueError(f"device={name!r}; valid: {', '.join(DEVICES)}")


__all__ = [
    "BUTTONS", "DEVICES", "Decision", "Device", "DeviceCommand", "DeviceDisconnected", "DeviceSupervisor",
    "DeviceUnavailable", "EpisodeInterventions", "InterventionController", "ScriptedHuman", "ScriptedHumanConfig",
    "command_action", "open_device", "summary",
]
