"""Action spaces: normalized actions in [-1, 1] -> actuator targets, as shared array code.

ee_delta  [dx, dy, dz, (dyaw,) grip]: end-effector displacement (m, scaled by max_ee_delta) and yaw change,
          turned into joint position targets by one damped-least-squares IK step from the current state;
          the gripper points down. grip: -1 closed, +1 fully open (the robot's Gripper).
joint_pos [q1..qn, grip]: absolute targets of the robot's n arm joints, -1/+1 at its published joint limits.
"""

from __future__ import annotations

import numpy as np

from robot_rl.sim import kinematics as kin
from robot_rl.sim.config import EnvConfig
from robot_rl.sim.task import Phys, Task


def checked_actions(action, num_envs: int, action_dim: int, what: str) -> np.ndarray:
    """`action` as float32 [num_envs, action_dim], or ValueError naming the shape or the envs with NaN / inf (`what`:
    the env's action space and task, for the message)."""
    a = np.asarray(action, dtype=np.float32)
    expected = (num_envs, action_dim)
    if a.shape != expected:
        raise ValueError(f"action has shape {a.shape}, expected {expected} (num_envs, action_dim) for {what}")
    bad = ~np.isfinite(a)
    if bad.any():
        envs = sorted(set(np.nonzero(bad)[0].tolist()))
        raise ValueError(f"action contains NaN or inf for env(s) {envs[:10]}; actions must be finite")
    return a


class ActionSpace:
    def __init__(self, cfg: EnvConfig, task: Task):
        self.kind = cfg.action_space
        self.cfg = cfg
        self.task = task
        self.use_yaw = bool(task.cfg.use_yaw)
        self.robot = task.robot
        if self.kind == "ee_delta":
            self.dim = 5 if self.use_yaw else 4
        else:
            self.dim = self.robot.n_arm + 1
        self._lower = self.robot.arm_lower + 0.01
        self._upper = self.robot.arm_upper - 0.01
        self._ws_low = np.asarray(cfg.workspace_low, dtype=np.float64)
        self._ws_high = np.asarray(cfg.workspace_high, dtype=np.float64)
        self._down = kin.down_frame(np, 0.0)  # gripper pointing down, yaw 0
        self.max_ee_delta = float(cfg.max_ee_delta)  # m one unit of an ee_delta action moves the hand per tick
        self.max_yaw_delta = float(cfg.max_yaw_delta)  # rad one unit of the yaw entry turns it per tick
        self.low = -np.ones(self.dim, dtype=np.float32)
        self.high = np.ones(self.dim, dtype=np.float32)

    @property
    def neutral(self) -> np.ndarray:
        """Hold still with the gripper open (joint_pos: the home posture)."""
        if self.kind == "ee_delta":
            a = np.zeros(self.dim, dtype=np.float32)
        else:
            # the joint_pos action whose targets (to_ctrl: the limits less a 0.01 rad margin) are the home posture
            a = (2 * (self.robot.home_qpos - self._lower) / (self._upper - self._lower) - 1).astype(np.float32)
            a = np.append(a, 0.0).astype(np.float32)
        a[-1] = 1.0
        return a

    def to_ctrl(self, xp, action, phys: Phys, prev_ctrl=None):
        """Actuator targets [..., nu] for actions [..., dim] (assumed finite, clipped here). With the previous step's
        targets `prev_ctrl` [..., nu] (the envs give them), a gripper with a max_speed moves its target no faster:
        a real gripper's own speed, which the deploy node's limits hold its commands to as well."""
        a = xp.clip(action, -1.0, 1.0)
        lay = self.task.layout
        q = phys.qpos[..., lay.arm_qpos]
        if self.kind == "joint_pos":
            q_target = self._lower + 0.5 * (a[..., :-1] + 1.0) * (self._upper - self._lower)
        else:
            c = self.cfg
            ee = lay.sensor(phys, "ee_pos")
            cur = lay.ee_frame(phys)
            target = xp.clip(ee + c.max_ee_delta * a[..., :3], self._ws_low, self._ws_high)
            if self.use_yaw:
                des = kin.down_frame(xp, kin.gripper_yaw(xp, cur[..., 0, :]) + c.max_yaw_delta * a[..., 3])
            else:
                des = self._down  # constant: broadcasts against the batch
            err = xp.concatenate([target - ee, kin.orientation_error(xp, cur, des)], axis=-1)
            anchors, axes = lay.joint_anchors_axes(xp, phys)
            jac = kin.arm_jacobian(xp, anchors, axes, ee)
            dq = kin.dls_step(xp, jac, err, q, self.robot.home_qpos, c.ik_damping, c.ik_null_gain)
            q_target = xp.clip(q + dq, self._lower, self._upper)
        g = self.robot.gripper
        grip = g.target(xp, a[..., -1:])
        if g.max_speed is not None and prev_ctrl is not None:
            step = g.max_speed / g.finger_travel / self.cfg.control_hz  # joint units per control step
            prev = prev_ctrl[..., self.robot.n_arm:self.robot.n_arm + 1]
            grip = xp.clip(grip, prev - step, prev + step)
        return xp.concatenate([q_target] + [grip] * g.n_servos, axis=-1)

    def reset_ctrl(self, xp, arm_q):
        """The targets [..., nu] that hold arm joint positions `arm_q` [..., n_arm] with the gripper open: an
        episode's first (its reset posture)."""
        g = self.robot.gripper
        return xp.concatenate([arm_q, xp.full(arm_q.shape[:-1] + (g.n_servos,), g.open, dtype=arm_q.dtype)], axis=-1)

    def joint_pos_action(self, xp, ctrl):
        """The joint_pos action [..., n_arm + 1] whose actuator targets are `ctrl` [..., nu] (to_ctrl's output in any action
        space): e.g. a scripted expert's ee_delta command, after the IK step, as the absolute joint targets it set."""
        n = self.robot.n_arm
        arm = 2.0 * (ctrl[..., :n] - self._lower) / (self._upper - self._lower) - 1.0
        grip = self.robot.gripper.grip(xp, ctrl[..., n:n + 1])
        return xp.clip(xp.concatenate([arm, grip], axis=-1), -1.0, 1.0)


