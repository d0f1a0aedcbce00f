"""The safety layer: every command the node sends and every message it reads passes through here.

Rules (each counted in `counts` when it acts, each tested in tests/test_real_safety.py):
  inputs     a JointState must name exactly the configured joints (any order, each once), carry one
             position per name and zero or one velocity per name, all finite; otherwise it is rejected.
             Vectors from other topics (teleop actions, object poses) must have the expected length and
             be finite. Rejected messages never reach the policy or the command; each is counted as
             rejected_<topic>_<kind> (status and metrics) and the first of each kind is logged.
  commands   a candidate joint command is limited against the last command SENT (a tick's, a late chunk's, a
             hold), over the real time since it was sent, dt = min(now - then, 1.5 / rate_hz) (a tick that runs
             late makes up for half a tick at most). A candidate holding NaN/inf is replaced by the last command;
             otherwise it is clipped per joint into the intersection of
               [lower, upper]                              position limits,
               last command +- velocity * dt               velocity limit over wall-clock time,
               measured position +- max_step               tracking gap (no target far from the robot);
             when the last two cannot both hold (the robot lags the command by more than max_step plus a
             step), the command moves from the last one toward the measured position as fast as the
             velocity limit allows. Position and velocity limits hold for every command, always. Where a joint
             has an `acceleration` limit, the command's speed may grow by at most acceleration * dt over the
             last command's; slowing down is never limited (a stop is not delayed, a target not overshot), and
             the acceleration rule gives way when the others leave no room for it.
             Then the end-effector position of the command (forward kinematics of the same MJCF) must lie in
             the workspace box; if not, the command is pulled back along the segment from the last command
             (bisection), so it never leaves the box, and never moves farther out if it started outside.
             A hold repeats the last command (speed 0 from then on). The time of a command is when its publish
             returned (sent()), so a delay between filtering and publishing never turns into a faster move on
             the wire.
  watchdog   joint states older than hold_after_s: hold the last command; older than stop_after_s:
             latched stop. With deploy.estop_heartbeat_s, no e-stop message for that long: latched stop. Before
             its first command the node listens deploy.estop_listen_s on the e-stop topic (WAITING), or until an
             e-stop message arrives, so a pressed e-stop's last value reaches a node that just started.
  latches    every e-stop message with data=true (each one is read: the node's e-stop reader queues them),
             stale joint states past stop_after_s, a lost e-stop heartbeat and a policy exception latch a stop.
             While stopped nothing is commanded (the controller holds its last command). Only an explicit reset
             clears the latch (this run's token, or the operator's local reset: real/node_io.py), and only when
             the e-stop is released (its heartbeat alive, if required) and joint states are fresh. An e-stop
             message with data=false alone clears nothing.
"""

from __future__ import annotations

import collections
import enum
from typing import Callable

import numpy as np

from robot_rl.real.config import DeployConfig


class Mode(str, enum.Enum):
    WAITING = "waiting"  # no valid joint state yet: nothing is commanded
    RUNNING = "running"
    HOLDING = "holding"  # joint states (or the object pose) are stale: the last command is repeated
    STOPPED = "stopped"  # latched: nothing is commanded until a reset


