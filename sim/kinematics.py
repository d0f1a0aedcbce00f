"""Differential IK and rotation helpers over an array namespace (numpy batched [..., ] or jax per-env).

The arm Jacobian is built from joint anchors and axes read from frame sensors (see robot.py), so the same
function serves MuJoCo C and MJX.
"""

from __future__ import annotations

import numpy as np


def cross(xp, a, b):
    # Written out: np.cross costs ~10x more than this on small batched arrays.
    return xp.stack(
        [
            a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
            a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
            a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0],
        ],
        axis=-1,
    )


def arm_jacobian(xp, anchors, axes, point):
    """Geometric Jacobian [..., 6, 7] of `point` [..., 3] for revolute joints (anchors/axes [..., 7, 3])."""
    lin = cross(xp, axes, point[..., None, :] - anchors)  # [..., 7, 3]
    return xp.concatenate([xp.swapaxes(lin, -1, -2), xp.swapaxes(axes, -1, -2)], axis=-2)


def down_frame(xp, yaw):
    """Gripper-down rotation with yaw about world z: columns x, y, z, shape [..., 3, 3]."""
    c, s = xp.cos(yaw), xp.sin(yaw)
    z = xp.zeros_like(c)
    x_axis = xp.stack([c, s, z], axis=-1)
    y_axis = xp.stack([s, -c, z], axis=-1)
    z_axis = xp.stack([z, z, z - 1.0], axis=-1)
    return x_axis, y_axis, z_axis


def orientation_error(xp, cur_axes, des_axes):
    """Small-angle rotation (axis * angle, world frame) taking the current frame to the desired one."""
    return 0.5 * cross(xp, xp.stack(cur_axes, axis=-2), xp.stack(des_axes, axis=-2)).sum(axis=-2)


def gripper_yaw(xp, x_axis):
    """Yaw of the gripper's x axis in the world xy-plane (rad)."""
    return xp.arctan2(x_axis[..., 1], x_axis[..., 0])


def dls_step(xp, jac, err, q, q_rest, damping: float, null_gain: float):
    """Damped-least-squares joint step [..., 7] for task error [..., 6], plus a null-space pull to q_rest.

    dq = J^T (J J^T + damping^2 I)^-1 e + (I - J^+ J) null_gain (q_rest - q)

    The projector uses a nearly undamped J^+: with the task damping, (I - J^+ J) leaks about 2% of the
    posture pull into end-effector motion (~1 mm per step), too much for millimetre fits. J^+ J keeps
    its eigenvalues in [0, 1] near singularities, so the small damping is safe.
    """
    jt = xp.swapaxes(jac, -1, -2)
    eye = xp.eye(6, dtype=jac.dtype)
    jjt = jac @ jt
    dq_task = (jt @ xp.linalg.solve(jjt + (damping**2) * eye, err[..., :, None]))[..., 0]
    j_pinv_j = jt @ xp.linalg.solve(jjt + 1e-6 * eye, jac)  # [..., 7, 7]
    pull = null_gain * (q_rest - q)
    dq_null = pull - (j_pinv_j @ pull[..., None])[..., 0]
    return dq_task + dq_null


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
