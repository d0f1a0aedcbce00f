"""env.robot=ur5e: MuJoCo Menagerie's UR5e with its Robotiq 2F-85 (sim/menagerie.py), one description in sim/robot.py
that every layer reads: the linkage gripper's width from its pads, one servo on its tendon, UR's joint names and
published limits on the wire. Expert figures over 100 episodes: docs/results/robots.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.sim.robot import get_robot
from tests.conftest import run_main

UR = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint")


@pytest.fixture(scope="module")
def ur5e():
    env = sim.make("lift", num_envs=8, robot="ur5e")
    yield env
    env.close()


def test_the_description_and_the_model_agree(ur5e):
    r = get_robot("ur5e")
    m = ur5e.model
    assert r.arm_joints == UR and r.joints == (*UR, "right_driver_joint")
    for j, lo, hi in zip(UR, r.arm_lower, r.arm_upper):  # UR's published limits, within the model's ranges
        assert m.joint(j).range[0] <= lo < hi <= m.joint(j).range[1], j
    assert m.nu == 7 and m.actuator("act_gripper").trntype == 3  # one servo, on the tendon (mjTRN_TENDON)
    assert ur5e.obs_dims["proprio"] == 18 and ur5e.action_dim == 4


def test_the_home_posture_points_the_gripper_down_over_the_table():
    env = sim.make("lift", num_envs=1, robot="ur5e", task_config={"arm_qpos_noise": 0.0})
    try:
        obs = env.reset(seed=0)
        assert np.allclose(env.task.field(obs, "proprio", "ee_pos")[0], [0.45, 0.0, 0.25], atol=2e-3)
        assert np.allclose(env.task.field(obs, "proprio", "ee_yaw")[0], [1.0, 0.0], atol=2e-3)
    finally:
        env.close()


def test_the_gripper_opens_to_85_mm_and_closes_at_its_speed(ur5e):
    """Its width, from the pad sites: the 2F-85's 85 mm stroke open, about nothing closed (grip -1, no object)."""
    obs = ur5e.reset(seed=0)
    assert np.allclose(ur5e.task.field(obs, "proprio", "gripper_width"), 0.085, atol=0.002)
    close = np.tile(np.array([0, 0, 1, -1], np.float32), (8, 1))  # up (away from the cube), grip closed
    g = get_robot("ur5e").gripper
    step = g.max_speed / g.finger_travel / ur5e.control_hz  # rad of the driver per control step: 2F-85's 150 mm/s
    for k in range(20):
        obs, *_ = ur5e.step(close)
        # sim moves the gripper's target no faster than the gripper can (the deploy node's limit, ur5e.yaml)
        assert np.allclose(ur5e.ctrl[:, -1], min(0.8, (k + 1) * step)), k
    assert (ur5e.task.field(obs, "proprio", "gripper_width") < 0.005).all()


@pytest.mark.parametrize("task", ["lift", "push", "peg_insert"])
def test_the_experts_work_on_it_unchanged(task):
    from robot_rl.sim.experts import make_expert, run_episodes

    env = sim.make(task, num_envs=8, robot="ur5e")
    try:
        result = run_episodes(env, make_expert(env, noise=0.1, seed=0), 8, seed=1000)
        assert result["success_rate"] >= 0.75, (task, result["success_rate"])
    finally:
        env.close()


def test_the_deploy_node_commands_urs_joints_with_urs_limits(ur5e):
    from robot_rl.real.config import check_against_model, deploy_config
    from robot_rl.real.node import model_joints

    d = deploy_config({}, get_robot("ur5e"))
    assert d.joints == [*UR, "right_driver_joint"]
    g = get_robot("ur5e").gripper  # the description's gripper speed and the limits file's say the same
    assert d.limits["right_driver_joint"].velocity == pytest.approx(g.max_speed / g.finger_travel, rel=0.01)
    assert d.limits["shoulder_pan_joint"].velocity == pytest.approx(np.pi, abs=1e-3)  # 180 deg/s
    assert d.limits["elbow_joint"].upper == pytest.approx(3.1415)
    check_against_model(d, model_joints(ur5e))


def test_a_missing_install_is_one_line_naming_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROBOT_RL_ASSETS", str(tmp_path / "assets"))
    code, out, err = run_main("robot-rl-eval", ["policy=expert", "episodes=1", "env.num_envs=1", "videos=0",
                                                "env.robot=ur5e", f"hydra.run.dir={tmp_path / 'run'}"],
                              capsys, monkeypatch)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "env.robot=ur5e" in err and "python -m robot_rl.sim.menagerie" in err
    assert not Path(tmp_path / "assets").exists()


def test_the_node_sees_what_sim_sees_from_urs_joint_states():
    """A UR5e reports its six joints and the 2F-85's driver only: the node's observation model places the linkage's
    other joints from the driver's position (a table over its range), so the gripper width, and every observation,
    match the sim's while the gripper closes on the cube."""
    from robot_rl.real.config import deploy_config
    from robot_rl.real.observation import ObservationModel
    from robot_rl.sim.experts import make_expert

    env = sim.make("lift", num_envs=1, robot="ur5e")
    try:
        om = ObservationModel(env, deploy_config({}, get_robot("ur5e")).joints)
        expert, obs, widths = make_expert(env), env.reset(3), []
        for _ in range(40):
            qa, da, o = om.qpos_adr, om.dof_adr, env.task.obj_qpos
            ours = om.observe(om.phys(env.qpos[0, qa], env.qvel[0, da], env.qpos[0, o: o + 7]), env.target[0])
            for k in obs:
                np.testing.assert_allclose(ours[k], obs[k], atol=2e-3, err_msg=k)
            widths.append(float(env.task.field(obs, "proprio", "gripper_width")[0, 0]))
            obs, *_ = env.step(expert.act(obs))
        assert max(widths) > 0.08 and min(widths) < 0.05  # it opened and closed on the cube
    finally:
        env.close()
