"""The safety layer: every command the node sends and every message it reads passes through here.

Rules (each counted in `counts` when it acts, each tested in tests/test_real_safety.py):
  inputs     a JointState must name exactly the configured joints (any order, each once), carry one
             position per name and zero or one velocity per name, all finite; otherwise it is rejected.
             Vectors from other topics (teleop actions, object poses) must have the expected length and
             be finite. Rejected messages never reach the policy or the command.
  commands   a candidate joint command is replaced by the last command if it holds NaN/inf; otherwise it
             is clipped per joint into the intersection of
               [lower, upper]                              position limits,
               last command +- velocity / rate_hz          velocity (per-tick step) limit,
               measured position +- max_step               tracking gap (no target far from the robot);
             when the last two cannot both hold (the robot lags the command by more than max_step plus a
             tick's step), the command moves from the last one toward the measured position as fast as the
             velocity limit allows. Position and velocity limits hold for every command, always.
             Then the end-effector position of the command (forward kinematics of the same MJCF) must lie in
             the workspace box; if not, the command is pulled back along the segment from the last command
             (bisection), so it never leaves the box, and never moves farther out if it started outside.
  watchdog   joint states older than hold_after_s: hold the last command; older than stop_after_s:
             latched stop.
  latches    an e-stop message with data=true, stale joint states past stop_after_s, and a policy
             exception latch a stop. While stopped nothing is commanded (the controller holds its last
             command). Only an explicit reset clears the latch, and only when the e-stop is released and
             joint states are fresh. An e-stop message with data=false alone clears nothing.
"""

from __future__ import annotations

import collections
import enum
from typing import Callable

import numpy as np

from real.config import DeployConfig


class Mode(str, enum.Enum):
    WAITING = "waiting"  # no valid joint state yet: nothing is commanded
    RUNNING = "running"
    HOLDING = "holding"  # joint states (or the object pose) are stale: the last command is repeated
    STOPPED = "stopped"  # latched: nothing is commanded until a reset