class SafetyFilter:
    def __init__(self, cfg: DeployConfig, ee_pos: Callable[[np.ndarray], np.ndarray], log: Callable[[str], None] = print):
        """ee_pos(command [n]) -> end-effector position [3] (m) of a command vector in cfg.joints order; log: where the
        first rejection of each kind is reported."""
        self.joints = list(cfg.joints)
        lim = [cfg.limits[j] for j in self.joints]
        self.lower = np.array([x.lower for x in lim])
        self.upper = np.array([x.upper for x in lim])
        self.velocity = np.array([x.velocity for x in lim])  # per second
        self.acceleration = np.array([np.inf if x.acceleration is None else x.acceleration for x in lim])
        self.max_dt = 1.5 * cfg.dt  # s: the most time one command may use for its move
        self.max_step = np.array([x.max_step for x in lim])
        self.ws_low = np.asarray(cfg.workspace_low, dtype=np.float64)
        self.ws_high = np.asarray(cfg.workspace_high, dtype=np.float64)
        self.hold_after = cfg.watchdog.hold_after_s
        self.stop_after = cfg.watchdog.stop_after_s
        self.heartbeat_s = cfg.estop_heartbeat_s
        self.listen_s = cfg.estop_listen_s
        self.ee_pos, self.log = ee_pos, log
        self.counts: collections.Counter = collections.Counter()
        self.last: np.ndarray | None = None  # the last command sent
        self.sent_t = 0.0  # when it was sent (time.monotonic())
        self.speed = np.zeros(len(self.joints))  # its velocity (per second, signed)
        self.stop_reason: str | None = None
        self.estop_asserted = False
        self.estop_t: float | None = None  # receipt of the last e-stop message
        self.started_t: float | None = None  # the node's start (arm())
        self.last_rejection = ""

    # ---- inputs -----------------------------------------------------------------------------------
    def reject(self, counter: str, why: str) -> None:
        """Count a rejected input under `counter` (rejected_<topic>_<kind>), keep `why` for the status, log the first."""
        self.counts[counter] += 1
        self.last_rejection = why
        if self.counts[counter] == 1:
            self.log(f"rejected input ({counter}): {why}; counted in the status, further ones are not logged")

    def check_joint_state(self, names, position, velocity) -> tuple[np.ndarray, np.ndarray | None] | None:
        """(positions [n], velocities [n] or None) in cfg.joints order, or None (rejected, counted)."""
        names = list(names)
        if len(names) != len(set(names)) or set(names) != set(self.joints):
            unknown = sorted(set(names) - set(self.joints))
            missing = sorted(set(self.joints) - set(names))
            self.reject("rejected_joint_state_names",
                         f"joint state names: unknown {unknown[:5]}, missing {missing}, {len(names)} names")
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
        """`values` as a float array [dim], or None (rejected, counted as rejected_<what>_length | _nonfinite)."""
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (dim,):
            self.reject(f"rejected_{what}_length", f"{what} has {v.size} values, expected {dim}")
            return None
        if not np.isfinite(v).all():
            self.reject(f"rejected_{what}_nonfinite", f"{what} holds NaN or inf")
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

    def arm(self, now: float) -> None:
        """The node starts at `now`: the e-stop listening period and heartbeat count from here."""
        self.started_t = now

    def on_estop(self, asserted: bool, t: float) -> None:
        """One e-stop message, received at t (every one: a press is never skipped for a later release)."""
        self.estop_asserted = bool(asserted)
        self.estop_t = t
        if asserted:
            self.counts["estop_presses"] += 1
            self.latch("e-stop")

    def _heartbeat_age(self, now: float) -> float | None:
        """Seconds without an e-stop message when a heartbeat is required and overdue, else None."""
        if self.heartbeat_s is None or self.started_t is None:
            return None
        age = now - (self.estop_t if self.estop_t is not None else self.started_t)
        return age if age > self.heartbeat_s else None

    def request_reset(self, now: float, last_state_t: float | None) -> str | None:
        """Clear a latched stop. Returns None on success, else why the reset is refused."""
        if self.estop_asserted:
            return "e-stop still asserted: publish data=false on the e-stop topic first"
        age = self._heartbeat_age(now)
        if age is not None:
            return f"no e-stop message for {age:.2f} s (deploy.estop_heartbeat_s={self.heartbeat_s}): start the e-stop publisher"
        if last_state_t is None or now - last_state_t > self.hold_after:
            return "joint states are stale or missing"
        self.stop_reason = None
        self.last = None  # restart from the measured position
        self.counts["resets"] += 1
        return None

    # ---- watchdog ---------------------------------------------------------------------------------
    def watchdog(self, now: float, last_state_t: float | None) -> Mode:
        age = self._heartbeat_age(now)
        if age is not None:
            self.latch(f"e-stop heartbeat lost: no e-stop message for {age:.2f} s (> deploy.estop_heartbeat_s="
                       f"{self.heartbeat_s})")
        if self.stopped:
            return Mode.STOPPED
        if last_state_t is None:
            return Mode.WAITING
        if self.last is None and self.estop_t is None and self.started_t is not None and now - self.started_t < self.listen_s:
            return Mode.WAITING  # listening for a pressed e-stop's last value before the first command
        age = now - last_state_t
        if age > self.stop_after:
            self.latch(f"joint states stale for {age:.3f} s (> stop_after_s={self.stop_after})")
            return Mode.STOPPED
        if age > self.hold_after:
            self.counts["stale_hold_ticks"] += 1
            return Mode.HOLDING
        return Mode.RUNNING

    # ---- commands ---------------------------------------------------------------------------------
    def start(self, measured: np.ndarray, now: float) -> np.ndarray:
        """First command after start / reset / a new episode: the measured position, clipped into the limits, at rest."""
        self.last = np.clip(np.asarray(measured, dtype=np.float64), self.lower, self.upper)
        self.sent_t, self.speed = now, np.zeros_like(self.last)
        return self.last.copy()

    def hold(self, now: float) -> np.ndarray:
        """The last command again, sent at `now` (speed 0 from here)."""
        self.sent_t, self.speed = now, np.zeros_like(self.last)
        return self.last.copy()

    def sent(self, t: float) -> None:
        """The last command went out (publish returned) at `t`: the next one is limited over the time from here. A
        thread preempted between filter() and the publish then leaves a shorter gap on the wire, never a faster move."""
        self.sent_t = t

    def _outside(self, q: np.ndarray) -> float:
        """Distance (m) of the command's end effector outside the workspace box (0 inside)."""
        p = self.ee_pos(q)
        return float(np.linalg.norm(np.maximum(self.ws_low - p, 0.0) + np.maximum(p - self.ws_high, 0.0)))

    def filter(self, candidate: np.ndarray, measured: np.ndarray, now: float) -> np.ndarray:
        """The command to send at `now` (time.monotonic()) [n] for a candidate [n] given the measured positions [n];
        becomes `last`."""
        if self.last is None:
            self.start(measured, now)
        prev = self.last
        cand = np.asarray(candidate, dtype=np.float64)
        if cand.shape != prev.shape or not np.isfinite(cand).all():
            self.counts["nonfinite_commands"] += 1
            return self.hold(now)
        dt = min(now - self.sent_t, self.max_dt)
        if dt <= 0.0:  # sent at the same instant as the last one: nothing may move
            return prev.copy()
        reach = self.velocity * dt
        hard_lo = np.maximum(self.lower, prev - reach)
        hard_hi = np.minimum(self.upper, prev + reach)
        lo = np.maximum(hard_lo, measured - self.max_step)
        hi = np.minimum(hard_hi, measured + self.max_step)
        lagging = lo > hi
        # speed may grow by acceleration * dt; slowing down (toward speed 0, or to it) is free
        grow = self.acceleration * dt * dt
        acc_lo = np.minimum(self.speed, 0.0) * dt - grow
        acc_hi = np.maximum(self.speed, 0.0) * dt + grow
        move = cand - prev
        q = np.where(lagging, np.clip(measured, hard_lo, hard_hi), np.clip(prev + np.clip(move, acc_lo, acc_hi), lo, hi))
        if np.any(cand < self.lower) or np.any(cand > self.upper):
            self.counts["clipped_position"] += 1
        if np.any(np.abs(move) > reach):
            self.counts["clipped_velocity"] += 1
        if np.any((move < acc_lo) | (move > acc_hi)):
            self.counts["clipped_acceleration"] += 1
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
        self.last, self.sent_t, self.speed = q, now, (q - prev) / dt
        return q.copy()
