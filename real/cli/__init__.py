"""Console scripts of the deployment side: robot-rl-deploy, robot-rl-sim-driver."""


def single_env_and_deploy_config(cfg, why: str):
    """(EnvConfig with one MuJoCo C env, DeployConfig) from a deploy-side command's config, or fail() naming
    the bad value. `why` says why the command needs MuJoCo C."""
    from real.config import DeployConfigError, deploy_config
    from robot_rl.cli.common import env_config, fail

    env_cfg = env_config(cfg.env)
    if env_cfg.backend != "mujoco":
        fail(f"env.backend={env_cfg.backend!r}: {why}; set env.backend=mujoco")
    env_cfg.num_envs = 1
    try:
        return env_cfg, deploy_config(cfg.deploy)
    except DeployConfigError as e:
        fail(str(e))