class SafetyFilter:
    def __init__(self, cfg: DeployConfig, ee_pos: Callable[[np.ndarray], np.ndarray]):
        """ee_pos(command [n]) -> end-effector position [3] (m) of a command vector in cfg.joints order."""
        self.joints = list(cfg.joints)
        self._index = {j: i for i, j in enumerate(self.joints)}
        lim = [cfg.limits[j] for j in self.joints]
        self.lower = np.array([x.lower for x in lim])
        self.upper = np.array([x.upper for x in lim])
        self.max_delta = np.array([x.velocity for x in lim]) * cfg.dt  # per tick
        self.max_step = np.array([x.max_step for x in lim])
        self.ws_low = np.asarray(cfg.workspace_low, dtype=np.float64)
        self.ws_high = np.asarray(cfg.workspace_high, dtype=np.float64)
        self.hold_after = cfg.watchdog.hold_after_s
        self.stop_after = cfg.watchdog.stop_after_s
        self.ee_pos = ee_pos
        self.counts: collections.Counter = collections.Counter()
        self.last: np.ndarray | None = None  # the last command let through
        self.stop_reason: str | None = None
        self.estop_asserted = False
        self.last_rejection = ""

    # ---- inputs -----------------------------------------------------------------------------------
    def reject(self, counter: str, why: str) -> None:
        """Count a rejected input under `counter` and keep `why` for the status."""
        self.counts[counter] += 1
        self.last_rejection = why

    def check_joint_state(self, names, position, velocity) -> tuple[np.ndarray, np.ndarray | None] | None:
        """(positions [n], velocities [n] or None) in cfg.joints order, or None (rejected, counted)."""
        names = list(names)
        if len(names) != len(set(names)) or set(names) != set(self.joints):
            unknown = sorted(set(names) - set(self.joints))
            missing = sorted(set(self.joints) - set(names))
            self.reject("rejected_joint_state_names",
                         f"joint state names: unknown {unknown}, missing {missing}, {len(names)} names")
            return None
        if len(position) != len(names) or len(velocity) not in (0, len(names)):
            self.reject("rejected_joint_state_count",
                         f"joint state has {len(names)} names, {len(position)} positions, {len(velocity)} velocities")
            return None
        order = np.array([names.index(j) for j in self.joints])
        q = np.asarray(position, dtype=np.float64)[order]
        qd = np.asarray(velocity, dtype=np.float64)[order] if len(velocity) else None
        if not np.isfinite(q).all() or (qd is not None and not np.isfinite(qd).all()):
            self.reject("rejected_joint_state_nonfinite", "joint state holds NaN or inf")
            return None
        return q, qd

    def check_vector(self, what: str, values, dim: int) -> np.ndarray | None:
        """`values` as a float array [dim], or None (rejected, counted as rejected_<what>)."""
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (dim,):
            self.reject(f"rejected_{what}", f"{what} has {v.size} values, expected {dim}")
            return None
        if not np.isfinite(v).all():
            self.reject(f"rejected_{what}", f"{what} holds NaN or inf")
            return None
        return v

    # ---- latches ----------------------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        return self.stop_reason is not None

    def latch(self, reason: str) -> None:
        """Latched stop (the first reason is kept until a reset)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.counts["stops"] += 1

    def on_estop(self, asserted: bool) -> None:
        self.estop_asserted = bool(asserted)
        if asserted:
            self.latch("e-stop")

    def request_reset(self, now: float, last_state_t: float | None) -> str | None:
        """Clear a latched stop. Returns None on success, else why the reset is refused."""
        if self.estop_asserted:
            return "e-stop still asserted: publish data=false on the e-stop topic first"
        if last_state_t is None or now - last_state_t > self.hold_after:
            return "joint states are stale or missing"
        self.stop_reason = None
        self.last = None  # restart from the measured position
        self.counts["resets"] += 1
        return None

    # ---- watchdog ---------------------------------------------------------------------------------
    def watchdog(self, now: float, last_state_t: float | None) -> Mode:
        if self.stopped:
            return Mode.STOPPED
        if last_state_t is None:
            return Mode.WAITING
        age = now - last_state_t
        if age > self.stop_after:
            self.latch(f"joint states stale for {age:.3f} s (> stop_after_s={self.stop_after})")
            return Mode.STOPPED
        if age > self.hold_after:
            self.counts["stale_hold_ticks"] += 1
            return Mode.HOLDING
        return Mode.RUNNING

    # ---- commands ---------------------------------------------------------------------------------
    def start(self, measured: np.ndarray) -> np.ndarray:
        """First command after start / reset: the measured position, clipped into the limits."""
        self.last = np.clip(np.asarray(measured, dtype=np.float64), self.lower, self.upper)
        return self.last.copy()

    def hold(self) -> np.ndarray:
        return self.last.copy()

    def _outside(self, q: np.ndarray) -> float:
        """Distance (m) of the command's end effector outside the workspace box (0 inside)."""
        p = self.ee_pos(q)
        return float(np.linalg.norm(np.maximum(self.ws_low - p, 0.0) + np.maximum(p - self.ws_high, 0.0)))

    def filter(self, candidate: np.ndarray, measured: np.ndarray) -> np.ndarray:
        """The command to send [n] for a candidate [n] given the measured positions [n]; becomes `last`."""
        if self.last is None:
            self.start(measured)
        prev = self.last
        cand = np.asarray(candidate, dtype=np.float64)
        if cand.shape != prev.shape or not np.isfinite(cand).all():
            self.counts["nonfinite_commands"] += 1
            return prev.copy()
        hard_lo = np.maximum(self.lower, prev - self.max_delta)
        hard_hi = np.minimum(self.upper, prev + self.max_delta)
        lo = np.maximum(hard_lo, measured - self.max_step)
        hi = np.minimum(hard_hi, measured + self.max_step)
        lagging = lo > hi
        q = np.where(lagging, np.clip(measured, hard_lo, hard_hi), np.clip(cand, lo, hi))
        if np.any(cand < self.lower) or np.any(cand > self.upper):
            self.counts["clipped_position"] += 1
        if np.any(np.abs(cand - prev) > self.max_delta):
            self.counts["clipped_velocity"] += 1
        if np.any(np.abs(cand - measured) > self.max_step):
            self.counts["clipped_step"] += 1
        d_prev = self._outside(prev)
        if self._outside(q) > d_prev + 1e-9:
            self.counts["clipped_workspace"] += 1
            ok, bad = 0.0, 1.0
            for _ in range(10):  # 1/1024 of the step
                mid = 0.5 * (ok + bad)
                if self._outside(prev + mid * (q - prev)) <= d_prev + 1e-9:
                    ok = mid
                else:
                    bad = mid
            q = prev + ok * (q - prev)
        self.last = q
        return q.copy()
