"""push: goal sampling, the success radius, and a level push that slides the cube instead of tipping it."""

from __future__ import annotations

import numpy as np

from robot_rl import sim
from robot_rl.sim import kinematics as kin
from robot_rl.sim.experts import make_expert
from robot_rl.sim.task import neutral_params


def test_goal_is_sampled_inside_the_reachable_box_and_away_from_the_cube():
    env = sim.make("push", num_envs=1)
    task, c = env.task, env.task.cfg
    u = np.random.default_rng(0).random((20000, task.n_reset_uniforms))
    u[:4000, 7:9] = np.random.default_rng(1).integers(0, 2, (4000, 2))  # cubes in the corners of their range
    qpos, mocap, target = task.sample_reset(np, u, neutral_params(np, (len(u),)))
    cube, goal = qpos[:, task.obj_qpos : task.obj_qpos + 2], target[:, :2]
    assert (goal[:, 0] >= c.goal_x[0]).all() and (goal[:, 0] <= c.goal_x[1]).all()
    assert (goal[:, 1] >= c.goal_y[0]).all() and (goal[:, 1] <= c.goal_y[1]).all()
    np.testing.assert_allclose(mocap[:, 0, :2], goal)
    dist = np.linalg.norm(goal - cube, axis=1)
    np.testing.assert_allclose(target[:, 2], dist, atol=1e-9)  # the stored initial distance is the real one
    assert dist.min() > 1.5 * c.goal_radius  # no episode starts solved or nearly so
    assert dist.max() <= c.goal_distance[1] + 1e-9
    # the goal direction covers the circle (not e.g. always away from the robot)
    ang = np.arctan2(*(goal - cube).T[::-1])
    assert np.histogram(ang, bins=8, range=(-np.pi, np.pi))[0].min() > 0.05 * len(u) / 8


def test_success_is_exactly_the_cube_centre_within_goal_radius():
    env = sim.make("push", num_envs=6)
    env.reset(0)
    task, radius = env.task, env.task.cfg.goal_radius
    phys = env.phys()
    offsets = np.array([0.0, 0.5, 0.99, 1.01, 1.5, 2.5]) * radius
    ang = np.linspace(0.0, 2.0 * np.pi, 6, endpoint=False)
    target = env.target.astype(np.float64)
    qpos = phys.qpos.copy()
    qpos[:, task.obj_qpos] = target[:, 0] + offsets * np.cos(ang)
    qpos[:, task.obj_qpos + 1] = target[:, 1] + offsets * np.sin(ang)
    phys = phys._replace(qpos=qpos)
    reward, success, progress = task.evaluate(np, phys, target, env.params)
    np.testing.assert_array_equal(success, offsets < radius)
    assert (reward[success] == 1.0).all() and (reward[~success] < 1.0).all() and (reward >= 0.0).all()
    assert (progress[success] == 1.0).all() and (progress[~success] < 1.0).all()
    obs = task.observe(np, phys, target, env.params)["object"]
    np.testing.assert_allclose(np.linalg.norm(obs[:, 7:9], axis=1), offsets, atol=1e-9)  # goal - cube in obs


def test_closed_gripper_push_slides_the_cube_without_tipping_or_knocking_it_first():
    n = 16
    env = sim.make("push", num_envs=n, terminate_on_success=False)
    task, expert = env.task, make_expert(env)
    obs = env.reset(7)
    start = task.field(obs, "object", "pos").copy()
    done_at = np.full(n, -1)
    moved = np.zeros(n, dtype=bool)
    tilt_max = np.zeros(n)
    for k in range(60):
        low = task.field(obs, "proprio", "ee_pos")[:, 2] < 0.03
        obs, _, _, info = env.step(expert.act(obs))
        # the hand comes down behind the cube from above: the cube first moves when the hand pushes it low
        now_moved = np.linalg.norm(task.field(obs, "object", "pos") - start, axis=1) > 1e-3
        assert (low | ~now_moved | moved).all(), k
        moved |= now_moved
        z = kin.quat_z_axis(np, env.qpos[:, task.obj_qpos + 3 : task.obj_qpos + 7])
        tilt = np.degrees(np.arccos(np.clip(z[:, 2], -1.0, 1.0)))
        tilt_max = np.where(done_at < 0, np.maximum(tilt_max, tilt), tilt_max)
        done_at[(done_at < 0) & info["success"]] = k
    assert (done_at >= 0).all(), done_at
    assert tilt_max.max() < 6.0, np.round(tilt_max, 1)  # slides flat on the table
