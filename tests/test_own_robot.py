"""A robot of one's own, from outside the package (docs/own_robot.md): the example package tests/own_robot describes a
six-joint arm (its Robot, its MJCF of primitives and its limits file) and nothing of robot_rl is edited for it; the
experts, the observation fields, the deploy node's joints and limits and the policy checks all follow its
description. Both Pandas keep their behaviour (tests/test_robot.py, tests/test_panda_menagerie.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, assert_one_line_error, run_cli
from tests.test_own_task import fake_dist, pip_install

ARM = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint")


@pytest.fixture(scope="module")
def six_site(tmp_path_factory) -> Path:
    return pip_install(ROOT / "tests/own_robot", tmp_path_factory.mktemp("site") / "lib")


@pytest.fixture
def six_arm(six_site, monkeypatch):
    """This process's robot registry, rebuilt with the installed package's entry point on sys.path."""
    from robot_rl.sim.robot import ROBOTS

    monkeypatch.syspath_prepend(str(six_site))
    monkeypatch.setattr(ROBOTS, "_entries", None)
    return ROBOTS["six_arm"]


def test_the_experts_and_observation_fields_follow_the_description(six_arm):
    from robot_rl import sim
    from robot_rl.reward.episodes import task_fields
    from robot_rl.sim.experts import make_expert, run_episodes

    assert six_arm.n_arm == 6 and six_arm.joints == (*ARM, "finger_left", "finger_right")
    for task in ("lift", "push", "peg_insert"):
        env = sim.make(task, num_envs=8, robot="six_arm")
        try:
            assert env.robot == "six_arm" and env.obs_dims["proprio"] == 2 * 6 + 6
            fields = env.obs_fields["proprio"]
            assert fields["arm_q"] == slice(0, 6) and fields["ee_pos"] == slice(13, 16)
            # the reward models find the task's progress fields in stores of this arm from the sizes alone
            assert task_fields(task, dict(env.obs_dims)) == env.obs_fields
            assert env.action_space.dim == 4 + (task == "peg_insert")
            obs = env.reset(seed=0)
            # the fields read what they name: the arm's joints at home (+ reset noise), the hand where the IK put it
            q = env.task.field(obs, "proprio", "arm_q")
            assert np.abs(q - six_arm.home_qpos).max() <= env.task.cfg.arm_qpos_noise + 1e-6
            result = run_episodes(env, make_expert(env, noise=0.0), 8, seed=0)
            assert result["success_rate"] >= 0.75, (task, result["success_rate"])
        finally:
            env.close()


def test_joint_pos_actions_and_the_deploy_config_are_the_robots(six_arm):
    from robot_rl import sim
    from robot_rl.real.config import check_against_model, deploy_config
    from robot_rl.real.node import model_joints

    env = sim.make("lift", num_envs=1, robot="six_arm", action_space="joint_pos")
    try:
        assert env.action_dim == 7
        a = env.action_space.neutral  # the home posture, gripper open
        ctrl = env.action_space.to_ctrl(np, a[None].astype(np.float64), env.phys())
        assert np.allclose(ctrl[0, :6], six_arm.home_qpos, atol=1e-5) and np.allclose(ctrl[0, 6:], 0.04)
        d = deploy_config({}, six_arm)  # no joints, no limits given: the description's
        assert d.joints == list(six_arm.joints) and set(d.limits) == set(six_arm.joints)
        assert d.limits["elbow_joint"].upper == pytest.approx(3.1416)
        check_against_model(d, model_joints(env))
    finally:
        env.close()


def test_nothing_of_robot_rl_names_the_third_arm():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    named = [f for f in tracked if not f.startswith(("tests/own_robot/", "tests/test_own_robot.py", "docs/"))
             and f.endswith((".py", ".yaml", ".toml")) and "six_arm" in (ROOT / f).read_text()]
    assert named == []


@pytest.mark.mujoco_compat
def test_collect_on_the_third_arm_from_the_console_script(six_site, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(six_site))
    proc = run_cli("robot-rl-collect", "env.task=lift", "env.robot=six_arm", "episodes=8", "expert.noise=0.1",
                   "env.num_envs=4", f"hydra.run.dir={tmp_path / 'collect'}")
    assert proc.returncode == 0, proc.stderr
    rate = float(re.search(r"success rate ([0-9.]+)", proc.stdout)[1])
    assert rate >= 0.75, proc.stdout


def test_a_policy_of_another_robot_is_refused_naming_both(six_site, tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(six_site))
    proc = run_cli("robot-rl-eval", f"policy={tiny.policy}", "env.robot=six_arm", "episodes=2", "env.num_envs=2",
                   "videos=0", f"hydra.run.dir={tmp_path / 'eval'}")
    assert_one_line_error(proc, "robot: policy 'primitive', env 'six_arm'",
                          "observation 'proprio': policy expects dim 20, env gives 18")
    assert not (tmp_path / "eval/metrics.json").exists()


BAD_ARMS = {
    # a joint of the description that the MJCF does not have
    "ghost_joint": ("arm_joints=(*six_arm.ARM_JOINTS[:5], 'wrist_9_joint')",
                    ("robot bad_arm: joint(s) ['wrist_9_joint']", "not in its MJCF", "wrist_3_joint")),
    # limits wider than the model's joint range (the elbow's is +-3.1416 in the MJCF)
    "wide_limits": ("arm_upper=np.r_[six_arm.UPPER[:2], 4.0, six_arm.UPPER[3:]]",
                    ("robot bad_arm: arm limits", "elbow_joint", "outside its range in the MJCF")),
    # a home posture outside the limits
    "home_outside": ("home_qpos=np.r_[six_arm.SIX_ARM.home_qpos[:2], 3.5, six_arm.SIX_ARM.home_qpos[3:]]",
                     ("robot 'bad_arm'", "home_qpos lies outside [arm_lower, arm_upper]")),
}


@pytest.mark.parametrize("case", sorted(BAD_ARMS))
def test_a_broken_description_is_one_line(six_site, tmp_path, monkeypatch, case):
    change, needles = BAD_ARMS[case]
    module = ("import dataclasses\nimport numpy as np\nimport six_arm\nsix_arm.ARM_JOINTS = six_arm.JOINTS\n"
              f"ARM = dataclasses.replace(six_arm.SIX_ARM, name='bad_arm', {change})\n")
    site = fake_dist(tmp_path / "site", "bad-arm", "[robot_rl.robots]\nbad_arm = bad_arm_mod:ARM\n",
                     {"bad_arm_mod.py": module})
    monkeypatch.setenv("PYTHONPATH", f"{six_site}:{site}")
    proc = run_cli("robot-rl-collect", "env.task=lift", "env.robot=bad_arm", "episodes=1",
                   f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "run/episodes.zarr").exists()


def test_a_limits_file_of_another_robot_is_refused(six_site, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(six_site))
    proc = run_cli("robot-rl-sim-driver", "env.robot=six_arm", "deploy/limits=panda", "episodes=1",
                   f"hydra.run.dir={tmp_path / 'drv'}")
    assert_one_line_error(proc, "joint1", "the robot model does not have")
