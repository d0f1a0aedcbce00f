"""Differential IK and rotation helpers over an array namespace (numpy batched [..., ] or jax per-env).

The arm Jacobian is built from joint anchors and axes read from frame sensors (see robot.py), so the same
function serves MuJoCo C and MJX.
"""

from __future__ import annotations

import numpy as np


# Cyclic index pairs: (a x b)_i = a_I[i] b_J[i] - a_J[i] b_I[i]; one gather per operand instead of nine slices
# (np.cross costs ~3x more than this on small batched arrays).
_I = np.array([1, 2, 0])
_J = np.array([2, 0, 1])
_EYE6 = np.eye(6)


def cross(xp, a, b):
    """Cross product over the last axis [..., 3], broadcasting."""
    return a[..., _I] * b[..., _J] - a[..., _J] * b[..., _I]


def arm_jacobian(xp, anchors, axes, point):
    """Geometric Jacobian [..., 6, n] of `point` [..., 3] for n revolute joints (anchors/axes [..., n, 3])."""
    lin = cross(xp, axes, point[..., None, :] - anchors)  # [..., n, 3]
    return xp.concatenate([xp.swapaxes(lin, -1, -2), xp.swapaxes(axes, -1, -2)], axis=-2)


def down_frame(xp, yaw):
    """Gripper-down frame with yaw about world z, [..., 3, 3]: rows are the x, y, z axes in world coordinates."""
    c, s = xp.cos(yaw), xp.sin(yaw)
    z = xp.zeros_like(c)
    return xp.stack([c, s, z, s, -c, z, z, z, z - 1.0], axis=-1).reshape(c.shape + (3, 3))


def orientation_error(xp, cur, des):
    """Small-angle rotation (axis * angle, world frame) [..., 3] taking frame `cur` to `des` (rows = axes).

    0.5 * sum_a cur_a x des_a, computed as the antisymmetric part of M = cur^T des (one matmul, one gather).
    """
    m = xp.swapaxes(cur, -1, -2) @ des
    return 0.5 * (m[..., _I, _J] - m[..., _J, _I])


def gripper_yaw(xp, x_axis):
    """Yaw of the gripper's x axis in the world xy-plane (rad)."""
    return xp.arctan2(x_axis[..., 1], x_axis[..., 0])


def dls_step(xp, jac, err, q, q_rest, damping: float, null_gain: float):
    """Damped-least-squares joint step [..., n] for task error [..., 6], plus a null-space pull to q_rest.

    dq = J^T (J J^T + damping^2 I)^-1 e + (I - J^+ J) null_gain (q_rest - q)

    The projector uses a nearly undamped J^+: with the task damping, (I - J^+ J) leaks about 2% of the
    posture pull into end-effector motion (~1 mm per step), too much for millimetre fits. J^+ J keeps
    its eigenvalues in [0, 1] near singularities, so the small damping is safe. The projector is applied
    to the pull vector only (J^+ (J pull)), so both solves have a single right-hand side.
    """
    jt = xp.swapaxes(jac, -1, -2)
    jjt = jac @ jt
    eye = xp.asarray(_EYE6, dtype=jac.dtype)
    dq_task = jt @ xp.linalg.solve(jjt + (damping**2) * eye, err[..., :, None])
    pull = (null_gain * (q_rest - q))[..., :, None]
    dq_null = pull - jt @ xp.linalg.solve(jjt + 1e-6 * eye, jac @ pull)
    return (dq_task + dq_null)[..., 0]


def quat_to_yaw(xp, quat):
    """Yaw (rad) of a body whose quaternion [..., 4] (w, x, y, z) rotates mostly about z."""
    w, x, y, z = quat[..., 0], quat[..., 1], quat[..., 2], quat[..., 3]
    return xp.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def quat_z_axis(xp, quat):
    """World direction of a body's local z axis from its quaternion [..., 4] (w, x, y, z)."""
    w, x, y, z = quat[..., 0], quat[..., 1], quat[..., 2], quat[..., 3]
    return xp.stack([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)], axis=-1)


def yaw_quat(xp, yaw):
    """Quaternion (w, x, y, z) [..., 4] of a rotation by yaw about world z."""
    h = 0.5 * yaw
    zero = xp.zeros_like(h)
    return xp.stack([xp.cos(h), zero, zero, xp.sin(h)], axis=-1)


def wrap_angle(xp, a, period: float = 2 * np.pi):
    """Wrap angles into [-period/2, period/2)."""
    return (a + 0.5 * period) % period - 0.5 * period
