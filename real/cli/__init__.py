"""Console scripts of the deployment side: robot-rl-deploy, robot-rl-sim-driver, robot-rl-import-rosbag."""


def single_env_and_deploy_config(cfg, why: str):
    """(EnvConfig with one MuJoCo C env, DeployConfig) from a deploy-side command's config, or fail() naming
    the bad value. `why` says why the command needs MuJoCo C."""
    from robot_rl import sim
    from robot_rl.real.config import DeployConfigError, deploy_config
    from robot_rl.sim.robot import get_robot
    from robot_rl.common.cli import fail, or_fail

    env_cfg = or_fail(sim.env_config, cfg.env)
    if env_cfg.backend != "mujoco":
        fail(f"env.backend={env_cfg.backend!r}: {why}; set env.backend=mujoco")
    env_cfg.num_envs = 1
    return env_cfg, or_fail(deploy_config, cfg.deploy, get_robot(env_cfg.robot), errors=(DeployConfigError,))


def model_env(env_cfg, dcfg):
    """The task's one-env MuJoCo C model, with the deploy config's joints checked against it (or fail())."""
    from robot_rl import sim
    from robot_rl.real.config import DeployConfigError, check_against_model
    from robot_rl.real.node import model_joints
    from robot_rl.common.cli import or_fail

    env = or_fail(sim.make_from_config, env_cfg, errors=(sim.ConfigError,))
    or_fail(check_against_model, dcfg, model_joints(env), errors=(DeployConfigError,))
    return env
