"""Rewind for the MuJoCo C env: snapshots of the host-side state before each step, restored on demand.

The batched env API has no state get/set, so this reaches into sim/backends/mujoco_cpu.MujocoEnv's
arrays (physics state, sensors, mocap, controls, latency buffer, step counters). Observation noise is a
function of (key, episode, step), so a restored state observes exactly as it did the first time.
"""

from __future__ import annotations

import collections

import numpy as np

FIELDS = ("state", "sensordata", "mocap_pos", "ctrl", "latency_buf", "steps", "ret", "target")


class Rewinder:
    def __init__(self, env, max_steps: int):
        if getattr(env, "backend", None) != "mujoco" or not all(hasattr(env, f) for f in FIELDS):
            raise ValueError("rewind needs the MuJoCo C env (backend=mujoco); set backend=mujoco or hil.rewind_steps=0")
        if max_steps < 1:
            raise ValueError(f"rewind_steps={max_steps} must be >= 1")
        self.env = env
        self._snaps: collections.deque = collections.deque(maxlen=int(max_steps))

    def __len__(self) -> int:
        return len(self._snaps)

    def push(self) -> None:
        """Snapshot the current state (call right before env.step)."""
        self._snaps.append({f: np.array(getattr(self.env, f), copy=True) for f in FIELDS})

    def clear(self) -> None:
        self._snaps.clear()

    def back(self, steps: int) -> tuple[dict, int]:
        """Restore the state `steps` steps back (fewer if fewer were kept); (observation, steps undone)."""
        k = min(int(steps), len(self._snaps))
        if k == 0:
            return self.env._observe(), 0
        for _ in range(k - 1):
            self._snaps.pop()
        snap = self._snaps.pop()
        for f, v in snap.items():
            getattr(self.env, f)[...] = v
        return self.env._observe(), k
