"""Deployment configuration: the Hydra tree composes and validates, and bad values are refused by name."""

from __future__ import annotations

import pytest

from robot_rl.real.config import DeployConfigError, check_against_model, deploy_config
from tests.conftest import assert_one_line_error, run_cli


def compose(*overrides: str, config: str = "deploy"):
    """The composed top-level config (configs/<config>.yaml) with Hydra overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="robot_rl.configs", version_base=None):
        return hydra_compose(config_name=config, overrides=list(overrides))


def deploy_cfg(*overrides: str):
    """(composed config, validated DeployConfig) for the sim profile plus overrides."""
    cfg = compose(*overrides)
    return cfg, deploy_config(cfg.deploy)


def lift_env(**overrides):
    from robot_rl import sim

    return sim.make("lift", backend="mujoco", num_envs=1, **overrides)


def model_joints_of(env):
    from robot_rl.real.node import model_joints

    return model_joints(env)


def test_sim_and_ros2_profiles_compose_and_validate():
    env = lift_env()
    try:
        for profile in ("sim", "ros2"):
            _, d = deploy_cfg(f"deploy={profile}")
            check_against_model(d, model_joints_of(env))
            assert list(d.limits) == d.joints and len(d.joints) == 9
        assert deploy_cfg("deploy=ros2")[1].transport == "rclpy"
    finally:
        env.close()


def test_config_without_limits_for_a_joint_is_refused_naming_it(tmp_path):
    import dataclasses

    import yaml

    cfg, full = deploy_cfg()  # the robot's limits (its description's file)
    f = tmp_path / "limits.yaml"
    f.write_text(yaml.safe_dump({k: dataclasses.asdict(v) for k, v in full.limits.items() if k != "joint4"}))
    d = deploy_config({**cfg.deploy, "limits_file": str(f)})
    env = lift_env()
    try:
        with pytest.raises(DeployConfigError, match=r"no limits for joint\(s\) \['joint4'\]"):
            check_against_model(d, model_joints_of(env))
    finally:
        env.close()


def test_config_naming_joints_the_model_lacks_is_refused_naming_them():
    env = lift_env()
    try:
        _, d = deploy_cfg("+deploy.limits.elbow_extra={lower: -1, upper: 1, velocity: 1, max_step: 0.1}")
        with pytest.raises(DeployConfigError, match=r"\['elbow_extra'\] that the robot model does not have"):
            check_against_model(d, model_joints_of(env))
        _, d = deploy_cfg("deploy.joints=[joint1,joint2,joint3,joint4,joint5,joint6,joint7,finger_left,thumb]")
        with pytest.raises(DeployConfigError, match=r"\['thumb'\]"):
            check_against_model(d, model_joints_of(env))
        _, d = deploy_cfg("+deploy.limits.joint1.upper=3.5")
        with pytest.raises(DeployConfigError, match=r"deploy.limits.joint1=.*outside the model's range"):
            check_against_model(d, model_joints_of(env))
    finally:
        env.close()


@pytest.mark.parametrize("override, needle", [
    ("deploy.transport=zmq", "deploy.transport='zmq'"),
    ("deploy.blending.mode=average", "deploy.blending.mode='average'"),
    ("deploy.watchdog.stop_after_s=0.01", "must exceed hold_after_s"),
    ("+deploy.limits.joint2.velocity=-1", "deploy.limits.joint2.velocity=-1"),
    ("+deploy.limits.joint3.lower=3.0", "lower=3.0 must be below upper"),
    ("deploy.topics.joint_states=joint_states", "not a fully qualified ROS 2 topic name"),
    ("deploy.workspace_low=[0.9,0,0]", "workspace_low"),
    ("+deploy.bogus=1", "unknown deploy key(s) ['bogus']; valid keys:"),
    ("deploy.instruction=5", "deploy.instruction=5 must be a string"),
    ("deploy.inference.realtime_priority=60", "must be below deploy.realtime_priority"),
    ("deploy.domain_id=300", "deploy.domain_id=300"),
    ("deploy.ik_lead_m=-0.01", "deploy.ik_lead_m=-0.01 must be >= 0"),
])
def test_bad_deploy_values_are_refused_by_name(override, needle):
    cfg = compose(override)
    with pytest.raises(DeployConfigError) as e:
        deploy_config(cfg.deploy)
    assert needle in str(e.value)


def test_limits_file_replaces_the_profile_limits(tmp_path):
    f = tmp_path / "limits.yaml"
    import dataclasses

    cfg, full = deploy_cfg()
    lim = {k: dataclasses.asdict(v) for k, v in full.limits.items()}
    lim["joint1"]["velocity"] = 0.5
    import yaml

    f.write_text(yaml.safe_dump({"limits": lim}))
    _, d = deploy_cfg(f"deploy.limits_file={f}")
    assert d.limits["joint1"].velocity == 0.5
    del lim["finger_right"]
    f.write_text(yaml.safe_dump(lim))
    _, d = deploy_cfg(f"deploy.limits_file={f}")
    assert "finger_right" not in d.limits
    with pytest.raises(DeployConfigError, match="does not exist"):
        deploy_cfg(f"deploy.limits_file={tmp_path / 'nope.yaml'}")


def test_deploy_refuses_a_config_missing_joint_limits_before_loading_the_policy(tmp_path, cli_here):
    f = tmp_path / "limits.yaml"
    f.write_text("joint1: {lower: -1, upper: 1, velocity: 1, max_step: 0.1}\n")
    proc = cli_here("robot-rl-deploy", f"deploy.limits_file={f}", f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, "no limits for joint(s)", "joint2", "finger_right")


def test_sim_driver_refuses_unknown_joints(tmp_path):
    proc = run_cli("robot-rl-sim-driver", "+deploy.limits.wrist9={lower: -1, upper: 1, velocity: 1, max_step: 0.1}",
                   f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert_one_line_error(proc, "['wrist9']", "does not have")


def wrong_task_policy(env):
    """The lift expert claiming to be a push policy: its spec no longer fits the env."""
    from robot_rl.policies.expert import ExpertPolicy

    p = ExpertPolicy(env)
    p.spec.task = "push"
    return p


def test_deploy_refuses_a_policy_that_does_not_fit_the_task(tmp_path, cli_here):
    import os
    import subprocess

    from tests.conftest import BIN, ROOT

    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the policy factory lives in this test module
    proc = subprocess.run([str(BIN / "robot-rl-deploy"), "policy=tests.test_real_config:wrong_task_policy",
                           "deploy.inference.worker=thread", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert_one_line_error(proc, "policy does not fit the env", "task: policy 'push', env 'lift'")
    proc = cli_here("robot-rl-deploy", f"policy={tmp_path / 'no_such_checkpoint'}", "deploy.inference.worker=thread",
                    f"hydra.run.dir={tmp_path / 'run2'}")
    assert_one_line_error(proc, "neither 'expert', an existing checkpoint directory, nor 'module:function'")
    proc = cli_here("robot-rl-deploy", "policy=expert", "env.action_space=joint_pos", "deploy.inference.worker=thread",
                    f"hydra.run.dir={tmp_path / 'run3'}")
    assert_one_line_error(proc, "drives a robot in ee_delta only", "action_space='joint_pos'", "env.action_space=ee_delta")
