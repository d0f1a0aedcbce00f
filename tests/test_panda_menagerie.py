"""env.robot=panda_menagerie: Menagerie's Franka Panda behind the same interface as the primitive arm (sim/robot.py,
sim/menagerie.py). MuJoCo C here; MJX is checked by bench/panda_menagerie_mjx.py (its env step compiles in about a
minute on a busy 2-core CPU, too slow for the suite; docs/results/panda.md has its figures)."""

from __future__ import annotations

from pathlib import Path

from robot_rl import sim  # first: it picks MUJOCO_GL (EGL when headless) before mujoco is imported

import mujoco
import numpy as np
import pytest
import yaml

from robot_rl.sim import kinematics as kin
from robot_rl.sim import robot
from robot_rl.sim.experts import make_expert, run_episodes
from robot_rl.sim.task import Phys
from robot_rl.sim.tasks import TASKS
from tests.conftest import ROOT, run_main

ROBOT = "panda_menagerie"


@pytest.fixture(scope="module")
def panda():
    env = sim.make("lift", num_envs=4, robot=ROBOT)
    yield env
    env.close()


def _phys(model, q, fingers=robot.FINGER_MAX):
    d = mujoco.MjData(model)
    d.qpos[:7], d.qpos[7:9] = q, fingers
    mujoco.mj_forward(model, d)
    return d, Phys(d.qpos[None].copy(), d.qvel[None].copy(), d.sensordata[None].copy(), np.zeros((1, 0, 3)))


def test_every_task_builds_with_the_primitive_arms_observation_keys_and_sizes(panda):
    assert panda.model.nmesh > 40  # Menagerie's meshes, not our capsules
    for name in TASKS:
        prim = sim.make(name, num_envs=1)
        menagerie = panda if name == "lift" else sim.make(name, num_envs=1, robot=ROBOT)
        assert menagerie.obs_dims == prim.obs_dims, name
        assert (menagerie.action_dim, menagerie.model.nu) == (prim.action_dim, prim.model.nu), name
        prim.close()


def test_sensor_jacobian_equals_mujoco_site_jacobian(panda):
    lay = panda.task.layout
    for q in np.random.default_rng(0).uniform(robot.ARM_LOWER, robot.ARM_UPPER, (3, 7)):
        d, ph = _phys(panda.model, q)
        anchors, axes = lay.joint_anchors_axes(np, ph)
        jac = kin.arm_jacobian(np, anchors, axes, lay.sensor(ph, "ee_pos"))[0]
        jp, jr = np.zeros((3, panda.model.nv)), np.zeros((3, panda.model.nv))
        mujoco.mj_jacSite(panda.model, d, jp, jr, panda.model.site("grip_site").id)
        np.testing.assert_allclose(jac, np.vstack([jp[:, :7], jr[:, :7]]), atol=1e-9)


def test_home_posture_points_the_gripper_down_above_the_table(panda):
    _, ph = _phys(panda.model, panda.task.robot.home_qpos)
    np.testing.assert_allclose(panda.task.layout.sensor(ph, "ee_pos")[0], [0.45, 0.0, 0.25], atol=2e-3)
    np.testing.assert_allclose(panda.task.layout.sensor(ph, "ee_zaxis")[0], [0, 0, -1], atol=1e-3)


@pytest.mark.parametrize("robot_name", ["primitive", ROBOT])
def test_gripper_width_is_the_gap_between_the_pads(robot_name, panda):
    env = panda if robot_name == ROBOT else sim.make("lift", num_envs=1)
    m = env.model
    for q in (0.0, 0.013, robot.FINGER_MAX):
        d, ph = _phys(m, env.task.robot.home_qpos, q)
        y = d.xmat[m.body("hand").id].reshape(3, 3)[:, 1]  # the fingers close along the hand's y axis
        inner = [float(d.geom_xpos[m.geom(p).id] @ y) + s * m.geom_size[m.geom(p).id][1]
                 for p, s in (("left_pad", -1), ("right_pad", 1))]
        assert env.task.gripper_width(ph)[0] == pytest.approx(inner[0] - inner[1], abs=1e-6), (robot_name, q)


def test_ee_delta_ik_reaches_a_commanded_target(panda):
    obs = panda.reset(0)
    target = panda.task.field(obs, "proprio", "ee_pos") + np.array([0.06, -0.05, -0.08])
    for _ in range(20):
        ee = panda.task.field(obs, "proprio", "ee_pos")
        a = np.concatenate([np.clip((target - ee) / panda.cfg.max_ee_delta, -1, 1), np.ones((4, 1))], axis=1)
        obs, *_ = panda.step(a.astype(np.float32))
    assert np.abs(panda.task.field(obs, "proprio", "ee_pos") - target).max() < 0.003
    z = panda.task.layout.sensor(panda.phys(), "ee_zaxis")
    assert np.abs(z - [0, 0, -1]).max() < 0.01  # still pointing down


def test_scripted_expert_lifts_the_cube(panda):
    result = run_episodes(panda, make_expert(panda), panda.num_envs, seed=3)
    assert result["success_rate"] == 1.0, result["successes"]


def test_deploy_limits_are_the_models_joint_ranges(panda):
    limits = yaml.safe_load((ROOT / "configs/deploy/limits/panda.yaml").read_text())
    for m in (panda.model, sim.make("lift", num_envs=1).model):
        ranges = {m.joint(j).name: m.jnt_range[j].tolist() for j in range(m.njnt) if m.jnt_type[j] != 0}
        assert set(limits) == set(ranges)
        for j, lim in limits.items():
            assert [lim["lower"], lim["upper"]] == pytest.approx(ranges[j], abs=1e-9), j


def test_a_missing_menagerie_install_is_one_line_naming_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROBOT_RL_ASSETS", str(tmp_path / "assets"))
    code, out, err = run_main("robot-rl-eval", ["policy=expert", "episodes=1", "env.num_envs=1", "videos=0",
                                                f"env.robot={ROBOT}", f"hydra.run.dir={tmp_path / 'run'}"],
                              capsys, monkeypatch)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "python -m robot_rl.sim.menagerie" in err and "env.robot=primitive" in err
    assert not Path(tmp_path / "assets").exists()
