"""Robot model and IK: the Jacobian from frame sensors is MuJoCo's, the home pose is where we say."""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl import sim
from robot_rl.sim import kinematics as kin
from robot_rl.sim import robot
from robot_rl.sim.task import Phys


def _phys(env, q):
    m, d = env.model, mujoco.MjData(env.model)
    d.qpos[:7], d.qpos[7:9] = q, robot.FINGER_MAX
    mujoco.mj_forward(m, d)
    return m, d, Phys(d.qpos[None].copy(), d.qvel[None].copy(), d.sensordata[None].copy(), np.zeros((1, 0, 3)))


def test_sensor_jacobian_equals_mujoco_site_jacobian():
    env = sim.make("lift", num_envs=1)
    lay = env.task.layout
    for q in np.random.default_rng(0).uniform(robot.ARM_LOWER, robot.ARM_UPPER, (5, 7)):
        m, d, ph = _phys(env, q)
        anchors, axes = lay.joint_anchors_axes(np, ph)
        jac = kin.arm_jacobian(np, anchors, axes, lay.sensor(ph, "ee_pos"))[0]
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jp, jr, m.site("grip_site").id)
        np.testing.assert_allclose(jac, np.vstack([jp[:, :7], jr[:, :7]]), atol=1e-9)


def test_home_posture_points_the_gripper_down_above_the_table():
    env = sim.make("lift", num_envs=1)
    lay = env.task.layout
    _, _, ph = _phys(env, robot.HOME_QPOS)
    np.testing.assert_allclose(lay.sensor(ph, "ee_pos")[0], [0.45, 0.0, 0.25], atol=2e-3)
    np.testing.assert_allclose(lay.sensor(ph, "ee_zaxis")[0], [0, 0, -1], atol=1e-3)


def test_ee_delta_moves_the_gripper_where_commanded():
    env = sim.make("lift", num_envs=1, task_config={"arm_qpos_noise": 0.0})
    obs = env.reset(0)
    for axis in range(3):
        for sign in (1, -1):
            start = env.task.field(obs, "proprio", "ee_pos")[0].copy()
            a = np.array([[0, 0, 0, 1]], np.float32)
            a[0, axis] = sign
            for _ in range(4):
                obs, *_ = env.step(a)
            moved = env.task.field(obs, "proprio", "ee_pos")[0] - start
            assert sign * moved[axis] > 0.05, f"axis {axis} sign {sign}: moved {moved}"
            off = np.delete(moved, axis)
            assert np.abs(off).max() < 0.01


def test_joint_position_actions_reach_their_targets():
    env = sim.make("lift", num_envs=1, action_space="joint_pos")
    env.reset(0)
    target = np.array([0.2, 0.1, -0.1, -2.0, 0.1, 2.2, 0.5])
    a = 2 * (target - robot.ARM_LOWER) / (robot.ARM_UPPER - robot.ARM_LOWER) - 1
    a = np.append(a, 1.0)[None].astype(np.float32)
    for _ in range(20):
        obs, *_ = env.step(a)
    np.testing.assert_allclose(obs["proprio"][0, :7], target, atol=0.02)
