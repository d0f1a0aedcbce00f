"""Audit joint commands as the robot received them: joint, velocity and workspace limits over wall-clock time.

    report = audit(t, q, cfg, ee_pos)    # t [N] receipt times (s, non-decreasing), q [N, n] commands (cfg.joints order)

What the safety filter promises, checked from the outside (tests/test_real_node_safety.py, bench/deploy_safety.py;
a recorded rosbag's command topic can be audited the same way). Velocity is checked between every pair of commands
less than `window_s` apart, not only between neighbours: an extra command between two ticks can look fine against
each neighbour while the pair around it moves faster than the limit. `slack_s` is the timing uncertainty of the
receipt times (a receiver that takes two commands in one wake-up stamps them alike): a pair violates the limit
when |q_j - q_i| > velocity * (t_j - t_i + slack_s) for some joint. `excess_ms` is the largest
|q_j - q_i| / velocity - (t_j - t_i) over all pairs and joints: how much sooner than the limit allows a command
got somewhere (<= 0 when every pair kept the limit exactly).
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def audit(t, q, cfg, ee_pos: Callable[[np.ndarray], np.ndarray], *, window_s: float = 0.5,
          slack_s: float = 0.005) -> dict:
    """Counts of commands outside the joint limits, pairs over the velocity limit, commands whose end effector
    (ee_pos(command) -> [3] m) leaves deploy.workspace_low/high; plus `excess_ms` and the number of commands."""
    t = np.asarray(t, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64).reshape(len(t), len(cfg.joints))
    lim = [cfg.limits[j] for j in cfg.joints]
    lower, upper = np.array([x.lower for x in lim]), np.array([x.upper for x in lim])
    velocity = np.array([x.velocity for x in lim])
    finite = np.isfinite(q).all(axis=1)
    joint = int(np.sum(~finite | np.any((q < lower - 1e-9) | (q > upper + 1e-9), axis=1)))
    ee = np.array([ee_pos(x) for x in q[finite]]).reshape(-1, 3)
    lo, hi = np.asarray(cfg.workspace_low), np.asarray(cfg.workspace_high)
    workspace = int(np.sum(np.any((ee < lo - 1e-6) | (ee > hi + 1e-6), axis=1)))
    violations, worst = 0, -np.inf
    for k in range(1, len(t)):
        dt = t[k:] - t[:-k]
        near = dt <= window_s
        if not near.any():
            break  # receipt times are sorted: every longer lag spans more time
        needed = np.abs(q[k:][near] - q[:-k][near]) / velocity  # s the limit needs for each pair's move
        excess = needed - dt[near][:, None]  # NaN where a command is not finite (counted above)
        if not np.isnan(excess).all():
            worst = max(worst, float(np.nanmax(excess)))
        violations += int(np.sum(np.any(excess > slack_s, axis=1)))
    return {"commands": len(t), "joint_violations": joint, "velocity_violations": violations,
            "workspace_violations": workspace, "excess_ms": worst * 1e3 if np.isfinite(worst) else None,
            "slack_ms": slack_s * 1e3, "window_s": window_s}