def delay(xp, buffer, action, latency):
    """Push `action` into the latency buffer [..., L+1, A] (newest first); return (buffer, executed action)."""
    if buffer.shape[-2] == 1:  # no latency configured (static shape): the action runs now, nothing to keep
        return buffer, action
    buffer = xp.concatenate([action[..., None, :], buffer[..., :-1, :]], axis=-2)
    executed = xp.take_along_axis(buffer, latency[..., None, None], axis=-2)[..., 0, :]
    return buffer, executed


PREV_ACTIONS = "prev_actions"  # the observation key of the commanded-action history (EnvConfig.action_history)


class ActionHistory:
    """The last `length` commanded actions of `n` envs, oldest first, the neutral action before an episode's first
    steps: obs["prev_actions"] of the sim env (sim/env.py) and of the deploy node (real/), one implementation."""

    def __init__(self, n: int, length: int, neutral: np.ndarray):
        self.neutral = np.asarray(neutral, dtype=np.float32)
        self.buf = np.tile(self.neutral, (n, length, 1))  # [n, length, A]

    @property
    def dim(self) -> int:
        return self.buf.shape[1] * self.buf.shape[2]

    def reset(self, idx=slice(None)) -> None:
        self.buf[idx] = self.neutral

    def push(self, action) -> None:
        """Append each env's commanded action [n, A] (clipped to [-1, 1], as the action space applies it)."""
        if self.buf.shape[1]:
            self.buf[:, :-1] = self.buf[:, 1:]
            self.buf[:, -1] = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)

    def flat(self) -> np.ndarray:
        """[n, length * A] float32, a copy."""
        return self.buf.reshape(len(self.buf), -1).copy()

    def add_dims(self, dims: dict[str, int]) -> dict[str, int]:
        """Observation sizes `dims` with obs["prev_actions"]'s, when there is a history."""
        return {**dims, PREV_ACTIONS: self.dim} if self.buf.shape[1] else dims

    def add_to(self, obs: dict, idx=slice(None)) -> dict:
        """`obs` (of envs idx) with their obs["prev_actions"], when there is a history."""
        if self.buf.shape[1]:
            obs[PREV_ACTIONS] = self.flat()[idx]
        return obs

